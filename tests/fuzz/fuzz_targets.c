/*
 * fuzz_targets.c — the fuzz targets of tw_fuzz.h: template rendering, cache entries, tuning
 * records, model configs and packed input validation, each with the properties it checks.
 */
#include "tw_fuzz.h"

#include "cache.h"
#include "cache_int.h"
#include "cpu_ref.h"
#include "json.h"
#include "lua_engine.h"
#include "synth.h"
#include "tuner.h"
#include "tw_packed_cases.h"
#include "twell_format.h"
#include "twellrt.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef TWELL_TEST_SOURCE_DIR
#error "TWELL_TEST_SOURCE_DIR must name the source tree (the seeds are read from it)"
#endif

/* ---- reporting and buffers ---- */

static const char *tw_fz_target = "?", *tw_fz_how = "";

void tw_fuzz_context(const char *target, const char *how) {
    tw_fz_target = target;
    tw_fz_how = how;
}

_Noreturn void tw_fuzz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz %s: ", tw_fz_target);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n  input: %s\n", tw_fz_how);
    va_end(ap);
    fflush(stderr);
    abort();
}

void tw_fuzz_buf_add(tw_fuzz_buf *b, const void *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            fprintf(stderr, "fuzz: out of memory\n");
            abort();
        }
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0; /* a NUL after the bytes, never counted: seeds print as text */
}

void tw_fuzz_buf_free(tw_fuzz_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void tw_fz_str(tw_fuzz_buf *b, const char *s) { tw_fuzz_buf_add(b, s, strlen(s)); }

/* Reads a whole file into b (cleared first); 0 on success. */
static int tw_fz_read(const char *path, tw_fuzz_buf *b) {
    b->n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        tw_fuzz_buf_add(b, chunk, got);
    fclose(f);
    tw_fuzz_buf_add(b, "", 0);
    return 0;
}

static int tw_fz_write(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* The temp directories made so far, removed with their files at exit. */
static char *tw_fz_dirs[4];
static int tw_fz_ndirs;

static void tw_fz_cleanup(void) {
    for (int i = 0; i < tw_fz_ndirs; i++) {
        DIR *d = opendir(tw_fz_dirs[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char path[1200];
            snprintf(path, sizeof path, "%s/%s", tw_fz_dirs[i], e->d_name);
            if (e->d_name[0] != '.')
                unlink(path);
        }
        if (d)
            closedir(d);
        rmdir(tw_fz_dirs[i]);
    }
}

/* A fresh private directory under $TMPDIR (else /tmp) into out, removed at exit; 0 on
 * success. */
static int tw_fz_tmpdir(const char *what, char *out, size_t n) {
    const char *base = getenv("TMPDIR");
    snprintf(out, n, "%s/twell-fuzz-%s-XXXXXX", base && *base ? base : "/tmp", what);
    if (!mkdtemp(out) || tw_fz_ndirs == (int)(sizeof tw_fz_dirs / sizeof tw_fz_dirs[0]))
        return -1;
    if (tw_fz_ndirs == 0)
        atexit(tw_fz_cleanup);
    tw_fz_dirs[tw_fz_ndirs++] = out;
    return 0;
}

/* The files of dir whose names end with suffix (and, with not_suffix, do not end with it),
 * sorted, appended to names[*n..cap). */
static void tw_fz_list(const char *dir, const char *suffix, const char *not_suffix, char **names,
                       size_t *n, size_t cap) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    size_t first = *n;
    struct dirent *e;
    while ((e = readdir(d)) && *n < cap) {
        size_t l = strlen(e->d_name), ls = strlen(suffix);
        if (l <= ls || strcmp(e->d_name + l - ls, suffix) != 0)
            continue;
        if (not_suffix) {
            size_t ln = strlen(not_suffix);
            if (l >= ln && !strcmp(e->d_name + l - ln, not_suffix))
                continue;
        }
        size_t len = strlen(dir) + l + 2;
        char *p = malloc(len);
        if (!p)
            break;
        snprintf(p, len, "%s/%s", dir, e->d_name);
        names[(*n)++] = p;
    }
    closedir(d);
    for (size_t i = first + 1; i < *n; i++) /* insertion sort: a stable seed order */
        for (size_t j = i; j > first && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
}

static double tw_fz_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- render ---- */

#define TW_FZ_MAX_FILES 128
static char tw_fz_rdir[512];
static char *tw_fz_tpl[TW_FZ_MAX_FILES]; /* real templates and fixtures: the seeds */
static size_t tw_fz_ntpl;
static const char *const tw_fz_groups[] = {"common", "gate_pack", "ffn", "train", "gemm", NULL};

/* Generous for any input that is not trying to exhaust them, small enough to be quick. */
static const tw_lua_limits tw_fz_limits = {(size_t)16 << 20, (size_t)2 << 20, 5000000ull, 0.1};
#define TW_FZ_SLACK_S 3.0 /* on top of the wall-clock limit: loaded machines, sanitizers */

static int tw_fz_render_init(void) {
    if (tw_fz_tmpdir("render", tw_fz_rdir, sizeof tw_fz_rdir) != 0)
        return -1;
    /* the real modules, flat (the engine also searches a flat directory), so seeds import them */
    char *mods[TW_FZ_MAX_FILES];
    size_t nmods = 0;
    char dir[600];
    for (int g = 0; tw_fz_groups[g]; g++) {
        snprintf(dir, sizeof dir, "%s/templates/%s", TWELL_TEST_SOURCE_DIR, tw_fz_groups[g]);
        tw_fz_list(dir, ".lua", ".cu.lua", mods, &nmods, TW_FZ_MAX_FILES);
        tw_fz_list(dir, ".cu.lua", NULL, tw_fz_tpl, &tw_fz_ntpl, TW_FZ_MAX_FILES);
    }
    snprintf(dir, sizeof dir, "%s/tests/templates", TWELL_TEST_SOURCE_DIR);
    tw_fz_list(dir, "_mod.lua", NULL, mods, &nmods, TW_FZ_MAX_FILES);
    tw_fz_list(dir, ".cu.lua", NULL, tw_fz_tpl, &tw_fz_ntpl, TW_FZ_MAX_FILES);
    tw_fuzz_buf b = {0};
    int rc = 0;
    for (size_t i = 0; i < nmods; i++) {
        const char *base = strrchr(mods[i], '/') + 1;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", tw_fz_rdir, base);
        if (tw_fz_read(mods[i], &b) != 0 || tw_fz_write(path, b.p, b.n) != 0)
            rc = -1;
        free(mods[i]);
    }
    tw_fuzz_buf_free(&b);
    return tw_fz_ntpl > 0 ? rc : -1;
}

/* Inputs that once hung, exhausted memory or escaped the sandbox (issue 26), and their kin. */
static const char *const tw_fz_lua_snippets[] = {
    "while true do end",
    "setmetatable({}, {__gc = function() while true do end end}) emit(\"x\")",
    "emit(tostring(string.find(string.rep(\"a\", 3000), string.rep(\".-\", 12) .. \"b\")))",
    "for w in string.gmatch(string.rep(\"a\", 1e5), \"a*a*a*b\") do end",
    "local s = \"x\" for i = 1, 40 do s = s .. s end emit(s)",
    "emit(string.rep(\"x\", 1 << 30))",
    "local t = {} for i = 1, 1e9 do t[i] = i end",
    "local function f() return f() end f()",
    "local function f() return 1 + f() end f()",
    "emit(\"a\\0b\")",
    "local m = import \"twell_common\" local S = m.shape() emit(S.W)",
    "import \"import_cycle_mod\"",
    "import \"../../etc/passwd\"",
    "cuda [==[ ${P.K} ${undefined_global} ]==]",
    "error(setmetatable({}, {__tostring = function() while true do end end}))",
    "emit(string.format(\"%99999999d\", 1))",
    "local a = {} a[1] = a emit(a)",
    "emit(num(0/0)) emit(flt(1/0)) emitf(\"%s\", nil)",
    "table.sort({3, 2, 1, 5, 4}, function(a, b) return true end)",
    "emit(utf8.char(0x7FFFFFFF))",
    "emit(string.rep(\"x\", 1e6, string.rep(\"y\", 1e6)))",
    "local t = {} for i = 1, 1e6 do table.insert(t, 1, i) end",
    "emit(table.concat(setmetatable({}, {__index = function() return \"x\" end}), \"\", 1, 1e8))",
    "emit(param(\"K\", nil) + P.nonexistent)",
    "unsupported(\"because %s\", string.rep(\"z\", 1e7))",
    "check(false, \"%d\", \"not a number\")",
    "load(\"return 1\")() os.exit(1) io.open(\"/etc/passwd\")",
    "string.dump(function() end)",
    "getmetatable(\"\").__index.rep = nil emit((\"x\"):rep(3))",
    "coroutine.wrap(function() while true do end end)()",
    "local t = setmetatable({}, {__index = function(t, k) return t[k + 1] end}) emit(t[1])",
    "emit(select(\"#\", table.unpack({}, 1, 1e7)))",
};

static int tw_fz_render_seed(size_t i, tw_fuzz_buf *out) {
    out->n = 0;
    if (i < tw_fz_ntpl)
        return tw_fz_read(tw_fz_tpl[i], out) == 0;
    i -= tw_fz_ntpl;
    if (i >= sizeof tw_fz_lua_snippets / sizeof tw_fz_lua_snippets[0])
        return 0;
    tw_fz_str(out, tw_fz_lua_snippets[i]);
    return 1;
}

static int tw_fz_render_run(const uint8_t *data, size_t size) {
    char path[600];
    snprintf(path, sizeof path, "%s/fz.cu.lua", tw_fz_rdir);
    if (tw_fz_write(path, data, size) != 0)
        tw_fuzz_fail("cannot write %s: %s", path, strerror(errno));
    const tw_param params[] = {{"K", NULL, 512},
                               {"N", NULL, 1024},
                               {"T", NULL, 128},
                               {"C", NULL, 4},
                               {"dtype", "bf16", 0}};
    char *src = NULL, *err = NULL;
    size_t len = 0;
    double t0 = tw_fz_now();
    twell_status st = tw_lua_render(tw_fz_rdir, "fz", params, sizeof params / sizeof params[0],
                                    &tw_fz_limits, &src, &len, &err);
    double dt = tw_fz_now() - t0;
    if (dt > tw_fz_limits.seconds + TW_FZ_SLACK_S)
        tw_fuzz_fail("render took %.2f s (limit %.2f s + %.1f s slack): %s", dt,
                     tw_fz_limits.seconds, TW_FZ_SLACK_S, err ? err : "(no message)");
    switch (st) {
    case TWELL_OK:
        if (!src || err)
            tw_fuzz_fail("OK without a source or with a message (%s)", err ? err : "");
        if (strlen(src) != len)
            tw_fuzz_fail("OK with a NUL byte inside the source (length %zu, strlen %zu)", len,
                         strlen(src));
        if (len > tw_fz_limits.out_bytes)
            tw_fuzz_fail("OK with %zu bytes of output (limit %zu)", len, tw_fz_limits.out_bytes);
        break;
    case TWELL_ERR_TEMPLATE:
    case TWELL_ERR_UNSUPPORTED:
    case TWELL_ERR_IO:
        if (src)
            tw_fuzz_fail("%s with a source", twell_status_name(st));
        if (!err || !err[0])
            tw_fuzz_fail("%s without a message", twell_status_name(st));
        if (strncmp(err, "templates/", 10) != 0 && st == TWELL_ERR_TEMPLATE)
            tw_fuzz_fail("template error that names no template file: %s", err);
        break;
    case TWELL_ERR_NO_MEMORY:
        if (src)
            tw_fuzz_fail("NO_MEMORY with a source");
        break;
    default:
        tw_fuzz_fail("unexpected status %s (%s)", twell_status_name(st), err ? err : "");
    }
    free(src);
    free(err);
    return 0;
}

static const char *const tw_fz_lua_dict[] = {"emit(",
                                             "cuda [==[",
                                             "]==]",
                                             "${",
                                             "}",
                                             "import \"twell_common\"",
                                             "local ",
                                             "function",
                                             " end ",
                                             "while true do ",
                                             "for i = 1, 1e9 do ",
                                             "string.rep(",
                                             "setmetatable(",
                                             "__gc",
                                             "__index",
                                             "P.K",
                                             "param(\"T\", 1)",
                                             "unsupported(",
                                             "check(",
                                             "num(",
                                             "flt(",
                                             "..",
                                             "\"",
                                             "'",
                                             "[[",
                                             "]]",
                                             "--",
                                             "\n",
                                             "#line 1 \"x\"\n",
                                             "(",
                                             ")",
                                             "{",
                                             "=",
                                             ",",
                                             "1e308",
                                             "0/0",
                                             "-1",
                                             "math.maxinteger",
                                             "#",
                                             "return ",
                                             "nil",
                                             NULL};

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

/* ---- packed input validation ---- */

enum { TW_FZ_SHAPES = 3, TW_FZ_MAX_M = 6 };

typedef struct {
    twell_shape s;
    tw_synth_ffn *f;
    twell_plan *on, *off;
} tw_fz_shape;

static tw_fz_shape tw_fz_sh[TW_FZ_SHAPES];
static twell_ctx *tw_fz_on, *tw_fz_off;
static uint32_t *tw_fz_words;
static uint16_t *tw_fz_y_on, *tw_fz_y_off, *tw_fz_dense;

static twell_ctx *tw_fz_cpu(twell_switch validate) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    o.validate_packed = validate;
    twell_ctx *ctx = NULL;
    return twell_ctx_create(&o, &ctx) == TWELL_OK ? ctx : NULL;
}

static int tw_fz_packed_init(void) {
    /* shapes with every C, T = 64 / 128 / 256, both dtypes, gated and not */
    static const uint32_t dims[TW_FZ_SHAPES][4] = {
        {32, 128, 64, 2}, {16, 256, 128, 8}, {64, 512, 256, 4}};
    tw_fz_on = tw_fz_cpu(TWELL_SWITCH_ON);
    tw_fz_off = tw_fz_cpu(TWELL_SWITCH_OFF);
    if (!tw_fz_on || !tw_fz_off)
        return -1;
    size_t words = 0, K = 0, N = 0;
    for (int i = 0; i < TW_FZ_SHAPES; i++) {
        tw_fz_shape *z = &tw_fz_sh[i];
        twell_shape_init(&z->s, dims[i][0], dims[i][1]);
        z->s.T = dims[i][2], z->s.C = dims[i][3];
        z->s.dtype = i == 1 ? TWELL_DTYPE_FP16 : TWELL_DTYPE_BF16;
        z->s.gated = i != 1;
        tw_synth_params p = tw_synth_params_default();
        p.M = TW_FZ_MAX_M, p.K = z->s.K, p.N = z->s.N, p.dtype = z->s.dtype, p.gated = z->s.gated;
        p.nnz = (double)z->s.N / 16.0;
        if (tw_synth_create(NULL, &p, &z->f) != TWELL_OK ||
            twell_plan_create(tw_fz_on, &z->s, &z->on) != TWELL_OK ||
            twell_plan_create(tw_fz_off, &z->s, &z->off) != TWELL_OK)
            return -1;
        size_t w = twell_packed_words(&z->s, TW_FZ_MAX_M);
        words = w > words ? w : words;
        K = z->s.K > K ? z->s.K : K;
        N = z->s.N > N ? z->s.N : N;
    }
    tw_fz_words = malloc(words * sizeof *tw_fz_words);
    tw_fz_y_on = malloc(TW_FZ_MAX_M * K * 2u);
    tw_fz_y_off = malloc(TW_FZ_MAX_M * K * 2u);
    tw_fz_dense = malloc(N * 2u);
    return tw_fz_words && tw_fz_y_on && tw_fz_y_off && tw_fz_dense ? 0 : -1;
}

/* The input's shape and M (its first two bytes); its words follow, zero-padded. */
static const tw_fz_shape *tw_fz_packed_shape(const uint8_t *data, size_t size, size_t *M) {
    *M = 1u + (size_t)(size > 1 ? data[1] : 0u) % TW_FZ_MAX_M;
    return &tw_fz_sh[(size > 0 ? data[0] : 0) % TW_FZ_SHAPES];
}

/* Valid buffers: every shape at M = 1, 3 and 6, from the CPU gate-pack. */
static int tw_fz_packed_seed(size_t i, tw_fuzz_buf *out) {
    static const uint8_t Ms[] = {0, 2, 5};
    if (i >= TW_FZ_SHAPES * 3)
        return 0;
    uint8_t head[2] = {(uint8_t)(i / 3), Ms[i % 3]};
    size_t M;
    const tw_fz_shape *z = tw_fz_packed_shape(head, 2, &M);
    size_t w = twell_packed_words(&z->s, M);
    if (tw_gate_pack_ref(NULL, &z->s, M, z->f->x, tw_synth_pack_weight(z->f), tw_fz_words) !=
        TWELL_OK)
        return 0;
    out->n = 0;
    tw_fuzz_buf_add(out, head, 2);
    tw_fuzz_buf_add(out, tw_fz_words, w * 4u); /* little-endian hosts: the words as stored */
    return 1;
}

/* Half the inputs get the word-level corruptions of tw_packed_cases.h on top. */
static void tw_fz_packed_fixup(tw_fuzz_buf *b, uint64_t r) {
    if (r & 1)
        return;
    size_t M;
    const tw_fz_shape *z = tw_fz_packed_shape(b->p, b->n, &M);
    size_t w = twell_packed_words(&z->s, M);
    memset(tw_fz_words, 0, w * 4u);
    if (b->n > 2)
        memcpy(tw_fz_words, b->p + 2, b->n - 2 < w * 4u ? b->n - 2 : w * 4u);
    uint64_t rng = r;
    tw_pk_mutate(&rng, &z->s, M, tw_fz_words, 3);
    b->n = 2;
    tw_fuzz_buf_add(b, tw_fz_words, w * 4u);
}

static twell_status tw_fz_infer(twell_ctx *ctx, twell_plan *plan, const tw_fz_shape *z, size_t M,
                                uint16_t *y, char *msg, size_t n) {
    memset(y, 0xa5, M * z->s.K * 2u);
    twell_status st = twell_ffn_infer(plan, M, z->f->x, tw_fz_words, z->s.gated ? z->f->wg : NULL,
                                      z->f->wu, z->f->wd, y, NULL);
    snprintf(msg, n, "%s", twell_ctx_errmsg(ctx));
    return st;
}

static int tw_fz_packed_run(const uint8_t *data, size_t size) {
    size_t M;
    const tw_fz_shape *z = tw_fz_packed_shape(data, size, &M);
    const twell_shape *s = &z->s;
    size_t w = twell_packed_words(s, M);
    memset(tw_fz_words, 0, w * 4u);
    if (size > 2)
        memcpy(tw_fz_words, data + 2, size - 2 < w * 4u ? size - 2 : w * 4u);
    tw_packed_fault ff, fs;
    int full = tw_packed_find_fault(s, M, tw_fz_words, TW_PKF_ALL, &ff);
    int structural = tw_packed_find_fault(s, M, tw_fz_words, TW_PKF_STRUCTURE, &fs);
    if (structural && (!full || ff.word > fs.word))
        tw_fuzz_fail("the structural rule names word %zu, the full rule %s", fs.word,
                     full ? "a later one" : "none");
    /* the rule row by row: tw_unpack_row rejects exactly the rows with a fault */
    size_t NW = s->N / s->C;
    for (size_t m = 0; m < M; m++) {
        tw_packed_fault fr;
        int bad = tw_packed_find_fault(s, 1, tw_fz_words + m * NW, TW_PKF_ALL, &fr);
        if ((tw_unpack_row(s, tw_fz_words + m * NW, tw_fz_dense) < 0) != bad)
            tw_fuzz_fail("tw_unpack_row and the rule disagree on row %zu", m);
    }
    /* the CPU backend, off then on: rejects what the rules reject, names the word */
    char msg[512], want[256];
    twell_status off = tw_fz_infer(tw_fz_off, z->off, z, M, tw_fz_y_off, msg, sizeof msg);
    if (structural) {
        tw_packed_fault_describe(s, &fs, want, sizeof want);
        if (off != TWELL_ERR_INVALID_ARG || !strstr(msg, want))
            tw_fuzz_fail("validation off: %s (%s), expected \"%s\"", twell_status_name(off), msg,
                         want);
    } else if (off != TWELL_OK) {
        tw_fuzz_fail("validation off: %s (%s) for a structurally sound buffer",
                     twell_status_name(off), msg);
    }
    twell_status on = tw_fz_infer(tw_fz_on, z->on, z, M, tw_fz_y_on, msg, sizeof msg);
    if (full) {
        tw_packed_fault_describe(s, &ff, want, sizeof want);
        if (on != TWELL_ERR_INVALID_ARG || !strstr(msg, want))
            tw_fuzz_fail("validation on: %s (%s), expected \"%s\"", twell_status_name(on), msg,
                         want);
    } else if (on != TWELL_OK || memcmp(tw_fz_y_on, tw_fz_y_off, M * s->K * 2u) != 0) {
        tw_fuzz_fail("validation on: %s (%s) or another y for a valid buffer",
                     twell_status_name(on), msg);
    }
    return 0;
}

/* ---- the table ---- */

static const tw_fuzz_target tw_fz_render = {.name = "render",
                                            .init = tw_fz_render_init,
                                            .run = tw_fz_render_run,
                                            .seed = tw_fz_render_seed,
                                            .dict = tw_fz_lua_dict,
                                            .max_len = (size_t)256 << 10};
static const tw_fuzz_target tw_fz_cache = {.name = "cache_entry",
                                           .init = tw_fz_cache_init,
                                           .run = tw_fz_cache_run,
                                           .seed = tw_fz_cache_seed,
                                           .dict = tw_fz_cache_dict,
                                           .max_len = (size_t)64 << 10,
                                           .fixup = tw_fz_cache_fixup};
static const tw_fuzz_target tw_fz_tune = {.name = "tune_record",
                                          .run = tw_fz_tune_run,
                                          .seed = tw_fz_tune_seed,
                                          .dict = tw_fz_tune_dict,
                                          .max_len = 8192};
static const tw_fuzz_target tw_fz_model = {.name = "model_config",
                                           .init = tw_fz_json_init,
                                           .run = tw_fz_json_run,
                                           .seed = tw_fz_json_seed,
                                           .dict = tw_fz_json_dict,
                                           .max_len = (size_t)64 << 10};
static const tw_fuzz_target tw_fz_packed = {.name = "packed",
                                            .init = tw_fz_packed_init,
                                            .run = tw_fz_packed_run,
                                            .seed = tw_fz_packed_seed,
                                            .max_len = (size_t)64 << 10,
                                            .fixup = tw_fz_packed_fixup};

const tw_fuzz_target *const tw_fuzz_targets[] = {&tw_fz_render, &tw_fz_cache,  &tw_fz_tune,
                                                 &tw_fz_model,  &tw_fz_packed, NULL};

const tw_fuzz_target *tw_fuzz_find(const char *name) {
    for (size_t i = 0; tw_fuzz_targets[i]; i++)
        if (!strcmp(tw_fuzz_targets[i]->name, name))
            return tw_fuzz_targets[i];
    return NULL;
}
