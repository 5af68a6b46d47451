/*
 * cuda_ffn_int.h — what cuda_ffn.c (launches), cuda_ffn_ws.c (workspace), cuda_ffn_load.c
 * (module loading, plan set-up) and cuda_ffn_probe.c (test controls) share: the module's kernel
 * indices and the per-plan state (the configuration words' indices are ffn_config.h's).
 */
#ifndef TWELL_CUDA_FFN_INT_H
#define TWELL_CUDA_FFN_INT_H

#include "cuda_ffn.h"
#include "cuda_ffn_heavy.h"
#include "cuda_ffn_probe.h"
#include "m_bucket.h"

/* The kernels of ffn_fused, in launch order (phase_a and reduce exist in gated modules only). */
enum {
    TW_FN_PREP,
    TW_FN_SCAN,
    TW_FN_BUILD,
    TW_FN_OVF_GU,
    TW_FN_OVF_DOWN,
    TW_FN_PHASE_A,
    TW_FN_REDUCE,
    TW_FN_PHASE_B,
    TW_FN_ROWS,
    TW_FN_COUNT
};
_Static_assert(TW_FN_COUNT == TW_FFN_NFN, "cuda_ffn.h's count and the module's kernels");

/* The tiled modules one plan may hold: the default plus distinct tuned configurations (beyond
 * that a bucket keeps the default). */
#define TW_FFN_MAX_TK 8
#define TW_PAIR_MAX ((size_t)0xffffffffu - 1024u) /* offsets and pair_cap are 32-bit */

struct tw_ffn {
#ifdef TWELL_PROBES
    tw_ffn_knobs probe; /* the test knobs (cuda_ffn_probe.h), zero: the product's behaviour */
#endif
    int tiled; /* ffn_fused loaded */
    /* Tiled modules: tk[0] the default configuration (loaded at plan creation), then the tuned
     * winners of the M buckets seen so far. fn and cfg are copies of the module the current call
     * runs (cur), so the launch code reads them directly. */
    tw_ffn_tk tk[TW_FFN_MAX_TK];
    size_t ntk;
    tw_ffn_tk *cur;
    tw_ffn_tk *forced;                /* tw_cuda_ffn_force */
    signed char bucket[TW_M_BUCKETS]; /* index into tk per M bucket (m_bucket.h); -1: not
                                           resolved yet */
    int tune_on_first_use;            /* the context's options.tune_on_first_use */
    uint32_t nc_ws;                   /* chunks (NC) the row workspace is laid out for: the
                                         largest of the modules run so far */
    tw_CUfunction fn[TW_FN_COUNT];
    uint32_t cfg[TW_CFG_COUNT];
    tw_CUmodule gmod; /* ffn_rows, loaded when a call needs it */
    tw_CUfunction generic;
    int modules;
    uint32_t NT, NSL;
    /* Workspace: three device buffers, grown independently (layouts: cuda_ffn_ws.c). */
    void *ws_rows; /* control words + per-row arrays for rows_cap rows */
    size_t rows_cap;
    void *ws_ovf;    /* dense path: ovf_cap overflowing row-tiles, orow_cap overflowing rows */
    size_t ovf_cap;  /* row-tiles (h of each) */
    size_t orow_cap; /* rows (their y part) */
    void *ws_pairs;  /* active pair lists: pair_cap slots */
    size_t pair_cap;
    int cnt_dirty; /* cnt may be non-zero (new buffer, or a prep without its scan): memset it */
    int probes;
    /* What the data needed, accumulated on the device by every tiled chunk's scan (ffn_fused's
     * acc): [0] chunks that ran the fallback, [1] the most pair slots, [2] overflowing row-tiles,
     * [3] overflowing rows any chunk needed. Never reset (buffers never shrink), so a need is
     * never lost however far the host runs ahead: each eager call reads the host mirror and
     * grows without waiting (tw_ffn_collect). */
    uint32_t *acc;        /* device u32[4], zeroed at plan creation */
    uint32_t *hflags;     /* pinned host memory [2][4]: [0] the mirror of acc (each value is a
                             lower bound of what acc holds, read at any time), [1] the probe's */
    uint32_t *hflags_dev; /* its device address: the scan writes the mirror itself (NULL: the
                             driver cannot map it; a copy is enqueued after each call instead) */
    tw_cuda_event done;   /* recorded after each call's last work */
    int used;             /* done has been recorded */
    /* buffers replaced while earlier calls may still read them: freed once `retire`, recorded
     * after those calls, has completed (checked at each eager call, never waited for) */
    void *retired[3];
    int nretired;
    int retiring; /* set while collect grows with calls in flight */
    tw_cuda_event retire;
    int grows[2]; /* growths with the plan's work finished [0], while it was in flight [1] */
    twell_stream last_stream;
    const uint32_t *last_flag; /* device flag words of the last tiled chunk (TW_TC_FFN_FLAGS) */
    int captured;              /* a captured call used the workspace: replaced buffers are kept */
    tw_cuda_keep keep;         /* buffers captured graphs may still use (freed at release) */
    tw_ffn_heavy *heavy;       /* the heavy-row route (cuda_ffn_heavy.h) */
};

/* Makes tk the module the next call runs (copies its functions and configuration words). */
void tw_ffn_use(tw_ffn *f, tw_ffn_tk *tk);
/* Loads ffn_rows (the portable exact row kernel) into f once. */
twell_status tw_ffn_load_generic(twell_plan *plan, tw_ffn *f);
/* The tiled module calls of M rows run: the forced one (tw_cuda_ffn_force), else M's bucket's,
 * resolved on its first call and memoised (a bucket without a record is tuned first when
 * tune_now is set; a captured call never resolves: an unresolved bucket then runs the default).
 * Context current. */
tw_ffn_tk *tw_ffn_module_for(twell_plan *plan, tw_ffn *f, size_t M, int capturing, int tune_now);
/* Enters plan's context for work on its state f (NULL: not a CUDA plan: TWELL_ERR_UNSUPPORTED)
 * and synchronises the device; tw_cu_leave after. */
twell_status tw_ffn_enter(twell_plan *plan, tw_ffn *f, tw_cu_scope *sc);

#endif /* TWELL_CUDA_FFN_INT_H */
