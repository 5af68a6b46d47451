-- ffn_small_fused.lua — module of ffn_small.cu.lua: the one-kernel inference for few rows
-- (twell_ffn_small_fused, and on sm_90 twell_ffn_small_fused_cl), in two parts:
--   dev(C)      the row staging, entry lookup and pair helpers (the row kernel uses them too)
--   kernels(C)  the two kernels
-- C: the template's constants (S, NT, K8, NSL, CL, PL, QL).
local M = {}
function M.dev(C)
    local S, NT, K8, NSL, CL, PL, QL = C.S, C.NT, C.K8, C.NSL, C.CL, C.PL, C.QL
    cuda [==[
/* The address of shared-memory word `addr` in the block of cluster rank `rank` (sm_90+). */
__device__ __forceinline__ tw_u32 tw_dsmem(tw_u32 addr, tw_u32 rank) {
    tw_u32 r = 0u;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
#endif
    return r;
}

/* ---- the one-kernel inference for few rows (twell_ffn_small_fused, twell_ffn_small_fused_cl) ----
 * Both stage x_m and the packed row m in shared memory together (one dependent memory step),
 * scan the row-tiles' stored counts into a flat entry index (tw_fused_stage) and treat the entries
 * as pairs (2p, 2p + 1); the columns of overflowing row-tiles follow as candidate pairs in (tile,
 * column) order, their g recomputed from the packing weight and only the active ones used. Each
 * pair's Wd columns and (gated) whole Wu rows are loaded together (the second step). Every sum
 * runs in a fixed order (pairs ascending within a warp, then the warps in order): bitwise
 * reproducible. */
#define TW_FW 16 /* warps of a fused block */
#define TW_ZERO4 make_uint4(0u, 0u, 0u, 0u)

struct tw_fused_row {
    int total, ncand; /* stored entries; candidate columns (T per overflowing row-tile) */
};

/* The one-kernel kernels' opening: blocks `part` < nparts (warm) warm the page translations of
 * Wd and (gated) Wu, then the grid dependency wait. */
__device__ __forceinline__ void tw_fused_enter(const unsigned short *__restrict__ wd,
                                               const unsigned short *__restrict__ wu, bool warm,
                                               unsigned part, unsigned nparts) {
    if (warm) {
        tw_warm(wd, part, nparts);
        if (TW_GATED)
            tw_warm(wu, part, nparts);
    }
    tw_pdl_enter();
}

/* Their dynamic shared memory's common part: x_m (K·2 bytes), the packed row (4·N/C), the tiles'
 * inclusive counts and the overflowing tiles (4·N/T each); `rest` is what follows. */
struct tw_fused_smem {
    uint4 *xs;
    tw_u32 *pw;
    int *sincl, *sovf;
    unsigned char *rest;
};
__device__ __forceinline__ tw_fused_smem tw_fused_layout(unsigned char *base) {
    tw_fused_smem L;
    L.xs = (uint4 *)base;
    L.pw = (tw_u32 *)(base + ${S.K * 2});
    L.sincl = (int *)(L.pw + ${S.NW});
    L.sovf = L.sincl + ${NT};
    L.rest = (unsigned char *)(L.sovf + ${NT});
    return L;
}

/* Stages x_m and the packed row m (both K·2 + 4·N/C bytes of the dynamic shared memory), then
 * warp 0 scans the tiles: sincl[t] = stored entries of tiles 0..t (0 for an overflowing tile),
 * sovf = the overflowing tiles ascending. All threads call it. */
__device__ __forceinline__ tw_fused_row tw_fused_stage(const unsigned short *__restrict__ x,
                                                       const tw_u32 *__restrict__ packed, int m,
                                                       uint4 *xs, tw_u32 *pw, int *sincl,
                                                       int *sovf, int *s_two) {
    const int tid = (int)threadIdx.x, lane = tid & 31;
    const uint4 *xrow = (const uint4 *)(x + (size_t)m * ${S.K});
    const tw_u32 *prow = packed + (size_t)m * ${S.NW};
    for (int i = tid; i < ${K8}; i += TW_FW * 32)
        xs[i] = __ldg(xrow + i);
    for (int i = tid; i < ${S.NW}; i += TW_FW * 32)
        pw[i] = __ldg(prow + i);
    __syncthreads();
    if (tid < 32) {
        int run = 0, nov = 0;
        for (int t0 = 0; t0 < ${NT}; t0 += 32) {
            const int t = t0 + lane;
            const tw_u32 cnt = t < ${NT} ? pw[t * ${S.W}] : 0u;
            const bool ovf = cnt > ${S.SLOTS}u;
            const int incl = run + (int)tw_warp_incl_scan(ovf ? 0u : cnt, lane);
            if (t < ${NT})
                sincl[t] = incl;
            run = __shfl_sync(TW_FULL, incl, 31);
            const tw_u32 ob = __ballot_sync(TW_FULL, ovf);
            if (ovf)
                sovf[nov + __popc(ob & ((1u << lane) - 1u))] = t;
            nov += __popc(ob);
        }
        if (lane == 0)
            s_two[0] = run, s_two[1] = nov * ${S.T};
    }
    __syncthreads();
    tw_fused_row r;
    r.total = s_two[0], r.ncand = s_two[1];
    return r;
}

/* Entry word j of the staged row (j < total): the first tile whose inclusive count exceeds j; a
 * word whose column is past N (malformed input) comes back as 0 (value +0, column 0). */
__device__ __forceinline__ tw_u32 tw_fused_entry(const tw_u32 *pw, const int *sincl, int j) {
    const int lo = tw_first_above(sincl, ${NT}, j);
    const tw_u32 e = pw[lo * ${S.W} + 1 + (j - (lo ? sincl[lo - 1] : 0))];
    return (e & 0xffffu) < ${S.N}u ? e : 0u; /* malformed input: a column past N reads row 0, +0 */
}

/* Stored pair (j, j + 1), j even: columns n[0..1], h (gated: g · x_m · Wu_n by the warp); `two`
 * says whether j + 1 exists. Issue the pair's Wd loads before calling it. */
__device__ __forceinline__ void tw_pair_cols(const tw_u32 *pw, const int *sincl, int j, int total,
                                             tw_u32 (&n)[2], float (&g)[2], bool &two) {
    two = j + 1 < total;
    const tw_u32 e0 = tw_fused_entry(pw, sincl, j);
    const tw_u32 e1 = two ? tw_fused_entry(pw, sincl, j + 1) : 0u;
    n[0] = e0 & 0xffffu, n[1] = e1 & 0xffffu;
    g[0] = tw_to_f32((unsigned short)(e0 >> 16));
    g[1] = two ? tw_to_f32((unsigned short)(e1 >> 16)) : 0.0f;
}
__device__ __forceinline__ void tw_pair_h(const uint4 *xs, const unsigned short *__restrict__ wu,
                                          const tw_u32 (&n)[2], bool two, int lane,
                                          float (&h)[2]) {
#if TW_GATED
    float u0, u1;
    tw_dot2s(xs, wu + (size_t)n[0] * ${S.K}, true, wu + (size_t)n[1] * ${S.K}, two, lane, u0, u1);
    h[0] *= u0;
    h[1] *= u1;
#endif
}

/* Candidate pair (c, c + 1), c even (T even: one tile): columns n[0..1], g recomputed exactly from
 * the packing weight, a[i] = active, h (gated: g · x_m · Wu_n for the active ones, else 0). */
__device__ __forceinline__ void tw_cand_cols(const int *sovf, int c, tw_u32 (&n)[2]) {
    n[0] = (tw_u32)(sovf[c / ${S.T}] * ${S.T} + c % ${S.T});
    n[1] = n[0] + 1u;
}
__device__ __forceinline__ void tw_cand_h(const uint4 *xs, const unsigned short *__restrict__ wp,
                                          const unsigned short *__restrict__ wu,
                                          const tw_u32 (&n)[2], int lane, bool (&a)[2],
                                          float (&h)[2]) {
    float r0, r1;
    tw_dot2s(xs, wp + (size_t)n[0] * ${S.K}, true, wp + (size_t)n[1] * ${S.K}, true, lane, r0, r1);
    const unsigned short g0 = tw_act16(r0), g1 = tw_act16(r1); /* a NaN: active, canonical */
    a[0] = g0 != 0u;
    a[1] = g1 != 0u;
    h[0] = a[0] ? tw_to_f32(g0) : 0.0f;
    h[1] = a[1] ? tw_to_f32(g1) : 0.0f;
#if TW_GATED
    if (a[0] || a[1]) {
        float u0, u1;
        tw_dot2s(xs, wu + (size_t)n[0] * ${S.K}, a[0], wu + (size_t)n[1] * ${S.K}, a[1], lane, u0,
                 u1);
        h[0] *= u0;
        h[1] *= u1;
    }
#endif
}

/* acc += h[i] · (the lane's 8 columns of Wd row n[i]) for the pair's used members, in order. */
__device__ __forceinline__ void tw_pair_fma(float (&acc)[8], const uint4 (&v2)[2],
                                            const float (&h2)[2], bool u0, bool u1) {
    const uint4 v[8] = {u0 ? v2[0] : v2[1], v2[1]};
    const float h[8] = {u0 ? h2[0] : h2[1], h2[1]};
    tw_wd_fma(acc, v, h, (int)u0 + (int)u1);
}
__device__ __forceinline__ void tw_pair_wd(const unsigned short *__restrict__ wd,
                                           const tw_u32 (&n)[2], bool l0, bool l1, int c0,
                                           bool cok, uint4 (&v)[2]) {
    v[0] = cok && l0 ? __ldg((const uint4 *)(wd + (size_t)n[0] * ${S.K} + c0)) : TW_ZERO4;
    v[1] = cok && l1 ? __ldg((const uint4 *)(wd + (size_t)n[1] * ${S.K} + c0)) : TW_ZERO4;
}

]==]
end
function M.kernels(C)
    local S, NT, K8, NSL, CL, PL, QL = C.S, C.NT, C.K8, C.NSL, C.CL, C.PL, C.QL
    cuda [==[
/* Block (s, m): columns [256s, 256s + 256) of row m. Warp w takes the pairs p ≡ w (mod 16); each
 * block of the row repeats the dots for its columns (K/256 times the Wu reads, from L2 after the
 * first). Dynamic shared memory: K·2 + 4·N/C + 8·N/T bytes. */
extern "C" __global__ void __launch_bounds__(TW_FW * 32, 1)
twell_ffn_small_fused(const unsigned short *__restrict__ x, const tw_u32 *__restrict__ packed,
                      const unsigned short *__restrict__ wp, const unsigned short *__restrict__ wu,
                      const unsigned short *__restrict__ wd, unsigned short *__restrict__ y,
                      int M) {
    tw_fused_enter(wd, wu, blockIdx.y == 0, blockIdx.x, gridDim.x);
    extern __shared__ __align__(16) unsigned char tw_smem[];
    const tw_fused_smem L = tw_fused_layout(tw_smem);
    uint4 *xs = L.xs;
    tw_u32 *pw = L.pw;
    int *sincl = L.sincl, *sovf = L.sovf;
    __shared__ float4 red[TW_FW][32][2];
    __shared__ int s_two[2];
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int m = (int)blockIdx.y;
    const int c0 = (int)blockIdx.x * 256 + 8 * lane;
    const bool cok = c0 < ${S.K};
    const tw_fused_row r = tw_fused_stage(x, packed, m, xs, pw, sincl, sovf, s_two);
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        acc[i] = 0.0f;
    for (int j = 2 * warp; j < r.total; j += 2 * TW_FW) {
        tw_u32 n[2];
        float h[2];
        bool two;
        uint4 v[2];
        tw_pair_cols(pw, sincl, j, r.total, n, h, two);
        tw_pair_wd(wd, n, true, two, c0, cok, v);
        tw_pair_h(xs, wu, n, two, lane, h);
        tw_pair_fma(acc, v, h, true, two);
    }
    for (int c = 2 * warp; c < r.ncand; c += 2 * TW_FW) {
        tw_u32 n[2];
        bool a[2];
        float h[2];
        uint4 v[2];
        tw_cand_cols(sovf, c, n);
        tw_cand_h(xs, wp, wu, n, lane, a, h);
        if (!a[0] && !a[1])
            continue;
        tw_pair_wd(wd, n, a[0], a[1], c0, cok, v);
        tw_pair_fma(acc, v, h, a[0], a[1]);
    }
    tw_store_sums(red, acc, y + (size_t)m * ${S.K}, c0, cok, warp, lane, 0, TW_FW);
}

/* Hopper: the same in a thread-block cluster of ${CL} blocks a row, so that each block computes
 * the h of only 1/${CL} of the row's pairs. Block b of row m (cluster rank b): phase 1 computes the
 * pairs p ≡ b (mod ${CL}) (warp w those with p / ${CL} ≡ w (mod 16)) into its shared memory, then
 * the cluster's barrier; phase 2 sums h · Wd over all pairs for the block's column slices
 * s ≡ b (mod ${CL}) (256 columns each; warp w the pairs p ≡ w (mod 16), h read from the owning
 * block's shared memory), and a last cluster barrier keeps every block's h alive until all have
 * read it. Grid (${CL}, M), cluster (${CL}, 1, 1), 512 threads; dynamic shared memory:
 * twell_ffn_small_fused (the same layout) + 8·ceil(pairs/${CL}) + 12·ceil(N/(2·${CL})) bytes. */
extern "C" __global__ void __launch_bounds__(TW_FW * 32, 1)
twell_ffn_small_fused_cl(const unsigned short *__restrict__ x, const tw_u32 *__restrict__ packed,
                         const unsigned short *__restrict__ wp,
                         const unsigned short *__restrict__ wu,
                         const unsigned short *__restrict__ wd, unsigned short *__restrict__ y,
                         int M) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    tw_fused_enter(wd, wu, blockIdx.y == 0, blockIdx.x, gridDim.x);
    extern __shared__ __align__(16) unsigned char tw_smem[];
    const tw_fused_smem L = tw_fused_layout(tw_smem);
    uint4 *xs = L.xs;
    tw_u32 *pw = L.pw;
    int *sincl = L.sincl, *sovf = L.sovf;
    float *hs = (float *)L.rest;                /* [2·PL] h of this block's stored pairs */
    float *hc = hs + 2 * ${PL};                 /* [2·QL] h of its candidate pairs */
    tw_u32 *ac = (tw_u32 *)(hc + 2 * ${QL});    /* [QL] their active bits */
    __shared__ float4 red[TW_FW][32][2];
    __shared__ int s_two[2];
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int b = (int)blockIdx.x, m = (int)blockIdx.y;
    const tw_fused_row r = tw_fused_stage(x, packed, m, xs, pw, sincl, sovf, s_two);
    const int np = (r.total + 1) >> 1, nq = r.ncand >> 1;
    /* phase 1: this block's pairs */
    for (int l = warp; l * ${CL} + b < np; l += TW_FW) {
        const int j = 2 * (l * ${CL} + b);
        tw_u32 n[2];
        float h[2];
        bool two;
        tw_pair_cols(pw, sincl, j, r.total, n, h, two);
        tw_pair_h(xs, wu, n, two, lane, h);
        if (lane == 0)
            hs[2 * l] = h[0], hs[2 * l + 1] = h[1];
    }
    for (int l = warp; l * ${CL} + b < nq; l += TW_FW) {
        tw_u32 n[2];
        bool a[2];
        float h[2];
        tw_cand_cols(sovf, 2 * (l * ${CL} + b), n);
        tw_cand_h(xs, wp, wu, n, lane, a, h);
        if (lane == 0)
            hc[2 * l] = h[0], hc[2 * l + 1] = h[1], ac[l] = (tw_u32)a[0] | (tw_u32)a[1] << 1;
    }
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;"
                 ::: "memory");
    /* phase 2: every pair, for this block's column slices */
    const tw_u32 hs_a = (tw_u32)__cvta_generic_to_shared(hs);
    const tw_u32 hc_a = (tw_u32)__cvta_generic_to_shared(hc);
    const tw_u32 ac_a = (tw_u32)__cvta_generic_to_shared(ac);
    for (int sl = b; sl * 256 < ${S.K}; sl += ${CL}) {
        const int c0 = sl * 256 + 8 * lane;
        const bool cok = c0 < ${S.K};
        float acc[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
            acc[i] = 0.0f;
        for (int p = warp; p < np; p += TW_FW) {
            tw_u32 n[2];
            float h[2];
            bool two;
            uint4 v[2];
            tw_pair_cols(pw, sincl, 2 * p, r.total, n, h, two);
            tw_pair_wd(wd, n, true, two, c0, cok, v);
            const tw_u32 ra = tw_dsmem(hs_a + 8u * (tw_u32)(p / ${CL}), (tw_u32)(p % ${CL}));
            asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(h[0]), "=f"(h[1]) : "r"(ra));
            tw_pair_fma(acc, v, h, true, two);
        }
        for (int q = warp; q < nq; q += TW_FW) {
            const tw_u32 rank = (tw_u32)(q % ${CL}), l = (tw_u32)(q / ${CL});
            tw_u32 bits;
            asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(bits) : "r"(tw_dsmem(ac_a + 4u * l, rank)));
            if (!bits)
                continue;
            tw_u32 n[2];
            float h[2];
            uint4 v[2];
            tw_cand_cols(sovf, 2 * q, n);
            tw_pair_wd(wd, n, bits & 1u, bits & 2u, c0, cok, v);
            asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(h[0]), "=f"(h[1])
                         : "r"(tw_dsmem(hc_a + 8u * l, rank)));
            tw_pair_fma(acc, v, h, bits & 1u, bits & 2u);
        }
        tw_store_sums(red, acc, y + (size_t)m * ${S.K}, c0, cok, warp, lane, 0, TW_FW);
    }
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;"
                 ::: "memory");
#endif
}
]==]
end
return M
