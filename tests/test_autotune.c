/* test_autotune.c — the autotuner's configurations and candidate spaces without a GPU: canonical
 * configs, pruning of each space (and agreement with the launchers and the SIMT template), and
 * the device glue on a CPU context. The tuner's selection, its records and the JSON reader have
 * their own files (test_autotune_select.c, test_autotune_store.c, test_autotune_json.c).
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "candidates.h"
#include "cuda_ffn.h"
#include "internal.h"
#include "tune_registry.h"
#include "tuner.h"
#include "tw_tune_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    twell_shape s;
    twell_shape_init(&s, 512, 768);
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

    /* Every op has a space on the Hopper preset, and on the A100 every op but the dense path's
     * split factors (its GEMMs need sm_90a). */
    for (const char *const *op = tw_tune_ops(); *op; op++) {
        const tw_tune_space *sp[4];
        assert_true(tw_tune_spaces_for(*op, sp, 4) >= 1);
        tw_tune_problem q = tw_problem(*op, 4096, 11008, 4096);
        assert_non_null(tw_tune_space_pick(*op, &q, &h200));
        if (strcmp(*op, "ffn_dense") != 0)
            assert_non_null(tw_tune_space_pick(*op, &q, &a100));
        else
            assert_null(tw_tune_space_pick(*op, &q, &a100));
    }
}

/* The ffn_fused space: CN is the axis, the warp shapes and PF single-valued (the defaults), pruned
 * by the template's rules (multiple of T and 64, at most 256 chunks, its 227 KB ceiling) and the
 * device's shared memory. */
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
    tw_assert_canon(&c, "ffn_fused:CN=512,GPWA=8,GPWB=4,NWA=16,NWB=16,PF=1");
    tw_tune_problem p = tw_problem("ffn_infer", 2048, 5632, 4096); /* T = 256 */
    assert_ptr_equal(tw_tune_space_pick("ffn_infer", &p, &h200), s);
    assert_int_equal(tw_prune_cfg(s, &p, &h200, &c), TW_PRUNE_KEPT);

    /* T = 256: CN 256, 512, 768 (CN smaller than T or not a multiple of it: shape;
     * the rest over the template's 227 KB with 16 KB of list staging: shape, whatever the
     * device). */
    tw_tune_config *cands = NULL;
    size_t n = 0, di = SIZE_MAX;
    tw_prune_stats st;
    assert_int_equal(tw_tune_space_enumerate(s, &p, &h200, &cands, &n, &di, &st), TWELL_OK);
    assert_int_equal(st.total, 9);
    assert_int_equal(n, 3);
    assert_int_equal(st.by[TW_PRUNE_SHAPE], 6);
    tw_assert_canon(&cands[0], "ffn_fused:CN=256,GPWA=8,GPWB=4,NWA=16,NWB=16,PF=1");
    tw_assert_canon(&cands[1], "ffn_fused:CN=512,GPWA=8,GPWB=4,NWA=16,NWB=16,PF=1");
    tw_assert_canon(&cands[2], "ffn_fused:CN=768,GPWA=8,GPWB=4,NWA=16,NWB=16,PF=1");
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
    /* The template's ranges: 1..8 groups per warp, an even 4..32 warps, PF 0 or 1. */
    assert_int_equal(tw_tune_config_set(&c, "GPWA", 4), 0);
    assert_int_equal(tw_prune_cfg(s, &wide, &h200, &c), TW_PRUNE_KEPT);
    assert_int_equal(tw_tune_config_set(&c, "GPWA", 9), 0);
    assert_int_equal(tw_prune_cfg(s, &wide, &h200, &c), TW_PRUNE_SHAPE);
    assert_int_equal(tw_tune_config_set(&c, "GPWA", 8), 0);
    assert_int_equal(tw_tune_config_set(&c, "NWB", 15), 0);
    assert_int_equal(tw_prune_cfg(s, &wide, &h200, &c), TW_PRUNE_SHAPE);
    assert_int_equal(tw_tune_config_set(&c, "NWB", 16), 0);
    assert_int_equal(tw_tune_config_set(&c, "PF", 2), 0);
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

/* Reads the n words of "twell_ffn_cfg[..] = {...}" in a rendered ffn_fused source into w;
 * 0, or -1 when they are not there. */
static int tw_rendered_words(const char *src, uint32_t *w, size_t n) {
    const char *q = strstr(src, "twell_ffn_cfg[");
    if (!q || !(q = strchr(q, '{')))
        return -1;
    q++;
    for (size_t i = 0; i < n; i++) {
        char *end = NULL;
        long long v = strtoll(q, &end, 10);
        if (end == q || v < 0 || v > UINT32_MAX)
            return -1;
        w[i] = (uint32_t)v;
        q = end + strspn(end, ", \n");
    }
    return 0;
}

/* The space, the launcher (ffn_config.c's rule on a device) and the template agree: over the
 * whole unpruned product for several shapes and devices, a config is kept exactly when the
 * launcher accepts it (the engine's pruning against the device's shared memory equals the
 * launcher's cap); every kept one renders with the launcher's parameters and the module's
 * twell_ffn_cfg echoes all the words the launcher resolved; the launcher's default is the
 * space's default where that fits. */
static void test_autotune_ffn_space_matches_launcher(void **state) {
    (void)state;
    twell_ctx_options o;
    twell_ctx_options_init(&o);
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
                assert_true((dflt.cn == 512 || dflt.cn == 256) && dflt.gpwa == 8 && dflt.gpwb == 4);
            for (size_t a = 0; a < s->axes[0].n; a++) {
                tw_tune_config c;
                tw_tune_space_default(s, &c);
                assert_int_equal(tw_tune_config_set(&c, "CN", s->axes[0].values[a]), 0);
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
                uint32_t got[TW_FFN_NWORDS], want[TW_FFN_NWORDS];
                assert_int_equal(tw_rendered_words(src, got, TW_FFN_NWORDS), 0);
                assert_int_equal(tw_ffn_cfg_resolve(&fc, &p.shape, &cu, want, NULL, 0), 0);
                for (size_t w = 0; w < TW_FFN_NWORDS; w++)
                    if (got[w] != want[w])
                        fail_msg("%s: twell_ffn_cfg[%zu] = %u, the launcher's %u", canon, w, got[w],
                                 want[w]);
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

/* A pseudo-random index below n (a fixed LCG: the same sample every run). */
static size_t tw_rnd(uint64_t *r, size_t n) {
    *r = *r * 6364136223846793005u + 1442695040888963407u;
    return (size_t)((*r >> 33) % n);
}

/* The rule (ffn_config.c) and the template's own checks agree beyond the space's axes: over a
 * fixed pseudo-random sample of every parameter (valid and invalid values), a configuration the
 * rule accepts at the template's shared-memory ceiling renders and echoes exactly the rule's
 * words; one whose parameters the rule refuses (whatever the memory) the template refuses too.
 * (The rule's remaining refusals are the launcher's own floor of 16 KB of phase A list staging,
 * which the template does not impose.) */
static void test_autotune_ffn_rule_matches_template(void **state) {
    (void)state;
    twell_ctx *ctx = tw_test_cpu_ctx_at(NULL, NULL);
    assert_non_null(ctx);
    /* mostly valid values, one or two invalid ones per parameter */
    static const unsigned cn[] = {64, 128, 256, 384, 512, 640, 768, 1024, 1088, 96};
    static const unsigned gpw[] = {8, 4, 2, 1, 8, 4, 2, 6, 0};
    static const unsigned nw[] = {16, 16, 8, 32, 4, 24, 12, 15};
    static const unsigned pf[] = {1, 0, 1, 0, 1, 2};
    static const uint32_t shapes[][4] = {
        {2048, 5632, 256, 1}, {1024, 4096, 64, 0}, {576, 1280, 64, 1}};
    uint64_t rng = 12;
#define TW_PICK(a) (a[tw_rnd(&rng, sizeof a / sizeof a[0])])
    size_t agree_ok = 0, agree_bad = 0, floor_only = 0;
    for (size_t i = 0; i < 400; i++) {
        const uint32_t *sh = shapes[i % 3];
        twell_shape s;
        twell_shape_init(&s, sh[0], sh[1]);
        s.T = sh[2];
        s.gated = (int)sh[3];
        s.dtype = i % 2 ? TWELL_DTYPE_FP16 : TWELL_DTYPE_BF16;
        tw_ffn_cfg c; /* one pick per statement: a fixed sequence whatever the compiler */
        c.cn = TW_PICK(cn);
        c.gpwa = TW_PICK(gpw);
        c.gpwb = TW_PICK(gpw);
        c.nwa = TW_PICK(nw);
        c.nwb = TW_PICK(nw);
        c.pf = TW_PICK(pf);
        uint32_t want[TW_FFN_NWORDS];
        char why[256] = "";
        int params_ok = tw_ffn_cfg_words(&c, &s, UINT32_MAX, NULL, NULL, 0) == 0;
        int ok = tw_ffn_cfg_words(&c, &s, TW_FFN_SMEM_MAX, want, why, sizeof why) == 0;
        tw_param prm[TW_FFN_NPARAMS] = {{"K", NULL, s.K},
                                        {"N", NULL, s.N},
                                        {"T", NULL, s.T},
                                        {"C", NULL, s.C},
                                        {"dtype", i % 2 ? "fp16" : "bf16", 0},
                                        {"gated", NULL, s.gated},
                                        {"CN", NULL, c.cn},
                                        {"GPWA", NULL, c.gpwa},
                                        {"GPWB", NULL, c.gpwb},
                                        {"NWA", NULL, c.nwa},
                                        {"NWB", NULL, c.nwb},
                                        {"PF", NULL, c.pf},
                                        {"DCAPA", NULL, 0},
                                        {"DCAPB", NULL, 0}};
        /* the staging capacities as the launcher passes them; left to the template (which
         * fills the ceiling the same way) when the rule gives none */
        size_t np = ok ? TW_FFN_NPARAMS : TW_FFN_NPARAMS - 2;
        prm[12].ival = want[TW_CFG_DCAPA], prm[13].ival = want[TW_CFG_DCAPB];
        char *src = NULL;
        size_t len = 0;
        twell_status rs = tw_render(ctx, "ffn_fused", prm, np, &src, &len);
        if (ok) {
            uint32_t got[TW_FFN_NWORDS];
            if (rs != TWELL_OK)
                fail_msg("CN=%u GPW=%u/%u NW=%u/%u PF=%u accepted by the rule, refused by the "
                         "template: %s",
                         c.cn, c.gpwa, c.gpwb, c.nwa, c.nwb, c.pf, twell_ctx_errmsg(ctx));
            assert_int_equal(tw_rendered_words(src, got, TW_FFN_NWORDS), 0);
            for (size_t w = 0; w < TW_FFN_NWORDS; w++)
                if (got[w] != want[w])
                    fail_msg("CN=%u: twell_ffn_cfg[%zu] = %u, the rule's %u", c.cn, w, got[w],
                             want[w]);
            agree_ok++;
        } else if (!params_ok) {
            if (rs == TWELL_OK)
                fail_msg("CN=%u GPW=%u/%u NW=%u/%u PF=%u refused by the rule (%s), rendered by "
                         "the template",
                         c.cn, c.gpwa, c.gpwb, c.nwa, c.nwb, c.pf, why);
            agree_bad++;
        } else {
            floor_only++;
        }
        free(src);
    }
#undef TW_PICK
    printf("# ffn_fused rule vs template: %zu accepted by both, %zu refused by both, %zu refused "
           "by the launcher's list-staging floor only\n",
           agree_ok, agree_bad, floor_only);
    assert_true(agree_ok >= 30 && agree_bad >= 30);
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

/* The C space of gate_pack_simt mirrors the template's own rules: a config is kept (for a large
 * M) exactly when the template renders it. */
static void test_autotune_simt_space_matches_template(void **state) {
    (void)state;
    twell_ctx *ctx = tw_test_cpu_ctx_at(NULL, NULL);
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
    twell_ctx *ctx = tw_test_cpu_ctx_at(NULL, NULL);
    assert_non_null(ctx);
    tw_tune_device d;
    memset(&d, 0x5a, sizeof d);
    assert_int_equal(tw_tune_device_of(ctx, &d), TWELL_ERR_UNSUPPORTED);
    assert_int_equal(d.sm_count, 0);
    assert_non_null(strstr(twell_ctx_errmsg(ctx), "tuning needs a CUDA device"));
    twell_shape sh;
    twell_shape_init(&sh, 2048, 5632);
    tw_tune_choice ch;
    assert_int_equal(tw_tune_gpu(ctx, "gate_pack", &sh, 4096, NULL, 0, &ch), TWELL_ERR_UNSUPPORTED);
    /* What this build can launch: the SIMT gate-pack; the others wait for their launchers. */
    assert_true(tw_tune_kernel_runnable(ctx, "gate_pack_simt"));
    assert_false(tw_tune_kernel_runnable(ctx, "no_such_kernel"));
    tw_tune_device h200;
    tw_tune_device_preset("h200", &h200);
    tw_tune_problem p = tw_problem("gate_pack", 2048, 5632, 4096);
    const tw_tune_space *s = tw_tune_space_runnable(ctx, "gate_pack", &p, &h200);
    assert_non_null(s);
    if (!tw_tune_kernel_runnable(ctx, "gate_pack_sm90"))
        assert_string_equal(s->kernel, "gate_pack_simt");
    assert_null(tw_tune_space_runnable(ctx, "no_such_op", &p, &h200));
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
        cmocka_unit_test(test_autotune_ffn_rule_matches_template),
        cmocka_unit_test(test_autotune_enumerate_errors),
        cmocka_unit_test(test_autotune_simt_space_matches_template),
        cmocka_unit_test(test_autotune_gpu_glue_without_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
