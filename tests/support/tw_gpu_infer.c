/* tw_gpu_infer.c — the GPU inference tests' shared fixture and checks (see tw_gpu_infer.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tw_gpu.h"
#include "tw_gpu_infer.h"

#include "cpu_ref.h"
#include "cuda_driver.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

twell_shape gi_shape(const gi_case *c) {
    twell_shape s;
    twell_shape_init(&s, c->K, c->N);
    s.T = c->T, s.C = c->C, s.dtype = c->dtype, s.gated = c->gated;
    return s;
}

size_t gi_case_tests(struct CMUnitTest *tests, size_t at, char (*names)[GI_NAME],
                     const char *prefix, const gi_case *cases, size_t n, CMUnitTestFunction fn) {
    for (size_t i = 0; i < n; i++) {
        const gi_case *c = &cases[i];
        snprintf(names[i], GI_NAME, "%s_M%zu_K%u_N%u_T%u_C%u_%s_%s_%s", prefix, c->M, c->K, c->N,
                 c->T, c->C, c->dtype == BF ? "bf16" : "fp16", c->gated ? "gated" : "plain",
                 tw_synth_dist_name(c->dist));
        struct CMUnitTest t = {names[i], fn, NULL, NULL, (void *)c};
        tests[at + i] = t;
    }
    return at + n;
}

double gi_tol(twell_dtype dt) { return dt == BF ? 5e-3 : 1e-3; }

tw_synth_ffn *gi_synth(twell_ctx *ctx, const twell_shape *s, size_t M, tw_synth_dist dist,
                       double nnz, uint64_t seed) {
    tw_synth_params p = tw_synth_params_default();
    p.M = M, p.K = s->K, p.N = s->N, p.dtype = s->dtype, p.gated = s->gated;
    p.nnz = nnz, p.dist = dist, p.seed = seed;
    p.heavy_frac = 0.1, p.seq_len = 64; /* heavy and first-token rows even at small M */
    tw_synth_ffn *f = NULL;
    TW_GPU_OK(ctx, tw_synth_create(ctx->pool, &p, &f));
    return f;
}

double gi_all_rows_err(twell_ctx *ctx, const twell_shape *s, size_t M, const tw_synth_ffn *f,
                       const uint32_t *packed, const uint16_t *y, size_t *worst_row) {
    uint16_t *ref = malloc(M * s->K * 2u);
    size_t *rows = malloc(M * sizeof *rows);
    assert_true(ref && rows);
    TW_GPU_OK(ctx, tw_ffn_infer_ref(ctx->pool, s, M, f->x, packed, f->wg, f->wu, f->wd, ref));
    for (size_t i = 0; i < M; i++)
        rows[i] = i;
    double e = tw_gpu_max_row_err(s->dtype, s->K, y, rows, M, ref, worst_row);
    free(ref);
    free(rows);
    return e;
}

void gi_setup(gi_data *d, twell_ctx *ctx, const twell_shape *s, size_t M, tw_synth_dist dist,
              double nnz, uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->s = *s;
    d->M = M;
    d->f = gi_synth(ctx, s, M, dist, nnz, seed);
    size_t xb = M * s->K * 2u, wb = (size_t)s->N * s->K * 2u, pb = twell_packed_bytes(s, M);
    d->dx = tw_gpu_upload(ctx, d->f->x, xb);
    d->dwg = s->gated ? tw_gpu_upload(ctx, d->f->wg, wb) : NULL;
    d->dwu = tw_gpu_upload(ctx, d->f->wu, wb);
    d->dwd = tw_gpu_upload(ctx, d->f->wd, wb);
    TW_GPU_OK(ctx, tw_cuda_malloc(ctx, xb, &d->dy));
    void *dp = NULL;
    TW_GPU_OK(ctx, tw_cuda_malloc(ctx, pb, &dp));
    d->dp = dp;
    d->rows_cap = M + GI_SPARE_ROWS;
    d->packed = malloc(pb);
    d->got = malloc(xb);
    d->rows = malloc(d->rows_cap * sizeof *d->rows);
    assert_true(d->packed && d->got && d->rows);
}

void gi_gate_pack(gi_data *d, twell_plan *plan) {
    const twell_shape *s = &d->s;
    TW_GPU_OK(d->ctx, twell_gate_pack(plan, d->M, d->dx, s->gated ? d->dwg : d->dwu, d->dp, NULL));
    TW_GPU_OK(d->ctx, tw_cuda_synchronize(d->ctx));
    TW_GPU_OK(d->ctx, tw_cuda_memcpy_dtoh(d->ctx, d->packed, d->dp, twell_packed_bytes(s, d->M)));
}

void gi_count(gi_data *d) {
    const twell_shape *s = &d->s;
    size_t row_words = s->N / s->C, W = s->T / s->C, NT = s->N / s->T, NB = (s->N + 255) / 256;
    size_t units = (d->M + 255) / 256 * NB;
    unsigned char *seen = calloc(units, 1);
    assert_non_null(seen);
    d->total = 0, d->ovf_tiles = 0, d->ovf_units = 0;
    for (size_t m = 0; m < d->M; m++)
        for (size_t t = 0; t < NT; t++) {
            uint32_t c = d->packed[m * row_words + t * W];
            d->total += c;
            if (c > W - 1) {
                size_t u = m / 256 * NB + t * s->T / 256;
                d->ovf_tiles++;
                d->ovf_units += !seen[u];
                seen[u] = 1;
            }
        }
    free(seen);
}

void gi_check_rows(gi_data *d, size_t full_m, size_t sample, size_t ovf_rows) {
    const twell_shape *s = &d->s;
    /* tw_gpu_check_rows writes M rows up to full_m, else up to sample + ovf_rows */
    assert_true((d->M <= full_m ? d->M : sample + ovf_rows) <= d->rows_cap);
    d->nrows = tw_gpu_check_rows(s, d->M, d->packed, full_m, sample, ovf_rows, d->rows);
    size_t row_words = s->N / s->C, W = s->T / s->C, NT = s->N / s->T;
    d->ovf_checked = 0;
    for (size_t i = 0; i < d->nrows; i++)
        for (size_t t = 0; t < NT; t++)
            d->ovf_checked += d->packed[d->rows[i] * row_words + t * W] > W - 1;
    gi_reference(d, 0);
}

void gi_reference(gi_data *d, size_t from) {
    const twell_shape *s = &d->s;
    size_t n = d->nrows - from, row_words = s->N / s->C;
    /* + 2, + 4: no zero-byte allocation when there is no row to compute */
    uint16_t *xs = malloc(n * s->K * 2u + 2);
    uint32_t *ps = malloc(n * row_words * 4 + 4);
    uint16_t *ref = realloc(d->ref, d->nrows * s->K * 2u + 2);
    assert_true(xs && ps && ref);
    d->ref = ref;
    for (size_t i = 0; i < n; i++) {
        memcpy(xs + i * s->K, d->f->x + d->rows[from + i] * s->K, s->K * 2u);
        memcpy(ps + i * row_words, d->packed + d->rows[from + i] * row_words, row_words * 4);
    }
    TW_GPU_OK(d->ctx, tw_ffn_infer_ref(d->ctx->pool, s, n, xs, ps, d->f->wg, d->f->wu, d->f->wd,
                                       d->ref + from * s->K));
    free(xs);
    free(ps);
}

void gi_add_row(gi_data *d, size_t m) {
    assert_true(d->nrows < d->rows_cap && m < d->M);
    d->rows[d->nrows++] = m;
}

void gi_run(gi_data *d, twell_plan *plan, uint16_t poison, twell_stream stream) {
    const twell_shape *s = &d->s;
    size_t n = d->M * s->K; /* even: K is a multiple of 16 */
    TW_GPU_OK(d->ctx,
              tw_cuda_memset_d32(d->ctx, d->dy, (uint32_t)poison << 16 | poison, n / 2, stream));
    TW_GPU_OK(d->ctx,
              twell_ffn_infer(plan, d->M, d->dx, d->dp, d->dwg, d->dwu, d->dwd, d->dy, stream));
    TW_GPU_OK(d->ctx, tw_cuda_synchronize(d->ctx));
    TW_GPU_OK(d->ctx, tw_cuda_memcpy_dtoh(d->ctx, d->got, d->dy, n * 2));
    tw_gpu_expect_written(s->dtype, d->got, n, s->K, poison, "y");
}

void gi_expect(const gi_data *d, int width, const char *what) {
    size_t wr = 0;
    double e = tw_gpu_max_row_err(d->s.dtype, d->s.K, d->got, d->rows, d->nrows, d->ref, &wr);
    double tol = gi_tol(d->s.dtype);
    printf("#   %-*s max row-rel err %.3e (row %zu), tolerance %.0e\n", width, what, e, wr, tol);
    if (!(e <= tol))
        fail_msg("%s: row %zu has row-relative error %.3e > %.0e", what, wr, e, tol);
}

uint16_t *gi_keep_y(const gi_data *d) {
    size_t bytes = d->M * d->s.K * 2u;
    uint16_t *y = malloc(bytes);
    assert_non_null(y);
    memcpy(y, d->got, bytes);
    return y;
}

void gi_expect_same_y(const uint16_t *first, const uint16_t *got, size_t n, uint32_t K,
                      const char *prefix) {
    if (memcmp(first, got, n * 2u) == 0)
        return;
    size_t i = 0;
    while (first[i] == got[i])
        i++;
    fail_msg("%srun 2 differs from run 1 at y[%zu][%zu]: %04x vs %04x", prefix, i / K, i % K,
             first[i], got[i]);
}

void gi_free(gi_data *d) {
    void *b[] = {d->dx, d->dwg, d->dwu, d->dwd, d->dy, d->dp};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        tw_cuda_free(d->ctx, b[i]);
    free(d->packed);
    free(d->got);
    free(d->rows);
    free(d->ref);
    tw_synth_destroy(d->f);
}
