/* test_support.c — the shared test helpers that decide pass or fail themselves: the GPU tests'
 * row-error check (on host data, so no device is needed) and the tool runner's exit codes.
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "half.h"
#include "tw_gpu.h"
#include "tw_run.h"

#include <math.h>
#include <stdio.h>

#define TS_K 8

/* Rows of K bf16 values: row r holds r + 1 + k / 8. */
static void ts_fill(uint16_t *v, size_t rows) {
    for (size_t r = 0; r < rows; r++)
        for (size_t k = 0; k < TS_K; k++)
            v[r * TS_K + k] = tw_f32_to_half(TWELL_DTYPE_BF16, (float)r + 1.0f + (float)k / 8.0f);
}

static void test_support_max_row_err(void **state) {
    (void)state;
    uint16_t got[4 * TS_K], ref[2 * TS_K];
    ts_fill(got, 4);
    const size_t rows[2] = {1, 3};
    ts_fill(ref, 2);
    /* got rows 1 and 3 against ref rows 0 and 1: 1 and 2 above them per value; row 3 is worse. */
    size_t wr = 99;
    double e = tw_gpu_max_row_err(TWELL_DTYPE_BF16, TS_K, got, rows, 2, ref, &wr);
    assert_int_equal(wr, 3);
    double num = 0.0, den = 0.0;
    for (size_t k = 0; k < TS_K; k++) {
        double b = tw_half_to_f32(TWELL_DTYPE_BF16, ref[TS_K + k]);
        num += 4.0, den += b * b;
    }
    if (fabs(e - sqrt(num / den)) > 1e-12)
        fail_msg("row error %.17g, want %.17g", e, sqrt(num / den));
    /* Identical rows: 0, first row reported. */
    const size_t same[2] = {0, 1};
    assert_true(tw_gpu_max_row_err(TWELL_DTYPE_BF16, TS_K, got, same, 2, ref, &wr) == 0.0);
    assert_int_equal(wr, 0);
    /* A NaN row stays the worst, whatever rows come after it. */
    got[0 * TS_K + 2] = 0x7fc0; /* bf16 NaN */
    e = tw_gpu_max_row_err(TWELL_DTYPE_BF16, TS_K, got, same, 2, ref, &wr);
    assert_true(isinf(e) && e > 0.0);
    assert_int_equal(wr, 0);
}

static void test_support_tool_exit_codes(void **state) {
    (void)state;
    char out[256];
    assert_int_equal(tw_test_run("printf 'a b'; exit 3", out, sizeof out), 3);
    assert_string_equal(out, "a b");
    assert_int_equal(tw_test_run("printf 1234567890", out, 5), 0);
    assert_string_equal(out, "1234"); /* truncated to the buffer, NUL-terminated */
    assert_int_equal(tw_test_tool("--help", out, sizeof out), 0);
    assert_true(out[0] != '\0');
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_support_max_row_err),
        cmocka_unit_test(test_support_tool_exit_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
