/*
 * cuda_small.c — the small-batch inference path on CUDA (cuda_small.h): when a call takes it,
 * its launch geometry, and the workspace it shares between calls (gate scratch and arrival
 * counters for twell_gate_pack, h and overflow masks for twell_ffn_infer).
 */
#include "cuda_small.h"
#include "cuda_small_int.h"

#include "cuda_gate_pack.h"
#include "jit.h"
#include "op_plan.h"
#include "small_gate.h"

#include <stdlib.h>
#include <string.h>

/* The up kernel's dynamic shared memory for M rows (ffn_small.cu.lua, TW_UP_SMEM). */
static unsigned tw_up_smem(size_t M) { return (unsigned)(((M + 31u) & ~(size_t)31u) * 68u); }

/* The fused kernel's dynamic shared memory (ffn_small.cu.lua): x_m, the packed row, the tiles'
 * prefix and overflow lists; its block is 512 threads with 16 KB of static shared memory. */
#define TW_FUSED_THREADS 512u
#define TW_FUSED_STATIC (16u * 1024u + 64u)
static unsigned tw_fused_smem(const twell_shape *s) {
    return s->K * 2u + 4u * (s->N / s->C) + 8u * (s->N / s->T);
}

/* The cluster kernel's (ffn_small.cu.lua, twell_ffn_small_fused_cl): blocks a row (its cluster),
 * and its dynamic shared memory: the fused kernel's plus a block's share of the h of the row's
 * stored pairs (PL) and candidate pairs (QL, with their active bits). */
#define TW_FUSED_CL 8u
/* Rows up to which the cluster kernel runs: its 8 blocks a row are one cluster each, and from
 * about 16 rows not every cluster finds its SMs in the first wave (one 512-thread block an SM). */
#define TW_FUSED_CL_M 8u
static unsigned tw_fused_cl_smem(const twell_shape *s) {
    unsigned nt = s->N / s->T, slots = s->T / s->C - 1u;
    unsigned pl = ((nt * slots + 1u) / 2u + TW_FUSED_CL - 1u) / TW_FUSED_CL;
    unsigned ql = (s->N / 2u + TW_FUSED_CL - 1u) / TW_FUSED_CL;
    return tw_fused_smem(s) + 8u * pl + 12u * ql;
}

/* The row kernel's (ffn_small.cu.lua, twell_ffn_small_row): one block of 512 threads a row, every
 * column slice of 256 taken by at least one of its 16 warps (hence K ≤ 4096); dynamic shared
 * memory: the fused kernel's plus the h of the row's stored entries and of a chunk of 512
 * candidate pairs with their active bits. */
#define TW_ROW_MAX_K 4096u
#define TW_ROW_RQ 512u
static unsigned tw_row_smem(const twell_shape *s) {
    unsigned entries = (s->N / s->T) * (s->T / s->C - 1u);
    return tw_fused_smem(s) + 8u * ((entries + 1u) / 2u) + 12u * TW_ROW_RQ;
}

/* The row kernel serves this call: more rows than the fused kernel's, loaded, not turned off. */
static int tw_small_row(const tw_small *sm, size_t M) {
    return sm->row && !TW_PROBE_OR(sm->probe.updown, 0) && !sm->avoid_row && M > TW_SMALL_FUSED_M;
}

void tw_small_avoid_row(tw_small *sm, int avoid) {
    if (sm)
        sm->avoid_row = avoid;
}

int tw_small_row_ok(const tw_small *sm, size_t M) {
    return sm && sm->available && tw_small_row(sm, M) && M <= TW_SMALL_MAX_M;
}

/* The fused kernel serves this call: few rows, K in range and its shared memory loaded. */
static int tw_small_fused(const twell_plan *plan, const tw_small *sm, size_t M) {
    return (sm->fused_ok ||
            (sm->fused_cl && !TW_PROBE_OR(sm->probe.fused_plain, 0) && M <= TW_FUSED_CL_M)) &&
           M <= TW_SMALL_FUSED_M && plan->shape.K <= TW_SMALL_FUSED_K;
}

/* ---- modules ---- */

static twell_status tw_small_module(twell_ctx *ctx, const char *name, const tw_param *p, size_t n,
                                    tw_CUmodule *mod) {
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    TW_TRY(tw_jit_cubin(ctx, name, p, n, ctx->cuda->arch, &cubin));
    twell_status st = tw_cu_module_load(ctx, cubin.data, mod);
    tw_cubin_free(&cubin);
    return st;
}

static void tw_small_unload(tw_small *sm) {
    tw_cu_module_unload(sm->mod_gate);
    tw_cu_module_unload(sm->mod_ffn);
    sm->mod_gate = sm->mod_ffn = NULL;
    sm->gate = sm->up = sm->down = sm->fused = sm->fused_cl = sm->row = NULL;
}

static twell_status tw_small_load(twell_plan *plan, tw_small *sm) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_param p[TW_SHAPE_NPARAMS + 1]; /* gate_pack_small takes the shape; ffn_small, also gated */
    size_t n = tw_shape_params(s, p);
    p[n] = (tw_param){"gated", NULL, (long long)s->gated};
    TW_TRY(tw_small_module(ctx, "gate_pack_small", p, n, &sm->mod_gate));
    TW_TRY(tw_small_module(ctx, "ffn_small", p, n + 1, &sm->mod_ffn));
    TW_TRY(tw_cu_module_function(ctx, sm->mod_gate, "twell_gate_pack_small_" TW_SGATE_KERNEL,
                                 &sm->gate));
    TW_TRY(tw_cu_module_function(ctx, sm->mod_ffn, "twell_ffn_small_up", &sm->up));
    TW_TRY(tw_cu_module_function(ctx, sm->mod_ffn, "twell_ffn_small_down", &sm->down));
    TW_TRY(tw_cu_module_function(ctx, sm->mod_ffn, "twell_ffn_small_fused", &sm->fused));
    unsigned fsm = tw_fused_smem(s), csm = tw_fused_cl_smem(s);
    sm->fused_ok = fsm + TW_FUSED_STATIC <= (unsigned)ctx->cuda->smem_optin;
    if (sm->fused_ok)
        TW_TRY(tw_cu_func_set_attribute(
            ctx, sm->fused, TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)fsm));
    if (ctx->cuda->cc_major >= 9 && csm + TW_FUSED_STATIC <= (unsigned)ctx->cuda->smem_optin) {
        TW_TRY(tw_cu_module_function(ctx, sm->mod_ffn, "twell_ffn_small_fused_cl", &sm->fused_cl));
        TW_TRY(tw_cu_func_set_attribute(
            ctx, sm->fused_cl, TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)csm));
    }
    unsigned rsm = tw_row_smem(s);
    if (s->K <= TW_ROW_MAX_K && rsm + TW_FUSED_STATIC <= (unsigned)ctx->cuda->smem_optin) {
        TW_TRY(tw_cu_module_function(ctx, sm->mod_ffn, "twell_ffn_small_row", &sm->row));
        TW_TRY(tw_cu_func_set_attribute(
            ctx, sm->row, TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)rsm));
    }
    return tw_cu_func_set_attribute(ctx, sm->up, TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    (int)tw_up_smem(TW_SMALL_MAX_M));
}

twell_status tw_small_init(twell_plan *plan, tw_small **out) {
    *out = NULL;
    twell_ctx *ctx = plan->ctx;
    const tw_cuda *dev = ctx->cuda;
    tw_small *sm = calloc(1, sizeof *sm);
    if (!sm)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "small path: out of memory for the plan state");
    if (dev->cc_major < 8 || plan->shape.K % 32u != 0 ||
        dev->smem_optin < (int)tw_up_smem(TW_SMALL_MAX_M)) {
        *out = sm; /* not for this device or shape: the other kernels serve every M */
        return TWELL_OK;
    }
    twell_status st = tw_small_load(plan, sm);
    if (st == TWELL_OK)
        st = tw_cuda_event_create(ctx, &sm->done[0]);
    if (st == TWELL_OK)
        st = tw_cuda_event_create(ctx, &sm->done[1]);
    if (st == TWELL_ERR_NO_MEMORY) {
        tw_small_release(plan, sm);
        return st;
    }
    if (st != TWELL_OK) { /* not fatal: the other kernels are exact for every M */
        tw_log(ctx, TWELL_LOG_WARN, "small path unavailable: %s", tw_errmsg(ctx));
        tw_small_unload(sm);
    } else {
        sm->available = 1;
    }
    *out = sm;
    return TWELL_OK;
}

void tw_small_release(twell_plan *plan, tw_small *sm) {
    if (!sm)
        return;
    twell_ctx *ctx = plan->ctx;
    tw_small_unload(sm);
    tw_cuda_free(ctx, sm->ws);
    tw_cuda_keep_release(ctx, &sm->keep);
    tw_cuda_event_destroy(ctx, sm->done[0]);
    tw_cuda_event_destroy(ctx, sm->done[1]);
    free(sm);
}

/* ---- workspace ---- */

void tw_small_layout_of(const twell_shape *s, size_t R, tw_small_layout *L) {
    size_t N = s->N, o = 0;
    L->gs = o, o += tw_al(R * N * 2u);
    L->tcnt = o, o += tw_al((R / 8u + 1u) * (N / s->T) * 4u);
    L->hbuf = o, o += tw_al(R * N * 4u);
    L->mask = o, o += tw_al(R * (N / 32u) * 4u);
    L->bytes = o;
}

/* Makes the workspace hold M rows (never while capturing): grows it after the plan's earlier
 * small-path work and zeroes the arrival counters, which the kernels keep at 0 afterwards. The old
 * workspace is kept when a captured graph may still use it. */
static twell_status tw_small_grow(twell_plan *plan, tw_small *sm, size_t M, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    if (M <= sm->rows)
        return TWELL_OK;
    size_t R = 64;
    while (R < M)
        R *= 2;
    if (R > TW_SMALL_MAX_M)
        R = TW_SMALL_MAX_M;
    for (int i = 0; i < 2; i++)
        if (sm->used[i])
            TW_TRY(tw_cuda_event_synchronize(ctx, sm->done[i]));
    tw_small_layout L;
    tw_small_layout_of(&plan->shape, R, &L);
    void *p = NULL;
    TW_TRY(tw_cuda_malloc(ctx, L.bytes, &p));
    twell_status st =
        tw_cuda_memset_d32(ctx, (char *)p + L.tcnt, 0u, (L.hbuf - L.tcnt) / 4u, stream);
    if (st == TWELL_OK) /* the counters must be 0 before any kernel on any stream reads them */
        st = tw_cuda_stream_synchronize(ctx, stream);
    if (st != TWELL_OK) {
        tw_cuda_free(ctx, p);
        return st;
    }
    tw_cuda_keep_free(ctx, &sm->keep, sm->captured, sm->ws);
    sm->captured = 0;
    sm->ws = p;
    sm->rows = R;
    sm->bytes = L.bytes;
    sm->gs = (uint16_t *)p;
    sm->tcnt = (uint32_t *)(void *)((char *)p + L.tcnt);
    sm->hbuf = (float *)(void *)((char *)p + L.hbuf);
    sm->mask = (uint32_t *)(void *)((char *)p + L.mask);
    return TWELL_OK;
}

twell_status tw_small_reserve_rows(twell_plan *plan, tw_small *sm, size_t max_M, size_t auto_max) {
    if (!sm || !sm->available)
        return TWELL_OK;
    size_t auto_rows = TW_SMALL_GATE_AUTO_M > auto_max ? TW_SMALL_GATE_AUTO_M : auto_max;
    return tw_small_grow(plan, sm, max_M < auto_rows ? max_M : auto_rows, NULL);
}

/* Prepares op's call (0 gate, 1 ffn) of M rows; need_ws: it uses the workspace. Eager: grows the
 * workspace and orders the call after the op's previous one on another stream. Capturing:
 * neither (nothing may be allocated or waited for); a workspace too small is an error the caller
 * turned away already in AUTO. Returns 0 to run the other kernels (AUTO, allocation failed), else
 * 1 with *st set. */
static int tw_small_begin(twell_plan *plan, tw_small *sm, int op, size_t M, int need_ws,
                          int capturing, twell_stream stream, twell_status *st) {
    *st = TWELL_OK;
    if (capturing) {
        if (need_ws && M > sm->rows)
            *st = tw_error(plan->ctx, TWELL_ERR_INVALID_ARG,
                           "small path: a captured call of %zu rows needs its workspace reserved "
                           "first (twell_plan_reserve)",
                           M);
        return 1;
    }
    if (need_ws)
        *st = tw_small_grow(plan, sm, M, stream);
    if (*st == TWELL_ERR_NO_MEMORY && TW_SMALL_MODE(sm) == TW_SMALL_AUTO) {
        tw_log(plan->ctx, TWELL_LOG_WARN,
               "small path: workspace for %zu rows unavailable (%s); using the other kernels", M,
               tw_errmsg(plan->ctx));
        return 0;
    }
    if (*st == TWELL_OK && sm->used[op] && stream != sm->last_stream[op])
        *st = tw_cuda_stream_wait_event(plan->ctx, stream, sm->done[op]);
    return 1;
}

static twell_status tw_small_end(twell_plan *plan, tw_small *sm, int op, int capturing,
                                 twell_stream stream) {
    if (capturing) { /* the graph holds the workspace from now on */
        sm->captured = 1;
        return TWELL_OK;
    }
    TW_TRY(tw_cuda_event_record(plan->ctx, sm->done[op], stream));
    sm->used[op] = 1;
    sm->last_stream[op] = stream;
    return TWELL_OK;
}

/* 16-byte alignment of every tensor the kernels load as uint4 (and of y, stored so). */
static int tw_small_aligned(const void *a, const void *b, const void *c, const void *d,
                            const void *e) {
    uintptr_t any = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)e;
    return (any & 15u) == 0;
}

/* ---- gate-pack ---- */

int tw_small_gate_pack(twell_plan *plan, tw_small *sm, size_t M, const void *x, const void *w,
                       uint32_t *packed, twell_stream stream, twell_status *st) {
    twell_ctx *ctx = plan->ctx;
    if (sm)
        sm->last_ran[0] = 0, sm->gate_launched = 0;
    if (!sm || !sm->available || TW_SMALL_MODE(sm) == TW_SMALL_OFF || M > TW_SMALL_MAX_M ||
        !tw_small_aligned(x, w, NULL, NULL, NULL))
        return 0;
    if (TW_SMALL_MODE(sm) == TW_SMALL_AUTO) {
        /* a variant forced away from the device's default (tests, the bench) keeps its kernel */
        tw_gp_variant v = tw_cuda_gate_pack_variant(tw_op_plan(plan)->gate_pack);
        int sm90 = tw_sm90_gate_pack_supports(&plan->shape, ctx->cuda);
        if (M > TW_SMALL_GATE_AUTO_M || (sm90 && v != TW_GP_SM90))
            return 0; /* decided without asking the driver whether the stream is captured */
    }
    int capturing = 0;
    if (tw_cuda_stream_capturing(ctx, stream, &capturing) != TWELL_OK)
        return 0; /* the other kernels report the stream's problem */
    if (TW_SMALL_MODE(sm) == TW_SMALL_AUTO && capturing && M > sm->rows)
        return 0;
    if (!tw_small_begin(plan, sm, 0, M, 1, capturing, stream, st))
        return 0;
    sm->last_ran[0] = 1;
    if (*st != TWELL_OK)
        return 1;
    const twell_shape *s = &plan->shape;
    /* the geometry for M rows (small_gate.h): one token block up to 16 rows, more above (the
     * rows FORCE sends here beyond AUTO's limit included) */
    tw_sgate_geom g = tw_sgate_geom_of(s->T, M, TW_PROBE_OR(sm->probe.gate_wn, 0));
    int m = (int)M;
    void *args[] = {
        (void *)&x, (void *)&w, (void *)&packed, (void *)&sm->gs, (void *)&sm->tcnt, &m, &g.TB,
        &g.MT,      &g.WN};
    size_t blocks = (size_t)(s->N / (16u * (unsigned)g.WN)) * (size_t)g.TB;
    sm->gate_launched = 1;
    *st = tw_cu_launch_grid(ctx, sm->gate, blocks, 1, 256, 0, 1u, stream, args);
    if (*st == TWELL_OK)
        *st = tw_small_end(plan, sm, 0, capturing, stream);
    return 1;
}

/* ---- ffn_infer ---- */

/* The small inference can take the call (mode aside): available, M in range, aligned, not the
 * DENSE path, and, while capturing, a workspace reserved for it unless the fused kernel runs. */
static int tw_small_ffn_can(const twell_plan *plan, const tw_small *sm, size_t M, int aligned16,
                            int capturing) {
    if (!sm || !sm->available || M > TW_SMALL_MAX_M || !aligned16 || plan->path == TWELL_PATH_DENSE)
        return 0;
    return !capturing || tw_small_fused(plan, sm, M) || tw_small_row(sm, M) || M <= sm->rows;
}

int tw_small_gate_forced(const tw_small *sm) { return sm && TW_SMALL_MODE(sm) == TW_SMALL_FORCE; }

void tw_small_gate_not_run(tw_small *sm) {
    if (sm)
        sm->last_ran[0] = 0, sm->gate_launched = 0;
}

int tw_small_ffn_forced(const twell_plan *plan, const tw_small *sm, size_t M, int aligned16,
                        int capturing) {
    return sm && TW_SMALL_MODE(sm) == TW_SMALL_FORCE &&
           tw_small_ffn_can(plan, sm, M, aligned16, capturing);
}

int tw_small_ffn_ok(const twell_plan *plan, const tw_small *sm, size_t M, int aligned16,
                    int capturing) {
    return sm && TW_SMALL_MODE(sm) == TW_SMALL_AUTO && plan->path == TWELL_PATH_AUTO &&
           tw_small_ffn_can(plan, sm, M, aligned16, capturing);
}

int tw_small_ffn_try(twell_plan *plan, tw_small *sm, size_t M, const void *x,
                     const uint32_t *packed, const void *wg, const void *wu, const void *wd,
                     void *y, int capturing, twell_stream stream, twell_status *st) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    sm->last_ran[1] = 0, sm->fused_ran = 0;
    int fused = tw_small_fused(plan, sm, M), row = !fused && tw_small_row(sm, M);
    if (!tw_small_begin(plan, sm, 1, M, !fused && !row, capturing, stream, st))
        return 0;
    sm->last_ran[1] = 1;
    if (*st != TWELL_OK)
        return 1;
    const void *wp = s->gated ? wg : wu;
    int m = (int)M;
    void *a_f[] = {(void *)&x,  (void *)&packed, (void *)&wp, (void *)&wu,
                   (void *)&wd, (void *)&y,      &m};
    if (row) {
        sm->fused_ran = 3;
        *st = tw_cu_launch_grid(ctx, sm->row, (unsigned)M, 1, TW_FUSED_THREADS, tw_row_smem(s), 1u,
                                stream, a_f);
    } else if (fused) {
        sm->fused_ran =
            sm->fused_cl && !TW_PROBE_OR(sm->probe.fused_plain, 0) && M <= TW_FUSED_CL_M ? 2 : 1;
        if (sm->fused_ran == 2) {
            tw_cu_launch_cfg c = {{TW_FUSED_CL, (unsigned)M, 1},
                                  {TW_FUSED_THREADS, 1, 1},
                                  {TW_FUSED_CL, 1, 1},
                                  tw_fused_cl_smem(s),
                                  1u};
            *st = tw_cu_launch(ctx, sm->fused_cl, &c, stream, a_f);
        } else {
            *st = tw_cu_launch_grid(ctx, sm->fused, tw_cdiv(s->K, 256), (unsigned)M,
                                    TW_FUSED_THREADS, tw_fused_smem(s), 1u, stream, a_f);
        }
    } else {
        void *a_up[] = {(void *)&x,        (void *)&packed,   (void *)&wp, (void *)&wu,
                        (void *)&sm->hbuf, (void *)&sm->mask, &m};
        *st = tw_cu_launch_grid(ctx, sm->up, s->N / 32u, 1, 256, tw_up_smem(M), 1u, stream, a_up);
        void *a_down[] = {(void *)&packed,   (void *)&wd, (void *)&sm->hbuf,
                          (void *)&sm->mask, (void *)&y,  &m};
        if (*st == TWELL_OK)
            *st = tw_cu_launch_grid(ctx, sm->down, tw_cdiv(s->K, 256), (unsigned)M, 256, 0, 1u,
                                    stream, a_down);
    }
    if (*st == TWELL_OK)
        *st = tw_small_end(plan, sm, 1, capturing, stream);
    return 1;
}

void tw_small_ffn_call_begins(tw_small *sm) {
    if (sm)
        sm->last_ran[1] = 0;
}
