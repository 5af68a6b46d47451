/* cuda_module.c — a rendered template loaded as a CUDA module (see cuda_module.h). */
#include "cuda_module.h"

#include <string.h>

twell_status tw_template_module(twell_ctx *ctx, const char *name, const tw_param *p, size_t n,
                                const char *const *names, size_t nfn, tw_CUmodule *mod,
                                tw_CUfunction *fns) {
    tw_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    TW_TRY(tw_jit_cubin(ctx, name, p, n, ctx->cuda->arch, &cubin));
    twell_status st = tw_cu_module_open(ctx, cubin.data, names, nfn, mod, fns);
    tw_cubin_free(&cubin);
    return st;
}
