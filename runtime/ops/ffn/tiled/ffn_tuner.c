/*
 * ffn_tuner.c — the ffn_infer op's part of the tuning engine (ffn_tuner.h): ffn_fused
 * candidates on a CUDA device. Each candidate is compiled on a worker
 * thread (tw_ffn_cfg_params: the parameters a plan renders, so the cubin is the one a plan later
 * finds in the cache), loaded, and run through the tiled path's own interface (cuda_ffn.h: ONE
 * tw_ffn state from tw_cuda_ffn_init, tw_cuda_ffn_force swaps its module, tw_cuda_ffn_launch
 * runs it), the entry point a plan's sparse path calls, so the timed sequence is the plan's own:
 * pre-pass, list build, overflow kernels, phases A and B, with its workspace. No public plan:
 * the path reads only its state's record of context and shape. Inputs: synthetic data of the
 * bucket's size at the shape's sparsity (about 0.5% of N active per row, never zeros), packed on
 * the device by the default gate-pack kernel. Probe: 67 rows checked against tw_ffn_infer_ref on
 * the same packed bytes, with the tolerance of tests/test_gpu_ffn_infer.c, and the tiled path (not
 * its fallback) must have produced them.
 */
#include "ffn_tuner.h"

#include "cuda_ffn.h"
#include "cuda_gate_pack_tiled.h"

#include "cpu_ref.h"
#include "cuda_driver.h"
#include "gpu_tune_harness.h"
#include "shape.h"
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TW_FFN_PROBE_ROWS 67 /* a full 64-row block plus a ragged group of 3 tokens */

typedef struct tw_ffn_slot {
    tw_cubin cubin;
    tw_ffn_cfg cfg;
    tw_ffn_tk tk; /* loaded by verify */
    char err[384];
} tw_ffn_slot;

typedef struct tw_gpu_ffn {
    tw_gpu_harness h; /* the context, timing resources and first failure */
    twell_shape shape;
    size_t M, P;
    const tw_tune_config *base;
    size_t n;
    tw_ffn_slot *slots;
    /* The tiled path's state, created at the first verify, once the batch's cubins are cached,
     * on a plan record of the context and the shape as plans take it (nothing else set: the
     * path reads no other op's state). */
    twell_plan plan;
    tw_ffn *f;
    tw_synth_ffn *host;
    void *x, *wg, *wu, *wd, *y;
    uint32_t *packed;
    float *ref; /* [P, K] reference of the probe rows */
    uint16_t *got;
} tw_gpu_ffn;

static tw_ffn_slot *tw_fslot(tw_gpu_ffn *t, const tw_tune_config *cfg) {
    return &t->slots[cfg - t->base];
}

/* Inputs of the bucket's size, uploaded; packed by the default gate-pack kernel of this shape
 * (the cubin plans use, normally cached); the probe's reference from the same packed bytes. */
static twell_status tw_ffn_data(tw_gpu_ffn *t) {
    twell_ctx *ctx = t->h.ctx;
    const twell_shape *s = &t->shape;
    twell_status st = tw_gpu_harness_synth(ctx, s, t->M, s->gated, &t->host);
    if (st != TWELL_OK)
        return st;
    const size_t xbytes = t->M * s->K * 2u, wbytes = (size_t)s->N * s->K * 2u;
    const size_t row_words = s->N / s->C;
    t->ref = malloc(t->P * s->K * sizeof *t->ref);
    t->got = malloc(t->P * s->K * 2u);
    uint32_t *hp = malloc(t->P * row_words * 4u);
    uint16_t *ry = malloc(t->P * s->K * 2u);
    if (!t->ref || !t->got || !hp || !ry) {
        free(hp);
        free(ry);
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory for the probe");
    }
    tw_cu_scope sc;
    if ((st = tw_cu_enter(ctx, &sc)) != TWELL_OK) {
        free(hp);
        free(ry);
        return st;
    }
    tw_gp_cfg gc =
        tw_gp_cfg_default(tw_sm90_gate_pack_supports(s, ctx->cuda) ? TW_GP_SM90 : TW_GP_SIMT);
    tw_gp_kernel gk;
    memset(&gk, 0, sizeof gk);
    const void *wp = NULL;
    if ((st = tw_cuda_malloc(ctx, xbytes, &t->x)) == TWELL_OK &&
        (st = tw_cuda_malloc(ctx, xbytes, &t->y)) == TWELL_OK &&
        (st = tw_cuda_malloc(ctx, wbytes, &t->wu)) == TWELL_OK &&
        (st = tw_cuda_malloc(ctx, wbytes, &t->wd)) == TWELL_OK &&
        (!s->gated || (st = tw_cuda_malloc(ctx, wbytes, &t->wg)) == TWELL_OK) &&
        (st = tw_cuda_malloc(ctx, t->M * row_words * 4u, (void **)&t->packed)) == TWELL_OK &&
        (st = tw_cuda_malloc(ctx, t->h.flush_bytes, &t->h.flush)) == TWELL_OK &&
        (st = tw_cuda_memcpy_htod(ctx, t->x, t->host->x, xbytes)) == TWELL_OK &&
        (st = tw_cuda_memcpy_htod(ctx, t->wu, t->host->wu, wbytes)) == TWELL_OK &&
        (st = tw_cuda_memcpy_htod(ctx, t->wd, t->host->wd, wbytes)) == TWELL_OK &&
        (!s->gated || (st = tw_cuda_memcpy_htod(ctx, t->wg, t->host->wg, wbytes)) == TWELL_OK) &&
        (st = tw_cuda_event_create(ctx, &t->h.ev[0])) == TWELL_OK &&
        (st = tw_cuda_event_create(ctx, &t->h.ev[1])) == TWELL_OK &&
        (st = tw_gp_kernel_load(ctx, s, &gc, &gk)) == TWELL_OK) {
        wp = s->gated ? t->wg : t->wu;
        if ((st = tw_gp_kernel_launch(ctx, &gk, s, t->M, t->x, wp, t->packed, NULL)) == TWELL_OK &&
            (st = tw_cuda_synchronize(ctx)) == TWELL_OK)
            st = tw_cuda_memcpy_dtoh(ctx, hp, t->packed, t->P * row_words * 4u);
    }
    tw_gp_kernel_unload(&gk);
    tw_cu_leave(ctx, &sc);
    if (st == TWELL_OK && (st = tw_ffn_infer_ref(ctx->pool, s, t->P, t->host->x, hp, t->host->wg,
                                                 t->host->wu, t->host->wd, ry)) == TWELL_OK)
        tw_to_f32_ref(s->dtype, ry, t->ref, t->P * s->K);
    free(hp);
    free(ry);
    return st;
}

static twell_status tw_ffn_begin(void *user, const tw_tune_config *cands, size_t n) {
    tw_gpu_ffn *t = user;
    t->base = cands;
    t->n = n;
    t->slots = calloc(n, sizeof *t->slots);
    if (!t->slots)
        return tw_error(t->h.ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory");
    return tw_ffn_data(t);
}

/* On a worker thread (tw_gpu_harness_compile): the cubin is also published for later processes
 * and plans. */
static twell_status tw_ffn_compile(void *user, const tw_tune_config *cfg) {
    tw_gpu_ffn *t = user;
    tw_ffn_slot *slot = tw_fslot(t, cfg);
    if (tw_ffn_cfg_from_tune(cfg, &slot->cfg) != 0) {
        snprintf(slot->err, sizeof slot->err, "not a configuration of ffn_fused");
        return TWELL_ERR_INVALID_ARG;
    }
    tw_param prm[TW_FFN_NPARAMS];
    if (!tw_ffn_cfg_params(&slot->cfg, &t->shape, t->h.ctx->cuda, prm)) {
        (void)tw_ffn_cfg_check(&slot->cfg, &t->shape, t->h.ctx->cuda, slot->err, sizeof slot->err);
        return TWELL_ERR_UNSUPPORTED;
    }
    return tw_gpu_harness_compile(&t->h, "ffn_fused", prm, TW_FFN_NPARAMS, &slot->cubin, slot->err,
                                  sizeof slot->err);
}

/* Largest row-relative L2 error of the probe rows of t->got against t->ref. */
static double tw_ffn_probe_err(const tw_gpu_ffn *t, size_t *worst_row) {
    const size_t K = t->shape.K;
    float *g = malloc(K * sizeof *g);
    double worst = g ? 0.0 : INFINITY;
    *worst_row = 0;
    for (size_t r = 0; g && r < t->P; r++) {
        tw_to_f32_ref(t->shape.dtype, t->got + r * K, g, K);
        double num = 0.0, den = 0.0;
        for (size_t k = 0; k < K; k++) {
            double d = (double)g[k] - (double)t->ref[r * K + k];
            num += d * d;
            den += (double)t->ref[r * K + k] * (double)t->ref[r * K + k];
        }
        double e = den > 0.0 ? sqrt(num / den) : sqrt(num);
        if (!(e <= worst)) { /* NaN (poison left in y) counts as worst */
            worst = isnan(e) ? INFINITY : e;
            *worst_row = r;
        }
    }
    free(g);
    return worst;
}

/* The tiled path's state for the shape, made as a plan's creation makes it (tw_cuda_ffn_init on
 * the shape as plans read it): the default configuration, cached by this batch's compiles, is
 * loaded. Context current. */
static twell_status tw_ffn_path_open(tw_gpu_ffn *t) {
    twell_ctx *ctx = t->h.ctx;
    TW_TRY(tw_shape_import(ctx, "tune", &t->shape, &t->plan.shape));
    t->plan.shape.gated = t->plan.shape.gated ? 1 : 0;
    t->plan.ctx = ctx;
    t->plan.path = TWELL_PATH_SPARSE; /* what is timed: the tiled path only */
    return tw_cuda_ffn_init(&t->plan, &t->f);
}

/* Runs the sparse path's call of `rows` rows with cfg's module: the launch a plan on
 * TWELL_PATH_SPARSE makes (ffn_route.c's tw_cuda_dense_ffn_infer) for these aligned tensors on
 * the default stream, eager, counting nothing. */
static twell_status tw_ffn_call(tw_gpu_ffn *t, tw_ffn_slot *slot, size_t rows) {
    twell_status st = tw_cuda_ffn_force(&t->plan, t->f, &slot->tk);
    if (st != TWELL_OK)
        return st;
    return tw_cuda_ffn_launch(&t->plan, t->f, rows, t->x, t->packed, t->shape.gated ? t->wg : NULL,
                              t->wu, t->wd, t->y, NULL, 0, NULL, NULL);
}

static twell_status tw_ffn_verify(void *user, const tw_tune_config *cfg) {
    tw_gpu_ffn *t = user;
    twell_ctx *ctx = t->h.ctx;
    tw_ffn_slot *slot = tw_fslot(t, cfg);
    const size_t K = t->shape.K;
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st != TWELL_OK)
        return st;
    st = tw_ffn_tk_load(ctx, &t->shape, &slot->cfg, slot->cubin.data, &slot->tk);
    if (st == TWELL_OK && !t->f)
        st = tw_ffn_path_open(t);
    uint32_t fl[4] = {0, 0, 0, 0};
    if (st == TWELL_OK &&
        (st = tw_cuda_memset_d32(ctx, t->y, 0xFFFFFFFFu, t->P * K / 2u, NULL)) == TWELL_OK &&
        (st = tw_ffn_call(t, slot, t->P)) == TWELL_OK &&
        (st = tw_cuda_ffn_flags(&t->plan, t->f, fl)) == TWELL_OK)
        st = tw_cuda_memcpy_dtoh(ctx, t->got, t->y, t->P * K * 2u);
    tw_cu_leave(ctx, &sc);
    if (st != TWELL_OK) {
        tw_gpu_harness_note(&t->h, cfg, "failed to load or run", tw_errmsg(ctx));
        return st;
    }
    char canon[TW_TUNE_CANON_MAX], why[160];
    tw_tune_config_canon(cfg, canon, sizeof canon);
    size_t wr = 0;
    double err = tw_ffn_probe_err(t, &wr), tol = t->shape.dtype == TWELL_DTYPE_BF16 ? 5e-3 : 1e-3;
    if (fl[0] != 0)
        snprintf(why, sizeof why, "the tiled path handed the probe to its fallback (flag %u)",
                 fl[0]);
    else if (!(err <= tol))
        snprintf(why, sizeof why, "probe row %zu has row-relative error %.3e > %.0e", wr, err, tol);
    else
        return TWELL_OK;
    tw_gpu_harness_note(&t->h, cfg, "gives wrong results", why);
    return tw_error(ctx, TWELL_ERR_INTERNAL, "tune: %s: %s", canon, why);
}

/* What tw_ffn_measure runs: the candidate's module swapped in (it synchronises the device, so
 * before the events), then the bucket's rows through the tiled path. */
typedef struct tw_ffn_call_arg {
    tw_gpu_ffn *t;
    tw_ffn_slot *slot;
} tw_ffn_call_arg;

static twell_status tw_ffn_swap_in(void *arg) {
    const tw_ffn_call_arg *a = arg;
    return tw_cuda_ffn_force(&a->t->plan, a->t->f, &a->slot->tk);
}

static twell_status tw_ffn_call_bucket(void *arg) {
    const tw_ffn_call_arg *a = arg;
    return tw_ffn_call(a->t, a->slot, a->t->M);
}

/* One timed call (tw_gpu_harness_measure: L2 flushed, CUDA events) of the tiled path's whole
 * sequence for the bucket's rows. */
static twell_status tw_ffn_measure(void *user, const tw_tune_config *cfg, double *ms_out) {
    tw_gpu_ffn *t = user;
    tw_ffn_call_arg a = {t, tw_fslot(t, cfg)};
    return tw_gpu_harness_measure(&t->h, cfg, tw_ffn_swap_in, tw_ffn_call_bucket, &a, ms_out);
}

static void tw_ffn_release(void *user, const tw_tune_config *cfg) {
    tw_gpu_ffn *t = user;
    tw_ffn_slot *slot = tw_fslot(t, cfg);
    if (slot->err[0])
        tw_gpu_harness_note(&t->h, cfg, "did not compile", slot->err);
    if (slot->tk.mod) {
        tw_cu_scope sc;
        if (tw_cu_enter(t->h.ctx, &sc) == TWELL_OK) {
            if (t->f)
                (void)tw_cuda_ffn_force(&t->plan, t->f, NULL); /* it may point at this module */
            tw_ffn_tk_unload(&slot->tk);
            tw_cu_leave(t->h.ctx, &sc);
        }
    }
    tw_cubin_free(&slot->cubin);
    memset(slot, 0, sizeof *slot);
}

/* ---- the op's driver ---- */

static twell_status tw_ffn_tune_create(twell_ctx *ctx, const tw_tune_space *sp,
                                       const twell_shape *s, size_t M, void **out,
                                       tw_tune_callbacks *cb) {
    (void)sp; /* the op has one space, ffn_fused */
    *out = NULL;
    tw_gpu_ffn *t = calloc(1, sizeof *t);
    if (!t)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory");
    tw_gpu_harness_init(&t->h, ctx);
    t->shape = *s;
    t->M = M;
    t->P = M < TW_FFN_PROBE_ROWS ? M : TW_FFN_PROBE_ROWS;
    memset(cb, 0, sizeof *cb);
    cb->user = t;
    cb->begin = tw_ffn_begin;
    cb->compile = tw_ffn_compile;
    cb->verify = tw_ffn_verify;
    cb->measure = tw_ffn_measure;
    cb->release = tw_ffn_release;
    *out = t;
    return TWELL_OK;
}

/* Frees the state (its tiled path, device buffers and any module left loaded). */
static void tw_ffn_tune_destroy(void *state, twell_status st) {
    tw_gpu_ffn *t = state;
    if (!t)
        return;
    twell_ctx *ctx = t->h.ctx;
    tw_cu_scope sc;
    int entered = tw_cu_enter(ctx, &sc) == TWELL_OK;
    /* the path first, once the device is idle (as a plan's release): it may still point at a
     * candidate's module */
    if (entered && t->f) {
        (void)tw_cuda_synchronize(ctx);
        tw_cuda_ffn_release(&t->plan, t->f);
        t->f = NULL;
    }
    for (size_t i = 0; t->slots && i < t->n; i++) {
        if (entered)
            tw_ffn_tk_unload(&t->slots[i].tk);
        tw_cubin_free(&t->slots[i].cubin);
    }
    void *bufs[] = {t->x, t->wg, t->wu, t->wd, t->y, t->packed};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        tw_cuda_free(ctx, bufs[i]);
    if (entered)
        tw_cu_leave(ctx, &sc);
    tw_synth_destroy(t->host);
    free(t->ref);
    free(t->got);
    free(t->slots);
    tw_gpu_harness_free(&t->h, st);
    free(t);
}

/* The launcher's parameters (derived staging capacities included): the plan's cubin. */
static size_t tw_ffn_tune_params(twell_ctx *ctx, const tw_tune_config *cfg, const twell_shape *s,
                                 tw_param *out, size_t cap) {
    tw_ffn_cfg fc;
    if (cap < TW_FFN_NPARAMS || !ctx || !ctx->cuda || tw_ffn_cfg_from_tune(cfg, &fc) != 0)
        return 0;
    return tw_ffn_cfg_params(&fc, s, ctx->cuda, out);
}

static const tw_tune_space *const tw_ffn_spaces[] = {&tw_ffn_space_fused};

const tw_tune_op tw_ffn_tune_op = {
    .op = TW_FFN_INFER_OP,
    .spaces = tw_ffn_spaces,
    .nspaces = 1,
    .gate_agnostic = 0,
    .create = tw_ffn_tune_create,
    .destroy = tw_ffn_tune_destroy,
    .params = tw_ffn_tune_params,
};
