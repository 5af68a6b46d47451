/* tw_log.h — a log callback for the tests that records what a context or cache logged. */
#ifndef TWELL_TW_LOG_H
#define TWELL_TW_LOG_H

#include "twellrt.h"

/* What was logged: WARN-or-worse and other messages counted, the last one, and all of them. */
typedef struct {
    int warns, others;
    char last[1024];
    char all[8192]; /* every message, one per line, truncated when full */
} tw_logbook;

/* A twell_log_fn whose user is a tw_logbook (zeroed before use). Safe from several threads:
 * a cache may degrade on several at once. */
void tw_test_log(void *user, twell_log_level level, const char *msg);

#endif
