/* test_cache.c — the disk cache: entry format (pinned bytes, fuzzed reader), hit/miss, corrupt
 * entries, memory-only fallback, concurrent processes, LRU eviction and the `twell cache` tool.
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cache.h"
#include "tw_case_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---- */

typedef struct {
    int warns, others;
    char last[1024];
} tw_logbook;

static void tw_test_log(void *user, twell_log_level level, const char *msg) {
    /* Degrading may happen on several threads at once; count under a lock. */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    tw_logbook *b = user;
    pthread_mutex_lock(&mu);
    if (level == TWELL_LOG_WARN)
        b->warns++;
    else
        b->others++;
    snprintf(b->last, sizeof b->last, "%s", msg);
    pthread_mutex_unlock(&mu);
}

/* A fresh, empty directory for one test case, under the test's own cache directory. */
static void tw_case_dir(const char *name, char *out, size_t n) {
    tw_test_case_dir("test_cache", name, out, n);
}

static tw_key tw_test_key(int i) {
    tw_hash h;
    tw_key k;
    char s[32];
    snprintf(s, sizeof s, "key-%d", i);
    tw_hash_init(&h);
    tw_hash_str(&h, s);
    tw_hash_final(&h, &k);
    return k;
}

static void tw_fill(uint8_t *p, size_t n, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        p[i] = (uint8_t)(s >> 7);
    }
}

static void tw_entry_path(const char *dir, tw_cache_kind kind, const tw_key *k, char *out,
                          size_t n) {
    char hex[65];
    tw_key_hex(k, hex);
    snprintf(out, n, "%s/%s.%s", dir, hex, tw_cache_kind_ext(kind));
}

static int tw_exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* Counts entry-named files and temp files in dir. */
static void tw_count_files(const char *dir, int *entries, int *temps) {
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

static void tw_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static uint8_t *tw_read_whole(const char *path, size_t *n) {
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

static void tw_set_mtime(const char *path, time_t t) {
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static tw_cache *tw_open(const char *dir, size_t cap, tw_logbook *log) {
    tw_cache *c = NULL;
    assert_int_equal(tw_cache_open(dir, cap, log ? tw_test_log : NULL, log, &c), TWELL_OK);
    assert_non_null(c);
    return c;
}

/* get must hit with exactly want[0..n). */
static void tw_expect_hit(tw_cache *c, tw_cache_kind kind, const tw_key *k, const void *want,
                          size_t n) {
    void *p = (void *)0x1;
    size_t len = 12345;
    assert_int_equal(tw_cache_get(c, kind, k, &p, &len), TWELL_OK);
    assert_non_null(p);
    assert_int_equal(len, n);
    if (n)
        assert_memory_equal(p, want, n);
    free(p);
}

static void tw_expect_miss(tw_cache *c, tw_cache_kind kind, const tw_key *k) {
    void *p = (void *)0x1;
    size_t len = 12345;
    assert_int_equal(tw_cache_get(c, kind, k, &p, &len), TWELL_ERR_NOT_FOUND);
    assert_null(p);
    assert_int_equal(len, 0);
}

/* ---- entry format ---- */

static void test_cache_entry_round_trip(void **state) {
    (void)state;
    static const size_t lens[] = {0, 1, 7, 31, 33, 63, 64, 65, 1000, 4097};
    tw_key k = tw_test_key(1);
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        size_t n = lens[i], total = tw_cache_entry_size(n);
        assert_int_equal(total, n + TW_CACHE_HEADER_BYTES);
        uint8_t *payload = malloc(n + 1), *buf = malloc(total);
        assert_non_null(payload);
        assert_non_null(buf);
        tw_fill(payload, n, (uint32_t)n + 3u);
        memset(buf, 0xA5, total);
        tw_cache_entry_write(buf, TW_CACHE_CUBIN, &k, payload, n);
        const uint8_t *p = NULL;
        size_t len = 999;
        assert_int_equal(tw_cache_entry_read(buf, total, TW_CACHE_CUBIN, &k, &p, &len), TWELL_OK);
        assert_ptr_equal(p, buf + TW_CACHE_HEADER_BYTES);
        assert_int_equal(len, n);
        if (n)
            assert_memory_equal(p, payload, n);
        free(payload);
        free(buf);
    }
    assert_int_equal(tw_cache_entry_size(SIZE_MAX), 0); /* overflow is reported, not wrapped */
}

static void test_cache_entry_header_pinned(void **state) {
    (void)state;
    /* Format version 1. If this test fails the layout changed: bump TW_CACHE_FORMAT_VERSION. */
    static const uint8_t want[TW_CACHE_HEADER_BYTES] = {
        'T',  'W',  'E',  'L',  'L',  'C',  0x00, 0x01, /* magic */
        0x01, 0x00, 0x00, 0x00,                         /* format version 1 */
        0x01, 0x00, 0x00, 0x00,                         /* kind TW_CACHE_TUNING */
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, /* key echo */
        0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, /* */
        0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, /* */
        0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, /* */
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* payload length 5 */
        0xa3, 0x6d, 0x9f, 0x88, 0x7d, 0x82, 0xc7, 0x26, /* XXH64("hello") = 26c7827d889f6da3 */
    };
    assert_int_equal(TW_CACHE_FORMAT_VERSION, 1);
    tw_key k;
    for (int i = 0; i < 32; i++)
        k.b[i] = (uint8_t)i;
    uint8_t buf[TW_CACHE_HEADER_BYTES + 5];
    assert_int_equal(tw_cache_entry_size(5), sizeof buf);
    tw_cache_entry_write(buf, TW_CACHE_TUNING, &k, "hello", 5);
    for (size_t i = 0; i < TW_CACHE_HEADER_BYTES; i++)
        if (buf[i] != want[i])
            fail_msg("header byte %zu is 0x%02x, want 0x%02x", i, buf[i], want[i]);
    assert_memory_equal(buf + TW_CACHE_HEADER_BYTES, "hello", 5);
}

/* Each way an entry image can be wrong is rejected with CORRUPT and no output. */
static void test_cache_entry_read_rejects(void **state) {
    (void)state;
    tw_key k = tw_test_key(2), other = tw_test_key(3);
    uint8_t payload[100];
    tw_fill(payload, sizeof payload, 7);
    size_t n = tw_cache_entry_size(sizeof payload);
    uint8_t good[TW_CACHE_HEADER_BYTES + sizeof payload];
    tw_cache_entry_write(good, TW_CACHE_CUBIN, &k, payload, sizeof payload);

    enum { TRUNC, EXTEND, MAGIC, VERSION, VERSION0, KIND, KEY, LENGTH, CHECK, PAYLOAD, NCASE };
    for (int cs = 0; cs < NCASE; cs++) {
        uint8_t *b = malloc(n + 1);
        assert_non_null(b);
        memcpy(b, good, n);
        size_t m = n;
        tw_cache_kind kind = TW_CACHE_CUBIN;
        const tw_key *key = &k;
        switch (cs) {
        case TRUNC:
            m = n - 1;
            break;
        case EXTEND:
            b[n] = 0, m = n + 1;
            break;
        case MAGIC:
            b[3] ^= 0x20;
            break;
        case VERSION:
            b[8] = 2;
            break;
        case VERSION0:
            b[8] = 0;
            break;
        case KIND:
            kind = TW_CACHE_TUNING;
            break;
        case KEY:
            key = &other;
            break;
        case LENGTH:
            b[48] ^= 1;
            break;
        case CHECK:
            b[60] ^= 0x80;
            break;
        case PAYLOAD:
            b[TW_CACHE_HEADER_BYTES + 57] ^= 0x04;
            break;
        }
        const uint8_t *p = (const uint8_t *)0x1;
        size_t len = 77;
        twell_status st = tw_cache_entry_read(b, m, kind, key, &p, &len);
        if (st != TWELL_ERR_CORRUPT)
            fail_msg("case %d: status %s, want TWELL_ERR_CORRUPT", cs, twell_status_name(st));
        assert_null(p);
        assert_int_equal(len, 0);
        free(b);
    }
    /* Every proper prefix, including the empty one and a NULL buffer. */
    for (size_t m = 0; m < n; m++) {
        uint8_t *b = malloc(m ? m : 1);
        assert_non_null(b);
        memcpy(b, good, m);
        const uint8_t *p;
        size_t len;
        assert_int_equal(tw_cache_entry_read(b, m, TW_CACHE_CUBIN, &k, &p, &len),
                         TWELL_ERR_CORRUPT);
        free(b);
    }
    const uint8_t *p;
    size_t len;
    assert_int_equal(tw_cache_entry_read(NULL, 0, TW_CACHE_CUBIN, &k, &p, &len), TWELL_ERR_CORRUPT);
}

static uint64_t tw_rng(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Random and mutated images, each in a buffer of exactly its size (so ASan sees any over-read):
 * nothing but the untouched original may validate. */
static void test_cache_entry_read_fuzz(void **state) {
    (void)state;
    uint64_t s = 0x9e3779b97f4a7c15u;
    tw_key k = tw_test_key(4);
    int rejected = 0, iters = 12000;
    for (int it = 0; it < iters; it++) {
        size_t plen = (size_t)(tw_rng(&s) % 97);
        uint8_t payload[96];
        tw_fill(payload, plen, (uint32_t)it);
        size_t n = tw_cache_entry_size(plen);
        uint8_t *good = malloc(n);
        assert_non_null(good);
        tw_cache_entry_write(good, TW_CACHE_CUBIN, &k, payload, plen);

        size_t m;
        uint8_t *b;
        int mode = (int)(tw_rng(&s) % 6);
        if (mode == 0) { /* pure noise, sometimes starting with a valid magic */
            m = (size_t)(tw_rng(&s) % 200);
            b = malloc(m ? m : 1);
            assert_non_null(b);
            for (size_t i = 0; i < m; i++)
                b[i] = (uint8_t)tw_rng(&s);
            if (m >= 16 && (it & 1))
                memcpy(b, good, 16);
        } else if (mode == 1) { /* truncation or extension */
            m = (size_t)(tw_rng(&s) % (n + 40));
            if (m == n)
                m = n + 1;
            b = malloc(m ? m : 1);
            assert_non_null(b);
            for (size_t i = 0; i < m; i++)
                b[i] = i < n ? good[i] : (uint8_t)tw_rng(&s);
        } else { /* 1-4 bit flips (each a distinct bit), or a wild length field */
            m = n;
            b = malloc(m);
            assert_non_null(b);
            memcpy(b, good, m);
            if (mode == 2) {
                uint64_t wild = tw_rng(&s);
                if (wild == (uint64_t)plen)
                    wild++;
                for (int i = 0; i < 8; i++)
                    b[48 + i] = (uint8_t)(wild >> (8 * i));
            } else {
                size_t bits[4];
                int nflip = 1 + (int)(tw_rng(&s) % 4);
                for (int f = 0; f < nflip; f++) {
                    size_t bit;
                    int dup;
                    do {
                        bit = (size_t)(tw_rng(&s) % (8 * m));
                        dup = 0;
                        for (int g = 0; g < f; g++)
                            dup |= bits[g] == bit;
                    } while (dup);
                    bits[f] = bit;
                    b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                }
            }
        }
        const uint8_t *p = NULL;
        size_t len = 0;
        twell_status st = tw_cache_entry_read(b, m, TW_CACHE_CUBIN, &k, &p, &len);
        if (st != TWELL_ERR_CORRUPT)
            fail_msg("iteration %d (mode %d, %zu bytes): status %s, want TWELL_ERR_CORRUPT", it,
                     mode, m, twell_status_name(st));
        rejected++;
        free(b);
        free(good);
    }
    assert_int_equal(rejected, iters);
}

/* ---- the store ---- */

static void test_cache_hit_miss(void **state) {
    (void)state;
    char dir[1024], path[1200];
    tw_case_dir("hit_miss", dir, sizeof dir);
    tw_key k = tw_test_key(10);
    uint8_t a[3000], b[777];
    tw_fill(a, sizeof a, 1);
    tw_fill(b, sizeof b, 2);

    tw_cache *c = tw_open(dir, 0, NULL);
    assert_string_equal(tw_cache_dir(c), dir);
    assert_int_equal(tw_cache_max_bytes(c), (size_t)1 << 30);
    tw_expect_miss(c, TW_CACHE_CUBIN, &k);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, sizeof a), TWELL_OK);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, a, sizeof a);
    tw_expect_miss(c, TW_CACHE_TUNING, &k); /* kinds never collide */
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.mem_hits, 1);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.puts, 1);
    tw_cache_close(c);

    tw_entry_path(dir, TW_CACHE_CUBIN, &k, path, sizeof path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, TW_CACHE_HEADER_BYTES + sizeof a);

    /* A fresh cache (as another process would) hits from disk, then from memory. */
    c = tw_open(dir, 0, NULL);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, a, sizeof a);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, a, sizeof a);
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.disk_hits, 1);
    assert_int_equal(st.mem_hits, 1);
    /* Overwrite, tuning kind beside it, empty payload. */
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, b, sizeof b), TWELL_OK);
    assert_int_equal(tw_cache_put(c, TW_CACHE_TUNING, &k, a, 10), TWELL_OK);
    tw_key e = tw_test_key(11);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &e, NULL, 0), TWELL_OK);
    tw_cache_close(c);
    c = tw_open(dir, 0, NULL);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, b, sizeof b);
    tw_expect_hit(c, TW_CACHE_TUNING, &k, a, 10);
    tw_expect_hit(c, TW_CACHE_CUBIN, &e, NULL, 0);
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 3);
    assert_int_equal(temps, 0);
    /* Bad arguments are errors, not crashes. */
    void *p;
    size_t len;
    assert_int_equal(tw_cache_get(c, (tw_cache_kind)7, &k, &p, &len), TWELL_ERR_INVALID_ARG);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, NULL, a, 1), TWELL_ERR_INVALID_ARG);
    tw_cache_close(c);
    tw_cache_close(NULL);
}

static void test_cache_memory_layer(void **state) {
    (void)state;
    char dir[1024], path[1200];
    tw_case_dir("memory", dir, sizeof dir);
    uint8_t a[500];
    tw_fill(a, sizeof a, 3);
    tw_key k = tw_test_key(20);
    tw_cache *c = tw_open(dir, 0, NULL);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, sizeof a), TWELL_OK);
    tw_entry_path(dir, TW_CACHE_CUBIN, &k, path, sizeof path);
    assert_int_equal(unlink(path), 0);
    /* Repeated lookups in a process never go back to the disk... */
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, a, sizeof a);
    /* ...unless the memory layer is off. */
    tw_cache_set_memory_limit(c, 0);
    tw_expect_miss(c, TW_CACHE_CUBIN, &k);
    /* Bounded: room for about three entries of 500 bytes. */
    tw_cache_set_memory_limit(c, 3 * (500 + 200));
    for (int i = 0; i < 6; i++) {
        tw_key ki = tw_test_key(30 + i);
        assert_int_equal(tw_cache_put(c, TW_CACHE_TUNING, &ki, a, sizeof a), TWELL_OK);
    }
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_in_range(st.mem_entries, 1, 3);
    assert_true(st.mem_bytes <= 3 * (500 + 200));
    tw_cache_close(c);
}

static void test_cache_default_dir(void **state) {
    (void)state;
    char dir[1024], deep[1200];
    tw_case_dir("default", dir, sizeof dir);
    char *saved[3];
    static const char *vars[3] = {"TWELL_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
    }
    char *d;
    setenv("TWELL_CACHE_DIR", "/x/y", 1);
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    setenv("HOME", "/home/u", 1);
    assert_string_equal(d = tw_cache_default_dir(), "/x/y");
    free(d);
    unsetenv("TWELL_CACHE_DIR");
    assert_string_equal(d = tw_cache_default_dir(), "/xdg/twellrt");
    free(d);
    setenv("XDG_CACHE_HOME", "relative", 1); /* invalid per the XDG spec: ignored */
    assert_string_equal(d = tw_cache_default_dir(), "/home/u/.cache/twellrt");
    free(d);
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    assert_null(tw_cache_default_dir());
    tw_logbook log = {0};
    tw_cache *c = tw_open(NULL, 0, &log); /* nowhere to go: memory-only, one warning */
    assert_null(tw_cache_dir(c));
    assert_int_equal(log.warns, 1);
    tw_cache_close(c);

    /* dir NULL picks up $TWELL_CACHE_DIR and creates missing parents with mode 0700. */
    snprintf(deep, sizeof deep, "%s/p/q/", dir);
    setenv("TWELL_CACHE_DIR", deep, 1);
    c = tw_open(NULL, 0, NULL);
    snprintf(deep, sizeof deep, "%s/p/q", dir);
    assert_string_equal(tw_cache_dir(c), deep); /* trailing slash dropped */
    tw_cache_close(c);
    struct stat sb;
    assert_int_equal(stat(deep, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    snprintf(deep, sizeof deep, "%s/p", dir);
    assert_int_equal(stat(deep, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);

    for (int i = 0; i < 3; i++) {
        if (saved[i])
            setenv(vars[i], saved[i], 1);
        else
            unsetenv(vars[i]);
        free(saved[i]);
    }
}

/* Writes an entry image for (kind, key, payload) to path, then damages it per mode. */
enum {
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
};

static void tw_damage(const char *path, int mode, const tw_key *k) {
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

static void test_cache_corrupt_entries_are_misses(void **state) {
    (void)state;
    char dir[1024], path[1200];
    tw_case_dir("corrupt", dir, sizeof dir);
    uint8_t a[2049], fresh[1500];
    tw_fill(a, sizeof a, 5);
    tw_fill(fresh, sizeof fresh, 6);
    for (int mode = 0; mode < DMG_COUNT; mode++) {
        tw_key k = tw_test_key(100 + mode);
        tw_entry_path(dir, TW_CACHE_CUBIN, &k, path, sizeof path);
        tw_cache *c = tw_open(dir, 0, NULL);
        assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, sizeof a), TWELL_OK);
        tw_cache_close(c);
        tw_damage(path, mode, &k);

        tw_logbook log = {0};
        c = tw_open(dir, 0, &log);
        tw_expect_miss(c, TW_CACHE_CUBIN, &k);
        if (tw_exists(path))
            fail_msg("damage mode %d: corrupt entry was not removed", mode);
        tw_cache_stats st;
        tw_cache_get_stats(c, &st);
        assert_int_equal(st.corrupt_removed, 1);
        assert_int_equal(st.memory_only, 0);
        assert_int_equal(log.warns, 0); /* a miss, not a problem worth a warning */
        /* The caller recompiles and puts; that works and is served to the next process. */
        assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, fresh, sizeof fresh), TWELL_OK);
        tw_cache_close(c);
        c = tw_open(dir, 0, NULL);
        tw_expect_hit(c, TW_CACHE_CUBIN, &k, fresh, sizeof fresh);
        tw_cache_close(c);
    }
    /* Things that are not files under an entry name: a directory is left alone (a miss);
     * a symlink is removed. */
    tw_key kd = tw_test_key(200), ks = tw_test_key(201);
    tw_entry_path(dir, TW_CACHE_CUBIN, &kd, path, sizeof path);
    assert_int_equal(mkdir(path, 0700), 0);
    tw_cache *c = tw_open(dir, 0, NULL);
    tw_expect_miss(c, TW_CACHE_CUBIN, &kd);
    tw_entry_path(dir, TW_CACHE_CUBIN, &ks, path, sizeof path);
    assert_int_equal(symlink("/etc/hostname", path), 0);
    tw_expect_miss(c, TW_CACHE_CUBIN, &ks);
    assert_false(tw_exists(path));
    tw_cache_close(c);
}

static void test_cache_unusable_dir_memory_only(void **state) {
    (void)state;
    /* Tests run as root, so permissions cannot make a directory unusable: a path below a
     * regular file can never be created. */
    char dir[1024], file[1100], bad[1200];
    tw_case_dir("unusable", dir, sizeof dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(file, sizeof file, "%s/plainfile", dir);
    tw_write_file(file, "x", 1);
    snprintf(bad, sizeof bad, "%s/sub/deeper", file);

    tw_logbook log = {0};
    tw_cache *c = tw_open(bad, 0, &log);
    assert_int_equal(log.warns, 1);
    assert_non_null(strstr(log.last, bad));
    assert_non_null(strstr(log.last, strerror(ENOTDIR)));
    assert_null(tw_cache_dir(c));
    uint8_t a[4000];
    tw_fill(a, sizeof a, 9);
    for (int i = 0; i < 5; i++) {
        tw_key k = tw_test_key(300 + i);
        assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, sizeof a - (size_t)i), TWELL_OK);
    }
    for (int i = 0; i < 5; i++) {
        tw_key k = tw_test_key(300 + i);
        tw_expect_hit(c, TW_CACHE_CUBIN, &k, a, sizeof a - (size_t)i);
    }
    tw_key missing = tw_test_key(399);
    tw_expect_miss(c, TW_CACHE_CUBIN, &missing);
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.memory_only, 1);
    /* Maintenance needs a directory. */
    assert_int_equal(tw_cache_verify(c, NULL, NULL), TWELL_ERR_UNSUPPORTED);
    tw_cache_close(c);
    assert_int_equal(log.warns, 1); /* exactly one, however many operations followed */

    /* The regular file itself as the directory. */
    tw_logbook log2 = {0};
    c = tw_open(file, 0, &log2);
    assert_null(tw_cache_dir(c));
    assert_int_equal(log2.warns, 1);
    tw_cache_close(c);
}

typedef struct {
    tw_cache *c;
    int id;
    twell_status st;
} tw_put_arg;

static void *tw_big_put(void *p) {
    tw_put_arg *a = p;
    static uint8_t big[65536];
    tw_key k = tw_test_key(410 + a->id);
    a->st = tw_cache_put(a->c, TW_CACHE_CUBIN, &k, big, sizeof big - (size_t)a->id);
    return NULL;
}

/* Child body for the full-disk test; returns an exit code naming the first failed check. */
static int tw_full_disk_child(const char *dir) {
    signal(SIGXFSZ, SIG_IGN); /* so write() reports EFBIG instead of killing us */
    struct rlimit rl = {4096, 4096};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 10;
    tw_logbook log = {0};
    tw_cache *c = NULL;
    if (tw_cache_open(dir, 0, tw_test_log, &log, &c) != TWELL_OK || !tw_cache_dir(c))
        return 11;
    static uint8_t big[65536];
    tw_fill(big, sizeof big, 11);
    tw_key k1 = tw_test_key(400), k2 = tw_test_key(401), k3 = tw_test_key(402);
    if (tw_cache_put(c, TW_CACHE_CUBIN, &k1, "small", 5) != TWELL_OK || log.warns != 0)
        return 12; /* fits under the limit */
    if (tw_cache_put(c, TW_CACHE_CUBIN, &k2, big, sizeof big) != TWELL_OK)
        return 13;
    if (log.warns != 1 || !strstr(log.last, strerror(EFBIG)) || !strstr(log.last, dir))
        return 14;
    if (tw_cache_dir(c) != NULL)
        return 15;
    if (tw_cache_put(c, TW_CACHE_CUBIN, &k3, big, 1000) != TWELL_OK || log.warns != 1)
        return 16;
    void *p;
    size_t n;
    if (tw_cache_get(c, TW_CACHE_CUBIN, &k2, &p, &n) != TWELL_OK || n != sizeof big ||
        memcmp(p, big, n))
        return 17;
    free(p);
    if (tw_cache_get(c, TW_CACHE_CUBIN, &k3, &p, &n) != TWELL_OK || n != 1000)
        return 18;
    free(p);
    tw_cache_close(c);

    /* Several threads meeting the full disk at once still give one warning in all. */
    tw_logbook log2 = {0};
    if (tw_cache_open(dir, 0, tw_test_log, &log2, &c) != TWELL_OK || !tw_cache_dir(c))
        return 19;
    pthread_t th[4];
    tw_put_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (tw_put_arg){c, i, TWELL_ERR_INTERNAL};
        if (pthread_create(&th[i], NULL, tw_big_put, &args[i]) != 0)
            return 20;
    }
    for (int i = 0; i < 4; i++)
        if (pthread_join(th[i], NULL) != 0 || args[i].st != TWELL_OK)
            return 21;
    if (log2.warns != 1 || tw_cache_dir(c) != NULL)
        return 22;
    tw_cache_close(c);
    return 0;
}

static void test_cache_full_disk_degrades(void **state) {
    (void)state;
    char dir[1024];
    tw_case_dir("full_disk", dir, sizeof dir);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(tw_full_disk_child(dir));
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    if (WEXITSTATUS(ws) != 0)
        fail_msg("full-disk child failed check %d", WEXITSTATUS(ws));
    /* The failed write left no temp file and no partial entry behind. */
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 1);
    assert_int_equal(temps, 0);
    tw_key k1 = tw_test_key(400);
    tw_cache *c = tw_open(dir, 0, NULL);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k1, "small", 5);
    tw_cache_close(c);
}

/* Forks nproc children that wait on a pipe, then all run body(dir, i) at once. */
static void tw_run_children(size_t nproc, const char *dir, int (*body)(const char *, int)) {
    int gate[2];
    assert_int_equal(pipe(gate), 0);
    pid_t pids[16];
    fflush(NULL);
    assert_true(nproc >= 1 && nproc <= 16);
    for (size_t i = 0; i < nproc; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(gate[1]);
            char ch;
            if (read(gate[0], &ch, 1) != 1)
                _exit(90);
            _exit(body(dir, (int)i));
        }
    }
    close(gate[0]);
    char go[16] = {0};
    assert_int_equal(write(gate[1], go, nproc), nproc);
    close(gate[1]);
    for (size_t i = 0; i < nproc; i++) {
        int ws;
        assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
            fail_msg("child %zu failed (status 0x%x)", i, ws);
    }
}

#define TW_SHARED_LEN (300 * 1024 + 17)

/* get → miss → "compile" → put → get from disk, a few times, all racing the others. */
static int tw_same_key_child(const char *dir, int i) {
    (void)i;
    static uint8_t want[TW_SHARED_LEN];
    tw_fill(want, sizeof want, 77);
    tw_key k = tw_test_key(500);
    for (int round = 0; round < 3; round++) {
        tw_logbook log = {0};
        tw_cache *c = NULL;
        if (tw_cache_open(dir, 0, tw_test_log, &log, &c) != TWELL_OK)
            return 1;
        tw_cache_set_memory_limit(c, 0);
        void *p = NULL;
        size_t n = 0;
        twell_status st = tw_cache_get(c, TW_CACHE_CUBIN, &k, &p, &n);
        if (st == TWELL_OK && (n != sizeof want || memcmp(p, want, n)))
            return 2;
        free(p);
        if (st != TWELL_OK && st != TWELL_ERR_NOT_FOUND)
            return 3;
        if (tw_cache_put(c, TW_CACHE_CUBIN, &k, want, sizeof want) != TWELL_OK)
            return 4;
        if (tw_cache_get(c, TW_CACHE_CUBIN, &k, &p, &n) != TWELL_OK)
            return 5;
        if (n != sizeof want || memcmp(p, want, n))
            return 6;
        free(p);
        tw_cache_stats cs;
        tw_cache_get_stats(c, &cs);
        if (log.warns != 0 || cs.corrupt_removed != 0 || !tw_cache_dir(c))
            return 7;
        tw_cache_close(c);
    }
    return 0;
}

static void test_cache_concurrent_same_key(void **state) {
    (void)state;
    char dir[1024];
    tw_case_dir("same_key", dir, sizeof dir);
    tw_run_children(8, dir, tw_same_key_child);
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 1);
    assert_int_equal(temps, 0);
    static uint8_t want[TW_SHARED_LEN];
    tw_fill(want, sizeof want, 77);
    tw_key k = tw_test_key(500);
    tw_cache *c = tw_open(dir, 0, NULL);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, want, sizeof want);
    size_t ok, removed;
    assert_int_equal(tw_cache_verify(c, &ok, &removed), TWELL_OK);
    assert_int_equal(ok, 1);
    assert_int_equal(removed, 0);
    tw_cache_close(c);
}

static int tw_many_keys_child(const char *dir, int i) {
    tw_cache *c = NULL;
    if (tw_cache_open(dir, 0, NULL, NULL, &c) != TWELL_OK)
        return 1;
    uint8_t buf[5000];
    for (int j = 0; j < 4; j++) {
        tw_key k = tw_test_key(600 + 4 * i + j);
        size_t n = 1000 + (size_t)(97 * (4 * i + j));
        tw_fill(buf, n, (uint32_t)(4 * i + j));
        if (tw_cache_put(c, j & 1 ? TW_CACHE_TUNING : TW_CACHE_CUBIN, &k, buf, n) != TWELL_OK)
            return 2;
    }
    int bad = tw_cache_dir(c) == NULL;
    tw_cache_close(c);
    return bad ? 3 : 0;
}

static void test_cache_concurrent_different_keys(void **state) {
    (void)state;
    char dir[1024];
    tw_case_dir("many_keys", dir, sizeof dir);
    tw_run_children(8, dir, tw_many_keys_child);
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 32);
    assert_int_equal(temps, 0);
    tw_cache *c = tw_open(dir, 0, NULL);
    uint8_t buf[5000];
    for (int x = 0; x < 32; x++) {
        tw_key k = tw_test_key(600 + x);
        size_t n = 1000 + (size_t)(97 * x);
        tw_fill(buf, n, (uint32_t)x);
        tw_expect_hit(c, x & 1 ? TW_CACHE_TUNING : TW_CACHE_CUBIN, &k, buf, n);
    }
    size_t ok, removed;
    assert_int_equal(tw_cache_verify(c, &ok, &removed), TWELL_OK);
    assert_int_equal(ok, 32);
    assert_int_equal(removed, 0);
    tw_cache_close(c);
}

typedef struct {
    tw_cache *c;
    int id, failures;
} tw_thread_arg;

static void *tw_thread_body(void *p) {
    tw_thread_arg *a = p;
    uint8_t buf[3000], want[3000];
    for (int it = 0; it < 2000; it++) {
        int x = (it * 7 + a->id) % 24;
        tw_key k = tw_test_key(700 + x);
        size_t n = 100 + (size_t)x * 100;
        tw_fill(want, n, (uint32_t)x);
        void *got;
        size_t len;
        twell_status st = tw_cache_get(a->c, TW_CACHE_TUNING, &k, &got, &len);
        if (st == TWELL_OK) {
            a->failures += len != n || memcmp(got, want, n);
            free(got);
        } else {
            a->failures += st != TWELL_ERR_NOT_FOUND;
            memcpy(buf, want, n);
            a->failures += tw_cache_put(a->c, TW_CACHE_TUNING, &k, buf, n) != TWELL_OK;
        }
    }
    return NULL;
}

static void test_cache_threads(void **state) {
    (void)state;
    char dir[1024];
    tw_case_dir("threads", dir, sizeof dir);
    tw_cache *c = tw_open(dir, 0, NULL);
    tw_cache_set_memory_limit(c, 8000); /* small: forces disk reads and memory churn */
    pthread_t th[4];
    tw_thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (tw_thread_arg){c, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, tw_thread_body, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        if (args[i].failures)
            fail_msg("thread %d saw %d wrong results", i, args[i].failures);
    }
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_true(st.disk_hits > 0);
    assert_true(st.mem_bytes <= 8000);
    tw_cache_close(c);
}

static uint64_t tw_dir_bytes(const char *dir) {
    uint64_t total = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char p[1400];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (de->d_name[0] != '.' && stat(p, &sb) == 0)
            total += (uint64_t)sb.st_size;
    }
    closedir(d);
    return total;
}

static void test_cache_eviction_lru(void **state) {
    (void)state;
    char dir[1024], path[1200];
    tw_case_dir("eviction", dir, sizeof dir);
    enum { PLEN = 1000 };
    size_t esz = tw_cache_entry_size(PLEN), cap = 10 * esz;
    uint8_t a[PLEN];
    tw_fill(a, sizeof a, 13);
    tw_cache *c = tw_open(dir, cap, NULL);
    for (int i = 0; i < 8; i++) {
        tw_key k = tw_test_key(800 + i);
        assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, PLEN), TWELL_OK);
    }
    tw_cache_close(c);
    /* Ages: entry i was last used 1000 - 10 i seconds ago (0 is the oldest). */
    time_t now = time(NULL);
    for (int i = 0; i < 8; i++) {
        tw_key k = tw_test_key(800 + i);
        tw_entry_path(dir, TW_CACHE_CUBIN, &k, path, sizeof path);
        tw_set_mtime(path, now - 1000 + 10 * i);
    }
    /* Another process uses entry 0: the disk hit makes it the youngest. */
    c = tw_open(dir, cap, NULL);
    tw_key k0 = tw_test_key(800);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k0, a, PLEN);
    tw_entry_path(dir, TW_CACHE_CUBIN, &k0, path, sizeof path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_mtime >= now - 5);
    /* Four more entries: 12 would exceed the cap of 10, so the two oldest (1 and 2) go. */
    for (int i = 8; i < 12; i++) {
        tw_key k = tw_test_key(800 + i);
        assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, PLEN), TWELL_OK);
    }
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.evicted, 2);
    tw_cache_close(c);
    for (int i = 0; i < 12; i++) {
        tw_key k = tw_test_key(800 + i);
        tw_entry_path(dir, TW_CACHE_CUBIN, &k, path, sizeof path);
        int want = !(i == 1 || i == 2);
        if (tw_exists(path) != want)
            fail_msg("entry %d: exists %d, want %d", i, tw_exists(path), want);
    }
    uint64_t total = tw_dir_bytes(dir);
    if (total > cap)
        fail_msg("directory holds %llu bytes, cap %zu", (unsigned long long)total, cap);

    /* An entry larger than the whole cap evicts everything else but stays itself. */
    c = tw_open(dir, esz / 2, NULL);
    tw_key kb = tw_test_key(850);
    assert_int_equal(tw_cache_put(c, TW_CACHE_TUNING, &kb, a, PLEN), TWELL_OK);
    tw_cache_close(c);
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 1);
    tw_entry_path(dir, TW_CACHE_TUNING, &kb, path, sizeof path);
    assert_true(tw_exists(path));
}

static void test_cache_stale_temp_cleanup(void **state) {
    (void)state;
    char dir[1024], stale[1200], young[1200];
    tw_case_dir("stale_tmp", dir, sizeof dir);
    tw_cache *c = tw_open(dir, 0, NULL);
    snprintf(stale, sizeof stale, "%s/.tw-tmp-AAAAAA", dir);
    snprintf(young, sizeof young, "%s/.tw-tmp-BBBBBB", dir);
    tw_write_file(stale, "partial", 7);
    tw_write_file(young, "in flight", 9);
    tw_set_mtime(stale, time(NULL) - 2 * 3600);
    tw_key k = tw_test_key(900);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, "x", 1), TWELL_OK);
    assert_false(tw_exists(stale));
    assert_true(tw_exists(young)); /* may belong to another process's put */
    size_t removed;
    assert_int_equal(tw_cache_clear(c, &removed), TWELL_OK);
    assert_int_equal(removed, 1);
    assert_true(tw_exists(young));
    tw_expect_miss(c, TW_CACHE_CUBIN, &k); /* clear empties memory too */
    tw_cache_close(c);
}

/* ---- the `twell cache` tool ---- */

static int tw_run_tool(const char *cmd, char *out, size_t n) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    int ws = pclose(p);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void test_cache_cli(void **state) {
    (void)state;
    char dir[1024], path[1200], cmd[2048], out[8192], hex[65];
    tw_case_dir("cli", dir, sizeof dir);
    tw_cache *c = tw_open(dir, 0, NULL);
    uint8_t a[2500];
    tw_fill(a, sizeof a, 21);
    for (int i = 0; i < 3; i++) {
        tw_key k = tw_test_key(1000 + i);
        assert_int_equal(tw_cache_put(c, i == 2 ? TW_CACHE_TUNING : TW_CACHE_CUBIN, &k, a,
                                      sizeof a - 500 * (size_t)i),
                         TWELL_OK);
    }
    tw_cache_close(c);

    snprintf(cmd, sizeof cmd, "'%s' cache ls --dir '%s' 2>&1", TWELL_TOOL_PATH, dir);
    int rc = tw_run_tool(cmd, out, sizeof out);
    if (rc != 0)
        fail_msg("ls exited %d: %s", rc, out);
    for (int i = 0; i < 3; i++) {
        tw_key k = tw_test_key(1000 + i);
        tw_key_hex(&k, hex);
        if (!strstr(out, hex))
            fail_msg("ls does not list %s:\n%s", hex, out);
    }
    assert_non_null(strstr(out, "cubin"));
    assert_non_null(strstr(out, "tune"));
    assert_non_null(strstr(out, "3 entries"));
    assert_non_null(strstr(out, "1.0 GiB cap"));

    /* verify deletes a corrupted entry and reports it. */
    tw_key k0 = tw_test_key(1000);
    tw_entry_path(dir, TW_CACHE_CUBIN, &k0, path, sizeof path);
    tw_damage(path, DMG_PAYLOAD_BYTE, &k0);
    snprintf(cmd, sizeof cmd, "'%s' cache verify --dir '%s' 2>&1", TWELL_TOOL_PATH, dir);
    rc = tw_run_tool(cmd, out, sizeof out);
    if (rc != 0)
        fail_msg("verify exited %d: %s", rc, out);
    if (!strstr(out, "2 ok, 1 corrupt removed"))
        fail_msg("unexpected verify output:\n%s", out);
    assert_false(tw_exists(path));
    assert_non_null(strstr(out, "2 entries"));

    /* clear through $TWELL_CACHE_DIR rather than --dir. */
    snprintf(cmd, sizeof cmd, "TWELL_CACHE_DIR='%s' '%s' cache clear 2>&1", dir, TWELL_TOOL_PATH);
    rc = tw_run_tool(cmd, out, sizeof out);
    if (rc != 0)
        fail_msg("clear exited %d: %s", rc, out);
    assert_non_null(strstr(out, "removed 2 entries"));
    assert_non_null(strstr(out, "0 entries"));
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 0);

    /* Usage errors and an unusable directory. */
    snprintf(cmd, sizeof cmd, "'%s' cache frobnicate 2>&1", TWELL_TOOL_PATH);
    assert_int_equal(tw_run_tool(cmd, out, sizeof out), 2);
    snprintf(cmd, sizeof cmd, "'%s' cache ls --dir '%s/%s' 2>&1", TWELL_TOOL_PATH, path, "x");
    tw_write_file(path, "f", 1); /* path is now a regular file */
    rc = tw_run_tool(cmd, out, sizeof out);
    if (rc != 1 || !strstr(out, "memory-only"))
        fail_msg("ls of an unusable directory: exit %d, output:\n%s", rc, out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_entry_round_trip),
        cmocka_unit_test(test_cache_entry_header_pinned),
        cmocka_unit_test(test_cache_entry_read_rejects),
        cmocka_unit_test(test_cache_entry_read_fuzz),
        cmocka_unit_test(test_cache_hit_miss),
        cmocka_unit_test(test_cache_memory_layer),
        cmocka_unit_test(test_cache_default_dir),
        cmocka_unit_test(test_cache_corrupt_entries_are_misses),
        cmocka_unit_test(test_cache_unusable_dir_memory_only),
        cmocka_unit_test(test_cache_full_disk_degrades),
        cmocka_unit_test(test_cache_concurrent_same_key),
        cmocka_unit_test(test_cache_concurrent_different_keys),
        cmocka_unit_test(test_cache_threads),
        cmocka_unit_test(test_cache_eviction_lru),
        cmocka_unit_test(test_cache_stale_temp_cleanup),
        cmocka_unit_test(test_cache_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
