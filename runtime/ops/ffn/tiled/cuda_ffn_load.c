/*
 * cuda_ffn_load.c — twell_ffn_infer on CUDA, set-up side: loading ffn_fused modules in a tile
 * configuration (whose rule is ffn_config.c) and the ffn_rows module, and a plan's creation and
 * release. The launch side is cuda_ffn.c.
 */
#include "cuda_ffn_int.h"

#include "jit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const tw_fn_names[TW_FN_COUNT] = {
    "twell_ffn_prep",   "twell_ffn_scan",     "twell_ffn_build",
    "twell_ffn_ovf_gu", "twell_ffn_ovf_down", "twell_ffn_phase_a",
    "twell_ffn_reduce", "twell_ffn_phase_b",  "twell_ffn_rows"};

size_t tw_ffn_rows_params(const twell_shape *s, tw_param out[TW_FFN_ROWS_NPARAMS]) {
    size_t n = tw_shape_params(s, out);
    out[n++] = (tw_param){"gated", NULL, (long long)s->gated};
    return n;
}

twell_status tw_ffn_load_generic(twell_plan *plan, tw_ffn *f) {
    twell_ctx *ctx = plan->ctx;
    tw_param params[TW_FFN_ROWS_NPARAMS];
    size_t np = tw_ffn_rows_params(&plan->shape, params);
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    twell_status st = tw_jit_cubin(ctx, "ffn_rows", params, np, ctx->cuda->arch, &cubin);
    if (st != TWELL_OK)
        return st;
    static const char *const name = "twell_ffn_rows_generic";
    st = tw_cu_module_open(ctx, cubin.data, &name, 1, &f->gmod, &f->generic);
    tw_cubin_free(&cubin);
    if (st == TWELL_OK)
        f->modules++;
    return st;
}

void tw_ffn_tk_unload(tw_ffn_tk *tk) {
    tw_cu_module_unload(tk->mod);
    memset(tk, 0, sizeof *tk);
}

twell_status tw_ffn_tk_load(twell_ctx *ctx, const twell_shape *s, const tw_ffn_cfg *c,
                            const void *image, tw_ffn_tk *out) {
    const tw_cuda *dev = ctx->cuda;
    uint32_t want[TW_CFG_COUNT];
    char why[192];
    memset(out, 0, sizeof *out);
    if (tw_ffn_cfg_resolve(c, s, dev, want, why, sizeof why) != 0)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED, "ffn_infer: %s", why);
    tw_param params[TW_FFN_NPARAMS];
    (void)tw_ffn_cfg_params(c, s, dev, params);
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    twell_status st = TWELL_OK;
    if (!image) {
        st = tw_jit_cubin(ctx, "ffn_fused", params, TW_FFN_NPARAMS, dev->arch, &cubin);
        if (st != TWELL_OK)
            return st;
        image = cubin.data;
    }
    const char *names[TW_FN_COUNT]; /* phase_a and reduce exist in gated modules only */
    for (int i = 0; i < TW_FN_COUNT; i++)
        names[i] = !s->gated && (i == TW_FN_PHASE_A || i == TW_FN_REDUCE) ? NULL : tw_fn_names[i];
    st = tw_cu_module_open(ctx, image, names, TW_FN_COUNT, &out->mod, out->fn);
    tw_cubin_free(&cubin);
    if (st != TWELL_OK)
        return st;
    out->cfg = *c;
    /* The module's own configuration is the truth; every value is one we passed or derived
     * with the template's formulas, so a lookup failure (a variable the compiler dropped) can
     * fall back to ours, while a disagreement is a bug. */
    void *dcfg = NULL;
    size_t bytes = 0;
    uint32_t *got = out->words;
    if (st == TWELL_OK) {
        if (tw_cu_module_global(ctx, out->mod, "twell_ffn_cfg", &dcfg, &bytes) != TWELL_OK ||
            bytes != sizeof out->words) {
            tw_log(ctx, TWELL_LOG_INFO,
                   "ffn_infer: twell_ffn_cfg not readable from the module (%s); using the "
                   "launcher's configuration",
                   bytes ? "size differs" : tw_errmsg(ctx));
            memcpy(got, want, sizeof out->words);
        } else {
            st = tw_cuda_memcpy_dtoh(ctx, got, dcfg, sizeof out->words);
        }
    }
    for (int i = 0; i < TW_CFG_COUNT && st == TWELL_OK; i++)
        if (got[i] != want[i])
            st = tw_error(ctx, TWELL_ERR_INTERNAL,
                          "ffn_infer: twell_ffn_cfg[%d] = %u, expected %u (template and launcher "
                          "disagree)",
                          i, got[i], want[i]);
    if (st == TWELL_OK)
        st = tw_cu_func_set_attribute(ctx, out->fn[TW_FN_OVF_GU],
                                      TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      (int)got[TW_CFG_SMEM_GU]);
    if (st == TWELL_OK)
        st = tw_cu_func_set_attribute(ctx, out->fn[TW_FN_OVF_DOWN],
                                      TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      (int)got[TW_CFG_SMEM_DOWN]);
    if (st == TWELL_OK)
        st = tw_cu_func_set_attribute(ctx, out->fn[TW_FN_PHASE_B],
                                      TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      (int)got[TW_CFG_SMEM_B]);
    if (st == TWELL_OK && s->gated)
        st = tw_cu_func_set_attribute(ctx, out->fn[TW_FN_PHASE_A],
                                      TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      (int)got[TW_CFG_SMEM_A]);
    if (st != TWELL_OK)
        tw_ffn_tk_unload(out);
    return st;
}

/* Makes tk the module the following launches read (f->fn, f->cfg), and the row workspace's
 * layout wide enough for its chunk count: a wider one is reallocated by the next reservation
 * (which first waits for the plan's earlier work). */
void tw_ffn_use(tw_ffn *f, tw_ffn_tk *tk) {
    if (f->cur == tk)
        return;
    f->cur = tk;
    memcpy(f->fn, tk->fn, sizeof f->fn);
    memcpy(f->cfg, tk->words, sizeof f->cfg);
    if (tk->words[TW_CFG_NC] > f->nc_ws) {
        f->nc_ws = tk->words[TW_CFG_NC];
        f->rows_cap = 0;
    }
}

/* Loads ffn_fused in its default configuration. TWELL_ERR_UNSUPPORTED when the shape or device
 * cannot run it. */
static twell_status tw_ffn_load_tiled(twell_plan *plan, tw_ffn *f) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    const tw_cuda *dev = ctx->cuda;
    if (s->K % 64u != 0)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: K=%u is not a multiple of 64 (tiled kernels)", s->K);
    if (dev->cc_major < 8)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: %s is below sm_80 (the tiled kernels use bf16 mma.sync and "
                        "cp.async)",
                        dev->arch);
    tw_ffn_cfg c;
    if (tw_ffn_cfg_default(s, dev, &c) != 0)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: %d bytes of shared memory per block are too few for the tiled "
                        "kernels",
                        dev->smem_optin);
    twell_status st = tw_ffn_tk_load(ctx, s, &c, NULL, &f->tk[0]);
    if (st != TWELL_OK)
        return st;
    f->ntk = 1;
    f->modules++;
    tw_ffn_use(f, &f->tk[0]);
    f->tiled = 1;
    return TWELL_OK;
}

twell_status tw_cuda_ffn_init(twell_plan *plan, tw_ffn **out) {
    *out = NULL;
    twell_ctx *ctx = plan->ctx;
    tw_ffn *f = calloc(1, sizeof *f);
    if (!f)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "ffn_infer: out of memory for the plan state");
    f->NT = plan->shape.N / plan->shape.T;
    f->NSL = plan->shape.K / 64u;
    memset(f->bucket, -1, sizeof f->bucket);
    f->tune_on_first_use = ctx->tune_on_first_use;
    f->heavy = tw_ffn_heavy_create();
    if (!f->heavy) {
        free(f);
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "ffn_infer: out of memory for the plan state");
    }
    twell_status st = tw_cuda_event_create(ctx, &f->done);
    if (st == TWELL_OK)
        st = tw_cuda_event_create(ctx, &f->retire);
    void *hf = NULL, *acc = NULL;
    if (st == TWELL_OK)
        st = tw_cuda_host_alloc(ctx, 32u, &hf);
    f->hflags = hf;
    if (st == TWELL_OK)
        st = tw_cuda_malloc(ctx, 16u, &acc);
    f->acc = acc;
    if (st == TWELL_OK) {
        memset(f->hflags, 0, 32u);
        st = tw_cuda_memcpy_htod(ctx, f->acc, f->hflags, 16u); /* acc starts at zero */
    }
    if (st == TWELL_OK) {
        void *hd = NULL; /* optional: without it every call enqueues a 16-byte copy */
        if (tw_cuda_host_device_ptr(ctx, hf, &hd) == TWELL_OK)
            f->hflags_dev = hd;
        st = tw_ffn_load_tiled(plan, f);
        if (st == TWELL_ERR_NO_MEMORY) {
            tw_cuda_ffn_release(plan, f);
            return st;
        }
        if (st != TWELL_OK) {
            /* Not fatal: the portable row kernel is exact for every shape. A failure other than
             * "unsupported" is a bug worth a warning. */
            tw_log(ctx, st == TWELL_ERR_UNSUPPORTED ? TWELL_LOG_INFO : TWELL_LOG_WARN,
                   "ffn_infer: tiled kernels not used (%s); using the row kernel", tw_errmsg(ctx));
            st = tw_ffn_load_generic(plan, f);
        }
    }
    if (st != TWELL_OK) {
        tw_cuda_ffn_release(plan, f);
        return st;
    }
    *out = f;
    return TWELL_OK;
}

void tw_cuda_ffn_release(twell_plan *plan, tw_ffn *f) {
    if (!f)
        return;
    twell_ctx *ctx = plan->ctx;
    for (size_t i = 0; i < f->ntk; i++)
        tw_ffn_tk_unload(&f->tk[i]);
    tw_cu_module_unload(f->gmod);
    tw_ffn_heavy_release(plan, f->heavy);
    tw_cuda_keep_release(ctx, &f->keep);
    tw_cuda_free(ctx, f->ws_rows);
    tw_cuda_free(ctx, f->ws_ovf);
    tw_cuda_free(ctx, f->ws_pairs);
    for (int i = 0; i < f->nretired; i++) /* the plan's release synchronised the device */
        tw_cuda_free(ctx, f->retired[i]);
    tw_cuda_free(ctx, f->acc);
    tw_cuda_host_free(ctx, f->hflags);
    tw_cuda_event_destroy(ctx, f->done);
    tw_cuda_event_destroy(ctx, f->retire);
    free(f);
}
