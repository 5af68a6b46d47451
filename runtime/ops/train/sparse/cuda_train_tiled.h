/*
 * cuda_train_tiled.h — tiled U and dT for the CUDA training path: the fused inference pipeline's
 * list build and phase A (templates/ffn/ffn_fused.cu.lua, launch contract there) compute x·Wu (and
 * dy·Wd) at the active pairs of the packed gate with weight chunks reused across token groups on
 * tensor cores; train_ffn's twell_train_udt sums the slices and stores each value at its entry's
 * word (u_ell layout). Row-tiles that overflow are not in the lists: the per-entry kernels compute
 * those. Used wherever it can run; tests turn it off with TW_TC_TRAIN_SET_UDT.
 */
#ifndef TWELL_CUDA_TRAIN_TILED_H
#define TWELL_CUDA_TRAIN_TILED_H

#include "cuda_driver.h"
#include "internal.h"

typedef struct tw_ctt tw_ctt;

/* 1 when the tiled route can run this plan's shape for M rows (module loaded now on first use:
 * K % 64 == 0, the fused kernels' shared memory, M ≤ 65536); 0 otherwise (the per-entry path runs;
 * a load failure is logged once). *tp created on first call. Context current. */
int tw_ctt_ready(twell_plan *plan, tw_ctt **tp, size_t M);

/* Builds the pair lists of `packed` (M rows; nnz active entries bound the pair count) into the
 * workspace (grown as needed, synchronising the device first): launch contract steps 1-4.
 * *pre: the device flag word the per-entry kernels read (0: lists built). */
twell_status tw_ctt_lists(twell_plan *plan, tw_ctt *tp, size_t M, const uint32_t *packed,
                          uint64_t nnz, twell_stream stream, const uint32_t **pre);
/* Phase A on a (x or dy, [M, K]) and w (Wu or Wd) at the lists' pairs: partial dot products per
 * 64-column slice. TWELL_ERR_INTERNAL when the lists are not those of M rows. */
twell_status tw_ctt_phase_a(twell_plan *plan, tw_ctt *tp, size_t M, const void *a, const void *w,
                            twell_stream stream);
/* train_ffn's twell_train_udt (function udt): the slices summed per pair, stored at the entry's
 * word of out ([M, N/C] f32, u_ell's layout; the lists carry each entry's word index).
 * TWELL_ERR_INTERNAL when the lists are not those of M rows. */
twell_status tw_ctt_udt(twell_plan *plan, tw_ctt *tp, size_t M, float *out, tw_CUfunction udt,
                        twell_stream stream);
/* The device flag word of the built lists (what tw_ctt_lists returned in *pre). */
const uint32_t *tw_ctt_flag(const tw_ctt *tp);
/* Device bytes held. */
size_t tw_ctt_bytes(const tw_ctt *tp);
/* Frees everything (device synchronised by the caller). NULL-safe. Context current. */
void tw_ctt_release(twell_ctx *ctx, tw_ctt *tp);

#endif /* TWELL_CUDA_TRAIN_TILED_H */
