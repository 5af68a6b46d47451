/*
 * env.h — the environment variables the library reads, each read here and nowhere else, so
 * README's "Environment variables" table stays complete (`grep -rn getenv` finds this file).
 * Callers read them once (context creation, cache opening, NVRTC loading), never during an op.
 */
#ifndef TWELL_ENV_H
#define TWELL_ENV_H

/* Each returns the variable's value, or NULL when it is unset or empty. Borrowed from the
 * environment: valid until the process changes that variable. */
const char *tw_env_cache_dir(void);        /* TWELL_CACHE_DIR: twell_ctx_options.cache_dir */
const char *tw_env_xdg_cache_home(void);   /* XDG_CACHE_HOME: the cache directory's parent */
const char *tw_env_home(void);             /* HOME: ~/.cache/twellrt, the last resort */
const char *tw_env_template_dir(void);     /* TWELL_TEMPLATE_DIR: options.template_dir */
const char *tw_env_nvrtc_library(void);    /* TWELL_NVRTC_LIBRARY: options.nvrtc_library */
const char *tw_env_cublaslt_library(void); /* TWELL_CUBLASLT_LIBRARY: options.cublaslt_library */
const char *tw_env_cuda_home(void);        /* CUDA_HOME: where NVRTC is searched after the loader */

/* TWELL_TUNE: 1 when it is exactly "1" (options.tune_on_first_use ON), else 0. */
int tw_env_tune(void);
/* TWELL_PDL: 1 when it is exactly "0" (options.pdl OFF), else 0. */
int tw_env_pdl_off(void);
/* TWELL_POINTER_CACHE: 1 when it is exactly "0" (options.pointer_cache OFF), else 0. */
int tw_env_pointer_cache_off(void);
/* TWELL_VALIDATE_PACKED: 1 when it is exactly "1" (options.validate_packed ON), else 0. */
int tw_env_validate_packed(void);

#endif /* TWELL_ENV_H */
