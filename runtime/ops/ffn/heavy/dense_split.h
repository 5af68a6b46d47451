/*
 * dense_split.h — the hand-written Hopper GEMM's geometry (templates/gemm/gemm_sm90.cu.lua) and its
 * split-K rule, written once: which split factors a GEMM may run (tw_dense_split_check), the
 * partial workspace they need, how a call's factors are chosen (a forced pair, else a valid tuned
 * pair, else tw_ffn_dense_split), and the grid of the reductions that sum the partials. Its users
 * are the heavy-row routes and the training dense path; the inference dense route is cuBLASLt's.
 * Pure: no CUDA.
 */
#ifndef TWELL_DENSE_SPLIT_H
#define TWELL_DENSE_SPLIT_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* Tile configuration rendered into gemm_sm90 (its STAGES and CLUSTER) and fixed by the kernel. */
#define TW_DG_STAGES 3u
#define TW_DG_CLUSTER 2u
#define TW_DG_BM 128u
#define TW_DG_BN 256u
#define TW_DG_BK 64u
#define TW_DG_THREADS 384u
/* Dynamic shared memory; must equal SMEM in the template (its first line prints it): 1 KB of
 * alignment slack, the stage ring, the 128-row staging buffer (528-byte rows), the mbarriers. */
#define TW_DG_SMEM                                                                                 \
    (1024u + TW_DG_STAGES * (TW_DG_BM + TW_DG_BN) * TW_DG_BK * 2u + TW_DG_BM * 528u +              \
     2u * TW_DG_STAGES * 8u)
#define TW_DG_UNIT_ROWS (TW_DG_BM * TW_DG_CLUSTER)
/* The split-K GEMMs (SPLIT = 1) have no staging buffer: a deeper ring in the same budget (must
 * equal the template's SMEM for STAGES = TW_DG_SPLIT_STAGES, SPLIT = 1). */
#define TW_DG_SPLIT_STAGES 4u
#define TW_DG_SPLIT_SMEM                                                                           \
    (1024u + TW_DG_SPLIT_STAGES * (TW_DG_BM + TW_DG_BN) * TW_DG_BK * 2u +                          \
     2u * TW_DG_SPLIT_STAGES * 8u)

/* The two GEMMs of the dense path: up (reduction K, N output columns; two partial planes when
 * gated: the recomputed gate) and down (reduction N, K output columns). */
enum { TW_DENSE_UP = 0, TW_DENSE_DOWN = 1 };

/* Most bytes of fp32 partials one split GEMM may write for a tuned or rule-chosen split: the
 * partials are written once and read once by the reduction, so at 128 MiB (tens of µs of HBM
 * traffic) a split already costs more than the GEMMs it would rebalance at the small M where
 * splitting pays; it also bounds the workspace a stored record could ask for. A forced pair is
 * exempt: it only clamps to the k-blocks. */
#define TW_DENSE_SPLIT_PART_MAX ((size_t)128 << 20)

/* Units (cluster tiles, 256 rows x 256 columns) of a GEMM of m rows and ncols output columns. */
size_t tw_dense_gemm_units(size_t m, uint32_t ncols);

/* Blocks (of 256 threads) of a kernel that walks m rows x ncols columns in items of one row x 256
 * columns, a warp per item, grid-stride: dense_aux.cu.lua's split-K reduction
 * (twell_dense_reduce_plain). A block per 8 items, at most 16 per SM of the sms the device has
 * (the blocks loop over the rest): min(ceil(m·ceil(ncols/256) / 8), 16·sms); 0 when m or ncols
 * is 0. The training dense path's split GEMMs (cuda_train_dense.c, td_mm) launch with it. Pure. */
size_t tw_dense_reduce_grid(size_t m, uint32_t ncols, unsigned sms);

/* 64-wide k-blocks of GEMM g's reduction for shape s. */
unsigned tw_dense_kblocks(const twell_shape *s, int g);

/* Bytes of fp32 partials GEMM g needs for m rows split nsplit ways (0 when nsplit < 2). */
size_t tw_dense_part_need(const twell_shape *s, int g, unsigned nsplit, size_t m);

/* Whether GEMM g of shape s may run split nsplit ways for chunks of up to m rows: 0 when
 * 1 ≤ nsplit ≤ TW_POLICY_SPLIT_MAX, every slice holds at least one k-block (nsplit ≤
 * tw_dense_kblocks) and the partials fit TW_DENSE_SPLIT_PART_MAX; else non-zero with the reason
 * in why (may be NULL). Pure. */
int tw_dense_split_check(const twell_shape *s, int g, unsigned nsplit, size_t m, char *why,
                         size_t n);

/* The pure rule's factors for a chunk of m rows on a device running `clusters` clusters at once:
 * tw_ffn_dense_split per GEMM (always valid by tw_dense_split_check). */
void tw_dense_split_rule(const twell_shape *s, size_t m, unsigned clusters, unsigned sp[2]);

/* ---- split-K of the heavy-row route's hand-written GEMMs (dense_gemm_sm90.c) ----
 * A GEMM of `units` cluster tiles (128·CLUSTER rows x 256 columns each) keeps only `units` of the
 * device's clusters busy; splitting the reduction into S slices of whole 64-wide k-blocks runs
 * units·S work items, fp32 partials reduced in slice order by a second kernel. The rule fills one
 * wave. */

/* Fewest k-blocks a slice may hold (each slice refills the TMA ring: 3-4 stages). */
#define TW_POLICY_SPLIT_MIN_KB 4u
/* Most slices (bounds the partial workspace and the reduction's reads). */
#define TW_POLICY_SPLIT_MAX 16u

/* Slices S ≥ 1 for a GEMM of `units` tiles over `kblocks` k-blocks on a device that runs
 * `clusters` clusters at once: the largest S with units·S ≤ clusters (so S > 1 only where at
 * least half the clusters would idle), at most kblocks / TW_POLICY_SPLIT_MIN_KB and
 * TW_POLICY_SPLIT_MAX; 1 for zero units or clusters. Pure; never fails. */
unsigned tw_ffn_dense_split(size_t units, unsigned kblocks, unsigned clusters);

#endif /* TWELL_DENSE_SPLIT_H */
