/*
 * twellrt_internal.h — the one internal header of the project's own programs (tools/, bench/ and
 * the tests): everything they use beyond twellrt.h. Not installed; nothing declared here is
 * exported from libtwellrt.so (-fvisibility=hidden; the programs link the static test library
 * twellrt_probe, the shipped code plus the test probes: runtime/core/probe.h).
 *
 * Two parts:
 *  1. tw_test_control: one entry point for every knob and probe inside a plan, a training state
 *     or the CUDA layer (SQLite's sqlite3_test_control is the model). The operations and their
 *     arguments are listed in runtime/core/test_control.h, included below.
 *  2. The library services the programs build on: the module headers below, each with what the
 *     programs use it for.
 * The op folders (runtime/ops/<op>/) are not reachable from here: the programs steer and inspect
 * them through test control only, so an op's internals can change without touching tools/ or
 * bench/. scripts/check_includes.py holds tools/ and bench/ to twellrt.h, this header, their own
 * headers and tests/verify.
 */
#ifndef TWELLRT_INTERNAL_H
#define TWELLRT_INTERNAL_H

#include "test_control.h" /* the TW_TC_* operations, tw_cuda_train_host */
#include "twellrt.h"

/* Runs the test-control operation op with the arguments test_control.h lists for it (types
 * exactly as listed: varargs). Returns the operation's status, TWELL_ERR_INVALID_ARG for an
 * unknown op or a NULL plan or state. The object's threading rules apply (a plan or state: one
 * thread at a time); the process-wide TW_TC_CUDA_* operations are thread-safe. Linked with the
 * shipped libtwellrt (no probes), every operation returns TWELL_ERR_UNSUPPORTED. */
twell_status tw_test_control(int op, ...);

/* ---- the services ----
 * cache.h        the disk cache: `twell cache`, compile and tune statistics
 * cpu_ref.h      the exact CPU reference of gate-pack and inference (result checks)
 * cpu_train.h    the CPU training state's layout (the bench compares saved states)
 * cuda_driver.h  device memory, copies, streams, events, modules and launches: the library loads
 *                the driver at run time, so the programs use it through these wrappers too
 * tune_registry.h  the autotuner by op name on a CUDA context (gpu_tune.h, tuner.h,
 *                candidates.h): `twell tune`
 * half.h         bf16 / fp16 conversions
 * internal.h     the handles' fields the programs read: ctx->pool (CPU worker threads for the
 *                references and synthetic data), ctx->cuda (device facts: arch, SMs, L2);
 *                tw_error, tw_log
 * jit.h          render → compile → cubin: `twell render|compile`, the bench's baseline kernels
 * json.h         the JSON reader and a model's config.json: `twell tune --model`
 * nvrtc.h        NVRTC's version, path and targets: `twell info`
 * cuda_blaslt.h  where cuBLASLt (the dense routes) loads from, or why not: `twell info`
 * pack_check.h   packed gate bytes against the reference, summation-order aware
 * synth.h        synthetic sparse data (bench, demo, tests) */
#include "cache.h"
#include "cpu_ref.h"
#include "cpu_train.h"
#include "cuda_blaslt.h"
#include "cuda_driver.h"
#include "half.h"
#include "internal.h"
#include "jit.h"
#include "json.h"
#include "nvrtc.h"
#include "pack_check.h"
#include "synth.h"
#include "tune_registry.h"

#endif /* TWELLRT_INTERNAL_H */
