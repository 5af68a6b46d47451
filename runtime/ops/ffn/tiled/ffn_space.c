/*
 * ffn_space.c — the tuner's candidate space of ffn_fused (templates/ffn/ffn_fused.cu.lua: fused
 * gated up+down from the packed gate: pre-pass, per-(chunk, group) pair lists, tensor-core
 * phases A and B): which parameters are tuned over which values. Whether a configuration is one
 * the template takes, and the shared memory it needs, is the rule of ffn_config.c, which the
 * launcher uses too.
 *
 * Axes. The template takes CN, GPWA, GPWB, NWA, NWB, PF, DCAPA and DCAPB:
 *  - CN (neurons per weight chunk: a multiple of T and of 64, at most 1024, N/CN ≤ 256 chunks)
 *    is tuned: larger chunks mean fewer chunk iterations and less list padding but take shared
 *    memory from the staged lists (which wins depends on the shape).
 *  - GPWA/GPWB, NWA/NWB (groups per warp, warps per block) and PF are axes of one value each,
 *    the defaults: every other value was slower where it was tried (docs/DESIGN.md §9); widen an
 *    axis here when a shape is found where it wins.
 *  - The weight chunks in flight are fixed at 2 in the template (TW_FFN_STAGES): 3 and 4 never
 *    won (exhaustive runs and `twell tune` over several shapes, docs/DESIGN.md §9), and as an
 *    axis they doubled the candidates and so the first use's tuning time. So are the tokens per
 *    list group, 8 (TW_FFN_GT; 16 was exact but slower: phase B's mmas double).
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
static const int64_t tw_ffn_gpwa[] = {8};
static const int64_t tw_ffn_gpwb[] = {4};
static const int64_t tw_ffn_nwa[] = {16};
static const int64_t tw_ffn_nwb[] = {16};
static const int64_t tw_ffn_pf[] = {1};

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
    .naxes = 6,
    .axes = {{"CN", tw_ffn_cn, 9},
             {"GPWA", tw_ffn_gpwa, 1},
             {"GPWB", tw_ffn_gpwb, 1},
             {"NWA", tw_ffn_nwa, 1},
             {"NWB", tw_ffn_nwb, 1},
             {"PF", tw_ffn_pf, 1}},
    .defaults = {512, 8, 4, 16, 16, 1}, /* tw_ffn_cfg_default's first choice */
    .supports = tw_ffn_supports,
    .check = tw_ffn_check,
    .smem_bytes = tw_ffn_smem,
    .threads = tw_ffn_threads_of,
};
