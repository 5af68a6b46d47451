/*
 * candidates.c — tile configurations (canonical strings, parsing, template parameters), device
 * presets, and enumeration of a candidate space with pruning before anything is compiled.
 */
#include "candidates.h"

#include "m_bucket.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- configurations ---- */

/* A name as templates accept it: letters, digits, _ and not starting with a digit. */
static int tw_name_ok(const char *s, size_t max) {
    if (!s || !s[0] || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    size_t n = 0;
    for (; s[n]; n++) {
        char ch = s[n];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_'))
            return 0;
        if (n + 1 >= max)
            return 0;
    }
    return 1;
}

int tw_tune_config_init(tw_tune_config *c, const char *kernel) {
    memset(c, 0, sizeof *c);
    if (!tw_name_ok(kernel, TW_TUNE_KERNEL_MAX))
        return -1;
    memcpy(c->kernel, kernel, strlen(kernel) + 1);
    return 0;
}

int tw_tune_config_set(tw_tune_config *c, const char *name, int64_t v) {
    if (!tw_name_ok(name, TW_TUNE_NAME_MAX))
        return -1;
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->p[i].name, name)) {
            c->p[i].value = v;
            return 0;
        }
    if (c->n == TW_TUNE_MAX_PARAMS)
        return -1;
    memcpy(c->p[c->n].name, name, strlen(name) + 1);
    c->p[c->n].value = v;
    c->n++;
    return 0;
}

int tw_tune_config_get(const tw_tune_config *c, const char *name, int64_t *v) {
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->p[i].name, name)) {
            *v = c->p[i].value;
            return 1;
        }
    return 0;
}

int64_t tw_tune_config_value(const tw_tune_config *c, const char *name, int64_t dflt) {
    int64_t v = dflt;
    (void)tw_tune_config_get(c, name, &v);
    return v;
}

size_t tw_tune_config_canon(const tw_tune_config *c, char *buf, size_t len) {
    size_t need = 0;
    int w = snprintf(buf, len, "%s:", c->kernel);
    need += w > 0 ? (size_t)w : 0;
    for (size_t i = 0; i < c->n; i++) {
        char *dst = need < len ? buf + need : NULL;
        size_t room = need < len ? len - need : 0;
        w = snprintf(dst, room, "%s%s=%" PRId64, i ? "," : "", c->p[i].name, c->p[i].value);
        need += w > 0 ? (size_t)w : 0;
    }
    return need;
}

/* Strict decimal int64: optional '-', no '+', no leading zeros (so each value has one spelling
 * and canonical strings round-trip byte for byte). Returns 0 and *v, or -1. */
static int tw_parse_i64(const char *s, size_t n, int64_t *v) {
    size_t i = 0;
    int neg = 0;
    if (n && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == n || (s[i] == '0' && n - i > 1) || (neg && s[i] == '0'))
        return -1;
    uint64_t acc = 0;
    const uint64_t lim = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (acc > (lim - d) / 10u)
            return -1;
        acc = acc * 10u + d;
    }
    if (neg)
        *v = acc == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)acc;
    else
        *v = (int64_t)acc;
    return 0;
}

twell_status tw_tune_config_parse(const char *s, tw_tune_config *out) {
    memset(out, 0, sizeof *out);
    if (!s)
        return TWELL_ERR_CORRUPT;
    const char *colon = strchr(s, ':');
    if (!colon || (size_t)(colon - s) >= TW_TUNE_KERNEL_MAX)
        return TWELL_ERR_CORRUPT;
    char kernel[TW_TUNE_KERNEL_MAX];
    memcpy(kernel, s, (size_t)(colon - s));
    kernel[colon - s] = '\0';
    if (tw_tune_config_init(out, kernel) != 0)
        return TWELL_ERR_CORRUPT;
    const char *p = colon + 1;
    while (*p) {
        const char *eq = strchr(p, '=');
        if (!eq || (size_t)(eq - p) >= TW_TUNE_NAME_MAX)
            goto bad;
        char name[TW_TUNE_NAME_MAX];
        memcpy(name, p, (size_t)(eq - p));
        name[eq - p] = '\0';
        const char *val = eq + 1;
        size_t vn = strcspn(val, ",");
        int64_t v;
        if (!tw_name_ok(name, TW_TUNE_NAME_MAX) || tw_parse_i64(val, vn, &v) != 0)
            goto bad;
        int64_t dup;
        if (tw_tune_config_get(out, name, &dup) || tw_tune_config_set(out, name, v) != 0)
            goto bad;
        p = val + vn;
        if (*p == ',') {
            p++;
            if (!*p) /* trailing comma */
                goto bad;
        }
    }
    return TWELL_OK;
bad:
    memset(out, 0, sizeof *out);
    return TWELL_ERR_CORRUPT;
}

int tw_tune_config_equal(const tw_tune_config *a, const tw_tune_config *b) {
    if (strcmp(a->kernel, b->kernel) || a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->p[i].name, b->p[i].name) || a->p[i].value != b->p[i].value)
            return 0;
    return 1;
}

int tw_tune_config_cmp(const tw_tune_config *a, const tw_tune_config *b) {
    char ca[TW_TUNE_CANON_MAX], cb[TW_TUNE_CANON_MAX];
    tw_tune_config_canon(a, ca, sizeof ca);
    tw_tune_config_canon(b, cb, sizeof cb);
    return strcmp(ca, cb);
}

size_t tw_tune_config_params(const tw_tune_config *c, const twell_shape *s, tw_param *out,
                             size_t cap) {
    if (cap < TW_SHAPE_NPARAMS + c->n)
        return 0;
    size_t n = tw_shape_params(s, out);
    for (size_t i = 0; i < c->n; i++)
        out[n++] = (tw_param){c->p[i].name, NULL, (long long)c->p[i].value};
    return n;
}

/* ---- devices ---- */

int tw_tune_device_preset(const char *name, tw_tune_device *out) {
    /* Limits from NVIDIA's published per-architecture tables (CUDA C++ Programming Guide,
     * "Technical Specifications per Compute Capability") and the products' data sheets. */
    static const struct {
        const char *key, *name, *arch;
        int major, minor, sms, smem_block, smem_sm, cluster, l2;
    } presets[] = {
        {"h200", "NVIDIA H200", "sm_90a", 9, 0, 132, 232448, 233472, 8, 50 << 20},
        {"h100", "NVIDIA H100 80GB HBM3", "sm_90a", 9, 0, 132, 232448, 233472, 8, 50 << 20},
        {"a100", "NVIDIA A100-SXM4-80GB", "sm_80", 8, 0, 108, 166912, 167936, 1, 40 << 20},
        {"l4", "NVIDIA L4", "sm_89", 8, 9, 58, 101376, 102400, 1, 48 << 20},
    };
    memset(out, 0, sizeof *out);
    for (size_t i = 0; name && i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].key))
            continue;
        snprintf(out->name, sizeof out->name, "%s", presets[i].name);
        snprintf(out->arch, sizeof out->arch, "%s", presets[i].arch);
        out->cc_major = presets[i].major;
        out->cc_minor = presets[i].minor;
        out->sm_count = presets[i].sms;
        out->smem_per_block = presets[i].smem_block;
        out->smem_per_sm = presets[i].smem_sm;
        out->regs_per_sm = 65536;
        out->max_regs_per_thread = 255;
        out->max_threads_per_block = 1024;
        out->max_cluster = presets[i].cluster;
        out->l2_bytes = presets[i].l2;
        return 0;
    }
    return -1;
}

/* ---- problems and spaces ---- */

size_t tw_tune_m_bucket(size_t M) { return tw_m_bucket(M); }

const char *tw_prune_reason_name(tw_prune_reason r) {
    static const char *const names[TW_PRUNE_REASONS] = {"kept", "shape",   "smem",
                                                        "regs", "threads", "cluster"};
    return (unsigned)r < TW_PRUNE_REASONS ? names[r] : "?";
}

void tw_tune_space_default(const tw_tune_space *s, tw_tune_config *out) {
    (void)tw_tune_config_init(out, s->kernel);
    for (size_t i = 0; i < s->naxes && i < TW_TUNE_MAX_PARAMS; i++)
        (void)tw_tune_config_set(out, s->axes[i].name, s->defaults[i]);
}

static int tw_axis_has(const tw_tune_axis *a, int64_t v);

int tw_tune_space_default_for(const tw_tune_space *s, const tw_tune_problem *p,
                              const tw_tune_device *d, tw_tune_config *out) {
    tw_tune_space_default(s, out);
    if (!s->default_for)
        return 0;
    int64_t v[TW_TUNE_MAX_PARAMS];
    size_t n = s->naxes < TW_TUNE_MAX_PARAMS ? s->naxes : TW_TUNE_MAX_PARAMS;
    for (size_t i = 0; i < n; i++)
        v[i] = s->defaults[i];
    s->default_for(p, d, v);
    for (size_t i = 0; i < n; i++)
        if (!tw_axis_has(&s->axes[i], v[i]))
            return -1;
    for (size_t i = 0; i < n && i < out->n; i++)
        out->p[i].value = v[i];
    return 0;
}

size_t tw_tune_space_size(const tw_tune_space *s) {
    size_t total = s->naxes ? 1 : 0;
    for (size_t i = 0; i < s->naxes; i++) {
        if (s->axes[i].n == 0)
            return 0;
        if (total > SIZE_MAX / s->axes[i].n)
            return SIZE_MAX;
        total *= s->axes[i].n;
    }
    return total;
}

tw_prune_reason tw_tune_prune(const tw_tune_space *s, const tw_tune_problem *p,
                              const tw_tune_device *d, const tw_tune_config *c, char *why,
                              size_t n) {
    char local[160];
    if (!why || n == 0) {
        why = local;
        n = sizeof local;
    }
    why[0] = '\0';
    if (s->check && s->check(p, c, why, n) != 0) {
        if (!why[0])
            snprintf(why, n, "rejected by the %s shape rules", s->kernel);
        return TW_PRUNE_SHAPE;
    }
    int threads = s->threads ? s->threads(p, c) : 0;
    if (threads > d->max_threads_per_block) {
        snprintf(why, n, "%d threads per block > %d", threads, d->max_threads_per_block);
        return TW_PRUNE_THREADS;
    }
    int cluster = s->cluster ? s->cluster(p, c) : 1;
    if (cluster > (d->max_cluster > 0 ? d->max_cluster : 1)) {
        snprintf(why, n, "cluster of %d > %d on %s", cluster, d->max_cluster, d->arch);
        return TW_PRUNE_CLUSTER;
    }
    if (s->smem_bytes) {
        uint64_t smem = s->smem_bytes(p, c);
        if (smem > (uint64_t)(d->smem_per_block > 0 ? d->smem_per_block : 0)) {
            snprintf(why, n, "%" PRIu64 " B of shared memory > %d B per block", smem,
                     d->smem_per_block);
            return TW_PRUNE_SMEM;
        }
    }
    if (s->regs_per_thread) {
        int regs = s->regs_per_thread(p, c);
        if (regs > d->max_regs_per_thread) {
            snprintf(why, n, "~%d registers per thread > %d", regs, d->max_regs_per_thread);
            return TW_PRUNE_REGS;
        }
        if (threads > 0 && (int64_t)regs * threads > (int64_t)d->regs_per_sm) {
            snprintf(why, n, "~%d registers x %d threads > %d per SM", regs, threads,
                     d->regs_per_sm);
            return TW_PRUNE_REGS;
        }
    }
    return TW_PRUNE_KEPT;
}

static int tw_axis_has(const tw_tune_axis *a, int64_t v) {
    for (size_t i = 0; i < a->n; i++)
        if (a->values[i] == v)
            return 1;
    return 0;
}

twell_status tw_tune_space_enumerate(const tw_tune_space *s, const tw_tune_problem *p,
                                     const tw_tune_device *d, tw_tune_config **out, size_t *n,
                                     size_t *default_index, tw_prune_stats *stats) {
    *out = NULL;
    *n = 0;
    if (default_index)
        *default_index = SIZE_MAX;
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (s->naxes == 0 || s->naxes > TW_TUNE_MAX_PARAMS)
        return TWELL_ERR_INVALID_ARG;
    size_t total = tw_tune_space_size(s);
    if (total == 0 || total > TW_TUNE_MAX_SPACE)
        return TWELL_ERR_INVALID_ARG;
    for (size_t a = 0; a < s->naxes; a++)
        if (!tw_axis_has(&s->axes[a], s->defaults[a]))
            return TWELL_ERR_INVALID_ARG;
    tw_tune_config def, want;
    tw_tune_space_default(s, &def);
    if (def.n != s->naxes) /* a bad or repeated axis name */
        return TWELL_ERR_INVALID_ARG;
    /* the default to find among the kept: the problem's own, when it is on the axes */
    int have_want = tw_tune_space_default_for(s, p, d, &want) == 0;

    tw_tune_config *kept = NULL;
    size_t nkept = 0, cap = 0, idx[TW_TUNE_MAX_PARAMS] = {0};
    tw_prune_stats st;
    memset(&st, 0, sizeof st);
    for (size_t k = 0; k < total; k++) {
        tw_tune_config c = def;
        for (size_t a = 0; a < s->naxes; a++)
            c.p[a].value = s->axes[a].values[idx[a]];
        tw_prune_reason r = tw_tune_prune(s, p, d, &c, NULL, 0);
        st.total++;
        st.by[r]++;
        if (r == TW_PRUNE_KEPT) {
            if (nkept == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                tw_tune_config *m = realloc(kept, ncap * sizeof *m);
                if (!m) {
                    free(kept);
                    return TWELL_ERR_NO_MEMORY;
                }
                kept = m;
                cap = ncap;
            }
            if (default_index && have_want && tw_tune_config_equal(&c, &want))
                *default_index = nkept;
            kept[nkept++] = c;
        }
        /* Odometer: the last axis varies fastest. */
        for (size_t a = s->naxes; a-- > 0;) {
            if (++idx[a] < s->axes[a].n)
                break;
            idx[a] = 0;
        }
    }
    st.kept = nkept;
    if (stats)
        *stats = st;
    *out = kept;
    *n = nkept;
    return TWELL_OK;
}

int tw_tune_space_accepts(const tw_tune_space *s, const tw_tune_problem *p, const tw_tune_device *d,
                          const tw_tune_config *c) {
    if (strcmp(c->kernel, s->kernel) || c->n != s->naxes)
        return 0;
    for (size_t a = 0; a < s->naxes; a++)
        if (strcmp(c->p[a].name, s->axes[a].name) || !tw_axis_has(&s->axes[a], c->p[a].value))
            return 0;
    if (s->supports && !s->supports(p, d))
        return 0;
    return tw_tune_prune(s, p, d, c, NULL, 0) == TW_PRUNE_KEPT;
}
