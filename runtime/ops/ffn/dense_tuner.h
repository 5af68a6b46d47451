/*
 * dense_tuner.h — what the dense path of twell_ffn_infer hands the tuning engine
 * (autotune/gpu_tune.h): the space of its GEMMs' split-K factors per M bucket (dense_space.c)
 * and the driver that verifies and times each candidate through a real plan (dense_tuner.c).
 */
#ifndef TWELL_DENSE_TUNER_H
#define TWELL_DENSE_TUNER_H

#include "gpu_tune.h"

/* The op's name in tuning records, `twell tune --ops` and reports. */
#define TW_DENSE_OP "ffn_dense"
/* The template whose GEMMs the factors split (its space's kernel). */
#define TW_DENSE_KERNEL "gemm_sm90"

/* The space: SPLIT_UP x SPLIT_DOWN over {1, 2, 3, 4, 6, 8, 12, 16}, pruned by
 * tw_dense_split_check (dense_split.h) for the problem's bucket of rows. */
extern const tw_tune_space tw_dense_space_split;

/* The op "ffn_dense": records per (shape, gated, dtype, M bucket, device). */
extern const tw_tune_op tw_dense_tune_op;

/* The split factors sp[0] (up), sp[1] (down) of a configuration of the space: 0, or -1 when cfg
 * is not one (another kernel, other parameters, a factor outside 1..255). Pure. */
int tw_dense_cfg_from_tune(const tw_tune_config *cfg, unsigned sp[2]);

#endif /* TWELL_DENSE_TUNER_H */
