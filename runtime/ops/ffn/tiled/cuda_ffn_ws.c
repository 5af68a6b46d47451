/*
 * cuda_ffn_ws.c — the tiled pipeline's workspace: the layout of its three device buffers (rows,
 * overflow, pair lists) for their capacities, and replacing a buffer while earlier calls may still
 * read the old one. When a buffer grows is cuda_ffn.c's (tw_ffn_collect, tw_ffn_probe).
 */
#include "cuda_ffn_ws.h"

#include <string.h>

/* ---- workspace layout (pieces 256-byte aligned, as the launch contract asks) ---- */

typedef struct {
    size_t flag, cnt, ovf_base, item_base, ovf_rows, ovf_slot, orow_idx, orows, sizes, offsets,
        bsum, bbase, bytes;
} tw_rows_layout;

static void tw_rows_layout_of(const tw_ffn *f, size_t R, tw_rows_layout *L) {
    size_t NT = f->NT, NG = (R + 7) / 8, NL = NG * f->nc_ws, o = 0;
    size_t NBC = (NG + 7) / 8 * f->nc_ws; /* per-block list sums, chunk-major */
    L->flag = o, o += tw_al(16);
    L->cnt = o, o += tw_al(4 * (NT + 4)); /* + the u64 total of active values */
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

void tw_ffn_ws_of(const twell_plan *plan, const tw_ffn *f, tw_ffn_ws *w) {
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

/* Replaces *buf by a new device buffer of `bytes`. The old one is freed at once when the plan's
 * work is idle, else (f->retiring: earlier calls may still read it) put on the retired list,
 * freed once f->retire completes; kept until release instead once a captured graph may use it.
 * On failure keeps the old one, logs a warning and returns 0: chunks that do not fit then run
 * the exact fallback. */
static int tw_ffn_realloc(twell_ctx *ctx, tw_ffn *f, void **buf, size_t bytes, const char *what) {
    void *p = NULL;
    if (tw_cuda_malloc(ctx, bytes, &p) != TWELL_OK) {
        tw_log(ctx, TWELL_LOG_WARN,
               "ffn_infer: cannot grow the %s workspace to %zu bytes (%s); chunks that do not fit "
               "run the exact row kernel",
               what, bytes, tw_errmsg(ctx));
        return 0;
    }
    if (f->retiring && *buf && !f->captured && f->nretired < 3)
        f->retired[f->nretired++] = *buf;
    else /* (a full retired list never happens: kept to the end rather than freed in use) */
        tw_cuda_keep_free(ctx, &f->keep, f->captured || f->retiring, *buf);
    *buf = p;
    return 1;
}

static int tw_ffn_set_rows(twell_plan *plan, tw_ffn *f, size_t R) {
    tw_rows_layout L;
    tw_rows_layout_of(f, R, &L);
    if (!tw_ffn_realloc(plan->ctx, f, &f->ws_rows, L.bytes, "row"))
        return 0;
    f->rows_cap = R;
    f->last_flag = NULL;
    f->cnt_dirty = 1; /* the scan keeps cnt zero from now on; a new buffer needs one memset */
    return 1;
}

int tw_ffn_set_ovf(twell_plan *plan, tw_ffn *f, size_t cap, size_t orows) {
    size_t ex_off, y_off;
    if (cap > 0xffffffffu)
        cap = 0xffffffffu;
    if (orows > 0xffffffffu)
        orows = 0xffffffffu;
    if (!tw_ffn_realloc(plan->ctx, f, &f->ws_ovf, tw_ovf_bytes(plan, cap, orows, &ex_off, &y_off),
                        "overflow"))
        return 0;
    f->ovf_cap = cap;
    f->orow_cap = orows;
    return 1;
}

int tw_ffn_set_pairs(twell_plan *plan, tw_ffn *f, size_t cap) {
    tw_pairs_layout L;
    if (cap > TW_PAIR_MAX)
        cap = TW_PAIR_MAX;
    tw_pairs_layout_of(plan, f, cap, &L);
    if (!tw_ffn_realloc(plan->ctx, f, &f->ws_pairs, L.bytes, "pair list"))
        return 0;
    f->pair_cap = cap;
    return 1;
}

twell_status tw_ffn_reserve_rows(twell_plan *plan, tw_ffn *f, size_t R) {
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

size_t tw_ffn_ws_bytes(const twell_plan *plan, const tw_ffn *f) {
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
