/* test_control.c — tw_test_control (twellrt_internal.h). In the test library (TWELL_PROBES,
 * runtime/core/probe.h) it hands an operation to the path that owns its range of codes
 * (test_control.h; the handlers are the *_probe.c files); in the shipped library no probe exists
 * and every operation answers TWELL_ERR_UNSUPPORTED. */
#include "twellrt_internal.h"

#ifdef TWELL_PROBES
#include "cuda_dense_probe.h"
#include "cuda_ffn_probe.h"
#include "cuda_gate_pack_probe.h"
#include "cuda_memory_probe.h"
#include "cuda_small_probe.h"
#include "cuda_train_dense_probe.h"
#include "cuda_train_probe.h"

#include <stdarg.h>

twell_status tw_test_control(int op, ...) {
    va_list ap;
    va_start(ap, op);
    twell_status st = TWELL_ERR_INVALID_ARG;
    if (op >= TW_TC_CUDA_FIRST && op < TW_TC_CUDA_LAST)
        st = tw_cuda_test_control(op, ap);
    else if (op >= TW_TC_GP_FIRST && op < TW_TC_GP_LAST)
        st = tw_gate_pack_test_control(op, ap);
    else if (op >= TW_TC_FFN_FIRST && op < TW_TC_FFN_LAST)
        st = tw_ffn_test_control(op, ap);
    else if (op >= TW_TC_DENSE_FIRST && op < TW_TC_DENSE_LAST)
        st = tw_dense_test_control(op, ap);
    else if (op >= TW_TC_SMALL_FIRST && op < TW_TC_SMALL_LAST)
        st = tw_small_test_control(op, ap);
    else if (op >= TW_TC_TRAIN_FIRST && op < TW_TC_TRAIN_LAST)
        st = tw_train_test_control(op, ap);
    else if (op >= TW_TC_TD_FIRST && op < TW_TC_TD_LAST)
        st = tw_td_test_control(op, ap);
    va_end(ap);
    return st;
}
#else
twell_status tw_test_control(int op, ...) {
    (void)op;
    return TWELL_ERR_UNSUPPORTED;
}
#endif
