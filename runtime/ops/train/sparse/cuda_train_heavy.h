/*
 * cuda_train_heavy.h — the sparse training path's heavy-row route: rows with more active values
 * than a threshold (the first tokens of sequences, a few dense rows) run the dense training GEMMs
 * (cuda_train_dense.c's block API) on a contiguous block of them instead of the per-entry
 * kernels, whose cost grows with the count (a 4 KB weight or token row gathered per entry and
 * pass). On by default at the cost model's threshold (TW_TC_TRAIN_SET_HEAVY sets another or 0:
 * off); docs/DESIGN.md §6.
 *
 * Forward (inside tw_ct_forward):
 *   tw_cth_classify  right after the gate-pack: flags the rows whose count exceeds the threshold
 *                    (flag[m] = count, else 0), zeroes their packed words (every sparse kernel
 *                    then sees an empty row: no entries, no overflow, zero y and dx rows, no
 *                    weight-gradient terms, so nothing is counted twice), adds their number and
 *                    count sum to tot[6], tot[7] (zero on entry; read by the forward's one host
 *                    synchronisation). In builds with tensor-core overflow tiles (fused = 1)
 *                    train_ffn's twell_train_ovf_list does this in its pass over the same count
 *                    words (the caller passes it t->hthr and the TB_H_FLAG buffer); else the
 *                    route's own twell_train_heavy_flag runs here;
 *   tw_cth_forward   after that synchronisation (t->nh known): nothing when nh = 0; else the
 *                    rows listed ascending (twell_train_heavy_list), the block's x gathered, the
 *                    dense forward GEMMs (its Tm, (P, U) pairs and stats partials kept in the
 *                    state for the backward), its y into a block;
 *   tw_cth_finish_forward  after the sparse y: the block's y scattered to its rows, the stats
 *                    of both parts (L0 from the gate-pack counts, so exact).
 * Backward (inside tw_ct_backward; no host synchronisation):
 *   tw_cth_backward  before the sparse kernels: dy gathered, the dense backward GEMMs (l1c of
 *                    the whole step), the three weight gradients STORED; the sparse weight-
 *                    gradient kernel then adds its sums to them (acc = 1), in a fixed order;
 *   tw_cth_finish_backward  after the sparse dx: the block's dx scattered.
 * Tolerance: the heavy rows' y, dx and the weight gradients' heavy terms carry the dense path's
 * rounding (U, Tm, dU, dP rounded to dtype before the GEMMs that read them): docs/DESIGN.md §7's
 * dense-path bounds. Deterministic: ordered lists, fixed-order sums, no floating-point atomics.
 */
#ifndef TWELL_CUDA_TRAIN_HEAVY_H
#define TWELL_CUDA_TRAIN_HEAVY_H

#include "cuda_train_int.h"

/* The threshold of the heavy-row route for this shape (the cost model's, or a probe's; 0: the
 * route is off). */
uint32_t tw_cth_threshold(const tw_ctrain *t, const twell_shape *s);

/* *on = 1 if the route runs (it needs the knob on, vi == 0 (16-byte aligned tensors, the tensor-
 * core recount), the dense GEMMs available on this device, M < 2^31); then t->hthr is the
 * threshold and TB_H_FLAG, TB_H_IDX hold M words each. fused: the caller's ovf_list flags. */
twell_status tw_cth_classify(twell_plan *plan, twell_train_state *state, tw_ctrain *t, size_t M,
                             void *packed, uint64_t *tot, int vi, int fused, int *synced, int *on,
                             twell_stream stream);
twell_status tw_cth_forward(twell_plan *plan, twell_train_state *state, tw_ctrain *t, size_t M,
                            const void *x, const void *wg, const void *wu, const void *wd,
                            int *synced, twell_stream stream);
twell_status tw_cth_finish_forward(twell_plan *plan, tw_ctrain *t, size_t M, void *y, float *stats,
                                   twell_stream stream);
twell_status tw_cth_backward(twell_plan *plan, twell_train_state *state, tw_ctrain *t, size_t M,
                             const void *wg, const void *wu, const void *wd, const void *dy,
                             float l1c, float *dwg, float *dwu, float *dwd, int *synced,
                             twell_stream stream);
twell_status tw_cth_finish_backward(twell_plan *plan, tw_ctrain *t, void *dx, twell_stream stream);

#endif /* TWELL_CUDA_TRAIN_HEAVY_H */
