/* plan.c — shapes, plans, training states and the public op entry points: every argument is
 * validated here (message naming the bad argument, nothing written on error), then the op is
 * dispatched to the CPU or CUDA backend. */
#include "internal.h"

#include "shape.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- shapes ---- */

twell_status twell_shape_init_sized(twell_shape *shape, size_t struct_size, uint32_t K,
                                    uint32_t N) {
    return tw_shape_init(shape, struct_size, K, N);
}

static twell_status tw_shape_check_held(twell_ctx *ctx, const twell_shape *shape) {
    twell_shape s = {0};
    twell_status st = tw_shape_import(ctx, "twell_shape_check", shape, &s);
    if (st == TWELL_OK)
        tw_clear_error(ctx);
    return st;
}

twell_status twell_shape_check(twell_ctx *ctx, const twell_shape *shape) {
    if (!ctx)
        return tw_shape_check_held(NULL, shape);
    TW_TRY(tw_ctx_enter(ctx));
    return tw_ctx_leave(ctx, tw_shape_check_held(ctx, shape));
}

uint32_t twell_tile_words(const twell_shape *shape) {
    twell_shape s = {0};
    if (tw_shape_import(NULL, "", shape, &s) != TWELL_OK)
        return 0;
    return s.T / s.C;
}

uint32_t twell_tile_slots(const twell_shape *shape) {
    uint32_t w = twell_tile_words(shape);
    return w ? w - 1 : 0;
}

size_t twell_packed_words(const twell_shape *shape, size_t M) {
    twell_shape s = {0};
    if (tw_shape_import(NULL, "", shape, &s) != TWELL_OK)
        return 0;
    size_t row = s.N / s.C;
    if (M > SIZE_MAX / row)
        return 0;
    return M * row;
}

size_t twell_packed_bytes(const twell_shape *shape, size_t M) {
    size_t w = twell_packed_words(shape, M);
    if (w > SIZE_MAX / sizeof(uint32_t))
        return 0;
    return w * sizeof(uint32_t);
}

/* ---- plans ---- */

static twell_status tw_plan_create_held(twell_ctx *ctx, const twell_shape *shape,
                                        twell_plan **out) {
    if (out)
        *out = NULL;
    if (!ctx)
        return TWELL_ERR_INVALID_ARG;
    if (!out)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "twell_plan_create: out is NULL");
    twell_shape s = {0};
    twell_status st = tw_shape_import(ctx, "twell_plan_create", shape, &s);
    if (st != TWELL_OK)
        return st;
    twell_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "twell_plan_create: out of memory");
    plan->ctx = ctx;
    plan->shape = s;
    plan->shape.gated = s.gated ? 1 : 0;
    plan->path = TWELL_PATH_AUTO;
    if (ctx->backend == TWELL_BACKEND_CUDA) {
        st = tw_cuda_plan_init(plan);
        if (st != TWELL_OK) {
            free(plan);
            return st; /* the backend recorded the message */
        }
    }
    tw_clear_error(ctx);
    *out = plan;
    return TWELL_OK;
}

twell_status twell_plan_create(twell_ctx *ctx, const twell_shape *shape, twell_plan **out) {
    if (out)
        *out = NULL;
    if (!ctx)
        return TWELL_ERR_INVALID_ARG;
    TW_TRY(tw_ctx_enter(ctx));
    return tw_ctx_leave(ctx, tw_plan_create_held(ctx, shape, out));
}

static void tw_plan_destroy_held(twell_plan *plan) {
    if (!plan)
        return;
    if (plan->ctx->backend == TWELL_BACKEND_CUDA)
        tw_cuda_plan_release(plan);
    free(plan);
}

void twell_plan_destroy(twell_plan *plan) {
    if (!plan)
        return;
    twell_ctx *ctx = plan->ctx;
    if (tw_ctx_enter(ctx) != TWELL_OK) {
        tw_log(ctx, TWELL_LOG_ERROR,
               "twell_plan_destroy: another thread is in a call on the plan's context; not "
               "destroyed");
        return;
    }
    tw_plan_destroy_held(plan);
    tw_ctx_leave(ctx, TWELL_OK);
}

const twell_shape *twell_plan_shape(const twell_plan *plan) { return plan ? &plan->shape : NULL; }

static twell_status tw_plan_set_path_held(twell_plan *plan, twell_path path) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    if (path != TWELL_PATH_AUTO && path != TWELL_PATH_SPARSE && path != TWELL_PATH_DENSE)
        return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG,
                        "twell_plan_set_path: path = %d is not a twell_path", (int)path);
    plan->path = path;
    tw_clear_error(plan->ctx);
    return TWELL_OK;
}

twell_status twell_plan_set_path(twell_plan *plan, twell_path path) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    TW_TRY(tw_ctx_enter(plan->ctx));
    return tw_ctx_leave(plan->ctx, tw_plan_set_path_held(plan, path));
}

static twell_status tw_plan_tune_held(twell_plan *plan, size_t M, unsigned flags) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    twell_ctx *ctx = plan->ctx;
    if (M == 0)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "twell_plan_tune: M is 0");
    const unsigned known = TWELL_TUNE_STORED_ONLY | TWELL_TUNE_RETUNE;
    if ((flags & ~known) != 0 || (flags & (TWELL_TUNE_STORED_ONLY | TWELL_TUNE_RETUNE)) == known)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "twell_plan_tune: flags 0x%x (TWELL_TUNE_STORED_ONLY and "
                        "TWELL_TUNE_RETUNE exclude each other; no other bits)",
                        flags);
    if (ctx->backend == TWELL_BACKEND_CUDA) {
        twell_status st = tw_cuda_plan_tune(plan, M, flags);
        if (st != TWELL_OK)
            return st;
    }
    tw_clear_error(ctx);
    return TWELL_OK;
}

twell_status twell_plan_tune(twell_plan *plan, size_t M, unsigned flags) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    TW_TRY(tw_ctx_enter(plan->ctx));
    return tw_ctx_leave(plan->ctx, tw_plan_tune_held(plan, M, flags));
}

static twell_status tw_plan_reserve_held(twell_plan *plan, size_t max_M, double nnz_per_row) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    if (max_M == 0)
        return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG,
                        "twell_plan_reserve: max_M is 0 (at least one row needed)");
    if (!(nnz_per_row >= 0.0 && nnz_per_row <= (double)plan->shape.N))
        return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG,
                        "twell_plan_reserve: nnz_per_row = %g is not in [0, N = %u]", nnz_per_row,
                        plan->shape.N);
    size_t row_bytes = (size_t)plan->shape.K * 2u;
    if (max_M > SIZE_MAX / row_bytes / 8u)
        return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG,
                        "twell_plan_reserve: max_M = %zu is too large", max_M);
    twell_status st = TWELL_OK;
    if (plan->ctx->backend == TWELL_BACKEND_CUDA)
        st = tw_cuda_plan_reserve(plan, max_M, nnz_per_row);
    if (st == TWELL_OK)
        tw_clear_error(plan->ctx);
    return st;
}

twell_status twell_plan_reserve(twell_plan *plan, size_t max_M, double nnz_per_row) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    TW_TRY(tw_ctx_enter(plan->ctx));
    return tw_ctx_leave(plan->ctx, tw_plan_reserve_held(plan, max_M, nnz_per_row));
}

/* ---- training states ---- */

static twell_status tw_train_state_create_held(twell_plan *plan, twell_train_state **out) {
    if (out)
        *out = NULL;
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    if (!out)
        return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG, "twell_train_state_create: out is NULL");
    if (!plan->shape.gated)
        return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG,
                        "twell_train_state_create: plan is not gated (training needs a gated "
                        "plan)");
    twell_train_state *state = calloc(1, sizeof *state);
    if (!state)
        return tw_error(plan->ctx, TWELL_ERR_NO_MEMORY, "twell_train_state_create: out of memory");
    state->plan = plan;
    tw_clear_error(plan->ctx);
    *out = state;
    return TWELL_OK;
}

twell_status twell_train_state_create(twell_plan *plan, twell_train_state **out) {
    if (out)
        *out = NULL;
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    TW_TRY(tw_ctx_enter(plan->ctx));
    return tw_ctx_leave(plan->ctx, tw_train_state_create_held(plan, out));
}

static void tw_train_state_destroy_held(twell_train_state *state) {
    if (!state)
        return;
    if (state->plan->ctx->backend == TWELL_BACKEND_CUDA)
        tw_cuda_train_state_release(state);
    else
        tw_cpu_train_state_release(state);
    free(state);
}

void twell_train_state_destroy(twell_train_state *state) {
    if (!state)
        return;
    twell_ctx *ctx = state->plan->ctx;
    if (tw_ctx_enter(ctx) != TWELL_OK) {
        tw_log(ctx, TWELL_LOG_ERROR,
               "twell_train_state_destroy: another thread is in a call on the state's context; "
               "not destroyed");
        return;
    }
    tw_train_state_destroy_held(state);
    tw_ctx_leave(ctx, TWELL_OK);
}

static size_t tw_train_state_bytes_held(const twell_train_state *state) {
    if (!state)
        return 0;
    size_t dense = state->plan->ctx->backend == TWELL_BACKEND_CUDA ? tw_ctd_held(state) : 0u;
    return state->bytes + dense;
}

size_t twell_train_state_bytes(const twell_train_state *state) {
    if (!state)
        return 0;
    twell_ctx *ctx = state->plan->ctx;
    if (tw_ctx_enter(ctx) != TWELL_OK)
        return 0;
    size_t bytes = tw_train_state_bytes_held(state);
    tw_ctx_leave(ctx, TWELL_OK);
    return bytes;
}

/* The sparse state's size estimate (train_layout of both backends): packed gate and U per word,
 * overflow masks and per-tile/per-row offsets, then per active value the spill bound, the
 * forward's column and Tm, the backward's dU, dP and the neuron-major token and entry lists. */
static size_t tw_sparse_estimate(const twell_shape *s, size_t M, double nnz_per_row, int cuda) {
    double words = (double)M * (s->N / s->C), tiles = (double)M * (s->N / s->T);
    double nnz = nnz_per_row * (double)M;
    double b = 8.0 * words + tiles * (s->T / 8u) + 16.0 * (tiles + 1.0) + 24.0 * ((double)M + 1.0) +
               32.0 * nnz + 32.0 * ((double)s->N + 1.0);
    if (cuda && s->K % 64u == 0) /* tiled U/dT (cuda_train_tiled.c): dT per word, spill dT, the
                                    lists' per-row arrays, and per pair slot (entries + padding of
                                    up to 15 per list of 8 tokens x 512 neurons) desc, gate and
                                    the K/64 slices of phase A */
        b += 4.0 * words + 4.0 * nnz + 8.0 * tiles + 16.0 * (double)M +
             (6.0 + 4.0 * (s->K / 64u)) *
                 (nnz + 15.0 * ((double)M / 8.0 + 1.0) * ((double)s->N / 512.0 + 1.0));
    return b >= (double)SIZE_MAX ? 0 : (size_t)b;
}

static twell_status tw_train_workspace_size_held(twell_plan *plan, size_t M, double nnz_per_row,
                                                 twell_path path, size_t *bytes) {
    if (bytes)
        *bytes = 0;
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    const twell_shape *s = &plan->shape;
    if (!bytes || M == 0 || !(nnz_per_row >= 0.0) || nnz_per_row > (double)s->N ||
        (path != TWELL_PATH_AUTO && path != TWELL_PATH_SPARSE && path != TWELL_PATH_DENSE))
        return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG,
                        "twell_train_workspace_size: needs bytes != NULL, M >= 1, 0 <= "
                        "nnz_per_row <= N and a twell_path");
    size_t sparse = tw_sparse_estimate(s, M, nnz_per_row, plan->ctx->backend == TWELL_BACKEND_CUDA);
    size_t dense = plan->ctx->backend == TWELL_BACKEND_CUDA ? tw_ctd_bytes(s, M) : 0u;
    if (sparse == 0 || (plan->ctx->backend == TWELL_BACKEND_CUDA && dense == 0))
        return tw_error(plan->ctx, TWELL_ERR_INVALID_ARG,
                        "twell_train_workspace_size: M = %zu overflows", M);
    if (plan->ctx->backend != TWELL_BACKEND_CUDA || path == TWELL_PATH_SPARSE)
        *bytes = sparse;
    else if (path == TWELL_PATH_DENSE)
        *bytes = dense;
    else
        *bytes = sparse > dense ? sparse : dense;
    tw_clear_error(plan->ctx);
    return TWELL_OK;
}

twell_status twell_train_workspace_size(twell_plan *plan, size_t M, double nnz_per_row,
                                        twell_path path, size_t *bytes) {
    if (bytes)
        *bytes = 0;
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    TW_TRY(tw_ctx_enter(plan->ctx));
    return tw_ctx_leave(plan->ctx, tw_train_workspace_size_held(plan, M, nnz_per_row, path, bytes));
}

static twell_status tw_train_state_set_workspace_held(twell_train_state *state, void *ptr,
                                                      size_t bytes) {
    if (!state)
        return TWELL_ERR_INVALID_ARG;
    twell_ctx *ctx = state->plan->ctx;
    if (ctx->backend != TWELL_BACKEND_CUDA)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "twell_train_state_set_workspace: the CPU backend allocates its host "
                        "memory itself");
    if (ptr && (bytes == 0 || (uintptr_t)ptr % 256u != 0))
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "twell_train_state_set_workspace: ptr must be 256-byte aligned and bytes "
                        "> 0");
    if (ptr && tw_cuda_pointer_kind(ctx, ptr) == 0)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "twell_train_state_set_workspace: ptr is host memory, not device memory");
    twell_status st = tw_ctd_set_workspace(state, ptr, bytes);
    if (st == TWELL_OK) {
        state->M = 0; /* a dense forward saved in the old workspace is gone */
        tw_clear_error(ctx);
    }
    return st;
}

twell_status twell_train_state_set_workspace(twell_train_state *state, void *ptr, size_t bytes) {
    if (!state)
        return TWELL_ERR_INVALID_ARG;
    twell_ctx *ctx = state->plan->ctx;
    TW_TRY(tw_ctx_enter(ctx));
    return tw_ctx_leave(ctx, tw_train_state_set_workspace_held(state, ptr, bytes));
}

/* ---- op argument validation ---- */

/* Validation context of one op call: where messages go, the function name they start with, and
 * the plan's accepted addresses (NULL: ask the driver about every pointer; see tw_check_ptr). */
typedef struct {
    twell_ctx *ctx;
    const char *fn;
    tw_ptr_cache *seen;
} tw_args;

static tw_args tw_args_of(twell_plan *plan, const char *fn) {
    tw_args a = {plan->ctx, fn, NULL};
    if (plan->ctx->backend == TWELL_BACKEND_CUDA && plan->ctx->pointer_cache)
        a.seen = &plan->seen;
    return a;
}

/* NULL check and memory-space check of one tensor pointer. On CUDA with the pointer cache on, an
 * address the plan accepted recently passes without a driver query (twellrt.h, "Pointer checks":
 * what the check sees of an address changes only when the memory there is freed); only accepted
 * addresses are remembered, so a rejected one is asked about again on every call. */
static twell_status tw_check_ptr(const tw_args *a, const void *p, const char *name) {
    if (!p)
        return tw_error(a->ctx, TWELL_ERR_INVALID_ARG, "%s: %s is NULL", a->fn, name);
    if (a->seen && tw_ptr_cache_hit(a->seen, p))
        return TWELL_OK;
    int kind = tw_cuda_pointer_kind(a->ctx, p);
    if (a->ctx->backend == TWELL_BACKEND_CPU && kind == 1)
        return tw_error(a->ctx, TWELL_ERR_INVALID_ARG,
                        "%s: %s is device memory but the context uses the CPU backend (host "
                        "pointers expected)",
                        a->fn, name);
    if (a->ctx->backend == TWELL_BACKEND_CUDA && kind == 0)
        return tw_error(a->ctx, TWELL_ERR_INVALID_ARG,
                        "%s: %s is host memory but the context uses the CUDA backend (device "
                        "pointers expected)",
                        a->fn, name);
    if (a->seen)
        tw_ptr_cache_add(a->seen, p);
    return TWELL_OK;
}

/* Checks M and that every tensor of M rows has a byte size that fits in size_t. */
static twell_status tw_check_rows(const tw_args *a, const twell_shape *s, size_t M) {
    if (M == 0)
        return tw_error(a->ctx, TWELL_ERR_INVALID_ARG, "%s: M is 0 (at least one row needed)",
                        a->fn);
    size_t row_bytes = (size_t)s->K * 2u;
    size_t packed_row = (size_t)(s->N / s->C) * sizeof(uint32_t);
    if (row_bytes > packed_row ? M > SIZE_MAX / row_bytes : M > SIZE_MAX / packed_row)
        return tw_error(a->ctx, TWELL_ERR_INVALID_ARG,
                        "%s: M = %zu is too large (tensor sizes overflow size_t)", a->fn, M);
    return TWELL_OK;
}

/* Byte ranges of an output and an input must not overlap. */
typedef struct {
    const void *p;
    size_t bytes;
    const char *name;
} tw_range;

static int tw_overlap(const tw_range *r1, const tw_range *r2) {
    uintptr_t a = (uintptr_t)r1->p, b = (uintptr_t)r2->p;
    return a < b + r2->bytes && b < a + r1->bytes;
}

/* r[0..nout) are the outputs, r[nout..n) the inputs; NULL entries (optional) are skipped. */
static twell_status tw_check_alias(const tw_args *a, const tw_range *r, size_t nout, size_t n) {
    for (size_t i = 0; i < nout; i++)
        for (size_t j = 0; j < n; j++)
            if (j != i && r[i].p && r[j].p && tw_overlap(&r[i], &r[j]))
                return tw_error(a->ctx, TWELL_ERR_INVALID_ARG, "%s: %s overlaps %s", a->fn,
                                r[i].name, r[j].name);
    return TWELL_OK;
}

/* ---- ops ---- */

static twell_status tw_gate_pack_held(twell_plan *plan, size_t M, const void *x, const void *w,
                                      uint32_t *packed, twell_stream stream) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    tw_args a = tw_args_of(plan, "twell_gate_pack");
    const twell_shape *s = &plan->shape;
    TW_TRY(tw_check_rows(&a, s, M));
    TW_TRY(tw_check_ptr(&a, x, "x"));
    TW_TRY(tw_check_ptr(&a, w, s->gated ? "w (Wg)" : "w (Wu)"));
    TW_TRY(tw_check_ptr(&a, packed, "packed"));
    size_t xb = M * s->K * 2u, wb = (size_t)s->N * s->K * 2u;
    tw_range all[] = {{packed, twell_packed_bytes(s, M), "packed"}, {x, xb, "x"}, {w, wb, "w"}};
    TW_TRY(tw_check_alias(&a, all, 1, 3));
    twell_status st = plan->ctx->backend == TWELL_BACKEND_CUDA
                          ? tw_cuda_gate_pack(plan, M, x, w, packed, stream)
                          : tw_cpu_gate_pack(plan, M, x, w, packed);
    if (st == TWELL_OK)
        tw_clear_error(plan->ctx);
    return st;
}

twell_status twell_gate_pack(twell_plan *plan, size_t M, const void *x, const void *w,
                             uint32_t *packed, twell_stream stream) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    TW_TRY(tw_ctx_enter(plan->ctx));
    return tw_ctx_leave(plan->ctx, tw_gate_pack_held(plan, M, x, w, packed, stream));
}

static twell_status tw_ffn_infer_held(twell_plan *plan, size_t M, const void *x,
                                      const uint32_t *packed, const void *wg, const void *wu,
                                      const void *wd, void *y, twell_stream stream) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    tw_args a = tw_args_of(plan, "twell_ffn_infer");
    const twell_shape *s = &plan->shape;
    TW_TRY(tw_check_rows(&a, s, M));
    TW_TRY(tw_check_ptr(&a, x, "x"));
    TW_TRY(tw_check_ptr(&a, packed, "packed"));
    if (s->gated)
        TW_TRY(tw_check_ptr(&a, wg, "wg (required by a gated plan)"));
    else if (wg)
        return tw_error(a.ctx, TWELL_ERR_INVALID_ARG,
                        "twell_ffn_infer: wg must be NULL for a non-gated plan");
    TW_TRY(tw_check_ptr(&a, wu, "wu"));
    TW_TRY(tw_check_ptr(&a, wd, "wd"));
    TW_TRY(tw_check_ptr(&a, y, "y"));
    size_t xb = M * s->K * 2u, wb = (size_t)s->N * s->K * 2u;
    tw_range all[] = {{y, xb, "y"},   {x, xb, "x"},   {packed, twell_packed_bytes(s, M), "packed"},
                      {wg, wb, "wg"}, {wu, wb, "wu"}, {wd, wb, "wd"}};
    TW_TRY(tw_check_alias(&a, all, 1, 6));
    twell_status st = plan->ctx->backend == TWELL_BACKEND_CUDA
                          ? tw_cuda_ffn_infer(plan, M, x, packed, wg, wu, wd, y, stream)
                          : tw_cpu_ffn_infer(plan, M, x, packed, wg, wu, wd, y);
    if (st == TWELL_OK)
        tw_clear_error(plan->ctx);
    return st;
}

twell_status twell_ffn_infer(twell_plan *plan, size_t M, const void *x, const uint32_t *packed,
                             const void *wg, const void *wu, const void *wd, void *y,
                             twell_stream stream) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    TW_TRY(tw_ctx_enter(plan->ctx));
    return tw_ctx_leave(plan->ctx, tw_ffn_infer_held(plan, M, x, packed, wg, wu, wd, y, stream));
}

static twell_status tw_ffn_layer_held(twell_plan *plan, size_t M, const void *x, const void *wg,
                                      const void *wu, const void *wd, void *y, uint32_t *packed,
                                      twell_stream stream) {
    tw_args a = tw_args_of(plan, "twell_ffn_layer");
    const twell_shape *s = &plan->shape;
    TW_TRY(tw_check_rows(&a, s, M));
    TW_TRY(tw_check_ptr(&a, x, "x"));
    if (s->gated)
        TW_TRY(tw_check_ptr(&a, wg, "wg (required by a gated plan)"));
    else if (wg)
        return tw_error(a.ctx, TWELL_ERR_INVALID_ARG,
                        "twell_ffn_layer: wg must be NULL for a non-gated plan");
    TW_TRY(tw_check_ptr(&a, wu, "wu"));
    TW_TRY(tw_check_ptr(&a, wd, "wd"));
    TW_TRY(tw_check_ptr(&a, y, "y"));
    TW_TRY(tw_check_ptr(&a, packed, "packed"));
    size_t xb = M * s->K * 2u, wb = (size_t)s->N * s->K * 2u;
    tw_range all[] = {{y, xb, "y"},   {packed, twell_packed_bytes(s, M), "packed"},
                      {x, xb, "x"},   {wg, wb, "wg"},
                      {wu, wb, "wu"}, {wd, wb, "wd"}};
    TW_TRY(tw_check_alias(&a, all, 2, 6));
    twell_status st;
    if (plan->ctx->backend == TWELL_BACKEND_CUDA) {
        st = tw_cuda_ffn_layer(plan, M, x, wg, wu, wd, y, packed, stream);
    } else {
        st = tw_cpu_gate_pack(plan, M, x, s->gated ? wg : wu, packed);
        if (st == TWELL_OK)
            st = tw_cpu_ffn_infer(plan, M, x, packed, wg, wu, wd, y);
    }
    if (st == TWELL_OK)
        tw_clear_error(plan->ctx);
    return st;
}

twell_status twell_ffn_layer(twell_plan *plan, size_t M, const void *x, const void *wg,
                             const void *wu, const void *wd, void *y, uint32_t *packed,
                             twell_stream stream) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    TW_TRY(tw_ctx_enter(plan->ctx));
    return tw_ctx_leave(plan->ctx, tw_ffn_layer_held(plan, M, x, wg, wu, wd, y, packed, stream));
}

/* Shared by forward and backward: a gated plan and a state created from it. */
static twell_status tw_check_train(const tw_args *a, const twell_plan *plan,
                                   const twell_train_state *state) {
    if (!plan->shape.gated)
        return tw_error(a->ctx, TWELL_ERR_INVALID_ARG,
                        "%s: plan is not gated (training needs a gated plan)", a->fn);
    if (!state)
        return tw_error(a->ctx, TWELL_ERR_INVALID_ARG, "%s: state is NULL", a->fn);
    if (state->plan != plan)
        return tw_error(a->ctx, TWELL_ERR_INVALID_ARG, "%s: state was created for another plan",
                        a->fn);
    return TWELL_OK;
}

static twell_status tw_ffn_forward_train_held(twell_plan *plan, size_t M, const void *x,
                                              const void *wg, const void *wu, const void *wd,
                                              void *y, float *stats, twell_train_state *state,
                                              twell_stream stream) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    tw_args a = tw_args_of(plan, "twell_ffn_forward_train");
    const twell_shape *s = &plan->shape;
    TW_TRY(tw_check_train(&a, plan, state));
    TW_TRY(tw_check_rows(&a, s, M));
    TW_TRY(tw_check_ptr(&a, x, "x"));
    TW_TRY(tw_check_ptr(&a, wg, "wg"));
    TW_TRY(tw_check_ptr(&a, wu, "wu"));
    TW_TRY(tw_check_ptr(&a, wd, "wd"));
    TW_TRY(tw_check_ptr(&a, y, "y"));
    if (stats)
        TW_TRY(tw_check_ptr(&a, stats, "stats"));
    size_t xb = M * s->K * 2u, wb = (size_t)s->N * s->K * 2u;
    tw_range all[] = {{y, xb, "y"},   {stats, 2 * sizeof(float), "stats"},
                      {x, xb, "x"},   {wg, wb, "wg"},
                      {wu, wb, "wu"}, {wd, wb, "wd"}};
    TW_TRY(tw_check_alias(&a, all, 2, 6));
    state->M = 0; /* the backend replaces the earlier forward; none is valid until it succeeds */
    twell_status st = plan->ctx->backend == TWELL_BACKEND_CUDA
                          ? tw_cuda_forward_train(plan, M, x, wg, wu, wd, y, stats, state, stream)
                          : tw_cpu_forward_train(plan, M, x, wg, wu, wd, y, stats, state);
    if (st == TWELL_OK) {
        state->M = M;
        tw_clear_error(plan->ctx);
    }
    return st;
}

twell_status twell_ffn_forward_train(twell_plan *plan, size_t M, const void *x, const void *wg,
                                     const void *wu, const void *wd, void *y, float *stats,
                                     twell_train_state *state, twell_stream stream) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    TW_TRY(tw_ctx_enter(plan->ctx));
    return tw_ctx_leave(plan->ctx,
                        tw_ffn_forward_train_held(plan, M, x, wg, wu, wd, y, stats, state, stream));
}

static twell_status tw_ffn_backward_held(twell_plan *plan, twell_train_state *state, size_t M,
                                         const void *x, const void *wg, const void *wu,
                                         const void *wd, const void *dy, float lambda, void *dx,
                                         float *dwg, float *dwu, float *dwd, twell_stream stream) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    tw_args a = tw_args_of(plan, "twell_ffn_backward");
    const twell_shape *s = &plan->shape;
    TW_TRY(tw_check_train(&a, plan, state));
    TW_TRY(tw_check_rows(&a, s, M));
    if (state->M == 0)
        return tw_error(a.ctx, TWELL_ERR_INVALID_ARG,
                        "twell_ffn_backward: state holds no forward (call "
                        "twell_ffn_forward_train first)");
    if (state->M != M)
        return tw_error(a.ctx, TWELL_ERR_INVALID_ARG,
                        "twell_ffn_backward: M = %zu differs from the saved forward's M = %zu", M,
                        state->M);
    TW_TRY(tw_check_ptr(&a, x, "x"));
    TW_TRY(tw_check_ptr(&a, wg, "wg"));
    TW_TRY(tw_check_ptr(&a, wu, "wu"));
    TW_TRY(tw_check_ptr(&a, wd, "wd"));
    TW_TRY(tw_check_ptr(&a, dy, "dy"));
    if (!isfinite(lambda) || lambda < 0.0f)
        return tw_error(a.ctx, TWELL_ERR_INVALID_ARG,
                        "twell_ffn_backward: lambda = %g is not finite and >= 0", (double)lambda);
    TW_TRY(tw_check_ptr(&a, dx, "dx"));
    TW_TRY(tw_check_ptr(&a, dwg, "dwg"));
    TW_TRY(tw_check_ptr(&a, dwu, "dwu"));
    TW_TRY(tw_check_ptr(&a, dwd, "dwd"));
    size_t xb = M * s->K * 2u, wb = (size_t)s->N * s->K * 2u, gb = wb * 2u;
    tw_range all[] = {{dx, xb, "dx"},   {dwg, gb, "dwg"}, {dwu, gb, "dwu"},
                      {dwd, gb, "dwd"}, {x, xb, "x"},     {wg, wb, "wg"},
                      {wu, wb, "wu"},   {wd, wb, "wd"},   {dy, xb, "dy"}};
    TW_TRY(tw_check_alias(&a, all, 4, 9));
    twell_status st =
        plan->ctx->backend == TWELL_BACKEND_CUDA
            ? tw_cuda_backward(plan, state, M, x, wg, wu, wd, dy, lambda, dx, dwg, dwu, dwd, stream)
            : tw_cpu_backward(plan, state, M, x, wg, wu, wd, dy, lambda, dx, dwg, dwu, dwd);
    if (st == TWELL_OK)
        tw_clear_error(plan->ctx);
    return st;
}

twell_status twell_ffn_backward(twell_plan *plan, twell_train_state *state, size_t M, const void *x,
                                const void *wg, const void *wu, const void *wd, const void *dy,
                                float lambda, void *dx, float *dwg, float *dwu, float *dwd,
                                twell_stream stream) {
    if (!plan)
        return TWELL_ERR_INVALID_ARG;
    TW_TRY(tw_ctx_enter(plan->ctx));
    return tw_ctx_leave(plan->ctx, tw_ffn_backward_held(plan, state, M, x, wg, wu, wd, dy, lambda,
                                                        dx, dwg, dwu, dwd, stream));
}
