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
    TW_ROUTE_SMALL = 0, /* the small-batch kernels (decode sizes; not in this tree yet) */
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
    double dense_thr; /* > 0: replaces the dense threshold at every M (test hook), in active
                         values per row */
    size_t dense_min_rows; /* > 0: replaces the smallest M that may run dense (test hook) */
} tw_ffn_policy_in;

/* The route for `in`, in this order:
 *  1. SMALL when small_ok and M ≤ TW_POLICY_SMALL_MAX_ROWS;
 *  2. DENSE when dense_ok, M ≥ the dense path's smallest M (TW_POLICY_DENSE_MIN_ROWS unless
 *     overridden) and the estimate exceeds tw_ffn_policy_dense_threshold(M, N) (TW_POLICY_STAY
 *     of it after a dense call); with no estimate (est < 0), DENSE only where that threshold is 0
 *     (dense wins at every density there);
 *  3. TILED otherwise (it runs everywhere and is exact for any data).
 * Pure; never fails. */
tw_ffn_route tw_ffn_policy(const tw_ffn_policy_in *in);

/* The mean active values per row above which the dense path beats the tiled pipeline at M rows
 * of hidden width N (0: at every density; +inf never, below TW_POLICY_DENSE_MIN_ROWS). */
double tw_ffn_policy_dense_threshold(size_t M, uint32_t N);

/* ---- crossovers (H100 / H200, bf16, K = 2048, N = 5632; `twell bench --op ffn_infer --path
 * sparse|dense` at the listed M and 29 / 56 / 110 / 280 / 1126 active per row, ratios to the same
 * dense cuBLAS FFN in the same run). Re-measure when either path changes. ---- */

/* Largest M the small-batch path takes (when it can run). Placeholder until that path lands:
 * its own crossover against the tiled pipeline sets it. */
#define TW_POLICY_SMALL_MAX_ROWS ((size_t)256)

/* Below this M AUTO never runs dense: the GEMMs' fixed costs dominate there. Measured on the
 * H200 (bench/dev/NOTES-fused.md "measurement 2"): see TW_POLICY_DENSE_DENSITY. */
#define TW_POLICY_DENSE_MIN_ROWS ((size_t)1024)

/* From TW_POLICY_DENSE_MIN_ROWS rows the dense path wins above this fraction of N active per
 * row. H200, sparse kernels of 390fc9d, uniform data, median of 20: at M = 16384 sparse takes
 * 1.33 / 1.44 / 1.57 ms at 56 / 69 / 84 active per row, dense 1.49-1.50 ms; at M = 4096 0.376 /
 * 0.409 / 0.447 against 0.431 ms: the paths cross near 75 (M = 16384) and 78 (M = 4096) per row,
 * 1.33% of N. The sparse cost grows with active values x K and the dense one with N x K, so the
 * crossover is a density. */
#define TW_POLICY_DENSE_DENSITY 0.0133

/* After a dense call AUTO stays dense while the estimate exceeds this part of the threshold. */
#define TW_POLICY_STAY 0.8

#endif /* TWELL_FFN_POLICY_H */
