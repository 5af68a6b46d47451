/*
 * cuda_ffn_tune.c — how an ffn_infer plan consults the autotuner: the stored winner of
 * (ffn_infer, shape, M bucket, device) as a tile configuration the plan can load, tuned on first
 * use when TWELL_TUNE=1 asked for it. The same policy as gate-pack (cuda_gate_pack.c):
 * plans load the default at creation, look a bucket's record up once at its first call, and never
 * tune unless asked, because a library call that may take seconds must be requested.
 */
#include "cuda_ffn.h"

#include "ffn_tuner.h"

typedef struct tw_ffn_take_arg {
    twell_plan *plan;
    tw_ffn_cfg *out;
} tw_ffn_take_arg;

/* The stored winner as a tile configuration this plan can load. */
static int tw_ffn_take(const tw_tune_config *cfg, void *arg) {
    const tw_ffn_take_arg *t = arg;
    return tw_ffn_cfg_from_tune(cfg, t->out) != 0 ||
           tw_ffn_cfg_check(t->out, &t->plan->shape, t->plan->ctx->cuda, NULL, 0) != 0;
}

int tw_ffn_winner(twell_plan *plan, size_t M, int tune_now, tw_ffn_cfg *out) {
    tw_ffn_take_arg t = {plan, out};
    return tw_tune_op_winner(plan->ctx, &tw_ffn_tune_op, "ffn_fused", &plan->shape, M, tune_now, "",
                             tw_ffn_take, &t);
}
