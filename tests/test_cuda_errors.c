/* test_cuda_errors.c — CUDA driver error mapping and message format, the CPU fallback of AUTO when
 * no driver or device is usable, and the packed-output checker's rule (no GPU needed).
 * labels: unit */
#include "cuda_driver.h"
#include "half.h"
#include "pack_check.h"
#include "plan_cuda.h"
#include "twell_format.h"
#include "twellrt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tw_cpu.h"
#include "tw_gpu.h"

static void test_cuda_errors_status_mapping(void **state) {
    (void)state;
    assert_int_equal(tw_cu_status_of(0), TWELL_OK);
    assert_int_equal(tw_cu_status_of(TW_CUDA_ERROR_OUT_OF_MEMORY), TWELL_ERR_NO_MEMORY);
    assert_int_equal(tw_cu_status_of(TW_CUDA_ERROR_NO_DEVICE), TWELL_ERR_NO_DEVICE);
    assert_int_equal(tw_cu_status_of(TW_CUDA_ERROR_INVALID_DEVICE), TWELL_ERR_NO_DEVICE);
    const int cuda_codes[] = {1, 3, 200, 201, 209, 218, 400, 500, 700, 719, 999, 12345};
    for (size_t i = 0; i < sizeof cuda_codes / sizeof cuda_codes[0]; i++)
        if (tw_cu_status_of(cuda_codes[i]) != TWELL_ERR_CUDA)
            fail_msg("code %d maps to %s, want TWELL_ERR_CUDA", cuda_codes[i],
                     twell_status_name(tw_cu_status_of(cuda_codes[i])));
}

static void test_cuda_errors_names(void **state) {
    (void)state;
    assert_string_equal(tw_cu_result_name(200), "CUDA_ERROR_INVALID_IMAGE");
    assert_string_equal(tw_cu_result_name(2), "CUDA_ERROR_OUT_OF_MEMORY");
    assert_string_equal(tw_cu_result_name(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
    assert_non_null(strstr(tw_cu_result_name(123456), "CUDA_ERROR_"));
}

static void test_cuda_errors_message_format(void **state) {
    (void)state;
    twell_ctx *ctx = tw_test_cpu_ctx(1);
    assert_int_equal(tw_cu_fail(ctx, "cuModuleLoadData", 200), TWELL_ERR_CUDA);
    const char *m = twell_ctx_errmsg(ctx);
    /* "<call>: <NAME> (<code>)", optionally followed by the driver's description */
    if (strncmp(m, "cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE (200)", 48) != 0)
        fail_msg("message \"%s\"", m);
    assert_int_equal(tw_cu_fail(ctx, "cuMemAlloc_v2", 2), TWELL_ERR_NO_MEMORY);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)"));
    /* success leaves the previous message alone */
    assert_int_equal(tw_cu_fail(ctx, "cuInit", 0), TWELL_OK);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "cuMemAlloc_v2"));
    twell_ctx_destroy(ctx);
}

typedef struct {
    char last[512];
    int calls;
} ce_log;

static void ce_log_fn(void *user, twell_log_level level, const char *msg) {
    (void)level;
    ce_log *l = user;
    snprintf(l->last, sizeof l->last, "%s", msg);
    l->calls++;
}

static void test_cuda_errors_auto_falls_back(void **state) {
    (void)state;
    ce_log log;
    memset(&log, 0, sizeof log);
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.log = ce_log_fn;
    o.log_user = &log;
    o.log_level = TWELL_LOG_INFO;
    o.cpu_threads = 1;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    int loadable = tw_cu_load(NULL) == TWELL_OK;
    int devices = 0;
    if (loadable)
        (void)tw_cu_device_count(NULL, &devices);
    if (devices > 0) {
        /* a machine with a GPU: AUTO picks it and names it */
        assert_int_equal(twell_ctx_backend(ctx), TWELL_BACKEND_CUDA);
        assert_non_null(strstr(twell_ctx_device_name(ctx), "cuda:0 "));
        assert_non_null(strstr(twell_ctx_device_name(ctx), " SMs)"));
    } else {
        if (tw_gpu_required())
            fail_msg("TWELL_REQUIRE_GPU=1, but no CUDA device is usable (%s)", log.last);
        assert_int_equal(twell_ctx_backend(ctx), TWELL_BACKEND_CPU);
        assert_non_null(strstr(twell_ctx_device_name(ctx), "cpu"));
        /* the reason reaches the log at INFO */
        assert_true(log.calls >= 1);
        if (!strstr(log.last, "CUDA not used"))
            fail_msg("log said \"%s\"", log.last);
        if (!loadable && !strstr(log.last, "libcuda.so.1"))
            fail_msg("log does not name libcuda.so.1: \"%s\"", log.last);
    }
    twell_ctx_destroy(ctx);

    /* CUDA asked for explicitly on a machine without one: NO_DEVICE, no context. */
    if (devices == 0) {
        o.backend = TWELL_BACKEND_CUDA;
        ctx = (twell_ctx *)&log; /* must be reset to NULL */
        assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_ERR_NO_DEVICE);
        assert_null(ctx);
    }
}

static void test_cuda_errors_cpu_ctx_has_no_device_helpers(void **state) {
    (void)state;
    twell_ctx *ctx = tw_test_cpu_ctx(1);
    void *p = (void *)&ctx;
    assert_int_equal(tw_cuda_malloc(ctx, 16, &p), TWELL_ERR_UNSUPPORTED);
    assert_null(p);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "not a CUDA context"));
    int host = 5;
    /* a CPU context without a loaded driver cannot classify pointers */
    int k = tw_cuda_pointer_kind(ctx, &host);
    assert_true(k == -1 || k == 0);
    tw_cuda_free(ctx, NULL); /* no-op */
    twell_ctx_destroy(ctx);
}

static void test_cuda_errors_variant_names(void **state) {
    (void)state;
    assert_string_equal(tw_gp_variant_name(TW_GP_SIMT), "simt");
    assert_int_equal(tw_gp_variant_parse("sm90"), TW_GP_SM90);
    assert_int_equal(tw_gp_variant_parse("auto"), TW_GP_AUTO);
    assert_int_equal(tw_gp_variant_parse("wgmma"), -1);
}

/* ---- the packed-output checker ---- */

enum { PC_K = 64, PC_N = 256 };

typedef struct {
    twell_shape s;
    uint16_t x[PC_K];
    uint16_t w[PC_N * PC_K];
    uint32_t ref[PC_N / 8];
} pc_fixture;

/* One bf16 row; column j's weights give a clearly positive, clearly negative or (j = 5) an
 * ambiguous pre-activation: 1 - 1 + 2^-20, far inside the fp32 order-error bound. */
static void pc_make(pc_fixture *f) {
    memset(f, 0, sizeof *f);
    twell_shape_init(&f->s, PC_K, PC_N);
    for (int k = 0; k < PC_K; k++)
        f->x[k] = tw_f32_to_bf16(1.0f);
    uint16_t vals[PC_N];
    for (int j = 0; j < PC_N; j++) {
        uint16_t *wr = f->w + (size_t)j * PC_K;
        float sum = 0.0f;
        if (j == 5) {
            wr[0] = tw_f32_to_bf16(1.0f);
            wr[1] = tw_f32_to_bf16(-1.0f);
            wr[2] = tw_f32_to_bf16(0x1p-20f);
            sum = 0x1p-20f;
        } else {
            float v = (j % 11 == 0) ? 0.25f * (float)(j % 7 + 1) : -0.5f;
            wr[3] = tw_f32_to_bf16(v);
            sum = tw_bf16_to_f32(wr[3]);
        }
        vals[j] = sum > 0.0f ? tw_f32_to_bf16(sum) : 0;
    }
    tw_pack_row_tile(vals, 256, 8, 0, f->ref);
}

static void pc_run(const pc_fixture *f, const uint32_t *got, tw_pack_check *r) {
    size_t row = 0;
    tw_pack_check_rows(&f->s, f->x, f->w, &row, 1, f->ref, got, r);
}

static void test_cuda_errors_pack_check_rule(void **state) {
    (void)state;
    pc_fixture *f = malloc(sizeof *f);
    assert_non_null(f);
    pc_make(f);
    uint32_t got[PC_N / 8];
    tw_pack_check r;

    memcpy(got, f->ref, sizeof got);
    pc_run(f, got, &r);
    assert_int_equal(r.tiles, 1);
    assert_int_equal(r.tiles_exact, 1);
    assert_int_equal(r.tiles_bad, 0);
    assert_true(r.entries == f->ref[0]);
    assert_true(r.max_rel_err < 1.0 / 256);

    /* dropping the ambiguous column 5 is a legitimate fp32-order difference */
    assert_int_equal(f->ref[1] & 0xffffu, 0);
    assert_int_equal(f->ref[2] & 0xffffu, 5);
    memset(got, 0, sizeof got);
    got[0] = f->ref[0] - 1;
    got[1] = f->ref[1];
    for (uint32_t i = 3; i <= f->ref[0]; i++)
        got[i - 1] = f->ref[i];
    pc_run(f, got, &r);
    if (r.tiles_tolerated != 1)
        fail_msg("tolerated %zu bad %zu: %s", r.tiles_tolerated, r.tiles_bad, r.first_bad);
    assert_int_equal(r.flips, 1);

    /* dropping a certainly active column is not */
    memcpy(got, f->ref, sizeof got);
    got[0] = f->ref[0] - 1;
    got[1] = f->ref[2];
    for (uint32_t i = 3; i <= f->ref[0]; i++)
        got[i - 1] = f->ref[i];
    got[f->ref[0]] = 0;
    pc_run(f, got, &r);
    assert_int_equal(r.tiles_bad, 1);
    assert_non_null(strstr(r.first_bad, "row 0 tile 0"));

    /* a value one bf16 unit off a clearly positive, exactly representable sum is wrong */
    memcpy(got, f->ref, sizeof got);
    got[3] += 1u << 16;
    pc_run(f, got, &r);
    assert_int_equal(r.tiles_bad, 1);
    assert_non_null(strstr(r.first_bad, "value"));

    /* a poisoned (never written) word and a non-zero unused slot are caught */
    memcpy(got, f->ref, sizeof got);
    got[0] = 0xA5A5A5A5u;
    pc_run(f, got, &r);
    assert_int_equal(r.tiles_bad, 1);
    memcpy(got, f->ref, sizeof got);
    got[PC_N / 8 - 1] = 0x3f800001u;
    pc_run(f, got, &r);
    assert_int_equal(r.tiles_bad, 1);
    free(f);
}

static void test_cuda_errors_sample_rows(void **state) {
    (void)state;
    size_t rows[128];
    assert_int_equal(tw_pack_sample_rows(7, 128, rows), 7);
    assert_int_equal(rows[6], 6);
    size_t n = tw_pack_sample_rows(65536 + 77, 128, rows);
    assert_true(n > 100 && n <= 128);
    assert_int_equal(rows[0], 0);
    assert_int_equal(rows[1], 1);
    assert_int_equal(rows[n - 1], 65536 + 76);
    for (size_t i = 1; i < n; i++)
        if (rows[i] <= rows[i - 1])
            fail_msg("rows not ascending at %zu: %zu then %zu", i, rows[i - 1], rows[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_errors_status_mapping),
        cmocka_unit_test(test_cuda_errors_names),
        cmocka_unit_test(test_cuda_errors_message_format),
        cmocka_unit_test(test_cuda_errors_auto_falls_back),
        cmocka_unit_test(test_cuda_errors_cpu_ctx_has_no_device_helpers),
        cmocka_unit_test(test_cuda_errors_variant_names),
        cmocka_unit_test(test_cuda_errors_pack_check_rule),
        cmocka_unit_test(test_cuda_errors_sample_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
