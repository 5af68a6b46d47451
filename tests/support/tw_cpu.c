/* tw_cpu.c — the tests' CPU context (see tw_cpu.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tw_cpu.h"

twell_ctx *tw_test_cpu_ctx(int threads) {
    twell_ctx_options o = twell_ctx_options_default();
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = threads;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    return ctx;
}
