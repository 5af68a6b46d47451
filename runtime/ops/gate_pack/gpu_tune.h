/*
 * gpu_tune.h — the autotuner on a CUDA context: real compile / verify / measure callbacks for
 * the kernels this build can launch with a tuned configuration, on synthetic sparse data, and
 * the entry point the prewarm tool and plans call.
 */
#ifndef TWELL_GPU_TUNE_H
#define TWELL_GPU_TUNE_H

#include "tuner.h"

/* The device ctx runs on, as the tuner sees it (name, arch, SMs, driver, limits).
 * TWELL_ERR_UNSUPPORTED on a CPU context. */
twell_status tw_tune_device_of(twell_ctx *ctx, tw_tune_device *out);

/* 1 when this build can launch and verify candidates of kernel (a launcher exists here and the
 * template file is present), else 0. */
int tw_tune_kernel_runnable(const char *kernel);

/* The space op is tuned with on d: the first space for op (in preference order) that supports
 * the problem and whose kernel is runnable; NULL when there is none. */
const tw_tune_space *tw_tune_space_runnable(const char *op, const tw_tune_problem *p,
                                            const tw_tune_device *d);

/* The configuration of op for (shape, M) on ctx's device: the stored winner when there is one
 * (nothing compiled or timed), else tuned now with the real kernels on synthetic data of the
 * M bucket's size (about 0.5% of N active per row, never zeros: tw_synth), each candidate
 * verified against the CPU reference on a 67-row probe, then stored. For gate_pack the record's
 * key ignores shape->gated (the op is the same), as plans do when they look it up. In every case
 * the chosen config's cubin is then made present in the kernel cache, so a later plan compiles
 * nothing. opt may be NULL (defaults). Errors: TWELL_ERR_UNSUPPORTED (CPU context, unknown op, no
 * runnable kernel for it), those of tw_tune_select, and the compile errors of the chosen config. */
twell_status tw_tune_gpu(twell_ctx *ctx, const char *op, const twell_shape *shape, size_t M,
                         const tw_tune_options *opt, int retune, tw_tune_choice *out);

/* tw_tune_gpu with the space of template `kernel` (e.g. "gate_pack_simt") instead of the first
 * runnable one; NULL: the same as tw_tune_gpu. TWELL_ERR_UNSUPPORTED when that kernel does not
 * serve op, does not support the problem on this device or cannot be launched by this build. The
 * record is the op's (one per problem), so tuning another kernel replaces it. */
twell_status tw_tune_gpu_ex(twell_ctx *ctx, const char *op, const char *kernel,
                            const twell_shape *shape, size_t M, const tw_tune_options *opt,
                            int retune, tw_tune_choice *out);

/* How a plan consults the tuner for M's bucket: the stored winner of (op, shape, bucket) on ctx's
 * device; with no record and tune_now set, tuned first (tw_tune_gpu) provided the tuner would
 * pick `kernel` anyway, so a plan forced onto another kernel never replaces the record other
 * plans use. The winner must be a config of `kernel` that its space accepts for the problem and
 * that take(cfg, arg) turns into the plan's form (returning 0). 0 when it does, else -1: the
 * plan keeps its default, and why is logged (plan_what names the plan in "does not apply to
 * this <plan_what> plan"). */
int tw_tune_winner(twell_ctx *ctx, const char *op, const char *kernel, const twell_shape *shape,
                   size_t M, int tune_now, const char *plan_what,
                   int (*take)(const tw_tune_config *cfg, void *arg), void *arg);

/* Exhaustive search with the same harness, for tests and studies: every unpruned candidate of
 * the space (chosen as in tw_tune_gpu_ex) compiled, verified and timed in ONE interleaved batch,
 * with no budget, reading and storing no record. opt supplies reps, warm-up and threads (may be
 * NULL). *cands (malloc'd, caller frees, also on failure) receives the candidates and *out the
 * tuner's result over them (tw_tune_result_free it either way). Errors as tw_tune_run. */
twell_status tw_tune_gpu_exhaustive(twell_ctx *ctx, const char *op, const char *kernel,
                                    const twell_shape *shape, size_t M, const tw_tune_options *opt,
                                    tw_tune_config **cands, tw_tune_result *out);

/* The cubin of cfg for shape on ctx's device (kernel cache hit, or compiled and published): what
 * a plan does with a chosen config. Errors: those of tw_jit_cubin. */
twell_status tw_tune_gpu_cubin(twell_ctx *ctx, const tw_tune_config *cfg, const twell_shape *shape,
                               tw_cubin *out);

#endif /* TWELL_GPU_TUNE_H */
