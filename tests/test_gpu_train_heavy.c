/* test_gpu_train_heavy.c — the sparse training path's heavy-row route (runtime/ops/train/
 * cuda_train_heavy.c: rows over a threshold run the dense GEMMs as a row block) on exact-gate
 * data, against the CPU reference and against the per-entry overflow route (the route off) in the
 * same run, and the route as the default of a new state.
 *
 * Cases: skewed data (heavy rows every 8th from row 0, ~90% active, and from row 3, ~50%;
 * ordinary rows at the case's density plus the heavy neurons), both dtypes; M = 1025 (the last
 * row heavy and alone in the list kernel's second round of 1024, the block of ~257 heavy rows
 * over the GEMM's 128-row blocks and its 64-row reduction blocks), a threshold that takes only
 * the ~90% rows (N % 256 != 0: the weight-gradient GEMM's two-launch split), every row heavy
 * (the sparse part empty), uniform data with none heavy (the cost model's threshold) and a block
 * of one row. Checks, with the route on:
 *   - the heavy rows and their active count (TW_TC_TRAIN_HEAVY_ROWS) and the packed gate the
 *     sparse route saw equal the host mirror (tw_tl_heavy_rows) applied to the route-off run's
 *     packed gate: those rows zeroed, every other word bitwise the same;
 *   - y and dx of the other rows within the sparse path's bounds (5e-3 bf16 / 1e-3 fp16
 *     row-relative); every row of y, dx and the weight gradients within the dense path's
 *     (1.5e-2 / 3e-3; 1e-2 / 2e-3), L0 exact, L1 within 4e-3 / 1e-3 (docs/DESIGN.md §7);
 *   - two runs with different poison bitwise identical, every output written;
 *   - with no heavy row, every output bitwise equal to the route off.
 * Off Hopper (no dense GEMMs) the route must stay off: outputs bitwise equal to the route off.
 * `test_gpu_train_heavy small`: the first two cases only (sanitizer). Exits 77 without a device (a
 * failure under TWELL_REQUIRE_GPU=1). labels: gpu slow */
#include "cuda_train.h"
#include "internal.h"
#include "ref64_train.h"
#include "train_layout.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tw_gpu_train.h"
#include "tw_tc.h"

typedef struct {
    gt_case c;
    long long thr; /* the knob: > 0 explicit, < 0 the cost model's threshold */
} th_case;

/* The first TH_SMALL are small (`test_gpu_train_heavy small`: the sanitizer runs them). */
static const th_case th_cases[] = {
    {{40, 64, 256, 128, 4, BF, 0.05, 1, 1, 1.0f, 0, 0, 0}, 1},
    {{1, 128, 512, 256, 8, FP, 0.05, 1, 1, 2.0f, 0, 0, 0}, 100},
    {{1025, 128, 1024, 256, 8, BF, 0.02, 1, 1, 0.5f, 0, 0, 0}, 256},
    {{300, 64, 320, 64, 2, FP, 0.05, 1, 1, 1.0f, 0, 0, 0}, 224},
    {{513, 64, 5632, 256, 8, FP, 0.004, 0, 1, 0.5f, 0, 0, 0}, -1},
};
#define TH_SMALL 2

static int th_hopper(void) { return strcmp(gt_ctx->cuda->arch, "sm_90a") == 0; }

/* With heavy rows (want_nh of M): the rows the sparse route kept (light) within its own bounds,
 * every row of every output within the dense path's, L0 exact, L1 close; the per-entry route
 * (off) printed beside it. */
static void th_expect_heavy(const twell_shape *s, const gt_case *c, const gt_out *on,
                            const gt_out *off, const gt_out *r, const unsigned char *light,
                            size_t want_nh) {
    int bf = c->dt == BF;
    double t16 = bf ? 1.5e-2 : 3e-3, t32 = bf ? 1e-2 : 2e-3, tl1 = bf ? 4e-3 : 1e-3;
    gt_errs e_light, e_all, e_off;
    gt_compare(s, c->M, on, r, light, NULL, &e_light);
    gt_compare(s, c->M, on, r, NULL, NULL, &e_all);
    gt_compare(s, c->M, off, r, NULL, NULL, &e_off);
    double l1rel = fabs((double)on->stats[1] - (double)r->stats[1]) /
                   (r->stats[1] != 0.0f ? fabs((double)r->stats[1]) : 1.0);
    printf("#   heavy route: y %.2e dx %.2e dWg %.2e dWu %.2e dWd %.2e; other rows y "
           "%.2e dx %.2e; L0 %.9g (CPU %.9g) L1 rel %.1e\n"
           "#   per-entry route: y %.2e dx %.2e dWg %.2e dWu %.2e dWd %.2e\n",
           e_all.e[0], e_all.e[1], e_all.e[2], e_all.e[3], e_all.e[4], e_light.e[0], e_light.e[1],
           (double)on->stats[0], (double)r->stats[0], l1rel, e_off.e[0], e_off.e[1], e_off.e[2],
           e_off.e[3], e_off.e[4]);
    if (want_nh < c->M) { /* the rows the sparse route kept: its own bounds */
        GT_LE(e_light.e[0], bf ? 5e-3 : 1e-3, "y of the other rows");
        GT_LE(e_light.e[1], bf ? 5e-3 : 1e-3, "dx of the other rows");
    }
    for (int t = 0; t < 5; t++) {
        char what[64];
        snprintf(what, sizeof what, "%s row %zu", gt_names[t], e_all.at[t]);
        GT_LE(e_all.e[t], t < 2 ? t16 : t32, what);
    }
    if (on->stats[0] != r->stats[0])
        fail_msg("L0 = %.9g, CPU %.9g", (double)on->stats[0], (double)r->stats[0]);
    GT_LE(l1rel, tl1, "L1");
}

static void test_gpu_train_heavy_case(void **st) {
    const th_case *hc = *st;
    const gt_case *c = &hc->c;
    twell_shape s = gt_shape(c);
    tw_t_gen gen = {c->density, c->skew, c->exact, 7000u + c->M};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, c->dt, c->M, c->K, c->N, &gen), 0);
    /* the CPU reference */
    gt_out r;
    {
        tw_t_lib L;
        assert_int_equal(tw_t_lib_open(&L, &s, 0), 0);
        gt_out_alloc(&r, c->M, c->K, c->N);
        assert_int_equal(tw_t_lib_forward(&L, &d, r.y, r.stats), TWELL_OK);
        assert_int_equal(tw_t_lib_backward(&L, &d, c->lambda, r.dx, r.dwg, r.dwu, r.dwd), TWELL_OK);
        tw_t_lib_close(&L);
    }
    gt_gpu g;
    gt_gpu_open(&g, &s, c);
    GT_OK(twell_plan_set_path(g.plan, TWELL_PATH_SPARSE)); /* AUTO would run M ≥ 1024 dense */
    gt_gpu_data(&g, &d, 0);
    /* the route off: the per-entry overflow route, its packed gate */
    gt_out off, on[2];
    tw_cuda_train_host h_off, h_on;
    gt_out_alloc(&off, c->M, c->K, c->N);
    GT_OK(tw_test_control(TW_TC_TRAIN_SET_HEAVY, g.state, 0LL));
    gt_gpu_run(&g, c->lambda, 0xFFFFFFFFu, &off);
    GT_OK(tw_test_control(TW_TC_TRAIN_DOWNLOAD, g.state, &h_off));
    size_t nh0 = 1;
    uint64_t hnnz0 = 1;
    uint32_t thr0 = 1;
    GT_OK(tw_test_control(TW_TC_TRAIN_HEAVY_ROWS, g.state, &nh0, &hnnz0, &thr0));
    assert_int_equal(nh0, 0);
    assert_int_equal(hnnz0, 0);
    assert_int_equal(thr0, 0);
    /* the route on, twice */
    GT_OK(tw_test_control(TW_TC_TRAIN_SET_HEAVY, g.state, hc->thr));
    uint32_t poison[2] = {0xFFFFFFFFu, 0x7FC17FC1u};
    for (int run = 0; run < 2; run++) {
        gt_out_alloc(&on[run], c->M, c->K, c->N);
        gt_gpu_run(&g, c->lambda, poison[run], &on[run]);
    }
    gt_expect_same(&on[0], &on[1], c->M, c->K, c->N);
    size_t nh = 0;
    uint64_t hnnz = 0;
    uint32_t ran_thr = 0;
    GT_OK(tw_test_control(TW_TC_TRAIN_HEAVY_ROWS, g.state, &nh, &hnnz, &ran_thr));
    GT_OK(tw_test_control(TW_TC_TRAIN_DOWNLOAD, g.state, &h_on));
    /* the host mirror on the route-off packed gate */
    uint32_t thr = hc->thr > 0 ? (uint32_t)hc->thr : tw_tl_heavy_threshold(c->N);
    size_t words = c->M * (c->N / c->C);
    uint32_t *mirror = malloc(words * 4), *idx = malloc(c->M * 4);
    unsigned char *light = malloc(c->M);
    assert_true(mirror && idx && light);
    memcpy(mirror, h_off.packed, words * 4);
    size_t want_nh = 0;
    uint64_t want_nnz = 0;
    tw_tl_heavy_rows(&s, c->M, mirror, thr, 1, idx, &want_nh, &want_nnz);
    memset(light, 1, c->M);
    for (size_t i = 0; i < want_nh; i++)
        light[idx[i]] = 0;
    int hopper = th_hopper();
    printf("# M=%zu K=%u N=%u T=%u C=%u %s %s: threshold %u, heavy rows %zu (%llu active; host "
           "mirror %zu, %llu), %s\n",
           c->M, c->K, c->N, c->T, c->C, c->dt == BF ? "bf16" : "fp16",
           c->skew ? "skewed" : "uniform", thr, nh, (unsigned long long)hnnz, want_nh,
           (unsigned long long)want_nnz, hopper ? "sm_90a" : "no dense GEMMs: route stays off");
    if (!hopper) {
        assert_int_equal(nh, 0);
        assert_int_equal(ran_thr, 0);
        gt_expect_same(&on[0], &off, c->M, c->K, c->N);
    } else {
        assert_int_equal(ran_thr, thr);
        assert_int_equal(nh, want_nh);
        assert_int_equal(hnnz, want_nnz);
        assert_memory_equal(h_on.packed, mirror, words * 4);
        if (want_nh == 0) {
            gt_expect_same(&on[0], &off, c->M, c->K, c->N);
        } else {
            th_expect_heavy(&s, c, &on[0], &off, &r, light, want_nh);
        }
    }
    free(mirror);
    free(idx);
    free(light);
    (void)tw_test_control(TW_TC_TRAIN_HOST_FREE, &h_off);
    (void)tw_test_control(TW_TC_TRAIN_HOST_FREE, &h_on);
    gt_out_free(&off);
    gt_out_free(&on[0]);
    gt_out_free(&on[1]);
    gt_out_free(&r);
    gt_gpu_close(&g);
    tw_t_data_free(&d);
}

/* The route is the library's default: a new state runs it at the cost model's threshold on
 * sm_90a (and not elsewhere), bitwise the same as the knob set to -1. */
static void test_gpu_train_heavy_default(void **st) {
    (void)st;
    const gt_case *c = &th_cases[2].c; /* skewed: rows ~90% and ~50% active, far over it */
    twell_shape s = gt_shape(c);
    tw_t_gen gen = {c->density, c->skew, c->exact, 7000u + c->M};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, c->dt, c->M, c->K, c->N, &gen), 0);
    gt_gpu g;
    gt_gpu_open(&g, &s, c); /* pins the route off: a fresh state replaces that one */
    twell_train_state_destroy(g.state);
    GT_OK(twell_train_state_create(g.plan, &g.state));
    GT_OK(twell_plan_set_path(g.plan, TWELL_PATH_SPARSE));
    gt_gpu_data(&g, &d, 0);
    gt_out def, knob;
    gt_out_alloc(&def, c->M, c->K, c->N);
    gt_out_alloc(&knob, c->M, c->K, c->N);
    gt_gpu_run(&g, c->lambda, 0xFFFFFFFFu, &def);
    size_t nh = 0;
    uint64_t hnnz = 0;
    uint32_t thr = 0;
    GT_OK(tw_test_control(TW_TC_TRAIN_HEAVY_ROWS, g.state, &nh, &hnnz, &thr));
    printf("# default state: threshold %u, %zu heavy rows (%llu active)\n", thr, nh,
           (unsigned long long)hnnz);
    if (th_hopper()) {
        assert_int_equal(thr, tw_tl_heavy_threshold(c->N));
        assert_true(nh > 0);
    } else {
        assert_int_equal(thr, 0);
        assert_int_equal(nh, 0);
    }
    GT_OK(tw_test_control(TW_TC_TRAIN_SET_HEAVY, g.state, -1LL));
    gt_gpu_run(&g, c->lambda, 0x7FC17FC1u, &knob);
    gt_expect_same(&def, &knob, c->M, c->K, c->N);
    gt_out_free(&def);
    gt_out_free(&knob);
    gt_gpu_close(&g);
    tw_t_data_free(&d);
}

int main(int argc, char **argv) {
    gt_open_or_skip("test_gpu_train_heavy");
    size_t n = sizeof th_cases / sizeof th_cases[0];
    if (argc > 1 && strcmp(argv[1], "small") == 0)
        n = TH_SMALL;
    struct CMUnitTest tests[sizeof th_cases / sizeof th_cases[0] + 1];
    static char names[sizeof th_cases / sizeof th_cases[0]][96];
    for (size_t i = 0; i < n; i++) {
        const gt_case *c = &th_cases[i].c;
        snprintf(names[i], sizeof names[i], "heavy M=%zu K=%u N=%u T=%u C=%u %s thr %lld", c->M,
                 c->K, c->N, c->T, c->C, c->dt == BF ? "bf16" : "fp16", th_cases[i].thr);
        tests[i] = (struct CMUnitTest){names[i], test_gpu_train_heavy_case, NULL, NULL,
                                       (void *)&th_cases[i]};
    }
    if (n == sizeof th_cases / sizeof th_cases[0])
        tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_gpu_train_heavy_default);
    int rc = _cmocka_run_group_tests("test_gpu_train_heavy", tests, n, NULL, NULL);
    twell_ctx_destroy(gt_ctx);
    return rc;
}
