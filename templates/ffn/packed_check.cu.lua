-- packed_check.cu.lua — packed input validation of twell_ffn_infer (options.validate_packed,
-- runtime/ops/ffn/packed_check.c): finds the lowest-index word of a packed buffer that breaks
-- the TwELL layout, by the per-word rule of runtime/cpu/twell_format.c (tw_packed_word_faults),
-- which the host applies again to the row-tile found to name the fault. Keep the two rules equal.
--
-- Parameters: K, N, T, C, dtype (the plan's shape, see twellrt.h; K is not used).
-- ABI (block = 256 threads, any grid: a grid-stride loop over the words):
--   twell_packed_check(const unsigned *packed, long long M, unsigned long long *first)
--       packed [M, N/C]. *first = min(*first, i) over every word i with a fault (atomicMin:
--       the result does not depend on the order the threads run in). The caller sets *first to
--       ~0 before the launch; it stays ~0 when every word is well formed. Reads only packed.
--   __device__ unsigned long long twell_packed_first: a word of the module for `first`, so the
--       check allocates nothing (cuModuleGetGlobal gives its address).
-- A word is faulty when (W = T/C, t its row-tile's column tile, s its slot, c the row-tile's
-- word 0, stored = min(c, W-1)):
--   s = 0:            c > T;
--   1 <= s <= stored: its 16-bit value is not one gate-pack stores (tw_slot_ok: positive finite,
--                     +Inf or the canonical NaN; so +0, -0, negative, -Inf or another NaN is
--                     bad), or its column is outside [t·T, (t+1)·T), or (s >= 2) not above slot
--                     s-1's column;
--   s > stored:       the word is not 0.

local common = import "twell_common"
local S = common.shape()
local NT = S.N // S.T
common.act_rule(S.dtype)

cuda [==[
typedef unsigned int tw_u32;
typedef unsigned long long tw_u64;

__device__ tw_u64 twell_packed_first;

/* 1 when word e, slot s of the row-tile whose words start at tile (column tile t), is faulty. */
static __device__ __forceinline__ bool tw_word_bad(const tw_u32 *__restrict__ tile, tw_u32 e,
                                                   tw_u32 t, tw_u32 s) {
    const tw_u32 c = __ldg(tile);
    if (s == 0u)
        return c > ${S.T}u;
    const tw_u32 stored = c < ${S.SLOTS}u ? c : ${S.SLOTS}u;
    if (s > stored)
        return e != 0u;
    const tw_u32 v = e >> 16, col = e & 0xffffu, lo = t * ${S.T}u;
    bool bad = !tw_slot_ok((unsigned short)v);
    bad = bad || col < lo || col >= lo + ${S.T}u;
    if (s >= 2u)
        bad = bad || col <= (__ldg(tile + s - 1u) & 0xffffu);
    return bad;
}

extern "C" __global__ void __launch_bounds__(256)
    twell_packed_check(const tw_u32 *__restrict__ packed, long long M, tw_u64 *__restrict__ first) {
    const long long words = M * ${S.NW};
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        /* packed row-tile g = m·NT + t holds words g·W .. g·W + W-1 */
        const long long g = i / ${S.W};
        const tw_u32 s = (tw_u32)(i - g * ${S.W}), t = (tw_u32)(g % ${NT});
        if (tw_word_bad(packed + g * ${S.W}, __ldg(packed + i), t, s))
            atomicMin(first, (tw_u64)i);
    }
}
]==]
