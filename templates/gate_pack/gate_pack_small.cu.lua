-- gate_pack_small.cu.lua — gate-pack for few rows (decode: M from 1 to a few hundred):
-- packed = TwELL(relu(x · wᵀ)) where the op is bound by reading w from HBM, not by arithmetic.
-- Every SM streams its share of w exactly once per token block, straight from global memory
-- into mma.sync fragments (no shared-memory staging of w). The g kernels read the rows of x from
-- L1/L2 in every warp; the x kernels stage them in shared memory (below).
--
-- Parameters: K (multiple of 32), N, T, C, dtype (see twellrt.h).
-- ABI (fixed; runtime/ops/ffn/cuda_small.c launches it):
--   extern "C" __global__ void twell_gate_pack_small_<name>(   name = g2, g2u2 (NGMAX 2),
--                                                              g8 (NGMAX 8), x8, x16, x32 (NGMAX 8/16/32)
--       const unsigned short *x,   // [M, K] dtype, 16-byte aligned
--       const unsigned short *w,   // [N, K] dtype, 16-byte aligned
--       unsigned int *packed,      // [M, N/C]: every word written
--       unsigned short *gs,        // [M, N] scratch: the rounded activations (any content)
--       unsigned int *tcnt,        // [TB, N/T] arrival counters: 0 before the call, 0 after
--       int M, int TB, int MT, int WN)
--   grid = (N / (16·WN)) · TB blocks, block = 256 threads (8 warps).
--   g kernels: no dynamic shared memory, WN ∈ {1, 2, 4, 8} with 16·WN ≤ T.
--   x kernels: dynamic shared memory 5120·NGMAX bytes (over 48 KB: the launcher raises the
--   function's limit), WN ∈ {2, 4}.
--   MT a multiple of 8 with 8 ≤ MT ≤ 8·NGMAX, TB·MT ≥ M and no token block empty.
--   runtime/ops/ffn/small_gate.c picks the kernel and geometry.
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
-- Packing. Each block rounds its sums (relu, round to nearest even, +0 when not positive) into
-- gs, then counts its arrival on the counter of (row-tile column t, token block tb). The T/NB-th
-- (last) block to arrive packs those MT rows of tile t from gs (warp ballots and prefix
-- popcounts: ascending columns, exact count, unused slots 0, the first SLOTS entries kept when a
-- row-tile overflows) and resets the counter to 0 for the next call (or CUDA graph replay). The
-- bytes depend only on the sums, which depend only on the inputs: bitwise reproducible.
-- Memory order: writers store gs, __threadfence, barrier, then one atomicAdd; the last block
-- reads gs with ld.global.cg (L2) after its own fence.
--
-- x kernels (M from 33 to 256, where the g kernels move too much x: each warp re-reads its rows
-- of x per k32 block from L1/L2, and each token block of 64 rows re-reads w from L2). The block's
-- rows of x (8·ng of them, zero-filled beyond M) come into shared memory by cp.async.cg, a stage
-- of 4 k32 blocks (128 k) at a time, two stages: stage s + 1 is issued right after the barrier
-- that opens stage s (every warp is then done with stage s − 1, whose buffer it reuses), so x
-- leaves L2 once per block and one barrier a stage suffices. Warp (wn, ks) takes k32 blocks
-- ks + i·KS of each stage (KS = 8/WN ∈ {4, 2} divides 4) and loads their weights one stage ahead
-- into registers. Lanes read x in the g kernels' k permutation (lane (g, p): 16 bytes at
-- elements 8p.. of token row g), which ldmatrix cannot deliver (it hands a lane 2 adjacent
-- elements of a row), so plain 16-byte shared loads; a row stride of 20 pieces (320 bytes,
-- 64 mod 128) puts the 8 lanes of each quarter-warp on 8 distinct 16-byte bank groups. After the
-- K loop the same shared memory holds the warps' partial sums for the fixed-order K reduction.
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

/* The stored activation of a pre-activation: round(relu(pre)), +0 when not positive (NaN too). */
__device__ __forceinline__ unsigned short tw_act(float pre) {
    return pre > 0.0f ? tw_from_f32(pre) : (unsigned short)0;
}

/* Packs one row-tile from its T activations in global memory (written by other blocks of this
 * grid: read through L2). All 32 lanes call it together. */
__device__ __forceinline__ void tw_pack_from_global(const unsigned short *src, tw_u32 *dst,
                                                    tw_u32 col0, int lane) {
    const tw_u32 below = (1u << lane) - 1u;
    tw_u32 count = 0;
#pragma unroll
    for (int c = 0; c < ${S.T}; c += 32) {
        unsigned short v;
        asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(src + c + lane));
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

/* The end of every gate kernel here: red holds each warp's fragment sums (float4 per lane, at
 * [(warp·NGS + j)·32 + lane] for its token group j; the block has passed a barrier since they were
 * written). Sums the K-split partials in ks order (fixed: bitwise reproducible), rounds them into
 * gs, counts the block's arrival on its (token block, tile) counter, and the last block to arrive
 * packs the tile's rows and resets the counter. */
__device__ __forceinline__ void tw_small_finish(const float4 *red, int NGS,
                                                unsigned short *__restrict__ gs,
                                                tw_u32 *__restrict__ packed,
                                                tw_u32 *__restrict__ tcnt, int M, int tb, int n0,
                                                int m0, int mt, int ng, int WN, int *s_last) {
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int KS = 8 / WN, NB = 16 * WN;
    /* item = (wn, j, lane) of the fragment layout: c0, c1 = (neuron g, tokens 2p, 2p+1),
     * c2, c3 = (neuron g + 8, same tokens) */
    for (int it = tid; it < WN * ng * 32; it += 256) {
        const int iw = it / (ng * 32), j = (it / 32) % ng, ln = it & 31;
        float4 s = red[(iw * NGS + j) * 32 + ln];
        for (int k2 = 1; k2 < KS; k2++) {
            const float4 v = red[((k2 * WN + iw) * NGS + j) * 32 + ln];
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        const int n = n0 + 16 * iw + (ln >> 2), m = m0 + 8 * j + 2 * (ln & 3);
        if (m < M) {
            gs[(size_t)m * ${S.N} + n] = tw_act(s.x);
            gs[(size_t)m * ${S.N} + n + 8] = tw_act(s.z);
        }
        if (m + 1 < M) {
            gs[(size_t)(m + 1) * ${S.N} + n] = tw_act(s.y);
            gs[(size_t)(m + 1) * ${S.N} + n + 8] = tw_act(s.w);
        }
    }
    __threadfence();
    __syncthreads();
    const int t = n0 / ${S.T};
    if (tid == 0) {
        tw_u32 *c = tcnt + (size_t)tb * ${NT} + t;
        const tw_u32 prev = atomicAdd(c, 1u);
        const int last = prev == (tw_u32)(${S.T} / NB - 1);
        if (last)
            atomicExch(c, 0u); /* every block of this tile has arrived: ready for the next call */
        *s_last = last;
    }
    __syncthreads();
    if (!*s_last)
        return;
    __threadfence();
    for (int r = warp; r < mt; r += 8) {
        const size_t m = (size_t)(m0 + r);
        tw_pack_from_global(gs + m * ${S.N} + (size_t)t * ${S.T},
                            packed + m * ${S.NW} + (size_t)t * ${S.W}, (tw_u32)(t * ${S.T}), lane);
    }
}

template <int NGMAX, int U>
__device__ __forceinline__ void tw_gate_small(const unsigned short *__restrict__ x,
                                              const unsigned short *__restrict__ w,
                                              tw_u32 *__restrict__ packed,
                                              unsigned short *__restrict__ gs,
                                              tw_u32 *__restrict__ tcnt, int M, int TB, int MT,
                                              int WN) {
    __shared__ float4 red[8][NGMAX][32];
    __shared__ int s_last;
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, p = lane & 3;
    const int KS = 8 / WN, wn = warp % WN, ks = warp / WN;
    const int tb = (int)blockIdx.x % TB, nb = (int)blockIdx.x / TB;
    const int NB = 16 * WN, n0 = nb * NB, m0 = tb * MT;
    const int mt = min(MT, M - m0), ng = (mt + 7) >> 3;

    float acc[NGMAX][4];
#pragma unroll
    for (int j = 0; j < NGMAX; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

    /* weight rows n0 + 16·wn + g and + 8; token rows m0 + 8j + g (zero beyond M) */
    const unsigned short *wa = w + (size_t)(n0 + 16 * wn + g) * ${S.K} + 8 * p;
    const unsigned short *wb = wa + 8 * ${S.K};
    const unsigned short *xr[NGMAX];
    bool xok[NGMAX];
#pragma unroll
    for (int j = 0; j < NGMAX; j++) {
        const int m = m0 + 8 * j + g;
        xok[j] = j < ng && m < M;
        xr[j] = x + (size_t)(xok[j] ? m : 0) * ${S.K} + 8 * p;
    }

    /* U k32 blocks in flight per warp: all their weight loads first, then per block x and the
     * mmas (block kb + u·KS < KB is warp-uniform, as mma.sync needs) */
    for (int kb = ks; kb < ${KB}; kb += U * KS) {
        uint4 ra[U], rb[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = kb + u * KS;
            ra[u] = rb[u] = make_uint4(0u, 0u, 0u, 0u);
            if (k < ${KB}) {
                ra[u] = tw_ld_stream(wa + k * 32);
                rb[u] = tw_ld_stream(wb + k * 32);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = kb + u * KS;
            if (k < ${KB}) {
                uint4 xv[NGMAX];
#pragma unroll
                for (int j = 0; j < NGMAX; j++)
                    xv[j] = xok[j] ? __ldg((const uint4 *)(xr[j] + k * 32))
                                   : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
                for (int j = 0; j < NGMAX; j++)
                    if (j < ng) {
                        tw_mma(acc[j], ra[u].x, rb[u].x, ra[u].y, rb[u].y, xv[j].x, xv[j].y);
                        tw_mma(acc[j], ra[u].z, rb[u].z, ra[u].w, rb[u].w, xv[j].z, xv[j].w);
                    }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NGMAX; j++)
        if (j < ng)
            red[warp][j][lane] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    __syncthreads();
    tw_small_finish(&red[0][0][0], NGMAX, gs, packed, tcnt, M, tb, n0, m0, mt, ng, WN, &s_last);
}
]==]

-- The x-staged kernels: XKC k32 blocks of x per stage (one 16-byte piece = 8 elements; a row of a
-- stage is 4·XKC pieces plus 4 of padding: a row stride of 64 mod 128 bytes keeps the warps'
-- 16-byte shared loads free of bank conflicts), two stages.
local XKC = 4
local XRS = 4 * XKC + 4
local XNS = (KB + XKC - 1) // XKC

cuda [==[

/* 16 bytes global -> shared, bypassing L1; src_bytes 0 writes zeros (src is then not read but
 * stays a valid address). */
__device__ __forceinline__ void tw_cp16(uint4 *dst, const unsigned short *src, int src_bytes) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

/* Stage s of x: rows [m0, m0 + rows) (zero from M on) × k32 blocks [s·XKC, s·XKC + XKC) (zero
 * from K on) into buf[row][piece], row stride ${XRS} pieces. Every thread of the block calls it
 * and then commits its copies as one group. */
__device__ __forceinline__ void tw_x_stage(uint4 *buf, const unsigned short *__restrict__ x, int m0,
                                           int M, int rows, int s, int tid) {
    for (int q = tid; q < rows * ${4 * XKC}; q += 256) {
        const int r = q / ${4 * XKC}, c = q % ${4 * XKC};
        const int k8 = s * ${4 * XKC} + c; /* the piece's index along a row of x */
        const bool ok = m0 + r < M && k8 < ${S.K // 8};
        tw_cp16(buf + r * ${XRS} + c, ok ? x + (size_t)(m0 + r) * ${S.K} + (size_t)k8 * 8 : x,
                ok ? 16 : 0);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* The weights of k32 block kb of this warp's 16 neurons (zero past K): lane (g, p)'s 8 elements of
 * rows g and g + 8, as tw_gate_small loads them. */
__device__ __forceinline__ void tw_w_load(uint4 &ra, uint4 &rb, const unsigned short *wa,
                                          const unsigned short *wb, int kb, bool ok) {
    ra = rb = make_uint4(0u, 0u, 0u, 0u);
    if (ok) {
        ra = tw_ld_stream(wa + kb * 32);
        rb = tw_ld_stream(wb + kb * 32);
    }
}

/* Warps as in tw_gate_small (WN ∈ {2, 4}: KS = 8/WN ∈ {4, 2} divides XKC = ${XKC}); block rows
 * MT ≤ 8·NG. Stage s holds k32 blocks [s·XKC, s·XKC + XKC); warp (wn, ks) takes blocks
 * ks + i·KS (i < XKC/KS ≤ 2) of each stage: a fixed set of blocks in a fixed order, summed as
 * tw_gate_small does (bitwise reproducible). Its weights for stage s + 1 are loaded while it
 * computes stage s. */
template <int NG>
__device__ __forceinline__ void tw_gate_small_x(const unsigned short *__restrict__ x,
                                                const unsigned short *__restrict__ w,
                                                tw_u32 *__restrict__ packed,
                                                unsigned short *__restrict__ gs,
                                                tw_u32 *__restrict__ tcnt, int M, int TB, int MT,
                                                int WN) {
    /* two x stages [2][8·NG][XRS] pieces; after the K loop the same bytes hold the warps' sums,
     * float4 [8][NG][32] (4096·NG bytes ≤ the stages' 5120·NG) */
    extern __shared__ uint4 tw_xs[];
    __shared__ int s_last;
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, p = lane & 3;
    const int KS = 8 / WN, wn = warp % WN, ks = warp / WN;
    const int tb = (int)blockIdx.x % TB, nb = (int)blockIdx.x / TB;
    const int n0 = nb * 16 * WN, m0 = tb * MT;
    const int mt = min(MT, M - m0), ng = (mt + 7) >> 3;
    uint4 *const xs0 = tw_xs, *const xs1 = tw_xs + 8 * NG * ${XRS};

    float acc[NG][4];
#pragma unroll
    for (int j = 0; j < NG; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

    const unsigned short *wa = w + (size_t)(n0 + 16 * wn + g) * ${S.K} + 8 * p;
    const unsigned short *wb = wa + 8 * ${S.K};

    tw_x_stage(xs0, x, m0, M, 8 * ng, 0, tid);
    uint4 ra[2], rb[2]; /* this stage's weights: blocks ks and ks + KS of the stage */
#pragma unroll
    for (int i = 0; i < 2; i++)
        tw_w_load(ra[i], rb[i], wa, wb, ks + i * KS, ks + i * KS < ${XKC} && ks + i * KS < ${KB});

    for (int s = 0; s < ${XNS}; s++) {
        /* stage s has landed for every thread, and every warp is done with stage s - 1, whose
         * buffer stage s + 1 now fills */
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncthreads();
        if (s + 1 < ${XNS})
            tw_x_stage((s & 1) ? xs0 : xs1, x, m0, M, 8 * ng, s + 1, tid);
        uint4 na[2], nb2[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int j = ks + i * KS, kb = (s + 1) * ${XKC} + j;
            tw_w_load(na[i], nb2[i], wa, wb, kb, s + 1 < ${XNS} && j < ${XKC} && kb < ${KB});
        }
        const uint4 *xb = (s & 1) ? xs1 : xs0;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int j = ks + i * KS, kb = s * ${XKC} + j;
            if (j < ${XKC} && kb < ${KB}) { /* warp-uniform, as mma.sync needs */
#pragma unroll
                for (int jj = 0; jj < NG; jj++)
                    if (jj < ng) {
                        const uint4 xv = xb[(8 * jj + g) * ${XRS} + 4 * j + p];
                        tw_mma(acc[jj], ra[i].x, rb[i].x, ra[i].y, rb[i].y, xv.x, xv.y);
                        tw_mma(acc[jj], ra[i].z, rb[i].z, ra[i].w, rb[i].w, xv.z, xv.w);
                    }
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++)
            ra[i] = na[i], rb[i] = nb2[i];
    }
    __syncthreads(); /* every warp is done with the stages: their bytes become the sums */
    float4 *red = reinterpret_cast<float4 *>(tw_xs);
#pragma unroll
    for (int j = 0; j < NG; j++)
        if (j < ng)
            red[(warp * NG + j) * 32 + lane] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    __syncthreads();
    tw_small_finish(red, NG, gs, packed, tcnt, M, tb, n0, m0, mt, ng, WN, &s_last);
}
]==]

-- The register-fed kernels: g2 serves blocks of up to 16 rows with fewer registers (3 blocks per
-- SM, 4 k32 blocks of w in flight per warp); g2u2 is the same with 2 in flight and 4 blocks per
-- SM (session 4, H100: 19.1 us against 21.5 at M = 1; kept selectable until measured again); g8
-- serves up to 64 rows per block (2 blocks per SM, 2 in flight).
for _, k in ipairs({ { "g2", 2, 3, 4 }, { "g2u2", 2, 4, 2 }, { "g8", 8, 2, 2 } }) do
    local name, ngmax, minb, unroll = k[1], k[2], k[3], k[4]
    cuda [==[

extern "C" __global__ void __launch_bounds__(256, ${minb})
twell_gate_pack_small_${name}(const unsigned short *__restrict__ x,
                              const unsigned short *__restrict__ w, tw_u32 *__restrict__ packed,
                              unsigned short *__restrict__ gs, tw_u32 *__restrict__ tcnt, int M,
                              int TB, int MT, int WN) {
    tw_pdl_enter();
    tw_gate_small<${ngmax}, ${unroll}>(x, w, packed, gs, tcnt, M, TB, MT, WN);
}
]==]
end

-- The x-staged kernels: x8 (up to 64 rows a block, 40 KB of shared memory, 2 blocks per SM),
-- x16 (128 rows, 80 KB, 2 per SM), x32 (256 rows, 160 KB, 1 per SM); dynamic shared memory
-- 2·8·NG·XRS·16 = 5120·NG bytes (runtime/ops/ffn/small_gate.c, tw_sgate_smem, must agree).
for _, k in ipairs({ { 8, 2 }, { 16, 2 }, { 32, 1 } }) do
    local ng, minb = k[1], k[2]
    cuda [==[

extern "C" __global__ void __launch_bounds__(256, ${minb})
twell_gate_pack_small_x${ng}(const unsigned short *__restrict__ x,
                             const unsigned short *__restrict__ w, tw_u32 *__restrict__ packed,
                             unsigned short *__restrict__ gs, tw_u32 *__restrict__ tcnt, int M,
                             int TB, int MT, int WN) {
    tw_pdl_enter();
    tw_gate_small_x<${ng}>(x, w, packed, gs, tcnt, M, TB, MT, WN);
}
]==]
end
