/* tw_gpu.c — the GPU tests' shared fixture and output checks (see tw_gpu.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tw_gpu.h"

#include "half.h"
#include "pack_check.h"
#include "plan_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tw_gpu_why[512];

int tw_gpu_required(void) {
    const char *e = getenv("TWELL_REQUIRE_GPU");
    return e && *e && strcmp(e, "0") != 0;
}

_Noreturn void tw_gpu_unavailable(const char *test, const char *what) {
    if (tw_gpu_required()) {
        fprintf(stderr, "%s: FAILED, %s; TWELL_REQUIRE_GPU=1 requires it\n", test, what);
        exit(1);
    }
    fprintf(stderr, "%s: SKIPPED, %s\n", test, what);
    exit(77);
}

static void tw_gpu_log(void *user, twell_log_level level, const char *msg) {
    (void)level;
    snprintf((char *)user, sizeof tw_gpu_why, "%s", msg);
}

twell_ctx *tw_gpu_open_or_skip(const char *test) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CUDA;
    o.log = tw_gpu_log;
    o.log_user = tw_gpu_why;
    o.log_level = TWELL_LOG_ERROR;
    twell_ctx *ctx = NULL;
    twell_status st = twell_ctx_create(&o, &ctx);
    if (st != TWELL_OK) {
        char what[sizeof tw_gpu_why + 64];
        snprintf(what, sizeof what, "no usable CUDA device (%s: %s)", twell_status_name(st),
                 tw_gpu_why);
        tw_gpu_unavailable(test, what);
    }
    return ctx;
}

void *tw_gpu_upload(twell_ctx *ctx, const void *src, size_t bytes) {
    void *d = NULL;
    TW_GPU_OK(ctx, tw_cuda_malloc(ctx, bytes, &d));
    TW_GPU_OK(ctx, tw_cuda_memcpy_htod(ctx, d, src, bytes));
    return d;
}

void tw_gpu_expect_written(twell_dtype dt, const uint16_t *got, size_t n, uint32_t K,
                           uint16_t poison, const char *name) {
    for (size_t i = 0; i < n; i++) {
        float v = tw_half_to_f32(dt, got[i]);
        if (got[i] == poison || !isfinite(v))
            fail_msg("%s[%zu][%zu] = %04x (%g): never written or not finite (poison %04x)", name,
                     i / K, i % K, got[i], (double)v, poison);
    }
}

double tw_gpu_max_row_err(twell_dtype dt, uint32_t K, const uint16_t *got, const size_t *rows,
                          size_t nrows, const uint16_t *ref, size_t *worst_row) {
    double worst = 0.0;
    *worst_row = 0;
    for (size_t i = 0; i < nrows; i++) {
        const uint16_t *g = got + rows[i] * K, *r = ref + i * K;
        double num = 0.0, den = 0.0;
        for (uint32_t k = 0; k < K; k++) {
            double a = tw_half_to_f32(dt, g[k]), b = tw_half_to_f32(dt, r[k]);
            num += (a - b) * (a - b);
            den += b * b;
        }
        double e = den > 0.0 ? sqrt(num / den) : sqrt(num);
        if (!(e <= worst)) { /* NaN counts as worst: +inf, so no later row replaces it */
            worst = isnan(e) ? INFINITY : e;
            *worst_row = rows[i];
        }
    }
    return worst;
}

size_t tw_gpu_check_rows(const twell_shape *s, size_t M, const uint32_t *packed, size_t full_m,
                         size_t sample, size_t ovf_rows, size_t *rows) {
    if (M <= full_m) {
        for (size_t m = 0; m < M; m++)
            rows[m] = m;
        return M;
    }
    size_t row_words = s->N / s->C, W = s->T / s->C, NT = s->N / s->T;
    size_t nrows = tw_pack_sample_rows(M, sample, rows);
    size_t added = 0;
    for (size_t m = 0; m < M && added < ovf_rows; m++) {
        int ovf = 0, dup = 0;
        for (size_t t = 0; t < NT; t++)
            ovf |= packed[m * row_words + t * W] > W - 1;
        for (size_t i = 0; i < nrows && ovf; i++)
            dup |= rows[i] == m;
        if (ovf && !dup) {
            rows[nrows++] = m;
            added++;
        }
    }
    return nrows;
}
