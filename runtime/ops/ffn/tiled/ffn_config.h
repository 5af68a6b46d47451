/*
 * ffn_config.h — the tile configurations of ffn_fused (templates/ffn/ffn_fused.cu.lua) and their
 * rule, written once: which configurations the template takes for a shape, the shared memory
 * they need, and the configuration words (twell_ffn_cfg) they resolve to. The launcher
 * (cuda_ffn_load.c), the tuner's space (ffn_space.c) and the tuner's callbacks all use it.
 */
#ifndef TWELL_FFN_CONFIG_H
#define TWELL_FFN_CONFIG_H

#include "cuda_driver.h"
#include "jit.h"

#include <stddef.h>
#include <stdint.h>

#define TW_FFN_NWORDS 23  /* words of a module's twell_ffn_cfg */
#define TW_FFN_NPARAMS 14 /* template parameters of one configuration */
/* Fixed by the template (its words STAGES, IL and GT hold them: 2, 0, 8): tokens per list group
 * (one mma n8 tile; the launch grids count groups of them) and weight chunks in flight in phases
 * A and B (the shared-memory formulas). */
#define TW_FFN_GT 8u
#define TW_FFN_STAGES 2u
/* The template's shared-memory ceiling (227 KB, sm_90): the launcher plans with at most this
 * much whatever the device offers, and the template sizes its defaults with it. */
#define TW_FFN_SMEM_MAX 232448u

/* twell_ffn_cfg[TW_FFN_NWORDS] of a module, in the template's order. */
enum {
    TW_CFG_CN,
    TW_CFG_GPWA,
    TW_CFG_GPWB,
    TW_CFG_DCAPA,
    TW_CFG_DCAPB,
    TW_CFG_SMEM_A,
    TW_CFG_SMEM_B,
    TW_CFG_SMEM_GU,
    TW_CFG_SMEM_DOWN,
    TW_CFG_BW,
    TW_CFG_NC,
    TW_CFG_TPC,
    TW_CFG_PADQ,
    TW_CFG_GATED,
    TW_CFG_STAGES,
    TW_CFG_NWA,
    TW_CFG_NWB,
    TW_CFG_PF,
    TW_CFG_IL,
    TW_CFG_GT,
    TW_CFG_GU_BPS,   /* ovf_gu CTAs per SM (grid GU_BPS * SMs) */
    TW_CFG_GU_THR,   /* ovf_gu threads per CTA */
    TW_CFG_DOWN_BPS, /* ovf_down CTAs per SM (grid DOWN_BPS * SMs, 256 threads) */
    TW_CFG_COUNT
};
_Static_assert(TW_CFG_COUNT == TW_FFN_NWORDS, "a name per twell_ffn_cfg word");

/* The tuned parameters; DCAPA and DCAPB follow from them, the shape and the shared memory. */
typedef struct tw_ffn_cfg {
    unsigned cn;         /* neurons per weight chunk (CN) */
    unsigned gpwa, gpwb; /* groups of 8 tokens per warp in phase A / B (GPWA, GPWB) */
    unsigned nwa, nwb;   /* warps per block in phase A / B (NWA, NWB) */
    unsigned pf;         /* list loads one step ahead (PF, 0 | 1) */
} tw_ffn_cfg;

/* ---- the rule (pure: shape and bytes of shared memory, no device) ---- */

/* The least shared memory per block, in bytes, that c needs for shape s: the largest of phase A
 * with 16 KB of staged list descriptors, phase B with 16 list slots, and the overflow kernels.
 * Meaningful for a c that passes the template's parameter rules (tw_ffn_cfg_words with enough
 * memory); saturates at UINT32_MAX. */
uint32_t tw_ffn_cfg_smem(const tw_ffn_cfg *c, const twell_shape *s);

/* THE rule. 0 when the template takes c for shape s (K a multiple of 64; CN a multiple of T and
 * 64 in [T, 1024] making at most 256 chunks; 1..8 groups of an even 4..32 warps per phase;
 * PF 0 | 1) and c fits `smem` bytes of shared memory per
 * block (tw_ffn_cfg_smem(c, s) ≤ smem); want (may be NULL) then receives the module's
 * configuration words: c's own, the staging capacities DCAPA / DCAPB that fill the shared
 * memory left, the kernels' shared-memory sizes, counts and overflow grids, as the template
 * computes them. Else -1 with the reason in why (may be NULL) and want zeroed. */
int tw_ffn_cfg_words(const tw_ffn_cfg *c, const twell_shape *s, uint32_t smem,
                     uint32_t want[TW_FFN_NWORDS], char *why, size_t n);

/* Converts a tuner configuration (kernel ffn_fused with CN, GPWA, GPWB, NWA, NWB, PF; missing
 * parameters take the defaults 512, 8, 4, 16, 16, 1) into *out. Returns 0, or -1 for another
 * kernel or a value out of range (PF may be 0, the others 1..65535). */
struct tw_tune_config;
int tw_ffn_cfg_from_tune(const struct tw_tune_config *tc, tw_ffn_cfg *out);

/* ---- on a device: the rule with the device's shared memory ---- */

/* The rule on dev: sm_80 or later, and tw_ffn_cfg_words with the device's opt-in shared memory
 * per block capped at TW_FFN_SMEM_MAX. 0 with want (may be NULL) filled, else -1 with why. */
int tw_ffn_cfg_resolve(const tw_ffn_cfg *c, const twell_shape *s, const tw_cuda *dev,
                       uint32_t want[TW_FFN_NWORDS], char *why, size_t n);

/* 0 when c can run shape s on dev (tw_ffn_cfg_resolve), else -1 with the reason in why (may be
 * NULL). Pure and cheap. */
int tw_ffn_cfg_check(const tw_ffn_cfg *c, const twell_shape *s, const tw_cuda *dev, char *why,
                     size_t n);

/* The untuned configuration for shape s on dev: the first CN of 512, 256 that fits, GPWA 8,
 * GPWB 4, NWA 16, NWB 16, PF 1.
 * Returns 0, or -1 when the tiled kernels cannot run there at all (K not a multiple of 64, below
 * sm_80, too little shared memory); *out is set either way (to CN 512 on failure). */
int tw_ffn_cfg_default(const twell_shape *s, const tw_cuda *dev, tw_ffn_cfg *out);

/* The TW_FFN_NPARAMS template parameters c is rendered with for s on dev: K, N, T, C, dtype,
 * gated, CN, GPWA, GPWB, DCAPA, DCAPB (the staging capacities filling the shared memory left),
 * NWA, NWB, PF.
 * Keys and strings are static. The same list whoever compiles (plan or tuner), hence the same
 * cache key. Returns TW_FFN_NPARAMS, or 0 when c fails tw_ffn_cfg_check. */
size_t tw_ffn_cfg_params(const tw_ffn_cfg *c, const twell_shape *s, const tw_cuda *dev,
                         tw_param out[TW_FFN_NPARAMS]);

#endif /* TWELL_FFN_CONFIG_H */
