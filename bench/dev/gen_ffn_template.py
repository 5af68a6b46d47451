# gen_ffn_template.py — regenerates templates/ffn_fused.cu.lua from bench/dev/fused_kernels.cuh (the
# development copy): the template embeds the header verbatim plus extern "C" wrappers.
# Run from the repository root: python3 bench/dev/gen_ffn_template.py
import sys
src = open('bench/dev/fused_kernels.cuh').read()
assert '${' not in src and ']==]' not in src
head = r'''-- ffn_fused.cu.lua — fused TwELL FFN inference: gated (x + packed gate + Wu + Wd -> y) or
-- non-gated (packed h + Wd -> y), exact for overflowing row-tiles, deterministic, tensor cores.
-- Development copy and harness: bench/dev/fused_kernels.cuh, bench/dev/fused_dev.cu; numbers and
-- design reasoning: bench/dev/NOTES-fused.md. The CUDA below is that header verbatim.
--
-- Parameters: K (multiple of 64), N, T, C, dtype (see twellrt.h); gated (1 | 0, default 1);
-- tile config: CN (neurons per weight chunk, multiple of T and 64, default 768), GPWA / GPWB
-- (groups of 8 tokens per warp in phase A / B, default 8 / 4), DCAPA / DCAPB (list slots staged
-- in shared memory per chunk, defaults fill the 227 KB limit). Rejected (unsupported): K not a
-- multiple of 64, shared memory over 227 KB.
--
-- Algorithm. Tokens form groups of 8 (mma n-dimension), neurons form chunks of CN. A pre-pass
-- turns the packed buffer into, per (chunk, group), a list of active pairs (16-bit descriptor
-- row-in-chunk << 3 | token-in-group, and the 16-bit gate value), padded to a multiple of 16 (one
-- mma round); overflowing row-tiles are recomputed exactly first (g = round(relu(x . w_n)) on
-- tensor cores, batched per tile). Phase A (gated) computes u = x . Wu_n for every pair, split
-- over 64-column k-slices (CTA = GPWA*16*8 tokens x 64 columns; Wu chunk [CN x 64] double-buffered
-- in shared memory; x fragments in registers; partial u per slice). A reduce forms
-- h = g * sum(partial u) in fixed order. Phase B accumulates y = sum h Wd_n (CTA = GPWB*16*8
-- tokens x 64 columns, y in registers over all chunks; h split into two 16-bit mma terms so it
-- keeps ~16 mantissa bits). If the workspace cannot hold the pairs, a device flag makes every
-- tiled kernel return at once and the row kernel (exact, one warp per row) runs instead: no host
-- synchronisation is ever needed.
--
-- LAUNCH CONTRACT (all kernels extern "C"; M = rows this call; NG = ceil(M/8); NT = N/T;
-- NC = ceil(NT / (CN/T)); NL = NG*NC; NSL = K/64; PAIR_CAP, OVF_CAP = workspace capacities chosen
-- by the caller, e.g. PAIR_CAP = M*(expected nnz/row) + 16*NL, OVF_CAP = M*NT/8 + 256).
-- __device__ const unsigned twell_ffn_cfg[12] = {CN, GPWA, GPWB, DCAPA, DCAPB, SMEM_A, SMEM_B,
--   SMEM_OG, BW, NC, TPC, gated} (read with cuModuleGetGlobal; SMEM_* are dynamic shared bytes:
--   set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES on phase_a, phase_b and ovf_gate).
-- Workspace (device memory, 256-byte aligned pieces, any content on entry):
--   flag u32[4]; ovf_cnt u32[NT]; ovf_base u32[NT+1]; item_base u32[NT+1]; ovf_rows u32[NT*M];
--   ovf_slot u32[M*NT]; ovf_nnz u32[OVF_CAP]; ovf_g u16[OVF_CAP*T]; sizes u32[NL];
--   offsets u32[NL+1]; desc u16[PAIR_CAP+64]; gv u16[PAIR_CAP+64];
--   gated only: h f32[PAIR_CAP+64], partial f32[NSL*PAIR_CAP].
-- Sequence on one stream (wp = Wg gated, Wu non-gated; SMs = multiprocessor count):
--   1 memset ovf_cnt to 0 (NT words)
--   2 twell_ffn_ovf_detect grid min(ceil(M*NT/256), 16*SMs) x 256
--       (packed, M, ovf_cnt, ovf_rows, ovf_slot)
--   3 twell_ffn_ovf_scan   grid 1 x 256   (ovf_cnt, ovf_base, item_base, ovf_nnz, flag, OVF_CAP)
--   4 twell_ffn_ovf_gate   grid 2*SMs x 256, SMEM_OG
--       (x, wp, M, ovf_cnt, ovf_rows, ovf_base, item_base, ovf_g, ovf_nnz, flag)
--   5 twell_ffn_sizes      grid ceil(NL/8) x 256 (packed, M, ovf_slot, ovf_base, ovf_nnz, sizes, flag)
--   6 twell_ffn_scan       grid 1 x 1024  (sizes, M, offsets, flag, PAIR_CAP)
--   7 twell_ffn_build      grid ceil(NL/BW) x BW*32
--       (packed, M, ovf_slot, ovf_base, ovf_g, offsets, sizes, desc, gv, flag)
--   8 gated: twell_ffn_phase_a grid (ceil(NG/(16*GPWA)), NSL) x 512, SMEM_A
--       (x, wu, M, desc, offsets, sizes, partial, PAIR_CAP, flag)
--   9 gated: twell_ffn_reduce  grid 8*SMs x 256 (gv, partial, PAIR_CAP, offsets, M, h, flag)
--  10 twell_ffn_phase_b   grid (ceil(NG/(16*GPWB)), NSL) x 512, SMEM_B
--       (wd, M, desc, gv, h (NULL non-gated), offsets, sizes, y, flag)
--  11 twell_ffn_rows      grid min(ceil(M/8), 8*SMs) x 256
--       (x, packed, wp, wu, wd, y, M, flag, 1)   fallback: returns unless flag[0] != 0
--   flag[0] != 0 after the call means the fallback produced y (bit 0: overflowing row-tiles
--   over OVF_CAP, bit 1: pair slots over PAIR_CAP); flag[1] = pair slots needed (size the next
--   call's workspace from it, no synchronisation required now); flag[2] = overflowing row-tiles.
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
local CN = param("CN", 768)
local GPWA = param("GPWA", 8)
local GPWB = param("GPWB", 4)
check(math.type(CN) == "integer" and CN >= S.T and CN % S.T == 0 and CN % 64 == 0 and CN <= 1024,
    "CN=%s must be a multiple of T=%d and 64, at most 1024", tostring(CN), S.T)
check(GPWA == 4 or GPWA == 8, "GPWA=%s must be 4 or 8", tostring(GPWA))
check(GPWB == 2 or GPWB == 4, "GPWB=%s must be 2 or 4", tostring(GPWB))
local SMEM_MAX = 232448
local WBYTES = 2 * CN * 128
local VB = GATED == 1 and 6 or 4
local DCAPA = param("DCAPA", ((SMEM_MAX - WBYTES) // 4) // 16 * 16)
local DCAPB = param("DCAPB", ((SMEM_MAX - WBYTES) // (2 * VB)) // 16 * 16)
check(DCAPA % 16 == 0 and DCAPB % 16 == 0, "DCAPA, DCAPB must be multiples of 16")
local SMEM_A = WBYTES + 2 * DCAPA * 2
local SMEM_B = WBYTES + 2 * DCAPB * VB
local SMEM_OG = 2 * (S.T * 128 + 64 * 128)
if SMEM_A > SMEM_MAX or SMEM_B > SMEM_MAX then
    unsupported("CN=%d with DCAPA=%d / DCAPB=%d needs more than %d bytes of shared memory", CN,
        DCAPA, DCAPB, SMEM_MAX)
end
local DT = S.dtype == "bf16" and 0 or 1
local NT = S.N // S.T
local TPC = CN // S.T
local NC = (NT + TPC - 1) // TPC
local NSL = S.K // 64
local NI = (S.K + 255) // 256
local CELLW = 8 * CN // S.C + CN // 8 + 1
local BW = S.C == 2 and 2 or 4

cuda [==[
#define TW_KERNEL(bounds) __device__ __forceinline__ void
'''
mid = "]==]\n\ncuda [==[\n" 
tail = r'''
]==]

cuda [==[
#define TW_NG(M) (((M) + 7) / 8)
extern "C" __device__ const unsigned int twell_ffn_cfg[12] = {${CN}, ${GPWA}, ${GPWB}, ${DCAPA},
    ${DCAPB}, ${SMEM_A}, ${SMEM_B}, ${SMEM_OG}, ${BW}, ${NC}, ${TPC}, ${GATED}};

extern "C" __global__ void __launch_bounds__(256)
twell_ffn_ovf_detect(const unsigned int *packed, int M, unsigned int *ovf_cnt,
                     unsigned int *ovf_rows, unsigned int *ovf_slot) {
    tw_k_ovf_detect(packed, M, ${NT}, ${S.W}, ovf_cnt, ovf_rows, ovf_slot);
}
extern "C" __global__ void __launch_bounds__(256)
twell_ffn_ovf_scan(const unsigned int *ovf_cnt, unsigned int *ovf_base, unsigned int *item_base,
                   unsigned int *ovf_nnz, unsigned int *flag, unsigned int ovf_cap) {
    tw_k_ovf_scan(ovf_cnt, ${NT}, ovf_base, item_base, ovf_nnz, flag, ovf_cap);
}
extern "C" __global__ void __launch_bounds__(256)
twell_ffn_ovf_gate(const unsigned short *x, const unsigned short *wp, int M,
                   const unsigned int *ovf_cnt, const unsigned int *ovf_rows,
                   const unsigned int *ovf_base, const unsigned int *item_base,
                   unsigned short *ovf_g, unsigned int *ovf_nnz, const unsigned int *flag) {
    tw_k_ovf_gate<${DT}, ${S.T}>(x, wp, M, ${S.K}, ${NT}, ovf_cnt, ovf_rows, ovf_base, item_base,
                               ovf_g, ovf_nnz, flag);
}
extern "C" __global__ void __launch_bounds__(256)
twell_ffn_sizes(const unsigned int *packed, int M, const unsigned int *ovf_slot,
                const unsigned int *ovf_base, const unsigned int *ovf_nnz, unsigned int *sizes,
                const unsigned int *flag) {
    tw_k_sizes(packed, M, ${NT}, ${S.W}, ${NC}, ${TPC}, TW_NG(M), ovf_slot, ovf_base, ovf_nnz,
               sizes, flag);
}
extern "C" __global__ void __launch_bounds__(1024)
twell_ffn_scan(const unsigned int *sizes, int M, unsigned int *offsets, unsigned int *flag,
               unsigned int pair_cap) {
    tw_k_scan(sizes, TW_NG(M) * ${NC}, offsets, flag, pair_cap);
}
extern "C" __global__ void __launch_bounds__(${BW * 32})
twell_ffn_build(const unsigned int *packed, int M, const unsigned int *ovf_slot,
                const unsigned int *ovf_base, const unsigned short *ovf_g,
                const unsigned int *offsets, const unsigned int *sizes, unsigned short *desc,
                unsigned short *gv, const unsigned int *flag) {
    tw_k_build<${CELLW}, ${BW}>(packed, M, ${NT}, ${S.W}, ${S.T}, ${NC}, ${TPC}, TW_NG(M),
                               ovf_slot, ovf_base, ovf_g, offsets, sizes, desc, gv, flag);
}
extern "C" __global__ void __launch_bounds__(512, 1)
twell_ffn_phase_b(const unsigned short *wd, int M, const unsigned short *desc,
                  const unsigned short *gv, const float *h, const unsigned int *offsets,
                  const unsigned int *sizes, unsigned short *y, const unsigned int *flag) {
    tw_k_phase_b<${DT}, ${GATED}, ${CN}, ${GPWB}, ${DCAPB}>(wd, M, ${S.K}, ${S.N}, TW_NG(M), ${NC},
                                                          desc, gv, h, offsets, sizes, y, flag);
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
                  const unsigned short *desc, const unsigned int *offsets,
                  const unsigned int *sizes, float *partial, unsigned int pair_cap,
                  const unsigned int *flag) {
    tw_k_phase_a<${DT}, ${CN}, ${GPWA}, ${DCAPA}>(x, wu, M, ${S.K}, ${S.N}, TW_NG(M), ${NC}, desc,
                                                  offsets, sizes, partial, pair_cap, flag);
}
extern "C" __global__ void __launch_bounds__(256)
twell_ffn_reduce(const unsigned short *gv, const float *partial, unsigned int pair_cap,
                 const unsigned int *offsets, int M, float *h, const unsigned int *flag) {
    tw_k_reduce<${DT}>(gv, partial, pair_cap, ${NSL}, offsets + TW_NG(M) * ${NC}, h, flag);
}
]==]
end
'''
out = head + src + tail
open('templates/ffn_fused.cu.lua','w').write(out)
print(len(out.splitlines()), "lines")
