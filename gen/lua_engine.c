/*
 * lua_engine.c — sandboxed Lua 5.4 rendering of kernel templates into CUDA C: the only file that
 * touches the Lua C API. Determinism, the sandbox, resource limits and #line mapping live here;
 * the authoring API it offers templates is described in templates/README.md.
 */
#include "lua_engine.h"
#include "lua_text.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TW_HOOK_EVERY 1000 /* VM instructions between two budget checks */
/* Allocations at least this large also check the clock: work that is large per VM instruction
 * (copying a big string) allocates its result. */
#define TW_CLOCK_ALLOC_BYTES ((size_t)64 << 10)

/* Everything one render owns; reachable from Lua as the allocator's user data. */
typedef struct tw_engine {
    size_t mem_used, mem_cap;
    int mem_refused; /* an allocation was refused because of the cap */
    unsigned long long instr, instr_cap;
    double deadline, seconds; /* monotonic clock, s */
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

/* tw_out_text for Lua code: running out of room is the template's error, raised in Lua. */
static void tw_emit_text(lua_State *L, tw_out *o, const char *s, size_t n, const char *file,
                         long *line, tw_map map) {
    /* NVRTC takes the source as a C string: it would silently stop at the NUL. */
    if (memchr(s, '\0', n))
        luaL_error(L, "rendered source would contain a NUL byte (NVRTC would stop reading there)");
    tw_out_status r = tw_out_text(o, s, n, file, line, map);
    if (r == TW_OUT_FULL)
        luaL_error(L, "rendered source exceeds the output cap (%d MiB)", (int)(o->max >> 20));
    else if (r == TW_OUT_NO_MEMORY)
        luaL_error(L, "out of host memory for the rendered source");
}

/* Registry keys (addresses are unique). */
static const char tw_key_env = 0, tw_key_p = 0, tw_key_modules = 0, tw_key_format = 0;

static tw_engine *tw_eng(lua_State *L) {
    void *ud = NULL;
    lua_getallocf(L, &ud);
    return ud;
}

/* ---------------------------------------------------------------------------------------------
 * Allocator with a cap, and the instruction budget
 * ------------------------------------------------------------------------------------------- */

static void tw_hook(lua_State *L, lua_Debug *ar);

static double tw_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *tw_lalloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    tw_engine *e = ud;
    size_t old = ptr ? osize : 0; /* with ptr NULL, osize encodes an object type */
    if (nsize == 0) {
        free(ptr);
        e->mem_used -= old;
        return NULL;
    }
    if (nsize > old && e->mem_used - old + nsize > e->mem_cap) {
        e->mem_refused = 1;
        return NULL;
    }
    if (nsize >= TW_CLOCK_ALLOC_BYTES && nsize > old) {
        double now = tw_clock();
        /* Past the deadline the hook is armed for the next instruction, which reports it with
         * the template line (lua_sethook may be called at any point); should the time still
         * run on inside C, allocations are refused, a cruder stop without a line. */
        if (now > e->deadline + e->seconds) {
            e->timed_out = 1;
            return NULL;
        }
        if (now > e->deadline && e->L)
            lua_sethook(e->L, tw_hook, LUA_MASKCOUNT, 1);
    }
    void *p = realloc(ptr, nsize);
    if (p)
        e->mem_used = e->mem_used - old + nsize;
    return p;
}

static void tw_hook(lua_State *L, lua_Debug *ar) {
    tw_engine *e = tw_eng(L);
    if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0 && ar->source[0] == '@')
        snprintf(e->where, sizeof e->where, "%s:%d", ar->source + 1, ar->currentline);
    e->instr += TW_HOOK_EVERY;
    if (e->instr > e->instr_cap) {
        lua_pushfstring(L, "%s: template exceeded the instruction limit (%d million)",
                        e->where[0] ? e->where : "?", (int)(e->instr_cap / 1000000u));
        lua_error(L);
    }
    if (tw_clock() > e->deadline) {
        lua_pushfstring(L, "%s: template exceeded the time limit (%d ms)",
                        e->where[0] ? e->where : "?", (int)(e->seconds * 1e3));
        lua_error(L);
    }
}

/* Charges n units of C work (a byte examined counts as one VM instruction) to the instruction
 * budget, so library code the count hook cannot see stops at the same limit. */
static void tw_charge(lua_State *L, size_t n) {
    tw_engine *e = tw_eng(L);
    e->instr += n;
    if (e->instr > e->instr_cap) {
        luaL_where(L, 1);
        lua_pushfstring(L, "%stemplate exceeded the instruction limit (%d million)",
                        lua_tostring(L, -1), (int)(e->instr_cap / 1000000u));
        lua_error(L);
    }
    if (tw_clock() > e->deadline) {
        luaL_where(L, 1);
        lua_pushfstring(L, "%stemplate exceeded the time limit (%d ms)", lua_tostring(L, -1),
                        (int)(e->seconds * 1e3));
        lua_error(L);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Bounded replacements for library functions whose work the count hook does not see
 * ------------------------------------------------------------------------------------------- */

/* setmetatable without finalizers: a __gc metamethod runs during collection or lua_close, where
 * no instruction budget applies (an endless one would hang the render). Lua marks an object for
 * finalization only if its metatable has a __gc field when it is set, so a raw check here
 * suffices; a field added later is never called. */
static int tw_l_setmetatable(lua_State *L) {
    int t = lua_type(L, 2);
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
    if (t == LUA_TTABLE) {
        lua_pushliteral(L, "__gc");
        if (lua_rawget(L, 2) != LUA_TNIL)
            return luaL_error(L, "setmetatable: __gc metamethods are not available to templates "
                                 "(a finalizer would run outside the instruction limit)");
    }
    /* Done here rather than by calling the base function, so its errors keep the caller's
     * position (a C function one level down has none). */
    if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
        return luaL_error(L, "cannot change a protected metatable");
    lua_settop(L, 2);
    lua_setmetatable(L, 1);
    return 1;
}

/* Lua's pattern characters: a needle without them is searched for as plain text. */
#define TW_PATTERN_SPECIALS "^$*+?.([%-"

/* string.find for plain text only: Lua's matcher backtracks without bound and inside one C
 * call, out of the hook's sight. Same results as Lua's when plain is true or the needle has no
 * pattern characters; the search is charged to the instruction budget. */
static int tw_l_find(lua_State *L) {
    size_t ls, lp;
    const char *s = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    lua_Integer init = luaL_optinteger(L, 3, 1);
    int plain = lua_toboolean(L, 4);
    if (!plain)
        for (size_t i = 0; i < lp; i++)
            if (p[i] != '\0' && strchr(TW_PATTERN_SPECIALS, p[i]))
                return luaL_error(L, "string.find: patterns are not available to templates (their "
                                     "work is unbounded); search plain text with "
                                     "string.find(s, text, init, true)");
    if (init < 0) /* Lua's rule: negative counts from the end, clamped to the first byte */
        init = init < -(lua_Integer)ls ? 1 : (lua_Integer)ls + init + 1;
    else if (init == 0)
        init = 1;
    if (init > (lua_Integer)ls + 1) {
        lua_pushnil(L);
        return 1;
    }
    size_t from = (size_t)init - 1;
    if (lp == 0) {
        lua_pushinteger(L, init);
        lua_pushinteger(L, init - 1);
        return 2;
    }
    const char *at = s + from, *end = s + ls;
    while (lp <= (size_t)(end - at)) {
        const char *hit = memchr(at, p[0], (size_t)(end - at) - lp + 1);
        tw_charge(L, (size_t)((hit ? hit : end) - at) + lp); /* scanned, then compared */
        if (!hit)
            break;
        if (memcmp(hit + 1, p + 1, lp - 1) == 0) {
            lua_pushinteger(L, (lua_Integer)(hit - s) + 1);
            lua_pushinteger(L, (lua_Integer)(hit - s) + (lua_Integer)lp);
            return 2;
        }
        at = hit + 1;
    }
    lua_pushnil(L);
    return 1;
}

/* string.rep that does not loop to build an empty string: repeating "" allocates nothing, so
 * neither the memory cap nor the hook would stop a count near math.maxinteger. Any other result
 * takes at least one byte per repetition, which the memory cap bounds. */
static int tw_l_rep(lua_State *L) {
    size_t l, lsep;
    const char *s = luaL_checklstring(L, 1, &l);
    lua_Integer n = luaL_checkinteger(L, 2);
    const char *sep = luaL_optlstring(L, 3, "", &lsep);
    if (n <= 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    size_t unit = l + lsep, count = (size_t)n;
    if (unit == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    if (unit < l || count > (SIZE_MAX >> 1) / unit)
        return luaL_error(L, "string.rep: resulting string too large");
    luaL_Buffer b;
    char *out = luaL_buffinitsize(L, &b, count * unit - lsep);
    for (size_t i = 0; i < count; i++) {
        memcpy(out, s, l);
        out += l;
        if (i + 1 < count) {
            memcpy(out, sep, lsep);
            out += lsep;
        }
    }
    luaL_pushresultsize(&b, count * unit - lsep);
    return 1;
}

/* table.insert, table.remove and table.move, with every element they shift or copy charged:
 * an element that is absent (nil) costs no memory, so with a __len metamethod or a huge range
 * they would otherwise loop inside one C call, out of the hook's sight. Lists must be tables. */
static int tw_l_insert(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer e = luaL_len(L, 1);
    luaL_argcheck(L, e < LUA_MAXINTEGER, 1, "table too large");
    e++; /* first empty slot */
    lua_Integer pos = e;
    switch (lua_gettop(L)) {
    case 2:
        break;
    case 3:
        pos = luaL_checkinteger(L, 2);
        luaL_argcheck(L, pos >= 1 && pos <= e, 2, "position out of bounds");
        tw_charge(L, (size_t)(e - pos));
        for (lua_Integer i = e; i > pos; i--) {
            lua_geti(L, 1, i - 1);
            lua_seti(L, 1, i);
        }
        break;
    default:
        return luaL_error(L, "wrong number of arguments to 'insert'");
    }
    lua_seti(L, 1, pos); /* the value, last on the stack */
    return 0;
}

static int tw_l_remove(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer size = luaL_len(L, 1);
    lua_Integer pos = luaL_optinteger(L, 2, size);
    if (pos != size) /* size + 1 is allowed: removes nothing */
        luaL_argcheck(L, size >= 0 && pos >= 1 && pos - 1 <= size, 2, "position out of bounds");
    lua_geti(L, 1, pos);
    if (pos >= 1 && pos < size)
        tw_charge(L, (size_t)(size - pos));
    for (; pos < size; pos++) {
        lua_geti(L, 1, pos + 1);
        lua_seti(L, 1, pos);
    }
    lua_pushnil(L);
    lua_seti(L, 1, pos);
    return 1;
}

static int tw_l_move(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
    lua_Integer t = luaL_checkinteger(L, 4);
    int tt = lua_isnoneornil(L, 5) ? 1 : 5;
    luaL_checktype(L, tt, LUA_TTABLE);
    if (e >= f) {
        luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
        lua_Integer n = e - f; /* elements to move, less one */
        luaL_argcheck(L, t <= LUA_MAXINTEGER - n, 4, "destination wrap around");
        tw_charge(L, (size_t)n + 1);
        /* copy upwards unless the ranges overlap with the destination above the source */
        if (t > e || t <= f || (tt != 1 && !lua_compare(L, 1, tt, LUA_OPEQ))) {
            for (lua_Integer i = 0; i <= n; i++) {
                lua_geti(L, 1, f + i);
                lua_seti(L, tt, t + i);
            }
        } else {
            for (lua_Integer i = n; i >= 0; i--) {
                lua_geti(L, 1, f + i);
                lua_seti(L, tt, t + i);
            }
        }
    }
    lua_pushvalue(L, tt);
    return 1;
}

/* string.match, gmatch and gsub: pattern matching, refused for the reason given at tw_l_find. */
static int tw_l_no_patterns(lua_State *L) {
    return luaL_error(L,
                      "string.%s: patterns are not available to templates (their work is "
                      "unbounded); use string.find(s, text, init, true) and string.sub",
                      lua_tostring(L, lua_upvalueindex(1)));
}

/* ---------------------------------------------------------------------------------------------
 * Values to text: integers as integers, nothing whose text could vary between runs
 * ------------------------------------------------------------------------------------------- */

/* Text of the value at idx for emit and ${...}, in buf or borrowed from Lua; NULL with *why set
 * when the value has no deterministic CUDA spelling. */
static const char *tw_value_text(lua_State *L, int idx, char *buf, size_t cap, size_t *len,
                                 const char **why) {
    switch (lua_type(L, idx)) {
    case LUA_TSTRING:
        return lua_tolstring(L, idx, len);
    case LUA_TNUMBER: {
        long long v;
        if (lua_isinteger(L, idx)) {
            v = (long long)lua_tointeger(L, idx);
        } else {
            double d = (double)lua_tonumber(L, idx);
            if (!(d == floor(d) && fabs(d) < 9.2e18)) {
                *why = "is a non-integer number (format it with flt(x))";
                return NULL;
            }
            v = (long long)d;
        }
        *len = (size_t)snprintf(buf, cap, "%lld", v);
        return buf;
    }
    case LUA_TBOOLEAN:
        *len = lua_toboolean(L, idx) ? 4 : 5;
        return lua_toboolean(L, idx) ? "true" : "false";
    case LUA_TNIL:
        *why = "is nil";
        return NULL;
    default:
        *why = "is not a string, number or boolean";
        return NULL;
    }
}

/* The calling template's position: file display name (borrowed from the engine, so it outlives
 * the call) and current line. */
static const char *tw_caller(lua_State *L, int level, long *line, const char **chunk) {
    lua_Debug ar;
    *line = 0;
    if (chunk)
        *chunk = NULL;
    if (!lua_getstack(L, level, &ar) || !lua_getinfo(L, "Sl", &ar) || ar.source[0] != '@')
        return NULL;
    tw_engine *e = tw_eng(L);
    for (int i = 0; i < e->nsrc; i++)
        if (strcmp(e->src[i].chunk, ar.source) == 0) {
            *line = ar.currentline;
            if (chunk)
                *chunk = e->src[i].chunk;
            return e->src[i].chunk + 1;
        }
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Template API: emit, emitf, cuda, num, flt, param, check, unsupported, import
 * ------------------------------------------------------------------------------------------- */

static int tw_l_emit(lua_State *L) {
    tw_engine *e = tw_eng(L);
    long line;
    const char *file = tw_caller(L, 1, &line, NULL);
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        char buf[32];
        size_t len = 0;
        const char *why = NULL;
        const char *s = tw_value_text(L, i, buf, sizeof buf, &len, &why);
        if (!s)
            return luaL_error(L, "emit: argument #%d %s", i, why);
        tw_emit_text(L, &e->out, s, len, file, &line, i == 1 ? TW_MAP_FIRST : TW_MAP_NONE);
    }
    return 0;
}

/* string.format that refuses what would make the output vary: %p and tables or functions
 * (whose default text is an address). */
static int tw_l_format(lua_State *L) {
    const char *fmt = luaL_checkstring(L, 1);
    for (const char *p = strchr(fmt, '%'); p; p = strchr(p, '%')) {
        p++;
        if (*p == '%') {
            p++;
            continue;
        }
        while (*p && strchr("-+ #0123456789.", *p))
            p++;
        if (*p == 'p')
            return luaL_error(L, "format: %%p prints an address, which is not deterministic");
    }
    int n = lua_gettop(L);
    for (int i = 2; i <= n; i++) {
        int t = lua_type(L, i);
        if (t != LUA_TNUMBER && t != LUA_TSTRING && t != LUA_TBOOLEAN && t != LUA_TNIL)
            return luaL_error(L, "format: argument #%d is a %s, whose text is not deterministic", i,
                              lua_typename(L, t));
    }
    lua_pushvalue(L, lua_upvalueindex(1)); /* the original string.format */
    lua_insert(L, 1);
    lua_call(L, n, 1);
    return 1;
}

static int tw_l_emitf(lua_State *L) {
    tw_engine *e = tw_eng(L);
    long line;
    const char *file = tw_caller(L, 1, &line, NULL);
    int n = lua_gettop(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_key_format);
    lua_insert(L, 1);
    lua_call(L, n, 1);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    tw_emit_text(L, &e->out, s, len, file, &line, TW_MAP_FIRST);
    return 0;
}

/* Builds, at the top of the stack, the table ${...} expressions see: the caller's upvalues and
 * active locals (inner shadowing outer), falling back to the template's globals. */
static void tw_push_scope(lua_State *L) {
    lua_Debug ar;
    lua_newtable(L);
    int scope = lua_gettop(L);
    lua_newtable(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_key_env);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, scope);
    if (!lua_getstack(L, 1, &ar))
        return;
    lua_getinfo(L, "f", &ar);
    const char *nm;
    for (int i = 1; (nm = lua_getupvalue(L, -1, i)) != NULL; i++) {
        if (nm[0] && nm[0] != '(' && strcmp(nm, "_ENV") != 0)
            lua_setfield(L, scope, nm);
        else
            lua_pop(L, 1);
    }
    lua_pop(L, 1);
    for (int i = 1; (nm = lua_getlocal(L, &ar, i)) != NULL; i++) {
        if (nm[0] != '(')
            lua_setfield(L, scope, nm);
        else
            lua_pop(L, 1);
    }
}

/* Evaluates the Lua expression expr[0..n) written at chunk:line with the scope at index scope;
 * leaves the value on the stack. The chunk is padded with newlines so that Lua's own messages
 * carry the template line. */
static void tw_eval(lua_State *L, const char *chunk, long line, const char *expr, size_t n,
                    int scope) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (long i = 1; i < line; i++)
        luaL_addchar(&b, '\n');
    luaL_addstring(&b, "return ");
    luaL_addlstring(&b, expr, n);
    luaL_pushresult(&b);
    size_t len;
    const char *code = lua_tolstring(L, -1, &len);
    if (luaL_loadbufferx(L, code, len, chunk, "t") != LUA_OK)
        lua_error(L);
    lua_remove(L, -2);
    lua_pushvalue(L, scope);
    lua_setupvalue(L, -2, 1);
    lua_call(L, 0, 1);
}

static int tw_l_cuda(lua_State *L) {
    tw_engine *e = tw_eng(L);
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    long line;
    const char *chunk;
    const char *file = tw_caller(L, 1, &line, &chunk);
    line = tw_source_block_line(e->src, e->nsrc, chunk, line);
    int scope = 0;
    size_t i = 0;
    while (i < n) {
        const char *open = strstr(s + i, "${");
        size_t lit_end = open ? (size_t)(open - s) : n;
        tw_emit_text(L, &e->out, s + i, lit_end - i, file, &line, TW_MAP_BLOCK);
        if (!open)
            break;
        size_t j = lit_end + 2;
        int depth = 1;
        while (j < n && depth > 0) {
            if (s[j] == '{')
                depth++;
            else if (s[j] == '}')
                depth--;
            j++;
        }
        if (depth)
            return luaL_error(L, "%s:%d: unterminated ${ in cuda block", file ? file : "?",
                              (int)line);
        const char *expr = s + lit_end + 2;
        size_t elen = j - 1 - (lit_end + 2);
        if (!scope) {
            tw_push_scope(L);
            scope = lua_gettop(L);
        }
        if (chunk)
            tw_eval(L, chunk, line, expr, elen, scope);
        else
            return luaL_error(L, "cuda: must be called from a template file");
        char buf[32];
        size_t vlen = 0;
        const char *why = NULL;
        const char *v = tw_value_text(L, -1, buf, sizeof buf, &vlen, &why);
        if (!v)
            return luaL_error(L, "%s:%d: ${%.*s} %s", file, (int)line, (int)elen, expr, why);
        tw_emit_text(L, &e->out, v, vlen, file, &line, TW_MAP_NONE);
        lua_pop(L, 1);
        for (size_t k = 0; k < elen; k++) /* an expression spanning lines */
            if (expr[k] == '\n')
                line++;
        i = j;
    }
    return 0;
}

static int tw_l_num(lua_State *L) {
    luaL_checkany(L, 1);
    char buf[32];
    size_t len = 0;
    const char *why = NULL;
    if (lua_type(L, 1) != LUA_TNUMBER)
        return luaL_error(L, "num: expected a number, got a %s", luaL_typename(L, 1));
    const char *s = tw_value_text(L, 1, buf, sizeof buf, &len, &why);
    if (!s)
        return luaL_error(L, "num: %s %s", lua_tostring(L, 1), why);
    lua_pushlstring(L, s, len);
    return 1;
}

/* A CUDA float literal for the fp32 value of x: the shortest decimal that reads back as the
 * same float (at most 9 significant digits), always with a '.' or an exponent, and the f suffix. */
static int tw_l_flt(lua_State *L) {
    double d = (double)luaL_checknumber(L, 1);
    float f = (float)d;
    if (!isfinite(f))
        return luaL_error(L, "flt: %s has no finite float literal", lua_tostring(L, 1));
    char buf[48];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f)
            break;
    }
    if (!strpbrk(buf, ".e"))
        strcat(buf, ".0");
    strcat(buf, "f");
    lua_pushstring(L, buf);
    return 1;
}

static int tw_l_p_index(lua_State *L) {
    if (lua_type(L, 2) != LUA_TSTRING)
        return 0;
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) == LUA_TNIL)
        return luaL_error(L,
                          "template parameter '%s' was not given (pass it, or read it with "
                          "param(\"%s\", default))",
                          lua_tostring(L, 2), lua_tostring(L, 2));
    return 1;
}

static int tw_l_p_newindex(lua_State *L) {
    return luaL_error(L, "template parameters are read-only (P.%s)", luaL_tolstring(L, 2, NULL));
}

static int tw_l_param(lua_State *L) {
    luaL_checkstring(L, 1);
    lua_settop(L, 2);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_key_p);
    lua_getmetatable(L, -1);
    lua_getfield(L, -1, "__data");
    lua_pushvalue(L, 1);
    if (lua_rawget(L, -2) == LUA_TNIL)
        lua_pushvalue(L, 2);
    return 1;
}

/* Formats arguments from index `first` with the safe format into one message. */
static const char *tw_message(lua_State *L, int first) {
    int n = lua_gettop(L);
    if (n < first)
        return "check failed";
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_key_format);
    for (int i = first; i <= n; i++)
        lua_pushvalue(L, i);
    lua_call(L, n - first + 1, 1);
    return lua_tostring(L, -1);
}

static int tw_l_check(lua_State *L) {
    luaL_checkany(L, 1);
    if (lua_toboolean(L, 1))
        return 0;
    return luaL_error(L, "%s", tw_message(L, 2));
}

static int tw_l_unsupported(lua_State *L) {
    tw_engine *e = tw_eng(L);
    e->unsupported = 1;
    return luaL_error(L, "unsupported: %s", tw_message(L, 1));
}

static int tw_l_import(lua_State *L) {
    tw_engine *e = tw_eng(L);
    const char *name = luaL_checkstring(L, 1);
    if (!tw_source_valid_name(name))
        return luaL_error(L, "import: bad module name '%s' (letters, digits, _)", name);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_key_modules);
    int t = lua_getfield(L, -1, name);
    if (t == LUA_TBOOLEAN && !lua_toboolean(L, -1))
        return luaL_error(L, "import: module '%s' imports itself (a cycle)", name);
    if (t != LUA_TNIL)
        return 1;
    lua_pop(L, 1);
    lua_pushboolean(L, 0); /* "loading": detects cycles */
    lua_setfield(L, -2, name);
    char path[4096], display[160];
    const char *why = strerror(ENOENT);
    tw_source *s = NULL;
    if (tw_template_locate(e->dir, name, ".lua", path, sizeof path, display, sizeof display))
        s = tw_source_read(e->src, &e->nsrc, path, display, &why);
    if (!s)
        return luaL_error(L, "import: cannot read module '%s' (%s: %s)", name, display, why);
    if (luaL_loadbufferx(L, s->text, s->len, s->chunk, "t") != LUA_OK)
        return lua_error(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_key_env);
    lua_setupvalue(L, -2, 1);
    lua_call(L, 0, 1);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushboolean(L, 1);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, name);
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * Deterministic replacements for pairs and tostring
 * ------------------------------------------------------------------------------------------- */

typedef struct tw_keyrec {
    int is_str;
    int is_int;
    double num;
    const char *s;
    size_t len;
    int idx; /* position in the unsorted key list */
} tw_keyrec;

static int tw_keyrec_cmp(const void *pa, const void *pb) {
    const tw_keyrec *a = pa, *b = pb;
    if (a->is_str != b->is_str)
        return a->is_str - b->is_str; /* numbers first */
    if (!a->is_str) {
        if (a->num != b->num)
            return a->num < b->num ? -1 : 1;
        return a->is_int - b->is_int;
    }
    size_t m = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->s, b->s, m);
    if (c)
        return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

static int tw_l_pairs_next(lua_State *L) {
    lua_Integer i = lua_tointeger(L, lua_upvalueindex(3)) + 1;
    if (lua_rawgeti(L, lua_upvalueindex(2), i) == LUA_TNIL)
        return 1;
    lua_pushinteger(L, i);
    lua_replace(L, lua_upvalueindex(3));
    lua_pushvalue(L, -1);
    lua_rawget(L, lua_upvalueindex(1));
    return 2;
}

/* pairs in a fixed order (numbers ascending, then strings by bytes), so no output depends on the
 * per-process hash seed. Keys of other types are refused. */
static int tw_l_pairs(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_key_p);
    if (lua_rawequal(L, 1, -1)) { /* P: iterate its hidden data */
        lua_getmetatable(L, -1);
        lua_getfield(L, -1, "__data");
        lua_replace(L, 1);
    }
    lua_settop(L, 1);
    lua_newtable(L); /* 2: keys, unsorted */
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pop(L, 1);
        int t = lua_type(L, -1);
        if (t != LUA_TNUMBER && t != LUA_TSTRING)
            return luaL_error(L, "pairs: a %s key has no deterministic order", lua_typename(L, t));
        if (n == 0x7ffffff)
            return luaL_error(L, "pairs: table too large");
        lua_pushvalue(L, -1);
        lua_rawseti(L, 2, ++n);
    }
    tw_keyrec *k = lua_newuserdatauv(L, sizeof *k * (size_t)(n ? n : 1), 0); /* 3 */
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        k[i].idx = i + 1;
        k[i].is_str = lua_type(L, -1) == LUA_TSTRING;
        k[i].is_int = !k[i].is_str && lua_isinteger(L, -1);
        k[i].num = k[i].is_str ? 0 : (double)lua_tonumber(L, -1);
        k[i].s = k[i].is_str ? lua_tolstring(L, -1, &k[i].len) : NULL; /* kept alive by keys */
        lua_pop(L, 1);
    }
    qsort(k, (size_t)n, sizeof *k, tw_keyrec_cmp);
    lua_pushvalue(L, 1);      /* upvalue 1: the table */
    lua_createtable(L, n, 0); /* upvalue 2: sorted keys */
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, k[i].idx);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushinteger(L, 0); /* upvalue 3: position */
    lua_pushcclosure(L, tw_l_pairs_next, 3);
    lua_pushnil(L);
    lua_pushnil(L);
    return 3;
}

static int tw_l_tostring(lua_State *L) {
    luaL_checkany(L, 1);
    int t = lua_type(L, 1);
    if (t != LUA_TNUMBER && t != LUA_TSTRING && t != LUA_TBOOLEAN && t != LUA_TNIL &&
        luaL_getmetafield(L, 1, "__tostring") == LUA_TNIL)
        return luaL_error(L, "tostring: a %s has no deterministic text", lua_typename(L, t));
    lua_settop(L, 1);
    luaL_tolstring(L, 1, NULL);
    return 1;
}

static int tw_l_env_index(lua_State *L) {
    return luaL_error(L, "unknown global '%s' (templates see only the API in templates/README.md)",
                      luaL_tolstring(L, 2, NULL));
}

/* ---------------------------------------------------------------------------------------------
 * Set-up and the protected main
 * ------------------------------------------------------------------------------------------- */

static void tw_open_lib(lua_State *L, const char *name, lua_CFunction open) {
    luaL_requiref(L, name, open, 1);
    lua_pop(L, 1);
}

/* Builds the sandbox environment; leaves it in the registry. */
static void tw_setup(lua_State *L, tw_engine *e) {
    tw_open_lib(L, "_G", luaopen_base);
    tw_open_lib(L, LUA_STRLIBNAME, luaopen_string);
    tw_open_lib(L, LUA_TABLIBNAME, luaopen_table);
    tw_open_lib(L, LUA_MATHLIBNAME, luaopen_math);
    tw_open_lib(L, LUA_UTF8LIBNAME, luaopen_utf8);

    lua_newtable(L); /* env */
    int env = lua_gettop(L);
    lua_pushglobaltable(L);
    static const char *const keep[] = {"assert",       "error",    "ipairs",   "select",
                                       "type",         "tonumber", "rawequal", "rawlen",
                                       "getmetatable", "_VERSION"};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        lua_getfield(L, -1, keep[i]);
        lua_setfield(L, env, keep[i]);
    }
    lua_pushcfunction(L, tw_l_setmetatable);
    lua_setfield(L, env, "setmetatable");
    lua_pop(L, 1);

    /* Library tables are private to this state, so they are trimmed in place: the string
     * metatable (s:format(...)) then sees the same safe functions. */
    lua_getglobal(L, LUA_STRLIBNAME);
    lua_getfield(L, -1, "format");
    lua_pushcclosure(L, tw_l_format, 1);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &tw_key_format);
    lua_setfield(L, -2, "format");
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    lua_pushcfunction(L, tw_l_find);
    lua_setfield(L, -2, "find");
    lua_pushcfunction(L, tw_l_rep);
    lua_setfield(L, -2, "rep");
    static const char *const patterned[] = {"match", "gmatch", "gsub"};
    for (size_t i = 0; i < sizeof patterned / sizeof patterned[0]; i++) {
        lua_pushstring(L, patterned[i]);
        lua_pushcclosure(L, tw_l_no_patterns, 1);
        lua_setfield(L, -2, patterned[i]);
    }
    lua_setfield(L, env, "string");
    lua_getglobal(L, LUA_MATHLIBNAME);
    lua_pushnil(L);
    lua_setfield(L, -2, "random"); /* seeded from the clock in 5.4 */
    lua_pushnil(L);
    lua_setfield(L, -2, "randomseed");
    lua_setfield(L, env, "math");
    lua_getglobal(L, LUA_TABLIBNAME);
    static const luaL_Reg charged[] = {
        {"insert", tw_l_insert}, {"remove", tw_l_remove}, {"move", tw_l_move}, {NULL, NULL}};
    luaL_setfuncs(L, charged, 0);
    lua_setfield(L, env, "table");
    lua_getglobal(L, LUA_UTF8LIBNAME);
    lua_setfield(L, env, "utf8");

    static const luaL_Reg api[] = {{"pairs", tw_l_pairs},   {"tostring", tw_l_tostring},
                                   {"emit", tw_l_emit},     {"emitf", tw_l_emitf},
                                   {"cuda", tw_l_cuda},     {"num", tw_l_num},
                                   {"flt", tw_l_flt},       {"param", tw_l_param},
                                   {"check", tw_l_check},   {"unsupported", tw_l_unsupported},
                                   {"import", tw_l_import}, {NULL, NULL}};
    luaL_setfuncs(L, api, 0);
    lua_pushstring(L, e->name);
    lua_setfield(L, env, "TEMPLATE");

    /* P: an empty proxy whose metatable serves the parameters read-only. */
    lua_newtable(L);
    lua_newtable(L);
    lua_createtable(L, 0, (int)e->nparams);
    for (size_t i = 0; i < e->nparams; i++) {
        if (e->params[i].sval)
            lua_pushstring(L, e->params[i].sval);
        else
            lua_pushinteger(L, (lua_Integer)e->params[i].ival);
        lua_setfield(L, -2, e->params[i].key);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "__data");
    lua_pushcclosure(L, tw_l_p_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, tw_l_p_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushstring(L, "the parameter table is read-only");
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &tw_key_p);
    lua_setfield(L, env, "P");

    lua_newtable(L);
    lua_pushcfunction(L, tw_l_env_index);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, env);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &tw_key_env);
    lua_newtable(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &tw_key_modules);
}

/* The header line: template name and parameters sorted by key, so a reader of the rendered source
 * (or of a cache entry) sees what produced it. */
static void tw_header(lua_State *L, tw_engine *e) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, "// generated by twellrt from ");
    luaL_addstring(&b, e->src[0].chunk + 1); /* display name: templates/<group>/<name>.cu.lua */
    luaL_addstring(&b, ":");
    const char *last = "";
    for (size_t k = 0; k < e->nparams; k++) { /* selection in key order; nparams is small */
        const tw_param *best = NULL;
        for (size_t i = 0; i < e->nparams; i++)
            if (strcmp(e->params[i].key, last) > 0 &&
                (!best || strcmp(e->params[i].key, best->key) < 0))
                best = &e->params[i];
        if (!best)
            break;
        char v[32];
        luaL_addchar(&b, ' ');
        luaL_addstring(&b, best->key);
        luaL_addchar(&b, '=');
        if (best->sval) {
            luaL_addstring(&b, best->sval);
        } else {
            snprintf(v, sizeof v, "%lld", best->ival);
            luaL_addstring(&b, v);
        }
        last = best->key;
    }
    luaL_addchar(&b, '\n');
    luaL_pushresult(&b);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    long line = 0;
    tw_emit_text(L, &e->out, s, len, NULL, &line, TW_MAP_NONE);
    lua_pop(L, 1);
}

static int tw_main(lua_State *L) {
    tw_engine *e = tw_eng(L);
    tw_setup(L, e);
    tw_header(L, e);
    const tw_source *s = &e->src[0];
    if (luaL_loadbufferx(L, s->text, s->len, s->chunk, "t") != LUA_OK)
        return lua_error(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_key_env);
    lua_setupvalue(L, -2, 1);
    lua_call(L, 0, 0);
    return 0;
}

/* Message handler: when the error passed through more than one template frame (a helper), lists
 * them innermost first, so the caller's line is known too. */
static int tw_msgh(lua_State *L) {
    tw_engine *e = tw_eng(L);
    e->raised[0] = '\0';
    char stack[1024] = "";
    size_t used = 0;
    int frames = 0;
    lua_Debug ar;
    for (int lvl = 1; lvl < 40 && lua_getstack(L, lvl, &ar); lvl++) {
        if (!lua_getinfo(L, "Sl", &ar) || ar.source[0] != '@' || ar.currentline <= 0)
            continue;
        if (!frames) /* where the error was raised, for a value that carries no position */
            snprintf(e->raised, sizeof e->raised, "%s:%d", ar.source + 1, ar.currentline);
        if (lua_type(L, 1) != LUA_TSTRING)
            break;
        if (used < sizeof stack) {
            int w = snprintf(stack + used, sizeof stack - used, "%s%s:%d", frames ? " <- " : "",
                             ar.source + 1, ar.currentline);
            used += w > 0 ? (size_t)w : 0;
        }
        frames++;
    }
    if (lua_type(L, 1) == LUA_TSTRING && frames >= 2)
        lua_pushfstring(L, "%s\n  template stack: %s", lua_tostring(L, 1), stack);
    return 1;
}

twell_status tw_lua_render(const char *dir, const char *name, const tw_param *params,
                           size_t nparams, const tw_lua_limits *limits, char **src, size_t *len,
                           char **err) {
    *src = NULL;
    *len = 0;
    *err = NULL;
    tw_engine e;
    memset(&e, 0, sizeof e);
    e.mem_cap = limits->mem_bytes;
    e.instr_cap = limits->instructions;
    e.seconds = limits->seconds > 0 ? limits->seconds : TW_LUA_DEFAULT_SECONDS;
    e.deadline = tw_clock() + e.seconds;
    e.out.max = limits->out_bytes;
    e.out.bol = 1;
    e.out.cline = 1;
    e.dir = dir;
    e.name = name;
    e.params = params;
    e.nparams = nparams;

    char path[4096], display[160];
    const char *why = NULL;
    int found =
        tw_template_locate(dir, name, ".cu.lua", path, sizeof path, display, sizeof display);
    if (!found || !tw_source_read(e.src, &e.nsrc, path, display, &why)) {
        int en = found ? errno : ENOENT;
        if (en == ENOENT || en == ENOTDIR)
            *err = tw_fmt("template '%s' not found: cannot read %s (%s)", name, path,
                          why ? why : strerror(en));
        else
            *err = tw_fmt("cannot read %s (%s): %s", display, path, why);
        return en == ENOENT || en == ENOTDIR ? TWELL_ERR_NOT_FOUND
               : en == ENOMEM                ? TWELL_ERR_NO_MEMORY
                                             : TWELL_ERR_IO;
    }

    twell_status st = TWELL_OK;
    lua_State *L = lua_newstate(tw_lalloc, &e);
    if (!L) {
        st = e.mem_refused ? TWELL_ERR_TEMPLATE : TWELL_ERR_NO_MEMORY;
        *err = tw_fmt("%s: cannot create a Lua state", display);
        goto done;
    }
    e.L = L;
    lua_sethook(L, tw_hook, LUA_MASKCOUNT, TW_HOOK_EVERY);
    lua_pushcfunction(L, tw_msgh);
    lua_pushcfunction(L, tw_main);
    int rc = lua_pcall(L, 0, 0, 1);
    if (rc == LUA_OK) {
        if (!e.out.buf) { /* cannot happen: the header line is always written */
            st = TWELL_ERR_INTERNAL;
            *err = tw_fmt("%s: rendered nothing", display);
        }
    } else if (rc == LUA_ERRMEM && e.timed_out) {
        st = TWELL_ERR_TEMPLATE;
        *err = tw_fmt("%s: template exceeded the time limit (%d ms)",
                      e.where[0] ? e.where : display, (int)(e.seconds * 1e3));
    } else if (rc == LUA_ERRMEM) {
        st = e.mem_refused ? TWELL_ERR_TEMPLATE : TWELL_ERR_NO_MEMORY;
        *err = e.mem_refused ? tw_fmt("%s: template exceeded the memory cap (%zu MiB)",
                                      e.where[0] ? e.where : display, e.mem_cap >> 20)
                             : tw_fmt("%s: out of host memory while rendering", display);
    } else {
        st = e.unsupported ? TWELL_ERR_UNSUPPORTED : TWELL_ERR_TEMPLATE;
        /* lua_tostring never calls __tostring (a template's metamethod could loop here) */
        const char *m = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
        const char *at = e.raised[0] ? e.raised : e.where[0] ? e.where : display;
        if (!m) /* error(nil), error({}): name the place, not the value */
            *err =
                tw_fmt("%s: error raised with a %s value, not a message", at, luaL_typename(L, -1));
        else if (strncmp(m, "templates/", 10) != 0) /* error("x", 0) has no position */
            *err = tw_fmt("%s: %s", at, m);
        else
            *err = tw_fmt("%s", m);
    }
    lua_close(L);
done:
    if (st == TWELL_OK) {
        *src = e.out.buf;
        *len = e.out.len;
    } else {
        free(e.out.buf);
    }
    for (int i = 0; i < e.nsrc; i++) {
        free(e.src[i].chunk);
        free(e.src[i].text);
    }
    return st;
}
