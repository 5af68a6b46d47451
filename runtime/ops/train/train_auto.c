/* train_auto.c — the AUTO rule of the training path choice (see train_auto.h). */
#include "train_auto.h"

int tw_train_auto_dense(double est, twell_path last, size_t M, size_t min_rows, double thr,
                        double stay) {
    if (M < min_rows)
        return 0;
    if (est < 0.0) /* first forward, or only dense ones whose count has not landed yet */
        return 1;
    return est > (last == TWELL_PATH_DENSE ? stay * thr : thr);
}
