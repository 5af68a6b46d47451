/*
 * cuda_blaslt.c — cuBLASLt loaded with dlopen (cuda_blaslt.h): the only file that calls it. The
 * few types and constants used are declared here with the values of cuBLASLt's API reference.
 */
#include "cuda_blaslt.h"

#include "cuda_driver.h"
#include "env.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- cuBLASLt's ABI (cublasLt.h, library_types.h) ---- */

typedef int tw_lt_status; /* cublasStatus_t: 0 success */
typedef struct tw_lt_handle_st *tw_lt_handle;
typedef struct tw_lt_desc_st *tw_lt_desc;     /* cublasLtMatmulDesc_t */
typedef struct tw_lt_layout_st *tw_lt_layout; /* cublasLtMatrixLayout_t */
typedef struct tw_lt_pref_st *tw_lt_pref;     /* cublasLtMatmulPreference_t */
typedef struct {
    uint64_t data[8];
} tw_lt_algo; /* cublasLtMatmulAlgo_t */
typedef struct {
    tw_lt_algo algo;
    size_t workspace_size;
    tw_lt_status state;
    float waves;
    int reserved[4];
} tw_lt_heur; /* cublasLtMatmulHeuristicResult_t */

enum {
    TW_CUDA_R_32F = 0,
    TW_CUDA_R_16F = 2,
    TW_CUDA_R_16BF = 14,
    TW_CUBLAS_COMPUTE_32F = 68,
    TW_CUBLAS_OP_N = 0,
    TW_CUBLAS_OP_T = 1,
    TW_LT_DESC_TRANSA = 3,
    TW_LT_DESC_TRANSB = 4,
    TW_LT_PREF_MAX_WORKSPACE_BYTES = 1
};

static struct {
    void *lib;
    char path[512];
    int tried;
    char request[512];
    char why[2048];
    tw_lt_status (*Create)(tw_lt_handle *);
    tw_lt_status (*Destroy)(tw_lt_handle);
    const char *(*StatusString)(tw_lt_status);
    tw_lt_status (*DescCreate)(tw_lt_desc *, int, int);
    tw_lt_status (*DescDestroy)(tw_lt_desc);
    tw_lt_status (*DescSet)(tw_lt_desc, int, const void *, size_t);
    tw_lt_status (*LayoutCreate)(tw_lt_layout *, int, uint64_t, uint64_t, int64_t);
    tw_lt_status (*LayoutDestroy)(tw_lt_layout);
    tw_lt_status (*PrefCreate)(tw_lt_pref *);
    tw_lt_status (*PrefDestroy)(tw_lt_pref);
    tw_lt_status (*PrefSet)(tw_lt_pref, int, const void *, size_t);
    tw_lt_status (*Heuristic)(tw_lt_handle, tw_lt_desc, tw_lt_layout, tw_lt_layout, tw_lt_layout,
                              tw_lt_layout, tw_lt_pref, int, tw_lt_heur *, int *);
    tw_lt_status (*Matmul)(tw_lt_handle, tw_lt_desc, const void *, const void *, tw_lt_layout,
                           const void *, tw_lt_layout, const void *, const void *, tw_lt_layout,
                           void *, tw_lt_layout, const tw_lt_algo *, void *, size_t, void *);
} tw_lt;
static pthread_mutex_t tw_lt_mutex = PTHREAD_MUTEX_INITIALIZER;

static void tw_lt_why(const char *what, const char *err) {
    size_t n = strlen(tw_lt.why);
    if (n + 1 < sizeof tw_lt.why)
        snprintf(tw_lt.why + n, sizeof tw_lt.why - n, "%s%s (%s)", n ? "; " : "", what,
                 err ? err : "?");
}

static int tw_lt_try(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        tw_lt_why(path, dlerror());
        return 0;
    }
    /* dlsym returns void *; POSIX guarantees the round trip to a function pointer */
#define TW_LT_SYM(field, name)                                                                     \
    do {                                                                                           \
        void *s_ = dlsym(h, name);                                                                 \
        memcpy(&tw_lt.field, &s_, sizeof s_);                                                      \
        if (!s_) {                                                                                 \
            tw_lt_why(path, "missing symbol " name);                                               \
            dlclose(h);                                                                            \
            return 0;                                                                              \
        }                                                                                          \
    } while (0)
    TW_LT_SYM(Create, "cublasLtCreate");
    TW_LT_SYM(Destroy, "cublasLtDestroy");
    TW_LT_SYM(StatusString, "cublasLtGetStatusString");
    TW_LT_SYM(DescCreate, "cublasLtMatmulDescCreate");
    TW_LT_SYM(DescDestroy, "cublasLtMatmulDescDestroy");
    TW_LT_SYM(DescSet, "cublasLtMatmulDescSetAttribute");
    TW_LT_SYM(LayoutCreate, "cublasLtMatrixLayoutCreate");
    TW_LT_SYM(LayoutDestroy, "cublasLtMatrixLayoutDestroy");
    TW_LT_SYM(PrefCreate, "cublasLtMatmulPreferenceCreate");
    TW_LT_SYM(PrefDestroy, "cublasLtMatmulPreferenceDestroy");
    TW_LT_SYM(PrefSet, "cublasLtMatmulPreferenceSetAttribute");
    TW_LT_SYM(Heuristic, "cublasLtMatmulAlgoGetHeuristic");
    TW_LT_SYM(Matmul, "cublasLtMatmul");
#undef TW_LT_SYM
    tw_lt.lib = h;
    snprintf(tw_lt.path, sizeof tw_lt.path, "%s", path);
    return 1;
}

static int tw_lt_try_in(const char *dir, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char path[1100];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path)
            continue;
        if (tw_lt_try(path))
            return 1;
    }
    return 0;
}

/* tw_lt_mutex held */
static void tw_lt_load_locked(const char *want, const char *beside) {
    static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
    const size_t nn = sizeof names / sizeof names[0];
    if (tw_lt.lib || (tw_lt.tried && !strcmp(tw_lt.request, want ? want : "")))
        return;
    tw_lt.tried = 1;
    tw_lt.why[0] = '\0';
    snprintf(tw_lt.request, sizeof tw_lt.request, "%s", want ? want : "");
    if (want) {
        (void)tw_lt_try(want);
        return;
    }
    for (size_t i = 0; i < nn; i++)
        if (tw_lt_try(names[i]))
            return;
    if (beside && *beside) {
        char wheel[1024];
        if (snprintf(wheel, sizeof wheel, "%s/../../cublas/lib", beside) >= (int)sizeof wheel)
            wheel[0] = '\0';
        if (tw_lt_try_in(beside, names, nn) || tw_lt_try_in(wheel, names, nn))
            return;
    }
    const char *home = tw_env_cuda_home();
    if (home) {
        char dir[1024];
        if (snprintf(dir, sizeof dir, "%s/lib64", home) >= (int)sizeof dir)
            dir[0] = '\0';
        if (tw_lt_try_in(dir, names, nn))
            return;
    }
    (void)tw_lt_try_in("/usr/local/cuda/lib64", names, nn);
}

twell_status tw_lt_load(twell_ctx *ctx, const char *beside) {
    const char *want = ctx ? ctx->cublaslt_library : tw_env_cublaslt_library();
    pthread_mutex_lock(&tw_lt_mutex);
    tw_lt_load_locked(want, beside);
    int ok = tw_lt.lib != NULL;
    char why[sizeof tw_lt.why];
    snprintf(why, sizeof why, "%s", tw_lt.why);
    pthread_mutex_unlock(&tw_lt_mutex);
    if (!ok)
        return tw_error(ctx, TWELL_ERR_NOT_FOUND,
                        "cuBLASLt not found (install the CUDA toolkit or the nvidia-cublas wheel, "
                        "set CUDA_HOME, or name the library: options.cublaslt_library / "
                        "TWELL_CUBLASLT_LIBRARY); tried: %s",
                        why);
    return TWELL_OK;
}

const char *tw_lt_path(void) {
    pthread_mutex_lock(&tw_lt_mutex);
    const char *p = tw_lt.lib ? tw_lt.path : ""; /* never changes once lib is set */
    pthread_mutex_unlock(&tw_lt_mutex);
    return p;
}

tw_lt_type tw_lt_type_of(twell_dtype dt) {
    return dt == TWELL_DTYPE_BF16 ? TW_LT_BF16 : TW_LT_FP16;
}

static int tw_lt_cuda_type(tw_lt_type t) {
    return t == TW_LT_BF16 ? TW_CUDA_R_16BF : t == TW_LT_FP16 ? TW_CUDA_R_16F : TW_CUDA_R_32F;
}

static twell_status tw_lt_fail(twell_ctx *ctx, const char *call, tw_lt_status st) {
    const char *s = tw_lt.StatusString ? tw_lt.StatusString(st) : NULL;
    return tw_error(ctx, st == 3 ? TWELL_ERR_NO_MEMORY : TWELL_ERR_CUDA, "%s: %s (%d)", call,
                    s ? s : "CUBLAS_STATUS_UNKNOWN", st);
}

#define TW_LT_CALL(ctx, name, expr)                                                                \
    do {                                                                                           \
        tw_lt_status st_ = (expr);                                                                 \
        if (st_ != 0)                                                                              \
            return tw_lt_fail(ctx, name, st_);                                                     \
    } while (0)

/* ---- prepared GEMMs ---- */

struct tw_lt_gemm {
    tw_lt_shape shape;
    size_t ws_bytes; /* the workspace bound the algorithm was chosen for */
    tw_lt_desc desc;
    tw_lt_layout la, lb, ld; /* cuBLASLt's A (our B), its B (our A), D */
    tw_lt_algo algo;
};

static void tw_lt_gemm_free(tw_lt_gemm *g) {
    if (!g)
        return;
    if (g->desc)
        tw_lt.DescDestroy(g->desc);
    if (g->la)
        tw_lt.LayoutDestroy(g->la);
    if (g->lb)
        tw_lt.LayoutDestroy(g->lb);
    if (g->ld)
        tw_lt.LayoutDestroy(g->ld);
    free(g);
}

static int tw_lt_same(const tw_lt_gemm *g, const tw_lt_shape *s, size_t ws_bytes) {
    return g->shape.m == s->m && g->shape.n == s->n && g->shape.k == s->k &&
           g->shape.b_nk == s->b_nk && g->shape.ab == s->ab && g->shape.d == s->d &&
           g->ws_bytes == ws_bytes;
}

static twell_status tw_lt_handle_of(twell_ctx *ctx, tw_lt_handle *out) {
    if (!ctx->cuda->lt) {
        tw_lt_handle h = NULL;
        TW_LT_CALL(ctx, "cublasLtCreate", tw_lt.Create(&h));
        ctx->cuda->lt = h;
    }
    *out = (tw_lt_handle)ctx->cuda->lt;
    return TWELL_OK;
}

/* Row-major D = A·op(B) is column-major Dᵀ = op(B)ᵀ·Aᵀ: cuBLASLt's first operand is our B (with
 * b_nk its row-major [n, k] storage read as the column-major k x n matrix, transposed), its second
 * our A (row-major [m, k] read as column-major k x m). */
static twell_status tw_lt_prepare(twell_ctx *ctx, const tw_lt_shape *s, size_t ws_bytes,
                                  tw_lt_gemm **out) {
    *out = NULL;
    tw_lt_handle h = NULL;
    TW_TRY(tw_lt_handle_of(ctx, &h));
    tw_lt_gemm *g = calloc(1, sizeof *g);
    if (!g)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "cuBLASLt: out of memory for a GEMM");
    g->shape = *s;
    g->ws_bytes = ws_bytes;
    tw_lt_pref pref = NULL;
    twell_status st = TWELL_OK;
    tw_lt_status r;
    const int ta = s->b_nk ? TW_CUBLAS_OP_T : TW_CUBLAS_OP_N, tb = TW_CUBLAS_OP_N;
    const int tab = tw_lt_cuda_type(s->ab);
    const char *call = "cublasLtMatmulDescCreate";
    r = tw_lt.DescCreate(&g->desc, TW_CUBLAS_COMPUTE_32F, TW_CUDA_R_32F);
    if (!r && (call = "cublasLtMatmulDescSetAttribute", 1))
        r = tw_lt.DescSet(g->desc, TW_LT_DESC_TRANSA, &ta, sizeof ta);
    if (!r)
        r = tw_lt.DescSet(g->desc, TW_LT_DESC_TRANSB, &tb, sizeof tb);
    if (!r && (call = "cublasLtMatrixLayoutCreate", 1))
        r = s->b_nk ? tw_lt.LayoutCreate(&g->la, tab, s->k, s->n, (int64_t)s->k)
                    : tw_lt.LayoutCreate(&g->la, tab, s->n, s->k, (int64_t)s->n);
    if (!r)
        r = tw_lt.LayoutCreate(&g->lb, tab, s->k, s->m, (int64_t)s->k);
    if (!r)
        r = tw_lt.LayoutCreate(&g->ld, tw_lt_cuda_type(s->d), s->n, s->m, (int64_t)s->n);
    if (!r && (call = "cublasLtMatmulPreferenceCreate", 1))
        r = tw_lt.PrefCreate(&pref);
    if (!r && (call = "cublasLtMatmulPreferenceSetAttribute", 1))
        r = tw_lt.PrefSet(pref, TW_LT_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    tw_lt_heur heur;
    memset(&heur, 0, sizeof heur);
    int found = 0;
    if (!r && (call = "cublasLtMatmulAlgoGetHeuristic", 1))
        r = tw_lt.Heuristic(h, g->desc, g->la, g->lb, g->ld, g->ld, pref, 1, &heur, &found);
    if (pref)
        tw_lt.PrefDestroy(pref);
    if (r)
        st = tw_lt_fail(ctx, call, r);
    else if (found < 1 || heur.state != 0)
        st = tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                      "cublasLtMatmulAlgoGetHeuristic: no algorithm for %zu x %u x %u", s->m, s->n,
                      s->k);
    if (st != TWELL_OK) {
        tw_lt_gemm_free(g);
        return st;
    }
    g->algo = heur.algo;
    *out = g;
    return TWELL_OK;
}

twell_status tw_lt_matmul(twell_ctx *ctx, tw_lt_set *set, const tw_lt_shape *shape, const void *a,
                          const void *b, void *d, void *ws, size_t ws_bytes, twell_stream stream) {
    if (!tw_lt.lib)
        TW_TRY(tw_lt_load(ctx, NULL));
    size_t i = 0;
    while (i < set->n && !tw_lt_same(set->g[i], shape, ws_bytes))
        i++;
    tw_lt_gemm *g;
    if (i < set->n) {
        g = set->g[i];
    } else {
        TW_TRY(tw_lt_prepare(ctx, shape, ws_bytes, &g));
        if (set->n == TW_LT_CACHE)
            tw_lt_gemm_free(set->g[--set->n]);
        i = set->n++;
        set->g[i] = g;
    }
    memmove(&set->g[1], &set->g[0], i * sizeof set->g[0]); /* most recent first */
    set->g[0] = g;
    tw_lt_handle h = NULL;
    TW_TRY(tw_lt_handle_of(ctx, &h));
    const float one = 1.0f, zero = 0.0f;
    TW_LT_CALL(ctx, "cublasLtMatmul",
               tw_lt.Matmul(h, g->desc, &one, b, g->la, a, g->lb, &zero, d, g->ld, d, g->ld,
                            &g->algo, ws, ws_bytes, stream));
    return TWELL_OK;
}

twell_status tw_lt_prepare_ctx(twell_ctx *ctx) {
    if (!tw_lt.lib)
        TW_TRY(tw_lt_load(ctx, NULL));
    tw_lt_handle h = NULL;
    return tw_lt_handle_of(ctx, &h);
}

void tw_lt_set_clear(tw_lt_set *set) {
    for (size_t i = 0; i < set->n; i++)
        tw_lt_gemm_free(set->g[i]);
    set->n = 0;
}

void tw_lt_ctx_release(twell_ctx *ctx) {
    if (!ctx || !ctx->cuda || !ctx->cuda->lt)
        return;
    if (tw_lt.Destroy)
        tw_lt.Destroy((tw_lt_handle)ctx->cuda->lt);
    ctx->cuda->lt = NULL;
}
