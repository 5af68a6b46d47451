/* cpu_ref.h — the exact CPU reference of the inference ops as pure functions (no context), shared
 * by the CPU backend, the training reference, the tests, the benchmark and the GPU result checks.
 * Arguments are assumed valid (twell_shape_check passed, pointers non-NULL, sizes fit). */
#ifndef TWELL_CPU_REF_H
#define TWELL_CPU_REF_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

/* dst[i] = the fp32 value of the 16-bit pattern src[i] of dtype dt, for i < n. */
void tw_to_f32_ref(twell_dtype dt, const uint16_t *src, float *dst, size_t n);

/* The reference dot product: each product rounded to fp32, then added to one fp32 accumulator
 * that starts at +0, k ascending (no FMA, no reassociation). Every reference op computes its dot
 * products with exactly this sequence of roundings, however its loops are blocked, so a value
 * recomputed elsewhere (overflowing row-tiles, training) is bit-identical. */
float tw_dot_ref(const float *a, const float *b, size_t K);

/* The stored activation: round_to_dtype(relu(pre)) as a 16-bit pattern, the rule of
 * tw_half_act: +0 when pre is -Inf or not positive, the canonical positive NaN when pre is NaN
 * (active, as the dense computation propagates it), +Inf for +Inf. Active iff non-zero. */
uint16_t tw_act_ref(twell_dtype dt, float pre);

/* One dense row-tile of the packed activation, exact: vals[j] = tw_act_ref(dt, dot(x, w[col0+j]))
 * for j < T. x: fp32 row of K values; w: the packing weight [N, K] of 16-bit patterns; wrow:
 * scratch of K floats. Bit-identical to what tw_gate_pack_ref stores for that row-tile. */
void tw_gate_tile_ref(twell_dtype dt, const float *x, const uint16_t *w, size_t K, uint32_t col0,
                      uint32_t T, float *wrow, uint16_t *vals);

/* Scans a packed buffer of M rows for a row-tile that could not come from tw_gate_pack_ref
 * (count > T, a stored column outside its tile or not strictly ascending). Returns 1 and sets
 * *row and *tile for the first one, else 0. Used to reject foreign input before any write. */
int tw_packed_find_malformed(const twell_shape *s, size_t M, const uint32_t *packed, size_t *row,
                             uint32_t *tile);

/* packed = twell(relu(x · wᵀ)) for M rows (layout in twellrt.h), every word written. Parallel over
 * rows on pool (NULL: inline); the bytes do not depend on the thread count. Memory: one [K, T]
 * fp32 weight tile and a few rows per thread. TWELL_ERR_NO_MEMORY before anything is written. */
twell_status tw_gate_pack_ref(tw_pool *pool, const twell_shape *s, size_t M, const void *x,
                              const void *w, uint32_t *packed);

/* y = the fused FFN from packed (see twell_ffn_infer): gated s: wg, wu, wd all used; non-gated:
 * wg ignored, wu the packing weight. Row-tiles with count > slots are recomputed from x and the
 * packing weight with tw_gate_tile_ref, so y equals what an unlimited format would give. h·Wd is
 * accumulated in fp32 over active neurons in ascending column order; y rounded once.
 * TWELL_ERR_INVALID_ARG if packed is malformed (tw_packed_find_malformed), TWELL_ERR_NO_MEMORY;
 * y untouched on error. */
twell_status tw_ffn_infer_ref(tw_pool *pool, const twell_shape *s, size_t M, const void *x,
                              const uint32_t *packed, const void *wg, const void *wu,
                              const void *wd, void *y);

#endif /* TWELL_CPU_REF_H */
