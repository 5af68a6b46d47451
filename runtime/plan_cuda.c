/*
 * plan_cuda.c — a plan's CUDA side (internal.h): the per-plan kernels of every op and the
 * dispatch of the ops to their launchers under runtime/ops/.
 */
#include "plan_cuda.h"
#include "cuda_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- plans ---- */

static tw_cuda_plan *tw_cplan(const twell_plan *plan) { return (tw_cuda_plan *)plan->backend_data; }

twell_status tw_cuda_plan_init(twell_plan *plan) {
    twell_ctx *ctx = plan->ctx;
    tw_cuda_plan *cp = calloc(1, sizeof *cp);
    if (!cp)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "twell_plan_create: out of memory");
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st == TWELL_OK) {
        st = tw_cuda_gate_pack_init(plan, TW_GP_AUTO, &cp->gate_pack);
        if (st == TWELL_OK) {
            st = tw_gate_lt_init(plan, &cp->gate_lt);
            if (st == TWELL_OK)
                st = tw_cuda_ffn_init(plan, &cp->ffn);
            if (st == TWELL_OK) {
                st = tw_cuda_dense_init(plan, cp->gate_lt, &cp->dense);
                if (st == TWELL_OK) {
                    st = tw_small_init(plan, &cp->small);
                    if (st != TWELL_OK)
                        tw_cuda_dense_release(plan, cp->dense);
                }
                if (st != TWELL_OK)
                    tw_cuda_ffn_release(plan, cp->ffn);
            }
            if (st != TWELL_OK) {
                tw_gate_lt_release(plan, cp->gate_lt);
                tw_cuda_gate_pack_release(plan, cp->gate_pack);
            }
        }
        tw_cu_leave(ctx, &sc);
    }
    if (st != TWELL_OK) {
        free(cp);
        return st;
    }
    plan->backend_data = cp;
    return TWELL_OK;
}

void tw_cuda_plan_release(twell_plan *plan) {
    tw_cuda_plan *cp = tw_cplan(plan);
    if (!cp)
        return;
    tw_cu_scope sc;
    if (tw_cu_enter(plan->ctx, &sc) == TWELL_OK) {
        /* The API promises the plan's resources are idle before they are freed. */
        (void)tw_cuda_synchronize(plan->ctx);
        tw_cuda_gate_pack_release(plan, cp->gate_pack);
        tw_cuda_ffn_release(plan, cp->ffn);
        tw_cuda_dense_release(plan, cp->dense);
        tw_small_release(plan, cp->small);
        tw_gate_lt_release(plan, cp->gate_lt);
        tw_packed_check_release(cp->packed_check);
        tw_cu_leave(plan->ctx, &sc);
    }
    free(cp);
    plan->backend_data = NULL;
}

twell_status tw_cuda_plan_tune(twell_plan *plan, size_t M, unsigned flags) {
    tw_cuda_plan *cp = tw_cplan(plan);
    twell_status st = tw_cuda_gate_pack_tune(plan, cp->gate_pack, M, flags);
    if (st == TWELL_OK)
        st = tw_cuda_ffn_tune(plan, M, flags);
    return st;
}

twell_status tw_cuda_plan_reserve(twell_plan *plan, size_t max_M, double nnz_per_row) {
    tw_cuda_plan *cp = tw_cplan(plan);
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(plan->ctx, &sc);
    if (st != TWELL_OK)
        return st;
    /* the gate-pack kernel of every M bucket up to max_M (bucket b holds M in (2^(b-1), 2^b]) */
    for (size_t m = 1;; m *= 2) {
        tw_cuda_gate_pack_prepare(plan, cp->gate_pack, m < max_M ? m : max_M, NULL);
        if (m >= max_M)
            break;
    }
    st = tw_cuda_ffn_reserve(plan, cp->ffn, max_M, nnz_per_row);
    if (st == TWELL_OK && plan->path != TWELL_PATH_SPARSE)
        st = tw_cuda_dense_reserve_rows(plan, cp->dense, max_M);
    if (st == TWELL_OK)
        st = tw_small_reserve_rows(plan, cp->small, max_M, TW_POLICY_SMALL_MAX_ROWS);
    if (st == TWELL_OK)
        tw_cuda_dense_set_hint(cp->dense, nnz_per_row);
    if (st == TWELL_OK) /* after the hint: rows the dense route may reuse a captured gate for */
        st = tw_gate_lt_reserve(plan, cp->gate_lt,
                                tw_cuda_dense_gate_lt_rows(plan, cp->dense, max_M));
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

/* ---- ops ---- */

twell_status tw_cuda_ffn_infer(twell_plan *plan, size_t M, const void *x, const uint32_t *packed,
                               const void *wg, const void *wu, const void *wd, void *y,
                               twell_stream stream) {
    tw_cuda_plan *cp = tw_cplan(plan);
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(plan->ctx, &sc);
    if (st != TWELL_OK)
        return st;
    /* options.validate_packed: packed is checked before anything reads it (packed_check.c) */
    if (plan->ctx->validate_packed)
        st = tw_packed_check_run(plan, &cp->packed_check, M, packed, stream);
    /* the path choice (plan->path, AUTO's policy: small-batch, tiled or dense) and the launch:
     * ffn_route.c */
    if (st == TWELL_OK)
        st = tw_cuda_dense_ffn_infer(plan, cp->dense, cp->ffn, M, x, packed, wg, wu, wd, y, stream);
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

twell_status tw_cuda_ffn_layer(twell_plan *plan, size_t M, const void *x, const void *wg,
                               const void *wu, const void *wd, void *y, uint32_t *packed,
                               twell_stream stream) {
    tw_cuda_plan *cp = tw_cplan(plan);
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(plan->ctx, &sc);
    if (st != TWELL_OK)
        return st;
    int ran = 0;
    st = tw_cuda_dense_ffn_layer(plan, cp->dense, M, x, wg, wu, wd, y, stream, &ran);
    /* else the two calls; packed is the library's own, so options.validate_packed skips it */
    if (st == TWELL_OK && !ran)
        st = tw_cuda_gate_pack(plan, M, x, plan->shape.gated ? wg : wu, packed, stream);
    if (st == TWELL_OK && !ran)
        st = tw_cuda_dense_ffn_infer(plan, cp->dense, cp->ffn, M, x, packed, wg, wu, wd, y, stream);
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

twell_status tw_cuda_forward_train(twell_plan *plan, size_t M, const void *x, const void *wg,
                                   const void *wu, const void *wd, void *y, float *stats,
                                   twell_train_state *state, twell_stream stream) {
    return tw_cuda_train_forward(plan, M, x, wg, wu, wd, y, stats, state, stream);
}

twell_status tw_cuda_backward(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                              const void *wg, const void *wu, const void *wd, const void *dy,
                              float lambda, void *dx, float *dwg, float *dwu, float *dwd,
                              twell_stream stream) {
    return tw_cuda_train_backward(plan, state, M, x, wg, wu, wd, dy, lambda, dx, dwg, dwu, dwd,
                                  stream);
}

void tw_cuda_train_state_release(twell_train_state *state) { tw_cuda_train_release(state); }
