/* test_small_gate.c — the small path's gate-pack launch geometry
 * (runtime/ops/ffn/small/small_gate.c) against the kernel's contract
 * (templates/gate_pack/gate_pack_small.cu.lua) for every M the path takes, every tile width and
 * forced WN; the rule's token blocks and WN; the names it accepts. labels: unit */
#include "small_gate.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#define SG_MAX_M 1024 /* TW_SMALL_MAX_M */

static void test_small_gate_parse(void **st) {
    (void)st;
    static const struct {
        const char *spec;
        int wn;
    } good[] = {{"auto", 0},   {"g2u2", 0},   {"g2u2:1", 1}, {"g2u2:2", 2},
                {"g2u2:4", 4}, {"g2u2:8", 8}, {"auto:4", 4}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int wn = -1;
        assert_int_equal(tw_sgate_spec_parse(good[i].spec, &wn), 0);
        assert_int_equal(wn, good[i].wn);
    }
    /* the removed kernels' names are unknown now; bad WN suffixes; nothing written on failure */
    static const char *const bad[] = {"g2",     "g8",    "x",       "x8",     "x16", "x32",
                                      "g2u2:3", "g2u2:", "g2u2:44", "g2u2:0", ":2",  "auto:16",
                                      "g2u2x",  "G2U2",  "",        "autox",  "g2u", "x16:4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int wn = 7;
        if (tw_sgate_spec_parse(bad[i], &wn) != -1)
            fail_msg("'%s' parsed", bad[i]);
        assert_int_equal(wn, 7);
    }
    int wn = 7;
    assert_int_equal(tw_sgate_spec_parse(NULL, &wn), -1);
    assert_int_equal(wn, 7);
    assert_string_equal(TW_SGATE_KERNEL, "g2u2");
}

/* Every (T, M, forced WN): the launch keeps the kernel's contract. */
static void test_small_gate_contract(void **st) {
    (void)st;
    static const uint32_t Ts[] = {64, 128, 256};
    size_t n = 0;
    for (size_t ti = 0; ti < 3; ti++)
        for (int wn = 0; wn <= 8; wn++)
            for (size_t M = 1; M <= SG_MAX_M; M++) {
                tw_sgate_geom g = tw_sgate_geom_of(Ts[ti], M, wn);
                char what[80];
                snprintf(what, sizeof what, "wn %d T=%u M=%zu: TB=%d MT=%d WN=%d", wn, Ts[ti], M,
                         g.TB, g.MT, g.WN);
                int ok = g.MT % 8 == 0 && g.MT >= 8 && g.MT <= TW_SGATE_MAX_ROWS &&
                         (size_t)g.TB * (size_t)g.MT >= M &&
                         (size_t)(g.TB - 1) * (size_t)g.MT < M && g.WN >= 1 && g.WN <= 8 &&
                         Ts[ti] % (16u * (unsigned)g.WN) == 0;
                /* the workspace's arrival counters: rows R/8 + 1 for R ≥ M, R ≥ 64 */
                size_t R = 64;
                while (R < M)
                    R *= 2;
                ok = ok && (size_t)g.TB <= R / 8 + 1;
                /* a WN that T takes replaces the rule's */
                if ((wn == 1 || wn == 2 || wn == 4 || wn == 8) &&
                    Ts[ti] % (16u * (unsigned)wn) == 0)
                    ok = ok && g.WN == wn;
                if (!ok)
                    fail_msg("contract broken: %s", what);
                n++;
            }
    printf("# %zu launches checked\n", n);
}

/* The rule: the fewest token blocks of up to 16 rows, rows spread evenly (multiples of 8), WN 1 for
 * blocks of up to 8 rows, else 2; M = 0 is one row. */
static void test_small_gate_rule(void **st) {
    (void)st;
    for (size_t M = 1; M <= SG_MAX_M; M++) {
        tw_sgate_geom g = tw_sgate_geom_of(256, M, 0);
        int TB = (int)((M + 15) / 16);
        int MT = (int)(((M + (size_t)TB - 1) / (size_t)TB + 7) / 8 * 8);
        assert_int_equal(g.TB, TB);
        assert_int_equal(g.MT, MT);
        assert_int_equal(g.WN, MT <= 8 ? 1 : 2);
    }
    static const struct {
        size_t M;
        int TB, MT, WN;
    } t[] = {{0, 1, 8, 1},     {1, 1, 8, 1},     {8, 1, 8, 1},     {9, 1, 16, 2},
             {16, 1, 16, 2},   {17, 2, 16, 2},   {32, 2, 16, 2},   {33, 3, 16, 2},
             {100, 7, 16, 2},  {255, 16, 16, 2}, {256, 16, 16, 2}, {1000, 63, 16, 2},
             {1024, 64, 16, 2}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        tw_sgate_geom g = tw_sgate_geom_of(128, t[i].M, 0);
        assert_int_equal(g.TB, t[i].TB);
        assert_int_equal(g.MT, t[i].MT);
        assert_int_equal(g.WN, t[i].WN);
    }
    /* T = 64 caps a forced WN 8 (128 neurons) to the rule's; T = 256 takes it */
    assert_int_equal(tw_sgate_geom_of(256, 200, 8).WN, 8);
    assert_int_equal(tw_sgate_geom_of(64, 200, 8).WN, 2);
    assert_int_equal(tw_sgate_geom_of(64, 200, 4).WN, 4);
    assert_int_equal(tw_sgate_geom_of(256, 1, 4).WN, 4);
    assert_int_equal(tw_sgate_geom_of(256, 200, 3).WN, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_gate_parse),
        cmocka_unit_test(test_small_gate_contract),
        cmocka_unit_test(test_small_gate_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
