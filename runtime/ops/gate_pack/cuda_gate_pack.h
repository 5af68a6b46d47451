/*
 * cuda_gate_pack.h — the gate-pack op on CUDA (relu(x·wᵀ) packed to TwELL): its kernel variants
 * (the portable SIMT template in cuda_gate_pack.c, the Hopper wgmma/TMA launcher in
 * cuda_gate_pack_sm90.c), their tunable configurations, and the per-plan state that picks a
 * tuned configuration per M bucket.
 */
#ifndef TWELL_CUDA_GATE_PACK_H
#define TWELL_CUDA_GATE_PACK_H

#include "cuda_driver.h"

/* Which kernel computes gate-pack. AUTO: SM90 when the device is sm_90a and
 * tw_sm90_gate_pack_supports() accepts the shape (falling back to SIMT if loading it reports
 * TWELL_ERR_UNSUPPORTED), else SIMT. */
typedef enum tw_gp_variant { TW_GP_AUTO = 0, TW_GP_SIMT = 1, TW_GP_SM90 = 2 } tw_gp_variant;

/* "auto", "simt", "sm90"; NULL for anything else. */
const char *tw_gp_variant_name(tw_gp_variant v);
/* Parses a name above; -1 if unknown. */
int tw_gp_variant_parse(const char *name);

/* ---- configurations: the template parameters of a variant that the autotuner chooses ---- */

typedef struct tw_gp_cfg {
    tw_gp_variant variant;        /* SIMT or SM90 */
    unsigned bm, threads;         /* SIMT: rows per CTA (BM), threads per CTA (THREADS) */
    unsigned bk, stages, cluster; /* SM90: K per stage (BK), pipeline depth (STAGES), CTAs per
                                     cluster along M (CLUSTER) */
} tw_gp_cfg;

/* The untuned configuration of v (SIMT: BM 32, THREADS 256; SM90: BK 64, STAGES 3, CLUSTER 2):
 * what a plan uses when no tuned winner is stored. */
tw_gp_cfg tw_gp_cfg_default(tw_gp_variant v);

/* The template a configuration renders ("gate_pack_simt", "gate_pack_sm90"). */
const char *tw_gp_cfg_kernel(const tw_gp_cfg *c);

/* Converts a tuner configuration (autotune/candidates.h: kernel gate_pack_simt with BM, THREADS
 * or gate_pack_sm90 with BK, STAGES, CLUSTER; missing parameters take the defaults) into *out.
 * Returns 0, or -1 for another kernel or a value outside 1..65535. */
struct tw_tune_config;
int tw_gp_cfg_from_tune(const struct tw_tune_config *tc, tw_gp_cfg *out);

/* 0 when cfg can run shape s on dev (its template accepts it and it fits the device); else -1
 * with the reason in why (may be NULL). Pure and cheap. */
int tw_gp_cfg_check(const tw_gp_cfg *cfg, const twell_shape *s, const tw_cuda *dev, char *why,
                    size_t n);

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

/* ---- per-plan state ---- */

/* Per-plan gate-pack state: the chosen variant, its default-config kernel, and the tuned kernels
 * of the M buckets seen so far. */
typedef struct tw_gate_pack tw_gate_pack;

/* Picks a variant (want: AUTO or a forced one) and loads its DEFAULT configuration (cache hit or
 * compile): a plan is ready without tuning, and its first calls are never slowed by tuning.
 * Tuned winners are consulted lazily per M bucket by tw_cuda_gate_pack_launch (see
 * cuda_gate_pack.c). Reads TWELL_TUNE once. Must be called inside tw_cu_enter/leave. Forcing
 * SM90 on a device or shape it does not support gives TWELL_ERR_UNSUPPORTED. *out NULL on
 * failure. */
twell_status tw_cuda_gate_pack_init(twell_plan *plan, tw_gp_variant want, tw_gate_pack **out);
void tw_cuda_gate_pack_release(twell_plan *plan, tw_gate_pack *gp); /* NULL is a no-op */

/* Resolves the kernel for M's bucket (done once per bucket, then memoised): the stored tuning
 * winner for (gate_pack, shape, bucket, this device) when there is one whose kernel is this
 * plan's variant (its module loaded now, compiled only if the cache lost the cubin), else the
 * default. With TWELL_TUNE=1 in the environment at plan creation, a bucket without a record is
 * tuned here first (tw_tune_gpu, 20 s budget; it synchronises the device). Never fails: a
 * problem is logged (WARN) and the bucket uses the default. *cfg (may be NULL) receives the
 * configuration chosen. Enters the plan's context itself (when resolving). */
void tw_cuda_gate_pack_prepare(twell_plan *plan, tw_gate_pack *gp, size_t M, tw_gp_cfg *cfg);

/* Enqueues the op on stream (arguments validated by the caller; context current). The first
 * call of an M bucket runs tw_cuda_gate_pack_prepare; later calls of that bucket do no host
 * allocation, compile or cache lookup. */
twell_status tw_cuda_gate_pack_launch(twell_plan *plan, tw_gate_pack *gp, size_t M, const void *x,
                                      const void *w, uint32_t *packed, twell_stream stream);

/* The variant actually in use (SIMT or SM90) and how many modules the plan has loaded (the
 * default at init, plus one per distinct tuned configuration met). */
tw_gp_variant tw_cuda_gate_pack_variant(const tw_gate_pack *gp);
int tw_cuda_gate_pack_modules_loaded(const tw_gate_pack *gp);

/* ---------------------------------------------------------------------------------------------
 * The SM90 variant (runtime/cuda_gate_pack_sm90.c), for templates/gate_pack_sm90.cu.lua:
 *
 * - tw_sm90_gate_pack_supports(shape, dev): pure and cheap; non-zero iff the kernel's DEFAULT
 *   configuration handles this shape on this device (dev->arch "sm_90a", K % 64 == 0, its T and
 *   C, dtype, N ≤ 65536). M is not part of the shape: every M ≥ 1 works (ragged last tile).
 * - tw_sm90_cfg_check: the same for any configuration (BK 32 | 64 dividing K, STAGES 2..8,
 *   CLUSTER 1 | 2 | 4, shared memory within the device's opt-in limit).
 * - tw_sm90_smem: the dynamic shared memory of a configuration (the template's SMEM formula).
 * - tw_sm90_kernel_prepare: after loading, sets the dynamic shared memory limit and sizes the
 *   persistent grid.
 * - tw_sm90_kernel_launch: encodes the two TMA tensor maps (host-only, allocation-free) and
 *   enqueues one persistent cluster launch; writes every word of packed, deterministic.
 * ------------------------------------------------------------------------------------------- */
int tw_sm90_gate_pack_supports(const twell_shape *shape, const tw_cuda *dev);
int tw_sm90_cfg_check(const tw_gp_cfg *cfg, const twell_shape *s, const tw_cuda *dev, char *why,
                      size_t n);
unsigned tw_sm90_smem(const tw_gp_cfg *cfg);
twell_status tw_sm90_kernel_prepare(twell_ctx *ctx, tw_gp_kernel *k);
twell_status tw_sm90_kernel_launch(twell_ctx *ctx, const tw_gp_kernel *k, const twell_shape *s,
                                   size_t M, const void *x, const void *w, uint32_t *packed,
                                   twell_stream stream);

#endif /* TWELL_CUDA_GATE_PACK_H */
