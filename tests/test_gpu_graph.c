/* test_gpu_graph.c — twell_gate_pack + twell_ffn_infer captured into a CUDA graph (global capture
 * mode, the strictest: any call that could wait, query or allocate invalidates the capture) and
 * replayed with new data in the same buffers: the replay's packed and y bytes equal an eager call
 * of the same path on the same plan, for M from 1 to 4096 and every path (AUTO, SPARSE, DENSE),
 * and y is within tolerance of the CPU reference (tw_ffn_infer_ref on the same packed bytes; 5e-3
 * bf16, 1e-3 fp16, row-relative L2, the library's stated tolerance). Also: no host wait while
 * capturing; AUTO's path fixed at capture from the reserve's estimate and nothing counted by
 * replays; data needing more than the reserved room (exact device-side fallback, decided at each
 * replay, flag words read back); replays still right after eager calls of larger M replaced the
 * workspace (the graph's buffers are kept); capture with nothing reserved; twell_plan_reserve's
 * argument errors. Exits 77 without a device.
 * `test_gpu_graph small`: the first cases only (compute-sanitizer runs).
 * labels: gpu */
#include "cuda_dense.h"
#include "cuda_driver.h"
#include "cuda_ffn.h"
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
#include "tw_gpu_infer.h"
#include "tw_tc.h"

static twell_ctx *gr_ctx;
static twell_stream gr_cs; /* the stream calls are captured on and graphs replayed on */

#define GR_OK(expr) TW_GPU_OK(gr_ctx, expr)
#define GR_POISON 0xFFFFu
#define GR_CAPTURE_GLOBAL 0
#define GR_CAPTURE_RELAXED 2

#define P_AUTO TWELL_PATH_AUTO
#define P_SPARSE TWELL_PATH_SPARSE
#define P_DENSE TWELL_PATH_DENSE

static int gr_sm90(void) { return !strcmp(gr_ctx->cuda->arch, "sm_90a"); }

/* Device buffers of one plan's calls, and what the last run left in them (host copies). */
typedef struct {
    twell_shape s;
    size_t M;
    void *dx, *dwg, *dwu, *dwd, *dy;
    uint32_t *dp;
    uint32_t *packed; /* [M, N/C] */
    uint16_t *y;      /* [M, K] */
} gr_bufs;

static tw_synth_ffn *gr_data(const twell_shape *s, size_t M, tw_synth_dist dist, double nnz,
                             uint64_t seed) {
    return gi_synth(gr_ctx, s, M, dist, nnz, seed);
}

static void gr_alloc(gr_bufs *b, const twell_shape *s, size_t M) {
    memset(b, 0, sizeof *b);
    b->s = *s;
    b->M = M;
    size_t xb = M * s->K * 2u, wb = (size_t)s->N * s->K * 2u, pw = twell_packed_words(s, M);
    GR_OK(tw_cuda_malloc(gr_ctx, xb, &b->dx));
    if (s->gated)
        GR_OK(tw_cuda_malloc(gr_ctx, wb, &b->dwg));
    GR_OK(tw_cuda_malloc(gr_ctx, wb, &b->dwu));
    GR_OK(tw_cuda_malloc(gr_ctx, wb, &b->dwd));
    GR_OK(tw_cuda_malloc(gr_ctx, xb, &b->dy));
    void *p = NULL;
    GR_OK(tw_cuda_malloc(gr_ctx, pw * 4u, &p));
    b->dp = p;
    b->packed = malloc(pw * 4u);
    b->y = malloc(xb);
    assert_true(b->packed && b->y);
}

static void gr_free(gr_bufs *b) {
    void *d[] = {b->dx, b->dwg, b->dwu, b->dwd, b->dy, b->dp};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        tw_cuda_free(gr_ctx, d[i]);
    free(b->packed);
    free(b->y);
}

/* New inputs in the same device buffers (x and every weight). */
static void gr_load(gr_bufs *b, const tw_synth_ffn *f) {
    const twell_shape *s = &b->s;
    size_t xb = b->M * s->K * 2u, wb = (size_t)s->N * s->K * 2u;
    GR_OK(tw_cuda_memcpy_htod(gr_ctx, b->dx, f->x, xb));
    if (s->gated)
        GR_OK(tw_cuda_memcpy_htod(gr_ctx, b->dwg, f->wg, wb));
    GR_OK(tw_cuda_memcpy_htod(gr_ctx, b->dwu, f->wu, wb));
    GR_OK(tw_cuda_memcpy_htod(gr_ctx, b->dwd, f->wd, wb));
}

/* Poisons packed and y: a value a run fails to write shows up. */
static void gr_poison(gr_bufs *b) {
    size_t n = b->M * b->s.K;
    GR_OK(tw_cuda_memset_d32(gr_ctx, b->dy, GR_POISON << 16 | GR_POISON, n / 2, gr_cs));
    if (n % 2)
        GR_OK(tw_cuda_memset_d8(gr_ctx, (char *)b->dy + (n - 1) * 2u, 0xFF, 2, gr_cs));
    GR_OK(tw_cuda_memset_d32(gr_ctx, b->dp, 0xFFFFFFFFu, twell_packed_words(&b->s, b->M), gr_cs));
}

static twell_status gr_enqueue(twell_plan *plan, gr_bufs *b) {
    const twell_shape *s = &b->s;
    twell_status st = twell_gate_pack(plan, b->M, b->dx, s->gated ? b->dwg : b->dwu, b->dp, gr_cs);
    if (st == TWELL_OK)
        st = twell_ffn_infer(plan, b->M, b->dx, b->dp, b->dwg, b->dwu, b->dwd, b->dy, gr_cs);
    return st;
}

/* Waits for the stream and copies packed and y to the host. */
static void gr_fetch(gr_bufs *b) {
    GR_OK(tw_cuda_stream_synchronize(gr_ctx, gr_cs));
    GR_OK(tw_cuda_memcpy_dtoh(gr_ctx, b->packed, b->dp, twell_packed_bytes(&b->s, b->M)));
    GR_OK(tw_cuda_memcpy_dtoh(gr_ctx, b->y, b->dy, b->M * b->s.K * 2u));
}

/* Captures gate-pack + ffn_infer of b on gr_cs in global mode; no host wait while capturing. On
 * an invalidated capture the same calls are captured again in relaxed mode, to tell in the
 * message whether a non-capturable call was the cause. */
static tw_cuda_graph gr_capture(twell_plan *plan, gr_bufs *b) {
    tw_cuda_graph g = NULL;
    unsigned long waits = tw_tc_host_waits();
    GR_OK(tw_cuda_capture_begin(gr_ctx, gr_cs, GR_CAPTURE_GLOBAL));
    twell_status st = gr_enqueue(plan, b);
    char why[512];
    snprintf(why, sizeof why, "%s", st == TWELL_OK ? "" : twell_ctx_errmsg(gr_ctx));
    twell_status end = tw_cuda_capture_end(gr_ctx, gr_cs, &g);
    unsigned long waited = tw_tc_host_waits() - waits;
    if (st != TWELL_OK || end != TWELL_OK) {
        char end_msg[512];
        snprintf(end_msg, sizeof end_msg, "%s", end == TWELL_OK ? "" : twell_ctx_errmsg(gr_ctx));
        tw_cuda_graph_destroy(gr_ctx, g);
        g = NULL;
        twell_status relaxed = tw_cuda_capture_begin(gr_ctx, gr_cs, GR_CAPTURE_RELAXED);
        if (relaxed == TWELL_OK) {
            twell_status st2 = gr_enqueue(plan, b);
            relaxed = tw_cuda_capture_end(gr_ctx, gr_cs, &g);
            if (st2 != TWELL_OK)
                relaxed = st2;
        }
        tw_cuda_graph_destroy(gr_ctx, g);
        fail_msg("global-mode capture failed: call %s (%s), end %s (%s); the same capture in "
                 "relaxed mode: %s",
                 twell_status_name(st), why, twell_status_name(end), end_msg,
                 twell_status_name(relaxed));
    }
    if (waited != 0)
        fail_msg("the captured calls waited for the device %lu times", waited);
    return g;
}

static void gr_replay(tw_cuda_graph g, gr_bufs *b) {
    gr_poison(b);
    GR_OK(tw_cuda_graph_launch(gr_ctx, g, gr_cs));
    gr_fetch(b);
}

/* An eager run of b on the path `path` (then the plan's path is restored to `keep`). */
/* AUTO's sparse route for few rows: the small-batch kernels where the plan has them. */
static const char *gr_few(twell_plan *plan) {
    return tw_tc_plan_int(plan, TW_TC_SMALL_AVAILABLE) ? "small" : "tiled";
}

static void gr_eager(twell_plan *plan, gr_bufs *b, twell_path path, twell_path keep) {
    GR_OK(twell_plan_set_path(plan, path));
    gr_poison(b);
    GR_OK(gr_enqueue(plan, b));
    gr_fetch(b);
    GR_OK(twell_plan_set_path(plan, keep));
}

/* y of b against the CPU reference on b's packed bytes, every row; also every value written. */
static void gr_expect_ref(const gr_bufs *b, const tw_synth_ffn *f, const char *what) {
    const twell_shape *s = &b->s;
    tw_gpu_expect_written(s->dtype, b->y, b->M * s->K, s->K, GR_POISON, what);
    size_t wr = 0;
    double e = gi_all_rows_err(gr_ctx, s, b->M, f, b->packed, b->y, &wr);
    printf("#   %-44s max row-rel err %.3e (row %zu)\n", what, e, wr);
    if (!(e <= gi_tol(s->dtype)))
        fail_msg("%s: row %zu has row-relative error %.3e > %.0e", what, wr, e, gi_tol(s->dtype));
}

/* The bytes of a and b's last runs are identical. */
static void gr_expect_same(const gr_bufs *b, const uint32_t *packed, const uint16_t *y,
                           const char *what) {
    size_t pb = twell_packed_bytes(&b->s, b->M), yb = b->M * b->s.K * 2u;
    if (memcmp(packed, b->packed, pb) != 0)
        fail_msg("%s: packed bytes differ", what);
    for (size_t i = 0; i < yb / 2; i++)
        if (y[i] != b->y[i])
            fail_msg("%s: y[%zu][%zu] = %04x, the other run %04x", what, i / b->s.K, i % b->s.K,
                     y[i], b->y[i]);
}

/* What the last run (a replay) left in b equals an eager sparse call's bytes on the same
 * inputs. */
static void gr_expect_eager_same(twell_plan *plan, gr_bufs *b, const char *what) {
    size_t pb = twell_packed_bytes(&b->s, b->M), yb = b->M * b->s.K * 2u;
    uint32_t *p = malloc(pb);
    uint16_t *y = malloc(yb);
    assert_true(p && y);
    memcpy(p, b->packed, pb);
    memcpy(y, b->y, yb);
    gr_eager(plan, b, P_SPARSE, P_SPARSE);
    gr_expect_same(b, p, y, what);
    free(p);
    free(y);
}

/* ---- replay with changed inputs, per case ---- */

typedef struct {
    size_t M;
    uint32_t K, N;
    twell_dtype dtype;
    int gated;
    twell_path path; /* the plan's path */
    double hint;     /* twell_plan_reserve's nnz_per_row */
    double nnz;      /* the data's */
    twell_path want; /* the path the captured call must take */
} gr_case;

/* The first two are small (sanitizer). AUTO's route is ffn_policy's for M and the reserve's
 * estimate: the row kernel from 96 to 1024 rows below 2.0-1.4% of N (rule 0), the sparse routes
 * at 29 per row (10 at N = 1024), dense at 280 from 160 rows. */
static const gr_case gr_cases[] = {
    {1, 2048, 5632, BF, 1, P_AUTO, 29, 29, P_SPARSE},
    {64, 2048, 5632, BF, 1, P_DENSE, 29, 29, P_DENSE},
    {8, 2048, 5632, BF, 1, P_AUTO, 29, 29, P_SPARSE},
    {64, 2048, 5632, BF, 1, P_SPARSE, 29, 29, P_SPARSE},
    {256, 2048, 5632, BF, 1, P_AUTO, 29, 29, P_SPARSE}, /* AUTO: the row kernel (rule 0) */
    {256, 2048, 5632, BF, 1, P_AUTO, 280, 280, P_DENSE},
    {1000, 2048, 5632, BF, 1, P_DENSE, 110, 110, P_DENSE},
    {4096, 2048, 5632, BF, 1, P_AUTO, 280, 280, P_DENSE},
    {4096, 2048, 5632, BF, 1, P_AUTO, 29, 29, P_SPARSE},
    {33, 512, 1024, FP, 0, P_AUTO, 10, 10, P_SPARSE},
    {1000, 512, 1024, FP, 0, P_DENSE, 20, 20, P_DENSE},
};

static void test_gpu_graph_replay(void **state) {
    const gr_case *c = *state;
    if (c->want == P_DENSE && !gr_sm90())
        skip();
    twell_shape s;
    twell_shape_init(&s, c->K, c->N);
    s.dtype = c->dtype, s.gated = c->gated;
    twell_plan *plan = NULL;
    GR_OK(twell_plan_create(gr_ctx, &s, &plan));
    GR_OK(twell_plan_set_path(plan, c->path));
    GR_OK(twell_plan_reserve(plan, c->M, c->hint));
    gr_bufs b;
    gr_alloc(&b, &s, c->M);
    tw_synth_ffn *fa = gr_data(&s, c->M, UNI, c->nnz, 11), *fb = gr_data(&s, c->M, UNI, c->nnz, 12);
    gr_load(&b, fa);
    tw_cuda_graph g = gr_capture(plan, &b);
    twell_path took = tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH);
    int small = tw_tc_plan_int(plan, TW_TC_SMALL_LAST_FFN);
    printf("#   M=%zu path %d: captured %s\n", c->M, (int)c->path,
           took == P_DENSE ? "dense"
           : small         ? "sparse (small-batch kernels)"
                           : "sparse");
    assert_int_equal(took, c->want);
    size_t pb = twell_packed_bytes(&s, c->M), yb = c->M * s.K * 2u;
    uint32_t *pa = malloc(pb), *p1 = malloc(pb);
    uint16_t *ya = malloc(yb), *y1 = malloc(yb);
    assert_true(pa && ya && p1 && y1);
    /* replay on data A, B, then A again; each against the CPU reference and an eager call */
    const tw_synth_ffn *seq[] = {fa, fb, fa};
    for (size_t i = 0; i < 3; i++) {
        char what[96];
        gr_load(&b, seq[i]);
        gr_replay(g, &b);
        snprintf(what, sizeof what, "M=%zu replay %zu (data %c)", c->M, i + 1, i == 1 ? 'B' : 'A');
        gr_expect_ref(&b, seq[i], what);
        if (i == 0) {
            memcpy(p1, b.packed, pb);
            memcpy(y1, b.y, yb);
        } else if (i == 2) { /* A twice: the same bytes */
            gr_expect_same(&b, p1, y1, "replays 1 and 3 of data A");
        }
        memcpy(pa, b.packed, pb);
        memcpy(ya, b.y, yb);
        /* the small-batch path has no twell_path of its own: AUTO takes it again (its estimate is
         * still the reserve's: small calls count nothing) */
        gr_eager(plan, &b, small ? c->path : took, c->path);
        snprintf(what, sizeof what, "M=%zu replay %zu vs eager", c->M, i + 1);
        gr_expect_same(&b, pa, ya, what);
    }
    tw_cuda_graph_destroy(gr_ctx, g);
    free(pa);
    free(ya);
    free(p1);
    free(y1);
    tw_synth_destroy(fa);
    tw_synth_destroy(fb);
    gr_free(&b);
    twell_plan_destroy(plan);
}

/* ---- AUTO fixed at capture; replays count nothing; eager calls of larger M afterwards ---- */

static void test_gpu_graph_auto_fixed(void **state) {
    (void)state;
    if (!gr_sm90())
        skip();
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    const size_t M = 64, Mbig = 4096;
    twell_plan *plan = NULL;
    GR_OK(twell_plan_create(gr_ctx, &s, &plan));
    GR_OK(twell_plan_reserve(plan, M, 29));
    assert_string_equal(tw_tc_plan_route(plan, M), gr_few(plan));
    gr_bufs b, big;
    gr_alloc(&b, &s, M);
    gr_alloc(&big, &s, Mbig);
    tw_synth_ffn *f = gr_data(&s, M, UNI, 29, 21), *fbig = gr_data(&s, Mbig, UNI, 280, 22);
    gr_load(&b, f);
    gr_load(&big, fbig);
    tw_cuda_graph g = gr_capture(plan, &b);
    assert_int_equal(tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH), P_SPARSE);
    size_t ws = tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES);
    gr_replay(g, &b);
    gr_expect_ref(&b, f, "M=64 replay before eager calls");
    size_t pb = twell_packed_bytes(&s, M), yb = M * s.K * 2u;
    uint32_t *p0 = malloc(pb);
    uint16_t *y0 = malloc(yb);
    assert_true(p0 && y0);
    memcpy(p0, b.packed, pb);
    memcpy(y0, b.y, yb);
    /* replays counted nothing: AUTO still knows only the reserve's estimate */
    assert_true(tw_tc_plan_double(plan, TW_TC_DENSE_ESTIMATE) < 0.0);
    /* eager AUTO calls of 4096 dense rows: the sparse workspace grows (a larger chunk), counts
     * arrive, AUTO goes dense; the graph keeps its own buffers */
    for (int i = 0; i < 3; i++) {
        gr_poison(&big);
        GR_OK(gr_enqueue(plan, &big));
        GR_OK(tw_cuda_stream_synchronize(gr_ctx, gr_cs));
    }
    printf("#   after eager M=4096: estimate %.1f, last path %s, sparse workspace %zu -> %zu B\n",
           tw_tc_plan_double(plan, TW_TC_DENSE_ESTIMATE),
           tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH) == P_DENSE ? "dense" : "sparse", ws,
           tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES));
    assert_true(tw_tc_plan_size(plan, TW_TC_FFN_WORKSPACE_BYTES) > ws);
    assert_int_equal(tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH), P_DENSE);
    gr_fetch(&big);
    gr_expect_ref(&big, fbig, "eager M=4096 AUTO (dense)");
    gr_replay(g, &b);
    gr_expect_same(&b, p0, y0, "M=64 replay after eager M=4096 calls");
    /* a new capture would now take the measured estimate, 279 per row after a dense call: dense
     * at 64, 4096 and 16 rows (thresholds 113, 78 and 169), and still at 16 rows after a sparse
     * call (no stay band needed there) */
    assert_string_equal(tw_tc_plan_route(plan, M), "dense");
    assert_string_equal(tw_tc_plan_route(plan, Mbig), "dense");
    assert_string_equal(tw_tc_plan_route(plan, 16), "dense");
    GR_OK(twell_plan_set_path(plan, P_SPARSE));
    gr_poison(&big);
    GR_OK(gr_enqueue(plan, &big));
    GR_OK(tw_cuda_stream_synchronize(gr_ctx, gr_cs));
    GR_OK(twell_plan_set_path(plan, P_AUTO));
    assert_string_equal(tw_tc_plan_route(plan, 16), "dense");
    tw_cuda_graph_destroy(gr_ctx, g);
    free(p0);
    free(y0);
    tw_synth_destroy(f);
    tw_synth_destroy(fbig);
    gr_free(&b);
    gr_free(&big);
    twell_plan_destroy(plan);
}

/* ---- data beyond the reserved room: the fallback, decided on the device at each replay ---- */

static void test_gpu_graph_overflow_beyond_reserve(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    const size_t M = 1000;
    twell_plan *plan = NULL;
    GR_OK(twell_plan_create(gr_ctx, &s, &plan));
    GR_OK(twell_plan_set_path(plan, P_SPARSE));
    GR_OK(twell_plan_reserve(plan, M, 1.0)); /* room for ~1 active value per row */
    gr_bufs b;
    gr_alloc(&b, &s, M);
    /* A: skewed, 56 per row with heavy rows: more pairs and overflowing row-tiles than reserved;
     * B: 2 per row, fits */
    tw_synth_ffn *fa = gr_data(&s, M, SKW, 56, 31), *fb = gr_data(&s, M, UNI, 2, 32);
    gr_load(&b, fb);
    tw_cuda_graph g = gr_capture(plan, &b);
    uint32_t fl[4];
    struct {
        const tw_synth_ffn *f;
        int fallback;
        const char *what;
    } seq[] = {{fa, 1, "replay of A (beyond the reserve)"},
               {fb, 0, "replay of B (fits)"},
               {fa, 1, "replay of A again"}};
    for (size_t i = 0; i < 3; i++) {
        gr_load(&b, seq[i].f);
        gr_replay(g, &b);
        GR_OK(tw_test_control(TW_TC_FFN_FLAGS, plan, fl));
        printf("#   %-34s flags %u: pairs needed %u, overflowing row-tiles %u, rows %u\n",
               seq[i].what, fl[0], fl[1], fl[2], fl[3]);
        assert_int_equal(fl[0] != 0, seq[i].fallback);
        gr_expect_ref(&b, seq[i].f, seq[i].what);
    }
    /* B's replay took the tiled pipeline: the same bytes as an eager call */
    gr_load(&b, fb);
    gr_replay(g, &b);
    gr_expect_eager_same(plan, &b, "replay of B vs eager");
    tw_cuda_graph_destroy(gr_ctx, g);
    tw_synth_destroy(fa);
    tw_synth_destroy(fb);
    gr_free(&b);
    twell_plan_destroy(plan);
}

/* ---- the heavy-row route captured: block sized by the reserve, row count on the device ---- */

static void test_gpu_graph_heavy_rows(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    const size_t M = 1000;
    twell_plan *plan = NULL;
    GR_OK(twell_plan_create(gr_ctx, &s, &plan));
    GR_OK(twell_plan_set_path(plan, P_SPARSE));
    GR_OK(tw_test_control(TW_TC_FFN_SET_HEAVY, plan, 176LL)); /* on before the reserve */
    GR_OK(twell_plan_reserve(plan, M, 44));
    gr_bufs b;
    gr_alloc(&b, &s, M);
    /* A: skewed, heavy rows; B: another seed */
    tw_synth_ffn *fa = gr_data(&s, M, SKW, 29, 41), *fb = gr_data(&s, M, SKW, 29, 42);
    gr_load(&b, fa);
    tw_cuda_graph g = gr_capture(plan, &b);
    const tw_synth_ffn *seq[] = {fa, fb};
    for (size_t i = 0; i < 2; i++) {
        char what[64];
        gr_load(&b, seq[i]);
        gr_replay(g, &b);
        int rows = 0;
        GR_OK(tw_test_control(TW_TC_FFN_HEAVY_ROWS, plan, &rows));
        snprintf(what, sizeof what, "heavy replay %c (%d rows in the block)", i ? 'B' : 'A', rows);
        gr_expect_ref(&b, seq[i], what);
        if (gr_sm90())
            assert_true(rows > 0);
        gr_expect_eager_same(plan, &b, "heavy replay vs eager");
    }
    tw_cuda_graph_destroy(gr_ctx, g);
    tw_synth_destroy(fa);
    tw_synth_destroy(fb);
    gr_free(&b);
    twell_plan_destroy(plan);
}

/* ---- nothing reserved: the exact row kernel is captured; DENSE refuses ---- */

static void test_gpu_graph_no_reserve(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    const size_t M = 64;
    twell_plan *plan = NULL;
    GR_OK(twell_plan_create(gr_ctx, &s, &plan));
    gr_bufs b;
    gr_alloc(&b, &s, M);
    tw_synth_ffn *f = gr_data(&s, M, UNI, 29, 41);
    gr_load(&b, f);
    tw_cuda_graph g = gr_capture(plan, &b);
    gr_replay(g, &b);
    gr_expect_ref(&b, f, "no reserve: row kernel");
    tw_cuda_graph_destroy(gr_ctx, g);
    if (gr_sm90()) {
        GR_OK(twell_plan_set_path(plan, P_DENSE));
        GR_OK(tw_cuda_capture_begin(gr_ctx, gr_cs, GR_CAPTURE_GLOBAL));
        twell_status st = twell_gate_pack(plan, M, b.dx, b.dwg, b.dp, gr_cs);
        twell_status st2 = twell_ffn_infer(plan, M, b.dx, b.dp, b.dwg, b.dwu, b.dwd, b.dy, gr_cs);
        char msg[256];
        snprintf(msg, sizeof msg, "%s", twell_ctx_errmsg(gr_ctx));
        GR_OK(tw_cuda_capture_end(gr_ctx, gr_cs, &g)); /* the capture stays valid */
        GR_OK(st);
        assert_int_equal(st2, TWELL_ERR_INVALID_ARG);
        assert_non_null(strstr(msg, "twell_plan_reserve"));
        tw_cuda_graph_destroy(gr_ctx, g);
    }
    tw_synth_destroy(f);
    gr_free(&b);
    twell_plan_destroy(plan);
}

static void test_gpu_graph_reserve_errors(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 512, 1024);
    twell_plan *plan = NULL;
    GR_OK(twell_plan_create(gr_ctx, &s, &plan));
    assert_int_equal(twell_plan_reserve(NULL, 8, 1.0), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_plan_reserve(plan, 0, 1.0), TWELL_ERR_INVALID_ARG);
    assert_non_null(strstr(twell_ctx_errmsg(gr_ctx), "max_M"));
    assert_int_equal(twell_plan_reserve(plan, 8, -1.0), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_plan_reserve(plan, 8, 1025.0), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_plan_reserve(plan, 8, NAN), TWELL_ERR_INVALID_ARG);
    assert_non_null(strstr(twell_ctx_errmsg(gr_ctx), "nnz_per_row"));
    GR_OK(twell_plan_reserve(plan, 8, 1024.0));
    assert_string_equal(twell_ctx_errmsg(gr_ctx), "");
    twell_plan_destroy(plan);
}

int main(int argc, char **argv) {
    gr_ctx = tw_gpu_open_or_skip("test_gpu_graph");
    printf("# %s\n", twell_ctx_device_name(gr_ctx));
    if (tw_cuda_stream_create(gr_ctx, &gr_cs) != TWELL_OK) {
        fprintf(stderr, "test_gpu_graph: no stream: %s\n", twell_ctx_errmsg(gr_ctx));
        return 1;
    }
    size_t ncases = sizeof gr_cases / sizeof gr_cases[0];
    int small = argc > 1 && !strcmp(argv[1], "small");
    if (small)
        ncases = 2;
    struct CMUnitTest tests[sizeof gr_cases / sizeof gr_cases[0] + 5];
    static char names[sizeof gr_cases / sizeof gr_cases[0]][96];
    for (size_t i = 0; i < ncases; i++) {
        const gr_case *c = &gr_cases[i];
        snprintf(names[i], sizeof names[i], "test_gpu_graph_replay_M%zu_K%u_N%u_%s_%s_path%d_nnz%g",
                 c->M, c->K, c->N, c->dtype == BF ? "bf16" : "fp16", c->gated ? "gated" : "plain",
                 (int)c->path, c->hint);
        struct CMUnitTest t = {names[i], test_gpu_graph_replay, NULL, NULL, (void *)c};
        tests[i] = t;
    }
    size_t n = ncases;
    struct CMUnitTest t1 = cmocka_unit_test(test_gpu_graph_overflow_beyond_reserve);
    struct CMUnitTest t2 = cmocka_unit_test(test_gpu_graph_no_reserve);
    struct CMUnitTest t3 = cmocka_unit_test(test_gpu_graph_reserve_errors);
    struct CMUnitTest t4 = cmocka_unit_test(test_gpu_graph_auto_fixed);
    struct CMUnitTest t5 = cmocka_unit_test(test_gpu_graph_heavy_rows);
    tests[n++] = t1;
    tests[n++] = t5;
    tests[n++] = t2;
    tests[n++] = t3;
    if (!small)
        tests[n++] = t4;
    int rc = _cmocka_run_group_tests("test_gpu_graph", tests, n, NULL, NULL);
    tw_cuda_stream_destroy(gr_ctx, gr_cs);
    twell_ctx_destroy(gr_ctx);
    return rc;
}
