/* plan_cuda.h — the CUDA backend's per-plan state and the internal hooks tests and the bench
 * use to pick a kernel variant (the backend entry points themselves are in internal.h). */
#ifndef TWELL_PLAN_CUDA_H
#define TWELL_PLAN_CUDA_H

#include "cuda_dense.h"
#include "cuda_ffn.h"
#include "cuda_gate_pack.h"
#include "cuda_small.h"
#include "op_plan.h"

/* Replaces plan's gate-pack kernel with variant v (AUTO: the normal choice). On failure the
 * plan keeps its previous kernel. Synchronises the device first: the old module may be in use. */
twell_status tw_cuda_plan_gate_pack_select(twell_plan *plan, tw_gp_variant v);

/* The gate-pack variant plan uses (SIMT or SM90; AUTO for a CPU plan) and the modules its init
 * loaded (a second call of the op must not change this). */
tw_gp_variant tw_cuda_plan_gate_pack_variant(const twell_plan *plan);
int tw_cuda_plan_gate_pack_modules(const twell_plan *plan);

#endif /* TWELL_PLAN_CUDA_H */
