/*
 * lua_state.h — what the files of the Lua engine share, and nothing else includes: the state of
 * one render (the allocator's user data, so every Lua callback reaches it), the registry keys and
 * each file's entry points. lua_engine.c sets up and runs a render, lua_limits.c bounds its
 * memory, instructions and time, lua_sandbox.c gives templates their safe, deterministic library
 * and lua_api.c the authoring API of templates/README.md.
 */
#ifndef TWELL_LUA_STATE_H
#define TWELL_LUA_STATE_H

#include "jit.h"
#include "lua_text.h"

#include <lua.h>

#define TW_HOOK_EVERY 1000 /* VM instructions between two budget checks */

/* Everything one render owns; reachable from Lua as the allocator's user data. */
typedef struct tw_engine {
    size_t mem_used, mem_cap;
    int mem_refused; /* an allocation was refused because of the cap */
    unsigned long long instr, instr_cap;
    double deadline, seconds; /* monotonic clock, s */
    double armed_at;          /* when an allocation past the deadline armed the hook (0: not) */
    int timed_out;            /* an allocation was refused because the deadline passed */
    lua_State *L;             /* for the allocator to arm the hook; NULL while the state opens */
    int unsupported;          /* unsupported(...) was called */
    const char *dir;
    const char *name;
    const tw_param *params;
    size_t nparams;
    tw_source src[TW_MAX_SOURCES];
    int nsrc;
    tw_out out;
    char where[320];  /* last position seen by the hook, for memory errors */
    char raised[320]; /* the innermost template position of the error being raised (tw_msgh) */
} tw_engine;

/* Registry keys (their addresses are unique; defined in lua_engine.c): the template environment,
 * the parameter proxy P, the imported modules and the safe string.format. */
extern const char tw_lua_key_env, tw_lua_key_p, tw_lua_key_modules, tw_lua_key_format;

static inline tw_engine *tw_eng(lua_State *L) {
    void *ud = NULL;
    lua_getallocf(L, &ud);
    return ud;
}

/* ---- lua_limits.c ---- */

/* The monotonic clock, in seconds. */
double tw_lua_clock(void);
/* The state's allocator (ud: the tw_engine): refuses what would pass the memory cap, and past the
 * deadline arms the hook (or, far past it, refuses). */
void *tw_lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
/* The count hook, every TW_HOOK_EVERY instructions: raises the instruction and time limits. */
void tw_lua_hook(lua_State *L, lua_Debug *ar);
/* Charges n units of C work (a byte examined counts as one VM instruction) to the instruction
 * budget, so library code the count hook cannot see stops at the same limit. */
void tw_lua_charge(lua_State *L, size_t n);

/* ---- lua_sandbox.c ---- */

/* Opens the standard libraries templates may use and creates the environment table with the safe
 * subset of them (bounded and deterministic replacements where Lua's own are neither), pairs and
 * tostring included. Leaves the environment on the stack and returns its index. */
int tw_lua_sandbox_open(lua_State *L);

/* ---- lua_api.c ---- */

/* tw_out_text for Lua code: running out of room is the template's error, raised in Lua. */
void tw_lua_emit_text(lua_State *L, tw_out *o, const char *s, size_t n, const char *file,
                      long *line, tw_map map);
/* Adds the authoring API (emit, emitf, cuda, num, flt, param, check, unsupported, import), the
 * template's name and the read-only parameter table P to the environment at index env. */
void tw_lua_api_open(lua_State *L, int env, tw_engine *e);

#endif /* TWELL_LUA_STATE_H */
