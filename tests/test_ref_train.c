/*
 * test_ref_train.c — the CPU training forward/backward against the naive fp64 model, the saved
 * hybrid state (ELL + spill, transpose), determinism across thread counts and state reuse.
 * labels: unit
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tw_check.h"

#include "cpu_train.h"
#include "half.h"
#include "internal.h"
#include "ref64_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stated tolerance. Every result is judged against its magnitude scale s (the same model on
 * absolute values: the sum of |every term| entering it, see tw_t_ref_scales): beyond one final
 * rounding of 16-bit outputs (half an ulp: 2^-8 of the value for bf16, 2^-11 for fp16), the error
 * must stay below TOL·s. fp32 accumulation over a few hundred terms gives ~1e-6; a dropped or
 * misplaced entry gives ~1. */
#define TOL 2e-5
#define TOL_L1 1e-5

typedef struct {
    size_t M;
    uint32_t K, N, T, C;
    twell_dtype dt;
    int skew;
    double density;
} cfg;

static twell_shape cfg_shape(const cfg *c) {
    twell_shape s = {sizeof(twell_shape), c->K, c->N, c->T, c->C, c->dt, 1};
    return s;
}

/* All results of one library forward + backward, converted to fp64 for comparison. */
typedef struct {
    uint16_t *y, *dx;
    float *dwg, *dwu, *dwd;
    float stats[2];
} lib_out;

static void out_alloc(lib_out *o, size_t M, uint32_t K, uint32_t N) {
    o->y = malloc(M * K * 2);
    o->dx = malloc(M * K * 2);
    o->dwg = malloc((size_t)N * K * sizeof(float));
    o->dwu = malloc((size_t)N * K * sizeof(float));
    o->dwd = malloc((size_t)N * K * sizeof(float));
    assert_non_null(o->y);
    assert_non_null(o->dx);
    assert_non_null(o->dwg);
    assert_non_null(o->dwu);
    assert_non_null(o->dwd);
    /* poison: every element must be written */
    memset(o->y, 0xab, M * K * 2);
    memset(o->dx, 0xab, M * K * 2);
    memset(o->dwg, 0xff, (size_t)N * K * sizeof(float));
    memset(o->dwu, 0xff, (size_t)N * K * sizeof(float));
    memset(o->dwd, 0xff, (size_t)N * K * sizeof(float));
    o->stats[0] = o->stats[1] = NAN;
}

static void out_free(lib_out *o) {
    free(o->y);
    free(o->dx);
    free(o->dwg);
    free(o->dwu);
    free(o->dwd);
}

static void run_lib(tw_t_lib *L, const tw_t_data *d, float lambda, lib_out *o) {
    out_alloc(o, d->M, d->K, d->N);
    twell_status st = tw_t_lib_forward(L, d, o->y, o->stats);
    if (st != TWELL_OK)
        print_error("forward: %s: %s\n", twell_status_name(st), twell_ctx_errmsg(L->ctx));
    assert_int_equal(st, TWELL_OK);
    st = tw_t_lib_backward(L, d, lambda, o->dx, o->dwg, o->dwu, o->dwd);
    if (st != TWELL_OK)
        print_error("backward: %s: %s\n", twell_status_name(st), twell_ctx_errmsg(L->ctx));
    assert_int_equal(st, TWELL_OK);
}

/* fp64 copies of the data's tensors. */
typedef struct {
    double *x, *wg, *wu, *wd, *dy;
} data64;

static void data64_make(data64 *e, const tw_t_data *d) {
    size_t xk = d->M * d->K, wk = (size_t)d->N * d->K;
    e->x = tw_t_to_f64(d->dt, d->x, xk);
    e->dy = tw_t_to_f64(d->dt, d->dy, xk);
    e->wg = tw_t_to_f64(d->dt, d->wg, wk);
    e->wu = tw_t_to_f64(d->dt, d->wu, wk);
    e->wd = tw_t_to_f64(d->dt, d->wd, wk);
    assert_true(e->x && e->dy && e->wg && e->wu && e->wd);
}

static void data64_free(data64 *e) {
    free(e->x);
    free(e->dy);
    free(e->wg);
    free(e->wu);
    free(e->wd);
}

/* Largest pre-activation error of an fp32 dot product of K terms (sequential sum), relative
 * to Σ|x·w|, with a factor 2 of margin. */
static double gate_err_bound(uint32_t K) { return 2.0 * (double)K * 0x1.0p-24; }

/* Checks the library's saved gate against the fp64 one. exact: every value identical (the data
 * makes the fp32 gate exact). Otherwise a value may differ only by one rounding step, and only
 * where the fp64 pre-activation lies within the fp32 error bound of the boundary between the
 * two values. Returns the number of differing entries. */
static size_t check_gate(const tw_t_ref *r, const double *plib, twell_dtype dt, int exact) {
    size_t diff = 0;
    for (size_t i = 0; i < r->M * r->N; i++) {
        if (plib[i] == r->P[i])
            continue;
        diff++;
        if (exact) {
            print_error("P[%zu, %zu]: library %.9g, fp64 %.9g (pre %.9g)\n", i / r->N, i % r->N,
                        plib[i], r->P[i], r->pre[i]);
            fail();
        }
        uint16_t hl = tw_t_round16(dt, plib[i]), hr = tw_t_round16(dt, r->P[i]);
        int adjacent = abs((int)hl - (int)hr) <= 1 || hl == 0 || hr == 0;
        double boundary = 0.5 * (plib[i] + r->P[i]);
        double dist = fabs(r->pre[i] - boundary);
        if (!adjacent || dist > gate_err_bound(r->K) * r->absdot[i] + 1e-30) {
            print_error("P[%zu, %zu]: library %.9g, fp64 %.9g: pre %.12g is %.3g from the "
                        "rounding boundary (allowed %.3g)\n",
                        i / r->N, i % r->N, plib[i], r->P[i], r->pre[i], dist,
                        gate_err_bound(r->K) * r->absdot[i]);
            fail();
        }
    }
    return diff;
}

/* Compares one library run with the fp64 model evaluated on the library's own gate values
 * (after check_gate has verified them); prints the worst errors. */
static double round_rel(twell_dtype dt) { return dt == TWELL_DTYPE_BF16 ? 0x1.0p-8 : 0x1.0p-11; }
static double round_abs(twell_dtype dt) { return dt == TWELL_DTYPE_BF16 ? 0x1.0p-134 : 0x1.0p-25; }

/* Compares one library run with the fp64 model r (evaluated on the library's own gate values
 * once check_gate has verified them); prints the worst errors. */
static void compare(const cfg *c, const tw_t_data *d, const data64 *e, const lib_out *o,
                    const tw_t_ref *r, double lambda) {
    size_t M = d->M, K = d->K, N = d->N, where;
    size_t xk = M * K, wk = N * K;
    double *b[5], *sc[5], *lib[5];
    for (int i = 0; i < 5; i++) {
        b[i] = malloc((i < 2 ? xk : wk) * sizeof(double));
        sc[i] = malloc((i < 2 ? xk : wk) * sizeof(double));
        assert_true(b[i] && sc[i]);
    }
    memcpy(b[0], r->y, xk * sizeof(double));
    tw_t_ref_backward(r, e->x, e->wg, e->wu, e->wd, e->dy, lambda, b[1], b[2], b[3], b[4]);
    assert_int_equal(tw_t_ref_scales(r, e->x, e->wg, e->wu, e->wd, e->dy, lambda, sc[0], sc[1],
                                     sc[2], sc[3], sc[4]),
                     0);
    lib[0] = tw_t_to_f64(c->dt, o->y, xk);
    lib[1] = tw_t_to_f64(c->dt, o->dx, xk);
    lib[2] = tw_t_f32_to_f64(o->dwg, wk);
    lib[3] = tw_t_f32_to_f64(o->dwu, wk);
    lib[4] = tw_t_f32_to_f64(o->dwd, wk);
    static const char *names[5] = {"y", "dx", "dWg", "dWu", "dWd"};
    double err[5];
    size_t at[5];
    for (int i = 0; i < 5; i++) {
        assert_non_null(lib[i]);
        err[i] =
            tw_t_err_scaled(lib[i], b[i], sc[i], i < 2 ? xk : wk, i < 2 ? round_rel(c->dt) : 0.0,
                            i < 2 ? round_abs(c->dt) : 0.0, &at[i]);
    }
    double el1 = fabs((double)o->stats[1] - r->L1) / fmax(r->L1, 1e-30);
    printf("  M=%-3zu K=%-3u N=%-3u T=%-3u C=%u %s %-7s nnz=%-5zu L0=%-8.3f worst: y %.1e dx "
           "%.1e dWg %.1e dWu %.1e dWd %.1e L1 %.1e\n",
           M, c->K, c->N, c->T, c->C, c->dt == TWELL_DTYPE_BF16 ? "bf16" : "fp16",
           c->skew ? "skewed" : "uniform", r->nnz, r->L0, err[0], err[1], err[2], err[3], err[4],
           el1);
    for (int i = 0; i < 5; i++) {
        where = at[i];
        CHECK_LE(err[i], TOL, "%s[%zu, %zu] = %.9g vs fp64 %.9g (scale %.3g)", names[i], where / K,
                 where % K, lib[i][where], b[i][where], sc[i][where]);
    }
    CHECK_LE(el1, TOL_L1, "L1 %.9g vs %.9g", (double)o->stats[1], r->L1);
    /* L0 is a count: exact once the supports agree. */
    if ((double)o->stats[0] != (double)(float)r->L0)
        print_error("L0 %.9g vs %.9g\n", (double)o->stats[0], r->L0);
    assert_true((double)o->stats[0] == (double)(float)r->L0);
    for (int i = 0; i < 5; i++) {
        free(b[i]);
        free(sc[i]);
        free(lib[i]);
    }
}

/* Data for c from generator g, and the library (CPU, 2 threads) on c's shape. */
static void case_open(const cfg *c, tw_t_gen g, tw_t_data *d, tw_t_lib *L) {
    twell_shape s = cfg_shape(c);
    assert_int_equal(tw_t_data_make(d, c->dt, c->M, c->K, c->N, &g), 0);
    assert_int_equal(tw_t_lib_open(L, &s, 2), 0);
}

/* On data whose fp32 gate is exact: the library's saved gate equals the fp64 model's bit for
 * bit, and its run o (with lambda) compares within tolerance. */
static void check_exact(const cfg *c, const tw_t_lib *L, const tw_t_data *d, const lib_out *o,
                        double lambda) {
    data64 e;
    data64_make(&e, d);
    tw_t_ref r;
    assert_int_equal(
        tw_t_ref_forward(&r, d->M, d->K, d->N, e.x, e.wg, e.wu, e.wd, TW_T_P_ROUND, c->dt, NULL),
        0);
    double *plib = tw_t_lib_dense_p(L);
    assert_non_null(plib);
    assert_int_equal(check_gate(&r, plib, c->dt, 1), 0);
    compare(c, d, &e, o, &r, lambda);
    free(plib);
    tw_t_ref_free(&r);
    data64_free(&e);
}

/* The shapes swept: every M, K, N, T, C of the brief at least once, both dtypes, both layouts;
 * densities chosen so that tiles overflow (slots = T/C - 1). */
static const cfg k_cfgs[] = {
    {1, 16, 256, 64, 2, TWELL_DTYPE_BF16, 0, 0.20},
    {7, 48, 512, 128, 4, TWELL_DTYPE_FP16, 1, 0.10},
    {33, 64, 256, 256, 8, TWELL_DTYPE_BF16, 1, 0.05},
    {100, 128, 512, 64, 8, TWELL_DTYPE_FP16, 1, 0.10},
    {100, 64, 512, 256, 2, TWELL_DTYPE_BF16, 0, 0.15},
    {33, 128, 256, 128, 8, TWELL_DTYPE_FP16, 0, 0.20},
    {7, 16, 512, 256, 4, TWELL_DTYPE_BF16, 1, 0.08},
    {1, 64, 512, 64, 4, TWELL_DTYPE_FP16, 1, 0.10},
    {100, 48, 256, 128, 2, TWELL_DTYPE_FP16, 1, 0.10},
    {33, 16, 512, 64, 8, TWELL_DTYPE_BF16, 0, 0.30},
    {100, 128, 256, 256, 4, TWELL_DTYPE_BF16, 1, 0.10},
    {7, 128, 256, 64, 2, TWELL_DTYPE_FP16, 0, 0.25},
};

/* Runs one configuration; exact_gate selects the data whose fp32 gate is exact. Returns the
 * spill size of the saved state and the largest fraction of rows any neuron is active in. */
static void run_cfg(const cfg *c, int exact_gate, uint64_t seed, size_t *spill, double *hot) {
    tw_t_data d;
    tw_t_lib L;
    case_open(c, (tw_t_gen){c->density, c->skew, exact_gate, seed}, &d, &L);
    data64 e;
    data64_make(&e, &d);
    float lambda = 0.1f * (float)c->M; /* λ/M = 0.1: the L1 term is as large as the dy term */
    lib_out o;
    run_lib(&L, &d, lambda, &o);

    double *plib = tw_t_lib_dense_p(&L);
    assert_non_null(plib);
    tw_t_ref r;
    assert_int_equal(
        tw_t_ref_forward(&r, d.M, d.K, d.N, e.x, e.wg, e.wu, e.wd, TW_T_P_ROUND, c->dt, NULL), 0);
    size_t diff = check_gate(&r, plib, c->dt, exact_gate);
    if (diff) {
        printf("  (%zu gate values one rounding step off fp64, within the fp32 bound)\n", diff);
        tw_t_ref_free(&r);
        assert_int_equal(
            tw_t_ref_forward(&r, d.M, d.K, d.N, e.x, e.wg, e.wu, e.wd, TW_T_P_ROUND, c->dt, plib),
            0);
    }
    compare(c, &d, &e, &o, &r, (double)lambda);

    const tw_train_saved *sv = L.state->backend_data;
    assert_int_equal(sv->nnz, r.nnz);
    *spill = sv->spill_total;
    size_t best = 0;
    for (uint32_t n = 0; n < c->N; n++) {
        size_t cnt = 0;
        for (size_t m = 0; m < c->M; m++)
            cnt += r.P[m * c->N + n] > 0.0;
        best = cnt > best ? cnt : best;
    }
    *hot = (double)best / (double)c->M;
    assert_true(L.state->bytes > 0);

    free(plib);
    tw_t_ref_free(&r);
    out_free(&o);
    tw_t_lib_close(&L);
    data64_free(&e);
    tw_t_data_free(&d);
}

static void test_ref_train_shapes_exact_gate(void **st) {
    (void)st;
    size_t any_spill = 0;
    for (size_t i = 0; i < sizeof k_cfgs / sizeof k_cfgs[0]; i++) {
        size_t spill;
        double hot;
        run_cfg(&k_cfgs[i], 1, 1000 + i, &spill, &hot);
        if (k_cfgs[i].skew && k_cfgs[i].M >= 7) {
            /* the skewed data must exercise what it is for */
            if (spill == 0 || hot < 0.75)
                print_error("skewed config %zu: spill %zu, hottest neuron in %.2f of rows\n", i,
                            spill, hot);
            assert_true(spill > 0 && hot >= 0.75);
        }
        any_spill += spill;
    }
    assert_true(any_spill > 0);
}

static void test_ref_train_shapes_generic(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof k_cfgs / sizeof k_cfgs[0]; i++) {
        size_t spill;
        double hot;
        run_cfg(&k_cfgs[i], 0, 2000 + i, &spill, &hot);
    }
}

/* Bitwise comparison of two runs. */
static void assert_same_out(const lib_out *a, const lib_out *b, size_t M, uint32_t K, uint32_t N) {
    assert_memory_equal(a->y, b->y, M * K * 2);
    assert_memory_equal(a->dx, b->dx, M * K * 2);
    assert_memory_equal(a->dwg, b->dwg, (size_t)N * K * sizeof(float));
    assert_memory_equal(a->dwu, b->dwu, (size_t)N * K * sizeof(float));
    assert_memory_equal(a->dwd, b->dwd, (size_t)N * K * sizeof(float));
    assert_memory_equal(a->stats, b->stats, sizeof a->stats);
}

static void test_ref_train_threads_deterministic(void **st) {
    (void)st;
    cfg c = {100, 64, 512, 64, 8, TWELL_DTYPE_BF16, 1, 0.10};
    twell_shape s = cfg_shape(&c);
    tw_t_gen g = {c.density, 1, 0, 77};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, c.dt, c.M, c.K, c.N, &g), 0);
    lib_out o[3];
    const int threads[3] = {1, 2, 3};
    tw_train_saved sv[3];
    for (int i = 0; i < 3; i++) {
        tw_t_lib L;
        assert_int_equal(tw_t_lib_open(&L, &s, threads[i]), 0);
        run_lib(&L, &d, 3.0f, &o[i]);
        sv[i] = *(const tw_train_saved *)L.state->backend_data;
        /* the saved bytes too: the GPU must reproduce them */
        size_t words = c.M * (c.N / c.C);
        sv[i].packed = malloc(words * 4);
        sv[i].spill = malloc((sv[i].spill_total ? sv[i].spill_total : 1) * 4);
        assert_true(sv[i].packed && sv[i].spill);
        const tw_train_saved *live = L.state->backend_data;
        memcpy(sv[i].packed, live->packed, words * 4);
        memcpy(sv[i].spill, live->spill, sv[i].spill_total * 4);
        tw_t_lib_close(&L);
    }
    assert_true(sv[0].spill_total > 0);
    for (int i = 1; i < 3; i++) {
        assert_same_out(&o[0], &o[i], c.M, c.K, c.N);
        assert_int_equal(sv[0].spill_total, sv[i].spill_total);
        assert_memory_equal(sv[0].packed, sv[i].packed, c.M * (c.N / c.C) * 4);
        assert_memory_equal(sv[0].spill, sv[i].spill, sv[0].spill_total * 4);
    }
    for (int i = 0; i < 3; i++) {
        out_free(&o[i]);
        free(sv[i].packed);
        free(sv[i].spill);
    }
    tw_t_data_free(&d);
}

/* A second forward with other data (and other M) into the same state gives the backward of the
 * second forward, bit for bit equal to a fresh state's. */
static void test_ref_train_state_reuse(void **st) {
    (void)st;
    cfg c = {33, 48, 256, 128, 4, TWELL_DTYPE_FP16, 1, 0.15};
    twell_shape s = cfg_shape(&c);
    tw_t_gen g1 = {0.30, 1, 0, 5}, g2 = {0.05, 0, 0, 6}, g3 = {0.10, 1, 0, 7};
    tw_t_data d1, d2, d3;
    assert_int_equal(tw_t_data_make(&d1, c.dt, 33, c.K, c.N, &g1), 0);
    assert_int_equal(tw_t_data_make(&d2, c.dt, 20, c.K, c.N, &g2), 0);
    assert_int_equal(tw_t_data_make(&d3, c.dt, 64, c.K, c.N, &g3), 0);

    tw_t_lib L;
    assert_int_equal(tw_t_lib_open(&L, &s, 2), 0);
    lib_out o1, o2, o3;
    run_lib(&L, &d1, 1.0f, &o1);
    size_t bytes1 = L.state->bytes;
    run_lib(&L, &d2, 1.0f, &o2); /* smaller and sparser: reuses the memory */
    assert_int_equal(L.state->bytes, bytes1);
    assert_int_equal(L.state->M, 20);
    run_lib(&L, &d3, 1.0f, &o3); /* larger: grows */
    assert_true(L.state->bytes > bytes1);

    const tw_t_data *ds[2] = {&d2, &d3};
    const lib_out *os[2] = {&o2, &o3};
    for (int i = 0; i < 2; i++) {
        tw_t_lib F;
        lib_out f;
        assert_int_equal(tw_t_lib_open(&F, &s, 2), 0);
        run_lib(&F, ds[i], 1.0f, &f);
        assert_same_out(os[i], &f, ds[i]->M, c.K, c.N);
        out_free(&f);
        tw_t_lib_close(&F);
    }
    tw_t_lib_close(&L);
    out_free(&o1);
    out_free(&o2);
    out_free(&o3);
    tw_t_data_free(&d1);
    tw_t_data_free(&d2);
    tw_t_data_free(&d3);
}

/* Backward without an L1 term, and rows/neurons with no support at all: their outputs are
 * exact zeros (poisoned first). */
static void test_ref_train_empty_rows_and_neurons(void **st) {
    (void)st;
    cfg c = {7, 16, 256, 64, 4, TWELL_DTYPE_BF16, 0, 0.02};
    tw_t_data d;
    tw_t_lib L;
    case_open(&c, (tw_t_gen){c.density, 0, 1, 11}, &d, &L);
    /* row 2 never fires: its offset column pushes every pre-activation far below zero */
    d.x[2 * c.K] = tw_f32_to_bf16(8.0f);
    lib_out o;
    run_lib(&L, &d, 0.0f, &o);
    const tw_train_saved *sv = L.state->backend_data;
    assert_int_equal(sv->row_off[3] - sv->row_off[2], 0);
    for (uint32_t k = 0; k < c.K; k++) {
        assert_int_equal(o.y[2 * c.K + k], 0);
        assert_int_equal(o.dx[2 * c.K + k], 0);
    }
    size_t empty = 0;
    for (uint32_t n = 0; n < c.N; n++) {
        if (sv->col_off[n + 1] != sv->col_off[n])
            continue;
        empty++;
        for (uint32_t k = 0; k < c.K; k++) {
            assert_true(o.dwg[(size_t)n * c.K + k] == 0.0f);
            assert_true(o.dwu[(size_t)n * c.K + k] == 0.0f);
            assert_true(o.dwd[(size_t)n * c.K + k] == 0.0f);
        }
    }
    assert_true(empty > 0 && empty < c.N);
    /* and λ = 0 against the model */
    check_exact(&c, &L, &d, &o, 0.0);
    out_free(&o);
    tw_t_lib_close(&L);
    tw_t_data_free(&d);
}

/* The spill keeps every entry beyond the slots: with rows ~90% dense and 7 slots per 64 columns
 * almost every row-tile overflows, and the saved support still equals the fp64 one. */
static void test_ref_train_spill_layout(void **st) {
    (void)st;
    cfg c = {16, 64, 512, 64, 8, TWELL_DTYPE_BF16, 1, 0.45};
    twell_shape s = cfg_shape(&c);
    tw_t_data d;
    tw_t_lib L;
    case_open(&c, (tw_t_gen){c.density, 1, 1, 21}, &d, &L);
    lib_out o;
    run_lib(&L, &d, 1.0f, &o);
    const tw_train_saved *sv = L.state->backend_data;
    uint32_t W = c.T / c.C, slots = W - 1, tiles = c.N / c.T;
    size_t expect = 0, over = 0;
    for (size_t m = 0; m < c.M; m++)
        for (uint32_t t = 0; t < tiles; t++) {
            size_t r = m * tiles + t;
            uint32_t count = sv->packed[m * (c.N / c.C) + (size_t)t * W];
            size_t want = count > slots ? count - slots : 0;
            assert_int_equal(sv->spill_off[r], expect);
            assert_int_equal(sv->spill_off[r + 1] - sv->spill_off[r], want);
            expect += want;
            over += want > 0;
        }
    assert_int_equal(sv->spill_total, expect);
    printf("  %zu of %zu row-tiles overflow, %zu spilled entries of %zu\n", over,
           (size_t)c.M * tiles, expect, sv->nnz);
    assert_true(over > (size_t)c.M * tiles / 4);
    /* the spill is ascending within each row-tile and continues after the slots */
    for (size_t m = 0; m < c.M; m++) {
        uint32_t cols[512];
        size_t cnt = tw_train_row_support(&s, sv, m, cols, NULL, NULL);
        assert_int_equal(cnt, sv->row_off[m + 1] - sv->row_off[m]);
        for (size_t i = 1; i < cnt; i++)
            assert_true(cols[i] > cols[i - 1]);
    }
    check_exact(&c, &L, &d, &o, 1.0);
    out_free(&o);
    tw_t_lib_close(&L);
    tw_t_data_free(&d);
}

/* The transpose on its own: a hand-built support with a dense first row, a neuron active in
 * every row and scattered entries. Counts exact, tokens ascending, entries pointing back. */
static void test_ref_train_transpose(void **st) {
    (void)st;
    enum { M = 37, N = 300 };
    size_t row_off[M + 1];
    uint32_t *e_col = malloc((size_t)M * N * sizeof *e_col);
    unsigned char *act = calloc((size_t)M * N, 1);
    assert_true(e_col && act);
    tw_t_rng rng = {99};
    for (size_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++)
            act[m * N + n] = m == 0 || m == 17 || n == 7 || n == N - 1 || tw_t_uniform(&rng) < 0.03;
    size_t e = 0;
    for (size_t m = 0; m < M; m++) {
        row_off[m] = e;
        for (uint32_t n = 0; n < N; n++)
            if (act[m * N + n])
                e_col[e++] = n;
    }
    row_off[M] = e;
    size_t nnz = e;
    size_t *col_off = malloc((N + 1) * sizeof *col_off);
    size_t *col_row = malloc(nnz * sizeof *col_row), *col_ent = malloc(nnz * sizeof *col_ent);
    assert_true(col_off && col_row && col_ent);
    memset(col_row, 0xff, nnz * sizeof *col_row);
    tw_train_transpose(M, N, row_off, e_col, col_off, col_row, col_ent);
    assert_int_equal(col_off[0], 0);
    assert_int_equal(col_off[N], nnz);
    for (uint32_t n = 0; n < N; n++) {
        size_t want = 0;
        for (size_t m = 0; m < M; m++)
            want += act[m * N + n];
        assert_int_equal(col_off[n + 1] - col_off[n], want);
        for (size_t i = col_off[n]; i < col_off[n + 1]; i++) {
            size_t m = col_row[i];
            assert_true(m < M);
            assert_true(act[m * N + n]);
            if (i > col_off[n])
                assert_true(m > col_row[i - 1]); /* stable: tokens ascending */
            assert_true(col_ent[i] >= row_off[m] && col_ent[i] < row_off[m + 1]);
            assert_int_equal(e_col[col_ent[i]], n);
        }
    }
    assert_int_equal(col_off[8] - col_off[7], M); /* the heavy neuron */
    free(e_col);
    free(act);
    free(col_off);
    free(col_row);
    free(col_ent);
}

/* The training forward's saved gate and y are bit-identical to the inference ops' (one
 * rounding sequence for every dot product, neurons accumulated in the same order). */
static void test_ref_train_matches_inference(void **st) {
    (void)st;
    const cfg cs[2] = {{33, 64, 512, 128, 8, TWELL_DTYPE_FP16, 1, 0.10},
                       {7, 48, 256, 64, 4, TWELL_DTYPE_BF16, 1, 0.25}};
    for (int i = 0; i < 2; i++) {
        const cfg *c = &cs[i];
        twell_shape s = cfg_shape(c);
        tw_t_data d;
        tw_t_lib L;
        case_open(c, (tw_t_gen){c->density, c->skew, 0, 31u + (uint64_t)i}, &d, &L);
        lib_out o;
        run_lib(&L, &d, 0.5f, &o);
        size_t words = twell_packed_words(&s, c->M);
        uint32_t *packed = malloc(words * sizeof *packed);
        uint16_t *yi = malloc(c->M * c->K * 2);
        assert_true(packed && yi);
        memset(packed, 0xcd, words * sizeof *packed);
        memset(yi, 0xcd, c->M * c->K * 2);
        assert_int_equal(twell_gate_pack(L.plan, c->M, d.x, d.wg, packed, NULL), TWELL_OK);
        assert_int_equal(twell_ffn_infer(L.plan, c->M, d.x, packed, d.wg, d.wu, d.wd, yi, NULL),
                         TWELL_OK);
        const tw_train_saved *sv = L.state->backend_data;
        assert_true(sv->spill_total > 0);
        assert_memory_equal(packed, sv->packed, words * sizeof *packed);
        assert_memory_equal(yi, o.y, c->M * c->K * 2);
        free(packed);
        free(yi);
        out_free(&o);
        tw_t_lib_close(&L);
        tw_t_data_free(&d);
    }
}

/* The public entry points around the state: no backward before a forward or for another M, and
 * such a refusal writes nothing. */
static void test_ref_train_state_errors(void **st) {
    (void)st;
    cfg c = {7, 16, 256, 64, 4, TWELL_DTYPE_BF16, 0, 0.2};
    tw_t_data d;
    tw_t_lib L;
    case_open(&c, (tw_t_gen){c.density, 0, 0, 41}, &d, &L);
    lib_out o;
    out_alloc(&o, c.M, c.K, c.N);
    uint16_t dx0 = o.dx[0];
    assert_int_equal(tw_t_lib_backward(&L, &d, 0.0f, o.dx, o.dwg, o.dwu, o.dwd),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(o.dx[0], dx0);
    assert_int_equal(twell_train_state_bytes(L.state), 0);
    assert_int_equal(tw_t_lib_forward(&L, &d, o.y, o.stats), TWELL_OK);
    assert_true(twell_train_state_bytes(L.state) > 0);
    assert_int_equal(twell_ffn_backward(L.plan, L.state, c.M - 1, d.x, d.wg, d.wu, d.wd, d.dy, 0.0f,
                                        o.dx, o.dwg, o.dwu, o.dwd, NULL),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(o.dx[0], dx0);
    assert_int_equal(tw_t_lib_backward(&L, &d, 0.0f, o.dx, o.dwg, o.dwu, o.dwd), TWELL_OK);
    /* a backward does not consume the forward: a second one gives the same bytes */
    lib_out o2;
    out_alloc(&o2, c.M, c.K, c.N);
    memcpy(o2.y, o.y, c.M * c.K * 2);
    memcpy(o2.stats, o.stats, sizeof o.stats);
    assert_int_equal(tw_t_lib_backward(&L, &d, 0.0f, o2.dx, o2.dwg, o2.dwu, o2.dwd), TWELL_OK);
    assert_same_out(&o, &o2, c.M, c.K, c.N);
    out_free(&o);
    out_free(&o2);
    tw_t_lib_close(&L);
    tw_t_data_free(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_train_transpose),
        cmocka_unit_test(test_ref_train_spill_layout),
        cmocka_unit_test(test_ref_train_empty_rows_and_neurons),
        cmocka_unit_test(test_ref_train_shapes_exact_gate),
        cmocka_unit_test(test_ref_train_shapes_generic),
        cmocka_unit_test(test_ref_train_threads_deterministic),
        cmocka_unit_test(test_ref_train_state_reuse),
        cmocka_unit_test(test_ref_train_matches_inference),
        cmocka_unit_test(test_ref_train_state_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
