/*
 * cuda_train_dense_probe.c — the dense training path's test controls (test_control.h's TW_TC_TD_*:
 * the path last run, the AUTO estimate and threshold, the weight-gradient ring depth, the saved
 * gate, call counts, the own workspace's bytes and releases, the state's peak bytes), compiled
 * into the test library only.
 */
#include "cuda_train_dense_int.h"

#include "test_control.h"

#include <stdlib.h>

/* ---- test control (test_control.h's TW_TC_TD_*) ---- */

static twell_path tw_ctd_last_path(const twell_train_state *state) {
    const tw_tdense *d = state ? state->dense : NULL;
    return d ? d->last : TWELL_PATH_AUTO;
}

static double tw_ctd_estimate(const twell_train_state *state) {
    const tw_tdense *d = state ? state->dense : NULL;
    return d ? d->est : -1.0;
}

static twell_status tw_ctd_set_threshold(twell_train_state *state, double nnz_per_row,
                                         size_t min_rows) {
    tw_tdense *d = NULL;
    TW_TRY(tw_ctd_create(state->plan->ctx, state, &d));
    d->probe.threshold = nnz_per_row > 0.0 ? nnz_per_row : 0.0;
    d->probe.min_rows = min_rows;
    return TWELL_OK;
}

static twell_status tw_ctd_set_wgrad_stages(twell_train_state *state, unsigned stages) {
    tw_tdense *d = NULL;
    TW_TRY(tw_ctd_create(state->plan->ctx, state, &d));
    if (d->loaded || (stages != 0 && (stages < 2 || stages > 4)))
        return tw_error(state->plan->ctx, TWELL_ERR_INVALID_ARG,
                        "TW_TC_TD_SET_WGRAD_STAGES: %u (2..4, 0 default) must be set before the "
                        "first dense forward",
                        stages);
    d->probe.wg_stages = stages;
    return TWELL_OK;
}

static twell_status tw_ctd_download_p(twell_train_state *state, size_t M, uint16_t *p) {
    tw_tdense *d = state ? state->dense : NULL;
    if (!d || d->saved_M != M)
        return TWELL_ERR_INVALID_ARG;
    twell_ctx *ctx = state->plan->ctx;
    size_t n = M * state->plan->shape.N;
    uint32_t *w = malloc(n * 4u);
    if (!w)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tw_ctd_download_p: out of host memory");
    twell_status st = tw_cuda_synchronize(ctx);
    if (st == TWELL_OK)
        st = tw_cuda_memcpy_dtoh(ctx, w, d->pu, n * 4u);
    for (size_t i = 0; st == TWELL_OK && i < n; i++)
        p[i] = (uint16_t)(w[i] & 0xffffu);
    free(w);
    return st;
}

static unsigned long tw_ctd_calls(const twell_train_state *state, twell_path path) {
    const tw_tdense *d = state ? state->dense : NULL;
    if (!d || (int)path < 0 || (int)path > 2)
        return 0;
    return d->calls[path];
}

twell_status tw_td_test_control(int op, va_list ap) {
    twell_train_state *state = va_arg(ap, twell_train_state *);
    if (!state)
        return TWELL_ERR_INVALID_ARG;
    switch (op) {
    case TW_TC_TD_LAST_PATH:
        *va_arg(ap, twell_path *) = tw_ctd_last_path(state);
        return TWELL_OK;
    case TW_TC_TD_ESTIMATE:
        *va_arg(ap, double *) = tw_ctd_estimate(state);
        return TWELL_OK;
    case TW_TC_TD_SET_THRESHOLD: {
        double nnz_per_row = va_arg(ap, double);
        size_t min_rows = va_arg(ap, size_t);
        return tw_ctd_set_threshold(state, nnz_per_row, min_rows);
    }
    case TW_TC_TD_SET_WGRAD_STAGES:
        return tw_ctd_set_wgrad_stages(state, va_arg(ap, unsigned));
    case TW_TC_TD_DOWNLOAD_P: {
        size_t M = va_arg(ap, size_t);
        return tw_ctd_download_p(state, M, va_arg(ap, uint16_t *));
    }
    case TW_TC_TD_CALLS: {
        twell_path path = (twell_path)va_arg(ap, int); /* an enum argument arrives as an int */
        *va_arg(ap, unsigned long *) = tw_ctd_calls(state, path);
        return TWELL_OK;
    }
    case TW_TC_TD_WORKSPACE_BYTES: {
        const tw_tdense *d = state->dense;
        *va_arg(ap, size_t *) = d ? d->own_bytes : 0u;
        return TWELL_OK;
    }
    case TW_TC_TD_RELEASES: {
        const tw_tdense *d = state->dense;
        *va_arg(ap, unsigned long *) = d ? d->releases : 0u;
        return TWELL_OK;
    }
    case TW_TC_TD_PEAK_BYTES: {
        int reset = va_arg(ap, int);
        size_t *out = va_arg(ap, size_t *);
        tw_tdense *d = state->dense;
        /* twell_train_state_bytes's sum, without a public call from below the API */
        size_t now = state->bytes + tw_ctd_held(state);
        *out = d && d->peak > now ? d->peak : now;
        if (d && reset)
            d->peak = now;
        return TWELL_OK;
    }
    }
    return TWELL_ERR_INVALID_ARG;
}
