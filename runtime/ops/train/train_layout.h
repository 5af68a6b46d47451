/*
 * train_layout.h — host mirrors of the layout steps the CUDA training kernels run
 * (templates/train_ffn.cu.lua): the row-tile scan that sizes the spill, row and neuron chunking,
 * and the blocked counting-sort transpose. Pure functions: the unit tests check them against the
 * CPU reference (cpu_train.h), and the GPU tests check the device's arrays against them.
 */
#ifndef TWELL_TRAIN_LAYOUT_H
#define TWELL_TRAIN_LAYOUT_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* Smallest row chunk and neuron chunk (entries, tokens) the CUDA backend uses. */
#define TW_TL_ROW_CHUNK_MIN 64u
#define TW_TL_NRN_CHUNK_MIN 256u

/* The device's "tiles" scan: for the M·NT row-tiles r = m·NT + t of packed (counts in word 0),
 * tile_off[r] = entries before row-tile r, spill_off[r] = spill words before it (max(0, count -
 * slots) each), row_off[m] = tile_off[m·NT]; each array also gets its total at index M·NT (M for
 * row_off). *nnz and *spill receive the totals. spill_off and row_off equal what
 * tw_train_spill_layout computes. */
void tw_tl_tile_scan(const twell_shape *s, size_t M, const uint32_t *packed, uint64_t *tile_off,
                     uint64_t *spill_off, uint64_t *row_off, uint64_t *nnz, uint64_t *spill);

/* Chunk length for rows: max(lo, 4·ceil(nnz/M)); for neurons: max(lo, 4·ceil(nnz/N)). A row or
 * neuron with more than len entries is split into ceil(count/len) chunks, so only those at least
 * four times the mean are split and a split one has partial slots (one per chunk for rows, one
 * per chunk after the first for neurons) bounded by 2·nnz/len and nnz/len in all. M, N ≥ 1. */
uint64_t tw_tl_row_chunk_len(uint64_t nnz, uint64_t M, uint64_t lo);
uint64_t tw_tl_nrn_chunk_len(uint64_t nnz, uint64_t N, uint64_t lo);
/* max(1, ceil(count/len)): an empty row or neuron still owns one (empty) chunk, which writes
 * its zeros. */
uint64_t tw_tl_chunks_of(uint64_t count, uint64_t len);

/* The device's "rows" scan: chunk_off[m] = chunks before row m, pslot_off[m] = partial slots
 * before it (rows with one chunk own none, a split row one per chunk); totals at index M.
 * Returns the chunk total; *pslots receives the slot total. */
uint64_t tw_tl_row_chunks(size_t M, const uint64_t *row_off, uint64_t len, uint64_t *chunk_off,
                          uint64_t *pslot_off, uint64_t *pslots);

/* Row blocks of the transpose: B blocks of R consecutive rows (the last may be shorter) with
 * B·N ≤ 2^22 counters where possible and R ≥ 32 (fewer, longer blocks for large M). */
void tw_tl_row_blocks(size_t M, uint32_t N, size_t *R, size_t *B);

/* The device's transpose: per-block histograms hist[n·B + b], one exclusive scan over them in
 * (n, b) order, then each block places its rows' entries in row order. Same result as
 * tw_train_transpose (stable: tokens ascending within a neuron). hist: N·B scratch words.
 * col_off [N+1], col_row and col_ent [nnz] (32-bit: nnz < 2^32 and M < 2^32). */
void tw_tl_transpose_blocked(size_t M, uint32_t N, const uint64_t *row_off, const uint32_t *e_col,
                             size_t R, size_t B, uint32_t *hist, uint64_t *col_off,
                             uint32_t *col_row, uint32_t *col_ent);

#endif /* TWELL_TRAIN_LAYOUT_H */
