/* test_validate.c — every argument check of the public API: the status is INVALID_ARG, the
 * message names the bad argument, and poisoned outputs stay untouched.
 * labels: unit */
#include "synth.h"
#include "twellrt.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

enum { TV_M = 5, TV_K = 32, TV_N = 128 };

/* One CPU context, a gated and a non-gated plan, data and poisoned outputs. */
typedef struct {
    twell_ctx *ctx;
    twell_plan *gated, *plain;
    tw_synth_ffn *f;
    uint32_t *packed;
    uint16_t *y, *dx, *dy;
    float *dwg, *dwu, *dwd, stats[2];
} tv_fix;

static const unsigned char TV_POISON = 0xa5;

static void tv_poison(tv_fix *t) {
    size_t pb = twell_packed_bytes(twell_plan_shape(t->gated), TV_M);
    memset(t->packed, TV_POISON, pb);
    memset(t->y, TV_POISON, TV_M * TV_K * 2);
    memset(t->dx, TV_POISON, TV_M * TV_K * 2);
    memset(t->dwg, TV_POISON, TV_N * TV_K * 4);
    memset(t->dwu, TV_POISON, TV_N * TV_K * 4);
    memset(t->dwd, TV_POISON, TV_N * TV_K * 4);
    memset(t->stats, TV_POISON, sizeof t->stats);
}

static int tv_poisoned(const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != TV_POISON)
            return 0;
    return 1;
}

/* The call failed with INVALID_ARG, the message names `what`, and no output changed. */
static void tv_expect(tv_fix *t, twell_status st, const char *what, int line) {
    const char *msg = twell_ctx_errmsg(t->ctx);
    if (st != TWELL_ERR_INVALID_ARG)
        fail_msg("line %d: status %s, expected TWELL_ERR_INVALID_ARG (%s)", line,
                 twell_status_name(st), msg);
    if (!strstr(msg, what))
        fail_msg("line %d: message \"%s\" does not name \"%s\"", line, msg, what);
    size_t pb = twell_packed_bytes(twell_plan_shape(t->gated), TV_M);
    if (!tv_poisoned(t->packed, pb) || !tv_poisoned(t->y, TV_M * TV_K * 2) ||
        !tv_poisoned(t->dx, TV_M * TV_K * 2) || !tv_poisoned(t->dwg, TV_N * TV_K * 4) ||
        !tv_poisoned(t->dwu, TV_N * TV_K * 4) || !tv_poisoned(t->dwd, TV_N * TV_K * 4) ||
        !tv_poisoned(t->stats, sizeof t->stats))
        fail_msg("line %d: an output was written by a call that failed (%s)", line, msg);
}
#define TV_EXPECT(t, call, what) tv_expect((t), (call), (what), __LINE__)

static int tv_setup(void **state) {
    tv_fix *t = calloc(1, sizeof *t);
    assert_non_null(t);
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 2;
    assert_int_equal(twell_ctx_create(&o, &t->ctx), TWELL_OK);
    twell_shape s;
    twell_shape_init(&s, TV_K, TV_N);
    s.T = 64;
    assert_int_equal(twell_plan_create(t->ctx, &s, &t->gated), TWELL_OK);
    s.gated = 0;
    assert_int_equal(twell_plan_create(t->ctx, &s, &t->plain), TWELL_OK);
    tw_synth_params p = tw_synth_params_default();
    p.M = TV_M;
    p.K = TV_K;
    p.N = TV_N;
    p.nnz = 12;
    assert_int_equal(tw_synth_create(NULL, &p, &t->f), TWELL_OK);
    t->packed = malloc(twell_packed_bytes(&s, TV_M));
    t->y = malloc(TV_M * TV_K * 2);
    t->dx = malloc(TV_M * TV_K * 2);
    t->dy = malloc(TV_M * TV_K * 2);
    t->dwg = malloc(TV_N * TV_K * 4);
    t->dwu = malloc(TV_N * TV_K * 4);
    t->dwd = malloc(TV_N * TV_K * 4);
    assert_non_null(t->packed && t->y && t->dx && t->dy && t->dwg && t->dwu && t->dwd);
    for (size_t i = 0; i < TV_M * TV_K; i++)
        t->dy[i] = t->f->x[(i * 7) % (TV_M * TV_K)]; /* any finite, non-zero gradient */
    tv_poison(t);
    *state = t;
    return 0;
}

static int tv_teardown(void **state) {
    tv_fix *t = *state;
    twell_plan_destroy(t->gated);
    twell_plan_destroy(t->plain);
    twell_ctx_destroy(t->ctx);
    tw_synth_destroy(t->f);
    free(t->packed), free(t->y), free(t->dx), free(t->dy), free(t->dwg), free(t->dwu), free(t->dwd),
        free(t);
    return 0;
}

/* Unsupported shapes: the message names the field and value, plan creation fails cleanly. */
static void test_validate_shapes(void **state) {
    tv_fix *t = *state;
    struct {
        uint32_t K, N, T, C;
        int dtype;
        const char *what;
    } bad[] = {
        {2048, 5632, 32, 8, 0, "shape.T = 32"},      {2048, 5632, 512, 8, 0, "shape.T = 512"},
        {2048, 5760, 96, 8, 0, "shape.T = 96"},      {2048, 5632, 256, 3, 0, "shape.C = 3"},
        {2048, 5632, 256, 16, 0, "shape.C = 16"},    {2048, 5600, 256, 8, 0, "shape.N = 5600"},
        {2048, 65792, 256, 8, 0, "shape.N = 65792"}, {2048, 0, 256, 8, 0, "shape.N = 0"},
        {0, 5632, 256, 8, 0, "shape.K = 0"},         {24, 5632, 256, 8, 0, "shape.K = 24"},
        {2048, 5632, 256, 8, 2, "shape.dtype = 2"},  {2048, 5632, 256, 8, -1, "shape.dtype = -1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        twell_shape s;
        twell_shape_init(&s, bad[i].K, bad[i].N);
        s.T = bad[i].T;
        s.C = bad[i].C;
        s.dtype = (twell_dtype)bad[i].dtype;
        assert_int_equal(twell_shape_check(NULL, &s), TWELL_ERR_INVALID_ARG);
        assert_int_equal(twell_shape_check(t->ctx, &s), TWELL_ERR_INVALID_ARG);
        if (!strstr(twell_ctx_errmsg(t->ctx), bad[i].what))
            fail_msg("shape %zu: message \"%s\" does not name \"%s\"", i, twell_ctx_errmsg(t->ctx),
                     bad[i].what);
        twell_plan *plan = (twell_plan *)(uintptr_t)1;
        assert_int_equal(twell_plan_create(t->ctx, &s, &plan), TWELL_ERR_INVALID_ARG);
        assert_null(plan);
        assert_non_null(strstr(twell_ctx_errmsg(t->ctx), bad[i].what));
        assert_int_equal(twell_packed_bytes(&s, 4), 0);
    }
    /* The edges of the supported set pass. */
    twell_shape ok[3];
    twell_shape_init(&ok[0], 16, 64);
    twell_shape_init(&ok[1], 48, 65536);
    twell_shape_init(&ok[2], 2048, 128);
    ok[0].T = 64, ok[0].C = 2, ok[0].dtype = TWELL_DTYPE_FP16;
    ok[1].T = 256, ok[1].C = 8, ok[1].gated = 0;
    ok[2].T = 128, ok[2].C = 4;
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(twell_shape_check(t->ctx, &ok[i]), TWELL_OK);
        assert_string_equal(twell_ctx_errmsg(t->ctx), "");
    }
    TV_EXPECT(t, twell_shape_check(t->ctx, NULL), "shape is NULL");
    twell_plan *plan = NULL;
    TV_EXPECT(t, twell_plan_create(t->ctx, NULL, &plan), "shape is NULL");
    TV_EXPECT(t, twell_plan_create(t->ctx, &ok[0], NULL), "out is NULL");
    assert_int_equal(twell_plan_create(NULL, &ok[0], &plan), TWELL_ERR_INVALID_ARG);
    assert_null(plan);
}

static void test_validate_gate_pack(void **state) {
    tv_fix *t = *state;
    const uint16_t *x = t->f->x, *wg = t->f->wg;
    assert_int_equal(twell_gate_pack(NULL, TV_M, x, wg, t->packed, NULL), TWELL_ERR_INVALID_ARG);
    TV_EXPECT(t, twell_gate_pack(t->gated, 0, x, wg, t->packed, NULL), "M is 0");
    TV_EXPECT(t, twell_gate_pack(t->gated, SIZE_MAX / 8, x, wg, t->packed, NULL), "M = ");
    TV_EXPECT(t, twell_gate_pack(t->gated, TV_M, NULL, wg, t->packed, NULL),
              "twell_gate_pack: x is NULL");
    TV_EXPECT(t, twell_gate_pack(t->gated, TV_M, x, NULL, t->packed, NULL), "w (Wg) is NULL");
    TV_EXPECT(t, twell_gate_pack(t->plain, TV_M, x, NULL, t->packed, NULL), "w (Wu) is NULL");
    TV_EXPECT(t, twell_gate_pack(t->gated, TV_M, x, wg, NULL, NULL), "packed is NULL");
    /* packed written over its own input */
    uint16_t *xcopy =
        malloc(twell_packed_bytes(twell_plan_shape(t->gated), TV_M) + TV_M * TV_K * 2);
    assert_non_null(xcopy);
    memcpy(xcopy, x, TV_M * TV_K * 2);
    assert_int_equal(twell_gate_pack(t->gated, TV_M, xcopy, wg, (uint32_t *)(void *)xcopy, NULL),
                     TWELL_ERR_INVALID_ARG);
    assert_non_null(strstr(twell_ctx_errmsg(t->ctx), "packed overlaps x"));
    assert_memory_equal(xcopy, x, TV_M * TV_K * 2);
    free(xcopy);
    /* A valid call succeeds and clears the message. */
    assert_int_equal(twell_gate_pack(t->gated, TV_M, x, wg, t->packed, NULL), TWELL_OK);
    assert_string_equal(twell_ctx_errmsg(t->ctx), "");
    tv_poison(t);
}

static void test_validate_ffn_infer(void **state) {
    tv_fix *t = *state;
    const tw_synth_ffn *f = t->f;
    uint32_t *packed = malloc(twell_packed_bytes(twell_plan_shape(t->gated), TV_M));
    assert_non_null(packed);
    assert_int_equal(twell_gate_pack(t->gated, TV_M, f->x, f->wg, packed, NULL), TWELL_OK);
    twell_plan *g = t->gated;
    const void *x = f->x, *wg = f->wg, *wu = f->wu, *wd = f->wd;
    assert_int_equal(twell_ffn_infer(NULL, TV_M, x, packed, wg, wu, wd, t->y, NULL),
                     TWELL_ERR_INVALID_ARG);
    TV_EXPECT(t, twell_ffn_infer(g, 0, x, packed, wg, wu, wd, t->y, NULL), "M is 0");
    TV_EXPECT(t, twell_ffn_infer(g, SIZE_MAX / 4, x, packed, wg, wu, wd, t->y, NULL), "too large");
    TV_EXPECT(t, twell_ffn_infer(g, TV_M, NULL, packed, wg, wu, wd, t->y, NULL),
              "twell_ffn_infer: x is NULL");
    TV_EXPECT(t, twell_ffn_infer(g, TV_M, x, NULL, wg, wu, wd, t->y, NULL), "packed is NULL");
    TV_EXPECT(t, twell_ffn_infer(g, TV_M, x, packed, NULL, wu, wd, t->y, NULL), "wg");
    TV_EXPECT(t, twell_ffn_infer(g, TV_M, x, packed, wg, NULL, wd, t->y, NULL), "wu is NULL");
    TV_EXPECT(t, twell_ffn_infer(g, TV_M, x, packed, wg, wu, NULL, t->y, NULL), "wd is NULL");
    TV_EXPECT(t, twell_ffn_infer(g, TV_M, x, packed, wg, wu, wd, NULL, NULL), "y is NULL");
    TV_EXPECT(t, twell_ffn_infer(t->plain, TV_M, x, packed, wg, wu, wd, t->y, NULL),
              "wg must be NULL for a non-gated plan");
    /* y aliasing an input */
    uint16_t *ycopy = malloc(TV_M * TV_K * 2);
    assert_non_null(ycopy);
    memcpy(ycopy, x, TV_M * TV_K * 2);
    assert_int_equal(twell_ffn_infer(g, TV_M, ycopy, packed, wg, wu, wd, ycopy, NULL),
                     TWELL_ERR_INVALID_ARG);
    assert_non_null(strstr(twell_ctx_errmsg(t->ctx), "y overlaps x"));
    assert_memory_equal(ycopy, x, TV_M * TV_K * 2);
    free(ycopy);
    /* A malformed packed buffer (count > T) is rejected before y is written. */
    uint32_t saved = packed[3 * (TV_N / 8)];
    packed[3 * (TV_N / 8)] = 1000;
    TV_EXPECT(t, twell_ffn_infer(g, TV_M, x, packed, wg, wu, wd, t->y, NULL),
              "packed word 48 (row 3, row-tile 0, slot 0) is 0x000003e8: the count 1000 exceeds T");
    packed[3 * (TV_N / 8)] = saved;
    assert_int_equal(twell_ffn_infer(g, TV_M, x, packed, wg, wu, wd, t->y, NULL), TWELL_OK);
    assert_string_equal(twell_ctx_errmsg(t->ctx), "");
    free(packed);
    tv_poison(t);
}

/* twell_ffn_layer: its checks, and on the CPU backend exactly twell_gate_pack into the scratch
 * then twell_ffn_infer from it (gated and non-gated). */
static void test_validate_ffn_layer(void **state) {
    tv_fix *t = *state;
    const tw_synth_ffn *f = t->f;
    size_t pb = twell_packed_bytes(twell_plan_shape(t->gated), TV_M), yb = TV_M * TV_K * 2;
    uint32_t *packed = malloc(pb), *scratch = malloc(pb);
    uint16_t *y = malloc(yb);
    assert_true(packed && scratch && y);
    twell_plan *g = t->gated;
    const void *x = f->x, *wg = f->wg, *wu = f->wu, *wd = f->wd;
    assert_int_equal(twell_ffn_layer(NULL, TV_M, x, wg, wu, wd, t->y, scratch, NULL),
                     TWELL_ERR_INVALID_ARG);
    TV_EXPECT(t, twell_ffn_layer(g, 0, x, wg, wu, wd, t->y, scratch, NULL), "M is 0");
    TV_EXPECT(t, twell_ffn_layer(g, TV_M, NULL, wg, wu, wd, t->y, scratch, NULL),
              "twell_ffn_layer: x is NULL");
    TV_EXPECT(t, twell_ffn_layer(g, TV_M, x, NULL, wu, wd, t->y, scratch, NULL), "wg");
    TV_EXPECT(t, twell_ffn_layer(g, TV_M, x, wg, NULL, wd, t->y, scratch, NULL), "wu is NULL");
    TV_EXPECT(t, twell_ffn_layer(g, TV_M, x, wg, wu, NULL, t->y, scratch, NULL), "wd is NULL");
    TV_EXPECT(t, twell_ffn_layer(g, TV_M, x, wg, wu, wd, NULL, scratch, NULL), "y is NULL");
    TV_EXPECT(t, twell_ffn_layer(g, TV_M, x, wg, wu, wd, t->y, NULL, NULL), "packed is NULL");
    TV_EXPECT(t, twell_ffn_layer(t->plain, TV_M, x, wg, wu, wd, t->y, scratch, NULL),
              "wg must be NULL for a non-gated plan");
    /* the scratch may not overlap y (both are written) */
    uint16_t *both = malloc(yb + pb);
    assert_non_null(both);
    TV_EXPECT(t, twell_ffn_layer(g, TV_M, x, wg, wu, wd, both, (uint32_t *)(both + 8), NULL),
              "y overlaps packed");
    free(both);
    /* the two entry points' result, bitwise, and their packed activation in the scratch */
    for (int gated = 1; gated >= 0; gated--) {
        twell_plan *p = gated ? t->gated : t->plain;
        const void *pw = gated ? wg : wu, *lwg = gated ? wg : NULL;
        assert_int_equal(twell_gate_pack(p, TV_M, x, pw, packed, NULL), TWELL_OK);
        assert_int_equal(twell_ffn_infer(p, TV_M, x, packed, lwg, wu, wd, y, NULL), TWELL_OK);
        memset(scratch, TV_POISON, pb);
        memset(t->y, TV_POISON, yb);
        assert_int_equal(twell_ffn_layer(p, TV_M, x, lwg, wu, wd, t->y, scratch, NULL), TWELL_OK);
        assert_string_equal(twell_ctx_errmsg(t->ctx), "");
        assert_memory_equal(scratch, packed, pb);
        assert_memory_equal(t->y, y, yb);
    }
    free(packed);
    free(scratch);
    free(y);
    tv_poison(t);
}

static void test_validate_plan_and_state(void **state) {
    tv_fix *t = *state;
    assert_int_equal(twell_plan_set_path(NULL, TWELL_PATH_AUTO), TWELL_ERR_INVALID_ARG);
    TV_EXPECT(t, twell_plan_set_path(t->gated, (twell_path)3), "path = 3");
    assert_int_equal(twell_plan_set_path(t->gated, TWELL_PATH_SPARSE), TWELL_OK);
    assert_null(twell_plan_shape(NULL));
    twell_train_state *st = (twell_train_state *)(uintptr_t)1;
    TV_EXPECT(t, twell_train_state_create(t->plain, &st), "plan is not gated");
    assert_null(st);
    TV_EXPECT(t, twell_train_state_create(t->gated, NULL), "out is NULL");
    assert_int_equal(twell_train_state_create(NULL, &st), TWELL_ERR_INVALID_ARG);
    assert_null(st);
    assert_int_equal(twell_train_state_create(t->gated, &st), TWELL_OK);
    assert_non_null(st);
    assert_int_equal(twell_train_state_bytes(st), 0);
    assert_int_equal(twell_train_state_bytes(NULL), 0);
    twell_train_state_destroy(st);
    twell_train_state_destroy(NULL);
    /* twell_plan_tune: checked arguments; on the CPU backend nothing to tune */
    assert_int_equal(twell_plan_tune(NULL, 1, 0), TWELL_ERR_INVALID_ARG);
    TV_EXPECT(t, twell_plan_tune(t->gated, 0, 0), "M is 0");
    TV_EXPECT(t, twell_plan_tune(t->gated, 64, TWELL_TUNE_STORED_ONLY | TWELL_TUNE_RETUNE),
              "exclude each other");
    TV_EXPECT(t, twell_plan_tune(t->gated, 64, 4u), "flags 0x4");
    assert_int_equal(twell_plan_tune(t->gated, 64, 0), TWELL_OK);
    assert_string_equal(twell_ctx_errmsg(t->ctx), "");
    assert_int_equal(twell_plan_tune(t->plain, 3000, TWELL_TUNE_STORED_ONLY), TWELL_OK);
    assert_int_equal(twell_plan_tune(t->plain, 1, TWELL_TUNE_RETUNE), TWELL_OK);
}

static void test_validate_forward_train(void **state) {
    tv_fix *t = *state;
    const tw_synth_ffn *f = t->f;
    twell_plan *g = t->gated;
    const void *x = f->x, *wg = f->wg, *wu = f->wu, *wd = f->wd;
    twell_train_state *st = NULL, *other = NULL;
    assert_int_equal(twell_train_state_create(g, &st), TWELL_OK);
    twell_shape s2 = *twell_plan_shape(g);
    twell_plan *g2 = NULL;
    assert_int_equal(twell_plan_create(t->ctx, &s2, &g2), TWELL_OK);
    assert_int_equal(twell_train_state_create(g2, &other), TWELL_OK);
    float *stats = t->stats;
    assert_int_equal(twell_ffn_forward_train(NULL, TV_M, x, wg, wu, wd, t->y, stats, st, NULL),
                     TWELL_ERR_INVALID_ARG);
    TV_EXPECT(t, twell_ffn_forward_train(t->plain, TV_M, x, wg, wu, wd, t->y, stats, st, NULL),
              "plan is not gated");
    TV_EXPECT(t, twell_ffn_forward_train(g, TV_M, x, wg, wu, wd, t->y, stats, NULL, NULL),
              "state is NULL");
    TV_EXPECT(t, twell_ffn_forward_train(g, TV_M, x, wg, wu, wd, t->y, stats, other, NULL),
              "state was created for another plan");
    TV_EXPECT(t, twell_ffn_forward_train(g, 0, x, wg, wu, wd, t->y, stats, st, NULL), "M is 0");
    TV_EXPECT(t, twell_ffn_forward_train(g, TV_M, NULL, wg, wu, wd, t->y, stats, st, NULL),
              "x is NULL");
    TV_EXPECT(t, twell_ffn_forward_train(g, TV_M, x, NULL, wu, wd, t->y, stats, st, NULL),
              "wg is NULL");
    TV_EXPECT(t, twell_ffn_forward_train(g, TV_M, x, wg, NULL, wd, t->y, stats, st, NULL),
              "wu is NULL");
    TV_EXPECT(t, twell_ffn_forward_train(g, TV_M, x, wg, wu, NULL, t->y, stats, st, NULL),
              "wd is NULL");
    TV_EXPECT(t, twell_ffn_forward_train(g, TV_M, x, wg, wu, wd, NULL, stats, st, NULL),
              "y is NULL");
    TV_EXPECT(t, twell_ffn_forward_train(g, TV_M, x, wg, wu, wd, t->y, (float *)t->y, st, NULL),
              "y overlaps stats");
    assert_int_equal(twell_train_state_bytes(st), 0); /* nothing saved by failed calls */
    twell_train_state_destroy(other);
    twell_plan_destroy(g2);
    twell_train_state_destroy(st);
}

static void test_validate_backward(void **state) {
    tv_fix *t = *state;
    const tw_synth_ffn *f = t->f;
    twell_plan *g = t->gated;
    const void *x = f->x, *wg = f->wg, *wu = f->wu, *wd = f->wd, *dy = t->dy;
    twell_train_state *st = NULL;
    assert_int_equal(twell_train_state_create(g, &st), TWELL_OK);
    uint16_t *dx = t->dx;
    float *dwg = t->dwg, *dwu = t->dwu, *dwd = t->dwd;
    /* No forward saved yet. */
    TV_EXPECT(t, twell_ffn_backward(g, st, TV_M, x, wg, wu, wd, dy, 0.1f, dx, dwg, dwu, dwd, NULL),
              "state holds no forward");
    uint16_t *y = malloc(TV_M * TV_K * 2);
    assert_non_null(y);
    twell_status fs = twell_ffn_forward_train(g, TV_M, x, wg, wu, wd, y, NULL, st, NULL);
    if (fs != TWELL_OK)
        fail_msg("forward: %s: %s", twell_status_name(fs), twell_ctx_errmsg(t->ctx));
    free(y);
    assert_int_equal(
        twell_ffn_backward(NULL, st, TV_M, x, wg, wu, wd, dy, 0.1f, dx, dwg, dwu, dwd, NULL),
        TWELL_ERR_INVALID_ARG);
    TV_EXPECT(
        t, twell_ffn_backward(t->plain, st, TV_M, x, wg, wu, wd, dy, 0.1f, dx, dwg, dwu, dwd, NULL),
        "plan is not gated");
    TV_EXPECT(t,
              twell_ffn_backward(g, NULL, TV_M, x, wg, wu, wd, dy, 0.1f, dx, dwg, dwu, dwd, NULL),
              "state is NULL");
    TV_EXPECT(t,
              twell_ffn_backward(g, st, TV_M - 1, x, wg, wu, wd, dy, 0.1f, dx, dwg, dwu, dwd, NULL),
              "M = 4 differs from the saved forward's M = 5");
    TV_EXPECT(t, twell_ffn_backward(g, st, 0, x, wg, wu, wd, dy, 0.1f, dx, dwg, dwu, dwd, NULL),
              "M is 0");
    TV_EXPECT(t,
              twell_ffn_backward(g, st, TV_M, NULL, wg, wu, wd, dy, 0.1f, dx, dwg, dwu, dwd, NULL),
              "x is NULL");
    TV_EXPECT(t,
              twell_ffn_backward(g, st, TV_M, x, NULL, wu, wd, dy, 0.1f, dx, dwg, dwu, dwd, NULL),
              "wg is NULL");
    TV_EXPECT(t,
              twell_ffn_backward(g, st, TV_M, x, wg, NULL, wd, dy, 0.1f, dx, dwg, dwu, dwd, NULL),
              "wu is NULL");
    TV_EXPECT(t,
              twell_ffn_backward(g, st, TV_M, x, wg, wu, NULL, dy, 0.1f, dx, dwg, dwu, dwd, NULL),
              "wd is NULL");
    TV_EXPECT(t,
              twell_ffn_backward(g, st, TV_M, x, wg, wu, wd, NULL, 0.1f, dx, dwg, dwu, dwd, NULL),
              "dy is NULL");
    static const float bad_lambda[] = {-0.5f, -0.0f * 0.0f - 1e-30f, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad_lambda / sizeof bad_lambda[0]; i++)
        TV_EXPECT(t,
                  twell_ffn_backward(g, st, TV_M, x, wg, wu, wd, dy, bad_lambda[i], dx, dwg, dwu,
                                     dwd, NULL),
                  "lambda");
    TV_EXPECT(t,
              twell_ffn_backward(g, st, TV_M, x, wg, wu, wd, dy, 0.1f, NULL, dwg, dwu, dwd, NULL),
              "dx is NULL");
    TV_EXPECT(t, twell_ffn_backward(g, st, TV_M, x, wg, wu, wd, dy, 0.1f, dx, NULL, dwu, dwd, NULL),
              "dwg is NULL");
    TV_EXPECT(t, twell_ffn_backward(g, st, TV_M, x, wg, wu, wd, dy, 0.1f, dx, dwg, NULL, dwd, NULL),
              "dwu is NULL");
    TV_EXPECT(t, twell_ffn_backward(g, st, TV_M, x, wg, wu, wd, dy, 0.1f, dx, dwg, dwu, NULL, NULL),
              "dwd is NULL");
    TV_EXPECT(t, twell_ffn_backward(g, st, TV_M, x, wg, wu, wd, dy, 0.1f, dx, dwg, dwg, dwd, NULL),
              "dwg overlaps dwu");
    /* A state of another plan is refused even with a forward saved in it. */
    twell_shape s2 = *twell_plan_shape(g);
    twell_plan *g2 = NULL;
    assert_int_equal(twell_plan_create(t->ctx, &s2, &g2), TWELL_OK);
    TV_EXPECT(t, twell_ffn_backward(g2, st, TV_M, x, wg, wu, wd, dy, 0.1f, dx, dwg, dwu, dwd, NULL),
              "state was created for another plan");
    twell_plan_destroy(g2);
    /* lambda = 0 is valid, and the call clears the message. */
    assert_int_equal(
        twell_ffn_backward(g, st, TV_M, x, wg, wu, wd, dy, 0.0f, dx, dwg, dwu, dwd, NULL),
        TWELL_OK);
    assert_string_equal(twell_ctx_errmsg(t->ctx), "");
    twell_train_state_destroy(st);
    tv_poison(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_shapes),
        cmocka_unit_test(test_validate_gate_pack),
        cmocka_unit_test(test_validate_ffn_infer),
        cmocka_unit_test(test_validate_ffn_layer),
        cmocka_unit_test(test_validate_plan_and_state),
        cmocka_unit_test(test_validate_forward_train),
        cmocka_unit_test(test_validate_backward),
    };
    return cmocka_run_group_tests(tests, tv_setup, tv_teardown);
}
