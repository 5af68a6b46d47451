/*
 * gpu_tune.c — the tuning engine on a CUDA device (gpu_tune.h): the device as the tuner sees it,
 * an op's space, a tuning session over the op's callbacks (candidates compiled by NVRTC on
 * worker threads, checked against the CPU reference on a probe, timed with CUDA events after an
 * L2 flush: gpu_tune_harness.c), the winner a plan asks for, and the chosen config's cubin.
 */
#include "gpu_tune.h"

#include "cuda_driver.h"
#include "shape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

twell_status tw_tune_device_of(twell_ctx *ctx, tw_tune_device *out) {
    memset(out, 0, sizeof *out);
    if (!ctx || !ctx->cuda)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED, "tune: tuning needs a CUDA device");
    const tw_cuda *c = ctx->cuda;
    snprintf(out->name, sizeof out->name, "%s", c->name);
    snprintf(out->arch, sizeof out->arch, "%s", c->arch);
    out->cc_major = c->cc_major;
    out->cc_minor = c->cc_minor;
    out->sm_count = c->sm_count;
    out->driver_version = c->driver_version;
    out->smem_per_block = c->smem_optin;
    out->smem_per_sm = c->smem_optin + 1024; /* the driver reserves 1 KiB per block */
    /* The same on every architecture we target (CUDA C++ Programming Guide, compute
     * capabilities table): 64 K registers per SM, 255 per thread, 1024 threads per block;
     * portable clusters of up to 8 from sm_90. */
    out->regs_per_sm = 65536;
    out->max_regs_per_thread = 255;
    out->max_threads_per_block = 1024;
    out->max_cluster = c->cc_major >= 9 ? 8 : 1;
    out->l2_bytes = c->l2_bytes;
    return TWELL_OK;
}

/* ---- an op's spaces ---- */

void tw_tune_op_problem(const tw_tune_op *op, const twell_shape *s, size_t M,
                        tw_tune_problem *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->op, sizeof out->op, "%s", op->op);
    out->shape = *s;
    if (op->gate_agnostic)
        out->shape.gated = 1; /* one record serves gated and non-gated FFNs */
    out->M = tw_tune_m_bucket(M);
}

const tw_tune_space *tw_tune_op_space(const tw_tune_op *op, const char *kernel) {
    for (size_t i = 0; op && kernel && i < op->nspaces; i++)
        if (!strcmp(op->spaces[i]->kernel, kernel))
            return op->spaces[i];
    return NULL;
}

static int tw_supports(const tw_tune_space *sp, const tw_tune_problem *p, const tw_tune_device *d) {
    return !sp->supports || sp->supports(p, d);
}

const tw_tune_space *tw_tune_op_pick(const tw_tune_op *op, const tw_tune_problem *p,
                                     const tw_tune_device *d) {
    for (size_t i = 0; op && i < op->nspaces; i++)
        if (tw_supports(op->spaces[i], p, d))
            return op->spaces[i];
    return NULL;
}

int tw_tune_op_runnable(const twell_ctx *ctx, const tw_tune_op *op, const tw_tune_space *sp) {
    return op && op->create && sp && tw_tune_op_space(op, sp->kernel) == sp &&
           tw_template_exists(ctx, sp->kernel);
}

const tw_tune_space *tw_tune_op_pick_runnable(const twell_ctx *ctx, const tw_tune_op *op,
                                              const tw_tune_problem *p, const tw_tune_device *d) {
    for (size_t i = 0; op && i < op->nspaces; i++)
        if (tw_supports(op->spaces[i], p, d) && tw_tune_op_runnable(ctx, op, op->spaces[i]))
            return op->spaces[i];
    return NULL;
}

twell_status tw_tune_op_cubin(twell_ctx *ctx, const tw_tune_op *op, const tw_tune_config *cfg,
                              const twell_shape *shape, tw_cubin *out) {
    tw_param prm[TW_TUNE_OP_MAX_PARAMS];
    const char *arch = ctx && ctx->cuda ? ctx->cuda->arch : "sm_90a";
    size_t np;
    memset(out, 0, sizeof *out);
    if (op->params) {
        if (!(np = op->params(ctx, cfg, shape, prm, TW_TUNE_OP_MAX_PARAMS)))
            return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                            "tune: %s config not launchable for K=%u N=%u here", cfg->kernel,
                            shape->K, shape->N);
    } else {
        np = tw_tune_config_params(cfg, shape, prm, TW_TUNE_OP_MAX_PARAMS);
    }
    return tw_jit_cubin(ctx, cfg->kernel, prm, np, arch, out);
}

/* ---- a tuning session: the problem, the device, the space and the op's callbacks ---- */

typedef struct tw_session {
    const tw_tune_op *op;
    tw_tune_problem p;
    tw_tune_device dev;
    const tw_tune_space *space;
    void *state; /* the op's (create / destroy) */
    tw_tune_callbacks cb;
} tw_session;

/* kernel: the space to use (NULL: the first runnable one). Once this succeeds, tw_session_close
 * releases t. */
static twell_status tw_session_open(twell_ctx *ctx, const tw_tune_op *op, const char *kernel,
                                    const twell_shape *shape, size_t M, tw_session *t) {
    memset(t, 0, sizeof *t);
    twell_status st = tw_tune_device_of(ctx, &t->dev);
    if (st != TWELL_OK)
        return st;
    twell_shape checked;
    if ((st = tw_shape_import(ctx, "tune", shape, &checked)) != TWELL_OK)
        return st;
    tw_tune_op_problem(op, shape, M, &t->p);
    const tw_tune_space *sp = NULL;
    if (kernel) {
        sp = tw_tune_op_space(op, kernel);
        if (sp && (strcmp(sp->op, t->p.op) != 0 || !tw_supports(sp, &t->p, &t->dev) ||
                   !tw_tune_op_runnable(ctx, op, sp)))
            sp = NULL;
    } else {
        sp = tw_tune_op_pick_runnable(ctx, op, &t->p, &t->dev);
    }
    if (!sp)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "tune: no kernel%s%s for %s that this build can launch on %s",
                        kernel ? " " : "", kernel ? kernel : "", t->p.op, t->dev.arch);
    t->space = sp;
    if ((st = op->create(ctx, sp, shape, t->p.M, &t->state, &t->cb)) != TWELL_OK)
        return st;
    t->op = op;
    return TWELL_OK;
}

static void tw_session_close(tw_session *t, twell_status st) {
    if (t->op && t->op->destroy)
        t->op->destroy(t->state, st);
    t->op = NULL;
    t->state = NULL;
}

twell_status tw_tune_op_gpu(twell_ctx *ctx, const tw_tune_op *op, const char *kernel,
                            const twell_shape *shape, size_t M, const tw_tune_options *opt,
                            int retune, tw_tune_choice *out) {
    memset(out, 0, sizeof *out);
    out->ms = out->default_ms = NAN;
    tw_session t;
    twell_status st = tw_session_open(ctx, op, kernel, shape, M, &t);
    if (st != TWELL_OK)
        return st;
    st = tw_tune_select(ctx, &t.p, &t.dev, t.space, &t.cb, opt, retune, out);
    tw_session_close(&t, st);
    if (st != TWELL_OK)
        return st;
    /* The record alone would still leave a compile to the next process. */
    tw_cubin cubin;
    st = tw_tune_op_cubin(ctx, op, &out->config, shape, &cubin);
    tw_cubin_free(&cubin);
    return st;
}

twell_status tw_tune_op_exhaustive(twell_ctx *ctx, const tw_tune_op *op, const char *kernel,
                                   const twell_shape *shape, size_t M, const tw_tune_options *opt,
                                   tw_tune_config **cands, tw_tune_result *out) {
    *cands = NULL;
    memset(out, 0, sizeof *out);
    tw_session t;
    twell_status st = tw_session_open(ctx, op, kernel, shape, M, &t);
    if (st != TWELL_OK)
        return st;
    tw_tune_config *c = NULL;
    size_t n = 0, di = SIZE_MAX;
    st = tw_tune_space_enumerate(t.space, &t.p, &t.dev, &c, &n, &di, NULL);
    if (st == TWELL_OK && n == 0)
        st = tw_error(ctx, TWELL_ERR_UNSUPPORTED, "tune: every config of %s is pruned",
                      t.space->kernel);
    if (st != TWELL_OK) {
        tw_session_close(&t, st);
        free(c);
        return st;
    }
    tw_tune_options o = opt ? *opt : tw_tune_options_default();
    o.mode = TW_TUNE_MEASURE;
    o.budget_s = 0.0;
    o.batch = n;
    st = tw_tune_run(ctx, c, n, di, SIZE_MAX, &t.cb, &o, out);
    tw_session_close(&t, st);
    *cands = c;
    return st;
}

int tw_tune_op_winner(twell_ctx *ctx, const tw_tune_op *op, const char *kernel,
                      const twell_shape *shape, size_t M, int tune_now, const char *plan_what,
                      int (*take)(const tw_tune_config *cfg, void *arg), void *arg) {
    tw_tune_device dev;
    if (tw_tune_device_of(ctx, &dev) != TWELL_OK)
        return -1;
    tw_tune_problem p;
    tw_tune_op_problem(op, shape, M, &p);
    tw_tune_record rec;
    twell_status st = tw_tune_store_load(ctx, &p, &dev, &rec);
    if (st != TWELL_OK && st != TWELL_ERR_NOT_FOUND)
        return -1;
    if (st == TWELL_ERR_NOT_FOUND) {
        const tw_tune_space *sp = tw_tune_op_pick_runnable(ctx, op, &p, &dev);
        if (!tune_now || !sp || strcmp(sp->kernel, kernel) != 0)
            return -1;
        tw_tune_options o = tw_tune_options_default();
        tw_tune_choice ch;
        tw_log(ctx, TWELL_LOG_INFO, "%s: tuning on first use: K=%u N=%u M bucket %zu", p.op,
               p.shape.K, p.shape.N, p.M);
        if (tw_tune_op_gpu(ctx, op, NULL, shape, M, &o, 0, &ch) != TWELL_OK) {
            tw_log(ctx, TWELL_LOG_WARN, "%s: tuning failed, using the default: %s", p.op,
                   tw_errmsg(ctx));
            return -1;
        }
        rec.config = ch.config;
    }
    char canon[TW_TUNE_CANON_MAX];
    tw_tune_config_canon(&rec.config, canon, sizeof canon);
    const tw_tune_space *sp = tw_tune_op_space(op, rec.config.kernel);
    if (strcmp(rec.config.kernel, kernel) != 0 || !sp || strcmp(sp->op, p.op) != 0 ||
        !tw_tune_space_accepts(sp, &p, &dev, &rec.config) || take(&rec.config, arg) != 0) {
        tw_log(ctx, TWELL_LOG_INFO,
               "%s: stored config %s does not apply to this %s%splan (M bucket %zu); default used",
               p.op, canon, plan_what, plan_what[0] ? " " : "", p.M);
        return -1;
    }
    return 0;
}

twell_status tw_tune_op_ensure(twell_ctx *ctx, const tw_tune_op *op, const char *kernel,
                               const twell_shape *shape, size_t M, int retune) {
    tw_tune_device dev;
    twell_status st = tw_tune_device_of(ctx, &dev);
    if (st != TWELL_OK)
        return st;
    tw_tune_problem p;
    tw_tune_op_problem(op, shape, M, &p);
    tw_tune_record rec;
    st = tw_tune_store_load(ctx, &p, &dev, &rec);
    if (st != TWELL_OK && st != TWELL_ERR_NOT_FOUND)
        return st;
    if (st == TWELL_OK && !retune)
        return TWELL_OK;
    /* Only where the tuner would pick the plan's kernel, as tw_tune_op_winner: another kernel's
     * record is not this plan's to write (plans of the usual variant read it), and a plan whose
     * kernel has no runnable space keeps its default. */
    const tw_tune_space *sp = tw_tune_op_pick_runnable(ctx, op, &p, &dev);
    if (!sp || strcmp(sp->kernel, kernel) != 0) {
        tw_log(ctx, TWELL_LOG_INFO,
               "%s: nothing to tune for %s at M bucket %zu (the tuner's kernel here is %s)", p.op,
               kernel, p.M, sp ? sp->kernel : "none");
        return TWELL_OK;
    }
    tw_tune_options o = tw_tune_options_default();
    tw_tune_choice ch;
    tw_log(ctx, TWELL_LOG_INFO, "%s: tuning K=%u N=%u M bucket %zu%s", p.op, p.shape.K, p.shape.N,
           p.M, retune ? " again" : "");
    return tw_tune_op_gpu(ctx, op, NULL, shape, M, &o, retune, &ch);
}
