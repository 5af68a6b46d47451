/*
 * cuda_ffn_tune.c — how an ffn_infer plan consults the autotuner: the stored winner of
 * (ffn_infer, shape, M bucket, device) as a tile configuration the plan can load, tuned on first
 * use when TWELL_TUNE=1 asked for it. The same policy as gate-pack (runtime/cuda_gate_pack.c):
 * plans load the default at creation, look a bucket's record up once at its first call, and never
 * tune unless asked, because a library call that may take seconds must be requested.
 */
#include "cuda_ffn.h"

#include "candidates.h"
#include "gpu_tune.h"
#include "tuner.h"

#include <stdio.h>
#include <string.h>

int tw_ffn_winner(twell_plan *plan, size_t M, int tune_now, tw_ffn_cfg *out) {
    twell_ctx *ctx = plan->ctx;
    tw_tune_device dev;
    if (tw_tune_device_of(ctx, &dev) != TWELL_OK)
        return -1;
    tw_tune_problem p;
    memset(&p, 0, sizeof p);
    snprintf(p.op, sizeof p.op, "ffn_infer");
    p.shape = plan->shape;
    p.M = tw_tune_m_bucket(M);
    tw_tune_record rec;
    twell_status st = tw_tune_store_load(ctx, &p, &dev, &rec);
    if (st != TWELL_OK && st != TWELL_ERR_NOT_FOUND)
        return -1;
    if (st == TWELL_ERR_NOT_FOUND) {
        const tw_tune_space *sp = tw_tune_space_runnable(p.op, &p, &dev);
        if (!tune_now || !sp || strcmp(sp->kernel, "ffn_fused") != 0)
            return -1;
        tw_tune_options o = tw_tune_options_default();
        tw_tune_choice ch;
        tw_log(ctx, TWELL_LOG_INFO, "ffn_infer: TWELL_TUNE=1: tuning K=%u N=%u M bucket %zu",
               p.shape.K, p.shape.N, p.M);
        if (tw_tune_gpu(ctx, p.op, &plan->shape, M, &o, 0, &ch) != TWELL_OK) {
            tw_log(ctx, TWELL_LOG_WARN, "ffn_infer: tuning failed, using the default: %s",
                   twell_ctx_errmsg(ctx));
            return -1;
        }
        rec.config = ch.config;
    }
    char canon[TW_TUNE_CANON_MAX];
    tw_tune_config_canon(&rec.config, canon, sizeof canon);
    const tw_tune_space *sp = tw_tune_space_by_kernel(rec.config.kernel);
    if (!sp || strcmp(sp->op, p.op) != 0 || !tw_tune_space_accepts(sp, &p, &dev, &rec.config) ||
        tw_ffn_cfg_from_tune(&rec.config, out) != 0 ||
        tw_ffn_cfg_check(out, &plan->shape, ctx->cuda, NULL, 0) != 0) {
        tw_log(ctx, TWELL_LOG_INFO,
               "ffn_infer: stored config %s does not apply to this plan (M bucket %zu); default "
               "used",
               canon, p.M);
        return -1;
    }
    return 0;
}
