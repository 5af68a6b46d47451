/* test_gpu_packed_valid.c — packed input validation on the CUDA backend (options.validate_packed,
 * runtime/ops/ffn/packed_check.c, templates/ffn/packed_check.cu.lua): every malformed word of
 * tw_packed_cases.h is rejected with INVALID_ARG naming it, y untouched; valid input gives the
 * bytes of an unvalidated call; random corruptions give the CPU rule's first bad word exactly;
 * with validation off every malformed case runs on every route (small-batch, tiled, its
 * fallback, the row kernels, dense) without a device fault (run it under compute-sanitizer for
 * memory safety: `test_gpu_packed_valid small` keeps the small shape only); a captured call is
 * not validated (one warning). Exits 77 without a device. labels: gpu */
#include "cuda_driver.h"
#include "synth.h"
#include "tw_packed_cases.h"
#include "twell_format.h"
#include "twellrt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu_ref.h"
#include "tw_gpu.h"
#include "tw_log.h"
#include "tw_tc.h"

static twell_ctx *gv_on, *gv_off;
static tw_logbook gv_log;
static int gv_small;

#define GV_OK(ctx, expr) TW_GPU_OK(ctx, expr)

typedef struct {
    size_t M;
    uint32_t K, N, T, C;
    twell_dtype dtype;
    int gated;
} gv_case;

/* A small shape (sanitizer runs), a fp16 non-gated one, and the real width with C = 8. */
static const gv_case gv_cases[] = {
    {9, 512, 1024, 128, 4, TWELL_DTYPE_BF16, 1},
    {40, 256, 512, 64, 2, TWELL_DTYPE_FP16, 0},
    {300, 2048, 5632, 256, 8, TWELL_DTYPE_BF16, 1},
};

typedef struct {
    twell_shape s;
    size_t M, pb, yb;
    tw_synth_ffn *f;
    uint32_t *good, *bad;
    uint16_t *y;
    void *dx, *dwg, *dwu, *dwd, *dy;
    uint32_t *dp;
} gv_data;

static void gv_make(const gv_case *c, gv_data *d) {
    memset(d, 0, sizeof *d);
    twell_shape_init(&d->s, c->K, c->N);
    d->s.T = c->T, d->s.C = c->C, d->s.dtype = c->dtype, d->s.gated = c->gated;
    d->M = c->M;
    tw_synth_params p = tw_synth_params_default();
    p.M = c->M, p.K = c->K, p.N = c->N, p.dtype = c->dtype, p.gated = c->gated;
    p.nnz = (double)c->N / 64.0;
    assert_int_equal(tw_synth_create(NULL, &p, &d->f), TWELL_OK);
    d->pb = twell_packed_bytes(&d->s, c->M);
    d->yb = c->M * c->K * 2u;
    d->good = malloc(d->pb), d->bad = malloc(d->pb), d->y = malloc(d->yb);
    assert_non_null(d->good && d->bad && d->y);
    assert_int_equal(
        tw_gate_pack_ref(NULL, &d->s, c->M, d->f->x, tw_synth_pack_weight(d->f), d->good),
        TWELL_OK);
    size_t wb = (size_t)c->N * c->K * 2u;
    d->dx = tw_gpu_upload(gv_on, d->f->x, d->yb);
    d->dwg = c->gated ? tw_gpu_upload(gv_on, d->f->wg, wb) : NULL;
    d->dwu = tw_gpu_upload(gv_on, d->f->wu, wb);
    d->dwd = tw_gpu_upload(gv_on, d->f->wd, wb);
    GV_OK(gv_on, tw_cuda_malloc(gv_on, d->yb, &d->dy));
    GV_OK(gv_on, tw_cuda_malloc(gv_on, d->pb, (void **)&d->dp));
}

static void gv_free(gv_data *d) {
    tw_cuda_free(gv_on, d->dx), tw_cuda_free(gv_on, d->dwg), tw_cuda_free(gv_on, d->dwu);
    tw_cuda_free(gv_on, d->dwd), tw_cuda_free(gv_on, d->dy), tw_cuda_free(gv_on, d->dp);
    free(d->good), free(d->bad), free(d->y);
    tw_synth_destroy(d->f);
}

static char gv_msg[1024]; /* the message of gv_run's call */

/* y poisoned, packed uploaded, one call on the default stream (its message kept in gv_msg); y
 * downloaded after a sync, which reports a device fault of the call. */
static twell_status gv_run(twell_ctx *ctx, twell_plan *plan, gv_data *d, const uint32_t *packed) {
    GV_OK(ctx, tw_cuda_memset_d8(ctx, d->dy, 0xa5, d->yb, NULL));
    GV_OK(ctx, tw_cuda_memcpy_htod(ctx, d->dp, packed, d->pb));
    twell_status st =
        twell_ffn_infer(plan, d->M, d->dx, d->dp, d->dwg, d->dwu, d->dwd, d->dy, NULL);
    snprintf(gv_msg, sizeof gv_msg, "%s", twell_ctx_errmsg(ctx));
    GV_OK(ctx, tw_cuda_synchronize(ctx));
    GV_OK(ctx, tw_cuda_memcpy_dtoh(ctx, d->y, d->dy, d->yb));
    return st;
}

static int gv_poisoned(const gv_data *d) {
    const unsigned char *c = (const unsigned char *)d->y;
    for (size_t i = 0; i < d->yb; i++)
        if (c[i] != 0xa5)
            return 0;
    return 1;
}

static void test_gpu_packed_valid_cases(void **state) {
    const gv_case *c = *state;
    gv_data d;
    gv_make(c, &d);
    twell_plan *pon = NULL, *poff = NULL;
    GV_OK(gv_on, twell_plan_create(gv_on, &d.s, &pon));
    GV_OK(gv_off, twell_plan_create(gv_off, &d.s, &poff));
    for (size_t i = 0; i < tw_pk_case_count(); i++) {
        memcpy(d.bad, d.good, d.pb);
        tw_pk_case k;
        size_t word;
        char where[128];
        if (tw_pk_case_apply(i, &d.s, d.M, 1, d.bad, &k, &word, where, sizeof where) != 0)
            continue;
        twell_status st = gv_run(gv_on, pon, &d, d.bad);
        const char *msg = gv_msg;
        if (st != TWELL_ERR_INVALID_ARG)
            fail_msg("%s: status %s (%s)", k.name, twell_status_name(st), msg);
        if (!strstr(msg, where) || !strstr(msg, k.expect))
            fail_msg("%s: message \"%s\" lacks \"%s\" or \"%s\"", k.name, msg, where, k.expect);
        if (!gv_poisoned(&d))
            fail_msg("%s: y written by a rejected call", k.name);
    }
    /* valid input: accepted, the same bytes as the unvalidated context's */
    assert_int_equal(gv_run(gv_on, pon, &d, d.good), TWELL_OK);
    uint16_t *first = malloc(d.yb);
    assert_non_null(first);
    memcpy(first, d.y, d.yb);
    assert_int_equal(gv_run(gv_off, poff, &d, d.good), TWELL_OK);
    assert_memory_equal(first, d.y, d.yb);
    free(first);
    twell_plan_destroy(pon);
    twell_plan_destroy(poff);
    gv_free(&d);
}

/* Random corruptions: the kernel's first bad word is the CPU rule's, or both accept. */
static void test_gpu_packed_valid_agrees_with_cpu(void **state) {
    const gv_case *c = *state;
    gv_data d;
    gv_make(c, &d);
    twell_plan *pon = NULL;
    GV_OK(gv_on, twell_plan_create(gv_on, &d.s, &pon));
    uint64_t rng = 0x5eed0000u + c->N;
    int iters = gv_small ? 40 : 300, rejected = 0;
    for (int it = 0; it < iters; it++) {
        memcpy(d.bad, d.good, d.pb);
        tw_pk_mutate(&rng, &d.s, d.M, d.bad, 3);
        tw_packed_fault f;
        int bad = tw_packed_find_fault(&d.s, d.M, d.bad, TW_PKF_ALL, &f);
        twell_status st = gv_run(gv_on, pon, &d, d.bad);
        if (!bad) {
            if (st != TWELL_OK)
                fail_msg("iteration %d: the CPU rule accepts, the GPU says %s (%s)", it,
                         twell_status_name(st), gv_msg);
            continue;
        }
        rejected++;
        char want[256];
        tw_packed_fault_describe(&d.s, &f, want, sizeof want);
        if (st != TWELL_ERR_INVALID_ARG || !strstr(gv_msg, want))
            fail_msg("iteration %d: expected \"%s\", got %s (%s)", it, want, twell_status_name(st),
                     gv_msg);
    }
    printf("# %d of %d random corruptions rejected, each at the CPU rule's word\n", rejected,
           iters);
    assert_true(rejected > iters / 2);
    twell_plan_destroy(pon);
    gv_free(&d);
}

/* Validation off: every malformed case on every route returns without a device fault. */
static void test_gpu_packed_valid_memory_safe(void **state) {
    const gv_case *c = *state;
    gv_data d;
    gv_make(c, &d);
    twell_plan *plan = NULL;
    GV_OK(gv_off, twell_plan_create(gv_off, &d.s, &plan));
    int dense = 0;
    GV_OK(gv_off, tw_test_control(TW_TC_DENSE_AVAILABLE, plan, &dense));
    enum { GV_ROUTES = 6 };
    static const char *const routes[GV_ROUTES] = {"small", "tiled",   "fallback",
                                                  "rows",  "generic", "dense"};
    uint64_t rng = 0xfeedu + c->M;
    for (int r = 0; r < GV_ROUTES; r++) {
        if (r == 5 && !dense)
            continue;
        GV_OK(gv_off, tw_test_control(TW_TC_SMALL_SET_MODE, plan, r == 0 ? "force" : "off"));
        GV_OK(gv_off, twell_plan_set_path(plan, r == 5   ? TWELL_PATH_DENSE
                                                : r == 0 ? TWELL_PATH_AUTO
                                                         : TWELL_PATH_SPARSE));
        GV_OK(gv_off, tw_test_control(TW_TC_FFN_SET_CAPACITY, plan, (size_t)(r == 2 ? 16 : 0),
                                      (size_t)(r == 2 ? 1 : 0)));
        twell_status kst = tw_test_control(TW_TC_FFN_SET_KERNEL, plan,
                                           r == 3   ? "rows"
                                           : r == 4 ? "generic"
                                                    : "auto");
        if (kst == TWELL_ERR_UNSUPPORTED)
            continue; /* no tiled module for this shape: its row kernel does not exist */
        GV_OK(gv_off, kst);
        for (size_t i = 0; i < tw_pk_case_count() + 20; i++) {
            memcpy(d.bad, d.good, d.pb);
            tw_pk_case k = {"random corruption", "", 0};
            size_t word;
            char where[128];
            if (i < tw_pk_case_count()) {
                if (tw_pk_case_apply(i, &d.s, d.M, 1, d.bad, &k, &word, where, sizeof where))
                    continue;
            } else {
                tw_pk_mutate(&rng, &d.s, d.M, d.bad, 8);
            }
            twell_status st = gv_run(gv_off, plan, &d, d.bad);
            if (st != TWELL_OK)
                fail_msg("route %s, %s: %s (%s)", routes[r], k.name, twell_status_name(st), gv_msg);
        }
    }
    twell_plan_destroy(plan);
    gv_free(&d);
}

/* A captured call is not validated: the capture succeeds and one warning says so. */
static void test_gpu_packed_valid_capture_skips(void **state) {
    (void)state;
    gv_data d;
    gv_make(&gv_cases[0], &d);
    twell_plan *plan = NULL;
    GV_OK(gv_on, twell_plan_create(gv_on, &d.s, &plan));
    GV_OK(gv_on, twell_plan_reserve(plan, d.M, (double)d.s.N / 64.0));
    memcpy(d.bad, d.good, d.pb);
    tw_pk_case k;
    size_t word;
    char where[128];
    assert_int_equal(tw_pk_case_apply(1, &d.s, d.M, 0, d.bad, &k, &word, where, sizeof where), 0);
    GV_OK(gv_on, tw_cuda_memcpy_htod(gv_on, d.dp, d.bad, d.pb));
    twell_stream cs = NULL;
    GV_OK(gv_on, tw_cuda_stream_create(gv_on, &cs));
    memset(&gv_log, 0, sizeof gv_log); /* room in gv_log.all for what the capture logs */
    GV_OK(gv_on, tw_cuda_capture_begin(gv_on, cs, 0));
    twell_status st = twell_ffn_infer(plan, d.M, d.dx, d.dp, d.dwg, d.dwu, d.dwd, d.dy, cs);
    tw_cuda_graph g = NULL;
    twell_status end = tw_cuda_capture_end(gv_on, cs, &g);
    GV_OK(gv_on, st);
    GV_OK(gv_on, end);
    assert_true(gv_log.warns > 0);
    assert_non_null(strstr(gv_log.all, "validation is skipped while the stream is being captured"));
    GV_OK(gv_on, tw_cuda_graph_launch(gv_on, g, cs));
    GV_OK(gv_on, tw_cuda_stream_synchronize(gv_on, cs));
    tw_cuda_graph_destroy(gv_on, g);
    /* the same buffer eagerly on that stream: rejected */
    assert_int_equal(twell_ffn_infer(plan, d.M, d.dx, d.dp, d.dwg, d.dwu, d.dwd, d.dy, cs),
                     TWELL_ERR_INVALID_ARG);
    assert_non_null(strstr(twell_ctx_errmsg(gv_on), where));
    tw_cuda_stream_destroy(gv_on, cs);
    twell_plan_destroy(plan);
    gv_free(&d);
}

static twell_ctx *gv_open(twell_switch validate, tw_logbook *log) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CUDA;
    o.validate_packed = validate;
    o.log = tw_test_log;
    o.log_user = log;
    o.log_level = TWELL_LOG_WARN;
    twell_ctx *ctx = NULL;
    twell_status st = twell_ctx_create(&o, &ctx);
    if (st != TWELL_OK) {
        char what[1200];
        snprintf(what, sizeof what, "no usable CUDA device (%s: %s)", twell_status_name(st),
                 log->last);
        tw_gpu_unavailable("test_gpu_packed_valid", what);
    }
    return ctx;
}

int main(int argc, char **argv) {
    static tw_logbook off_log;
    gv_on = gv_open(TWELL_SWITCH_ON, &gv_log);
    gv_off = gv_open(TWELL_SWITCH_OFF, &off_log);
    printf("# %s\n", twell_ctx_device_name(gv_on));
    gv_small = argc > 1 && !strcmp(argv[1], "small");
    size_t ncases = gv_small ? 1 : sizeof gv_cases / sizeof gv_cases[0];
    struct CMUnitTest tests[3 * 3 + 1];
    static char names[3 * 3][96];
    size_t n = 0;
    for (size_t i = 0; i < ncases; i++) {
        const gv_case *c = &gv_cases[i];
        static const char *const what[3] = {"cases", "agrees_with_cpu", "memory_safe"};
        void (*fns[3])(void **) = {test_gpu_packed_valid_cases,
                                   test_gpu_packed_valid_agrees_with_cpu,
                                   test_gpu_packed_valid_memory_safe};
        for (int k = 0; k < 3; k++) {
            snprintf(names[n], sizeof names[n], "test_gpu_packed_valid_%s_M%zu_K%u_N%u_C%u_%s%s",
                     what[k], c->M, c->K, c->N, c->C,
                     c->dtype == TWELL_DTYPE_BF16 ? "bf16" : "fp16", c->gated ? "" : "_ng");
            struct CMUnitTest t = {names[n], fns[k], NULL, NULL, (void *)c};
            tests[n++] = t;
        }
    }
    struct CMUnitTest cap = cmocka_unit_test(test_gpu_packed_valid_capture_skips);
    tests[n++] = cap;
    int rc = _cmocka_run_group_tests("test_gpu_packed_valid", tests, n, NULL, NULL);
    twell_ctx_destroy(gv_on);
    twell_ctx_destroy(gv_off);
    return rc;
}
