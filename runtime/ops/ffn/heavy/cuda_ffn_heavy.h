/*
 * cuda_ffn_heavy.h — the heavy-row route of twell_ffn_infer's tiled path (Hopper): rows with more
 * active values than a threshold run two dense tensor-core GEMMs on a gathered row block instead
 * of the sparse pipeline (whose prep and build then see them empty); no host synchronisation.
 */
#ifndef TWELL_CUDA_FFN_HEAVY_H
#define TWELL_CUDA_FFN_HEAVY_H

#include "cuda_driver.h"

typedef struct tw_ffn_heavy tw_ffn_heavy;

/* Rows per block at most (heavy rows past it in a chunk stay on the sparse pipeline). */
#define TW_FFN_HEAVY_CAP 1024u

/* The default threshold for plan->shape: rows with more than this many active values take the
 * route (N / 32, at least 64; cost model in cuda_ffn_heavy.c). */
uint32_t tw_ffn_heavy_threshold(const twell_shape *s);

/* A new state (nothing loaded, the default knob). NULL on out of memory. */
tw_ffn_heavy *tw_ffn_heavy_create(void);

/* Frees everything (the caller has synchronised the device). NULL is a no-op. */
void tw_ffn_heavy_release(twell_plan *plan, tw_ffn_heavy *h);

#ifdef TWELL_PROBES
/* The knob (test control TW_TC_FFN_SET_HEAVY; test library only, probe.h): < 0 the default (on
 * for gated Hopper plans once a chunk had overflowing rows), 0 off, > 0 on for every chunk with
 * this threshold. */
void tw_ffn_heavy_set(tw_ffn_heavy *h, long long knob);
#endif

/* Whether a chunk of R rows runs the route now (*on). Eager (capturing 0): loads the modules and
 * sizes the buffers when the route is wanted (waits for the device only with may_wait, as
 * twell_plan_reserve may; a call never waits: a replaced buffer is kept to the release; a
 * failure to load turns the route off for the plan, logged, never an error). Captured: on only
 * with everything already prepared for R rows. seen: some chunk of this plan had overflowing
 * rows (the default turns the route on from then on, for good). used: the plan's calls may still
 * run. stream: the call's. */
twell_status tw_ffn_heavy_prepare(twell_plan *plan, tw_ffn_heavy *h, size_t R, int seen,
                                  int capturing, int used, int may_wait, twell_stream stream,
                                  int *on);

/* Classification of a chunk of m rows (after tw_ffn_heavy_prepare said on): marks the block's
 * rows, *hmark receives the u32[m] marks the sparse prep and build read. */
twell_status tw_ffn_heavy_mark(twell_plan *plan, tw_ffn_heavy *h, int m, const uint32_t *packed,
                               const uint32_t **hmark, twell_stream stream);

/* The block's gather and GEMMs (after tw_ffn_heavy_mark, before tw_ffn_heavy_scatter). */
twell_status tw_ffn_heavy_gemms(twell_plan *plan, tw_ffn_heavy *h, const void *x,
                                const uint32_t *packed, const void *wg, const void *wu,
                                const void *wd, twell_stream stream);

/* The block's y rows into y (after the sparse pipeline's last kernel of the chunk). */
twell_status tw_ffn_heavy_scatter(twell_plan *plan, tw_ffn_heavy *h, void *y, twell_stream stream);

/* Test control: rows the last marked chunk sent to the block (synchronises the device); 0 when
 * no chunk ran the route. */
twell_status tw_ffn_heavy_rows(twell_plan *plan, tw_ffn_heavy *h, int *rows);

#endif /* TWELL_CUDA_FFN_HEAVY_H */
