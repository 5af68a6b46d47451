/* ctx_cache.c — the context's cache handle, opened on first use by the JIT and the tuner. */
#include "cache.h"

#include "internal.h"

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
