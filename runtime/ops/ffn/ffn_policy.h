/*
 * ffn_policy.h — the one place where twell_ffn_infer's TWELL_PATH_AUTO chooses its path, from the
 * call's M, the plan's estimate of the density and what the device can run. Pure (no CUDA):
 * tests/test_ffn_policy.c checks its decision table on the CPU. The density crossovers by M are
 * the tables tw_policy_dense and tw_policy_row in ffn_policy.c (their one place); the M limits and
 * the hysteresis are the named constants below, each with its reason; the measurements behind
 * them are in BENCHMARKS.md.
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
    int row_ok;     /* the small path's row kernel can run this call (more rows than its fused
                       kernel's, K ≤ 4096) */
    int ovf_seen;   /* the latest counts read had row-tiles that overflow (0: none, or not known) */
    int heavy_seen; /* the plan's tiled pipeline has had rows with overflowing row-tiles (its
                       heavy-row route recomputes them from then on, at a fixed cost a call) */
} tw_ffn_policy_in;

/* The route for `in`, in this order:
 *  0. SMALL (its row kernel) when row_ok, M in [TW_POLICY_ROW_MIN_ROWS, TW_POLICY_ROW_MAX_ROWS],
 *     no overflowing row-tile seen (one block a row recomputes a row's overflowing tiles alone: a
 *     heavy row would hold up the call) and the estimate unknown or at most
 * tw_ffn_policy_row_threshold(M, N) (dense_thr when set; TW_POLICY_STAY of it after a dense call);
 *  1. DENSE when dense_ok, M ≥ the dense path's smallest M (TW_POLICY_DENSE_MIN_ROWS unless
 *     overridden) and the estimate exceeds tw_ffn_policy_dense_threshold(M, N) (TW_POLICY_STAY
 *     of it after a dense call); with no estimate (est < 0), DENSE only where that threshold is 0
 *     (dense wins at every density there: the ranges of M where tw_policy_dense holds 0);
 *  2. SMALL when small_ok and M ≤ TW_POLICY_SMALL_MAX_ROWS: it replaces the tiled pipeline where
 *     that one would run (it is the faster of the two there, below); the dense thresholds up to
 *     TW_POLICY_SMALL_MAX_ROWS are crossovers with the small path, not the tiled one (at ~6%
 *     active and more its row-tiles overflow and are recomputed on CUDA cores);
 *  3. DENSE when dense_ok, M ≥ the dense path's smallest M, M ≤ TW_POLICY_HEAVY_DENSE_MAX_ROWS
 *     and heavy_seen or ovf_seen, unless dense_thr is set (a test's threshold then decides
 *     alone): the tiled pipeline's recomputation of heavy rows costs a fixed
 *     part of a call that is too large at these M;
 *  4. TILED otherwise (it runs everywhere and is exact for any data).
 * Pure; never fails. */
tw_ffn_route tw_ffn_policy(const tw_ffn_policy_in *in);

/* The mean active values per row above which the dense path beats the sparse route AUTO would
 * take at M rows of hidden width N (small to TW_POLICY_SMALL_MAX_ROWS, else tiled): a fraction of
 * N per range of M, from table tw_policy_dense in ffn_policy.c (+inf below
 * TW_POLICY_DENSE_MIN_ROWS). */
double tw_ffn_policy_dense_threshold(size_t M, uint32_t N);

/* Rule 0 alone: whether `in` takes the row kernel. Pure. */
int tw_ffn_policy_row(const tw_ffn_policy_in *in);

/* The mean active values per row up to which the row kernel beats the dense route at M rows
 * (a fraction of N per range of M, table tw_policy_row in ffn_policy.c). */
double tw_ffn_policy_row_threshold(size_t M, uint32_t N);

/* ---- crossovers ----
 * The dense route (cuBLASLt: gate reused from the cuBLASLt gate-pack, up GEMM, h = g ⊙ u, down
 * GEMM) costs what the framework's dense FFN costs plus a packing pass and a count, whatever the
 * density; the sparse routes grow with the active values. Where the sparse route AUTO would take
 * is slower than that even at the lowest densities served (the small-batch kernels past decode
 * sizes, the tiled pipeline up to mid-size M), dense runs at every density (threshold 0). The
 * tables' values (ffn_policy.c) are measured crossovers; the runs behind them are in
 * BENCHMARKS.md "Gate-pack routes and AUTO's crossovers" (re-measure when a route changes: `twell
 * bench --op ffn_infer --path small|sparse|dense --M ... --nnz ...`). ---- */

/* Largest M the small-batch path takes (when it can run): its kernels read each active weight row
 * once per call but gather per (row, neuron) pair, so past a few hundred rows the tiled pipeline
 * wins; the crossover with tiled lies near 512 rows, and 256 is the last M where small clearly
 * wins (BENCHMARKS.md, "Gate-pack routes and AUTO's crossovers"). */
#define TW_POLICY_SMALL_MAX_ROWS ((size_t)256)

/* The rows the row kernel takes in AUTO (rule 0): one 512-thread block a row, no workspace; past
 * the largest the tiled pipeline's staged weight chunks win (BENCHMARKS.md, "Every batch size").
 * Below the smallest the up and down kernels serve: a kernel of one block a row lasts as long as
 * its densest row, so at those M a sequence's dense first token holds the whole call up, while
 * the up and down kernels spread that row over the neurons (the runs: docs/DESIGN.md §9,
 * "Mid-batch row kernel"). */
#define TW_POLICY_ROW_MIN_ROWS ((size_t)96)
#define TW_POLICY_ROW_MAX_ROWS ((size_t)1024)

/* The smallest M AUTO may run dense: 1 (the dense route beats the small path at decode sizes once
 * its row-tiles overflow, above ~6% active). */
#define TW_POLICY_DENSE_MIN_ROWS ((size_t)1)

/* The rows twell_gate_pack runs through cuBLASLt (a GEMM into an L2-resident buffer, then a
 * packing pass that applies relu) on its own: above the small-batch gate-pack's rows and
 * below where the fused Hopper kernel wins again (the crossover and its table: BENCHMARKS.md
 * "Gate-pack routes and AUTO's crossovers"). Calls the dense route will reuse run it at any M. */
#define TW_POLICY_LT_GATE_MIN_ROWS ((size_t)33)
#define TW_POLICY_LT_GATE_MAX_ROWS ((size_t)1447)

/* Rule 3's largest M: the last M of the tw_policy_dense range that follows its range of 0 (in
 * which rule 1 sends every call dense anyway). Over this range a batch with one heavy row (a
 * sequence's first token) costs the tiled pipeline a fixed time a call (its heavy-row block and
 * overflow kernels), which leaves it behind the dense route up to this M; from ~4096 rows the
 * tiled pipeline's margin covers that cost (skewed data; the runs: docs/DESIGN.md §5,
 * BENCHMARKS.md "Whole model"). */
#define TW_POLICY_HEAVY_DENSE_MAX_ROWS ((size_t)2895)

/* After a dense call AUTO stays dense while the estimate exceeds this part of the threshold. */
#define TW_POLICY_STAY 0.8

#endif /* TWELL_FFN_POLICY_H */
