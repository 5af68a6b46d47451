/* cmd_demo.c — `twell demo`: builds a synthetic sparse FFN, runs gate-pack and fused inference,
 * and reports sparsity, time and the error against a plain dense fp64 computation. */
#include "cli.h"
#include "cli_common.h"
#include "twellrt_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { DEMO_CHECK_ROWS = 64 }; /* fp64 rows checked at most: the dense fp64 FFN is the slow part */

typedef struct {
    size_t M; /* 0: the backend's default */
    uint32_t K, N, T, C;
    double nnz;
    tw_synth_dist dist;
    twell_dtype dtype;
    twell_backend backend;
    uint64_t seed;
} demo_opts;

static void demo_usage(FILE *f) {
    fprintf(f,
            "usage: twell demo [options]\n"
            "Builds a synthetic sparse feed-forward layer, runs gate-pack + fused inference and\n"
            "checks y against a dense fp64 computation.\n\n"
            "  --M m           rows (tokens); default 256 on the CPU backend, 4096 on CUDA\n"
            "  --K k           model width (multiple of 16), default 2048\n"
            "  --N n           hidden width (multiple of T, <= 65536), default 5632\n"
            "  --nnz r         target active neurons per row, default 29\n"
            "  --dist d        uniform | skewed (dead neurons, dense first tokens, heavy rows\n"
            "                  that overflow row-tiles), default uniform\n"
            "  --dtype t       bf16 | fp16, default bf16\n"
            "  --C c           TwELL compression factor 2 | 4 | 8, default 8\n"
            "  --T t           TwELL column tile 64 | 128 | 256, default 256\n"
            "  --backend b     auto | cpu | cuda, default auto\n"
            "  --seed s        data seed, default 1\n"
            "  --help          this text\n\n"
            "Exit status: 0 when the relative error is within tolerance (1e-2 bf16, 2e-3 fp16),\n"
            "1 when it is not or an operation fails, 2 for bad options.\n");
}

static double demo_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int demo_u64(const char *opt, const char *s, uint64_t lo, uint64_t max, uint64_t *out) {
    if (tw_cli_u64(s, lo, max, out) != 0) {
        fprintf(stderr, "twell demo: %s expects an integer in [%llu, %llu], got '%s'\n", opt,
                (unsigned long long)lo, (unsigned long long)max, s ? s : "");
        return -1;
    }
    return 0;
}

static int demo_parse(int argc, char **argv, demo_opts *o) {
    memset(o, 0, sizeof *o);
    o->K = 2048;
    o->N = 5632;
    o->T = 256;
    o->C = 8;
    o->nnz = 29.0;
    o->dist = TW_SYNTH_UNIFORM;
    o->dtype = TWELL_DTYPE_BF16;
    o->backend = TWELL_BACKEND_AUTO;
    o->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t u;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            demo_usage(stdout);
            return 1;
        }
        if (!v) {
            fprintf(stderr, "twell demo: unknown option or missing value: %s\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "--M")) {
            if (demo_u64(a, v, 1, SIZE_MAX, &u))
                return -1;
            o->M = (size_t)u;
        } else if (!strcmp(a, "--K") || !strcmp(a, "--N") || !strcmp(a, "--T") ||
                   !strcmp(a, "--C")) {
            if (demo_u64(a, v, 1, UINT32_MAX, &u))
                return -1;
            uint32_t *dst = a[2] == 'K' ? &o->K : a[2] == 'N' ? &o->N : a[2] == 'T' ? &o->T : &o->C;
            *dst = (uint32_t)u;
        } else if (!strcmp(a, "--nnz")) {
            if (tw_cli_double(v, 0.0, 65536.0, &o->nnz) != 0 || !(o->nnz > 0.0)) {
                fprintf(stderr, "twell demo: --nnz expects a positive number, got '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--dist")) {
            if (tw_synth_dist_parse(v, &o->dist)) {
                fprintf(stderr, "twell demo: --dist expects uniform or skewed, got '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "bf16"))
                o->dtype = TWELL_DTYPE_BF16;
            else if (!strcmp(v, "fp16"))
                o->dtype = TWELL_DTYPE_FP16;
            else {
                fprintf(stderr, "twell demo: --dtype expects bf16 or fp16, got '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--backend")) {
            if (!strcmp(v, "auto"))
                o->backend = TWELL_BACKEND_AUTO;
            else if (!strcmp(v, "cpu"))
                o->backend = TWELL_BACKEND_CPU;
            else if (!strcmp(v, "cuda"))
                o->backend = TWELL_BACKEND_CUDA;
            else {
                fprintf(stderr, "twell demo: --backend expects auto, cpu or cuda, got '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--seed")) {
            if (demo_u64(a, v, 0, UINT64_MAX, &o->seed))
                return -1;
        } else {
            fprintf(stderr, "twell demo: unknown option %s (see twell demo --help)\n", a);
            return -1;
        }
    }
    return 0;
}

static void demo_log(void *user, twell_log_level level, const char *msg) {
    (void)user;
    fprintf(stderr, "twell demo: [%s] %s\n", level >= TWELL_LOG_WARN ? "warning" : "info", msg);
}

/* Gate-pack + inference on the CUDA backend: uploads the data, runs both ops once untimed (the
 * first call sizes the workspace), then once more between CUDA events on a stream of its own,
 * and downloads packed and y for the report. *why says what failed. */
static twell_status demo_run_cuda(twell_ctx *ctx, const twell_shape *s, const tw_synth_ffn *f,
                                  uint32_t *packed, uint16_t *y, double *t_pack, double *t_infer,
                                  const char **why) {
    size_t M = f->p.M, xb = M * s->K * 2u, wb = (size_t)s->N * s->K * 2u;
    size_t pb = twell_packed_bytes(s, M);
    void *dx = NULL, *dwg = NULL, *dwu = NULL, *dwd = NULL, *dp = NULL, *dy = NULL;
    twell_plan *plan = NULL;
    twell_stream stream = NULL;
    tw_cuda_event ev[3] = {NULL, NULL, NULL};
    float ms_pack = 0.0f, ms_infer = 0.0f;
    twell_status st;
    *why = "device memory";
    if ((st = tw_cuda_malloc(ctx, xb, &dx)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, wb, &dwg)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, wb, &dwu)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, wb, &dwd)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, pb, &dp)) != TWELL_OK ||
        (st = tw_cuda_malloc(ctx, xb, &dy)) != TWELL_OK)
        goto out;
    *why = "upload";
    printf("  uploading %.1f MB ...", (double)(xb + 3 * wb) / 1e6);
    fflush(stdout);
    double t0 = demo_now();
    if ((st = tw_cuda_memcpy_htod(ctx, dx, f->x, xb)) != TWELL_OK ||
        (st = tw_cuda_memcpy_htod(ctx, dwg, f->wg, wb)) != TWELL_OK ||
        (st = tw_cuda_memcpy_htod(ctx, dwu, f->wu, wb)) != TWELL_OK ||
        (st = tw_cuda_memcpy_htod(ctx, dwd, f->wd, wb)) != TWELL_OK)
        goto out;
    printf(" %.2f s\n", demo_now() - t0);
    *why = "plan (kernel compilation)";
    printf("  compiling / loading kernels ...");
    fflush(stdout);
    t0 = demo_now();
    if ((st = twell_plan_create(ctx, s, &plan)) != TWELL_OK)
        goto out;
    printf(" %.2f s\n", demo_now() - t0);
    *why = "stream or events";
    if ((st = tw_cuda_stream_create(ctx, &stream)) != TWELL_OK)
        goto out;
    for (int i = 0; i < 3; i++)
        if ((st = tw_cuda_event_create(ctx, &ev[i])) != TWELL_OK)
            goto out;
    for (int run = 0; run < 2; run++) {
        *why = "twell_gate_pack / twell_ffn_infer";
        if ((run && (st = tw_cuda_event_record(ctx, ev[0], stream)) != TWELL_OK) ||
            (st = twell_gate_pack(plan, M, dx, dwg, dp, stream)) != TWELL_OK ||
            (run && (st = tw_cuda_event_record(ctx, ev[1], stream)) != TWELL_OK) ||
            (st = twell_ffn_infer(plan, M, dx, dp, dwg, dwu, dwd, dy, stream)) != TWELL_OK ||
            (run && (st = tw_cuda_event_record(ctx, ev[2], stream)) != TWELL_OK) ||
            (st = tw_cuda_stream_synchronize(ctx, stream)) != TWELL_OK)
            goto out;
    }
    *why = "event timing";
    if ((st = tw_cuda_event_elapsed(ctx, ev[0], ev[1], &ms_pack)) != TWELL_OK ||
        (st = tw_cuda_event_elapsed(ctx, ev[1], ev[2], &ms_infer)) != TWELL_OK)
        goto out;
    printf("  gate-pack %.3f ms, fused inference %.3f ms (CUDA events, second run)\n",
           (double)ms_pack, (double)ms_infer);
    *why = "download";
    if ((st = tw_cuda_memcpy_dtoh(ctx, packed, dp, pb)) != TWELL_OK ||
        (st = tw_cuda_memcpy_dtoh(ctx, y, dy, xb)) != TWELL_OK)
        goto out;
    *t_pack = 1e-3 * (double)ms_pack;
    *t_infer = 1e-3 * (double)ms_infer;
out:
    for (int i = 0; i < 3; i++)
        tw_cuda_event_destroy(ctx, ev[i]);
    tw_cuda_stream_destroy(ctx, stream);
    twell_plan_destroy(plan);
    void *bufs[] = {dx, dwg, dwu, dwd, dp, dy};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        tw_cuda_free(ctx, bufs[i]);
    return st;
}

/* Runs both ops on a CPU-backend ctx, timing each; returns 0 or prints why not. */
static int demo_run_cpu(twell_ctx *ctx, const twell_shape *s, const tw_synth_ffn *f,
                        uint32_t *packed, uint16_t *y, double *t_pack, double *t_infer) {
    twell_plan *plan = NULL;
    twell_status st = twell_plan_create(ctx, s, &plan);
    if (st != TWELL_OK) {
        fprintf(stderr, "twell demo: %s: %s\n", twell_status_name(st), twell_ctx_errmsg(ctx));
        return -1;
    }
    size_t M = f->p.M;
    printf("  gate-pack ...");
    fflush(stdout);
    double t0 = demo_now();
    st = twell_gate_pack(plan, M, f->x, tw_synth_pack_weight(f), packed, NULL);
    *t_pack = demo_now() - t0;
    printf(" %.1f ms\n", *t_pack * 1e3);
    if (st == TWELL_OK) {
        printf("  fused inference ...");
        fflush(stdout);
        t0 = demo_now();
        st = twell_ffn_infer(plan, M, f->x, packed, s->gated ? f->wg : NULL, f->wu, f->wd, y, NULL);
        *t_infer = demo_now() - t0;
        printf(" %.1f ms\n", *t_infer * 1e3);
    }
    if (st != TWELL_OK)
        fprintf(stderr, "twell demo: %s: %s\n", twell_status_name(st), twell_ctx_errmsg(ctx));
    twell_plan_destroy(plan);
    return st == TWELL_OK ? 0 : -1;
}

static twell_ctx *demo_ctx(twell_backend b) {
    twell_ctx_options co;
    twell_ctx_options_init(&co);
    co.backend = b;
    co.log = demo_log;
    co.log_level = TWELL_LOG_WARN;
    twell_ctx *ctx = NULL;
    twell_status st = twell_ctx_create(&co, &ctx);
    if (st != TWELL_OK)
        fprintf(stderr, "twell demo: cannot create a %s context: %s (%s)\n", twell_backend_name(b),
                twell_status_name(st), twell_status_str(st));
    return ctx;
}

/* What the demo runs on and with: version, backend, shape and the data's distribution. */
static void demo_print_setup(twell_ctx *ctx, const twell_shape *s, const demo_opts *o, size_t M,
                             uint32_t slots) {
    printf("twell demo %s: synthetic sparse FFN, gate-pack + fused inference\n", twell_version());
    printf("backend   %s: %s\n", twell_backend_name(twell_ctx_backend(ctx)),
           twell_ctx_device_name(ctx));
    printf("shape     M=%zu K=%u N=%u T=%u C=%u %s gated (%u slots per row-tile)\n", M, s->K, s->N,
           s->T, s->C, s->dtype == TWELL_DTYPE_BF16 ? "bf16" : "fp16", slots);
    if (o->dist == TW_SYNTH_SKEWED)
        printf("data      skewed: target %g active neurons per ordinary row; 30%% dead neurons, "
               "log-normal activity,\n          denser first token per 2048, %g%% heavy rows "
               "(~20%% active); seed %llu\n",
               o->nnz, 100.0 * tw_synth_params_default().heavy_frac, (unsigned long long)o->seed);
    else
        printf("data      uniform: target %g active neurons per row, seed %llu\n", o->nnz,
               (unsigned long long)o->seed);
}

/* The synthetic layer of M rows, timed on stdout; NULL after saying why on stderr. */
static tw_synth_ffn *demo_synth(twell_ctx *ctx, const twell_shape *s, const demo_opts *o,
                                size_t M) {
    tw_synth_params p = tw_synth_params_default();
    p.M = M;
    p.K = s->K;
    p.N = s->N;
    p.dtype = s->dtype;
    p.gated = 1;
    p.nnz = o->nnz;
    p.dist = o->dist;
    p.seed = o->seed;
    printf("  generating data ...");
    fflush(stdout);
    double t0 = demo_now();
    tw_synth_ffn *f = NULL;
    twell_status st = tw_synth_create(ctx->pool, &p, &f);
    if (st != TWELL_OK) {
        fprintf(stderr, "\ntwell demo: cannot build the synthetic data: %s\n",
                twell_status_name(st));
        return NULL;
    }
    printf(" %.2f s\n", demo_now() - t0);
    return f;
}

/* y (all M rows) against the dense fp64 reference on up to DEMO_CHECK_ROWS evenly spaced rows
 * (rows, y64: room for nrows), and the report: the packed rows' statistics, the times, the
 * error. 0 within tolerance, 1 otherwise or when the reference fails. */
static int demo_check(twell_ctx *ctx, const twell_shape *s, const tw_synth_ffn *f,
                      const uint32_t *packed, const uint16_t *y, size_t M, size_t *rows,
                      size_t nrows, double *y64, double t_pack, double t_infer) {
    for (size_t i = 0; i < nrows; i++)
        rows[i] = i * M / nrows; /* evenly spaced from row 0 */
    if (nrows < M)
        printf("  computing the dense fp64 reference on %zu of %zu rows (evenly spaced "
               "sample) ...",
               nrows, M);
    else
        printf("  computing the dense fp64 reference on all %zu rows ...", M);
    fflush(stdout);
    double t0 = demo_now();
    twell_status st = tw_synth_ffn64(ctx->pool, s, f->x, f->wg, f->wu, f->wd, rows, nrows, y64);
    if (st != TWELL_OK) {
        fprintf(stderr, "\ntwell demo: fp64 reference: %s\n", twell_status_name(st));
        return 1;
    }
    printf(" %.2f s\n", demo_now() - t0);

    tw_synth_stats ns;
    tw_synth_packed_stats(s, M, packed, &ns);
    double err = tw_synth_rel_error(s, y, rows, nrows, y64);
    double tol = s->dtype == TWELL_DTYPE_BF16 ? 1e-2 : 2e-3;
    printf("nnz/row   mean %.2f, min %u, max %u; max per row-tile %u (slots %u)\n", ns.mean_row,
           ns.min_row, ns.max_row, ns.max_tile, twell_tile_slots(s));
    printf("overflow  %zu of %zu row-tiles (%zu rows) recomputed exactly from x and Wg\n",
           ns.overflow_tiles, M * (s->N / s->T), ns.overflow_rows);
    printf("time      gate-pack %.3f ms, fused inference %.3f ms (%s backend)\n", t_pack * 1e3,
           t_infer * 1e3, twell_backend_name(twell_ctx_backend(ctx)));
    printf("error     |y - y64| / |y64| = %.3e over %s%zu rows (tolerance %.0e): %s\n", err,
           nrows < M ? "a sample of " : "all ", nrows, tol, err <= tol ? "OK" : "FAILED");
    return err <= tol ? 0 : 1;
}

int twell_cmd_demo(int argc, char **argv) {
    demo_opts o;
    int pr = demo_parse(argc, argv, &o);
    if (pr)
        return pr > 0 ? 0 : 2;

    twell_shape s;

    twell_shape_init(&s, o.K, o.N);
    s.T = o.T;
    s.C = o.C;
    s.dtype = o.dtype;
    if (twell_shape_check(NULL, &s) != TWELL_OK) {
        twell_ctx *tmp = demo_ctx(TWELL_BACKEND_CPU);
        twell_shape_check(tmp, &s);
        fprintf(stderr, "twell demo: unsupported shape: %s\n", twell_ctx_errmsg(tmp));
        twell_ctx_destroy(tmp);
        return 2;
    }
    if (o.nnz > (double)o.N) {
        fprintf(stderr, "twell demo: --nnz %g exceeds N = %u\n", o.nnz, o.N);
        return 2;
    }

    twell_ctx *ctx = demo_ctx(o.backend);
    if (!ctx)
        return 1;
    int on_cuda = twell_ctx_backend(ctx) == TWELL_BACKEND_CUDA;
    size_t M = o.M ? o.M : on_cuda ? 4096 : 256;
    demo_print_setup(ctx, &s, &o, M, twell_tile_slots(&s));
    tw_synth_ffn *f = demo_synth(ctx, &s, &o, M);
    if (!f) {
        twell_ctx_destroy(ctx);
        return 1;
    }

    size_t pbytes = twell_packed_bytes(&s, M);
    uint32_t *packed = pbytes ? malloc(pbytes) : NULL;
    uint16_t *y = malloc(M * s.K * sizeof *y);
    size_t nrows = M < DEMO_CHECK_ROWS ? M : DEMO_CHECK_ROWS;
    size_t *rows = malloc(nrows * sizeof *rows);
    double *y64 = malloc(nrows * s.K * sizeof *y64);
    int rc = 1;
    double t_pack = 0, t_infer = 0;
    if (!packed || !y || !rows || !y64) {
        fprintf(stderr, "twell demo: out of memory\n");
        goto done;
    }
    if (on_cuda) {
        const char *why = "";
        twell_status st = demo_run_cuda(ctx, &s, f, packed, y, &t_pack, &t_infer, &why);
        if (st != TWELL_OK) {
            printf("\n  CUDA backend: %s failed: %s: %s.\n  Falling back to the CPU backend.\n",
                   why, twell_status_name(st), twell_ctx_errmsg(ctx));
            twell_ctx_destroy(ctx);
            if (!(ctx = demo_ctx(TWELL_BACKEND_CPU)))
                goto done;
            printf("backend   %s: %s\n", twell_backend_name(twell_ctx_backend(ctx)),
                   twell_ctx_device_name(ctx));
            on_cuda = 0;
        }
    }
    if (!on_cuda && demo_run_cpu(ctx, &s, f, packed, y, &t_pack, &t_infer))
        goto done;
    rc = demo_check(ctx, &s, f, packed, y, M, rows, nrows, y64, t_pack, t_infer);
done:
    free(packed);
    free(y);
    free(rows);
    free(y64);
    tw_synth_destroy(f);
    twell_ctx_destroy(ctx);
    return rc;
}
