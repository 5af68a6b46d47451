/*
 * cuda_small_int.h — what cuda_small.c (the small-batch path) and cuda_small_probe.c (its test
 * controls) share: the per-plan state and the workspace's layout.
 */
#ifndef TWELL_CUDA_SMALL_INT_H
#define TWELL_CUDA_SMALL_INT_H

#include "cuda_small.h"
#include "cuda_small_probe.h"

struct tw_small {
    int available;
#ifdef TWELL_PROBES
    tw_small_knobs probe; /* the test knobs (cuda_small_probe.h), zero: the product's behaviour */
#endif
    tw_CUmodule mod_gate, mod_ffn;
    tw_CUfunction gate, up, down, fused, fused_cl; /* fused_cl: sm_90+ and its smem fits */
    tw_CUfunction row; /* K ≤ TW_ROW_MAX_K and its smem fits: the rows above the fused kernel's */
    int fused_ok;      /* the fused kernel's shared memory fits this device (tw_fused_smem) */
    int avoid_row; /* AUTO saw overflowing row-tiles: the up and down kernels (tw_small_avoid_row)
                    */
    int fused_ran; /* the last ffn_infer's one kernel: 0 none, 1 fused, 2 fused_cl, 3 row */
    int gate_launched; /* the last twell_gate_pack launched the small gate kernel */
    /* workspace for `rows` rows (one allocation, pieces 256-byte aligned) */
    void *ws;
    size_t rows, bytes;
    uint16_t *gs;   /* [rows, N] rounded activations of the gate kernel */
    uint32_t *tcnt; /* [rows / 8 + 1, N/T] arrival counters, 0 between calls */
    float *hbuf;    /* [rows, N] h of the active pairs */
    uint32_t *mask; /* [rows, N/32] activity of recomputed (overflowing) row-tiles */
    /* calls of one op on another stream wait for the previous one (shared scratch) */
    tw_cuda_event done[2]; /* 0: gate-pack, 1: ffn_infer */
    int used[2];
    twell_stream last_stream[2];
    int last_ran[2];
    int captured;      /* a captured call used the workspace: a replaced one goes to keep */
    tw_cuda_keep keep; /* workspaces captured graphs may still use (freed at release) */
};

/* The mode calls run in: a probe's (TW_TC_SMALL_SET_MODE), AUTO in the shipped library. */
#define TW_SMALL_MODE(sm) TW_PROBE_OR((sm)->probe.mode, TW_SMALL_AUTO)

/* The workspace of R rows: byte offsets of its pieces (256-byte aligned) and its size. */
typedef struct {
    size_t gs, tcnt, hbuf, mask, bytes;
} tw_small_layout;
void tw_small_layout_of(const twell_shape *s, size_t R, tw_small_layout *L);

#endif /* TWELL_CUDA_SMALL_INT_H */
