/*
 * ffn_route.h — twell_ffn_infer's route on CUDA: which path runs a call (plan->path; AUTO's
 * choice, ffn_policy.h, from the dense state's estimate) and its run through that path's header
 * (small/cuda_small.h, tiled/cuda_ffn.h, dense/cuda_dense.h); twell_ffn_layer's dense shortcut;
 * and what twell_gate_pack and twell_plan_reserve ask of the choice.
 */
#ifndef TWELL_FFN_ROUTE_H
#define TWELL_FFN_ROUTE_H

#include "cuda_dense.h"
#include "cuda_ffn.h"
#include "ffn_policy.h"

/* Whether a call of M rows would run the dense route now (plan->path DENSE, or AUTO's choice for
 * aligned tensors from the estimate the host holds): the gate-pack then leaves the dense gate
 * for it to reuse. */
int tw_cuda_dense_expected(twell_plan *plan, tw_dense *d, size_t M);

/* Whether twell_gate_pack of M rows runs the cuBLASLt route (gate_pack_lt.h): it can (cuBLASLt,
 * 16-byte aligned tensors) and M is in its range (ffn_policy.h's TW_POLICY_LT_GATE_*, or test
 * control's TW_TC_DENSE_SET_LT_GATE), or the dense route is expected to reuse its gate. */
int tw_cuda_dense_gate_lt_wanted(twell_plan *plan, tw_dense *d, size_t M, const void *x,
                                 const void *w, const uint32_t *packed);

/* Rows of the captured gate buffer twell_plan_reserve(max_M) gives that route: max_M when the
 * dense route is expected at max_M rows (its estimate set first) or max_M is within the route's
 * range, else the top of the range. */
size_t tw_cuda_dense_gate_lt_rows(twell_plan *plan, tw_dense *d, size_t max_M);

/* twell_ffn_infer on CUDA (arguments validated by plan.c; inside tw_cu_enter/leave): picks the
 * path (plan->path; AUTO as below), runs it on stream, and enqueues the counting of this call's
 * packed activation when AUTO may use it.
 *
 * Dense route (per chunk of rows, through cuBLASLt with fp32 accumulation; buffers [rows, N]
 * dtype in the plan's workspace):
 *   g: the gate-pack's pre-activations g = x·Wᵀ of this call when the plan's cuBLASLt gate-pack
 *      left them for exactly these arguments (gate_pack_lt.h), else computed here by a cuBLASLt
 *      GEMM (W = Wg gated, Wu non-gated; no epilogue: cuBLASLt's relu maps NaN to 0);
 *   gated: u = x·Wuᵀ (fp32), h = round(relu(g) ⊙ u); non-gated: h = relu(g) (in place in g);
 *   relu keeps NaN, as the dense computation propagates it;
 *   y = h · Wd (Wd [N, K] read as it is).
 * Every value is exact as the dense computation a framework runs (three GEMMs and an elementwise
 * product), whatever row-tiles overflow: the packed activation is only counted.
 * AUTO: the route is tw_ffn_policy's (ffn_policy.h) for the call's M and the plan's estimate:
 * the latest counts that have reached the host, else the nnz_per_row of twell_plan_reserve, else
 * none (the sparse routes where the policy needs an estimate). Eager AUTO calls count their
 * packed activation on the device (a tiled call: in the sparse pre-pass, tw_cuda_ffn_launch's
 * stats; a dense call whose gate it reuses: the cuBLASLt gate-pack's packing pass; another dense
 * call, a sparse one on the simple kernels and one small-batch call in 16, every one near the
 * threshold: a count kernel) and the total reaches pinned memory (written there directly where
 * the driver maps it, else copied); a later call reads it when an event recorded after it has
 * completed (cuEventQuery, never a wait). The dense route needs cuBLASLt and 16-byte aligned x,
 * weights and y; otherwise AUTO runs sparse and DENSE fails with TWELL_ERR_UNSUPPORTED. Calls on
 * different streams are ordered through an event (the workspace is shared); growing the workspace
 * for a larger chunk waits for the previous dense call (counted by TW_TC_DENSE_GROW_SYNCS).
 *
 * While stream is being captured (tw_cuda_stream_capturing), the call enqueues only kernels and
 * memsets: it reads no counts back and queries, records or waits for no event (the route is
 * fixed from the estimate the host holds when the call is captured), allocates nothing (the
 * dense workspace must exist already: DENSE fails with TWELL_ERR_INVALID_ARG, AUTO runs sparse),
 * and orders nothing across streams (the caller orders its graph's replays with the plan's other
 * calls). From then on buffers the graph uses are kept, never freed, until the plan is
 * destroyed. */
twell_status tw_cuda_dense_ffn_infer(twell_plan *plan, tw_dense *d, tw_ffn *f, size_t M,
                                     const void *x, const uint32_t *packed, const void *wg,
                                     const void *wu, const void *wd, void *y, twell_stream stream);

/* twell_ffn_layer's dense route from x (inside tw_cu_enter/leave): where the plan's path is DENSE,
 * or AUTO sends this call of M rows to the dense route (the policy above, from the host's
 * estimate), the tensors are 16-byte aligned and the workspace can be had, runs it with the gate
 * computed here (nothing is packed or counted) and sets *ran. Otherwise *ran = 0 and the caller
 * gate-packs and runs tw_cuda_dense_ffn_infer, which also reports any error of the call; so does
 * one eager AUTO call in 16 of those sent dense (the first included), whose packed counts keep
 * AUTO's estimate current. Captured: as tw_cuda_dense_ffn_infer's dense route. */
twell_status tw_cuda_dense_ffn_layer(twell_plan *plan, tw_dense *d, size_t M, const void *x,
                                     const void *wg, const void *wu, const void *wd, void *y,
                                     twell_stream stream, int *ran);

/* AUTO's threshold at M rows, active values per row (a probe's, else the policy's). */
double tw_dense_thr(const tw_dense *d, const twell_shape *s, size_t M);
/* The route AUTO takes for M rows (ffn_policy.h) given what can run; *row (may be NULL): the
 * policy's row-kernel answer. */
tw_ffn_route tw_dense_route(const twell_plan *plan, const tw_dense *d, size_t M, int dense_ok,
                            int small_ok, int *row);

#endif /* TWELL_FFN_ROUTE_H */
