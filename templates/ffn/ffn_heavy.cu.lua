-- ffn_heavy.cu.lua — the heavy-row route of fused inference (runtime/ops/ffn/heavy/cuda_ffn_heavy.c):
-- rows whose active count exceeds a threshold leave the sparse pipeline (ffn_fused's prep and
-- build read `hmark` and see them empty) and run gemm_sm90's dense GEMMs (DM = 1: the row count
-- is read on the device, so no host synchronisation) on a gathered block of at most CAP rows.
--   twell_ffn_heavy_flag     256 threads, warp per row (grid-stride): count = Σ of the row's
--                            row-tile counts (word 0 of each, the gate-pack's exact counts);
--                            hmark[m] = count > thr (candidate). packed is not written.
--   twell_ffn_heavy_list     1 block of 1024: the candidates in ascending row order (per tile of
--                            16384 rows: 16 rows a thread, one block-wide prefix scan of the
--                            counts, no atomics; hmark padded to 16 words); the first cap keep
--                            hmark[m] = 1 and get idx[0..nh), later ones get hmark[m] = 0 (the
--                            sparse pipeline computes them, exactly); hn[0] = nh = min(count,
--                            cap).
--   twell_ffn_heavy_gather   256 threads, grid-stride over cap·K/8 16-byte units: xb row i =
--                            x row idx[i] for i < hn[0] (rows past it are not touched).
--   twell_ffn_heavy_scatter  256 threads, warp per (row, 256 columns), grid-stride over cap rows:
--                            for i < hn[0], y row idx[i] = round(Σ_s part[s][i]) (fp32 slices
--                            of the split-K down GEMM summed in the fixed order s = 0, 1, ...,
--                            rounded once to dtype, nearest even: dense_aux's reduce_plain).
-- Parameters: K, N, T, C, dtype (the shape). No programmatic dependent launch: the launcher
-- starts these kernels without it, so each runs after everything before it in the stream.
-- ABI:
--   twell_ffn_heavy_flag(const unsigned *packed, int M, unsigned thr, unsigned *hmark)
--   twell_ffn_heavy_list(unsigned *hmark, int M, int cap, unsigned *idx, int *hn)
--   twell_ffn_heavy_gather(const uint4 *x, uint4 *xb, const unsigned *idx, const int *hn,
--                          int cap)
--   twell_ffn_heavy_scatter(const float *part, int cap, int nsplit, const int *hn,
--                           const unsigned *idx, unsigned short *y)
--       part[(s·cap + i)·K + col] (16-byte aligned), y 16-byte aligned.

local common = import "twell_common"
local S = common.shape()
if S.K % 64 ~= 0 then
    unsupported("K=%d is not a multiple of 64 (the dense GEMMs need it)", S.K)
end
local NBK = (S.K + 255) // 256
local DT = S.dtype == "bf16" and "bf16" or "f16"

common.row_active(S)
common.warp_scan()
cuda [==[
typedef unsigned int tw_u32;
typedef unsigned short tw_u16;
#define TW_FULL 0xffffffffu

extern "C" __global__ void __launch_bounds__(256)
twell_ffn_heavy_flag(const tw_u32 *__restrict__ packed, int M, tw_u32 thr,
                     tw_u32 *__restrict__ hmark) {
    const int lane = (int)(threadIdx.x & 31u);
    const long long nw = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long m = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; m < M; m += nw) {
        const tw_u32 *row = packed + m * ${S.NW};
        const tw_u32 c = tw_row_active(row);
        if (lane == 0)
            hmark[m] = c > thr ? 1u : 0u;
    }
}

extern "C" __global__ void __launch_bounds__(1024)
twell_ffn_heavy_list(tw_u32 *__restrict__ hmark, int M, int cap, tw_u32 *__restrict__ idx,
                     int *__restrict__ hn) {
    /* tiles of 16384 rows: thread t owns rows 16t .. 16t+15 of a tile (four 16-byte loads; hmark
     * is padded to a multiple of 16 words), one block-wide exclusive scan of the per-thread
     * counts per tile */
    __shared__ tw_u32 s_w[32];
    __shared__ long long s_end;
    const int tid = (int)threadIdx.x, lane = tid & 31, wid = tid >> 5;
    long long base = 0; /* the same in every thread */
    for (long long t0 = 0; t0 < M; t0 += 16384) {
        const long long r0 = t0 + 16 * (long long)tid;
        tw_u32 f[16];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const uint4 v = r0 < M ? ((const uint4 *)(hmark + r0))[q] : make_uint4(0, 0, 0, 0);
            f[4 * q] = v.x, f[4 * q + 1] = v.y, f[4 * q + 2] = v.z, f[4 * q + 3] = v.w;
        }
        tw_u32 c = 0;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            f[j] = r0 + j < M ? f[j] : 0u;
            c += f[j] != 0u ? 1u : 0u;
        }
        const tw_u32 incl = tw_warp_incl_scan(c, lane);
        if (lane == 31)
            s_w[wid] = incl;
        __syncthreads();
        if (wid == 0) { /* the warp totals, scanned in place (exclusive) */
            const tw_u32 v = s_w[lane];
            s_w[lane] = tw_warp_incl_scan(v, lane) - v; /* each lane read its word first */
        }
        __syncthreads();
        long long pos = base + s_w[wid] + (incl - c);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            if (f[j] != 0u) {
                if (pos < cap)
                    idx[pos] = (tw_u32)(r0 + j);
                else
                    hmark[r0 + j] = 0u; /* over the block's capacity: the sparse pipeline's */
                pos++;
            }
        }
        /* the next tile's base: thread 1023's end position */
        if (tid == 1023)
            s_end = pos;
        __syncthreads();
        base = s_end;
        __syncthreads(); /* s_w and s_end are rewritten by the next tile */
    }
    if (tid == 0)
        hn[0] = (int)(base < cap ? base : cap);
}

extern "C" __global__ void __launch_bounds__(256)
twell_ffn_heavy_gather(const uint4 *__restrict__ x, uint4 *__restrict__ xb,
                       const tw_u32 *__restrict__ idx, const int *__restrict__ hn, int cap) {
    const long long U = ${S.K // 8}, n = (long long)min(hn[0], cap) * U;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const long long r = i / U, u = i - r * U;
        xb[r * U + u] = x[(long long)idx[r] * U + u];
    }
}

/* Rounds two floats to dtype (nearest even): lo in bits 15..0, hi in bits 31..16. */
static __device__ __forceinline__ tw_u32 tw_pack2(float lo, float hi) {
    tw_u32 r;
    asm("cvt.rn.${DT}x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

extern "C" __global__ void __launch_bounds__(256)
twell_ffn_heavy_scatter(const float *__restrict__ part, int cap, int nsplit,
                        const int *__restrict__ hn, const tw_u32 *__restrict__ idx,
                        tw_u16 *__restrict__ y) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long items = (long long)min(hn[0], cap) * ${NBK};
    const long long stride = (long long)cap * ${S.K};
    for (long long i = (long long)blockIdx.x * 8 + warp; i < items; i += (long long)gridDim.x * 8) {
        const long long row = i / ${NBK};
        const int col = (int)(i - row * ${NBK}) * 256 + lane * 8;
        if (col >= ${S.K})
            continue;
        const float4 *p = (const float4 *)(part + row * ${S.K} + col);
        float4 a = __ldg(p), b = __ldg(p + 1);
        float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        for (int s = 1; s < nsplit; ++s) {
            p = (const float4 *)(part + row * ${S.K} + col + (long long)s * stride);
            a = __ldg(p), b = __ldg(p + 1);
            v[0] += a.x, v[1] += a.y, v[2] += a.z, v[3] += a.w;
            v[4] += b.x, v[5] += b.y, v[6] += b.z, v[7] += b.w;
        }
        *(uint4 *)(y + (long long)idx[row] * ${S.K} + col) =
            make_uint4(tw_pack2(v[0], v[1]), tw_pack2(v[2], v[3]), tw_pack2(v[4], v[5]),
                       tw_pack2(v[6], v[7]));
    }
}
]==]
