/*
 * cuda_gate_pack_tiled.c — the tiled gate-pack kernels of both variants loaded and launched (the
 * SIMT template's launch here, SM90's in cuda_gate_pack_sm90.c): what a plan's state
 * (cuda_gate_pack.c) and the tuner (gate_pack_tuner.c) run.
 */
#include "cuda_gate_pack_tiled.h"

#include "jit.h"

#include <string.h>

/* gridDim.y is limited to 65535: larger M is launched in row chunks. */
#define TW_GRID_Y_MAX 65535u

/* ---- loaded kernels ---- */

twell_status tw_gp_kernel_load_image(twell_ctx *ctx, const twell_shape *s, const tw_gp_cfg *cfg,
                                     const void *cubin, tw_gp_kernel *out) {
    (void)s;
    memset(out, 0, sizeof *out);
    out->cfg = *cfg;
    const char *fn = cfg->variant == TW_GP_SM90 ? "twell_gate_pack_sm90" : "twell_gate_pack_simt";
    twell_status st = tw_cu_module_open(ctx, cubin, &fn, 1, &out->mod, &out->fn);
    if (st == TWELL_OK && cfg->variant == TW_GP_SM90)
        st = tw_sm90_kernel_prepare(ctx, out);
    if (st != TWELL_OK)
        tw_gp_kernel_unload(out);
    return st;
}

twell_status tw_gp_kernel_load(twell_ctx *ctx, const twell_shape *s, const tw_gp_cfg *cfg,
                               tw_gp_kernel *out) {
    memset(out, 0, sizeof *out);
    char why[192];
    if (tw_gp_cfg_check(cfg, s, ctx->cuda, why, sizeof why) != 0)
        return tw_error(ctx, TWELL_ERR_UNSUPPORTED, "gate_pack: %s", why);
    /* Only the variant's own parameters: the rendered source (hence the cache key) is the one
     * the tuner compiled for the same configuration. */
    tw_param use[TW_SHAPE_NPARAMS + 3];
    size_t np = tw_shape_params(s, use);
    if (cfg->variant == TW_GP_SM90) {
        use[np++] = (tw_param){"BK", NULL, (long long)cfg->bk};
        use[np++] = (tw_param){"STAGES", NULL, (long long)cfg->stages};
        use[np++] = (tw_param){"CLUSTER", NULL, (long long)cfg->cluster};
    } else {
        use[np++] = (tw_param){"BM", NULL, (long long)cfg->bm};
        use[np++] = (tw_param){"THREADS", NULL, (long long)cfg->threads};
    }
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    twell_status st = tw_jit_cubin(ctx, tw_gp_cfg_kernel(cfg), use, np, ctx->cuda->arch, &cubin);
    if (st != TWELL_OK)
        return st;
    st = tw_gp_kernel_load_image(ctx, s, cfg, cubin.data, out);
    tw_cubin_free(&cubin);
    return st;
}

void tw_gp_kernel_unload(tw_gp_kernel *k) {
    tw_cu_module_unload(k->mod);
    memset(k, 0, sizeof *k);
}

/* SIMT: grid (N/T, ceil(M/BM)), block THREADS, no dynamic shared memory (the template's ABI). */
static twell_status tw_simt_launch(twell_ctx *ctx, const tw_gp_kernel *k, const twell_shape *s,
                                   size_t M, const void *x, const void *w, uint32_t *packed,
                                   twell_stream stream) {
    const size_t bm = k->cfg.bm;
    const size_t rows_per_launch = (size_t)TW_GRID_Y_MAX * bm;
    const size_t x_row_bytes = (size_t)s->K * 2u, packed_row_words = (size_t)(s->N / s->C);
    tw_cu_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = s->N / s->T;
    cfg.grid[2] = 1;
    cfg.block[0] = k->cfg.threads;
    cfg.block[1] = cfg.block[2] = 1;
    for (size_t r0 = 0; r0 < M; r0 += rows_per_launch) {
        size_t rows = M - r0 < rows_per_launch ? M - r0 : rows_per_launch;
        const void *xa = (const char *)x + r0 * x_row_bytes;
        uint32_t *pa = packed + r0 * packed_row_words;
        int m = (int)rows;
        void *args[] = {(void *)&xa, (void *)&w, (void *)&pa, (void *)&m};
        cfg.grid[1] = (unsigned)((rows + bm - 1) / bm);
        twell_status st = tw_cu_launch(ctx, k->fn, &cfg, stream, args);
        if (st != TWELL_OK)
            return st;
    }
    return TWELL_OK;
}

twell_status tw_gp_kernel_launch(twell_ctx *ctx, const tw_gp_kernel *k, const twell_shape *s,
                                 size_t M, const void *x, const void *w, uint32_t *packed,
                                 twell_stream stream) {
    if (k->cfg.variant == TW_GP_SM90)
        return tw_sm90_kernel_launch(ctx, k, s, M, x, w, packed, stream);
    return tw_simt_launch(ctx, k, s, M, x, w, packed, stream);
}
