/* tw_cpu.h — a CPU-backend context for the tests (cmocka must be included first). */
#ifndef TWELL_TW_CPU_H
#define TWELL_TW_CPU_H

#include "twellrt.h"

/* A context on the CPU backend with `threads` worker threads; fails the test if it cannot be
 * created. */
twell_ctx *tw_test_cpu_ctx(int threads);

#endif
