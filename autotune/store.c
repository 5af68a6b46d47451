/*
 * store.c — tuning winners in the cache (TW_CACHE_TUNING records keyed by problem and device),
 * and tw_tune_select: stored winner, else default-only, else tune and store.
 */
#include "tuner.h"

#include "internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TW_RECORD_MAGIC "twell-tune-record 1"
#define TW_RECORD_MAX 4096 /* bytes; anything longer is not ours */

static const char *tw_dtype_name(twell_dtype dt) {
    return dt == TWELL_DTYPE_FP16 ? "fp16" : "bf16";
}

void tw_tune_key(const tw_tune_problem *p, const tw_tune_device *d, tw_key *out) {
    tw_hash h;
    char buf[128];
    tw_hash_init(&h);
    tw_hash_str(&h, "twellrt tuning");
    snprintf(buf, sizeof buf, "record %d", TW_TUNE_RECORD_VERSION);
    tw_hash_str(&h, buf);
    tw_hash_str(&h, p->op);
    snprintf(buf, sizeof buf, "K=%u N=%u T=%u C=%u %s gated=%d M=%zu", p->shape.K, p->shape.N,
             p->shape.T, p->shape.C, tw_dtype_name(p->shape.dtype), p->shape.gated ? 1 : 0,
             tw_tune_m_bucket(p->M));
    tw_hash_str(&h, buf);
    tw_hash_str(&h, d->name);
    tw_hash_str(&h, d->arch);
    snprintf(buf, sizeof buf, "sms=%d driver=%d", d->sm_count, d->driver_version);
    tw_hash_str(&h, buf);
    tw_hash_str(&h, twell_version());
    tw_hash_final(&h, out);
}

/* ---- records ---- */

/* %.17g reads back exactly; inf and nan are spelled out so the reader can be strict. */
static void tw_fmt_ms(double v, char *buf, size_t n) {
    if (isnan(v))
        snprintf(buf, n, "nan");
    else if (isinf(v))
        snprintf(buf, n, "%s", v > 0 ? "inf" : "-inf");
    else
        snprintf(buf, n, "%.17g", v);
}

twell_status tw_tune_record_encode(const tw_tune_record *r, const tw_tune_problem *p,
                                   const tw_tune_device *d, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    char canon[TW_TUNE_CANON_MAX], ms[40], dms[40];
    tw_tune_config_canon(&r->config, canon, sizeof canon);
    tw_fmt_ms(r->ms, ms, sizeof ms);
    tw_fmt_ms(r->default_ms, dms, sizeof dms);
    /* Names from the device are echoed only; keep them on one line whatever they hold. */
    char dev[96];
    snprintf(dev, sizeof dev, "%s", d->name);
    for (char *q = dev; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    char *out = malloc(TW_RECORD_MAX);
    if (!out)
        return TWELL_ERR_NO_MEMORY;
    int n = snprintf(out, TW_RECORD_MAX,
                     TW_RECORD_MAGIC "\n"
                                     "config %s\n"
                                     "ms %s\n"
                                     "default_ms %s\n"
                                     "time %" PRId64 "\n"
                                     "problem %s K=%u N=%u T=%u C=%u dtype=%s gated=%d M=%zu\n"
                                     "device %s %s sms=%d driver=%d\n"
                                     "library %s\n",
                     canon, ms, dms, r->time, p->op, p->shape.K, p->shape.N, p->shape.T, p->shape.C,
                     tw_dtype_name(p->shape.dtype), p->shape.gated ? 1 : 0, tw_tune_m_bucket(p->M),
                     dev, d->arch, d->sm_count, d->driver_version, twell_version());
    if (n < 0 || n >= TW_RECORD_MAX) {
        free(out);
        return TWELL_ERR_INTERNAL;
    }
    *buf = out;
    *len = (size_t)n;
    return TWELL_OK;
}

/* A time in ms: "inf", "nan", or a plain decimal float (no hex, no spaces, no "infinity"). */
static int tw_parse_ms(const char *s, double *v) {
    if (!strcmp(s, "inf")) {
        *v = INFINITY;
        return 0;
    }
    if (!strcmp(s, "nan")) {
        *v = NAN;
        return 0;
    }
    if (!s[0] || strspn(s, "0123456789.eE+-") != strlen(s))
        return -1;
    char *end;
    *v = strtod(s, &end);
    return *end == '\0' && isfinite(*v) && *v >= 0.0 ? 0 : -1;
}

static int tw_parse_time(const char *s, int64_t *v) {
    if (!s[0] || strspn(s, "0123456789") != strlen(s) || strlen(s) > 18)
        return -1;
    *v = (int64_t)strtoll(s, NULL, 10);
    return 0;
}

twell_status tw_tune_record_decode(const void *buf, size_t len, tw_tune_record *out) {
    memset(out, 0, sizeof *out);
    if (!buf || len == 0 || len >= TW_RECORD_MAX || memchr(buf, '\0', len))
        return TWELL_ERR_CORRUPT;
    char text[TW_RECORD_MAX];
    memcpy(text, buf, len);
    text[len] = '\0';
    if (text[len - 1] != '\n')
        return TWELL_ERR_CORRUPT;
    enum {
        HAVE_CONFIG = 1,
        HAVE_MS = 2,
        HAVE_DMS = 4,
        HAVE_TIME = 8,
        HAVE_PROBLEM = 16,
        HAVE_DEVICE = 32,
        HAVE_LIBRARY = 64,
        HAVE_ALL = 127
    };
    unsigned have = 0;
    tw_tune_record r;
    memset(&r, 0, sizeof r);
    int first = 1;
    for (char *line = text, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n'); /* never NULL: the text ends with a newline */
        *nl = '\0';
        if (first) {
            if (strcmp(line, TW_RECORD_MAGIC))
                return TWELL_ERR_CORRUPT;
            first = 0;
            continue;
        }
        char *val = strchr(line, ' ');
        if (!val)
            return TWELL_ERR_CORRUPT;
        *val++ = '\0';
        unsigned bit = 0;
        int bad = 0;
        if (!strcmp(line, "config")) {
            bit = HAVE_CONFIG;
            bad = tw_tune_config_parse(val, &r.config) != TWELL_OK;
        } else if (!strcmp(line, "ms")) {
            bit = HAVE_MS;
            bad = tw_parse_ms(val, &r.ms) != 0 || !isfinite(r.ms);
        } else if (!strcmp(line, "default_ms")) {
            bit = HAVE_DMS;
            bad = tw_parse_ms(val, &r.default_ms) != 0;
        } else if (!strcmp(line, "time")) {
            bit = HAVE_TIME;
            bad = tw_parse_time(val, &r.time) != 0;
        } else if (!strcmp(line, "problem")) {
            bit = HAVE_PROBLEM; /* echoes for people: required, so a cut record is caught */
        } else if (!strcmp(line, "device")) {
            bit = HAVE_DEVICE;
        } else if (!strcmp(line, "library")) {
            bit = HAVE_LIBRARY;
        } else {
            bad = 1;
        }
        if (bad || (have & bit))
            return TWELL_ERR_CORRUPT;
        have |= bit;
    }
    if (have != HAVE_ALL)
        return TWELL_ERR_CORRUPT;
    *out = r;
    return TWELL_OK;
}

/* ---- the cache ---- */

twell_status tw_tune_store_load(twell_ctx *ctx, const tw_tune_problem *p, const tw_tune_device *d,
                                tw_tune_record *out) {
    memset(out, 0, sizeof *out);
    tw_cache *c = NULL;
    twell_status st = tw_ctx_cache(ctx, &c);
    if (st != TWELL_OK)
        return st;
    tw_key key;
    tw_tune_key(p, d, &key);
    void *payload = NULL;
    size_t len = 0;
    st = tw_cache_get(c, TW_CACHE_TUNING, &key, &payload, &len);
    if (st == TWELL_ERR_NO_MEMORY)
        return tw_error(ctx, st, "tune: out of memory reading a tuning record");
    if (st != TWELL_OK)
        return TWELL_ERR_NOT_FOUND;
    st = tw_tune_record_decode(payload, len, out);
    free(payload);
    if (st != TWELL_OK) {
        char hex[65];
        tw_key_hex(&key, hex);
        tw_log(ctx, TWELL_LOG_WARN, "twell: tuning record %s is malformed; tuning again", hex);
        return TWELL_ERR_NOT_FOUND;
    }
    return TWELL_OK;
}

twell_status tw_tune_store_save(twell_ctx *ctx, const tw_tune_problem *p, const tw_tune_device *d,
                                const tw_tune_record *r) {
    tw_cache *c = NULL;
    twell_status st = tw_ctx_cache(ctx, &c);
    if (st != TWELL_OK)
        return st;
    char *buf = NULL;
    size_t len = 0;
    st = tw_tune_record_encode(r, p, d, &buf, &len);
    if (st != TWELL_OK)
        return tw_error(ctx, st, "tune: cannot encode the tuning record");
    tw_key key;
    tw_tune_key(p, d, &key);
    st = tw_cache_put(c, TW_CACHE_TUNING, &key, buf, len);
    free(buf);
    if (st != TWELL_OK)
        return tw_error(ctx, st, "tw_cache_put: %s", twell_status_str(st));
    return TWELL_OK;
}

/* ---- the decision ---- */

const char *tw_tune_source_name(tw_tune_source s) {
    switch (s) {
    case TW_TUNE_FROM_CACHE:
        return "cached";
    case TW_TUNE_TUNED:
        return "tuned";
    case TW_TUNE_DEFAULT:
        return "default";
    }
    return "?";
}

static void tw_describe(const tw_tune_problem *p, char *buf, size_t n) {
    snprintf(buf, n, "%s K=%u N=%u T=%u C=%u %s%s M=%zu", p->op, p->shape.K, p->shape.N, p->shape.T,
             p->shape.C, tw_dtype_name(p->shape.dtype), p->shape.gated ? "" : " non-gated", p->M);
}

twell_status tw_tune_select(twell_ctx *ctx, const tw_tune_problem *p, const tw_tune_device *d,
                            const tw_tune_space *s, const tw_tune_callbacks *cb,
                            const tw_tune_options *opt, int retune, tw_tune_choice *out) {
    memset(out, 0, sizeof *out);
    out->ms = NAN;
    out->default_ms = NAN;
    tw_tune_options o = opt ? *opt : tw_tune_options_default();
    tw_tune_problem pb = *p;
    pb.M = tw_tune_m_bucket(p->M);
    char what[160];
    tw_describe(&pb, what, sizeof what);
    if (s->supports && !s->supports(&pb, d))
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED, "tune %s: kernel %s does not support it on %s",
                        what, s->kernel, d->arch);

    tw_tune_record rec;
    int have = 0;
    twell_status st = tw_tune_store_load(ctx, &pb, d, &rec);
    if (st == TWELL_ERR_NO_MEMORY)
        goto fail;
    if (st == TWELL_OK) {
        have = tw_tune_space_accepts(s, &pb, d, &rec.config);
        if (!have) {
            char canon[TW_TUNE_CANON_MAX];
            tw_tune_config_canon(&rec.config, canon, sizeof canon);
            tw_log(ctx, TWELL_LOG_INFO, "twell: stored config %s no longer fits %s; tuning again",
                   canon, what);
        }
    }
    if (have && !retune) {
        out->config = rec.config;
        out->source = TW_TUNE_FROM_CACHE;
        out->ms = rec.ms;
        out->default_ms = rec.default_ms;
        tw_clear_error(ctx);
        return TWELL_OK;
    }

    tw_tune_config *cands = NULL;
    size_t n = 0, di = SIZE_MAX, inc = SIZE_MAX;
    st = tw_tune_space_enumerate(s, &pb, d, &cands, &n, &di, &out->pruning);
    if (st != TWELL_OK) {
        tw_error(ctx, st, "tune %s: the candidate space of %s is invalid (%s)", what, s->kernel,
                 twell_status_name(st));
        goto fail;
    }
    if (n == 0) {
        st = tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                      "tune %s: every one of the %zu configs of %s is pruned on %s", what,
                      out->pruning.total, s->kernel, d->arch);
        goto fail;
    }
    for (size_t i = 0; have && i < n; i++)
        if (tw_tune_config_equal(&cands[i], &rec.config))
            inc = i;

    tw_tune_result res;
    st = tw_tune_run(ctx, cands, n, di, inc, cb, &o, &res);
    free(cands);
    if (st != TWELL_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tw_errmsg(ctx));
        tw_error(ctx, st, "tune %s: %s", what, strncmp(msg, "tune: ", 6) ? msg : msg + 6);
        tw_tune_result_free(&res);
        goto fail;
    }
    tw_prune_stats pruning = out->pruning;
    out->config = res.config;
    out->pruning = pruning;
    out->ms = res.ms;
    out->default_ms = res.default_ms;
    out->budget_cut = res.budget_cut;
    out->kept_incumbent = res.kept_incumbent;
    out->n_measured = res.n_measured;
    out->n_failed = res.n_failed;
    out->n_skipped = res.n_skipped;
    out->measure_calls = res.measure_calls;
    out->elapsed_s = res.elapsed_s;
    tw_tune_result_free(&res);
    if (o.mode == TW_TUNE_DEFAULT_ONLY) {
        out->source = TW_TUNE_DEFAULT;
        tw_clear_error(ctx);
        return TWELL_OK;
    }
    out->source = TW_TUNE_TUNED;
    tw_tune_record w = {out->config, out->ms, out->default_ms, (int64_t)time(NULL)};
    if (tw_tune_store_save(ctx, &pb, d, &w) != TWELL_OK)
        tw_log(ctx, TWELL_LOG_WARN, "twell: tuning result for %s not stored: %s", what,
               tw_errmsg(ctx));
    tw_clear_error(ctx);
    return TWELL_OK;
fail : {
    tw_prune_stats keep = out->pruning;
    memset(out, 0, sizeof *out);
    out->pruning = keep;
    out->ms = NAN;
    out->default_ms = NAN;
}
    return st;
}
