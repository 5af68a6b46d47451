/*
 * fuzz_formats.c — the targets over the library's file formats (tw_fuzz.h): cache entries, tuning
 * records and model configs (config.json).
 */
#include "tw_fuzz_int.h"

#include "cache.h"
#include "cache_int.h"
#include "json.h"
#include "tuner.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TWELL_TEST_SOURCE_DIR
#error "TWELL_TEST_SOURCE_DIR must name the source tree (the seeds are read from it)"
#endif

/* ---- cache entries ---- */

static char tw_fz_cdir[512];
static tw_key tw_fz_ckey;

static int tw_fz_cache_init(void) {
    tw_hash h;
    tw_hash_init(&h);
    tw_hash_str(&h, "twellrt fuzz");
    tw_hash_final(&h, &tw_fz_ckey);
    return tw_fz_tmpdir("cache", tw_fz_cdir, sizeof tw_fz_cdir);
}

/* Valid entries of a few payload sizes: empty, one byte, text, a cubin-sized blob. */
static int tw_fz_cache_seed(size_t i, tw_fuzz_buf *out) {
    static const size_t sizes[] = {0, 1, 37, 700, 5000};
    if (i >= sizeof sizes / sizeof sizes[0])
        return 0;
    uint8_t *payload = malloc(sizes[i] + 1);
    if (!payload)
        return 0;
    for (size_t k = 0; k < sizes[i]; k++)
        payload[k] = (uint8_t)(k * 131u + i);
    size_t n = tw_cache_entry_size(sizes[i]);
    out->n = 0;
    uint8_t *img = malloc(n);
    if (!img) {
        free(payload);
        return 0;
    }
    tw_cache_entry_write(img, TW_CACHE_CUBIN, &tw_fz_ckey, payload, sizes[i]);
    tw_fuzz_buf_add(out, img, n);
    free(img);
    free(payload);
    return 1;
}

/* Half the mutated entries get a matching length and checksum, so the header's other fields
 * and the payload are exercised past the checksum. */
static void tw_fz_cache_fixup(tw_fuzz_buf *b, uint64_t r) {
    if (b->n < TW_CACHE_HEADER_BYTES || (r & 1))
        return;
    uint64_t plen = b->n - TW_CACHE_HEADER_BYTES, sum = tw_checksum64(b->p + 64, (size_t)plen);
    for (int k = 0; k < 8; k++) {
        if (!(r & 2))
            b->p[48 + k] = (uint8_t)(plen >> (8 * k));
        b->p[56 + k] = (uint8_t)(sum >> (8 * k));
    }
}

static int tw_fz_cache_run(const uint8_t *data, size_t size) {
    const uint8_t *payload = NULL;
    size_t len = 0;
    twell_status st = tw_cache_entry_read(data, size, TW_CACHE_CUBIN, &tw_fz_ckey, &payload, &len);
    if (st == TWELL_OK) {
        if (size != TW_CACHE_HEADER_BYTES + len || payload != data + TW_CACHE_HEADER_BYTES)
            tw_fuzz_fail("accepted %zu bytes with a payload of %zu at offset %td", size, len,
                         payload - data);
        if (memcmp(data, TW_MAGIC, 8) != 0 ||
            tw_cache_get_le(data + 8, 4) != TW_CACHE_FORMAT_VERSION ||
            tw_cache_get_le(data + 12, 4) != TW_CACHE_CUBIN ||
            memcmp(data + 16, tw_fz_ckey.b, 32) != 0 || tw_cache_get_le(data + 48, 8) != len ||
            tw_cache_get_le(data + 56, 8) != tw_checksum64(payload, len))
            tw_fuzz_fail("accepted an entry whose header does not match (magic, version, kind, "
                         "key, length or checksum)");
    } else if (st != TWELL_ERR_CORRUPT) {
        tw_fuzz_fail("entry_read returned %s", twell_status_name(st));
    }
    /* the same bytes as a file under the key's name: the same verdict, a bad file deleted */
    static unsigned calls;
    if (calls++ % 4 == 0) {
        char name[TW_NAME_MAX], path[700];
        tw_cache_entry_name(TW_CACHE_CUBIN, &tw_fz_ckey, name);
        snprintf(path, sizeof path, "%s/%s", tw_fz_cdir, name);
        if (tw_fz_write(path, data, size) != 0)
            tw_fuzz_fail("cannot write %s: %s", path, strerror(errno));
        uint8_t *out = NULL;
        size_t outlen = 0;
        int verdict = 0;
        twell_status fst =
            tw_cache_read_file(path, TW_CACHE_CUBIN, &tw_fz_ckey, 0, &out, &outlen, &verdict);
        if (fst == TWELL_OK) {
            if (st != TWELL_OK || outlen != len || (len && memcmp(out, payload, len) != 0))
                tw_fuzz_fail("read_file accepted what entry_read said %s", twell_status_name(st));
        } else if (fst == TWELL_ERR_NOT_FOUND) {
            if (st == TWELL_OK)
                tw_fuzz_fail("read_file rejected an entry entry_read accepted");
            if (verdict != 1 || access(path, F_OK) == 0)
                tw_fuzz_fail("a rejected entry file was not deleted (verdict %d)", verdict);
        } else {
            tw_fuzz_fail("read_file returned %s", twell_status_name(fst));
        }
        free(out);
        unlink(path);
    }
    /* the input's first bytes as an entry name: accepted only in the canonical spelling */
    char name[TW_NAME_MAX + 1];
    size_t nl = size < TW_NAME_MAX ? size : TW_NAME_MAX;
    memcpy(name, data, nl);
    name[nl] = '\0';
    tw_cache_kind kind;
    tw_key key;
    if (tw_cache_parse_name(name, &kind, &key)) {
        char back[TW_NAME_MAX];
        tw_cache_entry_name(kind, &key, back);
        if (strcmp(back, name) != 0)
            tw_fuzz_fail("name \"%s\" parsed, but spells back as \"%s\"", name, back);
    }
    return 0;
}

static const char *const tw_fz_cache_dict[] = {"TWELLC\0\1",
                                               "\1\0\0\0",
                                               "\0\0\0\0",
                                               "\xff\xff\xff\xff",
                                               "\xff\xff\xff\xff\xff\xff\xff\x7f",
                                               ".cubin",
                                               ".tune",
                                               ".meta",
                                               NULL};

/* ---- tuning records ---- */

static int tw_fz_tune_seed(size_t i, tw_fuzz_buf *out) {
    if (i >= 3)
        return 0;
    tw_tune_record r;
    memset(&r, 0, sizeof r);
    static const char *const cfg[] = {"gate_pack_simt:BM=32,THREADS=256",
                                      "ffn_fused:CN=256,GPWA=1,GPWB=1,NWA=4,NWB=4,PF=1",
                                      "gate_pack_sm90:BK=64,CLUSTER=2,STAGES=4"};
    if (tw_tune_config_parse(cfg[i], &r.config) != TWELL_OK)
        return 0;
    r.ms = 0.125 * (double)(i + 1);
    r.default_ms = i == 1 ? (double)INFINITY : 0.5;
    r.time = 1700000000 + (int64_t)i;
    tw_tune_problem p;
    tw_tune_device d;
    memset(&p, 0, sizeof p);
    memset(&d, 0, sizeof d);
    snprintf(p.op, sizeof p.op, "%s", i == 1 ? "ffn_infer" : "gate_pack");
    twell_shape_init(&p.shape, 2048, 5632);
    p.M = 4096;
    snprintf(d.name, sizeof d.name, "NVIDIA H200");
    snprintf(d.arch, sizeof d.arch, "sm_90a");
    char *buf = NULL;
    size_t len = 0;
    if (tw_tune_record_encode(&r, &p, &d, &buf, &len) != TWELL_OK)
        return 0;
    out->n = 0;
    tw_fuzz_buf_add(out, buf, len);
    free(buf);
    return 1;
}

static int tw_fz_same_double(double a, double b) { return a == b || (a != a && b != b); }

static int tw_fz_tune_run(const uint8_t *data, size_t size) {
    tw_tune_record r;
    twell_status st = tw_tune_record_decode(data, size, &r);
    if (st == TWELL_ERR_CORRUPT)
        return 0;
    if (st != TWELL_OK)
        tw_fuzz_fail("decode returned %s", twell_status_name(st));
    tw_tune_problem p;
    tw_tune_device d;
    memset(&p, 0, sizeof p);
    memset(&d, 0, sizeof d);
    char *buf = NULL;
    size_t len = 0;
    if (tw_tune_record_encode(&r, &p, &d, &buf, &len) != TWELL_OK)
        tw_fuzz_fail("a decoded record does not encode");
    tw_tune_record back;
    st = tw_tune_record_decode(buf, len, &back);
    free(buf);
    if (st != TWELL_OK || !tw_tune_config_equal(&r.config, &back.config) ||
        !tw_fz_same_double(r.ms, back.ms) || !tw_fz_same_double(r.default_ms, back.default_ms) ||
        r.time != back.time)
        tw_fuzz_fail("a decoded record does not survive encode + decode (%s)",
                     twell_status_name(st));
    return 0;
}

static const char *const tw_fz_tune_dict[] = {"twell-tune-record 1\n",
                                              "config ",
                                              "ms ",
                                              "default_ms ",
                                              "time ",
                                              "problem ",
                                              "device ",
                                              "library ",
                                              "inf",
                                              "nan",
                                              "-inf",
                                              "\n",
                                              "=",
                                              ",",
                                              ":",
                                              "1e999",
                                              "0x10",
                                              "99999999999999999999",
                                              NULL};

/* ---- model configs ---- */

static char *tw_fz_json[16];
static size_t tw_fz_njson;

static int tw_fz_json_init(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tests/data", TWELL_TEST_SOURCE_DIR);
    tw_fz_list(dir, ".json", NULL, tw_fz_json, &tw_fz_njson, 16);
    return tw_fz_njson > 0 ? 0 : -1;
}

static const char *const tw_fz_json_snippets[] = {
    "{\"hidden_size\": 2048, \"intermediate_size\": 5632, \"torch_dtype\": \"bfloat16\"}",
    "{\"text_config\": {\"hidden_size\": 4096, \"intermediate_size\": 11008}}",
    "{\"d_model\": 1e400, \"ffn_dim\": -0}",
    "{\"hidden_size\": 2147483648, \"intermediate_size\": 1}",
    "{\"hidden_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 256}",
    "\xef\xbb\xbf{\"n_embd\": 768, \"n_inner\": 3072, \"dtype\": \"torch.float16\"}",
    "{\"a\": \"\\ud800\", \"b\": \"\\u0000\", \"c\": \"\\ud83d\\ude00\"}",
    "{\"hidden_size\": 2048,}",
    "",
    "null",
    "{\"x\": 01, \"y\": +1, \"z\": .5, \"w\": 1.e3, 'q': NaN}",
};

static int tw_fz_json_seed(size_t i, tw_fuzz_buf *out) {
    out->n = 0;
    if (i < tw_fz_njson)
        return tw_fz_read(tw_fz_json[i], out) == 0;
    i -= tw_fz_njson;
    size_t ns = sizeof tw_fz_json_snippets / sizeof tw_fz_json_snippets[0];
    if (i < ns) {
        tw_fz_str(out, tw_fz_json_snippets[i]);
        return 1;
    }
    if (i - ns >= 2)
        return 0;
    /* arrays nested to the depth limit and one past it */
    size_t depth = TW_JSON_MAX_DEPTH + (i - ns);
    for (size_t k = 0; k < depth; k++)
        tw_fz_str(out, "[");
    for (size_t k = 0; k < depth; k++)
        tw_fz_str(out, "]");
    return 1;
}

/* err[0..n) holds a NUL-terminated string. */
static int tw_fz_terminated(const char *err, size_t n) { return memchr(err, '\0', n) != NULL; }

/* Every member of v is reachable and its counts consistent; returns the values seen. */
static size_t tw_fz_json_walk(const tw_json *v, int depth) {
    if (depth > TW_JSON_MAX_DEPTH + 1)
        tw_fuzz_fail("a tree deeper than TW_JSON_MAX_DEPTH was accepted");
    size_t n = 1;
    if (v->type == TW_JSON_ARRAY || v->type == TW_JSON_OBJECT)
        for (size_t i = 0; i < v->len; i++) {
            if (!v->items[i] || (v->type == TW_JSON_OBJECT && !v->keys[i]))
                tw_fuzz_fail("a member of a parsed %s is NULL", tw_json_type_name(v->type));
            n += tw_fz_json_walk(v->items[i], depth + 1);
        }
    else if (v->type == TW_JSON_STRING && !v->str)
        tw_fuzz_fail("a parsed string has no bytes");
    return n;
}

static int tw_fz_json_run(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    char err[256];
    memset(err, 'x', sizeof err);
    tw_json *v = NULL;
    twell_status st = tw_json_parse(text, size, &v, err, sizeof err);
    if (st == TWELL_OK) {
        if (!v)
            tw_fuzz_fail("json OK without a tree");
        (void)tw_fz_json_walk(v, 0);
        tw_json_free(v);
    } else if (st == TWELL_ERR_CORRUPT) {
        if (v || !tw_fz_terminated(err, sizeof err) || !strstr(err, "line "))
            tw_fuzz_fail("json CORRUPT without a position: \"%.200s\"", err);
    } else if (st != TWELL_ERR_NO_MEMORY) {
        tw_fuzz_fail("json returned %s", twell_status_name(st));
    }
    tw_model_config m;
    memset(err, 'x', sizeof err);
    st = tw_model_config_parse(text, size, &m, err, sizeof err);
    if (st == TWELL_OK) {
        if (m.hidden_size < 1 || m.hidden_size >= (1u << 31) || m.intermediate_size < 1 ||
            m.intermediate_size >= (1u << 31))
            tw_fuzz_fail("model config OK with sizes %u, %u", m.hidden_size, m.intermediate_size);
        if (!tw_fz_terminated(m.torch_dtype, sizeof m.torch_dtype) ||
            !tw_fz_terminated(m.model_type, sizeof m.model_type) ||
            !tw_fz_terminated(m.hidden_act, sizeof m.hidden_act) ||
            !tw_fz_terminated(m.hidden_key, sizeof m.hidden_key) ||
            !tw_fz_terminated(m.inner_key, sizeof m.inner_key) ||
            !tw_fz_terminated(m.section, sizeof m.section))
            tw_fuzz_fail("model config OK with an unterminated string field");
        twell_dtype dt;
        twell_status dst = tw_model_config_dtype(&m, &dt, err, sizeof err);
        if (dst != TWELL_OK && dst != TWELL_ERR_UNSUPPORTED && dst != TWELL_ERR_NOT_FOUND)
            tw_fuzz_fail("model config dtype returned %s", twell_status_name(dst));
    } else if (st == TWELL_ERR_CORRUPT || st == TWELL_ERR_INVALID_ARG) {
        if (!tw_fz_terminated(err, sizeof err) || !err[0])
            tw_fuzz_fail("model config %s without a message", twell_status_name(st));
    } else if (st != TWELL_ERR_NO_MEMORY) {
        tw_fuzz_fail("model config returned %s", twell_status_name(st));
    }
    return 0;
}

static const char *const tw_fz_json_dict[] = {"{",
                                              "}",
                                              "[",
                                              "]",
                                              ":",
                                              ",",
                                              "\"hidden_size\"",
                                              "\"intermediate_size\"",
                                              "\"text_config\"",
                                              "\"torch_dtype\"",
                                              "\"bfloat16\"",
                                              "\"num_hidden_layers\"",
                                              "null",
                                              "true",
                                              "false",
                                              "1e999",
                                              "-0",
                                              "\\u0000",
                                              "\\ud83d\\ude00",
                                              "\xef\xbb\xbf",
                                              "2147483648",
                                              "4096",
                                              "\"",
                                              "\\",
                                              "\xc3\x28",
                                              "\xf4\x90\x80\x80",
                                              NULL};

const tw_fuzz_target tw_fz_cache = {.name = "cache_entry",
                                    .init = tw_fz_cache_init,
                                    .run = tw_fz_cache_run,
                                    .seed = tw_fz_cache_seed,
                                    .dict = tw_fz_cache_dict,
                                    .max_len = (size_t)64 << 10,
                                    .fixup = tw_fz_cache_fixup};
const tw_fuzz_target tw_fz_tune = {.name = "tune_record",
                                   .run = tw_fz_tune_run,
                                   .seed = tw_fz_tune_seed,
                                   .dict = tw_fz_tune_dict,
                                   .max_len = 8192};
const tw_fuzz_target tw_fz_model = {.name = "model_config",
                                    .init = tw_fz_json_init,
                                    .run = tw_fz_json_run,
                                    .seed = tw_fz_json_seed,
                                    .dict = tw_fz_json_dict,
                                    .max_len = (size_t)64 << 10};
