/*
 * test_nonfinite.c — NaN and ±Inf propagate as the dense computation propagates them (twellrt.h
 * "Non-finite values"), on the CPU backend: the gate-pack's words (a NaN pre-activation active,
 * stored as the canonical NaN; +Inf active; -Inf inactive), inference y and the training forward
 * and backward (L0, L1, y, dx and the weight gradients) element for element in the class
 * (finite, +Inf, -Inf, NaN) of the fp64 dense reference, for non-finite values in x, the packing
 * weight, Wu and Wd, both dtypes, gated and non-gated.
 * labels: unit
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "half.h"
#include "tw_gpu.h" /* TW_GPU_OK: any context's calls */
#include "tw_nonfinite.h"
#include "twellrt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static twell_ctx *nf_cpu(int validate) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 2;
    o.validate_packed = validate ? TWELL_SWITCH_ON : TWELL_SWITCH_OFF;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    return ctx;
}

/* The packed words of the planted rows and columns follow the rule. */
static void nf_check_packed(const tw_nf_data *d, const uint32_t *packed, const size_t *active) {
    const twell_shape *s = &d->s;
    const uint32_t W = s->T / s->C, NT = s->N / s->T;
    const uint16_t nan = tw_half_nan(s->dtype);
    for (size_t m = 0; m < d->M; m++) {
        size_t total = 0;
        for (uint32_t t = 0; t < NT; t++) {
            const uint32_t *tile = packed + m * (s->N / s->C) + (size_t)t * W;
            total += tile[0];
            const uint32_t stored = tile[0] < W - 1 ? tile[0] : W - 1;
            for (uint32_t i = 0; i < stored; i++) {
                const uint16_t v = (uint16_t)(tile[1 + i] >> 16);
                const uint32_t col = tile[1 + i] & 0xffffu;
                assert_true(tw_half_slot_ok(s->dtype, v)); /* NaN only as the canonical one */
                if (d->where == TW_NF_WP && col == 5)
                    assert_int_equal(v, nan);
            }
        }
        assert_int_equal(total, active[m]);
        if (d->where == TW_NF_X && m == 1 && d->M > 1)
            assert_int_equal(total, s->N); /* a NaN x row: every pre-activation NaN, active */
    }
}

/* One scenario of inference: gate-pack, then twell_ffn_infer, against the reference classes;
 * the same packed buffer passes validation (canonical NaN and +Inf are valid slot values). */
static void nf_infer_case(twell_dtype dt, int gated, tw_nf_where where) {
    twell_shape s;
    twell_shape_init(&s, 64, 256);
    s.T = 64;
    s.C = 4;
    s.dtype = dt;
    s.gated = gated;
    const size_t M = 9;
    tw_nf_data d;
    assert_int_equal(tw_nf_make(&d, &s, M, where, 0.15, 0x5eedu + (uint64_t)where), 0);
    tw_nf_ref r;
    assert_int_equal(tw_nf_reference(&d, 0, 0.0, &r), 0);
    twell_ctx *ctx = nf_cpu(1);
    twell_plan *plan = NULL;
    TW_GPU_OK(ctx, twell_plan_create(ctx, &s, &plan));
    uint32_t *packed = malloc(twell_packed_bytes(&s, M));
    uint16_t *y = malloc(M * s.K * 2u);
    assert_non_null(packed);
    assert_non_null(y);
    memset(y, 0xab, M * s.K * 2u);
    TW_GPU_OK(ctx, twell_gate_pack(plan, M, d.x, gated ? d.wg : d.wu, packed, NULL));
    nf_check_packed(&d, packed, r.active);
    TW_GPU_OK(ctx, twell_ffn_infer(plan, M, d.x, packed, d.wg, d.wu, d.wd, y, NULL));
    printf("  %s %s, %s: %zu active in row 0\n", dt == TWELL_DTYPE_BF16 ? "bf16" : "fp16",
           gated ? "gated" : "non-gated", tw_nf_where_name(where), r.active[0]);
    assert_int_equal(tw_nf_compare(dt, y, NULL, r.y, M * s.K, s.K, TW_NF_EXACT, "y"), 0);
    free(packed);
    free(y);
    twell_plan_destroy(plan);
    twell_ctx_destroy(ctx);
    tw_nf_ref_free(&r);
    tw_nf_free(&d);
}

static void test_nonfinite_infer(void **state) {
    (void)state;
    for (int dt = 0; dt < 2; dt++)
        for (int gated = 0; gated < 2; gated++)
            for (int w = 0; w < TW_NF_COUNT; w++)
                if (gated || w != TW_NF_WU)
                    nf_infer_case((twell_dtype)dt, gated, (tw_nf_where)w);
}

/* Training forward and backward of one scenario against the reference classes. */
static void nf_train_case(twell_dtype dt, tw_nf_where where) {
    twell_shape s;
    twell_shape_init(&s, 64, 256);
    s.T = 128;
    s.C = 8;
    s.dtype = dt;
    const size_t M = 7, K = s.K, N = s.N;
    const float lambda = 0.01f;
    tw_nf_data d;
    assert_int_equal(tw_nf_make(&d, &s, M, where, 0.1, 0xfeedu + (uint64_t)where), 0);
    tw_nf_ref r;
    assert_int_equal(tw_nf_reference(&d, 1, lambda, &r), 0);
    twell_ctx *ctx = nf_cpu(0);
    twell_plan *plan = NULL;
    twell_train_state *ts = NULL;
    TW_GPU_OK(ctx, twell_plan_create(ctx, &s, &plan));
    TW_GPU_OK(ctx, twell_train_state_create(plan, &ts));
    uint16_t *y = malloc(M * K * 2u), *dx = malloc(M * K * 2u);
    float *dwg = malloc(N * K * 4u), *dwu = malloc(N * K * 4u), *dwd = malloc(N * K * 4u);
    assert_true(y && dx && dwg && dwu && dwd);
    float stats[2] = {-1.0f, -1.0f};
    TW_GPU_OK(ctx, twell_ffn_forward_train(plan, M, d.x, d.wg, d.wu, d.wd, y, stats, ts, NULL));
    TW_GPU_OK(ctx, twell_ffn_backward(plan, ts, M, d.x, d.wg, d.wu, d.wd, d.dy, lambda, dx, dwg,
                                      dwu, dwd, NULL));
    size_t nnz = 0;
    for (size_t m = 0; m < M; m++)
        nnz += r.active[m];
    printf("  train %s, %s: L0 %g (reference %g), L1 %g\n",
           dt == TWELL_DTYPE_BF16 ? "bf16" : "fp16", tw_nf_where_name(where), (double)stats[0],
           (double)nnz / (double)M, (double)stats[1]);
    /* L0 counts NaN activations as active: exactly the reference's count */
    assert_true(stats[0] == (float)((double)nnz / (double)M));
    assert_int_equal(tw_nf_classf(stats[1]), r.l1);
    size_t bad = tw_nf_compare(dt, y, NULL, r.y, M * K, K, TW_NF_EXACT, "y");
    bad += tw_nf_compare(dt, dx, NULL, r.dx, M * K, K, TW_NF_EXACT, "dx");
    bad += tw_nf_compare(dt, NULL, dwg, r.dwg, N * K, K, TW_NF_EXACT, "dwg");
    bad += tw_nf_compare(dt, NULL, dwu, r.dwu, N * K, K, TW_NF_EXACT, "dwu");
    bad += tw_nf_compare(dt, NULL, dwd, r.dwd, N * K, K, TW_NF_EXACT, "dwd");
    assert_int_equal(bad, 0);
    free(y);
    free(dx);
    free(dwg);
    free(dwu);
    free(dwd);
    twell_train_state_destroy(ts);
    twell_plan_destroy(plan);
    twell_ctx_destroy(ctx);
    tw_nf_ref_free(&r);
    tw_nf_free(&d);
}

static void test_nonfinite_train(void **state) {
    (void)state;
    for (int dt = 0; dt < 2; dt++)
        for (int w = 0; w < TW_NF_COUNT; w++)
            nf_train_case((twell_dtype)dt, (tw_nf_where)w);
}

/* The rule itself: the canonical NaN whatever the NaN's sign and payload; +Inf active; -Inf,
 * ±0 and negatives inactive; a rounded-to-0 positive inactive. */
static void test_nonfinite_rule(void **state) {
    (void)state;
    for (int dt = 0; dt < 2; dt++) {
        const twell_dtype t = (twell_dtype)dt;
        const uint16_t nan = tw_half_nan(t);
        assert_int_equal(tw_half_act(t, NAN), nan);
        assert_int_equal(tw_half_act(t, -NAN), nan);
        assert_int_equal(tw_half_act(t, tw_bits_f32(0xffc00123u)), nan);
        assert_int_equal(tw_half_act(t, INFINITY), t == TWELL_DTYPE_BF16 ? 0x7f80 : 0x7c00);
        assert_int_equal(tw_half_act(t, -INFINITY), 0);
        assert_int_equal(tw_half_act(t, -0.0f), 0);
        assert_int_equal(tw_half_act(t, -1.0f), 0);
        assert_true(tw_half_active(nan));
        assert_true(tw_half_slot_ok(t, nan));
        assert_false(tw_half_slot_ok(t, (uint16_t)(nan | 0x8000u)));
        assert_false(tw_half_slot_ok(t, (uint16_t)(nan + 1u)));
        assert_true(isnan(tw_sign_nan(NAN)));
        assert_true(tw_sign_nan(-0.0f) == 0.0f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nonfinite_rule),
        cmocka_unit_test(test_nonfinite_infer),
        cmocka_unit_test(test_nonfinite_train),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
