/*
 * dense_gemm_sm90.c — the hand-written Hopper GEMM (templates/gemm/gemm_sm90.cu.lua) as the
 * heavy-row route keeps it (cuda_ffn_heavy.c): its rows are gathered on the device and their
 * count is read there (DM = 1), which cuBLASLt cannot do without a host read. The dense route of
 * twell_ffn_infer runs through cuBLASLt instead (cuda_dense.c).
 */
#include "dense_gemm.h"

#include "dense_split.h"

#include <string.h>

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
