/*
 * cuda_train_state.c — the sparse path's record of a CUDA training state: its creation with the
 * pinned totals and event, and its device buffers (grown on demand, dropped, counted in
 * state->bytes); the state's release is the op folder's (cuda_train_route.c).
 */
#include "cuda_train_int.h"

#include "cuda_train_dense.h"

#include <stdlib.h>
#include <string.h>

const char *const tw_ct_buf_names[TB_COUNT] = {
    "packed gate",    "u_ell",          "overflow mask",   "tile offsets",   "spill offsets",
    "row offsets",    "row chunks",     "row slots",       "scan blocks",    "totals",
    "spill",          "u_spill",        "chunk rows",      "chunk L1",       "entry columns",
    "entry Tm",       "row partials",   "entry dU",        "entry dP",       "histograms",
    "cursors",        "neuron offsets", "neuron tokens",   "neuron entries", "neuron chunks",
    "neuron slots",   "chunk neurons",  "neuron partials", "entry dT",       "spill dT",
    "heavy flags",    "heavy rows",     "heavy x",         "heavy y",        "heavy dy",
    "heavy workspace"};

/* ---- state ---- */

size_t tw_ct_bytes(const tw_ctrain *t) {
    size_t b = sizeof *t + 8u * sizeof(uint64_t);
    for (int i = 0; i < TB_COUNT; i++)
        b += t->buf[i].cap;
    return b + tw_ctt_bytes(t->tiled);
}

twell_status tw_ct_get(twell_ctx *ctx, twell_train_state *state, tw_ctrain **out) {
    *out = state->backend_data;
    if (*out)
        return TWELL_OK;
    tw_ctrain *t = calloc(1, sizeof *t);
    if (!t)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "twell_ffn_forward_train: out of host memory");
    void *h = NULL;
    twell_status st = tw_cuda_host_alloc(ctx, 8u * sizeof(uint64_t), &h);
    if (st == TWELL_OK)
        st = tw_cuda_event_create(ctx, &t->ev);
    if (st != TWELL_OK) {
        tw_cuda_host_free(ctx, h);
        free(t);
        return st;
    }
    t->htot = h;
    memset(t->htot, 0, 8u * sizeof(uint64_t));
    TW_PROBE_DO(t->probe.heavy = -1); /* the cost model's threshold, as the shipped library's */
    state->backend_data = t;
    state->bytes = tw_ct_bytes(t);
    *out = t;
    return TWELL_OK;
}

/* ---- buffers ---- */

/* Makes buf hold at least `bytes`. Growing frees the old buffer, so the device is synchronised
 * first (earlier work may still read it). Contents are not kept. */
twell_status tw_ct_reserve(twell_ctx *ctx, twell_train_state *state, tw_ctrain *t, int b,
                           size_t bytes, const char *fn, int *synced) {
    tw_dbuf *d = &t->buf[b];
    if (bytes == 0)
        bytes = 16;
    if (d->p && d->cap >= bytes)
        return TWELL_OK;
    if (!*synced) {
        twell_status st = tw_cuda_synchronize(ctx);
        if (st != TWELL_OK)
            return st;
        *synced = 1;
    }
    tw_cuda_free(ctx, d->p);
    d->p = NULL;
    d->cap = 0;
    size_t want = bytes + bytes / 8u; /* some headroom: step-to-step jitter does not reallocate */
    void *p = NULL;
    twell_status st = tw_cuda_malloc(ctx, want, &p);
    if (st != TWELL_OK) {
        want = bytes;
        st = tw_cuda_malloc(ctx, want, &p);
    }
    if (st != TWELL_OK && tw_ctd_trim(state)) { /* the idle dense workspace makes room */
        tw_log(ctx, TWELL_LOG_INFO,
               "%s: freed the dense path's idle workspace to make room for the %s", fn,
               tw_ct_buf_names[b]);
        st = tw_cuda_malloc(ctx, want, &p);
    }
    state->bytes = tw_ct_bytes(t);
    if (st != TWELL_OK)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                        "%s: cannot allocate %zu bytes of device memory for the %s (the state "
                        "holds %zu bytes)",
                        fn, bytes, tw_ct_buf_names[b], state->bytes);
    if (b == TB_SCAN) { /* the scans' flags and ticket start at zero (every byte they use) */
        st = tw_cuda_memset_d32(ctx, p, 0u, want / 4u, NULL);
        if (st == TWELL_OK)
            st = tw_cuda_synchronize(ctx);
        if (st != TWELL_OK) {
            tw_cuda_free(ctx, p);
            return st;
        }
    }
    d->p = p;
    d->cap = want;
    state->bytes = tw_ct_bytes(t);
    return TWELL_OK;
}

/* Frees every device buffer of t (the device synchronised first: work on any stream may still
 * read them); the modules, events and pinned totals stay. */
twell_status tw_ct_drop_buffers(twell_ctx *ctx, twell_train_state *state, tw_ctrain *t) {
    twell_status st = tw_cuda_synchronize(ctx);
    if (st != TWELL_OK)
        return st;
    for (int i = 0; i < TB_COUNT; i++) {
        tw_cuda_free(ctx, t->buf[i].p);
        t->buf[i].p = NULL;
        t->buf[i].cap = 0;
    }
    state->bytes = tw_ct_bytes(t);
    return TWELL_OK;
}
