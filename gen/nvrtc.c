/*
 * nvrtc.c — NVRTC loaded at run time (dlopen): the only file that calls NVRTC. The few types and
 * prototypes we use are declared here, so the library builds without the CUDA toolkit.
 */
#include "nvrtc.h"

#include "env.h"
#include "internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* From NVRTC's documented C API (stable since CUDA 7). */
typedef int nvrtcResult; /* NVRTC_SUCCESS = 0 */
typedef struct _nvrtcProgram *nvrtcProgram;

typedef const char *(*tw_nvrtcGetErrorString_fn)(nvrtcResult);
typedef nvrtcResult (*tw_nvrtcVersion_fn)(int *, int *);
typedef nvrtcResult (*tw_nvrtcGetNumSupportedArchs_fn)(int *);
typedef nvrtcResult (*tw_nvrtcGetSupportedArchs_fn)(int *);
typedef nvrtcResult (*tw_nvrtcCreateProgram_fn)(nvrtcProgram *, const char *, const char *, int,
                                                const char *const *, const char *const *);
typedef nvrtcResult (*tw_nvrtcDestroyProgram_fn)(nvrtcProgram *);
typedef nvrtcResult (*tw_nvrtcCompileProgram_fn)(nvrtcProgram, int, const char *const *);
typedef nvrtcResult (*tw_nvrtcGetSize_fn)(nvrtcProgram, size_t *);
typedef nvrtcResult (*tw_nvrtcGetBytes_fn)(nvrtcProgram, char *);

/* Loaded once per process (under tw_nv_mutex); read-only once lib is set, so threads share it
 * without locks. A failed load is remembered for its request (the library asked for, "" for the
 * search list) and tried again only for another request. */
static struct {
    void *lib;
    twell_status status;
    int tried;
    char request[512]; /* what the last load attempt was asked for ("": the search list) */
    char path[512];
    char why[2048];
    int major, minor;
    tw_nvrtcGetErrorString_fn GetErrorString;
    tw_nvrtcVersion_fn Version;
    tw_nvrtcGetNumSupportedArchs_fn GetNumSupportedArchs; /* may be NULL (older NVRTC) */
    tw_nvrtcGetSupportedArchs_fn GetSupportedArchs;       /* may be NULL */
    tw_nvrtcCreateProgram_fn CreateProgram;
    tw_nvrtcDestroyProgram_fn DestroyProgram;
    tw_nvrtcCompileProgram_fn CompileProgram;
    tw_nvrtcGetSize_fn GetCUBINSize;
    tw_nvrtcGetBytes_fn GetCUBIN;
    tw_nvrtcGetSize_fn GetProgramLogSize;
    tw_nvrtcGetBytes_fn GetProgramLog;
} tw_nv;

static pthread_mutex_t tw_nv_mutex = PTHREAD_MUTEX_INITIALIZER;

/* Names of the NVRTC status codes we may report (nvrtcGetErrorString gives the same text, but
 * the code number alone is what users search for). */
static const char *tw_nvrtc_result_name(nvrtcResult r) {
    static const char *const names[] = {"NVRTC_SUCCESS",
                                        "NVRTC_ERROR_OUT_OF_MEMORY",
                                        "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
                                        "NVRTC_ERROR_INVALID_INPUT",
                                        "NVRTC_ERROR_INVALID_PROGRAM",
                                        "NVRTC_ERROR_INVALID_OPTION",
                                        "NVRTC_ERROR_COMPILATION",
                                        "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
                                        "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
                                        "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
                                        "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
                                        "NVRTC_ERROR_INTERNAL_ERROR"};
    if (r >= 0 && (size_t)r < sizeof names / sizeof names[0])
        return names[r];
    return "NVRTC_ERROR_UNKNOWN";
}

static void tw_nv_why_append(const char *what, const char *err) {
    size_t n = strlen(tw_nv.why);
    if (n + 1 < sizeof tw_nv.why)
        snprintf(tw_nv.why + n, sizeof tw_nv.why - n, "%s%s (%s)", n ? "; " : "", what,
                 err ? err : "?");
}

static int tw_nv_try(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        tw_nv_why_append(path, dlerror());
        return 0;
    }
    /* dlsym returns void *; POSIX guarantees the round trip to a function pointer. */
#define TW_SYM(field, name, required)                                                              \
    do {                                                                                           \
        void *s_ = dlsym(h, name);                                                                 \
        memcpy(&tw_nv.field, &s_, sizeof s_);                                                      \
        if (!s_ && (required)) {                                                                   \
            tw_nv_why_append(path, "missing symbol " name);                                        \
            dlclose(h);                                                                            \
            return 0;                                                                              \
        }                                                                                          \
    } while (0)
    TW_SYM(GetErrorString, "nvrtcGetErrorString", 1);
    TW_SYM(Version, "nvrtcVersion", 1);
    TW_SYM(GetNumSupportedArchs, "nvrtcGetNumSupportedArchs", 0);
    TW_SYM(GetSupportedArchs, "nvrtcGetSupportedArchs", 0);
    TW_SYM(CreateProgram, "nvrtcCreateProgram", 1);
    TW_SYM(DestroyProgram, "nvrtcDestroyProgram", 1);
    TW_SYM(CompileProgram, "nvrtcCompileProgram", 1);
    TW_SYM(GetCUBINSize, "nvrtcGetCUBINSize", 1);
    TW_SYM(GetCUBIN, "nvrtcGetCUBIN", 1);
    TW_SYM(GetProgramLogSize, "nvrtcGetProgramLogSize", 1);
    TW_SYM(GetProgramLog, "nvrtcGetProgramLog", 1);
#undef TW_SYM
    if (tw_nv.Version(&tw_nv.major, &tw_nv.minor) != 0) {
        tw_nv_why_append(path, "nvrtcVersion failed");
        dlclose(h);
        return 0;
    }
    tw_nv.lib = h;
    snprintf(tw_nv.path, sizeof tw_nv.path, "%s", path);
    return 1;
}

/* Loads NVRTC for `want` (a library path or name; NULL: the search list). tw_nv_mutex held. */
static void tw_nv_load_locked(const char *want) {
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    const size_t nnames = sizeof names / sizeof names[0];
    if (tw_nv.lib || (tw_nv.tried && !strcmp(tw_nv.request, want ? want : "")))
        return; /* loaded, or this request failed already */
    tw_nv.tried = 1;
    tw_nv.status = TWELL_ERR_NOT_FOUND;
    tw_nv.why[0] = '\0';
    snprintf(tw_nv.request, sizeof tw_nv.request, "%s", want ? want : "");
    if (want) {
        if (tw_nv_try(want))
            tw_nv.status = TWELL_OK;
        return;
    }
    for (size_t i = 0; i < nnames; i++)
        if (tw_nv_try(names[i])) {
            tw_nv.status = TWELL_OK;
            return;
        }
    const char *dirs[] = {tw_env_cuda_home(), "/usr/local/cuda"};
    for (size_t d = 0; d < 2; d++) {
        if (!dirs[d])
            continue;
        for (size_t i = 0; i < nnames; i++) {
            char path[512];
            snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], names[i]);
            if (tw_nv_try(path)) {
                tw_nv.status = TWELL_OK;
                return;
            }
        }
    }
}

twell_status tw_nvrtc_load(twell_ctx *ctx) {
    /* A context resolved its choice (option, else environment) when created; without one, the
     * environment is read now. */
    const char *want = ctx ? ctx->nvrtc_library : tw_env_nvrtc_library();
    pthread_mutex_lock(&tw_nv_mutex);
    tw_nv_load_locked(want);
    twell_status st = tw_nv.status;
    int other = st == TWELL_OK && want && strcmp(want, tw_nv.request) != 0;
    char loaded[sizeof tw_nv.path], why[sizeof tw_nv.why];
    snprintf(loaded, sizeof loaded, "%s", tw_nv.path);
    snprintf(why, sizeof why, "%s", tw_nv.why);
    pthread_mutex_unlock(&tw_nv_mutex);
    if (st != TWELL_OK)
        return tw_error(ctx, st,
                        "NVRTC not found (install the CUDA toolkit, set CUDA_HOME, or name the "
                        "library: options.nvrtc_library / TWELL_NVRTC_LIBRARY); tried: %s",
                        why);
    if (other && ctx && !ctx->nvrtc_warned) {
        ctx->nvrtc_warned = 1;
        tw_log(ctx, TWELL_LOG_WARN,
               "NVRTC is loaded once per process: %s is in use, not %s (this context's "
               "options.nvrtc_library or TWELL_NVRTC_LIBRARY)",
               loaded, want);
    }
    return TWELL_OK;
}

twell_status tw_nvrtc_version(twell_ctx *ctx, int *major, int *minor) {
    twell_status st = tw_nvrtc_load(ctx);
    if (st != TWELL_OK)
        return st;
    *major = tw_nv.major;
    *minor = tw_nv.minor;
    return TWELL_OK;
}

const char *tw_nvrtc_path(void) {
    pthread_mutex_lock(&tw_nv_mutex);
    const char *p = tw_nv.lib ? tw_nv.path : ""; /* path never changes once lib is set */
    pthread_mutex_unlock(&tw_nv_mutex);
    return p;
}

const char *tw_nvrtc_why_missing(void) {
    (void)tw_nvrtc_load(NULL);
    return tw_nv.status == TWELL_OK ? "" : tw_nv.why;
}

twell_status tw_nvrtc_supported_archs(twell_ctx *ctx, char *buf, size_t cap) {
    twell_status st = tw_nvrtc_load(ctx);
    if (st != TWELL_OK)
        return st;
    if (cap)
        buf[0] = '\0';
    int n = 0;
    if (!tw_nv.GetNumSupportedArchs || !tw_nv.GetSupportedArchs ||
        tw_nv.GetNumSupportedArchs(&n) != 0 || n <= 0 || n > 4096)
        return tw_error(ctx, TWELL_ERR_NVRTC, "nvrtcGetSupportedArchs: not available");
    int *archs = malloc((size_t)n * sizeof *archs);
    if (!archs)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "nvrtcGetSupportedArchs: out of memory");
    if (tw_nv.GetSupportedArchs(archs) != 0) {
        free(archs);
        return tw_error(ctx, TWELL_ERR_NVRTC, "nvrtcGetSupportedArchs failed");
    }
    size_t used = 0;
    for (int i = 0; i < n && used < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%ssm_%d", i ? " " : "", archs[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    free(archs);
    return TWELL_OK;
}

void tw_nvrtc_arch_for(int major, int minor, char *buf, size_t cap) {
    snprintf(buf, cap, "sm_%d%d%s", major, minor, major == 9 && minor == 0 ? "a" : "");
}

/* Finds the first "<file>(<line>): error" in an NVRTC log and writes "<file>:<line>: <text>" to
 * out, so the message names the template position; "" when the log has none. */
static void tw_log_first_error(const char *log, char *out, size_t cap) {
    out[0] = '\0';
    const char *e = strstr(log, "): error");
    if (!e)
        e = strstr(log, "): catastrophic error");
    if (!e)
        return;
    const char *open = e;
    while (open > log && open[-1] != '(' && open[-1] != '\n')
        open--;
    if (open == log || open[-1] != '(')
        return;
    const char *line_start = open - 1;
    while (line_start > log && line_start[-1] != '\n')
        line_start--;
    const char *msg = strchr(e, ':') + 1;
    while (*msg == ' ')
        msg++;
    const char *msg_end = strchr(msg, '\n');
    int file_len = (int)(open - 1 - line_start);
    int line_len = (int)(e - open);
    int msg_len = msg_end ? (int)(msg_end - msg) : (int)strlen(msg);
    snprintf(out, cap, "%.*s:%.*s: %.*s", file_len, line_start, line_len, open, msg_len, msg);
}

twell_status tw_nvrtc_compile(twell_ctx *ctx, const char *src, const char *prog_name,
                              const char *const *opts, int nopts, void **cubin, size_t *size,
                              char **log) {
    *cubin = NULL;
    *size = 0;
    if (log)
        *log = NULL;
    twell_status st = tw_nvrtc_load(ctx);
    if (st != TWELL_OK)
        return st;
    nvrtcProgram prog = NULL;
    nvrtcResult r = tw_nv.CreateProgram(&prog, src, prog_name, 0, NULL, NULL);
    if (r != 0)
        return tw_error(ctx, r == 1 ? TWELL_ERR_NO_MEMORY : TWELL_ERR_NVRTC,
                        "nvrtcCreateProgram: %s (%d)", tw_nvrtc_result_name(r), r);
    nvrtcResult cr = tw_nv.CompileProgram(prog, nopts, opts);

    char *full_log = NULL;
    size_t log_size = 0;
    if (tw_nv.GetProgramLogSize(prog, &log_size) == 0 && log_size > 0) {
        full_log = malloc(log_size + 1);
        if (full_log && tw_nv.GetProgramLog(prog, full_log) == 0)
            full_log[log_size] = '\0';
        else if (full_log)
            full_log[0] = '\0';
    }
    if (cr != 0) {
        char where[512];
        tw_log_first_error(full_log ? full_log : "", where, sizeof where);
        st = tw_error(ctx, cr == 1 ? TWELL_ERR_NO_MEMORY : TWELL_ERR_NVRTC,
                      "nvrtcCompileProgram: %s (%d)%s%s\n%s", tw_nvrtc_result_name(cr), cr,
                      where[0] ? " at " : "", where, full_log ? full_log : "(no log)");
        goto done;
    }
    size_t n = 0;
    r = tw_nv.GetCUBINSize(prog, &n);
    if (r != 0 || n == 0) {
        st = tw_error(ctx, TWELL_ERR_NVRTC,
                      "nvrtcGetCUBINSize: %s (%d) (was a real sm_XY architecture given?)",
                      tw_nvrtc_result_name(r), r);
        goto done;
    }
    void *img = malloc(n);
    if (!img) {
        st = tw_error(ctx, TWELL_ERR_NO_MEMORY, "nvrtcGetCUBIN: out of memory (%zu bytes)", n);
        goto done;
    }
    r = tw_nv.GetCUBIN(prog, img);
    if (r != 0) {
        free(img);
        st = tw_error(ctx, TWELL_ERR_NVRTC, "nvrtcGetCUBIN: %s (%d)", tw_nvrtc_result_name(r), r);
        goto done;
    }
    *cubin = img;
    *size = n;
    if (full_log && full_log[0]) /* warnings only: worth a look, never a failure */
        tw_log(ctx, TWELL_LOG_DEBUG, "nvrtc: %s compiled with messages:\n%s", prog_name, full_log);
    st = TWELL_OK;
done:
    tw_nv.DestroyProgram(&prog);
    if (log && full_log)
        *log = full_log;
    else
        free(full_log);
    return st;
}
