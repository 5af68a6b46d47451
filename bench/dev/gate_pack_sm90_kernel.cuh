/*
 * gate_pack_sm90_kernel.cuh — development copy of the Hopper gate-pack kernel: relu(x · Wgᵀ) on
 * wgmma, packed to TwELL in the GEMM epilogue. Includes no CUDA header (it must also compile
 * under NVRTC with no toolkit headers); templates/gate_pack_sm90.cu.lua is rendered from it.
 *
 * Design (see NOTES-gate-pack.md for measurements):
 *  - persistent CTAs of 384 threads: warpgroup 0 produces (one thread issues TMA), warpgroups 1
 *    and 2 consume (each owns 64 rows of the 128x256 CTA tile, m64n256k16 wgmma, fp32 acc in
 *    128 registers); setmaxnreg moves registers from the producer to the consumers;
 *  - STAGES-deep ring of (A 128xBK, B 256xBK) tiles with 128B (BK = 64) or 64B (BK = 32)
 *    swizzle, completing on mbarriers; consumers keep one wgmma group in flight;
 *  - optional cluster of 2 CTAs along M: each CTA loads half of the weight tile and multicasts
 *    it to both, so the L2 -> SM traffic per FLOP drops by a third;
 *  - epilogue: relu + round to 16 bits (cvt.rn.relu) and stmatrix into a per-warp staging
 *    buffer; the warp packs its 16 rows one at a time *during the next tile's main loop*
 *    (ballot-free: per-lane 8-column masks, a shuffle prefix sum per row-tile, entries written in
 *    ascending column order, unused slots zeroed), so packing overlaps the tensor cores.
 */
typedef unsigned int tw_u32;
typedef unsigned long long tw_u64;
typedef unsigned short tw_u16;

/* Same size and alignment as CUtensorMap; passed by value as a __grid_constant__ parameter. */
struct __align__(64) tw_tmap {
    tw_u64 opaque[16];
};

#define TW_BM 128
#define TW_BN 256
#define TW_THREADS 384
#define TW_ROWB 528                   /* staging row pitch: 512 B + 16 B pad (conflict-free) */
#define TW_STG_WARP (16 * TW_ROWB)    /* one warp's 16 rows */
#define TW_STG_BYTES (8 * TW_STG_WARP) /* 8 consumer warps */

/* Dynamic shared memory the kernel needs (1024 B of slack for the swizzle alignment). */
#define TW_SMEM_BYTES(BK, STAGES, EPI)                                                            \
    (1024 + (STAGES) * (TW_BM + TW_BN) * (BK) * 2 + ((EPI) ? TW_STG_BYTES : 0) +                   \
     2 * ((STAGES) + 1) * 8 + 16)
/* Split-K workspace for the last partial wave: fp32 partial tiles, one per CTA of the grid, and
 * one arrival counter per CTA (zero before the first launch; the kernel leaves them zero). */
#define TW_WS_FLOATS_PER_CTA (256 * 128)

static __device__ __forceinline__ tw_u32 tw_smem_addr(const void *p) {
    tw_u32 a;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }"
                 : "=r"(a)
                 : "l"(p));
    return a;
}

/* ---- mbarriers ---- */
static __device__ __forceinline__ void tw_mbar_init(tw_u32 bar, tw_u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void tw_mbar_expect_tx(tw_u32 bar, tw_u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}
static __device__ __forceinline__ tw_u32 tw_mbar_try(tw_u32 bar, tw_u32 parity) {
    tw_u32 ok;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return ok;
}
static __device__ __forceinline__ void tw_mbar_wait(tw_u32 bar, tw_u32 parity) {
    while (!tw_mbar_try(bar, parity)) {
    }
}
/* try_wait with a suspend-time hint (ns): the thread sleeps until the phase completes (or the
 * hint expires) instead of re-polling, leaving issue slots to the other warps. */
static __device__ __forceinline__ tw_u32 tw_mbar_try_hint(tw_u32 bar, tw_u32 parity) {
    tw_u32 ok;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity), "r"(1000000u)
                 : "memory");
    return ok;
}
template <int OPT> static __device__ __forceinline__ void tw_mbar_wait_opt(tw_u32 bar, tw_u32 parity) {
    if (OPT & 256) {
        while (!tw_mbar_try_hint(bar, parity)) {
        }
    } else {
        while (!tw_mbar_try(bar, parity)) {
        }
    }
}
static __device__ __forceinline__ void tw_mbar_arrive(tw_u32 bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
                 : "memory");
}
/* Arrive on the barrier at the same offset in cluster CTA `cta`. Default semantics on purpose:
 * `.release.cluster` makes ptxas emit MEMBAR.ALL.GPU before the arrive, which waits for this
 * warp's outstanding global stores (the packed rows) and halved throughput in v1. What must be
 * ordered before the arrive is only the wgmma reads of the stage, complete at wgmma.wait_group. */
static __device__ __forceinline__ void tw_mbar_arrive_cluster(tw_u32 bar, tw_u32 cta) {
    tw_u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(cta));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

/* ---- cluster ---- */
static __device__ __forceinline__ tw_u32 tw_cluster_rank(void) {
    tw_u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ tw_u32 tw_cluster_id(void) {
    tw_u32 r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ tw_u32 tw_cluster_count(void) {
    tw_u32 r;
    asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ void tw_cluster_sync(void) {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

/* ---- TMA ---- */
static __device__ __forceinline__ void tw_tma_load(tw_u32 dst, const tw_tmap *map, int c0, int c1,
                                                   tw_u32 bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"((tw_u64)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
/* The box lands at the same offset in every CTA of ctamask, each completing its own barrier. */
static __device__ __forceinline__ void tw_tma_load_mc(tw_u32 dst, const tw_tmap *map, int c0,
                                                      int c1, tw_u32 bar, tw_u16 ctamask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
                 "l"((tw_u64)map), "r"(c0), "r"(c1), "r"(bar), "h"(ctamask)
                 : "memory");
}

/* Same, with an L2 cache policy (createpolicy) for the loaded lines. */
static __device__ __forceinline__ void tw_tma_load_pol(tw_u32 dst, const tw_tmap *map, int c0,
                                                       int c1, tw_u32 bar, tw_u64 pol) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
                 "l"((tw_u64)map), "r"(c0), "r"(c1), "r"(bar), "l"(pol)
                 : "memory");
}
static __device__ __forceinline__ void tw_tma_load_mc_pol(tw_u32 dst, const tw_tmap *map, int c0,
                                                          int c1, tw_u32 bar, tw_u16 ctamask,
                                                          tw_u64 pol) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;" ::"r"(dst),
                 "l"((tw_u64)map), "r"(c0), "r"(c1), "r"(bar), "h"(ctamask), "l"(pol)
                 : "memory");
}

/* ---- wgmma ---- */
static __device__ __forceinline__ void tw_wg_fence(void) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void tw_wg_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> static __device__ __forceinline__ void tw_wg_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* Tells the compiler the accumulators may change here (they are written asynchronously). */
static __device__ __forceinline__ void tw_fence_acc(float (&d)[128]) {
#pragma unroll
    for (int i = 0; i < 128; ++i)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* K-major operand descriptor: start address, SBO = 8 rows, swizzle mode (1 = 128B, 2 = 64B). */
template <int BK> static __device__ __forceinline__ tw_u64 tw_desc(tw_u32 saddr) {
    const tw_u64 sbo = (tw_u64)(8 * BK * 2) >> 4;
    const tw_u64 swz = BK == 64 ? 1 : 2;
    return (tw_u64)((saddr & 0x3FFFF) >> 4) | ((tw_u64)1 << 16) | (sbo << 32) | (swz << 62);
}
#define TW_WGMMA_M64N256K16(TYS) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYS "." TYS " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, " \
                 "%128, %129, p, 1, 1, 0, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
                 "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
                 "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
                 "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
                 "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
                 "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
                 "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
                 "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
                 "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
                 : "l"(da), "l"(db), "r"(scale_d));

template <int DT>
static __device__ __forceinline__ void tw_wgmma(float (&d)[128], tw_u64 da, tw_u64 db,
                                                tw_u32 scale_d) {
    if (DT == 0) {
        TW_WGMMA_M64N256K16("bf16");
    } else {
        TW_WGMMA_M64N256K16("f16");
    }
}

/* relu, round to nearest even, pack two values: lo in bits 15..0, hi in bits 31..16. */
template <int DT> static __device__ __forceinline__ tw_u32 tw_relu_pack(float lo, float hi) {
    tw_u32 r;
    if (DT == 0)
        asm("cvt.rn.relu.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.relu.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

static __device__ __forceinline__ void tw_stmatrix4(tw_u32 addr, tw_u32 r0, tw_u32 r1, tw_u32 r2,
                                                    tw_u32 r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}
static __device__ __forceinline__ void tw_lds128(tw_u32 addr, tw_u32 &a, tw_u32 &b, tw_u32 &c,
                                                 tw_u32 &e) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(e)
                 : "r"(addr)
                 : "memory");
}

/* Activity flags of the two 16-bit values in w (bit 0: low half, bit 1: high half). A value is
 * active iff its magnitude bits are non-zero: after relu the sign can only be set on -0. */
static __device__ __forceinline__ tw_u32 tw_flags2(tw_u32 w) {
    const tw_u32 u = (w & 0x7fff7fffu) + 0x7fff7fffu; /* bit 15 / 31: that half is non-zero */
    return ((u >> 15) & 1u) | ((u >> 30) & 2u);
}

static __device__ __forceinline__ tw_u32 tw_lanemask_lt(void) {
    tw_u32 m;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
    return m;
}

/* Packs NR staged rows (shared addresses row_addr[i]; lane l holds columns n0 + 8l .. 8l+7) into
 * their row-tile(s) of packed rows grow[i] (rows with grow >= M are skipped). This is
 * latency-bound code run by few warps, so it is written for few instructions and short
 * dependency chains, and the rows are interleaved for instruction-level parallelism:
 *  - each lane's 8-column activity mask m8 and its count c (0..8);
 *  - the lane's first position = sum over lower lanes of the row-tile of c, from 4 ballots of
 *    the bits of c (no dependent shuffle scan); the row-tile count from the same ballots;
 *  - entries stored by a loop over the set bits of m8 (usually none: rows are ~99% zeros);
 *  - count and zeroed unused slots by the lanes, one coalesced store per 32 words. */
static __device__ __forceinline__ void tw_st_cg4(float *p, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c),
                 "f"(d)
                 : "memory");
}
static __device__ __forceinline__ void tw_ld_cg4(const float *p, float &a, float &b, float &c,
                                                 float &d) {
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(a), "=f"(b), "=f"(c), "=f"(d)
                 : "l"(p)
                 : "memory");
}
static __device__ __forceinline__ void tw_st_cs(tw_u32 *p, tw_u32 v) {
    asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

template <int T, int C, int NR>
static __device__ __forceinline__ void tw_pack_rows(const tw_u32 (&row_addr)[NR],
                                                    const int (&grow)[NR], int M, int n0, int N,
                                                    tw_u32 *__restrict__ packed) {
    constexpr int W = T / C;     /* words per row-tile */
    constexpr int SLOTS = W - 1; /* entries per row-tile */
    constexpr int SEG = T / 8;   /* lanes per row-tile */
    const int lane = threadIdx.x & 31;
    const int li = lane & (SEG - 1);
    const tw_u32 segmask = SEG == 32 ? 0xffffffffu : (((1u << SEG) - 1u) << (lane & ~(SEG - 1)));
    const tw_u32 below = tw_lanemask_lt() & segmask;
    const int col0 = n0 + lane * 8;
    /* T = 128 with N an odd multiple of 128: the second row-tile does not exist */
    const bool tile_ok = col0 - li * 8 < N;
    tw_u32 v[NR][4], m8[NR], excl[NR], total[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r)
        tw_lds128(row_addr[r] + (tw_u32)(lane * 16), v[r][0], v[r][1], v[r][2], v[r][3]);
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        tw_u32 m = 0;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            /* bit 15 / 31 of u: that 16-bit half h is active, i.e. h & 0x7fff is non-zero (relu
             * leaves no negative value but -0) and h is not the canonical NaN 0x7fff that
             * cvt.relu makes of NaN (the reference stores +0 for NaN) */
            const tw_u32 u = ((v[r][q] & 0x7fff7fffu) + 0x7fff7fffu) &
                             (((v[r][q] ^ 0x7fff7fffu) & 0x7fff7fffu) + 0x7fff7fffu);
            m |= ((u >> (15 - 2 * q)) & (1u << (2 * q))) | ((u >> (30 - 2 * q)) & (2u << (2 * q)));
        }
        m8[r] = m;
    }
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        const tw_u32 c = __popc(m8[r]);
        tw_u32 ex = 0, tot = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const tw_u32 b = __ballot_sync(0xffffffffu, (c >> k) & 1u);
            ex += __popc(b & below) << k;
            tot += __popc(b & segmask) << k;
        }
        excl[r] = ex, total[r] = tot;
    }
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        if (grow[r] >= M || !tile_ok)
            continue;
        tw_u32 *out = packed + (long long)grow[r] * (N / C) + (long long)(col0 / T) * W;
        tw_u32 mm = m8[r], pos = excl[r];
        while (mm != 0 && pos < (tw_u32)SLOTS) {
            const int e = __ffs(mm) - 1;
            mm &= mm - 1u;
            const tw_u32 w = (e & 4) ? ((e & 2) ? v[r][3] : v[r][2]) : ((e & 2) ? v[r][1] : v[r][0]);
            out[1 + pos] = ((e & 1) ? (w & 0xffff0000u) : (w << 16)) | (tw_u32)(col0 + e);
            ++pos;
        }
        const tw_u32 used = total[r] < (tw_u32)SLOTS ? total[r] : (tw_u32)SLOTS;
#pragma unroll
        for (int i = 0; i < W; i += SEG) {
            const tw_u32 w = (tw_u32)(i + li);
            if (w < (tw_u32)W && (w == 0 || w > used))
                out[w] = w == 0 ? total[r] : 0u;
        }
    }
}

/* Releases pipeline stage `stage` (its empty barrier, in every CTA of the cluster). */
template <int CLUSTER>
static __device__ __forceinline__ void tw_release(tw_u32 empty_bar) {
    if (CLUSTER == 1)
        tw_mbar_arrive(empty_bar);
    else
        for (int c = 0; c < CLUSTER; ++c)
            tw_mbar_arrive_cluster(empty_bar, (tw_u32)c);
}

/* One unit of work of a cluster: an output tile (tile index t; the cluster's CTAs own M-blocks
 * CLUSTER*mp + rank, N-block nb) over k-blocks [kb0, kb1). Units u = cid, cid + ncl, ...: first
 * the whole tiles of the full waves; then, when the last wave would leave at least half of the
 * clusters idle and a workspace is given, its R tiles are split along K into S parts each, one per
 * cluster, so the last wave takes 1/S of a tile's time. split = part index, S = 1: no split. */
struct tw_unit {
    int t, kb0, kb1, split, S, tail;
};
static __device__ __forceinline__ bool tw_unit_get(int u, int U, int G, int KB, bool can_split,
                                                   tw_unit &w) {
    const int R = U % G;
    int S = R ? G / R : 1;
    const int smax = KB / 4 > 1 ? KB / 4 : 1; /* at least 4 k-blocks per part */
    S = S < smax ? S : smax;
    if (!can_split || S < 2)
        S = 1;
    const int full = S > 1 ? U - R : U;
    if (u < full) {
        w.t = u, w.kb0 = 0, w.kb1 = KB, w.split = 0, w.S = 1, w.tail = 0;
        return true;
    }
    const int j = u - full;
    if (S == 1 || j >= R * S)
        return false;
    w.t = full + j / S, w.split = j % S, w.S = S, w.tail = j / S;
    w.kb0 = (int)((long long)w.split * KB / S), w.kb1 = (int)((long long)(w.split + 1) * KB / S);
    return true;
}

/* relu(x · wᵀ) for x [M, K] (map_x: box BK x 128) and w [N, K] (map_w: box BK x 256/CLUSTER),
 * packed to TwELL (T, C) into packed [M, N/C]. Grid: a multiple of CLUSTER persistent CTAs,
 * TW_THREADS threads, TW_SMEM_BYTES(BK, STAGES, EPI) dynamic shared memory, cluster
 * (CLUSTER,1,1). Requires K % BK == 0, N % T == 0, M >= 1. ws/ctr: split-K workspace
 * (gridDim.x * TW_WS_FLOATS_PER_CTA floats, gridDim.x zeroed counters) or NULL (no split);
 * launches sharing a workspace must not overlap in time.
 * EPI (development switch): 2 = pack (default), 0 = no epilogue (timing probe, writes nothing).
 * OPT bit 1: the CTA's last tile is packed by the consumer warps themselves (not left to the 3
 * packer warps after the tensor cores have gone idle). Timing probes (wrong output): bit 2:
 * the packer warps pack nothing; bit 3: they compute but store nothing. */
template <int DT, int T, int C, int BK, int STAGES, int CLUSTER, int EPI = 2, int OPT = 2>
__global__ void __launch_bounds__(TW_THREADS, 1)
    tw_gate_pack_sm90(const __grid_constant__ tw_tmap map_x, const __grid_constant__ tw_tmap map_w,
                      tw_u32 *__restrict__ packed, int M, int N, int K, float *__restrict__ ws,
                      tw_u32 *__restrict__ ctr) {
    constexpr tw_u32 A_BYTES = TW_BM * BK * 2;
    constexpr tw_u32 B_BYTES = TW_BN * BK * 2;
    constexpr int NPACK = 3; /* packer warps: warps 1..3 */
    constexpr int PNR = 4;   /* rows a packing warp interleaves */
    extern __shared__ __align__(1024) unsigned char tw_smem[];
    const tw_u32 base = (tw_smem_addr(tw_smem) + 1023u) & ~1023u;
    const tw_u32 sA = base;
    const tw_u32 sB = sA + STAGES * A_BYTES;
    const tw_u32 sStg = sB + STAGES * B_BYTES;
    /* full[STAGES], empty[STAGES], staged (8 consumer warps), unstaged (NPACK packer warps),
     * then two words: the staged tile's first row (-1: nothing to pack), the split-K verdict */
    const tw_u32 sBar = sStg + (EPI ? TW_STG_BYTES : 0);
    const tw_u32 bar_staged = sBar + 16 * STAGES, bar_unstaged = bar_staged + 8;
    const tw_u32 s_info = bar_unstaged + 8, s_last = s_info + 4;
    volatile int *info_ptr = (volatile int *)(tw_smem + (s_info - tw_smem_addr(tw_smem)));
    volatile int *last_ptr = (volatile int *)(tw_smem + (s_last - tw_smem_addr(tw_smem)));

    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const tw_u32 rank = CLUSTER > 1 ? tw_cluster_rank() : 0u;
    const int cid = CLUSTER > 1 ? (int)tw_cluster_id() : (int)blockIdx.x;
    const int ncl = CLUSTER > 1 ? (int)tw_cluster_count() : (int)gridDim.x;

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            tw_mbar_init(sBar + 8 * s, 1);
            tw_mbar_init(sBar + 8 * (STAGES + s), 8 * CLUSTER); /* one arrival per consumer warp */
        }
        tw_mbar_init(bar_staged, 8);
        tw_mbar_init(bar_unstaged, NPACK);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (CLUSTER > 1)
        tw_cluster_sync(); /* the peer's multicast must not reach uninitialised barriers */
    else
        __syncthreads();

    const int MB = (M + TW_BM - 1) / TW_BM;
    const int MP = (MB + CLUSTER - 1) / CLUSTER;
    const int NB = (N + TW_BN - 1) / TW_BN;
    const int U = MP * NB;
    const int KB = K / BK;
    const bool can_split = ws != 0 && ctr != 0;
    /* n fastest: the clusters running at once share x rows and sweep all of W (in L2) */
#define TW_UNIT_COORDS(w)                                                                          \
    const int nb = (w).t % NB, mp = (w).t / NB;                                                    \
    const int m0 = (mp * CLUSTER + (int)rank) * TW_BM, n0 = nb * TW_BN

    if (wg == 0) {
        /* the CTA's pool is 168 x 384 registers: 128 P + 256 C <= 64512 */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 72;"); /* packers fit in 72 */
        if (tid == 0) {
            int stage = 0;
            tw_u32 phase = 0;
            tw_unit w;
            tw_u64 pol_x = 0, pol_w = 0;
            if (OPT & 128) {
                asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol_x));
                asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol_w));
            }
            for (int u = cid; tw_unit_get(u, U, ncl, KB, can_split, w); u += ncl) {
                TW_UNIT_COORDS(w);
                (void)m0;
                for (int kb = w.kb0; kb < w.kb1; ++kb) {
                    const tw_u32 full = sBar + 8 * stage, empty = sBar + 8 * (STAGES + stage);
                    tw_mbar_wait_opt<OPT>(empty, phase ^ 1u);
                    tw_mbar_expect_tx(full, A_BYTES + B_BYTES);
                    if (OPT & 128) { /* probe: x evict-first, w evict-last in L2 */
                        tw_tma_load_pol(sA + stage * A_BYTES, &map_x, kb * BK, m0, full, pol_x);
                        if (CLUSTER == 1)
                            tw_tma_load_pol(sB + stage * B_BYTES, &map_w, kb * BK, n0, full,
                                            pol_w);
                        else
                            tw_tma_load_mc_pol(sB + stage * B_BYTES + rank * (B_BYTES / CLUSTER),
                                               &map_w, kb * BK,
                                               n0 + (int)rank * (TW_BN / CLUSTER), full,
                                               (tw_u16)((1u << CLUSTER) - 1u), pol_w);
                    } else {
                    tw_tma_load(sA + stage * A_BYTES, &map_x, kb * BK, m0, full);
                    if (CLUSTER == 1)
                        tw_tma_load(sB + stage * B_BYTES, &map_w, kb * BK, n0, full);
                    else
                        tw_tma_load_mc(sB + stage * B_BYTES + rank * (B_BYTES / CLUSTER), &map_w,
                                       kb * BK, n0 + (int)rank * (TW_BN / CLUSTER), full,
                                       (tw_u16)((1u << CLUSTER) - 1u));
                    }
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1u;
                    }
                }
            }
        } else if (EPI && warp >= 1) {
            /* packers: rows warp-1, warp-1+NPACK, ... of each staged tile */
            tw_u32 sphase = 0;
            tw_unit w, wn;
            for (int u = cid; tw_unit_get(u, U, ncl, KB, can_split, w); u += ncl) {
                if ((OPT & 2) && !tw_unit_get(u + ncl, U, ncl, KB, can_split, wn))
                    break; /* the consumers pack the CTA's last unit themselves */
                TW_UNIT_COORDS(w);
                (void)m0;
                tw_mbar_wait_opt<OPT>(bar_staged, sphase);
                const int row0 = *info_ptr;
                if (row0 >= 0 && !(OPT & 4)) {
                    const int rows = M - row0 < TW_BM ? M - row0 : TW_BM;
                    for (int r = warp - 1; r < rows; r += PNR * NPACK) {
                        tw_u32 a[PNR];
                        int g[PNR];
#pragma unroll
                        for (int i = 0; i < PNR; ++i) {
                            const int ri = r + i * NPACK;
                            a[i] = sStg + (tw_u32)((ri < TW_BM ? ri : TW_BM - 1) * TW_ROWB);
                            g[i] = ri < rows && !(OPT & 8) ? row0 + ri : M; /* M: skipped */
                        }
                        tw_pack_rows<T, C, PNR>(a, g, M, n0, N, packed);
                    }
                }
                __syncwarp();
                if (lane == 0)
                    tw_mbar_arrive(bar_unstaged);
                sphase ^= 1u;
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 216;");
        const int cw = wg - 1;     /* consumer warpgroup: rows 64cw .. 64cw+63 of the tile */
        const int wq = warp & 3;   /* warp in the warpgroup: rows 16wq .. 16wq+15 of those */
        const int ct = tid - 128;  /* consumer thread 0..255 */
        const tw_u32 stg = sStg + (tw_u32)((cw * 4 + wq) * TW_STG_WARP);
        /* stmatrix row address of this lane: matrix lane/8 (bit 0: rows +8, bit 1: cols +8) */
        const tw_u32 st_addr =
            stg + (tw_u32)(((lane & 7) + 8 * ((lane >> 3) & 1)) * TW_ROWB + (lane >> 4) * 16);
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; ++i)
            d[i] = 0.f;
        int stage = 0;
        tw_u32 phase = 0, sphase = 0;
        tw_unit w, wn;
        for (int u = cid; tw_unit_get(u, U, ncl, KB, can_split, w); u += ncl) {
            TW_UNIT_COORDS(w);
            const bool last_unit = !tw_unit_get(u + ncl, U, ncl, KB, can_split, wn);
            int prev = 0;
            for (int kb = w.kb0; kb < w.kb1; ++kb) {
                tw_mbar_wait_opt<OPT>(sBar + 8 * stage, phase);
                tw_wg_fence();
                const tw_u64 da = tw_desc<BK>(sA + stage * A_BYTES + (tw_u32)(cw * 64 * BK * 2));
                const tw_u64 db = tw_desc<BK>(sB + stage * B_BYTES);
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
                    tw_wgmma<DT>(d, da + (tw_u64)(2 * kk), db + (tw_u64)(2 * kk),
                                 (kb > w.kb0 || kk > 0) ? 1u : 0u);
                tw_wg_commit();
                if (kb > w.kb0) {
                    tw_wg_wait<1>(); /* the previous k-block's group is done: free its stage */
                    if (lane == 0)
                        tw_release<CLUSTER>(sBar + 8 * (STAGES + prev));
                }
                prev = stage;
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1u;
                }
            }
            tw_wg_wait<0>();
            tw_fence_acc(d);
            if (lane == 0)
                tw_release<CLUSTER>(sBar + 8 * (STAGES + prev));
            if (EPI == 0) { /* timing probe: keep the accumulators live, pack nothing */
                if (d[0] == 1234.5f && d[127] == 1234.5f)
                    packed[0] = 1u;
                continue;
            }
            bool have = true;
            if (w.S > 1) {
                /* split-K part: publish the fp32 partial; the last part to arrive sums all parts
                 * in part order (deterministic) and packs. Nobody waits on another CTA. */
                const int slot = (w.tail * w.S + w.split) * CLUSTER + (int)rank;
                /* layout [slot][i][consumer thread][4]: coalesced 16-byte stores */
                float *mine = ws + (long long)slot * TW_WS_FLOATS_PER_CTA + 4 * ct;
#pragma unroll
                for (int i = 0; i < 32; ++i)
                    tw_st_cg4(mine + i * 1024, d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]);
                __threadfence();
                asm volatile("bar.sync 1, 256;" ::: "memory");
                tw_u32 *c = ctr + w.tail * CLUSTER + (int)rank;
                if (ct == 0) {
                    const tw_u32 prev_parts = atomicAdd(c, 1u);
                    __threadfence();
                    *last_ptr = prev_parts == (tw_u32)(w.S - 1);
                }
                asm volatile("bar.sync 1, 256;" ::: "memory");
                have = *last_ptr != 0;
                if (have) {
                    if (ct == 0)
                        *c = 0u; /* every part has arrived: reset for the next launch */
                    /* part by part: the sum order is fixed */
                    const int slot0 = (w.tail * w.S) * CLUSTER + (int)rank;
                    const float *part0 = ws + (long long)slot0 * TW_WS_FLOATS_PER_CTA + 4 * ct;
#pragma unroll
                    for (int i = 0; i < 32; ++i) /* straight into the (dead) accumulators */
                        tw_ld_cg4(part0 + i * 1024, d[4 * i], d[4 * i + 1], d[4 * i + 2],
                                  d[4 * i + 3]);
                    for (int p = 1; p < w.S; ++p) {
                        const float *part = part0 + (long long)p * CLUSTER * TW_WS_FLOATS_PER_CTA;
#pragma unroll
                        for (int h = 0; h < 4; ++h) { /* 8 loads in flight per batch */
                            float b[32];
#pragma unroll
                            for (int i = 0; i < 8; ++i)
                                tw_ld_cg4(part + (8 * h + i) * 1024, b[4 * i], b[4 * i + 1],
                                          b[4 * i + 2], b[4 * i + 3]);
#pragma unroll
                            for (int i = 0; i < 32; ++i)
                                d[32 * h + i] += b[i];
                        }
                    }
                }
            }
            const bool self_pack = (OPT & 2) && last_unit;
            tw_mbar_wait_opt<OPT>(bar_unstaged, sphase ^ 1u); /* packers are done with the buffer */
            if (have && !(OPT & 32)) {
#pragma unroll
                for (int rep = 0; rep < ((OPT & 64) ? 2 : 1); ++rep)
#pragma unroll
                for (int b = 0; b < 32; b += 2)
                    tw_stmatrix4(st_addr + (tw_u32)(b * 16),
                                 tw_relu_pack<DT>(d[4 * b + 0], d[4 * b + 1]),
                                 tw_relu_pack<DT>(d[4 * b + 2], d[4 * b + 3]),
                                 tw_relu_pack<DT>(d[4 * b + 4], d[4 * b + 5]),
                                 tw_relu_pack<DT>(d[4 * b + 6], d[4 * b + 7]));
            }
            __syncwarp();
            if (self_pack) {
                if (have) { /* this warp's own 16 rows */
                    const int row0 = m0 + cw * 64 + wq * 16;
#pragma unroll 1
                    for (int j = 0; j < 16; j += PNR) {
                        tw_u32 a[PNR];
                        int g[PNR];
#pragma unroll
                        for (int i = 0; i < PNR; ++i)
                            a[i] = stg + (tw_u32)((j + i) * TW_ROWB), g[i] = row0 + j + i;
                        tw_pack_rows<T, C, PNR>(a, g, M, n0, N, packed);
                    }
                }
            } else {
                if (tid == 128)
                    *info_ptr = have ? m0 : -1;
                if (lane == 0)
                    tw_mbar_arrive(bar_staged);
            }
            sphase ^= 1u;
        }
    }
#undef TW_UNIT_COORDS
    __syncwarp();
    if (CLUSTER > 1)
        tw_cluster_sync(); /* no CTA leaves while its peer may still signal its barriers */
}
