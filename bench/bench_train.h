/*
 * bench_train.h — what the two files of `twell bench --op train` share: the timed units' data
 * (ours and the dense cuBLAS step, bench_train.c) and the checks of their results
 * (bench_train_check.c).
 */
#ifndef TWELL_BENCH_TRAIN_H
#define TWELL_BENCH_TRAIN_H

#include "bench.h"

/* One training step of ours on device buffers: forward, then backward. */
typedef struct {
    twell_plan *plan;
    twell_train_state *state;
    size_t M;
    const void *x, *wg, *wu, *wd, *dy;
    void *y, *dx;
    float *dwg, *dwu, *dwd, *stats;
    float lambda;
} bt_ours;

/* The dense baseline's step (bench_train.c's file comment): its inputs, intermediates, outputs
 * and elementwise kernels. */
typedef struct {
    twell_ctx *ctx;
    bench_cublas *blas;
    size_t M;
    uint32_t K, N;
    bench_cublas_type ty;
    float l1c;
    const void *x, *wg, *wu, *wd, *wuwg, *dy;
    void *G, *U, *H, *y, *dH, *DUG, *dx;
    float *dwg, *dwu, *dwd;
    tw_CUfunction fwd_ew, bwd_ew;
} bt_dense;

/* What the check of the first Mc rows measured (bt_check). */
typedef struct {
    size_t Mc, rows_out, nrn_out, diff, values;
    double err[5]; /* row-relative: y, dx, dWg, dWu, dWd */
} bt_check_res;

/* ---- bench_train.c ---- */

twell_status bt_dense_step(void *arg); /* arg: a bt_dense */

/* TWELL_TRAIN_HEAVY: the sparse path's heavy-row route (test control TW_TC_TRAIN_SET_HEAVY) on
 * the timed and the check states: a row count threshold, a negative value for the library's
 * cost model, 0 off; unset: the library's default (the cost model). */
twell_status bt_heavy_set(twell_train_state *state);

/* ---- bench_train_check.c ---- */

/* The first Mc = min(M, 8·check_rows) rows of the step o on both backends, on a fresh GPU state
 * (f: the case's host data, hdy its dy). Returns 1 when within tolerance; res holds the
 * measures and note says what was measured or what failed. */
int bt_check(bench_env *env, const twell_shape *s, const tw_synth_ffn *f, const uint16_t *hdy,
             float lambda, const bt_ours *o, bt_check_res *res, char *note, size_t notelen);

/* Every element of o's outputs written and finite after the full-M run (they were poisoned
 * first). 0 with note saying what was not. */
int bt_poison_check(bench_env *env, const twell_shape *s, const bt_ours *o, char *note,
                    size_t notelen);

/* Runs the dense baseline d on the full M and compares its outputs with ours (o's, already run):
 * the worst row-relative error, or -1 if a run or copy failed. */
double bt_dense_agree(bench_env *env, const twell_shape *s, const bt_ours *o, bt_dense *d);

#endif /* TWELL_BENCH_TRAIN_H */
