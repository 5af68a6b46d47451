/*
 * bench_gate_pack.c — the gate_pack benchmark: twell_gate_pack against the dense cuBLAS GEMM that
 * computes the same [M, N] = x · Wᵀ (no relu, no packing: the floor a fused epilogue must meet).
 * Data per (distribution, nnz) is generated once at the largest M and uploaded once; smaller M
 * use its first rows (rows depend only on their index, so a prefix is the smaller data set).
 *
 * Check: ~check_rows rows (first, last-tile boundaries, ragged end, evenly spread) of our output
 * compared to the CPU reference with the rule of runtime/ops/gate_pack/tiled/pack_check.h;
 * max_rel_err = the largest row-wise ‖v − z‖₂ / ‖z‖₂ over our stored entries, z the exact fp64
 * pre-activation (bf16 rounding alone allows up to 2⁻⁸ ≈ 3.9e-3 per entry). The whole output is
 * also scanned for unwritten or malformed words.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    twell_plan *plan;
    size_t M;
    const void *x, *w;
    uint32_t *packed;
} bench_gp_ours;

typedef struct {
    bench_env *env;
    size_t M;
    const void *x, *w;
    void *c;
    twell_status failed; /* a cuBLAS error is reported once, as TWELL_ERR_CUDA */
} bench_gp_base;

static twell_status bench_gp_run_ours(void *arg) {
    bench_gp_ours *a = arg;
    return twell_gate_pack(a->plan, a->M, a->x, a->w, a->packed, NULL);
}

static twell_status bench_gp_run_base(void *arg) {
    bench_gp_base *a = arg;
    char err[256];
    const bench_opts *o = a->env->opts;
    if (bench_cublas_gemm_nt(a->env->ctx, a->env->cublas, o->dtype, a->M, o->N, o->K, a->x, a->w,
                             a->c, err, sizeof err) != 0) {
        fprintf(stderr, "twell bench: %s\n", err);
        return TWELL_ERR_CUDA;
    }
    return TWELL_OK;
}

/* Correctness of one M: poisoned output, one run, full scan, sampled reference comparison. */
static int bench_gp_check(bench_env *env, const twell_shape *s, twell_plan *plan, size_t M,
                          const tw_synth_ffn *f, void *dx, void *dw, void *dp, uint32_t *host,
                          bench_record *r) {
    twell_ctx *ctx = env->ctx;
    const uint16_t *w = tw_synth_pack_weight(f);
    size_t words = twell_packed_words(s, M), row_words = s->N / s->C;
    if (tw_cuda_memset_d32(ctx, dp, 0xA5A5A5A5u, words, NULL) != TWELL_OK ||
        twell_gate_pack(plan, M, dx, dw, dp, NULL) != TWELL_OK ||
        tw_cuda_synchronize(ctx) != TWELL_OK ||
        tw_cuda_memcpy_dtoh(ctx, host, dp, words * 4) != TWELL_OK) {
        snprintf(r->check_note, sizeof r->check_note, "run failed: %s", twell_ctx_errmsg(ctx));
        return 0;
    }
    for (size_t i = 0; i < words; i++)
        if (host[i] == 0xA5A5A5A5u) {
            snprintf(r->check_note, sizeof r->check_note, "word %zu (row %zu) never written", i,
                     i / row_words);
            return 0;
        }
    size_t bad_row = 0;
    uint32_t bad_tile = 0;
    if (tw_packed_find_malformed(s, M, host, &bad_row, &bad_tile)) {
        snprintf(r->check_note, sizeof r->check_note, "malformed row-tile at row %zu tile %u",
                 bad_row, bad_tile);
        return 0;
    }
    tw_synth_stats stats;
    tw_synth_packed_stats(s, M, host, &stats);
    r->nnz_mean = stats.mean_row;

    size_t want = env->opts->check_rows ? env->opts->check_rows : 1;
    size_t *rows = malloc(want * sizeof *rows);
    size_t n = rows ? tw_pack_sample_rows(M, want, rows) : 0;
    uint16_t *xs = malloc(n * s->K * 2 + 1);
    uint32_t *ref = malloc(n * row_words * 4 + 1), *sub = malloc(n * row_words * 4 + 1);
    int ok = 0;
    if (!rows || !xs || !ref || !sub) {
        snprintf(r->check_note, sizeof r->check_note, "out of host memory for the check");
    } else {
        for (size_t i = 0; i < n; i++) {
            memcpy(xs + i * s->K, f->x + rows[i] * s->K, s->K * 2u);
            memcpy(sub + i * row_words, host + rows[i] * row_words, row_words * 4);
        }
        if (tw_gate_pack_ref(ctx->pool, s, n, xs, w, ref) != TWELL_OK) {
            snprintf(r->check_note, sizeof r->check_note, "CPU reference out of memory");
        } else {
            tw_pack_check c;
            tw_pack_check_rows(s, f->x, w, rows, n, ref, sub, &c);
            r->checked_rows = c.rows;
            r->max_rel_err = c.max_rel_err;
            /* The 1-unit bound holds only for the SIMT kernel, which sums in the reference's
             * order; tensor-core kernels sum in another order, so near-cancelling values may move
             * further while staying inside the fp32 bounds that tiles_bad checks. */
            ok = c.tiles_bad == 0 &&
                 (strcmp(bench_plan_variant(plan), "simt") != 0 ||
                  bench_plan_int(plan, TW_TC_SMALL_LAST_GATE) || c.worst_ulp <= 1);
            if (c.tiles_bad)
                snprintf(r->check_note, sizeof r->check_note, "%zu bad row-tiles; first: %s",
                         c.tiles_bad, c.first_bad);
            else
                snprintf(r->check_note, sizeof r->check_note,
                         "%zu/%zu row-tiles exact, %zu within fp32 order, worst %u ulp, %zu "
                         "overflowing (all M: %zu)",
                         c.tiles_exact, c.tiles, c.tiles_tolerated, c.worst_ulp, c.overflow_tiles,
                         stats.overflow_tiles);
        }
    }
    free(rows);
    free(xs);
    free(ref);
    free(sub);
    return ok;
}

int bench_gate_pack_run(bench_env *env, void (*emit)(bench_env *, const bench_record *)) {
    const bench_opts *o = env->opts;
    twell_ctx *ctx = env->ctx;
    int rc = 0;
    size_t Mmax = bench_max_M(o);
    twell_shape s;
    twell_shape_init(&s, o->K, o->N);
    s.T = o->T, s.C = o->C, s.dtype = o->dtype;
    s.gated = 0; /* the packing weight is generated as Wu: the same op, one weight fewer to make */

    twell_plan *plan = NULL;
    if (bench_plan_open(env, &s, &plan) != 0)
        return 1;

    size_t words_max = twell_packed_words(&s, Mmax);
    void *dx = NULL, *dw = NULL, *dp = NULL, *dc = NULL;
    uint32_t *host = malloc(words_max * 4);
    if (!host || tw_cuda_malloc(ctx, Mmax * s.K * 2, &dx) != TWELL_OK ||
        tw_cuda_malloc(ctx, (size_t)s.N * s.K * 2, &dw) != TWELL_OK ||
        tw_cuda_malloc(ctx, words_max * 4, &dp) != TWELL_OK ||
        (env->cublas && tw_cuda_malloc(ctx, Mmax * s.N * 2, &dc) != TWELL_OK)) {
        fprintf(stderr, "twell bench: allocation: %s\n", host ? twell_ctx_errmsg(ctx) : "host");
        rc = 1;
        goto done;
    }

    for (size_t di = 0; di < o->ndist; di++) {
        for (size_t ni = 0; ni < o->nnnz; ni++) {
            tw_synth_ffn *f = bench_synth(env, &s, Mmax, 0, di, ni);
            if (!f) {
                rc = 1;
                goto done;
            }
            if (tw_cuda_memcpy_htod(ctx, dx, f->x, Mmax * s.K * 2) != TWELL_OK ||
                tw_cuda_memcpy_htod(ctx, dw, tw_synth_pack_weight(f), (size_t)s.N * s.K * 2) !=
                    TWELL_OK) {
                fprintf(stderr, "twell bench: upload: %s\n", twell_ctx_errmsg(ctx));
                tw_synth_destroy(f);
                rc = 1;
                goto done;
            }
            for (size_t mi = 0; mi < o->nM; mi++) {
                size_t M = o->M[mi];
                bench_record r;
                bench_record_init(env, &r, "gate_pack", M, o->dist[di], o->nnz[ni]);
                r.correct = bench_gp_check(env, &s, plan, M, f, dx, dw, dp, host, &r);
                bench_gate_name(plan, r.variant, sizeof r.variant);
                bench_check_report(&r);

                bench_gp_ours ours = {plan, M, dx, dw, dp};
                bench_gp_base base = {env, M, dx, dw, dc, TWELL_OK};
                bench_fn fns[2] = {bench_gp_run_ours, bench_gp_run_base};
                void *args[2] = {&ours, &base};
                double med[2] = {0, 0}, mn[2] = {0, 0}, mx[2] = {0, 0};
                size_t nf = env->cublas ? 2 : 1;
                (void)bench_time_case(env, &r, nf, fns, args, med, mn, mx);
                /* the route of the last call (AUTO picks it by M and the dense estimate) */
                snprintf(r.path, sizeof r.path, "%s",
                         bench_plan_int(plan, TW_TC_DENSE_LAST_GATE_LT) ? "cublaslt"
                         : bench_plan_int(plan, TW_TC_SMALL_LAST_GATE)  ? "small"
                                                                        : "tiled");
                bench_record_times(env, &r, "cublas_gemm", med, mn, mx, 0, 1, nf == 2);
                emit(env, &r);
                if (!r.correct)
                    rc = 1;
            }
            tw_synth_destroy(f);
        }
    }
done:
    free(host);
    tw_cuda_free(ctx, dx);
    tw_cuda_free(ctx, dw);
    tw_cuda_free(ctx, dp);
    tw_cuda_free(ctx, dc);
    twell_plan_destroy(plan);
    return rc;
}
