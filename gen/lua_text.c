/* lua_text.c — template sources, the rendered output and messages, without Lua (see
 * lua_text.h). */
#include "lua_text.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

static void tw_locate_display(int g, int ngroups, const char *name, const char *suffix,
                              char *display, size_t display_cap) {
    if (g < ngroups)
        snprintf(display, display_cap, "templates/%s/%s%s", tw_template_groups[g], name, suffix);
    else
        snprintf(display, display_cap, "templates/%s%s", name, suffix);
}

int tw_template_locate(const char *dir, const char *name, const char *suffix, char *path,
                       size_t path_cap, char *display, size_t display_cap) {
    struct stat st;
    int other = -1; /* first group holding a non-regular entry; tw_template_groups' count: flat */
    int ngroups = 0;
    while (tw_template_groups[ngroups])
        ngroups++;
    for (int g = 0; g <= ngroups; g++) {
        /* g == ngroups: a flat directory (an older install, or a caller's own templates) */
        if (g < ngroups)
            snprintf(path, path_cap, "%s/%s/%s%s", dir, tw_template_groups[g], name, suffix);
        else
            snprintf(path, path_cap, "%s/%s%s", dir, name, suffix);
        if (lstat(path, &st) != 0)
            continue;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            tw_locate_display(g, ngroups, name, suffix, display, display_cap);
            return 1;
        }
        if (other < 0)
            other = g;
    }
    int g = other < 0 ? ngroups : other;
    if (g < ngroups)
        snprintf(path, path_cap, "%s/%s/%s%s", dir, tw_template_groups[g], name, suffix);
    else
        snprintf(path, path_cap, "%s/%s%s", dir, name, suffix);
    tw_locate_display(g, ngroups, name, suffix, display, display_cap);
    if (other >= 0)
        return -1;
    errno = ENOENT;
    return 0;
}

tw_source *tw_source_read(tw_source *src, int *nsrc, const char *path, const char *display,
                          const char **why) {
    *why = NULL;
    if (*nsrc >= TW_MAX_SOURCES) {
        errno = EMFILE;
        *why = "too many imported modules";
        return NULL;
    }
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; the
     * type is then checked on the open descriptor, so a swap after tw_template_locate's stat
     * cannot slip a FIFO or device through. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        *why = strerror(errno);
        return NULL;
    }
    struct stat st;
    const char *bad = NULL;
    int en = 0;
    if (fstat(fd, &st) != 0) {
        en = errno;
        bad = strerror(en);
    } else if (!S_ISREG(st.st_mode)) {
        en = EINVAL;
        bad = "not a regular file (a FIFO, device or directory)";
    } else if (st.st_size > (off_t)TW_SOURCE_MAX_BYTES) {
        en = EFBIG;
        bad = "larger than the " TW_SOURCE_MAX_TEXT " cap for a template source";
    }
    if (bad) {
        close(fd);
        errno = en;
        *why = bad;
        return NULL;
    }
    /* One byte more than the cap is asked for, so a file that grew after fstat is caught. */
    size_t cap = (size_t)st.st_size + 1, len = 0;
    char *text = malloc(cap + 1);
    en = text ? 0 : ENOMEM;
    while (text && len < cap) {
        ssize_t got = read(fd, text + len, cap - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            en = errno;
            break;
        }
        if (got == 0)
            break;
        len += (size_t)got;
        if (len == cap && cap <= TW_SOURCE_MAX_BYTES) { /* grew after fstat: read on */
            size_t ncap = cap * 2 > TW_SOURCE_MAX_BYTES + 1 ? TW_SOURCE_MAX_BYTES + 1 : cap * 2;
            char *t = realloc(text, ncap + 1);
            if (!t) {
                en = ENOMEM;
                break;
            }
            text = t;
            cap = ncap;
        }
    }
    close(fd);
    if (!en && len > TW_SOURCE_MAX_BYTES)
        en = EFBIG;
    size_t dlen = strlen(display);
    char *chunk = en ? NULL : malloc(dlen + 2);
    if (!en && !chunk)
        en = ENOMEM;
    if (en) {
        free(text);
        free(chunk);
        errno = en;
        *why = en == EFBIG ? "larger than the " TW_SOURCE_MAX_TEXT " cap for a template source"
                           : strerror(en);
        return NULL;
    }
    text[len] = '\0';
    chunk[0] = '@';
    memcpy(chunk + 1, display, dlen + 1);
    tw_source *s = &src[*nsrc];
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
