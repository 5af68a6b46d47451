/*
 * cuda_train_tiled.c — tiled U and dT for CUDA training (cuda_train_tiled.h): loads the plan
 * shape's ffn_fused module (default tile configuration), owns the list workspace and enqueues the
 * launch contract's steps 1-4 and 7 (templates/ffn/ffn_fused.cu.lua) plus train_ffn's
 * twell_train_udt. The overflow steps (ovf_gu, ovf_down) and phase B are not run: the training
 * kernels handle overflowing row-tiles themselves.
 */
#include "cuda_train_tiled.h"

#include "cuda_ffn.h"
#include "cuda_ffn_int.h"

#include <stdlib.h>
#include <string.h>

struct tw_ctt {
    int tried, ok; /* module load attempted / succeeded */
    tw_ffn_tk tk;
    void *ws; /* rows part: control words and per-row arrays for ws_rows rows */
    size_t ws_rows, ws_bytes;
    void *pairs; /* desc, eidx, gv, partial for pair_cap slots */
    size_t pair_cap, pairs_bytes;
    size_t lists_M; /* rows of the lists built by the last forward (0: none) */
    /* pieces of ws / pairs for lists_M */
    uint32_t *flag, *cnt, *ovf_base, *item_base, *ovf_rows, *ovf_slot, *orow_idx, *orows, *sizes,
        *offsets, *bsum, *bbase, *desc, *eidx;
    uint16_t *gv;
    float *partial;
};

#define TW_CTT_MAX_M ((size_t)65536) /* the fused kernels' int indices (TW_FFN_CHUNK) */

int tw_ctt_ready(twell_plan *plan, tw_ctt **tp, size_t M) {
    twell_ctx *ctx = plan->ctx;
    if (!*tp) {
        *tp = calloc(1, sizeof **tp);
        if (!*tp)
            return 0;
    }
    tw_ctt *c = *tp;
    if (!c->tried) {
        c->tried = 1;
        twell_shape s = plan->shape;
        s.gated = 1;
        tw_ffn_cfg cfg;
        if (tw_ffn_cfg_default(&s, ctx->cuda, &cfg) != 0) {
            tw_log(ctx, TWELL_LOG_INFO,
                   "training: tiled U/dT not available for this shape (fused kernels); per-entry "
                   "kernels run");
            return 0;
        }
        twell_status st = tw_ffn_tk_load(ctx, &s, &cfg, NULL, &c->tk);
        if (st != TWELL_OK) {
            tw_log(ctx, TWELL_LOG_WARN,
                   "training: tiled U/dT module not loaded (%s); per-entry kernels run",
                   tw_errmsg(ctx));
            return 0;
        }
        c->ok = 1;
    }
    return c->ok && M > 0 && M <= TW_CTT_MAX_M;
}

const uint32_t *tw_ctt_flag(const tw_ctt *tp) { return tp ? tp->flag : NULL; }

size_t tw_ctt_bytes(const tw_ctt *tp) { return tp ? tp->ws_bytes + tp->pairs_bytes : 0; }

void tw_ctt_release(twell_ctx *ctx, tw_ctt *tp) {
    if (!tp)
        return;
    tw_cuda_free(ctx, tp->ws);
    tw_cuda_free(ctx, tp->pairs);
    tw_ffn_tk_unload(&tp->tk);
    free(tp);
}

/* Replaces *buf by `bytes` of device memory when it holds fewer (device synchronised first:
 * earlier work may read the old buffer). */
static twell_status tw_ctt_grow(twell_ctx *ctx, void **buf, size_t *have, size_t bytes) {
    if (*buf && *have >= bytes)
        return TWELL_OK;
    twell_status st = tw_cuda_synchronize(ctx);
    if (st != TWELL_OK)
        return st;
    tw_cuda_free(ctx, *buf);
    *buf = NULL;
    *have = 0;
    st = tw_cuda_malloc(ctx, bytes, buf);
    if (st != TWELL_OK)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                        "twell_ffn_forward_train: cannot allocate %zu bytes of device memory for "
                        "the tiled U/dT lists",
                        bytes);
    *have = bytes;
    return TWELL_OK;
}

/* ffn_fused kernels launched plainly (training's own kernels around them keep no PDL rule) */
static twell_status tw_ctt_go(twell_ctx *ctx, tw_CUfunction fn, size_t gx, unsigned gy,
                              unsigned block, unsigned smem, twell_stream stream, void **args) {
    return tw_cu_launch_grid(ctx, fn, gx, gy, block, smem, 0u, stream, args);
}

twell_status tw_ctt_phase_a(twell_plan *plan, tw_ctt *c, size_t M, const void *a, const void *w,
                            twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    if (c->lists_M != M)
        return tw_error(ctx, TWELL_ERR_INTERNAL,
                        "training: the tiled U/dT lists are not those of this forward");
    const uint32_t *cfg = c->tk.words;
    size_t NG = tw_cdiv(M, TW_FFN_GT);
    int m = (int)M;
    unsigned pair_cap = (unsigned)c->pair_cap;
    void *args[] = {(void *)&a, (void *)&w,  &m,        &c->desc, &c->offsets,
                    &c->sizes,  &c->partial, &pair_cap, &c->flag};
    return tw_ctt_go(ctx, c->tk.fn[TW_FN_PHASE_A],
                     tw_cdiv(NG, (size_t)cfg[TW_CFG_NWA] * cfg[TW_CFG_GPWA]), plan->shape.K / 64u,
                     32u * cfg[TW_CFG_NWA], cfg[TW_CFG_SMEM_A], stream, args);
}

twell_status tw_ctt_udt(twell_plan *plan, tw_ctt *c, size_t M, float *out, tw_CUfunction udt,
                        twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    if (c->lists_M != M)
        return tw_error(ctx, TWELL_ERR_INTERNAL,
                        "training: the tiled lists are not those of M rows");
    size_t NL = tw_cdiv(M, TW_FFN_GT) * c->tk.words[TW_CFG_NC];
    const uint32_t *total = c->offsets + NL; /* the scan's slot total */
    long long ps = (long long)c->pair_cap;
    size_t gx = tw_cdiv(c->pair_cap, 256), cap = (size_t)ctx->cuda->sm_count * 8u;
    void *args[] = {&c->gv, &c->eidx, &c->partial, &ps, (void *)&total, &out, &c->flag};
    return tw_ctt_go(ctx, udt, gx < cap ? gx : cap, 1, 256, 0, stream, args);
}

twell_status tw_ctt_lists(twell_plan *plan, tw_ctt *c, size_t M, const uint32_t *packed,
                          uint64_t nnz, twell_stream stream, const uint32_t **pre) {
    twell_ctx *ctx = plan->ctx;
    const uint32_t *cfg = c->tk.words;
    c->lists_M = 0;
    size_t NT = plan->shape.N / plan->shape.T, NC = cfg[TW_CFG_NC];
    size_t NG = tw_cdiv(M, TW_FFN_GT), NL = NG * NC, NB = tw_cdiv(NG, 8), NBC = NB * NC;
    /* every active entry of a non-overflowing row-tile, each list padded to PADQ */
    uint64_t P = nnz + (uint64_t)NL * (cfg[TW_CFG_PADQ] - 1u) + 64u;
    if (P > 0xffffffffull - 1024u)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                        "twell_ffn_forward_train: %llu pair slots exceed the tiled lists' 32-bit "
                        "offsets",
                        (unsigned long long)P);
    size_t o[13], b = 0;
    /* cnt: NT + 4 words (prep adds the u64 total of active values after the counts) */
    const size_t words[12] = {4, NT + 4, NT + 1, NT + 1, NT * M, NT * M,
                              M, M,      NL,     NL + 1, NBC,    NBC};
    for (int i = 0; i < 12; i++)
        o[i] = b, b += tw_al(4u * words[i]);
    TW_TRY(tw_ctt_grow(ctx, &c->ws, &c->ws_bytes, b));
    size_t nsl = plan->shape.K / 64u;
    /* desc u32[P+64], eidx u32[P+64], gv u16[P+64], partial f32[NSL·P] */
    size_t pe = tw_al(4u * (P + 64u)), pg = pe + tw_al(4u * (P + 64u));
    size_t pp = pg + tw_al(2u * (P + 64u));
    size_t pbytes = pp + tw_al(4u * nsl * P);
    TW_TRY(tw_ctt_grow(ctx, &c->pairs, &c->pairs_bytes, pbytes));
    uint32_t **pw[12] = {&c->flag,     &c->cnt,      &c->ovf_base, &c->item_base,
                         &c->ovf_rows, &c->ovf_slot, &c->orow_idx, &c->orows,
                         &c->sizes,    &c->offsets,  &c->bsum,     &c->bbase};
    for (int i = 0; i < 12; i++)
        *pw[i] = (uint32_t *)(void *)((char *)c->ws + o[i]);
    c->desc = c->pairs;
    c->eidx = (uint32_t *)(void *)((char *)c->pairs + pe);
    c->gv = (uint16_t *)(void *)((char *)c->pairs + pg);
    c->partial = (float *)(void *)((char *)c->pairs + pp);
    c->pair_cap = (size_t)P;

    /* launch contract steps 1-4 (overflow capacities unbounded: those row-tiles are ours) */
    int m = (int)M;
    unsigned pair_cap = (unsigned)P, big = 0xffffffffu;
    TW_TRY(tw_cuda_memset_d32(ctx, c->cnt, 0u, NT + 4u, stream));
    const uint32_t *no_hmark = NULL; /* no heavy-row marks: training routes its heavy rows itself */
    void *a_prep[] = {(void *)&packed, &m,        &c->cnt,   &c->ovf_rows, &c->ovf_slot,
                      &c->orow_idx,    &c->orows, &c->sizes, &c->bsum,     (void *)&no_hmark};
    TW_TRY(tw_ctt_go(ctx, c->tk.fn[TW_FN_PREP], NB, 1, 256, 0, stream, a_prep));
    unsigned long long *no_stats = NULL; /* AUTO's count, the needs, the host copy: not here */
    int stats_add = 0;
    uint32_t *no_acc = NULL, *no_hflag = NULL;
    void *a_scan[] = {&c->bsum,      &m,        &c->bbase,   &c->cnt,   &c->ovf_base,
                      &c->item_base, &c->flag,  &c->offsets, &pair_cap, &big,
                      &big,          &no_stats, &stats_add,  &no_acc,   &no_hflag};
    TW_TRY(tw_ctt_go(ctx, c->tk.fn[TW_FN_SCAN], 1, 1, 1024, 0, stream, a_scan));
    unsigned bw = cfg[TW_CFG_BW];
    void *a_build[] = {(void *)&packed, &m,     &c->bbase, &c->sizes,         &c->offsets,
                       &c->desc,        &c->gv, &c->flag,  (void *)&no_hmark, &c->eidx};
    TW_TRY(tw_ctt_go(ctx, c->tk.fn[TW_FN_BUILD], tw_cdiv(NL, bw), 1, bw * 32u, 0, stream, a_build));
    c->lists_M = M;
    *pre = c->flag;
    return TWELL_OK;
}
