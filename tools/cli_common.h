/* cli_common.h — what the `twell` subcommands (tools/ and bench/) share: strict numeric option
 * parsing, the log callback that puts the library's warnings on stderr, and the check that a
 * prewarm really stored what it compiled. */
#ifndef TWELL_CLI_COMMON_H
#define TWELL_CLI_COMMON_H

#include "twellrt.h"
#include "twellrt_internal.h"

#include <stddef.h>
#include <stdint.h>

/* ---- numbers: 0 parsed, -1 a usage error (the caller names the option; a failed list may
 * have written part of out, never *n) ----
 * Integers are plain decimal digits: no sign, space, or base prefix, so "-1" (which strtoull
 * reads as 2^64 − 1), " 5", "5x", "" and a value past the type's range are all rejected. */

/* A decimal integer in [lo, hi] (tw_cli_int: 0 ≤ lo ≤ hi). */
int tw_cli_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
int tw_cli_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out);
int tw_cli_int(const char *s, int lo, int hi, int *out);

/* A comma-separated list of 1..max integers in [lo, hi], no empty item; *n gets the count. */
int tw_cli_size_list(const char *s, size_t lo, size_t hi, size_t *out, size_t max, size_t *n);

/* A finite decimal number in [lo, hi] (strtod syntax without leading space, inf, nan or hex;
 * out-of-range exponents such as 1e999 are rejected). */
int tw_cli_double(const char *s, double lo, double hi, double *out);

/* A comma-separated list of 1..max such numbers. */
int tw_cli_double_list(const char *s, double lo, double hi, double *out, size_t max, size_t *n);

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
