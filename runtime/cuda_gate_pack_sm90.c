/* cuda_gate_pack_sm90.c — Hopper (sm_90a) gate-pack launcher: initial stub that supports nothing,
 * so AUTO uses the SIMT template. The interface is documented in cuda_gate_pack.h. */
#include "cuda_gate_pack.h"

int tw_sm90_gate_pack_supports(const twell_shape *shape, const tw_cuda *dev) {
    (void)shape;
    (void)dev;
    return 0;
}

twell_status tw_sm90_gate_pack_init(twell_plan *plan, void **state, int *modules_loaded) {
    *state = NULL;
    if (modules_loaded)
        *modules_loaded = 0;
    return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "gate_pack: sm90 variant not built yet");
}

twell_status tw_sm90_gate_pack_launch(twell_plan *plan, void *state, size_t M, const void *x,
                                      const void *w, uint32_t *packed, twell_stream stream) {
    (void)state, (void)M, (void)x, (void)w, (void)packed, (void)stream;
    return tw_error(plan->ctx, TWELL_ERR_UNSUPPORTED, "gate_pack: sm90 variant not built yet");
}

void tw_sm90_gate_pack_release(twell_plan *plan, void *state) {
    (void)plan;
    (void)state;
}
