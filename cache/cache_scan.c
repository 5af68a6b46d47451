/* cache_scan.c — the disk cache's directory as a whole: scans, LRU eviction to the cap, and
 * the maintenance calls behind `twell cache` (list, verify, the disk part of clear). It calls
 * cache_entry.c only; cache.c calls it (the eviction after a write, clear). */
#include "cache_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- directory scans ---- */

twell_status tw_cache_scan(tw_cache *c, tw_file **files, size_t *nfiles) {
    *files = NULL;
    *nfiles = 0;
    DIR *d = opendir(c->dir);
    if (!d)
        return TWELL_ERR_IO;
    tw_file *v = NULL;
    size_t n = 0, cap = 0;
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        struct stat sb;
        if (!strncmp(name, TW_TMP_PREFIX, strlen(TW_TMP_PREFIX))) {
            if (fstatat(dirfd(d), name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
                now - sb.st_mtime > TW_STALE_TMP_S)
                unlinkat(dirfd(d), name, 0);
            continue;
        }
        tw_file f;
        if (strlen(name) >= TW_NAME_MAX || !tw_cache_parse_name(name, &f.kind, &f.key))
            continue;
        /* Entries vanish under us when other processes evict or clear: skip them. */
        if (fstatat(dirfd(d), name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            continue;
        strcpy(f.name, name);
        f.size = (uint64_t)sb.st_size;
        f.mtime = sb.st_mtim;
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            tw_file *nv = realloc(v, ncap * sizeof *nv);
            if (!nv) {
                free(v);
                closedir(d);
                return TWELL_ERR_NO_MEMORY;
            }
            v = nv;
            cap = ncap;
        }
        v[n++] = f;
    }
    closedir(d);
    *files = v;
    *nfiles = n;
    return TWELL_OK;
}

static int tw_by_name(const void *a, const void *b) {
    return strcmp(((const tw_file *)a)->name, ((const tw_file *)b)->name);
}

static int tw_by_age(const void *a, const void *b) {
    const tw_file *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name); /* ties: deterministic order */
}

void tw_cache_scan_evict(tw_cache *c, const char *keep) {
    tw_file *v;
    size_t n;
    if (tw_cache_scan(c, &v, &n) != TWELL_OK)
        return; /* accounting only; the next put tries again */
    uint64_t total = 0, evicted = 0;
    for (size_t i = 0; i < n; i++)
        total += v[i].size;
    if (total > c->max_bytes) { /* so n > 0 and v is not NULL */
        qsort(v, n, sizeof *v, tw_by_age);
        for (size_t i = 0; i < n && total > c->max_bytes; i++) {
            if (!strcmp(v[i].name, keep))
                continue;
            char path[TW_PATH_MAX];
            tw_cache_join(c, v[i].name, path);
            if (unlink(path) == 0)
                evicted++;
            else if (errno != ENOENT)
                continue; /* could not delete: it still counts */
            total -= v[i].size;
        }
    }
    free(v);
    pthread_mutex_lock(&c->mu);
    c->disk_estimate = (int64_t)total;
    c->puts_since_scan = 0;
    c->st.evicted += evicted;
    pthread_mutex_unlock(&c->mu);
}

/* ---- maintenance: ls / verify / clear ---- */

static twell_status tw_scan_checked(tw_cache *c, tw_file **v, size_t *n) {
    if (!c || !atomic_load(&c->disk_ok))
        return TWELL_ERR_UNSUPPORTED;
    twell_status st = tw_cache_scan(c, v, n);
    /* An empty directory gives *v NULL, which qsort must not be handed even for no elements. */
    if (st == TWELL_OK && *n > 1)
        qsort(*v, *n, sizeof **v, tw_by_name);
    return st;
}

twell_status tw_cache_list(tw_cache *c, tw_cache_visit_fn fn, void *user) {
    tw_file *v;
    size_t n;
    if (!fn)
        return TWELL_ERR_INVALID_ARG;
    twell_status st = tw_scan_checked(c, &v, &n);
    if (st != TWELL_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        tw_cache_entry_info e = {v[i].name, v[i].kind, v[i].key, v[i].size,
                                 (int64_t)v[i].mtime.tv_sec};
        if (fn(user, &e))
            break;
    }
    free(v);
    return TWELL_OK;
}

/* Calls fn(c, f, path, user) on every entry file f in name order, path being its full path, until
 * fn returns nonzero. Errors: those of tw_scan_checked. */
static twell_status
tw_each_path(tw_cache *c, int (*fn)(tw_cache *c, const tw_file *f, const char *path, void *user),
             void *user) {
    tw_file *v;
    size_t n;
    twell_status st = tw_scan_checked(c, &v, &n);
    if (st != TWELL_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        char path[TW_PATH_MAX];
        tw_cache_join(c, v[i].name, path);
        if (fn(c, &v[i], path, user))
            break;
    }
    free(v);
    return TWELL_OK;
}

typedef struct tw_verify_count {
    tw_cache_verify_report r;
    twell_status st; /* TWELL_ERR_NO_MEMORY stops the walk */
} tw_verify_count;

/* Reads and checks one entry (tw_cache_read_file deletes a bad one). */
static int tw_verify_one(tw_cache *c, const tw_file *f, const char *path, void *user) {
    tw_verify_count *k = user;
    uint8_t *data;
    size_t len;
    int bad;
    twell_status st = tw_cache_read_file(path, f->kind, &f->key, 0, &data, &len, &bad);
    if (st == TWELL_ERR_NO_MEMORY) {
        k->st = st;
        return 1;
    }
    free(data);
    k->r.ok += st == TWELL_OK;
    k->r.removed += bad > 0;
    if (bad < 0) {
        /* Still on disk: the caller must hear of it, or a cache that keeps failing looks clean. */
        if (!k->r.kept++)
            k->r.kept_errno = -bad;
        if (c->log) {
            char eb[128], msg[TW_PATH_MAX + 192];
            snprintf(msg, sizeof msg,
                     "cache: corrupt entry '%s' could not be removed: %s (errno %d)", path,
                     strerror_r(-bad, eb, sizeof eb), -bad);
            c->log(c->log_user, TWELL_LOG_WARN, msg);
        }
    }
    return 0;
}

twell_status tw_cache_verify(tw_cache *c, tw_cache_verify_report *out) {
    if (out)
        memset(out, 0, sizeof *out);
    tw_verify_count k;
    memset(&k, 0, sizeof k);
    k.st = TWELL_OK;
    twell_status st = tw_each_path(c, tw_verify_one, &k);
    if (st != TWELL_OK)
        return st;
    pthread_mutex_lock(&c->mu);
    c->disk_estimate = -1; /* sizes changed: measure again on the next put */
    c->st.corrupt_removed += k.r.removed;
    pthread_mutex_unlock(&c->mu);
    if (k.st != TWELL_OK)
        return k.st;
    if (out)
        *out = k.r;
    return TWELL_OK;
}

static int tw_clear_one(tw_cache *c, const tw_file *f, const char *path, void *user) {
    (void)c, (void)f;
    *(size_t *)user += unlink(path) == 0;
    return 0;
}

twell_status tw_cache_scan_remove_all(tw_cache *c, size_t *n_removed) {
    *n_removed = 0;
    return tw_each_path(c, tw_clear_one, n_removed);
}
