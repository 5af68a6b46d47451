/* test_gpu_soak.c — eight threads, each with its own CUDA context, plans and stream, run
 * inference (gate-pack + ffn_infer at 1, 7, 64 and 300 rows) and training steps (forward +
 * backward at 64 rows) mixed for TWELL_SOAK_SECONDS (default 60; `small`: 3, for the
 * sanitizers). Every inference result is checked against the CPU backend run on the GPU's own
 * packed bytes (row-relative L2 within the output rounding), every training step's gradients
 * must equal the thread's first step bit for bit (the training paths are deterministic) and that
 * first step must match the CPU backend's. Workers record failures instead of asserting (cmocka
 * is not thread-safe); the main thread reports them after joining.
 * labels: gpu */
#include "cuda_driver.h"
#include "half.h"
#include "internal.h"
#include "synth.h"
#include "twellrt.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "tw_gpu.h"
#include "tw_gpu_infer.h"

#define SK_THREADS 8
#define SK_MAX_M 300
#define SK_TRAIN_M 64
static const size_t sk_ms[] = {1, 7, 64, SK_MAX_M};
#define SK_NM (sizeof sk_ms / sizeof sk_ms[0])

static double sk_seconds = 60.0;

typedef struct {
    int id;
    twell_shape s;
    size_t infer_calls, train_calls;
    int failed;
    char why[512];
} sk_worker;

static double sk_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Records the worker's first failure; returns 0 so callers can `return sk_fail(...)`. */
static int sk_fail(sk_worker *w, const char *fmt, ...) {
    if (!w->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->why, sizeof w->why, fmt, ap);
        va_end(ap);
    }
    w->failed = 1;
    return 0;
}

#define SK_TRY(w, ctx, expr)                                                                       \
    do {                                                                                           \
        twell_status st_ = (expr);                                                                 \
        if (st_ != TWELL_OK)                                                                       \
            return sk_fail(w, "%s: %s: %s", #expr, twell_status_name(st_), twell_ctx_errmsg(ctx)); \
    } while (0)

static twell_ctx *sk_ctx(twell_backend b) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = b;
    o.cpu_threads = 1;
    twell_ctx *ctx = NULL;
    return twell_ctx_create(&o, &ctx) == TWELL_OK ? ctx : NULL;
}

/* Rows 0..SK_MAX_M-1, for tw_gpu_max_row_err over every row of a result. */
static size_t sk_rows[SK_MAX_M];

/* Largest row-relative L2 error of got against ref over their first M rows of K (pure: safe in
 * a worker thread). */
static double sk_row_err(twell_dtype dt, const uint16_t *got, const uint16_t *ref, size_t M,
                         uint32_t K) {
    size_t worst_row;
    return tw_gpu_max_row_err(dt, K, got, sk_rows, M, ref, &worst_row);
}

/* Relative L2 error of n floats. */
static double sk_rel(const float *got, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

typedef struct {
    twell_ctx *gpu, *cpu;
    twell_plan *gplan, *cplan;
    twell_train_state *gst, *cst;
    twell_stream stream;
    tw_synth_ffn *f;
    void *dx, *dwg, *dwu, *dwd, *dy, *ddx, *ddwg, *ddwu, *ddwd;
    uint32_t *dp;
    uint32_t *packed;    /* host: the GPU's packed bytes */
    uint16_t *y, *yref;  /* host [SK_MAX_M, K] */
    uint16_t *gdx, *cdx; /* host [SK_TRAIN_M, K]: GPU step, CPU reference */
    float *gdw, *cdw;    /* host [3, N, K] */
    uint16_t *first_dx;  /* the first GPU step's gradients */
    float *first_dw;
} sk_env;

static int sk_setup(sk_worker *w, sk_env *e) {
    const twell_shape *s = &w->s;
    e->gpu = sk_ctx(TWELL_BACKEND_CUDA);
    e->cpu = sk_ctx(TWELL_BACKEND_CPU);
    if (!e->gpu || !e->cpu)
        return sk_fail(w, "worker %d: a context could not be created", w->id);
    tw_synth_params p = tw_synth_params_default();
    p.M = SK_MAX_M, p.K = s->K, p.N = s->N, p.dtype = s->dtype, p.gated = 1;
    p.nnz = 24, p.dist = TW_SYNTH_SKEWED, p.heavy_frac = 0.1, p.seq_len = 64;
    p.seed = 900u + (uint64_t)w->id;
    SK_TRY(w, e->cpu, tw_synth_create(NULL, &p, &e->f));
    SK_TRY(w, e->gpu, twell_plan_create(e->gpu, s, &e->gplan));
    SK_TRY(w, e->cpu, twell_plan_create(e->cpu, s, &e->cplan));
    SK_TRY(w, e->gpu, twell_train_state_create(e->gplan, &e->gst));
    SK_TRY(w, e->cpu, twell_train_state_create(e->cplan, &e->cst));
    SK_TRY(w, e->gpu, tw_cuda_stream_create(e->gpu, &e->stream));
    size_t xb = (size_t)SK_MAX_M * s->K * 2, wb = (size_t)s->N * s->K * 2;
    size_t wf = (size_t)s->N * s->K * sizeof(float), pb = twell_packed_bytes(s, SK_MAX_M);
    void **bufs[] = {&e->dx,  &e->dwg,  &e->dwu,  &e->dwd,  &e->dy,
                     &e->ddx, &e->ddwg, &e->ddwu, &e->ddwd, (void **)&e->dp};
    size_t sizes[] = {xb, wb, wb, wb, xb, xb, wf, wf, wf, pb};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        SK_TRY(w, e->gpu, tw_cuda_malloc(e->gpu, sizes[i], bufs[i]));
    SK_TRY(w, e->gpu, tw_cuda_memcpy_htod(e->gpu, e->dx, e->f->x, xb));
    SK_TRY(w, e->gpu, tw_cuda_memcpy_htod(e->gpu, e->dwg, e->f->wg, wb));
    SK_TRY(w, e->gpu, tw_cuda_memcpy_htod(e->gpu, e->dwu, e->f->wu, wb));
    SK_TRY(w, e->gpu, tw_cuda_memcpy_htod(e->gpu, e->dwd, e->f->wd, wb));
    /* dy: x's rows reversed (any [M, K] data of the dtype's range) */
    uint16_t *dyh = malloc(xb);
    if (!dyh)
        return sk_fail(w, "worker %d: out of host memory", w->id);
    for (size_t i = 0; i < (size_t)SK_MAX_M * s->K; i++)
        dyh[i] = e->f->x[(size_t)SK_MAX_M * s->K - 1 - i];
    twell_status st = tw_cuda_memcpy_htod(e->gpu, e->dy, dyh, xb);
    free(dyh);
    SK_TRY(w, e->gpu, st);
    e->packed = malloc(pb);
    e->y = malloc(xb), e->yref = malloc(xb);
    e->gdx = malloc(xb), e->cdx = malloc(xb), e->first_dx = malloc(xb);
    e->gdw = malloc(3 * wf), e->cdw = malloc(3 * wf), e->first_dw = malloc(3 * wf);
    if (!e->packed || !e->y || !e->yref || !e->gdx || !e->cdx || !e->first_dx || !e->gdw ||
        !e->cdw || !e->first_dw)
        return sk_fail(w, "worker %d: out of host memory", w->id);
    return 1;
}

static void sk_teardown(sk_env *e) {
    void *bufs[] = {e->dx, e->dwg, e->dwu, e->dwd, e->dy, e->ddx, e->ddwg, e->ddwu, e->ddwd, e->dp};
    for (size_t i = 0; e->gpu && i < sizeof bufs / sizeof bufs[0]; i++)
        tw_cuda_free(e->gpu, bufs[i]);
    if (e->gpu && e->stream)
        tw_cuda_stream_destroy(e->gpu, e->stream);
    twell_train_state_destroy(e->gst);
    twell_train_state_destroy(e->cst);
    twell_plan_destroy(e->gplan);
    twell_plan_destroy(e->cplan);
    twell_ctx_destroy(e->gpu);
    twell_ctx_destroy(e->cpu);
    tw_synth_destroy(e->f);
    free(e->packed), free(e->y), free(e->yref), free(e->gdx), free(e->cdx), free(e->first_dx);
    free(e->gdw), free(e->cdw), free(e->first_dw);
}

/* One inference of M rows on the worker's stream, checked against the CPU backend. 0, or 1
 * after sk_fail. */
static int sk_infer(sk_worker *w, sk_env *e, size_t M) {
    const twell_shape *s = &w->s;
    /* y goes to ddx (a scratch of [SK_MAX_M, K]) */
    twell_status st = twell_gate_pack(e->gplan, M, e->dx, e->dwg, e->dp, e->stream);
    if (st == TWELL_OK)
        st = twell_ffn_infer(e->gplan, M, e->dx, e->dp, e->dwg, e->dwu, e->dwd, e->ddx, e->stream);
    if (st == TWELL_OK)
        st = tw_cuda_stream_synchronize(e->gpu, e->stream);
    if (st == TWELL_OK)
        st = tw_cuda_memcpy_dtoh(e->gpu, e->packed, e->dp, twell_packed_bytes(s, M));
    if (st == TWELL_OK)
        st = tw_cuda_memcpy_dtoh(e->gpu, e->y, e->ddx, M * s->K * 2);
    if (st != TWELL_OK) {
        sk_fail(w, "worker %d: inference M=%zu: %s: %s", w->id, M, twell_status_name(st),
                twell_ctx_errmsg(e->gpu));
        return 1;
    }
    st = twell_ffn_infer(e->cplan, M, e->f->x, e->packed, e->f->wg, e->f->wu, e->f->wd, e->yref,
                         NULL);
    if (st != TWELL_OK) {
        sk_fail(w, "worker %d: CPU reference M=%zu: %s: %s", w->id, M, twell_status_name(st),
                twell_ctx_errmsg(e->cpu));
        return 1;
    }
    double err = sk_row_err(s->dtype, e->y, e->yref, M, s->K);
    double tol = gi_tol(s->dtype);
    if (!(err <= tol)) {
        sk_fail(w, "worker %d: inference M=%zu call %zu: row error %.3g > %.3g", w->id, M,
                w->infer_calls, err, tol);
        return 1;
    }
    w->infer_calls++;
    return 0;
}

/* One training step: the first against the CPU backend, every later one bit-identical to it. 0,
 * or 1 after sk_fail. */
static int sk_train(sk_worker *w, sk_env *e) {
    const twell_shape *s = &w->s;
    const size_t M = SK_TRAIN_M, nk = (size_t)s->N * s->K;
    const float lambda = 1e-3f;
    twell_status st = twell_ffn_forward_train(e->gplan, M, e->dx, e->dwg, e->dwu, e->dwd, e->ddx,
                                              NULL, e->gst, e->stream);
    if (st == TWELL_OK)
        st = twell_ffn_backward(e->gplan, e->gst, M, e->dx, e->dwg, e->dwu, e->dwd, e->dy, lambda,
                                e->ddx, e->ddwg, e->ddwu, e->ddwd, e->stream);
    if (st == TWELL_OK)
        st = tw_cuda_stream_synchronize(e->gpu, e->stream);
    if (st == TWELL_OK)
        st = tw_cuda_memcpy_dtoh(e->gpu, e->gdx, e->ddx, M * s->K * 2);
    float *dw[3] = {e->ddwg, e->ddwu, e->ddwd};
    for (int i = 0; i < 3 && st == TWELL_OK; i++)
        st = tw_cuda_memcpy_dtoh(e->gpu, e->gdw + (size_t)i * nk, dw[i], nk * sizeof(float));
    if (st != TWELL_OK) {
        sk_fail(w, "worker %d: training step: %s: %s", w->id, twell_status_name(st),
                twell_ctx_errmsg(e->gpu));
        return 1;
    }
    if (w->train_calls == 0) { /* the first step: against the CPU backend, then kept */
        uint16_t *ycpu = e->yref;
        st = twell_ffn_forward_train(e->cplan, M, e->f->x, e->f->wg, e->f->wu, e->f->wd, ycpu, NULL,
                                     e->cst, NULL);
        uint16_t *dyh = e->y; /* the same dy on the host */
        if (st == TWELL_OK)
            st = tw_cuda_memcpy_dtoh(e->gpu, dyh, e->dy, M * s->K * 2);
        if (st == TWELL_OK)
            st = twell_ffn_backward(e->cplan, e->cst, M, e->f->x, e->f->wg, e->f->wu, e->f->wd, dyh,
                                    lambda, e->cdx, e->cdw, e->cdw + nk, e->cdw + 2 * nk, NULL);
        if (st != TWELL_OK) {
            sk_fail(w, "worker %d: CPU training reference: %s", w->id, twell_status_name(st));
            return 1;
        }
        double edx = sk_row_err(s->dtype, e->gdx, e->cdx, M, s->K);
        double edw = 0.0;
        for (int i = 0; i < 3; i++) {
            double r = sk_rel(e->gdw + (size_t)i * nk, e->cdw + (size_t)i * nk, nk);
            edw = r > edw || r != r ? r : edw;
        }
        /* the gate's fp32 order differs from the CPU's: a neuron at its threshold may
         * fire on one side only, so the bound is looser than the output rounding */
        if (!(edx <= 2e-2) || !(edw <= 2e-2)) {
            sk_fail(w, "worker %d: first training step against the CPU: dx %.3g, dw %.3g", w->id,
                    edx, edw);
            return 1;
        }
        memcpy(e->first_dx, e->gdx, M * s->K * 2);
        memcpy(e->first_dw, e->gdw, 3 * nk * sizeof(float));
    } else if (memcmp(e->first_dx, e->gdx, M * s->K * 2) != 0 ||
               memcmp(e->first_dw, e->gdw, 3 * nk * sizeof(float)) != 0) {
        sk_fail(w, "worker %d: training step %zu differs from the first", w->id, w->train_calls);
        return 1;
    }
    w->train_calls++;
    return 0;
}

static void *sk_run(void *raw) {
    sk_worker *w = raw;
    sk_env e;
    memset(&e, 0, sizeof e);
    if (sk_setup(w, &e)) {
        double end = sk_now() + sk_seconds;
        for (size_t it = 0; !w->failed && sk_now() < end; it++) {
            size_t op = it % (SK_NM + 1); /* every M's inference, then a training step */
            if (op < SK_NM ? sk_infer(w, &e, sk_ms[(op + (size_t)w->id) % SK_NM]) : sk_train(w, &e))
                break;
        }
    }
    sk_teardown(&e);
    return NULL;
}

static void test_gpu_soak(void **state) {
    (void)state;
    twell_ctx *probe = tw_gpu_open_or_skip("test_gpu_soak"); /* fails or skips without a GPU */
    printf("# %s, %d threads x %.0f s\n", twell_ctx_device_name(probe), SK_THREADS, sk_seconds);
    twell_ctx_destroy(probe);
    for (size_t m = 0; m < SK_MAX_M; m++)
        sk_rows[m] = m;
    sk_worker w[SK_THREADS];
    pthread_t th[SK_THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < SK_THREADS; i++) {
        w[i].id = i;
        /* two shapes in mixed company: bf16 K 512 / N 2048 / T 128, fp16 K 256 / N 1024 / T 64 */
        if (i % 2 == 0) {
            twell_shape_init(&w[i].s, 512, 2048);
            w[i].s.T = 128;
        } else {
            twell_shape_init(&w[i].s, 256, 1024);
            w[i].s.T = 64, w[i].s.C = 4, w[i].s.dtype = TWELL_DTYPE_FP16;
        }
        assert_int_equal(pthread_create(&th[i], NULL, sk_run, &w[i]), 0);
    }
    int failed = 0;
    for (int i = 0; i < SK_THREADS; i++) {
        pthread_join(th[i], NULL);
        printf("#   worker %d: %zu inference calls, %zu training steps%s%s\n", i, w[i].infer_calls,
               w[i].train_calls, w[i].failed ? ": FAILED: " : "", w[i].failed ? w[i].why : "");
        failed |= w[i].failed || w[i].infer_calls == 0 || w[i].train_calls == 0;
    }
    if (failed)
        fail_msg("a soak worker failed or made no calls (above)");
}

int main(int argc, char **argv) {
    const char *e = getenv("TWELL_SOAK_SECONDS");
    if (argc > 1 && !strcmp(argv[1], "small"))
        sk_seconds = 3.0;
    else if (e && *e)
        sk_seconds = atof(e);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpu_soak)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
