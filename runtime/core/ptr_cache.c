/* ptr_cache.c — the least-recently-used set of accepted device addresses (ptr_cache.h). */
#include "ptr_cache.h"

#include <string.h>

void tw_ptr_cache_clear(tw_ptr_cache *c) { memset(c, 0, sizeof *c); }

int tw_ptr_cache_hit(tw_ptr_cache *c, const void *p) {
    uintptr_t a = (uintptr_t)p;
    c->tick++;
    if (!a)
        return 0;
    for (int i = 0; i < TW_PTR_CACHE_N; i++)
        if (c->addr[i] == a) {
            c->used[i] = c->tick;
            return 1;
        }
    return 0;
}

void tw_ptr_cache_add(tw_ptr_cache *c, const void *p) {
    uintptr_t a = (uintptr_t)p;
    if (!a)
        return;
    int victim = -1;
    uint32_t oldest = 0;
    for (int i = 0; i < TW_PTR_CACHE_N; i++) {
        if (c->addr[i] == a)
            return;
        if (c->addr[i] == 0) {
            if (victim < 0 || c->addr[victim] != 0)
                victim = i; /* the first empty slot wins over any occupied one */
            continue;
        }
        uint32_t age = c->tick - c->used[i]; /* unsigned: right across a wrap of tick */
        if (victim < 0 || (c->addr[victim] != 0 && age > oldest)) {
            victim = i;
            oldest = age;
        }
    }
    c->addr[victim] = a;
    c->used[victim] = c->tick;
}
