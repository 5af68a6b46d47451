/* test_autotune.c — the autotuner without a GPU: canonical configs, pruning of the candidate
 * spaces, the tuner's selection with injected cost functions and clock (failures, margin, ties,
 * budget, default mode, interleaving, parallel compile), tuning records across processes, and the
 * strict JSON / config.json reader.
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "candidates.h"
#include "cuda_ffn.h"
#include "gpu_tune.h"
#include "internal.h"
#include "json.h"
#include "tuner.h"
#include "tw_case_dir.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---- */

/* A fresh, empty cache directory for one case, under the test's own cache directory. */
static void tw_case_dir(const char *name, char *out, size_t n) {
    tw_test_case_dir("test_autotune", name, out, n);
}

typedef struct {
    int warns;
    char last[1024];
    char all[8192]; /* every message, one per line, truncated when full */
} tw_logbook;

static void tw_test_log(void *user, twell_log_level level, const char *msg) {
    tw_logbook *b = user;
    if (level >= TWELL_LOG_WARN)
        b->warns++;
    snprintf(b->last, sizeof b->last, "%s", msg);
    size_t used = strlen(b->all);
    snprintf(b->all + used, sizeof b->all - used, "%s\n", msg);
}

static twell_ctx *tw_cpu_ctx(const char *dir, tw_logbook *log) {
    twell_ctx_options o = twell_ctx_options_default();
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    o.cache_dir = dir;
    if (log) {
        o.log = tw_test_log;
        o.log_user = log;
        o.log_level = TWELL_LOG_INFO;
    }
    twell_ctx *ctx = NULL;
    if (twell_ctx_create(&o, &ctx) != TWELL_OK)
        return NULL;
    return ctx;
}

static tw_tune_problem tw_problem(const char *op, uint32_t K, uint32_t N, size_t M) {
    tw_tune_problem p;
    memset(&p, 0, sizeof p);
    snprintf(p.op, sizeof p.op, "%s", op);
    p.shape = twell_shape_default(K, N);
    p.M = M;
    return p;
}

static tw_tune_config tw_cfg2(const char *kernel, const char *a, int64_t va, const char *b,
                              int64_t vb) {
    tw_tune_config c;
    assert_int_equal(tw_tune_config_init(&c, kernel), 0);
    assert_int_equal(tw_tune_config_set(&c, a, va), 0);
    if (b)
        assert_int_equal(tw_tune_config_set(&c, b, vb), 0);
    return c;
}

static void tw_assert_canon(const tw_tune_config *c, const char *want) {
    char buf[TW_TUNE_CANON_MAX];
    size_t n = tw_tune_config_canon(c, buf, sizeof buf);
    assert_string_equal(buf, want);
    assert_int_equal(n, strlen(want));
}

/* ---- configurations ---- */

static void test_autotune_canon_roundtrip(void **state) {
    (void)state;
    tw_tune_config c = tw_cfg2("gate_pack_simt", "BM", 32, "THREADS", 256);
    tw_assert_canon(&c, "gate_pack_simt:BM=32,THREADS=256");
    /* Order is the declared order, not sorted. */
    tw_tune_config r = tw_cfg2("k", "THREADS", 256, "BM", 32);
    tw_assert_canon(&r, "k:THREADS=256,BM=32");
    /* Replacing keeps the position. */
    assert_int_equal(tw_tune_config_set(&r, "THREADS", -7), 0);
    tw_assert_canon(&r, "k:THREADS=-7,BM=32");
    assert_int_equal(tw_tune_config_value(&r, "BM", 0), 32);
    assert_int_equal(tw_tune_config_value(&r, "NOPE", 99), 99);

    tw_tune_config big = tw_cfg2("x_1", "LO", INT64_MIN, "HI", INT64_MAX);
    char buf[TW_TUNE_CANON_MAX];
    tw_tune_config_canon(&big, buf, sizeof buf);
    assert_string_equal(buf, "x_1:LO=-9223372036854775808,HI=9223372036854775807");
    const tw_tune_config *all[] = {&c, &r, &big};
    for (size_t i = 0; i < 3; i++) {
        tw_tune_config back;
        tw_tune_config_canon(all[i], buf, sizeof buf);
        assert_int_equal(tw_tune_config_parse(buf, &back), TWELL_OK);
        assert_true(tw_tune_config_equal(&back, all[i]));
        char again[TW_TUNE_CANON_MAX];
        tw_tune_config_canon(&back, again, sizeof again);
        assert_string_equal(again, buf);
    }
    /* No parameters at all. */
    tw_tune_config e;
    assert_int_equal(tw_tune_config_parse("plain:", &e), TWELL_OK);
    assert_int_equal(e.n, 0);
    tw_assert_canon(&e, "plain:");

    /* Truncation behaves like snprintf. */
    char small[8];
    size_t need = tw_tune_config_canon(&c, small, sizeof small);
    assert_int_equal(need, strlen("gate_pack_simt:BM=32,THREADS=256"));
    assert_string_equal(small, "gate_pa");
}

static void test_autotune_canon_rejects(void **state) {
    (void)state;
    static const char *const bad[] = {
        "",
        "nocolon",
        ":BM=1",
        "k:BM=01",
        "k:BM=+1",
        "k:BM=1,",
        "k:BM=1,BM=2",
        "k:1BM=3",
        "k:BM=",
        "k:=3",
        "k:BM=-0",
        "k:BM=1;",
        "k:BM=1,,B=2",
        "k:BM= 1",
        "k :BM=1",
        "k:B-M=1",
        "k:BM=1x",
        "k:BM=0x10",
        "k:BM=--1",
        "k:BM",
        "k:BM=99999999999999999999",
        "k:BM=9223372036854775808",
        "k:ABCDEFGHIJKLMNOPQ=1", /* name too long */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tw_tune_config c;
        memset(&c, 0x5a, sizeof c);
        if (tw_tune_config_parse(bad[i], &c) != TWELL_ERR_CORRUPT)
            fail_msg("'%s' was accepted", bad[i]);
        assert_int_equal(c.n, 0);
        assert_string_equal(c.kernel, "");
    }
    tw_tune_config ok;
    assert_int_equal(tw_tune_config_parse("k:BM=0,X=-12", &ok), TWELL_OK);
    assert_int_equal(tw_tune_config_value(&ok, "X", 0), -12);
}

static void test_autotune_config_limits(void **state) {
    (void)state;
    tw_tune_config c;
    assert_int_equal(tw_tune_config_init(&c, "bad-name"), -1);
    assert_int_equal(tw_tune_config_init(&c, "0lead"), -1);
    assert_int_equal(tw_tune_config_init(&c, "k"), 0);
    assert_int_equal(tw_tune_config_set(&c, "", 1), -1);
    assert_int_equal(tw_tune_config_set(&c, "A=B", 1), -1);
    assert_int_equal(tw_tune_config_set(&c, "ABCDEFGHIJKLMNOP", 1), -1); /* 16 chars */
    assert_int_equal(tw_tune_config_set(&c, "ABCDEFGHIJKLMNO", 1), 0);   /* 15 chars */
    for (int i = 1; i < TW_TUNE_MAX_PARAMS; i++) {
        char name[8];
        snprintf(name, sizeof name, "P%d", i);
        assert_int_equal(tw_tune_config_set(&c, name, i), 0);
    }
    assert_int_equal(c.n, TW_TUNE_MAX_PARAMS);
    assert_int_equal(tw_tune_config_set(&c, "ONE_MORE", 1), -1);
    assert_int_equal(tw_tune_config_set(&c, "P3", 33), 0); /* replacing still works */
    assert_int_equal(tw_tune_config_value(&c, "P3", 0), 33);

    /* Template parameters: the shape first, then the config. */
    tw_tune_config g = tw_cfg2("gate_pack_simt", "BM", 16, "THREADS", 128);
    twell_shape s = twell_shape_default(512, 768);
    s.dtype = TWELL_DTYPE_FP16;
    tw_param prm[8];
    assert_int_equal(tw_tune_config_params(&g, &s, prm, 6), 0);
    assert_int_equal(tw_tune_config_params(&g, &s, prm, 8), 7);
    assert_string_equal(prm[0].key, "K");
    assert_int_equal(prm[0].ival, 512);
    assert_int_equal(prm[1].ival, 768);
    assert_string_equal(prm[4].key, "dtype");
    assert_string_equal(prm[4].sval, "fp16");
    assert_string_equal(prm[5].key, "BM");
    assert_null(prm[5].sval);
    assert_int_equal(prm[5].ival, 16);
    assert_int_equal(prm[6].ival, 128);
}

static void test_autotune_m_bucket(void **state) {
    (void)state;
    static const size_t in[] = {0, 1, 2, 3, 4, 5, 255, 256, 257, 3000, 4096, 4097, 16384};
    static const size_t want[] = {1, 1, 2, 4, 4, 8, 256, 256, 512, 4096, 4096, 8192, 16384};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        if (tw_tune_m_bucket(in[i]) != want[i])
            fail_msg("bucket(%zu) = %zu, want %zu", in[i], tw_tune_m_bucket(in[i]), want[i]);
    assert_int_equal(tw_tune_m_bucket(SIZE_MAX), (size_t)1 << 62);
}

/* ---- spaces and pruning ---- */

static tw_prune_reason tw_prune_cfg(const tw_tune_space *s, const tw_tune_problem *p,
                                    const tw_tune_device *d, const tw_tune_config *c) {
    char why[160];
    tw_prune_reason r = tw_tune_prune(s, p, d, c, why, sizeof why);
    assert_true(r == TW_PRUNE_KEPT ? why[0] == '\0' : why[0] != '\0');
    return r;
}

static void test_autotune_prune_simt(void **state) {
    (void)state;
    tw_tune_device h200;
    assert_int_equal(tw_tune_device_preset("h200", &h200), 0);
    const tw_tune_space *s = tw_tune_space_by_kernel("gate_pack_simt");
    assert_non_null(s);
    tw_tune_problem p = tw_problem("gate_pack", 2048, 5632, 4096);

    tw_tune_config c = tw_cfg2("gate_pack_simt", "BM", 32, "THREADS", 256);
    assert_int_equal(tw_prune_cfg(s, &p, &h200, &c), TW_PRUNE_KEPT);
    c = tw_cfg2("gate_pack_simt", "BM", 128, "THREADS", 64); /* 512 accumulators per thread */
    assert_int_equal(tw_prune_cfg(s, &p, &h200, &c), TW_PRUNE_SHAPE);
    c = tw_cfg2("gate_pack_simt", "BM", 128, "THREADS", 512); /* over 48 KB static smem */
    assert_int_equal(tw_prune_cfg(s, &p, &h200, &c), TW_PRUNE_SHAPE);
    c = tw_cfg2("gate_pack_simt", "BM", 64, "THREADS", 1024);
    assert_int_equal(tw_prune_cfg(s, &p, &h200, &c), TW_PRUNE_KEPT);

    tw_tune_config *cands = NULL;
    size_t n = 0, di = 0;
    tw_prune_stats st;
    assert_int_equal(tw_tune_space_enumerate(s, &p, &h200, &cands, &n, &di, &st), TWELL_OK);
    assert_int_equal(st.total, 25);
    assert_int_equal(st.kept, n);
    assert_int_equal(st.by[TW_PRUNE_KEPT], n);
    size_t sum = 0;
    for (int r = 0; r < TW_PRUNE_REASONS; r++)
        sum += st.by[r];
    assert_int_equal(sum, st.total);
    assert_true(n > 4 && n < 25);
    assert_true(di < n);
    tw_tune_config def;
    tw_tune_space_default(s, &def);
    assert_true(tw_tune_config_equal(&cands[di], &def));
    /* Generation order: the first axis varies slowest, and every kept config passes. */
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(tw_prune_cfg(s, &p, &h200, &cands[i]), TW_PRUNE_KEPT);
        assert_true(tw_tune_space_accepts(s, &p, &h200, &cands[i]));
        if (i)
            assert_true(cands[i - 1].p[0].value < cands[i].p[0].value ||
                        (cands[i - 1].p[0].value == cands[i].p[0].value &&
                         cands[i - 1].p[1].value < cands[i].p[1].value));
    }
    free(cands);

    /* One row: only the smallest row tile is worth compiling. */
    p.M = 1;
    assert_int_equal(tw_tune_space_enumerate(s, &p, &h200, &cands, &n, &di, &st), TWELL_OK);
    assert_true(n >= 1);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(tw_tune_config_value(&cands[i], "BM", 0), 8);
    assert_int_equal(di, SIZE_MAX); /* BM=32 was pruned */
    free(cands);

    /* K = 48 is a multiple of 16, not 32: the template's KT = 16 path. Still kept. */
    p = tw_problem("gate_pack", 48, 256, 64);
    c = tw_cfg2("gate_pack_simt", "BM", 32, "THREADS", 256);
    assert_int_equal(tw_prune_cfg(s, &p, &h200, &c), TW_PRUNE_KEPT);
}

static void test_autotune_prune_sm90(void **state) {
    (void)state;
    tw_tune_device h200, a100;
    assert_int_equal(tw_tune_device_preset("h200", &h200), 0);
    assert_int_equal(tw_tune_device_preset("a100", &a100), 0);
    assert_int_equal(tw_tune_device_preset("gtx480", &a100), -1);
    assert_int_equal(tw_tune_device_preset("a100", &a100), 0);
    tw_tune_problem p = tw_problem("gate_pack", 2048, 5632, 16384);

    const tw_tune_space *picked = tw_tune_space_pick("gate_pack", &p, &h200);
    assert_non_null(picked);
    assert_string_equal(picked->kernel, "gate_pack_sm90");
    picked = tw_tune_space_pick("gate_pack", &p, &a100);
    assert_non_null(picked);
    assert_string_equal(picked->kernel, "gate_pack_simt");
    tw_tune_problem odd = tw_problem("gate_pack", 48, 512, 64); /* K not a multiple of 64 */
    assert_string_equal(tw_tune_space_pick("gate_pack", &odd, &h200)->kernel, "gate_pack_simt");
    assert_null(tw_tune_space_pick("frobnicate", &p, &h200));
    tw_tune_problem t128 = p, t64 = p;
    t128.shape.T = 128;
    t64.shape.T = 64;
    assert_string_equal(tw_tune_space_pick("gate_pack", &t128, &h200)->kernel, "gate_pack_sm90");
    /* T = 64 too: the space accepts every shape plans run the sm90 kernel on */
    assert_string_equal(tw_tune_space_pick("gate_pack", &t64, &h200)->kernel, "gate_pack_sm90");
    tw_tune_problem ragged = p; /* N a multiple of T, not of the 256-column CTA tile */
    ragged.shape.N = 5632 + 128;
    ragged.shape.T = 128;
    assert_string_equal(tw_tune_space_pick("gate_pack", &ragged, &h200)->kernel, "gate_pack_sm90");
    ragged.shape.T = 256; /* N not a multiple of T: not a valid shape for the kernel */
    assert_string_equal(tw_tune_space_pick("gate_pack", &ragged, &h200)->kernel, "gate_pack_simt");

    const tw_tune_space *s = tw_tune_space_by_kernel("gate_pack_sm90");
    tw_tune_config c;
    tw_tune_space_default(s, &c);
    tw_assert_canon(&c, "gate_pack_sm90:BK=64,STAGES=3,CLUSTER=2");
    assert_int_equal(tw_prune_cfg(s, &p, &h200, &c), TW_PRUNE_KEPT);
    assert_int_equal(tw_tune_config_set(&c, "STAGES", 4), 0); /* 265 KB > 227 KB */
    assert_int_equal(tw_prune_cfg(s, &p, &h200, &c), TW_PRUNE_SMEM);
    assert_int_equal(tw_tune_config_set(&c, "BK", 32), 0);
    assert_int_equal(tw_tune_config_set(&c, "STAGES", 6), 0);
    assert_int_equal(tw_prune_cfg(s, &p, &h200, &c), TW_PRUNE_KEPT);
    assert_int_equal(tw_tune_config_set(&c, "STAGES", 7), 0);
    assert_int_equal(tw_prune_cfg(s, &p, &h200, &c), TW_PRUNE_SMEM);

    tw_tune_config *cands;
    size_t n, di;
    tw_prune_stats st;
    assert_int_equal(tw_tune_space_enumerate(s, &p, &h200, &cands, &n, &di, &st), TWELL_OK);
    /* BK 64: stages 2-3, BK 32: stages 2-6; each with cluster 1 and 2. */
    assert_int_equal(n, 14);
    assert_int_equal(st.total, 28);
    assert_int_equal(st.by[TW_PRUNE_SMEM], 14);
    free(cands);
    /* M = 100 fits in one row tile: no clusters. */
    p.M = 100;
    assert_int_equal(tw_tune_space_enumerate(s, &p, &h200, &cands, &n, &di, &st), TWELL_OK);
    assert_int_equal(n, 7);
    assert_int_equal(st.by[TW_PRUNE_SHAPE], 14);
    assert_int_equal(di, SIZE_MAX);
    free(cands);

    /* Device limits: no clusters before sm_90, fewer registers, smaller blocks. */
    p.M = 16384;
    tw_tune_device weak = h200;
    weak.max_cluster = 1;
    tw_tune_space_default(s, &c);
    assert_int_equal(tw_prune_cfg(s, &p, &weak, &c), TW_PRUNE_CLUSTER);
    weak = h200;
    weak.regs_per_sm = 32768;
    assert_int_equal(tw_prune_cfg(s, &p, &weak, &c), TW_PRUNE_REGS);
    weak = h200;
    weak.max_threads_per_block = 256;
    assert_int_equal(tw_prune_cfg(s, &p, &weak, &c), TW_PRUNE_THREADS);
    assert_string_equal(tw_prune_reason_name(TW_PRUNE_SMEM), "smem");
    assert_string_equal(tw_prune_reason_name(TW_PRUNE_REASONS), "?");

    /* A stored config from elsewhere is rejected when it no longer fits. */
    tw_tune_space_default(s, &c);
    assert_true(tw_tune_space_accepts(s, &p, &h200, &c));
    assert_false(tw_tune_space_accepts(s, &p, &a100, &c));    /* space unsupported there */
    assert_int_equal(tw_tune_config_set(&c, "STAGES", 9), 0); /* not in the axis */
    assert_false(tw_tune_space_accepts(s, &p, &h200, &c));
    tw_tune_config other = tw_cfg2("gate_pack_simt", "BM", 32, "THREADS", 256);
    assert_false(tw_tune_space_accepts(s, &p, &h200, &other));

    /* Every op has a space on both presets. */
    for (const char *const *op = tw_tune_ops(); *op; op++) {
        const tw_tune_space *sp[4];
        assert_true(tw_tune_spaces_for(*op, sp, 4) >= 1);
        tw_tune_problem q = tw_problem(*op, 4096, 11008, 4096);
        assert_non_null(tw_tune_space_pick(*op, &q, &h200));
        assert_non_null(tw_tune_space_pick(*op, &q, &a100));
    }
}

/* The ffn_fused space: CN is the axis, STAGES, the warp shapes, PF and IL single-valued (the
 * defaults), pruned by the template's rules (multiple of T and 64, at most 256 chunks, its 227 KB
 * ceiling) and the device's shared memory. */
static void test_autotune_prune_ffn_fused(void **state) {
    (void)state;
    tw_tune_device h200, a100, l4;
    assert_int_equal(tw_tune_device_preset("h200", &h200), 0);
    assert_int_equal(tw_tune_device_preset("a100", &a100), 0);
    assert_int_equal(tw_tune_device_preset("l4", &l4), 0);
    const tw_tune_space *s = tw_tune_space_by_kernel("ffn_fused");
    assert_non_null(s);
    assert_string_equal(s->op, "ffn_infer");
    tw_tune_config c;
    tw_tune_space_default(s, &c);
    tw_assert_canon(&c, "ffn_fused:CN=512,STAGES=2,GPWA=8,GPWB=4,NWA=16,NWB=16,PF=1,IL=0");
    tw_tune_problem p = tw_problem("ffn_infer", 2048, 5632, 4096); /* T = 256 */
    assert_ptr_equal(tw_tune_space_pick("ffn_infer", &p, &h200), s);
    assert_int_equal(tw_prune_cfg(s, &p, &h200, &c), TW_PRUNE_KEPT);

    /* T = 256: CN 256, 512, 768 at 2 stages (CN smaller than T or not a multiple of it: shape;
     * the rest over the template's 227 KB with 16 KB of list staging: shape, whatever the
     * device). */
    tw_tune_config *cands = NULL;
    size_t n = 0, di = SIZE_MAX;
    tw_prune_stats st;
    assert_int_equal(tw_tune_space_enumerate(s, &p, &h200, &cands, &n, &di, &st), TWELL_OK);
    assert_int_equal(st.total, 9);
    assert_int_equal(n, 3);
    assert_int_equal(st.by[TW_PRUNE_SHAPE], 6);
    tw_assert_canon(&cands[0], "ffn_fused:CN=256,STAGES=2,GPWA=8,GPWB=4,NWA=16,NWB=16,PF=1,IL=0");
    tw_assert_canon(&cands[1], "ffn_fused:CN=512,STAGES=2,GPWA=8,GPWB=4,NWA=16,NWB=16,PF=1,IL=0");
    tw_assert_canon(&cands[2], "ffn_fused:CN=768,STAGES=2,GPWA=8,GPWB=4,NWA=16,NWB=16,PF=1,IL=0");
    assert_int_equal(di, 1);
    free(cands);
    /* T = 128: CN 128..768 fit an H200 (896 and 1024 exceed the template's ceiling); an A100
     * (163 KB) keeps 128..512 (640 and 768 pruned for shared memory), an L4 (99 KB) 128 and 256,
     * without the default CN 512. */
    p.shape.T = 128;
    assert_int_equal(tw_tune_space_enumerate(s, &p, &h200, &cands, &n, &di, &st), TWELL_OK);
    assert_int_equal(n, 6);
    assert_int_equal(cands[n - 1].p[0].value, 768);
    free(cands);
    assert_int_equal(tw_tune_space_enumerate(s, &p, &a100, &cands, &n, &di, &st), TWELL_OK);
    assert_int_equal(n, 4);
    assert_int_equal(st.by[TW_PRUNE_SMEM], 2);
    assert_int_equal(cands[n - 1].p[0].value, 512);
    free(cands);
    assert_int_equal(tw_tune_space_enumerate(s, &p, &l4, &cands, &n, &di, &st), TWELL_OK);
    assert_int_equal(n, 2);
    assert_int_equal(di, SIZE_MAX);
    free(cands);
    /* T = 64 with 320 tiles: CN = 64 would make 320 chunks (> 256). */
    tw_tune_problem wide = tw_problem("ffn_infer", 1024, 20480, 256);
    wide.shape.T = 64;
    tw_tune_space_default(s, &c);
    assert_int_equal(tw_tune_config_set(&c, "CN", 64), 0);
    assert_int_equal(tw_prune_cfg(s, &wide, &h200, &c), TW_PRUNE_SHAPE);
    assert_int_equal(tw_tune_config_set(&c, "CN", 128), 0);
    assert_int_equal(tw_prune_cfg(s, &wide, &h200, &c), TW_PRUNE_KEPT);
    /* The template's ranges: 1..8 groups per warp, an even 4..32 warps, 2..4 stages. */
    assert_int_equal(tw_tune_config_set(&c, "GPWA", 4), 0);
    assert_int_equal(tw_prune_cfg(s, &wide, &h200, &c), TW_PRUNE_KEPT);
    assert_int_equal(tw_tune_config_set(&c, "GPWA", 9), 0);
    assert_int_equal(tw_prune_cfg(s, &wide, &h200, &c), TW_PRUNE_SHAPE);
    assert_int_equal(tw_tune_config_set(&c, "GPWA", 8), 0);
    assert_int_equal(tw_tune_config_set(&c, "NWB", 15), 0);
    assert_int_equal(tw_prune_cfg(s, &wide, &h200, &c), TW_PRUNE_SHAPE);
    assert_int_equal(tw_tune_config_set(&c, "NWB", 16), 0);
    assert_int_equal(tw_tune_config_set(&c, "STAGES", 5), 0);
    assert_int_equal(tw_prune_cfg(s, &wide, &h200, &c), TW_PRUNE_SHAPE);
    /* Not supported: K not a multiple of 64, before sm_80. */
    tw_tune_problem odd = tw_problem("ffn_infer", 48, 512, 64);
    assert_false(s->supports(&odd, &h200));
    tw_tune_device old = a100;
    old.cc_major = 7, old.cc_minor = 5;
    assert_false(s->supports(&p, &old));
    assert_true(s->supports(&p, &a100));
}

/* A tw_cuda as the launcher sees the preset's device. */
static tw_cuda tw_cuda_of(const tw_tune_device *d) {
    tw_cuda c;
    memset(&c, 0, sizeof c);
    c.cc_major = d->cc_major;
    c.cc_minor = d->cc_minor;
    c.sm_count = d->sm_count;
    c.smem_optin = d->smem_per_block;
    c.l2_bytes = d->l2_bytes;
    snprintf(c.arch, sizeof c.arch, "%s", d->arch);
    snprintf(c.name, sizeof c.name, "%s", d->name);
    return c;
}

/* The space, the launcher (runtime/cuda_ffn.c) and the template agree: over the whole unpruned
 * product for several shapes and devices, a config is kept exactly when the launcher accepts it;
 * every kept one renders with the launcher's parameters and the module's twell_ffn_cfg echoes
 * them; the launcher's default is the space's default where that fits. */
static void test_autotune_ffn_space_matches_launcher(void **state) {
    (void)state;
    twell_ctx_options o = twell_ctx_options_default();
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    const tw_tune_space *s = tw_tune_space_by_kernel("ffn_fused");
    static const char *const devs[] = {"h200", "a100", "l4"};
    static const uint32_t shapes[][4] = {
        {2048, 5632, 256, 1}, {1024, 4096, 128, 0}, {576, 1280, 64, 1}, {4096, 20480, 64, 1}};
    size_t rendered = 0, refused = 0;
    for (size_t d = 0; d < 3; d++) {
        tw_tune_device dev;
        assert_int_equal(tw_tune_device_preset(devs[d], &dev), 0);
        tw_cuda cu = tw_cuda_of(&dev);
        for (size_t i = 0; i < 4; i++) {
            tw_tune_problem p = tw_problem("ffn_infer", shapes[i][0], shapes[i][1], 4096);
            p.shape.T = shapes[i][2];
            p.shape.C = 4;
            p.shape.gated = (int)shapes[i][3];
            p.shape.dtype = i % 2 ? TWELL_DTYPE_FP16 : TWELL_DTYPE_BF16;
            assert_true(s->supports(&p, &dev));
            /* the launcher's default: CN 512 or 256 (then every kept config is checked below;
             * where none fits, e.g. T = 256 on an L4 whose overflow kernel needs 128 KB, both
             * refuse them all) */
            tw_ffn_cfg dflt;
            if (tw_ffn_cfg_default(&p.shape, &cu, &dflt) == 0)
                assert_true((dflt.cn == 512 || dflt.cn == 256) && dflt.stages == 2 &&
                            dflt.gpwa == 8 && dflt.gpwb == 4);
            for (size_t a = 0; a < s->axes[0].n * s->axes[1].n; a++) {
                tw_tune_config c;
                tw_tune_space_default(s, &c);
                assert_int_equal(tw_tune_config_set(&c, "CN", s->axes[0].values[a / s->axes[1].n]),
                                 0);
                assert_int_equal(
                    tw_tune_config_set(&c, "STAGES", s->axes[1].values[a % s->axes[1].n]), 0);
                tw_ffn_cfg fc;
                assert_int_equal(tw_ffn_cfg_from_tune(&c, &fc), 0);
                char canon[TW_TUNE_CANON_MAX], why[192] = "";
                tw_tune_config_canon(&c, canon, sizeof canon);
                int kept = tw_tune_prune(s, &p, &dev, &c, NULL, 0) == TW_PRUNE_KEPT;
                int ok = tw_ffn_cfg_check(&fc, &p.shape, &cu, why, sizeof why) == 0;
                if (kept != ok)
                    fail_msg("%s on %s, K=%u N=%u T=%u: space %s, launcher %s (%s)", canon, devs[d],
                             p.shape.K, p.shape.N, p.shape.T, kept ? "keeps" : "prunes",
                             ok ? "accepts" : "refuses", why);
                if (!kept) {
                    refused++;
                    continue;
                }
                tw_param prm[TW_FFN_NPARAMS];
                assert_int_equal(tw_ffn_cfg_params(&fc, &p.shape, &cu, prm), TW_FFN_NPARAMS);
                char *src = NULL;
                size_t len = 0;
                if (tw_render(ctx, "ffn_fused", prm, TW_FFN_NPARAMS, &src, &len) != TWELL_OK)
                    fail_msg("%s does not render: %s", canon, twell_ctx_errmsg(ctx));
                /* the first five words of "twell_ffn_cfg[..] = {...}" in the rendered source */
                const char *q = strstr(src, "twell_ffn_cfg[");
                assert_non_null(q);
                q = strchr(q, '{') + 1;
                for (size_t w = 0; w < 5; w++) {
                    char *end = NULL;
                    long long v = strtoll(q, &end, 10);
                    if (end == q || v != prm[6 + w].ival)
                        fail_msg("%s: twell_ffn_cfg[%zu] is not %s = %lld", canon, w,
                                 prm[6 + w].key, prm[6 + w].ival);
                    q = end + strspn(end, ", \n");
                }
                free(src);
                rendered++;
            }
        }
    }
    printf("# ffn_fused: %zu configs kept, accepted and rendered; %zu refused by both\n", rendered,
           refused);
    assert_true(rendered >= 20 && refused >= 10);
    twell_ctx_destroy(ctx);
}

static const int64_t tw_ax_a[] = {1, 2, 3};
static const int64_t tw_ax_b[] = {10, 20};

static void test_autotune_enumerate_errors(void **state) {
    (void)state;
    tw_tune_device h200;
    tw_tune_device_preset("h200", &h200);
    tw_tune_problem p = tw_problem("gate_pack", 256, 512, 64);
    tw_tune_space s;
    memset(&s, 0, sizeof s);
    s.op = "gate_pack";
    s.kernel = "toy";
    s.naxes = 2;
    s.axes[0] = (tw_tune_axis){"A", tw_ax_a, 3};
    s.axes[1] = (tw_tune_axis){"B", tw_ax_b, 2};
    s.defaults[0] = 2;
    s.defaults[1] = 20;
    tw_tune_config *c = (tw_tune_config *)1;
    size_t n = 99, di = 99;
    assert_int_equal(tw_tune_space_enumerate(&s, &p, &h200, &c, &n, &di, NULL), TWELL_OK);
    assert_int_equal(n, 6);
    assert_int_equal(di, 3);
    static const char *const want[] = {"toy:A=1,B=10", "toy:A=1,B=20", "toy:A=2,B=10",
                                       "toy:A=2,B=20", "toy:A=3,B=10", "toy:A=3,B=20"};
    for (size_t i = 0; i < 6; i++)
        tw_assert_canon(&c[i], want[i]);
    free(c);

    s.defaults[1] = 15; /* not in its axis */
    assert_int_equal(tw_tune_space_enumerate(&s, &p, &h200, &c, &n, &di, NULL),
                     TWELL_ERR_INVALID_ARG);
    assert_null(c);
    assert_int_equal(n, 0);
    s.defaults[1] = 10;
    s.axes[1].n = 0;
    assert_int_equal(tw_tune_space_enumerate(&s, &p, &h200, &c, &n, &di, NULL),
                     TWELL_ERR_INVALID_ARG);
    s.axes[1] = (tw_tune_axis){"A", tw_ax_b, 2}; /* repeated name */
    assert_int_equal(tw_tune_space_enumerate(&s, &p, &h200, &c, &n, &di, NULL),
                     TWELL_ERR_INVALID_ARG);
    s.naxes = 0;
    assert_int_equal(tw_tune_space_enumerate(&s, &p, &h200, &c, &n, &di, NULL),
                     TWELL_ERR_INVALID_ARG);
}

/* ---- the tuner with injected costs ---- */

#define TW_FAKE_MAX 64

typedef struct tw_fake {
    const tw_tune_config *base;
    double ms[TW_FAKE_MAX];
    twell_status compile_fail[TW_FAKE_MAX];
    twell_status verify_fail[TW_FAKE_MAX];
    int measure_fail_at[TW_FAKE_MAX]; /* fail on this call number (1-based); 0 never */
    size_t measures[TW_FAKE_MAX];
    size_t compiles[TW_FAKE_MAX];
    size_t verifies[TW_FAKE_MAX];
    size_t releases[TW_FAKE_MAX];
    size_t total_measures;
    size_t log[4096]; /* candidate of each measure call */
    double clock_s;
    double advance_s; /* the fake clock moves this much per measure call */
    double (*cost)(const tw_tune_config *c);
    /* parallel compile */
    pthread_mutex_t mu;
    int in_compile, max_in_compile;
    int compile_sleep_us;
    /* begin */
    const tw_tune_config *begin_base;
    size_t begin_n, begins;
    twell_status begin_fail;
} tw_fake;

static size_t tw_fake_idx(tw_fake *f, const tw_tune_config *c) {
    size_t i = (size_t)(c - f->base);
    assert_true(i < TW_FAKE_MAX);
    return i;
}

static twell_status tw_fake_compile(void *user, const tw_tune_config *c) {
    tw_fake *f = user;
    size_t i = (size_t)(c - f->base);
    pthread_mutex_lock(&f->mu);
    f->compiles[i]++;
    f->in_compile++;
    if (f->in_compile > f->max_in_compile)
        f->max_in_compile = f->in_compile;
    pthread_mutex_unlock(&f->mu);
    if (f->compile_sleep_us)
        usleep((useconds_t)f->compile_sleep_us);
    pthread_mutex_lock(&f->mu);
    f->in_compile--;
    pthread_mutex_unlock(&f->mu);
    return f->compile_fail[i];
}

static twell_status tw_fake_begin(void *user, const tw_tune_config *c, size_t n) {
    tw_fake *f = user;
    f->begins++;
    f->begin_base = c;
    f->begin_n = n;
    return f->begin_fail;
}

static twell_status tw_fake_verify(void *user, const tw_tune_config *c) {
    tw_fake *f = user;
    size_t i = tw_fake_idx(f, c);
    f->verifies[i]++;
    return f->verify_fail[i];
}

static twell_status tw_fake_measure(void *user, const tw_tune_config *c, double *ms) {
    tw_fake *f = user;
    size_t i = tw_fake_idx(f, c);
    f->measures[i]++;
    if (f->total_measures < sizeof f->log / sizeof f->log[0])
        f->log[f->total_measures] = i;
    f->total_measures++;
    f->clock_s += f->advance_s;
    if (f->measure_fail_at[i] && (int)f->measures[i] >= f->measure_fail_at[i])
        return TWELL_ERR_CUDA;
    /* A little deterministic jitter around the true time; the median sees through it. */
    double jitter = (f->measures[i] % 3 == 0) ? 1.5 : 1.0;
    *ms = (f->cost ? f->cost(c) : f->ms[i]) * (f->measures[i] % 5 == 0 ? jitter : 1.0);
    return TWELL_OK;
}

static void tw_fake_release(void *user, const tw_tune_config *c) {
    tw_fake *f = user;
    f->releases[tw_fake_idx(f, c)]++;
}

static double tw_fake_clock(void *user) { return ((tw_fake *)user)->clock_s; }

static void tw_fake_init(tw_fake *f, const tw_tune_config *base) {
    memset(f, 0, sizeof *f);
    f->base = base;
    pthread_mutex_init(&f->mu, NULL);
}

static tw_tune_callbacks tw_fake_cb(tw_fake *f) {
    tw_tune_callbacks cb = {
        f, tw_fake_begin, tw_fake_compile, tw_fake_verify, tw_fake_measure, tw_fake_release};
    return cb;
}

static tw_tune_options tw_fake_opts(tw_fake *f) {
    tw_tune_options o = tw_tune_options_default();
    o.clock = tw_fake_clock;
    o.clock_user = f;
    o.threads = 2;
    return o;
}

/* n toy candidates "toy:I=<i>". */
static void tw_toy(tw_tune_config *c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(tw_tune_config_init(&c[i], "toy"), 0);
        assert_int_equal(tw_tune_config_set(&c[i], "I", (int64_t)i), 0);
    }
}

static void test_autotune_selects_fastest(void **state) {
    (void)state;
    tw_tune_config c[5];
    tw_toy(c, 5);
    tw_fake f;
    tw_fake_init(&f, c);
    double ms[] = {5.0, 3.0, 4.0, 1.5, 2.0};
    memcpy(f.ms, ms, sizeof ms);
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 5, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.best, 3);
    assert_true(tw_tune_config_equal(&r.config, &c[3]));
    if (fabs(r.ms - 1.5) > 1e-12 || fabs(r.default_ms - 5.0) > 1e-12)
        fail_msg("ms %g (want 1.5), default_ms %g (want 5)", r.ms, r.default_ms);
    assert_int_equal(r.n_measured, 5);
    assert_int_equal(r.n_failed, 0);
    assert_int_equal(r.budget_cut, 0);
    /* 1 warm-up + 10 timed runs each; compile, verify and release once each. */
    assert_int_equal(r.measure_calls, 55);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(f.measures[i], 11);
        assert_int_equal(f.compiles[i], 1);
        assert_int_equal(f.verifies[i], 1);
        assert_int_equal(f.releases[i], 1);
        assert_int_equal(r.outcomes[i].state, TW_CAND_MEASURED);
        assert_true(r.outcomes[i].min_ms <= r.outcomes[i].ms);
        assert_true(r.outcomes[i].ms <= r.outcomes[i].max_ms);
    }
    assert_int_equal(f.begins, 1);
    assert_ptr_equal(f.begin_base, c);
    assert_int_equal(f.begin_n, 5);
    tw_tune_result_free(&r);
    assert_null(r.outcomes);

    /* Interleaved: within every round each candidate runs once, and the first one rotates. */
    for (size_t round = 0; round < 11; round++) {
        int seen[5] = {0};
        for (size_t j = 0; j < 5; j++)
            seen[f.log[round * 5 + j]]++;
        for (size_t i = 0; i < 5; i++)
            assert_int_equal(seen[i], 1);
    }
    assert_true(f.log[0] != f.log[5]);
    for (size_t k = 1; k < 55; k++)
        assert_true(f.log[k] != f.log[k - 1] || k % 5 == 0);
}

static void test_autotune_failures_score_infinity(void **state) {
    (void)state;
    tw_tune_config c[6];
    tw_toy(c, 6);
    tw_fake f;
    tw_fake_init(&f, c);
    double ms[] = {4.0, 0.5, 0.6, 0.7, 2.0, 3.0};
    memcpy(f.ms, ms, sizeof ms);
    f.compile_fail[1] = TWELL_ERR_NVRTC;  /* fastest: does not compile */
    f.verify_fail[2] = TWELL_ERR_CORRUPT; /* next: wrong answers */
    f.measure_fail_at[3] = 4;             /* next: launch fails on its 4th run */
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 6, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.best, 4);
    assert_int_equal(r.n_measured, 3);
    assert_int_equal(r.n_failed, 3);
    assert_int_equal(r.outcomes[1].state, TW_CAND_FAIL_COMPILE);
    assert_int_equal(r.outcomes[1].status, TWELL_ERR_NVRTC);
    assert_true(isinf(r.outcomes[1].ms));
    assert_int_equal(r.outcomes[2].state, TW_CAND_FAIL_VERIFY);
    assert_int_equal(r.outcomes[2].status, TWELL_ERR_CORRUPT);
    assert_int_equal(r.outcomes[3].state, TW_CAND_FAIL_MEASURE);
    assert_int_equal(r.outcomes[3].status, TWELL_ERR_CUDA);
    assert_true(isinf(r.outcomes[3].ms));
    /* A failed candidate is never called again. */
    assert_int_equal(f.verifies[1], 0);
    assert_int_equal(f.measures[1], 0);
    assert_int_equal(f.measures[2], 0);
    assert_int_equal(f.measures[3], 4);
    assert_int_equal(f.releases[1], 1);
    assert_string_equal(tw_cand_state_name(TW_CAND_FAIL_VERIFY), "verification failed");
    tw_tune_result_free(&r);

    /* The default failing leaves default_ms infinite, the winner still found. */
    tw_fake_init(&f, c);
    memcpy(f.ms, ms, sizeof ms);
    f.compile_fail[0] = TWELL_ERR_NVRTC;
    assert_int_equal(tw_tune_run(NULL, c, 6, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_true(isinf(r.default_ms));
    assert_int_equal(r.best, 1);
    tw_tune_result_free(&r);
}

static void test_autotune_all_fail(void **state) {
    (void)state;
    twell_ctx *ctx = tw_cpu_ctx(NULL, NULL);
    assert_non_null(ctx);
    tw_tune_config c[3];
    tw_toy(c, 3);
    tw_fake f;
    tw_fake_init(&f, c);
    f.compile_fail[0] = TWELL_ERR_NOT_FOUND; /* e.g. NVRTC missing */
    f.compile_fail[1] = TWELL_ERR_NOT_FOUND;
    f.verify_fail[2] = TWELL_ERR_CORRUPT;
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    tw_tune_result r;
    assert_int_equal(tw_tune_run(ctx, c, 3, 0, SIZE_MAX, &cb, &o, &r), TWELL_ERR_NOT_FOUND);
    const char *msg = twell_ctx_errmsg(ctx);
    if (!strstr(msg, "all 3 candidates failed") || !strstr(msg, "toy:I=0") ||
        !strstr(msg, "compile failed"))
        fail_msg("message: %s", msg);
    assert_non_null(r.outcomes); /* outcomes kept for the report */
    assert_int_equal(r.n_failed, 3);
    assert_int_equal(r.outcomes[2].state, TW_CAND_FAIL_VERIFY);
    tw_tune_result_free(&r);

    /* A failing begin ends the run before any other callback. */
    tw_fake_init(&f, c);
    f.begin_fail = TWELL_ERR_NO_DEVICE;
    assert_int_equal(tw_tune_run(ctx, c, 3, 0, SIZE_MAX, &cb, &o, &r), TWELL_ERR_NO_DEVICE);
    assert_null(r.outcomes);
    assert_int_equal(f.begins, 1);
    assert_int_equal(f.compiles[0] + f.verifies[0] + f.total_measures, 0);

    /* Argument errors. */
    assert_int_equal(tw_tune_run(ctx, c, 0, SIZE_MAX, SIZE_MAX, &cb, &o, &r),
                     TWELL_ERR_INVALID_ARG);
    assert_int_equal(tw_tune_run(ctx, c, 3, 3, SIZE_MAX, &cb, &o, &r), TWELL_ERR_INVALID_ARG);
    assert_int_equal(tw_tune_run(ctx, c, 3, 0, 7, &cb, &o, &r), TWELL_ERR_INVALID_ARG);
    tw_tune_callbacks none = {NULL, NULL, NULL, NULL, NULL, NULL};
    assert_int_equal(tw_tune_run(ctx, c, 3, 0, SIZE_MAX, &none, &o, &r), TWELL_ERR_INVALID_ARG);
    assert_null(r.outcomes);
    twell_ctx_destroy(ctx);
}

/* The incumbent at 1.0 ms against a challenger that is `faster` percent faster. */
static size_t tw_margin_case(double faster_pct, int *kept) {
    tw_tune_config c[3];
    tw_toy(c, 3);
    tw_fake f;
    tw_fake_init(&f, c);
    f.ms[0] = 2.0;                              /* default */
    f.ms[1] = 1.0;                              /* incumbent */
    f.ms[2] = 1.0 / (1.0 + faster_pct / 100.0); /* challenger */
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 3, 0, 1, &cb, &o, &r), TWELL_OK);
    *kept = r.kept_incumbent;
    size_t best = r.best;
    tw_tune_result_free(&r);
    return best;
}

static void test_autotune_margin(void **state) {
    (void)state;
    int kept;
    assert_int_equal(tw_margin_case(2.0, &kept), 1); /* 2% faster: the stored winner stays */
    assert_int_equal(kept, 1);
    assert_int_equal(tw_margin_case(4.0, &kept), 2); /* 4% faster: replaced */
    assert_int_equal(kept, 0);
    assert_int_equal(tw_margin_case(3.0, &kept), 2);  /* exactly 3%: replaced (≥) */
    assert_int_equal(tw_margin_case(-5.0, &kept), 1); /* slower: stays, not thanks to margin */
    assert_int_equal(kept, 0);

    /* Without an incumbent the 2% faster one simply wins. */
    tw_tune_config c[2];
    tw_toy(c, 2);
    tw_fake f;
    tw_fake_init(&f, c);
    f.ms[0] = 1.0;
    f.ms[1] = 1.0 / 1.02;
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 2, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.best, 1);
    tw_tune_result_free(&r);
}

static void test_autotune_ties_deterministic(void **state) {
    (void)state;
    /* Three configs with the same time in every order: the smallest canonical string wins
     * ("k:BM=128" < "k:BM=32" < "k:BM=64" bytewise). */
    const int64_t vals[3] = {64, 128, 32};
    const size_t perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (size_t pi = 0; pi < 6; pi++) {
        tw_tune_config c[4];
        c[0] = tw_cfg2("k", "BM", 8, NULL, 0); /* a slower default */
        for (size_t j = 0; j < 3; j++)
            c[1 + j] = tw_cfg2("k", "BM", vals[perms[pi][j]], NULL, 0);
        tw_fake f;
        tw_fake_init(&f, c);
        f.ms[0] = 9.0;
        f.ms[1] = f.ms[2] = f.ms[3] = 0.25;
        tw_tune_callbacks cb = tw_fake_cb(&f);
        tw_tune_options o = tw_fake_opts(&f);
        tw_tune_result r;
        assert_int_equal(tw_tune_run(NULL, c, 4, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
        assert_int_equal(tw_tune_config_value(&r.config, "BM", 0), 128);
        tw_tune_result_free(&r);
    }
}

static void test_autotune_budget(void **state) {
    (void)state;
    tw_tune_config c[12];
    tw_toy(c, 12);
    tw_fake f;
    tw_fake_init(&f, c);
    for (size_t i = 0; i < 12; i++)
        f.ms[i] = 10.0 - (double)i * 0.5; /* later is faster: the budget hides the best */
    f.advance_s = 0.01;                   /* each run "takes" 10 ms of tuning time */
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    o.batch = 4;
    o.budget_s = 0.5; /* a batch costs 4 × 11 runs = 0.44 s: two batches fit */
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 12, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.budget_cut, 1);
    assert_int_equal(r.n_measured, 8);
    assert_int_equal(r.n_skipped, 4);
    assert_int_equal(r.best, 7); /* best of those timed */
    for (size_t i = 8; i < 12; i++) {
        assert_int_equal(r.outcomes[i].state, TW_CAND_SKIPPED);
        assert_int_equal(f.measures[i], 0);
        assert_int_equal(f.compiles[i], 0);
        assert_int_equal(f.releases[i], 0);
    }
    if (fabs(r.elapsed_s - 0.88) > 1e-9)
        fail_msg("elapsed %g s by the fake clock, want 0.88", r.elapsed_s);
    tw_tune_result_free(&r);

    /* No budget: everything is timed and the true best found. */
    tw_fake_init(&f, c);
    for (size_t i = 0; i < 12; i++)
        f.ms[i] = 10.0 - (double)i * 0.5;
    f.advance_s = 0.01;
    o.budget_s = 0.0;
    assert_int_equal(tw_tune_run(NULL, c, 12, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.budget_cut, 0);
    assert_int_equal(r.best, 11);
    tw_tune_result_free(&r);

    /* A budget already spent by a first batch that all failed: the search goes on until
     * something is timed. */
    tw_fake_init(&f, c);
    for (size_t i = 0; i < 12; i++) {
        f.ms[i] = 1.0;
        if (i < 4)
            f.measure_fail_at[i] = 1;
    }
    f.advance_s = 1.0;
    o.budget_s = 0.5;
    assert_int_equal(tw_tune_run(NULL, c, 12, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.n_measured, 4);
    assert_int_equal(r.n_skipped, 4);
    assert_int_equal(r.best, 4);
    tw_tune_result_free(&r);
}

static void test_autotune_default_mode(void **state) {
    (void)state;
    tw_tune_config c[4];
    tw_toy(c, 4);
    tw_fake f;
    tw_fake_init(&f, c);
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    o.mode = TW_TUNE_DEFAULT_ONLY;
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 4, 2, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(r.best, 2);
    assert_int_equal(r.default_only, 1);
    assert_true(isnan(r.ms));
    assert_int_equal(r.measure_calls, 0);
    assert_int_equal(f.total_measures + f.compiles[2] + f.verifies[2], 0);
    tw_tune_result_free(&r);
    /* No default: the first candidate; no callbacks needed at all. */
    assert_int_equal(tw_tune_run(NULL, c, 4, SIZE_MAX, SIZE_MAX, NULL, &o, &r), TWELL_OK);
    assert_int_equal(r.best, 0);
    tw_tune_result_free(&r);
}

static void test_autotune_parallel_compile(void **state) {
    (void)state;
    tw_tune_config c[16];
    tw_toy(c, 16);
    tw_fake f;
    tw_fake_init(&f, c);
    for (size_t i = 0; i < 16; i++)
        f.ms[i] = 1.0 + (double)((i * 7) % 16);
    f.compile_sleep_us = 20000;
    tw_tune_callbacks cb = tw_fake_cb(&f);
    tw_tune_options o = tw_fake_opts(&f);
    o.threads = 4;
    o.batch = 8;
    tw_tune_result r;
    assert_int_equal(tw_tune_run(NULL, c, 16, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    for (size_t i = 0; i < 16; i++)
        assert_int_equal(f.compiles[i], 1);
    if (f.max_in_compile < 2 || f.max_in_compile > 4)
        fail_msg("%d compiles ran at once, want 2..4", f.max_in_compile);
    assert_int_equal(r.best, 0); /* (0 * 7) % 16 = 0 */
    tw_tune_result_free(&r);

    /* One thread: never concurrent. */
    tw_fake_init(&f, c);
    for (size_t i = 0; i < 16; i++)
        f.ms[i] = 1.0;
    f.compile_sleep_us = 1000;
    o.threads = 1;
    assert_int_equal(tw_tune_run(NULL, c, 16, 0, SIZE_MAX, &cb, &o, &r), TWELL_OK);
    assert_int_equal(f.max_in_compile, 1);
    tw_tune_result_free(&r);
}

/* ---- records and persistence ---- */

static void tw_h200_problem(tw_tune_device *d, tw_tune_problem *p) {
    assert_int_equal(tw_tune_device_preset("h200", d), 0);
    d->driver_version = 12080;
    *p = tw_problem("gate_pack", 2048, 5632, 4096);
}

static void test_autotune_record_roundtrip(void **state) {
    (void)state;
    tw_tune_device d;
    tw_tune_problem p;
    tw_h200_problem(&d, &p);
    tw_tune_record r = {tw_cfg2("gate_pack_simt", "BM", 64, "THREADS", 512), 0.123456789012345, 0.2,
                        1732140000};
    char *buf;
    size_t len;
    assert_int_equal(tw_tune_record_encode(&r, &p, &d, &buf, &len), TWELL_OK);
    assert_non_null(strstr(buf, "config gate_pack_simt:BM=64,THREADS=512\n"));
    assert_non_null(strstr(buf, "device NVIDIA H200 sm_90a"));
    tw_tune_record back;
    assert_int_equal(tw_tune_record_decode(buf, len, &back), TWELL_OK);
    assert_true(tw_tune_config_equal(&back.config, &r.config));
    assert_true(back.ms == r.ms);
    assert_true(back.default_ms == r.default_ms);
    assert_int_equal(back.time, r.time);

    /* Every truncation and every single-byte change decodes cleanly or is rejected. */
    tw_tune_record junk;
    for (size_t cut = 0; cut < len; cut++)
        assert_int_equal(tw_tune_record_decode(buf, cut, &junk), TWELL_ERR_CORRUPT);
    char *m = malloc(len);
    size_t accepted = 0;
    for (size_t i = 0; i < len; i++) {
        static const char subs[] = {'\0', '\n', ' ', '9', 'x', '=', ',', '-', (char)0xff};
        for (size_t s = 0; s < sizeof subs; s++) {
            memcpy(m, buf, len);
            if (m[i] == subs[s])
                continue;
            m[i] = subs[s];
            twell_status st = tw_tune_record_decode(m, len, &junk);
            assert_true(st == TWELL_OK || st == TWELL_ERR_CORRUPT);
            accepted += st == TWELL_OK;
        }
    }
    free(m);
    assert_true(accepted > 0); /* digits in the echo lines are legal edits */
    free(buf);

    /* Infinite default (it failed) round-trips; an infinite winner does not exist. */
    r.default_ms = INFINITY;
    assert_int_equal(tw_tune_record_encode(&r, &p, &d, &buf, &len), TWELL_OK);
    assert_int_equal(tw_tune_record_decode(buf, len, &back), TWELL_OK);
    assert_true(isinf(back.default_ms));
    free(buf);

    static const char *const bad[] = {
#define TW_ECHO "problem x\ndevice y\nlibrary z\n"
        "twell-tune-record 1\nconfig k:A=1\nms 1\ndefault_ms 2\n" TW_ECHO,          /* no time */
        "twell-tune-record 1\nconfig k:A=1\nms 1\ndefault_ms 2\n" TW_ECHO "time 5", /* no \n */
        "twell-tune-record 2\nconfig k:A=1\nms 1\ndefault_ms 2\ntime 5\n" TW_ECHO,  /* version */
        "twell-tune-record 1\nconfig k:A=1\nms inf\ndefault_ms 2\ntime 5\n" TW_ECHO,
        "twell-tune-record 1\nconfig k:A=1\nms 0x1p3\ndefault_ms 2\ntime 5\n" TW_ECHO,
        "twell-tune-record 1\nconfig k:A=1\nms -1\ndefault_ms 2\ntime 5\n" TW_ECHO,
        "twell-tune-record 1\nconfig k:A=1\nms 1\ndefault_ms infinity\ntime 5\n" TW_ECHO,
        "twell-tune-record 1\nconfig k:A=1\nms 1\nms 1\ndefault_ms 2\ntime 5\n" TW_ECHO,
        "twell-tune-record 1\nconfig k:A=1\nms 1\ndefault_ms 2\ntime 5\n" TW_ECHO "extra 1\n",
        "twell-tune-record 1\nconfig k:A=1\nms 1\ndefault_ms 2\ntime 5\n" TW_ECHO "library z\n",
        "twell-tune-record 1\nconfig k:A=01\nms 1\ndefault_ms 2\ntime 5\n" TW_ECHO,
        "twell-tune-record 1\nconfig k:A=1\nms 1\ndefault_ms 2\ntime -5\n" TW_ECHO,
        "twell-tune-record 1\nconfigk:A=1\nms 1\ndefault_ms 2\ntime 5\n" TW_ECHO,
        "twell-tune-record 1\nconfig k:A=1\nms 1\ndefault_ms 2\ntime 5\nproblem x\ndevice y\n",
        "twell-tune-record 1\nconfig k:A=1\n\nms 1\ndefault_ms 2\ntime 5\n" TW_ECHO, /* blank */
        "twell-tune-record 1\r\nconfig k:A=1\nms 1\ndefault_ms 2\ntime 5\n" TW_ECHO,
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (tw_tune_record_decode(bad[i], strlen(bad[i]), &junk) != TWELL_ERR_CORRUPT)
            fail_msg("accepted record #%zu:\n%s", i, bad[i]);
    const char *good =
        "twell-tune-record 1\nconfig k:A=1\nms 1e-3\ndefault_ms nan\ntime 5\n" TW_ECHO;
    assert_int_equal(tw_tune_record_decode(good, strlen(good), &junk), TWELL_OK);
    assert_true(isnan(junk.default_ms));
}

static void test_autotune_key_fields(void **state) {
    (void)state;
    tw_tune_device d;
    tw_tune_problem p;
    tw_h200_problem(&d, &p);
    tw_key base, k;
    tw_tune_key(&p, &d, &base);
    /* Same bucket, same key. */
    tw_tune_problem q = p;
    q.M = 3000;
    tw_tune_key(&q, &d, &k);
    assert_memory_equal(base.b, k.b, 32);
    /* Every field of the key changes it. */
    for (int f = 0; f < 12; f++) {
        tw_tune_problem pp = p;
        tw_tune_device dd = d;
        switch (f) {
        case 0:
            snprintf(pp.op, sizeof pp.op, "ffn_infer");
            break;
        case 1:
            pp.shape.K = 4096;
            break;
        case 2:
            pp.shape.N = 11008;
            break;
        case 3:
            pp.shape.T = 128;
            break;
        case 4:
            pp.shape.C = 4;
            break;
        case 5:
            pp.shape.dtype = TWELL_DTYPE_FP16;
            break;
        case 6:
            pp.shape.gated = 0;
            break;
        case 7:
            pp.M = 4097;
            break;
        case 8:
            snprintf(dd.name, sizeof dd.name, "NVIDIA H100");
            break;
        case 9:
            dd.sm_count = 114;
            break;
        case 10:
            dd.driver_version = 12090;
            break;
        case 11:
            snprintf(dd.arch, sizeof dd.arch, "sm_90");
            break;
        }
        tw_tune_key(&pp, &dd, &k);
        if (!memcmp(base.b, k.b, 32))
            fail_msg("field %d does not change the key", f);
    }
}

/* A cost that depends only on the config, so separate processes agree. */
static double tw_simt_cost(const tw_tune_config *c) {
    double bm = (double)tw_tune_config_value(c, "BM", 1);
    double th = (double)tw_tune_config_value(c, "THREADS", 1);
    return 1.0 + fabs(bm - 16.0) / 16.0 + fabs(th - 512.0) / 512.0;
}

/* The measure used across processes: cost from the config, a count in a pipe-free global. */
static size_t tw_xp_calls;
static twell_status tw_xp_measure(void *user, const tw_tune_config *c, double *ms) {
    (void)user;
    tw_xp_calls++;
    *ms = tw_simt_cost(c);
    return TWELL_OK;
}

static void test_autotune_persist_fork(void **state) {
    (void)state;
    char dir[512];
    tw_case_dir("fork", dir, sizeof dir);
    tw_tune_device d;
    tw_tune_problem p;
    tw_h200_problem(&d, &p);
    const tw_tune_space *s = tw_tune_space_by_kernel("gate_pack_simt");
    tw_tune_callbacks cb = {NULL, NULL, NULL, NULL, tw_xp_measure, NULL};
    tw_tune_options o = tw_tune_options_default();

    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        twell_ctx *ctx = tw_cpu_ctx(dir, NULL);
        if (!ctx)
            _exit(10);
        tw_tune_choice ch;
        int rc = 0;
        if (tw_tune_select(ctx, &p, &d, s, &cb, &o, 0, &ch) != TWELL_OK)
            rc = 11;
        else if (ch.source != TW_TUNE_TUNED || tw_xp_calls == 0 || ch.n_measured == 0)
            rc = 12;
        else if (tw_tune_config_value(&ch.config, "BM", 0) != 16 ||
                 tw_tune_config_value(&ch.config, "THREADS", 0) != 512)
            rc = 13;
        twell_ctx_destroy(ctx);
        _exit(rc);
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    if (WEXITSTATUS(ws) != 0)
        fail_msg("child exited %d", WEXITSTATUS(ws));

    /* Parent: a fresh process state finds the record and measures nothing. */
    tw_xp_calls = 0;
    twell_ctx *ctx = tw_cpu_ctx(dir, NULL);
    assert_non_null(ctx);
    tw_tune_choice ch;
    assert_int_equal(tw_tune_select(ctx, &p, &d, s, &cb, &o, 0, &ch), TWELL_OK);
    assert_int_equal(ch.source, TW_TUNE_FROM_CACHE);
    assert_int_equal(tw_xp_calls, 0);
    tw_assert_canon(&ch.config, "gate_pack_simt:BM=16,THREADS=512");
    if (fabs(ch.ms - 1.0) > 1e-12 || !(ch.default_ms > ch.ms))
        fail_msg("stored ms %g (want 1), default %g", ch.ms, ch.default_ms);
    /* Same bucket (M = 3000 → 4096): the same record. Default-only mode also uses it. */
    tw_tune_problem q = p;
    q.M = 3000;
    o.mode = TW_TUNE_DEFAULT_ONLY;
    assert_int_equal(tw_tune_select(ctx, &q, &d, s, NULL, &o, 0, &ch), TWELL_OK);
    assert_int_equal(ch.source, TW_TUNE_FROM_CACHE);
    /* Another bucket in default-only mode: the default, nothing measured or stored. */
    q.M = 100;
    assert_int_equal(tw_tune_select(ctx, &q, &d, s, NULL, &o, 0, &ch), TWELL_OK);
    assert_int_equal(ch.source, TW_TUNE_DEFAULT);
    tw_assert_canon(&ch.config, "gate_pack_simt:BM=32,THREADS=256");
    tw_tune_record rec;
    assert_int_equal(tw_tune_store_load(ctx, &q, &d, &rec), TWELL_ERR_NOT_FOUND);
    /* Another device: its own tuning. */
    tw_tune_device other = d;
    other.driver_version = 12090;
    o.mode = TW_TUNE_MEASURE;
    assert_int_equal(tw_tune_select(ctx, &p, &other, s, &cb, &o, 0, &ch), TWELL_OK);
    assert_int_equal(ch.source, TW_TUNE_TUNED);
    assert_true(tw_xp_calls > 0);
    twell_ctx_destroy(ctx);
}

/* Costs the retune test switches between. */
static double tw_rt_scale_32_256 = 1.0;
static size_t tw_rt_calls;
static twell_status tw_rt_measure(void *user, const tw_tune_config *c, double *ms) {
    (void)user;
    tw_rt_calls++;
    int is_def =
        tw_tune_config_value(c, "BM", 0) == 32 && tw_tune_config_value(c, "THREADS", 0) == 256;
    int is_inc =
        tw_tune_config_value(c, "BM", 0) == 16 && tw_tune_config_value(c, "THREADS", 0) == 512;
    *ms = is_inc ? 1.0 : is_def ? tw_rt_scale_32_256 : 5.0;
    return TWELL_OK;
}

static void test_autotune_retune_and_stale(void **state) {
    (void)state;
    char dir[512];
    tw_case_dir("retune", dir, sizeof dir);
    tw_tune_device d;
    tw_tune_problem p;
    tw_h200_problem(&d, &p);
    const tw_tune_space *s = tw_tune_space_by_kernel("gate_pack_simt");
    tw_logbook log;
    memset(&log, 0, sizeof log);
    twell_ctx *ctx = tw_cpu_ctx(dir, &log);
    assert_non_null(ctx);
    tw_tune_callbacks cb = {NULL, NULL, NULL, NULL, tw_rt_measure, NULL};
    tw_tune_options o = tw_tune_options_default();
    tw_tune_choice ch;

    tw_rt_scale_32_256 = 2.0;
    assert_int_equal(tw_tune_select(ctx, &p, &d, s, &cb, &o, 0, &ch), TWELL_OK);
    tw_assert_canon(&ch.config, "gate_pack_simt:BM=16,THREADS=512");
    assert_true(ch.pruning.kept > 0);

    /* Re-tune: the default is now 2% faster than the stored winner: it stays. */
    tw_rt_scale_32_256 = 1.0 / 1.02;
    assert_int_equal(tw_tune_select(ctx, &p, &d, s, &cb, &o, 1, &ch), TWELL_OK);
    assert_int_equal(ch.source, TW_TUNE_TUNED);
    assert_int_equal(ch.kept_incumbent, 1);
    tw_assert_canon(&ch.config, "gate_pack_simt:BM=16,THREADS=512");
    /* 4% faster: replaced, and the replacement is what the next process gets. */
    tw_rt_scale_32_256 = 1.0 / 1.04;
    assert_int_equal(tw_tune_select(ctx, &p, &d, s, &cb, &o, 1, &ch), TWELL_OK);
    assert_int_equal(ch.kept_incumbent, 0);
    tw_assert_canon(&ch.config, "gate_pack_simt:BM=32,THREADS=256");
    tw_rt_calls = 0;
    assert_int_equal(tw_tune_select(ctx, &p, &d, s, &cb, &o, 0, &ch), TWELL_OK);
    assert_int_equal(ch.source, TW_TUNE_FROM_CACHE);
    tw_assert_canon(&ch.config, "gate_pack_simt:BM=32,THREADS=256");
    assert_int_equal(tw_rt_calls, 0);

    /* A stored config the space no longer allows is ignored: tuning happens again. */
    tw_tune_record stale = {tw_cfg2("gate_pack_simt", "BM", 48, "THREADS", 256), 0.5, 1.0, 1};
    assert_int_equal(tw_tune_store_save(ctx, &p, &d, &stale), TWELL_OK);
    tw_tune_record back;
    assert_int_equal(tw_tune_store_load(ctx, &p, &d, &back), TWELL_OK);
    assert_int_equal(tw_tune_config_value(&back.config, "BM", 0), 48);
    tw_rt_calls = 0;
    assert_int_equal(tw_tune_select(ctx, &p, &d, s, &cb, &o, 0, &ch), TWELL_OK);
    assert_int_equal(ch.source, TW_TUNE_TUNED);
    assert_true(tw_rt_calls > 0);
    assert_non_null(
        strstr(log.all, "stored config gate_pack_simt:BM=48,THREADS=256 no longer fits"));

    /* A corrupt record under the key: a WARN, then tuning as if there were none. */
    tw_cache *c = NULL;
    assert_int_equal(tw_ctx_cache(ctx, &c), TWELL_OK);
    tw_key key;
    tw_tune_key(&p, &d, &key);
    assert_int_equal(tw_cache_put(c, TW_CACHE_TUNING, &key, "garbage\n", 8), TWELL_OK);
    int warns = log.warns;
    assert_int_equal(tw_tune_store_load(ctx, &p, &d, &back), TWELL_ERR_NOT_FOUND);
    assert_int_equal(log.warns, warns + 1);
    assert_non_null(strstr(log.last, "malformed"));
    tw_rt_calls = 0;
    assert_int_equal(tw_tune_select(ctx, &p, &d, s, &cb, &o, 0, &ch), TWELL_OK);
    assert_int_equal(ch.source, TW_TUNE_TUNED);
    assert_true(tw_rt_calls > 0);

    /* Unsupported: the sm90 space on an A100, and a space that prunes everything. */
    tw_tune_device a100;
    tw_tune_device_preset("a100", &a100);
    assert_int_equal(
        tw_tune_select(ctx, &p, &a100, tw_tune_space_by_kernel("gate_pack_sm90"), &cb, &o, 0, &ch),
        TWELL_ERR_UNSUPPORTED);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "gate_pack_sm90"));
    tw_tune_device tiny = d;
    tiny.max_threads_per_block = 32;
    assert_int_equal(tw_tune_select(ctx, &p, &tiny, s, &cb, &o, 0, &ch), TWELL_ERR_UNSUPPORTED);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "pruned"));
    assert_true(ch.pruning.total == 25 && ch.pruning.kept == 0);
    twell_ctx_destroy(ctx);
}

/* ---- the JSON reader and config.json ---- */

static tw_json *tw_parse_ok(const char *doc) {
    tw_json *v = NULL;
    char err[256];
    twell_status st = tw_json_parse(doc, strlen(doc), &v, err, sizeof err);
    if (st != TWELL_OK)
        fail_msg("rejected %s: %s", doc, err);
    return v;
}

static void test_autotune_json_valid(void **state) {
    (void)state;
    const char *doc = "\xEF\xBB\xBF { \"a\": [1, -0, 2.5e3, -9223372036854775808, "
                      "9223372036854775808, 1E-2],\n \"s\": \"x\\u00e9\\ud83d\\ude00\\n\\\"\\/\","
                      " \"t\": true, \"f\": false, \"n\": null, \"o\": {}, \"e\": [], "
                      "\"u\": \"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"}  \r\n";
    tw_json *v = tw_parse_ok(doc);
    assert_int_equal(v->type, TW_JSON_OBJECT);
    assert_int_equal(v->len, 8);
    const tw_json *a = tw_json_get(v, "a");
    assert_non_null(a);
    assert_int_equal(a->type, TW_JSON_ARRAY);
    assert_int_equal(a->len, 6);
    assert_true(a->items[0]->is_int && a->items[0]->i == 1);
    assert_true(a->items[1]->is_int && a->items[1]->i == 0);
    assert_false(a->items[2]->is_int);
    assert_true(a->items[2]->num == 2500.0);
    assert_true(a->items[3]->is_int && a->items[3]->i == INT64_MIN);
    assert_false(a->items[4]->is_int); /* beyond int64: a double only */
    assert_true(a->items[4]->num == 9223372036854775808.0);
    assert_true(a->items[5]->num == 0.01);
    const tw_json *str = tw_json_get(v, "s");
    assert_int_equal(str->type, TW_JSON_STRING);
    assert_int_equal(str->len, 1 + 2 + 4 + 1 + 1 + 1);
    assert_memory_equal(str->str, "x\xC3\xA9\xF0\x9F\x98\x80\n\"/", str->len);
    assert_string_equal(tw_json_get(v, "u")->str, "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
    assert_int_equal(tw_json_get(v, "t")->type, TW_JSON_TRUE);
    assert_int_equal(tw_json_get(v, "f")->type, TW_JSON_FALSE);
    assert_int_equal(tw_json_get(v, "n")->type, TW_JSON_NULL);
    assert_int_equal(tw_json_get(v, "o")->len, 0);
    assert_int_equal(tw_json_get(v, "e")->len, 0);
    assert_null(tw_json_get(v, "missing"));
    assert_null(tw_json_get(a, "a")); /* not an object */
    tw_json_free(v);

    /* Scalars at the top level; \u0000 inside a value (not in a key). */
    v = tw_parse_ok(" 42 ");
    assert_true(v->is_int && v->i == 42);
    tw_json_free(v);
    v = tw_parse_ok("\"a\\u0000b\"");
    assert_int_equal(v->len, 3);
    tw_json_free(v);
    tw_json_free(NULL);

    /* Exactly the depth limit is fine. */
    char deep[2 * TW_JSON_MAX_DEPTH + 1];
    memset(deep, '[', TW_JSON_MAX_DEPTH);
    memset(deep + TW_JSON_MAX_DEPTH, ']', TW_JSON_MAX_DEPTH);
    deep[2 * TW_JSON_MAX_DEPTH] = '\0';
    v = tw_parse_ok(deep);
    tw_json_free(v);
}

static void test_autotune_json_rejects(void **state) {
    (void)state;
    static const struct {
        const char *doc, *msg;
    } bad[] = {
        {"", "expected a value, found the end"},
        {"   ", "expected a value"},
        {"{\"a\": 1,}", "trailing comma"},
        {"[1, 2,]", "trailing comma"},
        {"{\"a\" 1}", "expected ':'"},
        {"{'a': 1}", "member name in quotes"},
        {"{\"a\": 1} x", "after the document"},
        {"{\"a\": 1}{}", "after the document"},
        {"[01]", "leading zeros"},
        {"[+1]", "expected a value"},
        {"[1.]", "digits after '.'"},
        {"[.5]", "expected a value"},
        {"[1e]", "exponent"},
        {"[-]", "digits after '-'"},
        {"[NaN]", "expected a value"},
        {"[Infinity]", "expected a value"},
        {"[tru]", "expected a value"},
        {"[nul]", "expected a value"},
        {"\"abc", "unterminated string"},
        {"\"a\tb\"", "control character 0x09"},
        {"\"\\x\"", "invalid escape"},
        {"\"\\u12G4\"", "four hex digits"},
        {"\"\\ud83d\"", "without its low half"},
        {"\"\\ud83d\\u0041\"", "does not complete surrogate"},
        {"\"\\ude00\"", "lone low surrogate"},
        {"\"\xC3\"", "invalid UTF-8"},
        {"\"\xC0\xAF\"", "invalid UTF-8"},         /* overlong '/' */
        {"\"\xED\xA0\x80\"", "invalid UTF-8"},     /* encoded surrogate */
        {"\"\xF4\x90\x80\x80\"", "invalid UTF-8"}, /* above U+10FFFF */
        {"\"\xFF\"", "invalid UTF-8"},
        {"{\"a\": 1, \"b\": 2, \"a\": 3}", "the key \"a\" twice"},
        {"{\"a\\u0000\": 1}", "U+0000"},
        {"[1 2]", "expected ',' or ']'"},
        {"{\"a\": [1}", "expected ',' or ']'"},
        {"/* c */ 1", "expected a value"},
        {"[1]\n// c", "after the document"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tw_json *v = (tw_json *)1;
        char err[256];
        twell_status st = tw_json_parse(bad[i].doc, strlen(bad[i].doc), &v, err, sizeof err);
        if (st != TWELL_ERR_CORRUPT || v != NULL || !strstr(err, bad[i].msg) ||
            strncmp(err, "line ", 5))
            fail_msg("doc #%zu %s: status %s, message '%s' (want '%s')", i, bad[i].doc,
                     twell_status_name(st), err, bad[i].msg);
    }
    /* Position of the first bad byte: line and column. */
    const char *doc = "{\n  \"a\": 1,\n  \"b\": [1, 2,, 3]\n}";
    tw_json *v;
    char err[256];
    assert_int_equal(tw_json_parse(doc, strlen(doc), &v, err, sizeof err), TWELL_ERR_CORRUPT);
    assert_non_null(strstr(err, "line 3, column 14"));
    /* Too deep. */
    char deep[2 * TW_JSON_MAX_DEPTH + 3];
    memset(deep, '[', TW_JSON_MAX_DEPTH + 1);
    memset(deep + TW_JSON_MAX_DEPTH + 1, ']', TW_JSON_MAX_DEPTH + 1);
    deep[2 * TW_JSON_MAX_DEPTH + 2] = '\0';
    assert_int_equal(tw_json_parse(deep, strlen(deep), &v, err, sizeof err), TWELL_ERR_CORRUPT);
    assert_non_null(strstr(err, "nesting deeper than 128"));
    /* A NUL byte inside the given length is not the end of the text. */
    assert_int_equal(tw_json_parse("[1]\0", 4, &v, err, sizeof err), TWELL_ERR_CORRUPT);
    /* err may be NULL. */
    assert_int_equal(tw_json_parse("[", 1, &v, NULL, 0), TWELL_ERR_CORRUPT);
}

static char *tw_read_fixture(const char *name, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/%s", TWELL_TEST_SOURCE_DIR, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    *len = fread(buf, 1, sizeof buf - 1, f);
    buf[*len] = '\0';
    fclose(f);
    char *copy = malloc(*len + 1);
    memcpy(copy, buf, *len + 1);
    return copy;
}

static void test_autotune_json_fuzz(void **state) {
    (void)state;
    size_t len;
    char *base = tw_read_fixture("tinyllama_config.json", &len);
    tw_json *v;
    /* Every prefix. */
    for (size_t cut = 0; cut < len; cut++) {
        twell_status st = tw_json_parse(base, cut, &v, NULL, 0);
        assert_true(st == TWELL_OK || st == TWELL_ERR_CORRUPT);
        tw_json_free(v);
    }
    /* Random edits with characters that matter to JSON (fixed seed). */
    static const char alphabet[] = "{}[]\":,\\u0123456789eE+-.tfn \n\x80\xC3\xFF";
    char *m = malloc(len + 8);
    uint32_t rng = 12345u;
    size_t ok = 0, corrupt = 0;
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(m, base, len);
        size_t mlen = len;
        rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
        int edits = 1 + (int)(rng % 4u);
        for (int e = 0; e < edits; e++) {
            rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
            size_t at = rng % mlen;
            char ch = alphabet[(rng >> 16) % (sizeof alphabet - 1)];
            switch ((rng >> 8) % 3u) {
            case 0:
                m[at] = ch;
                break;
            case 1: /* delete */
                memmove(m + at, m + at + 1, mlen - at - 1);
                mlen--;
                break;
            default: /* insert */
                memmove(m + at + 1, m + at, mlen - at);
                m[at] = ch;
                mlen++;
                break;
            }
        }
        char err[256];
        twell_status st = tw_json_parse(m, mlen, &v, err, sizeof err);
        if (st == TWELL_OK) {
            ok++;
            tw_json_free(v);
        } else {
            assert_int_equal(st, TWELL_ERR_CORRUPT);
            assert_null(v);
            assert_true(!strncmp(err, "line ", 5));
            corrupt++;
        }
        tw_model_config mc;
        st = tw_model_config_parse(m, mlen, &mc, err, sizeof err);
        assert_true(st == TWELL_OK || st == TWELL_ERR_CORRUPT || st == TWELL_ERR_INVALID_ARG);
    }
    assert_true(ok > 100 && corrupt > 1000);
    free(m);
    free(base);
}

static void test_autotune_model_config(void **state) {
    (void)state;
    tw_model_config m;
    char err[512];
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/tinyllama_config.json", TWELL_TEST_SOURCE_DIR);
    assert_int_equal(tw_model_config_load(path, &m, err, sizeof err), TWELL_OK);
    assert_int_equal(m.hidden_size, 2048);
    assert_int_equal(m.intermediate_size, 5632);
    assert_int_equal(m.num_layers, 22);
    assert_string_equal(m.torch_dtype, "bfloat16");
    assert_string_equal(m.model_type, "llama");
    assert_string_equal(m.hidden_act, "silu");
    assert_string_equal(m.section, "");
    twell_dtype dt = TWELL_DTYPE_FP16;
    assert_int_equal(tw_model_config_dtype(&m, &dt, err, sizeof err), TWELL_OK);
    assert_int_equal(dt, TWELL_DTYPE_BF16);

    snprintf(path, sizeof path, "%s/tests/data/llama_7b_config.json", TWELL_TEST_SOURCE_DIR);
    assert_int_equal(tw_model_config_load(path, &m, err, sizeof err), TWELL_OK);
    assert_int_equal(m.hidden_size, 4096);
    assert_int_equal(m.intermediate_size, 11008);
    assert_int_equal(tw_model_config_dtype(&m, &dt, err, sizeof err), TWELL_OK);
    assert_int_equal(dt, TWELL_DTYPE_FP16);

    snprintf(path, sizeof path, "%s/tests/data/llava_config.json", TWELL_TEST_SOURCE_DIR);
    assert_int_equal(tw_model_config_load(path, &m, err, sizeof err), TWELL_OK);
    assert_int_equal(m.hidden_size, 4096);
    assert_int_equal(m.num_layers, 32);
    assert_string_equal(m.section, "text_config");
    assert_string_equal(m.model_type, "llava");
    assert_string_equal(m.torch_dtype, "bfloat16");

    snprintf(path, sizeof path, "%s/tests/data/fp32_config.json", TWELL_TEST_SOURCE_DIR);
    assert_int_equal(tw_model_config_load(path, &m, err, sizeof err), TWELL_OK);
    assert_int_equal(tw_model_config_dtype(&m, &dt, err, sizeof err), TWELL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "torch_dtype \"float32\" is not supported"));

    snprintf(path, sizeof path, "%s/tests/data/malformed_config.json", TWELL_TEST_SOURCE_DIR);
    assert_int_equal(tw_model_config_load(path, &m, err, sizeof err), TWELL_ERR_CORRUPT);
    assert_non_null(strstr(err, "malformed_config.json: line 5, column 1: trailing comma"));
    assert_int_equal(m.hidden_size, 0);

    assert_int_equal(tw_model_config_load("/nonexistent/config.json", &m, err, sizeof err),
                     TWELL_ERR_IO);
    assert_non_null(strstr(err, "cannot open /nonexistent/config.json"));

    static const struct {
        const char *doc;
        twell_status st;
        const char *msg;
    } cases[] = {
        {"[1, 2]", TWELL_ERR_CORRUPT, "an array, not an object"},
        {"{\"intermediate_size\": 5632}", TWELL_ERR_INVALID_ARG, "no hidden_size"},
        {"{\"hidden_size\": 2048}", TWELL_ERR_INVALID_ARG, "no intermediate_size"},
        {"{\"hidden_size\": \"2048\", \"intermediate_size\": 5632}", TWELL_ERR_INVALID_ARG,
         "hidden_size must be a number, not string"},
        {"{\"hidden_size\": 2048.5, \"intermediate_size\": 5632}", TWELL_ERR_INVALID_ARG,
         "not a positive integer"},
        {"{\"hidden_size\": 2048, \"intermediate_size\": -1}", TWELL_ERR_INVALID_ARG,
         "intermediate_size = -1"},
        {"{\"hidden_size\": 2048, \"intermediate_size\": 4294967296}", TWELL_ERR_INVALID_ARG,
         "below 2^31"},
        {"{\"hidden_size\": 2048, \"intermediate_size\": 5632, \"num_hidden_layers\": -2}",
         TWELL_ERR_INVALID_ARG, "num_hidden_layers must be a non-negative integer"},
        {"{\"hidden_size\": 2048, \"intermediate_size\": 5632, \"torch_dtype\": 16}",
         TWELL_ERR_INVALID_ARG, "torch_dtype must be a string"},
        {"{\"hidden_size\": 2048, \"intermediate_size\": 5632, \"hidden_size\": 1}",
         TWELL_ERR_CORRUPT, "twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        twell_status st =
            tw_model_config_parse(cases[i].doc, strlen(cases[i].doc), &m, err, sizeof err);
        if (st != cases[i].st || !strstr(err, cases[i].msg))
            fail_msg("%s: %s '%s' (want %s '%s')", cases[i].doc, twell_status_name(st), err,
                     twell_status_name(cases[i].st), cases[i].msg);
    }
    /* Other families' key names, and the newer "dtype" key. */
    const char *gpt = "{\"n_embd\": 768, \"n_inner\": 3072, \"n_layer\": 12, \"dtype\": "
                      "\"torch.float16\", \"activation_function\": \"gelu_new\"}";
    assert_int_equal(tw_model_config_parse(gpt, strlen(gpt), &m, err, sizeof err), TWELL_OK);
    assert_int_equal(m.hidden_size, 768);
    assert_int_equal(m.intermediate_size, 3072);
    assert_int_equal(m.num_layers, 12);
    assert_string_equal(m.hidden_key, "n_embd");
    assert_string_equal(m.inner_key, "n_inner");
    assert_string_equal(m.hidden_act, "gelu_new");
    assert_int_equal(tw_model_config_dtype(&m, &dt, err, sizeof err), TWELL_OK);
    assert_int_equal(dt, TWELL_DTYPE_FP16);
    const char *nodt = "{\"hidden_size\": 64, \"intermediate_size\": 256}";
    assert_int_equal(tw_model_config_parse(nodt, strlen(nodt), &m, err, sizeof err), TWELL_OK);
    assert_int_equal(m.num_layers, -1);
    assert_int_equal(tw_model_config_dtype(&m, &dt, err, sizeof err), TWELL_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "--dtype"));
}

/* The C space of gate_pack_simt mirrors the template's own rules: a config is kept (for a large
 * M) exactly when the template renders it. */
static void test_autotune_simt_space_matches_template(void **state) {
    (void)state;
    twell_ctx *ctx = tw_cpu_ctx(NULL, NULL);
    assert_non_null(ctx);
    tw_tune_device h200;
    tw_tune_device_preset("h200", &h200);
    const tw_tune_space *s = tw_tune_space_by_kernel("gate_pack_simt");
    static const uint32_t Ks[] = {48, 2048}, Ts[] = {64, 256};
    size_t checked = 0;
    for (size_t ki = 0; ki < 2; ki++)
        for (size_t ti = 0; ti < 2; ti++) {
            tw_tune_problem p = tw_problem("gate_pack", Ks[ki], 512, 1u << 20);
            p.shape.T = Ts[ti];
            for (size_t a = 0; a < s->axes[0].n; a++)
                for (size_t b = 0; b < s->axes[1].n; b++) {
                    tw_tune_config c = tw_cfg2("gate_pack_simt", "BM", s->axes[0].values[a],
                                               "THREADS", s->axes[1].values[b]);
                    tw_prune_reason r = tw_tune_prune(s, &p, &h200, &c, NULL, 0);
                    tw_param prm[16];
                    size_t np = tw_tune_config_params(&c, &p.shape, prm, 16);
                    char *src = NULL;
                    size_t len = 0;
                    twell_status st = tw_render(ctx, "gate_pack_simt", prm, np, &src, &len);
                    free(src);
                    char canon[TW_TUNE_CANON_MAX];
                    tw_tune_config_canon(&c, canon, sizeof canon);
                    if ((r == TW_PRUNE_KEPT) != (st == TWELL_OK))
                        fail_msg("K=%u T=%u %s: pruning says %s, the template says %s (%s)",
                                 p.shape.K, p.shape.T, canon, tw_prune_reason_name(r),
                                 twell_status_name(st), twell_ctx_errmsg(ctx));
                    checked++;
                }
        }
    assert_int_equal(checked, 100);
    twell_ctx_destroy(ctx);
}

static void test_autotune_gpu_glue_without_device(void **state) {
    (void)state;
    twell_ctx *ctx = tw_cpu_ctx(NULL, NULL);
    assert_non_null(ctx);
    tw_tune_device d;
    memset(&d, 0x5a, sizeof d);
    assert_int_equal(tw_tune_device_of(ctx, &d), TWELL_ERR_UNSUPPORTED);
    assert_int_equal(d.sm_count, 0);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "tuning needs a CUDA device"));
    twell_shape sh = twell_shape_default(2048, 5632);
    tw_tune_choice ch;
    assert_int_equal(tw_tune_gpu(ctx, "gate_pack", &sh, 4096, NULL, 0, &ch), TWELL_ERR_UNSUPPORTED);
    /* What this build can launch: the SIMT gate-pack; the others wait for their launchers. */
    assert_true(tw_tune_kernel_runnable("gate_pack_simt"));
    assert_false(tw_tune_kernel_runnable("no_such_kernel"));
    tw_tune_device h200;
    tw_tune_device_preset("h200", &h200);
    tw_tune_problem p = tw_problem("gate_pack", 2048, 5632, 4096);
    const tw_tune_space *s = tw_tune_space_runnable("gate_pack", &p, &h200);
    assert_non_null(s);
    if (!tw_tune_kernel_runnable("gate_pack_sm90"))
        assert_string_equal(s->kernel, "gate_pack_simt");
    assert_null(tw_tune_space_runnable("no_such_op", &p, &h200));
    twell_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_autotune_canon_roundtrip),
        cmocka_unit_test(test_autotune_canon_rejects),
        cmocka_unit_test(test_autotune_config_limits),
        cmocka_unit_test(test_autotune_m_bucket),
        cmocka_unit_test(test_autotune_prune_simt),
        cmocka_unit_test(test_autotune_prune_sm90),
        cmocka_unit_test(test_autotune_prune_ffn_fused),
        cmocka_unit_test(test_autotune_ffn_space_matches_launcher),
        cmocka_unit_test(test_autotune_enumerate_errors),
        cmocka_unit_test(test_autotune_selects_fastest),
        cmocka_unit_test(test_autotune_failures_score_infinity),
        cmocka_unit_test(test_autotune_all_fail),
        cmocka_unit_test(test_autotune_margin),
        cmocka_unit_test(test_autotune_ties_deterministic),
        cmocka_unit_test(test_autotune_budget),
        cmocka_unit_test(test_autotune_default_mode),
        cmocka_unit_test(test_autotune_parallel_compile),
        cmocka_unit_test(test_autotune_record_roundtrip),
        cmocka_unit_test(test_autotune_key_fields),
        cmocka_unit_test(test_autotune_persist_fork),
        cmocka_unit_test(test_autotune_retune_and_stale),
        cmocka_unit_test(test_autotune_simt_space_matches_template),
        cmocka_unit_test(test_autotune_gpu_glue_without_device),
        cmocka_unit_test(test_autotune_json_valid),
        cmocka_unit_test(test_autotune_json_rejects),
        cmocka_unit_test(test_autotune_json_fuzz),
        cmocka_unit_test(test_autotune_model_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
