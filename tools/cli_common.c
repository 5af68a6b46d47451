/* cli_common.c — numeric option parsing, the stderr log and the prewarm's stored-or-not check
 * shared by every `twell` subcommand (see cli_common.h). */
#include "cli_common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tw_cli_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    if (!s || !*s)
        return -1;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10u)
            return -1; /* overflow */
        v = v * 10u + d;
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int tw_cli_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out) {
    uint64_t v;
    if (tw_cli_u64(s, lo, hi, &v) != 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int tw_cli_int(const char *s, int lo, int hi, int *out) {
    uint64_t v;
    if (lo < 0 || hi < lo || tw_cli_u64(s, (uint64_t)lo, (uint64_t)hi, &v) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

/* Calls item(text, i, user) for the i-th comma-separated item of s; -1 for an empty list, an
 * empty or overlong item, more than max items, or an item that item() rejects; else 0 and *n
 * the count. */
static int tw_cli_each(const char *s, size_t max, size_t *n,
                       int (*item)(const char *, size_t, void *), void *user) {
    char buf[64];
    size_t i = 0;
    if (!s || !*s)
        return -1;
    for (;;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (len == 0 || len >= sizeof buf || i == max)
            return -1;
        memcpy(buf, s, len);
        buf[len] = '\0';
        if (item(buf, i++, user) != 0)
            return -1;
        if (!comma) {
            *n = i;
            return 0;
        }
        s = comma + 1;
    }
}

typedef struct {
    size_t lo, hi, *out;
} tw_size_items;

static int tw_size_item(const char *s, size_t i, void *user) {
    tw_size_items *u = user;
    uint64_t v;
    if (tw_cli_u64(s, u->lo, u->hi, &v) != 0)
        return -1;
    u->out[i] = (size_t)v;
    return 0;
}

int tw_cli_size_list(const char *s, size_t lo, size_t hi, size_t *out, size_t max, size_t *n) {
    tw_size_items u = {lo, hi, out};
    return tw_cli_each(s, max, n, tw_size_item, &u);
}

int tw_cli_double(const char *s, double lo, double hi, double *out) {
    /* strtod also takes leading space, "inf", "nan" and hex floats: none is a usage we mean. */
    if (!s || !*s || !strchr("0123456789.+-", s[0]) || strpbrk(s, "xXnN"))
        return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

typedef struct {
    double lo, hi, *out;
} tw_double_items;

static int tw_double_item(const char *s, size_t i, void *user) {
    tw_double_items *u = user;
    return tw_cli_double(s, u->lo, u->hi, &u->out[i]);
}

int tw_cli_double_list(const char *s, double lo, double hi, double *out, size_t max, size_t *n) {
    tw_double_items u = {lo, hi, out};
    return tw_cli_each(s, max, n, tw_double_item, &u);
}

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
