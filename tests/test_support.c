/* test_support.c — the shared test helpers that decide pass or fail themselves: the GPU tests'
 * row-error check (on host data, so no device is needed), the GPU inference fixture's host side
 * (counts, checked rows and their reference, case names; on CPU data), the tool runner's exit
 * codes, and the GPU fixture's answer to a missing device (skip, or fail where
 * TWELL_REQUIRE_GPU=1).
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cpu_ref.h"
#include "half.h"
#include "internal.h"
#include "tw_cpu.h"
#include "tw_gpu.h"
#include "tw_gpu_infer.h"
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

/* The GPU inference fixture's host side on data the CPU packed (gi_data without device buffers):
 * gi_count against a direct count, gi_check_rows (every row, then a sample with the overflowing
 * rows), gi_reference one row at a time, gi_all_rows_err and gi_expect against the reference of
 * all rows, and the case names gi_case_tests registers. */
static void test_support_infer_fixture_host(void **state) {
    (void)state;
    twell_ctx *ctx = tw_test_cpu_ctx(1);
    const gi_case c = {300, 64, 256, 64, 8, BF, 1, SKW, 12, 1};
    gi_data d;
    memset(&d, 0, sizeof d);
    d.ctx = ctx, d.s = gi_shape(&c), d.M = c.M;
    const twell_shape *s = &d.s;
    assert_true(s->T == 64 && s->C == 8 && s->gated == 1 && s->K == 64 && s->N == 256);
    d.f = gi_synth(ctx, s, c.M, c.dist, c.nnz, 7);
    size_t words = twell_packed_words(s, c.M), row_words = s->N / s->C, W = s->T / s->C;
    d.rows_cap = c.M + GI_SPARE_ROWS;
    d.packed = malloc(words * 4);
    d.got = malloc(c.M * s->K * 2u);
    d.rows = malloc(d.rows_cap * sizeof *d.rows);
    uint16_t *all = malloc(c.M * s->K * 2u);
    assert_true(d.packed && d.got && d.rows && all);
    TW_GPU_OK(ctx,
              tw_gate_pack_ref(ctx->pool, s, c.M, d.f->x, tw_synth_pack_weight(d.f), d.packed));
    TW_GPU_OK(
        ctx, tw_ffn_infer_ref(ctx->pool, s, c.M, d.f->x, d.packed, d.f->wg, d.f->wu, d.f->wd, all));

    gi_count(&d);
    uint64_t total = 0;
    size_t ovf = 0;
    for (size_t m = 0; m < c.M; m++)
        for (size_t t = 0; t < s->N / s->T; t++) {
            total += d.packed[m * row_words + t * W];
            ovf += d.packed[m * row_words + t * W] > W - 1;
        }
    printf("# fixture on CPU data: %llu active, %zu overflowing row-tiles in %llu units\n",
           (unsigned long long)total, ovf, (unsigned long long)d.ovf_units);
    assert_true(total > 0 && ovf > 0); /* skewed data: heavy rows overflow W - 1 = 7 slots */
    assert_true(d.total == total && d.ovf_tiles == ovf);
    assert_true(d.ovf_units >= 1 && d.ovf_units <= 2); /* 2 row-blocks of 256, one column block */

    /* every row: the reference of all rows, bit for bit; the error of that reference is 0 */
    gi_check_rows(&d, 1000, 96, 16);
    assert_int_equal(d.nrows, c.M);
    for (size_t i = 0; i < c.M; i++)
        assert_int_equal(d.rows[i], i);
    assert_int_equal(d.ovf_checked, ovf);
    assert_memory_equal(d.ref, all, c.M * s->K * 2u);
    memcpy(d.got, all, c.M * s->K * 2u);
    size_t wr = 99;
    assert_true(gi_all_rows_err(ctx, s, c.M, d.f, d.packed, d.got, &wr) == 0.0);
    gi_expect(&d, 9, "all rows");
    gi_expect_same_y(all, d.got, c.M * s->K, s->K, "");

    /* a sample of 20 plus up to 16 overflowing rows; their reference rows are the same rows */
    gi_check_rows(&d, 100, 20, 16);
    assert_true(d.nrows > 20 && d.nrows <= 36);
    size_t ovf_rows = 0;
    for (size_t i = 0; i < d.nrows; i++) {
        assert_true(d.rows[i] < c.M);
        int o = 0;
        for (size_t t = 0; t < s->N / s->T; t++)
            o |= d.packed[d.rows[i] * row_words + t * W] > W - 1;
        ovf_rows += (size_t)o;
        assert_memory_equal(d.ref + i * s->K, all + d.rows[i] * s->K, s->K * 2u);
    }
    assert_true(ovf_rows >= 16 && d.ovf_checked >= 16);
    /* rows added one at a time (the chunk-boundary rows of the tests) */
    size_t from = d.nrows;
    gi_add_row(&d, 255);
    gi_reference(&d, d.nrows - 1);
    gi_add_row(&d, 256);
    gi_add_row(&d, 299);
    gi_reference(&d, from + 1);
    assert_int_equal(d.nrows, from + 3);
    assert_memory_equal(d.ref + from * s->K, all + 255 * s->K, s->K * 2u);
    assert_memory_equal(d.ref + (from + 1) * s->K, all + 256 * s->K, s->K * 2u);
    assert_memory_equal(d.ref + (from + 2) * s->K, all + 299 * s->K, s->K * 2u);
    gi_expect(&d, 12, "sampled rows");

    /* one value off by one ulp: a non-zero error in that row */
    d.got[299 * s->K + 5] ^= 1u;
    double e = gi_all_rows_err(ctx, s, c.M, d.f, d.packed, d.got, &wr);
    assert_true(e > 0.0 && e < gi_tol(BF));
    assert_int_equal(wr, 299);
    assert_true(gi_tol(BF) == 5e-3 && gi_tol(FP) == 1e-3);

    /* the names cmocka reports */
    const gi_case cases[2] = {c, {7, 512, 1024, 128, 2, FP, 0, UNI, 600, 1}};
    struct CMUnitTest tests[3];
    char names[2][GI_NAME];
    assert_int_equal(gi_case_tests(tests, 1, names, "t", cases, 2, test_support_max_row_err), 3);
    assert_string_equal(tests[1].name, "t_M300_K64_N256_T64_C8_bf16_gated_skewed");
    assert_string_equal(tests[2].name, "t_M7_K512_N1024_T128_C2_fp16_plain_uniform");
    assert_ptr_equal(tests[2].initial_state, &cases[1]);

    free(all);
    free(d.packed), free(d.got), free(d.rows), free(d.ref);
    tw_synth_destroy(d.f);
    twell_ctx_destroy(ctx);
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
        cmocka_unit_test(test_support_infer_fixture_host),
        cmocka_unit_test(test_support_tool_exit_codes),
        cmocka_unit_test(test_support_gpu_required_fails_without_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
