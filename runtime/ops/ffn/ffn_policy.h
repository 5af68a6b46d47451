/*
 * ffn_policy.h — the one place where twell_ffn_infer's TWELL_PATH_AUTO chooses its path, from the
 * call's M, the plan's estimate of the density and what the device can run. Pure (no CUDA):
 * tests/test_ffn_policy.c checks its decision table on the CPU. The crossovers are the named
 * constants below, each with how it was measured.
 */
#ifndef TWELL_FFN_POLICY_H
#define TWELL_FFN_POLICY_H

#include <stddef.h>
#include <stdint.h>

/* The implementations twell_ffn_infer can run on CUDA. */
typedef enum tw_ffn_route {
    TW_ROUTE_SMALL = 0, /* the small-batch kernels (decode sizes, cuda_small.c) */
    TW_ROUTE_TILED = 1, /* the tiled TwELL pipeline (cuda_ffn.c): TWELL_PATH_SPARSE */
    TW_ROUTE_DENSE = 2  /* the dense GEMMs after the gate-pack (cuda_dense.c): TWELL_PATH_DENSE */
} tw_ffn_route;

/* "small", "tiled", "dense"; NULL for another value. */
const char *tw_ffn_route_name(tw_ffn_route r);

/* What the choice depends on. */
typedef struct tw_ffn_policy_in {
    size_t M;         /* rows of the call (≥ 1) */
    uint32_t N;       /* hidden width */
    double est;       /* mean active values per row the plan knows (from earlier calls' counts, or
                         the nnz_per_row given to twell_plan_reserve); < 0: nothing known */
    int small_ok;     /* the small-batch path can run this call */
    int dense_ok;     /* the dense path can run this call (sm_90a, K % 64, 16-byte alignment) */
    int was_dense;    /* the plan's previous call ran dense (hysteresis, against flapping) */
    double dense_thr; /* > 0: replaces the dense threshold at every M (test control), in active
                         values per row */
    size_t dense_min_rows; /* > 0: replaces the smallest M that may run dense (test control) */
} tw_ffn_policy_in;

/* The route for `in`, in this order:
 *  1. DENSE when dense_ok, M ≥ the dense path's smallest M (TW_POLICY_DENSE_MIN_ROWS unless
 *     overridden) and the estimate exceeds tw_ffn_policy_dense_threshold(M, N) (TW_POLICY_STAY
 *     of it after a dense call); with no estimate (est < 0), DENSE only where that threshold is 0
 *     (dense would win at every density there; no such M in the measured table);
 *  2. SMALL when small_ok and M ≤ TW_POLICY_SMALL_MAX_ROWS: it replaces the tiled pipeline where
 *     that one would run (the measured comparison, below); where the estimate says dense beats
 *     the tiled pipeline, dense stays (small against dense at those densities is not measured,
 *     and at ~20% active every row-tile overflows and the small path recomputes them on CUDA
 *     cores);
 *  3. TILED otherwise (it runs everywhere and is exact for any data).
 * Pure; never fails. */
tw_ffn_route tw_ffn_policy(const tw_ffn_policy_in *in);

/* The mean active values per row above which the dense path beats the tiled pipeline at M rows
 * of hidden width N: a fraction of N per range of M, from the table below (+inf below
 * TW_POLICY_DENSE_MIN_ROWS). */
double tw_ffn_policy_dense_threshold(size_t M, uint32_t N);

/* ---- crossovers ----
 * Measured on an H100 (80GB HBM3, 132 SMs, driver 580.159.04), 2026-11-26, bf16, K = 2048,
 * N = 5632, uniform data, medians of 10, L2 flushed, each path forced in one run:
 *   twell bench --op ffn_infer --path sparse|dense --M 1,8,64,256,1000,4096,16384
 *               --nnz 29,56,110,280,1126 --dist uniform --mode both --reps 10
 * (bench/results/ffn_infer-2026-11-26T152709.json sparse, …T152714.json dense; BENCHMARKS.md
 * "Every batch size"). Gate-pack + ffn_infer, ms, tiled / dense at 29, 56, 110, 280 active per row:
 *   M = 1, 8   tiled 0.081-0.109, dense 0.149-0.153: tiled at every density (also 1126)
 *   M = 64     tiled 0.119 0.131 0.157 0.235, dense 0.151-0.154: cross ~110 per row (2.0%)
 *   M = 256    tiled 0.124 0.140 0.174 0.352, dense 0.152-0.155: cross ~75 (1.33%)
 *   M = 1000   tiled 0.168 0.210 0.284 0.804, dense 0.199-0.202: cross ~51 (0.9%)
 *   M = 4096   tiled 0.308 0.366 0.491 1.210, dense 0.450-0.462: cross ~94 (1.66%)
 *   M = 16384  tiled 1.084 1.343 1.805 4.785, dense 1.557-1.592: cross ~82 (1.45%)
 * (crossovers interpolated linearly between the two densities that bracket them). The dense cost
 * hardly depends on the density; the tiled one grows with active values x K. At 1126 per row
 * (20%) every row-tile overflows and the tiled pipeline recomputes them on tensor cores: it is then
 * 6% faster than dense at M = 64 (0.164 / 0.174 ms); the rule still picks dense there. Re-measure
 * when either path changes. ---- */

/* Largest M the small-batch path takes (when it can run). Measured on an H100, K = 2048,
 * N = 5632, bf16, uniform, 29 active per row, medians of 20, L2 flushed (BENCHMARKS.md "Small
 * batches"), twell_ffn_infer alone, small against tiled: 0.014 / 0.026 / 0.061 / 0.104 ms against
 * 0.054 / 0.086 / 0.092 / 0.104 at M = 1 / 64 / 256 / 512 (crossover near 512; 0.220 against
 * 0.117 at 1000); kept at 256, the last M where small clearly wins. */
#define TW_POLICY_SMALL_MAX_ROWS ((size_t)256)

/* Below this M AUTO never runs dense (M = 1 and 8 above: its GEMMs' fixed cost, ~0.12 ms, is
 * above the tiled pipeline's at every density). */
#define TW_POLICY_DENSE_MIN_ROWS ((size_t)32)

/* After a dense call AUTO stays dense while the estimate exceeds this part of the threshold. */
#define TW_POLICY_STAY 0.8

/* ---- split-K of the dense path's GEMMs (cuda_dense.c) ----
 * A dense GEMM of `units` cluster tiles (128·CLUSTER rows x 256 columns each) keeps only `units`
 * of the device's clusters busy: at decode sizes the down GEMM (K/256 tiles, 8 at K = 2048) and
 * the up GEMM (N/256, 22 at N = 5632) leave most SMs idle while one cluster streams its whole
 * weight column block (session 4, H100: the dense path ~0.15 ms flat from M = 1 to 256 where
 * cuBLAS's three GEMMs take ~0.05 ms). Splitting the reduction into S slices of whole 64-wide
 * k-blocks runs units·S work items, fp32 partials reduced in slice order by a second kernel.
 * The rule below is not measured yet (no device in the session that wrote it): it only fills one
 * wave. It is the fallback: the factors are tuned per M bucket (op ffn_dense, dense_space.c) and a
 * stored winner replaces it (dense_split.h). Re-measure with `twell bench --op ffn_infer --path
 * dense` and the TW_TC_DENSE_SET_SPLIT override. */

/* Fewest k-blocks a slice may hold (each slice refills the TMA ring: 3-4 stages). */
#define TW_POLICY_SPLIT_MIN_KB 4u
/* Most slices (bounds the partial workspace and the reduction's reads). */
#define TW_POLICY_SPLIT_MAX 16u

/* Slices S ≥ 1 for a GEMM of `units` tiles over `kblocks` k-blocks on a device that runs
 * `clusters` clusters at once: the largest S with units·S ≤ clusters (so S > 1 only where at
 * least half the clusters would idle), at most kblocks / TW_POLICY_SPLIT_MIN_KB and
 * TW_POLICY_SPLIT_MAX; 1 for zero units or clusters. Pure; never fails. */
unsigned tw_ffn_dense_split(size_t units, unsigned kblocks, unsigned clusters);

#endif /* TWELL_FFN_POLICY_H */
