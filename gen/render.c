/*
 * render.c — finds the template directory and renders a template into CUDA C, reporting
 * failures through the context (the Lua work itself is in lua_engine.c).
 */
#include "render.h"

#include "lua_text.h"

#include "env.h"
#include "internal.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef TWELL_SOURCE_TEMPLATE_DIR
#define TWELL_SOURCE_TEMPLATE_DIR ""
#endif
#ifndef TWELL_INSTALL_TEMPLATE_DIR
#define TWELL_INSTALL_TEMPLATE_DIR "/usr/local/share/twellrt/templates"
#endif

static pthread_once_t tw_dir_once = PTHREAD_ONCE_INIT;
static char tw_dir_found[PATH_MAX];

static int tw_is_dir(const char *p) {
    struct stat st;
    return p[0] && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Where this code was loaded from decides the install layout: <libdir>/../share/twellrt/templates
 * (also one level further up, for multiarch libdirs such as lib/x86_64-linux-gnu). When linked
 * statically, the executable plays the library's part. */
static void tw_dir_resolve(void) {
    static const char anchor = 0;
    Dl_info info;
    char real[PATH_MAX];
    if (dladdr(&anchor, &info) && info.dli_fname && realpath(info.dli_fname, real)) {
        char *slash = strrchr(real, '/');
        if (slash) {
            *slash = '\0';
            static const char *const rel[] = {"/../share/twellrt/templates",
                                              "/../../share/twellrt/templates"};
            for (size_t i = 0; i < 2; i++) {
                char cand[PATH_MAX + 64];
                snprintf(cand, sizeof cand, "%s%s", real, rel[i]);
                if (tw_is_dir(cand) && realpath(cand, tw_dir_found))
                    return;
            }
        }
    }
    snprintf(tw_dir_found, sizeof tw_dir_found, "%s",
             tw_is_dir(TWELL_SOURCE_TEMPLATE_DIR) ? TWELL_SOURCE_TEMPLATE_DIR
                                                  : TWELL_INSTALL_TEMPLATE_DIR);
}

const char *tw_template_dir(const twell_ctx *ctx) {
    if (ctx && ctx->template_dir)
        return ctx->template_dir;
    /* A context resolved the environment when it was created; without one, read it now. */
    const char *env = ctx ? NULL : tw_env_template_dir();
    if (env)
        return env;
    pthread_once(&tw_dir_once, tw_dir_resolve);
    return tw_dir_found;
}

int tw_template_exists(const twell_ctx *ctx, const char *name) {
    char path[4096], display[160];
    return tw_template_locate(tw_template_dir(ctx), name, ".cu.lua", path, sizeof path, display,
                              sizeof display) == 1;
}

static int tw_name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static size_t tw_names_in(const char *dir, char **names, size_t cap, size_t n) {
    DIR *d = opendir(dir);
    if (!d)
        return n;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len <= 7 || strcmp(de->d_name + len - 7, ".cu.lua") != 0)
            continue;
        if (n < cap) {
            names[n] = malloc(len - 6);
            if (!names[n])
                continue; /* out of memory: the list is shorter, never wrong */
            memcpy(names[n], de->d_name, len - 7);
            names[n][len - 7] = '\0';
        }
        n++;
    }
    closedir(d);
    return n;
}

size_t tw_template_names(const char *dir, char **names, size_t cap) {
    size_t n = tw_names_in(dir, names, cap, 0);
    for (int g = 0; tw_template_groups[g]; g++) {
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, tw_template_groups[g]);
        n = tw_names_in(sub, names, cap, n);
    }
    qsort(names, n < cap ? n : cap, sizeof names[0], tw_name_cmp);
    return n;
}

static int tw_ident(const char *s) {
    if (!s || !s[0] || strlen(s) > 64 || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return 0;
    return 1;
}

twell_status tw_render_limited(twell_ctx *ctx, const char *name, const tw_param *params,
                               size_t nparams, const tw_lua_limits *limits, char **src,
                               size_t *len) {
    if (src)
        *src = NULL;
    if (len)
        *len = 0;
    if (!src || !len)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "tw_render: src or len is NULL");
    if (!name || !tw_ident(name))
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "tw_render: template name '%s' is not letters, digits and _",
                        name ? name : "(null)");
    if (nparams && !params)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "tw_render: params is NULL");
    for (size_t i = 0; i < nparams; i++) {
        if (!tw_ident(params[i].key))
            return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                            "tw_render: parameter #%zu has a bad key '%s'", i,
                            params[i].key ? params[i].key : "(null)");
        for (size_t j = 0; j < i; j++)
            if (strcmp(params[i].key, params[j].key) == 0)
                return tw_error(ctx, TWELL_ERR_INVALID_ARG, "tw_render: parameter '%s' given twice",
                                params[i].key);
    }
    tw_lua_limits def = {TW_LUA_DEFAULT_MEM_BYTES, TW_LUA_DEFAULT_OUT_BYTES,
                         TW_LUA_DEFAULT_INSTRUCTIONS, TW_LUA_DEFAULT_SECONDS};
    char *err = NULL;
    twell_status st = tw_lua_render(tw_template_dir(ctx), name, params, nparams,
                                    limits ? limits : &def, src, len, &err);
    if (st != TWELL_OK) {
        tw_error(ctx, st, "template %s: %s", name,
                 err ? err : "failed (no memory for the message)");
        free(err);
        return st;
    }
    tw_clear_error(ctx);
    return TWELL_OK;
}

twell_status tw_render(twell_ctx *ctx, const char *name, const tw_param *params, size_t nparams,
                       char **src, size_t *len) {
    return tw_render_limited(ctx, name, params, nparams, NULL, src, len);
}
