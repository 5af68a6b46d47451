/*
 * ffn_config.c — ffn_fused's configuration rule (ffn_config.h): the template's parameter rules
 * and shared-memory formulas in one place, for the launcher, the tuner's space and the tuner.
 * The template keeps its own checks of the same rules (it is also rendered by hand) and echoes
 * the words in twell_ffn_cfg, which the launcher compares with these when it loads a module.
 */
#include "ffn_config.h"

#include "candidates.h"

#include <stdio.h>
#include <string.h>

#define TW_FFN_RE 2048u        /* (first, end) list offsets of up to 256 chunks, per block */
#define TW_FFN_LIST_MIN 16384u /* least shared memory phase A keeps for staged lists */

/* The template's parameter rules (no shared memory): 0, or -1 with the reason in why. */
static int tw_ffn_cfg_valid(const tw_ffn_cfg *c, const twell_shape *s, char *why, size_t n) {
    if (s->K % 64u != 0) {
        snprintf(why, n, "K=%u is not a multiple of 64 (the tiled kernels step K by 64)", s->K);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        unsigned gpw = i ? c->gpwb : c->gpwa, nw = i ? c->nwb : c->nwa;
        if (gpw < 1u || gpw > 8u || nw < 4u || nw > 32u || nw % 2u != 0) {
            snprintf(why, n,
                     "GPW%c=%u, NW%c=%u: the template takes 1..8 groups of an even 4..32 warps",
                     i ? 'B' : 'A', gpw, i ? 'B' : 'A', nw);
            return -1;
        }
    }
    if (c->pf > 1u) {
        snprintf(why, n, "PF=%u: 0 or 1", c->pf);
        return -1;
    }
    if (c->cn < s->T || c->cn % s->T != 0 || c->cn % 64u != 0 || c->cn > 1024u) {
        snprintf(why, n, "CN=%u is not a multiple of T=%u and 64 in [T, 1024]", c->cn, s->T);
        return -1;
    }
    uint32_t nt = s->N / s->T, tpc = c->cn / s->T, nc = (nt + tpc - 1u) / tpc;
    if (nc > 256u) {
        snprintf(why, n, "CN=%u gives %u chunks of N=%u (at most 256)", c->cn, nc, s->N);
        return -1;
    }
    return 0;
}

/* The shared memory of each kernel family at its least: phase A with TW_FFN_LIST_MIN bytes of
 * list staging, phase B with 16 list slots, the overflow kernels (their own fixed tiles). */
typedef struct tw_ffn_need {
    uint64_t a, b, gu, down;
} tw_ffn_need;

static tw_ffn_need tw_ffn_needs(const tw_ffn_cfg *c, const twell_shape *s) {
    tw_ffn_need nd;
    const uint64_t st = TW_FFN_STAGES, vb = s->gated ? 4u : 2u, wb = st * c->cn * 128u;
    /* per buffer: the staged list offsets and sizes of the block (GPW 8-token units per warp, NW
     * warps); once: the (first, end) offset table */
    const uint64_t la = (2u * (uint64_t)c->nwa * c->gpwa + 4u) * 4u;
    const uint64_t lb = (2u * (uint64_t)c->nwb * c->gpwb + 4u) * 4u;
    nd.a = wb + st * la + TW_FFN_RE + TW_FFN_LIST_MIN;
    nd.b = wb + TW_FFN_RE + st * (lb + 16u * (4u + vb));
    /* ovf_gu: a ring of 3 k-steps of x, wp (and wu) tiles of 64 x 64; ovf_down: two buffers of
     * 64-neuron steps (h hi and lo of 32 rows, the Wd block of its CW output columns) */
    nd.gu = 3u * 64u * 128u * (s->gated ? 3u : 2u);
    const uint64_t dcw = s->K % 128u == 0 ? 128u : 64u; /* ovf_down's output columns (CW) */
    nd.down = 2u * (2u * 32u * 64u * 2u + 64u * dcw * 2u);
    return nd;
}

uint32_t tw_ffn_cfg_smem(const tw_ffn_cfg *c, const twell_shape *s) {
    tw_ffn_need nd = tw_ffn_needs(c, s);
    uint64_t m = nd.a;
    m = nd.b > m ? nd.b : m;
    m = nd.gu > m ? nd.gu : m;
    m = nd.down > m ? nd.down : m;
    return m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
}

int tw_ffn_cfg_words(const tw_ffn_cfg *c, const twell_shape *s, uint32_t smem,
                     uint32_t want[TW_FFN_NWORDS], char *why, size_t n) {
    char local[256];
    if (!why || n == 0)
        why = local, n = sizeof local;
    if (want)
        memset(want, 0, TW_FFN_NWORDS * sizeof *want);
    if (tw_ffn_cfg_valid(c, s, why, n) != 0)
        return -1;
    const uint32_t need = tw_ffn_cfg_smem(c, s);
    if (need > smem) {
        snprintf(why, n, "CN=%u needs %u B of shared memory per block, over the %u here", c->cn,
                 need, smem);
        return -1;
    }
    if (!want)
        return 0;
    /* The words, by the template's formulas; every quantity fits 32 bits once c is valid and
     * fits smem. */
    const uint32_t st = TW_FFN_STAGES, cn = c->cn, vb = s->gated ? 4u : 2u, re = TW_FFN_RE;
    const uint32_t la = (2u * c->nwa * c->gpwa + 4u) * 4u, lb = (2u * c->nwb * c->gpwb + 4u) * 4u;
    const uint32_t wb = st * cn * 128u, nt = s->N / s->T, tpc = cn / s->T;
    const tw_ffn_need nd = tw_ffn_needs(c, s);
    want[TW_CFG_CN] = cn;
    want[TW_CFG_STAGES] = st;
    want[TW_CFG_GPWA] = c->gpwa;
    want[TW_CFG_GPWB] = c->gpwb;
    want[TW_CFG_NWA] = c->nwa;
    want[TW_CFG_NWB] = c->nwb;
    want[TW_CFG_PF] = c->pf;
    want[TW_CFG_IL] = 0u; /* a word the template keeps for its layout; always 0 */
    want[TW_CFG_GT] = TW_FFN_GT;
    /* the list staging fills what the weight chunks and the offset tables leave */
    want[TW_CFG_DCAPA] = (smem - wb - re - st * la) / (4u * st) / 16u * 16u;
    want[TW_CFG_DCAPB] = (smem - wb - re - st * lb) / (st * (4u + vb)) / 16u * 16u;
    want[TW_CFG_SMEM_A] = wb + st * (4u * want[TW_CFG_DCAPA] + la) + re;
    want[TW_CFG_SMEM_B] = wb + st * ((4u + vb) * want[TW_CFG_DCAPB] + lb) + re;
    want[TW_CFG_SMEM_GU] = (uint32_t)nd.gu;
    want[TW_CFG_SMEM_DOWN] = (uint32_t)nd.down;
    /* the overflow kernels' grids: ovf_gu 3 CTAs of 4 warps per SM, ovf_down 3 CTAs per SM */
    want[TW_CFG_GU_BPS] = 3u;
    want[TW_CFG_GU_THR] = 128u;
    want[TW_CFG_DOWN_BPS] = 3u;
    want[TW_CFG_BW] = 4;
    want[TW_CFG_NC] = (nt + tpc - 1) / tpc;
    want[TW_CFG_TPC] = tpc;
    want[TW_CFG_PADQ] = (s->dtype == TWELL_DTYPE_FP16 && s->gated) ? 16u : 8u;
    want[TW_CFG_GATED] = s->gated ? 1u : 0u;
    return 0;
}

int tw_ffn_cfg_from_tune(const struct tw_tune_config *tc, tw_ffn_cfg *out) {
    static const char *const names[] = {"CN", "GPWA", "GPWB", "NWA", "NWB", "PF"};
    static const int64_t dflt[] = {512, 8, 4, 16, 16, 1};
    static const int64_t lo[] = {1, 1, 1, 1, 1, 0};
    unsigned *dst[] = {&out->cn, &out->gpwa, &out->gpwb, &out->nwa, &out->nwb, &out->pf};
    if (strcmp(tc->kernel, "ffn_fused") != 0)
        return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int64_t v = tw_tune_config_value(tc, names[i], dflt[i]);
        if (v < lo[i] || v > 65535)
            return -1;
        *dst[i] = (unsigned)v;
    }
    return 0;
}

/* ---- on a device ---- */

int tw_ffn_cfg_resolve(const tw_ffn_cfg *c, const twell_shape *s, const tw_cuda *dev,
                       uint32_t want[TW_FFN_NWORDS], char *why, size_t n) {
    char local[256];
    if (!why || n == 0)
        why = local, n = sizeof local;
    if (dev->cc_major < 8) {
        if (want)
            memset(want, 0, TW_FFN_NWORDS * sizeof *want);
        snprintf(why, n, "%s: the tiled kernels need sm_80+ (bf16 mma.sync, cp.async)", dev->arch);
        return -1;
    }
    /* The launcher plans with at most the template's ceiling, whatever the device offers. */
    uint32_t smem = dev->smem_optin > 0 ? (uint32_t)dev->smem_optin : 0u;
    if (smem > TW_FFN_SMEM_MAX)
        smem = TW_FFN_SMEM_MAX;
    return tw_ffn_cfg_words(c, s, smem, want, why, n);
}

int tw_ffn_cfg_check(const tw_ffn_cfg *c, const twell_shape *s, const tw_cuda *dev, char *why,
                     size_t n) {
    return tw_ffn_cfg_resolve(c, s, dev, NULL, why, n);
}

int tw_ffn_cfg_default(const twell_shape *s, const tw_cuda *dev, tw_ffn_cfg *out) {
    /* The first CN of 512, 256 that fits, with 16 warps of 8 / 4 groups per block in phases A / B
     * and the list prefetch on (other warp shapes ran slower). */
    static const unsigned cand[] = {512, 256};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        *out = (tw_ffn_cfg){cand[i], 8u, 4u, 16u, 16u, 1u};
        if (tw_ffn_cfg_check(out, s, dev, NULL, 0) == 0)
            return 0;
    }
    *out = (tw_ffn_cfg){512u, 8u, 4u, 16u, 16u, 1u};
    return -1;
}

size_t tw_ffn_cfg_params(const tw_ffn_cfg *c, const twell_shape *s, const tw_cuda *dev,
                         tw_param out[TW_FFN_NPARAMS]) {
    uint32_t want[TW_FFN_NWORDS];
    if (tw_ffn_cfg_resolve(c, s, dev, want, NULL, 0) != 0)
        return 0;
    const tw_param p[TW_FFN_NPARAMS - TW_SHAPE_NPARAMS] = {
        {"gated", NULL, (long long)s->gated},
        {"CN", NULL, (long long)want[TW_CFG_CN]},
        {"GPWA", NULL, (long long)want[TW_CFG_GPWA]},
        {"GPWB", NULL, (long long)want[TW_CFG_GPWB]},
        {"DCAPA", NULL, (long long)want[TW_CFG_DCAPA]},
        {"DCAPB", NULL, (long long)want[TW_CFG_DCAPB]},
        {"NWA", NULL, (long long)want[TW_CFG_NWA]},
        {"NWB", NULL, (long long)want[TW_CFG_NWB]},
        {"PF", NULL, (long long)want[TW_CFG_PF]},
    };
    memcpy(out + tw_shape_params(s, out), p, sizeof p);
    return TW_FFN_NPARAMS;
}
