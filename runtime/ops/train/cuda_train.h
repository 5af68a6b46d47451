/*
 * cuda_train.h — twell_ffn_forward_train / twell_ffn_backward on CUDA (kernels in
 * templates/train/train_ffn.cu.lua), plus the test controls the GPU tests and the benchmark use to
 * look inside a CUDA training state.
 */
#ifndef TWELL_CUDA_TRAIN_H
#define TWELL_CUDA_TRAIN_H

#include "cuda_driver.h"

#include <stdarg.h>

/* The backend entry points (internal.h's tw_cuda_forward_train, tw_cuda_backward and
 * tw_cuda_train_state_release forward here). Arguments are validated by plan.c; these enter the
 * device context themselves.
 *
 * Forward: gate-pack (the plan's kernel) into the state's packed gate, recount of overflowing
 * row-tiles (tensor cores, batched per tile; SIMT for element-load inputs), scans that size the
 * spill and the row chunks, then ONE host synchronisation to read the totals (nnz, spill size,
 * chunks): buffers grow only when a total exceeds their capacity; then the spill, U, y and the
 * stats. TWELL_ERR_NO_MEMORY (nothing written to y or stats) when a buffer cannot grow. Backward:
 * no host synchronisation (sizes come from the forward's totals). Everything is enqueued on
 * `stream`; results are bitwise reproducible run to run. */
twell_status tw_cuda_train_forward(twell_plan *plan, size_t M, const void *x, const void *wg,
                                   const void *wu, const void *wd, void *y, float *stats,
                                   twell_train_state *state, twell_stream stream);
twell_status tw_cuda_train_backward(twell_plan *plan, twell_train_state *state, size_t M,
                                    const void *x, const void *wg, const void *wu, const void *wd,
                                    const void *dy, float lambda, void *dx, float *dwg, float *dwu,
                                    float *dwd, twell_stream stream);
/* Waits for the device, frees the state's device and pinned memory and modules. NULL-safe. */
void tw_cuda_train_release(twell_train_state *state);

#endif /* TWELL_CUDA_TRAIN_H */
