/* ctx_init.c — a context's options part (internal.h): the options copied, their strings owned,
 * the environment-backed ones resolved; shared by twell_ctx_create and the JIT's worker context. */
#include "internal.h"

#include "env.h"

#include <stdlib.h>

/* A switch resolved: the program's value, else the environment's (env_on), else off. */
static int tw_switch(twell_switch v, int env_on) {
    return v == TWELL_SWITCH_DEFAULT ? env_on : v == TWELL_SWITCH_ON;
}

twell_status tw_ctx_init(twell_ctx *ctx, const twell_ctx_options *o) {
    ctx->opts = *o;
    ctx->backend = TWELL_BACKEND_CPU;
    atomic_init(&ctx->owner, 0);
    /* Environment-backed options: the program's value, else the operator's, else built-in. */
    const char *tdir = o->template_dir ? o->template_dir : tw_env_template_dir();
    const char *nvrtc = o->nvrtc_library ? o->nvrtc_library : tw_env_nvrtc_library();
    const char *lt = o->cublaslt_library ? o->cublaslt_library : tw_env_cublaslt_library();
    if ((o->cache_dir && !(ctx->cache_dir = tw_strdup(o->cache_dir))) ||
        (tdir && !(ctx->template_dir = tw_strdup(tdir))) ||
        (nvrtc && !(ctx->nvrtc_library = tw_strdup(nvrtc))) ||
        (lt && !(ctx->cublaslt_library = tw_strdup(lt))))
        return TWELL_ERR_NO_MEMORY;
    ctx->opts.cache_dir = ctx->cache_dir;
    ctx->opts.template_dir = ctx->template_dir;
    ctx->opts.nvrtc_library = ctx->nvrtc_library;
    ctx->opts.cublaslt_library = ctx->cublaslt_library;
    ctx->tune_on_first_use = tw_switch(o->tune_on_first_use, tw_env_tune());
    ctx->pdl = tw_switch(o->pdl, !tw_env_pdl_off());
    ctx->pointer_cache = tw_switch(o->pointer_cache, !tw_env_pointer_cache_off());
    ctx->validate_packed = tw_switch(o->validate_packed, tw_env_validate_packed());
    return TWELL_OK;
}

void tw_ctx_fini(twell_ctx *ctx) {
    tw_clear_error(ctx);
    free(ctx->cache_dir);
    free(ctx->template_dir);
    free(ctx->nvrtc_library);
    free(ctx->cublaslt_library);
    ctx->cache_dir = ctx->template_dir = ctx->nvrtc_library = ctx->cublaslt_library = NULL;
}
