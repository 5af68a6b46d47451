/*
 * tw_fuzz.h — the fuzz targets over twellrt's readers of untrusted input, shared by the seeded
 * random driver that `make test` runs (tests/test_fuzz.c) and the libFuzzer harnesses
 * (tests/fuzz/libfuzzer.c, built with -DTWELL_FUZZ=ON). Each target takes one input of any bytes,
 * must never crash, hang or leak on it, and checks the properties listed beside it; a violated
 * property calls tw_fuzz_fail, which reports and aborts.
 */
#ifndef TWELL_TW_FUZZ_H
#define TWELL_TW_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* A growable byte buffer (an input or a seed). */
typedef struct tw_fuzz_buf {
    uint8_t *p;
    size_t n, cap;
} tw_fuzz_buf;

typedef struct tw_fuzz_target {
    const char *name;
    /* Once per process before any run: temp directories, fixed data. 0 on success. */
    int (*init)(void);
    /* One input. Returns 0 (libFuzzer's convention); tw_fuzz_fail on a violated property. */
    int (*run)(const uint8_t *data, size_t size);
    /* Seed i of the driver's corpus into out (cleared first): 1, or 0 past the last. */
    int (*seed)(size_t i, tw_fuzz_buf *out);
    /* Tokens the driver's mutations insert (NULL-terminated), or NULL. */
    const char *const *dict;
    size_t max_len; /* the driver's inputs stay below this many bytes */
    /* The last step of every generated input (NULL: none), from the random value r: lets some
     * inputs past a check random bytes almost never pass (a checksum) or adds corruption that
     * knows the format. The libFuzzer harness applies it too, r a hash of the input. */
    void (*fixup)(tw_fuzz_buf *b, uint64_t r);
} tw_fuzz_target;

/* The targets, NULL-terminated:
 *   render        a template's text rendered by the sandboxed Lua engine (gen/lua_engine.c)
 *                 under tight limits: OK with NUL-free output, or an error with a message, within
 *                 the time limit plus slack; real modules importable.
 *   cache_entry   an entry file's bytes (cache/cache_entry.c): accepted only when every header
 *                 field and the checksum match; the same verdict from a file on disk, where a
 *                 rejected file is deleted; entry names parsed strictly.
 *   tune_record   a tuning record's payload (autotune/store.c): accepted ones survive an encode
 *                 and decode unchanged.
 *   model_config  a config.json (autotune/json.c, modelcfg.c): a clean error with its position,
 *                 or sizes in range; the JSON tree parsed and freed.
 *   packed        a packed buffer of a small shape (first byte: shape, second: M): the full rule
 *                 and the structural one agree with each other and with tw_unpack_row; the CPU
 *                 backend rejects exactly what they reject (validation on and off) and, where it
 *                 runs, stays in bounds and gives the same y either way. */
extern const tw_fuzz_target *const tw_fuzz_targets[];

/* The target called name, or NULL. */
const tw_fuzz_target *tw_fuzz_find(const char *name);

/* Prints "fuzz <target>: <message>" and what tw_fuzz_context says about the input, then aborts. */
_Noreturn void tw_fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* What the reporter prints about the current input (how to reproduce it); the caller keeps the
 * string alive. The target's name is set by the caller too. */
void tw_fuzz_context(const char *target, const char *how);

/* Buffer helpers: append n bytes (abort on out of memory), free. */
void tw_fuzz_buf_add(tw_fuzz_buf *b, const void *p, size_t n);
void tw_fuzz_buf_free(tw_fuzz_buf *b);

#endif /* TWELL_TW_FUZZ_H */
