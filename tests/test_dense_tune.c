/* test_dense_tune.c — the dense path's split-K tuning without a GPU: the ffn_dense space's
 * enumeration and pruning against an independent statement of the launcher's rule (slices of at
 * least one k-block, at most 16 slices, partials within TW_DENSE_SPLIT_PART_MAX) per M bucket,
 * its default (the pure rule's choice), the choice a dense call makes (test control, else a
 * bucket's tuned winner, else the rule), and a dense record through the tuning store and the
 * engine's selection (a fake cost on a CPU context).
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "candidates.h"
#include "dense_split.h"
#include "dense_tuner.h"
#include "ffn_policy.h"
#include "internal.h"
#include "tune_registry.h"
#include "tuner.h"
#include "tw_case_dir.h"
#include "tw_tune_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const unsigned dt_axis[] = {1, 2, 3, 4, 6, 8, 12, 16};

static tw_tune_problem dt_problem(uint32_t K, uint32_t N, int gated, size_t M) {
    tw_tune_problem p = tw_problem(TW_DENSE_OP, K, N, M);
    p.shape.gated = gated;
    p.M = tw_tune_m_bucket(M);
    return p;
}

/* The rule written out again here, from the brief: a factor is valid when it is 1..16, at most
 * the reduction's 64-wide k-blocks, and its fp32 partials (planes x S x rows x output columns)
 * fit 128 MiB. */
static int dt_valid(const twell_shape *s, int up, unsigned S, size_t m) {
    unsigned kb = (up ? s->K : s->N) / 64u;
    size_t cols = up ? s->N : s->K, planes = up && s->gated ? 2 : 1;
    size_t bytes = S < 2 ? 0 : (size_t)S * planes * m * cols * 4u;
    return S >= 1 && S <= 16 && S <= kb && bytes <= ((size_t)128 << 20);
}

static void dt_config(unsigned up, unsigned down, tw_tune_config *c) {
    *c = tw_cfg2(TW_DENSE_KERNEL, "SPLIT_UP", up, "SPLIT_DOWN", down);
}

/* Enumerates the space for p on d and checks every one of the 64 pairs against dt_valid: kept
 * exactly when both factors are valid; pruned ones carry the reason "shape". Returns the kept
 * count; *di the default's index. */
static size_t dt_enumerate(const tw_tune_problem *p, const tw_tune_device *d, size_t *di,
                           tw_tune_config **out) {
    const tw_tune_space *s = tw_tune_space_by_kernel(TW_DENSE_KERNEL);
    assert_non_null(s);
    tw_tune_config *c = NULL;
    size_t n = 0;
    tw_prune_stats st;
    assert_int_equal(tw_tune_space_enumerate(s, p, d, &c, &n, di, &st), TWELL_OK);
    assert_int_equal(st.total, 64);
    size_t want = 0, k = 0;
    for (size_t i = 0; i < 8; i++)
        for (size_t j = 0; j < 8; j++) {
            int ok = dt_valid(&p->shape, 1, dt_axis[i], p->M) &&
                     dt_valid(&p->shape, 0, dt_axis[j], p->M);
            tw_tune_config cfg;
            dt_config(dt_axis[i], dt_axis[j], &cfg);
            char why[160];
            tw_prune_reason r = tw_tune_prune(s, p, d, &cfg, why, sizeof why);
            if (ok != (r == TW_PRUNE_KEPT))
                fail_msg("K=%u N=%u M=%zu up %u down %u: rule says %d, space says %s (%s)",
                         p->shape.K, p->shape.N, p->M, dt_axis[i], dt_axis[j], ok,
                         tw_prune_reason_name(r), why);
            if (!ok) {
                assert_int_equal(r, TW_PRUNE_SHAPE);
                assert_true(why[0] != '\0');
                continue;
            }
            /* kept configs come out in generation order (up slowest) */
            assert_true(k < n);
            assert_true(tw_tune_config_equal(&c[k], &cfg));
            assert_true(tw_tune_space_accepts(s, p, d, &cfg));
            k++, want++;
        }
    assert_int_equal(n, want);
    assert_int_equal(st.kept, want);
    assert_int_equal(st.by[TW_PRUNE_SHAPE], 64 - want);
    if (out)
        *out = c;
    else
        free(c);
    return n;
}

static void test_dense_tune_space_enumeration(void **state) {
    (void)state;
    tw_tune_device h100, a100;
    assert_int_equal(tw_tune_device_preset("h100", &h100), 0);
    assert_int_equal(tw_tune_device_preset("a100", &a100), 0);
    const unsigned clusters = (unsigned)h100.sm_count / 2u; /* 66 */

    /* the op is registered with its one space; it needs sm_90a and K % 64 */
    const tw_tune_space *sp[2];
    assert_int_equal(tw_tune_spaces_for(TW_DENSE_OP, sp, 2), 1);
    assert_string_equal(sp[0]->op, TW_DENSE_OP);
    assert_ptr_equal(tw_tune_op_find(TW_DENSE_OP), &tw_dense_tune_op);
    int listed = 0;
    for (const char *const *op = tw_tune_ops(); *op; op++)
        listed |= !strcmp(*op, TW_DENSE_OP);
    assert_true(listed);
    tw_tune_problem p = dt_problem(2048, 5632, 1, 1);
    assert_ptr_equal(tw_tune_space_pick(TW_DENSE_OP, &p, &h100), sp[0]);
    assert_null(tw_tune_space_pick(TW_DENSE_OP, &p, &a100));
    tw_tune_problem odd = dt_problem(2016 + 16, 5632, 1, 1); /* K = 2032: not a multiple of 64 */
    assert_null(tw_tune_space_pick(TW_DENSE_OP, &odd, &h100));

    /* K = 2048, N = 5632 gated: decode sizes keep all 64 pairs; the default is the rule's
     * (3, 8): up 22 units -> 66 / 22 = 3, down 8 units -> 8 */
    size_t di = SIZE_MAX;
    tw_tune_config *c = NULL;
    assert_int_equal(dt_enumerate(&p, &h100, &di, &c), 64);
    assert_true(di != SIZE_MAX);
    tw_assert_canon(&c[di], "gemm_sm90:SPLIT_UP=3,SPLIT_DOWN=8");
    free(c);
    /* M = 4096: the up GEMM's two planes x 4096 x 5632 fp32 are 176 MiB per slice: unsplit
     * only; the down GEMM's 32 MiB per slice: 1..4. The rule says (1, 1) (more than a wave). */
    p = dt_problem(2048, 5632, 1, 3000); /* bucket 4096 */
    assert_int_equal(p.M, 4096);
    assert_int_equal(dt_enumerate(&p, &h100, &di, &c), 4);
    tw_assert_canon(&c[0], "gemm_sm90:SPLIT_UP=1,SPLIT_DOWN=1");
    tw_assert_canon(&c[3], "gemm_sm90:SPLIT_UP=1,SPLIT_DOWN=4");
    assert_int_equal(di, 0);
    free(c);
    /* M = 65536: nothing may split */
    p = dt_problem(2048, 5632, 1, 65536);
    assert_int_equal(dt_enumerate(&p, &h100, &di, NULL), 1);
    /* non-gated: one plane, so the up GEMM may split twice as far at M = 1024 */
    p = dt_problem(2048, 5632, 0, 1024);
    size_t ng = dt_enumerate(&p, &h100, &di, NULL);
    p.shape.gated = 1;
    size_t g = dt_enumerate(&p, &h100, &di, NULL);
    assert_true(ng > g);
    /* K = 64: one k-block, so the up GEMM cannot split; K = 192: at most 3 slices */
    p = dt_problem(64, 1024, 1, 16);
    assert_int_equal(dt_enumerate(&p, &h100, &di, NULL), 8);
    p = dt_problem(192, 1024, 1, 16);
    assert_int_equal(dt_enumerate(&p, &h100, &di, NULL), 3 * 8);
    /* the rule's default off the axes: K = 1024, N = 1280 at M = 1 gives down 5 (20 k-blocks / 4)
     * and up 4: no default is timed */
    p = dt_problem(1024, 1280, 1, 1);
    unsigned rule[2];
    tw_dense_split_rule(&p.shape, 1, clusters, rule);
    assert_int_equal(rule[0], 4);
    assert_int_equal(rule[1], 5);
    dt_enumerate(&p, &h100, &di, NULL);
    assert_true(di == SIZE_MAX);
    /* the default the space reports is the rule's at every bucket it lies on the axes */
    const tw_tune_space *s = sp[0];
    for (size_t M = 1; M <= 65536; M *= 4) {
        p = dt_problem(2048, 5632, 1, M);
        tw_tune_config want;
        int on_axes = tw_tune_space_default_for(s, &p, &h100, &want) == 0;
        tw_dense_split_rule(&p.shape, p.M, clusters, rule);
        if (on_axes) {
            assert_int_equal(tw_tune_config_value(&want, "SPLIT_UP", 0), rule[0]);
            assert_int_equal(tw_tune_config_value(&want, "SPLIT_DOWN", 0), rule[1]);
        }
        /* the rule's own choice is always valid for the launcher */
        assert_int_equal(tw_dense_split_check(&p.shape, TW_DENSE_UP, rule[0], p.M, NULL, 0), 0);
        assert_int_equal(tw_dense_split_check(&p.shape, TW_DENSE_DOWN, rule[1], p.M, NULL, 0), 0);
    }
    /* configs of another form are not the space's */
    tw_tune_config other = tw_cfg2(TW_DENSE_KERNEL, "SPLIT_UP", 2, NULL, 0);
    unsigned f[2];
    assert_int_equal(tw_dense_cfg_from_tune(&other, f), -1);
    assert_false(tw_tune_space_accepts(s, &p, &h100, &other));
    other = tw_cfg2("gate_pack_simt", "SPLIT_UP", 2, "SPLIT_DOWN", 2);
    assert_int_equal(tw_dense_cfg_from_tune(&other, f), -1);
    dt_config(5, 2, &other); /* not on the axis */
    assert_int_equal(tw_dense_cfg_from_tune(&other, f), 0);
    assert_false(tw_tune_space_accepts(s, &p, &h100, &other));
}

/* The factors a dense call runs: test control (clamped to the k-blocks only), then a valid tuned
 * winner, then the rule. */
static void test_dense_tune_choice_falls_back_to_rule(void **state) {
    (void)state;
    twell_shape s = twell_shape_default(2048, 5632);
    const unsigned clusters = 66, none[2] = {0, 0};
    unsigned sp[2], rule[2];
    for (size_t m = 1; m <= 8192; m = m * 3 + 1) {
        tw_dense_split_rule(&s, m, clusters, rule);
        /* no record: the rule, exactly tw_ffn_dense_split of the GEMMs' units */
        tw_dense_split_choose(&s, m, clusters, none, NULL, sp);
        assert_int_equal(sp[0], rule[0]);
        assert_int_equal(sp[1], rule[1]);
        size_t mp = (m + 255) / 256;
        assert_int_equal(rule[0], tw_ffn_dense_split(mp * 22, 32, clusters));
        assert_int_equal(rule[1], tw_ffn_dense_split(mp * 8, 88, clusters));
        /* a valid record wins */
        const unsigned rec[2] = {1, 2};
        tw_dense_split_choose(&s, m, clusters, none, rec, sp);
        assert_int_equal(sp[0], 1);
        assert_int_equal(sp[1], 2);
        /* one invalid factor (17 slices; or more partials than the bound at m): the rule */
        const unsigned bad[2] = {17, 2};
        tw_dense_split_choose(&s, m, clusters, none, bad, sp);
        assert_int_equal(sp[0], rule[0]);
        assert_int_equal(sp[1], rule[1]);
        const unsigned big[2] = {16, 16};
        int fits = dt_valid(&s, 1, 16, m) && dt_valid(&s, 0, 16, m);
        tw_dense_split_choose(&s, m, clusters, none, big, sp);
        assert_int_equal(sp[0], fits ? 16 : rule[0]);
        assert_int_equal(sp[1], fits ? 16 : rule[1]);
        /* test control beats the record, per GEMM, with no workspace bound */
        const unsigned force[2] = {16, 0};
        tw_dense_split_choose(&s, m, clusters, force, rec, sp);
        assert_int_equal(sp[0], 16);
        assert_int_equal(sp[1], 2);
    }
    /* forced factors are clamped to the k-blocks: K = 128 has 2 */
    twell_shape small = twell_shape_default(128, 1024);
    const unsigned force[2] = {12, 40};
    tw_dense_split_choose(&small, 7, clusters, force, NULL, sp);
    assert_int_equal(sp[0], 2);
    assert_int_equal(sp[1], 16); /* N = 1024: 16 k-blocks */
    /* the check's reasons */
    char why[160];
    assert_int_not_equal(tw_dense_split_check(&small, TW_DENSE_UP, 3, 7, why, sizeof why), 0);
    assert_non_null(strstr(why, "k-blocks"));
    assert_int_not_equal(tw_dense_split_check(&s, TW_DENSE_UP, 2, 8192, why, sizeof why), 0);
    assert_non_null(strstr(why, "MiB"));
    assert_int_not_equal(tw_dense_split_check(&s, TW_DENSE_DOWN, 0, 1, why, sizeof why), 0);
    assert_int_equal(tw_dense_split_check(&s, TW_DENSE_DOWN, 16, 1, why, sizeof why), 0);
}

/* A cost where SPLIT_UP = 2, SPLIT_DOWN = 4 is best; counts its calls. */
static size_t dt_calls;
static twell_status dt_measure(void *user, const tw_tune_config *c, double *ms) {
    (void)user;
    dt_calls++;
    double u = (double)tw_tune_config_value(c, "SPLIT_UP", 1);
    double d = (double)tw_tune_config_value(c, "SPLIT_DOWN", 1);
    *ms = 0.1 + 0.01 * fabs(u - 2.0) + 0.01 * fabs(d - 4.0);
    return TWELL_OK;
}

/* A dense record through the store: the engine tunes the space (the rule's config timed first as
 * the default), stores the winner under the ffn_dense key, a second selection reads it without
 * measuring, it decodes to the factors the plan takes, and another bucket or a shape where the
 * winner is not valid has none. */
static void test_dense_tune_store_roundtrip(void **state) {
    (void)state;
    char dir[512];
    tw_test_case_dir("test_dense_tune", "store", dir, sizeof dir);
    twell_ctx *ctx = tw_test_cpu_ctx_at(dir, NULL);
    assert_non_null(ctx);
    tw_tune_device d;
    assert_int_equal(tw_tune_device_preset("h100", &d), 0);
    d.driver_version = 12080;
    tw_tune_problem p = dt_problem(2048, 5632, 1, 200); /* bucket 256 */
    const tw_tune_space *s = tw_tune_space_by_kernel(TW_DENSE_KERNEL);
    tw_tune_callbacks cb = {NULL, NULL, NULL, NULL, dt_measure, NULL};
    tw_tune_options o = tw_tune_options_default();
    tw_tune_record rec;
    assert_int_equal(tw_tune_store_load(ctx, &p, &d, &rec), TWELL_ERR_NOT_FOUND);
    tw_tune_choice ch;
    dt_calls = 0;
    assert_int_equal(tw_tune_select(ctx, &p, &d, s, &cb, &o, 0, &ch), TWELL_OK);
    assert_int_equal(ch.source, TW_TUNE_TUNED);
    assert_true(dt_calls > 0);
    tw_assert_canon(&ch.config, "gemm_sm90:SPLIT_UP=2,SPLIT_DOWN=4");
    /* the default timed is the rule's (3, 8) at this bucket: 0.1 + 0.01 + 0.04 */
    if (!(fabs(ch.default_ms - 0.15) < 1e-12))
        fail_msg("default_ms %g, expected the rule's config (0.15)", ch.default_ms);

    /* stored under (ffn_dense, shape, bucket, device), in the versioned record format */
    assert_int_equal(tw_tune_store_load(ctx, &p, &d, &rec), TWELL_OK);
    tw_assert_canon(&rec.config, "gemm_sm90:SPLIT_UP=2,SPLIT_DOWN=4");
    char *buf = NULL;
    size_t len = 0;
    assert_int_equal(tw_tune_record_encode(&rec, &p, &d, &buf, &len), TWELL_OK);
    assert_true(!strncmp(buf, "twell-tune-record 1\n", 20));
    assert_non_null(strstr(buf, "config gemm_sm90:SPLIT_UP=2,SPLIT_DOWN=4\n"));
    tw_tune_record back;
    assert_int_equal(tw_tune_record_decode(buf, len, &back), TWELL_OK);
    assert_true(tw_tune_config_equal(&back.config, &rec.config));
    free(buf);
    unsigned f[2];
    assert_int_equal(tw_dense_cfg_from_tune(&rec.config, f), 0);
    assert_int_equal(f[0], 2);
    assert_int_equal(f[1], 4);
    /* a plan takes it: the choice for a chunk of this bucket */
    unsigned sp[2];
    const unsigned none[2] = {0, 0};
    tw_dense_split_choose(&p.shape, 200, (unsigned)d.sm_count / 2u, none, f, sp);
    assert_int_equal(sp[0], 2);
    assert_int_equal(sp[1], 4);

    /* a second selection reads it: nothing measured */
    dt_calls = 0;
    assert_int_equal(tw_tune_select(ctx, &p, &d, s, &cb, &o, 0, &ch), TWELL_OK);
    assert_int_equal(ch.source, TW_TUNE_FROM_CACHE);
    assert_int_equal(dt_calls, 0);
    /* other keys have no record: another bucket, non-gated, another op of the same shape */
    tw_tune_problem q = p;
    q.M = 512;
    assert_int_equal(tw_tune_store_load(ctx, &q, &d, &rec), TWELL_ERR_NOT_FOUND);
    q = p;
    q.shape.gated = 0;
    assert_int_equal(tw_tune_store_load(ctx, &q, &d, &rec), TWELL_ERR_NOT_FOUND);
    q = p;
    snprintf(q.op, sizeof q.op, "ffn_infer");
    assert_int_equal(tw_tune_store_load(ctx, &q, &d, &rec), TWELL_ERR_NOT_FOUND);
    /* a stored winner the space no longer accepts for its problem is tuned again */
    tw_tune_problem big = dt_problem(2048, 5632, 1, 4096);
    tw_tune_record stale = {tw_cfg2(TW_DENSE_KERNEL, "SPLIT_UP", 2, "SPLIT_DOWN", 4), 0.1, 0.2, 5};
    assert_int_equal(tw_tune_store_save(ctx, &big, &d, &stale), TWELL_OK);
    assert_false(tw_tune_space_accepts(s, &big, &d, &stale.config)); /* up 2 needs 352 MiB */
    dt_calls = 0;
    assert_int_equal(tw_tune_select(ctx, &big, &d, s, &cb, &o, 0, &ch), TWELL_OK);
    assert_int_equal(ch.source, TW_TUNE_TUNED);
    tw_assert_canon(&ch.config, "gemm_sm90:SPLIT_UP=1,SPLIT_DOWN=4");
    twell_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_tune_space_enumeration),
        cmocka_unit_test(test_dense_tune_choice_falls_back_to_rule),
        cmocka_unit_test(test_dense_tune_store_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
