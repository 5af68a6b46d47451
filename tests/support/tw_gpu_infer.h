/* tw_gpu_infer.h — what the GPU inference tests (test_gpu_ffn_infer, _dense, _small, _graph)
 * share: their case table's row and its cmocka registration, synthetic data uploaded with device
 * buffers for packed and y, gate-pack read back, the checked rows and their CPU reference
 * (tw_ffn_infer_ref on the GPU's packed bytes), a poisoned ffn_infer run read back, the
 * row-relative error against the tolerance, and the bitwise comparison of two runs (cmocka must be
 * included first). */
#ifndef TWELL_TW_GPU_INFER_H
#define TWELL_TW_GPU_INFER_H

#include "synth.h"
#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

#define BF TWELL_DTYPE_BF16
#define FP TWELL_DTYPE_FP16
#define UNI TW_SYNTH_UNIFORM
#define SKW TW_SYNTH_SKEWED

/* One row of a sweep's case table. */
typedef struct {
    size_t M;
    uint32_t K, N, T, C;
    twell_dtype dtype;
    int gated;
    tw_synth_dist dist;
    double nnz;
    int want_overflow; /* the data must contain overflowing row-tiles */
} gi_case;

/* The case's shape: twell_shape_init(K, N) with its T, C, dtype and gated. */
twell_shape gi_shape(const gi_case *c);

/* Room for one test name of gi_case_tests. */
#define GI_NAME 120

/* Registers cases[0..n) as tests[at..at + n): fn with the case as its state, named
 * "<prefix>_M<M>_K<K>_N<N>_T<T>_C<C>_<bf16|fp16>_<gated|plain>_<dist>" in names[0..n). Returns
 * at + n. */
size_t gi_case_tests(struct CMUnitTest *tests, size_t at, char (*names)[GI_NAME],
                     const char *prefix, const gi_case *cases, size_t n, CMUnitTestFunction fn);

/* The tolerance of y's row-relative L2 error: 5e-3 bf16, 1e-3 fp16 (the output rounding level). */
double gi_tol(twell_dtype dt);

/* Synthetic data of shape s for M rows (10% heavy rows, a dense first token every 64 rows, so
 * that small M has both); fails the test on error. */
tw_synth_ffn *gi_synth(twell_ctx *ctx, const twell_shape *s, size_t M, tw_synth_dist dist,
                       double nnz, uint64_t seed);

/* The largest row-relative L2 error of y [M, K] over all its rows against tw_ffn_infer_ref of f's
 * data on the GPU's packed bytes; *worst_row gets its row (tw_gpu_max_row_err). */
double gi_all_rows_err(twell_ctx *ctx, const twell_shape *s, size_t M, const tw_synth_ffn *f,
                       const uint32_t *packed, const uint16_t *y, size_t *worst_row);

/* Everything one case needs on both sides. */
typedef struct {
    twell_ctx *ctx;
    twell_shape s;
    size_t M;
    tw_synth_ffn *f;
    void *dx, *dwg, *dwu, *dwd, *dy; /* dwg NULL when not gated */
    uint32_t *dp;
    uint32_t *packed; /* host copy of the GPU's packed buffer */
    size_t *rows;     /* the checked rows of y (room for M + GI_SPARE_ROWS) */
    size_t nrows, rows_cap;
    size_t ovf_checked; /* overflowing row-tiles among the checked rows (gi_check_rows) */
    uint64_t total;     /* gi_count: Σ counts over all rows */
    size_t ovf_tiles;   /* gi_count: overflowing row-tiles in all rows */
    uint64_t ovf_units; /* gi_count: distinct units (256 rows x 256 columns) that overflow */
    uint16_t *ref;      /* [nrows, K] reference rows */
    uint16_t *got;      /* [M, K] host copy of y */
} gi_data;

/* Checked rows beyond M a test may have (a spread sample, overflowing rows, rows it adds). */
#define GI_SPARE_ROWS 256

/* gi_synth's data on ctx, uploaded (x, wg when gated, wu, wd); device y and packed; host packed,
 * y and rows. Every count zero, no row checked yet. */
void gi_setup(gi_data *d, twell_ctx *ctx, const twell_shape *s, size_t M, tw_synth_dist dist,
              double nnz, uint64_t seed);

/* Gate-pack of d on the GPU with plan on the default stream, waited for, copied to d->packed. */
void gi_gate_pack(gi_data *d, twell_plan *plan);

/* d->total, d->ovf_tiles and d->ovf_units from d->packed over all rows. */
void gi_count(gi_data *d);

/* The rows to check (tw_gpu_check_rows: every row up to full_m, else about `sample` plus up to
 * ovf_rows overflowing ones), d->ovf_checked among them, and their reference. */
void gi_check_rows(gi_data *d, size_t full_m, size_t sample, size_t ovf_rows);

/* The reference of the checked rows d->rows[from..nrows) (d->ref grows to nrows rows). */
void gi_reference(gi_data *d, size_t from);

/* Adds row m to the checked rows (its reference still to compute: gi_reference). */
void gi_add_row(gi_data *d, size_t m);

/* One ffn_infer of d's M rows on `stream` into y poisoned with `poison`, waited for, copied to
 * d->got: every element written and finite. */
void gi_run(gi_data *d, twell_plan *plan, uint16_t poison, twell_stream stream);

/* Prints "#   <what> max row-rel err E (row R), tolerance T" (what padded to width) for the checked
 * rows of d->got against d->ref and fails above gi_tol. */
void gi_expect(const gi_data *d, int width, const char *what);

/* A copy of d->got (M rows; the test frees it). */
uint16_t *gi_keep_y(const gi_data *d);

/* Fails unless got[0..n) equals first bitwise: "<prefix>run 2 differs from run 1 at y[r][k]". */
void gi_expect_same_y(const uint16_t *first, const uint16_t *got, size_t n, uint32_t K,
                      const char *prefix);

/* Frees what gi_setup and the checks allocated (device and host). */
void gi_free(gi_data *d);

#endif
