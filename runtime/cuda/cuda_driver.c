/*
 * cuda_driver.c — the CUDA driver's entry points behind wrappers: each call through the function
 * table (cuda_driver_api.h; cuda_driver_load.c loads it) turns a failure into a twell_status with
 * "<call>: <CUDA_ERROR_NAME> (<code>)" on the context.
 */
#include "cuda_driver.h"
#include "cuda_driver_api.h"
#include "test_control.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    TW_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
    TW_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
    TW_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    TW_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    TW_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    TW_CU_MEMORYTYPE_HOST = 1,
    TW_CU_MEMORYTYPE_DEVICE = 2,
    TW_CU_MEMORYTYPE_UNIFIED = 4,
    TW_CU_STREAM_NON_BLOCKING = 1,
    TW_CU_EVENT_DEFAULT = 0,
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

/* Counts one driver call on ctx's device record (tw_cuda.calls and .trace; a ctx that is NULL or
 * not on CUDA yet counts nothing). */
static void tw_cu_count(twell_ctx *ctx, const char *name) {
    if (ctx && ctx->cuda) {
        tw_cuda *d = ctx->cuda;
        d->trace[d->calls % TW_CU_TRACE] = name;
        d->calls++;
    }
}

/* The driver entry point `call`, counted on ctx: TW_CU(ctx, EventRecord)(ev, stream). Every call
 * an op makes on a context goes through this (errors' name lookups and unloads aside). */
#define TW_CU(ctx, call) (tw_cu_count((ctx), "cu" #call), tw_cu.call)

/* Calls a driver entry point and returns its mapped failure, naming the call. */
#define TW_CU_TRY(ctx, call, ...)                                                                  \
    do {                                                                                           \
        tw_CUresult r_ = TW_CU(ctx, call)(__VA_ARGS__);                                            \
        if (r_ != TW_CUDA_SUCCESS)                                                                 \
            return tw_cu_fail((ctx), "cu" #call, r_);                                              \
    } while (0)

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

/* ---- modules and launches ---- */

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

/* ---- memory, streams, events: each enters the context itself ---- */

/* Runs `body` (a statement setting r_) inside ctx's device context and maps its result. */
#define TW_CU_SCOPED(ctx, name, body)                                                              \
    do {                                                                                           \
        tw_cu_scope sc_;                                                                           \
        twell_status st_ = tw_cu_enter((ctx), &sc_);                                               \
        if (st_ != TWELL_OK)                                                                       \
            return st_;                                                                            \
        tw_CUresult r_ = TW_CUDA_SUCCESS;                                                          \
        body;                                                                                      \
        tw_cu_leave((ctx), &sc_);                                                                  \
        return tw_cu_fail((ctx), name, r_);                                                        \
    } while (0)

static tw_CUdeviceptr tw_dptr(const void *p) { return (tw_CUdeviceptr)(uintptr_t)p; }

/* Calls below that block the host until device work completes (tests check that the steady
 * state of an op makes none). */
static atomic_ulong tw_host_waits;

/* Allocation fault injection (TW_TC_CUDA_FAULT_INJECT): the countdown to the allocation that
 * fails, whether it fired since arming, and the blocks allocated and not yet freed. */
static atomic_long tw_fault_countdown, tw_live_allocs;
static atomic_int tw_fault_fired;

twell_status tw_cuda_test_control(int op, va_list ap) {
    switch (op) {
    case TW_TC_CUDA_FAULT_INJECT: {
        long n = va_arg(ap, long);
        if (n > 0) /* arming clears the record; disarming (0) keeps it for FAULT_FIRED */
            atomic_store(&tw_fault_fired, 0);
        atomic_store(&tw_fault_countdown, n > 0 ? n : 0);
        return TWELL_OK;
    }
    case TW_TC_CUDA_FAULT_FIRED:
        *va_arg(ap, int *) = atomic_load(&tw_fault_fired);
        return TWELL_OK;
    case TW_TC_CUDA_LIVE_ALLOCS:
        *va_arg(ap, long *) = atomic_load(&tw_live_allocs);
        return TWELL_OK;
    case TW_TC_CUDA_HOST_WAITS:
        *va_arg(ap, unsigned long *) = atomic_load(&tw_host_waits);
        return TWELL_OK;
    case TW_TC_CUDA_DRIVER_CALLS: {
        const twell_ctx *ctx = va_arg(ap, const twell_ctx *);
        *va_arg(ap, unsigned long *) = ctx && ctx->cuda ? ctx->cuda->calls : 0ul;
        return TWELL_OK;
    }
    case TW_TC_CUDA_DRIVER_TRACE: {
        const twell_ctx *ctx = va_arg(ap, const twell_ctx *);
        const char **names = va_arg(ap, const char **);
        size_t cap = va_arg(ap, size_t);
        size_t *n = va_arg(ap, size_t *);
        *n = 0;
        if (!ctx || !ctx->cuda || (cap && !names))
            return ctx ? TWELL_OK : TWELL_ERR_INVALID_ARG;
        const tw_cuda *d = ctx->cuda;
        size_t have = d->calls < TW_CU_TRACE ? (size_t)d->calls : TW_CU_TRACE;
        size_t take = have < cap ? have : cap;
        for (size_t i = 0; i < take; i++) /* the newest `take`, oldest first */
            names[i] = d->trace[(d->calls - take + i) % TW_CU_TRACE];
        *n = take;
        return TWELL_OK;
    }
    }
    return TWELL_ERR_INVALID_ARG;
}

/* 1 when this allocation is the one TW_TC_CUDA_FAULT_INJECT asked to fail. */
static int tw_fault_now(void) {
    long v = atomic_load(&tw_fault_countdown);
    while (v > 0 && !atomic_compare_exchange_weak(&tw_fault_countdown, &v, v - 1)) {
    }
    if (v == 1) {
        atomic_store(&tw_fault_fired, 1);
        return 1;
    }
    return 0;
}

twell_status tw_cuda_malloc(twell_ctx *ctx, size_t bytes, void **dptr) {
    *dptr = NULL;
    tw_CUdeviceptr d = 0;
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st != TWELL_OK)
        return st;
    tw_CUresult r =
        tw_fault_now() ? TW_CUDA_ERROR_OUT_OF_MEMORY : TW_CU(ctx, MemAlloc)(&d, bytes ? bytes : 1);
    tw_cu_leave(ctx, &sc);
    if (r != TW_CUDA_SUCCESS) {
        st = tw_cu_fail(ctx, "cuMemAlloc_v2", r);
        return tw_error(ctx, st, "%s (%zu bytes)", tw_errmsg(ctx), bytes);
    }
    atomic_fetch_add(&tw_live_allocs, 1);
    *dptr = (void *)(uintptr_t)d;
    return TWELL_OK;
}

void tw_cuda_free(twell_ctx *ctx, void *dptr) {
    if (!dptr || !ctx || !ctx->cuda)
        return;
    tw_cu_scope sc;
    if (tw_cu_enter(ctx, &sc) != TWELL_OK)
        return;
    if (TW_CU(ctx, MemFree)(tw_dptr(dptr)) == TW_CUDA_SUCCESS)
        atomic_fetch_sub(&tw_live_allocs, 1);
    tw_cu_leave(ctx, &sc);
}

void tw_cuda_keep_free(twell_ctx *ctx, tw_cuda_keep *keep, int captured, void *dptr) {
    if (!dptr)
        return;
    if (!captured) {
        tw_cuda_free(ctx, dptr);
        return;
    }
    if (keep->n == keep->cap) {
        size_t cap = keep->cap ? 2 * keep->cap : 8;
        void **p = realloc(keep->p, cap * sizeof *p);
        if (!p) {
            tw_log(ctx, TWELL_LOG_WARN,
                   "a device buffer a captured graph may use is leaked (no host memory to track "
                   "it)");
            return;
        }
        keep->p = p;
        keep->cap = cap;
    }
    keep->p[keep->n++] = dptr;
}

void tw_cuda_keep_release(twell_ctx *ctx, tw_cuda_keep *keep) {
    for (size_t i = 0; i < keep->n; i++)
        tw_cuda_free(ctx, keep->p[i]);
    free(keep->p);
    memset(keep, 0, sizeof *keep);
}

twell_status tw_cuda_memcpy_htod(twell_ctx *ctx, void *dst, const void *src, size_t bytes) {
    TW_CU_SCOPED(ctx, "cuMemcpyHtoD_v2", r_ = TW_CU(ctx, MemcpyHtoD)(tw_dptr(dst), src, bytes));
}

twell_status tw_cuda_memcpy_dtoh(twell_ctx *ctx, void *dst, const void *src, size_t bytes) {
    atomic_fetch_add(&tw_host_waits, 1ul);
    TW_CU_SCOPED(ctx, "cuMemcpyDtoH_v2", r_ = TW_CU(ctx, MemcpyDtoH)(dst, tw_dptr(src), bytes));
}

twell_status tw_cuda_memcpy_dtod(twell_ctx *ctx, void *dst, const void *src, size_t bytes) {
    TW_CU_SCOPED(ctx, "cuMemcpyDtoD_v2",
                 r_ = TW_CU(ctx, MemcpyDtoD)(tw_dptr(dst), tw_dptr(src), bytes));
}

twell_status tw_cuda_memset_d32(twell_ctx *ctx, void *dst, uint32_t value, size_t count,
                                twell_stream stream) {
    TW_CU_SCOPED(ctx, "cuMemsetD32Async",
                 r_ = tw_cu.MemsetD32Async(tw_dptr(dst), value, count, (tw_CUstream)stream));
}

twell_status tw_cuda_memset_d8(twell_ctx *ctx, void *dst, uint8_t value, size_t count,
                               twell_stream stream) {
    TW_CU_SCOPED(ctx, "cuMemsetD8Async",
                 r_ = tw_cu.MemsetD8Async(tw_dptr(dst), value, count, (tw_CUstream)stream));
}

twell_status tw_cuda_synchronize(twell_ctx *ctx) {
    atomic_fetch_add(&tw_host_waits, 1ul);
    TW_CU_SCOPED(ctx, "cuCtxSynchronize", r_ = TW_CU(ctx, CtxSynchronize)());
}

twell_status tw_cuda_stream_synchronize(twell_ctx *ctx, twell_stream stream) {
    atomic_fetch_add(&tw_host_waits, 1ul);
    TW_CU_SCOPED(ctx, "cuStreamSynchronize",
                 r_ = TW_CU(ctx, StreamSynchronize)((tw_CUstream)stream));
}

twell_status tw_cuda_stream_create(twell_ctx *ctx, twell_stream *out) {
    *out = NULL;
    tw_CUstream s = NULL;
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st != TWELL_OK)
        return st;
    tw_CUresult r = TW_CU(ctx, StreamCreate)(&s, TW_CU_STREAM_NON_BLOCKING);
    tw_cu_leave(ctx, &sc);
    if (r != TW_CUDA_SUCCESS)
        return tw_cu_fail(ctx, "cuStreamCreate", r);
    *out = s;
    return TWELL_OK;
}

void tw_cuda_stream_destroy(twell_ctx *ctx, twell_stream stream) {
    tw_cu_scope sc;
    if (!stream || tw_cu_enter(ctx, &sc) != TWELL_OK)
        return;
    TW_CU(ctx, StreamDestroy)((tw_CUstream)stream);
    tw_cu_leave(ctx, &sc);
}

twell_status tw_cuda_mem_info(twell_ctx *ctx, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    TW_CU_SCOPED(ctx, "cuMemGetInfo_v2", r_ = TW_CU(ctx, MemGetInfo)(free_bytes, total_bytes));
}

twell_status tw_cuda_event_create(twell_ctx *ctx, tw_cuda_event *out) {
    *out = NULL;
    tw_CUevent e = NULL;
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st != TWELL_OK)
        return st;
    tw_CUresult r = TW_CU(ctx, EventCreate)(&e, TW_CU_EVENT_DEFAULT);
    tw_cu_leave(ctx, &sc);
    if (r != TW_CUDA_SUCCESS)
        return tw_cu_fail(ctx, "cuEventCreate", r);
    *out = e;
    return TWELL_OK;
}

void tw_cuda_event_destroy(twell_ctx *ctx, tw_cuda_event ev) {
    tw_cu_scope sc;
    if (!ev || tw_cu_enter(ctx, &sc) != TWELL_OK)
        return;
    if (ctx->cuda->done_ev == ev)
        ctx->cuda->done_ev = NULL; /* the handle may come back for another event */
    TW_CU(ctx, EventDestroy)(ev);
    tw_cu_leave(ctx, &sc);
}

twell_status tw_cuda_event_record(twell_ctx *ctx, tw_cuda_event ev, twell_stream stream) {
    if (ctx && ctx->cuda && ctx->cuda->done_ev == ev)
        ctx->cuda->done_ev = NULL; /* pending again (also if the record fails: ask the driver) */
    TW_CU_SCOPED(ctx, "cuEventRecord", r_ = TW_CU(ctx, EventRecord)(ev, (tw_CUstream)stream));
}

twell_status tw_cuda_event_elapsed(twell_ctx *ctx, tw_cuda_event start, tw_cuda_event end,
                                   float *ms) {
    *ms = 0.0f;
    atomic_fetch_add(&tw_host_waits, 1ul);
    TW_CU_SCOPED(ctx, "cuEventElapsedTime", {
        r_ = TW_CU(ctx, EventSynchronize)(end);
        if (r_ == TW_CUDA_SUCCESS)
            r_ = TW_CU(ctx, EventElapsedTime)(ms, start, end);
    });
}

twell_status tw_cuda_host_alloc(twell_ctx *ctx, size_t bytes, void **out) {
    *out = NULL;
    void *p = NULL;
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st != TWELL_OK)
        return st;
    tw_CUresult r = tw_fault_now() ? TW_CUDA_ERROR_OUT_OF_MEMORY
                                   : TW_CU(ctx, MemAllocHost)(&p, bytes ? bytes : 1);
    tw_cu_leave(ctx, &sc);
    if (r != TW_CUDA_SUCCESS) {
        st = tw_cu_fail(ctx, "cuMemAllocHost_v2", r);
        return tw_error(ctx, st, "%s (%zu bytes)", tw_errmsg(ctx), bytes);
    }
    atomic_fetch_add(&tw_live_allocs, 1);
    *out = p;
    return TWELL_OK;
}

twell_status tw_cuda_host_device_ptr(twell_ctx *ctx, void *host, void **dptr) {
    *dptr = NULL;
    if (!tw_cu.MemHostGetDevicePointer)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "cuMemHostGetDevicePointer_v2: not in this driver");
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st != TWELL_OK)
        return st;
    tw_CUdeviceptr d = 0;
    tw_CUresult r = TW_CU(ctx, MemHostGetDevicePointer)(&d, host, 0);
    tw_cu_leave(ctx, &sc);
    if (r != TW_CUDA_SUCCESS)
        return tw_cu_fail(ctx, "cuMemHostGetDevicePointer_v2", r);
    *dptr = (void *)(uintptr_t)d;
    return TWELL_OK;
}

void tw_cuda_host_free(twell_ctx *ctx, void *p) {
    tw_cu_scope sc;
    if (!p || !ctx || !ctx->cuda || tw_cu_enter(ctx, &sc) != TWELL_OK)
        return;
    if (TW_CU(ctx, MemFreeHost)(p) == TW_CUDA_SUCCESS)
        atomic_fetch_sub(&tw_live_allocs, 1);
    tw_cu_leave(ctx, &sc);
}

twell_status tw_cuda_memcpy_dtoh_async(twell_ctx *ctx, void *dst, const void *src, size_t bytes,
                                       twell_stream stream) {
    TW_CU_SCOPED(ctx, "cuMemcpyDtoHAsync_v2",
                 r_ = TW_CU(ctx, MemcpyDtoHAsync)(dst, tw_dptr(src), bytes, (tw_CUstream)stream));
}

twell_status tw_cuda_event_query(twell_ctx *ctx, tw_cuda_event ev, int *done) {
    *done = 0;
    if (ev && ctx && ctx->cuda && ctx->cuda->done_ev == ev) {
        *done = 1; /* complete when last asked, not recorded since */
        return TWELL_OK;
    }
    TW_CU_SCOPED(ctx, "cuEventQuery", {
        r_ = TW_CU(ctx, EventQuery)(ev);
        if (r_ == TW_CUDA_SUCCESS) {
            *done = 1;
            ctx->cuda->done_ev = ev;
        } else if (r_ == TW_CUDA_ERROR_NOT_READY) {
            r_ = TW_CUDA_SUCCESS;
        }
    });
}

twell_status tw_cuda_stream_wait_event(twell_ctx *ctx, twell_stream stream, tw_cuda_event ev) {
    TW_CU_SCOPED(ctx, "cuStreamWaitEvent",
                 r_ = TW_CU(ctx, StreamWaitEvent)((tw_CUstream)stream, ev, 0u));
}

twell_status tw_cuda_event_synchronize(twell_ctx *ctx, tw_cuda_event ev) {
    atomic_fetch_add(&tw_host_waits, 1ul);
    TW_CU_SCOPED(ctx, "cuEventSynchronize", r_ = TW_CU(ctx, EventSynchronize)(ev));
}

/* ---- stream capture ---- */

twell_status tw_cuda_stream_capturing(twell_ctx *ctx, twell_stream stream, int *capturing) {
    *capturing = 0;
    if (!tw_cu.StreamIsCapturing)
        return TWELL_OK; /* a driver without it has no graphs */
    int status = 0;      /* CUstreamCaptureStatus: 0 none, 1 active, 2 invalidated */
    TW_CU_SCOPED(ctx, "cuStreamIsCapturing", {
        r_ = TW_CU(ctx, StreamIsCapturing)((tw_CUstream)stream, &status);
        if (r_ == TW_CUDA_SUCCESS)
            *capturing = status != 0;
    });
}

twell_status tw_cuda_stream_capture_id(twell_ctx *ctx, twell_stream stream, uint64_t *id) {
    *id = 0;
    if (!tw_cu.StreamGetCaptureInfo)
        return TWELL_OK;
    int status = 0;
    uint64_t got = 0;
    TW_CU_SCOPED(ctx, "cuStreamGetCaptureInfo", {
        r_ = TW_CU(ctx, StreamGetCaptureInfo)((tw_CUstream)stream, &status, &got);
        if (r_ == TW_CUDA_SUCCESS && status == 1)
            *id = got;
    });
}

static twell_status tw_cuda_graph_api(twell_ctx *ctx) {
    if (!tw_cu.StreamBeginCapture || !tw_cu.StreamEndCapture || !tw_cu.GraphInstantiate ||
        !tw_cu.GraphLaunch || !tw_cu.GraphExecDestroy || !tw_cu.GraphDestroy)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED, "CUDA graphs: not in this driver");
    return TWELL_OK;
}

twell_status tw_cuda_capture_begin(twell_ctx *ctx, twell_stream stream, int mode) {
    twell_status st = tw_cuda_graph_api(ctx);
    if (st != TWELL_OK)
        return st;
    TW_CU_SCOPED(ctx, "cuStreamBeginCapture_v2",
                 r_ = TW_CU(ctx, StreamBeginCapture)((tw_CUstream)stream, mode));
}

twell_status tw_cuda_capture_end(twell_ctx *ctx, twell_stream stream, tw_cuda_graph *out) {
    *out = NULL;
    twell_status st = tw_cuda_graph_api(ctx);
    if (st != TWELL_OK)
        return st;
    tw_cu_scope sc;
    if ((st = tw_cu_enter(ctx, &sc)) != TWELL_OK)
        return st;
    tw_CUgraph g = NULL;
    tw_CUgraphExec e = NULL;
    tw_CUresult r = TW_CU(ctx, StreamEndCapture)((tw_CUstream)stream, &g);
    const char *call = "cuStreamEndCapture";
    if (r == TW_CUDA_SUCCESS) {
        r = TW_CU(ctx, GraphInstantiate)(&e, g, 0ull);
        call = "cuGraphInstantiateWithFlags";
    }
    if (g)
        TW_CU(ctx, GraphDestroy)(g); /* the executable graph keeps what it needs */
    tw_cu_leave(ctx, &sc);
    if (r != TW_CUDA_SUCCESS)
        return tw_cu_fail(ctx, call, r);
    *out = e;
    return TWELL_OK;
}

twell_status tw_cuda_graph_launch(twell_ctx *ctx, tw_cuda_graph g, twell_stream stream) {
    twell_status st = tw_cuda_graph_api(ctx);
    if (st != TWELL_OK)
        return st;
    TW_CU_SCOPED(ctx, "cuGraphLaunch", r_ = TW_CU(ctx, GraphLaunch)(g, (tw_CUstream)stream));
}

void tw_cuda_graph_destroy(twell_ctx *ctx, tw_cuda_graph g) {
    tw_cu_scope sc;
    if (!g || !tw_cu.GraphExecDestroy || tw_cu_enter(ctx, &sc) != TWELL_OK)
        return;
    TW_CU(ctx, GraphExecDestroy)(g);
    tw_cu_leave(ctx, &sc);
}
