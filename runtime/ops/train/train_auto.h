/*
 * train_auto.h — the AUTO rule of the training path choice (TWELL_PATH_AUTO in twellrt.h), a pure
 * function so it is unit-tested without a device; cuda_train_dense_auto.c feeds it the estimate it
 * reads back without waiting, and the numbers, which live in cuda_train_dense.h only
 * (TW_TD_MIN_ROWS, TW_TD_DENSITY, TW_TD_STAY).
 */
#ifndef TWELL_TRAIN_AUTO_H
#define TWELL_TRAIN_AUTO_H

#include "twellrt.h"

#include <stddef.h>

/* What AUTO runs for a forward of M rows. */
enum {
    TW_AUTO_SPARSE = 0, /* the sparse path */
    TW_AUTO_DENSE = 1,  /* the dense path */
    /* nothing known yet: the sparse path counts the active values (its gate-pack and scans, one
     * host read it makes anyway) and the forward goes dense there when they exceed thr per row */
    TW_AUTO_PROBE = 2
};

/* TW_AUTO_* for a forward of M rows, given the latest mean active values per row known to the
 * host (est < 0: none yet), the path the previous forward ran (AUTO before the first), the
 * threshold in active values per row, the fraction of it below which a dense run switches back
 * (stay, against flapping) and the smallest M for dense. Below min_rows always sparse; with no
 * estimate, dense after a dense forward (its count is still in flight), else a probe. Whether the
 * dense path can run at all is the caller's business. */
int tw_train_auto_dense(double est, twell_path last, size_t M, size_t min_rows, double thr,
                        double stay);

#endif /* TWELL_TRAIN_AUTO_H */
