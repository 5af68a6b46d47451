-- sm90_tma.lua — module of gate_pack_sm90.cu.lua and gemm_sm90.cu.lua: the device helpers their
-- TMA / wgmma main loops share (types, the tensor-map type, mbarriers, cluster registers, TMA
-- loads with and without multicast, wgmma fences, the K-major descriptor, the m64n256k16 wgmma
-- with its 128 accumulator operands), and two pieces of their kernels (M.smem, M.start below).
-- M.helpers(D) emits the helpers, in this order:
--   D.DT ("bf16" | "f16"), D.SBO (descriptor stride byte offset), D.SWZ (descriptor swizzle
--   mode: 1 = 128 B, 2 = 64 B), D.TA, D.TB (wgmma transpose flags, 0 | 1);
--   D.after_types, D.after_cluster, D.after_desc: optional functions that emit the template's
--   own CUDA at those places (gemm_sm90: its MODE defines, named barriers, MN-major descriptor);
--   D.note_arrive_cluster, D.note_tma_mc, D.note_fence_acc, D.note_desc: the comment text each
--   template puts before those helpers ("" for none; each line ends with a newline).
local M = {}

function M.helpers(D)
    local regs, outs = {}, {}
    for i = 0, 127 do
        regs[#regs + 1] = "%" .. i
        outs[#outs + 1] = string.format('"+f"(d[%d])', i)
    end
    local WG_REGS = table.concat(regs, ", ")
    local WG_OUTS = table.concat(outs, ", ")
    cuda [==[
typedef unsigned int tw_u32;
typedef unsigned long long tw_u64;
typedef unsigned short tw_u16;

]==]
    if D.after_types then
        D.after_types()
    end
    cuda [==[
/* Same size and alignment as CUtensorMap. */
struct __align__(64) tw_tmap {
    tw_u64 opaque[16];
};

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
static __device__ __forceinline__ void tw_mbar_arrive(tw_u32 bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
                 : "memory");
}
${D.note_arrive_cluster}static __device__ __forceinline__ void tw_mbar_arrive_cluster(tw_u32 bar, tw_u32 cta) {
    tw_u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(cta));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

/* ---- cluster ---- */
static __device__ __forceinline__ tw_u32 tw_sreg_cluster_rank(void) {
    tw_u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ tw_u32 tw_sreg_cluster_id(void) {
    tw_u32 r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ tw_u32 tw_sreg_cluster_count(void) {
    tw_u32 r;
    asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ void tw_cluster_sync(void) {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

]==]
    if D.after_cluster then
        D.after_cluster()
    end
    cuda [==[
/* ---- TMA ---- */
static __device__ __forceinline__ void tw_tma_load(tw_u32 dst, const tw_tmap *map, int c0, int c1,
                                                   tw_u32 bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"((tw_u64)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
${D.note_tma_mc}static __device__ __forceinline__ void tw_tma_load_mc(tw_u32 dst, const tw_tmap *map, int c0,
                                                      int c1, tw_u32 bar, tw_u16 ctamask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
                 "l"((tw_u64)map), "r"(c0), "r"(c1), "r"(bar), "h"(ctamask)
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
${D.note_fence_acc}static __device__ __forceinline__ void tw_fence_acc(float (&d)[128]) {
#pragma unroll
    for (int i = 0; i < 128; ++i)
        asm volatile("" : "+f"(d[i])::"memory");
}
${D.note_desc}static __device__ __forceinline__ tw_u64 tw_desc(tw_u32 saddr) {
    return (tw_u64)((saddr & 0x3FFFF) >> 4) | ((tw_u64)1 << 16) | ((tw_u64)(${D.SBO} >> 4) << 32) |
           ((tw_u64)${D.SWZ} << 62);
}
]==]
    if D.after_desc then
        D.after_desc()
    end
    cuda [==[
static __device__ __forceinline__ void tw_wgmma(float (&d)[128], tw_u64 da, tw_u64 db,
                                                tw_u32 scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.${D.DT}.${D.DT} "
                 "{${WG_REGS}}, %128, %129, p, 1, 1, ${D.TA}, ${D.TB};\n}\n"
                 : ${WG_OUTS}
                 : "l"(da), "l"(db), "r"(scale_d));
}
]==]
end

-- In the kernel, once A_BYTES, B_BYTES and STAGES are defined: the 1024-byte aligned shared
-- memory base and the A / B rings (sA, sB), then the staging buffer sStg.
function M.smem()
    cuda [==[
    extern __shared__ __align__(1024) unsigned char tw_smem[];
    const tw_u32 smem0 = tw_smem_addr(tw_smem);
    const tw_u32 base = (smem0 + 1023u) & ~1023u;
    const tw_u32 sA = base;
    const tw_u32 sB = sA + STAGES * A_BYTES;
    const tw_u32 sStg = sB + STAGES * B_BYTES;
]==]
end

-- In the kernel, once sBar and CLUSTER are defined: tid, wg, warp, lane, the cluster rank, id
-- and count, thread 0 initialising the full / empty barriers of the ring (then D.after_init(),
-- when given, emits the template's own mbarrier.init lines) and the cluster (or block) sync.
function M.start(D)
    cuda [==[
    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const tw_u32 rank = CLUSTER > 1 ? tw_sreg_cluster_rank() : 0u;
    const int cid = CLUSTER > 1 ? (int)tw_sreg_cluster_id() : (int)blockIdx.x;
    const int ncl = CLUSTER > 1 ? (int)tw_sreg_cluster_count() : (int)gridDim.x;

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            tw_mbar_init(sBar + 8 * s, 1);
            tw_mbar_init(sBar + 8 * (STAGES + s), 8 * CLUSTER); /* one arrival per consumer warp */
        }
]==]
    if D.after_init then
        D.after_init()
    end
    cuda [==[
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (CLUSTER > 1)
        tw_cluster_sync(); /* the peer's multicast must not reach uninitialised barriers */
    else
        __syncthreads();
]==]
end

return M
