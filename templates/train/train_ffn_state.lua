-- train_ffn_state.lua — module of train_ffn.cu.lua: the saved state's construction: the recount
-- of overflowing row-tiles (SIMT), the exclusive scans (modes tiles, rows, hist, neurons), the
-- owner table and the spill words.
return function(D)
    local S, WPB, NT, TM = D.S, D.WPB, D.NT, D.TM
    cuda [==[
/* ---- recount: overflowing row-tiles recomputed, rewritten and masked ---- */

extern "C" __global__ void __launch_bounds__(${32 * WPB})
twell_train_recount(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wg,
                    tw_u32 *__restrict__ packed, tw_u32 *__restrict__ mask, long long M, int all) {
    extern __shared__ float tw_sm[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    float *xs = tw_sm + warp * ${S.K};
    tw_u16 *vals = (tw_u16 *)(tw_sm + ${WPB * S.K}) + warp * ${S.T};
    const long long tiles = M * ${NT};
    for (long long r = tw_gwarp(); r < tiles; r += tw_nwarps()) {
        const long long m = r / ${NT};
        const int t = (int)(r % ${NT});
        tw_u32 *cell = packed + m * ${S.NW} + t * ${S.W};
        if (!all && cell[0] <= ${S.SLOTS}u)
            continue;
        tw_row_to_smem(xs, x + m * ${S.K}, lane);
        for (int c0 = 0; c0 < ${S.T}; c0 += 32) {
            const long long n = (long long)t * ${S.T} + c0 + lane;
            const tw_u16 v = tw_act(tw_dot_ref(xs, wg + n * ${S.K}));
            vals[c0 + lane] = v;
            const tw_u32 b = __ballot_sync(TW_FULL, tw_active(v));
            if (lane == 0)
                mask[r * ${TM} + c0 / 32] = b;
        }
        __syncwarp();
        tw_pack_row_tile_warp(vals, cell, (unsigned int)(t * ${S.T}));
        __syncwarp();
    }
}

/* ---- scans: exclusive, two u64 channels, 2048 items per block of 256 threads, one pass ---- */

struct tw_sa { /* every field 8 bytes: the host mirrors this layout (cuda_train.c) */
    const tw_u32 *packed;
    const tw_u64 *in64;
    const tw_u32 *in32;
    tw_u64 *o0, *o1, *o2;
    tw_u32 *o32;
    tw_u64 *tot; /* [0], [1]: the channel totals; [2]: a mode's extra value */
    tw_u64 n;    /* items */
    tw_u64 p0, p1;
};

/* Exclusive block scan of (a, b) over blockDim.x threads (a multiple of 32, at most 1024);
 * *ta, *tb receive the block totals. sh: 64 u64 of shared memory. */
__device__ __forceinline__ void tw_block_scan2(tw_u64 &a, tw_u64 &b, tw_u64 *sh, tw_u64 &ta,
                                               tw_u64 &tb) {
    const int lane = (int)(threadIdx.x & 31u), warp = (int)(threadIdx.x >> 5);
    const int nw = (int)(blockDim.x >> 5);
    tw_u64 ia = a, ib = b;
    tw_warp_incl_scan2(ia, ib, lane);
    if (lane == 31)
        sh[warp] = ia, sh[32 + warp] = ib;
    __syncthreads();
    if (warp == 0) {
        tw_u64 wa = lane < nw ? sh[lane] : 0ull, wb = lane < nw ? sh[32 + lane] : 0ull;
        tw_warp_incl_scan2(wa, wb, lane);
        sh[lane] = wa, sh[32 + lane] = wb;
    }
    __syncthreads();
    const tw_u64 pa = warp > 0 ? sh[warp - 1] : 0ull, pb = warp > 0 ? sh[32 + warp - 1] : 0ull;
    ta = sh[nw - 1], tb = sh[32 + nw - 1];
    a = pa + ia - a, b = pb + ib - b;
    __syncthreads();
}

/* Row chunk length of the rows mode: the device's choice, reported to the host in tot[2]. */
/* Row chunk length: max(lo, 4·ceil(nnz/M)), lo from the host (64 normally): rows more than four
 * times the mean (and longer than lo) are split. runtime/ops/train/sparse/train_layout.c has the same formula. */
__device__ __forceinline__ tw_u64 tw_row_chunk_len(tw_u64 nnz, tw_u64 M, tw_u64 lo) {
    const tw_u64 e = 4ull * ((nnz + M - 1) / M);
    return e > lo ? e : lo;
}
__device__ __forceinline__ tw_u64 tw_chunks_of(tw_u64 cnt, tw_u64 len) {
    return cnt <= len ? 1ull : (cnt + len - 1) / len;
}
]==]

    -- Per mode: the item values (v0, v1) and what an item's exclusive offsets (e0, e1) store; the
    -- last item also stores the totals (its offsets plus its values) at index n. Optional load8 /
    -- store8: the same for a thread's 8 consecutive items i0 .. i0 + 7 (all < n) by 16-byte
    -- accesses (a warp's loads and stores then fill whole sectors; 8 scalar accesses a lane, 32
    -- bytes apart, made 8x the memory transactions); e0, e1 enter as item i0's offsets. The
    -- buffers are 256-byte aligned from the allocator and i0 is a multiple of 8.
    local MODES = {
        { name = "tiles", value = [==[
    const tw_u32 c = a.packed[(i / TW_NT) * TW_NW + (i % TW_NT) * TW_W];
    v0 = c;
    v1 = c > TW_SLOTS ? c - TW_SLOTS : 0u;
]==], store = [==[
    a.o0[i] = e0;
    a.o1[i] = e1;
    if (i % TW_NT == 0)
        a.o2[i / TW_NT] = e0;
    if (i + 1 == a.n) {
        a.o0[a.n] = e0 + v0;
        a.o1[a.n] = e1 + v1;
        a.o2[a.n / TW_NT] = e0 + v0;
    }
]==], store8 = [==[
    tw_u64 c0[8], c1[8];
#pragma unroll
    for (int q = 0; q < 8; q++) {
        const tw_u64 i = i0 + (tw_u64)q;
        c0[q] = e0, c1[q] = e1;
        if (i % TW_NT == 0)
            a.o2[i / TW_NT] = e0;
        e0 += v0[q], e1 += v1[q];
        if (i + 1 == a.n) {
            a.o0[a.n] = e0;
            a.o1[a.n] = e1;
            a.o2[a.n / TW_NT] = e0;
        }
    }
    ulonglong2 *d0 = (ulonglong2 *)(a.o0 + i0), *d1 = (ulonglong2 *)(a.o1 + i0);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        d0[q] = make_ulonglong2(c0[2 * q], c0[2 * q + 1]);
        d1[q] = make_ulonglong2(c1[2 * q], c1[2 * q + 1]);
    }
]==] },
        { name = "rows", value = [==[
    const tw_u64 len = a.p1 ? a.p1 : tw_row_chunk_len(a.in64[a.n], a.n, a.p0);
    const tw_u64 ch = tw_chunks_of(a.in64[i + 1] - a.in64[i], len);
    v0 = ch;
    v1 = ch > 1ull ? ch : 0ull;
]==], store = [==[
    a.o0[i] = e0;
    a.o1[i] = e1;
    if (i + 1 == a.n) {
        a.o0[a.n] = e0 + v0;
        a.o1[a.n] = e1 + v1;
        a.tot[2] = a.p1 ? a.p1 : tw_row_chunk_len(a.in64[a.n], a.n, a.p0);
    }
]==] },
        { name = "hist", value = [==[
    v0 = a.in32[i];
    v1 = 0ull;
]==], store = [==[
    a.o32[i] = (tw_u32)e0;
    if (i % a.p0 == 0)
        a.o0[i / a.p0] = e0;
    if (i + 1 == a.n)
        a.o0[a.n / a.p0] = e0 + v0;
]==], load8 = [==[
    const uint4 *src = (const uint4 *)(a.in32 + i0);
    const uint4 x0 = src[0], x1 = src[1];
    v0[0] = x0.x, v0[1] = x0.y, v0[2] = x0.z, v0[3] = x0.w;
    v0[4] = x1.x, v0[5] = x1.y, v0[6] = x1.z, v0[7] = x1.w;
#pragma unroll
    for (int q = 0; q < 8; q++)
        v1[q] = 0ull;
]==], store8 = [==[
    tw_u32 c[8];
    tw_u64 r = i0 % a.p0; /* i % p0, advanced (one division for the 8 items) */
#pragma unroll
    for (int q = 0; q < 8; q++) {
        const tw_u64 i = i0 + (tw_u64)q;
        c[q] = (tw_u32)e0;
        if (r == 0)
            a.o0[i / a.p0] = e0;
        if (i + 1 == a.n)
            a.o0[a.n / a.p0] = e0 + v0[q];
        e0 += v0[q];
        r = r + 1ull == a.p0 ? 0ull : r + 1ull;
    }
    uint4 *dst = (uint4 *)(a.o32 + i0);
    dst[0] = make_uint4(c[0], c[1], c[2], c[3]);
    dst[1] = make_uint4(c[4], c[5], c[6], c[7]);
]==] },
        { name = "neurons", value = [==[
    const tw_u64 ch = tw_chunks_of(a.in64[i + 1] - a.in64[i], a.p1);
    v0 = ch;
    v1 = ch - 1ull;
]==], store = [==[
    a.o0[i] = e0;
    a.o1[i] = e1;
    for (tw_u64 c = e0; c < e0 + v0; c++) /* the owner table of its chunks (twell_train_owners) */
        a.o32[c] = (tw_u32)i;
    if (i + 1 == a.n) {
        a.o0[a.n] = e0 + v0;
        a.o1[a.n] = e1 + v1;
    }
]==] },
    }

    for _, md in ipairs(MODES) do
        local value, store = md.value, md.store
        -- (text substituted by ${...} is not scanned again: the names are joined here)
        local load8 = md.load8 or ([==[
#pragma unroll
    for (int q = 0; q < 8; q++)
        tw_scan_value_]==] .. md.name .. [==[(a, i0 + (tw_u64)q, v0[q], v1[q]);
]==])
        local store8 = md.store8 or ([==[
#pragma unroll
    for (int q = 0; q < 8; q++) {
        tw_scan_store_]==] .. md.name .. [==[(a, i0 + (tw_u64)q, e0, e1, v0[q], v1[q]);
        e0 += v0[q], e1 += v1[q];
    }
]==])
        cuda [==[
__device__ __forceinline__ void tw_scan_value_${md.name}(const tw_sa &a, tw_u64 i, tw_u64 &v0,
                                                        tw_u64 &v1) {
${value}}
__device__ __forceinline__ void tw_scan_store_${md.name}(const tw_sa &a, tw_u64 i, tw_u64 e0,
                                                        tw_u64 e1, tw_u64 v0, tw_u64 v1) {
${store}}
__device__ __forceinline__ void tw_scan_load8_${md.name}(const tw_sa &a, tw_u64 i0, tw_u64 (&v0)[8],
                                                        tw_u64 (&v1)[8]) {
${load8}}
__device__ __forceinline__ void tw_scan_store8_${md.name}(const tw_sa &a, tw_u64 i0, tw_u64 e0,
                                                         tw_u64 e1, const tw_u64 (&v0)[8],
                                                         const tw_u64 (&v1)[8]) {
${store8}}

/* Single pass (decoupled look-back): the block with ticket b scans its 2048 items, publishes
 * its aggregate (flag 2·epoch + 1), and its first warp adds its predecessors' aggregates, 32 a
 * step (one per lane, nearest first), up to the nearest that has published its inclusive prefix
 * (flag 2·epoch + 2); it publishes its own, then stores. (One thread walking back one block a
 * step was slower than three launches: the walk is a chain of dependent loads.) A
 * block waits only on lower tickets, which are already running: no deadlock at any grid size.
 * Integer sums: the result does not depend on the order. The last block writes the totals. */
extern "C" __global__ void __launch_bounds__(256) twell_train_scan_${md.name}(tw_sa a,
                                                                             tw_u32 *sb,
                                                                             tw_u32 epoch) {
    __shared__ tw_u64 sh[64];
    __shared__ tw_u64 s_pre[2];
    __shared__ tw_u32 s_b;
    const tw_u64 nb = (a.n + 2047ull) / 2048ull;
    /* ticket (+ pad), then a record of 5 u64 per block: flag (low word; the only thing ever
     * stored there, so a scan of any size reads no other scan's sums as a flag), aggregate x 2,
     * inclusive prefix x 2 */
    tw_u32 *ticket = sb;
    tw_u64 *rec = (tw_u64 *)(sb + 2);
    if (threadIdx.x == 0) {
        const tw_u32 b = atomicAdd(ticket, 1u);
        if ((tw_u64)b + 1ull == nb)
            *ticket = 0u; /* every block has its ticket: ready for the next scan */
        s_b = b;
    }
    __syncthreads();
    const tw_u64 b = s_b;
    const tw_u64 base = b * 2048ull + threadIdx.x * 8ull;
    tw_u64 v0[8], v1[8], s0 = 0, s1 = 0;
    const bool full = base + 8ull <= a.n; /* all 8 items: the 16-byte path where the mode has one */
    if (full)
        tw_scan_load8_${md.name}(a, base, v0, v1);
    for (int q = 0; q < 8; q++) {
        const tw_u64 i = base + (tw_u64)q;
        if (!full) {
            v0[q] = v1[q] = 0;
            if (i < a.n)
                tw_scan_value_${md.name}(a, i, v0[q], v1[q]);
        }
        s0 += v0[q], s1 += v1[q];
    }
    tw_u64 t0, t1;
    tw_block_scan2(s0, s1, sh, t0, t1);
    if (threadIdx.x < 32u) { /* warp 0 looks back, 32 predecessors a step */
        const int lane = (int)threadIdx.x;
        const tw_u32 FA = 2u * epoch + 1u, FI = 2u * epoch + 2u; /* aggregate, inclusive */
        volatile tw_u64 *vd = rec;
#define TW_SCAN_FLAG(k) (*(volatile tw_u32 *)(rec + 5 * (k)))
        tw_u64 p0 = 0, p1 = 0;
        if (b > 0) {
            if (lane == 0) {
                vd[5 * b + 1] = t0, vd[5 * b + 2] = t1;
                __threadfence();
                TW_SCAN_FLAG(b) = FA;
            }
            for (long long j = (long long)b - 1;; j -= 32) {
                const long long k = j - lane; /* lane 0 the nearest predecessor */
                tw_u32 f = k >= 0 ? TW_SCAN_FLAG(k) : FI; /* before block 0: a prefix of 0 */
                while (!__all_sync(TW_FULL, f == FA || f == FI))
                    if (f != FA && f != FI)
                        f = TW_SCAN_FLAG(k);
                __threadfence();
                const tw_u32 inc = __ballot_sync(TW_FULL, f == FI);
                const int stop = inc ? __ffs((int)inc) - 1 : 32;
                tw_u64 a0 = 0, a1 = 0;
                if (lane < stop)
                    a0 = vd[5 * k + 1], a1 = vd[5 * k + 2];
                else if (lane == stop && k >= 0)
                    a0 = vd[5 * k + 3], a1 = vd[5 * k + 4];
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    a0 += __shfl_xor_sync(TW_FULL, a0, o);
                    a1 += __shfl_xor_sync(TW_FULL, a1, o);
                }
                p0 += a0, p1 += a1;
                if (inc)
                    break;
            }
        }
        if (lane == 0) {
            vd[5 * b + 3] = p0 + t0, vd[5 * b + 4] = p1 + t1;
            __threadfence();
            TW_SCAN_FLAG(b) = FI;
#undef TW_SCAN_FLAG
            if (b + 1ull == nb)
                a.tot[0] = p0 + t0, a.tot[1] = p1 + t1;
            s_pre[0] = p0, s_pre[1] = p1;
        }
    }
    __syncthreads();
    s0 += s_pre[0], s1 += s_pre[1];
    if (full) {
        tw_scan_store8_${md.name}(a, base, s0, s1, v0, v1);
        return;
    }
    for (int q = 0; q < 8; q++) {
        const tw_u64 i = base + (tw_u64)q;
        if (i < a.n)
            tw_scan_store_${md.name}(a, i, s0, s1, v0[q], v1[q]);
        s0 += v0[q], s1 += v1[q];
    }
}
]==]
    end

    cuda [==[
/* owner[c] = i for every c in [off[i], off[i+1]), i < n. */
extern "C" __global__ void __launch_bounds__(256) twell_train_owners(const tw_u64 *__restrict__ off,
                                                                   long long n,
                                                                   tw_u32 *__restrict__ owner) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        for (tw_u64 c = off[i]; c < off[i + 1]; c++)
            owner[c] = (tw_u32)i;
}

/* ---- spill: the entries of overflowing row-tiles beyond the slots ---- */

extern "C" __global__ void __launch_bounds__(${32 * WPB})
twell_train_spill(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wg,
                  const tw_u32 *__restrict__ packed, const tw_u32 *__restrict__ mask,
                  const tw_u64 *__restrict__ spill_off, tw_u32 *__restrict__ spill, long long M) {
    extern __shared__ float tw_sm[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    float *xs = tw_sm + warp * ${S.K};
    const long long tiles = M * ${NT};
    for (long long r = tw_gwarp(); r < tiles; r += tw_nwarps()) {
        const long long m = r / ${NT};
        const int t = (int)(r % ${NT});
        const tw_u32 cnt = packed[m * ${S.NW} + t * ${S.W}];
        if (cnt <= ${S.SLOTS}u)
            continue;
        tw_row_to_smem(xs, x + m * ${S.K}, lane);
        const tw_u32 *mk = mask + r * ${TM};
        const tw_u64 base = spill_off[r], have = spill_off[r + 1] - base;
        for (tw_u32 j0 = 0; j0 < cnt - ${S.SLOTS}u; j0 += 32u) {
            const tw_u32 j = j0 + (tw_u32)lane; /* this lane's spill entry */
            if (j < cnt - ${S.SLOTS}u && j < have) {
                tw_u32 k = ${S.SLOTS}u + j, col = 0; /* the k-th active column (0-based) */
                for (int w = 0; w < ${TM}; w++) {
                    const tw_u32 bits = mk[w], pc = (tw_u32)__popc(bits);
                    if (k < pc) {
                        tw_u32 b = bits;
                        for (tw_u32 s = 0; s < k; s++)
                            b &= b - 1u;
                        col = (tw_u32)w * 32u + (tw_u32)(__ffs((int)b) - 1);
                        break;
                    }
                    k -= pc;
                }
                const tw_u32 n = (tw_u32)t * ${S.T}u + col;
                const tw_u16 v = tw_act(tw_dot_ref(xs, wg + (long long)n * ${S.K}));
                spill[base + j] = ((tw_u32)v << 16) | n;
            }
        }
        __syncwarp();
    }
}

]==]
end
