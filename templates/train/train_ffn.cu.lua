-- train_ffn.cu.lua — CUDA training forward and backward of a gated TwELL FFN (docs/DESIGN.md §6,
-- twellrt.h "Training"), every step exact and deterministic (fixed orders, integer scans, no
-- floating-point atomics). runtime/ops/train/sparse/cuda_train.c owns the buffers and launches these kernels.
--
-- Parameters: K, N, T, C, dtype (see twellrt.h); VEC (8: 16-byte vector loads and stores, every
-- tensor 16-byte aligned; 1: element loads, any 2-byte alignment; default 8); WPB (warps per
-- block of the kernels that keep a token row in shared memory, default 4).
--
-- Arithmetic. Every dot product is the reference sequence of runtime/cpu/cpu_ref.h (tw_dot_ref):
-- one lane walks k ascending, products rounded to fp32 (__fmul_rn), one accumulator from +0
-- (__fadd_rn), so U and dy·Wd are bit-identical to the CPU reference (and so is a gate value
-- recomputed by the SIMT recount of VEC 1 builds). Gate values come from tensor cores otherwise,
-- as in the plan's gate-pack: the MMA recount of overflowing row-tiles sums in another order
-- (exact whenever the pre-activation is; else it may differ near 0 or a 16-bit rounding edge).
-- Sums over entries (y, dx) and tokens (dW) add separately rounded products in the CPU's order
-- (ascending column, ascending token); a row or neuron split into chunks adds its chunk partials
-- in chunk order afterwards (deterministic, not bit-identical to the CPU's single chain).
--
-- Saved state (mirrors runtime/cpu/cpu_train.h; r = m·NT + t is a row-tile, entries e are numbered
-- row-major, ascending column within a row):
--   packed [M, N/C] u32   TwELL of P (gate-pack, then overflowing row-tiles rewritten by recount)
--   u_ell  [M, N/C] f32   U of the entry in the same word (count words and empty slots untouched)
--   mask   [M·NT, T/32]   active columns of row-tiles that overflow (valid where count > slots;
--                         SIMT path) or, MMA path, the overflowing rows per tile: list[t·M + i]
--   tile_off [M·NT+1] u64 first entry of each row-tile; row_off [M+1] u64 the same per row
--   spill_off [M·NT+1] u64 first spill word of each row-tile: max(0, count - slots) each
--   spill, u_spill        (P << 16 | n) and U of the entries beyond the slots
-- Row chunks (load balance): row m is cut into max(1, ceil(cnt/E)) chunks of at most E entries,
-- E = max(lo, 4·ceil(nnz/M)) (lo = 64 from the host, or a fixed length the host forces for
-- tests; chosen by the rows scan, reported in tot[2]); chunk c belongs to
-- row chunk_row[c], chunk_off [M+1] u64; a row with more than one chunk owns partial slots
-- pslot_off[m] .. (one [K] fp32 row per chunk). Neuron chunks: the same with E2 (from the host),
-- nchunk_off/nslot_off [N+1] u64, nchunk_nrn[c]; chunk j ≥ 1 of a neuron owns partial slot
-- nslot_off[n] + j - 1 ([3][K] fp32: dWu, dWg, dWd), chunk 0 writes the outputs.
--
-- Kernels (all grid-stride; "warp item" kernels take any grid; block sizes fixed as noted):
--   twell_train_recount        WPB warps, smem WPB·(4K + 2T): one warp per row-tile r with
--                              count > slots (every row-tile when `all`: the gate-pack itself,
--                              for inputs the plan's gate-pack cannot take): recompute its T gate
--                              values (lane per column), write count + slots (pack) and mask[r].
--   twell_train_scan_<md>      256 threads, (tw_sa a, u32 *sb, u32 epoch): exclusive scan of two
--                              u64 channels per item, 2048 items per block, one pass (decoupled
--                              look-back over sb: ticket, flags, per-block sums; sb zeroed when
--                              allocated, epoch new for every scan, > 0); totals to tot[].
--   twell_train_owners         256 threads; owner[c] = i for c in [off[i], off[i+1]).
--   twell_train_spill          WPB warps, smem 4K·WPB: spill words of overflowing row-tiles.
--   twell_train_fwd_ent        WPB warps, smem 4K·WPB: warp per row chunk, lane per entry:
--                              U, u_ell/u_spill, e_col, e_tm = U·P, chunk_l1 (Σ|Tm|, double).
--   twell_train_fwd_y          256 threads: warp per (row chunk, K slice of 32·VEC), items
--                              slice-major (L2 locality): y (or the chunk's partial) = Σ Tm·Wd_n.
--   twell_train_row_reduce     256 threads: rows with several chunks: out = Σ partials.
--   twell_train_stats          1 block of 256: L0 = nnz/M, L1 = Σ chunk_l1 / M (fixed tree).
--   twell_train_bwd_ent        WPB warps, smem 4K·WPB: dT = dy·Wd_n + l1c·sign(U); e_du, e_dp.
--   twell_train_bwd_dx         256 threads: dx (or partial) = Σ dU·Wu_n + dP·Wg_n.
--   twell_train_hist           256 threads, grid = B row blocks: hist[n·B + b] (integer atomics).
--   twell_train_scatter        256 threads, grid = B: stable placement, rows in order; ranked
--                              (dynamic smem 4·N + 8·SC_P bytes): per-neuron counters in shared
--                              memory over read-only cursors, else the cursors advanced in place.
--   twell_train_dw             256 threads: warp per (neuron chunk, K slice): dWu, dWg, dWd;
--                              items from a queue (a u64 counter, zero at launch).
--   twell_train_dw_reduce      256 threads: neurons with several chunks add their partials.
--   twell_train_ovf_list       (MMA builds only) 256 threads, warp per row: list[t·M + i] = the
--                              rows m whose row-tile (m, t) overflows in the gate-pack's count,
--                              cnt[t] of them (integer atomics; the order is irrelevant: rows are
--                              independent). With flag (the heavy-row route, else NULL) it first
--                              classifies the row as train_heavy.cu.lua's heavy_flag does
--                              (count > thr: flag[m] = count, htot[0] += 1, htot[1] += count,
--                              packed row zeroed, nothing listed; else flag[m] = 0). cnt and htot
--                              zero at launch.
--   twell_train_ovf_tiles      (MMA builds only) grid (x, NT), 32·T/64 threads, smem 16·T·2:
--                              16 listed rows of tile t per step, gate values on tensor cores
--                              (mma.sync m16n8k16, fp32 accumulate), relu + dtype rounding; mode 0
--                              rewrites count + slots (the recount), mode 1 writes the spill words.
--                              Both modes run the same instructions: identical values.
--   twell_train_ovf_udt        (MMA builds, T <= 512) as ovf_tiles: a·w_n (x·Wu or dy·Wd) of
--                              every column of listed rows on tensor cores, stored for the
--                              row-tiles' active entries (u_ell / u_spill or dt_ell / dt_spill).
--   twell_train_udt            (VEC 8 builds) 256 threads, warp per list: the fused inference
--                              pipeline's phase-A slices (ffn_fused.cu.lua) summed per pair in
--                              fixed order, stored at the entry's word (tiled U / dT).
--   twell_train_fwd_ent_p, twell_train_bwd_ent_p (VEC 8 builds): 256 threads, warp per row
--                              chunk, no staging buffers (full occupancy): the entry passes of
--                              tiled U / dT where every value is precomputed (pre, pre_all): read
--                              U (dT), store what fwd_ent_s (bwd_ent_s) would, the same bits; the
--                              row's tile offsets searched in a shared copy. They return at once
--                              when the lists were not built, and the staged kernels return at
--                              once when they ran (tw_pre_all_done).
--   twell_train_fwd_ent_s, twell_train_bwd_ent_s (VEC 8 builds): as fwd_ent / bwd_ent, the
--                              weight rows staged (KC-element chunks, cp.async, STAGES deep) so
--                              the warp's loads are coalesced and many are in flight; SWP warps
--                              per block, smem STW bytes per warp (the token row as dtype + the
--                              stages). Same per-lane sequence of roundings:
--                              bitwise the same results. With `pre` (tiled U / dT, see
--                              runtime/ops/train/sparse/cuda_train_tiled.h) they read the precomputed values and
--                              compute only what twell_train_udt / ovf_udt did not cover; those
--                              values are summed in tensor-core order (not the reference's).
-- Scan modes: tiles (row-tile counts → tile_off, spill_off, row_off), rows (chunks → chunk_off,
-- pslot_off; E), hist (hist → cursor, col_off), neurons (chunks with E2 → nchunk_off, nslot_off,
-- and the owner table nchunk_nrn, as twell_train_owners would write it).

local common = import "twell_common"
local S = common.shape()
local VEC = param("VEC", 8)
check(VEC == 8 or VEC == 1, "VEC=%s must be 8 or 1", tostring(VEC))
local WPB = param("WPB", 4)
check(math.type(WPB) == "integer" and WPB >= 1 and WPB <= 8, "WPB=%s must be in 1..8",
    tostring(WPB))
local NT = S.N // S.T
local TM = S.T // 32 -- mask words per row-tile
local G = S.K // VEC -- VEC-groups per row
local SW = 32 * VEC -- K slice of one warp item
local NS = (S.K + SW - 1) // SW
-- Overflowing row-tiles on tensor cores: 16-byte fragment loads (VEC 8), k blocks of 32, warp
-- tiles of 64 columns. runtime/ops/train/sparse/cuda_train.c tests the same condition (tw_ct_mma).
local MMA = VEC == 8 and S.K % 32 == 0 and S.T % 64 == 0
local OVF_BM = 16           -- listed rows per CTA step
local OVF_WM = OVF_BM // 16 -- warps along the rows
local OVF_WN = S.T // 64    -- warps along the tile's columns
-- Tiled U / dT of overflowing row-tiles (twell_train_ovf_udt): fp32 values of 16 rows x T
-- columns in static shared memory (T <= 512). runtime/ops/train/sparse/cuda_train.c tests the same (tw_ct_load: m.ovf_udt).
local OVF_UDT = MMA and S.T <= 512
-- Staged per-entry dot products (VEC 8): k chunks of KC elements of a warp's 32 weight rows go
-- through shared memory by cp.async (coalesced, STAGES deep), row stride KC + 8 elements
-- (conflict-free 16-byte reads). runtime/ops/train/sparse/cuda_train.c computes the same STW (tw_ct_stw).
-- KC 64 (K permitting, else 32 or 16), 2 stages, SWP 4 warps per block, the token row kept as
-- dtype: the fastest of eleven (KC, STAGES, SWP, token row as fp32 or dtype) variants at K 2048,
-- N 5632, 29 nnz/row (2 stages, 4 warps keep 16 warps per SM instead of 8 with 4 stages, 2 warps:
-- the per-entry gathers need warps in flight more than a deep ring). runtime/ops/train/sparse/cuda_train.c uses the same constants.
local KC = S.K % 64 == 0 and 64 or (S.K % 32 == 0 and 32 or 16)
local KCP = KC + 8          -- staged row stride, elements
local PPR = KC // 8         -- 16-byte pieces per staged row
local RPI = 32 // PPR       -- rows one warp-wide copy covers
local STAGES = 2
local SWP = 4
-- Entries whose rows a lane loads before summing them, in the K-slice kernels: LB for fwd_y (one
-- Wd row per entry), LB2 for bwd_dx (Wu and Wg rows), LBW for dw (x and dy rows): the fastest of
-- a sweep of each (docs/lab/NOTES-train-dw.md).
local LB = 3
local LB2 = 4
local LBW = 5
-- Entries of a row block whose columns and cursors twell_train_scatter loads at once (ranked).
-- runtime/ops/train/sparse/cuda_train.c uses the same constant (TW_CT_SC_P).
local SC_P = 1024
local NKC = S.K // KC
local STW = 2 * S.K + STAGES * 32 * KCP * 2 -- shared bytes per warp

common.conversions(S.dtype)
common.pack_row_tile_warp(S)
common.row_active(S)
common.warp_scan()

-- The kernels, by concern, in modules (templates/train/train_ffn_*.lua). Each returns a function of D
-- (the constants above) that emits its CUDA; the calls below fix the order of the source.
local D = {
    S = S, VEC = VEC, WPB = WPB, NT = NT, TM = TM, G = G, NS = NS, LB = LB, LB2 = LB2,
    LBW = LBW,
    OVF_BM = OVF_BM, OVF_WM = OVF_WM, OVF_WN = OVF_WN, OVF_UDT = OVF_UDT, KC = KC, KCP = KCP,
    PPR = PPR, RPI = RPI, STAGES = STAGES, SWP = SWP, NKC = NKC, STW = STW, SC_P = SC_P,
}
import("train_ffn_base")(D)  -- types, loads and stores, token row, reference dot
import("train_ffn_state")(D) -- recount, scans, owners, spill
import("train_ffn_fwd")(D)   -- entry location, forward
import("train_ffn_bwd")(D)   -- backward, transpose, dW
if MMA then
    import("train_ffn_ovf")(D) -- overflowing row-tiles on tensor cores
end
if VEC == 8 then
    import("train_ffn_staged")(D) -- staged per-entry dot products
    import("train_ffn_udt")(D)    -- tiled U / dT glue
end
