/* twell_format.c — host-side packing, unpacking and checking of TwELL row-tiles (the layout is in
 * twellrt.h). Used by the CPU backend, the CUDA packed check's message, the tests and the GPU
 * result checks. */
#include "twell_format.h"

#include "half.h"

#include <stdio.h>
#include <string.h>

uint32_t tw_pack_row_tile(const uint16_t *vals, uint32_t T, uint32_t C, uint32_t col0,
                          uint32_t *dst) {
    uint32_t words = T / C, slots = words - 1, count = 0;
    memset(dst, 0, (size_t)words * sizeof *dst);
    for (uint32_t j = 0; j < T; j++) {
        uint16_t v = vals[j];
        if (!tw_half_active(v)) /* active iff positive (the canonical NaN included) */
            continue;
        if (count < slots)
            dst[1 + count] = ((uint32_t)v << 16) | ((col0 + j) & 0xffffu);
        count++;
    }
    dst[0] = count;
    return count;
}

int tw_unpack_row(const twell_shape *s, const uint32_t *row, uint16_t *dense) {
    uint32_t words = s->T / s->C, slots = words - 1, tiles = s->N / s->T;
    int overflowing = 0;
    memset(dense, 0, (size_t)s->N * sizeof *dense);
    for (uint32_t t = 0; t < tiles; t++)
        if (tw_packed_tile_fault(s, row + (size_t)t * words, t, TW_PKF_ALL, NULL) >= 0)
            return -1;
    for (uint32_t t = 0; t < tiles; t++) {
        const uint32_t *w = row + (size_t)t * words;
        uint32_t count = w[0], stored = count < slots ? count : slots;
        for (uint32_t i = 0; i < stored; i++)
            dense[w[1 + i] & 0xffffu] = (uint16_t)(w[1 + i] >> 16);
        if (count > slots)
            overflowing++;
    }
    return overflowing;
}

unsigned tw_packed_word_faults(const twell_shape *s, const uint32_t *tile, uint32_t t,
                               uint32_t slot) {
    const uint32_t slots = s->T / s->C - 1, count = tile[0];
    if (slot == 0)
        return count > s->T ? TW_PKF_COUNT : 0u;
    const uint32_t stored = count < slots ? count : slots, e = tile[slot];
    if (slot > stored)
        return e != 0 ? TW_PKF_UNUSED : 0u;
    unsigned f = 0;
    const uint16_t v = (uint16_t)(e >> 16);
    const uint32_t col = e & 0xffffu;
    if (e == 0)
        f |= TW_PKF_EMPTY;
    if (!tw_half_slot_ok(s->dtype, v))
        f |= TW_PKF_VALUE;
    if (col < t * s->T || col >= (t + 1) * s->T)
        f |= TW_PKF_COLUMN;
    if (slot > 1 && col <= (tile[slot - 1] & 0xffffu))
        f |= TW_PKF_ORDER;
    return f;
}

int tw_packed_tile_fault(const twell_shape *s, const uint32_t *tile, uint32_t t, unsigned mask,
                         unsigned *fault) {
    const uint32_t words = s->T / s->C;
    for (uint32_t i = 0; i < words; i++) {
        unsigned f = tw_packed_word_faults(s, tile, t, i) & mask;
        if (f) {
            if (fault)
                *fault = f & (~f + 1u); /* the lowest bit */
            return (int)i;
        }
    }
    return -1;
}

int tw_packed_find_fault(const twell_shape *s, size_t M, const uint32_t *packed, unsigned mask,
                         tw_packed_fault *out) {
    const uint32_t words = s->T / s->C, tiles = s->N / s->T;
    for (size_t m = 0; m < M; m++)
        for (uint32_t t = 0; t < tiles; t++) {
            const uint32_t *tw = packed + m * (s->N / s->C) + (size_t)t * words;
            unsigned f = 0;
            int i = tw_packed_tile_fault(s, tw, t, mask, &f);
            if (i < 0)
                continue;
            out->row = m;
            out->tile = t;
            out->slot = (uint32_t)i;
            out->word = m * (s->N / s->C) + (size_t)t * words + (size_t)i;
            out->value = tw[i];
            out->count = tw[0];
            out->prev = i >= 2 ? tw[i - 1] : 0u;
            out->fault = f;
            return 1;
        }
    return 0;
}

/* "+0", "-0", "NaN", "-NaN", "+Inf", "-Inf" or the number itself. */
static void tw_value_name(twell_dtype dt, uint16_t v, char *buf, size_t n) {
    const uint16_t em = tw_half_exp_mask(dt);
    if ((v & 0x7fffu) == 0)
        snprintf(buf, n, "%s0", (v & 0x8000u) ? "-" : "+");
    else if (tw_half_is_nan(dt, v))
        snprintf(buf, n, "%sNaN", (v & 0x8000u) ? "-" : "");
    else if ((v & em) == em)
        snprintf(buf, n, "%s", (v & 0x8000u) ? "-Inf" : "+Inf");
    else
        snprintf(buf, n, "%.6g", (double)tw_half_to_f32(dt, v));
}

void tw_packed_fault_describe(const twell_shape *s, const tw_packed_fault *f, char *buf, size_t n) {
    const uint32_t slots = s->T / s->C - 1, col = f->value & 0xffffu;
    const uint16_t v = (uint16_t)(f->value >> 16);
    char vname[32], what[160];
    tw_value_name(s->dtype, v, vname, sizeof vname);
    switch (f->fault) {
    case TW_PKF_COUNT:
        snprintf(what, sizeof what, "the count %u exceeds T = %u", f->value, s->T);
        break;
    case TW_PKF_EMPTY:
        snprintf(what, sizeof what, "the slot is empty but the count is %u", f->count);
        break;
    case TW_PKF_VALUE:
        snprintf(what, sizeof what,
                 "value 0x%04x is %s, not an activation (positive, +Inf or the canonical NaN "
                 "0x%04x)",
                 v, vname, tw_half_nan(s->dtype));
        break;
    case TW_PKF_COLUMN:
        snprintf(what, sizeof what, "column %u is outside the row-tile's columns %u..%u", col,
                 f->tile * s->T, (f->tile + 1) * s->T - 1);
        break;
    case TW_PKF_ORDER:
        snprintf(what, sizeof what, "column %u is not above slot %u's column %u (ascending order)",
                 col, f->slot - 1, f->prev & 0xffffu);
        break;
    case TW_PKF_UNUSED:
        snprintf(what, sizeof what, "the slot is past the count %u (%u slots used) but not 0",
                 f->count, f->count < slots ? f->count : slots);
        break;
    default:
        snprintf(what, sizeof what, "fault 0x%x", f->fault);
        break;
    }
    snprintf(buf, n, "packed word %zu (row %zu, row-tile %u, slot %u) is 0x%08x: %s", f->word,
             f->row, f->tile, f->slot, f->value, what);
}
