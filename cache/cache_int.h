/*
 * cache_int.h — what the disk cache's files share (cache.c: open, memory layer, get/put;
 * cache_entry.c: the entry format, names and reading a file; cache_scan.c: directory scans,
 * eviction and maintenance). Internal to cache/.
 */
#ifndef TWELL_CACHE_INT_H
#define TWELL_CACHE_INT_H

#include "cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

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
 * bytes of a known entry are pinned by tests/test_cache_entry.c.
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
    atomic_int disk_ok; /* the directory is read: entries on disk are served */
    atomic_int disk_rw; /* ...and written: new entries are published (implies disk_ok) */
    int warned;         /* the one warning about the directory has been logged */
    int no_create;      /* TW_CACHE_OPEN_NO_CREATE: the directory is never created */
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

/* An entry file found by a directory scan. */
typedef struct tw_file {
    char name[TW_NAME_MAX];
    tw_cache_kind kind;
    tw_key key;
    uint64_t size;
    struct timespec mtime;
} tw_file;

/* ---- cache_entry.c ---- */

/* Little-endian integer of n bytes at p. */
uint64_t tw_cache_get_le(const uint8_t *p, int n);

/* Writes the 64-byte header of (kind, key, payload[0..len)) to h. */
void tw_cache_header_fill(uint8_t *h, tw_cache_kind kind, const tw_key *key, const void *payload,
                          size_t len);

/* 1 when kind is one of tw_cache_kind's values. */
int tw_cache_kind_ok(tw_cache_kind kind);

/* Checks everything in a header but the checksum, for a file of total bytes; 1 if good. */
int tw_cache_header_ok(const uint8_t *h, uint64_t total, tw_cache_kind kind, const tw_key *key);

/* The file name of (kind, key): "<64 hex>.<ext>". */
void tw_cache_entry_name(tw_cache_kind kind, const tw_key *key, char out[TW_NAME_MAX]);

/* Parses "<64 lowercase hex>.<ext>"; 1 on success. */
int tw_cache_parse_name(const char *name, tw_cache_kind *kind, tw_key *key);

/* Reads and validates one entry file. TWELL_OK: *out (malloc'd) holds the payload.
 * TWELL_ERR_NOT_FOUND: absent, or bad; a bad file is deleted and *verdict says how that went: 1
 * deleted, -errno when the deletion failed (the file is still there), 0 when it was not bad or
 * was replaced or removed by another process meanwhile. TWELL_ERR_NO_MEMORY. touch refreshes the
 * mtime of a good file. */
twell_status tw_cache_read_file(const char *path, tw_cache_kind kind, const tw_key *key, int touch,
                                uint8_t **out, size_t *outlen, int *verdict);

/* <dir>/<name> into out (TW_PATH_MAX); dir length was checked at open. */
void tw_cache_join(const tw_cache *c, const char *name, char *out);

/* ---- cache_scan.c ---- */

/* Collects the entry files of the directory; removes temp files older than TW_STALE_TMP_S.
 * Returns TWELL_OK, TWELL_ERR_IO (errno kept) or TWELL_ERR_NO_MEMORY. */
twell_status tw_cache_scan(tw_cache *c, tw_file **files, size_t *nfiles);

/* Measures the directory and deletes least recently used entries until it fits the cap, never
 * the one just written (keep is its name). */
void tw_cache_scan_evict(tw_cache *c, const char *keep);

/* Deletes every entry file of the directory (tw_cache_clear's disk part: cache.c drops the
 * memory layer); *n_removed gets how many. TWELL_OK or TWELL_ERR_IO. */
twell_status tw_cache_scan_remove_all(tw_cache *c, size_t *n_removed);

#endif /* TWELL_CACHE_INT_H */
