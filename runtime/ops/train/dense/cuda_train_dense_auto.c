/*
 * cuda_train_dense_auto.c — what the dense path keeps for AUTO: the L0 both paths report (its
 * estimate, read by cuda_train_pick.c), whether the saved forward is dense, and the release of
 * its workspace while the state runs sparse (TW_TD_RELEASE_*).
 */
#include "cuda_train_dense_int.h"

#include <limits.h>

static tw_tdense *td_get(twell_train_state *state) { return state->dense; }

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
