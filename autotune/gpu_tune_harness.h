/*
 * gpu_tune_harness.h — what the ops' device tuners (runtime/ops/<op>/<op>_tuner.c) share: synthetic
 * inputs of a bucket, candidate compiles on worker contexts, the record of the first failure, and
 * one timed run after an L2 flush.
 */
#ifndef TWELL_GPU_TUNE_HARNESS_H
#define TWELL_GPU_TUNE_HARNESS_H

#include "cuda_driver.h"
#include "jit.h"
#include "synth.h"
#include "tuner.h"

/* A tuner's state common to both kernels. flush (flush_bytes, twice L2) and ev are allocated by
 * the tuner's own set-up, in its order; tw_gpu_harness_free releases them. */
typedef struct tw_gpu_harness {
    twell_ctx *ctx;
    void *flush;
    size_t flush_bytes;
    tw_cuda_event ev[2];
    uint32_t salt;       /* a different flush value every run */
    char first_err[704]; /* the first candidate failure, for the message if all fail */
} tw_gpu_harness;

/* Starts h for ctx (a CUDA context): nothing allocated, flush_bytes set to twice the L2 size
 * (32 MiB assumed when the driver reports none). */
void tw_gpu_harness_init(tw_gpu_harness *h, twell_ctx *ctx);

/* Frees the flush buffer and the events (NULL ones skipped) and, when st is an error and a
 * candidate failed, appends the first failure to ctx's message. h is left as tw_gpu_harness_init
 * leaves it. */
void tw_gpu_harness_free(tw_gpu_harness *h, twell_status st);

/* Synthetic inputs of M rows for shape s with about 0.5% of N active per row (29 of 5632, the
 * sparsity docs/DESIGN.md §1 reports; never zeros), gated or not. Errors: those of tw_synth_create,
 * with a "tune:" message; *out NULL on failure. */
twell_status tw_gpu_harness_synth(twell_ctx *ctx, const twell_shape *s, size_t M, int gated,
                                  tw_synth_ffn **out);

/* Candidates are allowed to fail (their score is +∞), so each failure is only logged; the first
 * is kept for the message when none succeeds. */
void tw_gpu_harness_note(tw_gpu_harness *h, const tw_tune_config *cfg, const char *what,
                         const char *why);

/* On a worker thread: tw_jit_cubin_detached of kernel with prm for h's device, sharing h's
 * context's disk cache (so plans later find the cubin); err (errlen bytes) says why it failed. */
twell_status tw_gpu_harness_compile(const tw_gpu_harness *h, const char *kernel,
                                    const tw_param *prm, size_t np, tw_cubin *out, char *err,
                                    size_t errlen);

/* One timed run of candidate cfg, h's context made current for it: prepare(arg) when not NULL
 * (outside the timed span: e.g. a module swap that synchronises), then L2 flushed by writing
 * h->flush, then CUDA events around launch(arg) on the default stream. *ms_out set on success;
 * on failure the candidate is noted ("failed to launch") and the error returned. */
twell_status tw_gpu_harness_measure(tw_gpu_harness *h, const tw_tune_config *cfg,
                                    twell_status (*prepare)(void *arg),
                                    twell_status (*launch)(void *arg), void *arg, double *ms_out);

#endif /* TWELL_GPU_TUNE_HARNESS_H */
