-- twell_common.lua — helpers shared by kernel templates (import "twell_common"):
-- shape validation, exact 16-bit conversions, a TwELL row's active count, warp prefix sums and
-- the warp-cooperative TwELL row-tile packer.
-- Everything here must stay bit-exact with runtime/core/half.h and runtime/cpu/cpu_ref.h.

local M = {}

-- Validates the shape parameters every kernel takes and returns them with derived sizes:
-- { K, N, T, C, dtype, W = T/C words per row-tile, SLOTS = W - 1, NW = N/C words per row }.
-- K and N are required; T, C and dtype default as in twell_shape_init (256, 8, bf16).
function M.shape()
    local K, N = P.K, P.N
    local T, C, dtype = param("T", 256), param("C", 8), param("dtype", "bf16")
    for _, kv in ipairs({ { "K", K }, { "N", N }, { "T", T }, { "C", C } }) do
        check(math.type(kv[2]) == "integer", "%s must be an integer, got %s", kv[1],
            tostring(kv[2]))
    end
    check(K >= 16 and K % 16 == 0, "K=%d must be a positive multiple of 16", K)
    check(T == 64 or T == 128 or T == 256, "T=%d must be 64, 128 or 256", T)
    check(N >= T and N % T == 0 and N <= 65536, "N=%d must be a multiple of T=%d, at most 65536",
        N, T)
    check(C == 2 or C == 4 or C == 8, "C=%d must be 2, 4 or 8", C)
    check(dtype == "bf16" or dtype == "fp16", "dtype=%s must be bf16 or fp16", tostring(dtype))
    return { K = K, N = N, T = T, C = C, dtype = dtype, W = T // C, SLOTS = T // C - 1,
             NW = N // C }
end

-- Emits tw_to_f32(unsigned short) and tw_from_f32(float) for dtype: exact widening, and
-- narrowing with round to nearest even (NaN stays NaN), written with integer operations only so
-- they need no CUDA header and match runtime/core/half.h bit for bit; then the activation rule's
-- helpers (M.act_rule below) and tw_act16(pre), the stored activation of an fp32 pre-activation.
function M.conversions(dtype)
    cuda [==[
__device__ __forceinline__ float tw_bits_f32(unsigned int u) { return __uint_as_float(u); }
__device__ __forceinline__ unsigned int tw_f32_bits(float f) { return __float_as_uint(f); }
]==]
    if dtype == "bf16" then
        cuda [==[
__device__ __forceinline__ float tw_to_f32(unsigned short h) {
    return tw_bits_f32((unsigned int)h << 16);
}
__device__ __forceinline__ unsigned short tw_from_f32(float f) {
    unsigned int u = tw_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, sign kept */
        return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
]==]
    else
        cuda [==[
__device__ __forceinline__ float tw_to_f32(unsigned short h) {
    const unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
    const unsigned int exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: man * 2^-24, exact */
        const float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return tw_bits_f32(sign | 0x7f800000u | (man << 13));
    return tw_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
__device__ __forceinline__ unsigned short tw_from_f32(float f) {
    const unsigned int u = tw_f32_bits(f);
    const unsigned int sign = (u >> 16) & 0x8000u;
    unsigned int a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (unsigned short)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to 65520 or more: infinity */
        return (unsigned short)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal result in units of 2^-24 */
        const unsigned int e = a >> 23;
        if (e == 0)
            return (unsigned short)sign; /* fp32 zero or subnormal: far below 2^-25 */
        const unsigned int m = (a & 0x7fffffu) | 0x800000u;
        const unsigned int shift = 126u - e; /* >= 14 */
        if (shift > 25u)
            return (unsigned short)sign;
        unsigned int q = m >> shift;
        const unsigned int rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (unsigned short)(sign | q);
    }
    a += 0xfffu + ((a >> 13) & 1u);
    return (unsigned short)(sign | (((a >> 13) - (112u << 10)) & 0x7fffu));
}
]==]
    end
    M.act_rule(dtype)
    cuda [==[
/* The stored activation of an fp32 pre-activation (tw_half_act): round(relu(pre)), the
 * canonical NaN for NaN, else +0. */
__device__ __forceinline__ unsigned short tw_act16(float pre) {
    return pre > 0.0f ? tw_from_f32(pre) : tw_act_nan(pre, (unsigned short)0);
}
]==]
end

-- The activation rule of runtime/core/half.h (tw_half_act; twellrt.h, "Non-finite values"):
-- g = relu(pre) rounded to dtype, a NaN pre-activation active and stored as the canonical
-- positive NaN, +Inf active, -Inf and everything <= 0 inactive. M.nan16(dtype) is that NaN's
-- pattern, M.expm(dtype) the pattern's exponent field (as C literals).
function M.nan16(dtype)
    return dtype == "bf16" and "0x7fc0u" or "0x7e00u"
end
function M.expm(dtype)
    return dtype == "bf16" and "0x7f80u" or "0x7c00u"
end

-- Emits the rule's device helpers that need no conversion function:
--   TW_NAN16                 the canonical NaN pattern;
--   tw_act_on(pre)           an fp32 pre-activation is active (> 0, +Inf or NaN);
--   tw_act_nan(pre, v16)     v16 (the rounded active value) unless pre is NaN: TW_NAN16;
--   tw_act_bits(v)           the activation of a pre-activation already rounded to a 16-bit
--                            pattern v: v when positive, TW_NAN16 for any NaN (sign and payload
--                            ignored), else +0;
--   tw_slot_ok(v)            v may sit in a TwELL slot: positive, +Inf or TW_NAN16;
--   tw_relu_nan(v)           relu in fp32 keeping NaN (NaN·u stays NaN downstream);
--   tw_sign_nan(u)           sign(u) as the dense gradient of |T|: ±1, 0, NaN for NaN.
-- Templates that call M.conversions get them from it.
function M.act_rule(dtype)
    local NAN, EXPM = M.nan16(dtype), M.expm(dtype)
    cuda [==[
#define TW_NAN16 ${NAN}
__device__ __forceinline__ bool tw_act_on(float pre) { return pre > 0.0f || pre != pre; }
__device__ __forceinline__ unsigned short tw_act_nan(float pre, unsigned short v16) {
    return pre != pre ? (unsigned short)TW_NAN16 : v16;
}
__device__ __forceinline__ unsigned short tw_act_bits(unsigned short v) {
    if ((v & ${EXPM}) == ${EXPM} && (v & (0x7fffu & ~${EXPM})) != 0u)
        return (unsigned short)TW_NAN16;
    return (v & 0x8000u) != 0u ? (unsigned short)0 : v;
}
__device__ __forceinline__ bool tw_slot_ok(unsigned short v) {
    if (v == 0u || (v & 0x8000u) != 0u)
        return false;
    return (v & ${EXPM}) != ${EXPM} || (v & (0x7fffu & ~${EXPM})) == 0u || v == TW_NAN16;
}
__device__ __forceinline__ float tw_relu_nan(float v) { return v > 0.0f || v != v ? v : 0.0f; }
__device__ __forceinline__ float tw_sign_nan(float u) {
    return u > 0.0f ? 1.0f : (u < 0.0f ? -1.0f : (u == 0.0f ? 0.0f : u));
}
]==]
end

-- Emits tw_canon_nan2(r): the word r of two 16-bit values (of dtype) with each NaN half replaced
-- by the canonical NaN (hardware conversions give a NaN of their own, e.g. PTX's 0x7fff). A half
-- is NaN iff its magnitude exceeds the infinity's: adding ADD per half sets bit 15 exactly then.
-- Needs M.act_rule (or M.conversions) first.
function M.canon_nan2(dtype)
    local ADD = dtype == "bf16" and "0x007f007fu" or "0x03ff03ffu" -- 0x8000 - (Inf + 1), twice
    cuda [==[
__device__ __forceinline__ unsigned int tw_canon_nan2(unsigned int r) {
    const unsigned int nan = ((r & 0x7fff7fffu) + ${ADD}) & 0x80008000u;
    const unsigned int sel = (nan >> 15) * 0xffffu; /* 0xffff in the NaN halves */
    return (r & ~sel) | ((TW_NAN16 | (TW_NAN16 << 16)) & sel);
}
]==]
end

-- Emits tw_row_active(row): the number of active values of one TwELL row (row = its first
-- word: the sum of its N/T row-tiles' count words), summed by a warp; every lane returns it. All
-- 32 lanes must call it together.
function M.row_active(S)
    local NT, W = S.N // S.T, S.W
    cuda [==[
__device__ __forceinline__ unsigned int tw_row_active(const unsigned int *row) {
    unsigned int c = 0;
    for (unsigned int t = threadIdx.x & 31u; t < ${NT}u; t += 32u)
        c += row[t * ${W}u];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        c += __shfl_xor_sync(0xffffffffu, c, o);
    return c;
}
]==]
end

-- Emits tw_warp_incl_scan(v, lane) and tw_warp_incl_scan2(a, b, lane), for an unsigned integer
-- type T (tw_u32 or tw_u64 at the call sites): the inclusive prefix sum of v over the 32 lanes of
-- a warp (lane `lane` gets v[0] + ... + v[lane], modulo 2^bits), by five __shfl_up_sync steps;
-- lane 31 holds the warp total (callers that need it in every lane shuffle it from there).
-- tw_warp_incl_scan2 scans two values in place with their shuffles interleaved (two independent
-- sums in flight, as the two-channel scans were written). lane = threadIdx.x & 31; all 32 lanes
-- must call them together.
function M.warp_scan()
    cuda [==[
template <typename T> __device__ __forceinline__ T tw_warp_incl_scan(T v, int lane) {
    static_assert((T)-1 > (T)0, "tw_warp_incl_scan: an unsigned type (wraps, no overflow)");
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const T u = __shfl_up_sync(0xffffffffu, v, o);
        v += lane >= o ? u : (T)0;
    }
    return v;
}
template <typename T> __device__ __forceinline__ void tw_warp_incl_scan2(T &a, T &b, int lane) {
    static_assert((T)-1 > (T)0, "tw_warp_incl_scan2: an unsigned type (wraps, no overflow)");
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const T va = __shfl_up_sync(0xffffffffu, a, o), vb = __shfl_up_sync(0xffffffffu, b, o);
        a += lane >= o ? va : (T)0;
        b += lane >= o ? vb : (T)0;
    }
}
]==]
end

-- Emits tw_pack_row_tile_warp(vals, dst, col0): the 32 lanes of one warp pack the T 16-bit
-- activations vals[0..T) (shared memory) of one row-tile into dst[0..W): word 0 = number of
-- active values (positive patterns), then up to SLOTS entries (value << 16 | column) in ascending
-- column order, unused slots 0. Ballots and prefix popcounts, no atomics: deterministic. All 32
-- lanes must call it together.
function M.pack_row_tile_warp(S)
    cuda [==[
__device__ __forceinline__ void tw_pack_row_tile_warp(const unsigned short *vals,
                                                      unsigned int *dst, unsigned int col0) {
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned int below = (1u << lane) - 1u; /* lanes before this one */
    unsigned int count = 0;
#pragma unroll
    for (unsigned int c = 0; c < ${S.T}u; c += 32u) {
        const unsigned short v = vals[c + lane];
        const bool active = v != 0 && (v & 0x8000u) == 0; /* tw_act16's: NaN canonical */
        const unsigned int ballot = __ballot_sync(0xffffffffu, active);
        const unsigned int pos = count + (unsigned int)__popc(ballot & below);
        if (active && pos < ${S.SLOTS}u)
            dst[1u + pos] = ((unsigned int)v << 16) | (col0 + c + lane);
        count += (unsigned int)__popc(ballot);
    }
    for (unsigned int s = count + lane; s < ${S.SLOTS}u; s += 32u)
        dst[1u + s] = 0u;
    if (lane == 0)
        dst[0] = count;
}
]==]
end

return M
