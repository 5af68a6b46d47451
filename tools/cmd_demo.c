/* cmd_demo.c — placeholder for `twell demo` until its issue lands. */
#include "cli.h"

#include <stdio.h>

int twell_cmd_demo(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "twell demo: not implemented in this build\n");
    return 2;
}
