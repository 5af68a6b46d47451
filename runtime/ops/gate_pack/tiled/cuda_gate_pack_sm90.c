/* cuda_gate_pack_sm90.c — Hopper (sm_90a) gate-pack launcher for
 * templates/gate_pack/gate_pack_sm90.cu.lua in any tile configuration (BK, STAGES, CLUSTER): shared
 * memory and grid per configuration, and per launch the two TMA tensor maps and one persistent
 * cluster launch (the configurations themselves: gate_pack_config.c). The interface is in
 * cuda_gate_pack_tiled.h; the kernel's design is in the template's header. */
#include "cuda_gate_pack_tiled.h"

#include <limits.h>
#include <string.h>

/* The kernel can split the tiles of its last partial wave along K through a workspace (a small
 * gain, docs/DESIGN.md §3), but a workspace owned by the plan would be shared by launches that the
 * caller may run concurrently on different streams, so the launcher passes none (ws = NULL). */

twell_status tw_sm90_kernel_prepare(twell_ctx *ctx, tw_gp_kernel *k) {
    k->smem = tw_sm90_smem(&k->cfg);
    /* Every GPC of the Hopper parts holds an even number of SMs, so sm_count / 2 clusters of 2 are
     * co-resident; where fewer are (clusters of 4), the extra clusters only run later (no CTA
     * ever waits on another cluster, so this cannot deadlock). */
    k->max_clusters = (unsigned)ctx->cuda->sm_count / k->cfg.cluster;
    if (k->max_clusters == 0)
        k->max_clusters = 1;
    return tw_cu_func_set_attribute(ctx, k->fn, TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    (int)k->smem);
}

/* A row-major [rows, K] 16-bit matrix as a TMA tensor map with a BK x box_rows box, the swizzle
 * the template's wgmma descriptors expect (128 B for BK 64, 64 B for BK 32: one box row) and
 * zero fill outside the matrix (the ragged last tile). */
static twell_status tw_sm90_map(twell_ctx *ctx, tw_CUtensorMap *map, twell_dtype dtype,
                                const void *ptr, size_t rows, uint32_t K, uint32_t bk,
                                uint32_t box_rows) {
    const uint64_t dims[2] = {K, rows};
    const uint64_t strides[1] = {(uint64_t)K * 2u};
    const uint32_t box[2] = {bk, box_rows};
    const uint32_t elem_strides[2] = {1u, 1u};
    return tw_cu_tensor_map_tiled(
        ctx, map,
        dtype == TWELL_DTYPE_BF16 ? TW_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                  : TW_CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        2u, ptr, dims, strides, box, elem_strides, TW_CU_TENSOR_MAP_INTERLEAVE_NONE,
        bk == 64u ? TW_CU_TENSOR_MAP_SWIZZLE_128B : TW_CU_TENSOR_MAP_SWIZZLE_64B,
        TW_CU_TENSOR_MAP_L2_PROMOTION_L2_256B, TW_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

twell_status tw_sm90_kernel_launch(twell_ctx *ctx, const tw_gp_kernel *k, const twell_shape *sh,
                                   size_t M, const void *x, const void *w, uint32_t *packed,
                                   twell_stream stream) {
    const unsigned cl = k->cfg.cluster;
    if (M > (size_t)INT_MAX)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "gate_pack: M=%zu exceeds the sm90 kernel's limit (%d rows)", M, INT_MAX);
    tw_CUtensorMap map_x, map_w;
    twell_status st = tw_sm90_map(ctx, &map_x, sh->dtype, x, M, sh->K, k->cfg.bk, TW_SM90_BM);
    if (st == TWELL_OK)
        st = tw_sm90_map(ctx, &map_w, sh->dtype, w, sh->N, sh->K, k->cfg.bk, TW_SM90_BN / cl);
    if (st != TWELL_OK)
        return st;
    /* One cluster per CLUSTER 128-row blocks and 256-column block, at most one CTA per SM. */
    const size_t mb = (M + TW_SM90_BM - 1u) / TW_SM90_BM;
    const size_t units = (mb + cl - 1u) / cl * ((sh->N + TW_SM90_BN - 1u) / TW_SM90_BN);
    const unsigned clusters = units < k->max_clusters ? (unsigned)units : k->max_clusters;
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = clusters * cl;
    cfg.grid[1] = cfg.grid[2] = 1u;
    cfg.block[0] = TW_SM90_THREADS;
    cfg.block[1] = cfg.block[2] = 1u;
    cfg.cluster[0] = cl;
    cfg.cluster[1] = cfg.cluster[2] = 1u;
    cfg.smem = k->smem;
    cfg.pdl = 1; /* the template waits for its predecessor before any global access */
    int m = (int)M;
    float *ws = NULL;
    uint32_t *ctr = NULL;
    void *args[] = {(void *)&map_x, (void *)&map_w, (void *)&packed,
                    (void *)&m,     (void *)&ws,    (void *)&ctr};
    return tw_cu_launch(ctx, k->fn, &cfg, stream, args);
}
