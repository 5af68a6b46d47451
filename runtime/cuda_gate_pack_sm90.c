/* cuda_gate_pack_sm90.c — Hopper (sm_90a) gate-pack launcher for templates/gate_pack_sm90.cu.lua:
 * compiles and loads the template once per plan, and per launch encodes the two TMA tensor maps
 * and enqueues one persistent cluster launch. The interface is documented in cuda_gate_pack.h;
 * the kernel's design and measurements in bench/dev/NOTES-gate-pack.md. */
#include "cuda_gate_pack.h"

#include "jit.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Tile configuration rendered into the template (its BK, STAGES and CLUSTER parameters). */
#define TW_SM90_BK 64u
#define TW_SM90_STAGES 3u
#define TW_SM90_CLUSTER 2u
/* Fixed by the kernel: CTA tile, threads per CTA. */
#define TW_SM90_BM 128u
#define TW_SM90_BN 256u
#define TW_SM90_THREADS 384u
/* Dynamic shared memory; must equal SMEM in the template: 1 KB of alignment slack, the stage
 * ring, the 128-row staging buffer (528-byte rows), 2 * (STAGES + 1) mbarriers and two words. */
#define TW_SM90_SMEM                                                                               \
    (1024u + TW_SM90_STAGES * (TW_SM90_BM + TW_SM90_BN) * TW_SM90_BK * 2u + 8u * 16u * 528u +      \
     2u * (TW_SM90_STAGES + 1u) * 8u + 16u)
/* The kernel can split the tiles of its last partial wave along K through a workspace (about 2%
 * faster at M = 4096), but a workspace owned by the plan would be shared by launches that the
 * caller may run concurrently on different streams, so the launcher passes none (ws = NULL). */

typedef struct tw_sm90 {
    tw_CUmodule mod;
    tw_CUfunction fn;
    unsigned max_clusters; /* one CTA per SM: the persistent grid's size in clusters */
} tw_sm90;

int tw_sm90_gate_pack_supports(const twell_shape *shape, const tw_cuda *dev) {
    if (!shape || !dev || strcmp(dev->arch, "sm_90a") != 0)
        return 0;
    if (shape->K == 0 || shape->K % 64u != 0 || shape->N == 0 || shape->N > 65536u)
        return 0;
    if (shape->T != 64u && shape->T != 128u && shape->T != 256u)
        return 0;
    if (shape->N % shape->T != 0 || (shape->C != 2u && shape->C != 4u && shape->C != 8u))
        return 0;
    if (shape->dtype != TWELL_DTYPE_BF16 && shape->dtype != TWELL_DTYPE_FP16)
        return 0;
    return dev->smem_optin >= (int)TW_SM90_SMEM && dev->sm_count >= (int)TW_SM90_CLUSTER;
}

void tw_sm90_gate_pack_release(twell_plan *plan, void *state) {
    tw_sm90 *s = state;
    if (!s)
        return;
    (void)plan;
    tw_cu_module_unload(s->mod);
    free(s);
}

twell_status tw_sm90_gate_pack_init(twell_plan *plan, void **state, int *modules_loaded) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *sh = &plan->shape;
    *state = NULL;
    if (modules_loaded)
        *modules_loaded = 0;
    if (!tw_sm90_gate_pack_supports(sh, ctx->cuda))
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "gate_pack: the sm90 kernel does not support K=%u N=%u T=%u C=%u on %s",
                        sh->K, sh->N, sh->T, sh->C, ctx->cuda->arch);
    tw_sm90 *s = calloc(1, sizeof *s);
    if (!s)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "gate_pack: out of memory for the sm90 state");
    tw_param params[] = {
        {"K", NULL, (long long)sh->K},
        {"N", NULL, (long long)sh->N},
        {"T", NULL, (long long)sh->T},
        {"C", NULL, (long long)sh->C},
        {"dtype", sh->dtype == TWELL_DTYPE_BF16 ? "bf16" : "fp16", 0},
        {"BK", NULL, (long long)TW_SM90_BK},
        {"STAGES", NULL, (long long)TW_SM90_STAGES},
        {"CLUSTER", NULL, (long long)TW_SM90_CLUSTER},
    };
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    twell_status st = tw_jit_cubin(ctx, "gate_pack_sm90", params, sizeof params / sizeof params[0],
                                   ctx->cuda->arch, &cubin);
    if (st == TWELL_OK) {
        st = tw_cu_module_load(ctx, cubin.data, &s->mod);
        tw_cubin_free(&cubin);
    }
    if (st == TWELL_OK && modules_loaded)
        *modules_loaded = 1;
    if (st == TWELL_OK)
        st = tw_cu_module_function(ctx, s->mod, "twell_gate_pack_sm90", &s->fn);
    if (st == TWELL_OK)
        st = tw_cu_func_set_attribute(
            ctx, s->fn, TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)TW_SM90_SMEM);
    /* Every GPC of an H100/H200 holds an even number of SMs, so sm_count / 2 clusters of 2 are
     * co-resident; where fewer are, the extra clusters only run later (no CTA ever waits on
     * another, so this cannot deadlock). */
    s->max_clusters = (unsigned)ctx->cuda->sm_count / TW_SM90_CLUSTER;
    if (st != TWELL_OK) {
        tw_sm90_gate_pack_release(plan, s);
        return st;
    }
    *state = s;
    return TWELL_OK;
}

/* A row-major [rows, K] 16-bit matrix as a TMA tensor map with a BK x box_rows box, 128-byte
 * swizzle (the wgmma operand layout) and zero fill outside the matrix (the ragged last tile). */
static twell_status tw_sm90_map(twell_ctx *ctx, tw_CUtensorMap *map, twell_dtype dtype,
                                const void *ptr, size_t rows, uint32_t K, uint32_t box_rows) {
    const uint64_t dims[2] = {K, rows};
    const uint64_t strides[1] = {(uint64_t)K * 2u};
    const uint32_t box[2] = {TW_SM90_BK, box_rows};
    const uint32_t elem_strides[2] = {1u, 1u};
    return tw_cu_tensor_map_tiled(ctx, map,
                                  dtype == TWELL_DTYPE_BF16 ? TW_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                            : TW_CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                  2u, ptr, dims, strides, box, elem_strides,
                                  TW_CU_TENSOR_MAP_INTERLEAVE_NONE, TW_CU_TENSOR_MAP_SWIZZLE_128B,
                                  TW_CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  TW_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

twell_status tw_sm90_gate_pack_launch(twell_plan *plan, void *state, size_t M, const void *x,
                                      const void *w, uint32_t *packed, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *sh = &plan->shape;
    tw_sm90 *s = state;
    if (M > (size_t)INT_MAX)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "gate_pack: M=%zu exceeds the sm90 kernel's limit (%d rows)", M, INT_MAX);
    tw_CUtensorMap map_x, map_w;
    twell_status st = tw_sm90_map(ctx, &map_x, sh->dtype, x, M, sh->K, TW_SM90_BM);
    if (st == TWELL_OK)
        st = tw_sm90_map(ctx, &map_w, sh->dtype, w, sh->N, sh->K, TW_SM90_BN / TW_SM90_CLUSTER);
    if (st != TWELL_OK)
        return st;
    /* One cluster per pair of 128-row blocks and 256-column block, at most one CTA per SM. */
    const size_t mb = (M + TW_SM90_BM - 1u) / TW_SM90_BM;
    const size_t units =
        (mb + TW_SM90_CLUSTER - 1u) / TW_SM90_CLUSTER * ((sh->N + TW_SM90_BN - 1u) / TW_SM90_BN);
    const unsigned clusters = units < s->max_clusters ? (unsigned)units : s->max_clusters;
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = clusters * TW_SM90_CLUSTER;
    cfg.grid[1] = cfg.grid[2] = 1u;
    cfg.block[0] = TW_SM90_THREADS;
    cfg.block[1] = cfg.block[2] = 1u;
    cfg.cluster[0] = TW_SM90_CLUSTER;
    cfg.cluster[1] = cfg.cluster[2] = 1u;
    cfg.smem = TW_SM90_SMEM;
    int m = (int)M;
    float *ws = NULL;
    uint32_t *ctr = NULL;
    void *args[] = {(void *)&map_x, (void *)&map_w, (void *)&packed,
                    (void *)&m,     (void *)&ws,    (void *)&ctr};
    return tw_cu_launch(ctx, s->fn, &cfg, stream, args);
}
