-- ffn_fused.cu.lua — fused TwELL FFN inference: gated (x + packed gate + Wu + Wd -> y) or
-- non-gated (packed h + Wd -> y), exact for overflowing row-tiles, deterministic, tensor cores.
-- This file is the only source of these kernels (edit the CUDA here; `twell render ffn_fused ...`
-- prints what NVRTC compiles). Numbers and design reasoning: bench/dev/NOTES-fused.md; earlier
-- versions (v1-v5) and their standalone harness are in the git history (bench/dev/, a4e3fb8).
--
-- Parameters: K (multiple of 64), N, T, C, dtype (see twellrt.h); gated (1 | 0, default 1);
-- tile config: CN (neurons per weight chunk, multiple of T and 64, default 512), GPWA / GPWB
-- (units of 8 tokens per warp in phase A / B, 8 / 4), GT (tokens per group: 8 | 16, default
-- 8; 16: each gathered weight fragment feeds two n8 mmas, GPWA / GPWB even), NWA / NWB (warps per block in phase A / B,
-- even, 16 / 16), STAGES (weight chunks in flight in phase A and B: a ring of STAGES buffers,
-- 2..4, default 2), PF (1: shared-memory list loads one step ahead; default 1), IL (1: phase B,
-- gated bf16, runs two groups' rounds side by side; default 0), DCAPA / DCAPB
-- (list slots staged in shared memory per chunk, defaults fill the 227 KB limit), XV (phase A/B
-- instruction-diet variant bits, default 75 = 1 + 2 + 8 + 64; see below). Rejected
-- (unsupported): K not a multiple of 64, shared memory over 227 KB.
--
-- Algorithm. Tokens form groups of GT (8 or 16: one or two mma n8 tiles), neurons form chunks of CN. Row-tiles
-- whose count exceeds the slots ("overflowing") leave the sparse path: ovf_gu recomputes their g
-- exactly (round(relu(x . wp_n))) and u = x . wu_n on tensor cores, batched per tile, and stores
-- h = g u as 16-bit hi and lo halves; ovf_down sums h . Wd over each overflowing row's tiles into
-- ovf_y (fp32). Every other row-tile feeds, per (chunk, group), a list of active pairs (32-bit
-- descriptor row << 7 | key << 4 | token, 16-bit gate value), PADQ-padded (8; 16 for fp16 gated),
-- laid out so both phases read conflict-free 16-byte pieces as far as the classes allow.
-- Phase A (gated) computes u = x . Wu_n for every pair, split over 64-column k-slices (CTA =
-- GPWA*NWA*8 tokens x 64 columns; Wu chunk [CN x 64] double-buffered in shared memory; x
-- fragments in registers; partial u per slice). The reduce forms h = g * sum(partial u) in fixed
-- order as a bf16 (fp16: scaled per 16-slot round) hi|lo word. Phase B accumulates y = sum h Wd_n
-- (CTA = GPWB*NWB*8 tokens x 64 columns, y in registers over all chunks, A fragments paired with
-- prmt, two mmas for hi and lo), adds ovf_y for overflowing rows and stores y once. If the
-- workspace cannot hold what the data needs, a device flag makes every tiled kernel return at
-- once and the row kernel (exact, one warp per row) runs instead: no host synchronisation.
--
-- LAUNCH CONTRACT (all kernels extern "C"; M = rows this call; NG = ceil(M/GT); NB = ceil(NG/8);
-- NT = N/T; NC = ceil(NT / (CN/T)); NL = NG*NC; NSL = K/64; PAIR_CAP, OVF_CAP, OROW_CAP = workspace
-- capacities chosen by the caller: pair slots, overflowing row-tiles, overflowing rows).
-- __device__ const unsigned twell_ffn_cfg[23] = {CN, GPWA, GPWB, DCAPA, DCAPB, SMEM_A, SMEM_B,
--   SMEM_GU, SMEM_DOWN, BW, NC, TPC, PADQ, gated, STAGES, NWA, NWB, PF, IL, GT, GU_BPS, GU_THR,
--   DOWN_BPS} (GU_BPS, DOWN_BPS: ovf_gu / ovf_down CTAs per SM in their grids, GU_THR: ovf_gu's
--   threads per CTA; 2, 256, 3, or with XV & 64 3, 128, 3) (read with
--   cuModuleGetGlobal; SMEM_* are dynamic shared bytes: set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES on phase_a, phase_b, ovf_gu
--   and ovf_down).
-- Workspace (device memory, 256-byte aligned pieces, any content on entry):
--   flag u32[4]; cnt u32[NT+4] (must be ZERO before the first prep on it: the scan zeroes it
--   again for the next call, see step 1); ovf_base u32[NT+1]; item_base u32[NT+1]; ovf_rows u32[NT*M];
--   ovf_slot u32[M*NT]; orow_idx u32[M]; orows u32[M]; sizes u32[NL]; offsets u32[NL+1];
--   bsum u32[NC*NB]; bbase u32[NC*NB];
--   ovf_hh u16[OVF_CAP*2T]; ovf_ex u32[OVF_CAP*T/64]; ovf_y f32[4][OROW_CAP*K] (TW_OVP = 4 parts,
--   part p at p*YS, YS = OROW_CAP*K);
--   desc u32[PAIR_CAP+64]; gv u16[PAIR_CAP+64];
--   gated only: hl u32[PAIR_CAP+64] (XV & 1: slot pairs' hi halves, then lo halves),
--   rexp u32[PAIR_CAP/16+64], partial f32[NSL*PAIR_CAP].
-- Sequence on one stream (wp = Wg gated, Wu non-gated; SMs = multiprocessor count):
--   1 only when cnt is not known to be zero (new workspace, or an earlier sequence stopped
--     between its prep and its scan): memset cnt to 0 (NT+4 words). A memset in the stream also
--     ends the programmatic overlap below, so the steady state has none.
--   2 twell_ffn_prep      grid NB x 256
--       (packed, M, cnt, ovf_rows, ovf_slot, orow_idx, orows, sizes, bsum)
--       also sums the count words of all M x NT row-tiles (the exact active values) into the
--       u64 at cnt + ((NT + 2) & ~1)
--   3 twell_ffn_scan      grid 1 x 1024
--       (bsum, M, bbase, cnt, ovf_base, item_base, flag, offsets, PAIR_CAP, OVF_CAP, OROW_CAP,
--        stats (u64[2] or NULL), stats_add (int), hflag (u32[4] or NULL))
--       last reader of cnt: zeroes cnt[0 .. NT+4) before it exits. stats != NULL: stats[0] =
--       (stats_add ? stats[0] : 0) + the active values of these M rows, stats[1] = 0 (the
--       AUTO path's counts, so it needs no counting kernel of its own). hflag != NULL: a copy of
--       flag[0..3] (e.g. mapped page-locked host memory: no copy to enqueue after the call).
--   4 twell_ffn_build     grid ceil(NL/BW) x BW*32
--       (packed, M, bbase, sizes, offsets, desc, gv, flag)
--   5 twell_ffn_ovf_gu    grid GU_BPS*SMs x GU_THR, SMEM_GU
--       (x, wp, wu (NULL non-gated), M, ovf_base, item_base, ovf_rows, ovf_hh, ovf_ex, flag)
--   6 twell_ffn_ovf_down  grid DOWN_BPS*SMs x 256, SMEM_DOWN
--       (packed, wd, M, ovf_base, ovf_slot, orows, ovf_hh, ovf_ex, ovf_y, YS (long long), flag)
--   7 gated: twell_ffn_phase_a grid (ceil(NG/(NWA*GPWA*8/GT)), NSL) x 32*NWA, SMEM_A
--       (x, wu, M, desc, offsets, sizes, partial, PAIR_CAP, flag)
--   8 gated: twell_ffn_reduce  grid 8*SMs x 256 (gv, partial, PAIR_CAP, offsets, M, hl, rexp, flag)
--   9 twell_ffn_phase_b   grid (ceil(NG/(NWB*GPWB*8/GT)), NSL) x 32*NWB, SMEM_B
--       (wd, M, desc, gv, hl, rexp (both NULL non-gated), offsets, sizes, orow_idx, ovf_y, YS, y,
--        flag)
--  10 twell_ffn_rows      grid min(ceil(M/8), 8*SMs) x 256
--       (x, packed, wp, wu, wd, y, M, flag, 1)   fallback: returns unless flag[0] != 0
--   flag[0] != 0 after the call means the fallback produced y (bit 0: overflowing row-tiles over
--   OVF_CAP or overflowing rows over OROW_CAP, bit 1: pair slots over PAIR_CAP); flag[1] = pair
--   slots needed, flag[2] = overflowing row-tiles, flag[3] = overflowing rows: all exact whatever
--   the capacities (size the next call's workspace from them, no synchronisation required now).
--   twell_ffn_rows(..., 0) alone is the simple exact baseline (one warp per row).
-- PROGRAMMATIC DEPENDENT LAUNCH. The launcher may start every kernel above (and the gate-pack
-- before prep) with programmatic stream serialization (cuLaunchKernelEx attribute; TWELL_PDL=0
-- or a GPU before sm_90 turns it off): the kernel's blocks may then be scheduled while the
-- previous kernel of the stream still runs. The rule every kernel launched so must keep:
--   (a) every thread executes griddepcontrol.wait (tw_pdl_enter) before its first global read of
--       anything an earlier kernel wrote (RAW) and before its first global write to anything an
--       earlier kernel may still read or write (WAR, WAW: e.g. prep's writes to ovf_rows while
--       the previous call's ovf_gu reads them). wait returns once the previous grid has
--       COMPLETED and its memory is visible.
--   (b) on EVERY path, early exits included (flag[0] set, no work, idle warps): wait only orders
--       this grid after the previous one; the kernel after us orders itself after us only. The
--       chain is transitive because each grid completes after the one before it, so a block that
--       returned before its wait could let this grid "complete" early and release the next
--       kernel while the previous one is still writing. Here: tw_pdl_enter is the first
--       statement of every extern "C" kernel, before any branch.
--   (c) griddepcontrol.launch_dependents (also in tw_pdl_enter, before the wait) only lets the
--       next grid be scheduled early (its blocks then sit in their own wait, hiding its launch
--       latency, e.g. the empty ovf_gu / ovf_down / rows kernels are resident before their
--       predecessor ends). It publishes nothing: visibility comes only from (a). The next grid
--       is scheduled after every block of this one has issued it or exited, so its waiting
--       blocks never hold resources a block of this grid still needs (no deadlock).
--   (d) without the attribute both instructions are no-ops. Memsets, copies and event records
--       between kernels are ordered as usual (and end the overlap).
--   (e) an early trigger lets the next grid's blocks take the first SMs that free up: harmless
--       when its blocks are spread by their own limits (phase A/B one per SM, reduce and rows 8,
--       ovf_gu GU_BPS, ovf_down DOWN_BPS by shared memory) or the grid is many waves (build),
--       harmful for a one-wave memory-bound grid that fits on a few SMs: prep (NB blocks, up to
--       8 per SM). So the kernel before prep (the gate-pack) does not trigger early: prep then
--       starts when every gate-pack CTA has exited, spread over the whole GPU (measured:
--       triggering at the gate-pack's start cost 8-18 us end to end at M 4096-16384). The rows
--       kernel before the next chunk's prep (M > 65536) does trigger early; its blocks fill
--       every SM 8 deep and, without the fallback, exit together, so that prep spreads too.
-- Every kernel writes only its own outputs; y is written once (bf16/fp16, rounded once from
-- fp32). Results are bitwise deterministic (no floating-point atomics; list order and all sums
-- are fixed; integer atomics only assign slots whose consumers index by row and tile, or sum
-- integers: prep's total of active values).

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
local NWA = param("NWA", 16)
local NWB = param("NWB", 16)
local PF = param("PF", 1)
local IL = param("IL", 0)
check(IL == 0 or IL == 1, "IL=%s must be 0 or 1", tostring(IL))
check(PF == 0 or PF == 1, "PF=%s must be 0 or 1", tostring(PF))
check(math.type(CN) == "integer" and CN >= S.T and CN % S.T == 0 and CN % 64 == 0 and CN <= 1024,
    "CN=%s must be a multiple of T=%d and 64, at most 1024", tostring(CN), S.T)
for _, v in ipairs({{"GPWA", GPWA, NWA}, {"GPWB", GPWB, NWB}}) do
    check(math.type(v[2]) == "integer" and v[2] >= 1 and v[2] <= 8, "%s=%s must be 1..8", v[1],
        tostring(v[2]))
    check(math.type(v[3]) == "integer" and v[3] >= 4 and v[3] <= 32 and v[3] % 2 == 0,
        "warps per block %s for %s=%d: even, 4..32", tostring(v[3]), v[1], v[2])
end
local GT = param("GT", 8)
-- XV: instruction-diet variant bits (bench/dev/NOTES-fused.md, session 3): 1 phase B builds its B
-- operand from byte masks of the descriptors' token columns and the reduce stores h paired (hl
-- word 2i = hi(2i) | hi(2i+1) << 16, word 2i+1 = lo(2i) | lo(2i+1) << 16); 2 phase A stores with
-- one 32-bit offset per round and the predicate computed in one step; 4 phase A runs one mma
-- chain per round (no per-round adds of two chains); 8 both phases prefetch the next round's
-- descriptors without a bounds select (the read stays inside the staging buffer); 16 both phases
-- start chunk 0's weight copies before the list tables and x loads, and phase B loads every
-- row's overflow index at once before storing y; 64 the overflow kernels' larger warp tiles
-- (tw_k_ovf_gu2: CTA of 4 warps, each 32 rows x 32 columns of g and u, 3 stages, 3 CTAs per SM;
-- tw_k_ovf_down2: CTA item of 32 rows x 128 output columns (64 when K % 128 != 0), 8 warps of
-- 16 rows x 32 columns, 64-neuron steps): the same mma sequence per output element as the
-- kernels without bit 64, so the same bits (bit 32 has no meaning).
local XV = param("XV", 75)
check(math.type(XV) == "integer" and XV >= 0 and XV <= 127, "XV=%s must be 0..127", tostring(XV))
local OV2 = (XV & 64) ~= 0
check(GT == 8 or GT == 16, "GT=%s must be 8 or 16", tostring(GT))
if GT == 16 then
    check(GPWA % 2 == 0 and GPWB % 2 == 0, "GT=16 needs even GPWA, GPWB (8-token units)")
    check(IL == 0, "IL=1 needs GT=8")
end
-- groups of GT tokens per warp (GPWA / GPWB count units of 8 tokens)
local GGA, GGB = GPWA * 8 // GT, GPWB * 8 // GT
local STAGES = param("STAGES", 2)
check(STAGES == 2 or STAGES == 3 or STAGES == 4, "STAGES=%s must be 2, 3 or 4", tostring(STAGES))
local SMEM_MAX = 232448
local WBYTES = STAGES * CN * 128
local VB = GATED == 1 and 4 or 2
local RE = 2048 -- (first, end) list offsets of the block per chunk, NC <= 256
local LA, LB = (2 * NWA * GPWA + 4) * 4, (2 * NWB * GPWB + 4) * 4 -- staged offsets and sizes
local DCAPA = param("DCAPA", ((SMEM_MAX - WBYTES - RE - STAGES * LA) // (4 * STAGES)) // 16 * 16)
local DCAPB = param("DCAPB",
    ((SMEM_MAX - WBYTES - RE - STAGES * LB) // (STAGES * (4 + VB))) // 16 * 16)
check(DCAPA % 16 == 0 and DCAPB % 16 == 0 and DCAPA >= 16 and DCAPB >= 16,
    "DCAPA, DCAPB must be positive multiples of 16")
local SMEM_A = WBYTES + STAGES * (DCAPA * 4 + LA) + RE
local SMEM_B = WBYTES + STAGES * (DCAPB * (4 + VB) + LB) + RE
local GU_ST = OV2 and 3 or 4 -- ovf_gu's stages (TW_GU_STAGES / TW_GU2_STAGES)
local SMEM_GU = GU_ST * 64 * 128 * (GATED == 1 and 3 or 2)
local SUBD = OV2 and 64 or math.min(S.T, 128) -- ovf_down's step (neurons)
local DCW = (OV2 and S.K % 128 == 0) and 128 or 64 -- ovf_down's output columns per CTA item
local SMEM_DOWN = 2 * (2 * 32 * SUBD * 2 + SUBD * DCW * 2)
-- ovf_gu / ovf_down grids (CTAs per SM, as shared memory and registers allow) and ovf_gu's CTA
local GU_BPS, GU_THR, DOWN_BPS = OV2 and 3 or 2, OV2 and 128 or 256, 3
-- their __launch_bounds__ (XV & 64 caps registers for those CTAs per SM; the others as before)
local GU_LB = OV2 and "128, 3" or "256"
local DOWN_LB = OV2 and "256, 3" or "256"
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
// Kernel bodies are device functions; the extern "C" wrappers at the end are the kernels.
#define TW_XV ${XV} /* instruction-diet variant bits (see XV above) */
#define TW_KERNEL(bounds) __device__ __forceinline__ void
typedef unsigned int tw_u32;
typedef unsigned short tw_u16;
typedef unsigned char tw_u8;
typedef unsigned long long tw_u64;

#define TW_FULL 0xffffffffu
#define TW_NONE 0xffffffffu

// ---------------------------------------------------------------------------------------------
// List layout (pure index arithmetic)
// A list = the active pairs of one (chunk, group of 8 tokens), PADQ-padded (8, or 16 for fp16
// gated). Slot descriptor (32 bits): row in chunk << 7 | (row & 7) << 4 | token column; the
// chunk row r sits in shared memory at r * 128 with 16-byte piece p at p ^ (r & 7), so
// (desc ^ p << 4) & ~15 is the byte offset of logical piece p. Bank rules (a quarter-warp phase of a
// 16-byte load is one wavefront when its 8 pieces hit 8 bank groups):
//   phase A reads pieces t4 and t4 + 4 of the rows in slots (2i, 2i + 1): conflict-free iff the
//   rows differ in bit 2; phase B reads pieces pi(g) of the rows in slots {j, 4+j, 8+j, 12+j} of a
//   round: conflict-free iff their (row & 3) classes are distinct.
// Entries are sorted by class (row & 3), bit 2 alternating inside a class run, and dealt into
// 4-sets: sorted index si -> set si % S4, position si / S4 (S4 = size / 4). A set with no class
// run longer than S4 is rainbow; consecutive sorted indices (a phase-A pair) differ in bit 2
// while both bit values last. Pads (gate value 0) take the classes a set lacks.
// ---------------------------------------------------------------------------------------------
#define TW_HD __device__ __forceinline__
// Slot of sorted index si in a list of `size` slots (a multiple of 8): full rounds (16 slots,
// sets 4r..4r+3) place set s, position q at 16 (s / 4) + 4 q + s % 4; a trailing half round (8
// slots, sets 4R and 4R + 1) at 16 R + 2 q + (s - 4 R).
TW_HD tw_u32 tw_slot_of(tw_u32 si, tw_u32 size) {
    const tw_u32 S4 = size >> 2, R = size >> 4, s = si % S4, q = si / S4;
    return s < 4u * R ? 16u * (s >> 2) + 4u * q + (s & 3u) : 16u * R + 2u * q + (s - 4u * R);
}
// Position inside its class run of the i-th entry with bit-2 value b (mc = min(zeros, ones)):
// alternating 0 1 0 1 ... while both last, then the rest of the larger side.
TW_HD tw_u32 tw_class_pos(tw_u32 i, tw_u32 b, tw_u32 mc) { return i < mc ? 2u * i + b : mc + i; }
TW_HD tw_u32 tw_desc(tw_u32 row, tw_u32 tok) { return (row << 7) | ((row & 7u) << 4) | tok; }
// Sort bucket of a chunk row: class (row & 3) major, bit 2 minor.
TW_HD tw_u32 tw_bucket(tw_u32 row) { return ((row & 3u) << 1) | ((row >> 2) & 1u); }
// Phase B: logical 16-byte piece (8 output columns) read by lanes of group id g: the two g of a
// quarter-warp differ in bit 2 only.
TW_HD tw_u32 tw_pib(tw_u32 g) { return (g >> 1) | ((g & 1u) << 2); }
// Power-of-two scale for fp16 hi/lo splitting: for a block whose largest |h| has biased exponent
// ex (clamped to [20, 250]), h * 2^(141 - ex) < 2^15 and the result times 2^(ex - 141) is exact.
TW_HD tw_u32 tw_scale_ex(tw_u32 amax_bits) {
    tw_u32 ex = (amax_bits >> 23) & 0xffu;
    ex = (amax_bits & 0x7fffffffu) == 0u ? 127u : ex;
    return ex < 20u ? 20u : ex > 250u ? 250u : ex;
}
#define TW_KW 64 /* k columns per slice (phase A/B CTAs) */

// ---------------------------------------------------------------------------------------------
// 16-bit helpers (DT 0 = bf16, 1 = fp16)
// ---------------------------------------------------------------------------------------------
template <int DT> __device__ __forceinline__ float tw_h2f(tw_u32 h) {
    if constexpr (DT == 0) {
        return __uint_as_float((h & 0xffffu) << 16);
    } else {
        float f;
        asm("{.reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t;}" : "=f"(f) : "h"((tw_u16)h));
        return f;
    }
}
template <int DT> __device__ __forceinline__ void tw_h2f2(tw_u32 w, float &lo, float &hi) {
    if constexpr (DT == 0) {
        lo = __uint_as_float(w << 16);
        hi = __uint_as_float(w & 0xffff0000u);
    } else {
        asm("{.reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b;}"
            : "=f"(lo), "=f"(hi)
            : "r"(w));
    }
}
template <int DT> __device__ __forceinline__ tw_u16 tw_f2h(float f) {
    tw_u16 r;
    if constexpr (DT == 0)
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    else
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}
// lo goes to bits 15..0, hi to bits 31..16 (round to nearest even).
template <int DT> __device__ __forceinline__ tw_u32 tw_pack2(float lo, float hi) {
    tw_u32 r;
    if constexpr (DT == 0)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// relu then round: the packed value convention (active iff the result is positive).
template <int DT> __device__ __forceinline__ tw_u32 tw_relu_round(float v) {
    return v > 0.0f ? (tw_u32)tw_f2h<DT>(v) : 0u;
}

__device__ __forceinline__ tw_u32 tw_smem_addr(const void *p) {
    tw_u32 r;
    asm("{.reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t;}" : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void tw_cp16(tw_u32 dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void tw_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void tw_cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ uint4 tw_lds128(tw_u32 a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
__device__ __forceinline__ void tw_stgp(float *ptr, float v, tw_u32 p) {
    asm volatile("{.reg .pred q; setp.ne.u32 q, %2, 0; @q st.global.f32 [%0], %1;}" ::"l"(ptr), "f"(v),
                 "r"(p)
                 : "memory");
}
// Stores v at ptr iff z == 0.
__device__ __forceinline__ void tw_stgz(float *ptr, float v, tw_u32 z) {
    asm volatile("{.reg .pred q; setp.eq.u32 q, %2, 0; @q st.global.f32 [%0], %1;}" ::"l"(ptr), "f"(v),
                 "r"(z)
                 : "memory");
}
__device__ __forceinline__ tw_u32 tw_lds32(tw_u32 a) {
    tw_u32 v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ void tw_ldsm4(tw_u32 (&r)[4], tw_u32 a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void tw_ldsm4t(tw_u32 (&r)[4], tw_u32 a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
// d += A(16x16, row) * B(16x8, col), fp32 accumulate.
template <int DT>
__device__ __forceinline__ void tw_mma(float (&d)[4], const tw_u32 (&a)[4], tw_u32 b0, tw_u32 b1) {
    if constexpr (DT == 0)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float tw_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(TW_FULL, v, o);
    return v;
}

// Loads rows [c*CN, c*CN + rows) x columns [k0, k0+64) of w into a chunk buffer: 128-byte rows,
// 16-byte piece q of row r stored at piece q ^ (r & 7).
// Thread i copies piece q = i % 8 of rows i / 8 + RS j (RS = NTHR / 8, a multiple of 8, so the
// swizzle term r & 7 is the same for all of a thread's rows): one add per copy.
template <int CN, int NTHR>
__device__ __forceinline__ void tw_load_chunk(tw_u32 sdst, const tw_u16 *__restrict__ w, int c,
                                              int N, int K, int k0) {
    constexpr int RS = NTHR / 8;
    static_assert(NTHR % 64 == 0, "tw_load_chunk: NTHR must be a multiple of 64");
    const int rows = min(CN, N - c * CN), q = (int)threadIdx.x & 7, r0 = (int)threadIdx.x >> 3;
    const tw_u32 d = sdst + r0 * 128 + ((q ^ (r0 & 7)) << 4);
    const tw_u16 *src = w + ((long long)c * CN + r0) * K + k0 + 8 * q;
#pragma unroll
    for (int it = 0; it < (CN + RS - 1) / RS; it++)
        if (r0 + it * RS < rows)
            tw_cp16(d + it * RS * 128, src + (long long)it * RS * K);
}
// Copies bytes [0, n16*16) of src to shared memory (cp.async, 16-byte pieces).
template <int NTHR>
__device__ __forceinline__ void tw_load_bytes(tw_u32 sdst, const void *src, tw_u32 n16) {
    const char *p = (const char *)src;
    for (tw_u32 i = threadIdx.x; i < n16; i += NTHR)
        tw_cp16(sdst + 16 * i, p + 16ull * i);
}

// ---------------------------------------------------------------------------------------------
// Row kernel (the exact fallback and simple baseline): one warp per row. Lane l holds x[k] for k = 256 i + 8 l .. +8 (NI = ceil(K/256) pieces).
// ---------------------------------------------------------------------------------------------
template <int DT, int NI>
__device__ __forceinline__ void tw_dot2(const uint4 (&xr)[NI], const tw_u16 *w0, const tw_u16 *w1,
                                        int K, int lane, float &s0, float &s1) {
    s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int k = 256 * i + 8 * lane;
        if (k < K) {
            const uint4 a = *(const uint4 *)(w0 + k), b = *(const uint4 *)(w1 + k);
            const tw_u32 xa[4] = {xr[i].x, xr[i].y, xr[i].z, xr[i].w};
            const tw_u32 aa[4] = {a.x, a.y, a.z, a.w}, bb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float xl, xh, al, ah, bl, bh;
                tw_h2f2<DT>(xa[q], xl, xh);
                tw_h2f2<DT>(aa[q], al, ah);
                tw_h2f2<DT>(bb[q], bl, bh);
                s0 = fmaf(xl, al, s0);
                s0 = fmaf(xh, ah, s0);
                s1 = fmaf(xl, bl, s1);
                s1 = fmaf(xh, bh, s1);
            }
        }
    }
    s0 = tw_warp_sum(s0);
    s1 = tw_warp_sum(s1);
}

template <int DT, int GATED, int NI>
__device__ __forceinline__ void tw_rows_entry2(tw_u32 w0, tw_u32 w1, const uint4 (&xr)[NI],
                                               const tw_u16 *__restrict__ wu,
                                               const tw_u16 *__restrict__ wd, int K, int lane,
                                               float (&ya)[NI][8]) {
    const tw_u32 n0 = w0 & 0xffffu, n1 = w1 & 0xffffu;
    float h0 = tw_h2f<DT>(w0 >> 16), h1 = tw_h2f<DT>(w1 >> 16);
    if constexpr (GATED) {
        float u0, u1;
        tw_dot2<DT, NI>(xr, wu + (long long)n0 * K, wu + (long long)n1 * K, K, lane, u0, u1);
        h0 *= u0;
        h1 *= u1;
    }
    const tw_u16 *d0 = wd + (long long)n0 * K, *d1 = wd + (long long)n1 * K;
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int k = 256 * i + 8 * lane;
        if (k < K) {
            const uint4 a = *(const uint4 *)(d0 + k), b = *(const uint4 *)(d1 + k);
            const tw_u32 aa[4] = {a.x, a.y, a.z, a.w}, bb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float al, ah, bl, bh;
                tw_h2f2<DT>(aa[q], al, ah);
                tw_h2f2<DT>(bb[q], bl, bh);
                ya[i][2 * q] = fmaf(h1, bl, fmaf(h0, al, ya[i][2 * q]));
                ya[i][2 * q + 1] = fmaf(h1, bh, fmaf(h0, ah, ya[i][2 * q + 1]));
            }
        }
    }
}

// wp = the packing weight (Wg gated, Wu non-gated) for overflowing row-tiles.
// fallback_only: run only when flag[0] != 0 (the tiled path could not hold the pairs).
template <int DT, int GATED, int NI>
TW_KERNEL((256))
    tw_k_rows(const tw_u16 *__restrict__ x, const tw_u32 *__restrict__ packed,
              const tw_u16 *__restrict__ wp, const tw_u16 *__restrict__ wu,
              const tw_u16 *__restrict__ wd, tw_u16 *__restrict__ y, int M, int K, int N, int T,
              int C, const tw_u32 *__restrict__ flag, int fallback_only) {
    if (fallback_only && flag[0] == 0)
        return;
    const int lane = threadIdx.x & 31;
    const int W = T / C, NT = N / T;
    const tw_u32 S = (tw_u32)(W - 1);
    const long long RW = N / C;
    const long long nw = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long m = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5; m < M; m += nw) {
        uint4 xr[NI];
        float ya[NI][8];
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int k = 256 * i + 8 * lane;
            xr[i] = k < K ? *(const uint4 *)(x + m * K + k) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int q = 0; q < 8; q++)
                ya[i][q] = 0.0f;
        }
        const tw_u32 *prow = packed + m * RW;
        for (int t = 0; t < NT; t++) {
            const tw_u32 cnt = prow[t * W];
            if (cnt <= S) {
                for (tw_u32 j0 = 0; j0 < cnt; j0 += 32) {
                    const tw_u32 word = j0 + lane < cnt ? prow[t * W + 1 + j0 + lane] : 0u;
                    const int nb = (int)min(32u, cnt - j0);
                    for (int q = 0; q < nb; q += 2) {
                        const tw_u32 w0 = __shfl_sync(TW_FULL, word, q);
                        tw_u32 w1 = __shfl_sync(TW_FULL, word, (q + 1) & 31);
                        if (q + 1 >= nb)
                            w1 = w0 & 0xffffu; /* g = 0: a second slot that adds nothing */
                        tw_rows_entry2<DT, GATED, NI>(w0, w1, xr, wu, wd, K, lane, ya);
                    }
                }
            } else {
                for (int j = 0; j < T; j += 2) {
                    const tw_u32 n0 = (tw_u32)(t * T + j), n1 = n0 + 1;
                    float g0, g1;
                    tw_dot2<DT, NI>(xr, wp + (long long)n0 * K, wp + (long long)n1 * K, K, lane,
                                    g0, g1);
                    const tw_u32 b0 = tw_relu_round<DT>(g0), b1 = tw_relu_round<DT>(g1);
                    if (b0 | b1)
                        tw_rows_entry2<DT, GATED, NI>((b0 << 16) | n0, (b1 << 16) | n1, xr, wu,
                                                      wd, K, lane, ya);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int k = 256 * i + 8 * lane;
            if (k < K) {
                uint4 o;
                o.x = tw_pack2<DT>(ya[i][0], ya[i][1]);
                o.y = tw_pack2<DT>(ya[i][2], ya[i][3]);
                o.z = tw_pack2<DT>(ya[i][4], ya[i][5]);
                o.w = tw_pack2<DT>(ya[i][6], ya[i][7]);
                *(uint4 *)(y + m * K + k) = o;
            }
        }
    }
}

__device__ __forceinline__ tw_u32 tw_prmt2(tw_u32 a, tw_u32 b, tw_u32 sel) {
    tw_u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}
__device__ __forceinline__ uint2 tw_lds64(tw_u32 a) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
    return v;
}
// Phase B token masks (XV & 1): for the descriptors d0..d3 of 4 slots and a token column tg
// (g4 = tg * 0x01010101), m01 has 16-bit half 0 (1) all ones iff slot 0 (1) holds token tg, m23
// likewise for slots 2, 3. Byte i of t is slot i's key << 4 | token; (t ^ g4) & 0x0f0f0f0f is 0 in
// byte i iff slot i matches, so 0x80 minus it (no borrow: bytes <= 15) has the byte's top bit set
// iff it matches, and prmt's sign-replicating selectors spread those bits over the halves.
TW_HD void tw_tokmask4(tw_u32 d0, tw_u32 d1, tw_u32 d2, tw_u32 d3, tw_u32 g4, tw_u32 &m01,
                       tw_u32 &m23) {
    const tw_u32 t = tw_prmt2(tw_prmt2(d0, d1, 0x0040u), tw_prmt2(d2, d3, 0x4000u), 0x7610u);
    const tw_u32 z = 0x80808080u - ((t ^ g4) & 0x0f0f0f0fu);
    m01 = tw_prmt2(z, 0u, 0x9988u);
    m23 = tw_prmt2(z, 0u, 0xbbaau);
}
TW_HD tw_u32 tw_tokmask2(tw_u32 d0, tw_u32 d1, tw_u32 g4) {
    const tw_u32 z = 0x80808080u - ((tw_prmt2(d0, d1, 0x0040u) ^ g4) & 0x0f0f0f0fu);
    return tw_prmt2(z, 0u, 0x9988u);
}
// cp.async of 16 bytes, or 16 zero bytes when !valid (src is not read then).
__device__ __forceinline__ void tw_cp16z(tw_u32 dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
// d += A(16x8, row) * B(8x8, col), fp32 accumulate.
template <int DT>
__device__ __forceinline__ void tw_mma8(float (&d)[4], tw_u32 a0, tw_u32 a1, tw_u32 b0) {
    if constexpr (DT == 0)
        asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
            "{%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(b0));
    else
        asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
            "{%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(b0));
}
template <int DT> __device__ __forceinline__ float tw_ex_inv(tw_u32 ex) {
    return DT == 1 ? __uint_as_float((ex - 14u) << 23) : 1.0f;
}
// hi + lo 16-bit split of v (fp16: of v * 2^(141 - ex)); hi in bits 31..16.
template <int DT> __device__ __forceinline__ tw_u32 tw_split_hl(float v, tw_u32 ex) {
    if constexpr (DT == 1)
        v *= __uint_as_float((268u - ex) << 23);
    const tw_u16 hi = tw_f2h<DT>(v);
    const tw_u16 lo = tw_f2h<DT>(v - tw_h2f<DT>(hi));
    return ((tw_u32)hi << 16) | lo;
}

// Workspace control words: flag[0] fallback bits (1: overflowing row-tiles over OVF_CAP or
// overflowing rows over OROW_CAP, 2: pair slots over PAIR_CAP), [1] pair slots, [2] overflowing
// row-tiles, [3] overflowing rows. cnt[0..NT-1] overflowing rows per tile, cnt[NT] overflowing
// rows, u64 at cnt + ((NT + 2) & ~1) the active values (all zero before pre-pass 1: the scan
// zeroes them after reading, the launcher once after allocating).

#define TW_GU_STAGES 4 /* k-steps of ovf_gu in flight (ring of shared-memory stages) */
// Binary search: last t in [0, NT) with base[t] <= item.
__device__ __forceinline__ int tw_find_tile(const tw_u32 *base, int NT, tw_u32 item) {
    int lo = 0, hi = NT - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (base[mid] <= item)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// Overflow path 1: for the overflowing cells of tile t, h = g (non-gated) or g * u (gated) over
// the tile's TT columns, g = round(relu(x . wp_n)) exactly as packing rounds it, u = x . wu_n in
// fp32; stored as 16-bit hi and lo halves (ovf_hh[cell][0..TT) hi, [TT..2TT) lo; fp16: scaled by
// 2^(141 - ex) per 64-column block, ex in ovf_ex[cell][TT/64]). CTA item = (tile, 64 rows, 64
// columns); 8 warps = 4 m-tiles x 2 column halves; x rows and both weight blocks stream through
// shared memory in 64-column k-steps (cp.async, double-buffered, XOR swizzle).
template <int DT, int GATED, int TT>
TW_KERNEL((256))
    tw_k_ovf_gu(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wp,
                const tw_u16 *__restrict__ wu, int M, int K, int NT,
                const tw_u32 *__restrict__ ovf_base, const tw_u32 *__restrict__ item_base,
                const tw_u32 *__restrict__ ovf_rows, tw_u16 *__restrict__ ovf_hh,
                tw_u32 *__restrict__ ovf_ex, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    __shared__ float xmax[2][64];
    if (flag[0])
        return;
    constexpr int NCB = TT / 64;
    constexpr int STAGE = 64 * 128 * (GATED ? 3 : 2), GST = TW_GU_STAGES;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int mt = warp & 3, ch = warp >> 2;
    const tw_u32 nitems = item_base[NT];
    const tw_u32 sbase = tw_smem_addr(tw_smem);
    const int arow = 16 * mt + (lane & 7) + ((lane >> 3) & 1) * 8, ahi = lane >> 4;
    const int brow0 = (lane & 7) + (lane >> 4) * 8, bhi = (lane >> 3) & 1;
    const int nk = K / 64;
    for (tw_u32 item = blockIdx.x; item < nitems; item += gridDim.x) {
        const int t = tw_find_tile(item_base, NT, item);
        const tw_u32 rel = item - item_base[t], rb = rel / NCB, cb = rel - rb * NCB;
        const tw_u32 r0 = 64u * rb, cntt = ovf_base[t + 1] - ovf_base[t];
        const int nrows = (int)min(64u, cntt - r0);
        const tw_u32 *rows = ovf_rows + (long long)t * M + r0;
        const long long n0 = (long long)t * TT + 64 * cb;
        auto stage = [&](int kc, int buf) {
            const tw_u32 sx = sbase + buf * STAGE, sw = sx + 64 * 128, su = sw + 64 * 128;
            for (int i = tid; i < 64 * 8; i += 256) {
                const int r = i >> 3, q = i & 7;
                const tw_u32 so = r * 128 + ((q ^ (r & 7)) << 4);
                const long long m = rows[r < nrows ? r : 0];
                tw_cp16(sx + so, x + m * K + kc * 64 + 8 * q);
                tw_cp16(sw + so, wp + (n0 + r) * K + kc * 64 + 8 * q);
                if (GATED)
                    tw_cp16(su + so, wu + (n0 + r) * K + kc * 64 + 8 * q);
            }
        };
        float ag[4][4], au[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                ag[j][e] = au[j][e] = 0.0f;
#pragma unroll
        for (int i = 0; i < GST - 1; i++) {
            if (i < nk)
                stage(i, i);
            tw_cp_commit();
        }
        for (int kc = 0; kc < nk; kc++) {
            if (kc + GST - 1 < nk)
                stage(kc + GST - 1, (kc + GST - 1) % GST);
            tw_cp_commit();
            tw_cp_wait<GST - 1>();
            __syncthreads();
            const tw_u32 sx = sbase + (kc % GST) * STAGE, sw = sx + 64 * 128, su = sw + 64 * 128;
#pragma unroll
            for (int ks = 0; ks < 4; ks++) {
                tw_u32 a[4];
                tw_ldsm4(a, sx + arow * 128 + (((2 * ks + ahi) ^ (arow & 7)) << 4));
#pragma unroll
                for (int p = 0; p < 2; p++) {
                    const int br = ch * 32 + 16 * p + brow0;
                    const tw_u32 bo = br * 128 + (((2 * ks + bhi) ^ (br & 7)) << 4);
                    tw_u32 b[4];
                    tw_ldsm4(b, sw + bo);
                    tw_mma<DT>(ag[2 * p], a, b[0], b[1]);
                    tw_mma<DT>(ag[2 * p + 1], a, b[2], b[3]);
                    if (GATED) {
                        tw_ldsm4(b, su + bo);
                        tw_mma<DT>(au[2 * p], a, b[0], b[1]);
                        tw_mma<DT>(au[2 * p + 1], a, b[2], b[3]);
                    }
                }
            }
            __syncthreads();
        }
        /* h per element: lane holds rows ra = 16 mt + g (e = 0, 1) and ra + 8 (e = 2, 3), columns
           32 ch + 8 j + 2 t4 + (e & 1) */
        float h[4][4];
        float am0 = 0.0f, am1 = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float gq = tw_h2f<DT>(tw_relu_round<DT>(ag[j][e]));
                h[j][e] = GATED ? gq * au[j][e] : gq;
                if (e < 2)
                    am0 = fmaxf(am0, fabsf(h[j][e]));
                else
                    am1 = fmaxf(am1, fabsf(h[j][e]));
            }
        const int ra = 16 * mt + g, rb2 = ra + 8;
        tw_u32 exa = 0, exb = 0;
        if constexpr (DT == 1) {
            am0 = fmaxf(am0, __shfl_xor_sync(TW_FULL, am0, 1));
            am0 = fmaxf(am0, __shfl_xor_sync(TW_FULL, am0, 2));
            am1 = fmaxf(am1, __shfl_xor_sync(TW_FULL, am1, 1));
            am1 = fmaxf(am1, __shfl_xor_sync(TW_FULL, am1, 2));
            if (t4 == 0) {
                xmax[ch][ra] = am0;
                xmax[ch][rb2] = am1;
            }
            __syncthreads();
            exa = tw_scale_ex(__float_as_uint(fmaxf(xmax[0][ra], xmax[1][ra])));
            exb = tw_scale_ex(__float_as_uint(fmaxf(xmax[0][rb2], xmax[1][rb2])));
            __syncthreads();
        }
        const tw_u32 cell0 = ovf_base[t] + r0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int col = 64 * (int)cb + 32 * ch + 8 * j + 2 * t4;
            const tw_u32 h00 = tw_split_hl<DT>(h[j][0], exa), h01 = tw_split_hl<DT>(h[j][1], exa);
            const tw_u32 h10 = tw_split_hl<DT>(h[j][2], exb), h11 = tw_split_hl<DT>(h[j][3], exb);
            if (ra < nrows) {
                tw_u16 *p = ovf_hh + (long long)(cell0 + ra) * (2 * TT) + col;
                *(tw_u32 *)p = (h00 >> 16) | (h01 & 0xffff0000u);
                *(tw_u32 *)(p + TT) = (h00 & 0xffffu) | (h01 << 16);
            }
            if (rb2 < nrows) {
                tw_u16 *p = ovf_hh + (long long)(cell0 + rb2) * (2 * TT) + col;
                *(tw_u32 *)p = (h10 >> 16) | (h11 & 0xffff0000u);
                *(tw_u32 *)(p + TT) = (h10 & 0xffffu) | (h11 << 16);
            }
        }
        if (DT == 1 && ch == 0 && t4 == 0) {
            if (ra < nrows)
                ovf_ex[(long long)(cell0 + ra) * NCB + cb] = exa;
            if (rb2 < nrows)
                ovf_ex[(long long)(cell0 + rb2) * NCB + cb] = exb;
        }
    }
}

// Overflow path 2: y part of each overflowing row, split over TW_OVP parts of the tiles:
// ovf_y[p][i][K] (fp32, part p at p * ystride) = sum over the row's overflowing tiles t of part p
// (tiles [p NT / P, (p + 1) NT / P)), in tile order, of h[cell(t)] . Wd[tile t rows]; phase B adds
// the parts in order. CTA item = (part, 32 overflowing rows, 64 output columns); tiles in batches
// of 32: cell lookup, list of tiles where any row of the item overflows, then those tiles stream
// through shared memory in steps of SUB neurons (h hi and lo rows with zeros for rows that do not
// overflow there, and the Wd block), double-buffered (64 KB: 3 blocks per SM). 8 warps = 2
// m-tiles x 4 quarters of 16 columns; A = h hi / lo (ldmatrix), B = Wd (ldmatrix.trans); fp16
// sums each 64-neuron block apart and scales it by the cell's 2^(ex - 141).
#define TW_OVP 4 /* tile parts of ovf_down (partial ovf_y sums) */
template <int DT, int TT>
TW_KERNEL((256))
    tw_k_ovf_down(const tw_u32 *__restrict__ packed, const tw_u16 *__restrict__ wd, int M, int K,
                  int NT, int W, const tw_u32 *__restrict__ ovf_base,
                  const tw_u32 *__restrict__ ovf_slot, const tw_u32 *__restrict__ orows,
                  const tw_u16 *__restrict__ ovf_hh, const tw_u32 *__restrict__ ovf_ex,
                  float *__restrict__ ovf_y, long long ystride, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    __shared__ tw_u32 scell[32][33];
    __shared__ tw_u32 srow[32], slist[32], sna;
    __shared__ float ssinv[2][32][(TT < 128 ? TT : 128) / 64];
    if (flag[0])
        return;
    constexpr int NKB = TT / 64;
    constexpr int SUB = TT < 128 ? TT : 128, NS = TT / SUB, SKB = SUB / 64; /* step: SUB neurons */
    constexpr int HB = 32 * SUB * 2;      /* bytes of one 32-row h block (hi or lo) of a step */
    constexpr int STAGE = 2 * HB + SUB * 128;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int mt = warp & 1, nq = warp >> 1;
    const tw_u32 norows = flag[3];
    const tw_u32 ncb = (tw_u32)(K / 64), nrc = (norows + 31u) / 32u * ncb;
    const tw_u32 nitems = nrc * TW_OVP;
    const tw_u32 sbase = tw_smem_addr(tw_smem);
    const int ar = 16 * mt + (lane & 7) + ((lane >> 3) & 1) * 8, ahi = lane >> 4;
    const int bk = (lane & 7) + ((lane >> 3) & 1) * 8, bn = 2 * nq + (lane >> 4);
    for (tw_u32 item = blockIdx.x; item < nitems; item += gridDim.x) {
        const tw_u32 part = item / nrc, irc = item - part * nrc;
        const tw_u32 rb = irc / ncb, cb = irc - rb * ncb, i0 = 32u * rb;
        const int tlo = (int)part * NT / TW_OVP, thi = ((int)part + 1) * NT / TW_OVP;
        const int nr = (int)min(32u, norows - i0);
        const int c0 = 64 * (int)cb;
        if (tid < 32)
            srow[tid] = tid < nr ? orows[i0 + tid] : TW_NONE;
        float acc[2][4];
#pragma unroll
        for (int j = 0; j < 2; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        for (int tb = tlo; tb < thi; tb += 32) {
            const int ntb = min(32, thi - tb);
            __syncthreads(); /* srow written; the previous batch's buffers are free */
            for (int i = tid; i < 32 * 32; i += 256) {
                const int r = i >> 5, tt = i & 31;
                tw_u32 cell = TW_NONE;
                if (r < nr && tt < ntb) {
                    const long long m = srow[r];
                    const int t = tb + tt;
                    if (packed[(m * NT + t) * W] > (tw_u32)(W - 1))
                        cell = ovf_base[t] + ovf_slot[m * NT + t];
                }
                scell[r][tt] = cell;
            }
            __syncthreads();
            if (tid < 32) {
                bool any = false;
                for (int r = 0; r < nr; r++)
                    any |= scell[r][tid] != TW_NONE;
                const tw_u32 bal = __ballot_sync(TW_FULL, any && tid < ntb);
                if (any && tid < ntb)
                    slist[__popc(bal & ((1u << tid) - 1u))] = (tw_u32)tid;
                if (tid == 0)
                    sna = __popc(bal);
            }
            __syncthreads();
            const int na = (int)sna;
            /* step i: active tile i / NS, neurons [SUB (i % NS), + SUB) of it */
            auto stage = [&](int i, int buf) {
                const int tt = (int)slist[i / NS], t = tb + tt, n0 = SUB * (i % NS);
                const tw_u32 sh = sbase + buf * STAGE, sw = sh + 2 * HB;
                for (int e = tid; e < 2 * 32 * (SUB / 8); e += 256) {
                    const int which = e / (32 * (SUB / 8)), rem = e - which * 32 * (SUB / 8);
                    const int r = rem / (SUB / 8), pc = rem - r * (SUB / 8);
                    const tw_u32 cell = scell[r][tt];
                    const tw_u16 *src = ovf_hh + (cell == TW_NONE ? 0ll : (long long)cell * (2 * TT)) +
                                        which * TT + n0 + 8 * pc;
                    tw_cp16z(sh + which * HB + r * (2 * SUB) + ((pc ^ (r & 7)) << 4), src,
                             cell != TW_NONE);
                }
                for (int e = tid; e < SUB * 8; e += 256) {
                    const int nn = e >> 3, q = e & 7;
                    tw_cp16(sw + nn * 128 + ((q ^ (nn & 7)) << 4),
                            wd + ((long long)t * TT + n0 + nn) * K + c0 + 8 * q);
                }
                if (DT == 1 && tid < 32 * SKB) {
                    const int r = tid / SKB, kb = tid - r * SKB;
                    const tw_u32 cell = scell[r][tt];
                    ssinv[buf][r][kb] = cell == TW_NONE ? 1.0f
                                                        : tw_ex_inv<DT>(ovf_ex[(long long)cell * NKB +
                                                                               n0 / 64 + kb]);
                }
            };
            const int nst = na * NS;
            if (nst > 0)
                stage(0, 0);
            tw_cp_commit();
            for (int i = 0; i < nst; i++) {
                if (i + 1 < nst)
                    stage(i + 1, (i + 1) & 1);
                tw_cp_commit();
                tw_cp_wait<1>();
                __syncthreads();
                const tw_u32 shi = sbase + (i & 1) * STAGE, slo = shi + HB, sw = shi + 2 * HB;
#pragma unroll
                for (int kb = 0; kb < SKB; kb++) {
                    float tmp[2][4];
#pragma unroll
                    for (int j = 0; j < 2; j++)
                        tmp[j][0] = tmp[j][1] = tmp[j][2] = tmp[j][3] = 0.0f;
#pragma unroll
                    for (int ks = 0; ks < 4; ks++) {
                        const int kk = 64 * kb + 16 * ks; /* neuron offset in the step */
                        const tw_u32 ao = ar * (2 * SUB) + ((((kk >> 3) + ahi) ^ (ar & 7)) << 4);
                        tw_u32 ah[4], al[4], b[4];
                        tw_ldsm4(ah, shi + ao);
                        tw_ldsm4(al, slo + ao);
                        const int krow = kk + bk;
                        tw_ldsm4t(b, sw + krow * 128 + ((bn ^ (krow & 7)) << 4));
                        float(&d0)[4] = DT == 1 ? tmp[0] : acc[0];
                        float(&d1)[4] = DT == 1 ? tmp[1] : acc[1];
                        tw_mma<DT>(d0, ah, b[0], b[1]);
                        tw_mma<DT>(d0, al, b[0], b[1]);
                        tw_mma<DT>(d1, ah, b[2], b[3]);
                        tw_mma<DT>(d1, al, b[2], b[3]);
                    }
                    if constexpr (DT == 1) {
                        const float sa = ssinv[i & 1][16 * mt + g][kb],
                                    sb = ssinv[i & 1][16 * mt + g + 8][kb];
#pragma unroll
                        for (int j = 0; j < 2; j++) {
                            acc[j][0] = fmaf(tmp[j][0], sa, acc[j][0]);
                            acc[j][1] = fmaf(tmp[j][1], sa, acc[j][1]);
                            acc[j][2] = fmaf(tmp[j][2], sb, acc[j][2]);
                            acc[j][3] = fmaf(tmp[j][3], sb, acc[j][3]);
                        }
                    }
                }
                __syncthreads();
            }
        }
        const int ra = 16 * mt + g, rb2 = ra + 8;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int col = c0 + 16 * nq + 8 * j + 2 * t4;
            float *py = ovf_y + (long long)part * ystride;
            if (ra < nr)
                *(float2 *)(py + (long long)(i0 + ra) * K + col) = make_float2(acc[j][0], acc[j][1]);
            if (rb2 < nr)
                *(float2 *)(py + (long long)(i0 + rb2) * K + col) = make_float2(acc[j][2], acc[j][3]);
        }
    }
}

// XV & 64: ovf_gu with larger warp tiles (tw_k_ovf_gu is shared-memory bound: one
// A and two B ldmatrix per 4 mma). Same items (tile, 64 rows, 64 columns), same cp.async ring
// layout; CTA = 4 warps = 2 row halves x 2 column halves, each 32 rows x 32 columns of g (and
// u): per k16 step 2 A + 2 (4 gated) B ldmatrix feed 8 (16) mma. Every output element sees the
// same mma sequence (k-steps in order, the same m16 and n8 tile positions) as tw_k_ovf_gu, so
// g, u, h, ex and the stored halves are the same bits.
#define TW_GU2_STAGES 3
template <int DT, int GATED, int TT>
TW_KERNEL((128))
    tw_k_ovf_gu2(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wp,
                 const tw_u16 *__restrict__ wu, int M, int K, int NT,
                 const tw_u32 *__restrict__ ovf_base, const tw_u32 *__restrict__ item_base,
                 const tw_u32 *__restrict__ ovf_rows, tw_u16 *__restrict__ ovf_hh,
                 tw_u32 *__restrict__ ovf_ex, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    __shared__ float xmax[2][64];
    if (flag[0])
        return;
    constexpr int NCB = TT / 64;
    constexpr int STAGE = 64 * 128 * (GATED ? 3 : 2), GST = TW_GU2_STAGES;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int mh = warp & 1, ch = warp >> 1;
    const tw_u32 nitems = item_base[NT];
    const tw_u32 sbase = tw_smem_addr(tw_smem);
    const int arow0 = 32 * mh + (lane & 7) + ((lane >> 3) & 1) * 8, ahi = lane >> 4;
    const int brow0 = (lane & 7) + (lane >> 4) * 8, bhi = (lane >> 3) & 1;
    const int nk = K / 64;
    for (tw_u32 item = blockIdx.x; item < nitems; item += gridDim.x) {
        const int t = tw_find_tile(item_base, NT, item);
        const tw_u32 rel = item - item_base[t], rb = rel / NCB, cb = rel - rb * NCB;
        const tw_u32 r0 = 64u * rb, cntt = ovf_base[t + 1] - ovf_base[t];
        const int nrows = (int)min(64u, cntt - r0);
        const tw_u32 *rows = ovf_rows + (long long)t * M + r0;
        const long long n0 = (long long)t * TT + 64 * cb;
        auto stage = [&](int kc, int buf) {
            const tw_u32 sx = sbase + buf * STAGE, sw = sx + 64 * 128, su = sw + 64 * 128;
#pragma unroll
            for (int i = tid; i < 64 * 8; i += 128) {
                const int r = i >> 3, q = i & 7;
                const tw_u32 so = r * 128 + ((q ^ (r & 7)) << 4);
                const long long m = rows[r < nrows ? r : 0];
                tw_cp16(sx + so, x + m * K + kc * 64 + 8 * q);
                tw_cp16(sw + so, wp + (n0 + r) * K + kc * 64 + 8 * q);
                if (GATED)
                    tw_cp16(su + so, wu + (n0 + r) * K + kc * 64 + 8 * q);
            }
        };
        float ag[2][4][4], au[2][4][4];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    ag[mi][j][e] = au[mi][j][e] = 0.0f;
#pragma unroll
        for (int i = 0; i < GST - 1; i++) {
            if (i < nk)
                stage(i, i);
            tw_cp_commit();
        }
        for (int kc = 0; kc < nk; kc++) {
            if (kc + GST - 1 < nk)
                stage(kc + GST - 1, (kc + GST - 1) % GST);
            tw_cp_commit();
            tw_cp_wait<GST - 1>();
            __syncthreads();
            const tw_u32 sx = sbase + (kc % GST) * STAGE, sw = sx + 64 * 128, su = sw + 64 * 128;
#pragma unroll
            for (int ks = 0; ks < 4; ks++) {
                tw_u32 a[2][4];
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    const int ar = arow0 + 16 * mi;
                    tw_ldsm4(a[mi], sx + ar * 128 + (((2 * ks + ahi) ^ (ar & 7)) << 4));
                }
#pragma unroll
                for (int p = 0; p < 2; p++) {
                    const int br = ch * 32 + 16 * p + brow0;
                    const tw_u32 bo = br * 128 + (((2 * ks + bhi) ^ (br & 7)) << 4);
                    tw_u32 b[4];
                    tw_ldsm4(b, sw + bo);
#pragma unroll
                    for (int mi = 0; mi < 2; mi++) {
                        tw_mma<DT>(ag[mi][2 * p], a[mi], b[0], b[1]);
                        tw_mma<DT>(ag[mi][2 * p + 1], a[mi], b[2], b[3]);
                    }
                    if (GATED) {
                        tw_ldsm4(b, su + bo);
#pragma unroll
                        for (int mi = 0; mi < 2; mi++) {
                            tw_mma<DT>(au[mi][2 * p], a[mi], b[0], b[1]);
                            tw_mma<DT>(au[mi][2 * p + 1], a[mi], b[2], b[3]);
                        }
                    }
                }
            }
            __syncthreads();
        }
        /* lane holds rows 32 mh + 16 mi + g (e = 0, 1) and + 8 (e = 2, 3), columns
           32 ch + 8 j + 2 t4 + (e & 1) */
        float h[2][4][4], am[2][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            am[mi][0] = am[mi][1] = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float gq = tw_h2f<DT>(tw_relu_round<DT>(ag[mi][j][e]));
                    h[mi][j][e] = GATED ? gq * au[mi][j][e] : gq;
                    am[mi][e >> 1] = fmaxf(am[mi][e >> 1], fabsf(h[mi][j][e]));
                }
        }
        tw_u32 ex[2][2] = {{0u, 0u}, {0u, 0u}};
        if constexpr (DT == 1) {
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    float v = am[mi][hf];
                    v = fmaxf(v, __shfl_xor_sync(TW_FULL, v, 1));
                    v = fmaxf(v, __shfl_xor_sync(TW_FULL, v, 2));
                    if (t4 == 0)
                        xmax[ch][32 * mh + 16 * mi + 8 * hf + g] = v;
                }
            __syncthreads();
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int r = 32 * mh + 16 * mi + 8 * hf + g;
                    ex[mi][hf] = tw_scale_ex(__float_as_uint(fmaxf(xmax[0][r], xmax[1][r])));
                }
            __syncthreads();
        }
        const tw_u32 cell0 = ovf_base[t] + r0;
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int r = 32 * mh + 16 * mi + 8 * hf + g;
                if (r < nrows) {
                    tw_u16 *row = ovf_hh + (long long)(cell0 + r) * (2 * TT) + 64 * (int)cb;
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int col = 32 * ch + 8 * j + 2 * t4;
                        const tw_u32 h0 = tw_split_hl<DT>(h[mi][j][2 * hf], ex[mi][hf]);
                        const tw_u32 h1 = tw_split_hl<DT>(h[mi][j][2 * hf + 1], ex[mi][hf]);
                        *(tw_u32 *)(row + col) = (h0 >> 16) | (h1 & 0xffff0000u);
                        *(tw_u32 *)(row + TT + col) = (h0 & 0xffffu) | (h1 << 16);
                    }
                    if (DT == 1 && ch == 0 && t4 == 0)
                        ovf_ex[(long long)(cell0 + r) * NCB + cb] = ex[mi][hf];
                }
            }
    }
}

// XV & 64: ovf_down with CTA items of (part, 32 rows, CW output columns), CW = 128 (64 when
// K % 128 != 0): each h block is read once per CW columns; 8 warps = 2 m-tiles x 4 quarters of
// CW / 4 columns (per k16 step 2 A + CW / 64 B ldmatrix feed CW / 16 mma); 64-neuron steps,
// double-buffered (48 KB at CW 128). Per output element the same tiles, steps and mma order as
// tw_k_ovf_down (fp16: the same per-64-neuron scaling), so the same bits.
template <int DT, int TT, int CW>
TW_KERNEL((256))
    tw_k_ovf_down2(const tw_u32 *__restrict__ packed, const tw_u16 *__restrict__ wd, int M, int K,
                   int NT, int W, const tw_u32 *__restrict__ ovf_base,
                   const tw_u32 *__restrict__ ovf_slot, const tw_u32 *__restrict__ orows,
                   const tw_u16 *__restrict__ ovf_hh, const tw_u32 *__restrict__ ovf_ex,
                   float *__restrict__ ovf_y, long long ystride, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    __shared__ tw_u32 scell[32][33];
    __shared__ tw_u32 srow[32], slist[32], sna;
    __shared__ float ssinv[2][32];
    if (flag[0])
        return;
    constexpr int NKB = TT / 64, SUB = 64, NS = TT / SUB;
    constexpr int HB = 32 * SUB * 2;   /* bytes of one 32-row h block (hi or lo) of a step */
    constexpr int WR = CW * 2;         /* bytes of one Wd row in shared memory */
    constexpr int STAGE = 2 * HB + SUB * WR;
    constexpr int QW = CW / 4, NJ = QW / 8; /* a warp's columns, n8 tiles */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int mt = warp & 1, nq = warp >> 1;
    const tw_u32 norows = flag[3];
    const tw_u32 ncb = (tw_u32)(K / CW), nrc = (norows + 31u) / 32u * ncb;
    const tw_u32 nitems = nrc * TW_OVP;
    const tw_u32 sbase = tw_smem_addr(tw_smem);
    const int ar = 16 * mt + (lane & 7) + ((lane >> 3) & 1) * 8, ahi = lane >> 4;
    const int bk = (lane & 7) + ((lane >> 3) & 1) * 8, bn = (QW / 8) * nq + (lane >> 4);
    for (tw_u32 item = blockIdx.x; item < nitems; item += gridDim.x) {
        const tw_u32 part = item / nrc, irc = item - part * nrc;
        const tw_u32 rb = irc / ncb, cb = irc - rb * ncb, i0 = 32u * rb;
        const int tlo = (int)part * NT / TW_OVP, thi = ((int)part + 1) * NT / TW_OVP;
        const int nr = (int)min(32u, norows - i0);
        const int c0 = CW * (int)cb;
        if (tid < 32)
            srow[tid] = tid < nr ? orows[i0 + tid] : TW_NONE;
        float acc[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        for (int tb = tlo; tb < thi; tb += 32) {
            const int ntb = min(32, thi - tb);
            __syncthreads(); /* srow written; the previous batch's buffers are free */
            for (int i = tid; i < 32 * 32; i += 256) {
                const int r = i >> 5, tt = i & 31;
                tw_u32 cell = TW_NONE;
                if (r < nr && tt < ntb) {
                    const long long m = srow[r];
                    const int t = tb + tt;
                    if (packed[(m * NT + t) * W] > (tw_u32)(W - 1))
                        cell = ovf_base[t] + ovf_slot[m * NT + t];
                }
                scell[r][tt] = cell;
            }
            __syncthreads();
            if (tid < 32) {
                bool any = false;
                for (int r = 0; r < nr; r++)
                    any |= scell[r][tid] != TW_NONE;
                const tw_u32 bal = __ballot_sync(TW_FULL, any && tid < ntb);
                if (any && tid < ntb)
                    slist[__popc(bal & ((1u << tid) - 1u))] = (tw_u32)tid;
                if (tid == 0)
                    sna = __popc(bal);
            }
            __syncthreads();
            const int na = (int)sna;
            /* step i: active tile i / NS, neurons [64 (i % NS), + 64) of it */
            auto stage = [&](int i, int buf) {
                const int tt = (int)slist[i / NS], t = tb + tt, n0 = SUB * (i % NS);
                const tw_u32 sh = sbase + buf * STAGE, sw = sh + 2 * HB;
#pragma unroll
                for (int e = tid; e < 2 * 32 * (SUB / 8); e += 256) {
                    const int which = e / (32 * (SUB / 8)), rem = e - which * 32 * (SUB / 8);
                    const int r = rem / (SUB / 8), pc = rem - r * (SUB / 8);
                    const tw_u32 cell = scell[r][tt];
                    const tw_u16 *src = ovf_hh + (cell == TW_NONE ? 0ll : (long long)cell * (2 * TT)) +
                                        which * TT + n0 + 8 * pc;
                    tw_cp16z(sh + which * HB + r * (2 * SUB) + ((pc ^ (r & 7)) << 4), src,
                             cell != TW_NONE);
                }
#pragma unroll
                for (int e = tid; e < SUB * (CW / 8); e += 256) {
                    const int nn = e / (CW / 8), q = e % (CW / 8);
                    tw_cp16(sw + nn * WR + ((q ^ (nn & 7)) << 4),
                            wd + ((long long)t * TT + n0 + nn) * K + c0 + 8 * q);
                }
                if (DT == 1 && tid < 32) {
                    const tw_u32 cell = scell[tid][tt];
                    ssinv[buf][tid] = cell == TW_NONE
                                          ? 1.0f
                                          : tw_ex_inv<DT>(ovf_ex[(long long)cell * NKB + n0 / 64]);
                }
            };
            const int nst = na * NS;
            if (nst > 0)
                stage(0, 0);
            tw_cp_commit();
            for (int i = 0; i < nst; i++) {
                if (i + 1 < nst)
                    stage(i + 1, (i + 1) & 1);
                tw_cp_commit();
                tw_cp_wait<1>();
                __syncthreads();
                const tw_u32 shi = sbase + (i & 1) * STAGE, slo = shi + HB, sw = shi + 2 * HB;
                float tmp[NJ][4];
#pragma unroll
                for (int j = 0; j < NJ; j++)
                    tmp[j][0] = tmp[j][1] = tmp[j][2] = tmp[j][3] = 0.0f;
#pragma unroll
                for (int ks = 0; ks < 4; ks++) {
                    const int kk = 16 * ks; /* neuron offset in the step */
                    const tw_u32 ao = ar * (2 * SUB) + ((((kk >> 3) + ahi) ^ (ar & 7)) << 4);
                    tw_u32 ah[4], al[4];
                    tw_ldsm4(ah, shi + ao);
                    tw_ldsm4(al, slo + ao);
                    const int krow = kk + bk;
#pragma unroll
                    for (int jj = 0; jj < NJ / 2; jj++) {
                        tw_u32 b[4];
                        tw_ldsm4t(b, sw + krow * WR + (((bn + 2 * jj) ^ (krow & 7)) << 4));
                        float(&d0)[4] = DT == 1 ? tmp[2 * jj] : acc[2 * jj];
                        float(&d1)[4] = DT == 1 ? tmp[2 * jj + 1] : acc[2 * jj + 1];
                        tw_mma<DT>(d0, ah, b[0], b[1]);
                        tw_mma<DT>(d0, al, b[0], b[1]);
                        tw_mma<DT>(d1, ah, b[2], b[3]);
                        tw_mma<DT>(d1, al, b[2], b[3]);
                    }
                }
                if constexpr (DT == 1) {
                    const float sa = ssinv[i & 1][16 * mt + g], sb = ssinv[i & 1][16 * mt + g + 8];
#pragma unroll
                    for (int j = 0; j < NJ; j++) {
                        acc[j][0] = fmaf(tmp[j][0], sa, acc[j][0]);
                        acc[j][1] = fmaf(tmp[j][1], sa, acc[j][1]);
                        acc[j][2] = fmaf(tmp[j][2], sb, acc[j][2]);
                        acc[j][3] = fmaf(tmp[j][3], sb, acc[j][3]);
                    }
                }
                __syncthreads();
            }
        }
        const int ra = 16 * mt + g, rb2 = ra + 8;
        float *py = ovf_y + (long long)part * ystride;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int col = c0 + QW * nq + 8 * j + 2 * t4;
            if (ra < nr)
                *(float2 *)(py + (long long)(i0 + ra) * K + col) = make_float2(acc[j][0], acc[j][1]);
            if (rb2 < nr)
                *(float2 *)(py + (long long)(i0 + rb2) * K + col) = make_float2(acc[j][2], acc[j][3]);
        }
    }
}

// Between the phases (gated): h = g * (sum of the slices' partial u, fixed order), stored as
// a hi|lo word (bf16: the two terms; fp16: of h * 2^(141 - ex), ex per aligned 16-slot round in
// rexp); XV & 1: paired over slots (2i, 2i + 1), the hi halves in word 2i, the lo halves in 2i + 1.
// Pads have g = 0, so h = 0.
template <int DT>
TW_KERNEL((256)) tw_k_reduce(const tw_u16 *__restrict__ gv, const float *__restrict__ partial,
                              tw_u32 pstride, int nslices, const tw_u32 *__restrict__ total_p,
                              tw_u32 *__restrict__ hl, tw_u32 *__restrict__ rexp,
                              const tw_u32 *__restrict__ flag) {
    if (flag[0])
        return;
    const tw_u32 total = *total_p, lane = threadIdx.x & 31u;
    const tw_u32 stride = gridDim.x * blockDim.x;
    for (tw_u32 p0 = blockIdx.x * blockDim.x + (threadIdx.x & ~31u); p0 < total; p0 += stride) {
        const tw_u32 p = p0 + lane;
        float h = 0.0f;
        if (p < total) {
            float u = 0.0f;
            for (int s = 0; s < nslices; s++)
                u += partial[(long long)s * pstride + p];
            h = tw_h2f<DT>(gv[p]) * u;
        }
        tw_u32 ex = 0;
        if constexpr (DT == 1) { /* total is a multiple of 16 here: 16-lane groups are whole */
            float am = fabsf(h);
#pragma unroll
            for (int o = 1; o < 16; o <<= 1)
                am = fmaxf(am, __shfl_xor_sync(TW_FULL, am, o));
            ex = tw_scale_ex(__float_as_uint(am));
            if ((lane & 15u) == 0 && p < total)
                rexp[p >> 4] = ex;
        }
        tw_u32 w = tw_split_hl<DT>(h, ex);
        if (TW_XV & 1) { /* paired: slot 2i gets hi(2i) | hi(2i+1) << 16, slot 2i+1 the lo halves
                            (total is a multiple of 8: pairs never straddle it) */
            const tw_u32 o = __shfl_xor_sync(TW_FULL, w, 1);
            w = (lane & 1u) ? tw_prmt2(o, w, 0x5410u) : tw_prmt2(w, o, 0x7632u);
        }
        if (p < total)
            hl[p] = w;
    }
}

// cp.async of 4 bytes (no alignment beyond the word).
__device__ __forceinline__ void tw_cp4(tw_u32 dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
// Shared-memory layout of the phases: per buffer, DCAP list slots of each staged array,
// then the block's NGB + 1 list offsets and NGB sizes of the chunk; after both buffers, a table of
// (first offset, end offset) of the block's lists per chunk (NC <= 256).
#define TW_RE 2048
#define TW_SB(DCAP, SLOTB, NGB) ((DCAP) * (SLOTB) + (2 * (NGB) + 4) * 4)
// Stages the block's list offsets (NGB + 1 words) and sizes (NGB words) of chunk c at so.
template <int NGB, int NTHR>
__device__ __forceinline__ void tw_stage_lists(tw_u32 so, const tw_u32 *__restrict__ offsets,
                                               const tw_u32 *__restrict__ sizes, long long cb,
                                               int n) {
    for (int i = threadIdx.x; i < 2 * NGB + 1; i += NTHR) {
        const tw_u32 *src = i <= NGB ? offsets + cb + min(i, n) : sizes + cb + min(i - NGB - 1, n - 1);
        tw_cp4(so + 4u * (tw_u32)i, src);
    }
}

// Pre-pass 1: one warp per group of GT rows reads every cell count once (4 loads in flight per
// lane): list sizes of the group in every chunk (non-overflowing cells only, PADQ-padded), the
// block's (8 groups) size sum per chunk, each overflowing cell's slot in its tile's list (integer
// atomics: consumers index by row and tile, so the order is free), and each row's index among the
// overflowing rows (TW_NONE if it has none). NCMAX >= NC.
template <int PADQ, int NCMAX, int GT>
TW_KERNEL((256)) tw_k_prep(const tw_u32 *__restrict__ packed, int M, int NT, int W, int NC, int TPC,
                            int NG, tw_u32 *__restrict__ cnt, tw_u32 *__restrict__ ovf_rows,
                            tw_u32 *__restrict__ ovf_slot, tw_u32 *__restrict__ orow_idx,
                            tw_u32 *__restrict__ orows, tw_u32 *__restrict__ sizes,
                            tw_u32 *__restrict__ bsum) {
    __shared__ tw_u32 csum[8][NCMAX];
    __shared__ tw_u32 bs[NCMAX];
    __shared__ tw_u32 rowovf[8][GT];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int G = blockIdx.x * 8 + warp, NB = (NG + 7) / 8;
    const bool active = G < NG;
    for (int c = lane; c < NC; c += 32)
        csum[warp][c] = 0;
    for (int c = tid; c < NC; c += 256)
        bs[c] = 0;
    if (lane < GT)
        rowovf[warp][lane] = 0;
    __syncthreads();
    const tw_u32 S = (tw_u32)(W - 1);
    tw_u64 tot = 0; /* count words summed: the exact active values (for the AUTO path) */
    if (active) {
        const int ncell = GT * NT;
        for (int i0 = 0; i0 < ncell; i0 += 128) {
            tw_u32 v[4];
            int rr[4], tt[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = i0 + 32 * u + lane, r = i / NT;
                const long long m = (long long)GT * G + r;
                rr[u] = i < ncell && m < M ? r : -1;
                tt[u] = i - r * NT;
                v[u] = rr[u] >= 0 ? packed[(m * NT + tt[u]) * W] : 0u;
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (rr[u] < 0)
                    continue;
                const int t = tt[u];
                tot += v[u];
                if (v[u] <= S) {
                    if (v[u])
                        atomicAdd(&csum[warp][t / TPC], v[u]);
                } else {
                    const long long m = (long long)GT * G + rr[u];
                    const tw_u32 sl = atomicAdd(&cnt[t], 1u);
                    ovf_rows[(long long)t * M + sl] = (tw_u32)m;
                    ovf_slot[m * NT + t] = sl;
                    atomicAdd(&rowovf[warp][rr[u]], 1u);
                }
            }
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        tot += __shfl_xor_sync(TW_FULL, tot, o);
    if (lane == 0 && tot)
        atomicAdd((unsigned long long *)(cnt + ((NT + 2) & ~1)), (unsigned long long)tot);
    __syncwarp();
    for (int c = lane; c < NC; c += 32) {
        const tw_u32 sz = (csum[warp][c] + (PADQ - 1)) & ~(tw_u32)(PADQ - 1);
        if (active) {
            sizes[(long long)c * NG + G] = sz;
            atomicAdd(&bs[c], sz);
        }
    }
    __syncthreads();
    for (int c = tid; c < NC; c += 256)
        bsum[(long long)c * NB + blockIdx.x] = bs[c];
    const long long m = (long long)GT * G + lane;
    if (active && lane < GT && m < M) {
        tw_u32 idx = TW_NONE;
        if (rowovf[warp][lane]) {
            idx = atomicAdd(&cnt[NT], 1u);
            orows[idx] = (tw_u32)m;
        }
        orow_idx[m] = idx;
    }
}

// Pre-pass 2 (one block of 1024): exclusive scan of the block sums (chunk-major, nb = NC * NB
// entries; each warp a contiguous segment, coalesced), the total (offsets[NL]), overflow slot
// bases per tile and item bases of ovf_gu (64 rows x 64 columns per item), capacity checks, flags.
TW_KERNEL((1024))
    tw_k_scan(const tw_u32 *__restrict__ bsum, int nb, tw_u32 *__restrict__ bbase,
               const tw_u32 *__restrict__ cnt, int NT, int NCB, tw_u32 *__restrict__ ovf_base,
               tw_u32 *__restrict__ item_base, tw_u32 *__restrict__ flag,
               tw_u32 *__restrict__ total_out, tw_u32 pair_cap, tw_u32 ovf_cap, tw_u32 orow_cap) {
    __shared__ tw_u64 wsum[32];
    __shared__ tw_u64 stotal;
    __shared__ tw_u32 ovf_total;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (warp == 0) { /* the per-tile overflow scan */
        tw_u32 a = 0, b = 0;
        for (int t0 = 0; t0 < NT; t0 += 32) {
            const int t = t0 + lane;
            const tw_u32 c = t < NT ? cnt[t] : 0u, it = ((c + 63u) / 64u) * (tw_u32)NCB;
            tw_u32 ia = c, ib = it;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const tw_u32 va = __shfl_up_sync(TW_FULL, ia, o), vb = __shfl_up_sync(TW_FULL, ib, o);
                ia += lane >= o ? va : 0u;
                ib += lane >= o ? vb : 0u;
            }
            if (t < NT) {
                ovf_base[t] = a + ia - c;
                item_base[t] = b + ib - it;
            }
            a += __shfl_sync(TW_FULL, ia, 31);
            b += __shfl_sync(TW_FULL, ib, 31);
        }
        if (lane == 0) {
            ovf_base[NT] = a;
            item_base[NT] = b;
            ovf_total = a;
        }
    }
    const int seg = (((nb + 31) / 32) + 31) & ~31;
    const int beg = min(warp * seg, nb), end = min(beg + seg, nb);
    tw_u64 sum = 0;
#pragma unroll 4
    for (int i = beg + lane; i < end; i += 32)
        sum += bsum[i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(TW_FULL, sum, o);
    if (lane == 0)
        wsum[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        const tw_u64 v = wsum[lane];
        tw_u64 incl = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const tw_u64 u = __shfl_up_sync(TW_FULL, incl, o);
            incl += lane >= o ? u : 0ull;
        }
        wsum[lane] = incl - v;
        if (lane == 31)
            stotal = incl;
    }
    __syncthreads();
    tw_u64 run = wsum[warp];
    for (int i0 = beg; i0 < end; i0 += 32) {
        const int i = i0 + lane;
        const tw_u32 v = i < end ? bsum[i] : 0u;
        tw_u32 incl = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const tw_u32 u = __shfl_up_sync(TW_FULL, incl, o);
            incl += lane >= o ? u : 0u;
        }
        if (i < end)
            bbase[i] = (tw_u32)(run + incl - v);
        run += __shfl_sync(TW_FULL, incl, 31);
    }
    if (tid == 0) {
        const tw_u64 total = stotal;
        const tw_u32 orw = cnt[NT];
        total_out[0] = (tw_u32)(total > pair_cap ? pair_cap : total);
        flag[0] = (ovf_total > ovf_cap || orw > orow_cap ? 1u : 0u) | (total > pair_cap ? 2u : 0u);
        flag[1] = (tw_u32)(total > 0xffffffffull ? 0xffffffffull : total);
        flag[2] = ovf_total;
        flag[3] = orw;
    }
}

// Pre-pass 3: writes each (chunk, group) list (layout: see the helpers at the top) and its
// offset (block base + the sizes of the block's earlier groups): one warp per list; cell counts
// prefix-summed in shared memory (overflowing cells count 0), entries fetched flat (32 per step,
// binary search over the cells), two passes (bucket counts, then placement by ballot ranks), then
// the pads.
template <int TPCM, int BW, int GT>
TW_KERNEL((BW * 32))
    tw_k_build(const tw_u32 *__restrict__ packed, int M, int NT, int W, int N, int CN, int NC,
                int TPC, int NG, const tw_u32 *__restrict__ bbase,
                const tw_u32 *__restrict__ sizes, tw_u32 *__restrict__ offsets,
                tw_u32 *__restrict__ desc, tw_u16 *__restrict__ gv,
                const tw_u32 *__restrict__ flag) {
    __shared__ tw_u32 spre[BW][GT * TPCM + 1];
    if (flag[0])
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long wid = (long long)blockIdx.x * BW + warp;
    if (wid >= (long long)NG * NC)
        return;
    tw_u32 *pre = spre[warp];
    const int c = (int)(wid / NG), G = (int)(wid - (long long)c * NG);
    const int t0 = c * TPC, nt = min(TPC, NT - t0), ncell = GT * nt;
    const int G8 = G & ~7, NB = (NG + 7) / 8;
    tw_u32 before = lane < G - G8 ? sizes[(long long)c * NG + G8 + lane] : 0u;
#pragma unroll
    for (int o = 4; o > 0; o >>= 1)
        before += __shfl_xor_sync(TW_FULL, before, o);
    const tw_u32 out = bbase[(long long)c * NB + (G >> 3)] + __shfl_sync(TW_FULL, before, 0);
    if (lane == 0)
        offsets[wid] = out;
    const tw_u32 size = sizes[wid], S = (tw_u32)(W - 1);
    const tw_u32 rows_c = (tw_u32)min(CN, N - c * CN), cstart = (tw_u32)(c * CN);
    tw_u32 carry = 0;
    for (int i0 = 0; i0 < ncell; i0 += 32) {
        const int i = i0 + lane;
        tw_u32 v = 0;
        if (i < ncell) {
            const int r = i / nt;
            const long long m = (long long)GT * G + r;
            if (m < M) {
                v = packed[(m * NT + t0 + (i - r * nt)) * W];
                v = v > S ? 0u : v;
            }
        }
        tw_u32 incl = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const tw_u32 u = __shfl_up_sync(TW_FULL, incl, o);
            incl += lane >= o ? u : 0u;
        }
        if (i < ncell)
            pre[i] = carry + incl - v;
        carry += __shfl_sync(TW_FULL, incl, 31);
    }
    __syncwarp();
    const tw_u32 n = carry;
    /* entry j -> chunk row (sanitised: a column outside the chunk becomes row 0 with g = 0),
       token column, gate bits */
    auto fetch = [&](tw_u32 j, tw_u32 &row, tw_u32 &tok, tw_u32 &g) {
        int lo = 0, hi = ncell - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (pre[mid] <= j)
                lo = mid;
            else
                hi = mid - 1;
        }
        const int r = lo / nt;
        const long long m = (long long)GT * G + r;
        const tw_u32 word = packed[(m * NT + t0 + (lo - r * nt)) * W + 1 + (j - pre[lo])];
        row = (word & 0xffffu) - cstart;
        g = word >> 16;
        if (row >= rows_c)
            row = 0, g = 0;
        tok = (tw_u32)r;
    };
    tw_u32 cnt8[8];
#pragma unroll
    for (int b = 0; b < 8; b++)
        cnt8[b] = 0;
    for (tw_u32 j0 = 0; j0 < n; j0 += 32) {
        const bool valid = j0 + lane < n;
        tw_u32 row = 0, tok = 0, g = 0;
        if (valid)
            fetch(j0 + lane, row, tok, g);
        const tw_u32 q = tw_bucket(row);
#pragma unroll
        for (int b = 0; b < 8; b++)
            cnt8[b] += __popc(__ballot_sync(TW_FULL, valid && q == (tw_u32)b));
    }
    tw_u32 CS[4], MC[4], ZC[4], OC[4];
    {
        tw_u32 a = 0;
#pragma unroll
        for (int cl = 0; cl < 4; cl++) {
            ZC[cl] = cnt8[2 * cl], OC[cl] = cnt8[2 * cl + 1];
            CS[cl] = a;
            MC[cl] = min(ZC[cl], OC[cl]);
            a += ZC[cl] + OC[cl];
        }
    }
    auto pick = [](const tw_u32(&arr)[4], tw_u32 i) {
        return i == 0 ? arr[0] : i == 1 ? arr[1] : i == 2 ? arr[2] : arr[3];
    };
    const tw_u32 lt = (1u << lane) - 1u;
    tw_u32 run8[8];
#pragma unroll
    for (int b = 0; b < 8; b++)
        run8[b] = 0;
    for (tw_u32 j0 = 0; j0 < n; j0 += 32) {
        const bool valid = j0 + lane < n;
        tw_u32 row = 0, tok = 0, g = 0;
        if (valid)
            fetch(j0 + lane, row, tok, g);
        const tw_u32 q = tw_bucket(row);
        tw_u32 mine = 0, base = 0;
#pragma unroll
        for (int b = 0; b < 8; b++) {
            const tw_u32 bal = __ballot_sync(TW_FULL, valid && q == (tw_u32)b);
            if (q == (tw_u32)b) {
                mine = bal;
                base = run8[b];
            }
            run8[b] += __popc(bal);
        }
        if (valid) {
            const tw_u32 cl = q >> 1, i = base + __popc(mine & lt);
            const tw_u32 si = pick(CS, cl) + tw_class_pos(i, q & 1u, pick(MC, cl));
            const tw_u32 slot = out + tw_slot_of(si, size);
            desc[slot] = tw_desc(row, tok);
            gv[slot] = (tw_u16)g;
        }
    }
    /* pads: the classes their 4-set lacks, bit 2 opposite to their phase-A partner */
    const tw_u32 S4 = size >> 2;
    auto class_of = [&](tw_u32 sj) {
        tw_u32 cl = 0;
#pragma unroll
        for (int k = 1; k < 4; k++)
            cl = CS[k] <= sj ? (tw_u32)k : cl;
        return cl;
    };
    for (tw_u32 si = n + lane; si < size; si += 32) {
        const tw_u32 s = si % S4, qp = si / S4;
        tw_u32 present = 0, nreal = 0;
#pragma unroll
        for (tw_u32 qq = 0; qq < 4; qq++) {
            const tw_u32 sj = s + qq * S4;
            if (sj < n) {
                present |= 1u << class_of(sj);
                nreal++;
            }
        }
        const tw_u32 k = qp - nreal; /* this pad takes the k-th missing class, ascending */
        tw_u32 cls = 0;
        for (tw_u32 cl = 0, seen = 0; cl < 4; cl++)
            if (!((present >> cl) & 1u)) {
                if (seen == k)
                    cls = cl;
                seen++;
            }
        const tw_u32 sip = (s ^ 1u) + qp * S4;
        tw_u32 b2 = s & 1u;
        if (sip < n) {
            const tw_u32 cl = class_of(sip), pos = sip - pick(CS, cl), mc = pick(MC, cl);
            const tw_u32 pb = pos < 2u * mc ? (pos & 1u) : (pick(ZC, cl) > pick(OC, cl) ? 0u : 1u);
            b2 = pb ^ 1u;
        }
        const tw_u32 slot = out + tw_slot_of(si, size);
        desc[slot] = tw_desc(cls | (b2 << 2), 0u);
        gv[slot] = 0;
    }
}


// Phase A chunk for one warp: full rounds of 16 slots, then (PADQ 8) a half round. Lane
// (g, t4) reads pieces t4 and t4 + 4 (k = 8 t4 .. +7 and 32 + 8 t4 .. +7 of the slice) of the
// rows in slots g and g + 8; the x fragments hold the same k columns (mma k order permuted
// identically). A group of GT = 8 NH tokens runs NH n8 mmas per A fragment (x fragments
// bx[j][8 h ..] for tokens 8 h .. 8 h + 7). Slot g's pair keeps D_h[g][tok & 7], h = tok >> 3;
// the lane with t4 = (tok & 7) >> 1 stores it.
// so: the staged list offsets (NGB + 1) and sizes (NGB) of the chunk; gl0: this warp's first
// group in the block; nj: its groups below NG; ra: the block's first offset.
template <int NH> __device__ __forceinline__ float tw_pa_pick(const float (&e)[NH][2][4], tw_u32 d,
                                                              int hi) {
    const int i = 2 * hi;
    constexpr bool one = (TW_XV & 4) != 0; /* one mma chain: e[h][1] unused */
    const float s0 = one ? e[0][0][i] : e[0][0][i] + e[0][1][i];
    const float s1 = one ? e[0][0][i + 1] : e[0][0][i + 1] + e[0][1][i + 1];
    if constexpr (NH == 1) {
        return (d & 1u) ? s1 : s0;
    } else {
        const float t0 = one ? e[1][0][i] : e[1][0][i] + e[1][1][i];
        const float t1 = one ? e[1][0][i + 1] : e[1][0][i + 1] + e[1][1][i + 1];
        return (d & 8u) ? ((d & 1u) ? t1 : t0) : ((d & 1u) ? s1 : s0);
    }
}
template <int DT, int GPW, bool SH, int PADQ, int NGB, int PF, int NH>
__device__ __forceinline__ void tw_pa_chunk(const tw_u32 (&bx)[GPW][8 * NH], tw_u32 so, tw_u32 gl0,
                                             int nj, tw_u32 ra, tw_u32 dsh, const tw_u32 *dgl,
                                             tw_u32 buf, float *po, int g, int t4) {
    const tw_u32 t4s = (tw_u32)t4 << 4, ut4 = (tw_u32)t4, ug = (tw_u32)g, t2 = ut4 << 1;
    float *const pg = po + ug; /* XV & 2: this lane's slot g of the chunk's lists */
    /* PF: the next group's size and offset, and the next round's descriptors, are loaded one
       step ahead (shared memory; the loads stay inside the staging buffer) */
    tw_u32 szn = 0, on = 0;
    if (PF) {
        szn = tw_lds32(so + 4u * (NGB + 1 + gl0));
        on = tw_lds32(so + 4u * gl0);
    }
#pragma unroll
    for (int j = 0; j < GPW; j++) {
        if (j >= nj)
            break;
        const tw_u32 szj = PF ? szn : tw_lds32(so + 4u * (NGB + 1 + gl0 + j));
        const tw_u32 nfull = szj >> 4;
        tw_u32 o = (PF ? on : tw_lds32(so + 4u * (gl0 + j))) - ra;
        if (PF && j + 1 < GPW) {
            szn = tw_lds32(so + 4u * (NGB + 1 + gl0 + j + 1));
            on = tw_lds32(so + 4u * (gl0 + j + 1));
        }
        tw_u32 dan = 0, dbn = 0;
        if (PF && SH) {
            dan = tw_lds32(dsh + 4u * (o + ug));
            dbn = tw_lds32(dsh + 4u * (o + ug + 8u));
        }
        for (tw_u32 r = 0; r < nfull; r++, o += 16) {
            tw_u32 da, db;
            if (PF && SH) {
                da = dan;
                db = dbn;
                const tw_u32 onx = ((TW_XV & 8) || 16u * (r + 1) < szj) ? o + 16u : o;
                dan = tw_lds32(dsh + 4u * (onx + ug));
                dbn = tw_lds32(dsh + 4u * (onx + ug + 8u));
            } else if (SH) {
                da = tw_lds32(dsh + 4u * (o + ug));
                db = tw_lds32(dsh + 4u * (o + ug + 8u));
            } else {
                da = dgl[o + ug];
                db = dgl[o + ug + 8u];
            }
            const tw_u32 oa = (da ^ t4s) & ~15u, ob = (db ^ t4s) & ~15u;
            const uint4 a0 = tw_lds128(buf + oa), a1 = tw_lds128(buf + (oa ^ 64u));
            const uint4 b0 = tw_lds128(buf + ob), b1 = tw_lds128(buf + (ob ^ 64u));
            float e[NH][2][4];
#pragma unroll
            for (int h = 0; h < NH; h++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    e[h][0][i] = e[h][1][i] = 0.0f;
            const tw_u32 af[4][4] = {{a0.x, b0.x, a0.y, b0.y},
                                     {a0.z, b0.z, a0.w, b0.w},
                                     {a1.x, b1.x, a1.y, b1.y},
                                     {a1.z, b1.z, a1.w, b1.w}};
#pragma unroll
            for (int ks = 0; ks < 4; ks++)
#pragma unroll
                for (int h = 0; h < NH; h++)
                    tw_mma<DT>(e[h][(TW_XV & 4) ? 0 : (ks & 1)], af[ks], bx[j][8 * h + 2 * ks],
                               bx[j][8 * h + 2 * ks + 1]);
            const float va = tw_pa_pick<NH>(e, da, 0), vb = tw_pa_pick<NH>(e, db, 1);
            if (TW_XV & 2) { /* one 32-bit offset per round; slot g + 8 at +32 bytes */
                float *const pp = pg + o;
                tw_stgz(pp, va, (da ^ t2) & 6u);
                tw_stgz(pp + 8, vb, (db ^ t2) & 6u);
            } else {
                tw_stgp(po + o + ug, va, ((da >> 1) & 3u) == ut4 ? 1u : 0u);
                tw_stgp(po + o + ug + 8u, vb, ((db >> 1) & 3u) == ut4 ? 1u : 0u);
            }
        }
        if (PADQ == 8 && (szj & 8u)) { /* half round: rows 0..7 = slots o .. o + 7 */
            const tw_u32 da = (PF && SH) ? dan : SH ? tw_lds32(dsh + 4u * (o + ug)) : dgl[o + ug];
            const tw_u32 oa = (da ^ t4s) & ~15u;
            const uint4 a0 = tw_lds128(buf + oa), a1 = tw_lds128(buf + (oa ^ 64u));
            float e[NH][2][4];
#pragma unroll
            for (int h = 0; h < NH; h++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    e[h][0][i] = e[h][1][i] = 0.0f;
            const tw_u32 af[4][4] = {{a0.x, 0u, a0.y, 0u},
                                     {a0.z, 0u, a0.w, 0u},
                                     {a1.x, 0u, a1.y, 0u},
                                     {a1.z, 0u, a1.w, 0u}};
#pragma unroll
            for (int ks = 0; ks < 4; ks++)
#pragma unroll
                for (int h = 0; h < NH; h++)
                    tw_mma<DT>(e[h][(TW_XV & 4) ? 0 : (ks & 1)], af[ks], bx[j][8 * h + 2 * ks],
                               bx[j][8 * h + 2 * ks + 1]);
            const float va = tw_pa_pick<NH>(e, da, 0);
            if (TW_XV & 2)
                tw_stgz(pg + o, va, (da ^ t2) & 6u);
            else
                tw_stgp(po + o + ug, va, ((da >> 1) & 3u) == ut4);
        }
    }
}

// Phase A (gated): partial u over one 64-column slice for every slot of a block of NW warps x
// GPW groups x GT tokens. Shared memory: two weight chunks (2 x CN x 128 B), two staging buffers
// (DCAP descriptors, the block's list offsets and sizes), the (first, end) offset table of all
// chunks (read once at the start, so no chunk waits on a global load). A chunk whose block region
// holds more than DCAP slots reads its descriptors from global memory instead.
template <int DT, int CN, int GPW, int DCAP, int PADQ, int ST, int NW, int PF, int GT>
TW_KERNEL((NW * 32, 1))
    tw_k_phase_a(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wu, int M, int K, int N,
                  int NG, int NC, const tw_u32 *__restrict__ desc,
                  const tw_u32 *__restrict__ offsets, const tw_u32 *__restrict__ sizes,
                  float *__restrict__ partial, tw_u32 pstride, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    constexpr int NGB = NW * GPW, SB = TW_SB(DCAP, 4, NGB), NTHR = NW * 32;
    if (flag[0])
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int s = blockIdx.y, k0 = s * TW_KW;
    const int GB = blockIdx.x * NGB, GE = min(GB + NGB, NG);
    const int G0 = GB + warp * GPW;
    if (TW_XV & 16) /* chunk 0's weights need no list data: in flight before anything else */
        tw_load_chunk<CN, NTHR>(tw_smem_addr(tw_smem), wu, 0, N, K, k0);
    {
        tw_u32 *sre = (tw_u32 *)(tw_smem + ST * CN * 128 + ST * SB);
        for (int i = threadIdx.x; i < NC; i += NTHR) {
            sre[2 * i] = offsets[(long long)i * NG + GB];
            sre[2 * i + 1] = offsets[(long long)i * NG + GE];
        }
    }
    constexpr int NH = GT / 8;
    tw_u32 bx[GPW][8 * NH];
#pragma unroll
    for (int j = 0; j < GPW; j++)
#pragma unroll
        for (int h = 0; h < NH; h++) {
            const int row = min((G0 + j) * GT + 8 * h + g, M - 1);
            const tw_u16 *p = x + (long long)row * K + k0 + 8 * t4;
            const uint4 v0 = *(const uint4 *)p, v1 = *(const uint4 *)(p + 32);
            bx[j][8 * h + 0] = v0.x, bx[j][8 * h + 1] = v0.y, bx[j][8 * h + 2] = v0.z;
            bx[j][8 * h + 3] = v0.w, bx[j][8 * h + 4] = v1.x, bx[j][8 * h + 5] = v1.y;
            bx[j][8 * h + 6] = v1.z, bx[j][8 * h + 7] = v1.w;
        }
    __syncthreads();
    const tw_u32 sbase = tw_smem_addr(tw_smem), stb = sbase + ST * CN * 128, sre = stb + ST * SB;
    float *pout = partial + (long long)s * pstride;
    auto stage = [&](int c) {
        const int b = c % ST;
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        const tw_u32 sb = stb + b * SB;
        if (!(TW_XV & 16) || c > 0)
            tw_load_chunk<CN, NTHR>(sbase + b * CN * 128, wu, c, N, K, k0);
        if (rn <= DCAP)
            tw_load_bytes<NTHR>(sb, desc + ra, rn / 4);
        tw_stage_lists<NGB, NTHR>(sb + DCAP * 4, offsets, sizes, (long long)c * NG + GB, GE - GB);
    };
#pragma unroll
    for (int i = 0; i < ST - 1; i++) {
        if (i < NC)
            stage(i);
        tw_cp_commit();
    }
    for (int c = 0; c < NC; c++) {
        if (c + ST - 1 < NC)
            stage(c + ST - 1);
        tw_cp_commit();
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        tw_cp_wait<ST - 1>();
        __syncthreads();
        const tw_u32 sb = stb + (c % ST) * SB, so = sb + DCAP * 4;
        const int nj = min(GPW, NG - G0);
        const tw_u32 gl0 = (tw_u32)(warp * GPW);
        const tw_u32 buf = sbase + (c % ST) * CN * 128;
        if (rn <= DCAP)
            tw_pa_chunk<DT, GPW, true, PADQ, NGB, PF, NH>(bx, so, gl0, nj, ra, sb, nullptr, buf,
                                                         pout + ra, g, t4);
        else
            tw_pa_chunk<DT, GPW, false, PADQ, NGB, PF, NH>(bx, so, gl0, nj, ra, 0u, desc + ra, buf,
                                                          pout + ra, g, t4);
        __syncthreads();
    }
}


// Phase B chunk for one warp. Lane (g, t4) owns the slots 4 t4 .. 4 t4 + 3 of a round
// (k = 2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9 of the mma) and reads logical piece pib(g) (8 output
// columns) of each slot's Wd row with one 16-byte load; prmt pairs the two slots of a k pair.
// Output column of mma row g in m-tile mt: 8 pib(g) + 2 mt, of row g + 8: that + 1, so a lane's
// accumulators cover 8 consecutive columns of its two tokens. A group of GT = 8 NH tokens runs
// NH n8 mmas per A fragment: B of n-tile h = h at the slot's token column (tokens 8 h .. 8 h + 7):
// gated, the hi and lo halves (two mmas; fp16 scaled per round); non-gated, g itself.
template <int DT, int GATED, int GPW, bool SH, int PADQ, int NGB, int PF, int NH>
__device__ __forceinline__ void tw_pb_chunk(float (&acc)[GPW][NH][4][4], tw_u32 so, tw_u32 gl0,
                                             int nj, tw_u32 ra, tw_u32 dsh, tw_u32 vsh,
                                             const tw_u32 *dgl, const void *vgl,
                                             const tw_u32 *rexp, tw_u32 buf, int g, int t4) {
    const tw_u32 ug = (tw_u32)g, pis = tw_pib(ug) << 4, ut4 = (tw_u32)t4;
    /* PF: as in phase A, the next group's size and offset and the next round's descriptors are
       loaded one step ahead */
    tw_u32 szn = 0, on = 0;
    if (PF) {
        szn = tw_lds32(so + 4u * (NGB + 1 + gl0));
        on = tw_lds32(so + 4u * gl0);
    }
#pragma unroll
    for (int j = 0; j < GPW; j++) {
        if (j >= nj)
            break;
        const tw_u32 szj = PF ? szn : tw_lds32(so + 4u * (NGB + 1 + gl0 + j));
        const tw_u32 nfull = szj >> 4;
        tw_u32 o = (PF ? on : tw_lds32(so + 4u * (gl0 + j))) - ra;
        if (PF && j + 1 < GPW) {
            szn = tw_lds32(so + 4u * (NGB + 1 + gl0 + j + 1));
            on = tw_lds32(so + 4u * (gl0 + j + 1));
        }
        uint4 Dn = make_uint4(0u, 0u, 0u, 0u);
        if (PF && SH && nfull)
            Dn = tw_lds128(dsh + 4u * (o + 4u * ut4));
        for (tw_u32 r = 0; r < nfull; r++, o += 16) {
            const tw_u32 q = o + 4u * ut4;
            uint4 D;
            if (PF && SH) {
                D = Dn;
                const tw_u32 qn = ((TW_XV & 8) || r + 1 < nfull) ? q + 16u : q;
                Dn = tw_lds128(dsh + 4u * qn);
            } else {
                D = SH ? tw_lds128(dsh + 4u * q) : *(const uint4 *)(dgl + q);
            }
            const tw_u32 d[4] = {D.x, D.y, D.z, D.w};
            tw_u32 L[4][4];
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                const uint4 v = tw_lds128(buf + ((d[jj] ^ pis) & ~15u));
                L[jj][0] = v.x, L[jj][1] = v.y, L[jj][2] = v.z, L[jj][3] = v.w;
            }
            if constexpr (GATED) {
                const uint4 H = SH ? tw_lds128(vsh + 4u * q) : *(const uint4 *)((const tw_u32 *)vgl + q);
                tw_u32 bh0[NH], bl0[NH], bh1[NH], bl1[NH];
#pragma unroll
                for (int h = 0; h < NH; h++) {
                    const tw_u32 tg = ug + 8u * h;
                    if (TW_XV & 1) { /* hl paired: H = hi01, lo01, hi23, lo23 */
                        tw_u32 k01, k23;
                        tw_tokmask4(d[0], d[1], d[2], d[3], tg * 0x01010101u, k01, k23);
                        bh0[h] = H.x & k01, bl0[h] = H.y & k01, bh1[h] = H.z & k23, bl1[h] = H.w & k23;
                    } else {
                        const tw_u32 m0 = (d[0] & 15u) == tg ? H.x : 0u, m1 = (d[1] & 15u) == tg ? H.y : 0u;
                        const tw_u32 m2 = (d[2] & 15u) == tg ? H.z : 0u, m3 = (d[3] & 15u) == tg ? H.w : 0u;
                        bh0[h] = tw_prmt2(m0, m1, 0x7632u), bl0[h] = tw_prmt2(m0, m1, 0x5410u);
                        bh1[h] = tw_prmt2(m2, m3, 0x7632u), bl1[h] = tw_prmt2(m2, m3, 0x5410u);
                    }
                }
                float sinv = 1.0f;
                if constexpr (DT == 1)
                    sinv = tw_ex_inv<DT>(rexp[o >> 4]);
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a[4] = {tw_prmt2(L[0][mt], L[1][mt], 0x5410u),
                                         tw_prmt2(L[0][mt], L[1][mt], 0x7632u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x5410u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x7632u)};
#pragma unroll
                    for (int h = 0; h < NH; h++) {
                        if constexpr (DT == 0) {
                            tw_mma<DT>(acc[j][h][mt], a, bh0[h], bh1[h]);
                            tw_mma<DT>(acc[j][h][mt], a, bl0[h], bl1[h]);
                        } else {
                            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                            tw_mma<DT>(t, a, bh0[h], bh1[h]);
                            tw_mma<DT>(t, a, bl0[h], bl1[h]);
#pragma unroll
                            for (int e = 0; e < 4; e++)
                                acc[j][h][mt][e] = fmaf(t[e], sinv, acc[j][h][mt][e]);
                        }
                    }
                }
            } else {
                const uint2 Gv = SH ? tw_lds64(vsh + 2u * q) : *(const uint2 *)((const tw_u16 *)vgl + q);
                tw_u32 b0[NH], b1[NH];
#pragma unroll
                for (int h = 0; h < NH; h++) {
                    const tw_u32 tg = ug + 8u * h;
                    tw_u32 k0, k1;
                    if (TW_XV & 1) {
                        tw_tokmask4(d[0], d[1], d[2], d[3], tg * 0x01010101u, k0, k1);
                    } else {
                        k0 = ((d[0] & 15u) == tg ? 0xffffu : 0u) | ((d[1] & 15u) == tg ? 0xffff0000u : 0u);
                        k1 = ((d[2] & 15u) == tg ? 0xffffu : 0u) | ((d[3] & 15u) == tg ? 0xffff0000u : 0u);
                    }
                    b0[h] = Gv.x & k0, b1[h] = Gv.y & k1;
                }
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a[4] = {tw_prmt2(L[0][mt], L[1][mt], 0x5410u),
                                         tw_prmt2(L[0][mt], L[1][mt], 0x7632u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x5410u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x7632u)};
#pragma unroll
                    for (int h = 0; h < NH; h++)
                        tw_mma<DT>(acc[j][h][mt], a, b0[h], b1[h]);
                }
            }
        }
        if (PADQ == 8 && (szj & 8u)) { /* half round: lane t4 owns slots 2 t4, 2 t4 + 1 (k8 mma) */
            const tw_u32 q = o + 2u * ut4;
            const uint2 D = SH ? tw_lds64(dsh + 4u * q) : *(const uint2 *)(dgl + q);
            const uint4 v0 = tw_lds128(buf + ((D.x ^ pis) & ~15u));
            const uint4 v1 = tw_lds128(buf + ((D.y ^ pis) & ~15u));
            const tw_u32 L0[4] = {v0.x, v0.y, v0.z, v0.w}, L1[4] = {v1.x, v1.y, v1.z, v1.w};
            if constexpr (GATED) {
                const uint2 H = SH ? tw_lds64(vsh + 4u * q) : *(const uint2 *)((const tw_u32 *)vgl + q);
                tw_u32 bh[NH], bl[NH];
#pragma unroll
                for (int h = 0; h < NH; h++) {
                    const tw_u32 tg = ug + 8u * h;
                    if (TW_XV & 1) {
                        const tw_u32 k = tw_tokmask2(D.x, D.y, tg * 0x01010101u);
                        bh[h] = H.x & k, bl[h] = H.y & k;
                    } else {
                        const tw_u32 m0 = (D.x & 15u) == tg ? H.x : 0u, m1 = (D.y & 15u) == tg ? H.y : 0u;
                        bh[h] = tw_prmt2(m0, m1, 0x7632u), bl[h] = tw_prmt2(m0, m1, 0x5410u);
                    }
                }
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a0 = tw_prmt2(L0[mt], L1[mt], 0x5410u);
                    const tw_u32 a1 = tw_prmt2(L0[mt], L1[mt], 0x7632u);
#pragma unroll
                    for (int h = 0; h < NH; h++) {
                        tw_mma8<DT>(acc[j][h][mt], a0, a1, bh[h]);
                        tw_mma8<DT>(acc[j][h][mt], a0, a1, bl[h]);
                    }
                }
            } else {
                const tw_u32 Gv = SH ? tw_lds32(vsh + 2u * q) : *(const tw_u32 *)((const tw_u16 *)vgl + q);
                tw_u32 b0[NH];
#pragma unroll
                for (int h = 0; h < NH; h++) {
                    const tw_u32 tg = ug + 8u * h;
                    const tw_u32 k0 = (TW_XV & 1) ? tw_tokmask2(D.x, D.y, tg * 0x01010101u)
                                                  : ((D.x & 15u) == tg ? 0xffffu : 0u) |
                                                        ((D.y & 15u) == tg ? 0xffff0000u : 0u);
                    b0[h] = Gv & k0;
                }
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a0 = tw_prmt2(L0[mt], L1[mt], 0x5410u);
                    const tw_u32 a1 = tw_prmt2(L0[mt], L1[mt], 0x7632u);
#pragma unroll
                    for (int h = 0; h < NH; h++)
                        tw_mma8<DT>(acc[j][h][mt], a0, a1, b0[h]);
                }
            }
        }
    }
}

// Phase B, gated bf16, staged lists (IL = 1): the groups of a warp taken two at a time, one full
// round of each per step, so that two independent accumulator chains are in flight. The group
// whose list has fewer rounds reads valid descriptors (slots 0..15 of the staging buffer) with its
// h masked to zero: its mmas add exact zeros. Half rounds as in tw_pb_chunk.
__device__ __forceinline__ void tw_pb_round(float (&a)[4][4], uint4 D, uint4 H, bool on, tw_u32 buf,
                                            tw_u32 ug, tw_u32 pis) {
    const tw_u32 d[4] = {D.x, D.y, D.z, D.w};
    tw_u32 L[4][4];
#pragma unroll
    for (int jj = 0; jj < 4; jj++) {
        const uint4 v = tw_lds128(buf + ((d[jj] ^ pis) & ~15u));
        L[jj][0] = v.x, L[jj][1] = v.y, L[jj][2] = v.z, L[jj][3] = v.w;
    }
    tw_u32 bh0, bl0, bh1, bl1;
    if (TW_XV & 1) {
        tw_u32 k01, k23;
        tw_tokmask4(d[0], d[1], d[2], d[3], ug * 0x01010101u, k01, k23);
        k01 = on ? k01 : 0u, k23 = on ? k23 : 0u;
        bh0 = H.x & k01, bl0 = H.y & k01, bh1 = H.z & k23, bl1 = H.w & k23;
    } else {
        const tw_u32 m0 = on && (d[0] & 7u) == ug ? H.x : 0u, m1 = on && (d[1] & 7u) == ug ? H.y : 0u;
        const tw_u32 m2 = on && (d[2] & 7u) == ug ? H.z : 0u, m3 = on && (d[3] & 7u) == ug ? H.w : 0u;
        bh0 = tw_prmt2(m0, m1, 0x7632u), bl0 = tw_prmt2(m0, m1, 0x5410u);
        bh1 = tw_prmt2(m2, m3, 0x7632u), bl1 = tw_prmt2(m2, m3, 0x5410u);
    }
#pragma unroll
    for (int mt = 0; mt < 4; mt++) {
        const tw_u32 af[4] = {tw_prmt2(L[0][mt], L[1][mt], 0x5410u), tw_prmt2(L[0][mt], L[1][mt], 0x7632u),
                              tw_prmt2(L[2][mt], L[3][mt], 0x5410u), tw_prmt2(L[2][mt], L[3][mt], 0x7632u)};
        tw_mma<0>(a[mt], af, bh0, bh1);
        tw_mma<0>(a[mt], af, bl0, bl1);
    }
}
__device__ __forceinline__ void tw_pb_half(float (&a)[4][4], tw_u32 q, tw_u32 dsh, tw_u32 vsh,
                                           tw_u32 buf, tw_u32 ug, tw_u32 pis) {
    const uint2 D = tw_lds64(dsh + 4u * q);
    const uint4 v0 = tw_lds128(buf + ((D.x ^ pis) & ~15u));
    const uint4 v1 = tw_lds128(buf + ((D.y ^ pis) & ~15u));
    const tw_u32 L0[4] = {v0.x, v0.y, v0.z, v0.w}, L1[4] = {v1.x, v1.y, v1.z, v1.w};
    const uint2 H = tw_lds64(vsh + 4u * q);
    tw_u32 bh, bl;
    if (TW_XV & 1) {
        const tw_u32 k = tw_tokmask2(D.x, D.y, ug * 0x01010101u);
        bh = H.x & k, bl = H.y & k;
    } else {
        const tw_u32 m0 = (D.x & 7u) == ug ? H.x : 0u, m1 = (D.y & 7u) == ug ? H.y : 0u;
        bh = tw_prmt2(m0, m1, 0x7632u), bl = tw_prmt2(m0, m1, 0x5410u);
    }
#pragma unroll
    for (int mt = 0; mt < 4; mt++) {
        const tw_u32 a0 = tw_prmt2(L0[mt], L1[mt], 0x5410u);
        const tw_u32 a1 = tw_prmt2(L0[mt], L1[mt], 0x7632u);
        tw_mma8<0>(a[mt], a0, a1, bh);
        tw_mma8<0>(a[mt], a0, a1, bl);
    }
}
template <int GPW, int PADQ, int NGB>
__device__ __forceinline__ void tw_pb_pairs(float (&acc)[GPW][1][4][4], tw_u32 so, tw_u32 gl0, int nj,
                                            tw_u32 ra, tw_u32 dsh, tw_u32 vsh, tw_u32 buf, int g,
                                            int t4) {
    static_assert(GPW % 2 == 0, "tw_pb_pairs: GPW must be even");
    const tw_u32 ug = (tw_u32)g, pis = tw_pib(ug) << 4, q4 = 4u * (tw_u32)t4;
#pragma unroll
    for (int j = 0; j < GPW; j += 2) {
        if (j >= nj)
            break;
        const bool two = j + 1 < nj;
        const tw_u32 sz0 = tw_lds32(so + 4u * (NGB + 1 + gl0 + j));
        const tw_u32 o0 = tw_lds32(so + 4u * (gl0 + j)) - ra;
        const tw_u32 sz1 = two ? tw_lds32(so + 4u * (NGB + 1 + gl0 + j + 1)) : 0u;
        const tw_u32 o1 = two ? tw_lds32(so + 4u * (gl0 + j + 1)) - ra : 0u;
        const tw_u32 n0 = sz0 >> 4, n1 = sz1 >> 4, n = n0 > n1 ? n0 : n1;
        for (tw_u32 r = 0; r < n; r++) {
            const bool on0 = r < n0, on1 = r < n1;
            const tw_u32 qa = on0 ? o0 + 16u * r + q4 : q4, qb = on1 ? o1 + 16u * r + q4 : q4;
            const uint4 Da = tw_lds128(dsh + 4u * qa), Db = tw_lds128(dsh + 4u * qb);
            const uint4 Ha = tw_lds128(vsh + 4u * qa), Hb = tw_lds128(vsh + 4u * qb);
            tw_pb_round(acc[j][0], Da, Ha, on0, buf, ug, pis);
            tw_pb_round(acc[j + 1][0], Db, Hb, on1, buf, ug, pis);
        }
        if (PADQ == 8 && (sz0 & 8u))
            tw_pb_half(acc[j][0], o0 + 16u * n0 + 2u * (tw_u32)t4, dsh, vsh, buf, ug, pis);
        if (PADQ == 8 && (sz1 & 8u))
            tw_pb_half(acc[j + 1][0], o1 + 16u * n1 + 2u * (tw_u32)t4, dsh, vsh, buf, ug, pis);
    }
}

// Phase B: y^T[64-column slice x GT tokens] per group, accumulated over all chunks in
// registers; overflowing rows add their dense part (ovf_y) once at the end; y leaves in 16-byte
// stores. Shared memory: two weight chunks, two staging buffers (DCAP descriptors, DCAP hl words
// (gated) or gate values, the block's list offsets and sizes), the (first, end) offset table of
// all chunks.
template <int DT, int GATED, int CN, int GPW, int DCAP, int PADQ, int ST, int NW, int PF, int IL,
          int GT>
TW_KERNEL((NW * 32, 1))
    tw_k_phase_b(const tw_u16 *__restrict__ wd, int M, int K, int N, int NG, int NC,
                  const tw_u32 *__restrict__ desc, const tw_u16 *__restrict__ gv,
                  const tw_u32 *__restrict__ hl, const tw_u32 *__restrict__ rexp,
                  const tw_u32 *__restrict__ offsets, const tw_u32 *__restrict__ sizes,
                  const tw_u32 *__restrict__ orow_idx, const float *__restrict__ ovf_y,
                  long long ystride, tw_u16 *__restrict__ y, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    constexpr int VB = GATED ? 4 : 2; /* bytes per slot of the value array */
    constexpr int NGB = NW * GPW, SB = TW_SB(DCAP, 4 + VB, NGB), NTHR = NW * 32;
    if (flag[0])
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int s = blockIdx.y, k0 = s * TW_KW;
    const int GB = blockIdx.x * NGB, GE = min(GB + NGB, NG);
    const int G0 = GB + warp * GPW;
    if (TW_XV & 16) /* as in phase A: chunk 0's weights first */
        tw_load_chunk<CN, NTHR>(tw_smem_addr(tw_smem), wd, 0, N, K, k0);
    {
        tw_u32 *sre = (tw_u32 *)(tw_smem + ST * CN * 128 + ST * SB);
        for (int i = threadIdx.x; i < NC; i += NTHR) {
            sre[2 * i] = offsets[(long long)i * NG + GB];
            sre[2 * i + 1] = offsets[(long long)i * NG + GE];
        }
    }
    constexpr int NH = GT / 8;
    float acc[GPW][NH][4][4];
#pragma unroll
    for (int j = 0; j < GPW; j++)
#pragma unroll
        for (int h = 0; h < NH; h++)
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
                acc[j][h][mt][0] = acc[j][h][mt][1] = acc[j][h][mt][2] = acc[j][h][mt][3] = 0.0f;
    __syncthreads();
    const tw_u32 sbase = tw_smem_addr(tw_smem), stb = sbase + ST * CN * 128, sre = stb + ST * SB;
    auto stage = [&](int c) {
        const int b = c % ST;
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        const tw_u32 sb = stb + b * SB;
        if (!(TW_XV & 16) || c > 0)
            tw_load_chunk<CN, NTHR>(sbase + b * CN * 128, wd, c, N, K, k0);
        if (rn <= DCAP) {
            tw_load_bytes<NTHR>(sb, desc + ra, rn / 4);
            if (GATED)
                tw_load_bytes<NTHR>(sb + DCAP * 4, hl + ra, rn / 4);
            else
                tw_load_bytes<NTHR>(sb + DCAP * 4, gv + ra, rn / 8);
        }
        tw_stage_lists<NGB, NTHR>(sb + DCAP * (4 + VB), offsets, sizes, (long long)c * NG + GB,
                                 GE - GB);
    };
#pragma unroll
    for (int i = 0; i < ST - 1; i++) {
        if (i < NC)
            stage(i);
        tw_cp_commit();
    }
    for (int c = 0; c < NC; c++) {
        if (c + ST - 1 < NC)
            stage(c + ST - 1);
        tw_cp_commit();
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        tw_cp_wait<ST - 1>();
        __syncthreads();
        const tw_u32 buf = sbase + (c % ST) * CN * 128, sb = stb + (c % ST) * SB;
        const tw_u32 so = sb + DCAP * (4 + VB), gl0 = (tw_u32)(warp * GPW);
        const int nj = min(GPW, NG - G0);
        const void *vgl = GATED ? (const void *)(hl + ra) : (const void *)(gv + ra);
        const tw_u32 *rx = (DT == 1 && GATED) ? rexp + (ra >> 4) : rexp;
        if constexpr (IL && NH == 1 && DT == 0 && GATED && GPW % 2 == 0) {
            if (rn <= DCAP)
                tw_pb_pairs<GPW, PADQ, NGB>(acc, so, gl0, nj, ra, sb, sb + DCAP * 4, buf, g, t4);
            else
                tw_pb_chunk<DT, GATED, GPW, false, PADQ, NGB, PF, NH>(acc, so, gl0, nj, ra, 0u, 0u,
                                                                     desc + ra, vgl, rx, buf, g, t4);
        } else if (rn <= DCAP)
            tw_pb_chunk<DT, GATED, GPW, true, PADQ, NGB, PF, NH>(acc, so, gl0, nj, ra, sb,
                                                                sb + DCAP * 4, nullptr, vgl, rx,
                                                                buf, g, t4);
        else
            tw_pb_chunk<DT, GATED, GPW, false, PADQ, NGB, PF, NH>(acc, so, gl0, nj, ra, 0u, 0u,
                                                                 desc + ra, vgl, rx, buf, g, t4);
        __syncthreads();
    }
    const int pc = k0 + 8 * (int)tw_pib((tw_u32)g);
    tw_u32 ois[GPW][2 * NH]; /* XV & 16: every row's orow_idx loaded at once (one latency) */
    if (TW_XV & 16) {
#pragma unroll
        for (int j = 0; j < GPW; j++)
#pragma unroll
            for (int hf = 0; hf < 2 * NH; hf++) {
                const long long m = (long long)(G0 + j) * GT + 8 * (hf >> 1) + 2 * t4 + (hf & 1);
                ois[j][hf] = m < M ? orow_idx[m] : TW_NONE;
            }
    }
#pragma unroll
    for (int j = 0; j < GPW; j++) {
#pragma unroll
        for (int hf = 0; hf < 2 * NH; hf++) {
            const int h = hf >> 1, e = hf & 1;
            const long long m = (long long)(G0 + j) * GT + 8 * h + 2 * t4 + e;
            if (m < M) {
                float v[8];
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    v[2 * mt] = acc[j][h][mt][e];
                    v[2 * mt + 1] = acc[j][h][mt][2 + e];
                }
                const tw_u32 oi = (TW_XV & 16) ? ois[j][hf] : orow_idx[m];
                if (oi != TW_NONE) { /* the parts of ovf_down, in order */
#pragma unroll
                    for (int part = 0; part < TW_OVP; part++) {
                        const float4 *py =
                            (const float4 *)(ovf_y + part * ystride + (long long)oi * K + pc);
                        const float4 f0 = py[0], f1 = py[1];
                        v[0] += f0.x, v[1] += f0.y, v[2] += f0.z, v[3] += f0.w;
                        v[4] += f1.x, v[5] += f1.y, v[6] += f1.z, v[7] += f1.w;
                    }
                }
                uint4 o;
                o.x = tw_pack2<DT>(v[0], v[1]);
                o.y = tw_pack2<DT>(v[2], v[3]);
                o.z = tw_pack2<DT>(v[4], v[5]);
                o.w = tw_pack2<DT>(v[6], v[7]);
                *(uint4 *)(y + m * K + pc) = o;
            }
        }
    }
}


]==]

cuda [==[
#define TW_NG(M) (((M) + ${GT - 1}) / ${GT})
// Programmatic dependent launch, rule (a)-(c) of the header: first statement of every kernel.
__device__ __forceinline__ void tw_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// The u64 total of active values prep accumulates (cnt is 256-byte aligned, NT+4 words).
#define TW_CNT_TOTAL(cnt) ((tw_u64 *)((cnt) + ((${NT} + 2) & ~1)))
extern "C" __device__ const unsigned int twell_ffn_cfg[23] = {${CN}, ${GPWA}, ${GPWB}, ${DCAPA},
    ${DCAPB}, ${SMEM_A}, ${SMEM_B}, ${SMEM_GU}, ${SMEM_DOWN}, ${BW}, ${NC}, ${TPC}, ${PADQ},
    ${GATED}, ${STAGES}, ${NWA}, ${NWB}, ${PF}, ${IL}, ${GT}, ${GU_BPS}, ${GU_THR}, ${DOWN_BPS}};

extern "C" __global__ void __launch_bounds__(256)
twell_ffn_prep(const unsigned int *packed, int M, unsigned int *cnt, unsigned int *ovf_rows,
               unsigned int *ovf_slot, unsigned int *orow_idx, unsigned int *orows,
               unsigned int *sizes, unsigned int *bsum) {
    tw_pdl_enter();
    tw_k_prep<${PADQ}, ${NC}, ${GT}>(packed, M, ${NT}, ${S.W}, ${NC}, ${TPC}, TW_NG(M), cnt, ovf_rows,
                               ovf_slot, orow_idx, orows, sizes, bsum);
}
extern "C" __global__ void __launch_bounds__(1024)
twell_ffn_scan(const unsigned int *bsum, int M, unsigned int *bbase, unsigned int *cnt,
               unsigned int *ovf_base, unsigned int *item_base, unsigned int *flag,
               unsigned int *offsets, unsigned int pair_cap, unsigned int ovf_cap,
               unsigned int orow_cap, unsigned long long *stats, int stats_add,
               unsigned int *hflag) {
    tw_pdl_enter();
    tw_k_scan(bsum, ${NC} * ((TW_NG(M) + 7) / 8), bbase, cnt, ${NT}, ${S.T // 64}, ovf_base,
               item_base, flag, offsets + TW_NG(M) * ${NC}, pair_cap, ovf_cap, orow_cap);
    __syncthreads(); /* every read of cnt is done */
    if (threadIdx.x == 0 && stats) {
        stats[0] = (stats_add ? stats[0] : 0ull) + *TW_CNT_TOTAL(cnt);
        stats[1] = 0ull;
    }
    if (threadIdx.x == 0 && hflag) { /* flag is final here (thread 0 of the scan wrote it) */
        for (int i = 0; i < 4; i++)
            hflag[i] = flag[i];
    }
    if (threadIdx.x == 0 && (stats || hflag))
        __threadfence_system(); /* either may be host memory */
    __syncthreads();
    for (int i = threadIdx.x; i < ${NT + 4}; i += blockDim.x) /* for the next call's prep */
        cnt[i] = 0u;
}
extern "C" __global__ void __launch_bounds__(${BW * 32})
twell_ffn_build(const unsigned int *packed, int M, const unsigned int *bbase,
                const unsigned int *sizes, unsigned int *offsets, unsigned int *desc,
                unsigned short *gv, const unsigned int *flag) {
    tw_pdl_enter();
    tw_k_build<${TPC}, ${BW}, ${GT}>(packed, M, ${NT}, ${S.W}, ${S.N}, ${CN}, ${NC}, ${TPC}, TW_NG(M),
                              bbase, sizes, offsets, desc, gv, flag);
}
extern "C" __global__ void __launch_bounds__(${GU_LB})
twell_ffn_ovf_gu(const unsigned short *x, const unsigned short *wp, const unsigned short *wu,
                 int M, const unsigned int *ovf_base, const unsigned int *item_base,
                 const unsigned int *ovf_rows, unsigned short *ovf_hh, unsigned int *ovf_ex,
                 const unsigned int *flag) {
    tw_pdl_enter();
#if TW_XV & 64
    tw_k_ovf_gu2<${DT}, ${GATED}, ${S.T}>(x, wp, wu, M, ${S.K}, ${NT}, ovf_base, item_base,
                                        ovf_rows, ovf_hh, ovf_ex, flag);
#else
    tw_k_ovf_gu<${DT}, ${GATED}, ${S.T}>(x, wp, wu, M, ${S.K}, ${NT}, ovf_base, item_base,
                                       ovf_rows, ovf_hh, ovf_ex, flag);
#endif
}
extern "C" __global__ void __launch_bounds__(${DOWN_LB})
twell_ffn_ovf_down(const unsigned int *packed, const unsigned short *wd, int M,
                   const unsigned int *ovf_base, const unsigned int *ovf_slot,
                   const unsigned int *orows, const unsigned short *ovf_hh,
                   const unsigned int *ovf_ex, float *ovf_y, long long ystride,
                   const unsigned int *flag) {
    tw_pdl_enter();
#if TW_XV & 64
    tw_k_ovf_down2<${DT}, ${S.T}, ${DCW}>(packed, wd, M, ${S.K}, ${NT}, ${S.W}, ovf_base, ovf_slot,
                                        orows, ovf_hh, ovf_ex, ovf_y, ystride, flag);
#else
    tw_k_ovf_down<${DT}, ${S.T}>(packed, wd, M, ${S.K}, ${NT}, ${S.W}, ovf_base, ovf_slot, orows,
                                ovf_hh, ovf_ex, ovf_y, ystride, flag);
#endif
}
extern "C" __global__ void __launch_bounds__(${NWB * 32}, 1)
twell_ffn_phase_b(const unsigned short *wd, int M, const unsigned int *desc,
                  const unsigned short *gv, const unsigned int *hl, const unsigned int *rexp,
                  const unsigned int *offsets, const unsigned int *sizes,
                  const unsigned int *orow_idx, const float *ovf_y, long long ystride,
                  unsigned short *y, const unsigned int *flag) {
    tw_pdl_enter();
    tw_k_phase_b<${DT}, ${GATED}, ${CN}, ${GGB}, ${DCAPB}, ${PADQ}, ${STAGES}, ${NWB}, ${PF}, ${IL}, ${GT}>(
        wd, M, ${S.K}, ${S.N}, TW_NG(M), ${NC}, desc, gv, hl, rexp, offsets, sizes, orow_idx,
        ovf_y, ystride, y, flag);
}
extern "C" __global__ void __launch_bounds__(256)
twell_ffn_rows(const unsigned short *x, const unsigned int *packed, const unsigned short *wp,
               const unsigned short *wu, const unsigned short *wd, unsigned short *y, int M,
               const unsigned int *flag, int fallback_only) {
    tw_pdl_enter();
    tw_k_rows<${DT}, ${GATED}, ${NI}>(x, packed, wp, wu, wd, y, M, ${S.K}, ${S.N}, ${S.T}, ${S.C},
                                     flag, fallback_only);
}
]==]

if GATED == 1 then
    cuda [==[
extern "C" __global__ void __launch_bounds__(${NWA * 32}, 1)
twell_ffn_phase_a(const unsigned short *x, const unsigned short *wu, int M,
                  const unsigned int *desc, const unsigned int *offsets,
                  const unsigned int *sizes, float *partial, unsigned int pair_cap,
                  const unsigned int *flag) {
    tw_pdl_enter();
    tw_k_phase_a<${DT}, ${CN}, ${GGA}, ${DCAPA}, ${PADQ}, ${STAGES}, ${NWA}, ${PF}, ${GT}>(x, wu, M, ${S.K}, ${S.N}, TW_NG(M),
                                                         ${NC}, desc, offsets, sizes, partial,
                                                         pair_cap, flag);
}
extern "C" __global__ void __launch_bounds__(256)
twell_ffn_reduce(const unsigned short *gv, const float *partial, unsigned int pair_cap,
                 const unsigned int *offsets, int M, unsigned int *hl, unsigned int *rexp,
                 const unsigned int *flag) {
    tw_pdl_enter();
    tw_k_reduce<${DT}>(gv, partial, pair_cap, ${NSL}, offsets + TW_NG(M) * ${NC}, hl, rexp, flag);
}
]==]
end
