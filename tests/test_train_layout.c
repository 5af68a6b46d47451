/*
 * test_train_layout.c — the host mirrors of the CUDA training layout (train_layout.h) against the
 * CPU reference's own steps (cpu_train.h): the row-tile scan that sizes the spill, the blocked
 * counting-sort transpose for many row-block shapes, the chunking bounds the CUDA backend sizes
 * its buffers with, the heavy-row threshold (cost model) and classification, and the support
 * comparison of train_check.h.
 * labels: unit
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cpu_ref.h"
#include "cpu_train.h"
#include "ref64_train.h"
#include "train_check.h"
#include "train_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the row-tile scan ---- */

static void check_tile_scan(size_t M, uint32_t K, uint32_t N, uint32_t T, uint32_t C, int skew,
                            double density, uint64_t seed) {
    twell_shape s = {sizeof(twell_shape), K, N, T, C, TWELL_DTYPE_BF16, 1};
    tw_t_gen g = {density, skew, 1, seed};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, s.dtype, M, K, N, &g), 0);
    size_t words = M * (N / C), tiles = M * (N / T);
    uint32_t *packed = malloc(words * 4);
    size_t *so = malloc((tiles + 1) * sizeof *so), *ro = malloc((M + 1) * sizeof *ro);
    uint64_t *to = malloc((tiles + 1) * 8), *so2 = malloc((tiles + 1) * 8);
    uint64_t *ro2 = malloc((M + 1) * 8);
    assert_true(packed && so && ro && to && so2 && ro2);
    assert_int_equal(tw_gate_pack_ref(NULL, &s, M, d.x, d.wg, packed), TWELL_OK);
    size_t nnz;
    size_t spill = tw_train_spill_layout(&s, M, packed, so, ro, &nnz);
    uint64_t nnz2, spill2;
    tw_tl_tile_scan(&s, M, packed, to, so2, ro2, &nnz2, &spill2);
    assert_int_equal(nnz2, nnz);
    assert_int_equal(spill2, spill);
    for (size_t r = 0; r <= tiles; r++)
        assert_int_equal(so2[r], so[r]);
    for (size_t m = 0; m <= M; m++) {
        assert_int_equal(ro2[m], ro[m]);
        assert_int_equal(to[m * (N / T)], ro[m]); /* rows start at their first row-tile */
    }
    for (size_t r = 0; r < tiles; r++) /* tile_off steps by the tile counts */
        assert_int_equal(to[r + 1] - to[r], packed[r / (N / T) * (N / C) + r % (N / T) * (T / C)]);
    if (skew)
        assert_true(spill > 0); /* the case must exercise the spill */
    free(packed), free(so), free(ro), free(to), free(so2), free(ro2);
    tw_t_data_free(&d);
}

static void test_train_layout_tile_scan_matches_cpu(void **state) {
    (void)state;
    check_tile_scan(1, 32, 64, 64, 8, 0, 0.1, 1);
    check_tile_scan(33, 32, 256, 64, 8, 1, 0.05, 2);
    check_tile_scan(17, 48, 512, 128, 4, 1, 0.2, 3);
    check_tile_scan(40, 16, 256, 256, 2, 1, 0.3, 4);
}

/* ---- the transpose ---- */

/* A random support: row lengths from empty to dense, ascending distinct columns. */
static void random_support(tw_t_rng *r, size_t M, uint32_t N, uint64_t **row_off,
                           uint32_t **e_col) {
    *row_off = malloc((M + 1) * 8);
    size_t cap = M * N + 1;
    *e_col = malloc(cap * 4);
    assert_true(*row_off && *e_col);
    uint64_t e = 0;
    for (size_t m = 0; m < M; m++) {
        (*row_off)[m] = e;
        int kind = tw_t_int(r, 0, 9);
        double p = kind == 0 ? 0.0 : kind == 1 ? 0.9 : 0.03 * (double)kind;
        for (uint32_t n = 0; n < N; n++)
            if (tw_t_uniform(r) < p)
                (*e_col)[e++] = n;
    }
    (*row_off)[M] = e;
}

static void check_transpose(size_t M, uint32_t N, size_t R, size_t B, const uint64_t *row_off,
                            const uint32_t *e_col) {
    uint64_t nnz = row_off[M];
    size_t *ro = malloc((M + 1) * sizeof *ro), *co = malloc(((size_t)N + 1) * sizeof *co);
    size_t *cr = malloc((nnz + 1) * sizeof *cr), *ce = malloc((nnz + 1) * sizeof *ce);
    uint32_t *hist = malloc((size_t)N * B * 4 + 4), *cr2 = malloc(nnz * 4 + 4);
    uint32_t *ce2 = malloc(nnz * 4 + 4);
    uint64_t *co2 = malloc(((size_t)N + 1) * 8);
    assert_true(ro && co && cr && ce && hist && cr2 && ce2 && co2);
    for (size_t m = 0; m <= M; m++)
        ro[m] = (size_t)row_off[m];
    tw_train_transpose(M, N, ro, e_col, co, cr, ce);
    tw_tl_transpose_blocked(M, N, row_off, e_col, R, B, hist, co2, cr2, ce2);
    for (uint32_t n = 0; n <= N; n++)
        assert_int_equal(co2[n], co[n]);
    for (uint64_t i = 0; i < nnz; i++) {
        assert_int_equal(cr2[i], cr[i]);
        assert_int_equal(ce2[i], ce[i]);
    }
    free(ro), free(co), free(cr), free(ce), free(hist), free(cr2), free(ce2), free(co2);
}

static void test_train_layout_transpose_matches_cpu(void **state) {
    (void)state;
    tw_t_rng r = {42};
    static const size_t Ms[] = {1, 2, 31, 33, 100, 257};
    static const uint32_t Ns[] = {64, 256, 1000};
    for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++)
        for (size_t j = 0; j < sizeof Ns / sizeof Ns[0]; j++) {
            size_t M = Ms[i];
            uint32_t N = Ns[j];
            uint64_t *row_off;
            uint32_t *e_col;
            random_support(&r, M, N, &row_off, &e_col);
            size_t R, B;
            tw_tl_row_blocks(M, N, &R, &B);
            check_transpose(M, N, R, B, row_off, e_col); /* what the backend uses */
            check_transpose(M, N, M, 1, row_off, e_col); /* one block */
            check_transpose(M, N, 1, M, row_off, e_col); /* a block per row */
            size_t R3 = (M + 2) / 3;
            check_transpose(M, N, R3, (M + R3 - 1) / R3, row_off, e_col);
            free(row_off);
            free(e_col);
        }
}

static void test_train_layout_row_blocks(void **state) {
    (void)state;
    static const size_t Ms[] = {1, 31, 32, 33, 1000, 16384, 65536, 1000000};
    static const uint32_t Ns[] = {64, 5632, 65536};
    for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++)
        for (size_t j = 0; j < sizeof Ns / sizeof Ns[0]; j++) {
            size_t M = Ms[i], R, B;
            uint32_t N = Ns[j];
            tw_tl_row_blocks(M, N, &R, &B);
            assert_true(R >= 1 && B >= 1);
            assert_true(B * R >= M);      /* every row in a block */
            assert_true((B - 1) * R < M); /* no empty block */
            assert_true(B == 1 || B * N <= ((size_t)1 << 22));
            if (M >= 32)
                assert_true(R >= 32);
        }
}

/* ---- chunking: the bounds cuda_train.c sizes its buffers with ---- */

static void test_train_layout_chunks(void **state) {
    (void)state;
    assert_int_equal(tw_tl_row_chunk_len(0, 5, 64), 64);
    assert_int_equal(tw_tl_row_chunk_len(1000, 10, 64), 400);
    assert_int_equal(tw_tl_row_chunk_len(1001, 10, 64), 404);
    assert_int_equal(tw_tl_nrn_chunk_len(10, 1000, 256), 256);
    assert_int_equal(tw_tl_chunks_of(0, 8), 1);
    assert_int_equal(tw_tl_chunks_of(8, 8), 1);
    assert_int_equal(tw_tl_chunks_of(9, 8), 2);
    tw_t_rng r = {7};
    for (int trial = 0; trial < 200; trial++) {
        size_t M = (size_t)tw_t_int(&r, 1, 300);
        uint64_t *row_off = malloc((M + 1) * 8), *co = malloc((M + 1) * 8);
        uint64_t *po = malloc((M + 1) * 8);
        assert_true(row_off && co && po);
        row_off[0] = 0;
        for (size_t m = 0; m < M; m++) {
            int heavy = tw_t_int(&r, 0, 20) == 0;
            row_off[m + 1] = row_off[m] + (uint64_t)tw_t_int(&r, 0, heavy ? 5000 : 40);
        }
        uint64_t nnz = row_off[M], lo = (uint64_t)tw_t_int(&r, 1, 64);
        uint64_t len = tw_tl_row_chunk_len(nnz, M, lo), ps;
        uint64_t ch = tw_tl_row_chunks(M, row_off, len, co, po, &ps);
        assert_true(ch >= M && ch <= M + nnz / len); /* owners grid bound */
        assert_true(ps <= 2 * nnz / len);            /* partial rows bound */
        for (size_t m = 0; m < M; m++) {
            uint64_t c = co[m + 1] - co[m], cnt = row_off[m + 1] - row_off[m];
            assert_true(c >= 1 && (c - 1) * len < cnt + (cnt == 0) && c * len >= cnt);
            assert_int_equal(po[m + 1] - po[m], c > 1 ? c : 0);
        }
        /* neurons: chunks ≤ N + nnz/len, slots after the first chunk ≤ nnz/len */
        uint64_t len2 = tw_tl_nrn_chunk_len(nnz, M, lo), chunks = 0, extra = 0;
        for (size_t m = 0; m < M; m++) {
            uint64_t c = tw_tl_chunks_of(row_off[m + 1] - row_off[m], len2);
            chunks += c;
            extra += c - 1;
        }
        assert_true(chunks <= M + nnz / len2);
        assert_true(extra <= nnz / len2);
        free(row_off), free(co), free(po);
    }
}

/* ---- heavy rows: the cost model's threshold and the classification ---- */

static void test_train_layout_heavy_threshold(void **state) {
    (void)state;
    /* N = 5632: the model's crossover, 1.5·0.0245/1.72·5632 = 120.3 → rows over 120 */
    assert_int_equal(tw_tl_heavy_threshold(5632), 120);
    uint32_t prev = 0;
    for (uint32_t N = 64; N <= 65536; N += 64) {
        uint32_t thr = tw_tl_heavy_threshold(N);
        assert_true(thr >= prev); /* monotone in N */
        prev = thr;
        assert_true(thr <= N);
        assert_true(thr >= (N < TW_TL_HEAVY_MIN ? N : TW_TL_HEAVY_MIN));
        if (thr > TW_TL_HEAVY_MIN && thr < N) {
            /* a row over the threshold costs the per-entry route more than the dense block;
             * one at the threshold no more */
            double dense = TW_TL_HEAVY_BLOCK * TW_TL_HEAVY_DENSE_PS * (double)N;
            assert_true(TW_TL_HEAVY_ENTRY_PS * (double)(thr + 1u) > dense);
            assert_true(TW_TL_HEAVY_ENTRY_PS * (double)thr <= dense);
        }
    }
    assert_int_equal(tw_tl_heavy_threshold(256), TW_TL_HEAVY_MIN); /* the floor */
    assert_int_equal(tw_tl_heavy_threshold(64), 64);               /* = N: none heavy */
}

static void check_heavy_rows(size_t M, uint32_t K, uint32_t N, uint32_t T, uint32_t C, uint32_t thr,
                             uint64_t seed) {
    twell_shape s = {sizeof(twell_shape), K, N, T, C, TWELL_DTYPE_BF16, 1};
    tw_t_gen g = {0.03, 1, 1, seed};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, s.dtype, M, K, N, &g), 0);
    size_t words = M * (N / C), tiles = M * (N / T);
    uint32_t *packed = malloc(words * 4), *zeroed = malloc(words * 4), *idx = malloc(M * 4);
    size_t *so = malloc((tiles + 1) * sizeof *so), *ro = malloc((M + 1) * sizeof *ro);
    assert_true(packed && zeroed && idx && so && ro);
    assert_int_equal(tw_gate_pack_ref(NULL, &s, M, d.x, d.wg, packed), TWELL_OK);
    size_t nnz;
    (void)tw_train_spill_layout(&s, M, packed, so, ro, &nnz); /* row counts, independently */
    memcpy(zeroed, packed, words * 4);
    size_t nh = 0, nh2 = 0;
    uint64_t hnnz = 0, hnnz2 = 0;
    tw_tl_heavy_rows(&s, M, zeroed, thr, 1, idx, &nh, &hnnz);
    size_t want = 0;
    uint64_t want_nnz = 0;
    for (size_t m = 0; m < M; m++) {
        size_t cnt = ro[m + 1] - ro[m];
        int heavy = cnt > thr;
        if (heavy) {
            assert_true(want < nh);
            assert_int_equal(idx[want], m); /* ascending */
            want++;
            want_nnz += cnt;
        }
        for (size_t w = 0; w < N / C; w++) /* heavy rows emptied, the others untouched */
            assert_int_equal(zeroed[m * (N / C) + w], heavy ? 0u : packed[m * (N / C) + w]);
    }
    assert_int_equal(nh, want);
    assert_int_equal(hnnz, want_nnz);
    /* what the sparse route then sees: the other rows' entries only */
    size_t nnz_rest;
    (void)tw_train_spill_layout(&s, M, zeroed, so, ro, &nnz_rest);
    assert_int_equal(nnz_rest + hnnz, nnz);
    /* without zeroing: the same rows, packed untouched; NULL idx allowed */
    memcpy(zeroed, packed, words * 4);
    tw_tl_heavy_rows(&s, M, zeroed, thr, 0, NULL, &nh2, &hnnz2);
    assert_int_equal(nh2, nh);
    assert_int_equal(hnnz2, hnnz);
    assert_memory_equal(zeroed, packed, words * 4);
    /* a threshold of N: none */
    tw_tl_heavy_rows(&s, M, zeroed, N, 1, idx, &nh2, &hnnz2);
    assert_int_equal(nh2, 0);
    assert_int_equal(hnnz2, 0);
    assert_memory_equal(zeroed, packed, words * 4);
    printf("# heavy rows M=%zu N=%u T=%u C=%u thr %u: %zu rows, %llu of %zu active values\n", M, N,
           T, C, thr, nh, (unsigned long long)hnnz, nnz);
    assert_true(nh > 0 && nh < M); /* the data has both kinds */
    free(packed), free(zeroed), free(idx), free(so), free(ro);
    tw_t_data_free(&d);
}

static void test_train_layout_heavy_rows(void **state) {
    (void)state;
    check_heavy_rows(1025, 64, 1024, 256, 8, 256, 3);
    check_heavy_rows(77, 32, 320, 64, 2, 224, 4);
    check_heavy_rows(40, 16, 256, 128, 4, 100, 5);
}

/* ---- support comparison ---- */

static void test_train_layout_support_diff(void **state) {
    (void)state;
    /* rows: {1, 5, 9}, {}, {2, 3}, {7} against {1, 5, 9 (other value)}, {}, {2, 3}, {7, 8} */
    uint64_t ra[] = {0, 3, 3, 5, 6}, rb[] = {0, 3, 3, 5, 7};
    uint32_t ca[] = {1, 5, 9, 2, 3, 7}, cb[] = {1, 5, 9, 2, 3, 7, 8};
    uint16_t pa[] = {10, 11, 12, 13, 14, 15}, pb[] = {10, 11, 99, 13, 14, 15, 16};
    tw_train_support a = {4, ra, ca, pa}, b = {4, rb, cb, pb};
    unsigned char rs[4], ns[10];
    size_t values = 0, flips = tw_train_support_diff(10, &a, &b, rs, ns, &values);
    assert_int_equal(flips, 1);  /* column 8 of row 3 */
    assert_int_equal(values, 1); /* column 9 of row 0 */
    assert_int_equal(rs[0], 1);  /* a value change keeps the row comparable */
    assert_int_equal(rs[1], 1);
    assert_int_equal(rs[2], 1);
    assert_int_equal(rs[3], 0);
    for (uint32_t n = 0; n < 10; n++)
        assert_int_equal(ns[n], n == 9 || n == 8 ? 0 : 1);
    /* row-relative errors: an exact row, a row off by one bf16 step */
    uint16_t g[4] = {0x3f80, 0x4000, 0x3f80, 0x4000}, f[4] = {0x3f80, 0x4000, 0x3f80, 0x4001};
    size_t worst, bits, n;
    double e = tw_train_err_h(TWELL_DTYPE_BF16, g, f, 2, 2, NULL, &worst, &bits, &n);
    assert_int_equal(worst, 1);
    assert_int_equal(bits, 1);
    assert_int_equal(n, 2);
    assert_true(e > 6e-3 && e < 8e-3); /* 2^-6 / ‖(1, 2.016)‖ */
    unsigned char mask[2] = {1, 0};
    assert_true(tw_train_err_h(TWELL_DTYPE_BF16, g, f, 2, 2, mask, NULL, NULL, NULL) == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_layout_tile_scan_matches_cpu),
        cmocka_unit_test(test_train_layout_transpose_matches_cpu),
        cmocka_unit_test(test_train_layout_row_blocks),
        cmocka_unit_test(test_train_layout_chunks),
        cmocka_unit_test(test_train_layout_heavy_threshold),
        cmocka_unit_test(test_train_layout_heavy_rows),
        cmocka_unit_test(test_train_layout_support_diff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
