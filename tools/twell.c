/* twell.c — the `twell` command-line tool: dispatches to one subcommand per file. */
#include "cli.h"
#include "twellrt.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} tw_cmd;

static const tw_cmd tw_cmds[] = {
    {"demo", twell_cmd_demo, "synthetic sparse FFN: gate-pack + fused inference, with a report"},
    {"render", twell_cmd_render, "print the CUDA source a template renders for a shape"},
    {"compile", twell_cmd_compile, "compile a template into the cache; prints key, hit/miss"},
    {"cache", twell_cmd_cache, "ls | verify | clear the kernel cache"},
    {"info", twell_cmd_info, "library, NVRTC, driver, devices and cache"},
    {"bench", twell_cmd_bench, "benchmark against dense cuBLAS (GPU)"},
    {"tune", twell_cmd_tune, "autotune and prewarm shapes or a model's config.json (GPU)"},
};

static void tw_usage(FILE *f) {
    fprintf(f,
            "twell %s — sparse TwELL feed-forward kernels\n\nusage: twell <command> [options]\n\n",
            twell_version());
    for (size_t i = 0; i < sizeof tw_cmds / sizeof tw_cmds[0]; i++)
        fprintf(f, "  %-8s %s\n", tw_cmds[i].name, tw_cmds[i].help);
    fprintf(f, "\n`twell <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        tw_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        tw_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("twell %s\n", twell_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof tw_cmds / sizeof tw_cmds[0]; i++)
        if (!strcmp(argv[1], tw_cmds[i].name))
            return tw_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "twell: unknown command '%s'\n\n", argv[1]);
    tw_usage(stderr);
    return 2;
}
