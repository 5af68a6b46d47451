/* test_gpu_host.c — the host path of twell_gate_pack and twell_ffn_infer in the steady state:
 * the driver calls each call makes (the wrappers' count on the context, TW_TC_CUDA_DRIVER_CALLS,
 * and their names, TW_TC_CUDA_DRIVER_TRACE), per path: small-batch (one kernel and two), tiled
 * (AUTO and SPARSE), dense (DENSE and AUTO once its counts say dense); the same calls on a context
 * with options.pointer_cache OFF make exactly one pointer query more per pointer (four driver
 * calls: its own enter and leave around cuPointerGetAttributes) and give byte-identical packed and
 * y; every steady call's bytes equal the first call's after it; y within the library's tolerance
 * of the CPU reference (tw_ffn_infer_ref on the same packed bytes; row-relative L2, 5e-3 bf16).
 * Also the pointer contract: host memory is rejected on every call (never remembered), a device
 * address accepted once is not asked about again.
 *
 * The counts assume the device context is not current on the calling thread when the library is
 * called (as here: the tests use only the library's wrappers, which restore the thread's context
 * when they leave): entering costs cuCtxGetCurrent + cuCtxPushCurrent and leaving cuCtxPopCurrent,
 * 3 calls per library call. On a thread where it is current (a PyTorch thread) that is 1
 * (cuCtxGetCurrent). Before this file's changes (main at 98f4c39), in the same situation, each
 * pointer cost 6 calls (its own enter/leave and three cuPointerGetAttribute) and every wrapper
 * inside a call its own cuCtxGetCurrent: gate-pack (small path) 26 calls, twell_ffn_infer small
 * fused 44, tiled AUTO 58 (counted from the code, never measured). Exact counts are asserted on
 * sm_90a (the project's GPUs); elsewhere they are printed only. Exits 77 without a device.
 * labels: gpu */
#include "cuda_driver.h"
#include "synth.h"
#include "twellrt_internal.h"

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

static twell_ctx *gh_ctx;     /* options.pointer_cache ON (the default) */
static twell_ctx *gh_ctx_off; /* options.pointer_cache OFF: every pointer asked of the driver */

#define GH_POISON 0xFFFFu
#define GH_CALLS 5 /* steady-state calls measured, after GH_WARM */
#define GH_WARM 3

static int gh_sm90(void) { return !strcmp(gh_ctx->cuda->arch, "sm_90a"); }

/* The driver calls of entering and leaving a context scope on this thread, as the library's
 * calls do: a wrapper with one call inside (tw_cuda_mem_info: cuMemGetInfo) costs that + 1.
 * 3 when the context is not current (get, push, pop), 1 when it is. */
static unsigned long gh_scope_calls(twell_ctx *ctx) {
    size_t fr = 0, tot = 0;
    unsigned long d0 = 0;
    TW_GPU_OK(ctx, tw_test_control(TW_TC_CUDA_DRIVER_CALLS, ctx, &d0));
    TW_GPU_OK(ctx, tw_cuda_mem_info(ctx, &fr, &tot));
    unsigned long d1 = 0;
    TW_GPU_OK(ctx, tw_test_control(TW_TC_CUDA_DRIVER_CALLS, ctx, &d1));
    return d1 - d0 - 1;
}

static unsigned long gh_calls(twell_ctx *ctx) {
    unsigned long v = 0;
    TW_GPU_OK(ctx, tw_test_control(TW_TC_CUDA_DRIVER_CALLS, ctx, &v));
    return v;
}

/* "cuA cuB ..." of ctx's last n driver calls into buf. */
static const char *gh_trace(twell_ctx *ctx, unsigned long n, char *buf, size_t cap) {
    const char *names[TW_CU_TRACE];
    size_t got = 0;
    TW_GPU_OK(ctx, tw_test_control(TW_TC_CUDA_DRIVER_TRACE, ctx, names, (size_t)n, &got));
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < got && len + 1 < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? " " : "", names[i]);
    return buf;
}

typedef struct {
    const char *name;
    size_t M;
    twell_path path;
    const char *small; /* TW_TC_SMALL_SET_MODE */
    double nnz;        /* the data's active values per row */
    int gate_small;    /* twell_gate_pack runs the small-batch kernel */
    int ffn_calls;     /* twell_ffn_infer's steady-state driver calls inside its scope (sm_90a) */
    twell_path took;   /* TW_TC_DENSE_LAST_PATH after the steady calls */
    int ffn_small;     /* TW_TC_SMALL_LAST_FFN after them */
} gh_case;

/* twell_ffn_infer's calls inside its context scope (the scope's own enter and leave come on top:
 * gh_scope_calls, 3 here):
 *   small fused    cuStreamIsCapturing, cuLaunchKernelEx, cuEventRecord                      3
 *   small two      the same with two launches                                                  4
 *   tiled AUTO     cuStreamIsCapturing, cuEventQuery (the previous call's end, complete: the
 *                  dense side's count read-back and the pipeline's flag read-back ask about the
 *                  same event, the second answer is remembered), 9 launches, cuEventRecord    12
 *   tiled SPARSE   the same without the cuEventQuery (a forced path reads no counts back)      11
 *   dense          cuStreamIsCapturing, cuEventQuery, the h = g ⊙ u launch, cuEventRecord (the
 *                  plan's cuBLASLt resources'); the gate and its count come from the cuBLASLt
 *                  gate-pack of the same call (its packing pass stores the count in mapped
 *                  memory); the two cuBLASLt GEMMs reach the driver through cuBLASLt, not
 *                  through the library's wrappers, so they are not counted                      4
 * (the memsets call the driver directly, uncounted)
 * twell_gate_pack's: small 3 (cuStreamIsCapturing, cuLaunchKernelEx, cuEventRecord); cuBLASLt
 * (M 33..4096, and any M of a DENSE plan) 3 (cuStreamIsCapturing, the packing launch,
 * cuEventRecord; the GEMM uncounted); sm90 3 (2 cuTensorMapEncodeTiled, cuLaunchKernelEx); simt 1
 * (one launch). */
static const gh_case gh_cases[] = {
    {"small fused M=1", 1, TWELL_PATH_AUTO, "auto", 29, 1, 3, TWELL_PATH_SPARSE, 1},
    {"small two-kernel M=24", 24, TWELL_PATH_AUTO, "auto", 29, 1, 4, TWELL_PATH_SPARSE, 1},
    {"tiled AUTO M=64", 64, TWELL_PATH_AUTO, "off", 29, 0, 12, TWELL_PATH_SPARSE, 0},
    {"tiled SPARSE M=64", 64, TWELL_PATH_SPARSE, "auto", 29, 0, 11, TWELL_PATH_SPARSE, 0},
    {"dense DENSE M=256", 256, TWELL_PATH_DENSE, "auto", 29, 0, 4, TWELL_PATH_DENSE, 0},
    /* small path off: the first call runs tiled and counts (read back through the pipeline's
     * own end event), then AUTO goes dense */
    {"dense AUTO M=256 (280/row)", 256, TWELL_PATH_AUTO, "off", 280, 0, 4, TWELL_PATH_DENSE, 0},
};

/* What one context's run of a case left: the last call's bytes and the counts. */
typedef struct {
    uint32_t *packed;
    uint16_t *y;
    unsigned long gate[GH_CALLS], ffn[GH_CALLS];
} gh_run;

static void gh_run_free(gh_run *r) {
    free(r->packed);
    free(r->y);
}

/* Runs case c on ctx: GH_WARM calls, then GH_CALLS counted ones (the stream synchronised before
 * each, so the previous call's work has completed); each counted call's bytes equal the first
 * counted call's. */
static void gh_run_case(twell_ctx *ctx, const gh_case *c, const tw_synth_ffn *f, gh_run *out) {
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    twell_plan *plan = NULL;
    TW_GPU_OK(ctx, twell_plan_create(ctx, &s, &plan));
    TW_GPU_OK(ctx, twell_plan_set_path(plan, c->path));
    TW_GPU_OK(ctx, tw_test_control(TW_TC_SMALL_SET_MODE, plan, c->small));
    size_t M = c->M, xb = M * s.K * 2u, wb = (size_t)s.N * s.K * 2u;
    size_t pb = twell_packed_bytes(&s, M);
    void *dx = tw_gpu_upload(ctx, f->x, xb), *dwg = tw_gpu_upload(ctx, f->wg, wb);
    void *dwu = tw_gpu_upload(ctx, f->wu, wb), *dwd = tw_gpu_upload(ctx, f->wd, wb);
    void *dy = NULL, *dp = NULL;
    TW_GPU_OK(ctx, tw_cuda_malloc(ctx, xb, &dy));
    TW_GPU_OK(ctx, tw_cuda_malloc(ctx, pb, &dp));
    twell_stream st = NULL;
    TW_GPU_OK(ctx, tw_cuda_stream_create(ctx, &st));
    out->packed = malloc(pb);
    out->y = malloc(xb);
    uint32_t *p1 = malloc(pb);
    uint16_t *y1 = malloc(xb);
    assert_true(out->packed && out->y && p1 && y1);
    for (int i = 0; i < GH_WARM + GH_CALLS; i++) {
        TW_GPU_OK(ctx, tw_cuda_memset_d32(ctx, dy, GH_POISON << 16 | GH_POISON, xb / 4u, st));
        TW_GPU_OK(ctx, tw_cuda_memset_d32(ctx, dp, 0xFFFFFFFFu, pb / 4u, st));
        TW_GPU_OK(ctx, tw_cuda_stream_synchronize(ctx, st));
        unsigned long d0 = gh_calls(ctx);
        TW_GPU_OK(ctx, twell_gate_pack(plan, M, dx, dwg, dp, st));
        unsigned long d1 = gh_calls(ctx);
        TW_GPU_OK(ctx, twell_ffn_infer(plan, M, dx, dp, dwg, dwu, dwd, dy, st));
        unsigned long d2 = gh_calls(ctx);
        if (i == GH_WARM + GH_CALLS - 1) {
            char buf[2048];
            printf("#   %-28s gate_pack %lu calls: %s\n", c->name, d1 - d0,
                   gh_trace(ctx, d2 - d0, buf, sizeof buf));
        }
        if (i >= GH_WARM) {
            out->gate[i - GH_WARM] = d1 - d0;
            out->ffn[i - GH_WARM] = d2 - d1;
        }
        TW_GPU_OK(ctx, tw_cuda_stream_synchronize(ctx, st));
        TW_GPU_OK(ctx, tw_cuda_memcpy_dtoh(ctx, out->packed, dp, pb));
        TW_GPU_OK(ctx, tw_cuda_memcpy_dtoh(ctx, out->y, dy, xb));
        if (i == GH_WARM) {
            memcpy(p1, out->packed, pb);
            memcpy(y1, out->y, xb);
        } else if (i > GH_WARM && (memcmp(p1, out->packed, pb) || memcmp(y1, out->y, xb))) {
            fail_msg("%s: steady call %d's bytes differ from the first steady call's", c->name,
                     i - GH_WARM);
        }
    }
    assert_int_equal(tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH), c->took);
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_SMALL_LAST_FFN), c->ffn_small);
    assert_int_equal(tw_tc_plan_int(plan, TW_TC_SMALL_LAST_GATE), c->gate_small);
    free(p1);
    free(y1);
    tw_cuda_stream_destroy(ctx, st);
    void *bufs[] = {dx, dwg, dwu, dwd, dy, dp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        tw_cuda_free(ctx, bufs[i]);
    twell_plan_destroy(plan);
}

static void test_gpu_host_steady_calls(void **state) {
    const gh_case *c = *state;
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    tw_synth_params p = tw_synth_params_default();
    p.M = c->M, p.K = s.K, p.N = s.N, p.dtype = s.dtype, p.gated = 1;
    p.nnz = c->nnz, p.dist = TW_SYNTH_UNIFORM, p.seed = 71;
    tw_synth_ffn *f = NULL;
    TW_GPU_OK(gh_ctx, tw_synth_create(gh_ctx->pool, &p, &f));
    gh_run on, off;
    gh_run_case(gh_ctx, c, f, &on);
    gh_run_case(gh_ctx_off, c, f, &off);

    /* the cache changes no byte */
    size_t pb = twell_packed_bytes(&s, c->M), yb = c->M * s.K * 2u;
    if (memcmp(on.packed, off.packed, pb) != 0)
        fail_msg("%s: packed differs with the pointer cache off", c->name);
    if (memcmp(on.y, off.y, yb) != 0)
        fail_msg("%s: y differs with the pointer cache off", c->name);
    /* y against the CPU reference on the same packed bytes, every row */
    tw_gpu_expect_written(s.dtype, on.y, c->M * s.K, s.K, GH_POISON, "y");
    size_t wr = 0;
    double e = gi_all_rows_err(gh_ctx, &s, c->M, f, on.packed, on.y, &wr);
    printf("#   %-28s max row-rel err %.3e (row %zu)\n", c->name, e, wr);
    if (!(e <= 5e-3))
        fail_msg("%s: row %zu has row-relative error %.3e > 5e-3", c->name, wr, e);

    /* the counts: the same on every steady call; OFF asks about each pointer (3 for gate-pack, 6
     * for gated inference) with 4 driver calls more each */
    unsigned long scope = gh_scope_calls(gh_ctx), per_ptr = scope + 1;
    unsigned long gate_want = scope + (c->gate_small || gh_sm90() ? 3 : 1);
    unsigned long ffn_want = scope + (unsigned long)c->ffn_calls;
    printf("#   %-28s scope %lu; want gate_pack %lu, ffn_infer %lu (sm_90a)\n", c->name, scope,
           gate_want, ffn_want);
    for (int i = 0; i < GH_CALLS; i++) {
        printf("#   %-28s call %d: gate_pack %lu (off %lu), ffn_infer %lu (off %lu)\n", c->name, i,
               on.gate[i], off.gate[i], on.ffn[i], off.ffn[i]);
        assert_int_equal(on.gate[i], on.gate[0]);
        assert_int_equal(on.ffn[i], on.ffn[0]);
        assert_int_equal(off.gate[i], on.gate[i] + 3 * per_ptr);
        assert_int_equal(off.ffn[i], on.ffn[i] + 6 * per_ptr);
    }
    if (gh_sm90()) {
        assert_int_equal(on.gate[0], gate_want);
        assert_int_equal(on.ffn[0], ffn_want);
    }
    gh_run_free(&on);
    gh_run_free(&off);
    tw_synth_destroy(f);
}

/* Host memory is rejected on every call with the same message (a rejected address is never
 * remembered, so each call asks the driver again); a device address accepted once is not asked
 * about again (its next call makes no pointer query). */
static void test_gpu_host_pointer_contract(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    twell_plan *plan = NULL;
    TW_GPU_OK(gh_ctx, twell_plan_create(gh_ctx, &s, &plan));
    size_t M = 1, xb = M * s.K * 2u, wb = (size_t)s.N * s.K * 2u;
    void *hx = calloc(1, xb), *dx = NULL, *dw = NULL, *dp = NULL;
    assert_non_null(hx);
    TW_GPU_OK(gh_ctx, tw_cuda_malloc(gh_ctx, xb, &dx));
    TW_GPU_OK(gh_ctx, tw_cuda_malloc(gh_ctx, wb, &dw));
    TW_GPU_OK(gh_ctx, tw_cuda_malloc(gh_ctx, twell_packed_bytes(&s, M), &dp));
    TW_GPU_OK(gh_ctx, tw_cuda_memset_d32(gh_ctx, dx, 0x3f803f80u, xb / 4u, NULL));
    TW_GPU_OK(gh_ctx, tw_cuda_memset_d32(gh_ctx, dw, 0x3c003c00u, wb / 4u, NULL));
    for (int i = 0; i < 3; i++) {
        unsigned long d0 = gh_calls(gh_ctx);
        assert_int_equal(twell_gate_pack(plan, M, hx, dw, dp, NULL), TWELL_ERR_INVALID_ARG);
        unsigned long d = gh_calls(gh_ctx) - d0;
        printf("#   host x, call %d: %s (%lu driver calls)\n", i, twell_ctx_errmsg(gh_ctx), d);
        assert_non_null(strstr(twell_ctx_errmsg(gh_ctx), "x is host memory"));
        assert_true(d >= 1); /* asked again: rejected addresses are not remembered */
    }
    TW_GPU_OK(gh_ctx, twell_gate_pack(plan, M, dx, dw, dp, NULL)); /* first use: asked */
    TW_GPU_OK(gh_ctx, tw_cuda_synchronize(gh_ctx));
    unsigned long d0 = gh_calls(gh_ctx);
    TW_GPU_OK(gh_ctx, twell_gate_pack(plan, M, dx, dw, dp, NULL));
    unsigned long d = gh_calls(gh_ctx) - d0;
    char buf[1024];
    printf("#   device x again: %lu driver calls: %s\n", d, gh_trace(gh_ctx, d, buf, sizeof buf));
    assert_null(strstr(buf, "cuPointerGetAttribute"));
    /* a host pointer after the device ones: still rejected */
    assert_int_equal(twell_gate_pack(plan, M, dx, dw, (uint32_t *)hx, NULL), TWELL_ERR_INVALID_ARG);
    assert_non_null(strstr(twell_ctx_errmsg(gh_ctx), "packed is host memory"));
    TW_GPU_OK(gh_ctx, tw_cuda_synchronize(gh_ctx));
    tw_cuda_free(gh_ctx, dx);
    tw_cuda_free(gh_ctx, dw);
    tw_cuda_free(gh_ctx, dp);
    free(hx);
    twell_plan_destroy(plan);
}

int main(void) {
    gh_ctx = tw_gpu_open_or_skip("test_gpu_host");
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CUDA;
    o.pointer_cache = TWELL_SWITCH_OFF;
    if (twell_ctx_create(&o, &gh_ctx_off) != TWELL_OK) {
        fprintf(stderr, "test_gpu_host: a second context failed\n");
        return 1;
    }
    printf("# %s\n", twell_ctx_device_name(gh_ctx));
    enum { NC = sizeof gh_cases / sizeof gh_cases[0] };
    struct CMUnitTest tests[NC + 1];
    static char names[NC][96];
    for (size_t i = 0; i < NC; i++) {
        snprintf(names[i], sizeof names[i], "test_gpu_host_steady_calls %s", gh_cases[i].name);
        struct CMUnitTest t = {names[i], test_gpu_host_steady_calls, NULL, NULL,
                               (void *)&gh_cases[i]};
        tests[i] = t;
    }
    struct CMUnitTest t = cmocka_unit_test(test_gpu_host_pointer_contract);
    tests[NC] = t;
    int rc = _cmocka_run_group_tests("test_gpu_host", tests, NC + 1, NULL, NULL);
    twell_ctx_destroy(gh_ctx_off);
    twell_ctx_destroy(gh_ctx);
    return rc;
}
