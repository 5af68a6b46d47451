/*
 * cuda_gate_pack.c — gate-pack on CUDA: picks a kernel variant once per plan (SM90 wgmma launcher
 * or the portable SIMT template templates/gate_pack_simt.cu.lua) and launches it on the caller's
 * stream with no host allocation, compile or cache lookup.
 */
#include "cuda_gate_pack.h"

#include "jit.h"

#include <stdlib.h>
#include <string.h>

/* SIMT template geometry (the template's defaults; its ABI is fixed: see gate_pack_simt.cu.lua).
 * Rows per block and threads per block. */
#define TW_SIMT_BM 32u
#define TW_SIMT_THREADS 256u
/* gridDim.y is limited to 65535: larger M is launched in row chunks. */
#define TW_GRID_Y_MAX 65535u

struct tw_gate_pack {
    tw_gp_variant variant;
    int modules_loaded;
    /* SIMT */
    tw_CUmodule mod;
    tw_CUfunction fn;
    /* SM90 */
    void *sm90;
};

const char *tw_gp_variant_name(tw_gp_variant v) {
    switch (v) {
    case TW_GP_AUTO:
        return "auto";
    case TW_GP_SIMT:
        return "simt";
    case TW_GP_SM90:
        return "sm90";
    }
    return NULL;
}

int tw_gp_variant_parse(const char *name) {
    if (!name)
        return -1;
    for (int v = TW_GP_AUTO; v <= TW_GP_SM90; v++)
        if (!strcmp(name, tw_gp_variant_name((tw_gp_variant)v)))
            return v;
    return -1;
}

static twell_status tw_simt_init(twell_plan *plan, tw_gate_pack *gp) {
    twell_ctx *ctx = plan->ctx;
    const twell_shape *s = &plan->shape;
    tw_param params[] = {
        {"K", NULL, (long long)s->K},
        {"N", NULL, (long long)s->N},
        {"T", NULL, (long long)s->T},
        {"C", NULL, (long long)s->C},
        {"dtype", s->dtype == TWELL_DTYPE_BF16 ? "bf16" : "fp16", 0},
        {"BM", NULL, (long long)TW_SIMT_BM},
        {"THREADS", NULL, (long long)TW_SIMT_THREADS},
    };
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    twell_status st = tw_jit_cubin(ctx, "gate_pack_simt", params, sizeof params / sizeof params[0],
                                   ctx->cuda->arch, &cubin);
    if (st != TWELL_OK)
        return st;
    st = tw_cu_module_load(ctx, cubin.data, &gp->mod);
    tw_cubin_free(&cubin);
    if (st != TWELL_OK)
        return st;
    gp->modules_loaded = 1;
    return tw_cu_module_function(ctx, gp->mod, "twell_gate_pack_simt", &gp->fn);
}

static twell_status tw_simt_launch(twell_plan *plan, tw_gate_pack *gp, size_t M, const void *x,
                                   const void *w, uint32_t *packed, twell_stream stream) {
    const twell_shape *s = &plan->shape;
    const size_t rows_per_launch = (size_t)TW_GRID_Y_MAX * TW_SIMT_BM;
    const size_t x_row_bytes = (size_t)s->K * 2u, packed_row_words = (size_t)(s->N / s->C);
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = s->N / s->T;
    cfg.grid[2] = 1;
    cfg.block[0] = TW_SIMT_THREADS;
    cfg.block[1] = cfg.block[2] = 1;
    for (size_t r0 = 0; r0 < M; r0 += rows_per_launch) {
        size_t rows = M - r0 < rows_per_launch ? M - r0 : rows_per_launch;
        const void *xa = (const char *)x + r0 * x_row_bytes;
        uint32_t *pa = packed + r0 * packed_row_words;
        int m = (int)rows;
        void *args[] = {(void *)&xa, (void *)&w, (void *)&pa, (void *)&m};
        cfg.grid[1] = (unsigned)((rows + TW_SIMT_BM - 1) / TW_SIMT_BM);
        twell_status st = tw_cu_launch(plan->ctx, gp->fn, &cfg, stream, args);
        if (st != TWELL_OK)
            return st;
    }
    return TWELL_OK;
}

twell_status tw_cuda_gate_pack_init(twell_plan *plan, tw_gp_variant want, tw_gate_pack **out) {
    *out = NULL;
    twell_ctx *ctx = plan->ctx;
    tw_gate_pack *gp = calloc(1, sizeof *gp);
    if (!gp)
        return tw_error(ctx, TWELL_ERR_NO_MEMORY, "gate_pack: out of memory for the plan state");
    twell_status st = TWELL_OK;
    int sm90_ok = tw_sm90_gate_pack_supports(&plan->shape, ctx->cuda);
    if (want == TW_GP_SM90 && !sm90_ok) {
        free(gp);
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED,
                        "gate_pack: the sm90 variant does not support this shape on %s (K=%u, "
                        "N=%u, T=%u, C=%u)",
                        ctx->cuda->arch, plan->shape.K, plan->shape.N, plan->shape.T,
                        plan->shape.C);
    }
    if ((want == TW_GP_AUTO || want == TW_GP_SM90) && sm90_ok) {
        st = tw_sm90_gate_pack_init(plan, &gp->sm90, &gp->modules_loaded);
        if (st == TWELL_OK) {
            gp->variant = TW_GP_SM90;
            *out = gp;
            return TWELL_OK;
        }
        if (st != TWELL_ERR_UNSUPPORTED || want == TW_GP_SM90) {
            free(gp);
            return st;
        }
        tw_log(ctx, TWELL_LOG_INFO, "gate_pack: sm90 variant unavailable (%s); using SIMT",
               twell_ctx_errmsg(ctx));
        gp->modules_loaded = 0;
    }
    gp->variant = TW_GP_SIMT;
    st = tw_simt_init(plan, gp);
    if (st != TWELL_OK) {
        tw_cuda_gate_pack_release(plan, gp);
        return st;
    }
    *out = gp;
    return TWELL_OK;
}

void tw_cuda_gate_pack_release(twell_plan *plan, tw_gate_pack *gp) {
    if (!gp)
        return;
    if (gp->variant == TW_GP_SM90)
        tw_sm90_gate_pack_release(plan, gp->sm90);
    tw_cu_module_unload(gp->mod);
    free(gp);
}

twell_status tw_cuda_gate_pack_launch(twell_plan *plan, tw_gate_pack *gp, size_t M, const void *x,
                                      const void *w, uint32_t *packed, twell_stream stream) {
    if (gp->variant == TW_GP_SM90)
        return tw_sm90_gate_pack_launch(plan, gp->sm90, M, x, w, packed, stream);
    return tw_simt_launch(plan, gp, M, x, w, packed, stream);
}

tw_gp_variant tw_cuda_gate_pack_variant(const tw_gate_pack *gp) {
    return gp ? gp->variant : TW_GP_AUTO;
}

int tw_cuda_gate_pack_modules_loaded(const tw_gate_pack *gp) { return gp ? gp->modules_loaded : 0; }
