/* test_gpu_gate_pack.c — twell_gate_pack on the GPU against the exact CPU reference over a shape
 * sweep (every M, K, N, C value of the issue covered, both dtypes, uniform and skewed data with
 * overflowing row-tiles), for every route the device has (the cuBLASLt GEMM with its packing
 * pass, the fused kernels); poisoned outputs, bytes equal across runs. Exits 77 (skipped) when no
 * CUDA device is usable.
 *
 * Exactness rule (pack_check.h): each sampled row-tile must equal the reference bytes, or differ
 * only where fp32 summation order can legitimately change a rounding (values inside their fp64
 * error bounds, only ambiguous columns may flip); besides, for the SIMT kernel (which sums in the
 * reference's order) stored values may differ by at most 1 unit of the 16-bit type. The worst
 * difference is printed per case.
 * labels: gpu slow */
#include "cpu_ref.h"
#include "cuda_driver.h"
#include "pack_check.h"
#include "synth.h"
#include "twellrt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "tw_gpu.h"
#include "tw_tc.h"

static twell_ctx *gp_ctx;

typedef struct {
    size_t M;
    uint32_t K, N, T, C;
    twell_dtype dtype;
    tw_synth_dist dist;
    double nnz;
    int want_overflow; /* the sampled reference must contain overflowing row-tiles */
} gp_case;

#define BF TWELL_DTYPE_BF16
#define FP TWELL_DTYPE_FP16
#define UNI TW_SYNTH_UNIFORM
#define SKW TW_SYNTH_SKEWED

/* The cross product is pruned so each value of every axis appears, in mixed company; skewed
 * cases use heavy rows (~20% active per tile) and dense first tokens, so C = 8 tiles (31 slots)
 * overflow, as do C = 4 tiles at T = 128 (31 slots); C = 2 needs > 127 of 256 active, hence the
 * dense uniform case. (C = 4, T = 256 has 63 slots: the skewed data there did not reach them on
 * the device run of 2026-11-20, so that case does not demand overflow.) */
static const gp_case gp_cases[] = {
    {1, 64, 256, 256, 8, BF, UNI, 8, 0},        {7, 512, 1024, 256, 4, FP, SKW, 40, 0},
    {128, 2048, 5632, 256, 8, BF, SKW, 29, 1},  {1000, 4096, 8192, 256, 2, BF, UNI, 280, 0},
    {4096, 2048, 5632, 256, 8, FP, UNI, 29, 0}, {4096, 64, 256, 256, 2, BF, SKW, 60, 0},
    {1000, 512, 5632, 256, 8, FP, SKW, 280, 1}, {128, 4096, 1024, 256, 4, FP, UNI, 100, 0},
    {7, 2048, 8192, 256, 8, BF, SKW, 29, 0},    {1, 4096, 5632, 256, 4, FP, SKW, 29, 0},
    {4096, 512, 8192, 256, 4, BF, SKW, 280, 0}, {128, 64, 1024, 256, 2, FP, UNI, 600, 1},
    {1000, 2048, 256, 256, 4, BF, UNI, 29, 0},  {333, 512, 1024, 128, 4, BF, SKW, 50, 1},
};

#define GP_SAMPLE 128
#define GP_POISON_A 0xA5A5A5A5u
#define GP_POISON_B 0x5A5A5A5Au /* value 0x5A5A with column 23130 ≥ N: also never valid */

#define GP_OK(expr) TW_GPU_OK(gp_ctx, expr)

/* Runs the plan once into dp (poisoned with `poison` first) and copies the result back. */
static void gp_run(twell_plan *plan, size_t M, void *dx, void *dw, void *dp, size_t words,
                   uint32_t poison, uint32_t *host) {
    GP_OK(tw_cuda_memset_d32(gp_ctx, dp, poison, words, NULL));
    GP_OK(twell_gate_pack(plan, M, dx, dw, dp, NULL));
    GP_OK(tw_cuda_synchronize(gp_ctx));
    GP_OK(tw_cuda_memcpy_dtoh(gp_ctx, host, dp, words * 4));
    for (size_t i = 0; i < words; i++)
        if (host[i] == poison)
            fail_msg("word %zu (row %zu) still holds the poison %08x: never written", i,
                     i / (words / M), poison);
}

static void gp_check_variant(const gp_case *c, const twell_shape *s, twell_plan *plan,
                             const tw_synth_ffn *f, void *dx, void *dw, void *dp,
                             const size_t *rows, size_t nrows, const uint32_t *ref, int lt) {
    const char *variant = lt ? "cublaslt" : tw_tc_plan_variant(plan);
    size_t M = c->M, words = twell_packed_words(s, M), row_words = s->N / s->C;
    uint32_t *got = malloc(words * 4), *again = malloc(words * 4);
    uint32_t *sub = malloc(nrows * row_words * 4);
    assert_non_null(got);
    assert_non_null(again);
    assert_non_null(sub);
    int modules = tw_tc_plan_int(plan, TW_TC_GP_MODULES);
    gp_run(plan, M, dx, dw, dp, words, GP_POISON_A, got);
    gp_run(plan, M, dx, dw, dp, words, GP_POISON_B, again);
    /* a second use loads nothing new */
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_GP_MODULES), modules);
    if (memcmp(got, again, words * 4) != 0) {
        size_t i = 0;
        while (got[i] == again[i])
            i++;
        fail_msg("run 2 differs from run 1 at word %zu (row %zu): %08x vs %08x", i, i / row_words,
                 got[i], again[i]);
    }
    size_t bad_row = 0;
    uint32_t bad_tile = 0;
    if (tw_packed_find_malformed(s, M, got, &bad_row, &bad_tile))
        fail_msg("malformed row-tile at row %zu tile %u", bad_row, bad_tile);
    for (size_t i = 0; i < nrows; i++)
        memcpy(sub + i * row_words, got + rows[i] * row_words, row_words * 4);
    tw_pack_check r;
    tw_pack_check_rows(s, f->x, tw_synth_pack_weight(f), rows, nrows, ref, sub, &r);
    printf("# M=%-5zu K=%-4u N=%-4u T=%u C=%u %s %-7s nnz=%-4g %-4s rows %zu: tiles %zu exact, "
           "%zu tolerated, %zu bad; flips %zu; worst %u ulp vs ref; max_rel_err %.2e; overflow "
           "tiles %zu\n",
           M, s->K, s->N, s->T, s->C, s->dtype == BF ? "bf16" : "fp16", tw_synth_dist_name(c->dist),
           c->nnz, variant, r.rows, r.tiles_exact, r.tiles_tolerated, r.tiles_bad, r.flips,
           r.worst_ulp, r.max_rel_err, r.overflow_tiles);
    if (r.tiles_bad)
        fail_msg("%zu row-tiles differ beyond fp32 summation order; first: %s", r.tiles_bad,
                 r.first_bad);
    /* Only the SIMT kernel sums in the reference's order; wgmma's order may move near-cancelling
     * values further, within the fp32 bounds already enforced by tiles_bad. */
    if (!strcmp(variant, "simt") && r.worst_ulp > 1)
        fail_msg("a stored value differs from the reference by %u units (> 1)", r.worst_ulp);
    if (c->want_overflow && r.overflow_tiles == 0)
        fail_msg("the case was meant to overflow row-tiles but the sample has none");
    free(got);
    free(again);
    free(sub);
}

static void test_gpu_gate_pack_case(void **state) {
    const gp_case *c = *state;
    twell_shape s;
    twell_shape_init(&s, c->K, c->N);
    s.T = c->T;
    s.C = c->C;
    s.dtype = c->dtype;
    s.gated = 0; /* gate-pack is the same op; non-gated data skips generating a third weight */
    tw_synth_params sp = tw_synth_params_default();
    sp.M = c->M, sp.K = c->K, sp.N = c->N, sp.dtype = c->dtype, sp.gated = 0;
    sp.nnz = c->nnz, sp.dist = c->dist, sp.seed = 1000u + c->M + c->K;
    sp.heavy_frac = 0.1, sp.seq_len = 64; /* several heavy and first-token rows even at M = 128 */
    tw_synth_ffn *f = NULL;
    GP_OK(tw_synth_create(gp_ctx->pool, &sp, &f));
    const uint16_t *w = tw_synth_pack_weight(f);

    /* reference of the sampled rows only: the full reference is too slow at large M·N·K */
    size_t rows[GP_SAMPLE], row_words = s.N / s.C;
    size_t nrows = tw_pack_sample_rows(c->M, GP_SAMPLE, rows);
    uint16_t *xs = malloc(nrows * s.K * 2);
    uint32_t *ref = malloc(nrows * row_words * 4);
    assert_non_null(xs);
    assert_non_null(ref);
    for (size_t i = 0; i < nrows; i++)
        memcpy(xs + i * s.K, f->x + rows[i] * s.K, s.K * 2u);
    GP_OK(tw_gate_pack_ref(gp_ctx->pool, &s, nrows, xs, w, ref));

    void *dx = NULL, *dw = NULL, *dp = NULL;
    size_t words = twell_packed_words(&s, c->M);
    GP_OK(tw_cuda_malloc(gp_ctx, c->M * s.K * 2, &dx));
    GP_OK(tw_cuda_malloc(gp_ctx, (size_t)s.N * s.K * 2, &dw));
    GP_OK(tw_cuda_malloc(gp_ctx, words * 4, &dp));
    GP_OK(tw_cuda_memcpy_htod(gp_ctx, dx, f->x, c->M * s.K * 2));
    GP_OK(tw_cuda_memcpy_htod(gp_ctx, dw, w, (size_t)s.N * s.K * 2));

    twell_plan *plan = NULL;
    GP_OK(twell_plan_create(gp_ctx, &s, &plan));
    /* every route this device has for the shape: the cuBLASLt GEMM and packing pass (at every M
     * here), then without it AUTO's kernel, then SIMT if that was not it */
    if (!tw_tc_plan_int(plan, TW_TC_DENSE_AVAILABLE))
        fail_msg("cuBLASLt is not available: %s", twell_ctx_errmsg(gp_ctx));
    GP_OK(tw_test_control(TW_TC_DENSE_SET_LT_GATE, plan, (size_t)1, (size_t)SIZE_MAX));
    gp_check_variant(c, &s, plan, f, dx, dw, dp, rows, nrows, ref, 1);
    GP_OK(tw_test_control(TW_TC_DENSE_SET_LT_GATE, plan, (size_t)2, (size_t)1));
    gp_check_variant(c, &s, plan, f, dx, dw, dp, rows, nrows, ref, 0);
    if (strcmp(tw_tc_plan_variant(plan), "simt") != 0) {
        GP_OK(tw_test_control(TW_TC_GP_SELECT, plan, "simt"));
        gp_check_variant(c, &s, plan, f, dx, dw, dp, rows, nrows, ref, 0);
    }
    twell_plan_destroy(plan);
    tw_cuda_free(gp_ctx, dx);
    tw_cuda_free(gp_ctx, dw);
    tw_cuda_free(gp_ctx, dp);
    tw_synth_destroy(f);
    free(xs);
    free(ref);
}

/* The op runs on the caller's stream, and M larger than one launch's grid (65535 row blocks)
 * is split correctly: checked with a narrow shape so it stays cheap. */
static void test_gpu_gate_pack_stream_and_huge_m(void **state) {
    (void)state;
    const size_t M = (size_t)65535 * 32 + 4099;
    twell_shape s;
    twell_shape_init(&s, 64, 256);
    s.gated = 0;
    tw_synth_params sp = tw_synth_params_default();
    sp.M = M, sp.K = 64, sp.N = 256, sp.gated = 0, sp.nnz = 12, sp.seed = 77;
    tw_synth_ffn *f = NULL;
    GP_OK(tw_synth_create(gp_ctx->pool, &sp, &f));
    size_t rows[GP_SAMPLE], row_words = s.N / s.C;
    size_t nrows = tw_pack_sample_rows(M, GP_SAMPLE, rows);
    rows[nrows / 2] = (size_t)65535 * 32; /* first row of the second launch */
    rows[nrows / 2 - 1] = (size_t)65535 * 32 - 1;
    uint16_t *xs = malloc(nrows * s.K * 2);
    uint32_t *ref = malloc(nrows * row_words * 4), *sub = malloc(nrows * row_words * 4);
    size_t words = twell_packed_words(&s, M);
    uint32_t *got = malloc(words * 4);
    assert_true(xs && ref && sub && got);
    for (size_t i = 0; i < nrows; i++)
        memcpy(xs + i * s.K, f->x + rows[i] * s.K, s.K * 2u);
    GP_OK(tw_gate_pack_ref(gp_ctx->pool, &s, nrows, xs, f->wu, ref));

    twell_stream stream = NULL;
    GP_OK(tw_cuda_stream_create(gp_ctx, &stream));
    void *dx = NULL, *dw = NULL, *dp = NULL;
    GP_OK(tw_cuda_malloc(gp_ctx, M * s.K * 2, &dx));
    GP_OK(tw_cuda_malloc(gp_ctx, (size_t)s.N * s.K * 2, &dw));
    GP_OK(tw_cuda_malloc(gp_ctx, words * 4, &dp));
    GP_OK(tw_cuda_memcpy_htod(gp_ctx, dx, f->x, M * s.K * 2));
    GP_OK(tw_cuda_memcpy_htod(gp_ctx, dw, f->wu, (size_t)s.N * s.K * 2));
    twell_plan *plan = NULL;
    GP_OK(twell_plan_create(gp_ctx, &s, &plan));
    GP_OK(tw_cuda_memset_d32(gp_ctx, dp, GP_POISON_A, words, stream));
    GP_OK(twell_gate_pack(plan, M, dx, dw, dp, stream));
    GP_OK(tw_cuda_stream_synchronize(gp_ctx, stream));
    GP_OK(tw_cuda_memcpy_dtoh(gp_ctx, got, dp, words * 4));
    for (size_t i = 0; i < words; i++)
        if (got[i] == GP_POISON_A)
            fail_msg("word %zu (row %zu) never written", i, i / row_words);
    for (size_t i = 0; i < nrows; i++)
        memcpy(sub + i * row_words, got + rows[i] * row_words, row_words * 4);
    tw_pack_check r;
    tw_pack_check_rows(&s, f->x, f->wu, rows, nrows, ref, sub, &r);
    printf("# M=%zu on a stream: %zu/%zu tiles exact, %zu tolerated, worst %u ulp\n", M,
           r.tiles_exact, r.tiles, r.tiles_tolerated, r.worst_ulp);
    if (r.tiles_bad)
        fail_msg("%zu bad tiles; first: %s", r.tiles_bad, r.first_bad);
    twell_plan_destroy(plan);
    tw_cuda_stream_destroy(gp_ctx, stream);
    tw_cuda_free(gp_ctx, dx);
    tw_cuda_free(gp_ctx, dw);
    tw_cuda_free(gp_ctx, dp);
    tw_synth_destroy(f);
    free(xs);
    free(ref);
    free(sub);
    free(got);
}

int main(int argc, char **argv) {
    gp_ctx = tw_gpu_open_or_skip("test_gpu_gate_pack");
    printf("# %s\n", twell_ctx_device_name(gp_ctx));
    /* `test_gpu_gate_pack small`: the first two cases only (for compute-sanitizer runs). */
    size_t ncases = sizeof gp_cases / sizeof gp_cases[0];
    int small = argc > 1 && !strcmp(argv[1], "small");
    if (small)
        ncases = 2;
    struct CMUnitTest tests[sizeof gp_cases / sizeof gp_cases[0] + 1];
    static char names[sizeof gp_cases / sizeof gp_cases[0]][96];
    for (size_t i = 0; i < ncases; i++) {
        const gp_case *c = &gp_cases[i];
        snprintf(names[i], sizeof names[i], "test_gpu_gate_pack_M%zu_K%u_N%u_T%u_C%u_%s_%s", c->M,
                 c->K, c->N, c->T, c->C, c->dtype == BF ? "bf16" : "fp16",
                 tw_synth_dist_name(c->dist));
        struct CMUnitTest t = {names[i], test_gpu_gate_pack_case, NULL, NULL, (void *)c};
        tests[i] = t;
    }
    size_t n = ncases;
    if (!small) {
        struct CMUnitTest t = cmocka_unit_test(test_gpu_gate_pack_stream_and_huge_m);
        tests[n++] = t;
    }
    int rc = _cmocka_run_group_tests("test_gpu_gate_pack", tests, n, NULL, NULL);
    twell_ctx_destroy(gp_ctx);
    return rc;
}
