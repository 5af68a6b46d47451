/*
 * cuda_train_pick.c — training AUTO's choice of a forward's path (the dense path's estimate read
 * without waiting, fed to train_auto.c's rule) and its out-of-memory fallback to the dense path.
 */
#include "cuda_train_pick.h"

#include "cuda_train_dense_int.h"
#include "train_auto.h"

#include <limits.h>
#include <stdio.h>

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
