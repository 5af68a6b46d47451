/* tw_case_dir.c — per-case cache directories for the tests (see tw_case_dir.h). */
#include "tw_case_dir.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static int tw_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void tw_test_case_dir(const char *test, const char *name, char *out, size_t n) {
    const char *base = getenv("TWELL_CACHE_DIR");
    if (base && *base)
        snprintf(out, n, "%s/%s", base, name);
    else
        snprintf(out, n, "%s/test-cache/%s/%s", TWELL_TEST_BINARY_DIR, test, name);
    nftw(out, tw_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
