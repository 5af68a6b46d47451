/* test_cli.c — the `twell` tool's shared option parsers (tools/cli_common.c, linked into this
 * test): plain decimal integers and finite numbers within their range, lists of them; and every
 * subcommand's numeric options rejecting negatives, garbage and overflow with a usage error
 * (exit 2) before any work, instead of wrapping "-1" to 2^64 − 1.
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cli_common.h"
#include "tw_run.h"

#include <stdio.h>
#include <string.h>

static void test_cli_integers(void **state) {
    (void)state;
    uint64_t v = 7;
    assert_int_equal(tw_cli_u64("0", 0, 10, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(tw_cli_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
    assert_true(v == UINT64_MAX);
    static const char *const bad[] = {
        "-1",
        "18446744073709551616",
        "99999999999999999999999",
        "",
        " 5",
        "5 ",
        "+5",
        "5x",
        "0x10",
        "1e3",
        "1,2",
        "1.0",
        "--",
        "-0",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        if (tw_cli_u64(bad[i], 0, UINT64_MAX, &v) != -1 || v != 7)
            fail_msg("tw_cli_u64 accepted '%s' (%llu)", bad[i], (unsigned long long)v);
    }
    assert_int_equal(tw_cli_u64(NULL, 0, 1, &v), -1);
    /* the range is inclusive on both ends */
    assert_int_equal(tw_cli_u64("4", 5, 9, &v), -1);
    assert_int_equal(tw_cli_u64("10", 5, 9, &v), -1);
    assert_int_equal(tw_cli_u64("5", 5, 9, &v), 0);
    assert_int_equal(tw_cli_u64("9", 5, 9, &v), 0);
    uint32_t u = 3;
    assert_int_equal(tw_cli_u32("4294967295", 1, UINT32_MAX, &u), 0);
    assert_true(u == UINT32_MAX);
    assert_int_equal(tw_cli_u32("4294967296", 1, UINT32_MAX, &u), -1);
    assert_int_equal(tw_cli_u32("0", 1, UINT32_MAX, &u), -1);
    assert_int_equal(tw_cli_u32("-4294967295", 1, UINT32_MAX, &u), -1); /* strtoul gives 1 */
    int n = 0;
    assert_int_equal(tw_cli_int("1000", 1, 1000, &n), 0);
    assert_int_equal(n, 1000);
    assert_int_equal(tw_cli_int("1001", 1, 1000, &n), -1);
    assert_int_equal(tw_cli_int("-1", 0, 1000, &n), -1);
    assert_int_equal(tw_cli_int("2147483648", 0, 2147483647, &n), -1);
}

static void test_cli_lists_and_reals(void **state) {
    (void)state;
    size_t m[4] = {0}, nm = 99;
    assert_int_equal(tw_cli_size_list("1,256,4096", 1, 1u << 20, m, 4, &nm), 0);
    assert_int_equal(nm, 3);
    assert_int_equal(m[0], 1);
    assert_int_equal(m[2], 4096);
    static const char *const bad_lists[] = {"",          ",",         "4,",   ",4",  "4,,5",
                                            "1,2,3,4,5", "12,x",      "4,-1", "0,4", "4, 5",
                                            "-1",        "1,2097152", "1;2",  "1 2"};
    for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
        nm = 99;
        if (tw_cli_size_list(bad_lists[i], 1, 1u << 20, m, 4, &nm) != -1 || nm != 99)
            fail_msg("tw_cli_size_list accepted '%s'", bad_lists[i]);
    }
    double d = -7.0;
    assert_int_equal(tw_cli_double("29", 0.0, 100.0, &d), 0);
    assert_true(d == 29.0);
    assert_int_equal(tw_cli_double("0.5", 0.0, 100.0, &d), 0);
    assert_true(d == 0.5);
    assert_int_equal(tw_cli_double("2.5e1", 0.0, 100.0, &d), 0);
    assert_true(d == 25.0);
    static const char *const bad_reals[] = {"inf",   "-inf", "nan", "NaN",    "INF",
                                            "1e999", "0x10", " 5",  "5 ",     "5x",
                                            "",      "-1",   "101", "1e-400", "."};
    for (size_t i = 0; i < sizeof bad_reals / sizeof bad_reals[0]; i++) {
        d = -7.0;
        if (tw_cli_double(bad_reals[i], 0.0, 100.0, &d) != -1 || d != -7.0)
            fail_msg("tw_cli_double accepted '%s' (%g)", bad_reals[i], d);
    }
    double l[3];
    size_t nl = 0;
    assert_int_equal(tw_cli_double_list("29,280.5", 0.0, 1000.0, l, 3, &nl), 0);
    assert_int_equal(nl, 2);
    assert_true(l[1] == 280.5);
    assert_int_equal(tw_cli_double_list("29,inf", 0.0, 1000.0, l, 3, &nl), -1);
    assert_int_equal(tw_cli_double_list("1,2,3,4", 0.0, 1000.0, l, 3, &nl), -1);
}

/* Every numeric option of every subcommand: a usage error (exit 2) that names the value. */
static void test_cli_rejects_bad_numbers(void **state) {
    (void)state;
    static const struct {
        const char *args, *says;
    } cases[] = {
        {"bench --M -1", "'-1' for --M"},
        {"bench --M 4096,-1", "'4096,-1' for --M"},
        {"bench --M 18446744073709551617", "for --M"},
        {"bench --K -2048", "'-2048' for --K"},
        {"bench --N 4294967296", "for --N"},
        {"bench --T 2x", "for --T"},
        {"bench --C -8", "for --C"},
        {"bench --nnz inf", "'inf' for --nnz"},
        {"bench --nnz -29", "for --nnz"},
        {"bench --reps -20", "for --reps"},
        {"bench --warmup 1e3", "for --warmup"},
        {"bench --check-rows -1", "for --check-rows"},
        {"bench --seed -4294967295", "for --seed"},
        {"tune --K 64 --N 256 --M -1", "'-1' for --M"},
        {"tune --K -64 --N 256", "for --K"},
        {"tune --K 64 --N 256 --T -256", "for --T"},
        {"tune --K 64 --N 256 --budget nan", "for --budget"},
        {"tune --K 64 --N 256 --budget inf", "for --budget"},
        {"tune --K 64 --N 256 --reps ' 12'", "for --reps"},
        {"tune --K 64 --N 256 --threads -1", "for --threads"},
        {"tune --K 64 --N 256 --device -1", "for --device"},
        {"demo --M -1", "--M expects an integer"},
        {"demo --K -2048", "--K expects an integer"},
        {"demo --seed -1", "--seed expects an integer"},
        {"demo --seed 18446744073709551616", "--seed expects an integer"},
        {"demo --nnz inf", "--nnz expects a positive number"},
        {"cache ls --max-bytes -1", "--max-bytes wants a byte count"},
        {"render gate_pack_simt --K -64 --N 256", "'-64' for --K"},
        {"render gate_pack_simt --K 64 --N 256 --param C=-2", "'-2' for --C"},
        {"render gate_pack_simt --K 64 --N 256 --param X=99999999999999999999", "out of range"},
        {"compile gate_pack_simt --K 64 --N 256 --repeat -1", "--repeat must be in"},
        {"compile gate_pack_simt --K 64 --N 256 --repeat 5x", "--repeat must be in"},
        {"compile gate_pack_simt --K 64 --N 256 --cold=2", "'2' for --cold (0 or 1)"},
        {"compile gate_pack_simt --K 64 --N 256 --cold=no", "'no' for --cold (0 or 1)"},
    };
    static char out[16384];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = tw_test_tool(cases[i].args, out, sizeof out);
        if (rc != 2 || !strstr(out, cases[i].says))
            fail_msg("twell %s: exit %d (want 2), output lacks \"%s\":\n%s", cases[i].args, rc,
                     cases[i].says, out);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_integers),
        cmocka_unit_test(test_cli_lists_and_reals),
        cmocka_unit_test(test_cli_rejects_bad_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
