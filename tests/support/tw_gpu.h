/* tw_gpu.h — what the GPU tests share: a CUDA context or a clean skip (exit 77; a failure where
 * TWELL_REQUIRE_GPU=1), an OK-assert that
 * prints the context's message, uploads, and the checks of a 16-bit output against reference rows
 * (cmocka must be included first). */
#ifndef TWELL_TW_GPU_H
#define TWELL_TW_GPU_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* 1 when the environment says this machine has a GPU the tests must use (TWELL_REQUIRE_GPU set
 * to anything but "" or "0"; scripts/device.sh sets it): a test that finds no usable device
 * then fails instead of skipping, so a broken CUDA start on a GPU machine cannot pass. */
int tw_gpu_required(void);

/* Ends a test that cannot run because `what` is missing (e.g. "no usable CUDA device
 * (NO_DEVICE: ...)"): prints "<test>: SKIPPED, <what>" and exits 77, or under tw_gpu_required()
 * prints "<test>: FAILED, <what>; TWELL_REQUIRE_GPU=1 requires it" and exits 1. */
_Noreturn void tw_gpu_unavailable(const char *test, const char *what);

/* A context on the CUDA backend, errors logged into a buffer so a failure can say why; without
 * one, tw_gpu_unavailable(test, "no usable CUDA device (<status>: <why>)"). */
twell_ctx *tw_gpu_open_or_skip(const char *test);

/* Fails the current test unless expr returns TWELL_OK: prints expr, the status and ctx's message.
 */
#define TW_GPU_OK(ctx, expr)                                                                       \
    do {                                                                                           \
        twell_status st_ = (expr);                                                                 \
        if (st_ != TWELL_OK)                                                                       \
            fail_msg("%s: %s: %s", #expr, twell_status_name(st_), twell_ctx_errmsg(ctx));          \
    } while (0)

/* A device buffer of `bytes` holding a copy of src (TW_GPU_OK on both steps). */
void *tw_gpu_upload(twell_ctx *ctx, const void *src, size_t bytes);

/* Fails the test at the first of got[0..n) (rows of K dtype values, named `name`) that still holds
 * `poison` or is not finite. */
void tw_gpu_expect_written(twell_dtype dt, const uint16_t *got, size_t n, uint32_t K,
                           uint16_t poison, const char *name);

/* Largest row-relative L2 error ‖got_r − ref_i‖₂ / ‖ref_i‖₂ (‖got_r‖₂ when ref_i is zero), r =
 * rows[i], over i < nrows: got is [M, K], ref [nrows, K]. A NaN error counts as worst (+inf is
 * returned); *worst_row gets its row. */
double tw_gpu_max_row_err(twell_dtype dt, uint32_t K, const uint16_t *got, const size_t *rows,
                          size_t nrows, const uint16_t *ref, size_t *worst_row);

/* The rows to check of an M-row packed output: all of them up to full_m, else tw_pack_sample_rows
 * (about `sample`) plus up to ovf_rows more rows that have an overflowing row-tile. rows holds
 * sample + ovf_rows entries (M when M ≤ full_m). Returns the count. */
size_t tw_gpu_check_rows(const twell_shape *s, size_t M, const uint32_t *packed, size_t full_m,
                         size_t sample, size_t ovf_rows, size_t *rows);

#endif
