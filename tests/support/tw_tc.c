/* tw_tc.c — tw_test_control probes as values (tw_tc.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tw_tc.h"

#define TW_TC_PROBE(type, init, call)                                                              \
    do {                                                                                           \
        type v_ = init;                                                                            \
        twell_status st_ = (call);                                                                 \
        if (st_ != TWELL_OK)                                                                       \
            fail_msg("tw_test_control(%d): %s", op, twell_status_name(st_));                       \
        return v_;                                                                                 \
    } while (0)

int tw_tc_plan_int(twell_plan *plan, int op) {
    TW_TC_PROBE(int, 0, tw_test_control(op, plan, &v_));
}

double tw_tc_plan_double(twell_plan *plan, int op) {
    TW_TC_PROBE(double, 0.0, tw_test_control(op, plan, &v_));
}

size_t tw_tc_plan_size(twell_plan *plan, int op) {
    TW_TC_PROBE(size_t, 0, tw_test_control(op, plan, &v_));
}

twell_path tw_tc_plan_path(twell_plan *plan, int op) {
    TW_TC_PROBE(twell_path, TWELL_PATH_AUTO, tw_test_control(op, plan, &v_));
}

const char *tw_tc_plan_variant(twell_plan *plan) {
    int op = TW_TC_GP_VARIANT;
    TW_TC_PROBE(const char *, NULL, tw_test_control(op, plan, &v_));
}

double tw_tc_plan_threshold(twell_plan *plan, size_t M) {
    int op = TW_TC_DENSE_THRESHOLD;
    TW_TC_PROBE(double, 0.0, tw_test_control(op, plan, M, &v_));
}

const char *tw_tc_plan_route(twell_plan *plan, size_t M) {
    int op = TW_TC_DENSE_ROUTE;
    TW_TC_PROBE(const char *, NULL, tw_test_control(op, plan, M, &v_));
}

unsigned long tw_tc_plan_calls(twell_plan *plan, twell_path path) {
    int op = TW_TC_DENSE_CALLS;
    TW_TC_PROBE(unsigned long, 0, tw_test_control(op, plan, (int)path, &v_));
}

int tw_tc_state_int(twell_train_state *state, int op) {
    TW_TC_PROBE(int, 0, tw_test_control(op, state, &v_));
}

double tw_tc_state_double(twell_train_state *state, int op) {
    TW_TC_PROBE(double, 0.0, tw_test_control(op, state, &v_));
}

twell_path tw_tc_state_path(twell_train_state *state, int op) {
    TW_TC_PROBE(twell_path, TWELL_PATH_AUTO, tw_test_control(op, state, &v_));
}

unsigned long tw_tc_state_calls(twell_train_state *state, twell_path path) {
    int op = TW_TC_TD_CALLS;
    TW_TC_PROBE(unsigned long, 0, tw_test_control(op, state, (int)path, &v_));
}

unsigned long tw_tc_host_waits(void) {
    int op = TW_TC_CUDA_HOST_WAITS;
    TW_TC_PROBE(unsigned long, 0, tw_test_control(op, &v_));
}
