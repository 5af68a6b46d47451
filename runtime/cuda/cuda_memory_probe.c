/*
 * cuda_memory_probe.c — the CUDA layer's test controls (test_control.h's TW_TC_CUDA_*), compiled
 * into the test library only: allocation fault injection, the live blocks and host waits
 * cuda_memory.c counts, a context's driver-call count and trace.
 */
#include "cuda_memory_probe.h"
#include "cuda_driver.h"
#include "test_control.h"

atomic_ulong tw_probe_host_waits;
atomic_long tw_probe_live_allocs;

/* The countdown to the allocation that fails and whether it fired since arming. */
static atomic_long tw_fault_countdown;
static atomic_int tw_fault_fired;

int tw_probe_fault_now(void) {
    long v = atomic_load(&tw_fault_countdown);
    while (v > 0 && !atomic_compare_exchange_weak(&tw_fault_countdown, &v, v - 1)) {
    }
    if (v == 1) {
        atomic_store(&tw_fault_fired, 1);
        return 1;
    }
    return 0;
}

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
        *va_arg(ap, long *) = atomic_load(&tw_probe_live_allocs);
        return TWELL_OK;
    case TW_TC_CUDA_HOST_WAITS:
        *va_arg(ap, unsigned long *) = atomic_load(&tw_probe_host_waits);
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
