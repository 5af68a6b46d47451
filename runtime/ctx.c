/* ctx.c — context lifecycle, backend selection, the per-context error message and logging. */
#include "internal.h"

#include "cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *tw_strdup(const char *s) {
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

twell_ctx_options twell_ctx_options_default(void) {
    twell_ctx_options o;
    memset(&o, 0, sizeof o);
    o.backend = TWELL_BACKEND_AUTO;
    o.device = 0;
    o.log_level = TWELL_LOG_WARN;
    return o;
}

/* Used when the message itself cannot be allocated: the status is still right. */
static char tw_oom_msg[] = "out of memory while formatting an error message";

twell_status tw_verror(twell_ctx *ctx, twell_status status, const char *fmt, va_list ap) {
    if (!ctx)
        return status;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (msg)
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
    if (ctx->errmsg != tw_oom_msg)
        free(ctx->errmsg);
    ctx->errmsg = msg ? msg : tw_oom_msg;
    tw_log(ctx, TWELL_LOG_DEBUG, "%s: %s", twell_status_name(status), ctx->errmsg);
    return status;
}

twell_status tw_error(twell_ctx *ctx, twell_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tw_verror(ctx, status, fmt, ap);
    va_end(ap);
    return status;
}

void tw_clear_error(twell_ctx *ctx) {
    if (ctx && ctx->errmsg && ctx->errmsg[0]) {
        if (ctx->errmsg != tw_oom_msg)
            free(ctx->errmsg);
        ctx->errmsg = NULL;
    }
}

void tw_log(twell_ctx *ctx, twell_log_level level, const char *fmt, ...) {
    if (!ctx || !ctx->opts.log || level < ctx->opts.log_level)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ctx->opts.log(ctx->opts.log_user, level, buf);
}

const char *twell_ctx_errmsg(const twell_ctx *ctx) {
    if (!ctx)
        return "no context";
    return ctx->errmsg ? ctx->errmsg : "";
}

twell_backend twell_ctx_backend(const twell_ctx *ctx) {
    return ctx ? ctx->backend : TWELL_BACKEND_CPU;
}

const char *twell_ctx_device_name(const twell_ctx *ctx) { return ctx ? ctx->device_name : ""; }

/* Reports a failure of create, which has no context to carry the message. */
static void tw_create_log(const twell_ctx_options *o, twell_log_level lvl, const char *msg) {
    if (o->log && lvl >= o->log_level)
        o->log(o->log_user, lvl, msg);
}

twell_status twell_ctx_create(const twell_ctx_options *opts, twell_ctx **out) {
    if (!out)
        return TWELL_ERR_INVALID_ARG;
    *out = NULL;
    twell_ctx_options o = opts ? *opts : twell_ctx_options_default();
    if (o.backend != TWELL_BACKEND_AUTO && o.backend != TWELL_BACKEND_CPU &&
        o.backend != TWELL_BACKEND_CUDA) {
        tw_create_log(&o, TWELL_LOG_ERROR, "twell_ctx_create: options.backend is not a backend");
        return TWELL_ERR_INVALID_ARG;
    }
    if (o.device < 0 || o.cpu_threads < 0 || o.cpu_threads > 1024) {
        tw_create_log(&o, TWELL_LOG_ERROR,
                      "twell_ctx_create: options.device or options.cpu_threads out of range");
        return TWELL_ERR_INVALID_ARG;
    }
    twell_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return TWELL_ERR_NO_MEMORY;
    ctx->opts = o;
    if (o.cache_dir) {
        ctx->cache_dir = tw_strdup(o.cache_dir);
        if (!ctx->cache_dir) {
            free(ctx);
            return TWELL_ERR_NO_MEMORY;
        }
    }
    ctx->opts.cache_dir = ctx->cache_dir;

    twell_status st = tw_pool_create(o.cpu_threads, &ctx->pool);
    if (st != TWELL_OK) {
        twell_ctx_destroy(ctx);
        return st;
    }

    if (o.backend == TWELL_BACKEND_CUDA || o.backend == TWELL_BACKEND_AUTO) {
        st = tw_cuda_open(ctx, o.device);
        if (st == TWELL_OK) {
            ctx->backend = TWELL_BACKEND_CUDA;
        } else if (o.backend == TWELL_BACKEND_CUDA) {
            tw_create_log(&o, TWELL_LOG_ERROR, twell_ctx_errmsg(ctx));
            twell_ctx_destroy(ctx);
            return st == TWELL_ERR_NO_MEMORY ? st : TWELL_ERR_NO_DEVICE;
        } else {
            char msg[512];
            snprintf(msg, sizeof msg, "twell: CUDA not used, running on the CPU backend: %s",
                     twell_ctx_errmsg(ctx));
            tw_create_log(&o, TWELL_LOG_INFO, msg);
        }
    }
    if (ctx->backend != TWELL_BACKEND_CUDA) {
        ctx->backend = TWELL_BACKEND_CPU;
        int n = tw_pool_threads(ctx->pool);
        snprintf(ctx->device_name, sizeof ctx->device_name, "cpu (%d thread%s)", n,
                 n == 1 ? "" : "s");
    }
    tw_clear_error(ctx);
    *out = ctx;
    return TWELL_OK;
}

void twell_ctx_destroy(twell_ctx *ctx) {
    if (!ctx)
        return;
    if (ctx->cuda)
        tw_cuda_close(ctx);
    tw_cache_close(ctx->cache);
    tw_pool_destroy(ctx->pool);
    tw_clear_error(ctx);
    free(ctx->cache_dir);
    free(ctx);
}

twell_status tw_ctx_cache(twell_ctx *ctx, tw_cache **out) {
    if (!ctx->cache) {
        twell_status st = tw_cache_open(ctx->cache_dir, ctx->opts.cache_max_bytes, ctx->opts.log,
                                        ctx->opts.log_user, &ctx->cache);
        if (st != TWELL_OK)
            return tw_error(ctx, st, "tw_cache_open: %s", twell_status_str(st));
    }
    *out = ctx->cache;
    return TWELL_OK;
}
