/* test_gpu_ffn_layer.c — twell_ffn_layer (the layer from x in one call) on the GPU, against the
 * CPU reference tw_ffn_infer_ref and against twell_gate_pack + twell_ffn_infer of the same plan,
 * over M ∈ {1, 2, 7, 16, 17, 33, 64, 255, 1000, 2047, 2048, 4096}, gated and non-gated, both
 * dtypes, T and C varied, uniform and skewed data with overflowing row-tiles:
 *   - SPARSE: the scratch receives exactly the packed activation twell_gate_pack writes, and y is
 *     bitwise twell_ffn_infer's from it;
 *   - DENSE: the scratch is not written (nothing is packed), y is within the dense route's
 *     tolerance of the reference and bitwise the same on a repeat;
 *   - AUTO sent dense (a test threshold): of 32 calls after the first, exactly 2 pack (one in 16
 *     recounts), the rest leave the scratch alone, every y within tolerance; AUTO kept sparse:
 *     every call packs;
 *   - captured into a CUDA graph (DENSE and AUTO after twell_plan_reserve) and replayed on new data
 *     in the same buffers: bitwise equal to an eager call on that data.
 * Exits 77 without a device. `test_gpu_ffn_layer small`: the first cases only (sanitizer runs).
 * labels: gpu slow */
#include "cuda_driver.h"
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

static twell_ctx *fl_ctx;

#define FL_OK(expr) TW_GPU_OK(fl_ctx, expr)
#define FL_SENTINEL 0xA5A5A5A5u /* a word no packing writes: never a valid TwELL count word */
#define FL_POISON 0xFFFFu
#define FL_CALLS 32u   /* AUTO calls counted after the first */
#define FL_RECOUNT 16u /* one AUTO dense call in this many packs (ffn_route.c) */

/* The first three are small (sanitizer). Every M of the list, each dtype and layer kind
 * more than once, skewed cases with overflowing row-tiles. */
static const gi_case fl_cases[] = {
    {7, 512, 1024, 256, 8, BF, 1, UNI, 20, 0},     {64, 512, 1024, 128, 8, FP, 0, SKW, 30, 1},
    {33, 2048, 5632, 256, 8, BF, 1, SKW, 29, 0},   {1, 2048, 5632, 256, 8, BF, 1, UNI, 29, 0},
    {2, 2048, 5632, 256, 8, FP, 1, UNI, 29, 0},    {16, 2048, 5632, 256, 8, BF, 0, SKW, 29, 0},
    {17, 1024, 2048, 256, 8, FP, 1, SKW, 60, 0},   {255, 2048, 5632, 256, 8, BF, 1, SKW, 29, 1},
    {1000, 2048, 5632, 256, 8, BF, 1, SKW, 29, 1}, {1000, 512, 1024, 64, 2, FP, 0, UNI, 40, 0},
    {2047, 2048, 5632, 256, 8, FP, 1, UNI, 29, 0}, {2048, 2048, 5632, 256, 8, BF, 0, SKW, 29, 1},
    {4096, 2048, 5632, 256, 8, BF, 1, SKW, 29, 1}, {4096, 1024, 2048, 128, 4, FP, 1, UNI, 50, 0},
};

/* A scratch buffer for the packed activation, the layer's output, and what they held last. */
typedef struct {
    uint32_t *dscratch;
    uint32_t *scratch; /* host copy */
    size_t words;
} fl_bufs;

/* One twell_ffn_layer of d's rows on the default stream: scratch filled with FL_SENTINEL, y
 * poisoned; waited for, y to d->got (every element written), the scratch to b->scratch. Returns
 * whether any scratch word was written. */
static int fl_layer(gi_data *d, twell_plan *plan, fl_bufs *b) {
    const twell_shape *s = &d->s;
    size_t n = d->M * s->K;
    FL_OK(tw_cuda_memset_d32(fl_ctx, b->dscratch, FL_SENTINEL, b->words, NULL));
    FL_OK(tw_cuda_memset_d32(fl_ctx, d->dy, FL_POISON << 16 | FL_POISON, n / 2, NULL));
    FL_OK(twell_ffn_layer(plan, d->M, d->dx, d->dwg, d->dwu, d->dwd, d->dy, b->dscratch, NULL));
    FL_OK(tw_cuda_synchronize(fl_ctx));
    FL_OK(tw_cuda_memcpy_dtoh(fl_ctx, d->got, d->dy, n * 2u));
    FL_OK(tw_cuda_memcpy_dtoh(fl_ctx, b->scratch, b->dscratch, b->words * 4u));
    tw_gpu_expect_written(s->dtype, d->got, n, s->K, FL_POISON, "y");
    for (size_t i = 0; i < b->words; i++)
        if (b->scratch[i] != FL_SENTINEL)
            return 1;
    return 0;
}

static void fl_expect(const gi_data *d, const char *what) { gi_expect(d, 14, what); }

static void test_gpu_ffn_layer_case(void **state) {
    const gi_case *c = *state;
    twell_shape s = gi_shape(c);
    twell_plan *plan = NULL;
    FL_OK(twell_plan_create(fl_ctx, &s, &plan));
    gi_data d;
    gi_setup(&d, fl_ctx, &s, c->M, c->dist, c->nnz, 7000u + c->M + c->K + c->N);
    fl_bufs b = {NULL, NULL, twell_packed_words(&s, c->M)};
    void *p = NULL;
    FL_OK(tw_cuda_malloc(fl_ctx, b.words * 4u, &p));
    b.dscratch = p;
    b.scratch = malloc(b.words * 4u);
    assert_non_null(b.scratch);
    size_t yb = c->M * s.K * 2u;
    uint16_t *y_ref = malloc(yb);
    assert_non_null(y_ref);

    /* SPARSE: packed as twell_gate_pack's, y as twell_ffn_infer's */
    FL_OK(twell_plan_set_path(plan, TWELL_PATH_SPARSE));
    gi_gate_pack(&d, plan);
    gi_count(&d);
    gi_check_rows(&d, 1000, 96, 16);
    printf("# M=%-5zu K=%-4u N=%-4u T=%u C=%u %s %s %-7s: %.1f active per row, %zu overflowing "
           "row-tiles\n",
           c->M, s.K, s.N, s.T, s.C, s.dtype == BF ? "bf16" : "fp16",
           s.gated ? "gated" : "non-gated", tw_synth_dist_name(c->dist),
           (double)d.total / (double)c->M, d.ovf_tiles);
    if (c->want_overflow && d.ovf_tiles == 0)
        fail_msg("the case was meant to overflow row-tiles but has none");
    gi_run(&d, plan, FL_POISON, NULL);
    memcpy(y_ref, d.got, yb);
    assert_true(fl_layer(&d, plan, &b));
    if (memcmp(b.scratch, d.packed, b.words * 4u))
        fail_msg("SPARSE: the scratch differs from twell_gate_pack's packed activation");
    gi_expect_same_y(y_ref, d.got, c->M * s.K, s.K, "SPARSE layer vs gate-pack + ffn_infer: ");
    fl_expect(&d, "sparse layer");

    /* DENSE: nothing packed; within tolerance; bitwise repeatable */
    FL_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    if (fl_layer(&d, plan, &b))
        fail_msg("DENSE: twell_ffn_layer wrote the packed scratch");
    assert_int_equal(tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH), TWELL_PATH_DENSE);
    fl_expect(&d, "dense layer");
    memcpy(y_ref, d.got, yb);
    assert_false(fl_layer(&d, plan, &b));
    gi_expect_same_y(y_ref, d.got, c->M * s.K, s.K, "DENSE layer repeat: ");

    /* AUTO sent dense at every M by a test threshold: one call in FL_RECOUNT packs */
    FL_OK(twell_plan_set_path(plan, TWELL_PATH_AUTO));
    FL_OK(tw_test_control(TW_TC_SMALL_SET_MODE, plan, "off"));
    FL_OK(tw_test_control(TW_TC_DENSE_SET_MIN_ROWS, plan, (size_t)1));
    FL_OK(tw_test_control(TW_TC_DENSE_SET_THRESHOLD, plan, 0.25));
    (void)fl_layer(&d, plan, &b); /* its counts reach the host: AUTO's estimate */
    unsigned packed_calls = 0;
    for (unsigned i = 0; i < FL_CALLS; i++) {
        packed_calls += (unsigned)fl_layer(&d, plan, &b);
        if (tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH) != TWELL_PATH_DENSE)
            fail_msg("AUTO, threshold 0.25: call %u ran path %d, not DENSE", i + 1,
                     (int)tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH));
        if (i < 2 || i == FL_CALLS - 1)
            fl_expect(&d, "auto dense");
    }
    printf("#   AUTO dense: %u of %u calls packed\n", packed_calls, FL_CALLS);
    assert_int_equal(packed_calls, FL_CALLS / FL_RECOUNT);
    /* kept sparse: every call packs */
    FL_OK(tw_test_control(TW_TC_DENSE_SET_THRESHOLD, plan, 1e9));
    for (unsigned i = 0; i < 3; i++) {
        assert_true(fl_layer(&d, plan, &b));
        assert_int_equal(tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH), TWELL_PATH_SPARSE);
    }
    fl_expect(&d, "auto sparse");

    free(y_ref);
    free(b.scratch);
    tw_cuda_free(fl_ctx, b.dscratch);
    gi_free(&d);
    twell_plan_destroy(plan);
}

/* ---- captured: DENSE and AUTO after twell_plan_reserve, replayed on new data ---- */

typedef struct {
    size_t M;
    twell_path path;
    double hint; /* twell_plan_reserve's nnz_per_row and the data's */
    twell_path want;
} fl_graph_case;

static const fl_graph_case fl_graph_cases[] = {
    {64, TWELL_PATH_DENSE, 29, TWELL_PATH_DENSE},
    {1000, TWELL_PATH_AUTO, 280, TWELL_PATH_DENSE},
    {1000, TWELL_PATH_AUTO, 29, TWELL_PATH_SPARSE},
    {4096, TWELL_PATH_AUTO, 280, TWELL_PATH_DENSE},
};

/* Uploads f's x and weights into d's buffers (same addresses). */
static void fl_load(gi_data *d, const tw_synth_ffn *f) {
    const twell_shape *s = &d->s;
    size_t xb = d->M * s->K * 2u, wb = (size_t)s->N * s->K * 2u;
    FL_OK(tw_cuda_memcpy_htod(fl_ctx, d->dx, f->x, xb));
    if (s->gated)
        FL_OK(tw_cuda_memcpy_htod(fl_ctx, d->dwg, f->wg, wb));
    FL_OK(tw_cuda_memcpy_htod(fl_ctx, d->dwu, f->wu, wb));
    FL_OK(tw_cuda_memcpy_htod(fl_ctx, d->dwd, f->wd, wb));
}

static void test_gpu_ffn_layer_graph(void **state) {
    const fl_graph_case *c = *state;
    if (strcmp(fl_ctx->cuda->arch, "sm_90a") && c->want == TWELL_PATH_DENSE)
        skip();
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    twell_plan *plan = NULL;
    FL_OK(twell_plan_create(fl_ctx, &s, &plan));
    FL_OK(twell_plan_set_path(plan, c->path));
    FL_OK(twell_plan_reserve(plan, c->M, c->hint));
    gi_data d;
    gi_setup(&d, fl_ctx, &s, c->M, UNI, c->hint, 91);
    tw_synth_ffn *fb = gi_synth(fl_ctx, &s, c->M, UNI, c->hint, 92);
    twell_stream cs = NULL;
    FL_OK(tw_cuda_stream_create(fl_ctx, &cs));
    size_t n = c->M * s.K, yb = n * 2u;
    FL_OK(tw_cuda_capture_begin(fl_ctx, cs, 0)); /* global mode: nothing may wait or allocate */
    twell_status call = twell_ffn_layer(plan, c->M, d.dx, d.dwg, d.dwu, d.dwd, d.dy, d.dp, cs);
    tw_cuda_graph g = NULL;
    twell_status end = tw_cuda_capture_end(fl_ctx, cs, &g);
    if (call != TWELL_OK || end != TWELL_OK)
        fail_msg("capture: call %s, end %s: %s", twell_status_name(call), twell_status_name(end),
                 twell_ctx_errmsg(fl_ctx));
    twell_path took = tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH);
    printf("#   M=%zu path %d hint %g: captured path %d\n", c->M, (int)c->path, c->hint, (int)took);
    assert_int_equal(took, c->want);
    uint16_t *y_graph = malloc(yb);
    assert_non_null(y_graph);
    fl_load(&d, fb); /* new data in the same buffers */
    FL_OK(tw_cuda_memset_d32(fl_ctx, d.dy, FL_POISON << 16 | FL_POISON, n / 2, cs));
    FL_OK(tw_cuda_graph_launch(fl_ctx, g, cs));
    FL_OK(tw_cuda_stream_synchronize(fl_ctx, cs));
    FL_OK(tw_cuda_memcpy_dtoh(fl_ctx, y_graph, d.dy, yb));
    tw_gpu_expect_written(s.dtype, y_graph, n, s.K, FL_POISON, "replayed y");
    /* the eager call on the same data and route: AUTO's dense calls through DENSE (an eager AUTO
     * call may pack to recount), its sparse ones through AUTO (the estimate is still the
     * reserve's: the same kernels) */
    if (took == TWELL_PATH_DENSE)
        FL_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    FL_OK(twell_ffn_layer(plan, c->M, d.dx, d.dwg, d.dwu, d.dwd, d.dy, d.dp, cs));
    FL_OK(tw_cuda_stream_synchronize(fl_ctx, cs));
    FL_OK(tw_cuda_memcpy_dtoh(fl_ctx, d.got, d.dy, yb));
    gi_expect_same_y(d.got, y_graph, n, s.K, "replay vs eager: ");
    tw_cuda_graph_destroy(fl_ctx, g);
    tw_cuda_stream_destroy(fl_ctx, cs);
    free(y_graph);
    tw_synth_destroy(fb);
    gi_free(&d);
    twell_plan_destroy(plan);
}

int main(int argc, char **argv) {
    fl_ctx = tw_gpu_open_or_skip("test_gpu_ffn_layer");
    int small = argc > 1 && !strcmp(argv[1], "small");
    size_t nc = small ? 3 : sizeof fl_cases / sizeof fl_cases[0];
    size_t ng = small ? 1 : sizeof fl_graph_cases / sizeof fl_graph_cases[0];
    struct CMUnitTest tests[sizeof fl_cases / sizeof fl_cases[0] + 4];
    static char names[sizeof fl_cases / sizeof fl_cases[0]][GI_NAME];
    size_t at = gi_case_tests(tests, 0, names, "layer", fl_cases, nc, test_gpu_ffn_layer_case);
    static char gnames[sizeof fl_graph_cases / sizeof fl_graph_cases[0]][GI_NAME];
    for (size_t i = 0; i < ng; i++) {
        const fl_graph_case *g = &fl_graph_cases[i];
        struct CMUnitTest t = cmocka_unit_test_prestate(test_gpu_ffn_layer_graph, (void *)g);
        snprintf(gnames[i], GI_NAME, "graph_M%zu_%s_hint%g", g->M,
                 g->path == TWELL_PATH_AUTO ? "auto" : "dense", g->hint);
        t.name = gnames[i];
        tests[at++] = t;
    }
    int rc = _cmocka_run_group_tests("test_gpu_ffn_layer", tests, at, NULL, NULL);
    twell_ctx_destroy(fl_ctx);
    return rc;
}
