/*
 * pack_check.h — compares a GPU's packed gate output with the exact CPU reference, allowing only
 * the differences fp32 summation order can cause. Shared by the GPU tests and `twell bench`.
 */
#ifndef TWELL_PACK_CHECK_H
#define TWELL_PACK_CHECK_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/*
 * The rule. For each compared row-tile:
 *  - identical words: "exact";
 *  - otherwise "tolerated" iff the GPU tile is well formed (count ≤ T, min(count, slots) entries
 *    with strictly ascending columns inside the tile, positive values, unused slots 0) and, with
 *    z_j the exact (fp64) pre-activation of column j and e_j = K·2⁻²³·Σ_k|x_k·w_jk| a bound on the
 *    error of any fp32 summation order (twice the classic K·u bound, for non-IEEE tensor-core
 *    accumulation; e_j = 0 where z_j or the bound is not finite), with lo_j = act(z_j − e_j),
 *    hi_j = act(z_j + e_j) (act = tw_half_act: relu, round to dtype, NaN the canonical NaN):
 *      * count lies in [#{j : lo_j > 0}, #{j : hi_j > 0}];
 *      * every stored entry (j, v) has lo_j ≤ v ≤ hi_j (hi_j > 0, so j may be active);
 *      * every column with lo_j > 0 (certainly active) below the last stored column — or any
 *        such column when the tile does not overflow — is stored.
 *  - else "bad" (the first one is described in first_bad).
 * Also measured: worst_ulp, the largest |v_gpu − v_ref| in 16-bit units over columns stored in
 * both, and max_rel_err = the largest, over compared rows, of ‖v − z‖₂ / ‖z‖₂ taken over that
 * row's stored GPU entries (v the stored 16-bit value, z its exact fp64 pre-activation): the
 * norm-wise error of the dense activation values we deliver. Rounding alone gives up to 2⁻⁸
 * (bf16) or 2⁻¹¹ (fp16) per entry; a per-entry ratio would be dominated by entries near zero,
 * where fp32 cancellation, not the kernel, sets the error.
 */
typedef struct tw_pack_check {
    size_t rows;            /* rows compared */
    size_t tiles;           /* row-tiles compared */
    size_t tiles_exact;     /* bytes identical to the reference */
    size_t tiles_tolerated; /* differ, within the rule above */
    size_t tiles_bad;       /* differ beyond it */
    size_t entries;         /* stored GPU entries measured for max_rel_err */
    size_t flips;           /* columns active in exactly one of GPU / reference (ambiguous ones) */
    size_t overflow_tiles;  /* reference row-tiles with count > slots */
    unsigned worst_ulp;     /* see above */
    double max_rel_err;     /* see above (norm-wise per row, max over rows) */
    char first_bad[256];    /* "" when tiles_bad == 0 */
} tw_pack_check;

/* Compares the n rows listed in rows[] (indices into x). x: [*, K] 16-bit host input; w: [N, K]
 * packing weight; ref and got: [n, N/C] packed words of those rows (compact, in the order of
 * rows[]). Fills *out. Deep checks stop after 64 bad tiles (the rest only counted). */
void tw_pack_check_rows(const twell_shape *s, const uint16_t *x, const uint16_t *w,
                        const size_t *rows, size_t n, const uint32_t *ref, const uint32_t *got,
                        tw_pack_check *out);

/* Picks about `want` row indices spread over [0, M): always 0, 1, the last full-tile boundary
 * rows and M-1 (the ragged end), the rest evenly spaced; sorted, distinct. Returns the count
 * (≤ want, = M when M ≤ want). rows must hold `want` entries. */
size_t tw_pack_sample_rows(size_t M, size_t want, size_t *rows);

#endif /* TWELL_PACK_CHECK_H */
