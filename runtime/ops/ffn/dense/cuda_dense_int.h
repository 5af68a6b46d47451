/*
 * cuda_dense_int.h — the per-plan dense state and its count slots: what cuda_dense.c (the dense
 * route, the counts), the op folder's route choice (ffn_route.c: AUTO reads its estimate here and
 * counts the sparse calls into its slots) and their test controls (cuda_dense_probe.c) share.
 */
#ifndef TWELL_CUDA_DENSE_INT_H
#define TWELL_CUDA_DENSE_INT_H

#include "cuda_dense.h"

#ifdef TWELL_PROBES
/* A plan's AUTO knobs (test library only, runtime/core/probe.h; set by cuda_dense_probe.c, read
 * by ffn_route.c), a member of its tw_dense; all zero: the shipped behaviour. */
typedef struct tw_dense_knobs {
    double threshold;    /* TW_TC_DENSE_SET_THRESHOLD: > 0 AUTO's threshold; 0: the policy's */
    size_t min_rows;     /* TW_TC_DENSE_SET_MIN_ROWS: > 0 the smallest M AUTO runs dense */
    size_t lt_lo, lt_hi; /* TW_TC_DENSE_SET_LT_GATE: the cuBLASLt gate-pack's own range of
                            rows; 0, 0: the policy's */
} tw_dense_knobs;
#endif

#define TW_DENSE_SLOTS 16u /* count slots: call c uses slot c % TW_DENSE_SLOTS */
struct tw_dense {
    int available;  /* 1: cuBLASLt and the packing module are loaded; 0: not; -1: not asked yet */
    char why[480];  /* why not, for TWELL_PATH_DENSE's error */
    tw_gate_lt *lt; /* the plan's cuBLASLt resources (borrowed from the gate-pack's state) */
    size_t chunk_rows; /* rows per pass (bounds the buffers) */
    /* workspace, allocated at the first dense call (or by twell_plan_reserve) */
    float *u; /* [rows, N] fp32: x·Wuᵀ (gated) */
    void *h;  /* [rows, N] dtype: h = round(g ⊙ u) (gated) */
    void *g;  /* [rows, N] dtype: the gate when the gate-pack's cannot be reused */
    size_t rows;
    /* counts: device [SLOTS][2] u64 (Σ counts, unused), pinned copies */
    uint64_t *dstats, *hstats;
    uint64_t *hstats_dev; /* hstats' device address (NULL: not mappable): sparse calls' pre-pass
                             writes its counts there, no copy enqueued */
    int last_in_host;     /* the last counted slot was written to hstats directly */
    size_t slot_rows[TW_DENSE_SLOTS];
    unsigned char slot_ovf[TW_DENSE_SLOTS]; /* the slot's [1] counts overflowing row-tiles */
    unsigned next_slot, last_slot;
    int counted;     /* some call has counted (last_slot valid) */
    int cnt_pending; /* the last copy has not been read yet */
    tw_cuda_event cnt_done;
    tw_cuda_event cnt_ev; /* recorded after the last counts: cnt_done, the cuBLASLt resources'
                             event (tw_gate_lt_done_event) or the sparse path's */
    /* the count slot the latest eager cuBLASLt gate-pack stored its total into (mapped memory),
     * for the dense call that reuses its gate: that call then counts nothing itself */
    int gp_pending;
    unsigned gp_slot;
    double est;   /* mean active values per row of the latest counts read; -1 none */
    int ovf_seen; /* the latest counts read that count them had overflowing row-tiles */
    double hint;  /* the estimate before any counts: twell_plan_reserve's; -1 none */
    twell_path last;
    int captured;      /* a captured call used the workspace: replaced buffers go to keep */
    tw_cuda_keep keep; /* buffers captured graphs may still use (freed at release) */
    int grow_syncs;
    unsigned long calls[3];                   /* by twell_path */
    unsigned long gate_reused, gate_computed; /* dense calls by where their gate came from */
    unsigned long small_calls;                /* AUTO's small-batch calls (some are counted) */
    unsigned long direct_seen;  /* twell_ffn_layer calls AUTO sent dense (one in TW_DENSE_RECOUNT
                                   packs and counts) */
    unsigned long direct_calls; /* those that ran the dense route from x, nothing packed */
#ifdef TWELL_PROBES
    tw_dense_knobs probe; /* the test knobs (above), zero: the product's behaviour */
#endif
};

/* ---- count slots (cuda_dense.c) ---- */

/* The next count slot (call c uses slot c % TW_DENSE_SLOTS). */
unsigned tw_dense_slot_take(tw_dense *d);
/* Counts m rows of packed into slot `slot` (zeroed before). */
twell_status tw_dense_count(twell_plan *plan, tw_dense *d, size_t m, const uint32_t *packed,
                            unsigned slot, twell_stream stream);
/* The slot's counts to pinned memory (in_host: the kernels wrote them there already); the next
 * calls read them once event ev says they have landed. ev is recorded here on stream, unless
 * recorded is set: then the caller recorded it on stream after the counts' last write already.
 * ovf: the slot's second word counts overflowing row-tiles. */
twell_status tw_dense_count_end(twell_plan *plan, tw_dense *d, unsigned slot, size_t M, int in_host,
                                twell_stream stream, tw_cuda_event ev, int recorded, int ovf);
/* Reads the latest counts into est (and ovf_seen) if their copy has completed (never waits). */
twell_status tw_dense_collect(twell_plan *plan, tw_dense *d);

#endif /* TWELL_CUDA_DENSE_INT_H */
