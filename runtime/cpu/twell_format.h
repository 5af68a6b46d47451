/* twell_format.h — packing, unpacking and checking TwELL row-tiles (host side; the layout is in
 * twellrt.h). */
#ifndef TWELL_FORMAT_H
#define TWELL_FORMAT_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* Packs one row-tile. vals[0..T) are the 16-bit patterns of the tile's activations after relu
 * and rounding (tw_half_act: an entry is active iff its value is positive, i.e. non-zero with the
 * sign bit clear, the canonical NaN included); col0 is the tile's first column in the full width.
 * Writes all T/C words of dst (count, then up to T/C-1 entries in ascending column order, the rest
 * 0). Returns the count. */
uint32_t tw_pack_row_tile(const uint16_t *vals, uint32_t T, uint32_t C, uint32_t col0,
                          uint32_t *dst);

/* Unpacks one packed row (N/C words) into dense[0..N) 16-bit values (zeros elsewhere). Entries
 * of an overflowing row-tile beyond its slots are absent: the function returns the number of
 * overflowing row-tiles in the row, so the caller knows which tiles need recomputing (those with
 * count > T/C-1). A word with any fault of TW_PKF_ALL (below) returns -1. */
int tw_unpack_row(const twell_shape *s, const uint32_t *row, uint16_t *dense);

/* ---- the rule a packed word must follow (twellrt.h, "TwELL layout") ----
 * Each word of row-tile t (words w[0..W), W = T/C, stored = min(w[0], W-1)) is judged on its own
 * and its tile's count word (plus, for the order, the slot before it), so the first faulty word
 * of a buffer is well defined: the lowest index whose word has a fault. The CUDA check kernel
 * (templates/ffn/packed_check.cu.lua) applies the same rule word by word; keep the two equal.
 * Faults, as bits: */
enum {
    TW_PKF_COUNT = 1u << 0,  /* word 0: the count exceeds T */
    TW_PKF_EMPTY = 1u << 1,  /* a slot below the count (1..stored) is the word 0 */
    TW_PKF_VALUE = 1u << 2,  /* a used slot's value is not one gate-pack stores (positive
                                finite, +Inf or the canonical NaN): +0, -0, negative, -Inf
                                or a NaN of another sign or payload (tw_half_slot_ok) */
    TW_PKF_COLUMN = 1u << 3, /* a used slot's column lies outside [t·T, (t+1)·T) */
    TW_PKF_ORDER = 1u << 4,  /* a used slot's column is not above the previous slot's */
    TW_PKF_UNUSED = 1u << 5  /* a slot past the count (stored+1..W-1) is not 0 */
};
/* What every consumer needs to stay inside its buffers: the CPU backend always rejects these. */
#define TW_PKF_STRUCTURE (TW_PKF_COUNT | TW_PKF_COLUMN | TW_PKF_ORDER)
/* Everything the layout promises (options.validate_packed). */
#define TW_PKF_ALL                                                                                 \
    (TW_PKF_COUNT | TW_PKF_EMPTY | TW_PKF_VALUE | TW_PKF_COLUMN | TW_PKF_ORDER | TW_PKF_UNUSED)

/* The faults (bits above, 0 when none) of word `slot` (0..W-1) of row-tile t whose W words are
 * tile[0..W) in a buffer of shape s. */
unsigned tw_packed_word_faults(const twell_shape *s, const uint32_t *tile, uint32_t t,
                               uint32_t slot);

/* The first faulty word of a packed buffer: where it is, what it holds, what is wrong. */
typedef struct tw_packed_fault {
    size_t word;    /* index in the buffer: row·(N/C) + tile·W + slot */
    size_t row;     /* token row */
    uint32_t tile;  /* row-tile (column tile) within the row */
    uint32_t slot;  /* word within the row-tile: 0 the count, 1..W-1 the entries */
    uint32_t value; /* the word */
    uint32_t count; /* the row-tile's word 0 */
    uint32_t prev;  /* the word of the slot before (slot >= 2), else 0 */
    unsigned fault; /* one TW_PKF_ bit: the lowest of the word's faults within the mask asked */
} tw_packed_fault;

/* Scans the M rows of packed for the lowest-index word with a fault in `mask`. Returns 1 and
 * fills *out for it, else 0 (*out untouched). */
int tw_packed_find_fault(const twell_shape *s, size_t M, const uint32_t *packed, unsigned mask,
                         tw_packed_fault *out);

/* The same within one row-tile (words tile[0..W), tile index t): the first slot with a fault in
 * mask, or -1. *fault (may be NULL) gets that fault's bit. */
int tw_packed_tile_fault(const twell_shape *s, const uint32_t *tile, uint32_t t, unsigned mask,
                         unsigned *fault);

/* One line naming f for an error message: "packed word 1234 (row 3, row-tile 2, slot 5) is
 * 0x80000105: value 0x8000 is -0, not an activation (positive, +Inf or the canonical NaN
 * 0x7fc0)". Always NUL-terminates buf (n > 0). */
void tw_packed_fault_describe(const twell_shape *s, const tw_packed_fault *f, char *buf, size_t n);

#endif /* TWELL_FORMAT_H */
