-- ffn_small.cu.lua — twell_ffn_infer for few rows (decode: M from 1 to a few hundred), in two
-- kernels that read each active weight row once per call for all the rows that use it:
--   twell_ffn_small_up    neuron-major: h = g ⊙ (x · Wuᵀ) for the active (row, neuron) pairs
--                         (gated), and the exact recompute of row-tiles that overflow the format
--   twell_ffn_small_down  row-major: y = Σ h · Wd over each row's active neurons
-- or, for the fewest rows, in one:
--   twell_ffn_small_fused the down kernel computing h itself (no scratch, one launch)
-- or, for 96 to 1024 rows in AUTO (K ≤ 4096), in one block a row:
--   twell_ffn_small_row   h of the row's pairs into shared memory, then y by column slices
--                         (its ABI and rule at the end of this file)
--
-- Parameters: K (multiple of 32), N, T, C, dtype (see twellrt.h); gated (1 | 0, default 1).
-- ABI (fixed; runtime/ops/ffn/cuda_small.c launches up then down, or fused alone, on one
-- stream):
--   twell_ffn_small_up(const unsigned short *x,       // [M, K] dtype, 16-byte aligned
--                      const unsigned int *packed,    // [M, N/C] TwELL (twell_gate_pack)
--                      const unsigned short *wp,      // packing weight [N, K]: Wg | Wu
--                      const unsigned short *wu,      // [N, K] (gated; unused otherwise)
--                      float *hbuf,                   // [M, N] scratch, any content
--                      unsigned int *mask,            // [M, N/32] scratch, any content
--                      int M)
--     grid = N/32 blocks (block b: neurons [32b, 32b + 32), inside one row-tile column),
--     block = 256, dynamic shared memory = twell_ffn_small_up_smem(M) (below) bytes.
--   twell_ffn_small_down(const unsigned int *packed, const unsigned short *wd,
--                        const float *hbuf, const unsigned int *mask,
--                        unsigned short *y,           // [M, K] dtype, every element written
--                        int M)
--     grid = (ceil(K/256), M), block = 256, no dynamic shared memory.
--   twell_ffn_small_fused(const unsigned short *x, const unsigned int *packed,
--                         const unsigned short *wp, const unsigned short *wu,
--                         const unsigned short *wd, unsigned short *y, int M)
--     grid = (ceil(K/256), M), block = 512, dynamic shared memory = K · 2 + 4 · N/C + 8 · N/T
--     bytes (x_m, the packed row, the tiles' prefix and overflow lists), plus 16 KB static.
--   twell_ffn_small_fused_cl(...the same arguments...)   sm_90+: clusters of 8 blocks a row
--     grid = (8, M), cluster = (8, 1, 1), block = 512, dynamic shared memory = the fused
--     kernel's + 8 · ceil(ceil(N/T · (T/C − 1) / 2) / 8) + 12 · ceil(N/16) bytes.
--
-- Semantics (twell_ffn_infer): a row-tile whose count fits its slots contributes its stored
-- entries; one that overflows is recomputed: g = round(relu(x · wp_n)) for every column n of the
-- tile, active iff positive. Gated: h = g · (x · Wu_n) in fp32; non-gated: h = g. y = Σ h · Wd_n
-- in fp32, rounded once.
--   up: block b scans the row-tiles of its column t for all M rows into a [32, M] table in
--   shared memory (the 16-bit gate of each stored entry of its neurons; 0xFFFF, never a stored
--   value, for every neuron of a row whose row-tile overflows). Its active pairs, enumerated
--   neuron-major then row-ascending, go round-robin to the 8 warps (pair i to warp i % 8), two
--   at a time (their loads interleaved). Each dot product is a lane-strided fp32 sum of 16-byte
--   chunks reduced by a butterfly: deterministic. It writes hbuf[m, n] for the pairs it computes
--   (gated: every active pair; non-gated: only recomputed ones, the others are the packed
--   values) and, for each overflowing row-tile, the 32-bit activity mask of its 32 neurons into
--   mask[m, n/32] (bits OR-ed in shared memory, an integer: deterministic).
--   down: block (s, m) owns columns [256s, 256s + 256) of row m, lane l the 8 columns 8l..8l+7.
--   Warp w takes the row-tiles t ≡ w (mod 8), 32 at a time: their count words in one load, their
--   stored entries flattened by a prefix sum and loaded 32 at a time (so a row costs a few
--   dependent memory steps, not a few per tile), in (tile, slot) order, then the chunk's
--   overflowing tiles (mask bits) in tile order; eight weight rows in flight at a time; the 8
--   warps' sums are then added in warp order. Fixed order everywhere, no atomics on floats:
--   bitwise reproducible. Each weight row of Wu and Wd is fetched from HBM about once per call
--   (the rows of a batch that share a neuron find it in L2).
--   fused: x_m and the packed row staged together, the stored entries indexed flat and shared by
--   16 warps a pair at a time, each pair's Wd columns and Wu rows loaded together (two dependent
--   memory steps in all); gated h = g · (x_m · Wu_n) computed per entry by each of the row's K/256
--   blocks (Wu read K/256 times per pair, from L2 after the first); overflowing row-tiles
--   recomputed in place (every column's gate, two dot products at a time, spread over the warps).
--   fused_cl (sm_90+): the same split over a cluster of 8 blocks a row, each computing the h of an
--   eighth of the row's pairs into its shared memory; after the cluster barrier every block sums
--   h · Wd over all pairs for its column slices, reading h from the owning block (DSMEM), so a
--   row's Wu reads and dot products are spread over 8 SMs instead of repeated on each.
--   Before the grid dependency wait every kernel touches one line of each 2 MB page of the weights
--   it gathers (inputs no earlier kernel writes), so their address translation overlaps the
--   previous kernel.
-- Malformed input (twell_ffn_infer does not check packed unless options.validate_packed): the
-- values are then unspecified, but no access leaves the buffers: up keeps only columns inside
-- its block's neurons; down and fused read a stored entry whose column is N or more as the word 0
-- (column 0, no value).
--
-- PROGRAMMATIC DEPENDENT LAUNCH: tw_pdl_enter is the first statement of both kernels (the rule
-- of ffn_fused.cu.lua).

local common = import "twell_common"
local S = common.shape()
if S.K % 32 ~= 0 then
    unsupported("K=%d: ffn_small needs K %% 32 == 0", S.K)
end
local GATED = param("gated", 1)
check(GATED == 0 or GATED == 1, "gated=%s must be 0 or 1", tostring(GATED))
local NT = S.N // S.T
local K8 = S.K // 8 -- 16-byte chunks per row
local NSL = (S.K + 255) // 256 -- column slices of the down kernel
-- the cluster kernel: CL blocks a row; PL, QL: a block's share of the stored and candidate pairs
local CL = 8
local PL = ((NT * S.SLOTS + 1) // 2 + CL - 1) // CL
local QL = (S.N // 2 + CL - 1) // CL

common.conversions(S.dtype)
common.warp_scan()

cuda [==[
typedef unsigned int tw_u32;
#define TW_FULL 0xffffffffu
#define TW_GATED ${GATED}
#define TW_OVF_MARK 0xFFFFu

__device__ __forceinline__ void tw_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
]==]

-- Exact widening of the two 16-bit halves of a word (fp16 through the hardware conversion, which
-- is exact; bf16 by a shift).
if S.dtype == "bf16" then
    cuda [==[
__device__ __forceinline__ float tw_lo(tw_u32 u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float tw_hi(tw_u32 u) { return __uint_as_float(u & 0xffff0000u); }
]==]
else
    cuda [==[
__device__ __forceinline__ float tw_h2f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ float tw_lo(tw_u32 u) { return tw_h2f((unsigned short)(u & 0xffffu)); }
__device__ __forceinline__ float tw_hi(tw_u32 u) { return tw_h2f((unsigned short)(u >> 16)); }
]==]
end

cuda [==[
__device__ __forceinline__ float tw_dot8(uint4 a, uint4 b, float s) {
    s = fmaf(tw_lo(a.x), tw_lo(b.x), s);
    s = fmaf(tw_hi(a.x), tw_hi(b.x), s);
    s = fmaf(tw_lo(a.y), tw_lo(b.y), s);
    s = fmaf(tw_hi(a.y), tw_hi(b.y), s);
    s = fmaf(tw_lo(a.z), tw_lo(b.z), s);
    s = fmaf(tw_hi(a.z), tw_hi(b.z), s);
    s = fmaf(tw_lo(a.w), tw_lo(b.w), s);
    s = fmaf(tw_hi(a.w), tw_hi(b.w), s);
    return s;
}

__device__ __forceinline__ float tw_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(TW_FULL, v, o);
    return v;
}

/* Two warp-wide dot products a0·b0 and a1·b1 of K elements (on0/on1 off: skipped, 0), their
 * loads interleaved; every lane returns both sums. */
__device__ __forceinline__ void tw_dot2(const unsigned short *a0, const unsigned short *b0,
                                        bool on0, const unsigned short *a1,
                                        const unsigned short *b1, bool on1, int lane, float &r0,
                                        float &r1) {
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll 8
    for (int i = lane; i < ${K8}; i += 32) {
        uint4 xa = make_uint4(0u, 0u, 0u, 0u), wa = xa, xb = xa, wb = xa;
        if (on0) {
            xa = __ldg((const uint4 *)a0 + i);
            wa = __ldg((const uint4 *)b0 + i);
        }
        if (on1) {
            xb = __ldg((const uint4 *)a1 + i);
            wb = __ldg((const uint4 *)b1 + i);
        }
        s0 = tw_dot8(xa, wa, s0);
        s1 = tw_dot8(xb, wb, s1);
    }
    r0 = tw_warp_sum(s0);
    r1 = tw_warp_sum(s1);
}

/* Warms the address translation (and one line) of every 2 MB page of weight matrix w, [N, K],
 * pages split over `nparts` blocks: run BEFORE the grid dependency wait (w is an input no earlier
 * kernel writes), it overlaps the page walks of the weight rows this kernel will gather with the
 * previous kernel's tail. */
__device__ __forceinline__ void tw_warm(const unsigned short *w, unsigned part, unsigned nparts) {
    const unsigned long long pages = ((unsigned long long)${S.N} * ${S.K} * 2ull + 0x1fffffull) >> 21;
    for (unsigned long long pg = (unsigned long long)threadIdx.x * nparts + part; pg < pages;
         pg += (unsigned long long)blockDim.x * nparts)
        asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)w + (pg << 21)));
}

/* Dynamic shared memory of twell_ffn_small_up for M rows: the [32, Mp] gate table (u16) and the
 * [Mp] overflow masks (u32), Mp = M rounded up to 32. */
#define TW_UP_MP(M) (((M) + 31) & ~31)
#define TW_UP_SMEM(M) (TW_UP_MP(M) * 68)

/* One pending pair of the up kernel. */
struct tw_pair {
    int nl, m;
    unsigned short v; /* stored gate, or TW_OVF_MARK */
};

/* Computes up to two pairs (p[1] only when two): gate recompute for overflow marks, then h. */
__device__ __forceinline__ void tw_up_pairs(const tw_pair (&p)[2], bool two,
                                            const unsigned short *__restrict__ x,
                                            const unsigned short *__restrict__ wp,
                                            const unsigned short *__restrict__ wu,
                                            float *__restrict__ hbuf, tw_u32 *smask, int n0,
                                            int lane) {
    const unsigned short *x0 = x + (size_t)p[0].m * ${S.K}, *x1 = x + (size_t)p[1].m * ${S.K};
    const int n0a = n0 + p[0].nl, n1a = n0 + p[1].nl;
    unsigned short g0 = p[0].v, g1 = two ? p[1].v : (unsigned short)0;
    const bool o0 = g0 == TW_OVF_MARK, o1 = g1 == TW_OVF_MARK;
    if (o0 || o1) { /* the row-tile overflowed: recompute g exactly from the packing weight */
        float r0, r1;
        tw_dot2(x0, wp + (size_t)n0a * ${S.K}, o0, x1, wp + (size_t)n1a * ${S.K}, o1, lane, r0,
                r1);
        if (o0) {
            g0 = r0 > 0.0f ? tw_from_f32(r0) : (unsigned short)0;
            if ((g0 & 0x8000u) != 0)
                g0 = 0; /* never: r0 > 0 rounds to a positive pattern or +0 */
            if (g0 != 0 && lane == 0)
                atomicOr(&smask[p[0].m], 1u << p[0].nl);
        }
        if (o1) {
            g1 = r1 > 0.0f ? tw_from_f32(r1) : (unsigned short)0;
            if ((g1 & 0x8000u) != 0)
                g1 = 0;
            if (g1 != 0 && lane == 0)
                atomicOr(&smask[p[1].m], 1u << p[1].nl);
        }
    }
#if TW_GATED
    const bool u0 = g0 != 0, u1 = g1 != 0;
    float r0 = 0.0f, r1 = 0.0f;
    if (u0 || u1)
        tw_dot2(x0, wu + (size_t)n0a * ${S.K}, u0, x1, wu + (size_t)n1a * ${S.K}, u1, lane, r0,
                r1);
    if (lane == 0) {
        if (u0)
            hbuf[(size_t)p[0].m * ${S.N} + n0a] = tw_to_f32(g0) * r0;
        if (u1)
            hbuf[(size_t)p[1].m * ${S.N} + n1a] = tw_to_f32(g1) * r1;
    }
#else
    if (lane == 0) { /* only recomputed pairs reach hbuf; the others use the packed value */
        if (o0 && g0 != 0)
            hbuf[(size_t)p[0].m * ${S.N} + n0a] = tw_to_f32(g0);
        if (o1 && g1 != 0)
            hbuf[(size_t)p[1].m * ${S.N} + n1a] = tw_to_f32(g1);
    }
#endif
}

extern "C" __global__ void __launch_bounds__(256, 2)
twell_ffn_small_up(const unsigned short *__restrict__ x, const tw_u32 *__restrict__ packed,
                   const unsigned short *__restrict__ wp, const unsigned short *__restrict__ wu,
                   float *__restrict__ hbuf, tw_u32 *__restrict__ mask, int M) {
    if (TW_GATED)
        tw_warm(wu, blockIdx.x, gridDim.x);
    tw_pdl_enter();
    extern __shared__ __align__(16) unsigned char tw_smem[];
    const int Mp = TW_UP_MP(M);
    unsigned short *gt = (unsigned short *)tw_smem; /* gt[nl * Mp + m] */
    tw_u32 *smask = (tw_u32 *)(tw_smem + (size_t)Mp * 64);
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int n0 = (int)blockIdx.x * 32, t = n0 / ${S.T};

    for (int i = tid; i < Mp * 16; i += 256)
        ((tw_u32 *)gt)[i] = 0u;
    for (int i = tid; i < Mp; i += 256)
        smask[i] = 0u;
    __syncthreads();
    /* the table: one thread per row */
    for (int m = tid; m < M; m += 256) {
        const tw_u32 *cell = packed + (size_t)m * ${S.NW} + (size_t)t * ${S.W};
        const tw_u32 cnt = __ldg(cell);
        if (cnt > ${S.SLOTS}u) {
            for (int nl = 0; nl < 32; nl++)
                gt[nl * Mp + m] = TW_OVF_MARK;
        } else if (TW_GATED) {
            for (tw_u32 s = 1; s <= cnt; s++) {
                const tw_u32 e = __ldg(cell + s);
                const tw_u32 col = e & 0xffffu;
                if (col >= (tw_u32)(n0 + 32))
                    break; /* ascending columns: the rest belong to later blocks */
                if (col >= (tw_u32)n0)
                    gt[(col - (tw_u32)n0) * Mp + m] = (unsigned short)(e >> 16);
            }
        }
    }
    __syncthreads();

    /* active pairs, neuron-major then row-ascending; pair i to warp i % 8, two at a time */
    tw_pair pend[2]; /* registers: indexed with constants only */
    pend[0].nl = pend[0].m = pend[1].nl = pend[1].m = 0;
    pend[0].v = pend[1].v = 0;
    bool have = false;
    tw_u32 ord = 0;
    for (int nl = 0; nl < 32; nl++) {
        for (int mb = 0; mb < M; mb += 32) {
            const int m = mb + lane;
            const unsigned short v = m < M ? gt[nl * Mp + m] : (unsigned short)0;
            tw_u32 bal = __ballot_sync(TW_FULL, v != 0);
            while (bal) {
                const int q = __ffs(bal) - 1;
                bal &= bal - 1u;
                const unsigned short vq = (unsigned short)__shfl_sync(TW_FULL, (int)v, q);
                if ((ord & 7u) == (tw_u32)warp) {
                    if (!have) {
                        pend[0].nl = nl, pend[0].m = mb + q, pend[0].v = vq;
                        have = true;
                    } else {
                        pend[1].nl = nl, pend[1].m = mb + q, pend[1].v = vq;
                        tw_up_pairs(pend, true, x, wp, wu, hbuf, smask, n0, lane);
                        have = false;
                    }
                }
                ord++;
            }
        }
    }
    if (have)
        tw_up_pairs(pend, false, x, wp, wu, hbuf, smask, n0, lane);
    __syncthreads();
    /* the masks of this block's 32 neurons in the overflowing row-tiles */
    for (int m = tid; m < M; m += 256)
        if (gt[m] == TW_OVF_MARK)
            mask[(size_t)m * ${S.N // 32} + (size_t)(n0 >> 5)] = smask[m];
}

/* x_row · b0 and x_row · b1 (on0/on1 off: skipped, 0) with the row in shared memory. */
__device__ __forceinline__ void tw_dot2s(const uint4 *xs, const unsigned short *b0, bool on0,
                                         const unsigned short *b1, bool on1, int lane, float &r0,
                                         float &r1) {
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll 8
    for (int i = lane; i < ${K8}; i += 32) {
        const uint4 xv = xs[i];
        uint4 wa = make_uint4(0u, 0u, 0u, 0u), wb = wa;
        if (on0)
            wa = __ldg((const uint4 *)b0 + i);
        if (on1)
            wb = __ldg((const uint4 *)b1 + i);
        s0 = tw_dot8(xv, wa, s0);
        s1 = tw_dot8(xv, wb, s1);
    }
    r0 = tw_warp_sum(s0);
    r1 = tw_warp_sum(s1);
}

/* The lane's 8 columns of the weight rows n[q], q < nb (loads only: issued early). */
__device__ __forceinline__ void tw_wd_load(uint4 (&v)[8], const unsigned short *__restrict__ wd,
                                           int c0, bool cok, const tw_u32 (&n)[8], int nb) {
#pragma unroll
    for (int q = 0; q < 8; q++)
        v[q] = q < nb && cok ? __ldg((const uint4 *)(wd + (size_t)n[q] * ${S.K} + c0))
                             : make_uint4(0u, 0u, 0u, 0u);
}

/* acc += h[q] · v[q] for q < nb, in q order. */
__device__ __forceinline__ void tw_wd_fma(float (&acc)[8], const uint4 (&v)[8], const float (&h)[8],
                                          int nb) {
#pragma unroll
    for (int q = 0; q < 8; q++)
        if (q < nb) {
            acc[0] = fmaf(h[q], tw_lo(v[q].x), acc[0]);
            acc[1] = fmaf(h[q], tw_hi(v[q].x), acc[1]);
            acc[2] = fmaf(h[q], tw_lo(v[q].y), acc[2]);
            acc[3] = fmaf(h[q], tw_hi(v[q].y), acc[3]);
            acc[4] = fmaf(h[q], tw_lo(v[q].z), acc[4]);
            acc[5] = fmaf(h[q], tw_hi(v[q].z), acc[5]);
            acc[6] = fmaf(h[q], tw_lo(v[q].w), acc[6]);
            acc[7] = fmaf(h[q], tw_hi(v[q].w), acc[7]);
        }
}

/* acc += h_j · (the lane's 8 columns of Wd row n_j) for nb ≤ 32 (column, h) pairs held
 * lane-parallel (lane j: n, h, for j < nb), in lane order, eight at a time: the eight Wd rows'
 * loads are issued together. */
__device__ __forceinline__ void tw_lane_fma(float (&acc)[8], tw_u32 n, float h, int nb,
                                            const unsigned short *__restrict__ wd, int c0,
                                            bool cok) {
    for (int q0 = 0; q0 < nb; q0 += 8) {
        const int bn = min(8, nb - q0);
        tw_u32 nq[8];
        float hq[8];
#pragma unroll
        for (int q = 0; q < 8; q++) {
            nq[q] = (tw_u32)__shfl_sync(TW_FULL, (int)n, q0 + q);
            hq[q] = __shfl_sync(TW_FULL, h, q0 + q);
        }
        uint4 v[8];
        tw_wd_load(v, wd, c0, cok, nq, bn);
        tw_wd_fma(acc, v, hq, bn);
    }
}

/* Up to 32 entries of one row held lane-parallel (lane j: entry word e = value << 16 | column,
 * valid for j < nb), in lane order: h from hbuf (from_hbuf) or the value bits (non-gated stored
 * entries: h = g). */
__device__ __forceinline__ void tw_row_entries(float (&acc)[8], tw_u32 e, bool valid, int nb,
                                               bool from_hbuf, const float *__restrict__ hrow,
                                               const unsigned short *__restrict__ wd, int c0,
                                               bool cok, int lane) {
    const float h = !valid      ? 0.0f
                    : from_hbuf ? __ldg(hrow + (e & 0xffffu))
                                : tw_to_f32((unsigned short)(e >> 16));
    tw_lane_fma(acc, e & 0xffffu, h, nb, wd, c0, cok);
}

/* Lane j's entry word for the j-th set bit of `bits` (columns col0 + bit; its value comes from
 * hbuf); *nb = set bits. */
__device__ __forceinline__ tw_u32 tw_bits_entry(tw_u32 bits, int col0, int lane, int *nb) {
    tw_u32 b = bits;
    for (int k = 0; k < lane && b; k++)
        b &= b - 1u;
    *nb = __popc(bits);
    return b ? (tw_u32)(col0 + __ffs(b) - 1) : 0u;
}

/* Row-tile t of the row overflowed: the up kernel's activity masks of its columns and their h. */
__device__ __forceinline__ void tw_row_overflow(float (&acc)[8], int t, const tw_u32 *__restrict__ mrow,
                                                const float *__restrict__ hrow,
                                                const unsigned short *__restrict__ wd, int c0,
                                                bool cok, int lane) {
    for (int i = 0; i < ${S.T // 32}; i++) {
        const int col0 = t * ${S.T} + 32 * i;
        int nb;
        const tw_u32 e = tw_bits_entry(__ldg(mrow + col0 / 32), col0, lane, &nb);
        tw_row_entries(acc, e, lane < nb, nb, true, hrow, wd, c0, cok, lane);
    }
}

/* Warp `warp` of a row block: the row-tiles t ≡ warp (mod 8), 32 at a time: their count words
 * loaded together, their stored entries flattened (a prefix sum over the tiles) and loaded 32 at
 * a time, so a row costs a few dependent memory steps whatever its number of tiles; entries in
 * (tile, slot) order, then the chunk's overflowing tiles in tile order: a fixed order. */
__device__ __forceinline__ void tw_row_walk(float (&acc)[8], int *sincl, const tw_u32 *__restrict__ prow,
                                            const float *__restrict__ hrow,
                                            const tw_u32 *__restrict__ mrow,
                                            const unsigned short *__restrict__ wd, int c0, bool cok,
                                            int warp, int lane) {
    const int ntw = (${NT} - warp + 7) / 8;
    for (int i0 = 0; i0 < ntw; i0 += 32) {
        const int i = i0 + lane;
        const tw_u32 cnt = i < ntw ? __ldg(prow + (size_t)(warp + 8 * i) * ${S.W}) : 0u;
        const bool ovf = cnt > ${S.SLOTS}u;
        /* counts are at most SLOTS each: the unsigned scan is the int one */
        const int incl = (int)tw_warp_incl_scan(ovf ? 0u : cnt, lane);
        const int total = __shfl_sync(TW_FULL, incl, 31);
        sincl[lane] = incl;
        __syncwarp();
        for (int j0 = 0; j0 < total; j0 += 32) {
            const int j = j0 + lane;
            tw_u32 e = 0u;
            if (j < total) {
                int lo = 0, hi = 31; /* the first tile whose inclusive count exceeds j */
                while (lo < hi) {
                    const int mid = (lo + hi) >> 1;
                    if (sincl[mid] > j)
                        hi = mid;
                    else
                        lo = mid + 1;
                }
                const int excl = lo ? sincl[lo - 1] : 0;
                e = __ldg(prow + (size_t)(warp + 8 * (i0 + lo)) * ${S.W} + 1 + (j - excl));
                if ((e & 0xffffu) >= ${S.N}u)
                    e = 0u; /* malformed input: a column past N reads no weight row beyond N */
            }
            tw_row_entries(acc, e, j < total, min(32, total - j0), TW_GATED, hrow, wd, c0, cok,
                           lane);
        }
        __syncwarp(); /* sincl is rewritten by the next chunk */
        tw_u32 ob = __ballot_sync(TW_FULL, ovf);
        while (ob) {
            const int L = __ffs(ob) - 1;
            ob &= ob - 1u;
            tw_row_overflow(acc, warp + 8 * (i0 + L), mrow, hrow, wd, c0, cok, lane);
        }
    }
}

/* The partial sums of warps w0 .. w0 + nw - 1 for the lane's 8 columns c0.. of a 256-column
 * slice, added in warp order by warp w0, rounded once, stored; every thread of the block calls it
 * (a warp whose w0 is -1 only writes its partial); red may be reused after it returns. */
__device__ __forceinline__ void tw_store_sums(float4 (*red)[32][2], const float (&acc)[8],
                                              unsigned short *__restrict__ yrow, int c0, bool cok,
                                              int warp, int lane, int w0, int nw) {
    red[warp][lane][0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    red[warp][lane][1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    __syncthreads();
    if (warp == w0 && cok) {
        float s[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
            s[i] = 0.0f;
        for (int w2 = w0; w2 < w0 + nw; w2++) {
            const float4 a = red[w2][lane][0], b = red[w2][lane][1];
            s[0] += a.x, s[1] += a.y, s[2] += a.z, s[3] += a.w;
            s[4] += b.x, s[5] += b.y, s[6] += b.z, s[7] += b.w;
        }
        uint4 o;
        o.x = (tw_u32)tw_from_f32(s[0]) | (tw_u32)tw_from_f32(s[1]) << 16;
        o.y = (tw_u32)tw_from_f32(s[2]) | (tw_u32)tw_from_f32(s[3]) << 16;
        o.z = (tw_u32)tw_from_f32(s[4]) | (tw_u32)tw_from_f32(s[5]) << 16;
        o.w = (tw_u32)tw_from_f32(s[6]) | (tw_u32)tw_from_f32(s[7]) << 16;
        *(uint4 *)(yrow + c0) = o;
    }
    __syncthreads();
}

extern "C" __global__ void __launch_bounds__(256, 2)
twell_ffn_small_down(const tw_u32 *__restrict__ packed, const unsigned short *__restrict__ wd,
                     const float *__restrict__ hbuf, const tw_u32 *__restrict__ mask,
                     unsigned short *__restrict__ y, int M) {
    if (blockIdx.y == 0)
        tw_warm(wd, blockIdx.x, gridDim.x);
    tw_pdl_enter();
    __shared__ float4 red[8][32][2];
    __shared__ int sincl[8][32];
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int m = (int)blockIdx.y;
    const int c0 = (int)blockIdx.x * 256 + 8 * lane;
    const bool cok = c0 < ${S.K};
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        acc[i] = 0.0f;
    tw_row_walk(acc, sincl[warp], packed + (size_t)m * ${S.NW}, hbuf + (size_t)m * ${S.N},
                mask + (size_t)m * ${S.N // 32}, wd, c0, cok, warp, lane);
    tw_store_sums(red, acc, y + (size_t)m * ${S.K}, c0, cok, warp, lane, 0, 8);
}

/* The address of shared-memory word `addr` in the block of cluster rank `rank` (sm_90+). */
__device__ __forceinline__ tw_u32 tw_dsmem(tw_u32 addr, tw_u32 rank) {
    tw_u32 r = 0u;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
#endif
    return r;
}

/* ---- the one-kernel inference for few rows (twell_ffn_small_fused, twell_ffn_small_fused_cl) ----
 * Both stage x_m and the packed row m in shared memory together (one dependent memory step),
 * scan the row-tiles' stored counts into a flat entry index (tw_fused_stage) and treat the entries
 * as pairs (2p, 2p + 1); the columns of overflowing row-tiles follow as candidate pairs in (tile,
 * column) order, their g recomputed from the packing weight and only the active ones used. Each
 * pair's Wd columns and (gated) whole Wu rows are loaded together (the second step). Every sum
 * runs in a fixed order (pairs ascending within a warp, then the warps in order): bitwise
 * reproducible. */
#define TW_FW 16 /* warps of a fused block */
#define TW_ZERO4 make_uint4(0u, 0u, 0u, 0u)

struct tw_fused_row {
    int total, ncand; /* stored entries; candidate columns (T per overflowing row-tile) */
};

/* The one-kernel kernels' opening: blocks `part` < nparts (warm) warm the page translations of
 * Wd and (gated) Wu, then the grid dependency wait. */
__device__ __forceinline__ void tw_fused_enter(const unsigned short *__restrict__ wd,
                                               const unsigned short *__restrict__ wu, bool warm,
                                               unsigned part, unsigned nparts) {
    if (warm) {
        tw_warm(wd, part, nparts);
        if (TW_GATED)
            tw_warm(wu, part, nparts);
    }
    tw_pdl_enter();
}

/* Their dynamic shared memory's common part: x_m (K·2 bytes), the packed row (4·N/C), the tiles'
 * inclusive counts and the overflowing tiles (4·N/T each); `rest` is what follows. */
struct tw_fused_smem {
    uint4 *xs;
    tw_u32 *pw;
    int *sincl, *sovf;
    unsigned char *rest;
};
__device__ __forceinline__ tw_fused_smem tw_fused_layout(unsigned char *base) {
    tw_fused_smem L;
    L.xs = (uint4 *)base;
    L.pw = (tw_u32 *)(base + ${S.K * 2});
    L.sincl = (int *)(L.pw + ${S.NW});
    L.sovf = L.sincl + ${NT};
    L.rest = (unsigned char *)(L.sovf + ${NT});
    return L;
}

/* Stages x_m and the packed row m (both K·2 + 4·N/C bytes of the dynamic shared memory), then
 * warp 0 scans the tiles: sincl[t] = stored entries of tiles 0..t (0 for an overflowing tile),
 * sovf = the overflowing tiles ascending. All threads call it. */
__device__ __forceinline__ tw_fused_row tw_fused_stage(const unsigned short *__restrict__ x,
                                                       const tw_u32 *__restrict__ packed, int m,
                                                       uint4 *xs, tw_u32 *pw, int *sincl,
                                                       int *sovf, int *s_two) {
    const int tid = (int)threadIdx.x, lane = tid & 31;
    const uint4 *xrow = (const uint4 *)(x + (size_t)m * ${S.K});
    const tw_u32 *prow = packed + (size_t)m * ${S.NW};
    for (int i = tid; i < ${K8}; i += TW_FW * 32)
        xs[i] = __ldg(xrow + i);
    for (int i = tid; i < ${S.NW}; i += TW_FW * 32)
        pw[i] = __ldg(prow + i);
    __syncthreads();
    if (tid < 32) {
        int run = 0, nov = 0;
        for (int t0 = 0; t0 < ${NT}; t0 += 32) {
            const int t = t0 + lane;
            const tw_u32 cnt = t < ${NT} ? pw[t * ${S.W}] : 0u;
            const bool ovf = cnt > ${S.SLOTS}u;
            const int incl = run + (int)tw_warp_incl_scan(ovf ? 0u : cnt, lane);
            if (t < ${NT})
                sincl[t] = incl;
            run = __shfl_sync(TW_FULL, incl, 31);
            const tw_u32 ob = __ballot_sync(TW_FULL, ovf);
            if (ovf)
                sovf[nov + __popc(ob & ((1u << lane) - 1u))] = t;
            nov += __popc(ob);
        }
        if (lane == 0)
            s_two[0] = run, s_two[1] = nov * ${S.T};
    }
    __syncthreads();
    tw_fused_row r;
    r.total = s_two[0], r.ncand = s_two[1];
    return r;
}

/* Entry word j of the staged row (j < total): the first tile whose inclusive count exceeds j; a
 * word whose column is past N (malformed input) comes back as 0 (value +0, column 0). */
__device__ __forceinline__ tw_u32 tw_fused_entry(const tw_u32 *pw, const int *sincl, int j) {
    int lo = 0, hi = ${NT} - 1;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (sincl[mid] > j)
            hi = mid;
        else
            lo = mid + 1;
    }
    const tw_u32 e = pw[lo * ${S.W} + 1 + (j - (lo ? sincl[lo - 1] : 0))];
    return (e & 0xffffu) < ${S.N}u ? e : 0u; /* malformed input: a column past N reads row 0, +0 */
}

/* Stored pair (j, j + 1), j even: columns n[0..1], h (gated: g · x_m · Wu_n by the warp); `two`
 * says whether j + 1 exists. Issue the pair's Wd loads before calling it. */
__device__ __forceinline__ void tw_pair_cols(const tw_u32 *pw, const int *sincl, int j, int total,
                                             tw_u32 (&n)[2], float (&g)[2], bool &two) {
    two = j + 1 < total;
    const tw_u32 e0 = tw_fused_entry(pw, sincl, j);
    const tw_u32 e1 = two ? tw_fused_entry(pw, sincl, j + 1) : 0u;
    n[0] = e0 & 0xffffu, n[1] = e1 & 0xffffu;
    g[0] = tw_to_f32((unsigned short)(e0 >> 16));
    g[1] = two ? tw_to_f32((unsigned short)(e1 >> 16)) : 0.0f;
}
__device__ __forceinline__ void tw_pair_h(const uint4 *xs, const unsigned short *__restrict__ wu,
                                          const tw_u32 (&n)[2], bool two, int lane,
                                          float (&h)[2]) {
#if TW_GATED
    float u0, u1;
    tw_dot2s(xs, wu + (size_t)n[0] * ${S.K}, true, wu + (size_t)n[1] * ${S.K}, two, lane, u0, u1);
    h[0] *= u0;
    h[1] *= u1;
#endif
}

/* Candidate pair (c, c + 1), c even (T even: one tile): columns n[0..1], g recomputed exactly from
 * the packing weight, a[i] = active, h (gated: g · x_m · Wu_n for the active ones, else 0). */
__device__ __forceinline__ void tw_cand_cols(const int *sovf, int c, tw_u32 (&n)[2]) {
    n[0] = (tw_u32)(sovf[c / ${S.T}] * ${S.T} + c % ${S.T});
    n[1] = n[0] + 1u;
}
__device__ __forceinline__ void tw_cand_h(const uint4 *xs, const unsigned short *__restrict__ wp,
                                          const unsigned short *__restrict__ wu,
                                          const tw_u32 (&n)[2], int lane, bool (&a)[2],
                                          float (&h)[2]) {
    float r0, r1;
    tw_dot2s(xs, wp + (size_t)n[0] * ${S.K}, true, wp + (size_t)n[1] * ${S.K}, true, lane, r0, r1);
    const unsigned short g0 = r0 > 0.0f ? tw_from_f32(r0) : (unsigned short)0;
    const unsigned short g1 = r1 > 0.0f ? tw_from_f32(r1) : (unsigned short)0;
    a[0] = g0 != 0u && (g0 & 0x8000u) == 0u;
    a[1] = g1 != 0u && (g1 & 0x8000u) == 0u;
    h[0] = a[0] ? tw_to_f32(g0) : 0.0f;
    h[1] = a[1] ? tw_to_f32(g1) : 0.0f;
#if TW_GATED
    if (a[0] || a[1]) {
        float u0, u1;
        tw_dot2s(xs, wu + (size_t)n[0] * ${S.K}, a[0], wu + (size_t)n[1] * ${S.K}, a[1], lane, u0,
                 u1);
        h[0] *= u0;
        h[1] *= u1;
    }
#endif
}

/* acc += h[i] · (the lane's 8 columns of Wd row n[i]) for the pair's used members, in order. */
__device__ __forceinline__ void tw_pair_fma(float (&acc)[8], const uint4 (&v2)[2],
                                            const float (&h2)[2], bool u0, bool u1) {
    const uint4 v[8] = {u0 ? v2[0] : v2[1], v2[1]};
    const float h[8] = {u0 ? h2[0] : h2[1], h2[1]};
    tw_wd_fma(acc, v, h, (int)u0 + (int)u1);
}
__device__ __forceinline__ void tw_pair_wd(const unsigned short *__restrict__ wd,
                                           const tw_u32 (&n)[2], bool l0, bool l1, int c0,
                                           bool cok, uint4 (&v)[2]) {
    v[0] = cok && l0 ? __ldg((const uint4 *)(wd + (size_t)n[0] * ${S.K} + c0)) : TW_ZERO4;
    v[1] = cok && l1 ? __ldg((const uint4 *)(wd + (size_t)n[1] * ${S.K} + c0)) : TW_ZERO4;
}

/* Block (s, m): columns [256s, 256s + 256) of row m. Warp w takes the pairs p ≡ w (mod 16); each
 * block of the row repeats the dots for its columns (K/256 times the Wu reads, from L2 after the
 * first). Dynamic shared memory: K·2 + 4·N/C + 8·N/T bytes. */
extern "C" __global__ void __launch_bounds__(TW_FW * 32, 1)
twell_ffn_small_fused(const unsigned short *__restrict__ x, const tw_u32 *__restrict__ packed,
                      const unsigned short *__restrict__ wp, const unsigned short *__restrict__ wu,
                      const unsigned short *__restrict__ wd, unsigned short *__restrict__ y,
                      int M) {
    tw_fused_enter(wd, wu, blockIdx.y == 0, blockIdx.x, gridDim.x);
    extern __shared__ __align__(16) unsigned char tw_smem[];
    const tw_fused_smem L = tw_fused_layout(tw_smem);
    uint4 *xs = L.xs;
    tw_u32 *pw = L.pw;
    int *sincl = L.sincl, *sovf = L.sovf;
    __shared__ float4 red[TW_FW][32][2];
    __shared__ int s_two[2];
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int m = (int)blockIdx.y;
    const int c0 = (int)blockIdx.x * 256 + 8 * lane;
    const bool cok = c0 < ${S.K};
    const tw_fused_row r = tw_fused_stage(x, packed, m, xs, pw, sincl, sovf, s_two);
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        acc[i] = 0.0f;
    for (int j = 2 * warp; j < r.total; j += 2 * TW_FW) {
        tw_u32 n[2];
        float h[2];
        bool two;
        uint4 v[2];
        tw_pair_cols(pw, sincl, j, r.total, n, h, two);
        tw_pair_wd(wd, n, true, two, c0, cok, v);
        tw_pair_h(xs, wu, n, two, lane, h);
        tw_pair_fma(acc, v, h, true, two);
    }
    for (int c = 2 * warp; c < r.ncand; c += 2 * TW_FW) {
        tw_u32 n[2];
        bool a[2];
        float h[2];
        uint4 v[2];
        tw_cand_cols(sovf, c, n);
        tw_cand_h(xs, wp, wu, n, lane, a, h);
        if (!a[0] && !a[1])
            continue;
        tw_pair_wd(wd, n, a[0], a[1], c0, cok, v);
        tw_pair_fma(acc, v, h, a[0], a[1]);
    }
    tw_store_sums(red, acc, y + (size_t)m * ${S.K}, c0, cok, warp, lane, 0, TW_FW);
}

/* Hopper: the same in a thread-block cluster of ${CL} blocks a row, so that each block computes
 * the h of only 1/${CL} of the row's pairs. Block b of row m (cluster rank b): phase 1 computes the
 * pairs p ≡ b (mod ${CL}) (warp w those with p / ${CL} ≡ w (mod 16)) into its shared memory, then
 * the cluster's barrier; phase 2 sums h · Wd over all pairs for the block's column slices
 * s ≡ b (mod ${CL}) (256 columns each; warp w the pairs p ≡ w (mod 16), h read from the owning
 * block's shared memory), and a last cluster barrier keeps every block's h alive until all have
 * read it. Grid (${CL}, M), cluster (${CL}, 1, 1), 512 threads; dynamic shared memory:
 * twell_ffn_small_fused (the same layout) + 8·ceil(pairs/${CL}) + 12·ceil(N/(2·${CL})) bytes. */
extern "C" __global__ void __launch_bounds__(TW_FW * 32, 1)
twell_ffn_small_fused_cl(const unsigned short *__restrict__ x, const tw_u32 *__restrict__ packed,
                         const unsigned short *__restrict__ wp,
                         const unsigned short *__restrict__ wu,
                         const unsigned short *__restrict__ wd, unsigned short *__restrict__ y,
                         int M) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    tw_fused_enter(wd, wu, blockIdx.y == 0, blockIdx.x, gridDim.x);
    extern __shared__ __align__(16) unsigned char tw_smem[];
    const tw_fused_smem L = tw_fused_layout(tw_smem);
    uint4 *xs = L.xs;
    tw_u32 *pw = L.pw;
    int *sincl = L.sincl, *sovf = L.sovf;
    float *hs = (float *)L.rest;                /* [2·PL] h of this block's stored pairs */
    float *hc = hs + 2 * ${PL};                 /* [2·QL] h of its candidate pairs */
    tw_u32 *ac = (tw_u32 *)(hc + 2 * ${QL});    /* [QL] their active bits */
    __shared__ float4 red[TW_FW][32][2];
    __shared__ int s_two[2];
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int b = (int)blockIdx.x, m = (int)blockIdx.y;
    const tw_fused_row r = tw_fused_stage(x, packed, m, xs, pw, sincl, sovf, s_two);
    const int np = (r.total + 1) >> 1, nq = r.ncand >> 1;
    /* phase 1: this block's pairs */
    for (int l = warp; l * ${CL} + b < np; l += TW_FW) {
        const int j = 2 * (l * ${CL} + b);
        tw_u32 n[2];
        float h[2];
        bool two;
        tw_pair_cols(pw, sincl, j, r.total, n, h, two);
        tw_pair_h(xs, wu, n, two, lane, h);
        if (lane == 0)
            hs[2 * l] = h[0], hs[2 * l + 1] = h[1];
    }
    for (int l = warp; l * ${CL} + b < nq; l += TW_FW) {
        tw_u32 n[2];
        bool a[2];
        float h[2];
        tw_cand_cols(sovf, 2 * (l * ${CL} + b), n);
        tw_cand_h(xs, wp, wu, n, lane, a, h);
        if (lane == 0)
            hc[2 * l] = h[0], hc[2 * l + 1] = h[1], ac[l] = (tw_u32)a[0] | (tw_u32)a[1] << 1;
    }
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;"
                 ::: "memory");
    /* phase 2: every pair, for this block's column slices */
    const tw_u32 hs_a = (tw_u32)__cvta_generic_to_shared(hs);
    const tw_u32 hc_a = (tw_u32)__cvta_generic_to_shared(hc);
    const tw_u32 ac_a = (tw_u32)__cvta_generic_to_shared(ac);
    for (int sl = b; sl * 256 < ${S.K}; sl += ${CL}) {
        const int c0 = sl * 256 + 8 * lane;
        const bool cok = c0 < ${S.K};
        float acc[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
            acc[i] = 0.0f;
        for (int p = warp; p < np; p += TW_FW) {
            tw_u32 n[2];
            float h[2];
            bool two;
            uint4 v[2];
            tw_pair_cols(pw, sincl, 2 * p, r.total, n, h, two);
            tw_pair_wd(wd, n, true, two, c0, cok, v);
            const tw_u32 ra = tw_dsmem(hs_a + 8u * (tw_u32)(p / ${CL}), (tw_u32)(p % ${CL}));
            asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(h[0]), "=f"(h[1]) : "r"(ra));
            tw_pair_fma(acc, v, h, true, two);
        }
        for (int q = warp; q < nq; q += TW_FW) {
            const tw_u32 rank = (tw_u32)(q % ${CL}), l = (tw_u32)(q / ${CL});
            tw_u32 bits;
            asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(bits) : "r"(tw_dsmem(ac_a + 4u * l, rank)));
            if (!bits)
                continue;
            tw_u32 n[2];
            float h[2];
            uint4 v[2];
            tw_cand_cols(sovf, 2 * q, n);
            tw_pair_wd(wd, n, bits & 1u, bits & 2u, c0, cok, v);
            asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(h[0]), "=f"(h[1])
                         : "r"(tw_dsmem(hc_a + 8u * l, rank)));
            tw_pair_fma(acc, v, h, bits & 1u, bits & 2u);
        }
        tw_store_sums(red, acc, y + (size_t)m * ${S.K}, c0, cok, warp, lane, 0, TW_FW);
    }
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;"
                 ::: "memory");
#endif
}
]==]

-- ---- the row kernel for the rows above the fused kernel's (mid batches), K ≤ 4096 ----
-- twell_ffn_small_row(...the fused kernel's arguments...)
--   grid = M, block = 512, dynamic shared memory = the fused kernel's + 8 · ceil(N/T · (T/C − 1) / 2)
--   + 12 · 512 bytes; emitted only when K ≤ 4096 (16 column slices of 256 at most).
-- Block m: row m, every column. Its 16 warps first compute h of the row's stored pairs (warp w
-- the pairs p ≡ w mod 16: each Wu row read once, by one warp) into shared memory, then each warp
-- sums h · Wd for one 256-column slice over its share of the pairs (NSW warps a slice, warp part
-- q the pairs p ≡ q mod NSW, loads eight Wd rows at a time), and the slice's NSW partials are
-- added in part order. Candidate columns of overflowing row-tiles go in chunks of 512 pairs
-- through the same two phases (the active ones only, in column order). Fixed order everywhere:
-- bitwise reproducible.
local NSW = 1
while NSW * 2 * NSL <= 16 do
    NSW = NSW * 2
end
local RQ = 512
local PLR = (NT * S.SLOTS + 1) // 2
if NSL <= 16 then
    cuda [==[
#define TW_ROW_NSW ${NSW}
#define TW_ROW_RQ ${RQ}

/* Lane j of the warp takes the (column, h) of the j-th lane whose `on` is set (in lane order);
 * returns the number set. */
__device__ __forceinline__ int tw_compact(bool on, tw_u32 &n, float &h, int lane) {
    const tw_u32 bal = __ballot_sync(TW_FULL, on);
    tw_u32 b = bal;
    for (int q = 0; q < lane && b; q++)
        b &= b - 1u;
    const int src = b ? __ffs(b) - 1 : 0;
    n = (tw_u32)__shfl_sync(TW_FULL, (int)n, src);
    h = __shfl_sync(TW_FULL, h, src);
    return __popc(bal);
}

extern "C" __global__ void __launch_bounds__(TW_FW * 32, 2)
twell_ffn_small_row(const unsigned short *__restrict__ x, const tw_u32 *__restrict__ packed,
                    const unsigned short *__restrict__ wp, const unsigned short *__restrict__ wu,
                    const unsigned short *__restrict__ wd, unsigned short *__restrict__ y, int M) {
    tw_fused_enter(wd, wu, blockIdx.x < 8u, blockIdx.x, gridDim.x < 8u ? gridDim.x : 8u);
    extern __shared__ __align__(16) unsigned char tw_smem[];
    const tw_fused_smem L = tw_fused_layout(tw_smem);
    uint4 *xs = L.xs;
    tw_u32 *pw = L.pw;
    int *sincl = L.sincl, *sovf = L.sovf;
    float *hs = (float *)L.rest;                 /* [2·PLR] h of the stored entries, by entry */
    float *hc = hs + 2 * ${PLR};                 /* [2·RQ] h of a chunk's candidate columns */
    tw_u32 *ac = (tw_u32 *)(hc + 2 * TW_ROW_RQ); /* [RQ] their pairs' active bits */
    __shared__ float4 red[TW_FW][32][2];
    __shared__ int s_two[2];
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int m = (int)blockIdx.x;
    const tw_fused_row r = tw_fused_stage(x, packed, m, xs, pw, sincl, sovf, s_two);
    const int np = (r.total + 1) >> 1;
    const int part = warp % TW_ROW_NSW, sl = warp / TW_ROW_NSW;
    const bool task = sl < ${NSL};
    const int c0 = sl * 256 + 8 * lane;
    const bool cok = task && c0 < ${S.K};
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        acc[i] = 0.0f;
    for (int cb = 0;; cb += 2 * TW_ROW_RQ) {
        /* phase 1: h of the stored pairs (first round) and of this chunk's candidate pairs */
        if (cb == 0)
            for (int p = warp; p < np; p += TW_FW) {
                tw_u32 n[2];
                float h[2];
                bool two;
                tw_pair_cols(pw, sincl, 2 * p, r.total, n, h, two);
                tw_pair_h(xs, wu, n, two, lane, h);
                if (lane == 0)
                    hs[2 * p] = h[0], hs[2 * p + 1] = h[1];
            }
        const int nqc = min(TW_ROW_RQ, (r.ncand - cb) >> 1);
        for (int l = warp; l < nqc; l += TW_FW) {
            tw_u32 n[2];
            bool a[2];
            float h[2];
            tw_cand_cols(sovf, cb + 2 * l, n);
            tw_cand_h(xs, wp, wu, n, lane, a, h);
            if (lane == 0)
                hc[2 * l] = h[0], hc[2 * l + 1] = h[1], ac[l] = (tw_u32)a[0] | (tw_u32)a[1] << 1;
        }
        __syncthreads();
        /* phase 2: this warp's slice over its part's pairs, 32 entries at a time */
        if (task) {
            if (cb == 0)
                for (int i0 = 0; 2 * (part + TW_ROW_NSW * (i0 >> 1)) < r.total; i0 += 32) {
                    const int i = i0 + lane;
                    const int j = 2 * (part + TW_ROW_NSW * (i >> 1)) + (i & 1);
                    const bool on = j < r.total;
                    const tw_u32 n = on ? tw_fused_entry(pw, sincl, j) & 0xffffu : 0u;
                    const float h = on ? hs[j] : 0.0f;
                    /* j grows with the lane: the entries are the first lanes */
                    tw_lane_fma(acc, n, h, __popc(__ballot_sync(TW_FULL, on)), wd, c0, cok);
                }
            for (int i0 = 0; part + TW_ROW_NSW * (i0 >> 1) < nqc; i0 += 32) {
                const int i = i0 + lane;
                const int l = part + TW_ROW_NSW * (i >> 1), k = i & 1;
                const bool on = l < nqc && ((ac[l] >> k) & 1u) != 0u;
                const int c = cb + 2 * l + k;
                tw_u32 n = on ? (tw_u32)(sovf[c / ${S.T}] * ${S.T} + c % ${S.T}) : 0u;
                float h = on ? hc[2 * l + k] : 0.0f;
                const int nb = tw_compact(on, n, h, lane);
                tw_lane_fma(acc, n, h, nb, wd, c0, cok);
            }
        }
        if (cb + 2 * TW_ROW_RQ >= r.ncand)
            break;
        __syncthreads(); /* the next chunk rewrites hc and ac */
    }
    tw_store_sums(red, acc, y + (size_t)m * ${S.K}, c0, cok, warp, lane, task ? warp - part : -1,
                  TW_ROW_NSW);
}
]==]
end
