/* cuda_backend.c — placeholder until the CUDA backend lands: reports that no device is usable. */
#include "internal.h"

twell_status tw_cuda_open(twell_ctx *ctx, int device) {
    (void)device;
    return tw_error(ctx, TWELL_ERR_NOT_FOUND, "CUDA backend not built into this version");
}
void tw_cuda_close(twell_ctx *ctx) { (void)ctx; }
int tw_cuda_pointer_kind(twell_ctx *ctx, const void *p) {
    (void)ctx;
    (void)p;
    return -1;
}
twell_status tw_cuda_plan_init(twell_plan *plan) {
    return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "CUDA backend not available");
}
void tw_cuda_plan_release(twell_plan *plan) { (void)plan; }
twell_status tw_cuda_gate_pack(twell_plan *plan, size_t M, const void *x, const void *w,
                               uint32_t *packed, twell_stream stream) {
    (void)M, (void)x, (void)w, (void)packed, (void)stream;
    return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "gate_pack: not on CUDA yet");
}
twell_status tw_cuda_ffn_infer(twell_plan *plan, size_t M, const void *x, const uint32_t *packed,
                               const void *wg, const void *wu, const void *wd, void *y,
                               twell_stream stream) {
    (void)M, (void)x, (void)packed, (void)wg, (void)wu, (void)wd, (void)y, (void)stream;
    return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "ffn_infer: not on CUDA yet");
}
twell_status tw_cuda_forward_train(twell_plan *plan, size_t M, const void *x, const void *wg,
                                   const void *wu, const void *wd, void *y, float *stats,
                                   twell_train_state *state, twell_stream stream) {
    (void)M, (void)x, (void)wg, (void)wu, (void)wd, (void)y, (void)stats, (void)state,
        (void)stream;
    return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "ffn_forward_train: not on CUDA yet");
}
twell_status tw_cuda_backward(twell_plan *plan, twell_train_state *state, size_t M,
                              const void *x, const void *wg, const void *wu, const void *wd,
                              const void *dy, float lambda, void *dx, float *dwg, float *dwu,
                              float *dwd, twell_stream stream) {
    (void)state, (void)M, (void)x, (void)wg, (void)wu, (void)wd, (void)dy, (void)lambda,
        (void)dx, (void)dwg, (void)dwu, (void)dwd, (void)stream;
    return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "ffn_backward: not on CUDA yet");
}
void tw_cuda_train_state_release(twell_train_state *state) { (void)state; }
