/*
 * jit.h — the run-time compilation pipeline as a chain of nouns:
 * render (Lua template → CUDA C) → compile (NVRTC → cubin) → cache (disk) → the CUDA backend
 * loads it. Each step returns a status and leaves a structured message on the context.
 */
#ifndef TWELL_JIT_H
#define TWELL_JIT_H

#include "twellrt.h"

#include <stddef.h>

/* One template parameter: an integer or a string. Templates receive them as a Lua table. */
typedef struct tw_param {
    const char *key;
    const char *sval; /* non-NULL: string value */
    long long ival;   /* used when sval is NULL */
} tw_param;

/* The name the templates' `dtype` parameter gives dt: "bf16" for TWELL_DTYPE_BF16, else "fp16".
 * Static string. */
const char *tw_dtype_param(twell_dtype dt);

/* The shape's part of a template's parameters, the first five of every launcher's and tuner's
 * list, in this order: K, N, T, C (integers) and dtype (tw_dtype_param, a static string). Writes
 * out[0..TW_SHAPE_NPARAMS) and returns TW_SHAPE_NPARAMS. Pure. */
#define TW_SHAPE_NPARAMS 5
size_t tw_shape_params(const twell_shape *s, tw_param out[TW_SHAPE_NPARAMS]);

/* Renders templates/<name>.cu.lua with params into CUDA C source (malloc'd, NUL-terminated,
 * caller frees). Deterministic byte for byte. Errors: TWELL_ERR_NOT_FOUND (no such template),
 * TWELL_ERR_TEMPLATE (Lua error; the message names template file and line). */
twell_status tw_render(twell_ctx *ctx, const char *name, const tw_param *params, size_t nparams,
                       char **src, size_t *len);

/* The directory ctx reads templates from: its options.template_dir, else $TWELL_TEMPLATE_DIR as
 * read when ctx was created, else the install location beside the library, else the source tree
 * it was built from. ctx NULL: the same order, the environment read now. Borrowed: from ctx, or
 * static. */
const char *tw_template_dir(const twell_ctx *ctx);

/* 1 when the template `name` (templates/<group>/<name>.cu.lua) exists in tw_template_dir(ctx)
 * as a regular file (a FIFO or device of that name is not a template; rendering it says so). */
int tw_template_exists(const twell_ctx *ctx, const char *name);

/* The names of the templates (*.cu.lua) in dir's groups (and dir itself), sorted, each malloc'd
 * into names[0..] (the caller frees them); at most cap are stored. Returns how many were found
 * (may exceed cap); 0 when dir cannot be read. */
size_t tw_template_names(const char *dir, char **names, size_t cap);

/* A compiled kernel image. */
typedef struct tw_cubin {
    void *data; /* malloc'd cubin bytes */
    size_t size;
    int cache_hit;     /* 1 if it came from the cache */
    double compile_ms; /* 0 on a hit */
    char key_hex[65];
} tw_cubin;

/* Renders, then returns the cubin for arch ("sm_90a", "sm_80", ...) from the cache or by
 * compiling with NVRTC and publishing it. Errors: those of tw_render, TWELL_ERR_NOT_FOUND (NVRTC
 * missing: the message says where it looked), TWELL_ERR_NVRTC (the message holds the log, with
 * #line-mapped template locations). */
twell_status tw_jit_cubin(twell_ctx *ctx, const char *name, const tw_param *params, size_t nparams,
                          const char *arch, tw_cubin *out);
void tw_cubin_free(tw_cubin *c);

/* tw_jit_cubin with flags. TW_JIT_SKIP_LOOKUP compiles even when the key is cached (the result is
 * still published): cold-compile measurements. */
#define TW_JIT_SKIP_LOOKUP 1u
twell_status tw_jit_cubin_ex(twell_ctx *ctx, const char *name, const tw_param *params,
                             size_t nparams, const char *arch, unsigned flags, tw_cubin *out);

/* tw_jit_cubin for a worker thread (contexts are single-threaded): on a context of its own
 * (tw_ctx_init's: no pool, no device, no log; not a public context) with parent's options (its disk
 * cache, template directory and NVRTC library), so the cubin is also published for later processes.
 * Reads only parent's options, which never change after creation, so the parent may be in use on
 * another thread; it must outlive the call. The worker context dies with its message: on failure
 * err (errlen bytes; NULL: not wanted) says why. Errors: TWELL_ERR_NO_MEMORY (the worker's copies
 * of the options, tw_ctx_init) and those of tw_jit_cubin. */
twell_status tw_jit_cubin_detached(const twell_ctx *parent, const char *name,
                                   const tw_param *params, size_t nparams, const char *arch,
                                   tw_cubin *out, char *err, size_t errlen);

#endif /* TWELL_JIT_H */
