/*
 * cache.h — content-addressed store for compiled kernels and tuning records, shared safely by
 * threads and processes (temp file + rename, no lock held while compiling).
 */
#ifndef TWELL_CACHE_H
#define TWELL_CACHE_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* ---- hashing (cache/hash.c): SHA-256, used for every cache key ---- */
typedef struct tw_hash {
    uint32_t h[8];
    uint64_t nbytes;
    uint8_t buf[64];
    size_t nbuf;
} tw_hash;

typedef struct tw_key {
    uint8_t b[32];
} tw_key;

void tw_hash_init(tw_hash *h);
void tw_hash_update(tw_hash *h, const void *data, size_t len);
/* Adds a length-prefixed field, so ("ab","c") and ("a","bc") hash differently. */
void tw_hash_field(tw_hash *h, const void *data, size_t len);
void tw_hash_str(tw_hash *h, const char *s); /* tw_hash_field of a NUL-terminated string */
void tw_hash_final(tw_hash *h, tw_key *out);
/* 64 lowercase hex digits + NUL. */
void tw_key_hex(const tw_key *k, char out[65]);
/* Fast 64-bit checksum of a cache entry's payload: XXH64 with seed 0 (corruption detection
 * only; keys use SHA-256). */
uint64_t tw_checksum64(const void *data, size_t len);

/* ---- the store (cache/cache.c) ---- */
typedef struct tw_cache tw_cache;

/* Kind of payload; part of the file name, so records never collide with cubins. */
/* TW_CACHE_META: facts about the cache itself (the NVRTC versions that published cubins). */
typedef enum tw_cache_kind {
    TW_CACHE_CUBIN = 0,
    TW_CACHE_TUNING = 1,
    TW_CACHE_META = 2
} tw_cache_kind;

/* Opens (creating with mode 0700 if needed) the cache at dir; dir NULL means the default
 * ($TWELL_CACHE_DIR, else $XDG_CACHE_HOME/twellrt, else $HOME/.cache/twellrt). max_bytes 0 means
 * 1 GiB. A directory that can be read but not written (a prewarmed cache mounted read-only, mode
 * 0500) is used read-only: its entries are served, new ones stay in memory. One that cannot be
 * created or read gives a memory-only cache. Either way one WARN goes through log (never an
 * error). Errors: TWELL_ERR_NO_MEMORY. */
twell_status tw_cache_open(const char *dir, size_t max_bytes, twell_log_fn log, void *log_user,
                           tw_cache **out);
void tw_cache_close(tw_cache *c); /* NULL is a no-op */

/* tw_cache_open with flags. TW_CACHE_OPEN_NO_CREATE: never create the directory (nor recreate
 * it when it is deleted later); one that does not exist gives a memory-only cache with the
 * warning, as an unusable one does. For tools that only look (`twell cache ls`). */
#define TW_CACHE_OPEN_NO_CREATE 1u
twell_status tw_cache_open_ex(const char *dir, size_t max_bytes, unsigned flags, twell_log_fn log,
                              void *log_user, tw_cache **out);

/* The directory in use (read-only or not), or NULL when memory-only. Borrowed. */
const char *tw_cache_dir(const tw_cache *c);

/* 1 when new entries are published to the directory; 0 when memory-only or read-only. */
int tw_cache_writable(const tw_cache *c);

/* Looks key up: memory first, then disk. On a hit *payload is a malloc'd copy the caller frees
 * and *len its size; a disk hit touches the entry's mtime (LRU) unless the cache is read-only. A
 * corrupt, truncated or foreign entry is deleted and reported as a miss. Returns TWELL_OK (hit),
 * TWELL_ERR_NOT_FOUND (miss), TWELL_ERR_NO_MEMORY. */
twell_status tw_cache_get(tw_cache *c, tw_cache_kind kind, const tw_key *key, void **payload,
                          size_t *len);

/* Stores payload under key (memory, and disk when writable: temp file + fsync + rename, then
 * eviction by mtime down to the cap). A failed write (read-only or full file system) makes the
 * cache read-only with one warning: later puts stay in memory, disk entries are still served.
 * A directory under the entry's name is not such a failure: an empty one is replaced, a full one
 * keeps only that entry in memory (a warning naming it). Errors: TWELL_ERR_NO_MEMORY. */
twell_status tw_cache_put(tw_cache *c, tw_cache_kind kind, const tw_key *key, const void *payload,
                          size_t len);

/* Entry (de)serialisation, exposed for tests and `twell cache verify`: the entry file format is
 * magic "TWELLC\0\1", format version, kind, key echo, payload length, checksum, payload. */
#define TW_CACHE_FORMAT_VERSION 1u
size_t tw_cache_entry_size(size_t payload_len);
void tw_cache_entry_write(uint8_t *dst, tw_cache_kind kind, const tw_key *key, const void *payload,
                          size_t len);
/* Validates an entry image of n bytes; on success points *payload into buf and sets *len.
 * Returns TWELL_OK or TWELL_ERR_CORRUPT (any malformed, truncated or foreign input). */
twell_status tw_cache_entry_read(const uint8_t *buf, size_t n, tw_cache_kind kind,
                                 const tw_key *key, const uint8_t **payload, size_t *len);

/* ---- additions for tools, tests and benchmarks (cache.c, cache_entry.c, cache_scan.c) ---- */

/* Bytes of an entry's fixed header; the layout is documented in cache/cache_int.h. */
#define TW_CACHE_HEADER_BYTES 64u
/* Largest payload written to disk (larger ones stay in memory); also bounds how much of an
 * untrusted file is ever read. */
#define TW_CACHE_MAX_PAYLOAD ((uint64_t)1 << 32)

/* The directory tw_cache_open uses for dir NULL, malloc'd (caller frees); NULL when none of
 * $TWELL_CACHE_DIR, $XDG_CACHE_HOME (absolute) and $HOME is set, or out of memory. */
char *tw_cache_default_dir(void);

/* File-name suffix of kind ("cubin", "tune"); NULL for a value outside tw_cache_kind. */
const char *tw_cache_kind_ext(tw_cache_kind kind);

/* The size cap in bytes (max_bytes as opened, 1 GiB for 0). */
size_t tw_cache_max_bytes(const tw_cache *c);

/* Bounds the memory layer (default 256 MiB, counting payloads plus a small per-entry overhead);
 * entries beyond it are dropped least recently used first. 0 disables it, so every get reads
 * the disk (benchmarks, tests). */
void tw_cache_set_memory_limit(tw_cache *c, size_t bytes);

/* Counters since tw_cache_open. */
typedef struct tw_cache_stats {
    uint64_t mem_hits, disk_hits, misses, puts;
    uint64_t corrupt_removed; /* bad entry files met by get and deleted */
    uint64_t evicted;         /* entry files deleted to honour the size cap */
    uint64_t mem_entries, mem_bytes;
    uint64_t published; /* puts written to the directory (puts - published stayed in memory) */
    int memory_only;    /* 1 once the directory is unusable (or there is none) */
    int read_only;      /* 1 while entries are read from the directory but not written to it */
} tw_cache_stats;
void tw_cache_get_stats(tw_cache *c, tw_cache_stats *out);

/* One entry file of the directory, as tw_cache_list reports it. */
typedef struct tw_cache_entry_info {
    const char *name; /* file name inside the directory; valid during the callback only */
    tw_cache_kind kind;
    tw_key key;    /* parsed from the name */
    uint64_t size; /* file size in bytes, header included */
    int64_t mtime; /* last use (seconds since the epoch) */
} tw_cache_entry_info;
typedef int (*tw_cache_visit_fn)(void *user, const tw_cache_entry_info *e);

/* Calls fn for every entry file (named <64 hex digits>.<cubin|tune>) in name order, stopping
 * early when fn returns nonzero. Other files are ignored. Errors: TWELL_ERR_UNSUPPORTED (memory-
 * only cache), TWELL_ERR_IO (directory unreadable), TWELL_ERR_NO_MEMORY. */
twell_status tw_cache_list(tw_cache *c, tw_cache_visit_fn fn, void *user);

/* What tw_cache_verify found. ok + removed + kept entries were checked. */
typedef struct tw_cache_verify_report {
    size_t ok;      /* entries that passed */
    size_t removed; /* corrupt, truncated or foreign entries deleted */
    size_t kept;    /* such entries that could not be deleted (still on disk, still misses) */
    int kept_errno; /* why the first kept one could not be deleted (unlink's errno); 0: none */
} tw_cache_verify_report;

/* Reads and validates every entry file, deleting corrupt, truncated or foreign ones; does not
 * touch mtimes. Each one that cannot be deleted (a read-only directory) is logged as a WARN
 * naming the file and the errno, and counted in out->kept. out (may be NULL) receives the counts,
 * zeroed on error. Errors as tw_cache_list. */
twell_status tw_cache_verify(tw_cache *c, tw_cache_verify_report *out);

/* Test hook: the access(2) tw_cache_open checks the directory with (NULL restores access).
 * Tests run as root, whom mode 0500 does not stop, fake a read-only directory with it. Set it
 * before opening; not for concurrent use. */
void tw_cache_test_set_access(int (*fn)(const char *path, int mode));

/* Deletes every entry file and every temp file older than an hour (younger ones may belong to a
 * put in flight), and empties the memory layer. *n_removed (may be NULL) counts entry files.
 * Errors as tw_cache_list. */
twell_status tw_cache_clear(tw_cache *c, size_t *n_removed);

/* The context's cache, opened on first use (never NULL after success: an unusable directory
 * gives a memory-only cache and one warning). */
twell_status tw_ctx_cache(twell_ctx *ctx, tw_cache **out);

#endif /* TWELL_CACHE_H */
