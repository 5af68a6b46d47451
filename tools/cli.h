/* cli.h — subcommands of the `twell` tool; each lives in its own file and returns an exit code. */
#ifndef TWELL_CLI_H
#define TWELL_CLI_H

int twell_cmd_demo(int argc, char **argv);    /* tools/cmd_demo.c */
int twell_cmd_render(int argc, char **argv);  /* tools/cmd_jit.c */
int twell_cmd_compile(int argc, char **argv); /* tools/cmd_jit.c */
int twell_cmd_cache(int argc, char **argv);   /* tools/cmd_cache.c */
int twell_cmd_info(int argc, char **argv);    /* tools/cmd_jit.c */
int twell_cmd_bench(int argc, char **argv);   /* bench/bench.c */
int twell_cmd_tune(int argc, char **argv);    /* tools/cmd_tune.c */

#endif
