/*
 * fuzz_packed.c — the packed target (tw_fuzz.h): packed input validation on small shapes, the
 * full and the structural rule against each other, tw_unpack_row and the CPU backend.
 */
#include "tw_fuzz_int.h"

#include "cpu_ref.h"
#include "synth.h"
#include "tw_packed_cases.h"
#include "twell_format.h"
#include "twellrt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- packed input validation ---- */

enum { TW_FZ_SHAPES = 3, TW_FZ_MAX_M = 6 };

typedef struct {
    twell_shape s;
    tw_synth_ffn *f;
    twell_plan *on, *off;
} tw_fz_shape;

static tw_fz_shape tw_fz_sh[TW_FZ_SHAPES];
static twell_ctx *tw_fz_on, *tw_fz_off;
static uint32_t *tw_fz_words;
static uint16_t *tw_fz_y_on, *tw_fz_y_off, *tw_fz_dense;

static twell_ctx *tw_fz_cpu(twell_switch validate) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    o.validate_packed = validate;
    twell_ctx *ctx = NULL;
    return twell_ctx_create(&o, &ctx) == TWELL_OK ? ctx : NULL;
}

static int tw_fz_packed_init(void) {
    /* shapes with every C, T = 64 / 128 / 256, both dtypes, gated and not */
    static const uint32_t dims[TW_FZ_SHAPES][4] = {
        {32, 128, 64, 2}, {16, 256, 128, 8}, {64, 512, 256, 4}};
    tw_fz_on = tw_fz_cpu(TWELL_SWITCH_ON);
    tw_fz_off = tw_fz_cpu(TWELL_SWITCH_OFF);
    if (!tw_fz_on || !tw_fz_off)
        return -1;
    size_t words = 0, K = 0, N = 0;
    for (int i = 0; i < TW_FZ_SHAPES; i++) {
        tw_fz_shape *z = &tw_fz_sh[i];
        twell_shape_init(&z->s, dims[i][0], dims[i][1]);
        z->s.T = dims[i][2], z->s.C = dims[i][3];
        z->s.dtype = i == 1 ? TWELL_DTYPE_FP16 : TWELL_DTYPE_BF16;
        z->s.gated = i != 1;
        tw_synth_params p = tw_synth_params_default();
        p.M = TW_FZ_MAX_M, p.K = z->s.K, p.N = z->s.N, p.dtype = z->s.dtype, p.gated = z->s.gated;
        p.nnz = (double)z->s.N / 16.0;
        if (tw_synth_create(NULL, &p, &z->f) != TWELL_OK ||
            twell_plan_create(tw_fz_on, &z->s, &z->on) != TWELL_OK ||
            twell_plan_create(tw_fz_off, &z->s, &z->off) != TWELL_OK)
            return -1;
        size_t w = twell_packed_words(&z->s, TW_FZ_MAX_M);
        words = w > words ? w : words;
        K = z->s.K > K ? z->s.K : K;
        N = z->s.N > N ? z->s.N : N;
    }
    tw_fz_words = malloc(words * sizeof *tw_fz_words);
    tw_fz_y_on = malloc(TW_FZ_MAX_M * K * 2u);
    tw_fz_y_off = malloc(TW_FZ_MAX_M * K * 2u);
    tw_fz_dense = malloc(N * 2u);
    return tw_fz_words && tw_fz_y_on && tw_fz_y_off && tw_fz_dense ? 0 : -1;
}

/* The input's shape and M (its first two bytes); its words follow, zero-padded. */
static const tw_fz_shape *tw_fz_packed_shape(const uint8_t *data, size_t size, size_t *M) {
    *M = 1u + (size_t)(size > 1 ? data[1] : 0u) % TW_FZ_MAX_M;
    return &tw_fz_sh[(size > 0 ? data[0] : 0) % TW_FZ_SHAPES];
}

/* Valid buffers: every shape at M = 1, 3 and 6, from the CPU gate-pack. */
static int tw_fz_packed_seed(size_t i, tw_fuzz_buf *out) {
    static const uint8_t Ms[] = {0, 2, 5};
    if (i >= TW_FZ_SHAPES * 3)
        return 0;
    uint8_t head[2] = {(uint8_t)(i / 3), Ms[i % 3]};
    size_t M;
    const tw_fz_shape *z = tw_fz_packed_shape(head, 2, &M);
    size_t w = twell_packed_words(&z->s, M);
    if (tw_gate_pack_ref(NULL, &z->s, M, z->f->x, tw_synth_pack_weight(z->f), tw_fz_words) !=
        TWELL_OK)
        return 0;
    out->n = 0;
    tw_fuzz_buf_add(out, head, 2);
    tw_fuzz_buf_add(out, tw_fz_words, w * 4u); /* little-endian hosts: the words as stored */
    return 1;
}

/* Half the inputs get the word-level corruptions of tw_packed_cases.h on top. */
static void tw_fz_packed_fixup(tw_fuzz_buf *b, uint64_t r) {
    if (r & 1)
        return;
    size_t M;
    const tw_fz_shape *z = tw_fz_packed_shape(b->p, b->n, &M);
    size_t w = twell_packed_words(&z->s, M);
    memset(tw_fz_words, 0, w * 4u);
    if (b->n > 2)
        memcpy(tw_fz_words, b->p + 2, b->n - 2 < w * 4u ? b->n - 2 : w * 4u);
    uint64_t rng = r;
    tw_pk_mutate(&rng, &z->s, M, tw_fz_words, 3);
    b->n = 2;
    tw_fuzz_buf_add(b, tw_fz_words, w * 4u);
}

static twell_status tw_fz_infer(twell_ctx *ctx, twell_plan *plan, const tw_fz_shape *z, size_t M,
                                uint16_t *y, char *msg, size_t n) {
    memset(y, 0xa5, M * z->s.K * 2u);
    twell_status st = twell_ffn_infer(plan, M, z->f->x, tw_fz_words, z->s.gated ? z->f->wg : NULL,
                                      z->f->wu, z->f->wd, y, NULL);
    snprintf(msg, n, "%s", twell_ctx_errmsg(ctx));
    return st;
}

static int tw_fz_packed_run(const uint8_t *data, size_t size) {
    size_t M;
    const tw_fz_shape *z = tw_fz_packed_shape(data, size, &M);
    const twell_shape *s = &z->s;
    size_t w = twell_packed_words(s, M);
    memset(tw_fz_words, 0, w * 4u);
    if (size > 2)
        memcpy(tw_fz_words, data + 2, size - 2 < w * 4u ? size - 2 : w * 4u);
    tw_packed_fault ff, fs;
    int full = tw_packed_find_fault(s, M, tw_fz_words, TW_PKF_ALL, &ff);
    int structural = tw_packed_find_fault(s, M, tw_fz_words, TW_PKF_STRUCTURE, &fs);
    if (structural && (!full || ff.word > fs.word))
        tw_fuzz_fail("the structural rule names word %zu, the full rule %s", fs.word,
                     full ? "a later one" : "none");
    /* the rule row by row: tw_unpack_row rejects exactly the rows with a fault */
    size_t NW = s->N / s->C;
    for (size_t m = 0; m < M; m++) {
        tw_packed_fault fr;
        int bad = tw_packed_find_fault(s, 1, tw_fz_words + m * NW, TW_PKF_ALL, &fr);
        if ((tw_unpack_row(s, tw_fz_words + m * NW, tw_fz_dense) < 0) != bad)
            tw_fuzz_fail("tw_unpack_row and the rule disagree on row %zu", m);
    }
    /* the CPU backend, off then on: rejects what the rules reject, names the word */
    char msg[512], want[256];
    twell_status off = tw_fz_infer(tw_fz_off, z->off, z, M, tw_fz_y_off, msg, sizeof msg);
    if (structural) {
        tw_packed_fault_describe(s, &fs, want, sizeof want);
        if (off != TWELL_ERR_INVALID_ARG || !strstr(msg, want))
            tw_fuzz_fail("validation off: %s (%s), expected \"%s\"", twell_status_name(off), msg,
                         want);
    } else if (off != TWELL_OK) {
        tw_fuzz_fail("validation off: %s (%s) for a structurally sound buffer",
                     twell_status_name(off), msg);
    }
    twell_status on = tw_fz_infer(tw_fz_on, z->on, z, M, tw_fz_y_on, msg, sizeof msg);
    if (full) {
        tw_packed_fault_describe(s, &ff, want, sizeof want);
        if (on != TWELL_ERR_INVALID_ARG || !strstr(msg, want))
            tw_fuzz_fail("validation on: %s (%s), expected \"%s\"", twell_status_name(on), msg,
                         want);
    } else if (on != TWELL_OK || memcmp(tw_fz_y_on, tw_fz_y_off, M * s->K * 2u) != 0) {
        tw_fuzz_fail("validation on: %s (%s) or another y for a valid buffer",
                     twell_status_name(on), msg);
    }
    return 0;
}

const tw_fuzz_target tw_fz_packed = {.name = "packed",
                                     .init = tw_fz_packed_init,
                                     .run = tw_fz_packed_run,
                                     .seed = tw_fz_packed_seed,
                                     .max_len = (size_t)64 << 10,
                                     .fixup = tw_fz_packed_fixup};
