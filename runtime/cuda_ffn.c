/*
 * cuda_ffn.c — twell_ffn_infer on CUDA: loads ffn_fused (or ffn_rows) once per plan, keeps the
 * workspace the tiled pipeline needs, and enqueues the launch sequence of ffn_fused.cu.lua's
 * header on the caller's stream without synchronising the host in the steady state.
 */
#include "cuda_ffn.h"

#include "cuda_backend.h"
#include "jit.h"

#include <stdlib.h>
#include <string.h>

/* The kernels of ffn_fused, in launch order (phase_a and reduce exist in gated modules only). */
enum {
    TW_FN_DETECT,
    TW_FN_OSCAN,
    TW_FN_OGATE,
    TW_FN_SIZES,
    TW_FN_SCAN,
    TW_FN_BUILD,
    TW_FN_PHASE_A,
    TW_FN_REDUCE,
    TW_FN_PHASE_B,
    TW_FN_ROWS,
    TW_FN_COUNT
};
static const char *const tw_fn_names[TW_FN_COUNT] = {
    "twell_ffn_ovf_detect", "twell_ffn_ovf_scan", "twell_ffn_ovf_gate", "twell_ffn_sizes",
    "twell_ffn_scan",       "twell_ffn_build",    "twell_ffn_phase_a",  "twell_ffn_reduce",
    "twell_ffn_phase_b",    "twell_ffn_rows"};

/* twell_ffn_cfg[12] of the module, in the template's order. */
enum {
    TW_CFG_CN,
    TW_CFG_GPWA,
    TW_CFG_GPWB,
    TW_CFG_DCAPA,
    TW_CFG_DCAPB,
    TW_CFG_SMEM_A,
    TW_CFG_SMEM_B,
    TW_CFG_SMEM_OG,
    TW_CFG_BW,
    TW_CFG_NC,
    TW_CFG_TPC,
    TW_CFG_GATED,
    TW_CFG_COUNT
};

#define TW_SMEM_MAX 232448u /* the template's shared-memory ceiling (227 KB, sm_90) */
#define TW_SLOTS 16u        /* pinned flag slots: chunk c of a call writes slot c % TW_SLOTS */
#define TW_PAIR_MAX ((size_t)0xffffffffu - 1024u) /* offsets and pair_cap are 32-bit */

struct tw_ffn {
    tw_ffn_kernel kernel; /* forced by the hook; AUTO normally */
    int tiled;            /* ffn_fused loaded */
    tw_CUmodule mod;
    tw_CUfunction fn[TW_FN_COUNT];
    uint32_t cfg[TW_CFG_COUNT];
    tw_CUmodule gmod; /* ffn_rows, loaded when a call needs it */
    tw_CUfunction generic;
    int modules;
    uint32_t NT, NSL;
    /* Workspace: three device buffers, grown independently (layouts below). */
    void *ws_rows; /* control words + per-row arrays for rows_cap rows */
    size_t rows_cap;
    void *ws_ovf; /* overflowing row-tiles recomputed: ovf_cap of them */
    size_t ovf_cap;
    void *ws_pairs; /* active pair lists: pair_cap slots */
    size_t pair_cap;
    size_t probed; /* largest chunk whose needs a probe measured */
    int pinned;    /* capacities fixed by the hook: no probe, no growth */
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
    uint32_t *flag, *ovf_cnt, *ovf_base, *item_base, *ovf_rows, *ovf_slot, *sizes, *offsets;
    uint32_t *ovf_nnz;
    uint16_t *ovf_g, *desc, *gv;
    float *h, *partial;
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
    size_t flag, ovf_cnt, ovf_base, item_base, ovf_rows, ovf_slot, sizes, offsets, bytes;
} tw_rows_layout;

static void tw_rows_layout_of(const tw_ffn *f, size_t R, tw_rows_layout *L) {
    size_t NT = f->NT, NL = (R + 7) / 8 * f->cfg[TW_CFG_NC], o = 0;
    L->flag = o, o += tw_al(16);
    L->ovf_cnt = o, o += tw_al(4 * NT);
    L->ovf_base = o, o += tw_al(4 * (NT + 1));
    L->item_base = o, o += tw_al(4 * (NT + 1));
    L->ovf_rows = o, o += tw_al(4 * NT * R);
    L->ovf_slot = o, o += tw_al(4 * NT * R);
    L->sizes = o, o += tw_al(4 * NL);
    L->offsets = o, o += tw_al(4 * (NL + 1));
    L->bytes = o;
}

/* ovf_nnz u32[cap], ovf_g u16[cap·T]. */
static size_t tw_ovf_bytes(const twell_plan *plan, size_t cap, size_t *g_off) {
    *g_off = tw_al(4 * cap);
    return *g_off + tw_al(2 * cap * plan->shape.T);
}

/* desc u16[P+64], gv u16[P+64]; gated: h f32[P+64], partial f32[NSL·P]. */
static size_t tw_pairs_bytes(const twell_plan *plan, const tw_ffn *f, size_t P, size_t *gv_off,
                             size_t *h_off, size_t *p_off) {
    size_t o = tw_al(2 * (P + 64));
    *gv_off = o, o += tw_al(2 * (P + 64));
    *h_off = *p_off = 0;
    if (plan->shape.gated) {
        *h_off = o, o += tw_al(4 * (P + 64));
        *p_off = o, o += tw_al(4 * (size_t)f->NSL * P);
    }
    return o;
}

static void tw_ffn_ws_of(const twell_plan *plan, const tw_ffn *f, tw_ffn_ws *w) {
    memset(w, 0, sizeof *w);
    char *a = f->ws_rows, *b = f->ws_ovf, *c = f->ws_pairs;
    if (a) {
        tw_rows_layout L;
        tw_rows_layout_of(f, f->rows_cap, &L);
        w->flag = (uint32_t *)(void *)(a + L.flag);
        w->ovf_cnt = (uint32_t *)(void *)(a + L.ovf_cnt);
        w->ovf_base = (uint32_t *)(void *)(a + L.ovf_base);
        w->item_base = (uint32_t *)(void *)(a + L.item_base);
        w->ovf_rows = (uint32_t *)(void *)(a + L.ovf_rows);
        w->ovf_slot = (uint32_t *)(void *)(a + L.ovf_slot);
        w->sizes = (uint32_t *)(void *)(a + L.sizes);
        w->offsets = (uint32_t *)(void *)(a + L.offsets);
    }
    if (b) {
        size_t g_off;
        (void)tw_ovf_bytes(plan, f->ovf_cap, &g_off);
        w->ovf_nnz = (uint32_t *)(void *)b;
        w->ovf_g = (uint16_t *)(void *)(b + g_off);
    }
    if (c) {
        size_t gv_off, h_off, p_off;
        (void)tw_pairs_bytes(plan, f, f->pair_cap, &gv_off, &h_off, &p_off);
        w->desc = (uint16_t *)(void *)c;
        w->gv = (uint16_t *)(void *)(c + gv_off);
        if (plan->shape.gated) {
            w->h = (float *)(void *)(c + h_off);
            w->partial = (float *)(void *)(c + p_off);
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

static int tw_ffn_set_ovf(twell_plan *plan, tw_ffn *f, size_t cap) {
    size_t g_off;
    if (cap > 0xffffffffu)
        cap = 0xffffffffu;
    if (!tw_ffn_realloc(plan->ctx, &f->ws_ovf, tw_ovf_bytes(plan, cap, &g_off), "overflow"))
        return 0;
    f->ovf_cap = cap;
    return 1;
}

static int tw_ffn_set_pairs(twell_plan *plan, tw_ffn *f, size_t cap) {
    size_t a, b, c;
    if (cap > TW_PAIR_MAX)
        cap = TW_PAIR_MAX;
    if (!tw_ffn_realloc(plan->ctx, &f->ws_pairs, tw_pairs_bytes(plan, f, cap, &a, &b, &c),
                        "pair list"))
        return 0;
    f->pair_cap = cap;
    return 1;
}

/* ---- module loading ---- */

static twell_status tw_ffn_load_generic(twell_plan *plan, tw_ffn *f) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_param params[] = {
        {"K", NULL, (long long)s->K},
        {"N", NULL, (long long)s->N},
        {"T", NULL, (long long)s->T},
        {"C", NULL, (long long)s->C},
        {"dtype", s->dtype == TWELL_DTYPE_BF16 ? "bf16" : "fp16", 0},
        {"gated", NULL, (long long)s->gated},
    };
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    twell_status st = tw_jit_cubin(ctx, "ffn_rows", params, sizeof params / sizeof params[0],
                                   ctx->cuda->arch, &cubin);
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

/* The tile configuration for this device: the largest weight chunk (CN neurons) whose two
 * shared-memory buffers leave room for staged lists, list capacities filling the rest (the
 * template's own defaults on a 227 KB device). Returns 0 if the device has too little. */
static int tw_ffn_tile_config(const twell_shape *s, const tw_cuda *dev,
                              uint32_t want[TW_CFG_COUNT]) {
    uint32_t smem = dev->smem_optin > 0 ? (uint32_t)dev->smem_optin : 0u;
    if (smem > TW_SMEM_MAX)
        smem = TW_SMEM_MAX;
    uint32_t og = 2u * (s->T * 128u + 64u * 128u), vb = s->gated ? 6u : 4u;
    static const uint32_t cns[] = {768, 512, 256};
    memset(want, 0, TW_CFG_COUNT * sizeof *want);
    if (og > smem)
        return 0;
    for (size_t i = 0; i < sizeof cns / sizeof cns[0]; i++) {
        uint32_t wb = 2u * cns[i] * 128u;
        if (smem < wb + 16384u)
            continue;
        uint32_t NT = s->N / s->T, tpc = cns[i] / s->T;
        want[TW_CFG_CN] = cns[i];
        want[TW_CFG_GPWA] = 8;
        want[TW_CFG_GPWB] = 4;
        want[TW_CFG_DCAPA] = (smem - wb) / 4u / 16u * 16u;
        want[TW_CFG_DCAPB] = (smem - wb) / (2u * vb) / 16u * 16u;
        want[TW_CFG_SMEM_A] = wb + 4u * want[TW_CFG_DCAPA];
        want[TW_CFG_SMEM_B] = wb + 2u * vb * want[TW_CFG_DCAPB];
        want[TW_CFG_SMEM_OG] = og;
        want[TW_CFG_BW] = s->C == 2 ? 2u : 4u;
        want[TW_CFG_NC] = (NT + tpc - 1) / tpc;
        want[TW_CFG_TPC] = tpc;
        want[TW_CFG_GATED] = s->gated ? 1u : 0u;
        return 1;
    }
    return 0;
}

/* Loads ffn_fused. TWELL_ERR_UNSUPPORTED when the shape or device cannot run it. */
static twell_status tw_ffn_load_tiled(twell_plan *plan, tw_ffn *f) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    const tw_cuda *dev = ctx->cuda;
    uint32_t want[TW_CFG_COUNT];
    if (s->K % 64u != 0)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: K=%u is not a multiple of 64 (tiled kernels)", s->K);
    if (dev->cc_major < 8)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: %s is below sm_80 (the tiled kernels use bf16 mma.sync and "
                        "cp.async)",
                        dev->arch);
    if (!tw_ffn_tile_config(s, dev, want))
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: %d bytes of shared memory per block are too few for the tiled "
                        "kernels",
                        dev->smem_optin);
    tw_param params[] = {
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
    };
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    twell_status st =
        tw_jit_cubin(ctx, "ffn_fused", params, sizeof params / sizeof params[0], dev->arch, &cubin);
    if (st != TWELL_OK)
        return st;
    st = tw_cu_module_load(ctx, cubin.data, &f->mod);
    tw_cubin_free(&cubin);
    if (st != TWELL_OK)
        return st;
    f->modules++;
    for (int i = 0; i < TW_FN_COUNT && st == TWELL_OK; i++) {
        if (!s->gated && (i == TW_FN_PHASE_A || i == TW_FN_REDUCE))
            continue;
        st = tw_cu_module_function(ctx, f->mod, tw_fn_names[i], &f->fn[i]);
    }
    /* The module's own configuration is the truth; every value is one we passed or derived
     * with the template's formulas, so a lookup failure (a variable the compiler dropped) can
     * fall back to ours, while a disagreement is a bug. */
    void *dcfg = NULL;
    size_t bytes = 0;
    if (st == TWELL_OK) {
        if (tw_cu_module_global(ctx, f->mod, "twell_ffn_cfg", &dcfg, &bytes) != TWELL_OK ||
            bytes != sizeof f->cfg) {
            tw_log(ctx, TWELL_LOG_INFO,
                   "ffn_infer: twell_ffn_cfg not readable from the module (%s); using the "
                   "launcher's configuration",
                   bytes ? "size differs" : twell_ctx_errmsg(ctx));
            memcpy(f->cfg, want, sizeof f->cfg);
        } else {
            st = tw_cuda_memcpy_dtoh(ctx, f->cfg, dcfg, sizeof f->cfg);
        }
    }
    for (int i = 0; i < TW_CFG_COUNT && st == TWELL_OK; i++)
        if (f->cfg[i] != want[i])
            st = tw_error(ctx, TWELL_ERR_INTERNAL,
                          "ffn_infer: twell_ffn_cfg[%d] = %u, expected %u (template and launcher "
                          "disagree)",
                          i, f->cfg[i], want[i]);
    if (st == TWELL_OK)
        st = tw_cu_func_set_attribute(ctx, f->fn[TW_FN_OGATE],
                                      TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      (int)f->cfg[TW_CFG_SMEM_OG]);
    if (st == TWELL_OK)
        st = tw_cu_func_set_attribute(ctx, f->fn[TW_FN_PHASE_B],
                                      TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      (int)f->cfg[TW_CFG_SMEM_B]);
    if (st == TWELL_OK && s->gated)
        st = tw_cu_func_set_attribute(ctx, f->fn[TW_FN_PHASE_A],
                                      TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      (int)f->cfg[TW_CFG_SMEM_A]);
    if (st != TWELL_OK) {
        tw_cu_module_unload(f->mod);
        f->mod = NULL;
        f->modules--;
        memset(f->fn, 0, sizeof f->fn);
        return st;
    }
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
    tw_cu_module_unload(f->mod);
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

/* Steps 1-6 of the launch contract for one chunk of m rows. */
static twell_status tw_ffn_prepass(twell_plan *plan, tw_ffn *f, tw_ffn_ws *w, int m, const void *x,
                                   const uint32_t *packed, const void *wp, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    size_t sms = (size_t)ctx->cuda->sm_count;
    size_t NL = tw_cdiv((size_t)m, 8) * f->cfg[TW_CFG_NC];
    unsigned ovf_cap = (unsigned)f->ovf_cap, pair_cap = (unsigned)f->pair_cap;
    TW_TRY(tw_cuda_memset_d32(ctx, w->ovf_cnt, 0u, f->NT, stream));
    void *a_detect[] = {(void *)&packed, &m, &w->ovf_cnt, &w->ovf_rows, &w->ovf_slot};
    TW_TRY(tw_go(plan, f->fn[TW_FN_DETECT], tw_min(tw_cdiv((size_t)m * f->NT, 256), 16 * sms), 1,
                 256, 0, stream, a_detect));
    void *a_oscan[] = {&w->ovf_cnt, &w->ovf_base, &w->item_base, &w->ovf_nnz, &w->flag, &ovf_cap};
    TW_TRY(tw_go(plan, f->fn[TW_FN_OSCAN], 1, 1, 256, 0, stream, a_oscan));
    void *a_ogate[] = {(void *)&x,   (void *)&wp,   &m,        &w->ovf_cnt, &w->ovf_rows,
                       &w->ovf_base, &w->item_base, &w->ovf_g, &w->ovf_nnz, &w->flag};
    TW_TRY(
        tw_go(plan, f->fn[TW_FN_OGATE], 2 * sms, 1, 256, f->cfg[TW_CFG_SMEM_OG], stream, a_ogate));
    void *a_sizes[] = {(void *)&packed, &m,        &w->ovf_slot, &w->ovf_base,
                       &w->ovf_nnz,     &w->sizes, &w->flag};
    TW_TRY(tw_go(plan, f->fn[TW_FN_SIZES], tw_cdiv(NL, 8), 1, 256, 0, stream, a_sizes));
    void *a_scan[] = {&w->sizes, &m, &w->offsets, &w->flag, &pair_cap};
    return tw_go(plan, f->fn[TW_FN_SCAN], 1, 1, 1024, 0, stream, a_scan);
}

/* Steps 7-11 for one chunk of m rows. */
static twell_status tw_ffn_phases(twell_plan *plan, tw_ffn *f, tw_ffn_ws *w, int m, const void *x,
                                  const uint32_t *packed, const void *wp, const void *wu,
                                  const void *wd, void *y, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    size_t sms = (size_t)ctx->cuda->sm_count;
    size_t NG = tw_cdiv((size_t)m, 8), NL = NG * f->cfg[TW_CFG_NC];
    unsigned pair_cap = (unsigned)f->pair_cap, bw = f->cfg[TW_CFG_BW];
    int fallback_only = 1;
    void *a_build[] = {(void *)&packed, &m,        &w->ovf_slot, &w->ovf_base, &w->ovf_g,
                       &w->offsets,     &w->sizes, &w->desc,     &w->gv,       &w->flag};
    TW_TRY(tw_go(plan, f->fn[TW_FN_BUILD], tw_cdiv(NL, bw), 1, bw * 32u, 0, stream, a_build));
    float *h = NULL;
    if (plan->shape.gated) {
        void *a_pa[] = {(void *)&x, (void *)&wu, &m,        &w->desc, &w->offsets,
                        &w->sizes,  &w->partial, &pair_cap, &w->flag};
        TW_TRY(tw_go(plan, f->fn[TW_FN_PHASE_A], tw_cdiv(NG, 16u * f->cfg[TW_CFG_GPWA]), f->NSL,
                     512, f->cfg[TW_CFG_SMEM_A], stream, a_pa));
        void *a_red[] = {&w->gv, &w->partial, &pair_cap, &w->offsets, &m, &w->h, &w->flag};
        TW_TRY(tw_go(plan, f->fn[TW_FN_REDUCE], 8 * sms, 1, 256, 0, stream, a_red));
        h = w->h;
    }
    void *a_pb[] = {(void *)&wd, &m, &w->desc, &w->gv, &h, &w->offsets, &w->sizes, &y, &w->flag};
    TW_TRY(tw_go(plan, f->fn[TW_FN_PHASE_B], tw_cdiv(NG, 16u * f->cfg[TW_CFG_GPWB]), f->NSL, 512,
                 f->cfg[TW_CFG_SMEM_B], stream, a_pb));
    void *a_rows[] = {(void *)&x, (void *)&packed, (void *)&wp,   (void *)&wu, (void *)&wd, &y,
                      &m,         &w->flag,        &fallback_only};
    return tw_go(plan, f->fn[TW_FN_ROWS], tw_min(tw_cdiv((size_t)m, 8), 8 * sms), 1, 256, 0, stream,
                 a_rows);
}

/* Pair slots and overflow slots a chunk needed, from its flag words. When the overflow buffer was
 * too small (flag bit 0) the sizes kernel counted overflowing row-tiles as empty, so the pair count
 * is a lower bound: *exact is cleared, and only the overflow need is reliable. */
static void tw_ffn_needs(const uint32_t *fl, size_t *pairs, size_t *ovf, int *exact) {
    if (fl[0] & 1u)
        *exact = 0;
    else if (fl[1] > *pairs)
        *pairs = fl[1];
    if (fl[2] > *ovf)
        *ovf = fl[2];
}

static size_t tw_grow_to(size_t need, size_t slack) { return need + need / 4 + slack; }

/* Reads the flag copies of the previous call if its event has completed (never waits) and grows
 * the buffers that were too small. The plan's earlier work has then all finished (calls are
 * ordered through the event), so the old buffers can be freed. A call whose overflow buffer was
 * too small did not count its pairs: the next call probes again (one synchronisation) rather than
 * allocating for T entries per overflowing row-tile. */
static twell_status tw_ffn_collect(twell_plan *plan, tw_ffn *f) {
    if (!f->pending)
        return TWELL_OK;
    int done = 0;
    TW_TRY(tw_cuda_event_query(plan->ctx, f->done, &done));
    if (!done)
        return TWELL_OK;
    f->pending = 0;
    size_t pairs = 0, ovf = 0;
    int exact = 1;
    for (unsigned i = 0; i < TW_SLOTS; i++) {
        tw_ffn_needs(f->hflags + 4 * i, &pairs, &ovf, &exact);
        memset(f->hflags + 4 * i, 0, 16);
    }
    if (f->pinned)
        return TWELL_OK;
    if (ovf > f->ovf_cap)
        (void)tw_ffn_set_ovf(plan, f, tw_grow_to(ovf, 64));
    if (pairs > f->pair_cap)
        (void)tw_ffn_set_pairs(plan, f, tw_grow_to(pairs, 1024));
    if (!exact)
        f->probed = 0;
    return TWELL_OK;
}

/* The first chunk of a new largest size: run the pre-pass, read the exact needs (one host
 * synchronisation), grow, and run the pre-pass again with buffers that fit. An overflow buffer
 * too small is grown first (the pair count is only known once the overflowing row-tiles fit). */
static twell_status tw_ffn_probe(twell_plan *plan, tw_ffn *f, tw_ffn_ws *w, int m, const void *x,
                                 const uint32_t *packed, const void *wp, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    uint32_t *hf = f->hflags + 4 * TW_SLOTS;
    f->probes++;
    for (int iter = 0; iter < 4; iter++) {
        TW_TRY(tw_ffn_prepass(plan, f, w, m, x, packed, wp, stream));
        TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, hf, w->flag, 16, stream));
        TW_TRY(tw_cuda_stream_synchronize(ctx, stream));
        size_t pairs = 0, ovf = 0;
        int exact = 1, grew = 0;
        tw_ffn_needs(hf, &pairs, &ovf, &exact);
        if (ovf > f->ovf_cap)
            grew |= tw_ffn_set_ovf(plan, f, tw_grow_to(ovf, 64));
        if (exact && pairs > f->pair_cap)
            grew |= tw_ffn_set_pairs(plan, f, tw_grow_to(pairs, 1024));
        if (!grew)
            return TWELL_OK;
        tw_ffn_ws_of(plan, f, w);
    }
    /* still growing after four rounds (a failed allocation stops earlier): the pre-pass above
     * ran with the current buffers, and the device flag sends what does not fit to the fallback */
    return tw_ffn_prepass(plan, f, w, m, x, packed, wp, stream);
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
        (void)tw_ffn_set_ovf(plan, f, R * f->NT / 64 + 64);
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
    int probe = !f->pinned && chunk > f->probed;
    tw_ffn_ws w;
    tw_ffn_ws_of(plan, f, &w);
    size_t c = 0;
    for (size_t r0 = 0; r0 < M; r0 += TW_FFN_CHUNK, c++) {
        int m = (int)tw_min(M - r0, TW_FFN_CHUNK);
        const void *xc = (const char *)x + r0 * s->K * 2u;
        const uint32_t *pc = packed + r0 * (s->N / s->C);
        void *yc = (char *)y + r0 * s->K * 2u;
        if (probe)
            TW_TRY(tw_ffn_probe(plan, f, &w, m, xc, pc, wp, stream));
        else
            TW_TRY(tw_ffn_prepass(plan, f, &w, m, xc, pc, wp, stream));
        TW_TRY(tw_ffn_phases(plan, f, &w, m, xc, pc, wp, wu, wd, yc, stream));
        TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, f->hflags + 4 * (c % TW_SLOTS), w.flag, 16, stream));
    }
    if (probe && chunk > f->probed)
        f->probed = chunk;
    f->last_flag = w.flag;
    f->pending = 1;
    return TWELL_OK;
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

twell_status tw_cuda_ffn_set_capacity(twell_plan *plan, size_t pair_cap, size_t ovf_cap) {
    tw_ffn *f;
    tw_cu_scope sc;
    TW_TRY(tw_hook_enter(plan, &f, &sc));
    twell_status st = TWELL_OK;
    f->pending = 0;
    memset(f->hflags, 0, 16u * (TW_SLOTS + 1u));
    if (pair_cap == 0 && ovf_cap == 0) {
        f->pinned = 0;
        f->probed = 0; /* the next call measures again */
    } else if (!tw_ffn_set_pairs(plan, f, pair_cap) || !tw_ffn_set_ovf(plan, f, ovf_cap)) {
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
    size_t a, b, c, total = 0;
    if (f->ws_rows) {
        tw_rows_layout L;
        tw_rows_layout_of(f, f->rows_cap, &L);
        total += L.bytes;
    }
    if (f->ws_ovf)
        total += tw_ovf_bytes(plan, f->ovf_cap, &a);
    if (f->ws_pairs)
        total += tw_pairs_bytes(plan, f, f->pair_cap, &a, &b, &c);
    return total;
}

int tw_cuda_ffn_probes(const twell_plan *plan) {
    const tw_ffn *f = tw_plan_ffn(plan);
    return f ? f->probes : 0;
}
