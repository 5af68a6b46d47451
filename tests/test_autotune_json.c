/* test_autotune_json.c — the strict JSON reader (valid documents, rejections, fuzzing) and the
 * model config.json reader.
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "candidates.h"
#include "json.h"
#include "tw_tune_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the JSON reader and config.json ---- */

static tw_json *tw_parse_ok(const char *doc) {
    tw_json *v = NULL;
    char err[256];
    twell_status st = tw_json_parse(doc, strlen(doc), &v, err, sizeof err);
    if (st != TWELL_OK)
        fail_msg("rejected %s: %s", doc, err);
    return v;
}

static void test_autotune_json_valid(void **state) {
    (void)state;
    const char *doc = "\xEF\xBB\xBF { \"a\": [1, -0, 2.5e3, -9223372036854775808, "
                      "9223372036854775808, 1E-2],\n \"s\": \"x\\u00e9\\ud83d\\ude00\\n\\\"\\/\","
                      " \"t\": true, \"f\": false, \"n\": null, \"o\": {}, \"e\": [], "
                      "\"u\": \"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"}  \r\n";
    tw_json *v = tw_parse_ok(doc);
    assert_int_equal(v->type, TW_JSON_OBJECT);
    assert_int_equal(v->len, 8);
    const tw_json *a = tw_json_get(v, "a");
    assert_non_null(a);
    assert_int_equal(a->type, TW_JSON_ARRAY);
    assert_int_equal(a->len, 6);
    assert_true(a->items[0]->is_int && a->items[0]->i == 1);
    assert_true(a->items[1]->is_int && a->items[1]->i == 0);
    assert_false(a->items[2]->is_int);
    assert_true(a->items[2]->num == 2500.0);
    assert_true(a->items[3]->is_int && a->items[3]->i == INT64_MIN);
    assert_false(a->items[4]->is_int); /* beyond int64: a double only */
    assert_true(a->items[4]->num == 9223372036854775808.0);
    assert_true(a->items[5]->num == 0.01);
    const tw_json *str = tw_json_get(v, "s");
    assert_int_equal(str->type, TW_JSON_STRING);
    assert_int_equal(str->len, 1 + 2 + 4 + 1 + 1 + 1);
    assert_memory_equal(str->str, "x\xC3\xA9\xF0\x9F\x98\x80\n\"/", str->len);
    assert_string_equal(tw_json_get(v, "u")->str, "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
    assert_int_equal(tw_json_get(v, "t")->type, TW_JSON_TRUE);
    assert_int_equal(tw_json_get(v, "f")->type, TW_JSON_FALSE);
    assert_int_equal(tw_json_get(v, "n")->type, TW_JSON_NULL);
    assert_int_equal(tw_json_get(v, "o")->len, 0);
    assert_int_equal(tw_json_get(v, "e")->len, 0);
    assert_null(tw_json_get(v, "missing"));
    assert_null(tw_json_get(a, "a")); /* not an object */
    tw_json_free(v);

    /* Scalars at the top level; \u0000 inside a value (not in a key). */
    v = tw_parse_ok(" 42 ");
    assert_true(v->is_int && v->i == 42);
    tw_json_free(v);
    v = tw_parse_ok("\"a\\u0000b\"");
    assert_int_equal(v->len, 3);
    tw_json_free(v);
    tw_json_free(NULL);

    /* Exactly the depth limit is fine. */
    char deep[2 * TW_JSON_MAX_DEPTH + 1];
    memset(deep, '[', TW_JSON_MAX_DEPTH);
    memset(deep + TW_JSON_MAX_DEPTH, ']', TW_JSON_MAX_DEPTH);
    deep[2 * TW_JSON_MAX_DEPTH] = '\0';
    v = tw_parse_ok(deep);
    tw_json_free(v);
}

static void test_autotune_json_rejects(void **state) {
    (void)state;
    static const struct {
        const char *doc, *msg;
    } bad[] = {
        {"", "expected a value, found the end"},
        {"   ", "expected a value"},
        {"{\"a\": 1,}", "trailing comma"},
        {"[1, 2,]", "trailing comma"},
        {"{\"a\" 1}", "expected ':'"},
        {"{'a': 1}", "member name in quotes"},
        {"{\"a\": 1} x", "after the document"},
        {"{\"a\": 1}{}", "after the document"},
        {"[01]", "leading zeros"},
        {"[+1]", "expected a value"},
        {"[1.]", "digits after '.'"},
        {"[.5]", "expected a value"},
        {"[1e]", "exponent"},
        {"[-]", "digits after '-'"},
        {"[NaN]", "expected a value"},
        {"[Infinity]", "expected a value"},
        {"[tru]", "expected a value"},
        {"[nul]", "expected a value"},
        {"\"abc", "unterminated string"},
        {"\"a\tb\"", "control character 0x09"},
        {"\"\\x\"", "invalid escape"},
        {"\"\\u12G4\"", "four hex digits"},
        {"\"\\ud83d\"", "without its low half"},
        {"\"\\ud83d\\u0041\"", "does not complete surrogate"},
        {"\"\\ude00\"", "lone low surrogate"},
        {"\"\xC3\"", "invalid UTF-8"},
        {"\"\xC0\xAF\"", "invalid UTF-8"},         /* overlong '/' */
        {"\"\xED\xA0\x80\"", "invalid UTF-8"},     /* encoded surrogate */
        {"\"\xF4\x90\x80\x80\"", "invalid UTF-8"}, /* above U+10FFFF */
        {"\"\xFF\"", "invalid UTF-8"},
        {"{\"a\": 1, \"b\": 2, \"a\": 3}", "the key \"a\" twice"},
        {"{\"a\\u0000\": 1}", "U+0000"},
        {"[1 2]", "expected ',' or ']'"},
        {"{\"a\": [1}", "expected ',' or ']'"},
        {"/* c */ 1", "expected a value"},
        {"[1]\n// c", "after the document"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tw_json *v = (tw_json *)1;
        char err[256];
        twell_status st = tw_json_parse(bad[i].doc, strlen(bad[i].doc), &v, err, sizeof err);
        if (st != TWELL_ERR_CORRUPT || v != NULL || !strstr(err, bad[i].msg) ||
            strncmp(err, "line ", 5))
            fail_msg("doc #%zu %s: status %s, message '%s' (want '%s')", i, bad[i].doc,
                     twell_status_name(st), err, bad[i].msg);
    }
    /* Position of the first bad byte: line and column. */
    const char *doc = "{\n  \"a\": 1,\n  \"b\": [1, 2,, 3]\n}";
    tw_json *v;
    char err[256];
    assert_int_equal(tw_json_parse(doc, strlen(doc), &v, err, sizeof err), TWELL_ERR_CORRUPT);
    assert_non_null(strstr(err, "line 3, column 14"));
    /* Too deep. */
    char deep[2 * TW_JSON_MAX_DEPTH + 3];
    memset(deep, '[', TW_JSON_MAX_DEPTH + 1);
    memset(deep + TW_JSON_MAX_DEPTH + 1, ']', TW_JSON_MAX_DEPTH + 1);
    deep[2 * TW_JSON_MAX_DEPTH + 2] = '\0';
    assert_int_equal(tw_json_parse(deep, strlen(deep), &v, err, sizeof err), TWELL_ERR_CORRUPT);
    assert_non_null(strstr(err, "nesting deeper than 128"));
    /* A NUL byte inside the given length is not the end of the text. */
    assert_int_equal(tw_json_parse("[1]\0", 4, &v, err, sizeof err), TWELL_ERR_CORRUPT);
    /* err may be NULL. */
    assert_int_equal(tw_json_parse("[", 1, &v, NULL, 0), TWELL_ERR_CORRUPT);
}

static char *tw_read_fixture(const char *name, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/%s", TWELL_TEST_SOURCE_DIR, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    *len = fread(buf, 1, sizeof buf - 1, f);
    buf[*len] = '\0';
    fclose(f);
    char *copy = malloc(*len + 1);
    memcpy(copy, buf, *len + 1);
    return copy;
}

static void test_autotune_json_fuzz(void **state) {
    (void)state;
    size_t len;
    char *base = tw_read_fixture("tinyllama_config.json", &len);
    tw_json *v;
    /* Every prefix. */
    for (size_t cut = 0; cut < len; cut++) {
        twell_status st = tw_json_parse(base, cut, &v, NULL, 0);
        assert_true(st == TWELL_OK || st == TWELL_ERR_CORRUPT);
        tw_json_free(v);
    }
    /* Random edits with characters that matter to JSON (fixed seed). */
    static const char alphabet[] = "{}[]\":,\\u0123456789eE+-.tfn \n\x80\xC3\xFF";
    char *m = malloc(len + 8);
    uint32_t rng = 12345u;
    size_t ok = 0, corrupt = 0;
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(m, base, len);
        size_t mlen = len;
        rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
        int edits = 1 + (int)(rng % 4u);
        for (int e = 0; e < edits; e++) {
            rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
            size_t at = rng % mlen;
            char ch = alphabet[(rng >> 16) % (sizeof alphabet - 1)];
            switch ((rng >> 8) % 3u) {
            case 0:
                m[at] = ch;
                break;
            case 1: /* delete */
                memmove(m + at, m + at + 1, mlen - at - 1);
                mlen--;
                break;
            default: /* insert */
                memmove(m + at + 1, m + at, mlen - at);
                m[at] = ch;
                mlen++;
                break;
            }
        }
        char err[256];
        twell_status st = tw_json_parse(m, mlen, &v, err, sizeof err);
        if (st == TWELL_OK) {
            ok++;
            tw_json_free(v);
        } else {
            assert_int_equal(st, TWELL_ERR_CORRUPT);
            assert_null(v);
            assert_true(!strncmp(err, "line ", 5));
            corrupt++;
        }
        tw_model_config mc;
        st = tw_model_config_parse(m, mlen, &mc, err, sizeof err);
        assert_true(st == TWELL_OK || st == TWELL_ERR_CORRUPT || st == TWELL_ERR_INVALID_ARG);
    }
    assert_true(ok > 100 && corrupt > 1000);
    free(m);
    free(base);
}

static void test_autotune_model_config(void **state) {
    (void)state;
    tw_model_config m;
    char err[512];
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/tinyllama_config.json", TWELL_TEST_SOURCE_DIR);
    assert_int_equal(tw_model_config_load(path, &m, err, sizeof err), TWELL_OK);
    assert_int_equal(m.hidden_size, 2048);
    assert_int_equal(m.intermediate_size, 5632);
    assert_int_equal(m.num_layers, 22);
    assert_string_equal(m.torch_dtype, "bfloat16");
    assert_string_equal(m.model_type, "llama");
    assert_string_equal(m.hidden_act, "silu");
    assert_string_equal(m.section, "");
    twell_dtype dt = TWELL_DTYPE_FP16;
    assert_int_equal(tw_model_config_dtype(&m, &dt, err, sizeof err), TWELL_OK);
    assert_int_equal(dt, TWELL_DTYPE_BF16);

    snprintf(path, sizeof path, "%s/tests/data/llama_7b_config.json", TWELL_TEST_SOURCE_DIR);
    assert_int_equal(tw_model_config_load(path, &m, err, sizeof err), TWELL_OK);
    assert_int_equal(m.hidden_size, 4096);
    assert_int_equal(m.intermediate_size, 11008);
    assert_int_equal(tw_model_config_dtype(&m, &dt, err, sizeof err), TWELL_OK);
    assert_int_equal(dt, TWELL_DTYPE_FP16);

    snprintf(path, sizeof path, "%s/tests/data/llava_config.json", TWELL_TEST_SOURCE_DIR);
    assert_int_equal(tw_model_config_load(path, &m, err, sizeof err), TWELL_OK);
    assert_int_equal(m.hidden_size, 4096);
    assert_int_equal(m.num_layers, 32);
    assert_string_equal(m.section, "text_config");
    assert_string_equal(m.model_type, "llava");
    assert_string_equal(m.torch_dtype, "bfloat16");

    snprintf(path, sizeof path, "%s/tests/data/fp32_config.json", TWELL_TEST_SOURCE_DIR);
    assert_int_equal(tw_model_config_load(path, &m, err, sizeof err), TWELL_OK);
    assert_int_equal(tw_model_config_dtype(&m, &dt, err, sizeof err), TWELL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "torch_dtype \"float32\" is not supported"));

    snprintf(path, sizeof path, "%s/tests/data/malformed_config.json", TWELL_TEST_SOURCE_DIR);
    assert_int_equal(tw_model_config_load(path, &m, err, sizeof err), TWELL_ERR_CORRUPT);
    assert_non_null(strstr(err, "malformed_config.json: line 5, column 1: trailing comma"));
    assert_int_equal(m.hidden_size, 0);

    assert_int_equal(tw_model_config_load("/nonexistent/config.json", &m, err, sizeof err),
                     TWELL_ERR_IO);
    assert_non_null(strstr(err, "cannot open /nonexistent/config.json"));

    static const struct {
        const char *doc;
        twell_status st;
        const char *msg;
    } cases[] = {
        {"[1, 2]", TWELL_ERR_CORRUPT, "an array, not an object"},
        {"{\"intermediate_size\": 5632}", TWELL_ERR_INVALID_ARG, "no hidden_size"},
        {"{\"hidden_size\": 2048}", TWELL_ERR_INVALID_ARG, "no intermediate_size"},
        {"{\"hidden_size\": \"2048\", \"intermediate_size\": 5632}", TWELL_ERR_INVALID_ARG,
         "hidden_size must be a number, not string"},
        {"{\"hidden_size\": 2048.5, \"intermediate_size\": 5632}", TWELL_ERR_INVALID_ARG,
         "not a positive integer"},
        {"{\"hidden_size\": 2048, \"intermediate_size\": -1}", TWELL_ERR_INVALID_ARG,
         "intermediate_size = -1"},
        {"{\"hidden_size\": 2048, \"intermediate_size\": 4294967296}", TWELL_ERR_INVALID_ARG,
         "below 2^31"},
        {"{\"hidden_size\": 2048, \"intermediate_size\": 5632, \"num_hidden_layers\": -2}",
         TWELL_ERR_INVALID_ARG, "num_hidden_layers must be a non-negative integer"},
        {"{\"hidden_size\": 2048, \"intermediate_size\": 5632, \"torch_dtype\": 16}",
         TWELL_ERR_INVALID_ARG, "torch_dtype must be a string"},
        {"{\"hidden_size\": 2048, \"intermediate_size\": 5632, \"hidden_size\": 1}",
         TWELL_ERR_CORRUPT, "twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        twell_status st =
            tw_model_config_parse(cases[i].doc, strlen(cases[i].doc), &m, err, sizeof err);
        if (st != cases[i].st || !strstr(err, cases[i].msg))
            fail_msg("%s: %s '%s' (want %s '%s')", cases[i].doc, twell_status_name(st), err,
                     twell_status_name(cases[i].st), cases[i].msg);
    }
    /* Other families' key names, and the newer "dtype" key. */
    const char *gpt = "{\"n_embd\": 768, \"n_inner\": 3072, \"n_layer\": 12, \"dtype\": "
                      "\"torch.float16\", \"activation_function\": \"gelu_new\"}";
    assert_int_equal(tw_model_config_parse(gpt, strlen(gpt), &m, err, sizeof err), TWELL_OK);
    assert_int_equal(m.hidden_size, 768);
    assert_int_equal(m.intermediate_size, 3072);
    assert_int_equal(m.num_layers, 12);
    assert_string_equal(m.hidden_key, "n_embd");
    assert_string_equal(m.inner_key, "n_inner");
    assert_string_equal(m.hidden_act, "gelu_new");
    assert_int_equal(tw_model_config_dtype(&m, &dt, err, sizeof err), TWELL_OK);
    assert_int_equal(dt, TWELL_DTYPE_FP16);
    const char *nodt = "{\"hidden_size\": 64, \"intermediate_size\": 256}";
    assert_int_equal(tw_model_config_parse(nodt, strlen(nodt), &m, err, sizeof err), TWELL_OK);
    assert_int_equal(m.num_layers, -1);
    assert_int_equal(tw_model_config_dtype(&m, &dt, err, sizeof err), TWELL_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "--dtype"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_autotune_json_valid),
        cmocka_unit_test(test_autotune_json_rejects),
        cmocka_unit_test(test_autotune_json_fuzz),
        cmocka_unit_test(test_autotune_model_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
