/*
 * op_plan.h — plan->backend_data on the CUDA backend: one pointer per op's per-plan state. The
 * ops reach their own state through it (the plan is created by runtime/plan_cuda.c, above them).
 */
#ifndef TWELL_OP_PLAN_H
#define TWELL_OP_PLAN_H

#include "internal.h"

typedef struct tw_gate_pack tw_gate_pack; /* ops/gate_pack */
typedef struct tw_gate_lt tw_gate_lt;     /* ops/gate_pack/lt: cuBLASLt resources, its route */
typedef struct tw_ffn tw_ffn;             /* ops/ffn: sparse path kernels and workspace */
typedef struct tw_dense tw_dense;         /* ops/ffn: dense path and the AUTO state */
typedef struct tw_small tw_small;         /* ops/ffn: small-batch path of both inference ops */
typedef struct tw_packed_check tw_packed_check; /* ops/ffn: options.validate_packed's kernel */

typedef struct tw_cuda_plan {
    tw_gate_pack *gate_pack; /* chosen and loaded by tw_cuda_plan_init */
    tw_gate_lt *gate_lt;
    tw_ffn *ffn;
    tw_dense *dense;
    tw_small *small;
    tw_packed_check *packed_check; /* created by the first validated twell_ffn_infer */
} tw_cuda_plan;

/* The CUDA state of plan, or NULL for a CPU plan (or a plan still being created). */
static inline tw_cuda_plan *tw_op_plan(const twell_plan *plan) {
    if (!plan || plan->ctx->backend != TWELL_BACKEND_CUDA)
        return NULL;
    return (tw_cuda_plan *)plan->backend_data;
}

#endif /* TWELL_OP_PLAN_H */
