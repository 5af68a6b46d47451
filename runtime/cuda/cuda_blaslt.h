/*
 * cuda_blaslt.h — cuBLASLt loaded at run time (dlopen), behind a row-major GEMM with fp32
 * accumulation: the dense route of every op goes through it. cuda_blaslt.c is the only file that
 * touches cuBLASLt; the build needs no cuBLAS header or library.
 */
#ifndef TWELL_CUDA_BLASLT_H
#define TWELL_CUDA_BLASLT_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

/* Loads libcublasLt once per process (thread-safe). The library named by ctx
 * (options.cublaslt_library, else $TWELL_CUBLASLT_LIBRARY as read at context creation) is tried
 * alone; else libcublasLt.so.13, .so.12, .so from the loader's path (a copy already loaded by the
 * process, e.g. PyTorch's, is found by its soname), then from `beside` (the directory NVRTC was
 * loaded from; may be NULL), beside's ../../cublas/lib (the nvidia-cublas Python wheel next to the
 * nvidia-cuda-nvrtc one), $CUDA_HOME/lib64 and /usr/local/cuda/lib64. Errors: TWELL_ERR_NOT_FOUND
 * listing every place tried (ctx may be NULL: no message). A failed load is not tried again for
 * the same request. */
twell_status tw_lt_load(twell_ctx *ctx, const char *beside);

/* The path cuBLASLt was loaded from, or "" (static, borrowed). */
const char *tw_lt_path(void);

/* Element types of a GEMM operand or result. */
typedef enum tw_lt_type { TW_LT_BF16 = 0, TW_LT_FP16 = 1, TW_LT_FP32 = 2 } tw_lt_type;

/* The dtype's element type. */
tw_lt_type tw_lt_type_of(twell_dtype dt);

/* A row-major GEMM D[m, n] = A[m, k] · op(B), fp32 accumulation, fixed shape, no epilogue (the
 * callers' relu is their own elementwise pass: cuBLASLt's relu epilogue maps NaN to 0, and a NaN
 * pre-activation must stay active, twellrt.h "Non-finite values"):
 *   b_nk = 1: B is [n, k] row-major and op(B) = Bᵀ (x · Wᵀ, the nn.Linear form);
 *   b_nk = 0: B is [k, n] row-major (h · Wd).
 * Leading dimensions are the dense row lengths (k for A, k or n for B, n for D). */
typedef struct tw_lt_shape {
    size_t m;
    uint32_t n, k;
    int b_nk;
    tw_lt_type ab, d;
} tw_lt_shape;

/* A prepared GEMM: cuBLASLt descriptors and the algorithm its heuristic chose for the shape,
 * kept so that a repeated shape looks nothing up and allocates nothing. */
typedef struct tw_lt_gemm tw_lt_gemm;

/* Per-plan set of prepared GEMMs, most recently used first (TW_LT_CACHE entries; the least
 * recently used is replaced). Zero-initialised is empty. */
#define TW_LT_CACHE 24
typedef struct tw_lt_set {
    tw_lt_gemm *g[TW_LT_CACHE];
    size_t n;
} tw_lt_set;

/* Runs the GEMM of `shape` on stream with the workspace given (device memory, ws_bytes bytes,
 * 256-byte aligned; the algorithm is chosen among those that need at most ws_bytes). The prepared
 * GEMM comes from set (prepared on first use: descriptors created, heuristic asked; no device
 * memory, no synchronisation). Pointers are device addresses, 16-byte aligned. Capturable: the
 * call enqueues work only. Context current. Errors: TWELL_ERR_UNSUPPORTED when cuBLASLt has no
 * algorithm for the shape, TWELL_ERR_CUDA for a failed cuBLASLt call (the message names it and
 * its status), TWELL_ERR_NO_MEMORY, and tw_lt_load's. */
twell_status tw_lt_matmul(twell_ctx *ctx, tw_lt_set *set, const tw_lt_shape *shape, const void *a,
                          const void *b, void *d, void *ws, size_t ws_bytes, twell_stream stream);

/* Creates ctx's cuBLASLt handle now (tw_lt_matmul would on first use): for callers about to be
 * captured into a graph. Context current. Errors: those of tw_lt_load, TWELL_ERR_CUDA. */
twell_status tw_lt_prepare_ctx(twell_ctx *ctx);

/* Frees every prepared GEMM of set (the set is empty afterwards). */
void tw_lt_set_clear(tw_lt_set *set);

/* Destroys ctx's cuBLASLt handle (created by the first tw_lt_matmul on ctx); called when the
 * context's device closes. */
void tw_lt_ctx_release(twell_ctx *ctx);

/* Bytes of workspace the dense routes give cuBLASLt (its recommendation for Hopper). */
#define TW_LT_WORKSPACE ((size_t)32 << 20)

#endif /* TWELL_CUDA_BLASLT_H */
