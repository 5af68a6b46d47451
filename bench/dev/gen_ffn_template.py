# gen_ffn_template.py — regenerates templates/ffn_fused.cu.lua from bench/dev/fused_kernels.cuh (the
# development copy): the template embeds the header verbatim plus extern "C" wrappers of the v5
# pipeline. Run from the repository root: python3 bench/dev/gen_ffn_template.py
src = open('bench/dev/fused_kernels.cuh').read()
src += open('bench/dev/fused_kernels_v6.cuh').read().split('#include "fused_kernels.cuh"', 1)[1]
assert '${' not in src and ']==]' not in src
head = r'''-- ffn_fused.cu.lua — fused TwELL FFN inference: gated (x + packed gate + Wu + Wd -> y) or
-- non-gated (packed h + Wd -> y), exact for overflowing row-tiles, deterministic, tensor cores.
-- Development copy and harness: bench/dev/fused_kernels.cuh, bench/dev/fused_dev.cu; numbers and
-- design reasoning: bench/dev/NOTES-fused.md. The CUDA below is fused_kernels.cuh + fused_kernels_v6.cuh verbatim (pipeline v6;
-- the older kernels in it are not instantiated except the row kernel).
--
-- Parameters: K (multiple of 64), N, T, C, dtype (see twellrt.h); gated (1 | 0, default 1);
-- tile config: CN (neurons per weight chunk, multiple of T and 64, default 512), GPWA / GPWB
-- (groups of 8 tokens per warp in phase A / B, 8 / 4), DCAPA / DCAPB (list slots staged in shared
-- memory per chunk, defaults fill the 227 KB limit). Rejected (unsupported): K not a multiple of
-- 64, shared memory over 227 KB.
--
-- Algorithm. Tokens form groups of 8 (mma n-dimension), neurons form chunks of CN. Row-tiles
-- whose count exceeds the slots ("overflowing") leave the sparse path: ovf_gu recomputes their g
-- exactly (round(relu(x . wp_n))) and u = x . wu_n on tensor cores, batched per tile, and stores
-- h = g u as 16-bit hi and lo halves; ovf_down sums h . Wd over each overflowing row's tiles into
-- ovf_y (fp32). Every other row-tile feeds, per (chunk, group), a list of active pairs (32-bit
-- descriptor row << 7 | key << 4 | token, 16-bit gate value), PADQ-padded (8; 16 for fp16 gated),
-- laid out so both phases read conflict-free 16-byte pieces as far as the classes allow.
-- Phase A (gated) computes u = x . Wu_n for every pair, split over 64-column k-slices (CTA =
-- GPWA*16*8 tokens x 64 columns; Wu chunk [CN x 64] double-buffered in shared memory; x
-- fragments in registers; partial u per slice). The reduce forms h = g * sum(partial u) in fixed
-- order as a bf16 (fp16: scaled per 16-slot round) hi|lo word. Phase B accumulates y = sum h Wd_n
-- (CTA = GPWB*16*8 tokens x 64 columns, y in registers over all chunks, A fragments paired with
-- prmt, two mmas for hi and lo), adds ovf_y for overflowing rows and stores y once. If the
-- workspace cannot hold what the data needs, a device flag makes every tiled kernel return at
-- once and the row kernel (exact, one warp per row) runs instead: no host synchronisation.
--
-- LAUNCH CONTRACT (all kernels extern "C"; M = rows this call; NG = ceil(M/8); NB = ceil(NG/8);
-- NT = N/T; NC = ceil(NT / (CN/T)); NL = NG*NC; NSL = K/64; PAIR_CAP, OVF_CAP, OROW_CAP = workspace
-- capacities chosen by the caller: pair slots, overflowing row-tiles, overflowing rows).
-- __device__ const unsigned twell_ffn_cfg[14] = {CN, GPWA, GPWB, DCAPA, DCAPB, SMEM_A, SMEM_B,
--   SMEM_GU, SMEM_DOWN, BW, NC, TPC, PADQ, gated} (read with cuModuleGetGlobal; SMEM_* are dynamic
--   shared bytes: set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES on phase_a, phase_b, ovf_gu
--   and ovf_down).
-- Workspace (device memory, 256-byte aligned pieces, any content on entry):
--   flag u32[4]; cnt u32[NT+1]; ovf_base u32[NT+1]; item_base u32[NT+1]; ovf_rows u32[NT*M];
--   ovf_slot u32[M*NT]; orow_idx u32[M]; orows u32[M]; sizes u32[NL]; offsets u32[NL+1];
--   bsum u32[NC*NB]; bbase u32[NC*NB];
--   ovf_hh u16[OVF_CAP*2T]; ovf_ex u32[OVF_CAP*T/64]; ovf_y f32[OROW_CAP*K];
--   desc u32[PAIR_CAP+64]; gv u16[PAIR_CAP+64];
--   gated only: hl u32[PAIR_CAP+64], rexp u32[PAIR_CAP/16+64], partial f32[NSL*PAIR_CAP].
-- Sequence on one stream (wp = Wg gated, Wu non-gated; SMs = multiprocessor count):
--   1 memset cnt to 0 (NT+1 words)
--   2 twell_ffn_prep      grid NB x 256
--       (packed, M, cnt, ovf_rows, ovf_slot, orow_idx, orows, sizes, bsum)
--   3 twell_ffn_scan      grid 1 x 1024
--       (bsum, M, bbase, cnt, ovf_base, item_base, flag, offsets, PAIR_CAP, OVF_CAP, OROW_CAP)
--   4 twell_ffn_build     grid ceil(NL/BW) x BW*32
--       (packed, M, bbase, sizes, offsets, desc, gv, flag)
--   5 twell_ffn_ovf_gu    grid 2*SMs x 256, SMEM_GU
--       (x, wp, wu (NULL non-gated), M, ovf_base, item_base, ovf_rows, ovf_hh, ovf_ex, flag)
--   6 twell_ffn_ovf_down  grid SMs x 256, SMEM_DOWN
--       (packed, wd, M, ovf_base, ovf_slot, orows, ovf_hh, ovf_ex, ovf_y, flag)
--   7 gated: twell_ffn_phase_a grid (ceil(NG/(16*GPWA)), NSL) x 512, SMEM_A
--       (x, wu, M, desc, offsets, sizes, partial, PAIR_CAP, flag)
--   8 gated: twell_ffn_reduce  grid 8*SMs x 256 (gv, partial, PAIR_CAP, offsets, M, hl, rexp, flag)
--   9 twell_ffn_phase_b   grid (ceil(NG/(16*GPWB)), NSL) x 512, SMEM_B
--       (wd, M, desc, gv, hl, rexp (both NULL non-gated), offsets, sizes, orow_idx, ovf_y, y, flag)
--  10 twell_ffn_rows      grid min(ceil(M/8), 8*SMs) x 256
--       (x, packed, wp, wu, wd, y, M, flag, 1)   fallback: returns unless flag[0] != 0
--   flag[0] != 0 after the call means the fallback produced y (bit 0: overflowing row-tiles over
--   OVF_CAP or overflowing rows over OROW_CAP, bit 1: pair slots over PAIR_CAP); flag[1] = pair
--   slots needed, flag[2] = overflowing row-tiles, flag[3] = overflowing rows: all exact whatever
--   the capacities (size the next call's workspace from them, no synchronisation required now).
--   twell_ffn_rows(..., 0) alone is the simple exact baseline (one warp per row).
-- Every kernel writes only its own outputs; y is written once (bf16/fp16, rounded once from
-- fp32). Results are bitwise deterministic (no floating-point atomics; list order and all sums
-- are fixed; integer atomics only assign slots whose consumers index by row and tile).

local common = import "twell_common"
local S = common.shape()
local GATED = param("gated", 1)
check(GATED == 0 or GATED == 1, "gated=%s must be 0 or 1", tostring(GATED))
if S.K % 64 ~= 0 then
    unsupported("K=%d: the fused kernels need a multiple of 64", S.K)
end
local CN = param("CN", 512)
local GPWA = param("GPWA", 8)
local GPWB = param("GPWB", 4)
check(math.type(CN) == "integer" and CN >= S.T and CN % S.T == 0 and CN % 64 == 0 and CN <= 1024,
    "CN=%s must be a multiple of T=%d and 64, at most 1024", tostring(CN), S.T)
check(GPWA == 8, "GPWA=%s must be 8", tostring(GPWA))
check(GPWB == 4, "GPWB=%s must be 4", tostring(GPWB))
local SMEM_MAX = 232448
local WBYTES = 2 * CN * 128
local VB = GATED == 1 and 4 or 2
local RE = 2048 -- (first, end) list offsets of the block per chunk, NC <= 256
local LA, LB = (2 * 16 * GPWA + 4) * 4, (2 * 16 * GPWB + 4) * 4 -- staged offsets and sizes
local DCAPA = param("DCAPA", ((SMEM_MAX - WBYTES - RE - 2 * LA) // 8) // 16 * 16)
local DCAPB = param("DCAPB", ((SMEM_MAX - WBYTES - RE - 2 * LB) // (2 * (4 + VB))) // 16 * 16)
check(DCAPA % 16 == 0 and DCAPB % 16 == 0, "DCAPA, DCAPB must be multiples of 16")
local SMEM_A = WBYTES + 2 * (DCAPA * 4 + LA) + RE
local SMEM_B = WBYTES + 2 * (DCAPB * (4 + VB) + LB) + RE
local SMEM_GU = 2 * 64 * 128 * (GATED == 1 and 3 or 2)
local SMEM_DOWN = 2 * (2 * 32 * S.T * 2 + S.T * 128)
if SMEM_A > SMEM_MAX or SMEM_B > SMEM_MAX then
    unsupported("CN=%d with DCAPA=%d / DCAPB=%d needs more than %d bytes of shared memory", CN,
        DCAPA, DCAPB, SMEM_MAX)
end
local DT = S.dtype == "bf16" and 0 or 1
local PADQ = (DT == 1 and GATED == 1) and 16 or 8
local NT = S.N // S.T
local TPC = CN // S.T
local NC = (NT + TPC - 1) // TPC
check(NC <= 256, "N / CN = %d chunks: at most 256", NC)
local NSL = S.K // 64
local NI = (S.K + 255) // 256
local BW = 4

cuda [==[
#define TW_KERNEL(bounds) __device__ __forceinline__ void
'''
tail = r'''
]==]

cuda [==[
#define TW_NG(M) (((M) + 7) / 8)
extern "C" __device__ const unsigned int twell_ffn_cfg[14] = {${CN}, ${GPWA}, ${GPWB}, ${DCAPA},
    ${DCAPB}, ${SMEM_A}, ${SMEM_B}, ${SMEM_GU}, ${SMEM_DOWN}, ${BW}, ${NC}, ${TPC}, ${PADQ},
    ${GATED}};

extern "C" __global__ void __launch_bounds__(256)
twell_ffn_prep(const unsigned int *packed, int M, unsigned int *cnt, unsigned int *ovf_rows,
               unsigned int *ovf_slot, unsigned int *orow_idx, unsigned int *orows,
               unsigned int *sizes, unsigned int *bsum) {
    tw_k_prep6<${PADQ}, ${NC}>(packed, M, ${NT}, ${S.W}, ${NC}, ${TPC}, TW_NG(M), cnt, ovf_rows,
                               ovf_slot, orow_idx, orows, sizes, bsum);
}
extern "C" __global__ void __launch_bounds__(1024)
twell_ffn_scan(const unsigned int *bsum, int M, unsigned int *bbase, const unsigned int *cnt,
               unsigned int *ovf_base, unsigned int *item_base, unsigned int *flag,
               unsigned int *offsets, unsigned int pair_cap, unsigned int ovf_cap,
               unsigned int orow_cap) {
    tw_k_scan6(bsum, ${NC} * ((TW_NG(M) + 7) / 8), bbase, cnt, ${NT}, ${S.T // 64}, ovf_base,
               item_base, flag, offsets + TW_NG(M) * ${NC}, pair_cap, ovf_cap, orow_cap);
}
extern "C" __global__ void __launch_bounds__(${BW * 32})
twell_ffn_build(const unsigned int *packed, int M, const unsigned int *bbase,
                const unsigned int *sizes, unsigned int *offsets, unsigned int *desc,
                unsigned short *gv, const unsigned int *flag) {
    tw_k_build6<${TPC}, ${BW}>(packed, M, ${NT}, ${S.W}, ${S.N}, ${CN}, ${NC}, ${TPC}, TW_NG(M),
                              bbase, sizes, offsets, desc, gv, flag);
}
extern "C" __global__ void __launch_bounds__(256)
twell_ffn_ovf_gu(const unsigned short *x, const unsigned short *wp, const unsigned short *wu,
                 int M, const unsigned int *ovf_base, const unsigned int *item_base,
                 const unsigned int *ovf_rows, unsigned short *ovf_hh, unsigned int *ovf_ex,
                 const unsigned int *flag) {
    tw_k_ovf_gu<${DT}, ${GATED}, ${S.T}>(x, wp, wu, M, ${S.K}, ${NT}, ovf_base, item_base,
                                       ovf_rows, ovf_hh, ovf_ex, flag);
}
extern "C" __global__ void __launch_bounds__(256)
twell_ffn_ovf_down(const unsigned int *packed, const unsigned short *wd, int M,
                   const unsigned int *ovf_base, const unsigned int *ovf_slot,
                   const unsigned int *orows, const unsigned short *ovf_hh,
                   const unsigned int *ovf_ex, float *ovf_y, const unsigned int *flag) {
    tw_k_ovf_down<${DT}, ${S.T}>(packed, wd, M, ${S.K}, ${NT}, ${S.W}, ovf_base, ovf_slot, orows,
                                ovf_hh, ovf_ex, ovf_y, flag);
}
extern "C" __global__ void __launch_bounds__(512, 1)
twell_ffn_phase_b(const unsigned short *wd, int M, const unsigned int *desc,
                  const unsigned short *gv, const unsigned int *hl, const unsigned int *rexp,
                  const unsigned int *offsets, const unsigned int *sizes,
                  const unsigned int *orow_idx, const float *ovf_y, unsigned short *y,
                  const unsigned int *flag) {
    tw_k_phase_b6<${DT}, ${GATED}, ${CN}, ${GPWB}, ${DCAPB}, ${PADQ}>(
        wd, M, ${S.K}, ${S.N}, TW_NG(M), ${NC}, desc, gv, hl, rexp, offsets, sizes, orow_idx,
        ovf_y, y, flag);
}
extern "C" __global__ void __launch_bounds__(256)
twell_ffn_rows(const unsigned short *x, const unsigned int *packed, const unsigned short *wp,
               const unsigned short *wu, const unsigned short *wd, unsigned short *y, int M,
               const unsigned int *flag, int fallback_only) {
    tw_k_rows<${DT}, ${GATED}, ${NI}>(x, packed, wp, wu, wd, y, M, ${S.K}, ${S.N}, ${S.T}, ${S.C},
                                     flag, fallback_only);
}
]==]

if GATED == 1 then
    cuda [==[
extern "C" __global__ void __launch_bounds__(512, 1)
twell_ffn_phase_a(const unsigned short *x, const unsigned short *wu, int M,
                  const unsigned int *desc, const unsigned int *offsets,
                  const unsigned int *sizes, float *partial, unsigned int pair_cap,
                  const unsigned int *flag) {
    tw_k_phase_a6<${DT}, ${CN}, ${GPWA}, ${DCAPA}, ${PADQ}>(x, wu, M, ${S.K}, ${S.N}, TW_NG(M),
                                                         ${NC}, desc, offsets, sizes, partial,
                                                         pair_cap, flag);
}
extern "C" __global__ void __launch_bounds__(256)
twell_ffn_reduce(const unsigned short *gv, const float *partial, unsigned int pair_cap,
                 const unsigned int *offsets, int M, unsigned int *hl, unsigned int *rexp,
                 const unsigned int *flag) {
    tw_k_reduce5<${DT}>(gv, partial, pair_cap, ${NSL}, offsets + TW_NG(M) * ${NC}, hl, rexp, flag);
}
]==]
end
'''
out = head + src + tail
open('templates/ffn_fused.cu.lua', 'w').write(out)
print(len(out.splitlines()), "lines")
