-- train_ffn_ovf.lua — module of train_ffn.cu.lua (MMA builds): overflowing row-tiles on tensor
-- cores: the overflow list, gate values of listed rows (recount / spill modes) and, T <= 512,
-- the tiled U / dT of those row-tiles (twell_train_ovf_udt).
return function(D)
    local S, NT, OVF_UDT = D.S, D.NT, D.OVF_UDT
    local OVF_BM, OVF_WM, OVF_WN = D.OVF_BM, D.OVF_WM, D.OVF_WN
    local MMA_TY = S.dtype == "bf16" and "bf16" or "f16"
    cuda [==[
/* ---- overflowing row-tiles on tensor cores ---- */

extern "C" __global__ void __launch_bounds__(256)
twell_train_ovf_list(tw_u32 *__restrict__ packed, long long M, tw_u32 *__restrict__ cnt,
                     tw_u32 *__restrict__ list, tw_u32 thr, tw_u32 *__restrict__ flag,
                     tw_u64 *__restrict__ htot) {
    const int lane = (int)(threadIdx.x & 31u);
    const long long nw = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long m = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; m < M; m += nw) {
        tw_u32 *row = packed + m * ${S.NW};
        if (flag) { /* the heavy-row route (train_heavy.cu.lua's twell_train_heavy_flag) */
            const tw_u32 c = tw_row_active(row);
            /* every lane has read its counts before the shuffles: the writes race with none */
            if (c > thr) {
                if (lane == 0) {
                    flag[m] = c;
                    atomicAdd(htot, 1ull);
                    atomicAdd(htot + 1, (tw_u64)c);
                }
                for (int w = lane; w < ${S.NW}; w += 32)
                    row[w] = 0u;
                continue;
            }
            if (lane == 0)
                flag[m] = 0u;
        }
        for (int t = lane; t < ${NT}; t += 32)
            if (row[t * ${S.W}] > ${S.SLOTS}u)
                list[(long long)t * M + atomicAdd(cnt + t, 1u)] = (tw_u32)m;
    }
}

__device__ __forceinline__ void tw_mma16816(float (&d)[4], tw_u32 a0, tw_u32 a1, tw_u32 a2,
                                            tw_u32 a3, tw_u32 b0, tw_u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.${MMA_TY}.${MMA_TY}.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Gate values of listed rows i0 .. i0+OVF_BM-1 of tile t into vals[OVF_BM][T] (rows past n:
 * garbage).
 * Warp (wm, wn): rows 16·wm .. +15, columns 64·wn .. +63 of the tile. Fragments come straight
 * from global memory, 16 bytes per row per k block of 32: thread (g = lane/4, q = lane%4) loads
 * k0+8q .. k0+8q+7 of its rows; the two m16n8k16 steps of the block take the halves (.x .y and
 * .z .w) as the logical k pairs {2q, 2q+1} and {2q+8, 2q+9}. A and B use the same permutation of
 * k, so each output is Σ_k x[m][k]·Wg[n][k] over all k (tensor-core order, fp32 accumulate). */
__device__ __forceinline__ void tw_ovf_tile_acc(const tw_u16 *__restrict__ x,
                                                const tw_u16 *__restrict__ wg,
                                                const tw_u32 *__restrict__ rows, tw_u32 n, int t,
                                                float (&acc)[8][4]) {
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    const int wm = warp / ${OVF_WN}, wn = warp % ${OVF_WN}, g = lane >> 2, q = lane & 3;
    const tw_u32 r0 = (tw_u32)(16 * wm + g), r1 = r0 + 8u;
    const long long m0 = rows[r0 < n ? r0 : 0u], m1 = rows[r1 < n ? r1 : 0u];
    const uint4 *xa = (const uint4 *)(x + m0 * ${S.K}) + q;
    const uint4 *xb = (const uint4 *)(x + m1 * ${S.K}) + q;
    const uint4 *wb = (const uint4 *)(wg + ((long long)t * ${S.T} + 64 * wn + g) * ${S.K}) + q;
#pragma unroll
    for (int j = 0; j < 8; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    uint4 a0 = xa[0], a1 = xb[0], b[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        b[j] = wb[j * ${S.K}]; /* row + 8j: 8·K elements = K uint4 further */
    for (int kb = 0; kb < ${S.K // 32}; kb++) {
        /* next block's fragments first: their loads overlap this block's mma */
        const int kn = kb + 1 < ${S.K // 32} ? kb + 1 : kb;
        const uint4 na0 = xa[4 * kn], na1 = xb[4 * kn];
        uint4 nb[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            nb[j] = wb[j * ${S.K} + 4 * kn];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            tw_mma16816(acc[j], a0.x, a1.x, a0.y, a1.y, b[j].x, b[j].y);
            tw_mma16816(acc[j], a0.z, a1.z, a0.w, a1.w, b[j].z, b[j].w);
        }
        a0 = na0, a1 = na1;
#pragma unroll
        for (int j = 0; j < 8; j++)
            b[j] = nb[j];
    }
}

__device__ __forceinline__ void tw_ovf_tile_vals(const tw_u16 *__restrict__ x,
                                                 const tw_u16 *__restrict__ wg,
                                                 const tw_u32 *__restrict__ rows, tw_u32 n, int t,
                                                 tw_u16 *vals) {
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    const int wm = warp / ${OVF_WN}, wn = warp % ${OVF_WN}, g = lane >> 2, q = lane & 3;
    const tw_u32 r0 = (tw_u32)(16 * wm + g), r1 = r0 + 8u;
    float acc[8][4];
    tw_ovf_tile_acc(x, wg, rows, n, t, acc);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int c = 64 * wn + 8 * j + 2 * q;
        vals[r0 * ${S.T} + c] = tw_act(acc[j][0]);
        vals[r0 * ${S.T} + c + 1] = tw_act(acc[j][1]);
        vals[r1 * ${S.T} + c] = tw_act(acc[j][2]);
        vals[r1 * ${S.T} + c + 1] = tw_act(acc[j][3]);
    }
}

/* mode 0: count + slots of each listed row-tile (the recount); mode 1: its spill words. */
extern "C" __global__ void __launch_bounds__(${32 * OVF_WM * OVF_WN})
twell_train_ovf_tiles(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wg,
                      tw_u32 *__restrict__ packed, const tw_u32 *__restrict__ cnt,
                      const tw_u32 *__restrict__ list, const tw_u64 *__restrict__ spill_off,
                      tw_u32 *__restrict__ spill, long long M, int mode) {
    __shared__ tw_u16 vals[${OVF_BM * S.T}];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    const int t = (int)blockIdx.y;
    const tw_u32 nt = cnt[t];
    const tw_u32 *lt = list + (long long)t * M;
    const tw_u32 below = (1u << lane) - 1u;
    for (tw_u32 i0 = blockIdx.x * ${OVF_BM}u; i0 < nt; i0 += gridDim.x * ${OVF_BM}u) {
        const tw_u32 n = nt - i0 < ${OVF_BM}u ? nt - i0 : ${OVF_BM}u;
        tw_ovf_tile_vals(x, wg, lt + i0, n, t, vals);
        __syncthreads();
        for (tw_u32 ri = (tw_u32)warp; ri < n; ri += ${OVF_WM * OVF_WN}u) {
            const long long m = lt[i0 + ri];
            const tw_u16 *v = vals + ri * ${S.T};
            if (mode == 0) {
                tw_pack_row_tile_warp(v, packed + m * ${S.NW} + t * ${S.W},
                                      (unsigned int)(t * ${S.T}));
                continue;
            }
            const long long r = m * ${NT} + t;
            const tw_u64 base = spill_off[r], have = spill_off[r + 1] - base;
            tw_u32 count = 0;
            for (int c = 0; c < ${S.T}; c += 32) {
                const tw_u16 a = v[c + lane];
                const bool on = tw_active(a);
                const tw_u32 bal = __ballot_sync(TW_FULL, on);
                const tw_u32 pos = count + (tw_u32)__popc(bal & below);
                if (on && pos >= ${S.SLOTS}u && pos - ${S.SLOTS}u < have)
                    spill[base + pos - ${S.SLOTS}u] =
                        ((tw_u32)a << 16) | (tw_u32)(t * ${S.T} + c + lane);
                count += (tw_u32)__popc(bal);
            }
        }
        __syncthreads();
    }
}
]==]
if OVF_UDT then
    cuda [==[

/* Tiled U / dT of overflowing row-tiles: a·w_n (a = x, w = Wu; or dy, Wd) for every column of
 * 16 listed rows of tile t at a time on tensor cores (tw_ovf_tile_acc, fp32 accumulate), then
 * each row's active entries (its slot words, then its spill words) take their column's value:
 * out_ell at the slot word, out_spill at the spill index. Grid and block as ovf_tiles. */
extern "C" __global__ void __launch_bounds__(${32 * OVF_WM * OVF_WN})
twell_train_ovf_udt(const tw_u16 *__restrict__ a, const tw_u16 *__restrict__ w,
                    const tw_u32 *__restrict__ packed, const tw_u32 *__restrict__ cnt,
                    const tw_u32 *__restrict__ list, const tw_u64 *__restrict__ spill_off,
                    const tw_u32 *__restrict__ spill, float *__restrict__ out_ell,
                    float *__restrict__ out_spill, long long M) {
    __shared__ float vf[${OVF_BM * S.T}];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    const int t = (int)blockIdx.y;
    const tw_u32 nt = cnt[t];
    const tw_u32 *lt = list + (long long)t * M;
    const int wm = warp / ${OVF_WN}, wn = warp % ${OVF_WN}, g = lane >> 2, q = lane & 3;
    const tw_u32 r0 = (tw_u32)(16 * wm + g), r1 = r0 + 8u;
    for (tw_u32 i0 = blockIdx.x * ${OVF_BM}u; i0 < nt; i0 += gridDim.x * ${OVF_BM}u) {
        const tw_u32 n = nt - i0 < ${OVF_BM}u ? nt - i0 : ${OVF_BM}u;
        float acc[8][4];
        tw_ovf_tile_acc(a, w, lt + i0, n, t, acc);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int c = 64 * wn + 8 * j + 2 * q;
            vf[r0 * ${S.T} + c] = acc[j][0];
            vf[r0 * ${S.T} + c + 1] = acc[j][1];
            vf[r1 * ${S.T} + c] = acc[j][2];
            vf[r1 * ${S.T} + c + 1] = acc[j][3];
        }
        __syncthreads();
        for (tw_u32 ri = (tw_u32)warp; ri < n; ri += ${OVF_WM * OVF_WN}u) {
            const long long m = lt[i0 + ri];
            const float *v = vf + ri * ${S.T};
            const long long wb = m * ${S.NW} + t * ${S.W};
            for (int j = lane; j < ${S.SLOTS}; j += 32) {
                const tw_u32 col = (packed[wb + 1 + j] & 0xffffu) - (tw_u32)(t * ${S.T});
                if (col < ${S.T}u)
                    out_ell[wb + 1 + j] = v[col];
            }
            const long long r = m * ${NT} + t;
            const tw_u64 base = spill_off[r], have = spill_off[r + 1] - base;
            for (tw_u64 j = (tw_u64)lane; j < have; j += 32ull) {
                const tw_u32 col = (spill[base + j] & 0xffffu) - (tw_u32)(t * ${S.T});
                if (col < ${S.T}u)
                    out_spill[base + j] = v[col];
            }
        }
        __syncthreads();
    }
}
]==]
end
end
