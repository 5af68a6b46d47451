/*
 * twellrt.h — public API of libtwellrt: sparse (TwELL) transformer feed-forward layers.
 * This header is the specification: every function states behaviour, ownership, errors and
 * threading. Anything not promised here is an implementation detail.
 */
#ifndef TWELLRT_H
#define TWELLRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TWELL_BUILDING_LIBRARY) && defined(__GNUC__)
#define TWELL_API __attribute__((visibility("default")))
#else
#define TWELL_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Versioning
 * ------------------------------------------------------------------------------------------- */

#define TWELL_VERSION_MAJOR 0
#define TWELL_VERSION_MINOR 2
#define TWELL_VERSION_PATCH 0
/* One integer that orders versions: MAJOR * 10000 + MINOR * 100 + PATCH. */
#define TWELL_VERSION_NUMBER                                                                       \
    (TWELL_VERSION_MAJOR * 10000 + TWELL_VERSION_MINOR * 100 + TWELL_VERSION_PATCH)

/* The library's version as "MAJOR.MINOR.PATCH"; a static string, never NULL. Compare with the
 * macros above to detect a header/library mismatch. Thread-safe. */
TWELL_API const char *twell_version(void);

/* TWELL_VERSION_NUMBER of the library actually loaded. Thread-safe. */
TWELL_API int twell_version_number(void);

/* ---------------------------------------------------------------------------------------------
 * ABI stability
 *
 * The shared library's soname is libtwellrt.so.TWELL_ABI_VERSION. Within one soname a program
 * built against an older twellrt.h runs unchanged with a newer library: functions are only
 * added, never removed or changed, and no struct crosses the ABI by value. The number goes up
 * (a new soname) whenever that promise is broken; CI compares the built library's exported ABI
 * with the baseline in abi/ (scripts/check_abi.sh, README "ABI").
 *
 * Sized structs. The plain-data structs a caller fills in (twell_ctx_options, twell_shape) begin
 * with `size_t struct_size`, the size of the struct as the caller's compiler sees it. Set it, and
 * every default, with the struct's init function (twell_ctx_options_init, twell_shape_init):
 * static inline functions of this header that pass sizeof as compiled into the program to the
 * library's *_init_sized, which writes the library's defaults into exactly that many bytes. A
 * binding without a C compiler (ctypes, ...) calls *_init_sized with its own struct's size. An
 * initializer that sets struct_size to sizeof and gives every field a value is equivalent. The
 * library writes a caller's struct only in *_init_sized (exactly struct_size bytes), and reads
 * only the bytes the caller has:
 *   - a field that lies wholly inside struct_size is the caller's; a field past it (added by a
 *     later version than the caller's header) keeps its default, as if left unchanged;
 *   - struct_size larger than the library's struct (a program built against a newer header
 *     running on an older library): the bytes the library does not know must be zero (the
 *     newer fields left at their defaults), else TWELL_ERR_INVALID_ARG names the struct and the
 *     first byte set;
 *   - struct_size below sizeof(size_t) (0: a struct that was never initialised) or above
 *     TWELL_STRUCT_SIZE_MAX is TWELL_ERR_INVALID_ARG, and nothing else of the struct is read.
 * Rules for later versions of this header: fields are only appended, each starting at or after
 * the earlier struct's sizeof (never in its tail padding), and a new field's default is all-zero
 * bytes (NULL, 0, TWELL_SWITCH_DEFAULT), so an older library that zeroes it, or a newer caller
 * that leaves it alone, means "default". A struct the library returns by pointer
 * (twell_plan_shape) carries the library's struct_size; a caller reads only the fields its own
 * header has.
 * ------------------------------------------------------------------------------------------- */

/* The N of the soname libtwellrt.so.N (CMakeLists.txt reads it from here). */
#define TWELL_ABI_VERSION 1

/* The largest struct_size the library accepts (a larger value is a struct that was never
 * initialised, not a future version). */
#define TWELL_STRUCT_SIZE_MAX 4096u

/* ---------------------------------------------------------------------------------------------
 * Status codes. One X-macro list generates the enum and its name/message tables.
 * ------------------------------------------------------------------------------------------- */

#define TWELL_STATUS_MAP(X)                                                                        \
    X(OK, 0, "success")                                                                            \
    X(ERR_INVALID_ARG, 1, "invalid argument")                                                      \
    X(ERR_UNSUPPORTED, 2, "not supported by this backend, device or build")                        \
    X(ERR_NO_MEMORY, 3, "out of memory")                                                           \
    X(ERR_NO_DEVICE, 4, "no usable CUDA device")                                                   \
    X(ERR_NOT_FOUND, 5, "a required library, file or symbol was not found")                        \
    X(ERR_CUDA, 6, "CUDA driver call failed")                                                      \
    X(ERR_NVRTC, 7, "NVRTC call or compilation failed")                                            \
    X(ERR_TEMPLATE, 8, "kernel template failed to render")                                         \
    X(ERR_IO, 9, "file system error")                                                              \
    X(ERR_CORRUPT, 10, "corrupt or foreign data")                                                  \
    X(ERR_INTERNAL, 11, "internal error (a bug in twellrt)")                                       \
    X(ERR_MISUSE, 12, "context used by two threads at once")

typedef enum twell_status {
#define TWELL_STATUS_ENUM_(name, code, msg) TWELL_##name = code,
    TWELL_STATUS_MAP(TWELL_STATUS_ENUM_)
#undef TWELL_STATUS_ENUM_
} twell_status;

/* "TWELL_OK", "TWELL_ERR_INVALID_ARG", ...; "TWELL_UNKNOWN_STATUS" for a value not in the list.
 * Static strings. Thread-safe. */
TWELL_API const char *twell_status_name(twell_status s);

/* A one-line English description of s ("invalid argument", ...); static. Thread-safe. */
TWELL_API const char *twell_status_str(twell_status s);

/* ---------------------------------------------------------------------------------------------
 * Context
 *
 * A context owns one backend (CPU reference, or one CUDA device), its kernel cache and its last
 * error message. A context and everything created from it are used by one thread at a time;
 * different contexts may be used from different threads concurrently. The on-disk cache is safe
 * across threads and processes.
 *
 * Misuse detected (as SQLite's SQLITE_MISUSE): every call that takes a context, a plan or a
 * training state marks the context busy for the call's duration. A call made while another
 * thread is in a call on the same context (or on any plan or state created from it) does nothing
 * and returns TWELL_ERR_MISUSE: it touches neither the context nor its objects, writes nothing
 * to the caller's buffers (an out-parameter gets the NULL or 0 of any failure), and does not set
 * the context's message (twell_ctx_errmsg still belongs to the call that runs). Calls that return
 * no status say in their comment what they do instead. The check catches overlapping calls only:
 * two threads taking turns without synchronising are still wrong even when their calls happen not
 * to overlap, and a context, plan or state used after its destroy is not detected.
 * ------------------------------------------------------------------------------------------- */

typedef struct twell_ctx twell_ctx;

typedef enum twell_backend {
    TWELL_BACKEND_AUTO = 0, /* CUDA when a device is usable, else CPU */
    TWELL_BACKEND_CPU = 1,  /* exact reference backend; all pointers are host pointers */
    TWELL_BACKEND_CUDA = 2  /* CUDA device; all tensor pointers are device pointers */
} twell_backend;

typedef enum twell_log_level {
    TWELL_LOG_DEBUG = 0,
    TWELL_LOG_INFO = 1,
    TWELL_LOG_WARN = 2,
    TWELL_LOG_ERROR = 3
} twell_log_level;

/* Log sink. msg is valid only during the call. Called on the thread that called into the
 * library. The library never prints by itself. */
typedef void (*twell_log_fn)(void *user, twell_log_level level, const char *msg);

/* An on/off option whose default an environment variable may set: DEFAULT (0) takes the variable
 * named beside the option when it is set, else the built-in default; ON and OFF are the program's
 * choice and win over the environment. */
typedef enum twell_switch {
    TWELL_SWITCH_DEFAULT = 0,
    TWELL_SWITCH_ON = 1,
    TWELL_SWITCH_OFF = 2
} twell_switch;

/* Plain-data options, passed by pointer and copied by twell_ctx_create (strings included); the
 * caller may free or reuse them right after. Initialise them with twell_ctx_options_init(&o)
 * (struct_size and every default) and change the fields you need; fields added in later versions
 * go at the end and keep their defaults (see "ABI stability").
 *
 * Environment: a field left at its default (NULL, 0 or TWELL_SWITCH_DEFAULT) takes the value of
 * the environment variable named beside it when that is set (so an operator can steer a program
 * that does not set the field); a field the program sets wins over the environment. The variables
 * are read once, by twell_ctx_create (the cache directory's when the cache first opens), never
 * during an op. README's "Environment variables" lists them all. */
typedef struct twell_ctx_options {
    size_t struct_size;        /* set by twell_ctx_options_init: sizeof as the caller compiled it */
    twell_backend backend;     /* default TWELL_BACKEND_AUTO */
    int device;                /* CUDA device ordinal; default 0 */
    const char *cache_dir;     /* NULL: $TWELL_CACHE_DIR, else $XDG_CACHE_HOME/twellrt, else
                                  ~/.cache/twellrt */
    twell_log_fn log;          /* NULL: no logging */
    void *log_user;            /* passed back to log */
    twell_log_level log_level; /* messages below this level are not delivered; default WARN */
    int cpu_threads;           /* CPU backend worker threads; 0 = one per online core */
    size_t cache_max_bytes;    /* disk cache size cap; 0 = default (1 GiB) */
    /* Tune on first use (CUDA). OFF (the built-in default): plans only read stored tuning
     * winners (twell_plan_tune, `twell tune`) and use their default kernels where none is stored.
     * ON: the first call of a plan for an M bucket with no stored winner tunes that bucket first,
     * as twell_plan_tune(plan, M, 0) does: that one call blocks for seconds (it compiles and times
     * candidates and synchronises the device). DEFAULT: ON when $TWELL_TUNE is "1". */
    twell_switch tune_on_first_use;
    /* Programmatic dependent launch (CUDA, sm_90 and later): the inference pipeline's kernels may
     * start while the previous one finishes. Results are identical either way. ON (the built-in
     * default) uses it where the device and driver allow; OFF launches plainly. DEFAULT: OFF
     * when $TWELL_PDL is "0". */
    twell_switch pdl;
    /* Directory of the kernel templates (templates/<group>/<name>.cu.lua). NULL:
     * $TWELL_TEMPLATE_DIR, else the installed share/twellrt/templates beside the library, else
     * the source tree the library was built from. */
    const char *template_dir;
    /* The NVRTC library to load (a path or a file name for the loader). NULL:
     * $TWELL_NVRTC_LIBRARY, else libnvrtc.so.13, .so.12, .so from the loader's path, then from
     * $CUDA_HOME/lib64 and /usr/local/cuda/lib64. NVRTC is loaded once per process, by the first
     * context that compiles: a later context that names another library logs a warning and uses
     * the one loaded. */
    const char *nvrtc_library;
    /* Pointer checks (CUDA): a plan remembers the last 16 distinct device addresses its calls
     * passed and asks the driver only about new ones (see "Pointer checks" under Inference ops).
     * ON (the built-in default) remembers; OFF asks the driver about every pointer of every call
     * (one query per pointer: several microseconds of host time per call). DEFAULT: OFF when
     * $TWELL_POINTER_CACHE is "0". */
    twell_switch pointer_cache;
    /* The cuBLASLt library the dense routes load (a path or a file name for the loader). NULL:
     * $TWELL_CUBLASLT_LIBRARY, else libcublasLt.so.13, .so.12, .so from the loader's path (a copy
     * the process already loaded, such as PyTorch's, is found by name), then beside the NVRTC
     * loaded, in the nvidia-cublas Python wheel beside an NVRTC wheel, $CUDA_HOME/lib64 and
     * /usr/local/cuda/lib64. Loaded once per process, when a plan first needs it. Where it cannot
     * be loaded the dense routes are unavailable: one warning is logged, TWELL_PATH_DENSE
     * returns TWELL_ERR_UNSUPPORTED and AUTO chooses among the sparse routes. */
    const char *cublaslt_library;
    /* Packed input validation (twell_ffn_infer; see "Packed input" under Inference ops). ON:
     * every word of `packed` is checked against the TwELL layout on entry (count ≤ T, used slots
     * holding a positive value (finite, +Inf or the canonical NaN) and a column inside their
     * row-tile in ascending order, unused slots 0) and the first bad word is reported
     * (TWELL_ERR_INVALID_ARG), nothing computed. On CUDA this costs a small kernel and one host
     * synchronisation per call, and is skipped inside stream capture. OFF (the built-in default):
     * packed is trusted; a malformed one is never read out of bounds but gives unspecified y.
     * DEFAULT: ON when $TWELL_VALIDATE_PACKED is "1". */
    twell_switch validate_packed;
} twell_ctx_options;

/* Writes the default options (AUTO backend, device 0, default cache, no log, WARN, all cores,
 * every environment-backed field at its default) into the first struct_size bytes at opts: the
 * fields of this library that fit, zero for bytes past them (fields of a newer header, whose
 * defaults are zero), and opts->struct_size = struct_size. Call it through
 * twell_ctx_options_init, which passes the size the program was compiled with. Errors:
 * TWELL_ERR_INVALID_ARG for NULL opts or struct_size outside [sizeof(size_t),
 * TWELL_STRUCT_SIZE_MAX] (nothing written). Thread-safe. */
TWELL_API twell_status twell_ctx_options_init_sized(twell_ctx_options *opts, size_t struct_size);

/* twell_ctx_options_init(&o): the defaults, with o.struct_size = sizeof(twell_ctx_options) as
 * this header defines it. Fails only for NULL (TWELL_ERR_INVALID_ARG). */
static inline twell_status twell_ctx_options_init(twell_ctx_options *opts) {
    return twell_ctx_options_init_sized(opts, sizeof(twell_ctx_options));
}

/* Creates a context. opts may be NULL (defaults); else it must have been initialised by
 * twell_ctx_options_init (its struct_size is read first, then only the fields inside it: see "ABI
 * stability"). On success *out is the new context; on failure *out is NULL and the status says
 * why: TWELL_ERR_NO_DEVICE when CUDA was requested explicitly and no device is usable (AUTO falls
 * back to CPU instead, logging at INFO why CUDA was not used), TWELL_ERR_INVALID_ARG for bad
 * options (a struct_size out of range, or a field this library does not know set by a newer
 * header, included), TWELL_ERR_NO_MEMORY. A failed create has no context to hold a message; the
 * reason goes to opts->log (not for a struct_size out of range: no field of such a struct can be
 * trusted). The cache directory is created lazily; a cache that cannot be used degrades to memory
 * only with one warning, never an error. */
TWELL_API twell_status twell_ctx_create(const twell_ctx_options *opts, twell_ctx **out);

/* Destroys ctx and releases everything it owns (plans and training states created from it must
 * be destroyed first; behaviour is undefined otherwise). NULL is a no-op. Called while another
 * thread is in a call on ctx, it destroys nothing (the context stays valid and keeps its memory)
 * and logs the misuse at TWELL_LOG_ERROR. */
TWELL_API void twell_ctx_destroy(twell_ctx *ctx);

/* The message of the last failed call on ctx (or on a plan/state created from it), naming the
 * layer and raw code, e.g. "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION (6) at
 * templates/gate_pack/gate_pack_sm90.cu.lua:212"; "" when the last call succeeded. A call that
 * returned TWELL_ERR_MISUSE leaves the message as it was. Borrowed from ctx: valid until the
 * next call on ctx from any thread. ctx NULL gives "no context". Called while another thread is
 * in a call on ctx, it returns a static string saying so (never the message that call may be
 * rewriting: only the thread in a call writes or fetches the message). The pointer it returns
 * otherwise is the context's own: reading it while another thread starts a call on ctx races
 * with that call (undefined, and not detected), so a program that shares a context between
 * threads copies the message before handing the context on. */
TWELL_API const char *twell_ctx_errmsg(const twell_ctx *ctx);

/* The backend ctx actually uses (CPU or CUDA, never AUTO). Fixed at create: safe from any
 * thread. */
TWELL_API twell_backend twell_ctx_backend(const twell_ctx *ctx);

/* A static, human-readable name: "cpu" or "cuda". */
TWELL_API const char *twell_backend_name(twell_backend b);

/* A one-line description of what the context runs on, e.g. "cpu (2 threads)" or
 * "cuda:0 <the driver's device name> (sm_90a, 132 SMs)". Borrowed from ctx; fixed at create: safe
 * from any thread. */
TWELL_API const char *twell_ctx_device_name(const twell_ctx *ctx);

/* ---------------------------------------------------------------------------------------------
 * Shapes and the TwELL packed format
 *
 * Tensors are dense, row-major and contiguous:
 *   x  [M, K]   input tokens                      dtype
 *   Wg [N, K]   gate projection (nn.Linear layout) dtype
 *   Wu [N, K]   up projection                      dtype
 *   Wd [N, K]   down projection, row n = neuron n   dtype
 *   y  [M, K]   output                             dtype
 * Gated block:      g = relu(x·Wgᵀ), u = x·Wuᵀ, h = g ⊙ u, y = h·Wd.
 * Non-gated block:  h = relu(x·Wuᵀ), y = h·Wd.
 * Arithmetic is fp32 on 16-bit inputs. The packed gate (gated) or h (non-gated) holds values
 * rounded to dtype (round to nearest even); u and h·Wd products stay fp32; y is rounded once.
 *
 * TwELL layout. The [M, N] activation is cut into column tiles of width T. Each (row m, tile t)
 * owns W = T/C consecutive uint32 words starting at word m·(N/C) + t·W; the buffer is
 * [M, N/C] uint32, row-major:
 *   word 0         the exact number of non-zero activations in that row-tile (0..T); it may
 *                  exceed the slots (W-1): the row-tile then "overflows";
 *   words 1..W-1   slots, one active entry each, in ascending column order:
 *                    bits 31..16  the 16-bit value (bf16 or fp16 bit pattern, always > 0:
 *                                 positive finite, +Inf or the canonical NaN, below)
 *                    bits 15..0   the column index n within the full width N (0..N-1)
 *                  unused slots are 0. An overflowing row-tile stores its first W-1 entries; the
 *                  consumers recompute that row-tile exactly from x and the packing weight, so
 *                  nothing is lost. An activation is "non-zero" iff its rounded 16-bit value is
 *                  positive (relu output that rounds to +0 is not stored).
 * The bytes are a pure function of the inputs: deterministic across runs and backends.
 *
 * Non-finite values. NaN and ±Inf in x, Wg, Wu or Wd propagate as the dense computation
 * propagates them. relu is NaN-preserving: a NaN pre-activation (any sign or payload) is active
 * and stored as the dtype's canonical positive NaN (bf16 0x7fc0, fp16 0x7e00); +Inf (and a value
 * that rounds to +Inf) is active and stored as +Inf; -Inf, ±0 and negatives are inactive. So a NaN
 * in row m of x makes every activation of row m NaN and active (y row m NaN, as dense gives), a
 * NaN in row n of the packing weight makes neuron n active with a NaN gate in every row, and
 * every consumer multiplies a NaN or infinite gate or u into y as dense does (NaN·u = NaN,
 * Inf·0 = NaN). Training follows the same support: L0 counts NaN activations, L1 = Σ|Tm| and the
 * gradients (sign(U) of a NaN U is NaN) carry the non-finite values of the rows and neurons they
 * reach. What is promised, against the dense computation in which an inactive neuron contributes
 * nothing (h = 0 exactly, never 0·Wu or 0·Wd):
 *   - x, and the packing weight: on every backend and route, a value of y and dx is non-finite
 *     exactly where that dense computation's is; the CPU backend gives the same class (NaN, +Inf,
 *     -Inf) value for value, the weight gradients included (on CUDA a weight gradient of a
 *     neuron that a non-finite row of x does not use may be NaN: 0·Inf in a tile);
 *   - a non-finite value in a row n of Wu (gated) or Wd: the rows that use neuron n get the dense
 *     result's non-finite values; on the CPU backend every other row is finite. On CUDA the
 *     routes that compute rows and neurons in tensor-core tiles (the tiled pipeline and its
 *     overflow and heavy-row paths, the up/down small-batch kernels, the DENSE route, which
 *     computes every h = relu(g)·u including 0·NaN, and the training kernels) may also make
 *     other rows of the same tile, and the weight gradients they sum into, NaN: only rows whose
 *     dense result is non-finite are guaranteed non-finite; the other rows of a tile that holds
 *     a non-finite weight row are undefined (finite or NaN).
 * ------------------------------------------------------------------------------------------- */

typedef enum twell_dtype { TWELL_DTYPE_BF16 = 0, TWELL_DTYPE_FP16 = 1 } twell_dtype;

/* Plain-data description of one feed-forward layer shape, a sized struct (see "ABI stability"):
 * initialise it with twell_shape_init. Supported: K a multiple of 16 (the CUDA kernels may
 * additionally require a multiple of 64 and say so), 1 ≤ N ≤ 65536 a multiple of T, T a power of
 * two in [64, 256], C ∈ {2, 4, 8}. Every function taking a shape reads its struct_size first; a
 * struct_size out of range (0: not initialised) or a field this library does not know set is an
 * invalid shape (TWELL_ERR_INVALID_ARG naming shape.struct_size, or 0 from the pure functions). */
typedef struct twell_shape {
    size_t struct_size; /* set by twell_shape_init: sizeof as the caller compiled it */
    uint32_t K;         /* model width */
    uint32_t N;         /* hidden width */
    uint32_t T;         /* TwELL column tile, default 256 */
    uint32_t C;         /* compression factor, default 8 */
    twell_dtype dtype;  /* element type of x, weights and y */
    int gated;          /* non-zero: gated block (Wg, Wu, Wd); zero: non-gated (Wu, Wd) */
} twell_shape;

/* Writes a gated bf16 shape with T = 256, C = 8 for the given K and N into the first struct_size
 * bytes at shape (as twell_ctx_options_init_sized does for options: zero past the library's
 * fields, shape->struct_size = struct_size). Call it through twell_shape_init. K and N are not
 * checked here (twell_shape_check, twell_plan_create do). Errors: TWELL_ERR_INVALID_ARG for NULL
 * shape or struct_size outside [sizeof(size_t), TWELL_STRUCT_SIZE_MAX] (nothing written).
 * Thread-safe. */
TWELL_API twell_status twell_shape_init_sized(twell_shape *shape, size_t struct_size, uint32_t K,
                                              uint32_t N);

/* twell_shape_init(&s, K, N): the default shape for K, N, with s.struct_size =
 * sizeof(twell_shape) as this header defines it. Fails only for NULL (TWELL_ERR_INVALID_ARG). */
static inline twell_status twell_shape_init(twell_shape *shape, uint32_t K, uint32_t N) {
    return twell_shape_init_sized(shape, sizeof(twell_shape), K, N);
}

/* TWELL_OK if shape is supported, else TWELL_ERR_INVALID_ARG with a message naming the bad
 * field in ctx (ctx may be NULL: no message). Nothing else is touched. */
TWELL_API twell_status twell_shape_check(twell_ctx *ctx, const twell_shape *shape);

/* Words per row-tile (T/C), slots per row-tile (T/C - 1), and the packed buffer size for M rows:
 * M·N/C uint32 words, M·N/C·4 bytes. Pure functions; 0 for an invalid shape or on overflow. */
TWELL_API uint32_t twell_tile_words(const twell_shape *shape);
TWELL_API uint32_t twell_tile_slots(const twell_shape *shape);
TWELL_API size_t twell_packed_words(const twell_shape *shape, size_t M);
TWELL_API size_t twell_packed_bytes(const twell_shape *shape, size_t M);

/* Bytes of one element of dtype (2 for both supported types). */
TWELL_API size_t twell_dtype_size(twell_dtype dtype);

/* ---------------------------------------------------------------------------------------------
 * Plans
 *
 * A plan binds a validated shape to a context: it owns compiled kernels and tuned configurations
 * for that shape (CUDA), so a second call with the same plan launches without compiling,
 * allocating on the host or looking anything up. Borrowed by the ops for the call only.
 * ------------------------------------------------------------------------------------------- */

typedef struct twell_plan twell_plan;

/* Stream handle: a CUstream (cudaStream_t) on the CUDA backend, NULL for the default stream;
 * ignored by the CPU backend. Ops on the CUDA backend are asynchronous with respect to the host
 * unless stated otherwise; the CPU backend returns when results are written. */
typedef void *twell_stream;

/* Which implementation twell_ffn_infer (and, for training, twell_ffn_forward_train: see the
 * Training section) uses on the CUDA backend (twell_gate_pack is the same in every mode; the CPU
 * backend is exact in every mode and ignores this).
 *   SPARSE  the TwELL kernels: only active neurons are touched; any GPU. On Hopper (gated plans,
 *           sm_90a, K a multiple of 64, 16-byte aligned tensors), once a call has seen row-tiles
 *           overflow, rows with more than max(N/32, 64) active values (the first tokens of
 *           sequences) run as a gathered block (up to 1024 a row chunk) through two dense
 *           tensor-core GEMMs instead: those rows carry DENSE's rounding of h below, the others
 *           the sparse kernels'; no host synchronisation, capturable after twell_plan_reserve.
 *   DENSE   the dense computation through cuBLASLt (loaded at run time: options.cublaslt_library),
 *           x, the weights and y 16-byte aligned; where cuBLASLt cannot be loaded, or tensors are
 *           not aligned, twell_ffn_infer returns TWELL_ERR_UNSUPPORTED and writes nothing.
 *           g = relu(x·Wᵀ) (W = Wg gated, Wu non-gated) is the one the plan's cuBLASLt gate-pack
 *           left for this very call (same x, packing weight, packed, M and stream, and for a
 *           captured call the same capture), else computed here; then u = x·Wuᵀ in fp32 (gated),
 *           h = round(g ⊙ u) (non-gated: h = g), y = h·Wd; fp32 accumulation throughout. Every
 *           value is computed, so overflowing row-tiles need nothing extra (packed is only
 *           counted). Contract difference: h is rounded to dtype (nearest even) before the down
 *           projection, where the sparse path and the CPU backend keep it in fp32, and g is
 *           cuBLASLt's (another fp32 summation order than the gate-pack's kernels), so y may
 *           differ by about one dtype rounding of each h (row-relative L2 error against the CPU
 *           reference within 5e-3 in bf16 and 1e-3 in fp16, the sparse path's tolerances;
 *           measured errors in BENCHMARKS.md). Device workspace: u (fp32), h and, where the gate
 *           cannot be reused, g for a chunk of rows (about 48 MiB of u: 2048 rows at N = 5632),
 *           32 MiB for cuBLASLt, allocated at the first dense call or by twell_plan_reserve and
 *           grown (after waiting for the previous dense call) when a chunk grows.
 *   AUTO    the default: over a middle range of M the small-batch row kernel (see
 *           twell_ffn_infer) while the mean active values per row stay under its crossover with
 *           DENSE and the counts show no overflowing row-tile; else DENSE when that mean exceeds
 *           the dense crossover for the call's M; else, up to the small path's largest M, the
 *           small-batch kernels; else, up to a larger M, DENSE once the plan has met rows with
 *           overflowing row-tiles (heavy rows, e.g. sequences' first tokens: SPARSE recomputes
 *           them at a fixed cost a call); else SPARSE. What the plan knows: the counts of the
 *           most recent call that have reached the host, else the nnz_per_row given to
 *           twell_plan_reserve, else nothing (then not DENSE, except where the crossover is 0).
 *           Small-batch calls count one call in 16, and every call while the estimate is within
 *           half the crossover. A crossover is a fraction of N active per row for each range of
 *           M: the dense one highest at decode sizes, 0 (dense at every density) over the middle
 *           range where the sparse routes lose to cuBLAS, lower again for large M; after a DENSE
 *           call AUTO stays dense down to a fraction of it. The numbers are in one place, the
 *           code: the crossover tables (tw_policy_row, tw_policy_dense) in
 *           runtime/ops/ffn/ffn_policy.c, the ranges of M and the hysteresis (TW_POLICY_*) in
 *           runtime/ops/ffn/ffn_policy.h; their measurements in BENCHMARKS.md. The counts
 *           are copied back asynchronously and read only once they have arrived, so no call waits
 *           for the device in the steady state and the choice follows the data one call later.
 *           Where DENSE cannot run, AUTO chooses among the sparse routes. In a captured call the
 *           choice is fixed at capture (see "CUDA graphs").
 * Both paths are deterministic; their results differ at rounding level. */
typedef enum twell_path {
    TWELL_PATH_AUTO = 0,
    TWELL_PATH_SPARSE = 1,
    TWELL_PATH_DENSE = 2
} twell_path;

/* Creates a plan for shape on ctx. Errors: TWELL_ERR_INVALID_ARG (NULL arguments, unsupported
 * shape: the message names the field), TWELL_ERR_NO_MEMORY, and on CUDA the compile/load errors
 * of the kernel pipeline. *out is NULL on failure. */
TWELL_API twell_status twell_plan_create(twell_ctx *ctx, const twell_shape *shape,
                                         twell_plan **out);

/* Destroys plan; NULL is a no-op. Must not be in use by work still running on a stream the caller
 * has not synchronised (the CUDA backend synchronises the plan's resources before freeing).
 * Called while another thread is in a call on the plan's context, it destroys nothing and logs
 * the misuse at TWELL_LOG_ERROR. */
TWELL_API void twell_plan_destroy(twell_plan *plan);

/* The shape plan was created with (borrowed, valid for the plan's lifetime; fixed at create:
 * safe from any thread). Its struct_size is the library's sizeof(twell_shape), which may exceed
 * the caller's: read only the fields of your header. */
TWELL_API const twell_shape *twell_plan_shape(const twell_plan *plan);

/* Sets the path (default AUTO) of the plan's next inference and training calls.
 * TWELL_ERR_INVALID_ARG for an unknown value; whether DENSE can run is checked by the call (see
 * twell_path). */
TWELL_API twell_status twell_plan_set_path(twell_plan *plan, twell_path path);

/* twell_plan_tune flags: TWELL_TUNE_STORED_ONLY times nothing (it loads the stored winners, else
 * keeps the defaults); TWELL_TUNE_RETUNE times again where a winner is stored (it is replaced only
 * by a challenger at least 3% faster). */
#define TWELL_TUNE_STORED_ONLY 1u
#define TWELL_TUNE_RETUNE 2u

/* Tunes plan's kernels for M rows and loads the winners (CUDA), so that later calls whose M falls
 * in the same bucket (the power of two ≥ M) run them with nothing left to look up or compile.
 * For each op of the plan (gate-pack and fused inference; the dense route is cuBLASLt's, which
 * chooses its own algorithms): the stored winner of (op,
 * shape, bucket, this GPU and driver) when one is stored; else candidate configurations compiled
 * and timed now on synthetic sparse data, the fastest stored in the context's cache, where later
 * plans and other processes find it (`twell tune` does the same ahead of deployment). An op
 * whose kernel has no tuning space for this shape and device keeps its default configuration.
 * Plans otherwise only read stored winners (unless the context has options.tune_on_first_use),
 * so a process that never tunes never pays for it.
 *
 * Blocking: with no stored winner the call compiles, times and synchronises the device, seconds
 * per op (about 6 to 20 s, budget-limited); with stored winners, milliseconds. Call it at
 * start-up, never while a stream is being captured; twell_plan_reserve then resolves the tuned
 * kernels of every bucket up to the largest M for capture. flags: 0 (tune what has no winner),
 * TWELL_TUNE_STORED_ONLY (time nothing: resolve M's bucket from the store now) or
 * TWELL_TUNE_RETUNE. On the CPU backend there is nothing to tune: TWELL_OK. Errors:
 * TWELL_ERR_INVALID_ARG (NULL plan, M = 0, unknown flags, both flags), and those of tuning
 * (compile, CUDA, cache); the plan then runs what it ran before. */
TWELL_API twell_status twell_plan_tune(twell_plan *plan, size_t M, unsigned flags);

/* Prepares plan for calls of up to max_M rows, so that later calls of twell_gate_pack,
 * twell_ffn_infer and twell_ffn_layer with M ≤ max_M load, compile, tune, look up and allocate
 * nothing, and can be captured into a CUDA graph (see "CUDA graphs" below). nnz_per_row (0 ≤
 * nnz_per_row ≤ N) is the mean number of active values per row the caller expects: it sizes the
 * sparse path's lists (every value of min(max_M, 65536) rows at that mean, plus their padding) and
 * overflow buffers, and AUTO takes it as its density estimate until counts of real calls have
 * reached the host. On CUDA it resolves the tuned kernels of every M bucket up to max_M and
 * allocates: the sparse path's workspace (per row of min(max_M, 65536): about 4·N/T·2 bytes of
 * bookkeeping; per list slot, one per expected active value plus padding: 6 bytes, gated 10 + K/16;
 * per overflow row-tile the values can fill, about 2·T·2 bytes, and room for one row in 16 to
 * overflow, 16·K bytes each), where the dense path can run and the plan's path is not SPARSE, the
 * dense route's (u, h and g for a chunk of rows: see TWELL_PATH_DENSE; 32 MiB for cuBLASLt; the
 * cuBLASLt gate-pack's captured gate buffer, min(max_M, 1447)·N·2 bytes, or max_M rows when
 * DENSE is expected at max_M), and, where the small-batch kernels can run, theirs (about N·6
 * bytes per row of min(max_M, 256)). Buffers only grow; eager calls with denser data still grow
 * them as before. Data needing more than a captured call's reserved room is still computed exactly
 * (see "CUDA graphs"). May wait for the plan's earlier work (when a buffer is replaced). CPU
 * backend: checks the arguments, nothing else. Errors: TWELL_ERR_INVALID_ARG (NULL plan, max_M = 0,
 * nnz_per_row not in [0, N]), TWELL_ERR_NO_MEMORY (what was allocated before stays),
 * TWELL_ERR_CUDA. */
TWELL_API twell_status twell_plan_reserve(twell_plan *plan, size_t max_M, double nnz_per_row);

/* ---------------------------------------------------------------------------------------------
 * CUDA graphs
 *
 * twell_gate_pack, twell_ffn_infer and twell_ffn_layer can be captured on the caller's stream
 * (cuStreamBeginCapture / cudaStreamBeginCapture / torch.cuda.graph, any capture mode; not the
 * legacy default stream, which cannot be captured) and the graph replayed with new data in the same
 * buffers. A call sees the capture (cuStreamIsCapturing) and then enqueues kernels and memsets
 * only: it queries, records and waits for no event, synchronises nothing, copies nothing back and
 * allocates nothing. What it would otherwise decide on the host is fixed when it is captured:
 *   - the kernels: those of the call's M bucket as resolved by twell_plan_reserve or an earlier
 *     eager call (an unresolved bucket runs the default configuration);
 *   - the path of twell_ffn_infer: DENSE or SPARSE as set, AUTO the path its policy picks for M
 *     from the estimate the host holds at capture (the counts of earlier eager calls, else
 *     reserve's nnz_per_row, else none: sparse); captured calls count nothing for AUTO;
 *   - the workspace: as reserved (twell_plan_reserve) or grown by earlier eager calls. A
 *     captured sparse call whose data needs more list slots or overflow room than it holds runs
 *     the exact fallback kernel for that chunk of rows, decided on the device at each replay, so
 *     the result is exact (within the stated tolerance) whatever the data; its bytes then differ
 *     at rounding level from the tiled pipeline's. With no sparse workspace reserved at all a
 *     captured call runs that exact kernel throughout (slow; a warning is logged); more rows than
 *     reserved run in chunks of the reserved size. A captured call that AUTO would send to the
 *     small-batch kernels with more rows than their reserved workspace runs the tiled pipeline
 *     (gate-pack: its other kernel) instead. A captured DENSE call needs its workspace
 *     reserved (else TWELL_ERR_INVALID_ARG, nothing enqueued); AUTO then runs sparse. A captured
 *     call with x, a weight or y not 16-byte aligned needs the portable kernel loaded by an
 *     earlier eager call with such tensors (else TWELL_ERR_UNSUPPORTED).
 * Replays are bitwise identical to an eager call on the same plan that takes the same path and
 * kernels with the same workspace. The caller orders a graph's replays with the plan's other
 * calls (one stream, or its own events): the library orders eager calls across streams itself
 * but cannot see replays. The device buffers a graph was captured with stay allocated until the
 * plan is destroyed (eager calls that need larger ones allocate new ones); a graph must not be
 * replayed after its plan is destroyed.
 * Training calls are not capturable: a sparse twell_ffn_forward_train synchronises the host once
 * per call (it sizes its saved state from the exact counts: the host sync noted under Training),
 * a dense one queries an event and copies its count back for AUTO and allocates its workspace on
 * first use, and twell_ffn_backward may grow buffers; a capture that includes one fails or is
 * invalidated. Run them eagerly.
 * ------------------------------------------------------------------------------------------- */

/* ---------------------------------------------------------------------------------------------
 * Inference ops
 *
 * Common rules: M ≥ 1 rows. Pointers are host pointers on the CPU backend and device pointers
 * on the CUDA backend; they must not alias outputs. Inputs are only read, and only during the
 * call (or, on CUDA, the work it enqueues). On any error nothing is written to the outputs and
 * the message names the bad argument. Errors common to every op: TWELL_ERR_INVALID_ARG (NULL
 * plan or pointer, M = 0, a pointer of the wrong memory space where detectable, an output
 * overlapping another tensor),
 * TWELL_ERR_UNSUPPORTED (op not available on this backend/device yet), TWELL_ERR_CUDA.
 *
 * Pointer checks (CUDA; also the training ops). Each tensor pointer's memory space is asked of the
 * driver (one cuPointerGetAttributes): host memory is rejected (TWELL_ERR_INVALID_ARG, "<name> is
 * host memory ..."), device or managed memory is accepted. The check sees only the address the
 * pointer holds, never the buffer's size. A plan remembers the last 16 distinct addresses it
 * accepted (least recently used replaced first) and does not ask again about them, so a steady
 * stream of calls on the same weights and buffers makes no pointer query at all; a rejected
 * address is never remembered (asked again on every call). So an address is checked on its first
 * use by the plan, and again after 16 other addresses have been used since its last use. What the
 * driver says of an address it has accepted can change only if the memory there is freed: a
 * pointer into device memory the caller has freed since (the address reused for new device
 * memory, or left unmapped), or host memory that came to sit at such an address, is then not
 * detected, and the kernels read or write whatever is there. Detecting it was never promised
 * ("where detectable"); the driver usually keeps freed device addresses reserved, so host memory
 * landing there is unlikely. options.pointer_cache = TWELL_SWITCH_OFF (or TWELL_POINTER_CACHE=0)
 * asks about every pointer of every call, as before the cache. Results never depend on it.
 *
 * Packed input (twell_ffn_infer). packed is trusted by default: it should come from
 * twell_gate_pack of the same plan. A buffer that breaks the TwELL layout is never read out of
 * bounds, on any backend or route (a count above the slots is an overflowing row-tile and is
 * recomputed; a column outside its row-tile or past N reads no weight row beyond N), but y is
 * then unspecified; the CPU backend always rejects a count above T, a stored column outside its
 * row-tile and columns not ascending (TWELL_ERR_INVALID_ARG), as it always has. With
 * options.validate_packed ON (or $TWELL_VALIDATE_PACKED=1) every word is checked on entry,
 * before anything is computed or written: word 0 of each row-tile (the count c) ≤ T; each of the
 * min(c, W-1) used slots holds a value gate-pack can store in the plan's dtype: positive finite
 * (subnormals are fine), +Inf or the canonical NaN (see "Non-finite values"; not +0, -0,
 * negative, -Inf or another NaN) and a column inside the row-tile, above the
 * previous slot's; every slot past them is 0. The first bad word (the lowest index) gives
 * TWELL_ERR_INVALID_ARG with a message naming it: "packed word 133 (row 1, row-tile 0, slot 5)
 * is 0x80000041: value 0x8000 is -0, not an activation (positive, +Inf or the canonical NaN
 * 0x7fc0)". Overflowing row-tiles are checked
 * like the others; whether their stored entries are the first W-1 of the row-tile is not (that
 * needs x and the packing weight). Cost: on the CPU backend a pass over packed; on CUDA one small
 * kernel, an 8-byte copy back and one host synchronisation of the call's stream per call, so the
 * call is no longer asynchronous. A stream being captured into a CUDA graph cannot synchronise:
 * captured calls are not validated (one warning per plan is logged; the capture proceeds) and
 * nor are their replays; validate eager calls with the same buffers before capturing.
 * ------------------------------------------------------------------------------------------- */

/* Packs the activation of the packing weight w into TwELL: packed = twell(relu(x · wᵀ)).
 * w is Wg for a gated plan and Wu for a non-gated plan, [N, K] of dtype. packed receives
 * twell_packed_words(shape, M) uint32 words, every word written (unused slots 0). On CUDA, from
 * 33 to 1447 rows, and at any M whose twell_ffn_infer is expected to run DENSE (the plan's path,
 * or AUTO's estimate), the gate GEMM runs through cuBLASLt into a buffer of the plan and a packing
 * pass reads it back (x, w and packed 16-byte aligned; where cuBLASLt is unavailable the kernels
 * below run): the dense route of the matching twell_ffn_infer then reuses that gate. Up to 32
 * rows a kernel built for few rows runs (every SM streams its share of w once; sm_80+, K a
 * multiple of 32, x and w 16-byte aligned); its workspace is allocated by the plan's first call
 * of a larger M (up to 1024 rows). Different routes sum in different fp32 orders: a value within
 * fp32 rounding of 0 or of a 16-bit rounding edge may differ between calls of different M. */
TWELL_API twell_status twell_gate_pack(twell_plan *plan, size_t M, const void *x, const void *w,
                                       uint32_t *packed, twell_stream stream);

/* Fused inference from a packed activation (from twell_gate_pack with the same plan, x and
 * packing weight; "Packed input" above says what a malformed one gives, and how
 * options.validate_packed checks it), writing y [M, K] of dtype. On CUDA with the AUTO path the
 * small-batch kernels (sm_80+, K a multiple of 32, x, the weights and y 16-byte aligned) run: one
 * launch up to 16 rows; over AUTO's middle range of M (K ≤ 4096, no overflowing row-tile seen,
 * below its crossover: twell_path) the row kernel, one launch of one block a row, no workspace;
 * otherwise up to the small path's largest M (unless AUTO picks DENSE) two launches that read
 * each active row of Wu and Wd about once per call for all the rows that use it (workspace as
 * for twell_gate_pack); SPARSE runs the tiled pipeline at every M.
 *   gated plan:     wg = Wg (for overflowing row-tiles), wu = Wu, wd = Wd; y = (g ⊙ x·Wuᵀ)·Wd
 *   non-gated plan: wg must be NULL, wu = Wu (for overflowing row-tiles), wd = Wd; y = h·Wd
 * Only active neurons are touched; overflowing row-tiles are recomputed exactly. */
TWELL_API twell_status twell_ffn_infer(twell_plan *plan, size_t M, const void *x,
                                       const uint32_t *packed, const void *wg, const void *wu,
                                       const void *wd, void *y, twell_stream stream);

/* The inference layer from x in one call: y of twell_gate_pack(x, packing weight) then
 * twell_ffn_infer (their arguments: wg NULL for a non-gated plan, which packs with wu), packed the
 * caller's scratch of twell_packed_bytes(shape, M) bytes. On CUDA, where the call runs DENSE (the
 * plan's path, or AUTO's choice for M from its estimate; x, the weights and y 16-byte aligned),
 * cuBLASLt computes the gate and nothing is packed (packed is left as it was): AUTO's dense calls
 * cost the dense computation's time. One eager call in 16 that AUTO sends dense (the first
 * included) gate-packs anyway; its counts keep the estimate current, so AUTO returns to the sparse
 * routes when the data gets sparser. Otherwise packed holds the TwELL gate on return. y is the two
 * calls' (dense route: twell_path's DENSE contract); captured like them (route fixed at capture).
 * Frameworks whose layer runs from x call this rather than the two entry points. */
TWELL_API twell_status twell_ffn_layer(twell_plan *plan, size_t M, const void *x, const void *wg,
                                       const void *wu, const void *wd, void *y, uint32_t *packed,
                                       twell_stream stream);

/* ---------------------------------------------------------------------------------------------
 * Training (gated plans only)
 *
 * Forward:  P = relu(x·Wgᵀ) (rounded to dtype, sparse)   U = x·Wuᵀ on P's support (fp32)
 *           Tm = U ⊙ P   y = Tm·Wd   L0 = nnz(P)/M   L1 = Σ|Tm| / M
 * Backward, given dy [M, K] and the L1 coefficient λ:
 *           dT = (dy·Wdᵀ on the support) + (λ/M)·sign(U)
 *           dU = dT ⊙ P   dP = dT ⊙ U
 *           dx = dU·Wu + dP·Wg   dWu = dUᵀ·x   dWg = dPᵀ·x   dWd = Tmᵀ·dy
 * dx is written in dtype; dWg, dWu, dWd are written in fp32 (float), [N, K], overwritten (not
 * accumulated). The loss is taken as the caller's loss plus λ·L1.
 * ------------------------------------------------------------------------------------------- */

/* What the forward saves for the backward (packed gate, U on the support, spill for rows and
 * neurons denser than the compact form). Owned by the library; memory lives on the backend
 * (device memory on CUDA) and grows to fit the data, never dropping any of it. */
typedef struct twell_train_state twell_train_state;

/* Creates an empty training state for a gated plan. *out NULL on failure
 * (TWELL_ERR_INVALID_ARG for a non-gated plan, TWELL_ERR_NO_MEMORY). */
TWELL_API twell_status twell_train_state_create(twell_plan *plan, twell_train_state **out);

/* Destroys state; NULL is a no-op. Called while another thread is in a call on the context, it
 * destroys nothing and logs the misuse at TWELL_LOG_ERROR. */
TWELL_API void twell_train_state_destroy(twell_train_state *state);

/* Bytes of backend memory the state holds now (after a forward: the saved activations; on CUDA
 * plus the dense path's own workspace while it has one, not counting a workspace the caller
 * lent). 0 while another thread is in a call on the context (the sizes may be changing). */
TWELL_API size_t twell_train_state_bytes(const twell_train_state *state);

/* Bytes of backend memory a training step (forward + backward) of M rows with about nnz_per_row
 * active values per row needs in its state, for `path`:
 *   DENSE   (CUDA) exact: the dense path's workspace, M·N·10 bytes plus 256-byte alignment and
 *           a few KiB of per-tile partials: [M, 3N] dtype (dU | dP | Tm), [M, N] u32 (P and
 *           round(U) of each value); independent of the density;
 *   SPARSE  an estimate of the sparse state (its buffers are allocated and grown by the state
 *           itself, to the exact counts of each forward; skewed data may need more);
 *   AUTO    (CUDA) the larger of the two; on the CPU backend every path gives the SPARSE estimate.
 * *bytes is 0 on error: TWELL_ERR_INVALID_ARG for NULL arguments, M = 0, nnz_per_row outside
 * [0, N], an unknown path, or a size that overflows. */
TWELL_API twell_status twell_train_workspace_size(twell_plan *plan, size_t M, double nnz_per_row,
                                                  twell_path path, size_t *bytes);

/* Lends the state a device buffer of `bytes` bytes for the dense path's workspace (CUDA only:
 * TWELL_ERR_UNSUPPORTED on the CPU backend). ptr must be device memory of the context's device,
 * 256-byte aligned (cuMemAlloc's alignment); NULL detaches a lent buffer (the state then
 * allocates its own again when needed). Ownership: the buffer stays the caller's; the library
 * never frees it, reads and writes it only from work enqueued by forward/backward calls on this
 * state, and keeps the forward's saved activations in it until the next forward. The caller must
 * keep it valid and not touch it until the state is destroyed or the buffer detached, and must
 * not lend it to two states at once. While a buffer is lent the dense path never allocates: a
 * forward of M rows needs twell_train_workspace_size(plan, M, ·, TWELL_PATH_DENSE) bytes, or the
 * dense path reports TWELL_ERR_NO_MEMORY (AUTO then runs sparse). The sparse path keeps
 * allocating its own buffers. The call synchronises the device, frees the state's own dense
 * workspace and discards the saved forward (a backward needs a new forward). Errors:
 * TWELL_ERR_INVALID_ARG (NULL state, bytes 0, misaligned or host pointer), TWELL_ERR_CUDA. */
TWELL_API twell_status twell_train_state_set_workspace(twell_train_state *state, void *ptr,
                                                       size_t bytes);

/* Training ops run on both backends. On CUDA, the plan's path (twell_plan_set_path) picks the
 * forward's implementation and the backward follows whatever its forward ran (recorded in the
 * state):
 *   SPARSE  the TwELL kernels. twell_ffn_forward_train synchronises the host once per call (after
 *           the gate-pack and the device scans that count the active entries, to size the saved
 *           state; its buffers only grow, so steady-state steps do not allocate). Per active
 *           value they follow the CPU reference's rounding sequence, or (U and dT on tensor
 *           cores, where that route runs) sum in another fp32 order within the library's fp64
 *           tolerance, so results match the CPU backend to about the output rounding. The gate
 *           itself comes from tensor cores (the gate-pack, and the recount of row-tiles that
 *           overflow the slots), which sum in another order: a pre-activation within fp32
 *           rounding of 0 or of a 16-bit rounding edge may give another support or gate value
 *           than the CPU. Heavy rows (more active values than about 2.1% of N, at least 64: the
 *           first tokens of sequences) run as a block through the DENSE path's GEMMs where those
 *           can run (sm_90a, K % 64 == 0, 16-byte aligned tensors): those rows' y and dx and
 *           their terms of the weight gradients carry DENSE's rounding and bounds below; the
 *           other rows keep the sparse ones. L0 stays exact.
 *   DENSE   dense tensor-core GEMMs (Hopper sm_90a, K % 64 == 0, every tensor of the forward and
 *           the backward 16-byte aligned; elsewhere TWELL_ERR_UNSUPPORTED): forward = one GEMM
 *           pair for the gate and up projections (P, U, Tm in its epilogue, the stats from it)
 *           and one for y; backward = dy·Wdᵀ (dT, dU, dP in its epilogue), dx = [dU dP]·[Wu; Wg],
 *           and the three weight gradients in one GEMM, fp32. No host synchronisation in either.
 *           Cost independent of the density. Contract difference (as twell_path's DENSE for
 *           inference): U, Tm, dU and dP are rounded to dtype (nearest even) before the GEMMs
 *           that read them, where the sparse path and the CPU backend keep them in fp32, and
 *           L1 = Σ|round(Tm)|/M; so y, dx and the weight gradients differ from the CPU backend
 *           by about one dtype rounding of those values. Row-relative L2 error against the CPU
 *           stays within 1.5e-2 (bf16) / 3e-3 (fp16) for y, 1e-2 / 2e-3 for the fp32 weight
 *           gradients, 4e-3 / 1e-3 for L1, and 1.5e-2 / 3e-3 for dx except on rows with few
 *           active values whose terms cancel, where dP's rounding is amplified (up to 3e-2 /
 *           4e-3 allowed there); measured errors in BENCHMARKS.md. L0 is exact. The saved
 *           activations take M·N·10 bytes (see twell_train_workspace_size), whatever the density.
 *   AUTO    the first forward of a state whose M reaches DENSE's smallest M, where DENSE can run,
 *           is a probe: the SPARSE forward counts the active values (up to the one host
 *           synchronisation it makes anyway) and, when they exceed the threshold below, stops
 *           there, frees the count buffers it allocated and runs DENSE instead; so a sparse first
 *           step never allocates the dense workspace, and a dense one keeps no sparse buffers.
 *           Below that M SPARSE. Afterwards DENSE when the latest L0 the host knows (a sparse
 *           forward's own count, or a dense forward's count copied back asynchronously and read
 *           only once it has landed: no call waits for it) exceeds the threshold, a fraction of N
 *           active values per row where the two paths cross (a part of it to stay dense after a
 *           dense step), and M is at least that smallest M, else SPARSE. The numbers are in one
 *           place, the code: TW_TD_MIN_ROWS, TW_TD_DENSITY and TW_TD_STAY in
 *           runtime/ops/train/dense/cuda_train_dense.h (the rule, pure: train_auto.c); their
 *           measurements in BENCHMARKS.md.
 *           A sparse forward that cannot grow its state (out of memory) falls back to the dense
 *           path where it can run and its workspace fits, else returns TWELL_ERR_NO_MEMORY naming
 *           both reasons; a dense forward whose workspace cannot be had runs sparse.
 *   Memory: a state that runs sparse (any path) frees the dense path's own workspace after 4
 *           consecutive sparse forwards, once the work that used it has finished (checked without
 *           waiting; else at a later sparse forward), so a dense phase does not leave M·N·10
 *           bytes idle beside the sparse state. Each time a dense forward has to allocate
 *           it again after such a release, the number of sparse forwards the next release waits
 *           for doubles (up to 256): data at the switch does not free and allocate every step.
 *           A sparse forward that cannot allocate frees an idle dense workspace first. A lent
 *           workspace (twell_train_state_set_workspace) is never freed.
 * Both paths are deterministic: identical inputs give bitwise identical results. Ops are
 * asynchronous on `stream` apart from the synchronisation above. */

/* Training forward. Writes y [M, K] (dtype) and, when stats is not NULL, stats[0] = L0 and
 * stats[1] = L1 (two floats in the backend's memory space), and saves into state what
 * twell_ffn_backward needs (replacing any earlier forward). x, wg, wu, wd as in inference.
 * TWELL_ERR_NO_MEMORY if neither the sparse saved state nor the dense workspace fits (see the
 * paths above); nothing is dropped silently. */
TWELL_API twell_status twell_ffn_forward_train(twell_plan *plan, size_t M, const void *x,
                                               const void *wg, const void *wu, const void *wd,
                                               void *y, float *stats, twell_train_state *state,
                                               twell_stream stream);

/* Training backward for the forward saved in state (same plan, M, x and weights, which must be
 * unchanged). dy [M, K] dtype; lambda the L1 coefficient (≥ 0, finite). Writes dx [M, K] dtype
 * and dwg, dwu, dwd [N, K] float. TWELL_ERR_INVALID_ARG if state holds no forward, or one for
 * another plan or M. Deterministic: identical inputs give bitwise identical gradients. */
TWELL_API twell_status twell_ffn_backward(twell_plan *plan, twell_train_state *state, size_t M,
                                          const void *x, const void *wg, const void *wu,
                                          const void *wd, const void *dy, float lambda, void *dx,
                                          float *dwg, float *dwu, float *dwd, twell_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* TWELLRT_H */
