/*
 * train_layout.h — host mirrors of the layout steps the CUDA training kernels run
 * (templates/train/train_ffn.cu.lua): the row-tile scan that sizes the spill, row and neuron
 * chunking, and the blocked counting-sort transpose. Pure functions: the unit tests check them
 * against the CPU reference (cpu_train.h), and the GPU tests check the device's arrays against
 * them.
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

/* Heavy rows (the sparse path's dense row-block route, cuda_train_heavy.c). Cost model per row
 * of a step (forward + backward), K cancelling out:
 *   dense  ≈ TW_TL_HEAVY_BLOCK · TW_TL_HEAVY_DENSE_PS · K · N   (seven K·N GEMM rows' worth)
 *   sparse ≈ TW_TL_HEAVY_ENTRY_PS · K · count                  (per active entry: U, y, dT, dx,
 *                                                                dW gathers of weight/token rows)
 * so a row is cheaper dense once count > (BLOCK · DENSE_PS / ENTRY_PS) · N. DENSE_PS is the
 * dense (cuBLAS) step's time per row and K·N, ENTRY_PS the sparse step's marginal time per
 * entry and K (the slope between two densities of `twell bench --op train` at K 2048, N 5632,
 * M 16384), BLOCK an estimate of the block GEMMs' efficiency loss at a few hundred rows plus the
 * gather/scatter. At N = 5632: over 120
 * active per row (2.1% of N; the skewed set's heavy rows hold ~900–1600, its other rows ~29). Never
 * below TW_TL_HEAVY_MIN (short rows are one chunk of the per-entry route) nor above N.
 * Re-measure with twell bench --op train --dist skewed and TWELL_TRAIN_HEAVY (bench_train.c). */
#define TW_TL_HEAVY_DENSE_PS 0.0245
#define TW_TL_HEAVY_ENTRY_PS 1.72
#define TW_TL_HEAVY_BLOCK 1.5
#define TW_TL_HEAVY_MIN 64u
/* floor((BLOCK · DENSE_PS / ENTRY_PS) · N) clamped to [TW_TL_HEAVY_MIN, N]: rows with more
 * active values than this are heavy. */
uint32_t tw_tl_heavy_threshold(uint32_t N);

/* The device's heavy-row classification (train_heavy.cu.lua's flag + list kernels) on a packed
 * gate: a row is heavy when the sum of its row-tile counts exceeds thr; idx[0..*nh) receives the
 * heavy rows ascending, *hnnz their counts' sum; with zero != 0 their packed words are zeroed
 * (what the sparse route then sees). idx may be NULL. */
void tw_tl_heavy_rows(const twell_shape *s, size_t M, uint32_t *packed, uint32_t thr, int zero,
                      uint32_t *idx, size_t *nh, uint64_t *hnnz);

#endif /* TWELL_TRAIN_LAYOUT_H */
