/* test_fuzz.c — the seeded random driver of the fuzz targets (tests/fuzz/tw_fuzz.h): for each
 * target, every seed as it is, then mutated seeds (bit flips, interesting bytes and integers,
 * inserted, deleted, repeated and spliced ranges, dictionary tokens, the target's fixup) until
 * its time is up. Input i of a run is a pure function of (target, seed, i), so a failure names
 * the one command that reproduces it.
 *
 *   test_fuzz                              every target, TWELL_FUZZ_SECONDS (default 1.5) each,
 *                                          seed TWELL_FUZZ_SEED (default 1): what make test runs
 *   test_fuzz --target render --seconds 600 --seed 7     a longer run of one target
 *   test_fuzz --target render --seed 7 --iter 1234 [--dump in.bin]   reproduce one input
 *   test_fuzz --target packed --replay in.bin            run a saved input (e.g. libFuzzer's)
 *   test_fuzz --write-corpus DIR           the seeds as DIR/<target>/seed-<i>, for libFuzzer
 * labels: unit */
#include "tw_fuzz.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static double tf_seconds = 1.5;
static uint64_t tf_seed = 1;

/* ---- inputs ---- */

static uint64_t tf_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t tf_next(uint64_t *s) { return tf_mix(*s += 0x9e3779b97f4a7c15ull); }

static uint64_t tf_hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* A target's seeds, loaded once. */
typedef struct {
    const tw_fuzz_target *t;
    tw_fuzz_buf *seeds;
    size_t n;
} tf_corpus;

static void tf_load(const tw_fuzz_target *t, tf_corpus *c) {
    memset(c, 0, sizeof *c);
    c->t = t;
    if (t->init && t->init() != 0)
        fail_msg("fuzz %s: init failed", t->name);
    for (;;) {
        tw_fuzz_buf b = {0};
        if (!t->seed(c->n, &b)) {
            tw_fuzz_buf_free(&b);
            break;
        }
        tw_fuzz_buf *grown = realloc(c->seeds, (c->n + 1) * sizeof *grown);
        assert_non_null(grown);
        c->seeds = grown;
        c->seeds[c->n++] = b;
    }
    if (c->n == 0)
        fail_msg("fuzz %s: no seeds", t->name);
}

static void tf_unload(tf_corpus *c) {
    for (size_t i = 0; i < c->n; i++)
        tw_fuzz_buf_free(&c->seeds[i]);
    free(c->seeds);
}

static const uint8_t tf_bytes[] = {0x00, 0x01, 0x7f, 0x80, 0xff, '\n', '"', '}', ']', '\\', ' '};
static const uint32_t tf_ints[] = {0u,          1u,          2u,          31u,        32u,
                                   64u,         127u,        128u,        255u,       256u,
                                   257u,        0x7fffu,     0x8000u,     0xffffu,    0x10000u,
                                   0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu};

/* Replaces b[at, at + del) with n bytes of p. */
static void tf_splice(tw_fuzz_buf *b, size_t at, size_t del, const uint8_t *p, size_t n) {
    tw_fuzz_buf out = {0};
    tw_fuzz_buf_add(&out, b->p, at);
    tw_fuzz_buf_add(&out, p, n);
    tw_fuzz_buf_add(&out, b->p + at + del, b->n - at - del);
    tw_fuzz_buf_free(b);
    *b = out;
}

/* Input `iter` of target c under seed: seeds as they are first, then mutated ones. */
static void tf_input(const tf_corpus *c, uint64_t seed, uint64_t iter, tw_fuzz_buf *out) {
    out->n = 0;
    if (iter < c->n) {
        tw_fuzz_buf_add(out, c->seeds[iter].p, c->seeds[iter].n);
        return;
    }
    uint64_t st = tf_mix(seed ^ tf_hash_name(c->t->name)) ^ tf_mix(iter + 0x5bd1e995u);
    const tw_fuzz_buf *base = &c->seeds[tf_next(&st) % c->n];
    tw_fuzz_buf_add(out, base->p, base->n);
    size_t ndict = 0;
    while (c->t->dict && c->t->dict[ndict])
        ndict++;
    unsigned edits = 1u + (unsigned)(tf_next(&st) % 8u);
    for (unsigned e = 0; e < edits; e++) {
        uint64_t r = tf_next(&st);
        size_t n = out->n, at = n ? (size_t)(tf_next(&st) % n) : 0;
        size_t len = n - at ? 1u + (size_t)(tf_next(&st) % (n - at < 64 ? n - at : 64)) : 0;
        switch (r % 12) {
        case 0: /* flip a bit */
            if (n)
                out->p[at] ^= (uint8_t)(1u << ((r >> 8) & 7u));
            break;
        case 1: /* a random byte */
            if (n)
                out->p[at] = (uint8_t)(r >> 8);
            break;
        case 2: /* an interesting byte */
            if (n)
                out->p[at] = tf_bytes[(r >> 8) % sizeof tf_bytes];
            break;
        case 3: { /* insert random bytes */
            uint8_t tmp[16];
            size_t k = 1u + (size_t)((r >> 8) % 16u);
            for (size_t i = 0; i < k; i++)
                tmp[i] = (uint8_t)tf_next(&st);
            tf_splice(out, at, 0, tmp, k);
            break;
        }
        case 4: /* delete a range */
            tf_splice(out, at, len, NULL, 0);
            break;
        case 5: { /* repeat a range */
            uint8_t tmp[64];
            memcpy(tmp, out->p + at, len);
            tf_splice(out, at, 0, tmp, len);
            break;
        }
        case 6: /* insert a token */
        case 7: /* overwrite with a token */
            if (ndict) {
                const char *tok = c->t->dict[(r >> 8) % ndict];
                size_t tl = strlen(tok) ? strlen(tok) : 1; /* a "" token is one NUL */
                tf_splice(out, at, (r % 12 == 7 && tl <= n - at) ? tl : 0, (const uint8_t *)tok,
                          tl);
            }
            break;
        case 8: { /* a range of another seed */
            const tw_fuzz_buf *o = &c->seeds[(r >> 8) % c->n];
            if (o->n) {
                size_t from = (size_t)(tf_next(&st) % o->n);
                size_t k = 1u + (size_t)(tf_next(&st) % (o->n - from < 256 ? o->n - from : 256));
                tf_splice(out, at, (r >> 40) & 1 ? len : 0, o->p + from, k);
            }
            break;
        }
        case 9: /* an interesting 32-bit little-endian integer */
            if (n >= 4) {
                uint32_t v = tf_ints[(r >> 8) % (sizeof tf_ints / sizeof tf_ints[0])];
                size_t o = at <= n - 4 ? at : n - 4;
                for (int k = 0; k < 4; k++)
                    out->p[o + (size_t)k] = (uint8_t)(v >> (8 * k));
            }
            break;
        case 10: /* truncate */
            out->n = at;
            tw_fuzz_buf_add(out, NULL, 0);
            break;
        default: { /* swap two ranges' first bytes */
            size_t b2 = n ? (size_t)((r >> 8) % n) : 0;
            if (n) {
                uint8_t t = out->p[at];
                out->p[at] = out->p[b2];
                out->p[b2] = t;
            }
            break;
        }
        }
        if (out->n > c->t->max_len) {
            out->n = c->t->max_len;
            tw_fuzz_buf_add(out, NULL, 0);
        }
    }
    if (c->t->fixup)
        c->t->fixup(out, tf_next(&st));
}

/* ---- crash reports ---- */

static char tf_how[256];

/* Async-signal-safe: says which input was running, then dies of the signal as before. */
static void tf_on_signal(int sig) {
    static const char head[] = "\nfuzz: crashed on input: ";
    ssize_t w = write(2, head, sizeof head - 1);
    w = write(2, tf_how, strlen(tf_how));
    w = write(2, "\n", 1);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* AddressSanitizer's reports end through this callback (its own handlers catch the signals). */
extern void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));
static void tf_on_death(void) { tf_on_signal(0); }

static void tf_catch_crashes(void) {
    if (__sanitizer_set_death_callback) {
        __sanitizer_set_death_callback(tf_on_death);
        return;
    }
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], tf_on_signal);
}

/* ---- runs ---- */

static void tf_describe(const tw_fuzz_target *t, uint64_t seed, uint64_t iter) {
    snprintf(tf_how, sizeof tf_how, "test_fuzz --target %s --seed %llu --iter %llu", t->name,
             (unsigned long long)seed, (unsigned long long)iter);
    tw_fuzz_context(t->name, tf_how);
}

static double tf_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seeds, then mutated inputs until the time is up (every seed runs even past it). */
static void tf_fuzz(const tw_fuzz_target *t) {
    tf_corpus c;
    tf_load(t, &c);
    tf_catch_crashes();
    tw_fuzz_buf in = {0};
    double t0 = tf_now();
    uint64_t iter = 0;
    for (; iter < c.n || tf_now() - t0 < tf_seconds; iter++) {
        tf_input(&c, tf_seed, iter, &in);
        tf_describe(t, tf_seed, iter);
        t->run(in.p, in.n);
    }
    printf("# fuzz %s: %llu inputs (%zu seeds) in %.1f s, seed %llu\n", t->name,
           (unsigned long long)iter, c.n, tf_now() - t0, (unsigned long long)tf_seed);
    tw_fuzz_buf_free(&in);
    tf_unload(&c);
}

static void test_fuzz_target(void **state) { tf_fuzz((const tw_fuzz_target *)*state); }

/* One generated input (and, with dump, its bytes into a file), or a saved one. */
static int tf_one(const tw_fuzz_target *t, long long iter, const char *replay, const char *dump) {
    tf_corpus c;
    tf_load(t, &c);
    tf_catch_crashes();
    tw_fuzz_buf in = {0};
    if (replay) {
        FILE *f = fopen(replay, "rb");
        if (!f) {
            fprintf(stderr, "test_fuzz: %s: %s\n", replay, strerror(errno));
            return 2;
        }
        uint8_t chunk[4096];
        size_t got;
        while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
            tw_fuzz_buf_add(&in, chunk, got);
        fclose(f);
        snprintf(tf_how, sizeof tf_how, "test_fuzz --target %s --replay %s", t->name, replay);
        tw_fuzz_context(t->name, tf_how);
    } else {
        tf_input(&c, tf_seed, (uint64_t)iter, &in);
        tf_describe(t, tf_seed, (uint64_t)iter);
    }
    if (dump) {
        FILE *f = fopen(dump, "wb");
        if (!f || fwrite(in.p, 1, in.n, f) != in.n || fclose(f) != 0) {
            fprintf(stderr, "test_fuzz: cannot write %s\n", dump);
            return 2;
        }
    }
    t->run(in.p, in.n);
    printf("fuzz %s: %zu bytes, every property holds\n", t->name, in.n);
    tw_fuzz_buf_free(&in);
    tf_unload(&c);
    return 0;
}

static int tf_write_corpus(const char *dir) {
    mkdir(dir, 0777);
    for (size_t i = 0; tw_fuzz_targets[i]; i++) {
        const tw_fuzz_target *t = tw_fuzz_targets[i];
        tf_corpus c;
        tf_load(t, &c);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, t->name);
        mkdir(path, 0777);
        for (size_t k = 0; k < c.n; k++) {
            snprintf(path, sizeof path, "%s/%s/seed-%zu", dir, t->name, k);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(c.seeds[k].p, 1, c.seeds[k].n, f) != c.seeds[k].n || fclose(f)) {
                fprintf(stderr, "test_fuzz: cannot write %s\n", path);
                return 2;
            }
        }
        printf("%s/%s: %zu seeds\n", dir, t->name, c.n);
        tf_unload(&c);
    }
    return 0;
}

static int tf_usage(void) {
    fprintf(stderr, "usage: test_fuzz [--target NAME] [--seconds S] [--seed N] [--iter I "
                    "[--dump FILE]] [--replay FILE] [--write-corpus DIR]\ntargets:");
    for (size_t i = 0; tw_fuzz_targets[i]; i++)
        fprintf(stderr, " %s", tw_fuzz_targets[i]->name);
    fprintf(stderr, "\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *env = getenv("TWELL_FUZZ_SECONDS");
    if (env && *env)
        tf_seconds = strtod(env, NULL);
    env = getenv("TWELL_FUZZ_SEED");
    if (env && *env)
        tf_seed = strtoull(env, NULL, 10);
    const char *target = NULL, *replay = NULL, *dump = NULL, *corpus = NULL;
    long long iter = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return tf_usage();
        if (!strcmp(a, "--target"))
            target = v;
        else if (!strcmp(a, "--seconds"))
            tf_seconds = strtod(v, NULL);
        else if (!strcmp(a, "--seed"))
            tf_seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--iter"))
            iter = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--replay"))
            replay = v;
        else if (!strcmp(a, "--dump"))
            dump = v;
        else if (!strcmp(a, "--write-corpus"))
            corpus = v;
        else
            return tf_usage();
        i++;
    }
    if (corpus)
        return tf_write_corpus(corpus);
    const tw_fuzz_target *one = target ? tw_fuzz_find(target) : NULL;
    if (target && !one)
        return tf_usage();
    if (iter >= 0 || replay) {
        if (!one)
            return tf_usage();
        return tf_one(one, iter, replay, dump);
    }
    enum { TF_MAX = 16 };
    struct CMUnitTest tests[TF_MAX];
    static char names[TF_MAX][64];
    size_t n = 0;
    for (size_t i = 0; tw_fuzz_targets[i] && n < TF_MAX; i++) {
        if (one && tw_fuzz_targets[i] != one)
            continue;
        snprintf(names[n], sizeof names[n], "test_fuzz_%s", tw_fuzz_targets[i]->name);
        struct CMUnitTest t = {names[n], test_fuzz_target, NULL, NULL,
                               (void *)(uintptr_t)tw_fuzz_targets[i]};
        tests[n++] = t;
    }
    return _cmocka_run_group_tests("test_fuzz", tests, n, NULL, NULL);
}
