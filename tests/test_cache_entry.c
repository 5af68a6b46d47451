/* test_cache_entry.c — the disk cache's entry format: round trip, pinned header bytes, and a
 * reader that rejects every damaged image (fuzzed).
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cache.h"
#include "tw_cache_test.h"

#include <stdlib.h>
#include <string.h>

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_entry_round_trip),
        cmocka_unit_test(test_cache_entry_header_pinned),
        cmocka_unit_test(test_cache_entry_read_rejects),
        cmocka_unit_test(test_cache_entry_read_fuzz),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
