/* ref64.c — naive dense fp64 FFN for checking the library's reference (see ref64.h). */
#include "ref64.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double ref64_half(twell_dtype dt, uint16_t h) {
    if (dt == TWELL_DTYPE_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return (double)f;
    }
    /* fp16 decoded arithmetically, independently of half.h */
    int sign = (h >> 15) & 1, e = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v;
    if (e == 0)
        v = ldexp((double)man, -24);
    else if (e == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexp((double)(man | 0x400), e - 25);
    return sign ? -v : v;
}

void ref64_linear(twell_dtype dt, size_t M, size_t K, size_t N, const uint16_t *x,
                  const uint16_t *w, double *out, double *absout) {
    for (size_t m = 0; m < M; m++)
        for (size_t n = 0; n < N; n++) {
            double s = 0.0, a = 0.0;
            for (size_t k = 0; k < K; k++) {
                double p = ref64_half(dt, x[m * K + k]) * ref64_half(dt, w[n * K + k]);
                s += p;
                a += fabs(p);
            }
            out[m * N + n] = s;
            if (absout)
                absout[m * N + n] = a;
        }
}

/* Rounds v to the nearest dtype value, ties to even, through fp32 (exact for these ranges:
 * a relu output rounded twice differs only on exact ties of the fp32 step, which tests tolerate).
 */
static double ref64_round(twell_dtype dt, double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (dt == TWELL_DTYPE_BF16) {
        u += 0x7fffu + ((u >> 16) & 1u);
        u &= 0xffff0000u;
        memcpy(&f, &u, sizeof f);
        return (double)f;
    }
    /* fp16: 11 significant bits; below 2^-14 the step is fixed at 2^-24 */
    double a = fabs(v);
    int e;
    frexp(a, &e);
    int step_exp = e - 11 < -24 ? -24 : e - 11;
    double q = ldexp(nearbyint(ldexp(a, -step_exp)), step_exp);
    if (q > 65504.0)
        q = INFINITY;
    return v < 0 ? -q : q;
}

void ref64_ffn(const twell_shape *s, size_t M, const uint16_t *x, const uint16_t *wg,
               const uint16_t *wu, const uint16_t *wd, int round_act, double *y) {
    size_t K = s->K, N = s->N;
    double *g = malloc(N * sizeof *g), *u = malloc(N * sizeof *u);
    if (!g || !u)
        abort(); /* test support only */
    for (size_t m = 0; m < M; m++) {
        ref64_linear(s->dtype, 1, K, N, x + m * K, s->gated ? wg : wu, g, NULL);
        if (s->gated)
            ref64_linear(s->dtype, 1, K, N, x + m * K, wu, u, NULL);
        for (size_t k = 0; k < K; k++)
            y[m * K + k] = 0.0;
        for (size_t n = 0; n < N; n++) {
            double a = g[n] > 0.0 ? g[n] : 0.0;
            if (round_act)
                a = ref64_round(s->dtype, a);
            double h = s->gated ? a * u[n] : a;
            for (size_t k = 0; k < K; k++)
                y[m * K + k] += h * ref64_half(s->dtype, wd[n * K + k]);
        }
    }
    free(g);
    free(u);
}

uint64_t ref64_rand(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}
