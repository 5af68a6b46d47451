/*
 * timing.c — the timing protocol every `twell bench` op uses: warm-up, then per repetition each
 * implementation in rotating order with the L2 flushed and CUDA events around the run; medians.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

twell_status bench_time(bench_env *env, size_t n, bench_fn *fns, void **args, int reps, int warmup,
                        double *med, double *mn, double *mx) {
    twell_ctx *ctx = env->ctx;
    twell_status st = TWELL_OK;
    for (int w = 0; w < warmup; w++)
        for (size_t i = 0; i < n; i++)
            if ((st = fns[i](args[i])) != TWELL_OK)
                return st;
    if ((st = tw_cuda_synchronize(ctx)) != TWELL_OK)
        return st;
    double *t = malloc(n * (size_t)reps * sizeof *t);
    if (!t)
        return TWELL_ERR_NO_MEMORY;
    for (int r = 0; r < reps && st == TWELL_OK; r++) {
        for (size_t j = 0; j < n && st == TWELL_OK; j++) {
            size_t i = (j + (size_t)r) % n; /* rotate who goes first */
            float ms = 0.0f;
            if ((st = tw_cuda_memset_d32(ctx, env->flush, (uint32_t)r, env->flush_bytes / 4,
                                         NULL)) != TWELL_OK ||
                (st = tw_cuda_event_record(ctx, env->ev[0], NULL)) != TWELL_OK ||
                (st = fns[i](args[i])) != TWELL_OK ||
                (st = tw_cuda_event_record(ctx, env->ev[1], NULL)) != TWELL_OK ||
                (st = tw_cuda_event_elapsed(ctx, env->ev[0], env->ev[1], &ms)) != TWELL_OK)
                break;
            t[i * (size_t)reps + (size_t)r] = (double)ms;
        }
    }
    if (st == TWELL_OK) {
        for (size_t i = 0; i < n; i++) {
            double *ti = t + i * (size_t)reps;
            qsort(ti, (size_t)reps, sizeof *ti, bench_cmp_double);
            med[i] = reps % 2 ? ti[reps / 2] : 0.5 * (ti[reps / 2 - 1] + ti[reps / 2]);
            mn[i] = ti[0];
            mx[i] = ti[reps - 1];
        }
    }
    free(t);
    return st;
}

twell_status bench_time_case(bench_env *env, bench_record *r, size_t n, bench_fn *fns, void **args,
                             double *med, double *mn, double *mx) {
    const bench_opts *o = env->opts;
    twell_status st = bench_time(env, n, fns, args, o->reps, o->warmup, med, mn, mx);
    if (st != TWELL_OK) {
        fprintf(stderr, "twell bench: timing M=%zu: %s\n", r->M, twell_ctx_errmsg(env->ctx));
        r->correct = 0;
        snprintf(r->check_note, sizeof r->check_note, "timing failed: %s",
                 twell_ctx_errmsg(env->ctx));
    }
    return st;
}

void bench_record_times(const bench_env *env, bench_record *r, const char *baseline,
                        const double *med, const double *mn, const double *mx, size_t ours,
                        size_t base, int have_base) {
    r->reps = env->opts->reps;
    r->ours_ms = med[ours], r->ours_min_ms = mn[ours], r->ours_max_ms = mx[ours];
    snprintf(r->baseline, sizeof r->baseline, "%s", baseline);
    if (have_base) {
        r->baseline_ms = med[base], r->baseline_min_ms = mn[base], r->baseline_max_ms = mx[base];
        r->ratio = r->ours_ms > 0 ? r->baseline_ms / r->ours_ms : -1.0;
    }
}
