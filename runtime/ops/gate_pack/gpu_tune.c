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
#include "gpu_tune_harness.h"
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
    size_t M;           /* rows timed (the bucket) */
    size_t P;           /* probe rows */
    void *x, *w;        /* x [M, K], the packing weight [N, K] */
    uint32_t *packed;   /* [M, N/C] */
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
    return tw_template_exists(kernel);
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
    tw_gpu_harness h; /* the context, timing resources and first failure */
    const tw_gpu_kernel *k;
    twell_shape shape;
    size_t M;
    const tw_tune_config *base;
    tw_gpu_slot *slots;
    size_t n;
    tw_gpu_data data;
    int have_data;
    tw_gpu_ffn *ffn; /* ffn_fused's own callbacks and state, in place of these (else NULL) */
    /* what tw_gpu_setup found: the problem, the device, the space and the callbacks to use */
    tw_tune_problem p;
    tw_tune_device dev;
    const tw_tune_space *space;
    tw_tune_callbacks cb;
} tw_gpu_tuner;

static tw_gpu_slot *tw_slot(tw_gpu_tuner *t, const tw_tune_config *cfg) {
    return &t->slots[cfg - t->base];
}

static void tw_gpu_data_free(twell_ctx *ctx, tw_gpu_data *d) {
    tw_cuda_free(ctx, d->x);
    tw_cuda_free(ctx, d->w);
    tw_cuda_free(ctx, d->packed);
    tw_synth_destroy(d->host);
    free(d->ref);
    free(d->got);
    memset(d, 0, sizeof *d);
}

/* Synthetic inputs of the bucket's size (tw_gpu_harness_synth), uploaded once; the probe's
 * reference computed on the host. Non-gated data: gate-pack needs only the packing weight. */
static twell_status tw_gpu_data_make(tw_gpu_tuner *t) {
    twell_ctx *ctx = t->h.ctx;
    tw_gpu_data *d = &t->data;
    const twell_shape *s = &t->shape;
    memset(d, 0, sizeof *d);
    d->M = t->M;
    d->P = t->M < TW_PROBE_ROWS ? t->M : TW_PROBE_ROWS;
    twell_status st = tw_gpu_harness_synth(ctx, s, d->M, 0, &d->host);
    if (st != TWELL_OK)
        return st;
    const size_t row_words = s->N / s->C;
    const size_t xbytes = d->M * s->K * 2u, wbytes = (size_t)s->N * s->K * 2u;
    d->ref = malloc(d->P * row_words * sizeof *d->ref);
    d->got = malloc(d->P * row_words * sizeof *d->got);
    if (!d->ref || !d->got)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory for the probe");
    const uint16_t *w = tw_synth_pack_weight(d->host);
    if ((st = tw_gate_pack_ref(ctx->pool, s, d->P, d->host->x, w, d->ref)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, xbytes, &d->x)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, wbytes, &d->w)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, d->M * row_words * 4u, (void **)&d->packed)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, t->h.flush_bytes, &t->h.flush)) != TWELL_OK ||
        (st = tw_cuda_memcpy_htod(ctx, d->x, d->host->x, xbytes)) != TWELL_OK ||
        (st = tw_cuda_memcpy_htod(ctx, d->w, w, wbytes)) != TWELL_OK ||
        (st = tw_cuda_event_create(ctx, &t->h.ev[0])) != TWELL_OK ||
        (st = tw_cuda_event_create(ctx, &t->h.ev[1])) != TWELL_OK)
        return st;
    return TWELL_OK;
}

static twell_status tw_gpu_begin(void *user, const tw_tune_config *cands, size_t n) {
    tw_gpu_tuner *t = user;
    t->base = cands;
    t->n = n;
    t->slots = calloc(n, sizeof *t->slots);
    if (!t->slots)
        return tw_error(t->h.ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory");
    t->have_data = 1;
    return tw_gpu_data_make(t);
}

/* On a worker thread (tw_gpu_harness_compile). */
static twell_status tw_gpu_compile(void *user, const tw_tune_config *cfg) {
    tw_gpu_tuner *t = user;
    tw_gpu_slot *slot = tw_slot(t, cfg);
    if (tw_gp_cfg_from_tune(cfg, &slot->cfg) != 0) {
        snprintf(slot->err, sizeof slot->err, "not a configuration of %s", t->k->kernel);
        return TWELL_ERR_INVALID_ARG;
    }
    if (tw_gp_cfg_check(&slot->cfg, &t->shape, t->h.ctx->cuda, slot->err, sizeof slot->err) != 0)
        return TWELL_ERR_UNSUPPORTED;
    tw_param prm[5 + TW_TUNE_MAX_PARAMS];
    size_t np = tw_tune_config_params(cfg, &t->shape, prm, sizeof prm / sizeof prm[0]);
    return tw_gpu_harness_compile(&t->h, cfg->kernel, prm, np, &slot->cubin, slot->err,
                                  sizeof slot->err);
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
        return tw_error(t->h.ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory");
    }
    for (size_t i = 0; i < P; i++)
        rows[i] = i;
    tw_check_job job = {t, rows, part};
    tw_pool_for(t->h.ctx->pool, P, tw_check_chunk, &job);
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
    twell_ctx *ctx = t->h.ctx;
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
        tw_gpu_harness_note(&t->h, cfg, "failed to load or run", twell_ctx_errmsg(ctx));
        return st;
    }
    tw_pack_check chk;
    st = tw_gpu_check_probe(t, &chk);
    if (st != TWELL_OK)
        return st;
    char canon[TW_TUNE_CANON_MAX];
    tw_tune_config_canon(cfg, canon, sizeof canon);
    if (chk.tiles_bad) {
        tw_gpu_harness_note(&t->h, cfg, "gives wrong results", chk.first_bad);
        return tw_error(ctx, TWELL_ERR_INTERNAL, "tune: %s: %zu of %zu probe row-tiles wrong: %s",
                        canon, chk.tiles_bad, chk.tiles, chk.first_bad);
    }
    if (t->k->ulp1 && chk.worst_ulp > 1) {
        char why[96];
        snprintf(why, sizeof why, "a stored value is %u units from the reference (> 1)",
                 chk.worst_ulp);
        tw_gpu_harness_note(&t->h, cfg, "gives wrong results", why);
        return tw_error(ctx, TWELL_ERR_INTERNAL, "tune: %s: %s", canon, why);
    }
    return TWELL_OK;
}

/* The launch tw_gpu_measure times: the bucket's rows through the candidate's kernel. */
typedef struct tw_gpu_launch_arg {
    tw_gpu_tuner *t;
    tw_gpu_slot *slot;
} tw_gpu_launch_arg;

static twell_status tw_gpu_launch(void *arg) {
    const tw_gpu_launch_arg *a = arg;
    const tw_gpu_data *d = &a->t->data;
    return tw_gp_kernel_launch(a->t->h.ctx, &a->slot->k, &a->t->shape, d->M, d->x, d->w, d->packed,
                               NULL);
}

/* One timed run of the candidate (tw_gpu_harness_measure: L2 flushed, CUDA events). */
static twell_status tw_gpu_measure(void *user, const tw_tune_config *cfg, double *ms_out) {
    tw_gpu_tuner *t = user;
    tw_gpu_launch_arg a = {t, tw_slot(t, cfg)};
    return tw_gpu_harness_measure(&t->h, cfg, NULL, tw_gpu_launch, &a, ms_out);
}

static void tw_gpu_release(void *user, const tw_tune_config *cfg) {
    tw_gpu_tuner *t = user;
    tw_gpu_slot *slot = tw_slot(t, cfg);
    if (slot->err[0])
        tw_gpu_harness_note(&t->h, cfg, "did not compile", slot->err);
    if (slot->k.mod) {
        tw_cu_scope sc;
        if (tw_cu_enter(t->h.ctx, &sc) == TWELL_OK) {
            tw_gp_kernel_unload(&slot->k);
            tw_cu_leave(t->h.ctx, &sc);
        }
    }
    tw_cubin_free(&slot->cubin);
    memset(slot, 0, sizeof *slot);
}

/* ---- entry points ---- */

/* A tuner for (op, shape, M) on ctx: its problem, device, space and callbacks (ffn_fused's for
 * that kernel). kernel: the space to use (NULL: the first runnable one). Once this succeeds,
 * tw_gpu_teardown releases t. */
static twell_status tw_gpu_setup(twell_ctx *ctx, const char *op, const char *kernel,
                                 const twell_shape *shape, size_t M, tw_gpu_tuner *t) {
    memset(t, 0, sizeof *t);
    tw_tune_problem *p = &t->p;
    tw_tune_device *dev = &t->dev;
    twell_status st = tw_tune_device_of(ctx, dev);
    if (st != TWELL_OK)
        return st;
    if ((st = twell_shape_check(ctx, shape)) != TWELL_OK)
        return st;
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
    t->space = sp;
    tw_gpu_harness_init(&t->h, ctx);
    t->k = tw_gpu_kernel_find(sp->kernel);
    t->shape = *shape;
    t->M = p->M;
    t->cb = (tw_tune_callbacks){
        t, tw_gpu_begin, tw_gpu_compile, tw_gpu_verify, tw_gpu_measure, tw_gpu_release};
    if (!strcmp(sp->kernel, "ffn_fused"))
        return tw_gpu_ffn_create(ctx, shape, p->M, &t->ffn, &t->cb);
    return TWELL_OK;
}

static void tw_gpu_teardown(twell_ctx *ctx, tw_gpu_tuner *t, twell_status st) {
    tw_gpu_ffn_destroy(t->ffn, st);
    t->ffn = NULL;
    if (t->have_data)
        tw_gpu_data_free(ctx, &t->data);
    free(t->slots);
    t->slots = NULL;
    tw_gpu_harness_free(&t->h, st);
}

twell_status tw_tune_gpu_ex(twell_ctx *ctx, const char *op, const char *kernel,
                            const twell_shape *shape, size_t M, const tw_tune_options *opt,
                            int retune, tw_tune_choice *out) {
    memset(out, 0, sizeof *out);
    out->ms = out->default_ms = NAN;
    tw_gpu_tuner t;
    twell_status st = tw_gpu_setup(ctx, op, kernel, shape, M, &t);
    if (st != TWELL_OK)
        return st;
    st = tw_tune_select(ctx, &t.p, &t.dev, t.space, &t.cb, opt, retune, out);
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
    tw_gpu_tuner t;
    twell_status st = tw_gpu_setup(ctx, op, kernel, shape, M, &t);
    if (st != TWELL_OK)
        return st;
    tw_tune_config *c = NULL;
    size_t n = 0, di = SIZE_MAX;
    st = tw_tune_space_enumerate(t.space, &t.p, &t.dev, &c, &n, &di, NULL);
    if (st == TWELL_OK && n == 0)
        st = tw_error(ctx, TWELL_ERR_UNSUPPORTED, "tune: every config of %s is pruned",
                      t.space->kernel);
    if (st != TWELL_OK) {
        tw_gpu_teardown(ctx, &t, st);
        free(c);
        return st;
    }
    tw_tune_options o = opt ? *opt : tw_tune_options_default();
    o.mode = TW_TUNE_MEASURE;
    o.budget_s = 0.0;
    o.batch = n;
    st = tw_tune_run(ctx, c, n, di, SIZE_MAX, &t.cb, &o, out);
    tw_gpu_teardown(ctx, &t, st);
    *cands = c;
    return st;
}

int tw_tune_winner(twell_ctx *ctx, const char *op, const char *kernel, const twell_shape *shape,
                   size_t M, int tune_now, const char *plan_what,
                   int (*take)(const tw_tune_config *cfg, void *arg), void *arg) {
    tw_tune_device dev;
    if (tw_tune_device_of(ctx, &dev) != TWELL_OK)
        return -1;
    tw_tune_problem p;
    memset(&p, 0, sizeof p);
    snprintf(p.op, sizeof p.op, "%s", op);
    p.shape = *shape;
    if (!strcmp(p.op, "gate_pack"))
        p.shape.gated = 1; /* gate-pack is one op for gated and non-gated FFNs: one record */
    p.M = tw_tune_m_bucket(M);
    tw_tune_record rec;
    twell_status st = tw_tune_store_load(ctx, &p, &dev, &rec);
    if (st != TWELL_OK && st != TWELL_ERR_NOT_FOUND)
        return -1;
    if (st == TWELL_ERR_NOT_FOUND) {
        const tw_tune_space *sp = tw_tune_space_runnable(p.op, &p, &dev);
        if (!tune_now || !sp || strcmp(sp->kernel, kernel) != 0)
            return -1;
        tw_tune_options o = tw_tune_options_default();
        tw_tune_choice ch;
        tw_log(ctx, TWELL_LOG_INFO, "%s: TWELL_TUNE=1: tuning K=%u N=%u M bucket %zu", p.op,
               p.shape.K, p.shape.N, p.M);
        if (tw_tune_gpu(ctx, p.op, shape, M, &o, 0, &ch) != TWELL_OK) {
            tw_log(ctx, TWELL_LOG_WARN, "%s: tuning failed, using the default: %s", p.op,
                   twell_ctx_errmsg(ctx));
            return -1;
        }
        rec.config = ch.config;
    }
    char canon[TW_TUNE_CANON_MAX];
    tw_tune_config_canon(&rec.config, canon, sizeof canon);
    const tw_tune_space *sp = tw_tune_space_by_kernel(rec.config.kernel);
    if (strcmp(rec.config.kernel, kernel) != 0 || !sp || strcmp(sp->op, p.op) != 0 ||
        !tw_tune_space_accepts(sp, &p, &dev, &rec.config) || take(&rec.config, arg) != 0) {
        tw_log(ctx, TWELL_LOG_INFO,
               "%s: stored config %s does not apply to this %s%splan (M bucket %zu); default used",
               p.op, canon, plan_what, plan_what[0] ? " " : "", p.M);
        return -1;
    }
    return 0;
}
