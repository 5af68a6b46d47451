-- ffn_fused_prep.lua — module of ffn_fused.cu.lua: the pre-pass that turns the packed gate into
-- pair lists: tw_k_prep (list sizes, overflow slots and rows), tw_k_scan (one block: offsets,
-- capacities, flag) and tw_k_build (the (chunk, group) lists of descriptors and gate values).
-- Returns a function of D (the template's constants; this part reads none of them).
return function(D)
    cuda [==[
// Pre-pass 1: one warp per group of GT rows reads every cell count once (4 loads in flight per
// lane): list sizes of the group in every chunk (non-overflowing cells only, PADQ-padded), the
// block's (8 groups) size sum per chunk, each overflowing cell's slot in its tile's list (integer
// atomics: consumers index by row and tile, so the order is free), and each row's index among the
// overflowing rows (TW_NONE if it has none). NCMAX >= NC.
template <int PADQ, int NCMAX, int GT>
TW_KERNEL((256)) tw_k_prep(const tw_u32 *__restrict__ packed, int M, int NT, int W, int NC, int TPC,
                            int NG, tw_u32 *__restrict__ cnt, tw_u32 *__restrict__ ovf_rows,
                            tw_u32 *__restrict__ ovf_slot, tw_u32 *__restrict__ orow_idx,
                            tw_u32 *__restrict__ orows, tw_u32 *__restrict__ sizes,
                            tw_u32 *__restrict__ bsum, const tw_u32 *__restrict__ hmark) {
    __shared__ tw_u32 csum[8][NCMAX];
    __shared__ tw_u32 bs[NCMAX];
    __shared__ tw_u32 rowovf[8][GT];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int G = blockIdx.x * 8 + warp, NB = (NG + 7) / 8;
    const bool active = G < NG;
    for (int c = lane; c < NC; c += 32)
        csum[warp][c] = 0;
    for (int c = tid; c < NC; c += 256)
        bs[c] = 0;
    if (lane < GT)
        rowovf[warp][lane] = 0;
    __syncthreads();
    const tw_u32 S = (tw_u32)(W - 1);
    tw_u64 tot = 0; /* count words summed: the exact active values (for the AUTO path) */
    if (active) {
        const int ncell = GT * NT;
        for (int i0 = 0; i0 < ncell; i0 += 128) {
            tw_u32 v[4];
            int rr[4], tt[4];
            bool hm[4]; /* the row goes the heavy-row route: counted, no pairs, no overflow */
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = i0 + 32 * u + lane, r = i / NT;
                const long long m = (long long)GT * G + r;
                rr[u] = i < ncell && m < M ? r : -1;
                tt[u] = i - r * NT;
                v[u] = rr[u] >= 0 ? packed[(m * NT + tt[u]) * W] : 0u;
                hm[u] = rr[u] >= 0 && hmark && hmark[m] != 0u;
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (rr[u] < 0)
                    continue;
                const int t = tt[u];
                tot += v[u];
                if (hm[u])
                    continue;
                if (v[u] <= S) {
                    if (v[u])
                        atomicAdd(&csum[warp][t / TPC], v[u]);
                } else {
                    const long long m = (long long)GT * G + rr[u];
                    const tw_u32 sl = atomicAdd(&cnt[t], 1u);
                    ovf_rows[(long long)t * M + sl] = (tw_u32)m;
                    ovf_slot[m * NT + t] = sl;
                    atomicAdd(&rowovf[warp][rr[u]], 1u);
                }
            }
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        tot += __shfl_xor_sync(TW_FULL, tot, o);
    if (lane == 0 && tot)
        atomicAdd((unsigned long long *)(cnt + ((NT + 2) & ~1)), (unsigned long long)tot);
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
    const long long m = (long long)GT * G + lane;
    if (active && lane < GT && m < M) {
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
    tw_k_scan(const tw_u32 *__restrict__ bsum, int nb, tw_u32 *__restrict__ bbase,
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
            tw_warp_incl_scan2(ia, ib, lane);
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
        const tw_u64 incl = tw_warp_incl_scan(v, lane);
        wsum[lane] = incl - v;
        if (lane == 31)
            stotal = incl;
    }
    __syncthreads();
    tw_u64 run = wsum[warp];
    for (int i0 = beg; i0 < end; i0 += 32) {
        const int i = i0 + lane;
        const tw_u32 v = i < end ? bsum[i] : 0u;
        const tw_u32 incl = tw_warp_incl_scan(v, lane);
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

// Pre-pass 3: writes each (chunk, group) list (layout: see the helpers at the top) and its
// offset (block base + the sizes of the block's earlier groups): one warp per list; cell counts
// prefix-summed in shared memory (overflowing cells count 0), entries fetched flat (32 per step,
// binary search over the cells), two passes (bucket counts, then placement by ballot ranks), then
// the pads. eidx (or NULL): each entry's word index in packed (pads: not written).
template <int TPCM, int BW, int GT>
TW_KERNEL((BW * 32))
    tw_k_build(const tw_u32 *__restrict__ packed, int M, int NT, int W, int N, int CN, int NC,
                int TPC, int NG, const tw_u32 *__restrict__ bbase,
                const tw_u32 *__restrict__ sizes, tw_u32 *__restrict__ offsets,
                tw_u32 *__restrict__ desc, tw_u16 *__restrict__ gv,
                const tw_u32 *__restrict__ flag, const tw_u32 *__restrict__ hmark,
                tw_u32 *__restrict__ eidx) {
    __shared__ tw_u32 spre[BW][GT * TPCM + 1];
    if (flag[0])
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long wid = (long long)blockIdx.x * BW + warp;
    if (wid >= (long long)NG * NC)
        return;
    tw_u32 *pre = spre[warp];
    const int c = (int)(wid / NG), G = (int)(wid - (long long)c * NG);
    const int t0 = c * TPC, nt = min(TPC, NT - t0), ncell = GT * nt;
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
            const long long m = (long long)GT * G + r;
            if (m < M && !(hmark && hmark[m] != 0u)) {
                v = packed[(m * NT + t0 + (i - r * nt)) * W];
                v = v > S ? 0u : v;
            }
        }
        const tw_u32 incl = tw_warp_incl_scan(v, lane);
        if (i < ncell)
            pre[i] = carry + incl - v;
        carry += __shfl_sync(TW_FULL, incl, 31);
    }
    __syncwarp();
    const tw_u32 n = carry;
    /* entry j -> chunk row (sanitised: a column outside the chunk becomes row 0 with g = 0),
       token column, gate bits, index of its word in packed */
    auto fetch = [&](tw_u32 j, tw_u32 &row, tw_u32 &tok, tw_u32 &g, tw_u32 &wi) {
        int lo = 0, hi = ncell - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (pre[mid] <= j)
                lo = mid;
            else
                hi = mid - 1;
        }
        const int r = lo / nt;
        const long long m = (long long)GT * G + r;
        wi = (tw_u32)((m * NT + t0 + (lo - r * nt)) * W + 1 + (j - pre[lo]));
        const tw_u32 word = packed[wi];
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
    /* a list of at most 32 entries (most of them) is fetched once: the placement pass reuses
       the first pass's entry in each lane */
    tw_u32 row1 = 0, tok1 = 0, g1 = 0, wi1 = 0;
    for (tw_u32 j0 = 0; j0 < n; j0 += 32) {
        const bool valid = j0 + lane < n;
        tw_u32 row = 0, tok = 0, g = 0, wi = 0;
        if (valid)
            fetch(j0 + lane, row, tok, g, wi);
        row1 = row, tok1 = tok, g1 = g, wi1 = wi;
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
        tw_u32 row = row1, tok = tok1, g = g1, wi = wi1; /* n <= 32: the first pass's */
        if (valid && n > 32u)
            fetch(j0 + lane, row, tok, g, wi);
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
            desc[slot] = tw_desc(row, tok);
            gv[slot] = (tw_u16)g;
            if (eidx)
                eidx[slot] = wi;
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
        desc[slot] = tw_desc(cls | (b2 << 2), 0u);
        gv[slot] = 0;
    }
}


]==]
end
