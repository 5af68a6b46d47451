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
typedef enum tw_cache_kind { TW_CACHE_CUBIN = 0, TW_CACHE_TUNING = 1 } tw_cache_kind;

/* Opens (creating with mode 0700 if needed) the cache at dir; dir NULL means the default
 * ($TWELL_CACHE_DIR, else $XDG_CACHE_HOME/twellrt, else $HOME/.cache/twellrt). max_bytes 0 means
 * 1 GiB. A directory that cannot be created or written gives a memory-only cache and one WARN
 * through log (never an error). Errors: TWELL_ERR_NO_MEMORY. */
twell_status tw_cache_open(const char *dir, size_t max_bytes, twell_log_fn log, void *log_user,
                           tw_cache **out);
void tw_cache_close(tw_cache *c); /* NULL is a no-op */

/* The directory in use, or NULL when memory-only. Borrowed. */
const char *tw_cache_dir(const tw_cache *c);

/* Looks key up: memory first, then disk. On a hit *payload is a malloc'd copy the caller frees
 * and *len its size; a disk hit touches the entry's mtime (LRU). A corrupt, truncated or foreign
 * entry is deleted and reported as a miss. Returns TWELL_OK (hit), TWELL_ERR_NOT_FOUND (miss),
 * TWELL_ERR_NO_MEMORY. */
twell_status tw_cache_get(tw_cache *c, tw_cache_kind kind, const tw_key *key, void **payload,
                          size_t *len);

/* Stores payload under key (memory, and disk when usable: temp file + fsync + rename, then
 * eviction by mtime down to the cap). A disk failure degrades to memory with one warning.
 * Errors: TWELL_ERR_NO_MEMORY. */
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

#endif /* TWELL_CACHE_H */
