/*
 * json.c — strict recursive-descent JSON reader (RFC 8259) with bounded depth, UTF-8 validation
 * and duplicate-key detection; errors carry the line and column of the first bad byte.
 */
#include "json.h"

#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tw_jp {
    const unsigned char *s;
    size_t n, pos;
    int depth;
    twell_status st;
    char *err;
    size_t errlen;
} tw_jp;

static int tw_jfail(tw_jp *p, const char *fmt, ...) TW_PRINTF(2, 3);

static int tw_jfail(tw_jp *p, const char *fmt, ...) {
    if (p->st != TWELL_OK) /* keep the first error */
        return -1;
    p->st = TWELL_ERR_CORRUPT;
    if (!p->err || p->errlen == 0)
        return -1;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p->pos && i < p->n; i++) {
        if (p->s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    int w = snprintf(p->err, p->errlen, "line %zu, column %zu: ", line, col);
    if (w >= 0 && (size_t)w < p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + w, p->errlen - (size_t)w, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int tw_joom(tw_jp *p) {
    if (p->st == TWELL_OK) {
        p->st = TWELL_ERR_NO_MEMORY;
        if (p->err && p->errlen)
            snprintf(p->err, p->errlen, "out of memory");
    }
    return -1;
}

static void tw_jws(tw_jp *p) {
    while (p->pos < p->n) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

/* A printable description of the byte at pos for messages. */
static const char *tw_jwhat(const tw_jp *p, char *buf, size_t n) {
    if (p->pos >= p->n)
        return "the end of the input";
    unsigned char c = p->s[p->pos];
    if (c >= 0x20 && c < 0x7f)
        snprintf(buf, n, "'%c'", c);
    else
        snprintf(buf, n, "byte 0x%02x", c);
    return buf;
}

void tw_json_free(tw_json *v) {
    if (!v)
        return;
    free(v->str);
    for (size_t i = 0; (v->type == TW_JSON_ARRAY || v->type == TW_JSON_OBJECT) && i < v->len; i++) {
        tw_json_free(v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v);
}

/* ---- strings ---- */

typedef struct tw_jbuf {
    char *b;
    size_t len, cap;
} tw_jbuf;

static int tw_jput(tw_jp *p, tw_jbuf *b, const void *src, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 32;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *nb = realloc(b->b, cap);
        if (!nb)
            return tw_joom(p);
        b->b = nb;
        b->cap = cap;
    }
    memcpy(b->b + b->len, src, n);
    b->len += n;
    b->b[b->len] = '\0';
    return 0;
}

static int tw_jutf8_put(tw_jp *p, tw_jbuf *b, unsigned long cp) {
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char)(0xC0 | (cp >> 6));
        u[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xE0 | (cp >> 12));
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (unsigned char)(0xF0 | (cp >> 18));
        u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return tw_jput(p, b, u, n);
}

/* Length of the well-formed UTF-8 sequence at s[0..n) (Unicode Table 3-7), 0 if ill-formed. */
static size_t tw_jutf8_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F; /* no encoded surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F; /* nothing above U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

static int tw_jhex4(tw_jp *p, unsigned long *out) {
    if (p->n - p->pos < 4)
        return tw_jfail(p, "\\u needs four hex digits");
    unsigned long v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p->s[p->pos + (size_t)i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else {
            p->pos += (size_t)i;
            return tw_jfail(p, "\\u needs four hex digits");
        }
        v = v * 16u + d;
    }
    p->pos += 4;
    *out = v;
    return 0;
}

/* Parses a string starting at the opening quote into a malloc'd buffer. */
static int tw_jstring(tw_jp *p, char **out, size_t *outlen) {
    tw_jbuf b = {NULL, 0, 0};
    p->pos++; /* opening quote */
    if (tw_jput(p, &b, "", 0) != 0)
        return -1;
    for (;;) {
        if (p->pos >= p->n) {
            free(b.b);
            return tw_jfail(p, "unterminated string");
        }
        unsigned char c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) {
            free(b.b);
            return tw_jfail(p, "control character 0x%02x in a string (escape it)", c);
        }
        if (c == '\\') {
            p->pos++;
            if (p->pos >= p->n) {
                free(b.b);
                return tw_jfail(p, "unterminated string");
            }
            unsigned char e = p->s[p->pos++];
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *hit = e ? strchr(from, e) : NULL;
            int rc;
            if (hit) {
                rc = tw_jput(p, &b, &to[hit - from], 1);
            } else if (e == 'u') {
                unsigned long cp;
                if (tw_jhex4(p, &cp) != 0) {
                    free(b.b);
                    return -1;
                }
                if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    p->pos -= 6;
                    free(b.b);
                    return tw_jfail(p, "lone low surrogate \\u%04lX", cp);
                }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    unsigned long lo;
                    if (p->n - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                        free(b.b);
                        return tw_jfail(p, "high surrogate \\u%04lX without its low half", cp);
                    }
                    p->pos += 2;
                    if (tw_jhex4(p, &lo) != 0) {
                        free(b.b);
                        return -1;
                    }
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        p->pos -= 6;
                        free(b.b);
                        return tw_jfail(p, "\\u%04lX does not complete surrogate \\u%04lX", lo, cp);
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                rc = tw_jutf8_put(p, &b, cp);
            } else {
                p->pos--;
                free(b.b);
                char w[16];
                return tw_jfail(p, "invalid escape \\%s", tw_jwhat(p, w, sizeof w));
            }
            if (rc != 0) {
                free(b.b);
                return -1;
            }
            continue;
        }
        size_t run = 1;
        if (c >= 0x80 && (run = tw_jutf8_len(p->s + p->pos, p->n - p->pos)) == 0) {
            free(b.b);
            return tw_jfail(p, "invalid UTF-8 (byte 0x%02x)", c);
        }
        if (tw_jput(p, &b, p->s + p->pos, run) != 0) {
            free(b.b);
            return -1;
        }
        p->pos += run;
    }
    *out = b.b;
    *outlen = b.len;
    return 0;
}

/* ---- numbers ---- */

static int tw_jdigits(tw_jp *p) {
    size_t start = p->pos;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
        p->pos++;
    return p->pos > start;
}

static int tw_jnumber(tw_jp *p, tw_json *v) {
    size_t start = p->pos;
    int neg = 0, integral = 1;
    if (p->s[p->pos] == '-') {
        neg = 1;
        p->pos++;
    }
    if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9')
        return tw_jfail(p, "a number needs digits after '-'");
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            return tw_jfail(p, "leading zeros are not allowed in numbers");
    } else {
        tw_jdigits(p);
    }
    size_t int_end = p->pos;
    if (p->pos < p->n && p->s[p->pos] == '.') {
        integral = 0;
        p->pos++;
        if (!tw_jdigits(p))
            return tw_jfail(p, "a number needs digits after '.'");
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integral = 0;
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (!tw_jdigits(p))
            return tw_jfail(p, "a number needs digits in its exponent");
    }
    size_t len = p->pos - start;
    if (len > 400) {
        p->pos = start;
        return tw_jfail(p, "number too long (%zu characters)", len);
    }
    v->type = TW_JSON_NUMBER;
    if (integral) {
        /* Exact integer value when it fits. */
        uint64_t acc = 0;
        const uint64_t lim = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
        int fits = 1;
        for (size_t i = start + (size_t)neg; i < int_end; i++) {
            uint64_t d = (uint64_t)(p->s[i] - '0');
            if (acc > (lim - d) / 10u) {
                fits = 0;
                break;
            }
            acc = acc * 10u + d;
        }
        if (fits) {
            v->is_int = 1;
            v->i =
                neg ? (acc == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)acc) : (int64_t)acc;
        }
    }
    char tmp[402];
    memcpy(tmp, p->s + start, len);
    tmp[len] = '\0';
    char *end = NULL;
    v->num = strtod(tmp, &end);
    if (end != tmp + len) {
        /* A locale whose decimal point is not '.': an approximation is enough for sizes. */
        double m = 0.0;
        long e10 = 0;
        int frac = 0;
        const char *q = tmp + neg;
        for (; *q && *q != 'e' && *q != 'E'; q++) {
            if (*q == '.') {
                frac = 1;
                continue;
            }
            m = m * 10.0 + (double)(*q - '0');
            e10 -= frac;
        }
        if (*q)
            e10 += strtol(q + 1, NULL, 10);
        v->num = (neg ? -m : m) * pow(10.0, (double)e10);
    }
    return 0;
}

/* ---- values ---- */

static int tw_jvalue(tw_jp *p, tw_json **out);

static int tw_jappend(tw_jp *p, tw_json *v, size_t *cap, tw_json *item, char *key) {
    if (v->len == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        tw_json **ni = realloc(v->items, nc * sizeof *ni);
        if (!ni)
            return tw_joom(p);
        v->items = ni;
        if (v->type == TW_JSON_OBJECT) {
            char **nk = realloc(v->keys, nc * sizeof *nk);
            if (!nk)
                return tw_joom(p);
            v->keys = nk;
        }
        *cap = nc;
    }
    v->items[v->len] = item;
    if (v->type == TW_JSON_OBJECT)
        v->keys[v->len] = key;
    v->len++;
    return 0;
}

static int tw_jcmp_keys(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Duplicate keys make a document ambiguous: sort a copy of the names and compare neighbours. */
static const char *tw_jduplicate(tw_jp *p, const tw_json *v) {
    if (v->len < 2)
        return NULL;
    char **k = malloc(v->len * sizeof *k);
    if (!k) {
        tw_joom(p);
        return NULL;
    }
    memcpy(k, v->keys, v->len * sizeof *k);
    qsort(k, v->len, sizeof *k, tw_jcmp_keys);
    const char *dup = NULL;
    for (size_t i = 1; i < v->len && !dup; i++)
        if (!strcmp(k[i - 1], k[i]))
            dup = k[i];
    free(k);
    return dup;
}

static int tw_jcontainer(tw_jp *p, tw_json *v, int object) {
    char close = object ? '}' : ']';
    size_t cap = 0, open_pos = p->pos;
    if (++p->depth > TW_JSON_MAX_DEPTH)
        return tw_jfail(p, "nesting deeper than %d levels", TW_JSON_MAX_DEPTH);
    p->pos++;
    tw_jws(p);
    if (p->pos < p->n && p->s[p->pos] == (unsigned char)close) {
        p->pos++;
        p->depth--;
        return 0;
    }
    for (;;) {
        char *key = NULL;
        char w[16];
        if (object) {
            if (p->pos >= p->n || p->s[p->pos] != '"')
                return tw_jfail(p, "expected a member name in quotes, found %s",
                                tw_jwhat(p, w, sizeof w));
            size_t klen, kpos = p->pos;
            if (tw_jstring(p, &key, &klen) != 0)
                return -1;
            if (strlen(key) != klen) {
                free(key);
                p->pos = kpos;
                return tw_jfail(p, "member name contains U+0000");
            }
            tw_jws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') {
                free(key);
                return tw_jfail(p, "expected ':' after member name, found %s",
                                tw_jwhat(p, w, sizeof w));
            }
            p->pos++;
            tw_jws(p);
        }
        tw_json *item = NULL;
        if (tw_jvalue(p, &item) != 0) {
            free(key);
            return -1;
        }
        if (tw_jappend(p, v, &cap, item, key) != 0) {
            tw_json_free(item);
            free(key);
            return -1;
        }
        tw_jws(p);
        if (p->pos < p->n && p->s[p->pos] == ',') {
            p->pos++;
            tw_jws(p);
            if (p->pos < p->n && p->s[p->pos] == (unsigned char)close)
                return tw_jfail(p, "trailing comma before '%c'", close);
            continue;
        }
        if (p->pos < p->n && p->s[p->pos] == (unsigned char)close) {
            p->pos++;
            break;
        }
        return tw_jfail(p, "expected ',' or '%c', found %s", close, tw_jwhat(p, w, sizeof w));
    }
    if (object) {
        const char *dup = tw_jduplicate(p, v);
        if (p->st != TWELL_OK)
            return -1;
        if (dup) {
            p->pos = open_pos;
            return tw_jfail(p, "object has the key \"%.60s\" twice", dup);
        }
    }
    p->depth--;
    return 0;
}

static int tw_jlit(tw_jp *p, const char *word) {
    size_t n = strlen(word);
    if (p->n - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return 0;
    p->pos += n;
    return 1;
}

static int tw_jvalue(tw_jp *p, tw_json **out) {
    *out = NULL;
    tw_json *v = calloc(1, sizeof *v);
    if (!v)
        return tw_joom(p);
    int rc = 0;
    char w[16];
    if (p->pos >= p->n) {
        rc = tw_jfail(p, "expected a value, found the end of the input");
    } else {
        unsigned char c = p->s[p->pos];
        if (c == '{') {
            v->type = TW_JSON_OBJECT;
            rc = tw_jcontainer(p, v, 1);
        } else if (c == '[') {
            v->type = TW_JSON_ARRAY;
            rc = tw_jcontainer(p, v, 0);
        } else if (c == '"') {
            v->type = TW_JSON_STRING;
            rc = tw_jstring(p, &v->str, &v->len);
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            rc = tw_jnumber(p, v);
        } else if (tw_jlit(p, "true")) {
            v->type = TW_JSON_TRUE;
        } else if (tw_jlit(p, "false")) {
            v->type = TW_JSON_FALSE;
        } else if (tw_jlit(p, "null")) {
            v->type = TW_JSON_NULL;
        } else {
            rc = tw_jfail(p, "expected a value, found %s", tw_jwhat(p, w, sizeof w));
        }
    }
    if (rc != 0) {
        tw_json_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

twell_status tw_json_parse(const char *text, size_t len, tw_json **out, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    tw_jp p = {(const unsigned char *)text, text ? len : 0, 0, 0, TWELL_OK, err, errlen};
    if (p.n >= 3 && !memcmp(p.s, "\xEF\xBB\xBF", 3))
        p.pos = 3;
    tw_jws(&p);
    tw_json *v = NULL;
    if (tw_jvalue(&p, &v) == 0) {
        tw_jws(&p);
        if (p.pos < p.n) {
            char w[16];
            tw_jfail(&p, "unexpected %s after the document", tw_jwhat(&p, w, sizeof w));
            tw_json_free(v);
            v = NULL;
        }
    }
    if (p.st != TWELL_OK) {
        tw_json_free(v);
        return p.st;
    }
    *out = v;
    return TWELL_OK;
}

const tw_json *tw_json_get(const tw_json *v, const char *key) {
    if (!v || v->type != TW_JSON_OBJECT || !key)
        return NULL;
    for (size_t i = 0; i < v->len; i++)
        if (!strcmp(v->keys[i], key))
            return v->items[i];
    return NULL;
}

const char *tw_json_type_name(tw_json_type t) {
    static const char *const names[] = {"null",   "false", "true",  "number",
                                        "string", "array", "object"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}
