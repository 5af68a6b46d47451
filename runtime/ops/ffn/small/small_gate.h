/*
 * small_gate.h — the launch geometry of the small path's gate-pack kernel
 * (templates/gate_pack/gate_pack_small.cu.lua, twell_gate_pack_small_g2u2) for M rows. Pure (no
 * CUDA): tests/test_small_gate.c checks every M against the kernel's contract on the CPU.
 */
#ifndef TWELL_SMALL_GATE_H
#define TWELL_SMALL_GATE_H

#include <stddef.h>
#include <stdint.h>

/* The kernel's name (its symbol is "twell_gate_pack_small_" followed by it) and the most rows a
 * block holds (2 token groups of 8); more rows run more token blocks. */
#define TW_SGATE_KERNEL "g2u2"
#define TW_SGATE_MAX_ROWS 16

/* What the caller asks for (test control TW_TC_SMALL_SET_GATE, `twell bench --small-gate`):
 * "auto" or "g2u2" (the same kernel and rule), optionally ":<wn>" with wn 1, 2, 4 or 8 forcing the
 * neuron groups a block. Sets *wn (0: the rule's) and returns 0, or -1 with *wn untouched. */
int tw_sgate_spec_parse(const char *spec, int *wn);

/* A launch: token blocks TB of MT rows (MT a multiple of 8, 8 ≤ MT ≤ TW_SGATE_MAX_ROWS,
 * TB·MT ≥ M and no token block empty), WN neuron groups of 16 a block (16·WN divides T).
 * Grid = (N / (16·WN))·TB blocks of 256, no dynamic shared memory. */
typedef struct tw_sgate_geom {
    int TB, MT, WN;
} tw_sgate_geom;

/* The launch for M ≥ 1 rows (0 is taken as 1) at tile width T (64, 128 or 256): the fewest token
 * blocks, rows spread evenly over them; WN 1 for blocks of up to 8 rows, else 2 (more rows: more
 * neurons a block, so its rows of x serve more of them), halved while 16·WN exceeds T; wn 1, 2, 4
 * or 8 with 16·wn dividing T replaces it. Pure; never fails. */
tw_sgate_geom tw_sgate_geom_of(uint32_t T, size_t M, int wn);

#endif /* TWELL_SMALL_GATE_H */
