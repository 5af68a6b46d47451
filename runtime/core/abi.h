/* abi.h — reading the caller's sized structs (twellrt.h, "ABI stability"): only the bytes the
 * caller has are read; fields past them keep the library's defaults. */
#ifndef TWELL_ABI_H
#define TWELL_ABI_H

#include "twellrt.h"

#include <stddef.h>

/* The end (offset + size) of field f of struct type t: a constant expression. */
#define TW_FIELD_END(t, f) (offsetof(t, f) + sizeof(((t *)0)->f))

/* One sized struct of the public header, as this library compiled it. */
typedef struct tw_abi_struct {
    const char *name;   /* for messages: "options", "shape" */
    const char *init;   /* the init function that sets struct_size: "twell_shape_init" */
    size_t size;        /* sizeof, the library's */
    const size_t *ends; /* TW_FIELD_END of every field in declaration order (ascending) */
    size_t nends;
} tw_abi_struct;

/* struct_size as the caller set it: the first size_t at p (p not NULL). */
size_t tw_abi_size(const void *p);

/* The *_init_sized step: writes defaults (t->size bytes, the library's defaults) into the first
 * struct_size bytes at dst — the fields that fit wholly, zero past them (the padding of a field
 * cut short included) — and stores struct_size. TWELL_ERR_INVALID_ARG (nothing written) for NULL
 * dst or struct_size outside [sizeof(size_t), TWELL_STRUCT_SIZE_MAX]. */
twell_status tw_abi_init(const tw_abi_struct *t, void *dst, size_t struct_size,
                         const void *defaults);

/* Reads the caller's struct src into out, which holds the library's defaults on entry: each
 * field that lies wholly inside src's struct_size is copied, the others keep their defaults, and
 * out's struct_size becomes t->size. TWELL_ERR_INVALID_ARG with a one-line reason in why (for
 * "<fn>: <name>.struct_size ...") when struct_size is out of range (nothing is read past it and
 * out is untouched: *fields_read = 0) or when it exceeds t->size and a byte past t->size is not
 * zero (out then holds the fields it knows: *fields_read = 1, so a log callback among them can
 * be used). fields_read may be NULL. */
twell_status tw_abi_read(const tw_abi_struct *t, const void *src, void *out, char *why,
                         size_t why_size, int *fields_read);

#endif /* TWELL_ABI_H */
