// fused_dev.cu — standalone harness for the fused TwELL FFN inference kernels (fused_kernels.cuh):
// synthetic sparse data from a real gate GEMM (uniform or with heavy rows whose row-tiles
// overflow), exactness against a CPU fp64 reference on sampled rows, determinism, timing with the
// L2 flushed, and the dense cuBLAS FFN in the same run. Not part of the CMake build.
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o fused_dev fused_dev.cu -lcublas
//   ./fused_dev --M 4096,16384,65536 --nnz 29,56,110,280 --mode uniform,skewed [--ver 1|2|4 bits: v4 v5 v6]
#include "fused_kernels_v6.cuh" /* includes fused_kernels.cuh */

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call,                       \
                    cudaGetErrorString(e_));                                                      \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
#define CKB(call)                                                                                 \
    do {                                                                                          \
        cublasStatus_t s_ = (call);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            fprintf(stderr, "%s:%d: %s -> cublas %d\n", __FILE__, __LINE__, #call, (int)s_);      \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
#define CKL() CK(cudaGetLastError())

// ---------------------------------------------------------------------------------------------
// Harness kernels: data generation, TwELL packing of a dense pre-activation, dense FFN helper.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ tw_u32 hash32(tw_u64 x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (tw_u32)x;
}
__device__ __forceinline__ float unif(tw_u64 seed, tw_u64 i) {
    return ((float)hash32(seed * 0x9E3779B97F4A7C15ULL + i) + 0.5f) * 2.3283064365386963e-10f;
}
__device__ __forceinline__ float rnorm(tw_u64 seed, tw_u64 i) {
    const float u1 = unif(seed, 2 * i), u2 = unif(seed, 2 * i + 1);
    return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

// x ~ N(0,1); column 0 is the constant 1 (it carries the gate thresholds); heavy rows scale the
// other columns.
template <int DT>
__global__ void k_fill_x(tw_u16 *x, long long M, int K, tw_u64 seed, float heavy_frac,
                         float heavy_scale) {
    const long long n = M * K;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long m = i / K;
        const int k = (int)(i - m * K);
        float v = rnorm(seed, (tw_u64)i);
        if (k == 0)
            v = 1.0f;
        else if (unif(seed ^ 0x51ed27ULL, (tw_u64)m) < heavy_frac)
            v *= heavy_scale;
        x[i] = tw_f2h<DT>(v);
    }
}
// w ~ N(0, scale^2); when z > 0 column 0 holds -threshold_n = -z (1 + zvar (2u - 1)).
template <int DT>
__global__ void k_fill_w(tw_u16 *w, int N, int K, tw_u64 seed, float scale, float z, float zvar) {
    const long long n = (long long)N * K;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / K;
        const int k = (int)(i - r * K);
        float v = rnorm(seed, (tw_u64)i) * scale;
        if (k == 0 && z > 0.0f)
            v = -z * (1.0f + zvar * (2.0f * unif(seed ^ 0x7711ULL, (tw_u64)r) - 1.0f));
        w[i] = tw_f2h<DT>(v);
    }
}
// TwELL packing of a dense pre-activation (already rounded to dtype): one warp per row-tile.
__global__ void k_pack(const tw_u16 *G, long long M, int N, int T, int C, tw_u32 *packed) {
    const int lane = threadIdx.x & 31, W = T / C, S = W - 1, NT = N / T;
    const long long cells = M * NT;
    const long long nw = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long cell = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5; cell < cells;
         cell += nw) {
        const long long m = cell / NT;
        const int t = (int)(cell - m * NT);
        tw_u32 *out = packed + cell * W;
        tw_u32 cnt = 0;
        for (int j0 = 0; j0 < T; j0 += 32) {
            const int n = t * T + j0 + lane;
            const tw_u32 b = G[m * N + n];
            const bool act = (b & 0x8000u) == 0 && b != 0 && (b & 0x7fffu) < 0x7f80u;
            const tw_u32 bal = __ballot_sync(TW_FULL, act);
            const tw_u32 pos = cnt + __popc(bal & ((1u << lane) - 1u));
            if (act && pos < (tw_u32)S)
                out[1 + pos] = (b << 16) | (tw_u32)n;
            cnt += __popc(bal);
        }
        for (tw_u32 p = min(cnt, (tw_u32)S) + lane; p < (tw_u32)S; p += 32)
            out[1 + p] = 0;
        if (lane == 0)
            out[0] = cnt;
    }
}
__global__ void k_stats(const tw_u32 *packed, long long M, int NT, int W,
                        unsigned long long *out /* [0] nnz, [1] overflowing cells, [2] max row, [3] rows with overflow */) {
    const int S = W - 1;
    for (long long m = blockIdx.x * (long long)blockDim.x + threadIdx.x; m < M;
         m += (long long)gridDim.x * blockDim.x) {
        unsigned long long s = 0, o = 0;
        for (int t = 0; t < NT; t++) {
            const tw_u32 c = packed[(m * NT + t) * W];
            s += c;
            o += c > (tw_u32)S;
        }
        atomicAdd(&out[0], s);
        atomicAdd(&out[1], o);
        atomicMax(&out[2], s);
        if (o)
            atomicAdd(&out[3], 1ull);
    }
}
template <int DT> __global__ void k_relu(const tw_u16 *u, tw_u16 *h, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        h[i] = tw_f2h<DT>(fmaxf(tw_h2f<DT>(u[i]), 0.0f));
}
template <int DT> __global__ void k_relu_mul(const tw_u16 *g, const tw_u16 *u, tw_u16 *h, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        h[i] = tw_f2h<DT>(fmaxf(tw_h2f<DT>(g[i]), 0.0f) * tw_h2f<DT>(u[i]));
}

// ---------------------------------------------------------------------------------------------
// Host 16-bit conversions (as runtime/half.h)
// ---------------------------------------------------------------------------------------------
static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float h2f_host(int dt, uint16_t h) {
    if (dt == 0)
        return bits_f((uint32_t)h << 16);
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (e == 0) {
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (e == 31)
        return bits_f(sign | 0x7f800000u | (man << 13));
    return bits_f(sign | ((e + 112u) << 23) | (man << 13));
}
static uint16_t f2h_host(int dt, float f) {
    uint32_t u = f_bits(f);
    if (dt == 0) {
        if ((u & 0x7fffffffu) > 0x7f800000u)
            return (uint16_t)((u >> 16) | 0x40u);
        u += 0x7fffu + ((u >> 16) & 1u);
        return (uint16_t)(u >> 16);
    }
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        float v = bits_f(a) * 16777216.0f;
        float r = v + 8388608.0f;
        r -= 8388608.0f;
        return (uint16_t)(sign | (uint16_t)r);
    }
    uint32_t odd = (a >> 13) & 1u;
    a += 0xfffu + odd;
    return (uint16_t)(sign | (uint16_t)(((a >> 13) - (112u << 10)) & 0x7fffu));
}
// Acklam's inverse normal CDF (relative error < 1.2e-9).
static double inv_norm(double p) {
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                               -2.759285104469687e+02, 1.383577518672690e+02,
                               -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                               -1.556989798598866e+02, 6.680131188771972e+01,
                               -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                               -2.400758277161838e+00, -2.549732539343734e+00,
                               4.374664141464968e+00,  2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                               2.445134137142996e+00, 3.754408661907416e+00};
    if (p < 0.02425) {
        double q = sqrt(-2 * log(p));
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    if (p > 1 - 0.02425) {
        double q = sqrt(-2 * log(1 - p));
        return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    double q = p - 0.5, r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

// ---------------------------------------------------------------------------------------------
// The tiled pipeline: workspace and launch sequence (the launch contract of the template).
// ---------------------------------------------------------------------------------------------
// Tile configurations: CN neurons per weight chunk, groups of 8 tokens per warp in phase A / B,
// descriptor staging capacities (slots) of phase A / B. 768 suits ~0.5 % density; 512 leaves room
// to stage the longer lists of denser data.
template <int CN_> struct Cfg;
template <> struct Cfg<768> { enum { CN = 768, GPWA = 8, GPWB = 4, DCAPA = 8192, DCAPB = 2976 }; };
template <> struct Cfg<512> { enum { CN = 512, GPWA = 8, GPWB = 4, DCAPA = 24576, DCAPB = 8192 }; };
template <int CN_> constexpr int smem_a() { return 2 * CN_ * 128 + 2 * Cfg<CN_>::DCAPA * 2; }
template <int CN_, int GATED> constexpr int smem_b() {
    return 2 * CN_ * 128 + 2 * Cfg<CN_>::DCAPB * (GATED ? 6 : 4);
}

struct Tiled {
    int M, K, N, T, C, dt, gated, cn;
    int W, NT, NC, TPC, NG;
    size_t pair_cap, ovf_cap;
    tw_u32 *flag, *ovf_cnt, *ovf_base, *item_base, *ovf_rows, *ovf_slot, *ovf_nnz, *sizes,
        *offsets;
    tw_u16 *ovf_g, *desc, *gv;
    float *h, *partial;
    size_t bytes;
};

template <typename T> static T *dalloc(size_t n, size_t &acc) {
    T *p = nullptr;
    const size_t b = std::max<size_t>(n, 1) * sizeof(T);
    CK(cudaMalloc(&p, b));
    acc += b;
    return p;
}

static void tiled_alloc(Tiled &w, int M, int K, int N, int T, int C, int dt, int gated, int cn,
                        size_t pair_cap, size_t ovf_cap) {
    w.M = M, w.K = K, w.N = N, w.T = T, w.C = C, w.dt = dt, w.gated = gated, w.cn = cn;
    w.W = T / C, w.NT = N / T, w.TPC = cn / T, w.NC = (w.NT + w.TPC - 1) / w.TPC;
    w.NG = (M + 7) / 8;
    w.pair_cap = pair_cap, w.ovf_cap = ovf_cap;
    size_t acc = 0;
    w.flag = dalloc<tw_u32>(4, acc);
    w.ovf_cnt = dalloc<tw_u32>(w.NT, acc);
    w.ovf_base = dalloc<tw_u32>(w.NT + 1, acc);
    w.item_base = dalloc<tw_u32>(w.NT + 1, acc);
    w.ovf_rows = dalloc<tw_u32>((size_t)w.NT * M, acc);
    w.ovf_slot = dalloc<tw_u32>((size_t)w.NT * M, acc);
    w.ovf_nnz = dalloc<tw_u32>(ovf_cap, acc);
    w.ovf_g = dalloc<tw_u16>(ovf_cap * T, acc);
    w.sizes = dalloc<tw_u32>((size_t)w.NG * w.NC, acc);
    w.offsets = dalloc<tw_u32>((size_t)w.NG * w.NC + 1, acc);
    w.desc = dalloc<tw_u16>(pair_cap + 64, acc);
    w.gv = dalloc<tw_u16>(pair_cap + 64, acc);
    w.h = gated ? dalloc<float>(pair_cap + 64, acc) : nullptr;
    w.partial = gated ? dalloc<float>((size_t)(K / TW_KW) * pair_cap, acc) : nullptr;
    w.bytes = acc;
}
static void tiled_free(Tiled &w) {
    void *ps[] = {w.flag,  w.ovf_cnt, w.ovf_base, w.item_base, w.ovf_rows, w.ovf_slot, w.ovf_nnz,
                  w.ovf_g, w.sizes,   w.offsets,  w.desc,      w.gv,       w.h,        w.partial};
    for (void *p : ps)
        if (p)
            cudaFree(p);
}

static int g_sms = 132;

template <int DT, int GATED>
static void rows_launch(const tw_u16 *x, const tw_u32 *packed, const tw_u16 *wp,
                        const tw_u16 *wu, const tw_u16 *wd, tw_u16 *y, int M, int K, int N, int T,
                        int C, const tw_u32 *flag, int fallback_only, cudaStream_t st) {
    const int blocks = std::min((M + 7) / 8, g_sms * 8);
    switch ((K + 255) / 256) {
    case 1: tw_k_rows<DT, GATED, 1><<<blocks, 256, 0, st>>>(x, packed, wp, wu, wd, y, M, K, N, T, C, flag, fallback_only); break;
    case 2: tw_k_rows<DT, GATED, 2><<<blocks, 256, 0, st>>>(x, packed, wp, wu, wd, y, M, K, N, T, C, flag, fallback_only); break;
    case 4: tw_k_rows<DT, GATED, 4><<<blocks, 256, 0, st>>>(x, packed, wp, wu, wd, y, M, K, N, T, C, flag, fallback_only); break;
    case 8: tw_k_rows<DT, GATED, 8><<<blocks, 256, 0, st>>>(x, packed, wp, wu, wd, y, M, K, N, T, C, flag, fallback_only); break;
    case 16: tw_k_rows<DT, GATED, 16><<<blocks, 256, 0, st>>>(x, packed, wp, wu, wd, y, M, K, N, T, C, flag, fallback_only); break;
    default: fprintf(stderr, "rows kernel: K=%d not instantiated\n", K); exit(1);
    }
    CKL();
}

template <int DT> static void ovf_gate_launch(const Tiled &w, const tw_u16 *x, const tw_u16 *wp,
                                              cudaStream_t st) {
    const int grid = g_sms * 2;
#define TW_OG(TT)                                                                                 \
    tw_k_ovf_gate<DT, TT><<<grid, 256, 2 * (TT * 128 + 64 * 128), st>>>(                         \
        x, wp, w.M, w.K, w.NT, w.ovf_cnt, w.ovf_rows, w.ovf_base, w.item_base, w.ovf_g,           \
        w.ovf_nnz, w.flag)
    if (w.T == 256) TW_OG(256);
    else if (w.T == 128) TW_OG(128);
    else TW_OG(64);
#undef TW_OG
    CKL();
}

template <int CN_> static void build_launch(const Tiled &w, const tw_u32 *packed, cudaStream_t st) {
    const int nlist = w.NG * w.NC;
#define TW_BD(CC, BW)                                                                             \
    tw_k_build<8 * CN_ / CC + CN_ / 8 + 1, BW><<<(nlist + BW - 1) / BW, BW * 32, 0, st>>>(        \
        packed, w.M, w.NT, w.W, w.T, w.NC, w.TPC, w.NG, w.ovf_slot, w.ovf_base, w.ovf_g,          \
        w.offsets, w.sizes, w.desc, w.gv, w.flag)
    if (w.C == 2) TW_BD(2, 2);
    else if (w.C == 4) TW_BD(4, 4);
    else TW_BD(8, 4);
#undef TW_BD
    CKL();
}

// ev: optional array of events recorded between the kernels (breakdown).
template <int DT, int GATED, int CN_>
static void tiled_run_t(Tiled &w, const tw_u16 *x, const tw_u32 *packed, const tw_u16 *wg,
                        const tw_u16 *wu, const tw_u16 *wd, tw_u16 *y, cudaStream_t st,
                        cudaEvent_t *ev) {
    typedef Cfg<CN_> F;
    const int M = w.M, K = w.K, N = w.N, T = w.T, C = w.C;
    const tw_u16 *wp = GATED ? wg : wu;
    const int nlist = w.NG * w.NC;
    int e = 0;
    auto mark = [&]() {
        if (ev)
            CK(cudaEventRecord(ev[e++], st));
    };
    mark();
    CK(cudaMemsetAsync(w.ovf_cnt, 0, sizeof(tw_u32) * w.NT, st));
    {
        const long long cells = (long long)M * w.NT;
        const int blocks = (int)std::min<long long>((cells + 255) / 256, g_sms * 16);
        tw_k_ovf_detect<<<blocks, 256, 0, st>>>(packed, M, w.NT, w.W, w.ovf_cnt, w.ovf_rows,
                                                 w.ovf_slot);
        CKL();
    }
    tw_k_ovf_scan<<<1, 256, 0, st>>>(w.ovf_cnt, w.NT, w.ovf_base, w.item_base, w.ovf_nnz, w.flag,
                                     (tw_u32)w.ovf_cap);
    CKL();
    mark();
    ovf_gate_launch<DT>(w, x, wp, st);
    mark();
    tw_k_sizes<<<(nlist + 7) / 8, 256, 0, st>>>(packed, M, w.NT, w.W, w.NC, w.TPC, w.NG,
                                                w.ovf_slot, w.ovf_base, w.ovf_nnz, w.sizes, w.flag);
    CKL();
    tw_k_scan<<<1, 1024, 0, st>>>(w.sizes, nlist, w.offsets, w.flag, (tw_u32)w.pair_cap);
    CKL();
    build_launch<CN_>(w, packed, st);
    mark();
    if (GATED) {
        dim3 ga((w.NG + 16 * F::GPWA - 1) / (16 * F::GPWA), K / TW_KW);
        tw_k_phase_a<DT, CN_, F::GPWA, F::DCAPA><<<ga, 512, smem_a<CN_>(), st>>>(
            x, wu, M, K, N, w.NG, w.NC, w.desc, w.offsets, w.sizes, w.partial, (tw_u32)w.pair_cap,
            w.flag);
        CKL();
        mark();
        tw_k_reduce<DT><<<g_sms * 8, 256, 0, st>>>(w.gv, w.partial, (tw_u32)w.pair_cap, K / TW_KW,
                                                   w.offsets + nlist, w.h, w.flag);
        CKL();
        mark();
    }
    dim3 gb((w.NG + 16 * F::GPWB - 1) / (16 * F::GPWB), K / TW_KW);
    tw_k_phase_b<DT, GATED, CN_, F::GPWB, F::DCAPB><<<gb, 512, smem_b<CN_, GATED>(), st>>>(
        wd, M, K, N, w.NG, w.NC, w.desc, w.gv, w.h, w.offsets, w.sizes, y, w.flag);
    CKL();
    mark();
    rows_launch<DT, GATED>(x, packed, wp, wu, wd, y, M, K, N, T, C, w.flag, 1, st);
    mark();
}

template <int DT, int GATED, int CN_> static void set_attrs_t() {
    typedef Cfg<CN_> F;
    CK(cudaFuncSetAttribute(tw_k_phase_a<DT, CN_, F::GPWA, F::DCAPA>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem_a<CN_>()));
    CK(cudaFuncSetAttribute(tw_k_phase_b<DT, GATED, CN_, F::GPWB, F::DCAPB>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem_b<CN_, GATED>()));
}
template <int DT> static void set_attrs() {
    set_attrs_t<DT, 1, 768>();
    set_attrs_t<DT, 0, 768>();
    set_attrs_t<DT, 1, 512>();
    set_attrs_t<DT, 0, 512>();
    CK(cudaFuncSetAttribute(tw_k_ovf_gate<DT, 256>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            2 * (256 * 128 + 64 * 128)));
    CK(cudaFuncSetAttribute(tw_k_ovf_gate<DT, 128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            2 * (128 * 128 + 64 * 128)));
    CK(cudaFuncSetAttribute(tw_k_ovf_gate<DT, 64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            2 * (64 * 128 + 64 * 128)));
}

template <int DT, int GATED>
static void tiled_run_dg(Tiled &w, const tw_u16 *x, const tw_u32 *packed, const tw_u16 *wg,
                         const tw_u16 *wu, const tw_u16 *wd, tw_u16 *y, cudaStream_t st,
                         cudaEvent_t *ev) {
    if (w.cn == 768)
        tiled_run_t<DT, GATED, 768>(w, x, packed, wg, wu, wd, y, st, ev);
    else
        tiled_run_t<DT, GATED, 512>(w, x, packed, wg, wu, wd, y, st, ev);
}
static void tiled_run(Tiled &w, const tw_u16 *x, const tw_u32 *packed, const tw_u16 *wg,
                      const tw_u16 *wu, const tw_u16 *wd, tw_u16 *y, cudaStream_t st,
                      cudaEvent_t *ev = nullptr) {
    if (w.dt == 0 && w.gated)
        tiled_run_dg<0, 1>(w, x, packed, wg, wu, wd, y, st, ev);
    else if (w.dt == 0)
        tiled_run_dg<0, 0>(w, x, packed, wg, wu, wd, y, st, ev);
    else if (w.gated)
        tiled_run_dg<1, 1>(w, x, packed, wg, wu, wd, y, st, ev);
    else
        tiled_run_dg<1, 0>(w, x, packed, wg, wu, wd, y, st, ev);
}
static void rows_run(int dt, int gated, const tw_u16 *x, const tw_u32 *packed, const tw_u16 *wg,
                     const tw_u16 *wu, const tw_u16 *wd, tw_u16 *y, int M, int K, int N, int T,
                     int C, const tw_u32 *flag, cudaStream_t st) {
    const tw_u16 *wp = gated ? wg : wu;
    if (dt == 0 && gated)
        rows_launch<0, 1>(x, packed, wp, wu, wd, y, M, K, N, T, C, flag, 0, st);
    else if (dt == 0)
        rows_launch<0, 0>(x, packed, wp, wu, wd, y, M, K, N, T, C, flag, 0, st);
    else if (gated)
        rows_launch<1, 1>(x, packed, wp, wu, wd, y, M, K, N, T, C, flag, 0, st);
    else
        rows_launch<1, 0>(x, packed, wp, wu, wd, y, M, K, N, T, C, flag, 0, st);
}

// ---------------------------------------------------------------------------------------------
// v5 pipeline: workspace and launch sequence (the launch contract of the template, v5).
// ---------------------------------------------------------------------------------------------
#define TW5_CN 512
#define TW5_DCAPA ((232448 - 2 * TW5_CN * 128) / 8 / 16 * 16)
#define TW5_DCAPB(G) ((232448 - 2 * TW5_CN * 128) / (2 * ((G) ? 8 : 6)) / 16 * 16)
static int smem_a5() { return 2 * TW5_CN * 128 + 2 * TW5_DCAPA * 4; }
static int smem_b5(int gated) { return 2 * TW5_CN * 128 + 2 * TW5_DCAPB(gated) * (gated ? 8 : 6); }
static int smem_gu5(int gated) { return 2 * 64 * 128 * (gated ? 3 : 2); }
static int smem_down5(int T) { return 2 * (2 * 32 * T * 2 + T * 128); }

// v6 (fused_kernels_v6.cuh): shared-memory layout with the staged list offsets and the offset table.
#define TW6_NCMAX 64 /* prep's per-chunk shared arrays; NC = ceil(N / 512) here */
#define TW6_DCAPA ((232448 - 2 * TW5_CN * 128 - TW6_RE - 2 * (2 * 128 + 4) * 4) / 8 / 16 * 16)
#define TW6_DCAPB(G)                                                                              \
    ((232448 - 2 * TW5_CN * 128 - TW6_RE - 2 * (2 * 64 + 4) * 4) / (2 * ((G) ? 8 : 6)) / 16 * 16)
static int smem_a6() { return 2 * TW5_CN * 128 + 2 * TW6_SB(TW6_DCAPA, 4, 128) + TW6_RE; }
static int smem_b6(int gated) {
    return 2 * TW5_CN * 128 + 2 * TW6_SB(TW6_DCAPB(gated), gated ? 8 : 6, 64) + TW6_RE;
}

struct Tiled5 {
    int M, K, N, T, C, dt, gated, padq;
    int W, NT, NC, TPC, NG, NL, NSL, NB;
    size_t pair_cap, ovf_cap, orow_cap;
    tw_u32 *flag, *cnt, *ovf_base, *item_base, *ovf_rows, *ovf_slot, *orow_idx, *orows, *sizes,
        *offsets, *desc, *hl, *rexp, *ovf_ex, *bsum, *bbase;
    tw_u16 *gv, *ovf_hh;
    float *partial, *ovf_y;
    size_t bytes;
};

static void tiled5_alloc(Tiled5 &w, int M, int K, int N, int T, int C, int dt, int gated,
                         size_t pair_cap, size_t ovf_cap, size_t orow_cap) {
    w.M = M, w.K = K, w.N = N, w.T = T, w.C = C, w.dt = dt, w.gated = gated;
    w.padq = (dt == 1 && gated) ? 16 : 8;
    w.W = T / C, w.NT = N / T, w.TPC = TW5_CN / T, w.NC = (w.NT + w.TPC - 1) / w.TPC;
    w.NG = (M + 7) / 8, w.NL = w.NG * w.NC, w.NSL = K / 64, w.NB = (w.NG + 7) / 8;
    if (w.NC > TW6_NCMAX) {
        fprintf(stderr, "v6: NC %d > %d\n", w.NC, TW6_NCMAX);
        exit(1);
    }
    w.pair_cap = pair_cap, w.ovf_cap = ovf_cap, w.orow_cap = orow_cap;
    size_t acc = 0;
    w.flag = dalloc<tw_u32>(4, acc);
    w.cnt = dalloc<tw_u32>(w.NT + 1, acc);
    w.ovf_base = dalloc<tw_u32>(w.NT + 1, acc);
    w.item_base = dalloc<tw_u32>(w.NT + 1, acc);
    w.ovf_rows = dalloc<tw_u32>((size_t)w.NT * M, acc);
    w.ovf_slot = dalloc<tw_u32>((size_t)w.NT * M, acc);
    w.orow_idx = dalloc<tw_u32>(M, acc);
    w.orows = dalloc<tw_u32>(M, acc);
    w.sizes = dalloc<tw_u32>(w.NL, acc);
    w.offsets = dalloc<tw_u32>(w.NL + 1, acc);
    w.bsum = dalloc<tw_u32>((size_t)w.NC * w.NB, acc); /* v6 */
    w.bbase = dalloc<tw_u32>((size_t)w.NC * w.NB, acc);
    w.ovf_hh = dalloc<tw_u16>(ovf_cap * 2 * T, acc);
    w.ovf_ex = dalloc<tw_u32>(ovf_cap * (T / 64), acc);
    w.ovf_y = dalloc<float>(orow_cap * K, acc);
    w.desc = dalloc<tw_u32>(pair_cap + 64, acc);
    w.gv = dalloc<tw_u16>(pair_cap + 64, acc);
    w.hl = gated ? dalloc<tw_u32>(pair_cap + 64, acc) : nullptr;
    w.rexp = gated ? dalloc<tw_u32>(pair_cap / 16 + 64, acc) : nullptr;
    w.partial = gated ? dalloc<float>((size_t)w.NSL * pair_cap, acc) : nullptr;
    w.bytes = acc;
}
static void tiled5_free(Tiled5 &w) {
    void *ps[] = {w.flag,  w.cnt,     w.ovf_base, w.item_base, w.ovf_rows, w.ovf_slot, w.orow_idx,
                  w.orows, w.sizes,   w.offsets,  w.ovf_hh,    w.ovf_ex,   w.ovf_y,    w.desc,
                  w.gv,    w.hl,      w.rexp,     w.partial, w.bsum, w.bbase};
    for (void *p : ps)
        if (p)
            cudaFree(p);
}

template <int DT, int GATED, int TT>
static void tiled5_run_t(Tiled5 &w, const tw_u16 *x, const tw_u32 *packed, const tw_u16 *wg,
                         const tw_u16 *wu, const tw_u16 *wd, tw_u16 *y, cudaStream_t st,
                         cudaEvent_t *ev) {
    constexpr int PADQ = (DT == 1 && GATED) ? 16 : 8;
    constexpr int TPCM = TW5_CN / TT;
    const int M = w.M, K = w.K, N = w.N;
    const tw_u16 *wp = GATED ? wg : wu;
    int e = 0;
    auto mark = [&]() {
        if (ev)
            CK(cudaEventRecord(ev[e++], st));
    };
    mark();
    CK(cudaMemsetAsync(w.cnt, 0, sizeof(tw_u32) * (w.NT + 1), st));
    tw_k_prep5<PADQ><<<(w.NG + 7) / 8, 256, 0, st>>>(packed, M, w.NT, w.W, w.NC, w.TPC, w.NG, w.cnt,
                                                     w.ovf_rows, w.ovf_slot, w.orow_idx, w.orows,
                                                     w.sizes);
    CKL();
    tw_k_scan5<<<1, 1024, 0, st>>>(w.sizes, w.NL, w.offsets, w.cnt, w.NT, TT / 64, w.ovf_base,
                                   w.item_base, w.flag, (tw_u32)w.pair_cap, (tw_u32)w.ovf_cap,
                                   (tw_u32)w.orow_cap);
    CKL();
    mark();
    tw_k_build5<TPCM, 4><<<(w.NL + 3) / 4, 128, 0, st>>>(packed, M, w.NT, w.W, N, TW5_CN, w.NC,
                                                         w.TPC, w.NG, w.offsets, w.sizes, w.desc,
                                                         w.gv, w.flag);
    CKL();
    mark();
    tw_k_ovf_gu<DT, GATED, TT><<<g_sms * 2, 256, smem_gu5(GATED), st>>>(
        x, wp, wu, M, K, w.NT, w.ovf_base, w.item_base, w.ovf_rows, w.ovf_hh, w.ovf_ex, w.flag);
    CKL();
    tw_k_ovf_down<DT, TT><<<g_sms, 256, smem_down5(TT), st>>>(packed, wd, M, K, w.NT, w.W,
                                                              w.ovf_base, w.ovf_slot, w.orows,
                                                              w.ovf_hh, w.ovf_ex, w.ovf_y, w.flag);
    CKL();
    mark();
    if (GATED) {
        dim3 ga((w.NG + 16 * 8 - 1) / (16 * 8), w.NSL);
        tw_k_phase_a5<DT, TW5_CN, 8, TW5_DCAPA, PADQ><<<ga, 512, smem_a5(), st>>>(
            x, wu, M, K, N, w.NG, w.NC, w.desc, w.offsets, w.sizes, w.partial, (tw_u32)w.pair_cap,
            w.flag);
        CKL();
        mark();
        tw_k_reduce5<DT><<<g_sms * 8, 256, 0, st>>>(w.gv, w.partial, (tw_u32)w.pair_cap, w.NSL,
                                                    w.offsets + w.NL, w.hl, w.rexp, w.flag);
        CKL();
        mark();
    }
    dim3 gb((w.NG + 16 * 4 - 1) / (16 * 4), w.NSL);
    tw_k_phase_b5<DT, GATED, TW5_CN, 4, TW5_DCAPB(GATED), PADQ><<<gb, 512, smem_b5(GATED), st>>>(
        wd, M, K, N, w.NG, w.NC, w.desc, w.gv, w.hl, w.rexp, w.offsets, w.sizes, w.orow_idx,
        w.ovf_y, y, w.flag);
    CKL();
    mark();
    rows_launch<DT, GATED>(x, packed, wp, wu, wd, y, M, K, N, w.T, w.C, w.flag, 1, st);
    mark();
}

template <int DT, int GATED, int TT> static void set_attrs5_t() {
    constexpr int PADQ = (DT == 1 && GATED) ? 16 : 8;
    CK(cudaFuncSetAttribute(tw_k_phase_a5<DT, TW5_CN, 8, TW5_DCAPA, PADQ>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem_a5()));
    CK(cudaFuncSetAttribute(tw_k_phase_b5<DT, GATED, TW5_CN, 4, TW5_DCAPB(GATED), PADQ>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem_b5(GATED)));
    CK(cudaFuncSetAttribute(tw_k_ovf_gu<DT, GATED, TT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem_gu5(GATED)));
    CK(cudaFuncSetAttribute(tw_k_ovf_down<DT, TT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem_down5(TT)));
}
template <int DT, int GATED> static void tiled5_run_g(Tiled5 &w, const tw_u16 *x, const tw_u32 *packed,
                                                      const tw_u16 *wg, const tw_u16 *wu,
                                                      const tw_u16 *wd, tw_u16 *y, cudaStream_t st,
                                                      cudaEvent_t *ev) {
    if (w.T == 256)
        tiled5_run_t<DT, GATED, 256>(w, x, packed, wg, wu, wd, y, st, ev);
    else if (w.T == 128)
        tiled5_run_t<DT, GATED, 128>(w, x, packed, wg, wu, wd, y, st, ev);
    else
        tiled5_run_t<DT, GATED, 64>(w, x, packed, wg, wu, wd, y, st, ev);
}
static void tiled5_run(Tiled5 &w, const tw_u16 *x, const tw_u32 *packed, const tw_u16 *wg,
                       const tw_u16 *wu, const tw_u16 *wd, tw_u16 *y, cudaStream_t st,
                       cudaEvent_t *ev = nullptr) {
    if (w.dt == 0 && w.gated)
        tiled5_run_g<0, 1>(w, x, packed, wg, wu, wd, y, st, ev);
    else if (w.dt == 0)
        tiled5_run_g<0, 0>(w, x, packed, wg, wu, wd, y, st, ev);
    else if (w.gated)
        tiled5_run_g<1, 1>(w, x, packed, wg, wu, wd, y, st, ev);
    else
        tiled5_run_g<1, 0>(w, x, packed, wg, wu, wd, y, st, ev);
}
template <int DT> static void set_attrs5() {
    set_attrs5_t<DT, 1, 256>();
    set_attrs5_t<DT, 0, 256>();
    set_attrs5_t<DT, 1, 128>();
    set_attrs5_t<DT, 0, 128>();
    set_attrs5_t<DT, 1, 64>();
    set_attrs5_t<DT, 0, 64>();
}

template <int DT, int GATED, int TT, int DIAG = 0>
static void tiled6_run_t(Tiled5 &w, const tw_u16 *x, const tw_u32 *packed, const tw_u16 *wg,
                         const tw_u16 *wu, const tw_u16 *wd, tw_u16 *y, cudaStream_t st,
                         cudaEvent_t *ev) {
    constexpr int PADQ = (DT == 1 && GATED) ? 16 : 8;
    constexpr int TPCM = TW5_CN / TT;
    const int M = w.M, K = w.K, N = w.N;
    const tw_u16 *wp = GATED ? wg : wu;
    int e = 0;
    auto mark = [&]() {
        if (ev)
            CK(cudaEventRecord(ev[e++], st));
    };
    mark();
    CK(cudaMemsetAsync(w.cnt, 0, sizeof(tw_u32) * (w.NT + 1), st));
    tw_k_prep6<PADQ, TW6_NCMAX><<<w.NB, 256, 0, st>>>(packed, M, w.NT, w.W, w.NC, w.TPC, w.NG,
                                                       w.cnt, w.ovf_rows, w.ovf_slot, w.orow_idx,
                                                       w.orows, w.sizes, w.bsum);
    CKL();
    tw_k_scan6<<<1, 1024, 0, st>>>(w.bsum, w.NC * w.NB, w.bbase, w.cnt, w.NT, TT / 64, w.ovf_base,
                                   w.item_base, w.flag, w.offsets + w.NL, (tw_u32)w.pair_cap,
                                   (tw_u32)w.ovf_cap, (tw_u32)w.orow_cap);
    CKL();
    mark();
    tw_k_build6<TPCM, 4><<<(w.NL + 3) / 4, 128, 0, st>>>(packed, M, w.NT, w.W, N, TW5_CN, w.NC,
                                                         w.TPC, w.NG, w.bbase, w.sizes, w.offsets,
                                                         w.desc, w.gv, w.flag);
    CKL();
    mark();
    tw_k_ovf_gu<DT, GATED, TT><<<g_sms * 2, 256, smem_gu5(GATED), st>>>(
        x, wp, wu, M, K, w.NT, w.ovf_base, w.item_base, w.ovf_rows, w.ovf_hh, w.ovf_ex, w.flag);
    CKL();
    tw_k_ovf_down<DT, TT><<<g_sms, 256, smem_down5(TT), st>>>(packed, wd, M, K, w.NT, w.W,
                                                              w.ovf_base, w.ovf_slot, w.orows,
                                                              w.ovf_hh, w.ovf_ex, w.ovf_y, w.flag);
    CKL();
    mark();
    if (GATED) {
        dim3 ga((w.NG + 16 * 8 - 1) / (16 * 8), w.NSL);
        tw_k_phase_a6<DT, TW5_CN, 8, TW6_DCAPA, PADQ, DIAG><<<ga, 512, smem_a6(), st>>>(
            x, wu, M, K, N, w.NG, w.NC, w.desc, w.offsets, w.sizes, w.partial, (tw_u32)w.pair_cap,
            w.flag);
        CKL();
        mark();
        tw_k_reduce5<DT><<<g_sms * 8, 256, 0, st>>>(w.gv, w.partial, (tw_u32)w.pair_cap, w.NSL,
                                                    w.offsets + w.NL, w.hl, w.rexp, w.flag);
        CKL();
        mark();
    }
    dim3 gb((w.NG + 16 * 4 - 1) / (16 * 4), w.NSL);
    tw_k_phase_b6<DT, GATED, TW5_CN, 4, TW6_DCAPB(GATED), PADQ, DIAG><<<gb, 512, smem_b6(GATED), st>>>(
        wd, M, K, N, w.NG, w.NC, w.desc, w.gv, w.hl, w.rexp, w.offsets, w.sizes, w.orow_idx,
        w.ovf_y, y, w.flag);
    CKL();
    mark();
    rows_launch<DT, GATED>(x, packed, wp, wu, wd, y, M, K, N, w.T, w.C, w.flag, 1, st);
    mark();
}

template <int DT, int GATED, int TT, int DIAG = 0> static void set_attrs6_t() {
    constexpr int PADQ = (DT == 1 && GATED) ? 16 : 8;
    CK(cudaFuncSetAttribute(tw_k_phase_a6<DT, TW5_CN, 8, TW6_DCAPA, PADQ, DIAG>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem_a6()));
    CK(cudaFuncSetAttribute(tw_k_phase_b6<DT, GATED, TW5_CN, 4, TW6_DCAPB(GATED), PADQ, DIAG>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem_b6(GATED)));
    CK(cudaFuncSetAttribute(tw_k_ovf_gu<DT, GATED, TT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem_gu5(GATED)));
    CK(cudaFuncSetAttribute(tw_k_ovf_down<DT, TT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem_down5(TT)));
}
template <int DT, int GATED> static void tiled6_run_g(Tiled5 &w, const tw_u16 *x, const tw_u32 *packed,
                                                      const tw_u16 *wg, const tw_u16 *wu,
                                                      const tw_u16 *wd, tw_u16 *y, cudaStream_t st,
                                                      cudaEvent_t *ev) {
    if (w.T == 256)
        tiled6_run_t<DT, GATED, 256>(w, x, packed, wg, wu, wd, y, st, ev);
    else if (w.T == 128)
        tiled6_run_t<DT, GATED, 128>(w, x, packed, wg, wu, wd, y, st, ev);
    else
        tiled6_run_t<DT, GATED, 64>(w, x, packed, wg, wu, wd, y, st, ev);
}
static void tiled6_run(Tiled5 &w, const tw_u16 *x, const tw_u32 *packed, const tw_u16 *wg,
                       const tw_u16 *wu, const tw_u16 *wd, tw_u16 *y, cudaStream_t st,
                       cudaEvent_t *ev = nullptr) {
    if (w.dt == 0 && w.gated)
        tiled6_run_g<0, 1>(w, x, packed, wg, wu, wd, y, st, ev);
    else if (w.dt == 0)
        tiled6_run_g<0, 0>(w, x, packed, wg, wu, wd, y, st, ev);
    else if (w.gated)
        tiled6_run_g<1, 1>(w, x, packed, wg, wu, wd, y, st, ev);
    else
        tiled6_run_g<1, 0>(w, x, packed, wg, wu, wd, y, st, ev);
}
// Timing-only variants of the v6 phases (bf16 gated, T = 256): DIAG 1 no mma, 2 no partial
// stores, 8 weights loaded once.
static void set_attrs6_diag() {
    set_attrs6_t<0, 1, 256, 1>();
    set_attrs6_t<0, 1, 256, 2>();
    set_attrs6_t<0, 1, 256, 8>();
}
static void tiled6_run_diag(int diag, Tiled5 &w, const tw_u16 *x, const tw_u32 *packed,
                            const tw_u16 *wg, const tw_u16 *wu, const tw_u16 *wd, tw_u16 *y,
                            cudaStream_t st, cudaEvent_t *ev) {
    if (diag == 1)
        tiled6_run_t<0, 1, 256, 1>(w, x, packed, wg, wu, wd, y, st, ev);
    else if (diag == 2)
        tiled6_run_t<0, 1, 256, 2>(w, x, packed, wg, wu, wd, y, st, ev);
    else
        tiled6_run_t<0, 1, 256, 8>(w, x, packed, wg, wu, wd, y, st, ev);
}
template <int DT> static void set_attrs6() {
    set_attrs6_t<DT, 1, 256>();
    set_attrs6_t<DT, 0, 256>();
    set_attrs6_t<DT, 1, 128>();
    set_attrs6_t<DT, 0, 128>();
    set_attrs6_t<DT, 1, 64>();
    set_attrs6_t<DT, 0, 64>();
}

// Checks the v5 lists against the packed buffer: each (chunk, group) list holds exactly the
// entries of its non-overflowing cells (token column, column, gate bits), pads have g = 0, token
// 0 and a row < 8, sizes are PADQ multiples; also the bank statistics of both phases (wavefronts
// of the 16-byte loads per ideal) and the overflow bookkeeping (every overflowing cell has a slot,
// every row with one has an overflow-row index).
static int check_lists5(const Tiled5 &w, const tw_u32 *packed_d, double *wa, double *wb) {
    const int M = w.M, NT = w.NT, W = w.W, S = W - 1, T = w.T, TPC = w.TPC, NC = w.NC, NG = w.NG;
    const size_t nl = (size_t)w.NL;
    std::vector<uint32_t> off(nl + 1), sz(nl), flag(4), cnt(NT + 1), ovf_base(NT + 1),
        ovf_slot((size_t)M * NT), ovf_rows((size_t)M * NT), orow_idx(M), orows(M);
    CK(cudaMemcpy(off.data(), w.offsets, 4 * (nl + 1), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sz.data(), w.sizes, 4 * nl, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(flag.data(), w.flag, 16, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ovf_base.data(), w.ovf_base, 4 * (NT + 1), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ovf_slot.data(), w.ovf_slot, 4ull * M * NT, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ovf_rows.data(), w.ovf_rows, 4ull * M * NT, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(orow_idx.data(), w.orow_idx, 4ull * M, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(orows.data(), w.orows, 4ull * M, cudaMemcpyDeviceToHost));
    if (flag[0]) {
        printf("   v5 list check skipped: flag %u\n", flag[0]);
        return 0;
    }
    const size_t total = off[nl];
    std::vector<uint32_t> desc(total + 1);
    std::vector<uint16_t> gv(total + 1);
    CK(cudaMemcpy(desc.data(), w.desc, 4 * total, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gv.data(), w.gv, 2 * total, cudaMemcpyDeviceToHost));
    std::vector<uint32_t> pk((size_t)M * (w.N / w.C));
    CK(cudaMemcpy(pk.data(), packed_d, 4 * pk.size(), cudaMemcpyDeviceToHost));
    int errs = 0;
    auto err = [&](const char *what, size_t a, size_t b) {
        if (errs++ < 10)
            printf("   v5 list check: %s (%zu, %zu)\n", what, a, b);
    };
    long wava = 0, idea = 0, wavb = 0, ideb = 0;
    size_t ovf_cells = 0, orw = 0;
    for (int m = 0; m < M; m++) {
        bool any = false;
        for (int t = 0; t < NT; t++) {
            if (pk[((size_t)m * NT + t) * W] > (uint32_t)S) {
                any = true;
                ovf_cells++;
                const uint32_t sl = ovf_slot[(size_t)m * NT + t];
                if (sl >= ovf_base[t + 1] - ovf_base[t] || ovf_rows[(size_t)t * M + sl] != (uint32_t)m)
                    err("overflow slot", m, t);
            }
        }
        if (any) {
            orw++;
            if (orow_idx[m] >= (uint32_t)M || orows[orow_idx[m]] != (uint32_t)m)
                err("overflow row index", m, orow_idx[m]);
        } else if (orow_idx[m] != TW_NONE) {
            err("row without overflow has an index", m, orow_idx[m]);
        }
    }
    if (ovf_cells != flag[2] || orw != flag[3])
        err("overflow counts (cells, rows)", flag[2], flag[3]);
    for (int c = 0; c < NC; c++)
        for (int G = 0; G < NG; G++) {
            const size_t li = (size_t)c * NG + G;
            if (off[li + 1] - off[li] != sz[li])
                err("offset/size mismatch", li, sz[li]);
            if (sz[li] % w.padq)
                err("size not a multiple of PADQ", li, sz[li]);
            std::vector<uint64_t> exp, got;
            for (int r = 0; r < 8; r++) {
                const long long m = 8LL * G + r;
                if (m >= M)
                    break;
                for (int t = c * TPC; t < std::min(NT, (c + 1) * TPC); t++) {
                    const uint32_t *cell = &pk[((size_t)m * NT + t) * W];
                    if (cell[0] <= (uint32_t)S)
                        for (uint32_t j = 0; j < cell[0]; j++)
                            exp.push_back(((uint64_t)r << 32) | cell[1 + j]);
                }
            }
            const uint32_t cs = (uint32_t)(c * TPC * T);
            const uint32_t o = off[li], n = sz[li];
            for (uint32_t p = o; p < o + n; p++) {
                const uint32_t row = desc[p] >> 7;
                if (((desc[p] >> 4) & 7u) != (row & 7u))
                    err("descriptor key bits", p, desc[p]);
                if (gv[p] == 0) {
                    if (row >= 8 || (desc[p] & 7u))
                        err("pad descriptor", p, desc[p]);
                    continue;
                }
                got.push_back(((uint64_t)(desc[p] & 7u) << 32) | ((uint32_t)gv[p] << 16) | (cs + row));
            }
            std::sort(exp.begin(), exp.end());
            std::sort(got.begin(), got.end());
            if (exp != got)
                err("entries differ (expected, got)", exp.size(), got.size());
            /* bank statistics */
            auto key = [&](uint32_t p) { return (desc[p] >> 4) & 7u; };
            for (uint32_t r0 = 0; r0 + 8 <= n; r0 += 16) {
                const bool half = r0 + 16 > n;
                const uint32_t b = o + r0;
                for (uint32_t i = 0; i < (half ? 4u : 8u); i++) {
                    const uint32_t same = ((key(b + 2 * i) ^ key(b + 2 * i + 1)) & 4u) == 0;
                    wava += 2 * (1 + same); /* two loads (pieces t4, t4 + 4) per row pair */
                    idea += 2;
                }
                for (uint32_t j = 0; j < (half ? 2u : 4u); j++) {
                    int cn[4] = {0, 0, 0, 0};
                    for (uint32_t q = 0; q < 4; q++)
                        cn[key(b + (half ? 2 * q + j : 4 * q + j)) & 3u]++;
                    wavb += *std::max_element(cn, cn + 4);
                    ideb += 1;
                }
            }
        }
    *wa = idea ? (double)wava / idea : 1.0;
    *wb = ideb ? (double)wavb / ideb : 1.0;
    return errs;
}

// ---------------------------------------------------------------------------------------------
// Host reference (fp64) for one row.
// ---------------------------------------------------------------------------------------------
struct HostW {
    int dt, gated, K, N, T, C;
    std::vector<uint16_t> wg, wu, wd;
};
static void ref_row(const HostW &H, const uint16_t *xrow, const uint32_t *prow,
                    std::vector<double> &y, int *active) {
    const int K = H.K, T = H.T, W = T / H.C, S = W - 1, NT = H.N / T;
    std::vector<double> xf(K);
    for (int k = 0; k < K; k++)
        xf[k] = h2f_host(H.dt, xrow[k]);
    y.assign(K, 0.0);
    int nact = 0;
    const std::vector<uint16_t> &wp = H.gated ? H.wg : H.wu;
    auto add = [&](int n, double g) {
        double h = g;
        if (H.gated) {
            double u = 0;
            const uint16_t *r = &H.wu[(size_t)n * K];
            for (int k = 0; k < K; k++)
                u += xf[k] * h2f_host(H.dt, r[k]);
            h = g * u;
        }
        const uint16_t *d = &H.wd[(size_t)n * K];
        for (int k = 0; k < K; k++)
            y[k] += h * h2f_host(H.dt, d[k]);
        nact++;
    };
    for (int t = 0; t < NT; t++) {
        const uint32_t cnt = prow[t * W];
        if (cnt <= (uint32_t)S) {
            for (uint32_t j = 0; j < cnt; j++) {
                const uint32_t w = prow[t * W + 1 + j];
                add((int)(w & 0xffffu), h2f_host(H.dt, (uint16_t)(w >> 16)));
            }
        } else {
            for (int j = 0; j < T; j++) {
                const int n = t * T + j;
                double acc = 0;
                const uint16_t *r = &wp[(size_t)n * K];
                for (int k = 0; k < K; k++)
                    acc += xf[k] * h2f_host(H.dt, r[k]);
                const float f = (float)acc;
                if (f > 0) {
                    const uint16_t gb = f2h_host(H.dt, f);
                    if (gb != 0)
                        add(n, h2f_host(H.dt, gb));
                }
            }
        }
    }
    *active = nact;
}

// Checks the pre-pass output (offsets, sizes, lists) against the packed buffer: every stored
// entry of a non-overflowing row-tile appears once in its (chunk, group) list with its token
// column; overflow tiles contribute exactly their recomputed non-zeros; pads have g = 0; all
// rows lie in the chunk. Also reports how many 8-entry blocks have 8 distinct residues and the
// mean of the largest residue multiplicity per block (the ldmatrix conflict degree).
static int check_lists(const Tiled &w, const tw_u32 *packed_d, double *distinct_frac, double *mult) {
    const int M = w.M, NT = w.NT, W = w.W, S = W - 1, T = w.T, TPC = w.TPC, NC = w.NC, NG = w.NG;
    const size_t nl = (size_t)NG * NC;
    std::vector<uint32_t> off(nl + 1), sz(nl), flag(4), ovf_base(NT + 1), ovf_slot((size_t)M * NT),
        ovf_nnz(w.ovf_cap);
    CK(cudaMemcpy(off.data(), w.offsets, 4 * (nl + 1), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sz.data(), w.sizes, 4 * nl, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(flag.data(), w.flag, 16, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ovf_base.data(), w.ovf_base, 4 * (NT + 1), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ovf_slot.data(), w.ovf_slot, 4ull * M * NT, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ovf_nnz.data(), w.ovf_nnz, 4 * w.ovf_cap, cudaMemcpyDeviceToHost));
    if (flag[0]) {
        printf("   list check skipped: flag %u\n", flag[0]);
        return 0;
    }
    const size_t total = off[nl];
    std::vector<uint16_t> desc(total + 1), gv(total + 1);
    CK(cudaMemcpy(desc.data(), w.desc, 2 * total, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gv.data(), w.gv, 2 * total, cudaMemcpyDeviceToHost));
    std::vector<uint32_t> pk((size_t)M * (w.N / w.C));
    CK(cudaMemcpy(pk.data(), packed_d, 4 * pk.size(), cudaMemcpyDeviceToHost));
    int errs = 0;
    size_t blocks = 0, distinct = 0, msum = 0;
    auto err = [&](const char *what, size_t a, size_t b) {
        if (errs++ < 10)
            printf("   list check: %s (%zu, %zu)\n", what, a, b);
    };
    for (int c = 0; c < NC; c++)
        for (int G = 0; G < NG; G++) {
            const size_t li = (size_t)c * NG + G;
            if (off[li + 1] - off[li] != sz[li])
                err("offset/size mismatch", li, sz[li]);
            if (sz[li] % 16)
                err("size not a multiple of 16", li, sz[li]);
            std::vector<uint64_t> exp, got;
            size_t ovf_expect = 0, ovf_got = 0;
            for (int r = 0; r < 8; r++) {
                const long long m = 8LL * G + r;
                if (m >= M)
                    break;
                for (int t = c * TPC; t < std::min(NT, (c + 1) * TPC); t++) {
                    const uint32_t *cell = &pk[((size_t)m * NT + t) * W];
                    if (cell[0] <= (uint32_t)S) {
                        for (uint32_t j = 0; j < cell[0]; j++)
                            exp.push_back(((uint64_t)r << 32) | cell[1 + j]);
                    } else {
                        ovf_expect += ovf_nnz[ovf_base[t] + ovf_slot[(size_t)m * NT + t]];
                    }
                }
            }
            const uint32_t cs = (uint32_t)(c * TPC * T), ce = (uint32_t)std::min(w.N, (c + 1) * TPC * T);
            for (uint32_t p = off[li]; p < off[li] + sz[li]; p++) {
                if (gv[p] == 0) { /* pad */
                    if (desc[p] != 7u)
                        err("pad descriptor", p, desc[p]);
                    continue;
                }
                const uint32_t n = cs + (desc[p] >> 3), col = desc[p] & 7u;
                if (n >= ce)
                    err("row outside chunk", p, n);
                if (8LL * G + col >= M)
                    err("bad column", p, col);
                if (gv[p]) {
                    const long long m = 8LL * G + col;
                    const int t = (int)(n / T);
                    const uint32_t *cell = &pk[((size_t)m * NT + t) * W];
                    if (cell[0] <= (uint32_t)S)
                        got.push_back(((uint64_t)col << 32) | ((uint32_t)gv[p] << 16) | n);
                    else
                        ovf_got++;
                }
            }
            std::sort(exp.begin(), exp.end());
            std::sort(got.begin(), got.end());
            if (exp != got)
                err("regular entries differ (expected, got)", exp.size(), got.size());
            if (ovf_expect != ovf_got)
                err("overflow entries differ (expected, got)", ovf_expect, ovf_got);
            for (uint32_t p = off[li]; p + 8 <= off[li] + sz[li]; p += 8) {
                /* phase A: aligned pairs must differ in row bit 0; phase B (ldmatrix): an aligned
                   8-block is one wavefront per piece only if its 8 residues differ */
                int cnt[8] = {0};
                for (int q = 0; q < 8; q++)
                    cnt[(desc[p + q] >> 3) & 7]++;
                int mx = 0;
                for (int q = 0; q < 8; q++)
                    mx = std::max(mx, cnt[q]);
                blocks++;
                for (int q = 0; q < 8; q += 2)
                    distinct += (desc[p + q] ^ desc[p + q + 1]) >> 3 & 1;
                msum += mx;
            }
        }
    *distinct_frac = blocks ? (double)distinct / (4.0 * blocks) : 1.0;
    *mult = blocks ? (double)msum / blocks : 1.0;
    return errs;
}

// ---------------------------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------------------------
static void *g_flush = nullptr;
static const size_t g_flush_bytes = 512ull << 20;
static int g_flush_i = 0;
static void flush_l2(cudaStream_t st) {
    CK(cudaMemsetAsync(g_flush, (g_flush_i++) & 0xff, g_flush_bytes, st));
}
template <typename F> static double time_med(F f, int reps, cudaStream_t st) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) {
        flush_l2(st);
        f();
    }
    std::vector<float> v;
    for (int i = 0; i < reps; i++) {
        flush_l2(st);
        CK(cudaEventRecord(a, st));
        f();
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        v.push_back(ms);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static std::vector<long long> parse_list(const char *s) {
    std::vector<long long> v;
    while (*s) {
        v.push_back(strtoll(s, (char **)&s, 10));
        if (*s == ',')
            s++;
    }
    return v;
}

struct Opts {
    std::vector<long long> Ms{4096, 16384, 65536}, nnzs{29, 56, 110, 280};
    std::vector<std::string> modes{"uniform", "skewed"};
    int K = 2048, N = 5632, T = 256, C = 8, dt = 0, gated = 1, reps = 20, check = 48;
    double heavy = 0.01, hscale = 3.0, zvar = 0.1;
    int rows = 1, fallback_test = 1, breakdown = 1, cn = 0, ver = 7; /* ver bits: 1 v4, 2 v5, 4 v6 */
    int diag = 0; /* time the DIAG variants of the v6 phases (bf16 gated T = 256 only) */
    double cap_factor = 1.15;
};

static double row_err(const uint16_t *yg, const std::vector<double> &ref, int dt, int K,
                      int *bad) {
    double num = 0, den = 0;
    for (int k = 0; k < K; k++) {
        const double v = h2f_host(dt, yg[k]);
        if (!std::isfinite(v))
            (*bad)++;
        num += (v - ref[k]) * (v - ref[k]);
        den += ref[k] * ref[k];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

int main(int argc, char **argv) {
    Opts o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto nx = [&]() { return i + 1 < argc ? argv[++i] : (char *)""; };
        if (a == "--M") o.Ms = parse_list(nx());
        else if (a == "--nnz") o.nnzs = parse_list(nx());
        else if (a == "--mode") {
            o.modes.clear();
            std::string s = nx();
            size_t p = 0;
            while (p != std::string::npos) {
                size_t q = s.find(',', p);
                o.modes.push_back(s.substr(p, q == std::string::npos ? q : q - p));
                p = q == std::string::npos ? q : q + 1;
            }
        } else if (a == "--K") o.K = atoi(nx());
        else if (a == "--N") o.N = atoi(nx());
        else if (a == "--T") o.T = atoi(nx());
        else if (a == "--C") o.C = atoi(nx());
        else if (a == "--dtype") o.dt = std::string(nx()) == "fp16";
        else if (a == "--gated") o.gated = atoi(nx());
        else if (a == "--reps") o.reps = atoi(nx());
        else if (a == "--check") o.check = atoi(nx());
        else if (a == "--heavy") o.heavy = atof(nx());
        else if (a == "--hscale") o.hscale = atof(nx());
        else if (a == "--rows") o.rows = atoi(nx());
        else if (a == "--fallback-test") o.fallback_test = atoi(nx());
        else if (a == "--breakdown") o.breakdown = atoi(nx());
        else if (a == "--cn") o.cn = atoi(nx());
        else if (a == "--ver") o.ver = atoi(nx());
        else if (a == "--diag") o.diag = atoi(nx());
        else { fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    g_sms = prop.multiProcessorCount;
    printf("device %s, %d SMs, L2 %d MB; dtype %s, %s, K=%d N=%d T=%d C=%d\n", prop.name, g_sms,
           prop.l2CacheSize >> 20, o.dt ? "fp16" : "bf16", o.gated ? "gated" : "non-gated", o.K,
           o.N, o.T, o.C);
    if (o.dt == 0)
        set_attrs5<0>();
    else
        set_attrs5<1>();
    if (o.dt == 0) {
        set_attrs6<0>();
        set_attrs6_diag();
    } else {
        set_attrs6<1>();
    }
    if (o.dt == 0)
        set_attrs<0>();
    else
        set_attrs<1>();
    CK(cudaMalloc(&g_flush, g_flush_bytes));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cublasHandle_t cb;
    CKB(cublasCreate(&cb));
    CKB(cublasSetStream(cb, st));
    const int K = o.K, N = o.N, T = o.T, C = o.C, dt = o.dt, W = T / C, NT = N / T;
    const cudaDataType ct = dt ? CUDA_R_16F : CUDA_R_16BF;
    const tw_u64 seed = 12345;
    const float wscale = 1.0f / sqrtf((float)(K - 1));

    struct Row {
        long long M, nnz;
        std::string mode;
        double nnz_act, ovf_cells, slots_per_row;
        double rows_ms, tiled_ms, dense_ms, gate_ms, up_ms, down_ms;
        double err_rows, err_tiled, err_x, err_fb;
        int det, bad;
        std::vector<double> br;
        /* v5 [0] and v6 [1] */
        double t5[2], err5[2], err5_x[2], err5_fb[2], slots5[2], wa5[2], wb5[2];
        int det5[2], bad5[2];
        std::vector<double> br5[2];
    };
    std::vector<Row> table;

    HostW H;
    H.dt = dt, H.gated = o.gated, H.K = K, H.N = N, H.T = T, H.C = C;
    const long long Mmax = *std::max_element(o.Ms.begin(), o.Ms.end());
    size_t acc = 0;
    tw_u16 *wg = dalloc<tw_u16>((size_t)N * K, acc), *wu = dalloc<tw_u16>((size_t)N * K, acc),
           *wd = dalloc<tw_u16>((size_t)N * K, acc);
    tw_u16 *x = dalloc<tw_u16>((size_t)Mmax * K, acc), *y = dalloc<tw_u16>((size_t)Mmax * K, acc),
           *y2 = dalloc<tw_u16>((size_t)Mmax * K, acc);
    tw_u16 *dg = dalloc<tw_u16>((size_t)Mmax * N, acc), *du = dalloc<tw_u16>((size_t)Mmax * N, acc),
           *dh = dalloc<tw_u16>((size_t)Mmax * N, acc);
    tw_u32 *packed = dalloc<tw_u32>((size_t)Mmax * (N / C), acc);
    unsigned long long *stats = dalloc<unsigned long long>(4, acc);
    tw_u32 *zero_flag = dalloc<tw_u32>(4, acc);
    CK(cudaMemset(zero_flag, 0, 16));
    const float one = 1.0f, zero = 0.0f;
    auto gemm_nt = [&](const tw_u16 *A /*[n x k] rows*/, const tw_u16 *B /*[m x k]*/, tw_u16 *Cm,
                       int m, int n, int k) { /* C[m x n] = B . A^T, row-major */
        CKB(cublasGemmEx(cb, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, A, ct, k, B, ct, k, &zero, Cm,
                         ct, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto gemm_nn = [&](const tw_u16 *A /*[k x n]*/, const tw_u16 *B /*[m x k]*/, tw_u16 *Cm, int m,
                       int n, int k) { /* C[m x n] = B . A */
        CKB(cublasGemmEx(cb, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, A, ct, n, B, ct, k, &zero, Cm,
                         ct, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };

    for (long long nnz : o.nnzs) {
        const double z = inv_norm(1.0 - (double)nnz / N);
        const tw_u64 wseed = seed + (tw_u64)nnz * 1000003ULL;
        if (dt == 0) {
            k_fill_w<0><<<g_sms * 16, 256>>>(wg, N, K, wseed + 1, wscale, (float)z, (float)o.zvar);
            k_fill_w<0><<<g_sms * 16, 256>>>(wu, N, K, wseed + 2, wscale, o.gated ? 0.0f : (float)z, (float)o.zvar);
            k_fill_w<0><<<g_sms * 16, 256>>>(wd, N, K, wseed + 3, wscale, 0.0f, 0.0f);
        } else {
            k_fill_w<1><<<g_sms * 16, 256>>>(wg, N, K, wseed + 1, wscale, (float)z, (float)o.zvar);
            k_fill_w<1><<<g_sms * 16, 256>>>(wu, N, K, wseed + 2, wscale, o.gated ? 0.0f : (float)z, (float)o.zvar);
            k_fill_w<1><<<g_sms * 16, 256>>>(wd, N, K, wseed + 3, wscale, 0.0f, 0.0f);
        }
        CKL();
        H.wg.resize((size_t)N * K), H.wu.resize((size_t)N * K), H.wd.resize((size_t)N * K);
        CK(cudaMemcpy(H.wg.data(), wg, 2ull * N * K, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(H.wu.data(), wu, 2ull * N * K, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(H.wd.data(), wd, 2ull * N * K, cudaMemcpyDeviceToHost));
        for (const std::string &mode : o.modes) {
            for (long long M : o.Ms) {
                Row R{};
                R.M = M, R.nnz = nnz, R.mode = mode;
                const float hf = mode == "skewed" ? (float)o.heavy : 0.0f;
                if (dt == 0)
                    k_fill_x<0><<<g_sms * 16, 256>>>(x, M, K, seed + 7 + (tw_u64)M, hf, (float)o.hscale);
                else
                    k_fill_x<1><<<g_sms * 16, 256>>>(x, M, K, seed + 7 + (tw_u64)M, hf, (float)o.hscale);
                CKL();
                const tw_u16 *wpk = o.gated ? wg : wu;
                gemm_nt(wpk, x, dg, (int)M, N, K);
                k_pack<<<g_sms * 16, 256>>>(dg, M, N, T, C, packed);
                CKL();
                CK(cudaMemset(stats, 0, 32));
                k_stats<<<g_sms * 4, 256>>>(packed, M, NT, W, stats);
                CKL();
                unsigned long long sh[4];
                CK(cudaMemcpy(sh, stats, 32, cudaMemcpyDeviceToHost));
                R.nnz_act = (double)sh[0] / M;
                R.ovf_cells = (double)sh[1];
                // capacity: every active pair plus <= 15 pads per (group, chunk) list
                const int NC = (NT + 512 / T - 1) / (512 / T), NG = (int)((M + 7) / 8);
                const size_t pair_cap =
                    (size_t)((double)sh[0] * o.cap_factor) + (size_t)NG * NC * 16 + 1024;
                const size_t ovf_cap = (size_t)(sh[1] * 1.2) + 256;
                const int cn = o.cn ? o.cn : (R.nnz_act < 40 ? 768 : 512);
                Tiled w{};
                tiled_alloc(w, (int)M, K, N, T, C, dt, o.gated, cn, pair_cap, ovf_cap);

                // sampled rows: random ones plus heavy ones
                std::vector<long long> samp;
                uint64_t rs = 88172645463325252ull ^ (uint64_t)M ^ ((uint64_t)nnz << 20);
                for (int i = 0; i < o.check; i++) {
                    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
                    samp.push_back((long long)(rs % (uint64_t)M));
                }
                samp.push_back(0);
                samp.push_back(M - 1);
                {
                    std::vector<uint32_t> c0((size_t)M * NT);
                    CK(cudaMemcpy2D(c0.data(), 4, packed, 4ull * W, 4, (size_t)M * NT,
                                    cudaMemcpyDeviceToHost));
                    int added = 0;
                    for (long long m = 0; m < M && added < 12; m++) {
                        uint32_t s = 0;
                        for (int t = 0; t < NT; t++)
                            s += c0[(size_t)m * NT + t] > (uint32_t)(W - 1);
                        if (s) {
                            samp.push_back(m);
                            added++;
                        }
                    }
                }
                std::vector<std::vector<double>> refs(samp.size());
                {
                    std::vector<uint16_t> xr(K);
                    std::vector<uint32_t> pr(N / C);
                    for (size_t i = 0; i < samp.size(); i++) {
                        CK(cudaMemcpy(xr.data(), x + samp[i] * K, 2ull * K, cudaMemcpyDeviceToHost));
                        CK(cudaMemcpy(pr.data(), packed + samp[i] * (N / C), 4ull * (N / C),
                                      cudaMemcpyDeviceToHost));
                        int na;
                        ref_row(H, xr.data(), pr.data(), refs[i], &na);
                    }
                }
                std::vector<uint16_t> hy((size_t)M * K), hy2((size_t)M * K);
                auto check_out = [&](const tw_u16 *yd, int *bad) {
                    CK(cudaMemcpy(hy.data(), yd, 2ull * M * K, cudaMemcpyDeviceToHost));
                    double e = 0;
                    for (size_t i = 0; i < samp.size(); i++)
                        e = std::max(e, row_err(&hy[(size_t)samp[i] * K], refs[i], dt, K, bad));
                    for (size_t i = 0; i < hy.size(); i++) {
                        const float v = h2f_host(dt, hy[i]);
                        if (!std::isfinite(v))
                            (*bad)++;
                    }
                    return e;
                };
                int bad = 0;
                // v0 rows
                if (o.rows) {
                    CK(cudaMemset(y2, 0xff, 2ull * M * K));
                    rows_run(dt, o.gated, x, packed, wg, wu, wd, y2, (int)M, K, N, T, C, zero_flag, st);
                    CK(cudaStreamSynchronize(st));
                    R.err_rows = check_out(y2, &bad);
                    hy2 = hy;
                }
                R.err_tiled = 0, R.det = 1, R.err_fb = -1;
                std::vector<uint16_t> hy4; /* v4's output: the full cross-check of v5 without v0 */
                if (o.ver & 1) {
                    // v1 tiled
                    CK(cudaMemset(y, 0xff, 2ull * M * K));
                    tiled_run(w, x, packed, wg, wu, wd, y, st);
                    CK(cudaStreamSynchronize(st));
                    tw_u32 fl[4];
                    CK(cudaMemcpy(fl, w.flag, 16, cudaMemcpyDeviceToHost));
                    R.slots_per_row = (double)fl[1] / M;
                    R.err_tiled = check_out(y, &bad);
                    if (M <= 4096) {
                        double dfrac = 0, mult = 0;
                        const int le = check_lists(w, packed, &dfrac, &mult);
                        printf("  lists (cn %d): %d errors; pairs with different bit 0 (A conflict-free) %.1f%%, "
                               "8-block max residue multiplicity (B) %.2f\n", w.cn, le, 100 * dfrac, mult);
                        bad += le;
                    }
                    if (fl[0])
                        printf("  note: tiled pipeline fell back (flag %u, slots %u cap %zu, ovf %u cap %zu)\n",
                               fl[0], fl[1], pair_cap, fl[2], ovf_cap);
                    std::vector<uint16_t> hyt = hy;
                    hy4 = hyt;
                    R.err_x = 0;
                    if (o.rows) {
                        for (long long m = 0; m < M; m++) {
                            double num = 0, den = 0;
                            for (int k = 0; k < K; k++) {
                                const double a = h2f_host(dt, hyt[(size_t)m * K + k]),
                                             b = h2f_host(dt, hy2[(size_t)m * K + k]);
                                num += (a - b) * (a - b);
                                den += b * b;
                            }
                            R.err_x = std::max(R.err_x, den > 0 ? sqrt(num / den) : sqrt(num));
                        }
                    }
                    // determinism: second run, bytes equal
                    CK(cudaMemset(y, 0xff, 2ull * M * K));
                    tiled_run(w, x, packed, wg, wu, wd, y, st);
                    CK(cudaStreamSynchronize(st));
                    CK(cudaMemcpy(hy.data(), y, 2ull * M * K, cudaMemcpyDeviceToHost));
                    R.det = memcmp(hy.data(), hyt.data(), 2ull * M * K) == 0;
                    // fallback path: a workspace too small for the pairs
                    R.err_fb = -1;
                    if (o.fallback_test && M <= 4096) {
                        Tiled s{};
                        tiled_alloc(s, (int)M, K, N, T, C, dt, o.gated, cn, 64, ovf_cap);
                        CK(cudaMemset(y, 0xff, 2ull * M * K));
                        tiled_run(s, x, packed, wg, wu, wd, y, st);
                        CK(cudaStreamSynchronize(st));
                        R.err_fb = check_out(y, &bad);
                        tiled_free(s);
                    }
                    R.bad = bad;
                    // timing
                    R.tiled_ms = time_med([&]() { tiled_run(w, x, packed, wg, wu, wd, y, st); }, o.reps, st);
                    if (o.rows)
                        R.rows_ms = time_med([&]() { rows_run(dt, o.gated, x, packed, wg, wu, wd, y2, (int)M, K, N, T, C, zero_flag, st); }, o.reps, st);
                    if (o.breakdown) {
                        cudaEvent_t ev[12];
                        for (auto &e : ev)
                            CK(cudaEventCreate(&e));
                        const int nev = o.gated ? 8 : 6;
                        std::vector<std::vector<float>> parts(nev - 1);
                        for (int r = 0; r < o.reps; r++) {
                            flush_l2(st);
                            tiled_run(w, x, packed, wg, wu, wd, y, st, ev);
                            CK(cudaEventSynchronize(ev[nev - 1]));
                            for (int i = 0; i + 1 < nev; i++) {
                                float ms;
                                CK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
                                parts[i].push_back(ms);
                            }
                        }
                        for (auto &p : parts) {
                            std::sort(p.begin(), p.end());
                            R.br.push_back(p[p.size() / 2]);
                        }
                        for (auto &e : ev)
                            CK(cudaEventDestroy(e));
                    }
                }
                // v5 (the library's kernels) and v6 (fused_kernels_v6.cuh)
                for (int vi = 0; vi < 2; vi++) {
                R.err5[vi] = 0, R.det5[vi] = 1, R.err5_fb[vi] = -1, R.bad5[vi] = 0, R.err5_x[vi] = -1;
                R.t5[vi] = 0, R.slots5[vi] = 0, R.wa5[vi] = R.wb5[vi] = 0;
                auto run5 = [&](Tiled5 &ww, cudaEvent_t *evv) {
                    if (vi == 0)
                        tiled5_run(ww, x, packed, wg, wu, wd, y, st, evv);
                    else
                        tiled6_run(ww, x, packed, wg, wu, wd, y, st, evv);
                };
                if (o.ver & (2 << vi)) {
                    const size_t pair_cap5 =
                        (size_t)((double)sh[0] * o.cap_factor) + (size_t)NG * NC * 8 + 1024;
                    const size_t ovf_cap5 = (size_t)(sh[1] * 1.2) + 256, orow_cap5 = (size_t)(sh[3] * 1.2) + 64;
                    Tiled5 w5{};
                    tiled5_alloc(w5, (int)M, K, N, T, C, dt, o.gated, pair_cap5, ovf_cap5, orow_cap5);
                    int bad5 = 0;
                    CK(cudaMemset(y, 0xff, 2ull * M * K));
                    run5(w5, nullptr);
                    CK(cudaStreamSynchronize(st));
                    tw_u32 fl5[4];
                    CK(cudaMemcpy(fl5, w5.flag, 16, cudaMemcpyDeviceToHost));
                    R.slots5[vi] = (double)fl5[1] / M;
                    R.err5[vi] = check_out(y, &bad5);
                    R.wa5[vi] = R.wb5[vi] = 0;
                    if (M <= 4096) {
                        const int le = check_lists5(w5, packed, &R.wa5[vi], &R.wb5[vi]);
                        printf("  v%d lists: %d errors; 16-byte-load wavefronts per ideal: phase A %.3f, "
                               "phase B %.3f; overflowing cells %u rows %u\n",
                               5 + vi, le, R.wa5[vi], R.wb5[vi], fl5[2], fl5[3]);
                        bad5 += le;
                    }
                    if (fl5[0])
                        printf("  note: v%d fell back (flag %u, slots %u cap %zu, ovf %u cap %zu, rows %u cap %zu)\n",
                               5 + vi, fl5[0], fl5[1], pair_cap5, fl5[2], ovf_cap5, fl5[3], orow_cap5);
                    std::vector<uint16_t> hy5 = hy;
                    const std::vector<uint16_t> *cross = o.rows ? &hy2 : (o.ver & 1) ? &hy4 : nullptr;
                    if (cross) {
                        R.err5_x[vi] = 0;
                        for (long long m = 0; m < M; m++) {
                            double num = 0, den = 0;
                            for (int k = 0; k < K; k++) {
                                const double a = h2f_host(dt, hy5[(size_t)m * K + k]),
                                             b = h2f_host(dt, (*cross)[(size_t)m * K + k]);
                                num += (a - b) * (a - b);
                                den += b * b;
                            }
                            R.err5_x[vi] = std::max(R.err5_x[vi], den > 0 ? sqrt(num / den) : sqrt(num));
                        }
                    }
                    CK(cudaMemset(y, 0xff, 2ull * M * K));
                    run5(w5, nullptr);
                    CK(cudaStreamSynchronize(st));
                    CK(cudaMemcpy(hy.data(), y, 2ull * M * K, cudaMemcpyDeviceToHost));
                    R.det5[vi] = memcmp(hy.data(), hy5.data(), 2ull * M * K) == 0;
                    if (o.fallback_test && M <= 4096) {
                        /* pair slots too small, then (if any) overflow buffer too small */
                        for (int which = 0; which < 2; which++) {
                            if (which == 1 && sh[1] == 0)
                                break;
                            Tiled5 s5{};
                            tiled5_alloc(s5, (int)M, K, N, T, C, dt, o.gated, which ? pair_cap5 : 64,
                                         which ? 1 : ovf_cap5, which ? 1 : orow_cap5);
                            CK(cudaMemset(y, 0xff, 2ull * M * K));
                            run5(s5, nullptr);
                            CK(cudaStreamSynchronize(st));
                            tw_u32 f2[4];
                            CK(cudaMemcpy(f2, s5.flag, 16, cudaMemcpyDeviceToHost));
                            if (f2[0] == 0) {
                                printf("  v%d fallback test %d: no fallback flagged\n", 5 + vi, which);
                                bad5++;
                            }
                            R.err5_fb[vi] = std::max(R.err5_fb[vi], check_out(y, &bad5));
                            tiled5_free(s5);
                        }
                    }
                    R.bad5[vi] = bad5;
                    R.t5[vi] = time_med([&]() { run5(w5, nullptr); }, o.reps, st);
                    if (o.breakdown) {
                        cudaEvent_t ev[12];
                        for (auto &e : ev)
                            CK(cudaEventCreate(&e));
                        const int nev = o.gated ? 8 : 6;
                        std::vector<std::vector<float>> parts(nev - 1);
                        for (int r = 0; r < o.reps; r++) {
                            flush_l2(st);
                            run5(w5, ev);
                            CK(cudaEventSynchronize(ev[nev - 1]));
                            for (int i = 0; i + 1 < nev; i++) {
                                float ms;
                                CK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
                                parts[i].push_back(ms);
                            }
                        }
                        for (auto &p : parts) {
                            std::sort(p.begin(), p.end());
                            R.br5[vi].push_back(p[p.size() / 2]);
                        }
                        for (auto &e : ev)
                            CK(cudaEventDestroy(e));
                    }
                    if (vi == 1 && o.diag && dt == 0 && o.gated && T == 256) {
                        cudaEvent_t ev[12];
                        for (auto &e : ev)
                            CK(cudaEventCreate(&e));
                        for (int d : {1, 2, 8}) {
                            std::vector<float> pa, pb;
                            for (int r = 0; r < o.reps; r++) {
                                flush_l2(st);
                                tiled6_run_diag(d, w5, x, packed, wg, wu, wd, y, st, ev);
                                CK(cudaEventSynchronize(ev[7]));
                                float ms;
                                CK(cudaEventElapsedTime(&ms, ev[3], ev[4]));
                                pa.push_back(ms);
                                CK(cudaEventElapsedTime(&ms, ev[5], ev[6]));
                                pb.push_back(ms);
                            }
                            std::sort(pa.begin(), pa.end());
                            std::sort(pb.begin(), pb.end());
                            printf("   v6 diag %d (%s): phaseA %.4f phaseB %.4f ms\n", d,
                                   d == 1 ? "no mma" : d == 2 ? "no partial stores" : "weights once",
                                   pa[pa.size() / 2], pb[pb.size() / 2]);
                        }
                        for (auto &e : ev)
                            CK(cudaEventDestroy(e));
                    }
                    tiled5_free(w5);
                }
                }
                // dense cuBLAS FFN: gate GEMM, up GEMM, relu(g) * u, down GEMM
                auto dense = [&]() {
                    if (o.gated) {
                        gemm_nt(wg, x, dg, (int)M, N, K);
                        gemm_nt(wu, x, du, (int)M, N, K);
                        if (dt == 0)
                            k_relu_mul<0><<<g_sms * 16, 256, 0, st>>>(dg, du, dh, M * N);
                        else
                            k_relu_mul<1><<<g_sms * 16, 256, 0, st>>>(dg, du, dh, M * N);
                    } else {
                        gemm_nt(wu, x, du, (int)M, N, K);
                        if (dt == 0)
                            k_relu<0><<<g_sms * 16, 256, 0, st>>>(du, dh, M * N);
                        else
                            k_relu<1><<<g_sms * 16, 256, 0, st>>>(du, dh, M * N);
                    }
                    gemm_nn(wd, dh, y2, (int)M, K, N);
                };
                R.dense_ms = time_med(dense, o.reps, st);
                R.gate_ms = time_med([&]() { gemm_nt(wpk, x, dg, (int)M, N, K); }, o.reps, st);
                R.down_ms = time_med([&]() { gemm_nn(wd, dh, y2, (int)M, K, N); }, o.reps, st);
                CK(cudaStreamSynchronize(st));
                CKL();
                printf("M=%lld nnz=%lld %s cn=%d: nnz/row %.1f ovf_cells %.0f slots/row %.1f | rows %.3f "
                       "ms tiled %.3f ms | dense %.3f gate %.3f down %.3f | ratio %.2fx | err rows "
                       "%.2e tiled %.2e x %.2e fb %.2e det %d bad %d | ws %.0f MB\n",
                       M, nnz, mode.c_str(), w.cn, R.nnz_act, R.ovf_cells, R.slots_per_row, R.rows_ms,
                       R.tiled_ms, R.dense_ms, R.gate_ms, R.down_ms,
                       R.dense_ms / (R.gate_ms + R.tiled_ms), R.err_rows, R.err_tiled, R.err_x,
                       R.err_fb, R.det, R.bad, w.bytes / 1e6);
                if (!R.br.empty()) {
                    printf("   breakdown ms:");
                    const char *nm_g[] = {"detect+scan", "ovf_gate", "sizes+scan+build", "phaseA", "reduce", "phaseB", "fallback"};
                    const char *nm_n[] = {"detect+scan", "ovf_gate", "sizes+scan+build", "phaseB", "fallback"};
                    for (size_t i = 0; i < R.br.size(); i++)
                        printf(" %s %.4f", o.gated ? nm_g[i] : nm_n[i], R.br[i]);
                    printf("\n");
                }
                for (int vi = 0; vi < 2; vi++) {
                    if (!(o.ver & (2 << vi)))
                        continue;
                    printf("   v%d: slots/row %.1f | fused %.3f ms | ratio %.2fx | err %.2e x %.2e fb %.2e det %d bad %d\n",
                           5 + vi, R.slots5[vi], R.t5[vi], R.dense_ms / (R.gate_ms + R.t5[vi]), R.err5[vi],
                           R.err5_x[vi], R.err5_fb[vi], R.det5[vi], R.bad5[vi]);
                    if (!R.br5[vi].empty()) {
                        printf("   v%d breakdown ms:", 5 + vi);
                        const char *nm_g[] = {"prep+scan", "build", "ovf_gu+down", "phaseA", "reduce", "phaseB", "fallback"};
                        const char *nm_n[] = {"prep+scan", "build", "ovf_gu+down", "phaseB", "fallback"};
                        for (size_t i = 0; i < R.br5[vi].size(); i++)
                            printf(" %s %.4f", o.gated ? nm_g[i] : nm_n[i], R.br5[vi][i]);
                        printf("\n");
                    }
                }
                fflush(stdout);
                tiled_free(w);
                table.push_back(R);
            }
        }
    }
    const double tol = dt ? 1e-3 : 5e-3;
    auto ok5 = [&](const Row &R, int vi) {
        return R.err5[vi] < tol && R.bad5[vi] == 0 && R.det5[vi] &&
               (R.err5_fb[vi] < 0 || R.err5_fb[vi] < tol) && R.err5_x[vi] < 2 * tol;
    };
    printf("\n| M | nnz | mode | nnz/row | v4 ms | v5 ms | v6 ms | dense ms | gate ms | ratio v4 | ratio v5 | ratio v6 | err v4 | err v5 | err v6 | det | ok |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int fails = 0;
    for (auto &R : table) {
        const bool ok = R.err_tiled < tol && (R.err_rows < tol || !o.rows) && R.bad == 0 && R.det &&
                        (R.err_fb < 0 || R.err_fb < tol) && ok5(R, 0) && ok5(R, 1);
        fails += !ok;
        printf("| %lld | %lld | %s | %.1f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2fx | %.2fx | %.2fx | %.1e | %.1e | %.1e | %d%d%d | %s |\n",
               R.M, R.nnz, R.mode.c_str(), R.nnz_act, R.tiled_ms, R.t5[0], R.t5[1], R.dense_ms,
               R.gate_ms, R.dense_ms / (R.gate_ms + R.tiled_ms), R.dense_ms / (R.gate_ms + R.t5[0]),
               R.dense_ms / (R.gate_ms + R.t5[1]), R.err_tiled, R.err5[0], R.err5[1], R.det,
               R.det5[0], R.det5[1], ok ? "ok" : "FAIL");
    }
    printf("tolerance (row-relative L2 vs fp64 reference): %.0e; %d failing rows\n", tol, fails);
    for (int vi = 0; vi < 2; vi++) {
        if (!(o.ver & (2 << vi)))
            continue;
        int bad5 = 0;
        for (auto &R : table)
            bad5 += !ok5(R, vi);
        printf("v%d verdict: %s (%d of %zu configurations failing)\n", 5 + vi, bad5 ? "FAIL" : "ok",
               bad5, table.size());
    }
    return fails ? 1 : 0;
}
