/* test_format.c — TwELL row-tile packing and unpacking: round trips for every (T, C), ascending
 * order, zeroed unused slots, exact counts, overflow, rejection of malformed words, size helpers.
 * labels: unit */
#include "ref64.h"
#include "twell_format.h"
#include "twellrt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static twell_shape tf_shape(uint32_t N, uint32_t T, uint32_t C) {
    twell_shape s;
    twell_shape_init(&s, 64, N);
    s.T = T;
    s.C = C;
    return s;
}

/* A random positive bf16 pattern (never 0, sign clear). */
static uint16_t tf_pos(uint64_t *rng) { return (uint16_t)(0x3c00u + ref64_rand(rng) % 0x800u); }

/* Fills dense[0..N) with active entries at the given density, plus inactive negatives, -0 and
 * zeros; returns nothing, the caller recounts. density in 1/1000. */
static void tf_fill(uint64_t *rng, uint16_t *dense, uint32_t N, uint32_t density) {
    for (uint32_t n = 0; n < N; n++) {
        uint32_t r = (uint32_t)(ref64_rand(rng) % 1000u);
        if (r < density)
            dense[n] = tf_pos(rng);
        else if (r % 7 == 0)
            dense[n] = (uint16_t)(0x8000u | tf_pos(rng)); /* negative: inactive */
        else if (r % 11 == 0)
            dense[n] = 0x8000u; /* -0: inactive */
        else
            dense[n] = 0;
    }
}

static void test_format_round_trip_every_t_c(void **state) {
    (void)state;
    static const uint32_t Ts[] = {64, 128, 256}, Cs[] = {2, 4, 8};
    static const uint32_t densities[] = {0, 5, 60, 200, 500, 1000};
    uint64_t rng = 0x1234567u;
    for (int ti = 0; ti < 3; ti++)
        for (int ci = 0; ci < 3; ci++)
            for (int di = 0; di < 6; di++) {
                uint32_t T = Ts[ti], C = Cs[ci], N = T * 5, W = T / C, slots = W - 1;
                twell_shape s = tf_shape(N, T, C);
                assert_int_equal(twell_tile_words(&s), W);
                assert_int_equal(twell_tile_slots(&s), slots);
                uint16_t *dense = malloc(N * 2), *back = malloc(N * 2);
                uint32_t *row = malloc((N / C) * 4);
                assert_non_null(dense && back && row);
                tf_fill(&rng, dense, N, densities[di]);
                memset(row, 0xa5, (N / C) * 4);
                int expect_over = 0;
                for (uint32_t t = 0; t < N / T; t++) {
                    uint32_t *tw = row + t * W, active = 0;
                    for (uint32_t j = 0; j < T; j++)
                        active += dense[t * T + j] != 0 && !(dense[t * T + j] & 0x8000u);
                    uint32_t got = tw_pack_row_tile(dense + t * T, T, C, t * T, tw);
                    assert_int_equal(got, active);
                    assert_int_equal(tw[0], active); /* exact count, even when it overflows */
                    expect_over += active > slots;
                    /* entries: ascending columns of the active values, in order */
                    uint32_t i = 0;
                    for (uint32_t j = 0; j < T && i < slots; j++) {
                        uint16_t v = dense[t * T + j];
                        if (v == 0 || (v & 0x8000u))
                            continue;
                        assert_int_equal(tw[1 + i], ((uint32_t)v << 16) | (t * T + j));
                        i++;
                    }
                    for (; i < slots; i++)
                        assert_int_equal(tw[1 + i], 0); /* unused slots zeroed */
                }
                memset(back, 0x5a, N * 2);
                int over = tw_unpack_row(&s, row, back);
                assert_int_equal(over, expect_over);
                for (uint32_t t = 0; t < N / T; t++) {
                    uint32_t kept = 0;
                    for (uint32_t j = 0; j < T; j++) {
                        uint16_t v = dense[t * T + j];
                        int active = v != 0 && !(v & 0x8000u);
                        /* overflowing tiles keep their first `slots` entries */
                        uint16_t want = active && kept < slots ? v : 0;
                        kept += (uint32_t)active;
                        if (back[t * T + j] != want)
                            fail_msg("T=%u C=%u density %u col %u: unpacked 0x%04x, want 0x%04x", T,
                                     C, densities[di], t * T + j, back[t * T + j], want);
                    }
                }
                free(dense), free(back), free(row);
            }
}

/* Extreme tiles: empty (all words 0), full (count T, first slots entries), single last column. */
static void test_format_edges(void **state) {
    (void)state;
    uint16_t vals[256];
    uint32_t w[128];
    for (uint32_t T = 64; T <= 256; T *= 2)
        for (uint32_t C = 2; C <= 8; C *= 2) {
            uint32_t W = T / C;
            memset(vals, 0, sizeof vals);
            memset(w, 0xff, sizeof w);
            assert_int_equal(tw_pack_row_tile(vals, T, C, 0, w), 0);
            for (uint32_t i = 0; i < W; i++)
                assert_int_equal(w[i], 0);
            for (uint32_t j = 0; j < T; j++)
                vals[j] = (uint16_t)(0x3f80u + j);
            assert_int_equal(tw_pack_row_tile(vals, T, C, 65536 - T, w), T);
            assert_int_equal(w[0], T);
            for (uint32_t i = 1; i < W; i++)
                assert_int_equal(w[i], ((uint32_t)(0x3f80u + i - 1) << 16) | (65536 - T + i - 1));
            memset(vals, 0, sizeof vals);
            vals[T - 1] = 0x0001; /* smallest positive subnormal still counts */
            assert_int_equal(tw_pack_row_tile(vals, T, C, T, w), 1);
            assert_int_equal(w[1], (1u << 16) | (2 * T - 1));
        }
}

/* Malformed rows: unpack returns -1 instead of writing out of range or inventing data. */
static void test_format_unpack_rejects_malformed(void **state) {
    (void)state;
    twell_shape s = tf_shape(256, 128, 4); /* 2 tiles of 32 words, 31 slots */
    uint32_t row[64];
    uint16_t dense[256];
    uint16_t vals[128];
    for (uint32_t j = 0; j < 128; j++)
        vals[j] = j % 9 == 0 ? (uint16_t)(0x4000u + j) : 0;
    tw_pack_row_tile(vals, 128, 4, 0, row);
    tw_pack_row_tile(vals, 128, 4, 128, row + 32);
    assert_int_equal(tw_unpack_row(&s, row, dense), 0);
    uint32_t good[64];
    memcpy(good, row, sizeof good);
    struct {
        uint32_t word, value;
        const char *what;
    } bad[] = {
        {0, 129, "count > T"},
        {1, (0x4000u << 16) | 200u, "column outside tile 0"},
        {33, (0x4000u << 16) | 5u, "column of tile 0 in tile 1"},
        {2, good[1], "duplicate column"},
        {3, (0x4000u << 16) | 1u, "descending column"},
        {1, 0u, "zero value"},
        {1, (0xc000u << 16) | 0u, "negative value"},
        {20, (0x4000u << 16) | 127u, "non-zero unused slot"},
        {0, 3, "count smaller than stored entries (slot 4 used)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(row, good, sizeof row);
        row[bad[i].word] = bad[i].value;
        if (tw_unpack_row(&s, row, dense) != -1)
            fail_msg("malformed row accepted: %s", bad[i].what);
    }
}

/* Size helpers: T/C words, M·N/C words, ·4 bytes; 0 for invalid shapes and on overflow. */
static void test_format_sizes(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    assert_int_equal(twell_tile_words(&s), 32);
    assert_int_equal(twell_tile_slots(&s), 31);
    assert_int_equal(twell_packed_words(&s, 3), 3 * 704);
    assert_int_equal(twell_packed_bytes(&s, 3), 3 * 704 * 4);
    assert_int_equal(twell_packed_words(&s, 0), 0);
    assert_int_equal(twell_packed_words(&s, SIZE_MAX / 100), 0);
    assert_int_equal(twell_packed_bytes(&s, SIZE_MAX / 704), 0);
    assert_int_equal(twell_dtype_size(TWELL_DTYPE_BF16), 2);
    assert_int_equal(twell_dtype_size(TWELL_DTYPE_FP16), 2);
    s.T = 96;
    assert_int_equal(twell_tile_words(&s), 0);
    assert_int_equal(twell_tile_slots(&s), 0);
    assert_int_equal(twell_packed_words(&s, 3), 0);
    assert_int_equal(twell_packed_bytes(&s, 3), 0);
    assert_int_equal(twell_tile_words(NULL), 0);
    assert_int_equal(twell_packed_bytes(NULL, 3), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_round_trip_every_t_c),
        cmocka_unit_test(test_format_edges),
        cmocka_unit_test(test_format_unpack_rejects_malformed),
        cmocka_unit_test(test_format_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
