-- ffn_small_row.lua — module of ffn_small.cu.lua: the row kernel. C: the template's constants
-- (S, NT, K8, NSL, CL, PL, QL).
-- The row kernel for the rows above the fused kernel's (mid batches), K ≤ 4096 ----
-- twell_ffn_small_row(...the fused kernel's arguments...)
--   grid = M, block = 512, dynamic shared memory = the fused kernel's + 8 · ceil(N/T · (T/C − 1) / 2)
--   + 12 · 512 bytes; emitted only when K ≤ 4096 (16 column slices of 256 at most).
-- Block m: row m, every column. Its 16 warps first compute h of the row's stored pairs (warp w
-- the pairs p ≡ w mod 16: each Wu row read once, by one warp) into shared memory, then each warp
-- sums h · Wd for one 256-column slice over its share of the pairs (NSW warps a slice, warp part
-- q the pairs p ≡ q mod NSW, loads eight Wd rows at a time), and the slice's NSW partials are
-- added in part order. Candidate columns of overflowing row-tiles go in chunks of 512 pairs
-- through the same two phases (the active ones only, in column order). Fixed order everywhere:
-- bitwise reproducible.
return function(C)
    local S, NT, NSL = C.S, C.NT, C.NSL
    local NSW = 1
    while NSW * 2 * NSL <= 16 do
        NSW = NSW * 2
    end
    local RQ = 512
    local PLR = (NT * S.SLOTS + 1) // 2
    if NSL <= 16 then
        cuda [==[
#define TW_ROW_NSW ${NSW}
#define TW_ROW_RQ ${RQ}

/* Lane j of the warp takes the (column, h) of the j-th lane whose `on` is set (in lane order);
 * returns the number set. */
__device__ __forceinline__ int tw_compact(bool on, tw_u32 &n, float &h, int lane) {
    const tw_u32 bal = __ballot_sync(TW_FULL, on);
    tw_u32 b = bal;
    for (int q = 0; q < lane && b; q++)
        b &= b - 1u;
    const int src = b ? __ffs(b) - 1 : 0;
    n = (tw_u32)__shfl_sync(TW_FULL, (int)n, src);
    h = __shfl_sync(TW_FULL, h, src);
    return __popc(bal);
}

extern "C" __global__ void __launch_bounds__(TW_FW * 32, 2)
twell_ffn_small_row(const unsigned short *__restrict__ x, const tw_u32 *__restrict__ packed,
                    const unsigned short *__restrict__ wp, const unsigned short *__restrict__ wu,
                    const unsigned short *__restrict__ wd, unsigned short *__restrict__ y, int M) {
    tw_fused_enter(wd, wu, blockIdx.x < 8u, blockIdx.x, gridDim.x < 8u ? gridDim.x : 8u);
    extern __shared__ __align__(16) unsigned char tw_smem[];
    const tw_fused_smem L = tw_fused_layout(tw_smem);
    uint4 *xs = L.xs;
    tw_u32 *pw = L.pw;
    int *sincl = L.sincl, *sovf = L.sovf;
    float *hs = (float *)L.rest;                 /* [2·PLR] h of the stored entries, by entry */
    float *hc = hs + 2 * ${PLR};                 /* [2·RQ] h of a chunk's candidate columns */
    tw_u32 *ac = (tw_u32 *)(hc + 2 * TW_ROW_RQ); /* [RQ] their pairs' active bits */
    __shared__ float4 red[TW_FW][32][2];
    __shared__ int s_two[2];
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int m = (int)blockIdx.x;
    const tw_fused_row r = tw_fused_stage(x, packed, m, xs, pw, sincl, sovf, s_two);
    const int np = (r.total + 1) >> 1;
    const int part = warp % TW_ROW_NSW, sl = warp / TW_ROW_NSW;
    const bool task = sl < ${NSL};
    const int c0 = sl * 256 + 8 * lane;
    const bool cok = task && c0 < ${S.K};
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        acc[i] = 0.0f;
    for (int cb = 0;; cb += 2 * TW_ROW_RQ) {
        /* phase 1: h of the stored pairs (first round) and of this chunk's candidate pairs */
        if (cb == 0)
            for (int p = warp; p < np; p += TW_FW) {
                tw_u32 n[2];
                float h[2];
                bool two;
                tw_pair_cols(pw, sincl, 2 * p, r.total, n, h, two);
                tw_pair_h(xs, wu, n, two, lane, h);
                if (lane == 0)
                    hs[2 * p] = h[0], hs[2 * p + 1] = h[1];
            }
        const int nqc = min(TW_ROW_RQ, (r.ncand - cb) >> 1);
        for (int l = warp; l < nqc; l += TW_FW) {
            tw_u32 n[2];
            bool a[2];
            float h[2];
            tw_cand_cols(sovf, cb + 2 * l, n);
            tw_cand_h(xs, wp, wu, n, lane, a, h);
            if (lane == 0)
                hc[2 * l] = h[0], hc[2 * l + 1] = h[1], ac[l] = (tw_u32)a[0] | (tw_u32)a[1] << 1;
        }
        __syncthreads();
        /* phase 2: this warp's slice over its part's pairs, 32 entries at a time */
        if (task) {
            if (cb == 0)
                for (int i0 = 0; 2 * (part + TW_ROW_NSW * (i0 >> 1)) < r.total; i0 += 32) {
                    const int i = i0 + lane;
                    const int j = 2 * (part + TW_ROW_NSW * (i >> 1)) + (i & 1);
                    const bool on = j < r.total;
                    const tw_u32 n = on ? tw_fused_entry(pw, sincl, j) & 0xffffu : 0u;
                    const float h = on ? hs[j] : 0.0f;
                    /* j grows with the lane: the entries are the first lanes */
                    tw_lane_fma(acc, n, h, __popc(__ballot_sync(TW_FULL, on)), wd, c0, cok);
                }
            for (int i0 = 0; part + TW_ROW_NSW * (i0 >> 1) < nqc; i0 += 32) {
                const int i = i0 + lane;
                const int l = part + TW_ROW_NSW * (i >> 1), k = i & 1;
                const bool on = l < nqc && ((ac[l] >> k) & 1u) != 0u;
                const int c = cb + 2 * l + k;
                tw_u32 n = on ? (tw_u32)(sovf[c / ${S.T}] * ${S.T} + c % ${S.T}) : 0u;
                float h = on ? hc[2 * l + k] : 0.0f;
                const int nb = tw_compact(on, n, h, lane);
                tw_lane_fma(acc, n, h, nb, wd, c0, cok);
            }
        }
        if (cb + 2 * TW_ROW_RQ >= r.ncand)
            break;
        __syncthreads(); /* the next chunk rewrites hc and ac */
    }
    tw_store_sums(red, acc, y + (size_t)m * ${S.K}, c0, cok, warp, lane, task ? warp - part : -1,
                  TW_ROW_NSW);
}
]==]
    end
end
