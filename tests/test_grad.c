/*
 * test_grad.c — the training backward by finite differences: the fp64 model's gradients (the
 * oracle) against central differences of its loss <dy, y> + λ·L1, then the library against it.
 * labels: unit
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tw_check.h"

#include "ref64_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Central differences of a loss that is at most quadratic in each single parameter (for a fixed
 * support and fixed signs of U) are exact up to fp64 rounding of the loss, ~1e-16 of Σ|loss
 * terms| per operation: the allowed error is FD_TOL of the entry's magnitude scale
 * (tw_t_ref_scales) plus FD_NOISE·Σ|loss terms| / eps. A large eps keeps the rounding small;
 * entries whose ±eps moves a ReLU or the sign of U are skipped. */
#define FD_EPS 1e-4
#define FD_TOL 1e-6
#define FD_NOISE 1e-14
#define LIB_TOL 2e-5 /* beyond one 16-bit rounding, as in test_ref_train */

typedef struct {
    size_t M;
    uint32_t K, N, T, C;
    twell_dtype dt;
    double density;
    double lambda;
    int zero_dy; /* loss = λ·L1 alone: isolates the sign term */
} gcase;

/* The small cases: ~10-30% active, 7 slots per 64 columns so rows overflow their tiles. */
static const gcase k_cases[] = {
    {5, 16, 64, 64, 8, TWELL_DTYPE_BF16, 0.20, 0.0, 0},
    {5, 16, 64, 64, 8, TWELL_DTYPE_BF16, 0.20, 0.5, 0},
    {4, 32, 128, 64, 8, TWELL_DTYPE_FP16, 0.15, 0.8, 0},
    {3, 16, 64, 64, 4, TWELL_DTYPE_FP16, 0.25, 1.0, 1},
};

typedef struct {
    double *x, *wg, *wu, *wd, *dy;
} params;

static void params_make(params *p, const tw_t_data *d, int zero_dy) {
    size_t xk = d->M * d->K, wk = (size_t)d->N * d->K;
    p->x = tw_t_to_f64(d->dt, d->x, xk);
    p->dy = tw_t_to_f64(d->dt, d->dy, xk);
    p->wg = tw_t_to_f64(d->dt, d->wg, wk);
    p->wu = tw_t_to_f64(d->dt, d->wu, wk);
    p->wd = tw_t_to_f64(d->dt, d->wd, wk);
    assert_true(p->x && p->dy && p->wg && p->wu && p->wd);
    if (zero_dy)
        memset(p->dy, 0, xk * sizeof *p->dy);
}

static void params_free(params *p) {
    free(p->x);
    free(p->dy);
    free(p->wg);
    free(p->wu);
    free(p->wd);
}

static void make_data(const gcase *c, uint64_t seed, tw_t_data *d) {
    tw_t_gen g = {c->density, 0, 0, seed};
    assert_int_equal(tw_t_data_make(d, c->dt, c->M, c->K, c->N, &g), 0);
}

/* The loss at the current parameters, and whether the support and the signs of U equal base's
 * (the gradient is only defined, and the differences only exact, when they do). */
static double loss_at(const gcase *c, const params *p, const tw_t_ref *base, int *same) {
    tw_t_ref r;
    assert_int_equal(
        tw_t_ref_forward(&r, c->M, c->K, c->N, p->x, p->wg, p->wu, p->wd, TW_T_P_RELU, c->dt, NULL),
        0);
    *same = 1;
    for (size_t i = 0; i < c->M * c->N && *same; i++) {
        int on = r.P[i] > 0.0, on0 = base->P[i] > 0.0;
        int su = (r.U[i] > 0.0) - (r.U[i] < 0.0), su0 = (base->U[i] > 0.0) - (base->U[i] < 0.0);
        *same = on == on0 && su == su0;
    }
    double l = tw_t_ref_loss(&r, p->dy, c->lambda);
    tw_t_ref_free(&r);
    return l;
}

static void test_grad_oracle_matches_finite_differences(void **st) {
    (void)st;
    for (size_t ci = 0; ci < sizeof k_cases / sizeof k_cases[0]; ci++) {
        const gcase *c = &k_cases[ci];
        tw_t_data d;
        make_data(c, 500 + ci, &d);
        params p;
        params_make(&p, &d, c->zero_dy);
        size_t xk = c->M * c->K, wk = (size_t)c->N * c->K;
        tw_t_ref base;
        assert_int_equal(tw_t_ref_forward(&base, c->M, c->K, c->N, p.x, p.wg, p.wu, p.wd,
                                          TW_T_P_RELU, c->dt, NULL),
                         0);
        double frac = (double)base.nnz / (double)(c->M * c->N);
        assert_true(frac >= 0.08 && frac <= 0.40); /* real sparse support, never empty */

        double *g[4], *sc[4], *sy = malloc(xk * sizeof *sy);
        for (int i = 0; i < 4; i++) {
            g[i] = malloc((i == 0 ? xk : wk) * sizeof(double));
            sc[i] = malloc((i == 0 ? xk : wk) * sizeof(double));
            assert_true(g[i] && sc[i]);
        }
        assert_non_null(sy);
        tw_t_ref_backward(&base, p.x, p.wg, p.wu, p.wd, p.dy, c->lambda, g[0], g[1], g[2], g[3]);
        assert_int_equal(tw_t_ref_scales(&base, p.x, p.wg, p.wu, p.wd, p.dy, c->lambda, sy, sc[0],
                                         sc[1], sc[2], sc[3]),
                         0);

        double loss_abs = c->lambda * base.L1;
        for (size_t i = 0; i < xk; i++)
            loss_abs += fabs(p.dy[i]) * sy[i];
        double noise = FD_NOISE * loss_abs / FD_EPS;
        static const char *names[4] = {"x", "Wg", "Wu", "Wd"};
        double *tensors[4] = {p.x, p.wg, p.wu, p.wd};
        printf("  M=%zu K=%u N=%u %s lambda=%.2f%s nnz=%zu:", c->M, c->K, c->N,
               c->dt == TWELL_DTYPE_BF16 ? "bf16" : "fp16", c->lambda,
               c->zero_dy ? " (dy = 0)" : "", base.nnz);
        for (int t = 0; t < 4; t++) {
            size_t n = t == 0 ? xk : wk, checked = 0, skipped = 0, nonzero = 0;
            double worst = 0.0;
            for (size_t i = 0; i < n; i++) {
                double keep = tensors[t][i];
                int same_p, same_m;
                tensors[t][i] = keep + FD_EPS;
                double lp = loss_at(c, &p, &base, &same_p);
                tensors[t][i] = keep - FD_EPS;
                double lm = loss_at(c, &p, &base, &same_m);
                tensors[t][i] = keep;
                if (!same_p || !same_m) { /* a ReLU or |U| kink inside ±eps */
                    skipped++;
                    continue;
                }
                checked++;
                double fd = (lp - lm) / (2.0 * FD_EPS);
                double an = g[t][i];
                nonzero += an != 0.0;
                /* reported: the raw error; checked: beyond the loss's rounding noise */
                worst = fmax(worst, fabs(fd - an) / (sc[t][i] + 1e-300));
                double e = fmax(fabs(fd - an) - noise, 0.0) / (sc[t][i] + 1e-300);
                CHECK_LE(e, FD_TOL, "d loss / d %s[%zu]: analytic %.12g, central difference %.12g",
                         names[t], i, an, fd);
            }
            printf(" %s %.1e (%zu skipped)", names[t], worst, skipped);
            assert_true(checked >= n * 9 / 10);
            assert_true(nonzero > 0 || (c->zero_dy && t == 3)); /* dWd = Tᵀ·dy */
        }
        printf("\n");
        for (int i = 0; i < 4; i++) {
            free(g[i]);
            free(sc[i]);
        }
        free(sy);
        tw_t_ref_free(&base);
        params_free(&p);
        tw_t_data_free(&d);
    }
}

/* The library's backward (fp32 on 16-bit inputs) against the oracle on the same data: the
 * oracle with the gate rounded to dtype as the library stores it. */
static void test_grad_library_matches_oracle(void **st) {
    (void)st;
    for (size_t ci = 0; ci < sizeof k_cases / sizeof k_cases[0]; ci++) {
        const gcase *c = &k_cases[ci];
        tw_t_data d;
        make_data(c, 500 + ci, &d);
        if (c->zero_dy)
            memset(d.dy, 0, c->M * c->K * 2);
        params p;
        params_make(&p, &d, c->zero_dy);
        size_t xk = c->M * c->K, wk = (size_t)c->N * c->K;

        twell_shape s = {sizeof(twell_shape), c->K, c->N, c->T, c->C, c->dt, 1};
        tw_t_lib L;
        assert_int_equal(tw_t_lib_open(&L, &s, 2), 0);
        uint16_t *y = malloc(xk * 2), *dx = malloc(xk * 2);
        float *dw[3];
        for (int i = 0; i < 3; i++) {
            dw[i] = malloc(wk * sizeof(float));
            assert_non_null(dw[i]);
            memset(dw[i], 0xff, wk * sizeof(float)); /* NaN poison */
        }
        assert_true(y && dx);
        memset(dx, 0xab, xk * 2);
        float stats[2];
        assert_int_equal(tw_t_lib_forward(&L, &d, y, stats), TWELL_OK);
        assert_int_equal(tw_t_lib_backward(&L, &d, (float)c->lambda, dx, dw[0], dw[1], dw[2]),
                         TWELL_OK);

        /* Generic data: a gate value may sit one rounding step from fp64's where the fp32 dot
         * product lands across a rounding boundary; the oracle then uses the library's values
         * (test_ref_train checks that those differences are legitimate). */
        double *plib = tw_t_lib_dense_p(&L);
        assert_non_null(plib);
        tw_t_ref r;
        assert_int_equal(tw_t_ref_forward(&r, c->M, c->K, c->N, p.x, p.wg, p.wu, p.wd, TW_T_P_ROUND,
                                          c->dt, plib),
                         0);
        double *b[4], *sc[4], *sy = malloc(xk * sizeof *sy), *lib[4];
        for (int i = 0; i < 4; i++) {
            b[i] = malloc((i == 0 ? xk : wk) * sizeof(double));
            sc[i] = malloc((i == 0 ? xk : wk) * sizeof(double));
            assert_true(b[i] && sc[i]);
        }
        tw_t_ref_backward(&r, p.x, p.wg, p.wu, p.wd, p.dy, c->lambda, b[0], b[1], b[2], b[3]);
        assert_int_equal(tw_t_ref_scales(&r, p.x, p.wg, p.wu, p.wd, p.dy, c->lambda, sy, sc[0],
                                         sc[1], sc[2], sc[3]),
                         0);
        lib[0] = tw_t_to_f64(c->dt, dx, xk);
        for (int i = 0; i < 3; i++)
            lib[i + 1] = tw_t_f32_to_f64(dw[i], wk);
        static const char *names[4] = {"dx", "dWg", "dWu", "dWd"};
        double rr = c->dt == TWELL_DTYPE_BF16 ? 0x1.0p-8 : 0x1.0p-11;
        double ra = c->dt == TWELL_DTYPE_BF16 ? 0x1.0p-134 : 0x1.0p-25;
        printf("  M=%zu K=%u N=%u T=%u C=%u lambda=%.2f worst:", c->M, c->K, c->N, c->T, c->C,
               c->lambda);
        for (int i = 0; i < 4; i++) {
            assert_non_null(lib[i]);
            size_t at;
            double e = tw_t_err_scaled(lib[i], b[i], sc[i], i == 0 ? xk : wk, i == 0 ? rr : 0.0,
                                       i == 0 ? ra : 0.0, &at);
            printf(" %s %.1e", names[i], e);
            CHECK_LE(e, LIB_TOL, "%s[%zu] = %.9g vs oracle %.9g", names[i], at, lib[i][at],
                     b[i][at]);
        }
        printf("\n");
        for (int i = 0; i < 4; i++) {
            free(b[i]);
            free(sc[i]);
            free(lib[i]);
        }
        for (int i = 0; i < 3; i++)
            free(dw[i]);
        free(sy);
        free(plib);
        free(y);
        free(dx);
        tw_t_ref_free(&r);
        tw_t_lib_close(&L);
        params_free(&p);
        tw_t_data_free(&d);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_oracle_matches_finite_differences),
        cmocka_unit_test(test_grad_library_matches_oracle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
