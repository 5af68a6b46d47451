-- train_dense_aux.cu.lua — the small kernels of the dense training path (runtime/
-- cuda_train_dense.c) besides its GEMMs (gemm_sm90.cu.lua, training modes):
--   twell_train_dense_stats  L0 and L1 from the forward GEMM's per-warp partials, summed in one
--                            fixed order (double), so the stats are bitwise reproducible; also
--                            the total count as a u64 for the AUTO choice (read back by the host
--                            asynchronously).
--
-- Parameters: none.
-- ABI:
--   extern "C" __global__ void twell_train_dense_stats(
--       const float *part,              // [n][2]: {Σ|Tm|, count} per consumer warp and unit
--       long long n, long long M,
--       float *stats,                   // [2] L0 = count / M, L1 = Σ|Tm| / M; NULL: not written
--       unsigned long long *count)      // [1] Σ count
--   block = 1024 threads, grid = 1.

cuda [==[
extern "C" __global__ void __launch_bounds__(1024)
    twell_train_dense_stats(const float *__restrict__ part, long long n, long long M,
                            float *__restrict__ stats, unsigned long long *__restrict__ count) {
    __shared__ double s_l1[1024], s_c[1024];
    const int tid = threadIdx.x;
    double l1 = 0.0, c = 0.0;
    for (long long i = tid; i < n; i += 1024) {
        l1 += (double)part[2 * i];
        c += (double)part[2 * i + 1];
    }
    s_l1[tid] = l1;
    s_c[tid] = c;
    __syncthreads();
    for (int w = 512; w > 0; w >>= 1) {
        if (tid < w) {
            s_l1[tid] += s_l1[tid + w];
            s_c[tid] += s_c[tid + w];
        }
        __syncthreads();
    }
    if (tid == 0) {
        if (stats) {
            stats[0] = (float)(s_c[0] / (double)M);
            stats[1] = (float)(s_l1[0] / (double)M);
        }
        *count = (unsigned long long)s_c[0];
    }
}
]==]
