/*
 * cuda_ffn_heavy.c — the heavy-row route of twell_ffn_infer's tiled path (cuda_ffn_heavy.h): the
 * classification, gather and scatter kernels (templates/ffn/ffn_heavy.cu.lua) and gemm_sm90's
 * dense GEMMs with the row count on the device (DM = 1), on a block of at most TW_FFN_HEAVY_CAP
 * rows per chunk.
 */
#include "cuda_ffn_heavy.h"

#include "cuda_module.h"
#include "dense_gemm.h"
#include "dense_split.h"
#include "jit.h"
#include "probe.h"

#include <stdlib.h>
#include <string.h>

enum { HV_FLAG, HV_LIST, HV_GATHER, HV_SCATTER, HV_COUNT };

struct tw_ffn_heavy {
    int state; /* 0 not loaded yet, 1 loaded, -1 cannot run for this plan (logged once) */
#ifdef TWELL_PROBES
    long long knob; /* TW_TC_FFN_SET_HEAVY: < 0 default, 0 off, > 0 on with this threshold */
#endif
    tw_CUmodule mod, mod_up, mod_down;
    tw_CUfunction fn[HV_COUNT], up, down;
    /* one device buffer for chunks of up to rows rows and blocks of up to cap rows */
    void *buf;
    size_t rows, cap;
    unsigned nsplit; /* the down GEMM's reduction slices */
    uint32_t *hmark, *idx, *ones;
    int *hn;
    void *xb, *hb;
    float *part;
    uint32_t thr; /* the current chunk's threshold */
    int marked;   /* some chunk ran the classification (hn is meaningful) */
    int seen;     /* the default's trigger happened once (overflowing rows) */
    int captured; /* a captured call used the buffer: a replaced one is kept to the release */
    tw_cuda_keep keep;
};

/* Cost model. The sparse pipeline costs about a constant per active value (more for overflowing
 * row-tiles: their own GEMM kernels), a row of the dense block ~3·K·N multiply-adds on tensor
 * cores; at K 2048, N 5632 and large M the two are equal near N / 44 values a row.
 * N / 32 leaves margin for the block's under-filled grids. */
uint32_t tw_ffn_heavy_threshold(const twell_shape *s) {
    uint32_t thr = s->N / 32u;
    return thr < 64u ? 64u : thr;
}

tw_ffn_heavy *tw_ffn_heavy_create(void) {
    tw_ffn_heavy *h = calloc(1, sizeof *h);
    if (h)
        TW_PROBE_DO(h->knob = -1);
    return h;
}

static void hv_unload(tw_ffn_heavy *h) {
    tw_cu_module_unload(h->mod);
    tw_cu_module_unload(h->mod_up);
    tw_cu_module_unload(h->mod_down);
    h->mod = h->mod_up = h->mod_down = NULL;
}

void tw_ffn_heavy_release(twell_plan *plan, tw_ffn_heavy *h) {
    if (!h)
        return;
    hv_unload(h);
    tw_cuda_keep_release(plan->ctx, &h->keep);
    tw_cuda_free(plan->ctx, h->buf);
    free(h);
}

#ifdef TWELL_PROBES
void tw_ffn_heavy_set(tw_ffn_heavy *h, long long knob) { h->knob = knob; }
#endif

/* Why the route cannot run for this plan (NULL: it can). */
static const char *hv_why_not(const twell_plan *plan) {
    const twell_shape *s = &plan->shape;
    const tw_cuda *dev = plan->ctx->cuda;
    if (!s->gated)
        return "not gated";
    if (strcmp(dev->arch, "sm_90a") != 0)
        return "the dense GEMMs need sm_90a";
    if (s->K % 64u != 0 || s->N % 64u != 0)
        return "the dense GEMMs need K and N multiples of 64";
    if (dev->smem_optin < (int)TW_DG_SMEM || dev->smem_optin < (int)TW_DG_SPLIT_SMEM ||
        dev->sm_count < (int)TW_DG_CLUSTER)
        return "not enough shared memory or SMs for the dense GEMMs";
    return NULL;
}

static twell_status hv_load(twell_plan *plan, tw_ffn_heavy *h) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    static const char *const names[HV_COUNT] = {"twell_ffn_heavy_flag", "twell_ffn_heavy_list",
                                                "twell_ffn_heavy_gather",
                                                "twell_ffn_heavy_scatter"};
    static const char *const gemm[] = {"twell_gemm_sm90"};
    tw_param sp[TW_SHAPE_NPARAMS];
    size_t nsp = tw_shape_params(s, sp);
    TW_TRY(tw_template_module(ctx, "ffn_heavy", sp, nsp, names, HV_COUNT, &h->mod, h->fn));
    tw_param up[TW_DENSE_GEMM_NPARAMS + 1], down[TW_DENSE_GEMM_NPARAMS + 1];
    size_t nup = tw_dense_gemm_params(s, TW_DENSE_UP, 0, up);
    size_t ndown = tw_dense_gemm_params(s, TW_DENSE_DOWN, 1, down);
    up[nup++] = (tw_param){"DM", NULL, 1};
    down[ndown++] = (tw_param){"DM", NULL, 1};
    TW_TRY(tw_template_module(ctx, "gemm_sm90", up, nup, gemm, 1, &h->mod_up, &h->up));
    TW_TRY(tw_template_module(ctx, "gemm_sm90", down, ndown, gemm, 1, &h->mod_down, &h->down));
    TW_TRY(tw_cu_func_set_attribute(ctx, h->up, TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    (int)TW_DG_SMEM));
    return tw_cu_func_set_attribute(
        ctx, h->down, TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)TW_DG_SPLIT_SMEM);
}

/* Buffer layout for chunks of R rows, blocks of cap rows: hmark u32[R + 16], idx u32[cap], hn,
 * ones u32[units of cap rows x N] (the up GEMM's flags: every unit recomputes its gate), xb
 * [cap, K], hb [cap, N] (16-bit), part f32[nsplit][cap][K]. */
typedef struct {
    size_t hmark, idx, hn, ones, nones, xb, hb, part, bytes;
} hv_layout;

static void hv_layout_of(const twell_shape *s, size_t R, size_t cap, unsigned nsplit,
                         hv_layout *L) {
    size_t o = 0;
    L->hmark = o, o += tw_al(4 * (R + 16)); /* the list kernel reads 16 words at a time */
    L->idx = o, o += tw_al(4 * cap);
    L->hn = o, o += tw_al(16);
    L->nones = tw_dense_gemm_units(cap, s->N);
    L->ones = o, o += tw_al(4 * L->nones);
    L->xb = o, o += tw_al(2 * cap * s->K);
    L->hb = o, o += tw_al(2 * cap * s->N);
    L->part = o, o += tw_al(4 * (size_t)nsplit * cap * s->K);
    L->bytes = o;
}

/* Buffers for chunks of R rows (eager). The constant flags are written on `stream` (calls run
 * there after it); with may_wait (twell_plan_reserve) the device is synchronised too, since a
 * later call may come on any stream. Never waits otherwise: a replaced buffer that earlier calls
 * may still use is kept to the plan's release (growth is rare: chunks only grow). */
static twell_status hv_reserve(twell_plan *plan, tw_ffn_heavy *h, size_t R, int used, int may_wait,
                               twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    if (h->buf && R <= h->rows)
        return TWELL_OK;
    size_t cap = tw_min(R, TW_FFN_HEAVY_CAP);
    unsigned kb = s->N / 64u, nsplit = kb < 4u ? kb : 4u;
    hv_layout L;
    hv_layout_of(s, R, cap, nsplit, &L);
    void *p = NULL;
    TW_TRY(tw_cuda_malloc(ctx, L.bytes, &p));
    twell_status st = tw_cuda_memset_d32(ctx, (char *)p + L.ones, 1u, L.nones, stream);
    if (st == TWELL_OK && may_wait)
        st = tw_cuda_synchronize(ctx);
    if (st != TWELL_OK) {
        tw_cuda_free(ctx, p);
        return st;
    }
    tw_cuda_keep_free(ctx, &h->keep, h->captured || used, h->buf);
    char *b = p;
    h->buf = p;
    h->rows = R;
    h->cap = cap;
    h->nsplit = nsplit;
    h->hmark = (uint32_t *)(void *)(b + L.hmark);
    h->idx = (uint32_t *)(void *)(b + L.idx);
    h->hn = (int *)(void *)(b + L.hn);
    h->ones = (uint32_t *)(void *)(b + L.ones);
    h->xb = b + L.xb;
    h->hb = b + L.hb;
    h->part = (float *)(void *)(b + L.part);
    return TWELL_OK;
}

twell_status tw_ffn_heavy_prepare(twell_plan *plan, tw_ffn_heavy *h, size_t R, int seen,
                                  int capturing, int used, int may_wait, twell_stream stream,
                                  int *on) {
    twell_ctx *ctx = plan->ctx;
    *on = 0;
    /* once on, on for good (the default's trigger, overflowing rows, disappears with the route:
     * it takes them) */
    h->seen |= seen;
    long long knob = TW_PROBE_OR(h->knob, -1); /* < 0: the default */
    if (knob == 0 || h->state < 0 || (knob < 0 && !h->seen) || R == 0)
        return TWELL_OK;
    h->thr = knob > 0 ? (knob > (long long)UINT32_MAX ? UINT32_MAX : (uint32_t)knob)
                      : tw_ffn_heavy_threshold(&plan->shape);
    if (capturing) { /* nothing may be loaded or allocated now */
        *on = h->state == 1 && h->buf && R <= h->rows;
        if (*on)
            h->captured = 1;
        return TWELL_OK;
    }
    if (h->state == 0) {
        const char *why = hv_why_not(plan);
        twell_status st = why ? TWELL_ERR_UNSUPPORTED : hv_load(plan, h);
        if (st != TWELL_OK) {
            if (st == TWELL_ERR_NO_MEMORY)
                return st;
            tw_log(ctx, TWELL_LOG_INFO,
                   "ffn_infer: heavy-row route off for this plan (%s); overflowing row-tiles "
                   "run the sparse pipeline's overflow kernels",
                   why ? why : tw_errmsg(ctx));
            hv_unload(h);
            h->state = -1;
            return TWELL_OK;
        }
        h->state = 1;
    }
    twell_status st = hv_reserve(plan, h, R, used, may_wait, stream);
    if (st != TWELL_OK) { /* the sparse pipeline is exact without it */
        tw_log(ctx, TWELL_LOG_WARN, "ffn_infer: heavy-row block unavailable (%s)", tw_errmsg(ctx));
        return TWELL_OK;
    }
    *on = 1;
    return TWELL_OK;
}

static twell_status hv_go(twell_ctx *ctx, tw_CUfunction fn, size_t gx, unsigned block,
                          twell_stream stream, void **args) {
    return tw_cu_launch_grid(ctx, fn, gx, 1, block, 0, 0u, stream, args);
}

twell_status tw_ffn_heavy_mark(twell_plan *plan, tw_ffn_heavy *h, int m, const uint32_t *packed,
                               const uint32_t **hmark, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    size_t sms = (size_t)ctx->cuda->sm_count;
    int cap = (int)h->cap;
    {
        void *args[] = {(void *)&packed, &m, &h->thr, &h->hmark};
        TW_TRY(
            hv_go(ctx, h->fn[HV_FLAG], tw_min(tw_cdiv((size_t)m, 8), 8 * sms), 256, stream, args));
    }
    {
        void *args[] = {&h->hmark, &m, &cap, &h->idx, &h->hn};
        TW_TRY(hv_go(ctx, h->fn[HV_LIST], 1, 1024, stream, args));
    }
    h->marked = 1;
    *hmark = h->hmark;
    return TWELL_OK;
}

twell_status tw_ffn_heavy_gemms(twell_plan *plan, tw_ffn_heavy *h, const void *x,
                                const uint32_t *packed, const void *wg, const void *wu,
                                const void *wd, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    size_t sms = (size_t)ctx->cuda->sm_count;
    int cap = (int)h->cap;
    {
        void *args[] = {(void *)&x, &h->xb, &h->idx, &h->hn, &cap};
        size_t units = h->cap * (s->K / 8u);
        TW_TRY(
            hv_go(ctx, h->fn[HV_GATHER], tw_min(tw_cdiv(units, 256), 8 * sms), 256, stream, args));
    }
    /* h = round(g ⊙ (x·Wuᵀ)) with g recomputed in every unit (the flags are all set) */
    TW_TRY(tw_cuda_dense_gemm_dm(plan, h->up, 0, h->cap, s->K, s->N, h->xb, wu, wg, 0, h->hb,
                                 packed, h->ones, 1u, h->hn, stream));
    /* y partials = h · Wd in nsplit slices of the hidden width */
    return tw_cuda_dense_gemm_dm(plan, h->down, 1, h->cap, s->N, s->K, h->hb, wd, NULL, 1, h->part,
                                 NULL, NULL, h->nsplit, h->hn, stream);
}

twell_status tw_ffn_heavy_scatter(twell_plan *plan, tw_ffn_heavy *h, void *y, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    size_t sms = (size_t)ctx->cuda->sm_count;
    int cap = (int)h->cap, ns = (int)h->nsplit;
    void *args[] = {&h->part, &cap, &ns, &h->hn, &h->idx, &y};
    size_t items = h->cap * tw_cdiv(s->K, 256);
    return hv_go(ctx, h->fn[HV_SCATTER], tw_min(tw_cdiv(items, 8), 8 * sms), 256, stream, args);
}

twell_status tw_ffn_heavy_rows(twell_plan *plan, tw_ffn_heavy *h, int *rows) {
    *rows = 0;
    if (!h || !h->marked)
        return TWELL_OK;
    TW_TRY(tw_cuda_synchronize(plan->ctx));
    return tw_cuda_memcpy_dtoh(plan->ctx, rows, h->hn, sizeof *rows);
}
