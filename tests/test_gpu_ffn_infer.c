/* test_gpu_ffn_infer.c — twell_ffn_infer on the GPU (gate-pack on the GPU too, then the fused
 * kernels) against the CPU reference tw_ffn_infer_ref on the same packed bytes, over a pruned
 * shape sweep (every M, K, N, C value of the issue, both dtypes, gated and non-gated, uniform and
 * skewed data with overflowing row-tiles), for every kernel path: the tiled pipeline, its
 * device-side fallback (workspace too small), the simple row kernel and the portable one. Also:
 * bitwise determinism, poisoned outputs fully overwritten, growth of the workspace without a
 * probe and with calls in flight, several chunks on a stream, alignment, and the path switch.
 * Exits 77 without a device.
 *
 * Tolerance: the largest row-relative L2 error ‖y − y_ref‖₂ / ‖y_ref‖₂ over the checked rows is
 * at most 5e-3 (bf16) or 1e-3 (fp16): the output rounding level the development harness measured
 * against an fp64 reference (1.7e-3 bf16, 2.2e-4 fp16); both sides round y once, the rest is
 * fp32 summation order. The worst error is printed per case and path.
 * `test_gpu_ffn_infer small`: the first cases only (compute-sanitizer runs); `heavy`: the small
 * heavy-row case alone.
 * labels: gpu slow */
#include "cuda_driver.h"
#include "cuda_ffn.h"
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

static twell_ctx *fi_ctx;

/* Pruned cross product: each value of every axis appears, in mixed company. Skewed data has 10%
 * heavy rows (~20% of a tile active) and a dense first token every 64 rows, so C = 8 tiles
 * (31 slots of 256, 7 of 64) and C = 4 at T = 128 overflow; C = 2 (127 slots) needs the dense
 * uniform case. K = 80 and 48 are not multiples of 64: the portable row kernel serves them. The
 * first three cases are small (the sanitizer runs them). */
static const gi_case fi_cases[] = {
    {1, 64, 256, 256, 8, BF, 1, UNI, 8, 0},        {128, 512, 5632, 64, 8, FP, 1, SKW, 29, 1},
    {7, 512, 1024, 256, 2, BF, 0, UNI, 600, 1},    {128, 2048, 5632, 256, 8, BF, 1, SKW, 29, 1},
    {1000, 2048, 5632, 256, 8, FP, 1, UNI, 29, 0}, {4096, 2048, 5632, 256, 8, BF, 1, UNI, 29, 0},
    {4096, 2048, 5632, 256, 8, BF, 1, SKW, 29, 1}, {1000, 512, 5632, 256, 8, FP, 0, SKW, 280, 1},
    {4096, 64, 256, 256, 2, BF, 1, SKW, 60, 0},    {7, 2048, 256, 256, 4, BF, 0, UNI, 29, 0},
    {4096, 2048, 1024, 256, 4, FP, 0, SKW, 29, 0}, {333, 512, 1024, 128, 4, BF, 1, SKW, 50, 1},
    {1, 2048, 5632, 256, 8, FP, 0, SKW, 29, 0},    {1000, 64, 1024, 256, 4, FP, 1, UNI, 100, 0},
    {100, 80, 512, 256, 8, BF, 1, SKW, 29, 1},     {33, 48, 256, 64, 4, FP, 0, UNI, 20, 0},
};

#define FI_SAMPLE 96   /* evenly spread rows checked when M is large */
#define FI_OVF_ROWS 16 /* plus up to this many rows with overflowing row-tiles */
#define FI_FULL_M 1000 /* up to this M every row is checked */
#define FI_POISON_A 0xFFFFu
#define FI_POISON_B 0x7FC1u /* a NaN in both bf16 and fp16 */

#define FI_OK(expr) TW_GPU_OK(fi_ctx, expr)

/* Synthetic data, uploaded; gate-pack on the GPU with `plan`; the checked rows and their
 * reference computed from the GPU's packed bytes. */
static void fi_prepare(gi_data *d, const twell_shape *s, size_t M, tw_synth_dist dist, double nnz,
                       uint64_t seed, twell_plan *plan) {
    gi_setup(d, fi_ctx, s, M, dist, nnz, seed);
    gi_gate_pack(d, plan);
    gi_check_rows(d, FI_FULL_M, FI_SAMPLE, FI_OVF_ROWS);
}

/* The checked rows of d->got against the reference, within the dtype's tolerance. */
static void fi_expect(const gi_data *d, const char *path) { gi_expect(d, 9, path); }

static void test_gpu_ffn_infer_case(void **state) {
    const gi_case *c = *state;
    twell_shape s = gi_shape(c);
    twell_plan *plan = NULL;
    FI_OK(twell_plan_create(fi_ctx, &s, &plan));
    FI_OK(twell_plan_set_path(plan, TWELL_PATH_SPARSE)); /* AUTO may switch to the dense path */
    gi_data d;
    fi_prepare(&d, &s, c->M, c->dist, c->nnz, 2000u + c->M + c->K + c->N, plan);
    int tiled = tw_tc_plan_int(plan, TW_TC_FFN_TILED);
    printf("# M=%-5zu K=%-4u N=%-4u T=%u C=%u %s %s %-7s nnz=%-4g: %zu rows checked, %zu "
           "overflowing row-tiles among them; %s\n",
           c->M, s.K, s.N, s.T, s.C, s.dtype == BF ? "bf16" : "fp16",
           s.gated ? "gated" : "non-gated", tw_synth_dist_name(c->dist), c->nnz, d.nrows,
           d.ovf_checked, tiled ? "tiled pipeline" : "portable row kernel");
    if (c->want_overflow && d.ovf_checked == 0)
        fail_msg("the case was meant to overflow row-tiles but the checked rows have none");
    if (c->K % 64 == 0 && fi_ctx->cuda->cc_major >= 8 && !tiled)
        fail_msg("K=%u on %s should get the tiled pipeline", c->K, fi_ctx->cuda->arch);

    /* the default path: the first call measures the workspace (one probe), so it is tiled */
    int modules = tw_tc_plan_int(plan, TW_TC_FFN_MODULES);
    gi_run(&d, plan, FI_POISON_A, NULL);
    fi_expect(&d, tiled ? "tiled" : "generic");
    uint32_t fl[4];
    FI_OK(tw_test_control(TW_TC_FFN_FLAGS, plan, fl));
    if (tiled) {
        printf("#   flags: fallback %u, pair slots %u (%.1f per row), overflowing tiles %u; "
               "workspace %.1f MB\n",
               fl[0], fl[1], (double)fl[1] / (double)(c->M < TW_FFN_CHUNK ? c->M : TW_FFN_CHUNK),
               fl[2], (double)tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES) / 1e6);
        assert_int_equal(fl[0], 0); /* the probe sized the workspace: no fallback */
        assert_int_equal(tw_tc_plan_int(plan, TW_TC_FFN_PROBES), 1);
    }
    /* determinism: a second run gives the same bytes, without a new probe or module */
    uint16_t *first = gi_keep_y(&d);
    gi_run(&d, plan, FI_POISON_B, NULL);
    gi_expect_same_y(first, d.got, c->M * s.K, s.K, "");
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_FFN_MODULES), modules);
    if (tiled) {
        assert_int_equal(tw_tc_plan_int(plan, TW_TC_FFN_PROBES), 1);
        /* the fallback: a workspace far too small sends every chunk to the exact row kernel */
        FI_OK(tw_test_control(TW_TC_FFN_SET_CAPACITY, plan, (size_t)16, (size_t)1));
        gi_run(&d, plan, FI_POISON_A, NULL);
        FI_OK(tw_test_control(TW_TC_FFN_FLAGS, plan, fl));
        if (fl[0] == 0 && fl[1] > 16)
            fail_msg("pair slots %u > capacity 16 but no fallback flagged", fl[1]);
        fi_expect(&d, "fallback");
        FI_OK(tw_test_control(TW_TC_FFN_SET_CAPACITY, plan, (size_t)0, (size_t)0));
        /* the simple row kernel of ffn_fused */
        FI_OK(tw_test_control(TW_TC_FFN_SET_KERNEL, plan, "rows"));
        gi_run(&d, plan, FI_POISON_B, NULL);
        fi_expect(&d, "rows");
        FI_OK(tw_test_control(TW_TC_FFN_SET_KERNEL, plan, "auto"));
    }
    FI_OK(tw_test_control(TW_TC_FFN_SET_KERNEL, plan, "generic"));
    gi_run(&d, plan, FI_POISON_A, NULL);
    fi_expect(&d, "generic");
    FI_OK(tw_test_control(TW_TC_FFN_SET_KERNEL, plan, "auto"));
    free(first);
    gi_free(&d);
    twell_plan_destroy(plan);
}

/* Rows beyond one chunk (TW_FFN_CHUNK) on a created stream, then on the default stream (the
 * plan orders calls on different streams itself): the chunk boundaries are checked. */
static void test_gpu_ffn_infer_chunks_and_streams(void **state) {
    (void)state;
    const size_t M = 2 * TW_FFN_CHUNK + 777;
    twell_shape s;
    twell_shape_init(&s, 64, 256);
    twell_plan *plan = NULL;
    FI_OK(twell_plan_create(fi_ctx, &s, &plan));
    FI_OK(twell_plan_set_path(plan, TWELL_PATH_SPARSE));
    gi_data d;
    fi_prepare(&d, &s, M, TW_SYNTH_SKEWED, 12, 4242, plan);
    size_t extra[] = {TW_FFN_CHUNK - 1, TW_FFN_CHUNK, 2 * TW_FFN_CHUNK - 1, 2 * TW_FFN_CHUNK};
    /* the reference for the boundary rows, one row at a time */
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        gi_add_row(&d, extra[i]);
        gi_reference(&d, d.nrows - 1);
    }
    twell_stream stream = NULL;
    FI_OK(tw_cuda_stream_create(fi_ctx, &stream));
    gi_run(&d, plan, FI_POISON_A, stream);
    fi_expect(&d, "stream");
    uint16_t *first = gi_keep_y(&d);
    void *dy2 = NULL;
    /* back to back on two streams, no host wait between: the second call must wait for the
     * first (they share the workspace) */
    FI_OK(tw_cuda_malloc(fi_ctx, M * s.K * 2u, &dy2));
    FI_OK(tw_cuda_memset_d32(fi_ctx, d.dy, 0xFFFFFFFFu, M * s.K / 2, NULL));
    FI_OK(tw_cuda_memset_d32(fi_ctx, dy2, 0xFFFFFFFFu, M * s.K / 2, NULL));
    FI_OK(tw_cuda_synchronize(fi_ctx));
    FI_OK(twell_ffn_infer(plan, M, d.dx, d.dp, d.dwg, d.dwu, d.dwd, dy2, stream));
    FI_OK(twell_ffn_infer(plan, M, d.dx, d.dp, d.dwg, d.dwu, d.dwd, d.dy, NULL));
    FI_OK(tw_cuda_synchronize(fi_ctx));
    FI_OK(tw_cuda_memcpy_dtoh(fi_ctx, d.got, d.dy, M * s.K * 2u));
    assert_memory_equal(first, d.got, M * s.K * 2u);
    FI_OK(tw_cuda_memcpy_dtoh(fi_ctx, d.got, dy2, M * s.K * 2u));
    assert_memory_equal(first, d.got, M * s.K * 2u);
    printf("#   two streams back to back: both outputs equal the first run\n");
    tw_cuda_free(fi_ctx, dy2);
    free(first);
    tw_cuda_stream_destroy(fi_ctx, stream);
    gi_free(&d);
    twell_plan_destroy(plan);
}

/* Denser data than the probe measured: that call falls back (exact), the next one finds the
 * flags, grows the workspace and is tiled again, with no second probe. */
static void test_gpu_ffn_infer_growth_without_probe(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 512, 2048);
    twell_plan *plan = NULL;
    FI_OK(twell_plan_create(fi_ctx, &s, &plan));
    FI_OK(twell_plan_set_path(plan, TWELL_PATH_SPARSE));
    if (!tw_tc_plan_int(plan, TW_TC_FFN_TILED)) {
        twell_plan_destroy(plan);
        skip();
    }
    gi_data sparse, dense;
    fi_prepare(&sparse, &s, 3000, TW_SYNTH_UNIFORM, 6, 11, plan);
    fi_prepare(&dense, &s, 3000, TW_SYNTH_UNIFORM, 40, 12, plan);
    uint32_t fl[4];
    gi_run(&sparse, plan, FI_POISON_A, NULL);
    fi_expect(&sparse, "sparse");
    FI_OK(tw_test_control(TW_TC_FFN_FLAGS, plan, fl));
    assert_int_equal(fl[0], 0);
    size_t ws = tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES);
    gi_run(&dense, plan, FI_POISON_A, NULL);
    fi_expect(&dense, "dense 1");
    FI_OK(tw_test_control(TW_TC_FFN_FLAGS, plan, fl));
    printf("#   denser call: fallback flag %u, pair slots %u\n", fl[0], fl[1]);
    assert_int_not_equal(fl[0], 0);
    gi_run(&dense, plan, FI_POISON_B, NULL);
    fi_expect(&dense, "dense 2");
    FI_OK(tw_test_control(TW_TC_FFN_FLAGS, plan, fl));
    printf("#   next call: fallback flag %u; workspace %.1f -> %.1f MB\n", fl[0], (double)ws / 1e6,
           (double)tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES) / 1e6);
    assert_int_equal(fl[0], 0);
    assert_true(tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES) > ws);
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_FFN_PROBES), 1);
    gi_free(&sparse);
    gi_free(&dense);
    twell_plan_destroy(plan);
}

/* The two growth tests' fixture: a SPARSE plan of shape s running the tiled pipeline (else the
 * test skips), a sparse (uniform, 6 active per row) and a denser (skewed, 40) input of M rows
 * with seeds seed and seed + 1, and the plan's first (probing) call on the sparse one, checked. */
static twell_plan *fi_two_open(const twell_shape *s, size_t M, gi_data in[2], unsigned seed) {
    twell_plan *plan = NULL;
    FI_OK(twell_plan_create(fi_ctx, s, &plan));
    FI_OK(twell_plan_set_path(plan, TWELL_PATH_SPARSE));
    if (!tw_tc_plan_int(plan, TW_TC_FFN_TILED)) {
        twell_plan_destroy(plan);
        skip();
    }
    fi_prepare(&in[0], s, M, TW_SYNTH_UNIFORM, 6, seed, plan);
    fi_prepare(&in[1], s, M, TW_SYNTH_SKEWED, 40, seed + 1u, plan);
    gi_run(&in[0], plan, FI_POISON_A, NULL); /* the probe: sized for the sparse input */
    fi_expect(&in[0], "probe call");
    return plan;
}

static void fi_two_close(twell_plan *plan, gi_data in[2]) {
    gi_free(&in[0]);
    gi_free(&in[1]);
    twell_plan_destroy(plan);
}

/* Words of the buffer the growth tests fill to keep the device busy for milliseconds (256 MB). */
#define FI_BUSY_WORDS ((size_t)64 << 20)

/* Issue 14's layers sharing a plan: a sparse and a denser input alternate on one plan with no
 * host sync between calls, the host far ahead of the device (a queue of memsets keeps it busy),
 * as a model forward runs. The denser input's need must not be lost when the calls after it
 * need less: the scans accumulate the largest need on the device (ffn_fused's acc) and the
 * plan grows from it without waiting. Round 1 may fall back (exact) until then; round 2 (after
 * one sync) must not fall back at all; no call waits on the host in either round (the first,
 * probing call is made before); every output matches the CPU reference. Before the fix the
 * need of the denser calls was overwritten by the sparser calls' before the host read it. */
#define FI_ALT_CALLS 16
static void test_gpu_ffn_infer_alternating_no_sync(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 512, 2048);
    const size_t M = 3000;
    gi_data in[2]; /* [0] sparse, [1] denser */
    twell_plan *plan = fi_two_open(&s, M, in, 21u);
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_FFN_PROBES), 1);
    size_t yb = M * s.K * 2u, ws0 = tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES);
    void *y[FI_ALT_CALLS];
    for (int i = 0; i < FI_ALT_CALLS; i++)
        FI_OK(tw_cuda_malloc(fi_ctx, yb, &y[i]));
    const size_t busy_words = FI_BUSY_WORDS;
    void *busy = NULL;
    FI_OK(tw_cuda_malloc(fi_ctx, busy_words * 4u, &busy));
    uint32_t acc[4];
    int grows[2];
    unsigned fallbacks[2];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < FI_ALT_CALLS; i++)
            FI_OK(tw_cuda_memset_d32(fi_ctx, y[i], 0xFFFFFFFFu, yb / 4u, NULL));
        for (int b = 0; b < 40; b++) /* milliseconds of device work ahead of the calls */
            FI_OK(tw_cuda_memset_d32(fi_ctx, busy, (uint32_t)b, busy_words, NULL));
        unsigned long w0 = tw_tc_host_waits();
        for (int i = 0; i < FI_ALT_CALLS; i++) { /* denser first, sparser last */
            const gi_data *d = &in[(i + 1) % 2];
            FI_OK(twell_ffn_infer(plan, M, d->dx, d->dp, d->dwg, d->dwu, d->dwd, y[i], NULL));
        }
        unsigned long waits = tw_tc_host_waits() - w0;
        FI_OK(tw_test_control(TW_TC_FFN_NEEDS, plan, acc, grows)); /* synchronises */
        fallbacks[round] = acc[0];
        printf("#   round %d: %d calls, host waits %lu; fallback chunks so far %u, needs: pair "
               "slots %u, overflowing row-tiles %u, rows %u; growths idle %d, in flight %d; "
               "workspace %.1f -> %.1f MB\n",
               round, FI_ALT_CALLS, waits, acc[0], acc[1], acc[2], acc[3], grows[0], grows[1],
               (double)ws0 / 1e6, (double)tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES) / 1e6);
        assert_int_equal(waits, 0);
        for (int i = 0; i < FI_ALT_CALLS; i++) {
            gi_data *d = &in[(i + 1) % 2];
            FI_OK(tw_cuda_memcpy_dtoh(fi_ctx, d->got, y[i], yb));
            tw_gpu_expect_written(s.dtype, d->got, M * s.K, s.K, 0xFFFFu, "y");
            char what[48];
            snprintf(what, sizeof what, "round %d call %d", round, i);
            fi_expect(d, what);
        }
    }
    /* the first denser call of round 1 cannot fit what the probe sized; round 2 fits all */
    assert_true(fallbacks[0] >= 1);
    assert_int_equal(fallbacks[1], fallbacks[0]);
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_FFN_PROBES), 1);
    assert_true(tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES) > ws0);
    for (int i = 0; i < FI_ALT_CALLS; i++)
        tw_cuda_free(fi_ctx, y[i]);
    tw_cuda_free(fi_ctx, busy);
    fi_two_close(plan, in);
}

/* Growth with calls in flight (tw_ffn_collect's retirement path): a denser call A on a created
 * stream, milliseconds of device work and a sparse call A2 queued behind it on that stream; once
 * A has finished (its need is in the mirror) the stream is destroyed (legal: its work still
 * runs) and a denser call B on the default stream grows the workspace while A2 is in flight,
 * without a host wait: the old buffers are retired behind an event on B's stream (not on the
 * destroyed one: a dangling handle) and freed by a later call. Every output matches the CPU
 * reference; a denser call after that runs no fallback chunk. */
static void test_gpu_ffn_infer_grow_in_flight(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 512, 2048);
    const size_t M = 3000;
    gi_data in[2]; /* [0] sparse, [1] denser */
    twell_plan *plan = fi_two_open(&s, M, in, 31u);
    size_t yb = M * s.K * 2u, ws0 = tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES);
    void *y[5];
    for (int i = 0; i < 5; i++) {
        FI_OK(tw_cuda_malloc(fi_ctx, yb, &y[i]));
        FI_OK(tw_cuda_memset_d32(fi_ctx, y[i], 0xFFFFFFFFu, yb / 4u, NULL));
    }
    const size_t busy_words = FI_BUSY_WORDS;
    void *busy = NULL;
    FI_OK(tw_cuda_malloc(fi_ctx, busy_words * 4u, &busy));
    twell_stream side = NULL;
    tw_cuda_event ev = NULL;
    FI_OK(tw_cuda_stream_create(fi_ctx, &side));
    FI_OK(tw_cuda_event_create(fi_ctx, &ev));
    FI_OK(tw_cuda_synchronize(fi_ctx));
    const gi_data *dn = &in[1], *sp = &in[0];
    /* A (denser) on side, then the busy work and A2 (sparse) behind it */
    FI_OK(twell_ffn_infer(plan, M, dn->dx, dn->dp, dn->dwg, dn->dwu, dn->dwd, y[0], side));
    FI_OK(tw_cuda_event_record(fi_ctx, ev, side));
    for (int b = 0; b < 40; b++)
        FI_OK(tw_cuda_memset_d32(fi_ctx, busy, (uint32_t)b, busy_words, side));
    FI_OK(twell_ffn_infer(plan, M, sp->dx, sp->dp, sp->dwg, sp->dwu, sp->dwd, y[1], side));
    FI_OK(tw_cuda_event_synchronize(fi_ctx, ev)); /* A finished: its need is in the mirror */
    tw_cuda_stream_destroy(fi_ctx, side);
    uint32_t acc[4];
    int grows[2];
    /* B (denser, default stream) grows while A2 is in flight; C (sparse) comes after it */
    unsigned long w0 = tw_tc_host_waits();
    FI_OK(twell_ffn_infer(plan, M, dn->dx, dn->dp, dn->dwg, dn->dwu, dn->dwd, y[2], NULL));
    unsigned long waits = tw_tc_host_waits() - w0;
    FI_OK(twell_ffn_infer(plan, M, sp->dx, sp->dp, sp->dwg, sp->dwu, sp->dwd, y[3], NULL));
    FI_OK(tw_test_control(TW_TC_FFN_NEEDS, plan, acc, grows)); /* synchronises */
    unsigned fallbacks = acc[0];
    size_t ws1 = tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES);
    printf("#   grown in flight: host waits %lu; fallback chunks %u; needs: pair slots %u, "
           "overflowing row-tiles %u, rows %u; growths idle %d, in flight %d; workspace %.1f -> "
           "%.1f MB\n",
           waits, acc[0], acc[1], acc[2], acc[3], grows[0], grows[1], (double)ws0 / 1e6,
           (double)ws1 / 1e6);
    assert_int_equal(waits, 0);
    assert_true(fallbacks >= 1); /* A did not fit what the probe sized */
    assert_true(grows[1] >= 1);
    assert_true(ws1 > ws0);
    /* D (denser, the device idle; its call frees the retired buffers): no fallback any more */
    FI_OK(twell_ffn_infer(plan, M, dn->dx, dn->dp, dn->dwg, dn->dwu, dn->dwd, y[4], NULL));
    FI_OK(tw_test_control(TW_TC_FFN_NEEDS, plan, acc, grows));
    assert_int_equal(acc[0], fallbacks);
    static const char *const what[5] = {"A denser, side stream", "A2 sparse, in flight",
                                        "B denser, grown in flight", "C sparse", "D denser"};
    for (int i = 0; i < 5; i++) {
        gi_data *d = &in[i == 1 || i == 3 ? 0 : 1];
        FI_OK(tw_cuda_memcpy_dtoh(fi_ctx, d->got, y[i], yb));
        tw_gpu_expect_written(s.dtype, d->got, M * s.K, s.K, 0xFFFFu, "y");
        fi_expect(d, what[i]);
    }
    tw_cuda_event_destroy(fi_ctx, ev);
    for (int i = 0; i < 5; i++)
        tw_cuda_free(fi_ctx, y[i]);
    tw_cuda_free(fi_ctx, busy);
    fi_two_close(plan, in);
}

/* TWELL_PATH_DENSE runs on sm_90a, elsewhere it is a clear error (y untouched); SPARSE and AUTO
 * run; tensors off 16-byte alignment go to the portable kernel; an odd address is rejected. */
static void test_gpu_ffn_infer_paths_and_alignment(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 256, 1024);
    twell_plan *plan = NULL;
    FI_OK(twell_plan_create(fi_ctx, &s, &plan));
    gi_data d;
    fi_prepare(&d, &s, 200, TW_SYNTH_SKEWED, 20, 99, plan);
    FI_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    twell_status st;
    if (tw_tc_plan_int(plan,
                       TW_TC_DENSE_AVAILABLE)) { /* sm_90a: the dense path (test_gpu_ffn_dense.c) */
        gi_run(&d, plan, FI_POISON_B, NULL);
        fi_expect(&d, "dense");
    } else {
        FI_OK(tw_cuda_memset_d32(fi_ctx, d.dy, 0x12341234u, 200 * s.K / 2, NULL));
        st = twell_ffn_infer(plan, 200, d.dx, d.dp, d.dwg, d.dwu, d.dwd, d.dy, NULL);
        assert_int_equal(st, TWELL_ERR_UNSUPPORTED);
        printf("#   DENSE: %s\n", twell_ctx_errmsg(fi_ctx));
        assert_non_null(strstr(twell_ctx_errmsg(fi_ctx), "TWELL_PATH_DENSE"));
        FI_OK(tw_cuda_synchronize(fi_ctx));
        FI_OK(tw_cuda_memcpy_dtoh(fi_ctx, d.got, d.dy, 200 * s.K * 2u));
        for (size_t i = 0; i < 200 * (size_t)s.K; i++)
            if (d.got[i] != 0x1234u)
                fail_msg("y[%zu] was written by a call that failed", i);
    }
    FI_OK(twell_plan_set_path(plan, TWELL_PATH_SPARSE));
    gi_run(&d, plan, FI_POISON_A, NULL);
    fi_expect(&d, "sparse");
    FI_OK(twell_plan_set_path(plan, TWELL_PATH_AUTO));
    gi_run(&d, plan, FI_POISON_B, NULL);
    fi_expect(&d, "auto");

    /* x 2 bytes and y 4 bytes past a 256-byte boundary (y stays 4-byte aligned for the poison) */
    size_t xb = 200 * s.K * 2u;
    void *bx = NULL, *by = NULL;
    FI_OK(tw_cuda_malloc(fi_ctx, xb + 16, &bx));
    FI_OK(tw_cuda_malloc(fi_ctx, xb + 16, &by));
    FI_OK(tw_cuda_memcpy_htod(fi_ctx, (char *)bx + 2, d.f->x, xb));
    void *keep_x = d.dx, *keep_y = d.dy;
    d.dx = (char *)bx + 2, d.dy = (char *)by + 4;
    gi_run(&d, plan, FI_POISON_A, NULL);
    fi_expect(&d, "unaligned");
    st = twell_ffn_infer(plan, 200, (char *)bx + 1, d.dp, d.dwg, d.dwu, d.dwd, d.dy, NULL);
    assert_int_equal(st, TWELL_ERR_INVALID_ARG);
    d.dx = keep_x, d.dy = keep_y;
    tw_cuda_free(fi_ctx, bx);
    tw_cuda_free(fi_ctx, by);
    gi_free(&d);
    twell_plan_destroy(plan);
}

/* The heavy-row route (rows over a threshold through the dense GEMMs as a gathered block, the
 * sparse pipeline seeing them empty): skewed data with the route off, then on with the default
 * threshold (the plan has seen overflowing rows), then forced with a low threshold that makes
 * more rows heavy than the block holds (the rest stay sparse). Every run within the tolerance of
 * the CPU reference; a second run of each setting gives the same bytes; on Hopper the block got
 * rows. */
static void fi_heavy_run(twell_shape s, size_t M, double nnz, long long low_thr) {
    twell_plan *plan = NULL;
    FI_OK(twell_plan_create(fi_ctx, &s, &plan));
    FI_OK(twell_plan_set_path(plan, TWELL_PATH_SPARSE));
    if (!tw_tc_plan_int(plan, TW_TC_FFN_TILED)) {
        twell_plan_destroy(plan);
        skip();
    }
    gi_data d;
    fi_prepare(&d, &s, M, TW_SYNTH_SKEWED, nnz, 777u + M, plan);
    int sm90 = !strcmp(fi_ctx->cuda->arch, "sm_90a");
    const long long knobs[] = {0, -1, low_thr};
    const char *what[] = {"heavy off", "heavy default", "heavy forced"};
    for (int k = 0; k < 3; k++) {
        FI_OK(tw_test_control(TW_TC_FFN_SET_HEAVY, plan, knobs[k]));
        gi_run(&d, plan, FI_POISON_A, NULL);
        int rows = -1;
        FI_OK(tw_test_control(TW_TC_FFN_HEAVY_ROWS, plan, &rows));
        uint32_t fl[4];
        FI_OK(tw_test_control(TW_TC_FFN_FLAGS, plan, fl));
        printf("#   M=%zu K=%u N=%u %s: %d rows in the dense block, overflowing row-tiles %u, "
               "rows %u, fallback %u\n",
               M, s.K, s.N, what[k], k == 0 ? 0 : rows, fl[2], fl[3], fl[0]);
        fi_expect(&d, what[k]);
        if (k > 0 && sm90 && s.gated)
            assert_true(rows > 0);
        uint16_t *first = gi_keep_y(&d);
        gi_run(&d, plan, FI_POISON_B, NULL);
        gi_expect_same_y(first, d.got, M * s.K, s.K, what[k]);
        free(first);
    }
    gi_free(&d);
    twell_plan_destroy(plan);
}

static void test_gpu_ffn_infer_heavy_rows(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    fi_heavy_run(s, 4096, 29, 20);
    twell_shape_init(&s, 512, 1024);
    s.dtype = FP;
    fi_heavy_run(s, 3000, 29, 8);
}

/* A small case for the sanitizers. */
static void test_gpu_ffn_infer_heavy_small(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 512, 1024);
    fi_heavy_run(s, 333, 29, 12);
}

int main(int argc, char **argv) {
    fi_ctx = tw_gpu_open_or_skip("test_gpu_ffn_infer");
    printf("# %s\n", twell_ctx_device_name(fi_ctx));
    size_t ncases = sizeof fi_cases / sizeof fi_cases[0];
    int small = argc > 1 && !strcmp(argv[1], "small");
    if (small)
        ncases = 3;
    if (argc > 1 && !strcmp(argv[1], "heavy")) { /* the heavy-row route alone (racecheck) */
        const struct CMUnitTest only[] = {cmocka_unit_test(test_gpu_ffn_infer_heavy_small)};
        int rc = _cmocka_run_group_tests("test_gpu_ffn_infer", only, 1, NULL, NULL);
        twell_ctx_destroy(fi_ctx);
        return rc;
    }
    struct CMUnitTest tests[sizeof fi_cases / sizeof fi_cases[0] + 8];
    static char names[sizeof fi_cases / sizeof fi_cases[0]][GI_NAME];
    size_t n = gi_case_tests(tests, 0, names, "test_gpu_ffn_infer", fi_cases, ncases,
                             test_gpu_ffn_infer_case);
    struct CMUnitTest t1 = cmocka_unit_test(test_gpu_ffn_infer_paths_and_alignment);
    struct CMUnitTest t4 = cmocka_unit_test(test_gpu_ffn_infer_alternating_no_sync);
    tests[n++] = t1;
    tests[n++] = t4; /* small too: the sanitizers see the accumulated needs and retired buffers */
    struct CMUnitTest t6 = cmocka_unit_test(test_gpu_ffn_infer_heavy_small);
    tests[n++] = t6;
    if (!small) {
        /* grow_in_flight needs a call still in flight: not under a sanitizer */
        struct CMUnitTest t5 = cmocka_unit_test(test_gpu_ffn_infer_grow_in_flight);
        tests[n++] = t5;
        struct CMUnitTest t2 = cmocka_unit_test(test_gpu_ffn_infer_growth_without_probe);
        struct CMUnitTest t3 = cmocka_unit_test(test_gpu_ffn_infer_chunks_and_streams);
        tests[n++] = t2;
        tests[n++] = t3;
        struct CMUnitTest t7 = cmocka_unit_test(test_gpu_ffn_infer_heavy_rows);
        tests[n++] = t7;
    }
    int rc = _cmocka_run_group_tests("test_gpu_ffn_infer", tests, n, NULL, NULL);
    twell_ctx_destroy(fi_ctx);
    return rc;
}
