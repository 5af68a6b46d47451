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

/* Element k of a row of 16-bit dtype values (f32 = 0) or fp32 values (f32 = 1), as a double. */
static double tw_err_elem(twell_dtype dt, int f32, const unsigned char *row, uint32_t k) {
    if (f32) {
        float v;
        memcpy(&v, row + (size_t)k * sizeof v, sizeof v);
        return v;
    }
    uint16_t h;
    memcpy(&h, row + (size_t)k * sizeof h, sizeof h);
    return tw_half_to_f32(dt, h);
}

/* tw_train_err_h (f32 = 0) and tw_train_err_f (f32 = 1). */
static double tw_train_err(twell_dtype dt, int f32, const void *got, const void *ref, size_t rows,
                           uint32_t K, const unsigned char *mask, size_t *worst, size_t *bitwise,
                           size_t *compared) {
    size_t row_bytes = (size_t)K * (f32 ? sizeof(float) : sizeof(uint16_t));
    double w = 0.0;
    size_t wr = 0, bits = 0, n = 0;
    for (size_t r = 0; r < rows; r++) {
        if (mask && !mask[r])
            continue;
        const unsigned char *g = (const unsigned char *)got + r * row_bytes;
        const unsigned char *f = (const unsigned char *)ref + r * row_bytes;
        double nd[2] = {0.0, 0.0};
        for (uint32_t k = 0; k < K; k++) {
            double a = tw_err_elem(dt, f32, g, k), b = tw_err_elem(dt, f32, f, k);
            nd[0] += (a - b) * (a - b);
            nd[1] += b * b;
        }
        double e = tw_rowrel(nd);
        n++;
        bits += memcmp(g, f, row_bytes) == 0;
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

double tw_train_err_h(twell_dtype dt, const uint16_t *got, const uint16_t *ref, size_t rows,
                      uint32_t K, const unsigned char *mask, size_t *worst, size_t *bitwise,
                      size_t *compared) {
    return tw_train_err(dt, 0, got, ref, rows, K, mask, worst, bitwise, compared);
}

double tw_train_err_f(const float *got, const float *ref, size_t rows, uint32_t K,
                      const unsigned char *mask, size_t *worst, size_t *bitwise, size_t *compared) {
    return tw_train_err(TWELL_DTYPE_BF16, 1, got, ref, rows, K, mask, worst, bitwise, compared);
}
