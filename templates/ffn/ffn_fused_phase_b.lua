-- ffn_fused_phase_b.lua — module of ffn_fused.cu.lua: phase B, tw_k_phase_b and its per-chunk
-- warp steps (tw_pb_chunk; IL = 1: tw_pb_round, tw_pb_half, tw_pb_pairs): y = sum h . Wd_n over
-- all chunks in registers, plus ovf_y of overflowing rows, stored once.
-- Returns a function of D (the template's constants; this part reads none of them).
return function(D)
    cuda [==[
// Phase B chunk for one warp. Lane (g, t4) owns the slots 4 t4 .. 4 t4 + 3 of a round
// (k = 2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9 of the mma) and reads logical piece pib(g) (8 output
// columns) of each slot's Wd row with one 16-byte load; prmt pairs the two slots of a k pair.
// Output column of mma row g in m-tile mt: 8 pib(g) + 2 mt, of row g + 8: that + 1, so a lane's
// accumulators cover 8 consecutive columns of its two tokens. A group of GT = 8 NH tokens runs
// NH n8 mmas per A fragment: B of n-tile h = h at the slot's token column (tokens 8 h .. 8 h + 7):
// gated, the hi and lo halves (two mmas; fp16 scaled per round); non-gated, g itself.
template <int DT, int GATED, int GPW, bool SH, int PADQ, int NGB, int PF, int NH>
__device__ __forceinline__ void tw_pb_chunk(float (&acc)[GPW][NH][4][4], tw_u32 so, tw_u32 gl0,
                                             int nj, tw_u32 ra, tw_u32 dsh, tw_u32 vsh,
                                             const tw_u32 *dgl, const void *vgl,
                                             const tw_u32 *rexp, tw_u32 buf, int g, int t4) {
    const tw_u32 ug = (tw_u32)g, pis = tw_pib(ug) << 4, ut4 = (tw_u32)t4;
    /* PF: as in phase A, the next group's size and offset and the next round's descriptors are
       loaded one step ahead */
]==]
    import("ffn_fused_dev").group_walk() -- opens the loop over the warp's groups j
    cuda [==[
        uint4 Dn = make_uint4(0u, 0u, 0u, 0u);
        if (PF && SH && nfull)
            Dn = tw_lds128(dsh + 4u * (o + 4u * ut4));
        for (tw_u32 r = 0; r < nfull; r++, o += 16) {
            const tw_u32 q = o + 4u * ut4;
            uint4 D;
            if (PF && SH) {
                D = Dn;
                const tw_u32 qn = ((TW_XV & 8) || r + 1 < nfull) ? q + 16u : q;
                Dn = tw_lds128(dsh + 4u * qn);
            } else {
                D = SH ? tw_lds128(dsh + 4u * q) : *(const uint4 *)(dgl + q);
            }
            const tw_u32 d[4] = {D.x, D.y, D.z, D.w};
            tw_u32 L[4][4];
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                const uint4 v = tw_lds128(buf + ((d[jj] ^ pis) & ~15u));
                L[jj][0] = v.x, L[jj][1] = v.y, L[jj][2] = v.z, L[jj][3] = v.w;
            }
            if constexpr (GATED) {
                const uint4 H = SH ? tw_lds128(vsh + 4u * q) : *(const uint4 *)((const tw_u32 *)vgl + q);
                tw_u32 bh0[NH], bl0[NH], bh1[NH], bl1[NH];
#pragma unroll
                for (int h = 0; h < NH; h++) {
                    const tw_u32 tg = ug + 8u * h;
                    if (TW_XV & 1) { /* hl paired: H = hi01, lo01, hi23, lo23 */
                        tw_u32 k01, k23;
                        tw_tokmask4(d[0], d[1], d[2], d[3], tg * 0x01010101u, k01, k23);
                        bh0[h] = H.x & k01, bl0[h] = H.y & k01, bh1[h] = H.z & k23, bl1[h] = H.w & k23;
                    } else {
                        const tw_u32 m0 = (d[0] & 15u) == tg ? H.x : 0u, m1 = (d[1] & 15u) == tg ? H.y : 0u;
                        const tw_u32 m2 = (d[2] & 15u) == tg ? H.z : 0u, m3 = (d[3] & 15u) == tg ? H.w : 0u;
                        bh0[h] = tw_prmt2(m0, m1, 0x7632u), bl0[h] = tw_prmt2(m0, m1, 0x5410u);
                        bh1[h] = tw_prmt2(m2, m3, 0x7632u), bl1[h] = tw_prmt2(m2, m3, 0x5410u);
                    }
                }
                float sinv = 1.0f;
                if constexpr (DT == 1)
                    sinv = tw_ex_inv<DT>(rexp[o >> 4]);
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a[4] = {tw_prmt2(L[0][mt], L[1][mt], 0x5410u),
                                         tw_prmt2(L[0][mt], L[1][mt], 0x7632u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x5410u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x7632u)};
#pragma unroll
                    for (int h = 0; h < NH; h++) {
                        if constexpr (DT == 0) {
                            tw_mma<DT>(acc[j][h][mt], a, bh0[h], bh1[h]);
                            tw_mma<DT>(acc[j][h][mt], a, bl0[h], bl1[h]);
                        } else {
                            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                            tw_mma<DT>(t, a, bh0[h], bh1[h]);
                            tw_mma<DT>(t, a, bl0[h], bl1[h]);
#pragma unroll
                            for (int e = 0; e < 4; e++)
                                acc[j][h][mt][e] = fmaf(t[e], sinv, acc[j][h][mt][e]);
                        }
                    }
                }
            } else {
                const uint2 Gv = SH ? tw_lds64(vsh + 2u * q) : *(const uint2 *)((const tw_u16 *)vgl + q);
                tw_u32 b0[NH], b1[NH];
#pragma unroll
                for (int h = 0; h < NH; h++) {
                    const tw_u32 tg = ug + 8u * h;
                    tw_u32 k0, k1;
                    if (TW_XV & 1) {
                        tw_tokmask4(d[0], d[1], d[2], d[3], tg * 0x01010101u, k0, k1);
                    } else {
                        k0 = ((d[0] & 15u) == tg ? 0xffffu : 0u) | ((d[1] & 15u) == tg ? 0xffff0000u : 0u);
                        k1 = ((d[2] & 15u) == tg ? 0xffffu : 0u) | ((d[3] & 15u) == tg ? 0xffff0000u : 0u);
                    }
                    b0[h] = Gv.x & k0, b1[h] = Gv.y & k1;
                }
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a[4] = {tw_prmt2(L[0][mt], L[1][mt], 0x5410u),
                                         tw_prmt2(L[0][mt], L[1][mt], 0x7632u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x5410u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x7632u)};
#pragma unroll
                    for (int h = 0; h < NH; h++)
                        tw_mma<DT>(acc[j][h][mt], a, b0[h], b1[h]);
                }
            }
        }
        if (PADQ == 8 && (szj & 8u)) { /* half round: lane t4 owns slots 2 t4, 2 t4 + 1 (k8 mma) */
            const tw_u32 q = o + 2u * ut4;
            const uint2 D = SH ? tw_lds64(dsh + 4u * q) : *(const uint2 *)(dgl + q);
            const uint4 v0 = tw_lds128(buf + ((D.x ^ pis) & ~15u));
            const uint4 v1 = tw_lds128(buf + ((D.y ^ pis) & ~15u));
            const tw_u32 L0[4] = {v0.x, v0.y, v0.z, v0.w}, L1[4] = {v1.x, v1.y, v1.z, v1.w};
            if constexpr (GATED) {
                const uint2 H = SH ? tw_lds64(vsh + 4u * q) : *(const uint2 *)((const tw_u32 *)vgl + q);
                tw_u32 bh[NH], bl[NH];
#pragma unroll
                for (int h = 0; h < NH; h++) {
                    const tw_u32 tg = ug + 8u * h;
                    if (TW_XV & 1) {
                        const tw_u32 k = tw_tokmask2(D.x, D.y, tg * 0x01010101u);
                        bh[h] = H.x & k, bl[h] = H.y & k;
                    } else {
                        const tw_u32 m0 = (D.x & 15u) == tg ? H.x : 0u, m1 = (D.y & 15u) == tg ? H.y : 0u;
                        bh[h] = tw_prmt2(m0, m1, 0x7632u), bl[h] = tw_prmt2(m0, m1, 0x5410u);
                    }
                }
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a0 = tw_prmt2(L0[mt], L1[mt], 0x5410u);
                    const tw_u32 a1 = tw_prmt2(L0[mt], L1[mt], 0x7632u);
#pragma unroll
                    for (int h = 0; h < NH; h++) {
                        tw_mma8<DT>(acc[j][h][mt], a0, a1, bh[h]);
                        tw_mma8<DT>(acc[j][h][mt], a0, a1, bl[h]);
                    }
                }
            } else {
                const tw_u32 Gv = SH ? tw_lds32(vsh + 2u * q) : *(const tw_u32 *)((const tw_u16 *)vgl + q);
                tw_u32 b0[NH];
#pragma unroll
                for (int h = 0; h < NH; h++) {
                    const tw_u32 tg = ug + 8u * h;
                    const tw_u32 k0 = (TW_XV & 1) ? tw_tokmask2(D.x, D.y, tg * 0x01010101u)
                                                  : ((D.x & 15u) == tg ? 0xffffu : 0u) |
                                                        ((D.y & 15u) == tg ? 0xffff0000u : 0u);
                    b0[h] = Gv & k0;
                }
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a0 = tw_prmt2(L0[mt], L1[mt], 0x5410u);
                    const tw_u32 a1 = tw_prmt2(L0[mt], L1[mt], 0x7632u);
#pragma unroll
                    for (int h = 0; h < NH; h++)
                        tw_mma8<DT>(acc[j][h][mt], a0, a1, b0[h]);
                }
            }
        }
    }
}

// Phase B, gated bf16, staged lists (IL = 1): the groups of a warp taken two at a time, one full
// round of each per step, so that two independent accumulator chains are in flight. The group
// whose list has fewer rounds reads valid descriptors (slots 0..15 of the staging buffer) with its
// h masked to zero: its mmas add exact zeros. Half rounds as in tw_pb_chunk.
__device__ __forceinline__ void tw_pb_round(float (&a)[4][4], uint4 D, uint4 H, bool on, tw_u32 buf,
                                            tw_u32 ug, tw_u32 pis) {
    const tw_u32 d[4] = {D.x, D.y, D.z, D.w};
    tw_u32 L[4][4];
#pragma unroll
    for (int jj = 0; jj < 4; jj++) {
        const uint4 v = tw_lds128(buf + ((d[jj] ^ pis) & ~15u));
        L[jj][0] = v.x, L[jj][1] = v.y, L[jj][2] = v.z, L[jj][3] = v.w;
    }
    tw_u32 bh0, bl0, bh1, bl1;
    if (TW_XV & 1) {
        tw_u32 k01, k23;
        tw_tokmask4(d[0], d[1], d[2], d[3], ug * 0x01010101u, k01, k23);
        k01 = on ? k01 : 0u, k23 = on ? k23 : 0u;
        bh0 = H.x & k01, bl0 = H.y & k01, bh1 = H.z & k23, bl1 = H.w & k23;
    } else {
        const tw_u32 m0 = on && (d[0] & 7u) == ug ? H.x : 0u, m1 = on && (d[1] & 7u) == ug ? H.y : 0u;
        const tw_u32 m2 = on && (d[2] & 7u) == ug ? H.z : 0u, m3 = on && (d[3] & 7u) == ug ? H.w : 0u;
        bh0 = tw_prmt2(m0, m1, 0x7632u), bl0 = tw_prmt2(m0, m1, 0x5410u);
        bh1 = tw_prmt2(m2, m3, 0x7632u), bl1 = tw_prmt2(m2, m3, 0x5410u);
    }
#pragma unroll
    for (int mt = 0; mt < 4; mt++) {
        const tw_u32 af[4] = {tw_prmt2(L[0][mt], L[1][mt], 0x5410u), tw_prmt2(L[0][mt], L[1][mt], 0x7632u),
                              tw_prmt2(L[2][mt], L[3][mt], 0x5410u), tw_prmt2(L[2][mt], L[3][mt], 0x7632u)};
        tw_mma<0>(a[mt], af, bh0, bh1);
        tw_mma<0>(a[mt], af, bl0, bl1);
    }
}
__device__ __forceinline__ void tw_pb_half(float (&a)[4][4], tw_u32 q, tw_u32 dsh, tw_u32 vsh,
                                           tw_u32 buf, tw_u32 ug, tw_u32 pis) {
    const uint2 D = tw_lds64(dsh + 4u * q);
    const uint4 v0 = tw_lds128(buf + ((D.x ^ pis) & ~15u));
    const uint4 v1 = tw_lds128(buf + ((D.y ^ pis) & ~15u));
    const tw_u32 L0[4] = {v0.x, v0.y, v0.z, v0.w}, L1[4] = {v1.x, v1.y, v1.z, v1.w};
    const uint2 H = tw_lds64(vsh + 4u * q);
    tw_u32 bh, bl;
    if (TW_XV & 1) {
        const tw_u32 k = tw_tokmask2(D.x, D.y, ug * 0x01010101u);
        bh = H.x & k, bl = H.y & k;
    } else {
        const tw_u32 m0 = (D.x & 7u) == ug ? H.x : 0u, m1 = (D.y & 7u) == ug ? H.y : 0u;
        bh = tw_prmt2(m0, m1, 0x7632u), bl = tw_prmt2(m0, m1, 0x5410u);
    }
#pragma unroll
    for (int mt = 0; mt < 4; mt++) {
        const tw_u32 a0 = tw_prmt2(L0[mt], L1[mt], 0x5410u);
        const tw_u32 a1 = tw_prmt2(L0[mt], L1[mt], 0x7632u);
        tw_mma8<0>(a[mt], a0, a1, bh);
        tw_mma8<0>(a[mt], a0, a1, bl);
    }
}
template <int GPW, int PADQ, int NGB>
__device__ __forceinline__ void tw_pb_pairs(float (&acc)[GPW][1][4][4], tw_u32 so, tw_u32 gl0, int nj,
                                            tw_u32 ra, tw_u32 dsh, tw_u32 vsh, tw_u32 buf, int g,
                                            int t4) {
    static_assert(GPW % 2 == 0, "tw_pb_pairs: GPW must be even");
    const tw_u32 ug = (tw_u32)g, pis = tw_pib(ug) << 4, q4 = 4u * (tw_u32)t4;
#pragma unroll
    for (int j = 0; j < GPW; j += 2) {
        if (j >= nj)
            break;
        const bool two = j + 1 < nj;
        const tw_u32 sz0 = tw_lds32(so + 4u * (NGB + 1 + gl0 + j));
        const tw_u32 o0 = tw_lds32(so + 4u * (gl0 + j)) - ra;
        const tw_u32 sz1 = two ? tw_lds32(so + 4u * (NGB + 1 + gl0 + j + 1)) : 0u;
        const tw_u32 o1 = two ? tw_lds32(so + 4u * (gl0 + j + 1)) - ra : 0u;
        const tw_u32 n0 = sz0 >> 4, n1 = sz1 >> 4, n = n0 > n1 ? n0 : n1;
        for (tw_u32 r = 0; r < n; r++) {
            const bool on0 = r < n0, on1 = r < n1;
            const tw_u32 qa = on0 ? o0 + 16u * r + q4 : q4, qb = on1 ? o1 + 16u * r + q4 : q4;
            const uint4 Da = tw_lds128(dsh + 4u * qa), Db = tw_lds128(dsh + 4u * qb);
            const uint4 Ha = tw_lds128(vsh + 4u * qa), Hb = tw_lds128(vsh + 4u * qb);
            tw_pb_round(acc[j][0], Da, Ha, on0, buf, ug, pis);
            tw_pb_round(acc[j + 1][0], Db, Hb, on1, buf, ug, pis);
        }
        if (PADQ == 8 && (sz0 & 8u))
            tw_pb_half(acc[j][0], o0 + 16u * n0 + 2u * (tw_u32)t4, dsh, vsh, buf, ug, pis);
        if (PADQ == 8 && (sz1 & 8u))
            tw_pb_half(acc[j + 1][0], o1 + 16u * n1 + 2u * (tw_u32)t4, dsh, vsh, buf, ug, pis);
    }
}

// Phase B: y^T[64-column slice x GT tokens] per group, accumulated over all chunks in
// registers; overflowing rows add their dense part (ovf_y) once at the end; y leaves in 16-byte
// stores. Shared memory: two weight chunks, two staging buffers (DCAP descriptors, DCAP hl words
// (gated) or gate values, the block's list offsets and sizes), the (first, end) offset table of
// all chunks.
template <int DT, int GATED, int CN, int GPW, int DCAP, int PADQ, int ST, int NW, int PF, int IL,
          int GT>
TW_KERNEL((NW * 32, 1))
    tw_k_phase_b(const tw_u16 *__restrict__ wd, int M, int K, int N, int NG, int NC,
                  const tw_u32 *__restrict__ desc, const tw_u16 *__restrict__ gv,
                  const tw_u32 *__restrict__ hl, const tw_u32 *__restrict__ rexp,
                  const tw_u32 *__restrict__ offsets, const tw_u32 *__restrict__ sizes,
                  const tw_u32 *__restrict__ orow_idx, const float *__restrict__ ovf_y,
                  long long ystride, tw_u16 *__restrict__ y, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    constexpr int VB = GATED ? 4 : 2; /* bytes per slot of the value array */
    constexpr int NGB = NW * GPW, SB = TW_SB(DCAP, 4 + VB, NGB), NTHR = NW * 32;
    if (flag[0])
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int s = blockIdx.y, k0 = s * TW_KW;
    const int GB = blockIdx.x * NGB, GE = min(GB + NGB, NG);
    const int G0 = GB + warp * GPW;
    if (TW_XV & 16) /* as in phase A: chunk 0's weights first */
        tw_load_chunk<CN, NTHR>(tw_smem_addr(tw_smem), wd, 0, N, K, k0);
    {
        tw_u32 *sre = (tw_u32 *)(tw_smem + ST * CN * 128 + ST * SB);
        for (int i = threadIdx.x; i < NC; i += NTHR) {
            sre[2 * i] = offsets[(long long)i * NG + GB];
            sre[2 * i + 1] = offsets[(long long)i * NG + GE];
        }
    }
    constexpr int NH = GT / 8;
    float acc[GPW][NH][4][4];
#pragma unroll
    for (int j = 0; j < GPW; j++)
#pragma unroll
        for (int h = 0; h < NH; h++)
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
                acc[j][h][mt][0] = acc[j][h][mt][1] = acc[j][h][mt][2] = acc[j][h][mt][3] = 0.0f;
    __syncthreads();
    const tw_u32 sbase = tw_smem_addr(tw_smem), stb = sbase + ST * CN * 128, sre = stb + ST * SB;
    auto stage = [&](int c) {
        const int b = c % ST;
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        const tw_u32 sb = stb + b * SB;
        if (!(TW_XV & 16) || c > 0)
            tw_load_chunk<CN, NTHR>(sbase + b * CN * 128, wd, c, N, K, k0);
        if (rn <= DCAP) {
            tw_load_bytes<NTHR>(sb, desc + ra, rn / 4);
            if (GATED)
                tw_load_bytes<NTHR>(sb + DCAP * 4, hl + ra, rn / 4);
            else
                tw_load_bytes<NTHR>(sb + DCAP * 4, gv + ra, rn / 8);
        }
        tw_stage_lists<NGB, NTHR>(sb + DCAP * (4 + VB), offsets, sizes, (long long)c * NG + GB,
                                 GE - GB);
    };
]==]
    import("ffn_fused_dev").chunk_ring() -- opens the loop over the chunks c
    cuda [==[
        const tw_u32 buf = sbase + (c % ST) * CN * 128, sb = stb + (c % ST) * SB;
        const tw_u32 so = sb + DCAP * (4 + VB), gl0 = (tw_u32)(warp * GPW);
        const int nj = min(GPW, NG - G0);
        const void *vgl = GATED ? (const void *)(hl + ra) : (const void *)(gv + ra);
        const tw_u32 *rx = (DT == 1 && GATED) ? rexp + (ra >> 4) : rexp;
        if constexpr (IL && NH == 1 && DT == 0 && GATED && GPW % 2 == 0) {
            if (rn <= DCAP)
                tw_pb_pairs<GPW, PADQ, NGB>(acc, so, gl0, nj, ra, sb, sb + DCAP * 4, buf, g, t4);
            else
                tw_pb_chunk<DT, GATED, GPW, false, PADQ, NGB, PF, NH>(acc, so, gl0, nj, ra, 0u, 0u,
                                                                     desc + ra, vgl, rx, buf, g, t4);
        } else if (rn <= DCAP)
            tw_pb_chunk<DT, GATED, GPW, true, PADQ, NGB, PF, NH>(acc, so, gl0, nj, ra, sb,
                                                                sb + DCAP * 4, nullptr, vgl, rx,
                                                                buf, g, t4);
        else
            tw_pb_chunk<DT, GATED, GPW, false, PADQ, NGB, PF, NH>(acc, so, gl0, nj, ra, 0u, 0u,
                                                                 desc + ra, vgl, rx, buf, g, t4);
        __syncthreads();
    }
    const int pc = k0 + 8 * (int)tw_pib((tw_u32)g);
    tw_u32 ois[GPW][2 * NH]; /* XV & 16: every row's orow_idx loaded at once (one latency) */
    if (TW_XV & 16) {
#pragma unroll
        for (int j = 0; j < GPW; j++)
#pragma unroll
            for (int hf = 0; hf < 2 * NH; hf++) {
                const long long m = (long long)(G0 + j) * GT + 8 * (hf >> 1) + 2 * t4 + (hf & 1);
                ois[j][hf] = m < M ? orow_idx[m] : TW_NONE;
            }
    }
#pragma unroll
    for (int j = 0; j < GPW; j++) {
#pragma unroll
        for (int hf = 0; hf < 2 * NH; hf++) {
            const int h = hf >> 1, e = hf & 1;
            const long long m = (long long)(G0 + j) * GT + 8 * h + 2 * t4 + e;
            if (m < M) {
                float v[8];
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    v[2 * mt] = acc[j][h][mt][e];
                    v[2 * mt + 1] = acc[j][h][mt][2 + e];
                }
                const tw_u32 oi = (TW_XV & 16) ? ois[j][hf] : orow_idx[m];
                if (oi != TW_NONE) { /* the parts of ovf_down, in order */
#pragma unroll
                    for (int part = 0; part < TW_OVP; part++) {
                        const float4 *py =
                            (const float4 *)(ovf_y + part * ystride + (long long)oi * K + pc);
                        const float4 f0 = py[0], f1 = py[1];
                        v[0] += f0.x, v[1] += f0.y, v[2] += f0.z, v[3] += f0.w;
                        v[4] += f1.x, v[5] += f1.y, v[6] += f1.z, v[7] += f1.w;
                    }
                }
                uint4 o;
                o.x = tw_pack2<DT>(v[0], v[1]);
                o.y = tw_pack2<DT>(v[2], v[3]);
                o.z = tw_pack2<DT>(v[4], v[5]);
                o.w = tw_pack2<DT>(v[6], v[7]);
                *(uint4 *)(y + m * K + pc) = o;
            }
        }
    }
}


]==]
end
