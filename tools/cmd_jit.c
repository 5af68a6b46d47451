/* cmd_jit.c — placeholder for the JIT subcommands until the generator issue lands. */
#include "cli.h"

#include <stdio.h>

static int tw_not_yet(const char *name) {
    fprintf(stderr, "twell %s: not implemented in this build\n", name);
    return 2;
}
int twell_cmd_render(int argc, char **argv) { (void)argc; (void)argv; return tw_not_yet("render"); }
int twell_cmd_compile(int argc, char **argv) { (void)argc; (void)argv; return tw_not_yet("compile"); }
int twell_cmd_info(int argc, char **argv) { (void)argc; (void)argv; return tw_not_yet("info"); }
