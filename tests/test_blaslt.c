/* test_blaslt.c — loading cuBLASLt at run time (runtime/cuda/cuda_blaslt.c), no GPU needed: a
 * library named by options.cublaslt_library or TWELL_CUBLASLT_LIBRARY is tried alone (a missing one
 * is TWELL_ERR_NOT_FOUND naming what was tried and how to name another), the option wins over the
 * environment, a failed request does not block another, and the default search finds the
 * toolkit's (or the process's) libcublasLt. Needs the CUDA toolkit's libraries. labels: nvrtc */
#include "cuda_blaslt.h"
#include "twellrt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A CPU context whose options name lib (NULL: leave it to the environment). */
static twell_ctx *tb_ctx(const char *lib) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    o.cublaslt_library = lib;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    return ctx;
}

/* One process, in order: the library is loaded once per process, so the failing requests come
 * first. */
static void test_blaslt_load_order(void **state) {
    (void)state;
    assert_string_equal(tw_lt_path(), "");
    setenv("TWELL_CUBLASLT_LIBRARY", "/nonexistent/env/libcublasLt.so", 1);
    twell_ctx *opt = tb_ctx("/nonexistent/option/libcublasLt.so");
    twell_ctx *env = tb_ctx(NULL);
    unsetenv("TWELL_CUBLASLT_LIBRARY"); /* read at creation: env keeps its choice */
    twell_ctx *dflt = tb_ctx(NULL);

    /* the option wins over the environment, and only it is tried */
    assert_int_equal(tw_lt_load(opt, "/nonexistent/beside"), TWELL_ERR_NOT_FOUND);
    const char *msg = twell_ctx_errmsg(opt);
    printf("# option: %s\n", msg);
    assert_non_null(strstr(msg, "/nonexistent/option/libcublasLt.so"));
    assert_null(strstr(msg, "/nonexistent/env/"));
    assert_null(strstr(msg, "/nonexistent/beside"));
    assert_non_null(strstr(msg, "TWELL_CUBLASLT_LIBRARY"));
    assert_string_equal(tw_lt_path(), "");
    /* the same request again fails at once, with the same message */
    assert_int_equal(tw_lt_load(opt, NULL), TWELL_ERR_NOT_FOUND);
    assert_non_null(strstr(twell_ctx_errmsg(opt), "/nonexistent/option/libcublasLt.so"));

    /* no option: the environment's library as read when the context was created */
    assert_int_equal(tw_lt_load(env, NULL), TWELL_ERR_NOT_FOUND);
    printf("# environment: %s\n", twell_ctx_errmsg(env));
    assert_non_null(strstr(twell_ctx_errmsg(env), "/nonexistent/env/libcublasLt.so"));

    /* neither: the search list (the loader's path, beside, $CUDA_HOME, /usr/local/cuda) */
    twell_status st = tw_lt_load(dflt, "/nonexistent/beside");
    printf("# default search: %s %s\n", twell_status_name(st),
           st == TWELL_OK ? tw_lt_path() : twell_ctx_errmsg(dflt));
    assert_int_equal(st, TWELL_OK);
    assert_non_null(strstr(tw_lt_path(), "libcublasLt"));
    /* loaded once per process: every later request gets it */
    assert_int_equal(tw_lt_load(opt, NULL), TWELL_OK);
    assert_int_equal(tw_lt_load(NULL, NULL), TWELL_OK);
    /* a CPU context has no cuBLASLt handle to release */
    tw_lt_ctx_release(dflt);
    twell_ctx_destroy(opt);
    twell_ctx_destroy(env);
    twell_ctx_destroy(dflt);
}

static void test_blaslt_types(void **state) {
    (void)state;
    assert_int_equal(tw_lt_type_of(TWELL_DTYPE_BF16), TW_LT_BF16);
    assert_int_equal(tw_lt_type_of(TWELL_DTYPE_FP16), TW_LT_FP16);
    /* the option is part of the defaults, NULL */
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    assert_null(o.cublaslt_library);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blaslt_load_order),
        cmocka_unit_test(test_blaslt_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
