/* cpu_backend.c — the exact CPU reference backend for the inference ops (placeholder: the
 * reference implementation lands in the next commit). */
#include "internal.h"

twell_status tw_cpu_gate_pack(twell_plan *plan, size_t M, const void *x, const void *w,
                              uint32_t *packed) {
    (void)M, (void)x, (void)w, (void)packed;
    return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "twell_gate_pack: CPU backend not ready");
}

twell_status tw_cpu_ffn_infer(twell_plan *plan, size_t M, const void *x, const uint32_t *packed,
                              const void *wg, const void *wu, const void *wd, void *y) {
    (void)M, (void)x, (void)packed, (void)wg, (void)wu, (void)wd, (void)y;
    return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "twell_ffn_infer: CPU backend not ready");
}
