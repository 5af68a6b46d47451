/* test_abi.c — the sized structs of twellrt.h ("ABI stability"): a caller built against an older
 * header (a smaller struct_size) gets defaults for the fields it lacks and nothing is read or
 * written past its bytes (each struct sits in a heap block of exactly its size, for ASan); a newer
 * caller's unknown bytes must be zero; an uninitialised struct is refused.
 * labels: unit */
#include "abi.h"
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

#include "tw_cpu.h"
#include "tw_log.h"

#define OPT_END(f) TW_FIELD_END(twell_ctx_options, f)
#define SHAPE_END(f) TW_FIELD_END(twell_shape, f)

/* A heap block of exactly n bytes, poisoned: what an older or newer program's struct would be. */
static void *ta_block(size_t n) {
    unsigned char *p = malloc(n);
    assert_non_null(p);
    memset(p, 0xa5, n);
    return p;
}

static void test_abi_init_defaults(void **state) {
    (void)state;
    twell_ctx_options o;
    memset(&o, 0xa5, sizeof o);
    assert_int_equal(twell_ctx_options_init(&o), TWELL_OK);
    assert_int_equal(o.struct_size, sizeof o);
    assert_int_equal(o.backend, TWELL_BACKEND_AUTO);
    assert_int_equal(o.log_level, TWELL_LOG_WARN);
    assert_null(o.cache_dir);
    assert_null(o.log);
    assert_null(o.cublaslt_library);
    assert_int_equal(o.pointer_cache, TWELL_SWITCH_DEFAULT);
    twell_shape s;
    memset(&s, 0xa5, sizeof s);
    assert_int_equal(twell_shape_init(&s, 2048, 5632), TWELL_OK);
    assert_int_equal(s.struct_size, sizeof s);
    assert_int_equal(s.K, 2048);
    assert_int_equal(s.N, 5632);
    assert_int_equal(s.T, 256);
    assert_int_equal(s.C, 8);
    assert_int_equal(s.dtype, TWELL_DTYPE_BF16);
    assert_int_equal(s.gated, 1);
    assert_int_equal(twell_ctx_options_init(NULL), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_shape_init(NULL, 64, 256), TWELL_ERR_INVALID_ARG);
}

/* Sizes below a size_t or above TWELL_STRUCT_SIZE_MAX are refused and nothing is written. */
static void test_abi_init_sized_bounds(void **state) {
    (void)state;
    static const size_t bad[] = {0, 1, sizeof(size_t) - 1, TWELL_STRUCT_SIZE_MAX + 1, SIZE_MAX};
    unsigned char buf[64], want[64];
    memset(want, 0xa5, sizeof want);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(buf, 0xa5, sizeof buf);
        assert_int_equal(twell_ctx_options_init_sized((twell_ctx_options *)(void *)buf, bad[i]),
                         TWELL_ERR_INVALID_ARG);
        assert_int_equal(twell_shape_init_sized((twell_shape *)(void *)buf, bad[i], 64, 256),
                         TWELL_ERR_INVALID_ARG);
        assert_memory_equal(buf, want, sizeof buf);
    }
    /* The smallest struct is its size field alone; init writes exactly those bytes. */
    size_t *only = ta_block(sizeof(size_t));
    assert_int_equal(twell_ctx_options_init_sized((twell_ctx_options *)(void *)only, sizeof *only),
                     TWELL_OK);
    assert_int_equal(*only, sizeof *only);
    twell_ctx *ctx = (twell_ctx *)(uintptr_t)1;
    assert_int_equal(twell_ctx_create((twell_ctx_options *)(void *)only, &ctx), TWELL_OK);
    assert_non_null(ctx); /* every option at its default */
    twell_ctx_destroy(ctx);
    free(only);
}

/* An older caller: every prefix of the struct that ends at a field, plus one that cuts a pointer
 * in half. init writes defaults into exactly those bytes; create takes the fields inside them and
 * defaults the rest (here: cpu_threads and log_level when the caller lacks them). */
static void test_abi_options_older_caller(void **state) {
    (void)state;
    const size_t sizes[] = {OPT_END(struct_size),     OPT_END(backend),  OPT_END(device),
                            OPT_END(device) + 4, /* half of cache_dir */
                            OPT_END(cache_dir),       OPT_END(log_user), OPT_END(log_level),
                            OPT_END(cpu_threads),     OPT_END(pdl),      OPT_END(pointer_cache),
                            sizeof(twell_ctx_options)};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        twell_ctx_options *o = ta_block(n);
        assert_int_equal(twell_ctx_options_init_sized(o, n), TWELL_OK);
        assert_int_equal(o->struct_size, n);
        unsigned char *b = (unsigned char *)o;
        if (n >= OPT_END(backend))
            assert_int_equal(o->backend, TWELL_BACKEND_AUTO);
        if (n == OPT_END(device) + 4) /* the cut field is zeroed, never half-written */
            for (size_t k = OPT_END(device); k < n; k++)
                assert_int_equal(b[k], 0);
        /* What the caller's header has, it sets; the cut pointer gets garbage. */
        if (n >= OPT_END(backend))
            o->backend = TWELL_BACKEND_CPU;
        if (n == OPT_END(device) + 4)
            memset(b + OPT_END(device), 0xff, 4);
        tw_logbook log;
        memset(&log, 0, sizeof log);
        if (n >= OPT_END(log_level)) {
            o->log = tw_test_log;
            o->log_user = &log;
            o->log_level = TWELL_LOG_DEBUG;
        }
        if (n >= OPT_END(cpu_threads))
            o->cpu_threads = 3;
        twell_ctx *ctx = NULL;
        assert_int_equal(twell_ctx_create(o, &ctx), TWELL_OK);
        assert_non_null(ctx);
        if (n >= OPT_END(backend))
            assert_int_equal(twell_ctx_backend(ctx), TWELL_BACKEND_CPU);
        /* Defaults for what the caller lacks, the caller's values for the rest. */
        assert_int_equal(ctx->opts.struct_size, sizeof(twell_ctx_options));
        assert_null(ctx->cache_dir); /* the cut pointer was not taken */
        assert_int_equal(ctx->opts.log_level,
                         n >= OPT_END(log_level) ? TWELL_LOG_DEBUG : TWELL_LOG_WARN);
        if (n >= OPT_END(log_level)) {
            assert_ptr_equal(ctx->opts.log, tw_test_log);
            assert_ptr_equal(ctx->opts.log_user, &log);
        } else {
            assert_null(ctx->opts.log);
        }
        if (n >= OPT_END(cpu_threads))
            assert_string_equal(twell_ctx_device_name(ctx), "cpu (3 threads)");
        assert_int_equal(ctx->opts.cpu_threads, n >= OPT_END(cpu_threads) ? 3 : 0);
        twell_ctx_destroy(ctx);
        free(o);
    }
}

/* A newer caller (a struct larger than the library's): init zeroes the bytes it does not know;
 * create accepts them while they stay zero and refuses, naming the first set byte, otherwise. */
static void test_abi_options_newer_caller(void **state) {
    (void)state;
    const size_t lib = sizeof(twell_ctx_options), n = lib + 24;
    twell_ctx_options *o = ta_block(n);
    assert_int_equal(twell_ctx_options_init_sized(o, n), TWELL_OK);
    assert_int_equal(o->struct_size, n);
    unsigned char *b = (unsigned char *)o;
    for (size_t k = lib; k < n; k++)
        assert_int_equal(b[k], 0);
    o->backend = TWELL_BACKEND_CPU;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(o, &ctx), TWELL_OK);
    assert_int_equal(ctx->opts.struct_size, lib);
    twell_ctx_destroy(ctx);

    tw_logbook log;
    memset(&log, 0, sizeof log);
    o->log = tw_test_log;
    o->log_user = &log;
    b[lib + 5] = 1; /* a field of the newer header, set */
    ctx = (twell_ctx *)(uintptr_t)1;
    assert_int_equal(twell_ctx_create(o, &ctx), TWELL_ERR_INVALID_ARG);
    assert_null(ctx);
    char want[64];
    snprintf(want, sizeof want, "byte %zu is set", lib + 5);
    assert_non_null(strstr(log.last, "twell_ctx_create: options.struct_size"));
    assert_non_null(strstr(log.last, want));
    free(o);
}

/* A struct that was never initialised (struct_size 0) or holds a size no header has: refused
 * before any other field is read, so the log it names is not called either. */
static void test_abi_options_uninitialised(void **state) {
    (void)state;
    tw_logbook log;
    memset(&log, 0, sizeof log);
    twell_ctx_options o;
    memset(&o, 0, sizeof o);
    o.backend = TWELL_BACKEND_CPU;
    o.log = tw_test_log;
    o.log_user = &log;
    o.log_level = TWELL_LOG_DEBUG;
    static const size_t bad[] = {0, 7, TWELL_STRUCT_SIZE_MAX + 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.struct_size = bad[i];
        twell_ctx *ctx = (twell_ctx *)(uintptr_t)1;
        assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_ERR_INVALID_ARG);
        assert_null(ctx);
    }
    assert_int_equal(log.warns + log.others, 0);
}

/* An older caller's shape: the fields past its size (dtype, gated; T and C) take their defaults,
 * which the plan reports; the pure functions read it the same way. */
static void test_abi_shape_older_caller(void **state) {
    (void)state;
    twell_ctx *ctx = tw_test_cpu_ctx(1);
    const size_t sizes[] = {SHAPE_END(N), SHAPE_END(C), SHAPE_END(dtype)};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        twell_shape *s = ta_block(n);
        assert_int_equal(twell_shape_init_sized(s, n, 64, 512), TWELL_OK);
        assert_int_equal(s->K, 64);
        assert_int_equal(s->N, 512);
        if (n >= SHAPE_END(C)) {
            s->T = 128;
            s->C = 4;
        }
        if (n >= SHAPE_END(dtype))
            s->dtype = TWELL_DTYPE_FP16;
        uint32_t T = n >= SHAPE_END(C) ? 128 : 256, C = n >= SHAPE_END(C) ? 4 : 8;
        assert_int_equal(twell_shape_check(ctx, s), TWELL_OK);
        assert_int_equal(twell_tile_words(s), T / C);
        assert_int_equal(twell_tile_slots(s), T / C - 1);
        assert_int_equal(twell_packed_words(s, 3), 3 * 512 / C);
        assert_int_equal(twell_packed_bytes(s, 3), 3 * 512 / C * 4);
        twell_plan *plan = NULL;
        assert_int_equal(twell_plan_create(ctx, s, &plan), TWELL_OK);
        const twell_shape *got = twell_plan_shape(plan);
        assert_int_equal(got->struct_size, sizeof(twell_shape));
        assert_int_equal(got->K, 64);
        assert_int_equal(got->N, 512);
        assert_int_equal(got->T, T);
        assert_int_equal(got->C, C);
        assert_int_equal(got->dtype, n >= SHAPE_END(dtype) ? TWELL_DTYPE_FP16 : TWELL_DTYPE_BF16);
        assert_int_equal(got->gated, 1);
        twell_plan_destroy(plan);
        free(s);
    }
    twell_ctx_destroy(ctx);
}

/* A newer caller's shape with a field this library does not know set, and a shape never
 * initialised: invalid shapes, named as such, for every function that takes one. */
static void test_abi_shape_refused(void **state) {
    (void)state;
    twell_ctx *ctx = tw_test_cpu_ctx(1);
    const size_t lib = sizeof(twell_shape), n = lib + 8;
    twell_shape *s = ta_block(n);
    assert_int_equal(twell_shape_init_sized(s, n, 64, 256), TWELL_OK);
    assert_int_equal(twell_packed_words(s, 2), 2 * 256 / 8); /* zero unknown bytes: accepted */
    ((unsigned char *)s)[n - 1] = 2;
    twell_plan *plan = (twell_plan *)(uintptr_t)1;
    assert_int_equal(twell_plan_create(ctx, s, &plan), TWELL_ERR_INVALID_ARG);
    assert_null(plan);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "twell_plan_create: shape.struct_size"));
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "is set"));
    assert_int_equal(twell_shape_check(ctx, s), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_tile_words(s), 0);
    assert_int_equal(twell_packed_words(s, 2), 0);
    assert_int_equal(twell_packed_bytes(s, 2), 0);
    free(s);

    twell_shape z;
    memset(&z, 0, sizeof z); /* all fields valid, struct_size never set */
    z.K = 64, z.N = 256, z.T = 256, z.C = 8, z.gated = 1;
    assert_int_equal(twell_plan_create(ctx, &z, &plan), TWELL_ERR_INVALID_ARG);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "shape.struct_size = 0"));
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "twell_shape_init"));
    assert_int_equal(twell_shape_check(NULL, &z), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_tile_slots(&z), 0);
    twell_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_abi_init_defaults),
        cmocka_unit_test(test_abi_init_sized_bounds),
        cmocka_unit_test(test_abi_options_older_caller),
        cmocka_unit_test(test_abi_options_newer_caller),
        cmocka_unit_test(test_abi_options_uninitialised),
        cmocka_unit_test(test_abi_shape_older_caller),
        cmocka_unit_test(test_abi_shape_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
