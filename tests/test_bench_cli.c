/* test_bench_cli.c — `twell bench` as a user runs it: help, option errors, the no-device exit code,
 * the JSON form of its records (bench/record_json.c, no GPU needed), and on a machine with a GPU
 * tiny end-to-end runs whose JSON records hold the required fields.
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "bench.h"
#include "tw_gpu.h"
#include "tw_run.h"

static int bc_run(const char *args, char *out, size_t outlen) {
    char a[2048];
    snprintf(a, sizeof a, "bench %s", args);
    return tw_test_tool(a, out, outlen);
}

static void test_bench_cli_help_and_errors(void **state) {
    (void)state;
    static char out[65536];
    assert_int_equal(bc_run("--help", out, sizeof out), 0);
    assert_non_null(strstr(out, "usage: twell bench"));
    assert_int_equal(bc_run("--M 12,x", out, sizeof out), 2);
    assert_non_null(strstr(out, "bad value '12,x' for --M"));
    assert_int_equal(bc_run("--frobnicate 3", out, sizeof out), 2);
    assert_non_null(strstr(out, "unknown option '--frobnicate'"));
    assert_int_equal(bc_run("--K 100", out, sizeof out), 2); /* not a multiple of 16 */
    assert_int_equal(bc_run("--N 256 --nnz 300", out, sizeof out), 2);
    assert_int_equal(bc_run("--variant wgmma", out, sizeof out), 2);
    /* the small path's gate kernel: a known name only, listed in the usage (the removed kernels'
     * names are unknown now) */
    assert_int_equal(bc_run("--op gate_pack --small-gate x64", out, sizeof out), 2);
    assert_non_null(strstr(out, "bad value 'x64' for --small-gate"));
    assert_int_equal(bc_run("--help", out, sizeof out), 0);
    assert_non_null(strstr(out, "[--small-gate auto|g2u2[:WN]]"));
    static const char *const bad_gates[] = {"g2u2:3", "g2u2:", "g2u2:44", "auto:16",
                                            "g2u2x",  ":4",    "g2",      "g8",
                                            "x",      "x8",    "x16",     "x32:2"};
    for (size_t i = 0; i < sizeof bad_gates / sizeof bad_gates[0]; i++) {
        char args[64], want[64];
        snprintf(args, sizeof args, "--op gate_pack --small-gate %s", bad_gates[i]);
        snprintf(want, sizeof want, "bad value '%s' for --small-gate", bad_gates[i]);
        assert_int_equal(bc_run(args, out, sizeof out), 2);
        assert_non_null(strstr(out, want));
    }
    assert_int_equal(bc_run("--op ffn_infer --path sideways", out, sizeof out), 2);
    assert_non_null(strstr(out, "bad value 'sideways' for --path"));
    assert_int_equal(bc_run("--help", out, sizeof out), 0);
    assert_non_null(strstr(out, "--path auto|sparse|dense"));
    assert_null(strstr(out, "--dense-split")); /* the hand-written dense GEMMs are gone */
    /* every op, train included, in the usage line and described; -1 is not 2^64 - 1 */
    assert_non_null(strstr(out, "[--op gate_pack|ffn_infer|train]"));
    assert_non_null(strstr(out, "\ntrain: ours = one training step"));
    assert_int_equal(bc_run("--op nope", out, sizeof out), 2);
    assert_non_null(strstr(out, "(known: gate_pack ffn_infer train)"));
    assert_int_equal(bc_run("--M -1", out, sizeof out), 2);
    assert_non_null(strstr(out, "bad value '-1' for --M"));
    assert_int_equal(bc_run("--op ffn_infer --dense-split 3,4", out, sizeof out), 2);
    /* --gated: 1 or 0, and 0 only where a non-gated block exists (ffn_infer) */
    assert_int_equal(bc_run("--op ffn_infer --gated 2", out, sizeof out), 2);
    assert_non_null(strstr(out, "bad value '2' for --gated"));
    assert_int_equal(bc_run("--op train --gated 0", out, sizeof out), 2);
    assert_non_null(strstr(out, "--gated 0 applies to --op ffn_infer only"));
    assert_int_equal(bc_run("--help", out, sizeof out), 0);
    assert_non_null(strstr(out, "[--gated 1|0]"));
    /* --validate-packed: 0 or 1, described with the record field it sets */
    assert_non_null(strstr(out, "[--validate-packed 0|1]"));
    assert_non_null(strstr(out, "Records say \"validate_packed\": true|false."));
    /* --mode: host times the calling thread per call */
    assert_non_null(strstr(out, "[--mode eager|graph|both|host]"));
    assert_non_null(strstr(out, "--mode host (ffn_infer)"));
    /* the records' requested_path and path are described */
    assert_non_null(
        strstr(out, "Every record also says requested_path (--path as given) and path"));
    assert_int_equal(bc_run("--op ffn_infer --validate-packed 2", out, sizeof out), 2);
    assert_non_null(strstr(out, "bad value '2' for --validate-packed"));
    assert_int_equal(bc_run("--op ffn_infer --mode hostile", out, sizeof out), 2);
    assert_non_null(strstr(out, "bad value 'hostile' for --mode"));
}

/* The record schema, in the order every object lists it (BENCHMARKS.md's method section). */
static const char bc_schema[] =
    "op dtype M K N T C distribution nnz_target nnz_mean variant "
    "requested_path path gated validate_packed ours_ms ours_min_ms ours_max_ms baseline "
    "baseline_ms baseline_min_ms baseline_max_ms ratio reps max_rel_err "
    "checked_rows correct check gpu commit date";

/* Records as bench_record_init and an op leave them: one measured, one whose baseline never ran
 * (its times stay -1: null in the file). */
static void bc_records(bench_record r[2]) {
    memset(r, 0, 2 * sizeof *r);
    for (int i = 0; i < 2; i++) {
        snprintf(r[i].dtype, sizeof r[i].dtype, "bf16");
        r[i].M = i ? 16384 : 1, r[i].K = 2048, r[i].N = 5632, r[i].T = 256, r[i].C = 8;
        snprintf(r[i].distribution, sizeof r[i].distribution, "%s", i ? "skewed" : "uniform");
        r[i].nnz_target = 29.0, r[i].nnz_mean = i ? 44.0 : 29.5;
        r[i].gated = 1;
        r[i].ours_ms = r[i].ours_min_ms = r[i].ours_max_ms = 0.5;
        r[i].reps = 20;
        r[i].checked_rows = 16;
        r[i].correct = 1;
        snprintf(r[i].gpu, sizeof r[i].gpu, "cuda:0 a \"quoted\" device\\name");
        snprintf(r[i].commit, sizeof r[i].commit, "abc1234");
        snprintf(r[i].date, sizeof r[i].date, "2000-01-01T00:00:00Z");
    }
    snprintf(r[0].op, sizeof r[0].op, "ffn_infer");
    snprintf(r[0].variant, sizeof r[0].variant, "small-g2u2+small");
    snprintf(r[0].requested_path, sizeof r[0].requested_path, "auto");
    snprintf(r[0].path, sizeof r[0].path, "small");
    snprintf(r[0].baseline, sizeof r[0].baseline, "cublas_ffn");
    r[0].baseline_ms = r[0].baseline_min_ms = r[0].baseline_max_ms = 1.0;
    r[0].ratio = 2.0;
    snprintf(r[1].op, sizeof r[1].op, "ffn_infer_graph");
    snprintf(r[1].variant, sizeof r[1].variant, "sm90+tiled");
    snprintf(r[1].requested_path, sizeof r[1].requested_path, "sparse");
    snprintf(r[1].path, sizeof r[1].path, "tiled");
    r[1].baseline_ms = r[1].baseline_min_ms = r[1].baseline_max_ms = r[1].ratio = -1.0;
}

/* Writes recs[0..n) with bench_records_write and returns the file's text (static buffer). */
static const char *bc_write(const bench_record *recs, size_t n) {
    static char text[16384];
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(bench_records_write(f, recs, n), 0);
    rewind(f);
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    assert_true(len < sizeof text - 1);
    return text;
}

/* Every record lists the schema's fields once each, in its order, and nothing else; times never
 * measured are null; strings escaped; the array well formed. */
static void test_bench_cli_record_json(void **state) {
    (void)state;
    bench_record r[2];
    bc_records(r);
    const char *text = bc_write(r, 2);
    assert_int_equal(strncmp(text, "[\n  {\n", 6), 0);
    const char *obj = text;
    for (int i = 0; i < 2; i++) {
        obj = strstr(obj, "  {\n");
        assert_non_null(obj);
        const char *line = obj + 4;
        for (const char *k = bc_schema; *k; k += strspn(k, " ")) {
            int kl = (int)strcspn(k, " ");
            char want[48];
            snprintf(want, sizeof want, "    \"%.*s\": ", kl, k);
            if (strncmp(line, want, strlen(want)) != 0)
                fail_msg("record %d: the next field is not %.*s:\n%.80s", i, kl, k, line);
            k += kl;
            line = strchr(line, '\n');
            assert_non_null(line);
            line++;
        }
        assert_int_equal(strncmp(line, i ? "  }\n]\n" : "  },\n", i ? 6 : 5), 0);
        obj = line;
    }
    assert_non_null(strstr(text, "    \"op\": \"ffn_infer\",\n"));
    assert_non_null(strstr(text, "    \"M\": 16384,\n"));
    assert_non_null(strstr(text, "    \"ratio\": 2,\n"));
    assert_non_null(strstr(text, "    \"ratio\": null,\n"));
    assert_non_null(strstr(text, "    \"baseline_ms\": null,\n"));
    assert_non_null(strstr(text, "    \"gated\": true,\n"));
    /* what --path asked beside the route that ran, after the variant */
    assert_non_null(strstr(text, "    \"variant\": \"small-g2u2+small\",\n"
                                 "    \"requested_path\": \"auto\",\n"
                                 "    \"path\": \"small\",\n"));
    assert_non_null(strstr(text, "    \"requested_path\": \"sparse\",\n"
                                 "    \"path\": \"tiled\",\n"));
    assert_non_null(strstr(text, "    \"gpu\": \"cuda:0 a \\\"quoted\\\" device\\\\name\",\n"));
    assert_non_null(strstr(text, "    \"date\": \"2000-01-01T00:00:00Z\"\n"));
    /* no records: an empty array */
    assert_string_equal(bc_write(r, 0), "[\n]\n");
}

/* Runs `twell bench ARGS --warmup 1 --out <test results dir>` on the GPU. Without a device (exit
 * 3): the clear message, nothing written, and 0 (unless TWELL_REQUIRE_GPU=1: then the test fails).
 * Else the run must exit 0, its JSON records (the file named on the " records in " line) must
 * hold every string of keys[0..nkeys) and none of absent[0..nabsent), and no record may have
 * failed its check: returns 1 with the table in out. */
static int bc_device_run(const char *args, char *out, size_t outlen, const char *const *keys,
                         size_t nkeys, const char *const *absent, size_t nabsent) {
    static char json[65536];
    char a[1536];
    snprintf(a, sizeof a, "%s --warmup 1 --out %s/test-cache/test_bench_cli/results", args,
             TWELL_TEST_BINARY_DIR);
    int rc = bc_run(a, out, outlen);
    if (rc == 3) {
        if (tw_gpu_required())
            fail_msg("TWELL_REQUIRE_GPU=1, but twell bench found no usable device:\n%s", out);
        assert_non_null(strstr(out, "no usable CUDA device"));
        return 0;
    }
    if (rc != 0)
        fail_msg("twell bench %s exited %d:\n%s", args, rc, out);
    const char *rec = strstr(out, " records in ");
    assert_non_null(rec);
    char path[1024];
    assert_int_equal(sscanf(rec + strlen(" records in "), "%1023s", path), 1);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(json, 1, sizeof json - 1, f);
    json[n] = '\0';
    fclose(f);
    for (size_t i = 0; i < nkeys; i++)
        if (!strstr(json, keys[i]))
            fail_msg("%s lacks %s:\n%s", path, keys[i], json);
    for (size_t i = 0; i < nabsent; i++)
        if (strstr(json, absent[i]))
            fail_msg("%s has %s:\n%s", path, absent[i], json);
    assert_null(strstr(json, "\"correct\": false"));
    printf("%s", out);
    return 1;
}

#define BC_N(a) (sizeof(a) / sizeof((a)[0]))

/* A non-gated ffn_infer run: checked against the CPU reference, records say "gated": false. */
static void test_bench_cli_non_gated_run(void **state) {
    (void)state;
    static char out[65536];
    const char *keys[] = {"\"op\": \"ffn_infer\"",
                          "\"op\": \"ffn_fused_only\"",
                          "\"requested_path\": \"auto\"",
                          "\"gated\": false",
                          "\"M\": 300",
                          "\"baseline\": \"cublas_ffn\"",
                          "\"correct\": true"};
    const char *absent[] = {"\"gated\": true", "\"path\": \"unknown\""};
    if (bc_device_run("--op ffn_infer --gated 0 --M 33,300 --K 256 --N 1024 --nnz 10 "
                      "--dist uniform,skewed --reps 20",
                      out, sizeof out, keys, BC_N(keys), absent, BC_N(absent)))
        assert_non_null(strstr(out, "ffn_infer(ng)"));
}

/* --validate-packed 1: the validated calls still pass the check; records say so. */
static void test_bench_cli_validate_packed_run(void **state) {
    (void)state;
    static char out[65536];
    const char *keys[] = {"\"op\": \"ffn_infer\"", "\"validate_packed\": true",
                          "\"correct\": true"};
    const char *absent[] = {"\"validate_packed\": false", "\"path\": \"unknown\""};
    (void)bc_device_run("--op ffn_infer --validate-packed 1 --M 33,300 --K 256 --N 1024 --nnz 10 "
                        "--dist uniform --reps 20",
                        out, sizeof out, keys, BC_N(keys), absent, BC_N(absent));
}

/* --mode host at M = 1: records ffn_infer_host and ffn_fused_only_host against the dense
 * baseline's host time, the check passed first, the driver calls per call in the note. */
static void test_bench_cli_host_run(void **state) {
    (void)state;
    static char out[65536];
    const char *keys[] = {"\"op\": \"ffn_infer_host\"",
                          "\"op\": \"ffn_fused_only_host\"",
                          "\"baseline\": \"cublas_ffn_host\"",
                          "\"M\": 1",
                          "\"M\": 24",
                          "driver calls",
                          "\"reps\": 1000",
                          "\"requested_path\": \"auto\"",
                          "\"correct\": true"};
    const char *absent[] = {"\"op\": \"ffn_infer\"", "\"path\": \"unknown\""};
    (void)bc_device_run("--op ffn_infer --mode host --M 1,24 --K 256 --N 1024 --nnz 10 "
                        "--dist uniform --reps 20",
                        out, sizeof out, keys, BC_N(keys), absent, BC_N(absent));
}

/* --path forced, eager and graph: every record says what was asked and the route that ran, the
 * graph records the captured call's; sparse keeps the small-batch path off, small forces it. */
static void test_bench_cli_path_fields(void **state) {
    (void)state;
    static char out[65536];
    const char *keys[] = {"\"op\": \"ffn_infer\"", "\"op\": \"ffn_infer_graph\"",
                          "\"op\": \"ffn_fused_only_graph\"", "\"requested_path\": \"sparse\""};
    /* tiled, or rows on a GPU without the tiled pipeline */
    const char *absent[] = {"\"path\": \"small\"", "\"path\": \"dense\"", "\"path\": \"mixed\"",
                            "\"path\": \"unknown\"", "\"requested_path\": \"auto\""};
    (void)bc_device_run(
        "--op ffn_infer --path sparse --mode both --M 8,33 --K 256 --N 1024 --nnz 10 "
        "--dist uniform --reps 5 --check-rows 8",
        out, sizeof out, keys, BC_N(keys), absent, BC_N(absent));
    const char *skeys[] = {"\"op\": \"ffn_infer_graph\"", "\"requested_path\": \"small\"",
                           "\"path\": \"small\""};
    const char *sabsent[] = {"\"path\": \"tiled\"", "\"path\": \"rows\"", "\"path\": \"dense\"",
                             "\"path\": \"mixed\"", "\"path\": \"unknown\""};
    (void)bc_device_run("--op ffn_infer --path small --mode both --M 1,8 --K 256 --N 1024 --nnz 10 "
                        "--dist uniform --reps 5 --check-rows 8",
                        out, sizeof out, skeys, BC_N(skeys), sabsent, BC_N(sabsent));
}

/* The default op (gate_pack) on a tiny shape: every field of the record schema is written. */
static void test_bench_cli_tiny_run(void **state) {
    (void)state;
    static char out[65536];
    const char *keys[] = {"\"op\": \"gate_pack\"",
                          "\"gated\": true",
                          "\"dtype\": \"bf16\"",
                          "\"M\": 33",
                          "\"M\": 100",
                          "\"K\": 64",
                          "\"N\": 512",
                          "\"T\": 256",
                          "\"C\": 8",
                          "\"distribution\": \"skewed\"",
                          "\"requested_path\": \"auto\"",
                          "\"path\": \"",
                          "\"nnz_mean\"",
                          "\"ours_ms\"",
                          "\"baseline\": \"cublas_gemm\"",
                          "\"baseline_ms\"",
                          "\"ratio\"",
                          "\"max_rel_err\"",
                          "\"gpu\"",
                          "\"commit\"",
                          "\"date\"",
                          "\"correct\": true"};
    const char *absent[] = {"\"path\": \"unknown\""};
    (void)bc_device_run("--M 33,100 --K 64 --N 512 --nnz 10 --dist uniform,skewed --reps 20", out,
                        sizeof out, keys, BC_N(keys), absent, BC_N(absent));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_cli_help_and_errors),
        cmocka_unit_test(test_bench_cli_record_json),
        cmocka_unit_test(test_bench_cli_tiny_run),
        cmocka_unit_test(test_bench_cli_non_gated_run),
        cmocka_unit_test(test_bench_cli_validate_packed_run),
        cmocka_unit_test(test_bench_cli_host_run),
        cmocka_unit_test(test_bench_cli_path_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
