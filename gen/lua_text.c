/* lua_text.c — template sources, the rendered output and messages, without Lua (see
 * lua_text.h). */
#include "lua_text.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- output with #line mapping ---- */

static tw_out_status tw_out_raw(tw_out *o, const char *s, size_t n) {
    if (o->len + n + 1 > o->max)
        return TW_OUT_FULL;
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n + 1)
            cap *= 2;
        if (cap > o->max)
            cap = o->max;
        char *b = realloc(o->buf, cap);
        if (!b)
            return TW_OUT_NO_MEMORY;
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
    return TW_OUT_OK;
}

tw_out_status tw_out_text(tw_out *o, const char *s, size_t n, const char *file, long *line,
                          tw_map map) {
    tw_out_status r;
    size_t i = 0;
    while (i < n) {
        if (o->bol && map != TW_MAP_NONE && file) {
            if (!o->cfile || strcmp(o->cfile, file) != 0 || o->cline != *line) {
                char d[300];
                int k = snprintf(d, sizeof d, "#line %ld \"%s\"\n", *line, file);
                if ((r = tw_out_raw(o, d, (size_t)k)) != TW_OUT_OK)
                    return r;
                o->cfile = file;
                o->cline = *line;
            }
            if (map == TW_MAP_FIRST)
                map = TW_MAP_NONE;
        }
        const char *nl = memchr(s + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - s) + 1 : n;
        if ((r = tw_out_raw(o, s + i, end - i)) != TW_OUT_OK)
            return r;
        o->bol = nl != NULL;
        if (nl) {
            o->cline++;
            if (map == TW_MAP_BLOCK)
                (*line)++;
        }
        i = end;
    }
    return TW_OUT_OK;
}

/* ---- template sources ---- */

const char *const tw_template_groups[] = {"common", "gate_pack", "ffn", "train", "gemm", NULL};

int tw_template_locate(const char *dir, const char *name, const char *suffix, char *path,
                       size_t path_cap, char *display, size_t display_cap) {
    struct stat st;
    for (int g = 0; tw_template_groups[g]; g++) {
        snprintf(path, path_cap, "%s/%s/%s%s", dir, tw_template_groups[g], name, suffix);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            snprintf(display, display_cap, "templates/%s/%s%s", tw_template_groups[g], name,
                     suffix);
            return 1;
        }
    }
    /* a flat directory (an older install, or a caller's own templates) still works */
    snprintf(path, path_cap, "%s/%s%s", dir, name, suffix);
    snprintf(display, display_cap, "templates/%s%s", name, suffix);
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
        return 1;
    errno = ENOENT;
    return 0;
}

tw_source *tw_source_read(tw_source *src, int *nsrc, const char *path, const char *display) {
    if (*nsrc >= TW_MAX_SOURCES) {
        errno = EMFILE;
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    tw_source *s = &src[*nsrc];
    size_t cap = 8192, len = 0;
    char *text = malloc(cap);
    for (;;) {
        if (!text)
            break;
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (len + 1 < cap)
            break;
        char *t = realloc(text, cap * 2);
        if (!t) {
            free(text);
            text = NULL;
            break;
        }
        text = t;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    size_t dlen = strlen(display);
    char *chunk = malloc(dlen + 2);
    if (!text || !chunk || bad) {
        free(text);
        free(chunk);
        errno = bad ? EIO : ENOMEM;
        return NULL;
    }
    text[len] = '\0';
    chunk[0] = '@';
    memcpy(chunk + 1, display, dlen + 1);
    s->chunk = chunk;
    s->text = text;
    s->len = len;
    (*nsrc)++;
    return s;
}

int tw_source_valid_name(const char *s) {
    if (!s[0] || strlen(s) > 100)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return 0;
    return 1;
}

long tw_source_block_line(const tw_source *src, int nsrc, const char *chunk, long line) {
    const tw_source *s = NULL;
    for (int i = 0; i < nsrc; i++)
        if (src[i].chunk == chunk)
            s = &src[i];
    if (!s || line <= 0)
        return line;
    const char *p = s->text, *end = s->text + s->len;
    for (long l = 1; l < line && p < end; p++)
        if (*p == '\n')
            l++;
    for (long l = line; l < line + 3 && p < end; l++) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        for (const char *q = p; q < eol; q++) {
            if (*q != '[')
                continue;
            const char *r = q + 1;
            while (r < eol && *r == '=')
                r++;
            if (r < eol && *r == '[')
                return r + 1 == eol ? l + 1 : l;
        }
        p = eol + 1;
    }
    return line;
}

/* ---- messages ---- */

char *tw_fmt(const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s)
        vsnprintf(s, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return s;
}
