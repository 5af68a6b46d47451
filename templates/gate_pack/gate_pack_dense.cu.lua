-- gate_pack_dense.cu.lua — the packing pass of the cuBLASLt gate-pack route
-- (runtime/ops/gate_pack/gate_pack_lt.c): a dense activation g = relu(x · wᵀ), already rounded to
-- dtype by cuBLASLt's epilogue, packed into TwELL; and the elementwise h = g ⊙ u of the dense
-- inference route.
--
-- Parameters: K, N, T, C, dtype (the plan's shape, see twellrt.h).
-- ABI (block = 256 threads, any grid: grid-stride loops):
--   twell_pack_dense(const unsigned short *g, long long M, unsigned *packed,
--                    unsigned long long *stats)
--       g [M, N] dtype. packed [M, N/C] receives every word (tw_pack_row_tile_warp: entries in
--       ascending column order, unused slots 0, exact counts), a warp per row-tile. When stats is
--       not NULL, stats[0] += Σ counts (integer atomics: the sum is exact whatever their order).
--   twell_pack_count(const unsigned *packed, long long M, unsigned long long *stats)
--       stats[0] += Σ of the count words of packed [M, N/C] (AUTO's density estimate).
--   twell_dense_mul(const unsigned short *g, unsigned short *u, long long n8)
--       u[i] = round(g[i] · u[i]) (fp32 product, nearest even) for the n8·8 values, in place
--       (16-byte aligned).

local common = import "twell_common"
local S = common.shape()
local NT = S.N // S.T
local DT = S.dtype == "bf16" and "bf16" or "f16"

common.conversions(S.dtype)
common.pack_row_tile_warp(S)

cuda [==[
typedef unsigned int tw_u32;
typedef unsigned long long tw_u64;
typedef unsigned short tw_u16;

extern "C" __global__ void __launch_bounds__(256)
    twell_pack_dense(const tw_u16 *__restrict__ g, long long M, tw_u32 *__restrict__ packed,
                     tw_u64 *__restrict__ stats) {
    __shared__ tw_u64 tw_sum[8];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long items = M * ${NT};
    tw_u64 sum = 0;
    for (long long i = (long long)blockIdx.x * 8 + warp; i < items; i += (long long)gridDim.x * 8) {
        const long long m = i / ${NT};
        const int t = (int)(i - m * ${NT});
        tw_u32 *dst = packed + m * ${S.NW} + (long long)t * ${S.W};
        tw_pack_row_tile_warp(g + m * ${S.N} + (long long)t * ${S.T}, dst, (tw_u32)t * ${S.T}u);
        __syncwarp();
        if (lane == 0)
            sum += dst[0]; /* the count lane 0 itself wrote */
    }
    if (stats == 0)
        return;
    if (lane == 0)
        tw_sum[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        tw_u64 s = 0;
        for (int w = 0; w < 8; ++w)
            s += tw_sum[w];
        if (s != 0)
            atomicAdd(stats, s);
    }
}

extern "C" __global__ void __launch_bounds__(256)
    twell_pack_count(const tw_u32 *__restrict__ packed, long long M, tw_u64 *__restrict__ stats) {
    __shared__ tw_u64 tw_sum[8];
    const long long items = M * ${NT};
    const long long stride = (long long)gridDim.x * blockDim.x;
    tw_u64 sum = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
        const long long m = i / ${NT};
        sum += __ldg(packed + m * ${S.NW} + (i - m * ${NT}) * ${S.W});
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0)
        tw_sum[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        tw_u64 s = 0;
        for (int w = 0; w < 8; ++w)
            s += tw_sum[w];
        if (s != 0)
            atomicAdd(stats, s);
    }
}

/* Rounds two floats to dtype (nearest even): lo in bits 15..0, hi in bits 31..16. */
static __device__ __forceinline__ tw_u32 tw_pack2(float lo, float hi) {
    tw_u32 r;
    asm("cvt.rn.${DT}x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

static __device__ __forceinline__ tw_u32 tw_mul2(tw_u32 a, tw_u32 b) {
    return tw_pack2(tw_to_f32((tw_u16)(a & 0xffffu)) * tw_to_f32((tw_u16)(b & 0xffffu)),
                    tw_to_f32((tw_u16)(a >> 16)) * tw_to_f32((tw_u16)(b >> 16)));
}

extern "C" __global__ void __launch_bounds__(256)
    twell_dense_mul(const tw_u16 *__restrict__ g, tw_u16 *__restrict__ u, long long n8) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += stride) {
        const uint4 a = __ldg((const uint4 *)g + i);
        const uint4 b = ((const uint4 *)u)[i];
        ((uint4 *)u)[i] = make_uint4(tw_mul2(a.x, b.x), tw_mul2(a.y, b.y), tw_mul2(a.z, b.z),
                                     tw_mul2(a.w, b.w));
    }
}
]==]
