/* cache_entry.c — one disk-cache entry: its bytes (format in cache_int.h), its file name, and
 * reading and validating an entry file, and its path in the directory. */
#include "cache_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- entry format ---- */

static void tw_put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t tw_cache_get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int tw_cache_kind_ok(tw_cache_kind kind) {
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

void tw_cache_header_fill(uint8_t *h, tw_cache_kind kind, const tw_key *key, const void *payload,
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
    tw_cache_header_fill(dst, kind, key, payload, len);
    if (len)
        memcpy(dst + TW_CACHE_HEADER_BYTES, payload, len);
}

int tw_cache_header_ok(const uint8_t *h, uint64_t total, tw_cache_kind kind, const tw_key *key) {
    if (total < TW_CACHE_HEADER_BYTES || memcmp(h, TW_MAGIC, 8) != 0 ||
        tw_cache_get_le(h + 8, 4) != TW_CACHE_FORMAT_VERSION ||
        tw_cache_get_le(h + 12, 4) != (uint64_t)kind || memcmp(h + 16, key->b, 32) != 0)
        return 0;
    /* Exact size: trailing bytes are as suspect as missing ones. */
    return tw_cache_get_le(h + 48, 8) == total - TW_CACHE_HEADER_BYTES;
}

twell_status tw_cache_entry_read(const uint8_t *buf, size_t n, tw_cache_kind kind,
                                 const tw_key *key, const uint8_t **payload, size_t *len) {
    if (payload)
        *payload = NULL;
    if (len)
        *len = 0;
    if (!key || !payload || !len)
        return TWELL_ERR_INVALID_ARG;
    if (!buf || n < TW_CACHE_HEADER_BYTES || !tw_cache_header_ok(buf, (uint64_t)n, kind, key))
        return TWELL_ERR_CORRUPT;
    const uint8_t *p = buf + TW_CACHE_HEADER_BYTES;
    size_t plen = n - TW_CACHE_HEADER_BYTES;
    if (tw_cache_get_le(buf + 56, 8) != tw_checksum64(p, plen))
        return TWELL_ERR_CORRUPT;
    *payload = p;
    *len = plen;
    return TWELL_OK;
}

void tw_cache_entry_name(tw_cache_kind kind, const tw_key *key, char out[TW_NAME_MAX]) {
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

int tw_cache_parse_name(const char *name, tw_cache_kind *kind, tw_key *key) {
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
 * entry over it since (the window left is tiny and only costs that writer a recompile). Returns
 * 1 deleted, 0 no longer that file, -errno when unlink failed (a read-only directory). */
static int tw_remove_if_same(const char *path, const struct stat *seen) {
    struct stat now;
    if (lstat(path, &now) != 0 || now.st_dev != seen->st_dev || now.st_ino != seen->st_ino)
        return 0;
    if (unlink(path) == 0)
        return 1;
    return errno == ENOENT ? 0 : -errno; /* ENOENT: another process deleted it first */
}

twell_status tw_cache_read_file(const char *path, tw_cache_kind kind, const tw_key *key, int touch,
                                uint8_t **out, size_t *outlen, int *verdict) {
    *out = NULL;
    *outlen = 0;
    *verdict = 0;
    /* O_NONBLOCK: a FIFO planted under an entry name must not hang us; O_NOFOLLOW: no links. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        struct stat sb;
        if (errno == ELOOP && lstat(path, &sb) == 0)
            *verdict = tw_remove_if_same(path, &sb);
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
              tw_read_all(fd, hdr, sizeof hdr) != 0 || !tw_cache_header_ok(hdr, total, kind, key);
    if (!bad) {
        size_t plen = (size_t)(total - TW_CACHE_HEADER_BYTES);
        buf = malloc(plen ? plen : 1);
        if (!buf) {
            close(fd);
            return TWELL_ERR_NO_MEMORY;
        }
        bad = tw_read_all(fd, buf, plen) != 0 ||
              tw_cache_get_le(hdr + 56, 8) != tw_checksum64(buf, plen);
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
        *verdict = tw_remove_if_same(path, &sb);
        return TWELL_ERR_NOT_FOUND;
    }
    return TWELL_OK;
}

void tw_cache_join(const tw_cache *c, const char *name, char *out) {
    snprintf(out, TW_PATH_MAX, "%s/%s", c->dir, name);
}
