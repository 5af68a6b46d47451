/* tw_cache_test.c — the disk-cache tests' shared helpers (see tw_cache_test.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tw_cache_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

tw_key tw_test_key(int i) {
    tw_hash h;
    tw_key k;
    char s[32];
    snprintf(s, sizeof s, "key-%d", i);
    tw_hash_init(&h);
    tw_hash_str(&h, s);
    tw_hash_final(&h, &k);
    return k;
}

void tw_fill(uint8_t *p, size_t n, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        p[i] = (uint8_t)(s >> 7);
    }
}

void tw_entry_path(const char *dir, tw_cache_kind kind, const tw_key *k, char *out, size_t n) {
    char hex[65];
    tw_key_hex(k, hex);
    snprintf(out, n, "%s/%s.%s", dir, hex, tw_cache_kind_ext(kind));
}

int tw_exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

void tw_count_files(const char *dir, int *entries, int *temps) {
    *entries = *temps = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (!strncmp(de->d_name, ".tw-tmp-", 8))
            (*temps)++;
        else if ((n == 70 && !strcmp(de->d_name + 64, ".cubin")) ||
                 (n == 69 && !strcmp(de->d_name + 64, ".tune")))
            (*entries)++;
    }
    closedir(d);
}

void tw_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

uint8_t *tw_read_whole(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return b;
}

void tw_set_mtime(const char *path, time_t t) {
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

tw_cache *tw_open(const char *dir, size_t cap, tw_logbook *log) {
    tw_cache *c = NULL;
    assert_int_equal(tw_cache_open(dir, cap, log ? tw_test_log : NULL, log, &c), TWELL_OK);
    assert_non_null(c);
    return c;
}

void tw_expect_hit(tw_cache *c, tw_cache_kind kind, const tw_key *k, const void *want, size_t n) {
    void *p = (void *)0x1;
    size_t len = 12345;
    assert_int_equal(tw_cache_get(c, kind, k, &p, &len), TWELL_OK);
    assert_non_null(p);
    assert_int_equal(len, n);
    if (n)
        assert_memory_equal(p, want, n);
    free(p);
}

void tw_expect_miss(tw_cache *c, tw_cache_kind kind, const tw_key *k) {
    void *p = (void *)0x1;
    size_t len = 12345;
    assert_int_equal(tw_cache_get(c, kind, k, &p, &len), TWELL_ERR_NOT_FOUND);
    assert_null(p);
    assert_int_equal(len, 0);
}

void tw_damage(const char *path, int mode, const tw_key *k) {
    size_t n;
    uint8_t *b = tw_read_whole(path, &n);
    assert_true(n > TW_CACHE_HEADER_BYTES + 10);
    size_t plen = n - TW_CACHE_HEADER_BYTES;
    switch (mode) {
    case DMG_TRUNC_HALF:
        n /= 2;
        break;
    case DMG_TRUNC_HEADER:
        n = 10;
        break;
    case DMG_EMPTY:
        n = 0;
        break;
    case DMG_PAYLOAD_BYTE:
        b[TW_CACHE_HEADER_BYTES + plen / 2] ^= 0x10;
        break;
    case DMG_HEADER_BYTE:
        b[20] ^= 0x01;
        break; /* inside the key echo */
    case DMG_MAGIC:
        memcpy(b, "NOTTWELL", 8);
        break;
    case DMG_VERSION:
        b[8] = (uint8_t)(TW_CACHE_FORMAT_VERSION + 1);
        break;
    case DMG_KIND: { /* a valid tuning record under the cubin's name */
        uint8_t *p = malloc(plen);
        assert_non_null(p);
        memcpy(p, b + TW_CACHE_HEADER_BYTES, plen);
        tw_cache_entry_write(b, TW_CACHE_TUNING, k, p, plen);
        free(p);
        break;
    }
    case DMG_FOREIGN_KEY: { /* a valid entry for another key */
        tw_key other = tw_test_key(999);
        uint8_t *p = malloc(plen);
        assert_non_null(p);
        memcpy(p, b + TW_CACHE_HEADER_BYTES, plen);
        tw_cache_entry_write(b, TW_CACHE_CUBIN, &other, p, plen);
        free(p);
        break;
    }
    case DMG_TRAILING: {
        uint8_t *nb = realloc(b, n + 3);
        assert_non_null(nb);
        b = nb;
        memcpy(b + n, "xyz", 3);
        n += 3;
        break;
    }
    case DMG_GARBAGE:
        tw_fill(b, n, 4242);
        break;
    }
    tw_write_file(path, b, n);
    free(b);
}

tw_key tw_put_good_and_corrupt(const char *dir, size_t n, uint32_t seed, int key, char *bad_path,
                               size_t cap) {
    uint8_t *a = malloc(n);
    assert_non_null(a);
    tw_fill(a, n, seed);
    tw_key good = tw_test_key(key), bad = tw_test_key(key + 1);
    tw_cache *c = tw_open(dir, 0, NULL);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &good, a, n), TWELL_OK);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &bad, a, n), TWELL_OK);
    tw_cache_close(c);
    free(a);
    tw_entry_path(dir, TW_CACHE_CUBIN, &bad, bad_path, cap);
    tw_damage(bad_path, DMG_PAYLOAD_BYTE, &bad);
    return bad;
}
