/* ctx.c — context lifecycle, backend selection, the per-context error message and logging. */
#include "internal.h"

#include "abi.h"
#include "cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every field of twell_ctx_options, in order: the bytes a caller's struct_size covers. */
static const size_t tw_ctx_options_ends[] = {
    TW_FIELD_END(twell_ctx_options, struct_size),
    TW_FIELD_END(twell_ctx_options, backend),
    TW_FIELD_END(twell_ctx_options, device),
    TW_FIELD_END(twell_ctx_options, cache_dir),
    TW_FIELD_END(twell_ctx_options, log),
    TW_FIELD_END(twell_ctx_options, log_user),
    TW_FIELD_END(twell_ctx_options, log_level),
    TW_FIELD_END(twell_ctx_options, cpu_threads),
    TW_FIELD_END(twell_ctx_options, cache_max_bytes),
    TW_FIELD_END(twell_ctx_options, tune_on_first_use),
    TW_FIELD_END(twell_ctx_options, pdl),
    TW_FIELD_END(twell_ctx_options, template_dir),
    TW_FIELD_END(twell_ctx_options, nvrtc_library),
    TW_FIELD_END(twell_ctx_options, pointer_cache),
    TW_FIELD_END(twell_ctx_options, cublaslt_library),
    TW_FIELD_END(twell_ctx_options, validate_packed),
};
/* A field appended to the struct grows it past its last listed field: list it above. */
_Static_assert(sizeof(twell_ctx_options) - TW_FIELD_END(twell_ctx_options, validate_packed) <
                   _Alignof(twell_ctx_options),
               "a field of twell_ctx_options is missing from tw_ctx_options_ends");

static const tw_abi_struct tw_ctx_options_abi = {
    "options", "twell_ctx_options_init", sizeof(twell_ctx_options), tw_ctx_options_ends,
    sizeof tw_ctx_options_ends / sizeof tw_ctx_options_ends[0]};

static twell_ctx_options tw_ctx_options_defaults(void) {
    twell_ctx_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.backend = TWELL_BACKEND_AUTO;
    o.device = 0;
    o.log_level = TWELL_LOG_WARN;
    return o;
}

twell_status twell_ctx_options_init_sized(twell_ctx_options *opts, size_t struct_size) {
    twell_ctx_options d = tw_ctx_options_defaults();
    return tw_abi_init(&tw_ctx_options_abi, opts, struct_size, &d);
}

/* One byte per thread whose address identifies the thread: unique among live threads, never 0,
 * and comparable as an integer (pthread_t need not be). */
static _Thread_local char tw_ctx_self_marker;

static uintptr_t tw_ctx_self(void) { return (uintptr_t)&tw_ctx_self_marker; }

twell_status tw_ctx_enter(twell_ctx *ctx) {
    uintptr_t self = tw_ctx_self();
    /* Relaxed is enough: only this thread ever stores its own identity there. */
    if (atomic_load_explicit(&ctx->owner, memory_order_relaxed) == self) {
        ctx->depth++;
        return TWELL_OK;
    }
    uintptr_t none = 0;
    /* Acquire pairs with the release in tw_ctx_leave: the previous holder's writes (errmsg,
     * plan and pool state) are visible to the next. */
    if (!atomic_compare_exchange_strong_explicit(&ctx->owner, &none, self, memory_order_acquire,
                                                 memory_order_relaxed))
        return TWELL_ERR_MISUSE;
    ctx->depth = 1;
    return TWELL_OK;
}

twell_status tw_ctx_leave(twell_ctx *ctx, twell_status st) {
    if (--ctx->depth == 0)
        atomic_store_explicit(&ctx->owner, 0, memory_order_release);
    return st;
}

const char *twell_ctx_errmsg(const twell_ctx *ctx) {
    if (!ctx)
        return "no context";
    /* The flag is the one field a reader writes; no context is ever defined const. */
    twell_ctx *c = (twell_ctx *)(uintptr_t)ctx;
    if (tw_ctx_enter(c) != TWELL_OK)
        return "twell_ctx_errmsg: another thread is in a call on this context (one thread at a "
               "time per context)";
    const char *msg = c->errmsg ? c->errmsg : "";
    tw_ctx_leave(c, TWELL_OK);
    return msg;
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

/* The options' ranges: TWELL_ERR_INVALID_ARG, reported through o's log, when one is out. */
static twell_status tw_ctx_options_check(const twell_ctx_options *o) {
    if (o->backend != TWELL_BACKEND_AUTO && o->backend != TWELL_BACKEND_CPU &&
        o->backend != TWELL_BACKEND_CUDA) {
        tw_create_log(o, TWELL_LOG_ERROR, "twell_ctx_create: options.backend is not a backend");
        return TWELL_ERR_INVALID_ARG;
    }
    if (o->device < 0 || o->cpu_threads < 0 || o->cpu_threads > 1024) {
        tw_create_log(o, TWELL_LOG_ERROR,
                      "twell_ctx_create: options.device or options.cpu_threads out of range");
        return TWELL_ERR_INVALID_ARG;
    }
    if ((unsigned)o->tune_on_first_use > TWELL_SWITCH_OFF || (unsigned)o->pdl > TWELL_SWITCH_OFF) {
        tw_create_log(o, TWELL_LOG_ERROR,
                      "twell_ctx_create: options.tune_on_first_use or options.pdl is not a "
                      "twell_switch");
        return TWELL_ERR_INVALID_ARG;
    }
    if ((unsigned)o->pointer_cache > TWELL_SWITCH_OFF) {
        tw_create_log(o, TWELL_LOG_ERROR,
                      "twell_ctx_create: options.pointer_cache is not a twell_switch");
        return TWELL_ERR_INVALID_ARG;
    }
    if ((unsigned)o->validate_packed > TWELL_SWITCH_OFF) {
        tw_create_log(o, TWELL_LOG_ERROR,
                      "twell_ctx_create: options.validate_packed is not a twell_switch");
        return TWELL_ERR_INVALID_ARG;
    }
    return TWELL_OK;
}

twell_status twell_ctx_create(const twell_ctx_options *opts, twell_ctx **out) {
    if (!out)
        return TWELL_ERR_INVALID_ARG;
    *out = NULL;
    twell_ctx_options o = tw_ctx_options_defaults();
    if (opts) {
        char why[256];
        int have_log = 0;
        twell_status st = tw_abi_read(&tw_ctx_options_abi, opts, &o, why, sizeof why, &have_log);
        if (st != TWELL_OK) {
            if (have_log) {
                char msg[300];
                snprintf(msg, sizeof msg, "twell_ctx_create: %s", why);
                tw_create_log(&o, TWELL_LOG_ERROR, msg);
            }
            return st;
        }
    }
    twell_status vst = tw_ctx_options_check(&o);
    if (vst != TWELL_OK)
        return vst;
    twell_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return TWELL_ERR_NO_MEMORY;
    if (tw_ctx_init(ctx, &o) != TWELL_OK) {
        twell_ctx_destroy(ctx);
        return TWELL_ERR_NO_MEMORY;
    }

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
    /* Freeing under a running call would turn a detectable misuse into a use after free; a
     * context that stays alive is the lesser harm. The flag is never released: ctx is gone. */
    if (tw_ctx_enter(ctx) != TWELL_OK) {
        tw_log(ctx, TWELL_LOG_ERROR,
               "twell_ctx_destroy: another thread is in a call on this context; not destroyed");
        return;
    }
    if (ctx->cuda)
        tw_cuda_close(ctx);
    tw_cache_close(ctx->cache);
    tw_pool_destroy(ctx->pool);
    tw_ctx_fini(ctx);
    free(ctx);
}
