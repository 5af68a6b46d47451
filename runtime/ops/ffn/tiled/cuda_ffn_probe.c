/*
 * cuda_ffn_probe.c — the sparse inference path's test controls (test_control.h's TW_TC_FFN_*),
 * compiled into the test library only: a bucket's module, a forced module (the tuner's
 * tw_cuda_ffn_force) or kernel, pinned capacities, the flag words, modules, workspace and needs,
 * the heavy-row route's knob and rows, the portable row kernel compiled from any thread.
 */
#include "cuda_ffn_int.h"
#include "cuda_ffn_ws.h"

#include "jit.h"
#include "op_plan.h"
#include "test_control.h"

#include <string.h>

static tw_ffn *tw_plan_ffn(const twell_plan *plan) {
    const tw_cuda_plan *cp = tw_op_plan(plan);
    return cp ? cp->ffn : NULL;
}

static twell_status tw_tc_enter(twell_plan *plan, tw_ffn **f, tw_cu_scope *sc) {
    *f = tw_plan_ffn(plan);
    return tw_ffn_enter(plan, *f, sc);
}

/* Forces a kernel choice (ROWS needs the tiled module: TWELL_ERR_UNSUPPORTED without it; GENERIC
 * compiles ffn_rows now if the plan does not have it). Synchronises the device. */
static twell_status tw_cuda_ffn_set_kernel(twell_plan *plan, tw_ffn_kernel k) {
    tw_ffn *f;
    tw_cu_scope sc;
    TW_TRY(tw_tc_enter(plan, &f, &sc));
    twell_status st = TWELL_OK;
    if (k == TW_FFN_ROWS && !f->tiled)
        st = tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED,
                      "ffn_infer: the row kernel of ffn_fused is not loaded for this plan");
    else if (k == TW_FFN_GENERIC && !f->generic)
        st = tw_ffn_load_generic(plan, f);
    if (st == TWELL_OK)
        f->probe.kernel = k;
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

/* Resolves the tiled module for M's bucket, as the plan's first call of that bucket does (once per
 * bucket, then memoised): the stored winner of (ffn_infer, shape, bucket, device) when there is
 * one (its module loaded now; compiled only if the cache lost the cubin), else the default loaded
 * at plan creation. When the context has options.tune_on_first_use, a bucket without a record
 * is tuned first (tw_tune_gpu, 20 s budget, synchronises the device). Never fails: a problem is
 * logged and the bucket keeps the default. *out (may be NULL) receives the bucket's
 * configuration (zeroed for a plan without the tiled kernels). Enters the context itself. */
static void tw_cuda_ffn_prepare(twell_plan *plan, size_t M, tw_ffn_cfg *out) {
    tw_ffn *f = tw_plan_ffn(plan);
    if (out)
        memset(out, 0, sizeof *out);
    if (!f || !f->tiled)
        return;
    tw_cu_scope sc;
    if (tw_cu_enter(plan->ctx, &sc) != TWELL_OK)
        return;
    tw_ffn_tk *tk = tw_ffn_module_for(plan, f, M, 0, f->tune_on_first_use);
    if (out)
        *out = tk->cfg;
    tw_cu_leave(plan->ctx, &sc);
}

/* Pins the pair and overflow capacities (pair slots; overflowing row-tiles, also used as the
 * overflowing-row capacity; both 0: back to automatic sizing, keeping the buffers). Reallocates
 * after synchronising the device. Used to exercise the fallback. */
static twell_status tw_cuda_ffn_set_capacity(twell_plan *plan, size_t pair_cap, size_t ovf_cap) {
    tw_ffn *f;
    tw_cu_scope sc;
    TW_TRY(tw_tc_enter(plan, &f, &sc));
    twell_status st = TWELL_OK;
    if (pair_cap == 0 && ovf_cap == 0) {
        f->probe.pinned = 0;
        for (size_t i = 0; i < f->ntk; i++) /* the next call measures again */
            f->tk[i].probed = 0;
        if (f->forced)
            f->forced->probed = 0;
    } else if (!tw_ffn_set_pairs(plan, f, pair_cap) || !tw_ffn_set_ovf(plan, f, ovf_cap, ovf_cap)) {
        st = tw_error(plan->ctx, TWELL_ERR_NO_MEMORY, "ffn_infer: cannot allocate the workspace");
    } else {
        f->probe.pinned = 1;
    }
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

/* 1 if the plan has the tiled pipeline; modules loaded so far (default + tuned tiled modules,
 * + ffn_rows); device bytes of the workspace; calls that synchronised to size it (probes). 0 for
 * a non-CUDA plan. */
static int tw_cuda_ffn_tiled(const twell_plan *plan) {
    const tw_ffn *f = tw_plan_ffn(plan);
    return f ? f->tiled : 0;
}

static int tw_cuda_ffn_modules(const twell_plan *plan) {
    const tw_ffn *f = tw_plan_ffn(plan);
    return f ? f->modules : 0;
}

static size_t tw_cuda_ffn_workspace_bytes(const twell_plan *plan) {
    const tw_ffn *f = tw_plan_ffn(plan);
    if (!f)
        return 0;
    return tw_ffn_ws_bytes(plan, f);
}

static int tw_cuda_ffn_probes(const twell_plan *plan) {
    const tw_ffn *f = tw_plan_ffn(plan);
    return f ? f->probes : 0;
}

/* The accumulated needs (device copy, after a device synchronisation) and the growth counts. */
static twell_status tw_cuda_ffn_needs(twell_plan *plan, uint32_t acc[4], int grows[2]) {
    tw_ffn *f;
    tw_cu_scope sc;
    memset(acc, 0, 16);
    grows[0] = grows[1] = 0;
    TW_TRY(tw_tc_enter(plan, &f, &sc));
    /* the device first: cuMemcpyDtoH orders only against the legacy stream's work, and the
     * plan's calls may run on a non-blocking stream */
    twell_status st = tw_cuda_synchronize(plan->ctx);
    if (st == TWELL_OK)
        st = tw_cuda_memcpy_dtoh(plan->ctx, acc, f->acc, 16);
    grows[0] = f->grows[0];
    grows[1] = f->grows[1];
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

/* The forced kernel's name: -1 when unknown. */
static int tw_ffn_kernel_parse(const char *name) {
    static const char *const names[] = {"auto", "rows", "generic"}; /* TW_FFN_AUTO .. GENERIC */
    for (int k = TW_FFN_AUTO; k <= TW_FFN_GENERIC; k++)
        if (name && !strcmp(name, names[k]))
            return k;
    return -1;
}

twell_status tw_ffn_test_control(int op, va_list ap) {
    if (op == TW_TC_FFN_COMPILE_ROWS) {
        const twell_ctx *parent = va_arg(ap, const twell_ctx *);
        const twell_shape *s = va_arg(ap, const twell_shape *);
        char *err = va_arg(ap, char *);
        size_t errlen = va_arg(ap, size_t);
        if (!parent || !parent->cuda || !s)
            return TWELL_ERR_INVALID_ARG;
        tw_param prm[TW_FFN_ROWS_NPARAMS];
        size_t np = tw_ffn_rows_params(s, prm);
        tw_cubin cubin;
        twell_status st = tw_jit_cubin_detached(parent, "ffn_rows", prm, np, parent->cuda->arch,
                                                &cubin, err, errlen);
        if (st == TWELL_OK)
            tw_cubin_free(&cubin);
        return st;
    }
    if (op == TW_TC_FFN_CHUNK_ROWS) {
        *va_arg(ap, size_t *) = TW_FFN_CHUNK;
        return TWELL_OK;
    }
    twell_plan *plan = va_arg(ap, twell_plan *);
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    switch (op) {
    case TW_TC_FFN_PREPARE: {
        size_t M = va_arg(ap, size_t);
        tw_ffn_cfg *out = va_arg(ap, tw_ffn_cfg *);
        if (!tw_plan_ffn(plan))
            return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "ffn_infer: not a CUDA plan");
        tw_cuda_ffn_prepare(plan, M, out);
        return TWELL_OK;
    }
    case TW_TC_FFN_FORCE:
        return tw_cuda_ffn_force(plan, tw_plan_ffn(plan), va_arg(ap, tw_ffn_tk *));
    case TW_TC_FFN_SET_KERNEL: {
        const char *name = va_arg(ap, const char *);
        int k = tw_ffn_kernel_parse(name);
        if (k < 0)
            return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG,
                            "ffn_infer: kernel '%s' is not auto, rows or generic",
                            name ? name : "(null)");
        return tw_cuda_ffn_set_kernel(plan, (tw_ffn_kernel)k);
    }
    case TW_TC_FFN_SET_CAPACITY: {
        size_t pair_cap = va_arg(ap, size_t);
        size_t ovf_cap = va_arg(ap, size_t);
        return tw_cuda_ffn_set_capacity(plan, pair_cap, ovf_cap);
    }
    case TW_TC_FFN_FLAGS:
        return tw_cuda_ffn_flags(plan, tw_plan_ffn(plan), va_arg(ap, uint32_t *));
    case TW_TC_FFN_TILED:
        *va_arg(ap, int *) = tw_cuda_ffn_tiled(plan);
        return TWELL_OK;
    case TW_TC_FFN_MODULES:
        *va_arg(ap, int *) = tw_cuda_ffn_modules(plan);
        return TWELL_OK;
    case TW_TC_FFN_WORKSPACE_BYTES:
        *va_arg(ap, size_t *) = tw_cuda_ffn_workspace_bytes(plan);
        return TWELL_OK;
    case TW_TC_FFN_PROBES:
        *va_arg(ap, int *) = tw_cuda_ffn_probes(plan);
        return TWELL_OK;
    case TW_TC_FFN_SET_HEAVY: {
        long long knob = va_arg(ap, long long);
        tw_ffn *f = tw_plan_ffn(plan);
        if (!f)
            return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "ffn_infer: not a CUDA plan");
        tw_ffn_heavy_set(f->heavy, knob);
        return TWELL_OK;
    }
    case TW_TC_FFN_HEAVY_ROWS: {
        int *rows = va_arg(ap, int *);
        tw_ffn *f;
        tw_cu_scope sc;
        *rows = 0;
        TW_TRY(tw_tc_enter(plan, &f, &sc));
        twell_status st = tw_ffn_heavy_rows(plan, f->heavy, rows);
        tw_cu_leave(plan->ctx, &sc);
        return st;
    }
    case TW_TC_FFN_NEEDS: {
        uint32_t *acc = va_arg(ap, uint32_t *);
        int *grows = va_arg(ap, int *);
        if (!tw_plan_ffn(plan)) { /* probe of a plan not on CUDA: neutral values */
            memset(acc, 0, 16);
            grows[0] = grows[1] = 0;
            return TWELL_OK;
        }
        return tw_cuda_ffn_needs(plan, acc, grows);
    }
    }
    return TWELL_ERR_INVALID_ARG;
}
