/*
 * train_layout.c — host mirrors of the CUDA training layout steps (see train_layout.h); the
 * formulas here and in templates/train/train_ffn.cu.lua must stay the same.
 */
#include "train_layout.h"

#include <string.h>

void tw_tl_tile_scan(const twell_shape *s, size_t M, const uint32_t *packed, uint64_t *tile_off,
                     uint64_t *spill_off, uint64_t *row_off, uint64_t *nnz, uint64_t *spill) {
    uint32_t W = s->T / s->C, slots = W - 1, NT = s->N / s->T;
    uint64_t e = 0, sp = 0;
    for (size_t m = 0; m < M; m++) {
        row_off[m] = e;
        for (uint32_t t = 0; t < NT; t++) {
            uint32_t c = packed[m * (s->N / s->C) + (size_t)t * W];
            tile_off[m * NT + t] = e;
            spill_off[m * NT + t] = sp;
            e += c;
            sp += c > slots ? c - slots : 0u;
        }
    }
    tile_off[M * NT] = e;
    spill_off[M * NT] = sp;
    row_off[M] = e;
    *nnz = e;
    *spill = sp;
}

uint64_t tw_tl_row_chunk_len(uint64_t nnz, uint64_t M, uint64_t lo) {
    uint64_t e = 4u * ((nnz + M - 1) / M);
    return e > lo ? e : lo;
}

uint64_t tw_tl_nrn_chunk_len(uint64_t nnz, uint64_t N, uint64_t lo) {
    uint64_t e = 4u * ((nnz + N - 1) / N);
    return e > lo ? e : lo;
}

uint64_t tw_tl_chunks_of(uint64_t count, uint64_t len) {
    return count <= len ? 1u : (count + len - 1) / len;
}

uint64_t tw_tl_row_chunks(size_t M, const uint64_t *row_off, uint64_t len, uint64_t *chunk_off,
                          uint64_t *pslot_off, uint64_t *pslots) {
    uint64_t c = 0, p = 0;
    for (size_t m = 0; m < M; m++) {
        chunk_off[m] = c;
        pslot_off[m] = p;
        uint64_t ch = tw_tl_chunks_of(row_off[m + 1] - row_off[m], len);
        c += ch;
        p += ch > 1 ? ch : 0u;
    }
    chunk_off[M] = c;
    pslot_off[M] = p;
    *pslots = p;
    return c;
}

void tw_tl_row_blocks(size_t M, uint32_t N, size_t *R, size_t *B) {
    size_t cap = ((size_t)1 << 22) / N; /* counters we are willing to keep: B·N ≤ 2^22 */
    if (cap < 1)
        cap = 1;
    size_t b = M / 32; /* rows per block ≥ 32 */
    if (b > cap)
        b = cap;
    if (b < 1)
        b = 1;
    size_t r = (M + b - 1) / b;
    *R = r;
    *B = (M + r - 1) / r; /* no empty trailing block */
}

void tw_tl_transpose_blocked(size_t M, uint32_t N, const uint64_t *row_off, const uint32_t *e_col,
                             size_t R, size_t B, uint32_t *hist, uint64_t *col_off,
                             uint32_t *col_row, uint32_t *col_ent) {
    memset(hist, 0, (size_t)N * B * sizeof *hist);
    for (size_t b = 0; b < B; b++) {
        size_t r0 = b * R, r1 = r0 + R < M ? r0 + R : M;
        for (uint64_t e = row_off[r0]; e < row_off[r1]; e++)
            hist[(size_t)e_col[e] * B + b]++;
    }
    /* exclusive scan in (n, b) order: hist becomes the cursors */
    uint64_t run = 0;
    for (size_t i = 0; i < (size_t)N * B; i++) {
        uint32_t v = hist[i];
        if (i % B == 0)
            col_off[i / B] = run;
        hist[i] = (uint32_t)run;
        run += v;
    }
    col_off[N] = run;
    for (size_t b = 0; b < B; b++) {
        size_t r0 = b * R, r1 = r0 + R < M ? r0 + R : M;
        for (size_t m = r0; m < r1; m++)
            for (uint64_t e = row_off[m]; e < row_off[m + 1]; e++) {
                uint32_t at = hist[(size_t)e_col[e] * B + b]++;
                col_row[at] = (uint32_t)m;
                col_ent[at] = (uint32_t)e;
            }
    }
}

uint32_t tw_tl_heavy_threshold(uint32_t N) {
    double t = TW_TL_HEAVY_BLOCK * TW_TL_HEAVY_DENSE_PS / TW_TL_HEAVY_ENTRY_PS * (double)N;
    uint32_t thr = (uint32_t)t; /* count > thr ⇔ count > t for an integer count */
    if (thr < TW_TL_HEAVY_MIN)
        thr = TW_TL_HEAVY_MIN;
    return thr < N ? thr : N; /* thr = N: no row can be heavy */
}

void tw_tl_heavy_rows(const twell_shape *s, size_t M, uint32_t *packed, uint32_t thr, int zero,
                      uint32_t *idx, size_t *nh, uint64_t *hnnz) {
    uint32_t W = s->T / s->C, NT = s->N / s->T, NW = s->N / s->C;
    size_t n = 0;
    uint64_t sum = 0;
    for (size_t m = 0; m < M; m++) {
        uint32_t *row = packed + m * NW, c = 0;
        for (uint32_t t = 0; t < NT; t++)
            c += row[(size_t)t * W];
        if (c <= thr)
            continue;
        if (idx)
            idx[n] = (uint32_t)m;
        n++;
        sum += c;
        if (zero)
            memset(row, 0, (size_t)NW * sizeof *row);
    }
    *nh = n;
    *hnnz = sum;
}
