/*
 * cuda_ffn.c — twell_ffn_infer on CUDA: loads ffn_fused (or ffn_rows) once per plan, keeps the
 * workspace the tiled pipeline needs, and enqueues the launch sequence of ffn_fused.cu.lua's
 * header on the caller's stream without synchronising the host in the steady state.
 */
#include "cuda_ffn.h"

#include "candidates.h"
#include "cuda_backend.h"
#include "jit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kernels of ffn_fused, in launch order (phase_a and reduce exist in gated modules only). */
enum {
    TW_FN_PREP,
    TW_FN_SCAN,
    TW_FN_BUILD,
    TW_FN_OVF_GU,
    TW_FN_OVF_DOWN,
    TW_FN_PHASE_A,
    TW_FN_REDUCE,
    TW_FN_PHASE_B,
    TW_FN_ROWS,
    TW_FN_COUNT
};
static const char *const tw_fn_names[TW_FN_COUNT] = {
    "twell_ffn_prep",   "twell_ffn_scan",     "twell_ffn_build",
    "twell_ffn_ovf_gu", "twell_ffn_ovf_down", "twell_ffn_phase_a",
    "twell_ffn_reduce", "twell_ffn_phase_b",  "twell_ffn_rows"};

/* twell_ffn_cfg[20] of the module, in the template's order. */
enum {
    TW_CFG_CN,
    TW_CFG_GPWA,
    TW_CFG_GPWB,
    TW_CFG_DCAPA,
    TW_CFG_DCAPB,
    TW_CFG_SMEM_A,
    TW_CFG_SMEM_B,
    TW_CFG_SMEM_GU,
    TW_CFG_SMEM_DOWN,
    TW_CFG_BW,
    TW_CFG_NC,
    TW_CFG_TPC,
    TW_CFG_PADQ,
    TW_CFG_GATED,
    TW_CFG_STAGES,
    TW_CFG_NWA,
    TW_CFG_NWB,
    TW_CFG_PF,
    TW_CFG_IL,
    TW_CFG_GT,
    TW_CFG_COUNT
};

_Static_assert(TW_FN_COUNT == TW_FFN_NFN && TW_CFG_COUNT == TW_FFN_NWORDS,
               "cuda_ffn.h counts and the module's kernels/words");

#define TW_SMEM_MAX 232448u /* the template's shared-memory ceiling (227 KB, sm_90) */
/* M buckets (powers of two, tw_tune_m_bucket) and the tiled modules one plan may hold: the
 * default plus distinct tuned configurations (beyond that a bucket keeps the default). */
#define TW_FFN_BUCKETS 64
#define TW_FFN_MAX_TK 8
#define TW_SLOTS 16u /* pinned flag slots: chunk c of a call writes slot c % TW_SLOTS */
#define TW_PAIR_MAX ((size_t)0xffffffffu - 1024u) /* offsets and pair_cap are 32-bit */

struct tw_ffn {
    tw_ffn_kernel kernel; /* forced by the hook; AUTO normally */
    int tiled;            /* ffn_fused loaded */
    /* Tiled modules: tk[0] the default configuration (loaded at plan creation), then the tuned
     * winners of the M buckets seen so far. fn and cfg are copies of the module the current call
     * runs (cur), so the launch code reads them directly. */
    tw_ffn_tk tk[TW_FFN_MAX_TK];
    size_t ntk;
    tw_ffn_tk *cur;
    tw_ffn_tk *forced;                  /* tw_cuda_ffn_force */
    signed char bucket[TW_FFN_BUCKETS]; /* index into tk per M bucket; -1: not resolved yet */
    int tune_on_first_use;              /* TWELL_TUNE=1 when the plan was created */
    uint32_t nc_ws;                     /* chunks (NC) the row workspace is laid out for: the
                                           largest of the modules run so far */
    tw_CUfunction fn[TW_FN_COUNT];
    uint32_t cfg[TW_CFG_COUNT];
    tw_CUmodule gmod; /* ffn_rows, loaded when a call needs it */
    tw_CUfunction generic;
    int modules;
    uint32_t NT, NSL;
    /* Workspace: three device buffers, grown independently (layouts below). */
    void *ws_rows; /* control words + per-row arrays for rows_cap rows */
    size_t rows_cap;
    void *ws_ovf;    /* dense path: ovf_cap overflowing row-tiles, orow_cap overflowing rows */
    size_t ovf_cap;  /* row-tiles (h of each) */
    size_t orow_cap; /* rows (their y part) */
    void *ws_pairs;  /* active pair lists: pair_cap slots */
    size_t pair_cap;
    int pinned; /* capacities fixed by the hook: no probe, no growth */
    int probes;
    uint32_t *hflags;   /* pinned host memory: [TW_SLOTS + 1][4], the last row is the probe's */
    tw_cuda_event done; /* recorded after each call's last work */
    int used;           /* done has been recorded */
    int pending;        /* the slots hold copies not read yet */
    twell_stream last_stream;
    const uint32_t *last_flag; /* device flag words of the last tiled chunk (hook) */
};

/* Device pointers of the workspace pieces for the current capacities. */
typedef struct {
    uint32_t *flag, *cnt, *ovf_base, *item_base, *ovf_rows, *ovf_slot, *orow_idx, *orows, *sizes,
        *offsets, *bsum, *bbase;
    uint16_t *ovf_hh;
    uint32_t *ovf_ex;
    float *ovf_y;
    uint32_t *desc, *hl, *rexp;
    uint16_t *gv;
    float *partial;
} tw_ffn_ws;

const char *tw_ffn_kernel_name(tw_ffn_kernel k) {
    switch (k) {
    case TW_FFN_AUTO:
        return "auto";
    case TW_FFN_ROWS:
        return "rows";
    case TW_FFN_GENERIC:
        return "generic";
    }
    return NULL;
}

/* ---- workspace layout (pieces 256-byte aligned, as the launch contract asks) ---- */

static size_t tw_al(size_t v) { return (v + 255u) & ~(size_t)255u; }

typedef struct {
    size_t flag, cnt, ovf_base, item_base, ovf_rows, ovf_slot, orow_idx, orows, sizes, offsets,
        bsum, bbase, bytes;
} tw_rows_layout;

static void tw_rows_layout_of(const tw_ffn *f, size_t R, tw_rows_layout *L) {
    size_t NT = f->NT, NG = (R + 7) / 8, NL = NG * f->nc_ws, o = 0;
    size_t NBC = (NG + 7) / 8 * f->nc_ws; /* per-block list sums, chunk-major */
    L->flag = o, o += tw_al(16);
    L->cnt = o, o += tw_al(4 * (NT + 1));
    L->ovf_base = o, o += tw_al(4 * (NT + 1));
    L->item_base = o, o += tw_al(4 * (NT + 1));
    L->ovf_rows = o, o += tw_al(4 * NT * R);
    L->ovf_slot = o, o += tw_al(4 * NT * R);
    L->orow_idx = o, o += tw_al(4 * R);
    L->orows = o, o += tw_al(4 * R);
    L->sizes = o, o += tw_al(4 * NL);
    L->offsets = o, o += tw_al(4 * (NL + 1));
    L->bsum = o, o += tw_al(4 * NBC);
    L->bbase = o, o += tw_al(4 * NBC);
    L->bytes = o;
}

#define TW_OVP 4u /* ovf_down's tile parts: ovf_y holds TW_OVP partial sums (the template's) */

/* ovf_hh u16[cap·2T], ovf_ex u32[cap·T/64], ovf_y f32[TW_OVP][orows·K]. */
static size_t tw_ovf_bytes(const twell_plan *plan, size_t cap, size_t orows, size_t *ex_off,
                           size_t *y_off) {
    size_t T = plan->shape.T, o = tw_al(4 * cap * T);
    *ex_off = o, o += tw_al(4 * cap * (T / 64));
    *y_off = o, o += tw_al(4 * TW_OVP * orows * plan->shape.K);
    return o;
}

/* desc u32[P+64], gv u16[P+64]; gated: hl u32[P+64], rexp u32[P/16+64], partial f32[NSL·P]. */
typedef struct {
    size_t gv, hl, rexp, partial, bytes;
} tw_pairs_layout;

static void tw_pairs_layout_of(const twell_plan *plan, const tw_ffn *f, size_t P,
                               tw_pairs_layout *L) {
    size_t o = tw_al(4 * (P + 64));
    L->gv = o, o += tw_al(2 * (P + 64));
    L->hl = L->rexp = L->partial = 0;
    if (plan->shape.gated) {
        L->hl = o, o += tw_al(4 * (P + 64));
        L->rexp = o, o += tw_al(4 * (P / 16 + 64));
        L->partial = o, o += tw_al(4 * (size_t)f->NSL * P);
    }
    L->bytes = o;
}

static void tw_ffn_ws_of(const twell_plan *plan, const tw_ffn *f, tw_ffn_ws *w) {
    memset(w, 0, sizeof *w);
    char *a = f->ws_rows, *b = f->ws_ovf, *c = f->ws_pairs;
    if (a) {
        tw_rows_layout L;
        tw_rows_layout_of(f, f->rows_cap, &L);
        w->flag = (uint32_t *)(void *)(a + L.flag);
        w->cnt = (uint32_t *)(void *)(a + L.cnt);
        w->ovf_base = (uint32_t *)(void *)(a + L.ovf_base);
        w->item_base = (uint32_t *)(void *)(a + L.item_base);
        w->ovf_rows = (uint32_t *)(void *)(a + L.ovf_rows);
        w->ovf_slot = (uint32_t *)(void *)(a + L.ovf_slot);
        w->orow_idx = (uint32_t *)(void *)(a + L.orow_idx);
        w->orows = (uint32_t *)(void *)(a + L.orows);
        w->sizes = (uint32_t *)(void *)(a + L.sizes);
        w->offsets = (uint32_t *)(void *)(a + L.offsets);
        w->bsum = (uint32_t *)(void *)(a + L.bsum);
        w->bbase = (uint32_t *)(void *)(a + L.bbase);
    }
    if (b) {
        size_t ex_off, y_off;
        (void)tw_ovf_bytes(plan, f->ovf_cap, f->orow_cap, &ex_off, &y_off);
        w->ovf_hh = (uint16_t *)(void *)b;
        w->ovf_ex = (uint32_t *)(void *)(b + ex_off);
        w->ovf_y = (float *)(void *)(b + y_off);
    }
    if (c) {
        tw_pairs_layout L;
        tw_pairs_layout_of(plan, f, f->pair_cap, &L);
        w->desc = (uint32_t *)(void *)c;
        w->gv = (uint16_t *)(void *)(c + L.gv);
        if (plan->shape.gated) {
            w->hl = (uint32_t *)(void *)(c + L.hl);
            w->rexp = (uint32_t *)(void *)(c + L.rexp);
            w->partial = (float *)(void *)(c + L.partial);
        }
    }
}

/* Replaces *buf by a new device buffer of `bytes` (the old one must be idle). On failure keeps the
 * old one, logs a warning and returns 0: chunks that do not fit then run the exact fallback. */
static int tw_ffn_realloc(twell_ctx *ctx, void **buf, size_t bytes, const char *what) {
    void *p = NULL;
    if (tw_cuda_malloc(ctx, bytes, &p) != TWELL_OK) {
        tw_log(ctx, TWELL_LOG_WARN,
               "ffn_infer: cannot grow the %s workspace to %zu bytes (%s); chunks that do not fit "
               "run the exact row kernel",
               what, bytes, twell_ctx_errmsg(ctx));
        return 0;
    }
    tw_cuda_free(ctx, *buf);
    *buf = p;
    return 1;
}

static int tw_ffn_set_rows(twell_plan *plan, tw_ffn *f, size_t R) {
    tw_rows_layout L;
    tw_rows_layout_of(f, R, &L);
    if (!tw_ffn_realloc(plan->ctx, &f->ws_rows, L.bytes, "row"))
        return 0;
    f->rows_cap = R;
    f->last_flag = NULL;
    return 1;
}

static int tw_ffn_set_ovf(twell_plan *plan, tw_ffn *f, size_t cap, size_t orows) {
    size_t ex_off, y_off;
    if (cap > 0xffffffffu)
        cap = 0xffffffffu;
    if (orows > 0xffffffffu)
        orows = 0xffffffffu;
    if (!tw_ffn_realloc(plan->ctx, &f->ws_ovf, tw_ovf_bytes(plan, cap, orows, &ex_off, &y_off),
                        "overflow"))
        return 0;
    f->ovf_cap = cap;
    f->orow_cap = orows;
    return 1;
}

static int tw_ffn_set_pairs(twell_plan *plan, tw_ffn *f, size_t cap) {
    tw_pairs_layout L;
    if (cap > TW_PAIR_MAX)
        cap = TW_PAIR_MAX;
    tw_pairs_layout_of(plan, f, cap, &L);
    if (!tw_ffn_realloc(plan->ctx, &f->ws_pairs, L.bytes, "pair list"))
        return 0;
    f->pair_cap = cap;
    return 1;
}

/* ---- module loading ---- */

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

static twell_status tw_ffn_load_generic(twell_plan *plan, tw_ffn *f) {
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

/* Fills the derived entries of want[] (list capacities, shared-memory sizes, counts) from its CN,
 * GPWA, GPWB, NWA, NWB and STAGES by the template's formulas for `smem` bytes of shared memory per
 * block. Returns 0 if they do not fit (or CN does not suit the shape). */
static int tw_ffn_tile_derive(const twell_shape *s, uint32_t smem, uint32_t want[TW_CFG_COUNT]) {
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
    want[TW_CFG_SMEM_GU] = 4u * 64u * 128u * (s->gated ? 3u : 2u); /* 4 stages */
    uint32_t subd = s->T < 128u ? s->T : 128u;                     /* ovf_down's step */
    want[TW_CFG_SMEM_DOWN] = 2u * (2u * 32u * subd * 2u + subd * 128u);
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
    if (c->stages > 4u || c->cn > 1024u || c->nwa > 32u || c->gpwa > 8u || smem < fixed + 16384u ||
        !tw_ffn_tile_derive(s, smem, want)) {
        snprintf(why, n,
                 "CN=%u STAGES=%u GPWA=%u GPWB=%u NWA=%u NWB=%u PF=%u IL=%u GT=%u is not a "
                 "configuration of ffn_fused for T=%u N=%u in %u bytes of shared memory",
                 c->cn, c->stages, c->gpwa, c->gpwb, c->nwa, c->nwb, c->pf, c->il, c->gt, s->T,
                 s->N, smem);
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
     * per block in phases A / B and the list prefetch on (bench/dev/NOTES-fused.md). */
    static const unsigned cand[][2] = {{512, 2}, {256, 2}};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        *out = (tw_ffn_cfg){cand[i][0], cand[i][1], 8u, 4u, 16u, 16u, 1u, 0u, TW_FFN_GT_DEFAULT};
        if (tw_ffn_cfg_check(out, s, dev, NULL, 0) == 0)
            return 0;
    }
    *out = (tw_ffn_cfg){512u, 2u, 8u, 4u, 16u, 16u, 1u, 0u, TW_FFN_GT_DEFAULT};
    return -1;
}

int tw_ffn_cfg_from_tune(const struct tw_tune_config *tc, tw_ffn_cfg *out) {
    static const char *const names[] = {"CN",  "STAGES", "GPWA", "GPWB", "NWA",
                                        "NWB", "PF",     "IL",   "GT"};
    static const int64_t dflt[] = {512, 2, 8, 4, 16, 16, 1, 0, TW_FFN_GT_DEFAULT};
    static const int64_t lo[] = {1, 1, 1, 1, 1, 1, 0, 0, 1};
    unsigned *dst[] = {&out->cn,  &out->stages, &out->gpwa, &out->gpwb, &out->nwa,
                       &out->nwb, &out->pf,     &out->il,   &out->gt};
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
static void tw_ffn_use(tw_ffn *f, tw_ffn_tk *tk) {
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
 * CN, STAGES, GPWA, GPWB, NWA, NWB, PF, IL, GT; the rest is derived). Ignored, with a warning, if
 * it does not fit. Tuned winners (per M bucket) are not affected. */
static void tw_ffn_tile_override(twell_ctx *ctx, const twell_shape *s, const tw_cuda *dev,
                                 tw_ffn_cfg *c) {
    const char *env = getenv("TWELL_FFN_TILE");
    if (!env || !*env)
        return;
    tw_ffn_cfg w = *c;
    static const char *const keys[] = {"CN",  "STAGES", "GPWA", "GPWB", "NWA",
                                       "NWB", "PF",     "IL",   "GT"};
    unsigned *dst[] = {&w.cn, &w.stages, &w.gpwa, &w.gpwb, &w.nwa, &w.nwb, &w.pf, &w.il, &w.gt};
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

/* ---- launches ---- */

static twell_status tw_go(twell_plan *plan, tw_CUfunction fn, size_t gx, unsigned gy,
                          unsigned block, unsigned smem, twell_stream stream, void **args) {
    tw_cu_launch_cfg c;
    memset(&c, 0, sizeof c);
    c.grid[0] = (unsigned)(gx ? gx : 1);
    c.grid[1] = gy;
    c.grid[2] = 1;
    c.block[0] = block;
    c.block[1] = c.block[2] = 1;
    c.smem = smem;
    return tw_cu_launch(plan->ctx, fn, &c, stream, args);
}

static size_t tw_min(size_t a, size_t b) { return a < b ? a : b; }
static size_t tw_cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

#define TW_TRY(expr)                                                                               \
    do {                                                                                           \
        twell_status st_ = (expr);                                                                 \
        if (st_ != TWELL_OK)                                                                       \
            return st_;                                                                            \
    } while (0)

/* Steps 1-3 of the launch contract for one chunk of m rows: counts, list sizes and offsets,
 * overflow bookkeeping, flags. */
static twell_status tw_ffn_prepass(twell_plan *plan, tw_ffn *f, tw_ffn_ws *w, int m,
                                   const uint32_t *packed, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    unsigned ovf_cap = (unsigned)f->ovf_cap, orow_cap = (unsigned)f->orow_cap;
    unsigned pair_cap = (unsigned)f->pair_cap;
    TW_TRY(tw_cuda_memset_d32(ctx, w->cnt, 0u, f->NT + 1u, stream));
    void *a_prep[] = {(void *)&packed, &m,        &w->cnt,   &w->ovf_rows, &w->ovf_slot,
                      &w->orow_idx,    &w->orows, &w->sizes, &w->bsum};
    TW_TRY(tw_go(plan, f->fn[TW_FN_PREP], tw_cdiv(tw_cdiv((size_t)m, f->cfg[TW_CFG_GT]), 8), 1, 256,
                 0, stream, a_prep));
    void *a_scan[] = {&w->bsum, &m,          &w->bbase, &w->cnt,  &w->ovf_base, &w->item_base,
                      &w->flag, &w->offsets, &pair_cap, &ovf_cap, &orow_cap};
    return tw_go(plan, f->fn[TW_FN_SCAN], 1, 1, 1024, 0, stream, a_scan);
}

/* Steps 4-10 for one chunk of m rows. */
static twell_status tw_ffn_phases(twell_plan *plan, tw_ffn *f, tw_ffn_ws *w, int m, const void *x,
                                  const uint32_t *packed, const void *wp, const void *wu,
                                  const void *wd, void *y, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    size_t sms = (size_t)ctx->cuda->sm_count;
    size_t gt = f->cfg[TW_CFG_GT], NG = tw_cdiv((size_t)m, gt), NL = NG * f->cfg[TW_CFG_NC];
    unsigned pair_cap = (unsigned)f->pair_cap, bw = f->cfg[TW_CFG_BW];
    int fallback_only = 1;
    const void *wu_gu = plan->shape.gated ? wu : NULL;
    void *a_build[] = {(void *)&packed, &m,       &w->bbase, &w->sizes,
                       &w->offsets,     &w->desc, &w->gv,    &w->flag};
    TW_TRY(tw_go(plan, f->fn[TW_FN_BUILD], tw_cdiv(NL, bw), 1, bw * 32u, 0, stream, a_build));
    void *a_gu[] = {(void *)&x,    (void *)&wp,  (void *)&wu_gu, &m,         &w->ovf_base,
                    &w->item_base, &w->ovf_rows, &w->ovf_hh,     &w->ovf_ex, &w->flag};
    TW_TRY(tw_go(plan, f->fn[TW_FN_OVF_GU], 2 * sms, 1, 256, f->cfg[TW_CFG_SMEM_GU], stream, a_gu));
    long long ys = (long long)f->orow_cap * plan->shape.K; /* ovf_y part stride */
    void *a_down[] = {(void *)&packed, (void *)&wd, &m,         &w->ovf_base,
                      &w->ovf_slot,    &w->orows,   &w->ovf_hh, &w->ovf_ex,
                      &w->ovf_y,       &ys,         &w->flag};
    TW_TRY(tw_go(plan, f->fn[TW_FN_OVF_DOWN], 3 * sms, 1, 256, f->cfg[TW_CFG_SMEM_DOWN], stream,
                 a_down));
    uint32_t *hl = NULL, *rexp = NULL;
    if (plan->shape.gated) {
        void *a_pa[] = {(void *)&x, (void *)&wu, &m,        &w->desc, &w->offsets,
                        &w->sizes,  &w->partial, &pair_cap, &w->flag};
        TW_TRY(tw_go(plan, f->fn[TW_FN_PHASE_A],
                     tw_cdiv(NG, (size_t)f->cfg[TW_CFG_NWA] * f->cfg[TW_CFG_GPWA] * 8u / gt),
                     f->NSL, 32u * f->cfg[TW_CFG_NWA], f->cfg[TW_CFG_SMEM_A], stream, a_pa));
        void *a_red[] = {&w->gv, &w->partial, &pair_cap, &w->offsets,
                         &m,     &w->hl,      &w->rexp,  &w->flag};
        TW_TRY(tw_go(plan, f->fn[TW_FN_REDUCE], 8 * sms, 1, 256, 0, stream, a_red));
        hl = w->hl;
        rexp = w->rexp;
    }
    void *a_pb[] = {(void *)&wd, &m,           &w->desc,  &w->gv, &hl, &rexp,   &w->offsets,
                    &w->sizes,   &w->orow_idx, &w->ovf_y, &ys,    &y,  &w->flag};
    TW_TRY(tw_go(plan, f->fn[TW_FN_PHASE_B],
                 tw_cdiv(NG, (size_t)f->cfg[TW_CFG_NWB] * f->cfg[TW_CFG_GPWB] * 8u / gt), f->NSL,
                 32u * f->cfg[TW_CFG_NWB], f->cfg[TW_CFG_SMEM_B], stream, a_pb));
    void *a_rows[] = {(void *)&x, (void *)&packed, (void *)&wp,   (void *)&wu, (void *)&wd, &y,
                      &m,         &w->flag,        &fallback_only};
    return tw_go(plan, f->fn[TW_FN_ROWS], tw_min(tw_cdiv((size_t)m, 8), 8 * sms), 1, 256, 0, stream,
                 a_rows);
}

/* What a chunk needed, from its flag words: pair slots, overflowing row-tiles, overflowing rows.
 * All three are counted exactly whatever the capacities were. */
typedef struct {
    size_t pairs, ovf, orows;
} tw_ffn_need;

static void tw_ffn_needs(const uint32_t *fl, tw_ffn_need *n) {
    if (fl[1] > n->pairs)
        n->pairs = fl[1];
    if (fl[2] > n->ovf)
        n->ovf = fl[2];
    if (fl[3] > n->orows)
        n->orows = fl[3];
}

static size_t tw_grow_to(size_t need, size_t slack) { return need + need / 4 + slack; }

/* Grows the buffers that are smaller than `n` needs; 1 if one was reallocated. */
static int tw_ffn_grow(twell_plan *plan, tw_ffn *f, const tw_ffn_need *n) {
    int grew = 0;
    if (n->ovf > f->ovf_cap || n->orows > f->orow_cap)
        grew |= tw_ffn_set_ovf(plan, f, n->ovf > f->ovf_cap ? tw_grow_to(n->ovf, 64) : f->ovf_cap,
                               n->orows > f->orow_cap ? tw_grow_to(n->orows, 16) : f->orow_cap);
    if (n->pairs > f->pair_cap)
        grew |= tw_ffn_set_pairs(plan, f, tw_grow_to(n->pairs, 1024));
    return grew;
}

/* Reads the flag copies of the previous call if its event has completed (never waits) and grows
 * the buffers that were too small. The plan's earlier work has then all finished (calls are
 * ordered through the event), so the old buffers can be freed. */
static twell_status tw_ffn_collect(twell_plan *plan, tw_ffn *f) {
    if (!f->pending)
        return TWELL_OK;
    int done = 0;
    TW_TRY(tw_cuda_event_query(plan->ctx, f->done, &done));
    if (!done)
        return TWELL_OK;
    f->pending = 0;
    tw_ffn_need n = {0, 0, 0};
    for (unsigned i = 0; i < TW_SLOTS; i++) {
        tw_ffn_needs(f->hflags + 4 * i, &n);
        memset(f->hflags + 4 * i, 0, 16);
    }
    if (!f->pinned)
        (void)tw_ffn_grow(plan, f, &n);
    return TWELL_OK;
}

/* The first chunk of a new largest size: run the pre-pass, read the exact needs (one host
 * synchronisation), grow, and run the pre-pass again so its flags see the new capacities. */
static twell_status tw_ffn_probe(twell_plan *plan, tw_ffn *f, tw_ffn_ws *w, int m,
                                 const uint32_t *packed, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    uint32_t *hf = f->hflags + 4 * TW_SLOTS;
    f->probes++;
    TW_TRY(tw_ffn_prepass(plan, f, w, m, packed, stream));
    TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, hf, w->flag, 16, stream));
    TW_TRY(tw_cuda_stream_synchronize(ctx, stream));
    tw_ffn_need n = {0, 0, 0};
    tw_ffn_needs(hf, &n);
    if (!tw_ffn_grow(plan, f, &n))
        return TWELL_OK;
    /* a failed allocation keeps the old buffers: the device flag sends what does not fit to the
     * fallback */
    tw_ffn_ws_of(plan, f, w);
    return tw_ffn_prepass(plan, f, w, m, packed, stream);
}

/* Makes the workspace hold a chunk of R rows (first use, or a larger chunk): waits for the
 * plan's earlier work, which may still use the old buffers. */
static twell_status tw_ffn_reserve_rows(twell_plan *plan, tw_ffn *f, size_t R) {
    if (R <= f->rows_cap && f->ws_pairs && f->ws_ovf)
        return TWELL_OK;
    if (f->used)
        TW_TRY(tw_cuda_event_synchronize(plan->ctx, f->done));
    if (R > f->rows_cap)
        (void)tw_ffn_set_rows(plan, f, R);
    /* before any probe: a modest overflow buffer, an empty pair list (the probe sizes both) */
    if (!f->ws_ovf)
        (void)tw_ffn_set_ovf(plan, f, R * f->NT / 256 + 64, R / 256 + 16);
    if (!f->ws_pairs)
        (void)tw_ffn_set_pairs(plan, f, 0);
    return TWELL_OK;
}

/* The simple kernels, whole call: ROWS (ffn_fused's row kernel, chunked for its int M) or
 * GENERIC (ffn_rows). */
static twell_status tw_ffn_simple(twell_plan *plan, tw_ffn *f, tw_ffn_kernel k, size_t M,
                                  const void *x, const uint32_t *packed, const void *wp,
                                  const void *wu, const void *wd, void *y, twell_stream stream) {
    size_t sms = (size_t)plan->ctx->cuda->sm_count;
    const twell_shape *s = &plan->shape;
    if (k == TW_FFN_GENERIC) {
        long long mm = (long long)M;
        void *a[] = {(void *)&x, (void *)&packed, (void *)&wp, (void *)&wu, (void *)&wd, &y, &mm};
        return tw_go(plan, f->generic, tw_min(tw_cdiv(M, 8), 16 * sms), 1, 256, 0, stream, a);
    }
    const uint32_t *no_flag = NULL;
    int fallback_only = 0;
    for (size_t r0 = 0; r0 < M; r0 += TW_FFN_CHUNK) {
        int m = (int)tw_min(M - r0, TW_FFN_CHUNK);
        const void *xc = (const char *)x + r0 * s->K * 2u;
        const uint32_t *pc = packed + r0 * (s->N / s->C);
        void *yc = (char *)y + r0 * s->K * 2u;
        void *a[] = {(void *)&xc, (void *)&pc, (void *)&wp,      (void *)&wu,   (void *)&wd,
                     &yc,         &m,          (void *)&no_flag, &fallback_only};
        TW_TRY(tw_go(plan, f->fn[TW_FN_ROWS], tw_min(tw_cdiv((size_t)m, 8), 8 * sms), 1, 256, 0,
                     stream, a));
    }
    return TWELL_OK;
}

static twell_status tw_ffn_tiled(twell_plan *plan, tw_ffn *f, size_t M, const void *x,
                                 const uint32_t *packed, const void *wp, const void *wu,
                                 const void *wd, void *y, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    size_t chunk = tw_min(M, TW_FFN_CHUNK);
    TW_TRY(tw_ffn_collect(plan, f));
    TW_TRY(tw_ffn_reserve_rows(plan, f, chunk));
    if (f->rows_cap < chunk || !f->ws_ovf || !f->ws_pairs) /* allocation failed: warned */
        return tw_ffn_simple(plan, f, TW_FFN_ROWS, M, x, packed, wp, wu, wd, y, stream);
    int probe = !f->pinned && chunk > f->cur->probed;
    tw_ffn_ws w;
    tw_ffn_ws_of(plan, f, &w);
    size_t c = 0;
    for (size_t r0 = 0; r0 < M; r0 += TW_FFN_CHUNK, c++) {
        int m = (int)tw_min(M - r0, TW_FFN_CHUNK);
        const void *xc = (const char *)x + r0 * s->K * 2u;
        const uint32_t *pc = packed + r0 * (s->N / s->C);
        void *yc = (char *)y + r0 * s->K * 2u;
        if (probe)
            TW_TRY(tw_ffn_probe(plan, f, &w, m, pc, stream));
        else
            TW_TRY(tw_ffn_prepass(plan, f, &w, m, pc, stream));
        TW_TRY(tw_ffn_phases(plan, f, &w, m, xc, pc, wp, wu, wd, yc, stream));
        TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, f->hflags + 4 * (c % TW_SLOTS), w.flag, 16, stream));
    }
    if (probe && chunk > f->cur->probed)
        f->cur->probed = chunk;
    f->last_flag = w.flag;
    f->pending = 1;
    return TWELL_OK;
}

/* Index of M's bucket in f->bucket: log2 of tw_tune_m_bucket(M). */
static unsigned tw_ffn_bucket_index(size_t M) {
    if (M <= 1)
        return 0;
    unsigned b = 64u - (unsigned)__builtin_clzll((unsigned long long)(M - 1));
    return b < TW_FFN_BUCKETS ? b : TW_FFN_BUCKETS - 1;
}

/* The tiled module calls of M rows run: the forced one, else M's bucket's, resolved on its first
 * call (tw_cuda_ffn_prepare says how) and memoised. Context current. */
static tw_ffn_tk *tw_ffn_module_for(twell_plan *plan, tw_ffn *f, size_t M) {
    if (f->forced)
        return f->forced;
    unsigned b = tw_ffn_bucket_index(M);
    if (f->bucket[b] < 0) {
        size_t pick = 0; /* the default unless a usable winner says otherwise */
        tw_ffn_cfg want;
        if (tw_ffn_winner(plan, M, f->tune_on_first_use, &want) == 0) {
            size_t have = SIZE_MAX;
            for (size_t i = 0; i < f->ntk && have == SIZE_MAX; i++)
                if (!memcmp(&f->tk[i].cfg, &want, sizeof want))
                    have = i;
            if (have != SIZE_MAX) {
                pick = have;
            } else if (f->ntk == TW_FFN_MAX_TK) {
                tw_log(plan->ctx, TWELL_LOG_INFO,
                       "ffn_infer: %d tiled modules loaded already; the default serves M=%zu",
                       TW_FFN_MAX_TK, M);
            } else if (tw_ffn_tk_load(plan->ctx, &plan->shape, &want, NULL, &f->tk[f->ntk]) !=
                       TWELL_OK) {
                tw_log(plan->ctx, TWELL_LOG_WARN,
                       "ffn_infer: tuned module failed to load, using the default: %s",
                       twell_ctx_errmsg(plan->ctx));
            } else {
                pick = f->ntk++;
                f->modules++;
            }
        }
        f->bucket[b] = (signed char)pick;
    }
    return &f->tk[(size_t)f->bucket[b]];
}

twell_status tw_cuda_ffn_launch(twell_plan *plan, tw_ffn *f, size_t M, const void *x,
                                const uint32_t *packed, const void *wg, const void *wu,
                                const void *wd, void *y, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const void *wp = plan->shape.gated ? wg : wu;
    uintptr_t any = (uintptr_t)x | (uintptr_t)wp | (uintptr_t)wu | (uintptr_t)wd | (uintptr_t)y;
    if (any & 1u)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "twell_ffn_infer: x, the weights and y must be 2-byte aligned (16-bit "
                        "elements)");
    if ((uintptr_t)packed & 3u)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "twell_ffn_infer: packed is not 4-byte aligned");
    tw_ffn_kernel k = f->kernel;
    int aligned16 = (any & 15u) == 0;
    if ((k == TW_FFN_AUTO && !f->tiled) || !aligned16)
        k = TW_FFN_GENERIC; /* the tiled and row kernels load 16 bytes at a time */
    if (k == TW_FFN_GENERIC && !f->generic) {
        tw_log(ctx, TWELL_LOG_INFO,
               "ffn_infer: tensors not 16-byte aligned; loading the portable row kernel");
        TW_TRY(tw_ffn_load_generic(plan, f));
    }
    /* Calls share the workspace: one on another stream waits for the previous one. */
    if (f->used && stream != f->last_stream)
        TW_TRY(tw_cuda_stream_wait_event(ctx, stream, f->done));
    if (k != TW_FFN_GENERIC)
        tw_ffn_use(f, tw_ffn_module_for(plan, f, M));
    if (k == TW_FFN_AUTO)
        TW_TRY(tw_ffn_tiled(plan, f, M, x, packed, wp, wu, wd, y, stream));
    else
        TW_TRY(tw_ffn_simple(plan, f, k, M, x, packed, wp, wu, wd, y, stream));
    TW_TRY(tw_cuda_event_record(ctx, f->done, stream));
    f->used = 1;
    f->last_stream = stream;
    return TWELL_OK;
}

/* ---- hooks ---- */

static tw_ffn *tw_plan_ffn(const twell_plan *plan) {
    if (!plan || plan->ctx->backend != TWELL_BACKEND_CUDA || !plan->backend_data)
        return NULL;
    return ((const tw_cuda_plan *)plan->backend_data)->ffn;
}

static twell_status tw_hook_enter(twell_plan *plan, tw_ffn **f, tw_cu_scope *sc) {
    *f = tw_plan_ffn(plan);
    if (!*f)
        return tw_error(plan ? plan->ctx : NULL, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: not a CUDA plan");
    TW_TRY(tw_cu_enter(plan->ctx, sc));
    twell_status st = tw_cuda_synchronize(plan->ctx);
    if (st != TWELL_OK)
        tw_cu_leave(plan->ctx, sc);
    return st;
}

twell_status tw_cuda_ffn_set_kernel(twell_plan *plan, tw_ffn_kernel k) {
    tw_ffn *f;
    tw_cu_scope sc;
    TW_TRY(tw_hook_enter(plan, &f, &sc));
    twell_status st = TWELL_OK;
    if (k == TW_FFN_ROWS && !f->tiled)
        st = tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED,
                      "ffn_infer: the row kernel of ffn_fused is not loaded for this plan");
    else if (k == TW_FFN_GENERIC && !f->generic)
        st = tw_ffn_load_generic(plan, f);
    if (st == TWELL_OK)
        f->kernel = k;
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

void tw_cuda_ffn_prepare(twell_plan *plan, size_t M, tw_ffn_cfg *out) {
    tw_ffn *f = tw_plan_ffn(plan);
    if (out)
        memset(out, 0, sizeof *out);
    if (!f || !f->tiled)
        return;
    tw_cu_scope sc;
    if (tw_cu_enter(plan->ctx, &sc) != TWELL_OK)
        return;
    tw_ffn_tk *tk = tw_ffn_module_for(plan, f, M);
    if (out)
        *out = tk->cfg;
    tw_cu_leave(plan->ctx, &sc);
}

twell_status tw_cuda_ffn_force(twell_plan *plan, tw_ffn_tk *tk) {
    tw_ffn *f;
    tw_cu_scope sc;
    TW_TRY(tw_hook_enter(plan, &f, &sc));
    twell_status st = TWELL_OK;
    if (!f->tiled)
        st = tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED,
                      "ffn_infer: this plan has no tiled kernels to replace");
    else
        f->forced = tk, f->cur = NULL; /* copy from it (or the bucket's) at the next call */
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

twell_status tw_cuda_ffn_set_capacity(twell_plan *plan, size_t pair_cap, size_t ovf_cap) {
    tw_ffn *f;
    tw_cu_scope sc;
    TW_TRY(tw_hook_enter(plan, &f, &sc));
    twell_status st = TWELL_OK;
    f->pending = 0;
    memset(f->hflags, 0, 16u * (TW_SLOTS + 1u));
    if (pair_cap == 0 && ovf_cap == 0) {
        f->pinned = 0;
        for (size_t i = 0; i < f->ntk; i++) /* the next call measures again */
            f->tk[i].probed = 0;
        if (f->forced)
            f->forced->probed = 0;
    } else if (!tw_ffn_set_pairs(plan, f, pair_cap) || !tw_ffn_set_ovf(plan, f, ovf_cap, ovf_cap)) {
        st = tw_error(plan->ctx, TWELL_ERR_NO_MEMORY, "ffn_infer: cannot allocate the workspace");
    } else {
        f->pinned = 1;
    }
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

twell_status tw_cuda_ffn_flags(twell_plan *plan, uint32_t out[4]) {
    tw_ffn *f;
    tw_cu_scope sc;
    memset(out, 0, 16);
    TW_TRY(tw_hook_enter(plan, &f, &sc));
    twell_status st = TWELL_OK;
    if (f->last_flag)
        st = tw_cuda_memcpy_dtoh(plan->ctx, out, f->last_flag, 16);
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

int tw_cuda_ffn_tiled(const twell_plan *plan) {
    const tw_ffn *f = tw_plan_ffn(plan);
    return f ? f->tiled : 0;
}

int tw_cuda_ffn_modules(const twell_plan *plan) {
    const tw_ffn *f = tw_plan_ffn(plan);
    return f ? f->modules : 0;
}

size_t tw_cuda_ffn_workspace_bytes(const twell_plan *plan) {
    const tw_ffn *f = tw_plan_ffn(plan);
    if (!f)
        return 0;
    size_t a, b, total = 0;
    if (f->ws_rows) {
        tw_rows_layout L;
        tw_rows_layout_of(f, f->rows_cap, &L);
        total += L.bytes;
    }
    if (f->ws_ovf)
        total += tw_ovf_bytes(plan, f->ovf_cap, f->orow_cap, &a, &b);
    if (f->ws_pairs) {
        tw_pairs_layout P;
        tw_pairs_layout_of(plan, f, f->pair_cap, &P);
        total += P.bytes;
    }
    return total;
}

int tw_cuda_ffn_probes(const twell_plan *plan) {
    const tw_ffn *f = tw_plan_ffn(plan);
    return f ? f->probes : 0;
}
