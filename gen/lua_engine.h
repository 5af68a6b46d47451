/*
 * lua_engine.h — the sandboxed Lua 5.4 interpreter that turns a template (templates/<name>.cu.lua)
 * and a parameter table into CUDA C. The only module that touches the Lua C API.
 */
#ifndef TWELL_LUA_ENGINE_H
#define TWELL_LUA_ENGINE_H

#include "jit.h"

#include <stddef.h>

/* Resource limits of one render; a template that exceeds one fails with TWELL_ERR_TEMPLATE. The
 * time limit is checked by the instruction hook, by charged library work and by every large
 * allocation, so it also stops work the count does not see. */
typedef struct tw_lua_limits {
    size_t mem_bytes;                /* Lua heap (host-supplied allocator) */
    size_t out_bytes;                /* rendered source */
    unsigned long long instructions; /* Lua VM instructions (counted in steps of 1000) */
    double seconds;                  /* wall-clock time; 0: TW_LUA_DEFAULT_SECONDS */
} tw_lua_limits;

/* Defaults used by tw_render: ample for any real template (they render in well under 1 ms),
 * small enough that a runaway loop stops within a fraction of a second. */
#define TW_LUA_DEFAULT_MEM_BYTES ((size_t)64 << 20)
#define TW_LUA_DEFAULT_OUT_BYTES ((size_t)16 << 20)
#define TW_LUA_DEFAULT_INSTRUCTIONS 50000000ull
/* A backstop behind the instruction count: one VM instruction (a concatenation, a library call)
 * can cost time in proportion to the heap, so the count alone does not bound time. Far above a
 * real render, short enough that a runaway one fails promptly. */
#define TW_LUA_DEFAULT_SECONDS 2.0

/* Renders <dir>/<name>.cu.lua. Positions in messages and in the emitted #line directives name
 * the file as "templates/<file>", whatever dir is, so the output does not depend on where the
 * templates are installed. On success *src is malloc'd, NUL-terminated, *len its length, *err
 * NULL. On failure *src is NULL and *err a malloc'd message (NULL if even that failed):
 * TWELL_ERR_NOT_FOUND (no such file), TWELL_ERR_IO (unreadable), TWELL_ERR_TEMPLATE (Lua syntax
 * or run-time error, a sandbox violation, a limit exceeded: "templates/<file>:<line>: ..."),
 * TWELL_ERR_UNSUPPORTED (the template called unsupported(...) for these parameters),
 * TWELL_ERR_NO_MEMORY. Thread-safe: each call uses its own Lua state. */
twell_status tw_lua_render(const char *dir, const char *name, const tw_param *params,
                           size_t nparams, const tw_lua_limits *limits, char **src, size_t *len,
                           char **err);

#endif /* TWELL_LUA_ENGINE_H */
