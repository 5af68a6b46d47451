/*
 * tw_fuzz_int.h — what the files of the fuzz targets share (fuzz_targets.c: the helpers and the
 * table; fuzz_render.c, fuzz_formats.c, fuzz_packed.c: the targets of tw_fuzz.h).
 */
#ifndef TWELL_TW_FUZZ_INT_H
#define TWELL_TW_FUZZ_INT_H

#include "tw_fuzz.h"

#include <stddef.h>

/* Appends the string s (without its NUL). */
void tw_fz_str(tw_fuzz_buf *b, const char *s);
/* Reads a whole file into b (cleared first); 0 on success. */
int tw_fz_read(const char *path, tw_fuzz_buf *b);
/* Writes n bytes of p as the file path; 0 on success. */
int tw_fz_write(const char *path, const void *p, size_t n);
/* A fresh private directory under $TMPDIR (else /tmp) into out, removed at exit; 0 on
 * success. */
int tw_fz_tmpdir(const char *what, char *out, size_t n);
/* The files of dir whose names end with suffix (and, with not_suffix, do not end with it),
 * sorted, appended to names[*n..cap). */
void tw_fz_list(const char *dir, const char *suffix, const char *not_suffix, char **names,
                size_t *n, size_t cap);
/* The monotonic clock, s. */
double tw_fz_now(void);

/* The targets (tw_fuzz.h's list). */
extern const tw_fuzz_target tw_fz_render, tw_fz_cache, tw_fz_tune, tw_fz_model, tw_fz_packed;

#endif /* TWELL_TW_FUZZ_INT_H */
