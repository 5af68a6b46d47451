/* half.h — exact bf16/fp16 <-> fp32 conversions (round to nearest even), header-only. */
#ifndef TWELL_HALF_H
#define TWELL_HALF_H

#include "twellrt.h"

#include <stdint.h>
#include <string.h>

static inline float tw_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t tw_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float tw_bf16_to_f32(uint16_t h) { return tw_bits_f32((uint32_t)h << 16); }

static inline uint16_t tw_f32_to_bf16(float f) {
    uint32_t u = tw_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet, keep the sign */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float tw_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0)
            return tw_bits_f32(sign);
        /* subnormal: value = man * 2^-24, exact in fp32 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return tw_bits_f32(sign | 0x7f800000u | (man << 13));
    return tw_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t tw_f32_to_fp16(float f) {
    uint32_t u = tw_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal 2^-14: subnormal or zero */
        /* value / 2^-24, rounded to nearest even by the fp32 adder trick */
        float v = tw_bits_f32(a) * 16777216.0f; /* exact: scales by 2^24 */
        float r = v + 8388608.0f;               /* 2^23 forces rounding to an integer */
        r -= 8388608.0f;
        return (uint16_t)(sign | (uint16_t)r);
    }
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xfffu + mant_odd;
    return (uint16_t)(sign | (uint16_t)(((a >> 13) - (112u << 10)) & 0x7fffu));
}

static inline float tw_half_to_f32(twell_dtype dt, uint16_t h) {
    return dt == TWELL_DTYPE_BF16 ? tw_bf16_to_f32(h) : tw_fp16_to_f32(h);
}
static inline uint16_t tw_f32_to_half(twell_dtype dt, float f) {
    return dt == TWELL_DTYPE_BF16 ? tw_f32_to_bf16(f) : tw_f32_to_fp16(f);
}

/* ---- the activation rule (twellrt.h, "Non-finite values") ----
 * g = relu(pre) rounded to dtype, with NaN propagating as the dense computation propagates it: a
 * NaN pre-activation is active and stored as the dtype's canonical positive NaN (whatever its
 * sign and payload), +Inf is active, -Inf and everything <= 0 (±0 included) is inactive. */

/* The canonical positive NaN pattern of dtype: bf16 0x7fc0, fp16 0x7e00. */
static inline uint16_t tw_half_nan(twell_dtype dt) {
    return dt == TWELL_DTYPE_BF16 ? (uint16_t)0x7fc0u : (uint16_t)0x7e00u;
}
/* The exponent field of dtype's 16-bit pattern: all ones means NaN or infinity. */
static inline uint16_t tw_half_exp_mask(twell_dtype dt) {
    return dt == TWELL_DTYPE_BF16 ? (uint16_t)0x7f80u : (uint16_t)0x7c00u;
}
static inline int tw_half_is_nan(twell_dtype dt, uint16_t v) {
    const uint16_t em = tw_half_exp_mask(dt);
    return (v & em) == em && (v & (uint16_t)~em & 0x7fffu) != 0;
}
/* The stored activation of an fp32 pre-activation: its rounded value when active, else +0. */
static inline uint16_t tw_half_act(twell_dtype dt, float pre) {
    if (pre != pre)
        return tw_half_nan(dt);
    return pre > 0.0f ? tw_f32_to_half(dt, pre) : (uint16_t)0;
}
/* Whether a stored activation is active: a non-zero pattern with the sign bit clear (the
 * canonical NaN included). */
static inline int tw_half_active(uint16_t v) { return v != 0 && !(v & 0x8000u); }
/* Whether v may sit in a TwELL slot: positive finite, +Inf or the canonical NaN; not ±0, a
 * negative, -Inf or another NaN. */
static inline int tw_half_slot_ok(twell_dtype dt, uint16_t v) {
    if (!tw_half_active(v))
        return 0;
    return !tw_half_is_nan(dt, v) || v == tw_half_nan(dt);
}
/* sign(u) as the dense gradient of |T| has it: ±1, 0 for ±0, NaN for NaN. */
static inline float tw_sign_nan(float u) {
    return u > 0.0f ? 1.0f : (u < 0.0f ? -1.0f : (u == 0.0f ? 0.0f : u));
}

#endif /* TWELL_HALF_H */
