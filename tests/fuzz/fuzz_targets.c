/*
 * fuzz_targets.c — the fuzz targets' table (tw_fuzz.h) and what they share: the reporter, byte
 * buffers, files and temp directories. The targets: fuzz_render.c (template rendering),
 * fuzz_formats.c (cache entries, tuning records, model configs), fuzz_packed.c (packed input
 * validation), each with the properties it checks.
 */
#include "tw_fuzz_int.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

void tw_fz_str(tw_fuzz_buf *b, const char *s) { tw_fuzz_buf_add(b, s, strlen(s)); }

int tw_fz_read(const char *path, tw_fuzz_buf *b) {
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

int tw_fz_write(const char *path, const void *p, size_t n) {
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

int tw_fz_tmpdir(const char *what, char *out, size_t n) {
    const char *base = getenv("TMPDIR");
    snprintf(out, n, "%s/twell-fuzz-%s-XXXXXX", base && *base ? base : "/tmp", what);
    if (!mkdtemp(out) || tw_fz_ndirs == (int)(sizeof tw_fz_dirs / sizeof tw_fz_dirs[0]))
        return -1;
    if (tw_fz_ndirs == 0)
        atexit(tw_fz_cleanup);
    tw_fz_dirs[tw_fz_ndirs++] = out;
    return 0;
}

void tw_fz_list(const char *dir, const char *suffix, const char *not_suffix, char **names,
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

double tw_fz_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the table ---- */

const tw_fuzz_target *const tw_fuzz_targets[] = {&tw_fz_render, &tw_fz_cache,  &tw_fz_tune,
                                                 &tw_fz_model,  &tw_fz_packed, NULL};

const tw_fuzz_target *tw_fuzz_find(const char *name) {
    for (size_t i = 0; tw_fuzz_targets[i]; i++)
        if (!strcmp(tw_fuzz_targets[i]->name, name))
            return tw_fuzz_targets[i];
    return NULL;
}
