/*
 * dense_gemm.h — the hand-written Hopper GEMM as the heavy-row route keeps it (dense_gemm_sm90.c):
 * the template parameters plans render and the launch with the row count on the device.
 */
#ifndef TWELL_DENSE_GEMM_H
#define TWELL_DENSE_GEMM_H

#include "cuda_driver.h"
#include "jit.h"

/* The template parameters of gemm_sm90 for GEMM g (TW_DENSE_UP or TW_DENSE_DOWN, dense_split.h)
 * of shape s, unsplit or split-K (split): what plans render, so the
 * tuner's cubin is theirs. Returns the count (≤ TW_DENSE_GEMM_NPARAMS). */
#define TW_DENSE_GEMM_NPARAMS (TW_SHAPE_NPARAMS + 4)
size_t tw_dense_gemm_params(const twell_shape *s, int g, int split,
                            tw_param out[TW_DENSE_GEMM_NPARAMS]);

/* The heavy-row route's GEMMs (cuda_ffn_heavy.c): gemm_sm90 module fn, compiled with DM = 1
 * (and SPLIT = split), over a block laid out for mcap rows of which the first min(mcap, *mrows)
 * (device memory written earlier in stream order) are computed. Operands as the dense path's:
 * A [mcap, kred]; B [ncols, kred] (G likewise, gated) or with tb Wd [kred, ncols]; out [mcap,
 * ncols] 16-bit, or (split) fp32 partials part[(s·mcap + row)·ncols + col] of nsplit slices
 * (1..kred/64). flags: gated, one word per unit of mcap rows. Context current. */
twell_status tw_cuda_dense_gemm_dm(twell_plan *plan, tw_CUfunction fn, int split, size_t mcap,
                                   uint32_t kred, uint32_t ncols, const void *a, const void *b,
                                   const void *g, int tb, void *out, const uint32_t *packed,
                                   const uint32_t *flags, unsigned nsplit, const int *mrows,
                                   twell_stream stream);

#endif /* TWELL_DENSE_GEMM_H */
