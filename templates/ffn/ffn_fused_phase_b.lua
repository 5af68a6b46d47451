-- ffn_fused_phase_b.lua — module of ffn_fused.cu.lua: phase B, tw_k_phase_b and its per-chunk
-- warp step tw_pb_chunk: y = sum h . Wd_n over all chunks in registers, plus ovf_y of
-- overflowing rows, stored once.
-- Returns a function of D (the template's constants; this part reads none of them).
return function(D)
    cuda [==[
// Phase B chunk for one warp. Lane (g, t4) owns the slots 4 t4 .. 4 t4 + 3 of a round
// (k = 2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9 of the mma) and reads logical piece pib(g) (8 output
// columns) of each slot's Wd row with one 16-byte load; prmt pairs the two slots of a k pair.
// Output column of mma row g in m-tile mt: 8 pib(g) + 2 mt, of row g + 8: that + 1, so a lane's
// accumulators cover 8 consecutive columns of its two tokens. A group of 8 tokens is one n8 mma
// tile per A fragment: B = h at the slot's token column, built from byte masks of the
// descriptors' token columns (tw_tokmask4, tw_tokmask2): gated, the hi and lo halves (two mmas;
// fp16 scaled per round; hl holds them paired, see tw_k_reduce); non-gated, g itself.
template <int DT, int GATED, int GPW, bool SH, int PADQ, int NGB, int PF>
__device__ __forceinline__ void tw_pb_chunk(float (&acc)[GPW][4][4], tw_u32 so, tw_u32 gl0,
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
                Dn = tw_lds128(dsh + 4u * (q + 16u));
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
                /* hl paired: H = hi01, lo01, hi23, lo23 */
                tw_u32 k01, k23;
                tw_tokmask4(d[0], d[1], d[2], d[3], ug * 0x01010101u, k01, k23);
                const tw_u32 bh0 = H.x & k01, bl0 = H.y & k01, bh1 = H.z & k23, bl1 = H.w & k23;
                float sinv = 1.0f;
                if constexpr (DT == 1)
                    sinv = tw_ex_inv<DT>(rexp[o >> 4]);
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a[4] = {tw_prmt2(L[0][mt], L[1][mt], 0x5410u),
                                         tw_prmt2(L[0][mt], L[1][mt], 0x7632u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x5410u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x7632u)};
                    if constexpr (DT == 0) {
                        tw_mma<DT>(acc[j][mt], a, bh0, bh1);
                        tw_mma<DT>(acc[j][mt], a, bl0, bl1);
                    } else {
                        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        tw_mma<DT>(t, a, bh0, bh1);
                        tw_mma<DT>(t, a, bl0, bl1);
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            acc[j][mt][e] = fmaf(t[e], sinv, acc[j][mt][e]);
                    }
                }
            } else {
                const uint2 Gv = SH ? tw_lds64(vsh + 2u * q) : *(const uint2 *)((const tw_u16 *)vgl + q);
                tw_u32 k0, k1;
                tw_tokmask4(d[0], d[1], d[2], d[3], ug * 0x01010101u, k0, k1);
                const tw_u32 b0 = Gv.x & k0, b1 = Gv.y & k1;
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a[4] = {tw_prmt2(L[0][mt], L[1][mt], 0x5410u),
                                         tw_prmt2(L[0][mt], L[1][mt], 0x7632u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x5410u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x7632u)};
                    tw_mma<DT>(acc[j][mt], a, b0, b1);
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
                const tw_u32 k = tw_tokmask2(D.x, D.y, ug * 0x01010101u);
                const tw_u32 bh = H.x & k, bl = H.y & k;
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a0 = tw_prmt2(L0[mt], L1[mt], 0x5410u);
                    const tw_u32 a1 = tw_prmt2(L0[mt], L1[mt], 0x7632u);
                    tw_mma8<DT>(acc[j][mt], a0, a1, bh);
                    tw_mma8<DT>(acc[j][mt], a0, a1, bl);
                }
            } else {
                const tw_u32 Gv = SH ? tw_lds32(vsh + 2u * q) : *(const tw_u32 *)((const tw_u16 *)vgl + q);
                const tw_u32 b0 = Gv & tw_tokmask2(D.x, D.y, ug * 0x01010101u);
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a0 = tw_prmt2(L0[mt], L1[mt], 0x5410u);
                    const tw_u32 a1 = tw_prmt2(L0[mt], L1[mt], 0x7632u);
                    tw_mma8<DT>(acc[j][mt], a0, a1, b0);
                }
            }
        }
    }
}

// Phase B: y^T[64-column slice x 8 tokens] per group, accumulated over all chunks in
// registers; overflowing rows add their dense part (ovf_y) once at the end; y leaves in 16-byte
// stores. Shared memory: two weight chunks, two staging buffers (DCAP descriptors, DCAP hl words
// (gated) or gate values, the block's list offsets and sizes), the (first, end) offset table of
// all chunks.
template <int DT, int GATED, int CN, int GPW, int DCAP, int PADQ, int ST, int NW, int PF>
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
    {
        tw_u32 *sre = (tw_u32 *)(tw_smem + ST * CN * 128 + ST * SB);
        for (int i = threadIdx.x; i < NC; i += NTHR) {
            sre[2 * i] = offsets[(long long)i * NG + GB];
            sre[2 * i + 1] = offsets[(long long)i * NG + GE];
        }
    }
    float acc[GPW][4][4];
#pragma unroll
    for (int j = 0; j < GPW; j++)
#pragma unroll
        for (int mt = 0; mt < 4; mt++)
            acc[j][mt][0] = acc[j][mt][1] = acc[j][mt][2] = acc[j][mt][3] = 0.0f;
    __syncthreads();
    const tw_u32 sbase = tw_smem_addr(tw_smem), stb = sbase + ST * CN * 128, sre = stb + ST * SB;
    auto stage = [&](int c) {
        const int b = c % ST;
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        const tw_u32 sb = stb + b * SB;
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
        if (rn <= DCAP)
            tw_pb_chunk<DT, GATED, GPW, true, PADQ, NGB, PF>(acc, so, gl0, nj, ra, sb,
                                                            sb + DCAP * 4, nullptr, vgl, rx, buf,
                                                            g, t4);
        else
            tw_pb_chunk<DT, GATED, GPW, false, PADQ, NGB, PF>(acc, so, gl0, nj, ra, 0u, 0u,
                                                             desc + ra, vgl, rx, buf, g, t4);
        __syncthreads();
    }
    const int pc = k0 + 8 * (int)tw_pib((tw_u32)g);
#pragma unroll
    for (int j = 0; j < GPW; j++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const long long m = (long long)(G0 + j) * 8 + 2 * t4 + e;
            if (m < M) {
                float v[8];
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    v[2 * mt] = acc[j][mt][e];
                    v[2 * mt + 1] = acc[j][mt][2 + e];
                }
                const tw_u32 oi = orow_idx[m];
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
