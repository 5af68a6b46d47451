/*
 * cuda_dense.h — the dense path of twell_ffn_infer on CUDA, its interface to the op folder
 * (runtime/ops/ffn/ffn_route.c chooses and calls it): cuBLASLt through the plan's gate_pack_lt.h
 * resources, its workspace, and the counts of the packed activation that TWELL_PATH_AUTO's
 * estimate is read from without a host wait (cuda_dense_int.h: the state and the count slots).
 */
#ifndef TWELL_CUDA_DENSE_H
#define TWELL_CUDA_DENSE_H

#include "gate_pack_lt.h"

/* Per-plan state: the workspace, the counts read back, the AUTO estimate. */
typedef struct tw_dense tw_dense;

/* Prepares the dense route for plan->shape on the plan's cuBLASLt resources lt (gate_pack_lt.h;
 * borrowed, outlives the state). Where cuBLASLt is unavailable the route is only marked
 * unavailable: AUTO then chooses among the sparse routes and DENSE reports TWELL_ERR_UNSUPPORTED
 * with the reason. Only TWELL_ERR_NO_MEMORY fails. The workspace is allocated at the first dense
 * call. Inside tw_cu_enter/leave. *out NULL on failure. */
twell_status tw_cuda_dense_init(twell_plan *plan, tw_gate_lt *lt, tw_dense **out);

/* Frees everything; the caller has synchronised the device. NULL is a no-op. */
void tw_cuda_dense_release(twell_plan *plan, tw_dense *d);

/* The count slot an eager cuBLASLt gate-pack stores its total into (take = 1: a new slot, its
 * device address in mapped page-locked memory, NULL where the memory cannot be mapped), for the
 * dense call that reuses that gate-pack's gate (it then counts nothing itself); take = 0: the
 * gate-pack ran another route, the slot is forgotten. */
uint64_t *tw_cuda_dense_gate_count(tw_dense *d, int take);

/* twell_plan_reserve's part: the dense workspace for min(max_M, a chunk) rows (u, h and an own
 * g, so a captured call that cannot reuse the gate-pack's g runs) when the route is available.
 * May wait for the previous dense call. Inside tw_cu_enter/leave. */
twell_status tw_cuda_dense_reserve_rows(twell_plan *plan, tw_dense *d, size_t max_M);
/* The estimate AUTO uses until counts have been read back (< 0: none). */
void tw_cuda_dense_set_hint(tw_dense *d, double nnz_per_row);

/* Whether the dense route can run (asks for cuBLASLt the first time: gate_pack_lt.h); where it
 * cannot, why is kept for TWELL_PATH_DENSE's error (cuda_dense_int.h's why). */
int tw_dense_ready(twell_plan *plan, tw_dense *d);

/* The workspace of a call AUTO or TWELL_PATH_DENSE sends to the dense route (gate: the
 * gate-pack's g it reuses, or NULL): reserved now when eager, checked when captured. Where it is
 * missing, TWELL_PATH_DENSE fails and AUTO runs the sparse path instead (*dense = 0). */
twell_status tw_dense_workspace(twell_plan *plan, tw_dense *d, size_t M, const void *gate,
                                int capturing, int *dense);

/* The dense route once its workspace is there (tw_dense_workspace), as tw_cuda_dense_ffn_infer
 * describes it (ffn_route.h): ordered after the plan's earlier cuBLASLt work (eager), the call
 * counted when packed is given and it is eager, its route and counters recorded. gate: the
 * gate-pack's g for all M rows, or NULL (computed here per chunk). */
twell_status tw_dense_call(twell_plan *plan, tw_dense *d, size_t M, const void *x,
                           const uint32_t *packed, const void *gate, const void *wg, const void *wu,
                           const void *wd, void *y, int capturing, twell_stream stream);

#endif /* TWELL_CUDA_DENSE_H */
