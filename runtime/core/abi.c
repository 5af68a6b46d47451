/* abi.c — the sized-struct rules of twellrt.h ("ABI stability"), written once for every struct:
 * which of the caller's bytes are read, how defaults fill the rest, and what is refused. */
#include "abi.h"

#include <stdio.h>
#include <string.h>

size_t tw_abi_size(const void *p) {
    size_t n;
    memcpy(&n, p, sizeof n); /* the caller's struct may be less aligned than a size_t's */
    return n;
}

static int tw_abi_size_ok(size_t struct_size) {
    return struct_size >= sizeof(size_t) && struct_size <= TWELL_STRUCT_SIZE_MAX;
}

/* Bytes of the library's struct that are whole fields inside the first n bytes. */
static size_t tw_abi_known(const tw_abi_struct *t, size_t n) {
    size_t known = 0;
    for (size_t i = 0; i < t->nends && t->ends[i] <= n; i++)
        known = t->ends[i];
    return known;
}

twell_status tw_abi_init(const tw_abi_struct *t, void *dst, size_t struct_size,
                         const void *defaults) {
    if (!dst || !tw_abi_size_ok(struct_size))
        return TWELL_ERR_INVALID_ARG;
    size_t known = tw_abi_known(t, struct_size);
    memcpy(dst, defaults, known);
    memset((char *)dst + known, 0, struct_size - known);
    memcpy(dst, &struct_size, sizeof struct_size);
    return TWELL_OK;
}

twell_status tw_abi_read(const tw_abi_struct *t, const void *src, void *out, char *why,
                         size_t why_size, int *fields_read) {
    if (fields_read)
        *fields_read = 0;
    size_t n = tw_abi_size(src);
    if (!tw_abi_size_ok(n)) {
        snprintf(why, why_size, "%s.struct_size = %zu is not in [%zu, %u]: initialise it with %s",
                 t->name, n, sizeof(size_t), TWELL_STRUCT_SIZE_MAX, t->init);
        return TWELL_ERR_INVALID_ARG;
    }
    size_t known = tw_abi_known(t, n);
    memcpy(out, src, known);
    memcpy(out, &t->size, sizeof t->size);
    if (fields_read)
        *fields_read = 1;
    const unsigned char *b = src;
    for (size_t i = t->size; i < n; i++)
        if (b[i] != 0) {
            snprintf(why, why_size,
                     "%s.struct_size = %zu but this library (twellrt %s) knows %zu bytes and "
                     "byte %zu is set: the program sets a field of a newer twellrt.h",
                     t->name, n, twell_version(), t->size, i);
            return TWELL_ERR_INVALID_ARG;
        }
    return TWELL_OK;
}
