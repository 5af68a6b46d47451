/* tw_gpu_train.h — what test_gpu_train and test_gpu_train_routes share: a CUDA context or a clean
 * skip, a case's shape and GPU side (plan, state, uploaded inputs at an optional unaligned
 * offset, outputs), one poisoned forward + backward run, and the comparison of its outputs
 * with the CPU reference's (cmocka must be included first). */
#ifndef TWELL_TW_GPU_TRAIN_H
#define TWELL_TW_GPU_TRAIN_H

#include "ref64_train.h"
#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* The context every call of these tests uses (gt_open_or_skip creates it). */
extern twell_ctx *gt_ctx;

#define BF TWELL_DTYPE_BF16
#define FP TWELL_DTYPE_FP16

typedef struct {
    size_t M;
    uint32_t K, N, T, C;
    twell_dtype dt;
    double density;
    int skew;
    int exact; /* exact-gate data: the support must match the CPU bit for bit */
    float lambda;
    uint64_t row_len, nrn_len; /* forced chunk lengths, 0 = automatic */
    int unaligned;             /* tensors at 2-byte (16-bit) / 4-byte (fp32) offsets */
} gt_case;

/* Creates gt_ctx on the CUDA backend and prints the device; without one,
 * tw_gpu_unavailable(test, "no usable CUDA device (<status>: <why>)"): exit 77, or a failure
 * where TWELL_REQUIRE_GPU=1. */
void gt_open_or_skip(const char *test);

#define GT_OK(expr)                                                                                \
    do {                                                                                           \
        twell_status st_ = (expr);                                                                 \
        if (st_ != TWELL_OK)                                                                       \
            fail_msg("%s: %s: %s", #expr, twell_status_name(st_), twell_ctx_errmsg(gt_ctx));       \
    } while (0)

#define GT_LE(val, tol, what)                                                                      \
    do {                                                                                           \
        double v_ = (val), t_ = (tol);                                                             \
        if (!(v_ <= t_))                                                                           \
            fail_msg("%s: %.4g > tolerance %.1g", what, v_, t_);                                   \
    } while (0)

twell_shape gt_shape(const gt_case *c);

/* ---- device buffers (optionally at an unaligned offset) ---- */

typedef struct {
    void *base; /* what tw_cuda_malloc returned */
    void *p;    /* what the op sees */
} gt_dbuf;

/* A device buffer of bytes at offset bytes past an allocation (fails the test on error). */
void gt_alloc(gt_dbuf *b, size_t bytes, size_t offset);
/* gt_alloc, then a copy of src into it. */
void gt_upload(gt_dbuf *b, const void *src, size_t bytes, size_t offset);

/* Everything a GPU run writes, on the host. */
typedef struct {
    uint16_t *y, *dx;
    float *dwg, *dwu, *dwd;
    float stats[2];
} gt_out;

/* Host outputs for M tokens, K features, N neurons (assert on failure); gt_out_free frees them. */
void gt_out_alloc(gt_out *o, size_t M, uint32_t K, uint32_t N);
void gt_out_free(gt_out *o);
/* Two runs' outputs (M rows) bit for bit the same. */
void gt_expect_same(const gt_out *a, const gt_out *b, size_t M, uint32_t K, uint32_t N);

/* The GPU side of a case: plan, state, uploaded inputs, outputs. */
typedef struct {
    twell_plan *plan;
    twell_train_state *state;
    gt_dbuf x, wg, wu, wd, dy, y, dx, dwg, dwu, dwd, stats;
    size_t M;
    uint32_t K, N;
} gt_gpu;

/* Plan and state of shape s; c's forced chunk lengths when set. */
void gt_gpu_open(gt_gpu *g, const twell_shape *s, const gt_case *c);
/* Uploads d's inputs and allocates the outputs (at 2 / 4-byte offsets when unaligned). */
void gt_gpu_data(gt_gpu *g, const tw_t_data *d, int unaligned);
/* Frees what gt_gpu_data allocated (the plan and state stay). */
void gt_gpu_free_data(gt_gpu *g);
/* gt_gpu_free_data, then the state and the plan. */
void gt_gpu_close(gt_gpu *g);

/* Fills `bytes` (a multiple of 2) of device memory at p with the 32-bit pattern repeated, by a
 * copy from the host: cuMemsetD32 needs 4-byte alignment, the unaligned cases have 2. */
void gt_poison(void *p, size_t bytes, uint32_t pattern);

/* Poisons every output with a NaN pattern, runs forward + backward, copies the outputs back and
 * checks every element was written and is finite. */
void gt_gpu_run(gt_gpu *g, float lambda, uint32_t poison, gt_out *o);

/* Row-relative L2 errors of one run against another, per output tensor. */
typedef struct {
    double e[5];   /* y, dx, dwg, dwu, dwd */
    size_t at[5];  /* worst row */
    size_t bit[5]; /* rows bitwise equal to the CPU */
    size_t cmp[5]; /* rows compared */
} gt_errs;

/* The output names in gt_errs order. */
extern const char *const gt_names[5];

/* Errors of g against r over M rows; rows (neurons) where row_same (nrn_same) is 0 are left out
 * (all compared when NULL). */
void gt_compare(const twell_shape *s, size_t M, const gt_out *g, const gt_out *r,
                const unsigned char *row_same, const unsigned char *nrn_same, gt_errs *e);
/* Prints each error and fails above the tolerances: y, dx 5e-3 (bf16) or 1e-3 (fp16), the
 * weight gradients 1e-5 unless w_fp64 (then printed only). gt_expect: w_fp64 = 0. */
void gt_expect_w(const twell_shape *s, const gt_errs *e, int w_fp64);
void gt_expect(const twell_shape *s, const gt_errs *e);

#endif
