/*
 * cuda_small_probe.c — the small-batch path's test controls (test_control.h's TW_TC_SMALL_*),
 * compiled into the test library only: its mode and kernel knobs, which kernels the last calls
 * ran, its workspace and poisoning.
 */
#include "cuda_small_int.h"

#include "op_plan.h"
#include "small_gate.h"
#include "test_control.h"

#include <string.h>

static tw_small *tw_plan_small(const twell_plan *plan) {
    const tw_cuda_plan *cp = tw_op_plan(plan);
    return cp ? cp->small : NULL;
}

static twell_status tw_cuda_small_set_mode(twell_plan *plan, tw_small_mode mode) {
    tw_small *sm = tw_plan_small(plan);
    if (!sm)
        return tw_error(plan ? plan->ctx : NULL, TWELL_ERR_UNSUPPORTED,
                        "small path: not a CUDA plan");
    if (mode != TW_SMALL_AUTO && mode != TW_SMALL_OFF && mode != TW_SMALL_FORCE)
        return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG, "small path: mode %d unknown", (int)mode);
    sm->probe.mode = mode;
    return TWELL_OK;
}

static int tw_cuda_small_available(const twell_plan *plan) {
    const tw_small *sm = tw_plan_small(plan);
    return sm ? sm->available : 0;
}

static int tw_cuda_small_last_ffn(const twell_plan *plan) {
    const tw_small *sm = tw_plan_small(plan);
    return sm ? sm->last_ran[1] : 0;
}

static int tw_cuda_small_last_gate(const twell_plan *plan) {
    const tw_small *sm = tw_plan_small(plan);
    return sm ? sm->last_ran[0] : 0;
}

static size_t tw_cuda_small_rows(const twell_plan *plan) {
    const tw_small *sm = tw_plan_small(plan);
    return sm ? sm->rows : 0;
}

static size_t tw_cuda_small_workspace_bytes(const twell_plan *plan) {
    const tw_small *sm = tw_plan_small(plan);
    return sm ? sm->bytes : 0;
}

static twell_status tw_cuda_small_poison(twell_plan *plan, uint32_t pattern) {
    tw_small *sm = tw_plan_small(plan);
    if (!sm)
        return tw_error(plan ? plan->ctx : NULL, TWELL_ERR_UNSUPPORTED,
                        "small path: not a CUDA plan");
    twell_ctx *ctx = plan->ctx;
    TW_TRY(tw_cuda_synchronize(ctx));
    if (!sm->ws)
        return TWELL_OK;
    tw_small_layout L;
    tw_small_layout_of(&plan->shape, sm->rows, &L);
    TW_TRY(tw_cuda_memset_d32(ctx, sm->ws, pattern, L.tcnt / 4u, NULL));
    TW_TRY(tw_cuda_memset_d32(ctx, sm->hbuf, pattern, (L.bytes - L.hbuf) / 4u, NULL));
    return tw_cuda_synchronize(ctx);
}

twell_status tw_small_test_control(int op, va_list ap) {
    twell_plan *plan = va_arg(ap, twell_plan *);
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    switch (op) {
    case TW_TC_SMALL_SET_MODE: {
        const char *m = va_arg(ap, const char *);
        tw_small_mode mode = !m                    ? (tw_small_mode)-1
                             : !strcmp(m, "auto")  ? TW_SMALL_AUTO
                             : !strcmp(m, "off")   ? TW_SMALL_OFF
                             : !strcmp(m, "force") ? TW_SMALL_FORCE
                                                   : (tw_small_mode)-1;
        return tw_cuda_small_set_mode(plan, mode);
    }
    case TW_TC_SMALL_AVAILABLE:
        *va_arg(ap, int *) = tw_cuda_small_available(plan);
        return TWELL_OK;
    case TW_TC_SMALL_LAST_GATE:
        *va_arg(ap, int *) = tw_cuda_small_last_gate(plan);
        return TWELL_OK;
    case TW_TC_SMALL_LAST_FFN:
        *va_arg(ap, int *) = tw_cuda_small_last_ffn(plan);
        return TWELL_OK;
    case TW_TC_SMALL_ROWS:
        *va_arg(ap, size_t *) = tw_cuda_small_rows(plan);
        return TWELL_OK;
    case TW_TC_SMALL_WORKSPACE_BYTES:
        *va_arg(ap, size_t *) = tw_cuda_small_workspace_bytes(plan);
        return TWELL_OK;
    case TW_TC_SMALL_POISON:
        return tw_cuda_small_poison(plan, va_arg(ap, unsigned));
    case TW_TC_SMALL_SET_GATE: {
        tw_small *sm = tw_plan_small(plan);
        const char *name = va_arg(ap, const char *);
        int wn = 0;
        if (!sm)
            return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "small path: not a CUDA plan");
        if (tw_sgate_spec_parse(name, &wn) != 0)
            return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG, "small path: gate kernel %s unknown",
                            name ? name : "(null)");
        sm->probe.gate_wn = wn;
        return TWELL_OK;
    }
    case TW_TC_SMALL_SET_FUSED_PLAIN: {
        tw_small *sm = tw_plan_small(plan);
        if (!sm)
            return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "small path: not a CUDA plan");
        sm->probe.fused_plain = va_arg(ap, int) != 0;
        return TWELL_OK;
    }
    case TW_TC_SMALL_SET_UPDOWN: {
        tw_small *sm = tw_plan_small(plan);
        if (!sm)
            return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "small path: not a CUDA plan");
        sm->probe.updown = va_arg(ap, int) != 0;
        return TWELL_OK;
    }
    case TW_TC_SMALL_LAST_FUSED_KERNEL: {
        const tw_small *sm = tw_plan_small(plan);
        const char **out = va_arg(ap, const char **);
        static const char *const names[] = {"", "fused", "fused_cl", "row"};
        *out = sm ? names[sm->fused_ran] : "";
        return TWELL_OK;
    }
    case TW_TC_SMALL_LAST_GATE_KERNEL: {
        const tw_small *sm = tw_plan_small(plan);
        const char **out = va_arg(ap, const char **);
        *out = sm && sm->gate_launched ? TW_SGATE_KERNEL : "";
        return TWELL_OK;
    }
    }
    return TWELL_ERR_INVALID_ARG;
}
