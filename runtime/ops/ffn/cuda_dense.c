/*
 * cuda_dense.c — the dense path of twell_ffn_infer on Hopper (two tensor-core GEMMs after the
 * caller's gate-pack, from templates/gemm_sm90.cu.lua and dense_aux.cu.lua, each split along its
 * reduction when the grid would leave most SMs idle) and the dispatch of a call: AUTO's choice
 * (ffn_policy.h) from counts read back asynchronously, and what changes while the caller's stream
 * is being captured into a CUDA graph (cuda_dense.h).
 */
#include "cuda_dense.h"

#include "cuda_small.h"
#include "dense_split.h"
#include "dense_tuner.h"
#include "ffn_policy.h"

#include "cuda_module.h"
#include "jit.h"
#include "m_bucket.h"
#include "op_plan.h"
#include "test_control.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TW_DENSE_SLOTS 16u                   /* count slots: call c uses slot c % TW_DENSE_SLOTS */
#define TW_DENSE_H_BYTES ((size_t)512 << 20) /* H workspace bound: rows are chunked to fit */

struct tw_dense {
    int available; /* the three modules are loaded */
    char why[320]; /* why not, for TWELL_PATH_DENSE's error */
    tw_CUmodule mod_up, mod_down, mod_aux, mod_up_split, mod_down_split;
    tw_CUfunction up, down, count, expand, up_split, down_split;
    tw_CUfunction red_plain, red_gated, red_relu; /* split-K reductions (dense_aux) */
    unsigned force[2];   /* TW_TC_DENSE_SET_SPLIT: [up, down] split factors, 0 = the policy's */
    unsigned last_sp[2]; /* split factors of the last dense call's last chunk (0: none yet) */
    /* per M bucket: -1 unresolved, 0 no usable tuned winner (the rule), 1 tuned[b] */
    signed char tuned_state[TW_M_BUCKETS];
    unsigned char tuned[TW_M_BUCKETS][2]; /* the bucket's stored winner [up, down] */
    int tune_on_first_use;                /* the context's options.tune_on_first_use */
    unsigned max_clusters;                /* one CTA per SM */
    size_t chunk_rows;                    /* rows per pass of the pipeline (bounds H) */
    /* workspace, allocated at the first dense call */
    void *h; /* [h_rows, N] dtype */
    size_t h_rows;
    uint32_t *flags; /* one word per unit of a chunk */
    float *part;     /* split-K partial sums: part_bytes ≥ tw_dense_part_bound(part_rows) */
    size_t part_bytes;
    size_t part_rows; /* rows part was checked for under the current splits (0: recheck) */
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
    tw_cuda_event cnt_ev; /* recorded after the last counts: cnt_done, done or the sparse path's */
    tw_cuda_event done;   /* after each dense call: workspace reuse across streams */
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

static size_t tw_max_rows(size_t a, size_t b) { return a > b ? a : b; }

/* Units (cluster tiles) of a chunk of m rows: the flag words the GEMMs index. */
static size_t tw_dense_units(const twell_shape *s, size_t m) {
    return tw_cdiv(tw_cdiv(m, TW_DG_BM), TW_DG_CLUSTER) * tw_cdiv(s->N, TW_DG_BN);
}

/* ---- modules ---- */

static void tw_dense_unload(tw_dense *d) {
    tw_cu_module_unload(d->mod_up);
    tw_cu_module_unload(d->mod_down);
    tw_cu_module_unload(d->mod_aux);
    tw_cu_module_unload(d->mod_up_split);
    tw_cu_module_unload(d->mod_down_split);
    d->mod_up = d->mod_down = d->mod_aux = d->mod_up_split = d->mod_down_split = NULL;
    d->up = d->down = d->count = d->expand = d->up_split = d->down_split = NULL;
    d->red_plain = d->red_gated = d->red_relu = NULL;
}

size_t tw_dense_gemm_params(const twell_shape *s, int g, int split,
                            tw_param out[TW_DENSE_GEMM_NPARAMS]) {
    size_t n = 0;
    if (g == TW_DENSE_UP) {
        n = tw_shape_params(s, out);
        out[n++] = (tw_param){"MODE", s->gated ? "gated" : "relu", 0};
    } else {
        /* y = H · Wd: reduction over the hidden width, K output columns; Wd [N, K] read MN-major
         * (TB = 1), so no transposed copy */
        out[n++] = (tw_param){"K", NULL, (long long)s->N};
        out[n++] = (tw_param){"N", NULL, (long long)s->K};
        out[n++] = (tw_param){"dtype", tw_dtype_param(s->dtype), 0};
        out[n++] = (tw_param){"MODE", "plain", 0};
    }
    /* the split-K variants: no staging buffer, a deeper ring */
    out[n++] = (tw_param){"STAGES", NULL, (long long)(split ? TW_DG_SPLIT_STAGES : TW_DG_STAGES)};
    out[n++] = (tw_param){"CLUSTER", NULL, (long long)TW_DG_CLUSTER};
    if (g == TW_DENSE_DOWN)
        out[n++] = (tw_param){"TB", NULL, 1};
    out[n++] = (tw_param){"SPLIT", NULL, split ? 1 : 0};
    return n;
}

static twell_status tw_dense_load(twell_plan *plan, tw_dense *d) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_param prm[4][TW_DENSE_GEMM_NPARAMS];
    size_t np[4];
    for (int i = 0; i < 4; i++)
        np[i] = tw_dense_gemm_params(s, i & 1 ? TW_DENSE_DOWN : TW_DENSE_UP, i >= 2, prm[i]);
    tw_param aux[TW_SHAPE_NPARAMS];
    size_t naux = tw_shape_params(s, aux);
    static const char *const gemm[] = {"twell_gemm_sm90"};
    static const char *const aux_fns[] = {"twell_dense_count", "twell_dense_expand",
                                          "twell_dense_reduce_plain", "twell_dense_reduce_gated",
                                          "twell_dense_reduce_relu"};
    tw_CUfunction af[5];
    TW_TRY(tw_template_module(ctx, "gemm_sm90", prm[0], np[0], gemm, 1, &d->mod_up, &d->up));
    TW_TRY(tw_template_module(ctx, "gemm_sm90", prm[1], np[1], gemm, 1, &d->mod_down, &d->down));
    TW_TRY(tw_template_module(ctx, "gemm_sm90", prm[2], np[2], gemm, 1, &d->mod_up_split,
                              &d->up_split));
    TW_TRY(tw_template_module(ctx, "gemm_sm90", prm[3], np[3], gemm, 1, &d->mod_down_split,
                              &d->down_split));
    TW_TRY(tw_template_module(ctx, "dense_aux", aux, naux, aux_fns, 5, &d->mod_aux, af));
    d->count = af[0], d->expand = af[1];
    d->red_plain = af[2], d->red_gated = af[3], d->red_relu = af[4];
    const struct {
        tw_CUfunction fn;
        unsigned smem;
    } attr[] = {{d->up, TW_DG_SMEM},
                {d->down, TW_DG_SMEM},
                {d->up_split, TW_DG_SPLIT_SMEM},
                {d->down_split, TW_DG_SPLIT_SMEM}};
    for (size_t i = 0; i < sizeof attr / sizeof attr[0]; i++)
        TW_TRY(tw_cu_func_set_attribute(ctx, attr[i].fn,
                                        TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        (int)attr[i].smem));
    return TWELL_OK;
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
    memset(d->tuned_state, -1, sizeof d->tuned_state);
    d->tune_on_first_use = ctx->tune_on_first_use;
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
    tw_cuda_free(ctx, d->part);
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

/* The TMA maps of a GEMM over a reduction of kred: [0] A [m, kred] (box 64 x 128); [1] B and
 * [2] G [ncols, kred] K-major (box 64 x 256/CLUSTER: the part of the tile each CTA multicasts),
 * or with tb B = Wd [kred, ncols] row-major read MN-major (box 64 x 64, four per 256 columns, as
 * the training mode mm reads it; [2] is then a copy of [1], unused). */
static twell_status tw_dense_maps(twell_plan *plan, size_t m, uint32_t kred, uint32_t ncols,
                                  const void *a, const void *b, const void *g, int tb,
                                  tw_CUtensorMap maps[3]) {
    twell_ctx *ctx = plan->ctx;
    twell_dtype dt = plan->shape.dtype;
    TW_TRY(tw_dense_map(ctx, &maps[0], dt, a, m, kred, TW_DG_BM));
    if (tb) {
        TW_TRY(tw_dense_map(ctx, &maps[1], dt, b, kred, ncols, TW_DG_BK));
        maps[2] = maps[1];
        return TWELL_OK;
    }
    const uint32_t brows = TW_DG_BN / TW_DG_CLUSTER;
    TW_TRY(tw_dense_map(ctx, &maps[1], dt, b, ncols, kred, brows));
    return tw_dense_map(ctx, &maps[2], dt, g ? g : b, ncols, kred, brows);
}

/* gemm_sm90 fn on min(items, one per cluster slot) persistent clusters with its arguments. */
static twell_status tw_dense_launch(twell_plan *plan, tw_dense *d, tw_CUfunction fn, unsigned smem,
                                    size_t items, void **args, twell_stream stream) {
    const size_t clusters = tw_min(items ? items : 1u, d->max_clusters);
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = (unsigned)clusters * TW_DG_CLUSTER;
    cfg.grid[1] = cfg.grid[2] = 1u;
    cfg.block[0] = TW_DG_THREADS;
    cfg.block[1] = cfg.block[2] = 1u;
    cfg.cluster[0] = TW_DG_CLUSTER;
    cfg.cluster[1] = cfg.cluster[2] = 1u;
    cfg.smem = smem;
    return tw_cu_launch(plan->ctx, fn, &cfg, stream, args);
}

/* out[m, ncols] = epilogue(a[m, kred] · B) with gemm_sm90's inference ABI (B as tw_dense_maps). */
static twell_status tw_dense_gemm(twell_plan *plan, tw_dense *d, tw_CUfunction fn, size_t m,
                                  uint32_t kred, uint32_t ncols, const void *a, const void *b,
                                  const void *g, int tb, void *out, const uint32_t *packed,
                                  const uint32_t *flags, twell_stream stream) {
    tw_CUtensorMap maps[3];
    TW_TRY(tw_dense_maps(plan, m, kred, ncols, a, b, g, tb, maps));
    int mi = (int)m;
    void *args[] = {(void *)&maps[0], (void *)&maps[1], (void *)&maps[2], (void *)&out,
                    (void *)&packed,  (void *)&flags,   (void *)&mi};
    return tw_dense_launch(plan, d, fn, TW_DG_SMEM, tw_dense_gemm_units(m, ncols), args, stream);
}

/* A gemm_sm90 module compiled with DM = 1 (the row count read on the device) over mcap rows:
 * MODE's GEMM (split: SPLIT = 1 into out as fp32 partials laid out for mcap rows) of the first
 * min(mcap, *mrows) rows; the grid is sized for mcap rows, the clusters past the device's count
 * find no item. Launched without programmatic dependent launch (like the dense path's GEMMs). */
twell_status tw_cuda_dense_gemm_dm(twell_plan *plan, tw_CUfunction fn, int split, size_t mcap,
                                   uint32_t kred, uint32_t ncols, const void *a, const void *b,
                                   const void *g, int tb, void *out, const uint32_t *packed,
                                   const uint32_t *flags, unsigned nsplit, const int *mrows,
                                   twell_stream stream) {
    tw_CUtensorMap maps[3];
    TW_TRY(tw_dense_maps(plan, mcap, kred, ncols, a, b, g, tb, maps));
    int mi = (int)mcap, ns = (int)nsplit;
    size_t items = tw_dense_gemm_units(mcap, ncols) * (split ? nsplit : 1u);
    size_t maxcl = (size_t)plan->ctx->cuda->sm_count / TW_DG_CLUSTER;
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = (unsigned)tw_min(items ? items : 1u, maxcl ? maxcl : 1u) * TW_DG_CLUSTER;
    cfg.grid[1] = cfg.grid[2] = 1u;
    cfg.block[0] = TW_DG_THREADS;
    cfg.block[1] = cfg.block[2] = 1u;
    cfg.cluster[0] = TW_DG_CLUSTER;
    cfg.cluster[1] = cfg.cluster[2] = 1u;
    cfg.smem = split ? TW_DG_SPLIT_SMEM : TW_DG_SMEM;
    if (split) {
        void *args[] = {(void *)&maps[0], (void *)&maps[1], (void *)&maps[2], (void *)&out,
                        (void *)&flags,   (void *)&mi,      (void *)&ns,      (void *)&mrows};
        return tw_cu_launch(plan->ctx, fn, &cfg, stream, args);
    }
    void *args[] = {(void *)&maps[0], (void *)&maps[1], (void *)&maps[2], (void *)&out,
                    (void *)&packed,  (void *)&flags,   (void *)&mi,      (void *)&mrows};
    return tw_cu_launch(plan->ctx, fn, &cfg, stream, args);
}

/* The split-K GEMM (SPLIT = 1): nsplit slices of the reduction as fp32 partials into d->part
 * (the caller has checked they fit and reduces them next). */
static twell_status tw_dense_gemm_split(twell_plan *plan, tw_dense *d, tw_CUfunction fn, size_t m,
                                        uint32_t kred, uint32_t ncols, const void *a, const void *b,
                                        const void *g, int tb, unsigned nsplit,
                                        const uint32_t *flags, twell_stream stream) {
    tw_CUtensorMap maps[3];
    TW_TRY(tw_dense_maps(plan, m, kred, ncols, a, b, g, tb, maps));
    int mi = (int)m, ns = (int)nsplit;
    float *part = d->part;
    void *args[] = {(void *)&maps[0], (void *)&maps[1], (void *)&maps[2], (void *)&part,
                    (void *)&flags,   (void *)&mi,      (void *)&ns};
    return tw_dense_launch(plan, d, fn, TW_DG_SPLIT_SMEM, tw_dense_gemm_units(m, ncols) * nsplit,
                           args, stream);
}

/* One of dense_aux's split-K reductions over m rows x ncols columns (grid-stride, a warp per row
 * x 256 columns). */
static twell_status tw_dense_reduce(twell_plan *plan, tw_CUfunction fn, size_t m, uint32_t ncols,
                                    void **args, twell_stream stream) {
    unsigned sms = (unsigned)plan->ctx->cuda->sm_count;
    return tw_go(plan->ctx, fn, tw_dense_reduce_grid(m, ncols, sms), 1, stream, args);
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
 * calls read them once event ev says they have landed. ev is recorded here on stream, unless
 * recorded is set: then the caller recorded it on stream after the counts' last write already.
 * Any later record of ev comes later in stream order (or on another stream that waited for it),
 * so its completion still says the counts have landed. */
static twell_status tw_dense_count_end(twell_plan *plan, tw_dense *d, unsigned slot, size_t M,
                                       int in_host, twell_stream stream, tw_cuda_event ev,
                                       int recorded) {
    twell_ctx *ctx = plan->ctx;
    d->cnt_pending = 0; /* until ev is recorded after this slot's counts */
    if (!in_host)
        TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, d->hstats + 2u * slot, d->dstats + 2u * slot, 16u,
                                         stream));
    if (!recorded)
        TW_TRY(tw_cuda_event_record(ctx, ev, stream));
    d->cnt_ev = ev;
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
    TW_TRY(tw_cuda_event_query(plan->ctx, d->cnt_ev, &done));
    if (!done)
        return TWELL_OK;
    d->cnt_pending = 0;
    d->est = (double)d->hstats[2u * d->last_slot] / (double)d->slot_rows[d->last_slot];
    return TWELL_OK;
}

static double tw_dense_thr(const tw_dense *d, const twell_shape *s, size_t M) {
    return d->threshold > 0.0 ? d->threshold : tw_ffn_policy_dense_threshold(M, s->N);
}

/* Split factors of a chunk of m rows, sp[0] the up GEMM (reduction K), sp[1] the down GEMM
 * (reduction N): tw_dense_split_choose with the override, the chunk's bucket's tuned winner when
 * resolved (tw_dense_resolve), else the rule. */
static void tw_dense_splits(const twell_plan *plan, const tw_dense *d, size_t m, unsigned sp[2]) {
    unsigned b = tw_m_bucket_log2(m);
    const unsigned tuned[2] = {d->tuned[b][0], d->tuned[b][1]};
    tw_dense_split_choose(&plan->shape, m, d->max_clusters, d->force,
                          d->tuned_state[b] == 1 ? tuned : NULL, sp);
}

/* The stored winner of (ffn_dense, shape, bucket) as split factors this plan can run. */
static int tw_dense_take(const tw_tune_config *cfg, void *arg) {
    return tw_dense_cfg_from_tune(cfg, arg);
}

/* Resolves the M bucket of a chunk of m rows (once, then memoised): the stored winner of
 * (ffn_dense, shape, bucket, device) when one is stored and valid (tw_tune_op_winner), tuned
 * first when tune_now is set and none is; else the rule. Skipped (the bucket stays unresolved)
 * while test control fixes both factors: the tuner's own plans force
 * their candidates, so resolving there would tune from inside a tuning. A newly taken winner
 * makes the next reserve check the partial workspace again. Never fails; context current. */
static void tw_dense_resolve(twell_plan *plan, tw_dense *d, size_t m, int tune_now) {
    unsigned b = tw_m_bucket_log2(m);
    if (d->tuned_state[b] >= 0 || (d->force[0] && d->force[1]))
        return;
    unsigned sp[2] = {0, 0};
    int got = tw_tune_op_winner(plan->ctx, &tw_dense_tune_op, TW_DENSE_KERNEL, &plan->shape, m,
                                tune_now, "", tw_dense_take, sp) == 0;
    d->tuned_state[b] = (signed char)got;
    if (got) {
        d->tuned[b][0] = (unsigned char)sp[0];
        d->tuned[b][1] = (unsigned char)sp[1];
        d->part_rows = 0;
    }
}

/* Resolves the buckets of the chunks a call of M rows runs (tw_dense_run: one chunk of M rows up
 * to chunk_rows, else chunks of chunk_rows and the remainder). */
static void tw_dense_resolve_call(twell_plan *plan, tw_dense *d, size_t M, int tune_now) {
    tw_dense_resolve(plan, d, tw_min(M, d->chunk_rows), tune_now);
    if (M > d->chunk_rows && M % d->chunk_rows)
        tw_dense_resolve(plan, d, M % d->chunk_rows, tune_now);
}

/* Bytes of partials a chunk of m rows needs under the current settings. */
static size_t tw_dense_part_at(const twell_plan *plan, const tw_dense *d, size_t m) {
    unsigned sp[2];
    tw_dense_splits(plan, d, m, sp);
    size_t a = tw_dense_part_need(&plan->shape, TW_DENSE_UP, sp[0], m);
    size_t b = tw_dense_part_need(&plan->shape, TW_DENSE_DOWN, sp[1], m);
    return a > b ? a : b;
}

/* The partial workspace every chunk of at most R rows fits in. The factors are constant between
 * consecutive unit-row boundaries (multiples of 256 rows: the rule's units) and M-bucket
 * boundaries (powers of two: tuned winners), and a fixed factor's need grows with m, so the
 * largest m of each such interval is tried: the multiples of 256 and the powers of two below
 * 256, each capped at R. */
static size_t tw_dense_part_bound(const twell_plan *plan, const tw_dense *d, size_t R) {
    size_t need = 0;
    for (size_t mp = 1; mp <= tw_cdiv(R, TW_DG_UNIT_ROWS); mp++) {
        size_t b = tw_dense_part_at(plan, d, tw_min(R, mp * TW_DG_UNIT_ROWS));
        need = b > need ? b : need;
    }
    for (size_t m = 1; m < TW_DG_UNIT_ROWS && m < R; m *= 2) {
        size_t b = tw_dense_part_at(plan, d, m);
        need = b > need ? b : need;
    }
    return need;
}

/* Workspace for chunks of R rows: H, the unit flags and the split-K partials (for the splits the
 * current settings give). Growing H or the partials waits for the
 * previous dense call first (it may still read the old ones). On failure the old buffers are
 * kept. */
static twell_status tw_dense_reserve(twell_plan *plan, tw_dense *d, size_t R) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    /* chunks hold up to max(R, h_rows) rows (H never shrinks) */
    size_t rows = tw_max_rows(R, d->h_rows);
    size_t pb = d->part_rows == rows ? d->part_bytes : tw_dense_part_bound(plan, d, rows);
    int grow_h = R > d->h_rows, grow_p = pb > d->part_bytes;
    if (!grow_h && !grow_p) {
        d->part_rows = rows;
        return TWELL_OK;
    }
    if (d->used) {
        TW_TRY(tw_cuda_event_synchronize(ctx, d->done));
        d->grow_syncs++;
    }
    void *h = NULL, *fl = NULL, *pt = NULL;
    twell_status st = TWELL_OK;
    if (grow_h) {
        st = tw_cuda_malloc(ctx, R * s->N * 2u, &h);
        if (st == TWELL_OK)
            st = tw_cuda_malloc(ctx, tw_dense_units(s, R) * 4u, &fl);
    }
    if (st == TWELL_OK && grow_p)
        st = tw_cuda_malloc(ctx, pb, &pt);
    if (st != TWELL_OK) {
        tw_cuda_free(ctx, h);
        tw_cuda_free(ctx, fl);
        return st;
    }
    if (grow_h) {
        tw_cuda_keep_free(ctx, &d->keep, d->captured, d->h);
        tw_cuda_keep_free(ctx, &d->keep, d->captured, d->flags);
        d->h = h;
        d->flags = fl;
        d->h_rows = R;
    }
    if (grow_p) {
        tw_cuda_keep_free(ctx, &d->keep, d->captured, d->part);
        d->part = pt;
        d->part_bytes = pb;
    }
    d->part_rows = rows;
    return TWELL_OK;
}

/* The dense pipeline for M rows (workspace reserved, stream ordered). Per chunk of rows: count
 * (and flag the units to recompute), the up GEMM into H, the down GEMM into y; a GEMM split
 * S > 1 ways writes fp32 partials and a reduction kernel applies its epilogue. */
static twell_status tw_dense_run(twell_plan *plan, tw_dense *d, size_t M, const void *x,
                                 const uint32_t *packed, const void *wg, const void *wu,
                                 const void *wd, void *y, int capturing, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    unsigned sms = (unsigned)ctx->cuda->sm_count;
    unsigned slot;
    TW_TRY(tw_dense_count_begin(plan, d, stream, &slot));
    for (size_t r0 = 0; r0 < M; r0 += d->h_rows) {
        size_t m = tw_min(M - r0, d->h_rows);
        const void *xc = (const char *)x + r0 * s->K * 2u;
        const uint32_t *pc = packed + r0 * (s->N / s->C);
        void *yc = (char *)y + r0 * s->K * 2u;
        int mi = (int)m, unit_rows = (int)TW_DG_UNIT_ROWS;
        unsigned sp[2];
        tw_dense_splits(plan, d, m, sp);
        /* partials that do not fit (a captured call after the override grew them): unsplit,
         * exact */
        for (int i = 0; i < 2; i++)
            if (tw_dense_part_need(s, i, sp[i], m) > d->part_bytes)
                sp[i] = 1u;
        int ns_up = (int)sp[0], ns_down = (int)sp[1];
        TW_TRY(tw_cuda_memset_d32(ctx, d->flags, 0u, tw_dense_units(s, m), stream));
        TW_TRY(tw_dense_count(plan, d, m, pc, d->flags, slot, stream));
        if (!s->gated) {
            void *a_ex[] = {(void *)&pc, &mi, &d->h};
            TW_TRY(tw_go(ctx, d->expand, tw_dense_reduce_grid(m, s->N, sms), 1, stream, a_ex));
        }
        if (sp[0] > 1u) {
            TW_TRY(tw_dense_gemm_split(plan, d, d->up_split, m, s->K, s->N, xc, wu,
                                       s->gated ? wg : NULL, 0, sp[0], d->flags, stream));
            if (s->gated) {
                void *a_r[] = {&d->part, &mi, &ns_up, &unit_rows, &d->flags, (void *)&pc, &d->h};
                TW_TRY(tw_dense_reduce(plan, d->red_gated, m, s->N, a_r, stream));
            } else {
                void *a_r[] = {&d->part, &mi, &ns_up, &unit_rows, &d->flags, &d->h};
                TW_TRY(tw_dense_reduce(plan, d->red_relu, m, s->N, a_r, stream));
            }
        } else {
            TW_TRY(tw_dense_gemm(plan, d, d->up, m, s->K, s->N, xc, wu, s->gated ? wg : NULL, 0,
                                 d->h, s->gated ? pc : NULL, d->flags, stream));
        }
        if (sp[1] > 1u) {
            TW_TRY(tw_dense_gemm_split(plan, d, d->down_split, m, s->N, s->K, d->h, wd, NULL, 1,
                                       sp[1], NULL, stream));
            void *a_r[] = {&d->part, &mi, &ns_down, &yc};
            TW_TRY(tw_dense_reduce(plan, d->red_plain, m, s->K, a_r, stream));
        } else {
            TW_TRY(tw_dense_gemm(plan, d, d->down, m, s->N, s->K, d->h, wd, NULL, 1, yc, NULL, NULL,
                                 stream));
        }
        d->last_sp[0] = sp[0], d->last_sp[1] = sp[1];
    }
    /* a captured call's counts are not read back: the host may never see a graph's replays.
     * Eager: `done` (workspace reuse across streams) marks the end of the call, counts included */
    return capturing ? TWELL_OK : tw_dense_count_end(plan, d, slot, M, 0, stream, d->done, 0);
}

twell_status tw_cuda_dense_reserve_rows(twell_plan *plan, tw_dense *d, size_t max_M) {
    if (!d->available)
        return TWELL_OK;
    /* every bucket a chunk of a call of up to max_M rows can fall in (bucket b holds m in
     * (2^(b-1), 2^b]), so a captured call finds its splits resolved and its partials sized */
    size_t R = tw_min(max_M, d->chunk_rows);
    for (size_t m = 1;; m *= 2) {
        tw_dense_resolve(plan, d, tw_min(m, R), d->tune_on_first_use);
        if (m >= R)
            break;
    }
    return tw_dense_reserve(plan, d, R);
}

twell_status tw_cuda_dense_tune(twell_plan *plan, tw_dense *d, size_t M, unsigned flags) {
    if (!d || !d->available || plan->path == TWELL_PATH_SPARSE)
        return TWELL_OK; /* no dense path to tune, or the plan never runs it */
    if (!(flags & TWELL_TUNE_STORED_ONLY))
        TW_TRY(tw_tune_op_ensure(plan->ctx, &tw_dense_tune_op, TW_DENSE_KERNEL, &plan->shape, M,
                                 (flags & TWELL_TUNE_RETUNE) != 0));
    tw_cu_scope sc;
    TW_TRY(tw_cu_enter(plan->ctx, &sc));
    /* look the records up again: they may be new */
    unsigned b = tw_m_bucket_log2(tw_min(M, d->chunk_rows));
    d->tuned_state[b] = -1;
    tw_dense_resolve(plan, d, tw_min(M, d->chunk_rows), 0);
    if (M > d->chunk_rows && M % d->chunk_rows) {
        d->tuned_state[tw_m_bucket_log2(M % d->chunk_rows)] = -1;
        tw_dense_resolve(plan, d, M % d->chunk_rows, 0);
    }
    tw_cu_leave(plan->ctx, &sc);
    return TWELL_OK;
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
    if (dense && capturing && d->h_rows == 0) {
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
        /* the chunks' buckets: their tuned split factors (may tune with tune_on_first_use) */
        tw_dense_resolve_call(plan, d, M, d->tune_on_first_use);
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
            d->captured = 1; /* the graph holds h, flags and part from now on */
        } else {
            d->used = 1; /* tw_dense_run recorded `done` after its last work */
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
        /* counted into mapped memory: the event tw_cuda_ffn_launch recorded after the pipeline
         * marks the counts too; else the counting kernels or the copy come after it */
        int in_host = counted && d->hstats_dev;
        TW_TRY(tw_dense_count_end(plan, d, slot, M, in_host, stream,
                                  in_host ? tw_cuda_ffn_done_event(f) : d->cnt_done, in_host));
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

/* A test-control knob's dense state: TWELL_ERR_UNSUPPORTED when plan is not a CUDA plan. */
static twell_status tw_dense_knob(twell_plan *plan, tw_dense **d) {
    *d = tw_plan_dense(plan);
    return *d ? TWELL_OK
              : tw_error(plan ? plan->ctx : NULL, TWELL_ERR_UNSUPPORTED,
                         "ffn_infer: not a CUDA plan");
}

static twell_status tw_cuda_dense_set_threshold(twell_plan *plan, double nnz_per_row) {
    tw_dense *d;
    TW_TRY(tw_dense_knob(plan, &d));
    d->threshold = nnz_per_row > 0.0 ? nnz_per_row : 0.0;
    return TWELL_OK;
}

static twell_status tw_cuda_dense_set_min_rows(twell_plan *plan, size_t rows) {
    tw_dense *d;
    TW_TRY(tw_dense_knob(plan, &d));
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
    size_t b = d->part_bytes;
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
    tw_dense *d;
    TW_TRY(tw_dense_knob(plan, &d));
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    uint32_t v = (uint32_t)pattern << 16 | pattern;
    TW_TRY(tw_cuda_synchronize(ctx));
    if (d->h)
        TW_TRY(tw_cuda_memset_d32(ctx, d->h, v, d->h_rows * s->N / 2u, NULL));
    if (d->part) /* the 32-bit pattern v is a NaN as a float when pattern is a 16-bit NaN */
        TW_TRY(tw_cuda_memset_d32(ctx, d->part, v, d->part_bytes / 4u, NULL));
    return tw_cuda_synchronize(ctx);
}

static twell_status tw_cuda_dense_set_split(twell_plan *plan, unsigned up, unsigned down) {
    tw_dense *d;
    TW_TRY(tw_dense_knob(plan, &d));
    d->force[0] = up;
    d->force[1] = down;
    d->part_rows = 0; /* the next dense call (or reserve) checks the partial workspace again */
    return TWELL_OK;
}

/* Resolves the bucket of a chunk of min(M, chunk) rows as a dense call does (once per bucket)
 * and gives the factors that chunk runs; {0, 0} without the dense path. */
static twell_status tw_cuda_dense_prepare(twell_plan *plan, size_t M, unsigned out[2]) {
    tw_dense *d = tw_plan_dense(plan);
    out[0] = out[1] = 0u;
    if (!d)
        return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "ffn_infer: not a CUDA plan");
    if (!d->available || M == 0)
        return TWELL_OK;
    tw_cu_scope sc;
    TW_TRY(tw_cu_enter(plan->ctx, &sc));
    size_t m = tw_min(M, d->chunk_rows);
    tw_dense_resolve(plan, d, m, d->tune_on_first_use);
    tw_cu_leave(plan->ctx, &sc);
    tw_dense_splits(plan, d, m, out);
    return TWELL_OK;
}

twell_status tw_dense_test_control(int op, va_list ap) {
    if (op == TW_TC_DENSE_GEMM_SMEM) {
        *va_arg(ap, unsigned *) = TW_DG_SMEM;
        return TWELL_OK;
    }
    if (op == TW_TC_DENSE_SPLIT_GEMM_SMEM) {
        *va_arg(ap, unsigned *) = TW_DG_SPLIT_SMEM;
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
    case TW_TC_DENSE_SET_SPLIT: {
        unsigned up = va_arg(ap, unsigned);
        return tw_cuda_dense_set_split(plan, up, va_arg(ap, unsigned));
    }
    case TW_TC_DENSE_PREPARE: {
        size_t M = va_arg(ap, size_t);
        unsigned *out = va_arg(ap, unsigned *);
        return tw_cuda_dense_prepare(plan, M, out);
    }
    case TW_TC_DENSE_LAST_SPLIT:
        tw_cuda_dense_last_split(plan, va_arg(ap, unsigned *));
        return TWELL_OK;
    }
    return TWELL_ERR_INVALID_ARG;
}

/* ---- the tuner's hooks (dense_tuner.c) ---- */

int tw_cuda_dense_usable(const twell_plan *plan, const char **why) {
    const tw_dense *d = tw_plan_dense(plan);
    if (why)
        *why = d ? d->why : "not a CUDA plan";
    return d ? d->available : 0;
}

void tw_cuda_dense_last_split(const twell_plan *plan, unsigned out[2]) {
    const tw_dense *d = tw_plan_dense(plan);
    out[0] = d ? d->last_sp[0] : 0u;
    out[1] = d ? d->last_sp[1] : 0u;
}

twell_status tw_cuda_dense_tune_force(twell_plan *plan, unsigned up, unsigned down, size_t M) {
    tw_dense *d = tw_plan_dense(plan);
    if (!d)
        return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "ffn_infer: not a CUDA plan");
    d->force[0] = up;
    d->force[1] = down;
    d->part_rows = 0;
    if (!d->available || M == 0)
        return TWELL_OK;
    tw_cu_scope sc;
    TW_TRY(tw_cu_enter(plan->ctx, &sc));
    twell_status st = tw_dense_reserve(plan, d, tw_min(M, d->chunk_rows));
    tw_cu_leave(plan->ctx, &sc);
    return st;
}
