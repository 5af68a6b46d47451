/* test_gpu_ffn_small.c — the small-batch path (runtime/ops/ffn/small/cuda_small.c: gate_pack_small,
 * then ffn_small's fused kernel, its row kernel or its up and down kernels) forced on, against the
 * CPU reference, over M = 1, 2, 7, 8, 9, 16, 33, 64, 255, 1000 (the path takes up to TW_SMALL_MAX_M
 * = 1024 rows), every C, T = 64/128/256, both dtypes, gated and non-gated, uniform and skewed data
 * with overflowing row-tiles; the gate-pack kernel forced by name (TW_TC_SMALL_SET_GATE: g2u2 with
 * each WN, one to 63 token blocks), gate-pack alone, every row against the reference; and the AUTO
 * rule that picks the path.
 *
 * Per case: packed and y are poisoned before each run and so is the path's workspace (its
 * scratch needs no initialisation; its arrival counters must be back at 0 after every call, which
 * the second run relies on); the second run goes on a created stream; both runs give the same
 * bytes (packed and y). The packed output must be well formed and match tw_gate_pack_ref on
 * sampled rows up to what fp32 summation order allows (pack_check.h); y must match
 * tw_ffn_infer_ref on the GPU's packed bytes within the tolerance of test_gpu_ffn_infer (row-
 * relative L2 error ≤ 5e-3 bf16, 1e-3 fp16: the output rounding level; both sides round y once,
 * the rest is fp32 summation order and, in overflowing row-tiles, the recomputed gate). The worst
 * error is printed per case. Exits 77 without a device.
 * `test_gpu_ffn_small small`: the first cases only (compute-sanitizer runs).
 * labels: gpu */
#include "cpu_ref.h"
#include "cuda_driver.h"
#include "cuda_small.h"
#include "ffn_policy.h"
#include "pack_check.h"
#include "small_gate.h"
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

static twell_ctx *fs_ctx;

/* Eight shapes (every plan compiles all of its op's kernels, so cases share them), each value of
 * every axis in mixed company; up to TW_SMALL_FUSED_M rows run the one-kernel inference, more the
 * up and down kernels, both with overflowing row-tiles, gated and not. Skewed data has 10% heavy
 * rows (~20% of a tile active) and a dense first token every 64 rows: C = 8 tiles (31 slots of
 * 256, 7 of 64) overflow; C = 2 (127 slots of 256, 63 of 128) needs the dense uniform cases.
 * K = 96 leaves most lanes of a 256-column slice idle and 3 k32 blocks for 8 warps; N = 11008 is
 * the 7B-class width (43 tiles). The first four cases are small (sanitizer runs). */
static const gi_case fs_cases[] = {
    {7, 96, 512, 256, 4, FP, 1, SKW, 20, 0},       {16, 256, 1024, 64, 8, FP, 1, SKW, 29, 1},
    {9, 512, 1024, 128, 2, BF, 0, UNI, 600, 1},    {33, 512, 1024, 64, 8, FP, 1, SKW, 29, 1},
    {2, 512, 1024, 128, 2, BF, 0, SKW, 40, 0},     {33, 512, 1024, 128, 2, BF, 0, UNI, 600, 1},
    {1, 2048, 5632, 256, 8, BF, 1, UNI, 29, 0},    {64, 2048, 5632, 256, 8, BF, 1, UNI, 29, 0},
    {255, 2048, 5632, 256, 8, BF, 1, SKW, 29, 1},  {1000, 2048, 5632, 256, 8, BF, 1, UNI, 29, 0},
    {1000, 2048, 5632, 256, 8, FP, 0, SKW, 29, 1}, {7, 2048, 5632, 256, 8, FP, 0, UNI, 29, 0},
    {255, 512, 1024, 64, 8, FP, 1, SKW, 29, 1},    {8, 4096, 11008, 256, 8, BF, 1, UNI, 29, 0},
    {1000, 512, 1024, 256, 2, FP, 1, UNI, 600, 1}, {64, 512, 1024, 256, 2, FP, 1, SKW, 56, 0},
    {1000, 96, 512, 256, 4, FP, 1, UNI, 29, 0},
};

/* The gate-pack kernel forced by name (TW_TC_SMALL_SET_GATE: "g2u2", "auto" or with a forced WN),
 * gate-pack alone, every row compared with tw_gate_pack_ref: every C at M = 8, 16 (one token
 * block), 32, 64, 255 (2 to 16 token blocks), both dtypes, each overflowing row-tiles (C = 2 and 4
 * on dense uniform data, C = 8 on skewed rows); K = 96 and 160 leave 3 and 5 k32 blocks for the
 * warps that split K; then each forced WN (8 where T = 256 takes it, the rule's where T = 64
 * does not), the real shape, and 1000 rows (63 token blocks: FORCE beyond AUTO's limits). The
 * first two run in the small (sanitizer) set. */
typedef struct {
    const char *gate;
    size_t M;
    uint32_t K, N, T, C;
    twell_dtype dtype;
    tw_synth_dist dist;
    double nnz;
    int want_overflow;
} fs_gate_case;

/* "g2u2" at M rows, K, T, C, data: bf16 and fp16 */
#define FS_G2(M, K, T, C, DIST, NNZ)                                                               \
    {"g2u2", M, K, 1024, T, C, BF, DIST, NNZ, 1}, { "g2u2", M, K, 1024, T, C, FP, DIST, NNZ, 1 }
/* every C at M rows */
#define FS_G(M)                                                                                    \
    FS_G2(M, 160, 128, 2, UNI, 600), FS_G2(M, 96, 128, 4, UNI, 400), FS_G2(M, 512, 64, 8, SKW, 29)

static const fs_gate_case fs_gate_cases[] = {
    {"g2u2", 33, 96, 512, 128, 4, FP, UNI, 200, 1},
    {"g2u2:4", 100, 160, 512, 64, 8, BF, SKW, 29, 1},
    FS_G(8),
    FS_G(16),
    FS_G(32),
    FS_G(64),
    FS_G(255),
    {"g2u2:1", 16, 512, 1024, 64, 8, BF, SKW, 29, 1},
    {"g2u2:2", 1, 160, 1024, 64, 8, FP, SKW, 29, 1},
    {"g2u2:8", 256, 96, 1024, 256, 4, BF, UNI, 400, 1},
    {"g2u2:8", 64, 512, 1024, 64, 2, FP, UNI, 600, 1},
    {"auto:4", 48, 512, 1024, 64, 2, FP, UNI, 600, 1},
    {"auto", 256, 2048, 5632, 256, 8, BF, SKW, 29, 1},
    {"auto", 64, 2048, 5632, 256, 8, FP, SKW, 29, 1},
    {"g2u2", 1, 2048, 5632, 256, 8, BF, UNI, 29, 0},
    {"g2u2", 1000, 160, 1024, 128, 2, BF, UNI, 600, 1},
    {"auto", 256, 512, 1024, 64, 8, FP, SKW, 29, 1},
};
#define FS_GATE_SMALL 2 /* of fs_gate_cases in the small set */

#define FS_GP_SAMPLE 96 /* gate-pack rows compared with tw_gate_pack_ref */
#define FS_SAMPLE 128   /* y rows checked when M > FS_FULL_M */
#define FS_OVF_ROWS 16  /* plus up to this many rows with overflowing row-tiles */
#define FS_FULL_M 255   /* up to this M every row of y is checked */
#define FS_POISON_A 0xFFFFu
#define FS_POISON_B 0x7FC1u /* a NaN in both bf16 and fp16 */

#define FS_OK(expr) TW_GPU_OK(fs_ctx, expr)

/* One gate-pack into packed poisoned with `poison` (workspace poisoned too), copied to host. */
static void fs_gate_run(gi_data *d, twell_plan *plan, uint32_t poison, twell_stream stream,
                        uint32_t *host) {
    size_t words = twell_packed_words(&d->s, d->M);
    FS_OK(tw_test_control(TW_TC_SMALL_POISON, plan, (unsigned)poison));
    FS_OK(tw_cuda_memset_d32(fs_ctx, d->dp, poison, words, stream));
    FS_OK(twell_gate_pack(plan, d->M, d->dx, d->s.gated ? d->dwg : d->dwu, d->dp, stream));
    FS_OK(tw_cuda_synchronize(fs_ctx));
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_SMALL_LAST_GATE), 1);
    FS_OK(tw_cuda_memcpy_dtoh(fs_ctx, host, d->dp, words * 4));
    for (size_t i = 0; i < words; i++)
        if (host[i] == poison)
            fail_msg("packed word %zu (row %zu) still holds the poison %08x", i, i / (words / d->M),
                     poison);
}

/* Gate-pack twice (bitwise equal, well formed), then about `sample` rows (all up to that many)
 * against tw_gate_pack_ref; returns the overflowing row-tiles among them. */
static size_t fs_check_gate(gi_data *d, twell_plan *plan, twell_stream stream, size_t sample) {
    const twell_shape *s = &d->s;
    size_t M = d->M, words = twell_packed_words(s, M), rw = s->N / s->C;
    uint32_t *again = malloc(words * 4);
    assert_non_null(again);
    fs_gate_run(d, plan, 0xA5A5A5A5u, NULL, d->packed);
    fs_gate_run(d, plan, 0x5A5A5A5Au, stream, again);
    if (memcmp(d->packed, again, words * 4) != 0) {
        size_t i = 0;
        while (d->packed[i] == again[i])
            i++;
        fail_msg("gate-pack run 2 differs from run 1 at word %zu (row %zu): %08x vs %08x", i,
                 i / rw, d->packed[i], again[i]);
    }
    free(again);
    size_t bad_row = 0;
    uint32_t bad_tile = 0;
    if (tw_packed_find_malformed(s, M, d->packed, &bad_row, &bad_tile))
        fail_msg("malformed row-tile at row %zu tile %u", bad_row, bad_tile);
    size_t *rows = malloc(sample * sizeof *rows);
    assert_non_null(rows);
    size_t n = tw_pack_sample_rows(M, sample, rows);
    uint16_t *xs = malloc(n * s->K * 2u);
    uint32_t *ref = malloc(n * rw * 4), *sub = malloc(n * rw * 4);
    assert_true(xs && ref && sub);
    for (size_t i = 0; i < n; i++) {
        memcpy(xs + i * s->K, d->f->x + rows[i] * s->K, s->K * 2u);
        memcpy(sub + i * rw, d->packed + rows[i] * rw, rw * 4);
    }
    const uint16_t *w = tw_synth_pack_weight(d->f);
    FS_OK(tw_gate_pack_ref(fs_ctx->pool, s, n, xs, w, ref));
    tw_pack_check r;
    tw_pack_check_rows(s, d->f->x, w, rows, n, ref, sub, &r);
    printf("#   gate-pack: %zu rows, tiles %zu exact, %zu tolerated, %zu bad; flips %zu; worst %u "
           "ulp; max_rel_err %.2e; overflow tiles %zu\n",
           r.rows, r.tiles_exact, r.tiles_tolerated, r.tiles_bad, r.flips, r.worst_ulp,
           r.max_rel_err, r.overflow_tiles);
    if (r.tiles_bad)
        fail_msg("%zu row-tiles differ beyond fp32 summation order; first: %s", r.tiles_bad,
                 r.first_bad);
    free(xs), free(ref), free(sub), free(rows);
    return r.overflow_tiles;
}

/* One ffn_infer into y poisoned with `poison` (workspace poisoned too), copied to d->got. */
static void fs_ffn_run(gi_data *d, twell_plan *plan, uint16_t poison, twell_stream stream) {
    FS_OK(tw_test_control(TW_TC_SMALL_POISON, plan, (unsigned)poison << 16 | poison));
    gi_run(d, plan, poison, stream);
}

static void fs_expect(const gi_data *d, const char *what) { gi_expect(d, 10, what); }

/* A plan with the small path in `mode` ("auto", "off", "force"). */
static twell_plan *fs_plan(const twell_shape *s, const char *mode) {
    twell_plan *plan = NULL;
    FS_OK(twell_plan_create(fs_ctx, s, &plan));
    FS_OK(tw_test_control(TW_TC_SMALL_SET_MODE, plan, mode));
    return plan;
}

/* The path runs on sm_80+ for K % 32 == 0 (every case here). */
static int fs_expect_available(twell_plan *plan) {
    if (fs_ctx->cuda->cc_major < 8) {
        assert_int_equal(tw_tc_plan_int(plan, TW_TC_SMALL_AVAILABLE), 0);
        return 0;
    }
    if (!tw_tc_plan_int(plan, TW_TC_SMALL_AVAILABLE))
        fail_msg("the small path is not available on %s: %s", fs_ctx->cuda->arch,
                 twell_ctx_errmsg(fs_ctx));
    return 1;
}

static void test_gpu_ffn_small_case(void **state) {
    const gi_case *c = *state;
    twell_shape s = gi_shape(c);
    twell_plan *plan = fs_plan(&s, "force");
    if (!fs_expect_available(plan)) {
        twell_plan_destroy(plan);
        skip();
    }
    gi_data d;
    gi_setup(&d, fs_ctx, &s, c->M, c->dist, c->nnz, 5000u + c->M + c->K + c->N + c->C);
    twell_stream stream = NULL;
    FS_OK(tw_cuda_stream_create(fs_ctx, &stream));
    printf("# M=%-4zu K=%-4u N=%-5u T=%u C=%u %s %s %-7s nnz=%g\n", c->M, s.K, s.N, s.T, s.C,
           s.dtype == BF ? "bf16" : "fp16", s.gated ? "gated" : "non-gated",
           tw_synth_dist_name(c->dist), c->nnz);
    fs_check_gate(&d, plan, stream, FS_GP_SAMPLE);
    gi_check_rows(&d, FS_FULL_M, FS_SAMPLE, FS_OVF_ROWS);
    printf("#   %zu rows of y checked, %zu overflowing row-tiles among them; workspace %zu rows, "
           "%.1f MB\n",
           d.nrows, d.ovf_checked, tw_tc_plan_size(plan, TW_TC_SMALL_ROWS),
           (double)tw_tc_plan_size(plan, TW_TC_SMALL_WORKSPACE_BYTES) / 1e6);
    if (c->want_overflow && d.ovf_checked == 0)
        fail_msg("the case was meant to overflow row-tiles but the checked rows have none");

    fs_ffn_run(&d, plan, FS_POISON_A, NULL);
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_SMALL_LAST_FFN), 1);
    fs_expect(&d, "small");
    uint16_t *first = gi_keep_y(&d);
    fs_ffn_run(&d, plan, FS_POISON_B, stream);
    gi_expect_same_y(first, d.got, c->M * s.K, s.K, "");
    /* few rows run one kernel: on sm_90+ up to 8 rows the cluster kernel, then the plain one
     * checked too */
    const char *fused = NULL;
    FS_OK(tw_test_control(TW_TC_SMALL_LAST_FUSED_KERNEL, plan, &fused));
    assert_non_null(fused);
    if (c->M <= TW_SMALL_FUSED_M && s.K <= TW_SMALL_FUSED_K) {
        /* the cluster kernel up to 8 rows (cuda_small.c, TW_FUSED_CL_M) */
        assert_string_equal(fused, fs_ctx->cuda->cc_major >= 9 && c->M <= 8 ? "fused_cl" : "fused");
        if (!strcmp(fused, "fused_cl")) {
            FS_OK(tw_test_control(TW_TC_SMALL_SET_FUSED_PLAIN, plan, 1));
            fs_ffn_run(&d, plan, FS_POISON_A, stream);
            FS_OK(tw_test_control(TW_TC_SMALL_LAST_FUSED_KERNEL, plan, &fused));
            assert_string_equal(fused, "fused");
            fs_expect(&d, "small, plain fused kernel");
        }
    } else if (s.K <= 4096u) {
        /* more rows: the row kernel (K ≤ 4096, cuda_small.c), then the up and down kernels */
        assert_string_equal(fused, "row");
        FS_OK(tw_test_control(TW_TC_SMALL_SET_UPDOWN, plan, 1));
        fs_ffn_run(&d, plan, FS_POISON_A, stream);
        FS_OK(tw_test_control(TW_TC_SMALL_LAST_FUSED_KERNEL, plan, &fused));
        assert_string_equal(fused, "");
        fs_expect(&d, "small, up and down kernels");
        FS_OK(tw_test_control(TW_TC_SMALL_SET_UPDOWN, plan, 0));
        fused = "row";
    } else {
        assert_string_equal(fused, "");
    }
    printf("#   one kernel: %s\n", *fused ? fused : "no (up and down)");
    free(first);
    tw_cuda_stream_destroy(fs_ctx, stream);
    gi_free(&d);
    twell_plan_destroy(plan);
}

static void test_gpu_ffn_small_gate(void **state) {
    const fs_gate_case *c = *state;
    twell_shape s;
    twell_shape_init(&s, c->K, c->N);
    s.T = c->T, s.C = c->C, s.dtype = c->dtype, s.gated = 1;
    twell_plan *plan = fs_plan(&s, "force");
    if (!fs_expect_available(plan)) {
        twell_plan_destroy(plan);
        skip();
    }
    FS_OK(tw_test_control(TW_TC_SMALL_SET_GATE, plan, c->gate));
    int wn = 0;
    assert_int_equal(tw_sgate_spec_parse(c->gate, &wn), 0);
    tw_sgate_geom g = tw_sgate_geom_of(s.T, c->M, wn);
    gi_data d;
    gi_setup(&d, fs_ctx, &s, c->M, c->dist, c->nnz, 7000u + c->M + c->K + c->N + c->C);
    twell_stream stream = NULL;
    FS_OK(tw_cuda_stream_create(fs_ctx, &stream));
    printf("# gate %s: M=%-4zu K=%-4u N=%-5u T=%u C=%u %s %-7s nnz=%g -> TB=%d MT=%d WN=%d\n",
           c->gate, c->M, s.K, s.N, s.T, s.C, s.dtype == BF ? "bf16" : "fp16",
           tw_synth_dist_name(c->dist), c->nnz, g.TB, g.MT, g.WN);
    if (wn > 0 && s.T % (16u * (unsigned)wn) == 0)
        assert_int_equal(g.WN, wn);
    size_t ovf = fs_check_gate(&d, plan, stream, 256);
    const char *ran = NULL;
    FS_OK(tw_test_control(TW_TC_SMALL_LAST_GATE_KERNEL, plan, &ran));
    assert_non_null(ran);
    assert_string_equal(ran, TW_SGATE_KERNEL);
    if (c->want_overflow && ovf == 0)
        fail_msg("the case was meant to overflow row-tiles but has none");
    tw_cuda_stream_destroy(fs_ctx, stream);
    gi_free(&d);
    twell_plan_destroy(plan);
}

/* Runs gate-pack + ffn_infer of d's M rows and reports which of them took the small path. */
static void fs_which(gi_data *d, twell_plan *plan, int *gate, int *ffn) {
    FS_OK(twell_gate_pack(plan, d->M, d->dx, d->dwg, d->dp, NULL));
    *gate = tw_tc_plan_int(plan, TW_TC_SMALL_LAST_GATE);
    FS_OK(twell_ffn_infer(plan, d->M, d->dx, d->dp, d->dwg, d->dwu, d->dwd, d->dy, NULL));
    *ffn = tw_tc_plan_int(plan, TW_TC_SMALL_LAST_FFN);
    FS_OK(tw_cuda_synchronize(fs_ctx));
}

static void fs_expect_which(gi_data *d, twell_plan *plan, int want_gate, int want_ffn,
                            const char *when) {
    int g = -1, f = -1;
    fs_which(d, plan, &g, &f);
    printf("#   %-40s gate-pack %s, ffn_infer %s\n", when, g ? "small" : "other",
           f ? "small" : "other");
    if (g != want_gate || f != want_ffn)
        fail_msg("%s: gate-pack ran %s (want %s), ffn_infer %s (want %s)", when,
                 g ? "small" : "other", want_gate ? "small" : "other", f ? "small" : "other",
                 want_ffn ? "small" : "other");
}

/* The AUTO rule (cuda_small.h, ffn_policy.h): by M, by plan path, dense kept where the estimate
 * picks it, and a forced gate-pack variant; then the workspace growing from 64 rows to 1024 on
 * one plan. */
static void test_gpu_ffn_small_auto_rule(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    twell_plan *plan = fs_plan(&s, "auto");
    if (!fs_expect_available(plan)) {
        twell_plan_destroy(plan);
        skip();
    }
    /* above the row kernel's AUTO limit (ffn_policy.h, rule 0) and the small path's rows */
    const size_t big = TW_POLICY_ROW_MAX_ROWS + 1;
    gi_data d, db, dm;
    gi_setup(&d, fs_ctx, &s, 8, UNI, 29, 61);
    gi_setup(&db, fs_ctx, &s, big, UNI, 29, 62);
    gi_setup(&dm, fs_ctx, &s, 300, UNI, 29, 63);
    FS_OK(twell_plan_set_path(plan, TWELL_PATH_AUTO));
    fs_expect_which(&d, plan, 1, 1, "M=8, path AUTO");
    fs_expect_which(&db, plan, 0, 0, "M above both AUTO limits");
    /* 300 rows, no overflow: the cuBLASLt gate-pack, then the row kernel (rule 0) */
    fs_expect_which(&dm, plan, 0, 1, "M=300, path AUTO (row kernel)");
    const char *k = NULL;
    FS_OK(tw_test_control(TW_TC_SMALL_LAST_FUSED_KERNEL, plan, &k));
    assert_string_equal(k, "row");
    gi_free(&dm);
    FS_OK(twell_plan_set_path(plan, TWELL_PATH_SPARSE));
    fs_expect_which(&d, plan, 1, 0, "M=8, path SPARSE (the tiled pipeline)");
    FS_OK(twell_plan_set_path(plan, TWELL_PATH_AUTO));
    /* the policy keeps dense where its estimate says dense beats tiled; small replaces tiled */
    FS_OK(tw_test_control(TW_TC_DENSE_SET_MIN_ROWS, plan, (size_t)1));
    FS_OK(tw_test_control(TW_TC_DENSE_SET_THRESHOLD, plan, (double)0.25));
    /* where dense runs, the gate-pack runs through cuBLASLt so that it reuses its gate */
    const int dense_ok = tw_tc_plan_int(plan, TW_TC_DENSE_AVAILABLE);
    fs_expect_which(&d, plan, !dense_ok, !dense_ok, "M=8, AUTO, dense from 1 row above 0.25");
    FS_OK(tw_test_control(TW_TC_DENSE_SET_THRESHOLD, plan, (double)0.0));
    fs_expect_which(&d, plan, 1, 1, "M=8, AUTO, dense from 1 row, default");
    FS_OK(tw_test_control(TW_TC_DENSE_SET_MIN_ROWS, plan, (size_t)0));
    if (!strcmp(tw_tc_plan_variant(plan), "sm90")) {
        FS_OK(tw_test_control(TW_TC_GP_SELECT, plan, "simt"));
        fs_expect_which(&d, plan, 0, 1, "M=8, AUTO, gate-pack forced to SIMT");
    }
    gi_free(&d);
    gi_free(&db);
    twell_plan_destroy(plan);

    /* growth: 1 row, then 700 on the same plan (64 -> 1024 rows), checked on a few rows */
    plan = fs_plan(&s, "force");
    size_t Ms[2] = {1, 700};
    for (int i = 0; i < 2; i++) {
        gi_setup(&d, fs_ctx, &s, Ms[i], SKW, 29, 70u + (uint64_t)i);
        gi_gate_pack(&d, plan);
        d.nrows = tw_pack_sample_rows(d.M, 8, d.rows);
        gi_reference(&d, 0);
        fs_ffn_run(&d, plan, FS_POISON_A, NULL);
        printf("#   M=%zu on one plan: workspace %zu rows\n", d.M,
               tw_tc_plan_size(plan, TW_TC_SMALL_ROWS));
        assert_true(tw_tc_plan_size(plan, TW_TC_SMALL_ROWS) >= d.M);
        fs_expect(&d, "grown");
        gi_free(&d);
    }
    twell_plan_destroy(plan);
}

int main(int argc, char **argv) {
    fs_ctx = tw_gpu_open_or_skip("test_gpu_ffn_small");
    printf("# %s\n", twell_ctx_device_name(fs_ctx));
    size_t ncases = sizeof fs_cases / sizeof fs_cases[0];
    size_t ngate = sizeof fs_gate_cases / sizeof fs_gate_cases[0];
    int small = argc > 1 && !strcmp(argv[1], "small");
    if (small)
        ncases = 4, ngate = FS_GATE_SMALL;
    enum { FS_NC = sizeof fs_cases / sizeof fs_cases[0] };
    enum { FS_NG = sizeof fs_gate_cases / sizeof fs_gate_cases[0] };
    struct CMUnitTest tests[FS_NC + FS_NG + 1];
    static char names[FS_NC + FS_NG][GI_NAME];
    size_t n = gi_case_tests(tests, 0, names, "test_gpu_ffn_small", fs_cases, ncases,
                             test_gpu_ffn_small_case);
    for (size_t i = 0; i < ngate; i++) {
        const fs_gate_case *c = &fs_gate_cases[i];
        snprintf(names[n], sizeof names[n], "test_gpu_ffn_small_gate_%s_M%zu_K%u_N%u_T%u_C%u_%s_%s",
                 c->gate, c->M, c->K, c->N, c->T, c->C, c->dtype == BF ? "bf16" : "fp16",
                 tw_synth_dist_name(c->dist));
        struct CMUnitTest t = {names[n], test_gpu_ffn_small_gate, NULL, NULL, (void *)c};
        tests[n++] = t;
    }
    if (!small) {
        struct CMUnitTest t = cmocka_unit_test(test_gpu_ffn_small_auto_rule);
        tests[n++] = t;
    }
    int rc = _cmocka_run_group_tests("test_gpu_ffn_small", tests, n, NULL, NULL);
    twell_ctx_destroy(fs_ctx);
    return rc;
}
