/*
 * bench.h — the `twell bench` harness: options, the record every benchmark writes, the timing
 * protocol (L2 flushed, warm-up, interleaved, median of CUDA-event times) and the op plug-ins.
 */
#ifndef TWELL_BENCH_H
#define TWELL_BENCH_H

#include "twellrt_internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_MAX_LIST 16
#define BENCH_MAX_M ((size_t)1 << 40) /* --M bound: far past any GPU's memory, never wraps */

/* Command-line options (lists are comma-separated on the command line). */
typedef struct bench_opts {
    const char *op; /* "gate_pack", "ffn_infer" */
    size_t M[BENCH_MAX_LIST];
    size_t nM;
    double nnz[BENCH_MAX_LIST];
    size_t nnnz;
    tw_synth_dist dist[BENCH_MAX_LIST];
    size_t ndist;
    uint32_t K, N, T, C;
    twell_dtype dtype;
    int reps;            /* timed repetitions per implementation (median taken) */
    int warmup;          /* untimed runs first */
    size_t check_rows;   /* rows of each case compared with the CPU reference */
    const char *variant; /* kernel variant to force ("auto", "simt", "sm90") */
    const char *path;    /* ffn_infer: twell_plan_set_path ("auto", "sparse", "dense") */
    /* the small path's gate-pack kernel (TW_TC_SMALL_SET_GATE): "auto" or "g2u2", optionally
     * ":WN" */
    const char *small_gate;
    const char *lt_gate; /* --lt-gate auto|off|all */
    /* ffn_infer, the dense path's GEMMs: "auto" (the policy's split-K) or "U,D" (split factors
     * of the up and down GEMMs; 1 unsplit) */
    const char *mode;    /* ffn_infer: "eager", "graph" (both sides captured in CUDA graphs),
                            "both" or "host" (host time per call: bench_ffn.c) */
    int gated;           /* ffn_infer: 1 gated block (default), 0 non-gated (Wu, Wd) */
    int validate_packed; /* 1: the context has options.validate_packed ON (else OFF) */
    int layer; /* ffn_infer: ours through twell_ffn_layer (--entry layer), not the two calls */
    const char *out_dir;
    uint64_t seed;
} bench_opts;

/* One benchmark result: the schema every benchmark writes (the JSON files in bench/results). */
typedef struct bench_record {
    char op[32];
    char dtype[8];
    size_t M;
    uint32_t K, N, T, C;
    char distribution[16];
    double nnz_target; /* the synthetic data's target active neurons per row */
    double nnz_mean;   /* measured on our output */
    char variant[24];  /* which of our kernels ran */
    /* --path as given ("auto", "sparse", "dense", "small"): the route asked for */
    char requested_path[8];
    /* the route the record's calls ran, from the plan's test-control probes (not the variant's
     * kernel names): ffn_infer "small", "tiled", "rows" (the portable row kernel) or "dense",
     * "mixed" when the timed calls ran dense and sparse; a graph record the captured call's
     * route; train "sparse", "dense" or "mixed"; gate_pack "small" or "tiled"; "unknown" when
     * no call ran */
    char path[16];
    int gated;           /* ffn_infer: the block was gated (1) or non-gated (0); else 1 */
    int validate_packed; /* the context validated packed input (--validate-packed 1) */
    double ours_ms;      /* median */
    char baseline[32];   /* e.g. "cublas_gemm" */
    double baseline_ms;
    double ratio; /* baseline_ms / ours_ms: > 1 means faster than the baseline */
    double ours_min_ms, ours_max_ms, baseline_min_ms, baseline_max_ms;
    int reps;
    double max_rel_err; /* over the checked rows (definition per op) */
    size_t checked_rows;
    int correct; /* the check passed */
    char check_note[640];
    char gpu[160];
    char commit[48];
    char date[32];
} bench_record;

/* Writes recs[0..n) to f as the JSON array of the bench/results files (bench/record_json.c):
 * negative or non-finite numbers as null, strings escaped. Returns 0, or -1 when a write failed;
 * f stays open. */
int bench_records_write(FILE *f, const bench_record *recs, size_t n);

/* What the ops share: the context, the baseline library, the L2 flush buffer, events. */
typedef struct bench_env {
    twell_ctx *ctx;
    const bench_opts *opts;
    void *flush; /* device buffer written before every timed run */
    size_t flush_bytes;
    tw_cuda_event ev[2];
    struct bench_cublas *cublas; /* NULL if the library could not be loaded */
    char gpu[160], commit[48], date[32];
} bench_env;

/* A timed unit of work: enqueues one run on the default stream. */
typedef twell_status (*bench_fn)(void *arg);

/* ---- timing (bench/timing.c) ---- */
/* Times fns[0..n) interleaved: warm-up, then per repetition for each fn (order rotating): L2
 * flush, event, run, event. Fills med/min/max (ms) per fn. A failing fn aborts with its status. */
twell_status bench_time(bench_env *env, size_t n, bench_fn *fns, void **args, int reps, int warmup,
                        double *med, double *mn, double *mx);
/* One case: bench_time with the options' reps and warm-up. On failure prints it and marks r
 * failed, its note "timing failed: <context message>". Returns bench_time's status. */
twell_status bench_time_case(bench_env *env, bench_record *r, size_t n, bench_fn *fns, void **args,
                             double *med, double *mn, double *mx);

/* An op plug-in: runs every case of the options and appends records through emit. */
typedef struct bench_op {
    const char *name;
    const char *baseline;
    int (*run)(bench_env *env, void (*emit)(bench_env *, const bench_record *));
} bench_op;

int bench_gate_pack_run(bench_env *env, void (*emit)(bench_env *, const bench_record *));
int bench_ffn_run(bench_env *env, void (*emit)(bench_env *, const bench_record *));
int bench_train_run(bench_env *env, void (*emit)(bench_env *, const bench_record *));

/* Fills the record fields common to every op (gpu, commit, date, shape, dtype). */
void bench_record_init(const bench_env *env, bench_record *r, const char *op, size_t M,
                       tw_synth_dist dist, double nnz);
/* Puts slot ours of bench_time's results, the options' reps and the baseline's name into r, and
 * with have_base slot base's times and the ratio (else they stay -1 from bench_record_init). */
void bench_record_times(const bench_env *env, bench_record *r, const char *baseline,
                        const double *med, const double *mn, const double *mx, size_t ours,
                        size_t base, int have_base);
/* On a failed check (!r->correct), the "CHECK FAILED" line with the record's case and note. */
void bench_check_report(const bench_record *r);

/* ---- what the ops share to set a case up (bench/bench.c) ---- */
/* The largest of the options' M. */
size_t bench_max_M(const bench_opts *o);
/* --path's value as a twell_path (AUTO unless "dense" or "sparse"). */
twell_path bench_path_parse(const char *path);
/* Creates the plan for s and forces the options' --variant. Returns 0, or 1 after printing why
 * (*plan NULL). */
int bench_plan_open(bench_env *env, const twell_shape *s, twell_plan **plan);
/* The synthetic data of case (dist index di, nnz index ni) at M rows for shape s (gated or not).
 * Returns NULL after printing on failure. */
tw_synth_ffn *bench_synth(bench_env *env, const twell_shape *s, size_t M, int gated, size_t di,
                          size_t ni);

/* ---- probes of a plan or training state through tw_test_control (bench/bench.c) ---- */
/* The value op (one of the probes of test_control.h whose result is an int, double, size_t,
 * twell_path or variant name) writes for obj; the neutral value when the call fails. */
int bench_plan_int(twell_plan *plan, int op);
double bench_plan_double(twell_plan *plan, int op);
size_t bench_plan_size(twell_plan *plan, int op);
twell_path bench_plan_path(twell_plan *plan, int op);
double bench_plan_threshold(twell_plan *plan, size_t M); /* TW_TC_DENSE_THRESHOLD at M rows */
const char *bench_plan_variant(twell_plan *plan); /* TW_TC_GP_VARIANT: "simt", "sm90", "auto" */
/* The gate-pack kernel of the plan's last twell_gate_pack: "small-<kernel>" (e.g. "small-g2u2")
 * when the small path ran it, else bench_plan_variant. */
void bench_gate_name(twell_plan *plan, char *out, size_t n);
/* TW_TC_DENSE_CALLS: twell_ffn_infer calls of `path` the plan has run (the small-batch kernels
 * count as SPARSE). */
unsigned long bench_plan_calls(twell_plan *plan, twell_path path);
twell_path bench_state_path(twell_train_state *state, int op);
/* TW_TC_TD_CALLS: forwards of `path` the state has run. */
unsigned long bench_state_calls(twell_train_state *state, twell_path path);

/* ---- the dense baselines' elementwise kernels (bench/bench.c) ---- */
struct tw_param;
/* Compiles templates/<tmpl>.cu.lua with params through the JIT (as our own kernels are), loads it
 * into *mod and gets fns[i] = names[i] for i < n. On failure the context has the message; *mod may
 * be set (bench_ew_unload it either way). */
twell_status bench_ew_load(twell_ctx *ctx, const char *tmpl, const struct tw_param *params,
                           size_t nparams, size_t n, const char *const *names, tw_CUmodule *mod,
                           tw_CUfunction *fns);
/* Launches fn over a grid-stride grid (8 blocks per SM, 256 threads) on the default stream (_on:
 * on `stream`). */
twell_status bench_ew_launch(twell_ctx *ctx, tw_CUfunction fn, void **args);
twell_status bench_ew_launch_on(twell_ctx *ctx, tw_CUfunction fn, void **args, twell_stream stream);
/* Unloads a module of bench_ew_load (NULL: nothing). */
void bench_ew_unload(twell_ctx *ctx, tw_CUmodule mod);

/* ---- dense baseline through cuBLAS (bench/cublas.c; dlopen, the library never links it) ---- */
typedef struct bench_cublas bench_cublas;
/* Element types of GEMM operands (the cudaDataType values cuBLAS takes). */
typedef enum bench_cublas_type {
    BENCH_CUBLAS_R_32F = 0,
    BENCH_CUBLAS_R_16F = 2,
    BENCH_CUBLAS_R_16BF = 14
} bench_cublas_type;
/* The 16-bit type of dt (BF16 or FP16). */
bench_cublas_type bench_cublas_type_of(twell_dtype dt);
/* Loads libcublas (.so.13, .so.12, .so) and creates a handle on the current device context.
 * Returns NULL and writes why into err on failure. */
bench_cublas *bench_cublas_open(twell_ctx *ctx, char *err, size_t errlen);
void bench_cublas_close(twell_ctx *ctx, bench_cublas *cb);
/* The stream later GEMMs of cb are enqueued on (NULL: the default stream, as after open).
 * Returns 0 or the cuBLAS status. */
int bench_cublas_set_stream(twell_ctx *ctx, bench_cublas *cb, twell_stream stream);
/* Row-major C[M, N] (row stride ldc, type ct) = op(A)·op(B), fp32 accumulation
 * (CUBLAS_COMPUTE_32F), alpha 1, beta 0, on the default stream. A is [M, K] (row stride lda) or,
 * with ta, stored [K, M]; B is [K, N] (ldb) or, with tb, stored [N, K]; at, bt their types.
 * Returns 0, or -1 (dimensions beyond int, no device context) or the cuBLAS status, with a message
 * in err. */
int bench_cublas_gemm(twell_ctx *ctx, bench_cublas *cb, int ta, int tb, size_t M, size_t N,
                      size_t K, const void *A, size_t lda, bench_cublas_type at, const void *B,
                      size_t ldb, bench_cublas_type bt, void *C, size_t ldc, bench_cublas_type ct,
                      char *err, size_t errlen);
/* C[M, N] = A[M, K] · B[N, K]ᵀ, all row-major dtype (bench_cublas_gemm with tb, packed rows). */
int bench_cublas_gemm_nt(twell_ctx *ctx, bench_cublas *cb, twell_dtype dt, size_t M, uint32_t N,
                         uint32_t K, const void *A, const void *B, void *C, char *err,
                         size_t errlen);

#endif /* TWELL_BENCH_H */
