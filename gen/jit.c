/*
 * jit.c — the pipeline behind tw_jit_cubin: render → key → cache lookup → NVRTC compile (no lock
 * held) → publish. The key covers everything that can change the cubin.
 */
#include "jit.h"

#include "cache.h"
#include "internal.h"
#include "nvrtc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Options for every kernel. No --use_fast_math: results must match the CPU reference bit for bit
 * where the kernels promise it. */
static const char *const tw_jit_base_opts[] = {"-default-device", "-std=c++17"};
#define TW_JIT_NOPTS (1 + sizeof tw_jit_base_opts / sizeof tw_jit_base_opts[0])

static double tw_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* "sm_" + 2 or 3 digits + an optional architecture-specific suffix (a or f): a real
 * architecture, so NVRTC produces SASS rather than PTX only. */
static int tw_arch_ok(const char *a) {
    if (!a || strncmp(a, "sm_", 3) != 0)
        return 0;
    size_t d = 0;
    while (a[3 + d] >= '0' && a[3 + d] <= '9')
        d++;
    const char *rest = a + 3 + d;
    return (d == 2 || d == 3) &&
           (rest[0] == '\0' || ((rest[0] == 'a' || rest[0] == 'f') && rest[1] == '\0'));
}

static int tw_is_elf(const void *p, size_t n) {
    return n >= 52 && memcmp(p,
                             "\x7f"
                             "ELF",
                             4) == 0;
}

/* Starts a key: the record's tag, then the cache format version. */
static void tw_jit_hash_begin(tw_hash *h, const char *tag) {
    char buf[64];
    tw_hash_init(h);
    tw_hash_str(h, tag);
    snprintf(buf, sizeof buf, "format %u", (unsigned)TW_CACHE_FORMAT_VERSION);
    tw_hash_str(h, buf);
}

/* The cache key: every input that can change the cubin, each as a length-prefixed field. */
static void tw_jit_key(const char *name, const char *src, size_t len, int nv_major, int nv_minor,
                       const char *const *opts, size_t nopts, tw_key *key) {
    tw_hash h;
    char buf[64];
    tw_jit_hash_begin(&h, "twellrt cubin");
    tw_hash_str(&h, name);
    snprintf(buf, sizeof buf, "nvrtc %d.%d", nv_major, nv_minor);
    tw_hash_str(&h, buf);
    snprintf(buf, sizeof buf, "%zu options", nopts);
    tw_hash_str(&h, buf);
    for (size_t i = 0; i < nopts; i++)
        tw_hash_str(&h, opts[i]);
    tw_hash_field(&h, src, len);
    tw_hash_final(&h, key);
}

/* ---- NVRTC versions recorded in the cache ----
 * Every process that publishes a cubin records its NVRTC version in a TW_CACHE_META entry (newest
 * first, at most TW_JIT_MAX_VERSIONS). A process that cannot load NVRTC (a production machine
 * without the toolkit, its cache prewarmed by `twell tune`) looks its kernels up under those
 * versions instead of failing: it uses what was compiled and compiles nothing. Where NVRTC loads,
 * only its own version is used, so a toolkit upgrade still rebuilds every kernel. */
enum { TW_JIT_MAX_VERSIONS = 8 };

static void tw_jit_versions_key(tw_key *key) {
    tw_hash h;
    tw_jit_hash_begin(&h, "twellrt nvrtc versions");
    tw_hash_final(&h, key);
}

/* Reads "major.minor\n" lines (the entry is untrusted: anything malformed ends the list). */
static int tw_jit_versions_read(tw_cache *cache, int v[][2], int max) {
    tw_key key;
    tw_jit_versions_key(&key);
    void *payload = NULL;
    size_t n = 0;
    if (tw_cache_get(cache, TW_CACHE_META, &key, &payload, &n) != TWELL_OK)
        return 0;
    char text[256];
    size_t len = n < sizeof text - 1 ? n : sizeof text - 1;
    memcpy(text, payload, len);
    text[len] = '\0';
    free(payload);
    int count = 0;
    const char *p = text;
    while (count < max && *p) {
        char *end;
        long a = strtol(p, &end, 10);
        if (end == p || *end != '.' || a < 1 || a > 999)
            break;
        p = end + 1;
        long b = strtol(p, &end, 10);
        if (end == p || *end != '\n' || b < 0 || b > 999)
            break;
        p = end + 1;
        v[count][0] = (int)a;
        v[count][1] = (int)b;
        count++;
    }
    return count;
}

/* Puts (major, minor) first in the recorded list; a failure only costs NVRTC-less hits later. */
static void tw_jit_versions_note(twell_ctx *ctx, tw_cache *cache, int major, int minor) {
    int v[TW_JIT_MAX_VERSIONS][2];
    int n = tw_jit_versions_read(cache, v, TW_JIT_MAX_VERSIONS);
    if (n > 0 && v[0][0] == major && v[0][1] == minor)
        return;
    char text[TW_JIT_MAX_VERSIONS * 12];
    int len = snprintf(text, sizeof text, "%d.%d\n", major, minor);
    for (int i = 0, kept = 1; i < n && kept < TW_JIT_MAX_VERSIONS; i++) {
        if (v[i][0] == major && v[i][1] == minor)
            continue;
        len += snprintf(text + len, sizeof text - (size_t)len, "%d.%d\n", v[i][0], v[i][1]);
        kept++;
    }
    tw_key key;
    tw_jit_versions_key(&key);
    if (tw_cache_put(cache, TW_CACHE_META, &key, text, (size_t)len) != TWELL_OK)
        tw_log(ctx, TWELL_LOG_DEBUG, "twell: NVRTC version %d.%d not recorded in the cache", major,
               minor);
}

/* A cached cubin under key; 1 on a hit (out filled), 0 on a miss, -1 when out of memory. */
static int tw_jit_lookup(tw_cache *cache, const tw_key *key, tw_cubin *out) {
    void *img = NULL;
    size_t n = 0;
    twell_status st = tw_cache_get(cache, TW_CACHE_CUBIN, key, &img, &n);
    if (st == TWELL_OK && tw_is_elf(img, n)) {
        out->data = img;
        out->size = n;
        out->cache_hit = 1;
        return 1;
    }
    free(img); /* a valid entry that is not a cubin is treated like a corrupt one: rebuilt */
    return st == TWELL_ERR_NO_MEMORY ? -1 : 0;
}

/* NVRTC cannot be loaded: the kernel may still be in the cache under a recorded version. */
static twell_status tw_jit_without_nvrtc(twell_ctx *ctx, tw_cache *cache, const char *why,
                                         const char *name, const char *src, size_t len,
                                         const char *arch, const char *const *opts, tw_cubin *out) {
    int v[TW_JIT_MAX_VERSIONS][2];
    int n = tw_jit_versions_read(cache, v, TW_JIT_MAX_VERSIONS);
    for (int i = 0; i < n; i++) {
        tw_key key;
        tw_jit_key(name, src, len, v[i][0], v[i][1], opts, TW_JIT_NOPTS, &key);
        int hit = tw_jit_lookup(cache, &key, out);
        if (hit < 0)
            return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tw_cache_get: out of memory");
        if (hit) {
            tw_key_hex(&key, out->key_hex);
            tw_log(ctx, TWELL_LOG_INFO,
                   "twell: NVRTC not available; kernel %s (%s) taken from the cache, compiled by "
                   "NVRTC %d.%d",
                   name, arch, v[i][0], v[i][1]);
            tw_clear_error(ctx);
            return TWELL_OK;
        }
    }
    const char *dir = tw_cache_dir(cache);
    return tw_error(ctx, TWELL_ERR_NOT_FOUND,
                    "%s; kernel %s for %s is not in the cache%s%s either (looked under %d "
                    "recorded NVRTC version%s): install NVRTC, or prewarm the cache with `twell "
                    "tune` where NVRTC is installed",
                    why, name, arch, dir ? " " : " (memory only)", dir ? dir : "", n,
                    n == 1 ? "" : "s");
}

twell_status tw_jit_cubin_ex(twell_ctx *ctx, const char *name, const tw_param *params,
                             size_t nparams, const char *arch, unsigned flags, tw_cubin *out) {
    if (!out)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "tw_jit_cubin: out is NULL");
    memset(out, 0, sizeof *out);
    if (!ctx)
        return TWELL_ERR_INVALID_ARG;
    if (!tw_arch_ok(arch))
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "tw_jit_cubin: arch '%s' is not a real architecture like sm_90a or sm_80",
                        arch ? arch : "(null)");
    char *src = NULL;
    size_t len = 0;
    twell_status st = tw_render(ctx, name, params, nparams, &src, &len);
    if (st != TWELL_OK)
        return st;
    char arch_opt[48];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
    const char *opts[TW_JIT_NOPTS];
    opts[0] = arch_opt;
    for (size_t i = 1; i < TW_JIT_NOPTS; i++)
        opts[i] = tw_jit_base_opts[i - 1];

    int major = 0, minor = 0;
    twell_status vst = tw_nvrtc_version(ctx, &major, &minor);
    if (vst != TWELL_OK && vst != TWELL_ERR_NOT_FOUND) {
        free(src);
        return vst;
    }
    char why[768]; /* NVRTC's loading error, kept across the cache calls */
    snprintf(why, sizeof why, "%s", vst == TWELL_OK ? "" : tw_errmsg(ctx));
    tw_cache *cache = NULL;
    st = tw_ctx_cache(ctx, &cache);
    if (st != TWELL_OK) {
        free(src);
        return st;
    }
    if (vst == TWELL_ERR_NOT_FOUND) {
        st = (flags & TW_JIT_SKIP_LOOKUP) /* a forced compile needs NVRTC */
                 ? tw_error(ctx, TWELL_ERR_NOT_FOUND, "%s", why)
                 : tw_jit_without_nvrtc(ctx, cache, why, name, src, len, arch, opts, out);
        free(src);
        return st;
    }

    tw_key key;
    tw_jit_key(name, src, len, major, minor, opts, TW_JIT_NOPTS, &key);
    tw_key_hex(&key, out->key_hex);
    if (!(flags & TW_JIT_SKIP_LOOKUP)) {
        int hit = tw_jit_lookup(cache, &key, out);
        if (hit != 0)
            free(src);
        if (hit > 0) {
            tw_clear_error(ctx);
            return TWELL_OK;
        }
        if (hit < 0)
            return tw_error(ctx, TWELL_ERR_NO_MEMORY, "tw_cache_get: out of memory");
    }

    char prog[96];
    snprintf(prog, sizeof prog, "%s.cu", name);
    void *img = NULL;
    size_t n = 0;
    double t0 = tw_now_ms();
    st = tw_nvrtc_compile(ctx, src, prog, opts, (int)TW_JIT_NOPTS, &img, &n, NULL);
    double ms = tw_now_ms() - t0;
    free(src);
    if (st != TWELL_OK)
        return st;
    twell_status pst = tw_cache_put(cache, TW_CACHE_CUBIN, &key, img, n);
    if (pst != TWELL_OK) /* the kernel is still good; only reuse is lost */
        tw_log(ctx, TWELL_LOG_WARN, "twell: kernel %s not cached: %s", name, twell_status_str(pst));
    else
        tw_jit_versions_note(ctx, cache, major, minor);
    out->data = img;
    out->size = n;
    out->compile_ms = ms;
    tw_clear_error(ctx);
    return TWELL_OK;
}

twell_status tw_jit_cubin(twell_ctx *ctx, const char *name, const tw_param *params, size_t nparams,
                          const char *arch, tw_cubin *out) {
    return tw_jit_cubin_ex(ctx, name, params, nparams, arch, 0, out);
}

void tw_cubin_free(tw_cubin *c) {
    if (!c)
        return;
    free(c->data);
    memset(c, 0, sizeof *c);
}

twell_status tw_jit_cubin_detached(const twell_ctx *parent, const char *name,
                                   const tw_param *params, size_t nparams, const char *arch,
                                   tw_cubin *out, char *err, size_t errlen) {
    /* The parent's options (their strings are the parent's resolved copies), on the CPU backend
     * with no log: the log callback belongs to the parent's thread. The worker needs no pool and
     * no device, only its options, its cache (opened by the first lookup) and its message. */
    twell_ctx_options o = parent->opts;
    o.backend = TWELL_BACKEND_CPU;
    o.device = 0;
    o.cpu_threads = 1;
    o.log = NULL;
    o.log_user = NULL;
    twell_ctx w;
    memset(&w, 0, sizeof w);
    twell_status st = tw_ctx_init(&w, &o);
    if (st != TWELL_OK) {
        if (err)
            snprintf(err, errlen, "cannot create a compile context");
    } else {
        st = tw_jit_cubin(&w, name, params, nparams, arch, out);
        if (st != TWELL_OK && err)
            snprintf(err, errlen, "%s", tw_errmsg(&w));
    }
    tw_cache_close(w.cache);
    tw_ctx_fini(&w);
    return st;
}

const char *tw_dtype_param(twell_dtype dt) { return dt == TWELL_DTYPE_BF16 ? "bf16" : "fp16"; }

size_t tw_shape_params(const twell_shape *s, tw_param out[TW_SHAPE_NPARAMS]) {
    out[0] = (tw_param){"K", NULL, (long long)s->K};
    out[1] = (tw_param){"N", NULL, (long long)s->N};
    out[2] = (tw_param){"T", NULL, (long long)s->T};
    out[3] = (tw_param){"C", NULL, (long long)s->C};
    out[4] = (tw_param){"dtype", tw_dtype_param(s->dtype), 0};
    return TW_SHAPE_NPARAMS;
}
