/* hash.c — SHA-256 (FIPS 180-4), the digest behind every cache key and entry checksum.
 * Written from the standard; checked against its test vectors in tests/test_hash.c. */
#include "cache.h"

#include <string.h>

static const uint32_t tw_sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u,
    0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu,
    0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu,
    0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau, 0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
    0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu,
    0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
    0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u, 0x19a4c116u,
    0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u,
    0xc67178f2u};

static uint32_t tw_rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32u - n)); }

static void tw_sha256_block(uint32_t st[8], const uint8_t p[64]) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = tw_rotr(w[i - 15], 7) ^ tw_rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = tw_rotr(w[i - 2], 17) ^ tw_rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
    uint32_t e = st[4], f = st[5], g = st[6], h = st[7];
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = tw_rotr(e, 6) ^ tw_rotr(e, 11) ^ tw_rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = h + S1 + ch + tw_sha256_k[i] + w[i];
        uint32_t S0 = tw_rotr(a, 2) ^ tw_rotr(a, 13) ^ tw_rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    st[0] += a, st[1] += b, st[2] += c, st[3] += d;
    st[4] += e, st[5] += f, st[6] += g, st[7] += h;
}

void tw_hash_init(tw_hash *h) {
    static const uint32_t iv[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(h->h, iv, sizeof iv);
    h->nbytes = 0;
    h->nbuf = 0;
}

void tw_hash_update(tw_hash *h, const void *data, size_t len) {
    const uint8_t *p = data;
    h->nbytes += len;
    if (h->nbuf) {
        size_t take = 64 - h->nbuf < len ? 64 - h->nbuf : len;
        memcpy(h->buf + h->nbuf, p, take);
        h->nbuf += take, p += take, len -= take;
        if (h->nbuf < 64)
            return;
        tw_sha256_block(h->h, h->buf);
        h->nbuf = 0;
    }
    for (; len >= 64; p += 64, len -= 64)
        tw_sha256_block(h->h, p);
    if (len)
        memcpy(h->buf, p, len);
    h->nbuf = len;
}

void tw_hash_field(tw_hash *h, const void *data, size_t len) {
    /* 8-byte little-endian length first: fields are self-delimiting, so concatenations of
     * different splits of the same bytes hash differently. */
    uint8_t n[8];
    uint64_t v = (uint64_t)len;
    for (int i = 0; i < 8; i++)
        n[i] = (uint8_t)(v >> (8 * i));
    tw_hash_update(h, n, sizeof n);
    if (len)
        tw_hash_update(h, data, len);
}

void tw_hash_str(tw_hash *h, const char *s) { tw_hash_field(h, s, s ? strlen(s) : 0); }

void tw_hash_final(tw_hash *h, tw_key *out) {
    uint64_t bits = h->nbytes * 8u;
    h->buf[h->nbuf++] = 0x80;
    if (h->nbuf > 56) {
        memset(h->buf + h->nbuf, 0, 64 - h->nbuf);
        tw_sha256_block(h->h, h->buf);
        h->nbuf = 0;
    }
    memset(h->buf + h->nbuf, 0, 56 - h->nbuf);
    for (int i = 0; i < 8; i++)
        h->buf[63 - i] = (uint8_t)(bits >> (8 * i));
    tw_sha256_block(h->h, h->buf);
    for (int i = 0; i < 8; i++) {
        out->b[4 * i] = (uint8_t)(h->h[i] >> 24);
        out->b[4 * i + 1] = (uint8_t)(h->h[i] >> 16);
        out->b[4 * i + 2] = (uint8_t)(h->h[i] >> 8);
        out->b[4 * i + 3] = (uint8_t)h->h[i];
    }
    h->nbuf = 0;
}

void tw_key_hex(const tw_key *k, char out[65]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[k->b[i] >> 4];
        out[2 * i + 1] = digits[k->b[i] & 15];
    }
    out[64] = '\0';
}

/* ---- 64-bit payload checksum: XXH64 (seed 0), written from the xxHash specification ---- */

#define TW_P1 0x9E3779B185EBCA87u
#define TW_P2 0xC2B2AE3D27D4EB4Fu
#define TW_P3 0x165667B19E3779F9u
#define TW_P4 0x85EBCA77C2B2AE63u
#define TW_P5 0x27D4EB2F165667C5u

static uint64_t tw_rotl64(uint64_t x, unsigned n) { return (x << n) | (x >> (64u - n)); }

static uint64_t tw_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t tw_le32(const uint8_t *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
}

static uint64_t tw_xxh_round(uint64_t acc, uint64_t lane) {
    acc += lane * TW_P2;
    return tw_rotl64(acc, 31) * TW_P1;
}

static uint64_t tw_xxh_merge(uint64_t acc, uint64_t v) {
    acc ^= tw_xxh_round(0, v);
    return acc * TW_P1 + TW_P4;
}

uint64_t tw_checksum64(const void *data, size_t len) {
    const uint8_t *p = data;
    size_t n = len;
    uint64_t acc;
    if (n >= 32) {
        uint64_t v1 = TW_P1 + TW_P2, v2 = TW_P2, v3 = 0, v4 = 0 - TW_P1;
        for (; n >= 32; p += 32, n -= 32) {
            v1 = tw_xxh_round(v1, tw_le64(p));
            v2 = tw_xxh_round(v2, tw_le64(p + 8));
            v3 = tw_xxh_round(v3, tw_le64(p + 16));
            v4 = tw_xxh_round(v4, tw_le64(p + 24));
        }
        acc = tw_rotl64(v1, 1) + tw_rotl64(v2, 7) + tw_rotl64(v3, 12) + tw_rotl64(v4, 18);
        acc = tw_xxh_merge(acc, v1);
        acc = tw_xxh_merge(acc, v2);
        acc = tw_xxh_merge(acc, v3);
        acc = tw_xxh_merge(acc, v4);
    } else {
        acc = TW_P5;
    }
    acc += (uint64_t)len;
    for (; n >= 8; p += 8, n -= 8) {
        acc ^= tw_xxh_round(0, tw_le64(p));
        acc = tw_rotl64(acc, 27) * TW_P1 + TW_P4;
    }
    if (n >= 4) {
        acc ^= tw_le32(p) * TW_P1;
        acc = tw_rotl64(acc, 23) * TW_P2 + TW_P3;
        p += 4, n -= 4;
    }
    for (; n > 0; p++, n--) {
        acc ^= (uint64_t)*p * TW_P5;
        acc = tw_rotl64(acc, 11) * TW_P1;
    }
    acc ^= acc >> 33;
    acc *= TW_P2;
    acc ^= acc >> 29;
    acc *= TW_P3;
    acc ^= acc >> 32;
    return acc;
}
