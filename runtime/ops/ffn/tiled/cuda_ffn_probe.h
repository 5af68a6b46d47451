/*
 * cuda_ffn_probe.h — the sparse inference path's test probes (runtime/core/probe.h; test library
 * only): the knobs its state carries only there, and the TW_TC_FFN_* handler
 * (cuda_ffn_probe.c).
 */
#ifndef TWELL_CUDA_FFN_PROBE_H
#define TWELL_CUDA_FFN_PROBE_H

#include "cuda_ffn.h"
#include "probe.h"

#include <stdarg.h>

#ifdef TWELL_PROBES
/* A plan's knobs, a member of its tw_ffn (cuda_ffn_int.h); all zero: the shipped behaviour. */
typedef struct tw_ffn_knobs {
    tw_ffn_kernel kernel; /* TW_TC_FFN_SET_KERNEL; TW_FFN_AUTO: the launcher's choice */
    int pinned;           /* TW_TC_FFN_SET_CAPACITY: capacities fixed, no probe, no growth */
} tw_ffn_knobs;

/* The TW_TC_FFN_* operations of tw_test_control (test_control.h). */
twell_status tw_ffn_test_control(int op, va_list ap);
#endif

#endif /* TWELL_CUDA_FFN_PROBE_H */
