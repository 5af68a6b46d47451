/* train_auto.c — the AUTO rule of the training path choice (see train_auto.h). */
#include "train_auto.h"

int tw_train_auto_dense(double est, twell_path last, size_t M, size_t min_rows, double thr,
                        double stay) {
    if (M < min_rows)
        return TW_AUTO_SPARSE;
    if (est < 0.0) /* first forward (probe its counts), or dense ones whose count has not landed */
        return last == TWELL_PATH_DENSE ? TW_AUTO_DENSE : TW_AUTO_PROBE;
    return est > (last == TWELL_PATH_DENSE ? stay * thr : thr) ? TW_AUTO_DENSE : TW_AUTO_SPARSE;
}
