/*
 * train_check.c — support-aware comparison of training results (see train_check.h).
 */
#include "train_check.h"

#include "half.h"

#include <math.h>
#include <string.h>

size_t tw_train_support_diff(uint32_t N, const tw_train_support *a, const tw_train_support *b,
                             unsigned char *row_same, unsigned char *nrn_same, size_t *value_diff) {
    size_t flips = 0, values = 0;
    memset(nrn_same, 1, N);
    for (size_t m = 0; m < a->M; m++) {
        uint64_t i = a->row_off[m], ie = a->row_off[m + 1];
        uint64_t j = b->row_off[m], je = b->row_off[m + 1];
        size_t before = flips;
        /* merge the two ascending column lists */
        while (i < ie || j < je) {
            uint32_t ca = i < ie ? a->col[i] : UINT32_MAX, cb = j < je ? b->col[j] : UINT32_MAX;
            uint32_t c = ca < cb ? ca : cb;
            if (ca == cb) {
                if (a->pbits[i] != b->pbits[j]) {
                    values++;
                    nrn_same[c] = 0;
                }
                i++, j++;
                continue;
            }
            flips++;
            if (c < N)
                nrn_same[c] = 0;
            if (ca < cb)
                i++;
            else
                j++;
        }
        row_same[m] = flips == before;
    }
    if (value_diff)
        *value_diff = values;
    return flips;
}

static double tw_rowrel(const double *num_den) {
    return num_den[1] > 0.0 ? sqrt(num_den[0] / num_den[1]) : sqrt(num_den[0]);
}

double tw_train_err_h(twell_dtype dt, const uint16_t *got, const uint16_t *ref, size_t rows,
                      uint32_t K, const unsigned char *mask, size_t *worst, size_t *bitwise,
                      size_t *compared) {
    double w = 0.0;
    size_t wr = 0, bits = 0, n = 0;
    for (size_t r = 0; r < rows; r++) {
        if (mask && !mask[r])
            continue;
        const uint16_t *g = got + r * K, *f = ref + r * K;
        double nd[2] = {0.0, 0.0};
        for (uint32_t k = 0; k < K; k++) {
            double a = tw_half_to_f32(dt, g[k]), b = tw_half_to_f32(dt, f[k]);
            nd[0] += (a - b) * (a - b);
            nd[1] += b * b;
        }
        double e = tw_rowrel(nd);
        n++;
        bits += memcmp(g, f, (size_t)K * sizeof *g) == 0;
        if (!(e <= w)) {
            w = e;
            wr = r;
        }
    }
    if (worst)
        *worst = wr;
    if (bitwise)
        *bitwise = bits;
    if (compared)
        *compared = n;
    return w;
}

double tw_train_err_f(const float *got, const float *ref, size_t rows, uint32_t K,
                      const unsigned char *mask, size_t *worst, size_t *bitwise, size_t *compared) {
    double w = 0.0;
    size_t wr = 0, bits = 0, n = 0;
    for (size_t r = 0; r < rows; r++) {
        if (mask && !mask[r])
            continue;
        const float *g = got + r * K, *f = ref + r * K;
        double nd[2] = {0.0, 0.0};
        for (uint32_t k = 0; k < K; k++) {
            double a = g[k], b = f[k];
            nd[0] += (a - b) * (a - b);
            nd[1] += b * b;
        }
        double e = tw_rowrel(nd);
        n++;
        bits += memcmp(g, f, (size_t)K * sizeof *g) == 0;
        if (!(e <= w)) {
            w = e;
            wr = r;
        }
    }
    if (worst)
        *worst = wr;
    if (bitwise)
        *bitwise = bits;
    if (compared)
        *compared = n;
    return w;
}
