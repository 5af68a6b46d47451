/*
 * ffn_tuner.h — what the ffn_infer op hands the tuning engine (autotune/gpu_tune.h): the
 * candidate space of ffn_fused (ffn_space.c) and the driver that compiles, verifies and times
 * its candidates through the tiled path's own interface, cuda_ffn.h (ffn_tuner.c).
 */
#ifndef TWELL_FFN_TUNER_H
#define TWELL_FFN_TUNER_H

#include "gpu_tune.h"

/* The op's name in tuning records and reports. */
#define TW_FFN_INFER_OP "ffn_infer"

/* The space of templates/ffn/ffn_fused.cu.lua. */
extern const tw_tune_space tw_ffn_space_fused;

/* The op "ffn_infer": ffn_fused; records per gated / non-gated shape. */
extern const tw_tune_op tw_ffn_tune_op;

#endif /* TWELL_FFN_TUNER_H */
