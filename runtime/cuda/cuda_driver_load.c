/*
 * cuda_driver_load.c — loads libcuda.so.1 with dlopen once per process, fills the driver's
 * function table (cuda_driver_api.h) with dlsym and calls cuInit. cuda_driver.c wraps the calls.
 */
#include "cuda_driver_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *names[2]; /* preferred symbol, then a fallback (or NULL) */
    size_t offset;
    int optional;
} tw_cu_sym;

#define TW_SYM(field, n1, n2, opt)                                                                 \
    { {n1, n2}, offsetof(tw_cu_api, field), opt }
static const tw_cu_sym tw_cu_syms[] = {
    TW_SYM(Init, "cuInit", NULL, 0),
    TW_SYM(DriverGetVersion, "cuDriverGetVersion", NULL, 0),
    TW_SYM(GetErrorName, "cuGetErrorName", NULL, 0),
    TW_SYM(GetErrorString, "cuGetErrorString", NULL, 0),
    TW_SYM(DeviceGetCount, "cuDeviceGetCount", NULL, 0),
    TW_SYM(DeviceGet, "cuDeviceGet", NULL, 0),
    TW_SYM(DeviceGetName, "cuDeviceGetName", NULL, 0),
    TW_SYM(DeviceGetAttribute, "cuDeviceGetAttribute", NULL, 0),
    TW_SYM(DeviceTotalMem, "cuDeviceTotalMem_v2", NULL, 0),
    TW_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL, 0),
    TW_SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", 0),
    TW_SYM(CtxGetCurrent, "cuCtxGetCurrent", NULL, 0),
    TW_SYM(CtxPushCurrent, "cuCtxPushCurrent_v2", NULL, 0),
    TW_SYM(CtxPopCurrent, "cuCtxPopCurrent_v2", NULL, 0),
    TW_SYM(CtxSynchronize, "cuCtxSynchronize", NULL, 0),
    TW_SYM(MemAlloc, "cuMemAlloc_v2", NULL, 0),
    TW_SYM(MemFree, "cuMemFree_v2", NULL, 0),
    TW_SYM(MemGetInfo, "cuMemGetInfo_v2", NULL, 0),
    TW_SYM(MemcpyHtoD, "cuMemcpyHtoD_v2", NULL, 0),
    TW_SYM(MemcpyDtoH, "cuMemcpyDtoH_v2", NULL, 0),
    TW_SYM(MemcpyDtoD, "cuMemcpyDtoD_v2", NULL, 0),
    TW_SYM(MemsetD32Async, "cuMemsetD32Async", NULL, 0),
    TW_SYM(MemsetD8Async, "cuMemsetD8Async", NULL, 0),
    TW_SYM(PointerGetAttribute, "cuPointerGetAttribute", NULL, 0),
    TW_SYM(ModuleLoadData, "cuModuleLoadData", NULL, 0),
    TW_SYM(ModuleUnload, "cuModuleUnload", NULL, 0),
    TW_SYM(ModuleGetFunction, "cuModuleGetFunction", NULL, 0),
    TW_SYM(FuncSetAttribute, "cuFuncSetAttribute", NULL, 0),
    TW_SYM(OccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
           NULL, 1),
    TW_SYM(LaunchKernel, "cuLaunchKernel", NULL, 0),
    TW_SYM(StreamCreate, "cuStreamCreate", NULL, 0),
    TW_SYM(StreamDestroy, "cuStreamDestroy_v2", NULL, 0),
    TW_SYM(StreamSynchronize, "cuStreamSynchronize", NULL, 0),
    TW_SYM(EventCreate, "cuEventCreate", NULL, 0),
    TW_SYM(EventDestroy, "cuEventDestroy_v2", NULL, 0),
    TW_SYM(EventRecord, "cuEventRecord", NULL, 0),
    TW_SYM(EventSynchronize, "cuEventSynchronize", NULL, 0),
    /* CUDA 13 renamed the entry point; older drivers only have the first version */
    TW_SYM(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime", 0),
    TW_SYM(ModuleGetGlobal, "cuModuleGetGlobal_v2", NULL, 0),
    TW_SYM(MemAllocHost, "cuMemAllocHost_v2", NULL, 0),
    TW_SYM(MemFreeHost, "cuMemFreeHost", NULL, 0),
    TW_SYM(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", NULL, 1),
    TW_SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL, 0),
    TW_SYM(EventQuery, "cuEventQuery", NULL, 0),
    TW_SYM(StreamWaitEvent, "cuStreamWaitEvent", NULL, 0),
    TW_SYM(PointerGetAttributes, "cuPointerGetAttributes", NULL, 1),
    TW_SYM(LaunchKernelEx, "cuLaunchKernelEx", NULL, 1),
    TW_SYM(TensorMapEncodeTiled, "cuTensorMapEncodeTiled", NULL, 1),
    TW_SYM(StreamIsCapturing, "cuStreamIsCapturing", NULL, 1),
    TW_SYM(StreamGetCaptureInfo, "cuStreamGetCaptureInfo", NULL, 1),
    TW_SYM(StreamBeginCapture, "cuStreamBeginCapture_v2", NULL, 1),
    TW_SYM(StreamEndCapture, "cuStreamEndCapture", NULL, 1),
    TW_SYM(GraphInstantiate, "cuGraphInstantiateWithFlags", NULL, 1),
    TW_SYM(GraphLaunch, "cuGraphLaunch", NULL, 1),
    TW_SYM(GraphExecDestroy, "cuGraphExecDestroy", NULL, 1),
    TW_SYM(GraphDestroy, "cuGraphDestroy", NULL, 1),
};
#undef TW_SYM

tw_cu_api tw_cu;
static pthread_once_t tw_cu_once = PTHREAD_ONCE_INIT;
static twell_status tw_cu_load_status = TWELL_ERR_INTERNAL;
static char tw_cu_load_msg[512];
static atomic_int tw_cu_ready; /* set once the table is filled and cuInit succeeded */

static void tw_cu_do_load(void) {
    /* RTLD_LOCAL keeps the driver's symbols out of the global namespace; never closed: the
     * process may hold device memory until exit. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(tw_cu_load_msg, sizeof tw_cu_load_msg,
                 "dlopen libcuda.so.1: %s (no NVIDIA driver on this machine)", e ? e : "failed");
        tw_cu_load_status = TWELL_ERR_NOT_FOUND;
        return;
    }
    tw_cu_api api;
    memset(&api, 0, sizeof api);
    for (size_t i = 0; i < sizeof tw_cu_syms / sizeof tw_cu_syms[0]; i++) {
        const tw_cu_sym *s = &tw_cu_syms[i];
        void *p = dlsym(h, s->names[0]);
        if (!p && s->names[1])
            p = dlsym(h, s->names[1]);
        if (!p && !s->optional) {
            snprintf(tw_cu_load_msg, sizeof tw_cu_load_msg,
                     "dlsym %s: not in libcuda.so.1 (driver too old)", s->names[0]);
            tw_cu_load_status = TWELL_ERR_NOT_FOUND;
            return;
        }
        /* POSIX guarantees data and function pointers share a representation; memcpy avoids
         * the object-to-function pointer cast ISO C does not define. */
        memcpy((char *)&api + s->offset, &p, sizeof p);
    }
    tw_CUresult r = api.Init(0);
    if (r != TW_CUDA_SUCCESS) {
        const char *name = NULL;
        if (api.GetErrorName(r, &name) != TW_CUDA_SUCCESS || !name)
            name = tw_cu_result_name(r);
        snprintf(tw_cu_load_msg, sizeof tw_cu_load_msg, "cuInit: %s (%d)", name, r);
        tw_cu_load_status = r == TW_CUDA_ERROR_NO_DEVICE ? TWELL_ERR_NO_DEVICE : TWELL_ERR_CUDA;
        return;
    }
    tw_cu = api;
    tw_cu_load_status = TWELL_OK;
    atomic_store(&tw_cu_ready, 1);
}

int tw_cu_loaded(void) { return atomic_load(&tw_cu_ready); }

twell_status tw_cu_load(twell_ctx *ctx) {
    pthread_once(&tw_cu_once, tw_cu_do_load);
    if (tw_cu_load_status != TWELL_OK)
        return tw_error(ctx, tw_cu_load_status, "%s", tw_cu_load_msg);
    return TWELL_OK;
}
