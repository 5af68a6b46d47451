-- gemm_sm90.cu.lua — Hopper (sm_90a) dense GEMM of the dense FFN path (runtime/ops/ffn/heavy/dense_gemm_sm90.c):
-- out[M, N] = epilogue(A[M, K] · B[N, K]ᵀ), both operands K-major ("NT", as gate_pack_sm90), on
-- tensor cores (wgmma m64n256k16, fp32 accumulation), TMA 128-byte swizzle, persistent clusters
-- of 2 CTAs along M sharing the B tile by multicast. Same main loop as gate_pack_sm90.cu.lua.
--
-- Parameters: K (reduction length, a multiple of 64), N (output columns, a multiple of 64),
--             dtype ("bf16" | "fp16"), MODE ("gated" | "relu" | "plain", default "gated"),
--             T, C (TwELL tile and compression of `packed`; MODE gated only; defaults 256, 8),
--             STAGES (pipeline depth, default 3), CLUSTER (1 | 2, default 2),
--             SPLIT (0 | 1, default 0; MODE gated, relu, plain, mm: split-K partials, below),
--             TB (MODE plain: must be 1; the training modes: 0 | 1; B MN-major, below),
--             DM (0 | 1, default 0; MODE gated, relu, plain): 1 adds a last kernel argument
--             `const int *mrows` read at the start: rows [min(M, *mrows), M) are neither computed
--             nor stored (M stays the extent of the maps and of the split-K partials' layout), so
--             a row count known only on the device (the inference heavy-row block) costs only
--             its own rows.
-- MODE (all values rounded once to dtype, nearest even; tw_act(v) = round(v) for v > 0, the
-- canonical positive NaN for a NaN v (active: twell_common's act_rule), else +0):
--   gated  the up projection with the gate applied: out = round(g ⊙ (x·Wuᵀ)), A = x, B = Wu,
--          G = Wg. g is the TwELL gate `packed` (same rows as A) expanded in shared memory by the
--          idle warps of the producer warpgroup while the tensor cores run; a unit whose flags
--          word is non-zero (one of its row-tiles overflows) first computes g = tw_act(x·Wgᵀ)
--          itself (a second pass over K with B = G).
--   relu   out = tw_act(A·Bᵀ), computed only for units whose flags word is non-zero (the others
--          are left untouched: the caller wrote them from the packed activation).
--   plain  out = round(A·Bᵀ) (the down projection: A = H; B = Wd read MN-major with TB = 1,
--          the way the training mode mm reads it: map_b over Wd [N_red, N_out] row-major, dims
--          {N_out, N_red}, box {64, 64}; TB = 0, a transposed copy Wdᵀ read K-major, was
--          removed: it lost to TB = 1 at every M measured).
-- SPLIT = 1 (split-K, for grids far smaller than the device): the reduction's KB k-blocks are cut
--   into nsplit slices (runtime; slice s = k-blocks [s·KB/nsplit, (s+1)·KB/nsplit), each at least
--   one k-block: the kernel clamps nsplit to 1..KB and the caller must pass the clamped value to
--   the reduction). A work item is (unit, slice), item w = unit·nsplit + slice. No epilogue: each
--   pass stores its fp32 accumulators straight from the fragments to
--   part[((plane·nsplit + slice)·M + row)·N + col] (rows < M), plane 0 the product A·Bᵀ, plane 1
--   (MODE gated, flagged units only) the gate's x·Gᵀ. The passes per unit are MODE's (gated: 2
--   for a flagged unit, relu: 0 for an unflagged one). The caller sums the slices in order and
--   applies MODE's epilogue (dense_aux.cu.lua's twell_dense_reduce_*). No staging buffer.
--   MODE mm (the training path's y and dx on a small block of heavy rows) keeps the training ABI
--   with nseg = nsplit, stores plane 0 to part the same way and writes nothing else; the caller
--   reduces with twell_dense_reduce_plain (out = round(Σ)).
-- Training modes (runtime/ops/train/dense/cuda_train_dense.c; a second ABI below; TA / TB = 1 make A / B
-- "MN-major": A given as [K, M] (M contiguous), B as [K, N] (N contiguous), loaded by TMA in
-- 64 x 64 boxes and fed to wgmma transposed, so no operand is ever copied into another layout):
--   fwd    2 passes per unit: P = tw_act(A·Gᵀ) into the staging buffer, then U = A·Bᵀ;
--          out0 (pitch LDO) = Tm = round(P ⊙ U) where P is active (> 0 or NaN) else +0; aux[M, N]
--          u32 words (P bits | round(U) bits << 16); part[unit·16 + warp] = {Σ|Tm| fp32,
--          count(P active)} of
--          each consumer warp's 16 x 256 block (summed in a fixed order by the caller).
--   dt     acc = A·Bᵀ (dy·Wdᵀ); with (P, U) from aux: dT = acc + scal·sign(U);
--          out0 = round(dT·P), out1 = round(dT·U) where P is active, else +0 (sign(NaN) = NaN;
--          both pitch LDO; out1
--          4-byte aligned: stored from the fragments).
--   mm     out0 (pitch LDO) = round(A·Bᵀ); the reduction's k-blocks kb < bsplit read map_b,
--          the others map_g from k-block 0 (two stacked B operands: dx = [dU dP]·[Wu; Wg]).
--   wgrad  fp32: row r of out (r < M) goes to out{r / nseg} + (r % nseg)·N (three stacked
--          weight gradients); units whose cluster starts at a row < bsplit read map_b, the
--          others map_g; the reduction length is runtime (kred_blocks k-blocks, K unused).
-- Unit = the 128·CLUSTER rows x 256 columns a cluster computes: t = mp·NB + nb, NB = ceil(N/256),
-- rows [128·CLUSTER·mp, +128·CLUSTER), columns [256·nb, +256).
-- ABI (runtime/ops/ffn/heavy/dense_gemm_sm90.c launches it):
--   extern "C" __global__ void twell_gemm_sm90(
--       const __grid_constant__ tw_tmap map_a,  // A [M, K]: dims {K, M}, box {64, 128}
--       const __grid_constant__ tw_tmap map_b,  // B [N, K]: dims {K, N}, box {64, 256/CLUSTER}
--       const __grid_constant__ tw_tmap map_g,  // G like B (gated), else any valid map
--                                               // all: 16-bit, swizzle 128B
--       unsigned short *out,                    // [M, N] row-major, 16-byte aligned
--       const unsigned int *packed,             // gated: [M, N/C] TwELL, else unused
--       const unsigned int *flags,              // gated, relu: one word per unit, else unused
--       int M)
--   training modes:
--   extern "C" __global__ void twell_gemm_sm90(map_a, map_b, map_g,
--       void *out0, void *out1, void *out2, const unsigned int *aux, float *part, float scal,
--       int M, int kred_blocks, int bsplit, int nseg)
--       maps: K-major operands as above; TA / TB operands box {64, 64} over dims {rows, red}
--   SPLIT = 1:
--   extern "C" __global__ void twell_gemm_sm90(map_a, map_b, map_g, float *part,
--       const unsigned int *flags, int M, int nsplit)  // maps as MODE's; part 8-byte aligned
--   block = 384 threads, cluster = (CLUSTER, 1, 1), grid = a multiple of CLUSTER persistent CTAs
--   (at most one per SM), dynamic shared memory = SMEM below (printed as
--   "// twell_gemm_sm90 smem=<bytes>" on the first line; the launcher computes the same formula).
-- Contract: writes rows [0, M) x columns [0, N) of out (relu: of the flagged units only);
-- deterministic (fixed summation order per element); g from `packed` is used only through the
-- first min(count, slots) entries of each row-tile, and entries whose column lies outside their
-- row-tile are ignored (a malformed buffer gives unspecified values, never a wild access).
--
-- Design: warpgroup 0: thread 0 issues TMA into a STAGES-deep ring (A 128x64, B 256x64) completing
-- on mbarriers; in MODE gated its warps 1..3 expand the next unit's gate rows into a 128-row
-- staging buffer (528-byte rows) while the tensor cores run (hand-over by named barriers 1, 2). Warpgroups 1 and 2 consume (64 rows
-- each, one wgmma group in flight). Epilogue in place: each thread reads g at its own accumulator
-- positions of the staging buffer (conflict-free: rows are 132 words apart), writes h back there,
-- then each warp stores its 16 rows with coalesced 16-byte stores. setmaxnreg 72 / 216.

local K = P.K
local N = P.N
local dtype = param("dtype", "bf16")
local MODE = param("MODE", "gated")
local STAGES = param("STAGES", 3)
local CLUSTER = param("CLUSTER", 2)
local TA = param("TA", 0)
local TB = param("TB", 0)
local LDO = param("LDO", 0)
local SPLIT = param("SPLIT", 0)
local DM = param("DM", 0)
for _, kv in ipairs({ { "K", K }, { "N", N } }) do
    check(math.type(kv[2]) == "integer" and kv[2] > 0, "%s must be a positive integer, got %s",
        kv[1], tostring(kv[2]))
end
check(dtype == "bf16" or dtype == "fp16", "dtype=%s must be bf16 or fp16", tostring(dtype))
local TRAIN = MODE == "fwd" or MODE == "dt" or MODE == "mm" or MODE == "wgrad"
check(MODE == "gated" or MODE == "relu" or MODE == "plain" or TRAIN,
    "MODE=%s must be gated, relu, plain, fwd, dt, mm or wgrad", tostring(MODE))
check((TA == 0 or TA == 1) and (TB == 0 or TB == 1), "TA=%s, TB=%s must be 0 or 1",
    tostring(TA), tostring(TB))
check(TRAIN or (TA == 0 and LDO == 0), "TA and LDO apply to training modes only")
check(TRAIN or TB == 0 or MODE == "plain", "TB applies to MODE plain and the training modes only")
check(MODE ~= "plain" or TB == 1, "MODE plain reads B MN-major: TB=%s must be 1", tostring(TB))
check(SPLIT == 0 or SPLIT == 1, "SPLIT=%s must be 0 or 1", tostring(SPLIT))
check(SPLIT == 0 or not TRAIN or MODE == "mm", "SPLIT applies to MODE gated, relu, plain and mm only")
check(DM == 0 or DM == 1, "DM=%s must be 0 or 1", tostring(DM))
check(DM == 0 or not TRAIN, "DM applies to MODE gated, relu and plain only")
check(math.type(LDO) == "integer" and LDO >= 0, "LDO=%s must be a non-negative integer",
    tostring(LDO))
if LDO == 0 then
    LDO = N
end
if LDO < N or LDO % 8 ~= 0 then
    unsupported("LDO=%d must be a multiple of 8 and at least N=%d", LDO, N)
end
check(math.type(STAGES) == "integer" and STAGES >= 2 and STAGES <= 8,
    "STAGES=%s must be an integer in 2..8", tostring(STAGES))
check(CLUSTER == 1 or CLUSTER == 2, "CLUSTER=%s must be 1 or 2", tostring(CLUSTER))
if K % 64 ~= 0 then
    unsupported("K=%d is not a multiple of 64", K)
end
if N % 64 ~= 0 then
    unsupported("N=%d is not a multiple of 64", N)
end
local GATED = MODE == "gated"
local T, C, W, SLOTS, NW = 256, 8, 32, 31, N // 8
if GATED then
    local common = import "twell_common"
    local S = common.shape() -- validates K, N, T, C, dtype as a TwELL shape
    T, C, W, SLOTS, NW = S.T, S.C, S.W, S.SLOTS, S.NW
end

local BM, BN, BK, THREADS = 128, 256, 64, 384
local ROWB = 528 -- staging row pitch: 512 B + 16 B (conflict-free fragment access and row reads)
-- wgrad and the split-K partials are stored from the fragments: no staging buffer
local STG_BYTES = (MODE == "wgrad" or SPLIT == 1) and 0 or BM * ROWB
local PFB = param("PFB", 16) -- MODE dt: column groups of (P, U) words loaded at once
local A_BYTES, B_BYTES = BM * BK * 2, BN * BK * 2
local SMEM = 1024 + STAGES * (A_BYTES + B_BYTES) + STG_BYTES + 2 * STAGES * 8
if SMEM > 227 * 1024 then
    unsupported("STAGES=%d needs %d bytes of shared memory (max 232448)", STAGES, SMEM)
end
local DT = dtype == "bf16" and "bf16" or "f16"
local SBO = 8 * BK * 2 -- 8 rows of 128 B
local IT = 256 // C // 32 -- 32-word loads per row of a unit's gate segment (C = 8: 1)
if IT < 1 then
    IT = 1
end

local MODE_IDS = { gated = 0, relu = 1, plain = 2, fwd = 3, dt = 4, mm = 5, wgrad = 6 }
local MODE_ID = MODE_IDS[MODE]
-- MN-major operands: 64-element (128-byte) atoms along M/N, 8 k-rows of 128 B per 1024-byte
-- swizzle block: LBO = 8 KB (next 64-row box), SBO = 1 KB; a k16 step is 16 rows = 2048 B.
local ADV_A = TA == 1 and 128 or 2
local ADV_B = TB == 1 and 128 or 2

emitf("// twell_gemm_sm90 smem=%d\n", SMEM)
local act = import "twell_common"
act.act_rule(dtype)
act.canon_nan2(dtype)
local sm90 = import "sm90_tma"
sm90.helpers({ -- types, tensor map, mbarriers, cluster, TMA, wgmma (shared with gate_pack)
    DT = DT, SBO = SBO, SWZ = 1, TA = TA, TB = TB,
    after_types = function()
        local MODE_ID, TA, TB, SPLIT, DM = MODE_ID, TA, TB, SPLIT, DM -- locals: `cuda` sees them
        cuda [==[
#define TW_MODE ${MODE_ID} /* 0 gated, 1 relu, 2 plain, 3 fwd, 4 dt, 5 mm, 6 wgrad */
#define TW_TA ${TA}
#define TW_TB ${TB}
#define TW_SPLIT ${SPLIT}
#define TW_DM ${DM}
#if TW_DM
#define TW_DM_ARG , const int *__restrict__ mrows
#else
#define TW_DM_ARG
#endif

]==]
    end,
    note_arrive_cluster = [==[
/* Arrive on the barrier at the same offset in cluster CTA `cta`. Default semantics on purpose
 * (see gate_pack_sm90.cu.lua: `.release.cluster` costs a MEMBAR.ALL.GPU per arrive); only the
 * wgmma reads of the stage must be complete, and wgmma.wait_group guarantees that. */
]==],
    after_cluster = function()
        cuda [==[
/* ---- the staging buffer's hand-over (MODE gated): named barriers between the 3 expanding warps
 * and the 8 consumer warps (352 threads); the side that only signals arrives, the other waits.
 * bar 1: the buffer holds the unit's gate; bar 2: the consumers have stored the unit out of it. */
static __device__ __forceinline__ void tw_bar_arrive(int id) {
    asm volatile("bar.arrive %0, 352;" ::"r"(id) : "memory");
}
static __device__ __forceinline__ void tw_bar_sync(int id) {
    asm volatile("bar.sync %0, 352;" ::"r"(id) : "memory");
}

]==]
    end,
    note_tma_mc = "",
    note_fence_acc = "",
    note_desc = [==[
/* K-major operand descriptor, 128-byte swizzle: start address, LBO 16 B (unused), SBO = 8 rows. */
]==],
    after_desc = function()
        cuda [==[
/* MN-major operand descriptor, 128-byte swizzle: LBO = 8192 B between 64-element atoms along
 * M/N, SBO = 1024 B between groups of 8 k-rows. */
static __device__ __forceinline__ tw_u64 tw_desc_mn(tw_u32 saddr) {
    return (tw_u64)((saddr & 0x3FFFF) >> 4) | ((tw_u64)(8192 >> 4) << 16) |
           ((tw_u64)(1024 >> 4) << 32) | ((tw_u64)1 << 62);
}
]==]
    end,
})
cuda [==[

/* ---- epilogue helpers ---- */
/* Rounds two floats to dtype (nearest even): lo in bits 15..0, hi in bits 31..16. */
static __device__ __forceinline__ tw_u32 tw_pack2(float lo, float hi) {
    tw_u32 r;
    asm("cvt.rn.${DT}x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
/* tw_act of two values, the rule of tw_half_act: relu keeping NaN (active), then the canonical
 * NaN; -0, negatives and -Inf give +0. */
static __device__ __forceinline__ tw_u32 tw_act2(float lo, float hi) {
    return tw_canon_nan2(tw_pack2(tw_relu_nan(lo), tw_relu_nan(hi)));
}
/* The two 16-bit values of w as floats (exact). */
static __device__ __forceinline__ void tw_unpack2(tw_u32 w, float &lo, float &hi) {
#if ${dtype == "bf16" and 1 or 0}
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
#else
    asm("{.reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b;}"
        : "=f"(lo), "=f"(hi)
        : "r"(w));
#endif
}
static __device__ __forceinline__ tw_u32 tw_lds32(tw_u32 addr) {
    tw_u32 v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
static __device__ __forceinline__ void tw_sts32(tw_u32 addr, tw_u32 v) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
static __device__ __forceinline__ void tw_sts16(tw_u32 addr, tw_u16 v) {
    asm volatile("st.shared.u16 [%0], %1;" ::"r"(addr), "h"(v) : "memory");
}
static __device__ __forceinline__ void tw_sts128_zero(tw_u32 addr) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(addr), "r"(0u) : "memory");
}
static __device__ __forceinline__ void tw_lds128(tw_u32 addr, uint4 &v) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
}

/* Stores the 16 rows of a consumer warp's slab (row pitch ${ROWB} B) to out rows row0.., columns
 * n0..n0+255 (columns >= N and rows >= M skipped): lane l moves bytes 16l..16l+15 of each row. */
static __device__ __forceinline__ void tw_store_slab(tw_u32 slab, tw_u16 *__restrict__ out,
                                                     int row0, int n0, int M) {
    const int lane = threadIdx.x & 31;
    const int col = n0 + lane * 8;
    const bool col_ok = col < ${N};
#pragma unroll
    for (int r0 = 0; r0 < 16; r0 += 8) {
        uint4 v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i)
            tw_lds128(slab + (tw_u32)((r0 + i) * ${ROWB} + lane * 16), v[i]);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int row = row0 + r0 + i;
            if (col_ok && row < M)
                *(uint4 *)(out + (long long)row * ${LDO} + col) = v[i];
        }
    }
}
]==]

if GATED and SPLIT == 0 then
    cuda [==[
/* Expands the gate rows [m0, m0+128) x columns [n0, n0+256) of `packed` into the staging buffer
 * (dtype values, 0 where inactive). Run by warp pw (0..2) of the 3 expanding warps: it owns rows
 * pw, pw+3, ... First zeroes its rows, then scatters each row-tile's first min(count, slots)
 * entries; rows are loaded 4 at a time so several loads are in flight. */
static __device__ __forceinline__ void tw_expand_gate(tw_u32 stg, const tw_u32 *__restrict__ packed,
                                                      int m0, int n0, int M, int pw) {
    constexpr int W = ${W}, SLOTS = ${SLOTS}, T = ${T}, IT = ${IT}, NR = 4;
    const int lane = threadIdx.x & 31;
    for (int r = pw; r < ${BM}; r += 3)
        tw_sts128_zero(stg + (tw_u32)(r * ${ROWB} + lane * 16));
    __syncwarp();
    const int ncols = ${N} - n0 < 256 ? ${N} - n0 : 256;
    const int segw = ncols / ${C}; /* words of a row in this unit's columns */
    for (int r0 = pw; r0 < ${BM}; r0 += 3 * NR) {
        tw_u32 v[NR][IT];
#pragma unroll
        for (int i = 0; i < NR; ++i) {
            const int r = r0 + 3 * i, grow = m0 + r;
            const bool ok = r < ${BM} && grow < M;
            const tw_u32 *src = packed + (long long)grow * ${NW} + n0 / ${C};
#pragma unroll
            for (int it = 0; it < IT; ++it) {
                const int j = it * 32 + lane;
                v[i][it] = ok && j < segw ? __ldg(src + j) : 0u;
            }
        }
#pragma unroll
        for (int i = 0; i < NR; ++i) {
            const int r = r0 + 3 * i;
#pragma unroll
            for (int it = 0; it < IT; ++it) {
                const int j = it * 32 + lane;
                tw_u32 count;
                if (W <= 32)
                    count = __shfl_sync(0xffffffffu, v[i][it], lane & ~(W - 1));
                else
                    count = __shfl_sync(0xffffffffu, v[i][it & ~(W / 32 - 1)], 0);
                const int slot = j & (W - 1);
                const tw_u32 lim = count < (tw_u32)SLOTS ? count : (tw_u32)SLOTS;
                const tw_u32 e = v[i][it];
                const int rel = (int)(e & 0xffffu) - n0;   /* column within the unit */
                const int tile0 = (j / W) * T;             /* first column of j's row-tile */
                if (r < ${BM} && j < segw && slot >= 1 && (tw_u32)slot <= lim &&
                    (unsigned)(rel - tile0) < (unsigned)T)
                    tw_sts16(stg + (tw_u32)(r * ${ROWB} + 2 * rel), (tw_u16)(e >> 16));
            }
        }
    }
}
]==]
end

if TRAIN then
    cuda [==[
/* The sign the L1 term uses: NaN for a NaN U, as the dense gradient of |T|. */
static __device__ __forceinline__ float tw_sign(float v) { return tw_sign_nan(v); }
]==]
end

cuda [==[
extern "C" __global__ void __launch_bounds__(${THREADS}, 1)
#if TW_SPLIT && TW_MODE < 3
    twell_gemm_sm90(const __grid_constant__ tw_tmap map_a, const __grid_constant__ tw_tmap map_b,
                    const __grid_constant__ tw_tmap map_g, float *__restrict__ part,
                    const tw_u32 *__restrict__ flags, int M, int nsplit TW_DM_ARG) {
    constexpr int KB = ${K} / ${BK};
    /* slices of the reduction: 1..KB, so that every slice holds at least one k-block */
    const int NSPL = nsplit < 1 ? 1 : (nsplit > KB ? KB : nsplit);
#elif TW_MODE < 3
    twell_gemm_sm90(const __grid_constant__ tw_tmap map_a, const __grid_constant__ tw_tmap map_b,
                    const __grid_constant__ tw_tmap map_g, tw_u16 *__restrict__ out,
                    const tw_u32 *__restrict__ packed, const tw_u32 *__restrict__ flags,
                    int M TW_DM_ARG) {
    constexpr int KB = ${K} / ${BK};
    constexpr int NSPL = 1;
#else
    twell_gemm_sm90(const __grid_constant__ tw_tmap map_a, const __grid_constant__ tw_tmap map_b,
                    const __grid_constant__ tw_tmap map_g, void *out0, void *out1, void *out2,
                    const tw_u32 *__restrict__ aux, float *__restrict__ part, float scal, int M,
                    int kred_blocks, int bsplit, int nseg) {
#if TW_MODE == 6
    const int KB = kred_blocks;
#else
    constexpr int KB = ${K} / ${BK};
#endif
    const tw_u32 *packed = nullptr, *flags = nullptr;
    tw_u16 *__restrict__ out = (tw_u16 *)out0;
    (void)out1, (void)out2, (void)aux, (void)part, (void)scal, (void)kred_blocks, (void)bsplit;
    (void)nseg, (void)out;
#if TW_SPLIT /* MODE mm: nseg slices of the reduction, 1..KB */
    const int NSPL = nseg < 1 ? 1 : (nseg > KB ? KB : nseg);
#else
    constexpr int NSPL = 1;
#endif
#endif
    /* DM: M is the rows the maps and the partials are laid out for; the rows computed and
     * stored are the first min(M, *mrows) (a count the stream's earlier work wrote) */
    const int MLAY = M;
    (void)MLAY;
#if TW_DM
    M = min(M, max(*mrows, 0));
#endif
    constexpr int NB = (${N} + ${BN} - 1) / ${BN};
    constexpr tw_u32 A_BYTES = ${A_BYTES}, B_BYTES = ${B_BYTES};
    constexpr int STAGES = ${STAGES}, CLUSTER = ${CLUSTER};
]==]
sm90.smem() -- shared memory base, A / B rings, staging buffer
cuda [==[
    const tw_u32 sBar = sStg + ${STG_BYTES}; /* full[STAGES], empty[STAGES] */
#if !TW_SPLIT
    (void)packed;
#endif
    (void)flags, (void)map_g;

]==]
sm90.start({}) -- thread ids, cluster ids, barrier init and cluster sync
cuda [==[

    const int MB = (M + ${BM} - 1) / ${BM};
    const int MP = (MB + CLUSTER - 1) / CLUSTER;
    const int U = MP * NB;
    const int ITEMS = U * NSPL; /* (unit, slice) pairs; NSPL = 1 without SPLIT */
    /* passes over K of unit u: gated 1 (2 when its gate must be recomputed), relu 0 or 1, fwd 2
     * (the gate, then the up projection), the others 1 */
#if TW_MODE == 0
#define TW_PASSES(u) (flags[u] != 0u ? 2 : 1)
#elif TW_MODE == 1
#define TW_PASSES(u) (flags[u] != 0u ? 1 : 0)
#elif TW_MODE == 3
#define TW_PASSES(u) 2
#else
#define TW_PASSES(u) 1
#endif
    /* n fastest: the clusters running at once share A rows and sweep B (kept in L2) */
#define TW_UNIT_COORDS(u)                                                                          \
    const int nb = (u) % NB, mp = (u) / NB;                                                        \
    const int m0 = (mp * CLUSTER + (int)rank) * ${BM}, n0 = nb * ${BN}
    /* item w: unit u, slice sl of k-blocks [kb0, kb1) (the whole reduction without SPLIT) */
#define TW_ITEM(w)                                                                                 \
    const int u = (w) / NSPL, sl = (w) - u * NSPL;                                                 \
    const int kb0 = sl * KB / NSPL, kb1 = (sl + 1) * KB / NSPL;                                    \
    (void)sl

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 72;");
        if (tid == 0) {
            int stage = 0;
            tw_u32 phase = 0;
            for (int wi = cid; wi < ITEMS; wi += ncl) {
                TW_ITEM(wi);
                const int np = TW_PASSES(u);
                TW_UNIT_COORDS(u);
                (void)mp;
                for (int p = 0; p < np; ++p) {
                    for (int kb = kb0; kb < kb1; ++kb) {
                        /* B operand and its k-block: the same on both CTAs of a cluster */
#if TW_MODE == 3
                        const tw_tmap *mb = p == 0 ? &map_g : &map_b;
                        const int kr = kb;
#elif TW_MODE == 5
                        const tw_tmap *mb = kb < bsplit ? &map_b : &map_g;
                        const int kr = kb < bsplit ? kb : kb - bsplit;
#elif TW_MODE == 6
                        const tw_tmap *mb = mp * CLUSTER * ${BM} < bsplit ? &map_b : &map_g;
                        const int kr = kb;
#else
                        const tw_tmap *mb = (TW_MODE == 0 && np == 2 && p == 0) ? &map_g : &map_b;
                        const int kr = kb;
#endif
                        const tw_u32 full = sBar + 8 * stage, empty = sBar + 8 * (STAGES + stage);
                        tw_mbar_wait(empty, phase ^ 1u);
                        tw_mbar_expect_tx(full, A_BYTES + B_BYTES);
#if TW_TA
                        tw_tma_load(sA + stage * A_BYTES, &map_a, m0, kb * ${BK}, full);
                        tw_tma_load(sA + stage * A_BYTES + 8192u, &map_a, m0 + 64, kb * ${BK},
                                    full);
#else
                        tw_tma_load(sA + stage * A_BYTES, &map_a, kb * ${BK}, m0, full);
#endif
#if TW_TB
                        /* four 64-column boxes; CTA `rank` loads 4/CLUSTER of them for all */
#pragma unroll
                        for (int c = 0; c < 4 / CLUSTER; ++c) {
                            const int ch = (int)rank * (4 / CLUSTER) + c;
                            if (CLUSTER == 1)
                                tw_tma_load(sB + stage * B_BYTES + (tw_u32)ch * 8192u, mb,
                                            n0 + 64 * ch, kr * ${BK}, full);
                            else
                                tw_tma_load_mc(sB + stage * B_BYTES + (tw_u32)ch * 8192u, mb,
                                               n0 + 64 * ch, kr * ${BK}, full,
                                               (tw_u16)((1u << CLUSTER) - 1u));
                        }
#else
                        if (CLUSTER == 1)
                            tw_tma_load(sB + stage * B_BYTES, mb, kr * ${BK}, n0, full);
                        else
                            tw_tma_load_mc(sB + stage * B_BYTES + rank * (B_BYTES / CLUSTER), mb,
                                           kr * ${BK}, n0 + (int)rank * (${BN} / CLUSTER), full,
                                           (tw_u16)((1u << CLUSTER) - 1u));
#endif
                        if (++stage == STAGES) {
                            stage = 0;
                            phase ^= 1u;
                        }
                    }
                }
            }
        }
#if TW_MODE == 0 && !TW_SPLIT
        else if (warp >= 1) {
            /* expanders: the gate of each unit whose gate is not recomputed, once the consumers
             * have stored the previous unit out of the staging buffer */
            for (int u = cid; u < U; u += ncl) {
                const bool recompute = flags[u] != 0u;
                TW_UNIT_COORDS(u);
                if (u != cid)
                    tw_bar_sync(2);
                if (!recompute)
                    tw_expand_gate(sStg, packed, m0, n0, M, warp - 1);
                tw_bar_arrive(1);
            }
        }
#endif
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 216;");
        const int cw = wg - 1;   /* consumer warpgroup: rows 64cw .. 64cw+63 of the tile */
        const int wq = warp & 3; /* warp in the warpgroup: rows 16wq .. 16wq+15 of those */
        const tw_u32 slab = sStg + (tw_u32)((cw * 4 + wq) * 16 * ${ROWB});
        /* this thread's accumulator pair (j, h) lives at frag + h*8 rows + 16j bytes: rows
         * lane/4 (+8), columns 8j + 2(lane%4) (+1) of the warp's 16 x 256 block */
        const tw_u32 frag = slab + (tw_u32)((lane >> 2) * ${ROWB} + 4 * (lane & 3));
        (void)frag; /* unused where the fragments are stored directly (wgrad, SPLIT) */
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; ++i)
            d[i] = 0.f;
        int stage = 0;
        tw_u32 phase = 0;
        for (int wi = cid; wi < ITEMS; wi += ncl) {
            TW_ITEM(wi);
            const int np = TW_PASSES(u);
            if (np == 0)
                continue;
            TW_UNIT_COORDS(u);
            (void)mp;
            for (int p = 0; p < np; ++p) {
                int prev = 0;
                for (int kb = kb0; kb < kb1; ++kb) {
                    tw_mbar_wait(sBar + 8 * stage, phase);
                    tw_wg_fence();
#if TW_TA
                    const tw_u64 da = tw_desc_mn(sA + stage * A_BYTES + (tw_u32)(cw * 8192));
#else
                    const tw_u64 da = tw_desc(sA + stage * A_BYTES + (tw_u32)(cw * 64 * ${BK} * 2));
#endif
#if TW_TB
                    const tw_u64 db = tw_desc_mn(sB + stage * B_BYTES);
#else
                    const tw_u64 db = tw_desc(sB + stage * B_BYTES);
#endif
#pragma unroll
                    for (int kk = 0; kk < ${BK} / 16; ++kk)
                        tw_wgmma(d, da + (tw_u64)(${ADV_A} * kk), db + (tw_u64)(${ADV_B} * kk),
                                 (kb > kb0 || kk > 0) ? 1u : 0u);
                    tw_wg_commit();
                    if (kb > kb0) {
                        tw_wg_wait<1>(); /* the previous k-block's group is done: free its stage */
                        if (lane == 0) {
                            if (CLUSTER == 1)
                                tw_mbar_arrive(sBar + 8 * (STAGES + prev));
                            else
                                for (int c = 0; c < CLUSTER; ++c)
                                    tw_mbar_arrive_cluster(sBar + 8 * (STAGES + prev), (tw_u32)c);
                        }
                    }
                    prev = stage;
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1u;
                    }
                }
                tw_wg_wait<0>();
                tw_fence_acc(d);
                if (lane == 0) {
                    if (CLUSTER == 1)
                        tw_mbar_arrive(sBar + 8 * (STAGES + prev));
                    else
                        for (int c = 0; c < CLUSTER; ++c)
                            tw_mbar_arrive_cluster(sBar + 8 * (STAGES + prev), (tw_u32)c);
                }
#if TW_SPLIT
                /* this pass's fp32 partial sums straight from the fragments (a quad stores 32
                 * contiguous bytes of one row): plane 1 the gate pass of a flagged unit */
                {
                    const int plane = (np == 2 && p == 0) ? 1 : 0;
                    float *pp = part + (long long)(plane * NSPL + sl) * MLAY * ${N};
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int row = m0 + cw * 64 + wq * 16 + (lane >> 2) + 8 * h;
                        if (row < M) {
                            float *o = pp + (long long)row * ${N};
#pragma unroll
                            for (int j = 0; j < 32; ++j) {
                                const int col = n0 + 8 * j + 2 * (lane & 3);
                                if (col < ${N})
                                    *(float2 *)(o + col) =
                                        make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
                            }
                        }
                    }
                }
#else
#if TW_MODE == 0
                if (p == 0) /* the expanders are done with the buffer (or left it to us) */
                    tw_bar_sync(1);
#endif
#if TW_MODE == 0 || TW_MODE == 3
                if (p + 1 < np) { /* recomputed gate: g = tw_act(acc) at our own positions */
#pragma unroll
                    for (int j = 0; j < 32; ++j)
#pragma unroll
                        for (int h = 0; h < 2; ++h)
                            tw_sts32(frag + (tw_u32)(h * 8 * ${ROWB} + 16 * j),
                                     tw_act2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]));
                }
#endif
#endif /* TW_SPLIT */
            }
#if TW_SPLIT
            /* no epilogue: the caller reduces the slices (stored per pass above) */
#elif TW_MODE == 6
            /* fp32 weight gradients straight from the fragments: a quad stores 32 contiguous
             * bytes of one row */
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + cw * 64 + wq * 16 + (lane >> 2) + 8 * h;
                if (row < M) {
                    const int seg = row / nseg, r = row - seg * nseg;
                    float *o = (float *)(seg == 0 ? out0 : (seg == 1 ? out1 : out2)) +
                               (long long)r * ${N};
#pragma unroll
                    for (int j = 0; j < 32; ++j) {
                        const int col = n0 + 8 * j + 2 * (lane & 3);
                        if (col < ${N})
                            *(float2 *)(o + col) = make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
                    }
                }
            }
#else
#if TW_MODE == 3
            float l1 = 0.0f, cnt = 0.0f;
#elif TW_MODE == 4
            uint2 pf[${PFB}][2]; /* (P, U) words prefetched ${PFB} column groups at a time */
#endif
            /* epilogue in place: each thread touches only its own positions until __syncwarp */
#pragma unroll
            for (int j = 0; j < 32; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const tw_u32 a = frag + (tw_u32)(h * 8 * ${ROWB} + 16 * j);
                    const float lo = d[4 * j + 2 * h], hi = d[4 * j + 2 * h + 1];
#if TW_MODE == 0
                    float g0, g1;
                    tw_unpack2(tw_lds32(a), g0, g1);
                    tw_sts32(a, tw_pack2(g0 * lo, g1 * hi));
#elif TW_MODE == 1
                    tw_sts32(a, tw_act2(lo, hi));
#elif TW_MODE == 3
                    /* Tm = round(P·U) on the support; the saved word pair (P | round(U) << 16) */
                    const tw_u32 pw = tw_lds32(a);
                    float p0, p1;
                    tw_unpack2(pw, p0, p1);
                    /* the support: P active (positive or NaN: tw_act_on) */
                    const tw_u32 tm =
                        tw_pack2(tw_act_on(p0) ? p0 * lo : 0.0f, tw_act_on(p1) ? p1 * hi : 0.0f);
                    tw_sts32(a, tm);
                    float t0, t1;
                    tw_unpack2(tm, t0, t1);
                    l1 += fabsf(t0) + fabsf(t1);
                    cnt += (tw_act_on(p0) ? 1.0f : 0.0f) + (tw_act_on(p1) ? 1.0f : 0.0f);
                    const tw_u32 uu = tw_pack2(lo, hi);
                    const int row = m0 + cw * 64 + wq * 16 + (lane >> 2) + 8 * h;
                    const int col = n0 + 8 * j + 2 * (lane & 3);
                    if (row < M && col < ${N})
                        *(uint2 *)(aux + (long long)row * ${N} + col) =
                            make_uint2((pw & 0xffffu) | (uu << 16), (pw >> 16) | (uu & 0xffff0000u));
#elif TW_MODE == 4
                    /* dT = acc + scal·sign(U); dU = dT·P, dP = dT·U on the support (P > 0) */
                    const int row = m0 + cw * 64 + wq * 16 + (lane >> 2) + 8 * h;
                    const int col = n0 + 8 * j + 2 * (lane & 3);
                    if ((j % ${PFB}) == 0 && h == 0) { /* the next ${PFB} j's words, all in flight */
#pragma unroll
                        for (int jj = 0; jj < ${PFB}; ++jj)
#pragma unroll
                            for (int hh = 0; hh < 2; ++hh) {
                                const int r2 = row + 8 * hh, c2 = col + 8 * jj;
                                pf[jj][hh] = r2 < M && c2 < ${N}
                                                 ? __ldg((const uint2 *)(aux + (long long)r2 * ${N} + c2))
                                                 : make_uint2(0u, 0u);
                            }
                    }
                    float du0 = 0.0f, du1 = 0.0f, dp0 = 0.0f, dp1 = 0.0f;
                    if (row < M && col < ${N}) {
                        const uint2 w = pf[j % ${PFB}][h];
                        float p0, u0, p1, u1;
                        tw_unpack2(w.x, p0, u0);
                        tw_unpack2(w.y, p1, u1);
                        if (tw_act_on(p0)) {
                            const float t = lo + scal * tw_sign(u0);
                            du0 = t * p0;
                            dp0 = t * u0;
                        }
                        if (tw_act_on(p1)) {
                            const float t = hi + scal * tw_sign(u1);
                            du1 = t * p1;
                            dp1 = t * u1;
                        }
                    }
                    tw_sts32(a, tw_pack2(du0, du1));
                    /* dP straight from the fragment (the staging buffer holds dU; the two
                     * 16-byte halves of a 32-byte sector come from consecutive j and merge in L2) */
                    if (row < M && col < ${N})
                        *(tw_u32 *)((tw_u16 *)out1 + (long long)row * ${LDO} + col) =
                            tw_pack2(dp0, dp1);
#else
                    tw_sts32(a, tw_pack2(lo, hi));
#endif
                }
            __syncwarp();
            tw_store_slab(slab, out, m0 + cw * 64 + wq * 16, n0, M);
            __syncwarp();
#if TW_MODE == 3
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                l1 += __shfl_xor_sync(0xffffffffu, l1, o);
                cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
            }
            if (lane == 0) {
                float *pp = part + 2 * (((long long)u * CLUSTER + rank) * 8 + cw * 4 + wq);
                pp[0] = l1;
                pp[1] = cnt;
            }
#endif
#endif
#if TW_MODE == 0 && !TW_SPLIT
            if (u + ncl < U) /* the expanders may fill the buffer for our next unit */
                tw_bar_arrive(2);
#endif
        }
    }
#undef TW_UNIT_COORDS
#undef TW_ITEM
#undef TW_PASSES
    __syncwarp();
    if (CLUSTER > 1)
        tw_cluster_sync(); /* no CTA leaves while its peer may still signal its barriers */
}
]==]
