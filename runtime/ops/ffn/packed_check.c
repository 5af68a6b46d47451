/*
 * packed_check.c — packed input validation on CUDA (packed_check.h): one kernel finds the lowest
 * bad word, the host copies that row-tile back and names the fault with the CPU's rule.
 */
#include "packed_check.h"

#include "cuda_module.h"
#include "twell_format.h"

#include <stdlib.h>

struct tw_packed_check {
    tw_CUmodule mod;
    tw_CUfunction fn;
    void *first;        /* the module's twell_packed_first */
    int warned_capture; /* the "skipped in capture" warning was logged */
};

/* Loads the check module into pc (a failed load leaves it unloaded: the next call tries again). */
static twell_status tw_pc_load(twell_plan *plan, tw_packed_check *pc) {
    twell_ctx *ctx = plan->ctx;
    tw_param prm[TW_SHAPE_NPARAMS];
    size_t n = tw_shape_params(&plan->shape, prm);
    static const char *const names[] = {"twell_packed_check"};
    twell_status st = tw_template_module(ctx, "packed_check", prm, n, names, 1, &pc->mod, &pc->fn);
    size_t bytes = 0;
    if (st == TWELL_OK)
        st = tw_cu_module_global(ctx, pc->mod, "twell_packed_first", &pc->first, &bytes);
    if (st == TWELL_OK && bytes != sizeof(uint64_t))
        st = tw_error(ctx, TWELL_ERR_INTERNAL,
                      "twell_ffn_infer: packed_check's twell_packed_first has %zu bytes", bytes);
    if (st != TWELL_OK) {
        tw_cu_module_unload(pc->mod);
        pc->mod = NULL;
        pc->fn = NULL;
        pc->first = NULL;
    }
    return st;
}

void tw_packed_check_release(tw_packed_check *pc) {
    if (!pc)
        return;
    tw_cu_module_unload(pc->mod);
    free(pc);
}

/* Word `first` was found bad on the device: copy its row-tile back and name the fault. */
static twell_status tw_pc_report(twell_plan *plan, size_t M, const uint32_t *packed, uint64_t first,
                                 twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    const uint32_t W = s->T / s->C, NT = s->N / s->T;
    const uint64_t g = first / W; /* the row-tile m·NT + t */
    if (g >= (uint64_t)M * NT)
        return tw_error(ctx, TWELL_ERR_INTERNAL,
                        "twell_ffn_infer: the packed check named word %llu of a buffer of %zu "
                        "rows",
                        (unsigned long long)first, M);
    uint32_t tile[128]; /* W ≤ T/2 = 128 */
    TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, tile, packed + g * W, W * sizeof *tile, stream));
    TW_TRY(tw_cuda_stream_synchronize(ctx, stream));
    tw_packed_fault f;
    f.row = (size_t)(g / NT);
    f.tile = (uint32_t)(g % NT);
    int slot = tw_packed_tile_fault(s, tile, f.tile, TW_PKF_ALL, &f.fault);
    if (slot != (int)(first % W))
        return tw_error(ctx, TWELL_ERR_INTERNAL,
                        "twell_ffn_infer: the packed check kernel named word %llu (slot %u), the "
                        "host rule finds slot %d of that row-tile: they disagree",
                        (unsigned long long)first, (unsigned)(first % W), slot);
    f.slot = (uint32_t)slot;
    f.word = (size_t)first;
    f.value = tile[slot];
    f.count = tile[0];
    f.prev = slot >= 2 ? tile[slot - 1] : 0u;
    char what[256];
    tw_packed_fault_describe(s, &f, what, sizeof what);
    return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                    "twell_ffn_infer: %s (packed input validation is on)", what);
}

twell_status tw_packed_check_run(twell_plan *plan, tw_packed_check **pc, size_t M,
                                 const uint32_t *packed, twell_stream stream) {
    twell_ctx *ctx = plan->ctx;
    if (!*pc && !(*pc = calloc(1, sizeof **pc)))
        return tw_error(ctx, TWELL_ERR_NO_MEMORY,
                        "twell_ffn_infer: out of memory for the packed check");
    tw_packed_check *c = *pc;
    int capturing = 0;
    TW_TRY(tw_cuda_stream_capturing(ctx, stream, &capturing));
    if (capturing) {
        if (!c->warned_capture)
            tw_log(ctx, TWELL_LOG_WARN,
                   "twell_ffn_infer: packed input validation is skipped while the stream is "
                   "being captured (it needs a host synchronisation); eager calls are checked");
        c->warned_capture = 1;
        return TWELL_OK;
    }
    if (!c->fn)
        TW_TRY(tw_pc_load(plan, c));
    const twell_shape *s = &plan->shape;
    long long m = (long long)M;
    size_t words = M * (s->N / s->C);
    size_t blocks = tw_cdiv(words, 256u), cap = 8u * (size_t)ctx->cuda->sm_count;
    void *first = c->first;
    void *args[] = {(void *)&packed, &m, &first};
    TW_TRY(tw_cuda_memset_d32(ctx, c->first, 0xffffffffu, 2u, stream));
    TW_TRY(
        tw_cu_launch_grid(ctx, c->fn, blocks < cap ? blocks : cap, 1u, 256u, 0u, 0u, stream, args));
    uint64_t found = 0;
    TW_TRY(tw_cuda_memcpy_dtoh_async(ctx, &found, c->first, sizeof found, stream));
    TW_TRY(tw_cuda_stream_synchronize(ctx, stream));
    if (found == UINT64_MAX)
        return TWELL_OK;
    return tw_pc_report(plan, M, packed, found, stream);
}
