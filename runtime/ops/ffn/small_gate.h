/*
 * small_gate.h — which kernel of templates/gate_pack/gate_pack_small.cu.lua runs a small-path
 * gate-pack of M rows, and its launch geometry and shared memory. Pure (no CUDA):
 * tests/test_small_gate.c checks every M against the kernels' contracts on the CPU.
 */
#ifndef TWELL_SMALL_GATE_H
#define TWELL_SMALL_GATE_H

#include <stddef.h>
#include <stdint.h>

/* The kernels (twell_gate_pack_small_<name>):
 *   G2    rows of x from L1/L2, up to 16 rows a block, 4 k32 blocks of w in flight a warp, 3 blocks
 *         an SM
 *   G2U2  G2 with 2 in flight and 4 blocks an SM (session 4, H100, M = 1: 19.1 us against G2's
 *         21.5: to be measured again against it)
 *   G8    rows of x from L1/L2, up to 64 rows a block
 *   X8, X16, X32  x staged in shared memory (cp.async, two stages over K), up to 64, 128, 256 rows
 *         a block; dynamic shared memory tw_sgate_smem */
typedef enum tw_sgate_kernel {
    TW_SGK_G2 = 0,
    TW_SGK_G2U2,
    TW_SGK_G8,
    TW_SGK_X8,
    TW_SGK_X16,
    TW_SGK_X32,
    TW_SGK_COUNT
} tw_sgate_kernel;

/* What the caller asks for (test control TW_TC_SMALL_SET_GATE, `twell bench --small-gate`):
 * AUTO picks by M (tw_sgate_geom_of); X picks the x-staged kernel by M; the others name one
 * kernel (its rows a block capped, more token blocks for more rows). */
typedef enum tw_sgate_choice {
    TW_SGC_AUTO = 0,
    TW_SGC_G2,
    TW_SGC_G2U2,
    TW_SGC_G8,
    TW_SGC_X,
    TW_SGC_X8,
    TW_SGC_X16,
    TW_SGC_X32
} tw_sgate_choice;

/* "auto", "g2", "g2u2", "g8", "x", "x8", "x16", "x32" → *out; -1 (out untouched) otherwise. */
int tw_sgate_choice_parse(const char *name, tw_sgate_choice *out);

/* A choice with an optional forced WN: "<choice>" (*wn = 0: the rule's) or "<choice>:<wn>" with
 * wn 1, 2, 4 or 8. 0, or -1 with the outputs untouched. */
int tw_sgate_spec_parse(const char *spec, tw_sgate_choice *choice, int *wn);

/* "g2", "g2u2", "g8", "x8", "x16", "x32"; NULL for another value. The kernel's symbol is
 * "twell_gate_pack_small_" followed by it. */
const char *tw_sgate_kernel_name(tw_sgate_kernel k);

/* Most rows a block of kernel k holds (8·NG of the template). */
int tw_sgate_max_rows(tw_sgate_kernel k);

/* Dynamic shared memory bytes kernel k launches with (the template's 5120·NG for the x kernels:
 * two stages of 8·NG rows × 20 16-byte pieces; 0 for the others), and the static shared memory
 * it declares beside it (an upper bound). */
unsigned tw_sgate_smem(tw_sgate_kernel k);
#define TW_SGATE_STATIC_SMEM_X 16u

/* A launch: kernel, token blocks TB of MT rows (MT a multiple of 8, 8 ≤ MT ≤ the kernel's rows,
 * TB·MT ≥ M and no token block empty), WN neuron groups of 16 a block (16·WN divides T; the
 * x kernels take WN 2 or 4), dynamic shared memory. Grid = (N / (16·WN))·TB blocks of 256. */
typedef struct tw_sgate_geom {
    tw_sgate_kernel kernel;
    int TB, MT, WN;
    unsigned smem;
} tw_sgate_geom;

/* The launch for M ≥ 1 rows at tile width T (64, 128 or 256) on a device allowing smem_optin bytes
 * of shared memory a block; wn > 0 replaces the rule's WN where the kernel takes it (x kernels 2
 * or 4, the others 1 to 8; 16·wn dividing T), else the rule's stays. AUTO: G2 up to 16 rows (WN 1
 * up to 8 rows, else 2), G8 up to 32, the x kernel of the fewest rows that holds M up to 256 (X8 to
 * 64, X16 to 128, X32 above; WN 2 up to 64 rows, else 4), G8 above 256. An x kernel that needs more
 * shared memory than the device allows is replaced by the next smaller one with more token blocks
 * (X8 by G8). Pure; never fails. */
tw_sgate_geom tw_sgate_geom_of(uint32_t T, size_t M, tw_sgate_choice choice, int wn,
                               int smem_optin);

#endif /* TWELL_SMALL_GATE_H */
