/* env.c — every environment variable the library reads (env.h; README's table lists them). */
#include "env.h"

#include <stdlib.h>
#include <string.h>

static const char *tw_env(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

const char *tw_env_cache_dir(void) { return tw_env("TWELL_CACHE_DIR"); }
const char *tw_env_xdg_cache_home(void) { return tw_env("XDG_CACHE_HOME"); }
const char *tw_env_home(void) { return tw_env("HOME"); }
const char *tw_env_template_dir(void) { return tw_env("TWELL_TEMPLATE_DIR"); }
const char *tw_env_nvrtc_library(void) { return tw_env("TWELL_NVRTC_LIBRARY"); }
const char *tw_env_cublaslt_library(void) { return tw_env("TWELL_CUBLASLT_LIBRARY"); }
const char *tw_env_cuda_home(void) { return tw_env("CUDA_HOME"); }

int tw_env_tune(void) {
    const char *v = tw_env("TWELL_TUNE");
    return v && !strcmp(v, "1");
}

int tw_env_pdl_off(void) {
    const char *v = tw_env("TWELL_PDL");
    return v && !strcmp(v, "0");
}

int tw_env_pointer_cache_off(void) {
    const char *v = tw_env("TWELL_POINTER_CACHE");
    return v && !strcmp(v, "0");
}

int tw_env_validate_packed(void) {
    const char *v = tw_env("TWELL_VALIDATE_PACKED");
    return v && !strcmp(v, "1");
}
