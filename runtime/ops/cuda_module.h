/*
 * cuda_module.h — a rendered template loaded as a CUDA module: the step every op's loader repeats
 * (tw_jit_cubin for the context's device, then the driver's module load and kernel lookup).
 */
#ifndef TWELL_CUDA_MODULE_H
#define TWELL_CUDA_MODULE_H

#include "cuda_driver.h"
#include "jit.h"

/* Renders and compiles template `name` with parameters p[0..n) for the context's device (through
 * the cubin cache) and loads it into *mod with its kernels names[0..nfn) into fns. Errors: those
 * of tw_jit_cubin and tw_cu_module_open. Context current. */
twell_status tw_template_module(twell_ctx *ctx, const char *name, const tw_param *p, size_t n,
                                const char *const *names, size_t nfn, tw_CUmodule *mod,
                                tw_CUfunction *fns);

#endif /* TWELL_CUDA_MODULE_H */
