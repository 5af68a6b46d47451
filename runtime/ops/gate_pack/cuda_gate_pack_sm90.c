/* cuda_gate_pack_sm90.c — Hopper (sm_90a) gate-pack launcher for templates/gate_pack_sm90.cu.lua
 * in any tile configuration (BK, STAGES, CLUSTER): shared memory and grid per configuration, and
 * per launch the two TMA tensor maps and one persistent cluster launch. The interface is in
 * cuda_gate_pack.h; the kernel's design is in the template's header. */
#include "cuda_gate_pack.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Fixed by the kernel: CTA tile, threads per CTA. */
#define TW_SM90_BM 128u
#define TW_SM90_BN 256u
#define TW_SM90_THREADS 384u
/* The epilogue staging buffer: 8 consumer warps x 16 rows x 528-byte rows. */
#define TW_SM90_STAGING (8u * 16u * 528u)
/* The kernel can split the tiles of its last partial wave along K through a workspace (about 2%
 * faster at M = 4096), but a workspace owned by the plan would be shared by launches that the
 * caller may run concurrently on different streams, so the launcher passes none (ws = NULL). */

unsigned tw_sm90_smem(const tw_gp_cfg *c) {
    /* The template's SMEM: 1 KB of alignment slack, the stage ring, the staging buffer,
     * 2 * (STAGES + 1) mbarriers and two words. */
    return 1024u + c->stages * (TW_SM90_BM + TW_SM90_BN) * c->bk * 2u + TW_SM90_STAGING +
           2u * (c->stages + 1u) * 8u + 16u;
}

static int tw_sm90_shape_ok(const twell_shape *shape, const tw_cuda *dev) {
    if (!shape || !dev || strcmp(dev->arch, "sm_90a") != 0)
        return 0;
    if (shape->K == 0 || shape->K % 64u != 0 || shape->N == 0 || shape->N > 65536u)
        return 0;
    if (shape->T != 64u && shape->T != 128u && shape->T != 256u)
        return 0;
    if (shape->N % shape->T != 0 || (shape->C != 2u && shape->C != 4u && shape->C != 8u))
        return 0;
    return shape->dtype == TWELL_DTYPE_BF16 || shape->dtype == TWELL_DTYPE_FP16;
}

int tw_sm90_cfg_check(const tw_gp_cfg *c, const twell_shape *s, const tw_cuda *dev, char *why,
                      size_t n) {
    char dummy[256];
    if (!why)
        why = dummy, n = sizeof dummy;
    if (!tw_sm90_shape_ok(s, dev)) {
        snprintf(why, n, "the sm90 kernel does not support K=%u N=%u T=%u C=%u on %s",
                 s ? s->K : 0u, s ? s->N : 0u, s ? s->T : 0u, s ? s->C : 0u, dev ? dev->arch : "?");
        return -1;
    }
    if ((c->bk != 32u && c->bk != 64u) || s->K % c->bk != 0 || c->stages < 2u || c->stages > 8u ||
        (c->cluster != 1u && c->cluster != 2u && c->cluster != 4u)) {
        snprintf(why, n, "BK=%u STAGES=%u CLUSTER=%u is not a configuration of gate_pack_sm90",
                 c->bk, c->stages, c->cluster);
        return -1;
    }
    if (dev->smem_optin < (int)tw_sm90_smem(c) || dev->sm_count < (int)c->cluster) {
        snprintf(why, n, "BK=%u STAGES=%u CLUSTER=%u needs %u bytes of shared memory (device: %d)",
                 c->bk, c->stages, c->cluster, tw_sm90_smem(c), dev->smem_optin);
        return -1;
    }
    return 0;
}

int tw_sm90_gate_pack_supports(const twell_shape *shape, const tw_cuda *dev) {
    tw_gp_cfg d = tw_gp_cfg_default(TW_GP_SM90);
    return tw_sm90_cfg_check(&d, shape, dev, NULL, 0) == 0;
}

twell_status tw_sm90_kernel_prepare(twell_ctx *ctx, tw_gp_kernel *k) {
    k->smem = tw_sm90_smem(&k->cfg);
    /* Every GPC of an H100/H200 holds an even number of SMs, so sm_count / 2 clusters of 2 are
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
