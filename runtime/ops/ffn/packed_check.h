/*
 * packed_check.h — packed input validation on CUDA (options.validate_packed): the check kernel of
 * templates/ffn/packed_check.cu.lua finds the first bad word, the host names it with the rule of
 * runtime/cpu/twell_format.h.
 */
#ifndef TWELL_PACKED_CHECK_H
#define TWELL_PACKED_CHECK_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

/* Per-plan state: the loaded check module. Created by the first validated call. */
typedef struct tw_packed_check tw_packed_check;

/* Checks the M rows of packed (device memory) against the TwELL layout before twell_ffn_infer
 * enqueues anything: TWELL_OK when every word is well formed, else TWELL_ERR_INVALID_ARG with a
 * message naming the first bad word (tw_packed_fault_describe). Enqueues a 2-word memset, the
 * check kernel and an 8-byte copy on stream and synchronises the stream (the host needs the
 * answer before the op can proceed). The first call loads the module (render, cache or NVRTC,
 * load) into *pc; its errors are returned and the call fails (validation asked for cannot be
 * skipped silently). A stream being captured into a CUDA graph cannot be synchronised: the check
 * is skipped (TWELL_OK) and one warning per plan is logged. Context current. */
twell_status tw_packed_check_run(twell_plan *plan, tw_packed_check **pc, size_t M,
                                 const uint32_t *packed, twell_stream stream);

/* Unloads and frees pc; NULL is a no-op. Context current. */
void tw_packed_check_release(tw_packed_check *pc);

#endif /* TWELL_PACKED_CHECK_H */
