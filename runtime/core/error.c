/* error.c — the per-context error message and log callback every layer reports through. */
#include "internal.h"

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

const char *tw_errmsg(const twell_ctx *ctx) {
    if (!ctx)
        return "no context";
    return ctx->errmsg ? ctx->errmsg : "";
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
