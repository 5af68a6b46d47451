/* tw_nonfinite.c — planted non-finite data and its fp64 reference classes (tw_nonfinite.h). */
#include "tw_nonfinite.h"

#include "half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t tw_nf_rand(uint64_t *st) {
    uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double tw_nf_unit(uint64_t *st) { return (double)(tw_nf_rand(st) >> 11) * 0x1p-53; }

static uint16_t *tw_nf_fill(twell_dtype dt, size_t n, double lo, double hi, uint64_t *st) {
    uint16_t *p = malloc(n * sizeof *p);
    if (p)
        for (size_t i = 0; i < n; i++)
            p[i] = tw_f32_to_half(dt, (float)(lo + (hi - lo) * tw_nf_unit(st)));
    return p;
}

const char *tw_nf_where_name(tw_nf_where w) {
    static const char *const names[] = {"x", "packing weight", "Wu", "Wd"};
    return (unsigned)w < TW_NF_COUNT ? names[w] : "?";
}

int tw_nf_strict(tw_nf_where w) { return w == TW_NF_X || w == TW_NF_WP; }

int tw_nf_make(tw_nf_data *d, const twell_shape *s, size_t M, tw_nf_where where, double density,
               uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->s = *s;
    d->M = M;
    d->where = where;
    const twell_dtype dt = s->dtype;
    const size_t xk = M * s->K, wk = (size_t)s->N * s->K;
    /* pre = Σ x_k w_k with x ~ U[0, 1), w ~ U[-1/8, 1/8) + b: mean K·b/2, deviation about
     * sqrt(K/3)/8·0.6; b puts `density` of it above 0 (a normal quantile, roughly) */
    const double q = density >= 0.5 ? 0.0 : sqrt(-2.0 * log(2.0 * density)) * 0.8;
    const double b = -q * 0.6 * sqrt((double)s->K / 3.0) / 8.0 / ((double)s->K / 2.0);
    uint64_t st = seed;
    d->x = tw_nf_fill(dt, xk, 0.0, 1.0, &st);
    d->dy = tw_nf_fill(dt, xk, -1.0, 1.0, &st);
    d->wu = tw_nf_fill(dt, wk, -0.125 + (s->gated ? 0.0 : b), 0.125 + (s->gated ? 0.0 : b), &st);
    d->wd = tw_nf_fill(dt, wk, -0.125, 0.125, &st);
    if (s->gated)
        d->wg = tw_nf_fill(dt, wk, -0.125 + b, 0.125 + b, &st);
    if (!d->x || !d->dy || !d->wu || !d->wd || (s->gated && !d->wg)) {
        tw_nf_free(d);
        return -1;
    }
    const uint16_t nan_neg = dt == TWELL_DTYPE_BF16 ? 0xffc1u : 0xfe01u; /* not canonical */
    const uint16_t pinf = dt == TWELL_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
    const uint32_t K = s->K;
    switch (where) {
    case TW_NF_X:
        if (M > 1)
            d->x[1 * K + 3] = nan_neg;
        if (M > 2)
            d->x[2 * K + 5] = pinf;
        if (M > 3)
            d->x[3 * K + 7] = pinf | 0x8000u;
        if (M == 1)
            d->x[3] = nan_neg;
        break;
    case TW_NF_WP:
        (s->gated ? d->wg : d->wu)[5 * (size_t)K + 2] = nan_neg;
        break;
    case TW_NF_WU:
        d->wu[9 * (size_t)K + 4] = nan_neg;
        break;
    case TW_NF_WD:
        d->wd[12 * (size_t)K + 6] = pinf;
        break;
    default:
        break;
    }
    return 0;
}

void tw_nf_free(tw_nf_data *d) {
    free(d->x);
    free(d->wg);
    free(d->wu);
    free(d->wd);
    free(d->dy);
    memset(d, 0, sizeof *d);
}

static unsigned char tw_nf_classd(double v) {
    if (isnan(v))
        return TW_NF_NAN;
    if (isinf(v))
        return v > 0 ? TW_NF_PINF : TW_NF_NINF;
    return TW_NF_FIN;
}

unsigned char tw_nf_classf(float v) { return tw_nf_classd((double)v); }

unsigned char tw_nf_class16(twell_dtype dt, uint16_t v) {
    return tw_nf_classf(tw_half_to_f32(dt, v));
}

static double *tw_nf_f64(twell_dtype dt, const uint16_t *p, size_t n) {
    double *o = malloc(n * sizeof *o);
    if (o)
        for (size_t i = 0; i < n; i++)
            o[i] = (double)tw_half_to_f32(dt, p[i]);
    return o;
}

static double tw_nf_dot(const double *a, const double *b, size_t K) {
    double s = 0.0;
    for (size_t k = 0; k < K; k++)
        s += a[k] * b[k];
    return s;
}

/* The classes of n fp64 values into a new array (NULL when out of memory). */
static unsigned char *tw_nf_classes(const double *v, size_t n) {
    unsigned char *c = malloc(n ? n : 1);
    if (c)
        for (size_t i = 0; i < n; i++)
            c[i] = tw_nf_classd(v[i]);
    return c;
}

/* The sign of the L1 term's gradient: NaN for NaN. */
static double tw_nf_sign(double u) { return u > 0 ? 1.0 : u < 0 ? -1.0 : u == 0 ? 0.0 : u; }

int tw_nf_reference(const tw_nf_data *d, int train, double lambda, tw_nf_ref *r) {
    memset(r, 0, sizeof *r);
    const twell_shape *s = &d->s;
    const twell_dtype dt = s->dtype;
    const size_t M = d->M, K = s->K, N = s->N, xk = M * K, wk = N * K;
    double *x = tw_nf_f64(dt, d->x, xk), *dy = tw_nf_f64(dt, d->dy, xk);
    double *wp = tw_nf_f64(dt, s->gated ? d->wg : d->wu, wk), *wu = tw_nf_f64(dt, d->wu, wk);
    double *wd = tw_nf_f64(dt, d->wd, wk), *wg = wp;
    double *y = calloc(xk, sizeof *y), *dx = calloc(xk, sizeof *dx);
    double *dwg = calloc(wk, sizeof *dwg), *dwu = calloc(wk, sizeof *dwu);
    double *dwd = calloc(wk, sizeof *dwd);
    r->active = calloc(M, sizeof *r->active);
    int rc = -1;
    if (!x || !dy || !wp || !wu || !wd || !y || !dx || !dwg || !dwu || !dwd || !r->active)
        goto out;
    double l1 = 0.0;
    const double l1c = lambda / (double)M;
    for (size_t m = 0; m < M; m++) {
        const double *xm = x + m * K;
        for (size_t n = 0; n < N; n++) {
            const double pre = tw_nf_dot(xm, wp + n * K, K);
            const uint16_t g16 = tw_half_act(dt, (float)pre); /* the stored activation */
            if (!tw_half_active(g16))
                continue;
            r->active[m]++;
            const double p = (double)tw_half_to_f32(dt, g16);
            const double u = s->gated ? tw_nf_dot(xm, wu + n * K, K) : 0.0;
            const double t = s->gated ? p * u : p;
            l1 += fabs(t);
            for (size_t k = 0; k < K; k++)
                y[m * K + k] += t * wd[n * K + k];
            if (!train)
                continue;
            const double dT = tw_nf_dot(dy + m * K, wd + n * K, K) + l1c * tw_nf_sign(u);
            const double du = dT * p, dp = dT * u;
            for (size_t k = 0; k < K; k++) {
                dx[m * K + k] += du * wu[n * K + k] + dp * wg[n * K + k];
                dwu[n * K + k] += du * xm[k];
                dwg[n * K + k] += dp * xm[k];
                dwd[n * K + k] += t * dy[m * K + k];
            }
        }
    }
    r->l1 = tw_nf_classd(l1);
    r->y = tw_nf_classes(y, xk);
    if (train) {
        r->dx = tw_nf_classes(dx, xk);
        r->dwg = tw_nf_classes(dwg, wk);
        r->dwu = tw_nf_classes(dwu, wk);
        r->dwd = tw_nf_classes(dwd, wk);
    }
    rc = r->y && (!train || (r->dx && r->dwg && r->dwu && r->dwd)) ? 0 : -1;
out:
    free(x);
    free(dy);
    free(wp);
    free(wu);
    free(wd);
    free(y);
    free(dx);
    free(dwg);
    free(dwu);
    free(dwd);
    if (rc != 0)
        tw_nf_ref_free(r);
    return rc;
}

void tw_nf_ref_free(tw_nf_ref *r) {
    free(r->y);
    free(r->dx);
    free(r->dwg);
    free(r->dwu);
    free(r->dwd);
    free(r->active);
    memset(r, 0, sizeof *r);
}

size_t tw_nf_compare(twell_dtype dt, const uint16_t *got16, const float *got32,
                     const unsigned char *want, size_t n, size_t row_len, int mode,
                     const char *name) {
    static const char *const cls[] = {"finite", "+Inf", "-Inf", "NaN"};
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char g = got32 ? tw_nf_classf(got32[i]) : tw_nf_class16(dt, got16[i]);
        int ok = mode == TW_NF_EXACT    ? g == want[i]
                 : mode == TW_NF_FINITE ? (g == TW_NF_FIN) == (want[i] == TW_NF_FIN)
                                        : want[i] == TW_NF_FIN || g != TW_NF_FIN;
        if (ok)
            continue;
        if (bad++ == 0)
            printf("  %s[%zu] (row %zu, column %zu): got %s, want %s\n", name, i, i / row_len,
                   i % row_len, cls[g], cls[want[i]]);
    }
    if (bad)
        printf("  %s: %zu of %zu values in the wrong class\n", name, bad, n);
    return bad;
}
