/*
 * cuda_dense.c — the dense route of twell_ffn_infer through cuBLASLt (the gate reused from the
 * plan's cuBLASLt gate-pack when it holds this call's gate, else computed; the up GEMM, h = g ⊙ u,
 * the down GEMM), its workspace, and the counts of the packed activation AUTO reads back
 * asynchronously (cuda_dense.h); the route choice that calls it is the op folder's ffn_route.c.
 */
#include "cuda_dense.h"
#include "cuda_dense_int.h"

#include "gate_pack_lt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bound of the fp32 [rows, N] u: rows are chunked so that u and h stay mostly L2-resident
 * between the GEMM that writes them and the kernel that reads them, while a chunk keeps the
 * GEMMs efficient (about 2048 rows at N = 5632). */
#define TW_DENSE_U_BYTES ((size_t)48 << 20)

twell_status tw_cuda_dense_init(twell_plan *plan, tw_gate_lt *lt, tw_dense **out) {
    *out = NULL;
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_dense *d = calloc(1, sizeof *d);
    if (!d)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "ffn_infer: out of memory for the dense state");
    d->est = -1.0;
    d->hint = -1.0;
    d->last = TWELL_PATH_AUTO;
    d->lt = lt;
    d->available = -1; /* known once cuBLASLt has been asked for (tw_dense_ready) */
    size_t rows = TW_DENSE_U_BYTES / (4u * (size_t)s->N) / 256u * 256u;
    d->chunk_rows = rows < 512u ? 512u : rows > 65536u ? 65536u : rows;
    void *hs = NULL;
    twell_status st = tw_cuda_malloc(ctx, TW_DENSE_SLOTS * 16u, (void **)&d->dstats);
    if (st == TWELL_OK)
        st = tw_cuda_host_alloc(ctx, TW_DENSE_SLOTS * 16u, &hs);
    d->hstats = hs;
    if (st == TWELL_OK)
        st = tw_cuda_event_create(ctx, &d->cnt_done);
    if (st != TWELL_OK) {
        tw_cuda_dense_release(plan, d);
        return st;
    }
    memset(d->hstats, 0, TW_DENSE_SLOTS * 16u);
    void *hd = NULL;
    if (tw_cuda_host_device_ptr(ctx, d->hstats, &hd) == TWELL_OK)
        d->hstats_dev = hd;
    *out = d;
    return TWELL_OK;
}

/* Whether the dense route can run (asks for cuBLASLt the first time: gate_pack_lt.h). */
int tw_dense_ready(twell_plan *plan, tw_dense *d) {
    if (d->available < 0) {
        const char *why = NULL;
        d->available = tw_gate_lt_available(plan, d->lt, &why);
        if (!d->available)
            snprintf(d->why, sizeof d->why, "cuBLASLt is unavailable: %s", why);
    }
    return d->available == 1;
}

void tw_cuda_dense_release(twell_plan *plan, tw_dense *d) {
    if (!d)
        return;
    twell_ctx *ctx = plan->ctx;
    tw_cuda_keep_release(ctx, &d->keep);
    tw_cuda_free(ctx, d->u);
    tw_cuda_free(ctx, d->h);
    tw_cuda_free(ctx, d->g);
    tw_cuda_free(ctx, d->dstats);
    tw_cuda_host_free(ctx, d->hstats);
    tw_cuda_event_destroy(ctx, d->cnt_done);
    free(d);
}

/* ---- counts ---- */

unsigned tw_dense_slot_take(tw_dense *d) {
    unsigned slot = d->next_slot;
    d->next_slot = (d->next_slot + 1u) % TW_DENSE_SLOTS;
    return slot;
}

/* Counts m rows of packed into slot `slot` (zeroed before). */
twell_status tw_dense_count(twell_plan *plan, tw_dense *d, size_t m, const uint32_t *packed,
                            unsigned slot, twell_stream stream) {
    return tw_gate_lt_count(plan, d->lt, m, packed, d->dstats + 2u * slot, stream);
}

/* The slot's counts to pinned memory (in_host: the kernels wrote them there already); the next
 * calls read them once event ev says they have landed. ev is recorded here on stream, unless
 * recorded is set: then the caller recorded it on stream after the counts' last write already.
 * Any later record of ev comes later in stream order (or on another stream that waited for it),
 * so its completion still says the counts have landed. */
twell_status tw_dense_count_end(twell_plan *plan, tw_dense *d, unsigned slot, size_t M, int in_host,
                                twell_stream stream, tw_cuda_event ev, int recorded, int ovf) {
    twell_ctx *ctx = plan->ctx;
    d->cnt_pending = 0; /* until ev is recorded after this slot's counts */
    if (!in_host)
        TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, d->hstats + 2u * slot, d->dstats + 2u * slot, 16u,
                                         stream));
    if (!recorded)
        TW_TRY(tw_cuda_event_record(ctx, ev, stream));
    d->cnt_ev = ev;
    d->slot_rows[slot] = M;
    d->slot_ovf[slot] = (unsigned char)ovf;
    d->last_slot = slot;
    d->last_in_host = in_host;
    d->counted = 1;
    d->cnt_pending = 1;
    return TWELL_OK;
}

/* Reads the latest counts if their copy has completed (never waits). */
twell_status tw_dense_collect(twell_plan *plan, tw_dense *d) {
    if (!d->cnt_pending)
        return TWELL_OK;
    int done = 0;
    TW_TRY(tw_cuda_event_query(plan->ctx, d->cnt_ev, &done));
    if (!done)
        return TWELL_OK;
    d->cnt_pending = 0;
    d->est = (double)d->hstats[2u * d->last_slot] / (double)d->slot_rows[d->last_slot];
    if (d->slot_ovf[d->last_slot])
        d->ovf_seen = d->hstats[2u * d->last_slot + 1u] != 0;
    return TWELL_OK;
}

/* ---- the dense route ---- */

/* Workspace for chunks of R rows: u and h (gated plans), and g where the gate must be computed
 * here (own_gate; once allocated g keeps growing with the others). Replacing a buffer waits for
 * the previous dense call first (it may still read the old one); a first allocation does not. On
 * failure the old buffers are kept. */
static twell_status tw_dense_reserve(twell_plan *plan, tw_dense *d, size_t R, int own_gate) {
    twell_ctx *ctx = plan->ctx;
    const size_t n = (size_t)plan->shape.N;
    const size_t rows = R > d->rows ? R : d->rows;
    const int grow = rows > d->rows;
    const int want_uh = plan->shape.gated, want_g = own_gate || d->g;
    const int new_uh = want_uh && (!d->h || grow), new_g = want_g && (!d->g || grow);
    if (!new_uh && !new_g) {
        d->rows = rows;
        return TWELL_OK;
    }
    if (tw_gate_lt_used(d->lt) && ((new_uh && d->h) || (new_g && d->g))) {
        TW_TRY(tw_cuda_event_synchronize(ctx, tw_gate_lt_done_event(d->lt)));
        d->grow_syncs++;
    }
    void *u = NULL, *h = NULL, *g = NULL;
    twell_status st = TWELL_OK;
    if (new_uh) {
        st = tw_cuda_malloc(ctx, rows * n * 4u, &u);
        if (st == TWELL_OK)
            st = tw_cuda_malloc(ctx, rows * n * 2u, &h);
    }
    if (st == TWELL_OK && new_g)
        st = tw_cuda_malloc(ctx, rows * n * 2u, &g);
    if (st != TWELL_OK) {
        tw_cuda_free(ctx, u);
        tw_cuda_free(ctx, h);
        return st;
    }
    if (new_uh) {
        tw_cuda_keep_free(ctx, &d->keep, d->captured, d->u);
        tw_cuda_keep_free(ctx, &d->keep, d->captured, d->h);
        d->u = u;
        d->h = h;
    }
    if (new_g) {
        tw_cuda_keep_free(ctx, &d->keep, d->captured, d->g);
        d->g = g;
    }
    d->rows = rows;
    return TWELL_OK;
}

/* The dense route for M rows (workspace reserved, stream ordered). gate: the gate-pack's g for
 * this call (all M rows), or NULL: computed here per chunk into d->g. */
static twell_status tw_dense_run(twell_plan *plan, tw_dense *d, size_t M, const void *x,
                                 const uint32_t *packed, const void *gate, const void *wg,
                                 const void *wu, const void *wd, void *y, int capturing,
                                 twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    const tw_lt_type t = tw_lt_type_of(s->dtype);
    /* the count: stored by the gate-pack whose gate this call reuses, else counted here; none
     * without packed (twell_ffn_layer's call from x: nothing was packed) */
    const int count = !capturing && packed;
    const int from_gp = count && gate && d->gp_pending;
    unsigned slot = from_gp ? d->gp_slot : count ? tw_dense_slot_take(d) : 0u;
    d->gp_pending = 0;
    if (count && !from_gp) {
        TW_TRY(tw_cuda_memset_d32(ctx, d->dstats + 2u * slot, 0u, 4u, stream));
        TW_TRY(tw_dense_count(plan, d, M, packed, slot, stream));
    }
    const size_t row_bytes = (size_t)s->N * 2u;
    for (size_t r0 = 0; r0 < M; r0 += d->rows) {
        size_t m = tw_min(M - r0, d->rows);
        const void *xc = (const char *)x + r0 * s->K * 2u;
        void *yc = (char *)y + r0 * s->K * 2u;
        const void *g = gate ? (const char *)gate + r0 * row_bytes : d->g;
        if (!gate) {
            const tw_lt_shape gs = {m, s->N, s->K, 1, t, t};
            TW_TRY(tw_gate_lt_matmul(plan, d->lt, &gs, xc, s->gated ? wg : wu, d->g, stream));
        }
        const void *h = g; /* g holds raw pre-activations: relu is applied below */
        if (!s->gated) {
            /* in place: relu is idempotent, so a gate-pack buffer reused again stays valid */
            TW_TRY(tw_gate_lt_relu(plan, d->lt, (void *)(uintptr_t)g, m * s->N, stream));
        } else {
            const tw_lt_shape us = {m, s->N, s->K, 1, t, TW_LT_FP32};
            TW_TRY(tw_gate_lt_matmul(plan, d->lt, &us, xc, wu, d->u, stream));
            TW_TRY(tw_gate_lt_mul(plan, d->lt, g, d->u, d->h, m * s->N, stream));
            h = d->h;
        }
        const tw_lt_shape ds = {m, s->K, s->N, 0, t, t};
        TW_TRY(tw_gate_lt_matmul(plan, d->lt, &ds, h, wd, yc, stream));
    }
    gate ? d->gate_reused++ : d->gate_computed++;
    /* a captured call's counts are not read back: the host may never see a graph's replays.
     * Eager: the cuBLASLt resources' event, recorded by the caller after this call's last work
     * (tw_gate_lt_end), marks the counts too */
    return !count ? TWELL_OK
                  : tw_dense_count_end(plan, d, slot, M, from_gp, stream,
                                       tw_gate_lt_done_event(d->lt), 1, 1);
}

twell_status tw_cuda_dense_reserve_rows(twell_plan *plan, tw_dense *d, size_t max_M) {
    if (!tw_dense_ready(plan, d))
        return TWELL_OK;
    /* a captured call that cannot reuse the gate-pack's g computes its own */
    return tw_dense_reserve(plan, d, tw_min(max_M, d->chunk_rows), 1);
}

void tw_cuda_dense_set_hint(tw_dense *d, double nnz_per_row) { d->hint = nnz_per_row; }

/* The workspace of a call AUTO or TWELL_PATH_DENSE sends to the dense route (gate: the
 * gate-pack's g it reuses, or NULL): reserved now when eager, checked when captured. Where it is
 * missing, TWELL_PATH_DENSE fails and AUTO runs the sparse path instead (*dense = 0). */
twell_status tw_dense_workspace(twell_plan *plan, tw_dense *d, size_t M, const void *gate,
                                int capturing, int *dense) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    if (capturing &&
        (d->rows == 0 || (!gate && !d->g) || (s->gated && !d->h) || (!gate && M > d->rows))) {
        /* nothing may be allocated during capture: the workspace comes from twell_plan_reserve
         * (or an earlier eager dense call) */
        if (plan->path == TWELL_PATH_DENSE)
            return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                            "twell_ffn_infer: TWELL_PATH_DENSE during stream capture needs its "
                            "workspace reserved first (twell_plan_reserve)");
        tw_log(ctx, TWELL_LOG_WARN,
               "ffn_infer: captured call: the dense workspace is not reserved; running sparse");
        *dense = 0;
    } else if (!capturing) {
        twell_status st = tw_dense_reserve(plan, d, tw_min(M, d->chunk_rows), gate == NULL);
        if (st != TWELL_OK && plan->path == TWELL_PATH_DENSE)
            return st;
        if (st != TWELL_OK) { /* AUTO: the sparse path is exact too */
            tw_log(ctx, TWELL_LOG_WARN,
                   "ffn_infer: dense workspace unavailable (%s); running sparse", tw_errmsg(ctx));
            *dense = 0;
        }
    }
    return TWELL_OK;
}

/* The dense route once its workspace is there: ordered after the plan's earlier cuBLASLt work
 * (eager), the call's route and counters recorded. */
twell_status tw_dense_call(twell_plan *plan, tw_dense *d, size_t M, const void *x,
                           const uint32_t *packed, const void *gate, const void *wg, const void *wu,
                           const void *wd, void *y, int capturing, twell_stream stream) {
    /* eager: ordered after the plan's earlier cuBLASLt work on other streams (the dense buffers
     * are shared), and its event recorded after this call's last work */
    if (!capturing)
        TW_TRY(tw_gate_lt_begin(plan, d->lt, stream));
    TW_TRY(tw_dense_run(plan, d, M, x, packed, gate, wg, wu, wd, y, capturing, stream));
    if (!capturing)
        TW_TRY(tw_gate_lt_end(plan, d->lt, stream));
    else
        d->captured = 1; /* the graph holds u, h and g from now on */
    d->last = TWELL_PATH_DENSE;
    d->calls[d->last]++;
    return TWELL_OK;
}

uint64_t *tw_cuda_dense_gate_count(tw_dense *d, int take) {
    d->gp_pending = 0;
    if (!take || !d || d->available != 1 || !d->hstats_dev)
        return NULL;
    d->gp_slot = tw_dense_slot_take(d);
    d->hstats[2u * d->gp_slot + 1u] = 0; /* the packing pass stores its overflowing tiles */
    d->gp_pending = 1;
    return d->hstats_dev + 2u * d->gp_slot;
}
