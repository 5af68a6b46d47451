/*
 * cuda_gate_pack_probe.c — gate-pack's test controls (test_control.h's TW_TC_GP_*), compiled into
 * the test library only: the variant in use or forced, the modules loaded, a bucket's
 * configuration.
 */
#include "cuda_gate_pack_probe.h"
#include "cuda_gate_pack.h"

#include "cuda_gate_pack_tiled.h"
#include "op_plan.h"
#include "test_control.h"

/* Replaces plan's gate-pack with variant v (AUTO: the normal choice); on failure the plan keeps
 * its kernel. Synchronises the device first: the old module may be in use. */
static twell_status tw_gp_select(twell_plan *plan, tw_cuda_plan *cp, tw_gp_variant v) {
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(plan->ctx, &sc);
    if (st != TWELL_OK)
        return st;
    tw_gate_pack *gp = NULL;
    st = tw_cuda_synchronize(plan->ctx);
    if (st == TWELL_OK)
        st = tw_cuda_gate_pack_init(plan, v, &gp);
    if (st == TWELL_OK) {
        tw_cuda_gate_pack_release(plan, cp->gate_pack);
        cp->gate_pack = gp;
    }
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

twell_status tw_gate_pack_test_control(int op, va_list ap) {
    twell_plan *plan = va_arg(ap, twell_plan *);
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    tw_cuda_plan *cp = tw_op_plan(plan);
    tw_gate_pack *gp = cp ? cp->gate_pack : NULL;
    switch (op) {
    case TW_TC_GP_SELECT: {
        const char *name = va_arg(ap, const char *);
        int v = name ? tw_gp_variant_parse(name) : -1;
        if (v < 0)
            return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG,
                            "gate_pack: variant '%s' is not auto, simt or sm90",
                            name ? name : "(null)");
        if (!cp)
            return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "gate_pack: not a CUDA plan");
        return tw_gp_select(plan, cp, (tw_gp_variant)v);
    }
    case TW_TC_GP_VARIANT:
        *va_arg(ap, const char **) = tw_gp_variant_name(tw_cuda_gate_pack_variant(gp));
        return TWELL_OK;
    case TW_TC_GP_MODULES:
        *va_arg(ap, int *) = tw_cuda_gate_pack_modules_loaded(gp);
        return TWELL_OK;
    case TW_TC_GP_PREPARE: {
        size_t M = va_arg(ap, size_t);
        tw_gp_cfg *cfg = va_arg(ap, tw_gp_cfg *);
        if (!gp)
            return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "gate_pack: not a CUDA plan");
        tw_cuda_gate_pack_prepare(plan, gp, M, cfg);
        return TWELL_OK;
    }
    }
    return TWELL_ERR_INVALID_ARG;
}
