/*
 * cuda_train_probe.c — the CUDA training state's test controls (test_control.h's TW_TC_TRAIN_*:
 * forced chunk lengths, the legacy-kernel switch, per-kernel profiling, download of the saved
 * state) and the profiling marks the ops record, compiled into the test library only.
 */
#include "cuda_train_int.h"
#include "test_control.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- profiling (TW_TC_TRAIN_PROFILE): off by default, one event per launch group ---- */

void tw_ct_mark(twell_ctx *ctx, tw_ctrain *t, const char *label, twell_stream stream) {
    tw_ctrain_knobs *p = &t->probe;
    if (!p->prof || p->npev >= TW_CT_PROF_MAX)
        return;
    if (!p->pev[p->npev] && tw_cuda_event_create(ctx, &p->pev[p->npev]) != TWELL_OK)
        return;
    if (tw_cuda_event_record(ctx, p->pev[p->npev], stream) != TWELL_OK)
        return;
    p->pev_lab[p->npev++] = label;
}

/* Waits for the last mark and adds each interval to its label's total. */
void tw_ct_prof_collect(twell_ctx *ctx, tw_ctrain *t) {
    tw_ctrain_knobs *p = &t->probe;
    for (int i = 1; p->prof && i < p->npev; i++) {
        float ms = 0.0f;
        if (tw_cuda_event_elapsed(ctx, p->pev[i - 1], p->pev[i], &ms) != TWELL_OK)
            break;
        int l = 0;
        while (l < p->nlab && strcmp(p->lab[l], p->pev_lab[i]) != 0)
            l++;
        if (l == p->nlab) {
            if (p->nlab == TW_CT_PROF_MAX)
                continue;
            p->lab[p->nlab++] = p->pev_lab[i];
        }
        p->lab_ms[l] += ms;
        p->lab_n[l]++;
    }
    p->npev = 0;
}

/* ---- test control (test_control.h's TW_TC_TRAIN_*) ---- */

/* The CUDA training backend of state for a knob below (created if the state has none yet);
 * TWELL_ERR_INVALID_ARG when state is NULL or not a CUDA state. */
static twell_status tw_cuda_train_knob(twell_train_state *state, tw_ctrain **t) {
    *t = NULL;
    if (!state || state->plan->ctx->backend != TWELL_BACKEND_CUDA)
        return TWELL_ERR_INVALID_ARG;
    return tw_ct_get(state->plan->ctx, state, t);
}

static twell_status tw_cuda_train_set_chunk_len(twell_train_state *state, uint64_t row_len,
                                                uint64_t nrn_len) {
    tw_ctrain *t;
    twell_status st = tw_cuda_train_knob(state, &t);
    if (st != TWELL_OK)
        return st;
    t->probe.row_len = row_len;
    t->probe.nrn_len = nrn_len;
    return TWELL_OK;
}

static twell_status tw_cuda_train_profile(twell_train_state *state, int on) {
    tw_ctrain *t;
    twell_status st = tw_cuda_train_knob(state, &t);
    if (st != TWELL_OK)
        return st;
    t->probe.prof = on;
    t->probe.nlab = 0;
    t->probe.npev = 0;
    memset(t->probe.lab_ms, 0, sizeof t->probe.lab_ms);
    memset(t->probe.lab_n, 0, sizeof t->probe.lab_n);
    return TWELL_OK;
}

static size_t tw_cuda_train_profile_report(const twell_train_state *state, char *buf, size_t cap) {
    const tw_ctrain *t = state ? state->backend_data : NULL;
    const tw_ctrain_knobs *p = t ? &t->probe : NULL;
    size_t len = 0;
    if (cap)
        buf[0] = 0;
    for (int l = 0; p && l < p->nlab && len < cap; l++) {
        int n = snprintf(buf + len, cap - len, "%-14s %8.4f ms (%u)\n", p->lab[l],
                         p->lab_n[l] ? p->lab_ms[l] / p->lab_n[l] : 0.0, p->lab_n[l]);
        if (n < 0)
            break;
        len += (size_t)n;
    }
    return len < cap ? len : cap;
}

static twell_status tw_cuda_train_set_heavy(twell_train_state *state, long long thr) {
    tw_ctrain *t;
    twell_status st = tw_cuda_train_knob(state, &t);
    if (st == TWELL_OK)
        t->probe.heavy = thr;
    return st;
}

static twell_status tw_cuda_train_set_legacy(twell_train_state *state, int on) {
    tw_ctrain *t;
    twell_status st = tw_cuda_train_knob(state, &t);
    if (st == TWELL_OK)
        t->probe.legacy = on;
    return st;
}

static twell_status tw_cuda_train_set_udt(twell_train_state *state, int tiled) {
    tw_ctrain *t;
    twell_status st = tw_cuda_train_knob(state, &t);
    if (st == TWELL_OK)
        t->probe.per_entry = tiled == 0;
    return st;
}

static int tw_cuda_train_udt_tiled(const twell_train_state *state) {
    const tw_ctrain *t = state ? state->backend_data : NULL;
    return t ? t->fwd_tiled != 0 : 0;
}

static int tw_cuda_train_last_vec(const twell_train_state *state) {
    const tw_ctrain *t = state ? state->backend_data : NULL;
    return t ? t->last_vec : 0;
}

static void tw_cuda_train_host_free(tw_cuda_train_host *h);

/* Copies `bytes` of buffer b into a new host array (NULL for 0 bytes is fine: 1 byte). */
static twell_status tw_ct_fetch(twell_ctx *ctx, const tw_ctrain *t, int b, size_t bytes,
                                void **out) {
    *out = malloc(bytes ? bytes : 1u);
    if (!*out)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tw_cuda_train_download: out of host memory");
    if (!bytes)
        return TWELL_OK;
    if (!t->buf[b].p || t->buf[b].cap < bytes)
        return tw_error(ctx, TWELL_ERR_INTERNAL, "tw_cuda_train_download: %s holds %zu < %zu",
                        tw_ct_buf_names[b], t->buf[b].cap, bytes);
    return tw_cuda_memcpy_dtoh(ctx, *out, t->buf[b].p, bytes);
}

static twell_status tw_cuda_train_download(twell_train_state *state, tw_cuda_train_host *h) {
    memset(h, 0, sizeof *h);
    const tw_ctrain *t = state ? state->backend_data : NULL;
    if (!t || t->M == 0 || state->plan->ctx->backend != TWELL_BACKEND_CUDA)
        return TWELL_ERR_INVALID_ARG;
    twell_ctx *ctx = state->plan->ctx;
    const twell_shape *s = &state->plan->shape;
    twell_status st = tw_cuda_synchronize(ctx);
    size_t M = t->M, NT = s->N / s->T, words = M * (s->N / s->C);
    h->M = M, h->nnz = t->nnz, h->spill_total = t->spill, h->nchunks = t->nchunks;
    h->pslots = t->pslots, h->E = t->E;
    void *p;
#define TW_FETCH(field, b, bytes)                                                                  \
    do {                                                                                           \
        if (st == TWELL_OK) {                                                                      \
            st = tw_ct_fetch(ctx, t, b, bytes, &p);                                                \
            h->field = p;                                                                          \
        }                                                                                          \
    } while (0)
    TW_FETCH(packed, TB_PACKED, words * 4u);
    TW_FETCH(u_ell, TB_U_ELL, words * 4u);
    TW_FETCH(tile_off, TB_TILE_OFF, (M * NT + 1) * 8u);
    TW_FETCH(spill_off, TB_SPILL_OFF, (M * NT + 1) * 8u);
    TW_FETCH(row_off, TB_ROW_OFF, (M + 1) * 8u);
    TW_FETCH(spill, TB_SPILL, t->spill * 4u);
    TW_FETCH(u_spill, TB_U_SPILL, t->spill * 4u);
    TW_FETCH(chunk_off, TB_CHUNK_OFF, (M + 1) * 8u);
    TW_FETCH(e_col, TB_E_COL, t->nnz * 4u);
    TW_FETCH(e_tm, TB_E_TM, t->nnz * 4u);
    if (t->have_bwd) {
        h->have_bwd = 1, h->E2 = t->E2, h->R = t->R, h->B = t->B;
        TW_FETCH(col_off, TB_COL_OFF, ((size_t)s->N + 1) * 8u);
        TW_FETCH(col_row, TB_COL_ROW, t->nnz * 4u);
        TW_FETCH(col_ent, TB_COL_ENT, t->nnz * 4u);
        TW_FETCH(e_du, TB_E_DU, t->nnz * 4u);
        TW_FETCH(e_dp, TB_E_DP, t->nnz * 4u);
    }
#undef TW_FETCH
    if (st != TWELL_OK)
        tw_cuda_train_host_free(h);
    return st;
}

static void tw_cuda_train_host_free(tw_cuda_train_host *h) {
    if (!h)
        return;
    void *p[] = {h->packed,  h->u_ell,   h->tile_off,  h->spill_off, h->row_off,
                 h->spill,   h->u_spill, h->chunk_off, h->e_col,     h->e_tm,
                 h->col_off, h->col_row, h->col_ent,   h->e_du,      h->e_dp};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
    memset(h, 0, sizeof *h);
}

twell_status tw_train_test_control(int op, va_list ap) {
    switch (op) {
    case TW_TC_TRAIN_HOST_FREE:
        tw_cuda_train_host_free(va_arg(ap, tw_cuda_train_host *));
        return TWELL_OK;
    }
    twell_train_state *state = va_arg(ap, twell_train_state *);
    if (!state)
        return TWELL_ERR_INVALID_ARG;
    switch (op) {
    case TW_TC_TRAIN_SET_CHUNK_LEN: {
        uint64_t row_len = va_arg(ap, uint64_t);
        uint64_t nrn_len = va_arg(ap, uint64_t);
        return tw_cuda_train_set_chunk_len(state, row_len, nrn_len);
    }
    case TW_TC_TRAIN_DOWNLOAD:
        return tw_cuda_train_download(state, va_arg(ap, tw_cuda_train_host *));
    case TW_TC_TRAIN_SET_LEGACY:
        return tw_cuda_train_set_legacy(state, va_arg(ap, int));
    case TW_TC_TRAIN_PROFILE:
        return tw_cuda_train_profile(state, va_arg(ap, int));
    case TW_TC_TRAIN_PROFILE_REPORT: {
        char *buf = va_arg(ap, char *);
        size_t cap = va_arg(ap, size_t);
        *va_arg(ap, size_t *) = tw_cuda_train_profile_report(state, buf, cap);
        return TWELL_OK;
    }
    case TW_TC_TRAIN_SET_UDT:
        return tw_cuda_train_set_udt(state, va_arg(ap, int));
    case TW_TC_TRAIN_UDT_TILED:
        *va_arg(ap, int *) = tw_cuda_train_udt_tiled(state);
        return TWELL_OK;
    case TW_TC_TRAIN_LAST_VEC:
        *va_arg(ap, int *) = tw_cuda_train_last_vec(state);
        return TWELL_OK;
    case TW_TC_TRAIN_SET_HEAVY:
        return tw_cuda_train_set_heavy(state, va_arg(ap, long long));
    case TW_TC_TRAIN_HEAVY_ROWS: {
        const tw_ctrain *t = state->backend_data;
        size_t *rows = va_arg(ap, size_t *);
        uint64_t *nnz = va_arg(ap, uint64_t *);
        uint32_t *thr = va_arg(ap, uint32_t *);
        *rows = t && t->M ? t->nh : 0u;
        *nnz = t && t->M ? t->hnnz : 0u;
        *thr = t && t->M ? t->hthr : 0u;
        return TWELL_OK;
    }
    case TW_TC_TRAIN_SET_SCAN_EPOCH: {
        tw_ctrain *t = state->backend_data;
        unsigned epoch = va_arg(ap, unsigned);
        if (!t)
            return TWELL_ERR_INVALID_ARG;
        t->scan_epoch = epoch;
        return TWELL_OK;
    }
    }
    return TWELL_ERR_INVALID_ARG;
}
