/*
 * cuda_train_heavy.c — the sparse training path's heavy rows by dense row block (see
 * cuda_train_heavy.h): classification and lists (templates/train/train_heavy.cu.lua), the block's
 * gathers and scatters, and the dense GEMMs of cuda_train_dense.c on the block.
 */
#include "cuda_train_heavy.h"

#include "cuda_module.h"
#include "cuda_train_dense.h"
#include "jit.h"
#include "train_layout.h"

#include <limits.h>
#include <string.h>

static const char *const th_names[TH_COUNT] = {"twell_train_heavy_flag", "twell_train_heavy_list",
                                               "twell_train_heavy_rows", "twell_train_heavy_stats"};

uint32_t tw_cth_threshold(const tw_ctrain *t, const twell_shape *s) {
    (void)t; /* read by the probe only */
    long long heavy = TW_CT_HEAVY(t);
    if (heavy == 0)
        return 0;
    if (heavy < 0)
        return tw_tl_heavy_threshold(s->N);
    return heavy > (long long)UINT32_MAX ? UINT32_MAX : (uint32_t)heavy;
}

static twell_status th_load(twell_plan *plan, tw_ctrain *t) {
    if (t->hmod)
        return TWELL_OK;
    twell_ctx *ctx = plan->ctx;
    tw_param params[TW_SHAPE_NPARAMS];
    size_t np = tw_shape_params(&plan->shape, params);
    twell_status st =
        tw_template_module(ctx, "train_heavy", params, np, th_names, TH_COUNT, &t->hmod, t->hfn);
    if (st != TWELL_OK)
        t->hmod = NULL;
    return st;
}

/* The row kernel over nh rows of K 16-bit values: gather (dst row i = src row idx[i]) or
 * scatter (dst row idx[i] = src row i). */
static twell_status th_rows(twell_ctx *ctx, tw_ctrain *t, const twell_shape *s, const void *src,
                            void *dst, size_t nh, int scatter, twell_stream stream) {
    void *idx = t->buf[TB_H_IDX].p;
    long long nhl = (long long)nh;
    uint64_t units = (uint64_t)nh * (s->K / 8u);
    void *args[] = {(void *)&src, &dst, &idx, &nhl, &scatter};
    return tw_ct_launch2(ctx, t->hfn[TH_ROWS], tw_ct_blocks(ctx, (units + 31u) / 32u, 8u), 1, 256,
                         0, stream, args);
}

twell_status tw_cth_classify(twell_plan *plan, twell_train_state *state, tw_ctrain *t, size_t M,
                             void *packed, uint64_t *tot, int vi, int fused, int *synced, int *on,
                             twell_stream stream) {
    static const char fn[] = "twell_ffn_forward_train";
    twell_ctx *ctx = plan->ctx;
    *on = 0;
    t->nh = 0;
    t->hnnz = 0;
    t->hthr = 0;
    uint32_t thr = tw_cth_threshold(t, &plan->shape);
    if (thr == 0 || vi != 0 || M > (size_t)INT_MAX)
        return TWELL_OK;
    int avail = 0;
    TW_TRY(tw_ctd_block_prepare(plan, state, &avail));
    if (!avail)
        return TWELL_OK; /* the dense GEMMs cannot run here: every row per entry */
    TW_TRY(th_load(plan, t));
    TW_TRY(tw_ct_reserve(ctx, state, t, TB_H_FLAG, M * 4u, fn, synced));
    TW_TRY(tw_ct_reserve(ctx, state, t, TB_H_IDX, M * 4u, fn, synced));
    if (!fused) {
        void *flag = t->buf[TB_H_FLAG].p, *htot = tot + 6;
        long long Ml = (long long)M;
        void *args[] = {&packed, &Ml, &thr, &flag, &htot};
        TW_TRY(
            tw_ct_launch2(ctx, t->hfn[TH_FLAG], tw_ct_blocks(ctx, M, 8u), 1, 256, 0, stream, args));
        tw_ct_mark(ctx, t, "heavy_flag", stream);
    }
    t->hthr = thr;
    *on = 1;
    return TWELL_OK;
}

twell_status tw_cth_forward(twell_plan *plan, twell_train_state *state, tw_ctrain *t, size_t M,
                            const void *x, const void *wg, const void *wu, const void *wd,
                            int *synced, twell_stream stream) {
    static const char fn[] = "twell_ffn_forward_train";
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    size_t nh = (size_t)t->htot[6];
    uint64_t hnnz = t->htot[7];
    if (nh > M || hnnz > (uint64_t)nh * s->N)
        return tw_error(ctx, TWELL_ERR_INTERNAL,
                        "%s: inconsistent heavy-row totals from the device (%zu rows, %llu "
                        "active values, M = %zu)",
                        fn, nh, (unsigned long long)hnnz, M);
    t->nh = 0;
    t->hnnz = hnnz;
    if (nh == 0)
        return TWELL_OK; /* nothing to list: the data has no heavy rows */
    size_t ws = tw_ctd_block_bytes(plan, nh);
    if (ws == 0)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "%s: %zu heavy rows overflow", fn, nh);
    /* every buffer first: a growing one synchronises and drops its contents */
    TW_TRY(tw_ct_reserve(ctx, state, t, TB_H_X, nh * s->K * 2u, fn, synced));
    TW_TRY(tw_ct_reserve(ctx, state, t, TB_H_Y, nh * s->K * 2u, fn, synced));
    TW_TRY(tw_ct_reserve(ctx, state, t, TB_H_WS, ws, fn, synced));
    void *xb = t->buf[TB_H_X].p, *yb = t->buf[TB_H_Y].p;
    {
        void *flag = t->buf[TB_H_FLAG].p, *idx = t->buf[TB_H_IDX].p;
        long long Ml = (long long)M;
        void *args[] = {&flag, &Ml, &idx};
        TW_TRY(tw_ct_launch2(ctx, t->hfn[TH_LIST], 1, 1, 1024, 0, stream, args));
        tw_ct_mark(ctx, t, "heavy_list", stream);
    }
    TW_TRY(th_rows(ctx, t, s, x, xb, nh, 0, stream));
    tw_ct_mark(ctx, t, "heavy_gather", stream);
    TW_TRY(tw_ctd_block_forward(plan, state, nh, xb, wg, wu, wd, yb, t->buf[TB_H_WS].p, stream));
    tw_ct_mark(ctx, t, "heavy_fwd_gemms", stream);
    t->nh = nh;
    return TWELL_OK;
}

twell_status tw_cth_finish_forward(twell_plan *plan, tw_ctrain *t, size_t M, void *y, float *stats,
                                   twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    if (t->nh == 0)
        return TWELL_OK;
    TW_TRY(th_rows(ctx, t, s, t->buf[TB_H_Y].p, y, t->nh, 1, stream));
    tw_ct_mark(ctx, t, "heavy_scatter", stream);
    if (!stats)
        return TWELL_OK;
    void *chunk_l1 = t->buf[TB_CHUNK_L1].p, *chunk_off = t->buf[TB_CHUNK_OFF].p;
    void *row_off = t->buf[TB_ROW_OFF].p;
    uint64_t *htot = (uint64_t *)t->buf[TB_TOT].p + 6;
    void *part = tw_ctd_block_part(s, t->nh, t->buf[TB_H_WS].p);
    long long Ml = (long long)M, np = tw_ctd_block_npart(s, t->nh);
    void *args[] = {&chunk_l1, &chunk_off, &row_off, &Ml, &htot, &part, &np, &stats};
    TW_TRY(tw_ct_launch2(ctx, t->hfn[TH_STATS], 1, 1, 256, 0, stream, args));
    tw_ct_mark(ctx, t, "heavy_stats", stream);
    return TWELL_OK;
}

twell_status tw_cth_backward(twell_plan *plan, twell_train_state *state, tw_ctrain *t, size_t M,
                             const void *wg, const void *wu, const void *wd, const void *dy,
                             float l1c, float *dwg, float *dwu, float *dwd, int *synced,
                             twell_stream stream) {
    static const char fn[] = "twell_ffn_backward";
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    (void)M;
    if (t->nh == 0)
        return TWELL_OK;
    TW_TRY(tw_ct_reserve(ctx, state, t, TB_H_DY, t->nh * s->K * 2u, fn, synced));
    void *dyb = t->buf[TB_H_DY].p;
    TW_TRY(th_rows(ctx, t, s, dy, dyb, t->nh, 0, stream));
    tw_ct_mark(ctx, t, "heavy_gather", stream);
    TW_TRY(tw_ctd_block_backward(plan, state, t->nh, t->buf[TB_H_X].p, wg, wu, wd, dyb, l1c,
                                 t->buf[TB_H_Y].p, dwg, dwu, dwd, t->buf[TB_H_WS].p, stream));
    tw_ct_mark(ctx, t, "heavy_bwd_gemms", stream);
    return TWELL_OK;
}

twell_status tw_cth_finish_backward(twell_plan *plan, tw_ctrain *t, void *dx, twell_stream stream) {
    if (t->nh == 0)
        return TWELL_OK;
    TW_TRY(th_rows(plan->ctx, t, &plan->shape, t->buf[TB_H_Y].p, dx, t->nh, 1, stream));
    tw_ct_mark(plan->ctx, t, "heavy_scatter", stream);
    return TWELL_OK;
}
