/*
 * cuda_driver.h — the CUDA driver API, loaded at run time (dlopen "libcuda.so.1"), behind small
 * wrappers that map every driver error to a twell_status. cuda_driver_load.c (loading) and
 * cuda_driver.c (the wrappers) are the only files that touch the driver; the build never needs
 * cuda.h.
 */
#ifndef TWELL_CUDA_DRIVER_H
#define TWELL_CUDA_DRIVER_H

#include "internal.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the few driver types and constants we use (values from the driver API reference) ---- */

typedef int tw_CUresult; /* CUresult: 0 = CUDA_SUCCESS */
typedef int tw_CUdevice;
typedef uint64_t tw_CUdeviceptr; /* device addresses are 64-bit under the ABI we load */
typedef struct tw_CUctx_st *tw_CUcontext;
typedef struct tw_CUmod_st *tw_CUmodule;
typedef struct tw_CUfunc_st *tw_CUfunction;
typedef struct tw_CUstream_st *tw_CUstream;
typedef struct tw_CUevent_st *tw_CUevent;
typedef struct tw_CUgraph_st *tw_CUgraph;
typedef struct tw_CUgraphExec_st *tw_CUgraphExec;

enum {
    TW_CUDA_SUCCESS = 0,
    TW_CUDA_ERROR_INVALID_VALUE = 1,
    TW_CUDA_ERROR_OUT_OF_MEMORY = 2,
    TW_CUDA_ERROR_NOT_INITIALIZED = 3,
    TW_CUDA_ERROR_NO_DEVICE = 100,
    TW_CUDA_ERROR_INVALID_DEVICE = 101,
    TW_CUDA_ERROR_INVALID_IMAGE = 200,
    TW_CUDA_ERROR_NOT_FOUND = 500,
    TW_CUDA_ERROR_NOT_READY = 600,
    TW_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    TW_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    TW_CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906
};

/* CUtensorMap: 128 opaque bytes, 64-byte aligned at least (the driver asks for 64; the header
 * declares 128). Passed by value to kernels as a __grid_constant__ parameter. */
typedef struct tw_CUtensorMap {
    _Alignas(128) uint64_t opaque[16];
} tw_CUtensorMap;

enum { /* CUtensorMapDataType */
       TW_CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
       TW_CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,
       TW_CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
       TW_CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
       TW_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9
};
enum { TW_CU_TENSOR_MAP_INTERLEAVE_NONE = 0 };
enum { /* CUtensorMapSwizzle */
       TW_CU_TENSOR_MAP_SWIZZLE_NONE = 0,
       TW_CU_TENSOR_MAP_SWIZZLE_32B = 1,
       TW_CU_TENSOR_MAP_SWIZZLE_64B = 2,
       TW_CU_TENSOR_MAP_SWIZZLE_128B = 3
};
enum { /* CUtensorMapL2promotion */
       TW_CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
       TW_CU_TENSOR_MAP_L2_PROMOTION_L2_64B = 1,
       TW_CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
       TW_CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3
};
enum { TW_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 };

enum { /* CUfunction_attribute values we set or read */
       TW_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
       TW_CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
       TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
       TW_CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
};

/* ---- the device a context runs on (ctx->cuda) ---- */

#define TW_CU_TRACE 64u /* driver call names a context keeps (tw_cuda.trace) */

struct tw_cuda {
    int ordinal;
    tw_CUdevice dev;
    tw_CUcontext cu; /* the device's primary context, retained by us */
    int cc_major, cc_minor;
    int sm_count;
    int l2_bytes;
    int smem_optin;     /* max dynamic shared memory per block after opting in, bytes */
    int driver_version; /* e.g. 13000 */
    size_t total_mem;
    char arch[16]; /* "sm_90a" for CC 9.0, else "sm_XY": the NVRTC/cubin target */
    char name[96]; /* the device's marketing name (cuDeviceGetName) */
    int pdl;       /* launches asking for it overlap their predecessor (tw_cu_launch_cfg.pdl) */
    /* Driver calls made through the wrappers on this context (TW_TC_CUDA_DRIVER_CALLS) and the
     * names of the last TW_CU_TRACE of them, slot (calls - 1) % TW_CU_TRACE the newest
     * (TW_TC_CUDA_DRIVER_TRACE): the tests' view of an op's host path. The context's threading
     * rule applies (one thread at a time), so plain counters. */
    unsigned long calls;
    const char *trace[TW_CU_TRACE];
    /* The event tw_cuda_event_query last found complete; it stays complete until it is recorded
     * again through tw_cuda_event_record (or destroyed), so asking again needs no driver call. */
    tw_CUevent done_ev;
    void *lt; /* the context's cuBLASLt handle (cuda_blaslt.c), created on first use */
};

/* ---- driver loading and error mapping ---- */

/* Loads libcuda.so.1 and calls cuInit once per process (thread-safe). TWELL_ERR_NOT_FOUND when
 * the library or a required symbol is missing, TWELL_ERR_NO_DEVICE when cuInit reports no
 * device, TWELL_ERR_CUDA otherwise; the message says which. ctx may be NULL. */
twell_status tw_cu_load(twell_ctx *ctx);

/* 1 if an earlier tw_cu_load succeeded in this process (never loads anything itself). */
int tw_cu_loaded(void);

/* The status a driver result maps to: OK, NO_MEMORY for CUDA_ERROR_OUT_OF_MEMORY, NO_DEVICE for
 * CUDA_ERROR_NO_DEVICE / INVALID_DEVICE, CUDA for everything else. Pure. */
twell_status tw_cu_status_of(tw_CUresult r);

/* "CUDA_ERROR_INVALID_IMAGE" etc.: the driver's name when it is loaded, else from a built-in
 * table, else "CUDA_ERROR_UNKNOWN_CODE". Static string. */
const char *tw_cu_result_name(tw_CUresult r);

/* Maps r (non-zero) to a status and records "<call>: <NAME> (<code>)[: detail]" on ctx. Returns
 * TWELL_OK for r == 0 without touching ctx. */
twell_status tw_cu_fail(twell_ctx *ctx, const char *call, tw_CUresult r);

/* ---- device and context (used by cuda_device.c) ---- */

/* Opens device `ordinal`: retains its primary context and fills *dev. */
twell_status tw_cu_device_open(twell_ctx *ctx, int ordinal, tw_cuda *dev);
/* Releases the primary context retained by tw_cu_device_open. */
void tw_cu_device_close(tw_cuda *dev);
/* Number of devices (0 when the driver is loaded but sees none). */
twell_status tw_cu_device_count(twell_ctx *ctx, int *count);

/* Makes dev's context current on this thread for the length of a call, restoring the caller's
 * afterwards (cuCtxGetCurrent, and cuCtxPushCurrent / cuCtxPopCurrent when another context or none
 * is current). Scopes nest: inside a scope of the same device context on this thread (a
 * thread-local record kept by enter and leave), enter and leave make no driver call at all, so an
 * op that enters once at its top pays for one check however many wrappers it calls. Every
 * successful enter must be matched by a leave on the same thread, innermost first. */
typedef struct tw_cu_scope {
    int pushed;       /* this scope pushed the context: leave pops it */
    int nested;       /* inside an outer scope of the same context: leave only counts down */
    void *saved_cu;   /* the thread's record before this scope (restored by leave) */
    unsigned saved_n; /* its depth */
} tw_cu_scope;
twell_status tw_cu_enter(twell_ctx *ctx, tw_cu_scope *scope);
void tw_cu_leave(twell_ctx *ctx, tw_cu_scope *scope);

/* What the driver knows of address p: *kind 1 device memory (or managed) of device *ordinal,
 * 0 host memory (pageable memory the driver has never seen included), -1 unknown. One
 * cuPointerGetAttributes call for the memory type, managed flag and ordinal (three
 * cuPointerGetAttribute calls on a driver without it, or when it fails). Counted on ctx (may be
 * NULL); records no message (a failure returns TWELL_ERR_CUDA, *kind -1). Context current. */
twell_status tw_cu_pointer_info(twell_ctx *ctx, const void *p, int *kind, int *ordinal);

/* ---- modules and launches (context must be current: inside tw_cu_enter/leave) ---- */

/* The loaded-module step every op takes after compiling: loads the cubin `image` and resolves
 * the kernels names[0..n) into fns[0..n) (a NULL name leaves its entry NULL: a kernel that
 * variant of the module lacks). On failure nothing stays loaded (*mod and fns[0..n) NULL) and
 * ctx's message is the failing driver call's: "cuModuleLoadData: <error> (<code>)" or
 * "cuModuleGetFunction: <error> (<code>) (kernel "<name>")". Unload with tw_cu_module_unload. */
twell_status tw_cu_module_open(twell_ctx *ctx, const void *image, const char *const *names,
                               size_t n, tw_CUmodule *mod, tw_CUfunction *fns);
/* Its two halves, for tests of the driver layer: one image loaded, one kernel resolved. */
twell_status tw_cu_module_load(twell_ctx *ctx, const void *image, tw_CUmodule *out);
void tw_cu_module_unload(tw_CUmodule mod); /* NULL is a no-op */
twell_status tw_cu_module_function(twell_ctx *ctx, tw_CUmodule mod, const char *name,
                                   tw_CUfunction *out);
/* The device address and size of mod's __device__ variable `name` (cuModuleGetGlobal); read it
 * with tw_cuda_memcpy_dtoh. *dptr NULL, *bytes 0 on failure. */
twell_status tw_cu_module_global(twell_ctx *ctx, tw_CUmodule mod, const char *name, void **dptr,
                                 size_t *bytes);
twell_status tw_cu_func_set_attribute(twell_ctx *ctx, tw_CUfunction fn, int attr, int value);
/* How many blocks of `block` threads and `smem` dynamic shared bytes of fn one SM holds at once
 * (cuOccupancyMaxActiveBlocksPerMultiprocessor): the grid of a kernel whose warps take work
 * from a queue. *out = 0 (and TWELL_OK) where the driver lacks the call; 0 on failure. */
twell_status tw_cu_func_occupancy(twell_ctx *ctx, tw_CUfunction fn, int block, size_t smem,
                                  int *out);

/* Launch geometry. cluster {0,0,0} or {1,1,1} and no PDL: a plain cuLaunchKernel; otherwise
 * cuLaunchKernelEx with a cluster-dimension attribute (sm_90+) and/or, when pdl is set and the
 * device allows it (ctx->cuda->pdl), programmatic stream serialization: the kernel may start while
 * the stream's previous kernel is still running. Set pdl only for kernels that execute
 * `griddepcontrol.wait` in every thread before touching memory a predecessor reads or writes
 * (the rule: templates/ffn/ffn_fused.cu.lua, "PROGRAMMATIC DEPENDENT LAUNCH"). */
typedef struct tw_cu_launch_cfg {
    unsigned grid[3];
    unsigned block[3];
    unsigned cluster[3];
    unsigned smem; /* dynamic shared memory, bytes */
    unsigned pdl;  /* 1: programmatic dependent launch when the device allows it */
} tw_cu_launch_cfg;

/* Whether a device of compute capability cc_major can use programmatic dependent launch with
 * this driver: sm_90+ and cuLaunchKernelEx present (the driver must be loaded). A context uses it
 * when this holds and its options want it (twell_ctx_options.pdl): tw_cuda.pdl. */
int tw_cu_pdl_supported(int cc_major);

/* Enqueues fn on stream (NULL: the legacy default stream). args as for cuLaunchKernel: one
 * pointer per kernel parameter, pointing at its value. No host allocation. */
twell_status tw_cu_launch(twell_ctx *ctx, tw_CUfunction fn, const tw_cu_launch_cfg *cfg,
                          twell_stream stream, void **args);

/* tw_cu_launch of a grid of (gx ? gx : 1) x gy x 1 blocks of `block` x 1 x 1 threads, `smem`
 * dynamic shared bytes, no cluster; pdl as in tw_cu_launch_cfg. */
twell_status tw_cu_launch_grid(twell_ctx *ctx, tw_CUfunction fn, size_t gx, unsigned gy,
                               unsigned block, unsigned smem, unsigned pdl, twell_stream stream,
                               void **args);

/* cuTensorMapEncodeTiled (CUDA 12+ drivers; TWELL_ERR_UNSUPPORTED on older ones). Host-only,
 * allocation-free: safe to call on every launch. Arguments as in the driver API. */
twell_status tw_cu_tensor_map_tiled(twell_ctx *ctx, tw_CUtensorMap *map, int data_type,
                                    unsigned rank, const void *global, const uint64_t *dims,
                                    const uint64_t *strides_bytes, const uint32_t *box,
                                    const uint32_t *elem_strides, int interleave, int swizzle,
                                    int l2_promotion, int oob_fill);

/* ---- device memory, copies, streams and events (internal helpers for tests, demo, bench).
 * These enter ctx's device context themselves; pointers are device addresses as void *. ---- */

twell_status tw_cuda_malloc(twell_ctx *ctx, size_t bytes, void **dptr); /* *dptr NULL on error */
void tw_cuda_free(twell_ctx *ctx, void *dptr);                          /* NULL is a no-op */
/* Device buffers a captured CUDA graph may still use. An op that replaces a buffer its captured
 * calls were recorded with must not free it (the graph would replay into freed memory): it hands
 * it to tw_cuda_keep_free, which frees it at once when nothing was captured (captured == 0) and
 * otherwise keeps it until tw_cuda_keep_release (the op's release: the plan's graphs must not be
 * replayed after the plan is destroyed). If the list cannot grow (host memory), the buffer is
 * leaked rather than freed, with a warning. release frees every kept buffer; NULL pointers are
 * ignored. */
typedef struct tw_cuda_keep {
    void **p;
    size_t n, cap;
} tw_cuda_keep;
void tw_cuda_keep_free(twell_ctx *ctx, tw_cuda_keep *keep, int captured, void *dptr);
void tw_cuda_keep_release(twell_ctx *ctx, tw_cuda_keep *keep);
twell_status tw_cuda_memcpy_htod(twell_ctx *ctx, void *dst, const void *src, size_t bytes);
twell_status tw_cuda_memcpy_dtoh(twell_ctx *ctx, void *dst, const void *src, size_t bytes);
twell_status tw_cuda_memcpy_dtod(twell_ctx *ctx, void *dst, const void *src, size_t bytes);
/* Asynchronous fills on stream: `count` 32-bit words / bytes. */
twell_status tw_cuda_memset_d32(twell_ctx *ctx, void *dst, uint32_t value, size_t count,
                                twell_stream stream);
twell_status tw_cuda_memset_d8(twell_ctx *ctx, void *dst, uint8_t value, size_t count,
                               twell_stream stream);
/* Waits for all work of ctx's device context; the status of a kernel fault shows up here. */
twell_status tw_cuda_synchronize(twell_ctx *ctx);
twell_status tw_cuda_stream_synchronize(twell_ctx *ctx, twell_stream stream);
twell_status tw_cuda_stream_create(twell_ctx *ctx, twell_stream *out); /* non-blocking stream */
void tw_cuda_stream_destroy(twell_ctx *ctx, twell_stream stream);
twell_status tw_cuda_mem_info(twell_ctx *ctx, size_t *free_bytes, size_t *total_bytes);

typedef struct tw_CUevent_st *tw_cuda_event;
twell_status tw_cuda_event_create(twell_ctx *ctx, tw_cuda_event *out);
void tw_cuda_event_destroy(twell_ctx *ctx, tw_cuda_event ev);
twell_status tw_cuda_event_record(twell_ctx *ctx, tw_cuda_event ev, twell_stream stream);
/* Milliseconds between two recorded events; waits for `end` first. */
twell_status tw_cuda_event_elapsed(twell_ctx *ctx, tw_cuda_event start, tw_cuda_event end,
                                   float *ms);

/* Page-locked host memory (cuMemAllocHost): the target of asynchronous device-to-host copies.
 * *out NULL on failure; free with tw_cuda_host_free (NULL is a no-op). */
twell_status tw_cuda_host_alloc(twell_ctx *ctx, size_t bytes, void **out);
void tw_cuda_host_free(twell_ctx *ctx, void *p);
/* The device address of page-locked memory from tw_cuda_host_alloc (cuMemHostGetDevicePointer):
 * kernels may write it directly; the host reads what they wrote once an event recorded after
 * them has completed. TWELL_ERR_UNSUPPORTED without the entry point; *dptr NULL on failure. */
twell_status tw_cuda_host_device_ptr(twell_ctx *ctx, void *host, void **dptr);
/* Enqueues a device-to-host copy on stream; dst must be page-locked (tw_cuda_host_alloc) for the
 * copy to be asynchronous. dst is valid once an event recorded after it has completed. */
twell_status tw_cuda_memcpy_dtoh_async(twell_ctx *ctx, void *dst, const void *src, size_t bytes,
                                       twell_stream stream);
/* Non-blocking: *done 1 when the work ev captured has completed (or ev was never recorded), 0 when
 * it is still pending (CUDA_ERROR_NOT_READY is not an error here). An event found complete is
 * remembered (tw_cuda.done_ev) until tw_cuda_event_record records it again or it is destroyed: a
 * repeated query of it makes no driver call. So only query events that are recorded through
 * tw_cuda_event_record alone, never into a graph capture that is replayed later (the library's
 * own events: captured calls record none). */
twell_status tw_cuda_event_query(twell_ctx *ctx, tw_cuda_event ev, int *done);
/* Blocks the host until the work ev captured has completed. */
twell_status tw_cuda_event_synchronize(twell_ctx *ctx, tw_cuda_event ev);
/* Makes later work on stream wait for ev (cuStreamWaitEvent); the host does not wait. */
twell_status tw_cuda_stream_wait_event(twell_ctx *ctx, twell_stream stream, tw_cuda_event ev);

/* ---- stream capture (CUDA graphs) ---- */

/* Whether work enqueued on stream now is being captured into a graph (cuStreamIsCapturing):
 * *capturing 1 when a capture is active (or was invalidated: nothing may be enqueued there
 * either), 0 when not, or when the driver lacks the entry point (no graphs at all). Asking about
 * the legacy default stream (NULL) while a blocking stream of the context is capturing is an error
 * (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT): that stream cannot be used then. Allowed during capture in
 * every capture mode: it neither waits nor allocates. */
twell_status tw_cuda_stream_capturing(twell_ctx *ctx, twell_stream stream, int *capturing);

/* The id of the capture active on stream (cuStreamGetCaptureInfo: unique per capture sequence in
 * the process), 0 when none is active or the driver lacks the call. Allowed during capture. */
twell_status tw_cuda_stream_capture_id(twell_ctx *ctx, twell_stream stream, uint64_t *id);

/* For the tests and the bench: capture work enqueued on stream (not the legacy default stream)
 * into a graph, instantiate it and replay it. mode is the driver's CUstreamCaptureMode: 0 global
 * (while it lasts, any thread's call that could wait, query or allocate invalidates it: what
 * PyTorch's torch.cuda.graph uses by default), 1 thread-local, 2 relaxed. capture_end ends the
 * capture and instantiates the graph (*out NULL on failure, e.g. CUDA_ERROR_STREAM_CAPTURE_
 * INVALIDATED when a call in between was not capturable). TWELL_ERR_UNSUPPORTED when the driver
 * lacks the graph entry points. */
typedef struct tw_CUgraphExec_st *tw_cuda_graph;
twell_status tw_cuda_capture_begin(twell_ctx *ctx, twell_stream stream, int mode);
twell_status tw_cuda_capture_end(twell_ctx *ctx, twell_stream stream, tw_cuda_graph *out);
twell_status tw_cuda_graph_launch(twell_ctx *ctx, tw_cuda_graph g, twell_stream stream);
void tw_cuda_graph_destroy(twell_ctx *ctx, tw_cuda_graph g); /* NULL is a no-op */

#endif /* TWELL_CUDA_DRIVER_H */
