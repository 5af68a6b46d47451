-- gate_pack_sm90.cu.lua — Hopper (sm_90a) gate-pack: packed = TwELL(relu(x · wᵀ)) on tensor
-- cores (wgmma m64n256k16, fp32 accumulation), packed in the GEMM epilogue. Why it is built this
-- way: "Design" below.
--
-- Parameters: K, N, T, C (shape, see twellrt.h; K a multiple of 64, T in {64, 128, 256}),
--             dtype ("bf16" | "fp16"),
--             BK (64: 128-byte swizzle | 32: 64-byte swizzle; default 64),
--             STAGES (pipeline depth, default 3; the shared memory must fit in 227 KB),
--             CLUSTER (CTAs per cluster along M sharing the weight tile by TMA multicast:
--                      1, 2 or 4; default 2).
-- ABI (runtime/ops/gate_pack/tiled/cuda_gate_pack_sm90.c launches it):
--   extern "C" __global__ void twell_gate_pack_sm90(
--       const __grid_constant__ tw_tmap map_x,  // x [M, K]: dims {K, M}, box {BK, 128}
--       const __grid_constant__ tw_tmap map_w,  // w [N, K]: dims {K, N}, box {BK, 256/CLUSTER}
--                                               // both: swizzle 128B (BK 64) / 64B (BK 32)
--       unsigned int *packed,                   // [M, N/C]
--       int M,
--       float *ws, unsigned int *ctr)           // split-K workspace or NULL (see below)
--   block = 384 threads, cluster = (CLUSTER, 1, 1), grid = a multiple of CLUSTER persistent
--   CTAs (at most one per SM; more only costs time), dynamic shared memory = SMEM below
--   (also printed as "// twell_gate_pack_sm90 smem=<bytes>" at the top of the source; the
--   launcher computes the same formula).
--   ws: gridDim.x * 32768 floats, ctr: gridDim.x words, zero before the first launch (the kernel
--   leaves them zero); launches sharing them must not overlap in time. With ws = NULL the last
--   partial wave of tiles is not split along K (slower tail, same results up to fp32 order).
--   PDL: may be launched with programmatic stream serialization (TWELL_PDL): every thread
--   executes griddepcontrol.wait before any global access (rules: ffn_fused.cu.lua,
--   "PROGRAMMATIC DEPENDENT LAUNCH"); it never triggers its dependents early (see there, (e)).
-- Contract: writes every word of packed rows [0, M): count, entries in ascending column order,
-- unused slots 0; bytes are a deterministic function of (x, w, M, gridDim.x). Values are
-- round_to_dtype(pre) (nearest even) for pre > 0, the canonical positive NaN for a NaN pre
-- (active: the rule of runtime/core/half.h tw_half_act), else not stored, where pre is
-- an fp32 tensor-core dot product: equal to runtime/cpu/cpu_ref.h up to fp32 summation order.
--
-- Design: warpgroup 0 produces (one thread issues TMA into a STAGES-deep ring of (x 128xBK,
-- w 256xBK) tiles completing on mbarriers) and packs (its warps 1..3); warpgroups 1 and 2 consume
-- (64 rows of the 128x256 CTA tile each, one wgmma group kept in flight) and, at the end of a
-- tile, round relu(acc) to 16 bits (cvt.rn.relu) and stmatrix it into a staging buffer that the
-- packer warps turn into TwELL while the tensor cores run the next tile. setmaxnreg moves
-- registers from warpgroup 0 (72) to the consumers (216). With CLUSTER > 1 each CTA loads
-- 256/CLUSTER weight rows and multicasts them to the cluster. When the last wave of tiles would
-- leave at least half of the clusters idle, its tiles are split along K: every part publishes an
-- fp32 partial and the last part to arrive (an atomic counter) sums the parts in part order.

local common = import "twell_common"
local S = common.shape()
local BK = param("BK", 64)
local STAGES = param("STAGES", 3)
local CLUSTER = param("CLUSTER", 2)
check(BK == 64 or BK == 32, "BK=%s must be 64 or 32", tostring(BK))
check(math.type(STAGES) == "integer" and STAGES >= 2 and STAGES <= 8,
    "STAGES=%s must be an integer in 2..8", tostring(STAGES))
check(CLUSTER == 1 or CLUSTER == 2 or CLUSTER == 4, "CLUSTER=%s must be 1, 2 or 4",
    tostring(CLUSTER))
if S.K % 64 ~= 0 then
    unsupported("K=%d is not a multiple of 64", S.K)
end

local BM, BN, THREADS = 128, 256, 384
local ROWB = 528 -- staging row pitch: 512 B + 16 B of padding (conflict-free stmatrix and reads)
local STG_BYTES = 8 * 16 * ROWB
local A_BYTES, B_BYTES = BM * BK * 2, BN * BK * 2
local SMEM = 1024 + STAGES * (A_BYTES + B_BYTES) + STG_BYTES + 2 * (STAGES + 1) * 8 + 16
if SMEM > 227 * 1024 then
    unsupported("STAGES=%d with BK=%d needs %d bytes of shared memory (max 232448)", STAGES, BK,
        SMEM)
end
local SEG = S.T // 8 -- lanes per row-tile (each lane holds 8 columns of a staged row)
local DT = S.dtype == "bf16" and "bf16" or "f16"
local SWZ, SBO = (BK == 64) and 1 or 2, 8 * BK * 2

emitf("// twell_gate_pack_sm90 smem=%d\n", SMEM)
local sm90 = import "sm90_tma"
sm90.helpers({ -- types, tensor map, mbarriers, cluster, TMA, wgmma (shared with gemm_sm90)
    DT = DT, SBO = SBO, SWZ = SWZ, TA = 0, TB = 0,
    note_arrive_cluster = [==[
/* Arrive on the barrier at the same offset in cluster CTA `cta`. Default semantics on purpose:
 * `.release.cluster` makes ptxas put MEMBAR.ALL.GPU before the arrive, which waits for the
 * warp's outstanding global stores and halved the throughput. Only the wgmma reads of the stage
 * must be complete, and wgmma.wait_group guarantees that. */
]==],
    note_tma_mc = [==[
/* The box lands at the same offset in every CTA of ctamask, each completing its own barrier. */
]==],
    note_fence_acc = [==[
/* Tells the compiler the accumulators may change here (they are written asynchronously). */
]==],
    note_desc = [==[
/* K-major operand descriptor: start address, LBO 16 B (unused when swizzled), SBO = 8 rows. */
]==],
})
common.act_rule(S.dtype)
common.canon_nan2(S.dtype)
cuda [==[

/* ---- epilogue helpers ---- */
/* relu, round to nearest even, pack two values: lo in bits 15..0, hi in bits 31..16. cvt.relu
 * turns any NaN into a NaN of PTX's choosing; the activation rule stores the dtype's canonical
 * positive NaN instead (active, as tw_half_act). */
static __device__ __forceinline__ tw_u32 tw_relu_pack(float lo, float hi) {
    tw_u32 r;
    asm("cvt.rn.relu.${DT}x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return tw_canon_nan2(r);
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
static __device__ __forceinline__ tw_u32 tw_lanemask_lt(void) {
    tw_u32 m;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
    return m;
}

/* Packs NR staged rows (shared addresses row_addr[i]; lane l holds columns n0 + 8l .. 8l+7) into
 * their row-tiles of packed rows grow[i] (rows with grow >= M are skipped). Latency-bound code
 * run by few warps: few instructions, short dependency chains, NR rows interleaved.
 *  - each lane's 8-column activity mask m8 and its count c (0..8);
 *  - the lane's first position = sum of c over the lower lanes of its row-tile, from 4 ballots
 *    of the bits of c (no dependent shuffle scan); the row-tile count from the same ballots;
 *  - entries stored by a loop over the set bits of m8 (usually none: rows are ~99% zeros);
 *  - count and zeroed unused slots stored by the lanes, one coalesced store per SEG words. */
template <int NR>
static __device__ __forceinline__ void tw_pack_rows(const tw_u32 (&row_addr)[NR],
                                                    const int (&grow)[NR], int M, int n0,
                                                    tw_u32 *__restrict__ packed) {
    const int lane = threadIdx.x & 31;
    const int li = lane & (${SEG} - 1);
    const tw_u32 segmask =
        ${SEG} == 32 ? 0xffffffffu : (((1u << (${SEG} & 31)) - 1u) << (lane & ~(${SEG} - 1)));
    const tw_u32 below = tw_lanemask_lt() & segmask;
    const int col0 = n0 + lane * 8;
    /* N not a multiple of 256: row-tiles past N do not exist */
    const bool tile_ok = col0 - li * 8 < ${S.N};
    tw_u32 v[NR][4], m8[NR], excl[NR], total[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r)
        tw_lds128(row_addr[r] + (tw_u32)(lane * 16), v[r][0], v[r][1], v[r][2], v[r][3]);
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        tw_u32 m = 0;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            /* bit 15 / 31 of u: that 16-bit half h is active: h & 0x7fff non-zero (relu leaves
             * no negative value but -0; NaN is the positive canonical one, active) */
            const tw_u32 u = (v[r][q] & 0x7fff7fffu) + 0x7fff7fffu;
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
        tw_u32 *out = packed + (long long)grow[r] * ${S.NW} + (long long)(col0 / ${S.T}) * ${S.W};
        tw_u32 mm = m8[r], pos = excl[r];
        while (mm != 0 && pos < ${S.SLOTS}u) {
            const int e = __ffs(mm) - 1;
            mm &= mm - 1u;
            const tw_u32 w = (e & 4) ? ((e & 2) ? v[r][3] : v[r][2]) : ((e & 2) ? v[r][1] : v[r][0]);
            out[1 + pos] = ((e & 1) ? (w & 0xffff0000u) : (w << 16)) | (tw_u32)(col0 + e);
            ++pos;
        }
        const tw_u32 used = total[r] < ${S.SLOTS}u ? total[r] : ${S.SLOTS}u;
#pragma unroll
        for (int i = 0; i < ${S.W}; i += ${SEG}) {
            const tw_u32 w = (tw_u32)(i + li);
            if (w < ${S.W}u && (w == 0 || w > used))
                out[w] = w == 0 ? total[r] : 0u;
        }
    }
}

/* Frees a pipeline stage: its empty barrier in every CTA of the cluster. */
static __device__ __forceinline__ void tw_release(tw_u32 empty_bar) {
    if (${CLUSTER} == 1)
        tw_mbar_arrive(empty_bar);
    else
        for (int c = 0; c < ${CLUSTER}; ++c)
            tw_mbar_arrive_cluster(empty_bar, (tw_u32)c);
}

/* One unit of work of a cluster: tile t (the cluster's CTAs own M-blocks CLUSTER*mp + rank,
 * N-block nb) over k-blocks [kb0, kb1). Units u = cid, cid + ncl, ...: first the whole tiles of
 * the full waves; then, when the last wave would leave at least half of the clusters idle and a
 * workspace is given, its R tiles are split along K into S parts each (at least 4 k-blocks
 * each), one unit per cluster. */
struct tw_unit {
    int t, kb0, kb1, split, S, tail;
};
struct tw_plan {
    int U, full, R, S;
};
static __device__ __forceinline__ tw_plan tw_plan_units(int U, int G, bool can_split) {
    constexpr int KB = ${S.K} / ${BK};
    tw_plan p;
    p.U = U, p.R = U % G;
    int S = p.R ? G / p.R : 1;
    const int smax = KB / 4 > 1 ? KB / 4 : 1;
    S = S < smax ? S : smax;
    p.S = can_split && S >= 2 ? S : 1;
    p.full = p.S > 1 ? U - p.R : U;
    return p;
}
static __device__ __forceinline__ bool tw_unit_get(int u, const tw_plan &p, tw_unit &w) {
    constexpr int KB = ${S.K} / ${BK};
    if (u < p.full) {
        w.t = u, w.kb0 = 0, w.kb1 = KB, w.split = 0, w.S = 1, w.tail = 0;
        return true;
    }
    const int j = u - p.full;
    if (p.S == 1 || j >= p.R * p.S)
        return false;
    w.t = p.full + j / p.S, w.split = j % p.S, w.S = p.S, w.tail = j / p.S;
    w.kb0 = w.split * KB / p.S, w.kb1 = (w.split + 1) * KB / p.S;
    return true;
}

extern "C" __global__ void __launch_bounds__(${THREADS}, 1)
    twell_gate_pack_sm90(const __grid_constant__ tw_tmap map_x,
                         const __grid_constant__ tw_tmap map_w, tw_u32 *__restrict__ packed,
                         int M, float *__restrict__ ws, tw_u32 *__restrict__ ctr) {
    constexpr int NB = (${S.N} + ${BN} - 1) / ${BN};
    constexpr tw_u32 A_BYTES = ${A_BYTES}, B_BYTES = ${B_BYTES};
    constexpr int STAGES = ${STAGES}, CLUSTER = ${CLUSTER};
    constexpr int NPACK = 3; /* packer warps: warps 1..3 */
    constexpr int PNR = 4;   /* rows a packing warp interleaves */
    constexpr int ROWB = ${ROWB};
]==]
sm90.smem() -- shared memory base, A / B rings, staging buffer
cuda [==[
    /* full[STAGES], empty[STAGES], staged (8 consumer warps), unstaged (NPACK packer warps), then
     * two words: the staged tile's first row (-1: nothing to pack) and the split-K verdict */
    const tw_u32 sBar = sStg + ${STG_BYTES};
    const tw_u32 bar_staged = sBar + 16 * STAGES, bar_unstaged = bar_staged + 8;
    volatile int *info_ptr = (volatile int *)(tw_smem + (bar_unstaged + 8 - smem0));
    volatile int *last_ptr = (volatile int *)(tw_smem + (bar_unstaged + 12 - smem0));

]==]
sm90.start({ -- thread ids, cluster ids, barrier init and cluster sync
    after_init = function()
        cuda [==[
        tw_mbar_init(bar_staged, 8);
        tw_mbar_init(bar_unstaged, NPACK);
]==]
    end,
})
cuda [==[
    /* Programmatic dependent launch (the launcher may overlap us with the previous kernel of
     * the stream): every thread waits for it to complete before the first global access (x and
     * w reads, packed / ws / ctr writes that its predecessor may still read), on every path;
     * the set-up above touches only shared memory. No launch_dependents: the next kernel (the
     * fused pipeline's prep, a one-wave memory-bound grid) would then be scheduled onto the
     * first SMs our persistent CTAs free, up to 8 blocks each, and run on a fraction of the
     * GPU (slower end to end: docs/DESIGN.md §4); its launch still starts as our CTAs exit. No-op
     * without the launch attribute. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif

    const int MB = (M + ${BM} - 1) / ${BM};
    const int MP = (MB + CLUSTER - 1) / CLUSTER;
    const tw_plan plan = tw_plan_units(MP * NB, ncl, ws != 0 && ctr != 0);
    /* n fastest: the clusters running at once share x rows and sweep all of w (in L2) */
#define TW_UNIT_COORDS(w)                                                                          \
    const int nb = (w).t % NB, mp = (w).t / NB;                                                    \
    const int m0 = (mp * CLUSTER + (int)rank) * ${BM}, n0 = nb * ${BN}

    if (wg == 0) {
        /* the CTA's pool is 168 x 384 registers: 128 x 72 + 256 x 216 = 64512 */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 72;");
        if (tid == 0) {
            int stage = 0;
            tw_u32 phase = 0;
            tw_unit w;
            for (int u = cid; tw_unit_get(u, plan, w); u += ncl) {
                TW_UNIT_COORDS(w);
                for (int kb = w.kb0; kb < w.kb1; ++kb) {
                    const tw_u32 full = sBar + 8 * stage, empty = sBar + 8 * (STAGES + stage);
                    tw_mbar_wait(empty, phase ^ 1u);
                    tw_mbar_expect_tx(full, A_BYTES + B_BYTES);
                    tw_tma_load(sA + stage * A_BYTES, &map_x, kb * ${BK}, m0, full);
                    if (CLUSTER == 1)
                        tw_tma_load(sB + stage * B_BYTES, &map_w, kb * ${BK}, n0, full);
                    else
                        tw_tma_load_mc(sB + stage * B_BYTES + rank * (B_BYTES / CLUSTER), &map_w,
                                       kb * ${BK}, n0 + (int)rank * (${BN} / CLUSTER), full,
                                       (tw_u16)((1u << CLUSTER) - 1u));
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1u;
                    }
                }
            }
        } else if (warp >= 1) {
            /* packers: rows warp-1, warp-1+NPACK, ... of each staged tile but the CTA's last
             * (the consumers pack that one themselves: nothing else is left to overlap) */
            tw_u32 sphase = 0;
            tw_unit w, wn;
            for (int u = cid; tw_unit_get(u, plan, w); u += ncl) {
                if (!tw_unit_get(u + ncl, plan, wn))
                    break;
                TW_UNIT_COORDS(w);
                (void)m0;
                tw_mbar_wait(bar_staged, sphase);
                const int row0 = *info_ptr;
                if (row0 >= 0) {
                    const int rows = M - row0 < ${BM} ? M - row0 : ${BM};
                    for (int r = warp - 1; r < rows; r += PNR * NPACK) {
                        tw_u32 a[PNR];
                        int g[PNR];
#pragma unroll
                        for (int i = 0; i < PNR; ++i) {
                            const int ri = r + i * NPACK;
                            a[i] = sStg + (tw_u32)((ri < ${BM} ? ri : ${BM} - 1) * ROWB);
                            g[i] = ri < rows ? row0 + ri : M; /* M: skipped */
                        }
                        tw_pack_rows<PNR>(a, g, M, n0, packed);
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
        const int cw = wg - 1;    /* consumer warpgroup: rows 64cw .. 64cw+63 of the tile */
        const int wq = warp & 3;  /* warp in the warpgroup: rows 16wq .. 16wq+15 of those */
        const int ct = tid - 128; /* consumer thread 0..255 */
        const tw_u32 stg = sStg + (tw_u32)((cw * 4 + wq) * 16 * ROWB);
        /* stmatrix row address of this lane: matrix lane/8 (bit 0: rows +8, bit 1: cols +8) */
        const tw_u32 st_addr =
            stg + (tw_u32)(((lane & 7) + 8 * ((lane >> 3) & 1)) * ROWB + (lane >> 4) * 16);
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; ++i)
            d[i] = 0.f;
        int stage = 0;
        tw_u32 phase = 0, sphase = 0;
        tw_unit w, wn;
        for (int u = cid; tw_unit_get(u, plan, w); u += ncl) {
            TW_UNIT_COORDS(w);
            const bool last_unit = !tw_unit_get(u + ncl, plan, wn);
            int prev = 0;
            for (int kb = w.kb0; kb < w.kb1; ++kb) {
                tw_mbar_wait(sBar + 8 * stage, phase);
                tw_wg_fence();
                const tw_u64 da = tw_desc(sA + stage * A_BYTES + (tw_u32)(cw * 64 * ${BK} * 2));
                const tw_u64 db = tw_desc(sB + stage * B_BYTES);
#pragma unroll
                for (int kk = 0; kk < ${BK} / 16; ++kk)
                    tw_wgmma(d, da + (tw_u64)(2 * kk), db + (tw_u64)(2 * kk),
                             (kb > w.kb0 || kk > 0) ? 1u : 0u);
                tw_wg_commit();
                if (kb > w.kb0) {
                    tw_wg_wait<1>(); /* the previous k-block's group is done: free its stage */
                    if (lane == 0)
                        tw_release(sBar + 8 * (STAGES + prev));
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
                tw_release(sBar + 8 * (STAGES + prev));
            bool have = true;
            if (w.S > 1) {
                /* split-K part: publish the fp32 partial; the last part to arrive sums all parts
                 * in part order (deterministic) and packs. Nobody waits on another CTA. */
                const int slot = (w.tail * w.S + w.split) * CLUSTER + (int)rank;
                /* layout [slot][i][consumer thread][4]: coalesced 16-byte stores */
                float *mine = ws + (long long)slot * 32768 + 4 * ct;
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
                    const int slot0 = (w.tail * w.S) * CLUSTER + (int)rank;
                    const float *part0 = ws + (long long)slot0 * 32768 + 4 * ct;
#pragma unroll
                    for (int i = 0; i < 32; ++i) /* straight into the (dead) accumulators */
                        tw_ld_cg4(part0 + i * 1024, d[4 * i], d[4 * i + 1], d[4 * i + 2],
                                  d[4 * i + 3]);
                    for (int p = 1; p < w.S; ++p) {
                        const float *part = part0 + (long long)p * CLUSTER * 32768;
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
            tw_mbar_wait(bar_unstaged, sphase ^ 1u); /* the packers are done with the buffer */
            if (have) {
#pragma unroll
                for (int b = 0; b < 32; b += 2)
                    tw_stmatrix4(st_addr + (tw_u32)(b * 16), tw_relu_pack(d[4 * b], d[4 * b + 1]),
                                 tw_relu_pack(d[4 * b + 2], d[4 * b + 3]),
                                 tw_relu_pack(d[4 * b + 4], d[4 * b + 5]),
                                 tw_relu_pack(d[4 * b + 6], d[4 * b + 7]));
            }
            __syncwarp();
            if (last_unit) {
                if (have) { /* this warp's own 16 rows */
                    const int row0 = m0 + cw * 64 + wq * 16;
#pragma unroll 1
                    for (int j = 0; j < 16; j += PNR) {
                        tw_u32 a[PNR];
                        int g[PNR];
#pragma unroll
                        for (int i = 0; i < PNR; ++i)
                            a[i] = stg + (tw_u32)((j + i) * ROWB), g[i] = row0 + j + i;
                        tw_pack_rows<PNR>(a, g, M, n0, packed);
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
]==]
