/*
 * cuda_train_dense.c — the dense training path on Hopper: five launches of gemm_sm90's training
 * modes (no elementwise kernels: the epilogues do that work) plus a stats kernel, its record,
 * modules and workspace (AUTO's choice between it and the sparse path: cuda_train_dense_auto.c).
 */
#include "cuda_train_dense_int.h"

#include "cuda_module.h"
#include "dense_split.h"
#include "jit.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tile configuration rendered into gemm_sm90 (as runtime/ops/ffn/heavy/dense_gemm_sm90.c: STAGES 3,
 * CLUSTER 2). */
#define TD_STAGES 3u
#define TD_CLUSTER 2u
#define TD_BM 128u
#define TD_BN 256u
#define TD_THREADS 384u
#define TD_SMEM                                                                                    \
    (1024u + TD_STAGES * (TD_BM + TD_BN) * 64u * 2u + TD_BM * 528u + 2u * TD_STAGES * 8u)
/* The weight-gradient GEMM has no staging buffer (it stores fp32 from the fragments), so it can
 * afford a deeper ring for its long reduction over M (default TD_WG_STAGES). */
#define TD_WG_STAGES 4u
#define TD_WG_SMEM(st) (1024u + (st) * (TD_BM + TD_BN) * 64u * 2u + 2u * (st)*8u)

static size_t td_align(size_t a) { return (a + 255u) & ~(size_t)255u; }

unsigned tw_ctd_nsplit(int sm_count, size_t M, size_t ncols, size_t red) {
    size_t units = tw_cdiv(tw_cdiv(M, TD_BM), TD_CLUSTER) * tw_cdiv(ncols, TD_BN);
    size_t cl = (size_t)sm_count / TD_CLUSTER, kb = red / 64u;
    if (units == 0 || 2u * units > cl)
        return 1u;
    size_t n = cl / units;
    n = n < TD_SPLIT_MAX ? n : TD_SPLIT_MAX;
    n = n < kb ? n : kb;
    return n > 1u ? (unsigned)n : 1u;
}

/* Units the forward GEMM runs for M rows (its partials: 16 consumer warps' pairs per unit). */
static size_t td_units(const twell_shape *s, size_t M) {
    return tw_cdiv(tw_cdiv(M, TD_BM), TD_CLUSTER) * tw_cdiv(s->N, TD_BN);
}

size_t tw_ctd_bytes(const twell_shape *s, size_t M) {
    size_t N = s->N;
    if (M == 0 || M > SIZE_MAX / (16u * N))
        return 0;
    return td_align(M * 3u * N * 2u) + td_align(M * N * 4u) +
           td_align(td_units(s, M) * TD_CLUSTER * 8u * 2u * sizeof(float));
}

twell_status tw_ctd_create(twell_ctx *ctx, twell_train_state *state, tw_tdense **out) {
    *out = state->dense;
    if (*out)
        return TWELL_OK;
    tw_tdense *d = calloc(1, sizeof *d);
    if (!d)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "twell_ffn_forward_train: out of host memory");
    void *h = NULL;
    twell_status st = tw_cuda_malloc(ctx, 8u, (void **)&d->dcount);
    if (st == TWELL_OK)
        st = tw_cuda_host_alloc(ctx, 8u, &h);
    if (st == TWELL_OK)
        st = tw_cuda_event_create(ctx, &d->ev);
    if (st == TWELL_OK)
        st = tw_cuda_event_create(ctx, &d->ws_ev);
    if (st != TWELL_OK) {
        tw_cuda_event_destroy(ctx, d->ev);
        tw_cuda_free(ctx, d->dcount);
        tw_cuda_host_free(ctx, h);
        free(d);
        return st;
    }
    d->hcount = h;
    d->est = -1.0;
    d->release_after = TW_TD_RELEASE_FIRST;
    TW_PROBE_DO(d->probe.min_rows = TW_TD_MIN_ROWS);
    d->last = TWELL_PATH_AUTO;
    state->dense = d;
    *out = d;
    return TWELL_OK;
}

/* Template `name` with parameters p[0..n) as a loaded module and its one kernel `fname`. */
static twell_status td_module(twell_ctx *ctx, const char *name, const tw_param *p, size_t n,
                              const char *fname, tw_CUmodule *mod, tw_CUfunction *fn) {
    return tw_template_module(ctx, name, p, n, &fname, 1, mod, fn);
}

/* gemm_sm90's parameters for one GEMM (order as the template's cache key sees them): k, n the
 * reduction and output widths, the operands' majorness, the output's leading dimension, the
 * pipeline stages; SPLIT = 1 appended for the split-K variant. Returns the count (9 or 10). */
static size_t td_gemm_params(tw_param p[10], const char *dt, long long k, long long n,
                             const char *mode, int ta, int tb, long long ldo, unsigned stages,
                             int split) {
    size_t i = 0;
    p[i++] = (tw_param){"K", NULL, k};
    p[i++] = (tw_param){"N", NULL, n};
    p[i++] = (tw_param){"dtype", dt, 0};
    p[i++] = (tw_param){"MODE", mode, 0};
    p[i++] = (tw_param){"TA", NULL, ta};
    p[i++] = (tw_param){"TB", NULL, tb};
    p[i++] = (tw_param){"LDO", NULL, ldo};
    p[i++] = (tw_param){"STAGES", NULL, (long long)stages};
    p[i++] = (tw_param){"CLUSTER", NULL, (long long)TD_CLUSTER};
    if (split)
        p[i++] = (tw_param){"SPLIT", NULL, 1};
    return i;
}

/* Renders, compiles (or takes from the cache) and loads the six modules. */
static twell_status td_load_all(twell_plan *plan, tw_tdense *d) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    const char *dt = tw_dtype_param(s->dtype);
    long long K = s->K, N = s->N;
    unsigned wgs = TD_WG_STAGES_OF(d);
    tw_param p[5][10];
    size_t np[5];
    /* Tm into columns [2N, 3N) of the [M, 3N] buffer */
    np[TD_FWD] = td_gemm_params(p[TD_FWD], dt, K, N, "fwd", 0, 0, 3 * N, TD_STAGES, 0);
    /* y = Tm·Wd: Wd read N-major (MN-major B) */
    np[TD_Y] = td_gemm_params(p[TD_Y], dt, N, K, "mm", 0, 1, K, TD_STAGES, 0);
    /* dU, dP into columns [0, 2N) */
    np[TD_DT] = td_gemm_params(p[TD_DT], dt, K, N, "dt", 0, 0, 3 * N, TD_STAGES, 0);
    /* dx = [dU dP]·[Wu; Wg] */
    np[TD_DX] = td_gemm_params(p[TD_DX], dt, 2 * N, K, "mm", 0, 1, K, TD_STAGES, 0);
    /* [dWu; dWg; dWd] = [dU dP Tm]ᵀ·[x x dy] */
    np[TD_WG] = td_gemm_params(p[TD_WG], dt, 64, K, "wgrad", 1, 1, K, wgs, 0);
    for (int i = 0; i < 5; i++) {
        TW_TRY(td_module(ctx, "gemm_sm90", p[i], np[i], "twell_gemm_sm90", &d->mod[i], &d->fn[i]));
        TW_TRY(tw_cu_func_set_attribute(ctx, d->fn[i],
                                        TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        (int)(i == TD_WG ? TD_WG_SMEM(wgs) : TD_SMEM)));
    }
    return td_module(ctx, "train_dense_aux", NULL, 0, "twell_train_dense_stats", &d->mod[TD_AUX],
                     &d->fn[TD_AUX]);
}

static void td_unload(tw_tdense *d) {
    for (int i = 0; i < TD_NMOD; i++) {
        tw_cu_module_unload(d->mod[i]);
        d->mod[i] = NULL;
        d->fn[i] = NULL;
    }
    for (int i = 0; i < TS_NMOD; i++) {
        tw_cu_module_unload(d->smod[i]);
        d->smod[i] = NULL;
        d->sfn[i] = NULL;
    }
    d->split_tried = d->split_ok = 0;
}

/* Whether the dense path can run on this plan/device at all (modules loaded on first use). */
twell_status tw_ctd_prepare(twell_plan *plan, tw_tdense *d, int forced) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    const tw_cuda *dev = ctx->cuda;
    if (d->loaded)
        return TWELL_OK;
    d->loaded = 1;
    if (strcmp(dev->arch, "sm_90a") != 0) {
        snprintf(d->why, sizeof d->why, "the dense kernels need sm_90a (this device is %s)",
                 dev->arch);
    } else if (s->K % 64u != 0) {
        snprintf(d->why, sizeof d->why, "the dense kernels need K %% 64 == 0 (K = %u)", s->K);
    } else if (dev->smem_optin < (int)TD_SMEM || dev->sm_count < (int)TD_CLUSTER) {
        snprintf(d->why, sizeof d->why,
                 "the device has %d bytes of shared memory per block (%u "
                 "needed)",
                 dev->smem_optin, TD_SMEM);
    } else {
        twell_status st = td_load_all(plan, d);
        if (st == TWELL_OK) {
            d->available = 1;
            return TWELL_OK;
        }
        td_unload(d);
        if (st == TWELL_ERR_NO_MEMORY || forced)
            return st;
        snprintf(d->why, sizeof d->why, "the dense kernels could not be prepared: %s",
                 tw_errmsg(ctx));
        tw_log(ctx, TWELL_LOG_WARN, "twell_ffn_forward_train: %s; AUTO runs the sparse path",
               d->why);
    }
    return TWELL_OK;
}

int tw_ctd_aligned(const void *const *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((uintptr_t)p[i] % 16u != 0)
            return 0;
    return 1;
}

/* Workspace for M rows: the caller's when set (never allocating), else our own, grown after a
 * device synchronisation (earlier steps may still use it; none when AUTO released it, see
 * tw_ctd_note_sparse: nothing can use it then). */
static twell_status td_reserve(twell_plan *plan, twell_train_state *state, tw_tdense *d, size_t M) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    size_t need = tw_ctd_bytes(s, M);
    if (need == 0)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "twell_ffn_forward_train: M = %zu overflows", M);
    char *base;
    if (state->ws) {
        if (state->ws_bytes < need)
            return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                            "twell_ffn_forward_train: the dense path needs %zu bytes of workspace "
                            "for M = %zu; the caller's workspace has %zu",
                            need, M, state->ws_bytes);
        base = state->ws;
    } else {
        if (d->own_bytes < need) {
            if (d->own) /* earlier steps may still use it */
                TW_TRY(tw_cuda_synchronize(ctx));
            tw_cuda_free(ctx, d->own);
            d->own = NULL;
            d->own_bytes = 0;
            if (d->released) { /* back to dense after a release: hold it longer next time */
                d->released = 0;
                d->release_after = d->release_after >= TW_TD_RELEASE_MAX / 2
                                       ? TW_TD_RELEASE_MAX
                                       : 2u * d->release_after;
            }
            void *p = NULL;
            twell_status st = tw_cuda_malloc(ctx, need, &p);
            if (st != TWELL_OK)
                return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                                "twell_ffn_forward_train: cannot allocate %zu bytes of device "
                                "memory for the dense path's workspace (M = %zu)",
                                need, M);
            d->own = p;
            d->own_bytes = need;
        }
        base = d->own;
    }
    d->buf = base;
    d->pu = base + td_align(M * 3u * s->N * 2u);
    d->part = (char *)d->pu + td_align(M * s->N * 4u);
    return TWELL_OK;
}

/* Records ws_ev after the work just enqueued on stream, which used the workspace (only ours
 * matters: a lent one is never freed here). */
static twell_status td_mark_used(twell_ctx *ctx, const twell_train_state *state, tw_tdense *d,
                                 twell_stream stream) {
    if (state->ws || !d->own)
        return TWELL_OK;
    TW_TRY(tw_cuda_event_record(ctx, d->ws_ev, stream));
    d->ws_ev_set = 1;
    return TWELL_OK;
}

/* A [outer, inner] 16-bit matrix of row pitch `pitch` elements as a TMA map, box {64, box_outer},
 * 128-byte swizzle, zero fill outside. */
static twell_status td_map(twell_ctx *ctx, tw_CUtensorMap *map, twell_dtype dt, const void *ptr,
                           size_t outer, size_t inner, size_t pitch, uint32_t box_outer) {
    const uint64_t dims[2] = {inner, outer};
    const uint64_t strides[1] = {(uint64_t)pitch * 2u};
    const uint32_t box[2] = {64u, box_outer};
    const uint32_t es[2] = {1u, 1u};
    return tw_cu_tensor_map_tiled(ctx, map,
                                  dt == TWELL_DTYPE_BF16 ? TW_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                         : TW_CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                  2u, ptr, dims, strides, box, es, TW_CU_TENSOR_MAP_INTERLEAVE_NONE,
                                  TW_CU_TENSOR_MAP_SWIZZLE_128B,
                                  TW_CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  TW_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* The training ABI's scalars and pointers of one launch. */
typedef struct {
    void *out0, *out1, *out2;
    const void *aux;
    void *part;
    float scal;
    int rows, kred_blocks, bsplit, nseg;
    uint32_t ncols;  /* output columns (the template's N) */
    unsigned nsplit; /* split-K slices (the SPLIT variants: passed as nseg); 0 or 1: none */
} td_args;

static twell_status td_gemm(twell_ctx *ctx, tw_CUfunction fn, unsigned smem,
                            const tw_CUtensorMap *ma, const tw_CUtensorMap *mb,
                            const tw_CUtensorMap *mg, const td_args *a, twell_stream stream) {
    size_t units = tw_cdiv(tw_cdiv((size_t)a->rows, TD_BM), TD_CLUSTER) * tw_cdiv(a->ncols, TD_BN);
    if (a->nsplit > 1u)
        units *= a->nsplit;
    size_t maxc = (size_t)ctx->cuda->sm_count / TD_CLUSTER;
    size_t clusters = units < maxc ? units : maxc;
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = (unsigned)(clusters ? clusters : 1u) * TD_CLUSTER;
    cfg.grid[1] = cfg.grid[2] = 1u;
    cfg.block[0] = TD_THREADS;
    cfg.block[1] = cfg.block[2] = 1u;
    cfg.cluster[0] = TD_CLUSTER;
    cfg.cluster[1] = cfg.cluster[2] = 1u;
    cfg.smem = smem;
    td_args v = *a;
    if (v.nsplit > 1u)
        v.nseg = (int)v.nsplit;
    void *args[] = {(void *)ma,     (void *)mb,     (void *)mg, &v.out0, &v.out1,
                    &v.out2,        (void *)&v.aux, &v.part,    &v.scal, &v.rows,
                    &v.kred_blocks, &v.bsplit,      &v.nseg};
    return tw_cu_launch(ctx, fn, &cfg, stream, args);
}

/* An mm GEMM (y or dx, output [rows, K] round(A·Bᵀ)): td_gemm with fn, or, where spart is set
 * (a block's split-K partials, tw_ctd_block_bytes) and the rows leave most clusters idle, the
 * SPLIT variant `which` over tw_ctd_nsplit slices into spart and their ordered reduction into out0.
 */
static twell_status td_mm(twell_ctx *ctx, const tw_tdense *d, tw_CUfunction fn, int which,
                          const tw_CUtensorMap *ma, const tw_CUtensorMap *mb,
                          const tw_CUtensorMap *mg, td_args a, size_t red, void *spart,
                          twell_stream stream) {
    int sms = ctx->cuda->sm_count;
    unsigned n = spart && d->split_ok ? tw_ctd_nsplit(sms, (size_t)a.rows, a.ncols, red) : 1u;
    if (n <= 1u)
        return td_gemm(ctx, fn, TD_SMEM, ma, mb, mg, &a, stream);
    void *out = a.out0;
    a.part = spart;
    a.nsplit = n;
    TW_TRY(td_gemm(ctx, d->sfn[which], TD_WG_SMEM(TD_WG_STAGES), ma, mb, mg, &a, stream));
    int rows = a.rows, ns = (int)n;
    void *args[] = {&spart, &rows, &ns, &out};
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    /* at most 16·sms blocks: fits unsigned */
    cfg.grid[0] = (unsigned)tw_dense_reduce_grid((size_t)rows, a.ncols, (unsigned)sms);
    cfg.grid[1] = cfg.grid[2] = 1u;
    cfg.block[0] = 256u;
    cfg.block[1] = cfg.block[2] = 1u;
    return tw_cu_launch(ctx, d->sfn[TS_RED], &cfg, stream, args);
}

/* The forward's two GEMMs on M rows: Tm (columns [2N, 3N) of buf), the (P, U) pairs into pu and
 * the stats partials into part; y = Tm·Wd (split along N into spart where td_mm does). */
static twell_status td_fwd_gemms(twell_ctx *ctx, const twell_shape *s, const tw_tdense *d, size_t M,
                                 const void *x, const void *wg, const void *wu, const void *wd,
                                 void *y, void *buf, void *pu, void *part, void *spart,
                                 twell_stream stream) {
    twell_dtype dt = s->dtype;
    size_t N = s->N, K = s->K;
    char *tm = (char *)buf + 2u * N * 2u; /* columns [2N, 3N) */
    tw_CUtensorMap ma, mb, mg;
    /* 1. Tm, the saved (P, U) pairs and the stats partials */
    TW_TRY(td_map(ctx, &ma, dt, x, M, K, K, TD_BM));
    TW_TRY(td_map(ctx, &mb, dt, wu, N, K, K, TD_BN / TD_CLUSTER));
    TW_TRY(td_map(ctx, &mg, dt, wg, N, K, K, TD_BN / TD_CLUSTER));
    td_args a = {tm, NULL, NULL, pu, part, 0.0f, (int)M, 0, 0, 1, (uint32_t)N, 0u};
    TW_TRY(td_gemm(ctx, d->fn[TD_FWD], TD_SMEM, &ma, &mb, &mg, &a, stream));
    /* 2. y = Tm·Wd (Wd MN-major: its rows are the reduction) */
    TW_TRY(td_map(ctx, &ma, dt, tm, M, N, 3u * N, TD_BM));
    TW_TRY(td_map(ctx, &mb, dt, wd, N, K, K, 64u));
    a = (td_args){y, NULL, NULL, NULL, NULL, 0.0f, (int)M, 0, (int)(N / 64u), 1, (uint32_t)K, 0u};
    TW_TRY(td_mm(ctx, d, d->fn[TD_Y], TS_Y, &ma, &mb, &mb, a, N, spart, stream));
    return TWELL_OK;
}

twell_status tw_ctd_forward(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                            const void *wg, const void *wu, const void *wd, void *y, float *stats,
                            twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_tdense *d = NULL;
    TW_TRY(tw_ctd_create(ctx, state, &d));
    TW_TRY(tw_ctd_prepare(plan, d, 1));
    if (!d->available)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED, "twell_ffn_forward_train: %s", d->why);
    d->saved_M = 0;
    TW_TRY(td_reserve(plan, state, d, M));
    TW_TRY(td_fwd_gemms(ctx, s, d, M, x, wg, wu, wd, y, d->buf, d->pu, d->part, NULL, stream));
    /* 3. stats (fixed order) and the count for AUTO, copied back without a wait */
    long long np = (long long)(td_units(s, M) * TD_CLUSTER * 8u), Ml = (long long)M;
    void *part = d->part, *cnt = d->dcount;
    void *sargs[] = {&part, &np, &Ml, &stats, &cnt};
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = cfg.grid[1] = cfg.grid[2] = 1u;
    cfg.block[0] = 1024u;
    cfg.block[1] = cfg.block[2] = 1u;
    TW_TRY(tw_cu_launch(ctx, d->fn[TD_AUX], &cfg, stream, sargs));
    TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, d->hcount, d->dcount, 8u, stream));
    TW_TRY(tw_cuda_event_record(ctx, d->ev, stream));
    TW_TRY(td_mark_used(ctx, state, d, stream));
    d->pending = 1;
    d->pending_M = M;
    d->saved_M = M;
    d->last = TWELL_PATH_DENSE;
    d->calls[TWELL_PATH_DENSE]++;
    d->sparse_run = 0;
    tw_ctd_note_bytes(state);
    return TWELL_OK;
}

/* The backward's GEMMs on M rows (l1c = λ / the step's M): dU, dP into columns [0, 2N) of buf
 * from dy·Wdᵀ and the saved pairs pu; dx = [dU dP]·[Wu; Wg] (split along 2N into spart where td_mm
 * does); the three weight gradients stored. */
static twell_status td_bwd_gemms(twell_ctx *ctx, const twell_shape *s, const tw_tdense *d, size_t M,
                                 const void *x, const void *wg, const void *wu, const void *wd,
                                 const void *dy, float l1c, void *dx, float *dwg, float *dwu,
                                 float *dwd, char *buf, void *pu, void *spart,
                                 twell_stream stream) {
    twell_dtype dt = s->dtype;
    size_t N = s->N, K = s->K;
    tw_CUtensorMap ma, mb, mg;
    /* 1. dT = dy·Wdᵀ (+ the L1 term) → dU, dP in columns [0, N), [N, 2N) */
    TW_TRY(td_map(ctx, &ma, dt, dy, M, K, K, TD_BM));
    TW_TRY(td_map(ctx, &mb, dt, wd, N, K, K, TD_BN / TD_CLUSTER));
    td_args a = {buf, buf + N * 2u, NULL, pu, NULL, l1c, (int)M, 0, 0, 1, (uint32_t)N, 0u};
    TW_TRY(td_gemm(ctx, d->fn[TD_DT], TD_SMEM, &ma, &mb, &mb, &a, stream));
    /* 2. dx = [dU dP]·[Wu; Wg] */
    TW_TRY(td_map(ctx, &ma, dt, buf, M, 2u * N, 3u * N, TD_BM));
    TW_TRY(td_map(ctx, &mb, dt, wu, N, K, K, 64u));
    TW_TRY(td_map(ctx, &mg, dt, wg, N, K, K, 64u));
    a = (td_args){dx, NULL, NULL, NULL, NULL, 0.0f, (int)M, 0, (int)(N / 64u), 1, (uint32_t)K, 0u};
    TW_TRY(td_mm(ctx, d, d->fn[TD_DX], TS_DX, &ma, &mb, &mg, a, 2u * N, spart, stream));
    /* 3. [dWu; dWg; dWd] = [dU dP Tm]ᵀ · [x; x; dy]: everything MN-major, reduction over M. One
     * launch when the dy rows start on a cluster boundary (2N % 256 == 0), else two. */
    int kbl = (int)tw_cdiv(M, 64u);
    TW_TRY(td_map(ctx, &mb, dt, x, M, K, K, 64u));
    TW_TRY(td_map(ctx, &mg, dt, dy, M, K, K, 64u));
    if ((2u * N) % (TD_BM * TD_CLUSTER) == 0) {
        TW_TRY(td_map(ctx, &ma, dt, buf, M, 3u * N, 3u * N, 64u));
        a = (td_args){dwu,           dwg, dwd,           NULL,   NULL,        0.0f,
                      (int)(3u * N), kbl, (int)(2u * N), (int)N, (uint32_t)K, 0u};
        TW_TRY(
            td_gemm(ctx, d->fn[TD_WG], TD_WG_SMEM(TD_WG_STAGES_OF(d)), &ma, &mb, &mg, &a, stream));
    } else {
        TW_TRY(td_map(ctx, &ma, dt, buf, M, 2u * N, 3u * N, 64u));
        a = (td_args){dwu,           dwg, NULL,          NULL,   NULL,        0.0f,
                      (int)(2u * N), kbl, (int)(2u * N), (int)N, (uint32_t)K, 0u};
        TW_TRY(
            td_gemm(ctx, d->fn[TD_WG], TD_WG_SMEM(TD_WG_STAGES_OF(d)), &ma, &mb, &mg, &a, stream));
        TW_TRY(td_map(ctx, &ma, dt, buf + 2u * N * 2u, M, N, 3u * N, 64u));
        a = (td_args){dwd, NULL, NULL, NULL, NULL, 0.0f, (int)N, kbl, 0, (int)N, (uint32_t)K, 0u};
        TW_TRY(
            td_gemm(ctx, d->fn[TD_WG], TD_WG_SMEM(TD_WG_STAGES_OF(d)), &ma, &mb, &mg, &a, stream));
    }
    return TWELL_OK;
}

twell_status tw_ctd_backward(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                             const void *wg, const void *wu, const void *wd, const void *dy,
                             float lambda, void *dx, float *dwg, float *dwu, float *dwd,
                             twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_tdense *d = state->dense;
    const void *p[] = {x, wg, wu, wd, dy, dx, dwg, dwu, dwd};
    if (!tw_ctd_aligned(p, 9))
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "twell_ffn_backward: the saved forward ran the dense path, which needs "
                        "every tensor 16-byte aligned");
    float l1c = (float)((double)lambda / (double)M); /* as the CPU reference */
    TW_TRY(td_bwd_gemms(ctx, s, d, M, x, wg, wu, wd, dy, l1c, dx, dwg, dwu, dwd, d->buf, d->pu,
                        NULL, stream));
    return td_mark_used(ctx, state, d, stream);
}

/* ---- the GEMMs on a block of rows (the sparse path's heavy rows, cuda_train_heavy.c) ---- */

/* The split-K modules (TS_*): the mm variants with SPLIT = 1 and dense_aux's reduction. A failure
 * only leaves the block GEMMs unsplit (logged). */
static void td_split_load(twell_plan *plan, tw_tdense *d) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    const char *dt = tw_dtype_param(s->dtype);
    long long K = s->K, N = s->N;
    d->split_tried = 1;
    twell_status st = TWELL_OK;
    for (int i = 0; i < 2 && st == TWELL_OK; i++) {
        tw_param p[10];
        size_t np = td_gemm_params(p, dt, i == TS_Y ? N : 2 * N, K, "mm", 0, 1, K, TD_WG_STAGES, 1);
        st = td_module(ctx, "gemm_sm90", p, np, "twell_gemm_sm90", &d->smod[i], &d->sfn[i]);
        if (st == TWELL_OK)
            st = tw_cu_func_set_attribute(ctx, d->sfn[i],
                                          TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          (int)TD_WG_SMEM(TD_WG_STAGES));
    }
    if (st == TWELL_OK) {
        tw_param aux[TW_SHAPE_NPARAMS];
        size_t naux = tw_shape_params(s, aux);
        st = td_module(ctx, "dense_aux", aux, naux, "twell_dense_reduce_plain", &d->smod[TS_RED],
                       &d->sfn[TS_RED]);
    }
    if (st == TWELL_OK) {
        d->split_ok = 1;
        return;
    }
    tw_log(ctx, TWELL_LOG_WARN, "heavy-row block: split-K GEMMs unavailable (%s); running unsplit",
           tw_errmsg(ctx));
    for (int i = 0; i < TS_NMOD; i++) {
        tw_cu_module_unload(d->smod[i]);
        d->smod[i] = NULL;
        d->sfn[i] = NULL;
    }
}

twell_status tw_ctd_block_prepare(twell_plan *plan, twell_train_state *state, int *available) {
    tw_tdense *d = NULL;
    *available = 0;
    TW_TRY(tw_ctd_create(plan->ctx, state, &d));
    TW_TRY(tw_ctd_prepare(plan, d, 0));
    if (d->available && !d->split_tried)
        td_split_load(plan, d);
    *available = d->available;
    return TWELL_OK;
}

/* The split-K partials a block of Mb rows needs: the dx GEMM's slices (its reduction is the
 * longer, so it takes at least as many as y's) x Mb x K floats; 0 when it runs unsplit. */
static size_t td_block_split_bytes(const twell_shape *s, int sm_count, size_t Mb) {
    unsigned n = tw_ctd_nsplit(sm_count, Mb, s->K, 2u * (size_t)s->N);
    return n > 1u ? td_align((size_t)n * Mb * s->K * sizeof(float)) : 0u;
}

size_t tw_ctd_block_bytes(const twell_plan *plan, size_t Mb) {
    const twell_shape *s = &plan->shape;
    size_t b = tw_ctd_bytes(s, Mb);
    return b ? b + td_block_split_bytes(s, plan->ctx->cuda->sm_count, Mb) : 0u;
}

/* The block workspace's parts: buf [Mb, 3N] 16-bit at 0, pu [Mb, N] u32, part [units·16][2],
 * then the split-K partials (td_block_split_bytes). */
static void td_block_parts(const twell_shape *s, size_t Mb, void *ws, char **buf, void **pu,
                           void **part) {
    *buf = ws;
    *pu = (char *)ws + td_align(Mb * 3u * s->N * 2u);
    *part = (char *)*pu + td_align(Mb * s->N * 4u);
}

static void *td_block_spart(const twell_shape *s, size_t Mb, void *part) {
    return (char *)part + td_align(td_units(s, Mb) * TD_CLUSTER * 8u * 2u * sizeof(float));
}

long long tw_ctd_block_npart(const twell_shape *s, size_t Mb) {
    return (long long)(td_units(s, Mb) * TD_CLUSTER * 8u);
}

void *tw_ctd_block_part(const twell_shape *s, size_t Mb, void *ws) {
    char *buf;
    void *pu, *part;
    td_block_parts(s, Mb, ws, &buf, &pu, &part);
    return part;
}

twell_status tw_ctd_block_forward(twell_plan *plan, twell_train_state *state, size_t Mb,
                                  const void *xb, const void *wg, const void *wu, const void *wd,
                                  void *yb, void *ws, twell_stream stream) {
    tw_tdense *d = state->dense;
    if (!d || !d->available || Mb == 0 || Mb > (size_t)INT_MAX)
        return tw_error(plan->ctx, TWELL_ERR_INTERNAL,
                        "twell_ffn_forward_train: the dense block GEMMs are not prepared");
    char *buf;
    void *pu, *part;
    td_block_parts(&plan->shape, Mb, ws, &buf, &pu, &part);
    return td_fwd_gemms(plan->ctx, &plan->shape, d, Mb, xb, wg, wu, wd, yb, buf, pu, part,
                        td_block_spart(&plan->shape, Mb, part), stream);
}

twell_status tw_ctd_block_backward(twell_plan *plan, twell_train_state *state, size_t Mb,
                                   const void *xb, const void *wg, const void *wu, const void *wd,
                                   const void *dyb, float l1c, void *dxb, float *dwg, float *dwu,
                                   float *dwd, void *ws, twell_stream stream) {
    tw_tdense *d = state->dense;
    if (!d || !d->available || Mb == 0 || Mb > (size_t)INT_MAX)
        return tw_error(plan->ctx, TWELL_ERR_INTERNAL,
                        "twell_ffn_backward: the dense block GEMMs are not prepared");
    char *buf;
    void *pu, *part;
    td_block_parts(&plan->shape, Mb, ws, &buf, &pu, &part);
    return td_bwd_gemms(plan->ctx, &plan->shape, d, Mb, xb, wg, wu, wd, dyb, l1c, dxb, dwg, dwu,
                        dwd, buf, pu, td_block_spart(&plan->shape, Mb, part), stream);
}

twell_status tw_ctd_set_workspace(twell_train_state *state, void *ptr, size_t bytes) {
    twell_ctx *ctx = state->plan->ctx;
    tw_cu_scope sc;
    TW_TRY(tw_cu_enter(ctx, &sc));
    twell_status st = tw_cuda_synchronize(ctx); /* work in flight may use either buffer */
    if (st == TWELL_OK) {
        tw_tdense *d = state->dense;
        if (d) {
            tw_cuda_free(ctx, d->own);
            d->own = NULL;
            d->own_bytes = 0;
            d->saved_M = 0; /* the saved forward lived in the old buffer */
        }
        state->ws = ptr;
        state->ws_bytes = ptr ? bytes : 0;
    }
    tw_cu_leave(ctx, &sc);
    return st;
}

void tw_ctd_release(twell_train_state *state) {
    tw_tdense *d = state ? state->dense : NULL;
    if (!d)
        return;
    twell_ctx *ctx = state->plan->ctx;
    tw_cu_scope sc;
    if (tw_cu_enter(ctx, &sc) == TWELL_OK) {
        (void)tw_cuda_synchronize(ctx);
        td_unload(d);
        tw_cuda_free(ctx, d->own);
        tw_cuda_free(ctx, d->dcount);
        tw_cuda_host_free(ctx, d->hcount);
        tw_cuda_event_destroy(ctx, d->ev);
        tw_cuda_event_destroy(ctx, d->ws_ev);
        tw_cu_leave(ctx, &sc);
    }
    free(d);
    state->dense = NULL;
}

size_t tw_ctd_held(const twell_train_state *state) {
    const tw_tdense *d = state ? state->dense : NULL;
    return d ? d->own_bytes + 8u : 0u;
}

void tw_ctd_note_bytes(twell_train_state *state) {
    tw_tdense *d = state->dense;
    size_t b = state->bytes + tw_ctd_held(state);
    if (d && b > d->peak)
        d->peak = b;
}
