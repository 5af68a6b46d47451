-- ffn_small_updown.lua — module of ffn_small.cu.lua: the up and down kernels (more rows than
-- the one-kernel kernels take, where the row kernel does not run): twell_ffn_small_up (neuron-major
-- h of the active pairs and the recompute of overflowing row-tiles, into a scratch) and
-- twell_ffn_small_down (y row by row from it), in three parts the template emits where the source
-- order puts them:
--   up(C)         the up kernel and its pair helpers
--   down_walk(C)  the down kernel's row walk (entries, overflow masks)
--   down(C)       the down kernel
-- C: the template's constants (S, NT, K8, NSL, CL, PL, QL).
local M = {}
function M.up(C)
    local S, NT, K8, NSL, CL, PL, QL = C.S, C.NT, C.K8, C.NSL, C.CL, C.PL, C.QL
    cuda [==[
/* Dynamic shared memory of twell_ffn_small_up for M rows: the [32, Mp] gate table (u16) and the
 * [Mp] overflow masks (u32), Mp = M rounded up to 32. */
#define TW_UP_MP(M) (((M) + 31) & ~31)
#define TW_UP_SMEM(M) (TW_UP_MP(M) * 68)

/* One pending pair of the up kernel. */
struct tw_pair {
    int nl, m;
    unsigned short v; /* stored gate, or TW_OVF_MARK */
};

/* Computes up to two pairs (p[1] only when two): gate recompute for overflow marks, then h. */
__device__ __forceinline__ void tw_up_pairs(const tw_pair (&p)[2], bool two,
                                            const unsigned short *__restrict__ x,
                                            const unsigned short *__restrict__ wp,
                                            const unsigned short *__restrict__ wu,
                                            float *__restrict__ hbuf, tw_u32 *smask, int n0,
                                            int lane) {
    const unsigned short *x0 = x + (size_t)p[0].m * ${S.K}, *x1 = x + (size_t)p[1].m * ${S.K};
    const int n0a = n0 + p[0].nl, n1a = n0 + p[1].nl;
    unsigned short g0 = p[0].v, g1 = two ? p[1].v : (unsigned short)0;
    const bool o0 = g0 == TW_OVF_MARK, o1 = g1 == TW_OVF_MARK;
    if (o0 || o1) { /* the row-tile overflowed: recompute g exactly from the packing weight */
        float r0, r1;
        tw_dot2(x0, wp + (size_t)n0a * ${S.K}, o0, x1, wp + (size_t)n1a * ${S.K}, o1, lane, r0,
                r1);
        if (o0) {
            g0 = tw_act16(r0); /* a positive pattern (NaN: the canonical one) or +0 */
            if (g0 != 0 && lane == 0)
                atomicOr(&smask[p[0].m], 1u << p[0].nl);
        }
        if (o1) {
            g1 = tw_act16(r1);
            if (g1 != 0 && lane == 0)
                atomicOr(&smask[p[1].m], 1u << p[1].nl);
        }
    }
#if TW_GATED
    const bool u0 = g0 != 0, u1 = g1 != 0;
    float r0 = 0.0f, r1 = 0.0f;
    if (u0 || u1)
        tw_dot2(x0, wu + (size_t)n0a * ${S.K}, u0, x1, wu + (size_t)n1a * ${S.K}, u1, lane, r0,
                r1);
    if (lane == 0) {
        if (u0)
            hbuf[(size_t)p[0].m * ${S.N} + n0a] = tw_to_f32(g0) * r0;
        if (u1)
            hbuf[(size_t)p[1].m * ${S.N} + n1a] = tw_to_f32(g1) * r1;
    }
#else
    if (lane == 0) { /* only recomputed pairs reach hbuf; the others use the packed value */
        if (o0 && g0 != 0)
            hbuf[(size_t)p[0].m * ${S.N} + n0a] = tw_to_f32(g0);
        if (o1 && g1 != 0)
            hbuf[(size_t)p[1].m * ${S.N} + n1a] = tw_to_f32(g1);
    }
#endif
}

extern "C" __global__ void __launch_bounds__(256, 2)
twell_ffn_small_up(const unsigned short *__restrict__ x, const tw_u32 *__restrict__ packed,
                   const unsigned short *__restrict__ wp, const unsigned short *__restrict__ wu,
                   float *__restrict__ hbuf, tw_u32 *__restrict__ mask, int M) {
    if (TW_GATED)
        tw_warm(wu, blockIdx.x, gridDim.x);
    tw_pdl_enter();
    extern __shared__ __align__(16) unsigned char tw_smem[];
    const int Mp = TW_UP_MP(M);
    unsigned short *gt = (unsigned short *)tw_smem; /* gt[nl * Mp + m] */
    tw_u32 *smask = (tw_u32 *)(tw_smem + (size_t)Mp * 64);
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int n0 = (int)blockIdx.x * 32, t = n0 / ${S.T};

    for (int i = tid; i < Mp * 16; i += 256)
        ((tw_u32 *)gt)[i] = 0u;
    for (int i = tid; i < Mp; i += 256)
        smask[i] = 0u;
    __syncthreads();
    /* the table: one thread per row */
    for (int m = tid; m < M; m += 256) {
        const tw_u32 *cell = packed + (size_t)m * ${S.NW} + (size_t)t * ${S.W};
        const tw_u32 cnt = __ldg(cell);
        if (cnt > ${S.SLOTS}u) {
            for (int nl = 0; nl < 32; nl++)
                gt[nl * Mp + m] = TW_OVF_MARK;
        } else if (TW_GATED) {
            for (tw_u32 s = 1; s <= cnt; s++) {
                const tw_u32 e = __ldg(cell + s);
                const tw_u32 col = e & 0xffffu;
                if (col >= (tw_u32)(n0 + 32))
                    break; /* ascending columns: the rest belong to later blocks */
                if (col >= (tw_u32)n0)
                    gt[(col - (tw_u32)n0) * Mp + m] = (unsigned short)(e >> 16);
            }
        }
    }
    __syncthreads();

    /* active pairs, neuron-major then row-ascending; pair i to warp i % 8, two at a time */
    tw_pair pend[2]; /* registers: indexed with constants only */
    pend[0].nl = pend[0].m = pend[1].nl = pend[1].m = 0;
    pend[0].v = pend[1].v = 0;
    bool have = false;
    tw_u32 ord = 0;
    for (int nl = 0; nl < 32; nl++) {
        for (int mb = 0; mb < M; mb += 32) {
            const int m = mb + lane;
            const unsigned short v = m < M ? gt[nl * Mp + m] : (unsigned short)0;
            tw_u32 bal = __ballot_sync(TW_FULL, v != 0);
            while (bal) {
                const int q = __ffs(bal) - 1;
                bal &= bal - 1u;
                const unsigned short vq = (unsigned short)__shfl_sync(TW_FULL, (int)v, q);
                if ((ord & 7u) == (tw_u32)warp) {
                    if (!have) {
                        pend[0].nl = nl, pend[0].m = mb + q, pend[0].v = vq;
                        have = true;
                    } else {
                        pend[1].nl = nl, pend[1].m = mb + q, pend[1].v = vq;
                        tw_up_pairs(pend, true, x, wp, wu, hbuf, smask, n0, lane);
                        have = false;
                    }
                }
                ord++;
            }
        }
    }
    if (have)
        tw_up_pairs(pend, false, x, wp, wu, hbuf, smask, n0, lane);
    __syncthreads();
    /* the masks of this block's 32 neurons in the overflowing row-tiles */
    for (int m = tid; m < M; m += 256)
        if (gt[m] == TW_OVF_MARK)
            mask[(size_t)m * ${S.N // 32} + (size_t)(n0 >> 5)] = smask[m];
}

]==]
end
function M.down_walk(C)
    local S, NT, K8, NSL, CL, PL, QL = C.S, C.NT, C.K8, C.NSL, C.CL, C.PL, C.QL
    cuda [==[
/* Up to 32 entries of one row held lane-parallel (lane j: entry word e = value << 16 | column,
 * valid for j < nb), in lane order: h from hbuf (from_hbuf) or the value bits (non-gated stored
 * entries: h = g). */
__device__ __forceinline__ void tw_row_entries(float (&acc)[8], tw_u32 e, bool valid, int nb,
                                               bool from_hbuf, const float *__restrict__ hrow,
                                               const unsigned short *__restrict__ wd, int c0,
                                               bool cok, int lane) {
    const float h = !valid      ? 0.0f
                    : from_hbuf ? __ldg(hrow + (e & 0xffffu))
                                : tw_to_f32((unsigned short)(e >> 16));
    tw_lane_fma(acc, e & 0xffffu, h, nb, wd, c0, cok);
}

/* Lane j's entry word for the j-th set bit of `bits` (columns col0 + bit; its value comes from
 * hbuf); *nb = set bits. */
__device__ __forceinline__ tw_u32 tw_bits_entry(tw_u32 bits, int col0, int lane, int *nb) {
    tw_u32 b = bits;
    for (int k = 0; k < lane && b; k++)
        b &= b - 1u;
    *nb = __popc(bits);
    return b ? (tw_u32)(col0 + __ffs(b) - 1) : 0u;
}

/* Row-tile t of the row overflowed: the up kernel's activity masks of its columns and their h. */
__device__ __forceinline__ void tw_row_overflow(float (&acc)[8], int t, const tw_u32 *__restrict__ mrow,
                                                const float *__restrict__ hrow,
                                                const unsigned short *__restrict__ wd, int c0,
                                                bool cok, int lane) {
    for (int i = 0; i < ${S.T // 32}; i++) {
        const int col0 = t * ${S.T} + 32 * i;
        int nb;
        const tw_u32 e = tw_bits_entry(__ldg(mrow + col0 / 32), col0, lane, &nb);
        tw_row_entries(acc, e, lane < nb, nb, true, hrow, wd, c0, cok, lane);
    }
}

/* Warp `warp` of a row block: the row-tiles t ≡ warp (mod 8), 32 at a time: their count words
 * loaded together, their stored entries flattened (a prefix sum over the tiles) and loaded 32 at
 * a time, so a row costs a few dependent memory steps whatever its number of tiles; entries in
 * (tile, slot) order, then the chunk's overflowing tiles in tile order: a fixed order. */
__device__ __forceinline__ void tw_row_walk(float (&acc)[8], int *sincl, const tw_u32 *__restrict__ prow,
                                            const float *__restrict__ hrow,
                                            const tw_u32 *__restrict__ mrow,
                                            const unsigned short *__restrict__ wd, int c0, bool cok,
                                            int warp, int lane) {
    const int ntw = (${NT} - warp + 7) / 8;
    for (int i0 = 0; i0 < ntw; i0 += 32) {
        const int i = i0 + lane;
        const tw_u32 cnt = i < ntw ? __ldg(prow + (size_t)(warp + 8 * i) * ${S.W}) : 0u;
        const bool ovf = cnt > ${S.SLOTS}u;
        /* counts are at most SLOTS each: the unsigned scan is the int one */
        const int incl = (int)tw_warp_incl_scan(ovf ? 0u : cnt, lane);
        const int total = __shfl_sync(TW_FULL, incl, 31);
        sincl[lane] = incl;
        __syncwarp();
        for (int j0 = 0; j0 < total; j0 += 32) {
            const int j = j0 + lane;
            tw_u32 e = 0u;
            if (j < total) {
                const int lo = tw_first_above(sincl, 32, j); /* the tile whose count covers j */
                const int excl = lo ? sincl[lo - 1] : 0;
                e = __ldg(prow + (size_t)(warp + 8 * (i0 + lo)) * ${S.W} + 1 + (j - excl));
                if ((e & 0xffffu) >= ${S.N}u)
                    e = 0u; /* malformed input: a column past N reads no weight row beyond N */
            }
            tw_row_entries(acc, e, j < total, min(32, total - j0), TW_GATED, hrow, wd, c0, cok,
                           lane);
        }
        __syncwarp(); /* sincl is rewritten by the next chunk */
        tw_u32 ob = __ballot_sync(TW_FULL, ovf);
        while (ob) {
            const int L = __ffs(ob) - 1;
            ob &= ob - 1u;
            tw_row_overflow(acc, warp + 8 * (i0 + L), mrow, hrow, wd, c0, cok, lane);
        }
    }
}

]==]
end
function M.down(C)
    local S, NT, K8, NSL, CL, PL, QL = C.S, C.NT, C.K8, C.NSL, C.CL, C.PL, C.QL
    cuda [==[
extern "C" __global__ void __launch_bounds__(256, 2)
twell_ffn_small_down(const tw_u32 *__restrict__ packed, const unsigned short *__restrict__ wd,
                     const float *__restrict__ hbuf, const tw_u32 *__restrict__ mask,
                     unsigned short *__restrict__ y, int M) {
    if (blockIdx.y == 0)
        tw_warm(wd, blockIdx.x, gridDim.x);
    tw_pdl_enter();
    __shared__ float4 red[8][32][2];
    __shared__ int sincl[8][32];
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int m = (int)blockIdx.y;
    const int c0 = (int)blockIdx.x * 256 + 8 * lane;
    const bool cok = c0 < ${S.K};
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        acc[i] = 0.0f;
    tw_row_walk(acc, sincl[warp], packed + (size_t)m * ${S.NW}, hbuf + (size_t)m * ${S.N},
                mask + (size_t)m * ${S.N // 32}, wd, c0, cok, warp, lane);
    tw_store_sums(red, acc, y + (size_t)m * ${S.K}, c0, cok, warp, lane, 0, 8);
}

]==]
end
return M
