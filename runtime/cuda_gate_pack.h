/*
 * cuda_gate_pack.h — the gate-pack op on CUDA (relu(x·wᵀ) packed to TwELL) and the interface its
 * kernel variants implement: the portable SIMT template (cuda_gate_pack.c) and the Hopper
 * wgmma/TMA launcher (cuda_gate_pack_sm90.c).
 */
#ifndef TWELL_CUDA_GATE_PACK_H
#define TWELL_CUDA_GATE_PACK_H

#include "cuda_driver.h"

/* Which kernel computes gate-pack. AUTO: SM90 when the device is sm_90a and
 * tw_sm90_gate_pack_supports() accepts the shape (falling back to SIMT if its init reports
 * TWELL_ERR_UNSUPPORTED), else SIMT. */
typedef enum tw_gp_variant { TW_GP_AUTO = 0, TW_GP_SIMT = 1, TW_GP_SM90 = 2 } tw_gp_variant;

/* "auto", "simt", "sm90"; NULL for anything else. */
const char *tw_gp_variant_name(tw_gp_variant v);
/* Parses a name above; -1 if unknown. */
int tw_gp_variant_parse(const char *name);

/* Per-plan gate-pack state: the chosen variant with its loaded module(s). */
typedef struct tw_gate_pack tw_gate_pack;

/* Picks a variant (want: AUTO or a forced one) and prepares it ONCE: renders/compiles (or takes
 * from the cache) and loads its module, sets function attributes. Later launches do no host
 * allocation, compile or cache lookup. Must be called inside tw_cu_enter/leave. Forcing SM90 on
 * a device or shape it does not support gives TWELL_ERR_UNSUPPORTED. *out NULL on failure. */
twell_status tw_cuda_gate_pack_init(twell_plan *plan, tw_gp_variant want, tw_gate_pack **out);
void tw_cuda_gate_pack_release(twell_plan *plan, tw_gate_pack *gp); /* NULL is a no-op */
/* Enqueues the op on stream (arguments validated by the caller; context current). */
twell_status tw_cuda_gate_pack_launch(twell_plan *plan, tw_gate_pack *gp, size_t M, const void *x,
                                      const void *w, uint32_t *packed, twell_stream stream);
/* The variant actually in use (SIMT or SM90) and how many modules its init loaded. */
tw_gp_variant tw_cuda_gate_pack_variant(const tw_gate_pack *gp);
int tw_cuda_gate_pack_modules_loaded(const tw_gate_pack *gp);

/* ---------------------------------------------------------------------------------------------
 * The SM90 variant (runtime/cuda_gate_pack_sm90.c). Contract for whoever implements it:
 *
 * - tw_sm90_gate_pack_supports(shape, dev): pure and cheap; non-zero iff the kernel handles this
 *   shape on this device (dev->arch "sm_90a", K % 64 == 0, its T and C, dtype, N ≤ 65536).
 *   Called before init; M is not part of the shape: every M ≥ 1 must work (ragged last tile).
 * - tw_sm90_gate_pack_init(plan, &state): called once per plan, inside tw_cu_enter/leave, after
 *   supports() said yes. Renders and compiles its template(s) with tw_jit_cubin (arch
 *   plan->ctx->cuda->arch), loads them with tw_cu_module_load, looks up functions, sets
 *   attributes (tw_cu_func_set_attribute, e.g. the dynamic shared memory limit), and keeps all of
 *   it in a malloc'd state. May return TWELL_ERR_UNSUPPORTED (AUTO then falls back to SIMT);
 *   any other error fails plan creation. *state NULL on failure, nothing leaked.
 *   *modules_loaded (may be NULL) receives the number of modules it loaded (for tests).
 * - tw_sm90_gate_pack_launch(plan, state, M, x, w, packed, stream): enqueues the whole op on
 *   `stream` (the caller's CUstream, NULL = legacy default stream) with tw_cu_launch (clusters
 *   allowed). x [M, K], w [N, K] (dtype), packed [M, N/C] uint32: device pointers, validated,
 *   non-aliasing; any alignment cudaMalloc gives; x and w may differ from call to call (encode
 *   tensor maps per call with tw_cu_tensor_map_tiled: it is host-only and allocation-free).
 *   Must write every word of packed (count, ascending entries, zeroed unused slots; the bytes
 *   equal the format in twellrt.h up to fp32 summation order) and be deterministic run to run.
 *   No host allocation, compile, cache lookup or synchronisation. Context is current.
 * - tw_sm90_gate_pack_release(plan, state): unloads modules, frees state; NULL state is a no-op.
 *   Called inside tw_cu_enter/leave, after the caller's work on the plan has finished.
 * Errors go through tw_error/tw_cu_fail on plan->ctx, naming the call and raw code.
 * ------------------------------------------------------------------------------------------- */
int tw_sm90_gate_pack_supports(const twell_shape *shape, const tw_cuda *dev);
twell_status tw_sm90_gate_pack_init(twell_plan *plan, void **state, int *modules_loaded);
twell_status tw_sm90_gate_pack_launch(twell_plan *plan, void *state, size_t M, const void *x,
                                      const void *w, uint32_t *packed, twell_stream stream);
void tw_sm90_gate_pack_release(twell_plan *plan, void *state);

#endif /* TWELL_CUDA_GATE_PACK_H */
