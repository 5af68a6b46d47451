/* test_small_gate.c — the small path's gate-pack kernel choice and launch geometry
 * (runtime/ops/ffn/small_gate.c) against the kernels' contracts (templates/gate_pack/
 * gate_pack_small.cu.lua) for every M the path takes, every tile width and choice, on the shared
 * memory of three device generations; AUTO's choice up to 32 rows as measured in session 4.
 * labels: unit */
#include "small_gate.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

/* cudaDevAttrMaxSharedMemoryPerBlockOptin of sm_80 (A100), sm_86/89 and sm_90 (H100, H200) */
static const int sg_optin[] = {166912, 101376, 232448};
#define SG_MAX_M 1024 /* TW_SMALL_MAX_M */

static const char *const sg_choices[] = {"auto", "g2", "g2u2", "g8", "x", "x8", "x16", "x32"};

static void test_small_gate_parse(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof sg_choices / sizeof sg_choices[0]; i++) {
        tw_sgate_choice c = (tw_sgate_choice)99;
        assert_int_equal(tw_sgate_choice_parse(sg_choices[i], &c), 0);
        assert_int_equal((int)c, (int)i);
    }
    tw_sgate_choice c = TW_SGC_X8;
    assert_int_equal(tw_sgate_choice_parse("x64", &c), -1);
    assert_int_equal(tw_sgate_choice_parse("", &c), -1);
    assert_int_equal(tw_sgate_choice_parse(NULL, &c), -1);
    assert_int_equal((int)c, (int)TW_SGC_X8);
    /* with a forced WN */
    int wn = -1;
    assert_int_equal(tw_sgate_spec_parse("x16:4", &c, &wn), 0);
    assert_int_equal((int)c, (int)TW_SGC_X16);
    assert_int_equal(wn, 4);
    assert_int_equal(tw_sgate_spec_parse("g8", &c, &wn), 0);
    assert_int_equal((int)c, (int)TW_SGC_G8);
    assert_int_equal(wn, 0);
    static const char *const bad[] = {"x16:3", "x16:", "x16:44", "x16:0", ":2", "auto:16", NULL};
    for (size_t i = 0; bad[i]; i++) {
        c = TW_SGC_X32, wn = 7;
        assert_int_equal(tw_sgate_spec_parse(bad[i], &c, &wn), -1);
        assert_int_equal((int)c, (int)TW_SGC_X32);
        assert_int_equal(wn, 7);
    }
    assert_int_equal(tw_sgate_spec_parse(NULL, &c, &wn), -1);
    assert_string_equal(tw_sgate_kernel_name(TW_SGK_G2U2), "g2u2");
    assert_string_equal(tw_sgate_kernel_name(TW_SGK_X32), "x32");
    assert_null(tw_sgate_kernel_name(TW_SGK_COUNT));
}

/* The template's dynamic shared memory: two stages of 8·NG rows × 20 16-byte pieces (4 k32
 * blocks of 4 pieces and 4 of padding); the warps' sums (float4 [8][NG][32]) reuse it. */
static void test_small_gate_smem(void **st) {
    (void)st;
    static const struct {
        tw_sgate_kernel k;
        int rows;
        unsigned smem;
    } t[] = {{TW_SGK_G2, 16, 0},      {TW_SGK_G2U2, 16, 0},      {TW_SGK_G8, 64, 0},
             {TW_SGK_X8, 64, 40960u}, {TW_SGK_X16, 128, 81920u}, {TW_SGK_X32, 256, 163840u}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        assert_int_equal(tw_sgate_max_rows(t[i].k), t[i].rows);
        assert_int_equal(tw_sgate_smem(t[i].k), t[i].smem);
        if (t[i].smem) {
            unsigned ng = (unsigned)t[i].rows / 8u;
            assert_int_equal(t[i].smem, 2u * 8u * ng * 20u * 16u);
            assert_true(8u * ng * 32u * 16u <= t[i].smem);
        }
    }
    /* every x kernel fits an H100 and an A100; x32 not an sm_86 */
    for (int k = TW_SGK_X8; k <= TW_SGK_X32; k++) {
        assert_true(tw_sgate_smem((tw_sgate_kernel)k) + TW_SGATE_STATIC_SMEM_X <= 166912u);
    }
    assert_true(tw_sgate_smem(TW_SGK_X32) + TW_SGATE_STATIC_SMEM_X > 101376u);
}

/* Every (choice, T, M, device): the launch keeps the kernel's contract. */
static void test_small_gate_contract(void **st) {
    (void)st;
    static const uint32_t Ts[] = {64, 128, 256};
    size_t n = 0;
    for (size_t d = 0; d < sizeof sg_optin / sizeof sg_optin[0]; d++)
        for (size_t ci = 0; ci < sizeof sg_choices / sizeof sg_choices[0]; ci++)
            for (size_t ti = 0; ti < 3; ti++)
                for (int wn = 0; wn <= 8; wn++)
                    for (size_t M = 1; M <= SG_MAX_M; M++) {
                        tw_sgate_geom g =
                            tw_sgate_geom_of(Ts[ti], M, (tw_sgate_choice)ci, wn, sg_optin[d]);
                        int rows = tw_sgate_max_rows(g.kernel);
                        int x = g.kernel >= TW_SGK_X8 && g.kernel <= TW_SGK_X32;
                        char what[96];
                        snprintf(what, sizeof what,
                                 "%s:%d T=%u M=%zu optin=%d: %s TB=%d MT=%d WN=%d", sg_choices[ci],
                                 wn, Ts[ti], M, sg_optin[d], tw_sgate_kernel_name(g.kernel), g.TB,
                                 g.MT, g.WN);
                        int ok =
                            rows > 0 && g.MT % 8 == 0 && g.MT >= 8 && g.MT <= rows &&
                            (size_t)g.TB * (size_t)g.MT >= M &&
                            (size_t)(g.TB - 1) * (size_t)g.MT < M && g.WN >= 1 && g.WN <= 8 &&
                            Ts[ti] % (16u * (unsigned)g.WN) == 0 &&
                            g.smem == tw_sgate_smem(g.kernel) &&
                            (!x || ((g.WN == 2 || g.WN == 4) &&
                                    (long long)g.smem + TW_SGATE_STATIC_SMEM_X <= sg_optin[d]));
                        /* the workspace's arrival counters: rows R/8 + 1 for R ≥ M, R ≥ 64 */
                        size_t R = 64;
                        while (R < M)
                            R *= 2;
                        ok = ok && (size_t)g.TB <= R / 8 + 1;
                        /* a WN the kernel and T take replaces the rule's */
                        int takes =
                            x ? wn == 2 || wn == 4 : wn == 1 || wn == 2 || wn == 4 || wn == 8;
                        if (takes && Ts[ti] % (16u * (unsigned)wn) == 0)
                            ok = ok && g.WN == wn;
                        if (!ok)
                            fail_msg("contract broken: %s", what);
                        n++;
                    }
    printf("# %zu launches checked\n", n);
}

/* AUTO: the register-fed kernels where session 4 measured them (g2 to 16 rows with WN 1 to 8,
 * g8 to 32 with WN 2, one token block), the x kernel of one token block to 256 rows where the
 * device holds it, g8 beyond (token blocks of 64, WN 4). */
static void test_small_gate_auto(void **st) {
    (void)st;
    const int h100 = 232448, sm86 = 101376;
    for (size_t M = 1; M <= SG_MAX_M; M++) {
        tw_sgate_geom g = tw_sgate_geom_of(256, M, TW_SGC_AUTO, 0, h100);
        if (M <= 16) {
            assert_int_equal(g.kernel, TW_SGK_G2);
            assert_int_equal(g.WN, M <= 8 ? 1 : 2);
            assert_int_equal(g.TB, 1);
        } else if (M <= 32) {
            assert_int_equal(g.kernel, TW_SGK_G8);
            assert_int_equal(g.WN, 2);
            assert_int_equal(g.TB, 1);
        } else if (M <= 256) {
            assert_int_equal(g.kernel, M <= 64 ? TW_SGK_X8 : M <= 128 ? TW_SGK_X16 : TW_SGK_X32);
            assert_int_equal(g.TB, 1);
            assert_int_equal(g.WN, M <= 64 ? 2 : 4);
        } else {
            assert_int_equal(g.kernel, TW_SGK_G8);
            assert_int_equal(g.TB, (int)((M + 63) / 64));
            assert_int_equal(g.WN, 4);
        }
        tw_sgate_geom x = tw_sgate_geom_of(256, M, TW_SGC_X, 0, h100);
        assert_true(x.kernel >= TW_SGK_X8 && x.kernel <= TW_SGK_X32);
    }
    /* too little shared memory for x32: x16 in two token blocks */
    tw_sgate_geom g = tw_sgate_geom_of(256, 256, TW_SGC_AUTO, 0, sm86);
    assert_int_equal(g.kernel, TW_SGK_X16);
    assert_int_equal(g.TB, 2);
    assert_int_equal(g.MT, 128);
    /* no room even for x8 (40960 + its static bytes): g8 */
    g = tw_sgate_geom_of(256, 100, TW_SGC_X8, 0, 40960);
    assert_int_equal(g.kernel, TW_SGK_G8);
    /* a named kernel keeps its rows a block: x8 at 256 rows runs 4 token blocks */
    g = tw_sgate_geom_of(128, 256, TW_SGC_X8, 0, h100);
    assert_int_equal(g.kernel, TW_SGK_X8);
    assert_int_equal(g.TB, 4);
    assert_int_equal(g.MT, 64);
    g = tw_sgate_geom_of(128, 255, TW_SGC_G2U2, 0, h100);
    assert_int_equal(g.WN, 2);
    /* forced WN: taken where the kernel and T allow it, else the rule's */
    assert_int_equal(tw_sgate_geom_of(256, 200, TW_SGC_X32, 2, h100).WN, 2);
    assert_int_equal(tw_sgate_geom_of(256, 200, TW_SGC_X32, 8, h100).WN, 4);
    assert_int_equal(tw_sgate_geom_of(256, 200, TW_SGC_G8, 8, h100).WN, 8);
    assert_int_equal(tw_sgate_geom_of(64, 200, TW_SGC_G8, 8, h100).WN, 4);
    assert_int_equal(g.kernel, TW_SGK_G2U2);
    assert_int_equal(g.TB, 16);
    assert_int_equal(g.MT, 16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_gate_parse),
        cmocka_unit_test(test_small_gate_smem),
        cmocka_unit_test(test_small_gate_contract),
        cmocka_unit_test(test_small_gate_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
