/* cmd_jit.c — `twell render`, `twell compile` and `twell info`: the JIT pipeline by hand. */
#include "cli.h"
#include "cli_common.h"
#include "twellrt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define TW_MAX_PARAMS 32

typedef struct tw_args {
    const char *name;
    tw_param params[TW_MAX_PARAMS];
    size_t nparams;
    const char *arch;
    int repeat;
    int cold;
    int help;
} tw_args;

static void tw_usage_render(FILE *f) {
    fprintf(f,
            "usage: twell render <template> [--K n] [--N n] [--T n] [--C n] [--dtype bf16|fp16]\n"
            "                    [--param key=value ...]\n\n"
            "Prints the CUDA C that templates/<template>.cu.lua renders for the parameters.\n"
            "Values that parse as integers are passed as integers, others as strings.\n"
            "Templates are read from $TWELL_TEMPLATE_DIR, else the installed or source tree.\n");
}

static void tw_usage_compile(FILE *f) {
    fprintf(f,
            "usage: twell compile <template> [parameters as for render] [--arch sm_90a]\n"
            "                     [--repeat n] [--cold[=0|1]]\n\n"
            "Renders the template and gets its cubin from the kernel cache, compiling with NVRTC\n"
            "and publishing it on a miss. Prints the cache key, cubin size, time and hit/miss.\n"
            "Exits 1 when the compiled cubin could not be stored in the cache directory\n"
            "(read-only, full or unusable: a prewarm that stored nothing).\n"
            "  --arch a     target architecture (default sm_90a)\n"
            "  --repeat n   do it n times, each in a fresh context (so a hit reads the disk),\n"
            "               and print the median time\n"
            "  --cold       skip the lookup: always compile (cold-compile timing);\n"
            "               --cold=1 is the same, --cold=0 looks up as usual\n"
            "Times come from a monotonic clock. On a hit, `lookup + read` is one more read of\n"
            "the entry from the directory, timed by itself (as a fresh process reads it).\n");
}

static void tw_usage_info(FILE *f) {
    fprintf(f,
            "usage: twell info\n\n"
            "Prints the library version, the template directory, NVRTC's version (or why it\n"
            "is missing), the device a default context uses, and the cache directory and size.\n");
}

static int tw_set_param(tw_args *a, const char *key, const char *val) {
    if (a->nparams == TW_MAX_PARAMS) {
        fprintf(stderr, "twell: too many parameters (max %d)\n", TW_MAX_PARAMS);
        return 0;
    }
    for (size_t i = 0; i < a->nparams; i++)
        if (!strcmp(a->params[i].key, key)) {
            fprintf(stderr, "twell: parameter %s given twice\n", key);
            return 0;
        }
    /* The shape's sizes are positive integers; other values are template parameters, passed as
     * integers when they read as one (a template may accept a negative), else as strings. */
    uint32_t size;
    if (strlen(key) == 1 && strchr("KNTC", key[0]) && tw_cli_u32(val, 1, UINT32_MAX, &size) != 0) {
        fprintf(stderr, "twell: bad value '%s' for --%s (a positive integer)\n", val, key);
        return 0;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(val, &end, 0);
    if (val[0] && end && *end == '\0' && errno == ERANGE) {
        fprintf(stderr, "twell: value '%s' of %s is out of range\n", val, key);
        return 0;
    }
    tw_param *p = &a->params[a->nparams++];
    p->key = key;
    if (val[0] && end && *end == '\0') {
        p->ival = v;
        p->sval = NULL;
    } else {
        p->sval = val;
    }
    return 1;
}

/* Parses <template> and options; keys of --param point into argv (edited in place). Returns 0
 * and prints why on a usage error. */
static int tw_parse(int argc, char **argv, tw_args *a, int with_compile) {
    memset(a, 0, sizeof *a);
    a->arch = "sm_90a";
    a->repeat = 1;
    static const char *const shape_keys[] = {"K", "N", "T", "C", "dtype"};
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            a->help = 1;
            return 1;
        }
        if (strncmp(arg, "--", 2) != 0) {
            if (a->name) {
                fprintf(stderr, "twell: unexpected argument '%s'\n", arg);
                return 0;
            }
            a->name = arg;
            continue;
        }
        char *opt = arg + 2;
        char *val = strchr(opt, '=');
        if (val)
            *val++ = '\0';
        int known = !strcmp(opt, "param") ||
                    (with_compile && (!strcmp(opt, "arch") || !strcmp(opt, "repeat")));
        for (size_t k = 0; k < sizeof shape_keys / sizeof shape_keys[0]; k++)
            known |= !strcmp(opt, shape_keys[k]);
        if (with_compile && !strcmp(opt, "cold")) {
            /* A boolean flag: alone it means on; with a value it means that value, 0 or 1, as
             * `twell bench --gated 0|1` reads. It never takes the next word: that is the
             * template's name in `twell compile --cold gate_pack_simt`. */
            uint32_t on = 1;
            if (val && tw_cli_u32(val, 0, 1, &on) != 0) {
                fprintf(stderr, "twell: bad value '%s' for --cold (0 or 1)\n", val);
                return 0;
            }
            a->cold = (int)on;
            continue;
        }
        if (!known) {
            fprintf(stderr, "twell: unknown option --%s (see --help)\n", opt);
            return 0;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "twell: --%s needs a value\n", opt);
                return 0;
            }
            val = argv[++i];
        }
        if (!strcmp(opt, "arch")) {
            a->arch = val;
        } else if (!strcmp(opt, "repeat")) {
            if (tw_cli_int(val, 1, 1000, &a->repeat) != 0) {
                fprintf(stderr, "twell: --repeat must be in 1..1000\n");
                return 0;
            }
        } else if (!strcmp(opt, "param")) {
            char *eq = strchr(val, '=');
            if (!eq) {
                fprintf(stderr, "twell: --param wants key=value, got '%s'\n", val);
                return 0;
            }
            *eq = '\0';
            if (!tw_set_param(a, val, eq + 1))
                return 0;
        } else if (!tw_set_param(a, opt, val)) {
            return 0;
        }
    }
    if (!a->name) {
        fprintf(stderr, "twell: which template? (see --help)\n");
        return 0;
    }
    return 1;
}

/* A CPU context whose warnings (an unusable cache directory, say) reach stderr as cmd. */
static twell_ctx *tw_cpu_ctx(const char *cmd) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    o.log = tw_cli_log;
    o.log_user = (void *)cmd;
    o.log_level = TWELL_LOG_WARN;
    twell_ctx *ctx = NULL;
    if (twell_ctx_create(&o, &ctx) != TWELL_OK) {
        fprintf(stderr, "twell: cannot create a context\n");
        return NULL;
    }
    return ctx;
}

int twell_cmd_render(int argc, char **argv) {
    tw_args a;
    if (!tw_parse(argc, argv, &a, 0)) {
        tw_usage_render(stderr);
        return 2;
    }
    if (a.help) {
        tw_usage_render(stdout);
        return 0;
    }
    twell_ctx *ctx = tw_cpu_ctx("twell render");
    if (!ctx)
        return 1;
    char *src = NULL;
    size_t len = 0;
    twell_status st = tw_render(ctx, a.name, a.params, a.nparams, &src, &len);
    int rc = 0;
    if (st != TWELL_OK) {
        fprintf(stderr, "twell render: %s: %s\n", twell_status_name(st), twell_ctx_errmsg(ctx));
        rc = 1;
    } else if (fwrite(src, 1, len, stdout) != len || fflush(stdout) != 0) {
        fprintf(stderr, "twell render: write error\n");
        rc = 1;
    }
    free(src);
    twell_ctx_destroy(ctx);
    return rc;
}

static double tw_ms_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int tw_cmp_double(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

static double tw_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, tw_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The key spelled by 64 lowercase hex digits; 0, or -1 for anything else. */
static int tw_key_parse(const char *hex, tw_key *k) {
    static const char digits[] = "0123456789abcdef";
    if (strlen(hex) != 64)
        return -1;
    for (int i = 0; i < 32; i++) {
        const char *hi = strchr(digits, hex[2 * i]), *lo = strchr(digits, hex[2 * i + 1]);
        if (!hi || !lo || !*hi || !*lo)
            return -1;
        k->b[i] = (uint8_t)((hi - digits) << 4 | (lo - digits));
    }
    return 0;
}

/* Milliseconds of one lookup + read of the cubin under key_hex from dir, bypassing any memory
 * layer, as a fresh process's hit reads it; -1 when it cannot be measured (no directory, gone).
 * Measured by itself because subtracting a separately timed render from the whole hit is not a
 * measurement: the first render of a process is the slow one, so the difference goes negative. */
static double tw_disk_hit_ms(const char *dir, const char *key_hex) {
    tw_key k;
    tw_cache *c = NULL;
    if (!dir || tw_key_parse(key_hex, &k) != 0 ||
        tw_cache_open_ex(dir, 0, TW_CACHE_OPEN_NO_CREATE, NULL, NULL, &c) != TWELL_OK)
        return -1.0;
    tw_cache_set_memory_limit(c, 0);
    void *p = NULL;
    size_t n = 0;
    double t0 = tw_ms_now();
    twell_status st = tw_cache_get(c, TW_CACHE_CUBIN, &k, &p, &n);
    double ms = tw_ms_now() - t0;
    free(p);
    tw_cache_close(c);
    return st == TWELL_OK ? ms : -1.0;
}

int twell_cmd_compile(int argc, char **argv) {
    tw_args a;
    if (!tw_parse(argc, argv, &a, 1)) {
        tw_usage_compile(stderr);
        return 2;
    }
    if (a.help) {
        tw_usage_compile(stdout);
        return 0;
    }
    double *total = calloc((size_t)a.repeat, sizeof *total);
    double *render = calloc((size_t)a.repeat, sizeof *render);
    if (!total || !render) {
        free(total);
        free(render);
        fprintf(stderr, "twell compile: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (int r = 0; r < a.repeat && rc == 0; r++) {
        twell_ctx *ctx = tw_cpu_ctx("twell compile"); /* fresh: an empty memory layer */
        if (!ctx) {
            rc = 1;
            break;
        }
        /* Opened before the work, so its warning (if any) comes first; the stats say later
         * whether what was compiled reached the directory. */
        tw_cache *cache = NULL;
        tw_cache_stats before;
        memset(&before, 0, sizeof before);
        if (tw_ctx_cache(ctx, &cache) == TWELL_OK)
            tw_cache_get_stats(cache, &before);
        char *src = NULL;
        size_t len = 0;
        double t0 = tw_ms_now();
        twell_status st = tw_render(ctx, a.name, a.params, a.nparams, &src, &len);
        render[r] = tw_ms_now() - t0;
        free(src);
        tw_cubin c;
        if (st == TWELL_OK) {
            t0 = tw_ms_now();
            st = tw_jit_cubin_ex(ctx, a.name, a.params, a.nparams, a.arch,
                                 a.cold ? TW_JIT_SKIP_LOOKUP : 0, &c);
            total[r] = tw_ms_now() - t0;
        }
        if (st != TWELL_OK) {
            fprintf(stderr, "twell compile: %s: %s\n", twell_status_name(st),
                    twell_ctx_errmsg(ctx));
            rc = 1;
        } else {
            printf("%s %s key %s cubin %zu bytes %s %.3f ms", a.name, a.arch, c.key_hex, c.size,
                   c.cache_hit ? "hit" : "miss", total[r]);
            double lookup = c.cache_hit ? tw_disk_hit_ms(tw_cache_dir(cache), c.key_hex) : -1.0;
            if (lookup >= 0.0)
                printf(" (render %.3f ms, lookup + read %.3f ms)\n", render[r], lookup);
            else if (c.cache_hit)
                printf(" (render %.3f ms)\n", render[r]);
            else
                printf(" (render %.3f ms, NVRTC %.1f ms)\n", render[r], c.compile_ms);
            tw_cubin_free(&c);
            /* A prewarm that stored nothing must not look like one that did. */
            if (cache && tw_cli_check_stored("twell compile", cache, &before) != 0)
                rc = 1;
        }
        twell_ctx_destroy(ctx);
    }
    if (rc == 0 && a.repeat > 1) {
        double mr = tw_median(render, a.repeat);
        printf("median of %d: %.3f ms (render %.3f ms)\n", a.repeat, tw_median(total, a.repeat),
               mr);
    }
    free(total);
    free(render);
    return rc;
}

/* Entry files and bytes under dir (not recursive). */
static void tw_dir_usage(const char *dir, size_t *files, unsigned long long *bytes) {
    *files = 0;
    *bytes = 0;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char p[4096];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (de->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            (*files)++;
            *bytes += (unsigned long long)st.st_size;
        }
    }
    closedir(d);
}

static void tw_info_log(void *user, twell_log_level level, const char *msg) {
    (void)level;
    char *why = user;
    snprintf(why, 512, "%s", msg);
}

int twell_cmd_info(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            tw_usage_info(stdout);
            return 0;
        }
        fprintf(stderr, "twell info: unexpected argument '%s'\n", argv[i]);
        tw_usage_info(stderr);
        return 2;
    }
    printf("library:   twellrt %s (version number %d)\n", twell_version(), twell_version_number());

    const char *tdir = tw_template_dir(NULL);
    printf("templates: %s\n", tdir);
    char *names[128];
    size_t n = tw_template_names(tdir, names, 128);
    for (size_t i = 0; i < n && i < 128; i++) {
        printf("%s%s", i ? ", " : "           kernels: ", names[i]);
        free(names[i]);
    }
    printf(n ? "\n" : "           (no *.cu.lua templates there)\n");

    int major = 0, minor = 0;
    if (tw_nvrtc_version(NULL, &major, &minor) == TWELL_OK) {
        char archs[512];
        printf("nvrtc:     %d.%d (%s)\n", major, minor, tw_nvrtc_path());
        if (tw_nvrtc_supported_archs(NULL, archs, sizeof archs) == TWELL_OK)
            printf("           targets: %s\n", archs);
    } else {
        printf("nvrtc:     not found: %s\n", tw_nvrtc_why_missing());
    }
    /* cuBLASLt as the library's dense routes would load it (options from the environment,
     * searched beside the NVRTC found) */
    twell_ctx_options lo;
    twell_ctx_options_init(&lo);
    lo.backend = TWELL_BACKEND_CPU;
    lo.cpu_threads = 1;
    twell_ctx *lctx = NULL;
    if (twell_ctx_create(&lo, &lctx) == TWELL_OK) {
        char beside[512];
        snprintf(beside, sizeof beside, "%s", tw_nvrtc_path());
        char *slash = strrchr(beside, '/');
        if (slash)
            *slash = '\0';
        if (tw_lt_load(lctx, slash ? beside : NULL) == TWELL_OK)
            printf("cublaslt:  %s (the dense routes)\n", tw_lt_path());
        else
            printf("cublaslt:  not found (the dense routes are unavailable): %s\n",
                   twell_ctx_errmsg(lctx));
        twell_ctx_destroy(lctx);
    }

    char why[512] = "";
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.log = tw_info_log;
    o.log_user = why;
    o.log_level = TWELL_LOG_INFO;
    twell_ctx *ctx = NULL;
    twell_status st = twell_ctx_create(&o, &ctx);
    if (st != TWELL_OK) {
        printf("device:    none (%s: %s)\n", twell_status_name(st), why);
        return 1;
    }
    printf("device:    %s\n", twell_ctx_device_name(ctx));
    if (twell_ctx_backend(ctx) != TWELL_BACKEND_CUDA && why[0])
        printf("           (%s)\n", why);

    tw_cache *cache = NULL;
    if (tw_ctx_cache(ctx, &cache) == TWELL_OK && tw_cache_dir(cache)) {
        size_t files = 0;
        unsigned long long bytes = 0;
        tw_dir_usage(tw_cache_dir(cache), &files, &bytes);
        printf("cache:     %s (%zu files, %.2f MiB%s)\n", tw_cache_dir(cache), files,
               (double)bytes / (1024.0 * 1024.0), tw_cache_writable(cache) ? "" : ", read-only");
    } else {
        printf("cache:     memory only (no usable directory)\n");
    }
    twell_ctx_destroy(ctx);
    return 0;
}
