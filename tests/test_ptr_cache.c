/* test_ptr_cache.c — the plan's memory of accepted device addresses (runtime/core/ptr_cache.c):
 * hits and misses, least-recently-used replacement (a plan's weights survive a stream of new
 * activation addresses), NULL never remembered, the tick's wrap; and on the CPU backend the
 * pointer checks' messages, which the cache must not change (it is used on CUDA only).
 * labels: unit */
#include "internal.h"
#include "ptr_cache.h"
#include "twellrt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const void *pc_addr(uintptr_t a) { return (const void *)(a * 256u); }

static void test_ptr_cache_hit_and_miss(void **state) {
    (void)state;
    tw_ptr_cache c;
    tw_ptr_cache_clear(&c);
    assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(1)), 0);
    tw_ptr_cache_add(&c, pc_addr(1));
    assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(1)), 1);
    assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(2)), 0);
    /* another address inside the same allocation is another key: it is checked on its own */
    assert_int_equal(tw_ptr_cache_hit(&c, (const char *)pc_addr(1) + 2), 0);
    tw_ptr_cache_add(&c, pc_addr(1)); /* again: no second slot */
    int n = 0;
    for (int i = 0; i < TW_PTR_CACHE_N; i++)
        n += c.addr[i] == (uintptr_t)pc_addr(1);
    assert_int_equal(n, 1);
    tw_ptr_cache_clear(&c);
    assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(1)), 0);
}

static void test_ptr_cache_null_never(void **state) {
    (void)state;
    tw_ptr_cache c;
    memset(&c, 0, sizeof c); /* a zeroed cache is an empty one (plans are calloc'd) */
    tw_ptr_cache_add(&c, NULL);
    assert_int_equal(tw_ptr_cache_hit(&c, NULL), 0);
    for (int i = 0; i < TW_PTR_CACHE_N; i++)
        assert_true(c.addr[i] == 0);
}

/* Three weights used by every call stay while a new x, packed and y arrive each call, for many
 * more calls than the cache has slots. */
static void test_ptr_cache_lru_keeps_hot(void **state) {
    (void)state;
    tw_ptr_cache c;
    tw_ptr_cache_clear(&c);
    const uintptr_t w[3] = {1000, 1001, 1002};
    unsigned long misses = 0;
    for (uintptr_t call = 0; call < 200; call++) {
        const uintptr_t act[3] = {10 + 3 * call, 11 + 3 * call, 12 + 3 * call};
        for (int i = 0; i < 3; i++) {
            if (!tw_ptr_cache_hit(&c, pc_addr(act[i]))) {
                misses++;
                tw_ptr_cache_add(&c, pc_addr(act[i]));
            }
            if (!tw_ptr_cache_hit(&c, pc_addr(w[i]))) {
                misses++;
                tw_ptr_cache_add(&c, pc_addr(w[i]));
            }
        }
    }
    /* every activation address once, each weight once (its first call) */
    assert_int_equal(misses, 200 * 3 + 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(w[i])), 1);
}

/* A full cache replaces the address unused the longest; empty slots are filled first. */
static void test_ptr_cache_lru_order(void **state) {
    (void)state;
    tw_ptr_cache c;
    tw_ptr_cache_clear(&c);
    for (uintptr_t a = 1; a <= TW_PTR_CACHE_N; a++) {
        assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(a)), 0);
        tw_ptr_cache_add(&c, pc_addr(a));
    }
    for (uintptr_t a = 1; a <= TW_PTR_CACHE_N; a++)
        assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(a)), 1);
    assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(1)), 1); /* 1 is now the newest, 2 the oldest */
    tw_ptr_cache_add(&c, pc_addr(100));
    assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(2)), 0);
    assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(1)), 1);
    assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(100)), 1);
    for (uintptr_t a = 3; a <= TW_PTR_CACHE_N; a++)
        assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(a)), 1);
}

/* Ages are tick differences: the order survives the tick wrapping past UINT32_MAX. */
static void test_ptr_cache_tick_wrap(void **state) {
    (void)state;
    tw_ptr_cache c;
    tw_ptr_cache_clear(&c);
    c.tick = UINT32_MAX - 4u;
    for (uintptr_t a = 1; a <= TW_PTR_CACHE_N; a++) {
        (void)tw_ptr_cache_hit(&c, pc_addr(a));
        tw_ptr_cache_add(&c, pc_addr(a)); /* a = 1..4 stamped before the wrap, the rest after */
    }
    assert_true(c.tick < 100u);
    tw_ptr_cache_add(&c, pc_addr(200)); /* evicts 1, the oldest, stamped before the wrap */
    assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(1)), 0);
    for (uintptr_t a = 2; a <= TW_PTR_CACHE_N; a++)
        assert_int_equal(tw_ptr_cache_hit(&c, pc_addr(a)), 1);
}

/* On the CPU backend the cache is not used: the same pointer is checked on every call (a NULL is
 * always named), and the option is validated. */
static void test_ptr_cache_cpu_backend(void **state) {
    (void)state;
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    o.pointer_cache = (twell_switch)7;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_ERR_INVALID_ARG);
    assert_null(ctx);
    o.pointer_cache = TWELL_SWITCH_ON;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    assert_int_equal(ctx->pointer_cache, 1);
    twell_shape s;
    twell_shape_init(&s, 64, 256);
    twell_plan *plan = NULL;
    assert_int_equal(twell_plan_create(ctx, &s, &plan), TWELL_OK);
    size_t M = 2;
    uint16_t *x = calloc(M * s.K, 2), *w = calloc((size_t)s.N * s.K, 2);
    uint32_t *p = calloc(twell_packed_words(&s, M), 4);
    assert_true(x && w && p);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(twell_gate_pack(plan, M, x, w, p, NULL), TWELL_OK);
        assert_int_equal(twell_gate_pack(plan, M, x, NULL, p, NULL), TWELL_ERR_INVALID_ARG);
        assert_non_null(strstr(twell_ctx_errmsg(ctx), "w (Wg) is NULL"));
    }
    for (int i = 0; i < TW_PTR_CACHE_N; i++)
        assert_true(plan->seen.addr[i] == 0); /* nothing remembered off CUDA */
    free(x);
    free(w);
    free(p);
    twell_plan_destroy(plan);
    twell_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ptr_cache_hit_and_miss),
        cmocka_unit_test(test_ptr_cache_null_never),
        cmocka_unit_test(test_ptr_cache_lru_keeps_hot),
        cmocka_unit_test(test_ptr_cache_lru_order),
        cmocka_unit_test(test_ptr_cache_tick_wrap),
        cmocka_unit_test(test_ptr_cache_cpu_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
