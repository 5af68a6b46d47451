-- ffn_fused_ovf.lua — module of ffn_fused.cu.lua: the exact path of overflowing row-tiles on
-- tensor cores: tw_k_ovf_gu (g and u, stored as h hi | lo) and tw_k_ovf_down (h . Wd into ovf_y).
-- Returns a function of D (the template's constants; this part reads none of them).
return function(D)
    cuda [==[
// Overflow path 1: for the overflowing cells of tile t, h = g (non-gated) or g * u (gated) over
// the tile's TT columns, g = round(relu(x . wp_n)) exactly as packing rounds it, u = x . wu_n in
// fp32; stored as 16-bit hi and lo halves (ovf_hh[cell][0..TT) hi, [TT..2TT) lo; fp16: scaled by
// 2^(141 - ex) per 64-column block, ex in ovf_ex[cell][TT/64]). CTA item = (tile, 64 rows, 64
// columns); 4 warps = 2 row halves x 2 column halves, each 32 rows x 32 columns of g (and u): per
// k16 step 2 A + 2 (4 gated) B ldmatrix feed 8 (16) mma. x rows and both weight blocks stream
// through shared memory in 64-column k-steps (cp.async ring of TW_GU_STAGES, XOR swizzle).
#define TW_GU_STAGES 3
template <int DT, int GATED, int TT>
TW_KERNEL((128))
    tw_k_ovf_gu(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wp,
                 const tw_u16 *__restrict__ wu, int M, int K, int NT,
                 const tw_u32 *__restrict__ ovf_base, const tw_u32 *__restrict__ item_base,
                 const tw_u32 *__restrict__ ovf_rows, tw_u16 *__restrict__ ovf_hh,
                 tw_u32 *__restrict__ ovf_ex, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    __shared__ float xmax[2][64];
    if (flag[0])
        return;
    constexpr int NCB = TT / 64;
    constexpr int STAGE = 64 * 128 * (GATED ? 3 : 2), GST = TW_GU_STAGES;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int mh = warp & 1, ch = warp >> 1;
    const tw_u32 nitems = item_base[NT];
    const tw_u32 sbase = tw_smem_addr(tw_smem);
    const int arow0 = 32 * mh + (lane & 7) + ((lane >> 3) & 1) * 8, ahi = lane >> 4;
    const int brow0 = (lane & 7) + (lane >> 4) * 8, bhi = (lane >> 3) & 1;
    const int nk = K / 64;
    for (tw_u32 item = blockIdx.x; item < nitems; item += gridDim.x) {
        const int t = tw_find_tile(item_base, NT, item);
        const tw_u32 rel = item - item_base[t], rb = rel / NCB, cb = rel - rb * NCB;
        const tw_u32 r0 = 64u * rb, cntt = ovf_base[t + 1] - ovf_base[t];
        const int nrows = (int)min(64u, cntt - r0);
        const tw_u32 *rows = ovf_rows + (long long)t * M + r0;
        const long long n0 = (long long)t * TT + 64 * cb;
        auto stage = [&](int kc, int buf) {
            const tw_u32 sx = sbase + buf * STAGE, sw = sx + 64 * 128, su = sw + 64 * 128;
#pragma unroll
            for (int i = tid; i < 64 * 8; i += 128) {
                const int r = i >> 3, q = i & 7;
                const tw_u32 so = r * 128 + ((q ^ (r & 7)) << 4);
                const long long m = rows[r < nrows ? r : 0];
                tw_cp16(sx + so, x + m * K + kc * 64 + 8 * q);
                tw_cp16(sw + so, wp + (n0 + r) * K + kc * 64 + 8 * q);
                if (GATED)
                    tw_cp16(su + so, wu + (n0 + r) * K + kc * 64 + 8 * q);
            }
        };
        float ag[2][4][4], au[2][4][4];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    ag[mi][j][e] = au[mi][j][e] = 0.0f;
#pragma unroll
        for (int i = 0; i < GST - 1; i++) {
            if (i < nk)
                stage(i, i);
            tw_cp_commit();
        }
        for (int kc = 0; kc < nk; kc++) {
            if (kc + GST - 1 < nk)
                stage(kc + GST - 1, (kc + GST - 1) % GST);
            tw_cp_commit();
            tw_cp_wait<GST - 1>();
            __syncthreads();
            const tw_u32 sx = sbase + (kc % GST) * STAGE, sw = sx + 64 * 128, su = sw + 64 * 128;
#pragma unroll
            for (int ks = 0; ks < 4; ks++) {
                tw_u32 a[2][4];
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    const int ar = arow0 + 16 * mi;
                    tw_ldsm4(a[mi], sx + ar * 128 + (((2 * ks + ahi) ^ (ar & 7)) << 4));
                }
#pragma unroll
                for (int p = 0; p < 2; p++) {
                    const int br = ch * 32 + 16 * p + brow0;
                    const tw_u32 bo = br * 128 + (((2 * ks + bhi) ^ (br & 7)) << 4);
                    tw_u32 b[4];
                    tw_ldsm4(b, sw + bo);
#pragma unroll
                    for (int mi = 0; mi < 2; mi++) {
                        tw_mma<DT>(ag[mi][2 * p], a[mi], b[0], b[1]);
                        tw_mma<DT>(ag[mi][2 * p + 1], a[mi], b[2], b[3]);
                    }
                    if (GATED) {
                        tw_ldsm4(b, su + bo);
#pragma unroll
                        for (int mi = 0; mi < 2; mi++) {
                            tw_mma<DT>(au[mi][2 * p], a[mi], b[0], b[1]);
                            tw_mma<DT>(au[mi][2 * p + 1], a[mi], b[2], b[3]);
                        }
                    }
                }
            }
            __syncthreads();
        }
        /* lane holds rows 32 mh + 16 mi + g (e = 0, 1) and + 8 (e = 2, 3), columns
           32 ch + 8 j + 2 t4 + (e & 1) */
        float h[2][4][4], am[2][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            am[mi][0] = am[mi][1] = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float gq = tw_h2f<DT>(tw_relu_round<DT>(ag[mi][j][e]));
                    h[mi][j][e] = GATED ? gq * au[mi][j][e] : gq;
                    /* the scale from finite values only (tw_abs_fin) */
                    am[mi][e >> 1] = fmaxf(am[mi][e >> 1], tw_abs_fin(h[mi][j][e]));
                }
        }
        tw_u32 ex[2][2] = {{0u, 0u}, {0u, 0u}};
        if constexpr (DT == 1) {
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    float v = am[mi][hf];
                    v = fmaxf(v, __shfl_xor_sync(TW_FULL, v, 1));
                    v = fmaxf(v, __shfl_xor_sync(TW_FULL, v, 2));
                    if (t4 == 0)
                        xmax[ch][32 * mh + 16 * mi + 8 * hf + g] = v;
                }
            __syncthreads();
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int r = 32 * mh + 16 * mi + 8 * hf + g;
                    ex[mi][hf] = tw_scale_ex(__float_as_uint(fmaxf(xmax[0][r], xmax[1][r])));
                }
            __syncthreads();
        }
        const tw_u32 cell0 = ovf_base[t] + r0;
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int r = 32 * mh + 16 * mi + 8 * hf + g;
                if (r < nrows) {
                    tw_u16 *row = ovf_hh + (long long)(cell0 + r) * (2 * TT) + 64 * (int)cb;
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int col = 32 * ch + 8 * j + 2 * t4;
                        const tw_u32 h0 = tw_split_hl<DT>(h[mi][j][2 * hf], ex[mi][hf]);
                        const tw_u32 h1 = tw_split_hl<DT>(h[mi][j][2 * hf + 1], ex[mi][hf]);
                        *(tw_u32 *)(row + col) = (h0 >> 16) | (h1 & 0xffff0000u);
                        *(tw_u32 *)(row + TT + col) = (h0 & 0xffffu) | (h1 << 16);
                    }
                    if (DT == 1 && ch == 0 && t4 == 0)
                        ovf_ex[(long long)(cell0 + r) * NCB + cb] = ex[mi][hf];
                }
            }
    }
}

// Overflow path 2: y part of each overflowing row, split over TW_OVP parts of the tiles:
// ovf_y[p][i][K] (fp32, part p at p * ystride) = sum over the row's overflowing tiles t of part p
// (tiles [p NT / P, (p + 1) NT / P)), in tile order, of h[cell(t)] . Wd[tile t rows]; phase B adds
// the parts in order. CTA item = (part, 32 overflowing rows, CW output columns), CW = 128 (64 when
// K % 128 != 0), so each h block is read once per CW columns; tiles in batches of 32: cell
// lookup, list of tiles where any row of the item overflows, then those tiles stream through
// shared memory in 64-neuron steps (h hi and lo rows with zeros for rows that do not overflow
// there, and the Wd block), double-buffered (48 KB at CW 128). 8 warps = 2 m-tiles x 4 quarters
// of CW / 4 columns (per k16 step 2 A + CW / 64 B ldmatrix feed CW / 16 mma); A = h hi / lo
// (ldmatrix), B = Wd (ldmatrix.trans); fp16 sums each 64-neuron block apart and scales it by the
// cell's 2^(ex - 141).
#define TW_OVP 4 /* tile parts of ovf_down (partial ovf_y sums) */
template <int DT, int TT, int CW>
TW_KERNEL((256))
    tw_k_ovf_down(const tw_u32 *__restrict__ packed, const tw_u16 *__restrict__ wd, int M, int K,
                   int NT, int W, const tw_u32 *__restrict__ ovf_base,
                   const tw_u32 *__restrict__ ovf_slot, const tw_u32 *__restrict__ orows,
                   const tw_u16 *__restrict__ ovf_hh, const tw_u32 *__restrict__ ovf_ex,
                   float *__restrict__ ovf_y, long long ystride, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    __shared__ tw_u32 scell[32][33];
    __shared__ tw_u32 srow[32], slist[32], sna;
    __shared__ float ssinv[2][32];
    if (flag[0])
        return;
    constexpr int NKB = TT / 64, SUB = 64, NS = TT / SUB;
    constexpr int HB = 32 * SUB * 2;   /* bytes of one 32-row h block (hi or lo) of a step */
    constexpr int WR = CW * 2;         /* bytes of one Wd row in shared memory */
    constexpr int STAGE = 2 * HB + SUB * WR;
    constexpr int QW = CW / 4, NJ = QW / 8; /* a warp's columns, n8 tiles */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int mt = warp & 1, nq = warp >> 1;
    const tw_u32 norows = flag[3];
    const tw_u32 ncb = (tw_u32)(K / CW), nrc = (norows + 31u) / 32u * ncb;
    const tw_u32 nitems = nrc * TW_OVP;
    const tw_u32 sbase = tw_smem_addr(tw_smem);
    const int ar = 16 * mt + (lane & 7) + ((lane >> 3) & 1) * 8, ahi = lane >> 4;
    const int bk = (lane & 7) + ((lane >> 3) & 1) * 8, bn = (QW / 8) * nq + (lane >> 4);
    for (tw_u32 item = blockIdx.x; item < nitems; item += gridDim.x) {
        const tw_u32 part = item / nrc, irc = item - part * nrc;
        const tw_u32 rb = irc / ncb, cb = irc - rb * ncb, i0 = 32u * rb;
        const int tlo = (int)part * NT / TW_OVP, thi = ((int)part + 1) * NT / TW_OVP;
        const int nr = (int)min(32u, norows - i0);
        const int c0 = CW * (int)cb;
        if (tid < 32)
            srow[tid] = tid < nr ? orows[i0 + tid] : TW_NONE;
        float acc[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        for (int tb = tlo; tb < thi; tb += 32) {
            const int ntb = min(32, thi - tb);
            __syncthreads(); /* srow written; the previous batch's buffers are free */
            for (int i = tid; i < 32 * 32; i += 256) {
                const int r = i >> 5, tt = i & 31;
                tw_u32 cell = TW_NONE;
                if (r < nr && tt < ntb) {
                    const long long m = srow[r];
                    const int t = tb + tt;
                    if (packed[(m * NT + t) * W] > (tw_u32)(W - 1))
                        cell = ovf_base[t] + ovf_slot[m * NT + t];
                }
                scell[r][tt] = cell;
            }
            __syncthreads();
            if (tid < 32) {
                bool any = false;
                for (int r = 0; r < nr; r++)
                    any |= scell[r][tid] != TW_NONE;
                const tw_u32 bal = __ballot_sync(TW_FULL, any && tid < ntb);
                if (any && tid < ntb)
                    slist[__popc(bal & ((1u << tid) - 1u))] = (tw_u32)tid;
                if (tid == 0)
                    sna = __popc(bal);
            }
            __syncthreads();
            const int na = (int)sna;
            /* step i: active tile i / NS, neurons [64 (i % NS), + 64) of it */
            auto stage = [&](int i, int buf) {
                const int tt = (int)slist[i / NS], t = tb + tt, n0 = SUB * (i % NS);
                const tw_u32 sh = sbase + buf * STAGE, sw = sh + 2 * HB;
#pragma unroll
                for (int e = tid; e < 2 * 32 * (SUB / 8); e += 256) {
                    const int which = e / (32 * (SUB / 8)), rem = e - which * 32 * (SUB / 8);
                    const int r = rem / (SUB / 8), pc = rem - r * (SUB / 8);
                    const tw_u32 cell = scell[r][tt];
                    const tw_u16 *src = ovf_hh + (cell == TW_NONE ? 0ll : (long long)cell * (2 * TT)) +
                                        which * TT + n0 + 8 * pc;
                    tw_cp16z(sh + which * HB + r * (2 * SUB) + ((pc ^ (r & 7)) << 4), src,
                             cell != TW_NONE);
                }
#pragma unroll
                for (int e = tid; e < SUB * (CW / 8); e += 256) {
                    const int nn = e / (CW / 8), q = e % (CW / 8);
                    tw_cp16(sw + nn * WR + ((q ^ (nn & 7)) << 4),
                            wd + ((long long)t * TT + n0 + nn) * K + c0 + 8 * q);
                }
                if (DT == 1 && tid < 32) {
                    const tw_u32 cell = scell[tid][tt];
                    ssinv[buf][tid] = cell == TW_NONE
                                          ? 1.0f
                                          : tw_ex_inv<DT>(ovf_ex[(long long)cell * NKB + n0 / 64]);
                }
            };
            const int nst = na * NS;
            if (nst > 0)
                stage(0, 0);
            tw_cp_commit();
            for (int i = 0; i < nst; i++) {
                if (i + 1 < nst)
                    stage(i + 1, (i + 1) & 1);
                tw_cp_commit();
                tw_cp_wait<1>();
                __syncthreads();
                const tw_u32 shi = sbase + (i & 1) * STAGE, slo = shi + HB, sw = shi + 2 * HB;
                float tmp[NJ][4];
#pragma unroll
                for (int j = 0; j < NJ; j++)
                    tmp[j][0] = tmp[j][1] = tmp[j][2] = tmp[j][3] = 0.0f;
#pragma unroll
                for (int ks = 0; ks < 4; ks++) {
                    const int kk = 16 * ks; /* neuron offset in the step */
                    const tw_u32 ao = ar * (2 * SUB) + ((((kk >> 3) + ahi) ^ (ar & 7)) << 4);
                    tw_u32 ah[4], al[4];
                    tw_ldsm4(ah, shi + ao);
                    tw_ldsm4(al, slo + ao);
                    const int krow = kk + bk;
#pragma unroll
                    for (int jj = 0; jj < NJ / 2; jj++) {
                        tw_u32 b[4];
                        tw_ldsm4t(b, sw + krow * WR + (((bn + 2 * jj) ^ (krow & 7)) << 4));
                        float(&d0)[4] = DT == 1 ? tmp[2 * jj] : acc[2 * jj];
                        float(&d1)[4] = DT == 1 ? tmp[2 * jj + 1] : acc[2 * jj + 1];
                        tw_mma<DT>(d0, ah, b[0], b[1]);
                        tw_mma<DT>(d0, al, b[0], b[1]);
                        tw_mma<DT>(d1, ah, b[2], b[3]);
                        tw_mma<DT>(d1, al, b[2], b[3]);
                    }
                }
                if constexpr (DT == 1) {
                    const float sa = ssinv[i & 1][16 * mt + g], sb = ssinv[i & 1][16 * mt + g + 8];
#pragma unroll
                    for (int j = 0; j < NJ; j++) {
                        acc[j][0] = fmaf(tmp[j][0], sa, acc[j][0]);
                        acc[j][1] = fmaf(tmp[j][1], sa, acc[j][1]);
                        acc[j][2] = fmaf(tmp[j][2], sb, acc[j][2]);
                        acc[j][3] = fmaf(tmp[j][3], sb, acc[j][3]);
                    }
                }
                __syncthreads();
            }
        }
        const int ra = 16 * mt + g, rb2 = ra + 8;
        float *py = ovf_y + (long long)part * ystride;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int col = c0 + QW * nq + 8 * j + 2 * t4;
            if (ra < nr)
                *(float2 *)(py + (long long)(i0 + ra) * K + col) = make_float2(acc[j][0], acc[j][1]);
            if (rb2 < nr)
                *(float2 *)(py + (long long)(i0 + rb2) * K + col) = make_float2(acc[j][2], acc[j][3]);
        }
    }
}
]==]
end
