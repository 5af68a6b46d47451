/*
 * cuda_train_dense.h — the dense path of twell_ffn_forward_train / twell_ffn_backward on Hopper
 * (five tensor-core GEMMs from templates/gemm/gemm_sm90.cu.lua's training modes, elementwise work
 * in their epilogues), the counts AUTO's choice (cuda_train_pick.c) reads, and its block API for
 * the sparse path's heavy rows.
 */
#ifndef TWELL_CUDA_TRAIN_DENSE_H
#define TWELL_CUDA_TRAIN_DENSE_H

#include "cuda_driver.h"

#include <stdarg.h>

/* Per-state record of the dense path (state->dense): modules, workspace, the AUTO estimate, and
 * whether the saved forward is dense. */
typedef struct tw_tdense tw_tdense;

/* The dense forward: Tm = round(relu(x·Wgᵀ) ⊙ x·Wuᵀ) with the saved (P, round(U)) pairs in one
 * GEMM, y = Tm·Wd, stats from the epilogue's per-warp partials. TWELL_ERR_NO_MEMORY when the
 * workspace (tw_ctd_bytes) cannot be had (nothing written). */
twell_status tw_ctd_forward(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                            const void *wg, const void *wu, const void *wd, void *y, float *stats,
                            twell_stream stream);

/* Records a sparse forward's exact L0 (active values per row = nnz / M) for AUTO, and releases
 * the dense path's own workspace by the rule of TW_TD_RELEASE_FIRST. Never waits. */
void tw_ctd_note_sparse(twell_train_state *state, size_t M, uint64_t nnz);

/* Records the exact L0 a probe counted before it handed over to the dense path (see
 * tw_ctd_pick, cuda_train_pick.h); the dense forward's own count replaces it when it lands. */
void tw_ctd_note_counted(twell_train_state *state, size_t M, uint64_t nnz);

/* Raises the state's high-water mark of twell_train_state_bytes to what it holds now (after
 * each op; TW_TC_TD_PEAK_BYTES reads it). */
void tw_ctd_note_bytes(twell_train_state *state);

/* The sparse path could not allocate: frees the dense path's own workspace if it holds no saved
 * forward (the caller has synchronised the device). 1 if it freed something. */
int tw_ctd_trim(twell_train_state *state);

/* 1 if the state's saved forward is dense (the backward must then run tw_ctd_backward). */
int tw_ctd_saved(const twell_train_state *state, size_t M);

/* The dense backward (dT GEMM with dU, dP in its epilogue; dx = [dU dP]·[Wu; Wg]; the three fp32
 * weight gradients in one GEMM over the stacked [dU dP Tm]ᵀ). Needs every tensor 16-byte
 * aligned (TWELL_ERR_UNSUPPORTED otherwise). No host synchronisation. */
twell_status tw_ctd_backward(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                             const void *wg, const void *wu, const void *wd, const void *dy,
                             float lambda, void *dx, float *dwg, float *dwu, float *dwd,
                             twell_stream stream);

/* The same GEMMs on a contiguous block of Mb rows with the caller's workspace ws
 * (tw_ctd_block_bytes(plan, Mb) bytes, 256-byte aligned; it holds the block's Tm, (P, U) pairs and
 * dU, dP from its forward to its backward): the sparse path's heavy rows (cuda_train_heavy.c).
 * prepare builds the modules (never forced: *available = 0 where the dense path cannot run, the
 * reason logged). forward: yb = the block's y, the stats partials at tw_ctd_block_part
 * (tw_ctd_block_npart {Σ|Tm|, count} pairs). backward: l1c = λ / the step's M; dxb the block's dx;
 * the three weight gradients are STORED (the sparse kernels then add theirs). Every pointer 16-byte
 * aligned. No host wait. */
twell_status tw_ctd_block_prepare(twell_plan *plan, twell_train_state *state, int *available);
twell_status tw_ctd_block_forward(twell_plan *plan, twell_train_state *state, size_t Mb,
                                  const void *xb, const void *wg, const void *wu, const void *wd,
                                  void *yb, void *ws, twell_stream stream);
twell_status tw_ctd_block_backward(twell_plan *plan, twell_train_state *state, size_t Mb,
                                   const void *xb, const void *wg, const void *wu, const void *wd,
                                   const void *dyb, float l1c, void *dxb, float *dwg, float *dwu,
                                   float *dwd, void *ws, twell_stream stream);
long long tw_ctd_block_npart(const twell_shape *s, size_t Mb);
/* Slices of the reduction for a block mm GEMM (y, dx) of M rows x ncols output columns over
 * `red` (1: none) on a device of sm_count SMs: as many as fill its clusters, at most 8 and one
 * 64-wide k-block each, only where the unsplit grid would leave more than half the clusters idle.
 * So slices x units ≤ clusters: the partials (slices · M · ncols floats) stay below
 * clusters · 256 · 256 · ncols / ceil(ncols / 256) floats. */
unsigned tw_ctd_nsplit(int sm_count, size_t M, size_t ncols, size_t red);
/* The workspace a block of Mb rows needs: tw_ctd_bytes plus, where the block is small enough for
 * the y and dx GEMMs to run split along their reduction (fp32 partials reduced in a fixed order),
 * the partials; 0 on overflow. */
size_t tw_ctd_block_bytes(const twell_plan *plan, size_t Mb);
void *tw_ctd_block_part(const twell_shape *s, size_t Mb, void *ws);

/* tw_ctd_bytes, tw_ctd_set_workspace, tw_ctd_held and tw_ctd_release are declared in
 * internal.h (plan.c calls them). */

/* Training AUTO's numbers, kept here only (twellrt.h and docs/DESIGN.md §6 state the rule and
 * point here; tests/test_train_auto.c checks the band around them).
 *
 * Density threshold of AUTO, in active values per row per unit of N: where the sparse step,
 * whose cost grows with the active values, crosses the dense step, whose cost does not; each
 * path is normalised by the cuBLAS step of its own run (BENCHMARKS.md, "Training step"). Skewed
 * rows cost the sparse path more at the same mean, and AUTO reads only the mean, so such data run
 * sparse a little past their own crossover. Re-measure when either path changes (twell bench --op
 * train --path sparse|dense). After a dense step AUTO stays dense down to TW_TD_STAY of
 * the threshold (against flapping on noisy L0; narrow, because below the crossover every dense
 * step costs time). */
#define TW_TD_DENSITY 0.0105
#define TW_TD_STAY 0.9
#define TW_TD_MIN_ROWS ((size_t)1024)

/* Release of the dense path's own workspace (M·N·10 bytes: 0.86 GiB at M = 16384, N = 5632)
 * once the state runs sparse. AUTO's first forward of a large M may be dense, and the workspace
 * would then sit idle beside the sparse state for the rest of training (several times the sparse
 * state's own size at low density). Rule: after release_after
 * consecutive sparse forwards (TW_TD_RELEASE_FIRST at first) the workspace is freed at the end
 * of the next sparse forward whose check finds the work that last used it finished (an event
 * recorded after each dense forward and backward, queried, never waited for: the sparse
 * forward's own host sync has normally retired that work already). Hysteresis: each time a dense
 * forward has to allocate it again after such a release, release_after doubles, up to
 * TW_TD_RELEASE_MAX, so data hovering at the switch (the path hysteresis of TW_TD_STAY notwith-
 * standing) costs at most one free and one allocation per TW_TD_RELEASE_MAX sparse steps in the
 * long run. A lent workspace (twell_train_state_set_workspace) is the caller's and never freed.
 * The peak of a step that switches is the dense workspace plus the sparse state; afterwards only
 * the sparse state is held. Also, when a sparse buffer cannot be allocated, an idle dense
 * workspace is freed to make room (tw_ctd_trim). */
#define TW_TD_RELEASE_FIRST 4u
#define TW_TD_RELEASE_MAX 256u

#endif /* TWELL_CUDA_TRAIN_DENSE_H */
