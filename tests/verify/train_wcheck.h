/*
 * train_wcheck.h — the library's stated accuracy rule for the fp32 weight gradients of a sparse
 * training step, checked without a dense model: an fp64 model of dWg, dWu, dWd on a fixed
 * support, with each element's magnitude scale Σ|terms| from the same model on absolute values
 * (as tests/support/ref64_train.c's tw_t_ref_scales). Used by `twell bench --op train`.
 */
#ifndef TWELL_TRAIN_WCHECK_H
#define TWELL_TRAIN_WCHECK_H

#include "train_check.h"
#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* The library's tolerance for fp32 weight gradients (docs/DESIGN.md §7, tests/test_ref_train.c):
 * |got − exact| ≤ TW_WCHECK_TOL · Σ|terms| per element. */
#define TW_WCHECK_TOL 2e-5

typedef struct tw_train_wcheck {
    /* [0] dWg, [1] dWu, [2] dWd: the largest (|got − ref| − allow) / scale over the compared
     * elements (0 when all are within allow; NaN or a nonzero error on a zero scale: +inf) */
    double worst[3];
    size_t at[3];    /* element index n·K + k of the worst */
    size_t neurons;  /* neurons compared (mask set) */
    size_t sign_amb; /* support entries whose U sign fp32 cannot fix (see below) */
} tw_train_wcheck;

/* The model, for the support sup (M = sup->M rows; its pbits are the gate values P, dtype dt),
 * 16-bit x [M,K], Wu [N,K], Wd [N,K], dy [M,K] and the L1 weight lambda (c = lambda / M):
 *   U = x·Wu_n, D = dy·Wd_n, dT = D + c·sign(U), dWu_n = Σ_m dT·P·x_m, dWg_n = Σ_m dT·U·x_m,
 *   dWd_n = Σ_m U·P·dy_m (fp64, m ascending); scales with |x|, |Wu|, |Wd|, |dy| and c in place
 *   of c·sign(U).
 * Where |U| ≤ 2·K·2⁻²⁴·Σ|x·Wu| (the worst fp32 summation error of U: its sign is not determined
 * by an fp32 computation) the model takes sign 0 and the element's allowance gets the term's
 * possible c·sign(U) contribution (c·P·|x| for dWu, c·|U|·|x| for dWg); these entries are
 * counted in sign_amb. nres results are checked against the one model: got[3·j .. 3·j+2] are
 * result j's dWg, dWu, dWd [N,K] fp32, res[j] its outcome; neurons with mask[n] == 0 are
 * skipped (mask NULL: all). Returns 0, or -1 out of memory (res then undefined). O(nnz·K) time,
 * O(nnz + M·K) memory. */
int tw_train_wgrad_check(twell_dtype dt, uint32_t K, uint32_t N, const tw_train_support *sup,
                         const uint16_t *x, const uint16_t *wu, const uint16_t *wd,
                         const uint16_t *dy, double lambda, const float *const *got, size_t nres,
                         const unsigned char *mask, tw_train_wcheck *res);

#endif /* TWELL_TRAIN_WCHECK_H */
