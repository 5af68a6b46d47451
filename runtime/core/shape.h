/* shape.h — the shape rule of twellrt.h's twell_shape, pure and below every folder: the API's
 * entry points (runtime/plan.c) and the tuning engine (autotune/gpu_tune.c) check shapes here. */
#ifndef TWELL_SHAPE_H
#define TWELL_SHAPE_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

/* twell_shape_init_sized's work: the defaults (T 256, C 8, bf16, gated) with K and N written into
 * the first struct_size bytes at shape (abi.h's tw_abi_init). TWELL_ERR_INVALID_ARG (nothing
 * written) for a NULL shape or a struct_size out of range. */
twell_status tw_shape_init(twell_shape *shape, size_t struct_size, uint32_t K, uint32_t N);

/* Checks shape, read by its struct_size into *out (fields past it take the defaults); on failure
 * records "<fn>: shape.<field> = <value> ..." on ctx (may be NULL) and leaves *out untouched. */
twell_status tw_shape_import(twell_ctx *ctx, const char *fn, const twell_shape *shape,
                             twell_shape *out);

#endif /* TWELL_SHAPE_H */
