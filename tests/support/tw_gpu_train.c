/* tw_gpu_train.c — the GPU training tests' shared fixture and checks (see tw_gpu_train.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tw_gpu.h"
#include "tw_gpu_train.h"

#include "cuda_driver.h"
#include "half.h"
#include "internal.h"
#include "train_check.h"
#include "twellrt_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

twell_ctx *gt_ctx;

static void gt_log(void *user, twell_log_level level, const char *msg) {
    (void)level;
    snprintf((char *)user, 512, "%s", msg);
}

void gt_open_or_skip(const char *test) {
    static char why[512];
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CUDA;
    o.log = gt_log;
    o.log_user = why;
    o.log_level = TWELL_LOG_ERROR;
    twell_status st = twell_ctx_create(&o, &gt_ctx);
    if (st != TWELL_OK) {
        char what[sizeof why + 64];
        snprintf(what, sizeof what, "no usable CUDA device (%s: %s)", twell_status_name(st), why);
        tw_gpu_unavailable(test, what);
    }
    printf("# %s\n", twell_ctx_device_name(gt_ctx));
}

twell_shape gt_shape(const gt_case *c) {
    twell_shape s = {sizeof(twell_shape), c->K, c->N, c->T, c->C, c->dt, 1};
    return s;
}

/* ---- device buffers (optionally at an unaligned offset) ---- */

void gt_alloc(gt_dbuf *b, size_t bytes, size_t offset) {
    b->base = NULL;
    GT_OK(tw_cuda_malloc(gt_ctx, bytes + 16, &b->base));
    b->p = (char *)b->base + offset;
}

void gt_upload(gt_dbuf *b, const void *src, size_t bytes, size_t offset) {
    gt_alloc(b, bytes, offset);
    GT_OK(tw_cuda_memcpy_htod(gt_ctx, b->p, src, bytes));
}

void gt_out_alloc(gt_out *o, size_t M, uint32_t K, uint32_t N) {
    o->y = malloc(M * K * 2);
    o->dx = malloc(M * K * 2);
    o->dwg = malloc((size_t)N * K * 4);
    o->dwu = malloc((size_t)N * K * 4);
    o->dwd = malloc((size_t)N * K * 4);
    assert_true(o->y && o->dx && o->dwg && o->dwu && o->dwd);
}

void gt_out_free(gt_out *o) {
    free(o->y);
    free(o->dx);
    free(o->dwg);
    free(o->dwu);
    free(o->dwd);
}

void gt_expect_same(const gt_out *a, const gt_out *b, size_t M, uint32_t K, uint32_t N) {
    size_t xk = M * K, wk = (size_t)N * K;
    assert_memory_equal(a->y, b->y, xk * 2);
    assert_memory_equal(a->dx, b->dx, xk * 2);
    assert_memory_equal(a->dwg, b->dwg, wk * 4);
    assert_memory_equal(a->dwu, b->dwu, wk * 4);
    assert_memory_equal(a->dwd, b->dwd, wk * 4);
    assert_memory_equal(a->stats, b->stats, 8);
}

void gt_gpu_open(gt_gpu *g, const twell_shape *s, const gt_case *c) {
    memset(g, 0, sizeof *g);
    GT_OK(twell_plan_create(gt_ctx, s, &g->plan));
    GT_OK(twell_train_state_create(g->plan, &g->state));
    /* the per-entry route for every row (the route these tests check, which also serves
     * unaligned tensors and devices without the dense GEMMs); the heavy-row route, on by
     * default, is test_gpu_train_heavy's */
    GT_OK(tw_test_control(TW_TC_TRAIN_SET_HEAVY, g->state, 0LL));
    if (c->row_len || c->nrn_len)
        GT_OK(tw_test_control(TW_TC_TRAIN_SET_CHUNK_LEN, g->state, (uint64_t)c->row_len,
                              (uint64_t)c->nrn_len));
}

void gt_gpu_data(gt_gpu *g, const tw_t_data *d, int unaligned) {
    size_t xk = d->M * d->K * 2, wk = (size_t)d->N * d->K * 2, o16 = unaligned ? 2 : 0;
    size_t o32 = unaligned ? 4 : 0;
    g->M = d->M, g->K = d->K, g->N = d->N;
    gt_upload(&g->x, d->x, xk, o16);
    gt_upload(&g->wg, d->wg, wk, o16);
    gt_upload(&g->wu, d->wu, wk, o16);
    gt_upload(&g->wd, d->wd, wk, o16);
    gt_upload(&g->dy, d->dy, xk, o16);
    gt_alloc(&g->y, xk, o16);
    gt_alloc(&g->dx, xk, o16);
    gt_alloc(&g->dwg, wk * 2, o32);
    gt_alloc(&g->dwu, wk * 2, o32);
    gt_alloc(&g->dwd, wk * 2, o32);
    gt_alloc(&g->stats, 8, 0);
}

void gt_gpu_free_data(gt_gpu *g) {
    gt_dbuf *b[] = {&g->x,  &g->wg,  &g->wu,  &g->wd,  &g->dy,   &g->y,
                    &g->dx, &g->dwg, &g->dwu, &g->dwd, &g->stats};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        tw_cuda_free(gt_ctx, b[i]->base);
        b[i]->base = b[i]->p = NULL;
    }
}

void gt_gpu_close(gt_gpu *g) {
    gt_gpu_free_data(g);
    twell_train_state_destroy(g->state);
    twell_plan_destroy(g->plan);
}

/* Fills `bytes` (a multiple of 2) of device memory at p with the 32-bit pattern repeated, by a
 * copy from the host: cuMemsetD32 needs 4-byte alignment, the unaligned cases have 2. */
void gt_poison(void *p, size_t bytes, uint32_t pattern) {
    unsigned char *h = malloc(bytes);
    assert_non_null(h);
    for (size_t i = 0; i < bytes; i++)
        h[i] = (unsigned char)(pattern >> (8 * (i % 4)));
    GT_OK(tw_cuda_memcpy_htod(gt_ctx, p, h, bytes));
    free(h);
}

/* Poisons every output with a NaN pattern, runs forward + backward, copies the outputs back and
 * checks every element was written and is finite. */
void gt_gpu_run(gt_gpu *g, float lambda, uint32_t poison, gt_out *o) {
    size_t M = g->M, K = g->K, N = g->N;
    uint16_t p16 = (uint16_t)(poison & 0xffffu);
    uint32_t p16x2 = (uint32_t)p16 << 16 | p16;
    gt_poison(g->y.p, M * K * 2, p16x2);
    gt_poison(g->dx.p, M * K * 2, p16x2);
    gt_poison(g->dwg.p, (size_t)N * K * 4, poison);
    gt_poison(g->dwu.p, (size_t)N * K * 4, poison);
    gt_poison(g->dwd.p, (size_t)N * K * 4, poison);
    gt_poison(g->stats.p, 8, poison);
    GT_OK(twell_ffn_forward_train(g->plan, M, g->x.p, g->wg.p, g->wu.p, g->wd.p, g->y.p, g->stats.p,
                                  g->state, NULL));
    GT_OK(twell_ffn_backward(g->plan, g->state, M, g->x.p, g->wg.p, g->wu.p, g->wd.p, g->dy.p,
                             lambda, g->dx.p, g->dwg.p, g->dwu.p, g->dwd.p, NULL));
    GT_OK(tw_cuda_synchronize(gt_ctx));
    GT_OK(tw_cuda_memcpy_dtoh(gt_ctx, o->y, g->y.p, M * K * 2));
    GT_OK(tw_cuda_memcpy_dtoh(gt_ctx, o->dx, g->dx.p, M * K * 2));
    GT_OK(tw_cuda_memcpy_dtoh(gt_ctx, o->dwg, g->dwg.p, N * K * 4));
    GT_OK(tw_cuda_memcpy_dtoh(gt_ctx, o->dwu, g->dwu.p, N * K * 4));
    GT_OK(tw_cuda_memcpy_dtoh(gt_ctx, o->dwd, g->dwd.p, N * K * 4));
    GT_OK(tw_cuda_memcpy_dtoh(gt_ctx, o->stats, g->stats.p, 8));
    twell_dtype dt = twell_plan_shape(g->plan)->dtype;
    const uint16_t *h16[2] = {o->y, o->dx};
    const char *n16[2] = {"y", "dx"};
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < M * K; i++)
            if (h16[t][i] == p16 || !isfinite(tw_half_to_f32(dt, h16[t][i])))
                fail_msg("%s[%zu][%zu] = %04x: never written or not finite (poison %04x)", n16[t],
                         i / K, i % K, h16[t][i], p16);
    const float *h32[3] = {o->dwg, o->dwu, o->dwd};
    const char *n32[3] = {"dwg", "dwu", "dwd"};
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < N * K; i++)
            if (!isfinite(h32[t][i]))
                fail_msg("%s[%zu][%zu] = %g: never written or not finite", n32[t], i / K, i % K,
                         (double)h32[t][i]);
    if (!isfinite(o->stats[0]) || !isfinite(o->stats[1]))
        fail_msg("stats = (%g, %g): never written or not finite", (double)o->stats[0],
                 (double)o->stats[1]);
}

const char *const gt_names[5] = {"y", "dx", "dWg", "dWu", "dWd"};

void gt_compare(const twell_shape *s, size_t M, const gt_out *g, const gt_out *r,
                const unsigned char *row_same, const unsigned char *nrn_same, gt_errs *e) {
    e->e[0] =
        tw_train_err_h(s->dtype, g->y, r->y, M, s->K, row_same, &e->at[0], &e->bit[0], &e->cmp[0]);
    e->e[1] = tw_train_err_h(s->dtype, g->dx, r->dx, M, s->K, row_same, &e->at[1], &e->bit[1],
                             &e->cmp[1]);
    const float *gf[3] = {g->dwg, g->dwu, g->dwd}, *rf[3] = {r->dwg, r->dwu, r->dwd};
    for (int t = 0; t < 3; t++)
        e->e[2 + t] = tw_train_err_f(gf[t], rf[t], s->N, s->K, nrn_same, &e->at[2 + t],
                                     &e->bit[2 + t], &e->cmp[2 + t]);
}

/* w_fp64: the weight gradients are judged by gt_expect_fp64 instead (printed here only). */
void gt_expect_w(const twell_shape *s, const gt_errs *e, int w_fp64) {
    double t16 = s->dtype == BF ? 5e-3 : 1e-3;
    for (int t = 0; t < 5; t++) {
        double tol = t < 2 ? t16 : 1e-5;
        printf("#   %-3s worst row-rel %.3e (row %zu) tol %.0e%s; bitwise equal %zu/%zu\n",
               gt_names[t], e->e[t], e->at[t], tol, t >= 2 && w_fp64 ? " (not applied)" : "",
               e->bit[t], e->cmp[t]);
        char what[64];
        snprintf(what, sizeof what, "%s row %zu", gt_names[t], e->at[t]);
        if (t < 2 || !w_fp64)
            GT_LE(e->e[t], tol, what);
    }
}

void gt_expect(const twell_shape *s, const gt_errs *e) { gt_expect_w(s, e, 0); }
