/*
 * fuzz_render.c — the render target (tw_fuzz.h): a template's text rendered by the sandboxed Lua
 * engine under tight limits, seeded with the real templates, modules and test fixtures.
 */
#include "tw_fuzz_int.h"

#include "lua_engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TWELL_TEST_SOURCE_DIR
#error "TWELL_TEST_SOURCE_DIR must name the source tree (the seeds are read from it)"
#endif

#define TW_FZ_MAX_FILES 128
static char tw_fz_rdir[512];
static char *tw_fz_tpl[TW_FZ_MAX_FILES]; /* real templates and fixtures: the seeds */
static size_t tw_fz_ntpl;
static const char *const tw_fz_groups[] = {"common", "gate_pack", "ffn", "train", "gemm", NULL};

/* Generous for any input that is not trying to exhaust them, small enough to be quick. */
static const tw_lua_limits tw_fz_limits = {(size_t)16 << 20, (size_t)2 << 20, 5000000ull, 0.1};
#define TW_FZ_SLACK_S 3.0 /* on top of the wall-clock limit: loaded machines, sanitizers */

static int tw_fz_render_init(void) {
    if (tw_fz_tmpdir("render", tw_fz_rdir, sizeof tw_fz_rdir) != 0)
        return -1;
    /* the real modules, flat (the engine also searches a flat directory), so seeds import them */
    char *mods[TW_FZ_MAX_FILES];
    size_t nmods = 0;
    char dir[600];
    for (int g = 0; tw_fz_groups[g]; g++) {
        snprintf(dir, sizeof dir, "%s/templates/%s", TWELL_TEST_SOURCE_DIR, tw_fz_groups[g]);
        tw_fz_list(dir, ".lua", ".cu.lua", mods, &nmods, TW_FZ_MAX_FILES);
        tw_fz_list(dir, ".cu.lua", NULL, tw_fz_tpl, &tw_fz_ntpl, TW_FZ_MAX_FILES);
    }
    snprintf(dir, sizeof dir, "%s/tests/templates", TWELL_TEST_SOURCE_DIR);
    tw_fz_list(dir, "_mod.lua", NULL, mods, &nmods, TW_FZ_MAX_FILES);
    tw_fz_list(dir, ".cu.lua", NULL, tw_fz_tpl, &tw_fz_ntpl, TW_FZ_MAX_FILES);
    tw_fuzz_buf b = {0};
    int rc = 0;
    for (size_t i = 0; i < nmods; i++) {
        const char *base = strrchr(mods[i], '/') + 1;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", tw_fz_rdir, base);
        if (tw_fz_read(mods[i], &b) != 0 || tw_fz_write(path, b.p, b.n) != 0)
            rc = -1;
        free(mods[i]);
    }
    tw_fuzz_buf_free(&b);
    return tw_fz_ntpl > 0 ? rc : -1;
}

/* Inputs that once hung, exhausted memory or escaped the sandbox (issue 26), and their kin. */
static const char *const tw_fz_lua_snippets[] = {
    "while true do end",
    "setmetatable({}, {__gc = function() while true do end end}) emit(\"x\")",
    "emit(tostring(string.find(string.rep(\"a\", 3000), string.rep(\".-\", 12) .. \"b\")))",
    "for w in string.gmatch(string.rep(\"a\", 1e5), \"a*a*a*b\") do end",
    "local s = \"x\" for i = 1, 40 do s = s .. s end emit(s)",
    "emit(string.rep(\"x\", 1 << 30))",
    "local t = {} for i = 1, 1e9 do t[i] = i end",
    "local function f() return f() end f()",
    "local function f() return 1 + f() end f()",
    "emit(\"a\\0b\")",
    "local m = import \"twell_common\" local S = m.shape() emit(S.W)",
    "import \"import_cycle_mod\"",
    "import \"../../etc/passwd\"",
    "cuda [==[ ${P.K} ${undefined_global} ]==]",
    "error(setmetatable({}, {__tostring = function() while true do end end}))",
    "emit(string.format(\"%99999999d\", 1))",
    "local a = {} a[1] = a emit(a)",
    "emit(num(0/0)) emit(flt(1/0)) emitf(\"%s\", nil)",
    "table.sort({3, 2, 1, 5, 4}, function(a, b) return true end)",
    "emit(utf8.char(0x7FFFFFFF))",
    "emit(string.rep(\"x\", 1e6, string.rep(\"y\", 1e6)))",
    "local t = {} for i = 1, 1e6 do table.insert(t, 1, i) end",
    "emit(table.concat(setmetatable({}, {__index = function() return \"x\" end}), \"\", 1, 1e8))",
    "emit(param(\"K\", nil) + P.nonexistent)",
    "unsupported(\"because %s\", string.rep(\"z\", 1e7))",
    "check(false, \"%d\", \"not a number\")",
    "load(\"return 1\")() os.exit(1) io.open(\"/etc/passwd\")",
    "string.dump(function() end)",
    "getmetatable(\"\").__index.rep = nil emit((\"x\"):rep(3))",
    "coroutine.wrap(function() while true do end end)()",
    "local t = setmetatable({}, {__index = function(t, k) return t[k + 1] end}) emit(t[1])",
    "emit(select(\"#\", table.unpack({}, 1, 1e7)))",
};

static int tw_fz_render_seed(size_t i, tw_fuzz_buf *out) {
    out->n = 0;
    if (i < tw_fz_ntpl)
        return tw_fz_read(tw_fz_tpl[i], out) == 0;
    i -= tw_fz_ntpl;
    if (i >= sizeof tw_fz_lua_snippets / sizeof tw_fz_lua_snippets[0])
        return 0;
    tw_fz_str(out, tw_fz_lua_snippets[i]);
    return 1;
}

static int tw_fz_render_run(const uint8_t *data, size_t size) {
    char path[600];
    snprintf(path, sizeof path, "%s/fz.cu.lua", tw_fz_rdir);
    if (tw_fz_write(path, data, size) != 0)
        tw_fuzz_fail("cannot write %s: %s", path, strerror(errno));
    const tw_param params[] = {{"K", NULL, 512},
                               {"N", NULL, 1024},
                               {"T", NULL, 128},
                               {"C", NULL, 4},
                               {"dtype", "bf16", 0}};
    char *src = NULL, *err = NULL;
    size_t len = 0;
    double t0 = tw_fz_now();
    twell_status st = tw_lua_render(tw_fz_rdir, "fz", params, sizeof params / sizeof params[0],
                                    &tw_fz_limits, &src, &len, &err);
    double dt = tw_fz_now() - t0;
    if (dt > tw_fz_limits.seconds + TW_FZ_SLACK_S)
        tw_fuzz_fail("render took %.2f s (limit %.2f s + %.1f s slack): %s", dt,
                     tw_fz_limits.seconds, TW_FZ_SLACK_S, err ? err : "(no message)");
    switch (st) {
    case TWELL_OK:
        if (!src || err)
            tw_fuzz_fail("OK without a source or with a message (%s)", err ? err : "");
        if (strlen(src) != len)
            tw_fuzz_fail("OK with a NUL byte inside the source (length %zu, strlen %zu)", len,
                         strlen(src));
        if (len > tw_fz_limits.out_bytes)
            tw_fuzz_fail("OK with %zu bytes of output (limit %zu)", len, tw_fz_limits.out_bytes);
        break;
    case TWELL_ERR_TEMPLATE:
    case TWELL_ERR_UNSUPPORTED:
    case TWELL_ERR_IO:
        if (src)
            tw_fuzz_fail("%s with a source", twell_status_name(st));
        if (!err || !err[0])
            tw_fuzz_fail("%s without a message", twell_status_name(st));
        if (strncmp(err, "templates/", 10) != 0 && st == TWELL_ERR_TEMPLATE)
            tw_fuzz_fail("template error that names no template file: %s", err);
        break;
    case TWELL_ERR_NO_MEMORY:
        if (src)
            tw_fuzz_fail("NO_MEMORY with a source");
        break;
    default:
        tw_fuzz_fail("unexpected status %s (%s)", twell_status_name(st), err ? err : "");
    }
    free(src);
    free(err);
    return 0;
}

static const char *const tw_fz_lua_dict[] = {"emit(",
                                             "cuda [==[",
                                             "]==]",
                                             "${",
                                             "}",
                                             "import \"twell_common\"",
                                             "local ",
                                             "function",
                                             " end ",
                                             "while true do ",
                                             "for i = 1, 1e9 do ",
                                             "string.rep(",
                                             "setmetatable(",
                                             "__gc",
                                             "__index",
                                             "P.K",
                                             "param(\"T\", 1)",
                                             "unsupported(",
                                             "check(",
                                             "num(",
                                             "flt(",
                                             "..",
                                             "\"",
                                             "'",
                                             "[[",
                                             "]]",
                                             "--",
                                             "\n",
                                             "#line 1 \"x\"\n",
                                             "(",
                                             ")",
                                             "{",
                                             "=",
                                             ",",
                                             "1e308",
                                             "0/0",
                                             "-1",
                                             "math.maxinteger",
                                             "#",
                                             "return ",
                                             "nil",
                                             NULL};

const tw_fuzz_target tw_fz_render = {.name = "render",
                                     .init = tw_fz_render_init,
                                     .run = tw_fz_render_run,
                                     .seed = tw_fz_render_seed,
                                     .dict = tw_fz_lua_dict,
                                     .max_len = (size_t)256 << 10};
