-- gate_pack_small.cu.lua — gate-pack for few rows (decode: M from 1 to a few hundred):
-- packed = TwELL(relu(x · wᵀ)) where the op is bound by reading w from HBM, not by arithmetic.
-- Every SM streams its share of w exactly once per token block, straight from global memory
-- into mma.sync fragments (no shared-memory staging of w); every warp reads its rows of x from
-- L1/L2.
--
-- Parameters: K (multiple of 32), N, T, C, dtype (see twellrt.h).
-- ABI (fixed; runtime/ops/ffn/small/cuda_small.c launches it):
--   extern "C" __global__ void twell_gate_pack_small_g2u2(
--       const unsigned short *x,   // [M, K] dtype, 16-byte aligned
--       const unsigned short *w,   // [N, K] dtype, 16-byte aligned
--       unsigned int *packed,      // [M, N/C]: every word written
--       unsigned short *gs,        // [M, N] scratch: the rounded activations (any content)
--       unsigned int *tcnt,        // [TB, N/T] arrival counters: 0 before the call, 0 after
--       int M, int TB, int MT, int WN)
--   grid = (N / (16·WN)) · TB blocks, block = 256 threads (8 warps), no dynamic shared memory;
--   WN ∈ {1, 2, 4, 8} with 16·WN ≤ T; MT ∈ {8, 16}, TB·MT ≥ M and no token block empty (more
--   rows: more token blocks). runtime/ops/ffn/small/small_gate.c picks the geometry.
--   The name: 2 token groups of 8 a block, 2 k32 blocks of w in flight a warp (4 blocks an SM).
--   Other versions (4 k32 blocks in flight and 3 blocks an SM, up to 64 rows a block, the block's
--   rows of x staged in shared memory, w streamed into shared memory by bulk copies) lost to this
--   one; docs/DESIGN.md §9 says why.
--
-- Work split. Block b owns token block tb = b % TB (rows [tb·MT, tb·MT + MT) ∩ [0, M)) and
-- neuron block nb = b / TB (NB = 16·WN neurons; token blocks of one neuron block are neighbours
-- in launch order, so a weight row fetched from HBM for one is an L2 hit for the others). Warp
-- wr = ks·WN + wn computes neurons [16·wn, 16·wn + 16) of the block over the k32 blocks
-- kb ≡ ks (mod 8/WN): the 8/WN warps of a neuron group split K, and the warps of one ks read the
-- same x fragments (L1 hits after the first). The partial sums are added in smem in ks order.
--
-- Fragments. The mma is m16n8k16 with the NEURONS as its M side (16 rows of w) and the TOKENS as
-- its N side (8 rows of x), so one token wastes 7/8 of the tensor work instead of 15/16, and
-- both operands come straight from memory in 16-byte loads: within a k32 block, lane (g, p)
-- (g = lane/4, p = lane%4) loads elements [8p, 8p+8) of weight rows g and g+8 and of token row
-- g, and uses words 2s, 2s+1 of each as the fragment registers of k16-step s. That permutes k
-- identically in both operands (every k of the block is used once), so the dot products are
-- exact fp32-accumulated sums in some fixed order: deterministic, not the CPU's order (the
-- results differ from tw_gate_pack_ref only as pack_check.h allows).
--
-- Packing. Each block rounds its sums (tw_act16: relu, round to nearest even, +0 when not
-- positive, NaN the canonical NaN, active) into
-- gs, then counts its arrival on the counter of (row-tile column t, token block tb). The T/NB-th
-- (last) block to arrive packs those MT rows of tile t from gs (warp ballots and prefix
-- popcounts: ascending columns, exact count, unused slots 0, the first SLOTS entries kept when a
-- row-tile overflows) and resets the counter to 0 for the next call (or CUDA graph replay). The
-- bytes depend only on the sums, which depend only on the inputs: bitwise reproducible.
-- Memory order: writers store gs, __threadfence, barrier, then one atomicAdd; the last block
-- reads gs with ld.global.cg (L2) after its own fence.
--
-- PROGRAMMATIC DEPENDENT LAUNCH: tw_pdl_enter is the first statement (the rule of
-- ffn_fused.cu.lua): the launcher may start this kernel while the stream's previous one runs.

local common = import "twell_common"
local S = common.shape()
if S.K % 32 ~= 0 then
    unsupported("K=%d: gate_pack_small needs K %% 32 == 0", S.K)
end
local KB = S.K // 32
local NT = S.N // S.T
local MMA = S.dtype == "bf16" and "bf16" or "f16"
local NG = 2 -- token groups of 8 rows a block (MT ≤ 16)
local U = 2  -- k32 blocks of w in flight a warp
local MINB = 4 -- blocks an SM

common.conversions(S.dtype)

cuda [==[
typedef unsigned int tw_u32;
#define TW_FULL 0xffffffffu

__device__ __forceinline__ void tw_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* A weight chunk read once per call: no L1 allocation (L1 is kept for the rows of x). */
__device__ __forceinline__ uint4 tw_ld_stream(const unsigned short *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ void tw_mma(float (&d)[4], tw_u32 a0, tw_u32 a1, tw_u32 a2, tw_u32 a3,
                                       tw_u32 b0, tw_u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.${MMA}.${MMA}.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}


/* Packs one row-tile from its T activations in global memory (written by other blocks of this
 * grid: read through L2). All 32 lanes call it together. */
__device__ __forceinline__ void tw_pack_from_global(const unsigned short *src, tw_u32 *dst,
                                                    tw_u32 col0, int lane) {
    const tw_u32 below = (1u << lane) - 1u;
    tw_u32 count = 0;
    unsigned short vs[${S.T // 32}]; /* every load first: one L2 round trip, not T/32 */
#pragma unroll
    for (int c = 0; c < ${S.T // 32}; c++)
        asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(vs[c]) : "l"(src + 32 * c + lane));
#pragma unroll
    for (int c = 0; c < ${S.T}; c += 32) {
        const unsigned short v = vs[c / 32];
        const bool active = v != 0 && (v & 0x8000u) == 0;
        const tw_u32 ballot = __ballot_sync(TW_FULL, active);
        const tw_u32 pos = count + (tw_u32)__popc(ballot & below);
        if (active && pos < ${S.SLOTS}u)
            dst[1u + pos] = ((tw_u32)v << 16) | (col0 + (tw_u32)(c + lane));
        count += (tw_u32)__popc(ballot);
    }
    for (tw_u32 s = count + (tw_u32)lane; s < ${S.SLOTS}u; s += 32u)
        dst[1u + s] = 0u;
    if (lane == 0)
        dst[0] = count;
}

extern "C" __global__ void __launch_bounds__(256, ${MINB})
twell_gate_pack_small_g2u2(const unsigned short *__restrict__ x,
                           const unsigned short *__restrict__ w, tw_u32 *__restrict__ packed,
                           unsigned short *__restrict__ gs, tw_u32 *__restrict__ tcnt, int M,
                           int TB, int MT, int WN) {
    tw_pdl_enter();
    __shared__ float4 red[8][${NG}][32]; /* each warp's fragment sums, per token group */
    __shared__ int s_last;
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, p = lane & 3;
    const int KS = 8 / WN, wn = warp % WN, ks = warp / WN;
    const int tb = (int)blockIdx.x % TB, nb = (int)blockIdx.x / TB;
    const int NB = 16 * WN, n0 = nb * NB, m0 = tb * MT;
    const int mt = min(MT, M - m0), ng = (mt + 7) >> 3;

    float acc[${NG}][4];
#pragma unroll
    for (int j = 0; j < ${NG}; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

    /* weight rows n0 + 16·wn + g and + 8; token rows m0 + 8j + g (zero beyond M) */
    const unsigned short *wa = w + (size_t)(n0 + 16 * wn + g) * ${S.K} + 8 * p;
    const unsigned short *wb = wa + 8 * ${S.K};
    const unsigned short *xr[${NG}];
    bool xok[${NG}];
#pragma unroll
    for (int j = 0; j < ${NG}; j++) {
        const int m = m0 + 8 * j + g;
        xok[j] = j < ng && m < M;
        xr[j] = x + (size_t)(xok[j] ? m : 0) * ${S.K} + 8 * p;
    }

    /* ${U} k32 blocks in flight per warp: all their weight loads first, then per block x and the
     * mmas (block kb + u·KS < KB is warp-uniform, as mma.sync needs) */
    for (int kb = ks; kb < ${KB}; kb += ${U} * KS) {
        uint4 ra[${U}], rb[${U}];
#pragma unroll
        for (int u = 0; u < ${U}; u++) {
            const int k = kb + u * KS;
            ra[u] = rb[u] = make_uint4(0u, 0u, 0u, 0u);
            if (k < ${KB}) {
                ra[u] = tw_ld_stream(wa + k * 32);
                rb[u] = tw_ld_stream(wb + k * 32);
            }
        }
#pragma unroll
        for (int u = 0; u < ${U}; u++) {
            const int k = kb + u * KS;
            if (k < ${KB}) {
                uint4 xv[${NG}];
#pragma unroll
                for (int j = 0; j < ${NG}; j++)
                    xv[j] = xok[j] ? __ldg((const uint4 *)(xr[j] + k * 32))
                                   : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
                for (int j = 0; j < ${NG}; j++)
                    if (j < ng) {
                        tw_mma(acc[j], ra[u].x, rb[u].x, ra[u].y, rb[u].y, xv[j].x, xv[j].y);
                        tw_mma(acc[j], ra[u].z, rb[u].z, ra[u].w, rb[u].w, xv[j].z, xv[j].w);
                    }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < ${NG}; j++)
        if (j < ng)
            red[warp][j][lane] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    __syncthreads();

    /* Sum the K-split partials in ks order (fixed: bitwise reproducible) and round them into gs.
     * item = (wn, j, lane) of the fragment layout: c0, c1 = (neuron g, tokens 2p, 2p+1),
     * c2, c3 = (neuron g + 8, same tokens) */
    const float4 *rf = &red[0][0][0];
    for (int it = tid; it < WN * ng * 32; it += 256) {
        const int iw = it / (ng * 32), j = (it / 32) % ng, ln = it & 31;
        float4 s = rf[(iw * ${NG} + j) * 32 + ln];
        for (int k2 = 1; k2 < KS; k2++) {
            const float4 v = rf[((k2 * WN + iw) * ${NG} + j) * 32 + ln];
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        const int n = n0 + 16 * iw + (ln >> 2), m = m0 + 8 * j + 2 * (ln & 3);
        if (m < M) {
            gs[(size_t)m * ${S.N} + n] = tw_act16(s.x);
            gs[(size_t)m * ${S.N} + n + 8] = tw_act16(s.z);
        }
        if (m + 1 < M) {
            gs[(size_t)(m + 1) * ${S.N} + n] = tw_act16(s.y);
            gs[(size_t)(m + 1) * ${S.N} + n + 8] = tw_act16(s.w);
        }
    }
    /* count the block's arrival on its (token block, tile) counter; the last block to arrive
     * packs the tile's rows and resets the counter */
    __threadfence();
    __syncthreads();
    const int t = n0 / ${S.T};
    if (tid == 0) {
        tw_u32 *c = tcnt + (size_t)tb * ${NT} + t;
        const tw_u32 prev = atomicAdd(c, 1u);
        const int last = prev == (tw_u32)(${S.T} / NB - 1);
        if (last)
            atomicExch(c, 0u); /* every block of this tile has arrived: ready for the next call */
        s_last = last;
    }
    __syncthreads();
    if (!s_last)
        return;
    __threadfence();
    for (int r = warp; r < mt; r += 8) {
        const size_t m = (size_t)(m0 + r);
        tw_pack_from_global(gs + m * ${S.N} + (size_t)t * ${S.T},
                            packed + m * ${S.NW} + (size_t)t * ${S.W}, (tw_u32)(t * ${S.T}), lane);
    }
}
]==]
