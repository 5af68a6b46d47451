/*
 * nvrtc.h — NVRTC (the CUDA run-time compiler) loaded with dlopen: source → cubin for one exact
 * architecture. The only gateway to NVRTC; the build needs no CUDA headers or libraries.
 */
#ifndef TWELL_NVRTC_H
#define TWELL_NVRTC_H

#include "twellrt.h"

#include <stddef.h>

/* Loads NVRTC once per process (thread-safe). Tries ctx's NVRTC library alone when it names one
 * (options.nvrtc_library, else $TWELL_NVRTC_LIBRARY as read at context creation; ctx NULL: the
 * environment now); else libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so from the loader's path,
 * then from $CUDA_HOME/lib64 and /usr/local/cuda/lib64. Once loaded it stays: a context naming
 * another library gets the loaded one and one warning in its log. A failed load is tried again
 * only for another request. Errors: TWELL_ERR_NOT_FOUND with a message listing every place tried
 * (ctx may be NULL: no message). */
twell_status tw_nvrtc_load(twell_ctx *ctx);

/* NVRTC's own version (nvrtcVersion). Errors: those of tw_nvrtc_load. */
twell_status tw_nvrtc_version(twell_ctx *ctx, int *major, int *minor);

/* The path NVRTC was loaded from ("" before a successful load), or the reason it could not be
 * loaded (why_missing first tries tw_nvrtc_load(NULL)). Borrowed, static; the reason may change
 * when a later load is asked for another library. */
const char *tw_nvrtc_path(void);
const char *tw_nvrtc_why_missing(void);

/* Writes the real architectures ("sm_75 sm_80 ...") this NVRTC can target into buf, space
 * separated. Errors: those of tw_nvrtc_load; TWELL_ERR_NVRTC. */
twell_status tw_nvrtc_supported_archs(twell_ctx *ctx, char *buf, size_t cap);

/* The architecture string to compile for a device of compute capability major.minor: "sm_90a"
 * for 9.0 (the `a` unlocks wgmma and setmaxnreg), "sm_XY" otherwise. buf holds ≥ 16 bytes. */
void tw_nvrtc_arch_for(int major, int minor, char *buf, size_t cap);

/* Compiles src (program name prog_name, used for lines before any #line) with the nopts options
 * to a cubin. On success *cubin is a malloc'd image the caller frees and *size its length. On a
 * compilation failure returns TWELL_ERR_NVRTC and sets ctx's message to
 * "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION (6) at <file>:<line>: <first error>" followed by
 * NVRTC's full log; *log (when log is not NULL) receives a malloc'd copy of the full log, or NULL.
 * Thread-safe across different contexts. Errors: those of tw_nvrtc_load, TWELL_ERR_NVRTC,
 * TWELL_ERR_NO_MEMORY; outputs NULL/0 on failure. */
twell_status tw_nvrtc_compile(twell_ctx *ctx, const char *src, const char *prog_name,
                              const char *const *opts, int nopts, void **cubin, size_t *size,
                              char **log);

#endif /* TWELL_NVRTC_H */
