/* test_gpu_ffn_dense.c — the dense path of twell_ffn_infer (TWELL_PATH_DENSE: gemm_sm90 and
 * dense_aux) and the AUTO choice, on the GPU: gate-pack on the GPU, then the dense path against the
 * CPU reference tw_ffn_infer_ref on the same packed bytes, over a pruned sweep (M ∈ {1, 7, 333,
 * 1000, 4096}, K ∈ {64, 512, 2048}, N ∈ {256, 1024, 5632}, T and C varied, both dtypes, gated and
 * non-gated, uniform and skewed data with overflowing row-tiles, so units whose gate is recomputed
 * on tensor cores). Also: the device counts against the host's, bitwise determinism, outputs and
 * workspace poisoned, row chunks, two streams, AUTO switching both ways within one call of the data
 * changing with no host wait in any call, and the errors of DENSE where it cannot run. The
 * split-K variants (fd_split_cases: M ∈ {1, 7, 64, 255, 1000, 4096}, gated and non-gated, both
 * dtypes): the policy's split, forced unsplit, forced uneven and maximal splits (clamped to the
 * k-blocks, down to one k-block per slice) and the legacy down GEMM (Wd transposed every call),
 * each against the reference and bitwise repeatable with the workspace poisoned between runs.
 * Exits 77 without a device.
 *
 * Tolerance: largest row-relative L2 error ‖y − y_ref‖₂ / ‖y_ref‖₂ over the checked rows ≤ 5e-3
 * (bf16) or 1e-3 (fp16), as for the sparse path: the dense path rounds h to dtype before the down
 * GEMM (the reference keeps h in fp32), which adds about u/√3 (u = 2⁻⁸ bf16, 2⁻¹¹ fp16) to the
 * output rounding; the worst error is printed per case.
 * `test_gpu_ffn_dense small`: the first cases only (compute-sanitizer runs).
 * labels: gpu slow */
#include "cpu_ref.h"
#include "cuda_dense.h"
#include "cuda_driver.h"
#include "ffn_policy.h"
#include "half.h"
#include "pack_check.h"
#include "synth.h"
#include "twellrt.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tw_gpu.h"
#include "tw_tc.h"

static twell_ctx *fd_ctx;

typedef struct {
    size_t M;
    uint32_t K, N, T, C;
    twell_dtype dtype;
    int gated;
    tw_synth_dist dist;
    double nnz;
    int want_overflow; /* the data must contain overflowing row-tiles (recomputed units) */
} fd_case;

#define BF TWELL_DTYPE_BF16
#define FP TWELL_DTYPE_FP16
#define UNI TW_SYNTH_UNIFORM
#define SKW TW_SYNTH_SKEWED

/* Each value of every axis appears in mixed company; the first three are small (sanitizer). Skewed
 * data has 10% heavy rows (~20% of a tile active) and a dense first token every 64 rows; C = 2 at
 * N = 256 with 200 active per row overflows every row-tile (every unit recomputes its gate). */
static const fd_case fd_cases[] = {
    {7, 64, 256, 256, 8, BF, 1, UNI, 20, 0},        {7, 64, 256, 64, 2, FP, 0, SKW, 20, 0},
    {333, 512, 1024, 128, 4, BF, 1, SKW, 50, 1},    {1, 512, 5632, 256, 8, FP, 1, UNI, 110, 0},
    {1000, 2048, 5632, 256, 8, BF, 1, UNI, 110, 0}, {4096, 2048, 5632, 256, 8, BF, 1, SKW, 280, 1},
    {4096, 512, 1024, 256, 8, FP, 0, SKW, 100, 1},  {1000, 64, 5632, 256, 2, BF, 0, UNI, 600, 0},
    {7, 2048, 1024, 128, 8, FP, 1, SKW, 100, 1},    {4096, 64, 256, 64, 4, FP, 1, UNI, 60, 1},
    {1000, 2048, 256, 256, 8, FP, 0, UNI, 29, 0},   {4096, 512, 5632, 256, 8, FP, 0, UNI, 56, 0},
    {1, 2048, 256, 64, 8, BF, 0, SKW, 10, 0},       {1000, 512, 256, 256, 2, BF, 1, UNI, 200, 1},
};

/* The split-K cases: every M of the brief once or twice, each (gated, dtype) pair more than once,
 * overflowing row-tiles (recomputed gates: the gated reduction's plane 1, the relu reduction's
 * flagged units) in the skewed ones, K = 64 (one k-block: the up GEMM cannot split) and odd
 * split counts over k-blocks they do not divide. */
static const fd_case fd_split_cases[] = {
    {1, 2048, 5632, 256, 8, BF, 1, UNI, 29, 0},     {1, 512, 1024, 256, 8, FP, 0, UNI, 29, 0},
    {7, 2048, 5632, 256, 8, FP, 0, SKW, 56, 0},     {7, 64, 256, 64, 2, BF, 1, SKW, 20, 0},
    {64, 2048, 5632, 256, 8, BF, 1, SKW, 110, 1},   {255, 512, 1024, 128, 4, FP, 1, SKW, 50, 1},
    {255, 1024, 2048, 256, 8, BF, 0, SKW, 60, 1},   {1000, 2048, 5632, 256, 8, FP, 1, UNI, 56, 0},
    {4096, 1024, 2048, 256, 8, BF, 0, SKW, 100, 1}, {4096, 512, 1024, 256, 2, FP, 1, SKW, 100, 1},
};

#define FD_SAMPLE 96   /* evenly spread rows checked when M is large */
#define FD_OVF_ROWS 16 /* plus up to this many rows with overflowing row-tiles */
#define FD_FULL_M 1000 /* up to this M every row is checked */
#define FD_EXTRA 8     /* rows a test adds (chunk boundaries) */
#define FD_POISON_A 0xFFFFu
#define FD_POISON_B 0x7FC1u /* a NaN in both bf16 and fp16 */

#define FD_OK(expr) TW_GPU_OK(fd_ctx, expr)

static double fd_tol(twell_dtype dt) { return dt == BF ? 5e-3 : 1e-3; }

static int fd_sm90(void) { return !strcmp(fd_ctx->cuda->arch, "sm_90a"); }

/* Everything one case needs on both sides. */
typedef struct {
    twell_shape s;
    size_t M;
    tw_synth_ffn *f;
    void *dx, *dwg, *dwu, *dwd, *dy;
    uint32_t *dp;
    uint32_t *packed; /* host copy of the GPU's packed buffer */
    size_t rows[FD_SAMPLE + FD_OVF_ROWS + FD_FULL_M + FD_EXTRA];
    size_t nrows;
    uint64_t total;     /* Σ counts over all rows */
    uint64_t ovf_units; /* distinct units (256 rows x 256 columns) with an overflowing row-tile */
    size_t ovf_tiles;   /* overflowing row-tiles in all rows */
    uint16_t *ref;      /* [nrows, K] reference rows */
    uint16_t *got;      /* [M, K] host copy of y */
} fd_data;

/* The reference rows of d->rows[from..nrows). */
static void fd_reference(fd_data *d, size_t from) {
    const twell_shape *s = &d->s;
    size_t n = d->nrows - from, row_words = s->N / s->C;
    uint16_t *xs = malloc(n * s->K * 2u + 2);
    uint32_t *ps = malloc(n * row_words * 4 + 4);
    uint16_t *ref = realloc(d->ref, d->nrows * s->K * 2u + 2);
    assert_true(xs && ps && ref);
    d->ref = ref;
    for (size_t i = 0; i < n; i++) {
        memcpy(xs + i * s->K, d->f->x + d->rows[from + i] * s->K, s->K * 2u);
        memcpy(ps + i * row_words, d->packed + d->rows[from + i] * row_words, row_words * 4);
    }
    FD_OK(tw_ffn_infer_ref(fd_ctx->pool, s, n, xs, ps, d->f->wg, d->f->wu, d->f->wd,
                           d->ref + from * s->K));
    free(xs);
    free(ps);
}

/* Synthetic data, uploaded; gate-pack on the GPU with `plan`; host counts; the checked rows (all
 * of them up to FD_FULL_M, else a spread sample plus overflowing rows) and their reference. */
static void fd_prepare(fd_data *d, const twell_shape *s, size_t M, tw_synth_dist dist, double nnz,
                       uint64_t seed, twell_plan *plan) {
    memset(d, 0, sizeof *d);
    d->s = *s;
    d->M = M;
    tw_synth_params sp = tw_synth_params_default();
    sp.M = M, sp.K = s->K, sp.N = s->N, sp.dtype = s->dtype, sp.gated = s->gated;
    sp.nnz = nnz, sp.dist = dist, sp.seed = seed;
    sp.heavy_frac = 0.1, sp.seq_len = 64;
    FD_OK(tw_synth_create(fd_ctx->pool, &sp, &d->f));
    size_t xb = M * s->K * 2u, wb = (size_t)s->N * s->K * 2u, words = twell_packed_words(s, M);
    d->dx = tw_gpu_upload(fd_ctx, d->f->x, xb);
    d->dwg = s->gated ? tw_gpu_upload(fd_ctx, d->f->wg, wb) : NULL;
    d->dwu = tw_gpu_upload(fd_ctx, d->f->wu, wb);
    d->dwd = tw_gpu_upload(fd_ctx, d->f->wd, wb);
    FD_OK(tw_cuda_malloc(fd_ctx, xb, &d->dy));
    void *dp = NULL;
    FD_OK(tw_cuda_malloc(fd_ctx, words * 4, &dp));
    d->dp = dp;
    FD_OK(twell_gate_pack(plan, M, d->dx, s->gated ? d->dwg : d->dwu, d->dp, NULL));
    FD_OK(tw_cuda_synchronize(fd_ctx));
    d->packed = malloc(words * 4);
    d->got = malloc(xb);
    assert_true(d->packed && d->got);
    FD_OK(tw_cuda_memcpy_dtoh(fd_ctx, d->packed, d->dp, words * 4));

    size_t row_words = s->N / s->C, W = s->T / s->C, NT = s->N / s->T, NB = (s->N + 255) / 256;
    size_t units = (M + 255) / 256 * NB;
    unsigned char *seen = calloc(units, 1);
    assert_non_null(seen);
    for (size_t m = 0; m < M; m++)
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
    d->nrows = tw_gpu_check_rows(s, M, d->packed, FD_FULL_M, FD_SAMPLE, FD_OVF_ROWS, d->rows);
    fd_reference(d, 0);
}

static void fd_release(fd_data *d) {
    tw_cuda_free(fd_ctx, d->dx);
    tw_cuda_free(fd_ctx, d->dwg);
    tw_cuda_free(fd_ctx, d->dwu);
    tw_cuda_free(fd_ctx, d->dwd);
    tw_cuda_free(fd_ctx, d->dy);
    tw_cuda_free(fd_ctx, d->dp);
    free(d->packed);
    free(d->got);
    free(d->ref);
    tw_synth_destroy(d->f);
}

/* Largest row-relative L2 error of the checked rows of d->got; *worst_row gets its row. */
static double fd_max_err(const fd_data *d, size_t *worst_row) {
    return tw_gpu_max_row_err(d->s.dtype, d->s.K, d->got, d->rows, d->nrows, d->ref, worst_row);
}

/* Poisons y, one call on `stream` (the host wait counter must not move during the call itself),
 * then waits and copies y to d->got: every element written and finite. */
static void fd_run(fd_data *d, twell_plan *plan, uint16_t poison, twell_stream stream) {
    const twell_shape *s = &d->s;
    size_t n = d->M * s->K;
    FD_OK(tw_cuda_memset_d32(fd_ctx, d->dy, (uint32_t)poison << 16 | poison, n / 2, stream));
    FD_OK(twell_ffn_infer(plan, d->M, d->dx, d->dp, d->dwg, d->dwu, d->dwd, d->dy, stream));
    FD_OK(tw_cuda_synchronize(fd_ctx));
    FD_OK(tw_cuda_memcpy_dtoh(fd_ctx, d->got, d->dy, n * 2));
    tw_gpu_expect_written(s->dtype, d->got, n, s->K, poison, "y");
}

static void fd_expect(const fd_data *d, const char *path) {
    size_t wr;
    double e = fd_max_err(d, &wr), tol = fd_tol(d->s.dtype);
    printf("#   %-12s max row-rel err %.3e (row %zu), tolerance %.0e\n", path, e, wr, tol);
    if (!(e <= tol))
        fail_msg("%s: row %zu has row-relative error %.3e > %.0e", path, wr, e, tol);
}

static void fd_expect_path(twell_plan *plan, twell_path want, const char *when) {
    twell_path got = tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH);
    if (got != want)
        fail_msg("%s: the call ran path %d, expected %d (estimate %.1f, threshold %.1f)", when,
                 (int)got, (int)want, tw_tc_plan_double(plan, TW_TC_DENSE_ESTIMATE),
                 tw_tc_plan_threshold(plan, 4096));
}

/* A plan for the shape, skipping the test where the dense kernels cannot exist (not sm_90a). */
static twell_plan *fd_plan(const twell_shape *s) {
    twell_plan *plan = NULL;
    FD_OK(twell_plan_create(fd_ctx, s, &plan));
    if (!fd_sm90()) {
        printf("#   %s: the dense path needs sm_90a; skipped\n", fd_ctx->cuda->arch);
        twell_plan_destroy(plan);
        return NULL;
    }
    if (!tw_tc_plan_int(plan, TW_TC_DENSE_AVAILABLE))
        fail_msg("the dense path is not available on %s for K=%u N=%u: %s", fd_ctx->cuda->arch,
                 s->K, s->N, twell_ctx_errmsg(fd_ctx));
    /* AUTO's choice between dense and tiled and the counts of its sparse calls are tested here:
     * the small-batch path (which counts nothing) stays out (test_gpu_ffn_small covers it) */
    FD_OK(tw_test_control(TW_TC_SMALL_SET_MODE, plan, "off"));
    return plan;
}

static void test_gpu_ffn_dense_case(void **state) {
    const fd_case *c = *state;
    twell_shape s = twell_shape_default(c->K, c->N);
    s.T = c->T, s.C = c->C, s.dtype = c->dtype, s.gated = c->gated;
    twell_plan *plan = fd_plan(&s);
    if (!plan)
        skip();
    fd_data d;
    fd_prepare(&d, &s, c->M, c->dist, c->nnz, 3000u + c->M + c->K + c->N, plan);
    printf("# M=%-5zu K=%-4u N=%-4u T=%u C=%u %s %s %-7s nnz=%-4g: %zu rows checked; %.1f active "
           "per row, %zu overflowing row-tiles in %llu units\n",
           c->M, s.K, s.N, s.T, s.C, s.dtype == BF ? "bf16" : "fp16",
           s.gated ? "gated" : "non-gated", tw_synth_dist_name(c->dist), c->nnz, d.nrows,
           (double)d.total / (double)c->M, d.ovf_tiles, (unsigned long long)d.ovf_units);
    if (c->want_overflow && d.ovf_units == 0)
        fail_msg("the case was meant to overflow row-tiles but has none");

    /* DENSE: y and the workspace poisoned (the second run finds an allocated workspace) */
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    fd_run(&d, plan, FD_POISON_A, NULL);
    fd_expect_path(plan, TWELL_PATH_DENSE, "DENSE");
    fd_expect(&d, "dense");
    uint64_t cnt[2];
    FD_OK(tw_test_control(TW_TC_DENSE_COUNTS, plan, cnt));
    printf("#   device counts: %llu active, %llu units recomputed; workspace %.1f MB\n",
           (unsigned long long)cnt[0], (unsigned long long)cnt[1],
           (double)tw_tc_plan_size(plan, TW_TC_DENSE_WORKSPACE_BYTES) / 1e6);
    assert_int_equal(cnt[0], d.total);
    assert_int_equal(cnt[1], d.ovf_units);
    uint16_t *first = malloc(c->M * s.K * 2u);
    assert_non_null(first);
    memcpy(first, d.got, c->M * s.K * 2u);
    FD_OK(tw_test_control(TW_TC_DENSE_POISON, plan, (unsigned)FD_POISON_B));
    fd_run(&d, plan, FD_POISON_B, NULL);
    if (memcmp(first, d.got, c->M * s.K * 2u) != 0) {
        size_t i = 0;
        while (first[i] == d.got[i])
            i++;
        fail_msg("dense run 2 differs from run 1 at y[%zu][%zu]: %04x vs %04x", i / s.K, i % s.K,
                 first[i], d.got[i]);
    }

    /* AUTO from the counts of the DENSE calls: dense under a low threshold, sparse above */
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_AUTO));
    FD_OK(tw_test_control(TW_TC_DENSE_SET_MIN_ROWS, plan, (size_t)1));
    FD_OK(tw_test_control(TW_TC_DENSE_SET_THRESHOLD, plan, 0.25));
    fd_run(&d, plan, FD_POISON_A, NULL);
    fd_expect_path(plan, TWELL_PATH_DENSE, "AUTO, threshold 0.25");
    assert_memory_equal(first, d.got, c->M * s.K * 2u);
    FD_OK(tw_test_control(TW_TC_DENSE_SET_THRESHOLD, plan, 1e9));
    fd_run(&d, plan, FD_POISON_B, NULL);
    fd_expect_path(plan, TWELL_PATH_SPARSE, "AUTO, threshold 1e9");
    fd_expect(&d, "auto sparse");
    /* the sparse call's counts come from its own pre-pass (no counting kernel): exact too */
    FD_OK(tw_test_control(TW_TC_DENSE_COUNTS, plan, cnt));
    printf("#   AUTO sparse counts: %llu active, %llu units\n", (unsigned long long)cnt[0],
           (unsigned long long)cnt[1]);
    assert_int_equal(cnt[0], d.total);
    assert_int_equal(cnt[1], 0);
    free(first);
    fd_release(&d);
    twell_plan_destroy(plan);
}

/* One split-K variant of a case: force (up, down) (0, 0: the policy's; legacy: the earlier down
 * GEMM), two runs with the workspace and y poisoned differently, each against the reference,
 * bitwise equal to each other; the split the call reports equals the expected one. Returns the
 * output in d->got. */
static void fd_split_variant(fd_data *d, twell_plan *plan, const char *what, unsigned up,
                             unsigned down, int legacy, const unsigned want[2]) {
    const twell_shape *s = &d->s;
    size_t bytes = d->M * s->K * 2u;
    FD_OK(tw_test_control(TW_TC_DENSE_SET_LEGACY, plan, legacy));
    FD_OK(tw_test_control(TW_TC_DENSE_SET_SPLIT, plan, up, down));
    fd_run(d, plan, FD_POISON_A, NULL);
    fd_expect_path(plan, TWELL_PATH_DENSE, what);
    unsigned sp[2] = {0, 0};
    FD_OK(tw_test_control(TW_TC_DENSE_LAST_SPLIT, plan, sp));
    printf("#   M=%zu %-24s split up %u, down %u; workspace %.1f MB\n", d->M, what, sp[0], sp[1],
           (double)tw_tc_plan_size(plan, TW_TC_DENSE_WORKSPACE_BYTES) / 1e6);
    if (sp[0] != want[0] || sp[1] != want[1])
        fail_msg("%s: split up %u, down %u; expected %u, %u", what, sp[0], sp[1], want[0], want[1]);
    fd_expect(d, what);
    uint16_t *first = malloc(bytes);
    assert_non_null(first);
    memcpy(first, d->got, bytes);
    FD_OK(tw_test_control(TW_TC_DENSE_POISON, plan, (unsigned)FD_POISON_B));
    fd_run(d, plan, FD_POISON_B, NULL);
    if (memcmp(first, d->got, bytes) != 0) {
        size_t i = 0;
        while (first[i] == d->got[i])
            i++;
        fail_msg("%s: run 2 differs from run 1 at y[%zu][%zu]: %04x vs %04x", what, i / s->K,
                 i % s->K, first[i], d->got[i]);
    }
    free(first);
}

static unsigned fd_clamp(unsigned v, unsigned kblocks) { return v > kblocks ? kblocks : v; }

static void test_gpu_ffn_dense_split_case(void **state) {
    const fd_case *c = *state;
    twell_shape s = twell_shape_default(c->K, c->N);
    s.T = c->T, s.C = c->C, s.dtype = c->dtype, s.gated = c->gated;
    twell_plan *plan = fd_plan(&s);
    if (!plan)
        skip();
    fd_data d;
    fd_prepare(&d, &s, c->M, c->dist, c->nnz, 5000u + c->M + c->K + c->N, plan);
    printf("# M=%-5zu K=%-4u N=%-4u T=%u C=%u %s %s %-7s nnz=%-4g: %zu rows checked; %zu "
           "overflowing row-tiles in %llu units\n",
           c->M, s.K, s.N, s.T, s.C, s.dtype == BF ? "bf16" : "fp16",
           s.gated ? "gated" : "non-gated", tw_synth_dist_name(c->dist), c->nnz, d.nrows,
           d.ovf_tiles, (unsigned long long)d.ovf_units);
    if (c->want_overflow && d.ovf_units == 0)
        fail_msg("the case was meant to overflow row-tiles but has none");
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    const unsigned kb[2] = {s.K / 64u, s.N / 64u};
    const unsigned clusters = (unsigned)fd_ctx->cuda->sm_count / 2u;
    const size_t mp = (c->M + 255) / 256;
    unsigned want[2] = {tw_ffn_dense_split(mp * ((s.N + 255) / 256), kb[0], clusters),
                        tw_ffn_dense_split(mp * ((s.K + 255) / 256), kb[1], clusters)};
    size_t bytes = c->M * s.K * 2u;
    uint16_t *unsplit = malloc(bytes);
    assert_non_null(unsplit);

    fd_split_variant(&d, plan, "policy", 0, 0, 0, want);
    want[0] = want[1] = 1;
    fd_split_variant(&d, plan, "unsplit (TB = 1)", 1, 1, 0, want);
    memcpy(unsplit, d.got, bytes);
    want[0] = fd_clamp(3, kb[0]), want[1] = fd_clamp(5, kb[1]);
    fd_split_variant(&d, plan, "forced 3 / 5", 3, 5, 0, want);
    want[0] = fd_clamp(16, kb[0]), want[1] = fd_clamp(16, kb[1]);
    fd_split_variant(&d, plan, "forced 16 / 16", 16, 16, 0, want);
    want[0] = want[1] = 1;
    fd_split_variant(&d, plan, "legacy (Wd transposed)", 3, 5, 1, want);
    /* Not asserted (the hardware's order inside a k16 step is not documented): whether reading
     * Wd MN-major gives the same bytes as the transposed copy. */
    size_t diff = 0;
    for (size_t i = 0; i < c->M * s.K; i++)
        diff += unsplit[i] != d.got[i];
    printf("#   M=%zu legacy vs TB = 1, both unsplit: %zu of %zu values differ\n", c->M, diff,
           c->M * s.K);
    FD_OK(tw_test_control(TW_TC_DENSE_SET_LEGACY, plan, 0));
    FD_OK(tw_test_control(TW_TC_DENSE_SET_SPLIT, plan, 0u, 0u));
    free(unsplit);
    fd_release(&d);
    twell_plan_destroy(plan);
}

/* AUTO with its default rule: sparse data, then data above the threshold, then sparse again. The
 * path follows the data one call later each way, and no call waits for the device. */
static void test_gpu_ffn_dense_auto_switch(void **state) {
    (void)state;
    twell_shape s = twell_shape_default(512, 2048);
    twell_plan *plan = fd_plan(&s);
    if (!plan)
        skip();
    const size_t M = 4096;
    fd_data lo, hi;
    fd_prepare(&lo, &s, M, UNI, 6, 21, plan);
    fd_prepare(&hi, &s, M, UNI, 100, 22, plan);
    double thr = tw_tc_plan_threshold(plan, M);
    printf("#   threshold %.2f active per row (default rule); data %.1f and %.1f per row\n", thr,
           (double)lo.total / (double)M, (double)hi.total / (double)M);
    assert_true((double)lo.total / (double)M < TW_POLICY_STAY * thr);
    assert_true((double)hi.total / (double)M > thr);
    /* call 1: no history, sparse (its first use measures the sparse workspace: may wait) */
    fd_run(&lo, plan, FD_POISON_A, NULL);
    fd_expect_path(plan, TWELL_PATH_SPARSE, "call 1");
    int probes = tw_tc_plan_int(plan, TW_TC_FFN_PROBES);
    struct {
        fd_data *d;
        twell_path want;
        const char *what;
    } seq[] = {
        {&lo, TWELL_PATH_SPARSE, "call 2 (sparse data)"},
        {&hi, TWELL_PATH_SPARSE, "call 3 (dense data; decided from call 2)"},
        {&hi, TWELL_PATH_DENSE, "call 4 (decided from call 3)"},
        {&hi, TWELL_PATH_DENSE, "call 5"},
        {&lo, TWELL_PATH_DENSE, "call 6 (sparse data; decided from call 5)"},
        {&lo, TWELL_PATH_SPARSE, "call 7 (decided from call 6)"},
    };
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        fd_data *d = seq[i].d;
        size_t n = M * s.K;
        FD_OK(tw_cuda_memset_d32(fd_ctx, d->dy, 0xFFFFFFFFu, n / 2, NULL));
        FD_OK(tw_cuda_synchronize(fd_ctx));
        unsigned long waits = tw_tc_host_waits();
        FD_OK(twell_ffn_infer(plan, M, d->dx, d->dp, d->dwg, d->dwu, d->dwd, d->dy, NULL));
        unsigned long waited = tw_tc_host_waits() - waits;
        FD_OK(tw_cuda_synchronize(fd_ctx));
        FD_OK(tw_cuda_memcpy_dtoh(fd_ctx, d->got, d->dy, n * 2));
        printf("#   %-42s path %s, estimate %.1f, host waits %lu\n", seq[i].what,
               tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH) == TWELL_PATH_DENSE ? "dense"
                                                                                : "sparse",
               tw_tc_plan_double(plan, TW_TC_DENSE_ESTIMATE), waited);
        fd_expect_path(plan, seq[i].want, seq[i].what);
        if (waited != 0)
            fail_msg("%s waited for the device %lu times", seq[i].what, waited);
        fd_expect(d, seq[i].want == TWELL_PATH_DENSE ? "auto dense" : "auto sparse");
    }
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_FFN_PROBES), probes);
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_DENSE_GROW_SYNCS), 0);
    assert_int_equal(tw_tc_plan_calls(plan, TWELL_PATH_DENSE), 3);
    /* the caller's choice wins over the counts */
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_SPARSE));
    fd_run(&hi, plan, FD_POISON_B, NULL);
    fd_expect_path(plan, TWELL_PATH_SPARSE, "SPARSE on dense data");
    fd_expect(&hi, "forced sparse");
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    fd_run(&lo, plan, FD_POISON_B, NULL);
    fd_expect_path(plan, TWELL_PATH_DENSE, "DENSE on sparse data");
    fd_expect(&lo, "forced dense");
    fd_release(&lo);
    fd_release(&hi);
    twell_plan_destroy(plan);
}

/* More rows than one chunk of H (N = 65536: 4096 rows per chunk): the chunk boundary rows are
 * checked. */
static void test_gpu_ffn_dense_chunks(void **state) {
    (void)state;
    twell_shape s = twell_shape_default(64, 65536);
    twell_plan *plan = fd_plan(&s);
    if (!plan)
        skip();
    const size_t M = 4096 + 777;
    fd_data d;
    fd_prepare(&d, &s, M, UNI, 100, 31, plan);
    size_t extra[] = {4095, 4096, 4097};
    size_t from = d.nrows;
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        d.rows[d.nrows++] = extra[i];
    fd_reference(&d, from);
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    fd_run(&d, plan, FD_POISON_A, NULL);
    printf("#   M=%zu N=65536: workspace %.1f MB (H holds one chunk)\n", M,
           (double)tw_tc_plan_size(plan, TW_TC_DENSE_WORKSPACE_BYTES) / 1e6);
    assert_true(tw_tc_plan_size(plan, TW_TC_DENSE_WORKSPACE_BYTES) < (size_t)(600u << 20));
    fd_expect(&d, "chunks");
    uint64_t cnt[2];
    FD_OK(tw_test_control(TW_TC_DENSE_COUNTS, plan, cnt));
    assert_int_equal(cnt[0], d.total);
    fd_release(&d);
    twell_plan_destroy(plan);
}

/* Back to back on a created stream and the default stream with no host wait between: the second
 * call waits for the first on the device (they share the workspace); both outputs equal a lone
 * run. Then a larger M grows the workspace (one counted wait). */
static void test_gpu_ffn_dense_streams(void **state) {
    (void)state;
    twell_shape s = twell_shape_default(512, 1024);
    s.gated = 0;
    twell_plan *plan = fd_plan(&s);
    if (!plan)
        skip();
    fd_data d;
    fd_prepare(&d, &s, 3000, SKW, 40, 41, plan);
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    twell_stream stream = NULL;
    FD_OK(tw_cuda_stream_create(fd_ctx, &stream));
    fd_run(&d, plan, FD_POISON_A, stream);
    fd_expect(&d, "stream");
    size_t bytes = d.M * s.K * 2u;
    uint16_t *first = malloc(bytes);
    void *dy2 = NULL;
    assert_non_null(first);
    memcpy(first, d.got, bytes);
    FD_OK(tw_cuda_malloc(fd_ctx, bytes, &dy2));
    FD_OK(tw_cuda_memset_d32(fd_ctx, dy2, 0xFFFFFFFFu, bytes / 4, NULL));
    FD_OK(tw_cuda_memset_d32(fd_ctx, d.dy, 0xFFFFFFFFu, bytes / 4, NULL));
    FD_OK(tw_cuda_synchronize(fd_ctx));
    unsigned long waits = tw_tc_host_waits();
    FD_OK(twell_ffn_infer(plan, d.M, d.dx, d.dp, d.dwg, d.dwu, d.dwd, dy2, stream));
    FD_OK(twell_ffn_infer(plan, d.M, d.dx, d.dp, d.dwg, d.dwu, d.dwd, d.dy, NULL));
    assert_int_equal(tw_tc_host_waits() - waits, 0);
    FD_OK(tw_cuda_synchronize(fd_ctx));
    FD_OK(tw_cuda_memcpy_dtoh(fd_ctx, d.got, dy2, bytes));
    assert_memory_equal(first, d.got, bytes);
    FD_OK(tw_cuda_memcpy_dtoh(fd_ctx, d.got, d.dy, bytes));
    assert_memory_equal(first, d.got, bytes);
    printf("#   two streams back to back: both outputs equal the first run\n");
    /* fewer rows reuse the workspace */
    FD_OK(twell_ffn_infer(plan, 100, d.dx, d.dp, d.dwg, d.dwu, d.dwd, d.dy, NULL));
    FD_OK(tw_cuda_synchronize(fd_ctx));
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_DENSE_GROW_SYNCS), 0);
    tw_cuda_free(fd_ctx, dy2);
    free(first);
    tw_cuda_stream_destroy(fd_ctx, stream);
    fd_release(&d);
    twell_plan_destroy(plan);
}

/* DENSE where it cannot run: tensors off 16-byte alignment, K not a multiple of 64 (the plan has
 * no dense kernels: AUTO still works, sparse). Nothing is written on error. */
static void test_gpu_ffn_dense_errors(void **state) {
    (void)state;
    twell_shape s = twell_shape_default(256, 1024);
    twell_plan *plan = fd_plan(&s);
    if (!plan)
        skip();
    fd_data d;
    fd_prepare(&d, &s, 200, SKW, 20, 51, plan);
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    size_t xb = 200 * s.K * 2u;
    void *bx = NULL;
    FD_OK(tw_cuda_malloc(fd_ctx, xb + 16, &bx));
    FD_OK(tw_cuda_memcpy_htod(fd_ctx, (char *)bx + 2, d.f->x, xb));
    FD_OK(tw_cuda_memset_d32(fd_ctx, d.dy, 0x12341234u, 200 * s.K / 2, NULL));
    twell_status st =
        twell_ffn_infer(plan, 200, (char *)bx + 2, d.dp, d.dwg, d.dwu, d.dwd, d.dy, NULL);
    assert_int_equal(st, TWELL_ERR_UNSUPPORTED);
    printf("#   DENSE, x 2 bytes off: %s\n", twell_ctx_errmsg(fd_ctx));
    assert_non_null(strstr(twell_ctx_errmsg(fd_ctx), "aligned"));
    FD_OK(tw_cuda_synchronize(fd_ctx));
    FD_OK(tw_cuda_memcpy_dtoh(fd_ctx, d.got, d.dy, xb));
    for (size_t i = 0; i < 200 * (size_t)s.K; i++)
        if (d.got[i] != 0x1234u)
            fail_msg("y[%zu] was written by a call that failed", i);
    /* AUTO on the same unaligned x runs sparse (its portable kernel) */
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_AUTO));
    void *keep = d.dx;
    d.dx = (char *)bx + 2;
    fd_run(&d, plan, FD_POISON_A, NULL);
    fd_expect_path(plan, TWELL_PATH_SPARSE, "AUTO, unaligned x");
    fd_expect(&d, "unaligned");
    d.dx = keep;
    tw_cuda_free(fd_ctx, bx);
    fd_release(&d);
    twell_plan_destroy(plan);

    twell_shape s80 = twell_shape_default(80, 512);
    FD_OK(twell_plan_create(fd_ctx, &s80, &plan));
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_DENSE_AVAILABLE), 0);
    fd_prepare(&d, &s80, 100, SKW, 29, 52, plan);
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    st = twell_ffn_infer(plan, 100, d.dx, d.dp, d.dwg, d.dwu, d.dwd, d.dy, NULL);
    assert_int_equal(st, TWELL_ERR_UNSUPPORTED);
    printf("#   DENSE, K=80: %s\n", twell_ctx_errmsg(fd_ctx));
    assert_non_null(strstr(twell_ctx_errmsg(fd_ctx), "TWELL_PATH_DENSE"));
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_AUTO));
    fd_run(&d, plan, FD_POISON_B, NULL);
    fd_expect(&d, "K=80 auto");
    fd_release(&d);
    twell_plan_destroy(plan);
}

int main(int argc, char **argv) {
    fd_ctx = tw_gpu_open_or_skip("test_gpu_ffn_dense");
    printf("# %s\n", twell_ctx_device_name(fd_ctx));
    size_t ncases = sizeof fd_cases / sizeof fd_cases[0];
    size_t nsplit = sizeof fd_split_cases / sizeof fd_split_cases[0];
    int small = argc > 1 && !strcmp(argv[1], "small");
    if (small)
        ncases = 3, nsplit = 2;
    struct CMUnitTest tests[sizeof fd_cases / sizeof fd_cases[0] +
                            sizeof fd_split_cases / sizeof fd_split_cases[0] + 4];
    static char names[sizeof fd_cases / sizeof fd_cases[0]][112];
    static char split_names[sizeof fd_split_cases / sizeof fd_split_cases[0]][120];
    for (size_t i = 0; i < ncases; i++) {
        const fd_case *c = &fd_cases[i];
        snprintf(names[i], sizeof names[i], "test_gpu_ffn_dense_M%zu_K%u_N%u_T%u_C%u_%s_%s_%s",
                 c->M, c->K, c->N, c->T, c->C, c->dtype == BF ? "bf16" : "fp16",
                 c->gated ? "gated" : "plain", tw_synth_dist_name(c->dist));
        struct CMUnitTest t = {names[i], test_gpu_ffn_dense_case, NULL, NULL, (void *)c};
        tests[i] = t;
    }
    size_t n = ncases;
    for (size_t i = 0; i < nsplit; i++) {
        const fd_case *c = &fd_split_cases[i];
        snprintf(split_names[i], sizeof split_names[i],
                 "test_gpu_ffn_dense_split_M%zu_K%u_N%u_T%u_C%u_%s_%s_%s", c->M, c->K, c->N, c->T,
                 c->C, c->dtype == BF ? "bf16" : "fp16", c->gated ? "gated" : "plain",
                 tw_synth_dist_name(c->dist));
        struct CMUnitTest t = {split_names[i], test_gpu_ffn_dense_split_case, NULL, NULL,
                               (void *)c};
        tests[n++] = t;
    }
    struct CMUnitTest t1 = cmocka_unit_test(test_gpu_ffn_dense_errors);
    tests[n++] = t1;
    if (!small) {
        struct CMUnitTest t2 = cmocka_unit_test(test_gpu_ffn_dense_auto_switch);
        struct CMUnitTest t3 = cmocka_unit_test(test_gpu_ffn_dense_streams);
        struct CMUnitTest t4 = cmocka_unit_test(test_gpu_ffn_dense_chunks);
        tests[n++] = t2;
        tests[n++] = t3;
        tests[n++] = t4;
    }
    int rc = _cmocka_run_group_tests("test_gpu_ffn_dense", tests, n, NULL, NULL);
    twell_ctx_destroy(fd_ctx);
    return rc;
}
