/* cuda_backend.h — the CUDA backend's per-plan state and the internal hooks tests and the bench
 * use to pick a kernel variant (the backend entry points themselves are in internal.h). */
#ifndef TWELL_CUDA_BACKEND_H
#define TWELL_CUDA_BACKEND_H

#include "cuda_dense.h"
#include "cuda_ffn.h"
#include "cuda_gate_pack.h"
#include "cuda_small.h"

/* plan->backend_data on the CUDA backend. Later ops add their kernels here. */
typedef struct tw_cuda_plan {
    tw_gate_pack *gate_pack; /* chosen and loaded by tw_cuda_plan_init */
    tw_ffn *ffn;             /* ffn_infer kernels and workspace (cuda_ffn.c) */
    tw_dense *dense;         /* ffn_infer's dense path and AUTO state (cuda_dense.c) */
    tw_small *small;         /* both ops' small-batch path (cuda_small.c) */
} tw_cuda_plan;

/* Replaces plan's gate-pack kernel with variant v (AUTO: the normal choice). On failure the
 * plan keeps its previous kernel. Synchronises the device first: the old module may be in use. */
twell_status tw_cuda_plan_gate_pack_select(twell_plan *plan, tw_gp_variant v);

/* The gate-pack variant plan uses (SIMT or SM90; AUTO for a CPU plan) and the modules its init
 * loaded (a second call of the op must not change this). */
tw_gp_variant tw_cuda_plan_gate_pack_variant(const twell_plan *plan);
int tw_cuda_plan_gate_pack_modules(const twell_plan *plan);

#endif /* TWELL_CUDA_BACKEND_H */
