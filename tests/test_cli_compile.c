/* test_cli_compile.c — `twell compile` options that need NVRTC to check (no GPU): --cold given a
 * value means that value (0 looks up, 1 compiles) or is a usage error, and the times it prints,
 * hits included, are never negative.
 * labels: nvrtc */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "nvrtc.h"
#include "tw_case_dir.h"
#include "tw_gpu.h"
#include "tw_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char tw_args[] = "gate_pack_simt --K 64 --N 256 --T 128 --C 2 --dtype bf16";

/* `twell compile <tw_args> <extra>` with TWELL_CACHE_DIR=dir, stderr merged into out. */
static int tw_compile(const char *dir, const char *extra, char *out, size_t n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "TWELL_CACHE_DIR='%s' '%s' compile %s %s 2>&1", dir, TWELL_TOOL_PATH,
             tw_args, extra);
    return tw_test_run(cmd, out, n);
}

static void tw_expect(const char *dir, const char *extra, const char *says) {
    static char out[16384];
    int rc = tw_compile(dir, extra, out, sizeof out);
    if (rc != 0 || !strstr(out, says))
        fail_msg("twell compile %s: exit %d (want 0), output lacks \"%s\":\n%s", extra, rc, says,
                 out);
}

static void test_cli_compile_cold_values(void **state) {
    (void)state;
    char dir[1024];
    tw_test_case_dir("test_cli_compile", "cold", dir, sizeof dir);
    tw_expect(dir, "", " miss ");
    tw_expect(dir, "", " hit ");
    tw_expect(dir, "--cold", " miss ");
    tw_expect(dir, "--cold=1", " miss ");
    tw_expect(dir, "--cold=0", " hit "); /* it compiled every time before */
    tw_expect(dir, "--cold=1 --cold=0", " hit ");
    static const char *const bad[] = {"--cold=2", "--cold=yes", "--cold=", "--cold=-1",
                                      "--cold=01x"};
    static char out[16384];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = tw_compile(dir, bad[i], out, sizeof out);
        if (rc != 2 || !strstr(out, "for --cold (0 or 1)"))
            fail_msg("twell compile %s: exit %d (want 2), output:\n%s", bad[i], rc, out);
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' compile --help", TWELL_TOOL_PATH);
    assert_int_equal(tw_test_run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "--cold=0 looks up as usual"));
}

/* Every "<number> ms" of the output is >= 0 (a hit once printed "lookup + read -4.127 ms"). */
static void tw_expect_no_negative_ms(const char *out) {
    for (const char *p = strstr(out, " ms"); p; p = strstr(p + 1, " ms")) {
        const char *q = p;
        while (q > out && strchr("0123456789.", q[-1]))
            q--;
        if (q > out && q < p && q[-1] == '-')
            fail_msg("a negative time in:\n%s", out);
    }
}

static void test_cli_compile_times_not_negative(void **state) {
    (void)state;
    char dir[1024];
    tw_test_case_dir("test_cli_compile", "times", dir, sizeof dir);
    static char out[65536];
    assert_int_equal(tw_compile(dir, "", out, sizeof out), 0);
    tw_expect_no_negative_ms(out);
    /* Each repeat is a fresh context: its first render is the slow one, the hit is not. */
    int rc = tw_compile(dir, "--repeat 25", out, sizeof out);
    if (rc != 0)
        fail_msg("exit %d:\n%s", rc, out);
    tw_expect_no_negative_ms(out);
    assert_non_null(strstr(out, " hit "));
    assert_non_null(strstr(out, "lookup + read "));
    assert_null(strstr(out, " miss "));
}

int main(void) {
    if (tw_nvrtc_load(NULL) != TWELL_OK) {
        char what[1024];
        snprintf(what, sizeof what, "NVRTC cannot be loaded: %s", tw_nvrtc_why_missing());
        tw_gpu_unavailable("test_cli_compile", what);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_compile_cold_values),
        cmocka_unit_test(test_cli_compile_times_not_negative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
