/* status.c — version queries and the status name/message tables generated from one X-macro. */
#include "internal.h"

const char *twell_version(void) {
#define TW_STR2(x) #x
#define TW_STR(x) TW_STR2(x)
    return TW_STR(TWELL_VERSION_MAJOR) "." TW_STR(TWELL_VERSION_MINOR) "." TW_STR(
        TWELL_VERSION_PATCH);
#undef TW_STR
#undef TW_STR2
}

int twell_version_number(void) { return TWELL_VERSION_NUMBER; }

const char *twell_status_name(twell_status s) {
    switch (s) {
#define TW_NAME_CASE(name, code, msg)                                                              \
    case TWELL_##name:                                                                             \
        return "TWELL_" #name;
        TWELL_STATUS_MAP(TW_NAME_CASE)
#undef TW_NAME_CASE
    }
    return "TWELL_UNKNOWN_STATUS";
}

const char *twell_status_str(twell_status s) {
    switch (s) {
#define TW_MSG_CASE(name, code, msg)                                                               \
    case TWELL_##name:                                                                             \
        return msg;
        TWELL_STATUS_MAP(TW_MSG_CASE)
#undef TW_MSG_CASE
    }
    return "unknown status";
}

const char *twell_backend_name(twell_backend b) {
    switch (b) {
    case TWELL_BACKEND_AUTO:
        return "auto";
    case TWELL_BACKEND_CPU:
        return "cpu";
    case TWELL_BACKEND_CUDA:
        return "cuda";
    }
    return "unknown";
}

size_t twell_dtype_size(twell_dtype dtype) {
    return (dtype == TWELL_DTYPE_BF16 || dtype == TWELL_DTYPE_FP16) ? 2u : 0u;
}
