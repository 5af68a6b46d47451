-- ffn_small.cu.lua — twell_ffn_infer for few rows (decode: M from 1 to a few hundred), in two
-- kernels that read each active weight row once per call for all the rows that use it:
--   twell_ffn_small_up    neuron-major: h = g ⊙ (x · Wuᵀ) for the active (row, neuron) pairs
--                         (gated), and the exact recompute of row-tiles that overflow the format
--   twell_ffn_small_down  row-major: y = Σ h · Wd over each row's active neurons
-- or, for the fewest rows, in one:
--   twell_ffn_small_fused the down kernel computing h itself (no scratch, one launch)
-- or, over AUTO's middle range of M (TW_POLICY_ROW_* in ffn_policy.h; K ≤ 4096), one block a row:
--   twell_ffn_small_row   h of the row's pairs into shared memory, then y by column slices
--                         (its ABI and rule at the end of this file)
--
-- Parameters: K (multiple of 32), N, T, C, dtype (see twellrt.h); gated (1 | 0, default 1).
-- ABI (fixed; runtime/ops/ffn/small/cuda_small.c launches up then down, or fused alone, on one
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
-- entries; one that overflows is recomputed: g = tw_act16(x · wp_n) (round(relu), a NaN active as
-- the canonical NaN) for every column n of the tile, active iff positive. Gated: h = g · (x · Wu_n) in fp32; non-gated: h = g. y = Σ h · Wd_n
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

local C = {S = S, NT = NT, K8 = K8, NSL = NSL, CL = CL, PL = PL, QL = QL}
local updown = import "ffn_small_updown"
local fused = import "ffn_small_fused"

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

/* The first i in [0, n) with incl[i] > j (incl non-decreasing, incl[n - 1] > j): binary search. */
__device__ __forceinline__ int tw_first_above(const int *incl, int n, int j) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (incl[mid] > j)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
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

]==]
updown.up(C)
cuda [==[
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

]==]
updown.down_walk(C)
cuda [==[
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

]==]
updown.down(C)
fused.dev(C)
fused.kernels(C)
import("ffn_small_row")(C)
