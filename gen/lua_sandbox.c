/*
 * lua_sandbox.c — the library a template sees: a safe subset of Lua's base, string, table, math
 * and utf8 libraries, with bounded replacements for the functions whose work the instruction hook
 * cannot see and deterministic ones (pairs, tostring, string.format) for those whose results
 * could vary between runs. Nothing that reaches the file system, the OS or the clock.
 */
#include "lua_state.h"

#include <lauxlib.h>
#include <lualib.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
        tw_lua_charge(L, (size_t)((hit ? hit : end) - at) + lp); /* scanned, then compared */
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
        tw_lua_charge(L, (size_t)(e - pos));
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
        tw_lua_charge(L, (size_t)(size - pos));
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
        tw_lua_charge(L, (size_t)n + 1);
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
 * Deterministic replacements for string.format, pairs and tostring
 * ------------------------------------------------------------------------------------------- */

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
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_lua_key_p);
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

/* ---------------------------------------------------------------------------------------------
 * The environment's library
 * ------------------------------------------------------------------------------------------- */

static void tw_open_lib(lua_State *L, const char *name, lua_CFunction open) {
    luaL_requiref(L, name, open, 1);
    lua_pop(L, 1);
}

int tw_lua_sandbox_open(lua_State *L) {
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
    lua_rawsetp(L, LUA_REGISTRYINDEX, &tw_lua_key_format);
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

    static const luaL_Reg ordered[] = {
        {"pairs", tw_l_pairs}, {"tostring", tw_l_tostring}, {NULL, NULL}};
    luaL_setfuncs(L, ordered, 0);
    return env;
}
