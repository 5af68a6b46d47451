/*
 * ref64_train.h — naive dense fp64 model of the training forward and backward (the oracle of the
 * training tests), plus the small seeded data generators those tests use.
 */
#ifndef TW_REF64_TRAIN_H
#define TW_REF64_TRAIN_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* ---- deterministic random numbers (splitmix64) ---- */
typedef struct tw_t_rng {
    uint64_t s;
} tw_t_rng;

uint64_t tw_t_next(tw_t_rng *r);
double tw_t_uniform(tw_t_rng *r);          /* [0, 1) */
int tw_t_int(tw_t_rng *r, int lo, int hi); /* [lo, hi] */

/* Nearest dtype value of v > 0 (round to nearest even, directly from fp64: no double rounding
 * through fp32); 0 for v <= 0. Returns the 16-bit pattern. */
uint16_t tw_t_round16(twell_dtype dt, double v);
double tw_t_val16(twell_dtype dt, uint16_t h);

/* ---- training data ---- */
typedef struct tw_t_gen {
    double density; /* target active fraction of ordinary rows and neurons (0, 0.5) */
    int skew;       /* heavy rows (every 8th from row 0: ~90%, every 8th from row 3: ~50%) and
                       heavy neurons (every 16th from neuron 5: ~90% in ordinary rows) */
    int exact_gate; /* x and Wg are small integers times powers of two, so the fp32 gate dot
                       product is exact and the support cannot differ from fp64 */
    uint64_t seed;
} tw_t_gen;

typedef struct tw_t_data {
    twell_dtype dt;
    size_t M;
    uint32_t K, N;
    uint16_t *x, *wg, *wu, *wd, *dy; /* [M,K] [N,K] [N,K] [N,K] [M,K] */
} tw_t_data;

/* Allocates and fills d (returns 0 on success, -1 out of memory). Column 0 of x and Wg carries a
 * per-row and per-neuron offset that sets the density; the rest is uniform noise. */
int tw_t_data_make(tw_t_data *d, twell_dtype dt, size_t M, uint32_t K, uint32_t N,
                   const tw_t_gen *g);
void tw_t_data_free(tw_t_data *d);

/* n 16-bit values as a malloc'ed fp64 array (NULL out of memory). */
double *tw_t_to_f64(twell_dtype dt, const uint16_t *src, size_t n);
double *tw_t_f32_to_f64(const float *src, size_t n);

/* ---- the fp64 model ---- */
enum { TW_T_P_RELU = 0, TW_T_P_ROUND = 1 };

typedef struct tw_t_ref {
    size_t M;
    uint32_t K, N;
    double *pre;    /* [M,N] gate pre-activation x·Wgᵀ */
    double *P;      /* [M,N] gate value; > 0 exactly on the support */
    double *U;      /* [M,N] x·Wuᵀ on the support, 0 elsewhere */
    double *y;      /* [M,K] Σ_n U·P·Wd_n, unrounded */
    double *absdot; /* [M,N] Σ_k |x||Wg|: the scale of pre's rounding error */
    size_t nnz;
    double L0, L1;
} tw_t_ref;

/* Forward in fp64. P = relu(pre) (mode TW_T_P_RELU: the exact function the gradients
 * differentiate) or relu(pre) rounded to dt (TW_T_P_ROUND: the library's stored value); when
 * p_override [M,N] is not NULL it replaces P (support = P > 0). Returns 0, or -1 out of memory. */
int tw_t_ref_forward(tw_t_ref *r, size_t M, uint32_t K, uint32_t N, const double *x,
                     const double *wg, const double *wu, const double *wd, int mode, twell_dtype dt,
                     const double *p_override);
void tw_t_ref_free(tw_t_ref *r);

/* loss = <dy, y> + λ·L1, in fp64. */
double tw_t_ref_loss(const tw_t_ref *r, const double *dy, double lambda);

/* The exact gradients of tw_t_ref_loss for the support of r (fixed) with ReLU' = 1 on it:
 * dx [M,K], dwg, dwu, dwd [N,K], all fp64, overwritten. */
void tw_t_ref_backward(const tw_t_ref *r, const double *x, const double *wg, const double *wu,
                       const double *wd, const double *dy, double lambda, double *dx, double *dwg,
                       double *dwu, double *dwd);

/* Magnitude scales of every result for the support and P of r: the same model evaluated on
 * |x|, |Wg|, |Wu|, |Wd|, |dy| (U becomes Σ|x·Wu|, dT becomes Σ|dy·Wd| + λ/M), i.e. the sum of
 * the absolute values of every term that enters each result. fp32 rounding errors are bounded
 * by a small multiple of these. Outputs as in tw_t_ref_backward plus sy [M,K]. 0 or -1 (OOM). */
int tw_t_ref_scales(const tw_t_ref *r, const double *x, const double *wg, const double *wu,
                    const double *wd, const double *dy, double lambda, double *sy, double *sdx,
                    double *sdwg, double *sdwu, double *sdwd);

/* Worst error of n results a against the reference b with magnitude scales s: the largest
 * (|a-b| - round_rel·|b| - round_abs) / s, where round_rel and round_abs allow for one final
 * rounding to a 16-bit type (0 for fp32 results). *where receives its index (may be NULL). */
double tw_t_err_scaled(const double *a, const double *b, const double *s, size_t n,
                       double round_rel, double round_abs, size_t *where);

/* ---- the library under test, on the CPU backend ----
 * One place that opens a context with a given thread count, a gated plan and a training state,
 * and runs the library's training forward/backward on tw_t_data. */
typedef struct tw_t_lib {
    twell_ctx *ctx;
    twell_plan *plan;
    twell_train_state *state;
    twell_shape shape;
} tw_t_lib;

/* Returns 0, or -1 (message on stderr). threads: twell_ctx_options.cpu_threads. */
int tw_t_lib_open(tw_t_lib *L, const twell_shape *s, int threads);
void tw_t_lib_close(tw_t_lib *L);
twell_status tw_t_lib_forward(tw_t_lib *L, const tw_t_data *d, uint16_t *y, float *stats);
twell_status tw_t_lib_backward(tw_t_lib *L, const tw_t_data *d, float lambda, uint16_t *dx,
                               float *dwg, float *dwu, float *dwd);

/* The library's saved gate as a dense [M,N] fp64 array (0 off the support), read back from the
 * saved state of the last forward (ELL slots and spill). NULL out of memory. */
double *tw_t_lib_dense_p(const tw_t_lib *L);

#endif /* TW_REF64_TRAIN_H */
