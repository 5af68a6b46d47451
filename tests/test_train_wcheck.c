/* test_train_wcheck.c — the bench's scaled weight-gradient check (tests/verify/train_wcheck.c)
 * against the dense fp64 model of tests/support/ref64_train.c: the exact gradients pass, its scale
 * is the model's Σ|terms| (an error of 1.5e-5 of it reads 1.5e-5), one element off by 3e-5 of its
 * scale or two neurons swapped fail at that element, the mask leaves neurons out, the library's CPU
 * result passes, and the L1 term of an entry whose U sign fp32 cannot fix gets its allowance.
 * labels: unit */
#include "ref64_train.h"
#include "train_wcheck.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define WK_M 37
#define WK_K 64
#define WK_N 128

/* One data set with its fp64 model (support from the model's rounded gate), row lists, exact
 * gradients and scales. */
typedef struct {
    tw_t_data d;
    tw_t_ref r;
    uint64_t *row_off;
    uint32_t *col;
    uint16_t *pbits;
    tw_train_support sup;
    double *b[3], *sc[3]; /* dWg, dWu, dWd and their scales, [N,K] */
    float *got[3];
    double lambda;
} wk_case;

static void wk_sup_from_p(wk_case *c, const double *P) {
    size_t M = c->d.M, N = c->d.N, e = 0;
    c->row_off = malloc((M + 1) * sizeof *c->row_off);
    c->col = malloc((M * N + 1) * sizeof *c->col);
    c->pbits = malloc((M * N + 1) * sizeof *c->pbits);
    assert_true(c->row_off && c->col && c->pbits);
    for (size_t m = 0; m < M; m++) {
        c->row_off[m] = e;
        for (size_t n = 0; n < N; n++)
            if (P[m * N + n] > 0.0)
                c->col[e] = (uint32_t)n, c->pbits[e++] = tw_t_round16(c->d.dt, P[m * N + n]);
    }
    c->row_off[M] = e;
    c->sup.M = M, c->sup.row_off = c->row_off, c->sup.col = c->col, c->sup.pbits = c->pbits;
}

static void wk_open(wk_case *c, twell_dtype dt, int skew, uint64_t seed) {
    memset(c, 0, sizeof *c);
    tw_t_gen g = {0.12, skew, 0, seed};
    assert_int_equal(tw_t_data_make(&c->d, dt, WK_M, WK_K, WK_N, &g), 0);
    size_t xk = (size_t)WK_M * WK_K, wk = (size_t)WK_N * WK_K;
    double *x = tw_t_to_f64(dt, c->d.x, xk), *wg = tw_t_to_f64(dt, c->d.wg, wk);
    double *wu = tw_t_to_f64(dt, c->d.wu, wk), *wd = tw_t_to_f64(dt, c->d.wd, wk);
    double *dy = tw_t_to_f64(dt, c->d.dy, xk), *dx = malloc(xk * 8), *sy = malloc(xk * 8),
           *sdx = malloc(xk * 8);
    assert_true(x && wg && wu && wd && dy && dx && sy && sdx);
    for (int t = 0; t < 3; t++) {
        c->b[t] = malloc(wk * 8), c->sc[t] = malloc(wk * 8), c->got[t] = malloc(wk * 4);
        assert_true(c->b[t] && c->sc[t] && c->got[t]);
    }
    c->lambda = 0.75;
    assert_int_equal(
        tw_t_ref_forward(&c->r, WK_M, WK_K, WK_N, x, wg, wu, wd, TW_T_P_ROUND, dt, NULL), 0);
    tw_t_ref_backward(&c->r, x, wg, wu, wd, dy, c->lambda, dx, c->b[0], c->b[1], c->b[2]);
    assert_int_equal(
        tw_t_ref_scales(&c->r, x, wg, wu, wd, dy, c->lambda, sy, sdx, c->sc[0], c->sc[1], c->sc[2]),
        0);
    wk_sup_from_p(c, c->r.P);
    assert_true(c->row_off[WK_M] > 50); /* real sparse data */
    free(x), free(wg), free(wu), free(wd), free(dy), free(dx), free(sy), free(sdx);
}

static void wk_close(wk_case *c) {
    tw_t_ref_free(&c->r);
    tw_t_data_free(&c->d);
    free(c->row_off), free(c->col), free(c->pbits);
    for (int t = 0; t < 3; t++)
        free(c->b[t]), free(c->sc[t]), free(c->got[t]);
}

/* got = exact + rel · scale, rounded to fp32. */
static void wk_set(wk_case *c, double rel) {
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < (size_t)WK_N * WK_K; i++)
            c->got[t][i] = (float)(c->b[t][i] + rel * c->sc[t][i]);
}

static void wk_run(wk_case *c, const unsigned char *mask, tw_train_wcheck *res) {
    const float *const g[3] = {c->got[0], c->got[1], c->got[2]};
    assert_int_equal(tw_train_wgrad_check(c->d.dt, WK_K, WK_N, &c->sup, c->d.x, c->d.wu, c->d.wd,
                                          c->d.dy, c->lambda, g, 1, mask, res),
                     0);
    printf("#   worst scaled dWg %.3e dWu %.3e dWd %.3e; %zu neurons, %zu sign-ambiguous\n",
           res->worst[0], res->worst[1], res->worst[2], res->neurons, res->sign_amb);
}

static void test_train_wcheck_exact_and_scale(void **st) {
    (void)st;
    const twell_dtype dts[2] = {TWELL_DTYPE_BF16, TWELL_DTYPE_FP16};
    for (int i = 0; i < 2; i++) {
        wk_case c;
        wk_open(&c, dts[i], i, 11u + (uint64_t)i);
        tw_train_wcheck r;
        wk_set(&c, 0.0); /* the exact gradients, rounded to fp32: far inside the tolerance */
        wk_run(&c, NULL, &r);
        assert_int_equal(r.neurons, WK_N);
        for (int t = 0; t < 3; t++)
            assert_true(r.worst[t] < 1e-7);
        /* 1.5e-5 of the model's scale everywhere reads 1.5e-5: the scale is Σ|terms| */
        wk_set(&c, 1.5e-5);
        wk_run(&c, NULL, &r);
        for (int t = 0; t < 3; t++) {
            assert_true(r.worst[t] > 1.5e-5 - 2e-7 && r.worst[t] < 1.5e-5 + 2e-7);
            assert_true(r.worst[t] <= TW_WCHECK_TOL);
        }
        /* two results against the one model (the bench's GPU and CPU): each its own outcome */
        float *off[3];
        for (int t = 0; t < 3; t++) {
            off[t] = malloc((size_t)WK_N * WK_K * 4);
            assert_non_null(off[t]);
            memcpy(off[t], c.got[t], (size_t)WK_N * WK_K * 4);
        }
        wk_set(&c, 0.0);
        const float *const g2[6] = {off[0], off[1], off[2], c.got[0], c.got[1], c.got[2]};
        tw_train_wcheck r2[2];
        assert_int_equal(tw_train_wgrad_check(c.d.dt, WK_K, WK_N, &c.sup, c.d.x, c.d.wu, c.d.wd,
                                              c.d.dy, c.lambda, g2, 2, NULL, r2),
                         0);
        for (int t = 0; t < 3; t++) {
            assert_true(r2[0].worst[t] == r.worst[t] && r2[0].at[t] == r.at[t]);
            assert_true(r2[1].worst[t] < 1e-7);
            free(off[t]);
        }
        assert_int_equal(r2[1].neurons, WK_N);
        wk_close(&c);
    }
}

static void test_train_wcheck_detects_errors(void **st) {
    (void)st;
    wk_case c;
    wk_open(&c, TWELL_DTYPE_BF16, 1, 21u);
    /* an element of an active neuron */
    size_t n = c.col[c.row_off[WK_M] / 2], at = n * WK_K + 17;
    unsigned char mask[WK_N];
    memset(mask, 1, sizeof mask);
    for (int t = 0; t < 3; t++) {
        assert_true(c.sc[t][at] > 0.0);
        wk_set(&c, 0.0);
        c.got[t][at] = (float)(c.b[t][at] + 3e-5 * c.sc[t][at]);
        tw_train_wcheck r;
        wk_run(&c, NULL, &r);
        assert_true(r.worst[t] > TW_WCHECK_TOL);
        assert_int_equal(r.at[t], at);
        for (int o = 0; o < 3; o++)
            if (o != t)
                assert_true(r.worst[o] < 1e-7);
        mask[n] = 0; /* left out: nothing to see */
        wk_run(&c, mask, &r);
        assert_int_equal(r.neurons, WK_N - 1);
        assert_true(r.worst[t] < 1e-7);
        mask[n] = 1;
        /* NaN reads as the worst */
        c.got[t][at] = nanf("");
        wk_run(&c, NULL, &r);
        assert_true(r.worst[t] > 1e300);
    }
    /* two active neurons' gradients swapped (a misplaced row): far out */
    size_t n2 = c.col[0] == n ? c.col[1] : c.col[0];
    assert_true(n2 != n);
    wk_set(&c, 0.0);
    for (int t = 0; t < 3; t++)
        for (size_t k = 0; k < WK_K; k++) {
            float v = c.got[t][n * WK_K + k];
            c.got[t][n * WK_K + k] = c.got[t][n2 * WK_K + k];
            c.got[t][n2 * WK_K + k] = v;
        }
    tw_train_wcheck r;
    wk_run(&c, NULL, &r);
    for (int t = 0; t < 3; t++)
        assert_true(r.worst[t] > 1e-2);
    wk_close(&c);
}

/* The library's CPU backend on the same data: within the tolerance on its own support. */
static void test_train_wcheck_library_passes(void **st) {
    (void)st;
    const twell_dtype dts[2] = {TWELL_DTYPE_BF16, TWELL_DTYPE_FP16};
    for (int i = 0; i < 2; i++) {
        wk_case c;
        wk_open(&c, dts[i], 1 - i, 31u + (uint64_t)i);
        twell_shape s = {sizeof(twell_shape), WK_K, WK_N, 64, 4, dts[i], 1};
        tw_t_lib L;
        assert_int_equal(tw_t_lib_open(&L, &s, 2), 0);
        uint16_t *y = malloc((size_t)WK_M * WK_K * 2), *dx = malloc((size_t)WK_M * WK_K * 2);
        float stats[2];
        assert_true(y && dx);
        assert_int_equal(tw_t_lib_forward(&L, &c.d, y, stats), TWELL_OK);
        assert_int_equal(
            tw_t_lib_backward(&L, &c.d, (float)c.lambda, dx, c.got[0], c.got[1], c.got[2]),
            TWELL_OK);
        double *plib = tw_t_lib_dense_p(&L);
        assert_non_null(plib);
        free(c.row_off), free(c.col), free(c.pbits);
        wk_sup_from_p(&c, plib);
        tw_train_wcheck r;
        wk_run(&c, NULL, &r);
        for (int t = 0; t < 3; t++) {
            assert_true(r.worst[t] <= TW_WCHECK_TOL);
            assert_true(r.worst[t] < 1e-6); /* measured ~1e-7 */
        }
        free(plib), free(y), free(dx);
        tw_t_lib_close(&L);
        wk_close(&c);
    }
}

/* M = 1, K = 2, N = 1: x = (1, 1), Wu_0 = (1, -1) gives U = 0 exactly, so an fp32 U may carry
 * either sign: dWu = (D ± c)·P·x are both accepted, more is not. */
static void test_train_wcheck_sign_allowance(void **st) {
    (void)st;
    twell_dtype dt = TWELL_DTYPE_BF16;
    uint16_t x[2] = {0x3f80, 0x3f80}, wu[2] = {0x3f80, 0xbf80}, wd[2] = {0x3f80, 0};
    uint16_t dy[2] = {0x3f00, 0x3e80}; /* 0.5, 0.25: D = 0.5 */
    uint64_t ro[2] = {0, 1};
    uint32_t col[1] = {0};
    uint16_t pb[1] = {0x3f80}; /* P = 1 */
    tw_train_support sup = {1, ro, col, pb};
    float g[2] = {0, 0}, u[2], d[2] = {0, 0};
    const float *const got[3] = {g, u, d};
    tw_train_wcheck r;
    const float ok[3] = {0.5f, 1.5f, -0.5f}, bad[2] = {1.6f, -0.6f}; /* c = λ/M = 1 */
    for (int i = 0; i < 3; i++) {
        u[0] = u[1] = ok[i];
        assert_int_equal(tw_train_wgrad_check(dt, 2, 1, &sup, x, wu, wd, dy, 1.0, got, 1, NULL, &r),
                         0);
        assert_int_equal(r.sign_amb, 1);
        assert_true(r.worst[0] == 0.0 && r.worst[1] == 0.0 && r.worst[2] == 0.0);
    }
    for (int i = 0; i < 2; i++) {
        u[0] = u[1] = bad[i];
        assert_int_equal(tw_train_wgrad_check(dt, 2, 1, &sup, x, wu, wd, dy, 1.0, got, 1, NULL, &r),
                         0);
        assert_true(r.worst[1] > TW_WCHECK_TOL);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_wcheck_exact_and_scale),
        cmocka_unit_test(test_train_wcheck_detects_errors),
        cmocka_unit_test(test_train_wcheck_library_passes),
        cmocka_unit_test(test_train_wcheck_sign_allowance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
