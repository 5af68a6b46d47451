/*
 * gpu_tune_harness.c — the pieces both device tuners share: synthetic inputs, worker-thread
 * compiles, failure notes and the L2-flushed, event-timed run (see gpu_tune_harness.h).
 */
#include "gpu_tune_harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void tw_gpu_harness_init(tw_gpu_harness *h, twell_ctx *ctx) {
    memset(h, 0, sizeof *h);
    h->ctx = ctx;
    h->flush_bytes = (size_t)(ctx->cuda->l2_bytes > 0 ? ctx->cuda->l2_bytes : 32 << 20) * 2u;
}

void tw_gpu_harness_free(tw_gpu_harness *h, twell_status st) {
    twell_ctx *ctx = h->ctx;
    if (!ctx)
        return;
    tw_cuda_free(ctx, h->flush);
    for (int i = 0; i < 2; i++)
        if (h->ev[i])
            tw_cuda_event_destroy(ctx, h->ev[i]);
    if (st != TWELL_OK && h->first_err[0]) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tw_errmsg(ctx));
        tw_error(ctx, st, "%s; first failure: %s", msg, h->first_err);
    }
    tw_gpu_harness_init(h, ctx);
}

twell_status tw_gpu_harness_synth(twell_ctx *ctx, const twell_shape *s, size_t M, int gated,
                                  tw_synth_ffn **out) {
    tw_synth_params sp = tw_synth_params_default();
    sp.M = M;
    sp.K = s->K;
    sp.N = s->N;
    sp.dtype = s->dtype;
    sp.gated = gated;
    sp.nnz = fmax(1.0, 0.00515 * (double)s->N);
    twell_status st = tw_synth_create(ctx->pool, &sp, out);
    if (st != TWELL_OK)
        return tw_error(ctx, st, "tune: cannot make %zu rows of synthetic data (%s)", M,
                        twell_status_name(st));
    return TWELL_OK;
}

void tw_gpu_harness_note(tw_gpu_harness *h, const tw_tune_config *cfg, const char *what,
                         const char *why) {
    char canon[TW_TUNE_CANON_MAX];
    tw_tune_config_canon(cfg, canon, sizeof canon);
    tw_log(h->ctx, TWELL_LOG_INFO, "tune: %s %s: %.300s", canon, what, why);
    if (!h->first_err[0])
        snprintf(h->first_err, sizeof h->first_err, "%s %s: %.300s", canon, what, why);
}

twell_status tw_gpu_harness_compile(const tw_gpu_harness *h, const char *kernel,
                                    const tw_param *prm, size_t np, tw_cubin *out, char *err,
                                    size_t errlen) {
    return tw_jit_cubin_detached(h->ctx, kernel, prm, np, h->ctx->cuda->arch, out, err, errlen);
}

twell_status tw_gpu_harness_measure(tw_gpu_harness *h, const tw_tune_config *cfg,
                                    twell_status (*prepare)(void *arg),
                                    twell_status (*launch)(void *arg), void *arg, double *ms_out) {
    twell_ctx *ctx = h->ctx;
    float ms = 0.0f;
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st != TWELL_OK)
        return st;
    if ((!prepare || (st = prepare(arg)) == TWELL_OK) &&
        (st = tw_cuda_memset_d32(ctx, h->flush, ++h->salt, h->flush_bytes / 4u, NULL)) ==
            TWELL_OK &&
        (st = tw_cuda_event_record(ctx, h->ev[0], NULL)) == TWELL_OK &&
        (st = launch(arg)) == TWELL_OK &&
        (st = tw_cuda_event_record(ctx, h->ev[1], NULL)) == TWELL_OK)
        st = tw_cuda_event_elapsed(ctx, h->ev[0], h->ev[1], &ms);
    tw_cu_leave(ctx, &sc);
    if (st != TWELL_OK) {
        tw_gpu_harness_note(h, cfg, "failed to launch", tw_errmsg(ctx));
        return st;
    }
    *ms_out = (double)ms;
    return TWELL_OK;
}
