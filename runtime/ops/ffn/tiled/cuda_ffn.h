/*
 * cuda_ffn.h — twell_ffn_infer on CUDA: the fused TwELL kernels of templates/ffn/ffn_fused.cu.lua
 * (tiled, tensor cores, exact overflow recompute, device-side fallback) and the portable row
 * kernel of templates/ffn/ffn_rows.cu.lua, with a per-plan workspace sized from the data.
 */
#ifndef TWELL_CUDA_FFN_H
#define TWELL_CUDA_FFN_H

#include "cuda_driver.h"
#include "ffn_config.h"
#include "jit.h"

#include <stdarg.h>

/* Per-plan state: loaded modules, the tile configuration read from the module, the workspace. */
typedef struct tw_ffn tw_ffn;

#define TW_FFN_NFN 9 /* kernels of an ffn_fused module (twell_ffn_prep .. twell_ffn_rows) */

/* The parameters the portable row kernel (ffn_rows.cu.lua, loaded by a call with tensors not
 * 16-byte aligned) is rendered with for s: K, N, T, C, dtype, gated; for compiling it ahead of
 * time (`twell tune`). Returns TW_FFN_ROWS_NPARAMS. */
#define TW_FFN_ROWS_NPARAMS 6
size_t tw_ffn_rows_params(const twell_shape *s, tw_param out[TW_FFN_ROWS_NPARAMS]);

/* One loaded ffn_fused module of one configuration. */
typedef struct tw_ffn_tk {
    tw_ffn_cfg cfg;
    tw_CUmodule mod;
    tw_CUfunction fn[TW_FFN_NFN];  /* NULL for phase_a and reduce in non-gated modules */
    uint32_t words[TW_FFN_NWORDS]; /* the module's twell_ffn_cfg */
    size_t probed;                 /* largest chunk a probe sized the workspace for, with this
                                      module, on the plan that runs it */
} tw_ffn_tk;

/* Loads ffn_fused in configuration c for shape s: from cubin when given (compiled elsewhere, e.g.
 * by the tuner's workers), else from the cache or compiled now. Reads and checks the module's
 * twell_ffn_cfg and sets the kernels' shared-memory limits. Context current. Errors:
 * TWELL_ERR_UNSUPPORTED (tw_ffn_cfg_check), those of tw_jit_cubin and the driver,
 * TWELL_ERR_INTERNAL (module and launcher disagree); *out zeroed on failure. */
twell_status tw_ffn_tk_load(twell_ctx *ctx, const twell_shape *s, const tw_ffn_cfg *c,
                            const void *cubin, tw_ffn_tk *out);
/* Unloads and zeroes *tk (a zeroed one is a no-op). Context current. */
void tw_ffn_tk_unload(tw_ffn_tk *tk);

/* The stored tuning winner of ffn_infer for plan's shape and M's bucket on this device
 * (cuda_ffn_tune.c), tuned first when tune_now and no record exists. Returns 0 with *out
 * set, or -1 (no usable winner: the bucket keeps the default; problems are logged). Context
 * current. */
int tw_ffn_winner(twell_plan *plan, size_t M, int tune_now, tw_ffn_cfg *out);

/* Which kernels a call runs (tests and the bench force the others).
 *   AUTO     the tiled pipeline with its fallback where it can run, else GENERIC
 *   ROWS     ffn_fused's one-warp-per-row kernel alone (the simple exact baseline)
 *   GENERIC  ffn_rows.cu.lua (any K multiple of 16, any alignment, sm_75+) */
typedef enum tw_ffn_kernel { TW_FFN_AUTO = 0, TW_FFN_ROWS = 1, TW_FFN_GENERIC = 2 } tw_ffn_kernel;

/* Prepares the op ONCE for plan->shape (gated or not): renders/compiles (or takes from the cache)
 * and loads ffn_fused where the shape and device allow it (K % 64 == 0, sm_80+, enough shared
 * memory), sets its dynamic shared memory limits and reads its twell_ffn_cfg; otherwise loads
 * ffn_rows. The tile configuration (template parameters CN, GPWA/GPWB, NWA/NWB, PF and the
 * derived DCAPA/DCAPB) is tw_ffn_cfg_default's, resolved by tw_ffn_cfg_resolve (ffn_config.c);
 * tuned winners replace it per M bucket (tw_cuda_ffn_prepare). Allocates the small pinned flag
 * buffer and an event; the workspace is allocated at the first call (it depends on M and the
 * data). Inside tw_cu_enter/leave. *out NULL on failure. */
twell_status tw_cuda_ffn_init(twell_plan *plan, tw_ffn **out);

/* Frees everything; the caller has synchronised the device. NULL is a no-op. Inside
 * tw_cu_enter/leave. */
void tw_cuda_ffn_release(twell_plan *plan, tw_ffn *f);

/* Enqueues y = ffn(x, packed, weights) on stream (arguments validated by plan.c; context
 * current). packed must be well-formed (as twell_gate_pack writes it): the device kernels do not
 * validate it (that would need a host synchronisation: options.validate_packed checks it first,
 * packed_check.h); a malformed one gives unspecified results but is never read out of bounds (a
 * count above the slots is an overflowing row-tile, a column outside its chunk or past N reads
 * nothing beyond the weights).
 *
 * Workspace policy (no host synchronisation in the steady state):
 *  - rows are processed in chunks of at most TW_FFN_CHUNK; the workspace holds one chunk;
 *  - the first call whose chunk is larger than any before ("probe") runs the pre-pass, copies the
 *    device flag words to pinned memory, waits for the stream, sizes the pair list and the dense
 *    overflow buffers (row-tiles, rows) from the exact counts (+25%) and re-runs the pre-pass:
 *    one synchronisation per new largest chunk, never in the steady state;
 *  - every chunk's scan accumulates its needs (exact whatever the capacities) into a device
 *    record of the largest needs since plan creation and mirrors it to pinned memory (the scan
 *    writes it there when the driver maps it, else one asynchronous copy per call); each call
 *    reads the mirror first (no wait: every value is a lower bound of the device's) and grows the
 *    buffers some chunk needed more than (denser data than the probe, e.g. a denser layer sharing
 *    the plan; no second probe). Nothing is lost however far the host runs ahead: the need stays
 *    in the record until a call sees it. With the plan's calls finished (event query) the old
 *    buffers are freed at once; with calls in flight they are retired behind an event recorded
 *    after them and freed by a later call once it has completed (one retirement at a time; until
 *    it completes, growth waits). A chunk that does not fit runs the exact row kernel
 * instead (device-side flag), so every call is correct whatever the capacities; results are bitwise
 * reproducible for a given workspace state (a fallback chunk and a tiled one differ at rounding
 * level).
 *  - calls on different streams are ordered through the event (cuStreamWaitEvent), because they
 *    share the workspace.
 *  - growing the rows capacity (a larger chunk) synchronises with the previous call first;
 *    an allocation failure keeps the old buffers (the fallback stays exact) and logs a warning. */
/*  - stats (device u64[2], or NULL): the tiled path's pre-pass also writes there the call's
 *    exact active values (Σ of every row-tile's count word; stats[1] = 0), in stream order, for
 *    the AUTO path's estimate; *counted (counted may be NULL) is 1 when it did, 0 when the call
 *    ran a simple kernel instead (the caller then counts itself).
 *  - every tiled kernel is launched with programmatic dependent launch where the device allows it
 *    (tw_cu_launch_cfg.pdl; twell_ctx_options.pdl turns it off): see ffn_fused.cu.lua's header.
 *  - capturing (stream is being captured into a CUDA graph): only kernels and memsets are
 *    enqueued. No probe, no growth, no flag copies, no event query, record or wait, no module
 *    resolution (an M bucket not resolved yet runs the default module), stats ignored. The
 *    workspace is used as it stands (twell_plan_reserve sizes it): chunks of at most its rows
 *    capacity; with none at all the exact row kernel runs (a warning is logged); data needing
 *    more pair slots or overflow room than it holds takes the device-side exact fallback, as in
 *    any call. Tensors not 16-byte aligned need the portable kernel loaded by an earlier eager
 *    call (else TWELL_ERR_UNSUPPORTED, nothing enqueued). From then on the workspace buffers are
 *    kept, not freed, when later eager calls grow them (the graph still uses them). */
twell_status tw_cuda_ffn_launch(twell_plan *plan, tw_ffn *f, size_t M, const void *x,
                                const uint32_t *packed, const void *wg, const void *wu,
                                const void *wd, void *y, twell_stream stream, int capturing,
                                uint64_t *stats, int *counted);

/* The event an eager tw_cuda_ffn_launch records on its stream after its last work: once it has
 * completed, that call (stats included) has finished. The dense path's count read-back uses it
 * instead of recording an event of its own at the same point (one record and one query fewer). */
tw_cuda_event tw_cuda_ffn_done_event(const tw_ffn *f);

/* Whether some chunk of this plan's tiled pipeline has had rows with overflowing row-tiles (the
 * host mirror of its needs, read without waiting; never reset). 0 for NULL. */
int tw_cuda_ffn_rows_overflowed(const tw_ffn *f);

/* twell_plan_reserve's part: resolves the tiled module of every M bucket up to max_M (as their
 * first calls would) and sizes the workspace for chunks of min(max_M, TW_FFN_CHUNK) rows with
 * nnz_per_row mean active values per row: pair slots for all of them plus the lists' padding,
 * overflowing row-tiles up to the most those values can fill (count > slots needs slots + 1
 * values), overflowing rows up to min(that, rows / 16 + 16). Buffers only grow. May wait for the
 * plan's earlier work (a buffer is replaced). Allocation failure: TWELL_ERR_NO_MEMORY (the old
 * buffers stay). Inside tw_cu_enter/leave. */
twell_status tw_cuda_ffn_reserve(twell_plan *plan, tw_ffn *f, size_t max_M, double nnz_per_row);

/* Rows per pipeline run: bounds the workspace and keeps every index inside the kernels' int. */
#define TW_FFN_CHUNK ((size_t)65536)

/* twell_plan_tune's fused-inference part: for a plan with the tiled kernels, unless flags has
 * TWELL_TUNE_STORED_ONLY, makes sure M's bucket has a stored winner (tw_tune_op_ensure;
 * TWELL_TUNE_RETUNE times again), then resolves the bucket afresh from the store, as its first
 * call would. TWELL_OK with nothing done for a plan on the portable row kernel. Errors: those of
 * tuning; the bucket then keeps what it had. */
twell_status tw_cuda_ffn_tune(twell_plan *plan, size_t M, unsigned flags);

/* Makes every tiled call on f (plan's state; NULL: TWELL_ERR_UNSUPPORTED, not a CUDA plan) run
 * tk (borrowed: it must outlive its use; its probed field is updated), whatever M's bucket; NULL
 * returns to the per-bucket choice. For the tuner, which times its candidates through the tiled
 * path's own state (tests reach it as TW_TC_FFN_FORCE). Synchronises the device. */
twell_status tw_cuda_ffn_force(twell_plan *plan, tw_ffn *f, tw_ffn_tk *tk);

/* Synchronises the device and copies the flag words of the last chunk the tiled pipeline ran on
 * f (plan's state): [0] fallback bits (0: tiled result; 1: overflow buffer too small; 2: pair
 * buffer too small), [1] pair slots needed, [2] overflowing row-tiles, [3] overflowing rows. All
 * 0 if none ran. For the tuner, which checks that a candidate's timed runs took the tiled path
 * (tests reach it as TW_TC_FFN_FLAGS). TWELL_ERR_UNSUPPORTED for f NULL (a plan not on CUDA). */
twell_status tw_cuda_ffn_flags(twell_plan *plan, tw_ffn *f, uint32_t out[4]);

#endif /* TWELL_CUDA_FFN_H */
