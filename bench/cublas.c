/*
 * cublas.c — the dense baseline of `twell bench`: cuBLAS loaded with dlopen here only (the library
 * never depends on it), a row-major GemmEx with fp32 accumulation (x · Wᵀ for the inference ops,
 * the general form for the training baseline).
 */
#include "bench.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cuBLAS constants (from cublas_api.h; the data types are bench_cublas_type). */
enum {
    BENCH_CUBLAS_OP_N = 0,
    BENCH_CUBLAS_OP_T = 1,
    BENCH_CUBLAS_COMPUTE_32F = 68,
    BENCH_CUBLAS_GEMM_DEFAULT = -1
};

typedef struct bench_cublas_handle_st *bench_cublas_handle;

struct bench_cublas {
    void *lib;
    bench_cublas_handle h;
    int (*Create)(bench_cublas_handle *);
    int (*Destroy)(bench_cublas_handle);
    int (*SetStream)(bench_cublas_handle, void *);
    int (*GemmEx)(bench_cublas_handle, int, int, int, int, int, const void *, const void *, int,
                  int, const void *, int, int, const void *, void *, int, int, int, int);
    const char *(*StatusString)(int);
};

static void *bench_sym(void *lib, const char *name) { return dlsym(lib, name); }

/* dlsym into a function pointer without an object-to-function cast (POSIX representation). */
#define BENCH_LOAD(cb, field, name)                                                                \
    do {                                                                                           \
        void *p_ = bench_sym((cb)->lib, name);                                                     \
        memcpy(&(cb)->field, &p_, sizeof p_);                                                      \
    } while (0)

static const char *bench_status(const bench_cublas *cb, int st) {
    const char *s = cb->StatusString ? cb->StatusString(st) : NULL;
    return s ? s : "cuBLAS error";
}

bench_cublas *bench_cublas_open(twell_ctx *ctx, char *err, size_t errlen) {
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    bench_cublas *cb = calloc(1, sizeof *cb);
    if (!cb) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !cb->lib; i++)
        cb->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!cb->lib) {
        const char *e = dlerror();
        snprintf(err, errlen, "dlopen libcublas.so.13/.12/.so: %s", e ? e : "not found");
        free(cb);
        return NULL;
    }
    BENCH_LOAD(cb, Create, "cublasCreate_v2");
    BENCH_LOAD(cb, Destroy, "cublasDestroy_v2");
    BENCH_LOAD(cb, SetStream, "cublasSetStream_v2");
    BENCH_LOAD(cb, GemmEx, "cublasGemmEx");
    BENCH_LOAD(cb, StatusString, "cublasGetStatusString");
    if (!cb->Create || !cb->Destroy || !cb->SetStream || !cb->GemmEx) {
        snprintf(err, errlen, "libcublas lacks cublasCreate_v2/SetStream_v2/GemmEx");
        dlclose(cb->lib);
        free(cb);
        return NULL;
    }
    tw_cu_scope sc;
    if (tw_cu_enter(ctx, &sc) != TWELL_OK) {
        snprintf(err, errlen, "%s", twell_ctx_errmsg(ctx));
        dlclose(cb->lib);
        free(cb);
        return NULL;
    }
    int st = cb->Create(&cb->h);
    if (st == 0)
        st = cb->SetStream(cb->h, NULL);
    tw_cu_leave(ctx, &sc);
    if (st != 0) {
        snprintf(err, errlen, "cublasCreate_v2: %s (%d)", bench_status(cb, st), st);
        if (cb->h)
            cb->Destroy(cb->h);
        dlclose(cb->lib);
        free(cb);
        return NULL;
    }
    return cb;
}

void bench_cublas_close(twell_ctx *ctx, bench_cublas *cb) {
    if (!cb)
        return;
    tw_cu_scope sc;
    if (tw_cu_enter(ctx, &sc) == TWELL_OK) {
        cb->Destroy(cb->h);
        tw_cu_leave(ctx, &sc);
    }
    /* not dlclose'd: cuBLAS keeps process-wide state alive past its handles */
    free(cb);
}

int bench_cublas_set_stream(twell_ctx *ctx, bench_cublas *cb, twell_stream stream) {
    tw_cu_scope sc;
    if (tw_cu_enter(ctx, &sc) != TWELL_OK)
        return -1;
    int st = cb->SetStream(cb->h, stream);
    tw_cu_leave(ctx, &sc);
    return st;
}

bench_cublas_type bench_cublas_type_of(twell_dtype dt) {
    return dt == TWELL_DTYPE_BF16 ? BENCH_CUBLAS_R_16BF : BENCH_CUBLAS_R_16F;
}

int bench_cublas_gemm(twell_ctx *ctx, bench_cublas *cb, int ta, int tb, size_t M, size_t N,
                      size_t K, const void *A, size_t lda, bench_cublas_type at, const void *B,
                      size_t ldb, bench_cublas_type bt, void *C, size_t ldc, bench_cublas_type ct,
                      char *err, size_t errlen) {
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX) {
        snprintf(err, errlen, "cublasGemmEx: dimensions beyond int");
        return -1;
    }
    /* Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLAS gets B first, each
     * operand's row-major storage read as its column-major transpose. */
    const float alpha = 1.0f, beta = 0.0f;
    tw_cu_scope sc;
    if (tw_cu_enter(ctx, &sc) != TWELL_OK) {
        snprintf(err, errlen, "%s", twell_ctx_errmsg(ctx));
        return -1;
    }
    int st = cb->GemmEx(cb->h, tb ? BENCH_CUBLAS_OP_T : BENCH_CUBLAS_OP_N,
                        ta ? BENCH_CUBLAS_OP_T : BENCH_CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha,
                        B, (int)bt, (int)ldb, A, (int)at, (int)lda, &beta, C, (int)ct, (int)ldc,
                        BENCH_CUBLAS_COMPUTE_32F, BENCH_CUBLAS_GEMM_DEFAULT);
    tw_cu_leave(ctx, &sc);
    if (st != 0)
        snprintf(err, errlen, "cublasGemmEx: %s (%d)", bench_status(cb, st), st);
    return st;
}

int bench_cublas_gemm_nt(twell_ctx *ctx, bench_cublas *cb, twell_dtype dt, size_t M, uint32_t N,
                         uint32_t K, const void *A, const void *B, void *C, char *err,
                         size_t errlen) {
    /* B [N, K] row-major is Bᵀ stored [N, K]: the "TN" GEMM, all leading dimensions packed. */
    bench_cublas_type ty = bench_cublas_type_of(dt);
    return bench_cublas_gemm(ctx, cb, 0, 1, M, N, K, A, K, ty, B, K, ty, C, N, ty, err, errlen);
}
