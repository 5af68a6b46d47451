/*
 * cuda_train_probe.h — the sparse training path's test probes (runtime/core/probe.h; test
 * library only): the knobs and the profiling its state carries only there, the marks the ops
 * record for the profile (no-ops in the shipped library), and the TW_TC_TRAIN_* handler
 * (cuda_train_probe.c).
 */
#ifndef TWELL_CUDA_TRAIN_PROBE_H
#define TWELL_CUDA_TRAIN_PROBE_H

#include "cuda_driver.h"
#include "probe.h"

#include <stdarg.h>
#include <stdint.h>

struct tw_ctrain;

#ifdef TWELL_PROBES
#define TW_CT_PROF_MAX 48

/* A state's knobs, a member of its tw_ctrain (cuda_train_int.h); zero but heavy (-1, set at
 * creation): the shipped behaviour. */
typedef struct tw_ctrain_knobs {
    int legacy;                /* TW_TC_TRAIN_SET_LEGACY: SIMT recount, unstaged per-entry kernels
                                  and the unranked scatter (comparisons) */
    int per_entry;             /* TW_TC_TRAIN_SET_UDT 0: U and dT per entry, not tiled */
    uint64_t row_len, nrn_len; /* TW_TC_TRAIN_SET_CHUNK_LEN: forced chunk lengths, 0 automatic */
    long long heavy;           /* TW_TC_TRAIN_SET_HEAVY: 0 off, > 0 rows with more active values
                                  than this, < 0 the cost model's threshold */
    /* profiling (TW_TC_TRAIN_PROFILE): an event after each launch group, times summed per label */
    int prof, npev, nlab;
    tw_cuda_event pev[TW_CT_PROF_MAX];
    const char *pev_lab[TW_CT_PROF_MAX];
    const char *lab[TW_CT_PROF_MAX];
    double lab_ms[TW_CT_PROF_MAX];
    unsigned lab_n[TW_CT_PROF_MAX];
} tw_ctrain_knobs;

/* Profiling: an event named `label` after the work enqueued so far (no-op unless profiling is
 * on), and at the end of an op the intervals added to their labels' totals (waits for the
 * events). */
void tw_ct_mark(twell_ctx *ctx, struct tw_ctrain *t, const char *label, twell_stream stream);
void tw_ct_prof_collect(twell_ctx *ctx, struct tw_ctrain *t);

/* Frees the profile's events (the state's release, device synchronised). */
static inline void tw_ct_knobs_release(twell_ctx *ctx, tw_ctrain_knobs *p) {
    for (int i = 0; i < TW_CT_PROF_MAX; i++)
        if (p->pev[i])
            tw_cuda_event_destroy(ctx, p->pev[i]);
}

/* The TW_TC_TRAIN_* operations of tw_test_control (test_control.h): forced chunk lengths, the
 * legacy-kernel and U/dT-route switches, profiling, download of the saved state (whose host copy,
 * tw_cuda_train_host, test_control.h defines). */
twell_status tw_train_test_control(int op, va_list ap);
#else
/* No profile in the shipped library: macros, so that not even an unoptimised build keeps a
 * function of the probe's name. */
#define tw_ct_mark(ctx, t, label, stream) ((void)(ctx), (void)(t), (void)(label), (void)(stream))
#define tw_ct_prof_collect(ctx, t) ((void)(ctx), (void)(t))
#endif

#endif /* TWELL_CUDA_TRAIN_PROBE_H */
