/*
 * bench.h — the `twell bench` harness: options, the record every benchmark writes, the timing
 * protocol (L2 flushed, warm-up, interleaved, median of CUDA-event times) and the op plug-ins.
 */
#ifndef TWELL_BENCH_H
#define TWELL_BENCH_H

#include "cuda_driver.h"
#include "synth.h"
#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_MAX_LIST 16

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
    char variant[16];  /* which of our kernels ran */
    double ours_ms;    /* median */
    char baseline[32]; /* e.g. "cublas_gemm" */
    double baseline_ms;
    double ratio; /* baseline_ms / ours_ms: > 1 means faster than the baseline */
    double ours_min_ms, ours_max_ms, baseline_min_ms, baseline_max_ms;
    int reps;
    double max_rel_err; /* over the checked rows (definition per op) */
    size_t checked_rows;
    int correct; /* the check passed */
    char check_note[384];
    char gpu[160];
    char commit[48];
    char date[32];
} bench_record;

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

/* Times fns[0..n) interleaved: warm-up, then per repetition for each fn (order rotating): L2
 * flush, event, run, event. Fills med/min/max (ms) per fn. A failing fn aborts with its status. */
twell_status bench_time(bench_env *env, size_t n, bench_fn *fns, void **args, int reps, int warmup,
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

/* ---- dense baseline through cuBLAS (bench/cublas.c; dlopen, the library never links it) ---- */
typedef struct bench_cublas bench_cublas;
/* Loads libcublas (.so.13, .so.12, .so) and creates a handle on the current device context.
 * Returns NULL and writes why into err on failure. */
bench_cublas *bench_cublas_open(twell_ctx *ctx, char *err, size_t errlen);
void bench_cublas_close(twell_ctx *ctx, bench_cublas *cb);
/* C[M, N] = A[M, K] · B[N, K]ᵀ, all row-major dtype, fp32 accumulation (CUBLAS_COMPUTE_32F),
 * on the default stream. Returns 0, or the cuBLAS status with a message in err. */
int bench_cublas_gemm_nt(twell_ctx *ctx, bench_cublas *cb, twell_dtype dt, size_t M, uint32_t N,
                         uint32_t K, const void *A, const void *B, void *C, char *err,
                         size_t errlen);

#endif /* TWELL_BENCH_H */
