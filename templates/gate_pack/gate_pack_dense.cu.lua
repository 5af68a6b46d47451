-- gate_pack_dense.cu.lua — the packing pass of the cuBLASLt gate-pack route
-- (runtime/ops/gate_pack/lt/gate_pack_lt.c): the dense pre-activations g = x · wᵀ, rounded to dtype
-- by cuBLASLt (no epilogue: cuBLASLt's relu maps NaN to 0), packed into TwELL under the
-- activation rule (tw_act_bits: positive values, +Inf and any NaN, stored as the canonical NaN,
-- are active; ±0, negatives and -Inf are not); and the dense inference route's elementwise
-- h = relu(g) ⊙ u and h = relu(g), relu keeping NaN.
--
-- Parameters: K, N, T, C, dtype (the plan's shape, see twellrt.h).
-- ABI (block = 256 threads, any grid: grid-stride loops):
--   twell_pack_dense(const unsigned short *g, long long M, unsigned *packed,
--                    unsigned long long *acc, unsigned long long *out)
--       g [M, N] dtype (16-byte aligned). packed [M, N/C] receives every word (entries in
--       ascending column order by lane scans, unused slots 0, exact counts; no atomics), a warp
--       per row-tile, four in flight, each written by coalesced stores. When out is not NULL, out[0] = Σ counts and out[1] = the
--       overflowing row-tiles (plain stores, e.g. into mapped page-locked memory): the blocks add
--       into acc[0] and acc[2] (integer atomics: exact in any order) and count their arrivals in
--       acc[1]; the last block stores the totals and zeroes the three words for the next launch
--       (acc: 3 device words, zero before the first launch).
--   twell_pack_count(const unsigned *packed, long long M, unsigned long long *stats)
--       stats[0] += Σ of the count words of packed [M, N/C] (AUTO's density estimate), stats[1]
--       += the row-tiles whose count exceeds their slots (AUTO's overflow rule).
--   twell_dense_mul(const unsigned short *g, const float *u, unsigned short *h, long long n8)
--       h[i] = round(relu(g[i]) · u[i]) (fp32 product, rounded once to dtype, nearest even) for
--       the n8·8 values (all 16-byte aligned); relu keeps NaN, so a NaN gate gives a NaN h.
--   twell_dense_relu(const unsigned short *g, unsigned short *h, long long n8)
--       h[i] = relu(g[i]) (the non-gated route's h; NaN kept, -0 and negatives +0) for the n8·8
--       values (16-byte aligned; h may be g: in place).

local common = import "twell_common"
local S = common.shape()
local NT = S.N // S.T
local DT = S.dtype == "bf16" and "bf16" or "f16"

common.conversions(S.dtype)
common.warp_scan()
local V = S.T // 32 -- values a lane packs: 8, 4 or 2
local VW = V // 2   -- the 32-bit words holding them
local TILES = 4     -- row-tiles a warp has in flight (their loads issued before any is packed)
local EXPM = common.expm(S.dtype)

cuda [==[
typedef unsigned int tw_u32;
typedef unsigned long long tw_u64;
typedef unsigned short tw_u16;
constexpr int V = ${V}, VW = ${VW}, TILES = ${TILES};
]==]
if V == 8 then
    cuda [==[
typedef uint4 TwVec;
static __device__ __forceinline__ TwVec tw_vec_load(const tw_u16 *p) { return __ldg((const uint4 *)p); }
static __device__ __forceinline__ TwVec tw_vec_zero() { return make_uint4(0u, 0u, 0u, 0u); }
static __device__ __forceinline__ void tw_vec_words(const TwVec v, tw_u32 (&w)[VW]) {
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
}
]==]
elseif V == 4 then
    cuda [==[
typedef uint2 TwVec;
static __device__ __forceinline__ TwVec tw_vec_load(const tw_u16 *p) { return __ldg((const uint2 *)p); }
static __device__ __forceinline__ TwVec tw_vec_zero() { return make_uint2(0u, 0u); }
static __device__ __forceinline__ void tw_vec_words(const TwVec v, tw_u32 (&w)[VW]) {
    w[0] = v.x, w[1] = v.y;
}
]==]
else
    cuda [==[
typedef tw_u32 TwVec;
static __device__ __forceinline__ TwVec tw_vec_load(const tw_u16 *p) { return __ldg((const tw_u32 *)p); }
static __device__ __forceinline__ TwVec tw_vec_zero() { return 0u; }
static __device__ __forceinline__ void tw_vec_words(const TwVec v, tw_u32 (&w)[VW]) { w[0] = v; }
]==]
end

cuda [==[

/* The activity (tw_act_bits) of the two 16-bit pre-activations of a word, branch-free: bit 15
 * set iff the low half is active, bit 31 iff the high half is, every other bit 0. A half whose
 * sign is clear is active iff its magnitude is nonzero (adding 0x7fff sets bit 15 exactly then);
 * one whose sign is set iff it is NaN (its magnitude exceeds Inf's: adding 0x8000 − (Inf + 1)
 * sets bit 15 exactly then). Neither sum carries into the other half. */
static __device__ __forceinline__ tw_u32 tw_active2(tw_u32 r) {
    const tw_u32 mag = r & 0x7fff7fffu;
    const tw_u32 nz = mag + 0x7fff7fffu;
    const tw_u32 nan = mag + (0x8000u - ${EXPM} - 1u) * 0x10001u;
    return ((nz & ~r) | (nan & r)) & 0x80008000u;
}

/* Word k of a[] for a k known only at run time, by selects (no local-memory array). */
static __device__ __forceinline__ tw_u32 tw_word(const tw_u32 (&a)[VW], tw_u32 k) {
    tw_u32 w = a[0];
#pragma unroll
    for (int q = 1; q < VW; ++q)
        w = k == (tw_u32)q ? a[q] : w;
    return w;
}

/* One row-tile of g (v: lane l's V consecutive values l·V .. l·V+V−1) into its W words at dst, by
 * one warp: an exclusive scan of the lanes' counts places each lane's entries after the lower
 * lanes' (column order) in the warp's staging words, then the warp writes the W words in
 * coalesced stores: word 0 the exact count, the used slots, 0 in the rest. Only the lanes with an
 * active value extract entries, lowest column first; a NaN value is stored as the canonical NaN.
 * Every lane of the warp calls it (the shuffles see all 32); store = 0 (a tile past the end)
 * writes nothing. Returns the count in every lane. */
static __device__ __forceinline__ tw_u32 tw_pack_tile(const TwVec v, tw_u32 *__restrict__ dst,
                                                      tw_u32 col0, tw_u32 *__restrict__ stage,
                                                      bool store) {
    const tw_u32 lane = threadIdx.x & 31u;
    tw_u32 a[VW], act[VW];
    tw_vec_words(v, a);
    tw_u32 mine = 0;
#pragma unroll
    for (int k = 0; k < VW; ++k) {
        act[k] = tw_active2(a[k]);
        mine += (tw_u32)__popc(act[k]);
    }
    const tw_u32 incl = tw_warp_incl_scan(mine, (int)lane);
    const tw_u32 total = __shfl_sync(0xffffffffu, incl, 31);
    if (mine) { /* few lanes have any: no shuffle in here */
        tw_u32 mask = 0;
#pragma unroll
        for (int k = 0; k < VW; ++k)
            mask |= (((act[k] >> 15) | (act[k] >> 30)) & 3u) << (2 * k);
        tw_u32 pos = incl - mine;
        const tw_u32 col = col0 + lane * V;
        while (mask) {
            const tw_u32 j = (tw_u32)__ffs(mask) - 1u;
            mask &= mask - 1u;
            const tw_u32 w = tw_word(a, j >> 1);
            tw_u32 h = (j & 1u) ? w >> 16 : w & 0xffffu;
            if ((h & 0x7fffu) > ${EXPM})
                h = TW_NAN16;
            if (pos < ${S.SLOTS}u)
                stage[pos] = h << 16 | (col + j);
            ++pos;
        }
    }
    __syncwarp();
    const tw_u32 used = total < ${S.SLOTS}u ? total : ${S.SLOTS}u;
    if (store)
        for (tw_u32 w = lane; w < ${S.W}u; w += 32u)
            dst[w] = w == 0u ? total : (w - 1u < used ? stage[w - 1u] : 0u);
    __syncwarp(); /* the stage is read before the next tile writes it */
    return total;
}

/* The block's sums of its 8 warps' two values held by lane 0 of each, in thread 0 (the others
 * get 0). All 256 threads call it. */
static __device__ __forceinline__ void tw_block_sum2(tw_u64 a, tw_u64 b, tw_u64 &sa, tw_u64 &sb) {
    __shared__ tw_u64 tw_sum[8][2];
    if ((threadIdx.x & 31) == 0)
        tw_sum[threadIdx.x >> 5][0] = a, tw_sum[threadIdx.x >> 5][1] = b;
    __syncthreads();
    sa = sb = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < 8; ++w)
            sa += tw_sum[w][0], sb += tw_sum[w][1];
}

extern "C" __global__ void __launch_bounds__(256)
    twell_pack_dense(const tw_u16 *__restrict__ g, long long M, tw_u32 *__restrict__ packed,
                     tw_u64 *__restrict__ acc, tw_u64 *__restrict__ out) {
    __shared__ tw_u32 tw_stage[8][${S.SLOTS}];
    const tw_u32 warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    tw_u32 *const stage = tw_stage[warp];
    const tw_u64 items = (tw_u64)M * ${NT}u;
    /* warp gw takes row-tiles i = gw + r·nw of the row-major [M, N/T] grid of tiles (row i / NT,
     * tile i % NT), stepped in 32-bit arithmetic: nw = dm·NT + dt */
    const tw_u32 nw = gridDim.x * 8u, gw = blockIdx.x * 8u + warp;
    const tw_u32 dt = nw % ${NT}u, dm = nw / ${NT}u;
    tw_u32 t = gw % ${NT}u;
    tw_u64 m = gw / ${NT}u;
    tw_u64 sum = 0, ovf = 0;
    for (tw_u64 i = gw; i < items; i += (tw_u64)TILES * nw) {
        TwVec v[TILES];
        tw_u32 tt[TILES];
        tw_u64 mm[TILES];
#pragma unroll
        for (int q = 0; q < TILES; ++q) {
            tt[q] = t, mm[q] = m;
            v[q] = i + (tw_u64)q * nw < items
                       ? tw_vec_load(g + m * ${S.N}u + t * ${S.T}u + lane * V)
                       : tw_vec_zero();
            t += dt, m += dm;
            if (t >= ${NT}u)
                t -= ${NT}u, ++m;
        }
        tw_u32 s4 = 0, o4 = 0; /* at most TILES·T: 32-bit sums within an iteration */
#pragma unroll
        for (int q = 0; q < TILES; ++q) {
            const bool ok = i + (tw_u64)q * nw < items;
            const tw_u32 c = tw_pack_tile(v[q], packed + mm[q] * ${S.NW}u + tt[q] * ${S.W}u,
                                          tt[q] * ${S.T}u, stage, ok);
            s4 += c, o4 += c > ${S.SLOTS}u;
        }
        sum += s4, ovf += o4;
    }
    if (out == 0)
        return;
    tw_u64 s, o; /* every lane holds its warp's counts */
    tw_block_sum2(sum, ovf, s, o);
    if (threadIdx.x == 0) {
        atomicAdd(acc, s);
        atomicAdd(acc + 2, o);
        __threadfence(); /* the sums land before the arrival is counted */
        if (atomicAdd(acc + 1, 1ull) == (tw_u64)gridDim.x - 1u) {
            __threadfence();
            const tw_u64 total = atomicExch(acc, 0ull), tiles = atomicExch(acc + 2, 0ull);
            atomicExch(acc + 1, 0ull);
            ((volatile tw_u64 *)out)[1] = tiles;
            ((volatile tw_u64 *)out)[0] = total;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
    twell_pack_count(const tw_u32 *__restrict__ packed, long long M, tw_u64 *__restrict__ stats) {
    const long long items = M * ${NT};
    const long long stride = (long long)gridDim.x * blockDim.x;
    tw_u64 sum = 0, ovf = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
        const long long m = i / ${NT};
        const tw_u32 c = __ldg(packed + m * ${S.NW} + (i - m * ${NT}) * ${S.W});
        sum += c, ovf += c > ${S.SLOTS}u;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        sum += __shfl_down_sync(0xffffffffu, sum, o);
        ovf += __shfl_down_sync(0xffffffffu, ovf, o);
    }
    tw_u64 s, o;
    tw_block_sum2(sum, ovf, s, o);
    if (threadIdx.x == 0 && s != 0)
        atomicAdd(stats, s);
    if (threadIdx.x == 0 && o != 0)
        atomicAdd(stats + 1, o);
}

/* Rounds two floats to dtype (nearest even): lo in bits 15..0, hi in bits 31..16. */
static __device__ __forceinline__ tw_u32 tw_pack2(float lo, float hi) {
    tw_u32 r;
    asm("cvt.rn.${DT}x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* round(relu(g) · u) for two values: g two dtype pre-activations (lo, hi), u two floats; relu
 * keeps NaN (the product is then NaN, as the dense computation's). */
static __device__ __forceinline__ tw_u32 tw_mul2(tw_u32 g, float u0, float u1) {
    return tw_pack2(tw_relu_nan(tw_to_f32((tw_u16)(g & 0xffffu))) * u0,
                    tw_relu_nan(tw_to_f32((tw_u16)(g >> 16))) * u1);
}
/* relu of two dtype values in place of their patterns: ±0 and negatives (-Inf too) +0. */
static __device__ __forceinline__ tw_u32 tw_relu2(tw_u32 g) {
    const tw_u32 lo = g & 0xffffu, hi = g >> 16;
    return (tw_u32)tw_act_bits((tw_u16)lo) | ((tw_u32)tw_act_bits((tw_u16)hi) << 16);
}

extern "C" __global__ void __launch_bounds__(256)
    twell_dense_mul(const tw_u16 *__restrict__ g, const float *__restrict__ u,
                    tw_u16 *__restrict__ h, long long n8) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += stride) {
        const uint4 a = __ldg((const uint4 *)g + i);
        const float4 u0 = __ldg((const float4 *)u + 2 * i), u1 = __ldg((const float4 *)u + 2 * i + 1);
        ((uint4 *)h)[i] = make_uint4(tw_mul2(a.x, u0.x, u0.y), tw_mul2(a.y, u0.z, u0.w),
                                     tw_mul2(a.z, u1.x, u1.y), tw_mul2(a.w, u1.z, u1.w));
    }
}

extern "C" __global__ void __launch_bounds__(256)
    twell_dense_relu(const tw_u16 *g, tw_u16 *h, long long n8) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += stride) {
        const uint4 a = ((const uint4 *)g)[i]; /* no __ldg: h may be g */
        ((uint4 *)h)[i] = make_uint4(tw_relu2(a.x), tw_relu2(a.y), tw_relu2(a.z), tw_relu2(a.w));
    }
}
]==]
