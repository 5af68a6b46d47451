/*
 * cuda_launch.c — loaded modules (a cubin's kernels and globals), function attributes and
 * occupancy, kernel launches (with clusters and programmatic dependent launch through
 * cuLaunchKernelEx) and TMA tensor maps, over the driver's function table (cuda_driver_api.h).
 */
#include "cuda_driver.h"
#include "cuda_driver_api.h"

#include <string.h>

enum {
    TW_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
    TW_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
};

twell_status tw_cu_module_load(twell_ctx *ctx, const void *image, tw_CUmodule *out) {
    *out = NULL;
    TW_CU_TRY(ctx, ModuleLoadData, out, image);
    return TWELL_OK;
}

void tw_cu_module_unload(tw_CUmodule mod) {
    if (mod && tw_cu.ModuleUnload)
        tw_cu.ModuleUnload(mod);
}

twell_status tw_cu_module_function(twell_ctx *ctx, tw_CUmodule mod, const char *name,
                                   tw_CUfunction *out) {
    *out = NULL;
    tw_CUresult r = TW_CU(ctx, ModuleGetFunction)(out, mod, name);
    if (r != TW_CUDA_SUCCESS) {
        twell_status st = tw_cu_fail(ctx, "cuModuleGetFunction", r);
        return tw_error(ctx, st, "%s (kernel \"%s\")", tw_errmsg(ctx), name);
    }
    return TWELL_OK;
}

twell_status tw_cu_module_open(twell_ctx *ctx, const void *image, const char *const *names,
                               size_t n, tw_CUmodule *mod, tw_CUfunction *fns) {
    for (size_t i = 0; i < n; i++)
        fns[i] = NULL;
    twell_status st = tw_cu_module_load(ctx, image, mod);
    for (size_t i = 0; i < n && st == TWELL_OK; i++)
        if (names[i])
            st = tw_cu_module_function(ctx, *mod, names[i], &fns[i]);
    if (st != TWELL_OK) {
        tw_cu_module_unload(*mod);
        *mod = NULL;
        for (size_t i = 0; i < n; i++)
            fns[i] = NULL;
    }
    return st;
}

twell_status tw_cu_module_global(twell_ctx *ctx, tw_CUmodule mod, const char *name, void **dptr,
                                 size_t *bytes) {
    *dptr = NULL;
    *bytes = 0;
    tw_CUdeviceptr d = 0;
    tw_CUresult r = TW_CU(ctx, ModuleGetGlobal)(&d, bytes, mod, name);
    if (r != TW_CUDA_SUCCESS) {
        *bytes = 0;
        twell_status st = tw_cu_fail(ctx, "cuModuleGetGlobal_v2", r);
        return tw_error(ctx, st, "%s (variable \"%s\")", tw_errmsg(ctx), name);
    }
    *dptr = (void *)(uintptr_t)d;
    return TWELL_OK;
}

twell_status tw_cu_func_set_attribute(twell_ctx *ctx, tw_CUfunction fn, int attr, int value) {
    TW_CU_TRY(ctx, FuncSetAttribute, fn, attr, value);
    return TWELL_OK;
}

twell_status tw_cu_func_occupancy(twell_ctx *ctx, tw_CUfunction fn, int block, size_t smem,
                                  int *out) {
    *out = 0;
    if (!tw_cu.OccupancyMaxActiveBlocksPerMultiprocessor)
        return TWELL_OK;
    int n = 0;
    TW_CU_TRY(ctx, OccupancyMaxActiveBlocksPerMultiprocessor, &n, fn, block, smem);
    *out = n > 0 ? n : 0;
    return TWELL_OK;
}

int tw_cu_pdl_supported(int cc_major) { return cc_major >= 9 && tw_cu.LaunchKernelEx != NULL; }

twell_status tw_cu_launch(twell_ctx *ctx, tw_CUfunction fn, const tw_cu_launch_cfg *c,
                          twell_stream stream, void **args) {
    unsigned cx = c->cluster[0], cy = c->cluster[1], cz = c->cluster[2];
    int clustered = (cx | cy | cz) != 0 && (cx != 1 || cy != 1 || cz != 1);
    int pdl = c->pdl && ctx->cuda && ctx->cuda->pdl;
    if (!clustered && !pdl) {
        TW_CU_TRY(ctx, LaunchKernel, fn, c->grid[0], c->grid[1], c->grid[2], c->block[0],
                  c->block[1], c->block[2], c->smem, (tw_CUstream)stream, args, NULL);
        return TWELL_OK;
    }
    if (!tw_cu.LaunchKernelEx)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "cuLaunchKernelEx: not in this driver (clusters need CUDA 12+)");
    tw_CUlaunchAttribute attr[2];
    memset(attr, 0, sizeof attr);
    unsigned n = 0;
    if (clustered) {
        attr[n].id = TW_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr[n].value.clusterDim.x = cx ? cx : 1;
        attr[n].value.clusterDim.y = cy ? cy : 1;
        attr[n].value.clusterDim.z = cz ? cz : 1;
        n++;
    }
    if (pdl) {
        attr[n].id = TW_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr[n].value.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    tw_CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = c->grid[0];
    cfg.gridDimY = c->grid[1];
    cfg.gridDimZ = c->grid[2];
    cfg.blockDimX = c->block[0];
    cfg.blockDimY = c->block[1];
    cfg.blockDimZ = c->block[2];
    cfg.sharedMemBytes = c->smem;
    cfg.hStream = (tw_CUstream)stream;
    cfg.attrs = attr;
    cfg.numAttrs = n;
    TW_CU_TRY(ctx, LaunchKernelEx, &cfg, fn, args, NULL);
    return TWELL_OK;
}

twell_status tw_cu_launch_grid(twell_ctx *ctx, tw_CUfunction fn, size_t gx, unsigned gy,
                               unsigned block, unsigned smem, unsigned pdl, twell_stream stream,
                               void **args) {
    tw_cu_launch_cfg c;
    memset(&c, 0, sizeof c);
    c.grid[0] = (unsigned)(gx ? gx : 1);
    c.grid[1] = gy;
    c.grid[2] = 1;
    c.block[0] = block;
    c.block[1] = c.block[2] = 1;
    c.smem = smem;
    c.pdl = pdl;
    return tw_cu_launch(ctx, fn, &c, stream, args);
}

twell_status tw_cu_tensor_map_tiled(twell_ctx *ctx, tw_CUtensorMap *map, int data_type,
                                    unsigned rank, const void *global, const uint64_t *dims,
                                    const uint64_t *strides_bytes, const uint32_t *box,
                                    const uint32_t *elem_strides, int interleave, int swizzle,
                                    int l2_promotion, int oob_fill) {
    if (!tw_cu.TensorMapEncodeTiled)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "cuTensorMapEncodeTiled: not in this driver (needs CUDA 12+)");
    TW_CU_TRY(ctx, TensorMapEncodeTiled, map, data_type, rank, (void *)(uintptr_t)global, dims,
              strides_bytes, box, elem_strides, interleave, swizzle, l2_promotion, oob_fill);
    return TWELL_OK;
}
