/*
 * dense_tuner.c — the ffn_dense op's part of the tuning engine (dense_tuner.h): the split-K
 * factors of the dense path's up and down GEMMs on a CUDA device. Every candidate runs through ONE
 * real plan set to TWELL_PATH_DENSE (tw_cuda_dense_tune_force fixes its factors and reserves the
 * workspace before the timed span), so the timed sequence is the plan's own dense call: counting
 * and unit flags, the up GEMM (split or not) and its reduction, the down GEMM and its reduction.
 * Nothing is compiled per candidate: the plan loads the four gemm_sm90 modules once. Inputs:
 * synthetic data of the bucket's size at the tuner's sparsity (about 0.5% of N active per row,
 * never zeros; the dense cost hardly depends on it), packed on the device by the default
 * gate-pack kernel. Probe: the first and the last rows of the bucket (up to 67 each; the split
 * factors apply to the whole call, the ragged last unit included) checked against
 * tw_ffn_infer_ref on the same packed bytes with the tolerance of tests/test_gpu_ffn_dense.c, and
 * the plan must report having run the candidate's factors (tw_cuda_dense_last_split).
 */
#include "dense_tuner.h"

#include "cuda_dense.h"
#include "cuda_gate_pack.h"
#include "dense_split.h"

#include "cpu_ref.h"
#include "cuda_driver.h"
#include "gpu_tune_harness.h"
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TW_DENSE_PROBE_ROWS 67 /* rows checked at each end of the bucket */

typedef struct tw_gpu_dense {
    tw_gpu_harness h; /* the context, timing resources and first failure */
    twell_shape shape;
    size_t M;          /* the bucket's rows */
    size_t head, tail; /* probe rows [0, head) and [M - tail, M) */
    const tw_tune_config *base;
    twell_plan *plan; /* path DENSE; created by begin */
    tw_synth_ffn *host;
    void *x, *wg, *wu, *wd, *y;
    uint32_t *packed;
    float *ref;    /* [(head + tail), K] reference of the probe rows */
    uint16_t *got; /* the same rows of y */
} tw_gpu_dense;

/* The reference of `rows` rows starting at row r0, from the host inputs and the device's packed
 * rows, into ref (fp32). */
static twell_status tw_dense_ref_rows(tw_gpu_dense *t, size_t r0, size_t rows, float *ref) {
    twell_ctx *ctx = t->h.ctx;
    const twell_shape *s = &t->shape;
    const size_t row_words = s->N / s->C;
    uint32_t *hp = malloc(rows * row_words * 4u);
    uint16_t *ry = malloc(rows * s->K * 2u);
    twell_status st = TWELL_OK;
    if (!hp || !ry)
        st = tw_error(ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory for the probe");
    if (st == TWELL_OK)
        st = tw_cuda_memcpy_dtoh(ctx, hp, t->packed + r0 * row_words, rows * row_words * 4u);
    if (st == TWELL_OK)
        st = tw_ffn_infer_ref(ctx->pool, s, rows, t->host->x + r0 * s->K, hp, t->host->wg,
                              t->host->wu, t->host->wd, ry);
    if (st == TWELL_OK)
        tw_to_f32_ref(s->dtype, ry, ref, rows * s->K);
    free(hp);
    free(ry);
    return st;
}

/* Inputs of the bucket's size, uploaded and packed by the default gate-pack kernel of this shape;
 * the probe's reference; the plan whose dense calls are timed. */
static twell_status tw_dense_data(tw_gpu_dense *t) {
    twell_ctx *ctx = t->h.ctx;
    const twell_shape *s = &t->shape;
    twell_status st = tw_gpu_harness_synth(ctx, s, t->M, s->gated, &t->host);
    if (st != TWELL_OK)
        return st;
    const size_t xbytes = t->M * s->K * 2u, wbytes = (size_t)s->N * s->K * 2u;
    const size_t P = t->head + t->tail;
    t->ref = malloc(P * s->K * sizeof *t->ref);
    t->got = malloc(P * s->K * 2u);
    if (!t->ref || !t->got)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory for the probe");
    tw_cu_scope sc;
    if ((st = tw_cu_enter(ctx, &sc)) != TWELL_OK)
        return st;
    tw_gp_cfg gc =
        tw_gp_cfg_default(tw_sm90_gate_pack_supports(s, ctx->cuda) ? TW_GP_SM90 : TW_GP_SIMT);
    tw_gp_kernel gk;
    memset(&gk, 0, sizeof gk);
    if ((st = tw_cuda_malloc(ctx, xbytes, &t->x)) == TWELL_OK &&
        (st = tw_cuda_malloc(ctx, xbytes, &t->y)) == TWELL_OK &&
        (st = tw_cuda_malloc(ctx, wbytes, &t->wu)) == TWELL_OK &&
        (st = tw_cuda_malloc(ctx, wbytes, &t->wd)) == TWELL_OK &&
        (!s->gated || (st = tw_cuda_malloc(ctx, wbytes, &t->wg)) == TWELL_OK) &&
        (st = tw_cuda_malloc(ctx, twell_packed_words(s, t->M) * 4u, (void **)&t->packed)) ==
            TWELL_OK &&
        (st = tw_cuda_malloc(ctx, t->h.flush_bytes, &t->h.flush)) == TWELL_OK &&
        (st = tw_cuda_memcpy_htod(ctx, t->x, t->host->x, xbytes)) == TWELL_OK &&
        (st = tw_cuda_memcpy_htod(ctx, t->wu, t->host->wu, wbytes)) == TWELL_OK &&
        (st = tw_cuda_memcpy_htod(ctx, t->wd, t->host->wd, wbytes)) == TWELL_OK &&
        (!s->gated || (st = tw_cuda_memcpy_htod(ctx, t->wg, t->host->wg, wbytes)) == TWELL_OK) &&
        (st = tw_cuda_event_create(ctx, &t->h.ev[0])) == TWELL_OK &&
        (st = tw_cuda_event_create(ctx, &t->h.ev[1])) == TWELL_OK &&
        (st = tw_gp_kernel_load(ctx, s, &gc, &gk)) == TWELL_OK &&
        (st = tw_gp_kernel_launch(ctx, &gk, s, t->M, t->x, s->gated ? t->wg : t->wu, t->packed,
                                  NULL)) == TWELL_OK &&
        (st = tw_cuda_synchronize(ctx)) == TWELL_OK &&
        (st = tw_dense_ref_rows(t, 0, t->head, t->ref)) == TWELL_OK && t->tail)
        st = tw_dense_ref_rows(t, t->M - t->tail, t->tail, t->ref + t->head * s->K);
    tw_gp_kernel_unload(&gk);
    if (st == TWELL_OK && (st = twell_plan_create(ctx, s, &t->plan)) == TWELL_OK)
        st = twell_plan_set_path(t->plan, TWELL_PATH_DENSE);
    const char *why = NULL;
    if (st == TWELL_OK && !tw_cuda_dense_usable(t->plan, &why))
        st = tw_error(ctx, TWELL_ERR_UNSUPPORTED, "tune: the dense path cannot run here: %s", why);
    tw_cu_leave(ctx, &sc);
    return st;
}

static twell_status tw_dense_begin(void *user, const tw_tune_config *cands, size_t n) {
    tw_gpu_dense *t = user;
    (void)n;
    t->base = cands;
    return tw_dense_data(t);
}

/* The candidate's factors on the plan, its workspace reserved (outside any timed span). */
static twell_status tw_dense_swap_in(void *arg) {
    tw_gpu_dense *t = ((void **)arg)[0];
    const unsigned *sp = ((void **)arg)[1];
    return tw_cuda_dense_tune_force(t->plan, sp[0], sp[1], t->M);
}

/* The plan's dense call for the bucket's rows. */
static twell_status tw_dense_call(void *arg) {
    tw_gpu_dense *t = ((void **)arg)[0];
    return twell_ffn_infer(t->plan, t->M, t->x, t->packed, t->shape.gated ? t->wg : NULL, t->wu,
                           t->wd, t->y, NULL);
}

/* Largest row-relative L2 error of the probe rows of t->got against t->ref. */
static double tw_dense_probe_err(const tw_gpu_dense *t, size_t *worst_row) {
    const size_t K = t->shape.K, P = t->head + t->tail;
    float *g = malloc(K * sizeof *g);
    double worst = g ? 0.0 : INFINITY;
    *worst_row = 0;
    for (size_t r = 0; g && r < P; r++) {
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
            *worst_row = r < t->head ? r : t->M - t->tail + (r - t->head);
        }
    }
    free(g);
    return worst;
}

static twell_status tw_dense_verify(void *user, const tw_tune_config *cfg) {
    tw_gpu_dense *t = user;
    twell_ctx *ctx = t->h.ctx;
    const size_t K = t->shape.K;
    unsigned sp[2], ran[2] = {0, 0};
    if (tw_dense_cfg_from_tune(cfg, sp) != 0)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "tune: not a configuration of ffn_dense");
    void *arg[2] = {t, sp};
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st != TWELL_OK)
        return st;
    if ((st = tw_dense_swap_in(arg)) == TWELL_OK &&
        (st = tw_cuda_memset_d32(ctx, t->y, 0xFFFFFFFFu, t->M * K / 2u, NULL)) == TWELL_OK &&
        (st = tw_dense_call(arg)) == TWELL_OK && (st = tw_cuda_synchronize(ctx)) == TWELL_OK &&
        (st = tw_cuda_memcpy_dtoh(ctx, t->got, t->y, t->head * K * 2u)) == TWELL_OK && t->tail)
        st = tw_cuda_memcpy_dtoh(ctx, t->got + t->head * K,
                                 (const uint16_t *)t->y + (t->M - t->tail) * K, t->tail * K * 2u);
    tw_cu_leave(ctx, &sc);
    tw_cuda_dense_last_split(t->plan, ran);
    if (st != TWELL_OK) {
        tw_gpu_harness_note(&t->h, cfg, "failed to run", twell_ctx_errmsg(ctx));
        return st;
    }
    char canon[TW_TUNE_CANON_MAX], why[160];
    tw_tune_config_canon(cfg, canon, sizeof canon);
    size_t wr = 0;
    double err = tw_dense_probe_err(t, &wr), tol = t->shape.dtype == TWELL_DTYPE_BF16 ? 5e-3 : 1e-3;
    if (ran[0] != sp[0] || ran[1] != sp[1])
        snprintf(why, sizeof why, "the plan ran split factors %u/%u instead", ran[0], ran[1]);
    else if (!(err <= tol))
        snprintf(why, sizeof why, "row %zu has row-relative error %.3e > %.0e", wr, err, tol);
    else
        return TWELL_OK;
    tw_gpu_harness_note(&t->h, cfg, "gives wrong results", why);
    return tw_error(ctx, TWELL_ERR_INTERNAL, "tune: %s: %s", canon, why);
}

/* One timed call (tw_gpu_harness_measure: L2 flushed, CUDA events) of the plan's dense call. */
static twell_status tw_dense_measure(void *user, const tw_tune_config *cfg, double *ms_out) {
    tw_gpu_dense *t = user;
    unsigned sp[2];
    if (tw_dense_cfg_from_tune(cfg, sp) != 0)
        return TWELL_ERR_INVALID_ARG;
    void *arg[2] = {t, sp};
    return tw_gpu_harness_measure(&t->h, cfg, tw_dense_swap_in, tw_dense_call, arg, ms_out);
}

/* ---- the op's driver ---- */

static twell_status tw_dense_tune_create(twell_ctx *ctx, const tw_tune_space *sp,
                                         const twell_shape *s, size_t M, void **out,
                                         tw_tune_callbacks *cb) {
    (void)sp; /* the op has one space */
    *out = NULL;
    tw_gpu_dense *t = calloc(1, sizeof *t);
    if (!t)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory");
    tw_gpu_harness_init(&t->h, ctx);
    t->shape = *s;
    t->M = M ? M : 1;
    t->head = t->M < TW_DENSE_PROBE_ROWS ? t->M : TW_DENSE_PROBE_ROWS;
    t->tail = t->M - t->head < TW_DENSE_PROBE_ROWS ? t->M - t->head : TW_DENSE_PROBE_ROWS;
    memset(cb, 0, sizeof *cb);
    cb->user = t;
    cb->begin = tw_dense_begin;
    cb->verify = tw_dense_verify;
    cb->measure = tw_dense_measure;
    *out = t;
    return TWELL_OK;
}

/* Frees the state: the plan first (it synchronises), then the buffers. */
static void tw_dense_tune_destroy(void *state, twell_status st) {
    tw_gpu_dense *t = state;
    if (!t)
        return;
    twell_ctx *ctx = t->h.ctx;
    twell_plan_destroy(t->plan);
    tw_cu_scope sc;
    int entered = tw_cu_enter(ctx, &sc) == TWELL_OK;
    void *bufs[] = {t->x, t->wg, t->wu, t->wd, t->y, t->packed};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        tw_cuda_free(ctx, bufs[i]);
    if (entered)
        tw_cu_leave(ctx, &sc);
    tw_synth_destroy(t->host);
    free(t->ref);
    free(t->got);
    tw_gpu_harness_free(&t->h, st);
    free(t);
}

/* The engine makes the chosen config's cubin present: every candidate runs the plan's own
 * modules, so that is the split-K up GEMM a plan of the shape loads (any of the four would do). */
static size_t tw_dense_tune_params(twell_ctx *ctx, const tw_tune_config *cfg, const twell_shape *s,
                                   tw_param *out, size_t cap) {
    unsigned sp[2];
    tw_param prm[TW_DENSE_GEMM_NPARAMS];
    if (!ctx || !ctx->cuda || tw_dense_cfg_from_tune(cfg, sp) != 0)
        return 0;
    size_t n = tw_dense_gemm_params(s, TW_DENSE_UP, 1, prm);
    if (n > cap)
        return 0;
    memcpy(out, prm, n * sizeof *prm);
    return n;
}

static const tw_tune_space *const tw_dense_spaces[] = {&tw_dense_space_split};

const tw_tune_op tw_dense_tune_op = {
    .op = TW_DENSE_OP,
    .spaces = tw_dense_spaces,
    .nspaces = 1,
    .gate_agnostic = 0,
    .create = tw_dense_tune_create,
    .destroy = tw_dense_tune_destroy,
    .params = tw_dense_tune_params,
};
