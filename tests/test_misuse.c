/* test_misuse.c — the CPU worker pool stays correct with two callers and a nested loop.
 * labels: unit */
#include "internal.h"
#include "synth.h"
#include "twellrt.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

/* Bounds every racing loop; the loops stop earlier once they saw what they wait for. */
#define TM_SECONDS 3.0
/* Each racing thread makes at least this many calls, so a run overlaps many times. */
#define TM_MIN_CALLS 200

/* ---- the pool itself, with two callers and a nested loop ---- */

typedef struct {
    tw_pool *pool;
    int *hits; /* one per item: how many times it ran */
    size_t n;
    int nest; /* 1: every chunk runs an inner loop on the same pool */
    int *inner;
    size_t inner_n;
} tm_pool_job;

static void tm_inner(void *raw, size_t b, size_t e) {
    int *counts = raw;
    for (size_t i = b; i < e; i++)
        counts[i]++;
}

static void tm_outer(void *raw, size_t b, size_t e) {
    tm_pool_job *j = raw;
    for (size_t i = b; i < e; i++) {
        j->hits[i]++;
        if (j->nest)
            tw_pool_for(j->pool, j->inner_n, tm_inner, j->inner + i * j->inner_n);
    }
}

typedef struct {
    tw_pool *pool;
    pthread_barrier_t *start;
    int rounds;
    int bad; /* items that did not run exactly `rounds` times */
} tm_pool_caller;

static void *tm_pool_call(void *raw) {
    tm_pool_caller *c = raw;
    int hits[97] = {0};
    tm_pool_job j = {c->pool, hits, 97, 0, NULL, 0};
    pthread_barrier_wait(c->start);
    for (int r = 0; r < c->rounds; r++)
        tw_pool_for(c->pool, j.n, tm_outer, &j);
    for (size_t i = 0; i < j.n; i++)
        if (hits[i] != c->rounds)
            c->bad++;
    return NULL;
}

static void test_misuse_pool_two_callers(void **state) {
    (void)state;
    tw_pool *pool = NULL;
    assert_int_equal(tw_pool_create(3, &pool), TWELL_OK);
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
    tm_pool_caller c[2] = {{pool, &start, 2000, 0}, {pool, &start, 2000, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, tm_pool_call, &c[i]), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(c[i].bad, 0);
    }
    pthread_barrier_destroy(&start);

    /* A loop nested in a chunk runs on that chunk's thread instead of waiting for itself. */
    enum { OUTER = 7, INNER = 11 };
    int hits[OUTER] = {0}, inner[OUTER * INNER] = {0};
    tm_pool_job j = {pool, hits, OUTER, 1, inner, INNER};
    tw_pool_for(pool, OUTER, tm_outer, &j);
    for (int i = 0; i < OUTER; i++)
        assert_int_equal(hits[i], 1);
    /* Each outer item ran the inner loop over its own row, once. */
    for (int i = 0; i < OUTER * INNER; i++)
        assert_int_equal(inner[i], 1);
    tw_pool_destroy(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_misuse_pool_two_callers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
