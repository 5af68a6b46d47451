/*
 * gate_pack_lt.h — a plan's cuBLASLt resources and the gate-pack route through them: the gate GEMM
 * pre-activations g = x · wᵀ by cuBLASLt into a buffer of the plan (L2-resident at the batch sizes
 * the route serves), then a packing pass that applies relu
 * (templates/gate_pack/gate_pack_dense.cu.lua). The dense inference route
 * (ops/ffn/dense/cuda_dense.c) reuses that g when it is known to hold the gate of its call, and
 * runs its own GEMMs through the same workspace.
 *
 * Which g a dense call may reuse. The plan keeps two gate buffers: one written only by eager
 * calls (so host order is device order, on one stream), one written only by captured calls. Each
 * remembers the call that wrote it (x, w, packed, M, stream, and the capture's id), and a call
 * reuses it only for the same arguments on the same stream: an eager call the eager buffer, a
 * captured call the captured one written earlier in the same capture (so inside one graph, where
 * the order of the two nodes is fixed). Anything else recomputes g.
 */
#ifndef TWELL_GATE_PACK_LT_H
#define TWELL_GATE_PACK_LT_H

#include "cuda_blaslt.h"
#include "cuda_driver.h"

typedef struct tw_gate_lt tw_gate_lt;

/* The plan's cuBLASLt side, empty: cuBLASLt (a large library) is loaded when a call first needs
 * it, so plans that never run these routes never pay for it. Only TWELL_ERR_NO_MEMORY fails. */
twell_status tw_gate_lt_init(twell_plan *plan, tw_gate_lt **out);
void tw_gate_lt_release(twell_plan *plan, tw_gate_lt *lt); /* NULL is a no-op */

/* 1 when the route can run; else 0 and *why (may be NULL) says why (borrowed from lt). The first
 * call loads cuBLASLt (beside the NVRTC in use, see cuda_blaslt.h) and the packing module;
 * unavailability (no cuBLASLt, a module that does not build) is not an error: the routes are
 * marked unavailable with the reason and one warning is logged; the context's message is left
 * as it was. */
int tw_gate_lt_available(twell_plan *plan, tw_gate_lt *lt, const char **why);

/* Allocates what captured calls of up to `rows` rows need: the workspace and the captured gate
 * buffer (rows · N values). May wait for the plan's earlier eager work. Context current. */
twell_status tw_gate_lt_reserve(twell_plan *plan, tw_gate_lt *lt, size_t rows);

/* The route's gate-pack: the pre-activations g = x · wᵀ by cuBLASLt (fp32 accumulation, rounded
 * to dtype, no epilogue) into the gate buffer of the call's kind, then packed [M, N/C] from them
 * under the activation rule (a NaN active; twellrt.h "Non-finite values"). The buffer keeps the
 * raw pre-activations: its readers apply relu themselves (tw_gate_lt_mul, tw_gate_lt_relu). x, w,
 * packed 16-byte aligned. count_out (an eager call's; may be NULL; ignored while capturing): device
 * address where the packing pass stores Σ of packed's count words (e.g. mapped page-locked memory),
 * valid once the event tw_gate_lt_end records after the call has completed. Eager calls grow the
 * eager buffer as needed. A captured call needs M ≤ the rows twell_plan_reserve gave the captured
 * gate buffer; otherwise *ran = 0 and nothing is enqueued (the caller runs another kernel). Context
 * current. */
twell_status tw_gate_lt_pack(twell_plan *plan, tw_gate_lt *lt, size_t M, const void *x,
                             const void *w, uint32_t *packed, uint64_t *count_out, int capturing,
                             twell_stream stream, int *ran);

/* The gate buffer holding g for exactly these arguments (see the header comment), or NULL. */
const void *tw_gate_lt_gate_for(twell_plan *plan, const tw_gate_lt *lt, size_t M, const void *x,
                                const void *w, const uint32_t *packed, int capturing,
                                twell_stream stream);

/* Forgets both gate buffers' writers (nothing can reuse them until the next pack writes one):
 * the plan's gate-pack ran another kernel. */
void tw_gate_lt_forget(tw_gate_lt *lt);

/* 1 when the plan's last gate-pack ran this route. */
int tw_gate_lt_last(const tw_gate_lt *lt);

/* D = A · op(B) through cuBLASLt with the plan's workspace (cuda_blaslt.h's shape rules).
 * Context current. */
twell_status tw_gate_lt_matmul(twell_plan *plan, tw_gate_lt *lt, const tw_lt_shape *shape,
                               const void *a, const void *b, void *d, twell_stream stream);

/* h[i] = round(relu(g[i]) · u[i]) for n values, g raw pre-activations (n a multiple of 8; g, h
 * dtype, u fp32; 16-byte aligned). relu keeps NaN: a NaN gate gives a NaN h. */
twell_status tw_gate_lt_mul(twell_plan *plan, tw_gate_lt *lt, const void *g, const float *u,
                            void *h, size_t n, twell_stream stream);

/* g[i] = relu(g[i]) in place for n values (n a multiple of 8, 16-byte aligned): ±0, negatives and
 * -Inf become +0, NaN the canonical NaN. Idempotent, so a gate buffer that a later call may
 * reuse stays valid. */
twell_status tw_gate_lt_relu(twell_plan *plan, tw_gate_lt *lt, void *g, size_t n,
                             twell_stream stream);

/* stats[0] += Σ of the count words of packed [M, N/C]. */
twell_status tw_gate_lt_count(twell_plan *plan, tw_gate_lt *lt, size_t M, const uint32_t *packed,
                              uint64_t *stats, twell_stream stream);

/* Eager calls that use the workspace or the eager gate buffer on `stream`: begin waits for the
 * plan's previous such work when it ran on another stream; end records that this work is the
 * latest. Captured calls call neither. Context current. */
twell_status tw_gate_lt_begin(twell_plan *plan, tw_gate_lt *lt, twell_stream stream);
twell_status tw_gate_lt_end(twell_plan *plan, tw_gate_lt *lt, twell_stream stream);

/* The event tw_gate_lt_end records (after the latest eager work on the plan's cuBLASLt
 * resources and dense buffers), and whether any was recorded. */
tw_cuda_event tw_gate_lt_done_event(const tw_gate_lt *lt);
int tw_gate_lt_used(const tw_gate_lt *lt);

#endif /* TWELL_GATE_PACK_LT_H */
