/*
 * cuda_dense_int.h — what cuda_dense.c (the dense route and the path choice) and
 * cuda_dense_probe.c (its test controls) share: the per-plan dense state and its AUTO helpers.
 */
#ifndef TWELL_CUDA_DENSE_INT_H
#define TWELL_CUDA_DENSE_INT_H

#include "cuda_dense.h"
#include "cuda_dense_probe.h"
#include "ffn_policy.h"

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
    tw_dense_knobs probe; /* the test knobs (cuda_dense_probe.h), zero: the product's behaviour */
#endif
};

/* Whether the dense route can run (asks for cuBLASLt the first time: gate_pack_lt.h). */
int tw_dense_ready(twell_plan *plan, tw_dense *d);
/* AUTO's threshold at M rows, active values per row (a probe's, else the policy's). */
double tw_dense_thr(const tw_dense *d, const twell_shape *s, size_t M);
/* The route AUTO takes for M rows (ffn_policy.h) given what can run; *row (may be NULL): the
 * policy's row-kernel answer. */
tw_ffn_route tw_dense_route(const twell_plan *plan, const tw_dense *d, size_t M, int dense_ok,
                            int small_ok, int *row);

#endif /* TWELL_CUDA_DENSE_INT_H */
