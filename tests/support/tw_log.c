/* tw_log.c — the tests' recording log callback (see tw_log.h). */
#include "tw_log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

void tw_test_log(void *user, twell_log_level level, const char *msg) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    tw_logbook *b = user;
    pthread_mutex_lock(&mu);
    if (level >= TWELL_LOG_WARN)
        b->warns++;
    else
        b->others++;
    snprintf(b->last, sizeof b->last, "%s", msg);
    size_t used = strlen(b->all);
    snprintf(b->all + used, sizeof b->all - used, "%s\n", msg);
    pthread_mutex_unlock(&mu);
}
