-- dense_aux.cu.lua — the small kernels around gemm_sm90 in the dense FFN path
-- (runtime/cuda_dense.c): counting the packed activation (the AUTO path choice and the units whose
-- row-tiles overflow), expanding it into a dense 16-bit matrix (non-gated H), reducing the fp32
-- slices of a split-K GEMM (gemm_sm90 SPLIT = 1) with its epilogue.
--
-- Parameters: K, N, T, C, dtype (the plan's shape, see twellrt.h).
-- ABI (block = 256 threads for all):
--   twell_dense_count(const unsigned *packed, int M, int unit_rows, unsigned *flags,
--                     unsigned long long *stats)
--       any grid (grid-stride over the M·N/T row-tiles). stats[0] += Σ counts (word 0 of every
--       row-tile: the exact number of active values), and when flags is not NULL, flags[u] = 1
--       for every unit u = (m / unit_rows)·ceil(N/256) + (column / 256) holding a row-tile with
--       count > slots, stats[1] += the number of units it set. flags and stats must be zeroed
--       before; several launches may accumulate into the same stats.
--   twell_dense_expand(const unsigned *packed, int M, unsigned short *h)
--       any grid (grid-stride over M·ceil(N/256) items of one row x 256 columns). h [M, N]
--       (16-byte aligned) = the packed values at their columns, 0 elsewhere; of an overflowing
--       row-tile only the stored entries (the caller recomputes those units).
-- The reductions of gemm_sm90's split-K partials (SPLIT = 1; part 16-byte aligned, its layout
-- part[((plane·nsplit + s)·M + row)·cols + col] with cols = K for plain, N for gated and relu):
-- any grid (grid-stride over M·ceil(cols/256) items of one row x 256 columns, a warp each). Each
-- value is Σ_s part[s] summed in the fixed order s = 0, 1, ..., nsplit−1 in fp32 (bitwise
-- reproducible), then MODE's epilogue, rounded once to dtype (nearest even) as gemm_sm90 does:
--   twell_dense_reduce_plain(const float *part, int M, int nsplit, unsigned short *out)
--       out [M, K] = round(Σ).
--   twell_dense_reduce_gated(const float *part, int M, int nsplit, int unit_rows,
--                            const unsigned *flags, const unsigned *packed, unsigned short *h)
--       h [M, N] = round(g · Σ), g = tw_act(Σ of plane 1) in units whose flags word is non-zero
--       (u = (row / unit_rows)·ceil(N/256) + column / 256), else g from packed (as the
--       expansion: the stored entries of each row-tile).
--   twell_dense_reduce_relu(const float *part, int M, int nsplit, int unit_rows,
--                           const unsigned *flags, unsigned short *h)
--       h = tw_act(Σ) in the flagged units only; the others are left as they are.

local common = import "twell_common"
local S = common.shape()
if S.K % 64 ~= 0 then
    unsupported("K=%d is not a multiple of 64 (the dense path's GEMMs need it)", S.K)
end
local NT = S.N // S.T
local NB = (S.N + 255) // 256
local IT = 256 // S.C // 32
if IT < 1 then
    IT = 1
end
local NBK = (S.K + 255) // 256
local DT = S.dtype == "bf16" and "bf16" or "f16"

cuda [==[
typedef unsigned int tw_u32;
typedef unsigned long long tw_u64;
typedef unsigned short tw_u16;

extern "C" __global__ void __launch_bounds__(256)
    twell_dense_count(const tw_u32 *__restrict__ packed, int M, int unit_rows,
                      tw_u32 *__restrict__ flags, tw_u64 *__restrict__ stats) {
    const long long items = (long long)M * ${NT};
    const long long stride = (long long)gridDim.x * blockDim.x;
    tw_u64 sum = 0;
    tw_u32 nset = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
        const long long m = i / ${NT};
        const int t = (int)(i - m * ${NT});
        const tw_u32 c = __ldg(packed + m * ${S.NW} + (long long)t * ${S.W});
        sum += c;
        if (flags != 0 && c > ${S.SLOTS}u) {
            const long long u = (m / unit_rows) * ${NB} + (t * ${S.T}) / 256;
            if (atomicExch(flags + u, 1u) == 0u)
                nset++;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        sum += __shfl_down_sync(0xffffffffu, sum, o);
        nset += __shfl_down_sync(0xffffffffu, nset, o);
    }
    if ((threadIdx.x & 31) == 0) {
        if (sum != 0)
            atomicAdd(stats, sum);
        if (nset != 0)
            atomicAdd(stats + 1, (tw_u64)nset);
    }
}

/* The dense 256-column block n0 of packed row `row` into buf (256 values): zero, then each
 * row-tile's first min(count, slots) entries whose column lies in that row-tile. One warp. */
static __device__ __forceinline__ void tw_expand_block(const tw_u32 *__restrict__ packed,
                                                       long long row, int n0,
                                                       tw_u16 *buf) {
    constexpr int W = ${S.W}, SLOTS = ${S.SLOTS}, T = ${S.T}, IT = ${IT};
    const int lane = threadIdx.x & 31;
    *(uint4 *)(buf + lane * 8) = make_uint4(0u, 0u, 0u, 0u);
    const int ncols = ${S.N} - n0 < 256 ? ${S.N} - n0 : 256;
    const int segw = ncols / ${S.C};
    const tw_u32 *src = packed + row * ${S.NW} + n0 / ${S.C};
    tw_u32 v[IT];
#pragma unroll
    for (int it = 0; it < IT; ++it) {
        const int j = it * 32 + lane;
        v[it] = j < segw ? __ldg(src + j) : 0u;
    }
    __syncwarp();
#pragma unroll
    for (int it = 0; it < IT; ++it) {
        const int j = it * 32 + lane;
        tw_u32 count;
        if (W <= 32)
            count = __shfl_sync(0xffffffffu, v[it], lane & ~(W - 1));
        else
            count = __shfl_sync(0xffffffffu, v[it & ~(W / 32 - 1)], 0);
        const int slot = j & (W - 1);
        const tw_u32 lim = count < (tw_u32)SLOTS ? count : (tw_u32)SLOTS;
        const int rel = (int)(v[it] & 0xffffu) - n0;
        const int tile0 = (j / W) * T;
        if (j < segw && slot >= 1 && (tw_u32)slot <= lim && (unsigned)(rel - tile0) < (unsigned)T)
            buf[rel] = (tw_u16)(v[it] >> 16);
    }
    __syncwarp();
}

extern "C" __global__ void __launch_bounds__(256)
    twell_dense_expand(const tw_u32 *__restrict__ packed, int M, tw_u16 *__restrict__ h) {
    __shared__ __align__(16) tw_u16 tw_buf[8][256];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long items = (long long)M * ${NB};
    for (long long i = (long long)blockIdx.x * 8 + warp; i < items; i += (long long)gridDim.x * 8) {
        const long long row = i / ${NB};
        const int n0 = (int)(i - row * ${NB}) * 256;
        tw_expand_block(packed, row, n0, tw_buf[warp]);
        const uint4 val = *(const uint4 *)(tw_buf[warp] + lane * 8);
        if (n0 + lane * 8 < ${S.N})
            *(uint4 *)(h + row * ${S.N} + n0 + lane * 8) = val;
        __syncwarp(); /* the next item zeroes the buffer */
    }
}

/* ---- split-K reductions ---- */
/* Rounds two floats to dtype (nearest even): lo in bits 15..0, hi in bits 31..16. */
static __device__ __forceinline__ tw_u32 tw_pack2(float lo, float hi) {
    tw_u32 r;
    asm("cvt.rn.${DT}x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
/* A dtype value as a float (exact). */
static __device__ __forceinline__ float tw_to_f32(tw_u16 v) {
#if ${S.dtype == "bf16" and 1 or 0}
    return __uint_as_float((tw_u32)v << 16);
#else
    float f;
    asm("{.reg .f16 a; mov.b16 a, %1; cvt.f32.f16 %0, a;}" : "=f"(f) : "h"(v));
    return f;
#endif
}
/* v[0..8) = Σ_s slice s of the 8 values at part + off (s ascending; slices `stride` apart). */
static __device__ __forceinline__ void tw_sum8(const float *__restrict__ part, long long off,
                                               long long stride, int nsplit, float (&v)[8]) {
    const float4 *p = (const float4 *)(part + off);
    float4 a = __ldg(p), b = __ldg(p + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    for (int s = 1; s < nsplit; ++s) {
        p = (const float4 *)(part + off + (long long)s * stride);
        a = __ldg(p), b = __ldg(p + 1);
        v[0] += a.x, v[1] += a.y, v[2] += a.z, v[3] += a.w;
        v[4] += b.x, v[5] += b.y, v[6] += b.z, v[7] += b.w;
    }
}
static __device__ __forceinline__ uint4 tw_round8(const float (&v)[8]) {
    return make_uint4(tw_pack2(v[0], v[1]), tw_pack2(v[2], v[3]), tw_pack2(v[4], v[5]),
                      tw_pack2(v[6], v[7]));
}

extern "C" __global__ void __launch_bounds__(256)
    twell_dense_reduce_plain(const float *__restrict__ part, int M, int nsplit,
                             tw_u16 *__restrict__ out) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long items = (long long)M * ${NBK}, stride = (long long)M * ${S.K};
    for (long long i = (long long)blockIdx.x * 8 + warp; i < items; i += (long long)gridDim.x * 8) {
        const long long row = i / ${NBK};
        const int col = (int)(i - row * ${NBK}) * 256 + lane * 8;
        if (col >= ${S.K})
            continue;
        float v[8];
        tw_sum8(part, row * ${S.K} + col, stride, nsplit, v);
        *(uint4 *)(out + row * ${S.K} + col) = tw_round8(v);
    }
}

extern "C" __global__ void __launch_bounds__(256)
    twell_dense_reduce_gated(const float *__restrict__ part, int M, int nsplit, int unit_rows,
                             const tw_u32 *__restrict__ flags, const tw_u32 *__restrict__ packed,
                             tw_u16 *__restrict__ h) {
    __shared__ __align__(16) tw_u16 tw_buf[8][256];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long items = (long long)M * ${NB}, stride = (long long)M * ${S.N};
    for (long long i = (long long)blockIdx.x * 8 + warp; i < items; i += (long long)gridDim.x * 8) {
        const long long row = i / ${NB};
        const int cb = (int)(i - row * ${NB}), n0 = cb * 256, col = n0 + lane * 8;
        const bool recomputed = flags[(row / unit_rows) * ${NB} + cb] != 0u; /* warp-uniform */
        float g[8];
        if (recomputed) {
            if (col < ${S.N}) {
                tw_sum8(part, (long long)nsplit * stride + row * ${S.N} + col, stride, nsplit, g);
#pragma unroll
                for (int e = 0; e < 8; e += 2) { /* g = tw_act(Σ), rounded as the GEMM does */
                    const tw_u32 w = tw_pack2(fmaxf(g[e], 0.0f), fmaxf(g[e + 1], 0.0f));
                    g[e] = tw_to_f32((tw_u16)(w & 0xffffu));
                    g[e + 1] = tw_to_f32((tw_u16)(w >> 16));
                }
            }
        } else {
            tw_expand_block(packed, row, n0, tw_buf[warp]);
#pragma unroll
            for (int e = 0; e < 8; ++e)
                g[e] = tw_to_f32(tw_buf[warp][lane * 8 + e]);
        }
        if (col < ${S.N}) {
            float v[8];
            tw_sum8(part, row * ${S.N} + col, stride, nsplit, v);
#pragma unroll
            for (int e = 0; e < 8; ++e)
                v[e] = g[e] * v[e];
            *(uint4 *)(h + row * ${S.N} + col) = tw_round8(v);
        }
        __syncwarp(); /* the next item's expansion rewrites the buffer */
    }
}

extern "C" __global__ void __launch_bounds__(256)
    twell_dense_reduce_relu(const float *__restrict__ part, int M, int nsplit, int unit_rows,
                            const tw_u32 *__restrict__ flags, tw_u16 *__restrict__ h) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long items = (long long)M * ${NB}, stride = (long long)M * ${S.N};
    for (long long i = (long long)blockIdx.x * 8 + warp; i < items; i += (long long)gridDim.x * 8) {
        const long long row = i / ${NB};
        const int cb = (int)(i - row * ${NB}), col = cb * 256 + lane * 8;
        if (flags[(row / unit_rows) * ${NB} + cb] == 0u || col >= ${S.N})
            continue; /* unflagged units hold the expanded activation already */
        float v[8];
        tw_sum8(part, row * ${S.N} + col, stride, nsplit, v);
#pragma unroll
        for (int e = 0; e < 8; ++e)
            v[e] = fmaxf(v[e], 0.0f);
        *(uint4 *)(h + row * ${S.N} + col) = tw_round8(v);
    }
}
]==]
