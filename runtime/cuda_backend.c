/*
 * cuda_backend.c — the CUDA backend's entry points (internal.h): device open/close, pointer
 * kinds, per-plan kernels, and dispatch of the ops. Ops not on the GPU yet report
 * TWELL_ERR_UNSUPPORTED (training).
 */
#include "cuda_backend.h"
#include "cuda_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

twell_status tw_cuda_open(twell_ctx *ctx, int device) {
    tw_cuda *d = calloc(1, sizeof *d);
    if (!d)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tw_cuda_open: out of memory");
    twell_status st = tw_cu_device_open(ctx, device, d);
    if (st != TWELL_OK) {
        tw_cu_device_close(d);
        free(d);
        return st;
    }
    ctx->cuda = d;
    snprintf(ctx->device_name, sizeof ctx->device_name, "cuda:%d %s (%s, %d SMs)", device, d->name,
             d->arch, d->sm_count);
    tw_log(ctx, TWELL_LOG_INFO, "twell: %s, driver %d.%d, %zu MiB, L2 %d KiB", ctx->device_name,
           d->driver_version / 1000, d->driver_version % 1000 / 10, d->total_mem >> 20,
           d->l2_bytes >> 10);
    return TWELL_OK;
}

void tw_cuda_close(twell_ctx *ctx) {
    if (!ctx || !ctx->cuda)
        return;
    tw_cu_device_close(ctx->cuda);
    free(ctx->cuda);
    ctx->cuda = NULL;
}

int tw_cuda_pointer_kind(twell_ctx *ctx, const void *p) {
    if (!p)
        return -1;
    int kind = -1, ordinal = -1;
    if (!ctx || !ctx->cuda) {
        /* CPU backend: ask the driver only if this process loaded it already (a CPU context must
         * not pay for cuInit); unknown otherwise. */
        if (!tw_cu_loaded() || tw_cu_pointer_info(NULL, p, &kind, &ordinal) != TWELL_OK)
            return -1;
        return kind;
    }
    tw_cu_scope sc;
    if (tw_cu_enter(ctx, &sc) != TWELL_OK)
        return -1;
    twell_status st = tw_cu_pointer_info(NULL, p, &kind, &ordinal);
    tw_cu_leave(ctx, &sc);
    if (st != TWELL_OK)
        return -1;
    /* Memory of another device is neither ours nor host memory. Managed memory reports the
     * ordinal it was created on; it is usable from ours. */
    if (kind == 1 && ordinal >= 0 && ordinal != ctx->cuda->ordinal)
        return -1;
    return kind;
}

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
            st = tw_cuda_ffn_init(plan, &cp->ffn);
            if (st == TWELL_OK) {
                st = tw_cuda_dense_init(plan, &cp->dense);
                if (st == TWELL_OK) {
                    st = tw_small_init(plan, &cp->small);
                    if (st != TWELL_OK)
                        tw_cuda_dense_release(plan, cp->dense);
                }
                if (st != TWELL_OK)
                    tw_cuda_ffn_release(plan, cp->ffn);
            }
            if (st != TWELL_OK)
                tw_cuda_gate_pack_release(plan, cp->gate_pack);
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
        tw_cu_leave(plan->ctx, &sc);
    }
    free(cp);
    plan->backend_data = NULL;
}

twell_status tw_cuda_plan_gate_pack_select(twell_plan *plan, tw_gp_variant v) {
    tw_cuda_plan *cp = tw_cplan(plan);
    if (!cp)
        return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "gate_pack: not a CUDA plan");
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(plan->ctx, &sc);
    if (st != TWELL_OK)
        return st;
    tw_gate_pack *gp = NULL;
    st = tw_cuda_synchronize(plan->ctx);
    if (st == TWELL_OK)
        st = tw_cuda_gate_pack_init(plan, v, &gp);
    if (st == TWELL_OK) {
        tw_cuda_gate_pack_release(plan, cp->gate_pack);
        cp->gate_pack = gp;
    }
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

tw_gp_variant tw_cuda_plan_gate_pack_variant(const twell_plan *plan) {
    tw_cuda_plan *cp = plan ? tw_cplan(plan) : NULL;
    return cp ? tw_cuda_gate_pack_variant(cp->gate_pack) : TW_GP_AUTO;
}

int tw_cuda_plan_gate_pack_modules(const twell_plan *plan) {
    tw_cuda_plan *cp = plan ? tw_cplan(plan) : NULL;
    return cp ? tw_cuda_gate_pack_modules_loaded(cp->gate_pack) : 0;
}

/* ---- ops ---- */

twell_status tw_cuda_gate_pack(twell_plan *plan, size_t M, const void *x, const void *w,
                               uint32_t *packed, twell_stream stream) {
    tw_cuda_plan *cp = tw_cplan(plan);
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(plan->ctx, &sc);
    if (st != TWELL_OK)
        return st;
    if (!tw_small_gate_pack(plan, cp->small, M, x, w, packed, stream, &st))
        st = tw_cuda_gate_pack_launch(plan, cp->gate_pack, M, x, w, packed, stream);
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

twell_status tw_cuda_ffn_infer(twell_plan *plan, size_t M, const void *x, const uint32_t *packed,
                               const void *wg, const void *wu, const void *wd, void *y,
                               twell_stream stream) {
    tw_cuda_plan *cp = tw_cplan(plan);
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(plan->ctx, &sc);
    if (st != TWELL_OK)
        return st;
    /* few rows: the small-batch path (cuda_small.c) when its mode and the call allow it; else the
     * path choice (plan->path, AUTO from earlier counts) and the sparse launch: cuda_dense.c */
    if (!tw_small_ffn_infer(plan, cp->small, M, x, packed, wg, wu, wd, y, stream, &st))
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
