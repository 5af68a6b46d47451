/*
 * bench_train.c — `twell bench --op train`: one training step (twell_ffn_forward_train +
 * twell_ffn_backward) against a dense cuBLAS step on the same data, timed interleaved in the same
 * run (L2 flushed, medians). Records: op "train" (forward + backward), "train_fwd", "train_bwd".
 *
 * Dense baseline (fp32 accumulation, dtype activations, fp32 weight gradients like ours):
 *   forward   G = x·Wgᵀ, U = x·Wuᵀ (2 GEMMs), H = relu(G) ⊙ U (JIT kernel), y = H·Wd (GEMM)
 *   backward  dH = dy·Wdᵀ (GEMM); dT = dH + (λ/M)·sign(U) on G > 0, dU = dT·relu(G),
 *             dG = dT·U (JIT kernel, writes [dU | dG] as one [M, 2N] matrix); dx = dU·Wu + dG·Wg
 *             as one GEMM over the concatenated 2N (the two dx GEMMs in one call);
 *             dWu = dUᵀ·x, dWg = dGᵀ·x, dWd = Hᵀ·dy (3 GEMMs, fp32 out).
 * Its extra activation memory is G, U, H, dH and [dU | dG]: 6·M·N dtype values; ours is the
 * training state (twell_train_state_bytes): after the first full-M step, after the timed steps
 * (the steady state: AUTO frees an idle dense workspace once it runs sparse) and the case's peak
 * after any op (TW_TC_TD_PEAK_BYTES). All go into the note and a "# memory" line on stdout.
 *
 * Check: the first Mc = min(M, 8·check_rows) rows run forward + backward on the GPU (a fresh
 * state) and on the CPU reference; the comparison is support-aware (train_check.h): the sm_90a
 * gate-pack sums in another order than the CPU, so a few entries flip (pre-activation near zero:
 * their rows and neurons are left out, at most 1% of rows allowed) and some gate values sit one
 * 16-bit step apart (their neurons are left out of the fp32 weight-gradient comparison, their
 * rows stay within the 16-bit tolerance). Tolerances: y, dx row-relative 5e-3 (bf16) / 1e-3
 * (fp16); dWg, dWu, dWd by the library's stated rule (tests/verify/train_wcheck.h, the rule of
 * tests/test_ref_train.c and of the tiled route in tests/test_gpu_train.c): against an fp64
 * model on the CPU's support and gate values, |got − fp64| ≤ 2e-5 · Σ|terms| per element, Σ|terms|
 * from the same model on absolute values; the CPU reference's own worst on that scale is printed
 * beside it. The per-entry U/dT route (where the tiled one cannot run) sums in the CPU's order,
 * so its weight gradients must also be within 1e-5 row-relative of the CPU's; tiled U/dT (tensor
 * cores, 64-column slices) sums in another fp32 order, where a row-relative bound against the
 * CPU's sum measures cancellation (dWd = Σ_m Tm·dy), not error: only the scaled rule applies
 * there.
 * max_rel_err is the worst row-relative error of the five (y, dx, dWg, dWu, dWd) against the CPU,
 * for every route. The timed full-M run is checked for poison (every output written, finite).
 *
 * --path auto|sparse|dense sets twell_plan_set_path. When the dense training path runs (DENSE, or
 * the check state's first forward under AUTO where its probe finds the data over AUTO's
 * threshold) its contract applies: U, Tm, dU, dP rounded to
 * dtype, so the check allows 1.5e-2 (bf16) / 3e-3 (fp16) for y, 3e-2 / 4e-3 for dx and 1e-2 /
 * 2e-3 for the weight gradients; the support comes from its saved gate (TW_TC_TD_DOWNLOAD_P),
 * compared as above. dx gets more room: the synthetic data's constant feature (x[:, 0] = 1,
 * Wg[:, 0] = -threshold ≈ -2.6) makes dx[m, 0] = Σ dP·Wg[n, 0] dominate the row, and with few
 * active values per row that signed sum can cancel, amplifying dP's 16-bit rounding (measured
 * 1.7e-2 at 29 active per row, bf16, first 1024 rows; the cuBLAS dense step, which
 * rounds the same intermediates and more, is 2.6e-2 away from ours on those data).
 * The record's variant is
 * "<gate-pack variant>+<path the timed steps ran>" ("+mixed" if AUTO switched while timing); its
 * path is that route alone (sparse, dense, mixed), requested_path the --path asked for.
 *
 * The sparse path's heavy-row route (runtime/ops/train/cuda_train_heavy.h) runs as the library's
 * default (the cost model's threshold); TWELL_TRAIN_HEAVY=<rows over this many active values |
 * -1 the cost model | 0 off> sets it in the timed and the check states. The variant ends in
 * "+heavy" when the timed steps sent rows to it. Where it ran, the heavy rows carry the dense
 * path's rounding, so the check applies the dense tolerances above to every output, on a support
 * that takes the heavy rows' from the CPU (the sparse state holds them empty).
 *
 * TWELL_TRAIN_NRN_LEN=<tokens> forces the neuron chunk length of the weight-gradient kernel in
 * the timed state (test control TW_TC_TRAIN_SET_CHUNK_LEN; unset: the library's rule), to
 * measure that rule against others (docs/lab/NOTES-train-dw.md).
 */
#include "bench.h"
#include "train_check.h"
#include "train_wcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The general row-major GemmEx of bench/cublas.c, its error as the context's message. */
static twell_status bt_gemm(twell_ctx *ctx, bench_cublas *b, int ta, int tb, size_t M, size_t N,
                            size_t Kd, const void *A, size_t lda, bench_cublas_type at,
                            const void *B, size_t ldb, bench_cublas_type btp, void *C, size_t ldc,
                            bench_cublas_type ct) {
    char err[256];
    if (bench_cublas_gemm(ctx, b, ta, tb, M, N, Kd, A, lda, at, B, ldb, btp, C, ldc, ct, err,
                          sizeof err) != 0)
        return tw_error(ctx, TWELL_ERR_CUDA, "bench train: %s", err);
    return TWELL_OK;
}

/* ---- the timed units ---- */

typedef struct {
    twell_plan *plan;
    twell_train_state *state;
    size_t M;
    const void *x, *wg, *wu, *wd, *dy;
    void *y, *dx;
    float *dwg, *dwu, *dwd, *stats;
    float lambda;
} bt_ours;

static twell_status bt_ours_fwd(void *arg) {
    bt_ours *a = arg;
    return twell_ffn_forward_train(a->plan, a->M, a->x, a->wg, a->wu, a->wd, a->y, a->stats,
                                   a->state, NULL);
}

static twell_status bt_ours_bwd(void *arg) {
    bt_ours *a = arg;
    return twell_ffn_backward(a->plan, a->state, a->M, a->x, a->wg, a->wu, a->wd, a->dy, a->lambda,
                              a->dx, a->dwg, a->dwu, a->dwd, NULL);
}

static twell_status bt_ours_step(void *arg) {
    twell_status st = bt_ours_fwd(arg);
    return st == TWELL_OK ? bt_ours_bwd(arg) : st;
}

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

static twell_status bt_dense_fwd(void *arg) {
    bt_dense *d = arg;
    twell_ctx *c = d->ctx;
    size_t M = d->M, K = d->K, N = d->N;
    twell_status st =
        bt_gemm(c, d->blas, 0, 1, M, N, K, d->x, K, d->ty, d->wg, K, d->ty, d->G, N, d->ty);
    if (st == TWELL_OK)
        st = bt_gemm(c, d->blas, 0, 1, M, N, K, d->x, K, d->ty, d->wu, K, d->ty, d->U, N, d->ty);
    if (st == TWELL_OK) {
        long long n = (long long)(M * N);
        void *args[] = {&d->G, &d->U, &d->H, &n};
        st = bench_ew_launch(c, d->fwd_ew, args);
    }
    if (st == TWELL_OK) /* y = H·Wd, Wd stored [N, K] */
        st = bt_gemm(c, d->blas, 0, 0, M, K, N, d->H, N, d->ty, d->wd, K, d->ty, d->y, K, d->ty);
    return st;
}

static twell_status bt_dense_bwd(void *arg) {
    bt_dense *d = arg;
    twell_ctx *c = d->ctx;
    size_t M = d->M, K = d->K, N = d->N;
    twell_status st =
        bt_gemm(c, d->blas, 0, 1, M, N, K, d->dy, K, d->ty, d->wd, K, d->ty, d->dH, N, d->ty);
    if (st == TWELL_OK) {
        long long Ml = (long long)M, Nl = (long long)N;
        void *args[] = {&d->G, &d->U, &d->dH, &d->l1c, &d->DUG, &Ml, &Nl};
        st = bench_ew_launch(c, d->bwd_ew, args);
    }
    if (st == TWELL_OK) /* dx = [dU | dG]·[Wu; Wg] */
        st = bt_gemm(c, d->blas, 0, 0, M, K, 2 * N, d->DUG, 2 * N, d->ty, d->wuwg, K, d->ty, d->dx,
                     K, d->ty);
    const char *dug = d->DUG;
    size_t half = N * 2u; /* bytes of N dtype values: dG starts there in each row */
    if (st == TWELL_OK)   /* dWu = dUᵀ·x */
        st = bt_gemm(c, d->blas, 1, 0, N, K, M, dug, 2 * N, d->ty, d->x, K, d->ty, d->dwu, K,
                     BENCH_CUBLAS_R_32F);
    if (st == TWELL_OK) /* dWg = dGᵀ·x */
        st = bt_gemm(c, d->blas, 1, 0, N, K, M, dug + half, 2 * N, d->ty, d->x, K, d->ty, d->dwg, K,
                     BENCH_CUBLAS_R_32F);
    if (st == TWELL_OK) /* dWd = Hᵀ·dy */
        st = bt_gemm(c, d->blas, 1, 0, N, K, M, d->H, N, d->ty, d->dy, K, d->ty, d->dwd, K,
                     BENCH_CUBLAS_R_32F);
    return st;
}

static twell_status bt_dense_step(void *arg) {
    twell_status st = bt_dense_fwd(arg);
    return st == TWELL_OK ? bt_dense_bwd(arg) : st;
}

static twell_status bt_load_ew(twell_ctx *ctx, twell_dtype dt, tw_CUmodule *mod, tw_CUfunction *f,
                               tw_CUfunction *b) {
    tw_param params[] = {{"dtype", dt == TWELL_DTYPE_BF16 ? "bf16" : "fp16", 0}};
    static const char *const names[] = {"twell_train_dense_fwd", "twell_train_dense_bwd"};
    tw_CUfunction fns[2] = {NULL, NULL};
    twell_status st = bench_ew_load(ctx, "train_dense_ew", params, 1, 2, names, mod, fns);
    *f = fns[0], *b = fns[1];
    return st;
}

/* ---- check ---- */

/* Row-major support lists of a CPU-format saved state (cpu_train.h). */
typedef struct {
    uint64_t *row_off;
    uint32_t *col;
    uint16_t *pbits;
    tw_train_support sup;
} bt_sup;

static int bt_sup_make(bt_sup *g, const twell_shape *s, const tw_train_saved *sv) {
    size_t M = sv->M, nnz = sv->row_off[M];
    memset(g, 0, sizeof *g);
    g->row_off = malloc((M + 1) * sizeof *g->row_off);
    g->col = malloc((nnz + 1) * sizeof *g->col);
    g->pbits = malloc((nnz + 1) * sizeof *g->pbits);
    float *p = malloc((nnz + 1) * sizeof *p);
    if (!g->row_off || !g->col || !g->pbits || !p) {
        free(p);
        return -1;
    }
    for (size_t m = 0; m <= M; m++)
        g->row_off[m] = sv->row_off[m];
    for (size_t m = 0; m < M; m++)
        (void)tw_train_row_support(s, sv, m, g->col + sv->row_off[m], p + sv->row_off[m], NULL);
    for (size_t e = 0; e < nnz; e++)
        g->pbits[e] = tw_f32_to_half(s->dtype, p[e]);
    free(p);
    g->sup.M = M, g->sup.row_off = g->row_off, g->sup.col = g->col, g->sup.pbits = g->pbits;
    return 0;
}

static void bt_sup_free(bt_sup *g) {
    free(g->row_off);
    free(g->col);
    free(g->pbits);
}

typedef struct {
    size_t Mc, rows_out, nrn_out, diff, values;
    double err[5];
} bt_check_res;

/* GPU against CPU on the check rows (gsup->M of them): the supports' differences, then y, dx
 * (row-relative, rows where the supports agree) and dWg, dWu, dWd (gw, rw: three [N, K] blocks;
 * neurons where they agree) into res. */
static void bt_compare(const twell_shape *s, const tw_train_support *gsup,
                       const tw_train_support *csup, unsigned char *row_same,
                       unsigned char *nrn_same, const uint16_t *gy, const uint16_t *ry,
                       const uint16_t *gdx, const uint16_t *rdx, const float *gw, const float *rw,
                       bt_check_res *res) {
    size_t Mc = gsup->M, N = s->N, wk = N * s->K;
    res->diff = tw_train_support_diff(s->N, gsup, csup, row_same, nrn_same, &res->values);
    for (size_t m = 0; m < Mc; m++)
        res->rows_out += !row_same[m];
    for (size_t n = 0; n < N; n++)
        res->nrn_out += !nrn_same[n];
    res->err[0] = tw_train_err_h(s->dtype, gy, ry, Mc, s->K, row_same, NULL, NULL, NULL);
    res->err[1] = tw_train_err_h(s->dtype, gdx, rdx, Mc, s->K, row_same, NULL, NULL, NULL);
    for (size_t t = 0; t < 3; t++)
        res->err[2 + t] =
            tw_train_err_f(gw + t * wk, rw + t * wk, N, s->K, nrn_same, NULL, NULL, NULL);
}

/* TWELL_TRAIN_HEAVY: the sparse path's heavy-row route (test control TW_TC_TRAIN_SET_HEAVY) on
 * the timed and the check states: a row count threshold, a negative value for the library's
 * cost model, 0 off; unset: the library's default (the cost model). */
static twell_status bt_heavy_set(twell_train_state *state) {
    const char *e = getenv("TWELL_TRAIN_HEAVY");
    if (!e || !*e)
        return TWELL_OK;
    return tw_test_control(TW_TC_TRAIN_SET_HEAVY, state, strtoll(e, NULL, 10));
}

/* 1 when the state's saved forward sent rows to the heavy-row route. */
static int bt_heavy_ran(twell_train_state *state) {
    size_t nh = 0;
    uint64_t hnnz = 0;
    uint32_t thr = 0;
    return tw_test_control(TW_TC_TRAIN_HEAVY_ROWS, state, &nh, &hnnz, &thr) == TWELL_OK && nh > 0;
}

/* The support the check compares when the heavy-row route ran: the GPU's rows, except the heavy
 * ones (empty in the sparse state: the dense block computed them from its own gate, not saved),
 * which take the CPU's row. Counts those rows into *heavy. 0, or -1 out of host memory. */
static int bt_sup_heavy(bt_sup *out, const tw_train_support *g, const tw_train_support *c,
                        uint32_t thr, size_t *heavy) {
    size_t M = g->M, nnz = 0;
    *heavy = 0;
    memset(out, 0, sizeof *out);
    for (size_t m = 0; m < M; m++) {
        uint64_t gn = g->row_off[m + 1] - g->row_off[m], cn = c->row_off[m + 1] - c->row_off[m];
        nnz += (size_t)(gn == 0 && cn > thr ? cn : gn);
    }
    out->row_off = malloc((M + 1) * sizeof *out->row_off);
    out->col = malloc((nnz + 1) * sizeof *out->col);
    out->pbits = malloc((nnz + 1) * sizeof *out->pbits);
    if (!out->row_off || !out->col || !out->pbits)
        return -1;
    size_t e = 0;
    for (size_t m = 0; m < M; m++) {
        uint64_t gn = g->row_off[m + 1] - g->row_off[m], cn = c->row_off[m + 1] - c->row_off[m];
        int h = gn == 0 && cn > thr;
        const tw_train_support *src = h ? c : g;
        uint64_t b = src->row_off[m], n = h ? cn : gn;
        out->row_off[m] = e;
        memcpy(out->col + e, src->col + b, (size_t)n * sizeof *out->col);
        memcpy(out->pbits + e, src->pbits + b, (size_t)n * sizeof *out->pbits);
        e += (size_t)n;
        *heavy += (size_t)h;
    }
    out->row_off[M] = e;
    out->sup.M = M, out->sup.row_off = out->row_off, out->sup.col = out->col;
    out->sup.pbits = out->pbits;
    return 0;
}

/* The first Mc rows on both backends (see the file comment). Returns 1 when within tolerance;
 * the note says what was measured or what failed. */
static int bt_check(bench_env *env, const twell_shape *s, const tw_synth_ffn *f,
                    const uint16_t *hdy, float lambda, const bt_ours *o, bt_check_res *res,
                    char *note, size_t notelen) {
    twell_ctx *ctx = env->ctx;
    size_t Mc = o->M < 8 * env->opts->check_rows ? o->M : 8 * env->opts->check_rows;
    if (Mc < 1)
        Mc = 1;
    size_t K = s->K, N = s->N, xk = Mc * K, wk = N * K;
    memset(res, 0, sizeof *res);
    res->Mc = Mc;
    twell_ctx *cpu = NULL;
    twell_plan *cplan = NULL, *gplan = o->plan;
    twell_train_state *cst = NULL, *gst = NULL;
    uint16_t *ry = malloc(xk * 2), *rdx = malloc(xk * 2), *gy = malloc(xk * 2),
             *gdx = malloc(xk * 2);
    float *rw = malloc(wk * 3 * 4), *gw = malloc(wk * 3 * 4), stats[2];
    unsigned char *row_same = malloc(Mc), *nrn_same = malloc(N);
    tw_cuda_train_host h;
    memset(&h, 0, sizeof h);
    bt_sup cs, gs;
    memset(&cs, 0, sizeof cs);
    memset(&gs, 0, sizeof gs);
    size_t *gso = NULL, *gro = NULL;
    int ok = 0, gdense = 0;
    twell_ctx_options co;
    twell_ctx_options_init(&co);
    co.backend = TWELL_BACKEND_CPU;
    twell_status st = TWELL_ERR_NO_MEMORY;
    if (ry && rdx && gy && gdx && rw && gw && row_same && nrn_same)
        st = twell_ctx_create(&co, &cpu);
    if (st == TWELL_OK && (st = twell_plan_create(cpu, s, &cplan)) == TWELL_OK &&
        (st = twell_train_state_create(cplan, &cst)) == TWELL_OK &&
        (st = twell_ffn_forward_train(cplan, Mc, f->x, f->wg, f->wu, f->wd, ry, stats, cst,
                                      NULL)) == TWELL_OK)
        st = twell_ffn_backward(cplan, cst, Mc, f->x, f->wg, f->wu, f->wd, hdy, lambda, rdx, rw,
                                rw + wk, rw + 2 * wk, NULL);
    if (st != TWELL_OK) {
        snprintf(note, notelen, "CPU reference: %s: %s", twell_status_name(st),
                 cpu ? twell_ctx_errmsg(cpu) : "out of memory");
        goto done;
    }
    /* the GPU on the same rows, a fresh state, outputs in the full-size buffers */
    if ((st = twell_train_state_create(gplan, &gst)) != TWELL_OK ||
        (st = bt_heavy_set(gst)) != TWELL_OK ||
        (st = twell_ffn_forward_train(gplan, Mc, o->x, o->wg, o->wu, o->wd, o->y, NULL, gst,
                                      NULL)) != TWELL_OK ||
        (st = twell_ffn_backward(gplan, gst, Mc, o->x, o->wg, o->wu, o->wd, o->dy, lambda, o->dx,
                                 o->dwg, o->dwu, o->dwd, NULL)) != TWELL_OK ||
        (!(gdense = bench_state_path(gst, TW_TC_TD_LAST_PATH) == TWELL_PATH_DENSE) &&
         (st = tw_test_control(TW_TC_TRAIN_DOWNLOAD, gst, &h)) != TWELL_OK) ||
        (st = tw_cuda_memcpy_dtoh(ctx, gy, o->y, xk * 2)) != TWELL_OK ||
        (st = tw_cuda_memcpy_dtoh(ctx, gdx, o->dx, xk * 2)) != TWELL_OK ||
        (st = tw_cuda_memcpy_dtoh(ctx, gw, o->dwg, wk * 4)) != TWELL_OK ||
        (st = tw_cuda_memcpy_dtoh(ctx, gw + wk, o->dwu, wk * 4)) != TWELL_OK ||
        (st = tw_cuda_memcpy_dtoh(ctx, gw + 2 * wk, o->dwd, wk * 4)) != TWELL_OK) {
        snprintf(note, notelen, "GPU run of the check rows: %s: %s", twell_status_name(st),
                 twell_ctx_errmsg(ctx));
        goto done;
    }
    if (gdense) { /* the dense path: its saved gate gives the support; its own tolerances */
        double d16 = s->dtype == TWELL_DTYPE_BF16 ? 1.5e-2 : 3e-3;
        double dxt = s->dtype == TWELL_DTYPE_BF16 ? 3e-2 : 4e-3; /* see the file comment */
        double d32 = s->dtype == TWELL_DTYPE_BF16 ? 1e-2 : 2e-3;
        uint16_t *pg = malloc(Mc * N * 2u);
        uint64_t *ro = malloc((Mc + 1) * sizeof *ro);
        uint32_t *col = NULL;
        uint16_t *pb = NULL;
        size_t nnz = 0;
        if (pg && ro && (st = tw_test_control(TW_TC_TD_DOWNLOAD_P, gst, Mc, pg)) == TWELL_OK) {
            for (size_t i = 0; i < Mc * N; i++)
                nnz += tw_half_to_f32(s->dtype, pg[i]) > 0.0f;
            col = malloc((nnz + 1) * sizeof *col);
            pb = malloc((nnz + 1) * sizeof *pb);
        }
        if (!col || !pb || bt_sup_make(&cs, s, cst->backend_data)) {
            snprintf(note, notelen, "dense check: out of host memory or download failed");
            free(pg), free(ro), free(col), free(pb);
            goto done;
        }
        size_t e = 0;
        for (size_t m = 0; m < Mc; m++) {
            ro[m] = e;
            for (size_t n = 0; n < N; n++)
                if (tw_half_to_f32(s->dtype, pg[m * N + n]) > 0.0f)
                    col[e] = (uint32_t)n, pb[e++] = pg[m * N + n];
        }
        ro[Mc] = e;
        tw_train_support gsup = {Mc, ro, col, pb};
        bt_compare(s, &gsup, &cs.sup, row_same, nrn_same, gy, ry, gdx, rdx, gw, rw, res);
        free(pg), free(ro), free(col), free(pb);
        ok = res->rows_out * 100 <= Mc && res->err[0] <= d16 && res->err[1] <= dxt &&
             res->err[2] <= d32 && res->err[3] <= d32 && res->err[4] <= d32;
        snprintf(note, notelen,
                 "CPU check (dense path), first %zu rows: row-rel y %.1e (tol %.1e) dx %.1e (tol "
                 "%.1e) dWg %.1e dWu %.1e dWd %.1e (tol %.1e); gate vs CPU: %zu flips, %zu values "
                 "(%zu rows, %zu neurons out)",
                 Mc, res->err[0], d16, res->err[1], dxt, res->err[2], res->err[3], res->err[4], d32,
                 res->diff, res->values, res->rows_out, res->nrn_out);
        goto done;
    }
    /* supports */
    tw_train_saved gsv;
    memset(&gsv, 0, sizeof gsv);
    size_t tiles = Mc * (N / s->T);
    gso = malloc((tiles + 1) * sizeof *gso);
    gro = malloc((Mc + 1) * sizeof *gro);
    if (!gso || !gro) {
        snprintf(note, notelen, "out of host memory for the check");
        goto done;
    }
    for (size_t i = 0; i <= tiles; i++)
        gso[i] = (size_t)h.spill_off[i];
    for (size_t i = 0; i <= Mc; i++)
        gro[i] = (size_t)h.row_off[i];
    gsv.M = Mc, gsv.nnz = h.nnz, gsv.spill_total = h.spill_total, gsv.packed = h.packed;
    gsv.u_ell = h.u_ell, gsv.spill_off = gso, gsv.spill = h.spill, gsv.u_spill = h.u_spill;
    gsv.row_off = gro;
    if (bt_sup_make(&cs, s, cst->backend_data) || bt_sup_make(&gs, s, &gsv)) {
        snprintf(note, notelen, "out of host memory for the check");
        goto done;
    }
    size_t hrows = 0;
    uint64_t hnnz = 0;
    uint32_t hthr = 0;
    if (tw_test_control(TW_TC_TRAIN_HEAVY_ROWS, gst, &hrows, &hnnz, &hthr) == TWELL_OK &&
        hrows > 0) { /* heavy rows ran dense by block: the dense path's tolerances */
        bt_sup hs;
        size_t found = 0;
        if (bt_sup_heavy(&hs, &gs.sup, &cs.sup, hthr, &found)) {
            bt_sup_free(&hs);
            snprintf(note, notelen, "out of host memory for the check");
            goto done;
        }
        bt_compare(s, &hs.sup, &cs.sup, row_same, nrn_same, gy, ry, gdx, rdx, gw, rw, res);
        bt_sup_free(&hs);
        double d16 = s->dtype == TWELL_DTYPE_BF16 ? 1.5e-2 : 3e-3;
        double dxt = s->dtype == TWELL_DTYPE_BF16 ? 3e-2 : 4e-3;
        double d32 = s->dtype == TWELL_DTYPE_BF16 ? 1e-2 : 2e-3;
        ok = res->rows_out * 100 <= Mc && res->err[0] <= d16 && res->err[1] <= dxt &&
             res->err[2] <= d32 && res->err[3] <= d32 && res->err[4] <= d32;
        snprintf(note, notelen,
                 "CPU check (heavy rows dense by block: %zu of %zu rows over %u active, %zu "
                 "found empty in the sparse state; their gate taken as the CPU's), first %zu "
                 "rows: row-rel y %.1e (tol %.1e) dx %.1e (tol %.1e) dWg %.1e dWu %.1e dWd %.1e "
                 "(tol %.1e); gate vs CPU: %zu flips, %zu values (%zu rows, %zu neurons out)",
                 hrows, Mc, hthr, found, Mc, res->err[0], d16, res->err[1], dxt, res->err[2],
                 res->err[3], res->err[4], d32, res->diff, res->values, res->rows_out,
                 res->nrn_out);
        goto done;
    }
    bt_compare(s, &gs.sup, &cs.sup, row_same, nrn_same, gy, ry, gdx, rdx, gw, rw, res);
    double t16 = s->dtype == TWELL_DTYPE_BF16 ? 5e-3 : 1e-3;
    int tiled = 0; /* see the file comment */
    (void)tw_test_control(TW_TC_TRAIN_UDT_TILED, gst, &tiled);
    /* the weight gradients against the fp64 model on the neurons whose support agrees */
    tw_train_wcheck wr[2]; /* [0] the GPU, [1] the CPU reference */
    const float *const wp[6] = {gw, gw + wk, gw + 2 * wk, rw, rw + wk, rw + 2 * wk};
    if (tw_train_wgrad_check(s->dtype, s->K, s->N, &cs.sup, f->x, f->wu, f->wd, hdy, lambda, wp, 2,
                             nrn_same, wr) != 0) {
        snprintf(note, notelen, "out of host memory for the fp64 weight-gradient check");
        goto done;
    }
    const tw_train_wcheck *wg = wr, *wc = wr + 1;
    double wsc = 0.0;
    for (int t = 0; t < 3; t++)
        wsc = wg->worst[t] > wsc ? wg->worst[t] : wsc;
    ok = res->rows_out * 100 <= Mc && res->err[0] <= t16 && res->err[1] <= t16 &&
         wsc <= TW_WCHECK_TOL &&
         (tiled || (res->err[2] <= 1e-5 && res->err[3] <= 1e-5 && res->err[4] <= 1e-5));
    snprintf(note, notelen,
             "CPU check, first %zu rows: row-rel y %.1e dx %.1e (tol %.0e); weight gradients vs "
             "fp64, scaled by sum|terms| (tol %.0e): dWg %.1e dWu %.1e dWd %.1e (CPU reference "
             "%.1e %.1e %.1e; %zu neurons, %zu U signs within rounding); row-rel vs CPU dWg %.1e "
             "dWu %.1e dWd %.1e (%s); gate vs CPU: %zu flips, %zu values (%zu rows, %zu neurons "
             "out)",
             Mc, res->err[0], res->err[1], t16, TW_WCHECK_TOL, wg->worst[0], wg->worst[1],
             wg->worst[2], wc->worst[0], wc->worst[1], wc->worst[2], wg->neurons, wg->sign_amb,
             res->err[2], res->err[3], res->err[4], tiled ? "tiled U/dT: not applied" : "tol 1e-05",
             res->diff, res->values, res->rows_out, res->nrn_out);
done:
    free(ry), free(rdx), free(gy), free(gdx), free(rw), free(gw), free(row_same), free(nrn_same);
    free(gso), free(gro);
    bt_sup_free(&cs);
    bt_sup_free(&gs);
    (void)tw_test_control(TW_TC_TRAIN_HOST_FREE, &h);
    twell_train_state_destroy(gst);
    twell_train_state_destroy(cst);
    twell_plan_destroy(cplan);
    twell_ctx_destroy(cpu);
    return ok;
}

/* Every element of the full-M run written and finite (outputs were poisoned first). */
static int bt_poison_check(bench_env *env, const twell_shape *s, const bt_ours *o, char *note,
                           size_t notelen) {
    twell_ctx *ctx = env->ctx;
    size_t n = o->M * s->K, wk = (size_t)s->N * s->K;
    uint16_t *h = malloc(n * 2);
    float *w = malloc(wk * 4);
    int ok = h && w;
    const void *d16[2] = {o->y, o->dx};
    const float *d32[3] = {o->dwg, o->dwu, o->dwd};
    for (int t = 0; ok && t < 2; t++) {
        ok = tw_cuda_memcpy_dtoh(ctx, h, d16[t], n * 2) == TWELL_OK;
        for (size_t i = 0; ok && i < n; i++)
            if (h[i] == 0xFFFFu || !isfinite(tw_half_to_f32(s->dtype, h[i]))) {
                snprintf(note, notelen, "%s[%zu] = %04x: never written or not finite",
                         t ? "dx" : "y", i, h[i]);
                ok = 0;
            }
    }
    for (int t = 0; ok && t < 3; t++) {
        ok = tw_cuda_memcpy_dtoh(ctx, w, d32[t], wk * 4) == TWELL_OK;
        for (size_t i = 0; ok && i < wk; i++)
            if (!isfinite(w[i])) {
                snprintf(note, notelen, "dW%d[%zu] never written or not finite", t, i);
                ok = 0;
            }
    }
    free(h);
    free(w);
    return ok;
}

/* The dense baseline computes the same step: its outputs against ours on the full M (its H, dH,
 * dU, dG are rounded to dtype, ours keep U and the sums in fp32, so they differ at the 1e-3
 * level; a transposed or misplaced GEMM would give O(1)). Returns the worst row-relative error,
 * or -1 if a run or copy failed. */
static double bt_dense_agree(bench_env *env, const twell_shape *s, const bt_ours *o, bt_dense *d) {
    twell_ctx *ctx = env->ctx;
    size_t n = o->M * s->K, wk = (size_t)s->N * s->K;
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    float *fa = malloc(wk * 4), *fb = malloc(wk * 4);
    double worst = -1.0;
    if (a && b && fa && fb && bt_dense_step(d) == TWELL_OK &&
        tw_cuda_synchronize(ctx) == TWELL_OK) {
        worst = 0.0;
        const void *ours16[2] = {o->y, o->dx}, *dense16[2] = {d->y, d->dx};
        const float *ours32[3] = {o->dwg, o->dwu, o->dwd}, *dense32[3] = {d->dwg, d->dwu, d->dwd};
        for (int t = 0; t < 2 && worst >= 0.0; t++) {
            if (tw_cuda_memcpy_dtoh(ctx, a, ours16[t], n * 2) != TWELL_OK ||
                tw_cuda_memcpy_dtoh(ctx, b, dense16[t], n * 2) != TWELL_OK) {
                worst = -1.0;
                break;
            }
            double e = tw_train_err_h(s->dtype, b, a, o->M, s->K, NULL, NULL, NULL, NULL);
            if (!(e <= worst))
                worst = e;
        }
        for (int t = 0; t < 3 && worst >= 0.0; t++) {
            if (tw_cuda_memcpy_dtoh(ctx, fa, ours32[t], wk * 4) != TWELL_OK ||
                tw_cuda_memcpy_dtoh(ctx, fb, dense32[t], wk * 4) != TWELL_OK) {
                worst = -1.0;
                break;
            }
            double e = tw_train_err_f(fb, fa, s->N, s->K, NULL, NULL, NULL, NULL);
            if (!(e <= worst))
                worst = e;
        }
    }
    free(a);
    free(b);
    free(fa);
    free(fb);
    return worst;
}

/* ---- the op ---- */

static void bt_emit(bench_env *env, void (*emit)(bench_env *, const bench_record *),
                    bench_record *r, const char *op, const double *med, const double *mn,
                    const double *mx, size_t ours, size_t dense, int have_dense) {
    bench_record c = *r;
    snprintf(c.op, sizeof c.op, "%s", op);
    bench_record_times(env, &c, "cublas_train", med, mn, mx, ours, dense, have_dense);
    emit(env, &c);
}

/* Deterministic dy in (-1, 1). */
static void bt_fill_dy(twell_dtype dt, uint16_t *dy, size_t n, uint64_t seed) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1u;
    for (size_t i = 0; i < n; i++) {
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        double u = (double)(z >> 11) * 0x1.0p-53;
        dy[i] = tw_f32_to_half(dt, (float)(2.0 * u - 1.0));
    }
}

/* TWELL_TRAIN_PROFILE set: per-kernel means over 5 profiled steps, legacy kernels then ours (an
 * event after each launch group, so the sum is a little above the timed step) to stdout. */
static void bt_profile(bt_ours *o, size_t M, const char *dist, double nnz) {
    char buf[2048];
    for (int legacy = 1; legacy >= 0; legacy--) {
        if (tw_test_control(TW_TC_TRAIN_SET_LEGACY, o->state, legacy) != TWELL_OK ||
            tw_test_control(TW_TC_TRAIN_PROFILE, o->state, 1) != TWELL_OK)
            return;
        for (int i = 0; i < 5; i++)
            if (bt_ours_step(o) != TWELL_OK)
                break;
        size_t len = 0;
        (void)tw_test_control(TW_TC_TRAIN_PROFILE_REPORT, o->state, buf, sizeof buf, &len);
        (void)tw_test_control(TW_TC_TRAIN_PROFILE, o->state, 0);
        printf("# breakdown%s M=%zu %s nnz=%g (mean ms per step):\n%s",
               legacy ? " (legacy kernels)" : "", M, dist, nnz, buf);
    }
    fflush(stdout);
}

int bench_train_run(bench_env *env, void (*emit)(bench_env *, const bench_record *)) {
    const bench_opts *o = env->opts;
    twell_ctx *ctx = env->ctx;
    const float lambda = 1.0f;
    int rc = 0;
    size_t Mmax = bench_max_M(o);
    twell_shape s;
    twell_shape_init(&s, o->K, o->N);
    s.T = o->T, s.C = o->C, s.dtype = o->dtype;
    twell_plan *plan = NULL;
    if (bench_plan_open(env, &s, &plan) != 0)
        return 1;
    if (twell_plan_set_path(plan, bench_path_parse(o->path)) != TWELL_OK) {
        fprintf(stderr, "twell bench: --path %s: %s\n", o->path, twell_ctx_errmsg(ctx));
        twell_plan_destroy(plan);
        return 1;
    }
    const char *gpv = bench_plan_variant(plan);

    tw_CUmodule ew_mod = NULL;
    tw_CUfunction fwd_ew = NULL, bwd_ew = NULL;
    int have_dense = env->cublas != NULL;
    if (!have_dense)
        fprintf(stderr, "twell bench: no cuBLAS for the dense training baseline\n");
    if (have_dense && bt_load_ew(ctx, s.dtype, &ew_mod, &fwd_ew, &bwd_ew) != TWELL_OK) {
        fprintf(stderr, "twell bench: dense baseline kernels: %s\n", twell_ctx_errmsg(ctx));
        have_dense = 0;
    }
    bench_cublas_type ty = bench_cublas_type_of(s.dtype);

    size_t K = s.K, N = s.N, xb = Mmax * K * 2, wb = N * K * 2, hb = Mmax * N * 2;
    twell_train_state *state = NULL;
    void *bufs[24];
    memset(bufs, 0, sizeof bufs);
    enum {
        X,
        WG,
        WU,
        WD,
        WUWG,
        DY,
        Y,
        DX,
        DWG,
        DWU,
        DWD,
        STATS,
        G,
        U,
        H,
        DH,
        DUG,
        Y2,
        DX2,
        DWG2,
        DWU2,
        DWD2,
        NBUF
    };
    size_t sizes[NBUF] = {xb, wb, wb, wb, 2 * wb, xb,     xb, xb, 2 * wb, 2 * wb, 2 * wb,
                          16, hb, hb, hb, hb,     2 * hb, xb, xb, 2 * wb, 2 * wb, 2 * wb};
    uint16_t *hdy = malloc(xb), *wuwg = malloc(2 * wb);
    if (!hdy || !wuwg || twell_train_state_create(plan, &state) != TWELL_OK ||
        bt_heavy_set(state) != TWELL_OK ||
        (getenv("TWELL_TRAIN_NRN_LEN") &&
         tw_test_control(TW_TC_TRAIN_SET_CHUNK_LEN, state, (uint64_t)0,
                         (uint64_t)strtoull(getenv("TWELL_TRAIN_NRN_LEN"), NULL, 10)) !=
             TWELL_OK)) {
        fprintf(stderr, "twell bench: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int i = 0; i < NBUF; i++) {
        if (!have_dense && i >= G)
            break;
        if (tw_cuda_malloc(ctx, sizes[i], &bufs[i]) != TWELL_OK) {
            fprintf(stderr, "twell bench: allocation: %s\n", twell_ctx_errmsg(ctx));
            rc = 1;
            goto done;
        }
    }

    for (size_t di = 0; di < o->ndist; di++) {
        for (size_t ni = 0; ni < o->nnnz; ni++) {
            tw_synth_ffn *f = bench_synth(env, &s, Mmax, 1, di, ni);
            if (!f) {
                rc = 1;
                goto done;
            }
            bt_fill_dy(s.dtype, hdy, Mmax * K, o->seed + 7u);
            memcpy(wuwg, f->wu, wb);
            memcpy(wuwg + N * K, f->wg, wb);
            if (tw_cuda_memcpy_htod(ctx, bufs[X], f->x, xb) != TWELL_OK ||
                tw_cuda_memcpy_htod(ctx, bufs[WG], f->wg, wb) != TWELL_OK ||
                tw_cuda_memcpy_htod(ctx, bufs[WU], f->wu, wb) != TWELL_OK ||
                tw_cuda_memcpy_htod(ctx, bufs[WD], f->wd, wb) != TWELL_OK ||
                tw_cuda_memcpy_htod(ctx, bufs[WUWG], wuwg, 2 * wb) != TWELL_OK ||
                tw_cuda_memcpy_htod(ctx, bufs[DY], hdy, xb) != TWELL_OK) {
                fprintf(stderr, "twell bench: upload: %s\n", twell_ctx_errmsg(ctx));
                tw_synth_destroy(f);
                rc = 1;
                goto done;
            }
            for (size_t mi = 0; mi < o->nM; mi++) {
                size_t M = o->M[mi];
                bench_record r;
                bench_record_init(env, &r, "train", M, o->dist[di], o->nnz[ni]);
                bt_ours ours = {plan,      state,     M,         bufs[X],     bufs[WG],
                                bufs[WU],  bufs[WD],  bufs[DY],  bufs[Y],     bufs[DX],
                                bufs[DWG], bufs[DWU], bufs[DWD], bufs[STATS], lambda};
                bt_dense dense = {ctx,
                                  env->cublas,
                                  M,
                                  (uint32_t)K,
                                  (uint32_t)N,
                                  ty,
                                  (float)((double)lambda / (double)M),
                                  bufs[X],
                                  bufs[WG],
                                  bufs[WU],
                                  bufs[WD],
                                  bufs[WUWG],
                                  bufs[DY],
                                  bufs[G],
                                  bufs[U],
                                  bufs[H],
                                  bufs[Y2],
                                  bufs[DH],
                                  bufs[DUG],
                                  bufs[DX2],
                                  bufs[DWG2],
                                  bufs[DWU2],
                                  bufs[DWD2],
                                  fwd_ew,
                                  bwd_ew};
                /* check first (fresh state, Mc rows), then the full-M run poisoned */
                bt_check_res cr;
                r.correct = bt_check(env, &s, f, hdy, lambda, &ours, &cr, r.check_note,
                                     sizeof r.check_note);
                r.checked_rows = cr.Mc;
                r.max_rel_err = 0.0;
                for (int t = 0; t < 5; t++)
                    if (!(cr.err[t] <= r.max_rel_err))
                        r.max_rel_err = cr.err[t];
                float st2[2] = {0, 0};
                char pnote[160] = "";
                size_t peak = 0; /* this case's peak starts from what the state holds now */
                (void)tw_test_control(TW_TC_TD_PEAK_BYTES, state, 1, &peak);
                if (tw_cuda_memset_d32(ctx, bufs[Y], 0xFFFFFFFFu, M * K / 2, NULL) != TWELL_OK ||
                    tw_cuda_memset_d32(ctx, bufs[DX], 0xFFFFFFFFu, M * K / 2, NULL) != TWELL_OK ||
                    tw_cuda_memset_d32(ctx, bufs[DWG], 0xFFFFFFFFu, N * K, NULL) != TWELL_OK ||
                    tw_cuda_memset_d32(ctx, bufs[DWU], 0xFFFFFFFFu, N * K, NULL) != TWELL_OK ||
                    tw_cuda_memset_d32(ctx, bufs[DWD], 0xFFFFFFFFu, N * K, NULL) != TWELL_OK ||
                    bt_ours_step(&ours) != TWELL_OK || tw_cuda_synchronize(ctx) != TWELL_OK ||
                    tw_cuda_memcpy_dtoh(ctx, st2, bufs[STATS], 8) != TWELL_OK) {
                    snprintf(pnote, sizeof pnote, "full-M run failed: %s", twell_ctx_errmsg(ctx));
                    r.correct = 0;
                } else if (!bt_poison_check(env, &s, &ours, pnote, sizeof pnote)) {
                    r.correct = 0;
                }
                r.nnz_mean = st2[0];
                double agree = have_dense ? bt_dense_agree(env, &s, &ours, &dense) : 0.0;
                if (have_dense && !(agree >= 0.0 && agree <= 5e-2)) {
                    r.correct = 0;
                    snprintf(pnote, sizeof pnote,
                             "DENSE BASELINE DISAGREES with ours: worst row-rel %.2e%s", agree,
                             agree < 0.0 ? " (run failed)" : "");
                }
                size_t ours_bytes = twell_train_state_bytes(state);
                double dense_bytes = 6.0 * (double)M * (double)N * 2.0;
                size_t len = strlen(r.check_note);
                snprintf(r.check_note + len, sizeof r.check_note - len,
                         "; extra memory: ours %.3f GiB (state), dense %.3f GiB (G,U,H,dH,dU|dG); "
                         "dense vs ours %.1e%s%s",
                         (double)ours_bytes / 1073741824.0, dense_bytes / 1073741824.0, agree,
                         *pnote ? "; " : "", pnote);
                bench_check_report(&r);

                bench_fn fns[6] = {bt_ours_step,  bt_ours_fwd,  bt_ours_bwd,
                                   bt_dense_step, bt_dense_fwd, bt_dense_bwd};
                void *args[6] = {&ours, &ours, &ours, &dense, &dense, &dense};
                double med[6] = {0}, mn[6] = {0}, mx[6] = {0};
                unsigned long nd0 = bench_state_calls(state, TWELL_PATH_DENSE);
                unsigned long ns0 = bench_state_calls(state, TWELL_PATH_SPARSE);
                twell_status st =
                    bench_time_case(env, &r, have_dense ? 6 : 3, fns, args, med, mn, mx);
                int ran_d = bench_state_calls(state, TWELL_PATH_DENSE) > nd0;
                int ran_s = bench_state_calls(state, TWELL_PATH_SPARSE) > ns0;
                const char *ran = ran_d && ran_s ? "mixed"
                                  : ran_d        ? "dense"
                                  : ran_s        ? "sparse"
                                                 : NULL;
                snprintf(r.variant, sizeof r.variant, "%s+%s%s", gpv, ran ? ran : "?",
                         bt_heavy_ran(state) ? "+heavy" : "");
                if (ran) /* else "unknown" (bench_record_init): no timed step ran */
                    snprintf(r.path, sizeof r.path, "%s", ran);
                if (getenv("TWELL_TRAIN_PROFILE") && st == TWELL_OK)
                    bt_profile(&ours, M, r.distribution, r.nnz_target);
                /* memory after the timed steps (AUTO releases an idle dense workspace once it
                 * runs sparse: cuda_train_dense.h) and the case's peak after any op */
                size_t steady = twell_train_state_bytes(state);
                (void)tw_test_control(TW_TC_TD_PEAK_BYTES, state, 0, &peak);
                len = strlen(r.check_note);
                snprintf(r.check_note + len, sizeof r.check_note - len,
                         "; ours after timing %.3f GiB, peak %.3f GiB (state)",
                         (double)steady / 1073741824.0, (double)peak / 1073741824.0);
                printf("# memory M=%zu %s nnz=%g (%s): extra (state) after the first step %.3f "
                       "GiB, after timing %.3f GiB, peak %.3f GiB; dense baseline %.3f GiB\n",
                       M, r.distribution, r.nnz_target, r.variant,
                       (double)ours_bytes / 1073741824.0, (double)steady / 1073741824.0,
                       (double)peak / 1073741824.0, dense_bytes / 1073741824.0);
                fflush(stdout);
                bt_emit(env, emit, &r, "train", med, mn, mx, 0, 3, have_dense);
                bt_emit(env, emit, &r, "train_fwd", med, mn, mx, 1, 4, have_dense);
                bt_emit(env, emit, &r, "train_bwd", med, mn, mx, 2, 5, have_dense);
                if (!r.correct)
                    rc = 1;
            }
            tw_synth_destroy(f);
        }
    }
done:
    free(hdy);
    free(wuwg);
    for (int i = 0; i < NBUF; i++)
        tw_cuda_free(ctx, bufs[i]);
    twell_train_state_destroy(state);
    bench_ew_unload(ctx, ew_mod);
    twell_plan_destroy(plan);
    return rc;
}
