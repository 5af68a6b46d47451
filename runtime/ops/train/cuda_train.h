/*
 * cuda_train.h — twell_ffn_forward_train / twell_ffn_backward on CUDA (kernels in
 * templates/train_ffn.cu.lua), plus the hooks the GPU tests and the benchmark use to look inside
 * a CUDA training state.
 */
#ifndef TWELL_CUDA_TRAIN_H
#define TWELL_CUDA_TRAIN_H

#include "cuda_driver.h"

/* The backend entry points (internal.h's tw_cuda_forward_train, tw_cuda_backward and
 * tw_cuda_train_state_release forward here). Arguments are validated by plan.c; these enter the
 * device context themselves.
 *
 * Forward: gate-pack (the plan's kernel) into the state's packed gate, recount of overflowing
 * row-tiles (tensor cores, batched per tile; SIMT for element-load inputs), scans that size the
 * spill and the row chunks, then ONE host synchronisation to read the totals (nnz, spill size,
 * chunks): buffers grow only when a total exceeds their capacity; then the spill, U, y and the
 * stats. TWELL_ERR_NO_MEMORY (nothing written to y or stats) when a buffer cannot grow. Backward:
 * no host synchronisation (sizes come from the forward's totals). Everything is enqueued on
 * `stream`; results are bitwise reproducible run to run. */
twell_status tw_cuda_train_forward(twell_plan *plan, size_t M, const void *x, const void *wg,
                                   const void *wu, const void *wd, void *y, float *stats,
                                   twell_train_state *state, twell_stream stream);
twell_status tw_cuda_train_backward(twell_plan *plan, twell_train_state *state, size_t M,
                                    const void *x, const void *wg, const void *wu, const void *wd,
                                    const void *dy, float lambda, void *dx, float *dwg, float *dwu,
                                    float *dwd, twell_stream stream);
/* Waits for the device, frees the state's device and pinned memory and modules. NULL-safe. */
void tw_cuda_train_release(twell_train_state *state);

/* ---- hooks for tests and the benchmark ---- */

/* Forces the row and neuron chunk lengths (0: automatic, train_layout.h). Short chunks make
 * small problems exercise the split-row and split-neuron paths. Creates the backend state if
 * needed; TWELL_ERR_INVALID_ARG for a state of a CPU context. */
twell_status tw_cuda_train_set_chunk_len(twell_train_state *state, uint64_t row_len,
                                         uint64_t nrn_len);

/* Host copy of a CUDA state after a forward (and, where have_bwd, the backward's transpose),
 * with the layout of cpu_train.h plus the CUDA extras. Arrays malloc'd; free with
 * tw_cuda_train_host_free. */
typedef struct tw_cuda_train_host {
    size_t M, nnz, spill_total, nchunks, pslots;
    uint64_t E;          /* row chunk length */
    uint32_t *packed;    /* [M, N/C] */
    float *u_ell;        /* [M, N/C]; only words holding entries are meaningful */
    uint64_t *tile_off;  /* [M·NT+1] */
    uint64_t *spill_off; /* [M·NT+1] */
    uint64_t *row_off;   /* [M+1] */
    uint32_t *spill;     /* [spill_total] */
    float *u_spill;      /* [spill_total] */
    uint64_t *chunk_off; /* [M+1] */
    uint32_t *e_col;     /* [nnz] */
    float *e_tm;         /* [nnz] */
    int have_bwd;        /* a backward ran on this forward: the fields below are set */
    uint64_t E2;         /* neuron chunk length */
    size_t R, B;         /* transpose row blocks */
    uint64_t *col_off;   /* [N+1] */
    uint32_t *col_row;   /* [nnz] */
    uint32_t *col_ent;   /* [nnz] */
    float *e_du, *e_dp;  /* [nnz] */
} tw_cuda_train_host;

/* Synchronises the device and copies state. TWELL_ERR_INVALID_ARG when it holds no forward. */
twell_status tw_cuda_train_download(twell_train_state *state, tw_cuda_train_host *out);
void tw_cuda_train_host_free(tw_cuda_train_host *h); /* NULL-safe */

/* With `on`, later ops use the earlier kernels where newer ones exist (SIMT recount and spill of
 * overflowing row-tiles, unstaged per-entry dot products), for comparisons in one run. Results
 * differ only in the overflowing row-tiles' gate summation order. TWELL_ERR_INVALID_ARG for a
 * state of a CPU context. */
twell_status tw_cuda_train_set_legacy(twell_train_state *state, int on);

/* Profiling (benchmark breakdowns): with `on`, every later forward and backward records an
 * event after each launch group and, at its end, waits for them and adds each interval to the
 * total of its label (kernel name without "twell_train_", "gate_pack", "scan_<mode>",
 * "host_sync": host wait + copy); turning it on or off clears the totals. Timings include the
 * events' own cost. TWELL_ERR_INVALID_ARG for a state of a CPU context. */
twell_status tw_cuda_train_profile(twell_train_state *state, int on);
/* Writes "label  mean-ms (count)" lines into buf (NUL-terminated, truncated to cap); returns the
 * length written. */
size_t tw_cuda_train_profile_report(const twell_train_state *state, char *buf, size_t cap);

/* U (forward) and dT (backward) per entry (tiled 0: staged dot products, one weight row per
 * entry) or tiled (1: the fused inference pipeline's pair lists and phase A, weight chunks reused
 * across token groups on tensor cores; entries of overflowing row-tiles still per entry) for later
 * ops; the tiled route runs where it can (16-byte aligned tensors, K % 64 == 0, the fused
 * kernels' shared memory, M <= 65536), else per entry. Initial value from TWELL_TRAIN_UDT
 * (entry | tiled) when the state's backend part is created. Tiled U and dT sum in another fp32
 * order than the CPU reference (not bit-identical; within the tests' tolerances).
 * TWELL_ERR_INVALID_ARG for a state of a CPU context. */
twell_status tw_cuda_train_set_udt(twell_train_state *state, int tiled);
/* The initial value (TWELL_TRAIN_UDT, else the built-in default): 0 per entry, 1 tiled. */
int tw_cuda_train_udt_default(void);
/* 1 when the saved forward ran the tiled route (its backward does too, module permitting). */
int tw_cuda_train_udt_tiled(const twell_train_state *state);

/* Which kernel module the last op used: 8 (16-byte vector loads) or 1 (element loads for
 * tensors not 16-byte aligned); 0 before any op. */
int tw_cuda_train_last_vec(const twell_train_state *state);

#endif /* TWELL_CUDA_TRAIN_H */
