/*
 * gpu_tune_ffn.h — the tuner's callbacks for ffn_fused (fused sparse inference), used by
 * gpu_tune.c: candidates timed through a real plan whose tiled module is swapped per candidate.
 */
#ifndef TWELL_GPU_TUNE_FFN_H
#define TWELL_GPU_TUNE_FFN_H

#include "tuner.h"

typedef struct tw_gpu_ffn tw_gpu_ffn;

/* State for tuning ffn_fused on shape s at M rows (the bucket) on ctx, and the callbacks that use
 * it (cb->user is the state). Nothing is allocated on the device until cb->begin. Errors:
 * TWELL_ERR_NO_MEMORY; *out NULL on failure. */
twell_status tw_gpu_ffn_create(twell_ctx *ctx, const twell_shape *s, size_t M, tw_gpu_ffn **out,
                               tw_tune_callbacks *cb);

/* Frees the state (its plan, device buffers and any module left loaded). When st is an error and
 * a candidate failed, the first failure is appended to ctx's message. NULL is a no-op. */
void tw_gpu_ffn_destroy(tw_gpu_ffn *t, twell_status st);

#endif /* TWELL_GPU_TUNE_FFN_H */
