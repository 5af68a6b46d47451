/*
 * cuda_train_dense_probe.h — the dense training path's test probes (runtime/core/probe.h; test
 * library only): the knobs its state carries only there, and the TW_TC_TD_* handler
 * (cuda_train_dense_probe.c).
 */
#ifndef TWELL_CUDA_TRAIN_DENSE_PROBE_H
#define TWELL_CUDA_TRAIN_DENSE_PROBE_H

#include "probe.h"
#include "twellrt.h"

#include <stdarg.h>
#include <stddef.h>

#ifdef TWELL_PROBES
/* A state's knobs, a member of its tw_tdense (cuda_train_dense_int.h); set at creation to the
 * shipped behaviour (threshold 0, min_rows TW_TD_MIN_ROWS, wg_stages 0). */
typedef struct tw_tdense_knobs {
    double threshold;   /* TW_TC_TD_SET_THRESHOLD: > 0 AUTO's threshold; 0: the default */
    size_t min_rows;    /* TW_TC_TD_SET_THRESHOLD: the smallest M AUTO runs dense */
    unsigned wg_stages; /* TW_TC_TD_SET_WGRAD_STAGES: ring depth of the weight-gradient GEMM
                           (0: TD_WG_STAGES) */
} tw_tdense_knobs;

/* The TW_TC_TD_* operations of tw_test_control (test_control.h): the path last run, the AUTO
 * estimate and threshold, the weight-gradient ring depth, the saved gate, call counts, the own
 * workspace's bytes and releases, the state's peak bytes. */
twell_status tw_td_test_control(int op, va_list ap);
#endif

#endif /* TWELL_CUDA_TRAIN_DENSE_PROBE_H */
