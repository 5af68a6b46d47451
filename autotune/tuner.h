/*
 * tuner.h — choosing a configuration by measurement: candidates compiled in parallel, timed
 * interleaved (median of ≥ 10), failures scored +∞, deterministic ties, a 3% margin before a
 * stored winner is replaced, a time budget per shape; and the persistence of winners in the
 * cache so a second process measures nothing. The GPU plugs in through callbacks.
 */
#ifndef TWELL_TUNER_H
#define TWELL_TUNER_H

#include "cache.h"
#include "candidates.h"

#include <stddef.h>
#include <stdint.h>

/* ---- what the tuner calls ---- */

/* For every callback, cfg points INTO the candidate array given to tw_tune_run (its index is
 * cfg - candidates), so a caller can keep per-candidate state (a loaded module) in a parallel
 * array. A callback that fails makes its candidate score +∞; it is never called again for it
 * (except release). */
typedef struct tw_tune_callbacks {
    void *user;
    /* Optional. Called first, once, with the whole candidate array (for per-candidate state);
     * a failure ends the run with its status before any other callback. */
    twell_status (*begin)(void *user, const tw_tune_config *cands, size_t n);
    /* Optional. Prepares cfg (render, compile, keep the image). Called on up to
     * tw_tune_options.threads threads at once, each candidate once: must be thread-safe. */
    twell_status (*compile)(void *user, const tw_tune_config *cfg);
    /* Optional. Called on the tuner's thread once per compiled candidate before any timing:
     * load, run once on a small probe and compare with the CPU reference. */
    twell_status (*verify)(void *user, const tw_tune_config *cfg);
    /* Required. One timed run of cfg: *ms_out = its time in milliseconds (finite, ≥ 0). Called
     * on the tuner's thread only (it owns the device), warm-up runs included. */
    twell_status (*measure)(void *user, const tw_tune_config *cfg, double *ms_out);
    /* Optional. cfg will not be called again: drop what compile/verify kept. Called once for
     * every candidate the tuner worked on (not for skipped ones), on the tuner's thread, after
     * its batch was timed. */
    void (*release)(void *user, const tw_tune_config *cfg);
} tw_tune_callbacks;

/* Progress report: `done` of `total` candidates finished (measured, failed or skipped). */
typedef void (*tw_tune_progress_fn)(void *user, size_t done, size_t total, const char *phase);

typedef enum tw_tune_mode {
    TW_TUNE_MEASURE = 0,     /* tune: measure the candidates */
    TW_TUNE_DEFAULT_ONLY = 1 /* latency-critical first call: take the default, measure nothing */
} tw_tune_mode;

typedef struct tw_tune_options {
    tw_tune_mode mode;
    double budget_s; /* per shape; no new candidate batch starts after it; ≤ 0: no limit */
    int reps;        /* timed runs per candidate (the median is kept); raised to 10 if lower */
    int warmup;      /* untimed runs per candidate before timing */
    int threads;     /* compile threads; 0: online cores, at most 8 */
    size_t batch;    /* candidates timed interleaved together; 0: 8 */
    double margin;   /* a stored winner stays unless a challenger is this much faster */
    /* Seconds on a monotonic clock; NULL: CLOCK_MONOTONIC. Injected by tests. */
    double (*clock)(void *user);
    void *clock_user;
    tw_tune_progress_fn progress; /* may be NULL */
    void *progress_user;
} tw_tune_options;

#define TW_TUNE_DEFAULT_BUDGET_S 20.0
#define TW_TUNE_MIN_REPS 10
#define TW_TUNE_DEFAULT_MARGIN 0.03

/* MEASURE, 20 s, 10 reps, 1 warm-up, threads 0, batch 0, margin 0.03, real clock. */
tw_tune_options tw_tune_options_default(void);

/* ---- one run of the tuner over a candidate list ---- */

typedef enum tw_cand_state {
    TW_CAND_NOT_RUN = 0,  /* default-only mode, or never reached */
    TW_CAND_MEASURED,     /* compiled, verified and timed */
    TW_CAND_FAIL_COMPILE, /* +∞ */
    TW_CAND_FAIL_VERIFY,  /* +∞ */
    TW_CAND_FAIL_MEASURE, /* +∞ (launch failure, bad time) */
    TW_CAND_SKIPPED       /* not reached: the budget was spent */
} tw_cand_state;

/* "not run", "measured", "compile failed", ... */
const char *tw_cand_state_name(tw_cand_state s);

typedef struct tw_tune_outcome {
    tw_cand_state state;
    twell_status status; /* of the failing callback; TWELL_OK otherwise */
    double ms;           /* median; INFINITY unless measured */
    double min_ms, max_ms;
} tw_tune_outcome;

typedef struct tw_tune_result {
    size_t best;           /* index into the candidates */
    tw_tune_config config; /* candidates[best] */
    double ms;             /* its median; NAN in default-only mode */
    double default_ms;     /* the default's median: NAN if not measured, INFINITY if it failed */
    size_t n_candidates, n_measured, n_failed, n_skipped;
    int budget_cut;            /* the budget stopped the search before every candidate was timed */
    int default_only;          /* mode was TW_TUNE_DEFAULT_ONLY */
    int kept_incumbent;        /* the incumbent won only thanks to the margin */
    double elapsed_s;          /* by the options' clock */
    size_t measure_calls;      /* timed and warm-up runs requested */
    tw_tune_outcome *outcomes; /* n_candidates entries, malloc'd; tw_tune_result_free */
} tw_tune_result;

/* Chooses among cands[0..n). default_index: the untuned config (SIZE_MAX: none; then default-only
 * mode uses cands[0]); it is timed first so the gain over it can be reported. incumbent_index:
 * the stored winner being re-checked (SIZE_MAX: none); a challenger replaces it only when
 * challenger_ms·(1 + margin) ≤ incumbent_ms.
 *
 * Order of work: candidates go in batches of opt->batch (default and incumbent in the first);
 * each batch is compiled on opt->threads threads, verified, then timed interleaved: warm-up
 * rounds, then opt->reps rounds each calling measure once per live candidate, the starting
 * candidate rotating every round. Before each batch after the first, the budget is checked;
 * once it is spent and some candidate has been timed, the remaining candidates are SKIPPED and
 * budget_cut is set (with nothing timed yet, the search goes on: a result beats a deadline).
 * The winner is the smallest median; equal medians go to the smaller canonical string.
 *
 * Returns TWELL_OK with *out filled; when every candidate fails, the first failure's status
 * (candidate order) with a message on ctx naming the count and the first failing config;
 * TWELL_ERR_INVALID_ARG (no candidates, NULL measure outside default-only mode, bad index),
 * TWELL_ERR_NO_MEMORY. cb may be NULL in default-only mode. ctx may
 * be NULL (no messages). On failure *out holds the outcomes (for reports) but no winner;
 * tw_tune_result_free it either way. */
twell_status tw_tune_run(twell_ctx *ctx, const tw_tune_config *cands, size_t n,
                         size_t default_index, size_t incumbent_index, const tw_tune_callbacks *cb,
                         const tw_tune_options *opt, tw_tune_result *out);
void tw_tune_result_free(tw_tune_result *r); /* frees outcomes; NULL is a no-op */

/* ---- persistence of winners (TW_CACHE_TUNING records) ---- */

/* The version of the tuning library that a record's key includes: records of another version
 * are never seen. */
#define TW_TUNE_RECORD_VERSION 1

/* The key of a problem on a device: SHA-256 over (record version, op, K, N, T, C, dtype, gated,
 * M bucket, GPU name, arch, SM count, driver version, library version). p->M is bucketed here
 * again, so passing a raw M is harmless. */
void tw_tune_key(const tw_tune_problem *p, const tw_tune_device *d, tw_key *out);

typedef struct tw_tune_record {
    tw_tune_config config;
    double ms;         /* the winner's median when stored */
    double default_ms; /* the default config's median (INFINITY: it failed; NAN: not measured) */
    int64_t time;      /* seconds since the epoch */
} tw_tune_record;

/* Serialises a record as a few "key value" text lines (readable with `twell cache`); the
 * problem and device are echoed for people and ignored when read. *buf malloc'd. Errors:
 * TWELL_ERR_NO_MEMORY. */
twell_status tw_tune_record_encode(const tw_tune_record *r, const tw_tune_problem *p,
                                   const tw_tune_device *d, char **buf, size_t *len);

/* Parses an encoded record strictly (it comes from an untrusted file): TWELL_OK, or
 * TWELL_ERR_CORRUPT with *out zeroed. */
twell_status tw_tune_record_decode(const void *buf, size_t len, tw_tune_record *out);

/* Looks the problem up in ctx's cache: TWELL_OK with *out, TWELL_ERR_NOT_FOUND (no record, or a
 * corrupt one: logged at WARN), TWELL_ERR_NO_MEMORY. */
twell_status tw_tune_store_load(twell_ctx *ctx, const tw_tune_problem *p, const tw_tune_device *d,
                                tw_tune_record *out);

/* Stores a record for the problem in ctx's cache. Errors: TWELL_ERR_NO_MEMORY. */
twell_status tw_tune_store_save(twell_ctx *ctx, const tw_tune_problem *p, const tw_tune_device *d,
                                const tw_tune_record *r);

/* ---- the whole decision for one problem ---- */

typedef enum tw_tune_source {
    TW_TUNE_FROM_CACHE = 0, /* a stored winner: nothing compiled or measured */
    TW_TUNE_TUNED = 1,      /* measured now and stored */
    TW_TUNE_DEFAULT = 2     /* default-only mode: the untuned config, nothing stored */
} tw_tune_source;

/* "cached", "tuned", "default". */
const char *tw_tune_source_name(tw_tune_source s);

typedef struct tw_tune_choice {
    tw_tune_config config;
    tw_tune_source source;
    double ms, default_ms; /* as measured (now or when stored); NAN when unknown */
    int budget_cut, kept_incumbent;
    tw_prune_stats pruning; /* of the space (zero when nothing was enumerated) */
    size_t n_measured, n_failed, n_skipped;
    size_t measure_calls;
    double elapsed_s;
} tw_tune_choice;

/* The configuration to use for p on d from space s:
 *  1. a stored record that s still accepts for p and d → FROM_CACHE (no callback is called);
 *  2. else in TW_TUNE_DEFAULT_ONLY mode → the default (or the first unpruned config) → DEFAULT;
 *  3. else enumerate and prune s, tw_tune_run, store the winner → TUNED.
 * retune: skip step 1; a stored winner still valid is the incumbent (the margin applies).
 * A failed store is logged (WARN), not an error. Errors: TWELL_ERR_UNSUPPORTED (s does not
 * support p on d, or prunes every config), those of tw_tune_space_enumerate and tw_tune_run
 * (the message then starts with "tune <op> K=... M=<bucket>:"). On error *out holds no config,
 * only the pruning counts (for reports). */
twell_status tw_tune_select(twell_ctx *ctx, const tw_tune_problem *p, const tw_tune_device *d,
                            const tw_tune_space *s, const tw_tune_callbacks *cb,
                            const tw_tune_options *opt, int retune, tw_tune_choice *out);

#endif /* TWELL_TUNER_H */
