/*
 * gate_route.c — twell_gate_pack on CUDA: the route of a call (cuBLASLt, small-batch or tiled
 * gate-pack) over the plan's ffn and gate-pack state; the API and the training forward call it.
 */
#include "ffn_route.h"

#include "cuda_dense.h"
#include "cuda_gate_pack.h"
#include "cuda_small.h"
#include "op_plan.h"

twell_status tw_cuda_gate_pack(twell_plan *plan, size_t M, const void *x, const void *w,
                               uint32_t *packed, twell_stream stream) {
    tw_cuda_plan *cp = tw_op_plan(plan);
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(plan->ctx, &sc);
    if (st != TWELL_OK)
        return st;
    /* the cuBLASLt route where it wins or where the dense route will reuse its gate; else few
     * rows: the small-batch gate-pack (cuda_small.c) when its mode and the call allow it; else
     * the tiled kernel */
    int ran = 0;
    if (tw_cuda_dense_gate_lt_wanted(plan, cp->dense, M, x, w, packed)) {
        int capturing = 0;
        st = tw_cuda_stream_capturing(plan->ctx, stream, &capturing);
        /* an eager call counts packed for the dense call that will reuse its gate */
        uint64_t *count = tw_cuda_dense_gate_count(cp->dense, !capturing);
        if (st == TWELL_OK)
            st =
                tw_gate_lt_pack(plan, cp->gate_lt, M, x, w, packed, count, capturing, stream, &ran);
        if (ran)
            tw_small_gate_not_run(cp->small);
    }
    if (st == TWELL_OK && !ran) {
        /* packed no longer matches what a gate buffer holds */
        tw_gate_lt_forget(cp->gate_lt);
        (void)tw_cuda_dense_gate_count(cp->dense, 0);
        if (!tw_small_gate_pack(plan, cp->small, M, x, w, packed, stream, &st))
            st = tw_cuda_gate_pack_launch(plan, cp->gate_pack, M, x, w, packed, stream);
    }
    tw_cu_leave(plan->ctx, &sc);
    return st;
}
