-- ffn_fused_dev.lua — module of ffn_fused.cu.lua: the shared device helpers, in three parts that
-- the template emits where the kernels' source order puts them (the order is part of the rendered
-- source, which this split kept byte for byte apart from `#line`):
--   core(D)  before the row kernel: types, the list layout's index arithmetic, 16-bit
--            conversions, cp.async, shared-memory loads, mma m16n8k16, chunk copies
--   mid(D)   after it: prmt, phase B token masks, cp16z, mma m16n8k8, hi|lo splitting,
--            the workspace control words' layout, tw_find_tile (overflow kernels)
--   stage(D) after the reduce: tw_cp4, the phases' shared-memory layout (TW_RE, TW_SB) and
--            tw_stage_lists
-- and two pieces of the phases: group_walk() (in tw_pa_chunk, tw_pb_chunk) and chunk_ring() (in
-- tw_k_phase_a, tw_k_phase_b).
local M = {}
function M.core(D)
    cuda [==[
// Kernel bodies are device functions; the extern "C" wrappers at the end are the kernels.
#define TW_KERNEL(bounds) __device__ __forceinline__ void
typedef unsigned int tw_u32;
typedef unsigned short tw_u16;
typedef unsigned char tw_u8;
typedef unsigned long long tw_u64;

#define TW_FULL 0xffffffffu
#define TW_NONE 0xffffffffu

// ---------------------------------------------------------------------------------------------
// List layout (pure index arithmetic)
// A list = the active pairs of one (chunk, group of 8 tokens), PADQ-padded (8, or 16 for fp16
// gated). Slot descriptor (32 bits): row in chunk << 7 | (row & 7) << 4 | token column; the
// chunk row r sits in shared memory at r * 128 with 16-byte piece p at p ^ (r & 7), so
// (desc ^ p << 4) & ~15 is the byte offset of logical piece p. Bank rules (a quarter-warp phase of a
// 16-byte load is one wavefront when its 8 pieces hit 8 bank groups):
//   phase A reads pieces t4 and t4 + 4 of the rows in slots (2i, 2i + 1): conflict-free iff the
//   rows differ in bit 2; phase B reads pieces pi(g) of the rows in slots {j, 4+j, 8+j, 12+j} of a
//   round: conflict-free iff their (row & 3) classes are distinct.
// Entries are sorted by class (row & 3), bit 2 alternating inside a class run, and dealt into
// 4-sets: sorted index si -> set si % S4, position si / S4 (S4 = size / 4). A set with no class
// run longer than S4 is rainbow; consecutive sorted indices (a phase-A pair) differ in bit 2
// while both bit values last. Pads (gate value 0) take the classes a set lacks.
// ---------------------------------------------------------------------------------------------
#define TW_HD __device__ __forceinline__
// Slot of sorted index si in a list of `size` slots (a multiple of 8): full rounds (16 slots,
// sets 4r..4r+3) place set s, position q at 16 (s / 4) + 4 q + s % 4; a trailing half round (8
// slots, sets 4R and 4R + 1) at 16 R + 2 q + (s - 4 R).
TW_HD tw_u32 tw_slot_of(tw_u32 si, tw_u32 size) {
    const tw_u32 S4 = size >> 2, R = size >> 4, s = si % S4, q = si / S4;
    return s < 4u * R ? 16u * (s >> 2) + 4u * q + (s & 3u) : 16u * R + 2u * q + (s - 4u * R);
}
// Position inside its class run of the i-th entry with bit-2 value b (mc = min(zeros, ones)):
// alternating 0 1 0 1 ... while both last, then the rest of the larger side.
TW_HD tw_u32 tw_class_pos(tw_u32 i, tw_u32 b, tw_u32 mc) { return i < mc ? 2u * i + b : mc + i; }
TW_HD tw_u32 tw_desc(tw_u32 row, tw_u32 tok) { return (row << 7) | ((row & 7u) << 4) | tok; }
// Sort bucket of a chunk row: class (row & 3) major, bit 2 minor.
TW_HD tw_u32 tw_bucket(tw_u32 row) { return ((row & 3u) << 1) | ((row >> 2) & 1u); }
// Phase B: logical 16-byte piece (8 output columns) read by lanes of group id g: the two g of a
// quarter-warp differ in bit 2 only.
TW_HD tw_u32 tw_pib(tw_u32 g) { return (g >> 1) | ((g & 1u) << 2); }
// Power-of-two scale for fp16 hi/lo splitting: for a block whose largest |h| has biased exponent
// ex (clamped to [20, 250]), h * 2^(141 - ex) < 2^15 and the result times 2^(ex - 141) is exact.
TW_HD tw_u32 tw_scale_ex(tw_u32 amax_bits) {
    tw_u32 ex = (amax_bits >> 23) & 0xffu;
    ex = (amax_bits & 0x7fffffffu) == 0u ? 127u : ex;
    return ex < 20u ? 20u : ex > 250u ? 250u : ex;
}
#define TW_KW 64 /* k columns per slice (phase A/B CTAs) */

// ---------------------------------------------------------------------------------------------
// 16-bit helpers (DT 0 = bf16, 1 = fp16)
// ---------------------------------------------------------------------------------------------
template <int DT> __device__ __forceinline__ float tw_h2f(tw_u32 h) {
    if constexpr (DT == 0) {
        return __uint_as_float((h & 0xffffu) << 16);
    } else {
        float f;
        asm("{.reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t;}" : "=f"(f) : "h"((tw_u16)h));
        return f;
    }
}
template <int DT> __device__ __forceinline__ void tw_h2f2(tw_u32 w, float &lo, float &hi) {
    if constexpr (DT == 0) {
        lo = __uint_as_float(w << 16);
        hi = __uint_as_float(w & 0xffff0000u);
    } else {
        asm("{.reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b;}"
            : "=f"(lo), "=f"(hi)
            : "r"(w));
    }
}
template <int DT> __device__ __forceinline__ tw_u16 tw_f2h(float f) {
    tw_u16 r;
    if constexpr (DT == 0)
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    else
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}
// lo goes to bits 15..0, hi to bits 31..16 (round to nearest even).
template <int DT> __device__ __forceinline__ tw_u32 tw_pack2(float lo, float hi) {
    tw_u32 r;
    if constexpr (DT == 0)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// relu then round: the packed value convention (active iff the result is positive; a NaN is
// active and stored as the canonical positive NaN, the rule of runtime/core/half.h tw_half_act).
template <int DT> __device__ __forceinline__ tw_u32 tw_relu_round(float v) {
    if (v != v)
        return DT == 0 ? 0x7fc0u : 0x7e00u;
    return v > 0.0f ? (tw_u32)tw_f2h<DT>(v) : 0u;
}
// |v| for a block's max-abs scale, 0 for NaN and ±Inf: one non-finite value must not move the
// scale of its block's finite values (it still propagates through its own hi half).
__device__ __forceinline__ float tw_abs_fin(float v) {
    const float a = fabsf(v);
    return a <= 3.40282347e38f ? a : 0.0f;
}

__device__ __forceinline__ tw_u32 tw_smem_addr(const void *p) {
    tw_u32 r;
    asm("{.reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t;}" : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void tw_cp16(tw_u32 dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void tw_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void tw_cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ uint4 tw_lds128(tw_u32 a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
__device__ __forceinline__ void tw_stgp(float *ptr, float v, tw_u32 p) {
    asm volatile("{.reg .pred q; setp.ne.u32 q, %2, 0; @q st.global.f32 [%0], %1;}" ::"l"(ptr), "f"(v),
                 "r"(p)
                 : "memory");
}
// Stores v at ptr iff z == 0.
__device__ __forceinline__ void tw_stgz(float *ptr, float v, tw_u32 z) {
    asm volatile("{.reg .pred q; setp.eq.u32 q, %2, 0; @q st.global.f32 [%0], %1;}" ::"l"(ptr), "f"(v),
                 "r"(z)
                 : "memory");
}
__device__ __forceinline__ tw_u32 tw_lds32(tw_u32 a) {
    tw_u32 v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ void tw_ldsm4(tw_u32 (&r)[4], tw_u32 a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void tw_ldsm4t(tw_u32 (&r)[4], tw_u32 a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
// d += A(16x16, row) * B(16x8, col), fp32 accumulate.
template <int DT>
__device__ __forceinline__ void tw_mma(float (&d)[4], const tw_u32 (&a)[4], tw_u32 b0, tw_u32 b1) {
    if constexpr (DT == 0)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float tw_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(TW_FULL, v, o);
    return v;
}

// Loads rows [c*CN, c*CN + rows) x columns [k0, k0+64) of w into a chunk buffer: 128-byte rows,
// 16-byte piece q of row r stored at piece q ^ (r & 7).
// Thread i copies piece q = i % 8 of rows i / 8 + RS j (RS = NTHR / 8, a multiple of 8, so the
// swizzle term r & 7 is the same for all of a thread's rows): one add per copy.
template <int CN, int NTHR>
__device__ __forceinline__ void tw_load_chunk(tw_u32 sdst, const tw_u16 *__restrict__ w, int c,
                                              int N, int K, int k0) {
    constexpr int RS = NTHR / 8;
    static_assert(NTHR % 64 == 0, "tw_load_chunk: NTHR must be a multiple of 64");
    const int rows = min(CN, N - c * CN), q = (int)threadIdx.x & 7, r0 = (int)threadIdx.x >> 3;
    const tw_u32 d = sdst + r0 * 128 + ((q ^ (r0 & 7)) << 4);
    const tw_u16 *src = w + ((long long)c * CN + r0) * K + k0 + 8 * q;
#pragma unroll
    for (int it = 0; it < (CN + RS - 1) / RS; it++)
        if (r0 + it * RS < rows)
            tw_cp16(d + it * RS * 128, src + (long long)it * RS * K);
}
// Copies bytes [0, n16*16) of src to shared memory (cp.async, 16-byte pieces).
template <int NTHR>
__device__ __forceinline__ void tw_load_bytes(tw_u32 sdst, const void *src, tw_u32 n16) {
    const char *p = (const char *)src;
    for (tw_u32 i = threadIdx.x; i < n16; i += NTHR)
        tw_cp16(sdst + 16 * i, p + 16ull * i);
}

]==]
end
function M.mid(D)
    cuda [==[
__device__ __forceinline__ tw_u32 tw_prmt2(tw_u32 a, tw_u32 b, tw_u32 sel) {
    tw_u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}
__device__ __forceinline__ uint2 tw_lds64(tw_u32 a) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
    return v;
}
// Phase B token masks: for the descriptors d0..d3 of 4 slots and a token column tg
// (g4 = tg * 0x01010101), m01 has 16-bit half 0 (1) all ones iff slot 0 (1) holds token tg, m23
// likewise for slots 2, 3. Byte i of t is slot i's key << 4 | token; (t ^ g4) & 0x0f0f0f0f is 0 in
// byte i iff slot i matches, so 0x80 minus it (no borrow: bytes <= 15) has the byte's top bit set
// iff it matches, and prmt's sign-replicating selectors spread those bits over the halves.
TW_HD void tw_tokmask4(tw_u32 d0, tw_u32 d1, tw_u32 d2, tw_u32 d3, tw_u32 g4, tw_u32 &m01,
                       tw_u32 &m23) {
    const tw_u32 t = tw_prmt2(tw_prmt2(d0, d1, 0x0040u), tw_prmt2(d2, d3, 0x4000u), 0x7610u);
    const tw_u32 z = 0x80808080u - ((t ^ g4) & 0x0f0f0f0fu);
    m01 = tw_prmt2(z, 0u, 0x9988u);
    m23 = tw_prmt2(z, 0u, 0xbbaau);
}
TW_HD tw_u32 tw_tokmask2(tw_u32 d0, tw_u32 d1, tw_u32 g4) {
    const tw_u32 z = 0x80808080u - ((tw_prmt2(d0, d1, 0x0040u) ^ g4) & 0x0f0f0f0fu);
    return tw_prmt2(z, 0u, 0x9988u);
}
// cp.async of 16 bytes, or 16 zero bytes when !valid (src is not read then).
__device__ __forceinline__ void tw_cp16z(tw_u32 dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
// d += A(16x8, row) * B(8x8, col), fp32 accumulate.
template <int DT>
__device__ __forceinline__ void tw_mma8(float (&d)[4], tw_u32 a0, tw_u32 a1, tw_u32 b0) {
    if constexpr (DT == 0)
        asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
            "{%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(b0));
    else
        asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
            "{%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(b0));
}
template <int DT> __device__ __forceinline__ float tw_ex_inv(tw_u32 ex) {
    return DT == 1 ? __uint_as_float((ex - 14u) << 23) : 1.0f;
}
// hi + lo 16-bit split of v (fp16: of v * 2^(141 - ex)); hi in bits 31..16. A non-finite hi
// (NaN or ±Inf) carries v alone: lo = +0, so ±Inf stays ±Inf instead of Inf - Inf = NaN.
template <int DT> __device__ __forceinline__ tw_u32 tw_split_hl(float v, tw_u32 ex) {
    if constexpr (DT == 1)
        v *= __uint_as_float((268u - ex) << 23);
    const tw_u16 hi = tw_f2h<DT>(v);
    const float hf = tw_h2f<DT>(hi);
    const tw_u16 lo = fabsf(hf) <= 3.40282347e38f ? tw_f2h<DT>(v - hf) : (tw_u16)0;
    return ((tw_u32)hi << 16) | lo;
}

// Workspace control words: flag[0] fallback bits (1: overflowing row-tiles over OVF_CAP or
// overflowing rows over OROW_CAP, 2: pair slots over PAIR_CAP), [1] pair slots, [2] overflowing
// row-tiles, [3] overflowing rows. cnt[0..NT-1] overflowing rows per tile, cnt[NT] overflowing
// rows, u64 at cnt + ((NT + 2) & ~1) the active values (all zero before pre-pass 1: the scan
// zeroes them after reading, the launcher once after allocating).

// Binary search: last t in [0, NT) with base[t] <= item.
__device__ __forceinline__ int tw_find_tile(const tw_u32 *base, int NT, tw_u32 item) {
    int lo = 0, hi = NT - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (base[mid] <= item)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

]==]
end
function M.stage(D)
    cuda [==[
// cp.async of 4 bytes (no alignment beyond the word).
__device__ __forceinline__ void tw_cp4(tw_u32 dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
// Shared-memory layout of the phases: per buffer, DCAP list slots of each staged array,
// then the block's NGB + 1 list offsets and NGB sizes of the chunk; after both buffers, a table of
// (first offset, end offset) of the block's lists per chunk (NC <= 256).
#define TW_RE 2048
#define TW_SB(DCAP, SLOTB, NGB) ((DCAP) * (SLOTB) + (2 * (NGB) + 4) * 4)
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

]==]
end

-- In tw_pa_chunk / tw_pb_chunk: opens the loop over the warp's groups j < min(GPW, nj) and
-- defines the group's size szj, full rounds nfull and list offset o (relative to ra); with PF the
-- next group's size and offset are loaded one step ahead (szn, on). The caller closes the loop.
function M.group_walk()
    cuda [==[
    tw_u32 szn = 0, on = 0;
    if (PF) {
        szn = tw_lds32(so + 4u * (NGB + 1 + gl0));
        on = tw_lds32(so + 4u * gl0);
    }
#pragma unroll
    for (int j = 0; j < GPW; j++) {
        if (j >= nj)
            break;
        const tw_u32 szj = PF ? szn : tw_lds32(so + 4u * (NGB + 1 + gl0 + j));
        const tw_u32 nfull = szj >> 4;
        tw_u32 o = (PF ? on : tw_lds32(so + 4u * (gl0 + j))) - ra;
        if (PF && j + 1 < GPW) {
            szn = tw_lds32(so + 4u * (NGB + 1 + gl0 + j + 1));
            on = tw_lds32(so + 4u * (gl0 + j + 1));
        }
]==]
end

-- In tw_k_phase_a / tw_k_phase_b, after their lambda stage(c) (the cp.async loads of chunk c):
-- the ST-deep ring's prologue, then opens the loop over the chunks c (staging chunk c + ST - 1)
-- up to chunk c's arrival, with its list range ra, rn. The caller closes the loop.
function M.chunk_ring()
    cuda [==[
#pragma unroll
    for (int i = 0; i < ST - 1; i++) {
        if (i < NC)
            stage(i);
        tw_cp_commit();
    }
    for (int c = 0; c < NC; c++) {
        if (c + ST - 1 < NC)
            stage(c + ST - 1);
        tw_cp_commit();
        const tw_u32 ra = tw_lds32(sre + 8u * c), rn = tw_lds32(sre + 8u * c + 4u) - ra;
        tw_cp_wait<ST - 1>();
        __syncthreads();
]==]
end

return M
