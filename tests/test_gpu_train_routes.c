/* test_gpu_train_routes.c — the training kernels' routes against each other on the GPU, on
 * exact-gate data with heavy rows (overflowing row-tiles exercised): the newer kernels
 * (tensor-core overflowing row-tiles, staged per-entry dot products, ranked scatter) bitwise
 * equal to the earlier ones (legacy hook), and tiled U / dT against per-entry U / dT (same support,
 * values within the stated bounds). The sweep against the CPU reference is test_gpu_train.c; the
 * fixture is support/tw_gpu_train.c. Exits 77 without a device. labels: gpu slow */
#include "cuda_train.h"
#include "internal.h"
#include "ref64_train.h"

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

/* The newer kernels (tensor-core overflowing row-tiles, staged per-entry dot products) against
 * the earlier ones (TW_TC_TRAIN_SET_LEGACY) on exact-gate data with heavy rows: every output
 * bitwise equal (the per-entry sums keep the reference order; exact gate values in any order). */
static void test_gpu_train_legacy_same(void **unused) {
    (void)unused;
    static const gt_case cs[] = {
        {1000, 512, 1024, 256, 8, BF, 0.05, 1, 1, 1.0f, 0, 0, 0},
        {333, 64, 256, 64, 8, FP, 0.20, 1, 1, 0.5f, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const gt_case *c = &cs[i];
        twell_shape s = gt_shape(c);
        tw_t_gen gen = {c->density, c->skew, c->exact, 99u + i};
        tw_t_data d;
        assert_int_equal(tw_t_data_make(&d, c->dt, c->M, c->K, c->N, &gen), 0);
        gt_gpu g;
        gt_gpu_open(&g, &s, c);
        gt_gpu_data(&g, &d, 0);
        gt_out o[2];
        tw_cuda_train_host h[2];
        GT_OK(tw_test_control(TW_TC_TRAIN_SET_UDT, g.state,
                              0)); /* tiled U/dT: test_gpu_train_tiled_same */
        for (int legacy = 0; legacy < 2; legacy++) {
            gt_out_alloc(&o[legacy], c->M, c->K, c->N);
            GT_OK(tw_test_control(TW_TC_TRAIN_SET_LEGACY, g.state, legacy));
            gt_gpu_run(&g, c->lambda, 0xFFFFFFFFu, &o[legacy]);
            GT_OK(tw_test_control(TW_TC_TRAIN_DOWNLOAD, g.state, &h[legacy]));
        }
        printf("# legacy vs new M=%zu K=%u N=%u T=%u: nnz %zu, spill %zu\n", c->M, c->K, c->N, c->T,
               h[0].nnz, h[0].spill_total);
        assert_true(h[0].spill_total > 0); /* overflowing row-tiles were exercised */
        assert_int_equal(h[0].nnz, h[1].nnz);
        assert_int_equal(h[0].spill_total, h[1].spill_total);
        size_t words = c->M * (c->N / c->C);
        assert_memory_equal(h[0].packed, h[1].packed, words * 4);
        assert_memory_equal(h[0].spill, h[1].spill, h[0].spill_total * 4);
        assert_memory_equal(h[0].u_spill, h[1].u_spill, h[0].spill_total * 4);
        assert_memory_equal(h[0].e_tm, h[1].e_tm, h[0].nnz * 4);
        assert_memory_equal(h[0].e_du, h[1].e_du, h[0].nnz * 4);
        assert_memory_equal(h[0].e_dp, h[1].e_dp, h[0].nnz * 4);
        /* the neuron-major lists: ranked scatter (new) against cursors advanced in place */
        assert_true(h[0].have_bwd && h[1].have_bwd);
        assert_memory_equal(h[0].col_off, h[1].col_off, ((size_t)c->N + 1) * 8);
        assert_memory_equal(h[0].col_row, h[1].col_row, h[0].nnz * 4);
        assert_memory_equal(h[0].col_ent, h[1].col_ent, h[0].nnz * 4);
        gt_expect_same(&o[0], &o[1], c->M, c->K, c->N);
        for (int k = 0; k < 2; k++) {
            (void)tw_test_control(TW_TC_TRAIN_HOST_FREE, &h[k]);
            gt_out_free(&o[k]);
        }
        gt_gpu_close(&g);
        tw_t_data_free(&d);
    }
}

/* Per-entry against tiled U/dT on exact-gate data with heavy rows (overflowing row-tiles). The
 * support stays bitwise equal: packed gate, spill words, entry columns, L0. Values fed by tiled
 * U or dT (another fp32 summation order, on tensor cores: the pair lists' phase A, and for
 * overflowing row-tiles twell_train_ovf_udt) agree: U (slots and spill), Tm, dU, dP per entry
 * within 1e-4 of their magnitude + 1e-5 of the array's largest (cancellation near 0), y, dx and
 * dW within the CPU-reference tolerances of test_gpu_train's cases (tiled against per entry). */
static void test_gpu_train_tiled_same(void **unused) {
    (void)unused;
    static const gt_case cs[] = {
        {1000, 512, 1024, 256, 8, BF, 0.05, 1, 1, 1.0f, 0, 0, 0},
        {333, 64, 256, 64, 8, FP, 0.05, 1, 1, 0.5f, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const gt_case *c = &cs[i];
        twell_shape s = gt_shape(c);
        tw_t_gen gen = {c->density, c->skew, c->exact, 99u + i};
        tw_t_data d;
        assert_int_equal(tw_t_data_make(&d, c->dt, c->M, c->K, c->N, &gen), 0);
        gt_gpu g;
        gt_gpu_open(&g, &s, c);
        gt_gpu_data(&g, &d, 0);
        gt_out o[2];
        tw_cuda_train_host h[2];
        for (int tiled = 0; tiled < 2; tiled++) {
            gt_out_alloc(&o[tiled], c->M, c->K, c->N);
            GT_OK(tw_test_control(TW_TC_TRAIN_SET_UDT, g.state, tiled));
            gt_gpu_run(&g, c->lambda, 0xFFFFFFFFu, &o[tiled]);
            assert_int_equal(tw_tc_state_int(g.state, TW_TC_TRAIN_UDT_TILED), tiled);
            GT_OK(tw_test_control(TW_TC_TRAIN_DOWNLOAD, g.state, &h[tiled]));
        }
        assert_true(h[0].spill_total > 0); /* overflowing row-tiles were exercised */
        assert_int_equal(h[0].nnz, h[1].nnz);
        assert_int_equal(h[0].spill_total, h[1].spill_total);
        size_t NT = c->N / c->T, W = c->T / c->C, words = c->M * (c->N / c->C);
        assert_memory_equal(h[0].packed, h[1].packed, words * 4);
        assert_memory_equal(h[0].spill, h[1].spill, h[0].spill_total * 4);
        assert_memory_equal(h[0].e_col, h[1].e_col, h[0].nnz * 4);
        assert_true(o[0].stats[0] == o[1].stats[0]);
        size_t ovf_tiles = 0, tiled_vals = 0, tiled_bits = 0;
        double umax = 0, vmax[3] = {0, 0, 0};
        for (size_t w = 0; w < words; w++)
            if (w % W != 0 && fabs((double)h[0].u_ell[w]) > umax && w % W <= h[0].packed[w - w % W])
                umax = fabs((double)h[0].u_ell[w]);
        for (size_t r = 0; r < c->M * NT; r++) {
            uint32_t cnt = h[0].packed[r * W], k = cnt < W - 1 ? cnt : (uint32_t)(W - 1);
            for (uint32_t j = 1; j <= k; j++) {
                float a = h[0].u_ell[r * W + j], b = h[1].u_ell[r * W + j];
                tiled_vals++;
                tiled_bits += memcmp(&a, &b, 4) == 0;
                if (fabs((double)a - (double)b) > 1e-4 * fabs((double)a) + 1e-5 * umax)
                    fail_msg("row-tile %zu%s slot %u: U %.9g (entry) vs %.9g (tiled)", r,
                             cnt > W - 1 ? " (overflowing)" : "", j, (double)a, (double)b);
            }
            ovf_tiles += cnt > W - 1;
        }
        for (size_t j = 0; j < h[0].spill_total; j++) {
            double a = h[0].u_spill[j], b = h[1].u_spill[j];
            tiled_vals++;
            tiled_bits += memcmp(&h[0].u_spill[j], &h[1].u_spill[j], 4) == 0;
            if (fabs(a - b) > 1e-4 * fabs(a) + 1e-5 * umax)
                fail_msg("spill %zu: U %.9g (entry) vs %.9g (tiled)", j, a, b);
        }
        size_t bits[3] = {0, 0, 0};
        const float *ve[3][2] = {
            {h[0].e_tm, h[1].e_tm}, {h[0].e_du, h[1].e_du}, {h[0].e_dp, h[1].e_dp}};
        for (int v = 0; v < 3; v++)
            for (size_t e = 0; e < h[0].nnz; e++)
                vmax[v] = fabs((double)ve[v][0][e]) > vmax[v] ? fabs((double)ve[v][0][e]) : vmax[v];
        for (int v = 0; v < 3; v++)
            for (size_t e = 0; e < h[0].nnz; e++) {
                double a = ve[v][0][e], b = ve[v][1][e];
                bits[v] += memcmp(&ve[v][0][e], &ve[v][1][e], 4) == 0;
                if (fabs(a - b) > 1e-4 * fabs(a) + 1e-5 * vmax[v])
                    fail_msg("entry %zu: %s %.9g (entry) vs %.9g (tiled)", e,
                             v == 0 ? "Tm" : (v == 1 ? "dU" : "dP"), a, b);
            }
        printf("# entry vs tiled M=%zu K=%u N=%u T=%u: nnz %zu, spill %zu, %zu overflowing "
               "row-tiles; tiled U bitwise equal %zu/%zu; Tm %zu, dU %zu, dP %zu of %zu\n",
               c->M, c->K, c->N, c->T, h[0].nnz, h[0].spill_total, ovf_tiles, tiled_bits,
               tiled_vals, bits[0], bits[1], bits[2], h[0].nnz);
        assert_true(ovf_tiles > 0 && tiled_vals > 0);
        gt_errs e;
        gt_compare(&s, c->M, &o[1], &o[0], NULL, NULL, &e);
        gt_expect_w(&s, &e, 1); /* weight gradients: the per-entry bounds above and the cases */
        for (int k = 0; k < 2; k++) {
            (void)tw_test_control(TW_TC_TRAIN_HOST_FREE, &h[k]);
            gt_out_free(&o[k]);
        }
        gt_gpu_close(&g);
        tw_t_data_free(&d);
    }
}

int main(void) {
    gt_open_or_skip("test_gpu_train_routes");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_train_legacy_same),
        cmocka_unit_test(test_gpu_train_tiled_same),
    };
    int rc = cmocka_run_group_tests_name("test_gpu_train_routes", tests, NULL, NULL);
    twell_ctx_destroy(gt_ctx);
    return rc;
}
