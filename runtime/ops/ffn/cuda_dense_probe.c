/*
 * cuda_dense_probe.c — the dense route's and AUTO's test controls (test_control.h's
 * TW_TC_DENSE_*), compiled into the test library only: the path last run, AUTO's estimate,
 * threshold and route and their knobs, counts, workspace probes and poisoning, the cuBLASLt
 * gate-pack's range and reuse.
 */
#include "cuda_dense_probe.h"

#include "cuda_dense_int.h"
#include "ffn_route.h"

#include "cuda_small.h"
#include "dense_split.h"
#include "gate_pack_lt.h"
#include "op_plan.h"
#include "test_control.h"

#include <string.h>

static tw_dense *tw_plan_dense(const twell_plan *plan) {
    const tw_cuda_plan *cp = tw_op_plan(plan);
    return cp ? cp->dense : NULL;
}

static int tw_cuda_dense_available(twell_plan *plan) {
    tw_dense *d = tw_plan_dense(plan);
    return d ? tw_dense_ready(plan, d) : 0;
}

static twell_path tw_cuda_dense_last_path(const twell_plan *plan) {
    const tw_dense *d = tw_plan_dense(plan);
    return d ? d->last : TWELL_PATH_AUTO;
}

static double tw_cuda_dense_estimate(const twell_plan *plan) {
    const tw_dense *d = tw_plan_dense(plan);
    return d ? d->est : -1.0;
}

static double tw_cuda_dense_threshold(const twell_plan *plan, size_t M) {
    const tw_dense *d = tw_plan_dense(plan);
    return d ? tw_dense_thr(d, &plan->shape, M) : -1.0;
}

static const char *tw_cuda_dense_route(const twell_plan *plan, size_t M) {
    const tw_dense *d = tw_plan_dense(plan);
    return d ? tw_ffn_route_name(
                   tw_dense_route(plan, d, M, d->available == 1,
                                  tw_small_ffn_ok(plan, tw_op_plan(plan)->small, M, 1, 0), NULL))
             : NULL;
}

/* A knob's dense state: TWELL_ERR_UNSUPPORTED when plan is not a CUDA plan. */
static twell_status tw_dense_knob(twell_plan *plan, tw_dense **d) {
    *d = tw_plan_dense(plan);
    return *d ? TWELL_OK
              : tw_error(plan ? plan->ctx : NULL, TWELL_ERR_UNSUPPORTED,
                         "ffn_infer: not a CUDA plan");
}

static twell_status tw_cuda_dense_set_threshold(twell_plan *plan, double nnz_per_row) {
    tw_dense *d;
    TW_TRY(tw_dense_knob(plan, &d));
    d->probe.threshold = nnz_per_row > 0.0 ? nnz_per_row : 0.0;
    return TWELL_OK;
}

static twell_status tw_cuda_dense_set_min_rows(twell_plan *plan, size_t rows) {
    tw_dense *d;
    TW_TRY(tw_dense_knob(plan, &d));
    d->probe.min_rows = rows;
    return TWELL_OK;
}

static twell_status tw_cuda_dense_counts(twell_plan *plan, uint64_t out[2]) {
    tw_dense *d = tw_plan_dense(plan);
    out[0] = out[1] = 0;
    if (!d)
        return tw_error(plan ? plan->ctx : NULL, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: not a CUDA plan");
    if (!d->counted)
        return TWELL_OK;
    TW_TRY(tw_cuda_synchronize(plan->ctx));
    if (d->last_in_host) {
        memcpy(out, d->hstats + 2u * d->last_slot, 16u);
        return TWELL_OK;
    }
    return tw_cuda_memcpy_dtoh(plan->ctx, out, d->dstats + 2u * d->last_slot, 16u);
}

static int tw_cuda_dense_grow_syncs(const twell_plan *plan) {
    const tw_dense *d = tw_plan_dense(plan);
    return d ? d->grow_syncs : 0;
}

static size_t tw_cuda_dense_workspace_bytes(const twell_plan *plan) {
    const tw_dense *d = tw_plan_dense(plan);
    if (!d)
        return 0;
    size_t n = (size_t)plan->shape.N;
    return ((d->u ? 4u * d->rows : 0) + (d->h ? 2u * d->rows : 0) + (d->g ? 2u * d->rows : 0)) * n;
}

static unsigned long tw_cuda_dense_calls(const twell_plan *plan, twell_path path) {
    const tw_dense *d = tw_plan_dense(plan);
    if (!d || (int)path < 0 || (int)path > 2)
        return 0;
    return d->calls[path];
}

static twell_status tw_cuda_dense_poison(twell_plan *plan, uint16_t pattern) {
    tw_dense *d;
    TW_TRY(tw_dense_knob(plan, &d));
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    uint32_t v = (uint32_t)pattern << 16 | pattern;
    TW_TRY(tw_cuda_synchronize(ctx));
    if (d->u) /* the 32-bit pattern v is a NaN as a float when pattern is a 16-bit NaN */
        TW_TRY(tw_cuda_memset_d32(ctx, d->u, v, d->rows * s->N, NULL));
    if (d->h)
        TW_TRY(tw_cuda_memset_d32(ctx, d->h, v, d->rows * s->N / 2u, NULL));
    if (d->g)
        TW_TRY(tw_cuda_memset_d32(ctx, d->g, v, d->rows * s->N / 2u, NULL));
    return tw_cuda_synchronize(ctx);
}

twell_status tw_dense_test_control(int op, va_list ap) {
    if (op == TW_TC_DENSE_GEMM_SMEM) { /* the heavy-row route's gemm_sm90 */
        *va_arg(ap, unsigned *) = TW_DG_SMEM;
        return TWELL_OK;
    }
    if (op == TW_TC_DENSE_SPLIT_GEMM_SMEM) {
        *va_arg(ap, unsigned *) = TW_DG_SPLIT_SMEM;
        return TWELL_OK;
    }
    twell_plan *plan = va_arg(ap, twell_plan *);
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    switch (op) {
    case TW_TC_DENSE_AVAILABLE:
        *va_arg(ap, int *) = tw_cuda_dense_available(plan);
        return TWELL_OK;
    case TW_TC_DENSE_LAST_PATH:
        *va_arg(ap, twell_path *) = tw_cuda_dense_last_path(plan);
        return TWELL_OK;
    case TW_TC_DENSE_ESTIMATE:
        *va_arg(ap, double *) = tw_cuda_dense_estimate(plan);
        return TWELL_OK;
    case TW_TC_DENSE_THRESHOLD: {
        size_t M = va_arg(ap, size_t);
        *va_arg(ap, double *) = tw_cuda_dense_threshold(plan, M);
        return TWELL_OK;
    }
    case TW_TC_DENSE_ROUTE: {
        size_t M = va_arg(ap, size_t);
        *va_arg(ap, const char **) = tw_cuda_dense_route(plan, M);
        return TWELL_OK;
    }
    case TW_TC_DENSE_SET_THRESHOLD:
        return tw_cuda_dense_set_threshold(plan, va_arg(ap, double));
    case TW_TC_DENSE_SET_MIN_ROWS:
        return tw_cuda_dense_set_min_rows(plan, va_arg(ap, size_t));
    case TW_TC_DENSE_COUNTS:
        return tw_cuda_dense_counts(plan, va_arg(ap, uint64_t *));
    case TW_TC_DENSE_GROW_SYNCS:
        *va_arg(ap, int *) = tw_cuda_dense_grow_syncs(plan);
        return TWELL_OK;
    case TW_TC_DENSE_WORKSPACE_BYTES:
        *va_arg(ap, size_t *) = tw_cuda_dense_workspace_bytes(plan);
        return TWELL_OK;
    case TW_TC_DENSE_CALLS: {
        twell_path path = (twell_path)va_arg(ap, int); /* an enum argument arrives as an int */
        *va_arg(ap, unsigned long *) = tw_cuda_dense_calls(plan, path);
        return TWELL_OK;
    }
    case TW_TC_DENSE_POISON:
        return tw_cuda_dense_poison(plan, (uint16_t)va_arg(ap, unsigned));
    case TW_TC_DENSE_SET_LT_GATE: {
        tw_dense *d;
        TW_TRY(tw_dense_knob(plan, &d));
        d->probe.lt_lo = va_arg(ap, size_t);
        d->probe.lt_hi = va_arg(ap, size_t);
        return TWELL_OK;
    }
    case TW_TC_DENSE_LAST_GATE_LT: {
        tw_dense *d;
        TW_TRY(tw_dense_knob(plan, &d));
        *va_arg(ap, int *) = tw_gate_lt_last(d->lt);
        return TWELL_OK;
    }
    case TW_TC_DENSE_GATE_REUSED: {
        tw_dense *d;
        TW_TRY(tw_dense_knob(plan, &d));
        unsigned long *out = va_arg(ap, unsigned long *);
        out[0] = d->gate_reused;
        out[1] = d->gate_computed;
        return TWELL_OK;
    }
    }
    return TWELL_ERR_INVALID_ARG;
}
