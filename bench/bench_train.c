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
 *
 * --path auto|sparse|dense sets twell_plan_set_path; the checks (bench_train_check.c) apply the
 * dense path's contract where it ran. The record's variant is
 * "<gate-pack variant>+<path the timed steps ran>" ("+mixed" if AUTO switched while timing); its
 * path is that route alone (sparse, dense, mixed), requested_path the --path asked for.
 *
 * The sparse path's heavy-row route (runtime/ops/train/sparse/cuda_train_heavy.h) runs as the
 * library's default (the cost model's threshold); TWELL_TRAIN_HEAVY=<rows over this many active
 * values | -1 the cost model | 0 off> sets it in the timed and the check states. The variant ends
 * in "+heavy" when the timed steps sent rows to it.
 *
 * TWELL_TRAIN_NRN_LEN=<tokens> forces the neuron chunk length of the weight-gradient kernel in
 * the timed state (test control TW_TC_TRAIN_SET_CHUNK_LEN; unset: the library's rule), to
 * measure that rule against others (docs/lab/NOTES-train-dw.md).
 */
#include "bench_train.h"

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

/* ---- the timed units (bt_ours, bt_dense: bench_train.h) ---- */

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

twell_status bt_dense_step(void *arg) {
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

twell_status bt_heavy_set(twell_train_state *state) {
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

/* The device buffers of a run: ours (inputs, outputs, stats), then the dense baseline's
 * intermediates and outputs (allocated only when it runs). */
enum {
    BT_X,
    BT_WG,
    BT_WU,
    BT_WD,
    BT_WUWG,
    BT_DY,
    BT_Y,
    BT_DX,
    BT_DWG,
    BT_DWU,
    BT_DWD,
    BT_STATS,
    BT_G,
    BT_U,
    BT_H,
    BT_DH,
    BT_DUG,
    BT_Y2,
    BT_DX2,
    BT_DWG2,
    BT_DWU2,
    BT_DWD2,
    BT_NBUF
};

/* One run of the op: the plan and the timed state over every case, the dense baseline's kernels,
 * the device buffers and the host data of the current case. */
typedef struct {
    bench_env *env;
    void (*emit)(bench_env *, const bench_record *);
    twell_shape s;
    size_t Mmax;
    float lambda;
    twell_plan *plan;
    twell_train_state *state;
    const char *gpv; /* the gate-pack variant */
    int have_dense;
    bench_cublas_type ty;
    tw_CUmodule ew_mod;
    tw_CUfunction fwd_ew, bwd_ew;
    void *bufs[BT_NBUF];
    uint16_t *hdy, *wuwg; /* the case's dy and [Wu; Wg] on the host */
} bt_run;

/* The plan (with --path), the dense baseline's kernels when cuBLAS is there, the timed state and
 * the buffers. 0, or 1 with the reason on stderr (bt_close releases what was made). */
static int bt_open(bt_run *r) {
    bench_env *env = r->env;
    const bench_opts *o = env->opts;
    twell_ctx *ctx = env->ctx;
    twell_shape_init(&r->s, o->K, o->N);
    r->s.T = o->T, r->s.C = o->C, r->s.dtype = o->dtype;
    if (bench_plan_open(env, &r->s, &r->plan) != 0)
        return 1;
    if (twell_plan_set_path(r->plan, bench_path_parse(o->path)) != TWELL_OK) {
        fprintf(stderr, "twell bench: --path %s: %s\n", o->path, twell_ctx_errmsg(ctx));
        return 1;
    }
    r->gpv = bench_plan_variant(r->plan);
    r->have_dense = env->cublas != NULL;
    if (!r->have_dense)
        fprintf(stderr, "twell bench: no cuBLAS for the dense training baseline\n");
    if (r->have_dense &&
        bt_load_ew(ctx, r->s.dtype, &r->ew_mod, &r->fwd_ew, &r->bwd_ew) != TWELL_OK) {
        fprintf(stderr, "twell bench: dense baseline kernels: %s\n", twell_ctx_errmsg(ctx));
        r->have_dense = 0;
    }
    r->ty = bench_cublas_type_of(r->s.dtype);
    size_t K = r->s.K, N = r->s.N, xb = r->Mmax * K * 2, wb = N * K * 2, hb = r->Mmax * N * 2;
    size_t sizes[BT_NBUF] = {xb, wb, wb, wb, 2 * wb, xb,     xb, xb, 2 * wb, 2 * wb, 2 * wb,
                             16, hb, hb, hb, hb,     2 * hb, xb, xb, 2 * wb, 2 * wb, 2 * wb};
    r->hdy = malloc(xb), r->wuwg = malloc(2 * wb);
    const char *nrn_len = getenv("TWELL_TRAIN_NRN_LEN");
    if (!r->hdy || !r->wuwg || twell_train_state_create(r->plan, &r->state) != TWELL_OK ||
        bt_heavy_set(r->state) != TWELL_OK ||
        (nrn_len && tw_test_control(TW_TC_TRAIN_SET_CHUNK_LEN, r->state, (uint64_t)0,
                                    (uint64_t)strtoull(nrn_len, NULL, 10)) != TWELL_OK)) {
        fprintf(stderr, "twell bench: out of memory\n");
        return 1;
    }
    for (int i = 0; i < BT_NBUF; i++) {
        if (!r->have_dense && i >= BT_G)
            break;
        if (tw_cuda_malloc(ctx, sizes[i], &r->bufs[i]) != TWELL_OK) {
            fprintf(stderr, "twell bench: allocation: %s\n", twell_ctx_errmsg(ctx));
            return 1;
        }
    }
    return 0;
}

static void bt_close(bt_run *r) {
    twell_ctx *ctx = r->env->ctx;
    free(r->hdy);
    free(r->wuwg);
    for (int i = 0; i < BT_NBUF; i++)
        tw_cuda_free(ctx, r->bufs[i]);
    twell_train_state_destroy(r->state);
    bench_ew_unload(ctx, r->ew_mod);
    twell_plan_destroy(r->plan);
}

/* The case's data f on the device, with its dy and [Wu; Wg] made on the host. 0, or 1 with the
 * reason on stderr. */
static int bt_upload(bt_run *r, const tw_synth_ffn *f) {
    twell_ctx *ctx = r->env->ctx;
    size_t K = r->s.K, N = r->s.N, xb = r->Mmax * K * 2, wb = N * K * 2;
    void **b = r->bufs;
    bt_fill_dy(r->s.dtype, r->hdy, r->Mmax * K, r->env->opts->seed + 7u);
    memcpy(r->wuwg, f->wu, wb);
    memcpy(r->wuwg + N * K, f->wg, wb);
    if (tw_cuda_memcpy_htod(ctx, b[BT_X], f->x, xb) != TWELL_OK ||
        tw_cuda_memcpy_htod(ctx, b[BT_WG], f->wg, wb) != TWELL_OK ||
        tw_cuda_memcpy_htod(ctx, b[BT_WU], f->wu, wb) != TWELL_OK ||
        tw_cuda_memcpy_htod(ctx, b[BT_WD], f->wd, wb) != TWELL_OK ||
        tw_cuda_memcpy_htod(ctx, b[BT_WUWG], r->wuwg, 2 * wb) != TWELL_OK ||
        tw_cuda_memcpy_htod(ctx, b[BT_DY], r->hdy, xb) != TWELL_OK) {
        fprintf(stderr, "twell bench: upload: %s\n", twell_ctx_errmsg(ctx));
        return 1;
    }
    return 0;
}

/* The case's checks (bench_train_check.c): the first rows against the CPU on a fresh state, then
 * the full-M run poisoned, then the dense baseline against ours; the verdict and the notes into
 * rec, the state's bytes after that first full-M step into *ours_bytes, and *peak reset for the
 * case (TW_TC_TD_PEAK_BYTES). */
static void bt_case_check(bt_run *r, const tw_synth_ffn *f, bench_record *rec, bt_ours *ours,
                          bt_dense *dense, double dense_bytes, size_t *ours_bytes, size_t *peak) {
    bench_env *env = r->env;
    twell_ctx *ctx = env->ctx;
    const twell_shape *s = &r->s;
    size_t M = ours->M, K = s->K, N = s->N;
    bt_check_res cr;
    rec->correct =
        bt_check(env, s, f, r->hdy, r->lambda, ours, &cr, rec->check_note, sizeof rec->check_note);
    rec->checked_rows = cr.Mc;
    rec->max_rel_err = 0.0;
    for (int t = 0; t < 5; t++)
        if (!(cr.err[t] <= rec->max_rel_err))
            rec->max_rel_err = cr.err[t];
    float st2[2] = {0, 0};
    char pnote[160] = "";
    *peak = 0; /* this case's peak starts from what the state holds now */
    (void)tw_test_control(TW_TC_TD_PEAK_BYTES, r->state, 1, peak);
    if (tw_cuda_memset_d32(ctx, ours->y, 0xFFFFFFFFu, M * K / 2, NULL) != TWELL_OK ||
        tw_cuda_memset_d32(ctx, ours->dx, 0xFFFFFFFFu, M * K / 2, NULL) != TWELL_OK ||
        tw_cuda_memset_d32(ctx, ours->dwg, 0xFFFFFFFFu, N * K, NULL) != TWELL_OK ||
        tw_cuda_memset_d32(ctx, ours->dwu, 0xFFFFFFFFu, N * K, NULL) != TWELL_OK ||
        tw_cuda_memset_d32(ctx, ours->dwd, 0xFFFFFFFFu, N * K, NULL) != TWELL_OK ||
        bt_ours_step(ours) != TWELL_OK || tw_cuda_synchronize(ctx) != TWELL_OK ||
        tw_cuda_memcpy_dtoh(ctx, st2, ours->stats, 8) != TWELL_OK) {
        snprintf(pnote, sizeof pnote, "full-M run failed: %s", twell_ctx_errmsg(ctx));
        rec->correct = 0;
    } else if (!bt_poison_check(env, s, ours, pnote, sizeof pnote)) {
        rec->correct = 0;
    }
    rec->nnz_mean = st2[0];
    double agree = r->have_dense ? bt_dense_agree(env, s, ours, dense) : 0.0;
    if (r->have_dense && !(agree >= 0.0 && agree <= 5e-2)) {
        rec->correct = 0;
        snprintf(pnote, sizeof pnote, "DENSE BASELINE DISAGREES with ours: worst row-rel %.2e%s",
                 agree, agree < 0.0 ? " (run failed)" : "");
    }
    *ours_bytes = twell_train_state_bytes(r->state);
    size_t len = strlen(rec->check_note);
    snprintf(rec->check_note + len, sizeof rec->check_note - len,
             "; extra memory: ours %.3f GiB (state), dense %.3f GiB (G,U,H,dH,dU|dG); "
             "dense vs ours %.1e%s%s",
             (double)*ours_bytes / 1073741824.0, dense_bytes / 1073741824.0, agree,
             *pnote ? "; " : "", pnote);
    bench_check_report(rec);
}

/* The case timed: ours (step, forward, backward) against the dense baseline's, the route the
 * timed steps ran in the record's variant and path, the state's memory after timing, and the
 * three records emitted. */
static void bt_case_time(bt_run *r, bench_record *rec, bt_ours *ours, bt_dense *dense,
                         size_t ours_bytes, double dense_bytes, size_t peak) {
    bench_env *env = r->env;
    twell_train_state *state = r->state;
    bench_fn fns[6] = {bt_ours_step,  bt_ours_fwd,  bt_ours_bwd,
                       bt_dense_step, bt_dense_fwd, bt_dense_bwd};
    void *args[6] = {ours, ours, ours, dense, dense, dense};
    double med[6] = {0}, mn[6] = {0}, mx[6] = {0};
    unsigned long nd0 = bench_state_calls(state, TWELL_PATH_DENSE);
    unsigned long ns0 = bench_state_calls(state, TWELL_PATH_SPARSE);
    twell_status st = bench_time_case(env, rec, r->have_dense ? 6 : 3, fns, args, med, mn, mx);
    int ran_d = bench_state_calls(state, TWELL_PATH_DENSE) > nd0;
    int ran_s = bench_state_calls(state, TWELL_PATH_SPARSE) > ns0;
    const char *ran = ran_d && ran_s ? "mixed" : ran_d ? "dense" : ran_s ? "sparse" : NULL;
    snprintf(rec->variant, sizeof rec->variant, "%s+%s%s", r->gpv, ran ? ran : "?",
             bt_heavy_ran(state) ? "+heavy" : "");
    if (ran) /* else "unknown" (bench_record_init): no timed step ran */
        snprintf(rec->path, sizeof rec->path, "%s", ran);
    if (getenv("TWELL_TRAIN_PROFILE") && st == TWELL_OK)
        bt_profile(ours, ours->M, rec->distribution, rec->nnz_target);
    /* memory after the timed steps (AUTO releases an idle dense workspace once it runs sparse:
     * cuda_train_dense.h) and the case's peak after any op */
    size_t steady = twell_train_state_bytes(state);
    (void)tw_test_control(TW_TC_TD_PEAK_BYTES, state, 0, &peak);
    size_t len = strlen(rec->check_note);
    snprintf(rec->check_note + len, sizeof rec->check_note - len,
             "; ours after timing %.3f GiB, peak %.3f GiB (state)", (double)steady / 1073741824.0,
             (double)peak / 1073741824.0);
    printf("# memory M=%zu %s nnz=%g (%s): extra (state) after the first step %.3f "
           "GiB, after timing %.3f GiB, peak %.3f GiB; dense baseline %.3f GiB\n",
           ours->M, rec->distribution, rec->nnz_target, rec->variant,
           (double)ours_bytes / 1073741824.0, (double)steady / 1073741824.0,
           (double)peak / 1073741824.0, dense_bytes / 1073741824.0);
    fflush(stdout);
    bt_emit(env, r->emit, rec, "train", med, mn, mx, 0, 3, r->have_dense);
    bt_emit(env, r->emit, rec, "train_fwd", med, mn, mx, 1, 4, r->have_dense);
    bt_emit(env, r->emit, rec, "train_bwd", med, mn, mx, 2, 5, r->have_dense);
}

/* One case (M rows of distribution di at target nnz ni): checked, then timed. 1 when correct. */
static int bt_case(bt_run *r, const tw_synth_ffn *f, size_t M, size_t di, size_t ni) {
    const bench_opts *o = r->env->opts;
    void **b = r->bufs;
    bench_record rec;
    bench_record_init(r->env, &rec, "train", M, o->dist[di], o->nnz[ni]);
    bt_ours ours = {r->plan,   r->state,  M,         b[BT_X],     b[BT_WG],
                    b[BT_WU],  b[BT_WD],  b[BT_DY],  b[BT_Y],     b[BT_DX],
                    b[BT_DWG], b[BT_DWU], b[BT_DWD], b[BT_STATS], r->lambda};
    bt_dense dense = {.ctx = r->env->ctx,
                      .blas = r->env->cublas,
                      .M = M,
                      .K = (uint32_t)r->s.K,
                      .N = (uint32_t)r->s.N,
                      .ty = r->ty,
                      .l1c = (float)((double)r->lambda / (double)M),
                      .x = b[BT_X],
                      .wg = b[BT_WG],
                      .wu = b[BT_WU],
                      .wd = b[BT_WD],
                      .wuwg = b[BT_WUWG],
                      .dy = b[BT_DY],
                      .G = b[BT_G],
                      .U = b[BT_U],
                      .H = b[BT_H],
                      .y = b[BT_Y2],
                      .dH = b[BT_DH],
                      .DUG = b[BT_DUG],
                      .dx = b[BT_DX2],
                      .dwg = b[BT_DWG2],
                      .dwu = b[BT_DWU2],
                      .dwd = b[BT_DWD2],
                      .fwd_ew = r->fwd_ew,
                      .bwd_ew = r->bwd_ew};
    double dense_bytes = 6.0 * (double)M * (double)r->s.N * 2.0;
    size_t ours_bytes = 0, peak = 0;
    bt_case_check(r, f, &rec, &ours, &dense, dense_bytes, &ours_bytes, &peak);
    bt_case_time(r, &rec, &ours, &dense, ours_bytes, dense_bytes, peak);
    return rec.correct;
}

int bench_train_run(bench_env *env, void (*emit)(bench_env *, const bench_record *)) {
    const bench_opts *o = env->opts;
    bt_run r;
    memset(&r, 0, sizeof r);
    r.env = env, r.emit = emit, r.lambda = 1.0f, r.Mmax = bench_max_M(o);
    int rc = bt_open(&r);
    if (rc != 0)
        goto done;
    for (size_t di = 0; di < o->ndist; di++) {
        for (size_t ni = 0; ni < o->nnnz; ni++) {
            tw_synth_ffn *f = bench_synth(env, &r.s, r.Mmax, 1, di, ni);
            if (!f) {
                rc = 1;
                goto done;
            }
            if (bt_upload(&r, f) != 0) {
                tw_synth_destroy(f);
                rc = 1;
                goto done;
            }
            for (size_t mi = 0; mi < o->nM; mi++)
                if (!bt_case(&r, f, o->M[mi], di, ni))
                    rc = 1; /* a wrong case fails the run; the others still run */
            tw_synth_destroy(f);
        }
    }
done:
    bt_close(&r);
    return rc;
}
