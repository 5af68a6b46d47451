/*
 * dense_space.c — the tuner's candidate space of the dense path's split-K factors (op
 * "ffn_dense"): SPLIT_UP (the up GEMM's reduction over K) x SPLIT_DOWN (the down GEMM's over N),
 * each from {1, 2, 3, 4, 6, 8, 12, 16}, per M bucket. The GEMM modules are the plan's own (every
 * candidate runs the same four gemm_sm90 cubins: the factors are launch arguments), so nothing is
 * compiled per candidate.
 *
 * Pruning: tw_dense_split_check (dense_split.h) for the bucket's rows, the rule the launcher
 * applies to a stored winner: at most TW_POLICY_SPLIT_MAX slices, every slice at least one
 * 64-wide k-block, partials within TW_DENSE_SPLIT_PART_MAX (so a large bucket keeps few or only
 * the unsplit candidates). The default (timed first, the "default" of reports) is the pure
 * rule's choice for the bucket on the device (tw_dense_split_rule), when both its factors are on
 * the axes; otherwise no default is timed.
 */
#include "dense_split.h"
#include "dense_tuner.h"

#include <stdio.h>
#include <string.h>

static const int64_t tw_dense_splits_axis[] = {1, 2, 3, 4, 6, 8, 12, 16};

int tw_dense_cfg_from_tune(const tw_tune_config *cfg, unsigned sp[2]) {
    if (strcmp(cfg->kernel, TW_DENSE_KERNEL) != 0 || cfg->n != 2 ||
        strcmp(cfg->p[0].name, "SPLIT_UP") != 0 || strcmp(cfg->p[1].name, "SPLIT_DOWN") != 0)
        return -1;
    for (int g = 0; g < 2; g++) {
        if (cfg->p[g].value < 1 || cfg->p[g].value > 255)
            return -1;
        sp[g] = (unsigned)cfg->p[g].value;
    }
    return 0;
}

static int tw_dense_supports(const tw_tune_problem *p, const tw_tune_device *d) {
    /* what tw_cuda_dense_init requires: sm_90a, K % 64, the GEMM's shared memory, a cluster */
    return !strcmp(d->arch, "sm_90a") && p->shape.K % 64u == 0 &&
           d->smem_per_block >= (int)TW_DG_SMEM && d->sm_count >= (int)TW_DG_CLUSTER;
}

static int tw_dense_check(const tw_tune_problem *p, const tw_tune_config *c, char *why, size_t n) {
    unsigned sp[2];
    if (tw_dense_cfg_from_tune(c, sp) != 0) {
        snprintf(why, n, "not a configuration of the dense split-K factors");
        return 1;
    }
    size_t m = p->M ? p->M : 1;
    return tw_dense_split_check(&p->shape, TW_DENSE_UP, sp[0], m, why, n) != 0 ||
           tw_dense_split_check(&p->shape, TW_DENSE_DOWN, sp[1], m, why, n) != 0;
}

/* Every plan with a dense path loads both GEMM variants (split and unsplit), whatever it runs. */
static uint64_t tw_dense_smem(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p, (void)c;
    return TW_DG_SPLIT_SMEM > TW_DG_SMEM ? TW_DG_SPLIT_SMEM : TW_DG_SMEM;
}

static int tw_dense_threads(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p, (void)c;
    return (int)TW_DG_THREADS;
}

static int tw_dense_cluster(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p, (void)c;
    return (int)TW_DG_CLUSTER;
}

static void tw_dense_default_for(const tw_tune_problem *p, const tw_tune_device *d,
                                 int64_t *values) {
    unsigned sp[2];
    unsigned clusters = d->sm_count > 0 ? (unsigned)d->sm_count / TW_DG_CLUSTER : 0u;
    tw_dense_split_rule(&p->shape, p->M ? p->M : 1, clusters, sp);
    values[0] = sp[0];
    values[1] = sp[1];
}

const tw_tune_space tw_dense_space_split = {
    .op = TW_DENSE_OP,
    .kernel = TW_DENSE_KERNEL,
    .about = "split-K factors of the dense path's up and down GEMMs (ordered fp32 reductions)",
    .naxes = 2,
    .axes = {{"SPLIT_UP", tw_dense_splits_axis, 8}, {"SPLIT_DOWN", tw_dense_splits_axis, 8}},
    .defaults = {1, 1}, /* unsplit: a valid config of every problem */
    .supports = tw_dense_supports,
    .check = tw_dense_check,
    .smem_bytes = tw_dense_smem,
    .threads = tw_dense_threads,
    .cluster = tw_dense_cluster,
    .default_for = tw_dense_default_for,
};
