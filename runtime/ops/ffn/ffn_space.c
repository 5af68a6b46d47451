/*
 * ffn_space.c — the tuner's candidate space of ffn_fused (templates/ffn/ffn_fused.cu.lua: fused
 * gated up+down from the packed gate: pre-pass, per-(chunk, group) pair lists, tensor-core
 * phases A and B): which parameters are tuned over which values. Whether a configuration is one
 * the template takes, and the shared memory it needs, is the rule of ffn_config.c, which the
 * launcher uses too.
 *
 * Axes. The template takes CN, STAGES, GPWA, GPWB, NWA, NWB, PF, IL, DCAPA and DCAPB:
 *  - CN (neurons per weight chunk: a multiple of T and of 64, at most 1024, N/CN ≤ 256 chunks)
 *    is tuned: larger chunks mean fewer chunk iterations and less list padding but take shared
 *    memory from the staged lists (which wins depends on the shape).
 *    STAGES (weight chunks in flight, 2..4 in the template) is an axis of one value, 2 (below).
 *  - GPWA/GPWB, NWA/NWB (groups per warp, warps per block), PF and IL are axes of one value each,
 *    the defaults: every other value measured slower at K=2048 N=5632 (10–30% for the warp
 *    shapes); widen an axis here when a shape is found where it wins.
 *  - GT (tokens per list group, 8 | 16) is not an axis: configurations leave it out and the
 *    launcher takes TW_FFN_GT_DEFAULT (8). GT 16 was exact but 13% slower in the fused part at
 *    K=2048 N=5632 M=16384, 29 nnz (phase B's mmas double); it
 *    stays a development option (TWELL_FFN_TILE=GT=16) and needs no shared memory of its own.
 *  - DCAPA / DCAPB (list slots staged in shared memory per chunk) are not axes: they follow from
 *    the rest (the launcher fills the shared memory left). Phases A and B run one CTA per SM at
 *    the default warp shapes (128 registers x 512 threads: the whole register file), so a
 *    smaller staging buffer frees nothing another CTA could use, and a list region over DCAP
 *    only moves its descriptors to global loads: the largest DCAP is never slower.
 * Pruning: the rule with the template's ceiling TW_FFN_SMEM_MAX (the launcher plans with no more,
 * whatever the device offers), then the least shared memory a configuration needs
 * (tw_ffn_cfg_smem) against the device's: a configuration is kept exactly when the launcher
 * accepts it on that device.
 */
#include "ffn_config.h"
#include "ffn_tuner.h"

#include <stdio.h>

static const int64_t tw_ffn_cn[] = {64, 128, 256, 384, 512, 640, 768, 896, 1024};
/* STAGES: the template takes 2..4, but 3 and 4 never won (exhaustive runs at K/N 2048/5632 and
 * 1024/4096, `twell tune` on four shapes: no gain at 16384/29) while
 * doubling the candidates cost the whole FFN's first use 23.4 s at K = 8192 N = 28672 (target
 * 20 s; 17.5 s with this axis at one value). Widen it when a shape is found where more stages
 * win. */
static const int64_t tw_ffn_stages[] = {2};
static const int64_t tw_ffn_gpwa[] = {8};
static const int64_t tw_ffn_gpwb[] = {4};
static const int64_t tw_ffn_nwa[] = {16};
static const int64_t tw_ffn_nwb[] = {16};
static const int64_t tw_ffn_pf[] = {1};
static const int64_t tw_ffn_il[] = {0};

static int tw_ffn_supports(const tw_tune_problem *p, const tw_tune_device *d) {
    /* bf16 mma.sync and cp.async: sm_80 and later; the phases tile K by 64 columns */
    return d->cc_major * 10 + d->cc_minor >= 80 && p->shape.K % 64 == 0 && p->shape.T >= 64;
}

static int tw_ffn_check(const tw_tune_problem *p, const tw_tune_config *c, char *why, size_t n) {
    tw_ffn_cfg fc;
    if (tw_ffn_cfg_from_tune(c, &fc) != 0) {
        snprintf(why, n, "not a configuration of ffn_fused");
        return 1;
    }
    return tw_ffn_cfg_words(&fc, &p->shape, TW_FFN_SMEM_MAX, NULL, why, n) != 0;
}

static uint64_t tw_ffn_smem(const tw_tune_problem *p, const tw_tune_config *c) {
    tw_ffn_cfg fc;
    return tw_ffn_cfg_from_tune(c, &fc) == 0 ? tw_ffn_cfg_smem(&fc, &p->shape) : UINT64_MAX;
}

static int tw_ffn_threads_of(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p;
    int64_t a = tw_tune_config_value(c, "NWA", 0), b = tw_tune_config_value(c, "NWB", 0);
    return 32 * (int)(a > b ? a : b); /* phases A and B; the other kernels use 256 or 1024 */
}

const tw_tune_space tw_ffn_space_fused = {
    .op = TW_FFN_INFER_OP,
    .kernel = "ffn_fused",
    .about = "fused sparse FFN from the packed gate (pair lists, tensor-core phases)",
    .naxes = 8,
    .axes = {{"CN", tw_ffn_cn, 9},
             {"STAGES", tw_ffn_stages, 1},
             {"GPWA", tw_ffn_gpwa, 1},
             {"GPWB", tw_ffn_gpwb, 1},
             {"NWA", tw_ffn_nwa, 1},
             {"NWB", tw_ffn_nwb, 1},
             {"PF", tw_ffn_pf, 1},
             {"IL", tw_ffn_il, 1}},
    .defaults = {512, 2, 8, 4, 16, 16, 1, 0}, /* tw_ffn_cfg_default's first choice */
    .supports = tw_ffn_supports,
    .check = tw_ffn_check,
    .smem_bytes = tw_ffn_smem,
    .threads = tw_ffn_threads_of,
};
