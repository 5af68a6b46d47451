/* test_misuse.c — one context entered by two threads at once: the losing call returns
 * TWELL_ERR_MISUSE and touches nothing, the owner's nested calls pass, racing calls never crash
 * or hang, and the CPU worker pool stays correct with two callers.
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

static double tm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static twell_ctx *tm_ctx(int threads, twell_log_fn log, void *user) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = threads;
    o.log = log;
    o.log_user = user;
    o.log_level = TWELL_LOG_DEBUG;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    return ctx;
}

/* A gated shape with row-tiles that overflow now and then (the exact recount runs too). */
static twell_shape tm_shape(void) {
    twell_shape s;
    twell_shape_init(&s, 64, 1024);
    s.T = 128;
    s.C = 8;
    return s;
}

static tw_synth_ffn *tm_data(const twell_shape *s, size_t M) {
    tw_synth_params p = tw_synth_params_default();
    p.M = M;
    p.K = s->K;
    p.N = s->N;
    p.dtype = s->dtype;
    p.gated = s->gated;
    p.nnz = 24;
    p.dist = TW_SYNTH_SKEWED;
    p.heavy_frac = 0.1;
    p.seq_len = 16;
    p.seed = 26;
    tw_synth_ffn *f = NULL;
    assert_int_equal(tw_synth_create(NULL, &p, &f), TWELL_OK);
    return f;
}

static void test_misuse_status_listed(void **state) {
    (void)state;
    assert_int_equal(TWELL_ERR_MISUSE, 12);
    assert_string_equal(twell_status_name(TWELL_ERR_MISUSE), "TWELL_ERR_MISUSE");
    assert_string_equal(twell_status_str(TWELL_ERR_MISUSE), "context used by two threads at once");
}

/* ---- a deterministic overlap: the owner is held inside its call by the log callback ---- */

typedef struct {
    twell_ctx *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int armed;          /* 1: the next DEBUG message pauses its thread */
    int inside, go;            /* under mu */
    char nested[512];          /* twell_ctx_errmsg called by the owner inside its own call */
    twell_status nested_shape; /* twell_shape_check (a bad K) from the owner, nested */
    atomic_int errors;         /* ERROR messages (the refused destroys) */
    twell_plan *plan;          /* the owner's call runs on it */
    twell_status owner;        /* what the owner's call returned */
} tm_hold;

static void tm_hold_log(void *user, twell_log_level level, const char *msg) {
    (void)msg;
    tm_hold *h = user;
    if (level == TWELL_LOG_ERROR)
        atomic_fetch_add(&h->errors, 1);
    if (level != TWELL_LOG_DEBUG || !atomic_exchange(&h->armed, 0))
        return;
    /* The owner thread, inside tw_error: its nested calls run (the tuners call the API from
     * inside a call), they do not report misuse. */
    snprintf(h->nested, sizeof h->nested, "%s", twell_ctx_errmsg(h->ctx));
    twell_shape bad = tm_shape();
    bad.K = 0;
    h->nested_shape = twell_shape_check(h->ctx, &bad);
    pthread_mutex_lock(&h->mu);
    h->inside = 1;
    pthread_cond_broadcast(&h->cv);
    while (!h->go)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

static void *tm_hold_owner(void *raw) {
    tm_hold *h = raw;
    /* M = 0 fails validation, whose message goes to the log (DEBUG) while the call holds ctx. */
    uint16_t x[64] = {0};
    uint32_t packed[128];
    h->owner = twell_gate_pack(h->plan, 0, x, x, packed, NULL);
    return NULL;
}

static void test_misuse_second_thread_refused(void **state) {
    (void)state;
    tm_hold h;
    memset(&h, 0, sizeof h);
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    h.ctx = tm_ctx(2, tm_hold_log, &h);
    twell_shape s = tm_shape();
    const size_t M = 5;
    tw_synth_ffn *f = tm_data(&s, M);
    assert_int_equal(twell_plan_create(h.ctx, &s, &h.plan), TWELL_OK);
    twell_train_state *ts = NULL;
    assert_int_equal(twell_train_state_create(h.plan, &ts), TWELL_OK);
    size_t pw = twell_packed_words(&s, M);
    uint32_t *packed = malloc(pw * sizeof *packed);
    uint16_t *y = malloc(M * s.K * sizeof *y);
    assert_non_null(packed);
    assert_non_null(y);

    atomic_store(&h.armed, 1);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, tm_hold_owner, &h), 0);
    pthread_mutex_lock(&h.mu);
    while (!h.inside)
        pthread_cond_wait(&h.cv, &h.mu);
    pthread_mutex_unlock(&h.mu);

    /* The owner is inside twell_gate_pack: every call here is refused and writes nothing. */
    memset(packed, 0xa5, pw * sizeof *packed);
    memset(y, 0xa5, M * s.K * sizeof *y);
    assert_int_equal(twell_gate_pack(h.plan, M, f->x, tw_synth_pack_weight(f), packed, NULL),
                     TWELL_ERR_MISUSE);
    assert_int_equal(twell_ffn_infer(h.plan, M, f->x, packed, f->wg, f->wu, f->wd, y, NULL),
                     TWELL_ERR_MISUSE);
    for (size_t i = 0; i < pw; i++)
        assert_int_equal(packed[i], 0xa5a5a5a5u);
    for (size_t i = 0; i < M * s.K; i++)
        assert_int_equal(y[i], 0xa5a5u);
    twell_plan *p2 = (twell_plan *)&h; /* any non-NULL: it must come back NULL */
    assert_int_equal(twell_plan_create(h.ctx, &s, &p2), TWELL_ERR_MISUSE);
    assert_null(p2);
    twell_train_state *ts2 = (twell_train_state *)&h;
    assert_int_equal(twell_train_state_create(h.plan, &ts2), TWELL_ERR_MISUSE);
    assert_null(ts2);
    size_t bytes = 1;
    assert_int_equal(twell_train_workspace_size(h.plan, M, 4.0, TWELL_PATH_AUTO, &bytes),
                     TWELL_ERR_MISUSE);
    assert_int_equal(bytes, 0);
    assert_int_equal(twell_plan_set_path(h.plan, TWELL_PATH_DENSE), TWELL_ERR_MISUSE);
    assert_int_equal(twell_plan_tune(h.plan, M, 0), TWELL_ERR_MISUSE);
    assert_int_equal(twell_plan_reserve(h.plan, M, 4.0), TWELL_ERR_MISUSE);
    assert_int_equal(twell_shape_check(h.ctx, &s), TWELL_ERR_MISUSE);
    assert_int_equal(twell_shape_check(NULL, &s), TWELL_OK); /* no context: nothing to hold */
    assert_int_equal(twell_train_state_set_workspace(ts, NULL, 0), TWELL_ERR_MISUSE);
    assert_int_equal(twell_train_state_bytes(ts), 0);
    assert_non_null(strstr(twell_ctx_errmsg(h.ctx), "another thread is in a call"));
    /* Facts fixed at create stay readable. */
    assert_int_equal(twell_ctx_backend(h.ctx), TWELL_BACKEND_CPU);
    assert_non_null(strstr(twell_ctx_device_name(h.ctx), "cpu"));
    assert_int_equal(twell_plan_shape(h.plan)->N, s.N);
    /* Destroys refuse and say so rather than free what the owner is using. */
    twell_train_state_destroy(ts);
    twell_plan_destroy(h.plan);
    twell_ctx_destroy(h.ctx);
    assert_int_equal(atomic_load(&h.errors), 3);

    pthread_mutex_lock(&h.mu);
    h.go = 1;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    assert_int_equal(pthread_join(t, NULL), 0);

    /* The owner's call ended as if alone and its nested calls ran; the message is the owner's
     * last (the nested check's), none of the refused calls wrote one. */
    assert_int_equal(h.owner, TWELL_ERR_INVALID_ARG);
    assert_non_null(strstr(h.nested, "twell_gate_pack: M is 0"));
    assert_int_equal(h.nested_shape, TWELL_ERR_INVALID_ARG);
    assert_non_null(strstr(twell_ctx_errmsg(h.ctx), "twell_shape_check: shape.K = 0"));
    /* Released: everything works again, and the refused objects are all still alive. */
    assert_int_equal(twell_plan_set_path(h.plan, TWELL_PATH_SPARSE), TWELL_OK);
    assert_int_equal(twell_gate_pack(h.plan, M, f->x, tw_synth_pack_weight(f), packed, NULL),
                     TWELL_OK);
    assert_int_equal(twell_ffn_infer(h.plan, M, f->x, packed, f->wg, f->wu, f->wd, y, NULL),
                     TWELL_OK);
    twell_train_state_destroy(ts);
    twell_plan_destroy(h.plan);
    twell_ctx_destroy(h.ctx);
    assert_int_equal(atomic_load(&h.errors), 3);
    free(packed);
    free(y);
    tw_synth_destroy(f);
    pthread_cond_destroy(&h.cv);
    pthread_mutex_destroy(&h.mu);
}

/* ---- two threads hammering one context ---- */

typedef struct {
    twell_plan *plan;
    const twell_shape *s;
    const tw_synth_ffn *f;
    size_t M;
    const uint32_t *want_packed; /* single-threaded results */
    const uint16_t *want_y;
    pthread_barrier_t *start;
    atomic_int *misuse_total;
    double deadline;
    int bad_args; /* 1: every call fails validation (racing error messages) */
    /* Results, checked on the main thread (cmocka's asserts belong there). */
    long ok, misuse, other, wrong, touched, calls;
    char first_problem[256];
} tm_racer;

static void tm_problem(tm_racer *r, const char *what, twell_status st) {
    if (!r->first_problem[0])
        snprintf(r->first_problem, sizeof r->first_problem, "%s: %s", what, twell_status_name(st));
}

/* Tallies one call's status; returns 1 when it was OK. */
static int tm_tally(tm_racer *r, twell_status st, twell_status ok, const char *what) {
    r->calls++;
    if (st == ok) {
        r->ok++;
        return 1;
    }
    if (st == TWELL_ERR_MISUSE) {
        r->misuse++;
        atomic_fetch_add(r->misuse_total, 1);
        return 0;
    }
    r->other++;
    tm_problem(r, what, st);
    return 0;
}

static void *tm_race(void *raw) {
    tm_racer *r = raw;
    const twell_shape *s = r->s;
    size_t pw = twell_packed_words(s, r->M), yn = r->M * s->K;
    uint32_t *packed = malloc(pw * sizeof *packed);
    uint16_t *y = malloc(yn * sizeof *y);
    if (!packed || !y) {
        tm_problem(r, "malloc", TWELL_ERR_NO_MEMORY);
        free(packed);
        free(y);
        return NULL;
    }
    twell_ctx *ctx = r->plan->ctx;
    pthread_barrier_wait(r->start);
    for (;;) {
        int enough = r->calls >= TM_MIN_CALLS && atomic_load(r->misuse_total) > 0;
        if (enough || tm_now() > r->deadline)
            break;
        memset(packed, 0xa5, pw * sizeof *packed);
        memset(y, 0xa5, yn * sizeof *y);
        if (r->bad_args) {
            tm_tally(r,
                     twell_gate_pack(r->plan, 0, r->f->x, tw_synth_pack_weight(r->f), packed, NULL),
                     TWELL_ERR_INVALID_ARG, "gate_pack M = 0");
            tm_tally(
                r,
                twell_ffn_infer(r->plan, r->M, NULL, packed, r->f->wg, r->f->wu, r->f->wd, y, NULL),
                TWELL_ERR_INVALID_ARG, "ffn_infer x NULL");
            twell_plan *p = NULL;
            tm_tally(r, twell_plan_create(ctx, NULL, &p), TWELL_ERR_INVALID_ARG,
                     "plan_create shape NULL");
            if (p)
                tm_problem(r, "plan_create gave a plan", TWELL_OK);
        } else {
            twell_status st =
                twell_gate_pack(r->plan, r->M, r->f->x, tw_synth_pack_weight(r->f), packed, NULL);
            if (tm_tally(r, st, TWELL_OK, "gate_pack")) {
                if (memcmp(packed, r->want_packed, pw * sizeof *packed) != 0)
                    r->wrong++;
            } else {
                for (size_t i = 0; i < pw; i++)
                    if (packed[i] != 0xa5a5a5a5u) {
                        r->touched++;
                        break;
                    }
                memcpy(packed, r->want_packed, pw * sizeof *packed);
            }
            st = twell_ffn_infer(r->plan, r->M, r->f->x, packed, r->f->wg, r->f->wu, r->f->wd, y,
                                 NULL);
            if (tm_tally(r, st, TWELL_OK, "ffn_infer")) {
                if (memcmp(y, r->want_y, yn * sizeof *y) != 0)
                    r->wrong++;
            } else {
                for (size_t i = 0; i < yn; i++)
                    if (y[i] != 0xa5a5u) {
                        r->touched++;
                        break;
                    }
            }
        }
        /* Called while the other thread may be in a call: the call itself is safe. The string
         * is not read here: once returned it may be the context's own message, which the other
         * thread's next call may free (twellrt.h, twell_ctx_errmsg). */
        if (!twell_ctx_errmsg(ctx))
            tm_problem(r, "twell_ctx_errmsg", TWELL_ERR_INTERNAL);
    }
    free(packed);
    free(y);
    return NULL;
}

static void tm_race_run(int bad_args) {
    twell_ctx *ctx = tm_ctx(2, NULL, NULL);
    twell_shape s = tm_shape();
    const size_t M = 33;
    tw_synth_ffn *f = tm_data(&s, M);
    twell_plan *plan = NULL;
    assert_int_equal(twell_plan_create(ctx, &s, &plan), TWELL_OK);
    size_t pw = twell_packed_words(&s, M);
    uint32_t *want_packed = malloc(pw * sizeof *want_packed);
    uint16_t *want_y = malloc(M * s.K * sizeof *want_y);
    assert_non_null(want_packed);
    assert_non_null(want_y);
    assert_int_equal(twell_gate_pack(plan, M, f->x, tw_synth_pack_weight(f), want_packed, NULL),
                     TWELL_OK);
    assert_int_equal(twell_ffn_infer(plan, M, f->x, want_packed, f->wg, f->wu, f->wd, want_y, NULL),
                     TWELL_OK);

    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
    atomic_int misuse_total;
    atomic_init(&misuse_total, 0);
    tm_racer r[2];
    memset(r, 0, sizeof r);
    pthread_t t[2];
    double deadline = tm_now() + TM_SECONDS;
    for (int i = 0; i < 2; i++) {
        r[i].plan = plan;
        r[i].s = &s;
        r[i].f = f;
        r[i].M = M;
        r[i].want_packed = want_packed;
        r[i].want_y = want_y;
        r[i].start = &start;
        r[i].misuse_total = &misuse_total;
        r[i].deadline = deadline;
        r[i].bad_args = bad_args;
        assert_int_equal(pthread_create(&t[i], NULL, tm_race, &r[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    long ok = 0, misuse = 0;
    for (int i = 0; i < 2; i++) {
        print_message("thread %d: %ld calls, %ld as asked, %ld TWELL_ERR_MISUSE\n", i, r[i].calls,
                      r[i].ok, r[i].misuse);
        if (r[i].first_problem[0])
            fail_msg("thread %d: %s", i, r[i].first_problem);
        assert_int_equal(r[i].other, 0);
        assert_int_equal(r[i].wrong, 0);
        assert_int_equal(r[i].touched, 0);
        ok += r[i].ok;
        misuse += r[i].misuse;
    }
    assert_true(ok > 0);
    assert_true(misuse > 0);
    /* The context is whole afterwards: one more call from here runs and is right. */
    uint16_t *y = malloc(M * s.K * sizeof *y);
    assert_non_null(y);
    assert_int_equal(twell_ffn_infer(plan, M, f->x, want_packed, f->wg, f->wu, f->wd, y, NULL),
                     TWELL_OK);
    assert_memory_equal(y, want_y, M * s.K * sizeof *y);
    assert_string_equal(twell_ctx_errmsg(ctx), "");
    free(y);
    pthread_barrier_destroy(&start);
    free(want_packed);
    free(want_y);
    twell_plan_destroy(plan);
    tw_synth_destroy(f);
    twell_ctx_destroy(ctx);
}

/* Two threads on one context with cpu_threads = 2 used to hang or crash inside the pool. */
static void test_misuse_race_ops(void **state) {
    (void)state;
    tm_race_run(0);
}

/* Failing calls from two threads used to free one error message twice. */
static void test_misuse_race_errors(void **state) {
    (void)state;
    tm_race_run(1);
}

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
        cmocka_unit_test(test_misuse_status_listed),
        cmocka_unit_test(test_misuse_second_thread_refused),
        cmocka_unit_test(test_misuse_race_ops),
        cmocka_unit_test(test_misuse_race_errors),
        cmocka_unit_test(test_misuse_pool_two_callers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
