-- ffn_dense_ew.cu.lua — the elementwise step of the dense FFN baseline that `twell bench --op
-- ffn_infer` times against ours: h = relu(g) ⊙ u (gated) or h = relu(u) (non-gated), over the
-- [M, N] outputs of the cuBLAS gate and up GEMMs, in dtype with fp32 arithmetic, rounded once.
--
-- Parameters: dtype ("bf16" | "fp16"), gated (1 | 0, default 1).
-- ABI: extern "C" __global__ void twell_dense_ew(const unsigned short *g,  // [n] (gated only)
--                                               const unsigned short *u,  // [n]
--                                               unsigned short *h,        // [n]
--                                               long long n)              // even
--   block = 256 threads, any grid (grid-stride over pairs of elements); 4-byte aligned buffers.

local common = import "twell_common"
local dtype = param("dtype", "bf16")
check(dtype == "bf16" or dtype == "fp16", "dtype=%s must be bf16 or fp16", tostring(dtype))
local GATED = param("gated", 1)
check(GATED == 0 or GATED == 1, "gated=%s must be 0 or 1", tostring(GATED))

common.conversions(dtype)

cuda [==[
/* relu keeping NaN, as PyTorch's */
__device__ __forceinline__ float tw_relu(float v) { return tw_relu_nan(v); }

extern "C" __global__ void __launch_bounds__(256)
twell_dense_ew(const unsigned short *__restrict__ g, const unsigned short *__restrict__ u,
               unsigned short *__restrict__ h, long long n) {
    const unsigned int *g2 = (const unsigned int *)g, *u2 = (const unsigned int *)u;
    unsigned int *h2 = (unsigned int *)h;
    const long long pairs = n / 2, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += stride) {
        const unsigned int uw = u2[i];
        float lo = tw_to_f32((unsigned short)(uw & 0xffffu));
        float hi = tw_to_f32((unsigned short)(uw >> 16));
        if (${GATED}) {
            const unsigned int gw = g2[i];
            lo *= tw_relu(tw_to_f32((unsigned short)(gw & 0xffffu)));
            hi *= tw_relu(tw_to_f32((unsigned short)(gw >> 16)));
        } else {
            lo = tw_relu(lo);
            hi = tw_relu(hi);
        }
        h2[i] = (unsigned int)tw_from_f32(lo) | ((unsigned int)tw_from_f32(hi) << 16);
    }
}
]==]
