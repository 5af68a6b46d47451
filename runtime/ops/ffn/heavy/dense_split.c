/*
 * dense_split.c — the hand-written Hopper GEMMs' split-K validity rule and choice (dense_split.h),
 * used by the heavy-row routes (cuda_ffn_heavy.c, dense_gemm_sm90.c), and the grid of the split-K
 * reductions (cuda_train_dense.c).
 */
#include "dense_split.h"

#include <stdio.h>

static size_t tw_ds_cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

size_t tw_dense_gemm_units(size_t m, uint32_t ncols) {
    return tw_ds_cdiv(tw_ds_cdiv(m, TW_DG_BM), TW_DG_CLUSTER) * tw_ds_cdiv(ncols, TW_DG_BN);
}

size_t tw_dense_reduce_grid(size_t m, uint32_t ncols, unsigned sms) {
    size_t blocks = tw_ds_cdiv(m * tw_ds_cdiv(ncols, 256u), 8u), cap = 16u * (size_t)sms;
    return blocks < cap ? blocks : cap;
}

unsigned tw_dense_kblocks(const twell_shape *s, int g) {
    return (g == TW_DENSE_UP ? s->K : s->N) / TW_DG_BK;
}

size_t tw_dense_part_need(const twell_shape *s, int g, unsigned nsplit, size_t m) {
    if (nsplit < 2u)
        return 0;
    size_t cols = g == TW_DENSE_UP ? s->N : s->K, planes = g == TW_DENSE_UP && s->gated ? 2u : 1u;
    return (size_t)nsplit * planes * m * cols * sizeof(float);
}

int tw_dense_split_check(const twell_shape *s, int g, unsigned nsplit, size_t m, char *why,
                         size_t n) {
    char local[8];
    if (!why || n == 0) {
        why = local;
        n = sizeof local;
    }
    const char *name = g == TW_DENSE_UP ? "up" : "down";
    unsigned kb = tw_dense_kblocks(s, g);
    if (nsplit < 1u || nsplit > TW_POLICY_SPLIT_MAX) {
        snprintf(why, n, "%s split %u outside 1..%u", name, nsplit, TW_POLICY_SPLIT_MAX);
        return 1;
    }
    if (nsplit > kb) {
        snprintf(why, n, "%s split %u > %u k-blocks (an empty slice)", name, nsplit, kb);
        return 1;
    }
    size_t need = tw_dense_part_need(s, g, nsplit, m);
    if (need > TW_DENSE_SPLIT_PART_MAX) {
        snprintf(why, n, "%s split %u needs %zu MiB of partials for %zu rows (> %zu MiB)", name,
                 nsplit, need >> 20, m, TW_DENSE_SPLIT_PART_MAX >> 20);
        return 1;
    }
    why[0] = '\0';
    return 0;
}

void tw_dense_split_rule(const twell_shape *s, size_t m, unsigned clusters, unsigned sp[2]) {
    const size_t units[2] = {tw_dense_gemm_units(m, s->N), tw_dense_gemm_units(m, s->K)};
    for (int g = 0; g < 2; g++)
        sp[g] = tw_ffn_dense_split(units[g], tw_dense_kblocks(s, g), clusters);
}
