/*
 * cuda_dense.c — the dense path of twell_ffn_infer on Hopper (two tensor-core GEMMs after the
 * caller's gate-pack, from templates/gemm_sm90.cu.lua and dense_aux.cu.lua) and the dispatch of a
 * call: AUTO's choice (ffn_policy.h) from counts read back asynchronously, and what changes while
 * the caller's stream is being captured into a CUDA graph (cuda_dense.h).
 */
#include "cuda_dense.h"

#include "cuda_small.h"
#include "ffn_policy.h"

#include "jit.h"
#include "op_plan.h"
#include "test_control.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tile configuration rendered into gemm_sm90 (its STAGES and CLUSTER) and fixed by the kernel. */
#define TW_DG_STAGES 3u
#define TW_DG_CLUSTER 2u
#define TW_DG_BM 128u
#define TW_DG_BN 256u
#define TW_DG_BK 64u
#define TW_DG_THREADS 384u
/* Dynamic shared memory; must equal SMEM in the template (its first line prints it): 1 KB of
 * alignment slack, the stage ring, the 128-row staging buffer (528-byte rows), the mbarriers. */
#define TW_DG_SMEM                                                                                 \
    (1024u + TW_DG_STAGES * (TW_DG_BM + TW_DG_BN) * TW_DG_BK * 2u + TW_DG_BM * 528u +              \
     2u * TW_DG_STAGES * 8u)
#define TW_DG_UNIT_ROWS (TW_DG_BM * TW_DG_CLUSTER)
#define TW_DENSE_SLOTS 16u                   /* count slots: call c uses slot c % TW_DENSE_SLOTS */
#define TW_DENSE_H_BYTES ((size_t)512 << 20) /* H workspace bound: rows are chunked to fit */

struct tw_dense {
    int available; /* the three modules are loaded */
    char why[320]; /* why not, for TWELL_PATH_DENSE's error */
    tw_CUmodule mod_up, mod_down, mod_aux;
    tw_CUfunction up, down, count, expand, transpose;
    unsigned max_clusters; /* one CTA per SM */
    size_t chunk_rows;     /* rows per pass of the pipeline (bounds H) */
    /* workspace, allocated at the first dense call */
    void *h; /* [h_rows, N] dtype */
    size_t h_rows;
    uint32_t *flags; /* one word per unit of a chunk */
    void *wdt;       /* [K, N] dtype: Wd transposed, rewritten every call */
    /* counts: device [SLOTS][2] u64 (Σ counts, recomputed units), pinned copies */
    uint64_t *dstats, *hstats;
    uint64_t *hstats_dev; /* hstats' device address (NULL: not mappable): sparse calls' pre-pass
                             writes its counts there, no copy enqueued */
    int last_in_host;     /* the last counted slot was written to hstats directly */
    size_t slot_rows[TW_DENSE_SLOTS];
    unsigned next_slot, last_slot;
    int counted;     /* some call has counted (last_slot valid) */
    int cnt_pending; /* the last copy has not been read yet */
    tw_cuda_event cnt_done;
    tw_cuda_event done; /* after each dense call: workspace reuse across streams */
    int used;
    twell_stream last_stream;
    double est;       /* mean active values per row of the latest counts read; -1 none */
    double hint;      /* the estimate before any counts: twell_plan_reserve's; -1 none */
    double threshold; /* > 0: set through test control (TW_TC_DENSE_SET_THRESHOLD) */
    size_t min_rows;  /* > 0: set through test control (TW_TC_DENSE_SET_MIN_ROWS) */
    twell_path last;
    int captured;      /* a captured call used the workspace: replaced buffers go to keep */
    tw_cuda_keep keep; /* buffers captured graphs may still use (freed at release) */
    int grow_syncs;
    unsigned long calls[3]; /* by twell_path */
};

static size_t tw_cdiv(size_t a, size_t b) { return (a + b - 1) / b; }
static size_t tw_min(size_t a, size_t b) { return a < b ? a : b; }

/* Units (cluster tiles) of a chunk of m rows: the flag words the GEMMs index. */
static size_t tw_dense_units(const twell_shape *s, size_t m) {
    return tw_cdiv(tw_cdiv(m, TW_DG_BM), TW_DG_CLUSTER) * tw_cdiv(s->N, TW_DG_BN);
}

/* ---- modules ---- */

/* Template `name` with parameters p[0..n) as a loaded module with kernels fnames[0..nfn). */
static twell_status tw_dense_module(twell_ctx *ctx, const char *name, const tw_param *p, size_t n,
                                    const char *const *fnames, size_t nfn, tw_CUmodule *mod,
                                    tw_CUfunction *fns) {
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    TW_TRY(tw_jit_cubin(ctx, name, p, n, ctx->cuda->arch, &cubin));
    twell_status st = tw_cu_module_open(ctx, cubin.data, fnames, nfn, mod, fns);
    tw_cubin_free(&cubin);
    return st;
}

static void tw_dense_unload(tw_dense *d) {
    tw_cu_module_unload(d->mod_up);
    tw_cu_module_unload(d->mod_down);
    tw_cu_module_unload(d->mod_aux);
    d->mod_up = d->mod_down = d->mod_aux = NULL;
    d->up = d->down = d->count = d->expand = d->transpose = NULL;
}

static twell_status tw_dense_load(twell_plan *plan, tw_dense *d) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_param up[TW_SHAPE_NPARAMS + 3];
    size_t nup = tw_shape_params(s, up);
    up[nup++] = (tw_param){"MODE", s->gated ? "gated" : "relu", 0};
    up[nup++] = (tw_param){"STAGES", NULL, (long long)TW_DG_STAGES};
    up[nup++] = (tw_param){"CLUSTER", NULL, (long long)TW_DG_CLUSTER};
    /* y = H · (Wdᵀ)ᵀ: reduction over the hidden width, K output columns */
    tw_param down[] = {
        {"K", NULL, (long long)s->N},
        {"N", NULL, (long long)s->K},
        {"dtype", tw_dtype_param(s->dtype), 0},
        {"MODE", "plain", 0},
        {"STAGES", NULL, (long long)TW_DG_STAGES},
        {"CLUSTER", NULL, (long long)TW_DG_CLUSTER},
    };
    tw_param aux[TW_SHAPE_NPARAMS];
    size_t naux = tw_shape_params(s, aux);
    static const char *const gemm[] = {"twell_gemm_sm90"};
    static const char *const aux_fns[] = {"twell_dense_count", "twell_dense_expand",
                                          "twell_dense_transpose"};
    tw_CUfunction af[3];
    TW_TRY(tw_dense_module(ctx, "gemm_sm90", up, nup, gemm, 1, &d->mod_up, &d->up));
    TW_TRY(tw_dense_module(ctx, "gemm_sm90", down, sizeof down / sizeof down[0], gemm, 1,
                           &d->mod_down, &d->down));
    TW_TRY(tw_dense_module(ctx, "dense_aux", aux, naux, aux_fns, 3, &d->mod_aux, af));
    d->count = af[0], d->expand = af[1], d->transpose = af[2];
    TW_TRY(tw_cu_func_set_attribute(ctx, d->up, TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    (int)TW_DG_SMEM));
    return tw_cu_func_set_attribute(
        ctx, d->down, TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)TW_DG_SMEM);
}

twell_status tw_cuda_dense_init(twell_plan *plan, tw_dense **out) {
    *out = NULL;
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    const tw_cuda *dev = ctx->cuda;
    tw_dense *d = calloc(1, sizeof *d);
    if (!d)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "ffn_infer: out of memory for the dense state");
    d->est = -1.0;
    d->hint = -1.0;
    d->last = TWELL_PATH_AUTO;
    size_t rows = TW_DENSE_H_BYTES / (2u * (size_t)s->N) / TW_DG_UNIT_ROWS * TW_DG_UNIT_ROWS;
    d->chunk_rows = rows < TW_DG_UNIT_ROWS ? TW_DG_UNIT_ROWS : rows > 65536u ? 65536u : rows;
    if (strcmp(dev->arch, "sm_90a") != 0) {
        snprintf(d->why, sizeof d->why, "the dense kernels need sm_90a (this device is %s)",
                 dev->arch);
    } else if (s->K % 64u != 0) {
        snprintf(d->why, sizeof d->why, "the dense kernels need K %% 64 == 0 (K = %u)", s->K);
    } else if (dev->smem_optin < (int)TW_DG_SMEM || dev->sm_count < (int)TW_DG_CLUSTER) {
        snprintf(d->why, sizeof d->why,
                 "the device has %d bytes of shared memory per block (%u "
                 "needed) and %d SMs",
                 dev->smem_optin, TW_DG_SMEM, dev->sm_count);
    } else {
        void *hs = NULL;
        twell_status st = tw_dense_load(plan, d);
        if (st == TWELL_OK)
            st = tw_cuda_malloc(ctx, TW_DENSE_SLOTS * 16u, (void **)&d->dstats);
        if (st == TWELL_OK)
            st = tw_cuda_host_alloc(ctx, TW_DENSE_SLOTS * 16u, &hs);
        d->hstats = hs;
        if (st == TWELL_OK)
            st = tw_cuda_event_create(ctx, &d->cnt_done);
        if (st == TWELL_OK)
            st = tw_cuda_event_create(ctx, &d->done);
        if (st == TWELL_ERR_NO_MEMORY) {
            tw_cuda_dense_release(plan, d);
            return st;
        }
        if (st != TWELL_OK) {
            /* Not fatal: the sparse path is exact for every shape. */
            snprintf(d->why, sizeof d->why, "the dense kernels could not be prepared: %s",
                     twell_ctx_errmsg(ctx));
            tw_log(ctx, TWELL_LOG_WARN, "ffn_infer: %s; AUTO runs the sparse path", d->why);
            tw_dense_unload(d);
        } else {
            memset(d->hstats, 0, TW_DENSE_SLOTS * 16u);
            void *hd = NULL;
            if (tw_cuda_host_device_ptr(ctx, d->hstats, &hd) == TWELL_OK)
                d->hstats_dev = hd;
            d->max_clusters = (unsigned)dev->sm_count / TW_DG_CLUSTER;
            d->available = 1;
        }
    }
    *out = d;
    return TWELL_OK;
}

void tw_cuda_dense_release(twell_plan *plan, tw_dense *d) {
    if (!d)
        return;
    twell_ctx *ctx = plan->ctx;
    tw_dense_unload(d);
    tw_cuda_keep_release(ctx, &d->keep);
    tw_cuda_free(ctx, d->h);
    tw_cuda_free(ctx, d->flags);
    tw_cuda_free(ctx, d->wdt);
    tw_cuda_free(ctx, d->dstats);
    tw_cuda_host_free(ctx, d->hstats);
    tw_cuda_event_destroy(ctx, d->cnt_done);
    tw_cuda_event_destroy(ctx, d->done);
    free(d);
}

/* ---- launches ---- */

static twell_status tw_go(twell_ctx *ctx, tw_CUfunction fn, size_t gx, unsigned gy,
                          twell_stream stream, void **args) {
    return tw_cu_launch_grid(ctx, fn, gx, gy, 256u, 0u, 0u, stream, args);
}

/* A row-major [rows, cols] 16-bit matrix as a TMA map: box 64 columns x box_rows rows, 128-byte
 * swizzle (the wgmma operand layout), zero fill outside (ragged tiles). */
static twell_status tw_dense_map(twell_ctx *ctx, tw_CUtensorMap *map, twell_dtype dtype,
                                 const void *ptr, size_t rows, uint32_t cols, uint32_t box_rows) {
    const uint64_t dims[2] = {cols, rows};
    const uint64_t strides[1] = {(uint64_t)cols * 2u};
    const uint32_t box[2] = {TW_DG_BK, box_rows};
    const uint32_t elem_strides[2] = {1u, 1u};
    return tw_cu_tensor_map_tiled(ctx, map,
                                  dtype == TWELL_DTYPE_BF16 ? TW_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                            : TW_CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                  2u, ptr, dims, strides, box, elem_strides,
                                  TW_CU_TENSOR_MAP_INTERLEAVE_NONE, TW_CU_TENSOR_MAP_SWIZZLE_128B,
                                  TW_CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  TW_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* out[m, ncols] = epilogue(a[m, kred] · b[ncols, kred]ᵀ) with gemm_sm90's ABI. */
static twell_status tw_dense_gemm(twell_plan *plan, tw_dense *d, tw_CUfunction fn, size_t m,
                                  uint32_t kred, uint32_t ncols, const void *a, const void *b,
                                  const void *g, void *out, const uint32_t *packed,
                                  const uint32_t *flags, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    twell_dtype dt = plan->shape.dtype;
    tw_CUtensorMap ma, mb, mg;
    const uint32_t brows = TW_DG_BN / TW_DG_CLUSTER;
    TW_TRY(tw_dense_map(ctx, &ma, dt, a, m, kred, TW_DG_BM));
    TW_TRY(tw_dense_map(ctx, &mb, dt, b, ncols, kred, brows));
    TW_TRY(tw_dense_map(ctx, &mg, dt, g ? g : b, ncols, kred, brows));
    const size_t units = tw_cdiv(tw_cdiv(m, TW_DG_BM), TW_DG_CLUSTER) * tw_cdiv(ncols, TW_DG_BN);
    const size_t clusters = tw_min(units, d->max_clusters);
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = (unsigned)clusters * TW_DG_CLUSTER;
    cfg.grid[1] = cfg.grid[2] = 1u;
    cfg.block[0] = TW_DG_THREADS;
    cfg.block[1] = cfg.block[2] = 1u;
    cfg.cluster[0] = TW_DG_CLUSTER;
    cfg.cluster[1] = cfg.cluster[2] = 1u;
    cfg.smem = TW_DG_SMEM;
    int mi = (int)m;
    void *args[] = {(void *)&ma,     (void *)&mb,    (void *)&mg, (void *)&out,
                    (void *)&packed, (void *)&flags, (void *)&mi};
    return tw_cu_launch(ctx, fn, &cfg, stream, args);
}

/* Counts m rows of packed into slot `slot` (and flags the units to recompute when flags is not
 * NULL). */
static twell_status tw_dense_count(twell_plan *plan, tw_dense *d, size_t m, const uint32_t *packed,
                                   uint32_t *flags, unsigned slot, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    size_t sms = (size_t)ctx->cuda->sm_count;
    int mi = (int)m, unit_rows = (int)TW_DG_UNIT_ROWS;
    uint64_t *stats = d->dstats + 2u * slot;
    void *args[] = {(void *)&packed, &mi, &unit_rows, (void *)&flags, (void *)&stats};
    return tw_go(ctx, d->count, tw_min(tw_cdiv(m * (s->N / s->T), 256), 8 * sms), 1, stream, args);
}

static unsigned tw_dense_slot_take(tw_dense *d) {
    unsigned slot = d->next_slot;
    d->next_slot = (d->next_slot + 1u) % TW_DENSE_SLOTS;
    return slot;
}

static twell_status tw_dense_count_begin(twell_plan *plan, tw_dense *d, twell_stream stream,
                                         unsigned *slot) {
    *slot = tw_dense_slot_take(d);
    return tw_cuda_memset_d32(plan->ctx, d->dstats + 2u * *slot, 0u, 4u, stream);
}

/* The slot's counts to pinned memory (in_host: the kernels wrote them there already); the next
 * calls read them once the event says they have landed. */
static twell_status tw_dense_count_end(twell_plan *plan, tw_dense *d, unsigned slot, size_t M,
                                       int in_host, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    if (!in_host)
        TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, d->hstats + 2u * slot, d->dstats + 2u * slot, 16u,
                                         stream));
    TW_TRY(tw_cuda_event_record(ctx, d->cnt_done, stream));
    d->slot_rows[slot] = M;
    d->last_slot = slot;
    d->last_in_host = in_host;
    d->counted = 1;
    d->cnt_pending = 1;
    return TWELL_OK;
}

/* Reads the latest counts if their copy has completed (never waits). */
static twell_status tw_dense_collect(twell_plan *plan, tw_dense *d) {
    if (!d->cnt_pending)
        return TWELL_OK;
    int done = 0;
    TW_TRY(tw_cuda_event_query(plan->ctx, d->cnt_done, &done));
    if (!done)
        return TWELL_OK;
    d->cnt_pending = 0;
    d->est = (double)d->hstats[2u * d->last_slot] / (double)d->slot_rows[d->last_slot];
    return TWELL_OK;
}

static double tw_dense_thr(const tw_dense *d, const twell_shape *s, size_t M) {
    return d->threshold > 0.0 ? d->threshold : tw_ffn_policy_dense_threshold(M, s->N);
}

/* Workspace for chunks of R rows: H, the unit flags and Wdᵀ. A larger H waits for the previous
 * dense call first (it may still read the old one). On failure the old buffers are kept. */
static twell_status tw_dense_reserve(twell_plan *plan, tw_dense *d, size_t R) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    if (!d->wdt)
        TW_TRY(tw_cuda_malloc(ctx, (size_t)s->N * s->K * 2u, &d->wdt));
    if (R <= d->h_rows)
        return TWELL_OK;
    if (d->used) {
        TW_TRY(tw_cuda_event_synchronize(ctx, d->done));
        d->grow_syncs++;
    }
    void *h = NULL, *fl = NULL;
    twell_status st = tw_cuda_malloc(ctx, R * s->N * 2u, &h);
    if (st == TWELL_OK)
        st = tw_cuda_malloc(ctx, tw_dense_units(s, R) * 4u, &fl);
    if (st != TWELL_OK) {
        tw_cuda_free(ctx, h);
        return st;
    }
    tw_cuda_keep_free(ctx, &d->keep, d->captured, d->h);
    tw_cuda_keep_free(ctx, &d->keep, d->captured, d->flags);
    d->h = h;
    d->flags = fl;
    d->h_rows = R;
    return TWELL_OK;
}

/* The dense pipeline for M rows (workspace reserved, stream ordered). */
static twell_status tw_dense_run(twell_plan *plan, tw_dense *d, size_t M, const void *x,
                                 const uint32_t *packed, const void *wg, const void *wu,
                                 const void *wd, void *y, int capturing, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    size_t sms = (size_t)ctx->cuda->sm_count;
    unsigned slot;
    TW_TRY(tw_dense_count_begin(plan, d, stream, &slot));
    void *a_tr[] = {(void *)&wd, &d->wdt};
    TW_TRY(tw_go(ctx, d->transpose, s->K / 64u, s->N / 64u, stream, a_tr));
    for (size_t r0 = 0; r0 < M; r0 += d->h_rows) {
        size_t m = tw_min(M - r0, d->h_rows);
        const void *xc = (const char *)x + r0 * s->K * 2u;
        const uint32_t *pc = packed + r0 * (s->N / s->C);
        void *yc = (char *)y + r0 * s->K * 2u;
        TW_TRY(tw_cuda_memset_d32(ctx, d->flags, 0u, tw_dense_units(s, m), stream));
        TW_TRY(tw_dense_count(plan, d, m, pc, d->flags, slot, stream));
        if (s->gated) {
            TW_TRY(tw_dense_gemm(plan, d, d->up, m, s->K, s->N, xc, wu, wg, d->h, pc, d->flags,
                                 stream));
        } else {
            int mi = (int)m;
            void *a_ex[] = {(void *)&pc, &mi, &d->h};
            TW_TRY(tw_go(ctx, d->expand, tw_min(tw_cdiv(m * tw_cdiv(s->N, 256), 8), 16 * sms), 1,
                         stream, a_ex));
            TW_TRY(tw_dense_gemm(plan, d, d->up, m, s->K, s->N, xc, wu, NULL, d->h, NULL, d->flags,
                                 stream));
        }
        TW_TRY(tw_dense_gemm(plan, d, d->down, m, s->N, s->K, d->h, d->wdt, NULL, yc, NULL, NULL,
                             stream));
    }
    /* a captured call's counts are not read back: the host may never see a graph's replays */
    return capturing ? TWELL_OK : tw_dense_count_end(plan, d, slot, M, 0, stream);
}

twell_status tw_cuda_dense_reserve_rows(twell_plan *plan, tw_dense *d, size_t max_M) {
    if (!d->available)
        return TWELL_OK;
    return tw_dense_reserve(plan, d, tw_min(max_M, d->chunk_rows));
}

void tw_cuda_dense_set_hint(tw_dense *d, double nnz_per_row) { d->hint = nnz_per_row; }

/* AUTO's route for a call of M rows (dense_ok, small_ok: the dense path, the small-batch path
 * can run it). */
static tw_ffn_route tw_dense_route(const twell_plan *plan, const tw_dense *d, size_t M,
                                   int dense_ok, int small_ok) {
    tw_ffn_policy_in in;
    memset(&in, 0, sizeof in);
    in.M = M;
    in.N = plan->shape.N;
    in.est = d->est >= 0.0 ? d->est : d->hint;
    in.small_ok = small_ok;
    in.dense_ok = dense_ok;
    in.was_dense = d->last == TWELL_PATH_DENSE;
    in.dense_thr = d->threshold;
    in.dense_min_rows = d->min_rows;
    return tw_ffn_policy(&in);
}

twell_status tw_cuda_dense_ffn_infer(twell_plan *plan, tw_dense *d, tw_ffn *f, size_t M,
                                     const void *x, const uint32_t *packed, const void *wg,
                                     const void *wu, const void *wd, void *y, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_small_ffn_call_begins(tw_op_plan(plan)->small);
    uintptr_t any = (uintptr_t)x | (uintptr_t)wu | (uintptr_t)wd | (uintptr_t)y |
                    (uintptr_t)(s->gated ? wg : NULL);
    int capturing = 0;
    TW_TRY(tw_cuda_stream_capturing(ctx, stream, &capturing));
    if ((any & 1u) || ((uintptr_t)packed & 3u))
        return tw_cuda_ffn_launch(plan, f, M, x, packed, wg, wu, wd, y, stream, capturing, NULL,
                                  NULL); /* its error */
    int can = d->available && (any & 15u) == 0;
    int dense = 0;
    tw_small *sm = tw_op_plan(plan)->small;
    twell_status sst = TWELL_OK;
    /* the small-batch kernels (cuda_small.c): forced, or AUTO's route for few rows; they count
     * nothing for AUTO (its estimate comes from larger calls or twell_plan_reserve) */
    if (tw_small_ffn_forced(plan, sm, M, (any & 15u) == 0, capturing)) {
        if (tw_small_ffn_try(plan, sm, M, x, packed, wg, wu, wd, y, capturing, stream, &sst)) {
            TW_TRY(sst);
            d->last = TWELL_PATH_SPARSE;
            d->calls[d->last]++;
            return TWELL_OK;
        }
    }
    /* While capturing nothing may query an event: the path is fixed from what the host knows. */
    if (!capturing)
        TW_TRY(tw_dense_collect(plan, d));
    if (plan->path == TWELL_PATH_DENSE) {
        if (!d->available)
            return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                            "twell_ffn_infer: TWELL_PATH_DENSE is not available for this plan: %s",
                            d->why);
        if (!can)
            return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                            "twell_ffn_infer: TWELL_PATH_DENSE needs x, the weights and y 16-byte "
                            "aligned");
        dense = 1;
    } else if (plan->path == TWELL_PATH_AUTO) {
        tw_ffn_route r = tw_dense_route(plan, d, M, can,
                                        tw_small_ffn_ok(plan, sm, M, (any & 15u) == 0, capturing));
        if (r == TW_ROUTE_SMALL &&
            tw_small_ffn_try(plan, sm, M, x, packed, wg, wu, wd, y, capturing, stream, &sst)) {
            TW_TRY(sst);
            d->last = TWELL_PATH_SPARSE;
            d->calls[d->last]++;
            return TWELL_OK;
        }
        dense = r == TW_ROUTE_DENSE;
    }
    if (dense && capturing && (!d->wdt || d->h_rows == 0)) {
        /* nothing may be allocated during capture: the workspace comes from twell_plan_reserve
         * (or an earlier eager dense call) */
        if (plan->path == TWELL_PATH_DENSE)
            return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                            "twell_ffn_infer: TWELL_PATH_DENSE during stream capture needs its "
                            "workspace reserved first (twell_plan_reserve)");
        tw_log(ctx, TWELL_LOG_WARN,
               "ffn_infer: captured call: the dense workspace is not reserved; running sparse");
        dense = 0;
    } else if (dense && !capturing) {
        twell_status st = tw_dense_reserve(plan, d, tw_min(M, d->chunk_rows));
        if (st != TWELL_OK && plan->path == TWELL_PATH_DENSE)
            return st;
        if (st != TWELL_OK) { /* AUTO: the sparse path is exact too */
            tw_log(ctx, TWELL_LOG_WARN,
                   "ffn_infer: dense workspace unavailable (%s); running sparse",
                   twell_ctx_errmsg(ctx));
            dense = 0;
        }
    }
    if (dense) {
        if (!capturing && d->used && stream != d->last_stream)
            TW_TRY(tw_cuda_stream_wait_event(ctx, stream, d->done));
        TW_TRY(tw_dense_run(plan, d, M, x, packed, wg, wu, wd, y, capturing, stream));
        if (capturing) {
            d->captured = 1; /* the graph holds h, flags and wdt from now on */
        } else {
            TW_TRY(tw_cuda_event_record(ctx, d->done, stream));
            d->used = 1;
            d->last_stream = stream;
        }
    } else if (plan->path == TWELL_PATH_AUTO && can && !capturing) {
        /* The sparse pre-pass counts the active values into the slot (no counting kernel, no
         * memset); a call that runs a simple kernel instead is counted here. */
        unsigned slot = tw_dense_slot_take(d);
        int counted = 0;
        uint64_t *dst = d->hstats_dev ? d->hstats_dev + 2u * slot : d->dstats + 2u * slot;
        TW_TRY(tw_cuda_ffn_launch(plan, f, M, x, packed, wg, wu, wd, y, stream, 0, dst, &counted));
        if (!counted) {
            TW_TRY(tw_cuda_memset_d32(ctx, d->dstats + 2u * slot, 0u, 4u, stream));
            for (size_t r0 = 0; r0 < M; r0 += d->chunk_rows) {
                size_t m = tw_min(M - r0, d->chunk_rows);
                TW_TRY(tw_dense_count(plan, d, m, packed + r0 * (s->N / s->C), NULL, slot, stream));
            }
        }
        TW_TRY(tw_dense_count_end(plan, d, slot, M, counted && d->hstats_dev, stream));
    } else {
        TW_TRY(tw_cuda_ffn_launch(plan, f, M, x, packed, wg, wu, wd, y, stream, capturing, NULL,
                                  NULL));
    }
    d->last = dense ? TWELL_PATH_DENSE : TWELL_PATH_SPARSE;
    d->calls[d->last]++;
    return TWELL_OK;
}

/* ---- test control (test_control.h's TW_TC_DENSE_*) ---- */

static tw_dense *tw_plan_dense(const twell_plan *plan) {
    const tw_cuda_plan *cp = tw_op_plan(plan);
    return cp ? cp->dense : NULL;
}

static int tw_cuda_dense_available(const twell_plan *plan) {
    const tw_dense *d = tw_plan_dense(plan);
    return d ? d->available : 0;
}

static twell_path tw_cuda_dense_last_path(const twell_plan *plan) {
    const tw_dense *d = tw_plan_dense(plan);
    return d ? d->last : TWELL_PATH_AUTO;
}

static double tw_cuda_dense_estimate(const twell_plan *plan) {
    const tw_dense *d = tw_plan_dense(plan);
    return d ? d->est : -1.0;
}

static double tw_cuda_dense_threshold(const twell_plan *plan, size_t M) {
    const tw_dense *d = tw_plan_dense(plan);
    return d ? tw_dense_thr(d, &plan->shape, M) : -1.0;
}

static const char *tw_cuda_dense_route(const twell_plan *plan, size_t M) {
    const tw_dense *d = tw_plan_dense(plan);
    return d ? tw_ffn_route_name(
                   tw_dense_route(plan, d, M, d->available,
                                  tw_small_ffn_ok(plan, tw_op_plan(plan)->small, M, 1, 0)))
             : NULL;
}

static twell_status tw_cuda_dense_set_threshold(twell_plan *plan, double nnz_per_row) {
    tw_dense *d = tw_plan_dense(plan);
    if (!d)
        return tw_error(plan ? plan->ctx : NULL, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: not a CUDA plan");
    d->threshold = nnz_per_row > 0.0 ? nnz_per_row : 0.0;
    return TWELL_OK;
}

static twell_status tw_cuda_dense_set_min_rows(twell_plan *plan, size_t rows) {
    tw_dense *d = tw_plan_dense(plan);
    if (!d)
        return tw_error(plan ? plan->ctx : NULL, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: not a CUDA plan");
    d->min_rows = rows;
    return TWELL_OK;
}

static twell_status tw_cuda_dense_counts(twell_plan *plan, uint64_t out[2]) {
    tw_dense *d = tw_plan_dense(plan);
    out[0] = out[1] = 0;
    if (!d)
        return tw_error(plan ? plan->ctx : NULL, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: not a CUDA plan");
    if (!d->counted)
        return TWELL_OK;
    TW_TRY(tw_cuda_synchronize(plan->ctx));
    if (d->last_in_host) {
        memcpy(out, d->hstats + 2u * d->last_slot, 16u);
        return TWELL_OK;
    }
    return tw_cuda_memcpy_dtoh(plan->ctx, out, d->dstats + 2u * d->last_slot, 16u);
}

static int tw_cuda_dense_grow_syncs(const twell_plan *plan) {
    const tw_dense *d = tw_plan_dense(plan);
    return d ? d->grow_syncs : 0;
}

static size_t tw_cuda_dense_workspace_bytes(const twell_plan *plan) {
    const tw_dense *d = tw_plan_dense(plan);
    if (!d)
        return 0;
    const twell_shape *s = &plan->shape;
    size_t b = d->wdt ? (size_t)s->N * s->K * 2u : 0u;
    if (d->h)
        b += d->h_rows * s->N * 2u + tw_dense_units(s, d->h_rows) * 4u;
    return b;
}

static unsigned long tw_cuda_dense_calls(const twell_plan *plan, twell_path path) {
    const tw_dense *d = tw_plan_dense(plan);
    if (!d || (int)path < 0 || (int)path > 2)
        return 0;
    return d->calls[path];
}

static twell_status tw_cuda_dense_poison(twell_plan *plan, uint16_t pattern) {
    tw_dense *d = tw_plan_dense(plan);
    if (!d)
        return tw_error(plan ? plan->ctx : NULL, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: not a CUDA plan");
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    uint32_t v = (uint32_t)pattern << 16 | pattern;
    TW_TRY(tw_cuda_synchronize(ctx));
    if (d->h)
        TW_TRY(tw_cuda_memset_d32(ctx, d->h, v, d->h_rows * s->N / 2u, NULL));
    if (d->wdt)
        TW_TRY(tw_cuda_memset_d32(ctx, d->wdt, v, (size_t)s->N * s->K / 2u, NULL));
    return tw_cuda_synchronize(ctx);
}

static unsigned tw_cuda_dense_gemm_smem(void) { return TW_DG_SMEM; }

twell_status tw_dense_test_control(int op, va_list ap) {
    if (op == TW_TC_DENSE_GEMM_SMEM) {
        *va_arg(ap, unsigned *) = tw_cuda_dense_gemm_smem();
        return TWELL_OK;
    }
    twell_plan *plan = va_arg(ap, twell_plan *);
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    switch (op) {
    case TW_TC_DENSE_AVAILABLE:
        *va_arg(ap, int *) = tw_cuda_dense_available(plan);
        return TWELL_OK;
    case TW_TC_DENSE_LAST_PATH:
        *va_arg(ap, twell_path *) = tw_cuda_dense_last_path(plan);
        return TWELL_OK;
    case TW_TC_DENSE_ESTIMATE:
        *va_arg(ap, double *) = tw_cuda_dense_estimate(plan);
        return TWELL_OK;
    case TW_TC_DENSE_THRESHOLD: {
        size_t M = va_arg(ap, size_t);
        *va_arg(ap, double *) = tw_cuda_dense_threshold(plan, M);
        return TWELL_OK;
    }
    case TW_TC_DENSE_ROUTE: {
        size_t M = va_arg(ap, size_t);
        *va_arg(ap, const char **) = tw_cuda_dense_route(plan, M);
        return TWELL_OK;
    }
    case TW_TC_DENSE_SET_THRESHOLD:
        return tw_cuda_dense_set_threshold(plan, va_arg(ap, double));
    case TW_TC_DENSE_SET_MIN_ROWS:
        return tw_cuda_dense_set_min_rows(plan, va_arg(ap, size_t));
    case TW_TC_DENSE_COUNTS:
        return tw_cuda_dense_counts(plan, va_arg(ap, uint64_t *));
    case TW_TC_DENSE_GROW_SYNCS:
        *va_arg(ap, int *) = tw_cuda_dense_grow_syncs(plan);
        return TWELL_OK;
    case TW_TC_DENSE_WORKSPACE_BYTES:
        *va_arg(ap, size_t *) = tw_cuda_dense_workspace_bytes(plan);
        return TWELL_OK;
    case TW_TC_DENSE_CALLS: {
        twell_path path = (twell_path)va_arg(ap, int); /* an enum argument arrives as an int */
        *va_arg(ap, unsigned long *) = tw_cuda_dense_calls(plan, path);
        return TWELL_OK;
    }
    case TW_TC_DENSE_POISON:
        return tw_cuda_dense_poison(plan, (uint16_t)va_arg(ap, unsigned));
    }
    return TWELL_ERR_INVALID_ARG;
}
