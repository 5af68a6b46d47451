/*
 * cuda_ffn_load.c — twell_ffn_infer on CUDA, set-up side: the fused kernels' tile
 * configurations (defaults, tuned winners, the TWELL_FFN_TILE development override, the shared-
 * memory derivation), loading ffn_fused / ffn_rows modules, and a plan's creation and release.
 * The launch side is runtime/cuda_ffn.c.
 */
#include "cuda_ffn_int.h"

#include "candidates.h"
#include "jit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const tw_fn_names[TW_FN_COUNT] = {
    "twell_ffn_prep",   "twell_ffn_scan",     "twell_ffn_build",
    "twell_ffn_ovf_gu", "twell_ffn_ovf_down", "twell_ffn_phase_a",
    "twell_ffn_reduce", "twell_ffn_phase_b",  "twell_ffn_rows"};

#define TW_SMEM_MAX 232448u /* the template's shared-memory ceiling (227 KB, sm_90) */

size_t tw_ffn_rows_params(const twell_shape *s, tw_param out[TW_FFN_ROWS_NPARAMS]) {
    const tw_param p[TW_FFN_ROWS_NPARAMS] = {
        {"K", NULL, (long long)s->K},
        {"N", NULL, (long long)s->N},
        {"T", NULL, (long long)s->T},
        {"C", NULL, (long long)s->C},
        {"dtype", s->dtype == TWELL_DTYPE_BF16 ? "bf16" : "fp16", 0},
        {"gated", NULL, (long long)s->gated},
    };
    memcpy(out, p, sizeof p);
    return TW_FFN_ROWS_NPARAMS;
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
    st = tw_cu_module_load(ctx, cubin.data, &f->gmod);
    tw_cubin_free(&cubin);
    if (st != TWELL_OK)
        return st;
    f->modules++;
    st = tw_cu_module_function(ctx, f->gmod, "twell_ffn_rows_generic", &f->generic);
    if (st != TWELL_OK) {
        tw_cu_module_unload(f->gmod);
        f->gmod = NULL;
        f->generic = NULL;
    }
    return st;
}

/* Fills the derived entries of want[] (list capacities, shared-memory sizes, counts, overflow
 * grids) from its CN, GPWA, GPWB, NWA, NWB and STAGES and the variant bits xv by the template's
 * formulas for `smem` bytes of shared memory per block. Returns 0 if they do not fit (or CN does
 * not suit the shape). */
static int tw_ffn_tile_derive(const twell_shape *s, uint32_t smem, uint32_t xv,
                              uint32_t want[TW_CFG_COUNT]) {
    uint32_t cn = want[TW_CFG_CN], st = want[TW_CFG_STAGES], vb = s->gated ? 4u : 2u;
    /* per buffer: the staged list offsets and sizes of the block (GPW 8-token units per warp, NW
     * warps); once: the (first, end) offset table of up to 256 chunks */
    uint32_t ga = want[TW_CFG_NWA] * want[TW_CFG_GPWA], gb = want[TW_CFG_NWB] * want[TW_CFG_GPWB];
    uint32_t la = (2u * ga + 4u) * 4u, lb = (2u * gb + 4u) * 4u, re = 2048u;
    uint32_t wb = st * cn * 128u, NT = s->N / s->T;
    if (cn < s->T || cn % s->T != 0u || cn % 64u != 0u || cn > 1024u || st < 2u || st > 4u)
        return 0;
    for (int i = 0; i < 2; i++) {
        uint32_t gpw = want[i ? TW_CFG_GPWB : TW_CFG_GPWA], nw = want[i ? TW_CFG_NWB : TW_CFG_NWA];
        if (gpw < 1u || gpw > 8u || nw < 4u || nw > 32u || nw % 2u != 0u)
            return 0;
    }
    if (want[TW_CFG_PF] > 1u || want[TW_CFG_IL] > 1u)
        return 0;
    /* GT 16: the warps' 8-token units pair up into groups of 16; IL pairs groups of 8 only */
    if (want[TW_CFG_GT] != 8u && (want[TW_CFG_GT] != 16u || want[TW_CFG_GPWA] % 2u != 0u ||
                                  want[TW_CFG_GPWB] % 2u != 0u || want[TW_CFG_IL] != 0u))
        return 0;
    uint32_t tpc = cn / s->T;
    if ((NT + tpc - 1) / tpc > 256u || smem < wb + re + st * (la + 64u) ||
        smem < wb + re + st * (lb + 16u * (4u + vb)))
        return 0;
    want[TW_CFG_DCAPA] = (smem - wb - re - st * la) / (4u * st) / 16u * 16u;
    want[TW_CFG_DCAPB] = (smem - wb - re - st * lb) / (st * (4u + vb)) / 16u * 16u;
    want[TW_CFG_SMEM_A] = wb + st * (4u * want[TW_CFG_DCAPA] + la) + re;
    want[TW_CFG_SMEM_B] = wb + st * ((4u + vb) * want[TW_CFG_DCAPB] + lb) + re;
    /* XV & 64: the larger-warp-tile overflow kernels (tw_k_ovf_gu2: 3 stages, 4 warps, 3 CTAs
     * per SM; tw_k_ovf_down2: 64-neuron steps, 128 output columns when K % 128 == 0) */
    uint32_t ov2 = (xv & 64u) != 0u;
    want[TW_CFG_SMEM_GU] = (ov2 ? 3u : 4u) * 64u * 128u * (s->gated ? 3u : 2u); /* stages */
    uint32_t subd = ov2 ? 64u : s->T < 128u ? s->T : 128u;  /* ovf_down's step (neurons) */
    uint32_t dcw = (ov2 && s->K % 128u == 0u) ? 128u : 64u; /* ovf_down's output columns */
    want[TW_CFG_SMEM_DOWN] = 2u * (2u * 32u * subd * 2u + subd * dcw * 2u);
    want[TW_CFG_GU_BPS] = ov2 ? 3u : 2u;
    want[TW_CFG_GU_THR] = ov2 ? 128u : 256u;
    want[TW_CFG_DOWN_BPS] = 3u;
    want[TW_CFG_BW] = 4;
    want[TW_CFG_NC] = (NT + tpc - 1) / tpc;
    want[TW_CFG_TPC] = tpc;
    want[TW_CFG_PADQ] = (s->dtype == TWELL_DTYPE_FP16 && s->gated) ? 16u : 8u;
    want[TW_CFG_GATED] = s->gated ? 1u : 0u;
    return want[TW_CFG_DCAPA] >= 16u && want[TW_CFG_DCAPB] >= 16u && want[TW_CFG_SMEM_GU] <= smem &&
           want[TW_CFG_SMEM_DOWN] <= smem;
}

/* The tile configuration c for this device: c's free words (CN, STAGES, GPWA, GPWB, NWA, NWB,
 * PF, IL), the rest derived by tw_ffn_tile_derive for the device's shared memory (capped at the
 * template's ceiling); phase A must also keep at least 16 KB for staged list descriptors.
 * Returns 0 if c cannot run; the reason goes to why. */
static int tw_ffn_tile_config(const twell_shape *s, const tw_cuda *dev, const tw_ffn_cfg *c,
                              uint32_t want[TW_CFG_COUNT], char *why, size_t n) {
    uint32_t smem = dev->smem_optin > 0 ? (uint32_t)dev->smem_optin : 0u;
    if (smem > TW_SMEM_MAX)
        smem = TW_SMEM_MAX;
    memset(want, 0, TW_CFG_COUNT * sizeof *want);
    if (s->K % 64u != 0 || dev->cc_major < 8) {
        snprintf(why, n, "K=%u on %s: the tiled kernels need K %% 64 == 0 and sm_80+", s->K,
                 dev->arch);
        return 0;
    }
    want[TW_CFG_CN] = c->cn;
    want[TW_CFG_STAGES] = c->stages;
    want[TW_CFG_GPWA] = c->gpwa;
    want[TW_CFG_GPWB] = c->gpwb;
    want[TW_CFG_NWA] = c->nwa;
    want[TW_CFG_NWB] = c->nwb;
    want[TW_CFG_PF] = c->pf;
    want[TW_CFG_IL] = c->il;
    want[TW_CFG_GT] = c->gt;
    uint32_t la = (2u * c->nwa * c->gpwa + 4u) * 4u;
    uint32_t fixed = c->stages * (c->cn * 128u + la) + 2048u;
    if (c->xv > 127u || c->stages > 4u || c->cn > 1024u || c->nwa > 32u || c->gpwa > 8u ||
        smem < fixed + 16384u || !tw_ffn_tile_derive(s, smem, c->xv, want)) {
        snprintf(why, n,
                 "CN=%u STAGES=%u GPWA=%u GPWB=%u NWA=%u NWB=%u PF=%u IL=%u GT=%u XV=%u is not a "
                 "configuration of ffn_fused for T=%u N=%u in %u bytes of shared memory",
                 c->cn, c->stages, c->gpwa, c->gpwb, c->nwa, c->nwb, c->pf, c->il, c->gt, c->xv,
                 s->T, s->N, smem);
        memset(want, 0, TW_CFG_COUNT * sizeof *want);
        return 0;
    }
    return 1;
}

int tw_ffn_cfg_check(const tw_ffn_cfg *c, const twell_shape *s, const tw_cuda *dev, char *why,
                     size_t n) {
    char dummy[256];
    uint32_t want[TW_CFG_COUNT];
    if (!why || n == 0)
        why = dummy, n = sizeof dummy;
    return tw_ffn_tile_config(s, dev, c, want, why, n) ? 0 : -1;
}

int tw_ffn_cfg_default(const twell_shape *s, const tw_cuda *dev, tw_ffn_cfg *out) {
    /* The first of {CN, STAGES} = {512, 2}, {256, 2} that fits, with 16 warps of 8 / 4 groups
     * per block in phases A / B and the list prefetch on (other warp shapes ran slower). */
    static const unsigned cand[][2] = {{512, 2}, {256, 2}};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        *out = (tw_ffn_cfg){cand[i][0],        cand[i][1],       8u, 4u, 16u, 16u, 1u, 0u,
                            TW_FFN_GT_DEFAULT, TW_FFN_XV_DEFAULT};
        if (tw_ffn_cfg_check(out, s, dev, NULL, 0) == 0)
            return 0;
    }
    *out = (tw_ffn_cfg){512u, 2u, 8u, 4u, 16u, 16u, 1u, 0u, TW_FFN_GT_DEFAULT, TW_FFN_XV_DEFAULT};
    return -1;
}

int tw_ffn_cfg_from_tune(const struct tw_tune_config *tc, tw_ffn_cfg *out) {
    static const char *const names[] = {"CN",  "STAGES", "GPWA", "GPWB", "NWA",
                                        "NWB", "PF",     "IL",   "GT",   "XV"};
    static const int64_t dflt[] = {
        512, 2, 8, 4, 16, 16, 1, 0, TW_FFN_GT_DEFAULT, TW_FFN_XV_DEFAULT};
    static const int64_t lo[] = {1, 1, 1, 1, 1, 1, 0, 0, 1, 0};
    unsigned *dst[] = {&out->cn,  &out->stages, &out->gpwa, &out->gpwb, &out->nwa,
                       &out->nwb, &out->pf,     &out->il,   &out->gt,   &out->xv};
    if (strcmp(tc->kernel, "ffn_fused") != 0)
        return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int64_t v = tw_tune_config_value(tc, names[i], dflt[i]);
        if (v < lo[i] || v > 65535)
            return -1;
        *dst[i] = (unsigned)v;
    }
    return 0;
}

size_t tw_ffn_cfg_params(const tw_ffn_cfg *c, const twell_shape *s, const tw_cuda *dev,
                         tw_param out[TW_FFN_NPARAMS]) {
    uint32_t want[TW_CFG_COUNT];
    char why[192];
    if (!tw_ffn_tile_config(s, dev, c, want, why, sizeof why))
        return 0;
    const tw_param p[TW_FFN_NPARAMS] = {
        {"K", NULL, (long long)s->K},
        {"N", NULL, (long long)s->N},
        {"T", NULL, (long long)s->T},
        {"C", NULL, (long long)s->C},
        {"dtype", s->dtype == TWELL_DTYPE_BF16 ? "bf16" : "fp16", 0},
        {"gated", NULL, (long long)s->gated},
        {"CN", NULL, (long long)want[TW_CFG_CN]},
        {"GPWA", NULL, (long long)want[TW_CFG_GPWA]},
        {"GPWB", NULL, (long long)want[TW_CFG_GPWB]},
        {"DCAPA", NULL, (long long)want[TW_CFG_DCAPA]},
        {"DCAPB", NULL, (long long)want[TW_CFG_DCAPB]},
        {"STAGES", NULL, (long long)want[TW_CFG_STAGES]},
        {"NWA", NULL, (long long)want[TW_CFG_NWA]},
        {"NWB", NULL, (long long)want[TW_CFG_NWB]},
        {"PF", NULL, (long long)want[TW_CFG_PF]},
        {"IL", NULL, (long long)want[TW_CFG_IL]},
        {"GT", NULL, (long long)want[TW_CFG_GT]},
        {"XV", NULL, (long long)c->xv},
    };
    memcpy(out, p, sizeof p);
    return TW_FFN_NPARAMS;
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
    if (!tw_ffn_tile_config(s, dev, c, want, why, sizeof why))
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
    out->cfg = *c;
    st = tw_cu_module_load(ctx, image, &out->mod);
    tw_cubin_free(&cubin);
    if (st != TWELL_OK)
        return st;
    for (int i = 0; i < TW_FN_COUNT && st == TWELL_OK; i++) {
        if (!s->gated && (i == TW_FN_PHASE_A || i == TW_FN_REDUCE))
            continue;
        st = tw_cu_module_function(ctx, out->mod, tw_fn_names[i], &out->fn[i]);
    }
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
                   bytes ? "size differs" : twell_ctx_errmsg(ctx));
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

/* Development override of the default configuration: TWELL_FFN_TILE="CN=256,STAGES=4,NWA=24" (keys
 * CN, STAGES, GPWA, GPWB, NWA, NWB, PF, IL, GT, XV; the rest is derived). Ignored, with a warning,
 * if it does not fit. Tuned winners (per M bucket) are not affected. */
static void tw_ffn_tile_override(twell_ctx *ctx, const twell_shape *s, const tw_cuda *dev,
                                 tw_ffn_cfg *c) {
    const char *env = getenv("TWELL_FFN_TILE");
    if (!env || !*env)
        return;
    tw_ffn_cfg w = *c;
    static const char *const keys[] = {"CN",  "STAGES", "GPWA", "GPWB", "NWA",
                                       "NWB", "PF",     "IL",   "GT",   "XV"};
    unsigned *dst[] = {&w.cn,  &w.stages, &w.gpwa, &w.gpwb, &w.nwa,
                       &w.nwb, &w.pf,     &w.il,   &w.gt,   &w.xv};
    const char *p = env;
    while (*p) {
        size_t i = 0, len = 0;
        for (; i < sizeof keys / sizeof keys[0]; i++) {
            len = strlen(keys[i]);
            if (!strncmp(p, keys[i], len) && p[len] == '=')
                break;
        }
        char *end = NULL;
        unsigned long v = i < sizeof keys / sizeof keys[0] ? strtoul(p + len + 1, &end, 10) : 0;
        if (!end || end == p + len + 1 || v > 4096u)
            break;
        *dst[i] = (unsigned)v;
        p = end;
        if (*p == ',')
            p++;
    }
    if (*p || tw_ffn_cfg_check(&w, s, dev, NULL, 0) != 0) {
        tw_log(ctx, TWELL_LOG_WARN, "ffn_infer: TWELL_FFN_TILE='%s' ignored (bad or does not fit)",
               env);
        return;
    }
    tw_log(ctx, TWELL_LOG_INFO, "ffn_infer: TWELL_FFN_TILE='%s' applied", env);
    *c = w;
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
    tw_ffn_tile_override(ctx, s, dev, &c);
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
    const char *tune = getenv("TWELL_TUNE");
    f->tune_on_first_use = tune && !strcmp(tune, "1");
    twell_status st = tw_cuda_event_create(ctx, &f->done);
    void *hf = NULL;
    if (st == TWELL_OK)
        st = tw_cuda_host_alloc(ctx, 16u * (TW_SLOTS + 1u), &hf);
    f->hflags = hf;
    if (st == TWELL_OK) {
        memset(f->hflags, 0, 16u * (TW_SLOTS + 1u));
        void *hd = NULL; /* optional: without it every chunk enqueues a 16-byte copy */
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
                   "ffn_infer: tiled kernels not used (%s); using the row kernel",
                   twell_ctx_errmsg(ctx));
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
    tw_cuda_free(ctx, f->ws_rows);
    tw_cuda_free(ctx, f->ws_ovf);
    tw_cuda_free(ctx, f->ws_pairs);
    tw_cuda_host_free(ctx, f->hflags);
    tw_cuda_event_destroy(ctx, f->done);
    free(f);
}
