/* tw_tc.h — tw_test_control probes as values, for the tests (cmocka must be included first): each
 * fails the test when the call does not return TWELL_OK. */
#ifndef TWELL_TW_TC_H
#define TWELL_TW_TC_H

#include "twellrt_internal.h"

/* The result of probe op (test_control.h) of a plan, by its result type. */
int tw_tc_plan_int(twell_plan *plan, int op);
double tw_tc_plan_double(twell_plan *plan, int op);
size_t tw_tc_plan_size(twell_plan *plan, int op);
twell_path tw_tc_plan_path(twell_plan *plan, int op);
const char *tw_tc_plan_variant(twell_plan *plan); /* TW_TC_GP_VARIANT */
/* TW_TC_DENSE_THRESHOLD and TW_TC_DENSE_ROUTE at M rows. */
double tw_tc_plan_threshold(twell_plan *plan, size_t M);
const char *tw_tc_plan_route(twell_plan *plan, size_t M);
/* TW_TC_DENSE_CALLS of plan for path. */
unsigned long tw_tc_plan_calls(twell_plan *plan, twell_path path);

/* The same for a training state. */
int tw_tc_state_int(twell_train_state *state, int op);
double tw_tc_state_double(twell_train_state *state, int op);
twell_path tw_tc_state_path(twell_train_state *state, int op);
/* TW_TC_TD_CALLS of state for path. */
unsigned long tw_tc_state_calls(twell_train_state *state, twell_path path);

/* TW_TC_CUDA_HOST_WAITS: host waits of this process so far. */
unsigned long tw_tc_host_waits(void);

#endif
