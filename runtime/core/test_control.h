/*
 * test_control.h — the operations of tw_test_control (declared in runtime/twellrt_internal.h):
 * every knob and probe the tests, the benchmark and the tool use to steer or look inside a plan,
 * a training state or the CUDA layer, in one list. SQLite's sqlite3_test_control is the model:
 * one entry point, an operation code, the operation's arguments. Each path implements its range
 * (its tw_<op>_test_control) in the *_probe.c beside its launcher, compiled only into the test
 * library twellrt_probe (probe.h); in the shipped libtwellrt every operation answers
 * TWELL_ERR_UNSUPPORTED.
 *
 * Conventions. Every operation returns a twell_status; results go to the pointers named last.
 * Argument types are exactly as listed (varargs: cast literals, e.g. (size_t)0, (double)64).
 * "plan" is a twell_plan *, "state" a twell_train_state *. A probe (it only reads) of a plan or
 * state that is not on the CUDA backend writes the neutral value given ("0", "-1", "AUTO") and
 * returns TWELL_OK; a knob (it changes something) returns TWELL_ERR_UNSUPPORTED for a plan
 * (TWELL_ERR_INVALID_ARG for a state) that is not on CUDA. Knobs that touch device buffers
 * synchronise the device first. An unknown code gives TWELL_ERR_INVALID_ARG.
 */
#ifndef TWELL_TEST_CONTROL_H
#define TWELL_TEST_CONTROL_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

enum {
    /* ---- the CUDA layer, process-wide (runtime/cuda/cuda_memory_probe.c) ---- */
    TW_TC_CUDA_FIRST = 100,
    /* (long n): the n-th device or page-locked allocation from now fails as
     * CUDA_ERROR_OUT_OF_MEMORY; 0 disarms (the countdown is process-wide). */
    TW_TC_CUDA_FAULT_INJECT = TW_TC_CUDA_FIRST,
    TW_TC_CUDA_FAULT_FIRED, /* (int *out): 1 when the armed failure happened since arming */
    TW_TC_CUDA_LIVE_ALLOCS, /* (long *out): device and page-locked blocks not yet freed */
    /* (unsigned long *out): calls of this process so far that blocked the host on device work
     * (synchronize, stream/event synchronize, event elapsed, synchronous copies to the host) */
    TW_TC_CUDA_HOST_WAITS,
    /* (const twell_ctx *ctx, unsigned long *out): driver calls made on ctx so far through the
     * wrappers (runtime/cuda/cuda_driver_api.h); 0 for a context not on CUDA. The steady-state cost
     * of an op's host path is the difference around a call. ctx's threading rule applies. */
    TW_TC_CUDA_DRIVER_CALLS,
    /* (const twell_ctx *ctx, const char **names, size_t cap, size_t *n): the names
     * ("cuEventRecord",
     * ...) of ctx's last min(cap, 64, calls) driver calls, oldest first, in names[0..*n) */
    TW_TC_CUDA_DRIVER_TRACE,
    TW_TC_CUDA_LAST,

    /* ---- gate-pack (runtime/ops/gate_pack/cuda_gate_pack_probe.c) ---- */
    TW_TC_GP_FIRST = 200,
    /* (plan, const char *variant): replaces the plan's gate-pack kernel with "simt", "sm90" or
     * "auto" (the normal choice); on failure the plan keeps its kernel. INVALID_ARG for another
     * name. */
    TW_TC_GP_SELECT = TW_TC_GP_FIRST,
    TW_TC_GP_VARIANT, /* (plan, const char **out): "simt" or "sm90" in use; "auto" (not CUDA) */
    TW_TC_GP_MODULES, /* (plan, int *out): modules loaded (the default, + one per tuned config) */
    /* (plan, size_t M, tw_gp_cfg *out or NULL): resolves M's bucket as its first call does and
     * gives its configuration (cuda_gate_pack.h's type); UNSUPPORTED when not CUDA. */
    TW_TC_GP_PREPARE,
    TW_TC_GP_LAST,

    /* ---- fused inference, sparse path (runtime/ops/ffn/tiled/cuda_ffn_probe.c) ---- */
    TW_TC_FFN_FIRST = 300,
    /* (plan, size_t M, tw_ffn_cfg *out or NULL): resolves M's bucket's tiled module as its first
     * call does and gives its configuration (cuda_ffn.h; zeroed without tiled kernels). */
    TW_TC_FFN_PREPARE = TW_TC_FFN_FIRST,
    /* (plan, tw_ffn_tk *tk or NULL): every tiled call runs tk (borrowed; it must outlive its use),
     * whatever the bucket; NULL: back to the per-bucket choice. */
    TW_TC_FFN_FORCE,
    /* (plan, const char *kernel): "auto", "rows" (the tiled module's row kernel; UNSUPPORTED
     * without it) or "generic" (the portable row kernel, compiled now if needed). */
    TW_TC_FFN_SET_KERNEL,
    /* (plan, size_t pair_cap, size_t ovf_cap): pins the pair and overflow capacities (both 0:
     * automatic sizing again), to exercise the device-side fallback. */
    TW_TC_FFN_SET_CAPACITY,
    /* (plan, uint32_t out[4]): the last tiled chunk's flag words: [0] fallback bits (1 overflow
     * buffer too small, 2 pair buffer too small), [1] pair slots needed, [2] overflowing
     * row-tiles, [3] overflowing rows; all 0 if none ran. */
    TW_TC_FFN_FLAGS,
    TW_TC_FFN_TILED,           /* (plan, int *out): 1 when the plan has the tiled pipeline */
    TW_TC_FFN_MODULES,         /* (plan, int *out): tiled modules loaded (+ the row kernel) */
    TW_TC_FFN_WORKSPACE_BYTES, /* (plan, size_t *out): device bytes of the sparse workspace */
    TW_TC_FFN_PROBES,          /* (plan, int *out): calls that synchronised to size it */
    /* (plan, uint32_t acc[4], int grows[2]): what the tiled chunks needed, accumulated on the
     * device since plan creation (synchronises the device): acc[0] chunks that ran the exact
     * fallback (eager calls and replays), acc[1..3] the most pair slots, overflowing row-tiles
     * and rows one chunk needed; grows: workspace growths from those needs without a wait, [0]
     * with the plan's work finished, [1] with calls still in flight (old buffers retired behind
     * an event). Zeros for a plan not on CUDA. */
    TW_TC_FFN_NEEDS,
    TW_TC_FFN_CHUNK_ROWS, /* (size_t *out): rows per pipeline run (no plan) */
    /* (const twell_ctx *parent, const twell_shape *shape, char *err, size_t errlen): compiles
     * the portable row kernel for shape on parent's device into parent's disk cache, from any
     * thread (a worker context with parent's options: see tw_jit_cubin_detached). */
    TW_TC_FFN_COMPILE_ROWS,
    /* (plan, long long knob): the heavy-row route (cuda_ffn_heavy.h) for later calls: < 0 the
     * default (on once overflowing rows were seen), 0 off, > 0 on with this row threshold. */
    TW_TC_FFN_SET_HEAVY,
    /* (plan, int *rows): rows the last classified chunk sent to the heavy-row block
     * (synchronises the device); 0 when no chunk ran the route. */
    TW_TC_FFN_HEAVY_ROWS,
    TW_TC_FFN_LAST,

    /* ---- fused inference, dense path and AUTO (runtime/ops/ffn/cuda_dense_probe.c) ---- */
    TW_TC_DENSE_FIRST = 400,
    TW_TC_DENSE_AVAILABLE = TW_TC_DENSE_FIRST, /* (plan, int *out): the dense route can run */
    TW_TC_DENSE_LAST_PATH, /* (plan, twell_path *out): SPARSE/DENSE last run; AUTO before */
    TW_TC_DENSE_ESTIMATE,  /* (plan, double *out): active values per row AUTO uses; -1 none */
    /* (plan, size_t M, double *out): AUTO's threshold at M rows, active values per row */
    TW_TC_DENSE_THRESHOLD,
    /* (plan, size_t M, const char **out): the route ("tiled", "dense", ...) AUTO would take now
     * for a call of M rows with 16-byte aligned tensors; NULL for a plan not on CUDA */
    TW_TC_DENSE_ROUTE,
    /* (plan, double nnz_per_row): AUTO's threshold; ≤ 0 restores the default */
    TW_TC_DENSE_SET_THRESHOLD,
    /* (plan, size_t rows): the smallest M that AUTO runs dense (0: the policy's) */
    TW_TC_DENSE_SET_MIN_ROWS,
    /* (plan, uint64_t out[2]): the last counting call's [0] Σ counts, [1] its overflowing
     * row-tiles (0 from the tiled pipeline's pre-pass, which does not count them) */
    TW_TC_DENSE_COUNTS,
    TW_TC_DENSE_GROW_SYNCS,      /* (plan, int *out): host waits to grow the dense workspace */
    TW_TC_DENSE_WORKSPACE_BYTES, /* (plan, size_t *out): device bytes of the dense workspace */
    /* (plan, twell_path path (passed as an int), unsigned long *out): calls of path so far */
    TW_TC_DENSE_CALLS,
    /* (plan, unsigned pattern): fills the dense workspace with the 16-bit pattern */
    TW_TC_DENSE_POISON,
    /* (unsigned *out): dynamic shared memory the launcher gives gemm_sm90 (no plan) */
    TW_TC_DENSE_GEMM_SMEM,
    /* (unsigned *out): the same for the split-K gemm_sm90 (SPLIT = 1; no plan) */
    TW_TC_DENSE_SPLIT_GEMM_SMEM,
    /* (plan, unsigned long out[2]): dense calls so far whose gate [0] came from the cuBLASLt
     * gate-pack of the same arguments, [1] was computed by the dense call itself */
    TW_TC_DENSE_GATE_REUSED,
    /* (plan, size_t lo, size_t hi): twell_gate_pack runs the cuBLASLt route for lo ≤ M ≤ hi
     * (besides calls the dense route will reuse); lo > hi: never on its own; 0, 0: the policy */
    TW_TC_DENSE_SET_LT_GATE,
    TW_TC_DENSE_LAST_GATE_LT, /* (plan, int *out): the last twell_gate_pack ran through cuBLASLt */
    TW_TC_DENSE_LAST,

    /* ---- small-batch inference path, both ops (runtime/ops/ffn/small/cuda_small_probe.c) ---- */
    TW_TC_SMALL_FIRST = 700,
    /* (plan, const char *mode): "auto" (the default: AUTO's limits), "off" (never) or "force"
     * (every call it can take, up to 1024 rows; twell_ffn_infer: unless the path is DENSE) */
    TW_TC_SMALL_SET_MODE = TW_TC_SMALL_FIRST,
    TW_TC_SMALL_AVAILABLE,       /* (plan, int *out): the plan has the path's kernels */
    TW_TC_SMALL_LAST_GATE,       /* (plan, int *out): the last twell_gate_pack ran it */
    TW_TC_SMALL_LAST_FFN,        /* (plan, int *out): the last twell_ffn_infer ran it */
    TW_TC_SMALL_ROWS,            /* (plan, size_t *out): rows its workspace holds */
    TW_TC_SMALL_WORKSPACE_BYTES, /* (plan, size_t *out): device bytes of that workspace */
    /* (plan, unsigned pattern): fills its scratch (not its arrival counters) with the 32-bit
     * pattern */
    TW_TC_SMALL_POISON,
    /* (plan, const char *kernel): the gate-pack kernel of later small-path calls (small_gate.h):
     * "auto" (the default) or "g2u2", the one kernel; ":<wn>" after it forces the neuron groups a
     * block (1, 2, 4, 8; where T takes it) */
    TW_TC_SMALL_SET_GATE,
    /* (plan, const char **out): the kernel the last twell_gate_pack ran on the small path
     * ("g2u2"), "" when it ran elsewhere */
    TW_TC_SMALL_LAST_GATE_KERNEL,
    /* (plan, int plain): 1 runs few-row twell_ffn_infer calls on the one-kernel fused kernel
     * without a cluster where the cluster kernel would run (sm_90+), 0 (the default) the rule's */
    TW_TC_SMALL_SET_FUSED_PLAIN,
    /* (plan, int on): 1 runs the up and down kernels where the row kernel would run (more rows
     * than the fused kernel's), 0 (the default) the rule's */
    TW_TC_SMALL_SET_UPDOWN,
    /* (plan, const char **out): the one-kernel kernel the last small-path twell_ffn_infer ran
     * ("fused", "fused_cl", "row"), "" when it ran the up and down kernels or elsewhere */
    TW_TC_SMALL_LAST_FUSED_KERNEL,
    TW_TC_SMALL_LAST,

    /* ---- training, sparse path (runtime/ops/train/sparse/cuda_train_probe.c) ---- */
    TW_TC_TRAIN_FIRST = 500,
    /* (state, uint64_t row_len, uint64_t nrn_len): forced row and neuron chunk lengths
     * (0: automatic), so small problems exercise the split paths */
    TW_TC_TRAIN_SET_CHUNK_LEN = TW_TC_TRAIN_FIRST,
    /* (state, tw_cuda_train_host *out): host copy of the saved forward (and backward) state;
     * INVALID_ARG when it holds none. Free with TW_TC_TRAIN_HOST_FREE. */
    TW_TC_TRAIN_DOWNLOAD,
    TW_TC_TRAIN_HOST_FREE, /* (tw_cuda_train_host *h): frees a download; NULL: nothing */
    /* (state, int on): later ops use the earlier kernels where newer ones exist (SIMT recount and
     * spill of overflowing row-tiles, unstaged per-entry dot products, the scatter that advances
     * its cursors in global memory), for comparisons in one run; results differ only in the
     * overflowing row-tiles' gate summation order */
    TW_TC_TRAIN_SET_LEGACY,
    /* (state, int on): profiling: every later forward and backward records an event after each
     * launch group and, at its end, adds each interval to its label's total (kernel name without
     * "twell_train_", "gate_pack", "scan_<mode>", "host_sync"); switching clears the totals;
     * timings include the events' own cost */
    TW_TC_TRAIN_PROFILE,
    /* (state, char *buf, size_t cap, size_t *len): "label  mean-ms (count)" lines */
    TW_TC_TRAIN_PROFILE_REPORT,
    /* (state, int tiled): U (forward) and dT (backward) tiled (1, what every state starts with:
     * the fused inference pipeline's lists and phase A on tensor cores, where it can run: 16-byte
     * aligned tensors, K % 64 == 0, M <= 65536) or per entry (0: staged dot products in the CPU
     * reference's order, bit-identical to it) for later ops. The product has no other way to pick
     * the per-entry route where tiled runs: it is the tests' bit-exact oracle of the tiled one
     * (tiled sums in another fp32 order: not bit-identical, within the tests' tolerances) */
    TW_TC_TRAIN_SET_UDT,
    TW_TC_TRAIN_UDT_TILED, /* (state, int *out): 1 when the saved forward ran tiled */
    TW_TC_TRAIN_LAST_VEC,  /* (state, int *out): the last op's module: 8 or 1 (loads); 0 */
    /* (state, long long thr): the heavy-row route (cuda_train_heavy.h) for later forwards: 0
     * off (every row per entry, overflowing row-tiles on the overflow route), > 0 rows with
     * more than thr active values go to the dense row block, < 0 the cost model's threshold
     * (tw_tl_heavy_threshold; the default). Runs only where the dense GEMMs can (sm_90a,
     * K % 64 == 0, 16-byte aligned tensors) */
    TW_TC_TRAIN_SET_HEAVY,
    /* (state, size_t *rows, uint64_t *nnz, uint32_t *thr): the saved forward's heavy rows,
     * their active values and the threshold it classified with (0, 0, 0: the route did not run;
     * 0, 0, thr: it ran and found none) */
    TW_TC_TRAIN_HEAVY_ROWS,
    /* (state, unsigned epoch): the epoch the next scan increments from (the one-pass scans tag
     * their look-back flags with it; past 2^31 - 2 it wraps to 1 and the flags are cleared);
     * INVALID_ARG when the state holds no CUDA training data yet */
    TW_TC_TRAIN_SET_SCAN_EPOCH,
    TW_TC_TRAIN_LAST,

    /* ---- training, dense path and AUTO (runtime/ops/train/dense/cuda_train_dense_probe.c) ---- */
    TW_TC_TD_FIRST = 600,
    TW_TC_TD_LAST_PATH = TW_TC_TD_FIRST, /* (state, twell_path *out): the last forward's path */
    TW_TC_TD_ESTIMATE, /* (state, double *out): active values per row AUTO uses; -1 none */
    /* (state, double nnz_per_row, size_t min_rows): AUTO's threshold (≤ 0: default) and rows */
    TW_TC_TD_SET_THRESHOLD,
    /* (state, unsigned stages): ring depth of the weight-gradient GEMM (2..4, 0 default),
     * before the first dense forward */
    TW_TC_TD_SET_WGRAD_STAGES,
    /* (state, size_t M, uint16_t *p): the dense saved forward's gate P, [M, N] 16-bit patterns */
    TW_TC_TD_DOWNLOAD_P,
    /* (state, twell_path path (passed as an int), unsigned long *out): forwards run so far */
    TW_TC_TD_CALLS,
    /* (state, size_t *out): device bytes of the dense path's own workspace held now (0: none,
     * released while running sparse, or a lent one in use) */
    TW_TC_TD_WORKSPACE_BYTES,
    /* (state, unsigned long *out): times the own workspace was released (cuda_train_dense.h's
     * TW_TD_RELEASE_FIRST rule, or freed to make room for the sparse state) */
    TW_TC_TD_RELEASES,
    /* (state, int reset, size_t *out): the largest twell_train_state_bytes seen after any op
     * since the state was created or the last reset; reset != 0 then restarts it from what the
     * state holds now */
    TW_TC_TD_PEAK_BYTES,
    TW_TC_TD_LAST
};

/* Host copy of a CUDA training state (TW_TC_TRAIN_DOWNLOAD), with cpu_train.h's layout plus the
 * CUDA extras. Arrays malloc'd; free with TW_TC_TRAIN_HOST_FREE. */
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

#endif /* TWELL_TEST_CONTROL_H */
