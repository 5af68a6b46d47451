/*
 * lua_api.c — the authoring API templates are written in (templates/README.md): emit, emitf and
 * cuda blocks with ${...} interpolation into the rendered source, num and flt literals, the
 * read-only parameters P and param, check and unsupported, and import of template modules.
 */
#include "lua_state.h"

#include <lauxlib.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tw_lua_emit_text(lua_State *L, tw_out *o, const char *s, size_t n, const char *file,
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
        tw_lua_emit_text(L, &e->out, s, len, file, &line, i == 1 ? TW_MAP_FIRST : TW_MAP_NONE);
    }
    return 0;
}

static int tw_l_emitf(lua_State *L) {
    tw_engine *e = tw_eng(L);
    long line;
    const char *file = tw_caller(L, 1, &line, NULL);
    int n = lua_gettop(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_lua_key_format);
    lua_insert(L, 1);
    lua_call(L, n, 1);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    tw_lua_emit_text(L, &e->out, s, len, file, &line, TW_MAP_FIRST);
    return 0;
}

/* Builds, at the top of the stack, the table ${...} expressions see: the caller's upvalues and
 * active locals (inner shadowing outer), falling back to the template's globals. */
static void tw_push_scope(lua_State *L) {
    lua_Debug ar;
    lua_newtable(L);
    int scope = lua_gettop(L);
    lua_newtable(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_lua_key_env);
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
        tw_lua_emit_text(L, &e->out, s + i, lit_end - i, file, &line, TW_MAP_BLOCK);
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
        tw_lua_emit_text(L, &e->out, v, vlen, file, &line, TW_MAP_NONE);
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
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_lua_key_p);
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
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_lua_key_format);
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
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_lua_key_modules);
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
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tw_lua_key_env);
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

void tw_lua_api_open(lua_State *L, int env, tw_engine *e) {
    static const luaL_Reg api[] = {{"emit", tw_l_emit},     {"emitf", tw_l_emitf},
                                   {"cuda", tw_l_cuda},     {"num", tw_l_num},
                                   {"flt", tw_l_flt},       {"param", tw_l_param},
                                   {"check", tw_l_check},   {"unsupported", tw_l_unsupported},
                                   {"import", tw_l_import}, {NULL, NULL}};
    for (const luaL_Reg *r = api; r->name; r++) {
        lua_pushcfunction(L, r->func);
        lua_setfield(L, env, r->name);
    }
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
    lua_rawsetp(L, LUA_REGISTRYINDEX, &tw_lua_key_p);
    lua_setfield(L, env, "P");
}
