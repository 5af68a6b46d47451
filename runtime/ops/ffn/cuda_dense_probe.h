/*
 * cuda_dense_probe.h — the dense route's and AUTO's test probes (runtime/core/probe.h; test
 * library only): the knobs the dense state carries only there, and the TW_TC_DENSE_* handler
 * (cuda_dense_probe.c).
 */
#ifndef TWELL_CUDA_DENSE_PROBE_H
#define TWELL_CUDA_DENSE_PROBE_H

#include "probe.h"
#include "twellrt.h"

#include <stdarg.h>
#include <stddef.h>

#ifdef TWELL_PROBES
/* A plan's knobs, a member of its tw_dense (cuda_dense_int.h); all zero: the shipped behaviour. */
typedef struct tw_dense_knobs {
    double threshold;    /* TW_TC_DENSE_SET_THRESHOLD: > 0 AUTO's threshold; 0: the policy's */
    size_t min_rows;     /* TW_TC_DENSE_SET_MIN_ROWS: > 0 the smallest M AUTO runs dense */
    size_t lt_lo, lt_hi; /* TW_TC_DENSE_SET_LT_GATE: the cuBLASLt gate-pack's own range of
                            rows; 0, 0: the policy's */
} tw_dense_knobs;

/* The TW_TC_DENSE_* operations of tw_test_control (test_control.h): the path last run, the AUTO
 * estimate, threshold and route, counts, workspace probes and poisoning. */
twell_status tw_dense_test_control(int op, va_list ap);
#endif

#endif /* TWELL_CUDA_DENSE_PROBE_H */
