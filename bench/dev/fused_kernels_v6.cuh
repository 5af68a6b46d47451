// fused_kernels_v6.cuh — v6 of the fused TwELL inference kernels (development only, not yet in the
// NVRTC template): v5 (fused_kernels.cuh) with no global load inside the chunk loops (the block's
// list offsets and sizes are staged with each chunk, the (first, end) offsets of all chunks read
// once per CTA), a pre-pass whose scan runs over per-block sums (prep writes them, build derives
// each list's offset), and timing-only DIAG variants of the phases. bench/dev/NOTES-fused.md, v6.
#include "fused_kernels.cuh"

// cp.async of 4 bytes (no alignment beyond the word).
__device__ __forceinline__ void tw_cp4(tw_u32 dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
// Shared-memory layout shared by the v5 phases: per buffer, DCAP list slots of each staged array,
// then the block's NGB + 1 list offsets and NGB sizes of the chunk; after both buffers, a table of
// (first offset, end offset) of the block's lists per chunk (NC <= 256).
#define TW6_RE 2048
#define TW6_SB(DCAP, SLOTB, NGB) ((DCAP) * (SLOTB) + (2 * (NGB) + 4) * 4)
// Stages the block's list offsets (NGB + 1 words) and sizes (NGB words) of chunk c at so.
template <int NGB, int NTHR>
__device__ __forceinline__ void tw_stage_lists(tw_u32 so, const tw_u32 *__restrict__ offsets,
                                               const tw_u32 *__restrict__ sizes, long long cb,
                                               int n) {
    for (int i = threadIdx.x; i < 2 * NGB + 1; i += NTHR) {
        const tw_u32 *src = i <= NGB ? offsets + cb + min(i, n) : sizes + cb + min(i - NGB - 1, n - 1);
        tw_cp4(so + 4u * (tw_u32)i, src);
    }
}

// Pre-pass 1: one warp per group of 8 rows reads every cell count once (4 loads in flight per
// lane): list sizes of the group in every chunk (non-overflowing cells only, PADQ-padded), the
// block's (8 groups) size sum per chunk, each overflowing cell's slot in its tile's list (integer
// atomics: consumers index by row and tile, so the order is free), and each row's index among the
// overflowing rows (TW_NONE if it has none). NCMAX >= NC.
template <int PADQ, int NCMAX>
TW_KERNEL((256)) tw_k_prep6(const tw_u32 *__restrict__ packed, int M, int NT, int W, int NC, int TPC,
                            int NG, tw_u32 *__restrict__ cnt, tw_u32 *__restrict__ ovf_rows,
                            tw_u32 *__restrict__ ovf_slot, tw_u32 *__restrict__ orow_idx,
                            tw_u32 *__restrict__ orows, tw_u32 *__restrict__ sizes,
                            tw_u32 *__restrict__ bsum) {
    __shared__ tw_u32 csum[8][NCMAX];
    __shared__ tw_u32 bs[NCMAX];
    __shared__ tw_u32 rowovf[8][8];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int G = blockIdx.x * 8 + warp, NB = (NG + 7) / 8;
    const bool active = G < NG;
    for (int c = lane; c < NC; c += 32)
        csum[warp][c] = 0;
    for (int c = tid; c < NC; c += 256)
        bs[c] = 0;
    if (lane < 8)
        rowovf[warp][lane] = 0;
    __syncthreads();
    const tw_u32 S = (tw_u32)(W - 1);
    if (active) {
        const int ncell = 8 * NT;
        for (int i0 = 0; i0 < ncell; i0 += 128) {
            tw_u32 v[4];
            int rr[4], tt[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = i0 + 32 * u + lane, r = i / NT;
                const long long m = 8LL * G + r;
                rr[u] = i < ncell && m < M ? r : -1;
                tt[u] = i - r * NT;
                v[u] = rr[u] >= 0 ? packed[(m * NT + tt[u]) * W] : 0u;
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (rr[u] < 0)
                    continue;
                const int t = tt[u];
                if (v[u] <= S) {
                    if (v[u])
                        atomicAdd(&csum[warp][t / TPC], v[u]);
                } else {
                    const long long m = 8LL * G + rr[u];
                    const tw_u32 sl = atomicAdd(&cnt[t], 1u);
                    ovf_rows[(long long)t * M + sl] = (tw_u32)m;
                    ovf_slot[m * NT + t] = sl;
                    atomicAdd(&rowovf[warp][rr[u]], 1u);
                }
            }
        }
    }
    __syncwarp();
    for (int c = lane; c < NC; c += 32) {
        const tw_u32 sz = (csum[warp][c] + (PADQ - 1)) & ~(tw_u32)(PADQ - 1);
        if (active) {
            sizes[(long long)c * NG + G] = sz;
            atomicAdd(&bs[c], sz);
        }
    }
    __syncthreads();
    for (int c = tid; c < NC; c += 256)
        bsum[(long long)c * NB + blockIdx.x] = bs[c];
    const long long m = 8LL * G + lane;
    if (active && lane < 8 && m < M) {
        tw_u32 idx = TW_NONE;
        if (rowovf[warp][lane]) {
            idx = atomicAdd(&cnt[NT], 1u);
            orows[idx] = (tw_u32)m;
        }
        orow_idx[m] = idx;
    }
}

// Pre-pass 2 (one block of 1024): exclusive scan of the block sums (chunk-major, nb = NC * NB
// entries; each warp a contiguous segment, coalesced), the total (offsets[NL]), overflow slot
// bases per tile and item bases of ovf_gu (64 rows x 64 columns per item), capacity checks, flags.
TW_KERNEL((1024))
    tw_k_scan6(const tw_u32 *__restrict__ bsum, int nb, tw_u32 *__restrict__ bbase,
               const tw_u32 *__restrict__ cnt, int NT, int NCB, tw_u32 *__restrict__ ovf_base,
               tw_u32 *__restrict__ item_base, tw_u32 *__restrict__ flag,
               tw_u32 *__restrict__ total_out, tw_u32 pair_cap, tw_u32 ovf_cap, tw_u32 orow_cap) {
    __shared__ tw_u64 wsum[32];
    __shared__ tw_u64 stotal;
    __shared__ tw_u32 ovf_total;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (warp == 0) { /* the per-tile overflow scan */
        tw_u32 a = 0, b = 0;
        for (int t0 = 0; t0 < NT; t0 += 32) {
            const int t = t0 + lane;
            const tw_u32 c = t < NT ? cnt[t] : 0u, it = ((c + 63u) / 64u) * (tw_u32)NCB;
            tw_u32 ia = c, ib = it;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const tw_u32 va = __shfl_up_sync(TW_FULL, ia, o), vb = __shfl_up_sync(TW_FULL, ib, o);
                ia += lane >= o ? va : 0u;
                ib += lane >= o ? vb : 0u;
            }
            if (t < NT) {
                ovf_base[t] = a + ia - c;
                item_base[t] = b + ib - it;
            }
            a += __shfl_sync(TW_FULL, ia, 31);
            b += __shfl_sync(TW_FULL, ib, 31);
        }
        if (lane == 0) {
            ovf_base[NT] = a;
            item_base[NT] = b;
            ovf_total = a;
        }
    }
    const int seg = (((nb + 31) / 32) + 31) & ~31;
    const int beg = min(warp * seg, nb), end = min(beg + seg, nb);
    tw_u64 sum = 0;
#pragma unroll 4
    for (int i = beg + lane; i < end; i += 32)
        sum += bsum[i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(TW_FULL, sum, o);
    if (lane == 0)
        wsum[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        const tw_u64 v = wsum[lane];
        tw_u64 incl = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const tw_u64 u = __shfl_up_sync(TW_FULL, incl, o);
            incl += lane >= o ? u : 0ull;
        }
        wsum[lane] = incl - v;
        if (lane == 31)
            stotal = incl;
    }
    __syncthreads();
    tw_u64 run = wsum[warp];
    for (int i0 = beg; i0 < end; i0 += 32) {
        const int i = i0 + lane;
        const tw_u32 v = i < end ? bsum[i] : 0u;
        tw_u32 incl = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const tw_u32 u = __shfl_up_sync(TW_FULL, incl, o);
            incl += lane >= o ? u : 0u;
        }
        if (i < end)
            bbase[i] = (tw_u32)(run + incl - v);
        run += __shfl_sync(TW_FULL, incl, 31);
    }
    if (tid == 0) {
        const tw_u64 total = stotal;
        const tw_u32 orw = cnt[NT];
        total_out[0] = (tw_u32)(total > pair_cap ? pair_cap : total);
        flag[0] = (ovf_total > ovf_cap || orw > orow_cap ? 1u : 0u) | (total > pair_cap ? 2u : 0u);
        flag[1] = (tw_u32)(total > 0xffffffffull ? 0xffffffffull : total);
        flag[2] = ovf_total;
        flag[3] = orw;
    }
}

// Pre-pass 3: writes each (chunk, group) list (layout: see the v5 helpers at the top) and its
// offset (block base + the sizes of the block's earlier groups): one warp per list; cell counts
// prefix-summed in shared memory (overflowing cells count 0), entries fetched flat (32 per step,
// binary search over the cells), two passes (bucket counts, then placement by ballot ranks), then
// the pads.
template <int TPCM, int BW>
TW_KERNEL((BW * 32))
    tw_k_build6(const tw_u32 *__restrict__ packed, int M, int NT, int W, int N, int CN, int NC,
                int TPC, int NG, const tw_u32 *__restrict__ bbase,
                const tw_u32 *__restrict__ sizes, tw_u32 *__restrict__ offsets,
                tw_u32 *__restrict__ desc, tw_u16 *__restrict__ gv,
                const tw_u32 *__restrict__ flag) {
    __shared__ tw_u32 spre[BW][8 * TPCM + 1];
    if (flag[0])
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long wid = (long long)blockIdx.x * BW + warp;
    if (wid >= (long long)NG * NC)
        return;
    tw_u32 *pre = spre[warp];
    const int c = (int)(wid / NG), G = (int)(wid - (long long)c * NG);
    const int t0 = c * TPC, nt = min(TPC, NT - t0), ncell = 8 * nt;
    const int G8 = G & ~7, NB = (NG + 7) / 8;
    tw_u32 before = lane < G - G8 ? sizes[(long long)c * NG + G8 + lane] : 0u;
#pragma unroll
    for (int o = 4; o > 0; o >>= 1)
        before += __shfl_xor_sync(TW_FULL, before, o);
    const tw_u32 out = bbase[(long long)c * NB + (G >> 3)] + __shfl_sync(TW_FULL, before, 0);
    if (lane == 0)
        offsets[wid] = out;
    const tw_u32 size = sizes[wid], S = (tw_u32)(W - 1);
    const tw_u32 rows_c = (tw_u32)min(CN, N - c * CN), cstart = (tw_u32)(c * CN);
    tw_u32 carry = 0;
    for (int i0 = 0; i0 < ncell; i0 += 32) {
        const int i = i0 + lane;
        tw_u32 v = 0;
        if (i < ncell) {
            const int r = i / nt;
            const long long m = 8LL * G + r;
            if (m < M) {
                v = packed[(m * NT + t0 + (i - r * nt)) * W];
                v = v > S ? 0u : v;
            }
        }
        tw_u32 incl = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const tw_u32 u = __shfl_up_sync(TW_FULL, incl, o);
            incl += lane >= o ? u : 0u;
        }
        if (i < ncell)
            pre[i] = carry + incl - v;
        carry += __shfl_sync(TW_FULL, incl, 31);
    }
    __syncwarp();
    const tw_u32 n = carry;
    /* entry j -> chunk row (sanitised: a column outside the chunk becomes row 0 with g = 0),
       token column, gate bits */
    auto fetch = [&](tw_u32 j, tw_u32 &row, tw_u32 &tok, tw_u32 &g) {
        int lo = 0, hi = ncell - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (pre[mid] <= j)
                lo = mid;
            else
                hi = mid - 1;
        }
        const int r = lo / nt;
        const long long m = 8LL * G + r;
        const tw_u32 word = packed[(m * NT + t0 + (lo - r * nt)) * W + 1 + (j - pre[lo])];
        row = (word & 0xffffu) - cstart;
        g = word >> 16;
        if (row >= rows_c)
            row = 0, g = 0;
        tok = (tw_u32)r;
    };
    tw_u32 cnt8[8];
#pragma unroll
    for (int b = 0; b < 8; b++)
        cnt8[b] = 0;
    for (tw_u32 j0 = 0; j0 < n; j0 += 32) {
        const bool valid = j0 + lane < n;
        tw_u32 row = 0, tok = 0, g = 0;
        if (valid)
            fetch(j0 + lane, row, tok, g);
        const tw_u32 q = tw_bucket(row);
#pragma unroll
        for (int b = 0; b < 8; b++)
            cnt8[b] += __popc(__ballot_sync(TW_FULL, valid && q == (tw_u32)b));
    }
    tw_u32 CS[4], MC[4], ZC[4], OC[4];
    {
        tw_u32 a = 0;
#pragma unroll
        for (int cl = 0; cl < 4; cl++) {
            ZC[cl] = cnt8[2 * cl], OC[cl] = cnt8[2 * cl + 1];
            CS[cl] = a;
            MC[cl] = min(ZC[cl], OC[cl]);
            a += ZC[cl] + OC[cl];
        }
    }
    auto pick = [](const tw_u32(&arr)[4], tw_u32 i) {
        return i == 0 ? arr[0] : i == 1 ? arr[1] : i == 2 ? arr[2] : arr[3];
    };
    const tw_u32 lt = (1u << lane) - 1u;
    tw_u32 run8[8];
#pragma unroll
    for (int b = 0; b < 8; b++)
        run8[b] = 0;
    for (tw_u32 j0 = 0; j0 < n; j0 += 32) {
        const bool valid = j0 + lane < n;
        tw_u32 row = 0, tok = 0, g = 0;
        if (valid)
            fetch(j0 + lane, row, tok, g);
        const tw_u32 q = tw_bucket(row);
        tw_u32 mine = 0, base = 0;
#pragma unroll
        for (int b = 0; b < 8; b++) {
            const tw_u32 bal = __ballot_sync(TW_FULL, valid && q == (tw_u32)b);
            if (q == (tw_u32)b) {
                mine = bal;
                base = run8[b];
            }
            run8[b] += __popc(bal);
        }
        if (valid) {
            const tw_u32 cl = q >> 1, i = base + __popc(mine & lt);
            const tw_u32 si = pick(CS, cl) + tw_class_pos(i, q & 1u, pick(MC, cl));
            const tw_u32 slot = out + tw_slot_of(si, size);
            desc[slot] = tw_desc5(row, tok);
            gv[slot] = (tw_u16)g;
        }
    }
    /* pads: the classes their 4-set lacks, bit 2 opposite to their phase-A partner */
    const tw_u32 S4 = size >> 2;
    auto class_of = [&](tw_u32 sj) {
        tw_u32 cl = 0;
#pragma unroll
        for (int k = 1; k < 4; k++)
            cl = CS[k] <= sj ? (tw_u32)k : cl;
        return cl;
    };
    for (tw_u32 si = n + lane; si < size; si += 32) {
        const tw_u32 s = si % S4, qp = si / S4;
        tw_u32 present = 0, nreal = 0;
#pragma unroll
        for (tw_u32 qq = 0; qq < 4; qq++) {
            const tw_u32 sj = s + qq * S4;
            if (sj < n) {
                present |= 1u << class_of(sj);
                nreal++;
            }
        }
        const tw_u32 k = qp - nreal; /* this pad takes the k-th missing class, ascending */
        tw_u32 cls = 0;
        for (tw_u32 cl = 0, seen = 0; cl < 4; cl++)
            if (!((present >> cl) & 1u)) {
                if (seen == k)
                    cls = cl;
                seen++;
            }
        const tw_u32 sip = (s ^ 1u) + qp * S4;
        tw_u32 b2 = s & 1u;
        if (sip < n) {
            const tw_u32 cl = class_of(sip), pos = sip - pick(CS, cl), mc = pick(MC, cl);
            const tw_u32 pb = pos < 2u * mc ? (pos & 1u) : (pick(ZC, cl) > pick(OC, cl) ? 0u : 1u);
            b2 = pb ^ 1u;
        }
        const tw_u32 slot = out + tw_slot_of(si, size);
        desc[slot] = tw_desc5(cls | (b2 << 2), 0u);
        gv[slot] = 0;
    }
}


// Phase A chunk for one warp (v6): full rounds of 16 slots, then (PADQ 8) a half round. Lane
// (g, t4) reads pieces t4 and t4 + 4 (k = 8 t4 .. +7 and 32 + 8 t4 .. +7 of the slice) of the
// rows in slots g and g + 8; the x fragments hold the same k columns (mma k order permuted
// identically). Slot g's pair keeps D[g][tok]; the lane with t4 = tok >> 1 stores it.
// so: the staged list offsets (NGB + 1) and sizes (NGB) of the chunk; gl0: this warp's first
// group in the block; nj: its groups below NG; ra: the block's first offset.
template <int DT, int GPW, bool SH, int PADQ, int DIAG, int NGB>
__device__ __forceinline__ void tw_pa6_chunk(const tw_u32 (&bx)[GPW][8], tw_u32 so, tw_u32 gl0,
                                             int nj, tw_u32 ra, tw_u32 dsh, const tw_u32 *dgl,
                                             tw_u32 buf, float *po, int g, int t4) {
    const tw_u32 t4s = (tw_u32)t4 << 4, ut4 = (tw_u32)t4, ug = (tw_u32)g;
#pragma unroll
    for (int j = 0; j < GPW; j++) {
        if (j >= nj)
            break;
        const tw_u32 szj = tw_lds32(so + 4u * (NGB + 1 + gl0 + j));
        const tw_u32 nfull = szj >> 4;
        tw_u32 o = tw_lds32(so + 4u * (gl0 + j)) - ra;
        for (tw_u32 r = 0; r < nfull; r++, o += 16) {
            tw_u32 da, db;
            if (SH) {
                da = tw_lds32(dsh + 4u * (o + ug));
                db = tw_lds32(dsh + 4u * (o + ug + 8u));
            } else {
                da = dgl[o + ug];
                db = dgl[o + ug + 8u];
            }
            const tw_u32 oa = (da ^ t4s) & ~15u, ob = (db ^ t4s) & ~15u;
            const uint4 a0 = tw_lds128(buf + oa), a1 = tw_lds128(buf + (oa ^ 64u));
            const uint4 b0 = tw_lds128(buf + ob), b1 = tw_lds128(buf + (ob ^ 64u));
            float e0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if constexpr ((DIAG & 1) != 0) {
                e0[0] = __uint_as_float(a0.x ^ a0.z ^ a1.x ^ a1.z ^ bx[j][0]);
                e0[2] = __uint_as_float(b0.y ^ b0.w ^ b1.y ^ b1.w ^ bx[j][7]);
            } else {
                {
                    const tw_u32 af[4] = {a0.x, b0.x, a0.y, b0.y};
                    tw_mma<DT>(e0, af, bx[j][0], bx[j][1]);
                }
                {
                    const tw_u32 af[4] = {a0.z, b0.z, a0.w, b0.w};
                    tw_mma<DT>(e1, af, bx[j][2], bx[j][3]);
                }
                {
                    const tw_u32 af[4] = {a1.x, b1.x, a1.y, b1.y};
                    tw_mma<DT>(e0, af, bx[j][4], bx[j][5]);
                }
                {
                    const tw_u32 af[4] = {a1.z, b1.z, a1.w, b1.w};
                    tw_mma<DT>(e1, af, bx[j][6], bx[j][7]);
                }
            }
            const float va = (da & 1u) ? e0[1] + e1[1] : e0[0] + e1[0];
            const float vb = (db & 1u) ? e0[3] + e1[3] : e0[2] + e1[2];
            const tw_u32 never = (DIAG & 2) ? (da == TW_NONE ? 1u : 0u) : 1u;
            tw_stgp(po + o + ug, va, never & (((da >> 1) & 3u) == ut4 ? 1u : 0u));
            tw_stgp(po + o + ug + 8u, vb, never & (((db >> 1) & 3u) == ut4 ? 1u : 0u));
        }
        if (PADQ == 8 && (szj & 8u)) { /* half round: rows 0..7 = slots o .. o + 7 */
            const tw_u32 da = SH ? tw_lds32(dsh + 4u * (o + ug)) : dgl[o + ug];
            const tw_u32 oa = (da ^ t4s) & ~15u;
            const uint4 a0 = tw_lds128(buf + oa), a1 = tw_lds128(buf + (oa ^ 64u));
            float e0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            {
                const tw_u32 af[4] = {a0.x, 0u, a0.y, 0u};
                tw_mma<DT>(e0, af, bx[j][0], bx[j][1]);
            }
            {
                const tw_u32 af[4] = {a0.z, 0u, a0.w, 0u};
                tw_mma<DT>(e1, af, bx[j][2], bx[j][3]);
            }
            {
                const tw_u32 af[4] = {a1.x, 0u, a1.y, 0u};
                tw_mma<DT>(e0, af, bx[j][4], bx[j][5]);
            }
            {
                const tw_u32 af[4] = {a1.z, 0u, a1.w, 0u};
                tw_mma<DT>(e1, af, bx[j][6], bx[j][7]);
            }
            const float va = (da & 1u) ? e0[1] + e1[1] : e0[0] + e1[0];
            tw_stgp(po + o + ug, va, ((da >> 1) & 3u) == ut4);
        }
    }
}

// Phase A (v6, gated): partial u over one 64-column slice for every slot of a block of 16 warps x
// GPW groups x 8 tokens. Shared memory: two weight chunks (2 x CN x 128 B), two staging buffers
// (DCAP descriptors, the block's list offsets and sizes), the (first, end) offset table of all
// chunks (read once at the start, so no chunk waits on a global load). A chunk whose block region
// holds more than DCAP slots reads its descriptors from global memory instead.
// DIAG (timing experiments only, results wrong): 1 no mma, 2 no partial stores, 8 weights loaded
// for the first chunk only.
template <int DT, int CN, int GPW, int DCAP, int PADQ, int DIAG = 0>
TW_KERNEL((512, 1))
    tw_k_phase_a6(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wu, int M, int K, int N,
                  int NG, int NC, const tw_u32 *__restrict__ desc,
                  const tw_u32 *__restrict__ offsets, const tw_u32 *__restrict__ sizes,
                  float *__restrict__ partial, tw_u32 pstride, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    constexpr int NGB = 16 * GPW, SB = TW6_SB(DCAP, 4, NGB);
    if (flag[0])
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int s = blockIdx.y, k0 = s * TW_KW;
    const int GB = blockIdx.x * NGB, GE = min(GB + NGB, NG);
    const int G0 = GB + warp * GPW;
    {
        tw_u32 *sre = (tw_u32 *)(tw_smem + 2 * CN * 128 + 2 * SB);
        for (int i = threadIdx.x; i < NC; i += 512) {
            sre[2 * i] = offsets[(long long)i * NG + GB];
            sre[2 * i + 1] = offsets[(long long)i * NG + GE];
        }
    }
    tw_u32 bx[GPW][8];
#pragma unroll
    for (int j = 0; j < GPW; j++) {
        const int row = min((G0 + j) * 8 + g, M - 1);
        const tw_u16 *p = x + (long long)row * K + k0 + 8 * t4;
        const uint4 v0 = *(const uint4 *)p, v1 = *(const uint4 *)(p + 32);
        bx[j][0] = v0.x, bx[j][1] = v0.y, bx[j][2] = v0.z, bx[j][3] = v0.w;
        bx[j][4] = v1.x, bx[j][5] = v1.y, bx[j][6] = v1.z, bx[j][7] = v1.w;
    }
    __syncthreads();
    const tw_u32 sbase = tw_smem_addr(tw_smem), stb = sbase + 2 * CN * 128, sre = stb + 2 * SB;
    float *pout = partial + (long long)s * pstride;
    auto stage = [&](int c) {
        const int b = c & 1;
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        const tw_u32 sb = stb + b * SB;
        if (!(DIAG & 8) || c < 2)
            tw_load_chunk<CN, 512>(sbase + b * CN * 128, wu, c, N, K, k0);
        if (rn <= DCAP)
            tw_load_bytes<512>(sb, desc + ra, rn / 4);
        tw_stage_lists<NGB, 512>(sb + DCAP * 4, offsets, sizes, (long long)c * NG + GB, GE - GB);
    };
    stage(0);
    tw_cp_commit();
    for (int c = 0; c < NC; c++) {
        if (c + 1 < NC)
            stage(c + 1);
        tw_cp_commit();
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        tw_cp_wait<1>();
        __syncthreads();
        const tw_u32 sb = stb + (c & 1) * SB, so = sb + DCAP * 4;
        const int nj = min(GPW, NG - G0);
        const tw_u32 gl0 = (tw_u32)(warp * GPW);
        const tw_u32 buf = sbase + (c & 1) * CN * 128;
        if (rn <= DCAP)
            tw_pa6_chunk<DT, GPW, true, PADQ, DIAG, NGB>(bx, so, gl0, nj, ra, sb, nullptr, buf,
                                                         pout + ra, g, t4);
        else
            tw_pa6_chunk<DT, GPW, false, PADQ, DIAG, NGB>(bx, so, gl0, nj, ra, 0u, desc + ra, buf,
                                                          pout + ra, g, t4);
        __syncthreads();
    }
}


// Phase B chunk for one warp (v6). Lane (g, t4) owns the slots 4 t4 .. 4 t4 + 3 of a round
// (k = 2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9 of the mma) and reads logical piece pib(g) (8 output
// columns) of each slot's Wd row with one 16-byte load; prmt pairs the two slots of a k pair.
// Output column of mma row g in m-tile mt: 8 pib(g) + 2 mt, of row g + 8: that + 1, so a lane's
// accumulators cover 8 consecutive columns of its two tokens. B = h at the slot's token column:
// gated, the hi and lo halves (two mmas; fp16 scaled per round); non-gated, g itself.
template <int DT, int GATED, int GPW, bool SH, int PADQ, int DIAG, int NGB>
__device__ __forceinline__ void tw_pb6_chunk(float (&acc)[GPW][4][4], tw_u32 so, tw_u32 gl0, int nj,
                                             tw_u32 ra, tw_u32 dsh, tw_u32 vsh, const tw_u32 *dgl,
                                             const void *vgl, const tw_u32 *rexp, tw_u32 buf, int g,
                                             int t4) {
    const tw_u32 ug = (tw_u32)g, pis = tw_pib(ug) << 4, ut4 = (tw_u32)t4;
#pragma unroll
    for (int j = 0; j < GPW; j++) {
        if (j >= nj)
            break;
        const tw_u32 szj = tw_lds32(so + 4u * (NGB + 1 + gl0 + j));
        const tw_u32 nfull = szj >> 4;
        tw_u32 o = tw_lds32(so + 4u * (gl0 + j)) - ra;
        for (tw_u32 r = 0; r < nfull; r++, o += 16) {
            const tw_u32 q = o + 4u * ut4;
            const uint4 D = SH ? tw_lds128(dsh + 4u * q) : *(const uint4 *)(dgl + q);
            const tw_u32 d[4] = {D.x, D.y, D.z, D.w};
            tw_u32 L[4][4];
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                const uint4 v = tw_lds128(buf + ((d[jj] ^ pis) & ~15u));
                L[jj][0] = v.x, L[jj][1] = v.y, L[jj][2] = v.z, L[jj][3] = v.w;
            }
            if constexpr (GATED) {
                const uint4 H = SH ? tw_lds128(vsh + 4u * q) : *(const uint4 *)((const tw_u32 *)vgl + q);
                const tw_u32 m0 = (d[0] & 7u) == ug ? H.x : 0u, m1 = (d[1] & 7u) == ug ? H.y : 0u;
                const tw_u32 m2 = (d[2] & 7u) == ug ? H.z : 0u, m3 = (d[3] & 7u) == ug ? H.w : 0u;
                const tw_u32 bh0 = tw_prmt2(m0, m1, 0x7632u), bl0 = tw_prmt2(m0, m1, 0x5410u);
                const tw_u32 bh1 = tw_prmt2(m2, m3, 0x7632u), bl1 = tw_prmt2(m2, m3, 0x5410u);
                float sinv = 1.0f;
                if constexpr (DT == 1)
                    sinv = tw_ex_inv<DT>(rexp[o >> 4]);
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a[4] = {tw_prmt2(L[0][mt], L[1][mt], 0x5410u),
                                         tw_prmt2(L[0][mt], L[1][mt], 0x7632u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x5410u),
                                         tw_prmt2(L[2][mt], L[3][mt], 0x7632u)};
                    if constexpr ((DIAG & 1) != 0) {
                        acc[j][mt][0] += __uint_as_float(a[0] ^ a[3] ^ bh0 ^ bl1);
                        acc[j][mt][1] += __uint_as_float(a[1] ^ a[2] ^ bh1 ^ bl0);
                    } else if constexpr (DT == 0) {
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
                const tw_u32 k0 = ((d[0] & 7u) == ug ? 0xffffu : 0u) | ((d[1] & 7u) == ug ? 0xffff0000u : 0u);
                const tw_u32 k1 = ((d[2] & 7u) == ug ? 0xffffu : 0u) | ((d[3] & 7u) == ug ? 0xffff0000u : 0u);
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
                const tw_u32 m0 = (D.x & 7u) == ug ? H.x : 0u, m1 = (D.y & 7u) == ug ? H.y : 0u;
                const tw_u32 bh = tw_prmt2(m0, m1, 0x7632u), bl = tw_prmt2(m0, m1, 0x5410u);
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    const tw_u32 a0 = tw_prmt2(L0[mt], L1[mt], 0x5410u);
                    const tw_u32 a1 = tw_prmt2(L0[mt], L1[mt], 0x7632u);
                    tw_mma8<DT>(acc[j][mt], a0, a1, bh);
                    tw_mma8<DT>(acc[j][mt], a0, a1, bl);
                }
            } else {
                const tw_u32 Gv = SH ? tw_lds32(vsh + 2u * q) : *(const tw_u32 *)((const tw_u16 *)vgl + q);
                const tw_u32 k0 = ((D.x & 7u) == ug ? 0xffffu : 0u) | ((D.y & 7u) == ug ? 0xffff0000u : 0u);
                const tw_u32 b0 = Gv & k0;
#pragma unroll
                for (int mt = 0; mt < 4; mt++)
                    tw_mma8<DT>(acc[j][mt], tw_prmt2(L0[mt], L1[mt], 0x5410u),
                                tw_prmt2(L0[mt], L1[mt], 0x7632u), b0);
            }
        }
    }
}

// Phase B (v6): y^T[64-column slice x 8 tokens] per group, accumulated over all chunks in
// registers; overflowing rows add their dense part (ovf_y) once at the end; y leaves in 16-byte
// stores. Shared memory: two weight chunks, two staging buffers (DCAP descriptors, DCAP hl words
// (gated) or gate values, the block's list offsets and sizes), the (first, end) offset table of
// all chunks. DIAG (timing experiments only, results wrong): 1 no mma, 8 weights loaded for the
// first chunk only.
template <int DT, int GATED, int CN, int GPW, int DCAP, int PADQ, int DIAG = 0>
TW_KERNEL((512, 1))
    tw_k_phase_b6(const tw_u16 *__restrict__ wd, int M, int K, int N, int NG, int NC,
                  const tw_u32 *__restrict__ desc, const tw_u16 *__restrict__ gv,
                  const tw_u32 *__restrict__ hl, const tw_u32 *__restrict__ rexp,
                  const tw_u32 *__restrict__ offsets, const tw_u32 *__restrict__ sizes,
                  const tw_u32 *__restrict__ orow_idx, const float *__restrict__ ovf_y,
                  tw_u16 *__restrict__ y, const tw_u32 *__restrict__ flag) {
    extern __shared__ __align__(128) unsigned char tw_smem[];
    constexpr int VB = GATED ? 4 : 2; /* bytes per slot of the value array */
    constexpr int NGB = 16 * GPW, SB = TW6_SB(DCAP, 4 + VB, NGB);
    if (flag[0])
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int s = blockIdx.y, k0 = s * TW_KW;
    const int GB = blockIdx.x * NGB, GE = min(GB + NGB, NG);
    const int G0 = GB + warp * GPW;
    {
        tw_u32 *sre = (tw_u32 *)(tw_smem + 2 * CN * 128 + 2 * SB);
        for (int i = threadIdx.x; i < NC; i += 512) {
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
    const tw_u32 sbase = tw_smem_addr(tw_smem), stb = sbase + 2 * CN * 128, sre = stb + 2 * SB;
    auto stage = [&](int c) {
        const int b = c & 1;
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        const tw_u32 sb = stb + b * SB;
        if (!(DIAG & 8) || c < 2)
            tw_load_chunk<CN, 512>(sbase + b * CN * 128, wd, c, N, K, k0);
        if (rn <= DCAP) {
            tw_load_bytes<512>(sb, desc + ra, rn / 4);
            if (GATED)
                tw_load_bytes<512>(sb + DCAP * 4, hl + ra, rn / 4);
            else
                tw_load_bytes<512>(sb + DCAP * 4, gv + ra, rn / 8);
        }
        tw_stage_lists<NGB, 512>(sb + DCAP * (4 + VB), offsets, sizes, (long long)c * NG + GB,
                                 GE - GB);
    };
    stage(0);
    tw_cp_commit();
    for (int c = 0; c < NC; c++) {
        if (c + 1 < NC)
            stage(c + 1);
        tw_cp_commit();
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        tw_cp_wait<1>();
        __syncthreads();
        const tw_u32 buf = sbase + (c & 1) * CN * 128, sb = stb + (c & 1) * SB;
        const tw_u32 so = sb + DCAP * (4 + VB), gl0 = (tw_u32)(warp * GPW);
        const int nj = min(GPW, NG - G0);
        const void *vgl = GATED ? (const void *)(hl + ra) : (const void *)(gv + ra);
        const tw_u32 *rx = (DT == 1 && GATED) ? rexp + (ra >> 4) : rexp;
        if (rn <= DCAP)
            tw_pb6_chunk<DT, GATED, GPW, true, PADQ, DIAG, NGB>(acc, so, gl0, nj, ra, sb,
                                                                sb + DCAP * 4, nullptr, vgl, rx,
                                                                buf, g, t4);
        else
            tw_pb6_chunk<DT, GATED, GPW, false, PADQ, DIAG, NGB>(acc, so, gl0, nj, ra, 0u, 0u,
                                                                 desc + ra, vgl, rx, buf, g, t4);
        __syncthreads();
    }
    const int pc = k0 + 8 * (int)tw_pib((tw_u32)g);
#pragma unroll
    for (int j = 0; j < GPW; j++) {
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const long long m = (long long)(G0 + j) * 8 + 2 * t4 + hf;
            if (m < M) {
                float v[8];
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    v[2 * mt] = acc[j][mt][hf];
                    v[2 * mt + 1] = acc[j][mt][2 + hf];
                }
                const tw_u32 oi = orow_idx[m];
                if (oi != TW_NONE) {
                    const float4 *py = (const float4 *)(ovf_y + (long long)oi * K + pc);
                    const float4 f0 = py[0], f1 = py[1];
                    v[0] += f0.x, v[1] += f0.y, v[2] += f0.z, v[3] += f0.w;
                    v[4] += f1.x, v[5] += f1.y, v[6] += f1.z, v[7] += f1.w;
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
