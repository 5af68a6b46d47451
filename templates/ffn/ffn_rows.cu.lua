-- ffn_rows.cu.lua — portable fused TwELL FFN inference, one warp per token row, plain FP32 SIMT
-- (any sm_75+, any K multiple of 16, any 2-byte aligned pointers). The CUDA backend uses it where
-- ffn_fused.cu.lua cannot run: K not a multiple of 64, a device below sm_80 or without the shared
-- memory the tiled kernels need, or 16-bit tensors not 16-byte aligned. Simple and exact rather
-- than fast.
--
-- Parameters: K, N, T, C, dtype (see twellrt.h); gated (1 | 0, default 1).
-- ABI (fixed; runtime/ops/ffn/tiled/cuda_ffn.c launches it):
--   extern "C" __global__ void twell_ffn_rows_generic(
--       const unsigned short *x,      // [M, K] dtype
--       const unsigned int *packed,   // [M, N/C] TwELL of the packing weight's activation
--       const unsigned short *wp,     // packing weight [N, K]: Wg gated, Wu non-gated
--       const unsigned short *wu,     // [N, K] (gated; ignored non-gated)
--       const unsigned short *wd,     // [N, K]
--       unsigned short *y,            // [M, K] dtype, every element written
--       long long M)
--   block = 256 threads (8 warps), any grid (warps stride over rows); no shared memory.
-- Semantics (twell_ffn_infer): for each row, row-tiles are visited in order; a row-tile whose
-- count fits its slots contributes its stored entries, an overflowing one is recomputed from x
-- and wp (g = tw_act16(x . wp_n): round(relu), a NaN active as the canonical NaN), in ascending
-- column order. Gated:
-- h = g * (x . Wu_n) in fp32; non-gated: h = g. y = sum h Wd_n in fp32, rounded once. Dot
-- products are lane-strided fp32 sums reduced with a butterfly, so every lane holds the same
-- value and the result is deterministic. An entry whose column is >= N (malformed input) is
-- skipped rather than read out of bounds.

local common = import "twell_common"
local S = common.shape()
local GATED = param("gated", 1)
check(GATED == 0 or GATED == 1, "gated=%s must be 0 or 1", tostring(GATED))
local KJ = (S.K + 31) // 32 -- columns per lane: k = lane + 32 j
local NT = S.N // S.T

common.conversions(S.dtype)

cuda [==[
#define TW_FULL 0xffffffffu

/* x . w for one row, lane-strided over the warp; every lane returns the same sum. */
__device__ __forceinline__ float tw_row_dot(const float (&xf)[${KJ}],
                                            const unsigned short *__restrict__ w, int lane) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < ${KJ}; j++) {
        const int k = lane + 32 * j;
        if (k < ${S.K})
            s += xf[j] * tw_to_f32(w[k]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(TW_FULL, s, o);
    return s;
}

/* One active neuron n with gate (or h) value g: y += h . Wd_n. */
__device__ __forceinline__ void tw_row_entry(float (&ya)[${KJ}], const float (&xf)[${KJ}],
                                             unsigned int n, float g,
                                             const unsigned short *__restrict__ wu,
                                             const unsigned short *__restrict__ wd, int lane) {
    float h = g;
    if (${GATED})
        h = g * tw_row_dot(xf, wu + (long long)n * ${S.K}, lane);
    const unsigned short *d = wd + (long long)n * ${S.K};
#pragma unroll
    for (int j = 0; j < ${KJ}; j++) {
        const int k = lane + 32 * j;
        if (k < ${S.K})
            ya[j] += h * tw_to_f32(d[k]);
    }
}

extern "C" __global__ void __launch_bounds__(256)
twell_ffn_rows_generic(const unsigned short *__restrict__ x, const unsigned int *__restrict__ packed,
                       const unsigned short *__restrict__ wp, const unsigned short *__restrict__ wu,
                       const unsigned short *__restrict__ wd, unsigned short *__restrict__ y,
                       long long M) {
    const int lane = (int)(threadIdx.x & 31u);
    const long long nwarps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long m = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; m < M;
         m += nwarps) {
        float xf[${KJ}], ya[${KJ}];
#pragma unroll
        for (int j = 0; j < ${KJ}; j++) {
            const int k = lane + 32 * j;
            xf[j] = k < ${S.K} ? tw_to_f32(x[m * ${S.K} + k]) : 0.0f;
            ya[j] = 0.0f;
        }
        const unsigned int *prow = packed + m * ${S.NW};
        for (int t = 0; t < ${NT}; t++) {
            const unsigned int *cell = prow + t * ${S.W};
            const unsigned int cnt = cell[0];
            if (cnt <= ${S.SLOTS}u) {
                for (unsigned int j0 = 0; j0 < cnt; j0 += 32u) {
                    const unsigned int word = j0 + lane < cnt ? cell[1 + j0 + lane] : 0u;
                    const int nb = (int)min(32u, cnt - j0);
                    for (int q = 0; q < nb; q++) {
                        const unsigned int e = __shfl_sync(TW_FULL, word, q);
                        const unsigned int n = e & 0xffffu;
                        if (n < ${S.N}u)
                            tw_row_entry(ya, xf, n, tw_to_f32((unsigned short)(e >> 16)), wu, wd,
                                         lane);
                    }
                }
            } else {
                for (int c = 0; c < ${S.T}; c++) {
                    const unsigned int n = (unsigned int)(t * ${S.T} + c);
                    const float pre = tw_row_dot(xf, wp + (long long)n * ${S.K}, lane);
                    const unsigned short gb = tw_act16(pre);
                    if (gb != 0)
                        tw_row_entry(ya, xf, n, tw_to_f32(gb), wu, wd, lane);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < ${KJ}; j++) {
            const int k = lane + 32 * j;
            if (k < ${S.K})
                y[m * ${S.K} + k] = tw_from_f32(ya[j]);
        }
    }
}
]==]
