/* test_gpu_dense_tune.c — the dense path's split-K factors tuned on the GPU (op ffn_dense): one
 * small shape's bucket tuned through a real plan (every candidate verified against the CPU
 * reference by the tuner: none may fail), its winner stored; a new plan's next dense call of that
 * bucket runs the stored factors (TW_TC_DENSE_LAST_SPLIT) with results matching the CPU
 * reference; a record written for another bucket with factors the rule would not choose is used
 * too; a bucket without a record runs the pure rule (tw_dense_split_rule). Needs sm_90a (the
 * dense GEMMs); exits 77 without a device (fails under TWELL_REQUIRE_GPU=1).
 * labels: gpu */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cpu_ref.h"
#include "cuda_driver.h"
#include "dense_split.h"
#include "dense_tuner.h"
#include "synth.h"
#include "tune_registry.h"
#include "twellrt_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tw_gpu.h"
#include "tw_tc.h"

static twell_ctx *dt_ctx;

#define DT_OK(expr) TW_GPU_OK(dt_ctx, expr)

static double dt_tol(twell_dtype dt) { return dt == TWELL_DTYPE_BF16 ? 5e-3 : 1e-3; }

static tw_tune_problem dt_problem(const twell_shape *s, size_t M) {
    tw_tune_problem p;
    memset(&p, 0, sizeof p);
    snprintf(p.op, sizeof p.op, "%s", TW_DENSE_OP);
    p.shape = *s;
    p.M = tw_tune_m_bucket(M);
    return p;
}

/* A plan of s on TWELL_PATH_DENSE runs gate-pack and ffn_infer on fresh sparse data of M rows
 * (y poisoned first); every row is checked against tw_ffn_infer_ref on the device's packed bytes.
 * ran: the factors the call ran (TW_TC_DENSE_LAST_SPLIT). */
static void dt_run(twell_plan *plan, const twell_shape *s, size_t M, uint64_t seed,
                   unsigned ran[2]) {
    tw_synth_params sp = tw_synth_params_default();
    sp.M = M, sp.K = s->K, sp.N = s->N, sp.dtype = s->dtype, sp.gated = s->gated;
    sp.nnz = 0.01 * s->N;
    sp.seed = seed;
    tw_synth_ffn *f = NULL;
    DT_OK(tw_synth_create(dt_ctx->pool, &sp, &f));
    const size_t K = s->K, words = twell_packed_words(s, M);
    const size_t xb = M * K * 2u, wb = (size_t)s->N * K * 2u;
    void *dx = tw_gpu_upload(dt_ctx, f->x, xb), *du = tw_gpu_upload(dt_ctx, f->wu, wb);
    void *dd = tw_gpu_upload(dt_ctx, f->wd, wb);
    void *dg = s->gated ? tw_gpu_upload(dt_ctx, f->wg, wb) : NULL;
    void *dy = NULL, *dp = NULL;
    DT_OK(tw_cuda_malloc(dt_ctx, xb, &dy));
    DT_OK(tw_cuda_malloc(dt_ctx, words * 4u, &dp));
    DT_OK(tw_cuda_memset_d32(dt_ctx, dy, 0xFFFFFFFFu, xb / 4u, NULL));
    DT_OK(twell_gate_pack(plan, M, dx, s->gated ? dg : du, dp, NULL));
    DT_OK(twell_ffn_infer(plan, M, dx, dp, dg, du, dd, dy, NULL));
    DT_OK(tw_cuda_synchronize(dt_ctx));
    assert_int_equal(tw_tc_plan_path(plan, TW_TC_DENSE_LAST_PATH), TWELL_PATH_DENSE);
    DT_OK(tw_test_control(TW_TC_DENSE_LAST_SPLIT, plan, ran));
    uint32_t *hp = malloc(words * 4u);
    uint16_t *hy = malloc(xb), *ref = malloc(xb);
    size_t *rows = malloc(M * sizeof *rows);
    assert_true(hp && hy && ref && rows);
    DT_OK(tw_cuda_memcpy_dtoh(dt_ctx, hp, dp, words * 4u));
    DT_OK(tw_cuda_memcpy_dtoh(dt_ctx, hy, dy, xb));
    DT_OK(tw_ffn_infer_ref(dt_ctx->pool, s, M, f->x, hp, f->wg, f->wu, f->wd, ref));
    for (size_t i = 0; i < M; i++)
        rows[i] = i;
    tw_gpu_expect_written(s->dtype, hy, M * K, s->K, 0xFFFFu, "y");
    size_t wr = 0;
    double worst = tw_gpu_max_row_err(s->dtype, s->K, hy, rows, M, ref, &wr);
    printf("#   dense call M=%zu ran split %u/%u: max row-rel err %.3e (row %zu), tolerance "
           "%.0e\n",
           M, ran[0], ran[1], worst, wr, dt_tol(s->dtype));
    if (!(worst <= dt_tol(s->dtype)))
        fail_msg("M=%zu split %u/%u: row %zu has row-relative error %.3e", M, ran[0], ran[1], wr,
                 worst);
    void *bufs[] = {dx, dg, du, dd, dy, dp};
    for (size_t i = 0; i < 6; i++)
        tw_cuda_free(dt_ctx, bufs[i]);
    tw_synth_destroy(f);
    free(hp), free(hy), free(ref), free(rows);
}

static twell_plan *dt_plan(const twell_shape *s) {
    twell_plan *plan = NULL;
    DT_OK(twell_plan_create(dt_ctx, s, &plan));
    int avail = 0;
    DT_OK(tw_test_control(TW_TC_DENSE_AVAILABLE, plan, &avail));
    if (!avail) {
        twell_plan_destroy(plan);
        return NULL;
    }
    DT_OK(twell_plan_set_path(plan, TWELL_PATH_DENSE));
    return plan;
}

static void test_gpu_dense_tune_winner_used(void **state) {
    (void)state;
    twell_shape s = twell_shape_default(512, 1536);
    s.dtype = TWELL_DTYPE_BF16;
    const size_t M = 200; /* bucket 256 */
    twell_plan *probe = dt_plan(&s);
    if (!probe) {
        printf("# the dense path needs sm_90a (this device is %s)\n", dt_ctx->cuda->arch);
        skip();
    }
    twell_plan_destroy(probe);
    tw_tune_device d;
    DT_OK(tw_tune_device_of(dt_ctx, &d));
    const unsigned clusters = (unsigned)d.sm_count / TW_DG_CLUSTER;

    /* 1. tune the bucket (retune: measured even when an earlier run stored a winner) */
    tw_tune_choice ch;
    DT_OK(tw_tune_gpu(dt_ctx, TW_DENSE_OP, &s, M, NULL, 1, &ch));
    char canon[TW_TUNE_CANON_MAX];
    tw_tune_config_canon(&ch.config, canon, sizeof canon);
    unsigned rule[2];
    tw_dense_split_rule(&s, tw_tune_m_bucket(M), clusters, rule);
    printf("# ffn_dense K=%u N=%u M=%zu (bucket %zu) on %s: %s %.4f ms; the rule's %u/%u "
           "%.4f ms (%.3fx); %zu of %zu kept measured, %zu failed, %zu skipped, %.2f s\n",
           s.K, s.N, M, tw_tune_m_bucket(M), d.name, canon, ch.ms, rule[0], rule[1], ch.default_ms,
           ch.default_ms / ch.ms, ch.n_measured, ch.pruning.kept, ch.n_failed, ch.n_skipped,
           ch.elapsed_s);
    assert_int_equal(ch.source, TW_TUNE_TUNED);
    assert_true(isfinite(ch.ms) && ch.ms > 0.0);
    if (ch.n_failed)
        fail_msg("%zu split candidates failed to run or to match the CPU reference", ch.n_failed);
    unsigned win[2];
    assert_int_equal(tw_dense_cfg_from_tune(&ch.config, win), 0);

    /* 2. stored under the shape/bucket/device key */
    tw_tune_problem p = dt_problem(&s, M);
    tw_tune_record rec;
    DT_OK(tw_tune_store_load(dt_ctx, &p, &d, &rec));
    assert_true(tw_tune_config_equal(&rec.config, &ch.config));

    /* 3. a new plan's next dense call of the bucket runs the winner, correctly */
    twell_plan *plan = dt_plan(&s);
    assert_non_null(plan);
    unsigned prep[2], ran[2];
    DT_OK(tw_test_control(TW_TC_DENSE_PREPARE, plan, M, prep));
    assert_int_equal(prep[0], win[0]);
    assert_int_equal(prep[1], win[1]);
    dt_run(plan, &s, M, 71, ran);
    if (ran[0] != win[0] || ran[1] != win[1])
        fail_msg("the plan ran %u/%u, the stored winner is %u/%u", ran[0], ran[1], win[0], win[1]);
    twell_plan_destroy(plan);

    /* 4. a record for another bucket (128) with factors the rule would not pick is used as well */
    const size_t M2 = 100;
    tw_dense_split_rule(&s, tw_tune_m_bucket(M2), clusters, rule);
    unsigned mine[2] = {rule[0] == 2 ? 1u : 2u, rule[1] == 4 ? 3u : 4u};
    tw_tune_problem p2 = dt_problem(&s, M2);
    tw_tune_record r2;
    memset(&r2, 0, sizeof r2);
    assert_int_equal(tw_tune_config_init(&r2.config, TW_DENSE_KERNEL), 0);
    assert_int_equal(tw_tune_config_set(&r2.config, "SPLIT_UP", mine[0]), 0);
    assert_int_equal(tw_tune_config_set(&r2.config, "SPLIT_DOWN", mine[1]), 0);
    r2.ms = 0.05, r2.default_ms = 0.06, r2.time = 1;
    assert_true(tw_tune_space_accepts(&tw_dense_space_split, &p2, &d, &r2.config));
    DT_OK(tw_tune_store_save(dt_ctx, &p2, &d, &r2));
    plan = dt_plan(&s);
    dt_run(plan, &s, M2, 72, ran);
    if (ran[0] != mine[0] || ran[1] != mine[1])
        fail_msg("bucket 128 ran %u/%u, its record says %u/%u", ran[0], ran[1], mine[0], mine[1]);

    /* 5. a bucket without a record (64) runs the pure rule */
    const size_t M3 = 40;
    tw_tune_problem p3 = dt_problem(&s, M3);
    if (tw_tune_store_load(dt_ctx, &p3, &d, &rec) == TWELL_OK)
        fail_msg("bucket 64 has a record: this test never stores one");
    tw_dense_split_rule(&s, M3, clusters, rule);
    dt_run(plan, &s, M3, 73, ran);
    if (ran[0] != rule[0] || ran[1] != rule[1])
        fail_msg("bucket 64 (no record) ran %u/%u, the rule says %u/%u", ran[0], ran[1], rule[0],
                 rule[1]);
    twell_plan_destroy(plan);
}

int main(void) {
    dt_ctx = tw_gpu_open_or_skip("test_gpu_dense_tune");
    printf("# %s\n", twell_ctx_device_name(dt_ctx));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_dense_tune_winner_used),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    twell_ctx_destroy(dt_ctx);
    return rc;
}
