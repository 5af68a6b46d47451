/*
 * cuda_train_dense_int.h — what the dense training path's files share (cuda_train_dense.c, its
 * AUTO choice cuda_train_dense_auto.c, its test controls cuda_train_dense_probe.c): the per-state
 * record and its module indices (not part of any public or test API).
 */
#ifndef TWELL_CUDA_TRAIN_DENSE_INT_H
#define TWELL_CUDA_TRAIN_DENSE_INT_H

#include "cuda_train_dense.h"
#include "cuda_train_dense_probe.h"

enum { TD_FWD, TD_Y, TD_DT, TD_DX, TD_WG, TD_AUX, TD_NMOD };

/* Split-K for the mm GEMMs (y, dx) on small row blocks (the heavy rows): their grids cover
 * ceil(Mb / 256) · ceil(K / 256) clusters, a few of the device's, each with a long reduction (N
 * for y, 2N for dx). Slices of the reduction give the idle SMs work; fp32 partials reduced in a
 * fixed order by dense_aux's twell_dense_reduce_plain (loaded on first use). */
enum { TS_Y, TS_DX, TS_RED, TS_NMOD };
#define TD_SPLIT_MAX 8u

struct tw_tdense {
    int loaded, available; /* modules tried / usable */
    char why[256];         /* why not available */
    tw_CUmodule mod[TD_NMOD];
    tw_CUfunction fn[TD_NMOD];
#ifdef TWELL_PROBES
    tw_tdense_knobs probe; /* the test knobs (cuda_train_dense_probe.h) */
#endif
    /* own workspace (unused while the caller lends one) */
    void *own;
    size_t own_bytes;
    /* count read back: device u64, pinned copy, event */
    uint64_t *dcount, *hcount;
    tw_cuda_event ev;
    int pending;
    size_t pending_M;
    double est; /* active values per row AUTO decides from; -1 none */
    /* the saved forward */
    size_t saved_M; /* 0: none (or the saved forward is sparse) */
    void *buf, *pu, *part;
    twell_path last;
    unsigned long calls[3];
    /* AUTO's release of the own workspace while it runs sparse (tw_ctd_note_sparse) */
    tw_cuda_event ws_ev;    /* recorded after the last enqueued work that uses the workspace */
    int ws_ev_set;          /* ws_ev has been recorded */
    unsigned sparse_run;    /* sparse forwards since the last dense one */
    unsigned release_after; /* sparse forwards before the release (TW_TD_RELEASE_*) */
    int released;           /* freed by that rule and not allocated again since */
    unsigned long releases; /* times it was freed so */
    size_t peak;            /* high-water mark of twell_train_state_bytes (TW_TC_TD_PEAK_BYTES) */
    /* split-K modules of the block GEMMs (TS_*): tried once; split_ok = 1 when loaded */
    int split_tried, split_ok;
    tw_CUmodule smod[TS_NMOD];
    tw_CUfunction sfn[TS_NMOD];
};

/* The state's dense record, created (with its count read-back and events) on first use. */
twell_status tw_ctd_create(twell_ctx *ctx, twell_train_state *state, tw_tdense **out);
/* Whether the dense path can run on this plan/device at all (d->available, else d->why; the
 * modules loaded on first use). Errors: module build failures where forced, TWELL_ERR_NO_MEMORY. */
twell_status tw_ctd_prepare(twell_plan *plan, tw_tdense *d, int forced);
/* 1 if the n pointers p are 16-byte aligned. */
int tw_ctd_aligned(const void *const *p, size_t n);

/* The probes' knobs as the path reads them (the shipped library: the defaults). */
#define TD_THRESHOLD(d) TW_PROBE_OR((d)->probe.threshold, 0.0)          /* 0: TW_TD_DENSITY · N */
#define TD_MIN_ROWS(d) TW_PROBE_OR((d)->probe.min_rows, TW_TD_MIN_ROWS) /* AUTO's smallest M */
#define TD_WG_STAGES_OF(d)                                                                         \
    TW_PROBE_OR((d)->probe.wg_stages ? (d)->probe.wg_stages : TD_WG_STAGES,                        \
                TD_WG_STAGES) /* ring depth of the weight-gradient GEMM */

#endif /* TWELL_CUDA_TRAIN_DENSE_INT_H */
