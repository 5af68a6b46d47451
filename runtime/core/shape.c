/* shape.c — the shape rule (shape.h): a caller's twell_shape read by its struct_size, the
 * defaults of the fields it lacks, and the checks on every field. */
#include "shape.h"

#include "abi.h"

#include <string.h>

/* Every field of twell_shape, in order: the bytes a caller's struct_size covers. */
static const size_t tw_shape_ends[] = {
    TW_FIELD_END(twell_shape, struct_size), TW_FIELD_END(twell_shape, K),
    TW_FIELD_END(twell_shape, N),           TW_FIELD_END(twell_shape, T),
    TW_FIELD_END(twell_shape, C),           TW_FIELD_END(twell_shape, dtype),
    TW_FIELD_END(twell_shape, gated),
};
/* A field appended to the struct grows it past its last listed field: list it above. */
_Static_assert(sizeof(twell_shape) - TW_FIELD_END(twell_shape, gated) < _Alignof(twell_shape),
               "a field of twell_shape is missing from tw_shape_ends");

static const tw_abi_struct tw_shape_abi = {"shape", "twell_shape_init", sizeof(twell_shape),
                                           tw_shape_ends,
                                           sizeof tw_shape_ends / sizeof tw_shape_ends[0]};

/* The defaults of every field but K and N, which have none (0: an invalid shape). */
static twell_shape tw_shape_defaults(void) {
    twell_shape s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.T = 256;
    s.C = 8;
    s.dtype = TWELL_DTYPE_BF16;
    s.gated = 1;
    return s;
}

twell_status tw_shape_init(twell_shape *shape, size_t struct_size, uint32_t K, uint32_t N) {
    twell_shape d = tw_shape_defaults();
    d.K = K;
    d.N = N;
    return tw_abi_init(&tw_shape_abi, shape, struct_size, &d);
}

twell_status tw_shape_import(twell_ctx *ctx, const char *fn, const twell_shape *shape,
                             twell_shape *out) {
    if (!shape)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "%s: shape is NULL", fn);
    twell_shape in = tw_shape_defaults();
    char why[256];
    if (tw_abi_read(&tw_shape_abi, shape, &in, why, sizeof why, NULL) != TWELL_OK)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "%s: %s", fn, why);
    const twell_shape *s = &in;
    if (s->K == 0 || s->K % 16 != 0)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "%s: shape.K = %u is not a positive multiple of 16", fn, s->K);
    if (s->T < 64 || s->T > 256 || (s->T & (s->T - 1)) != 0)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "%s: shape.T = %u is not a power of two in [64, 256]", fn, s->T);
    if (s->C != 2 && s->C != 4 && s->C != 8)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "%s: shape.C = %u is not 2, 4 or 8", fn, s->C);
    if (s->N == 0 || s->N > 65536)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG, "%s: shape.N = %u is not in [1, 65536]", fn,
                        s->N);
    if (s->N % s->T != 0)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "%s: shape.N = %u is not a multiple of shape.T = %u", fn, s->N, s->T);
    if (s->dtype != TWELL_DTYPE_BF16 && s->dtype != TWELL_DTYPE_FP16)
        return tw_error(ctx, TWELL_ERR_INVALID_ARG,
                        "%s: shape.dtype = %d is not TWELL_DTYPE_BF16 or TWELL_DTYPE_FP16", fn,
                        (int)s->dtype);
    *out = in;
    return TWELL_OK;
}
