/*
 * cuda_train_dense_auto.c — AUTO's choice between the dense and the sparse training path from the
 * L0 known to the host without waiting (the counts both paths report), its out-of-memory fallback,
 * and the release of the dense workspace while the state runs sparse (TW_TD_RELEASE_*).
 */
#include "cuda_train_dense_int.h"

#include "train_auto.h"

#include <limits.h>
#include <stdio.h>

static tw_tdense *td_get(twell_train_state *state) { return state->dense; }

/* Reads the last dense count if its copy has landed (never waits). */
static twell_status td_collect(twell_ctx *ctx, tw_tdense *d) {
    if (!d->pending)
        return TWELL_OK;
    int done = 0;
    TW_TRY(tw_cuda_event_query(ctx, d->ev, &done));
    if (done) {
        d->pending = 0;
        d->est = (double)*d->hcount / (double)d->pending_M;
    }
    return TWELL_OK;
}

twell_status tw_ctd_pick(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                         const void *wg, const void *wu, const void *wd, const void *y, int *dense,
                         double *probe) {
    twell_ctx *ctx = plan->ctx;
    *dense = 0;
    *probe = 0.0;
    tw_tdense *d = NULL;
    TW_TRY(tw_ctd_create(ctx, state, &d));
    d->saved_M = 0; /* the forward about to run replaces the saved one, whatever its path */
    TW_TRY(td_collect(ctx, d));
    if (plan->path == TWELL_PATH_SPARSE)
        return TWELL_OK;
    const void *p[] = {x, wg, wu, wd, y};
    int forced = plan->path == TWELL_PATH_DENSE;
    if (!forced && M < TD_MIN_ROWS(d))
        return TWELL_OK; /* AUTO runs sparse: no need to build the dense kernels for it */
    TW_TRY(tw_ctd_prepare(plan, d, forced));
    int can = d->available && tw_ctd_aligned(p, 5) && M <= (size_t)INT_MAX;
    if (forced) {
        if (!d->available)
            return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                            "twell_ffn_forward_train: TWELL_PATH_DENSE is not available: %s",
                            d->why);
        if (!can)
            return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                            "twell_ffn_forward_train: TWELL_PATH_DENSE needs x, the weights and y "
                            "16-byte aligned and M < 2^31");
        *dense = 1;
        return TWELL_OK;
    }
    if (!can)
        return TWELL_OK;
    double thr = TD_THRESHOLD(d);
    if (thr <= 0.0)
        thr = TW_TD_DENSITY * (double)plan->shape.N;
    int pick = tw_train_auto_dense(d->est, d->last, M, TD_MIN_ROWS(d), thr, TW_TD_STAY);
    *dense = pick == TW_AUTO_DENSE;
    if (pick == TW_AUTO_PROBE)
        *probe = thr;
    return TWELL_OK;
}

twell_status tw_ctd_oom_fallback(twell_plan *plan, twell_train_state *state, size_t M,
                                 const void *x, const void *wg, const void *wu, const void *wd,
                                 void *y, float *stats, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    tw_tdense *d = state->dense;
    const void *p[] = {x, wg, wu, wd, y};
    char why[320];
    snprintf(why, sizeof why, "%s", tw_errmsg(ctx));
    if (d && tw_ctd_prepare(plan, d, 0) != TWELL_OK)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "%s (the dense fallback could not be built: %s)",
                        why, tw_errmsg(ctx));
    if (!d || !d->available || !tw_ctd_aligned(p, 5) || M > (size_t)INT_MAX)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "%s (the dense fallback cannot run: %s)", why,
                        d && d->why[0] ? d->why : "tensors not 16-byte aligned or M too large");
    tw_log(ctx, TWELL_LOG_WARN, "%s; running the dense path instead", why);
    twell_status st = tw_ctd_forward(plan, state, M, x, wg, wu, wd, y, stats, stream);
    if (st == TWELL_ERR_NO_MEMORY)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                        "twell_ffn_forward_train: neither path fits in device memory: the sparse "
                        "state could not grow (%s), and the dense path needs %zu bytes",
                        why, tw_ctd_bytes(&plan->shape, M));
    return st;
}

/* Frees the own workspace if the work that used it has finished (queried, never waited for);
 * 1 if it was freed. */
static int td_release(twell_ctx *ctx, tw_tdense *d) {
    int done = 1;
    if (d->ws_ev_set && tw_cuda_event_query(ctx, d->ws_ev, &done) != TWELL_OK)
        done = 0; /* a failing query: keep it (the error shows up at the next sync) */
    if (!done)
        return 0;
    tw_cuda_free(ctx, d->own);
    d->own = NULL;
    d->own_bytes = 0;
    d->buf = d->pu = d->part = NULL;
    d->ws_ev_set = 0;
    d->released = 1;
    d->releases++;
    return 1;
}

int tw_ctd_trim(twell_train_state *state) {
    tw_tdense *d = td_get(state);
    if (!d || !d->own || state->ws || d->saved_M != 0)
        return 0;
    d->ws_ev_set = 0; /* the caller synchronised the device */
    return td_release(state->plan->ctx, d);
}

void tw_ctd_note_sparse(twell_train_state *state, size_t M, uint64_t nnz) {
    tw_tdense *d = td_get(state);
    if (!d)
        return;
    d->est = (double)nnz / (double)M;
    d->pending = 0; /* newer than any dense count still in flight */
    d->last = TWELL_PATH_SPARSE;
    d->calls[TWELL_PATH_SPARSE]++;
    tw_ctd_note_bytes(state); /* before a release: the step held both */
    if (d->sparse_run < UINT_MAX)
        d->sparse_run++;
    /* the saved dense forward is gone (tw_ctd_pick), so nothing reads the workspace any more */
    if (d->own && !state->ws && d->sparse_run >= d->release_after)
        (void)td_release(state->plan->ctx, d);
}

void tw_ctd_note_counted(twell_train_state *state, size_t M, uint64_t nnz) {
    tw_tdense *d = td_get(state);
    if (!d)
        return;
    d->est = (double)nnz / (double)M;
    d->pending = 0;
}

int tw_ctd_saved(const twell_train_state *state, size_t M) {
    const tw_tdense *d = state->dense;
    return d && d->saved_M != 0 && d->saved_M == M;
}
