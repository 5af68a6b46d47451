/* cpu_backend.c — the exact CPU reference backend for the inference ops: fp32 arithmetic on
 * 16-bit inputs in a fixed order (k ascending, neurons ascending), parallel over rows, so results
 * are bitwise reproducible whatever the thread count. */
#include "cpu_ref.h"
#include "half.h"
#include "twell_format.h"

#include <stdlib.h>
#include <string.h>

enum { TW_ROW_BLOCK = 8 }; /* rows sharing one pass over a weight tile in gate-pack */

void tw_to_f32_ref(twell_dtype dt, const uint16_t *src, float *dst, size_t n) {
    if (dt == TWELL_DTYPE_BF16)
        for (size_t i = 0; i < n; i++)
            dst[i] = tw_bf16_to_f32(src[i]);
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = tw_fp16_to_f32(src[i]);
}

float tw_dot_ref(const float *a, const float *b, size_t K) {
    float acc = 0.0f;
    for (size_t k = 0; k < K; k++) {
        float p = a[k] * b[k]; /* separate statement: no contraction into an FMA */
        acc = acc + p;
    }
    return acc;
}

uint16_t tw_act_ref(twell_dtype dt, float pre) { return tw_half_act(dt, pre); }

void tw_gate_tile_ref(twell_dtype dt, const float *x, const uint16_t *w, size_t K, uint32_t col0,
                      uint32_t T, float *wrow, uint16_t *vals) {
    for (uint32_t j = 0; j < T; j++) {
        tw_to_f32_ref(dt, w + (size_t)(col0 + j) * K, wrow, K);
        vals[j] = tw_act_ref(dt, tw_dot_ref(x, wrow, K));
    }
}

int tw_packed_find_malformed(const twell_shape *s, size_t M, const uint32_t *packed, size_t *row,
                             uint32_t *tile) {
    tw_packed_fault f;
    if (!tw_packed_find_fault(s, M, packed, TW_PKF_STRUCTURE, &f))
        return 0;
    *row = f.row;
    *tile = f.tile;
    return 1;
}

/* The rows of part p of n parts: a pure function of (M, p, n). */
static void tw_part_rows(size_t M, size_t p, size_t n, size_t *r0, size_t *r1) {
    *r0 = M * p / n;
    *r1 = M * (p + 1) / n;
}

/* Per-thread scratch: one block of floats per part, allocated before any output is written. */
static float **tw_scratch_alloc(size_t parts, size_t floats) {
    float **sc = calloc(parts, sizeof *sc);
    if (!sc)
        return NULL;
    for (size_t p = 0; p < parts; p++)
        if (!(sc[p] = malloc(floats * sizeof(float)))) {
            for (size_t q = 0; q < p; q++)
                free(sc[q]);
            free(sc);
            return NULL;
        }
    return sc;
}

static void tw_scratch_free(float **sc, size_t parts) {
    if (!sc)
        return;
    for (size_t p = 0; p < parts; p++)
        free(sc[p]);
    free(sc);
}

/* ---- gate-pack ---- */

typedef struct {
    const twell_shape *s;
    size_t M, parts;
    const uint16_t *x, *w;
    uint32_t *packed;
    float **scratch;
} tw_pack_job;

/* acc[r][j] = dot(xs[r], column j of wt) for R rows, with tw_dot_ref's exact rounding sequence
 * per element: the j loop vectorises without changing any single accumulator's order. */
static void tw_gate_block(const float *restrict xs, size_t R, size_t K, const float *restrict wt,
                          uint32_t T, float *restrict acc) {
    memset(acc, 0, R * T * sizeof *acc); /* all-zero bits: +0.0f */
    for (size_t k = 0; k < K; k++) {
        const float *restrict wk = wt + k * T;
        for (size_t r = 0; r < R; r++) {
            float xv = xs[r * K + k];
            float *restrict a = acc + r * T;
            for (uint32_t j = 0; j < T; j++) {
                float p = xv * wk[j];
                a[j] = a[j] + p;
            }
        }
    }
}

static void tw_pack_part(void *arg, size_t begin, size_t end) {
    const tw_pack_job *job = arg;
    const twell_shape *s = job->s;
    size_t K = s->K, row_words = s->N / s->C;
    uint32_t T = s->T, words = T / s->C, tiles = s->N / T;
    uint16_t vals[256];
    for (size_t p = begin; p < end; p++) {
        size_t r0, r1;
        tw_part_rows(job->M, p, job->parts, &r0, &r1);
        if (r0 == r1)
            continue;
        float *wt = job->scratch[p];          /* [K][T] weight tile, transposed */
        float *xs = wt + K * T;               /* [TW_ROW_BLOCK][K] */
        float *acc = xs + TW_ROW_BLOCK * K;   /* [TW_ROW_BLOCK][T] */
        float *wrow = acc + TW_ROW_BLOCK * T; /* [K] */
        for (uint32_t t = 0; t < tiles; t++) {
            uint32_t col0 = t * T;
            for (uint32_t j = 0; j < T; j++) {
                tw_to_f32_ref(s->dtype, job->w + (size_t)(col0 + j) * K, wrow, K);
                for (size_t k = 0; k < K; k++)
                    wt[k * T + j] = wrow[k];
            }
            for (size_t rb = r0; rb < r1; rb += TW_ROW_BLOCK) {
                size_t R = r1 - rb < TW_ROW_BLOCK ? r1 - rb : TW_ROW_BLOCK;
                tw_to_f32_ref(s->dtype, job->x + rb * K, xs, R * K);
                tw_gate_block(xs, R, K, wt, T, acc);
                for (size_t r = 0; r < R; r++) {
                    for (uint32_t j = 0; j < T; j++)
                        vals[j] = tw_act_ref(s->dtype, acc[r * T + j]);
                    tw_pack_row_tile(vals, T, s->C, col0,
                                     job->packed + (rb + r) * row_words + (size_t)t * words);
                }
            }
        }
    }
}

twell_status tw_gate_pack_ref(tw_pool *pool, const twell_shape *s, size_t M, const void *x,
                              const void *w, uint32_t *packed) {
    size_t parts = (size_t)tw_pool_threads(pool);
    if (parts > M)
        parts = M;
    size_t K = s->K, T = s->T;
    float **sc = tw_scratch_alloc(parts, K * T + TW_ROW_BLOCK * (K + T) + K);
    if (!sc)
        return TWELL_ERR_NO_MEMORY;
    tw_pack_job job = {s, M, parts, x, w, packed, sc};
    tw_pool_for(pool, parts, tw_pack_part, &job);
    tw_scratch_free(sc, parts);
    return TWELL_OK;
}

/* ---- fused inference ---- */

typedef struct {
    const twell_shape *s;
    size_t M, parts;
    const uint16_t *x, *wpack, *wu, *wd;
    const uint32_t *packed;
    uint16_t *y;
    float **scratch;
} tw_infer_job;

/* y_acc += h · Wd[n], where h = g · dot(x, Wu[n]) (gated) or h = g (non-gated). */
static void tw_infer_neuron(const tw_infer_job *job, const float *xf, float *wrow, float *yacc,
                            uint32_t n, float g) {
    const twell_shape *s = job->s;
    size_t K = s->K;
    float h = g;
    if (s->gated) {
        tw_to_f32_ref(s->dtype, job->wu + (size_t)n * K, wrow, K);
        float u = tw_dot_ref(xf, wrow, K);
        h = g * u;
    }
    tw_to_f32_ref(s->dtype, job->wd + (size_t)n * K, wrow, K);
    for (size_t k = 0; k < K; k++) {
        float p = h * wrow[k];
        yacc[k] = yacc[k] + p;
    }
}

static void tw_infer_part(void *arg, size_t begin, size_t end) {
    const tw_infer_job *job = arg;
    const twell_shape *s = job->s;
    size_t K = s->K, row_words = s->N / s->C;
    uint32_t T = s->T, words = T / s->C, slots = words - 1, tiles = s->N / T;
    twell_dtype dt = s->dtype;
    uint16_t vals[256];
    for (size_t p = begin; p < end; p++) {
        size_t r0, r1;
        tw_part_rows(job->M, p, job->parts, &r0, &r1);
        float *xf = job->scratch[p], *yacc = xf + K, *wrow = yacc + K;
        for (size_t m = r0; m < r1; m++) {
            tw_to_f32_ref(dt, job->x + m * K, xf, K);
            memset(yacc, 0, K * sizeof *yacc);
            for (uint32_t t = 0; t < tiles; t++) {
                const uint32_t *tw = job->packed + m * row_words + (size_t)t * words;
                if (tw[0] <= slots) {
                    for (uint32_t i = 0; i < tw[0]; i++)
                        tw_infer_neuron(job, xf, wrow, yacc, tw[1 + i] & 0xffffu,
                                        tw_half_to_f32(dt, (uint16_t)(tw[1 + i] >> 16)));
                    continue;
                }
                /* Overflow: the stored entries are a prefix only; recompute the whole tile. */
                tw_gate_tile_ref(dt, xf, job->wpack, K, t * T, T, wrow, vals);
                for (uint32_t j = 0; j < T; j++)
                    if (tw_half_active(vals[j]))
                        tw_infer_neuron(job, xf, wrow, yacc, t * T + j,
                                        tw_half_to_f32(dt, vals[j]));
            }
            uint16_t *ym = job->y + m * K;
            for (size_t k = 0; k < K; k++)
                ym[k] = tw_f32_to_half(dt, yacc[k]);
        }
    }
}

twell_status tw_ffn_infer_ref(tw_pool *pool, const twell_shape *s, size_t M, const void *x,
                              const uint32_t *packed, const void *wg, const void *wu,
                              const void *wd, void *y) {
    size_t bad_row;
    uint32_t bad_tile;
    if (tw_packed_find_malformed(s, M, packed, &bad_row, &bad_tile))
        return TWELL_ERR_INVALID_ARG;
    size_t parts = (size_t)tw_pool_threads(pool);
    if (parts > M)
        parts = M;
    float **sc = tw_scratch_alloc(parts, 3 * (size_t)s->K);
    if (!sc)
        return TWELL_ERR_NO_MEMORY;
    tw_infer_job job = {s, M, parts, x, s->gated ? wg : wu, wu, wd, packed, y, sc};
    tw_pool_for(pool, parts, tw_infer_part, &job);
    tw_scratch_free(sc, parts);
    return TWELL_OK;
}

/* ---- backend entry points (arguments validated by plan.c) ---- */

twell_status tw_cpu_gate_pack(twell_plan *plan, size_t M, const void *x, const void *w,
                              uint32_t *packed) {
    twell_status st = tw_gate_pack_ref(plan->ctx->pool, &plan->shape, M, x, w, packed);
    if (st != TWELL_OK)
        return tw_error(plan->ctx, st, "twell_gate_pack: cannot allocate CPU scratch (%s)",
                        twell_status_name(st));
    return TWELL_OK;
}

twell_status tw_cpu_ffn_infer(twell_plan *plan, size_t M, const void *x, const uint32_t *packed,
                              const void *wg, const void *wu, const void *wd, void *y) {
    /* The structure is always checked (it keeps the reference inside its buffers); the rest of
     * the layout's promises only when the context validates packed input. */
    const twell_shape *s = &plan->shape;
    const int full = plan->ctx->validate_packed;
    tw_packed_fault f;
    if (tw_packed_find_fault(s, M, packed, full ? TW_PKF_ALL : TW_PKF_STRUCTURE, &f)) {
        char what[256];
        tw_packed_fault_describe(s, &f, what, sizeof what);
        return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG, "twell_ffn_infer: %s (%s)", what,
                        full ? "packed input validation is on"
                             : "not the output of twell_gate_pack for this plan");
    }
    twell_status st = tw_ffn_infer_ref(plan->ctx->pool, s, M, x, packed, wg, wu, wd, y);
    if (st != TWELL_OK)
        return tw_error(plan->ctx, st, "twell_ffn_infer: cannot allocate CPU scratch (%s)",
                        twell_status_name(st));
    return TWELL_OK;
}
