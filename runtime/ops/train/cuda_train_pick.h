/*
 * cuda_train_pick.h — training AUTO's route choice (cuda_train_pick.c): which path a forward runs,
 * and the dense path as the sparse one's out-of-memory fallback. Called by the entry points
 * (cuda_train_route.c); AUTO's numbers are the dense path's (cuda_train_dense.h).
 */
#ifndef TWELL_CUDA_TRAIN_PICK_H
#define TWELL_CUDA_TRAIN_PICK_H

#include "internal.h"

/* Chooses the path of the next forward (inside tw_cu_enter/leave, arguments validated) from
 * plan->path, the tensors' alignment and the AUTO estimate (never waiting for the device), and
 * invalidates the dense saved forward (the caller's forward replaces it whatever it runs).
 * *dense = 1: run tw_ctd_forward. *probe > 0 (AUTO's first forward of a state, *dense = 0): run
 * the sparse forward with that threshold, which stops after its counts when they exceed it per row
 * (tw_ct_forward), and then the dense one. Errors: TWELL_ERR_UNSUPPORTED for TWELL_PATH_DENSE where
 * it cannot run (the message says why), TWELL_ERR_NO_MEMORY, and module build errors under DENSE
 * (under AUTO a module that fails to build only marks the path unavailable, with a warning).
 *
 * AUTO: on the first forward of a state with M ≥ TW_TD_MIN_ROWS, a probe: the sparse path's first
 * stage (gate-pack, counts, the one host read it makes anyway) decides, so a sparse first step
 * never allocates the dense workspace and a dense one wastes only that stage; afterwards dense when
 * the latest L0 known to the host (a sparse forward knows it at once: it reads its totals; a dense
 * one copies its count back asynchronously and the next forward reads it only if the copy has
 * landed) exceeds the threshold (TW_TD_DENSITY · N active values per row; TW_TD_STAY of it to stay
 * dense) and M ≥ TW_TD_MIN_ROWS. The dense path needs sm_90a, K % 64 == 0 and x, the weights and y
 * 16-byte aligned; otherwise AUTO runs sparse. */
twell_status tw_ctd_pick(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                         const void *wg, const void *wu, const void *wd, const void *y, int *dense,
                         double *probe);

/* After the sparse forward failed with TWELL_ERR_NO_MEMORY under AUTO: runs the dense forward
 * instead where it can (a warning is logged), else returns TWELL_ERR_NO_MEMORY naming both
 * reasons. */
twell_status tw_ctd_oom_fallback(twell_plan *plan, twell_train_state *state, size_t M,
                                 const void *x, const void *wg, const void *wu, const void *wd,
                                 void *y, float *stats, twell_stream stream);

#endif /* TWELL_CUDA_TRAIN_PICK_H */
