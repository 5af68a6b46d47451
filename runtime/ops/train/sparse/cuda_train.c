/*
 * cuda_train.c — the sparse training path on CUDA: forward and backward fill the saved state's
 * device buffers (the layout of cpu_train.h, see templates/train/train_ffn.cu.lua;
 * cuda_train_state.c holds them) and enqueue the kernels in order. The one host synchronisation
 * per forward reads the totals that size the spill and the chunks.
 */
#include "cuda_train_int.h"

#include "cuda_train_heavy.h"
#include "jit.h"
#include "train_layout.h"

#include <stdio.h>
#include <string.h>

static const char *const tf_names[] = {
    "twell_train_recount",    "twell_train_scan_tiles",   "twell_train_scan_rows",
    "twell_train_scan_hist",  "twell_train_scan_neurons", "twell_train_owners",
    "twell_train_spill",      "twell_train_fwd_ent",      "twell_train_fwd_y",
    "twell_train_row_reduce", "twell_train_stats",        "twell_train_bwd_ent",
    "twell_train_bwd_dx",     "twell_train_hist",         "twell_train_scatter",
    "twell_train_dw",         "twell_train_dw_reduce",    "twell_train_fwd_ent_s",
    "twell_train_bwd_ent_s",  "twell_train_udt",          "twell_train_fwd_ent_p",
    "twell_train_bwd_ent_p",  "twell_train_ovf_list",     "twell_train_ovf_tiles",
    "twell_train_ovf_udt"};
_Static_assert(sizeof tf_names / sizeof tf_names[0] == TF_COUNT, "a name per kernel");

/* train_ffn's scan argument block: eleven 8-byte fields, as struct tw_sa in the template. */
typedef struct {
    uint64_t packed, in64, in32, o0, o1, o2, o32, tot, n, p0, p1;
} tw_ct_sa;

#define TW_CT_SCAN_ITEMS 2048u /* items per scan block */
/* The one-pass scans' state for nb blocks: ticket (+ pad), then per block a record of 5 u64:
 * flag, [aggregate, inclusive] x 2 channels (train_ffn_state.lua). The four scans share it
 * whatever their block counts: a flag word never holds anything but flags. */
#define TW_CT_SCAN_BYTES(nb) (8u + 40u * (uint64_t)(nb))
#define TW_CT_SMEM_DEFAULT 49152u
#define TW_CT_SC_P 1024u /* train_ffn.cu.lua's SC_P: entries twell_train_scatter loads at once */

static uint64_t tw_dp(const void *p) { return (uint64_t)(uintptr_t)p; }

/* ---- modules ---- */

/* Warps per block of the kernels that hold a token row (fp32) in shared memory, and the shared
 * memory they need. 0 if even one warp does not fit the device. */
static uint32_t tw_ct_wpb(const twell_shape *s, const tw_cuda *dev, unsigned *smem_row,
                          unsigned *smem_recount) {
    unsigned lim = dev->smem_optin > 0 ? (unsigned)dev->smem_optin : TW_CT_SMEM_DEFAULT;
    for (uint32_t w = 4; w >= 1; w /= 2) {
        unsigned row = w * s->K * 4u, rec = row + w * s->T * 2u;
        if ((rec <= TW_CT_SMEM_DEFAULT || w == 1) && rec <= lim) {
            *smem_row = row;
            *smem_recount = rec;
            return w;
        }
        if (w == 1)
            break;
    }
    return 0;
}

/* The condition of train_ffn.cu.lua's MMA: 16-byte fragment loads, k blocks of 32, warp tiles
 * of 64 columns. */
static int tw_ct_mma(const twell_shape *s, int vi) {
    return vi == 0 && s->K % 32u == 0 && s->T % 64u == 0;
}

/* The staged kernels (train_ffn.cu.lua's KC, STAGES, SWP): K chunk 64 (K permitting, else 32 or
 * 16), 2 stages, 4 warps per block (the fastest measured there). */
#define TW_CT_STAGES 2u
#define TW_CT_SWP 4u
static unsigned tw_ct_kc(unsigned K) { return K % 64u == 0 ? 64u : (K % 32u == 0 ? 32u : 16u); }

/* The staged kernels' shared bytes per warp (train_ffn.cu.lua's STW): the token row (dtype) and
 * TW_CT_STAGES stages of 32 rows of KC + 8 elements. */
static unsigned tw_ct_stw(unsigned K) {
    return 2u * K + TW_CT_STAGES * 32u * (tw_ct_kc(K) + 8u) * 2u;
}

static twell_status tw_ct_load(twell_plan *plan, tw_ctrain *t, int vi) {
    if (t->mods[vi].mod)
        return TWELL_OK;
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    if (!t->wpb) {
        t->wpb = tw_ct_wpb(s, ctx->cuda, &t->smem_row, &t->smem_recount);
        if (!t->wpb)
            return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                            "twell_ffn_forward_train: K = %u needs %u bytes of shared memory per "
                            "block, more than this device's %d",
                            s->K, s->K * 4u + s->T * 2u, ctx->cuda->smem_optin);
    }
    tw_param params[TW_SHAPE_NPARAMS + 2];
    size_t np = tw_shape_params(s, params);
    params[np++] = (tw_param){"VEC", NULL, vi == 0 ? 8 : 1};
    params[np++] = (tw_param){"WPB", NULL, (long long)t->wpb};
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    twell_status st = tw_jit_cubin(ctx, "train_ffn", params, np, ctx->cuda->arch, &cubin);
    if (st != TWELL_OK)
        return st;
    tw_tmod m;
    memset(&m, 0, sizeof m);
    m.mma = tw_ct_mma(s, vi);
    t->smem_stage = TW_CT_SWP * tw_ct_stw(s->K);
    int optin = ctx->cuda->smem_optin > 0 ? ctx->cuda->smem_optin : (int)TW_CT_SMEM_DEFAULT;
    m.staged = vi == 0 && t->smem_stage <= (unsigned)optin;
    m.ovf_udt = m.mma && s->T <= 512u; /* train_ffn.cu.lua's OVF_UDT */
    int nfn = m.mma ? (m.ovf_udt ? TF_COUNT : TF_OVF_UDT) : (vi == 0 ? TF_OVF_LIST : TF_FWD_ENT_S);
    st = tw_cu_module_open(ctx, cubin.data, tf_names, (size_t)nfn, &m.mod, m.fn);
    tw_cubin_free(&cubin);
    for (int i = TF_FWD_ENT_S; m.staged && i <= TF_BWD_ENT_S && st == TWELL_OK; i++)
        if (t->smem_stage > TW_CT_SMEM_DEFAULT)
            st = tw_cu_func_set_attribute(ctx, m.fn[i],
                                          TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          (int)t->smem_stage);
    if (st == TWELL_OK && t->smem_recount > TW_CT_SMEM_DEFAULT) {
        static const int big[] = {TF_RECOUNT, TF_SPILL, TF_FWD_ENT, TF_BWD_ENT};
        for (size_t i = 0; i < sizeof big / sizeof big[0] && st == TWELL_OK; i++)
            st = tw_cu_func_set_attribute(
                ctx, m.fn[big[i]], TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                (int)(big[i] == TF_RECOUNT ? t->smem_recount : t->smem_row));
    }
    /* the K-slice kernels' grids: what fits at once (tw_ct_resident) */
    static const int kslice[] = {TF_FWD_Y, TF_DW};
    for (size_t i = 0; i < sizeof kslice / sizeof kslice[0] && st == TWELL_OK; i++)
        st = tw_cu_func_occupancy(ctx, m.fn[kslice[i]], 256, 0, &m.occ[kslice[i]]);
    /* twell_train_scatter ranked where its counters (4·N bytes) and piece fit */
    unsigned sc = 4u * s->N + 8u * TW_CT_SC_P;
    if (st == TWELL_OK && sc <= (unsigned)optin) {
        m.scatter_smem = sc;
        if (sc > TW_CT_SMEM_DEFAULT)
            st = tw_cu_func_set_attribute(
                ctx, m.fn[TF_SCATTER], TW_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)sc);
    }
    if (st != TWELL_OK) {
        tw_cu_module_unload(m.mod);
        return st;
    }
    t->mods[vi] = m;
    return TWELL_OK;
}

/* ---- launches ---- */

unsigned tw_ct_blocks(const twell_ctx *ctx, uint64_t warp_items, uint32_t warps_per_block) {
    uint64_t b = (warp_items + warps_per_block - 1) / warps_per_block;
    uint64_t cap = (uint64_t)ctx->cuda->sm_count * 16u;
    if (b > cap)
        b = cap;
    return b ? (unsigned)b : 1u;
}

/* A K-slice kernel's grid (blocks of 256 threads over warp items, slice-major): at most the blocks
 * that are resident at once. Its warps stride over the items, so with every block resident the
 * warps in flight work on one or two K slices, whose weight (token) rows stay in L2; a grid of
 * more blocks than fit ran its first blocks through every slice before the later ones started,
 * so all slices were in flight at once (for twell_train_dw, whose warps take items from a queue,
 * a later block would also find the queue empty). */
static unsigned tw_ct_resident(const twell_ctx *ctx, const tw_tmod *md, int f,
                               uint64_t warp_items) {
    unsigned grid = tw_ct_blocks(ctx, warp_items, 8u);
    uint64_t res = (uint64_t)ctx->cuda->sm_count * (uint64_t)md->occ[f];
    return res > 0 && res < grid ? (unsigned)res : grid;
}

twell_status tw_ct_launch2(twell_ctx *ctx, tw_CUfunction fn, unsigned grid, unsigned gy,
                           unsigned block, unsigned smem, twell_stream stream, void **args) {
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = grid, cfg.grid[1] = gy, cfg.grid[2] = 1;
    cfg.block[0] = block, cfg.block[1] = cfg.block[2] = 1;
    cfg.smem = smem;
    return tw_cu_launch(ctx, fn, &cfg, stream, args);
}

static twell_status tw_ct_launch(twell_ctx *ctx, tw_CUfunction fn, unsigned grid, unsigned block,
                                 unsigned smem, twell_stream stream, void **args) {
    return tw_ct_launch2(ctx, fn, grid, 1, block, smem, stream, args);
}

/* Launch of kernel f of md, then a profiling mark named after it. */
static twell_status tw_ct_run(twell_ctx *ctx, tw_ctrain *t, const tw_tmod *md, int f, unsigned grid,
                              unsigned block, unsigned smem, twell_stream stream, void **args) {
    twell_status st = tw_ct_launch(ctx, md->fn[f], grid, block, smem, stream, args);
    if (st == TWELL_OK)
        tw_ct_mark(ctx, t, tf_names[f] + 12, stream); /* without "twell_train_" */
    return st;
}

/* Exclusive scan `mode` over a->n items (three launches: block sums, their scan, the items). */
static twell_status tw_ct_scan(twell_ctx *ctx, const tw_tmod *m, tw_ctrain *t, int mode,
                               tw_ct_sa *a, twell_stream stream) {
    uint64_t nb = (a->n + TW_CT_SCAN_ITEMS - 1) / TW_CT_SCAN_ITEMS;
    void *sb = t->buf[TB_SCAN].p;
    if (++t->scan_epoch > 0x7ffffffeu) { /* flags 2·epoch + 1, + 2 must fit 32 bits */
        t->scan_epoch = 1u;              /* wrapped: no flag of an older scan may match epoch 1's */
        TW_TRY(tw_cuda_memset_d32(ctx, sb, 0u, t->buf[TB_SCAN].cap / 4u, stream));
    }
    uint32_t epoch = t->scan_epoch;
    void *args[] = {a, &sb, &epoch};
    twell_status st =
        tw_ct_launch(ctx, m->fn[TF_SCAN_TILES + mode], (unsigned)nb, 256, 0, stream, args);
    if (st == TWELL_OK) {
        static const char *const names[4] = {"scan_tiles", "scan_rows", "scan_hist",
                                             "scan_neurons"};
        tw_ct_mark(ctx, t, names[mode], stream);
    }
    return st;
}

static int tw_ct_aligned(const void *const *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((uintptr_t)p[i] % 16u != 0)
            return 0;
    return 1;
}

#define TW_CT_TRY(expr)                                                                            \
    do {                                                                                           \
        st = (expr);                                                                               \
        if (st != TWELL_OK)                                                                        \
            return st;                                                                             \
    } while (0)

/* ---- forward ---- */

/* Steps 1 to 3 of the sparse forward, on the count buffers: the packed gate, the heavy rows
 * classified, the overflowing row-tiles recomputed (on tensor cores where ovf_tc), the scans.
 * *heavy: the heavy-row route classified rows; *ovf_gx: the overflow kernels' grid (ovf_tc). */
static twell_status tw_ct_fwd_count(twell_plan *plan, twell_train_state *state, tw_ctrain *t,
                                    const tw_tmod *md, int vi, int ovf_tc, size_t M, const void *x,
                                    const void *wg, int *synced, int *heavy, uint32_t *ovf_gx,
                                    twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    twell_status st;
    uint32_t NT = s->N / s->T;
    uint64_t tiles = (uint64_t)M * NT;
    void *packed = t->buf[TB_PACKED].p, *mask = t->buf[TB_MASK].p;
    void *tile_off = t->buf[TB_TILE_OFF].p, *spill_off = t->buf[TB_SPILL_OFF].p;
    void *row_off = t->buf[TB_ROW_OFF].p, *chunk_off = t->buf[TB_CHUNK_OFF].p;
    void *pslot_off = t->buf[TB_PSLOT_OFF].p;
    uint64_t *tot = t->buf[TB_TOT].p;
    long long Ml = (long long)M;
    unsigned rthreads = 32u * t->wpb;

    /* 1. the packed gate: exact counts, the first slots entries of each row-tile. The plan's
     * gate-pack may need 16-byte aligned inputs (TMA on sm_90a): unaligned ones are packed by
     * the recount kernel itself, every row-tile in the reference order. */
    int all = vi != 0;
    TW_PROBE_DO(t->probe.npev = 0);
    tw_ct_mark(ctx, t, "start", stream);
    if (!all) {
        TW_CT_TRY(tw_cuda_gate_pack(plan, M, x, wg, packed, stream));
        tw_ct_mark(ctx, t, "gate_pack", stream);
    }
    /* the forward's counters, zeroed by one memset: the heavy rows' number and count sum
     * (tot[6], tot[7]), then (tensor-core overflow tiles) the overflowing row-tiles per tile
     * after the 16 totals (tot[8..15] are the backward's, written before they are read) */
    void *ovf_cnt = tot + 16;
    TW_CT_TRY(tw_cuda_memset_d32(ctx, tot + 6, 0u, 20u + (ovf_tc ? NT : 0u), stream));
    tw_ct_mark(ctx, t, "memset_tot", stream);
    /* heavy rows (the knob on): flagged for the dense block route and emptied in packed, so
     * every kernel below sees them as rows without entries (by ovf_list's pass where it runs) */
    TW_CT_TRY(tw_cth_classify(plan, state, t, M, packed, tot, vi, ovf_tc, synced, heavy, stream));
    /* 2. overflowing row-tiles recomputed (they define the spill): on tensor cores, batched per
     * tile over the listed rows, or one warp per row-tile in the reference order */
    if (ovf_tc) {
        /* 16 listed rows per CTA step (train_ffn.cu.lua's OVF_BM), one warp per 64 columns */
        uint64_t gx = (M + 15) / 16, cap = 16u * (uint64_t)ctx->cuda->sm_count / NT;
        *ovf_gx = (uint32_t)(gx < cap ? gx : (cap ? cap : 1u));
        void *hflag = *heavy ? t->buf[TB_H_FLAG].p : NULL, *htot = tot + 6;
        uint32_t hthr = t->hthr;
        void *largs[] = {&packed, &Ml, &ovf_cnt, &mask, &hthr, &hflag, &htot};
        TW_CT_TRY(
            tw_ct_run(ctx, t, md, TF_OVF_LIST, tw_ct_blocks(ctx, M, 8u), 256, 0, stream, largs));
        void *none = NULL;
        int mode = 0;
        void *targs[] = {(void *)&x, (void *)&wg, &packed, &ovf_cnt, &mask,
                         &none,      &none,       &Ml,     &mode};
        TW_CT_TRY(tw_ct_launch2(ctx, md->fn[TF_OVF_TILES], *ovf_gx, NT, 32u * (s->T / 64u), 0,
                                stream, targs));
        tw_ct_mark(ctx, t, "ovf_tiles_pack", stream);
    } else {
        void *args[] = {(void *)&x, (void *)&wg, &packed, &mask, &Ml, &all};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_RECOUNT, tw_ct_blocks(ctx, tiles, t->wpb), rthreads,
                            t->smem_recount, stream, args));
    }
    /* 3. scans: row-tiles (entries, spill), then rows (chunks, partial slots) */
    tw_ct_sa a;
    memset(&a, 0, sizeof a);
    a.packed = tw_dp(packed), a.o0 = tw_dp(tile_off), a.o1 = tw_dp(spill_off);
    a.o2 = tw_dp(row_off), a.tot = tw_dp(tot), a.n = tiles;
    TW_CT_TRY(tw_ct_scan(ctx, md, t, TS_TILES, &a, stream));
    memset(&a, 0, sizeof a);
    a.in64 = tw_dp(row_off), a.o0 = tw_dp(chunk_off), a.o1 = tw_dp(pslot_off);
    a.tot = tw_dp(tot + 3), a.n = M, a.p0 = TW_TL_ROW_CHUNK_MIN, a.p1 = TW_CT_ROW_LEN(t);
    TW_CT_TRY(tw_ct_scan(ctx, md, t, TS_ROWS, &a, stream));
    return TWELL_OK;
}

/* Step 5 of the sparse forward up to the entries: the spill words, the chunk owners, U (tiled
 * where it can run) and Tm per entry. */
static twell_status tw_ct_fwd_entries(twell_plan *plan, twell_train_state *state, tw_ctrain *t,
                                      const tw_tmod *md, int ovf_tc, uint32_t ovf_gx, size_t M,
                                      const void *x, const void *wg, const void *wu, uint64_t nnz,
                                      uint64_t spill, uint64_t nchunks, uint64_t E, int *synced,
                                      twell_stream stream) {
    static const char fn[] = "twell_ffn_forward_train";
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    twell_status st;
    uint32_t NT = s->N / s->T, NW = s->N / s->C;
    uint64_t tiles = (uint64_t)M * NT;
    void *packed = t->buf[TB_PACKED].p, *mask = t->buf[TB_MASK].p;
    void *tile_off = t->buf[TB_TILE_OFF].p, *spill_off = t->buf[TB_SPILL_OFF].p;
    void *row_off = t->buf[TB_ROW_OFF].p, *chunk_off = t->buf[TB_CHUNK_OFF].p;
    uint64_t *tot = t->buf[TB_TOT].p;
    void *ovf_cnt = tot + 16;
    long long Ml = (long long)M;
    unsigned rthreads = 32u * t->wpb;
    void *u_ell = t->buf[TB_U_ELL].p, *sp = t->buf[TB_SPILL].p, *u_spill = t->buf[TB_U_SPILL].p;
    void *chunk_row = t->buf[TB_CHUNK_ROW].p, *chunk_l1 = t->buf[TB_CHUNK_L1].p;
    void *e_col = t->buf[TB_E_COL].p, *e_tm = t->buf[TB_E_TM].p;

    if (ovf_tc) {
        int mode = 1;
        void *targs[] = {(void *)&x, (void *)&wg, &packed, &ovf_cnt, &mask,
                         &spill_off, &sp,         &Ml,     &mode};
        TW_CT_TRY(tw_ct_launch2(ctx, md->fn[TF_OVF_TILES], ovf_gx, NT, 32u * (s->T / 64u), 0,
                                stream, targs));
        tw_ct_mark(ctx, t, "ovf_tiles_spill", stream);
    } else {
        void *args[] = {(void *)&x, (void *)&wg, &packed, &mask, &spill_off, &sp, &Ml};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_SPILL, tw_ct_blocks(ctx, tiles, t->wpb), rthreads,
                            t->smem_row, stream, args));
    }
    {
        void *args[] = {&chunk_off, &Ml, &chunk_row};
        TW_CT_TRY(
            tw_ct_run(ctx, t, md, TF_OWNERS, tw_ct_blocks(ctx, M, 256u), 256, 0, stream, args));
    }
    /* tiled U (staged builds): the fused pipeline's lists and phase A, values into u_ell; the
     * per-entry kernel then computes only the overflowing row-tiles' entries */
    const uint32_t *pre = NULL;
    int pre_all = 0;
    if (TW_CT_UDT(t) && md->staged && !TW_CT_LEGACY(t) && tw_ctt_ready(plan, &t->tiled, M)) {
        TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_DT_ELL, M * NW * 4u, fn, synced));
        TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_DT_SPILL, spill * 4u, fn, synced));
        TW_CT_TRY(tw_ctt_lists(plan, t->tiled, M, packed, nnz, stream, &pre));
        tw_ct_mark(ctx, t, "u_lists", stream);
        TW_CT_TRY(tw_ctt_phase_a(plan, t->tiled, M, x, wu, stream));
        tw_ct_mark(ctx, t, "u_phase_a", stream);
        TW_CT_TRY(tw_ctt_udt(plan, t->tiled, M, u_ell, md->fn[TF_UDT], stream));
        tw_ct_mark(ctx, t, "u_sum", stream);
        if (md->ovf_udt) { /* overflowing row-tiles: dense per listed row-tile, tensor cores */
            void *oargs[] = {(void *)&x, (void *)&wu, &packed, &ovf_cnt, &mask,
                             &spill_off, &sp,         &u_ell,  &u_spill, &Ml};
            TW_CT_TRY(tw_ct_launch2(ctx, md->fn[TF_OVF_UDT], ovf_gx, NT, 32u * (s->T / 64u), 0,
                                    stream, oargs));
            tw_ct_mark(ctx, t, "u_ovf", stream);
            pre_all = 1;
        }
        t->fwd_tiled = 1 + pre_all;
        state->bytes = tw_ct_bytes(t);
    }
    if (pre && pre_all) { /* every U precomputed: the lean pass (the staged one then returns) */
        void *args[] = {&packed,  &u_ell,   &tile_off,  &spill_off, &sp,
                        &u_spill, &row_off, &chunk_off, &chunk_row, &E,
                        &e_col,   &e_tm,    &chunk_l1,  &Ml,        &pre};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_FWD_ENT_P, tw_ct_blocks(ctx, nchunks, 8u), 256, 0,
                            stream, args));
    }
    {
        void *args[] = {(void *)&x, (void *)&wu, &packed,   &u_ell,     &tile_off,  &spill_off,
                        &sp,        &u_spill,    &row_off,  &chunk_off, &chunk_row, &E,
                        &e_col,     &e_tm,       &chunk_l1, &Ml,        &pre,       &pre_all};
        int sg = md->staged && !TW_CT_LEGACY(t);
        TW_CT_TRY(tw_ct_run(ctx, t, md, sg ? TF_FWD_ENT_S : TF_FWD_ENT,
                            tw_ct_blocks(ctx, nchunks, sg ? TW_CT_SWP : t->wpb),
                            sg ? 32u * TW_CT_SWP : rthreads, sg ? t->smem_stage : t->smem_row,
                            stream, args));
    }
    return TWELL_OK;
}

/* The rest of step 5: y, the split rows reduced, the stats, the heavy block's part. */
static twell_status tw_ct_fwd_y(twell_plan *plan, tw_ctrain *t, const tw_tmod *md, size_t M,
                                const void *wd, void *y, float *stats, uint64_t nchunks,
                                uint64_t pslots, uint64_t E, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    twell_status st;
    void *row_off = t->buf[TB_ROW_OFF].p, *chunk_off = t->buf[TB_CHUNK_OFF].p;
    void *pslot_off = t->buf[TB_PSLOT_OFF].p;
    long long Ml = (long long)M;
    void *chunk_row = t->buf[TB_CHUNK_ROW].p, *chunk_l1 = t->buf[TB_CHUNK_L1].p;
    void *e_col = t->buf[TB_E_COL].p, *e_tm = t->buf[TB_E_TM].p;
    void *partial = t->buf[TB_PARTIAL].p;
    uint32_t NS = (s->K + 32u * (uint32_t)t->last_vec - 1) / (32u * (uint32_t)t->last_vec);
    {
        void *args[] = {(void *)&wd, &e_col, &e_tm, &row_off, &chunk_off, &pslot_off,
                        &chunk_row,  &E,     &y,    &partial, &Ml};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_FWD_Y, tw_ct_resident(ctx, md, TF_FWD_Y, nchunks * NS),
                            256, 0, stream, args));
    }
    if (pslots) {
        void *args[] = {&partial, &chunk_off, &pslot_off, &y, &Ml};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_ROW_REDUCE, tw_ct_blocks(ctx, M * NS, 8u), 256, 0,
                            stream, args));
    }
    if (stats && t->nh == 0) {
        void *args[] = {&chunk_l1, &chunk_off, &row_off, &Ml, &stats};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_STATS, 1, 256, 0, stream, args));
    }
    /* the heavy block's y into its rows (the sparse y left them zero), stats of both parts */
    TW_CT_TRY(tw_cth_finish_forward(plan, t, M, y, stats, stream));
    return TWELL_OK;
}

/* The sparse forward. probe > 0 (AUTO's first forward): stops after the counts (nothing saved,
 * *to_dense = 1) when the active values exceed probe per row, for the dense path to run instead. */
twell_status tw_ct_forward(twell_plan *plan, size_t M, const void *x, const void *wg,
                           const void *wu, const void *wd, void *y, float *stats,
                           twell_train_state *state, double probe, int *to_dense,
                           twell_stream stream) {
    static const char fn[] = "twell_ffn_forward_train";
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    twell_status st;
    tw_ctrain *t = NULL;
    *to_dense = 0;
    TW_CT_TRY(tw_ct_get(ctx, state, &t));
    t->M = 0; /* the earlier forward is gone from here on */
    t->nh = 0;
    t->hnnz = 0;
    t->hthr = 0;
    t->have_bwd = 0;
    t->fwd_tiled = 0;
    if (M > 0xffffffffu)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED, "%s: M = %zu exceeds 2^32 - 1 rows", fn, M);
    const void *ptrs[] = {x, wg, wu, wd, y};
    int vi = tw_ct_aligned(ptrs, 5) ? 0 : 1;
    TW_CT_TRY(tw_ct_load(plan, t, vi));
    const tw_tmod *md = &t->mods[vi];
    t->last_vec = vi == 0 ? 8 : 1;

    uint32_t NT = s->N / s->T, NW = s->N / s->C, TM = s->T / 32u;
    uint64_t tiles = (uint64_t)M * NT;
    uint64_t nb = (tiles + TW_CT_SCAN_ITEMS - 1) / TW_CT_SCAN_ITEMS;
    int synced = 0;
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_PACKED, M * NW * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_U_ELL, M * NW * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_MASK, tiles * TM * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_TILE_OFF, (tiles + 1) * 8u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_SPILL_OFF, (tiles + 1) * 8u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_ROW_OFF, (M + 1) * 8u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_CHUNK_OFF, (M + 1) * 8u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_PSLOT_OFF, (M + 1) * 8u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_SCAN, TW_CT_SCAN_BYTES(nb), fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_TOT, 16u * 8u + NT * 4u, fn, &synced));

    uint64_t *tot = t->buf[TB_TOT].p;
    int ovf_tc =
        md->mma && !TW_CT_LEGACY(t); /* overflowing row-tiles on tensor cores (steps 2, 5) */
    int heavy = 0;
    uint32_t ovf_gx = 0;
    TW_CT_TRY(tw_ct_fwd_count(plan, state, t, md, vi, ovf_tc, M, x, wg, &synced, &heavy, &ovf_gx,
                              stream));
    /* 4. the one host read: totals size the spill, the entry arrays and the chunks */
    TW_CT_TRY(
        tw_cuda_memcpy_dtoh_async(ctx, t->htot, tot, (heavy ? 8u : 6u) * sizeof(uint64_t), stream));
    TW_CT_TRY(tw_cuda_event_record(ctx, t->ev, stream));
    TW_CT_TRY(tw_cuda_event_synchronize(ctx, t->ev));
    tw_ct_mark(ctx, t, "host_sync", stream);
    uint64_t nnz = t->htot[0], spill = t->htot[1], nchunks = t->htot[3], pslots = t->htot[4];
    uint64_t E = t->htot[5];
    if (nnz > (uint64_t)M * s->N || spill > nnz || nchunks < M || E == 0)
        return tw_error(ctx, TWELL_ERR_INTERNAL,
                        "%s: inconsistent totals from the device (nnz %llu, spill %llu, chunks "
                        "%llu, E %llu)",
                        fn, (unsigned long long)nnz, (unsigned long long)spill,
                        (unsigned long long)nchunks, (unsigned long long)E);
    if (nnz >= 0xffffffffu)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                        "%s: %llu active entries exceed the 2^32 - 1 the entry lists index", fn,
                        (unsigned long long)nnz);
    if (probe > 0.0 && (double)(nnz + (heavy ? t->htot[7] : 0u)) > probe * (double)M) {
        *to_dense = 1; /* AUTO's probe: dense data; the work so far only counted (M stays 0) */
        t->nnz = nnz;
        t->hnnz = heavy ? t->htot[7] : 0u;
        TW_PROBE_DO(t->probe.npev = 0);
        /* the dense path runs from here on: the count buffers go (a later sparse forward
         * allocates them again) */
        return tw_ct_drop_buffers(ctx, state, t);
    }
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_SPILL, spill * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_U_SPILL, spill * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_CHUNK_ROW, nchunks * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_CHUNK_L1, nchunks * 8u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_E_COL, nnz * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_E_TM, nnz * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_PARTIAL, pslots * s->K * 4u, fn, &synced));

    if (heavy) /* their x gathered, the dense forward GEMMs on the block */
        TW_CT_TRY(tw_cth_forward(plan, state, t, M, x, wg, wu, wd, &synced, stream));
    /* 5. spill words, chunk owners, U and Tm, y, split rows, stats */
    TW_CT_TRY(tw_ct_fwd_entries(plan, state, t, md, ovf_tc, ovf_gx, M, x, wg, wu, nnz, spill,
                                nchunks, E, &synced, stream));
    TW_CT_TRY(tw_ct_fwd_y(plan, t, md, M, wd, y, stats, nchunks, pslots, E, stream));
    t->M = M, t->nnz = nnz, t->spill = spill, t->nchunks = nchunks, t->pslots = pslots, t->E = E;
    tw_ct_prof_collect(ctx, t);
    state->bytes = tw_ct_bytes(t);
    return TWELL_OK;
}

/* ---- backward ---- */

/* Step 1 of the sparse backward: dT, dU and dP per entry (dT tiled where the saved forward ran
 * tiled U). */
static twell_status tw_ct_bwd_entries(twell_plan *plan, tw_ctrain *t, const tw_tmod *md, size_t M,
                                      const void *dy, const void *wd, float l1c,
                                      twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    twell_status st;
    void *packed = t->buf[TB_PACKED].p, *u_ell = t->buf[TB_U_ELL].p;
    void *tile_off = t->buf[TB_TILE_OFF].p, *spill_off = t->buf[TB_SPILL_OFF].p;
    void *sp = t->buf[TB_SPILL].p, *u_spill = t->buf[TB_U_SPILL].p;
    void *row_off = t->buf[TB_ROW_OFF].p, *chunk_off = t->buf[TB_CHUNK_OFF].p;
    void *chunk_row = t->buf[TB_CHUNK_ROW].p;
    void *e_du = t->buf[TB_E_DU].p, *e_dp = t->buf[TB_E_DP].p;
    uint64_t *tot = t->buf[TB_TOT].p;
    long long Ml = (long long)M;
    uint64_t E = t->E;
    unsigned rthreads = 32u * t->wpb;
    /* 1. per entry: dT, dU, dP (tiled dT: dy·Wd from the forward's lists and phase A for the
     * entries of non-overflowing row-tiles) */
    const uint32_t *pre = NULL;
    int pre_all = 0;
    void *dt_ell = t->buf[TB_DT_ELL].p, *dt_spill = t->buf[TB_DT_SPILL].p;
    if (t->fwd_tiled && md->staged && !TW_CT_LEGACY(t)) {
        TW_CT_TRY(tw_ctt_phase_a(plan, t->tiled, M, dy, wd, stream));
        tw_ct_mark(ctx, t, "dt_phase_a", stream);
        TW_CT_TRY(tw_ctt_udt(plan, t->tiled, M, dt_ell, md->fn[TF_UDT], stream));
        tw_ct_mark(ctx, t, "dt_sum", stream);
        if (t->fwd_tiled == 2 && md->ovf_udt) { /* the forward's overflow lists (mask, counts) */
            uint32_t NT = s->N / s->T;
            uint64_t gx = (M + 15) / 16, cap = 16u * (uint64_t)ctx->cuda->sm_count / NT;
            uint32_t ovf_gx = (uint32_t)(gx < cap ? gx : (cap ? cap : 1u));
            void *ovf_cnt = tot + 16, *mask = t->buf[TB_MASK].p;
            void *oargs[] = {(void *)&dy, (void *)&wd, &packed, &ovf_cnt,  &mask,
                             &spill_off,  &sp,         &dt_ell, &dt_spill, &Ml};
            TW_CT_TRY(tw_ct_launch2(ctx, md->fn[TF_OVF_UDT], ovf_gx, NT, 32u * (s->T / 64u), 0,
                                    stream, oargs));
            tw_ct_mark(ctx, t, "dt_ovf", stream);
            pre_all = 1;
        }
        pre = tw_ctt_flag(t->tiled);
    }
    if (pre && pre_all) { /* every dy·Wd_n precomputed: the lean pass (the staged one returns) */
        void *args[] = {&packed,  &u_ell,     &tile_off,  &spill_off, &sp,      &u_spill,
                        &row_off, &chunk_off, &chunk_row, &E,         &l1c,     &e_du,
                        &e_dp,    &Ml,        &pre,       &dt_ell,    &dt_spill};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_BWD_ENT_P, tw_ct_blocks(ctx, t->nchunks, 8u), 256, 0,
                            stream, args));
    }
    {
        void *args[] = {(void *)&dy, (void *)&wd, &packed,  &u_ell,   &tile_off,
                        &spill_off,  &sp,         &u_spill, &row_off, &chunk_off,
                        &chunk_row,  &E,          &l1c,     &e_du,    &e_dp,
                        &Ml,         &pre,        &dt_ell,  &pre_all, &dt_spill};
        int sg = md->staged && !TW_CT_LEGACY(t);
        TW_CT_TRY(tw_ct_run(ctx, t, md, sg ? TF_BWD_ENT_S : TF_BWD_ENT,
                            tw_ct_blocks(ctx, t->nchunks, sg ? TW_CT_SWP : t->wpb),
                            sg ? 32u * TW_CT_SWP : rthreads, sg ? t->smem_stage : t->smem_row,
                            stream, args));
    }
    return TWELL_OK;
}

/* Step 3 of the sparse backward: the neuron-major lists, over B row blocks of R rows
 * (tw_tl_row_blocks) with nhist = N·B histogram counters, nhist2 of them rounded up to even. */
static twell_status tw_ct_bwd_lists(twell_plan *plan, tw_ctrain *t, const tw_tmod *md, size_t M,
                                    size_t R, size_t B, uint64_t nhist, uint64_t nhist2,
                                    twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    twell_status st;
    void *row_off = t->buf[TB_ROW_OFF].p;
    void *e_col = t->buf[TB_E_COL].p;
    void *hist = t->buf[TB_HIST].p, *cursor = t->buf[TB_CURSOR].p;
    void *col_off = t->buf[TB_COL_OFF].p, *col_row = t->buf[TB_COL_ROW].p;
    void *col_ent = t->buf[TB_COL_ENT].p;
    uint64_t *tot = t->buf[TB_TOT].p;
    long long Ml = (long long)M, Rl = (long long)R, Bl = (long long)B;
    /* 3. neuron-major lists: histograms per row block, one scan, stable placement */
    TW_CT_TRY(tw_cuda_memset_d32(ctx, hist, 0u, nhist2 + 2u, stream));
    tw_ct_mark(ctx, t, "memset_hist", stream);
    {
        void *args[] = {&row_off, &e_col, &Ml, &Rl, &Bl, &hist};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_HIST, (unsigned)B, 256, 0, stream, args));
    }
    tw_ct_sa a;
    memset(&a, 0, sizeof a);
    a.in32 = tw_dp(hist), a.o32 = tw_dp(cursor), a.o0 = tw_dp(col_off), a.tot = tw_dp(tot + 8);
    a.n = nhist, a.p0 = B;
    TW_CT_TRY(tw_ct_scan(ctx, md, t, TS_HIST, &a, stream));
    {
        int ranked = md->scatter_smem != 0 && !TW_CT_LEGACY(t);
        void *args[] = {&row_off, &e_col, &Ml, &Rl, &Bl, &cursor, &col_row, &col_ent, &ranked};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_SCATTER, (unsigned)B, 256,
                            ranked ? md->scatter_smem : 0u, stream, args));
    }
    return TWELL_OK;
}

/* Step 4 of the sparse backward: the neuron chunks (E2 entries each, at most nchunk_bound), the
 * weight gradients (added to what is there when acc), the split neurons reduced. */
static twell_status tw_ct_bwd_weights(twell_plan *plan, tw_ctrain *t, const tw_tmod *md,
                                      uint64_t nhist2, uint64_t E2, uint64_t nchunk_bound,
                                      uint32_t NS, const void *x, const void *dy, int acc,
                                      float *dwg, float *dwu, float *dwd, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    uint32_t N = plan->shape.N;
    twell_status st;
    void *e_tm = t->buf[TB_E_TM].p;
    void *e_du = t->buf[TB_E_DU].p, *e_dp = t->buf[TB_E_DP].p;
    void *hist = t->buf[TB_HIST].p;
    void *col_off = t->buf[TB_COL_OFF].p, *col_row = t->buf[TB_COL_ROW].p;
    void *col_ent = t->buf[TB_COL_ENT].p, *nchunk_off = t->buf[TB_NCHUNK_OFF].p;
    void *nslot_off = t->buf[TB_NSLOT_OFF].p, *nchunk_nrn = t->buf[TB_NCHUNK_NRN].p;
    void *npart = t->buf[TB_NPART].p;
    uint64_t *tot = t->buf[TB_TOT].p;
    /* 4. neuron chunks, weight gradients, split neurons reduced */
    tw_ct_sa a;
    memset(&a, 0, sizeof a);
    a.in64 = tw_dp(col_off), a.o0 = tw_dp(nchunk_off), a.o1 = tw_dp(nslot_off);
    a.o32 = tw_dp(nchunk_nrn); /* the chunks' owners too (no twell_train_owners launch) */
    a.tot = tw_dp(tot + 11), a.n = N, a.p1 = E2;
    TW_CT_TRY(tw_ct_scan(ctx, md, t, TS_NEURONS, &a, stream));
    {
        /* the queue of twell_train_dw: the counter after the histograms (zeroed with them) */
        void *work = (uint32_t *)hist + nhist2;
        void *args[] = {(void *)&x, (void *)&dy, &col_off,    &col_row,   &col_ent,    &e_du,
                        &e_dp,      &e_tm,       &nchunk_off, &nslot_off, &nchunk_nrn, &E2,
                        &dwg,       &dwu,        &dwd,        &npart,     &acc,        &work};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_DW, tw_ct_resident(ctx, md, TF_DW, nchunk_bound * NS),
                            256, 0, stream, args));
    }
    {
        void *args[] = {&nchunk_off, &nslot_off, &npart, &dwg, &dwu, &dwd};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_DW_REDUCE, tw_ct_blocks(ctx, (uint64_t)N * NS, 8u), 256,
                            0, stream, args));
    }
    return TWELL_OK;
}

twell_status tw_ct_backward(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                            const void *wg, const void *wu, const void *wd, const void *dy,
                            float lambda, void *dx, float *dwg, float *dwu, float *dwd,
                            twell_stream stream) {
    static const char fn[] = "twell_ffn_backward";
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    twell_status st;
    tw_ctrain *t = state->backend_data;
    if (!t || t->M == 0 || t->M != M)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "%s: state holds no forward of M = %zu", fn, M);
    const void *ptrs[] = {x, wg, wu, wd, dy, dx, dwg, dwu, dwd};
    int vi = tw_ct_aligned(ptrs, 9) ? 0 : 1;
    TW_CT_TRY(tw_ct_load(plan, t, vi));
    const tw_tmod *md = &t->mods[vi];
    t->last_vec = vi == 0 ? 8 : 1;
    t->have_bwd = 0;

    uint32_t N = s->N, K = s->K;
    uint64_t nnz = t->nnz;
    size_t R, B;
    tw_tl_row_blocks(M, N, &R, &B);
    uint64_t nrn_len = TW_CT_NRN_LEN(t);
    uint64_t E2 = nrn_len ? nrn_len : tw_tl_nrn_chunk_len(nnz, N, TW_TL_NRN_CHUNK_MIN);
    uint64_t nchunk_bound = N + nnz / E2, nslot_bound = nnz / E2 + 1u;
    uint64_t nhist = (uint64_t)N * B;
    uint64_t nb = (nhist + TW_CT_SCAN_ITEMS - 1) / TW_CT_SCAN_ITEMS;
    int synced = 0;
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_E_DU, nnz * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_E_DP, nnz * 4u, fn, &synced));
    /* the histograms, then the queue of twell_train_dw (u64, 8-byte aligned): zeroed together */
    uint64_t nhist2 = (nhist + 1u) & ~(uint64_t)1u;
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_HIST, nhist2 * 4u + 8u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_CURSOR, nhist * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_COL_OFF, ((size_t)N + 1) * 8u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_COL_ROW, nnz * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_COL_ENT, nnz * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_NCHUNK_OFF, ((size_t)N + 1) * 8u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_NSLOT_OFF, ((size_t)N + 1) * 8u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_NCHUNK_NRN, nchunk_bound * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_NPART, nslot_bound * 3u * K * 4u, fn, &synced));
    TW_CT_TRY(tw_ct_reserve(ctx, state, t, TB_SCAN, TW_CT_SCAN_BYTES(nb), fn, &synced));

    void *row_off = t->buf[TB_ROW_OFF].p, *chunk_off = t->buf[TB_CHUNK_OFF].p;
    void *pslot_off = t->buf[TB_PSLOT_OFF].p, *chunk_row = t->buf[TB_CHUNK_ROW].p;
    void *e_col = t->buf[TB_E_COL].p;
    void *partial = t->buf[TB_PARTIAL].p;
    void *e_du = t->buf[TB_E_DU].p, *e_dp = t->buf[TB_E_DP].p;
    long long Ml = (long long)M;
    uint64_t E = t->E;
    float l1c = (float)((double)lambda / (double)M); /* as the CPU reference */
    uint32_t NS = (K + 32u * (uint32_t)t->last_vec - 1) / (32u * (uint32_t)t->last_vec);

    if (t->nh && vi != 0)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "%s: the saved forward ran its heavy rows on the dense GEMMs, whose "
                        "backward needs every tensor 16-byte aligned",
                        fn);
    TW_PROBE_DO(t->probe.npev = 0);
    tw_ct_mark(ctx, t, "start", stream);
    /* 0. heavy rows: the dense backward GEMMs on the block; the weight gradients stored here,
     * the sparse kernel adds its sums (acc) */
    TW_CT_TRY(
        tw_cth_backward(plan, state, t, M, wg, wu, wd, dy, l1c, dwg, dwu, dwd, &synced, stream));
    int acc = t->nh != 0;
    TW_CT_TRY(tw_ct_bwd_entries(plan, t, md, M, dy, wd, l1c, stream));
    /* 2. dx per row chunk, split rows reduced */
    {
        void *args[] = {(void *)&wu, (void *)&wg, &e_col, &e_du, &e_dp,    &row_off, &chunk_off,
                        &pslot_off,  &chunk_row,  &E,     &dx,   &partial, &Ml};
        /* not tw_ct_resident: keeping the weights resident cuts dx's DRAM reads at K 2048 but
         * loses more at the 7B-class shape than it gains there (docs/lab/NOTES-train-dw.md) */
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_BWD_DX, tw_ct_blocks(ctx, t->nchunks * NS, 8u), 256, 0,
                            stream, args));
    }
    if (t->pslots) {
        void *args[] = {&partial, &chunk_off, &pslot_off, &dx, &Ml};
        TW_CT_TRY(tw_ct_run(ctx, t, md, TF_ROW_REDUCE, tw_ct_blocks(ctx, M * NS, 8u), 256, 0,
                            stream, args));
    }
    TW_CT_TRY(tw_cth_finish_backward(plan, t, dx, stream)); /* the heavy block's dx */
    TW_CT_TRY(tw_ct_bwd_lists(plan, t, md, M, R, B, nhist, nhist2, stream));
    TW_CT_TRY(tw_ct_bwd_weights(plan, t, md, nhist2, E2, nchunk_bound, NS, x, dy, acc, dwg, dwu,
                                dwd, stream));
    t->have_bwd = 1, t->R = R, t->B = B, t->E2 = E2;
    tw_ct_prof_collect(ctx, t);
    state->bytes = tw_ct_bytes(t);
    return TWELL_OK;
}
