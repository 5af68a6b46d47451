/* cli_common.c — the stderr log and the prewarm's stored-or-not check shared by the `twell`
 * subcommands (see cli_common.h). */
#include "cli_common.h"

#include <stdio.h>

void tw_cli_log(void *user, twell_log_level level, const char *msg) {
    if (level >= TWELL_LOG_WARN)
        fprintf(stderr, "%s: %s\n", user ? (const char *)user : "twell", msg);
}

int tw_cli_check_stored(const char *cmd, tw_cache *c, const tw_cache_stats *before) {
    tw_cache_stats now;
    tw_cache_get_stats(c, &now);
    uint64_t puts = now.puts - before->puts, stored = now.published - before->published;
    if (stored >= puts)
        return 0;
    uint64_t lost = puts - stored;
    const char *dir = tw_cache_dir(c);
    if (dir)
        fprintf(stderr,
                "%s: %llu of %llu cache entr%s NOT stored: the cache directory '%s' is read-only "
                "or full here (see the warning above); nothing was prewarmed for them\n",
                cmd, (unsigned long long)lost, (unsigned long long)puts, puts == 1 ? "y" : "ies",
                dir);
    else
        fprintf(stderr,
                "%s: %llu of %llu cache entr%s NOT stored: no usable cache directory (memory "
                "only, see the warning above); nothing was prewarmed for them\n",
                cmd, (unsigned long long)lost, (unsigned long long)puts, puts == 1 ? "y" : "ies");
    return 1;
}
