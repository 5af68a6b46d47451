/* cuda_device.c — the CUDA backend's device: open/close for a context and pointer kinds. */
#include "cuda_blaslt.h"
#include "cuda_driver.h"

#include <stdio.h>
#include <stdlib.h>

twell_status tw_cuda_open(twell_ctx *ctx, int device) {
    tw_cuda *d = calloc(1, sizeof *d);
    if (!d)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tw_cuda_open: out of memory");
    twell_status st = tw_cu_device_open(ctx, device, d);
    if (st != TWELL_OK) {
        tw_cu_device_close(d);
        free(d);
        return st;
    }
    ctx->cuda = d;
    snprintf(ctx->device_name, sizeof ctx->device_name, "cuda:%d %s (%s, %d SMs)", device, d->name,
             d->arch, d->sm_count);
    tw_log(ctx, TWELL_LOG_INFO, "twell: %s, driver %d.%d, %zu MiB, L2 %d KiB", ctx->device_name,
           d->driver_version / 1000, d->driver_version % 1000 / 10, d->total_mem >> 20,
           d->l2_bytes >> 10);
    return TWELL_OK;
}

void tw_cuda_close(twell_ctx *ctx) {
    if (!ctx || !ctx->cuda)
        return;
    tw_cu_scope sc;
    int in = tw_cu_enter(ctx, &sc) == TWELL_OK;
    tw_lt_ctx_release(ctx);
    if (in)
        tw_cu_leave(ctx, &sc);
    tw_cu_device_close(ctx->cuda);
    free(ctx->cuda);
    ctx->cuda = NULL;
}

int tw_cuda_pointer_kind(twell_ctx *ctx, const void *p) {
    if (!p)
        return -1;
    int kind = -1, ordinal = -1;
    if (!ctx || !ctx->cuda) {
        /* CPU backend: ask the driver only if this process loaded it already (a CPU context must
         * not pay for cuInit); unknown otherwise. */
        if (!tw_cu_loaded() || tw_cu_pointer_info(NULL, p, &kind, &ordinal) != TWELL_OK)
            return -1;
        return kind;
    }
    tw_cu_scope sc;
    if (tw_cu_enter(ctx, &sc) != TWELL_OK)
        return -1;
    twell_status st = tw_cu_pointer_info(ctx, p, &kind, &ordinal); /* counted, no message */
    tw_cu_leave(ctx, &sc);
    if (st != TWELL_OK)
        return -1;
    /* Memory of another device is neither ours nor host memory. Managed memory reports the
     * ordinal it was created on; it is usable from ours. */
    if (kind == 1 && ordinal >= 0 && ordinal != ctx->cuda->ordinal)
        return -1;
    return kind;
}
