/*
 * cuda_memory_probe.h — the CUDA layer's test probes (runtime/core/probe.h; test library only):
 * allocation fault injection and the process-wide counters of live blocks and host waits that
 * cuda_memory.c keeps, and the TW_TC_CUDA_* handler (cuda_memory_probe.c).
 */
#ifndef TWELL_CUDA_MEMORY_PROBE_H
#define TWELL_CUDA_MEMORY_PROBE_H

#include "probe.h"
#include "twellrt.h"

#include <stdarg.h>

#ifdef TWELL_PROBES
#include <stdatomic.h>

/* Calls that block the host until device work completes (tests check that the steady state of
 * an op makes none), and device and page-locked blocks allocated and not yet freed. */
extern atomic_ulong tw_probe_host_waits;
extern atomic_long tw_probe_live_allocs;

/* 1 when this allocation is the one TW_TC_CUDA_FAULT_INJECT asked to fail (thread-safe). */
int tw_probe_fault_now(void);

/* The TW_TC_CUDA_* operations of tw_test_control (test_control.h): allocation fault injection
 * (tests/test_gpu_fault.c), live allocations, host waits (process-wide, thread-safe), and a
 * context's driver-call count and trace (its threading rule). */
twell_status tw_cuda_test_control(int op, va_list ap);
#endif

#endif /* TWELL_CUDA_MEMORY_PROBE_H */
