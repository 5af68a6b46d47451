/* test_autotune_store.c — tuning records: encoding and its corruption, the key's fields,
 * persistence across processes, re-tuning, stale and corrupt records.
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "candidates.h"
#include "internal.h"
#include "tune_registry.h"
#include "tuner.h"
#include "tw_case_dir.h"
#include "tw_tune_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A fresh, empty cache directory for one case, under the test's own cache directory. */
static void tw_case_dir(const char *name, char *out, size_t n) {
    tw_test_case_dir("test_autotune_store", name, out, n);
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

/* The persistence cases' set-up: a fresh case directory `name` (into dir, n bytes), the H200
 * gate-pack problem, and the SIMT space they tune. */
static const tw_tune_space *tw_store_case(const char *name, char *dir, size_t n, tw_tune_device *d,
                                          tw_tune_problem *p) {
    tw_case_dir(name, dir, n);
    tw_h200_problem(d, p);
    return tw_tune_space_by_kernel("gate_pack_simt");
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
    tw_tune_device d;
    tw_tune_problem p;
    const tw_tune_space *s = tw_store_case("fork", dir, sizeof dir, &d, &p);
    tw_tune_callbacks cb = {NULL, NULL, NULL, NULL, tw_xp_measure, NULL};
    tw_tune_options o = tw_tune_options_default();

    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        twell_ctx *ctx = tw_test_cpu_ctx_at(dir, NULL);
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
    twell_ctx *ctx = tw_test_cpu_ctx_at(dir, NULL);
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
    tw_tune_device d;
    tw_tune_problem p;
    const tw_tune_space *s = tw_store_case("retune", dir, sizeof dir, &d, &p);
    tw_logbook log;
    memset(&log, 0, sizeof log);
    twell_ctx *ctx = tw_test_cpu_ctx_at(dir, &log);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_autotune_record_roundtrip),
        cmocka_unit_test(test_autotune_key_fields),
        cmocka_unit_test(test_autotune_persist_fork),
        cmocka_unit_test(test_autotune_retune_and_stale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
