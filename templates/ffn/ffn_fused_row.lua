-- ffn_fused_row.lua — module of ffn_fused.cu.lua: the row kernel (tw_k_rows, wrapped by
-- twell_ffn_rows): one warp per row, exact; the fallback when the workspace is too small and the
-- simple baseline (twell_ffn_rows(..., 0)).
-- Returns a function of D (the template's constants; this part reads none of them).
return function(D)
    cuda [==[
// ---------------------------------------------------------------------------------------------
// Row kernel (the exact fallback and simple baseline): one warp per row. Lane l holds x[k] for k = 256 i + 8 l .. +8 (NI = ceil(K/256) pieces).
// ---------------------------------------------------------------------------------------------
template <int DT, int NI>
__device__ __forceinline__ void tw_dot2(const uint4 (&xr)[NI], const tw_u16 *w0, const tw_u16 *w1,
                                        int K, int lane, float &s0, float &s1) {
    s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int k = 256 * i + 8 * lane;
        if (k < K) {
            const uint4 a = *(const uint4 *)(w0 + k), b = *(const uint4 *)(w1 + k);
            const tw_u32 xa[4] = {xr[i].x, xr[i].y, xr[i].z, xr[i].w};
            const tw_u32 aa[4] = {a.x, a.y, a.z, a.w}, bb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float xl, xh, al, ah, bl, bh;
                tw_h2f2<DT>(xa[q], xl, xh);
                tw_h2f2<DT>(aa[q], al, ah);
                tw_h2f2<DT>(bb[q], bl, bh);
                s0 = fmaf(xl, al, s0);
                s0 = fmaf(xh, ah, s0);
                s1 = fmaf(xl, bl, s1);
                s1 = fmaf(xh, bh, s1);
            }
        }
    }
    s0 = tw_warp_sum(s0);
    s1 = tw_warp_sum(s1);
}

template <int DT, int GATED, int NI>
__device__ __forceinline__ void tw_rows_entry2(tw_u32 w0, tw_u32 w1, const uint4 (&xr)[NI],
                                               const tw_u16 *__restrict__ wu,
                                               const tw_u16 *__restrict__ wd, int K, int lane,
                                               float (&ya)[NI][8]) {
    const tw_u32 n0 = w0 & 0xffffu, n1 = w1 & 0xffffu;
    float h0 = tw_h2f<DT>(w0 >> 16), h1 = tw_h2f<DT>(w1 >> 16);
    if constexpr (GATED) {
        float u0, u1;
        tw_dot2<DT, NI>(xr, wu + (long long)n0 * K, wu + (long long)n1 * K, K, lane, u0, u1);
        h0 *= u0;
        h1 *= u1;
    }
    const tw_u16 *d0 = wd + (long long)n0 * K, *d1 = wd + (long long)n1 * K;
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int k = 256 * i + 8 * lane;
        if (k < K) {
            const uint4 a = *(const uint4 *)(d0 + k), b = *(const uint4 *)(d1 + k);
            const tw_u32 aa[4] = {a.x, a.y, a.z, a.w}, bb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float al, ah, bl, bh;
                tw_h2f2<DT>(aa[q], al, ah);
                tw_h2f2<DT>(bb[q], bl, bh);
                ya[i][2 * q] = fmaf(h1, bl, fmaf(h0, al, ya[i][2 * q]));
                ya[i][2 * q + 1] = fmaf(h1, bh, fmaf(h0, ah, ya[i][2 * q + 1]));
            }
        }
    }
}

// wp = the packing weight (Wg gated, Wu non-gated) for overflowing row-tiles.
// fallback_only: run only when flag[0] != 0 (the tiled path could not hold the pairs).
template <int DT, int GATED, int NI>
TW_KERNEL((256))
    tw_k_rows(const tw_u16 *__restrict__ x, const tw_u32 *__restrict__ packed,
              const tw_u16 *__restrict__ wp, const tw_u16 *__restrict__ wu,
              const tw_u16 *__restrict__ wd, tw_u16 *__restrict__ y, int M, int K, int N, int T,
              int C, const tw_u32 *__restrict__ flag, int fallback_only) {
    if (fallback_only && flag[0] == 0)
        return;
    const int lane = threadIdx.x & 31;
    const int W = T / C, NT = N / T;
    const tw_u32 S = (tw_u32)(W - 1);
    const long long RW = N / C;
    const long long nw = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long m = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5; m < M; m += nw) {
        uint4 xr[NI];
        float ya[NI][8];
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int k = 256 * i + 8 * lane;
            xr[i] = k < K ? *(const uint4 *)(x + m * K + k) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int q = 0; q < 8; q++)
                ya[i][q] = 0.0f;
        }
        const tw_u32 *prow = packed + m * RW;
        for (int t = 0; t < NT; t++) {
            const tw_u32 cnt = prow[t * W];
            if (cnt <= S) {
                for (tw_u32 j0 = 0; j0 < cnt; j0 += 32) {
                    tw_u32 word = j0 + lane < cnt ? prow[t * W + 1 + j0 + lane] : 0u;
                    if ((word & 0xffffu) >= (tw_u32)N)
                        word = 0u; /* malformed input: no weight row past N is read */
                    const int nb = (int)min(32u, cnt - j0);
                    for (int q = 0; q < nb; q += 2) {
                        const tw_u32 w0 = __shfl_sync(TW_FULL, word, q);
                        tw_u32 w1 = __shfl_sync(TW_FULL, word, (q + 1) & 31);
                        if (q + 1 >= nb)
                            w1 = w0 & 0xffffu; /* g = 0: a second slot that adds nothing */
                        tw_rows_entry2<DT, GATED, NI>(w0, w1, xr, wu, wd, K, lane, ya);
                    }
                }
            } else {
                for (int j = 0; j < T; j += 2) {
                    const tw_u32 n0 = (tw_u32)(t * T + j), n1 = n0 + 1;
                    float g0, g1;
                    tw_dot2<DT, NI>(xr, wp + (long long)n0 * K, wp + (long long)n1 * K, K, lane,
                                    g0, g1);
                    const tw_u32 b0 = tw_relu_round<DT>(g0), b1 = tw_relu_round<DT>(g1);
                    if (b0 | b1)
                        tw_rows_entry2<DT, GATED, NI>((b0 << 16) | n0, (b1 << 16) | n1, xr, wu,
                                                      wd, K, lane, ya);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int k = 256 * i + 8 * lane;
            if (k < K) {
                uint4 o;
                o.x = tw_pack2<DT>(ya[i][0], ya[i][1]);
                o.y = tw_pack2<DT>(ya[i][2], ya[i][3]);
                o.z = tw_pack2<DT>(ya[i][4], ya[i][5]);
                o.w = tw_pack2<DT>(ya[i][6], ya[i][7]);
                *(uint4 *)(y + m * K + k) = o;
            }
        }
    }
}

]==]
end
