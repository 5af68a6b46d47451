/*
 * gate_pack_tuner.c — the gate-pack op's part of the tuning engine (gate_pack_tuner.h): its
 * candidates (both variants) compiled on worker threads, loaded and checked against the CPU
 * reference on a probe, then timed through the launcher plans use (cuda_gate_pack_tiled.h), so
 * what is timed is what runs. The engine (autotune/gpu_tune.c) drives these callbacks.
 */
#include "gate_pack_tuner.h"

#include "cpu_ref.h"
#include "cuda_driver.h"
#include "cuda_gate_pack_tiled.h"
#include "gpu_tune_harness.h"
#include "pack_check.h"
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TW_PROBE_ROWS 67 /* awkward on purpose: a full 64-row tile plus a ragged end */

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

/* ---- the callbacks ---- */

typedef struct tw_gpu_slot {
    tw_cubin cubin;
    tw_gp_cfg cfg;
    tw_gp_kernel k; /* loaded by verify */
    char err[384];  /* why compile failed (worker contexts die with their messages) */
} tw_gpu_slot;

typedef struct tw_gpu_tuner {
    tw_gpu_harness h;   /* the context, timing resources and first failure */
    const char *kernel; /* the space's template */
    int ulp1; /* sums in the reference's order: stored values within 1 unit of it (SIMT only) */
    twell_shape shape;
    size_t M;
    const tw_tune_config *base;
    tw_gpu_slot *slots;
    size_t n;
    tw_gpu_data data;
    int have_data;
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
        snprintf(slot->err, sizeof slot->err, "not a configuration of %s", t->kernel);
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
        tw_gpu_harness_note(&t->h, cfg, "failed to load or run", tw_errmsg(ctx));
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
    if (t->ulp1 && chk.worst_ulp > 1) {
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

/* ---- the op's driver ---- */

static twell_status tw_gp_tune_create(twell_ctx *ctx, const tw_tune_space *sp, const twell_shape *s,
                                      size_t M, void **state, tw_tune_callbacks *cb) {
    *state = NULL;
    tw_gpu_tuner *t = calloc(1, sizeof *t);
    if (!t)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory");
    tw_gpu_harness_init(&t->h, ctx);
    tw_gp_cfg simt = tw_gp_cfg_default(TW_GP_SIMT);
    t->kernel = sp->kernel;
    t->ulp1 = !strcmp(sp->kernel, tw_gp_cfg_kernel(&simt));
    t->shape = *s;
    t->M = M;
    *cb = (tw_tune_callbacks){
        t, tw_gpu_begin, tw_gpu_compile, tw_gpu_verify, tw_gpu_measure, tw_gpu_release};
    *state = t;
    return TWELL_OK;
}

static void tw_gp_tune_destroy(void *state, twell_status st) {
    tw_gpu_tuner *t = state;
    if (!t)
        return;
    if (t->have_data)
        tw_gpu_data_free(t->h.ctx, &t->data);
    free(t->slots);
    tw_gpu_harness_free(&t->h, st);
    free(t);
}

/* In order of preference: the Hopper kernel where it applies, else the portable one. */
static const tw_tune_space *const tw_gp_spaces[] = {&tw_gate_pack_space_sm90,
                                                    &tw_gate_pack_space_simt};

const tw_tune_op tw_gate_pack_tune_op = {
    .op = TW_GATE_PACK_OP,
    .spaces = tw_gp_spaces,
    .nspaces = sizeof tw_gp_spaces / sizeof tw_gp_spaces[0],
    .gate_agnostic = 1, /* gate-pack is one op for gated and non-gated FFNs: one record */
    .create = tw_gp_tune_create,
    .destroy = tw_gp_tune_destroy,
    .params = NULL, /* the shape's and the configuration's own parameters */
};
