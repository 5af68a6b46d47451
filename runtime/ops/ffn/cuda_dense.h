/*
 * cuda_dense.h — the dense path of twell_ffn_infer on CUDA (Hopper: templates/gemm_sm90.cu.lua and
 * templates/dense_aux.cu.lua) and the choice between it and the sparse path (cuda_ffn.c) that
 * TWELL_PATH_AUTO makes from the previous calls' activation counts, without a host wait.
 */
#ifndef TWELL_CUDA_DENSE_H
#define TWELL_CUDA_DENSE_H

#include "cuda_ffn.h"
#include "jit.h"

#include <stdarg.h>

/* Per-plan state: the three modules, the workspace, the counts read back, the AUTO estimate. */
typedef struct tw_dense tw_dense;

/* Prepares the dense path ONCE for plan->shape: on sm_90a with K % 64 == 0 it renders/compiles (or
 * takes from the cache) and loads gemm_sm90 four times (the up projection: MODE gated or relu; the
 * down projection: MODE plain with K and N swapped, Wd read MN-major; each also as its split-K
 * variant) and dense_aux, and allocates the pinned count slots. Elsewhere, or when a module fails
 * to build (a warning is logged), the path is only marked unavailable: AUTO then always runs sparse
 * and DENSE reports TWELL_ERR_UNSUPPORTED with the reason. Only TWELL_ERR_NO_MEMORY fails. The
 * workspace is allocated at the first dense call. Inside tw_cu_enter/leave. *out NULL on failure.
 */
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
 *   y = H · Wd, Wd [N, K] read as it is (MN-major operand of the GEMM; no transposed copy).
 * So the dense path costs two GEMMs (up and down) after the caller's gate-pack, not three. A GEMM
 * whose grid would leave most of the device idle (few rows: at most half the clusters busy) is
 * split along its reduction into S slices of whole 64-wide k-blocks (dense_split.h: test
 * control's S, else the chunk's M bucket's tuned winner, else tw_ffn_dense_split): fp32 partials
 * into the workspace, then a reduction kernel sums them in slice order and applies the epilogue
 * (the gate, the activation, the rounding), so results stay bitwise reproducible for a given S.
 * An eager dense call first resolves its chunks' M buckets (once
 * each, memoised: the stored ffn_dense winner, tuned first when the context has
 * options.tune_on_first_use); a captured call resolves nothing (a bucket left unresolved runs the
 * rule: twell_plan_reserve resolves them beforehand).
 *
 * AUTO: the route is tw_ffn_policy's (ffn_policy.h) for the call's M and the plan's estimate:
 * the latest counts that have reached the host, else the nnz_per_row of twell_plan_reserve, else
 * none (the first call then runs the tiled pipeline where the policy needs an estimate). Every
 * eager AUTO call counts its packed activation on the device (a sparse call: in the sparse
 * pre-pass, tw_cuda_ffn_launch's stats; a dense call or a sparse one on the simple kernels: a
 * small kernel) and the total reaches pinned memory (written there by the pre-pass when the
 * driver maps it, else copied); a later call reads it when an event recorded after it has
 * completed (cuEventQuery, never a wait). The dense path needs sm_90a, K % 64 == 0 and 16-byte
 * aligned x, weights and y; otherwise AUTO runs sparse and DENSE fails with
 * TWELL_ERR_UNSUPPORTED. Calls on different streams are ordered through an event (the workspace
 * is shared); growing the workspace for a larger chunk waits for the previous dense call
 * (counted by TW_TC_DENSE_GROW_SYNCS).
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

/* twell_plan_reserve's part: resolves the split factors of every M bucket a chunk of up to
 * max_M rows falls in (stored ffn_dense winners; tuned first with options.tune_on_first_use), so
 * a captured call runs them, then the dense workspace (H for min(max_M, a chunk) rows, the unit
 * flags, the split-K partials for every row count up to that) when the dense
 * path is available (nothing otherwise). May wait for the previous
 * dense call (a larger H). Inside tw_cu_enter/leave. */
twell_status tw_cuda_dense_reserve_rows(twell_plan *plan, tw_dense *d, size_t max_M);
/* The estimate AUTO uses until counts have been read back (< 0: none). */
void tw_cuda_dense_set_hint(tw_dense *d, double nnz_per_row);

/* twell_plan_tune's dense part: for a plan whose dense path is available and whose path is not
 * SPARSE, unless flags has TWELL_TUNE_STORED_ONLY, makes sure the M bucket of a chunk of M rows
 * has a stored winner of ffn_dense (tw_tune_op_ensure; TWELL_TUNE_RETUNE times again), then looks
 * the record up again for this plan (the chunks of a call of M rows then run it). TWELL_OK and
 * nothing done otherwise. Errors: those of tuning. */
twell_status tw_cuda_dense_tune(twell_plan *plan, tw_dense *d, size_t M, unsigned flags);

/* The template parameters of gemm_sm90 the dense path loads for GEMM g (TW_DENSE_UP or
 * TW_DENSE_DOWN, dense_split.h) of shape s, unsplit or split-K (split): what plans render, so the
 * tuner's cubin is theirs. Returns the count (≤ TW_DENSE_GEMM_NPARAMS). */
#define TW_DENSE_GEMM_NPARAMS (TW_SHAPE_NPARAMS + 4)
size_t tw_dense_gemm_params(const twell_shape *s, int g, int split,
                            tw_param out[TW_DENSE_GEMM_NPARAMS]);

/* The heavy-row route's GEMMs (cuda_ffn_heavy.c): gemm_sm90 module fn, compiled with DM = 1
 * (and SPLIT = split), over a block laid out for mcap rows of which the first min(mcap, *mrows)
 * (device memory written earlier in stream order) are computed. Operands as the dense path's:
 * A [mcap, kred]; B [ncols, kred] (G likewise, gated) or with tb Wd [kred, ncols]; out [mcap,
 * ncols] 16-bit, or (split) fp32 partials part[(s·mcap + row)·ncols + col] of nsplit slices
 * (1..kred/64). flags: gated, one word per unit of mcap rows. Context current. */
twell_status tw_cuda_dense_gemm_dm(twell_plan *plan, tw_CUfunction fn, int split, size_t mcap,
                                   uint32_t kred, uint32_t ncols, const void *a, const void *b,
                                   const void *g, int tb, void *out, const uint32_t *packed,
                                   const uint32_t *flags, unsigned nsplit, const int *mrows,
                                   twell_stream stream);

/* The tuner's hooks (dense_tuner.c). tw_cuda_dense_usable: 1 when plan's dense path can run
 * (*why, may be NULL: why not, borrowed from the plan). tw_cuda_dense_tune_force: every later
 * dense call of plan runs split factors {up, down} (as TW_TC_DENSE_SET_SPLIT; 0: the bucket's
 * choice) and the workspace for calls of up to M rows is reserved now (may wait for the previous
 * dense call), so a timed call allocates nothing. Enters the context itself. */
int tw_cuda_dense_usable(const twell_plan *plan, const char **why);
/* The factors [up, down] of plan's last dense call's last chunk ({0, 0} before any). */
void tw_cuda_dense_last_split(const twell_plan *plan, unsigned out[2]);
twell_status tw_cuda_dense_tune_force(twell_plan *plan, unsigned up, unsigned down, size_t M);

/* The TW_TC_DENSE_* operations of tw_test_control (test_control.h): the path last run, the AUTO
 * estimate, threshold and route, counts, workspace probes and poisoning. */
twell_status tw_dense_test_control(int op, va_list ap);

#endif /* TWELL_CUDA_DENSE_H */
