/* tw_run.h — running a command (usually the `twell` tool) from a test and capturing its output. */
#ifndef TWELL_TW_RUN_H
#define TWELL_TW_RUN_H

#include <stddef.h>

/* Runs cmd through the shell, copies up to n - 1 bytes of its stdout into out (NUL-terminated)
 * and returns its exit status, or -1 when it did not exit normally. Fails the test when the
 * command cannot be started (cmocka must be included before this header's users call it). */
int tw_test_run(const char *cmd, char *out, size_t n);

/* tw_test_run of the `twell` tool (TWELL_TOOL_PATH) with args, stderr merged into out. */
int tw_test_tool(const char *args, char *out, size_t n);

#endif
