/* plan_cuda.h — the CUDA backend's per-plan state: one part per op (op_plan.h), each op's header
 * (the backend entry points themselves are in internal.h). */
#ifndef TWELL_PLAN_CUDA_H
#define TWELL_PLAN_CUDA_H

#include "cuda_dense.h"
#include "cuda_ffn.h"
#include "cuda_gate_pack.h"
#include "cuda_small.h"
#include "ffn_route.h"
#include "op_plan.h"
#include "packed_check.h"

#endif /* TWELL_PLAN_CUDA_H */
