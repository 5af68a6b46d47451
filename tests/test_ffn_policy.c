/* test_ffn_policy.c — TWELL_PATH_AUTO's route choice for twell_ffn_infer (runtime/ops/ffn/
 * ffn_policy.c): the decision table over M, the density estimate, what can run and the stay band
 * after a dense call, the hooks' overrides, the dense GEMMs' split-K factor, and
 * twell_plan_reserve's argument checks on the CPU backend (no GPU needed).
 * labels: unit */
#include "dense_split.h"
#include "ffn_policy.h"
#include "twellrt.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#define SM TW_ROUTE_SMALL
#define TI TW_ROUTE_TILED
#define DE TW_ROUTE_DENSE

static tw_ffn_route route(size_t M, double est, int small_ok, int dense_ok, int was_dense) {
    tw_ffn_policy_in in;
    memset(&in, 0, sizeof in);
    in.M = M, in.N = 5632, in.est = est;
    in.small_ok = small_ok, in.dense_ok = dense_ok, in.was_dense = was_dense;
    return tw_ffn_policy(&in);
}

/* The table at N = 5632 (the shape, where the crossovers were measured), dense path
 * available, no small-batch path. */
static void test_ffn_policy_table(void **st) {
    (void)st;
    static const struct {
        size_t M;
        double est;
        int was_dense;
        tw_ffn_route want;
    } t[] = {
        /* nothing known yet: the tiled pipeline */
        {1, -1.0, 0, TI},
        {4096, -1.0, 0, TI},
        {65536, -1.0, 0, TI},
        /* 1..47 rows: dense above 3.0% of N (169.0 per row) */
        {1, 110.0, 0, TI},
        {1, 185.0, 0, DE},
        {8, 1126.0, 0, DE},
        {31, 150.0, 1, DE}, /* stays: above 0.8 x 169.0 */
        {31, 130.0, 1, TI},
        /* 48..95: 2.0% (112.6) */
        {64, 100.0, 0, TI},
        {64, 120.0, 0, DE},
        /* 96..1447: dense at every density, with or without an estimate */
        {96, 1.0, 0, DE},
        {256, 10.0, 0, DE},
        {512, 29.0, 0, DE},
        {1000, -1.0, 0, DE},
        {1447, 0.0, 0, DE},
        /* 1448..2895: 0.85% (47.9) */
        {2048, 29.0, 0, TI},
        {2048, 56.0, 0, DE},
        /* 2896..8191: 1.39% (78.3) */
        {4096, 56.0, 0, TI},
        {4096, 110.0, 0, DE},
        /* from 8192: 1.31% (73.8) */
        {16384, 56.0, 0, TI},
        {16384, 85.0, 0, DE},
        {65536, 1126.0, 0, DE},
        /* after a dense call: stays dense down to 0.8 of the threshold */
        {4096, 70.0, 1, DE},
        {4096, 60.0, 1, TI},
        {2048, 40.0, 1, DE},
        {2048, 35.0, 1, TI},
        {16384, 29.0, 1, TI},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        tw_ffn_route got = route(t[i].M, t[i].est, 0, 1, t[i].was_dense);
        if (got != t[i].want)
            fail_msg("M=%zu est=%.1f was_dense=%d: %s, expected %s", t[i].M, t[i].est,
                     t[i].was_dense, tw_ffn_route_name(got), tw_ffn_route_name(t[i].want));
    }
}

/* What cannot run is never chosen; the small-batch path, when it can run, takes the small M the
 * tiled pipeline would. */
/* Rule 0, the row kernel: with it available, more rows than the fused kernel's up to
 * TW_POLICY_ROW_MAX_ROWS (from TW_POLICY_ROW_MIN_ROWS) take the small path while the estimate is at
 * most the row threshold (2% of N from 17 rows, 1.8% from 512, 1.4% from 1024) and no overflowing
 * row-tile has been seen; otherwise the table above decides. */
static void test_ffn_policy_row(void **st) {
    (void)st;
    static const struct {
        size_t M;
        double est;
        int was_dense, ovf_seen;
        tw_ffn_route want;
    } t[] = {
        {17, -1.0, 0, 0, SM},   {64, 29.0, 0, 0, SM},   {64, 112.0, 0, 0, SM},
        {64, 113.0, 0, 0, DE}, /* rule 1: dense above 2% from 48 rows */
        {200, 113.0, 0, 0, DE}, {256, 112.0, 0, 0, SM}, {512, 101.0, 0, 0, SM},
        {512, 102.0, 0, 0, DE}, {256, 100.0, 1, 0, DE}, /* after a dense call: row only below 0.8 of
                                                           the threshold */
        {256, 85.0, 1, 0, SM},  {1024, 78.0, 0, 0, SM}, {1024, 79.0, 0, 0, DE},
        {1025, 29.0, 0, 0, DE}, {512, 29.0, 0, 1, DE}, /* overflow seen: the table (dense at every
                                                          density here) */
        {2048, -1.0, 0, 0, TI},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        tw_ffn_policy_in in;
        memset(&in, 0, sizeof in);
        in.M = t[i].M, in.N = 5632, in.est = t[i].est;
        in.small_ok = 1, in.dense_ok = 1, in.was_dense = t[i].was_dense;
        in.row_ok = t[i].M > 16, in.ovf_seen = t[i].ovf_seen;
        tw_ffn_route got = tw_ffn_policy(&in);
        if (got != t[i].want)
            fail_msg("M=%zu est=%.1f was_dense=%d ovf=%d: %s, expected %s", t[i].M, t[i].est,
                     t[i].was_dense, t[i].ovf_seen, tw_ffn_route_name(got),
                     tw_ffn_route_name(t[i].want));
    }
    assert_true(fabs(tw_ffn_policy_row_threshold(100, 5632) - 0.02 * 5632) < 1e-9);
    assert_true(fabs(tw_ffn_policy_row_threshold(16, 5632)) < 1e-9);
    /* rule 0 alone: from TW_POLICY_ROW_MIN_ROWS (below, the small path's up and down kernels) */
    tw_ffn_policy_in in;
    memset(&in, 0, sizeof in);
    in.N = 5632, in.est = 29.0, in.small_ok = 1, in.dense_ok = 1, in.row_ok = 1;
    in.M = TW_POLICY_ROW_MIN_ROWS - 1;
    assert_int_equal(tw_ffn_policy_row(&in), 0);
    assert_int_equal(tw_ffn_policy(&in), SM);
    in.M = TW_POLICY_ROW_MIN_ROWS;
    assert_int_equal(tw_ffn_policy_row(&in), 1);
    in.ovf_seen = 1;
    assert_int_equal(tw_ffn_policy_row(&in), 0);
}

/* Rule 3: once the tiled pipeline has had rows with overflowing row-tiles (or the counts showed
 * overflowing row-tiles), the calls it would take up to TW_POLICY_HEAVY_DENSE_MAX_ROWS run dense;
 * the small path and larger M are unchanged. */
static void test_ffn_policy_heavy(void **st) {
    (void)st;
    static const struct {
        size_t M;
        int heavy, ovf, dense_ok;
        tw_ffn_route want;
        double thr; /* a test's dense threshold (0: the measured rules) */
    } t[] = {
        {2048, 0, 0, 1, TI, 0},
        {2048, 1, 0, 1, DE, 0},
        {2048, 0, 1, 1, DE, 0},
        {1448, 1, 0, 1, DE, 0},
        {TW_POLICY_HEAVY_DENSE_MAX_ROWS, 1, 0, 1, DE, 0},
        {TW_POLICY_HEAVY_DENSE_MAX_ROWS + 1, 1, 0, 1, TI, 0},
        {4096, 1, 1, 1, TI, 0},
        {2048, 1, 1, 0, TI, 0},   /* no dense path */
        {8, 1, 1, 1, SM, 0},      /* the small path keeps its rows */
        {2048, 1, 1, 1, TI, 1e9}, /* a test's threshold decides alone: sparse */
        {2048, 1, 0, 1, DE, 1.0}, /* ... and dense above it */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        tw_ffn_policy_in in;
        memset(&in, 0, sizeof in);
        in.M = t[i].M, in.N = 5632, in.est = 29.0, in.small_ok = 1, in.row_ok = t[i].M > 16;
        in.dense_ok = t[i].dense_ok, in.heavy_seen = t[i].heavy, in.ovf_seen = t[i].ovf;
        in.dense_thr = t[i].thr;
        tw_ffn_route got = tw_ffn_policy(&in);
        if (got != t[i].want)
            fail_msg("M=%zu heavy=%d ovf=%d dense_ok=%d: %s, expected %s", t[i].M, t[i].heavy,
                     t[i].ovf, t[i].dense_ok, tw_ffn_route_name(got), tw_ffn_route_name(t[i].want));
    }
}

static void test_ffn_policy_availability(void **st) {
    (void)st;
    assert_int_equal(route(16384, 1126.0, 0, 0, 0), TI); /* no dense path: tiled */
    assert_int_equal(route(16384, 1126.0, 0, 0, 1), TI);
    assert_int_equal(route(1, 29.0, 1, 1, 0), SM);
    assert_int_equal(route(TW_POLICY_SMALL_MAX_ROWS, -1.0, 1, 0, 0), SM);
    assert_int_equal(route(TW_POLICY_SMALL_MAX_ROWS + 1, -1.0, 1, 0, 0), TI);
    assert_int_equal(route(TW_POLICY_SMALL_MAX_ROWS, -1.0, 1, 1, 0), DE); /* dense at any density */
    assert_int_equal(route(4096, 280.0, 1, 1, 0), DE);
    /* the small path replaces tiled, not dense: an estimate above the dense crossover keeps
     * dense; at low density, or with no dense path, it is small */
    assert_int_equal(route(64, 29.0, 1, 1, 0), SM);
    assert_int_equal(route(256, 280.0, 1, 1, 0), DE);
    assert_int_equal(route(256, 280.0, 1, 0, 0), SM);
    assert_int_equal(route(8, 1126.0, 1, 1, 1), DE);
    assert_int_equal(route(8, 150.0, 1, 1, 0), SM);
    assert_int_equal(route(8, 280.0, 1, 1, 0), DE); /* above 3%: the small kernels overflow */
    assert_int_equal(route(8, 1126.0, 1, 0, 0), SM);
    assert_string_equal(tw_ffn_route_name(SM), "small");
    assert_string_equal(tw_ffn_route_name(TI), "tiled");
    assert_string_equal(tw_ffn_route_name(DE), "dense");
    assert_null(tw_ffn_route_name((tw_ffn_route)7));
}

/* The threshold function and the hooks' overrides (threshold, smallest dense M). */
static void test_ffn_policy_threshold_and_overrides(void **st) {
    (void)st;
    assert_true(isinf(tw_ffn_policy_dense_threshold(0, 5632)));
    assert_true(fabs(tw_ffn_policy_dense_threshold(1, 5632) - 0.03 * 5632) < 1e-9);
    assert_true(fabs(tw_ffn_policy_dense_threshold(4096, 5632) - 0.0139 * 5632) < 1e-9);
    /* every measured range: a fraction of N between 0.1% and 10%, or 0 (dense at every density)
     * from 96 to 1447 rows */
    for (size_t M = TW_POLICY_DENSE_MIN_ROWS; M <= 65536; M *= 2) {
        double f = tw_ffn_policy_dense_threshold(M, 5632) / 5632.0;
        if (M >= 96 && M < 1448)
            assert_true(f == 0.0);
        else
            assert_true(f > 0.001 && f < 0.1);
    }
    /* the crossover is a density: it scales with N */
    assert_true(fabs(tw_ffn_policy_dense_threshold(4096, 11008) / 11008.0 -
                     tw_ffn_policy_dense_threshold(4096, 5632) / 5632.0) < 1e-12);
    tw_ffn_policy_in in;
    memset(&in, 0, sizeof in);
    in.M = 7, in.N = 5632, in.est = 2.0, in.dense_ok = 1;
    assert_int_equal(tw_ffn_policy(&in), TI);
    in.dense_min_rows = 8; /* below the smallest dense M: never dense */
    in.est = 1126.0;
    assert_int_equal(tw_ffn_policy(&in), TI);
    in.est = 2.0;
    in.dense_min_rows = 1, in.dense_thr = 0.25; /* test_gpu_ffn_dense's forcing */
    assert_int_equal(tw_ffn_policy(&in), DE);
    in.dense_thr = 1e9;
    assert_int_equal(tw_ffn_policy(&in), TI);
    in.est = -1.0, in.dense_thr = 0.25; /* an override needs an estimate too */
    assert_int_equal(tw_ffn_policy(&in), TI);
}

/* twell_plan_reserve on the CPU backend: arguments checked, nothing else to do. */
static void test_ffn_policy_reserve_args_cpu(void **st) {
    (void)st;
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    twell_shape s;
    twell_shape_init(&s, 64, 256);
    twell_plan *plan = NULL;
    assert_int_equal(twell_plan_create(ctx, &s, &plan), TWELL_OK);
    assert_int_equal(twell_plan_reserve(NULL, 1, 0.0), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_plan_reserve(plan, 0, 0.0), TWELL_ERR_INVALID_ARG);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "max_M"));
    assert_int_equal(twell_plan_reserve(plan, 1, -0.5), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_plan_reserve(plan, 1, 256.5), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_plan_reserve(plan, 1, NAN), TWELL_ERR_INVALID_ARG);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "nnz_per_row"));
    assert_int_equal(twell_plan_reserve(plan, (size_t)-1, 1.0), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_plan_reserve(plan, 65536, 256.0), TWELL_OK);
    assert_string_equal(twell_ctx_errmsg(ctx), "");
    twell_plan_destroy(plan);
    twell_ctx_destroy(ctx);
}

/* The split-K rule of the dense GEMMs on an H100 (132 SMs: 66 clusters of 2) at K = 2048,
 * N = 5632: the down GEMM has K/256 = 8 column tiles per 256 rows and 5632/64 = 88 k-blocks, the
 * up GEMM 22 tiles and 32 k-blocks. One wave at most, slices of ≥ 4 k-blocks, ≤ 16 slices. */
static void test_ffn_policy_dense_split(void **st) {
    (void)st;
    static const struct {
        size_t units;
        unsigned kblocks, clusters, want;
    } t[] = {
        /* M ≤ 256 (one row of units): down 8 tiles -> 8 slices (64 items), up 22 -> 3 (66) */
        {8, 88, 66, 8},
        {22, 32, 66, 3},
        /* M ≤ 512: down 16 -> 4; up 44 -> 1 (more than half the clusters busy) */
        {16, 88, 66, 4},
        {44, 32, 66, 1},
        /* M ≤ 1024: down 32 -> 2; up 88 -> 1 */
        {32, 88, 66, 2},
        {88, 32, 66, 1},
        /* M ≤ 2048: down 64 -> 1 */
        {64, 88, 66, 1},
        {34, 88, 66, 1},
        {33, 88, 66, 2},
        /* one tile: capped by 16 slices, and by k-blocks / 4 */
        {1, 88, 66, 16},
        {1, 32, 66, 8},
        {1, 8, 66, 2},
        {1, 7, 66, 1}, /* 7 / 4 = 1 slice: no split */
        {2, 2048, 132, 16},
        /* degenerate inputs */
        {0, 88, 66, 1},
        {8, 88, 0, 1},
        {8, 0, 66, 1},
        {66, 88, 66, 1},
        {1000, 88, 66, 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        unsigned got = tw_ffn_dense_split(t[i].units, t[i].kblocks, t[i].clusters);
        if (got != t[i].want)
            fail_msg("units %zu, k-blocks %u, clusters %u: split %u, expected %u", t[i].units,
                     t[i].kblocks, t[i].clusters, got, t[i].want);
        /* never more items than clusters, never an empty slice */
        if (got > 1) {
            assert_true(t[i].units * got <= t[i].clusters);
            assert_true(got * TW_POLICY_SPLIT_MIN_KB <= t[i].kblocks);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ffn_policy_dense_split),
        cmocka_unit_test(test_ffn_policy_table),
        cmocka_unit_test(test_ffn_policy_row),
        cmocka_unit_test(test_ffn_policy_heavy),
        cmocka_unit_test(test_ffn_policy_availability),
        cmocka_unit_test(test_ffn_policy_threshold_and_overrides),
        cmocka_unit_test(test_ffn_policy_reserve_args_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
