/*
 * tuner.c — one tuning run over a candidate list: batches compiled on worker threads, verified,
 * timed interleaved on the caller's thread, scored by median with +∞ for failures, and the
 * winner chosen deterministically (with a margin in favour of a stored incumbent).
 */
#include "tuner.h"

#include "internal.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

tw_tune_options tw_tune_options_default(void) {
    tw_tune_options o;
    memset(&o, 0, sizeof o);
    o.mode = TW_TUNE_MEASURE;
    o.budget_s = TW_TUNE_DEFAULT_BUDGET_S;
    o.reps = TW_TUNE_MIN_REPS;
    o.warmup = 1;
    o.margin = TW_TUNE_DEFAULT_MARGIN;
    return o;
}

const char *tw_cand_state_name(tw_cand_state s) {
    switch (s) {
    case TW_CAND_NOT_RUN:
        return "not run";
    case TW_CAND_MEASURED:
        return "measured";
    case TW_CAND_FAIL_COMPILE:
        return "compile failed";
    case TW_CAND_FAIL_VERIFY:
        return "verification failed";
    case TW_CAND_FAIL_MEASURE:
        return "launch or timing failed";
    case TW_CAND_SKIPPED:
        return "skipped (budget)";
    }
    return "?";
}

static double tw_monotonic_s(void *user) {
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int tw_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- parallel compile of one batch ---- */

typedef struct tw_compile_job {
    const tw_tune_callbacks *cb;
    const tw_tune_config *cands;
    const size_t *idx; /* candidates of the batch */
    twell_status *status;
    size_t k;
    size_t next;
    pthread_mutex_t mu;
} tw_compile_job;

static void *tw_compile_worker(void *arg) {
    tw_compile_job *job = arg;
    for (;;) {
        pthread_mutex_lock(&job->mu);
        size_t j = job->next++;
        pthread_mutex_unlock(&job->mu);
        if (j >= job->k)
            return NULL;
        job->status[j] = job->cb->compile(job->cb->user, &job->cands[job->idx[j]]);
    }
}

/* Compiles the batch on up to `threads` threads (the caller's thread counts as one), falling
 * back to fewer when a thread cannot be started: compiling is never skipped for that. */
static void tw_compile_batch(const tw_tune_callbacks *cb, const tw_tune_config *cands,
                             const size_t *idx, size_t k, int threads, twell_status *status) {
    tw_compile_job job = {cb, cands, idx, status, k, 0, PTHREAD_MUTEX_INITIALIZER};
    pthread_t tids[8];
    size_t nt = 0, want = threads > 1 ? (size_t)threads - 1 : 0;
    if (want > k - 1)
        want = k - 1;
    if (want > sizeof tids / sizeof tids[0])
        want = sizeof tids / sizeof tids[0];
    while (nt < want && pthread_create(&tids[nt], NULL, tw_compile_worker, &job) == 0)
        nt++;
    tw_compile_worker(&job);
    for (size_t t = 0; t < nt; t++)
        pthread_join(tids[t], NULL);
    pthread_mutex_destroy(&job.mu);
}

/* ---- the run ---- */

static int tw_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

/* Times the live members of one batch; marks failures. samples: k × reps scratch. */
static void tw_time_batch(const tw_tune_callbacks *cb, const tw_tune_config *cands,
                          const size_t *idx, size_t k, int *alive, const tw_tune_options *o,
                          double *samples, tw_tune_outcome *oc, size_t *calls) {
    const int rounds = o->warmup + o->reps;
    for (int r = 0; r < rounds; r++) {
        size_t start = (size_t)r % k;
        for (size_t jj = 0; jj < k; jj++) {
            size_t j = (start + jj) % k;
            if (!alive[j])
                continue;
            double ms = NAN;
            (*calls)++;
            twell_status st = cb->measure(cb->user, &cands[idx[j]], &ms);
            if (st == TWELL_OK && !(isfinite(ms) && ms >= 0.0))
                st = TWELL_ERR_INTERNAL; /* a time that cannot be right counts as a failure */
            if (st != TWELL_OK) {
                alive[j] = 0;
                oc[idx[j]].state = TW_CAND_FAIL_MEASURE;
                oc[idx[j]].status = st;
                continue;
            }
            if (r >= o->warmup)
                samples[j * (size_t)o->reps + (size_t)(r - o->warmup)] = ms;
        }
    }
    for (size_t j = 0; j < k; j++) {
        if (!alive[j])
            continue;
        double *s = samples + j * (size_t)o->reps;
        qsort(s, (size_t)o->reps, sizeof *s, tw_cmp_double);
        size_t h = (size_t)o->reps / 2;
        tw_tune_outcome *t = &oc[idx[j]];
        t->state = TW_CAND_MEASURED;
        t->ms = o->reps % 2 ? s[h] : 0.5 * (s[h - 1] + s[h]);
        t->min_ms = s[0];
        t->max_ms = s[o->reps - 1];
    }
}

void tw_tune_result_free(tw_tune_result *r) {
    if (!r)
        return;
    free(r->outcomes);
    r->outcomes = NULL;
}

static twell_status tw_all_failed(twell_ctx *ctx, const tw_tune_config *cands, size_t n,
                                  const tw_tune_outcome *oc) {
    for (size_t i = 0; i < n; i++) {
        if (oc[i].state != TW_CAND_FAIL_COMPILE && oc[i].state != TW_CAND_FAIL_VERIFY &&
            oc[i].state != TW_CAND_FAIL_MEASURE)
            continue;
        char canon[TW_TUNE_CANON_MAX];
        tw_tune_config_canon(&cands[i], canon, sizeof canon);
        twell_status st = oc[i].status != TWELL_OK ? oc[i].status : TWELL_ERR_INTERNAL;
        return tw_error(ctx, st, "tune: all %zu candidates failed; first: %s: %s (%s)", n, canon,
                        tw_cand_state_name(oc[i].state), twell_status_name(st));
    }
    return tw_error(ctx, TWELL_ERR_INTERNAL, "tune: no candidate was timed");
}

/* opt (NULL: the defaults) with every unset or out-of-range field at its default, the batch at
 * most n. */
static tw_tune_options tw_tune_options_fill(const tw_tune_options *opt, size_t n) {
    tw_tune_options o = opt ? *opt : tw_tune_options_default();
    if (o.reps < TW_TUNE_MIN_REPS)
        o.reps = TW_TUNE_MIN_REPS;
    if (o.warmup < 0)
        o.warmup = 0;
    if (o.threads <= 0)
        o.threads = tw_default_threads();
    if (o.batch == 0)
        o.batch = 8;
    if (o.batch > n)
        o.batch = n;
    if (!(o.margin >= 0.0))
        o.margin = TW_TUNE_DEFAULT_MARGIN;
    return o;
}

/* The order candidates are run in: default and incumbent first, so they are timed even when the
 * budget cuts the rest, then the others by index. */
static void tw_tune_order(size_t *order, size_t n, size_t default_index, size_t incumbent_index) {
    size_t no = 0;
    if (default_index != SIZE_MAX)
        order[no++] = default_index;
    if (incumbent_index != SIZE_MAX && incumbent_index != default_index)
        order[no++] = incumbent_index;
    for (size_t i = 0; i < n; i++)
        if (i != default_index && i != incumbent_index)
            order[no++] = i;
}

/* Scratch of one batch: its candidates, their compile/verify status, which are still alive and
 * the timing samples (batch × reps). */
typedef struct tw_batch_scratch {
    size_t *idx;
    twell_status *cst;
    int *alive;
    double *samples;
} tw_batch_scratch;

/* Runs the k candidates of b->idx: compiled on worker threads, verified, timed, released; their
 * outcomes and the counts into out. */
static void tw_run_batch(const tw_tune_callbacks *cb, const tw_tune_config *cands, size_t k,
                         const tw_tune_options *o, tw_batch_scratch *b, size_t done, size_t n,
                         tw_tune_result *out) {
    size_t *idx = b->idx;
    for (size_t j = 0; j < k; j++)
        b->cst[j] = TWELL_OK;
    if (cb->compile)
        tw_compile_batch(cb, cands, idx, k, o->threads, b->cst);
    if (o->progress)
        o->progress(o->progress_user, done, n, "compiled");
    for (size_t j = 0; j < k; j++) {
        tw_tune_outcome *t = &out->outcomes[idx[j]];
        b->alive[j] = 0;
        if (b->cst[j] != TWELL_OK) {
            t->state = TW_CAND_FAIL_COMPILE;
            t->status = b->cst[j];
        } else if (cb->verify && (b->cst[j] = cb->verify(cb->user, &cands[idx[j]])) != TWELL_OK) {
            t->state = TW_CAND_FAIL_VERIFY;
            t->status = b->cst[j];
        } else {
            b->alive[j] = 1;
        }
    }
    tw_time_batch(cb, cands, idx, k, b->alive, o, b->samples, out->outcomes, &out->measure_calls);
    for (size_t j = 0; j < k; j++) {
        if (cb->release)
            cb->release(cb->user, &cands[idx[j]]);
        if (out->outcomes[idx[j]].state == TW_CAND_MEASURED)
            out->n_measured++;
        else
            out->n_failed++;
    }
}

/* The run itself: the candidates in order, batch by batch, until the budget is spent (then the
 * rest are marked skipped). TWELL_ERR_NO_MEMORY (nothing run) or TWELL_OK. */
static twell_status tw_run_batches(const tw_tune_config *cands, size_t n, size_t default_index,
                                   size_t incumbent_index, const tw_tune_callbacks *cb,
                                   const tw_tune_options *o, tw_tune_result *out) {
    double (*clk)(void *) = o->clock ? o->clock : tw_monotonic_s;
    size_t *order = malloc(n * sizeof *order);
    tw_batch_scratch b = {malloc(o->batch * sizeof *b.idx), malloc(o->batch * sizeof *b.cst),
                          malloc(o->batch * sizeof *b.alive),
                          malloc(o->batch * (size_t)o->reps * sizeof *b.samples)};
    if (!order || !b.idx || !b.cst || !b.alive || !b.samples) {
        free(order), free(b.idx), free(b.cst), free(b.alive), free(b.samples);
        return TWELL_ERR_NO_MEMORY;
    }
    tw_tune_order(order, n, default_index, incumbent_index);
    const double t0 = clk(o->clock_user);
    size_t done = 0;
    for (size_t pos = 0; pos < n; pos += o->batch) {
        if (pos > 0 && o->budget_s > 0.0 && out->n_measured > 0 &&
            clk(o->clock_user) - t0 >= o->budget_s) {
            for (size_t q = pos; q < n; q++)
                out->outcomes[order[q]].state = TW_CAND_SKIPPED;
            out->n_skipped = n - pos;
            out->budget_cut = 1;
            break;
        }
        size_t k = n - pos < o->batch ? n - pos : o->batch;
        memcpy(b.idx, order + pos, k * sizeof *b.idx);
        tw_run_batch(cb, cands, k, o, &b, done, n, out);
        done += k;
        if (o->progress)
            o->progress(o->progress_user, done, n, "timed");
    }
    if (out->budget_cut && o->progress)
        o->progress(o->progress_user, n, n, "budget spent");
    out->elapsed_s = clk(o->clock_user) - t0;
    free(order), free(b.idx), free(b.cst), free(b.alive), free(b.samples);
    return TWELL_OK;
}

/* The winner: the fastest measured candidate (ties to the smaller configuration), unless the
 * incumbent is within the margin of it. */
static twell_status tw_pick_best(twell_ctx *ctx, const tw_tune_config *cands, size_t n,
                                 size_t default_index, size_t incumbent_index, double margin,
                                 tw_tune_result *out) {
    if (default_index != SIZE_MAX) {
        const tw_tune_outcome *d = &out->outcomes[default_index];
        out->default_ms = d->state == TW_CAND_MEASURED ? d->ms : INFINITY;
    }
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        const tw_tune_outcome *t = &out->outcomes[i];
        if (t->state != TW_CAND_MEASURED)
            continue;
        if (best == SIZE_MAX || t->ms < out->outcomes[best].ms ||
            (t->ms == out->outcomes[best].ms && tw_tune_config_cmp(&cands[i], &cands[best]) < 0))
            best = i;
    }
    if (best == SIZE_MAX)
        return tw_all_failed(ctx, cands, n, out->outcomes);
    if (incumbent_index != SIZE_MAX && best != incumbent_index &&
        out->outcomes[incumbent_index].state == TW_CAND_MEASURED &&
        !(out->outcomes[best].ms * (1.0 + margin) <= out->outcomes[incumbent_index].ms)) {
        best = incumbent_index;
        out->kept_incumbent = 1;
    }
    out->best = best;
    out->config = cands[best];
    out->ms = out->outcomes[best].ms;
    return TWELL_OK;
}

twell_status tw_tune_run(twell_ctx *ctx, const tw_tune_config *cands, size_t n,
                         size_t default_index, size_t incumbent_index, const tw_tune_callbacks *cb,
                         const tw_tune_options *opt, tw_tune_result *out) {
    memset(out, 0, sizeof *out);
    out->ms = NAN;
    out->default_ms = NAN;
    if (!cands || n == 0)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "tune: no candidates");
    if ((default_index != SIZE_MAX && default_index >= n) ||
        (incumbent_index != SIZE_MAX && incumbent_index >= n))
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "tune: default_index %zu or incumbent_index %zu outside %zu candidates",
                        default_index, incumbent_index, n);
    tw_tune_options o = tw_tune_options_fill(opt, n);
    if (o.mode != TW_TUNE_DEFAULT_ONLY && (!cb || !cb->measure))
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "tune: no measure callback");

    out->n_candidates = n;
    out->outcomes = malloc(n * sizeof *out->outcomes);
    if (!out->outcomes)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory");
    for (size_t i = 0; i < n; i++)
        out->outcomes[i] =
            (tw_tune_outcome){TW_CAND_NOT_RUN, TWELL_OK, INFINITY, INFINITY, INFINITY};

    if (o.mode == TW_TUNE_DEFAULT_ONLY) {
        out->default_only = 1;
        out->best = default_index != SIZE_MAX ? default_index : 0;
        out->config = cands[out->best];
        return TWELL_OK;
    }

    if (cb->begin) {
        twell_status bst = cb->begin(cb->user, cands, n);
        if (bst != TWELL_OK) {
            tw_tune_result_free(out);
            return bst;
        }
    }
    if (tw_run_batches(cands, n, default_index, incumbent_index, cb, &o, out) != TWELL_OK) {
        tw_tune_result_free(out);
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tune: out of memory");
    }
    return tw_pick_best(ctx, cands, n, default_index, incumbent_index, o.margin, out);
}
