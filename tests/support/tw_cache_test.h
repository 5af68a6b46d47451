/* tw_cache_test.h — helpers the disk-cache tests share (cmocka must be included first): keys,
 * payloads, entry paths, files, and asserting opens, hits and misses. */
#ifndef TWELL_TW_CACHE_TEST_H
#define TWELL_TW_CACHE_TEST_H

#include "cache.h"
#include "tw_log.h"

#include <stdint.h>
#include <time.h>

/* The key of the string "key-<i>". */
tw_key tw_test_key(int i);

/* n pseudo-random bytes from seed (xorshift). */
void tw_fill(uint8_t *p, size_t n, uint32_t seed);

/* The path of (kind, k)'s entry file in dir. */
void tw_entry_path(const char *dir, tw_cache_kind kind, const tw_key *k, char *out, size_t n);

/* 1 when path exists (links not followed), else 0. */
int tw_exists(const char *path);

/* Counts entry-named files and temp files in dir. */
void tw_count_files(const char *dir, int *entries, int *temps);

/* Writes / reads a whole file (malloc'd, *n bytes), failing the test on error. */
void tw_write_file(const char *path, const void *data, size_t n);
uint8_t *tw_read_whole(const char *path, size_t *n);

/* Sets path's access and modification times to t. */
void tw_set_mtime(const char *path, time_t t);

/* Opens the cache at dir with cap bytes (0: the default), logging into log when not NULL. */
tw_cache *tw_open(const char *dir, size_t cap, tw_logbook *log);

/* get must hit with exactly want[0..n); get must miss, with out-parameters cleared. */
void tw_expect_hit(tw_cache *c, tw_cache_kind kind, const tw_key *k, const void *want, size_t n);
void tw_expect_miss(tw_cache *c, tw_cache_kind kind, const tw_key *k);

/* How tw_damage damages an entry file. */
typedef enum tw_damage_mode {
    DMG_TRUNC_HALF,
    DMG_TRUNC_HEADER,
    DMG_EMPTY,
    DMG_PAYLOAD_BYTE,
    DMG_HEADER_BYTE,
    DMG_MAGIC,
    DMG_VERSION,
    DMG_KIND,
    DMG_FOREIGN_KEY,
    DMG_TRAILING,
    DMG_GARBAGE,
    DMG_COUNT
} tw_damage_mode;

/* Damages the entry file at path (an entry of key k, for the modes that rewrite it) per mode. */
void tw_damage(const char *path, int mode, const tw_key *k);
/* Fills the cache at dir with two cubin entries of n bytes (tw_fill's from seed) under keys
 * tw_test_key(key) and tw_test_key(key + 1), the second damaged (DMG_PAYLOAD_BYTE); returns that
 * key and writes its file's path into bad_path. */
tw_key tw_put_good_and_corrupt(const char *dir, size_t n, uint32_t seed, int key, char *bad_path,
                               size_t cap);

#endif
