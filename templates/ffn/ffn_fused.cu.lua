-- ffn_fused.cu.lua — fused TwELL FFN inference: gated (x + packed gate + Wu + Wd -> y) or
-- non-gated (packed h + Wd -> y), exact for overflowing row-tiles, deterministic, tensor cores.
-- This file and its modules templates/ffn/ffn_fused_*.lua (list after the parameter checks) are the
-- only source of these kernels (`twell render ffn_fused ...` prints what NVRTC compiles). The
-- algorithm, then the launch contract, follow.
--
-- Parameters: K (multiple of 64), N, T, C, dtype (see twellrt.h); gated (1 | 0, default 1);
-- tile config: CN (neurons per weight chunk, multiple of T and 64, default 512), GPWA / GPWB
-- (groups of 8 tokens per warp in phase A / B, 8 / 4), NWA / NWB (warps per block in phase A /
-- B, even, 16 / 16), PF (1: shared-memory list loads one step ahead; default 1), DCAPA / DCAPB
-- (list slots staged in shared memory per chunk, defaults fill the 227 KB limit). Rejected
-- (unsupported): K not a multiple of 64, shared memory over 227 KB. Fixed (other values were
-- slower, docs/DESIGN.md §9): tokens per list group GT = 8 (one mma n8 tile), weight
-- chunks in flight in phases A and B STAGES = 2 (a ring of two buffers).
--
-- Algorithm. Tokens form groups of GT = 8 (one mma n8 tile), neurons form chunks of CN. Row-tiles
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
--   DOWN_BPS} (STAGES, IL, GT: always 2, 0, 8; GU_BPS, DOWN_BPS: ovf_gu / ovf_down CTAs per SM in
--   their grids, GU_THR: ovf_gu's threads per CTA: 3, 128, 3) (read with
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
--   gated only: hl u32[PAIR_CAP+64] (slot pairs' hi halves, then lo halves),
--   rexp u32[PAIR_CAP/16+64], partial f32[NSL*PAIR_CAP].
-- Sequence on one stream (wp = Wg gated, Wu non-gated; SMs = multiprocessor count):
--   1 only when cnt is not known to be zero (new workspace, or an earlier sequence stopped
--     between its prep and its scan): memset cnt to 0 (NT+4 words). A memset in the stream also
--     ends the programmatic overlap below, so the steady state has none.
--   2 twell_ffn_prep      grid NB x 256
--       (packed, M, cnt, ovf_rows, ovf_slot, orow_idx, orows, sizes, bsum, hmark)
--       hmark (u32[M] or NULL): rows with hmark[r] != 0 are computed elsewhere (the heavy-row
--       route, runtime/ops/ffn/heavy/cuda_ffn_heavy.c): prep and build treat their row-tiles as empty
--       (no pairs, no overflow; their y rows come out 0 unless the fallback runs), prep still
--       counts their active values into the u64 total
--       also sums the count words of all M x NT row-tiles (the exact active values) into the
--       u64 at cnt + ((NT + 2) & ~1)
--   3 twell_ffn_scan      grid 1 x 1024
--       (bsum, M, bbase, cnt, ovf_base, item_base, flag, offsets, PAIR_CAP, OVF_CAP, OROW_CAP,
--        stats (u64[2] or NULL), stats_add (int), acc (u32[4] or NULL), hflag (u32[4] or NULL))
--       last reader of cnt: zeroes cnt[0 .. NT+4) before it exits. stats != NULL: stats[0] =
--       (stats_add ? stats[0] : 0) + the active values of these M rows, stats[1] = 0 (the
--       AUTO path's counts, so it needs no counting kernel of its own). acc != NULL: the needs
--       accumulated over every sequence that passed it (device memory the caller zeroes once):
--       acc[0] += (flag[0] != 0) (sequences that ran the fallback), acc[i] = max(acc[i],
--       flag[i]) for i = 1..3; one thread updates it, and sequences sharing acc must be ordered
--       (one stream, or events). hflag != NULL: a copy of acc[0..3] (acc given) or flag[0..3]
--       (e.g. mapped page-locked host memory: no copy to enqueue after the call).
--   4 twell_ffn_build     grid ceil(NL/BW) x BW*32
--       (packed, M, bbase, sizes, offsets, desc, gv, flag, hmark, eidx)
--       eidx (u32[PAIR_CAP] or NULL): each listed entry's word index in packed,
--       (m*NT + tile)*W + 1 + its slot (training's tiled U/dT; pads not written; the caller keeps
--       M*NT*W < 2^32)
--   5 twell_ffn_ovf_gu    grid GU_BPS*SMs x GU_THR, SMEM_GU
--       (x, wp, wu (NULL non-gated), M, ovf_base, item_base, ovf_rows, ovf_hh, ovf_ex, flag)
--   6 twell_ffn_ovf_down  grid DOWN_BPS*SMs x 256, SMEM_DOWN
--       (packed, wd, M, ovf_base, ovf_slot, orows, ovf_hh, ovf_ex, ovf_y, YS (long long), flag)
--   7 gated: twell_ffn_phase_a grid (ceil(NG/(NWA*GPWA)), NSL) x 32*NWA, SMEM_A
--       (x, wu, M, desc, offsets, sizes, partial, PAIR_CAP, flag)
--   8 gated: twell_ffn_reduce  grid 8*SMs x 256 (gv, partial, PAIR_CAP, offsets, M, hl, rexp, flag)
--   9 twell_ffn_phase_b   grid (ceil(NG/(NWB*GPWB)), NSL) x 32*NWB, SMEM_B
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
--       starts when every gate-pack CTA has exited, spread over the whole GPU (an early
--       trigger there is slower end to end: docs/DESIGN.md §4, "Launch overlap"). The rows
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
check(PF == 0 or PF == 1, "PF=%s must be 0 or 1", tostring(PF))
check(math.type(CN) == "integer" and CN >= S.T and CN % S.T == 0 and CN % 64 == 0 and CN <= 1024,
    "CN=%s must be a multiple of T=%d and 64, at most 1024", tostring(CN), S.T)
for _, v in ipairs({{"GPWA", GPWA, NWA}, {"GPWB", GPWB, NWB}}) do
    check(math.type(v[2]) == "integer" and v[2] >= 1 and v[2] <= 8, "%s=%s must be 1..8", v[1],
        tostring(v[2]))
    check(math.type(v[3]) == "integer" and v[3] >= 4 and v[3] <= 32 and v[3] % 2 == 0,
        "warps per block %s for %s=%d: even, 4..32", tostring(v[3]), v[1], v[2])
end
local GT = 8 -- tokens per list group (16 was exact but slower: phase B's mmas double)
local STAGES = 2 -- weight chunks in flight in phases A and B (3 and 4 never won)
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
local SMEM_GU = 3 * 64 * 128 * (GATED == 1 and 3 or 2) -- ovf_gu's 3 stages (TW_GU_STAGES)
local SUBD = 64 -- ovf_down's step (neurons)
local DCW = S.K % 128 == 0 and 128 or 64 -- ovf_down's output columns per CTA item
local SMEM_DOWN = 2 * (2 * 32 * SUBD * 2 + SUBD * DCW * 2)
-- ovf_gu / ovf_down grids (CTAs per SM, as shared memory and registers allow) and ovf_gu's CTA
local GU_BPS, GU_THR, DOWN_BPS = 3, 128, 3
-- their __launch_bounds__ (registers capped for those CTAs per SM)
local GU_LB = "128, 3"
local DOWN_LB = "256, 3"
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

-- The kernel bodies (device functions), by concern, in modules: each returns a function of D
-- (the constants they read) that emits its CUDA; the calls below fix the order of the source.
-- This file keeps the header above (launch contract), the parameters and the extern "C" wrappers.
--   ffn_fused_dev.lua      shared device helpers (three parts: core, mid, stage)
--   ffn_fused_row.lua      the row kernel         ffn_fused_ovf.lua      overflow path
--   ffn_fused_reduce.lua   between the phases     ffn_fused_prep.lua     pre-pass: prep, scan, build
--   ffn_fused_phase_a.lua  phase A                ffn_fused_phase_b.lua  phase B
local D = {}
local dev = import "ffn_fused_dev"
dev.core(D)                      -- types, list layout, conversions, cp.async, mma
import("ffn_fused_row")(D)       -- tw_k_rows: the row kernel (fallback, baseline)
dev.mid(D)                       -- prmt, token masks, hi|lo split, control words
import("ffn_fused_ovf")(D)       -- tw_k_ovf_gu / ovf_down
import("ffn_fused_reduce")(D)    -- tw_k_reduce (gated)
dev.stage(D)                     -- the phases' shared-memory layout, list staging
common.warp_scan()               -- tw_warp_incl_scan, _scan2: the pre-pass's scans
import("ffn_fused_prep")(D)      -- tw_k_prep, tw_k_scan, tw_k_build: the pair lists
import("ffn_fused_phase_a")(D)   -- tw_k_phase_a (gated)
import("ffn_fused_phase_b")(D)   -- tw_k_phase_b

-- The kernels: extern "C" wrappers of the bodies above, in the launch contract's terms.

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
    ${GATED}, ${STAGES}, ${NWA}, ${NWB}, ${PF}, 0, ${GT}, ${GU_BPS}, ${GU_THR}, ${DOWN_BPS}};

extern "C" __global__ void __launch_bounds__(256)
twell_ffn_prep(const unsigned int *packed, int M, unsigned int *cnt, unsigned int *ovf_rows,
               unsigned int *ovf_slot, unsigned int *orow_idx, unsigned int *orows,
               unsigned int *sizes, unsigned int *bsum, const unsigned int *hmark) {
    tw_pdl_enter();
    tw_k_prep<${PADQ}, ${NC}, ${GT}>(packed, M, ${NT}, ${S.W}, ${NC}, ${TPC}, TW_NG(M), cnt, ovf_rows,
                               ovf_slot, orow_idx, orows, sizes, bsum, hmark);
}
extern "C" __global__ void __launch_bounds__(1024)
twell_ffn_scan(const unsigned int *bsum, int M, unsigned int *bbase, unsigned int *cnt,
               unsigned int *ovf_base, unsigned int *item_base, unsigned int *flag,
               unsigned int *offsets, unsigned int pair_cap, unsigned int ovf_cap,
               unsigned int orow_cap, unsigned long long *stats, int stats_add,
               unsigned int *acc, unsigned int *hflag) {
    tw_pdl_enter();
    tw_k_scan(bsum, ${NC} * ((TW_NG(M) + 7) / 8), bbase, cnt, ${NT}, ${S.T // 64}, ovf_base,
               item_base, flag, offsets + TW_NG(M) * ${NC}, pair_cap, ovf_cap, orow_cap);
    __syncthreads(); /* every read of cnt is done */
    if (threadIdx.x == 0 && stats) {
        stats[0] = (stats_add ? stats[0] : 0ull) + *TW_CNT_TOTAL(cnt);
        stats[1] = 0ull;
    }
    if (threadIdx.x == 0 && acc) { /* flag is final here (thread 0 of the scan wrote it) */
        acc[0] += flag[0] != 0u ? 1u : 0u;
        for (int i = 1; i < 4; i++)
            acc[i] = max(acc[i], flag[i]);
    }
    if (threadIdx.x == 0 && hflag) {
        for (int i = 0; i < 4; i++)
            hflag[i] = acc ? acc[i] : flag[i];
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
                unsigned short *gv, const unsigned int *flag, const unsigned int *hmark,
                unsigned int *eidx) {
    tw_pdl_enter();
    tw_k_build<${TPC}, ${BW}, ${GT}>(packed, M, ${NT}, ${S.W}, ${S.N}, ${CN}, ${NC}, ${TPC}, TW_NG(M),
                              bbase, sizes, offsets, desc, gv, flag, hmark, eidx);
}
extern "C" __global__ void __launch_bounds__(${GU_LB})
twell_ffn_ovf_gu(const unsigned short *x, const unsigned short *wp, const unsigned short *wu,
                 int M, const unsigned int *ovf_base, const unsigned int *item_base,
                 const unsigned int *ovf_rows, unsigned short *ovf_hh, unsigned int *ovf_ex,
                 const unsigned int *flag) {
    tw_pdl_enter();
    tw_k_ovf_gu<${DT}, ${GATED}, ${S.T}>(x, wp, wu, M, ${S.K}, ${NT}, ovf_base, item_base,
                                       ovf_rows, ovf_hh, ovf_ex, flag);
}
extern "C" __global__ void __launch_bounds__(${DOWN_LB})
twell_ffn_ovf_down(const unsigned int *packed, const unsigned short *wd, int M,
                   const unsigned int *ovf_base, const unsigned int *ovf_slot,
                   const unsigned int *orows, const unsigned short *ovf_hh,
                   const unsigned int *ovf_ex, float *ovf_y, long long ystride,
                   const unsigned int *flag) {
    tw_pdl_enter();
    tw_k_ovf_down<${DT}, ${S.T}, ${DCW}>(packed, wd, M, ${S.K}, ${NT}, ${S.W}, ovf_base, ovf_slot,
                                       orows, ovf_hh, ovf_ex, ovf_y, ystride, flag);
}
extern "C" __global__ void __launch_bounds__(${NWB * 32}, 1)
twell_ffn_phase_b(const unsigned short *wd, int M, const unsigned int *desc,
                  const unsigned short *gv, const unsigned int *hl, const unsigned int *rexp,
                  const unsigned int *offsets, const unsigned int *sizes,
                  const unsigned int *orow_idx, const float *ovf_y, long long ystride,
                  unsigned short *y, const unsigned int *flag) {
    tw_pdl_enter();
    tw_k_phase_b<${DT}, ${GATED}, ${CN}, ${GPWB}, ${DCAPB}, ${PADQ}, ${STAGES}, ${NWB}, ${PF}>(
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
    tw_k_phase_a<${DT}, ${CN}, ${GPWA}, ${DCAPA}, ${PADQ}, ${STAGES}, ${NWA}, ${PF}>(x, wu, M, ${S.K}, ${S.N}, TW_NG(M),
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
