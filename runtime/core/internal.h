/*
 * internal.h — definitions shared by the library's modules (hidden from the shared library).
 * Public handles are defined here; backends hang their own state off them.
 */
#ifndef TWELL_INTERNAL_H
#define TWELL_INTERNAL_H

#include "ptr_cache.h"
#include "twellrt.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TW_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TW_PRINTF(f, a)
#endif

typedef struct tw_pool tw_pool;   /* runtime/core/pool.c: CPU worker threads */
typedef struct tw_cache tw_cache; /* cache/cache.c: disk + memory cache */
typedef struct tw_cuda tw_cuda;   /* runtime/cuda/cuda_*.c: CUDA backend state */

struct twell_ctx {
    twell_ctx_options opts; /* copy; its strings point at the owned copies below */
    twell_backend backend;  /* CPU or CUDA, never AUTO */
    char *cache_dir;        /* owned copy of opts.cache_dir (NULL: resolved when the cache opens) */
    /* The environment-backed options, resolved by tw_ctx_init (option, else environment,
     * else built-in): read by the ops, which never look at the environment themselves. */
    int tune_on_first_use;  /* 1: a bucket's first call tunes when no winner is stored */
    int pdl;                /* 1: PDL wanted (the device decides whether it can: tw_cuda.pdl) */
    int pointer_cache;      /* 1: plans remember accepted device addresses (twell_plan.seen) */
    int validate_packed;    /* 1: twell_ffn_infer checks every packed word on entry */
    char *template_dir;     /* owned; NULL: the built-in location (gen/render.c) */
    char *nvrtc_library;    /* owned; NULL: the search list (gen/nvrtc.c) */
    char *cublaslt_library; /* owned; NULL: the search list (runtime/cuda/cuda_blaslt.c) */
    int nvrtc_warned;       /* the "another NVRTC is loaded" warning was logged */
    char *errmsg;           /* owned, "" when the last call succeeded; only the owner touches it */
    /* The thread in a call on this context (tw_ctx_enter): 0 when none, else that thread's
     * identity (tw_ctx_self in runtime/ctx.c). depth counts its nested public calls (the tuners
     * call the API), so the flag is reentrant for the owner; only the owner reads or writes depth.
     */
    atomic_uintptr_t owner;
    unsigned depth;
    char device_name[160];
    tw_pool *pool;   /* CPU backend threads (also used for host-side work on CUDA) */
    tw_cache *cache; /* created lazily by tw_ctx_cache() */
    tw_cuda *cuda;   /* NULL on the CPU backend */
};

struct twell_plan {
    twell_ctx *ctx;
    twell_shape shape;
    twell_path path;
    tw_ptr_cache seen;  /* device addresses the ops accepted lately (ctx->pointer_cache) */
    void *backend_data; /* owned by the backend (CUDA: kernels, configs, buffers) */
};

struct twell_train_state {
    twell_plan *plan;
    size_t M;     /* rows of the saved forward; 0 = none saved */
    size_t bytes; /* backend memory held */
    void *backend_data;
    void *dense;     /* CUDA: the dense training path's record (cuda_train_dense.c), or NULL */
    void *ws;        /* caller's device workspace (twell_train_state_set_workspace), borrowed */
    size_t ws_bytes; /* its size */
};

/* Records an error on ctx (message built from fmt, prefixed by nothing) and returns status, so
 * callers write `return tw_error(ctx, TWELL_ERR_INVALID_ARG, "x is NULL")`. ctx may be NULL. */
twell_status tw_error(twell_ctx *ctx, twell_status status, const char *fmt, ...) TW_PRINTF(3, 4);
twell_status tw_verror(twell_ctx *ctx, twell_status status, const char *fmt, va_list ap);
/* The message the calling thread's last tw_error left on ctx ("" for none, "no context" for
 * NULL), for a layer that adds to it; only the thread inside the call may ask (the public
 * twell_ctx_errmsg is for callers outside it). */
const char *tw_errmsg(const twell_ctx *ctx);

/* Returns from the enclosing function (which returns twell_status) with expr's status unless it
 * is TWELL_OK. */
#define TW_TRY(expr)                                                                               \
    do {                                                                                           \
        twell_status tw_try_st_ = (expr);                                                          \
        if (tw_try_st_ != TWELL_OK)                                                                \
            return tw_try_st_;                                                                     \
    } while (0)

/* Size arithmetic shared by the launchers: a / b rounded up, the smaller of two, and v rounded
 * up to 256 bytes (the alignment of every piece carved out of a device buffer). */
static inline size_t tw_cdiv(size_t a, size_t b) { return (a + b - 1) / b; }
static inline size_t tw_min(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t tw_al(size_t v) { return (v + 255u) & ~(size_t)255u; }

/* The context's busy flag (twellrt.h, "Misuse detected"), taken by every public entry point
 * that touches a context or its objects before it touches anything. tw_ctx_enter returns
 * TWELL_OK when the calling thread now holds ctx (first or nested entry), TWELL_ERR_MISUSE when
 * another thread holds it; it writes nothing on MISUSE (no message: the holder owns errmsg).
 * Every TWELL_OK is paired with one tw_ctx_leave, which returns st so an entry point can end
 * with `return tw_ctx_leave(ctx, body(...))`. */
twell_status tw_ctx_enter(twell_ctx *ctx);
twell_status tw_ctx_leave(twell_ctx *ctx, twell_status st);

/* A context's options part (runtime/core/ctx_init.c), on a zeroed ctx: o (valid options)
 * copied, its strings owned copies, each environment-backed option resolved (the option, else
 * the environment, else built-in), the busy flag free, the backend CPU. No pool, device or cache:
 * twell_ctx_create adds them; the JIT's worker context (tw_jit_cubin_detached) needs none, its
 * cache opened by its first lookup. TWELL_ERR_NO_MEMORY leaves what it copied to tw_ctx_fini. */
twell_status tw_ctx_init(twell_ctx *ctx, const twell_ctx_options *o);
/* Frees what tw_ctx_init copied and the last error (the pool, device and cache are the owner's
 * to release first); ctx is left with no strings. */
void tw_ctx_fini(twell_ctx *ctx);

/* Clears ctx's last error ("" message). */
void tw_clear_error(twell_ctx *ctx);

/* Sends a message to ctx's log callback if its level passes the threshold. */
void tw_log(twell_ctx *ctx, twell_log_level level, const char *fmt, ...) TW_PRINTF(3, 4);

/* strdup that returns NULL on allocation failure (C11 has no strdup). */
char *tw_strdup(const char *s);

/* ---- CPU backend worker pool (runtime/core/pool.c) ---- */
twell_status tw_pool_create(int threads, tw_pool **out); /* threads 0 = online cores */
void tw_pool_destroy(tw_pool *pool);                     /* NULL is a no-op */
int tw_pool_threads(const tw_pool *pool);
/* Runs fn(arg, begin, end) over [0, n) split into contiguous chunks, one per worker, and waits.
 * Chunks are a pure function of (n, threads), so results never depend on scheduling. pool may be
 * NULL (runs inline). Safe from several threads at once: while the workers run one caller's
 * loop, another caller (or a loop nested inside a chunk) runs the same chunks on its own thread,
 * one after another. */
void tw_pool_for(tw_pool *pool, size_t n, void (*fn)(void *arg, size_t begin, size_t end),
                 void *arg);

/* ---- CPU backend ops (runtime/cpu/cpu_backend.c; arguments already validated) ---- */
twell_status tw_cpu_gate_pack(twell_plan *plan, size_t M, const void *x, const void *w,
                              uint32_t *packed);
twell_status tw_cpu_ffn_infer(twell_plan *plan, size_t M, const void *x, const uint32_t *packed,
                              const void *wg, const void *wu, const void *wd, void *y);
twell_status tw_cpu_forward_train(twell_plan *plan, size_t M, const void *x, const void *wg,
                                  const void *wu, const void *wd, void *y, float *stats,
                                  twell_train_state *state);
twell_status tw_cpu_backward(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                             const void *wg, const void *wu, const void *wd, const void *dy,
                             float lambda, void *dx, float *dwg, float *dwu, float *dwd);
void tw_cpu_train_state_release(twell_train_state *state);

/* ---- CUDA backend (runtime/cuda/cuda_*.c; arguments already validated) ---- */
/* Opens device `device`: loads the driver, creates/retains the primary context, fills
 * ctx->cuda and ctx->device_name. TWELL_ERR_NOT_FOUND (no libcuda), TWELL_ERR_NO_DEVICE. */
twell_status tw_cuda_open(twell_ctx *ctx, int device);
void tw_cuda_close(twell_ctx *ctx);
/* 1: device (or managed) memory of this context's device; 0: host memory; -1: unknown. */
int tw_cuda_pointer_kind(twell_ctx *ctx, const void *p);
twell_status tw_cuda_plan_init(twell_plan *plan);
void tw_cuda_plan_release(twell_plan *plan);
/* twell_plan_tune on CUDA (arguments validated): gate-pack, then fused inference. */
twell_status tw_cuda_plan_tune(twell_plan *plan, size_t M, unsigned flags);
/* twell_gate_pack's route on CUDA (runtime/ops/ffn/gate_route.c: the training forward uses it
 * too, so it lives below both). */
twell_status tw_cuda_gate_pack(twell_plan *plan, size_t M, const void *x, const void *w,
                               uint32_t *packed, twell_stream stream);
twell_status tw_cuda_plan_reserve(twell_plan *plan, size_t max_M, double nnz_per_row);
twell_status tw_cuda_ffn_infer(twell_plan *plan, size_t M, const void *x, const uint32_t *packed,
                               const void *wg, const void *wu, const void *wd, void *y,
                               twell_stream stream);
/* twell_ffn_layer on CUDA: the dense route from x where the plan's path or AUTO takes it (nothing
 * packed), else twell_gate_pack into packed and twell_ffn_infer from it. */
twell_status tw_cuda_ffn_layer(twell_plan *plan, size_t M, const void *x, const void *wg,
                               const void *wu, const void *wd, void *y, uint32_t *packed,
                               twell_stream stream);
twell_status tw_cuda_forward_train(twell_plan *plan, size_t M, const void *x, const void *wg,
                                   const void *wu, const void *wd, void *y, float *stats,
                                   twell_train_state *state, twell_stream stream);
twell_status tw_cuda_backward(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                              const void *wg, const void *wu, const void *wd, const void *dy,
                              float lambda, void *dx, float *dwg, float *dwu, float *dwd,
                              twell_stream stream);
void tw_cuda_train_state_release(twell_train_state *state);
/* The dense training path's workspace (cuda_train_dense.c): bytes it needs for M rows (0 on
 * overflow); borrowing the caller's buffer (synchronises; ptr NULL: back to allocating); device
 * bytes it holds itself; release (waits for the device; NULL-safe). */
size_t tw_ctd_bytes(const twell_shape *s, size_t M);
twell_status tw_ctd_set_workspace(twell_train_state *state, void *ptr, size_t bytes);
size_t tw_ctd_held(const twell_train_state *state);
void tw_ctd_release(twell_train_state *state);

#endif /* TWELL_INTERNAL_H */
