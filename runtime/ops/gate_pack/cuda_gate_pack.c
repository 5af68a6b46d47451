/*
 * cuda_gate_pack.c — gate-pack on CUDA, the per-plan state: the variant (AUTO or forced) of the
 * tiled kernels (cuda_gate_pack_tiled.h) and, for each M bucket, the autotuner's stored winner.
 *
 * How a plan consults the tuner. A plan is created without M, but configurations are tuned per M
 * bucket (the power of two ≥ M). So:
 *  - plan creation loads the DEFAULT configuration of the chosen variant (as before tuning
 *    existed): a plan is ready at once and a first call is never slowed by tuning;
 *  - the first call of each bucket looks the tuning record up once (tw_tune_store_load: memory,
 *    then disk) and, when a winner for this plan's variant is stored, loads its module (the
 *    cubin was published by whoever tuned; a lost cubin is recompiled); the choice is memoised
 *    in a per-bucket table, so later calls of that bucket do no lookup, allocation or compile;
 *  - tuning itself happens when asked: ahead of time (`twell tune`), by twell_plan_tune (which
 *    tunes a bucket, then resolves it again), or, opt-in, on a bucket's first call when the
 *    context has options.tune_on_first_use (budget TW_TUNE_DEFAULT_BUDGET_S, synchronising the
 *    device). Default off: a library call that may take seconds must be asked for.
 */
#include "cuda_gate_pack.h"

#include "candidates.h"
#include "gate_pack_tuner.h"
#include "m_bucket.h"
#include "op_plan.h"
#include "tuner.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The default plus distinct tuned configurations one plan may hold; beyond that a bucket keeps
 * the default (a space has few configurations that win anywhere). */
#define TW_GP_MAX_KERNELS 16

struct tw_gate_pack {
    tw_gp_variant variant;
    int modules_loaded;
    int tune_on_first_use;             /* the context's options.tune_on_first_use */
    size_t nk;                         /* kernels loaded; k[0] is the default configuration */
    tw_gp_kernel k[TW_GP_MAX_KERNELS]; /* distinct configurations */
    signed char bucket[TW_M_BUCKETS];  /* index into k per M bucket; -1: not resolved yet */
};

/* ---- configurations ---- */

static int tw_gp_cfg_equal(const tw_gp_cfg *a, const tw_gp_cfg *b) {
    if (a->variant != b->variant)
        return 0;
    if (a->variant == TW_GP_SM90)
        return a->bk == b->bk && a->stages == b->stages && a->cluster == b->cluster;
    return a->bm == b->bm && a->threads == b->threads;
}

/* ---- per-plan state ---- */

twell_status tw_cuda_gate_pack_init(twell_plan *plan, tw_gp_variant want, tw_gate_pack **out) {
    *out = NULL;
    twell_ctx *ctx = plan->ctx;
    tw_gate_pack *gp = calloc(1, sizeof *gp);
    if (!gp)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "gate_pack: out of memory for the plan state");
    memset(gp->bucket, -1, sizeof gp->bucket);
    gp->tune_on_first_use = ctx->tune_on_first_use;
    twell_status st = TWELL_OK;
    int sm90_ok = tw_sm90_gate_pack_supports(&plan->shape, ctx->cuda);
    if (want == TW_GP_SM90 && !sm90_ok) {
        free(gp);
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "gate_pack: the sm90 variant does not support this shape on %s (K=%u, "
                        "N=%u, T=%u, C=%u)",
                        ctx->cuda->arch, plan->shape.K, plan->shape.N, plan->shape.T,
                        plan->shape.C);
    }
    if ((want == TW_GP_AUTO || want == TW_GP_SM90) && sm90_ok) {
        tw_gp_cfg d = tw_gp_cfg_default(TW_GP_SM90);
        st = tw_gp_kernel_load(ctx, &plan->shape, &d, &gp->k[0]);
        if (st == TWELL_OK) {
            gp->variant = TW_GP_SM90;
            gp->nk = 1;
            gp->modules_loaded = 1;
            *out = gp;
            return TWELL_OK;
        }
        if (st != TWELL_ERR_UNSUPPORTED || want == TW_GP_SM90) {
            free(gp);
            return st;
        }
        tw_log(ctx, TWELL_LOG_INFO, "gate_pack: sm90 variant unavailable (%s); using SIMT",
               tw_errmsg(ctx));
    }
    gp->variant = TW_GP_SIMT;
    tw_gp_cfg d = tw_gp_cfg_default(TW_GP_SIMT);
    st = tw_gp_kernel_load(ctx, &plan->shape, &d, &gp->k[0]);
    if (st != TWELL_OK) {
        free(gp);
        return st;
    }
    gp->nk = 1;
    gp->modules_loaded = 1;
    *out = gp;
    return TWELL_OK;
}

void tw_cuda_gate_pack_release(twell_plan *plan, tw_gate_pack *gp) {
    (void)plan;
    if (!gp)
        return;
    for (size_t i = 0; i < gp->nk; i++)
        tw_gp_kernel_unload(&gp->k[i]);
    free(gp);
}

static int tw_gp_take(const tw_tune_config *tc, void *cfg) { return tw_gp_cfg_from_tune(tc, cfg); }

/* The template of the plan's variant: the kernel whose tuning records it can use. */
static const char *tw_gp_kernel_of(const tw_gate_pack *gp) {
    return gp->variant == TW_GP_SM90 ? "gate_pack_sm90" : "gate_pack_simt";
}

/* The stored winner's configuration for M's bucket, tuned first when tune_now asks
 * (tw_tune_op_winner). 0 with *cfg set, or -1 (no usable winner: the bucket keeps the default). */
static int tw_gp_winner(twell_plan *plan, tw_gate_pack *gp, size_t M, int tune_now,
                        tw_gp_cfg *cfg) {
    return tw_tune_op_winner(plan->ctx, &tw_gate_pack_tune_op, tw_gp_kernel_of(gp), &plan->shape, M,
                             tune_now, tw_gp_variant_name(gp->variant), tw_gp_take, cfg);
}

/* Resolves M's bucket (once; memoised) as tw_cuda_gate_pack_prepare says, tuning a bucket without
 * a record first when tune_now is set. */
static void tw_gp_resolve(twell_plan *plan, tw_gate_pack *gp, size_t M, int tune_now) {
    unsigned b = tw_m_bucket_log2(M);
    if (gp->bucket[b] < 0) {
        size_t pick = 0; /* the default unless a usable winner says otherwise */
        tw_gp_cfg want;
        /* Module loads need the context current: free when the op's call made it so, and makes
         * a direct call (tests, warm-up) safe. */
        tw_cu_scope sc;
        int entered = tw_cu_enter(plan->ctx, &sc) == TWELL_OK;
        if (entered && tw_gp_winner(plan, gp, M, tune_now, &want) == 0) {
            size_t have = SIZE_MAX; /* a kernel of that configuration loaded already */
            for (size_t i = 0; i < gp->nk && have == SIZE_MAX; i++)
                if (tw_gp_cfg_equal(&gp->k[i].cfg, &want))
                    have = i;
            if (have != SIZE_MAX) {
                pick = have;
            } else if (gp->nk == TW_GP_MAX_KERNELS) {
                tw_log(plan->ctx, TWELL_LOG_INFO,
                       "gate_pack: %d kernels loaded already; the default serves M=%zu",
                       TW_GP_MAX_KERNELS, M);
            } else if (tw_gp_kernel_load(plan->ctx, &plan->shape, &want, &gp->k[gp->nk]) !=
                       TWELL_OK) {
                tw_log(plan->ctx, TWELL_LOG_WARN,
                       "gate_pack: tuned kernel failed to load, using the default: %s",
                       tw_errmsg(plan->ctx));
            } else {
                pick = gp->nk++;
                gp->modules_loaded++;
            }
        }
        if (entered)
            tw_cu_leave(plan->ctx, &sc);
        gp->bucket[b] = (signed char)pick;
    }
}

void tw_cuda_gate_pack_prepare(twell_plan *plan, tw_gate_pack *gp, size_t M, tw_gp_cfg *cfg) {
    tw_gp_resolve(plan, gp, M, gp->tune_on_first_use);
    if (cfg)
        *cfg = gp->k[(size_t)gp->bucket[tw_m_bucket_log2(M)]].cfg;
}

twell_status tw_cuda_gate_pack_tune(twell_plan *plan, tw_gate_pack *gp, size_t M, unsigned flags) {
    if (!(flags & TWELL_TUNE_STORED_ONLY)) {
        twell_status st = tw_tune_op_ensure(plan->ctx, &tw_gate_pack_tune_op, tw_gp_kernel_of(gp),
                                            &plan->shape, M, (flags & TWELL_TUNE_RETUNE) != 0);
        if (st != TWELL_OK)
            return st;
    }
    gp->bucket[tw_m_bucket_log2(M)] = -1; /* look the record up again: it may be new */
    tw_gp_resolve(plan, gp, M, 0);
    return TWELL_OK;
}

twell_status tw_cuda_gate_pack_launch(twell_plan *plan, tw_gate_pack *gp, size_t M, const void *x,
                                      const void *w, uint32_t *packed, twell_stream stream) {
    unsigned b = tw_m_bucket_log2(M);
    size_t k = 0; /* the default */
    if (gp->bucket[b] < 0) {
        /* resolving may load a module or tune: not while the stream is captured (the bucket then
         * runs the default, not memoised; twell_plan_reserve resolves buckets beforehand) */
        int capturing = 0;
        twell_status st = tw_cuda_stream_capturing(plan->ctx, stream, &capturing);
        if (st != TWELL_OK)
            return st;
        if (!capturing)
            tw_cuda_gate_pack_prepare(plan, gp, M, NULL);
    }
    if (gp->bucket[b] >= 0)
        k = (size_t)gp->bucket[b];
    return tw_gp_kernel_launch(plan->ctx, &gp->k[k], &plan->shape, M, x, w, packed, stream);
}

tw_gp_variant tw_cuda_gate_pack_variant(const tw_gate_pack *gp) {
    return gp ? gp->variant : TW_GP_AUTO;
}

int tw_cuda_gate_pack_modules_loaded(const tw_gate_pack *gp) { return gp ? gp->modules_loaded : 0; }
