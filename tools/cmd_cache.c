/* cmd_cache.c — placeholder for `twell cache` until the disk cache lands. */
#include "cli.h"

#include <stdio.h>

int twell_cmd_cache(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "twell cache: not implemented in this build\n");
    return 2;
}
