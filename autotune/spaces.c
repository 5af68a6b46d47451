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
 * gate_pack_sm90 — templates/gate_pack_sm90.cu.lua (Hopper wgmma + TMA, design in its
 * header). Fixed geometry: CTA tile 128 x 256, 384 threads (one
 * producer and two consumer warpgroups). Tuned: BK (K per stage: 64 with 128-byte swizzle or 32
 * with 64-byte), STAGES (pipeline depth) and CLUSTER (CTAs along M sharing the weight tile by
 * multicast). Shared memory as the SMEM formula of templates/gate_pack_sm90.cu.lua: the stage
 * ring, the epilogue staging (8 warps x 16 rows x 528 B), full/empty mbarriers per stage plus
 * the staging pair, and 1 KiB of alignment slack.
 * ------------------------------------------------------------------------------------------- */

#define TW_SM90_BM 128
#define TW_SM90_BN 256
#define TW_SM90_THREADS 384
#define TW_SM90_STAGING (8 * 16 * 528)

static const int64_t tw_sm90_bk[] = {32, 64};
static const int64_t tw_sm90_stages[] = {2, 3, 4, 5, 6, 7, 8};
static const int64_t tw_sm90_cluster[] = {1, 2};

/* Exactly the shapes plans run this kernel on (tw_sm90_gate_pack_supports in
 * runtime/cuda_gate_pack_sm90.c; tests/test_gate_pack_cfg.c checks the two agree), so every
 * shape a plan runs on sm90 can be tuned: T = 64 and 128 tiles are packed four and two per
 * 256-column CTA tile, and a ragged last column tile (N not a multiple of 256) reads zeros
 * beyond N through the tensor map, whose packed words are never stored. */
static int tw_sm90_supports(const tw_tune_problem *p, const tw_tune_device *d) {
    const twell_shape *s = &p->shape;
    return !strcmp(d->arch, "sm_90a") && s->K > 0 && s->K % 64 == 0 && s->N > 0 && s->N <= 65536 &&
           (s->T == 64 || s->T == 128 || s->T == 256) && s->N % s->T == 0 &&
           (s->C == 2 || s->C == 4 || s->C == 8) &&
           (s->dtype == TWELL_DTYPE_BF16 || s->dtype == TWELL_DTYPE_FP16);
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
 * ffn_fused — templates/ffn_fused.cu.lua (fused gated up+down from the packed gate: pre-pass,
 * per-(chunk, group) pair lists, tensor-core phases A and B). The launcher is runtime/cuda_ffn.c
 * (tw_ffn_tile_config, tw_ffn_tile_derive); these rules mirror its checks and the template's, and
 * tests/test_autotune.c checks the three agree.
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
 * Shared memory (the launcher's formulas): STAGES·CN·128 (weight chunks) + STAGES·(4·DCAPA + LA)
 * + 2048 (offset table) in phase A, at least 16 KB of it for staged lists; phase B likewise with
 * (4 + 4)·DCAPB gated; the overflow kernels' 4·64·128·3 and 2·(2·32·t·2 + 128·t), t = min(T, 128).
 * ------------------------------------------------------------------------------------------- */

#define TW_FFN_SMEM_MAX 232448u /* the template's ceiling (227 KB, sm_90) */
#define TW_FFN_RE 2048u         /* (first, end) offsets of up to 256 chunks */
#define TW_FFN_LIST_MIN 16384u  /* least list staging the launcher accepts */

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
    return tw_arch_num(d) >= 80 && p->shape.K % 64 == 0 && p->shape.T >= 64;
}

/* Phase A's and phase B's shared memory needs (list staging at its minimum). */
static void tw_ffn_needs(const tw_tune_problem *p, const tw_tune_config *c, uint64_t *a,
                         uint64_t *b) {
    uint64_t cn = (uint64_t)tw_v(c, "CN"), st = (uint64_t)tw_v(c, "STAGES");
    uint64_t la = (2u * (uint64_t)(tw_v(c, "NWA") * tw_v(c, "GPWA")) + 4u) * 4u;
    uint64_t lb = (2u * (uint64_t)(tw_v(c, "NWB") * tw_v(c, "GPWB")) + 4u) * 4u;
    uint64_t vb = p->shape.gated ? 4u : 2u;
    *a = st * (cn * 128u + la) + TW_FFN_RE + TW_FFN_LIST_MIN;
    *b = st * cn * 128u + TW_FFN_RE + st * (lb + 16u * (4u + vb));
}

static int tw_ffn_check(const tw_tune_problem *p, const tw_tune_config *c, char *why, size_t n) {
    int64_t cn = tw_v(c, "CN"), T = p->shape.T, st = tw_v(c, "STAGES");
    for (int i = 0; i < 2; i++) {
        int64_t gpw = tw_v(c, i ? "GPWB" : "GPWA"), nw = tw_v(c, i ? "NWB" : "NWA");
        if (gpw < 1 || gpw > 8 || nw < 4 || nw > 32 || nw % 2 != 0) {
            snprintf(why, n,
                     "GPW%c=%lld, NW%c=%lld: the template takes 1..8 groups of an even "
                     "4..32 warps",
                     i ? 'B' : 'A', (long long)gpw, i ? 'B' : 'A', (long long)nw);
            return 1;
        }
    }
    if (st < 2 || st > 4 || tw_v(c, "PF") < 0 || tw_v(c, "PF") > 1 || tw_v(c, "IL") < 0 ||
        tw_v(c, "IL") > 1) {
        snprintf(why, n, "STAGES=%lld PF=%lld IL=%lld: 2..4, 0|1, 0|1", (long long)st,
                 (long long)tw_v(c, "PF"), (long long)tw_v(c, "IL"));
        return 1;
    }
    if (cn < T || cn % T != 0 || cn % 64 != 0 || cn > 1024) {
        snprintf(why, n, "CN=%lld is not a multiple of T=%lld and 64 in [T, 1024]", (long long)cn,
                 (long long)T);
        return 1;
    }
    int64_t nt = (int64_t)(p->shape.N / p->shape.T), tpc = cn / T, nc = (nt + tpc - 1) / tpc;
    if (nc > 256) {
        snprintf(why, n, "CN=%lld gives %lld chunks of N=%u (at most 256)", (long long)cn,
                 (long long)nc, p->shape.N);
        return 1;
    }
    /* The launcher caps the shared memory it plans with at the template's ceiling, whatever
     * the device offers. */
    uint64_t a, b;
    tw_ffn_needs(p, c, &a, &b);
    if (a > TW_FFN_SMEM_MAX || b > TW_FFN_SMEM_MAX) {
        snprintf(
            why, n, "CN=%lld STAGES=%lld needs %llu B of shared memory, over the template's %u",
            (long long)cn, (long long)st, (unsigned long long)(a > b ? a : b), TW_FFN_SMEM_MAX);
        return 1;
    }
    return 0;
}

static uint64_t tw_ffn_smem(const tw_tune_problem *p, const tw_tune_config *c) {
    uint64_t a, b, t = p->shape.T < 128 ? p->shape.T : 128u;
    tw_ffn_needs(p, c, &a, &b);
    uint64_t gu = 4u * 64u * 128u * (p->shape.gated ? 3u : 2u);
    uint64_t down = 2u * (2u * 32u * t * 2u + t * 128u);
    uint64_t need = a > b ? a : b;
    need = need > gu ? need : gu;
    return need > down ? need : down;
}

static int tw_ffn_threads_of(const tw_tune_problem *p, const tw_tune_config *c) {
    (void)p;
    int64_t a = tw_v(c, "NWA"), b = tw_v(c, "NWB");
    return 32 * (int)(a > b ? a : b); /* phases A and B; the other kernels use 256 or 1024 */
}

static const tw_tune_space tw_space_ffn_fused = {
    .op = "ffn_infer",
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
    .defaults = {512, 2, 8, 4, 16, 16, 1, 0},
    .supports = tw_ffn_supports,
    .check = tw_ffn_check,
    .smem_bytes = tw_ffn_smem,
    .threads = tw_ffn_threads_of,
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
