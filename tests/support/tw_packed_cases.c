/* tw_packed_cases.c — malformed packed buffers (see tw_packed_cases.h). */
#include "tw_packed_cases.h"

#include <stdio.h>

/* 16-bit patterns of -1, a positive NaN of another payload than the canonical one, the negative
 * canonical NaN, -Inf in dtype dt (+Inf and the canonical NaN are valid slot values). */
typedef struct {
    uint16_t minus_one, nan_payload, nan_neg, ninf;
} tw_pk_bits;

static tw_pk_bits tw_pk_bits_of(twell_dtype dt) {
    if (dt == TWELL_DTYPE_BF16)
        return (tw_pk_bits){0xbf80u, 0x7fc1u, 0xffc0u, 0xff80u};
    return (tw_pk_bits){0xbc00u, 0x7e01u, 0xfe00u, 0xfc00u};
}

static const tw_pk_case tw_pk_cases[] = {
    {"value +0 (column kept)", "is +0, not an activation", 0},
    {"value -0", "is -0, not an activation", 0},
    {"value -1", "is -1, not an activation", 0},
    {"value NaN of another payload", "is NaN, not an activation", 0},
    {"value -NaN", "is -NaN, not an activation", 0},
    {"value -Inf", "is -Inf, not an activation", 0},
    {"column outside the row-tile", "is outside the row-tile's columns", 1},
    {"column 65535 (past N when N < 65536)", "is outside the row-tile's columns", 1},
    {"columns not ascending (duplicate)", "(ascending order)", 1},
    {"count one too small (a used slot past it)", "past the count", 0},
    /* the empty word reads as column 0, below the previous slot's: structural as well */
    {"count one too large (an empty slot below it)", "the slot is empty but the count is", 1},
    {"count above T", "exceeds T", 1},
    {"garbage in the last unused slot", "past the count", 0},
    {"two faults: the lower word is named", "is -0, not an activation", 0},
};

size_t tw_pk_case_count(void) { return sizeof tw_pk_cases / sizeof tw_pk_cases[0]; }

/* The first row-tile at or after row `from` with 2 <= count < slots: its first word's index. */
static int tw_pk_find(const twell_shape *s, size_t M, size_t from, const uint32_t *packed,
                      size_t *base) {
    const uint32_t W = s->T / s->C, tiles = s->N / s->T;
    for (size_t m = from; m < M; m++)
        for (uint32_t t = 0; t < tiles; t++) {
            size_t b = m * (s->N / s->C) + (size_t)t * W;
            if (packed[b] >= 2 && packed[b] < W - 1) {
                *base = b;
                return 0;
            }
        }
    return -1;
}

static void tw_pk_where(const twell_shape *s, size_t word, char *where, size_t n) {
    const uint32_t W = s->T / s->C, NW = s->N / s->C;
    snprintf(where, n, "packed word %zu (row %zu, row-tile %u, slot %u)", word, word / NW,
             (uint32_t)(word % NW) / W, (uint32_t)(word % W));
}

int tw_pk_case_apply(size_t i, const twell_shape *s, size_t M, size_t from, uint32_t *packed,
                     tw_pk_case *c, size_t *word, char *where, size_t n) {
    size_t b;
    if (i >= tw_pk_case_count() || tw_pk_find(s, M, from, packed, &b) != 0)
        return -1;
    const uint32_t W = s->T / s->C, NW = s->N / s->C, t = (uint32_t)(b % NW) / W;
    const uint32_t count = packed[b], col1 = packed[b + 1] & 0xffffu;
    const tw_pk_bits v = tw_pk_bits_of(s->dtype);
    size_t bad = b + 1;
    switch (i) {
    case 0: /* slot 2: its column is never 0, so the word is not the empty word */
        packed[b + 2] &= 0xffffu;
        bad = b + 2;
        break;
    case 1:
        packed[b + 1] = 0x80000000u | col1;
        break;
    case 2:
        packed[b + 1] = (uint32_t)v.minus_one << 16 | col1;
        break;
    case 3:
        packed[b + 1] = (uint32_t)v.nan_payload << 16 | col1;
        break;
    case 4:
        packed[b + 1] = (uint32_t)v.nan_neg << 16 | col1;
        break;
    case 5:
        packed[b + 1] = (uint32_t)v.ninf << 16 | col1;
        break;
    case 6: /* the column just before or just after the tile, always < 65536 */
        packed[b + 1] = (packed[b + 1] & 0xffff0000u) | (t == 0 ? s->T : t * s->T - 1u);
        break;
    case 7:
        if (s->N == 65536u && t == s->N / s->T - 1u)
            return -1; /* 65535 is a real column of this tile */
        packed[b + 1] = (packed[b + 1] & 0xffff0000u) | 0xffffu;
        break;
    case 8:
        packed[b + 2] = (packed[b + 2] & 0xffff0000u) | col1;
        bad = b + 2;
        break;
    case 9:
        packed[b] = count - 1u;
        bad = b + count;
        break;
    case 10:
        packed[b] = count + 1u;
        bad = b + count + 1u;
        break;
    case 11:
        packed[b] = s->T + 1u;
        bad = b;
        break;
    case 12:
        packed[b + W - 1] = 0x3f800000u | (t * s->T);
        bad = b + W - 1;
        break;
    case 13: {
        size_t b2;
        if (tw_pk_find(s, M, b / NW + 1, packed, &b2) != 0)
            return -1;
        packed[b2 + 1] = (uint32_t)v.nan_payload << 16 | (packed[b2 + 1] & 0xffffu); /* not named */
        packed[b + 1] = 0x80000000u | col1;
        break;
    }
    default:
        return -1;
    }
    *c = tw_pk_cases[i];
    *word = bad;
    tw_pk_where(s, bad, where, n);
    return 0;
}

uint64_t tw_pk_rand(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tw_pk_mutate(uint64_t *rng, const twell_shape *s, size_t M, uint32_t *packed, unsigned edits) {
    const uint32_t W = s->T / s->C, NT = s->N / s->T;
    const tw_pk_bits v = tw_pk_bits_of(s->dtype);
    const uint16_t values[] = {0u, 0x8000u, v.minus_one, v.nan_payload, v.nan_neg, v.ninf, 0x0001u};
    unsigned n = 1u + (unsigned)(tw_pk_rand(rng) % (edits ? edits : 1u));
    for (unsigned k = 0; k < n; k++) {
        uint64_t r = tw_pk_rand(rng);
        size_t g = (size_t)(r % ((uint64_t)M * NT)); /* the row-tile m·NT + t */
        uint32_t t = (uint32_t)(g % NT), *tile = packed + g * W;
        uint32_t slot = (uint32_t)((r >> 32) % W), slot1 = 1u + (uint32_t)((r >> 40) % (W - 1));
        uint32_t e = tile[slot1];
        switch ((r >> 56) % 10) {
        case 0: /* random bits anywhere */
            tile[slot] = (uint32_t)tw_pk_rand(rng);
            break;
        case 1: /* the count off by one */
            tile[0] += (r >> 20) & 1 ? 1u : 0xffffffffu;
            break;
        case 2: /* the count past T, or huge */
            tile[0] = (r >> 20) & 1 ? s->T + 1u + (uint32_t)((r >> 8) & 255u) : 0xffffffffu;
            break;
        case 3: /* a special value, column kept */
            tile[slot1] = (uint32_t)values[(r >> 8) % 7u] << 16 | (e & 0xffffu);
            break;
        case 4: /* a column inside the tile, maybe out of order */
            tile[slot1] = (e & 0xffff0000u) | (t * s->T + (uint32_t)((r >> 8) % s->T));
            break;
        case 5: /* a column in another tile */
            tile[slot1] = (e & 0xffff0000u) | (uint32_t)((r >> 8) % s->N);
            break;
        case 6: /* a column past N (or any 16 bits) */
            tile[slot1] = (e & 0xffff0000u) | (uint32_t)((r >> 8) & 0xffffu);
            break;
        case 7: { /* two slots swapped */
            uint32_t o = 1u + (uint32_t)((r >> 8) % (W - 1));
            tile[slot1] = tile[o];
            tile[o] = e;
            break;
        }
        case 8: /* a slot cleared */
            tile[slot1] = 0u;
            break;
        default: /* a positive finite value in a slot past the count */
            tile[W - 1] = 0x3f800000u | (t * s->T + s->T - 1u);
            break;
        }
    }
}
