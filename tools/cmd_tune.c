/* cmd_tune.c — `twell tune`: prewarm the tuning records and kernel cache for explicit shapes or
 * a model's config.json ahead of deployment, with a progress bar, a summary table and a JSON
 * report; `--dry-run` lists the shapes and pruned candidate counts without a GPU. */
#include "cli.h"
#include "cli_common.h"
#include "twellrt_internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TW_MAX_M 32
#define TW_MAX_OPS 8

static void tw_tune_usage(FILE *f) {
    fprintf(f,
            "usage: twell tune (--model config.json | --K n --N n) [options]\n\n"
            "Tunes the kernels of each op for each shape and row count on this GPU, stores the\n"
            "winners and their compiled kernels in the cache, then prewarms: creates a plan of\n"
            "the shape and loads each row count's winners, so every kernel such a plan loads is\n"
            "cached and a deployed process compiles and measures nothing. Works offline.\n\n"
            "Shape:\n"
            "  --model FILE      a Hugging Face config.json: hidden_size is K, intermediate_size\n"
            "                    N, torch_dtype the element type (bfloat16 or float16)\n"
            "  --K n --N n       model and hidden width, instead of --model\n"
            "  --T n             TwELL column tile (default 256)\n"
            "  --C n             compression factor 2, 4 or 8 (default 8)\n"
            "  --dtype bf16|fp16 element type (default: the model's, else bf16)\n"
            "  --non-gated       non-gated FFN (h = relu(x Wu^T))\n"
            "  --M list          row counts, comma-separated (default 1,256,4096,16384); each is\n"
            "                    tuned for its power-of-two bucket\n"
            "  --ops list        ops to tune (default gate_pack,ffn_infer,ffn_dense; ffn_dense:\n"
            "                    the dense path's split-K factors, sm_90a only)\n"
            "Tuning:\n"
            "  --budget s        seconds per shape before no new candidates are timed\n"
            "                    (default 20; 0: no limit)\n"
            "  --reps n          timed runs per candidate, median kept (default 10, at least 10)\n"
            "  --threads n       compile threads (default: cores, at most 8)\n"
            "  --retune          time again even when a winner is stored; it is replaced only by\n"
            "                    a challenger at least 3%% faster\n"
            "  --device n        CUDA device ordinal (default 0)\n"
            "Output:\n"
            "  --json FILE       write a JSON report\n"
            "  --dry-run         list shapes, kernels and candidate counts; no GPU needed\n"
            "  --assume-device NAME\n"
            "                    prune for h200, h100, a100 or l4 instead of the GPU present\n"
            "                    (the default for --dry-run without a GPU is h200)\n"
            "  --quiet           no progress output\n\n"
            "Exit: 0 ok, 1 a tuning failed or its results could not be stored in the cache\n"
            "(read-only, full or unusable directory), 2 usage or bad input, 3 no usable CUDA\n"
            "device.\n");
}

typedef struct tw_tune_args {
    const char *model, *json, *assume;
    uint32_t K, N, T, C;
    int have_K, have_N, have_dtype;
    twell_dtype dtype;
    int gated;
    size_t M[TW_MAX_M];
    size_t nM;
    const char *ops[TW_MAX_OPS];
    size_t nops;
    char ops_buf[256];
    double budget;
    int reps, threads, retune, dry_run, quiet, device;
} tw_tune_args;

static int tw_bad(const char *opt, const char *val) {
    fprintf(stderr, "twell tune: bad value '%s' for %s (see --help)\n", val, opt);
    return 0;
}

static int tw_u32(const char *opt, const char *val, uint32_t *out) {
    return tw_cli_u32(val, 1, UINT32_MAX, out) == 0 ? 1 : tw_bad(opt, val);
}

static int tw_int(const char *opt, const char *val, int lo, int hi, int *out) {
    return tw_cli_int(val, lo, hi, out) == 0 ? 1 : tw_bad(opt, val);
}

static int tw_list_m(const char *val, tw_tune_args *a) {
    return tw_cli_size_list(val, 1, (size_t)1 << 40, a->M, TW_MAX_M, &a->nM) == 0
               ? 1
               : tw_bad("--M", val);
}

static int tw_list_ops(const char *val, tw_tune_args *a) {
    snprintf(a->ops_buf, sizeof a->ops_buf, "%s", val);
    a->nops = 0;
    char *save = NULL;
    for (char *tok = strtok_r(a->ops_buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int known = 0;
        for (const char *const *op = tw_tune_ops(); *op; op++)
            known |= !strcmp(*op, tok);
        if (!known) {
            fprintf(stderr, "twell tune: unknown op '%s' in --ops (known:", tok);
            for (const char *const *op = tw_tune_ops(); *op; op++)
                fprintf(stderr, " %s", *op);
            fprintf(stderr, ")\n");
            return 0;
        }
        for (size_t i = 0; i < a->nops; i++)
            if (!strcmp(a->ops[i], tok))
                return tw_bad("--ops", val);
        if (a->nops == TW_MAX_OPS)
            return tw_bad("--ops", val);
        a->ops[a->nops++] = tok;
    }
    return a->nops ? 1 : tw_bad("--ops", val);
}

/* The option o that takes a value, v: 1 set, 0 a bad value (message printed). */
static int tw_set_option(tw_tune_args *a, const char *o, const char *v) {
    int ok = 1;
    if (!strcmp(o, "--model"))
        a->model = v;
    else if (!strcmp(o, "--json"))
        a->json = v;
    else if (!strcmp(o, "--assume-device")) {
        tw_tune_device d;
        if (tw_tune_device_preset(v, &d) != 0) {
            fprintf(stderr, "twell tune: unknown device '%s' (h200, h100, a100, l4)\n", v);
            return 0;
        }
        a->assume = v;
    } else if (!strcmp(o, "--K"))
        ok = a->have_K = tw_u32(o, v, &a->K);
    else if (!strcmp(o, "--N"))
        ok = a->have_N = tw_u32(o, v, &a->N);
    else if (!strcmp(o, "--T"))
        ok = tw_u32(o, v, &a->T);
    else if (!strcmp(o, "--C"))
        ok = tw_u32(o, v, &a->C);
    else if (!strcmp(o, "--dtype")) {
        a->have_dtype = 1;
        if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16"))
            a->dtype = TWELL_DTYPE_BF16;
        else if (!strcmp(v, "fp16") || !strcmp(v, "float16"))
            a->dtype = TWELL_DTYPE_FP16;
        else
            ok = tw_bad(o, v);
    } else if (!strcmp(o, "--M"))
        ok = tw_list_m(v, a);
    else if (!strcmp(o, "--ops"))
        ok = tw_list_ops(v, a);
    else if (!strcmp(o, "--budget")) {
        if (tw_cli_double(v, 0.0, 1e6, &a->budget) != 0)
            ok = tw_bad(o, v);
    } else if (!strcmp(o, "--reps"))
        ok = tw_int(o, v, 1, 100000, &a->reps);
    else if (!strcmp(o, "--threads"))
        ok = tw_int(o, v, 1, 64, &a->threads);
    else if (!strcmp(o, "--device"))
        ok = tw_int(o, v, 0, 1024, &a->device);
    return ok;
}

/* 1 parsed, 0 usage error (message printed), -1 --help. */
static int tw_parse_args(int argc, char **argv, tw_tune_args *a) {
    memset(a, 0, sizeof *a);
    a->T = 256;
    a->C = 8;
    a->gated = 1;
    a->budget = TW_TUNE_DEFAULT_BUDGET_S;
    a->reps = TW_TUNE_MIN_REPS;
    static const size_t defM[] = {1, 256, 4096, 16384};
    memcpy(a->M, defM, sizeof defM);
    a->nM = 4;
    for (const char *const *op = tw_tune_ops(); *op && a->nops < TW_MAX_OPS; op++)
        a->ops[a->nops++] = *op;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h"))
            return -1;
        if (!strcmp(o, "--dry-run")) {
            a->dry_run = 1;
            continue;
        }
        if (!strcmp(o, "--retune")) {
            a->retune = 1;
            continue;
        }
        if (!strcmp(o, "--quiet")) {
            a->quiet = 1;
            continue;
        }
        if (!strcmp(o, "--non-gated")) {
            a->gated = 0;
            continue;
        }
        static const char *const with_value[] = {
            "--model", "--K",    "--N",      "--T",    "--C",       "--dtype",  "--M",
            "--ops",   "--json", "--budget", "--reps", "--threads", "--device", "--assume-device"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
            known |= !strcmp(o, with_value[k]);
        if (!known) {
            fprintf(stderr, "twell tune: unknown option '%s' (see --help)\n", o);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "twell tune: %s needs a value\n", o);
            return 0;
        }
        if (!tw_set_option(a, o, argv[++i]))
            return 0;
    }
    if (a->model && (a->have_K || a->have_N)) {
        fprintf(stderr, "twell tune: give --model or --K/--N, not both\n");
        return 0;
    }
    if (!a->model && !(a->have_K && a->have_N)) {
        fprintf(stderr, "twell tune: give --model config.json, or both --K and --N (see --help)\n");
        return 0;
    }
    return 1;
}

/* ---- output helpers ---- */

static void tw_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void tw_json_ms(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.6f", v);
    else
        fputs("null", f);
}

static const char *tw_dt(twell_dtype d) { return d == TWELL_DTYPE_FP16 ? "fp16" : "bf16"; }

/* One row of the summary and the report. */
typedef struct tw_row {
    const char *op;
    char kernel[TW_TUNE_KERNEL_MAX];
    size_t M, bucket;
    tw_tune_choice ch;
    twell_status st;
    char err[320];
    int runnable;
    int stored; /* dry run: a record exists for this device */
    char note[96];
} tw_row;

/* What prewarming did: time, kernels compiled (cache puts), modules a plan of the shape holds. */
typedef struct tw_prewarm {
    twell_status st;
    char err[320];
    double s;
    unsigned long long compiles;
    int gp_modules, ffn_modules;
} tw_prewarm;

/* ---- progress ---- */

typedef struct tw_progress {
    int on, tty;
    size_t job, njobs;
    const char *op;
    size_t M;
} tw_progress;

static void tw_progress_draw(tw_progress *p, size_t done, size_t total, const char *phase) {
    if (!p->on)
        return;
    const int width = 24;
    double frac = ((double)p->job + (total ? (double)done / (double)total : 0.0)) /
                  (double)(p->njobs ? p->njobs : 1);
    int fill = (int)(frac * width + 0.5);
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    if (p->tty)
        fprintf(stderr, "\r[%s] %zu/%zu %-9s M=%-6zu %3zu/%-3zu candidates %-14s", bar, p->job + 1,
                p->njobs, p->op, p->M, done, total, phase);
    else if (!strcmp(phase, "start") || !strcmp(phase, "budget spent"))
        fprintf(stderr, "[%s] %zu/%zu %s M=%zu: %s\n", bar, p->job + 1, p->njobs, p->op, p->M,
                phase);
    fflush(stderr);
}

static void tw_progress_cb(void *user, size_t done, size_t total, const char *phase) {
    tw_progress_draw(user, done, total, phase);
}

static void tw_progress_end(tw_progress *p) {
    if (p->on && p->tty)
        fprintf(stderr, "\r%78s\r", "");
}

/* ---- the command ---- */

static void tw_print_table(const tw_row *rows, size_t n, int dry) {
    if (dry)
        printf("\n%-10s %-15s %7s %7s %6s %6s  %-29s %-42s %s\n", "OP", "KERNEL", "M", "BUCKET",
               "CANDS", "KEPT", "PRUNED shape/smem/regs/thr/cl", "DEFAULT CONFIG", "NOTE");
    else
        printf("\n%-10s %7s %7s  %-42s %10s %10s %8s  %s\n", "OP", "M", "BUCKET", "CONFIG",
               "TIME ms", "DEFAULT ms", "SPEEDUP", "SOURCE");
    for (size_t i = 0; i < n; i++) {
        const tw_row *r = &rows[i];
        char canon[TW_TUNE_CANON_MAX];
        if (dry) {
            const tw_prune_stats *ps = &r->ch.pruning;
            char pruned[64];
            snprintf(pruned, sizeof pruned, "%zu/%zu/%zu/%zu/%zu", ps->by[TW_PRUNE_SHAPE],
                     ps->by[TW_PRUNE_SMEM], ps->by[TW_PRUNE_REGS], ps->by[TW_PRUNE_THREADS],
                     ps->by[TW_PRUNE_CLUSTER]);
            tw_tune_config_canon(&r->ch.config, canon, sizeof canon);
            const char *note = r->st != TWELL_OK ? r->err
                               : r->stored       ? "stored winner"
                               : !r->runnable    ? "no launcher in this build yet"
                                                 : r->note;
            printf("%-10s %-15s %7zu %7zu %6zu %6zu  %-29s %-42s %s\n", r->op,
                   r->kernel[0] ? r->kernel : "-", r->M, r->bucket, ps->total, ps->kept, pruned,
                   r->st == TWELL_OK ? canon : "-", note);
            continue;
        }
        if (r->st != TWELL_OK) {
            printf("%-10s %7zu %7zu  %-42s %10s %10s %8s  %s: %s\n", r->op, r->M, r->bucket, "-",
                   "-", "-", "-", r->st == TWELL_ERR_UNSUPPORTED ? "unavailable" : "FAILED",
                   r->err);
            continue;
        }
        tw_tune_config_canon(&r->ch.config, canon, sizeof canon);
        char t[32] = "-", dt[32] = "-", sp[32] = "-";
        if (isfinite(r->ch.ms))
            snprintf(t, sizeof t, "%.4f", r->ch.ms);
        if (isfinite(r->ch.default_ms))
            snprintf(dt, sizeof dt, "%.4f", r->ch.default_ms);
        else if (isinf(r->ch.default_ms))
            snprintf(dt, sizeof dt, "failed");
        if (isfinite(r->ch.ms) && isfinite(r->ch.default_ms) && r->ch.ms > 0.0)
            snprintf(sp, sizeof sp, "%.2fx", r->ch.default_ms / r->ch.ms);
        printf("%-10s %7zu %7zu  %-42s %10s %10s %8s  %s%s\n", r->op, r->M, r->bucket, canon, t, dt,
               sp, tw_tune_source_name(r->ch.source), r->ch.budget_cut ? " (budget cut)" : "");
    }
}

static int tw_write_json(const char *path, const tw_tune_args *a, const tw_model_config *m,
                         const twell_shape *s, const tw_tune_device *d, int assumed,
                         const tw_row *rows, size_t n, const tw_prewarm *pw, double wall_s) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "twell tune: cannot write %s: %s\n", path, strerror(errno));
        return 0;
    }
    char date[32];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));
    fprintf(f, "{\n  \"tool\": \"twell tune\",\n  \"version\": ");
    tw_json_string(f, twell_version());
    fprintf(f, ",\n  \"date\": \"%s\",\n  \"dry_run\": %s,\n  \"device\": {\"name\": ", date,
            a->dry_run ? "true" : "false");
    tw_json_string(f, d->name);
    fprintf(f, ", \"arch\": ");
    tw_json_string(f, d->arch);
    fprintf(f, ", \"sm_count\": %d, \"driver_version\": %d, \"assumed\": %s},\n", d->sm_count,
            d->driver_version, assumed ? "true" : "false");
    fprintf(f, "  \"model\": ");
    if (m) {
        fprintf(f, "{\"path\": ");
        tw_json_string(f, a->model);
        fprintf(f, ", \"model_type\": ");
        tw_json_string(f, m->model_type);
        fprintf(f,
                ", \"hidden_size\": %u, \"intermediate_size\": %u, \"num_layers\": %lld, "
                "\"torch_dtype\": ",
                m->hidden_size, m->intermediate_size, (long long)m->num_layers);
        tw_json_string(f, m->torch_dtype);
        fprintf(f, "},\n");
    } else {
        fprintf(f, "null,\n");
    }
    fprintf(f, "  \"budget_s\": %g,\n  \"results\": [", a->budget);
    for (size_t i = 0; i < n; i++) {
        const tw_row *r = &rows[i];
        char canon[TW_TUNE_CANON_MAX];
        tw_tune_config_canon(&r->ch.config, canon, sizeof canon);
        fprintf(f, "%s\n    {\"op\": \"%s\", \"kernel\": ", i ? "," : "", r->op);
        tw_json_string(f, r->kernel);
        fprintf(f,
                ", \"K\": %u, \"N\": %u, \"T\": %u, \"C\": %u, \"dtype\": \"%s\", \"gated\": %s, "
                "\"M\": %zu, \"bucket\": %zu, \"config\": ",
                s->K, s->N, s->T, s->C, tw_dt(s->dtype), s->gated ? "true" : "false", r->M,
                r->bucket);
        if (r->st == TWELL_OK)
            tw_json_string(f, canon);
        else
            fputs("null", f);
        fprintf(f, ", \"ms\": ");
        tw_json_ms(f, r->ch.ms);
        fprintf(f, ", \"default_ms\": ");
        tw_json_ms(f, r->ch.default_ms);
        fprintf(f, ", \"speedup\": ");
        tw_json_ms(f, r->ch.ms > 0.0 ? r->ch.default_ms / r->ch.ms : NAN);
        fprintf(f, ", \"source\": ");
        tw_json_string(f, r->st != TWELL_OK ? "error"
                          : a->dry_run      ? (r->stored ? "stored" : "planned")
                                            : tw_tune_source_name(r->ch.source));
        fprintf(f,
                ", \"budget_cut\": %s, \"candidates\": %zu, \"kept\": %zu, \"measured\": %zu, "
                "\"failed\": %zu, \"skipped\": %zu, \"elapsed_s\": %.3f, \"error\": ",
                r->ch.budget_cut ? "true" : "false", r->ch.pruning.total, r->ch.pruning.kept,
                r->ch.n_measured, r->ch.n_failed, r->ch.n_skipped, r->ch.elapsed_s);
        if (r->st == TWELL_OK)
            fputs("null", f);
        else
            tw_json_string(f, r->err);
        fputc('}', f);
    }
    fprintf(f, "\n  ],\n  \"prewarm\": ");
    if (a->dry_run) {
        fputs("null", f);
    } else {
        fprintf(f,
                "{\"ok\": %s, \"seconds\": %.3f, \"compiles\": %llu, \"gate_pack_modules\": %d, "
                "\"ffn_infer_modules\": %d, \"error\": ",
                pw->st == TWELL_OK ? "true" : "false", pw->s, pw->compiles, pw->gp_modules,
                pw->ffn_modules);
        if (pw->st == TWELL_OK)
            fputs("null", f);
        else
            tw_json_string(f, pw->err);
        fputc('}', f);
    }
    fprintf(f, ",\n  \"wall_s\": ");
    tw_json_ms(f, a->dry_run ? NAN : wall_s);
    fprintf(f, "\n}\n");
    int ok = !ferror(f);
    ok &= fclose(f) == 0;
    if (!ok)
        fprintf(stderr, "twell tune: error writing %s\n", path);
    return ok;
}

/* Planning without measuring: which kernel, how many candidates survive pruning, the default,
 * and whether a winner is already stored for this device. */
static void tw_plan_row(twell_ctx *ctx, const tw_tune_device *d, const twell_shape *s, tw_row *r) {
    tw_tune_problem p;
    memset(&p, 0, sizeof p);
    snprintf(p.op, sizeof p.op, "%s", r->op);
    p.shape = *s;
    p.M = r->bucket;
    const tw_tune_space *sp = tw_tune_space_runnable(ctx, r->op, &p, d);
    const tw_tune_space *preferred = tw_tune_space_pick(r->op, &p, d);
    if (!sp)
        sp = preferred;
    else if (preferred && preferred != sp)
        snprintf(r->note, sizeof r->note, "%s preferred: no launcher in this build yet",
                 preferred->kernel);
    if (!sp) {
        r->st = TWELL_ERR_UNSUPPORTED;
        snprintf(r->err, sizeof r->err, "no kernel supports this shape on %s", d->arch);
        return;
    }
    snprintf(r->kernel, sizeof r->kernel, "%s", sp->kernel);
    r->runnable = tw_tune_kernel_runnable(ctx, sp->kernel);
    tw_tune_config *c = NULL;
    size_t n = 0, di = SIZE_MAX;
    r->st = tw_tune_space_enumerate(sp, &p, d, &c, &n, &di, &r->ch.pruning);
    if (r->st == TWELL_OK && n == 0) {
        r->st = TWELL_ERR_UNSUPPORTED;
        snprintf(r->err, sizeof r->err, "every candidate is pruned on %s", d->arch);
    } else if (r->st != TWELL_OK) {
        snprintf(r->err, sizeof r->err, "invalid candidate space (%s)", twell_status_name(r->st));
    } else {
        r->ch.config = c[di != SIZE_MAX ? di : 0];
        tw_tune_record rec;
        if (tw_tune_store_load(ctx, &p, d, &rec) == TWELL_OK &&
            tw_tune_space_accepts(sp, &p, d, &rec.config)) {
            r->stored = 1;
            r->ch.config = rec.config;
            r->ch.ms = rec.ms;
            r->ch.default_ms = rec.default_ms;
        }
    }
    free(c);
}

static double tw_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The portable row kernel is loaded by calls with unaligned tensors only, so nothing tuned needs
 * it, yet its compile is the slowest of a large shape's (about 5 s at K = 8192): it is compiled on
 * a thread of its own (CPU context sharing the disk cache) while the GPU tunes, and the prewarm
 * then finds it cached. */
typedef struct tw_bg_compile {
    twell_shape shape;
    const twell_ctx *parent; /* only its options are read (they never change) */
    pthread_t th;
    int started;
    twell_status st;
} tw_bg_compile;

static void *tw_bg_compile_run(void *arg) {
    tw_bg_compile *b = arg;
    b->st = tw_test_control(TW_TC_FFN_COMPILE_ROWS, b->parent, &b->shape, (char *)NULL, (size_t)0);
    return NULL;
}

static void tw_bg_compile_start(twell_ctx *ctx, const twell_shape *s, tw_bg_compile *b) {
    memset(b, 0, sizeof b[0]);
    b->shape = *s;
    b->parent = ctx;
    b->started = pthread_create(&b->th, NULL, tw_bg_compile_run, b) == 0;
}

static void tw_bg_compile_join(tw_bg_compile *b) {
    if (b->started)
        pthread_join(b->th, NULL);
    b->started = 0;
}

/* Loads what a deployed process's plans of shape s load, compiling whatever the cache lacks: a
 * plan (its default kernels: gate-pack, fused inference, the dense path), the stored winners of
 * each M's bucket for gate-pack, fused inference and the dense path's split factors (as the
 * plan's first call of that bucket does), and the portable row kernel a call with unaligned
 * tensors falls back to. */
static void tw_prewarm_shape(twell_ctx *ctx, const twell_shape *s, const size_t *M, size_t nM,
                             tw_prewarm *r) {
    memset(r, 0, sizeof *r);
    tw_cache *cache = NULL;
    tw_cache_stats st0, st1;
    memset(&st0, 0, sizeof st0);
    memset(&st1, 0, sizeof st1);
    if (tw_ctx_cache(ctx, &cache) == TWELL_OK)
        tw_cache_get_stats(cache, &st0);
    double t0 = tw_now_s();
    twell_plan *plan = NULL;
    r->st = twell_plan_create(ctx, s, &plan);
    /* each M's bucket resolved from the store now, as its first call would: nothing is timed */
    for (size_t i = 0; r->st == TWELL_OK && i < nM; i++)
        r->st = twell_plan_tune(plan, M[i], TWELL_TUNE_STORED_ONLY);
    if (r->st == TWELL_OK) {
        /* a shape the portable kernel cannot run is not an error: plans then never load it */
        if (tw_test_control(TW_TC_FFN_SET_KERNEL, plan, "generic") == TWELL_OK)
            (void)tw_test_control(TW_TC_FFN_SET_KERNEL, plan, "auto");
        /* the dense route's packing module and cuBLASLt: a plan loads them at its first call */
        int dense = 0;
        (void)tw_test_control(TW_TC_DENSE_AVAILABLE, plan, &dense);
        (void)tw_test_control(TW_TC_GP_MODULES, plan, &r->gp_modules);
        (void)tw_test_control(TW_TC_FFN_MODULES, plan, &r->ffn_modules);
    }
    if (r->st != TWELL_OK)
        snprintf(r->err, sizeof r->err, "%s", twell_ctx_errmsg(ctx));
    twell_plan_destroy(plan);
    r->s = tw_now_s() - t0;
    if (cache)
        tw_cache_get_stats(cache, &st1);
    r->compiles = (unsigned long long)(st1.puts - st0.puts);
}

/* The shape to tune: --K/--N, or the model's FFN (and its dtype unless --dtype). 0, or the exit
 * code 2 after saying why; *m is the model when one was read. */
static int tw_tune_shape(const tw_tune_args *a, twell_shape *shape, tw_model_config *model,
                         tw_model_config **m) {
    *m = NULL;
    twell_shape_init(shape, a->K, a->N);
    shape->T = a->T;
    shape->C = a->C;
    shape->gated = a->gated;
    shape->dtype = a->have_dtype ? a->dtype : TWELL_DTYPE_BF16;
    if (!a->model)
        return 0;
    char err[512];
    if (tw_model_config_load(a->model, model, err, sizeof err) != TWELL_OK) {
        fprintf(stderr, "twell tune: %s\n", err);
        return 2;
    }
    *m = model;
    shape->K = model->hidden_size;
    shape->N = model->intermediate_size;
    if (!a->have_dtype &&
        tw_model_config_dtype(model, &shape->dtype, err, sizeof err) != TWELL_OK) {
        fprintf(stderr, "twell tune: %s: %s\n", a->model, err);
        return 2;
    }
    return 0;
}

/* A context for messages and the cache (the GPU for tuning; for a dry run, whatever is here),
 * the shape checked on it, and the device tuned for (*assumed: a preset, not the GPU present).
 * 0, or the exit code after saying why (*ctx then NULL). */
static int tw_tune_open(const tw_tune_args *a, const twell_shape *shape, twell_ctx **ctx,
                        tw_tune_device *dev, int *assumed) {
    twell_ctx_options co;
    twell_ctx_options_init(&co);
    co.backend = a->dry_run ? TWELL_BACKEND_AUTO : TWELL_BACKEND_CUDA;
    co.device = a->device;
    co.cpu_threads = 0;
    co.log = tw_cli_log;
    co.log_user = "twell tune";
    *ctx = NULL;
    *assumed = 0;
    twell_status st = twell_ctx_create(&co, ctx);
    if (st != TWELL_OK && !a->dry_run) {
        fprintf(stderr,
                "twell tune: tuning needs a CUDA device, and none is usable here (%s); "
                "`twell tune --dry-run` lists the shapes and candidates without one\n",
                twell_status_name(st));
        return 3;
    }
    if (st != TWELL_OK) {
        fprintf(stderr, "twell tune: cannot create a context: %s\n", twell_status_name(st));
        return 1;
    }
    int rc = 0;
    if (twell_shape_check(*ctx, shape) != TWELL_OK) {
        fprintf(stderr, "twell tune: unsupported shape%s%s: %s\n", a->model ? " from " : "",
                a->model ? a->model : "", twell_ctx_errmsg(*ctx));
        rc = 2;
    } else if (a->assume || twell_ctx_backend(*ctx) != TWELL_BACKEND_CUDA) {
        tw_tune_device_preset(a->assume ? a->assume : "h200", dev);
        *assumed = 1;
    } else if (tw_tune_device_of(*ctx, dev) != TWELL_OK) {
        fprintf(stderr, "twell tune: %s\n", twell_ctx_errmsg(*ctx));
        rc = 1;
    }
    if (rc == 0 && *assumed && !a->dry_run) {
        fprintf(stderr, "twell tune: --assume-device only applies to --dry-run: tuning measures "
                        "the GPU present\n");
        rc = 2;
    }
    if (rc != 0) {
        twell_ctx_destroy(*ctx);
        *ctx = NULL;
    }
    return rc;
}

/* The model, shape and device lines before the table. */
static void tw_tune_print_setup(const tw_tune_args *a, const tw_model_config *m,
                                const twell_shape *shape, const tw_tune_device *dev, int assumed) {
    if (m) {
        printf("model: %s (%s%s", a->model, m->model_type[0] ? m->model_type : "unknown type",
               m->section[0] ? ", sizes from text_config" : "");
        if (m->num_layers >= 0)
            printf(", %lld layers share this FFN shape", (long long)m->num_layers);
        printf(")\n");
        if (m->hidden_act[0] && strcmp(m->hidden_act, "relu"))
            printf("note: hidden_act is %s; TwELL kernels apply relu to the gate (sparse models "
                   "are trained or fine-tuned with relu)\n",
                   m->hidden_act);
    }
    printf("shape: K=%u N=%u T=%u C=%u %s %s\n", shape->K, shape->N, shape->T, shape->C,
           tw_dt(shape->dtype), shape->gated ? "gated" : "non-gated");
    printf("device: %s (%s, %d SMs)%s\n", dev->name, dev->arch, dev->sm_count,
           assumed ? (a->assume ? " [assumed]" : " [assumed: no CUDA device here]") : "");
}

/* One row per op and M: tuned on the GPU (progress on stderr unless --quiet), or planned for a
 * dry run. 1 when a tuning failed for a reason other than an unsupported shape. */
static int tw_tune_rows(twell_ctx *ctx, const tw_tune_args *a, const tw_tune_device *dev,
                        const twell_shape *shape, tw_row *rows, size_t nrows) {
    tw_tune_options opt = tw_tune_options_default();
    opt.budget_s = a->budget;
    opt.reps = a->reps;
    opt.threads = a->threads;
    tw_progress prog = {!a->quiet && !a->dry_run, isatty(2), 0, nrows, NULL, 0};
    opt.progress = tw_progress_cb;
    opt.progress_user = &prog;
    int failed = 0;
    for (size_t o = 0; o < a->nops; o++)
        for (size_t i = 0; i < a->nM; i++) {
            tw_row *r = &rows[o * a->nM + i];
            r->op = a->ops[o];
            r->M = a->M[i];
            r->bucket = tw_tune_m_bucket(a->M[i]);
            r->ch.ms = r->ch.default_ms = NAN;
            if (a->dry_run) {
                tw_plan_row(ctx, dev, shape, r);
                continue;
            }
            prog.job = o * a->nM + i;
            prog.op = r->op;
            prog.M = r->M;
            tw_progress_draw(&prog, 0, 0, "start");
            r->st = tw_tune_gpu(ctx, r->op, shape, r->M, &opt, a->retune, &r->ch);
            if (r->st != TWELL_OK) {
                snprintf(r->err, sizeof r->err, "%s", twell_ctx_errmsg(ctx));
                failed |= r->st != TWELL_ERR_UNSUPPORTED;
            } else {
                snprintf(r->kernel, sizeof r->kernel, "%s", r->ch.config.kernel);
            }
        }
    tw_progress_end(&prog);
    return failed;
}

/* After tuning: the row kernel's background compile joined, the prewarm of the shape, and
 * whether everything reached the cache (before: its stats before tuning). Into pw; printed. 1
 * when the prewarm failed. */
static int tw_tune_prewarm(twell_ctx *ctx, const tw_tune_args *a, const twell_shape *shape,
                           tw_bg_compile *bg, tw_cache *cache, const tw_cache_stats *before,
                           tw_prewarm *pw) {
    tw_bg_compile_join(bg);
    if (bg->st != TWELL_OK) /* the prewarm compiles it (or reports why it cannot) */
        printf("note: compiling the row kernel alongside tuning failed (%s)\n",
               twell_status_name(bg->st));
    tw_prewarm_shape(ctx, shape, a->M, a->nM, pw);
    if (pw->st == TWELL_OK && cache && tw_cli_check_stored("twell tune", cache, before)) {
        pw->st = TWELL_ERR_IO;
        snprintf(pw->err, sizeof pw->err,
                 "tuning records or kernels were not stored in the cache (see above): a "
                 "deployed process would tune and compile them again");
    }
    if (pw->st == TWELL_OK)
        printf("prewarm: a plan of this shape and its winners for every M loaded in %.2f s "
               "(%llu kernels compiled now; %d gate-pack and %d ffn_infer modules); a new "
               "process compiles nothing for it\n",
               pw->s, pw->compiles, pw->gp_modules, pw->ffn_modules);
    else
        printf("prewarm: FAILED: %s\n", pw->err);
    return pw->st != TWELL_OK;
}

int twell_cmd_tune(int argc, char **argv) {
    tw_tune_args a;
    int pr = tw_parse_args(argc, argv, &a);
    if (pr < 0) {
        tw_tune_usage(stdout);
        return 0;
    }
    if (pr == 0)
        return 2;

    tw_model_config model, *m = NULL;
    twell_shape shape;
    int rc = tw_tune_shape(&a, &shape, &model, &m);
    if (rc != 0)
        return rc;
    twell_ctx *ctx = NULL;
    tw_tune_device dev;
    int assumed = 0;
    if ((rc = tw_tune_open(&a, &shape, &ctx, &dev, &assumed)) != 0)
        return rc;
    tw_tune_print_setup(&a, m, &shape, &dev, assumed);

    size_t nrows = a.nops * a.nM;
    tw_row *rows = calloc(nrows, sizeof *rows);
    if (!rows) {
        twell_ctx_destroy(ctx);
        return 1;
    }
    /* The cache opened now (its warning, if any, comes first); its stats say at the end whether
     * the records and kernels reached the directory. */
    tw_cache *cache = NULL;
    tw_cache_stats before;
    memset(&before, 0, sizeof before);
    if (!a.dry_run && tw_ctx_cache(ctx, &cache) == TWELL_OK)
        tw_cache_get_stats(cache, &before);
    double t_start = tw_now_s();
    tw_bg_compile bg;
    memset(&bg, 0, sizeof bg);
    if (!a.dry_run)
        tw_bg_compile_start(ctx, &shape, &bg);
    int failed = tw_tune_rows(ctx, &a, &dev, &shape, rows, nrows);
    tw_print_table(rows, nrows, a.dry_run);
    tw_prewarm pw;
    memset(&pw, 0, sizeof pw);
    pw.st = TWELL_ERR_UNSUPPORTED; /* not done (dry run) */
    if (!a.dry_run)
        failed |= tw_tune_prewarm(ctx, &a, &shape, &bg, cache, &before, &pw);
    double wall_s = tw_now_s() - t_start;
    if (!a.dry_run)
        printf("total: %.2f s (tuning and prewarm, this process)\n", wall_s);
    rc = failed ? 1 : 0;
    if (a.json) {
        if (tw_write_json(a.json, &a, m, &shape, &dev, assumed, rows, nrows, &pw, wall_s))
            printf("report: %s\n", a.json);
        else
            rc = 1;
    }
    free(rows);
    twell_ctx_destroy(ctx);
    return rc;
}
