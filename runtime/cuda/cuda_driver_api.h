/*
 * cuda_driver_api.h — the CUDA driver's function table, filled with dlsym by cuda_driver_load.c
 * and called through by the wrappers of cuda_driver.c, cuda_launch.c and cuda_memory.c (the only
 * files that see it), the launch configuration types its entries take, laid out as in the driver
 * ABI, and the wrappers' counted call.
 */
#ifndef TWELL_CUDA_DRIVER_API_H
#define TWELL_CUDA_DRIVER_API_H

#include "cuda_driver.h"

/* cuLaunchKernelEx's configuration, laid out as in the driver ABI (cuda.h 12.x/13.x). */
typedef struct tw_CUlaunchAttribute {
    int id;
    char pad[4];
    union {
        char pad[64];
        uint64_t align_; /* the driver's union holds pointers: 8-byte aligned */
        struct {
            unsigned x, y, z;
        } clusterDim;
        int programmaticStreamSerializationAllowed;
    } value;
} tw_CUlaunchAttribute;

typedef struct tw_CUlaunchConfig {
    unsigned gridDimX, gridDimY, gridDimZ;
    unsigned blockDimX, blockDimY, blockDimZ;
    unsigned sharedMemBytes;
    tw_CUstream hStream;
    tw_CUlaunchAttribute *attrs;
    unsigned numAttrs;
} tw_CUlaunchConfig;

/* The driver entry points we use. Versioned names (_v2) are the ABI the unversioned macros of
 * cuda.h select; the plain (legacy default stream) variants, not _ptsz/_ptds. */
typedef struct tw_cu_api {
    tw_CUresult (*Init)(unsigned);
    tw_CUresult (*DriverGetVersion)(int *);
    tw_CUresult (*GetErrorName)(tw_CUresult, const char **);
    tw_CUresult (*GetErrorString)(tw_CUresult, const char **);
    tw_CUresult (*DeviceGetCount)(int *);
    tw_CUresult (*DeviceGet)(tw_CUdevice *, int);
    tw_CUresult (*DeviceGetName)(char *, int, tw_CUdevice);
    tw_CUresult (*DeviceGetAttribute)(int *, int, tw_CUdevice);
    tw_CUresult (*DeviceTotalMem)(size_t *, tw_CUdevice);
    tw_CUresult (*DevicePrimaryCtxRetain)(tw_CUcontext *, tw_CUdevice);
    tw_CUresult (*DevicePrimaryCtxRelease)(tw_CUdevice);
    tw_CUresult (*CtxGetCurrent)(tw_CUcontext *);
    tw_CUresult (*CtxPushCurrent)(tw_CUcontext);
    tw_CUresult (*CtxPopCurrent)(tw_CUcontext *);
    tw_CUresult (*CtxSynchronize)(void);
    tw_CUresult (*MemAlloc)(tw_CUdeviceptr *, size_t);
    tw_CUresult (*MemFree)(tw_CUdeviceptr);
    tw_CUresult (*MemGetInfo)(size_t *, size_t *);
    tw_CUresult (*MemcpyHtoD)(tw_CUdeviceptr, const void *, size_t);
    tw_CUresult (*MemcpyDtoH)(void *, tw_CUdeviceptr, size_t);
    tw_CUresult (*MemcpyDtoD)(tw_CUdeviceptr, tw_CUdeviceptr, size_t);
    tw_CUresult (*MemsetD32Async)(tw_CUdeviceptr, unsigned, size_t, tw_CUstream);
    tw_CUresult (*MemsetD8Async)(tw_CUdeviceptr, unsigned char, size_t, tw_CUstream);
    tw_CUresult (*PointerGetAttribute)(void *, int, tw_CUdeviceptr);
    tw_CUresult (*ModuleLoadData)(tw_CUmodule *, const void *);
    tw_CUresult (*ModuleUnload)(tw_CUmodule);
    tw_CUresult (*ModuleGetFunction)(tw_CUfunction *, tw_CUmodule, const char *);
    tw_CUresult (*FuncSetAttribute)(tw_CUfunction, int, int);
    /* optional (CUDA 6.5+): resident blocks per SM of a function at a block size */
    tw_CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *, tw_CUfunction, int, size_t);
    tw_CUresult (*LaunchKernel)(tw_CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, unsigned, tw_CUstream, void **, void **);
    tw_CUresult (*StreamCreate)(tw_CUstream *, unsigned);
    tw_CUresult (*StreamDestroy)(tw_CUstream);
    tw_CUresult (*StreamSynchronize)(tw_CUstream);
    tw_CUresult (*EventCreate)(tw_CUevent *, unsigned);
    tw_CUresult (*EventDestroy)(tw_CUevent);
    tw_CUresult (*EventRecord)(tw_CUevent, tw_CUstream);
    tw_CUresult (*EventSynchronize)(tw_CUevent);
    tw_CUresult (*EventElapsedTime)(float *, tw_CUevent, tw_CUevent);
    tw_CUresult (*ModuleGetGlobal)(tw_CUdeviceptr *, size_t *, tw_CUmodule, const char *);
    tw_CUresult (*MemAllocHost)(void **, size_t);
    tw_CUresult (*MemFreeHost)(void *);
    tw_CUresult (*MemHostGetDevicePointer)(tw_CUdeviceptr *, void *, unsigned);
    tw_CUresult (*MemcpyDtoHAsync)(void *, tw_CUdeviceptr, size_t, tw_CUstream);
    tw_CUresult (*EventQuery)(tw_CUevent);
    tw_CUresult (*StreamWaitEvent)(tw_CUstream, tw_CUevent, unsigned);
    /* optional (CUDA 7+): several attributes of one address in one call */
    tw_CUresult (*PointerGetAttributes)(unsigned, int *, void **, tw_CUdeviceptr);
    /* optional: absent from drivers older than CUDA 12 */
    tw_CUresult (*LaunchKernelEx)(const tw_CUlaunchConfig *, tw_CUfunction, void **, void **);
    tw_CUresult (*TensorMapEncodeTiled)(tw_CUtensorMap *, int, uint32_t, void *, const uint64_t *,
                                        const uint64_t *, const uint32_t *, const uint32_t *, int,
                                        int, int, int);
    /* optional: stream capture (CUDA graphs); the library itself only asks whether a stream is
     * capturing, the rest serves the tests and the bench */
    tw_CUresult (*StreamIsCapturing)(tw_CUstream, int *);
    tw_CUresult (*StreamGetCaptureInfo)(tw_CUstream, int *, uint64_t *); /* the 3-argument ABI */
    tw_CUresult (*StreamBeginCapture)(tw_CUstream, int);
    tw_CUresult (*StreamEndCapture)(tw_CUstream, tw_CUgraph *);
    tw_CUresult (*GraphInstantiate)(tw_CUgraphExec *, tw_CUgraph, unsigned long long);
    tw_CUresult (*GraphLaunch)(tw_CUgraphExec, tw_CUstream);
    tw_CUresult (*GraphExecDestroy)(tw_CUgraphExec);
    tw_CUresult (*GraphDestroy)(tw_CUgraph);
} tw_cu_api;

/* The table: filled once by tw_cu_load (cuda_driver_load.c); entries stay NULL until it has
 * succeeded, optional ones also after when the driver lacks them. */
extern tw_cu_api tw_cu;

/* ---- calling through the table (the wrapper files) ---- */

/* Counts one driver call on ctx's device record (tw_cuda.calls and .trace; a ctx that is NULL or
 * not on CUDA yet counts nothing). */
static inline void tw_cu_count(twell_ctx *ctx, const char *name) {
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

#endif
