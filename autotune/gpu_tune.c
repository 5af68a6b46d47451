/*
 * gpu_tune.c — the tuner's callbacks on a CUDA device: candidates compiled by NVRTC on worker
 * threads (each with its own CPU context, sharing the disk cache), loaded and checked against the
 * CPU reference on a probe, then timed with CUDA events after an L2 flush. Candidates run through
 * the launchers plans use; a kernel without one here is not tuned on the device.
 */
#include "gpu_tune.h"

#include "cpu_ref.h"
#include "cuda_driver.h"
#include "cuda_ffn.h"
#include "cuda_gate_pack.h"
#include "gpu_tune_ffn.h"
#include "pack_check.h"
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TW_PROBE_ROWS 67 /* awkward on purpose: a full 64-row tile plus a ragged end */

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

/* ---- per-op data on the device ---- */

typedef struct tw_gpu_data {
    size_t M;         /* rows timed (the bucket) */
    size_t P;         /* probe rows */
    void *x, *w;      /* x [M, K], the packing weight [N, K] */
    uint32_t *packed; /* [M, N/C] */
    void *flush;
    size_t flush_bytes;
    tw_cuda_event ev[2];
    tw_synth_ffn *host; /* the synthetic inputs (probe reference and checks) */
    uint32_t *ref;      /* [P, N/C] reference of the probe */
    uint32_t *got;      /* [P, N/C] scratch */
} tw_gpu_data;

/* ---- kernels ---- */

/* The kernels this build can tune on a device: both gate-pack variants, launched by the same
 * code plans use (runtime/cuda_gate_pack.h), and ffn_fused, timed through a plan
 * (gpu_tune_ffn.c), so what is timed is what runs. */
typedef struct tw_gpu_kernel {
    const char *kernel; /* template */
    const char *op;
    int ulp1; /* sums in the reference's order: stored values within 1 unit of it (SIMT only) */
} tw_gpu_kernel;

static const tw_gpu_kernel tw_gpu_kernels[] = {
    {"gate_pack_sm90", "gate_pack", 0},
    {"gate_pack_simt", "gate_pack", 1},
    {"ffn_fused", "ffn_infer", 0},
};

static const tw_gpu_kernel *tw_gpu_kernel_find(const char *kernel) {
    for (size_t i = 0; i < sizeof tw_gpu_kernels / sizeof tw_gpu_kernels[0]; i++)
        if (!strcmp(tw_gpu_kernels[i].kernel, kernel))
            return &tw_gpu_kernels[i];
    return NULL;
}

int tw_tune_kernel_runnable(const char *kernel) {
    if (!kernel || !tw_gpu_kernel_find(kernel))
        return 0;
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s.cu.lua", tw_template_dir(), kernel);
    return stat(path, &st) == 0;
}

const tw_tune_space *tw_tune_space_runnable(const char *op, const tw_tune_problem *p,
                                            const tw_tune_device *d) {
    const tw_tune_space *sp[8];
    size_t n = tw_tune_spaces_for(op, sp, 8);
    for (size_t i = 0; i < n && i < 8; i++)
        if ((!sp[i]->supports || sp[i]->supports(p, d)) && tw_tune_kernel_runnable(sp[i]->kernel))
            return sp[i];
    return NULL;
}

twell_status tw_tune_gpu_cubin(twell_ctx *ctx, const tw_tune_config *cfg, const twell_shape *shape,
                               tw_cubin *out) {
    /* room for either list: the tuner's own, or the launcher's TW_FFN_NPARAMS */
    tw_param prm[5 + TW_TUNE_MAX_PARAMS > TW_FFN_NPARAMS ? 5 + TW_TUNE_MAX_PARAMS : TW_FFN_NPARAMS];
    size_t np = 0;
    const char *arch = ctx && ctx->cuda ? ctx->cuda->arch : "sm_90a";
    if (!strcmp(cfg->kernel, "ffn_fused")) {
        /* the launcher's parameters (derived staging capacities included): the plan's cubin */
        tw_ffn_cfg fc;
        memset(out, 0, sizeof *out);
        if (!ctx || !ctx->cuda || tw_ffn_cfg_from_tune(cfg, &fc) != 0 ||
            !(np = tw_ffn_cfg_params(&fc, shape, ctx->cuda, prm)))
            return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                            "tune: ffn_fused config not launchable for K=%u N=%u here", shape->K,
                            shape->N);
    } else {
        np = tw_tune_config_params(cfg, shape, prm, sizeof prm / sizeof prm[0]);
    }
    return tw_jit_cubin(ctx, cfg->kernel, prm, np, arch, out);
}

/* ---- the callbacks ---- */

typedef struct tw_gpu_slot {
    tw_cubin cubin;
    tw_gp_cfg cfg;
    tw_gp_kernel k; /* loaded by verify */
    char err[384];  /* why compile failed (worker contexts die with their messages) */
} tw_gpu_slot;

typedef struct tw_gpu_tuner {
    twell_ctx *ctx;
    const tw_gpu_kernel *k;
    twell_shape shape;
    size_t M;
    const tw_tune_config *base;
    tw_gpu_slot *slots;
    size_t n;
    tw_gpu_data data;
    int have_data;
    uint32_t salt;       /* a different flush value every run */
    char first_err[704]; /* the first candidate failure, for the message if all fail */
} tw_gpu_tuner;

static tw_gpu_slot *tw_slot(tw_gpu_tuner *t, const tw_tune_config *cfg) {
    return &t->slots[cfg - t->base];
}

static void tw_gpu_data_free(twell_ctx *ctx, tw_gpu_data *d) {
    tw_cuda_free(ctx, d->x);
    tw_cuda_free(ctx, d->w);
    tw_cuda_free(ctx, d->packed);
    tw_cuda_free(ctx, d->flush);
    for (int i = 0; i < 2; i++)
        if (d->ev[i])
            tw_cuda_event_destroy(ctx, d->ev[i]);
    tw_synth_destroy(d->host);
    free(d->ref);
    free(d->got);
    memset(d, 0, sizeof *d);
}

/* Synthetic inputs of the bucket's size with about 0.5% of the hidden width active per row (29
 * of 5632, the sparsity DESIGN.md §1 reports), uploaded once; the probe's reference computed
 * on the host. Non-gated data: gate-pack needs only the packing weight. */
static twell_status tw_gpu_data_make(tw_gpu_tuner *t) {
    twell_ctx *ctx = t->ctx;
    tw_gpu_data *d = &t->data;
    const twell_shape *s = &t->shape;
    memset(d, 0, sizeof *d);
    d->M = t->M;
    d->P = t->M < TW_PROBE_ROWS ? t->M : TW_PROBE_ROWS;
    tw_synth_params sp = tw_synth_params_default();
    sp.M = d->M;
    sp.K = s->K;
    sp.N = s->N;
    sp.dtype = s->dtype;
    sp.gated = 0;
    sp.nnz = fmax(1.0, 0.00515 * (double)s->N);
    twell_status st = tw_synth_create(ctx->pool, &sp, &d->host);
    if (st != TWELL_OK)
        return tw_error(ctx, st, "tune: cannot make %zu rows of synthetic data (%s)", d->M,
                        twell_status_name(st));
    const size_t row_words = s->N / s->C;
    const size_t xbytes = d->M * s->K * 2u, wbytes = (size_t)s->N * s->K * 2u;
    d->flush_bytes = (size_t)(ctx->cuda->l2_bytes > 0 ? ctx->cuda->l2_bytes : 32 << 20) * 2u;
    d->ref = malloc(d->P * row_words * sizeof *d->ref);
    d->got = malloc(d->P * row_words * sizeof *d->got);
    if (!d->ref || !d->got)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory for the probe");
    const uint16_t *w = tw_synth_pack_weight(d->host);
    if ((st = tw_gate_pack_ref(ctx->pool, s, d->P, d->host->x, w, d->ref)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, xbytes, &d->x)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, wbytes, &d->w)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, d->M * row_words * 4u, (void **)&d->packed)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, d->flush_bytes, &d->flush)) != TWELL_OK ||
        (st = tw_cuda_memcpy_htod(ctx, d->x, d->host->x, xbytes)) != TWELL_OK ||
        (st = tw_cuda_memcpy_htod(ctx, d->w, w, wbytes)) != TWELL_OK ||
        (st = tw_cuda_event_create(ctx, &d->ev[0])) != TWELL_OK ||
        (st = tw_cuda_event_create(ctx, &d->ev[1])) != TWELL_OK)
        return st;
    return TWELL_OK;
}

static twell_status tw_gpu_begin(void *user, const tw_tune_config *cands, size_t n) {
    tw_gpu_tuner *t = user;
    t->base = cands;
    t->n = n;
    t->slots = calloc(n, sizeof *t->slots);
    if (!t->slots)
        return tw_error(t->ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory");
    t->have_data = 1;
    return tw_gpu_data_make(t);
}

/* On a worker thread: a CPU context of its own (contexts are single-threaded) sharing the disk
 * cache, so the cubin is also published for later processes. */
static twell_status tw_gpu_compile(void *user, const tw_tune_config *cfg) {
    tw_gpu_tuner *t = user;
    tw_gpu_slot *slot = tw_slot(t, cfg);
    if (tw_gp_cfg_from_tune(cfg, &slot->cfg) != 0) {
        snprintf(slot->err, sizeof slot->err, "not a configuration of %s", t->k->kernel);
        return TWELL_ERR_INVALID_ARG;
    }
    if (tw_gp_cfg_check(&slot->cfg, &t->shape, t->ctx->cuda, slot->err, sizeof slot->err) != 0)
        return TWELL_ERR_UNSUPPORTED;
    twell_ctx_options o = twell_ctx_options_default();
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    o.cache_dir = t->ctx->cache_dir;
    o.cache_max_bytes = t->ctx->opts.cache_max_bytes;
    twell_ctx *w = NULL;
    twell_status st = twell_ctx_create(&o, &w);
    if (st != TWELL_OK) {
        snprintf(slot->err, sizeof slot->err, "cannot create a compile context");
        return st;
    }
    tw_param prm[5 + TW_TUNE_MAX_PARAMS];
    size_t np = tw_tune_config_params(cfg, &t->shape, prm, sizeof prm / sizeof prm[0]);
    st = tw_jit_cubin(w, cfg->kernel, prm, np, t->ctx->cuda->arch, &slot->cubin);
    if (st != TWELL_OK)
        snprintf(slot->err, sizeof slot->err, "%s", twell_ctx_errmsg(w));
    twell_ctx_destroy(w);
    return st;
}

/* Candidates are allowed to fail (their score is +∞), so each failure is only logged; the first
 * is kept for the message when none succeeds. */
static void tw_gpu_note(tw_gpu_tuner *t, const tw_tune_config *cfg, const char *what,
                        const char *why) {
    char canon[TW_TUNE_CANON_MAX];
    tw_tune_config_canon(cfg, canon, sizeof canon);
    tw_log(t->ctx, TWELL_LOG_INFO, "tune: %s %s: %.300s", canon, what, why);
    if (!t->first_err[0])
        snprintf(t->first_err, sizeof t->first_err, "%s %s: %.300s", canon, what, why);
}

/* The probe check split over the context's CPU workers by rows (at K = 8192 the fp64 bounds of
 * the row-tiles that differ from the reference in rounding take seconds on one core). */
typedef struct tw_check_job {
    const tw_gpu_tuner *t;
    const size_t *rows;
    tw_pack_check *part; /* one per row */
} tw_check_job;

static void tw_check_chunk(void *arg, size_t begin, size_t end) {
    const tw_check_job *j = arg;
    const tw_gpu_data *d = &j->t->data;
    const twell_shape *s = &j->t->shape;
    const size_t row_words = s->N / s->C;
    for (size_t r = begin; r < end; r++)
        tw_pack_check_rows(s, d->host->x, tw_synth_pack_weight(d->host), j->rows + r, 1,
                           d->ref + r * row_words, d->got + r * row_words, &j->part[r]);
}

static twell_status tw_gpu_check_probe(tw_gpu_tuner *t, tw_pack_check *out) {
    const size_t P = t->data.P;
    size_t *rows = malloc(P * sizeof *rows);
    tw_pack_check *part = calloc(P, sizeof *part);
    if (!rows || !part) {
        free(rows);
        free(part);
        return tw_error(t->ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory");
    }
    for (size_t i = 0; i < P; i++)
        rows[i] = i;
    tw_check_job job = {t, rows, part};
    tw_pool_for(t->ctx->pool, P, tw_check_chunk, &job);
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < P; i++) {
        const tw_pack_check *c = &part[i];
        out->rows += c->rows;
        out->tiles += c->tiles;
        out->tiles_exact += c->tiles_exact;
        out->tiles_tolerated += c->tiles_tolerated;
        out->tiles_bad += c->tiles_bad;
        out->entries += c->entries;
        out->flips += c->flips;
        out->overflow_tiles += c->overflow_tiles;
        if (c->worst_ulp > out->worst_ulp)
            out->worst_ulp = c->worst_ulp;
        if (c->max_rel_err > out->max_rel_err)
            out->max_rel_err = c->max_rel_err;
        if (!out->first_bad[0] && c->first_bad[0])
            snprintf(out->first_bad, sizeof out->first_bad, "%s", c->first_bad);
    }
    free(rows);
    free(part);
    return TWELL_OK;
}

/* Loads the module, runs the probe rows into a poisoned buffer and compares them with the
 * reference: pack_check's fp32-bound rule for every kernel, and for a kernel that sums in the
 * reference's order (SIMT) also at most 1 unit of difference in stored values. */
static twell_status tw_gpu_verify(void *user, const tw_tune_config *cfg) {
    tw_gpu_tuner *t = user;
    twell_ctx *ctx = t->ctx;
    tw_gpu_slot *slot = tw_slot(t, cfg);
    tw_gpu_data *d = &t->data;
    const twell_shape *s = &t->shape;
    const size_t row_words = s->N / s->C;
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st != TWELL_OK)
        return st;
    if ((st = tw_gp_kernel_load_image(ctx, s, &slot->cfg, slot->cubin.data, &slot->k)) ==
            TWELL_OK &&
        (st = tw_cuda_memset_d32(ctx, d->packed, 0xA5A5A5A5u, d->P * row_words, NULL)) ==
            TWELL_OK &&
        (st = tw_gp_kernel_launch(ctx, &slot->k, s, d->P, d->x, d->w, d->packed, NULL)) ==
            TWELL_OK &&
        (st = tw_cuda_synchronize(ctx)) == TWELL_OK)
        st = tw_cuda_memcpy_dtoh(ctx, d->got, d->packed, d->P * row_words * 4u);
    tw_cu_leave(ctx, &sc);
    if (st != TWELL_OK) {
        tw_gpu_note(t, cfg, "failed to load or run", twell_ctx_errmsg(ctx));
        return st;
    }
    tw_pack_check chk;
    st = tw_gpu_check_probe(t, &chk);
    if (st != TWELL_OK)
        return st;
    char canon[TW_TUNE_CANON_MAX];
    tw_tune_config_canon(cfg, canon, sizeof canon);
    if (chk.tiles_bad) {
        tw_gpu_note(t, cfg, "gives wrong results", chk.first_bad);
        return tw_error(ctx, TWELL_ERR_INTERNAL, "tune: %s: %zu of %zu probe row-tiles wrong: %s",
                        canon, chk.tiles_bad, chk.tiles, chk.first_bad);
    }
    if (t->k->ulp1 && chk.worst_ulp > 1) {
        char why[96];
        snprintf(why, sizeof why, "a stored value is %u units from the reference (> 1)",
                 chk.worst_ulp);
        tw_gpu_note(t, cfg, "gives wrong results", why);
        return tw_error(ctx, TWELL_ERR_INTERNAL, "tune: %s: %s", canon, why);
    }
    return TWELL_OK;
}

/* One timed run: flush L2 by writing a buffer twice its size, then events around the launch. */
static twell_status tw_gpu_measure(void *user, const tw_tune_config *cfg, double *ms_out) {
    tw_gpu_tuner *t = user;
    twell_ctx *ctx = t->ctx;
    tw_gpu_slot *slot = tw_slot(t, cfg);
    tw_gpu_data *d = &t->data;
    float ms = 0.0f;
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st != TWELL_OK)
        return st;
    if ((st = tw_cuda_memset_d32(ctx, d->flush, ++t->salt, d->flush_bytes / 4u, NULL)) ==
            TWELL_OK &&
        (st = tw_cuda_event_record(ctx, d->ev[0], NULL)) == TWELL_OK &&
        (st = tw_gp_kernel_launch(ctx, &slot->k, &t->shape, d->M, d->x, d->w, d->packed, NULL)) ==
            TWELL_OK &&
        (st = tw_cuda_event_record(ctx, d->ev[1], NULL)) == TWELL_OK)
        st = tw_cuda_event_elapsed(ctx, d->ev[0], d->ev[1], &ms);
    tw_cu_leave(ctx, &sc);
    if (st != TWELL_OK) {
        tw_gpu_note(t, cfg, "failed to launch", twell_ctx_errmsg(ctx));
        return st;
    }
    *ms_out = (double)ms;
    return TWELL_OK;
}

static void tw_gpu_release(void *user, const tw_tune_config *cfg) {
    tw_gpu_tuner *t = user;
    tw_gpu_slot *slot = tw_slot(t, cfg);
    if (slot->err[0])
        tw_gpu_note(t, cfg, "did not compile", slot->err);
    if (slot->k.mod) {
        tw_cu_scope sc;
        if (tw_cu_enter(t->ctx, &sc) == TWELL_OK) {
            tw_gp_kernel_unload(&slot->k);
            tw_cu_leave(t->ctx, &sc);
        }
    }
    tw_cubin_free(&slot->cubin);
    memset(slot, 0, sizeof *slot);
}

/* ---- entry points ---- */

/* The problem, device and space of (op, shape, M) on ctx, and a tuner ready for callbacks.
 * kernel: the space to use (NULL: the first runnable one). */
static twell_status tw_gpu_setup(twell_ctx *ctx, const char *op, const char *kernel,
                                 const twell_shape *shape, size_t M, tw_tune_problem *p,
                                 tw_tune_device *dev, const tw_tune_space **space,
                                 tw_gpu_tuner *t) {
    memset(t, 0, sizeof *t);
    twell_status st = tw_tune_device_of(ctx, dev);
    if (st != TWELL_OK)
        return st;
    if ((st = twell_shape_check(ctx, shape)) != TWELL_OK)
        return st;
    memset(p, 0, sizeof *p);
    snprintf(p->op, sizeof p->op, "%s", op ? op : "");
    p->shape = *shape;
    /* Gate-pack is one op for gated and non-gated FFNs: one record serves both. */
    if (!strcmp(p->op, "gate_pack"))
        p->shape.gated = 1;
    p->M = tw_tune_m_bucket(M);
    const tw_tune_space *sp = NULL;
    if (kernel) {
        sp = tw_tune_space_by_kernel(kernel);
        if (sp && (strcmp(sp->op, p->op) != 0 || (sp->supports && !sp->supports(p, dev)) ||
                   !tw_tune_kernel_runnable(kernel)))
            sp = NULL;
    } else {
        sp = tw_tune_space_runnable(p->op, p, dev);
    }
    if (!sp)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "tune: no kernel%s%s for %s that this build can launch on %s",
                        kernel ? " " : "", kernel ? kernel : "", p->op, dev->arch);
    *space = sp;
    t->ctx = ctx;
    t->k = tw_gpu_kernel_find(sp->kernel);
    t->shape = *shape;
    t->M = p->M;
    return TWELL_OK;
}

static void tw_gpu_teardown(twell_ctx *ctx, tw_gpu_tuner *t, twell_status st) {
    if (t->have_data)
        tw_gpu_data_free(ctx, &t->data);
    free(t->slots);
    t->slots = NULL;
    if (st != TWELL_OK && t->first_err[0]) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", twell_ctx_errmsg(ctx));
        tw_error(ctx, st, "%s; first failure: %s", msg, t->first_err);
    }
}

twell_status tw_tune_gpu_ex(twell_ctx *ctx, const char *op, const char *kernel,
                            const twell_shape *shape, size_t M, const tw_tune_options *opt,
                            int retune, tw_tune_choice *out) {
    memset(out, 0, sizeof *out);
    out->ms = out->default_ms = NAN;
    tw_tune_problem p;
    tw_tune_device dev;
    const tw_tune_space *space = NULL;
    tw_gpu_tuner t;
    twell_status st = tw_gpu_setup(ctx, op, kernel, shape, M, &p, &dev, &space, &t);
    if (st != TWELL_OK)
        return st;
    tw_tune_callbacks cb = {
        &t, tw_gpu_begin, tw_gpu_compile, tw_gpu_verify, tw_gpu_measure, tw_gpu_release};
    tw_gpu_ffn *ffn = NULL;
    if (!strcmp(space->kernel, "ffn_fused") &&
        (st = tw_gpu_ffn_create(ctx, shape, p.M, &ffn, &cb)) != TWELL_OK)
        return st;
    st = tw_tune_select(ctx, &p, &dev, space, &cb, opt, retune, out);
    tw_gpu_ffn_destroy(ffn, st);
    tw_gpu_teardown(ctx, &t, st);
    if (st != TWELL_OK)
        return st;
    /* The record alone would still leave a compile to the next process. */
    tw_cubin cubin;
    st = tw_tune_gpu_cubin(ctx, &out->config, shape, &cubin);
    tw_cubin_free(&cubin);
    return st;
}

twell_status tw_tune_gpu(twell_ctx *ctx, const char *op, const twell_shape *shape, size_t M,
                         const tw_tune_options *opt, int retune, tw_tune_choice *out) {
    return tw_tune_gpu_ex(ctx, op, NULL, shape, M, opt, retune, out);
}

twell_status tw_tune_gpu_exhaustive(twell_ctx *ctx, const char *op, const char *kernel,
                                    const twell_shape *shape, size_t M, const tw_tune_options *opt,
                                    tw_tune_config **cands, tw_tune_result *out) {
    *cands = NULL;
    memset(out, 0, sizeof *out);
    tw_tune_problem p;
    tw_tune_device dev;
    const tw_tune_space *space = NULL;
    tw_gpu_tuner t;
    twell_status st = tw_gpu_setup(ctx, op, kernel, shape, M, &p, &dev, &space, &t);
    if (st != TWELL_OK)
        return st;
    tw_tune_config *c = NULL;
    size_t n = 0, di = SIZE_MAX;
    st = tw_tune_space_enumerate(space, &p, &dev, &c, &n, &di, NULL);
    if (st == TWELL_OK && n == 0)
        st = tw_error(ctx, TWELL_ERR_UNSUPPORTED, "tune: every config of %s is pruned",
                      space->kernel);
    if (st != TWELL_OK) {
        free(c);
        return st;
    }
    tw_tune_options o = opt ? *opt : tw_tune_options_default();
    o.mode = TW_TUNE_MEASURE;
    o.budget_s = 0.0;
    o.batch = n;
    tw_tune_callbacks cb = {
        &t, tw_gpu_begin, tw_gpu_compile, tw_gpu_verify, tw_gpu_measure, tw_gpu_release};
    tw_gpu_ffn *ffn = NULL;
    if (!strcmp(space->kernel, "ffn_fused") &&
        (st = tw_gpu_ffn_create(ctx, shape, p.M, &ffn, &cb)) != TWELL_OK) {
        free(c);
        return st;
    }
    st = tw_tune_run(ctx, c, n, di, SIZE_MAX, &cb, &o, out);
    tw_gpu_ffn_destroy(ffn, st);
    tw_gpu_teardown(ctx, &t, st);
    *cands = c;
    return st;
}
