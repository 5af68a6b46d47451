/* tw_tune_test.h — helpers the autotuner tests share (cmocka must be included first): a CPU
 * context with an optional log book, problems and two-value configurations. */
#ifndef TWELL_TW_TUNE_TEST_H
#define TWELL_TW_TUNE_TEST_H

#include "candidates.h"
#include "tw_cpu.h"

#include <stdint.h>

/* The problem (op, K x N default shape, M rows). */
tw_tune_problem tw_problem(const char *op, uint32_t K, uint32_t N, size_t M);

/* A config of kernel with a = va and, when b is not NULL, b = vb; fails the test if refused. */
tw_tune_config tw_cfg2(const char *kernel, const char *a, int64_t va, const char *b, int64_t vb);

/* Fails the test unless c's canonical form is want. */
void tw_assert_canon(const tw_tune_config *c, const char *want);

#endif
