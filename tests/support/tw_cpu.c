/* tw_cpu.c — the tests' CPU context (see tw_cpu.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tw_cpu.h"

twell_ctx *tw_test_cpu_ctx(int threads) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = threads;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    return ctx;
}

twell_ctx *tw_test_cpu_ctx_at(const char *dir, tw_logbook *log) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    o.cache_dir = dir;
    if (log) {
        o.log = tw_test_log;
        o.log_user = log;
        o.log_level = TWELL_LOG_INFO;
    }
    twell_ctx *ctx = NULL;
    if (twell_ctx_create(&o, &ctx) != TWELL_OK)
        return NULL;
    return ctx;
}
