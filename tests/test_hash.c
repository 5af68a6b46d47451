/* test_hash.c — SHA-256 against the FIPS 180-4 example vectors, streaming splits and key fields.
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cache.h"

#include <stdlib.h>
#include <string.h>

static void tw_digest_hex(const void *data, size_t len, char out[65]) {
    tw_hash h;
    tw_key k;
    tw_hash_init(&h);
    tw_hash_update(&h, data, len);
    tw_hash_final(&h, &k);
    tw_key_hex(&k, out);
}

static void test_hash_abc(void **state) {
    (void)state;
    char hex[65];
    tw_digest_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_hash_empty(void **state) {
    (void)state;
    char hex[65];
    tw_digest_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_hash_448_bits(void **state) {
    (void)state;
    /* 56 bytes: the padding no longer fits the block, so a second block is needed. */
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    assert_int_equal(strlen(m), 56);
    char hex[65];
    tw_digest_hex(m, strlen(m), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_hash_896_bits(void **state) {
    (void)state;
    const char *m =
        "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnop"
        "qklmnopqrlmnopqrsmnopqrstnopqrstu";
    char hex[65];
    tw_digest_hex(m, strlen(m), hex);
    assert_string_equal(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

static void test_hash_million_a(void **state) {
    (void)state;
    /* Fed in uneven pieces (1..997 bytes) so partial-buffer paths are exercised too. */
    static char a[1000];
    memset(a, 'a', sizeof a);
    tw_hash h;
    tw_key k;
    char hex[65];
    tw_hash_init(&h);
    size_t done = 0, step = 1;
    while (done < 1000000) {
        size_t n = step < 1000000 - done ? step : 1000000 - done;
        tw_hash_update(&h, a, n);
        done += n;
        step = step * 7 % 997 + 1;
    }
    tw_hash_final(&h, &k);
    tw_key_hex(&k, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_hash_split_invariant(void **state) {
    (void)state;
    /* Every length 0..200 (crossing the 55/56/64-byte padding boundaries), split at every
     * point, equals the one-shot digest. */
    uint8_t msg[200];
    uint32_t s = 12345u;
    for (size_t i = 0; i < sizeof msg; i++) {
        s = s * 1103515245u + 12345u;
        msg[i] = (uint8_t)(s >> 16);
    }
    for (size_t len = 0; len <= sizeof msg; len += 1) {
        char want[65], got[65];
        tw_digest_hex(msg, len, want);
        for (size_t cut = 0; cut <= len; cut += (len < 80 ? 1 : 13)) {
            tw_hash h;
            tw_key k;
            tw_hash_init(&h);
            tw_hash_update(&h, msg, cut);
            tw_hash_update(&h, msg + cut, len - cut);
            tw_hash_final(&h, &k);
            tw_key_hex(&k, got);
            if (strcmp(want, got))
                fail_msg("len %zu cut %zu: %s != %s", len, cut, got, want);
        }
    }
}

static void test_hash_fields_are_delimited(void **state) {
    (void)state;
    tw_hash h;
    tw_key k1, k2, k3;
    tw_hash_init(&h);
    tw_hash_str(&h, "ab");
    tw_hash_str(&h, "c");
    tw_hash_final(&h, &k1);
    tw_hash_init(&h);
    tw_hash_str(&h, "a");
    tw_hash_str(&h, "bc");
    tw_hash_final(&h, &k2);
    tw_hash_init(&h);
    tw_hash_field(&h, "ab", 2);
    tw_hash_field(&h, "c", 1);
    tw_hash_final(&h, &k3);
    assert_memory_not_equal(k1.b, k2.b, 32);
    assert_memory_equal(k1.b, k3.b, 32);
    /* The field is the 8-byte little-endian length then the bytes. */
    static const uint8_t raw[] = {2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 1, 0, 0, 0, 0, 0, 0, 0, 'c'};
    char a[65], b[65];
    tw_digest_hex(raw, sizeof raw, a);
    tw_key_hex(&k1, b);
    assert_string_equal(a, b);
}

static void test_hash_key_hex_format(void **state) {
    (void)state;
    tw_key k;
    for (int i = 0; i < 32; i++)
        k.b[i] = (uint8_t)(i * 8 + 7);
    char hex[65];
    memset(hex, 'X', sizeof hex);
    tw_key_hex(&k, hex);
    assert_int_equal(hex[64], '\0');
    assert_string_equal(hex, "070f171f272f373f474f575f676f777f878f979fa7afb7bfc7cfd7dfe7eff7ff");
}

static void test_hash_checksum64_vectors(void **state) {
    (void)state;
    /* XXH64, seed 0; values from the reference xxHash library. The 42-byte input takes the
     * 32-byte stripe path plus 8-byte and 2-byte tails. */
    static const struct {
        const char *s;
        uint64_t want;
    } v[] = {
        {"", 0xef46db3751d8e999u},
        {"a", 0xd24ec4f1a98c6e5bu},
        {"abc", 0x44bc2cf5ad770999u},
        {"hello", 0x26c7827d889f6da3u},
        {"0123456789abcdef0123456789abcdef0123456789", 0xa76190c3acf08a1cu},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint64_t got = tw_checksum64(v[i].s, strlen(v[i].s));
        if (got != v[i].want)
            fail_msg("checksum64(\"%s\") = %016llx, want %016llx", v[i].s, (unsigned long long)got,
                     (unsigned long long)v[i].want);
    }
}

static void test_hash_checksum64_bit_flips(void **state) {
    (void)state;
    /* Every single-bit flip of a 300-byte buffer changes the checksum. */
    uint8_t b[300];
    for (size_t i = 0; i < sizeof b; i++)
        b[i] = (uint8_t)(i * 37u + 11u);
    uint64_t base = tw_checksum64(b, sizeof b);
    for (size_t bit = 0; bit < 8 * sizeof b; bit++) {
        b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        uint64_t got = tw_checksum64(b, sizeof b);
        b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        if (got == base)
            fail_msg("flipping bit %zu left the checksum at %016llx", bit, (unsigned long long)got);
    }
    assert_int_equal(tw_checksum64(b, sizeof b), base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_abc),
        cmocka_unit_test(test_hash_empty),
        cmocka_unit_test(test_hash_448_bits),
        cmocka_unit_test(test_hash_896_bits),
        cmocka_unit_test(test_hash_million_a),
        cmocka_unit_test(test_hash_split_invariant),
        cmocka_unit_test(test_hash_fields_are_delimited),
        cmocka_unit_test(test_hash_key_hex_format),
        cmocka_unit_test(test_hash_checksum64_vectors),
        cmocka_unit_test(test_hash_checksum64_bit_flips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
