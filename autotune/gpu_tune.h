/*
 * gpu_tune.h — the tuning engine on a CUDA context, for any op: the device as the tuner sees it,
 * the choice of an op's space, tuning (select, exhaustive) with the callbacks the op supplies,
 * the stored winner a plan asks for, and the cubin of a chosen configuration. The engine names
 * no op: each op describes itself in a tw_tune_op (its folder under runtime/ops/), and the API
 * level lists them (runtime/tune_registry.h, which also offers these calls by op name).
 */
#ifndef TWELL_GPU_TUNE_H
#define TWELL_GPU_TUNE_H

#include "jit.h"
#include "tuner.h"

/* Template parameters a plan renders one configuration with, at most (the shape's and the
 * configuration's, derived ones included). */
#define TW_TUNE_OP_MAX_PARAMS 32

/* What an op hands the engine. Plain constant data; the spaces and callbacks live in the op's
 * folder. */
typedef struct tw_tune_op {
    const char *op;                     /* "gate_pack", "ffn_infer": the records' op name */
    const tw_tune_space *const *spaces; /* in order of preference (the fastest family first) */
    size_t nspaces;
    /* 1: the op is the same for gated and non-gated shapes, so one record serves both (the
     * problem's shape.gated is set to 1 whatever the caller's). */
    int gate_agnostic;
    /* The state for tuning candidates of space sp on shape s at M rows (the bucket) on ctx, and
     * the callbacks that use it (cb->user = *state): compile on worker threads, verify against
     * the CPU reference, time through the op's own launcher. Nothing is allocated on the device
     * before cb->begin. On failure nothing is left to free (*state NULL). NULL: the op cannot be
     * tuned on a device by this build. */
    twell_status (*create)(twell_ctx *ctx, const tw_tune_space *sp, const twell_shape *s, size_t M,
                           void **state, tw_tune_callbacks *cb);
    /* Frees create's state; when st is an error and a candidate failed, the first failure is
     * appended to ctx's message. */
    void (*destroy)(void *state, twell_status st);
    /* The template parameters a plan renders cfg with for s on ctx's device (so the tuner's
     * cubin is the one plans find in the cache), at most cap; the count, or 0 when cfg cannot
     * run there. NULL: the shape's and cfg's own (tw_tune_config_params). */
    size_t (*params)(twell_ctx *ctx, const tw_tune_config *cfg, const twell_shape *s, tw_param *out,
                     size_t cap);
} tw_tune_op;

/* The device ctx runs on, as the tuner sees it (name, arch, SMs, driver, limits).
 * TWELL_ERR_UNSUPPORTED on a CPU context. */
twell_status tw_tune_device_of(twell_ctx *ctx, tw_tune_device *out);

/* The problem op tunes for (shape s, M rows): op's name, the shape (gated set for a
 * gate-agnostic op), M's bucket. */
void tw_tune_op_problem(const tw_tune_op *op, const twell_shape *s, size_t M, tw_tune_problem *out);

/* op's space whose template is `kernel`, or NULL. */
const tw_tune_space *tw_tune_op_space(const tw_tune_op *op, const char *kernel);

/* op's first space (in preference order) that supports the problem on d, or NULL. */
const tw_tune_space *tw_tune_op_pick(const tw_tune_op *op, const tw_tune_problem *p,
                                     const tw_tune_device *d);

/* 1 when this build can launch and verify candidates of sp, one of op's spaces, on a device (op
 * has callbacks and sp's template file is present in tw_template_dir(ctx); ctx may be NULL: the
 * process's default directory), else 0. */
int tw_tune_op_runnable(const twell_ctx *ctx, const tw_tune_op *op, const tw_tune_space *sp);

/* The space op is tuned with on d: the first (in preference order) that supports the problem
 * and is runnable for ctx (may be NULL); NULL when there is none. */
const tw_tune_space *tw_tune_op_pick_runnable(const twell_ctx *ctx, const tw_tune_op *op,
                                              const tw_tune_problem *p, const tw_tune_device *d);

/* The configuration of op for (shape, M) on ctx's device: the stored winner when there is one
 * (nothing compiled or timed), else tuned now with the real kernels on synthetic data of the
 * M bucket's size (about 0.5% of N active per row, never zeros: tw_synth), each candidate
 * verified against the CPU reference on a probe, then stored. kernel: the space to use (e.g.
 * "gate_pack_simt"; NULL: the first runnable one); the record is the op's (one per problem), so
 * tuning another kernel replaces it. In every case the chosen config's cubin is then made
 * present in the kernel cache, so a later plan compiles nothing. opt may be NULL (defaults).
 * Errors: TWELL_ERR_UNSUPPORTED (CPU context; no runnable kernel; `kernel` not op's, not
 * supporting the problem or not runnable), those of tw_tune_select, and the compile errors of the
 * chosen config. */
twell_status tw_tune_op_gpu(twell_ctx *ctx, const tw_tune_op *op, const char *kernel,
                            const twell_shape *shape, size_t M, const tw_tune_options *opt,
                            int retune, tw_tune_choice *out);

/* Exhaustive search with the same harness, for tests and studies: every unpruned candidate of
 * the space (chosen as in tw_tune_op_gpu) compiled, verified and timed in ONE interleaved batch,
 * with no budget, reading and storing no record. opt supplies reps, warm-up and threads (may be
 * NULL). *cands (malloc'd, caller frees, also on failure) receives the candidates and *out the
 * tuner's result over them (tw_tune_result_free it either way). Errors as tw_tune_run. */
twell_status tw_tune_op_exhaustive(twell_ctx *ctx, const tw_tune_op *op, const char *kernel,
                                   const twell_shape *shape, size_t M, const tw_tune_options *opt,
                                   tw_tune_config **cands, tw_tune_result *out);

/* How a plan consults the tuner for M's bucket: the stored winner of (op, shape, bucket) on ctx's
 * device; with no record and tune_now set, tuned first (tw_tune_op_gpu) provided the tuner would
 * pick `kernel` anyway, so a plan forced onto another kernel never replaces the record other
 * plans use. The winner must be a config of `kernel` that its space accepts for the problem and
 * that take(cfg, arg) turns into the plan's form (returning 0). 0 when it does, else -1: the
 * plan keeps its default, and why is logged (plan_what names the plan in "does not apply to
 * this <plan_what> plan"). */
int tw_tune_op_winner(twell_ctx *ctx, const tw_tune_op *op, const char *kernel,
                      const twell_shape *shape, size_t M, int tune_now, const char *plan_what,
                      int (*take)(const tw_tune_config *cfg, void *arg), void *arg);

/* What twell_plan_tune asks of the engine for a plan running `kernel`, one of op's templates:
 * makes sure (op, shape, M's bucket) has a stored winner on ctx's device. Nothing is timed when
 * one is stored (retune 0); otherwise, provided the tuner would pick `kernel` for the problem (as
 * tw_tune_op_winner), it is tuned now (tw_tune_op_gpu; retune: timed again, replaced only by a
 * challenger at least 3% faster). TWELL_OK also when the tuner would pick another kernel or none:
 * the plan keeps its default. Errors: those of tw_tune_device_of, the store and tw_tune_op_gpu. */
twell_status tw_tune_op_ensure(twell_ctx *ctx, const tw_tune_op *op, const char *kernel,
                               const twell_shape *shape, size_t M, int retune);

/* The cubin of cfg (one of op's configurations) for shape on ctx's device (kernel cache hit, or
 * compiled and published): what a plan does with a chosen config. Errors: TWELL_ERR_UNSUPPORTED
 * (cfg cannot run here), those of tw_jit_cubin. */
twell_status tw_tune_op_cubin(twell_ctx *ctx, const tw_tune_op *op, const tw_tune_config *cfg,
                              const twell_shape *shape, tw_cubin *out);

#endif /* TWELL_GPU_TUNE_H */
