/*
 * render.h — template lookup and rendering with explicit limits (tw_render in jit.h uses the
 * defaults); exposed for tests and tools.
 */
#ifndef TWELL_RENDER_H
#define TWELL_RENDER_H

#include "jit.h"
#include "lua_engine.h"

/* tw_render with explicit resource limits (limits NULL: the defaults of lua_engine.h). Same
 * contract as tw_render, plus TWELL_ERR_INVALID_ARG for a bad name (letters, digits and _ only)
 * or parameter list (NULL or invalid key, duplicate key) and TWELL_ERR_UNSUPPORTED when the
 * template rejects the parameters with unsupported(...). */
twell_status tw_render_limited(twell_ctx *ctx, const char *name, const tw_param *params,
                               size_t nparams, const tw_lua_limits *limits, char **src,
                               size_t *len);

#endif /* TWELL_RENDER_H */
