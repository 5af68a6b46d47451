/* test_train_workspace.c — the training workspace API on the CPU backend (and its argument
 * checks, which do not need a device): twell_train_workspace_size gives the sparse state's
 * estimate for every path there, growing with M and the density; twell_train_state_set_workspace
 * is a CUDA-only feature (TWELL_ERR_UNSUPPORTED); bad arguments are rejected with *bytes = 0.
 * The memory probes (the dense workspace held, its releases, the peak; a plan's accumulated
 * inference needs) give their neutral values off CUDA.
 * labels: unit */
#include "twellrt.h"
#include "twellrt_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "tw_cpu.h"

static void test_train_workspace_size_cpu(void **st) {
    (void)st;
    twell_ctx *ctx = tw_test_cpu_ctx(1);
    twell_shape s;
    twell_shape_init(&s, 512, 1024);
    twell_plan *plan = NULL;
    assert_int_equal(twell_plan_create(ctx, &s, &plan), TWELL_OK);
    size_t sp = 0, de = 0, au = 0;
    assert_int_equal(twell_train_workspace_size(plan, 1000, 20.0, TWELL_PATH_SPARSE, &sp),
                     TWELL_OK);
    assert_int_equal(twell_train_workspace_size(plan, 1000, 20.0, TWELL_PATH_DENSE, &de), TWELL_OK);
    assert_int_equal(twell_train_workspace_size(plan, 1000, 20.0, TWELL_PATH_AUTO, &au), TWELL_OK);
    /* the CPU backend has one path: every path gives the sparse estimate */
    assert_int_equal(sp, de);
    assert_int_equal(sp, au);
    /* at least the packed gate and U (8 bytes per TwELL word) plus 32 bytes per active value */
    assert_true(sp >= 1000u * (1024u / 8u) * 8u + 1000u * 20u * 32u);
    size_t more_rows = 0, denser = 0;
    assert_int_equal(twell_train_workspace_size(plan, 2000, 20.0, TWELL_PATH_SPARSE, &more_rows),
                     TWELL_OK);
    assert_int_equal(twell_train_workspace_size(plan, 1000, 200.0, TWELL_PATH_SPARSE, &denser),
                     TWELL_OK);
    assert_true(more_rows > sp);
    assert_true(denser > sp);
    /* bad arguments: *bytes = 0 and a message */
    size_t b = 123;
    assert_int_equal(twell_train_workspace_size(plan, 0, 1.0, TWELL_PATH_AUTO, &b),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(b, 0);
    b = 123;
    assert_int_equal(twell_train_workspace_size(plan, 10, -1.0, TWELL_PATH_AUTO, &b),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(b, 0);
    assert_int_equal(twell_train_workspace_size(plan, 10, 2000.0, TWELL_PATH_AUTO, &b),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_train_workspace_size(plan, 10, 1.0, (twell_path)7, &b),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_train_workspace_size(plan, 10, 1.0, TWELL_PATH_AUTO, NULL),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_train_workspace_size(NULL, 10, 1.0, TWELL_PATH_AUTO, &b),
                     TWELL_ERR_INVALID_ARG);
    twell_plan_destroy(plan);
    twell_ctx_destroy(ctx);
}

static void test_train_workspace_set_cpu(void **st) {
    (void)st;
    twell_ctx *ctx = tw_test_cpu_ctx(1);
    twell_shape s;
    twell_shape_init(&s, 64, 256);
    twell_plan *plan = NULL;
    twell_train_state *state = NULL;
    assert_int_equal(twell_plan_create(ctx, &s, &plan), TWELL_OK);
    assert_int_equal(twell_train_state_create(plan, &state), TWELL_OK);
    static unsigned char buf[4096];
    assert_int_equal(twell_train_state_set_workspace(state, buf, sizeof buf),
                     TWELL_ERR_UNSUPPORTED);
    assert_non_null(twell_ctx_errmsg(ctx));
    assert_int_equal(twell_train_state_set_workspace(NULL, buf, sizeof buf), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_train_state_bytes(state), 0);
    twell_train_state_destroy(state);
    twell_plan_destroy(plan);
    twell_ctx_destroy(ctx);
}

static void test_train_workspace_probes_cpu(void **st) {
    (void)st;
    twell_ctx *ctx = tw_test_cpu_ctx(1);
    twell_shape s;
    twell_shape_init(&s, 64, 256);
    twell_plan *plan = NULL;
    twell_train_state *state = NULL;
    assert_int_equal(twell_plan_create(ctx, &s, &plan), TWELL_OK);
    assert_int_equal(twell_train_state_create(plan, &state), TWELL_OK);
    size_t ws = 1, peak = 1;
    unsigned long rel = 1;
    assert_int_equal(tw_test_control(TW_TC_TD_WORKSPACE_BYTES, state, &ws), TWELL_OK);
    assert_int_equal(tw_test_control(TW_TC_TD_RELEASES, state, &rel), TWELL_OK);
    assert_int_equal(tw_test_control(TW_TC_TD_PEAK_BYTES, state, 1, &peak), TWELL_OK);
    assert_int_equal(ws, 0);
    assert_int_equal(rel, 0);
    assert_int_equal(peak, twell_train_state_bytes(state));
    assert_int_equal(tw_test_control(TW_TC_TD_PEAK_BYTES, NULL, 0, &peak), TWELL_ERR_INVALID_ARG);
    uint32_t acc[4] = {1, 1, 1, 1};
    int grows[2] = {1, 1};
    assert_int_equal(tw_test_control(TW_TC_FFN_NEEDS, plan, acc, grows), TWELL_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(acc[i], 0);
    assert_int_equal(grows[0], 0);
    assert_int_equal(grows[1], 0);
    twell_train_state_destroy(state);
    twell_plan_destroy(plan);
    twell_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_workspace_size_cpu),
        cmocka_unit_test(test_train_workspace_set_cpu),
        cmocka_unit_test(test_train_workspace_probes_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
