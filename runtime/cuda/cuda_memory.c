/*
 * cuda_memory.c — device and pinned host memory, copies and fills, streams, events and CUDA graph
 * capture, each entering the context's device context itself, over the driver's function table
 * (cuda_driver_api.h). Its test probes (fault injection, the counts of live blocks and host
 * waits) are cuda_memory_probe.h's.
 */
#include "cuda_driver.h"
#include "cuda_driver_api.h"
#include "cuda_memory_probe.h"

#include <stdlib.h>
#include <string.h>

enum { TW_CU_STREAM_NON_BLOCKING = 1, TW_CU_EVENT_DEFAULT = 0 };

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

/* The test library counts host waits and live blocks and may fail an allocation on purpose
 * (cuda_memory_probe.h); the shipped one does none of it. */
#define TW_HOST_WAIT() TW_PROBE_DO(atomic_fetch_add(&tw_probe_host_waits, 1ul))
#define TW_LIVE_ALLOC(d) TW_PROBE_DO(atomic_fetch_add(&tw_probe_live_allocs, (d)))
#define TW_FAULT_NOW() TW_PROBE_OR(tw_probe_fault_now(), 0)

twell_status tw_cuda_malloc(twell_ctx *ctx, size_t bytes, void **dptr) {
    *dptr = NULL;
    tw_CUdeviceptr d = 0;
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st != TWELL_OK)
        return st;
    tw_CUresult r =
        TW_FAULT_NOW() ? TW_CUDA_ERROR_OUT_OF_MEMORY : TW_CU(ctx, MemAlloc)(&d, bytes ? bytes : 1);
    tw_cu_leave(ctx, &sc);
    if (r != TW_CUDA_SUCCESS) {
        st = tw_cu_fail(ctx, "cuMemAlloc_v2", r);
        return tw_error(ctx, st, "%s (%zu bytes)", tw_errmsg(ctx), bytes);
    }
    TW_LIVE_ALLOC(1);
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
        TW_LIVE_ALLOC(-1);
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
    TW_HOST_WAIT();
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
    TW_HOST_WAIT();
    TW_CU_SCOPED(ctx, "cuCtxSynchronize", r_ = TW_CU(ctx, CtxSynchronize)());
}

twell_status tw_cuda_stream_synchronize(twell_ctx *ctx, twell_stream stream) {
    TW_HOST_WAIT();
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
    TW_HOST_WAIT();
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
    tw_CUresult r = TW_FAULT_NOW() ? TW_CUDA_ERROR_OUT_OF_MEMORY
                                   : TW_CU(ctx, MemAllocHost)(&p, bytes ? bytes : 1);
    tw_cu_leave(ctx, &sc);
    if (r != TW_CUDA_SUCCESS) {
        st = tw_cu_fail(ctx, "cuMemAllocHost_v2", r);
        return tw_error(ctx, st, "%s (%zu bytes)", tw_errmsg(ctx), bytes);
    }
    TW_LIVE_ALLOC(1);
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
        TW_LIVE_ALLOC(-1);
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
    TW_HOST_WAIT();
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
