/*
 * cuda_small_probe.h — the small-batch path's test probes (runtime/core/probe.h; test library
 * only): the knobs its state carries only there, and the TW_TC_SMALL_* handler
 * (cuda_small_probe.c).
 */
#ifndef TWELL_CUDA_SMALL_PROBE_H
#define TWELL_CUDA_SMALL_PROBE_H

#include "cuda_small.h"
#include "probe.h"

#include <stdarg.h>

#ifdef TWELL_PROBES
/* A plan's knobs, a member of its tw_small (cuda_small_int.h); all zero: the shipped behaviour. */
typedef struct tw_small_knobs {
    tw_small_mode mode; /* TW_TC_SMALL_SET_MODE (AUTO, OFF, FORCE) */
    int fused_plain;    /* TW_TC_SMALL_SET_FUSED_PLAIN: never the cluster kernel */
    int updown;         /* TW_TC_SMALL_SET_UPDOWN: the up and down kernels where row would run */
    int gate_wn;        /* TW_TC_SMALL_SET_GATE's forced WN, 0: the rule's (small_gate.h) */
} tw_small_knobs;

/* The TW_TC_SMALL_* operations of tw_test_control (test_control.h). */
twell_status tw_small_test_control(int op, va_list ap);
#endif

#endif /* TWELL_CUDA_SMALL_PROBE_H */
