/*
 * cuda_driver.c — the CUDA driver's errors, device and context: each failure of a call through the
 * function table (cuda_driver_api.h; cuda_driver_load.c loads it) becomes a twell_status with
 * "<call>: <CUDA_ERROR_NAME> (<code>)" on the context; opening a device, the per-thread context
 * scopes and what an address is. Modules and launches are cuda_launch.c's, memory, streams,
 * events and graphs cuda_memory.c's.
 */
#include "cuda_driver.h"
#include "cuda_driver_api.h"

#include <stdio.h>
#include <string.h>

enum {
    TW_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    TW_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    TW_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    TW_CU_MEMORYTYPE_HOST = 1,
    TW_CU_MEMORYTYPE_DEVICE = 2,
    TW_CU_MEMORYTYPE_UNIFIED = 4,
    TW_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    TW_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
    TW_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    TW_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    TW_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
};

/* ---- error mapping ---- */

twell_status tw_cu_status_of(tw_CUresult r) {
    switch (r) {
    case TW_CUDA_SUCCESS:
        return TWELL_OK;
    case TW_CUDA_ERROR_OUT_OF_MEMORY:
        return TWELL_ERR_NO_MEMORY;
    case TW_CUDA_ERROR_NO_DEVICE:
    case TW_CUDA_ERROR_INVALID_DEVICE:
        return TWELL_ERR_NO_DEVICE;
    default:
        return TWELL_ERR_CUDA;
    }
}

/* Names for when the driver is absent or does not know a code (tests, messages before cuInit). */
static const struct {
    int code;
    const char *name;
} tw_cu_names[] = {
    {0, "CUDA_SUCCESS"},
    {1, "CUDA_ERROR_INVALID_VALUE"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"},
    {4, "CUDA_ERROR_DEINITIALIZED"},
    {34, "CUDA_ERROR_STUB_LIBRARY"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE"},
    {100, "CUDA_ERROR_NO_DEVICE"},
    {101, "CUDA_ERROR_INVALID_DEVICE"},
    {200, "CUDA_ERROR_INVALID_IMAGE"},
    {201, "CUDA_ERROR_INVALID_CONTEXT"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
    {218, "CUDA_ERROR_INVALID_PTX"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
    {400, "CUDA_ERROR_INVALID_HANDLE"},
    {500, "CUDA_ERROR_NOT_FOUND"},
    {600, "CUDA_ERROR_NOT_READY"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS"},
    {719, "CUDA_ERROR_LAUNCH_FAILED"},
    {801, "CUDA_ERROR_NOT_SUPPORTED"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
    {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"},
    {907, "CUDA_ERROR_CAPTURED_EVENT"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
    {912, "CUDA_ERROR_INVALID_CLUSTER_SIZE"},
    {999, "CUDA_ERROR_UNKNOWN"},
};

const char *tw_cu_result_name(tw_CUresult r) {
    if (tw_cu.GetErrorName) {
        const char *s = NULL;
        if (tw_cu.GetErrorName(r, &s) == TW_CUDA_SUCCESS && s)
            return s;
    }
    for (size_t i = 0; i < sizeof tw_cu_names / sizeof tw_cu_names[0]; i++)
        if (tw_cu_names[i].code == r)
            return tw_cu_names[i].name;
    return "CUDA_ERROR_UNKNOWN_CODE";
}

twell_status tw_cu_fail(twell_ctx *ctx, const char *call, tw_CUresult r) {
    if (r == TW_CUDA_SUCCESS)
        return TWELL_OK;
    const char *desc = NULL;
    if (tw_cu.GetErrorString && (tw_cu.GetErrorString(r, &desc) != TW_CUDA_SUCCESS))
        desc = NULL;
    if (desc)
        return tw_error(ctx, tw_cu_status_of(r), "%s: %s (%d): %s", call, tw_cu_result_name(r), r,
                        desc);
    return tw_error(ctx, tw_cu_status_of(r), "%s: %s (%d)", call, tw_cu_result_name(r), r);
}

/* ---- device and context ---- */

twell_status tw_cu_device_count(twell_ctx *ctx, int *count) {
    *count = 0;
    twell_status st = tw_cu_load(ctx);
    if (st != TWELL_OK)
        return st;
    TW_CU_TRY(ctx, DeviceGetCount, count);
    return TWELL_OK;
}

static twell_status tw_cu_attr(twell_ctx *ctx, tw_CUdevice dev, int attr, int *v) {
    *v = 0;
    TW_CU_TRY(ctx, DeviceGetAttribute, v, attr, dev);
    return TWELL_OK;
}

twell_status tw_cu_device_open(twell_ctx *ctx, int ordinal, tw_cuda *d) {
    memset(d, 0, sizeof *d);
    int count = 0;
    twell_status st = tw_cu_device_count(ctx, &count);
    if (st != TWELL_OK)
        return st;
    if (count == 0)
        return tw_error(ctx, TWELL_ERR_NO_DEVICE, "cuDeviceGetCount: no CUDA device");
    if (ordinal < 0 || ordinal >= count)
        return tw_error(ctx, TWELL_ERR_NO_DEVICE,
                        "options.device: device %d requested, %d CUDA device%s present", ordinal,
                        count, count == 1 ? "" : "s");
    d->ordinal = ordinal;
    TW_CU_TRY(ctx, DeviceGet, &d->dev, ordinal);
    TW_CU_TRY(ctx, DeviceGetName, d->name, (int)sizeof d->name, d->dev);
    d->name[sizeof d->name - 1] = '\0';
    if ((st = tw_cu_attr(ctx, d->dev, TW_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                         &d->cc_major)) != TWELL_OK ||
        (st = tw_cu_attr(ctx, d->dev, TW_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                         &d->cc_minor)) != TWELL_OK ||
        (st = tw_cu_attr(ctx, d->dev, TW_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &d->sm_count)) !=
            TWELL_OK ||
        (st = tw_cu_attr(ctx, d->dev, TW_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &d->l2_bytes)) !=
            TWELL_OK ||
        (st = tw_cu_attr(ctx, d->dev, TW_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                         &d->smem_optin)) != TWELL_OK)
        return st;
    TW_CU_TRY(ctx, DeviceTotalMem, &d->total_mem, d->dev);
    TW_CU_TRY(ctx, DriverGetVersion, &d->driver_version);
    /* The "a" target unlocks wgmma/setmaxnreg; it exists for exactly CC 9.0 among our targets. */
    if (d->cc_major == 9 && d->cc_minor == 0)
        snprintf(d->arch, sizeof d->arch, "sm_90a");
    else
        snprintf(d->arch, sizeof d->arch, "sm_%d%d", d->cc_major, d->cc_minor);
    d->pdl = ctx->pdl && tw_cu_pdl_supported(d->cc_major);
    TW_CU_TRY(ctx, DevicePrimaryCtxRetain, &d->cu, d->dev);
    return TWELL_OK;
}

void tw_cu_device_close(tw_cuda *d) {
    if (d && d->cu && tw_cu.DevicePrimaryCtxRelease) {
        tw_cu.DevicePrimaryCtxRelease(d->dev);
        d->cu = NULL;
    }
}

/* The device context the innermost scope on this thread made current, and how many scopes of it
 * are open (tw_cu_scope saves and restores the pair around a scope of another context). */
static _Thread_local void *tw_in_cu;
static _Thread_local unsigned tw_in_n;

twell_status tw_cu_enter(twell_ctx *ctx, tw_cu_scope *scope) {
    memset(scope, 0, sizeof *scope);
    if (!ctx || !ctx->cuda)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED, "not a CUDA context");
    if (tw_in_n > 0 && tw_in_cu == (void *)ctx->cuda->cu) {
        scope->nested = 1; /* an outer scope made it current and nothing inside changes that */
        tw_in_n++;
        return TWELL_OK;
    }
    tw_CUcontext cur = NULL;
    TW_CU_TRY(ctx, CtxGetCurrent, &cur);
    if (cur != ctx->cuda->cu) {
        TW_CU_TRY(ctx, CtxPushCurrent, ctx->cuda->cu);
        scope->pushed = 1;
    }
    scope->saved_cu = tw_in_cu;
    scope->saved_n = tw_in_n;
    tw_in_cu = (void *)ctx->cuda->cu;
    tw_in_n = 1;
    return TWELL_OK;
}

void tw_cu_leave(twell_ctx *ctx, tw_cu_scope *scope) {
    if (scope->nested) {
        scope->nested = 0;
        if (tw_in_n > 0)
            tw_in_n--;
        return;
    }
    if (scope->pushed) {
        tw_CUcontext popped = NULL;
        TW_CU(ctx, CtxPopCurrent)(&popped);
        scope->pushed = 0;
    }
    tw_in_cu = scope->saved_cu;
    tw_in_n = scope->saved_n;
}

/* The memory type, managed flag and ordinal of dp in one cuPointerGetAttributes call; 0 when the
 * driver lacks it or it fails (the caller then asks attribute by attribute). An address the
 * driver does not know gets the attributes' null values (memory type 0), not an error. */
static int tw_cu_pointer_attrs(twell_ctx *ctx, tw_CUdeviceptr dp, unsigned *memtype,
                               unsigned *managed, int *ord) {
    if (!tw_cu.PointerGetAttributes)
        return 0;
    int attrs[3] = {TW_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, TW_CU_POINTER_ATTRIBUTE_IS_MANAGED,
                    TW_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *data[3] = {memtype, managed, ord};
    return TW_CU(ctx, PointerGetAttributes)(3u, attrs, data, dp) == TW_CUDA_SUCCESS;
}

twell_status tw_cu_pointer_info(twell_ctx *ctx, const void *p, int *kind, int *ordinal) {
    *kind = -1;
    *ordinal = -1;
    tw_CUdeviceptr dp = (tw_CUdeviceptr)(uintptr_t)p;
    unsigned memtype = 0, managed = 0;
    int ord = -1;
    if (!tw_cu_pointer_attrs(ctx, dp, &memtype, &managed, &ord)) {
        memtype = managed = 0;
        ord = -1;
        tw_CUresult r =
            TW_CU(ctx, PointerGetAttribute)(&memtype, TW_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp);
        if (r == TW_CUDA_ERROR_INVALID_VALUE) {
            /* Under unified addressing, pageable host memory the driver never saw is reported as
             * an invalid value: it is host memory. */
            *kind = 0;
            return TWELL_OK;
        }
        if (r != TW_CUDA_SUCCESS)
            return TWELL_ERR_CUDA;
        if (TW_CU(ctx, PointerGetAttribute)(&managed, TW_CU_POINTER_ATTRIBUTE_IS_MANAGED, dp) !=
            TW_CUDA_SUCCESS)
            managed = 0;
        if (TW_CU(ctx, PointerGetAttribute)(&ord, TW_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dp) !=
            TW_CUDA_SUCCESS)
            ord = -1;
    } else if (memtype == 0 && !managed) {
        *kind = 0; /* unknown to the driver: pageable host memory, as above */
        return TWELL_OK;
    }
    *ordinal = ord;
    if (managed || memtype == TW_CU_MEMORYTYPE_DEVICE || memtype == TW_CU_MEMORYTYPE_UNIFIED)
        *kind = 1;
    else if (memtype == TW_CU_MEMORYTYPE_HOST)
        *kind = 0;
    return TWELL_OK;
}
