/* cli_common.h — what the `twell` subcommands (tools/ and bench/) share: the log callback that
 * puts the library's warnings on stderr, and the check that a prewarm really stored what it
 * compiled. */
#ifndef TWELL_CLI_COMMON_H
#define TWELL_CLI_COMMON_H

#include "cache.h"
#include "twellrt.h"

/* ---- messages ---- */

/* A twell_log_fn printing WARN and ERROR messages to stderr as "<user>: <msg>" (user a
 * NUL-terminated command name such as "twell compile"; NULL prints "twell"). */
void tw_cli_log(void *user, twell_log_level level, const char *msg);

/* ---- prewarm ---- */

/* The prewarm check of `twell compile` and `twell tune`: every cache entry put since `before`
 * (tw_cache_get_stats of c when the work began) must have reached the cache directory. Returns
 * 0 when it did; otherwise prints to stderr, as cmd, how many entries stayed in memory only and
 * why (no usable directory, or a read-only or full one: the library's warning above has the
 * errno), and returns 1. */
int tw_cli_check_stored(const char *cmd, tw_cache *c, const tw_cache_stats *before);

#endif
