/* tw_packed_cases.h — malformed packed buffers for the packed-input validation tests (CPU and
 * CUDA): each case breaks one promise of the TwELL layout in a valid buffer and says which word
 * the validation must name. */
#ifndef TWELL_TW_PACKED_CASES_H
#define TWELL_TW_PACKED_CASES_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tw_pk_case {
    const char *name;   /* what the case breaks, for failure messages */
    const char *expect; /* text the error message must contain besides the word's position */
    int structural;     /* 1: a fault the CPU backend rejects even with validation off */
} tw_pk_case;

/* The number of cases. */
size_t tw_pk_case_count(void);

/* Breaks packed (a valid buffer of M rows of shape s, e.g. from twell_gate_pack) as case i
 * prescribes, in the first row-tile at or after row `from` that holds at least 2 entries and has
 * a free slot (case "two faults" also breaks a later row-tile). Returns 0 with *c the case, *word
 * the index of the first bad word and where[0..n) its position as the library's message spells it
 * ("packed word 1234 (row 3, row-tile 2, slot 5)"); -1 when no row-tile qualifies (packed is then
 * unchanged). */
int tw_pk_case_apply(size_t i, const twell_shape *s, size_t M, size_t from, uint32_t *packed,
                     tw_pk_case *c, size_t *word, char *where, size_t n);

/* splitmix64: the next value of the stream whose state is *state (any seed). */
uint64_t tw_pk_rand(uint64_t *state);

/* Breaks up to `edits` (≥ 1) random words of packed (M rows of shape s) the ways real corruption
 * and misuse do: random bits, a count off by one or past T, a value replaced by +0, -0, a
 * negative, NaN or ±Inf, a column moved inside, outside or past N, two slots swapped, a slot
 * cleared. The buffer may end up valid (a mutation can undo another). Deterministic in *rng. */
void tw_pk_mutate(uint64_t *rng, const twell_shape *s, size_t M, uint32_t *packed, unsigned edits);

#endif
