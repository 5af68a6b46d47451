/*
 * tune_registry.h — the ops the tuner knows, listed here at the API level so that neither the
 * engine (autotune/) nor any op names another: each op's tw_tune_op (its spaces and device
 * callbacks, in its folder under runtime/ops/), and the engine's calls by op or kernel name, for
 * `twell tune`, the bench and the tests.
 */
#ifndef TWELL_TUNE_REGISTRY_H
#define TWELL_TUNE_REGISTRY_H

#include "gpu_tune.h"

/* The driver of op ("gate_pack", "ffn_infer"), or NULL. */
const tw_tune_op *tw_tune_op_find(const char *op);

/* The ops that have spaces, NULL-terminated: {"gate_pack", "ffn_infer", NULL}. */
const char *const *tw_tune_ops(void);

/* The spaces serving op, in order of preference (the fastest kernel family first). Returns how
 * many exist (possibly more than cap; only min(count, cap) are written). */
size_t tw_tune_spaces_for(const char *op, const tw_tune_space **out, size_t cap);

/* The first space for op that supports the problem on the device, or NULL. */
const tw_tune_space *tw_tune_space_pick(const char *op, const tw_tune_problem *p,
                                        const tw_tune_device *d);

/* The space whose kernel is named kernel, whatever its op, or NULL. */
const tw_tune_space *tw_tune_space_by_kernel(const char *kernel);

/* 1 when this build can launch and verify candidates of kernel (an op has callbacks for its space
 * and the template file is present in tw_template_dir(ctx); ctx may be NULL), else 0. */
int tw_tune_kernel_runnable(const twell_ctx *ctx, const char *kernel);

/* tw_tune_op_pick_runnable for the op named op; NULL for an unknown op. */
const tw_tune_space *tw_tune_space_runnable(const twell_ctx *ctx, const char *op,
                                            const tw_tune_problem *p, const tw_tune_device *d);

/* tw_tune_op_gpu / tw_tune_op_exhaustive for the op named op (kernel may be NULL: the first
 * runnable space). An unknown op is TWELL_ERR_UNSUPPORTED ("tuning needs a CUDA device" on a
 * CPU context, as for a known one). */
twell_status tw_tune_gpu(twell_ctx *ctx, const char *op, const twell_shape *shape, size_t M,
                         const tw_tune_options *opt, int retune, tw_tune_choice *out);
twell_status tw_tune_gpu_ex(twell_ctx *ctx, const char *op, const char *kernel,
                            const twell_shape *shape, size_t M, const tw_tune_options *opt,
                            int retune, tw_tune_choice *out);
twell_status tw_tune_gpu_exhaustive(twell_ctx *ctx, const char *op, const char *kernel,
                                    const twell_shape *shape, size_t M, const tw_tune_options *opt,
                                    tw_tune_config **cands, tw_tune_result *out);

#endif /* TWELL_TUNE_REGISTRY_H */
