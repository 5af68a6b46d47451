/* cmd_cache.c — `twell cache ls|verify|clear`: inspect, check and empty the kernel cache
 * directory (the same one the library uses: --dir, else $TWELL_CACHE_DIR, else the default). */
#include "cli.h"
#include "cli_common.h"
#include "twellrt_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void tw_cli_usage(FILE *f) {
    fprintf(f, "usage: twell cache ls|verify|clear [--dir DIR] [--max-bytes N]\n\n"
               "  ls       list entries (kind, size, age, key) and the total against the cap\n"
               "  verify   check every entry's header and checksum; delete corrupt ones\n"
               "  clear    delete every entry\n\n"
               "  --dir DIR       cache directory (default: $TWELL_CACHE_DIR, else\n"
               "                  $XDG_CACHE_HOME/twellrt, else ~/.cache/twellrt)\n"
               "  --max-bytes N   size cap to report against (default 1 GiB, the library's)\n\n"
               "None of them creates the directory. Exit status: 0 done; 1 the directory is\n"
               "missing or unusable, or verify met corrupt entries it could not delete (a\n"
               "read-only directory; they are counted as corrupt and named on stderr); 2 usage.\n");
}

static const char *tw_human(uint64_t b, char *buf, size_t n) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%llu B", (unsigned long long)b);
    else
        snprintf(buf, n, "%.1f %s", v, unit[u]);
    return buf;
}

static const char *tw_age(int64_t secs, char *buf, size_t n) {
    if (secs < 0)
        secs = 0;
    if (secs < 120)
        snprintf(buf, n, "%llds", (long long)secs);
    else if (secs < 7200)
        snprintf(buf, n, "%lldm", (long long)(secs / 60));
    else if (secs < 2 * 86400)
        snprintf(buf, n, "%lldh", (long long)(secs / 3600));
    else
        snprintf(buf, n, "%lldd", (long long)(secs / 86400));
    return buf;
}

typedef struct {
    int print;
    time_t now;
    uint64_t entries, bytes;
} tw_ls_state;

static int tw_ls_visit(void *user, const tw_cache_entry_info *e) {
    tw_ls_state *s = user;
    s->entries++;
    s->bytes += e->size;
    if (s->print) {
        char hb[32], ab[32], hex[65];
        tw_key_hex(&e->key, hex);
        printf("%-6s %10s %6s  %s\n", tw_cache_kind_ext(e->kind), tw_human(e->size, hb, sizeof hb),
               tw_age((int64_t)s->now - e->mtime, ab, sizeof ab), hex);
    }
    return 0;
}

/* Prints "<n> entries, <size> of <cap> cap in <dir>"; 0 or an exit code. */
static int tw_total(tw_cache *c, int print_entries) {
    tw_ls_state s = {print_entries, time(NULL), 0, 0};
    if (print_entries)
        printf("%-6s %10s %6s  %s\n", "KIND", "SIZE", "AGE", "KEY");
    twell_status st = tw_cache_list(c, tw_ls_visit, &s);
    if (st != TWELL_OK) {
        fprintf(stderr, "twell cache: cannot list %s: %s\n", tw_cache_dir(c), twell_status_str(st));
        return 1;
    }
    char hb[32], cb[32];
    printf("%llu entr%s, %s of %s cap in %s\n", (unsigned long long)s.entries,
           s.entries == 1 ? "y" : "ies", tw_human(s.bytes, hb, sizeof hb),
           tw_human(tw_cache_max_bytes(c), cb, sizeof cb), tw_cache_dir(c));
    return 0;
}

/* `twell cache verify`: removes corrupt entries; exit 1 when one could not be removed. */
static int tw_cmd_verify(tw_cache *c) {
    tw_cache_verify_report r;
    twell_status st = tw_cache_verify(c, &r);
    size_t n = r.ok + r.removed + r.kept;
    if (st != TWELL_OK) {
        fprintf(stderr, "twell cache: verify: %s\n", twell_status_str(st));
        return 1;
    }
    if (r.kept) {
        /* Still on disk: exit 0 would call clean a cache that still holds corrupt files. */
        const char *why = strerror(r.kept_errno);
        printf("verified %zu entr%s: %zu ok, %zu corrupt (%zu removed, %zu could not be "
               "removed: %s)\n",
               n, n == 1 ? "y" : "ies", r.ok, r.removed + r.kept, r.removed, r.kept, why);
        fprintf(stderr,
                "twell cache: verify: %zu corrupt entr%s could not be removed from %s: %s\n",
                r.kept, r.kept == 1 ? "y" : "ies", tw_cache_dir(c), why);
        tw_total(c, 0);
        return 1;
    }
    printf("verified %zu entr%s: %zu ok, %zu corrupt removed\n", n, n == 1 ? "y" : "ies", r.ok,
           r.removed);
    return tw_total(c, 0);
}

/* `twell cache clear`: removes every entry. */
static int tw_cmd_clear(tw_cache *c) {
    size_t removed;
    twell_status st = tw_cache_clear(c, &removed);
    if (st != TWELL_OK) {
        fprintf(stderr, "twell cache: clear: %s\n", twell_status_str(st));
        return 1;
    }
    printf("removed %zu entr%s\n", removed, removed == 1 ? "y" : "ies");
    return tw_total(c, 0);
}

int twell_cmd_cache(int argc, char **argv) {
    const char *action = NULL, *dir = NULL;
    size_t max_bytes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            tw_cli_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc) {
            uint64_t v;
            if (tw_cli_u64(argv[++i], 0, SIZE_MAX, &v) != 0) {
                fprintf(stderr, "twell cache: --max-bytes wants a byte count, got '%s'\n", argv[i]);
                return 2;
            }
            max_bytes = (size_t)v;
        } else if (!action && argv[i][0] != '-') {
            action = argv[i];
        } else {
            fprintf(stderr, "twell cache: unexpected argument '%s'\n\n", argv[i]);
            tw_cli_usage(stderr);
            return 2;
        }
    }
    if (!action || (strcmp(action, "ls") && strcmp(action, "verify") && strcmp(action, "clear"))) {
        if (action)
            fprintf(stderr, "twell cache: unknown action '%s'\n\n", action);
        tw_cli_usage(stderr);
        return 2;
    }

    /* These commands only look (clear empties what is there): a missing directory is reported,
     * never created along with its parents. */
    char *def = dir ? NULL : tw_cache_default_dir();
    const char *where = dir ? dir : def;
    struct stat sb;
    if (where && stat(where, &sb) != 0 && errno == ENOENT) {
        fprintf(stderr, "twell cache: %s: no cache directory at %s (nothing was cached there)\n",
                action, where);
        free(def);
        return 1;
    }
    free(def);
    tw_cache *c;
    twell_status st =
        tw_cache_open_ex(dir, max_bytes, TW_CACHE_OPEN_NO_CREATE, tw_cli_log, "twell cache", &c);
    if (st != TWELL_OK) {
        fprintf(stderr, "twell cache: %s\n", twell_status_str(st));
        return 1;
    }
    if (!tw_cache_dir(c)) {
        /* The library fell back to memory (the warning above says why): nothing on disk. */
        fprintf(stderr, "twell cache: no usable cache directory\n");
        tw_cache_close(c);
        return 1;
    }
    if (!strcmp(action, "clear") && !tw_cache_writable(c)) {
        /* Read-only (the warning above says why): deleting would fail file by file. */
        fprintf(stderr, "twell cache: clear: %s is read-only here; nothing removed\n",
                tw_cache_dir(c));
        tw_cache_close(c);
        return 1;
    }
    int rc = !strcmp(action, "ls")       ? tw_total(c, 1)
             : !strcmp(action, "verify") ? tw_cmd_verify(c)
                                         : tw_cmd_clear(c);
    tw_cache_close(c);
    return rc;
}
