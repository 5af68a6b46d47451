/* test_nvrtc.c — every template × a sweep of shapes renders and compiles to cubin with NVRTC (no
 * GPU needed); NVRTC errors name template lines; cache miss then hit. labels: nvrtc */
#include "cache.h"
#include "internal.h"
#include "jit.h"
#include "nvrtc.h"
#include "tw_cpu.h"
#include "tw_gpu.h"
#include "tw_log.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define TW_SRC_TEMPLATES TWELL_TEST_SOURCE_DIR "/templates"
#define TW_FIXTURES TWELL_TEST_SOURCE_DIR "/tests/templates"

/* ---- the sweep: one row per template that needs more than the defaults ---------------------
 * A template not listed gets the full shape sweep (K, N, T, C, dtype) for sm_90a. A row may add
 * fixed parameters ("BM=64 THREADS=128", space separated key=value), restrict the sweep to a
 * smaller subset, and name more architectures (compiled with the small subset). A parameter set
 * the template rejects with unsupported(...) is skipped; each template must accept at least one. */
typedef enum tw_sweep_size { TW_SWEEP_FULL, TW_SWEEP_SMALL } tw_sweep_size;
typedef struct tw_sweep_row {
    const char *name;
    const char *extra;         /* extra parameters, or NULL */
    tw_sweep_size size;        /* on sm_90a */
    const char *more_archs[3]; /* compiled with the small subset; NULL-terminated */
} tw_sweep_row;

static const tw_sweep_row tw_sweep_rows[] = {
    {"gate_pack_simt", NULL, TW_SWEEP_FULL, {"sm_80", NULL}},
    {"gate_pack_simt", "BM=64 THREADS=512", TW_SWEEP_SMALL, {NULL}},
    {"gate_pack_simt", "BM=64 THREADS=64", TW_SWEEP_SMALL, {NULL}}, /* too many accumulators */
    /* the dense path's kernels: T and C matter only to MODE gated and dense_aux */
    {"gemm_sm90", NULL, TW_SWEEP_SMALL, {NULL}},
    {"gemm_sm90", "MODE=relu", TW_SWEEP_SMALL, {NULL}},
    /* ... and the variants dense_gemm_sm90.c renders: Wd read MN-major, the split-K GEMMs */
    {"gemm_sm90", "MODE=plain TB=1", TW_SWEEP_SMALL, {NULL}},
    {"gemm_sm90", "SPLIT=1 STAGES=4", TW_SWEEP_SMALL, {NULL}},
    {"gemm_sm90", "MODE=relu SPLIT=1 STAGES=4", TW_SWEEP_SMALL, {NULL}},
    {"gemm_sm90", "MODE=plain TB=1 SPLIT=1 STAGES=4", TW_SWEEP_SMALL, {NULL}},
    /* the training path's heavy-row block: y and dx split along their reduction */
    {"gemm_sm90", "MODE=mm TB=1 SPLIT=1 STAGES=4", TW_SWEEP_SMALL, {NULL}},
    /* the inference heavy-row block: the row count read on the device */
    {"gemm_sm90", "DM=1", TW_SWEEP_SMALL, {NULL}},
    {"gemm_sm90", "MODE=plain TB=1 SPLIT=1 STAGES=4 DM=1", TW_SWEEP_SMALL, {NULL}},
    {"dense_aux", NULL, TW_SWEEP_SMALL, {NULL}},
};

static const unsigned tw_full_K[] = {64, 512, 2048}, tw_full_N[] = {256, 5632},
                      tw_full_T[] = {128, 256}, tw_full_C[] = {2, 4, 8};
static const char *const tw_dtypes[] = {"bf16", "fp16"};

#define TW_MAX_JOB_PARAMS 12

typedef struct tw_job {
    char name[64];
    char arch[16];
    tw_param params[TW_MAX_JOB_PARAMS];
    size_t nparams;
    char extra_buf[128]; /* storage for the row's extra parameters */
    /* results */
    twell_status st;
    char *msg;
    size_t size;
    int elf;
    double ms;
} tw_job;

typedef struct tw_queue {
    tw_job *jobs;
    size_t n, next;
    pthread_mutex_t lock;
} tw_queue;

static size_t tw_add_jobs(tw_job *jobs, size_t n, const char *name, const char *extra,
                          tw_sweep_size size, const char *arch) {
    size_t made = 0;
    /* A covering design instead of the full 72-set product (which grew to ~550 NVRTC compiles
     * and timed out at 10 minutes on 2 cores): FULL takes all 12 (T, C, dtype) combinations and
     * cycles (K, N) so that every (K, N) pair appears twice; SMALL takes 4 sets at K = 512,
     * N = 5632 covering both T, C in {2, 8} and both dtypes. */
    for (size_t i = 0; i < 12; i++) {
        size_t t = i / 6, c = (i / 2) % 3, d = i % 2, k = i % 3, nn = (i / 3) % 2;
        if (size == TW_SWEEP_SMALL) {
            if (i >= 4)
                break;
            static const size_t st[4] = {0, 1, 0, 1}, sc[4] = {0, 2, 2, 0}, sd[4] = {0, 1, 1, 0};
            t = st[i], c = sc[i], d = sd[i], k = 1, nn = 1;
        }
        tw_job *j = &jobs[n + made++];
        memset(j, 0, sizeof *j);
        snprintf(j->name, sizeof j->name, "%s", name);
        snprintf(j->arch, sizeof j->arch, "%s", arch);
        tw_param p[] = {{"K", NULL, tw_full_K[k]},
                        {"N", NULL, tw_full_N[nn]},
                        {"T", NULL, tw_full_T[t]},
                        {"C", NULL, tw_full_C[c]},
                        {"dtype", tw_dtypes[d], 0}};
        memcpy(j->params, p, sizeof p);
        j->nparams = 5;
        if (extra) {
            snprintf(j->extra_buf, sizeof j->extra_buf, "%s", extra);
            char *save = NULL;
            for (char *kv = strtok_r(j->extra_buf, " ", &save); kv;
                 kv = strtok_r(NULL, " ", &save)) {
                char *eq = strchr(kv, '=');
                assert_non_null(eq);
                assert_true(j->nparams < TW_MAX_JOB_PARAMS);
                *eq = '\0';
                tw_param *q = &j->params[j->nparams++];
                q->key = kv;
                char *end;
                long long v = strtoll(eq + 1, &end, 10);
                if (*end == '\0') {
                    q->sval = NULL;
                    q->ival = v;
                } else {
                    q->sval = eq + 1;
                }
            }
        }
    }
    return made;
}

static double tw_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Worker: its own context (a context is used by one thread at a time). No cmocka asserts off the
 * main thread: results are recorded and checked after the join. */
static void *tw_worker(void *arg) {
    tw_queue *q = arg;
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    twell_ctx *ctx = NULL;
    if (twell_ctx_create(&o, &ctx) != TWELL_OK)
        return NULL;
    for (;;) {
        pthread_mutex_lock(&q->lock);
        size_t i = q->next < q->n ? q->next++ : q->n;
        pthread_mutex_unlock(&q->lock);
        if (i == q->n)
            break;
        tw_job *j = &q->jobs[i];
        tw_cubin c;
        double t0 = tw_ms();
        /* Skip the lookup: a second run of the test must compile again, not hit the cache. */
        j->st =
            tw_jit_cubin_ex(ctx, j->name, j->params, j->nparams, j->arch, TW_JIT_SKIP_LOOKUP, &c);
        j->ms = tw_ms() - t0;
        if (j->st == TWELL_OK) {
            j->size = c.size;
            j->elf = c.size >= 4 && memcmp(c.data,
                                           "\x7f"
                                           "ELF",
                                           4) == 0;
            tw_cubin_free(&c);
        } else {
            j->msg = tw_strdup(twell_ctx_errmsg(ctx));
        }
    }
    twell_ctx_destroy(ctx);
    return NULL;
}

static void test_nvrtc_sweep_all_templates(void **state) {
    (void)state;
    setenv("TWELL_TEMPLATE_DIR", TW_SRC_TEMPLATES, 1);
    char *names[64];
    size_t nnames = tw_template_names(TW_SRC_TEMPLATES, names, 64);
    assert_true(nnames <= 64);
    assert_true(nnames >= 1);

    /* Upper bound: every template unlisted (12 sets) plus every row at its largest. */
    const size_t nrows = sizeof tw_sweep_rows / sizeof tw_sweep_rows[0];
    size_t cap = nnames * 12 + nrows * (12 + 3 * 4);
    tw_job *jobs = calloc(cap, sizeof *jobs);
    assert_non_null(jobs);
    size_t n = 0;
    for (size_t t = 0; t < nnames; t++) {
        int listed = 0;
        for (size_t r = 0; r < nrows; r++) {
            const tw_sweep_row *row = &tw_sweep_rows[r];
            if (strcmp(row->name, names[t]) != 0)
                continue;
            listed = 1;
            n += tw_add_jobs(jobs, n, names[t], row->extra, row->size, "sm_90a");
            for (size_t a = 0; a < 3 && row->more_archs[a]; a++)
                n += tw_add_jobs(jobs, n, names[t], row->extra, TW_SWEEP_SMALL, row->more_archs[a]);
        }
        if (!listed)
            n += tw_add_jobs(jobs, n, names[t], NULL, TW_SWEEP_FULL, "sm_90a");
        assert_true(n <= cap);
    }

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nthreads = cores < 1 ? 1 : cores > 8 ? 8 : (size_t)cores;
    tw_queue q = {jobs, n, 0, PTHREAD_MUTEX_INITIALIZER};
    pthread_t th[8];
    double t0 = tw_ms();
    for (size_t i = 0; i < nthreads; i++)
        assert_int_equal(pthread_create(&th[i], NULL, tw_worker, &q), 0);
    for (size_t i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    double wall = tw_ms() - t0;

    size_t failures = 0;
    for (size_t t = 0; t < nnames; t++) {
        size_t ok = 0, unsupported = 0, total = 0;
        double ms = 0, worst = 0;
        for (size_t i = 0; i < n; i++) {
            tw_job *j = &jobs[i];
            if (strcmp(j->name, names[t]) != 0)
                continue;
            total++;
            if (j->st == TWELL_OK && j->elf && j->size > 0) {
                ok++;
                ms += j->ms;
                worst = j->ms > worst ? j->ms : worst;
            } else if (j->st == TWELL_ERR_UNSUPPORTED) {
                unsupported++;
            } else {
                failures++;
                char desc[256] = "";
                size_t used = 0;
                for (size_t p = 0; p < j->nparams && used < sizeof desc; p++) {
                    int w = j->params[p].sval
                                ? snprintf(desc + used, sizeof desc - used, " %s=%s",
                                           j->params[p].key, j->params[p].sval)
                                : snprintf(desc + used, sizeof desc - used, " %s=%lld",
                                           j->params[p].key, j->params[p].ival);
                    used += w > 0 ? (size_t)w : 0;
                }
                print_error("%s %s%s: %s (elf %d, %zu bytes): %s\n", j->name, j->arch, desc,
                            twell_status_name(j->st), j->elf, j->size,
                            j->msg ? j->msg : "(no message)");
            }
        }
        fprintf(stderr,
                "[ sweep    ] %-16s %3zu compiled, %2zu unsupported, of %3zu; mean %.0f ms, "
                "worst %.0f ms per compile\n",
                names[t], ok, unsupported, total, ok ? ms / (double)ok : 0.0, worst);
        if (ok == 0)
            print_error("%s: no parameter set compiled\n", names[t]);
        assert_true(ok > 0);
    }
    fprintf(stderr, "[ sweep    ] %zu compiles on %zu threads in %.1f s\n", n, nthreads,
            wall / 1e3);
    assert_int_equal(failures, 0);
    for (size_t i = 0; i < n; i++)
        free(jobs[i].msg);
    free(jobs);
    for (size_t t = 0; t < nnames; t++)
        free(names[t]);
}

/* A CPU context on cache_dir (NULL: the default); fails the test when it cannot be made. */
static twell_ctx *tw_ctx_in(const char *cache_dir) {
    twell_ctx *ctx = tw_test_cpu_ctx_at(cache_dir, NULL);
    assert_non_null(ctx);
    return ctx;
}

static void tw_assert_contains(const char *hay, const char *needle) {
    if (!hay || !strstr(hay, needle)) {
        print_error("expected to find \"%s\" in:\n%s\n", needle, hay ? hay : "(null)");
        fail();
    }
}

static void test_nvrtc_error_names_template_line(void **state) {
    (void)state;
    setenv("TWELL_TEMPLATE_DIR", TW_FIXTURES, 1);
    twell_ctx *ctx = tw_ctx_in(NULL);
    tw_param p = {"T", NULL, 64};
    tw_cubin c;
    memset(&c, 0xab, sizeof c);
    twell_status st = tw_jit_cubin(ctx, "broken_cuda", &p, 1, "sm_90a", &c);
    assert_int_equal(st, TWELL_ERR_NVRTC);
    assert_null(c.data);
    assert_int_equal(c.size, 0);
    const char *msg = twell_ctx_errmsg(ctx);
    tw_assert_contains(msg, "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION (6) at "
                            "templates/broken_cuda.cu.lua:7: ");
    tw_assert_contains(msg, "undefined_identifier_on_line_7");
    /* The full log follows, in NVRTC's own format. */
    tw_assert_contains(msg, "\ntemplates/broken_cuda.cu.lua(7): error");
    /* The same context works afterwards (another fixture of its template directory, which it
     * read from the environment when it was created). */
    setenv("TWELL_TEMPLATE_DIR", TW_SRC_TEMPLATES, 1);
    tw_param ok[] = {{"K", NULL, 64}, {"N", NULL, 256}};
    assert_int_equal(tw_jit_cubin(ctx, "lines", ok, 2, "sm_80", &c), TWELL_OK);
    assert_string_equal(twell_ctx_errmsg(ctx), "");
    tw_cubin_free(&c);
    assert_null(c.data);
    twell_ctx_destroy(ctx);
}

static void tw_rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[4096];
        int n = snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (n > 0 && (size_t)n < sizeof p)
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static char *tw_run(const char *cmd, int *exit_status) {
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char *buf = calloc(1, 65536);
    assert_non_null(buf);
    size_t len = fread(buf, 1, 65535, f);
    buf[len] = '\0';
    *exit_status = pclose(f);
    return buf;
}

static void test_nvrtc_cache_miss_then_hit(void **state) {
    (void)state;
    setenv("TWELL_TEMPLATE_DIR", TW_SRC_TEMPLATES, 1);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/test-cache/nvrtc-miss-hit-XXXXXX", TWELL_TEST_BINARY_DIR);
    mkdir(TWELL_TEST_BINARY_DIR "/test-cache", 0700);
    assert_non_null(mkdtemp(dir));
    tw_param p[] = {{"K", NULL, 512},
                    {"N", NULL, 5632},
                    {"T", NULL, 256},
                    {"C", NULL, 8},
                    {"dtype", "bf16", 0}};

    twell_ctx *a = tw_ctx_in(dir);
    tw_cubin c1, c2, c3, c4;
    assert_int_equal(tw_jit_cubin(a, "gate_pack_simt", p, 5, "sm_90a", &c1), TWELL_OK);
    assert_int_equal(c1.cache_hit, 0);
    assert_true(c1.compile_ms > 0.0);
    assert_int_equal(strlen(c1.key_hex), 64);
    assert_int_equal(tw_jit_cubin(a, "gate_pack_simt", p, 5, "sm_90a", &c2), TWELL_OK);
    assert_int_equal(c2.cache_hit, 1);
    assert_true(c2.compile_ms == 0.0);
    twell_ctx_destroy(a);

    /* A second context (own memory layer) finds it on disk: same key, same bytes. */
    twell_ctx *b = tw_ctx_in(dir);
    assert_int_equal(tw_jit_cubin(b, "gate_pack_simt", p, 5, "sm_90a", &c3), TWELL_OK);
    assert_int_equal(c3.cache_hit, 1);
    assert_string_equal(c3.key_hex, c1.key_hex);
    assert_int_equal(c3.size, c1.size);
    assert_memory_equal(c3.data, c1.data, c1.size);
    /* Another architecture or dtype is another key. */
    assert_int_equal(tw_jit_cubin(b, "gate_pack_simt", p, 5, "sm_80", &c4), TWELL_OK);
    assert_int_equal(c4.cache_hit, 0);
    assert_string_not_equal(c4.key_hex, c1.key_hex);
    tw_cubin_free(&c4);
    p[4].sval = "fp16";
    assert_int_equal(tw_jit_cubin(b, "gate_pack_simt", p, 5, "sm_90a", &c4), TWELL_OK);
    assert_string_not_equal(c4.key_hex, c1.key_hex);
    tw_cubin_free(&c4);
    /* Bad architecture strings are refused before any work. */
    assert_int_equal(tw_jit_cubin(b, "gate_pack_simt", p, 5, "compute_90", &c4),
                     TWELL_ERR_INVALID_ARG);
    tw_assert_contains(twell_ctx_errmsg(b), "compute_90");
    assert_int_equal(tw_jit_cubin(b, "gate_pack_simt", p, 5, "sm_9", &c4), TWELL_ERR_INVALID_ARG);
    twell_ctx_destroy(b);

    /* The command line: twice gives a miss, then a hit, with the same key. */
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "TWELL_CACHE_DIR='%s' '%s' compile gate_pack_simt --K 64 --N 256 --T 128 --C 2 "
             "--dtype bf16 --arch sm_90a",
             dir, TWELL_TOOL_PATH);
    int s1, s2;
    char *o1 = tw_run(cmd, &s1), *o2 = tw_run(cmd, &s2);
    assert_int_equal(s1, 0);
    assert_int_equal(s2, 0);
    tw_assert_contains(o1, " miss ");
    tw_assert_contains(o2, " hit ");
    tw_assert_contains(o1, "gate_pack_simt sm_90a key ");
    assert_memory_equal(strstr(o1, " key "), strstr(o2, " key "), 5 + 64);
    free(o1);
    free(o2);

    tw_cubin_free(&c1);
    tw_cubin_free(&c2);
    tw_cubin_free(&c3);
    tw_rm_dir(dir);
}

/* tw_jit_cubin_detached compiles on a worker context with the parent's options: its template
 * directory (not the environment's), its cache (the parent then hits), its NVRTC. */
static void test_nvrtc_detached_inherits_options(void **state) {
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/test-cache/nvrtc-detached-XXXXXX", TWELL_TEST_BINARY_DIR);
    mkdir(TWELL_TEST_BINARY_DIR "/test-cache", 0700);
    assert_non_null(mkdtemp(dir));
    setenv("TWELL_TEMPLATE_DIR", "/nonexistent/templates", 1);
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    o.cache_dir = dir;
    o.template_dir = TW_SRC_TEMPLATES;
    twell_ctx *parent = NULL;
    assert_int_equal(twell_ctx_create(&o, &parent), TWELL_OK);
    twell_ctx *env_only = tw_ctx_in(dir); /* the environment's template directory */
    setenv("TWELL_TEMPLATE_DIR", TW_SRC_TEMPLATES, 1);
    tw_param p[] = {{"K", NULL, 256},
                    {"N", NULL, 1024},
                    {"T", NULL, 128},
                    {"C", NULL, 4},
                    {"dtype", "fp16", 0}};
    tw_cubin c, d;
    char err[512] = "";
    assert_int_equal(
        tw_jit_cubin_detached(env_only, "gate_pack_simt", p, 5, "sm_80", &c, err, sizeof err),
        TWELL_ERR_NOT_FOUND);
    tw_assert_contains(err, "gate_pack_simt");
    assert_int_equal(
        tw_jit_cubin_detached(parent, "gate_pack_simt", p, 5, "sm_80", &c, err, sizeof err),
        TWELL_OK);
    assert_int_equal(c.cache_hit, 0);
    assert_int_equal(tw_jit_cubin(parent, "gate_pack_simt", p, 5, "sm_80", &d), TWELL_OK);
    assert_int_equal(d.cache_hit, 1);
    assert_string_equal(d.key_hex, c.key_hex);
    tw_cubin_free(&c);
    tw_cubin_free(&d);
    twell_ctx_destroy(env_only);
    twell_ctx_destroy(parent);
    tw_rm_dir(dir);
}

static void test_nvrtc_missing_library(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/test-cache/nvrtc-missing-XXXXXX", TWELL_TEST_BINARY_DIR);
    assert_non_null(mkdtemp(dir));
    /* Another process, told to load NVRTC from a path that does not exist, on an empty cache. */
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "TWELL_CACHE_DIR='%s' TWELL_NVRTC_LIBRARY=/nonexistent/libnvrtc.so '%s' compile "
             "gate_pack_simt --K 64 --N 256 --T 128 --C 2 --dtype bf16 2>&1; echo \"exit=$?\"",
             dir, TWELL_TOOL_PATH);
    int st;
    char *out = tw_run(cmd, &st);
    tw_assert_contains(out, "TWELL_ERR_NOT_FOUND");
    tw_assert_contains(out, "NVRTC not found");
    tw_assert_contains(out, "/nonexistent/libnvrtc.so");
    tw_assert_contains(out, "is not in the cache");
    tw_assert_contains(out, "twell tune");
    tw_assert_contains(out, "exit=1");
    free(out);
    snprintf(cmd, sizeof cmd, "TWELL_NVRTC_LIBRARY=/nonexistent/libnvrtc.so '%s' info 2>&1",
             TWELL_TOOL_PATH);
    out = tw_run(cmd, &st);
    assert_int_equal(st, 0);
    tw_assert_contains(out, "nvrtc:     not found: /nonexistent/libnvrtc.so");
    free(out);
    /* cuBLASLt likewise: where the dense routes load it from, or why they are unavailable */
    snprintf(cmd, sizeof cmd, "'%s' info 2>&1", TWELL_TOOL_PATH);
    out = tw_run(cmd, &st);
    assert_int_equal(st, 0);
    tw_assert_contains(out, "cublaslt:  ");
    tw_assert_contains(out, "libcublasLt");
    free(out);
    snprintf(cmd, sizeof cmd, "TWELL_CUBLASLT_LIBRARY=/nonexistent/libcublasLt.so '%s' info 2>&1",
             TWELL_TOOL_PATH);
    out = tw_run(cmd, &st);
    assert_int_equal(st, 0);
    tw_assert_contains(out, "cublaslt:  not found (the dense routes are unavailable)");
    tw_assert_contains(out, "/nonexistent/libcublasLt.so");
    free(out);
    tw_rm_dir(dir);
}

/* A cache prewarmed where NVRTC exists serves a process that cannot load NVRTC: same key, a hit,
 * no compile; a kernel that was never compiled still fails with a message saying what to do. */
static void test_nvrtc_prewarmed_cache_without_nvrtc(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/test-cache/nvrtc-prewarm-XXXXXX", TWELL_TEST_BINARY_DIR);
    assert_non_null(mkdtemp(dir));
    static const char args[] = "gate_pack_simt --K 64 --N 256 --T 128 --C 4 --dtype fp16 "
                               "--arch sm_90a";
    char cmd[4096];
    int s1, s2, s3;
    snprintf(cmd, sizeof cmd, "TWELL_CACHE_DIR='%s' '%s' compile %s 2>&1", dir, TWELL_TOOL_PATH,
             args);
    char *warm = tw_run(cmd, &s1);
    assert_int_equal(s1, 0);
    tw_assert_contains(warm, " miss ");
    snprintf(cmd, sizeof cmd,
             "TWELL_CACHE_DIR='%s' TWELL_NVRTC_LIBRARY=/nonexistent/libnvrtc.so '%s' compile %s "
             "2>&1",
             dir, TWELL_TOOL_PATH, args);
    char *hit = tw_run(cmd, &s2);
    if (s2 != 0)
        fail_msg("no hit without NVRTC:\n%s", hit);
    tw_assert_contains(hit, " hit ");
    assert_non_null(strstr(warm, " key "));
    assert_non_null(strstr(hit, " key "));
    assert_memory_equal(strstr(warm, " key "), strstr(hit, " key "), 5 + 64);
    /* the same kernel for another architecture was never compiled */
    snprintf(cmd, sizeof cmd,
             "TWELL_CACHE_DIR='%s' TWELL_NVRTC_LIBRARY=/nonexistent/libnvrtc.so '%s' compile "
             "gate_pack_simt --K 64 --N 256 --T 128 --C 4 --dtype fp16 --arch sm_80 2>&1; "
             "echo \"exit=$?\"",
             dir, TWELL_TOOL_PATH);
    char *miss = tw_run(cmd, &s3);
    tw_assert_contains(miss, "TWELL_ERR_NOT_FOUND");
    tw_assert_contains(miss, "looked under 1 recorded NVRTC version");
    tw_assert_contains(miss, "exit=1");
    free(warm);
    free(hit);
    free(miss);
    tw_rm_dir(dir);
}

/* A CPU context whose options name nvrtc (NULL: leave it to the environment), logging into log. */
static twell_ctx *tw_nvrtc_ctx(const char *nvrtc, tw_logbook *log) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    o.nvrtc_library = nvrtc;
    o.log = tw_test_log;
    o.log_user = log;
    twell_ctx *ctx = NULL;
    return twell_ctx_create(&o, &ctx) == TWELL_OK ? ctx : NULL;
}

/* The child of test_nvrtc_library_option: a fresh process (NVRTC is loaded once per process), with
 * TWELL_NVRTC_LIBRARY naming a library that does not exist. real: the library the parent loaded.
 * Prints what it saw; exit status 0 when every expectation held. */
static int tw_nvrtc_option_child(const char *real) {
    int bad = 0;
    tw_logbook la, lb, lc;
    memset(&la, 0, sizeof la), memset(&lb, 0, sizeof lb), memset(&lc, 0, sizeof lc);
    setenv("TWELL_NVRTC_LIBRARY", "/nonexistent/env/libnvrtc.so", 1);
    twell_ctx *a = tw_nvrtc_ctx("/nonexistent/option/libnvrtc.so", &la);
    twell_ctx *b = tw_nvrtc_ctx(NULL, &lb);
    unsetenv("TWELL_NVRTC_LIBRARY"); /* read at creation: b keeps the environment's choice */
    twell_ctx *c = tw_nvrtc_ctx(real, &lc);
    if (!a || !b || !c)
        return printf("child: no context\n"), 1;
    /* the option wins over the environment, and only it is tried */
    twell_status st = tw_nvrtc_load(a);
    printf("child: option /nonexistent/option: %s: %s\n", twell_status_name(st),
           twell_ctx_errmsg(a));
    bad |= st != TWELL_ERR_NOT_FOUND || !strstr(twell_ctx_errmsg(a), "/nonexistent/option/") ||
           strstr(twell_ctx_errmsg(a), "/nonexistent/env/") != NULL;
    /* no option: the environment's library as read when the context was created */
    st = tw_nvrtc_load(b);
    printf("child: environment /nonexistent/env: %s: %s\n", twell_status_name(st),
           twell_ctx_errmsg(b));
    bad |= st != TWELL_ERR_NOT_FOUND || !strstr(twell_ctx_errmsg(b), "/nonexistent/env/");
    /* a context naming a real library loads it (a failed request does not block another) */
    st = tw_nvrtc_load(c);
    printf("child: option %s: %s, loaded %s\n", real, twell_status_name(st), tw_nvrtc_path());
    bad |= st != TWELL_OK || strcmp(tw_nvrtc_path(), real) != 0 || lc.warns != 0;
    /* loaded once per process: b now gets it, with one warning that its choice is not used */
    st = tw_nvrtc_load(b);
    twell_status st2 = tw_nvrtc_load(b);
    printf("child: environment context again: %s, %d warning(s): %s\n", twell_status_name(st),
           lb.warns, lb.last);
    bad |= st != TWELL_OK || st2 != TWELL_OK || lb.warns != 1 ||
           !strstr(lb.last, "loaded once per process");
    twell_ctx_destroy(a), twell_ctx_destroy(b), twell_ctx_destroy(c);
    return bad;
}

/* options.nvrtc_library: wins over TWELL_NVRTC_LIBRARY, which a context reads when created;
 * NVRTC is loaded once per process (run in a child process of this executable). */
static void test_nvrtc_library_option(void **state) {
    (void)state;
    char self[1024], cmd[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    snprintf(cmd, sizeof cmd, "'%s' option-child '%s' 2>&1", self, tw_nvrtc_path());
    int st;
    char *out = tw_run(cmd, &st);
    printf("%s", out);
    assert_int_equal(st, 0);
    tw_assert_contains(out, "child: environment context again: TWELL_OK, 1 warning(s)");
    free(out);
}

/* `twell compile` as a prewarm: a cubin it compiled but could not store (no usable directory, a
 * full one, a read-only one) is an error with the reason on stderr, never a quiet "miss"; a hit
 * from a read-only prewarmed cache is fine. */
static void test_nvrtc_compile_unstored_fails(void **state) {
    (void)state;
    char dir[512], file[600], cmd[4096];
    snprintf(dir, sizeof dir, "%s/test-cache/nvrtc-unstored-XXXXXX", TWELL_TEST_BINARY_DIR);
    assert_non_null(mkdtemp(dir));
    static const char args[] = "gate_pack_simt --K 64 --N 256 --T 128 --C 2 --dtype bf16 "
                               "--arch sm_80";
    int st;
    /* No usable directory: a path below a regular file can never be created, even by root. */
    snprintf(file, sizeof file, "%s/plainfile", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "TWELL_CACHE_DIR='%s/sub' '%s' compile %s 2>&1; echo \"exit=$?\"",
             file, TWELL_TOOL_PATH, args);
    char *out = tw_run(cmd, &st);
    tw_assert_contains(out, " miss ");
    tw_assert_contains(out, "twell compile: cache: cannot create cache directory"); /* the log */
    tw_assert_contains(out, "NOT stored: no usable cache directory");
    tw_assert_contains(out, "exit=1");
    free(out);
    /* A full directory: writes past 1 KiB fail with EFBIG (SIGXFSZ ignored), as ENOSPC would. */
    char full[600];
    snprintf(full, sizeof full, "%s/full", dir);
    snprintf(cmd, sizeof cmd,
             "trap '' XFSZ; ulimit -f 2 && TWELL_CACHE_DIR='%s' '%s' compile %s 2>&1; "
             "echo \"exit=$?\"",
             full, TWELL_TOOL_PATH, args);
    out = tw_run(cmd, &st);
    tw_assert_contains(out, " miss ");
    tw_assert_contains(out, strerror(EFBIG));
    tw_assert_contains(out, "NOT stored: the cache directory");
    tw_assert_contains(out, "exit=1");
    free(out);
    /* Read-only: a miss cannot be stored (exit 1), a hit from the prewarmed entry is fine (0).
     * Only where mode 0500 binds: root writes anyway (the cache's own test fakes that case). */
    char ro[600];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    snprintf(cmd, sizeof cmd, "TWELL_CACHE_DIR='%s' '%s' compile %s 2>&1; echo \"exit=$?\"", ro,
             TWELL_TOOL_PATH, args);
    out = tw_run(cmd, &st);
    tw_assert_contains(out, "exit=0");
    free(out);
    assert_int_equal(chmod(ro, 0500), 0);
    if (access(ro, W_OK) == 0) {
        printf("# running as root: `twell compile` into a read-only directory not checked\n");
    } else {
        out = tw_run(cmd, &st);
        tw_assert_contains(out, " hit ");
        tw_assert_contains(out, "read-only");
        tw_assert_contains(out, "exit=0");
        free(out);
        snprintf(cmd, sizeof cmd,
                 "TWELL_CACHE_DIR='%s' '%s' compile %s --cold 2>&1; echo \"exit=$?\"", ro,
                 TWELL_TOOL_PATH, args);
        out = tw_run(cmd, &st);
        tw_assert_contains(out, "NOT stored");
        tw_assert_contains(out, "exit=1");
        free(out);
    }
    assert_int_equal(chmod(ro, 0700), 0);
    tw_rm_dir(ro);
    tw_rm_dir(full);
    tw_rm_dir(dir);
}

static void test_nvrtc_versions_and_archs(void **state) {
    (void)state;
    int major = 0, minor = -1;
    assert_int_equal(tw_nvrtc_version(NULL, &major, &minor), TWELL_OK);
    assert_true(major >= 11);
    assert_true(minor >= 0);
    char archs[512];
    assert_int_equal(tw_nvrtc_supported_archs(NULL, archs, sizeof archs), TWELL_OK);
    tw_assert_contains(archs, "sm_90");
    tw_assert_contains(archs, "sm_80");
    char a[16];
    tw_nvrtc_arch_for(9, 0, a, sizeof a);
    assert_string_equal(a, "sm_90a");
    tw_nvrtc_arch_for(8, 6, a, sizeof a);
    assert_string_equal(a, "sm_86");
    tw_nvrtc_arch_for(12, 0, a, sizeof a);
    assert_string_equal(a, "sm_120");
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "option-child"))
        return tw_nvrtc_option_child(argv[2]);
    if (tw_nvrtc_load(NULL) != TWELL_OK) {
        char what[1024];
        snprintf(what, sizeof what, "NVRTC cannot be loaded: %s", tw_nvrtc_why_missing());
        tw_gpu_unavailable("test_nvrtc", what); /* a GPU machine must have NVRTC too */
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvrtc_versions_and_archs),
        cmocka_unit_test(test_nvrtc_error_names_template_line),
        cmocka_unit_test(test_nvrtc_cache_miss_then_hit),
        cmocka_unit_test(test_nvrtc_missing_library),
        cmocka_unit_test(test_nvrtc_library_option),
        cmocka_unit_test(test_nvrtc_detached_inherits_options),
        cmocka_unit_test(test_nvrtc_prewarmed_cache_without_nvrtc),
        cmocka_unit_test(test_nvrtc_compile_unstored_fails),
        cmocka_unit_test(test_nvrtc_sweep_all_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
