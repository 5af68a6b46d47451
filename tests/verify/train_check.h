/*
 * train_check.h — compares two training results (a GPU run against the CPU reference) with the
 * support taken into account: rows and neurons whose active set or gate values differ (possible
 * only where a gate pre-activation sits within fp32 rounding of zero) are counted and left out,
 * the rest compared by row-relative L2 error. Shared by the GPU tests and `twell bench`.
 */
#ifndef TWELL_TRAIN_CHECK_H
#define TWELL_TRAIN_CHECK_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* A saved forward's support as row-major lists: row m's entries are row_off[m] .. row_off[m+1]-1
 * with column col[] (ascending) and gate pbits[] (16-bit pattern). */
typedef struct tw_train_support {
    size_t M;
    const uint64_t *row_off; /* [M+1] */
    const uint32_t *col;     /* [nnz] */
    const uint16_t *pbits;   /* [nnz] */
} tw_train_support;

/* Compares two supports of M rows. Returns the number of membership flips (entries present on
 * one side only); *value_diff (may be NULL) receives the number of entries present on both sides
 * with different gate values (a 16-bit rounding that fp32 summation order moved). row_same[m] = 1
 * when row m has no flip (its y and dx then agree to the output rounding: a one-step change of P
 * moves them far less); nrn_same[n] = 1 when neuron n has neither kind of difference in any row
 * (its fp32 weight gradients are compared tightly). row_same [M], nrn_same [N]. */
size_t tw_train_support_diff(uint32_t N, const tw_train_support *a, const tw_train_support *b,
                             unsigned char *row_same, unsigned char *nrn_same, size_t *value_diff);

/* Largest row-relative L2 error ‖got_r − ref_r‖₂ / ‖ref_r‖₂ (‖got_r‖₂ when ref_r is zero) over
 * the rows r < rows with mask[r] (mask NULL: all rows). NaN counts as worst. *worst gets its row,
 * *bitwise the number of compared rows identical bit for bit, *compared the rows compared (any of
 * these may be NULL). _h: 16-bit rows of dtype dt; _f: fp32 rows. */
double tw_train_err_h(twell_dtype dt, const uint16_t *got, const uint16_t *ref, size_t rows,
                      uint32_t K, const unsigned char *mask, size_t *worst, size_t *bitwise,
                      size_t *compared);
double tw_train_err_f(const float *got, const float *ref, size_t rows, uint32_t K,
                      const unsigned char *mask, size_t *worst, size_t *bitwise, size_t *compared);

#endif /* TWELL_TRAIN_CHECK_H */
