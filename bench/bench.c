/*
 * bench.c — `twell bench`: parses options, sets up the GPU context, the cuBLAS baseline and the
 * L2 flush buffer, runs the chosen op's plug-in, prints a table and writes the JSON records.
 */
#include "bench.h"
#include "cli.h"
#include "cli_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const bench_op bench_ops[] = {
    {"gate_pack", "cublas_gemm", bench_gate_pack_run},
    {"ffn_infer", "cublas_ffn", bench_ffn_run},
    {"train", "cublas_train", bench_train_run},
};

static void bench_usage(FILE *f) {
    fprintf(f, "usage: twell bench [--op ");
    for (size_t i = 0; i < sizeof bench_ops / sizeof bench_ops[0]; i++)
        fprintf(f, "%s%s", i ? "|" : "", bench_ops[i].name);
    fprintf(f,
            "] [--M 4096,16384,65536]\n"
            "                   [--K 2048] [--N 5632]"
            " [--T 256] [--C 8] [--nnz 29,280] [--dist uniform,skewed]\n"
            "                   [--dtype bf16|fp16] [--reps 20] [--warmup 3] [--check-rows 128]\n"
            "                   [--variant auto|simt|sm90|small]\n"
            "                   [--small-gate auto|g2u2[:WN]] [--lt-gate auto|off|all]\n"
            "                   [--path auto|sparse|dense|small] [--mode eager|graph|both|host]\n"
            "                   [--gated 1|0] [--validate-packed 0|1] [--entry split|layer]\n"
            "                   [--seed 1] [--out DIR]\n\n"
            "Benchmarks an op on the GPU against dense cuBLAS on the same synthetic sparse data\n"
            "(runtime/synth.h), after checking a sample of rows against the CPU reference.\n"
            "Times are medians of CUDA-event timings, the L2 flushed before every run, ours and\n"
            "the baseline interleaved. Writes a table to stdout and the records as JSON to\n"
            "DIR/<op>-<date>.json (default DIR: bench/results). ratio = baseline_ms / ours_ms.\n"
            "gate_pack: ours = gate-pack into TwELL, baseline = the cuBLAS gate GEMM.\n"
            "ffn_infer: ours = gate-pack + fused inference (and the fused part alone, op\n"
            "ffn_fused_only), baseline = dense cuBLAS FFN (gate, up, relu(g)*u, down), gated;\n"
            "with --gated 0 a non-gated block (wu carries the sparsity, y = relu(x*Wu^T)*Wd)\n"
            "against cuBLAS's up GEMM, relu, down GEMM. Records say \"gated\": true|false.\n"
            "train: ours = one training step, forward + backward (records train, train_fwd,\n"
            "train_bwd), baseline = a dense cuBLAS training step on the same data.\n"
            "--path sets twell_plan_set_path (default auto: the plan picks small-batch, sparse\n"
            "or dense from M and the density it knows: each ffn_infer case first calls\n"
            "twell_plan_reserve(plan, M, nnz) as a server would, then its calls' counts);\n"
            "sparse is the tiled pipeline (small-batch path off); small forces the small-batch\n"
            "path (gate-pack and inference). --variant small forces the small-batch gate-pack\n"
            "kernel; simt or sm90 force that kernel (small-batch path off). The record's\n"
            "variant names what ran.\n"
            "Every record also says requested_path (--path as given) and path, the route its\n"
            "calls ran (read from the plan): ffn_infer small, tiled, rows (the portable row\n"
            "kernel) or dense, mixed if the timed calls (warm-up included) ran both dense and\n"
            "sparse, a graph record the route of the captured call; train sparse, dense or\n"
            "mixed; gate_pack small (the small-batch kernel) or tiled (the full gate-pack).\n"
            "--small-gate names the small-batch gate-pack kernel (where that path runs): auto or\n"
            "g2u2, the one kernel (16 rows a block, more token blocks for more rows). :WN forces\n"
            "16*WN neurons a block (1, 2, 4, 8, where T allows it; else the rule's: 1 up to 8\n"
            "rows a block, else 2). Records say small-g2u2.\n");
    fprintf(f, "--entry layer (ffn_infer): ours is one twell_ffn_layer call (the layer from x:\n"
               "AUTO's dense calls pack nothing) instead of twell_gate_pack + twell_ffn_infer;\n"
               "records ffn_layer / ffn_layer_graph / ffn_layer_host instead of ffn_infer*.\n"
               "--mode graph (ffn_infer): ours and the dense baseline are each captured in a CUDA\n"
               "graph (after twell_plan_reserve and warm-up calls) and the replays timed; records\n"
               "ffn_infer_graph / ffn_fused_only_graph. both: eager then graph records.\n"
               "--mode host (ffn_infer): the calling thread's wall-clock time inside each call\n"
               "alone (reps x 50 calls, batches of 8 with an untimed synchronisation between, so\n"
               "no call waits for the GPU; median), ours and the dense baseline, with our driver\n"
               "calls per call in the note; records ffn_infer_host / ffn_fused_only_host. Use\n"
               "--M 1 for decode. TWELL_POINTER_CACHE=0 gives the calls without the plan's\n"
               "pointer cache (every pointer asked of the driver, as before it existed).\n"
               "--validate-packed 1 (ffn_infer): the context checks every packed word on entry\n"
               "(options.validate_packed: a check kernel and one host synchronisation per eager\n"
               "call; captured calls are not checked); run it with 0 (the default) and 1 to\n"
               "measure its cost. Records say \"validate_packed\": true|false.\n"
               "The dense path runs through cuBLASLt (its gate reused from the gate-pack when\n"
               "that ran through cuBLASLt too); a dense record's variant says so.\n"
               "Numbers are plain decimal (lists comma-separated): a negative, malformed or\n"
               "out-of-range value is a usage error.\n"
               "Exit: 0 ok, 1 a check or run failed, 2 usage, 3 no usable CUDA device.\n");
}

/* ---- option parsing ---- */

static int bench_parse_dists(const char *s, tw_synth_dist *out, size_t *n) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n == BENCH_MAX_LIST || tw_synth_dist_parse(tok, &out[*n]) != 0)
            return -1;
        (*n)++;
    }
    return *n ? 0 : -1;
}

static void bench_opts_default(bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->op = "gate_pack";
    o->M[0] = 4096, o->M[1] = 16384, o->M[2] = 65536, o->nM = 3;
    o->nnz[0] = 29, o->nnz[1] = 280, o->nnnz = 2;
    o->dist[0] = TW_SYNTH_UNIFORM, o->dist[1] = TW_SYNTH_SKEWED, o->ndist = 2;
    o->K = 2048, o->N = 5632, o->T = 256, o->C = 8;
    o->dtype = TWELL_DTYPE_BF16;
    o->reps = 20;
    o->warmup = 3;
    o->check_rows = 128;
    o->variant = "auto";
    o->path = "auto";
    o->small_gate = "auto";
    o->lt_gate = "auto";
    o->mode = "eager";
    o->gated = 1;
    o->validate_packed = 0;
    o->out_dir = "bench/results";
    o->seed = 1;
}

/* The options of the data and the timing: 0 set, 1 a bad value, -1 not one of them. */
static int bench_set_data_option(bench_opts *o, const char *key, const char *v) {
    int bad = 0;
    if (!strcmp(key, "--M"))
        bad = tw_cli_size_list(v, 1, BENCH_MAX_M, o->M, BENCH_MAX_LIST, &o->nM);
    else if (!strcmp(key, "--nnz")) {
        bad = tw_cli_double_list(v, 0.0, 65536.0, o->nnz, BENCH_MAX_LIST, &o->nnnz);
        for (size_t k = 0; !bad && k < o->nnnz; k++)
            bad = !(o->nnz[k] > 0.0);
    } else if (!strcmp(key, "--dist"))
        bad = bench_parse_dists(v, o->dist, &o->ndist);
    else if (!strcmp(key, "--K"))
        bad = tw_cli_u32(v, 1, UINT32_MAX, &o->K);
    else if (!strcmp(key, "--N"))
        bad = tw_cli_u32(v, 1, UINT32_MAX, &o->N);
    else if (!strcmp(key, "--T"))
        bad = tw_cli_u32(v, 1, UINT32_MAX, &o->T);
    else if (!strcmp(key, "--C"))
        bad = tw_cli_u32(v, 1, UINT32_MAX, &o->C);
    else if (!strcmp(key, "--dtype")) {
        if (!strcmp(v, "bf16"))
            o->dtype = TWELL_DTYPE_BF16;
        else if (!strcmp(v, "fp16"))
            o->dtype = TWELL_DTYPE_FP16;
        else
            bad = 1;
    } else if (!strcmp(key, "--reps") || !strcmp(key, "--warmup") || !strcmp(key, "--check-rows")) {
        uint32_t n = 0;
        bad = tw_cli_u32(v, 1, 100000, &n);
        if (!bad && !strcmp(key, "--reps"))
            o->reps = (int)n;
        else if (!bad && !strcmp(key, "--warmup"))
            o->warmup = (int)n;
        else if (!bad)
            o->check_rows = n;
    } else if (!strcmp(key, "--seed")) {
        uint32_t n = 1;
        bad = tw_cli_u32(v, 1, UINT32_MAX, &n);
        o->seed = n;
    } else
        return -1;
    return bad != 0; /* the parsers' failures are nonzero, some negative */
}

/* The options of what runs and where records go: 0 set, 1 a bad value, -1 not one of them. */
static int bench_set_run_option(bench_opts *o, const char *key, const char *v) {
    int bad = 0;
    if (!strcmp(key, "--op"))
        o->op = v;
    else if (!strcmp(key, "--variant")) {
        o->variant = v;
        bad = strcmp(v, "auto") && strcmp(v, "simt") && strcmp(v, "sm90") && strcmp(v, "small");
    } else if (!strcmp(key, "--mode")) {
        o->mode = v;
        bad = strcmp(v, "eager") && strcmp(v, "graph") && strcmp(v, "both") && strcmp(v, "host");
    } else if (!strcmp(key, "--gated")) {
        uint32_t g = 1;
        bad = tw_cli_u32(v, 0, 1, &g);
        o->gated = (int)g;
    } else if (!strcmp(key, "--validate-packed")) {
        uint32_t g = 0;
        bad = tw_cli_u32(v, 0, 1, &g);
        o->validate_packed = (int)g;
    } else if (!strcmp(key, "--entry")) {
        bad = strcmp(v, "split") && strcmp(v, "layer");
        o->layer = !strcmp(v, "layer");
    } else if (!strcmp(key, "--path")) {
        o->path = v;
        bad = strcmp(v, "auto") && strcmp(v, "sparse") && strcmp(v, "dense") && strcmp(v, "small");
    } else if (!strcmp(key, "--lt-gate")) {
        o->lt_gate = v;
        bad = strcmp(v, "auto") && strcmp(v, "off") && strcmp(v, "all");
    } else if (!strcmp(key, "--small-gate")) {
        static const char *const k[] = {"auto", "g2u2"};
        o->small_gate = v;
        size_t len = strcspn(v, ":");
        bad = 1;
        for (size_t j = 0; j < sizeof k / sizeof k[0]; j++)
            bad = bad && !(strlen(k[j]) == len && !strncmp(v, k[j], len));
        /* ":WN", the neuron groups a block: 1, 2, 4 or 8 */
        if (v[len] == ':')
            bad = bad || strlen(v + len) != 2 || !strchr("1248", v[len + 1]) || v[len + 1] == '\0';
    } else if (!strcmp(key, "--out"))
        o->out_dir = v;
    else
        return -1;
    return bad != 0;
}

/* What no single option can check: the shape, nnz within N, --gated's op. Returns 0, or 2 after
 * printing what is wrong. */
static int bench_check_opts(const bench_opts *o) {
    twell_shape s;
    twell_shape_init(&s, o->K, o->N);
    s.T = o->T, s.C = o->C, s.dtype = o->dtype;
    if (twell_shape_check(NULL, &s) != TWELL_OK) {
        fprintf(stderr, "twell bench: unsupported shape K=%u N=%u T=%u C=%u\n", o->K, o->N, o->T,
                o->C);
        return 2;
    }
    for (size_t i = 0; i < o->nnnz; i++)
        if (o->nnz[i] > (double)o->N) {
            fprintf(stderr, "twell bench: --nnz %g exceeds N = %u\n", o->nnz[i], o->N);
            return 2;
        }
    if (!o->gated && strcmp(o->op, "ffn_infer") != 0) {
        fprintf(stderr, "twell bench: --gated 0 applies to --op ffn_infer only\n");
        return 2;
    }
    if (o->reps < 20)
        fprintf(stderr, "twell bench: note: --reps %d is below the 20 the protocol asks for\n",
                o->reps);
    return 0;
}

/* Returns 0, or 2 after printing what is wrong. */
static int bench_parse(int argc, char **argv, bench_opts *o) {
    bench_opts_default(o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        char key[32];
        const char *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "twell bench: unexpected argument '%s'\n", a);
            return 2;
        }
        size_t klen = eq ? (size_t)(eq - a) : strlen(a);
        if (klen >= sizeof key) {
            fprintf(stderr, "twell bench: unknown option '%s'\n", a);
            return 2;
        }
        memcpy(key, a, klen);
        key[klen] = '\0';
        if (!strcmp(key, "--help") || !strcmp(key, "-h")) {
            bench_usage(stdout);
            exit(0);
        }
        if (eq)
            v = eq + 1;
        else if (i + 1 < argc)
            v = argv[++i];
        else {
            fprintf(stderr, "twell bench: %s needs a value\n", key);
            return 2;
        }
        int bad = bench_set_data_option(o, key, v);
        if (bad < 0)
            bad = bench_set_run_option(o, key, v);
        if (bad < 0) {
            fprintf(stderr, "twell bench: unknown option '%s'\n\n", key);
            bench_usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "twell bench: bad value '%s' for %s\n", v, key);
            return 2;
        }
    }
    return bench_check_opts(o);
}

/* ---- records ---- */

static void bench_commit(char *out, size_t n) {
    const char *env = getenv("TWELL_COMMIT");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return;
    }
    snprintf(out, n, "unknown");
    FILE *p = popen("git rev-parse --short HEAD 2>/dev/null", "r");
    if (!p)
        return;
    char buf[64];
    if (fgets(buf, sizeof buf, p)) {
        buf[strcspn(buf, "\r\n")] = '\0';
        size_t len = strlen(buf);
        if (len > 0 && n > 0) { /* copy by hand: snprintf trips -Wformat-truncation at -O2 */
            if (len >= n)
                len = n - 1;
            memcpy(out, buf, len);
            out[len] = '\0';
        }
    }
    pclose(p);
}

void bench_record_init(const bench_env *env, bench_record *r, const char *op, size_t M,
                       tw_synth_dist dist, double nnz) {
    const bench_opts *o = env->opts;
    memset(r, 0, sizeof *r);
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->dtype, sizeof r->dtype, "%s", o->dtype == TWELL_DTYPE_BF16 ? "bf16" : "fp16");
    r->M = M, r->K = o->K, r->N = o->N, r->T = o->T, r->C = o->C;
    snprintf(r->distribution, sizeof r->distribution, "%s", tw_synth_dist_name(dist));
    r->nnz_target = nnz;
    r->gated = o->gated;
    r->validate_packed = o->validate_packed;
    snprintf(r->requested_path, sizeof r->requested_path, "%s", o->path);
    snprintf(r->path, sizeof r->path, "unknown");
    r->baseline_ms = r->ratio = -1.0;
    snprintf(r->gpu, sizeof r->gpu, "%s", env->gpu);
    snprintf(r->commit, sizeof r->commit, "%s", env->commit);
    snprintf(r->date, sizeof r->date, "%s", env->date);
}

int bench_plan_int(twell_plan *plan, int op) {
    int v = 0;
    return tw_test_control(op, plan, &v) == TWELL_OK ? v : 0;
}

double bench_plan_double(twell_plan *plan, int op) {
    double v = -1.0;
    return tw_test_control(op, plan, &v) == TWELL_OK ? v : -1.0;
}

size_t bench_plan_size(twell_plan *plan, int op) {
    size_t v = 0;
    return tw_test_control(op, plan, &v) == TWELL_OK ? v : 0;
}

twell_path bench_plan_path(twell_plan *plan, int op) {
    twell_path v = TWELL_PATH_AUTO;
    return tw_test_control(op, plan, &v) == TWELL_OK ? v : TWELL_PATH_AUTO;
}

double bench_plan_threshold(twell_plan *plan, size_t M) {
    double v = -1.0;
    return tw_test_control(TW_TC_DENSE_THRESHOLD, plan, M, &v) == TWELL_OK ? v : -1.0;
}

const char *bench_plan_variant(twell_plan *plan) {
    const char *v = "auto";
    return tw_test_control(TW_TC_GP_VARIANT, plan, &v) == TWELL_OK && v ? v : "auto";
}

void bench_gate_name(twell_plan *plan, char *out, size_t n) {
    const char *k = NULL;
    if (bench_plan_int(plan, TW_TC_DENSE_LAST_GATE_LT))
        snprintf(out, n, "cublaslt");
    else if (bench_plan_int(plan, TW_TC_SMALL_LAST_GATE) &&
             tw_test_control(TW_TC_SMALL_LAST_GATE_KERNEL, plan, &k) == TWELL_OK && k && *k)
        snprintf(out, n, "small-%s", k);
    else
        snprintf(out, n, "%s", bench_plan_variant(plan));
}

twell_path bench_state_path(twell_train_state *state, int op) {
    twell_path v = TWELL_PATH_AUTO;
    return tw_test_control(op, state, &v) == TWELL_OK ? v : TWELL_PATH_AUTO;
}

unsigned long bench_plan_calls(twell_plan *plan, twell_path path) {
    unsigned long v = 0;
    return tw_test_control(TW_TC_DENSE_CALLS, plan, (int)path, &v) == TWELL_OK ? v : 0;
}

unsigned long bench_state_calls(twell_train_state *state, twell_path path) {
    unsigned long v = 0;
    return tw_test_control(TW_TC_TD_CALLS, state, (int)path, &v) == TWELL_OK ? v : 0;
}

size_t bench_max_M(const bench_opts *o) {
    size_t Mmax = 0;
    for (size_t i = 0; i < o->nM; i++)
        if (o->M[i] > Mmax)
            Mmax = o->M[i];
    return Mmax;
}

twell_path bench_path_parse(const char *path) {
    return !strcmp(path, "dense")    ? TWELL_PATH_DENSE
           : !strcmp(path, "sparse") ? TWELL_PATH_SPARSE
                                     : TWELL_PATH_AUTO;
}

int bench_plan_open(bench_env *env, const twell_shape *s, twell_plan **plan) {
    const bench_opts *o = env->opts;
    twell_ctx *ctx = env->ctx;
    *plan = NULL;
    if (twell_plan_create(ctx, s, plan) != TWELL_OK) {
        fprintf(stderr, "twell bench: twell_plan_create: %s\n", twell_ctx_errmsg(ctx));
        return 1;
    }
    const char *smode =
        !strcmp(o->variant, "small") || !strcmp(o->path, "small") ? "force"
        : strcmp(o->variant, "auto") != 0 || !strcmp(o->path, "sparse") || !strcmp(o->path, "dense")
            ? "off"
            : "auto";
    (void)tw_test_control(TW_TC_SMALL_SET_MODE, *plan, smode);
    if (strcmp(o->small_gate, "auto") != 0 &&
        tw_test_control(TW_TC_SMALL_SET_GATE, *plan, o->small_gate) != TWELL_OK) {
        fprintf(stderr, "twell bench: small gate %s: %s\n", o->small_gate, twell_ctx_errmsg(ctx));
        twell_plan_destroy(*plan);
        *plan = NULL;
        return 1;
    }
    /* the cuBLASLt gate-pack: its own rows (auto), never (off), every M (all) */
    if (strcmp(o->lt_gate, "auto") != 0)
        (void)tw_test_control(TW_TC_DENSE_SET_LT_GATE, *plan, !strcmp(o->lt_gate, "all") ? 1 : 2,
                              !strcmp(o->lt_gate, "all") ? SIZE_MAX : 1);
    if (strcmp(o->variant, "auto") != 0 && strcmp(o->variant, "small") != 0 &&
        tw_test_control(TW_TC_GP_SELECT, *plan, o->variant) != TWELL_OK) {
        fprintf(stderr, "twell bench: variant %s: %s\n", o->variant, twell_ctx_errmsg(ctx));
        twell_plan_destroy(*plan);
        *plan = NULL;
        return 1;
    }
    return 0;
}

tw_synth_ffn *bench_synth(bench_env *env, const twell_shape *s, size_t M, int gated, size_t di,
                          size_t ni) {
    const bench_opts *o = env->opts;
    tw_synth_params sp = tw_synth_params_default();
    sp.M = M, sp.K = s->K, sp.N = s->N, sp.dtype = s->dtype, sp.gated = gated;
    sp.nnz = o->nnz[ni], sp.dist = o->dist[di], sp.seed = o->seed;
    tw_synth_ffn *f = NULL;
    if (tw_synth_create(env->ctx->pool, &sp, &f) != TWELL_OK) {
        fprintf(stderr, "twell bench: synthetic data (M=%zu) failed\n", M);
        return NULL;
    }
    return f;
}

void bench_check_report(const bench_record *r) {
    if (!r->correct)
        fprintf(stderr, "twell bench: M=%zu %s nnz=%g: CHECK FAILED: %s\n", r->M, r->distribution,
                r->nnz_target, r->check_note);
}

/* ---- the dense baselines' elementwise kernels ---- */

twell_status bench_ew_load(twell_ctx *ctx, const char *tmpl, const tw_param *params, size_t nparams,
                           size_t n, const char *const *names, tw_CUmodule *mod,
                           tw_CUfunction *fns) {
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    twell_status st = tw_jit_cubin(ctx, tmpl, params, nparams, ctx->cuda->arch, &cubin);
    if (st != TWELL_OK)
        return st;
    tw_cu_scope sc;
    st = tw_cu_enter(ctx, &sc);
    if (st == TWELL_OK) {
        st = tw_cu_module_open(ctx, cubin.data, names, n, mod, fns);
        tw_cu_leave(ctx, &sc);
    }
    tw_cubin_free(&cubin);
    return st;
}

twell_status bench_ew_launch(twell_ctx *ctx, tw_CUfunction fn, void **args) {
    return bench_ew_launch_on(ctx, fn, args, NULL);
}

twell_status bench_ew_launch_on(twell_ctx *ctx, tw_CUfunction fn, void **args,
                                twell_stream stream) {
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = (unsigned)ctx->cuda->sm_count * 8u, cfg.grid[1] = cfg.grid[2] = 1;
    cfg.block[0] = 256, cfg.block[1] = cfg.block[2] = 1;
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st == TWELL_OK) {
        st = tw_cu_launch(ctx, fn, &cfg, stream, args);
        tw_cu_leave(ctx, &sc);
    }
    return st;
}

void bench_ew_unload(twell_ctx *ctx, tw_CUmodule mod) {
    tw_cu_scope sc;
    if (mod && tw_cu_enter(ctx, &sc) == TWELL_OK) {
        tw_cu_module_unload(mod);
        tw_cu_leave(ctx, &sc);
    }
}

typedef struct {
    bench_record *recs;
    size_t n, cap;
    char path[1024];
    int failed;
} bench_out;

static bench_out bench_results;

static int bench_write_json(const bench_out *o) {
    FILE *f = fopen(o->path, "w");
    if (!f)
        return -1;
    int rc = bench_records_write(f, o->recs, o->n);
    return fclose(f) == 0 ? rc : -1;
}

static void bench_emit(bench_env *env, const bench_record *r) {
    (void)env;
    bench_out *o = &bench_results;
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 16;
        bench_record *p = realloc(o->recs, cap * sizeof *p);
        if (!p) {
            fprintf(stderr, "twell bench: out of memory for records\n");
            o->failed = 1;
            return;
        }
        o->recs = p, o->cap = cap;
    }
    o->recs[o->n++] = *r;
    if (!r->correct)
        o->failed = 1;
    char op[48]; /* a non-gated block's records say so in the table too */
    snprintf(op, sizeof op, "%s%s", r->op, r->gated ? "" : "(ng)");
    printf("%-9s %-5s %6zu %5u %5u %3u %u %-7s %6.1f %7.1f %-5s %9.4f %9.4f %6.3f %6.3f %9.2e %s\n",
           op, r->dtype, r->M, r->K, r->N, r->T, r->C, r->distribution, r->nnz_target, r->nnz_mean,
           r->variant, r->ours_ms, r->baseline_ms, r->ratio, r->ratio > 0 ? 1.0 / r->ratio : -1.0,
           r->max_rel_err, r->correct ? "ok" : "FAILED");
    fflush(stdout);
    /* rewritten after every case so an interrupted run keeps what it measured */
    if (bench_write_json(o) != 0) {
        fprintf(stderr, "twell bench: cannot write %s: %s\n", o->path, strerror(errno));
        o->failed = 1;
    }
}

/* mkdir -p */
static int bench_mkdirs(const char *dir) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* ---- the command ---- */

static void bench_log(void *user, twell_log_level level, const char *msg) {
    (void)level;
    snprintf((char *)user, 512, "%s", msg);
}

int twell_cmd_bench(int argc, char **argv) {
    bench_opts o;
    int rc = bench_parse(argc, argv, &o);
    if (rc)
        return rc;
    const bench_op *op = NULL;
    for (size_t i = 0; i < sizeof bench_ops / sizeof bench_ops[0]; i++)
        if (!strcmp(o.op, bench_ops[i].name))
            op = &bench_ops[i];
    if (!op) {
        fprintf(stderr, "twell bench: unknown op '%s' (known:", o.op);
        for (size_t i = 0; i < sizeof bench_ops / sizeof bench_ops[0]; i++)
            fprintf(stderr, " %s", bench_ops[i].name);
        fprintf(stderr, ")\n");
        return 2;
    }

    static char why[512];
    twell_ctx_options co;
    twell_ctx_options_init(&co);
    co.backend = TWELL_BACKEND_CUDA;
    co.log = bench_log;
    co.log_user = why;
    co.log_level = TWELL_LOG_ERROR;
    co.validate_packed = o.validate_packed ? TWELL_SWITCH_ON : TWELL_SWITCH_OFF;
    bench_env env;
    memset(&env, 0, sizeof env);
    env.opts = &o;
    twell_status st = twell_ctx_create(&co, &env.ctx);
    if (st != TWELL_OK) {
        fprintf(stderr, "twell bench: no usable CUDA device (%s: %s)\n", twell_status_name(st),
                why);
        return 3;
    }
    twell_ctx *ctx = env.ctx;
    snprintf(env.gpu, sizeof env.gpu, "%s", twell_ctx_device_name(ctx));
    bench_commit(env.commit, sizeof env.commit);
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(env.date, sizeof env.date, "%Y-%m-%dT%H:%M:%SZ", &tmv);

    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H%M%S", &tmv);
    if (bench_mkdirs(o.out_dir) != 0) {
        fprintf(stderr, "twell bench: cannot create %s: %s\n", o.out_dir, strerror(errno));
        twell_ctx_destroy(ctx);
        return 1;
    }
    snprintf(bench_results.path, sizeof bench_results.path, "%s/%s-%s.json", o.out_dir, op->name,
             stamp);

    char err[512];
    env.cublas = bench_cublas_open(ctx, err, sizeof err);
    if (!env.cublas)
        fprintf(stderr, "twell bench: no cuBLAS baseline (%s); baseline columns stay empty\n", err);

    /* Flush buffer: well past the L2 so nothing of the inputs survives between runs. */
    env.flush_bytes = (size_t)512 << 20;
    if ((size_t)ctx->cuda->l2_bytes * 4 > env.flush_bytes)
        env.flush_bytes = (size_t)ctx->cuda->l2_bytes * 4;
    if (tw_cuda_malloc(ctx, env.flush_bytes, &env.flush) != TWELL_OK ||
        tw_cuda_event_create(ctx, &env.ev[0]) != TWELL_OK ||
        tw_cuda_event_create(ctx, &env.ev[1]) != TWELL_OK) {
        fprintf(stderr, "twell bench: %s\n", twell_ctx_errmsg(ctx));
        rc = 1;
    } else {
        printf("# twell bench %s on %s, commit %s, %s; L2 flush %zu MiB, median of %d after %d "
               "warm-up\n",
               op->name, env.gpu, env.commit, env.date, env.flush_bytes >> 20, o.reps, o.warmup);
        printf("%-9s %-5s %6s %5s %5s %3s %s %-7s %6s %7s %-5s %9s %9s %6s %6s %9s %s\n", "op",
               "dtype", "M", "K", "N", "T", "C", "dist", "nnz", "nnz_avg", "var", "ours_ms",
               op->baseline, "ratio", "o/b", "max_rel", "check");
        rc = op->run(&env, bench_emit);
        if (bench_results.failed)
            rc = 1;
        if (bench_results.n)
            printf("# %zu records in %s\n", bench_results.n, bench_results.path);
    }
    tw_cuda_event_destroy(ctx, env.ev[0]);
    tw_cuda_event_destroy(ctx, env.ev[1]);
    tw_cuda_free(ctx, env.flush);
    bench_cublas_close(ctx, env.cublas);
    free(bench_results.recs);
    memset(&bench_results, 0, sizeof bench_results);
    twell_ctx_destroy(ctx);
    return rc;
}
