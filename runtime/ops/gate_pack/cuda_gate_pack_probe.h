/*
 * cuda_gate_pack_probe.h — gate-pack's test probes (runtime/core/probe.h; test library only): the
 * TW_TC_GP_* handler (cuda_gate_pack_probe.c). Gate-pack's state has no knob: forcing a variant
 * replaces the plan's gate-pack state with one initialised for that variant.
 */
#ifndef TWELL_CUDA_GATE_PACK_PROBE_H
#define TWELL_CUDA_GATE_PACK_PROBE_H

#include "probe.h"
#include "twellrt.h"

#include <stdarg.h>

#ifdef TWELL_PROBES
/* The TW_TC_GP_* operations of tw_test_control (test_control.h): the variant in use or forced,
 * the modules loaded, a bucket's configuration. */
twell_status tw_gate_pack_test_control(int op, va_list ap);
#endif

#endif /* TWELL_CUDA_GATE_PACK_PROBE_H */
