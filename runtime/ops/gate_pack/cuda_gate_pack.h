/*
 * cuda_gate_pack.h — the gate-pack op on CUDA (relu(x·wᵀ) packed to TwELL), the op folder: the
 * per-plan state that picks the tiled route's variant (AUTO or forced) and a tuned configuration
 * per M bucket (cuda_gate_pack.c), over the tiled route's kernels (tiled/cuda_gate_pack_tiled.h).
 */
#ifndef TWELL_CUDA_GATE_PACK_H
#define TWELL_CUDA_GATE_PACK_H

#include "cuda_driver.h"
#include "cuda_gate_pack_tiled.h"

#include <stdarg.h>

/* ---- per-plan state ---- */

/* Per-plan gate-pack state: the chosen variant, its default-config kernel, and the tuned kernels
 * of the M buckets seen so far. */
typedef struct tw_gate_pack tw_gate_pack;

/* Picks a variant (want: AUTO or a forced one) and loads its DEFAULT configuration (cache hit or
 * compile): a plan is ready without tuning, and its first calls are never slowed by tuning.
 * Tuned winners are consulted lazily per M bucket by tw_cuda_gate_pack_launch (see
 * cuda_gate_pack.c). Must be called inside tw_cu_enter/leave. Forcing
 * SM90 on a device or shape it does not support gives TWELL_ERR_UNSUPPORTED. *out NULL on
 * failure. */
twell_status tw_cuda_gate_pack_init(twell_plan *plan, tw_gp_variant want, tw_gate_pack **out);
void tw_cuda_gate_pack_release(twell_plan *plan, tw_gate_pack *gp); /* NULL is a no-op */

/* Resolves the kernel for M's bucket (done once per bucket, then memoised): the stored tuning
 * winner for (gate_pack, shape, bucket, this device) when there is one whose kernel is this
 * plan's variant (its module loaded now, compiled only if the cache lost the cubin), else the
 * default. When the context has options.tune_on_first_use, a bucket without a record is tuned
 * here first (tw_tune_op_gpu, 20 s budget; it synchronises the device). Never fails: a problem is
 * logged (WARN) and the bucket uses the default. *cfg (may be NULL) receives the configuration
 * chosen. Enters the plan's context itself (when resolving). twell_plan_reserve resolves the
 * buckets with it; tests reach it as TW_TC_GP_PREPARE. */
void tw_cuda_gate_pack_prepare(twell_plan *plan, tw_gate_pack *gp, size_t M, tw_gp_cfg *cfg);

/* twell_plan_tune's gate-pack part: unless flags has TWELL_TUNE_STORED_ONLY, makes sure M's
 * bucket has a stored winner for this plan's variant (tw_tune_op_ensure; TWELL_TUNE_RETUNE times
 * again), then resolves the bucket afresh from the store, as its first call would. Errors: those
 * of tuning; the bucket then keeps what it had. */
twell_status tw_cuda_gate_pack_tune(twell_plan *plan, tw_gate_pack *gp, size_t M, unsigned flags);

/* Enqueues the op on stream (arguments validated by the caller; context current). The first
 * call of an M bucket runs tw_cuda_gate_pack_prepare; later calls of that bucket do no host
 * allocation, compile or cache lookup. A call while stream is being captured into a CUDA graph
 * enqueues the kernel only: an M bucket not resolved yet runs the default configuration (not
 * memoised); twell_plan_reserve resolves the buckets first. */
twell_status tw_cuda_gate_pack_launch(twell_plan *plan, tw_gate_pack *gp, size_t M, const void *x,
                                      const void *w, uint32_t *packed, twell_stream stream);

/* The variant actually in use (SIMT or SM90) and how many modules the plan has loaded (the
 * default at init, plus one per distinct tuned configuration met). */
tw_gp_variant tw_cuda_gate_pack_variant(const tw_gate_pack *gp);
int tw_cuda_gate_pack_modules_loaded(const tw_gate_pack *gp);

#endif /* TWELL_CUDA_GATE_PACK_H */
