/* test_gpu_ffn_dense.c — the dense route of twell_ffn_infer (TWELL_PATH_DENSE: cuBLASLt) and the
 * AUTO choice, on the GPU: gate-pack on the GPU, then the dense route against the CPU reference
 * tw_ffn_infer_ref on the same packed bytes, over a pruned sweep (M ∈ {1, 7, 333, 1000, 4096},
 * K ∈ {64, 512, 2048}, N ∈ {256, 1024, 5632}, T and C varied, both dtypes, gated and non-gated,
 * uniform and skewed data with overflowing row-tiles: the dense route is exact on them, it never
 * reads a gate value from packed). Also: the device counts against the host's, bitwise
 * determinism, outputs and workspace poisoned, row chunks, two streams, AUTO switching both ways
 * within one call of the data changing with no host wait in any call, and the errors of DENSE
 * where it cannot run. The gate cases (fd_gate_cases: M ∈ {1, 7, 64, 255, 1000, 4096}, gated and
 * non-gated, both dtypes, K and N multiples of 256 or not): the gate reused from the cuBLASLt
 * gate-pack of the same call, and computed by the dense route itself after another gate-pack
 * kernel, each against the reference and bitwise equal to each other. Exits 77 without a device.
 *
 * Tolerance: largest row-relative L2 error ‖y − y_ref‖₂ / ‖y_ref‖₂ over the checked rows ≤ 5e-3
 * (bf16) or 1e-3 (fp16), as for the sparse path: the dense path rounds h to dtype before the down
 * GEMM and u before the product (the reference keeps both in fp32), which adds about 2u/√3
 * (u = 2⁻⁸ bf16, 2⁻¹¹ fp16) to the output rounding; the worst error is printed per case.
 * `test_gpu_ffn_dense small`: the first cases only (compute-sanitizer runs).
 * labels: gpu slow */
#include "cuda_dense.h"
#include "cuda_driver.h"
#include "ffn_policy.h"
#include "synth.h"
#include "twellrt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tw_gpu.h"
#include "tw_gpu_infer.h"
#include "tw_tc.h"

static twell_ctx *fd_ctx;

/* Each value of every axis appears in mixed company; the first three are small (sanitizer). Skewed
 * data has 10% heavy rows (~20% of a tile active) and a dense first token every 64 rows; C = 2 at
 * N = 256 with 200 active per row overflows every row-tile (every unit recomputes its gate). */
static const gi_case fd_cases[] = {
    {7, 64, 256, 256, 8, BF, 1, UNI, 20, 0},        {7, 64, 256, 64, 2, FP, 0, SKW, 20, 0},
    {333, 512, 1024, 128, 4, BF, 1, SKW, 50, 1},    {1, 512, 5632, 256, 8, FP, 1, UNI, 110, 0},
    {1000, 2048, 5632, 256, 8, BF, 1, UNI, 110, 0}, {4096, 2048, 5632, 256, 8, BF, 1, SKW, 280, 1},
    {4096, 512, 1024, 256, 8, FP, 0, SKW, 100, 1},  {1000, 64, 5632, 256, 2, BF, 0, UNI, 600, 0},
    {7, 2048, 1024, 128, 8, FP, 1, SKW, 100, 1},    {4096, 64, 256, 64, 4, FP, 1, UNI, 60, 1},
    {1000, 2048, 256, 256, 8, FP, 0, UNI, 29, 0},   {4096, 512, 5632, 256, 8, FP, 0, UNI, 56, 0},
    {1, 2048, 256, 64, 8, BF, 0, SKW, 10, 0},       {1000, 512, 256, 256, 2, BF, 1, UNI, 200, 1},
};

/* The gate cases: every M of the brief once or twice, each (gated, dtype) pair more than once,
 * overflowing row-tiles in the skewed ones, K and N not multiples of 256 in the last two. The
 * first three run under the sanitizers (`small`). */
static const gi_case fd_gate_cases[] = {
    {1, 2048, 5632, 256, 8, BF, 1, UNI, 29, 0},    {1, 512, 1024, 256, 8, FP, 0, UNI, 29, 0},
    {7, 576, 576, 64, 4, BF, 1, UNI, 150, 1},      {7, 2048, 5632, 256, 8, FP, 0, SKW, 56, 0},
    {7, 64, 256, 64, 2, BF, 1, SKW, 20, 0},        {64, 2048, 5632, 256, 8, BF, 1, SKW, 110, 1},
    {255, 512, 1024, 128, 4, FP, 1, SKW, 50, 1},   {255, 1024, 2048, 256, 8, BF, 0, SKW, 60, 1},
    {1000, 2048, 5632, 256, 8, FP, 1, UNI, 56, 0}, {4096, 1024, 2048, 256, 8, BF, 0, SKW, 100, 1},
    {4096, 512, 1024, 256, 2, FP, 1, SKW, 100, 0}, {255, 320, 320, 64, 4, FP, 1, UNI, 20, 0},
    {1000, 576, 320, 64, 4, FP, 0, UNI, 80, 1},
};

#define FD_SAMPLE 96   /* evenly spread rows checked when M is large */
#define FD_OVF_ROWS 16 /* plus up to this many rows with overflowing row-tiles */
#define FD_FULL_M 1000 /* up to this M every row is checked */
#define FD_POISON_A 0xFFFFu
#define FD_POISON_B 0x7FC1u /* a NaN in both bf16 and fp16 */

#define FD_OK(expr) TW_GPU_OK(fd_ctx, expr)

/* Synthetic data, uploaded; gate-pack on the GPU with `plan`; host counts; the checked rows (all
 * of them up to FD_FULL_M, else a spread sample plus overflowing rows) and their reference. */
static void fd_prepare(gi_data *d, const twell_shape *s, size_t M, tw_synth_dist dist, double nnz,
                       uint64_t seed, twell_plan *plan) {
    gi_setup(d, fd_ctx, s, M, dist, nnz, seed);
    gi_gate_pack(d, plan);
    gi_count(d);
    gi_check_rows(d, FD_FULL_M, FD_SAMPLE, FD_OVF_ROWS);
}

static void fd_expect(const gi_data *d, const char *path) { gi_expect(d, 12, path); }

static void fd_expect_path(twell_plan *plan, twell_path want, const char *when) {
    twell_path got = tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH);
    if (got != want)
        fail_msg("%s: the call ran path %d, expected %d (estimate %.1f, threshold %.1f)", when,
                 (int)got, (int)want, tw_tc_plan_double(plan, TW_TC_DENSE_ESTIMATE),
                 tw_tc_plan_threshold(plan, 4096));
}

/* A plan for the shape; the dense route (cuBLASLt) must be available on a GPU machine. */
static twell_plan *fd_plan(const twell_shape *s) {
    twell_plan *plan = NULL;
    FD_OK(twell_plan_create(fd_ctx, s, &plan));
    if (!tw_tc_plan_int(plan, TW_TC_DENSE_AVAILABLE))
        fail_msg("the dense path is not available on %s for K=%u N=%u: %s", fd_ctx->cuda->arch,
                 s->K, s->N, twell_ctx_errmsg(fd_ctx));
    /* AUTO's choice between dense and tiled and the counts of its sparse calls are tested here:
     * the small-batch path (which counts nothing) stays out (test_gpu_ffn_small covers it) */
    FD_OK(tw_test_control(TW_TC_SMALL_SET_MODE, plan, "off"));
    return plan;
}

/* Case c's plan and its data, the seed
 * seed0 + M + K + N. */
static twell_plan *fd_case_open(const gi_case *c, uint64_t seed0, gi_data *d) {
    twell_shape s = gi_shape(c);
    twell_plan *plan = fd_plan(&s);
    fd_prepare(d, &s, c->M, c->dist, c->nnz, seed0 + c->M + c->K + c->N, plan);
    return plan;
}

static void test_gpu_ffn_dense_case(void **state) {
    const gi_case *c = *state;
    gi_data d;
    twell_plan *plan = fd_case_open(c, 3000u, &d);
    const twell_shape s = d.s;
    printf("# M=%-5zu K=%-4u N=%-4u T=%u C=%u %s %s %-7s nnz=%-4g: %zu rows checked; %.1f active "
           "per row, %zu overflowing row-tiles in %llu units\n",
           c->M, s.K, s.N, s.T, s.C, s.dtype == BF ? "bf16" : "fp16",
           s.gated ? "gated" : "non-gated", tw_synth_dist_name(c->dist), c->nnz, d.nrows,
           (double)d.total / (double)c->M, d.ovf_tiles, (unsigned long long)d.ovf_units);
    if (c->want_overflow && d.ovf_units == 0)
        fail_msg("the case was meant to overflow row-tiles but has none");

    /* DENSE: y and the workspace poisoned (the second run finds an allocated workspace) */
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    gi_run(&d, plan, FD_POISON_A, NULL);
    fd_expect_path(plan, TWELL_PATH_DENSE, "DENSE");
    fd_expect(&d, "dense");
    uint64_t cnt[2];
    FD_OK(tw_test_control(TW_TC_DENSE_COUNTS, plan, cnt));
    printf("#   device counts: %llu active, %llu overflowing row-tiles; workspace %.1f MB\n",
           (unsigned long long)cnt[0], (unsigned long long)cnt[1],
           (double)tw_tc_plan_size(plan, TW_TC_DENSE_WORKSPACE_BYTES) / 1e6);
    assert_int_equal(cnt[0], d.total);
    assert_int_equal(cnt[1], d.ovf_tiles);
    uint16_t *first = gi_keep_y(&d);
    FD_OK(tw_test_control(TW_TC_DENSE_POISON, plan, (unsigned)FD_POISON_B));
    gi_run(&d, plan, FD_POISON_B, NULL);
    gi_expect_same_y(first, d.got, c->M * s.K, s.K, "dense ");

    /* AUTO from the counts of the DENSE calls: dense under a low threshold, sparse above */
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_AUTO));
    FD_OK(tw_test_control(TW_TC_DENSE_SET_MIN_ROWS, plan, (size_t)1));
    FD_OK(tw_test_control(TW_TC_DENSE_SET_THRESHOLD, plan, 0.25));
    gi_run(&d, plan, FD_POISON_A, NULL);
    fd_expect_path(plan, TWELL_PATH_DENSE, "AUTO, threshold 0.25");
    assert_memory_equal(first, d.got, c->M * s.K * 2u);
    FD_OK(tw_test_control(TW_TC_DENSE_SET_THRESHOLD, plan, 1e9));
    gi_run(&d, plan, FD_POISON_B, NULL);
    fd_expect_path(plan, TWELL_PATH_SPARSE, "AUTO, threshold 1e9");
    fd_expect(&d, "auto sparse");
    /* the sparse call's counts come from its own pre-pass (no counting kernel): exact too */
    FD_OK(tw_test_control(TW_TC_DENSE_COUNTS, plan, cnt));
    printf("#   AUTO sparse counts: %llu active, %llu overflowing row-tiles\n",
           (unsigned long long)cnt[0], (unsigned long long)cnt[1]);
    assert_int_equal(cnt[0], d.total);
    /* the tiled pre-pass stores 0 there; the small path's counts (rule 0) the exact number */
    if (cnt[1] != 0)
        assert_int_equal(cnt[1], d.ovf_tiles);
    free(first);
    gi_free(&d);
    twell_plan_destroy(plan);
}

/* Dense calls so far whose gate was reused [0] and computed [1]. */
static void fd_gate_counts(twell_plan *plan, unsigned long out[2]) {
    out[0] = out[1] = 0;
    FD_OK(tw_test_control(TW_TC_DENSE_GATE_REUSED, plan, out));
}

static void test_gpu_ffn_dense_gate_case(void **state) {
    const gi_case *c = *state;
    gi_data d;
    twell_plan *plan = fd_case_open(c, 5000u, &d);
    const twell_shape s = d.s;
    printf("# M=%-5zu K=%-4u N=%-4u T=%u C=%u %s %s %-7s nnz=%-4g: %zu rows checked; %zu "
           "overflowing row-tiles\n",
           c->M, s.K, s.N, s.T, s.C, s.dtype == BF ? "bf16" : "fp16",
           s.gated ? "gated" : "non-gated", tw_synth_dist_name(c->dist), c->nnz, d.nrows,
           d.ovf_tiles);
    if (c->want_overflow && d.ovf_tiles == 0)
        fail_msg("the case was meant to overflow row-tiles but has none");
    unsigned long g0[2], g1[2];
    /* a DENSE plan's gate-pack runs through cuBLASLt and leaves its gate to the dense call */
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    gi_gate_pack(&d, plan);
    fd_gate_counts(plan, g0);
    gi_run(&d, plan, FD_POISON_A, NULL);
    fd_gate_counts(plan, g1);
    fd_expect_path(plan, TWELL_PATH_DENSE, "gate reused");
    if (g1[0] != g0[0] + 1 || g1[1] != g0[1])
        fail_msg("the dense call did not reuse the gate-pack's gate (reused %lu -> %lu, computed "
                 "%lu -> %lu)",
                 g0[0], g1[0], g0[1], g1[1]);
    fd_expect(&d, "gate reused");
    uint16_t *first = gi_keep_y(&d);
    /* the gate-pack through the tiled kernels (SPARSE while it runs, the route forced off): the
     * dense call computes the gate itself, with the same GEMM: the same bits */
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_SPARSE));
    FD_OK(tw_test_control(TW_TC_DENSE_SET_LT_GATE, plan, (size_t)2, (size_t)1));
    gi_gate_pack(&d, plan);
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    FD_OK(tw_test_control(TW_TC_DENSE_POISON, plan, (unsigned)FD_POISON_B));
    gi_run(&d, plan, FD_POISON_B, NULL);
    fd_gate_counts(plan, g0);
    if (g0[1] != g1[1] + 1)
        fail_msg("the dense call after another gate-pack kernel did not compute its gate");
    fd_expect(&d, "gate computed");
    gi_expect_same_y(first, d.got, c->M * s.K, s.K, "computed gate vs reused: ");
    /* the same gate-pack arguments on another stream: not reused (the buffer is the default
     * stream's), still right */
    FD_OK(tw_test_control(TW_TC_DENSE_SET_LT_GATE, plan, (size_t)0, (size_t)0));
    gi_gate_pack(&d, plan);
    twell_stream stream = NULL;
    FD_OK(tw_cuda_stream_create(fd_ctx, &stream));
    gi_run(&d, plan, FD_POISON_A, stream);
    fd_gate_counts(plan, g1);
    if (g1[0] != g0[0] || g1[1] != g0[1] + 1)
        fail_msg("a dense call on another stream reused the gate-pack's gate");
    gi_expect_same_y(first, d.got, c->M * s.K, s.K, "other stream: ");
    tw_cuda_stream_destroy(fd_ctx, stream);
    free(first);
    gi_free(&d);
    twell_plan_destroy(plan);
}

/* AUTO with its default rule: sparse data, then data above the threshold, then sparse again. The
 * path follows the data one call later each way, and no call waits for the device. */
static void test_gpu_ffn_dense_auto_switch(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 512, 2048);
    twell_plan *plan = fd_plan(&s);
    const size_t M = 4096;
    gi_data lo, hi;
    fd_prepare(&lo, &s, M, UNI, 6, 21, plan);
    fd_prepare(&hi, &s, M, UNI, 100, 22, plan);
    double thr = tw_tc_plan_threshold(plan, M);
    printf("#   threshold %.2f active per row (default rule); data %.1f and %.1f per row\n", thr,
           (double)lo.total / (double)M, (double)hi.total / (double)M);
    assert_true((double)lo.total / (double)M < TW_POLICY_STAY * thr);
    assert_true((double)hi.total / (double)M > thr);
    /* call 1: no history, sparse (its first use measures the sparse workspace: may wait) */
    gi_run(&lo, plan, FD_POISON_A, NULL);
    fd_expect_path(plan, TWELL_PATH_SPARSE, "call 1");
    int probes = tw_tc_plan_int(plan, TW_TC_FFN_PROBES);
    struct {
        gi_data *d;
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
        gi_data *d = seq[i].d;
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
    gi_run(&hi, plan, FD_POISON_B, NULL);
    fd_expect_path(plan, TWELL_PATH_SPARSE, "SPARSE on dense data");
    fd_expect(&hi, "forced sparse");
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    gi_run(&lo, plan, FD_POISON_B, NULL);
    fd_expect_path(plan, TWELL_PATH_DENSE, "DENSE on sparse data");
    fd_expect(&lo, "forced dense");
    gi_free(&lo);
    gi_free(&hi);
    twell_plan_destroy(plan);
}

/* More rows than one chunk of H (N = 65536: 4096 rows per chunk): the chunk boundary rows are
 * checked. */
static void test_gpu_ffn_dense_chunks(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 64, 65536);
    twell_plan *plan = fd_plan(&s);
    const size_t M = 4096 + 777;
    gi_data d;
    fd_prepare(&d, &s, M, UNI, 100, 31, plan);
    size_t extra[] = {4095, 4096, 4097};
    size_t from = d.nrows;
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        gi_add_row(&d, extra[i]);
    gi_reference(&d, from);
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    gi_run(&d, plan, FD_POISON_A, NULL);
    printf("#   M=%zu N=65536: workspace %.1f MB (u and g hold one chunk each)\n", M,
           (double)tw_tc_plan_size(plan, TW_TC_DENSE_WORKSPACE_BYTES) / 1e6);
    assert_true(tw_tc_plan_size(plan, TW_TC_DENSE_WORKSPACE_BYTES) < (size_t)(1100u << 20));
    fd_expect(&d, "chunks");
    uint64_t cnt[2];
    FD_OK(tw_test_control(TW_TC_DENSE_COUNTS, plan, cnt));
    assert_int_equal(cnt[0], d.total);
    gi_free(&d);
    twell_plan_destroy(plan);
}

/* Back to back on a created stream and the default stream with no host wait between: the second
 * call waits for the first on the device (they share the workspace); both outputs equal a lone
 * run. Then a larger M grows the workspace (one counted wait). */
static void test_gpu_ffn_dense_streams(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 512, 1024);
    s.gated = 0;
    twell_plan *plan = fd_plan(&s);
    gi_data d;
    fd_prepare(&d, &s, 3000, SKW, 40, 41, plan);
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    twell_stream stream = NULL;
    FD_OK(tw_cuda_stream_create(fd_ctx, &stream));
    gi_run(&d, plan, FD_POISON_A, stream);
    fd_expect(&d, "stream");
    size_t bytes = d.M * s.K * 2u;
    uint16_t *first = gi_keep_y(&d);
    void *dy2 = NULL;
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
    gi_free(&d);
    twell_plan_destroy(plan);
}

/* DENSE where it cannot run: tensors off 16-byte alignment (AUTO still works, sparse). Nothing is
 * written on error. Then K = 80, which DENSE runs. */
static void test_gpu_ffn_dense_errors(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 256, 1024);
    twell_plan *plan = fd_plan(&s);
    gi_data d;
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
    gi_run(&d, plan, FD_POISON_A, NULL);
    fd_expect_path(plan, TWELL_PATH_SPARSE, "AUTO, unaligned x");
    fd_expect(&d, "unaligned");
    d.dx = keep;
    tw_cuda_free(fd_ctx, bx);
    gi_free(&d);
    twell_plan_destroy(plan);

    /* K = 80: no multiple of 64, which the hand-written GEMMs needed; cuBLASLt runs it */
    twell_shape s80;
    twell_shape_init(&s80, 80, 512);
    plan = fd_plan(&s80);
    fd_prepare(&d, &s80, 100, SKW, 29, 52, plan);
    FD_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    gi_run(&d, plan, FD_POISON_A, NULL);
    fd_expect_path(plan, TWELL_PATH_DENSE, "DENSE, K=80");
    fd_expect(&d, "K=80 dense");
    gi_free(&d);
    twell_plan_destroy(plan);
}

int main(int argc, char **argv) {
    fd_ctx = tw_gpu_open_or_skip("test_gpu_ffn_dense");
    printf("# %s\n", twell_ctx_device_name(fd_ctx));
    size_t ncases = sizeof fd_cases / sizeof fd_cases[0];
    size_t ngate = sizeof fd_gate_cases / sizeof fd_gate_cases[0];
    int small = argc > 1 && !strcmp(argv[1], "small");
    if (small)
        ncases = 3, ngate = 3;
    struct CMUnitTest tests[sizeof fd_cases / sizeof fd_cases[0] +
                            sizeof fd_gate_cases / sizeof fd_gate_cases[0] + 4];
    static char names[sizeof fd_cases / sizeof fd_cases[0]][GI_NAME];
    static char gate_names[sizeof fd_gate_cases / sizeof fd_gate_cases[0]][GI_NAME];
    size_t n = gi_case_tests(tests, 0, names, "test_gpu_ffn_dense", fd_cases, ncases,
                             test_gpu_ffn_dense_case);
    n = gi_case_tests(tests, n, gate_names, "test_gpu_ffn_dense_gate", fd_gate_cases, ngate,
                      test_gpu_ffn_dense_gate_case);
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
