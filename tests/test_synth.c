/* test_synth.c — synthetic FFN data (determinism, sparsity near the target, skewed structure),
 * the packed-buffer statistics, the dense fp64 report helpers, and a `twell demo` smoke run.
 * labels: unit */
#include "cpu_ref.h"
#include "ref64.h"
#include "synth.h"
#include "tw_run.h"
#include "twellrt.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static tw_synth_params ts_params(size_t M, uint32_t K, uint32_t N, double nnz, tw_synth_dist d) {
    tw_synth_params p = tw_synth_params_default();
    p.M = M;
    p.K = K;
    p.N = N;
    p.nnz = nnz;
    p.dist = d;
    return p;
}

/* Gate-packs f with shape s (T, C given) and returns its statistics. */
static void ts_stats(const tw_synth_ffn *f, uint32_t T, uint32_t C, tw_synth_stats *out) {
    twell_shape s;
    twell_shape_init(&s, f->p.K, f->p.N);
    s.T = T;
    s.C = C;
    s.dtype = f->p.dtype;
    s.gated = f->p.gated;
    uint32_t *packed = malloc(twell_packed_bytes(&s, f->p.M));
    assert_non_null(packed);
    assert_int_equal(tw_gate_pack_ref(NULL, &s, f->p.M, f->x, tw_synth_pack_weight(f), packed),
                     TWELL_OK);
    tw_synth_packed_stats(&s, f->p.M, packed, out);
    free(packed);
}

/* Same bytes for 1 and 3 threads; different seeds give different data. */
static void test_synth_deterministic(void **state) {
    (void)state;
    tw_pool *p3 = NULL;
    assert_int_equal(tw_pool_create(3, &p3), TWELL_OK);
    for (int d = 0; d < 2; d++) {
        tw_synth_params p = ts_params(37, 48, 320, 9, (tw_synth_dist)d);
        p.dtype = d ? TWELL_DTYPE_FP16 : TWELL_DTYPE_BF16;
        tw_synth_ffn *a = NULL, *b = NULL, *c = NULL;
        assert_int_equal(tw_synth_create(NULL, &p, &a), TWELL_OK);
        assert_int_equal(tw_synth_create(p3, &p, &b), TWELL_OK);
        assert_memory_equal(a->x, b->x, p.M * p.K * 2);
        assert_memory_equal(a->wg, b->wg, (size_t)p.N * p.K * 2);
        assert_memory_equal(a->wu, b->wu, (size_t)p.N * p.K * 2);
        assert_memory_equal(a->wd, b->wd, (size_t)p.N * p.K * 2);
        p.seed = 2;
        assert_int_equal(tw_synth_create(p3, &p, &c), TWELL_OK);
        assert_true(memcmp(a->x, c->x, p.M * p.K * 2) != 0);
        assert_true(memcmp(a->wg, c->wg, (size_t)p.N * p.K * 2) != 0);
        tw_synth_destroy(a);
        tw_synth_destroy(b);
        tw_synth_destroy(c);
    }
    /* Non-gated: no wg; the sparsity lives in wu. */
    tw_synth_params p = ts_params(8, 32, 128, 6, TW_SYNTH_UNIFORM);
    p.gated = 0;
    tw_synth_ffn *f = NULL;
    assert_int_equal(tw_synth_create(p3, &p, &f), TWELL_OK);
    assert_null(f->wg);
    assert_ptr_equal(tw_synth_pack_weight(f), f->wu);
    tw_synth_stats st;
    ts_stats(f, 64, 8, &st);
    assert_true(st.total > 0);
    tw_synth_destroy(f);
    tw_pool_destroy(p3);
}

/* Uniform data fires close to the target per row at several densities, never all zeros. */
static void test_synth_uniform_density(void **state) {
    (void)state;
    static const double targets[] = {4, 29, 110};
    for (int i = 0; i < 3; i++) {
        tw_synth_params p = ts_params(96, 256, 2048, targets[i], TW_SYNTH_UNIFORM);
        tw_synth_ffn *f = NULL;
        assert_int_equal(tw_synth_create(NULL, &p, &f), TWELL_OK);
        tw_synth_stats st;
        ts_stats(f, 256, 8, &st);
        printf("  target %g: mean %.2f, min %u, max %u per row\n", targets[i], st.mean_row,
               st.min_row, st.max_row);
        if (fabs(st.mean_row - targets[i]) > 0.25 * targets[i] + 1.0)
            fail_msg("target %g nnz/row, got a mean of %.2f", targets[i], st.mean_row);
        assert_true(st.max_row < 4 * targets[i] + 10);
        tw_synth_destroy(f);
    }
}

/* Skewed data: ~30% of neurons never fire, the first token of a sequence is denser than the
 * typical row, heavy rows overflow 256-column row-tiles with C = 8 (31 slots). */
static void test_synth_skewed_structure(void **state) {
    (void)state;
    tw_synth_params p = ts_params(200, 256, 2048, 29, TW_SYNTH_SKEWED);
    p.seq_len = 100; /* rows 0 and 100 are first tokens */
    p.heavy_frac = 0.05;
    tw_synth_ffn *f = NULL;
    assert_int_equal(tw_synth_create(NULL, &p, &f), TWELL_OK);
    twell_shape s;
    twell_shape_init(&s, p.K, p.N);
    uint32_t *packed = malloc(twell_packed_bytes(&s, p.M));
    uint16_t *dense = malloc(p.N * 2);
    unsigned *fired = calloc(p.N, sizeof *fired);
    uint32_t *row_nnz = calloc(p.M, sizeof *row_nnz);
    assert_non_null(packed && dense && fired && row_nnz);
    assert_int_equal(tw_gate_pack_ref(NULL, &s, p.M, f->x, f->wg, packed), TWELL_OK);
    float *xf = malloc(p.K * 4), *wrow = malloc(p.K * 4);
    uint16_t tile[256];
    assert_non_null(xf && wrow);
    for (size_t m = 0; m < p.M; m++) {
        tw_to_f32_ref(s.dtype, f->x + m * p.K, xf, p.K);
        for (uint32_t t = 0; t < p.N / s.T; t++) {
            tw_gate_tile_ref(s.dtype, xf, f->wg, p.K, t * s.T, s.T, wrow, tile);
            for (uint32_t j = 0; j < s.T; j++)
                if (tile[j]) {
                    fired[t * s.T + j]++;
                    row_nnz[m]++;
                }
        }
    }
    size_t dead = 0;
    for (uint32_t n = 0; n < p.N; n++)
        dead += fired[n] == 0;
    double dead_frac = (double)dead / p.N;
    tw_synth_stats st;
    tw_synth_packed_stats(&s, p.M, packed, &st);
    /* a typical row: the median */
    uint32_t *sorted = malloc(p.M * sizeof *sorted);
    assert_non_null(sorted);
    memcpy(sorted, row_nnz, p.M * sizeof *sorted);
    for (size_t i = 1; i < p.M; i++)
        for (size_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            uint32_t tmp = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = tmp;
        }
    uint32_t median = sorted[p.M / 2];
    printf("  dead neurons %.1f%%, median row %u, first tokens %u and %u, max row %u, max "
           "row-tile %u, %zu overflowing row-tiles in %zu rows\n",
           100 * dead_frac, median, row_nnz[0], row_nnz[100], st.max_row, st.max_tile,
           st.overflow_tiles, st.overflow_rows);
    assert_true(dead_frac > 0.25 && dead_frac < 0.45); /* 30% dead plus a few rare ones */
    assert_true(row_nnz[0] > 2 * median);
    assert_true(row_nnz[100] > 2 * median);
    assert_true(st.overflow_tiles > 0);
    assert_true(st.max_tile > 31);
    assert_int_equal(st.max_row, sorted[p.M - 1]); /* stats agree with the exact recount */
    assert_true(median > 10 && median < 60);
    free(packed), free(dense), free(fired), free(row_nnz), free(xf), free(wrow), free(sorted);
    tw_synth_destroy(f);
}

static void test_synth_bad_params(void **state) {
    (void)state;
    tw_synth_params p = ts_params(4, 32, 128, 6, TW_SYNTH_UNIFORM);
    tw_synth_ffn *f = (tw_synth_ffn *)(uintptr_t)1;
    tw_synth_params bad[6];
    for (int i = 0; i < 6; i++)
        bad[i] = p;
    bad[0].nnz = 0;
    bad[1].nnz = 129;
    bad[2].K = 1;
    bad[3].dist = (tw_synth_dist)5;
    bad[4].heavy_frac = 1.5;
    bad[5].dtype = (twell_dtype)3;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(tw_synth_create(NULL, &bad[i], &f), TWELL_ERR_INVALID_ARG);
        assert_null(f);
    }
    tw_synth_dist d;
    assert_int_equal(tw_synth_dist_parse("skewed", &d), 0);
    assert_int_equal(d, TW_SYNTH_SKEWED);
    assert_int_equal(tw_synth_dist_parse("uniform", &d), 0);
    assert_int_equal(d, TW_SYNTH_UNIFORM);
    assert_int_equal(tw_synth_dist_parse("zipf", &d), -1);
    assert_string_equal(tw_synth_dist_name(TW_SYNTH_SKEWED), "skewed");
    tw_synth_destroy(NULL);
}

/* Statistics of a hand-made packed buffer: 2 rows, 2 tiles of T = 64, C = 8 (7 slots). */
static void test_synth_packed_stats(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 16, 128);
    s.T = 64;
    uint32_t packed[2 * 16];
    memset(packed, 0, sizeof packed);
    packed[0] = 3;  /* row 0 tile 0 */
    packed[8] = 9;  /* row 0 tile 1: overflows */
    packed[16] = 0; /* row 1 tile 0 */
    packed[24] = 8; /* row 1 tile 1: overflows */
    tw_synth_stats st;
    tw_synth_packed_stats(&s, 2, packed, &st);
    assert_int_equal(st.rows, 2);
    assert_int_equal(st.total, 20);
    assert_true(st.mean_row == 10.0);
    assert_int_equal(st.min_row, 8);
    assert_int_equal(st.max_row, 12);
    assert_int_equal(st.max_tile, 9);
    assert_int_equal(st.overflow_tiles, 2);
    assert_int_equal(st.overflow_rows, 2);
}

/* The library's fp64 FFN agrees with the tests' naive one; the relative error helper is 0 for
 * y = y64 rounded and about the dtype's rounding otherwise. */
static void test_synth_ffn64(void **state) {
    (void)state;
    for (int gated = 0; gated < 2; gated++) {
        tw_synth_params p = ts_params(7, 48, 256, 12, TW_SYNTH_SKEWED);
        p.gated = gated;
        p.dtype = gated ? TWELL_DTYPE_FP16 : TWELL_DTYPE_BF16;
        tw_synth_ffn *f = NULL;
        assert_int_equal(tw_synth_create(NULL, &p, &f), TWELL_OK);
        twell_shape s;
        twell_shape_init(&s, p.K, p.N);
        s.dtype = p.dtype;
        s.gated = gated;
        double *want = malloc(p.M * p.K * sizeof *want), *got = malloc(3 * p.K * sizeof *got);
        uint16_t *y = malloc(p.M * p.K * 2);
        assert_non_null(want && got && y);
        ref64_ffn(&s, p.M, f->x, f->wg, f->wu, f->wd, 0, want);
        size_t rows[3] = {0, 3, 6};
        tw_pool *pool = NULL;
        assert_int_equal(tw_pool_create(2, &pool), TWELL_OK);
        assert_int_equal(tw_synth_ffn64(pool, &s, f->x, f->wg, f->wu, f->wd, rows, 3, got),
                         TWELL_OK);
        tw_pool_destroy(pool);
        double scale = 0;
        for (size_t i = 0; i < 3 * p.K; i++)
            scale = fmax(scale, fabs(want[rows[i / p.K] * p.K + i % p.K]));
        assert_true(scale > 0);
        for (size_t i = 0; i < 3; i++)
            for (size_t k = 0; k < p.K; k++) {
                double a = got[i * p.K + k], b = want[rows[i] * p.K + k];
                if (fabs(a - b) > 1e-12 * scale)
                    fail_msg("gated %d row %zu col %zu: %.17g vs %.17g", gated, rows[i], k, a, b);
            }
        /* y = the reference, exactly representable: error 0; otherwise below unit roundoff. */
        twell_ctx_options o;
        twell_ctx_options_init(&o);
        o.backend = TWELL_BACKEND_CPU;
        twell_ctx *ctx = NULL;
        twell_plan *plan = NULL;
        assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
        assert_int_equal(twell_plan_create(ctx, &s, &plan), TWELL_OK);
        uint32_t *packed = malloc(twell_packed_bytes(&s, p.M));
        assert_non_null(packed);
        assert_int_equal(twell_gate_pack(plan, p.M, f->x, tw_synth_pack_weight(f), packed, NULL),
                         TWELL_OK);
        assert_int_equal(twell_ffn_infer(plan, p.M, f->x, packed, f->wg, f->wu, f->wd, y, NULL),
                         TWELL_OK);
        double err = tw_synth_rel_error(&s, y, rows, 3, got);
        printf("  gated %d: relative error of the reference %.3g\n", gated, err);
        assert_true(err > 0 && err < (gated ? 2e-3 : 1e-2));
        twell_plan_destroy(plan);
        twell_ctx_destroy(ctx);
        free(want), free(got), free(y), free(packed);
        tw_synth_destroy(f);
    }
}

static void test_synth_demo_runs(void **state) {
    (void)state;
    static char out[16384];
    int rc = tw_test_tool("demo --backend cpu --M 33 --K 256 --N 1024 --nnz 20 --dist skewed "
                          "--dtype fp16 --T 128 --C 4",
                          out, sizeof out);
    printf("%s", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "backend   cpu"));
    assert_non_null(strstr(out, "M=33 K=256 N=1024 T=128 C=4 fp16"));
    assert_non_null(strstr(out, "nnz/row   mean"));
    assert_non_null(strstr(out, "gate-pack"));
    assert_non_null(strstr(out, "fused inference"));
    assert_non_null(strstr(out, "): OK"));
    assert_int_equal(tw_test_tool("demo --help", out, sizeof out), 0);
    assert_non_null(strstr(out, "--nnz"));
    assert_int_equal(tw_test_tool("demo --T 96", out, sizeof out), 2);
    assert_non_null(strstr(out, "shape.T = 96"));
    assert_int_equal(tw_test_tool("demo --dist zipf", out, sizeof out), 2);
    assert_int_equal(tw_test_tool("demo --M 0", out, sizeof out), 2);
    assert_int_equal(tw_test_tool("demo --bogus 1", out, sizeof out), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synth_deterministic),    cmocka_unit_test(test_synth_uniform_density),
        cmocka_unit_test(test_synth_skewed_structure), cmocka_unit_test(test_synth_bad_params),
        cmocka_unit_test(test_synth_packed_stats),     cmocka_unit_test(test_synth_ffn64),
        cmocka_unit_test(test_synth_demo_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
