/* bench.c — placeholder for `twell bench` until its issue lands. */
#include "cli.h"

#include <stdio.h>

int twell_cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "twell bench: not implemented in this build\n");
    return 2;
}
