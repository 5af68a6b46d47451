/*
 * test_gpu_nonfinite.c — NaN and ±Inf propagate as the dense computation propagates them
 * (twellrt.h "Non-finite values") on every CUDA route: the small-batch kernels (M 1, 8), the row
 * kernel and the up/down kernels (M 256, forced), the tiled pipeline (SPARSE, M 256 and 4096, its
 * overflow and heavy-row paths: the NaN x row activates every neuron), the dense route
 * (TWELL_PATH_DENSE, cuBLASLt) and training forward and backward (SPARSE, and DENSE where it
 * runs). Each result is judged value by value against the fp64 dense reference's classes: for
 * non-finite values in x and in the packing weight, finite exactly where the reference is; for a
 * non-finite Wu or Wd row, non-finite at least where the reference is (other rows of a tile may
 * become NaN through 0·NaN: the header's stated limit). Every gate-pack word holds a valid slot
 * value (NaN only as the canonical one). `test_gpu_nonfinite small`: three quick cases
 * (compute-sanitizer runs). Exits 77 without a device.
 * labels: gpu
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cuda_driver.h"
#include "half.h"
#include "test_control.h"
#include "tw_gpu.h"
#include "tw_nonfinite.h"
#include "twellrt.h"
#include "twellrt_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static twell_ctx *nf_ctx;

typedef struct {
    const char *route; /* "small", "row", "updown", "tiled", "dense", "train" */
    size_t M;
    twell_dtype dt;
    int gated;
    twell_path path;
    int quick; /* one of the `small` cases */
} nf_case;

#define BF TWELL_DTYPE_BF16
#define FP TWELL_DTYPE_FP16
static const nf_case nf_cases[] = {
    {"small", 8, BF, 1, TWELL_PATH_AUTO, 1},      {"row", 256, BF, 1, TWELL_PATH_AUTO, 1},
    {"train", 256, BF, 1, TWELL_PATH_SPARSE, 1},  {"small", 1, BF, 1, TWELL_PATH_AUTO, 0},
    {"small", 8, FP, 0, TWELL_PATH_AUTO, 0},      {"updown", 256, FP, 1, TWELL_PATH_AUTO, 0},
    {"tiled", 256, FP, 0, TWELL_PATH_SPARSE, 0},  {"tiled", 4096, BF, 1, TWELL_PATH_SPARSE, 0},
    {"tiled", 4096, FP, 1, TWELL_PATH_SPARSE, 0}, {"dense", 256, BF, 1, TWELL_PATH_DENSE, 0},
    {"dense", 4096, FP, 0, TWELL_PATH_DENSE, 0},  {"train", 1024, FP, 1, TWELL_PATH_SPARSE, 0},
    {"train", 1024, BF, 1, TWELL_PATH_DENSE, 0},
};

static void *nf_alloc(size_t bytes) {
    void *p = NULL;
    TW_GPU_OK(nf_ctx, tw_cuda_malloc(nf_ctx, bytes, &p));
    TW_GPU_OK(nf_ctx, tw_cuda_memset_d32(nf_ctx, p, 0xabababab, bytes / 4u, NULL)); /* poison */
    return p;
}

static void *nf_down(const void *dptr, size_t bytes) {
    void *h = malloc(bytes);
    assert_non_null(h);
    TW_GPU_OK(nf_ctx, tw_cuda_synchronize(nf_ctx));
    TW_GPU_OK(nf_ctx, tw_cuda_memcpy_dtoh(nf_ctx, h, dptr, bytes));
    return h;
}

/* The device copies of one scenario's tensors. */
typedef struct {
    void *x, *wg, *wu, *wd, *dy;
} nf_dev;

static void nf_up(const tw_nf_data *d, nf_dev *g) {
    const size_t xb = d->M * d->s.K * 2u, wb = (size_t)d->s.N * d->s.K * 2u;
    g->x = tw_gpu_upload(nf_ctx, d->x, xb);
    g->dy = tw_gpu_upload(nf_ctx, d->dy, xb);
    g->wu = tw_gpu_upload(nf_ctx, d->wu, wb);
    g->wd = tw_gpu_upload(nf_ctx, d->wd, wb);
    g->wg = d->wg ? tw_gpu_upload(nf_ctx, d->wg, wb) : NULL;
}

static void nf_dev_free(nf_dev *g) {
    tw_cuda_free(nf_ctx, g->x);
    tw_cuda_free(nf_ctx, g->wg);
    tw_cuda_free(nf_ctx, g->wu);
    tw_cuda_free(nf_ctx, g->wd);
    tw_cuda_free(nf_ctx, g->dy);
}

/* Routes the plan's inference calls as the case asks. */
static void nf_route(twell_plan *plan, const nf_case *c) {
    TW_GPU_OK(nf_ctx, twell_plan_set_path(plan, c->path));
    const int smallish =
        !strcmp(c->route, "small") || !strcmp(c->route, "row") || !strcmp(c->route, "updown");
    TW_GPU_OK(nf_ctx, tw_test_control(TW_TC_SMALL_SET_MODE, plan, smallish ? "force" : "off"));
    TW_GPU_OK(nf_ctx, tw_test_control(TW_TC_SMALL_SET_UPDOWN, plan, !strcmp(c->route, "updown")));
    /* AUTO never dense at this density, so the forced small-batch kernels run */
    TW_GPU_OK(nf_ctx, tw_test_control(TW_TC_DENSE_SET_THRESHOLD, plan, 1e9));
}

static size_t nf_infer(const nf_case *c, const tw_nf_data *d, const tw_nf_ref *r) {
    const twell_shape *s = &d->s;
    twell_plan *plan = NULL;
    TW_GPU_OK(nf_ctx, twell_plan_create(nf_ctx, s, &plan));
    nf_route(plan, c);
    nf_dev g;
    nf_up(d, &g);
    const size_t pb = twell_packed_bytes(s, d->M), yb = d->M * s->K * 2u;
    uint32_t *packed = nf_alloc(pb);
    void *y = nf_alloc(yb);
    TW_GPU_OK(nf_ctx, twell_gate_pack(plan, d->M, g.x, s->gated ? g.wg : g.wu, packed, NULL));
    twell_status st = twell_ffn_infer(plan, d->M, g.x, packed, g.wg, g.wu, g.wd, y, NULL);
    size_t bad = 0;
    if (st == TWELL_ERR_UNSUPPORTED) {
        printf("#   %s M=%zu: skipped (%s)\n", c->route, d->M, twell_ctx_errmsg(nf_ctx));
    } else {
        TW_GPU_OK(nf_ctx, st);
        const char *kern = NULL;
        (void)tw_test_control(TW_TC_SMALL_LAST_FUSED_KERNEL, plan, &kern);
        uint32_t *hp = nf_down(packed, pb);
        uint16_t *hy = nf_down(y, yb);
        const uint32_t W = s->T / s->C, NT = s->N / s->T;
        for (size_t m = 0; m < d->M; m++) {
            size_t total = 0;
            for (uint32_t t = 0; t < NT; t++) {
                const uint32_t *tile = hp + m * (s->N / s->C) + (size_t)t * W;
                const uint32_t stored = tile[0] < W - 1 ? tile[0] : W - 1;
                total += tile[0];
                for (uint32_t i = 0; i < stored; i++)
                    bad += !tw_half_slot_ok(s->dtype, (uint16_t)(tile[1 + i] >> 16));
            }
            if (d->where == TW_NF_X && m == 1 && total != s->N)
                bad++, printf("  row 1 (NaN in x): %zu active, want %u\n", total, s->N);
        }
        const int mode = tw_nf_strict(d->where) ? TW_NF_FINITE : TW_NF_ONE_SIDED;
        bad += tw_nf_compare(s->dtype, hy, NULL, r->y, d->M * s->K, s->K, mode, "y");
        printf("#   %s M=%zu %s %s, %s (kernel %s): %s\n", c->route, d->M,
               s->dtype == BF ? "bf16" : "fp16", s->gated ? "gated" : "non-gated",
               tw_nf_where_name(d->where), kern && kern[0] ? kern : "-", bad ? "FAILED" : "ok");
        free(hp);
        free(hy);
    }
    tw_cuda_free(nf_ctx, packed);
    tw_cuda_free(nf_ctx, y);
    nf_dev_free(&g);
    twell_plan_destroy(plan);
    return bad;
}

static size_t nf_train(const nf_case *c, const tw_nf_data *d, const tw_nf_ref *r, float lambda) {
    const twell_shape *s = &d->s;
    const size_t M = d->M, K = s->K, N = s->N;
    twell_plan *plan = NULL;
    twell_train_state *ts = NULL;
    TW_GPU_OK(nf_ctx, twell_plan_create(nf_ctx, s, &plan));
    TW_GPU_OK(nf_ctx, twell_plan_set_path(plan, c->path));
    TW_GPU_OK(nf_ctx, twell_train_state_create(plan, &ts));
    nf_dev g;
    nf_up(d, &g);
    void *y = nf_alloc(M * K * 2u), *dx = nf_alloc(M * K * 2u);
    float *dwg = nf_alloc(N * K * 4u), *dwu = nf_alloc(N * K * 4u), *dwd = nf_alloc(N * K * 4u);
    float *stats = nf_alloc(8u);
    size_t bad = 0;
    twell_status st = twell_ffn_forward_train(plan, M, g.x, g.wg, g.wu, g.wd, y, stats, ts, NULL);
    if (st == TWELL_ERR_UNSUPPORTED) {
        printf("#   train M=%zu: skipped (%s)\n", M, twell_ctx_errmsg(nf_ctx));
    } else {
        TW_GPU_OK(nf_ctx, st);
        TW_GPU_OK(nf_ctx, twell_ffn_backward(plan, ts, M, g.x, g.wg, g.wu, g.wd, g.dy, lambda, dx,
                                             dwg, dwu, dwd, NULL));
        float *hs = nf_down(stats, 8u);
        uint16_t *hy = nf_down(y, M * K * 2u), *hdx = nf_down(dx, M * K * 2u);
        float *hwg = nf_down(dwg, N * K * 4u), *hwu = nf_down(dwu, N * K * 4u);
        float *hwd = nf_down(dwd, N * K * 4u);
        size_t nnz = 0;
        for (size_t m = 0; m < M; m++)
            nnz += r->active[m];
        /* the support may differ from fp64's only at pre-activations within fp32 rounding of 0 */
        const double l0 = (double)nnz / (double)M, dl0 = fabs((double)hs[0] - l0);
        if (dl0 > 0.01 * l0)
            bad++, printf("  L0 %g, reference %g\n", (double)hs[0], l0);
        if (tw_nf_strict(d->where) && tw_nf_classf(hs[1]) != r->l1)
            bad++, printf("  L1 %g: not in the reference's class\n", (double)hs[1]);
        const int mode = tw_nf_strict(d->where) ? TW_NF_FINITE : TW_NF_ONE_SIDED;
        bad += tw_nf_compare(s->dtype, hy, NULL, r->y, M * K, K, mode, "y");
        bad += tw_nf_compare(s->dtype, hdx, NULL, r->dx, M * K, K, mode, "dx");
        /* a weight gradient sums over every row: one-sided (the spread of a tile reaches it) */
        bad += tw_nf_compare(s->dtype, NULL, hwg, r->dwg, N * K, K, TW_NF_ONE_SIDED, "dwg");
        bad += tw_nf_compare(s->dtype, NULL, hwu, r->dwu, N * K, K, TW_NF_ONE_SIDED, "dwu");
        bad += tw_nf_compare(s->dtype, NULL, hwd, r->dwd, N * K, K, TW_NF_ONE_SIDED, "dwd");
        printf("#   train %s M=%zu %s, %s: L0 %g (reference %g), L1 %g: %s\n",
               c->path == TWELL_PATH_DENSE ? "dense" : "sparse", M,
               s->dtype == BF ? "bf16" : "fp16", tw_nf_where_name(d->where), (double)hs[0], l0,
               (double)hs[1], bad ? "FAILED" : "ok");
        free(hs);
        free(hy);
        free(hdx);
        free(hwg);
        free(hwu);
        free(hwd);
    }
    tw_cuda_free(nf_ctx, y);
    tw_cuda_free(nf_ctx, dx);
    tw_cuda_free(nf_ctx, dwg);
    tw_cuda_free(nf_ctx, dwu);
    tw_cuda_free(nf_ctx, dwd);
    tw_cuda_free(nf_ctx, stats);
    nf_dev_free(&g);
    twell_train_state_destroy(ts);
    twell_plan_destroy(plan);
    return bad;
}

static void test_gpu_nonfinite_case(void **state) {
    const nf_case *c = *state;
    const int train = !strcmp(c->route, "train");
    twell_shape s;
    twell_shape_init(&s, 256, 1024);
    s.dtype = c->dt;
    s.gated = c->gated;
    size_t bad = 0;
    for (int w = 0; w < TW_NF_COUNT; w++) {
        if (w == TW_NF_WU && !c->gated)
            continue;
        tw_nf_data d;
        assert_int_equal(tw_nf_make(&d, &s, c->M, (tw_nf_where)w, 0.015, 0xc0ffeeu + c->M), 0);
        tw_nf_ref r;
        assert_int_equal(tw_nf_reference(&d, train, 0.01, &r), 0);
        bad += train ? nf_train(c, &d, &r, 0.01f) : nf_infer(c, &d, &r);
        tw_nf_ref_free(&r);
        tw_nf_free(&d);
    }
    assert_int_equal(bad, 0);
}

int main(int argc, char **argv) {
    nf_ctx = tw_gpu_open_or_skip("test_gpu_nonfinite");
    printf("# %s\n", twell_ctx_device_name(nf_ctx));
    const int quick = argc > 1 && !strcmp(argv[1], "small");
    enum { NF_N = sizeof nf_cases / sizeof nf_cases[0] };
    struct CMUnitTest tests[NF_N];
    static char names[NF_N][96];
    size_t n = 0;
    for (size_t i = 0; i < NF_N; i++) {
        const nf_case *c = &nf_cases[i];
        if (quick && !c->quick)
            continue;
        snprintf(names[n], sizeof names[n], "test_gpu_nonfinite_%s_M%zu_%s_%s_%s", c->route, c->M,
                 c->dt == BF ? "bf16" : "fp16", c->gated ? "gated" : "plain",
                 c->path == TWELL_PATH_DENSE    ? "dense"
                 : c->path == TWELL_PATH_SPARSE ? "sparse"
                                                : "auto");
        struct CMUnitTest t = {names[n], test_gpu_nonfinite_case, NULL, NULL, (void *)c};
        tests[n++] = t;
    }
    int rc = _cmocka_run_group_tests("test_gpu_nonfinite", tests, n, NULL, NULL);
    twell_ctx_destroy(nf_ctx);
    return rc;
}
