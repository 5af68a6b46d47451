/* test_packed_valid.c — packed input validation on the CPU backend (options.validate_packed,
 * TWELL_VALIDATE_PACKED): each malformed word is rejected with a message naming it and y left
 * untouched; valid input gives the same bytes with validation on and off; the option and its
 * environment variable. labels: unit */
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

enum { PV_M = 9, PV_K = 64, PV_N = 512 };

typedef struct {
    twell_shape s;
    tw_synth_ffn *f;
    uint32_t *good, *bad;
    uint16_t *y_ref, *y;
    size_t pb, yb;
} pv_data;

static twell_ctx *pv_ctx(twell_switch validate) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 2;
    o.validate_packed = validate;
    twell_ctx *ctx = NULL;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_OK);
    return ctx;
}

/* Data of shape (T = 128, C = 4: 31 slots) in dtype dt, packed by the CPU backend, and the
 * reference y. */
static void pv_make(twell_dtype dt, int gated, pv_data *d) {
    memset(d, 0, sizeof *d);
    twell_shape_init(&d->s, PV_K, PV_N);
    d->s.T = 128;
    d->s.C = 4;
    d->s.dtype = dt;
    d->s.gated = gated;
    tw_synth_params p = tw_synth_params_default();
    p.M = PV_M, p.K = PV_K, p.N = PV_N, p.dtype = dt, p.gated = gated, p.nnz = 24;
    assert_int_equal(tw_synth_create(NULL, &p, &d->f), TWELL_OK);
    d->pb = twell_packed_bytes(&d->s, PV_M);
    d->yb = (size_t)PV_M * PV_K * 2u;
    d->good = malloc(d->pb), d->bad = malloc(d->pb);
    d->y_ref = malloc(d->yb), d->y = malloc(d->yb);
    assert_non_null(d->good && d->bad && d->y_ref && d->y);
    twell_ctx *ctx = pv_ctx(TWELL_SWITCH_OFF);
    twell_plan *plan = NULL;
    assert_int_equal(twell_plan_create(ctx, &d->s, &plan), TWELL_OK);
    assert_int_equal(
        twell_gate_pack(plan, PV_M, d->f->x, tw_synth_pack_weight(d->f), d->good, NULL), TWELL_OK);
    assert_int_equal(twell_ffn_infer(plan, PV_M, d->f->x, d->good, gated ? d->f->wg : NULL,
                                     d->f->wu, d->f->wd, d->y_ref, NULL),
                     TWELL_OK);
    twell_plan_destroy(plan);
    twell_ctx_destroy(ctx);
}

static void pv_free(pv_data *d) {
    tw_synth_destroy(d->f);
    free(d->good), free(d->bad), free(d->y_ref), free(d->y);
}

static twell_status pv_infer(twell_plan *plan, const pv_data *d, const uint32_t *packed) {
    memset(d->y, 0xa5, d->yb);
    return twell_ffn_infer(plan, PV_M, d->f->x, packed, d->s.gated ? d->f->wg : NULL, d->f->wu,
                           d->f->wd, d->y, NULL);
}

static int pv_poisoned(const pv_data *d) {
    const unsigned char *c = (const unsigned char *)d->y;
    for (size_t i = 0; i < d->yb; i++)
        if (c[i] != 0xa5)
            return 0;
    return 1;
}

/* Every case, validation on: INVALID_ARG naming the word and the fault, y untouched; validation
 * off: the structural faults are still rejected, the others run (memory-safe, y unspecified). */
static void pv_cases(twell_dtype dt, int gated) {
    pv_data d;
    pv_make(dt, gated, &d);
    twell_ctx *on = pv_ctx(TWELL_SWITCH_ON), *off = pv_ctx(TWELL_SWITCH_OFF);
    twell_plan *pon = NULL, *poff = NULL;
    assert_int_equal(twell_plan_create(on, &d.s, &pon), TWELL_OK);
    assert_int_equal(twell_plan_create(off, &d.s, &poff), TWELL_OK);
    size_t ran = 0;
    for (size_t i = 0; i < tw_pk_case_count(); i++) {
        memcpy(d.bad, d.good, d.pb);
        tw_pk_case c;
        size_t word;
        char where[128];
        if (tw_pk_case_apply(i, &d.s, PV_M, 1, d.bad, &c, &word, where, sizeof where) != 0)
            continue;
        ran++;
        twell_status st = pv_infer(pon, &d, d.bad);
        const char *msg = twell_ctx_errmsg(on);
        if (st != TWELL_ERR_INVALID_ARG)
            fail_msg("%s: status %s (%s)", c.name, twell_status_name(st), msg);
        if (!strstr(msg, where) || !strstr(msg, c.expect))
            fail_msg("%s: message \"%s\" lacks \"%s\" or \"%s\"", c.name, msg, where, c.expect);
        char value[16];
        snprintf(value, sizeof value, "is 0x%08x", d.bad[word]);
        if (!strstr(msg, value))
            fail_msg("%s: message \"%s\" does not give the word (%s)", c.name, msg, value);
        if (!pv_poisoned(&d))
            fail_msg("%s: y written by a rejected call", c.name);
        /* the same rule as a pure function */
        tw_packed_fault f;
        assert_int_equal(tw_packed_find_fault(&d.s, PV_M, d.bad, TW_PKF_ALL, &f), 1);
        assert_int_equal(f.word, word);

        st = pv_infer(poff, &d, d.bad);
        if (c.structural) {
            if (st != TWELL_ERR_INVALID_ARG || !strstr(twell_ctx_errmsg(off), "packed word"))
                fail_msg("%s, validation off: %s (%s)", c.name, twell_status_name(st),
                         twell_ctx_errmsg(off));
            assert_true(pv_poisoned(&d));
        } else if (st != TWELL_OK) {
            fail_msg("%s, validation off: %s (%s)", c.name, twell_status_name(st),
                     twell_ctx_errmsg(off));
        }
    }
    assert_true(ran >= tw_pk_case_count() - 1); /* only "column 65535" may not apply */
    /* valid input: OK and the same bytes either way */
    assert_int_equal(pv_infer(pon, &d, d.good), TWELL_OK);
    assert_string_equal(twell_ctx_errmsg(on), "");
    assert_memory_equal(d.y, d.y_ref, d.yb);
    assert_int_equal(pv_infer(poff, &d, d.good), TWELL_OK);
    assert_memory_equal(d.y, d.y_ref, d.yb);
    twell_plan_destroy(pon);
    twell_plan_destroy(poff);
    twell_ctx_destroy(on);
    twell_ctx_destroy(off);
    pv_free(&d);
}

static void test_packed_valid_bf16_gated(void **state) {
    (void)state;
    pv_cases(TWELL_DTYPE_BF16, 1);
}

static void test_packed_valid_fp16_plain(void **state) {
    (void)state;
    pv_cases(TWELL_DTYPE_FP16, 0);
}

/* The value rule follows the dtype: 0x7c01 is a NaN (not the canonical 0x7e00) in fp16 but a
 * number in bf16 (accepted); +Inf and the canonical NaN are valid (gate-pack stores them). */
static void test_packed_valid_dtype_rule(void **state) {
    (void)state;
    twell_shape s;
    twell_shape_init(&s, 64, 256);
    uint32_t tile[32] = {1u, 0x7c010005u};
    assert_int_equal(tw_packed_word_faults(&s, tile, 0, 1), 0);
    tile[1] = 0x7fc00005u; /* bf16's canonical NaN, +Inf: valid; -NaN not */
    assert_int_equal(tw_packed_word_faults(&s, tile, 0, 1), 0);
    tile[1] = 0x7f800005u;
    assert_int_equal(tw_packed_word_faults(&s, tile, 0, 1), 0);
    tile[1] = 0xffc00005u;
    assert_int_equal(tw_packed_word_faults(&s, tile, 0, 1), TW_PKF_VALUE);
    s.dtype = TWELL_DTYPE_FP16;
    tile[1] = 0x7c010005u;
    assert_int_equal(tw_packed_word_faults(&s, tile, 0, 1), TW_PKF_VALUE);
    tile[1] = 0x7e000005u; /* fp16's canonical NaN and +Inf */
    assert_int_equal(tw_packed_word_faults(&s, tile, 0, 1), 0);
    tile[1] = 0x7c000005u;
    assert_int_equal(tw_packed_word_faults(&s, tile, 0, 1), 0);
    tile[1] = 0xfc000005u; /* -Inf */
    assert_int_equal(tw_packed_word_faults(&s, tile, 0, 1), TW_PKF_VALUE);
    tile[1] = 0x00010005u; /* the smallest positive subnormal is a valid value */
    assert_int_equal(tw_packed_word_faults(&s, tile, 0, 1), 0);
    /* a full tile: every slot used, none past the count */
    uint32_t full[32];
    full[0] = 200;
    for (uint32_t i = 1; i < 32; i++)
        full[i] = 0x3c000000u | (i * 3);
    assert_int_equal(tw_packed_tile_fault(&s, full, 0, TW_PKF_ALL, NULL), -1);
    full[0] = 257;
    unsigned f = 0;
    assert_int_equal(tw_packed_tile_fault(&s, full, 0, TW_PKF_ALL, &f), 0);
    assert_int_equal(f, TW_PKF_COUNT);
}

/* TWELL_VALIDATE_PACKED=1 turns it on for a context that leaves the option at DEFAULT; OFF set by
 * the program wins; any other value leaves it off. Read at create only. */
static void test_packed_valid_env(void **state) {
    (void)state;
    pv_data d;
    pv_make(TWELL_DTYPE_BF16, 1, &d);
    memcpy(d.bad, d.good, d.pb);
    tw_pk_case c;
    size_t word;
    char where[128];
    assert_int_equal(tw_pk_case_apply(1, &d.s, PV_M, 0, d.bad, &c, &word, where, sizeof where), 0);
    struct {
        const char *env;
        twell_switch opt;
        twell_status want;
    } rows[] = {
        {"1", TWELL_SWITCH_DEFAULT, TWELL_ERR_INVALID_ARG},
        {"1", TWELL_SWITCH_OFF, TWELL_OK},
        {"0", TWELL_SWITCH_DEFAULT, TWELL_OK},
        {"yes", TWELL_SWITCH_DEFAULT, TWELL_OK},
        {NULL, TWELL_SWITCH_DEFAULT, TWELL_OK},
        {NULL, TWELL_SWITCH_ON, TWELL_ERR_INVALID_ARG},
        {"0", TWELL_SWITCH_ON, TWELL_ERR_INVALID_ARG},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (rows[i].env)
            setenv("TWELL_VALIDATE_PACKED", rows[i].env, 1);
        else
            unsetenv("TWELL_VALIDATE_PACKED");
        twell_ctx *ctx = pv_ctx(rows[i].opt);
        unsetenv("TWELL_VALIDATE_PACKED"); /* read at create: changing it now changes nothing */
        twell_plan *plan = NULL;
        assert_int_equal(twell_plan_create(ctx, &d.s, &plan), TWELL_OK);
        twell_status st = pv_infer(plan, &d, d.bad);
        if (st != rows[i].want)
            fail_msg("row %zu (env %s, option %d): %s (%s)", i, rows[i].env ? rows[i].env : "-",
                     (int)rows[i].opt, twell_status_name(st), twell_ctx_errmsg(ctx));
        twell_plan_destroy(plan);
        twell_ctx_destroy(ctx);
    }
    pv_free(&d);
}

/* An option value that is not a twell_switch fails create. */
static void test_packed_valid_bad_option(void **state) {
    (void)state;
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.validate_packed = (twell_switch)3;
    twell_ctx *ctx = (twell_ctx *)(uintptr_t)1;
    assert_int_equal(twell_ctx_create(&o, &ctx), TWELL_ERR_INVALID_ARG);
    assert_null(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_valid_bf16_gated),
        cmocka_unit_test(test_packed_valid_fp16_plain),
        cmocka_unit_test(test_packed_valid_dtype_rule),
        cmocka_unit_test(test_packed_valid_env),
        cmocka_unit_test(test_packed_valid_bad_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
