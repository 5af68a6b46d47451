/* cache.c — content-addressed store for cubins and tuning records: a bounded in-memory LRU in
 * front of a directory of checksummed entry files, published by temp file + rename so threads
 * and processes share it without any lock held while the caller compiles. */
#include "cache_int.h"

#include "env.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small helpers ---- */

static int64_t tw_mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec;
}

static char *tw_concat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

char *tw_cache_default_dir(void) {
    const char *e = tw_env_cache_dir();
    if (e)
        return tw_concat(e, "");
    /* The XDG base-directory spec says relative values are invalid and must be ignored. */
    e = tw_env_xdg_cache_home();
    if (e && e[0] == '/')
        return tw_concat(e, "/twellrt");
    e = tw_env_home();
    if (e)
        return tw_concat(e, "/.cache/twellrt");
    return NULL;
}

/* mkdir -p with mode 0700 for every directory it creates; 0 or -1 with errno. */
static int tw_mkdirs(const char *dir) {
    char buf[TW_PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0) {
        errno = ENOENT;
        return -1;
    }
    if (n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0700) != 0) {
            int err = errno;
            struct stat sb;
            if (stat(buf, &sb) != 0) {
                errno = err;
                return -1;
            }
            if (!S_ISDIR(sb.st_mode)) {
                errno = ENOTDIR;
                return -1;
            }
        }
        buf[i] = saved;
    }
    return 0;
}

static const char *tw_errtext(int err, char *buf, size_t n) {
    /* GNU strerror_r (we build with _GNU_SOURCE): thread-safe and returns the text. */
    return strerror_r(err, buf, n);
}

/* Stops using the directory: for writing only (read_only 1: entries on disk are still served)
 * or entirely (memory-only). The first call for this cache (and only it) logs one warning. */
static void tw_degrade_to(tw_cache *c, int read_only, int err, const char *what) {
    pthread_mutex_lock(&c->mu);
    int first = !c->warned;
    c->warned = 1;
    atomic_store(&c->disk_rw, 0);
    if (read_only && atomic_load(&c->disk_ok)) {
        c->st.read_only = 1;
    } else {
        read_only = 0;
        c->st.read_only = 0;
        c->st.memory_only = 1;
        atomic_store(&c->disk_ok, 0);
    }
    pthread_mutex_unlock(&c->mu);
    if (!first || !c->log)
        return;
    char eb[128], msg[TW_PATH_MAX + 256];
    if (c->dir)
        snprintf(msg, sizeof msg, "cache: cannot %s cache directory '%s': %s (errno %d); %s", what,
                 c->dir, tw_errtext(err, eb, sizeof eb), err,
                 read_only ? "using it read-only: its entries are served, new ones stay in memory"
                           : "continuing with a memory-only cache");
    else
        snprintf(msg, sizeof msg,
                 "cache: no cache directory (none of TWELL_CACHE_DIR, XDG_CACHE_HOME, HOME is "
                 "set); continuing with a memory-only cache");
    c->log(c->log_user, TWELL_LOG_WARN, msg);
}

static void tw_degrade(tw_cache *c, int err, const char *what) { tw_degrade_to(c, 0, err, what); }

static int (*tw_access_fn)(const char *path, int mode) = access;

void tw_cache_test_set_access(int (*fn)(const char *path, int mode)) {
    tw_access_fn = fn ? fn : access;
}

/* ---- memory layer (caller holds c->mu) ---- */

static size_t tw_mem_cost(size_t len) { return len + sizeof(tw_mem); }

static tw_mem **tw_mem_slot(tw_cache *c, tw_cache_kind kind, const tw_key *key) {
    unsigned h = ((unsigned)key->b[0] | (unsigned)key->b[1] << 8) ^ (unsigned)kind;
    return &c->buckets[h % TW_MEM_BUCKETS];
}

static void tw_lru_unlink(tw_cache *c, tw_mem *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void tw_lru_push_front(tw_cache *c, tw_mem *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

static tw_mem *tw_mem_find(tw_cache *c, tw_cache_kind kind, const tw_key *key) {
    for (tw_mem *e = *tw_mem_slot(c, kind, key); e; e = e->chain)
        if (e->kind == kind && !memcmp(e->key.b, key->b, 32)) {
            tw_lru_unlink(c, e);
            tw_lru_push_front(c, e);
            return e;
        }
    return NULL;
}

static void tw_mem_drop(tw_cache *c, tw_mem *e) {
    tw_mem **pp = tw_mem_slot(c, e->kind, &e->key);
    while (*pp != e)
        pp = &(*pp)->chain;
    *pp = e->chain;
    tw_lru_unlink(c, e);
    c->mem_bytes -= tw_mem_cost(e->len);
    c->mem_entries--;
    free(e->data);
    free(e);
}

static void tw_mem_trim(tw_cache *c) {
    while (c->tail && c->mem_bytes > c->mem_max)
        tw_mem_drop(c, c->tail);
}

/* Takes ownership of data (freed if it does not fit or on failure). */
static void tw_mem_insert(tw_cache *c, tw_cache_kind kind, const tw_key *key, uint8_t *data,
                          size_t len, int64_t touched) {
    for (tw_mem *e = *tw_mem_slot(c, kind, key); e; e = e->chain)
        if (e->kind == kind && !memcmp(e->key.b, key->b, 32)) {
            tw_mem_drop(c, e);
            break;
        }
    tw_mem *e = tw_mem_cost(len) <= c->mem_max ? malloc(sizeof *e) : NULL;
    if (!e) {
        free(data); /* memory is only an accelerator; a dropped copy is a future disk hit */
        return;
    }
    e->kind = kind;
    e->key = *key;
    e->data = data;
    e->len = len;
    e->touched = touched;
    tw_mem **slot = tw_mem_slot(c, kind, key);
    e->chain = *slot;
    *slot = e;
    tw_lru_push_front(c, e);
    c->mem_bytes += tw_mem_cost(len);
    c->mem_entries++;
    tw_mem_trim(c);
}

static void tw_cache_mem_clear(tw_cache *c) {
    while (c->head)
        tw_mem_drop(c, c->head);
}

/* ---- open / close ---- */

/* 0 when dir is an existing directory, else -1 with errno (ENOTDIR for another kind of file). */
static int tw_isdir(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

twell_status tw_cache_open(const char *dir, size_t max_bytes, twell_log_fn log, void *log_user,
                           tw_cache **out) {
    return tw_cache_open_ex(dir, max_bytes, 0, log, log_user, out);
}

twell_status tw_cache_open_ex(const char *dir, size_t max_bytes, unsigned flags, twell_log_fn log,
                              void *log_user, tw_cache **out) {
    if (!out)
        return TWELL_ERR_INVALID_ARG;
    *out = NULL;
    tw_cache *c = calloc(1, sizeof *c);
    if (!c)
        return TWELL_ERR_NO_MEMORY;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return TWELL_ERR_NO_MEMORY;
    }
    c->max_bytes = max_bytes ? max_bytes : TW_DEFAULT_CAP;
    c->log = log;
    c->log_user = log_user;
    c->mem_max = TW_DEFAULT_MEM;
    c->disk_estimate = -1;
    c->no_create = (flags & TW_CACHE_OPEN_NO_CREATE) != 0;
    atomic_init(&c->disk_ok, 1);
    atomic_init(&c->disk_rw, 1);
    c->dir = dir ? tw_concat(dir, "") : tw_cache_default_dir();
    if (dir && !c->dir) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        return TWELL_ERR_NO_MEMORY;
    }
    *out = c;
    if (!c->dir) {
        tw_degrade(c, ENOENT, "resolve");
        return TWELL_OK;
    }
    size_t n = strlen(c->dir);
    while (n > 1 && c->dir[n - 1] == '/')
        c->dir[--n] = '\0';
    if (n + TW_NAME_MAX + 2 > TW_PATH_MAX)
        tw_degrade(c, ENAMETOOLONG, "use");
    else if (c->no_create && tw_isdir(c->dir) != 0)
        tw_degrade(c, errno, "open");
    else if (!c->no_create && tw_mkdirs(c->dir) != 0)
        tw_degrade(c, errno, "create");
    else if (tw_access_fn(c->dir, R_OK | X_OK) != 0)
        tw_degrade(c, errno, "read");
    else if (tw_access_fn(c->dir, W_OK) != 0)
        tw_degrade_to(c, 1, errno, "write to"); /* e.g. a prewarmed cache mounted read-only */
    return TWELL_OK;
}

void tw_cache_close(tw_cache *c) {
    if (!c)
        return;
    tw_cache_mem_clear(c);
    pthread_mutex_destroy(&c->mu);
    free(c->dir);
    free(c);
}

const char *tw_cache_dir(const tw_cache *c) {
    return c && atomic_load(&c->disk_ok) ? c->dir : NULL;
}

int tw_cache_writable(const tw_cache *c) { return c && atomic_load(&c->disk_rw); }

size_t tw_cache_max_bytes(const tw_cache *c) { return c ? c->max_bytes : 0; }

void tw_cache_set_memory_limit(tw_cache *c, size_t bytes) {
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->mem_max = bytes;
    tw_mem_trim(c);
    pthread_mutex_unlock(&c->mu);
}

void tw_cache_get_stats(tw_cache *c, tw_cache_stats *out) {
    if (!c || !out)
        return;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->mem_entries = c->mem_entries;
    out->mem_bytes = c->mem_bytes;
    pthread_mutex_unlock(&c->mu);
}

/* ---- get / put ---- */

twell_status tw_cache_get(tw_cache *c, tw_cache_kind kind, const tw_key *key, void **payload,
                          size_t *len) {
    if (payload)
        *payload = NULL;
    if (len)
        *len = 0;
    if (!c || !key || !payload || !len || !tw_cache_kind_ok(kind))
        return TWELL_ERR_INVALID_ARG;

    pthread_mutex_lock(&c->mu);
    tw_mem *e = tw_mem_find(c, kind, key);
    if (e) {
        void *copy = malloc(e->len ? e->len : 1);
        if (!copy) {
            pthread_mutex_unlock(&c->mu);
            return TWELL_ERR_NO_MEMORY;
        }
        memcpy(copy, e->data, e->len);
        size_t n = e->len;
        int64_t now = tw_mono_s();
        int touch = atomic_load(&c->disk_rw) && now - e->touched >= TW_TOUCH_EVERY_S;
        if (touch)
            e->touched = now;
        c->st.mem_hits++;
        pthread_mutex_unlock(&c->mu);
        if (touch) {
            /* Keep a hot in-memory entry from ageing out of the shared directory. */
            char name[TW_NAME_MAX], path[TW_PATH_MAX];
            tw_cache_entry_name(kind, key, name);
            tw_cache_join(c, name, path);
            utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW);
        }
        *payload = copy;
        *len = n;
        return TWELL_OK;
    }
    pthread_mutex_unlock(&c->mu);

    uint8_t *data = NULL;
    size_t n = 0;
    int bad = 0;
    twell_status st = TWELL_ERR_NOT_FOUND;
    if (atomic_load(&c->disk_ok)) {
        char name[TW_NAME_MAX], path[TW_PATH_MAX];
        tw_cache_entry_name(kind, key, name);
        tw_cache_join(c, name, path);
        st = tw_cache_read_file(path, kind, key, atomic_load(&c->disk_rw), &data, &n, &bad);
    }
    void *copy = NULL;
    if (st == TWELL_OK) {
        /* The caller gets the buffer itself unless the memory layer keeps a copy. */
        pthread_mutex_lock(&c->mu);
        int keep = tw_mem_cost(n) <= c->mem_max;
        pthread_mutex_unlock(&c->mu);
        if (keep) {
            copy = malloc(n ? n : 1);
            if (!copy) {
                free(data);
                return TWELL_ERR_NO_MEMORY;
            }
            memcpy(copy, data, n);
        } else {
            copy = data;
            data = NULL;
        }
    }
    pthread_mutex_lock(&c->mu);
    if (bad > 0)
        c->st.corrupt_removed++;
    if (st == TWELL_OK) {
        c->st.disk_hits++;
        if (data)
            tw_mem_insert(c, kind, key, data, n, tw_mono_s());
    } else if (st == TWELL_ERR_NOT_FOUND) {
        c->st.misses++;
    }
    pthread_mutex_unlock(&c->mu);
    if (st != TWELL_OK)
        return st;
    *payload = copy;
    *len = n;
    return TWELL_OK;
}

static int tw_write_all(int fd, const void *data, size_t len) {
    const uint8_t *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Logs that the entry at path was not stored because a directory holds its name. */
static void tw_blocked(tw_cache *c, const char *path) {
    if (!c->log)
        return;
    char msg[TW_PATH_MAX + 160];
    snprintf(msg, sizeof msg,
             "cache: cannot store entry '%s': a directory that is not empty has its name; the "
             "entry stays in memory (the rest of the cache is unaffected)",
             path);
    c->log(c->log_user, TWELL_LOG_WARN, msg);
}

/* Writes the entry to a private temp file and renames it over the final name. A failure (a
 * read-only or full file system) stops publishing but keeps serving what the directory holds:
 * the cache becomes read-only (one warning). */
static void tw_publish(tw_cache *c, tw_cache_kind kind, const tw_key *key, const void *payload,
                       size_t len) {
    char name[TW_NAME_MAX], path[TW_PATH_MAX], tmp[TW_PATH_MAX];
    tw_cache_entry_name(kind, key, name);
    tw_cache_join(c, name, path);
    tw_cache_join(c, TW_TMP_PREFIX "XXXXXX", tmp);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && !c->no_create && tw_mkdirs(c->dir) == 0) {
        /* Directory deleted under us (rm -rf of the cache): recreate it once. */
        tw_cache_join(c, TW_TMP_PREFIX "XXXXXX", tmp);
        fd = mkostemp(tmp, O_CLOEXEC);
    }
    if (fd < 0) {
        tw_degrade_to(c, 1, errno, "create a file in");
        return;
    }
    uint8_t hdr[TW_CACHE_HEADER_BYTES];
    tw_cache_header_fill(hdr, kind, key, payload, len);
    int err = 0;
    if (tw_write_all(fd, hdr, sizeof hdr) != 0 || tw_write_all(fd, payload, len) != 0 ||
        fsync(fd) != 0)
        err = errno;
    if (close(fd) != 0 && !err)
        err = errno;
    if (!err && rename(tmp, path) != 0) {
        err = errno;
        /* A directory planted under the entry's name is a foreign entry, not a broken cache: an
         * empty one is removed (nothing is lost) and the rename retried; a full one is left
         * alone and only this entry stays in memory. */
        if (err == EISDIR && rmdir(path) == 0 && rename(tmp, path) == 0)
            err = 0;
        else if (err == EISDIR) {
            unlink(tmp);
            tw_blocked(c, path);
            return;
        }
    }
    if (err) {
        unlink(tmp);
        tw_degrade_to(c, 1, err, "write to");
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->st.published++;
    int scan = c->disk_estimate < 0 || ++c->puts_since_scan >= TW_RESCAN_PUTS;
    if (!scan) {
        c->disk_estimate += (int64_t)(len + TW_CACHE_HEADER_BYTES);
        scan = (uint64_t)c->disk_estimate > c->max_bytes;
    }
    pthread_mutex_unlock(&c->mu);
    if (scan)
        tw_cache_scan_evict(c, name);
}

twell_status tw_cache_put(tw_cache *c, tw_cache_kind kind, const tw_key *key, const void *payload,
                          size_t len) {
    if (!c || !key || (!payload && len) || !tw_cache_kind_ok(kind))
        return TWELL_ERR_INVALID_ARG;
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return TWELL_ERR_NO_MEMORY;
    if (len)
        memcpy(copy, payload, len);
    pthread_mutex_lock(&c->mu);
    c->st.puts++;
    tw_mem_insert(c, kind, key, copy, len, tw_mono_s());
    pthread_mutex_unlock(&c->mu);
    if (atomic_load(&c->disk_rw) && (uint64_t)len <= TW_CACHE_MAX_PAYLOAD)
        tw_publish(c, kind, key, payload ? payload : "", len);
    return TWELL_OK;
}

twell_status tw_cache_clear(tw_cache *c, size_t *n_removed) {
    if (n_removed)
        *n_removed = 0;
    size_t gone = 0;
    twell_status st = tw_cache_scan_remove_all(c, &gone);
    if (st != TWELL_OK)
        return st;
    pthread_mutex_lock(&c->mu);
    tw_cache_mem_clear(c);
    c->disk_estimate = -1;
    pthread_mutex_unlock(&c->mu);
    if (n_removed)
        *n_removed = gone;
    return TWELL_OK;
}
