/* test_dense_split.c — the grid of dense_aux's split-K reductions and expansion
 * (tw_dense_reduce_grid, runtime/ops/ffn/heavy/dense_split.c), which the inference
 * (cuda_ffn_heavy.c) and training (cuda_train_dense.c) dense paths launch with: values worked out
 * by hand on a few shapes, the 16-blocks-per-SM cap, and a sweep against the formula written out
 * again. labels: unit
 */
#include "dense_split.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* Items of one row x 256 columns, 8 per block (a warp each): below the cap, the grid is
 * ceil(rows · ceil(cols / 256) / 8). */
static void test_dense_split_reduce_grid_values(void **st) {
    (void)st;
    static const struct {
        size_t m;
        uint32_t ncols;
        unsigned sms;
        size_t want;
    } cases[] = {
        {1, 256, 132, 1},      /* one item */
        {1, 1, 132, 1},        /* a partial column block is one item */
        {8, 256, 132, 1},      /* 8 items: one full block */
        {9, 256, 132, 2},      /* 9 items: a second block for the ninth */
        {7, 2048, 132, 7},     /* 56 items */
        {255, 257, 132, 64},   /* 2 column blocks (257 columns): 510 items, ceil(510 / 8) */
        {100, 5632, 132, 275}, /* 22 column blocks: 2200 items */
        {0, 2048, 132, 0},     /* no rows, no blocks */
        {5, 0, 132, 0},        /* no columns, no blocks */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(tw_dense_reduce_grid(cases[i].m, cases[i].ncols, cases[i].sms),
                         cases[i].want);
}

/* At most 16 blocks per SM: the blocks loop over the remaining items (grid-stride). */
static void test_dense_split_reduce_grid_cap(void **st) {
    (void)st;
    /* 4096 rows x 2048 columns: 32768 items = 4096 blocks, capped at 16 x 132 */
    assert_int_equal(tw_dense_reduce_grid(4096, 2048, 132), 2112);
    /* exactly at the cap (4 SMs: 64 blocks = 512 items), one item past it, one block below */
    assert_int_equal(tw_dense_reduce_grid(512, 256, 4), 64);
    assert_int_equal(tw_dense_reduce_grid(513, 256, 4), 64);
    assert_int_equal(tw_dense_reduce_grid(504, 256, 4), 63);
    /* the cap scales with the SMs: the same shape on 1, 78 and 144 SMs */
    assert_int_equal(tw_dense_reduce_grid(255, 257, 1), 16);
    assert_int_equal(tw_dense_reduce_grid(65536, 5632, 78), 1248);
    assert_int_equal(tw_dense_reduce_grid(65536, 5632, 144), 2304);
}

/* Every shape of a sweep against the formula written out again (integer ceilings by hand). */
static void test_dense_split_reduce_grid_sweep(void **st) {
    (void)st;
    static const size_t ms[] = {1, 2, 7, 8, 31, 33, 255, 256, 1000, 4096, 100000};
    static const uint32_t cols[] = {1, 64, 255, 256, 257, 576, 2048, 5632, 65536};
    static const unsigned sms[] = {1, 66, 132};
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof cols / sizeof cols[0]; b++)
            for (size_t c = 0; c < sizeof sms / sizeof sms[0]; c++) {
                size_t colblocks = cols[b] / 256u + (cols[b] % 256u != 0);
                size_t items = ms[a] * colblocks;
                size_t blocks = items / 8u + (items % 8u != 0);
                size_t cap = 16u * (size_t)sms[c];
                size_t want = blocks > cap ? cap : blocks;
                assert_int_equal(tw_dense_reduce_grid(ms[a], cols[b], sms[c]), want);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_split_reduce_grid_values),
        cmocka_unit_test(test_dense_split_reduce_grid_cap),
        cmocka_unit_test(test_dense_split_reduce_grid_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
