/*
 * cuda_dense_probe.h — the dense route's and AUTO's test probes (runtime/core/probe.h; test
 * library only): the TW_TC_DENSE_* handler (cuda_dense_probe.c); the knobs it sets are the
 * dense state's tw_dense_knobs (dense/cuda_dense_int.h).
 */
#ifndef TWELL_CUDA_DENSE_PROBE_H
#define TWELL_CUDA_DENSE_PROBE_H

#include "twellrt.h"

#include <stdarg.h>
#include <stddef.h>

#ifdef TWELL_PROBES
/* The TW_TC_DENSE_* operations of tw_test_control (test_control.h): the path last run, the AUTO
 * estimate, threshold and route, counts, workspace probes and poisoning. */
twell_status tw_dense_test_control(int op, va_list ap);
#endif

#endif /* TWELL_CUDA_DENSE_PROBE_H */
