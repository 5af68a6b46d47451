-- train_dense_ew.cu.lua — the elementwise steps of the dense training baseline that `twell bench
-- --op train` times against ours (the GEMMs are cuBLAS): the forward's H = relu(G) ⊙ U and the
-- backward's dT = dH + l1c·sign(U)·[G > 0], dU = dT·relu(G), dG = dT·U·[G > 0] (the gradients of
-- T = U ⊙ relu(G), loss + λ·Σ|T|/M with l1c = λ/M), fp32 arithmetic on dtype values, rounded once.
--
-- Parameters: dtype ("bf16" | "fp16").
-- ABI:
--   extern "C" __global__ void twell_train_dense_fwd(const unsigned short *g,  // [n]
--                                                    const unsigned short *u,  // [n]
--                                                    unsigned short *h,        // [n]
--                                                    long long n)
--   extern "C" __global__ void twell_train_dense_bwd(const unsigned short *g,  // [M, N]
--                                                    const unsigned short *u,  // [M, N]
--                                                    const unsigned short *dh, // [M, N]
--                                                    float l1c,
--                                                    unsigned short *dug,      // [M, 2N]: dU | dG
--                                                    long long M, long long N)
--   block = 256 threads, any grid (grid-stride).

local common = import "twell_common"
local dtype = param("dtype", "bf16")
check(dtype == "bf16" or dtype == "fp16", "dtype=%s must be bf16 or fp16", tostring(dtype))

common.conversions(dtype)

cuda [==[
extern "C" __global__ void __launch_bounds__(256)
twell_train_dense_fwd(const unsigned short *__restrict__ g, const unsigned short *__restrict__ u,
                      unsigned short *__restrict__ h, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float gv = tw_to_f32(g[i]);
        h[i] = tw_from_f32(tw_act_on(gv) ? gv * tw_to_f32(u[i]) : 0.0f); /* relu keeps NaN */
    }
}

extern "C" __global__ void __launch_bounds__(256)
twell_train_dense_bwd(const unsigned short *__restrict__ g, const unsigned short *__restrict__ u,
                      const unsigned short *__restrict__ dh, float l1c,
                      unsigned short *__restrict__ dug, long long M, long long N) {
    const long long n = M * N, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const long long m = i / N, c = i % N;
        const float gv = tw_to_f32(g[i]), uv = tw_to_f32(u[i]);
        float du = 0.0f, dg = 0.0f;
        if (tw_act_on(gv)) {
            const float s = tw_sign_nan(uv);
            const float dt = tw_to_f32(dh[i]) + l1c * s;
            du = dt * gv;
            dg = dt * uv;
        }
        dug[m * 2 * N + c] = tw_from_f32(du);
        dug[m * 2 * N + N + c] = tw_from_f32(dg);
    }
}
]==]
