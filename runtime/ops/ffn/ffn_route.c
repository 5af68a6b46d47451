/*
 * ffn_route.c — the dispatch of a twell_ffn_infer call on CUDA (ffn_route.h): plan->path or AUTO's
 * choice (ffn_policy.h) from counts read back asynchronously into the dense state, the run through
 * the chosen path's header, what changes while the caller's stream is being captured, and
 * twell_ffn_layer's dense shortcut from x.
 */
#include "ffn_route.h"

#include "cuda_dense_int.h"
#include "cuda_gate_pack.h"
#include "cuda_gate_pack_tiled.h"
#include "cuda_small.h"
#include "op_plan.h"
#include "probe.h"

#include <string.h>

#define TW_DENSE_SMALL_COUNT 16u /* AUTO's small-batch calls: one in this many is counted */
#define TW_DENSE_RECOUNT 16u     /* twell_ffn_layer's dense calls: one in this many packs */

double tw_dense_thr(const tw_dense *d, const twell_shape *s, size_t M) {
    (void)d; /* read by the probe only */
    double thr = TW_PROBE_OR(d->probe.threshold, 0.0);
    return thr > 0.0 ? thr : tw_ffn_policy_dense_threshold(M, s->N);
}

/* AUTO's route for a call of M rows (dense_ok, small_ok: the dense route, the small-batch path
 * can run it); *row (when not NULL): the route is SMALL by rule 0, the row kernel's. */
tw_ffn_route tw_dense_route(const twell_plan *plan, const tw_dense *d, size_t M, int dense_ok,
                            int small_ok, int *row) {
    const tw_cuda_plan *cp = tw_op_plan(plan);
    tw_ffn_policy_in in;
    memset(&in, 0, sizeof in);
    in.M = M;
    in.N = plan->shape.N;
    in.est = d->est >= 0.0 ? d->est : d->hint;
    in.small_ok = small_ok;
    in.dense_ok = dense_ok;
    in.was_dense = d->last == TWELL_PATH_DENSE;
    in.dense_thr = TW_PROBE_OR(d->probe.threshold, 0.0);
    in.dense_min_rows = TW_PROBE_OR(d->probe.min_rows, 0);
    in.row_ok = small_ok && tw_small_row_ok(cp ? cp->small : NULL, M);
    in.ovf_seen = d->ovf_seen;
    in.heavy_seen = tw_cuda_ffn_rows_overflowed(cp ? cp->ffn : NULL);
    if (row)
        *row = tw_ffn_policy_row(&in);
    return tw_ffn_policy(&in);
}

int tw_cuda_dense_expected(twell_plan *plan, tw_dense *d, size_t M) {
    if (!d || d->available == 0)
        return 0;
    int want =
        plan->path == TWELL_PATH_DENSE ||
        (plan->path == TWELL_PATH_AUTO && tw_dense_route(plan, d, M, 1, 0, NULL) == TW_ROUTE_DENSE);
    return want && tw_dense_ready(plan, d);
}

/* The counts of an AUTO call the small-batch kernels ran (can: the dense route could run it). */
static twell_status tw_dense_small_count(twell_plan *plan, tw_dense *d, size_t M,
                                         const uint32_t *packed, int can, int capturing,
                                         twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    /* the small kernels count nothing: one eager call in TW_DENSE_SMALL_COUNT (the first
     * included), and every call while the estimate is within half the threshold, counts
     * its packed activation, so AUTO learns a density that makes their overflowing
     * row-tiles slow (dense first tokens, dense layers) within a call or two */
    const double est = d->est >= 0.0 ? d->est : d->hint;
    const int near = est >= 0.5 * tw_dense_thr(d, s, M);
    /* a count still in flight is kept until it lands (each new one would re-record the
     * event the next call asks, which a host ahead of the device never sees complete) */
    if (!capturing && d->gp_pending && !d->cnt_pending) {
        /* the cuBLASLt gate-pack counted this packed into mapped memory: free counts,
         * landed once this call's event (recorded after the gate-pack) completes */
        d->gp_pending = 0;
        TW_TRY(tw_dense_count_end(plan, d, d->gp_slot, M, 1, stream, d->cnt_done, 0, 1));
    } else if (can && !capturing && !d->cnt_pending &&
               (d->small_calls++ % TW_DENSE_SMALL_COUNT == 0 || near)) {
        unsigned slot = tw_dense_slot_take(d);
        TW_TRY(tw_cuda_memset_d32(ctx, d->dstats + 2u * slot, 0u, 4u, stream));
        TW_TRY(tw_dense_count(plan, d, M, packed, slot, stream));
        TW_TRY(tw_dense_count_end(plan, d, slot, M, 0, stream, d->cnt_done, 0, 1));
    }
    return TWELL_OK;
}

/* An eager AUTO call on the sparse path, its active values counted for the next calls' route.
 * The sparse pre-pass counts the active values into the slot (no counting kernel, no memset); a
 * call that runs a simple kernel instead is counted here. */
static twell_status tw_dense_sparse_counted(twell_plan *plan, tw_dense *d, tw_ffn *f, size_t M,
                                            const void *x, const uint32_t *packed, const void *wg,
                                            const void *wu, const void *wd, void *y,
                                            twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    unsigned slot = tw_dense_slot_take(d);
    int counted = 0;
    uint64_t *dst = d->hstats_dev ? d->hstats_dev + 2u * slot : d->dstats + 2u * slot;
    TW_TRY(tw_cuda_ffn_launch(plan, f, M, x, packed, wg, wu, wd, y, stream, 0, dst, &counted));
    if (!counted) {
        TW_TRY(tw_cuda_memset_d32(ctx, d->dstats + 2u * slot, 0u, 4u, stream));
        TW_TRY(tw_dense_count(plan, d, M, packed, slot, stream));
    }
    /* counted into mapped memory: the event tw_cuda_ffn_launch recorded after the pipeline
     * marks the counts too; else the counting kernels or the copy come after it */
    int in_host = counted && d->hstats_dev;
    TW_TRY(tw_dense_count_end(plan, d, slot, M, in_host, stream,
                              in_host ? tw_cuda_ffn_done_event(f) : d->cnt_done, in_host,
                              !counted));
    return TWELL_OK;
}

twell_status tw_cuda_dense_ffn_infer(twell_plan *plan, tw_dense *d, tw_ffn *f, size_t M,
                                     const void *x, const uint32_t *packed, const void *wg,
                                     const void *wu, const void *wd, void *y, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_small_ffn_call_begins(tw_op_plan(plan)->small);
    uintptr_t any = (uintptr_t)x | (uintptr_t)wu | (uintptr_t)wd | (uintptr_t)y |
                    (uintptr_t)(s->gated ? wg : NULL);
    int capturing = 0;
    TW_TRY(tw_cuda_stream_capturing(ctx, stream, &capturing));
    if ((any & 1u) || ((uintptr_t)packed & 3u))
        return tw_cuda_ffn_launch(plan, f, M, x, packed, wg, wu, wd, y, stream, capturing, NULL,
                                  NULL); /* its error */
    int can = (any & 15u) == 0 && tw_dense_ready(plan, d);
    int dense = 0;
    tw_small *sm = tw_op_plan(plan)->small;
    twell_status sst = TWELL_OK;
    /* the small-batch kernels (cuda_small.c): forced, or AUTO's route for few rows (counted now
     * and then for AUTO, below) */
    tw_small_avoid_row(sm, 0); /* forced and rule 0: the rule's kernels */
    if (tw_small_ffn_forced(plan, sm, M, (any & 15u) == 0, capturing)) {
        if (tw_small_ffn_try(plan, sm, M, x, packed, wg, wu, wd, y, capturing, stream, &sst)) {
            TW_TRY(sst);
            d->last = TWELL_PATH_SPARSE;
            d->calls[d->last]++;
            return TWELL_OK;
        }
    }
    /* While capturing nothing may query an event: the path is fixed from what the host knows. */
    if (!capturing)
        TW_TRY(tw_dense_collect(plan, d));
    if (plan->path == TWELL_PATH_DENSE) {
        if (!tw_dense_ready(plan, d))
            return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                            "twell_ffn_infer: TWELL_PATH_DENSE is not available for this plan: %s",
                            d->why);
        if (!can)
            return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                            "twell_ffn_infer: TWELL_PATH_DENSE needs x, the weights and y 16-byte "
                            "aligned");
        dense = 1;
    } else if (plan->path == TWELL_PATH_AUTO) {
        /* the row kernel only where rule 0 chose it; other small-path calls run the up and down
         * kernels (whose workspace a captured call must then have) */
        int row = 0; /* the row kernel may run (set above) while rule 0 decides */
        tw_ffn_route r = tw_dense_route(
            plan, d, M, can, tw_small_ffn_ok(plan, sm, M, (any & 15u) == 0, capturing), &row);
        if (r == TW_ROUTE_SMALL && !row) {
            tw_small_avoid_row(sm, 1);
            r = tw_dense_route(plan, d, M, can,
                               tw_small_ffn_ok(plan, sm, M, (any & 15u) == 0, capturing), NULL);
        }
        if (r == TW_ROUTE_SMALL &&
            tw_small_ffn_try(plan, sm, M, x, packed, wg, wu, wd, y, capturing, stream, &sst)) {
            TW_TRY(sst);
            TW_TRY(tw_dense_small_count(plan, d, M, packed, can, capturing, stream));
            d->last = TWELL_PATH_SPARSE;
            d->calls[d->last]++;
            return TWELL_OK;
        }
        dense = r == TW_ROUTE_DENSE;
    }
    const void *gate = NULL;
    if (dense)
        gate =
            tw_gate_lt_gate_for(plan, d->lt, M, x, s->gated ? wg : wu, packed, capturing, stream);
    if (dense)
        TW_TRY(tw_dense_workspace(plan, d, M, gate, capturing, &dense));
    if (dense)
        return tw_dense_call(plan, d, M, x, packed, gate, wg, wu, wd, y, capturing, stream);
    if (plan->path == TWELL_PATH_AUTO && can && !capturing) {
        TW_TRY(tw_dense_sparse_counted(plan, d, f, M, x, packed, wg, wu, wd, y, stream));
    } else {
        TW_TRY(tw_cuda_ffn_launch(plan, f, M, x, packed, wg, wu, wd, y, stream, capturing, NULL,
                                  NULL));
    }
    d->last = TWELL_PATH_SPARSE;
    d->calls[d->last]++;
    return TWELL_OK;
}

twell_status tw_cuda_dense_ffn_layer(twell_plan *plan, tw_dense *d, size_t M, const void *x,
                                     const void *wg, const void *wu, const void *wd, void *y,
                                     twell_stream stream, int *ran) {
    const twell_shape *s = &plan->shape;
    *ran = 0;
    uintptr_t any = (uintptr_t)x | (uintptr_t)wu | (uintptr_t)wd | (uintptr_t)y |
                    (uintptr_t)(s->gated ? wg : NULL);
    if (plan->path == TWELL_PATH_SPARSE || (any & 15u) || !tw_dense_ready(plan, d))
        return TWELL_OK; /* the packed call runs it, or reports why it cannot */
    int capturing = 0;
    TW_TRY(tw_cuda_stream_capturing(plan->ctx, stream, &capturing));
    tw_small *sm = tw_op_plan(plan)->small;
    if (tw_small_ffn_forced(plan, sm, M, 1, capturing))
        return TWELL_OK;
    if (plan->path == TWELL_PATH_AUTO) {
        if (!capturing)
            TW_TRY(tw_dense_collect(plan, d));
        tw_small_avoid_row(sm, 0);
        if (tw_dense_route(plan, d, M, 1, tw_small_ffn_ok(plan, sm, M, 1, capturing), NULL) !=
            TW_ROUTE_DENSE)
            return TWELL_OK;
        /* the estimate comes from packed counts: one eager call in TW_DENSE_RECOUNT (the first
         * included) packs, so AUTO follows the data back to a sparse route */
        if (!capturing && d->direct_seen++ % TW_DENSE_RECOUNT == 0u)
            return TWELL_OK;
    }
    int dense = 1;
    TW_TRY(tw_dense_workspace(plan, d, M, NULL, capturing, &dense));
    if (!dense)
        return TWELL_OK; /* AUTO without the workspace: the packed call runs sparse */
    /* no gate-pack ran: no gate buffer or count slot describes this call */
    tw_gate_lt_forget(d->lt);
    (void)tw_cuda_dense_gate_count(d, 0);
    tw_small_ffn_call_begins(sm);
    tw_small_gate_not_run(sm);
    TW_TRY(tw_dense_call(plan, d, M, x, NULL, NULL, wg, wu, wd, y, capturing, stream));
    d->direct_calls++;
    *ran = 1;
    return TWELL_OK;
}

static void tw_dense_lt_range(const tw_dense *d, size_t *lo, size_t *hi) {
    *lo = TW_POLICY_LT_GATE_MIN_ROWS, *hi = TW_POLICY_LT_GATE_MAX_ROWS;
    (void)d; /* read by the probe only */
    TW_PROBE_DO(if (d && (d->probe.lt_lo || d->probe.lt_hi)) *lo = d->probe.lt_lo,
                *hi = d->probe.lt_hi);
}

int tw_cuda_dense_gate_lt_wanted(twell_plan *plan, tw_dense *d, size_t M, const void *x,
                                 const void *w, const uint32_t *packed) {
    if (!d || (((uintptr_t)x | (uintptr_t)w | (uintptr_t)packed) & 15u))
        return 0;
    /* a kernel forced on the plan (tests, the bench) keeps its calls: the small path in FORCE
     * mode, a gate-pack variant other than the device's default */
    const tw_cuda_plan *cp = tw_op_plan(plan);
    if (tw_small_gate_forced(cp->small) ||
        (tw_sm90_gate_pack_supports(&plan->shape, plan->ctx->cuda) &&
         tw_cuda_gate_pack_variant(cp->gate_pack) != TW_GP_SM90))
        return 0;
    size_t lo, hi;
    tw_dense_lt_range(d, &lo, &hi);
    if (M >= lo && M <= hi)
        return tw_dense_ready(plan, d);
    return tw_cuda_dense_expected(plan, d, M);
}

size_t tw_cuda_dense_gate_lt_rows(twell_plan *plan, tw_dense *d, size_t max_M) {
    size_t lo, hi;
    tw_dense_lt_range(d, &lo, &hi);
    if (max_M > hi && tw_cuda_dense_expected(plan, d, max_M))
        return max_M; /* captured dense calls of up to max_M rows reuse the gate-pack's gate */
    return max_M < hi ? max_M : hi;
}
