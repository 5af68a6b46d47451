-- ffn_fused_phase_a.lua — module of ffn_fused.cu.lua (gated): phase A, tw_k_phase_a and its
-- per-chunk warp step tw_pa_chunk: partial u = x . Wu_n over 64-column k-slices for every pair.
-- Returns a function of D (the template's constants; this part reads none of them).
return function(D)
    cuda [==[
// Phase A chunk for one warp: full rounds of 16 slots, then (PADQ 8) a half round. Lane
// (g, t4) reads pieces t4 and t4 + 4 (k = 8 t4 .. +7 and 32 + 8 t4 .. +7 of the slice) of the
// rows in slots g and g + 8; the x fragments hold the same k columns (mma k order permuted
// identically). A group of GT = 8 NH tokens runs NH n8 mmas per A fragment (x fragments
// bx[j][8 h ..] for tokens 8 h .. 8 h + 7). Slot g's pair keeps D_h[g][tok & 7], h = tok >> 3;
// the lane with t4 = (tok & 7) >> 1 stores it.
// so: the staged list offsets (NGB + 1) and sizes (NGB) of the chunk; gl0: this warp's first
// group in the block; nj: its groups below NG; ra: the block's first offset.
template <int NH> __device__ __forceinline__ float tw_pa_pick(const float (&e)[NH][2][4], tw_u32 d,
                                                              int hi) {
    const int i = 2 * hi;
    constexpr bool one = (TW_XV & 4) != 0; /* one mma chain: e[h][1] unused */
    const float s0 = one ? e[0][0][i] : e[0][0][i] + e[0][1][i];
    const float s1 = one ? e[0][0][i + 1] : e[0][0][i + 1] + e[0][1][i + 1];
    if constexpr (NH == 1) {
        return (d & 1u) ? s1 : s0;
    } else {
        const float t0 = one ? e[1][0][i] : e[1][0][i] + e[1][1][i];
        const float t1 = one ? e[1][0][i + 1] : e[1][0][i + 1] + e[1][1][i + 1];
        return (d & 8u) ? ((d & 1u) ? t1 : t0) : ((d & 1u) ? s1 : s0);
    }
}
template <int DT, int GPW, bool SH, int PADQ, int NGB, int PF, int NH>
__device__ __forceinline__ void tw_pa_chunk(const tw_u32 (&bx)[GPW][8 * NH], tw_u32 so, tw_u32 gl0,
                                             int nj, tw_u32 ra, tw_u32 dsh, const tw_u32 *dgl,
                                             tw_u32 buf, float *po, int g, int t4) {
    const tw_u32 t4s = (tw_u32)t4 << 4, ut4 = (tw_u32)t4, ug = (tw_u32)g, t2 = ut4 << 1;
    float *const pg = po + ug; /* XV & 2: this lane's slot g of the chunk's lists */
    /* PF: the next group's size and offset, and the next round's descriptors, are loaded one
       step ahead (shared memory; the loads stay inside the staging buffer) */
]==]
    import("ffn_fused_dev").group_walk() -- opens the loop over the warp's groups j
    cuda [==[
        tw_u32 dan = 0, dbn = 0;
        if (PF && SH) {
            dan = tw_lds32(dsh + 4u * (o + ug));
            dbn = tw_lds32(dsh + 4u * (o + ug + 8u));
        }
        for (tw_u32 r = 0; r < nfull; r++, o += 16) {
            tw_u32 da, db;
            if (PF && SH) {
                da = dan;
                db = dbn;
                const tw_u32 onx = ((TW_XV & 8) || 16u * (r + 1) < szj) ? o + 16u : o;
                dan = tw_lds32(dsh + 4u * (onx + ug));
                dbn = tw_lds32(dsh + 4u * (onx + ug + 8u));
            } else if (SH) {
                da = tw_lds32(dsh + 4u * (o + ug));
                db = tw_lds32(dsh + 4u * (o + ug + 8u));
            } else {
                da = dgl[o + ug];
                db = dgl[o + ug + 8u];
            }
            const tw_u32 oa = (da ^ t4s) & ~15u, ob = (db ^ t4s) & ~15u;
            const uint4 a0 = tw_lds128(buf + oa), a1 = tw_lds128(buf + (oa ^ 64u));
            const uint4 b0 = tw_lds128(buf + ob), b1 = tw_lds128(buf + (ob ^ 64u));
            float e[NH][2][4];
#pragma unroll
            for (int h = 0; h < NH; h++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    e[h][0][i] = e[h][1][i] = 0.0f;
            const tw_u32 af[4][4] = {{a0.x, b0.x, a0.y, b0.y},
                                     {a0.z, b0.z, a0.w, b0.w},
                                     {a1.x, b1.x, a1.y, b1.y},
                                     {a1.z, b1.z, a1.w, b1.w}};
#pragma unroll
            for (int ks = 0; ks < 4; ks++)
#pragma unroll
                for (int h = 0; h < NH; h++)
                    tw_mma<DT>(e[h][(TW_XV & 4) ? 0 : (ks & 1)], af[ks], bx[j][8 * h + 2 * ks],
                               bx[j][8 * h + 2 * ks + 1]);
            const float va = tw_pa_pick<NH>(e, da, 0), vb = tw_pa_pick<NH>(e, db, 1);
            if (TW_XV & 2) { /* one 32-bit offset per round; slot g + 8 at +32 bytes */
                float *const pp = pg + o;
                tw_stgz(pp, va, (da ^ t2) & 6u);
                tw_stgz(pp + 8, vb, (db ^ t2) & 6u);
            } else {
                tw_stgp(po + o + ug, va, ((da >> 1) & 3u) == ut4 ? 1u : 0u);
                tw_stgp(po + o + ug + 8u, vb, ((db >> 1) & 3u) == ut4 ? 1u : 0u);
            }
        }
        if (PADQ == 8 && (szj & 8u)) { /* half round: rows 0..7 = slots o .. o + 7 */
            const tw_u32 da = (PF && SH) ? dan : SH ? tw_lds32(dsh + 4u * (o + ug)) : dgl[o + ug];
            const tw_u32 oa = (da ^ t4s) & ~15u;
            const uint4 a0 = tw_lds128(buf + oa), a1 = tw_lds128(buf + (oa ^ 64u));
            float e[NH][2][4];
#pragma unroll
            for (int h = 0; h < NH; h++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    e[h][0][i] = e[h][1][i] = 0.0f;
            const tw_u32 af[4][4] = {{a0.x, 0u, a0.y, 0u},
                                     {a0.z, 0u, a0.w, 0u},
                                     {a1.x, 0u, a1.y, 0u},
                                     {a1.z, 0u, a1.w, 0u}};
#pragma unroll
            for (int ks = 0; ks < 4; ks++)
#pragma unroll
                for (int h = 0; h < NH; h++)
                    tw_mma<DT>(e[h][(TW_XV & 4) ? 0 : (ks & 1)], af[ks], bx[j][8 * h + 2 * ks],
                               bx[j][8 * h + 2 * ks + 1]);
            const float va = tw_pa_pick<NH>(e, da, 0);
            if (TW_XV & 2)
                tw_stgz(pg + o, va, (da ^ t2) & 6u);
            else
                tw_stgp(po + o + ug, va, ((da >> 1) & 3u) == ut4);
        }
    }
}

// Phase A (gated): partial u over one 64-column slice for every slot of a block of NW warps x
// GPW groups x GT tokens. Shared memory: two weight chunks (2 x CN x 128 B), two staging buffers
// (DCAP descriptors, the block's list offsets and sizes), the (first, end) offset table of all
// chunks (read once at the start, so no chunk waits on a global load). A chunk whose block region
// holds more than DCAP slots reads its descriptors from global memory instead.
template <int DT, int CN, int GPW, int DCAP, int PADQ, int ST, int NW, int PF, int GT>
TW_KERNEL((NW * 32, 1))
    tw_k_phase_a(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wu, int M, int K, int N,
                  int NG, int NC, const tw_u32 *__restrict__ desc,
                  const tw_u32 *__restrict__ offsets, const tw_u32 *__restrict__ sizes,
                  float *__restrict__ partial, tw_u32 pstride, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    constexpr int NGB = NW * GPW, SB = TW_SB(DCAP, 4, NGB), NTHR = NW * 32;
    if (flag[0])
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int s = blockIdx.y, k0 = s * TW_KW;
    const int GB = blockIdx.x * NGB, GE = min(GB + NGB, NG);
    const int G0 = GB + warp * GPW;
    if (TW_XV & 16) /* chunk 0's weights need no list data: in flight before anything else */
        tw_load_chunk<CN, NTHR>(tw_smem_addr(tw_smem), wu, 0, N, K, k0);
    {
        tw_u32 *sre = (tw_u32 *)(tw_smem + ST * CN * 128 + ST * SB);
        for (int i = threadIdx.x; i < NC; i += NTHR) {
            sre[2 * i] = offsets[(long long)i * NG + GB];
            sre[2 * i + 1] = offsets[(long long)i * NG + GE];
        }
    }
    constexpr int NH = GT / 8;
    tw_u32 bx[GPW][8 * NH];
#pragma unroll
    for (int j = 0; j < GPW; j++)
#pragma unroll
        for (int h = 0; h < NH; h++) {
            const int row = min((G0 + j) * GT + 8 * h + g, M - 1);
            const tw_u16 *p = x + (long long)row * K + k0 + 8 * t4;
            const uint4 v0 = *(const uint4 *)p, v1 = *(const uint4 *)(p + 32);
            bx[j][8 * h + 0] = v0.x, bx[j][8 * h + 1] = v0.y, bx[j][8 * h + 2] = v0.z;
            bx[j][8 * h + 3] = v0.w, bx[j][8 * h + 4] = v1.x, bx[j][8 * h + 5] = v1.y;
            bx[j][8 * h + 6] = v1.z, bx[j][8 * h + 7] = v1.w;
        }
    __syncthreads();
    const tw_u32 sbase = tw_smem_addr(tw_smem), stb = sbase + ST * CN * 128, sre = stb + ST * SB;
    float *pout = partial + (long long)s * pstride;
    auto stage = [&](int c) {
        const int b = c % ST;
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        const tw_u32 sb = stb + b * SB;
        if (!(TW_XV & 16) || c > 0)
            tw_load_chunk<CN, NTHR>(sbase + b * CN * 128, wu, c, N, K, k0);
        if (rn <= DCAP)
            tw_load_bytes<NTHR>(sb, desc + ra, rn / 4);
        tw_stage_lists<NGB, NTHR>(sb + DCAP * 4, offsets, sizes, (long long)c * NG + GB, GE - GB);
    };
]==]
    import("ffn_fused_dev").chunk_ring() -- opens the loop over the chunks c
    cuda [==[
        const tw_u32 sb = stb + (c % ST) * SB, so = sb + DCAP * 4;
        const int nj = min(GPW, NG - G0);
        const tw_u32 gl0 = (tw_u32)(warp * GPW);
        const tw_u32 buf = sbase + (c % ST) * CN * 128;
        if (rn <= DCAP)
            tw_pa_chunk<DT, GPW, true, PADQ, NGB, PF, NH>(bx, so, gl0, nj, ra, sb, nullptr, buf,
                                                         pout + ra, g, t4);
        else
            tw_pa_chunk<DT, GPW, false, PADQ, NGB, PF, NH>(bx, so, gl0, nj, ra, 0u, desc + ra, buf,
                                                          pout + ra, g, t4);
        __syncthreads();
    }
}


]==]
end
