/*
 * cuda_train_int.h — what cuda_train.c, cuda_train_state.c, cuda_train_route.c and
 * cuda_train_probe.c share: the kernel and buffer indices of a CUDA training state and its
 * layout, the sparse path's entry points (not part of any public or test API).
 */
#ifndef TWELL_CUDA_TRAIN_INT_H
#define TWELL_CUDA_TRAIN_INT_H

#include "cuda_driver.h"
#include "cuda_train_probe.h"
#include "cuda_train_tiled.h"
#include "internal.h"

/* The kernels of train_ffn, by index. */
enum {
    TF_RECOUNT,
    TF_SCAN_TILES, /* the four scan modes, in TS_* order */
    TF_SCAN_ROWS,
    TF_SCAN_HIST,
    TF_SCAN_NEURONS,
    TF_OWNERS,
    TF_SPILL,
    TF_FWD_ENT,
    TF_FWD_Y,
    TF_ROW_REDUCE,
    TF_STATS,
    TF_BWD_ENT,
    TF_BWD_DX,
    TF_HIST,
    TF_SCATTER,
    TF_DW,
    TF_DW_REDUCE,
    TF_FWD_ENT_S, /* from here: only in VEC 8 builds */
    TF_BWD_ENT_S,
    TF_UDT,       /* tiled U / dT: slices of the fused pipeline's phase A to entry words */
    TF_FWD_ENT_P, /* tiled U / dT with every value precomputed: the lean entry passes */
    TF_BWD_ENT_P,
    TF_OVF_LIST, /* from here: only in builds with tensor-core overflow tiles (tw_ct_mma) */
    TF_OVF_TILES,
    TF_OVF_UDT, /* only in those with T <= 512 */
    TF_COUNT
};

/* Scan modes (a one-pass kernel each: TF_SCAN_TILES + mode). */
enum { TS_TILES = 0, TS_ROWS = 1, TS_HIST = 2, TS_NEURONS = 3 };

/* The device buffers; names follow cpu_train.h where the CPU has the same array. */
enum {
    TB_PACKED,     /* u32 [M·N/C] */
    TB_U_ELL,      /* f32 [M·N/C] */
    TB_MASK,       /* u32 [M·NT·T/32] */
    TB_TILE_OFF,   /* u64 [M·NT+1] */
    TB_SPILL_OFF,  /* u64 [M·NT+1] */
    TB_ROW_OFF,    /* u64 [M+1] */
    TB_CHUNK_OFF,  /* u64 [M+1] */
    TB_PSLOT_OFF,  /* u64 [M+1] */
    TB_SCAN,       /* the scans' look-back state: TW_CT_SCAN_BYTES(blocks), zeroed when allocated */
    TB_TOT,        /* u64 [16]: forward totals at 0..5, heavy rows 6..7, backward scans at 8..13;
                    * then u32 [NT]: overflowing row-tiles per tile (list in TB_MASK) */
    TB_SPILL,      /* u32 [spill] */
    TB_U_SPILL,    /* f32 [spill] */
    TB_CHUNK_ROW,  /* u32 [chunks] */
    TB_CHUNK_L1,   /* f64 [chunks] */
    TB_E_COL,      /* u32 [nnz] */
    TB_E_TM,       /* f32 [nnz] */
    TB_PARTIAL,    /* f32 [pslots·K] */
    TB_E_DU,       /* f32 [nnz] */
    TB_E_DP,       /* f32 [nnz] */
    TB_HIST,       /* u32 [N·B] (rounded up to even), then twell_train_dw's queue (u64) */
    TB_CURSOR,     /* u32 [N·B] */
    TB_COL_OFF,    /* u64 [N+1] */
    TB_COL_ROW,    /* u32 [nnz] */
    TB_COL_ENT,    /* u32 [nnz] */
    TB_NCHUNK_OFF, /* u64 [N+1] */
    TB_NSLOT_OFF,  /* u64 [N+1] */
    TB_NCHUNK_NRN, /* u32 [bound on neuron chunks] */
    TB_NPART,      /* f32 [bound on neuron partial slots · 3K] */
    TB_DT_ELL,     /* f32 [M·N/C]: dy·Wd of the entry in the same word (tiled dT) */
    TB_DT_SPILL,   /* f32 [spill]: dy·Wd of the spill entries (tiled dT) */
    TB_H_FLAG,     /* u32 [M]: heavy rows' counts, 0 for the others (cuda_train_heavy.c) */
    TB_H_IDX,      /* u32 [M]: the heavy rows, ascending */
    TB_H_X,        /* 16-bit [nh, K]: their x */
    TB_H_Y,        /* 16-bit [nh, K]: their y (forward), dx (backward) */
    TB_H_DY,       /* 16-bit [nh, K]: their dy */
    TB_H_WS,       /* the dense GEMMs' workspace for nh rows (tw_ctd_bytes) */
    TB_COUNT
};

typedef struct {
    tw_CUmodule mod;
    tw_CUfunction fn[TF_COUNT];
    int mma;               /* overflowing row-tiles on tensor cores (TF_OVF_*) */
    int staged;            /* staged per-entry dot products (TF_*_ENT_S) */
    int ovf_udt;           /* tiled U / dT of overflowing row-tiles (TF_OVF_UDT) */
    int occ[TF_COUNT];     /* blocks of 256 threads resident per SM of the K-slice kernels on
                            * resident grids (TF_FWD_Y, TF_DW; 0: unknown or other kernels) */
    unsigned scatter_smem; /* TF_SCATTER's shared bytes, ranked (0: N too large, unranked) */
} tw_tmod;

/* The heavy-row route's kernels (templates/train/train_heavy.cu.lua), by index. */
enum { TH_FLAG, TH_LIST, TH_ROWS, TH_STATS, TH_COUNT };

typedef struct {
    void *p;
    size_t cap; /* bytes */
} tw_dbuf;

typedef struct tw_ctrain {
    tw_tmod mods[2]; /* [0]: VEC 8, [1]: VEC 1 (loaded when needed) */
    uint32_t wpb;    /* warps per block of the row kernels */
    unsigned smem_row, smem_recount, smem_stage;
#ifdef TWELL_PROBES
    tw_ctrain_knobs probe; /* the test knobs and profiling (cuda_train_probe.h) */
#endif
    tw_ctt *tiled;
    int fwd_tiled; /* the saved forward's tiled U (its backward follows): 0 none, 1 the lists
                    * (overflowing row-tiles per entry), 2 also TF_OVF_UDT */
    tw_dbuf buf[TB_COUNT];
    uint64_t *htot; /* pinned [8]: the forward's totals read by the host */
    tw_cuda_event ev;
    int last_vec;
    /* heavy rows by dense row block (cuda_train_heavy.c; on at the cost model's threshold, a
     * probe may set another): its module, and the saved forward's heavy rows (nh of them, hnnz
     * active values; 0: none) */
    uint32_t scan_epoch; /* the last scan's epoch (tw_ct_scan): 1..2^31 - 2 */
    tw_CUmodule hmod;
    tw_CUfunction hfn[TH_COUNT];
    size_t nh;
    uint64_t hnnz;
    uint32_t hthr; /* the threshold the saved forward classified with (0: the route did not run) */
    /* the saved forward (M = 0: none) */
    size_t M, nnz, spill, nchunks, pslots;
    uint64_t E;
    /* the last backward on it */
    int have_bwd;
    size_t R, B;
    uint64_t E2;
} tw_ctrain;

/* The probes' knobs as the launchers read them (the shipped library: the defaults). */
#define TW_CT_LEGACY(t) TW_PROBE_OR((t)->probe.legacy, 0)    /* the earlier kernels */
#define TW_CT_UDT(t) (!TW_PROBE_OR((t)->probe.per_entry, 0)) /* U and dT tiled */
#define TW_CT_ROW_LEN(t) TW_PROBE_OR((t)->probe.row_len, 0)  /* 0: automatic */
#define TW_CT_NRN_LEN(t) TW_PROBE_OR((t)->probe.nrn_len, 0)  /* 0: automatic */
#define TW_CT_HEAVY(t) TW_PROBE_OR((t)->probe.heavy, -1)     /* < 0: the cost model's */

extern const char *const tw_ct_buf_names[TB_COUNT]; /* for messages */

/* The bytes t holds (host record, pinned totals, device buffers, the tiled route's state): what
 * state->bytes reports. */
size_t tw_ct_bytes(const tw_ctrain *t);

/* Makes buffer b hold at least `bytes` (grows after a device synchronisation, *synced set; the
 * contents are not kept). */
twell_status tw_ct_reserve(twell_ctx *ctx, twell_train_state *state, tw_ctrain *t, int b,
                           size_t bytes, const char *fn, int *synced);
/* Frees every device buffer of t after a device synchronisation; the modules, events and pinned
 * totals stay. */
twell_status tw_ct_drop_buffers(twell_ctx *ctx, twell_train_state *state, tw_ctrain *t);
/* Grid of a grid-stride kernel for warp_items warp items at warps_per_block (capped). */
unsigned tw_ct_blocks(const twell_ctx *ctx, uint64_t warp_items, uint32_t warps_per_block);
/* Launch on a (grid, gy) grid of `block` threads. */
twell_status tw_ct_launch2(twell_ctx *ctx, tw_CUfunction fn, unsigned grid, unsigned gy,
                           unsigned block, unsigned smem, twell_stream stream, void **args);

/* The backend state of `state`, created (with its pinned totals and event) on first use. */
twell_status tw_ct_get(twell_ctx *ctx, twell_train_state *state, tw_ctrain **out);
/* The sparse path (cuda_train.c), inside tw_cu_enter/leave. Forward: probe > 0 (AUTO's first
 * forward) stops after the counts (nothing saved, *to_dense = 1) when the active values exceed
 * probe per row. Backward: on the state's saved sparse forward of M rows. */
twell_status tw_ct_forward(twell_plan *plan, size_t M, const void *x, const void *wg,
                           const void *wu, const void *wd, void *y, float *stats,
                           twell_train_state *state, double probe, int *to_dense,
                           twell_stream stream);
twell_status tw_ct_backward(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                            const void *wg, const void *wu, const void *wd, const void *dy,
                            float lambda, void *dx, float *dwg, float *dwu, float *dwd,
                            twell_stream stream);

#endif /* TWELL_CUDA_TRAIN_INT_H */
