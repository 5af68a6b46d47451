/*
 * gate_pack_config.c — gate-pack configurations and their rules (gate_pack_config.h): the two
 * templates' parameter rules and shared-memory formulas, once, for the launchers and the tuner's
 * spaces. The templates keep their own checks of the same rules (they are also rendered by hand);
 * tests/test_gate_pack_cfg.c and test_autotune.c render them to show the two agree.
 */
#include "gate_pack_config.h"

#include "candidates.h"

#include <stdio.h>
#include <string.h>

/* The sm90 epilogue staging buffer: 8 consumer warps x 16 rows x 528-byte rows. */
#define TW_SM90_STAGING (8u * 16u * 528u)
/* The SIMT template keeps its static shared memory under this. */
#define TW_SIMT_SMEM_LIMIT (48u * 1024u)

const char *tw_gp_variant_name(tw_gp_variant v) {
    switch (v) {
    case TW_GP_AUTO:
        return "auto";
    case TW_GP_SIMT:
        return "simt";
    case TW_GP_SM90:
        return "sm90";
    }
    return NULL;
}

int tw_gp_variant_parse(const char *name) {
    if (!name)
        return -1;
    for (int v = TW_GP_AUTO; v <= TW_GP_SM90; v++)
        if (!strcmp(name, tw_gp_variant_name((tw_gp_variant)v)))
            return v;
    return -1;
}

tw_gp_cfg tw_gp_cfg_default(tw_gp_variant v) {
    tw_gp_cfg c;
    memset(&c, 0, sizeof c);
    c.variant = v == TW_GP_SM90 ? TW_GP_SM90 : TW_GP_SIMT;
    /* The templates' defaults; the tuner's spaces (gate_pack_space.c) take theirs from here. */
    c.bm = 32u;
    c.threads = 256u;
    c.bk = 64u;
    c.stages = 3u;
    c.cluster = 2u;
    return c;
}

const char *tw_gp_cfg_kernel(const tw_gp_cfg *c) {
    return c->variant == TW_GP_SM90 ? "gate_pack_sm90" : "gate_pack_simt";
}

static int tw_gp_u(const tw_tune_config *tc, const char *name, unsigned dflt, unsigned *out) {
    int64_t v = tw_tune_config_value(tc, name, (int64_t)dflt);
    if (v < 1 || v > 65535)
        return -1;
    *out = (unsigned)v;
    return 0;
}

int tw_gp_cfg_from_tune(const struct tw_tune_config *tc, tw_gp_cfg *out) {
    if (!strcmp(tc->kernel, "gate_pack_simt")) {
        *out = tw_gp_cfg_default(TW_GP_SIMT);
        return tw_gp_u(tc, "BM", out->bm, &out->bm) || tw_gp_u(tc, "THREADS", 256u, &out->threads)
                   ? -1
                   : 0;
    }
    if (!strcmp(tc->kernel, "gate_pack_sm90")) {
        *out = tw_gp_cfg_default(TW_GP_SM90);
        return tw_gp_u(tc, "BK", out->bk, &out->bk) || tw_gp_u(tc, "STAGES", 3u, &out->stages) ||
                       tw_gp_u(tc, "CLUSTER", 2u, &out->cluster)
                   ? -1
                   : 0;
    }
    return -1;
}

/* ---- the rules ---- */

int tw_sm90_shape_ok(const twell_shape *s) {
    if (!s || s->K == 0 || s->K % 64u != 0 || s->N == 0 || s->N > 65536u)
        return 0;
    if (s->T != 64u && s->T != 128u && s->T != 256u)
        return 0;
    if (s->N % s->T != 0 || (s->C != 2u && s->C != 4u && s->C != 8u))
        return 0;
    return s->dtype == TWELL_DTYPE_BF16 || s->dtype == TWELL_DTYPE_FP16;
}

unsigned tw_sm90_smem(const tw_gp_cfg *c) {
    /* The template's SMEM: 1 KB of alignment slack, the stage ring, the staging buffer,
     * 2 * (STAGES + 1) mbarriers and two words. */
    return 1024u + c->stages * (TW_SM90_BM + TW_SM90_BN) * c->bk * 2u + TW_SM90_STAGING +
           2u * (c->stages + 1u) * 8u + 16u;
}

static unsigned tw_simt_smem_kt(unsigned bm, unsigned t, unsigned kt) {
    /* the input tiles, rows padded by one float (conflict-free column reads), or the packed
     * values' staging, whichever is larger */
    unsigned inputs = (bm + t) * (kt + 1u) * 4u, vals = bm * t * 2u;
    return inputs > vals ? inputs : vals;
}

unsigned tw_simt_kt(const tw_gp_cfg *c, const twell_shape *s) {
    static const unsigned kts[] = {32, 16};
    for (size_t i = 0; i < 2; i++)
        if (s->K % kts[i] == 0 && tw_simt_smem_kt(c->bm, s->T, kts[i]) < TW_SIMT_SMEM_LIMIT)
            return kts[i];
    return 0;
}

unsigned tw_simt_smem(const tw_gp_cfg *c, const twell_shape *s) {
    unsigned kt = tw_simt_kt(c, s);
    return tw_simt_smem_kt(c->bm, s->T, kt ? kt : 16u);
}

static int tw_simt_rule(const tw_gp_cfg *c, const twell_shape *s, char *why, size_t n) {
    if (c->bm < 1u || c->bm > 128u || c->threads < 32u || c->threads > 1024u ||
        c->threads % 32u != 0 || (c->bm * s->T) % c->threads != 0) {
        snprintf(why, n,
                 "BM=%u THREADS=%u is not a configuration of gate_pack_simt for T=%u (BM 1..128, "
                 "THREADS a multiple of 32 dividing BM*T)",
                 c->bm, c->threads, s->T);
        return -1;
    }
    if (c->bm * s->T / c->threads > 64u) {
        snprintf(why, n, "BM*T/THREADS=%u accumulators per thread > 64", c->bm * s->T / c->threads);
        return -1;
    }
    if (!tw_simt_kt(c, s)) {
        snprintf(why, n, "BM=%u, T=%u need over 48 KB of static shared memory", c->bm, s->T);
        return -1;
    }
    return 0;
}

static int tw_sm90_rule(const tw_gp_cfg *c, const twell_shape *s, char *why, size_t n) {
    if (!tw_sm90_shape_ok(s)) {
        snprintf(why, n, "the sm90 kernel does not support K=%u N=%u T=%u C=%u", s ? s->K : 0u,
                 s ? s->N : 0u, s ? s->T : 0u, s ? s->C : 0u);
        return -1;
    }
    if ((c->bk != 32u && c->bk != 64u) || s->K % c->bk != 0 || c->stages < 2u || c->stages > 8u ||
        (c->cluster != 1u && c->cluster != 2u && c->cluster != 4u)) {
        snprintf(why, n, "BK=%u STAGES=%u CLUSTER=%u is not a configuration of gate_pack_sm90",
                 c->bk, c->stages, c->cluster);
        return -1;
    }
    return 0;
}

int tw_gp_cfg_rule(const tw_gp_cfg *c, const twell_shape *s, char *why, size_t n) {
    char dummy[256];
    if (!why || n == 0)
        why = dummy, n = sizeof dummy;
    if (c->variant == TW_GP_SM90)
        return tw_sm90_rule(c, s, why, n);
    if (c->variant == TW_GP_SIMT)
        return tw_simt_rule(c, s, why, n);
    snprintf(why, n, "no such gate-pack variant");
    return -1;
}

/* ---- on a device ---- */

int tw_sm90_cfg_check(const tw_gp_cfg *c, const twell_shape *s, const tw_cuda *dev, char *why,
                      size_t n) {
    char dummy[256];
    if (!why || n == 0)
        why = dummy, n = sizeof dummy;
    if (!dev || strcmp(dev->arch, "sm_90a") != 0) {
        snprintf(why, n, "the sm90 kernel does not run on %s", dev ? dev->arch : "?");
        return -1;
    }
    if (tw_sm90_rule(c, s, why, n) != 0)
        return -1;
    if (dev->smem_optin < (int)tw_sm90_smem(c) || dev->sm_count < (int)c->cluster) {
        snprintf(why, n, "BK=%u STAGES=%u CLUSTER=%u needs %u bytes of shared memory (device: %d)",
                 c->bk, c->stages, c->cluster, tw_sm90_smem(c), dev->smem_optin);
        return -1;
    }
    return 0;
}

int tw_gp_cfg_check(const tw_gp_cfg *cfg, const twell_shape *s, const tw_cuda *dev, char *why,
                    size_t n) {
    if (cfg->variant == TW_GP_SM90)
        return tw_sm90_cfg_check(cfg, s, dev, why, n);
    return tw_gp_cfg_rule(cfg, s, why, n);
}

int tw_sm90_gate_pack_supports(const twell_shape *shape, const tw_cuda *dev) {
    tw_gp_cfg d = tw_gp_cfg_default(TW_GP_SM90);
    return tw_sm90_cfg_check(&d, shape, dev, NULL, 0) == 0;
}
