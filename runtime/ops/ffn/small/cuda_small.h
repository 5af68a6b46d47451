/*
 * cuda_small.h — the small-batch (decode) inference path on CUDA: twell_gate_pack and
 * twell_ffn_infer for a few rows (M from 1 to a few hundred), where the layer is bound by reading
 * the weights from HBM. Two or three launches in all (templates/gate_pack/gate_pack_small.cu.lua,
 * then templates/ffn/ffn_small.cu.lua's fused kernel, or its up and down kernels), each weight row
 * read about once per call.
 */
#ifndef TWELL_CUDA_SMALL_H
#define TWELL_CUDA_SMALL_H

#include "cuda_driver.h"

#include <stdarg.h>

/* Per-plan state: the modules, the workspace (cuda_small_int.h). */
typedef struct tw_small tw_small;

/* When the path runs: AUTO in the shipped library; in the test library a probe
 * (TW_TC_SMALL_SET_MODE, cuda_small_probe.h) lets tests and the bench force it either way.
 *   AUTO   twell_gate_pack: M ≤ TW_SMALL_GATE_AUTO_M, unless the plan's gate-pack variant was
 *          forced away from the device's default (tw_cuda_plan_gate_pack_select);
 *          twell_ffn_infer: plan path AUTO and the policy's route SMALL (ffn_policy.h: up to
 *          TW_POLICY_SMALL_MAX_ROWS rows, where the estimate does not pick DENSE).
 *   OFF    never (the tiled pipeline and the gate-pack kernels of the plan, as before).
 *   FORCE  every call with M ≤ TW_SMALL_MAX_M (twell_ffn_infer: unless the plan path is DENSE).
 * In every mode the path needs sm_80+, K % 32 == 0, x, the weights and y 16-byte aligned, and
 * its modules loaded; a call it cannot take runs the plan's other kernels. */
typedef enum tw_small_mode {
    TW_SMALL_AUTO = 0,
    TW_SMALL_OFF = 1,
    TW_SMALL_FORCE = 2
} tw_small_mode;

/* twell_ffn_infer of up to this many rows (and K up to TW_SMALL_FUSED_K) runs one kernel instead
 * of two (ffn_small.cu.lua), needing no workspace: each 256-column block of a row computes the h
 * it needs itself, or on sm_90+ up to 8 rows a cluster of 8 blocks a row shares that work. */
#define TW_SMALL_FUSED_M ((size_t)16)
#define TW_SMALL_FUSED_K 8192u
/* The most rows the path takes (its workspace grows to at most this many rows). */
#define TW_SMALL_MAX_M ((size_t)1024)

/* The row kernel would serve a call of M rows (loaded for this plan, more rows than the fused
 * kernel's, not turned off by test control): AUTO's rule 0 (ffn_policy.h). NULL: 0. */
int tw_small_row_ok(const tw_small *sm, size_t M);

/* AUTO's calls from now on keep off (1) or may take (0) the row kernel: its one block a row
 * recomputes a row's overflowing row-tiles alone, so once AUTO's counts show overflow the up and
 * down kernels, which spread that work over the neurons, serve instead. */
void tw_small_avoid_row(tw_small *sm, int avoid);
/* AUTO's gate-pack limit: the small gate kernel (g2u2, small_gate.h) up to it, the plan's own
 * gate-pack above (FORCE runs g2u2 at any M up to TW_SMALL_MAX_M, in more token blocks). The
 * small kernel re-reads the weight once per token block of 16 rows, so its time grows with M
 * while the other gate-packs' stays flat; the crossover lies between 32 and 64 rows
 * (BENCHMARKS.md, "Gate-pack routes and AUTO's crossovers"; re-measure with
 * `twell bench --op gate_pack --variant small --M 1,8,32,64,128,256` against --lt-gate all). The
 * inference kernels' limit is the policy's TW_POLICY_SMALL_MAX_ROWS (ffn_policy.h). */
#define TW_SMALL_GATE_AUTO_M ((size_t)32)

/* Prepares the path for plan->shape: renders/compiles (or takes from the cache) and loads both
 * modules where the device and shape allow it (sm_80+, K % 32 == 0); otherwise, or when a module
 * fails to build (logged), the path is only marked unavailable. The workspace is allocated by
 * twell_plan_reserve or the first call that needs it. Only TWELL_ERR_NO_MEMORY fails. Inside
 * tw_cu_enter/leave. *out NULL on failure. */
twell_status tw_small_init(twell_plan *plan, tw_small **out);

/* Frees everything (buffers captured graphs used included); the caller has synchronised the
 * device. NULL is a no-op. */
void tw_small_release(twell_plan *plan, tw_small *sm);

/* twell_plan_reserve's part: the workspace for min(max_M, the rows AUTO sends here) rows (gate
 * scratch and arrival counters, h and overflow masks: about N·6 bytes a row), when the path is
 * available; auto_max: the most rows twell_ffn_infer's AUTO sends here (its policy's, ffn_policy.h;
 * twell_gate_pack's own bound is TW_SMALL_GATE_AUTO_M). May wait for the plan's earlier
 * small-path work (a larger workspace). Inside tw_cu_enter/leave. */
twell_status tw_small_reserve_rows(twell_plan *plan, tw_small *sm, size_t max_M, size_t auto_max);

/* twell_gate_pack through the small path when the mode and the call allow it (arguments validated
 * by plan.c; context current). Returns 0 when the call is not for this path (the caller runs its
 * other kernels), else 1 with *st the call's status. An eager call of more rows than the
 * workspace holds allocates it (rows rounded up to a power of two ≥ 64) after waiting for the
 * plan's earlier small-path work; an allocation failure in AUTO mode returns 0 (logged: the other
 * kernels are exact too), in FORCE mode 1 with TWELL_ERR_NO_MEMORY. Eager calls on different
 * streams are ordered through an event (they share the scratch). While stream is being captured
 * the call allocates, records and waits for nothing: with too small a workspace AUTO returns 0,
 * FORCE fails with TWELL_ERR_INVALID_ARG; buffers a captured call used are kept until release.
 * Steady state: one launch (and, eager, an event record) per call. */
int tw_small_gate_pack(twell_plan *plan, tw_small *sm, size_t M, const void *x, const void *w,
                       uint32_t *packed, twell_stream stream, twell_status *st);

/* twell_ffn_infer's small path (called by the path choice, ffn_route.c; arguments validated by
 * plan.c, context current; aligned16: x, the weights and y 16-byte aligned):
 *   forced: 1 when the mode is FORCE and the path can take the call (then it must run here);
 *   ok:     1 when the path can take the call in AUTO mode (the policy's small_ok);
 *   try:    runs it; workspace, streams and capture as for tw_small_gate_pack (the fused kernel,
 *           up to TW_SMALL_FUSED_M rows, needs no workspace). Returns 0 when it could not run
 *           (AUTO: workspace unavailable, logged) and the caller runs another path, else 1 with
 *           *st the status. */
/* 1 when the mode is FORCE: the plan's gate-pack then runs the small path where it can, before
 * any other route. */
int tw_small_gate_forced(const tw_small *sm);

/* Records that the plan's last gate-pack ran another route (TW_TC_SMALL_LAST_GATE reads 0). */
void tw_small_gate_not_run(tw_small *sm);

int tw_small_ffn_forced(const twell_plan *plan, const tw_small *sm, size_t M, int aligned16,
                        int capturing);
int tw_small_ffn_ok(const twell_plan *plan, const tw_small *sm, size_t M, int aligned16,
                    int capturing);
int tw_small_ffn_try(twell_plan *plan, tw_small *sm, size_t M, const void *x,
                     const uint32_t *packed, const void *wg, const void *wu, const void *wd,
                     void *y, int capturing, twell_stream stream, twell_status *st);

/* Every twell_ffn_infer call starts with this, so TW_TC_SMALL_LAST_FFN speaks of the latest call
 * also when another route ran it (sm may be NULL). */
void tw_small_ffn_call_begins(tw_small *sm);

#endif /* TWELL_CUDA_SMALL_H */
