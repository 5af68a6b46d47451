/* cache.c — content-addressed store for cubins and tuning records: a bounded in-memory LRU in
 * front of a directory of checksummed entry files, published by temp file + rename so threads
 * and processes share it without any lock held while the caller compiles. */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/*
 * Entry file, format version 1. Integers little-endian, no padding:
 *   offset size field
 *        0    8 magic "TWELLC\0\1"
 *        8    4 format version (TW_CACHE_FORMAT_VERSION)
 *       12    4 kind (tw_cache_kind)
 *       16   32 key echo (the SHA-256 key the file name spells in hex)
 *       48    8 payload length n
 *       56    8 tw_checksum64 (XXH64, seed 0) of the payload
 *       64    n payload
 * The file is exactly 64 + n bytes. Changing this layout means bumping the version; the header
 * bytes of a known entry are pinned by tests/test_cache.c.
 *
 * Names: <dir>/<64 hex>.cubin and <dir>/<64 hex>.tune, flat (a few thousand entries at most).
 * Temp files: <dir>/.tw-tmp-XXXXXX; one older than TW_STALE_TMP_S is debris of a killed writer.
 *
 * Published files are immutable: a writer only ever renames a complete, fsync'd file over the
 * name, so a reader that opened a file sees one whole version of it even while it is replaced
 * or deleted. Anything that fails validation is deleted and reported as a miss.
 */

#define TW_MAGIC "TWELLC\0\1"
#define TW_TMP_PREFIX ".tw-tmp-"
#define TW_STALE_TMP_S 3600
#define TW_DEFAULT_CAP ((size_t)1 << 30)
#define TW_DEFAULT_MEM ((size_t)256 << 20)
#define TW_MEM_BUCKETS 1024u
#define TW_TOUCH_EVERY_S 60 /* memory hits refresh the disk mtime at most this often */
#define TW_RESCAN_PUTS 64   /* rescan the directory at least this often: others write too */
#define TW_NAME_MAX 80      /* 64 hex + '.' + extension, or a temp name */
#define TW_PATH_MAX 4096

typedef struct tw_mem {
    struct tw_mem *chain;       /* hash bucket chain */
    struct tw_mem *prev, *next; /* LRU list, most recent at head */
    tw_cache_kind kind;
    tw_key key;
    uint8_t *data;
    size_t len;
    int64_t touched; /* monotonic seconds of the last mtime refresh of the disk file */
} tw_mem;

struct tw_cache {
    pthread_mutex_t mu; /* guards everything below except dir, max_bytes and log */
    char *dir;          /* owned; kept after degrading so messages can name it */
    atomic_int disk_ok;
    int warned;
    size_t max_bytes;
    twell_log_fn log;
    void *log_user;

    tw_mem *buckets[TW_MEM_BUCKETS];
    tw_mem *head, *tail;
    size_t mem_max, mem_bytes, mem_entries;

    int64_t disk_estimate; /* bytes of entry files, -1 when unknown */
    unsigned puts_since_scan;
    tw_cache_stats st;
};

/* ---- entry format ---- */

static void tw_put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t tw_get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int tw_kind_ok(tw_cache_kind kind) {
    return kind == TW_CACHE_CUBIN || kind == TW_CACHE_TUNING || kind == TW_CACHE_META;
}

const char *tw_cache_kind_ext(tw_cache_kind kind) {
    switch (kind) {
    case TW_CACHE_CUBIN:
        return "cubin";
    case TW_CACHE_TUNING:
        return "tune";
    case TW_CACHE_META:
        return "meta";
    }
    return NULL;
}

static void tw_header_fill(uint8_t *h, tw_cache_kind kind, const tw_key *key, const void *payload,
                           size_t len) {
    memcpy(h, TW_MAGIC, 8);
    tw_put_le(h + 8, TW_CACHE_FORMAT_VERSION, 4);
    tw_put_le(h + 12, (uint64_t)kind, 4);
    memcpy(h + 16, key->b, 32);
    tw_put_le(h + 48, (uint64_t)len, 8);
    tw_put_le(h + 56, tw_checksum64(payload, len), 8);
}

size_t tw_cache_entry_size(size_t payload_len) {
    return payload_len > SIZE_MAX - TW_CACHE_HEADER_BYTES ? 0 : payload_len + TW_CACHE_HEADER_BYTES;
}

void tw_cache_entry_write(uint8_t *dst, tw_cache_kind kind, const tw_key *key, const void *payload,
                          size_t len) {
    tw_header_fill(dst, kind, key, payload, len);
    if (len)
        memcpy(dst + TW_CACHE_HEADER_BYTES, payload, len);
}

/* Checks everything in a header but the checksum, for a file of total bytes; 1 if good. */
static int tw_header_ok(const uint8_t *h, uint64_t total, tw_cache_kind kind, const tw_key *key) {
    if (total < TW_CACHE_HEADER_BYTES || memcmp(h, TW_MAGIC, 8) != 0 ||
        tw_get_le(h + 8, 4) != TW_CACHE_FORMAT_VERSION || tw_get_le(h + 12, 4) != (uint64_t)kind ||
        memcmp(h + 16, key->b, 32) != 0)
        return 0;
    /* Exact size: trailing bytes are as suspect as missing ones. */
    return tw_get_le(h + 48, 8) == total - TW_CACHE_HEADER_BYTES;
}

twell_status tw_cache_entry_read(const uint8_t *buf, size_t n, tw_cache_kind kind,
                                 const tw_key *key, const uint8_t **payload, size_t *len) {
    if (payload)
        *payload = NULL;
    if (len)
        *len = 0;
    if (!key || !payload || !len)
        return TWELL_ERR_INVALID_ARG;
    if (!buf || n < TW_CACHE_HEADER_BYTES || !tw_header_ok(buf, (uint64_t)n, kind, key))
        return TWELL_ERR_CORRUPT;
    const uint8_t *p = buf + TW_CACHE_HEADER_BYTES;
    size_t plen = n - TW_CACHE_HEADER_BYTES;
    if (tw_get_le(buf + 56, 8) != tw_checksum64(p, plen))
        return TWELL_ERR_CORRUPT;
    *payload = p;
    *len = plen;
    return TWELL_OK;
}

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
    const char *e = getenv("TWELL_CACHE_DIR");
    if (e && *e)
        return tw_concat(e, "");
    /* The XDG base-directory spec says relative values are invalid and must be ignored. */
    e = getenv("XDG_CACHE_HOME");
    if (e && e[0] == '/')
        return tw_concat(e, "/twellrt");
    e = getenv("HOME");
    if (e && *e)
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

/* Switches to memory-only; the first call for this cache (and only it) logs one warning. */
static void tw_degrade(tw_cache *c, int err, const char *what) {
    pthread_mutex_lock(&c->mu);
    int first = !c->warned;
    c->warned = 1;
    c->st.memory_only = 1;
    atomic_store(&c->disk_ok, 0);
    pthread_mutex_unlock(&c->mu);
    if (!first || !c->log)
        return;
    char eb[128], msg[TW_PATH_MAX + 256];
    if (c->dir)
        snprintf(msg, sizeof msg,
                 "cache: cannot %s cache directory '%s': %s (errno %d); continuing with a "
                 "memory-only cache",
                 what, c->dir, tw_errtext(err, eb, sizeof eb), err);
    else
        snprintf(msg, sizeof msg,
                 "cache: no cache directory (none of TWELL_CACHE_DIR, XDG_CACHE_HOME, HOME is "
                 "set); continuing with a memory-only cache");
    c->log(c->log_user, TWELL_LOG_WARN, msg);
}

/* <dir>/<name> into out (TW_PATH_MAX); dir length was checked at open. */
static void tw_join(const tw_cache *c, const char *name, char *out) {
    snprintf(out, TW_PATH_MAX, "%s/%s", c->dir, name);
}

static void tw_entry_name(tw_cache_kind kind, const tw_key *key, char out[TW_NAME_MAX]) {
    char hex[65];
    tw_key_hex(key, hex);
    snprintf(out, TW_NAME_MAX, "%s.%s", hex, tw_cache_kind_ext(kind));
}

static int tw_hexval(char ch) {
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

/* Parses "<64 lowercase hex>.<ext>"; 1 on success. */
static int tw_parse_name(const char *name, tw_cache_kind *kind, tw_key *key) {
    for (int i = 0; i < 32; i++) {
        int hi = tw_hexval(name[2 * i]), lo = hi < 0 ? -1 : tw_hexval(name[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return 0;
        key->b[i] = (uint8_t)(hi << 4 | lo);
    }
    if (name[64] != '.')
        return 0;
    if (!strcmp(name + 65, "cubin"))
        *kind = TW_CACHE_CUBIN;
    else if (!strcmp(name + 65, "tune"))
        *kind = TW_CACHE_TUNING;
    else if (!strcmp(name + 65, "meta"))
        *kind = TW_CACHE_META;
    else
        return 0;
    return 1;
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

static void tw_mem_clear(tw_cache *c) {
    while (c->head)
        tw_mem_drop(c, c->head);
}

/* ---- open / close ---- */

twell_status tw_cache_open(const char *dir, size_t max_bytes, twell_log_fn log, void *log_user,
                           tw_cache **out) {
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
    atomic_init(&c->disk_ok, 1);
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
    else if (tw_mkdirs(c->dir) != 0)
        tw_degrade(c, errno, "create");
    else if (access(c->dir, R_OK | W_OK | X_OK) != 0)
        tw_degrade(c, errno, "write to");
    return TWELL_OK;
}

void tw_cache_close(tw_cache *c) {
    if (!c)
        return;
    tw_mem_clear(c);
    pthread_mutex_destroy(&c->mu);
    free(c->dir);
    free(c);
}

const char *tw_cache_dir(const tw_cache *c) {
    return c && atomic_load(&c->disk_ok) ? c->dir : NULL;
}

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

/* ---- directory scans ---- */

typedef struct tw_file {
    char name[TW_NAME_MAX];
    tw_cache_kind kind;
    tw_key key;
    uint64_t size;
    struct timespec mtime;
} tw_file;

/* Collects the entry files of the directory; removes temp files older than TW_STALE_TMP_S.
 * Returns TWELL_OK, TWELL_ERR_IO (errno kept) or TWELL_ERR_NO_MEMORY. */
static twell_status tw_scan(tw_cache *c, tw_file **files, size_t *nfiles) {
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
        if (strlen(name) >= TW_NAME_MAX || !tw_parse_name(name, &f.kind, &f.key))
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

/* Measures the directory and deletes least recently used entries until it fits the cap, never
 * the one just written (keep is its name). */
static void tw_scan_evict(tw_cache *c, const char *keep) {
    tw_file *v;
    size_t n;
    if (tw_scan(c, &v, &n) != TWELL_OK)
        return; /* accounting only; the next put tries again */
    uint64_t total = 0, evicted = 0;
    for (size_t i = 0; i < n; i++)
        total += v[i].size;
    if (total > c->max_bytes) {
        qsort(v, n, sizeof *v, tw_by_age);
        for (size_t i = 0; i < n && total > c->max_bytes; i++) {
            if (!strcmp(v[i].name, keep))
                continue;
            char path[TW_PATH_MAX];
            tw_join(c, v[i].name, path);
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

/* ---- reading an entry file ---- */

/* Reads exactly len bytes; -1 on error or early end of file. */
static int tw_read_all(int fd, uint8_t *p, size_t len) {
    while (len) {
        ssize_t r = read(fd, p, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* Deletes path if it is still the file we examined: a concurrent writer may have renamed a good
 * entry over it since (the window left is tiny and only costs that writer a recompile). */
static int tw_remove_if_same(const char *path, const struct stat *seen) {
    struct stat now;
    if (lstat(path, &now) != 0 || now.st_dev != seen->st_dev || now.st_ino != seen->st_ino)
        return 0;
    return unlink(path) == 0;
}

/* Reads and validates one entry file. TWELL_OK: *out (malloc'd) holds the payload.
 * TWELL_ERR_NOT_FOUND: absent, or bad (then deleted, *removed = 1).
 * TWELL_ERR_NO_MEMORY. touch refreshes the mtime of a good file. */
static twell_status tw_read_file(const char *path, tw_cache_kind kind, const tw_key *key, int touch,
                                 uint8_t **out, size_t *outlen, int *removed) {
    *out = NULL;
    *outlen = 0;
    *removed = 0;
    /* O_NONBLOCK: a FIFO planted under an entry name must not hang us; O_NOFOLLOW: no links. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        struct stat sb;
        if (errno == ELOOP && lstat(path, &sb) == 0)
            *removed = tw_remove_if_same(path, &sb);
        return TWELL_ERR_NOT_FOUND;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return TWELL_ERR_NOT_FOUND;
    }
    /* Header first, then the payload straight into its own buffer: no copy of the image. */
    uint8_t hdr[TW_CACHE_HEADER_BYTES], *buf = NULL;
    uint64_t total = (uint64_t)sb.st_size;
    int bad = sb.st_size < (off_t)TW_CACHE_HEADER_BYTES ||
              total > TW_CACHE_MAX_PAYLOAD + TW_CACHE_HEADER_BYTES ||
              tw_read_all(fd, hdr, sizeof hdr) != 0 || !tw_header_ok(hdr, total, kind, key);
    if (!bad) {
        size_t plen = (size_t)(total - TW_CACHE_HEADER_BYTES);
        buf = malloc(plen ? plen : 1);
        if (!buf) {
            close(fd);
            return TWELL_ERR_NO_MEMORY;
        }
        bad = tw_read_all(fd, buf, plen) != 0 || tw_get_le(hdr + 56, 8) != tw_checksum64(buf, plen);
        if (!bad) {
            *out = buf;
            *outlen = plen;
            if (touch)
                futimens(fd, NULL); /* LRU: a hit makes the entry young again */
        }
    }
    close(fd);
    if (bad) {
        free(buf);
        *removed = tw_remove_if_same(path, &sb);
        return TWELL_ERR_NOT_FOUND;
    }
    return TWELL_OK;
}

/* ---- get / put ---- */

twell_status tw_cache_get(tw_cache *c, tw_cache_kind kind, const tw_key *key, void **payload,
                          size_t *len) {
    if (payload)
        *payload = NULL;
    if (len)
        *len = 0;
    if (!c || !key || !payload || !len || !tw_kind_ok(kind))
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
        int touch = atomic_load(&c->disk_ok) && now - e->touched >= TW_TOUCH_EVERY_S;
        if (touch)
            e->touched = now;
        c->st.mem_hits++;
        pthread_mutex_unlock(&c->mu);
        if (touch) {
            /* Keep a hot in-memory entry from ageing out of the shared directory. */
            char name[TW_NAME_MAX], path[TW_PATH_MAX];
            tw_entry_name(kind, key, name);
            tw_join(c, name, path);
            utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW);
        }
        *payload = copy;
        *len = n;
        return TWELL_OK;
    }
    pthread_mutex_unlock(&c->mu);

    uint8_t *data = NULL;
    size_t n = 0;
    int removed = 0;
    twell_status st = TWELL_ERR_NOT_FOUND;
    if (atomic_load(&c->disk_ok)) {
        char name[TW_NAME_MAX], path[TW_PATH_MAX];
        tw_entry_name(kind, key, name);
        tw_join(c, name, path);
        st = tw_read_file(path, kind, key, 1, &data, &n, &removed);
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
    if (removed)
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

/* Writes the entry to a private temp file and renames it over the final name. A failure
 * degrades the cache to memory-only (one warning). */
static void tw_publish(tw_cache *c, tw_cache_kind kind, const tw_key *key, const void *payload,
                       size_t len) {
    char name[TW_NAME_MAX], path[TW_PATH_MAX], tmp[TW_PATH_MAX];
    tw_entry_name(kind, key, name);
    tw_join(c, name, path);
    tw_join(c, TW_TMP_PREFIX "XXXXXX", tmp);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && tw_mkdirs(c->dir) == 0) {
        /* Directory deleted under us (rm -rf of the cache): recreate it once. */
        tw_join(c, TW_TMP_PREFIX "XXXXXX", tmp);
        fd = mkostemp(tmp, O_CLOEXEC);
    }
    if (fd < 0) {
        tw_degrade(c, errno, "create a file in");
        return;
    }
    uint8_t hdr[TW_CACHE_HEADER_BYTES];
    tw_header_fill(hdr, kind, key, payload, len);
    int err = 0;
    if (tw_write_all(fd, hdr, sizeof hdr) != 0 || tw_write_all(fd, payload, len) != 0 ||
        fsync(fd) != 0)
        err = errno;
    if (close(fd) != 0 && !err)
        err = errno;
    if (!err && rename(tmp, path) != 0)
        err = errno;
    if (err) {
        unlink(tmp);
        tw_degrade(c, err, "write to");
        return;
    }
    pthread_mutex_lock(&c->mu);
    int scan = c->disk_estimate < 0 || ++c->puts_since_scan >= TW_RESCAN_PUTS;
    if (!scan) {
        c->disk_estimate += (int64_t)(len + TW_CACHE_HEADER_BYTES);
        scan = (uint64_t)c->disk_estimate > c->max_bytes;
    }
    pthread_mutex_unlock(&c->mu);
    if (scan)
        tw_scan_evict(c, name);
}

twell_status tw_cache_put(tw_cache *c, tw_cache_kind kind, const tw_key *key, const void *payload,
                          size_t len) {
    if (!c || !key || (!payload && len) || !tw_kind_ok(kind))
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
    if (atomic_load(&c->disk_ok) && (uint64_t)len <= TW_CACHE_MAX_PAYLOAD)
        tw_publish(c, kind, key, payload ? payload : "", len);
    return TWELL_OK;
}

/* ---- maintenance: ls / verify / clear ---- */

static twell_status tw_scan_checked(tw_cache *c, tw_file **v, size_t *n) {
    if (!c || !atomic_load(&c->disk_ok))
        return TWELL_ERR_UNSUPPORTED;
    twell_status st = tw_scan(c, v, n);
    if (st == TWELL_OK)
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

twell_status tw_cache_verify(tw_cache *c, size_t *n_ok, size_t *n_removed) {
    if (n_ok)
        *n_ok = 0;
    if (n_removed)
        *n_removed = 0;
    tw_file *v;
    size_t n, ok = 0, bad = 0;
    twell_status st = tw_scan_checked(c, &v, &n);
    if (st != TWELL_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        char path[TW_PATH_MAX];
        tw_join(c, v[i].name, path);
        uint8_t *data;
        size_t len;
        int removed;
        st = tw_read_file(path, v[i].kind, &v[i].key, 0, &data, &len, &removed);
        if (st == TWELL_ERR_NO_MEMORY)
            break;
        free(data);
        ok += st == TWELL_OK;
        bad += (size_t)removed;
        st = TWELL_OK;
    }
    free(v);
    pthread_mutex_lock(&c->mu);
    c->disk_estimate = -1; /* sizes changed: measure again on the next put */
    c->st.corrupt_removed += bad;
    pthread_mutex_unlock(&c->mu);
    if (n_ok)
        *n_ok = ok;
    if (n_removed)
        *n_removed = bad;
    return st;
}

twell_status tw_cache_clear(tw_cache *c, size_t *n_removed) {
    if (n_removed)
        *n_removed = 0;
    tw_file *v;
    size_t n, gone = 0;
    twell_status st = tw_scan_checked(c, &v, &n);
    if (st != TWELL_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        char path[TW_PATH_MAX];
        tw_join(c, v[i].name, path);
        gone += unlink(path) == 0;
    }
    free(v);
    pthread_mutex_lock(&c->mu);
    tw_mem_clear(c);
    c->disk_estimate = -1;
    pthread_mutex_unlock(&c->mu);
    if (n_removed)
        *n_removed = gone;
    return TWELL_OK;
}
