/*
 * gate_pack_space.c — the tuner's candidate spaces of the two gate-pack kernels: which
 * parameters are tuned over which values, and the estimates the engine prunes with. Whether a
 * configuration is one its template takes is the rule of gate_pack_config.c, shared with the
 * launchers; only the rules about M (which the launchers do not see) are added here.
 */
#include "gate_pack_config.h"
#include "gate_pack_tuner.h"

#include <stdio.h>
#include <string.h>

static int tw_arch_num(const tw_tune_device *d) { return d->cc_major * 10 + d->cc_minor; }

static int64_t tw_v(const tw_tune_config *c, const char *name) {
    return tw_tune_config_value(c, name, 0);
}

/* The configuration c stands for, refused (non-zero, reason in why) when it is not one. */
static int tw_gp_of(const tw_tune_config *c, tw_gp_cfg *out, char *why, size_t n) {
    if (tw_gp_cfg_from_tune(c, out) != 0) {
        snprintf(why, n, "not a configuration of %s", c->kernel);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * gate_pack_sm90 — templates/gate_pack/gate_pack_sm90.cu.lua (Hopper wgmma + TMA). Fixed
 * geometry: CTA tile 128 x 256, 384 threads (one producer and two consumer warpgroups). Tuned:
 * BK (K per stage: 64 with 128-byte swizzle or 32 with 64-byte), STAGES (pipeline depth) and
 * CLUSTER (CTAs along M sharing the weight tile by multicast). Shared memory: the template's
 * SMEM formula (tw_sm90_smem).
 * ------------------------------------------------------------------------------------------- */

static const int64_t tw_sm90_bk[] = {32, 64};
static const int64_t tw_sm90_stages[] = {2, 3, 4, 5, 6, 7, 8};
static const int64_t tw_sm90_cluster[] = {1, 2};

/* Exactly the shapes plans run this kernel on (tw_sm90_gate_pack_supports: the same shape rule
 * on an sm_90a device), so every shape a plan runs on sm90 can be tuned. */
static int tw_sm90_supports(const tw_tune_problem *p, const tw_tune_device *d) {
    return !strcmp(d->arch, "sm_90a") && tw_sm90_shape_ok(&p->shape);
}

static int tw_sm90_check(const tw_tune_problem *p, const tw_tune_config *c, char *why, size_t n) {
    tw_gp_cfg g;
    if (tw_gp_of(c, &g, why, n) || tw_gp_cfg_rule(&g, &p->shape, why, n) != 0)
        return 1;
    /* A cluster along M needs as many row tiles; with fewer, a CTA of each cluster idles. */
    if (g.cluster > 1u && p->M <= (size_t)TW_SM90_BM * (g.cluster - 1u)) {
        snprintf(why, n, "CLUSTER=%u along M needs M > %u", g.cluster,
                 TW_SM90_BM * (g.cluster - 1u));
        return 1;
    }
    return 0;
}

static uint64_t tw_sm90_smem_of(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p;
    tw_gp_cfg g;
    return tw_gp_cfg_from_tune(c, &g) == 0 ? tw_sm90_smem(&g) : UINT64_MAX;
}

static int tw_sm90_threads(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p, (void)c;
    return (int)TW_SM90_THREADS;
}

/* At launch every thread gets the same count; setmaxnreg then moves registers from the producer
 * (40) to the consumers (232). 65536 / 384 rounded down to the allocation granule of 8. */
static int tw_sm90_regs(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p, (void)c;
    return 168;
}

static int tw_sm90_cluster_size(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p;
    return (int)tw_v(c, "CLUSTER");
}

const tw_tune_space tw_gate_pack_space_sm90 = {
    .op = TW_GATE_PACK_OP,
    .kernel = "gate_pack_sm90",
    .about = "Hopper wgmma/TMA gate-pack, 128x256 CTA tile",
    .naxes = 3,
    .axes = {{"BK", tw_sm90_bk, 2}, {"STAGES", tw_sm90_stages, 7}, {"CLUSTER", tw_sm90_cluster, 2}},
    .defaults = {64, 3, 2}, /* tw_gp_cfg_default(TW_GP_SM90) (tests/test_gate_pack_cfg.c) */
    .supports = tw_sm90_supports,
    .check = tw_sm90_check,
    .smem_bytes = tw_sm90_smem_of,
    .threads = tw_sm90_threads,
    .regs_per_thread = tw_sm90_regs,
    .cluster = tw_sm90_cluster_size,
};

/* ---------------------------------------------------------------------------------------------
 * gate_pack_simt — templates/gate_pack/gate_pack_simt.cu.lua (portable FP32 SIMT, sm_75+).
 * Tuned: BM (rows per CTA) and THREADS. Static shared memory: the template's (tw_simt_smem).
 * ------------------------------------------------------------------------------------------- */

static const int64_t tw_simt_bm[] = {8, 16, 32, 64, 128};
static const int64_t tw_simt_threads[] = {64, 128, 256, 512, 1024};

static int tw_simt_supports(const tw_tune_problem *p, const tw_tune_device *d) {
    (void)p;
    return tw_arch_num(d) >= 75;
}

static int tw_simt_check(const tw_tune_problem *p, const tw_tune_config *c, char *why, size_t n) {
    tw_gp_cfg g;
    if (tw_gp_of(c, &g, why, n) || tw_gp_cfg_rule(&g, &p->shape, why, n) != 0)
        return 1;
    /* Rows beyond M only idle; keep the smallest tile whatever M is. */
    if (g.bm > (unsigned)tw_simt_bm[0] && (size_t)g.bm > p->M) {
        snprintf(why, n, "BM=%u rows per CTA > M=%zu", g.bm, p->M);
        return 1;
    }
    return 0;
}

static uint64_t tw_simt_smem_of(const tw_tune_problem *p, const tw_tune_config *c) {
    tw_gp_cfg g;
    return tw_gp_cfg_from_tune(c, &g) == 0 ? tw_simt_smem(&g, &p->shape) : UINT64_MAX;
}

static int tw_simt_threads_of(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p;
    return (int)tw_v(c, "THREADS");
}

/* The accumulators plus about 32 for addresses, loop state and the packer. */
static int tw_simt_regs(const tw_tune_problem *p, const tw_tune_config *c) {
    int64_t th = tw_v(c, "THREADS");
    return th > 0 ? (int)(tw_v(c, "BM") * (int64_t)p->shape.T / th) + 32 : 255;
}

const tw_tune_space tw_gate_pack_space_simt = {
    .op = TW_GATE_PACK_OP,
    .kernel = "gate_pack_simt",
    .about = "portable FP32 SIMT gate-pack",
    .naxes = 2,
    .axes = {{"BM", tw_simt_bm, 5}, {"THREADS", tw_simt_threads, 5}},
    .defaults = {32, 256}, /* tw_gp_cfg_default(TW_GP_SIMT) */
    .supports = tw_simt_supports,
    .check = tw_simt_check,
    .smem_bytes = tw_simt_smem_of,
    .threads = tw_simt_threads_of,
    .regs_per_thread = tw_simt_regs,
};
