/*
 * lua_limits.c — the resource limits of one render: the Lua heap's allocator with its cap, the
 * instruction budget (a count hook, and a charge for C work the hook cannot see) and the
 * wall-clock deadline behind both.
 */
#include "lua_state.h"

#include <lauxlib.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Allocations at least this large also check the clock: work that is large per VM instruction
 * (copying a big string) allocates its result. */
#define TW_CLOCK_ALLOC_BYTES ((size_t)64 << 10)

double tw_lua_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void *tw_lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
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
        double now = tw_lua_clock();
        /* Past the deadline the hook is armed for the next instruction, which reports it with
         * the template line (lua_sethook may be called at any point); should the time still
         * run on inside C for another whole limit after that, allocations are refused, a cruder
         * stop without a line. Counting from the arming, not from the deadline, keeps the line
         * when the process was descheduled across the deadline (a loaded machine). */
        if (e->armed_at > 0.0 && now > e->armed_at + e->seconds) {
            e->timed_out = 1;
            return NULL;
        }
        if (now > e->deadline && e->L && e->armed_at == 0.0) {
            e->armed_at = now;
            lua_sethook(e->L, tw_lua_hook, LUA_MASKCOUNT, 1);
        }
    }
    void *p = realloc(ptr, nsize);
    if (p)
        e->mem_used = e->mem_used - old + nsize;
    return p;
}

void tw_lua_hook(lua_State *L, lua_Debug *ar) {
    tw_engine *e = tw_eng(L);
    if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0 && ar->source[0] == '@')
        snprintf(e->where, sizeof e->where, "%s:%d", ar->source + 1, ar->currentline);
    e->instr += TW_HOOK_EVERY;
    if (e->instr > e->instr_cap) {
        lua_pushfstring(L, "%s: template exceeded the instruction limit (%d million)",
                        e->where[0] ? e->where : "?", (int)(e->instr_cap / 1000000u));
        lua_error(L);
    }
    if (tw_lua_clock() > e->deadline) {
        lua_pushfstring(L, "%s: template exceeded the time limit (%d ms)",
                        e->where[0] ? e->where : "?", (int)(e->seconds * 1e3));
        lua_error(L);
    }
}

void tw_lua_charge(lua_State *L, size_t n) {
    tw_engine *e = tw_eng(L);
    e->instr += n;
    if (e->instr > e->instr_cap) {
        luaL_where(L, 1);
        lua_pushfstring(L, "%stemplate exceeded the instruction limit (%d million)",
                        lua_tostring(L, -1), (int)(e->instr_cap / 1000000u));
        lua_error(L);
    }
    if (tw_lua_clock() > e->deadline) {
        luaL_where(L, 1);
        lua_pushfstring(L, "%stemplate exceeded the time limit (%d ms)", lua_tostring(L, -1),
                        (int)(e->seconds * 1e3));
        lua_error(L);
    }
}
