-- train_ffn.cu.lua — the CUDA training forward and backward of a gated TwELL FFN (DESIGN.md §4,
-- twellrt.h "Training"), every step exact and deterministic (fixed orders, integer scans, no
-- floating-point atomics). runtime/cuda_train.c owns the buffers and launches these kernels.
--
-- Parameters: K, N, T, C, dtype (see twellrt.h); VEC (8: 16-byte vector loads and stores, every
-- tensor 16-byte aligned; 1: element loads, any 2-byte alignment; default 8); WPB (warps per
-- block of the kernels that keep a token row in shared memory, default 4).
--
-- Arithmetic. Every dot product is the reference sequence of runtime/cpu_ref.h (tw_dot_ref):
-- one lane walks k ascending, products rounded to fp32 (__fmul_rn), one accumulator from +0
-- (__fadd_rn), so U and dy·Wd are bit-identical to the CPU reference (and so is a gate value
-- recomputed by the SIMT recount of VEC 1 builds). Gate values come from tensor cores otherwise,
-- as in the plan's gate-pack: the MMA recount of overflowing row-tiles sums in another order
-- (exact whenever the pre-activation is; else it may differ near 0 or a 16-bit rounding edge).
-- Sums over entries (y, dx) and tokens (dW) add separately rounded products in the CPU's order
-- (ascending column, ascending token); a row or neuron split into chunks adds its chunk partials
-- in chunk order afterwards (deterministic, not bit-identical to the CPU's single chain).
--
-- Saved state (mirrors runtime/cpu_train.h; r = m·NT + t is a row-tile, entries e are numbered
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
--   twell_train_scan_up_<md>, twell_train_scan_top, twell_train_scan_down_<md>: 256/1024/256
--                              threads; exclusive scan of two u64 channels per item, 2048 items
--                              per block (modes below); totals to tot[].
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
--   twell_train_scatter        256 threads, grid = B: stable placement, rows in order.
--   twell_train_dw             256 threads: warp per (neuron chunk, K slice): dWu, dWg, dWd.
--   twell_train_dw_reduce      256 threads: neurons with several chunks add their partials.
--   twell_train_ovf_list       (MMA builds only) 256 threads: list[t·M + i] = the rows m whose
--                              row-tile (m, t) overflows in the gate-pack's count, cnt[t] of them
--                              (integer atomics; the order is irrelevant: rows are independent).
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
--   twell_train_fwd_ent_s, twell_train_bwd_ent_s (VEC 8 builds): as fwd_ent / bwd_ent, the
--                              weight rows staged (KC-element chunks, cp.async, STAGES deep) so
--                              the warp's loads are coalesced and many are in flight; SWP warps
--                              per block, smem STW bytes per warp (the token row as dtype, or
--                              fp32 with SXF, + the stages). Same per-lane sequence of roundings:
--                              bitwise the same results. With `pre` (tiled U / dT, see
--                              runtime/cuda_train_tiled.h) they read the precomputed values and
--                              compute only what twell_train_udt / ovf_udt did not cover; those
--                              values are summed in tensor-core order (not the reference's).
-- Scan modes: tiles (row-tile counts → tile_off, spill_off, row_off), rows (chunks → chunk_off,
-- pslot_off; E), hist (hist → cursor, col_off), neurons (chunks with E2 → nchunk_off, nslot_off).

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
-- tiles of 64 columns. runtime/cuda_train.c tests the same condition (tw_ct_mma).
local MMA = VEC == 8 and S.K % 32 == 0 and S.T % 64 == 0
local OVF_BM = 16           -- listed rows per CTA step
local OVF_WM = OVF_BM // 16 -- warps along the rows
local OVF_WN = S.T // 64    -- warps along the tile's columns
-- Tiled U / dT of overflowing row-tiles (twell_train_ovf_udt): fp32 values of 16 rows x T
-- columns in static shared memory (T <= 512). runtime/cuda_train.c tests the same (tw_ct_load: m.ovf_udt).
local OVF_UDT = MMA and S.T <= 512
-- Staged per-entry dot products (VEC 8): k chunks of KC elements of a warp's 32 weight rows go
-- through shared memory by cp.async (coalesced, STAGES deep), row stride KC + 8 elements
-- (conflict-free 16-byte reads). runtime/cuda_train.c computes the same STW (tw_ct_stw).
-- SKC, SST, SWP (optional: 0 = default): KC, STAGES and warps per block of the staged kernels,
-- for comparisons (runtime/cuda_train.c passes them from TWELL_TRAIN_STAGE). Defaults 64, 2, 4:
-- the fastest of eleven (KC, STAGES, SWP, SXF) variants on the H200 at K = 2048, N = 5632, 29
-- nnz/row (BENCHMARKS.md; 2 stages, 4 warps: 16 warps per SM instead of 8 with 4 stages, 2 warps).
local SKC = param("SKC", 0)
local KC = SKC ~= 0 and SKC or (S.K % 64 == 0 and 64 or (S.K % 32 == 0 and 32 or 16))
check(KC % 16 == 0 and KC <= 256 and S.K % KC == 0, "SKC=%s must divide K, be a multiple of 16 " ..
    "and at most 256", tostring(KC))
local KCP = KC + 8          -- staged row stride, elements
local PPR = KC // 8         -- 16-byte pieces per staged row
local RPI = 32 // PPR       -- rows one warp-wide copy covers
local STAGES = param("SST", 0)
if STAGES == 0 then STAGES = 2 end
check(STAGES >= 2 and STAGES <= 8, "SST=%s must be in 2..8", tostring(STAGES))
local SWP = param("SWP", 0)
if SWP == 0 then SWP = 4 end
check(SWP >= 1 and SWP <= 8, "SWP=%s must be in 1..8", tostring(SWP))
-- Loads in flight per lane in the K-slice kernels (fwd_y: one row per entry; bwd_dx, dw: two).
local LB = 8
local LB2 = 4
local NKC = S.K // KC
-- SXF 1: the token row kept as fp32 in shared memory (no conversion in the inner loop; the
-- same values, so the same results), else as dtype.
local SXF = param("SXF", 0)
check(SXF == 0 or SXF == 1, "SXF=%s must be 0 or 1", tostring(SXF))
local STW = (SXF == 1 and 4 or 2) * S.K + STAGES * 32 * KCP * 2 -- shared bytes per warp

common.conversions(S.dtype)
common.pack_row_tile_warp(S)

cuda [==[
typedef unsigned long long tw_u64;
typedef unsigned int tw_u32;
typedef unsigned short tw_u16;
#define TW_FULL 0xffffffffu
#define TW_NT ${NT}
#define TW_NW ${S.NW}
#define TW_W ${S.W}
#define TW_SLOTS ${S.SLOTS}u

/* The 16-bit activation of a pre-activation: round_to_dtype(relu(pre)), +0 when not positive. */
__device__ __forceinline__ tw_u16 tw_act(float pre) {
    return pre > 0.0f ? tw_from_f32(pre) : (tw_u16)0;
}
__device__ __forceinline__ bool tw_active(tw_u16 v) { return v != 0 && (v & 0x8000u) == 0; }

/* Global warp index and warp count of a grid-stride kernel. */
__device__ __forceinline__ long long tw_gwarp(void) {
    return ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
}
__device__ __forceinline__ long long tw_nwarps(void) {
    return ((long long)gridDim.x * blockDim.x) >> 5;
}
]==]

-- VEC-specific loads and stores of one group (VEC consecutive elements) of a row.
if VEC == 8 then
    cuda [==[
__device__ __forceinline__ void tw_ldg(const tw_u16 *__restrict__ row, long long g, float (&f)[8]) {
    const uint4 v = *((const uint4 *)row + g);
    const tw_u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = tw_to_f32((tw_u16)(w[i] & 0xffffu));
        f[2 * i + 1] = tw_to_f32((tw_u16)(w[i] >> 16));
    }
}
/* Raw group loads (kept packed in registers while more loads are in flight), converted later. */
typedef uint4 tw_raw;
__device__ __forceinline__ tw_raw tw_ldraw(const tw_u16 *__restrict__ row, long long g) {
    return *((const uint4 *)row + g);
}
__device__ __forceinline__ void tw_cvt(const tw_raw &v, float (&f)[8]) {
    const tw_u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = tw_to_f32((tw_u16)(w[i] & 0xffffu));
        f[2 * i + 1] = tw_to_f32((tw_u16)(w[i] >> 16));
    }
}
__device__ __forceinline__ void tw_ldf(const float *row, long long g, float (&f)[8]) {
    const float4 a = *((const float4 *)row + 2 * g), b = *((const float4 *)row + 2 * g + 1);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void tw_stf(float *row, long long g, const float (&f)[8]) {
    *((float4 *)row + 2 * g) = make_float4(f[0], f[1], f[2], f[3]);
    *((float4 *)row + 2 * g + 1) = make_float4(f[4], f[5], f[6], f[7]);
}
__device__ __forceinline__ void tw_sth(tw_u16 *row, long long g, const float (&f)[8]) {
    tw_u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (tw_u32)tw_from_f32(f[2 * i]) | ((tw_u32)tw_from_f32(f[2 * i + 1]) << 16);
    *((uint4 *)row + g) = make_uint4(w[0], w[1], w[2], w[3]);
}
]==]
else
    cuda [==[
__device__ __forceinline__ void tw_ldg(const tw_u16 *__restrict__ row, long long g, float (&f)[1]) {
    f[0] = tw_to_f32(row[g]);
}
typedef tw_u16 tw_raw;
__device__ __forceinline__ tw_raw tw_ldraw(const tw_u16 *__restrict__ row, long long g) {
    return row[g];
}
__device__ __forceinline__ void tw_cvt(const tw_raw &v, float (&f)[1]) { f[0] = tw_to_f32(v); }
__device__ __forceinline__ void tw_ldf(const float *row, long long g, float (&f)[1]) { f[0] = row[g]; }
__device__ __forceinline__ void tw_stf(float *row, long long g, const float (&f)[1]) { row[g] = f[0]; }
__device__ __forceinline__ void tw_sth(tw_u16 *row, long long g, const float (&f)[1]) {
    row[g] = tw_from_f32(f[0]);
}
]==]
end

cuda [==[
/* A token row of dtype into this warp's shared fp32 copy (then __syncwarp). */
__device__ __forceinline__ void tw_row_to_smem(float *xs, const tw_u16 *__restrict__ row, int lane) {
    for (int g = lane; g < ${G}; g += 32) {
        float f[${VEC}];
        tw_ldg(row, g, f);
#pragma unroll
        for (int q = 0; q < ${VEC}; q++)
            xs[g * ${VEC} + q] = f[q];
    }
    __syncwarp();
}

/* The reference dot product of cpu_ref.h, by one lane: xs (shared, fp32) · w (a weight row). */
__device__ __forceinline__ float tw_dot_ref(const float *xs, const tw_u16 *__restrict__ w) {
    float s = 0.0f;
#pragma unroll 4
    for (int g = 0; g < ${G}; g++) {
        float f[${VEC}];
        tw_ldg(w, g, f);
#pragma unroll
        for (int q = 0; q < ${VEC}; q++)
            s = __fadd_rn(s, __fmul_rn(xs[g * ${VEC} + q], f[q]));
    }
    return s;
}

/* ---- recount: overflowing row-tiles recomputed, rewritten and masked ---- */

extern "C" __global__ void __launch_bounds__(${32 * WPB})
twell_train_recount(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wg,
                    tw_u32 *__restrict__ packed, tw_u32 *__restrict__ mask, long long M, int all) {
    extern __shared__ float tw_sm[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    float *xs = tw_sm + warp * ${S.K};
    tw_u16 *vals = (tw_u16 *)(tw_sm + ${WPB * S.K}) + warp * ${S.T};
    const long long tiles = M * ${NT};
    for (long long r = tw_gwarp(); r < tiles; r += tw_nwarps()) {
        const long long m = r / ${NT};
        const int t = (int)(r % ${NT});
        tw_u32 *cell = packed + m * ${S.NW} + t * ${S.W};
        if (!all && cell[0] <= ${S.SLOTS}u)
            continue;
        tw_row_to_smem(xs, x + m * ${S.K}, lane);
        for (int c0 = 0; c0 < ${S.T}; c0 += 32) {
            const long long n = (long long)t * ${S.T} + c0 + lane;
            const tw_u16 v = tw_act(tw_dot_ref(xs, wg + n * ${S.K}));
            vals[c0 + lane] = v;
            const tw_u32 b = __ballot_sync(TW_FULL, tw_active(v));
            if (lane == 0)
                mask[r * ${TM} + c0 / 32] = b;
        }
        __syncwarp();
        tw_pack_row_tile_warp(vals, cell, (unsigned int)(t * ${S.T}));
        __syncwarp();
    }
}

/* ---- scans: exclusive, two u64 channels, 2048 items per block of 256 threads ---- */

struct tw_sa { /* every field 8 bytes: the host mirrors this layout (cuda_train.c) */
    const tw_u32 *packed;
    const tw_u64 *in64;
    const tw_u32 *in32;
    tw_u64 *o0, *o1, *o2;
    tw_u32 *o32;
    tw_u64 *tot; /* [0], [1]: the channel totals; [2]: a mode's extra value */
    tw_u64 n;    /* items */
    tw_u64 p0, p1;
};

/* Exclusive block scan of (a, b) over blockDim.x threads (a multiple of 32, at most 1024);
 * *ta, *tb receive the block totals. sh: 64 u64 of shared memory. */
__device__ __forceinline__ void tw_block_scan2(tw_u64 &a, tw_u64 &b, tw_u64 *sh, tw_u64 &ta,
                                               tw_u64 &tb) {
    const int lane = (int)(threadIdx.x & 31u), warp = (int)(threadIdx.x >> 5);
    const int nw = (int)(blockDim.x >> 5);
    tw_u64 ia = a, ib = b;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const tw_u64 va = __shfl_up_sync(TW_FULL, ia, o), vb = __shfl_up_sync(TW_FULL, ib, o);
        if (lane >= o)
            ia += va, ib += vb;
    }
    if (lane == 31)
        sh[warp] = ia, sh[32 + warp] = ib;
    __syncthreads();
    if (warp == 0) {
        tw_u64 wa = lane < nw ? sh[lane] : 0ull, wb = lane < nw ? sh[32 + lane] : 0ull;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const tw_u64 va = __shfl_up_sync(TW_FULL, wa, o), vb = __shfl_up_sync(TW_FULL, wb, o);
            if (lane >= o)
                wa += va, wb += vb;
        }
        sh[lane] = wa, sh[32 + lane] = wb;
    }
    __syncthreads();
    const tw_u64 pa = warp > 0 ? sh[warp - 1] : 0ull, pb = warp > 0 ? sh[32 + warp - 1] : 0ull;
    ta = sh[nw - 1], tb = sh[32 + nw - 1];
    a = pa + ia - a, b = pb + ib - b;
    __syncthreads();
}

/* Row chunk length of the rows mode: the device's choice, reported to the host in tot[2]. */
/* Row chunk length: max(lo, 4·ceil(nnz/M)), lo from the host (64 normally): rows more than four
 * times the mean (and longer than lo) are split. runtime/train_layout.c has the same formula. */
__device__ __forceinline__ tw_u64 tw_row_chunk_len(tw_u64 nnz, tw_u64 M, tw_u64 lo) {
    const tw_u64 e = 4ull * ((nnz + M - 1) / M);
    return e > lo ? e : lo;
}
__device__ __forceinline__ tw_u64 tw_chunks_of(tw_u64 cnt, tw_u64 len) {
    return cnt <= len ? 1ull : (cnt + len - 1) / len;
}
]==]

-- Per mode: the item values (v0, v1) and what an item's exclusive offsets (e0, e1) store; the
-- last item also stores the totals (its offsets plus its values) at index n.
local MODES = {
    { name = "tiles", value = [==[
    const tw_u32 c = a.packed[(i / TW_NT) * TW_NW + (i % TW_NT) * TW_W];
    v0 = c;
    v1 = c > TW_SLOTS ? c - TW_SLOTS : 0u;
]==], store = [==[
    a.o0[i] = e0;
    a.o1[i] = e1;
    if (i % TW_NT == 0)
        a.o2[i / TW_NT] = e0;
    if (i + 1 == a.n) {
        a.o0[a.n] = e0 + v0;
        a.o1[a.n] = e1 + v1;
        a.o2[a.n / TW_NT] = e0 + v0;
    }
]==] },
    { name = "rows", value = [==[
    const tw_u64 len = a.p1 ? a.p1 : tw_row_chunk_len(a.in64[a.n], a.n, a.p0);
    const tw_u64 ch = tw_chunks_of(a.in64[i + 1] - a.in64[i], len);
    v0 = ch;
    v1 = ch > 1ull ? ch : 0ull;
]==], store = [==[
    a.o0[i] = e0;
    a.o1[i] = e1;
    if (i + 1 == a.n) {
        a.o0[a.n] = e0 + v0;
        a.o1[a.n] = e1 + v1;
        a.tot[2] = a.p1 ? a.p1 : tw_row_chunk_len(a.in64[a.n], a.n, a.p0);
    }
]==] },
    { name = "hist", value = [==[
    v0 = a.in32[i];
    v1 = 0ull;
]==], store = [==[
    a.o32[i] = (tw_u32)e0;
    if (i % a.p0 == 0)
        a.o0[i / a.p0] = e0;
    if (i + 1 == a.n)
        a.o0[a.n / a.p0] = e0 + v0;
]==] },
    { name = "neurons", value = [==[
    const tw_u64 ch = tw_chunks_of(a.in64[i + 1] - a.in64[i], a.p1);
    v0 = ch;
    v1 = ch - 1ull;
]==], store = [==[
    a.o0[i] = e0;
    a.o1[i] = e1;
    if (i + 1 == a.n) {
        a.o0[a.n] = e0 + v0;
        a.o1[a.n] = e1 + v1;
    }
]==] },
}

for _, md in ipairs(MODES) do
    local value, store = md.value, md.store
    cuda [==[
__device__ __forceinline__ void tw_scan_value_${md.name}(const tw_sa &a, tw_u64 i, tw_u64 &v0,
                                                        tw_u64 &v1) {
${value}}
__device__ __forceinline__ void tw_scan_store_${md.name}(const tw_sa &a, tw_u64 i, tw_u64 e0,
                                                        tw_u64 e1, tw_u64 v0, tw_u64 v1) {
${store}}

extern "C" __global__ void __launch_bounds__(256) twell_train_scan_up_${md.name}(tw_sa a,
                                                                                tw_u64 *bsum) {
    __shared__ tw_u64 sh[64];
    const tw_u64 base = (tw_u64)blockIdx.x * 2048ull + threadIdx.x * 8ull;
    tw_u64 s0 = 0, s1 = 0;
    for (int q = 0; q < 8; q++) {
        const tw_u64 i = base + (tw_u64)q;
        if (i < a.n) {
            tw_u64 v0, v1;
            tw_scan_value_${md.name}(a, i, v0, v1);
            s0 += v0, s1 += v1;
        }
    }
    tw_u64 t0, t1;
    tw_block_scan2(s0, s1, sh, t0, t1);
    if (threadIdx.x == 0)
        bsum[2 * blockIdx.x] = t0, bsum[2 * blockIdx.x + 1] = t1;
}

extern "C" __global__ void __launch_bounds__(256) twell_train_scan_down_${md.name}(
    tw_sa a, const tw_u64 *__restrict__ boff) {
    __shared__ tw_u64 sh[64];
    const tw_u64 base = (tw_u64)blockIdx.x * 2048ull + threadIdx.x * 8ull;
    tw_u64 v0[8], v1[8], s0 = 0, s1 = 0;
    for (int q = 0; q < 8; q++) {
        const tw_u64 i = base + (tw_u64)q;
        v0[q] = v1[q] = 0;
        if (i < a.n)
            tw_scan_value_${md.name}(a, i, v0[q], v1[q]);
        s0 += v0[q], s1 += v1[q];
    }
    tw_u64 t0, t1;
    tw_block_scan2(s0, s1, sh, t0, t1);
    s0 += boff[2 * blockIdx.x], s1 += boff[2 * blockIdx.x + 1];
    for (int q = 0; q < 8; q++) {
        const tw_u64 i = base + (tw_u64)q;
        if (i < a.n)
            tw_scan_store_${md.name}(a, i, s0, s1, v0[q], v1[q]);
        s0 += v0[q], s1 += v1[q];
    }
}
]==]
end

cuda [==[
/* The block sums of a scan into exclusive block offsets (in place), totals to tot[0], tot[1]. */
extern "C" __global__ void __launch_bounds__(1024) twell_train_scan_top(tw_u64 *bsum, tw_u64 nb,
                                                                      tw_u64 *tot) {
    __shared__ tw_u64 sh[64];
    tw_u64 c0 = 0, c1 = 0;
    for (tw_u64 base = 0; base < nb; base += 1024ull) {
        const tw_u64 i = base + threadIdx.x;
        tw_u64 a = i < nb ? bsum[2 * i] : 0ull, b = i < nb ? bsum[2 * i + 1] : 0ull;
        tw_u64 ta, tb;
        tw_block_scan2(a, b, sh, ta, tb);
        if (i < nb)
            bsum[2 * i] = c0 + a, bsum[2 * i + 1] = c1 + b;
        c0 += ta, c1 += tb;
    }
    if (threadIdx.x == 0)
        tot[0] = c0, tot[1] = c1;
}

/* owner[c] = i for every c in [off[i], off[i+1]), i < n. */
extern "C" __global__ void __launch_bounds__(256) twell_train_owners(const tw_u64 *__restrict__ off,
                                                                   long long n,
                                                                   tw_u32 *__restrict__ owner) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        for (tw_u64 c = off[i]; c < off[i + 1]; c++)
            owner[c] = (tw_u32)i;
}

/* ---- spill: the entries of overflowing row-tiles beyond the slots ---- */

extern "C" __global__ void __launch_bounds__(${32 * WPB})
twell_train_spill(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wg,
                  const tw_u32 *__restrict__ packed, const tw_u32 *__restrict__ mask,
                  const tw_u64 *__restrict__ spill_off, tw_u32 *__restrict__ spill, long long M) {
    extern __shared__ float tw_sm[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    float *xs = tw_sm + warp * ${S.K};
    const long long tiles = M * ${NT};
    for (long long r = tw_gwarp(); r < tiles; r += tw_nwarps()) {
        const long long m = r / ${NT};
        const int t = (int)(r % ${NT});
        const tw_u32 cnt = packed[m * ${S.NW} + t * ${S.W}];
        if (cnt <= ${S.SLOTS}u)
            continue;
        tw_row_to_smem(xs, x + m * ${S.K}, lane);
        const tw_u32 *mk = mask + r * ${TM};
        const tw_u64 base = spill_off[r], have = spill_off[r + 1] - base;
        for (tw_u32 j0 = 0; j0 < cnt - ${S.SLOTS}u; j0 += 32u) {
            const tw_u32 j = j0 + (tw_u32)lane; /* this lane's spill entry */
            if (j < cnt - ${S.SLOTS}u && j < have) {
                tw_u32 k = ${S.SLOTS}u + j, col = 0; /* the k-th active column (0-based) */
                for (int w = 0; w < ${TM}; w++) {
                    const tw_u32 bits = mk[w], pc = (tw_u32)__popc(bits);
                    if (k < pc) {
                        tw_u32 b = bits;
                        for (tw_u32 s = 0; s < k; s++)
                            b &= b - 1u;
                        col = (tw_u32)w * 32u + (tw_u32)(__ffs((int)b) - 1);
                        break;
                    }
                    k -= pc;
                }
                const tw_u32 n = (tw_u32)t * ${S.T}u + col;
                const tw_u16 v = tw_act(tw_dot_ref(xs, wg + (long long)n * ${S.K}));
                spill[base + j] = ((tw_u32)v << 16) | n;
            }
        }
        __syncwarp();
    }
}

/* Where entry e (global, of row m) lives: its TwELL word and the address of its U. */
__device__ __forceinline__ void tw_locate(long long m, tw_u64 e, const tw_u32 *__restrict__ packed,
                                          const tw_u64 *__restrict__ tile_off,
                                          const tw_u64 *__restrict__ spill_off,
                                          const tw_u32 *__restrict__ spill, float *u_ell,
                                          float *u_spill, tw_u32 &word, float *&up) {
    const tw_u64 *to = tile_off + m * ${NT};
    int lo = 0, hi = ${NT - 1};
    while (lo < hi) { /* the last row-tile starting at or before e (non-empty by construction) */
        const int mid = (lo + hi + 1) >> 1;
        if (to[mid] <= e)
            lo = mid;
        else
            hi = mid - 1;
    }
    const tw_u64 i = e - to[lo];
    if (i < ${S.SLOTS}ull) {
        const long long w = m * ${S.NW} + lo * ${S.W} + 1 + (long long)i;
        word = packed[w];
        up = u_ell + w;
    } else {
        const tw_u64 j = spill_off[m * ${NT} + lo] + (i - ${S.SLOTS}ull);
        word = spill[j];
        up = u_spill + j;
    }
}

/* tw_locate, whether the entry is in the spill (sp), and whether its value was precomputed by
 * the tiled U / dT route (ok): the lists were built (pre != NULL, pre[0] == 0: the pipeline's
 * capacity flag) and either its row-tile does not overflow (count <= slots: twell_train_udt
 * covers exactly those) or pre_all (twell_train_ovf_udt covered the overflowing ones). */
__device__ __forceinline__ void tw_locate_pre(long long m, tw_u64 e,
                                              const tw_u32 *__restrict__ packed,
                                              const tw_u64 *__restrict__ tile_off,
                                              const tw_u64 *__restrict__ spill_off,
                                              const tw_u32 *__restrict__ spill, float *u_ell,
                                              float *u_spill, const tw_u32 *__restrict__ pre,
                                              int pre_all, tw_u32 &word, float *&up, bool &ok,
                                              bool &sp) {
    const tw_u64 *to = tile_off + m * ${NT};
    int lo = 0, hi = ${NT - 1};
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (to[mid] <= e)
            lo = mid;
        else
            hi = mid - 1;
    }
    const tw_u64 i = e - to[lo];
    const bool valid = pre != NULL && pre[0] == 0u;
    sp = i >= ${S.SLOTS}ull;
    if (!sp) {
        const long long w = m * ${S.NW} + lo * ${S.W} + 1 + (long long)i;
        word = packed[w];
        up = u_ell + w;
        ok = valid && (pre_all || packed[m * ${S.NW} + lo * ${S.W}] <= ${S.SLOTS}u);
    } else {
        const tw_u64 j = spill_off[m * ${NT} + lo] + (i - ${S.SLOTS}ull);
        word = spill[j];
        up = u_spill + j;
        ok = valid && pre_all;
    }
}

/* Entries [e0, e1) of row chunk c of a row-chunk table. */
__device__ __forceinline__ long long tw_row_chunk(long long c, const tw_u32 *__restrict__ chunk_row,
                                                  const tw_u64 *__restrict__ chunk_off,
                                                  const tw_u64 *__restrict__ row_off, tw_u64 E,
                                                  tw_u64 &j, tw_u64 &e0, tw_u64 &e1) {
    const long long m = chunk_row[c];
    j = (tw_u64)c - chunk_off[m];
    e0 = row_off[m] + j * E;
    const tw_u64 end = row_off[m + 1];
    e1 = e0 + E < end ? e0 + E : end;
    return m;
}

/* ---- forward: U on the support, Tm = U·P, Σ|Tm| per chunk ---- */

extern "C" __global__ void __launch_bounds__(${32 * WPB})
twell_train_fwd_ent(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wu,
                    const tw_u32 *__restrict__ packed, float *u_ell,
                    const tw_u64 *__restrict__ tile_off, const tw_u64 *__restrict__ spill_off,
                    const tw_u32 *__restrict__ spill, float *u_spill,
                    const tw_u64 *__restrict__ row_off, const tw_u64 *__restrict__ chunk_off,
                    const tw_u32 *__restrict__ chunk_row, tw_u64 E, tw_u32 *__restrict__ e_col,
                    float *__restrict__ e_tm, double *__restrict__ chunk_l1, long long M) {
    extern __shared__ float tw_sm[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    float *xs = tw_sm + warp * ${S.K};
    const long long nch = (long long)chunk_off[M];
    for (long long c = tw_gwarp(); c < nch; c += tw_nwarps()) {
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        double l1 = 0.0;
        if (e0 < e1)
            tw_row_to_smem(xs, x + m * ${S.K}, lane);
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            float tm = 0.0f;
            if (e < e1) {
                tw_u32 word;
                float *up;
                tw_locate(m, e, packed, tile_off, spill_off, spill, u_ell, u_spill, word, up);
                const tw_u32 n = word & 0xffffu;
                const float u = tw_dot_ref(xs, wu + (long long)n * ${S.K});
                tm = __fmul_rn(u, tw_to_f32((tw_u16)(word >> 16)));
                *up = u;
                e_col[e] = n;
                e_tm[e] = tm;
            }
            const int nb = (int)(e1 - b < 32ull ? e1 - b : 32ull);
            for (int q = 0; q < nb; q++) /* Σ|Tm| in entry order, as the CPU */
                l1 += fabs((double)__shfl_sync(TW_FULL, tm, q));
        }
        if (lane == 0)
            chunk_l1[c] = l1;
        __syncwarp();
    }
}

/* y (or a partial row) of one (row chunk, K slice): Σ Tm·Wd_n over the chunk's entries. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_fwd_y(const tw_u16 *__restrict__ wd, const tw_u32 *__restrict__ e_col,
                  const float *__restrict__ e_tm, const tw_u64 *__restrict__ row_off,
                  const tw_u64 *__restrict__ chunk_off, const tw_u64 *__restrict__ pslot_off,
                  const tw_u32 *__restrict__ chunk_row, tw_u64 E, tw_u16 *__restrict__ y,
                  float *__restrict__ partial, long long M) {
    const int lane = (int)(threadIdx.x & 31u);
    const long long nch = (long long)chunk_off[M], items = nch * ${NS};
    /* slice-major: the warps in flight share a K slice, whose rows stay in L2 */
    for (long long it = tw_gwarp(); it < items; it += tw_nwarps()) {
        const long long c = it % nch;
        const long long g = (it / nch) * 32 + lane;
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        float acc[${VEC}];
#pragma unroll
        for (int q = 0; q < ${VEC}; q++)
            acc[q] = 0.0f;
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            const tw_u32 nl = e < e1 ? e_col[e] : 0u;
            const float tl = e < e1 ? e_tm[e] : 0.0f;
            const int nb = (int)(e1 - b < 32ull ? e1 - b : 32ull);
            /* LB loads in flight, then the sums in entry order */
            for (int q0 = 0; q0 < nb; q0 += ${LB}) {
                tw_raw w[${LB}];
                float tm[${LB}];
#pragma unroll
                for (int i = 0; i < ${LB}; i++) {
                    const long long n = __shfl_sync(TW_FULL, nl, (q0 + i) & 31);
                    tm[i] = __shfl_sync(TW_FULL, tl, (q0 + i) & 31);
                    if (q0 + i < nb && g < ${G})
                        w[i] = tw_ldraw(wd + n * ${S.K}, g);
                }
#pragma unroll
                for (int i = 0; i < ${LB}; i++) {
                    if (q0 + i < nb && g < ${G}) {
                        float f[${VEC}];
                        tw_cvt(w[i], f);
#pragma unroll
                        for (int v = 0; v < ${VEC}; v++)
                            acc[v] = __fadd_rn(acc[v], __fmul_rn(tm[i], f[v]));
                    }
                }
            }
        }
        if (g < ${G}) {
            if (chunk_off[m + 1] - chunk_off[m] == 1ull)
                tw_sth(y + m * ${S.K}, g, acc);
            else
                tw_stf(partial + (long long)(pslot_off[m] + j) * ${S.K}, g, acc);
        }
    }
}

/* Rows with several chunks: out = Σ partials in chunk order, rounded once. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_row_reduce(const float *__restrict__ partial, const tw_u64 *__restrict__ chunk_off,
                       const tw_u64 *__restrict__ pslot_off, tw_u16 *__restrict__ out,
                       long long M) {
    const int lane = (int)(threadIdx.x & 31u);
    const long long items = M * ${NS};
    for (long long it = tw_gwarp(); it < items; it += tw_nwarps()) {
        const long long m = it / ${NS};
        const long long g = (it % ${NS}) * 32 + lane;
        const tw_u64 nch = chunk_off[m + 1] - chunk_off[m];
        if (nch <= 1ull || g >= ${G})
            continue;
        float acc[${VEC}];
#pragma unroll
        for (int q = 0; q < ${VEC}; q++)
            acc[q] = 0.0f;
        for (tw_u64 j = 0; j < nch; j++) {
            float f[${VEC}];
            tw_ldf(partial + (long long)(pslot_off[m] + j) * ${S.K}, g, f);
#pragma unroll
            for (int q = 0; q < ${VEC}; q++)
                acc[q] = __fadd_rn(acc[q], f[q]);
        }
        tw_sth(out + m * ${S.K}, g, acc);
    }
}

/* stats[0] = nnz/M, stats[1] = Σ chunk_l1 / M: contiguous per-thread sums, then a fixed tree. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_stats(const double *__restrict__ chunk_l1, const tw_u64 *__restrict__ chunk_off,
                  const tw_u64 *__restrict__ row_off, long long M, float *__restrict__ stats) {
    __shared__ double sh[256];
    const tw_u64 n = chunk_off[M], t = threadIdx.x;
    double s = 0.0;
    for (tw_u64 c = n * t / 256ull; c < n * (t + 1ull) / 256ull; c++)
        s += chunk_l1[c];
    sh[t] = s;
    __syncthreads();
    for (int h = 128; h > 0; h >>= 1) {
        if ((int)t < h)
            sh[t] += sh[t + h];
        __syncthreads();
    }
    if (t == 0) {
        stats[0] = (float)((double)row_off[M] / (double)M);
        stats[1] = (float)(sh[0] / (double)M);
    }
}

/* ---- backward ---- */

/* dT = dy·Wd_n + l1c·sign(U), dU = dT·P, dP = dT·U per entry (lane per entry). */
extern "C" __global__ void __launch_bounds__(${32 * WPB})
twell_train_bwd_ent(const tw_u16 *__restrict__ dy, const tw_u16 *__restrict__ wd,
                    const tw_u32 *__restrict__ packed, float *u_ell,
                    const tw_u64 *__restrict__ tile_off, const tw_u64 *__restrict__ spill_off,
                    const tw_u32 *__restrict__ spill, float *u_spill,
                    const tw_u64 *__restrict__ row_off, const tw_u64 *__restrict__ chunk_off,
                    const tw_u32 *__restrict__ chunk_row, tw_u64 E, float l1c,
                    float *__restrict__ e_du, float *__restrict__ e_dp, long long M) {
    extern __shared__ float tw_sm[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    float *ds = tw_sm + warp * ${S.K};
    const long long nch = (long long)chunk_off[M];
    for (long long c = tw_gwarp(); c < nch; c += tw_nwarps()) {
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        if (e0 < e1)
            tw_row_to_smem(ds, dy + m * ${S.K}, lane);
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            if (e < e1) {
                tw_u32 word;
                float *up;
                tw_locate(m, e, packed, tile_off, spill_off, spill, u_ell, u_spill, word, up);
                const float u = *up, p = tw_to_f32((tw_u16)(word >> 16));
                const float sgn = u > 0.0f ? 1.0f : (u < 0.0f ? -1.0f : 0.0f);
                const float dt =
                    __fadd_rn(tw_dot_ref(ds, wd + (long long)(word & 0xffffu) * ${S.K}),
                              __fmul_rn(l1c, sgn));
                e_du[e] = __fmul_rn(dt, p);
                e_dp[e] = __fmul_rn(dt, u);
            }
        }
        __syncwarp();
    }
}

/* dx (or a partial row) of one (row chunk, K slice): Σ dU·Wu_n + dP·Wg_n. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_bwd_dx(const tw_u16 *__restrict__ wu, const tw_u16 *__restrict__ wg,
                   const tw_u32 *__restrict__ e_col, const float *__restrict__ e_du,
                   const float *__restrict__ e_dp, const tw_u64 *__restrict__ row_off,
                   const tw_u64 *__restrict__ chunk_off, const tw_u64 *__restrict__ pslot_off,
                   const tw_u32 *__restrict__ chunk_row, tw_u64 E, tw_u16 *__restrict__ dx,
                   float *__restrict__ partial, long long M) {
    const int lane = (int)(threadIdx.x & 31u);
    const long long nch = (long long)chunk_off[M], items = nch * ${NS};
    /* slice-major: the warps in flight share a K slice, whose rows stay in L2 */
    for (long long it = tw_gwarp(); it < items; it += tw_nwarps()) {
        const long long c = it % nch;
        const long long g = (it / nch) * 32 + lane;
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        float acc[${VEC}];
#pragma unroll
        for (int q = 0; q < ${VEC}; q++)
            acc[q] = 0.0f;
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            const tw_u32 nl = e < e1 ? e_col[e] : 0u;
            const float ul = e < e1 ? e_du[e] : 0.0f, pl = e < e1 ? e_dp[e] : 0.0f;
            const int nb = (int)(e1 - b < 32ull ? e1 - b : 32ull);
            for (int q0 = 0; q0 < nb; q0 += ${LB2}) {
                tw_raw wa[${LB2}], wb[${LB2}];
                float du[${LB2}], dp[${LB2}];
#pragma unroll
                for (int i = 0; i < ${LB2}; i++) {
                    const long long n = __shfl_sync(TW_FULL, nl, (q0 + i) & 31);
                    du[i] = __shfl_sync(TW_FULL, ul, (q0 + i) & 31);
                    dp[i] = __shfl_sync(TW_FULL, pl, (q0 + i) & 31);
                    if (q0 + i < nb && g < ${G}) {
                        wa[i] = tw_ldraw(wu + n * ${S.K}, g);
                        wb[i] = tw_ldraw(wg + n * ${S.K}, g);
                    }
                }
#pragma unroll
                for (int i = 0; i < ${LB2}; i++) {
                    if (q0 + i < nb && g < ${G}) {
                        float a[${VEC}], b2[${VEC}];
                        tw_cvt(wa[i], a);
                        tw_cvt(wb[i], b2);
#pragma unroll
                        for (int v = 0; v < ${VEC}; v++)
                            acc[v] = __fadd_rn(
                                acc[v], __fadd_rn(__fmul_rn(du[i], a[v]), __fmul_rn(dp[i], b2[v])));
                    }
                }
            }
        }
        if (g < ${G}) {
            if (chunk_off[m + 1] - chunk_off[m] == 1ull)
                tw_sth(dx + m * ${S.K}, g, acc);
            else
                tw_stf(partial + (long long)(pslot_off[m] + j) * ${S.K}, g, acc);
        }
    }
}

/* Per row block b (rows [b·R, b·R + R)): hist[n·B + b] = its entries of neuron n (integer
 * atomics: the counts are exact whatever the order). hist must be zero. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_hist(const tw_u64 *__restrict__ row_off, const tw_u32 *__restrict__ e_col,
                 long long M, long long R, long long B, tw_u32 *__restrict__ hist) {
    for (long long b = blockIdx.x; b < B; b += gridDim.x) {
        const long long r0 = b * R, r1 = r0 + R < M ? r0 + R : M;
        for (tw_u64 e = row_off[r0] + threadIdx.x; e < row_off[r1]; e += blockDim.x)
            atomicAdd(hist + (long long)e_col[e] * B + b, 1u);
    }
}

/* Stable placement: row block b visits its rows in order; a row's entries have distinct
 * neurons, so each takes the next slot of its (neuron, block) cursor without a race. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_scatter(const tw_u64 *__restrict__ row_off, const tw_u32 *__restrict__ e_col,
                    long long M, long long R, long long B, tw_u32 *__restrict__ cursor,
                    tw_u32 *__restrict__ col_row, tw_u32 *__restrict__ col_ent) {
    for (long long b = blockIdx.x; b < B; b += gridDim.x) {
        const long long r0 = b * R, r1 = r0 + R < M ? r0 + R : M;
        for (long long m = r0; m < r1; m++) {
            for (tw_u64 e = row_off[m] + threadIdx.x; e < row_off[m + 1]; e += blockDim.x) {
                tw_u32 *cur = cursor + (long long)e_col[e] * B + b;
                const tw_u32 at = *cur;
                *cur = at + 1u;
                col_row[at] = (tw_u32)m;
                col_ent[at] = (tw_u32)e;
            }
            __syncthreads();
        }
    }
}

/* dWu, dWg, dWd of one (neuron chunk, K slice): tokens ascending. Chunk 0 writes the outputs,
 * chunk j ≥ 1 its partial slot. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_dw(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ dy,
               const tw_u64 *__restrict__ col_off, const tw_u32 *__restrict__ col_row,
               const tw_u32 *__restrict__ col_ent, const float *__restrict__ e_du,
               const float *__restrict__ e_dp, const float *__restrict__ e_tm,
               const tw_u64 *__restrict__ nchunk_off, const tw_u64 *__restrict__ nslot_off,
               const tw_u32 *__restrict__ nchunk_nrn, tw_u64 E2, float *__restrict__ dwg,
               float *__restrict__ dwu, float *__restrict__ dwd, float *__restrict__ npart) {
    const int lane = (int)(threadIdx.x & 31u);
    const long long nch = (long long)nchunk_off[${S.N}], items = nch * ${NS};
    /* slice-major: the warps in flight share a K slice of x and dy (M·2·32·VEC·2 bytes, L2) */
    for (long long it = tw_gwarp(); it < items; it += tw_nwarps()) {
        const long long c = it % nch;
        const long long g = (it / nch) * 32 + lane;
        const long long n = nchunk_nrn[c];
        const tw_u64 j = (tw_u64)c - nchunk_off[n];
        const tw_u64 i0 = col_off[n] + j * E2, end = col_off[n + 1];
        const tw_u64 i1 = i0 + E2 < end ? i0 + E2 : end;
        float gu[${VEC}], gg[${VEC}], gd[${VEC}];
#pragma unroll
        for (int q = 0; q < ${VEC}; q++)
            gu[q] = gg[q] = gd[q] = 0.0f;
        for (tw_u64 b = i0; b < i1; b += 32ull) {
            const tw_u64 i = b + (tw_u64)lane;
            tw_u32 ml = 0;
            float ul = 0.0f, pl = 0.0f, tl = 0.0f;
            if (i < i1) {
                const tw_u32 e = col_ent[i];
                ml = col_row[i];
                ul = e_du[e], pl = e_dp[e], tl = e_tm[e];
            }
            const int nb = (int)(i1 - b < 32ull ? i1 - b : 32ull);
            for (int q0 = 0; q0 < nb; q0 += ${LB2}) {
                tw_raw rx[${LB2}], rd[${LB2}];
                float du[${LB2}], dp[${LB2}], tm[${LB2}];
#pragma unroll
                for (int i = 0; i < ${LB2}; i++) {
                    const long long m = __shfl_sync(TW_FULL, ml, (q0 + i) & 31);
                    du[i] = __shfl_sync(TW_FULL, ul, (q0 + i) & 31);
                    dp[i] = __shfl_sync(TW_FULL, pl, (q0 + i) & 31);
                    tm[i] = __shfl_sync(TW_FULL, tl, (q0 + i) & 31);
                    if (q0 + i < nb && g < ${G}) {
                        rx[i] = tw_ldraw(x + m * ${S.K}, g);
                        rd[i] = tw_ldraw(dy + m * ${S.K}, g);
                    }
                }
#pragma unroll
                for (int i = 0; i < ${LB2}; i++) {
                    if (q0 + i < nb && g < ${G}) {
                        float xv[${VEC}], dv[${VEC}];
                        tw_cvt(rx[i], xv);
                        tw_cvt(rd[i], dv);
#pragma unroll
                        for (int v = 0; v < ${VEC}; v++) {
                            gu[v] = __fadd_rn(gu[v], __fmul_rn(du[i], xv[v]));
                            gg[v] = __fadd_rn(gg[v], __fmul_rn(dp[i], xv[v]));
                            gd[v] = __fadd_rn(gd[v], __fmul_rn(tm[i], dv[v]));
                        }
                    }
                }
            }
        }
        if (g < ${G}) {
            if (j == 0) {
                tw_stf(dwu + n * ${S.K}, g, gu);
                tw_stf(dwg + n * ${S.K}, g, gg);
                tw_stf(dwd + n * ${S.K}, g, gd);
            } else {
                float *p = npart + (long long)(nslot_off[n] + j - 1ull) * ${3 * S.K};
                tw_stf(p, g, gu);
                tw_stf(p + ${S.K}, g, gg);
                tw_stf(p + ${2 * S.K}, g, gd);
            }
        }
    }
}

/* Neurons with several chunks: outputs += partials in chunk order. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_dw_reduce(const tw_u64 *__restrict__ nchunk_off, const tw_u64 *__restrict__ nslot_off,
                      const float *__restrict__ npart, float *__restrict__ dwg,
                      float *__restrict__ dwu, float *__restrict__ dwd) {
    const int lane = (int)(threadIdx.x & 31u);
    const long long items = (long long)${S.N} * ${NS};
    for (long long it = tw_gwarp(); it < items; it += tw_nwarps()) {
        const long long n = it / ${NS};
        const long long g = (it % ${NS}) * 32 + lane;
        const tw_u64 nch = nchunk_off[n + 1] - nchunk_off[n];
        if (nch <= 1ull || g >= ${G})
            continue;
        float *outs[3] = {dwu + n * ${S.K}, dwg + n * ${S.K}, dwd + n * ${S.K}};
        for (int o = 0; o < 3; o++) {
            float acc[${VEC}];
            tw_ldf(outs[o], g, acc);
            for (tw_u64 j = 1; j < nch; j++) {
                float f[${VEC}];
                tw_ldf(npart + (long long)(nslot_off[n] + j - 1ull) * ${3 * S.K} + o * ${S.K}, g,
                       f);
#pragma unroll
                for (int q = 0; q < ${VEC}; q++)
                    acc[q] = __fadd_rn(acc[q], f[q]);
            }
            tw_stf(outs[o], g, acc);
        }
    }
}
]==]

if MMA then
    local MMA_TY = S.dtype == "bf16" and "bf16" or "f16"
    cuda [==[
/* ---- overflowing row-tiles on tensor cores ---- */

extern "C" __global__ void __launch_bounds__(256)
twell_train_ovf_list(const tw_u32 *__restrict__ packed, long long M, tw_u32 *__restrict__ cnt,
                     tw_u32 *__restrict__ list) {
    const long long tiles = M * ${NT};
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < tiles;
         r += (long long)gridDim.x * blockDim.x) {
        const long long m = r / ${NT};
        const int t = (int)(r % ${NT});
        if (packed[m * ${S.NW} + t * ${S.W}] > ${S.SLOTS}u)
            list[(long long)t * M + atomicAdd(cnt + t, 1u)] = (tw_u32)m;
    }
}

__device__ __forceinline__ void tw_mma16816(float (&d)[4], tw_u32 a0, tw_u32 a1, tw_u32 a2,
                                            tw_u32 a3, tw_u32 b0, tw_u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.${MMA_TY}.${MMA_TY}.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Gate values of listed rows i0 .. i0+OVF_BM-1 of tile t into vals[OVF_BM][T] (rows past n:
 * garbage).
 * Warp (wm, wn): rows 16·wm .. +15, columns 64·wn .. +63 of the tile. Fragments come straight
 * from global memory, 16 bytes per row per k block of 32: thread (g = lane/4, q = lane%4) loads
 * k0+8q .. k0+8q+7 of its rows; the two m16n8k16 steps of the block take the halves (.x .y and
 * .z .w) as the logical k pairs {2q, 2q+1} and {2q+8, 2q+9}. A and B use the same permutation of
 * k, so each output is Σ_k x[m][k]·Wg[n][k] over all k (tensor-core order, fp32 accumulate). */
__device__ __forceinline__ void tw_ovf_tile_acc(const tw_u16 *__restrict__ x,
                                                const tw_u16 *__restrict__ wg,
                                                const tw_u32 *__restrict__ rows, tw_u32 n, int t,
                                                float (&acc)[8][4]) {
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    const int wm = warp / ${OVF_WN}, wn = warp % ${OVF_WN}, g = lane >> 2, q = lane & 3;
    const tw_u32 r0 = (tw_u32)(16 * wm + g), r1 = r0 + 8u;
    const long long m0 = rows[r0 < n ? r0 : 0u], m1 = rows[r1 < n ? r1 : 0u];
    const uint4 *xa = (const uint4 *)(x + m0 * ${S.K}) + q;
    const uint4 *xb = (const uint4 *)(x + m1 * ${S.K}) + q;
    const uint4 *wb = (const uint4 *)(wg + ((long long)t * ${S.T} + 64 * wn + g) * ${S.K}) + q;
#pragma unroll
    for (int j = 0; j < 8; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    uint4 a0 = xa[0], a1 = xb[0], b[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        b[j] = wb[j * ${S.K}]; /* row + 8j: 8·K elements = K uint4 further */
    for (int kb = 0; kb < ${S.K // 32}; kb++) {
        /* next block's fragments first: their loads overlap this block's mma */
        const int kn = kb + 1 < ${S.K // 32} ? kb + 1 : kb;
        const uint4 na0 = xa[4 * kn], na1 = xb[4 * kn];
        uint4 nb[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            nb[j] = wb[j * ${S.K} + 4 * kn];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            tw_mma16816(acc[j], a0.x, a1.x, a0.y, a1.y, b[j].x, b[j].y);
            tw_mma16816(acc[j], a0.z, a1.z, a0.w, a1.w, b[j].z, b[j].w);
        }
        a0 = na0, a1 = na1;
#pragma unroll
        for (int j = 0; j < 8; j++)
            b[j] = nb[j];
    }
}

__device__ __forceinline__ void tw_ovf_tile_vals(const tw_u16 *__restrict__ x,
                                                 const tw_u16 *__restrict__ wg,
                                                 const tw_u32 *__restrict__ rows, tw_u32 n, int t,
                                                 tw_u16 *vals) {
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    const int wm = warp / ${OVF_WN}, wn = warp % ${OVF_WN}, g = lane >> 2, q = lane & 3;
    const tw_u32 r0 = (tw_u32)(16 * wm + g), r1 = r0 + 8u;
    float acc[8][4];
    tw_ovf_tile_acc(x, wg, rows, n, t, acc);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int c = 64 * wn + 8 * j + 2 * q;
        vals[r0 * ${S.T} + c] = tw_act(acc[j][0]);
        vals[r0 * ${S.T} + c + 1] = tw_act(acc[j][1]);
        vals[r1 * ${S.T} + c] = tw_act(acc[j][2]);
        vals[r1 * ${S.T} + c + 1] = tw_act(acc[j][3]);
    }
}

/* mode 0: count + slots of each listed row-tile (the recount); mode 1: its spill words. */
extern "C" __global__ void __launch_bounds__(${32 * OVF_WM * OVF_WN})
twell_train_ovf_tiles(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wg,
                      tw_u32 *__restrict__ packed, const tw_u32 *__restrict__ cnt,
                      const tw_u32 *__restrict__ list, const tw_u64 *__restrict__ spill_off,
                      tw_u32 *__restrict__ spill, long long M, int mode) {
    __shared__ tw_u16 vals[${OVF_BM * S.T}];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    const int t = (int)blockIdx.y;
    const tw_u32 nt = cnt[t];
    const tw_u32 *lt = list + (long long)t * M;
    const tw_u32 below = (1u << lane) - 1u;
    for (tw_u32 i0 = blockIdx.x * ${OVF_BM}u; i0 < nt; i0 += gridDim.x * ${OVF_BM}u) {
        const tw_u32 n = nt - i0 < ${OVF_BM}u ? nt - i0 : ${OVF_BM}u;
        tw_ovf_tile_vals(x, wg, lt + i0, n, t, vals);
        __syncthreads();
        for (tw_u32 ri = (tw_u32)warp; ri < n; ri += ${OVF_WM * OVF_WN}u) {
            const long long m = lt[i0 + ri];
            const tw_u16 *v = vals + ri * ${S.T};
            if (mode == 0) {
                tw_pack_row_tile_warp(v, packed + m * ${S.NW} + t * ${S.W},
                                      (unsigned int)(t * ${S.T}));
                continue;
            }
            const long long r = m * ${NT} + t;
            const tw_u64 base = spill_off[r], have = spill_off[r + 1] - base;
            tw_u32 count = 0;
            for (int c = 0; c < ${S.T}; c += 32) {
                const tw_u16 a = v[c + lane];
                const bool on = tw_active(a);
                const tw_u32 bal = __ballot_sync(TW_FULL, on);
                const tw_u32 pos = count + (tw_u32)__popc(bal & below);
                if (on && pos >= ${S.SLOTS}u && pos - ${S.SLOTS}u < have)
                    spill[base + pos - ${S.SLOTS}u] =
                        ((tw_u32)a << 16) | (tw_u32)(t * ${S.T} + c + lane);
                count += (tw_u32)__popc(bal);
            }
        }
        __syncthreads();
    }
}
]==]
if OVF_UDT then
    cuda [==[

/* Tiled U / dT of overflowing row-tiles: a·w_n (a = x, w = Wu; or dy, Wd) for every column of
 * 16 listed rows of tile t at a time on tensor cores (tw_ovf_tile_acc, fp32 accumulate), then
 * each row's active entries (its slot words, then its spill words) take their column's value:
 * out_ell at the slot word, out_spill at the spill index. Grid and block as ovf_tiles. */
extern "C" __global__ void __launch_bounds__(${32 * OVF_WM * OVF_WN})
twell_train_ovf_udt(const tw_u16 *__restrict__ a, const tw_u16 *__restrict__ w,
                    const tw_u32 *__restrict__ packed, const tw_u32 *__restrict__ cnt,
                    const tw_u32 *__restrict__ list, const tw_u64 *__restrict__ spill_off,
                    const tw_u32 *__restrict__ spill, float *__restrict__ out_ell,
                    float *__restrict__ out_spill, long long M) {
    __shared__ float vf[${OVF_BM * S.T}];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    const int t = (int)blockIdx.y;
    const tw_u32 nt = cnt[t];
    const tw_u32 *lt = list + (long long)t * M;
    const int wm = warp / ${OVF_WN}, wn = warp % ${OVF_WN}, g = lane >> 2, q = lane & 3;
    const tw_u32 r0 = (tw_u32)(16 * wm + g), r1 = r0 + 8u;
    for (tw_u32 i0 = blockIdx.x * ${OVF_BM}u; i0 < nt; i0 += gridDim.x * ${OVF_BM}u) {
        const tw_u32 n = nt - i0 < ${OVF_BM}u ? nt - i0 : ${OVF_BM}u;
        float acc[8][4];
        tw_ovf_tile_acc(a, w, lt + i0, n, t, acc);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int c = 64 * wn + 8 * j + 2 * q;
            vf[r0 * ${S.T} + c] = acc[j][0];
            vf[r0 * ${S.T} + c + 1] = acc[j][1];
            vf[r1 * ${S.T} + c] = acc[j][2];
            vf[r1 * ${S.T} + c + 1] = acc[j][3];
        }
        __syncthreads();
        for (tw_u32 ri = (tw_u32)warp; ri < n; ri += ${OVF_WM * OVF_WN}u) {
            const long long m = lt[i0 + ri];
            const float *v = vf + ri * ${S.T};
            const long long wb = m * ${S.NW} + t * ${S.W};
            for (int j = lane; j < ${S.SLOTS}; j += 32) {
                const tw_u32 col = (packed[wb + 1 + j] & 0xffffu) - (tw_u32)(t * ${S.T});
                if (col < ${S.T}u)
                    out_ell[wb + 1 + j] = v[col];
            }
            const long long r = m * ${NT} + t;
            const tw_u64 base = spill_off[r], have = spill_off[r + 1] - base;
            for (tw_u64 j = (tw_u64)lane; j < have; j += 32ull) {
                const tw_u32 col = (spill[base + j] & 0xffffu) - (tw_u32)(t * ${S.T});
                if (col < ${S.T}u)
                    out_spill[base + j] = v[col];
            }
        }
        __syncthreads();
    }
}
]==]
end
end

if VEC == 8 then
    cuda [==[
/* ---- staged per-entry dot products ---- */

__device__ __forceinline__ void tw_cp16(void *smem, const void *gmem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem));
}

/* Chunk c of the nb rows base + n_r·K (n_r = __shfl of nrow from lane r) into st[r][0..KC). */
__device__ __forceinline__ void tw_stage_issue(tw_u16 *st, const tw_u16 *__restrict__ base,
                                               tw_u32 nrow, int nb, int c, int lane) {
    const int sub = lane / ${PPR}, piece = lane % ${PPR};
    for (int r0 = 0; r0 < nb; r0 += ${RPI}) {
        const int r = r0 + sub;
        const tw_u32 n = __shfl_sync(TW_FULL, nrow, r & 31);
        if (r < nb)
            tw_cp16(st + r * ${KCP} + piece * 8,
                    base + (long long)n * ${S.K} + c * ${KC} + piece * 8);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

/* Lane l < nb: the reference dot product (cpu_ref.h order) of the token row xs (dtype, shared)
 * and row n_l (nrow of lane l); every lane of the warp must call it. st: STAGES·32·KCP elements of
 * this warp's shared memory. Chunk c waits in buffer c % STAGES; STAGES - 1 chunks are in flight
 * while one is summed (a commit group per chunk, empty past the end, so the count is uniform). */
typedef ${SXF == 1 and "float" or "tw_u16"} tw_xs;
__device__ __forceinline__ float tw_dot_staged(const tw_xs *xs, const tw_u16 *__restrict__ base,
                                               tw_u32 nrow, int nb, tw_u16 *st, int lane) {
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < ${STAGES - 1}; c++) {
        if (c < ${NKC})
            tw_stage_issue(st + c * ${32 * KCP}, base, nrow, nb, c, lane);
        else
            asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int c = 0; c < ${NKC}; c++) {
        const int cn = c + ${STAGES - 1};
        if (cn < ${NKC})
            tw_stage_issue(st + (cn % ${STAGES}) * ${32 * KCP}, base, nrow, nb, cn, lane);
        else
            asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group ${STAGES - 1};\n" ::);
        __syncwarp();
        if (lane < nb) {
            const uint4 *w = (const uint4 *)(st + (c % ${STAGES}) * ${32 * KCP} + lane * ${KCP});
]==]
if SXF == 1 then
    cuda [==[
            const float4 *xv = (const float4 *)(xs + c * ${KC});
#pragma unroll 4
            for (int g = 0; g < ${PPR}; g++) {
                const uint4 v = w[g];
                const float4 xa = xv[2 * g], xb = xv[2 * g + 1];
                const tw_u32 u[4] = {v.x, v.y, v.z, v.w};
                const float xf[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    s = __fadd_rn(s, __fmul_rn(xf[2 * i], tw_to_f32((tw_u16)(u[i] & 0xffffu))));
                    s = __fadd_rn(s, __fmul_rn(xf[2 * i + 1], tw_to_f32((tw_u16)(u[i] >> 16))));
                }
            }
]==]
else
    cuda [==[
            const uint4 *xv = (const uint4 *)(xs + c * ${KC});
#pragma unroll 4
            for (int g = 0; g < ${PPR}; g++) {
                const uint4 v = w[g], xq = xv[g];
                const tw_u32 u[4] = {v.x, v.y, v.z, v.w}, xw[4] = {xq.x, xq.y, xq.z, xq.w};
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    s = __fadd_rn(s, __fmul_rn(tw_to_f32((tw_u16)(xw[i] & 0xffffu)),
                                               tw_to_f32((tw_u16)(u[i] & 0xffffu))));
                    s = __fadd_rn(s, __fmul_rn(tw_to_f32((tw_u16)(xw[i] >> 16)),
                                               tw_to_f32((tw_u16)(u[i] >> 16))));
                }
            }
]==]
end
cuda [==[
        }
        __syncwarp(); /* a later issue overwrites this buffer */
    }
    return s;
}

/* A token row (dtype) into this warp's shared copy, as is (then __syncwarp). */
__device__ __forceinline__ void tw_row_to_smem16(tw_xs *xs, const tw_u16 *__restrict__ row,
                                                 int lane) {
]==]
if SXF == 1 then
    cuda [==[
    for (int g = lane; g < ${S.K // 8}; g += 32) {
        float f[8];
        tw_ldg(row, g, f);
        ((float4 *)xs)[2 * g] = make_float4(f[0], f[1], f[2], f[3]);
        ((float4 *)xs)[2 * g + 1] = make_float4(f[4], f[5], f[6], f[7]);
    }
]==]
else
    cuda [==[
    for (int g = lane; g < ${S.K // 8}; g += 32)
        ((uint4 *)xs)[g] = ((const uint4 *)row)[g];
]==]
end
cuda [==[
    __syncwarp();
}

/* The staged dot products of the lanes whose `need` is set, packed into the first lanes (the
 * others' rows are not read): returns this lane's value (0 where not needed). Warp-collective. */
__device__ __forceinline__ float tw_dot_need(const tw_xs *xs, const tw_u16 *__restrict__ base,
                                             tw_u32 nrow, bool need, tw_u32 need_m, tw_u16 *st,
                                             int lane) {
    const int nc = __popc(need_m);
    const int src = lane < nc ? (int)__fns(need_m, 0u, lane + 1) : 0;
    const tw_u32 nn = __shfl_sync(TW_FULL, nrow, src & 31);
    const float d = tw_dot_staged(xs, base, nn, nc, st, lane);
    const int rank = __popc(need_m & ((1u << lane) - 1u));
    const float v = __shfl_sync(TW_FULL, d, rank & 31);
    return need ? v : 0.0f;
}

/* pre == NULL: every U computed here. Else (tiled U) entries of non-overflowing row-tiles take
 * the U twell_train_udt wrote into u_ell, and with pre_all those of overflowing ones the U
 * twell_train_ovf_udt wrote (u_ell, u_spill); only the others are computed (and the token row is
 * loaded only for them). */
extern "C" __global__ void __launch_bounds__(${32 * SWP})
twell_train_fwd_ent_s(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wu,
                      const tw_u32 *__restrict__ packed, float *u_ell,
                      const tw_u64 *__restrict__ tile_off, const tw_u64 *__restrict__ spill_off,
                      const tw_u32 *__restrict__ spill, float *u_spill,
                      const tw_u64 *__restrict__ row_off, const tw_u64 *__restrict__ chunk_off,
                      const tw_u32 *__restrict__ chunk_row, tw_u64 E, tw_u32 *__restrict__ e_col,
                      float *__restrict__ e_tm, double *__restrict__ chunk_l1, long long M,
                      const tw_u32 *__restrict__ pre, int pre_all) {
    extern __shared__ uint4 tw_sm4[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    tw_xs *xs = (tw_xs *)((char *)tw_sm4 + warp * ${STW});
    tw_u16 *st = (tw_u16 *)(xs + ${S.K});
    const long long nch = (long long)chunk_off[M];
    for (long long c = tw_gwarp(); c < nch; c += tw_nwarps()) {
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        double l1 = 0.0;
        bool have_row = false;
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            const int nb = (int)(e1 - b < 32ull ? e1 - b : 32ull);
            tw_u32 word = 0;
            float *up = NULL;
            bool ok = false, sp = false;
            if (e < e1)
                tw_locate_pre(m, e, packed, tile_off, spill_off, spill, u_ell, u_spill, pre,
                              pre_all, word, up, ok, sp);
            const tw_u32 n = word & 0xffffu;
            const bool need = e < e1 && !ok;
            const tw_u32 need_m = __ballot_sync(TW_FULL, need);
            float u = 0.0f;
            if (need_m) {
                if (!have_row)
                    tw_row_to_smem16(xs, x + m * ${S.K}, lane);
                have_row = true;
                u = need_m == (nb == 32 ? TW_FULL : (1u << nb) - 1u)
                        ? tw_dot_staged(xs, wu, n, nb, st, lane)
                        : tw_dot_need(xs, wu, n, need, need_m, st, lane);
            }
            float tm = 0.0f;
            if (e < e1) {
                if (ok)
                    u = *up;
                tm = __fmul_rn(u, tw_to_f32((tw_u16)(word >> 16)));
                if (!ok)
                    *up = u;
                e_col[e] = n;
                e_tm[e] = tm;
            }
            for (int q = 0; q < nb; q++) /* Σ|Tm| in entry order, as the CPU */
                l1 += fabs((double)__shfl_sync(TW_FULL, tm, q));
        }
        if (lane == 0)
            chunk_l1[c] = l1;
        __syncwarp();
    }
}

/* pre == NULL: every dy·Wd_n computed here. Else (tiled dT) entries of non-overflowing row-tiles
 * take dy·Wd_n from dt_ell (same word index as u_ell, written by twell_train_udt), and with
 * pre_all those of overflowing ones from dt_ell / dt_spill (twell_train_ovf_udt). */
extern "C" __global__ void __launch_bounds__(${32 * SWP})
twell_train_bwd_ent_s(const tw_u16 *__restrict__ dy, const tw_u16 *__restrict__ wd,
                      const tw_u32 *__restrict__ packed, float *u_ell,
                      const tw_u64 *__restrict__ tile_off, const tw_u64 *__restrict__ spill_off,
                      const tw_u32 *__restrict__ spill, float *u_spill,
                      const tw_u64 *__restrict__ row_off, const tw_u64 *__restrict__ chunk_off,
                      const tw_u32 *__restrict__ chunk_row, tw_u64 E, float l1c,
                      float *__restrict__ e_du, float *__restrict__ e_dp, long long M,
                      const tw_u32 *__restrict__ pre, const float *__restrict__ dt_ell,
                      int pre_all, const float *__restrict__ dt_spill) {
    extern __shared__ uint4 tw_sm4[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    tw_xs *ds = (tw_xs *)((char *)tw_sm4 + warp * ${STW});
    tw_u16 *st = (tw_u16 *)(ds + ${S.K});
    const long long nch = (long long)chunk_off[M];
    for (long long c = tw_gwarp(); c < nch; c += tw_nwarps()) {
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        bool have_row = false;
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            const int nb = (int)(e1 - b < 32ull ? e1 - b : 32ull);
            tw_u32 word = 0;
            float *up = NULL;
            bool ok = false, sp = false;
            if (e < e1)
                tw_locate_pre(m, e, packed, tile_off, spill_off, spill, u_ell, u_spill, pre,
                              pre_all, word, up, ok, sp);
            const bool need = e < e1 && !ok;
            const tw_u32 need_m = __ballot_sync(TW_FULL, need);
            float d = 0.0f;
            if (need_m) {
                if (!have_row)
                    tw_row_to_smem16(ds, dy + m * ${S.K}, lane);
                have_row = true;
                d = need_m == (nb == 32 ? TW_FULL : (1u << nb) - 1u)
                        ? tw_dot_staged(ds, wd, word & 0xffffu, nb, st, lane)
                        : tw_dot_need(ds, wd, word & 0xffffu, need, need_m, st, lane);
            }
            if (e < e1) {
                if (ok)
                    d = sp ? dt_spill[up - u_spill] : dt_ell[up - u_ell];
                const float u = *up, p = tw_to_f32((tw_u16)(word >> 16));
                const float sgn = u > 0.0f ? 1.0f : (u < 0.0f ? -1.0f : 0.0f);
                const float dt = __fadd_rn(d, __fmul_rn(l1c, sgn));
                e_du[e] = __fmul_rn(dt, p);
                e_dp[e] = __fmul_rn(dt, u);
            }
        }
        __syncwarp();
    }
}

/* Tiled U / dT: the fused inference pipeline's phase A (templates/ffn_fused.cu.lua) left, per
 * pair slot p of its (chunk, group) lists, the partial dot products of 64-column slices at
 * partial[s·pstride + p]. One warp per list (lane per slot): the slices summed in ascending
 * order (fp32, fixed), the slot's token m and neuron n decoded from desc (row in chunk << 7 |
 * key << 4 | token in group), the entry found in row-tile (m, n / T) by its column (the slots
 * ascend), and the sum stored at that word of out_ell ([M, N/C] f32, u_ell's layout). Pads (gate
 * bits 0) are skipped; nothing is written when flag[0] != 0 (the lists were not built). */
extern "C" __global__ void __launch_bounds__(256)
twell_train_udt(const tw_u32 *__restrict__ desc, const tw_u16 *__restrict__ gv,
                const tw_u32 *__restrict__ offsets, const tw_u32 *__restrict__ sizes,
                const float *__restrict__ partial, long long pstride, int nsl, int cn, int gt,
                int nc, const tw_u32 *__restrict__ packed, float *__restrict__ out_ell,
                long long M, const tw_u32 *__restrict__ flag) {
    if (flag[0] != 0u)
        return;
    const int lane = (int)(threadIdx.x & 31u);
    const long long ng = (M + gt - 1) / gt, nl = ng * nc;
    for (long long l = tw_gwarp(); l < nl; l += tw_nwarps()) {
        const long long c = l / ng, g = l - c * ng;
        const tw_u32 o = offsets[l], sz = sizes[l];
        for (tw_u32 q = (tw_u32)lane; q < sz; q += 32u) {
            const tw_u32 p = o + q;
            if (gv[p] == 0)
                continue;
            const tw_u32 d = desc[p];
            const long long m = g * gt + (long long)(d & 15u);
            const tw_u32 n = (tw_u32)c * (tw_u32)cn + (d >> 7);
            if (m >= M || n >= ${S.N}u)
                continue;
            const long long wb = m * ${S.NW} + (long long)(n / ${S.T}u) * ${S.W};
            const tw_u32 cnt = packed[wb];
            int lo = 0, hi = (int)(cnt < ${S.SLOTS}u ? cnt : ${S.SLOTS}u) - 1;
            while (lo < hi) { /* the first slot whose column is >= n */
                const int mid = (lo + hi) >> 1;
                if ((packed[wb + 1 + mid] & 0xffffu) < n)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (hi < 0 || (packed[wb + 1 + lo] & 0xffffu) != n)
                continue;
            float v = 0.0f;
            for (int sl = 0; sl < nsl; sl++)
                v += partial[(long long)sl * pstride + p];
            out_ell[wb + 1 + lo] = v;
        }
    }
}
]==]
end
