/*
 * json.h — a small strict JSON reader (RFC 8259) for model configuration files: untrusted
 * input, so every malformed document gives a clean error with its line and column, never a
 * crash; and the model facts the prewarm tool needs from a Hugging Face config.json.
 */
#ifndef TWELL_JSON_H
#define TWELL_JSON_H

#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

typedef enum tw_json_type {
    TW_JSON_NULL = 0,
    TW_JSON_FALSE,
    TW_JSON_TRUE,
    TW_JSON_NUMBER,
    TW_JSON_STRING,
    TW_JSON_ARRAY,
    TW_JSON_OBJECT
} tw_json_type;

/* A parsed value. Owned by the tree returned by tw_json_parse; read-only for users. */
typedef struct tw_json tw_json;
struct tw_json {
    tw_json_type type;
    double num;      /* NUMBER: its value (nearest double) */
    int is_int;      /* NUMBER written without fraction or exponent that fits an int64 */
    int64_t i;       /* NUMBER when is_int */
    char *str;       /* STRING: UTF-8 bytes, NUL-terminated (may also contain \u0000) */
    size_t len;      /* STRING: bytes; ARRAY/OBJECT: members */
    char **keys;     /* OBJECT: member names (NUL-terminated), in document order */
    tw_json **items; /* ARRAY/OBJECT: members in document order */
};

/* Nesting depth beyond which a document is rejected (no recursion without bound). */
#define TW_JSON_MAX_DEPTH 128

/* Parses exactly one JSON value spanning text[0..len) (whitespace around it allowed; a leading
 * UTF-8 byte-order mark is skipped). Strict: no comments, trailing commas, single quotes, NaN,
 * leading zeros or '+', control characters in strings, invalid UTF-8, lone surrogate escapes,
 * duplicate object keys, or deeper nesting than TW_JSON_MAX_DEPTH. On success *out is the tree
 * (tw_json_free it). On failure *out is NULL and err (errlen bytes, may be NULL) receives "line
 * L, column C: what was wrong": TWELL_ERR_CORRUPT, or TWELL_ERR_NO_MEMORY. */
twell_status tw_json_parse(const char *text, size_t len, tw_json **out, char *err, size_t errlen);
void tw_json_free(tw_json *v); /* NULL is a no-op */

/* The member key of an object, or NULL (v NULL, not an object, or no such key). */
const tw_json *tw_json_get(const tw_json *v, const char *key);

/* "null", "false", "true", "number", "string", "array", "object". */
const char *tw_json_type_name(tw_json_type t);

/* ---- a model's config.json ---- */

typedef struct tw_model_config {
    uint32_t hidden_size;       /* K */
    uint32_t intermediate_size; /* N */
    int64_t num_layers;         /* -1 when the file does not say */
    char torch_dtype[32];       /* as written ("" when absent) */
    char model_type[48];        /* "" when absent */
    char hidden_act[32];        /* "" when absent */
    char hidden_key[32];        /* which key gave K ("hidden_size", "d_model", ...) */
    char inner_key[32];         /* which key gave N */
    char section[32];           /* "" (top level) or "text_config" when the sizes came from it */
} tw_model_config;

/* Reads the facts of a Hugging Face style config.json: K from hidden_size (else d_model,
 * n_embd), N from intermediate_size (else ffn_dim, ffn_hidden_size, n_inner), the layer count
 * from num_hidden_layers (else n_layer, num_layers), torch_dtype (else dtype), model_type and
 * hidden_act. When the top level lacks the sizes, a "text_config" object is searched (multimodal
 * models). Errors (message in err): TWELL_ERR_CORRUPT (not JSON, or not an object),
 * TWELL_ERR_INVALID_ARG (a size missing, or not an integer in [1, 2^31)), TWELL_ERR_NO_MEMORY.
 * The dtype is not judged here: see tw_model_config_dtype. *out zeroed on failure. */
twell_status tw_model_config_parse(const char *text, size_t len, tw_model_config *out, char *err,
                                   size_t errlen);

/* tw_model_config_parse of the file at path (at most 16 MiB). Also TWELL_ERR_IO (unreadable,
 * or too large). */
twell_status tw_model_config_load(const char *path, tw_model_config *out, char *err, size_t errlen);

/* The element type the model's torch_dtype asks for: "bfloat16" → BF16, "float16" / "half" →
 * FP16 (a "torch." prefix is allowed). TWELL_ERR_UNSUPPORTED for any other type (e.g. float32),
 * TWELL_ERR_NOT_FOUND when the file names none; the message in err says what to do. */
twell_status tw_model_config_dtype(const tw_model_config *m, twell_dtype *out, char *err,
                                   size_t errlen);

#endif /* TWELL_JSON_H */
