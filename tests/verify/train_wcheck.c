/*
 * train_wcheck.c — fp64 weight-gradient model on a fixed support and the scaled check (see
 * train_wcheck.h).
 */
#include "train_wcheck.h"

#include "half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Σ a·w and Σ |a|·|w| over K values, a already fp64, w 16-bit. */
static void tw_wc_dot(twell_dtype dt, const double *a, const uint16_t *w, uint32_t K, double *s,
                      double *sa) {
    double v = 0.0, va = 0.0;
    for (uint32_t k = 0; k < K; k++) {
        double p = a[k] * (double)tw_half_to_f32(dt, w[k]);
        v += p;
        va += fabs(p);
    }
    *s = v, *sa = va;
}

static double *tw_wc_f64(twell_dtype dt, const uint16_t *h, size_t n) {
    double *o = malloc((n ? n : 1) * sizeof *o);
    if (o)
        for (size_t i = 0; i < n; i++)
            o[i] = tw_half_to_f32(dt, h[i]);
    return o;
}

/* (|g − r| − allow) / scale folded into *worst / *at (NaN and an error on a zero scale: inf). */
static void tw_wc_fold(float g, double r, double scale, double allow, size_t i, double *worst,
                       size_t *at) {
    double d = fabs((double)g - r) - allow;
    double e = isnan(d) ? INFINITY : d <= 0.0 ? 0.0 : scale > 0.0 ? d / scale : INFINITY;
    if (e > *worst)
        *worst = e, *at = i;
}

int tw_train_wgrad_check(twell_dtype dt, uint32_t K, uint32_t N, const tw_train_support *sup,
                         const uint16_t *x, const uint16_t *wu, const uint16_t *wd,
                         const uint16_t *dy, double lambda, const float *const *got, size_t nres,
                         const unsigned char *mask, tw_train_wcheck *res) {
    size_t M = sup->M, nnz = (size_t)sup->row_off[M];
    memset(res, 0, nres * sizeof *res);
    double *xf = tw_wc_f64(dt, x, M * K), *dyf = tw_wc_f64(dt, dy, M * K);
    double *ent = malloc((nnz ? nnz : 1) * 4 * sizeof *ent); /* U, Σ|x·Wu|, D, Σ|dy·Wd| */
    size_t *noff = calloc((size_t)N + 2, sizeof *noff), *list = malloc((nnz ? nnz : 1) * 16);
    double *acc = malloc((size_t)K * 8 * sizeof *acc);
    int rc = -1;
    if (!xf || !dyf || !ent || !noff || !list || !acc)
        goto done;
    const double c = lambda / (double)M, amb = 2.0 * (double)K * 0x1.0p-24;
    /* per entry dot products; neuron lists (rows ascending) by a counting sort */
    for (size_t m = 0; m < M; m++)
        for (uint64_t e = sup->row_off[m]; e < sup->row_off[m + 1]; e++) {
            uint32_t n = sup->col[e];
            if (n >= N)
                goto done;
            tw_wc_dot(dt, xf + m * K, wu + (size_t)n * K, K, ent + 4 * e, ent + 4 * e + 1);
            tw_wc_dot(dt, dyf + m * K, wd + (size_t)n * K, K, ent + 4 * e + 2, ent + 4 * e + 3);
            noff[n + 2]++;
        }
    for (uint32_t n = 0; n < N; n++)
        noff[n + 2] += noff[n + 1];
    for (size_t m = 0; m < M; m++)
        for (uint64_t e = sup->row_off[m]; e < sup->row_off[m + 1]; e++) {
            size_t i = noff[sup->col[e] + 1]++;
            list[2 * i] = m, list[2 * i + 1] = (size_t)e;
        }
    /* per neuron: ref (3), scale (3), allow (dWg, dWu) rows of K, then the comparison */
    double *rg = acc, *ru = acc + K, *rd = acc + 2 * (size_t)K, *sg = acc + 3 * (size_t)K,
           *su = acc + 4 * (size_t)K, *sd = acc + 5 * (size_t)K, *ag = acc + 6 * (size_t)K,
           *au = acc + 7 * (size_t)K;
    for (uint32_t n = 0; n < N; n++) {
        if (mask && !mask[n])
            continue;
        for (size_t j = 0; j < nres; j++)
            res[j].neurons++;
        memset(acc, 0, (size_t)K * 8 * sizeof *acc);
        for (size_t i = noff[n]; i < noff[n + 1]; i++) {
            size_t m = list[2 * i];
            const double *en = ent + 4 * list[2 * i + 1];
            double p = tw_half_to_f32(dt, sup->pbits[list[2 * i + 1]]);
            double u = en[0], ua = en[1];
            int is_amb = fabs(u) <= amb * ua;
            double sgn = is_amb ? 0.0 : (u > 0.0 ? 1.0 : (u < 0.0 ? -1.0 : 0.0));
            double dT = en[2] + c * sgn, dTa = en[3] + c;
            double du = dT * p, dp = dT * u, t = u * p;
            double dua = dTa * p, dpa = dTa * ua, ta = ua * p;
            double alu = is_amb ? c * p : 0.0, alg = is_amb ? c * fabs(u) : 0.0;
            for (size_t j = 0; j < nres; j++)
                res[j].sign_amb += (size_t)is_amb;
            const double *xm = xf + m * K, *dym = dyf + m * K;
            for (uint32_t k = 0; k < K; k++) {
                double ax = fabs(xm[k]), ady = fabs(dym[k]);
                rg[k] += dp * xm[k], ru[k] += du * xm[k], rd[k] += t * dym[k];
                sg[k] += dpa * ax, su[k] += dua * ax, sd[k] += ta * ady;
                ag[k] += alg * ax, au[k] += alu * ax;
            }
        }
        size_t row = (size_t)n * K;
        for (size_t j = 0; j < nres; j++) {
            const float *const *g = got + 3 * j;
            tw_train_wcheck *r = res + j;
            for (uint32_t k = 0; k < K; k++) {
                size_t i = row + k;
                tw_wc_fold(g[0][i], rg[k], sg[k], ag[k], i, &r->worst[0], &r->at[0]);
                tw_wc_fold(g[1][i], ru[k], su[k], au[k], i, &r->worst[1], &r->at[1]);
                tw_wc_fold(g[2][i], rd[k], sd[k], 0.0, i, &r->worst[2], &r->at[2]);
            }
        }
    }
    rc = 0;
done:
    free(xf), free(dyf), free(ent), free(noff), free(list), free(acc);
    return rc;
}
