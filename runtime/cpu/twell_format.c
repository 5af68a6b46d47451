/* twell_format.c — host-side packing and unpacking of TwELL row-tiles (the layout is in
 * twellrt.h). Used by the CPU backend, the tests and the GPU result checks. */
#include "twell_format.h"

#include <string.h>

uint32_t tw_pack_row_tile(const uint16_t *vals, uint32_t T, uint32_t C, uint32_t col0,
                          uint32_t *dst) {
    uint32_t words = T / C, slots = words - 1, count = 0;
    memset(dst, 0, (size_t)words * sizeof *dst);
    for (uint32_t j = 0; j < T; j++) {
        uint16_t v = vals[j];
        if (v == 0 || (v & 0x8000u)) /* active iff positive */
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
    for (uint32_t t = 0; t < tiles; t++) {
        const uint32_t *w = row + (size_t)t * words;
        uint32_t count = w[0];
        if (count > s->T)
            return -1;
        uint32_t stored = count < slots ? count : slots;
        uint32_t prev = 0;
        for (uint32_t i = 0; i < stored; i++) {
            uint32_t col = w[1 + i] & 0xffffu;
            uint16_t v = (uint16_t)(w[1 + i] >> 16);
            /* columns inside the tile, strictly ascending, values positive */
            if (col < t * s->T || col >= (t + 1) * s->T || (i > 0 && col <= prev) || v == 0 ||
                (v & 0x8000u))
                return -1;
            dense[col] = v;
            prev = col;
        }
        for (uint32_t i = stored; i < slots; i++)
            if (w[1 + i] != 0)
                return -1;
        if (count > slots)
            overflowing++;
    }
    return overflowing;
}
