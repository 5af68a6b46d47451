/* test_autotune_select.c — the tuner's selection with injected cost functions and clock:
 * failures, margin, ties, budget, default mode, interleaving and parallel compile.
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "candidates.h"
#include "tuner.h"
#include "tw_tune_test.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* ---- the tuner with injected costs ---- */

#define TW_FAKE_MAX 64

typedef struct tw_fake {
    const tw_tune_config *base;
    double ms[TW_FAKE_MAX];
    twell_status compile_fail[TW_FAKE_MAX];
    twell_status verify_fail[TW_FAKE_MAX];
    int measure_fail_at[TW_FAKE_MAX]; /* fail on this call number (1-based); 0 never */
    size_t measures[TW_FAKE_MAX];
    size_t compiles[TW_FAKE_MAX];
    size_t verifies[TW_FAKE_MAX];
    size_t releases[TW_FAKE_MAX];
    size_t total_measures;
    size_t log[4096]; /* candidate of each measure call */
    double clock_s;
    double advance_s; /* the fake clock moves this much per measure call */
    double (*cost)(const tw_tune_config *c);
    /* parallel compile */
    pthread_mutex_t mu;
    int in_compile, max_in_compile;
    int compile_sleep_us;
    /* begin */
    const tw_tune_config *begin_base;
    size_t begin_n, begins;
    twell_status begin_fail;
} tw_fake;

static size_t tw_fake_idx(tw_fake *f, const tw_tune_config *c) {
    size_t i = (size_t)(c - f->base);
    assert_true(i < TW_FAKE_MAX);
    return i;
}

static twell_status tw_fake_compile(void *user, const tw_tune_config *c) {
    tw_fake *f = user;
    size_t i = (size_t)(c - f->base);
    pthread_mutex_lock(&f->mu);
    f->compiles[i]++;
    f->in_compile++;
    if (f->in_compile > f->max_in_compile)
        f->max_in_compile = f->in_compile;
    pthread_mutex_unlock(&f->mu);
    if (f->compile_sleep_us)
        usleep((useconds_t)f->compile_sleep_us);
    pthread_mutex_lock(&f->mu);
    f->in_compile--;
    pthread_mutex_unlock(&f->mu);
    return f->compile_fail[i];
}

static twell_status tw_fake_begin(void *user, const tw_tune_config *c, size_t n) {
    tw_fake *f = user;
    f->begins++;
    f->begin_base = c;
    f->begin_n = n;
    return f->begin_fail;
}

static twell_status tw_fake_verify(void *user, const tw_tune_config *c) {
    tw_fake *f = user;
    size_t i = tw_fake_idx(f, c);
    f->verifies[i]++;
    return f->verify_fail[i];
}

static twell_status tw_fake_measure(void *user, const tw_tune_config *c, double *ms) {
    tw_fake *f = user;
    size_t i = tw_fake_idx(f, c);
    f->measures[i]++;
    if (f->total_measures < sizeof f->log / sizeof f->log[0])
        f->log[f->total_measures] = i;
    f->total_measures++;
    f->clock_s += f->advance_s;
    if (f->measure_fail_at[i] && (int)f->measures[i] >= f->measure_fail_at[i])
        return TWELL_ERR_CUDA;
    /* A little deterministic jitter around the true time; the median sees through it. */
    double jitter = (f->measures[i] % 3 == 0) ? 1.5 : 1.0;
    *ms = (f->cost ? f->cost(c) : f->ms[i]) * (f->measures[i] % 5 == 0 ? jitter : 1.0);
    return TWELL_OK;
}

static void tw_fake_release(void *user, const tw_tune_config *c) {
    tw_fake *f = user;
    f->releases[tw_fake_idx(f, c)]++;
}

static double tw_fake_clock(void *user) { return ((tw_fake *)user)->clock_s; }

static void tw_fake_init(tw_fake *f, const tw_tune_config *base) {
    memset(f, 0, sizeof *f);
    f->base = base;
    pthread_mutex_init(&f->mu, NULL);
}

static tw_tune_callbacks tw_fake_cb(tw_fake *f) {
    tw_tune_callbacks cb = {
        f, tw_fake_begin, tw_fake_compile, tw_fake_verify, tw_fake_measure, tw_fake_release};
    return cb;
}

static tw_tune_options tw_fake_opts(tw_fake *f) {
    tw_tune_options o = tw_tune_options_default();
    o.clock = tw_fake_clock;
    o.clock_user = f;
    o.threads = 2;
    return o;
}

/* n toy candidates "toy:I=<i>". */
static void tw_toy(tw_tune_config *c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(tw_tune_config_init(&c[i], "toy"), 0);
        assert_int_equal(tw_tune_config_set(&c[i], "I", (int64_t)i), 0);
    }
}

static void test_autotune_selects_fastest(void **state) {
    (void)state;
    tw_tune_config c[5];
    tw_toy(c, 5);
    tw_fake f;
    tw_fake_init(&f, c);
    double ms[] = {5.0, 3.0, 4.0, 1.5, 2.0};
    memcpy(f.ms, ms, sizeof ms);
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 5, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.best, 3);
    assert_true(tw_tune_config_equal(&r.config, &c[3]));
    if (fabs(r.ms - 1.5) > 1e-12 || fabs(r.default_ms - 5.0) > 1e-12)
        fail_msg("ms %g (want 1.5), default_ms %g (want 5)", r.ms, r.default_ms);
    assert_int_equal(r.n_measured, 5);
    assert_int_equal(r.n_failed, 0);
    assert_int_equal(r.budget_cut, 0);
    /* 1 warm-up + 10 timed runs each; compile, verify and release once each. */
    assert_int_equal(r.measure_calls, 55);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(f.measures[i], 11);
        assert_int_equal(f.compiles[i], 1);
        assert_int_equal(f.verifies[i], 1);
        assert_int_equal(f.releases[i], 1);
        assert_int_equal(r.outcomes[i].state, TW_CAND_MEASURED);
        assert_true(r.outcomes[i].min_ms <= r.outcomes[i].ms);
        assert_true(r.outcomes[i].ms <= r.outcomes[i].max_ms);
    }
    assert_int_equal(f.begins, 1);
    assert_ptr_equal(f.begin_base, c);
    assert_int_equal(f.begin_n, 5);
    tw_tune_result_free(&r);
    assert_null(r.outcomes);

    /* Interleaved: within every round each candidate runs once, and the first one rotates. */
    for (size_t round = 0; round < 11; round++) {
        int seen[5] = {0};
        for (size_t j = 0; j < 5; j++)
            seen[f.log[round * 5 + j]]++;
        for (size_t i = 0; i < 5; i++)
            assert_int_equal(seen[i], 1);
    }
    assert_true(f.log[0] != f.log[5]);
    for (size_t k = 1; k < 55; k++)
        assert_true(f.log[k] != f.log[k - 1] || k % 5 == 0);
}

static void test_autotune_failures_score_infinity(void **state) {
    (void)state;
    tw_tune_config c[6];
    tw_toy(c, 6);
    tw_fake f;
    tw_fake_init(&f, c);
    double ms[] = {4.0, 0.5, 0.6, 0.7, 2.0, 3.0};
    memcpy(f.ms, ms, sizeof ms);
    f.compile_fail[1] = TWELL_ERR_NVRTC;  /* fastest: does not compile */
    f.verify_fail[2] = TWELL_ERR_CORRUPT; /* next: wrong answers */
    f.measure_fail_at[3] = 4;             /* next: launch fails on its 4th run */
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 6, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.best, 4);
    assert_int_equal(r.n_measured, 3);
    assert_int_equal(r.n_failed, 3);
    assert_int_equal(r.outcomes[1].state, TW_CAND_FAIL_COMPILE);
    assert_int_equal(r.outcomes[1].status, TWELL_ERR_NVRTC);
    assert_true(isinf(r.outcomes[1].ms));
    assert_int_equal(r.outcomes[2].state, TW_CAND_FAIL_VERIFY);
    assert_int_equal(r.outcomes[2].status, TWELL_ERR_CORRUPT);
    assert_int_equal(r.outcomes[3].state, TW_CAND_FAIL_MEASURE);
    assert_int_equal(r.outcomes[3].status, TWELL_ERR_CUDA);
    assert_true(isinf(r.outcomes[3].ms));
    /* A failed candidate is never called again. */
    assert_int_equal(f.verifies[1], 0);
    assert_int_equal(f.measures[1], 0);
    assert_int_equal(f.measures[2], 0);
    assert_int_equal(f.measures[3], 4);
    assert_int_equal(f.releases[1], 1);
    assert_string_equal(tw_cand_state_name(TW_CAND_FAIL_VERIFY), "verification failed");
    tw_tune_result_free(&r);

    /* The default failing leaves default_ms infinite, the winner still found. */
    tw_fake_init(&f, c);
    memcpy(f.ms, ms, sizeof ms);
    f.compile_fail[0] = TWELL_ERR_NVRTC;
    assert_int_equal(tw_tune_run(NULL, c, 6, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_true(isinf(r.default_ms));
    assert_int_equal(r.best, 1);
    tw_tune_result_free(&r);
}

static void test_autotune_all_fail(void **state) {
    (void)state;
    twell_ctx *ctx = tw_test_cpu_ctx_at(NULL, NULL);
    assert_non_null(ctx);
    tw_tune_config c[3];
    tw_toy(c, 3);
    tw_fake f;
    tw_fake_init(&f, c);
    f.compile_fail[0] = TWELL_ERR_NOT_FOUND; /* e.g. NVRTC missing */
    f.compile_fail[1] = TWELL_ERR_NOT_FOUND;
    f.verify_fail[2] = TWELL_ERR_CORRUPT;
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    tw_tune_result r;
    assert_int_equal(tw_tune_run(ctx, c, 3, 0, SIZE_MAX, &cb, &o, &r), TWELL_ERR_NOT_FOUND);
    const char *msg = twell_ctx_errmsg(ctx);
    if (!strstr(msg, "all 3 candidates failed") || !strstr(msg, "toy:I=0") ||
        !strstr(msg, "compile failed"))
        fail_msg("message: %s", msg);
    assert_non_null(r.outcomes); /* outcomes kept for the report */
    assert_int_equal(r.n_failed, 3);
    assert_int_equal(r.outcomes[2].state, TW_CAND_FAIL_VERIFY);
    tw_tune_result_free(&r);

    /* A failing begin ends the run before any other callback. */
    tw_fake_init(&f, c);
    f.begin_fail = TWELL_ERR_NO_DEVICE;
    assert_int_equal(tw_tune_run(ctx, c, 3, 0, SIZE_MAX, &cb, &o, &r), TWELL_ERR_NO_DEVICE);
    assert_null(r.outcomes);
    assert_int_equal(f.begins, 1);
    assert_int_equal(f.compiles[0] + f.verifies[0] + f.total_measures, 0);

    /* Argument errors. */
    assert_int_equal(tw_tune_run(ctx, c, 0, SIZE_MAX, SIZE_MAX, &cb, &o, &r),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(tw_tune_run(ctx, c, 3, 3, SIZE_MAX, &cb, &o, &r), TWELL_ERR_INVALID_ARG);
    assert_int_equal(tw_tune_run(ctx, c, 3, 0, 7, &cb, &o, &r), TWELL_ERR_INVALID_ARG);
    tw_tune_callbacks none = {NULL, NULL, NULL, NULL, NULL, NULL};
    assert_int_equal(tw_tune_run(ctx, c, 3, 0, SIZE_MAX, &none, &o, &r), TWELL_ERR_INVALID_ARG);
    assert_null(r.outcomes);
    twell_ctx_destroy(ctx);
}

/* The incumbent at 1.0 ms against a challenger that is `faster` percent faster. */
static size_t tw_margin_case(double faster_pct, int *kept) {
    tw_tune_config c[3];
    tw_toy(c, 3);
    tw_fake f;
    tw_fake_init(&f, c);
    f.ms[0] = 2.0;                              /* default */
    f.ms[1] = 1.0;                              /* incumbent */
    f.ms[2] = 1.0 / (1.0 + faster_pct / 100.0); /* challenger */
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 3, 0, 1, &cb, &o, &r), TWELL_OK);
    *kept = r.kept_incumbent;
    size_t best = r.best;
    tw_tune_result_free(&r);
    return best;
}

static void test_autotune_margin(void **state) {
    (void)state;
    int kept;
    assert_int_equal(tw_margin_case(2.0, &kept), 1); /* 2% faster: the stored winner stays */
    assert_int_equal(kept, 1);
    assert_int_equal(tw_margin_case(4.0, &kept), 2); /* 4% faster: replaced */
    assert_int_equal(kept, 0);
    assert_int_equal(tw_margin_case(3.0, &kept), 2);  /* exactly 3%: replaced (≥) */
    assert_int_equal(tw_margin_case(-5.0, &kept), 1); /* slower: stays, not thanks to margin */
    assert_int_equal(kept, 0);

    /* Without an incumbent the 2% faster one simply wins. */
    tw_tune_config c[2];
    tw_toy(c, 2);
    tw_fake f;
    tw_fake_init(&f, c);
    f.ms[0] = 1.0;
    f.ms[1] = 1.0 / 1.02;
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 2, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.best, 1);
    tw_tune_result_free(&r);
}

static void test_autotune_ties_deterministic(void **state) {
    (void)state;
    /* Three configs with the same time in every order: the smallest canonical string wins
     * ("k:BM=128" < "k:BM=32" < "k:BM=64" bytewise). */
    const int64_t vals[3] = {64, 128, 32};
    const size_t perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (size_t pi = 0; pi < 6; pi++) {
        tw_tune_config c[4];
        c[0] = tw_cfg2("k", "BM", 8, NULL, 0); /* a slower default */
        for (size_t j = 0; j < 3; j++)
            c[1 + j] = tw_cfg2("k", "BM", vals[perms[pi][j]], NULL, 0);
        tw_fake f;
        tw_fake_init(&f, c);
        f.ms[0] = 9.0;
        f.ms[1] = f.ms[2] = f.ms[3] = 0.25;
        tw_tune_callbacks cb = tw_fake_cb(&f);
        tw_tune_options o = tw_fake_opts(&f);
        tw_tune_result r;
        assert_int_equal(tw_tune_run(NULL, c, 4, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
        assert_int_equal(tw_tune_config_value(&r.config, "BM", 0), 128);
        tw_tune_result_free(&r);
    }
}

static void test_autotune_budget(void **state) {
    (void)state;
    tw_tune_config c[12];
    tw_toy(c, 12);
    tw_fake f;
    tw_fake_init(&f, c);
    for (size_t i = 0; i < 12; i++)
        f.ms[i] = 10.0 - (double)i * 0.5; /* later is faster: the budget hides the best */
    f.advance_s = 0.01;                   /* each run "takes" 10 ms of tuning time */
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    o.batch = 4;
    o.budget_s = 0.5; /* a batch costs 4 × 11 runs = 0.44 s: two batches fit */
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 12, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.budget_cut, 1);
    assert_int_equal(r.n_measured, 8);
    assert_int_equal(r.n_skipped, 4);
    assert_int_equal(r.best, 7); /* best of those timed */
    for (size_t i = 8; i < 12; i++) {
        assert_int_equal(r.outcomes[i].state, TW_CAND_SKIPPED);
        assert_int_equal(f.measures[i], 0);
        assert_int_equal(f.compiles[i], 0);
        assert_int_equal(f.releases[i], 0);
    }
    if (fabs(r.elapsed_s - 0.88) > 1e-9)
        fail_msg("elapsed %g s by the fake clock, want 0.88", r.elapsed_s);
    tw_tune_result_free(&r);

    /* No budget: everything is timed and the true best found. */
    tw_fake_init(&f, c);
    for (size_t i = 0; i < 12; i++)
        f.ms[i] = 10.0 - (double)i * 0.5;
    f.advance_s = 0.01;
    o.budget_s = 0.0;
    assert_int_equal(tw_tune_run(NULL, c, 12, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.budget_cut, 0);
    assert_int_equal(r.best, 11);
    tw_tune_result_free(&r);

    /* A budget already spent by a first batch that all failed: the search goes on until
     * something is timed. */
    tw_fake_init(&f, c);
    for (size_t i = 0; i < 12; i++) {
        f.ms[i] = 1.0;
        if (i < 4)
            f.measure_fail_at[i] = 1;
    }
    f.advance_s = 1.0;
    o.budget_s = 0.5;
    assert_int_equal(tw_tune_run(NULL, c, 12, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.n_measured, 4);
    assert_int_equal(r.n_skipped, 4);
    assert_int_equal(r.best, 4);
    tw_tune_result_free(&r);
}

static void test_autotune_default_mode(void **state) {
    (void)state;
    tw_tune_config c[4];
    tw_toy(c, 4);
    tw_fake f;
    tw_fake_init(&f, c);
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    o.mode = TW_TUNE_DEFAULT_ONLY;
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 4, 2, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.best, 2);
    assert_int_equal(r.default_only, 1);
    assert_true(isnan(r.ms));
    assert_int_equal(r.measure_calls, 0);
    assert_int_equal(f.total_measures + f.compiles[2] + f.verifies[2], 0);
    tw_tune_result_free(&r);
    /* No default: the first candidate; no callbacks needed at all. */
    assert_int_equal(tw_tune_run(NULL, c, 4, SIZE_MAX, SIZE_MAX, NULL, &o, &r), TWELL_OK);
    assert_int_equal(r.best, 0);
    tw_tune_result_free(&r);
}

static void test_autotune_parallel_compile(void **state) {
    (void)state;
    tw_tune_config c[16];
    tw_toy(c, 16);
    tw_fake f;
    tw_fake_init(&f, c);
    for (size_t i = 0; i < 16; i++)
        f.ms[i] = 1.0 + (double)((i * 7) % 16);
    f.compile_sleep_us = 20000;
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    o.threads = 4;
    o.batch = 8;
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 16, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    for (size_t i = 0; i < 16; i++)
        assert_int_equal(f.compiles[i], 1);
    if (f.max_in_compile < 2 || f.max_in_compile > 4)
        fail_msg("%d compiles ran at once, want 2..4", f.max_in_compile);
    assert_int_equal(r.best, 0); /* (0 * 7) % 16 = 0 */
    tw_tune_result_free(&r);

    /* One thread: never concurrent. */
    tw_fake_init(&f, c);
    for (size_t i = 0; i < 16; i++)
        f.ms[i] = 1.0;
    f.compile_sleep_us = 1000;
    o.threads = 1;
    assert_int_equal(tw_tune_run(NULL, c, 16, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(f.max_in_compile, 1);
    tw_tune_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_autotune_selects_fastest),
        cmocka_unit_test(test_autotune_failures_score_infinity),
        cmocka_unit_test(test_autotune_all_fail),
        cmocka_unit_test(test_autotune_margin),
        cmocka_unit_test(test_autotune_ties_deterministic),
        cmocka_unit_test(test_autotune_budget),
        cmocka_unit_test(test_autotune_default_mode),
        cmocka_unit_test(test_autotune_parallel_compile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
