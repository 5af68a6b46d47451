/*
 * cuda_ffn_ws.h — the tiled pipeline's workspace (cuda_ffn_ws.c), for cuda_ffn.c's launches,
 * growth and test controls: the device pointers of its pieces and the sizing of its buffers.
 */
#ifndef TWELL_CUDA_FFN_WS_H
#define TWELL_CUDA_FFN_WS_H

#include "cuda_ffn_int.h"

/* Device pointers of the workspace pieces for the current capacities. */
typedef struct {
    uint32_t *flag, *cnt, *ovf_base, *item_base, *ovf_rows, *ovf_slot, *orow_idx, *orows, *sizes,
        *offsets, *bsum, *bbase;
    uint16_t *ovf_hh;
    uint32_t *ovf_ex;
    float *ovf_y;
    uint32_t *desc, *hl, *rexp;
    uint16_t *gv;
    float *partial;
} tw_ffn_ws;

/* Sets *w to the pieces of f's buffers for their current capacities (NULL where a buffer is not
 * allocated, and for the gated pieces of a plan that is not gated). */
void tw_ffn_ws_of(const twell_plan *plan, const tw_ffn *f, tw_ffn_ws *w);

/* Replaces f's overflow buffer by one for cap row-tiles and orows rows (each at most 2^32 - 1),
 * or its pair list by one for cap slots (at most TW_PAIR_MAX), as tw_ffn_realloc (cuda_ffn_ws.c)
 * says: 1 if done; 0 if the allocation failed (warned), keeping the old buffer and capacity. */
int tw_ffn_set_ovf(twell_plan *plan, tw_ffn *f, size_t cap, size_t orows);
int tw_ffn_set_pairs(twell_plan *plan, tw_ffn *f, size_t cap);

/* Makes the workspace hold a chunk of R rows (first use, or a larger chunk): waits for the
 * plan's earlier work, which may still use the old buffers. A failed allocation (warned) leaves a
 * capacity short: the caller checks rows_cap, ws_ovf and ws_pairs. */
twell_status tw_ffn_reserve_rows(twell_plan *plan, tw_ffn *f, size_t R);

/* Device bytes of f's three buffers at their current capacities. */
size_t tw_ffn_ws_bytes(const twell_plan *plan, const tw_ffn *f);

#endif /* TWELL_CUDA_FFN_WS_H */
