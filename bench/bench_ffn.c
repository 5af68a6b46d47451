/*
 * bench_ffn.c — the ffn_infer benchmark: ours end to end (twell_gate_pack + twell_ffn_infer)
 * against a dense cuBLAS FFN on the same data (gate GEMM, up GEMM, h = relu(g) ⊙ u by a small
 * kernel of ours (templates/ffn/ffn_dense_ew.cu.lua), down GEMM), and the fused part alone
 * (twell_ffn_infer on a packed buffer already made) against the same dense FFN. The three are
 * timed interleaved; two records per case: op "ffn_infer" and op "ffn_fused_only". The plan's
 * path is --path (default AUTO: sparse or the dense path, chosen from the previous call's counts);
 * the record's variant says which ran ("cublaslt+dense", "sm90+tiled", ...). Its path is the
 * route alone (bench_ffn_path), requested_path the --path asked for. --gated 0 benchmarks a
 * non-gated block instead (the gate-pack packs relu(x·Wuᵀ); the dense FFN is then cuBLAS's up
 * GEMM, h = relu(u), down GEMM).
 *
 * The dense down GEMM reads Wd transposed, [K, N] (what nn.Linear stores for a down projection),
 * so all three GEMMs are the fast "TN" cuBLAS form.
 *
 * Check (before timing, after one untimed run): y poisoned, one end-to-end run; every element
 * written and finite; the sampled rows (~check_rows, plus rows with overflowing row-tiles)
 * compared with tw_ffn_infer_ref on the same packed bytes. max_rel_err = the largest row-relative
 * L2 error; tolerance 5e-3 (bf16) or 1e-3 (fp16), the output rounding level. The note records
 * whether the tiled pipeline ran or fell back, and its pair slots per row.
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    twell_plan *plan;
    size_t M;
    const void *x, *wg, *wu, *wd; /* wg NULL: non-gated block */
    uint32_t *packed;
    void *y;
    twell_stream stream; /* NULL: the default stream; else the one a graph is captured on */
    int layer;           /* end to end through twell_ffn_layer (packed its scratch) */
} bench_ffn_ours;

typedef struct {
    bench_env *env;
    size_t M;
    const void *x, *wg, *wu, *wdt; /* wg NULL: non-gated block (no gate GEMM) */
    void *g, *u, *h, *y;
    tw_CUfunction ew;
    twell_stream stream; /* of the elementwise kernel; cuBLAS's is set on its handle */
} bench_ffn_dense;

static twell_status bench_ffn_run_e2e(void *arg) {
    bench_ffn_ours *a = arg;
    if (a->layer)
        return twell_ffn_layer(a->plan, a->M, a->x, a->wg, a->wu, a->wd, a->y, a->packed,
                               a->stream);
    /* the gate-pack packs relu(x·Wᵀ) of the weight carrying the sparsity: Wg, or Wu non-gated */
    twell_status st =
        twell_gate_pack(a->plan, a->M, a->x, a->wg ? a->wg : a->wu, a->packed, a->stream);
    if (st == TWELL_OK)
        st = twell_ffn_infer(a->plan, a->M, a->x, a->packed, a->wg, a->wu, a->wd, a->y, a->stream);
    return st;
}

static twell_status bench_ffn_run_fused(void *arg) {
    bench_ffn_ours *a = arg;
    return twell_ffn_infer(a->plan, a->M, a->x, a->packed, a->wg, a->wu, a->wd, a->y, a->stream);
}

static twell_status bench_ffn_run_dense(void *arg) {
    bench_ffn_dense *a = arg;
    bench_env *env = a->env;
    const bench_opts *o = env->opts;
    twell_ctx *ctx = env->ctx;
    char err[256];
    if ((a->wg && bench_cublas_gemm_nt(ctx, env->cublas, o->dtype, a->M, o->N, o->K, a->x, a->wg,
                                       a->g, err, sizeof err) != 0) ||
        bench_cublas_gemm_nt(ctx, env->cublas, o->dtype, a->M, o->N, o->K, a->x, a->wu, a->u, err,
                             sizeof err) != 0) {
        fprintf(stderr, "twell bench: %s\n", err);
        return TWELL_ERR_CUDA;
    }
    long long n = (long long)a->M * o->N;
    void *args[] = {&a->g, &a->u, &a->h, &n};
    twell_status st = bench_ew_launch_on(ctx, a->ew, args, a->stream);
    if (st != TWELL_OK)
        return st;
    /* y[M, K] = h[M, N] · (Wdᵀ [K, N])ᵀ */
    if (bench_cublas_gemm_nt(ctx, env->cublas, o->dtype, a->M, o->K, o->N, a->h, a->wdt, a->y, err,
                             sizeof err) != 0) {
        fprintf(stderr, "twell bench: %s\n", err);
        return TWELL_ERR_CUDA;
    }
    return TWELL_OK;
}

/* The dense baseline's elementwise kernel, compiled through the JIT like our own. */
static twell_status bench_ffn_load_ew(twell_ctx *ctx, twell_dtype dt, int gated, tw_CUmodule *mod,
                                      tw_CUfunction *fn) {
    tw_param params[] = {{"dtype", dt == TWELL_DTYPE_BF16 ? "bf16" : "fp16", 0},
                         {"gated", NULL, gated ? 1 : 0}};
    static const char *const names[] = {"twell_dense_ew"};
    return bench_ew_load(ctx, "ffn_dense_ew", params, 2, 1, names, mod, fn);
}

/* The rows the check compares: ~check_rows sampled over M, plus up to 16 rows with an
 * overflowing row-tile (hp: the packed output). Their count, 0 with *rows NULL out of memory. */
static size_t bench_ffn_check_rows(bench_env *env, const twell_shape *s, size_t M,
                                   const uint32_t *hp, size_t **rows_out) {
    size_t want = env->opts->check_rows ? env->opts->check_rows : 1, extra = 16;
    size_t row_words = s->N / s->C;
    size_t *rows = malloc((want + extra) * sizeof *rows);
    size_t nr = rows ? tw_pack_sample_rows(M, want, rows) : 0;
    uint32_t W = s->T / s->C, NT = s->N / s->T;
    for (size_t m = 0, added = 0; rows && m < M && added < extra; m++) {
        int ovf = 0, dup = 0;
        for (uint32_t t = 0; t < NT; t++)
            ovf |= hp[m * row_words + t * W] > W - 1;
        for (size_t i = 0; i < nr && ovf; i++)
            dup |= rows[i] == m;
        if (ovf && !dup)
            rows[nr++] = m, added++;
    }
    *rows_out = rows;
    return nr;
}

/* The worst row-relative L2 error of the rows of y (hy, all M) against the reference's (ref, the
 * nr rows in order), and in *worst_row which row it is. */
static double bench_ffn_worst(const twell_shape *s, const uint16_t *hy, const uint16_t *ref,
                              const size_t *rows, size_t nr, size_t *worst_row) {
    double worst = 0.0;
    *worst_row = 0;
    for (size_t i = 0; i < nr; i++) {
        double num = 0.0, den = 0.0;
        for (uint32_t k = 0; k < s->K; k++) {
            double a = tw_half_to_f32(s->dtype, hy[rows[i] * s->K + k]);
            double b = tw_half_to_f32(s->dtype, ref[i * s->K + k]);
            num += (a - b) * (a - b);
            den += b * b;
        }
        double e = den > 0.0 ? sqrt(num / den) : sqrt(num);
        if (!(e <= worst))
            worst = e, *worst_row = rows[i];
    }
    return worst;
}

/* The check's note: the error against its tolerance and what ran (the small-batch path, the dense
 * path, the tiled pipeline or the row kernel) with that route's own figures; fl: the plan's
 * TW_TC_FFN_FLAGS after the checked run. */
static void bench_ffn_check_note(bench_env *env, twell_plan *plan, size_t M, double worst,
                                 size_t worst_row, double tol, const tw_synth_stats *stats,
                                 const uint32_t *fl, bench_record *r) {
    size_t chunk_rows = 0;
    (void)tw_test_control(TW_TC_FFN_CHUNK_ROWS, &chunk_rows);
    size_t chunk = M < chunk_rows ? M : chunk_rows;
    if (bench_plan_int(plan, TW_TC_SMALL_LAST_FFN))
        snprintf(r->check_note, sizeof r->check_note,
                 "row-rel L2 vs tw_ffn_infer_ref %.2e (row %zu, tol %.0e); small-batch "
                 "path; overflowing row-tiles %zu (all M); workspace %.0f MB",
                 worst, worst_row, tol, stats->overflow_tiles,
                 (double)bench_plan_size(plan, TW_TC_SMALL_WORKSPACE_BYTES) / 1e6);
    else if (bench_plan_path(plan, TW_TC_DENSE_LAST_PATH) == TWELL_PATH_DENSE) {
        unsigned long gr[2] = {0, 0};
        (void)tw_test_control(TW_TC_DENSE_GATE_REUSED, plan, gr);
        snprintf(r->check_note, sizeof r->check_note,
                 "row-rel L2 vs tw_ffn_infer_ref %.2e (row %zu, tol %.0e); dense path "
                 "through cuBLASLt (plan path %s, estimate %.1f/row, AUTO threshold %.1f; "
                 "gate reused %lu, computed %lu calls); overflowing row-tiles %zu (all M); "
                 "dense workspace %.0f MB",
                 worst, worst_row, tol, env->opts->path,
                 bench_plan_double(plan, TW_TC_DENSE_ESTIMATE), bench_plan_threshold(plan, M),
                 gr[0], gr[1], stats->overflow_tiles,
                 (double)bench_plan_size(plan, TW_TC_DENSE_WORKSPACE_BYTES) / 1e6);
    } else
        snprintf(r->check_note, sizeof r->check_note,
                 "row-rel L2 vs tw_ffn_infer_ref %.2e (row %zu, tol %.0e); %s; pair "
                 "slots %.1f/row; overflowing row-tiles %zu (all M); workspace %.0f MB; "
                 "estimate %.1f/row",
                 worst, worst_row, tol,
                 !bench_plan_int(plan, TW_TC_FFN_TILED) ? "portable row kernel"
                 : fl[0] ? "tiled pipeline FELL BACK to the row kernel"
                         : "tiled pipeline",
                 (double)fl[1] / (double)chunk, stats->overflow_tiles,
                 (double)bench_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES) / 1e6,
                 bench_plan_double(plan, TW_TC_DENSE_ESTIMATE));
}

/* Correctness of one M (see the file comment). Leaves a valid packed buffer for the fused-only
 * timing. */
static int bench_ffn_check(bench_env *env, const twell_shape *s, twell_plan *plan, size_t M,
                           const tw_synth_ffn *f, const bench_ffn_ours *d, uint32_t *hp,
                           uint16_t *hy, bench_record *r) {
    twell_ctx *ctx = env->ctx;
    size_t words = twell_packed_words(s, M), row_words = s->N / s->C, n = M * s->K;
    /* One untimed run first: a plan that saw sparser data sizes its workspace from this call's
     * flags, so the checked run is the steady-state path the timing measures. */
    /* twell_ffn_layer may leave packed unwritten (its dense route): the reference's packed
     * activation is then the gate-pack's, which the layer writes identically where it packs */
    if (bench_ffn_run_e2e((void *)d) != TWELL_OK || tw_cuda_synchronize(ctx) != TWELL_OK ||
        (d->layer &&
         twell_gate_pack(plan, M, d->x, d->wg ? d->wg : d->wu, d->packed, NULL) != TWELL_OK) ||
        tw_cuda_memset_d32(ctx, d->y, 0xFFFFFFFFu, n / 2, NULL) != TWELL_OK ||
        bench_ffn_run_e2e((void *)d) != TWELL_OK || tw_cuda_synchronize(ctx) != TWELL_OK ||
        tw_cuda_memcpy_dtoh(ctx, hp, d->packed, words * 4) != TWELL_OK ||
        tw_cuda_memcpy_dtoh(ctx, hy, d->y, n * 2) != TWELL_OK) {
        snprintf(r->check_note, sizeof r->check_note, "run failed: %s", twell_ctx_errmsg(ctx));
        return 0;
    }
    uint32_t fl[4];
    if (tw_test_control(TW_TC_FFN_FLAGS, plan, fl) != TWELL_OK)
        memset(fl, 0, sizeof fl);
    for (size_t i = 0; i < n; i++)
        if (hy[i] == 0xFFFFu || !isfinite(tw_half_to_f32(s->dtype, hy[i]))) {
            snprintf(r->check_note, sizeof r->check_note,
                     "y[%zu][%zu] = %04x: never written or not finite", i / s->K, i % s->K, hy[i]);
            return 0;
        }
    tw_synth_stats stats;
    tw_synth_packed_stats(s, M, hp, &stats);
    r->nnz_mean = stats.mean_row;

    size_t *rows = NULL;
    size_t nr = bench_ffn_check_rows(env, s, M, hp, &rows);
    uint16_t *xs = malloc(nr * s->K * 2 + 2), *ref = malloc(nr * s->K * 2 + 2);
    uint32_t *ps = malloc(nr * row_words * 4 + 4);
    int ok = 0;
    if (!rows || !xs || !ref || !ps) {
        snprintf(r->check_note, sizeof r->check_note, "out of host memory for the check");
    } else {
        for (size_t i = 0; i < nr; i++) {
            memcpy(xs + i * s->K, f->x + rows[i] * s->K, s->K * 2u);
            memcpy(ps + i * row_words, hp + rows[i] * row_words, row_words * 4);
        }
        twell_status st = tw_ffn_infer_ref(ctx->pool, s, nr, xs, ps, f->wg, f->wu, f->wd, ref);
        if (st != TWELL_OK) {
            snprintf(r->check_note, sizeof r->check_note, "CPU reference: %s%s",
                     twell_status_name(st),
                     st == TWELL_ERR_INVALID_ARG ? " (malformed packed rows from the GPU)" : "");
        } else {
            size_t worst_row = 0;
            double worst = bench_ffn_worst(s, hy, ref, rows, nr, &worst_row);
            double tol = s->dtype == TWELL_DTYPE_BF16 ? 5e-3 : 1e-3;
            r->checked_rows = nr;
            r->max_rel_err = worst;
            ok = worst <= tol;
            bench_ffn_check_note(env, plan, M, worst, worst_row, tol, &stats, fl, r);
        }
    }
    free(rows);
    free(xs);
    free(ref);
    free(ps);
    return ok;
}

/* The dense route's name: "dense" (its gate reused from the gate-pack: "dense" too; the note
 * counts both). */
static void bench_ffn_dense_name(twell_plan *plan, char *out, size_t n) {
    (void)plan;
    snprintf(out, n, "dense");
}

/* The route of the plan's last twell_ffn_infer, eager or captured: "small", "dense", "tiled" or
 * "rows" (a plan without the tiled pipeline runs the portable row kernel). The small-batch kernels
 * leave the last path SPARSE, so the two probes never both claim a call. */
static const char *bench_ffn_route(twell_plan *plan) {
    return bench_plan_int(plan, TW_TC_SMALL_LAST_FFN)                         ? "small"
           : bench_plan_path(plan, TW_TC_DENSE_LAST_PATH) == TWELL_PATH_DENSE ? "dense"
           : bench_plan_int(plan, TW_TC_FFN_TILED)                            ? "tiled"
                                                                              : "rows";
}

/* twell_ffn_infer calls of the dense and of the sparse path (small-batch included) so far. */
typedef struct {
    unsigned long dense, sparse;
} bench_ffn_calls;

static bench_ffn_calls bench_ffn_calls_now(twell_plan *plan) {
    bench_ffn_calls c = {bench_plan_calls(plan, TWELL_PATH_DENSE),
                         bench_plan_calls(plan, TWELL_PATH_SPARSE)};
    return c;
}

/* A record's path (bench_record) from the calls since `before`: "mixed" when AUTO ran some dense
 * and some sparse, else the last call's route. Small-batch versus tiled needs no count: AUTO picks
 * between them by M alone (ffn_policy.h), which a case holds fixed. */
static void bench_ffn_path(twell_plan *plan, bench_ffn_calls before, char *out, size_t n) {
    bench_ffn_calls now = bench_ffn_calls_now(plan);
    int mixed = now.dense > before.dense && now.sparse > before.sparse;
    snprintf(out, n, "%s", mixed ? "mixed" : bench_ffn_route(plan));
}

/* "<gate-pack kernel>+<what the last twell_ffn_infer ran>": bench_ffn_route, the dense path with
 * its splits; cut to n - 1 characters. */
static void bench_ffn_variant(twell_plan *plan, char *out, size_t n) {
    char dense[32], buf[64];
    bench_ffn_dense_name(plan, dense, sizeof dense);
    const char *route = bench_ffn_route(plan);
    const char *k = !strcmp(route, "dense") ? dense : route;
    char g[24];
    bench_gate_name(plan, g, sizeof g);
    snprintf(buf, sizeof buf, "%.23s+%.31s", g, k);
    size_t len = strlen(buf);
    if (n == 0)
        return;
    len = len < n - 1 ? len : n - 1;
    memcpy(out, buf, len);
    out[len] = '\0';
}

/* Wd [N, K] -> Wdᵀ [K, N]. */
static uint16_t *bench_transpose(const uint16_t *w, uint32_t N, uint32_t K) {
    uint16_t *t = malloc((size_t)N * K * 2);
    if (!t)
        return NULL;
    for (uint32_t n = 0; n < N; n++)
        for (uint32_t k = 0; k < K; k++)
            t[(size_t)k * N + n] = w[(size_t)n * K + k];
    return t;
}

/* A captured graph replayed on the default stream (what the timing protocol measures). */
typedef struct {
    twell_ctx *ctx;
    tw_cuda_graph g;
} bench_ffn_graph;

static twell_status bench_ffn_run_graph(void *arg) {
    bench_ffn_graph *a = arg;
    return tw_cuda_graph_launch(a->ctx, a->g, NULL);
}

/* Captures fn(arg) on stream in `mode` (tw_cuda_capture_begin) into *g. */
static twell_status bench_ffn_capture(twell_ctx *ctx, twell_stream stream, int mode, bench_fn fn,
                                      void *arg, tw_cuda_graph *g) {
    *g = NULL;
    twell_status st = tw_cuda_capture_begin(ctx, stream, mode);
    if (st != TWELL_OK)
        return st;
    twell_status run = fn(arg);
    char msg[400];
    snprintf(msg, sizeof msg, "%s", run == TWELL_OK ? "" : twell_ctx_errmsg(ctx));
    st = tw_cuda_capture_end(ctx, stream, g);
    if (run != TWELL_OK) {
        tw_cuda_graph_destroy(ctx, *g);
        *g = NULL;
        return tw_error(ctx, run, "%s", msg);
    }
    return st;
}

/* Graph mode of one case: ours (gate-pack + ffn_infer, and ffn_infer alone) captured in global
 * mode on the plan as the eager calls left it (reserved for M, the estimate from their counts),
 * the dense baseline captured in relaxed mode (cuBLAS may set itself up lazily); one replay of
 * ours checked against the eager run's y (hy: the same bytes when the same path ran); then the
 * three replays timed as the eager calls are. Emits ffn_infer_graph and ffn_fused_only_graph,
 * each with the route its capture took as path. */
static int bench_ffn_graph_case(bench_env *env, twell_plan *plan, const bench_record *eager,
                                bench_ffn_ours ours, bench_ffn_dense dense, int have_dense,
                                twell_stream cs, const uint16_t *hy, uint16_t *hy2,
                                twell_path eager_path,
                                void (*emit)(bench_env *, const bench_record *)) {
    twell_ctx *ctx = env->ctx;
    const bench_opts *o = env->opts;
    bench_record r = *eager;
    snprintf(r.op, sizeof r.op, ours.layer ? "ffn_layer_graph" : "ffn_infer_graph");
    tw_cuda_graph g[3] = {NULL, NULL, NULL};
    ours.stream = cs;
    dense.stream = cs;
    twell_status st = bench_ffn_capture(ctx, cs, 0, bench_ffn_run_e2e, &ours, &g[0]);
    twell_path took = bench_plan_path(plan, TW_TC_DENSE_LAST_PATH);
    /* the captured gate-pack's kernel: AUTO may pick another than the eager run's (its estimate
     * moved in between), and then the packed bytes differ at fp32-rounding level */
    char gate_cap[32];
    bench_gate_name(plan, gate_cap, sizeof gate_cap);
    const size_t gate_len = strcspn(eager->variant, "+");
    const int same_gate =
        strlen(gate_cap) == gate_len && !strncmp(gate_cap, eager->variant, gate_len);
    /* the captured calls' routes: every replay runs what its capture recorded */
    const char *route = bench_ffn_route(plan), *route_fused = route;
    if (st == TWELL_OK)
        st = bench_ffn_capture(ctx, cs, 0, bench_ffn_run_fused, &ours, &g[1]);
    if (st == TWELL_OK)
        route_fused = bench_ffn_route(plan);
    int dense_ok = have_dense;
    if (st == TWELL_OK && have_dense) {
        dense_ok = bench_cublas_set_stream(ctx, env->cublas, cs) == 0 &&
                   bench_ffn_capture(ctx, cs, 2, bench_ffn_run_dense, &dense, &g[2]) == TWELL_OK;
        (void)bench_cublas_set_stream(ctx, env->cublas, NULL);
        if (!dense_ok)
            fprintf(stderr, "twell bench: dense baseline not capturable: %s\n",
                    twell_ctx_errmsg(ctx));
    }
    size_t n = ours.M * o->K;
    if (st == TWELL_OK)
        st = tw_cuda_memset_d32(ctx, ours.y, 0xFFFFFFFFu, n / 2, NULL);
    if (st == TWELL_OK)
        st = tw_cuda_graph_launch(ctx, g[0], NULL);
    if (st == TWELL_OK)
        st = tw_cuda_synchronize(ctx);
    if (st == TWELL_OK)
        st = tw_cuda_memcpy_dtoh(ctx, hy2, ours.y, n * 2);
    size_t len = strlen(r.check_note);
    if (st != TWELL_OK) {
        r.correct = 0;
        snprintf(r.check_note + len, sizeof r.check_note - len, "; graph capture/replay failed: %s",
                 twell_ctx_errmsg(ctx));
    } else {
        int same = memcmp(hy, hy2, n * 2) == 0;
        snprintf(r.variant + strcspn(r.variant, "+"), sizeof r.variant - strcspn(r.variant, "+"),
                 "+%s", route);
        snprintf(r.check_note + len, sizeof r.check_note - len,
                 "; graph: captured path %s, replay bytes %s the eager run's (%s path)%s%s",
                 took == TWELL_PATH_DENSE ? "dense" : "sparse", same ? "equal to" : "differ from",
                 eager_path == TWELL_PATH_DENSE ? "dense" : "sparse",
                 same_gate ? "" : "; captured gate-pack ", same_gate ? "" : gate_cap);
        /* bytes must match where the same kernels ran; another route is within tolerance of the
         * reference, not bitwise the eager run */
        if (!same && took == eager_path && same_gate)
            r.correct = 0;
    }
    int rc = r.correct ? 0 : 1;
    bench_check_report(&r);
    if (st == TWELL_OK) {
        bench_ffn_graph ga[3] = {{ctx, g[0]}, {ctx, g[1]}, {ctx, g[2]}};
        bench_fn fns[3] = {bench_ffn_run_graph, bench_ffn_run_graph, bench_ffn_run_graph};
        void *args[3] = {&ga[0], &ga[1], &ga[2]};
        double med[3] = {0, 0, 0}, mn[3] = {0, 0, 0}, mx[3] = {0, 0, 0};
        if (bench_time_case(env, &r, dense_ok ? 3 : 2, fns, args, med, mn, mx) != TWELL_OK)
            rc = 1;
        snprintf(r.path, sizeof r.path, "%s", route);
        bench_record fused = r;
        snprintf(fused.op, sizeof fused.op, "ffn_fused_only_graph");
        snprintf(fused.path, sizeof fused.path, "%s", route_fused);
        bench_record_times(env, &r, "cublas_ffn_graph", med, mn, mx, 0, 2, dense_ok);
        emit(env, &r);
        bench_record_times(env, &fused, "cublas_ffn_graph", med, mn, mx, 1, 2, dense_ok);
        emit(env, &fused);
    }
    for (int i = 0; i < 3; i++)
        tw_cuda_graph_destroy(ctx, g[i]);
    return rc;
}

/* ---- host mode: what a call costs the calling thread ---- */

static double bench_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static unsigned long bench_driver_calls(twell_ctx *ctx) {
    unsigned long v = 0;
    return tw_test_control(TW_TC_CUDA_DRIVER_CALLS, ctx, &v) == TWELL_OK ? v : 0;
}

static int bench_cmp_ms(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define BENCH_HOST_BATCH 8 /* calls enqueued between two (untimed) synchronisations */

/* Host mode of one case: the wall-clock time the calling thread spends inside each function alone
 * (ours end to end, ours fused only, the dense cuBLAS FFN), reps·50 calls each, interleaved in
 * batches of BENCH_HOST_BATCH with the device synchronised between batches (untimed), so the
 * launch queue never fills and no call waits for the GPU: the time is the host path (argument
 * checks, driver queries, launches), what bounds eager decode when it exceeds the GPU time.
 * Medians; min and max too. Also the driver calls per call (the wrappers' count, median), in the
 * note. Emits ffn_infer_host and ffn_fused_only_host (baseline cublas_ffn_host). */
static int bench_ffn_host_case(bench_env *env, const bench_record *checked, bench_ffn_ours *ours,
                               bench_ffn_dense *dense, int have_dense,
                               void (*emit)(bench_env *, const bench_record *)) {
    twell_ctx *ctx = env->ctx;
    const size_t n = have_dense ? 3 : 2, calls = (size_t)env->opts->reps * 50u;
    bench_fn fns[3] = {bench_ffn_run_e2e, bench_ffn_run_fused, bench_ffn_run_dense};
    void *args[3] = {ours, ours, dense};
    double *t = malloc(3 * calls * sizeof *t), *dc = malloc(2 * calls * sizeof *dc);
    bench_record r = *checked;
    twell_status st = t && dc ? TWELL_OK : TWELL_ERR_NO_MEMORY;
    bench_ffn_calls before = bench_ffn_calls_now(ours->plan);
    for (int w = 0; w < env->opts->warmup && st == TWELL_OK; w++)
        for (size_t i = 0; i < n && st == TWELL_OK; i++)
            st = fns[i](args[i]);
    if (st == TWELL_OK)
        st = tw_cuda_synchronize(ctx);
    for (size_t c0 = 0; c0 < calls && st == TWELL_OK; c0 += BENCH_HOST_BATCH) {
        size_t c1 = c0 + BENCH_HOST_BATCH < calls ? c0 + BENCH_HOST_BATCH : calls;
        for (size_t i = 0; i < n && st == TWELL_OK; i++) {
            for (size_t c = c0; c < c1 && st == TWELL_OK; c++) {
                unsigned long d0 = bench_driver_calls(ctx);
                double t0 = bench_now_ms();
                st = fns[i](args[i]);
                t[i * calls + c] = bench_now_ms() - t0;
                if (i < 2)
                    dc[i * calls + c] = (double)(bench_driver_calls(ctx) - d0);
            }
            if (st == TWELL_OK)
                st = tw_cuda_synchronize(ctx);
        }
    }
    if (st != TWELL_OK) {
        r.correct = 0;
        snprintf(r.check_note, sizeof r.check_note, "host timing failed: %s",
                 t && dc ? twell_ctx_errmsg(ctx) : "out of host memory");
        bench_check_report(&r);
        free(t);
        free(dc);
        return 1;
    }
    double med[3] = {0, 0, 0}, mn[3] = {0, 0, 0}, mx[3] = {0, 0, 0}, dmed[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        qsort(t + i * calls, calls, sizeof *t, bench_cmp_ms);
        med[i] = t[i * calls + calls / 2];
        mn[i] = t[i * calls];
        mx[i] = t[i * calls + calls - 1];
        if (i < 2) {
            qsort(dc + i * calls, calls, sizeof *dc, bench_cmp_ms);
            dmed[i] = dc[i * calls + calls / 2];
        }
    }
    size_t len = strlen(r.check_note);
    snprintf(r.check_note + len, sizeof r.check_note - len,
             "; host: %zu calls each, median driver calls %.0f per gate_pack+ffn_infer, %.0f per "
             "ffn_infer; pointer cache %s",
             calls, dmed[0], dmed[1], ctx->pointer_cache ? "on" : "off (TWELL_POINTER_CACHE=0)");
    snprintf(r.op, sizeof r.op, ours->layer ? "ffn_layer_host" : "ffn_infer_host");
    r.reps = (int)calls;
    bench_ffn_path(ours->plan, before, r.path, sizeof r.path);
    bench_record fused = r;
    snprintf(fused.op, sizeof fused.op, "ffn_fused_only_host");
    bench_record_times(env, &r, "cublas_ffn_host", med, mn, mx, 0, 2, have_dense);
    r.reps = (int)calls;
    emit(env, &r);
    bench_record_times(env, &fused, "cublas_ffn_host", med, mn, mx, 1, 2, have_dense);
    fused.reps = (int)calls;
    emit(env, &fused);
    free(t);
    free(dc);
    return r.correct ? 0 : 1;
}

/* One run of the op: the plan over every case, the dense baseline's kernel, the modes, the
 * device buffers (ours, then the baseline's when it runs) and the host copies of the outputs. */
typedef struct {
    bench_env *env;
    void (*emit)(bench_env *, const bench_record *);
    twell_shape s;
    size_t Mmax;
    twell_plan *plan;
    int have_dense;
    tw_CUmodule ew_mod;
    tw_CUfunction ew;
    int host, eager, graph;
    twell_stream cs; /* the stream graphs are captured on */
    void *dx, *dwg, *dwu, *dwd, *dp, *dy;
    void *dwdt, *dg, *du, *dh, *dy2;
    uint32_t *hp;
    uint16_t *hy, *hy2;
} bench_ffn_session;

/* The plan (with --path and TWELL_FFN_HEAVY), the dense baseline's kernel when cuBLAS is there,
 * the capture stream and the buffers. 0, or 1 with the reason on stderr (bench_ffn_close
 * releases what was made). */
static int bench_ffn_open(bench_ffn_session *b) {
    bench_env *env = b->env;
    const bench_opts *o = env->opts;
    twell_ctx *ctx = env->ctx;
    twell_shape *s = &b->s;
    twell_shape_init(s, o->K, o->N);
    s->T = o->T, s->C = o->C, s->dtype = o->dtype;
    s->gated = o->gated; /* gated unless --gated 0 */
    if (bench_plan_open(env, s, &b->plan) != 0)
        return 1;
    twell_path path = bench_path_parse(o->path);
    if (twell_plan_set_path(b->plan, path) != TWELL_OK ||
        (path == TWELL_PATH_DENSE && !bench_plan_int(b->plan, TW_TC_DENSE_AVAILABLE))) {
        fprintf(stderr,
                "twell bench: --path %s: the dense path is not available for this plan "
                "(cuBLASLt could not be loaded)\n",
                o->path);
        return 1;
    }
    /* TWELL_FFN_HEAVY: the sparse path's heavy-row route (test control TW_TC_FFN_SET_HEAVY): a
     * row count threshold, 0 off, negative the library's default; unset: the default */
    const char *heavy = getenv("TWELL_FFN_HEAVY");
    if (heavy && *heavy &&
        tw_test_control(TW_TC_FFN_SET_HEAVY, b->plan, strtoll(heavy, NULL, 10)) != TWELL_OK) {
        fprintf(stderr, "twell bench: TWELL_FFN_HEAVY=%s: %s\n", heavy, twell_ctx_errmsg(ctx));
        return 1;
    }
    b->have_dense = env->cublas != NULL;
    if (b->have_dense &&
        bench_ffn_load_ew(ctx, s->dtype, s->gated, &b->ew_mod, &b->ew) != TWELL_OK) {
        fprintf(stderr, "twell bench: dense baseline kernel: %s\n", twell_ctx_errmsg(ctx));
        b->have_dense = 0;
    }
    size_t xb = b->Mmax * s->K * 2, wb = (size_t)s->N * s->K * 2, hb = b->Mmax * s->N * 2;
    size_t words_max = twell_packed_words(s, b->Mmax);
    b->hp = malloc(words_max * 4);
    b->hy = malloc(xb), b->hy2 = malloc(xb);
    b->host = !strcmp(o->mode, "host");
    b->eager = strcmp(o->mode, "graph") != 0 && !b->host;
    b->graph = strcmp(o->mode, "eager") != 0 && !b->host;
    if (b->graph && tw_cuda_stream_create(ctx, &b->cs) != TWELL_OK) {
        fprintf(stderr, "twell bench: stream: %s\n", twell_ctx_errmsg(ctx));
        return 1;
    }
    if (!b->hp || !b->hy || !b->hy2 || tw_cuda_malloc(ctx, xb, &b->dx) != TWELL_OK ||
        tw_cuda_malloc(ctx, wb, &b->dwg) != TWELL_OK ||
        tw_cuda_malloc(ctx, wb, &b->dwu) != TWELL_OK ||
        tw_cuda_malloc(ctx, wb, &b->dwd) != TWELL_OK ||
        tw_cuda_malloc(ctx, words_max * 4, &b->dp) != TWELL_OK ||
        tw_cuda_malloc(ctx, xb, &b->dy) != TWELL_OK ||
        (b->have_dense && (tw_cuda_malloc(ctx, wb, &b->dwdt) != TWELL_OK ||
                           tw_cuda_malloc(ctx, hb, &b->dg) != TWELL_OK ||
                           tw_cuda_malloc(ctx, hb, &b->du) != TWELL_OK ||
                           tw_cuda_malloc(ctx, hb, &b->dh) != TWELL_OK ||
                           tw_cuda_malloc(ctx, xb, &b->dy2) != TWELL_OK))) {
        fprintf(stderr, "twell bench: allocation: %s\n",
                b->hp && b->hy ? twell_ctx_errmsg(ctx) : "host");
        return 1;
    }
    return 0;
}

static void bench_ffn_close(bench_ffn_session *b) {
    twell_ctx *ctx = b->env->ctx;
    free(b->hp);
    free(b->hy);
    free(b->hy2);
    tw_cuda_stream_destroy(ctx, b->cs);
    void *bufs[] = {b->dx, b->dwg, b->dwu, b->dwd, b->dwdt, b->dp,
                    b->dy, b->dg,  b->du,  b->dh,  b->dy2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        tw_cuda_free(ctx, bufs[i]);
    bench_ew_unload(ctx, b->ew_mod);
    twell_plan_destroy(b->plan);
}

/* The case's data f on the device, with Wd transposed for the baseline. 0, or 1 with the reason
 * on stderr. */
static int bench_ffn_upload(bench_ffn_session *b, const tw_synth_ffn *f) {
    twell_ctx *ctx = b->env->ctx;
    const twell_shape *s = &b->s;
    size_t xb = b->Mmax * s->K * 2, wb = (size_t)s->N * s->K * 2;
    uint16_t *wdt = b->have_dense ? bench_transpose(f->wd, s->N, s->K) : NULL;
    int rc = 0;
    if ((b->have_dense && !wdt) || tw_cuda_memcpy_htod(ctx, b->dx, f->x, xb) != TWELL_OK ||
        (s->gated && tw_cuda_memcpy_htod(ctx, b->dwg, f->wg, wb) != TWELL_OK) ||
        tw_cuda_memcpy_htod(ctx, b->dwu, f->wu, wb) != TWELL_OK ||
        tw_cuda_memcpy_htod(ctx, b->dwd, f->wd, wb) != TWELL_OK ||
        (b->have_dense && tw_cuda_memcpy_htod(ctx, b->dwdt, wdt, wb) != TWELL_OK)) {
        fprintf(stderr, "twell bench: upload: %s\n", twell_ctx_errmsg(ctx));
        rc = 1;
    }
    free(wdt);
    return rc;
}

/* Eager timing of a checked case: ours end to end, ours fused only and the dense FFN; the route
 * the timed calls ran, the two records emitted, then the graph case when --mode both. 0, or 1
 * when the case failed. */
static int bench_ffn_eager_case(bench_ffn_session *b, bench_record *r, bench_ffn_ours *ours,
                                bench_ffn_dense *dense, twell_path eager_path) {
    bench_env *env = b->env;
    twell_plan *plan = b->plan;
    int rc = 0;
    bench_fn fns[3] = {bench_ffn_run_e2e, bench_ffn_run_fused, bench_ffn_run_dense};
    void *args[3] = {ours, ours, dense};
    double med[3] = {0, 0, 0}, mn[3] = {0, 0, 0}, mx[3] = {0, 0, 0};
    bench_ffn_calls c0 = bench_ffn_calls_now(plan);
    (void)bench_time_case(env, r, b->have_dense ? 3 : 2, fns, args, med, mn, mx);
    bench_ffn_path(plan, c0, r->path, sizeof r->path);
    char after[sizeof r->variant];
    bench_ffn_variant(plan, after, sizeof after);
    if (strcmp(after, r->variant) != 0) { /* AUTO changed its mind while timing */
        size_t len = strlen(r->check_note);
        snprintf(r->check_note + len, sizeof r->check_note - len,
                 "; path changed during timing: %s", after);
    }
    bench_record fused = *r;
    snprintf(fused.op, sizeof fused.op, "ffn_fused_only");
    bench_record_times(env, r, "cublas_ffn", med, mn, mx, 0, 2, b->have_dense);
    b->emit(env, r);
    bench_record_times(env, &fused, "cublas_ffn", med, mn, mx, 1, 2, b->have_dense);
    b->emit(env, &fused);
    if (!r->correct)
        rc = 1;
    if (b->graph && bench_ffn_graph_case(env, plan, r, *ours, *dense, b->have_dense, b->cs, b->hy,
                                         b->hy2, eager_path, b->emit) != 0)
        rc = 1;
    return rc;
}

/* One case (M rows of distribution di at target nnz ni): reserved as a server would, checked,
 * then timed in the modes asked for. 0, or 1 when something in it failed. */
static int bench_ffn_case(bench_ffn_session *b, const tw_synth_ffn *f, size_t M, size_t di,
                          size_t ni) {
    bench_env *env = b->env;
    const bench_opts *o = env->opts;
    twell_plan *plan = b->plan;
    int rc = 0;
    bench_record r;
    bench_record_init(env, &r, o->layer ? "ffn_layer" : "ffn_infer", M, o->dist[di], o->nnz[ni]);
    const void *wg = b->s.gated ? b->dwg : NULL;
    bench_ffn_ours ours = {plan, M, b->dx, wg, b->dwu, b->dwd, b->dp, b->dy, NULL, o->layer};
    bench_ffn_dense dense = {env,   M,     b->dx, wg,     b->dwu, b->dwdt,
                             b->dg, b->du, b->dh, b->dy2, b->ew,  NULL};
    /* everything sized and resolved before the first call, as a server would (and must before
     * capturing): the workspace for M, AUTO's estimate the data's density until counts of its own
     * calls replace it (decode-size calls count nothing) */
    if (twell_plan_reserve(plan, M, o->nnz[ni]) != TWELL_OK) {
        fprintf(stderr, "twell bench: twell_plan_reserve: %s\n", twell_ctx_errmsg(env->ctx));
        rc = 1;
    }
    r.correct = bench_ffn_check(env, &b->s, plan, M, f, &ours, b->hp, b->hy, &r);
    bench_ffn_variant(plan, r.variant, sizeof r.variant);
    twell_path eager_path = bench_plan_path(plan, TW_TC_DENSE_LAST_PATH);
    bench_check_report(&r);
    int failed;
    if (b->host)
        failed = bench_ffn_host_case(env, &r, &ours, &dense, b->have_dense, b->emit) != 0;
    else if (!b->eager)
        failed = b->graph && bench_ffn_graph_case(env, plan, &r, ours, dense, b->have_dense, b->cs,
                                                  b->hy, b->hy2, eager_path, b->emit) != 0;
    else
        failed = bench_ffn_eager_case(b, &r, &ours, &dense, eager_path) != 0;
    return failed ? 1 : rc;
}

int bench_ffn_run(bench_env *env, void (*emit)(bench_env *, const bench_record *)) {
    const bench_opts *o = env->opts;
    bench_ffn_session b;
    memset(&b, 0, sizeof b);
    b.env = env, b.emit = emit, b.Mmax = bench_max_M(o);
    int rc = bench_ffn_open(&b);
    if (rc != 0)
        goto done;
    for (size_t di = 0; di < o->ndist; di++) {
        for (size_t ni = 0; ni < o->nnnz; ni++) {
            tw_synth_ffn *f = bench_synth(env, &b.s, b.Mmax, b.s.gated, di, ni);
            if (!f) {
                rc = 1;
                goto done;
            }
            if (bench_ffn_upload(&b, f) != 0) {
                tw_synth_destroy(f);
                rc = 1;
                goto done;
            }
            for (size_t mi = 0; mi < o->nM; mi++)
                if (bench_ffn_case(&b, f, o->M[mi], di, ni) != 0)
                    rc = 1;
            tw_synth_destroy(f);
        }
    }
done:
    bench_ffn_close(&b);
    return rc;
}
