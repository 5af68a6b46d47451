/*
 * cuda_ffn.c — twell_ffn_infer on CUDA, launch side: grows the workspace the tiled pipeline
 * needs (laid out by cuda_ffn_ws.c), picks the module per M bucket, and enqueues the launch
 * sequence of ffn_fused.cu.lua's header on the caller's stream without synchronising the host in
 * the steady state; the tuner's entry points (the test controls: cuda_ffn_probe.c). Modules are
 * loaded by cuda_ffn_load.c, in configurations ruled by ffn_config.c.
 */
#include "cuda_ffn_int.h"
#include "cuda_ffn_ws.h"

#include "ffn_tuner.h"
#include "gpu_tune.h"
#include "jit.h"
#include "op_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- launches ---- */

/* pdl: only for kernels that keep ffn_fused.cu.lua's PDL rule (all of ffn_fused; not ffn_rows,
 * the generic kernel, which has no griddepcontrol.wait). */
static twell_status tw_go_pdl(twell_plan *plan, tw_CUfunction fn, size_t gx, unsigned gy,
                              unsigned block, unsigned smem, twell_stream stream, void **args,
                              unsigned pdl) {
    return tw_cu_launch_grid(plan->ctx, fn, gx, gy, block, smem, pdl, stream, args);
}

/* An ffn_fused kernel. */
static twell_status tw_go(twell_plan *plan, tw_CUfunction fn, size_t gx, unsigned gy,
                          unsigned block, unsigned smem, twell_stream stream, void **args) {
    return tw_go_pdl(plan, fn, gx, gy, block, smem, stream, args, 1u);
}

/* Steps 1-3 of the launch contract for one chunk of m rows: counts, list sizes and offsets,
 * overflow bookkeeping, flags; stats (or NULL) receives the chunk's active values (added when
 * stats_add); acc (f->acc or NULL) accumulates the chunk's needs, hflag (or NULL) mirrors acc.
 * cnt is memset only while f->cnt_dirty (the scan leaves it zero), and always in a captured
 * call: a graph may be replayed after an eager sequence that stopped half-way. */
static twell_status tw_ffn_prepass(twell_plan *plan, tw_ffn *f, tw_ffn_ws *w, int m,
                                   const uint32_t *packed, const uint32_t *hmark, uint64_t *stats,
                                   int stats_add, uint32_t *acc, uint32_t *hflag, int capturing,
                                   twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    unsigned ovf_cap = (unsigned)f->ovf_cap, orow_cap = (unsigned)f->orow_cap;
    unsigned pair_cap = (unsigned)f->pair_cap;
    if (f->cnt_dirty || capturing)
        TW_TRY(tw_cuda_memset_d32(ctx, w->cnt, 0u, f->NT + 4u, stream));
    f->cnt_dirty = 1; /* until the scan that zeroes it again is enqueued */
    void *a_prep[] = {(void *)&packed, &m,        &w->cnt,   &w->ovf_rows, &w->ovf_slot,
                      &w->orow_idx,    &w->orows, &w->sizes, &w->bsum,     (void *)&hmark};
    TW_TRY(tw_go(plan, f->fn[TW_FN_PREP], tw_cdiv(tw_cdiv((size_t)m, TW_FFN_GT), 8), 1, 256, 0,
                 stream, a_prep));
    void *a_scan[] = {&w->bsum,      &m,       &w->bbase,   &w->cnt,   &w->ovf_base,
                      &w->item_base, &w->flag, &w->offsets, &pair_cap, &ovf_cap,
                      &orow_cap,     &stats,   &stats_add,  &acc,      &hflag};
    TW_TRY(tw_go(plan, f->fn[TW_FN_SCAN], 1, 1, 1024, 0, stream, a_scan));
    f->cnt_dirty = 0;
    return TWELL_OK;
}

/* Steps 4-10 for one chunk of m rows; hmark (or NULL): the heavy-row route runs this chunk's
 * marked rows (its gather and GEMMs after the build, its scatter after the row kernel, so its y
 * rows replace the sparse pipeline's zeros, or the fallback's exact values). */
static twell_status tw_ffn_phases(twell_plan *plan, tw_ffn *f, tw_ffn_ws *w, int m, const void *x,
                                  const uint32_t *packed, const uint32_t *hmark, const void *wp,
                                  const void *wu, const void *wd, void *y, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    size_t sms = (size_t)ctx->cuda->sm_count;
    size_t NG = tw_cdiv((size_t)m, TW_FFN_GT), NL = NG * f->cfg[TW_CFG_NC];
    unsigned pair_cap = (unsigned)f->pair_cap, bw = f->cfg[TW_CFG_BW];
    int fallback_only = 1;
    const void *wu_gu = plan->shape.gated ? wu : NULL;
    uint32_t *no_eidx = NULL; /* entry word indices: training's tiled U/dT only */
    void *a_build[] = {(void *)&packed, &m,     &w->bbase, &w->sizes,      &w->offsets,
                       &w->desc,        &w->gv, &w->flag,  (void *)&hmark, &no_eidx};
    TW_TRY(tw_go(plan, f->fn[TW_FN_BUILD], tw_cdiv(NL, bw), 1, bw * 32u, 0, stream, a_build));
    if (hmark)
        TW_TRY(tw_ffn_heavy_gemms(plan, f->heavy, x, packed, wp, wu, wd, stream));
    void *a_gu[] = {(void *)&x,    (void *)&wp,  (void *)&wu_gu, &m,         &w->ovf_base,
                    &w->item_base, &w->ovf_rows, &w->ovf_hh,     &w->ovf_ex, &w->flag};
    TW_TRY(tw_go(plan, f->fn[TW_FN_OVF_GU], f->cfg[TW_CFG_GU_BPS] * sms, 1, f->cfg[TW_CFG_GU_THR],
                 f->cfg[TW_CFG_SMEM_GU], stream, a_gu));
    long long ys = (long long)f->orow_cap * plan->shape.K; /* ovf_y part stride */
    void *a_down[] = {(void *)&packed, (void *)&wd, &m,         &w->ovf_base,
                      &w->ovf_slot,    &w->orows,   &w->ovf_hh, &w->ovf_ex,
                      &w->ovf_y,       &ys,         &w->flag};
    TW_TRY(tw_go(plan, f->fn[TW_FN_OVF_DOWN], f->cfg[TW_CFG_DOWN_BPS] * sms, 1, 256,
                 f->cfg[TW_CFG_SMEM_DOWN], stream, a_down));
    uint32_t *hl = NULL, *rexp = NULL;
    if (plan->shape.gated) {
        void *a_pa[] = {(void *)&x, (void *)&wu, &m,        &w->desc, &w->offsets,
                        &w->sizes,  &w->partial, &pair_cap, &w->flag};
        TW_TRY(tw_go(plan, f->fn[TW_FN_PHASE_A],
                     tw_cdiv(NG, (size_t)f->cfg[TW_CFG_NWA] * f->cfg[TW_CFG_GPWA]), f->NSL,
                     32u * f->cfg[TW_CFG_NWA], f->cfg[TW_CFG_SMEM_A], stream, a_pa));
        void *a_red[] = {&w->gv, &w->partial, &pair_cap, &w->offsets,
                         &m,     &w->hl,      &w->rexp,  &w->flag};
        TW_TRY(tw_go(plan, f->fn[TW_FN_REDUCE], 8 * sms, 1, 256, 0, stream, a_red));
        hl = w->hl;
        rexp = w->rexp;
    }
    void *a_pb[] = {(void *)&wd, &m,           &w->desc,  &w->gv, &hl, &rexp,   &w->offsets,
                    &w->sizes,   &w->orow_idx, &w->ovf_y, &ys,    &y,  &w->flag};
    TW_TRY(tw_go(plan, f->fn[TW_FN_PHASE_B],
                 tw_cdiv(NG, (size_t)f->cfg[TW_CFG_NWB] * f->cfg[TW_CFG_GPWB]), f->NSL,
                 32u * f->cfg[TW_CFG_NWB], f->cfg[TW_CFG_SMEM_B], stream, a_pb));
    void *a_rows[] = {(void *)&x, (void *)&packed, (void *)&wp,   (void *)&wu, (void *)&wd, &y,
                      &m,         &w->flag,        &fallback_only};
    TW_TRY(tw_go(plan, f->fn[TW_FN_ROWS], tw_min(tw_cdiv((size_t)m, 8), 8 * sms), 1, 256, 0, stream,
                 a_rows));
    return hmark ? tw_ffn_heavy_scatter(plan, f->heavy, y, stream) : TWELL_OK;
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

/* 1 if some capacity is below what `n` needs. */
static int tw_ffn_short(const tw_ffn *f, const tw_ffn_need *n) {
    return n->pairs > f->pair_cap || n->ovf > f->ovf_cap || n->orows > f->orow_cap;
}

/* Frees the retired buffers once the calls that could read them have finished, then reads the
 * mirror of the accumulated needs (never waits: each word is a lower bound of the device's) and
 * grows what is too small. With the plan's work idle the old buffers are freed at once; with
 * calls in flight they are retired behind an event recorded after those calls (one retirement
 * at a time: while one is pending, growth waits for a later call, whose chunks meanwhile run
 * the exact fallback where they do not fit). Growth is rare (+25% headroom, buffers never
 * shrink); where the driver's cuMemFree itself waits for the device, that happens once per
 * growth, never in the steady state. */
static twell_status tw_ffn_collect(twell_plan *plan, tw_ffn *f, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    if (f->nretired) {
        int done = 0;
        TW_TRY(tw_cuda_event_query(ctx, f->retire, &done));
        if (done) {
            for (int i = 0; i < f->nretired; i++)
                tw_cuda_free(ctx, f->retired[i]);
            f->nretired = 0;
        }
    }
    if (TW_PROBE_OR(f->probe.pinned, 0))
        return TWELL_OK;
    volatile const uint32_t *mirror = f->hflags;
    uint32_t fl[4] = {mirror[0], mirror[1], mirror[2], mirror[3]};
    tw_ffn_need n = {0, 0, 0};
    tw_ffn_needs(fl, &n);
    if (!tw_ffn_short(f, &n))
        return TWELL_OK;
    int idle = !f->used;
    if (!idle)
        TW_TRY(tw_cuda_event_query(ctx, f->done, &idle));
    if (idle) {
        if (tw_ffn_grow(plan, f, &n))
            f->grows[0]++;
        return TWELL_OK;
    }
    if (f->nretired)
        return TWELL_OK;
    f->retiring = 1;
    int grew = tw_ffn_grow(plan, f, &n);
    f->retiring = 0;
    if (grew)
        f->grows[1]++;
    if (!f->nretired)
        return TWELL_OK;
    /* after every call enqueued so far: this call's stream, which waited for done where the
     * last call ran on another (not that stream itself: the caller may have destroyed it) */
    twell_status st = tw_cuda_event_record(ctx, f->retire, stream);
    if (st != TWELL_OK) { /* no event to wait for: keep them to the plan's release instead */
        for (int i = 0; i < f->nretired; i++)
            tw_cuda_keep_free(ctx, &f->keep, 1, f->retired[i]);
        f->nretired = 0;
    }
    return st;
}

/* The first chunk of a new largest size: run the pre-pass, read the exact needs (one host
 * synchronisation), grow, and run the pre-pass again so its flags see the new capacities (and
 * only it accumulates into acc: the first pass's fallback bit would count a fallback that does
 * not happen). */
static twell_status tw_ffn_probe(twell_plan *plan, tw_ffn *f, tw_ffn_ws *w, int m,
                                 const uint32_t *packed, int *heavy, const uint32_t **hmark,
                                 uint64_t *stats, int stats_add, uint32_t *hflag,
                                 twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    uint32_t *hf = f->hflags + 4;
    f->probes++;
    TW_TRY(tw_ffn_prepass(plan, f, w, m, packed, *hmark, stats, stats_add, NULL, NULL, 0, stream));
    TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, hf, w->flag, 16, stream));
    TW_TRY(tw_cuda_stream_synchronize(ctx, stream));
    tw_ffn_need n = {0, 0, 0};
    tw_ffn_needs(hf, &n);
    /* the stream is idle up to here; work on other streams was ordered before this call */
    if (tw_ffn_grow(plan, f, &n)) /* a failed allocation keeps the old buffers: the device flag
                                     sends what does not fit to the fallback */
        tw_ffn_ws_of(plan, f, w);
    /* overflowing rows: the heavy-row route from this call on (decided here, so the first call
     * computes what the next ones do) */
    if (!*heavy && n.orows > 0) {
        TW_TRY(tw_ffn_heavy_prepare(plan, f->heavy, (size_t)m, 1, 0, f->used, 0, stream, heavy));
        if (*heavy)
            TW_TRY(tw_ffn_heavy_mark(plan, f->heavy, m, packed, hmark, stream));
    }
    /* the first pass counted the active values into stats already (capacity-independent) */
    return tw_ffn_prepass(plan, f, w, m, packed, *hmark, NULL, 0, f->acc, hflag, 0, stream);
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
        return tw_go_pdl(plan, f->generic, tw_min(tw_cdiv(M, 8), 16 * sms), 1, 256, 0, stream, a,
                         0u);
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

/* The tiled pipeline over M rows in chunks of at most TW_FFN_CHUNK rows. Eager: grows the
 * workspace as the data needs (tw_ffn_collect, tw_ffn_reserve_rows, tw_ffn_probe). Captured:
 * uses the workspace as it is (chunks of at most rows_cap rows; the row kernel when there is
 * none), reads nothing back. */
static twell_status tw_ffn_tiled(twell_plan *plan, tw_ffn *f, size_t M, const void *x,
                                 const uint32_t *packed, const void *wp, const void *wu,
                                 const void *wd, void *y, int capturing, twell_stream stream,
                                 uint64_t *stats, int *counted) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    size_t chunk = tw_min(M, TW_FFN_CHUNK);
    if (capturing) {
        if (f->rows_cap == 0 || !f->ws_ovf || !f->ws_pairs) {
            tw_log(ctx, TWELL_LOG_WARN,
                   "ffn_infer: captured call with no sparse workspace reserved "
                   "(twell_plan_reserve): running the exact row kernel");
            return tw_ffn_simple(plan, f, TW_FFN_ROWS, M, x, packed, wp, wu, wd, y, stream);
        }
        chunk = tw_min(chunk, f->rows_cap);
        stats = NULL; /* a graph's counts never reach the host */
    } else {
        TW_TRY(tw_ffn_collect(plan, f, stream));
        TW_TRY(tw_ffn_reserve_rows(plan, f, chunk));
        if (f->rows_cap < chunk || !f->ws_ovf || !f->ws_pairs) /* allocation failed: warned */
            return tw_ffn_simple(plan, f, TW_FFN_ROWS, M, x, packed, wp, wu, wd, y, stream);
    }
    *counted = stats != NULL;
    /* the heavy-row route: wanted once some chunk had overflowing rows (the host mirror of the
     * needs, read without waiting), or forced by test control */
    int heavy = 0;
    {
        volatile const uint32_t *mirror = f->hflags;
        TW_TRY(tw_ffn_heavy_prepare(plan, f->heavy, chunk, mirror[3] != 0u, capturing, f->used, 0,
                                    stream, &heavy));
    }
    int probe = !capturing && !TW_PROBE_OR(f->probe.pinned, 0) && chunk > f->cur->probed;
    tw_ffn_ws w;
    tw_ffn_ws_of(plan, f, &w);
    size_t c = 0;
    for (size_t r0 = 0; r0 < M; r0 += chunk, c++) {
        int m = (int)tw_min(M - r0, chunk);
        const void *xc = (const char *)x + r0 * s->K * 2u;
        const uint32_t *pc = packed + r0 * (s->N / s->C);
        void *yc = (char *)y + r0 * s->K * 2u;
        /* every chunk accumulates its needs into acc (replays of a captured call too); the
         * scan mirrors acc into the mapped pinned words itself, else the call copies it once
         * at its end (neither in a captured call) */
        uint32_t *hflag = f->hflags_dev && !capturing ? f->hflags_dev : NULL;
        const uint32_t *hmark = NULL;
        if (heavy)
            TW_TRY(tw_ffn_heavy_mark(plan, f->heavy, m, pc, &hmark, stream));
        if (probe)
            TW_TRY(tw_ffn_probe(plan, f, &w, m, pc, &heavy, &hmark, stats, c > 0, hflag, stream));
        else
            TW_TRY(tw_ffn_prepass(plan, f, &w, m, pc, hmark, stats, c > 0, f->acc, hflag, capturing,
                                  stream));
        TW_TRY(tw_ffn_phases(plan, f, &w, m, xc, pc, hmark, wp, wu, wd, yc, stream));
    }
    f->last_flag = w.flag;
    if (capturing) {
        f->captured = 1; /* the graph holds the workspace from now on */
        return TWELL_OK;
    }
    if (!f->hflags_dev)
        TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, f->hflags, f->acc, 16, stream));
    if (probe && chunk > f->cur->probed)
        f->cur->probed = chunk;
    return TWELL_OK;
}

/* The tiled module calls of M rows run: the forced one, else M's bucket's, resolved on its first
 * call (tw_cuda_ffn_prepare says how; a bucket without a record is tuned first when tune_now is
 * set) and memoised. A captured call never resolves (that may load a module or tune): an
 * unresolved bucket runs the default, not memoised. Context current. */
tw_ffn_tk *tw_ffn_module_for(twell_plan *plan, tw_ffn *f, size_t M, int capturing, int tune_now) {
    if (f->forced)
        return f->forced;
    unsigned b = tw_m_bucket_log2(M);
    if (f->bucket[b] < 0 && capturing)
        return &f->tk[0];
    if (f->bucket[b] < 0) {
        size_t pick = 0; /* the default unless a usable winner says otherwise */
        tw_ffn_cfg want;
        if (tw_ffn_winner(plan, M, tune_now, &want) == 0) {
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
                       tw_errmsg(plan->ctx));
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
                                const void *wd, void *y, twell_stream stream, int capturing,
                                uint64_t *stats, int *counted) {
    twell_ctx *ctx = plan->ctx;
    int dummy = 0;
    if (!counted)
        counted = &dummy;
    *counted = 0;
    const void *wp = plan->shape.gated ? wg : wu;
    uintptr_t any = (uintptr_t)x | (uintptr_t)wp | (uintptr_t)wu | (uintptr_t)wd | (uintptr_t)y;
    if (any & 1u)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "twell_ffn_infer: x, the weights and y must be 2-byte aligned (16-bit "
                        "elements)");
    if ((uintptr_t)packed & 3u)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "twell_ffn_infer: packed is not 4-byte aligned");
    tw_ffn_kernel k = TW_PROBE_OR(f->probe.kernel, TW_FFN_AUTO);
    int aligned16 = (any & 15u) == 0;
    if ((k == TW_FFN_AUTO && !f->tiled) || !aligned16)
        k = TW_FFN_GENERIC; /* the tiled and row kernels load 16 bytes at a time */
    if (k == TW_FFN_GENERIC && !f->generic && capturing)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "twell_ffn_infer: a captured call needs x, the weights and y 16-byte "
                        "aligned (or the portable kernel loaded by an eager call first)");
    if (k == TW_FFN_GENERIC && !f->generic) {
        tw_log(ctx, TWELL_LOG_INFO,
               "ffn_infer: tensors not 16-byte aligned; loading the portable row kernel");
        TW_TRY(tw_ffn_load_generic(plan, f));
    }
    /* Calls share the workspace: one on another stream waits for the previous one (a captured
     * call cannot wait for an event recorded outside its capture: the caller orders it). */
    if (f->used && stream != f->last_stream && !capturing)
        TW_TRY(tw_cuda_stream_wait_event(ctx, stream, f->done));
    if (k != TW_FFN_GENERIC)
        tw_ffn_use(f, tw_ffn_module_for(plan, f, M, capturing, f->tune_on_first_use));
    if (k == TW_FFN_AUTO)
        TW_TRY(
            tw_ffn_tiled(plan, f, M, x, packed, wp, wu, wd, y, capturing, stream, stats, counted));
    else
        TW_TRY(tw_ffn_simple(plan, f, k, M, x, packed, wp, wu, wd, y, stream));
    if (capturing)
        return TWELL_OK;
    TW_TRY(tw_cuda_event_record(ctx, f->done, stream));
    f->used = 1;
    f->last_stream = stream;
    return TWELL_OK;
}

tw_cuda_event tw_cuda_ffn_done_event(const tw_ffn *f) { return f->done; }

int tw_cuda_ffn_rows_overflowed(const tw_ffn *f) {
    return f && f->hflags && ((volatile const uint32_t *)f->hflags)[3] != 0u;
}

twell_status tw_cuda_ffn_reserve(twell_plan *plan, tw_ffn *f, size_t max_M, double nnz_per_row) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    if (!f->tiled)
        return TWELL_OK; /* the portable kernel needs no workspace */
    /* every bucket's module now, so a captured call finds it resolved; the row workspace is laid
     * out for the widest of them */
    for (unsigned b = 0; b <= tw_m_bucket_log2(max_M); b++) {
        const tw_ffn_tk *tk = tw_ffn_module_for(plan, f, (size_t)1 << b, 0, f->tune_on_first_use);
        if (tk->words[TW_CFG_NC] > f->nc_ws) {
            f->nc_ws = tk->words[TW_CFG_NC];
            f->rows_cap = 0;
        }
    }
    size_t chunk = tw_min(max_M, TW_FFN_CHUNK);
    TW_TRY(tw_ffn_reserve_rows(plan, f, chunk));
    if (f->rows_cap < chunk || !f->ws_ovf || !f->ws_pairs)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                        "twell_plan_reserve: cannot allocate the sparse workspace for %zu rows",
                        chunk);
    { /* the heavy-row route too, where it is wanted already, so a captured call can run it */
        volatile const uint32_t *mirror = f->hflags;
        int on = 0;
        TW_TRY(
            tw_ffn_heavy_prepare(plan, f->heavy, chunk, mirror[3] != 0u, 0, f->used, 1, NULL, &on));
    }
    if (TW_PROBE_OR(f->probe.pinned, 0))
        return TWELL_OK; /* capacities pinned by a probe (TW_TC_FFN_SET_CAPACITY) */
    double values = nnz_per_row * (double)chunk; /* active values of a chunk */
    uint32_t W = s->T / s->C;
    /* pair slots: every value, plus each list's padding to a multiple of PADQ (≤ 16) with lists
     * of 8 tokens (the smallest GT) per chunk of neurons */
    double lists = (double)tw_cdiv(chunk, 8) * f->nc_ws;
    tw_ffn_need n;
    n.pairs = (size_t)(values + 15.0 * lists) + 1024;
    double tiles = values / (double)W, all_tiles = (double)chunk * f->NT;
    n.ovf = (size_t)(tiles < all_tiles ? tiles : all_tiles) + 64;
    n.orows = tw_min(tw_min(chunk, n.ovf), chunk / 16 + 16);
    if (n.pairs <= f->pair_cap && n.ovf <= f->ovf_cap && n.orows <= f->orow_cap)
        return TWELL_OK;
    if (f->used) /* the old buffers may still be in use */
        TW_TRY(tw_cuda_event_synchronize(ctx, f->done));
    size_t want_pairs = n.pairs > f->pair_cap ? n.pairs : f->pair_cap;
    if (n.pairs > f->pair_cap && !tw_ffn_set_pairs(plan, f, want_pairs))
        return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                        "twell_plan_reserve: cannot allocate %zu pair slots", want_pairs);
    if ((n.ovf > f->ovf_cap || n.orows > f->orow_cap) &&
        !tw_ffn_set_ovf(plan, f, n.ovf > f->ovf_cap ? n.ovf : f->ovf_cap,
                        n.orows > f->orow_cap ? n.orows : f->orow_cap))
        return tw_error(
            ctx, TWELL_ERR_NO_MEMORY,
            "twell_plan_reserve: cannot allocate the overflow workspace (%zu row-tiles, "
            "%zu rows)",
            n.ovf, n.orows);
    return TWELL_OK;
}

/* ---- the tuner's entry points (the test controls are cuda_ffn_probe.c's) ---- */

static tw_ffn *tw_plan_ffn(const twell_plan *plan) {
    const tw_cuda_plan *cp = tw_op_plan(plan);
    return cp ? cp->ffn : NULL;
}

twell_status tw_ffn_enter(twell_plan *plan, tw_ffn *f, tw_cu_scope *sc) {
    if (!f)
        return tw_error(plan ? plan->ctx : NULL, TWELL_ERR_UNSUPPORTED,
                        "ffn_infer: not a CUDA plan");
    TW_TRY(tw_cu_enter(plan->ctx, sc));
    twell_status st = tw_cuda_synchronize(plan->ctx);
    if (st != TWELL_OK)
        tw_cu_leave(plan->ctx, sc);
    return st;
}

twell_status tw_cuda_ffn_tune(twell_plan *plan, size_t M, unsigned flags) {
    tw_ffn *f = tw_plan_ffn(plan);
    if (!f || !f->tiled)
        return TWELL_OK; /* the portable row kernel has nothing to tune */
    if (!(flags & TWELL_TUNE_STORED_ONLY))
        TW_TRY(tw_tune_op_ensure(plan->ctx, &tw_ffn_tune_op, "ffn_fused", &plan->shape, M,
                                 (flags & TWELL_TUNE_RETUNE) != 0));
    tw_cu_scope sc;
    TW_TRY(tw_cu_enter(plan->ctx, &sc));
    f->bucket[tw_m_bucket_log2(M)] = -1; /* look the record up again: it may be new */
    (void)tw_ffn_module_for(plan, f, M, 0, 0);
    tw_cu_leave(plan->ctx, &sc);
    return TWELL_OK;
}

twell_status tw_cuda_ffn_force(twell_plan *plan, tw_ffn *f, tw_ffn_tk *tk) {
    tw_cu_scope sc;
    TW_TRY(tw_ffn_enter(plan, f, &sc));
    twell_status st = TWELL_OK;
    if (!f->tiled)
        st = tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED,
                      "ffn_infer: this plan has no tiled kernels to replace");
    else
        f->forced = tk, f->cur = NULL; /* copy from it (or the bucket's) at the next call */
    tw_cu_leave(plan->ctx, &sc);
    return st;
}

twell_status tw_cuda_ffn_flags(twell_plan *plan, tw_ffn *f, uint32_t out[4]) {
    tw_cu_scope sc;
    memset(out, 0, 16);
    TW_TRY(tw_ffn_enter(plan, f, &sc));
    twell_status st = TWELL_OK;
    if (f->last_flag)
        st = tw_cuda_memcpy_dtoh(plan->ctx, out, f->last_flag, 16);
    tw_cu_leave(plan->ctx, &sc);
    return st;
}
