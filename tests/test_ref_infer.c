/* test_ref_infer.c — the CPU reference of gate-pack and fused inference against a naive dense fp64
 * FFN, exactness of the overflow path, and bitwise determinism across thread counts.
 * labels: unit */
#include "cpu_ref.h"
#include "half.h"
#include "ref64.h"
#include "synth.h"
#include "twell_format.h"
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

#include "tw_cpu.h"

typedef struct {
    size_t M;
    uint32_t K, N, T, C;
    twell_dtype dtype;
    int gated;
    tw_synth_dist dist;
    double nnz, heavy;
} tri_case;

/* Awkward M (1, 31, 33), K not a multiple of 64, every T and C, both dtypes, both block kinds,
 * uniform and skewed data (heavy rows overflow the smaller row-tiles). */
static const tri_case tri_cases[] = {
    {1, 48, 256, 64, 8, TWELL_DTYPE_BF16, 1, TW_SYNTH_UNIFORM, 8, 0},
    {31, 48, 512, 128, 4, TWELL_DTYPE_FP16, 0, TW_SYNTH_SKEWED, 12, 0.2},
    {33, 64, 768, 256, 8, TWELL_DTYPE_BF16, 1, TW_SYNTH_SKEWED, 20, 0.2},
    {17, 128, 1024, 256, 2, TWELL_DTYPE_FP16, 1, TW_SYNTH_UNIFORM, 29, 0},
    {40, 96, 320, 64, 4, TWELL_DTYPE_BF16, 0, TW_SYNTH_UNIFORM, 10, 0},
    {64, 256, 2048, 256, 8, TWELL_DTYPE_BF16, 1, TW_SYNTH_SKEWED, 29, 0.1},
    {9, 16, 128, 128, 2, TWELL_DTYPE_FP16, 0, TW_SYNTH_SKEWED, 6, 0.3},
};

static twell_shape tri_shape(const tri_case *c) {
    twell_shape s;
    twell_shape_init(&s, c->K, c->N);
    s.T = c->T;
    s.C = c->C;
    s.dtype = c->dtype;
    s.gated = c->gated;
    return s;
}

static tw_synth_ffn *tri_data(const tri_case *c, uint64_t seed) {
    tw_synth_params p = tw_synth_params_default();
    p.M = c->M;
    p.K = c->K;
    p.N = c->N;
    p.dtype = c->dtype;
    p.gated = c->gated;
    p.dist = c->dist;
    p.nnz = c->nnz;
    p.heavy_frac = c->heavy;
    p.seed = seed;
    tw_synth_ffn *f = NULL;
    assert_int_equal(tw_synth_create(NULL, &p, &f), TWELL_OK);
    return f;
}

/* Runs gate-pack and inference through the public API on poisoned outputs. */
static void tri_run(twell_ctx *ctx, const twell_shape *s, const tw_synth_ffn *f, uint32_t *packed,
                    uint16_t *y) {
    twell_plan *plan = NULL;
    assert_int_equal(twell_plan_create(ctx, s, &plan), TWELL_OK);
    size_t M = f->p.M;
    memset(packed, 0xa5, twell_packed_bytes(s, M));
    memset(y, 0xa5, M * s->K * sizeof *y);
    twell_status st = twell_gate_pack(plan, M, f->x, tw_synth_pack_weight(f), packed, NULL);
    if (st != TWELL_OK)
        fail_msg("twell_gate_pack: %s: %s", twell_status_name(st), twell_ctx_errmsg(ctx));
    st = twell_ffn_infer(plan, M, f->x, packed, s->gated ? f->wg : NULL, f->wu, f->wd, y, NULL);
    if (st != TWELL_OK)
        fail_msg("twell_ffn_infer: %s: %s", twell_status_name(st), twell_ctx_errmsg(ctx));
    assert_string_equal(twell_ctx_errmsg(ctx), "");
    twell_plan_destroy(plan);
}

/* Every stored activation matches the fp64 pre-activation up to the dtype's rounding plus the
 * fp32 accumulation bound K·2⁻²³·Σ|x·w|; activity may differ only inside that bound. */
static void test_ref_infer_gate_pack_vs_fp64(void **state) {
    (void)state;
    twell_ctx *ctx = tw_test_cpu_ctx(2);
    for (size_t ci = 0; ci < sizeof tri_cases / sizeof tri_cases[0]; ci++) {
        const tri_case *c = &tri_cases[ci];
        twell_shape s = tri_shape(c);
        tw_synth_ffn *f = tri_data(c, 100 + ci);
        size_t M = c->M, N = c->N, K = c->K;
        uint32_t *packed = malloc(twell_packed_bytes(&s, M));
        uint16_t *y = malloc(M * K * sizeof *y), *dense = malloc(N * sizeof *dense);
        double *pre = malloc(M * N * sizeof *pre), *absv = malloc(M * N * sizeof *absv);
        float *xf = malloc(K * sizeof *xf), *wrow = malloc(K * sizeof *wrow);
        uint16_t tile[256];
        assert_non_null(packed && y && dense && pre && absv && xf && wrow);
        tri_run(ctx, &s, f, packed, y);
        ref64_linear(s.dtype, M, K, N, f->x, tw_synth_pack_weight(f), pre, absv);
        uint32_t words = s.T / s.C, slots = words - 1;
        double rel = s.dtype == TWELL_DTYPE_BF16 ? 0x1p-8 : 0x1p-10;
        double worst = 0.0;
        size_t active = 0, overflow = 0;
        for (size_t m = 0; m < M; m++) {
            const uint32_t *row = packed + m * (N / s.C);
            int over = tw_unpack_row(&s, row, dense);
            assert_true(over >= 0); /* ascending, in-tile, unused slots zero */
            tw_to_f32_ref(s.dtype, f->x + m * K, xf, K);
            for (uint32_t t = 0; t < N / s.T; t++) {
                /* The exact tile: the stored prefix and count must agree with it. */
                tw_gate_tile_ref(s.dtype, xf, tw_synth_pack_weight(f), K, t * s.T, s.T, wrow, tile);
                uint32_t count = 0;
                for (uint32_t j = 0; j < s.T; j++) {
                    uint16_t v = tile[j];
                    if (v == 0)
                        continue;
                    if (count < slots)
                        assert_int_equal(row[t * words + 1 + count],
                                         ((uint32_t)v << 16) | (t * s.T + j));
                    count++;
                }
                assert_int_equal(row[t * words], count);
                overflow += count > slots;
                active += count;
                for (uint32_t j = 0; j < s.T; j++) {
                    size_t n = t * s.T + j;
                    double v = tw_half_to_f32(s.dtype, tile[j]);
                    double p = pre[m * N + n], r = p > 0 ? p : 0;
                    double band = (double)K * 0x1p-23 * absv[m * N + n];
                    double err = fabs(v - r);
                    if (err > rel * r + band)
                        fail_msg("case %zu row %zu col %zu: stored %.9g, fp64 %.9g (band %.3g)", ci,
                                 m, n, v, r, band);
                    if (r > 0 && err / r > worst)
                        worst = err / r;
                }
            }
        }
        assert_true(active > 0); /* real sparse data, never zeros */
        printf("  case %zu: M=%zu K=%zu N=%zu T=%u C=%u %s %s %s: %zu active, %zu overflowing "
               "row-tiles, worst relative activation error %.3g\n",
               ci, M, K, N, s.T, s.C, s.dtype == TWELL_DTYPE_BF16 ? "bf16" : "fp16",
               s.gated ? "gated" : "non-gated", tw_synth_dist_name(c->dist), active, overflow,
               worst);
        free(packed), free(y), free(dense), free(pre), free(absv), free(xf), free(wrow);
        tw_synth_destroy(f);
    }
    twell_ctx_destroy(ctx);
}

/* y against the fp64 FFN with activations rounded as stored: per row, max |y − y64| ≤ tol ·
 * max |y64| (tol 1e-2 bf16, 2e-3 fp16: output rounding is 2⁻⁹ / 2⁻¹¹ relative, plus fp32
 * accumulation and rare one-ulp activation differences near ties). */
static void test_ref_infer_ffn_vs_fp64(void **state) {
    (void)state;
    twell_ctx *ctx = tw_test_cpu_ctx(2);
    for (size_t ci = 0; ci < sizeof tri_cases / sizeof tri_cases[0]; ci++) {
        const tri_case *c = &tri_cases[ci];
        twell_shape s = tri_shape(c);
        tw_synth_ffn *f = tri_data(c, 200 + ci);
        size_t M = c->M, K = c->K;
        uint32_t *packed = malloc(twell_packed_bytes(&s, M));
        uint16_t *y = malloc(M * K * sizeof *y);
        double *y64 = malloc(M * K * sizeof *y64);
        assert_non_null(packed && y && y64);
        tri_run(ctx, &s, f, packed, y);
        ref64_ffn(&s, M, f->x, f->wg, f->wu, f->wd, 1, y64);
        double tol = s.dtype == TWELL_DTYPE_BF16 ? 1e-2 : 2e-3, worst = 0.0;
        size_t nonzero_rows = 0;
        for (size_t m = 0; m < M; m++) {
            double scale = 0.0, err = 0.0;
            for (size_t k = 0; k < K; k++) {
                double r = y64[m * K + k], v = tw_half_to_f32(s.dtype, y[m * K + k]);
                if (isnan(v))
                    fail_msg("case %zu row %zu: y is NaN", ci, m);
                scale = fmax(scale, fabs(r));
                err = fmax(err, fabs(v - r));
            }
            if (scale == 0.0) {
                assert_true(err == 0.0);
                continue;
            }
            nonzero_rows++;
            if (err / scale > tol)
                fail_msg("case %zu row %zu: max error %.3g of scale %.3g (ratio %.3g > %.3g)", ci,
                         m, err, scale, err / scale, tol);
            worst = fmax(worst, err / scale);
        }
        assert_true(nonzero_rows > 0);
        printf("  case %zu: worst row error / row scale %.3g (tolerance %.0e)\n", ci, worst, tol);
        free(packed), free(y), free(y64);
        tw_synth_destroy(f);
    }
    twell_ctx_destroy(ctx);
}

/* The overflow path is exact: y is bitwise the same for every (T, C), whether row-tiles overflow
 * (few slots) or not (many), because overflowing tiles are recomputed with the same roundings. */
static void test_ref_infer_overflow_exact(void **state) {
    (void)state;
    twell_ctx *ctx = tw_test_cpu_ctx(2);
    for (int dt = 0; dt < 2; dt++)
        for (int gated = 0; gated < 2; gated++) {
            tri_case c = {37, 80, 1024, 256, 8, (twell_dtype)dt, gated, TW_SYNTH_SKEWED, 24, 0.25};
            tw_synth_ffn *f = tri_data(&c, 300u + (uint64_t)(dt * 2 + gated));
            size_t M = c.M, K = c.K;
            uint16_t *y0 = malloc(M * K * 2), *y = malloc(M * K * 2);
            uint32_t *packed = malloc((size_t)M * c.N * 2); /* enough for C = 2 */
            assert_non_null(y0 && y && packed);
            size_t min_over = SIZE_MAX, max_over = 0;
            static const uint32_t Ts[] = {64, 128, 256}, Cs[] = {2, 4, 8};
            for (int ti = 0; ti < 3; ti++)
                for (int ci = 0; ci < 3; ci++) {
                    c.T = Ts[ti];
                    c.C = Cs[ci];
                    twell_shape s = tri_shape(&c);
                    tri_run(ctx, &s, f, packed, ti + ci == 0 ? y0 : y);
                    tw_synth_stats st;
                    tw_synth_packed_stats(&s, M, packed, &st);
                    min_over = st.overflow_tiles < min_over ? st.overflow_tiles : min_over;
                    max_over = st.overflow_tiles > max_over ? st.overflow_tiles : max_over;
                    if (ti + ci > 0 && memcmp(y0, y, M * K * 2) != 0)
                        fail_msg("dtype %d gated %d: y for T=%u C=%u differs from T=64 C=2", dt,
                                 gated, c.T, c.C);
                }
            printf("  dtype %d gated %d: overflowing row-tiles from %zu to %zu across (T, C), y "
                   "bitwise identical\n",
                   dt, gated, min_over, max_over);
            assert_int_equal(min_over, 0); /* some format holds everything... */
            assert_true(max_over >= 5);    /* ...and some overflows: both paths ran */
            free(y0), free(y), free(packed);
            tw_synth_destroy(f);
        }
    twell_ctx_destroy(ctx);
}

/* A case's data and shape with two sets of outputs (packed and y) to compare. */
typedef struct {
    tw_synth_ffn *f;
    twell_shape s;
    size_t pb, yb; /* bytes of one packed buffer, of one y */
    uint32_t *p0, *p;
    uint16_t *y0, *y;
} tri_two;

static void tri_two_make(const tri_case *c, uint64_t seed, tri_two *t) {
    t->f = tri_data(c, seed);
    t->s = tri_shape(c);
    t->pb = twell_packed_bytes(&t->s, c->M);
    t->yb = c->M * c->K * 2;
    t->p0 = malloc(t->pb), t->p = malloc(t->pb);
    t->y0 = malloc(t->yb), t->y = malloc(t->yb);
    assert_non_null(t->p0 && t->p && t->y0 && t->y);
}

static void tri_two_free(tri_two *t) {
    free(t->p0), free(t->p), free(t->y0), free(t->y);
    tw_synth_destroy(t->f);
}

/* Packed bytes and y are identical for 1, 2, 3 and 5 threads and across repeated runs. */
static void test_ref_infer_deterministic_threads(void **state) {
    (void)state;
    tri_case c = {45, 112, 768, 128, 8, TWELL_DTYPE_BF16, 1, TW_SYNTH_SKEWED, 16, 0.2};
    tri_two t;
    tri_two_make(&c, 400, &t);
    static const int threads[] = {1, 2, 3, 5, 2};
    for (int i = 0; i < 5; i++) {
        twell_ctx *ctx = tw_test_cpu_ctx(threads[i]);
        tri_run(ctx, &t.s, t.f, i ? t.p : t.p0, i ? t.y : t.y0);
        twell_ctx_destroy(ctx);
        if (i) {
            assert_memory_equal(t.p0, t.p, t.pb);
            assert_memory_equal(t.y0, t.y, t.yb);
        }
    }
    tw_synth_stats st;
    tw_synth_packed_stats(&t.s, c.M, t.p0, &st);
    assert_true(st.overflow_tiles > 0);
    tri_two_free(&t);
}

/* The pure reference functions give the same bytes as the public API. */
static void test_ref_infer_ref_matches_api(void **state) {
    (void)state;
    tri_case c = {33, 64, 512, 64, 4, TWELL_DTYPE_FP16, 0, TW_SYNTH_SKEWED, 10, 0.2};
    tri_two t;
    tri_two_make(&c, 500, &t);
    twell_ctx *ctx = tw_test_cpu_ctx(2);
    tri_run(ctx, &t.s, t.f, t.p0, t.y0);
    twell_ctx_destroy(ctx);
    memset(t.p, 0xa5, t.pb);
    memset(t.y, 0xa5, t.yb);
    assert_int_equal(tw_gate_pack_ref(NULL, &t.s, c.M, t.f->x, t.f->wu, t.p), TWELL_OK);
    assert_int_equal(tw_ffn_infer_ref(NULL, &t.s, c.M, t.f->x, t.p, NULL, t.f->wu, t.f->wd, t.y),
                     TWELL_OK);
    assert_memory_equal(t.p0, t.p, t.pb);
    assert_memory_equal(t.y0, t.y, t.yb);
    /* A malformed packed buffer is rejected before y is touched. */
    size_t row;
    uint32_t tile;
    assert_int_equal(tw_packed_find_malformed(&t.s, c.M, t.p, &row, &tile), 0);
    t.p[5 * (t.s.N / t.s.C) + 2 * (t.s.T / t.s.C)] = t.s.T + 1; /* row 5, tile 2: count > T */
    memset(t.y, 0xa5, t.yb);
    assert_int_equal(tw_ffn_infer_ref(NULL, &t.s, c.M, t.f->x, t.p, NULL, t.f->wu, t.f->wd, t.y),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(tw_packed_find_malformed(&t.s, c.M, t.p, &row, &tile), 1);
    assert_int_equal(row, 5);
    assert_int_equal(tile, 2);
    for (size_t i = 0; i < t.yb / 2; i++)
        assert_int_equal(t.y[i], 0xa5a5);
    tri_two_free(&t);
}

/* The dot product rounds each product, then the sum, k ascending, starting from +0. */
static void test_ref_infer_dot_order(void **state) {
    (void)state;
    /* 1 + 2⁻²⁴ + 2⁻²⁴ = 1 in fp32 step by step (each addition ties to even), 1 + 2⁻²³ if the
     * small terms were added first: the order is observable. */
    float a[3] = {1.0f, 0x1p-24f, 0x1p-24f}, b[3] = {1.0f, 1.0f, 1.0f};
    assert_true(tw_dot_ref(a, b, 3) == 1.0f);
    float c[3] = {0x1p-24f, 0x1p-24f, 1.0f};
    assert_true(tw_dot_ref(c, b, 3) == 1.0f + 0x1p-23f);
    float z[2] = {-0.0f, 0.0f}, o[2] = {1.0f, 1.0f};
    assert_true(tw_f32_bits(tw_dot_ref(z, o, 1)) == 0u); /* +0 start: +0 + -0 = +0 */
    assert_int_equal(tw_act_ref(TWELL_DTYPE_BF16, -1.0f), 0);
    /* a NaN is active as the canonical positive NaN, whatever its sign; -Inf is inactive */
    assert_int_equal(tw_act_ref(TWELL_DTYPE_BF16, NAN), 0x7fc0);
    assert_int_equal(tw_act_ref(TWELL_DTYPE_BF16, -NAN), 0x7fc0);
    assert_int_equal(tw_act_ref(TWELL_DTYPE_FP16, -NAN), 0x7e00);
    assert_int_equal(tw_act_ref(TWELL_DTYPE_BF16, INFINITY), 0x7f80);
    assert_int_equal(tw_act_ref(TWELL_DTYPE_FP16, -INFINITY), 0);
    assert_int_equal(tw_act_ref(TWELL_DTYPE_FP16, 1e6f), 0x7c00); /* rounds to +Inf: active */
    assert_int_equal(tw_act_ref(TWELL_DTYPE_BF16, 1.0f), 0x3f80);
    assert_int_equal(tw_act_ref(TWELL_DTYPE_FP16, 1.0f), 0x3c00);
    assert_int_equal(tw_act_ref(TWELL_DTYPE_FP16, 1e-9f), 0); /* rounds to +0: inactive */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_infer_dot_order),
        cmocka_unit_test(test_ref_infer_gate_pack_vs_fp64),
        cmocka_unit_test(test_ref_infer_ffn_vs_fp64),
        cmocka_unit_test(test_ref_infer_overflow_exact),
        cmocka_unit_test(test_ref_infer_deterministic_threads),
        cmocka_unit_test(test_ref_infer_ref_matches_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
