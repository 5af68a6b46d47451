/* test_ctx.c — versions, status tables, context lifecycle, backend selection, error messages and
 * the log callback.
 * labels: unit */
#include "internal.h"
#include "twellrt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tw_gpu.h"

typedef struct {
    int count[4];
    char last[512];
    twell_log_level last_level;
    int saw_cpu_note; /* an INFO message said the CPU backend is used */
} tc_log;

static void tc_log_fn(void *user, twell_log_level level, const char *msg) {
    tc_log *l = user;
    assert_true(level >= TWELL_LOG_DEBUG && level <= TWELL_LOG_ERROR);
    l->count[level]++;
    l->last_level = level;
    snprintf(l->last, sizeof l->last, "%s", msg);
    if (level == TWELL_LOG_INFO && strstr(msg, "CPU"))
        l->saw_cpu_note = 1;
}

static void test_ctx_version(void **state) {
    (void)state;
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", TWELL_VERSION_MAJOR, TWELL_VERSION_MINOR,
             TWELL_VERSION_PATCH);
    assert_string_equal(twell_version(), want);
    assert_int_equal(twell_version_number(), TWELL_VERSION_NUMBER);
    assert_int_equal(TWELL_VERSION_NUMBER,
                     TWELL_VERSION_MAJOR * 10000 + TWELL_VERSION_MINOR * 100 + TWELL_VERSION_PATCH);
}

static void test_ctx_status_tables(void **state) {
    (void)state;
    static const twell_status all[] = {
#define TC_LIST(name, code, msg) TWELL_##name,
        TWELL_STATUS_MAP(TC_LIST)
#undef TC_LIST
    };
    size_t n = sizeof all / sizeof all[0];
    assert_true(n >= 12);
    for (size_t i = 0; i < n; i++) {
        const char *name = twell_status_name(all[i]), *msg = twell_status_str(all[i]);
        assert_non_null(name);
        assert_non_null(msg);
        assert_true(strncmp(name, "TWELL_", 6) == 0);
        assert_string_not_equal(name, "TWELL_UNKNOWN_STATUS");
        assert_true(strlen(msg) > 0);
        for (size_t j = 0; j < i; j++) {
            assert_int_not_equal(all[i], all[j]);
            assert_string_not_equal(name, twell_status_name(all[j]));
            assert_string_not_equal(msg, twell_status_str(all[j]));
        }
    }
    assert_string_equal(twell_status_name(TWELL_OK), "TWELL_OK");
    assert_int_equal(TWELL_OK, 0);
    assert_string_equal(twell_status_name(TWELL_ERR_INVALID_ARG), "TWELL_ERR_INVALID_ARG");
    assert_string_equal(twell_status_name((twell_status)999), "TWELL_UNKNOWN_STATUS");
    assert_string_equal(twell_status_str((twell_status)-1), "unknown status");
    assert_string_equal(twell_backend_name(TWELL_BACKEND_CPU), "cpu");
    assert_string_equal(twell_backend_name(TWELL_BACKEND_CUDA), "cuda");
}

static void test_ctx_cpu_lifecycle(void **state) {
    (void)state;
    static const int threads[] = {1, 3};
    static const char *names[] = {"cpu (1 thread)", "cpu (3 threads)"};
    for (int i = 0; i < 2; i++) {
        twell_ctx_options o;
        twell_ctx_options_init(&o);
        o.backend = TWELL_BACKEND_CPU;
        o.cpu_threads = threads[i];
        twell_ctx *ctx = (twell_ctx *)(uintptr_t)1;
        assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
        assert_non_null(ctx);
        assert_int_equal(twell_ctx_backend(ctx), TWELL_BACKEND_CPU);
        assert_string_equal(twell_ctx_device_name(ctx), names[i]);
        assert_string_equal(twell_ctx_errmsg(ctx), "");
        twell_ctx_destroy(ctx);
    }
    twell_ctx_destroy(NULL); /* no-op */
    assert_string_equal(twell_ctx_errmsg(NULL), "no context");
}

static void test_ctx_defaults(void **state) {
    (void)state;
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    assert_int_equal(o.backend, TWELL_BACKEND_AUTO);
    assert_int_equal(o.device, 0);
    assert_null(o.cache_dir);
    assert_null(o.log);
    assert_int_equal(o.log_level, TWELL_LOG_WARN);
    assert_int_equal(o.cpu_threads, 0);
    assert_int_equal(o.cache_max_bytes, 0);
    assert_int_equal(o.tune_on_first_use, TWELL_SWITCH_DEFAULT);
    assert_int_equal(o.pdl, TWELL_SWITCH_DEFAULT);
    assert_null(o.template_dir);
    assert_null(o.nvrtc_library);
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(NULL, &ctx), TWELL_OK); /* NULL options: defaults */
    assert_non_null(ctx);
    twell_backend b = twell_ctx_backend(ctx);
    assert_true(b == TWELL_BACKEND_CPU || b == TWELL_BACKEND_CUDA);
    twell_ctx_destroy(ctx);
}

/* AUTO uses CUDA when a device is usable; here (no driver or no GPU) it falls back to the CPU and
 * says why at INFO. Explicit CUDA then fails with TWELL_ERR_NO_DEVICE and *out NULL. */
static void test_ctx_auto_fallback(void **state) {
    (void)state;
    tc_log log;
    memset(&log, 0, sizeof log);
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CUDA;
    o.log = tc_log_fn;
    o.log_user = &log;
    twell_ctx *ctx = (twell_ctx *)(uintptr_t)1;
    twell_status st = twell_ctx_create(&o, &ctx);
    if (st == TWELL_OK) {
        /* A machine with a GPU: AUTO must pick it too. */
        assert_int_equal(twell_ctx_backend(ctx), TWELL_BACKEND_CUDA);
        twell_ctx_destroy(ctx);
        o.backend = TWELL_BACKEND_AUTO;
        assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
        assert_int_equal(twell_ctx_backend(ctx), TWELL_BACKEND_CUDA);
        twell_ctx_destroy(ctx);
        return;
    }
    if (tw_gpu_required())
        fail_msg("TWELL_REQUIRE_GPU=1, but the CUDA context failed: %s", twell_status_name(st));
    assert_int_equal(st, TWELL_ERR_NO_DEVICE);
    assert_null(ctx);
    assert_true(log.count[TWELL_LOG_ERROR] >= 1); /* the reason went to the log */
    memset(&log, 0, sizeof log);
    o.backend = TWELL_BACKEND_AUTO;
    o.log_level = TWELL_LOG_INFO;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    assert_int_equal(twell_ctx_backend(ctx), TWELL_BACKEND_CPU);
    assert_true(strncmp(twell_ctx_device_name(ctx), "cpu", 3) == 0);
    assert_int_equal(log.saw_cpu_note, 1);
    twell_ctx_destroy(ctx);
    /* At WARN the INFO note is not delivered. */
    memset(&log, 0, sizeof log);
    o.log_level = TWELL_LOG_WARN;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    assert_int_equal(log.count[TWELL_LOG_INFO], 0);
    assert_int_equal(log.saw_cpu_note, 0);
    twell_ctx_destroy(ctx);
}

static void test_ctx_bad_options(void **state) {
    (void)state;
    tc_log log;
    memset(&log, 0, sizeof log);
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.log = tc_log_fn;
    o.log_user = &log;
    assert_int_equal(twell_ctx_create(&o, NULL), TWELL_ERR_INVALID_ARG);
    twell_ctx *ctx = (twell_ctx *)(uintptr_t)1;
    o.backend = (twell_backend)7;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_ERR_INVALID_ARG);
    assert_null(ctx);
    assert_non_null(strstr(log.last, "backend"));
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = -1;
    ctx = (twell_ctx *)(uintptr_t)1;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_ERR_INVALID_ARG);
    assert_null(ctx);
    assert_non_null(strstr(log.last, "cpu_threads"));
    o.cpu_threads = 0;
    o.device = -2;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_ERR_INVALID_ARG);
    assert_null(ctx);
    o.device = 0;
    o.pdl = (twell_switch)3;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_ERR_INVALID_ARG);
    assert_null(ctx);
    assert_non_null(strstr(log.last, "options.pdl"));
    o.pdl = TWELL_SWITCH_DEFAULT;
    o.tune_on_first_use = (twell_switch)-1;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_ERR_INVALID_ARG);
    assert_null(ctx);
    assert_int_equal(log.count[TWELL_LOG_ERROR], 5);
}

/* The environment-backed options as a context resolves them at creation (internal.h's fields):
 * a value the program sets wins over the environment, a default field takes the environment's,
 * and with neither the built-in default applies. Strings are copied; the environment is read
 * once, at creation. */
typedef struct {
    int tune, pdl;
    const char *tdir, *nvrtc;
} tc_knobs;

static void tc_expect_knobs(const twell_ctx_options *o, const tc_knobs *want) {
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(o, &ctx), TWELL_OK);
    assert_int_equal(ctx->tune_on_first_use, want->tune);
    assert_int_equal(ctx->pdl, want->pdl);
    if (want->tdir)
        assert_string_equal(ctx->template_dir, want->tdir);
    else
        assert_null(ctx->template_dir);
    if (want->nvrtc)
        assert_string_equal(ctx->nvrtc_library, want->nvrtc);
    else
        assert_null(ctx->nvrtc_library);
    twell_ctx_destroy(ctx);
}

static void test_ctx_environment_options(void **state) {
    (void)state;
    static const char *vars[] = {"TWELL_TUNE", "TWELL_PDL", "TWELL_TEMPLATE_DIR",
                                 "TWELL_NVRTC_LIBRARY"};
    char *saved[4];
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(vars[i]);
    }
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    /* neither: built-in defaults (no tuning on first use, PDL wanted, built-in locations) */
    tc_expect_knobs(&o, &(tc_knobs){0, 1, NULL, NULL});
    /* the environment fills default fields; values other than "1" / "0" are not switches */
    setenv("TWELL_TUNE", "1", 1);
    setenv("TWELL_PDL", "0", 1);
    setenv("TWELL_TEMPLATE_DIR", "/env/templates", 1);
    setenv("TWELL_NVRTC_LIBRARY", "/env/libnvrtc.so", 1);
    tc_expect_knobs(&o, &(tc_knobs){1, 0, "/env/templates", "/env/libnvrtc.so"});
    setenv("TWELL_TUNE", "yes", 1);
    setenv("TWELL_PDL", "1", 1);
    setenv("TWELL_TEMPLATE_DIR", "", 1); /* empty: unset */
    tc_expect_knobs(&o, &(tc_knobs){0, 1, NULL, "/env/libnvrtc.so"});
    /* the program's values win over the environment */
    setenv("TWELL_TUNE", "1", 1);
    setenv("TWELL_PDL", "0", 1);
    setenv("TWELL_TEMPLATE_DIR", "/env/templates", 1);
    char tdir[32] = "/opt/templates", nvrtc[32] = "/opt/libnvrtc.so";
    o.tune_on_first_use = TWELL_SWITCH_OFF;
    o.pdl = TWELL_SWITCH_ON;
    o.template_dir = tdir;
    o.nvrtc_library = nvrtc;
    tc_expect_knobs(&o, &(tc_knobs){0, 1, "/opt/templates", "/opt/libnvrtc.so"});
    o.tune_on_first_use = TWELL_SWITCH_ON;
    o.pdl = TWELL_SWITCH_OFF;
    unsetenv("TWELL_TUNE");
    unsetenv("TWELL_PDL");
    tc_expect_knobs(&o, &(tc_knobs){1, 0, "/opt/templates", "/opt/libnvrtc.so"});
    /* copied at creation, environment read once: later changes do not reach the context */
    twell_ctx *ctx = NULL;
    o.template_dir = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    strcpy(nvrtc, "/changed");
    setenv("TWELL_TEMPLATE_DIR", "/changed", 1);
    assert_string_equal(ctx->nvrtc_library, "/opt/libnvrtc.so");
    assert_string_equal(ctx->template_dir, "/env/templates");
    assert_string_equal(ctx->opts.template_dir, "/env/templates");
    twell_ctx_destroy(ctx);
    for (int i = 0; i < 4; i++) {
        if (saved[i])
            setenv(vars[i], saved[i], 1);
        else
            unsetenv(vars[i]);
        free(saved[i]);
    }
}

/* options.pointer_cache: ON by default, OFF from TWELL_POINTER_CACHE=0 when the program leaves the
 * field at DEFAULT, the program's value otherwise; read at creation. */
static int tc_pointer_cache(twell_switch sw) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    o.pointer_cache = sw;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    int on = ctx->pointer_cache;
    twell_ctx_destroy(ctx);
    return on;
}

static void test_ctx_pointer_cache_option(void **state) {
    (void)state;
    const char *v = getenv("TWELL_POINTER_CACHE");
    char *saved = v ? strdup(v) : NULL;
    unsetenv("TWELL_POINTER_CACHE");
    assert_int_equal(tc_pointer_cache(TWELL_SWITCH_DEFAULT), 1);
    setenv("TWELL_POINTER_CACHE", "0", 1);
    assert_int_equal(tc_pointer_cache(TWELL_SWITCH_DEFAULT), 0);
    assert_int_equal(tc_pointer_cache(TWELL_SWITCH_ON), 1);
    setenv("TWELL_POINTER_CACHE", "no", 1); /* only "0" turns it off */
    assert_int_equal(tc_pointer_cache(TWELL_SWITCH_DEFAULT), 1);
    assert_int_equal(tc_pointer_cache(TWELL_SWITCH_OFF), 0);
    if (saved)
        setenv("TWELL_POINTER_CACHE", saved, 1);
    else
        unsetenv("TWELL_POINTER_CACHE");
    free(saved);
}

/* A failing call leaves a message naming the argument; the next successful call clears it. */
static void test_ctx_errmsg(void **state) {
    (void)state;
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    s.C = 3;
    twell_plan *plan = (twell_plan *)(uintptr_t)1;
    assert_int_equal(twell_plan_create(ctx, &s, &plan), TWELL_ERR_INVALID_ARG);
    assert_null(plan);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "twell_plan_create"));
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "shape.C = 3"));
    s.C = 8;
    assert_int_equal(twell_plan_create(ctx, &s, &plan), TWELL_OK);
    assert_string_equal(twell_ctx_errmsg(ctx), "");
    assert_int_equal(twell_plan_shape(plan)->K, 2048);
    assert_int_equal(twell_plan_shape(plan)->C, 8);
    /* Repeated errors replace the message (no growth, no leak under ASan). */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(twell_plan_set_path(plan, (twell_path)(9 + i)), TWELL_ERR_INVALID_ARG);
        assert_non_null(strstr(twell_ctx_errmsg(ctx), "path"));
    }
    assert_int_equal(twell_plan_set_path(plan, TWELL_PATH_DENSE), TWELL_OK);
    assert_string_equal(twell_ctx_errmsg(ctx), "");
    twell_plan_destroy(plan);
    twell_plan_destroy(NULL);
    twell_ctx_destroy(ctx);
}

/* Messages reach the callback iff their level is at or above the threshold; errors are logged at
 * DEBUG with their status name. */
static void test_ctx_log_levels(void **state) {
    (void)state;
    for (int thr = TWELL_LOG_DEBUG; thr <= TWELL_LOG_ERROR; thr++) {
        tc_log log;
        memset(&log, 0, sizeof log);
        twell_ctx_options o;
        twell_ctx_options_init(&o);
        o.backend = TWELL_BACKEND_CPU;
        o.log = tc_log_fn;
        o.log_user = &log;
        o.log_level = (twell_log_level)thr;
        twell_ctx *ctx = NULL;
        assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
        memset(&log, 0, sizeof log);
        for (int lvl = TWELL_LOG_DEBUG; lvl <= TWELL_LOG_ERROR; lvl++)
            tw_log(ctx, (twell_log_level)lvl, "message %d", lvl);
        for (int lvl = TWELL_LOG_DEBUG; lvl <= TWELL_LOG_ERROR; lvl++)
            assert_int_equal(log.count[lvl], lvl >= thr ? 1 : 0);
        char want[32];
        snprintf(want, sizeof want, "message %d", TWELL_LOG_ERROR);
        assert_string_equal(log.last, want);
        memset(&log, 0, sizeof log);
        twell_shape s;
        twell_shape_init(&s, 24, 256);
        assert_int_equal(twell_shape_check(ctx, &s), TWELL_ERR_INVALID_ARG);
        if (thr == TWELL_LOG_DEBUG) {
            assert_int_equal(log.count[TWELL_LOG_DEBUG], 1);
            assert_non_null(strstr(log.last, "TWELL_ERR_INVALID_ARG"));
            assert_non_null(strstr(log.last, "shape.K = 24"));
        } else {
            assert_int_equal(log.count[TWELL_LOG_DEBUG], 0);
        }
        twell_ctx_destroy(ctx);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ctx_version),
        cmocka_unit_test(test_ctx_status_tables),
        cmocka_unit_test(test_ctx_cpu_lifecycle),
        cmocka_unit_test(test_ctx_defaults),
        cmocka_unit_test(test_ctx_auto_fallback),
        cmocka_unit_test(test_ctx_bad_options),
        cmocka_unit_test(test_ctx_errmsg),
        cmocka_unit_test(test_ctx_log_levels),
        cmocka_unit_test(test_ctx_environment_options),
        cmocka_unit_test(test_ctx_pointer_cache_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
