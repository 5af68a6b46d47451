/*
 * tune_registry.c — the list of the ops' tuning drivers (tune_registry.h) and the name-based
 * calls over it. Adding a tunable op: give it a tw_tune_op in its folder and list it here.
 */
#include "tune_registry.h"

#include "ffn_tuner.h"
#include "gate_pack_tuner.h"
#include "internal.h"

#include <math.h>
#include <string.h>

static const tw_tune_op *const tw_ops[] = {&tw_gate_pack_tune_op, &tw_ffn_tune_op, NULL};
/* Their names, in the same order. */
static const char *const tw_op_names[] = {TW_GATE_PACK_OP, TW_FFN_INFER_OP, NULL};
_Static_assert(sizeof tw_ops / sizeof tw_ops[0] == sizeof tw_op_names / sizeof tw_op_names[0],
               "a name per op");

const char *const *tw_tune_ops(void) { return tw_op_names; }

const tw_tune_op *tw_tune_op_find(const char *op) {
    for (size_t i = 0; op && tw_ops[i]; i++)
        if (!strcmp(tw_ops[i]->op, op))
            return tw_ops[i];
    return NULL;
}

size_t tw_tune_spaces_for(const char *op, const tw_tune_space **out, size_t cap) {
    const tw_tune_op *o = tw_tune_op_find(op);
    size_t count = o ? o->nspaces : 0;
    for (size_t i = 0; i < count && i < cap; i++)
        out[i] = o->spaces[i];
    return count;
}

const tw_tune_space *tw_tune_space_pick(const char *op, const tw_tune_problem *p,
                                        const tw_tune_device *d) {
    return tw_tune_op_pick(tw_tune_op_find(op), p, d);
}

/* The op owning kernel's space, or NULL. */
static const tw_tune_op *tw_op_of_kernel(const char *kernel, const tw_tune_space **sp) {
    for (size_t i = 0; kernel && tw_ops[i]; i++)
        if ((*sp = tw_tune_op_space(tw_ops[i], kernel)) != NULL)
            return tw_ops[i];
    *sp = NULL;
    return NULL;
}

const tw_tune_space *tw_tune_space_by_kernel(const char *kernel) {
    const tw_tune_space *sp;
    (void)tw_op_of_kernel(kernel, &sp);
    return sp;
}

int tw_tune_kernel_runnable(const twell_ctx *ctx, const char *kernel) {
    const tw_tune_space *sp;
    const tw_tune_op *o = tw_op_of_kernel(kernel, &sp);
    return o ? tw_tune_op_runnable(ctx, o, sp) : 0;
}

const tw_tune_space *tw_tune_space_runnable(const twell_ctx *ctx, const char *op,
                                            const tw_tune_problem *p, const tw_tune_device *d) {
    return tw_tune_op_pick_runnable(ctx, tw_tune_op_find(op), p, d);
}

/* NULL with the engine's message for a name no op has (after the device check a known op gets
 * first, so a CPU context answers the same for both). */
static const tw_tune_op *tw_op_named(twell_ctx *ctx, const char *op, twell_status *st) {
    const tw_tune_op *o = tw_tune_op_find(op);
    *st = TWELL_OK;
    if (!o) {
        tw_tune_device d;
        *st = tw_tune_device_of(ctx, &d);
        if (*st == TWELL_OK)
            *st = tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                           "tune: no kernel for %s that this build can launch on %s", op ? op : "",
                           d.arch);
    }
    return o;
}

twell_status tw_tune_gpu_ex(twell_ctx *ctx, const char *op, const char *kernel,
                            const twell_shape *shape, size_t M, const tw_tune_options *opt,
                            int retune, tw_tune_choice *out) {
    twell_status st;
    const tw_tune_op *o = tw_op_named(ctx, op, &st);
    if (!o) {
        memset(out, 0, sizeof *out);
        out->ms = out->default_ms = NAN;
        return st;
    }
    return tw_tune_op_gpu(ctx, o, kernel, shape, M, opt, retune, out);
}

twell_status tw_tune_gpu(twell_ctx *ctx, const char *op, const twell_shape *shape, size_t M,
                         const tw_tune_options *opt, int retune, tw_tune_choice *out) {
    return tw_tune_gpu_ex(ctx, op, NULL, shape, M, opt, retune, out);
}

twell_status tw_tune_gpu_exhaustive(twell_ctx *ctx, const char *op, const char *kernel,
                                    const twell_shape *shape, size_t M, const tw_tune_options *opt,
                                    tw_tune_config **cands, tw_tune_result *out) {
    twell_status st;
    const tw_tune_op *o = tw_op_named(ctx, op, &st);
    if (!o) {
        *cands = NULL;
        memset(out, 0, sizeof *out);
        return st;
    }
    return tw_tune_op_exhaustive(ctx, o, kernel, shape, M, opt, cands, out);
}
