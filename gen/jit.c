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

/* The cache key: every input that can change the cubin, each as a length-prefixed field. */
static void tw_jit_key(const char *name, const char *src, size_t len, int nv_major, int nv_minor,
                       const char *const *opts, size_t nopts, tw_key *key) {
    tw_hash h;
    char buf[64];
    tw_hash_init(&h);
    tw_hash_str(&h, "twellrt cubin");
    snprintf(buf, sizeof buf, "format %u", (unsigned)TW_CACHE_FORMAT_VERSION);
    tw_hash_str(&h, buf);
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
    int major = 0, minor = 0;
    st = tw_nvrtc_version(ctx, &major, &minor);
    if (st != TWELL_OK) {
        free(src);
        return st;
    }
    char arch_opt[48];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
    const char *opts[TW_JIT_NOPTS];
    opts[0] = arch_opt;
    for (size_t i = 1; i < TW_JIT_NOPTS; i++)
        opts[i] = tw_jit_base_opts[i - 1];

    tw_key key;
    tw_jit_key(name, src, len, major, minor, opts, TW_JIT_NOPTS, &key);
    tw_key_hex(&key, out->key_hex);

    tw_cache *cache = NULL;
    st = tw_ctx_cache(ctx, &cache);
    if (st != TWELL_OK) {
        free(src);
        return st;
    }
    if (!(flags & TW_JIT_SKIP_LOOKUP)) {
        void *img = NULL;
        size_t n = 0;
        st = tw_cache_get(cache, TW_CACHE_CUBIN, &key, &img, &n);
        if (st == TWELL_OK && tw_is_elf(img, n)) {
            free(src);
            out->data = img;
            out->size = n;
            out->cache_hit = 1;
            tw_clear_error(ctx);
            return TWELL_OK;
        }
        free(img); /* a valid entry that is not a cubin is treated like a corrupt one: rebuilt */
        if (st == TWELL_ERR_NO_MEMORY) {
            free(src);
            return tw_error(ctx, st, "tw_cache_get: out of memory");
        }
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
