-- dense_aux.cu.lua — the reduction of gemm_sm90's split-K partials (SPLIT = 1) for the training
-- dense path (runtime/ops/train/dense/cuda_train_dense.c). The inference dense route runs through
-- cuBLASLt; its counting and expansion kernels went with the hand-written route.
--
-- Parameters: K, N, T, C, dtype (the plan's shape, see twellrt.h).
-- ABI (block = 256 threads): the partials part[(s·M + row)·K + col] (16-byte aligned), any grid
-- (grid-stride over M·ceil(K/256) items of one row x 256 columns, a warp each). Each value is
-- Σ_s part[s] summed in the fixed order s = 0, 1, ..., nsplit−1 in fp32 (bitwise reproducible),
-- rounded once to dtype (nearest even) as gemm_sm90 does:
--   twell_dense_reduce_plain(const float *part, int M, int nsplit, unsigned short *out)
--       out [M, K] = round(Σ).

local common = import "twell_common"
local S = common.shape()
if S.K % 64 ~= 0 then
    unsupported("K=%d is not a multiple of 64 (gemm_sm90's k-blocks need it)", S.K)
end
local NBK = (S.K + 255) // 256
local DT = S.dtype == "bf16" and "bf16" or "f16"

cuda [==[
typedef unsigned int tw_u32;
typedef unsigned short tw_u16;

/* Rounds two floats to dtype (nearest even): lo in bits 15..0, hi in bits 31..16. */
static __device__ __forceinline__ tw_u32 tw_pack2(float lo, float hi) {
    tw_u32 r;
    asm("cvt.rn.${DT}x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
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

]==]
