/*
 * cuda_train_route.c — the CUDA training entry points: each call's path, dense
 * (cuda_train_dense.c) or sparse (cuda_train.c), and AUTO's hand-overs between them (the probe,
 * the out-of-memory fallbacks, the counts it decides from); a state's release, both paths' parts.
 */
#include "cuda_train.h"
#include "cuda_train_int.h"

#include "cuda_train_dense.h"
#include "cuda_train_pick.h"

#include <stdlib.h>

/* ---- forward ---- */

/* The sparse forward, its count noted for AUTO (a probe's too, which stopped after it). */
static twell_status tw_ct_forward_noted(twell_plan *plan, size_t M, const void *x, const void *wg,
                                        const void *wu, const void *wd, void *y, float *stats,
                                        twell_train_state *state, double probe, int *to_dense,
                                        twell_stream stream) {
    twell_status st =
        tw_ct_forward(plan, M, x, wg, wu, wd, y, stats, state, probe, to_dense, stream);
    if (st == TWELL_OK) {
        const tw_ctrain *t = state->backend_data;
        if (*to_dense)
            tw_ctd_note_counted(state, M, t->nnz + t->hnnz);
        else
            tw_ctd_note_sparse(state, M, t->nnz + t->hnnz);
    }
    return st;
}

twell_status tw_cuda_train_forward(twell_plan *plan, size_t M, const void *x, const void *wg,
                                   const void *wu, const void *wd, void *y, float *stats,
                                   twell_train_state *state, twell_stream stream) {
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(plan->ctx, &sc);
    if (st != TWELL_OK)
        return st;
    /* dispatch hook: the dense path (cuda_train_dense.c) or the sparse one (cuda_train.c), which
     * under AUTO's probe (the first forward) may stop after its counts and hand over to the dense
     * one */
    int dense = 0, to_dense = 0;
    double probe = 0.0;
    st = tw_ctd_pick(plan, state, M, x, wg, wu, wd, y, &dense, &probe);
    if (st == TWELL_OK && !dense) {
        st = tw_ct_forward_noted(plan, M, x, wg, wu, wd, y, stats, state, probe, &dense, stream);
        if (st == TWELL_ERR_NO_MEMORY && plan->path == TWELL_PATH_AUTO)
            st = tw_ctd_oom_fallback(plan, state, M, x, wg, wu, wd, y, stats, stream);
    }
    if (st == TWELL_OK && dense) {
        st = tw_ctd_forward(plan, state, M, x, wg, wu, wd, y, stats, stream);
        if (st == TWELL_ERR_NO_MEMORY && plan->path == TWELL_PATH_AUTO) {
            tw_log(plan->ctx, TWELL_LOG_WARN, "%s; running the sparse path", tw_errmsg(plan->ctx));
            /* AUTO: the sparse path may still fit */
            st = tw_ct_forward_noted(plan, M, x, wg, wu, wd, y, stats, state, 0.0, &to_dense,
                                     stream);
        }
    }
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

/* ---- backward ---- */

twell_status tw_cuda_train_backward(twell_plan *plan, twell_train_state *state, size_t M,
                                    const void *x, const void *wg, const void *wu, const void *wd,
                                    const void *dy, float lambda, void *dx, float *dwg, float *dwu,
                                    float *dwd, twell_stream stream) {
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(plan->ctx, &sc);
    if (st != TWELL_OK)
        return st;
    if (tw_ctd_saved(state, M)) /* the backward follows the forward's path */
        st = tw_ctd_backward(plan, state, M, x, wg, wu, wd, dy, lambda, dx, dwg, dwu, dwd, stream);
    else
        st = tw_ct_backward(plan, state, M, x, wg, wu, wd, dy, lambda, dx, dwg, dwu, dwd, stream);
    if (st == TWELL_OK)
        tw_ctd_note_bytes(state);
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

/* ---- release ---- */

void tw_cuda_train_release(twell_train_state *state) {
    tw_ctd_release(state);
    if (!state || !state->backend_data)
        return;
    tw_ctrain *t = state->backend_data;
    twell_ctx *ctx = state->plan->ctx;
    tw_cu_scope sc;
    if (tw_cu_enter(ctx, &sc) == TWELL_OK) {
        (void)tw_cuda_synchronize(ctx); /* work on any stream may still use the buffers */
        for (int i = 0; i < TB_COUNT; i++)
            tw_cuda_free(ctx, t->buf[i].p);
        for (int i = 0; i < 2; i++)
            tw_cu_module_unload(t->mods[i].mod);
        tw_ctt_release(ctx, t->tiled);
        tw_cu_module_unload(t->hmod);
        tw_cuda_event_destroy(ctx, t->ev);
        TW_PROBE_DO(tw_ct_knobs_release(ctx, &t->probe));
        tw_cuda_host_free(ctx, t->htot);
        tw_cu_leave(ctx, &sc);
    }
    free(t);
    state->backend_data = NULL;
    state->bytes = 0;
    state->M = 0;
}
