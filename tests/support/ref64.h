/* ref64.h — naive dense fp64 implementations of the ops for the tests (no blocking, no sparsity,
 * no shared code with the library's reference), plus small test utilities. */
#ifndef TWELL_TEST_REF64_H
#define TWELL_TEST_REF64_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* The fp64 value of a 16-bit pattern of dtype dt (exact). */
double ref64_half(twell_dtype dt, uint16_t h);

/* out[m*N + n] = Σ_k x[m,k]·w[n,k] in fp64; absout (may be NULL) = Σ_k |x[m,k]·w[n,k]|, the scale
 * that bounds the rounding error of a shorter-precision dot product. */
void ref64_linear(twell_dtype dt, size_t M, size_t K, size_t N, const uint16_t *x,
                  const uint16_t *w, double *out, double *absout);

/* y[m*K + k] of the dense FFN in fp64 for shape s (gated: (relu(x·Wgᵀ) ⊙ x·Wuᵀ)·Wd, non-gated:
 * relu(x·Wuᵀ)·Wd). round_act non-zero rounds each relu output to s->dtype first, as the packed
 * format stores it (so the remaining differences are accumulation and output rounding). */
void ref64_ffn(const twell_shape *s, size_t M, const uint16_t *x, const uint16_t *wg,
               const uint16_t *wu, const uint16_t *wd, int round_act, double *y);

/* Deterministic test random numbers (xorshift64*); *state must be non-zero. */
uint64_t ref64_rand(uint64_t *state);

#endif /* TWELL_TEST_REF64_H */
