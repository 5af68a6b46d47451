/*
 * cuda_ffn.h — twell_ffn_infer on CUDA: the fused TwELL kernels of templates/ffn_fused.cu.lua
 * (tiled, tensor cores, exact overflow recompute, device-side fallback) and the portable row
 * kernel of templates/ffn_rows.cu.lua, with a per-plan workspace sized from the data.
 */
#ifndef TWELL_CUDA_FFN_H
#define TWELL_CUDA_FFN_H

#include "cuda_driver.h"

/* Per-plan state: loaded modules, the tile configuration read from the module, the workspace. */
typedef struct tw_ffn tw_ffn;

/* Which kernels a call runs (tests and the bench force the others).
 *   AUTO     the tiled pipeline with its fallback where it can run, else GENERIC
 *   ROWS     ffn_fused's one-warp-per-row kernel alone (the simple exact baseline)
 *   GENERIC  ffn_rows.cu.lua (any K multiple of 16, any alignment, sm_75+) */
typedef enum tw_ffn_kernel { TW_FFN_AUTO = 0, TW_FFN_ROWS = 1, TW_FFN_GENERIC = 2 } tw_ffn_kernel;

/* "auto", "rows", "generic"; NULL for anything else. */
const char *tw_ffn_kernel_name(tw_ffn_kernel k);

/* Prepares the op ONCE for plan->shape (gated or not): renders/compiles (or takes from the cache)
 * and loads ffn_fused where the shape and device allow it (K % 64 == 0, sm_80+, enough shared
 * memory), sets its dynamic shared memory limits and reads its twell_ffn_cfg; otherwise loads
 * ffn_rows. The tile configuration (template parameters CN, STAGES, GPWA/GPWB, NWA/NWB, PF, IL and
 * the derived DCAPA/DCAPB) comes from tw_ffn_tile_config in cuda_ffn.c; for development the
 * environment variable TWELL_FFN_TILE="KEY=v,..." (keys CN, STAGES, GPWA, GPWB, NWA, NWB, PF, IL)
 * overrides it at plan creation, ignored with a warning if it does not fit. Allocates the small
 * pinned flag buffer and an event; the workspace is allocated at the first call (it depends on M
 * and the data). Inside tw_cu_enter/leave. *out NULL on failure. */
twell_status tw_cuda_ffn_init(twell_plan *plan, tw_ffn **out);

/* Frees everything; the caller has synchronised the device. NULL is a no-op. Inside
 * tw_cu_enter/leave. */
void tw_cuda_ffn_release(twell_plan *plan, tw_ffn *f);

/* Enqueues y = ffn(x, packed, weights) on stream (arguments validated by plan.c; context
 * current). packed must be well-formed (as twell_gate_pack writes it): the device kernels do not
 * validate it (that would need a host synchronisation); malformed columns are never read out of
 * bounds by the row kernels, but the result is then unspecified.
 *
 * Workspace policy (no host synchronisation in the steady state):
 *  - rows are processed in chunks of at most TW_FFN_CHUNK; the workspace holds one chunk;
 *  - the first call whose chunk is larger than any before ("probe") runs the pre-pass, copies the
 *    device flag words to pinned memory, waits for the stream, sizes the pair list and the dense
 *    overflow buffers (row-tiles, rows) from the exact counts (+25%) and re-runs the pre-pass:
 *    one synchronisation per new largest chunk, never in the steady state;
 *  - every call copies each chunk's flag words asynchronously into pinned memory and records an
 *    event; the next call reads them only if that event has completed (cuEventQuery, no wait),
 *    and grows the buffers when a call needed more than they held (denser data than the probe;
 *    the counts are exact whatever the capacities, so no second probe is needed).
 *    A chunk that does not fit runs the exact row kernel instead (device-side flag), so every
 *    call is correct whatever the capacities; results are bitwise reproducible for a given
 *    workspace state (a fallback chunk and a tiled one differ at rounding level).
 *  - calls on different streams are ordered through the event (cuStreamWaitEvent), because they
 *    share the workspace.
 *  - growing the rows capacity (a larger chunk) synchronises with the previous call first;
 *    an allocation failure keeps the old buffers (the fallback stays exact) and logs a warning. */
twell_status tw_cuda_ffn_launch(twell_plan *plan, tw_ffn *f, size_t M, const void *x,
                                const uint32_t *packed, const void *wg, const void *wu,
                                const void *wd, void *y, twell_stream stream);

/* Rows per pipeline run: bounds the workspace and keeps every index inside the kernels' int. */
#define TW_FFN_CHUNK ((size_t)65536)

/* ---- hooks for tests and the bench (plan on the CUDA backend; TWELL_ERR_UNSUPPORTED else) ---- */

/* Forces a kernel choice (ROWS needs the tiled module: TWELL_ERR_UNSUPPORTED without it; GENERIC
 * compiles ffn_rows now if the plan does not have it). Synchronises the device. */
twell_status tw_cuda_ffn_set_kernel(twell_plan *plan, tw_ffn_kernel k);

/* Pins the pair and overflow capacities (pair slots; overflowing row-tiles, also used as the
 * overflowing-row capacity; both 0: back to automatic sizing, keeping the buffers). Reallocates
 * after synchronising the device. Used to exercise the fallback. */
twell_status tw_cuda_ffn_set_capacity(twell_plan *plan, size_t pair_cap, size_t ovf_cap);

/* Synchronises the device and copies the flag words of the last chunk the tiled pipeline ran:
 * [0] fallback bits (0: tiled result; 1: overflow buffer too small; 2: pair buffer too small),
 * [1] pair slots needed, [2] overflowing row-tiles, [3] overflowing rows. All 0 if none ran. */
twell_status tw_cuda_ffn_flags(twell_plan *plan, uint32_t out[4]);

/* 1 if the plan has the tiled pipeline; modules loaded so far; device bytes of the workspace;
 * how many calls synchronised to size it (probes). 0 for a non-CUDA plan. */
int tw_cuda_ffn_tiled(const twell_plan *plan);
int tw_cuda_ffn_modules(const twell_plan *plan);
size_t tw_cuda_ffn_workspace_bytes(const twell_plan *plan);
int tw_cuda_ffn_probes(const twell_plan *plan);

#endif /* TWELL_CUDA_FFN_H */
