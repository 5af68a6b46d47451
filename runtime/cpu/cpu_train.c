/*
 * cpu_train.c — exact CPU reference of the training forward and backward (docs/DESIGN.md §6): fp32
 * arithmetic on 16-bit inputs in fixed orders, so results never depend on the thread count.
 * The saved state is the hybrid layout the GPU backend mirrors (see cpu_train.h).
 */
#include "cpu_train.h"

#include "cpu_ref.h"
#include "half.h"
#include "internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Arithmetic goes through cpu_ref.h (tw_to_f32_ref, tw_dot_ref, tw_act_ref, tw_gate_pack_ref):
 * one rounding sequence for every dot product, so the training gate is bit-identical to
 * twell_gate_pack's and a spilled row-tile recomputed here equals its first computation. */

/* Grows one array to at least need elements (contents are not kept: every phase rewrites what
 * it uses). Returns the array, or NULL with *cap = 0 when it cannot be allocated. */
static void *tw_reserve(void *old, size_t *cap, size_t need, size_t elem) {
    if (need == 0)
        need = 1;
    if (old && need <= *cap)
        return old;
    free(old);
    *cap = 0;
    if (need > SIZE_MAX / elem)
        return NULL;
    void *p = malloc(need * elem);
    if (p)
        *cap = need;
    return p;
}

#define TW_RESERVE(sv, field, need)                                                                \
    ((sv)->field = tw_reserve((sv)->field, &(sv)->cap_##field, (need), sizeof *(sv)->field))

static size_t tw_saved_bytes(const tw_train_saved *sv) {
    return sizeof *sv + sv->cap_packed * sizeof *sv->packed + sv->cap_u_ell * sizeof *sv->u_ell +
           sv->cap_spill_off * sizeof *sv->spill_off + sv->cap_spill * sizeof *sv->spill +
           sv->cap_u_spill * sizeof *sv->u_spill + sv->cap_row_off * sizeof *sv->row_off +
           sv->cap_e_col * sizeof *sv->e_col + sv->cap_e_p * sizeof *sv->e_p +
           sv->cap_e_u * sizeof *sv->e_u + sv->cap_e_du * sizeof *sv->e_du +
           sv->cap_e_dp * sizeof *sv->e_dp + sv->cap_col_off * sizeof *sv->col_off +
           sv->cap_col_row * sizeof *sv->col_row + sv->cap_col_ent * sizeof *sv->col_ent +
           sv->cap_row_l1 * sizeof *sv->row_l1 + sv->cap_task_st * sizeof *sv->task_st +
           sv->cap_scratch;
}

void tw_cpu_train_state_release(twell_train_state *state) {
    if (!state || !state->backend_data)
        return;
    tw_train_saved *sv = state->backend_data;
    free(sv->packed);
    free(sv->u_ell);
    free(sv->spill_off);
    free(sv->spill);
    free(sv->u_spill);
    free(sv->row_off);
    free(sv->e_col);
    free(sv->e_p);
    free(sv->e_u);
    free(sv->e_du);
    free(sv->e_dp);
    free(sv->col_off);
    free(sv->col_row);
    free(sv->col_ent);
    free(sv->row_l1);
    free(sv->task_st);
    free(sv->scratch);
    free(sv);
    state->backend_data = NULL;
    state->bytes = 0;
    state->M = 0;
}

/* ---- layout steps (mirrored by the GPU backend) ---- */

size_t tw_train_spill_layout(const twell_shape *s, size_t M, const uint32_t *packed,
                             size_t *spill_off, size_t *row_off, size_t *nnz) {
    uint32_t W = s->T / s->C, slots = W - 1, tiles = s->N / s->T;
    size_t spill = 0, total = 0;
    for (size_t m = 0; m < M; m++) {
        row_off[m] = total;
        const uint32_t *row = packed + m * (s->N / s->C);
        for (uint32_t t = 0; t < tiles; t++) {
            uint32_t count = row[(size_t)t * W];
            spill_off[m * tiles + t] = spill;
            total += count;
            if (count > slots)
                spill += count - slots;
        }
    }
    row_off[M] = total;
    spill_off[M * tiles] = spill;
    *nnz = total;
    return spill;
}

size_t tw_train_row_support(const twell_shape *s, const tw_train_saved *sv, size_t m,
                            uint32_t *cols, float *p, float *u) {
    uint32_t W = s->T / s->C, slots = W - 1, tiles = s->N / s->T;
    size_t n = 0;
    for (uint32_t t = 0; t < tiles; t++) {
        size_t w0 = m * (s->N / s->C) + (size_t)t * W;
        uint32_t count = sv->packed[w0];
        uint32_t stored = count < slots ? count : slots;
        for (uint32_t i = 0; i < stored; i++, n++) {
            uint32_t word = sv->packed[w0 + 1 + i];
            if (cols)
                cols[n] = word & 0xffffu;
            if (p)
                p[n] = tw_half_to_f32(s->dtype, (uint16_t)(word >> 16));
            if (u)
                u[n] = sv->u_ell[w0 + 1 + i];
        }
        size_t sb = sv->spill_off[m * tiles + t], se = sv->spill_off[m * tiles + t + 1];
        for (size_t j = sb; j < se; j++, n++) {
            uint32_t word = sv->spill[j];
            if (cols)
                cols[n] = word & 0xffffu;
            if (p)
                p[n] = tw_half_to_f32(s->dtype, (uint16_t)(word >> 16));
            if (u)
                u[n] = sv->u_spill[j];
        }
    }
    return n;
}

void tw_train_transpose(size_t M, uint32_t N, const size_t *row_off, const uint32_t *e_col,
                        size_t *col_off, size_t *col_row, size_t *col_ent) {
    size_t nnz = row_off[M];
    memset(col_off, 0, ((size_t)N + 1) * sizeof *col_off);
    for (size_t e = 0; e < nnz; e++)
        col_off[e_col[e] + 1]++;
    for (uint32_t n = 0; n < N; n++)
        col_off[n + 1] += col_off[n];
    /* col_off[n] doubles as the fill cursor of neuron n, then is shifted back: visiting tokens
     * in ascending order keeps every list sorted (stable). */
    for (size_t m = 0; m < M; m++)
        for (size_t e = row_off[m]; e < row_off[m + 1]; e++) {
            size_t at = col_off[e_col[e]]++;
            col_row[at] = m;
            col_ent[at] = e;
        }
    for (uint32_t n = N; n > 0; n--)
        col_off[n] = col_off[n - 1];
    col_off[0] = 0;
}

/* ---- parallel phases ---- */

typedef struct {
    const twell_shape *s;
    tw_train_saved *sv;
    size_t M, ntasks, task_bytes;
    const uint16_t *x, *wg, *wu, *wd, *dy;
    uint16_t *y, *dx;
    float *dwg, *dwu, *dwd;
    float l1c; /* λ/M in fp32 */
} tw_train_job;

/* Items [*b, *e) of task i: a pure function of (n, ntasks). */
static void tw_task_range(size_t n, size_t ntasks, size_t i, size_t *b, size_t *e) {
    *b = n * i / ntasks;
    *e = n * (i + 1) / ntasks;
}

/* 64-byte aligned carving of a task's scratch. */
static void *tw_carve(unsigned char **cur, size_t bytes) {
    void *p = *cur;
    *cur += (bytes + 63u) & ~(size_t)63u;
    return p;
}

/* Per task: five fp32 rows of K and one row-tile of 16-bit gate values, 64-byte aligned. */
static size_t tw_task_bytes(const twell_shape *s) {
    size_t row = ((size_t)s->K * sizeof(float) + 63u) & ~(size_t)63u;
    return 5u * row + (((size_t)s->T * sizeof(uint16_t) + 63u) & ~(size_t)63u) + 64u;
}

static unsigned char *tw_task_scratch(const tw_train_job *j, size_t task) {
    uintptr_t base = (uintptr_t)j->sv->scratch + task * j->task_bytes;
    return (unsigned char *)((base + 63u) & ~(uintptr_t)63u);
}

/* Forward, one row: U on the support (ELL slots, then for an overflowing row-tile the entries
 * beyond the slots, found by recomputing the tile's gate as the GPU consumer does, and kept in
 * the spill), Tm = U·P, y in ascending n, and Σ|Tm|. Returns non-zero if a recomputed row-tile
 * disagrees with its stored count (impossible unless the code is wrong). */
static int tw_fwd_row(const tw_train_job *j, size_t m, float *xf, float *acc, float *wf,
                      uint16_t *vals) {
    const twell_shape *s = j->s;
    tw_train_saved *sv = j->sv;
    twell_dtype dt = s->dtype;
    uint32_t K = s->K, T = s->T, W = T / s->C, slots = W - 1, tiles = s->N / T;
    size_t rw = s->N / s->C;
    double l1 = 0.0;
    tw_to_f32_ref(dt, j->x + m * K, xf, K);
    memset(acc, 0, (size_t)K * sizeof *acc);
    memset(sv->u_ell + m * rw, 0, rw * sizeof *sv->u_ell);
    for (uint32_t t = 0; t < tiles; t++) {
        size_t w0 = m * rw + (size_t)t * W;
        uint32_t count = sv->packed[w0];
        uint32_t stored = count < slots ? count : slots;
        size_t sp = sv->spill_off[m * tiles + t];
        if (count > slots)
            tw_gate_tile_ref(dt, xf, j->wg, K, t * T, T, wf, vals);
        uint32_t i = 0, next = 0; /* entry index in the tile; next column of vals to scan */
        for (; i < count; i++) {
            uint32_t n;
            uint16_t pv;
            if (i < stored) {
                uint32_t word = sv->packed[w0 + 1 + i];
                n = word & 0xffffu;
                pv = (uint16_t)(word >> 16);
            } else {
                if (i == stored) /* skip the columns already held by the slots */
                    next = (sv->packed[w0 + stored] & 0xffffu) - t * T + 1;
                while (next < T && !tw_half_active(vals[next]))
                    next++;
                if (next == T)
                    return 1;
                n = t * T + next;
                pv = vals[next++];
                sv->spill[sp + (i - stored)] = ((uint32_t)pv << 16) | n;
            }
            float p = tw_half_to_f32(dt, pv);
            tw_to_f32_ref(dt, j->wu + (size_t)n * K, wf, K);
            float u = tw_dot_ref(xf, wf, K);
            if (i < stored)
                sv->u_ell[w0 + 1 + i] = u;
            else
                sv->u_spill[sp + (i - stored)] = u;
            float tm = u * p;
            l1 += fabs((double)tm);
            tw_to_f32_ref(dt, j->wd + (size_t)n * K, wf, K);
            for (uint32_t k = 0; k < K; k++) {
                float q = tm * wf[k];
                acc[k] += q;
            }
        }
        if (count > slots) { /* the recomputed tile must hold exactly count entries */
            while (next < T && !tw_half_active(vals[next]))
                next++;
            if (next != T)
                return 1;
        }
    }
    for (uint32_t k = 0; k < K; k++)
        j->y[m * K + k] = tw_f32_to_half(dt, acc[k]);
    sv->row_l1[m] = l1;
    return 0;
}

static void tw_fwd_rows_task(void *arg, size_t tb, size_t te) {
    const tw_train_job *j = arg;
    size_t K = j->s->K;
    for (size_t task = tb; task < te; task++) {
        size_t r0, r1;
        tw_task_range(j->M, j->ntasks, task, &r0, &r1);
        unsigned char *cur = tw_task_scratch(j, task);
        float *xf = tw_carve(&cur, K * sizeof *xf);
        float *acc = tw_carve(&cur, K * sizeof *acc);
        float *wf = tw_carve(&cur, K * sizeof *wf);
        uint16_t *vals = tw_carve(&cur, j->s->T * sizeof *vals);
        j->sv->task_st[task] = TWELL_OK;
        for (size_t m = r0; m < r1; m++)
            if (tw_fwd_row(j, m, xf, acc, wf, vals)) {
                j->sv->task_st[task] = TWELL_ERR_INTERNAL;
                break;
            }
    }
}

/* Reserves the per-task buffers and status slots shared by every phase. */
static int tw_reserve_tasks(tw_train_saved *sv, size_t ntasks, size_t task_bytes) {
    if (ntasks > SIZE_MAX / task_bytes)
        return 0;
    sv->scratch = tw_reserve(sv->scratch, &sv->cap_scratch, ntasks * task_bytes, 1);
    TW_RESERVE(sv, task_st, ntasks);
    return sv->scratch && sv->task_st;
}

twell_status tw_cpu_forward_train(twell_plan *plan, size_t M, const void *x, const void *wg,
                                  const void *wu, const void *wd, void *y, float *stats,
                                  twell_train_state *state) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_train_saved *sv = state->backend_data;
    if (!sv) {
        sv = calloc(1, sizeof *sv);
        if (!sv)
            return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                            "twell_ffn_forward_train: cannot allocate the training state");
        state->backend_data = sv;
    }
    state->M = 0; /* the earlier forward is gone from here on */
    sv->M = 0;
    uint32_t tiles = s->N / s->T;
    size_t rw = s->N / s->C;
    size_t ntasks = (size_t)tw_pool_threads(ctx->pool);
    if (ntasks > M)
        ntasks = M;
    size_t task_bytes = tw_task_bytes(s);
    int ok = M <= SIZE_MAX / rw / sizeof(float) && M < SIZE_MAX / tiles - 1;
    if (ok) {
        TW_RESERVE(sv, packed, M * rw);
        TW_RESERVE(sv, u_ell, M * rw);
        TW_RESERVE(sv, spill_off, M * tiles + 1);
        TW_RESERVE(sv, row_off, M + 1);
        TW_RESERVE(sv, row_l1, M);
        ok = sv->packed && sv->u_ell && sv->spill_off && sv->row_off && sv->row_l1 &&
             tw_reserve_tasks(sv, ntasks, task_bytes);
    }
    state->bytes = tw_saved_bytes(sv);
    if (!ok)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                        "twell_ffn_forward_train: cannot allocate the saved gate for M = %zu", M);

    tw_train_job job = {.s = s,
                        .sv = sv,
                        .M = M,
                        .ntasks = ntasks,
                        .task_bytes = task_bytes,
                        .x = x,
                        .wg = wg,
                        .wu = wu,
                        .wd = wd,
                        .y = y};
    /* Dense gate GEMM + packing: exact counts, the first slots entries of each row-tile. */
    twell_status st = tw_gate_pack_ref(ctx->pool, s, M, x, wg, sv->packed);
    if (st != TWELL_OK)
        return tw_error(ctx, st, "twell_ffn_forward_train: gate-pack scratch (%s)",
                        twell_status_name(st));

    /* The spill is sized from the exact counts, so it holds every entry at any density. */
    size_t nnz;
    size_t spill = tw_train_spill_layout(s, M, sv->packed, sv->spill_off, sv->row_off, &nnz);
    TW_RESERVE(sv, spill, spill);
    TW_RESERVE(sv, u_spill, spill);
    state->bytes = tw_saved_bytes(sv);
    if (!sv->spill || !sv->u_spill)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                        "twell_ffn_forward_train: cannot allocate the spill of %zu entries", spill);

    tw_pool_for(ctx->pool, ntasks, tw_fwd_rows_task, &job);
    for (size_t i = 0; i < ntasks; i++)
        if (sv->task_st[i] != TWELL_OK)
            return tw_error(ctx, TWELL_ERR_INTERNAL,
                            "twell_ffn_forward_train: recomputed row-tile disagrees with its "
                            "count (task %zu)",
                            i);

    if (stats) {
        double l1 = 0.0;
        for (size_t m = 0; m < M; m++)
            l1 += sv->row_l1[m];
        stats[0] = (float)((double)nnz / (double)M);
        stats[1] = (float)(l1 / (double)M);
    }
    sv->M = M;
    sv->nnz = nnz;
    sv->spill_total = spill;
    state->M = M;
    return TWELL_OK;
}

/* ---- backward ---- */

/* Backward phase A, one row: dT, dU, dP of its entries (kept, entry-indexed, for the weight
 * gradients) and dx_m = Σ_n (dU·Wu_n + dP·Wg_n) in ascending n. */
static void tw_bwd_row(const tw_train_job *j, size_t m, float *dyf, float *acc, float *wdf,
                       float *wuf, float *wgf) {
    const twell_shape *s = j->s;
    tw_train_saved *sv = j->sv;
    twell_dtype dt = s->dtype;
    uint32_t K = s->K;
    size_t e0 = sv->row_off[m];
    size_t cnt = tw_train_row_support(s, sv, m, sv->e_col + e0, sv->e_p + e0, sv->e_u + e0);
    tw_to_f32_ref(dt, j->dy + m * K, dyf, K);
    memset(acc, 0, (size_t)K * sizeof *acc);
    for (size_t e = e0; e < e0 + cnt; e++) {
        size_t n = sv->e_col[e];
        float p = sv->e_p[e], u = sv->e_u[e];
        tw_to_f32_ref(dt, j->wd + n * K, wdf, K);
        float sgn = tw_sign_nan(u); /* NaN for a NaN u, as the dense gradient */
        float l1term = j->l1c * sgn;
        float dtv = tw_dot_ref(dyf, wdf, K) + l1term;
        float du = dtv * p, dp = dtv * u;
        sv->e_du[e] = du;
        sv->e_dp[e] = dp;
        tw_to_f32_ref(dt, j->wu + n * K, wuf, K);
        tw_to_f32_ref(dt, j->wg + n * K, wgf, K);
        for (uint32_t k = 0; k < K; k++) {
            float a = du * wuf[k];
            float b = dp * wgf[k];
            float ab = a + b;
            acc[k] += ab;
        }
    }
    for (uint32_t k = 0; k < K; k++)
        j->dx[m * K + k] = tw_f32_to_half(dt, acc[k]);
}

static void tw_bwd_rows_task(void *arg, size_t tb, size_t te) {
    const tw_train_job *j = arg;
    size_t K = j->s->K;
    for (size_t task = tb; task < te; task++) {
        size_t r0, r1;
        tw_task_range(j->M, j->ntasks, task, &r0, &r1);
        unsigned char *cur = tw_task_scratch(j, task);
        float *f[5];
        for (int i = 0; i < 5; i++)
            f[i] = tw_carve(&cur, K * sizeof(float));
        for (size_t m = r0; m < r1; m++)
            tw_bwd_row(j, m, f[0], f[1], f[2], f[3], f[4]);
    }
}

/* Backward phase C: weight gradients of neuron n from its token list, tokens ascending. */
static void tw_bwd_neuron(const tw_train_job *j, size_t n, float *xf, float *dyf) {
    const twell_shape *s = j->s;
    const tw_train_saved *sv = j->sv;
    uint32_t K = s->K;
    float *gu = j->dwu + n * K, *gg = j->dwg + n * K, *gd = j->dwd + n * K;
    memset(gu, 0, (size_t)K * sizeof *gu);
    memset(gg, 0, (size_t)K * sizeof *gg);
    memset(gd, 0, (size_t)K * sizeof *gd);
    for (size_t i = sv->col_off[n]; i < sv->col_off[n + 1]; i++) {
        size_t m = sv->col_row[i], e = sv->col_ent[i];
        float du = sv->e_du[e], dp = sv->e_dp[e];
        float tm = sv->e_u[e] * sv->e_p[e]; /* the forward's Tm, bit for bit */
        tw_to_f32_ref(s->dtype, j->x + m * K, xf, K);
        tw_to_f32_ref(s->dtype, j->dy + m * K, dyf, K);
        for (uint32_t k = 0; k < K; k++) {
            float a = du * xf[k], b = dp * xf[k], c = tm * dyf[k];
            gu[k] += a;
            gg[k] += b;
            gd[k] += c;
        }
    }
}

static void tw_bwd_neurons_task(void *arg, size_t tb, size_t te) {
    const tw_train_job *j = arg;
    size_t K = j->s->K;
    for (size_t task = tb; task < te; task++) {
        size_t n0, n1;
        tw_task_range(j->s->N, j->ntasks, task, &n0, &n1);
        unsigned char *cur = tw_task_scratch(j, task);
        float *xf = tw_carve(&cur, K * sizeof *xf);
        float *dyf = tw_carve(&cur, K * sizeof *dyf);
        for (size_t n = n0; n < n1; n++)
            tw_bwd_neuron(j, n, xf, dyf);
    }
}

twell_status tw_cpu_backward(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                             const void *wg, const void *wu, const void *wd, const void *dy,
                             float lambda, void *dx, float *dwg, float *dwu, float *dwd) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_train_saved *sv = state->backend_data;
    if (!sv || sv->M == 0 || state->M != M || sv->M != M)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "twell_ffn_backward: state holds no forward of M = %zu", M);
    size_t nnz = sv->nnz;
    size_t ntasks = (size_t)tw_pool_threads(ctx->pool);
    size_t task_bytes = tw_task_bytes(s);
    TW_RESERVE(sv, e_col, nnz);
    TW_RESERVE(sv, e_p, nnz);
    TW_RESERVE(sv, e_u, nnz);
    TW_RESERVE(sv, e_du, nnz);
    TW_RESERVE(sv, e_dp, nnz);
    TW_RESERVE(sv, col_off, (size_t)s->N + 1);
    TW_RESERVE(sv, col_row, nnz);
    TW_RESERVE(sv, col_ent, nnz);
    int ok = sv->e_col && sv->e_p && sv->e_u && sv->e_du && sv->e_dp && sv->col_off &&
             sv->col_row && sv->col_ent && tw_reserve_tasks(sv, ntasks, task_bytes);
    state->bytes = tw_saved_bytes(sv);
    if (!ok)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                        "twell_ffn_backward: cannot allocate scratch for %zu active entries", nnz);

    tw_train_job job = {.s = s,
                        .sv = sv,
                        .M = M,
                        .ntasks = ntasks < M ? ntasks : M,
                        .task_bytes = task_bytes,
                        .x = x,
                        .wg = wg,
                        .wu = wu,
                        .wd = wd,
                        .dy = dy,
                        .dx = dx,
                        .dwg = dwg,
                        .dwu = dwu,
                        .dwd = dwd,
                        .l1c = (float)((double)lambda / (double)M)};
    tw_pool_for(ctx->pool, job.ntasks, tw_bwd_rows_task, &job);
    tw_train_transpose(M, s->N, sv->row_off, sv->e_col, sv->col_off, sv->col_row, sv->col_ent);
    job.ntasks = ntasks < s->N ? ntasks : s->N;
    tw_pool_for(ctx->pool, job.ntasks, tw_bwd_neurons_task, &job);
    return TWELL_OK;
}
