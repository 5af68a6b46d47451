/*
 * modelcfg.c — the facts `twell tune --model` needs from a Hugging Face config.json: model and
 * hidden widths, layer count and element type, with the key names other families use.
 */
#include "json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TW_MODEL_FILE_MAX ((size_t)16 << 20)

static twell_status tw_merr(char *err, size_t errlen, twell_status st, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* The first of keys present in obj (its name in *which), or NULL. */
static const tw_json *tw_first(const tw_json *obj, const char *const *keys, const char **which) {
    for (; *keys; keys++) {
        const tw_json *v = tw_json_get(obj, *keys);
        if (v && v->type != TW_JSON_NULL) {
            *which = *keys;
            return v;
        }
    }
    return NULL;
}

static const char *const tw_hidden_keys[] = {"hidden_size", "d_model", "n_embd", NULL};
static const char *const tw_inner_keys[] = {"intermediate_size", "ffn_dim", "ffn_hidden_size",
                                            "n_inner", NULL};
static const char *const tw_layer_keys[] = {"num_hidden_layers", "n_layer", "num_layers", NULL};
static const char *const tw_dtype_keys[] = {"torch_dtype", "dtype", NULL};

/* A size: an integer in [1, 2^31). Writes the message and returns non-OK otherwise. */
static twell_status tw_size(const tw_json *v, const char *key, const char *section, uint32_t *out,
                            char *err, size_t errlen) {
    const char *in = section[0] ? " in " : "", *sec = section;
    if (v->type != TW_JSON_NUMBER)
        return tw_merr(err, errlen, TWELL_ERR_INVALID_ARG, "%s%s%s must be a number, not %s", key,
                       in, sec, tw_json_type_name(v->type));
    if (!v->is_int || v->i < 1 || v->i >= ((int64_t)1 << 31))
        return tw_merr(err, errlen, TWELL_ERR_INVALID_ARG,
                       "%s%s%s = %g is not a positive integer below 2^31", key, in, sec, v->num);
    *out = (uint32_t)v->i;
    return TWELL_OK;
}

static void tw_copy_str(const tw_json *v, char *dst, size_t n) {
    if (v && v->type == TW_JSON_STRING)
        snprintf(dst, n, "%s", v->str);
}

twell_status tw_model_config_parse(const char *text, size_t len, tw_model_config *out, char *err,
                                   size_t errlen) {
    memset(out, 0, sizeof *out);
    out->num_layers = -1;
    if (err && errlen)
        err[0] = '\0';
    tw_json *root = NULL;
    twell_status st = tw_json_parse(text, len, &root, err, errlen);
    if (st != TWELL_OK)
        return st;
    tw_model_config m;
    memset(&m, 0, sizeof m);
    m.num_layers = -1;
    if (root->type != TW_JSON_OBJECT) {
        st = tw_merr(err, errlen, TWELL_ERR_CORRUPT, "the document is %s %s, not an object",
                     root->type == TW_JSON_ARRAY || root->type == TW_JSON_OBJECT ? "an" : "a",
                     tw_json_type_name(root->type));
        goto done;
    }
    /* Multimodal configs keep the language model's sizes in "text_config". */
    const tw_json *obj = root;
    const char *hk = NULL, *ik = NULL, *lk = NULL, *dk = NULL;
    const tw_json *hv = tw_first(obj, tw_hidden_keys, &hk);
    const tw_json *iv = tw_first(obj, tw_inner_keys, &ik);
    const tw_json *text_cfg = tw_json_get(root, "text_config");
    if ((!hv || !iv) && text_cfg && text_cfg->type == TW_JSON_OBJECT) {
        const tw_json *h2 = tw_first(text_cfg, tw_hidden_keys, &hk);
        const tw_json *i2 = tw_first(text_cfg, tw_inner_keys, &ik);
        if (h2 && i2) {
            obj = text_cfg;
            hv = h2;
            iv = i2;
            snprintf(m.section, sizeof m.section, "text_config");
        } else {
            hv = tw_first(obj, tw_hidden_keys, &hk);
            iv = tw_first(obj, tw_inner_keys, &ik);
        }
    }
    if (!hv) {
        st = tw_merr(err, errlen, TWELL_ERR_INVALID_ARG,
                     "no hidden_size (nor d_model, n_embd): is this a transformer config.json?");
        goto done;
    }
    if (!iv) {
        st = tw_merr(err, errlen, TWELL_ERR_INVALID_ARG,
                     "no intermediate_size (nor ffn_dim, ffn_hidden_size, n_inner)");
        goto done;
    }
    if ((st = tw_size(hv, hk, m.section, &m.hidden_size, err, errlen)) != TWELL_OK ||
        (st = tw_size(iv, ik, m.section, &m.intermediate_size, err, errlen)) != TWELL_OK)
        goto done;
    snprintf(m.hidden_key, sizeof m.hidden_key, "%s", hk);
    snprintf(m.inner_key, sizeof m.inner_key, "%s", ik);

    const tw_json *lv = tw_first(obj, tw_layer_keys, &lk);
    if (!lv && obj != root)
        lv = tw_first(root, tw_layer_keys, &lk);
    if (lv) {
        if (lv->type != TW_JSON_NUMBER || !lv->is_int || lv->i < 0) {
            st = tw_merr(err, errlen, TWELL_ERR_INVALID_ARG, "%s must be a non-negative integer",
                         lk);
            goto done;
        }
        m.num_layers = lv->i;
    }
    const tw_json *dv = tw_first(obj, tw_dtype_keys, &dk);
    if (!dv && obj != root)
        dv = tw_first(root, tw_dtype_keys, &dk);
    if (dv && dv->type != TW_JSON_STRING) {
        st = tw_merr(err, errlen, TWELL_ERR_INVALID_ARG, "%s must be a string, not %s", dk,
                     tw_json_type_name(dv->type));
        goto done;
    }
    tw_copy_str(dv, m.torch_dtype, sizeof m.torch_dtype);
    tw_copy_str(tw_json_get(root, "model_type"), m.model_type, sizeof m.model_type);
    tw_copy_str(tw_json_get(obj, "hidden_act"), m.hidden_act, sizeof m.hidden_act);
    if (!m.hidden_act[0])
        tw_copy_str(tw_json_get(obj, "activation_function"), m.hidden_act, sizeof m.hidden_act);
    *out = m;
    st = TWELL_OK;
done:
    tw_json_free(root);
    return st;
}

twell_status tw_model_config_load(const char *path, tw_model_config *out, char *err,
                                  size_t errlen) {
    memset(out, 0, sizeof *out);
    out->num_layers = -1;
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f)
        return tw_merr(err, errlen, TWELL_ERR_IO, "cannot open %s: %s", path ? path : "(null)",
                       strerror(errno));
    char *buf = malloc(TW_MODEL_FILE_MAX + 1);
    if (!buf) {
        fclose(f);
        return tw_merr(err, errlen, TWELL_ERR_NO_MEMORY, "out of memory reading %s", path);
    }
    size_t n = fread(buf, 1, TW_MODEL_FILE_MAX + 1, f);
    int bad = ferror(f);
    fclose(f);
    twell_status st;
    if (bad)
        st = tw_merr(err, errlen, TWELL_ERR_IO, "cannot read %s", path);
    else if (n > TW_MODEL_FILE_MAX)
        st = tw_merr(err, errlen, TWELL_ERR_IO, "%s is larger than %zu MiB: not a config.json",
                     path, TW_MODEL_FILE_MAX >> 20);
    else {
        char inner[400];
        st = tw_model_config_parse(buf, n, out, inner, sizeof inner);
        if (st != TWELL_OK)
            tw_merr(err, errlen, st, "%s: %s", path, inner);
    }
    free(buf);
    return st;
}

twell_status tw_model_config_dtype(const tw_model_config *m, twell_dtype *out, char *err,
                                   size_t errlen) {
    const char *s = m->torch_dtype;
    if (!s[0])
        return tw_merr(err, errlen, TWELL_ERR_NOT_FOUND,
                       "the config names no torch_dtype: pass --dtype bf16 or --dtype fp16");
    if (!strncmp(s, "torch.", 6))
        s += 6;
    if (!strcmp(s, "bfloat16")) {
        *out = TWELL_DTYPE_BF16;
        return TWELL_OK;
    }
    if (!strcmp(s, "float16") || !strcmp(s, "half")) {
        *out = TWELL_DTYPE_FP16;
        return TWELL_OK;
    }
    return tw_merr(err, errlen, TWELL_ERR_UNSUPPORTED,
                   "torch_dtype \"%s\" is not supported: twellrt kernels take bfloat16 or float16 "
                   "(pass --dtype bf16 or --dtype fp16 to tune for the type you will run)",
                   m->torch_dtype);
}
