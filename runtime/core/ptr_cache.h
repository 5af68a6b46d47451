/*
 * ptr_cache.h — a plan's memory of the device addresses it has accepted, so that a call whose
 * tensors were all seen before asks the driver nothing about them (twell_ctx_options
 * .pointer_cache; the contract is twellrt.h's "Pointer checks"). Pure: tested on the CPU.
 */
#ifndef TWELL_PTR_CACHE_H
#define TWELL_PTR_CACHE_H

#include <stdint.h>

#define TW_PTR_CACHE_N 16 /* addresses remembered: a plan's x, packed, weights and y, with room */

/* Least recently used replacement: a plan's weights are used by every call and stay, while the
 * activations' addresses (new each step under a caching allocator) take turns in the rest. */
typedef struct tw_ptr_cache {
    uintptr_t addr[TW_PTR_CACHE_N]; /* 0: an empty slot (NULL is never accepted) */
    uint32_t used[TW_PTR_CACHE_N];  /* tick of the slot's last hit or insertion */
    uint32_t tick;                  /* advances on every lookup; wraps harmlessly (ages subtract) */
} tw_ptr_cache;

/* Empties c (also the initial state: a zeroed cache is empty). */
void tw_ptr_cache_clear(tw_ptr_cache *c);

/* 1 when p is remembered (and marks it most recently used), else 0. p NULL: 0. */
int tw_ptr_cache_hit(tw_ptr_cache *c, const void *p);

/* Remembers p, replacing the least recently used address when c is full (the empty slot with the
 * lowest index first). p already remembered or NULL: nothing changes. */
void tw_ptr_cache_add(tw_ptr_cache *c, const void *p);

#endif /* TWELL_PTR_CACHE_H */
