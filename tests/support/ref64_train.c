/*
 * ref64_train.c — naive dense fp64 training forward/backward (the tests' oracle) and the seeded
 * generators of sparse training data with controlled density, heavy rows and heavy neurons.
 */
#include "ref64_train.h"

#include "cpu_train.h"
#include "half.h"
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t tw_t_next(tw_t_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double tw_t_uniform(tw_t_rng *r) { return (double)(tw_t_next(r) >> 11) * 0x1.0p-53; }

int tw_t_int(tw_t_rng *r, int lo, int hi) {
    return lo + (int)(tw_t_next(r) % (uint64_t)(hi - lo + 1));
}

double tw_t_val16(twell_dtype dt, uint16_t h) { return (double)tw_half_to_f32(dt, h); }

uint16_t tw_t_round16(twell_dtype dt, double v) {
    if (!(v > 0.0))
        return 0;
    /* fp32 rounding gets within one 16-bit step; the exact choice is made in fp64 among the
     * neighbours (positive patterns are ordered like their values). */
    uint16_t h0 = tw_f32_to_half(dt, (float)v);
    uint16_t inf = dt == TWELL_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
    uint16_t best = 0;
    double bestd = INFINITY;
    for (int d = -1; d <= 1; d++) {
        int h = (int)h0 + d;
        if (h < 0 || h > (int)inf)
            continue;
        double dist = fabs(tw_t_val16(dt, (uint16_t)h) - v);
        if (dist < bestd || (dist == bestd && (h & 1) == 0)) {
            bestd = dist;
            best = (uint16_t)h;
        }
    }
    return best;
}

/* ---- data ---- */

/* z with P(N(0,1) > z) = q, by bisection on erfc (test code: clarity over speed). */
static double tw_t_upper_quantile(double q) {
    double lo = -10.0, hi = 10.0;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(mid / sqrt(2.0)) > q)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* Row knob of x[m][0]: 1 ordinary, 0 about half active, -1 mostly active. */
static int tw_t_row_kind(const tw_t_gen *g, size_t m) {
    if (!g->skew)
        return 1;
    if (m % 8 == 0)
        return -1;
    if (m % 8 == 3)
        return 0;
    return 1;
}

static uint16_t tw_t_h(twell_dtype dt, double v) { return tw_f32_to_half(dt, (float)v); }

int tw_t_data_make(tw_t_data *d, twell_dtype dt, size_t M, uint32_t K, uint32_t N,
                   const tw_t_gen *g) {
    memset(d, 0, sizeof *d);
    d->dt = dt;
    d->M = M;
    d->K = K;
    d->N = N;
    size_t xk = M * K, wk = (size_t)N * K;
    d->x = malloc(xk * 2);
    d->dy = malloc(xk * 2);
    d->wg = malloc(wk * 2);
    d->wu = malloc(wk * 2);
    d->wd = malloc(wk * 2);
    if (!d->x || !d->dy || !d->wg || !d->wu || !d->wd) {
        tw_t_data_free(d);
        return -1;
    }
    tw_t_rng r = {g->seed};
    /* Noise of x and Wg (columns 1..K-1): exact: integers in [-3,3] times 2^-3 and 2^-4, so
     * every product is a multiple of 2^-7 and the K-term sums stay far below 2^24 of them;
     * generic: uniform reals. sigma is the spread of the noise part of the pre-activation. */
    double xs = 0.125, ws = 0.0625;
    double var_x = g->exact_gate ? 4.0 * xs * xs : 0.5 * 0.5 / 3.0;
    double var_w = g->exact_gate ? 4.0 * ws * ws : 0.25 * 0.25 / 3.0;
    double sigma = sqrt((double)(K - 1) * var_x * var_w);
    double off = tw_t_upper_quantile(g->density) * sigma;
    if (g->exact_gate)
        off = round(off / ws) * ws;
    for (size_t m = 0; m < M; m++) {
        d->x[m * K] = tw_t_h(dt, (double)tw_t_row_kind(g, m));
        for (uint32_t k = 1; k < K; k++) {
            double v = g->exact_gate ? tw_t_int(&r, -3, 3) * xs : (tw_t_uniform(&r) - 0.5);
            d->x[m * K + k] = tw_t_h(dt, v);
        }
    }
    for (uint32_t n = 0; n < N; n++) {
        int heavy = g->skew && n % 16 == 5;
        d->wg[(size_t)n * K] = tw_t_h(dt, heavy ? off : -off);
        for (uint32_t k = 1; k < K; k++) {
            double v = g->exact_gate ? tw_t_int(&r, -3, 3) * ws : (tw_t_uniform(&r) - 0.5) * 0.5;
            d->wg[(size_t)n * K + k] = tw_t_h(dt, v);
        }
    }
    double us = 1.0 / sqrt((double)K);
    for (size_t i = 0; i < wk; i++) {
        d->wu[i] = tw_t_h(dt, (2.0 * tw_t_uniform(&r) - 1.0) * 2.0 * us);
        d->wd[i] = tw_t_h(dt, (2.0 * tw_t_uniform(&r) - 1.0) * us);
    }
    for (size_t i = 0; i < xk; i++)
        d->dy[i] = tw_t_h(dt, 2.0 * tw_t_uniform(&r) - 1.0);
    return 0;
}

void tw_t_data_free(tw_t_data *d) {
    free(d->x);
    free(d->dy);
    free(d->wg);
    free(d->wu);
    free(d->wd);
    memset(d, 0, sizeof *d);
}

double *tw_t_to_f64(twell_dtype dt, const uint16_t *src, size_t n) {
    double *o = malloc((n ? n : 1) * sizeof *o);
    if (o)
        for (size_t i = 0; i < n; i++)
            o[i] = tw_t_val16(dt, src[i]);
    return o;
}

double *tw_t_f32_to_f64(const float *src, size_t n) {
    double *o = malloc((n ? n : 1) * sizeof *o);
    if (o)
        for (size_t i = 0; i < n; i++)
            o[i] = (double)src[i];
    return o;
}

/* ---- the model ---- */

static double tw_t_dot(const double *a, const double *b, uint32_t K) {
    double s = 0.0;
    for (uint32_t k = 0; k < K; k++)
        s += a[k] * b[k];
    return s;
}

int tw_t_ref_forward(tw_t_ref *r, size_t M, uint32_t K, uint32_t N, const double *x,
                     const double *wg, const double *wu, const double *wd, int mode, twell_dtype dt,
                     const double *p_override) {
    memset(r, 0, sizeof *r);
    r->M = M;
    r->K = K;
    r->N = N;
    size_t mn = M * N;
    r->pre = calloc(mn, sizeof *r->pre);
    r->P = calloc(mn, sizeof *r->P);
    r->U = calloc(mn, sizeof *r->U);
    r->absdot = calloc(mn, sizeof *r->absdot);
    r->y = calloc(M * K, sizeof *r->y);
    if (!r->pre || !r->P || !r->U || !r->absdot || !r->y) {
        tw_t_ref_free(r);
        return -1;
    }
    double l1 = 0.0;
    for (size_t m = 0; m < M; m++) {
        const double *xm = x + m * K;
        for (uint32_t n = 0; n < N; n++) {
            size_t i = m * N + n;
            const double *g = wg + (size_t)n * K;
            r->pre[i] = tw_t_dot(xm, g, K);
            double a = 0.0;
            for (uint32_t k = 0; k < K; k++)
                a += fabs(xm[k] * g[k]);
            r->absdot[i] = a;
            double p;
            if (p_override)
                p = p_override[i];
            else if (mode == TW_T_P_ROUND)
                p = tw_t_val16(dt, tw_t_round16(dt, r->pre[i]));
            else
                p = r->pre[i] > 0.0 ? r->pre[i] : 0.0;
            if (!(p > 0.0))
                continue;
            r->P[i] = p;
            r->U[i] = tw_t_dot(xm, wu + (size_t)n * K, K);
            double t = r->U[i] * p;
            l1 += fabs(t);
            r->nnz++;
            for (uint32_t k = 0; k < K; k++)
                r->y[m * K + k] += t * wd[(size_t)n * K + k];
        }
    }
    r->L0 = (double)r->nnz / (double)M;
    r->L1 = l1 / (double)M;
    return 0;
}

void tw_t_ref_free(tw_t_ref *r) {
    free(r->pre);
    free(r->P);
    free(r->U);
    free(r->absdot);
    free(r->y);
    memset(r, 0, sizeof *r);
}

double tw_t_ref_loss(const tw_t_ref *r, const double *dy, double lambda) {
    double s = 0.0;
    for (size_t i = 0; i < r->M * r->K; i++)
        s += dy[i] * r->y[i];
    return s + lambda * r->L1;
}

void tw_t_ref_backward(const tw_t_ref *r, const double *x, const double *wg, const double *wu,
                       const double *wd, const double *dy, double lambda, double *dx, double *dwg,
                       double *dwu, double *dwd) {
    size_t M = r->M;
    uint32_t K = r->K, N = r->N;
    memset(dx, 0, M * K * sizeof *dx);
    memset(dwg, 0, (size_t)N * K * sizeof *dwg);
    memset(dwu, 0, (size_t)N * K * sizeof *dwu);
    memset(dwd, 0, (size_t)N * K * sizeof *dwd);
    double c = lambda / (double)M;
    for (size_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++) {
            size_t i = m * N + n;
            double p = r->P[i], u = r->U[i];
            if (!(p > 0.0))
                continue;
            double sgn = u > 0.0 ? 1.0 : (u < 0.0 ? -1.0 : 0.0);
            /* d loss / d T[m,n]: through y, and through λ·|T|/M with |T| = |U|·P (P > 0) */
            double dt = tw_t_dot(dy + m * K, wd + (size_t)n * K, K) + c * sgn;
            double du = dt * p, dp = dt * u, t = u * p;
            for (uint32_t k = 0; k < K; k++) {
                size_t nk = (size_t)n * K + k, mk = m * K + k;
                dx[mk] += du * wu[nk] + dp * wg[nk];
                dwu[nk] += du * x[mk];
                dwg[nk] += dp * x[mk];
                dwd[nk] += t * dy[mk];
            }
        }
}

static double *tw_t_abs_copy(const double *a, size_t n) {
    double *o = malloc((n ? n : 1) * sizeof *o);
    if (o)
        for (size_t i = 0; i < n; i++)
            o[i] = fabs(a[i]);
    return o;
}

int tw_t_ref_scales(const tw_t_ref *r, const double *x, const double *wg, const double *wu,
                    const double *wd, const double *dy, double lambda, double *sy, double *sdx,
                    double *sdwg, double *sdwu, double *sdwd) {
    size_t xk = r->M * r->K, wk = (size_t)r->N * r->K;
    double *ax = tw_t_abs_copy(x, xk), *ady = tw_t_abs_copy(dy, xk);
    double *ag = tw_t_abs_copy(wg, wk), *au = tw_t_abs_copy(wu, wk), *ad = tw_t_abs_copy(wd, wk);
    tw_t_ref a;
    int rc = -1;
    if (ax && ady && ag && au && ad &&
        tw_t_ref_forward(&a, r->M, r->K, r->N, ax, ag, au, ad, TW_T_P_RELU, TWELL_DTYPE_BF16,
                         r->P) == 0) {
        /* U ≥ 0 here, so sign(U)·λ/M adds λ/M where U > 0; where Σ|x·Wu| = 0 the L1 term's
         * derivative is still bounded by λ/M: count it too. */
        for (size_t i = 0; i < r->M * r->N; i++)
            if (a.P[i] > 0.0 && a.U[i] == 0.0)
                a.U[i] = 0x1.0p-1000;
        memcpy(sy, a.y, xk * sizeof *sy);
        tw_t_ref_backward(&a, ax, ag, au, ad, ady, lambda, sdx, sdwg, sdwu, sdwd);
        tw_t_ref_free(&a);
        rc = 0;
    }
    free(ax);
    free(ady);
    free(ag);
    free(au);
    free(ad);
    return rc;
}

double tw_t_err_scaled(const double *a, const double *b, const double *s, size_t n,
                       double round_rel, double round_abs, size_t *where) {
    double worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) - round_rel * fabs(b[i]) - round_abs;
        if (d <= 0.0)
            continue;
        double e = s[i] > 0.0 ? d / s[i] : INFINITY;
        if (!(e <= worst)) {
            worst = e;
            wi = i;
        }
    }
    if (where)
        *where = wi;
    return worst;
}

/* ---- the library under test ---- */

int tw_t_lib_open(tw_t_lib *L, const twell_shape *s, int threads) {
    memset(L, 0, sizeof *L);
    L->shape = *s;
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = threads;
    twell_status st = twell_ctx_create(&o, &L->ctx);
    if (st == TWELL_OK)
        st = twell_plan_create(L->ctx, s, &L->plan);
    if (st == TWELL_OK)
        st = twell_train_state_create(L->plan, &L->state);
    if (st != TWELL_OK) {
        fprintf(stderr, "tw_t_lib_open: %s: %s\n", twell_status_name(st), twell_ctx_errmsg(L->ctx));
        tw_t_lib_close(L);
        return -1;
    }
    return 0;
}

void tw_t_lib_close(tw_t_lib *L) {
    twell_train_state_destroy(L->state);
    twell_plan_destroy(L->plan);
    twell_ctx_destroy(L->ctx);
    memset(L, 0, sizeof *L);
}

twell_status tw_t_lib_forward(tw_t_lib *L, const tw_t_data *d, uint16_t *y, float *stats) {
    return twell_ffn_forward_train(L->plan, d->M, d->x, d->wg, d->wu, d->wd, y, stats, L->state,
                                   NULL);
}

twell_status tw_t_lib_backward(tw_t_lib *L, const tw_t_data *d, float lambda, uint16_t *dx,
                               float *dwg, float *dwu, float *dwd) {
    return twell_ffn_backward(L->plan, L->state, d->M, d->x, d->wg, d->wu, d->wd, d->dy, lambda, dx,
                              dwg, dwu, dwd, NULL);
}

double *tw_t_lib_dense_p(const tw_t_lib *L) {
    const tw_train_saved *sv = L->state->backend_data;
    const twell_shape *s = &L->shape;
    size_t M = sv->M;
    double *P = calloc(M * s->N, sizeof *P);
    uint32_t *cols = malloc(s->N * sizeof *cols);
    float *p = malloc(s->N * sizeof *p);
    if (!P || !cols || !p) {
        free(P);
        P = NULL;
    } else {
        for (size_t m = 0; m < M; m++) {
            size_t c = tw_train_row_support(s, sv, m, cols, p, NULL);
            for (size_t i = 0; i < c; i++)
                P[m * s->N + cols[i]] = (double)p[i];
        }
    }
    free(cols);
    free(p);
    return P;
}
