/*
 * gate_pack_lt.c — the plan's cuBLASLt resources and the cuBLASLt gate-pack route
 * (gate_pack_lt.h).
 */
#include "gate_pack_lt.h"

#include "jit.h"
#include "nvrtc.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Who wrote a gate buffer: the arguments of the pack that filled it. */
typedef struct tw_glt_tag {
    int valid;
    const void *x, *w;
    const uint32_t *packed;
    size_t M;
    twell_stream stream;
    uint64_t capture; /* the capture's id; 0 for an eager call */
} tw_glt_tag;

struct tw_gate_lt {
    int available;
    char why[400];
    tw_CUmodule mod;
    tw_CUfunction pack, count, mul, relu;
    tw_lt_set set; /* prepared GEMMs */
    void *ws;      /* cuBLASLt workspace (TW_LT_WORKSPACE bytes), allocated on first need */
    size_t ws_bytes;
    void *g_eager, *g_cap; /* [rows, N] dtype */
    size_t eager_rows, cap_rows;
    tw_glt_tag tag_eager, tag_cap;
    int captured;      /* a captured call used the buffers: replaced ones go to keep */
    tw_cuda_keep keep; /* buffers captured graphs may still use */
    tw_cuda_event done;
    uint64_t *acc;  /* the packing pass's count and overflow accumulators and arrivals (zero between
                     * launches) */
    int acc_zeroed; /* acc was allocated and zeroed (by the first eager call that counts) */
    int last;       /* the plan's last gate-pack ran this route */
    int used;
    twell_stream last_stream;
};

static size_t tw_glt_min(size_t a, size_t b) { return a < b ? a : b; }

twell_status tw_gate_lt_init(twell_plan *plan, tw_gate_lt **out) {
    *out = NULL;
    tw_gate_lt *lt = calloc(1, sizeof *lt);
    if (!lt)
        return tw_error(plan->ctx, TWELL_ERR_NO_MEMORY,
                        "gate_pack: out of memory for the cuBLASLt state");
    lt->available = -1; /* cuBLASLt is loaded at the first call that asks */
    *out = lt;
    return TWELL_OK;
}

/* Loads cuBLASLt and the packing module once; a failure only marks the route unavailable (one
 * warning). The caller's message is kept: this runs inside other calls. */
static void tw_glt_load(twell_plan *plan, tw_gate_lt *lt) {
    twell_ctx *ctx = plan->ctx;
    char saved[512];
    snprintf(saved, sizeof saved, "%s", tw_errmsg(ctx));
    char beside[512] = "";
    snprintf(beside, sizeof beside, "%s", tw_nvrtc_path());
    const char *dir = beside[0] ? dirname(beside) : NULL;
    tw_cu_scope sc;
    twell_status st = tw_cu_enter(ctx, &sc);
    if (st == TWELL_OK) {
        st = tw_lt_load(ctx, dir);
        if (st == TWELL_OK) {
            tw_param prm[TW_SHAPE_NPARAMS];
            size_t n = tw_shape_params(&plan->shape, prm);
            static const char *const fns[] = {"twell_pack_dense", "twell_pack_count",
                                              "twell_dense_mul", "twell_dense_relu"};
            tw_cubin cubin;
            memset(&cubin, 0, sizeof cubin);
            st = tw_jit_cubin(ctx, "gate_pack_dense", prm, n, ctx->cuda->arch, &cubin);
            tw_CUfunction f[4] = {NULL, NULL, NULL, NULL};
            if (st == TWELL_OK)
                st = tw_cu_module_open(ctx, cubin.data, fns, 4, &lt->mod, f);
            tw_cubin_free(&cubin);
            lt->pack = f[0], lt->count = f[1], lt->mul = f[2], lt->relu = f[3];
        }
        if (st == TWELL_OK)
            st = tw_cuda_event_create(ctx, &lt->done);

        tw_cu_leave(ctx, &sc);
    }
    if (st != TWELL_OK) {
        snprintf(lt->why, sizeof lt->why, "%s", tw_errmsg(ctx));
        tw_log(ctx, TWELL_LOG_WARN,
               "twellrt: the dense routes and the cuBLASLt gate-pack are unavailable (%s); AUTO "
               "chooses among the sparse routes",
               lt->why);
        lt->available = 0;
    } else {
        lt->available = 1;
    }
    if (saved[0]) /* the message as it was */
        (void)tw_error(ctx, TWELL_OK, "%s", saved);
    else
        tw_clear_error(ctx);
}

void tw_gate_lt_release(twell_plan *plan, tw_gate_lt *lt) {
    if (!lt)
        return;
    twell_ctx *ctx = plan->ctx;
    tw_lt_set_clear(&lt->set);
    tw_cu_module_unload(lt->mod);
    tw_cuda_keep_release(ctx, &lt->keep);
    tw_cuda_free(ctx, lt->ws);
    tw_cuda_free(ctx, lt->g_eager);
    tw_cuda_free(ctx, lt->g_cap);
    tw_cuda_free(ctx, lt->acc);
    tw_cuda_event_destroy(ctx, lt->done);
    free(lt);
}

int tw_gate_lt_available(twell_plan *plan, tw_gate_lt *lt, const char **why) {
    if (lt && lt->available < 0)
        tw_glt_load(plan, lt);
    if (why)
        *why = lt ? lt->why : "no plan state";
    return lt && lt->available == 1;
}

twell_status tw_gate_lt_begin(twell_plan *plan, tw_gate_lt *lt, twell_stream stream) {
    if (lt->used && stream != lt->last_stream)
        TW_TRY(tw_cuda_stream_wait_event(plan->ctx, stream, lt->done));
    return TWELL_OK;
}

twell_status tw_gate_lt_end(twell_plan *plan, tw_gate_lt *lt, twell_stream stream) {
    TW_TRY(tw_cuda_event_record(plan->ctx, lt->done, stream));
    lt->used = 1;
    lt->last_stream = stream;
    return TWELL_OK;
}

/* Waits for the plan's previous eager work before a buffer it may still use is replaced. */
static twell_status tw_glt_idle(twell_plan *plan, tw_gate_lt *lt) {
    return lt->used ? tw_cuda_event_synchronize(plan->ctx, lt->done) : TWELL_OK;
}

static twell_status tw_glt_workspace(twell_plan *plan, tw_gate_lt *lt) {
    if (lt->ws)
        return TWELL_OK;
    void *ws = NULL;
    twell_status st = tw_cuda_malloc(plan->ctx, TW_LT_WORKSPACE, &ws);
    if (st == TWELL_ERR_NO_MEMORY) { /* cuBLASLt runs without one, on fewer algorithms */
        tw_log(plan->ctx, TWELL_LOG_WARN, "gate_pack: no memory for cuBLASLt's workspace");
        return TWELL_OK;
    }
    TW_TRY(st);
    TW_TRY(tw_glt_idle(plan, lt)); /* algorithms chosen without it may still be running */
    lt->ws = ws;
    lt->ws_bytes = TW_LT_WORKSPACE;
    return TWELL_OK;
}

/* Grows the gate buffer *buf of *rows rows to at least want rows. */
static twell_status tw_glt_grow(twell_plan *plan, tw_gate_lt *lt, void **buf, size_t *rows,
                                size_t want) {
    if (want <= *rows)
        return TWELL_OK;
    void *p = NULL;
    TW_TRY(tw_cuda_malloc(plan->ctx, want * plan->shape.N * 2u, &p));
    twell_status st = *buf ? tw_glt_idle(plan, lt) : TWELL_OK; /* the old one may be in use */
    if (st != TWELL_OK) {
        tw_cuda_free(plan->ctx, p);
        return st;
    }
    tw_cuda_keep_free(plan->ctx, &lt->keep, lt->captured, *buf);
    *buf = p;
    *rows = want;
    return TWELL_OK;
}

twell_status tw_gate_lt_reserve(twell_plan *plan, tw_gate_lt *lt, size_t rows) {
    if (!tw_gate_lt_available(plan, lt, NULL))
        return TWELL_OK;
    TW_TRY(tw_lt_prepare_ctx(plan->ctx)); /* the handle outside any capture that follows */
    TW_TRY(tw_glt_workspace(plan, lt));
    if (rows > lt->cap_rows)
        lt->tag_cap.valid = 0;
    return tw_glt_grow(plan, lt, &lt->g_cap, &lt->cap_rows, rows);
}

twell_status tw_gate_lt_matmul(twell_plan *plan, tw_gate_lt *lt, const tw_lt_shape *shape,
                               const void *a, const void *b, void *d, twell_stream stream) {
    return tw_lt_matmul(plan->ctx, &lt->set, shape, a, b, d, lt->ws, lt->ws ? lt->ws_bytes : 0,
                        stream);
}

/* A grid-stride launch of 256-thread blocks over `items`, `per` a block, at most `per_sm` blocks
 * an SM. */
static twell_status tw_glt_grid_cap(twell_plan *plan, tw_CUfunction fn, size_t items, size_t per,
                                    size_t per_sm, twell_stream stream, void **args) {
    size_t sms = (size_t)plan->ctx->cuda->sm_count;
    size_t blocks = tw_glt_min((items + per - 1) / per, per_sm * sms);
    return tw_cu_launch_grid(plan->ctx, fn, blocks ? blocks : 1u, 1u, 256u, 0u, 0u, stream, args);
}

static twell_status tw_glt_grid(twell_plan *plan, tw_CUfunction fn, size_t items, size_t per,
                                twell_stream stream, void **args) {
    return tw_glt_grid_cap(plan, fn, items, per, 16u, stream, args);
}

twell_status tw_gate_lt_mul(twell_plan *plan, tw_gate_lt *lt, const void *g, const float *u,
                            void *h, size_t n, twell_stream stream) {
    long long n8 = (long long)(n / 8u);
    void *args[] = {(void *)&g, (void *)&u, &h, &n8};
    return tw_glt_grid(plan, lt->mul, n / 8u, 256u, stream, args);
}

twell_status tw_gate_lt_relu(twell_plan *plan, tw_gate_lt *lt, void *g, size_t n,
                             twell_stream stream) {
    long long n8 = (long long)(n / 8u);
    void *args[] = {&g, &g, &n8};
    return tw_glt_grid(plan, lt->relu, n / 8u, 256u, stream, args);
}

twell_status tw_gate_lt_count(twell_plan *plan, tw_gate_lt *lt, size_t M, const uint32_t *packed,
                              uint64_t *stats, twell_stream stream) {
    long long m = (long long)M;
    void *args[] = {(void *)&packed, &m, &stats};
    return tw_glt_grid(plan, lt->count, M * (plan->shape.N / plan->shape.T), 256u, stream, args);
}

static int tw_glt_match(const tw_glt_tag *t, size_t M, const void *x, const void *w,
                        const uint32_t *packed, twell_stream stream, uint64_t capture) {
    return t->valid && t->M == M && t->x == x && t->w == w && t->packed == packed &&
           t->stream == stream && t->capture == capture;
}

twell_status tw_gate_lt_pack(twell_plan *plan, tw_gate_lt *lt, size_t M, const void *x,
                             const void *w, uint32_t *packed, uint64_t *count_out, int capturing,
                             twell_stream stream, int *ran) {
    *ran = 0;
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    uint64_t cap = 0;
    void *g;
    tw_glt_tag *tag;
    if (capturing) {
        if (M > lt->cap_rows)
            return TWELL_OK;
        TW_TRY(tw_cuda_stream_capture_id(ctx, stream, &cap));
        g = lt->g_cap;
        tag = &lt->tag_cap;
    } else {
        TW_TRY(tw_glt_workspace(plan, lt));
        lt->tag_eager.valid = 0; /* while it is rewritten */
        TW_TRY(tw_glt_grow(plan, lt, &lt->g_eager, &lt->eager_rows, M));
        TW_TRY(tw_gate_lt_begin(plan, lt, stream));
        g = lt->g_eager;
        tag = &lt->tag_eager;
    }
    tag->valid = 0;
    const tw_lt_shape gemm = {M, s->N, s->K, 1, tw_lt_type_of(s->dtype), tw_lt_type_of(s->dtype)};
    TW_TRY(tw_gate_lt_matmul(plan, lt, &gemm, x, w, g, stream));
    long long m = (long long)M;
    uint64_t *out = capturing ? NULL : count_out; /* captured calls count nothing */
    if (out && !lt->acc_zeroed) {
        /* allocated and zeroed by the first eager call that counts: the load may run inside a
         * global-mode capture, which an allocation or a copy would invalidate */
        if (!lt->acc)
            TW_TRY(tw_cuda_malloc(ctx, 24u, (void **)&lt->acc));
        TW_TRY(tw_cuda_memset_d32(ctx, lt->acc, 0u, 6u, stream));
        lt->acc_zeroed = 1;
    }
    void *args[] = {&g, &m, (void *)&packed, (void *)&lt->acc, (void *)&out};
    /* 8 warps a block, 4 row-tiles a warp in flight; one wave of 4 blocks an SM (its registers
     * allow 4), each looping over its share: fewer blocks also mean fewer same-address atomics */
    TW_TRY(tw_glt_grid_cap(plan, lt->pack, M * (s->N / s->T), 32u, 4u, stream, args));
    if (capturing)
        lt->captured = 1;
    else
        TW_TRY(tw_gate_lt_end(plan, lt, stream));
    *tag = (tw_glt_tag){1, x, w, packed, M, stream, cap};
    *ran = 1;
    lt->last = 1;
    return TWELL_OK;
}

const void *tw_gate_lt_gate_for(twell_plan *plan, const tw_gate_lt *lt, size_t M, const void *x,
                                const void *w, const uint32_t *packed, int capturing,
                                twell_stream stream) {
    if (!capturing)
        return tw_glt_match(&lt->tag_eager, M, x, w, packed, stream, 0) ? lt->g_eager : NULL;
    uint64_t cap = 0;
    if (tw_cuda_stream_capture_id(plan->ctx, stream, &cap) != TWELL_OK || cap == 0)
        return NULL;
    return tw_glt_match(&lt->tag_cap, M, x, w, packed, stream, cap) ? lt->g_cap : NULL;
}

void tw_gate_lt_forget(tw_gate_lt *lt) {
    if (lt)
        lt->tag_eager.valid = lt->tag_cap.valid = lt->last = 0;
}

int tw_gate_lt_last(const tw_gate_lt *lt) { return lt ? lt->last : 0; }

tw_cuda_event tw_gate_lt_done_event(const tw_gate_lt *lt) { return lt->done; }

int tw_gate_lt_used(const tw_gate_lt *lt) { return lt && lt->used; }
