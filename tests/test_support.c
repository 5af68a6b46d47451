/* test_support.c — the shared test helpers that decide pass or fail themselves: the GPU tests'
 * row-error check (on host data, so no device is needed), the tool runner's exit codes, and the
 * GPU fixture's answer to a missing device (skip, or fail where TWELL_REQUIRE_GPU=1).
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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static char ts_self[4096];

/* Runs this executable as the GPU fixture's child (main's "gpu-open") with CUDA_VISIBLE_DEVICES
 * empty, so no device is usable even on a GPU machine (a CUDA start that fails), and
 * TWELL_REQUIRE_GPU set to req (NULL: unset). Returns the exit code; out gets stderr. */
static int ts_gpu_child(const char *req, char *out, size_t n) {
    char cmd[8192];
    if (req)
        snprintf(cmd, sizeof cmd, "CUDA_VISIBLE_DEVICES= TWELL_REQUIRE_GPU='%s' '%s' gpu-open 2>&1",
                 req, ts_self);
    else
        snprintf(cmd, sizeof cmd,
                 "env -u TWELL_REQUIRE_GPU CUDA_VISIBLE_DEVICES= '%s' gpu-open 2>&1", ts_self);
    return tw_test_run(cmd, out, n);
}

/* A gpu test that cannot get a device skips (77) by default, but fails (exit 1, saying why)
 * where TWELL_REQUIRE_GPU=1 says the machine has a GPU: a broken CUDA start must not pass. */
static void test_support_gpu_required_fails_without_device(void **state) {
    (void)state;
    char out[2048];
    int rc = ts_gpu_child(NULL, out, sizeof out);
    if (rc != 77 || !strstr(out, "ts_child: SKIPPED, no usable CUDA device ("))
        fail_msg("TWELL_REQUIRE_GPU unset: exit %d (want 77):\n%s", rc, out);
    rc = ts_gpu_child("0", out, sizeof out);
    if (rc != 77 || !strstr(out, "SKIPPED"))
        fail_msg("TWELL_REQUIRE_GPU=0: exit %d (want 77):\n%s", rc, out);
    rc = ts_gpu_child("1", out, sizeof out);
    if (rc != 1 || !strstr(out, "ts_child: FAILED, no usable CUDA device (") ||
        !strstr(out, "TWELL_REQUIRE_GPU=1 requires it"))
        fail_msg("TWELL_REQUIRE_GPU=1: exit %d (want 1, FAILED):\n%s", rc, out);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "gpu-open")) {
        twell_ctx *ctx = tw_gpu_open_or_skip("ts_child");
        twell_ctx_destroy(ctx);
        fprintf(stderr, "ts_child: got a device\n");
        return 0;
    }
    ssize_t n = readlink("/proc/self/exe", ts_self, sizeof ts_self - 1);
    if (n <= 0) {
        fprintf(stderr, "test_support: cannot find its own executable\n");
        return 1;
    }
    ts_self[n] = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_support_max_row_err),
        cmocka_unit_test(test_support_tool_exit_codes),
        cmocka_unit_test(test_support_gpu_required_fails_without_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
