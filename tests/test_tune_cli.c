/* test_tune_cli.c — `twell tune` as a user runs it: help and option errors, --dry-run from a
 * model's config.json (shapes, kernels, pruned candidate counts, JSON report), malformed and
 * unsupported configs, a winner stored by one process seen by the tool in another, the clear
 * no-device exit, and on a machine with a GPU a tiny tune run twice (the second from the cache,
 * its prewarm compiling nothing).
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h"
#include "json.h"
#include "tuner.h"
#include "tw_cpu.h"
#include "tw_gpu.h"
#include "tw_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tc_out[1 << 17];

/* This test's own cache directory, as CTest gave it (cases point TWELL_CACHE_DIR at
 * subdirectories of it for the tool). */
static char tc_base[512];

static const char *tc_cache_base(void) { return tc_base; }

/* Runs `twell tune <args>` with stderr merged; returns the exit code. */
static int tc_run(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd \"%s\" && \"%s\" tune %s 2>&1", TWELL_TEST_SOURCE_DIR,
             TWELL_TOOL_PATH, args);
    return tw_test_run(cmd, tc_out, sizeof tc_out);
}

static void tc_expect(const char *args, int rc, const char *needle) {
    int got = tc_run(args);
    if (got != rc || (needle && !strstr(tc_out, needle)))
        fail_msg("twell tune %s: exit %d (want %d), output lacks '%s':\n%s", args, got, rc,
                 needle ? needle : "", tc_out);
}

static void test_tune_cli_help_and_errors(void **state) {
    (void)state;
    tc_expect("--help", 0, "usage: twell tune");
    tc_expect("", 2, "give --model config.json, or both --K and --N");
    tc_expect("--K 2048", 2, "both --K and --N");
    tc_expect("--frobnicate 3", 2, "unknown option '--frobnicate'");
    tc_expect("--K 2048 --N 5632 --M 12,x", 2, "bad value '12,x' for --M");
    tc_expect("--K 2048 --N 5632 --M 0", 2, "bad value '0' for --M");
    tc_expect("--K 2048 --N 5632 --M 4,", 2, "bad value '4,' for --M");
    tc_expect("--K 2048 --N 5632 --ops gate_pack,down", 2, "unknown op 'down'");
    tc_expect("--K 2048 --N 5632 --ops gate_pack,gate_pack", 2, "for --ops");
    tc_expect("--K 2048 --N 5632 --budget -1", 2, "bad value '-1' for --budget");
    tc_expect("--K 2048 --N 5632 --dtype fp32", 2, "bad value 'fp32' for --dtype");
    tc_expect("--K 2048 --N 5632 --assume-device tpu --dry-run", 2, "unknown device 'tpu'");
    tc_expect("--K 2048 --N 5632 --budget", 2, "--budget needs a value");
    tc_expect("--model tests/data/tinyllama_config.json --K 64", 2, "not both");
    /* Shapes the kernels cannot take are refused before anything else. */
    tc_expect("--K 100 --N 5632 --dry-run", 2, "shape.K = 100 is not a positive multiple of 16");
    tc_expect("--K 2048 --N 5000 --dry-run", 2, "shape.N = 5000 is not a multiple of shape.T");
}

static void test_tune_cli_dry_run_model(void **state) {
    (void)state;
    tc_expect("--dry-run --model tests/data/tinyllama_config.json", 0,
              "shape: K=2048 N=5632 T=256 C=8 bf16 gated");
    static const char *const want[] = {
        "model: tests/data/tinyllama_config.json (llama, 22 layers share this FFN shape)",
        "note: hidden_act is silu",
        "device: ",
        "gate_pack",
        "ffn_infer",
        "gate_pack_sm90:BK=64,STAGES=3,CLUSTER=2", /* the default of the M = 4096 row */
        "  16384   16384 ",
        "      1       1 ",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(tc_out, want[i]))
            fail_msg("dry run output lacks '%s':\n%s", want[i], tc_out);
    /* An A100 has no Hopper kernel: the portable one, with its pruned counts (25 configs, 17
     * kept at M = 4096, only BM = 8 at M = 1). */
    tc_expect("--dry-run --model tests/data/tinyllama_config.json --assume-device a100 --ops "
              "gate_pack --M 1,4096",
              0, "NVIDIA A100");
    if (!strstr(tc_out, "gate_pack  gate_pack_simt        1       1     25      5") ||
        !strstr(tc_out, "gate_pack  gate_pack_simt     4096    4096     25     17"))
        fail_msg("unexpected counts:\n%s", tc_out);
    /* Models whose type is not ours to judge but whose sizes are fine. */
    tc_expect("--dry-run --model tests/data/llava_config.json", 0, "sizes from text_config");
    tc_expect("--dry-run --model tests/data/llama_7b_config.json", 0,
              "shape: K=4096 N=11008 T=256 C=8 fp16 gated");
}

static void test_tune_cli_json_report(void **state) {
    (void)state;
    char path[600], args[1024];
    mkdir(tc_cache_base(), 0700);
    snprintf(path, sizeof path, "%s/dry.json", tc_cache_base());
    remove(path);
    snprintf(args, sizeof args,
             "--dry-run --model tests/data/tinyllama_config.json --M 1,3000 --json %s", path);
    tc_expect(args, 0, "report: ");
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    tw_json *doc = NULL;
    char err[256];
    if (tw_json_parse(buf, n, &doc, err, sizeof err) != TWELL_OK)
        fail_msg("report is not JSON: %s\n%.*s", err, (int)n, buf);
    assert_int_equal(tw_json_get(doc, "dry_run")->type, TW_JSON_TRUE);
    const tw_json *model = tw_json_get(doc, "model");
    assert_int_equal(tw_json_get(model, "num_layers")->i, 22);
    assert_int_equal(tw_json_get(model, "hidden_size")->i, 2048);
    const tw_json *res = tw_json_get(doc, "results");
    assert_non_null(res);
    assert_int_equal(res->type, TW_JSON_ARRAY);
    assert_int_equal(res->len, 4); /* 2 ops (gate_pack, ffn_infer) × 2 row counts */
    for (size_t i = 0; i < res->len; i++) {
        const tw_json *r = res->items[i];
        const tw_json *cfg = tw_json_get(r, "config");
        assert_non_null(cfg);
        assert_int_equal(cfg->type, TW_JSON_STRING);
        tw_tune_config c;
        assert_int_equal(tw_tune_config_parse(cfg->str, &c), TWELL_OK);
        assert_int_equal(tw_json_get(r, "K")->i, 2048);
        assert_int_equal(tw_json_get(r, "N")->i, 5632);
        assert_string_equal(tw_json_get(r, "dtype")->str, "bf16");
        int64_t M = tw_json_get(r, "M")->i, bucket = tw_json_get(r, "bucket")->i;
        assert_true((M == 1 && bucket == 1) || (M == 3000 && bucket == 4096));
        assert_true(tw_json_get(r, "kept")->i >= 1);
        assert_true(tw_json_get(r, "kept")->i <= tw_json_get(r, "candidates")->i);
        assert_int_equal(tw_json_get(r, "ms")->type, TW_JSON_NULL);
        assert_string_equal(tw_json_get(r, "source")->str, "planned");
    }
    tw_json_free(doc);
}

static void test_tune_cli_bad_models(void **state) {
    (void)state;
    tc_expect("--dry-run --model tests/data/fp32_config.json", 2,
              "torch_dtype \"float32\" is not supported");
    /* The type to run can be given instead. */
    tc_expect("--dry-run --model tests/data/fp32_config.json --dtype fp16", 0,
              "shape: K=1024 N=4096 T=256 C=8 fp16 gated");
    tc_expect("--dry-run --model tests/data/malformed_config.json", 2,
              "malformed_config.json: line 5, column 1: trailing comma");
    tc_expect("--dry-run --model tests/data/no_such_config.json", 2, "cannot open");
    /* Valid JSON, sizes the kernels cannot take. */
    char path[600], args[1024];
    mkdir(tc_cache_base(), 0700);
    snprintf(path, sizeof path, "%s/odd_config.json", tc_cache_base());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"hidden_size\": 2048, \"intermediate_size\": 5000, \"torch_dtype\": \"bfloat16\"}\n",
          f);
    fclose(f);
    snprintf(args, sizeof args, "--dry-run --model %s", path);
    tc_expect(args, 2, "is not a multiple of shape.T");
    snprintf(path, sizeof path, "%s/nested_config.json", tc_cache_base());
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"hidden_size\": {\"value\": 2048}, \"intermediate_size\": 5632}\n", f);
    fclose(f);
    snprintf(args, sizeof args, "--dry-run --model %s", path);
    tc_expect(args, 2, "hidden_size must be a number, not object");
}

/* One process stores a winner; the tool, another process, sees it. */
static void test_tune_cli_sees_stored_winner(void **state) {
    (void)state;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/stored", tc_cache_base());
    twell_ctx *ctx = tw_test_cpu_ctx_at(dir, NULL);
    assert_non_null(ctx);
    tw_tune_device d;
    assert_int_equal(tw_tune_device_preset("h200", &d), 0);
    tw_tune_problem p;
    memset(&p, 0, sizeof p);
    snprintf(p.op, sizeof p.op, "gate_pack");
    twell_shape_init(&p.shape, 2048, 5632);
    p.M = 4096;
    tw_tune_record r;
    memset(&r, 0, sizeof r);
    assert_int_equal(tw_tune_config_parse("gate_pack_sm90:BK=32,STAGES=5,CLUSTER=1", &r.config),
                     TWELL_OK);
    r.ms = 0.25;
    r.default_ms = 0.5;
    r.time = 1;
    assert_int_equal(tw_tune_store_save(ctx, &p, &d, &r), TWELL_OK);
    twell_ctx_destroy(ctx);

    char args[1024];
    snprintf(args, sizeof args,
             "--dry-run --assume-device h200 --model tests/data/tinyllama_config.json --ops "
             "gate_pack --M 3000,16384");
    setenv("TWELL_CACHE_DIR", dir, 1); /* the tool's cache: where the record went */
    int rc = tc_run(args);
    if (rc != 0 || !strstr(tc_out, "gate_pack_sm90:BK=32,STAGES=5,CLUSTER=1") ||
        !strstr(tc_out, "stored winner"))
        fail_msg("exit %d; the stored winner is not listed:\n%s", rc, tc_out);
    /* Only the M = 3000 row (bucket 4096) has it. */
    const char *row16k = strstr(tc_out, "  16384   16384 ");
    assert_non_null(row16k);
    const char *eol = strchr(row16k, '\n');
    assert_true(!strstr(row16k, "stored winner") || strstr(row16k, "stored winner") > eol);
    /* Another device: not its record. */
    snprintf(args, sizeof args,
             "--dry-run --assume-device h100 --model tests/data/tinyllama_config.json --ops "
             "gate_pack --M 3000");
    rc = tc_run(args);
    assert_int_equal(rc, 0);
    assert_null(strstr(tc_out, "stored winner"));
}

/* Explicit tuning: without a GPU a clear message and exit 3; with one, a tiny tune that the
 * second run takes from the cache. */
static void test_tune_cli_tune_needs_device(void **state) {
    (void)state;
    char dir[600], json[700], args[1200];
    snprintf(dir, sizeof dir, "%s/tune", tc_cache_base());
    setenv("TWELL_CACHE_DIR", dir, 1);
    snprintf(json, sizeof json, "%s/tune.json", tc_cache_base());
    remove(json);
    snprintf(args, sizeof args,
             "--K 64 --N 256 --M 33 --ops gate_pack --budget 5 --quiet --json %s", json);
    int rc = tc_run(args);
    if (rc == 3) {
        if (tw_gpu_required())
            fail_msg("TWELL_REQUIRE_GPU=1, but twell tune found no usable device:\n%s", tc_out);
        if (!strstr(tc_out, "tuning needs a CUDA device"))
            fail_msg("no clear message:\n%s", tc_out);
        assert_int_equal(access(json, F_OK), -1); /* nothing written */
        return;
    }
    if (rc != 0)
        fail_msg("twell tune %s exited %d:\n%s", args, rc, tc_out);
    /* sm_90a devices tune the wgmma kernel, others the portable one. */
    if ((!strstr(tc_out, "gate_pack_simt:") && !strstr(tc_out, "gate_pack_sm90:")) ||
        !strstr(tc_out, "tuned"))
        fail_msg("first run did not tune:\n%s", tc_out);
    printf("%s", tc_out);
    if (!strstr(tc_out, "prewarm: a plan of this shape"))
        fail_msg("first run did not prewarm:\n%s", tc_out);
    rc = tc_run(args);
    if (rc != 0 || !strstr(tc_out, "cached"))
        fail_msg("second run did not use the stored winner (exit %d):\n%s", rc, tc_out);
    /* the first run's prewarm left every kernel a plan of this shape loads in the cache */
    if (!strstr(tc_out, "(0 kernels compiled now"))
        fail_msg("second run compiled kernels while prewarming:\n%s", tc_out);
    printf("%s", tc_out);
}

int main(void) {
    const char *base = getenv("TWELL_CACHE_DIR");
    snprintf(tc_base, sizeof tc_base, "%s",
             base && *base ? base : TWELL_TEST_BINARY_DIR "/test-cache/test_tune_cli");
    mkdir(tc_base, 0700);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tune_cli_help_and_errors),
        cmocka_unit_test(test_tune_cli_dry_run_model),
        cmocka_unit_test(test_tune_cli_json_report),
        cmocka_unit_test(test_tune_cli_bad_models),
        cmocka_unit_test(test_tune_cli_sees_stored_winner),
        cmocka_unit_test(test_tune_cli_tune_needs_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
