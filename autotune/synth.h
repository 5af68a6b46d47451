/* synth.h — deterministic synthetic sparse FFN data (inputs and weights whose gate fires about a
 * target number of neurons per row) and the reports built on it: nnz statistics of a packed
 * buffer and a dense fp64 FFN to measure errors against. Used by `twell demo`, the benchmark,
 * the autotuner and the tests. */
#ifndef TWELL_SYNTH_H
#define TWELL_SYNTH_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

typedef enum tw_synth_dist {
    TW_SYNTH_UNIFORM = 0, /* every neuron fires with probability nnz/N */
    TW_SYNTH_SKEWED = 1 /* 30% dead neurons, log-normal activity, dense first tokens, heavy rows */
} tw_synth_dist;

typedef struct tw_synth_params {
    size_t M;          /* rows of x */
    uint32_t K, N;     /* model and hidden width */
    twell_dtype dtype; /* element type of every tensor */
    int gated;         /* non-zero: Wg carries the sparsity; zero: Wu does and wg is not made */
    double nnz;        /* target mean active neurons per (ordinary) row, in (0, N] */
    tw_synth_dist dist;
    uint64_t seed;
    double heavy_frac; /* skewed: fraction of rows whose activity is ~20% (row-tiles overflow) */
    uint32_t seq_len;  /* skewed: the first row of every seq_len rows is denser */
} tw_synth_params;

/* M = 256, K = 2048, N = 5632, bf16, gated, 29 nnz, uniform, seed 1, heavy_frac 0.02 and
 * seq_len 2048 (used by skewed only). */
tw_synth_params tw_synth_params_default(void);

/* "uniform" / "skewed" <-> the enum; parse returns 0 on success, -1 for an unknown name. */
const char *tw_synth_dist_name(tw_synth_dist d);
int tw_synth_dist_parse(const char *name, tw_synth_dist *out);

/* Fills caller buffers with the 16-bit patterns of x [M, K] and the weights [N, K] (wg only when
 * p->gated; it may be NULL otherwise). Element values depend only on (params, seed, index): the
 * result does not depend on pool's thread count. Construction: x[:, 0] = 1, the other x ~ N(0,
 * s_m²) with s_m a per-row scale; weights ~ N(0, 1/K), except the packing weight's column 0 =
 * -b_n, a per-neuron threshold set from the normal quantile of the neuron's firing probability.
 * TWELL_ERR_INVALID_ARG for bad parameters (K < 2, N = 0, nnz outside (0, N], heavy_frac outside
 * [0, 1], bad dtype/dist, NULL buffers). */
twell_status tw_synth_fill(tw_pool *pool, const tw_synth_params *p, uint16_t *x, uint16_t *wg,
                           uint16_t *wu, uint16_t *wd);

/* The same data in buffers owned by the returned object (wg NULL when not gated). */
typedef struct tw_synth_ffn {
    tw_synth_params p;
    uint16_t *x, *wg, *wu, *wd;
} tw_synth_ffn;

twell_status tw_synth_create(tw_pool *pool, const tw_synth_params *p, tw_synth_ffn **out);
void tw_synth_destroy(tw_synth_ffn *f); /* NULL is a no-op */

/* The weight gate-pack takes for f: wg when gated, else wu. */
const uint16_t *tw_synth_pack_weight(const tw_synth_ffn *f);

/* Active-neuron statistics of a packed buffer (counts are exact, overflow or not). */
typedef struct tw_synth_stats {
    size_t rows;
    uint64_t total;        /* active entries in all rows */
    double mean_row;       /* total / rows */
    uint32_t min_row;      /* fewest active in a row */
    uint32_t max_row;      /* most active in a row */
    uint32_t max_tile;     /* most active in one row-tile */
    size_t overflow_tiles; /* row-tiles with count > T/C - 1 */
    size_t overflow_rows;  /* rows with at least one overflowing row-tile */
} tw_synth_stats;

void tw_synth_packed_stats(const twell_shape *s, size_t M, const uint32_t *packed,
                           tw_synth_stats *out);

/* A plain dense fp64 computation of the FFN (no rounding anywhere but the inputs) for the rows
 * listed in rows[0..nrows): y64[i*K + k] is row rows[i]. Gated: (relu(x·Wgᵀ) ⊙ x·Wuᵀ)·Wd;
 * non-gated: relu(x·Wuᵀ)·Wd (wg unused). Parallel over the listed rows. TWELL_ERR_NO_MEMORY. */
twell_status tw_synth_ffn64(tw_pool *pool, const twell_shape *s, const uint16_t *x,
                            const uint16_t *wg, const uint16_t *wu, const uint16_t *wd,
                            const size_t *rows, size_t nrows, double *y64);

/* ‖y − y64‖ / ‖y64‖ (Frobenius, over the listed rows of y [M, K] of s->dtype); 0 when both are
 * zero. */
double tw_synth_rel_error(const twell_shape *s, const uint16_t *y, const size_t *rows, size_t nrows,
                          const double *y64);

#endif /* TWELL_SYNTH_H */
