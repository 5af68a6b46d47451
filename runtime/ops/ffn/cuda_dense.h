/*
 * cuda_dense.h — the dense path of twell_ffn_infer on CUDA (Hopper: templates/gemm_sm90.cu.lua and
 * templates/dense_aux.cu.lua) and the choice between it and the sparse path (cuda_ffn.c) that
 * TWELL_PATH_AUTO makes from the previous calls' activation counts, without a host wait.
 */
#ifndef TWELL_CUDA_DENSE_H
#define TWELL_CUDA_DENSE_H

#include "cuda_ffn.h"

/* Per-plan state: the three modules, the workspace, the counts read back, the AUTO estimate. */
typedef struct tw_dense tw_dense;

/* Prepares the dense path ONCE for plan->shape: on sm_90a with K % 64 == 0 it renders/compiles (or
 * takes from the cache) and loads gemm_sm90 twice (the up projection: MODE gated or relu; the down
 * projection: MODE plain with K and N swapped) and dense_aux, and allocates the pinned count
 * slots. Elsewhere, or when a module fails to build (a warning is logged), the path is only marked
 * unavailable: AUTO then always runs sparse and DENSE reports TWELL_ERR_UNSUPPORTED with the
 * reason. Only TWELL_ERR_NO_MEMORY fails. The workspace is allocated at the first dense call.
 * Inside tw_cu_enter/leave. *out NULL on failure. */
twell_status tw_cuda_dense_init(twell_plan *plan, tw_dense **out);

/* Frees everything; the caller has synchronised the device. NULL is a no-op. */
void tw_cuda_dense_release(twell_plan *plan, tw_dense *d);

/* twell_ffn_infer on CUDA (arguments validated by plan.c; inside tw_cu_enter/leave): picks the
 * path (plan->path; AUTO as below), runs it on stream, and enqueues the counting of this call's
 * packed activation when AUTO may use it.
 *
 * Dense path (per chunk of rows; H = the [rows, N] hidden state in dtype, plan workspace):
 *   count: Σ counts of packed and the units (256 rows x 256 columns) holding an overflowing
 *          row-tile;
 *   gated: H = round(g ⊙ x·Wuᵀ) in one GEMM, g expanded from packed inside the GEMM (units with
 *          an overflowing row-tile recompute g = act(x·Wgᵀ) on tensor cores first);
 *   non-gated: H expanded from packed, then the flagged units recomputed as act(x·Wuᵀ);
 *   y = H · Wd through Wdᵀ, transposed into the workspace once per call.
 * So the dense path costs two GEMMs (up and down) after the caller's gate-pack, not three.
 *
 * AUTO: the first call runs sparse. Every AUTO call counts its packed activation on the device
 * (a sparse call: in the sparse pre-pass, tw_cuda_ffn_launch's stats; a dense call or a sparse
 * one on the simple kernels: a small kernel) and the total reaches pinned memory (written there
 * by the pre-pass when the driver maps it, else copied); a later call reads it when an event
 * recorded after it has completed (cuEventQuery, never a wait) and runs dense when the latest
 * known mean active values per row exceeds the threshold (default TW_DENSE_DENSITY · N; 0.8 of it
 * to stay dense, against flapping) and M ≥ TW_DENSE_MIN_ROWS. The dense path needs sm_90a, K % 64
 * == 0 and 16-byte aligned x, weights and y; otherwise AUTO runs sparse and DENSE fails with
 * TWELL_ERR_UNSUPPORTED. Calls on different streams are ordered through an event (the workspace
 * is shared); growing the workspace for a larger chunk waits for the previous dense call
 * (counted by tw_cuda_dense_grow_syncs). */
twell_status tw_cuda_dense_ffn_infer(twell_plan *plan, tw_dense *d, tw_ffn *f, size_t M,
                                     const void *x, const uint32_t *packed, const void *wg,
                                     const void *wu, const void *wd, void *y, twell_stream stream);

/* The AUTO threshold, mean active values per row, is TW_DENSE_DENSITY · N unless set by the hook.
 * Measured on the H200 (bf16, K = 2048, N = 5632, uniform, median of 20, sparse kernels of
 * an earlier version; BENCHMARKS.md re-checks it): at M = 16384 sparse takes 1.33 / 1.44 /
 * 1.57 ms at 56 / 69 / 84 active per row, dense 1.49-1.50 ms; at M = 4096, 0.376 / 0.409 / 0.447
 * against 0.431 ms. The paths cross near 75 (M = 16384) and 78 (M = 4096) per row, 1.33% of N
 * (it was 66-69, 1.2%, with the v5 sparse kernels). The sparse cost grows with active values x K
 * and the dense one with N x K, so the crossover is a density; re-measure it when either path
 * changes (twell bench --op ffn_infer --path sparse|dense). */
#define TW_DENSE_DENSITY 0.0133
/* After a dense call AUTO stays dense while the estimate exceeds this part of the threshold. */
#define TW_DENSE_STAY 0.8
/* AUTO runs dense only from this many rows (below, the GEMMs' fixed costs dominate). */
#define TW_DENSE_MIN_ROWS ((size_t)1024)

/* ---- hooks for tests and the bench (plan on the CUDA backend; 0 / -1 / AUTO otherwise) ---- */

/* 1 if the plan has the dense kernels loaded. */
int tw_cuda_dense_available(const twell_plan *plan);
/* The path the last twell_ffn_infer call ran (SPARSE or DENSE; AUTO before the first call). */
twell_path tw_cuda_dense_last_path(const twell_plan *plan);
/* The mean active values per row AUTO decides from now (-1: nothing read back yet). */
double tw_cuda_dense_estimate(const twell_plan *plan);
/* The AUTO threshold in active values per row; set_threshold(plan, v ≤ 0) restores the default. */
double tw_cuda_dense_threshold(const twell_plan *plan);
twell_status tw_cuda_dense_set_threshold(twell_plan *plan, double nnz_per_row);
/* The smallest M that AUTO runs dense (default TW_DENSE_MIN_ROWS): set, get (SIZE_MAX for a
 * plan without the dense state). */
twell_status tw_cuda_dense_set_min_rows(twell_plan *plan, size_t rows);
size_t tw_cuda_dense_min_rows(const twell_plan *plan);
/* Synchronises the device and copies the counters of the last call that counted: [0] Σ counts
 * (active values), [1] units whose gate was recomputed (dense calls; 0 for sparse ones). */
twell_status tw_cuda_dense_counts(twell_plan *plan, uint64_t out[2]);
/* Host waits the dense path made to grow its workspace; device bytes of the workspace; dense and
 * sparse calls so far. */
int tw_cuda_dense_grow_syncs(const twell_plan *plan);
size_t tw_cuda_dense_workspace_bytes(const twell_plan *plan);
unsigned long tw_cuda_dense_calls(const twell_plan *plan, twell_path path);
/* Fills the workspace (H, Wdᵀ; whatever is allocated) with `pattern` after synchronising: a
 * value a call fails to write shows up in y. */
twell_status tw_cuda_dense_poison(twell_plan *plan, uint16_t pattern);
/* The dynamic shared memory the launcher gives gemm_sm90 (its template prints the same number on
 * the rendered source's first line; a test compares them). */
unsigned tw_cuda_dense_gemm_smem(void);

#endif /* TWELL_CUDA_DENSE_H */
