/* twell_format.h — packing and unpacking TwELL row-tiles (host side; the layout is in twellrt.h).
 */
#ifndef TWELL_FORMAT_H
#define TWELL_FORMAT_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* Packs one row-tile. vals[0..T) are the 16-bit patterns of the tile's activations after relu
 * and rounding (an entry is active iff its value is positive, i.e. non-zero with the sign bit
 * clear); col0 is the tile's first column in the full width. Writes all T/C words of dst (count,
 * then up to T/C-1 entries in ascending column order, the rest 0). Returns the count. */
uint32_t tw_pack_row_tile(const uint16_t *vals, uint32_t T, uint32_t C, uint32_t col0,
                          uint32_t *dst);

/* Unpacks one packed row (N/C words) into dense[0..N) 16-bit values (zeros elsewhere). Entries
 * of an overflowing row-tile beyond its slots are absent: the function returns the number of
 * overflowing row-tiles in the row, so the caller knows which tiles need recomputing (those with
 * count > T/C-1). Malformed words (column outside the tile, count < stored entries) return -1. */
int tw_unpack_row(const twell_shape *s, const uint32_t *row, uint16_t *dense);

#endif /* TWELL_FORMAT_H */
