/*
 * spaces.c — the candidate space of every tunable kernel, one function group per template. The
 * template engine offers no way to read a table out of a template, so the spaces live here in C;
 * each block names its template, and a template's parameter names and limits must match it.
 */
#include "candidates.h"

#include <stdio.h>
#include <string.h>

static int tw_arch_num(const tw_tune_device *d) { return d->cc_major * 10 + d->cc_minor; }

static int64_t tw_v(const tw_tune_config *c, const char *name) {
    return tw_tune_config_value(c, name, 0);
}

/* ---------------------------------------------------------------------------------------------
 * gate_pack_sm90 — templates/gate_pack_sm90.cu.lua (Hopper wgmma + TMA, see
 * bench/dev/NOTES-gate-pack.md). Fixed geometry: CTA tile 128 x 256, 384 threads (one
 * producer and two consumer warpgroups). Tuned: BK (K per stage: 64 with 128-byte swizzle or 32
 * with 64-byte), STAGES (pipeline depth) and CLUSTER (CTAs along M sharing the weight tile by
 * multicast). Shared memory as TW_SMEM_BYTES in bench/dev/gate_pack_sm90_kernel.cuh: the stage
 * ring, the epilogue staging (8 warps x 16 rows x 528 B), full/empty mbarriers per stage plus
 * the staging pair, and 1 KiB of alignment slack. T = 128 tiles are packed two per CTA column
 * tile, so N must still be a multiple of 256.
 * ------------------------------------------------------------------------------------------- */

#define TW_SM90_BM 128
#define TW_SM90_BN 256
#define TW_SM90_THREADS 384
#define TW_SM90_STAGING (8 * 16 * 528)

static const int64_t tw_sm90_bk[] = {32, 64};
static const int64_t tw_sm90_stages[] = {2, 3, 4, 5, 6, 7, 8};
static const int64_t tw_sm90_cluster[] = {1, 2};

static int tw_sm90_supports(const tw_tune_problem *p, const tw_tune_device *d) {
    return !strcmp(d->arch, "sm_90a") && p->shape.K % 64 == 0 &&
           (p->shape.T == 128 || p->shape.T == 256) && p->shape.N % TW_SM90_BN == 0;
}

static int tw_sm90_check(const tw_tune_problem *p, const tw_tune_config *c, char *why, size_t n) {
    int64_t bk = tw_v(c, "BK"), cl = tw_v(c, "CLUSTER");
    if (bk <= 0 || p->shape.K % bk != 0) {
        snprintf(why, n, "K=%u is not a multiple of BK=%lld", p->shape.K, (long long)bk);
        return 1;
    }
    /* A cluster along M needs as many row tiles; with fewer, a CTA of each cluster idles. */
    if (cl > 1 && p->M <= (size_t)TW_SM90_BM * (size_t)(cl - 1)) {
        snprintf(why, n, "CLUSTER=%lld along M needs M > %d", (long long)cl,
                 TW_SM90_BM * (int)(cl - 1));
        return 1;
    }
    return 0;
}

static uint64_t tw_sm90_smem(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p;
    uint64_t bk = (uint64_t)tw_v(c, "BK"), stages = (uint64_t)tw_v(c, "STAGES");
    return 1024u + stages * (TW_SM90_BM + TW_SM90_BN) * bk * 2u + TW_SM90_STAGING +
           16u * (stages + 1u);
}

static int tw_sm90_threads(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p, (void)c;
    return TW_SM90_THREADS;
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

static const tw_tune_space tw_space_gate_pack_sm90 = {
    .op = "gate_pack",
    .kernel = "gate_pack_sm90",
    .about = "Hopper wgmma/TMA gate-pack, 128x256 CTA tile",
    .naxes = 3,
    .axes = {{"BK", tw_sm90_bk, 2}, {"STAGES", tw_sm90_stages, 7}, {"CLUSTER", tw_sm90_cluster, 2}},
    .defaults = {64, 3, 2},
    .supports = tw_sm90_supports,
    .check = tw_sm90_check,
    .smem_bytes = tw_sm90_smem,
    .threads = tw_sm90_threads,
    .regs_per_thread = tw_sm90_regs,
    .cluster = tw_sm90_cluster_size,
};

/* ---------------------------------------------------------------------------------------------
 * gate_pack_simt — templates/gate_pack_simt.cu.lua (portable FP32 SIMT, sm_75+). Tuned: BM (rows
 * per CTA) and THREADS. The template's own rules, mirrored: BM·T a multiple of THREADS, at most
 * 64 accumulators per thread, and a K step KT ∈ {32, 16} dividing K whose static shared memory
 * max((BM + T)(KT + 1)·4, BM·T·2) stays under 48 KB.
 * ------------------------------------------------------------------------------------------- */

static const int64_t tw_simt_bm[] = {8, 16, 32, 64, 128};
static const int64_t tw_simt_threads[] = {64, 128, 256, 512, 1024};

static int tw_simt_supports(const tw_tune_problem *p, const tw_tune_device *d) {
    (void)p;
    return tw_arch_num(d) >= 75;
}

static uint64_t tw_simt_smem_kt(uint64_t bm, uint64_t t, uint64_t kt) {
    uint64_t inputs = (bm + t) * (kt + 1u) * 4u, vals = bm * t * 2u;
    return inputs > vals ? inputs : vals;
}

/* The K step the template picks, or 0 when none fits. */
static uint64_t tw_simt_kt(const tw_tune_problem *p, const tw_tune_config *c) {
    static const uint64_t kts[] = {32, 16};
    uint64_t bm = (uint64_t)tw_v(c, "BM"), t = p->shape.T;
    for (size_t i = 0; i < 2; i++)
        if (p->shape.K % kts[i] == 0 && tw_simt_smem_kt(bm, t, kts[i]) < 48u * 1024u)
            return kts[i];
    return 0;
}

static int tw_simt_check(const tw_tune_problem *p, const tw_tune_config *c, char *why, size_t n) {
    int64_t bm = tw_v(c, "BM"), th = tw_v(c, "THREADS");
    int64_t tile = bm * (int64_t)p->shape.T;
    if (bm < 1 || th < 32 || th % 32 != 0 || tile % th != 0) {
        snprintf(why, n, "BM*T=%lld is not a multiple of THREADS=%lld", (long long)tile,
                 (long long)th);
        return 1;
    }
    if (tile / th > 64) {
        snprintf(why, n, "BM*T/THREADS=%lld accumulators per thread > 64", (long long)(tile / th));
        return 1;
    }
    if (!tw_simt_kt(p, c)) {
        snprintf(why, n, "BM=%lld, T=%u need over 48 KB of static shared memory", (long long)bm,
                 p->shape.T);
        return 1;
    }
    /* Rows beyond M only idle; keep the smallest tile whatever M is. */
    if (bm > tw_simt_bm[0] && (size_t)bm > p->M) {
        snprintf(why, n, "BM=%lld rows per CTA > M=%zu", (long long)bm, p->M);
        return 1;
    }
    return 0;
}

static uint64_t tw_simt_smem(const tw_tune_problem *p, const tw_tune_config *c) {
    uint64_t kt = tw_simt_kt(p, c);
    return tw_simt_smem_kt((uint64_t)tw_v(c, "BM"), p->shape.T, kt ? kt : 16u);
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

static const tw_tune_space tw_space_gate_pack_simt = {
    .op = "gate_pack",
    .kernel = "gate_pack_simt",
    .about = "portable FP32 SIMT gate-pack",
    .naxes = 2,
    .axes = {{"BM", tw_simt_bm, 5}, {"THREADS", tw_simt_threads, 5}},
    .defaults = {32, 256},
    .supports = tw_simt_supports,
    .check = tw_simt_check,
    .smem_bytes = tw_simt_smem,
    .threads = tw_simt_threads_of,
    .regs_per_thread = tw_simt_regs,
};

/* ---------------------------------------------------------------------------------------------
 * ffn_fused — templates/ffn_fused.cu.lua (fused gated up+down from the packed gate). PROVISIONAL:
 * written before the template landed; its author adjusts names and rules here to match it.
 * Tuned: THREADS per CTA, ROWS (token rows per CTA, each served by THREADS/32/ROWS warps or
 * sharing warps), UNROLL (active entries whose weight rows are in flight at once). A CTA keeps
 * its rows of x (dtype) and of the y accumulator (fp32) in shared memory.
 * ------------------------------------------------------------------------------------------- */

static const int64_t tw_ffn_threads[] = {64, 128, 256, 512};
static const int64_t tw_ffn_rows[] = {1, 2, 4, 8, 16};
static const int64_t tw_ffn_unroll[] = {1, 2, 4, 8};

static int tw_ffn_supports(const tw_tune_problem *p, const tw_tune_device *d) {
    return tw_arch_num(d) >= 75 && p->shape.K % 64 == 0;
}

static int tw_ffn_check(const tw_tune_problem *p, const tw_tune_config *c, char *why, size_t n) {
    int64_t warps = tw_v(c, "THREADS") / 32, rows = tw_v(c, "ROWS");
    if (warps < 1 || rows < 1 || (warps % rows != 0 && rows % warps != 0)) {
        snprintf(why, n, "%lld warps cannot share %lld rows evenly", (long long)warps,
                 (long long)rows);
        return 1;
    }
    if (rows > tw_ffn_rows[0] && (size_t)rows > p->M) {
        snprintf(why, n, "ROWS=%lld rows per CTA > M=%zu", (long long)rows, p->M);
        return 1;
    }
    return 0;
}

static uint64_t tw_ffn_smem(const tw_tune_problem *p, const tw_tune_config *c) {
    return (uint64_t)tw_v(c, "ROWS") * p->shape.K * (2u + 4u);
}

static int tw_ffn_threads_of(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p;
    return (int)tw_v(c, "THREADS");
}

/* Each entry in flight holds one 16-byte vector of Wu and of Wd per lane (8 registers), plus
 * about 40 for addresses, the dot product and the loop. */
static int tw_ffn_regs(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p;
    return 40 + 8 * (int)tw_v(c, "UNROLL");
}

static const tw_tune_space tw_space_ffn_fused = {
    .op = "ffn_infer",
    .kernel = "ffn_fused",
    .about = "fused gated up+down from the packed gate",
    .naxes = 3,
    .axes = {{"THREADS", tw_ffn_threads, 4},
             {"ROWS", tw_ffn_rows, 5},
             {"UNROLL", tw_ffn_unroll, 4}},
    .defaults = {256, 8, 4},
    .supports = tw_ffn_supports,
    .check = tw_ffn_check,
    .smem_bytes = tw_ffn_smem,
    .threads = tw_ffn_threads_of,
    .regs_per_thread = tw_ffn_regs,
};

/* ---- registry ---- */

/* In order of preference within an op. */
static const tw_tune_space *const tw_spaces[] = {
    &tw_space_gate_pack_sm90,
    &tw_space_gate_pack_simt,
    &tw_space_ffn_fused,
};
#define TW_NSPACES (sizeof tw_spaces / sizeof tw_spaces[0])

size_t tw_tune_spaces_for(const char *op, const tw_tune_space **out, size_t cap) {
    size_t count = 0;
    for (size_t i = 0; op && i < TW_NSPACES; i++)
        if (!strcmp(tw_spaces[i]->op, op)) {
            if (count < cap)
                out[count] = tw_spaces[i];
            count++;
        }
    return count;
}

const tw_tune_space *tw_tune_space_pick(const char *op, const tw_tune_problem *p,
                                        const tw_tune_device *d) {
    for (size_t i = 0; op && i < TW_NSPACES; i++)
        if (!strcmp(tw_spaces[i]->op, op) &&
            (!tw_spaces[i]->supports || tw_spaces[i]->supports(p, d)))
            return tw_spaces[i];
    return NULL;
}

const tw_tune_space *tw_tune_space_by_kernel(const char *kernel) {
    for (size_t i = 0; kernel && i < TW_NSPACES; i++)
        if (!strcmp(tw_spaces[i]->kernel, kernel))
            return tw_spaces[i];
    return NULL;
}

const char *const *tw_tune_ops(void) {
    static const char *const ops[] = {"gate_pack", "ffn_infer", NULL};
    return ops;
}
