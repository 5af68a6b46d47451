/* hello_twell.c — a minimal program against the installed libtwellrt: packs a small random gate
 * on the CPU backend and runs fused inference, printing the active-neuron count and y[0]. */
#include <twellrt.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fp32 -> bf16 bits, round to nearest even (finite inputs only). */
static unsigned short to_bf16(float f) {
    unsigned int u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

int main(void) {
    enum { M = 4, K = 64, N = 256 };
    twell_ctx_options opts;
    twell_ctx_options_init(&opts);
    opts.backend = TWELL_BACKEND_CPU;
    twell_ctx *ctx = NULL;
    twell_status st = twell_ctx_create(&opts, &ctx);
    if (st != TWELL_OK) {
        fprintf(stderr, "twell_ctx_create: %s\n", twell_status_name(st));
        return 1;
    }
    twell_shape shape;
    twell_shape_init(&shape, K, N);
    twell_plan *plan = NULL;
    if ((st = twell_plan_create(ctx, &shape, &plan)) != TWELL_OK) {
        fprintf(stderr, "twell_plan_create: %s: %s\n", twell_status_name(st),
                twell_ctx_errmsg(ctx));
        return 1;
    }
    static unsigned short x[M * K], wg[N * K], wu[N * K], wd[N * K], y[M * K];
    unsigned int seed = 12345u;
    for (int i = 0; i < M * K; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = to_bf16((float)(seed >> 8) / 16777216.0f - 0.5f);
    }
    for (int i = 0; i < N * K; i++) {
        seed = seed * 1664525u + 1013904223u;
        float r = (float)(seed >> 8) / 16777216.0f - 0.55f; /* biased negative: sparse gate */
        wg[i] = to_bf16(r * 0.25f);
        wu[i] = to_bf16(r * 0.125f + 0.01f);
        wd[i] = to_bf16(0.5f - r);
    }
    size_t words = twell_packed_words(&shape, M);
    unsigned int *packed = calloc(words, sizeof *packed);
    if (!packed)
        return 1;
    st = twell_gate_pack(plan, M, x, wg, packed, NULL);
    if (st == TWELL_OK)
        st = twell_ffn_infer(plan, M, x, packed, wg, wu, wd, y, NULL);
    if (st != TWELL_OK) {
        fprintf(stderr, "op failed: %s: %s\n", twell_status_name(st), twell_ctx_errmsg(ctx));
        return 1;
    }
    unsigned int active = 0;
    for (unsigned int m = 0; m < M; m++)
        for (unsigned int t = 0; t < N / shape.T; t++)
            active += packed[m * (N / shape.C) + t * twell_tile_words(&shape)];
    unsigned int ybits = (unsigned int)y[0] << 16;
    float y0;
    memcpy(&y0, &ybits, sizeof y0);
    printf("twellrt %s: %u active neurons over %d tokens, y[0] = %g\n", twell_version(), active, M,
           (double)y0);
    free(packed);
    twell_plan_destroy(plan);
    twell_ctx_destroy(ctx);
    return active > 0 ? 0 : 1;
}
