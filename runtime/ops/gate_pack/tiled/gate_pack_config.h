/*
 * gate_pack_config.h — the gate-pack kernels' configurations (the template parameters the tuner
 * chooses) and their rules, written once: the templates' own rules (gate_pack_simt.cu.lua,
 * gate_pack_sm90.cu.lua) and shared-memory formulas, used by the launchers (cuda_gate_pack*.c)
 * and by the tuner's spaces (gate_pack_space.c).
 */
#ifndef TWELL_GATE_PACK_CONFIG_H
#define TWELL_GATE_PACK_CONFIG_H

#include "cuda_driver.h"

#include <stddef.h>

/* Which kernel computes gate-pack. AUTO: SM90 when the device is sm_90a and
 * tw_sm90_gate_pack_supports() accepts the shape (falling back to SIMT if loading it reports
 * TWELL_ERR_UNSUPPORTED), else SIMT. */
typedef enum tw_gp_variant { TW_GP_AUTO = 0, TW_GP_SIMT = 1, TW_GP_SM90 = 2 } tw_gp_variant;

/* "auto", "simt", "sm90"; NULL for anything else. */
const char *tw_gp_variant_name(tw_gp_variant v);
/* Parses a name above; -1 if unknown. */
int tw_gp_variant_parse(const char *name);

typedef struct tw_gp_cfg {
    tw_gp_variant variant;        /* SIMT or SM90 */
    unsigned bm, threads;         /* SIMT: rows per CTA (BM), threads per CTA (THREADS) */
    unsigned bk, stages, cluster; /* SM90: K per stage (BK), pipeline depth (STAGES), CTAs per
                                     cluster along M (CLUSTER) */
} tw_gp_cfg;

/* The untuned configuration of v (SIMT: BM 32, THREADS 256; SM90: BK 64, STAGES 3, CLUSTER 2):
 * what a plan uses when no tuned winner is stored, and its space's default. */
tw_gp_cfg tw_gp_cfg_default(tw_gp_variant v);

/* The template a configuration renders ("gate_pack_simt", "gate_pack_sm90"). */
const char *tw_gp_cfg_kernel(const tw_gp_cfg *c);

/* Converts a tuner configuration (autotune/candidates.h: kernel gate_pack_simt with BM, THREADS
 * or gate_pack_sm90 with BK, STAGES, CLUSTER; missing parameters take the defaults) into *out.
 * Returns 0, or -1 for another kernel or a value outside 1..65535. */
struct tw_tune_config;
int tw_gp_cfg_from_tune(const struct tw_tune_config *tc, tw_gp_cfg *out);

/* ---- the rules (pure: the shape only, no device) ---- */

/* Fixed by the sm90 kernel: CTA tile (rows, columns), threads per CTA (one producer and two
 * consumer warpgroups). */
#define TW_SM90_BM 128u
#define TW_SM90_BN 256u
#define TW_SM90_THREADS 384u

/* 1 when the sm90 kernel's template takes shape s: K a positive multiple of 64, N ≤ 65536 a
 * multiple of T, T 64 | 128 | 256, C 2 | 4 | 8, bf16 or fp16 (T = 64 and 128 tiles are packed
 * four and two per 256-column CTA tile; a ragged last column tile reads zeros beyond N through
 * the tensor map). M is not part of it: every M ≥ 1 works. */
int tw_sm90_shape_ok(const twell_shape *s);

/* The dynamic shared memory of an sm90 configuration, bytes (the template's SMEM formula). */
unsigned tw_sm90_smem(const tw_gp_cfg *c);

/* The SIMT template's K step for c on s (32 or 16, the first dividing K whose static shared
 * memory stays under 48 KB), or 0 when none fits; and that static shared memory, bytes (with
 * KT 16 when none fits). */
unsigned tw_simt_kt(const tw_gp_cfg *c, const twell_shape *s);
unsigned tw_simt_smem(const tw_gp_cfg *c, const twell_shape *s);

/* THE rule: 0 when c's template takes it for shape s (SIMT: BM 1..128, THREADS a multiple of 32
 * in 32..1024 dividing BM·T, at most 64 accumulators per thread, a K step that fits; SM90: the
 * shape (tw_sm90_shape_ok), BK 32 | 64 dividing K, STAGES 2..8, CLUSTER 1 | 2 | 4); else -1 with
 * the reason in why (may be NULL). Device limits (shared memory, SMs, the architecture) are not
 * part of it. */
int tw_gp_cfg_rule(const tw_gp_cfg *c, const twell_shape *s, char *why, size_t n);

/* ---- on a device ---- */

/* 0 when cfg can run shape s on dev: the rule, and for SM90 an sm_90a device with the shared
 * memory (opt-in) and SMs the configuration needs; else -1 with the reason in why (may be NULL).
 * Pure and cheap. */
int tw_gp_cfg_check(const tw_gp_cfg *cfg, const twell_shape *s, const tw_cuda *dev, char *why,
                    size_t n);
/* tw_gp_cfg_check for an SM90 configuration. */
int tw_sm90_cfg_check(const tw_gp_cfg *cfg, const twell_shape *s, const tw_cuda *dev, char *why,
                      size_t n);
/* Non-zero iff the sm90 kernel's DEFAULT configuration handles shape on dev. */
int tw_sm90_gate_pack_supports(const twell_shape *shape, const tw_cuda *dev);

#endif /* TWELL_GATE_PACK_CONFIG_H */
