/* test_shipped.c — the shipped static library (built without TWELL_PROBES, runtime/core/probe.h):
 * tw_test_control answers TWELL_ERR_UNSUPPORTED for every operation, and the public calls still
 * work (CPU backend, against the reference). Links libtwellrt.a itself, not the test library.
 * labels: unit */
#include "cpu_ref.h"
#include "synth.h"
#include "twellrt.h"
#include "twellrt_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Every code of every range, and codes outside them: no probe exists, so none is known. */
static void test_shipped_test_control_unsupported(void **state) {
    (void)state;
    static const int ranges[][2] = {
        {TW_TC_CUDA_FIRST, TW_TC_CUDA_LAST},   {TW_TC_GP_FIRST, TW_TC_GP_LAST},
        {TW_TC_FFN_FIRST, TW_TC_FFN_LAST},     {TW_TC_DENSE_FIRST, TW_TC_DENSE_LAST},
        {TW_TC_SMALL_FIRST, TW_TC_SMALL_LAST}, {TW_TC_TRAIN_FIRST, TW_TC_TRAIN_LAST},
        {TW_TC_TD_FIRST, TW_TC_TD_LAST},
    };
    size_t n = 0;
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
        for (int op = ranges[r][0]; op < ranges[r][1]; op++, n++)
            assert_int_equal(tw_test_control(op, (void *)NULL), TWELL_ERR_UNSUPPORTED);
    assert_true(n > 50);
    assert_int_equal(tw_test_control(0, (void *)NULL), TWELL_ERR_UNSUPPORTED);
    assert_int_equal(tw_test_control(-1, (void *)NULL), TWELL_ERR_UNSUPPORTED);
}

/* A gate-pack and an inference through the public API on the CPU backend equal the reference
 * bytes (outputs poisoned first; awkward M, skewed data with overflowing row-tiles). */
static void test_shipped_cpu_calls_work(void **state) {
    (void)state;
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 2;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    twell_shape s;
    twell_shape_init(&s, 64, 512);
    s.T = 128;
    s.C = 4;
    s.gated = 1;
    tw_synth_params p = tw_synth_params_default();
    p.M = 33;
    p.K = s.K;
    p.N = s.N;
    p.dtype = s.dtype;
    p.gated = 1;
    p.dist = TW_SYNTH_SKEWED;
    p.nnz = 20;
    p.heavy_frac = 0.2;
    p.seed = 25;
    tw_synth_ffn *f = NULL;
    assert_int_equal(tw_synth_create(NULL, &p, &f), TWELL_OK);
    twell_plan *plan = NULL;
    assert_int_equal(twell_plan_create(ctx, &s, &plan), TWELL_OK);
    size_t M = p.M, pb = twell_packed_bytes(&s, M), yb = M * s.K * 2u;
    uint32_t *packed = malloc(pb), *packed_ref = malloc(pb);
    uint16_t *y = malloc(yb), *y_ref = malloc(yb);
    assert_non_null(packed && packed_ref && y && y_ref);
    memset(packed, 0xa5, pb);
    memset(y, 0xa5, yb);
    const uint16_t *wp = tw_synth_pack_weight(f);
    assert_int_equal(twell_gate_pack(plan, M, f->x, wp, packed, NULL), TWELL_OK);
    assert_int_equal(twell_ffn_infer(plan, M, f->x, packed, f->wg, f->wu, f->wd, y, NULL),
                     TWELL_OK);
    assert_int_equal(tw_gate_pack_ref(NULL, &s, M, f->x, wp, packed_ref), TWELL_OK);
    assert_int_equal(tw_ffn_infer_ref(NULL, &s, M, f->x, packed_ref, f->wg, f->wu, f->wd, y_ref),
                     TWELL_OK);
    assert_memory_equal(packed, packed_ref, pb);
    assert_memory_equal(y, y_ref, yb);
    free(packed);
    free(packed_ref);
    free(y);
    free(y_ref);
    twell_plan_destroy(plan);
    tw_synth_destroy(f);
    twell_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_test_control_unsupported),
        cmocka_unit_test(test_shipped_cpu_calls_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
