/*
 * pack_check.c — GPU packed output vs the exact CPU reference: byte equality where possible, and
 * where fp32 summation order legitimately changes a rounding, a check against fp64 bounds (the
 * rule is stated in pack_check.h).
 */
#include "pack_check.h"

#include "half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TW_CHECK_DEEP_MAX 64 /* bad tiles examined in depth before only counting */

/* relu then round to dtype, the rule of tw_half_act (NaN: the canonical NaN, active). */
static uint16_t tw_act(twell_dtype dt, double v) { return tw_half_act(dt, (float)v); }

/* Exact pre-activation and its fp32 error bound for one (row, column). */
static void tw_z(twell_dtype dt, const uint16_t *xr, const uint16_t *wr, uint32_t K, double *z,
                 double *e) {
    double s = 0.0, a = 0.0;
    for (uint32_t k = 0; k < K; k++) {
        double p = (double)tw_half_to_f32(dt, xr[k]) * (double)tw_half_to_f32(dt, wr[k]);
        s += p;
        a += fabs(p);
    }
    *z = s;
    *e = (double)K * ldexp(a, -23);
}

static void tw_bad(tw_pack_check *out, size_t row, uint32_t tile, const char *what, long a,
                   long b) {
    out->tiles_bad++;
    if (!out->first_bad[0])
        snprintf(out->first_bad, sizeof out->first_bad, "row %zu tile %u: %s (%ld vs %ld)", row,
                 tile, what, a, b);
}

/* The deep check of one differing tile; returns 1 if tolerated (else records why). */
static int tw_check_tile(const twell_shape *s, const uint16_t *xr, const uint16_t *w, size_t row,
                         uint32_t t, const uint32_t *g, tw_pack_check *out) {
    const uint32_t words = s->T / s->C, slots = words - 1, col0 = t * s->T;
    uint32_t count = g[0];
    if (count > s->T) {
        tw_bad(out, row, t, "count above T (unwritten or corrupt word?)", (long)count, (long)s->T);
        return 0;
    }
    uint32_t stored = count < slots ? count : slots;
    for (uint32_t i = stored; i < slots; i++)
        if (g[1 + i] != 0) {
            tw_bad(out, row, t, "unused slot not zero at slot", (long)i, (long)g[1 + i]);
            return 0;
        }
    uint16_t lo[256], hi[256];
    uint32_t n_lo = 0, n_hi = 0;
    for (uint32_t j = 0; j < s->T; j++) {
        double z, e;
        tw_z(s->dtype, xr, w + (size_t)(col0 + j) * s->K, s->K, &z, &e);
        if (!isfinite(z) || !isfinite(e))
            e = 0.0; /* non-finite terms: the fp32 sum is the exact one (NaN, or ±Inf) */
        lo[j] = tw_act(s->dtype, z - e);
        hi[j] = tw_act(s->dtype, z + e);
        n_lo += lo[j] != 0;
        n_hi += hi[j] != 0;
    }
    if (count < n_lo || count > n_hi) {
        tw_bad(out, row, t, "count outside the possible range, count vs certain-active",
               (long)count, (long)n_lo);
        return 0;
    }
    uint32_t prev = 0, last = 0;
    for (uint32_t i = 0; i < stored; i++) {
        uint32_t col = g[1 + i] & 0xffffu, v = g[1 + i] >> 16;
        if (col < col0 || col >= col0 + s->T || (i > 0 && col <= prev)) {
            tw_bad(out, row, t, "column outside the tile or not ascending at slot", (long)i,
                   (long)col);
            return 0;
        }
        uint32_t j = col - col0;
        if (!tw_half_active((uint16_t)v) || hi[j] == 0 || v < lo[j] || v > hi[j]) {
            tw_bad(out, row, t, "value outside its fp32 rounding range, value vs lower bound",
                   (long)v, (long)lo[j]);
            return 0;
        }
        prev = col;
        last = j;
    }
    /* Certainly active columns must be stored up to where the slots ran out. */
    uint32_t limit = count > slots ? last : s->T - 1;
    uint32_t i = 0;
    for (uint32_t j = 0; j <= limit && stored > 0; j++) {
        while (i < stored && (g[1 + i] & 0xffffu) - col0 < j)
            i++;
        int present = i < stored && (g[1 + i] & 0xffffu) - col0 == j;
        if (lo[j] && !present) {
            tw_bad(out, row, t, "certainly active column missing", (long)(col0 + j), 0);
            return 0;
        }
    }
    if (stored == 0 && n_lo > 0) {
        tw_bad(out, row, t, "certainly active columns but nothing stored", (long)n_lo, 0);
        return 0;
    }
    return 1;
}

void tw_pack_check_rows(const twell_shape *s, const uint16_t *x, const uint16_t *w,
                        const size_t *rows, size_t n, const uint32_t *ref, const uint32_t *got,
                        tw_pack_check *out) {
    memset(out, 0, sizeof *out);
    const uint32_t words = s->T / s->C, slots = words - 1, tiles = s->N / s->T;
    const size_t row_words = (size_t)s->N / s->C;
    for (size_t r = 0; r < n; r++) {
        const uint16_t *xr = x + rows[r] * s->K;
        double err2 = 0.0, ref2 = 0.0; /* this row's Σ(v − z)² and Σz² over stored entries */
        out->rows++;
        for (uint32_t t = 0; t < tiles; t++) {
            const uint32_t *rt = ref + r * row_words + (size_t)t * words;
            const uint32_t *gt = got + r * row_words + (size_t)t * words;
            out->tiles++;
            if (rt[0] > slots)
                out->overflow_tiles++;
            if (!memcmp(rt, gt, words * sizeof *rt)) {
                out->tiles_exact++;
            } else if (out->tiles_bad >= TW_CHECK_DEEP_MAX) {
                out->tiles_bad++;
                continue;
            } else if (tw_check_tile(s, xr, w, rows[r], t, gt, out)) {
                out->tiles_tolerated++;
            } else {
                continue;
            }
            /* Entry-level measures over well-formed tiles: ulps against the reference, flips,
             * and the error against the exact fp64 value. */
            uint32_t rs = rt[0] < slots ? rt[0] : slots, gs = gt[0] < slots ? gt[0] : slots;
            uint32_t i = 0, k = 0;
            while (i < rs || k < gs) {
                uint32_t rc = i < rs ? rt[1 + i] & 0xffffu : 0xffffffffu;
                uint32_t gc = k < gs ? gt[1 + k] & 0xffffu : 0xffffffffu;
                if (rc == gc) {
                    uint32_t rv = rt[1 + i] >> 16, gv = gt[1 + k] >> 16;
                    unsigned d = rv > gv ? rv - gv : gv - rv;
                    if (d > out->worst_ulp)
                        out->worst_ulp = d;
                    i++, k++;
                } else if (rc < gc) {
                    out->flips++, i++;
                } else {
                    out->flips++, k++;
                }
            }
            for (uint32_t q = 0; q < gs; q++) {
                uint32_t col = gt[1 + q] & 0xffffu;
                double z, e, v = (double)tw_half_to_f32(s->dtype, (uint16_t)(gt[1 + q] >> 16));
                tw_z(s->dtype, xr, w + (size_t)col * s->K, s->K, &z, &e);
                if (!isfinite(v) || !isfinite(z))
                    continue; /* non-finite values are checked bit for bit above */
                err2 += (v - z) * (v - z);
                ref2 += z * z;
                out->entries++;
            }
        }
        double rel = ref2 > 0.0 ? sqrt(err2 / ref2) : (err2 > 0.0 ? 1.0 : 0.0);
        if (rel > out->max_rel_err)
            out->max_rel_err = rel;
    }
}

static int tw_cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

size_t tw_pack_sample_rows(size_t M, size_t want, size_t *rows) {
    if (want == 0 || M == 0)
        return 0;
    if (M <= want) {
        for (size_t i = 0; i < M; i++)
            rows[i] = i;
        return M;
    }
    size_t n = 0;
    /* The edges kernels get wrong: first rows, the last full 64/128-row tile boundary and the
     * ragged end. */
    size_t fixed[] = {
        0, 1, M - 1, M - 2, (M / 128) * 128, (M / 128) * 128 - 1, (M / 64) * 64, (M / 64) * 64 - 1};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && n < want; i++)
        if (fixed[i] < M)
            rows[n++] = fixed[i];
    size_t spread = want - n;
    for (size_t i = 0; i < spread; i++)
        rows[n++] = (size_t)(((double)i + 0.5) * (double)M / (double)spread);
    qsort(rows, n, sizeof *rows, tw_cmp_size);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || rows[i] != rows[u - 1])
            rows[u++] = rows[i];
    return u;
}
