/* test_gpu_train_dense.c — the dense training path (TWELL_PATH_DENSE / AUTO, runtime/
 * cuda_train_dense.c) against the CPU reference, the path switching, the out-of-memory fallback
 * and the caller-provided workspace.
 *
 * Data: exact-gate (x and Wg small integers times powers of two), so the dense GEMM's gate equals
 * the CPU's bit for bit and L0 must be exact. Densities 5%, 20% and 19.5% of N = 5632 (~1100 active
 * per row), uniform and skewed (heavy rows and neurons), M ∈ {1, 33, 300, 1000}, both dtypes,
 * N % 128 != 0 (the two-launch weight-gradient split), M not a multiple of 64 (ragged reduction).
 * Tolerances: the dense path rounds U, Tm, dU and dP to dtype (twellrt.h), so against the CPU's
 * fp32 values the largest row-relative L2 error allowed is 1.5e-2 (bf16) / 3e-3 (fp16) for y and
 * dx, 1e-2 / 2e-3 for the fp32 weight gradients (each sums M products of rounded values), L1
 * relative 4e-3 / 1e-3; the worst is printed. Also: bitwise determinism over two runs with
 * different poison, every output written (NaN poison), no host wait in dense steps, and the
 * out-of-memory fallback from the sparse path (device filled, dense workspace lent).
 * `test_gpu_train_dense small`: the first two cases only (sanitizer). Exits 77 without a device.
 * labels: gpu slow serial (one case fills the device's memory: nothing may run beside it) */
#include "cuda_driver.h"
#include "cuda_train_dense.h"
#include "half.h"
#include "internal.h"
#include "ref64_train.h"
#include "train_check.h"

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

static twell_ctx *g_ctx;

#define BF TWELL_DTYPE_BF16
#define FP TWELL_DTYPE_FP16

typedef struct {
    size_t M;
    uint32_t K, N, T, C;
    twell_dtype dt;
    double density;
    int skew;
    float lambda;
    unsigned wg_stages; /* ring depth of the weight-gradient GEMM (0: default) */
} td_case;

/* The first two are small (the sanitizer runs them). */
static const td_case td_cases[] = {
    {33, 64, 256, 256, 8, BF, 0.05, 0, 0.5f, 0},
    {65, 128, 320, 64, 2, FP, 0.20, 1, 1.0f, 0},
    {1, 64, 256, 256, 8, BF, 0.20, 0, 0.5f, 0},
    {1000, 512, 1024, 256, 8, BF, 0.05, 0, 1.0f, 3},
    {1000, 512, 1024, 256, 8, FP, 0.20, 1, 1.0f, 0},
    {333, 256, 1024, 128, 4, BF, 0.20, 1, 2.0f, 0},
    {300, 256, 5632, 256, 8, BF, 0.195, 0, 1.0f, 0},
};

#define TD_OK(expr) TW_GPU_OK(g_ctx, expr)

#define TD_LE(val, tol, what)                                                                      \
    do {                                                                                           \
        double v_ = (val), t_ = (tol);                                                             \
        if (!(v_ <= t_))                                                                           \
            fail_msg("%s: %.4g > tolerance %.1g", what, v_, t_);                                   \
    } while (0)

/* ---- host results and the CPU reference ---- */

typedef struct {
    uint16_t *y, *dx;
    float *dwg, *dwu, *dwd;
    float stats[2];
    double *w64[3], *s64[3]; /* fp64 dWg, dWu, dWd and their scales (td_reference w64), or NULL */
} td_out;

static void td_out_alloc(td_out *o, size_t M, uint32_t K, uint32_t N) {
    memset(o, 0, sizeof *o);
    o->y = malloc(M * K * 2);
    o->dx = malloc(M * K * 2);
    o->dwg = malloc((size_t)N * K * 4);
    o->dwu = malloc((size_t)N * K * 4);
    o->dwd = malloc((size_t)N * K * 4);
    assert_true(o->y && o->dx && o->dwg && o->dwu && o->dwd);
}

static void td_out_free(td_out *o) {
    free(o->y);
    free(o->dx);
    free(o->dwg);
    free(o->dwu);
    free(o->dwd);
    for (int t = 0; t < 3; t++)
        free(o->w64[t]), free(o->s64[t]);
}

/* The CPU library's results; w64: also the fp64 weight gradients on the CPU's gate values and
 * their magnitude scales (ref64_train.h), for sparse steps on the tiled U/dT route. */
static void td_reference(const twell_shape *s, const tw_t_data *d, float lambda, int w64,
                         td_out *r) {
    tw_t_lib L;
    assert_int_equal(tw_t_lib_open(&L, s, 0), 0);
    td_out_alloc(r, d->M, s->K, s->N);
    assert_int_equal(tw_t_lib_forward(&L, d, r->y, r->stats), TWELL_OK);
    assert_int_equal(tw_t_lib_backward(&L, d, lambda, r->dx, r->dwg, r->dwu, r->dwd), TWELL_OK);
    if (w64) {
        size_t M = d->M, K = s->K, N = s->N, xk = M * K, wk = N * K;
        double *x = tw_t_to_f64(s->dtype, d->x, xk), *wg = tw_t_to_f64(s->dtype, d->wg, wk);
        double *wu = tw_t_to_f64(s->dtype, d->wu, wk), *wd = tw_t_to_f64(s->dtype, d->wd, wk);
        double *dy = tw_t_to_f64(s->dtype, d->dy, xk), *p = tw_t_lib_dense_p(&L);
        double *dx = malloc(xk * 8), *sy = malloc(xk * 8), *sdx = malloc(xk * 8);
        for (int t = 0; t < 3; t++)
            r->w64[t] = malloc(wk * 8), r->s64[t] = malloc(wk * 8);
        assert_true(x && wg && wu && wd && dy && p && dx && sy && sdx && r->w64[0] && r->w64[1] &&
                    r->w64[2] && r->s64[0] && r->s64[1] && r->s64[2]);
        tw_t_ref f;
        assert_int_equal(tw_t_ref_forward(&f, M, (uint32_t)K, (uint32_t)N, x, wg, wu, wd,
                                          TW_T_P_ROUND, s->dtype, p),
                         0);
        tw_t_ref_backward(&f, x, wg, wu, wd, dy, (double)lambda, dx, r->w64[0], r->w64[1],
                          r->w64[2]);
        assert_int_equal(tw_t_ref_scales(&f, x, wg, wu, wd, dy, (double)lambda, sy, sdx, r->s64[0],
                                         r->s64[1], r->s64[2]),
                         0);
        tw_t_ref_free(&f);
        free(x), free(wg), free(wu), free(wd), free(dy), free(p), free(dx), free(sy), free(sdx);
    }
    tw_t_lib_close(&L);
}

/* ---- the GPU side ---- */

typedef struct {
    twell_plan *plan;
    twell_train_state *state;
    void *x, *wg, *wu, *wd, *dy, *y, *dx, *dwg, *dwu, *dwd, *stats;
    size_t M;
    uint32_t K, N;
} td_gpu;

static void *td_dev(size_t bytes, const void *src) {
    void *p = NULL;
    TD_OK(tw_cuda_malloc(g_ctx, bytes, &p));
    if (src)
        TD_OK(tw_cuda_memcpy_htod(g_ctx, p, src, bytes));
    return p;
}

static void td_gpu_open(td_gpu *g, const twell_shape *s, const tw_t_data *d) {
    memset(g, 0, sizeof *g);
    TD_OK(twell_plan_create(g_ctx, s, &g->plan));
    TD_OK(twell_train_state_create(g->plan, &g->state));
    size_t xk = d->M * s->K * 2, wk = (size_t)s->N * s->K * 2;
    g->M = d->M, g->K = s->K, g->N = s->N;
    g->x = td_dev(xk, d->x);
    g->wg = td_dev(wk, d->wg);
    g->wu = td_dev(wk, d->wu);
    g->wd = td_dev(wk, d->wd);
    g->dy = td_dev(xk, d->dy);
    g->y = td_dev(xk, NULL);
    g->dx = td_dev(xk, NULL);
    g->dwg = td_dev(wk * 2, NULL);
    g->dwu = td_dev(wk * 2, NULL);
    g->dwd = td_dev(wk * 2, NULL);
    g->stats = td_dev(8, NULL);
}

static void td_gpu_close(td_gpu *g) {
    void *b[] = {g->x, g->wg, g->wu, g->wd, g->dy, g->y, g->dx, g->dwg, g->dwu, g->dwd, g->stats};
    twell_train_state_destroy(g->state);
    twell_plan_destroy(g->plan);
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        tw_cuda_free(g_ctx, b[i]);
}

static void td_poison(td_gpu *g, uint32_t pattern) {
    size_t xk = g->M * g->K, wk = (size_t)g->N * g->K;
    TD_OK(tw_cuda_memset_d32(g_ctx, g->y, pattern, xk / 2, NULL));
    TD_OK(tw_cuda_memset_d32(g_ctx, g->dx, pattern, xk / 2, NULL));
    TD_OK(tw_cuda_memset_d32(g_ctx, g->dwg, pattern, wk, NULL));
    TD_OK(tw_cuda_memset_d32(g_ctx, g->dwu, pattern, wk, NULL));
    TD_OK(tw_cuda_memset_d32(g_ctx, g->dwd, pattern, wk, NULL));
    TD_OK(tw_cuda_memset_d32(g_ctx, g->stats, pattern, 2, NULL));
    TD_OK(tw_cuda_synchronize(g_ctx));
}

static void td_forward(td_gpu *g) {
    TD_OK(twell_ffn_forward_train(g->plan, g->M, g->x, g->wg, g->wu, g->wd, g->y, g->stats,
                                  g->state, NULL));
}

static void td_backward(td_gpu *g, float lambda) {
    TD_OK(twell_ffn_backward(g->plan, g->state, g->M, g->x, g->wg, g->wu, g->wd, g->dy, lambda,
                             g->dx, g->dwg, g->dwu, g->dwd, NULL));
}

/* Downloads every output and checks that each was written (no poison left, finite). */
static void td_fetch(td_gpu *g, uint32_t poison, td_out *o) {
    size_t M = g->M, K = g->K, N = g->N;
    TD_OK(tw_cuda_synchronize(g_ctx));
    TD_OK(tw_cuda_memcpy_dtoh(g_ctx, o->y, g->y, M * K * 2));
    TD_OK(tw_cuda_memcpy_dtoh(g_ctx, o->dx, g->dx, M * K * 2));
    TD_OK(tw_cuda_memcpy_dtoh(g_ctx, o->dwg, g->dwg, N * K * 4));
    TD_OK(tw_cuda_memcpy_dtoh(g_ctx, o->dwu, g->dwu, N * K * 4));
    TD_OK(tw_cuda_memcpy_dtoh(g_ctx, o->dwd, g->dwd, N * K * 4));
    TD_OK(tw_cuda_memcpy_dtoh(g_ctx, o->stats, g->stats, 8));
    twell_dtype dt = twell_plan_shape(g->plan)->dtype;
    uint16_t p16 = (uint16_t)(poison & 0xffffu);
    const uint16_t *h16[2] = {o->y, o->dx};
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < M * K; i++)
            if (h16[t][i] == p16 || !isfinite(tw_half_to_f32(dt, h16[t][i])))
                fail_msg("%s[%zu][%zu] = %04x: never written or not finite", t ? "dx" : "y", i / K,
                         i % K, h16[t][i]);
    const float *h32[3] = {o->dwg, o->dwu, o->dwd};
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < N * K; i++)
            if (!isfinite(h32[t][i]))
                fail_msg("dW%d[%zu][%zu] = %g: never written or not finite", t, i / K, i % K,
                         (double)h32[t][i]);
    if (!isfinite(o->stats[0]) || !isfinite(o->stats[1]))
        fail_msg("stats never written");
}

/* td_compare's modes: the dense path's tolerances (the header), or the sparse path's
 * (test_gpu_train's: 5e-3 / 1e-3, L1 1e-6; weight gradients 1e-5 row-relative against the CPU
 * on the per-entry route, which keeps the CPU's order, or on the tiled U/dT route, whose dT and
 * U sum in another fp32 order, 2e-5 of the magnitude scale against fp64, as test_gpu_train's
 * gt_expect_fp64: a neuron with one token and a cancelling dT (dy·Wd against the L1 term) is
 * ill-conditioned for a row-relative bound, the CPU reference itself 6e-5 from fp64). */
enum { TD_SPARSE = 0, TD_DENSE = 1, TD_SPARSE_TILED = 2 };

/* The mode of the state's last step (its backward follows its forward's path). */
static int td_mode(twell_train_state *state) {
    if (tw_tc_state_path(state, TW_TC_TD_LAST_PATH) == TWELL_PATH_DENSE)
        return TD_DENSE;
    size_t nh = 0;
    uint64_t hnnz = 0;
    uint32_t thr = 0;
    TD_OK(tw_test_control(TW_TC_TRAIN_HEAVY_ROWS, state, &nh, &hnnz, &thr));
    if (nh > 0) /* heavy rows ran by dense block (the default route): the dense path's bounds */
        return TD_DENSE;
    return tw_tc_state_int(state, TW_TC_TRAIN_UDT_TILED) ? TD_SPARSE_TILED : TD_SPARSE;
}

/* Compares o against the reference r in `mode` (TD_SPARSE_TILED needs r from td_reference with
 * w64). */
static void td_compare(const twell_shape *s, size_t M, const td_out *o, const td_out *r, int mode,
                       const char *label) {
    int bf = s->dtype == BF, dense = mode == TD_DENSE, w64 = mode == TD_SPARSE_TILED;
    double t16 = dense ? (bf ? 1.5e-2 : 3e-3) : (bf ? 5e-3 : 1e-3);
    double t32 = dense ? (bf ? 1e-2 : 2e-3) : 1e-5;
    double tl1 = dense ? (bf ? 4e-3 : 1e-3) : 1e-6;
    static const char *const names[5] = {"y", "dx", "dWg", "dWu", "dWd"};
    double e[5];
    size_t at[5];
    e[0] = tw_train_err_h(s->dtype, o->y, r->y, M, s->K, NULL, &at[0], NULL, NULL);
    e[1] = tw_train_err_h(s->dtype, o->dx, r->dx, M, s->K, NULL, &at[1], NULL, NULL);
    e[2] = tw_train_err_f(o->dwg, r->dwg, s->N, s->K, NULL, &at[2], NULL, NULL);
    e[3] = tw_train_err_f(o->dwu, r->dwu, s->N, s->K, NULL, &at[3], NULL, NULL);
    e[4] = tw_train_err_f(o->dwd, r->dwd, s->N, s->K, NULL, &at[4], NULL, NULL);
    double l1rel = fabs((double)o->stats[1] - (double)r->stats[1]) /
                   (r->stats[1] != 0.0f ? fabs((double)r->stats[1]) : 1.0);
    printf("#   %s: y %.2e dx %.2e dWg %.2e dWu %.2e dWd %.2e (tol %.0e / %.0e); L0 %.6g (CPU "
           "%.6g) L1 rel %.1e\n",
           label, e[0], e[1], e[2], e[3], e[4], t16, t32, (double)o->stats[0], (double)r->stats[0],
           l1rel);
    for (int t = 0; t < 5; t++) {
        char what[96];
        snprintf(what, sizeof what, "%s: %s row %zu", label, names[t], at[t]);
        if (t < 2 || !w64)
            TD_LE(e[t], t < 2 ? t16 : t32, what);
    }
    if (w64) {
        assert_true(r->w64[0] && r->s64[0]);
        const float *gw[3] = {o->dwg, o->dwu, o->dwd};
        size_t wk = (size_t)s->N * s->K;
        for (int t = 0; t < 3; t++) {
            double *g = tw_t_f32_to_f64(gw[t], wk);
            assert_non_null(g);
            size_t i = 0;
            double es = tw_t_err_scaled(g, r->w64[t], r->s64[t], wk, 0, 0, &i);
            free(g);
            char what[96];
            snprintf(what, sizeof what, "%s: %s vs fp64 (scaled), neuron %zu", label, names[2 + t],
                     i / s->K);
            printf("#     %s %.2e (tol 2e-05)\n", what, es);
            TD_LE(es, 2e-5, what);
        }
    }
    if (o->stats[0] != r->stats[0])
        fail_msg("%s: L0 = %.9g, CPU %.9g", label, (double)o->stats[0], (double)r->stats[0]);
    TD_LE(l1rel, tl1, "L1");
}

static twell_shape td_shape(const td_case *c) {
    twell_shape s = {sizeof(twell_shape), c->K, c->N, c->T, c->C, c->dt, 1};
    return s;
}

/* ---- tests ---- */

/* Forced DENSE against the CPU, twice with different poison: bitwise identical, no host wait. */
static void test_gpu_train_dense_case(void **st) {
    const td_case *c = *st;
    twell_shape s = td_shape(c);
    tw_t_gen gen = {c->density, c->skew, 1, 4242u + c->M};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, c->dt, c->M, c->K, c->N, &gen), 0);
    td_out r, o1, o2;
    td_reference(&s, &d, c->lambda, 0, &r);
    td_gpu g;
    td_gpu_open(&g, &s, &d);
    TD_OK(twell_plan_set_path(g.plan, TWELL_PATH_DENSE));
    if (c->wg_stages)
        TD_OK(tw_test_control(TW_TC_TD_SET_WGRAD_STAGES, g.state, c->wg_stages));
    td_out_alloc(&o1, c->M, c->K, c->N);
    td_out_alloc(&o2, c->M, c->K, c->N);
    uint32_t poison[2] = {0xFFFFFFFFu, 0x7FC17FC1u};
    td_out *outs[2] = {&o1, &o2};
    for (int run = 0; run < 2; run++) {
        td_poison(&g, poison[run]);
        unsigned long waits = tw_tc_host_waits();
        td_forward(&g);
        td_backward(&g, c->lambda);
        if (run == 1) /* the first run compiles and allocates; the second must not wait */
            assert_int_equal(tw_tc_host_waits(), waits);
        assert_int_equal(tw_tc_state_path(g.state, TW_TC_TD_LAST_PATH), TWELL_PATH_DENSE);
        td_fetch(&g, poison[run], outs[run]);
    }
    size_t xk = c->M * c->K, wk = (size_t)c->N * c->K;
    assert_memory_equal(o1.y, o2.y, xk * 2);
    assert_memory_equal(o1.dx, o2.dx, xk * 2);
    assert_memory_equal(o1.dwg, o2.dwg, wk * 4);
    assert_memory_equal(o1.dwu, o2.dwu, wk * 4);
    assert_memory_equal(o1.dwd, o2.dwd, wk * 4);
    assert_memory_equal(o1.stats, o2.stats, 8);
    printf("# M=%zu K=%u N=%u T=%u C=%u %s %s density %.3f (%.1f active/row), dense workspace "
           "%.2f MB, weight-gradient ring %u\n",
           c->M, c->K, c->N, c->T, c->C, c->dt == BF ? "bf16" : "fp16",
           c->skew ? "skewed" : "uniform", c->density, (double)r.stats[0],
           (double)tw_ctd_bytes(&s, c->M) / 1e6, c->wg_stages ? c->wg_stages : 4u);
    /* the saved gate is the CPU's, bit for bit (exact-gate data) */
    uint16_t *pg = malloc(c->M * c->N * 2);
    assert_non_null(pg);
    TD_OK(tw_test_control(TW_TC_TD_DOWNLOAD_P, g.state, c->M, pg));
    size_t nnz = 0;
    for (size_t i = 0; i < c->M * c->N; i++)
        nnz += tw_half_to_f32(c->dt, pg[i]) > 0.0f;
    free(pg);
    assert_true(fabs((double)nnz / (double)c->M - (double)r.stats[0]) < 1e-3);
    td_compare(&s, c->M, &o1, &r, TD_DENSE, "dense");
    td_out_free(&o1);
    td_out_free(&o2);
    td_out_free(&r);
    td_gpu_close(&g);
    tw_t_data_free(&d);
}

/* Two data sets on one training state, as the switching tests use them: "low" (0.4% active) and
 * "high" (20%), K 256, N 1024, M 1024, bf16, with their CPU references (and fp64 weight
 * gradients); the state's buffers hold the high set, the low one has its own. td_two_use points
 * the state's inputs at one of them. */
typedef struct {
    twell_shape s;
    size_t M;
    tw_t_data d[2];   /* [0] low, [1] high */
    td_out ref[2], o; /* references of each set; the GPU's outputs */
    td_gpu g;
    void *in[2][5]; /* x, wg, wu, wd, dy of each set on the device */
} td_two;

static void td_two_use(td_two *t, int high) {
    void *const *v = t->in[high];
    t->g.x = v[0], t->g.wg = v[1], t->g.wu = v[2], t->g.wd = v[3], t->g.dy = v[4];
}

static void td_two_open(td_two *t, uint32_t seed_lo, uint32_t seed_hi) {
    twell_shape s = {sizeof(twell_shape), 256, 1024, 256, 8, BF, 1};
    t->s = s;
    t->M = 1024;
    tw_t_gen gen[2] = {{0.004, 0, 1, seed_lo}, {0.20, 0, 1, seed_hi}};
    for (int h = 0; h < 2; h++) {
        assert_int_equal(tw_t_data_make(&t->d[h], BF, t->M, s.K, s.N, &gen[h]), 0);
        td_reference(&t->s, &t->d[h], 1.0f, 1, &t->ref[h]);
    }
    td_out_alloc(&t->o, t->M, s.K, s.N);
    td_gpu_open(&t->g, &t->s, &t->d[1]);
    size_t xk = t->M * s.K * 2, wk = (size_t)s.N * s.K * 2;
    const tw_t_data *lo = &t->d[0];
    void *low[5] = {td_dev(xk, lo->x), td_dev(wk, lo->wg), td_dev(wk, lo->wu), td_dev(wk, lo->wd),
                    td_dev(xk, lo->dy)};
    void *high[5] = {t->g.x, t->g.wg, t->g.wu, t->g.wd, t->g.dy};
    memcpy(t->in[0], low, sizeof low);
    memcpy(t->in[1], high, sizeof high);
    /* threshold 2% of N = 20.5/row: the low data (~4/row) sparse, the high (~200/row) dense */
    TD_OK(tw_test_control(TW_TC_TD_SET_THRESHOLD, t->g.state, 0.02 * s.N, (size_t)1024));
}

static void td_two_close(td_two *t) {
    td_two_use(t, 1); /* td_gpu_close frees the high set's buffers */
    for (size_t i = 0; i < 5; i++)
        tw_cuda_free(g_ctx, t->in[0][i]);
    td_gpu_close(&t->g);
    td_out_free(&t->o);
    for (int h = 0; h < 2; h++) {
        td_out_free(&t->ref[h]);
        tw_t_data_free(&t->d[h]);
    }
}

/* SPARSE, DENSE and AUTO steps on one state: each result matches the CPU with its path's
 * tolerance, the backward follows its forward's path even when the plan's path changes in
 * between, AUTO follows the density one step later, and AUTO's dense steps never wait. */
static void test_gpu_train_dense_switching(void **st) {
    (void)st;
    td_two t;
    td_two_open(&t, 7u, 8u);
    td_gpu *g = &t.g;
    const twell_shape s = t.s;
    const size_t M = t.M;
    struct {
        twell_path set;  /* plan path for the forward */
        int high;        /* data set */
        twell_path want; /* path the forward must run */
    } steps[] = {
        {TWELL_PATH_AUTO, 1, TWELL_PATH_DENSE},    /* first AUTO step: probe, high: dense */
        {TWELL_PATH_AUTO, 0, TWELL_PATH_DENSE},    /* still from the high count (or none) */
        {TWELL_PATH_SPARSE, 0, TWELL_PATH_SPARSE}, /* forced; its count (low) is exact */
        {TWELL_PATH_AUTO, 1, TWELL_PATH_SPARSE},   /* follows the low count */
        {TWELL_PATH_AUTO, 1, TWELL_PATH_DENSE},    /* follows the high sparse count */
        {TWELL_PATH_DENSE, 0, TWELL_PATH_DENSE},   /* forced */
        {TWELL_PATH_SPARSE, 1, TWELL_PATH_SPARSE}, /* forced */
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int h = steps[i].high;
        td_two_use(&t, h);
        TD_OK(twell_plan_set_path(g->plan, steps[i].set));
        td_poison(g, 0xFFFFFFFFu);
        if (i == 1) /* make sure step 0's count has landed: AUTO then reads it, still no wait */
            TD_OK(tw_cuda_synchronize(g_ctx));
        unsigned long waits = tw_tc_host_waits();
        td_forward(g);
        twell_path ran = tw_tc_state_path(g->state, TW_TC_TD_LAST_PATH);
        /* the backward follows the forward whatever the plan says now */
        TD_OK(twell_plan_set_path(g->plan,
                                  ran == TWELL_PATH_DENSE ? TWELL_PATH_SPARSE : TWELL_PATH_DENSE));
        td_backward(g, 1.0f);
        if (ran == TWELL_PATH_DENSE && i > 0)
            assert_int_equal(tw_tc_host_waits(), waits);
        printf("# step %zu: path set %d, %s data, ran %s (estimate %.1f/row)\n", i,
               (int)steps[i].set, h ? "high" : "low", ran == TWELL_PATH_DENSE ? "dense" : "sparse",
               tw_tc_state_double(g->state, TW_TC_TD_ESTIMATE));
        assert_int_equal(ran, steps[i].want);
        td_fetch(g, 0xFFFFFFFFu, &t.o);
        char label[64];
        snprintf(label, sizeof label, "step %zu", i);
        td_compare(&s, M, &t.o, &t.ref[h], td_mode(g->state), label);
    }
    assert_true(tw_tc_state_calls(g->state, TWELL_PATH_DENSE) >= 3);
    assert_true(tw_tc_state_calls(g->state, TWELL_PATH_SPARSE) >= 3);
    td_two_close(&t);
}

static size_t td_ws_bytes(twell_train_state *state) {
    size_t b = 0;
    TD_OK(tw_test_control(TW_TC_TD_WORKSPACE_BYTES, state, &b));
    return b;
}

static unsigned long td_releases(twell_train_state *state) {
    unsigned long n = 0;
    TD_OK(tw_test_control(TW_TC_TD_RELEASES, state, &n));
    return n;
}

/* AUTO runs dense, then sparse: the dense workspace stays for TW_TD_RELEASE_FIRST sparse
 * forwards (hysteresis), is freed at the end of that many, without a host wait beyond the sparse
 * forward's own; dense again allocates it anew and doubles the count the next release needs.
 * Every step matches the CPU with its path's tolerance; the peak counts the switching step. */
static void test_gpu_train_dense_release(void **st) {
    (void)st;
    td_two t;
    td_two_open(&t, 17u, 18u);
    td_gpu *g = &t.g;
    const twell_shape s = t.s;
    const size_t M = t.M;
    size_t need = tw_ctd_bytes(&s, M);
    unsigned want_after = TW_TD_RELEASE_FIRST;
    unsigned long waits_sparse = 0; /* host waits of a sparse step that releases nothing */
    for (int round = 0; round < 2; round++) {
        /* a dense step on the high data: AUTO's first forward (round 0); after a release, AUTO
         * needs the high count first, which a forced sparse step gives at once (round 1) */
        td_two_use(&t, 1);
        if (round == 1) {
            TD_OK(twell_plan_set_path(g->plan, TWELL_PATH_SPARSE));
            td_poison(g, 0xFFFFFFFFu);
            td_forward(g);
            td_backward(g, 1.0f);
            td_fetch(g, 0xFFFFFFFFu, &t.o);
            td_compare(&s, M, &t.o, &t.ref[1], td_mode(g->state), "high data, forced sparse");
            assert_int_equal(td_ws_bytes(g->state), 0); /* released, not allocated again */
        }
        TD_OK(twell_plan_set_path(g->plan, TWELL_PATH_AUTO));
        td_poison(g, 0xFFFFFFFFu);
        td_forward(g);
        assert_int_equal(tw_tc_state_path(g->state, TW_TC_TD_LAST_PATH), TWELL_PATH_DENSE);
        td_backward(g, 1.0f);
        td_fetch(g, 0xFFFFFFFFu, &t.o);
        td_compare(&s, M, &t.o, &t.ref[1], TD_DENSE, "high data, dense");
        assert_int_equal(td_ws_bytes(g->state), need);
        assert_true(twell_train_state_bytes(g->state) >= need);
        /* low data, sparse: the first step forced (it gives AUTO the low count: the dense
         * step's count is the high one), then AUTO; the workspace stays until the last */
        td_two_use(&t, 0);
        unsigned long rel0 = td_releases(g->state);
        size_t before = 0; /* the state's bytes after the previous step */
        for (unsigned i = 1; i <= want_after; i++) {
            TD_OK(twell_plan_set_path(g->plan, i == 1 ? TWELL_PATH_SPARSE : TWELL_PATH_AUTO));
            td_poison(g, 0xFFFFFFFFu);
            unsigned long w0 = tw_tc_host_waits();
            td_forward(g);
            td_backward(g, 1.0f);
            unsigned long w = tw_tc_host_waits() - w0;
            assert_int_equal(tw_tc_state_path(g->state, TW_TC_TD_LAST_PATH), TWELL_PATH_SPARSE);
            size_t held = td_ws_bytes(g->state);
            printf("# round %d, sparse step %u of %u: dense workspace %zu B, state %zu B, host "
                   "waits %lu\n",
                   round, i, want_after, held, twell_train_state_bytes(g->state), w);
            if (round == 0 && i == 2)
                waits_sparse = w; /* the buffers grew in step 1; from here one sync per step */
            if (i < want_after) {
                assert_int_equal(held, need);
                assert_int_equal(td_releases(g->state), rel0);
            } else {
                assert_int_equal(held, 0);
                assert_int_equal(td_releases(g->state), rel0 + 1);
                /* exactly the dense workspace freed (the sparse buffers, sized by the larger
                 * data of round 1's forced sparse step, stay) */
                assert_int_equal(twell_train_state_bytes(g->state), before - need);
                assert_int_equal(w, waits_sparse); /* the release adds no host wait */
            }
            before = twell_train_state_bytes(g->state);
            td_fetch(g, 0xFFFFFFFFu, &t.o);
            char label[64];
            snprintf(label, sizeof label, "round %d, sparse step %u", round, i);
            td_compare(&s, M, &t.o, &t.ref[0], td_mode(g->state), label);
        }
        want_after *= 2; /* dense again after a release doubles the hysteresis */
    }
    size_t peak = 0;
    TD_OK(tw_test_control(TW_TC_TD_PEAK_BYTES, g->state, 0, &peak));
    printf("# peak %zu B (dense workspace %zu B), now %zu B, %lu releases\n", peak, need,
           twell_train_state_bytes(g->state), td_releases(g->state));
    assert_true(peak >= need + twell_train_state_bytes(g->state));
    td_two_close(&t);
}

/* AUTO's first forward of a state is a probe (the sparse path's counts decide): on sparse data it
 * runs the sparse path to the end and never allocates the dense workspace (the state's peak stays
 * below it); on dense data (a new state) it hands over to the dense path, which the CPU checks
 * with the dense tolerances, and AUTO keeps the probe's exact count. */
static void test_gpu_train_dense_probe(void **st) {
    (void)st;
    td_two t;
    td_two_open(&t, 27u, 28u);
    td_gpu *g = &t.g;
    const size_t M = t.M, need = tw_ctd_bytes(&t.s, M);
    for (int h = 0; h < 2; h++) {
        if (h == 1) { /* a new state: the probe belongs to a state's first forward */
            twell_train_state_destroy(g->state);
            TD_OK(twell_train_state_create(g->plan, &g->state));
            TD_OK(tw_test_control(TW_TC_TD_SET_THRESHOLD, g->state, 0.02 * t.s.N, (size_t)1024));
        }
        td_two_use(&t, h);
        TD_OK(twell_plan_set_path(g->plan, TWELL_PATH_AUTO));
        td_poison(g, 0xFFFFFFFFu);
        td_forward(g);
        twell_path ran = tw_tc_state_path(g->state, TW_TC_TD_LAST_PATH);
        double est = tw_tc_state_double(g->state, TW_TC_TD_ESTIMATE);
        printf("# first AUTO forward, %s data: ran %s, estimate %.1f/row, dense workspace %zu B\n",
               h ? "high" : "low", ran == TWELL_PATH_DENSE ? "dense" : "sparse", est,
               td_ws_bytes(g->state));
        assert_int_equal(ran, h ? TWELL_PATH_DENSE : TWELL_PATH_SPARSE);
        assert_int_equal(td_ws_bytes(g->state), h ? need : 0u);
        if (h == 1) /* the probe's sparse count buffers released: the dense workspace remains */
            assert_true(twell_train_state_bytes(g->state) < need + 65536u);
        /* the probe's count, exact: the data's mean active values per row */
        assert_true(fabs(est - (double)t.ref[h].stats[0]) <= 1e-3 * (double)t.ref[h].stats[0]);
        td_backward(g, 1.0f);
        td_fetch(g, 0xFFFFFFFFu, &t.o);
        td_compare(&t.s, M, &t.o, &t.ref[h], h ? TD_DENSE : td_mode(g->state),
                   h ? "first AUTO forward, high data" : "first AUTO forward, low data");
        if (h == 0) {
            size_t peak = 0;
            TD_OK(tw_test_control(TW_TC_TD_PEAK_BYTES, g->state, 0, &peak));
            printf("#   peak %zu B (dense workspace %zu B)\n", peak, need);
            assert_true(peak >= twell_train_state_bytes(g->state));
            assert_true(peak < need);
        }
    }
    td_two_close(&t);
}

/* A caller-provided workspace: the dense path runs in it without allocating, the state does not
 * count it, too small a buffer gives TWELL_ERR_NO_MEMORY (DENSE) or the sparse path (AUTO). */
static void test_gpu_train_dense_workspace(void **st) {
    (void)st;
    twell_shape s = {sizeof(twell_shape), 128, 512, 256, 8, FP, 1};
    size_t M = 1100;
    tw_t_gen gen = {0.05, 1, 1, 99u};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, FP, M, s.K, s.N, &gen), 0);
    td_out r, o;
    td_reference(&s, &d, 0.5f, 1, &r);
    td_out_alloc(&o, M, s.K, s.N);
    td_gpu g;
    td_gpu_open(&g, &s, &d);
    size_t need = 0, sp = 0, au = 0;
    TD_OK(twell_train_workspace_size(g.plan, M, 25.6, TWELL_PATH_DENSE, &need));
    TD_OK(twell_train_workspace_size(g.plan, M, 25.6, TWELL_PATH_SPARSE, &sp));
    TD_OK(twell_train_workspace_size(g.plan, M, 25.6, TWELL_PATH_AUTO, &au));
    printf("# workspace for M=%zu: dense %zu B, sparse estimate %zu B, auto %zu B\n", M, need, sp,
           au);
    assert_int_equal(need, tw_ctd_bytes(&s, M));
    assert_true(need >= M * s.N * 10u);
    assert_int_equal(au, need > sp ? need : sp);
    void *ws = td_dev(need, NULL);
    TD_OK(twell_train_state_set_workspace(g.state, ws, need));
    TD_OK(twell_plan_set_path(g.plan, TWELL_PATH_DENSE));
    td_poison(&g, 0xFFFFFFFFu);
    td_forward(&g);
    td_backward(&g, 0.5f);
    td_fetch(&g, 0xFFFFFFFFu, &o);
    td_compare(&s, M, &o, &r, TD_DENSE, "lent workspace");
    assert_true(twell_train_state_bytes(g.state) < 4096u); /* the lent buffer is not ours */
    /* too small: DENSE fails cleanly, AUTO runs sparse */
    TD_OK(twell_train_state_set_workspace(g.state, ws, need - 256u));
    assert_int_equal(
        twell_ffn_forward_train(g.plan, M, g.x, g.wg, g.wu, g.wd, g.y, g.stats, g.state, NULL),
        TWELL_ERR_NO_MEMORY);
    printf("#   too small, DENSE: %s\n", twell_ctx_errmsg(g_ctx));
    assert_non_null(strstr(twell_ctx_errmsg(g_ctx), "workspace"));
    TD_OK(twell_plan_set_path(g.plan, TWELL_PATH_AUTO));
    td_poison(&g, 0xFFFFFFFFu);
    td_forward(&g);
    assert_int_equal(tw_tc_state_path(g.state, TW_TC_TD_LAST_PATH), TWELL_PATH_SPARSE);
    td_backward(&g, 0.5f);
    td_fetch(&g, 0xFFFFFFFFu, &o);
    td_compare(&s, M, &o, &r, td_mode(g.state), "lent workspace too small, AUTO");
    /* detached: the state allocates its own again */
    TD_OK(twell_train_state_set_workspace(g.state, NULL, 0));
    TD_OK(twell_plan_set_path(g.plan, TWELL_PATH_DENSE));
    td_forward(&g);
    td_backward(&g, 0.5f);
    td_fetch(&g, 0xFFFFFFFFu, &o);
    td_compare(&s, M, &o, &r, TD_DENSE, "own workspace again");
    assert_true(twell_train_state_bytes(g.state) >= need);
    /* errors */
    assert_int_equal(twell_train_state_set_workspace(g.state, (char *)ws + 16, need - 16),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_train_state_set_workspace(NULL, ws, need), TWELL_ERR_INVALID_ARG);
    assert_int_equal(twell_train_workspace_size(g.plan, 0, 1.0, TWELL_PATH_DENSE, &need),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(need, 0);
    td_gpu_close(&g); /* destroys the state first: the workspace is still valid until then */
    tw_cuda_free(g_ctx, ws);
    td_out_free(&o);
    td_out_free(&r);
    tw_t_data_free(&d);
}

/* The out-of-memory fallback: with a lent workspace the dense path needs no allocation, so when
 * the device is full and the sparse state cannot grow, AUTO runs the dense path instead of
 * failing (SPARSE forced returns TWELL_ERR_NO_MEMORY). Written after the last device run of its
 * author: not run yet. */
static void test_gpu_train_dense_oom_fallback(void **st) {
    (void)st;
    twell_shape s = {sizeof(twell_shape), 128, 1024, 256, 8, BF, 1};
    size_t M = 2048;
    tw_t_gen gen = {0.10, 0, 1, 31u};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, BF, M, s.K, s.N, &gen), 0);
    td_out r, o;
    td_reference(&s, &d, 1.0f, 0, &r);
    td_out_alloc(&o, M, s.K, s.N);
    td_gpu g;
    td_gpu_open(&g, &s, &d);
    size_t need = 0;
    TD_OK(twell_train_workspace_size(g.plan, M, 102.4, TWELL_PATH_DENSE, &need));
    void *ws = td_dev(need, NULL);
    TD_OK(twell_train_state_set_workspace(g.state, ws, need));
    /* load both paths' kernels while memory is free: a dense step, then a small sparse one */
    TD_OK(twell_plan_set_path(g.plan, TWELL_PATH_DENSE));
    td_forward(&g);
    TD_OK(twell_plan_set_path(g.plan, TWELL_PATH_SPARSE));
    TD_OK(twell_ffn_forward_train(g.plan, 64, g.x, g.wg, g.wu, g.wd, g.y, g.stats, g.state, NULL));
    TD_OK(tw_cuda_synchronize(g_ctx));
    /* fill the device */
    void *fill[4096];
    size_t nfill = 0;
    for (size_t chunk = (size_t)1 << 30; chunk >= ((size_t)1 << 20) && nfill < 4096; chunk /= 2)
        while (nfill < 4096 && tw_cuda_malloc(g_ctx, chunk, &fill[nfill]) == TWELL_OK)
            nfill++;
    size_t fr = 0, tot = 0;
    TD_OK(tw_cuda_mem_info(g_ctx, &fr, &tot));
    printf("# device filled: %zu blocks, %zu bytes free of %zu\n", nfill, fr, tot);
    /* SPARSE forced: a clean TWELL_ERR_NO_MEMORY */
    assert_int_equal(
        twell_ffn_forward_train(g.plan, M, g.x, g.wg, g.wu, g.wd, g.y, g.stats, g.state, NULL),
        TWELL_ERR_NO_MEMORY);
    printf("#   SPARSE: %s\n", twell_ctx_errmsg(g_ctx));
    /* AUTO, kept on the sparse path by min_rows: falls back to the dense path */
    TD_OK(twell_plan_set_path(g.plan, TWELL_PATH_AUTO));
    TD_OK(tw_test_control(TW_TC_TD_SET_THRESHOLD, g.state, 0.0, M + 1));
    td_poison(&g, 0xFFFFFFFFu);
    td_forward(&g);
    assert_int_equal(tw_tc_state_path(g.state, TW_TC_TD_LAST_PATH), TWELL_PATH_DENSE);
    td_backward(&g, 1.0f);
    td_fetch(&g, 0xFFFFFFFFu, &o);
    for (size_t i = 0; i < nfill; i++)
        tw_cuda_free(g_ctx, fill[i]);
    td_compare(&s, M, &o, &r, TD_DENSE, "sparse out of memory, AUTO fell back to dense");
    td_gpu_close(&g);
    tw_cuda_free(g_ctx, ws);
    td_out_free(&o);
    td_out_free(&r);
    tw_t_data_free(&d);
}

/* DENSE where it cannot run: unaligned tensors (forward), and a backward of a dense forward
 * given unaligned tensors; nothing written, clear messages. */
static void test_gpu_train_dense_errors(void **st) {
    (void)st;
    twell_shape s = {sizeof(twell_shape), 64, 256, 256, 8, BF, 1};
    tw_t_gen gen = {0.05, 0, 1, 5u};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, BF, 40, s.K, s.N, &gen), 0);
    td_gpu g;
    td_gpu_open(&g, &s, &d);
    TD_OK(twell_plan_set_path(g.plan, TWELL_PATH_DENSE));
    char *yo = (char *)g.y + 2;
    assert_int_equal(
        twell_ffn_forward_train(g.plan, 39, g.x, g.wg, g.wu, g.wd, yo, g.stats, g.state, NULL),
        TWELL_ERR_UNSUPPORTED);
    printf("# unaligned DENSE forward: %s\n", twell_ctx_errmsg(g_ctx));
    td_forward(&g);
    void *dxb = td_dev(40u * s.K * 2u + 16u, NULL);
    char *dxo = (char *)dxb + 2;
    assert_int_equal(twell_ffn_backward(g.plan, g.state, 40, g.x, g.wg, g.wu, g.wd, g.dy, 1.0f, dxo,
                                        g.dwg, g.dwu, g.dwd, NULL),
                     TWELL_ERR_UNSUPPORTED);
    printf("# unaligned backward of a dense forward: %s\n", twell_ctx_errmsg(g_ctx));
    /* AUTO with unaligned tensors runs sparse and works */
    TD_OK(twell_plan_set_path(g.plan, TWELL_PATH_AUTO));
    TD_OK(twell_ffn_forward_train(g.plan, 39, g.x, g.wg, g.wu, g.wd, yo, g.stats, g.state, NULL));
    assert_int_equal(tw_tc_state_path(g.state, TW_TC_TD_LAST_PATH), TWELL_PATH_SPARSE);
    tw_cuda_free(g_ctx, dxb);
    td_gpu_close(&g);
    tw_t_data_free(&d);
}

int main(int argc, char **argv) {
    g_ctx = tw_gpu_open_or_skip("test_gpu_train_dense");
    printf("# %s\n", twell_ctx_device_name(g_ctx));
    size_t ncases = sizeof td_cases / sizeof td_cases[0];
    int small = argc > 1 && !strcmp(argv[1], "small");
    if (small)
        ncases = 2;
    struct CMUnitTest tests[sizeof td_cases / sizeof td_cases[0] + 6];
    static char names[sizeof td_cases / sizeof td_cases[0]][128];
    for (size_t i = 0; i < ncases; i++) {
        const td_case *c = &td_cases[i];
        snprintf(names[i], sizeof names[i], "test_gpu_train_dense_M%zu_K%u_N%u_T%u_%s_%s_d%.3f",
                 c->M, c->K, c->N, c->T, c->dt == BF ? "bf16" : "fp16",
                 c->skew ? "skewed" : "uniform", c->density);
        struct CMUnitTest t = {names[i], test_gpu_train_dense_case, NULL, NULL, (void *)c};
        tests[i] = t;
    }
    size_t n = ncases;
    struct CMUnitTest t1 = cmocka_unit_test(test_gpu_train_dense_errors);
    tests[n++] = t1;
    static const struct CMUnitTest more[] = {cmocka_unit_test(test_gpu_train_dense_probe),
                                             cmocka_unit_test(test_gpu_train_dense_switching),
                                             cmocka_unit_test(test_gpu_train_dense_workspace),
                                             cmocka_unit_test(test_gpu_train_dense_oom_fallback),
                                             cmocka_unit_test(test_gpu_train_dense_release)};
    for (size_t i = 0; !small && i < sizeof more / sizeof more[0]; i++)
        tests[n++] = more[i];
    int rc = _cmocka_run_group_tests("test_gpu_train_dense", tests, n, NULL, NULL);
    twell_ctx_destroy(g_ctx);
    return rc;
}
