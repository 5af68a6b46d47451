/*
 * cpu_train.h — the CPU reference's saved training state (hybrid TwELL: compact ELL part plus a
 * spill sized from the counts) and the layout steps the GPU backend mirrors: spill sizing, row
 * expansion and the neuron-major transpose. Internal; tests reach it through the static library.
 */
#ifndef TWELL_CPU_TRAIN_H
#define TWELL_CPU_TRAIN_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* What tw_cpu_forward_train saves (state->backend_data). Entries are numbered row-major: row m's
 * support in ascending column order gets entries row_off[m] .. row_off[m+1]-1.
 *
 *   packed    [M, N/C]  TwELL words of P (exact counts + the first T/C-1 entries per row-tile)
 *   u_ell     [M, N/C]  U (fp32) of the entry held in the same word of packed; 0 in count words
 *                       and unused slots
 *   spill_off [M·N/T+1] row-tile r = m·(N/T)+t owns spill[spill_off[r] .. spill_off[r+1]):
 *                       its entries beyond the slots, max(0, count - (T/C-1)) of them
 *   spill     [spill_total]  (P bits << 16) | column, ascending column within a row-tile
 *   u_spill   [spill_total]  U of the spill entry
 *   row_off   [M+1]     prefix sums of the row counts (nnz = row_off[M])
 *
 * Nothing is dropped at any density: the spill grows with the counts. The backward scratch
 * (per-entry values and the transpose) lives here too so repeated steps do not allocate. */
typedef struct tw_train_saved {
    size_t M, nnz, spill_total;
    uint32_t *packed;
    float *u_ell;
    size_t *spill_off;
    uint32_t *spill;
    float *u_spill;
    size_t *row_off;
    /* backward scratch, entry-indexed (row-major) and neuron-major */
    uint32_t *e_col;
    float *e_p, *e_u, *e_du, *e_dp;
    size_t *col_off;        /* [N+1] */
    size_t *col_row;        /* [nnz] token of each neuron-major entry, ascending within a neuron */
    size_t *col_ent;        /* [nnz] its row-major entry index */
    double *row_l1;         /* [M] Σ|Tm| of each row, summed in row order for L1 */
    twell_status *task_st;  /* [tasks] per-task status of a parallel phase */
    unsigned char *scratch; /* [tasks · task_bytes] per-task conversion buffers */
    /* capacities, in elements of the array of the same name */
    size_t cap_packed, cap_u_ell, cap_spill_off, cap_spill, cap_u_spill, cap_row_off;
    size_t cap_e_col, cap_e_p, cap_e_u, cap_e_du, cap_e_dp, cap_col_off, cap_col_row, cap_col_ent;
    size_t cap_row_l1, cap_task_st, cap_scratch;
} tw_train_saved;

/* Spill layout from the packed counts of M rows: fills spill_off[0..M·N/T] (prefix sums of
 * max(0, count - slots) per row-tile) and row_off[0..M] (prefix sums of the row counts).
 * Returns the spill total; *nnz receives row_off[M]. Pure and serial (a scan on the GPU). */
size_t tw_train_spill_layout(const twell_shape *s, size_t M, const uint32_t *packed,
                             size_t *spill_off, size_t *row_off, size_t *nnz);

/* Expands row m of a saved forward into its support in ascending column order: cols, P as
 * float and U, row_off[m+1]-row_off[m] entries each (any output may be NULL). Returns the
 * number of entries written. */
size_t tw_train_row_support(const twell_shape *s, const tw_train_saved *sv, size_t m,
                            uint32_t *cols, float *p, float *u);

/* Neuron-major lists of a row-major support (counting sort by column, stable by token, so
 * deterministic): for neuron n, entries col_off[n] .. col_off[n+1]-1 give the token col_row[]
 * in ascending order and the row-major entry index col_ent[]. row_off [M+1] and e_col [nnz]
 * describe the support. Serial; O(nnz + N). */
void tw_train_transpose(size_t M, uint32_t N, const size_t *row_off, const uint32_t *e_col,
                        size_t *col_off, size_t *col_row, size_t *col_ent);

#endif /* TWELL_CPU_TRAIN_H */
