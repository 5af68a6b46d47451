/* tw_nonfinite.h — data with NaN and ±Inf planted in x or one weight row, and the dense fp64
 * reference of what each output element must be (finite, +Inf, -Inf or NaN) under the rule of
 * twellrt.h "Non-finite values": g = relu(pre) with a NaN pre-activation active, inactive neurons
 * contributing nothing. Shared by test_nonfinite (CPU) and test_gpu_nonfinite. */
#ifndef TWELL_TW_NONFINITE_H
#define TWELL_TW_NONFINITE_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

/* Where the non-finite values go. */
typedef enum tw_nf_where {
    TW_NF_X = 0,  /* x: row 1 a NaN (sign bit set), row 2 a +Inf, row 3 a -Inf (rows < M only) */
    TW_NF_WP = 1, /* the packing weight (Wg gated, Wu non-gated): row 5 holds a NaN */
    TW_NF_WU = 2, /* Wu of a gated plan: row 9 holds a NaN */
    TW_NF_WD = 3, /* Wd: row 12 holds a +Inf */
    TW_NF_COUNT = 4
} tw_nf_where;

/* Classes of a value. */
enum { TW_NF_FIN = 0, TW_NF_PINF = 1, TW_NF_NINF = 2, TW_NF_NAN = 3 };

typedef struct tw_nf_data {
    twell_shape s;
    size_t M;
    tw_nf_where where;
    uint16_t *x, *wg, *wu, *wd, *dy; /* wg NULL for a non-gated shape */
} tw_nf_data;

/* Random data (fixed seed; about `density` of the gate active: x in [0, 1), weights in
 * [-1/8, 1/8) shifted so the mean pre-activation sits that far below 0) with the values of
 * `where` planted. Returns 0, or -1 when out of memory. */
int tw_nf_make(tw_nf_data *d, const twell_shape *s, size_t M, tw_nf_where where, double density,
               uint64_t seed);
void tw_nf_free(tw_nf_data *d);
const char *tw_nf_where_name(tw_nf_where w);

/* The classes the dense fp64 computation gives (arrays the reference owns, NULL when not
 * computed): y [M, K]; with train (gated only): dx [M, K], dwg, dwu, dwd [N, K], l1 (one class)
 * for the L1 coefficient lambda; active[m] the active values of row m. */
typedef struct tw_nf_ref {
    unsigned char *y, *dx, *dwg, *dwu, *dwd, l1;
    size_t *active;
} tw_nf_ref;

int tw_nf_reference(const tw_nf_data *d, int train, double lambda, tw_nf_ref *r);
void tw_nf_ref_free(tw_nf_ref *r);

/* The class of a 16-bit value of dtype, of a float. */
unsigned char tw_nf_class16(twell_dtype dt, uint16_t v);
unsigned char tw_nf_classf(float v);

/* How tw_nf_compare judges a value against its reference class. */
enum {
    TW_NF_ONE_SIDED = 0, /* not finite where the reference is not (the CUDA routes may spread a
                            non-finite weight row to other rows of a tile: twellrt.h) */
    TW_NF_EXACT = 1,     /* the same class (the CPU backend) */
    TW_NF_FINITE = 2     /* finite exactly where the reference is (the CUDA routes' promise) */
};

/* Compares the classes of got (n values, 16-bit of dt when got32 is NULL, else got32) with want
 * under mode (above).
 * Returns the number of mismatches and prints the first as "<name>[i]: got <c>, want <c>". */
size_t tw_nf_compare(twell_dtype dt, const uint16_t *got16, const float *got32,
                     const unsigned char *want, size_t n, size_t row_len, int mode,
                     const char *name);

/* Whether the scenario's results are promised element for element on every route (x and the
 * packing weight: yes; Wu and Wd rows: only where a row uses the neuron, see twellrt.h). */
int tw_nf_strict(tw_nf_where w);

#endif
