/* tw_cpu.h — a CPU-backend context for the tests (cmocka must be included first). */
#ifndef TWELL_TW_CPU_H
#define TWELL_TW_CPU_H

#include "tw_log.h"
#include "twellrt.h"

/* A context on the CPU backend with `threads` worker threads; fails the test if it cannot be
 * created. */
twell_ctx *tw_test_cpu_ctx(int threads);

/* A single-threaded CPU context on cache directory dir (NULL: the default), logging at INFO into
 * log when log is not NULL; NULL when it cannot be created (usable in a forked child). */
twell_ctx *tw_test_cpu_ctx_at(const char *dir, tw_logbook *log);

#endif
