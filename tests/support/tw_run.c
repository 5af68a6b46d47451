/* tw_run.c — the tests' command runner (see tw_run.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tw_run.h"

#include <stdio.h>
#include <sys/wait.h>

int tw_test_run(const char *cmd, char *out, size_t n) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    int ws = pclose(p);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

int tw_test_tool(const char *args, char *out, size_t n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", TWELL_TOOL_PATH, args);
    return tw_test_run(cmd, out, n);
}
