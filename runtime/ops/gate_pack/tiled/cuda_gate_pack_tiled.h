/*
 * cuda_gate_pack_tiled.h — the tiled gate-pack route's interface (relu(x·wᵀ) packed to TwELL by one
 * kernel): its variants (the portable SIMT template, cuda_gate_pack_tiled.c; the Hopper wgmma/TMA
 * launcher, cuda_gate_pack_sm90.c) and their configurations (gate_pack_config.h), one loaded
 * kernel per configuration, its load and launch.
 */
#ifndef TWELL_CUDA_GATE_PACK_TILED_H
#define TWELL_CUDA_GATE_PACK_TILED_H

#include "cuda_driver.h"
#include "gate_pack_config.h"

/* ---- one loaded kernel of one configuration ---- */

typedef struct tw_gp_kernel {
    tw_gp_cfg cfg;
    tw_CUmodule mod;
    tw_CUfunction fn;
    unsigned smem;         /* SM90: dynamic shared memory per CTA, bytes (0 for SIMT) */
    unsigned max_clusters; /* SM90: the persistent grid's size in clusters (one CTA per SM) */
} tw_gp_kernel;

/* Renders cfg's template for shape s, takes its cubin from the cache or compiles it
 * (tw_jit_cubin), and loads it into *out. Context current. Errors: those of tw_gp_cfg_check
 * (TWELL_ERR_UNSUPPORTED), tw_jit_cubin and the driver; *out zeroed on failure. */
twell_status tw_gp_kernel_load(twell_ctx *ctx, const twell_shape *s, const tw_gp_cfg *cfg,
                               tw_gp_kernel *out);
/* The same from a cubin compiled elsewhere (the tuner compiles on worker threads). */
twell_status tw_gp_kernel_load_image(twell_ctx *ctx, const twell_shape *s, const tw_gp_cfg *cfg,
                                     const void *cubin, tw_gp_kernel *out);
/* Unloads the module and zeroes *k. Context current. A zeroed kernel is a no-op. */
void tw_gp_kernel_unload(tw_gp_kernel *k);
/* Enqueues the op over rows [0, M) on stream. x [M, K], w [N, K], packed [M, N/C]: device
 * pointers, validated by the caller. No host allocation, compile, cache lookup or
 * synchronisation. Context current. */
twell_status tw_gp_kernel_launch(twell_ctx *ctx, const tw_gp_kernel *k, const twell_shape *s,
                                 size_t M, const void *x, const void *w, uint32_t *packed,
                                 twell_stream stream);

/* ---------------------------------------------------------------------------------------------
 * The SM90 variant's launcher (cuda_gate_pack_sm90.c), for
 * templates/gate_pack/gate_pack_sm90.cu.lua (its configurations' rules are in gate_pack_config.c):
 *
 * - tw_sm90_kernel_prepare: after loading, sets the dynamic shared memory limit and sizes the
 *   persistent grid.
 * - tw_sm90_kernel_launch: encodes the two TMA tensor maps (host-only, allocation-free) and
 *   enqueues one persistent cluster launch; writes every word of packed, deterministic.
 * ------------------------------------------------------------------------------------------- */
twell_status tw_sm90_kernel_prepare(twell_ctx *ctx, tw_gp_kernel *k);
twell_status tw_sm90_kernel_launch(twell_ctx *ctx, const tw_gp_kernel *k, const twell_shape *s,
                                   size_t M, const void *x, const void *w, uint32_t *packed,
                                   twell_stream stream);

#endif /* TWELL_CUDA_GATE_PACK_TILED_H */
