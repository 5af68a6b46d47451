-- train_heavy.cu.lua — the heavy-row route of the sparse training path (runtime/ops/train/
-- cuda_train_heavy.c, docs/DESIGN.md §6): rows whose active count exceeds a threshold (the first
-- tokens of sequences, a few dense rows) leave the per-entry route and run the dense training
-- GEMMs (gemm_sm90.cu.lua's fwd/mm/dt/wgrad modes) on a contiguous block of them.
--   twell_train_heavy_flag   256 threads, warp per row (grid-stride): count = Σ of the row's
--                            row-tile counts (word 0 of each, the gate-pack's exact counts);
--                            heavy (count > thr): flag[m] = count, htot[0] += 1, htot[1] +=
--                            count (integer atomics: any order gives the same sums; htot zero
--                            at launch) and the row's packed words zeroed, so every later sparse
--                            kernel sees an empty row (its y, dx rows zero, no entries, no
--                            overflow); else flag[m] = 0. Builds with tensor-core overflow tiles
--                            do the same inside train_ffn's twell_train_ovf_list instead.
--   twell_train_heavy_list   1 block of 1024, a thread per ceil(M/1024) consecutive rows: the
--                            heavy rows in ascending order (count, block prefix scan, place; no
--                            atomics): idx[0..nh). Launched only when the host has read nh > 0.
--   twell_train_heavy_rows   256 threads, grid-stride over 16-byte units: gather (dst row i =
--                            src row idx[i]) or scatter (dst row idx[i] = src row i) of K
--                            16-bit values a row. Tensors 16-byte aligned.
--   twell_train_heavy_stats  1 block of 256: L0 = (sparse nnz + heavy nnz) / M, L1 = (Σ chunk
--                            L1 + Σ the dense block's per-warp |Tm| partials) / M, each sum a
--                            fixed tree in double (bitwise reproducible).
--
-- Parameters: K, N, T, C, dtype (the shape; dtype does not change the code).
-- ABI:
--   twell_train_heavy_flag(unsigned *packed, long long M, unsigned thr, unsigned *flag,
--                          unsigned long long *htot)
--   twell_train_heavy_list(const unsigned *flag, long long M, unsigned *idx)
--   twell_train_heavy_rows(const uint4 *src, uint4 *dst, const unsigned *idx, long long nh,
--                          int scatter)
--   twell_train_heavy_stats(const double *chunk_l1, const unsigned long long *chunk_off,
--                           const unsigned long long *row_off, long long M,
--                           const unsigned long long *htot, const float *hpart, long long hn,
--                           float *stats)

local common = import "twell_common"
local S = common.shape()

common.row_active(S)
common.warp_scan()
cuda [==[
typedef unsigned long long tw_u64;
typedef unsigned int tw_u32;
#define TW_FULL 0xffffffffu

extern "C" __global__ void __launch_bounds__(256)
twell_train_heavy_flag(tw_u32 *__restrict__ packed, long long M, tw_u32 thr,
                       tw_u32 *__restrict__ flag, tw_u64 *__restrict__ htot) {
    const int lane = (int)(threadIdx.x & 31u);
    const long long nw = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long m = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; m < M; m += nw) {
        tw_u32 *row = packed + m * ${S.NW};
        const tw_u32 c = tw_row_active(row);
        /* every lane has read its counts before the shuffles: the writes below race with none */
        const bool heavy = c > thr;
        if (lane == 0) {
            flag[m] = heavy ? c : 0u;
            if (heavy) {
                atomicAdd(htot, 1ull);
                atomicAdd(htot + 1, (tw_u64)c);
            }
        }
        if (heavy)
            for (int w = lane; w < ${S.NW}; w += 32)
                row[w] = 0u;
    }
}

extern "C" __global__ void __launch_bounds__(1024)
twell_train_heavy_list(const tw_u32 *__restrict__ flag, long long M, tw_u32 *__restrict__ idx) {
    __shared__ tw_u32 s_w[32];
    const int tid = (int)threadIdx.x, lane = tid & 31, wid = tid >> 5;
    /* thread tid owns the consecutive rows [r0, r1): one pass counts, one scan places, one pass
     * writes (ascending: the ranges are in thread order) */
    const long long per = (M + 1023) / 1024;
    const long long r0 = (long long)tid * per < M ? (long long)tid * per : M;
    const long long r1 = r0 + per < M ? r0 + per : M;
    tw_u32 n = 0;
    for (long long m = r0; m < r1; m++)
        n += flag[m] != 0u ? 1u : 0u;
    const tw_u32 inc = tw_warp_incl_scan(n, lane);
    if (lane == 31)
        s_w[wid] = inc;
    __syncthreads();
    tw_u32 before = 0;
    for (int w = 0; w < wid; w++)
        before += s_w[w];
    tw_u32 at = before + inc - n;
    for (long long m = r0; m < r1 && at < before + inc; m++)
        if (flag[m] != 0u)
            idx[at++] = (tw_u32)m;
}

extern "C" __global__ void __launch_bounds__(256)
twell_train_heavy_rows(const uint4 *__restrict__ src, uint4 *__restrict__ dst,
                       const tw_u32 *__restrict__ idx, long long nh, int scatter) {
    const long long U = ${S.K // 8}, n = nh * U;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const long long r = i / U, u = i - r * U, m = (long long)idx[r];
        if (scatter)
            dst[m * U + u] = src[r * U + u];
        else
            dst[r * U + u] = src[m * U + u];
    }
}

extern "C" __global__ void __launch_bounds__(256)
twell_train_heavy_stats(const double *__restrict__ chunk_l1, const tw_u64 *__restrict__ chunk_off,
                        const tw_u64 *__restrict__ row_off, long long M,
                        const tw_u64 *__restrict__ htot, const float *__restrict__ hpart,
                        long long hn, float *__restrict__ stats) {
    __shared__ double sh[256], hh[256];
    const tw_u64 n = chunk_off[M], t = threadIdx.x;
    double s = 0.0, h = 0.0;
    for (tw_u64 c = n * t / 256ull; c < n * (t + 1ull) / 256ull; c++)
        s += chunk_l1[c];
    const tw_u64 hnu = (tw_u64)hn;
    for (tw_u64 c = hnu * t / 256ull; c < hnu * (t + 1ull) / 256ull; c++)
        h += (double)hpart[2ull * c];
    sh[t] = s;
    hh[t] = h;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)t < w) {
            sh[t] += sh[t + w];
            hh[t] += hh[t + w];
        }
        __syncthreads();
    }
    if (t == 0) {
        stats[0] = (float)((double)(row_off[M] + htot[1]) / (double)M);
        stats[1] = (float)((sh[0] + hh[0]) / (double)M);
    }
}
]==]
