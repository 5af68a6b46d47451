/* tw_case_dir.h — a fresh directory per test case, for the tests that use an on-disk cache. */
#ifndef TWELL_TW_CASE_DIR_H
#define TWELL_TW_CASE_DIR_H

#include <stddef.h>

/* Writes "<base>/<name>" into out (n bytes), base being $TWELL_CACHE_DIR or else
 * <build dir>/test-cache/<test>, and removes whatever is there (the directory itself too: the
 * cache creates it on open). */
void tw_test_case_dir(const char *test, const char *name, char *out, size_t n);

#endif
