/* test_fault.c — allocation-failure loops (as SQLite's): for each operation, make allocation number
 * n fail for n = 1, 2, … until the operation succeeds; each failure must return a clean status
 * (TWELL_ERR_NO_MEMORY, or the layer's own error naming memory), leave no leak, write no output,
 * and leave the handles it was given working (the same call, unarmed, then gives the reference
 * result bit for bit).
 * The binary is linked with --wrap for malloc, calloc, realloc and free (the "wrap:" line below),
 * so every allocation the library's objects make goes through tf_* here; libc's own internal
 * allocations (inside fopen, pthread_create, ...) are not seen, which is what we want.
 * labels: unit
 * wrap: malloc calloc realloc free */
#include "cache.h"
#include "internal.h"
#include "jit.h"
#include "json.h"
#include "synth.h"
#include "twellrt.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

/* ---- the allocator shim ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t a, size_t b);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);

enum { TF_SLOTS = 1 << 16 };
static pthread_mutex_t tf_lock = PTHREAD_MUTEX_INITIALIZER;
static long tf_count;   /* allocations seen while armed */
static long tf_fail_at; /* 0: never fail; else the allocation number that fails */
static int tf_fired;    /* the armed failure happened */
static int tf_tracking; /* record live blocks */
static void *tf_live[TF_SLOTS];
static long tf_nlive;
static int tf_overflow; /* the table filled up: leak counts are not trustworthy */

static size_t tf_hash(const void *p) {
    uintptr_t v = (uintptr_t)p >> 4;
    return (size_t)((v * 0x9E3779B97F4A7C15ull) >> 48) & (TF_SLOTS - 1);
}

/* Both under tf_lock. A block freed but never tracked (allocated before tracking started, or by
 * libc) is simply not found. Deletion by backward shift keeps probe chains intact. */
static void tf_add(void *p) {
    if (!tf_tracking || !p)
        return;
    if (tf_nlive >= TF_SLOTS / 2) {
        tf_overflow = 1;
        return;
    }
    size_t i = tf_hash(p);
    while (tf_live[i])
        i = (i + 1) & (TF_SLOTS - 1);
    tf_live[i] = p;
    tf_nlive++;
}

static void tf_del(void *p) {
    if (!p || tf_nlive == 0)
        return;
    size_t i = tf_hash(p);
    while (tf_live[i] && tf_live[i] != p)
        i = (i + 1) & (TF_SLOTS - 1);
    if (!tf_live[i])
        return;
    tf_live[i] = NULL;
    tf_nlive--;
    for (size_t j = (i + 1) & (TF_SLOTS - 1); tf_live[j]; j = (j + 1) & (TF_SLOTS - 1)) {
        size_t h = tf_hash(tf_live[j]);
        /* move j back to i when its home slot does not lie cyclically in (i, j] */
        int home_between = (i <= j) ? (h > i && h <= j) : (h > i || h <= j);
        if (!home_between) {
            tf_live[i] = tf_live[j];
            tf_live[j] = NULL;
            i = j;
        }
    }
}

/* Called at each injected failure: `break tf_failing` in gdb shows who allocated. */
void tf_failing(long n);
__attribute__((noinline)) void tf_failing(long n) { __asm__ volatile("" ::"r"(n) : "memory"); }

static int tf_should_fail(void) {
    if (tf_fail_at == 0)
        return 0;
    if (++tf_count == tf_fail_at) {
        tf_fired = 1;
        tf_failing(tf_count);
        return 1;
    }
    return 0;
}

void *__wrap_malloc(size_t n) {
    pthread_mutex_lock(&tf_lock);
    void *p = tf_should_fail() ? NULL : __real_malloc(n);
    tf_add(p);
    pthread_mutex_unlock(&tf_lock);
    return p;
}

void *__wrap_calloc(size_t a, size_t b) {
    pthread_mutex_lock(&tf_lock);
    void *p = tf_should_fail() ? NULL : __real_calloc(a, b);
    tf_add(p);
    pthread_mutex_unlock(&tf_lock);
    return p;
}

void *__wrap_realloc(void *p, size_t n) {
    pthread_mutex_lock(&tf_lock);
    void *q = NULL;
    if (n == 0 || !tf_should_fail()) {
        q = __real_realloc(p, n);
        if (q || n == 0) {
            tf_del(p);
            tf_add(q);
        }
    }
    pthread_mutex_unlock(&tf_lock);
    return q;
}

void __wrap_free(void *p) {
    pthread_mutex_lock(&tf_lock);
    tf_del(p);
    __real_free(p);
    pthread_mutex_unlock(&tf_lock);
}

/* Starts a run in which allocation number n fails (0: none) and live blocks are recorded. */
static void tf_arm(long n) {
    pthread_mutex_lock(&tf_lock);
    tf_count = 0;
    tf_fail_at = n;
    tf_fired = 0;
    tf_tracking = 1;
    pthread_mutex_unlock(&tf_lock);
}

/* Stops failing (blocks stay recorded until tf_leaks). */
static void tf_disarm(void) {
    pthread_mutex_lock(&tf_lock);
    tf_fail_at = 0;
    pthread_mutex_unlock(&tf_lock);
}

/* Blocks allocated since tf_arm and still live; clears the record. */
static long tf_leaks(void) {
    pthread_mutex_lock(&tf_lock);
    long n = tf_nlive;
    assert_false(tf_overflow);
    if (n && getenv("TF_DEBUG"))
        for (size_t i = 0; i < TF_SLOTS; i++)
            if (tf_live[i])
                fprintf(stderr, "leaked %p: \"%.40s\"\n", tf_live[i], (const char *)tf_live[i]);
    memset(tf_live, 0, sizeof tf_live);
    tf_nlive = 0;
    tf_tracking = 0;
    pthread_mutex_unlock(&tf_lock);
    return n;
}

/* ---- the loop ---- */

typedef struct tf_case tf_case;
struct tf_case {
    const char *name;
    /* Runs the operation once; returns its status. May leave results in the case's buffers. */
    twell_status (*run)(tf_case *c);
    /* After a failure: the outputs still hold what was there before (NULL: nothing to check). */
    int (*untouched)(tf_case *c);
    /* After a success: the outputs equal the reference (NULL: nothing to check). */
    int (*correct)(tf_case *c);
    void *user;
    twell_ctx *msg_ctx; /* where the failure's message is read, or NULL */
};

/* Fails allocation 1, 2, … until the case succeeds; returns the number of failures injected. */
static long tf_loop(tf_case *c) {
    long failures = 0;
    for (long n = 1; n < 100000; n++) {
        tf_arm(n);
        twell_status st = c->run(c);
        tf_disarm();
        int fired = tf_fired;
        /* judge the result first: correct() releases what a successful run returned */
        int ok_result = st != TWELL_OK || !c->correct || c->correct(c);
        if (c->msg_ctx) { /* the context owns its last message: not a leak */
            pthread_mutex_lock(&tf_lock);
            tf_del(c->msg_ctx->errmsg);
            pthread_mutex_unlock(&tf_lock);
        }
        long leaks = tf_leaks();
        if (leaks)
            fail_msg("%s: allocation %ld failed (%s): %ld blocks leaked", c->name, n,
                     fired ? "injected" : "none injected", leaks);
        if (!fired) {
            if (st != TWELL_OK)
                fail_msg("%s: no failure injected at %ld but status %s (%s)", c->name, n,
                         twell_status_name(st), c->msg_ctx ? twell_ctx_errmsg(c->msg_ctx) : "");
            if (!ok_result)
                fail_msg("%s: result differs from the reference after %ld failed runs", c->name,
                         failures);
            print_message("%s: %ld allocation failures injected, each clean; run %ld succeeded\n",
                          c->name, failures, n);
            return failures;
        }
        failures++;
        if (st == TWELL_OK) {
            /* A failure the library absorbed (a cache that degrades, a retried path): fine only if
             * the result is still right. */
            if (!ok_result)
                fail_msg("%s: allocation %ld failed, status OK, but the result is wrong", c->name,
                         n);
            continue;
        }
        if (st != TWELL_ERR_NO_MEMORY)
            fail_msg("%s: allocation %ld failed: status %s (%s), expected TWELL_ERR_NO_MEMORY",
                     c->name, n, twell_status_name(st),
                     c->msg_ctx ? twell_ctx_errmsg(c->msg_ctx) : "");
        if (c->untouched && !c->untouched(c))
            fail_msg("%s: allocation %ld failed and an output was written", c->name, n);
    }
    fail_msg("%s: still failing after 100000 allocations", c->name);
    return failures;
}

/* ---- fixture: small CPU problem with reference results ---- */

enum { TF_M = 37, TF_K = 64, TF_N = 256 };
enum { TF_X = TF_M * TF_K, TF_W = TF_N * TF_K };
static const unsigned char TF_POISON = 0x5a;

typedef struct {
    twell_ctx *ctx;
    twell_plan *plan;
    tw_synth_ffn *f;
    uint16_t dy[TF_X];
    size_t pbytes;
    uint32_t *packed, *packed_ref;
    uint16_t y[TF_X], y_ref[TF_X];        /* inference */
    uint16_t ty[TF_X], ty_ref[TF_X];      /* training forward */
    uint16_t dx[TF_X], dx_ref[TF_X];      /* training backward */
    float dw[3 * TF_W], dw_ref[3 * TF_W]; /* dWg, dWu, dWd back to back */
    float stats[2], stats_ref[2];
    char dir[512];
} tf_fix;

static int tf_poisoned(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != TF_POISON)
            return 0;
    return 1;
}

static twell_status tf_train_step(tf_fix *t, uint16_t *y, float *stats, uint16_t *dx, float *dw) {
    twell_train_state *s = NULL;
    twell_status st = twell_train_state_create(t->plan, &s);
    if (st == TWELL_OK)
        st = twell_ffn_forward_train(t->plan, TF_M, t->f->x, t->f->wg, t->f->wu, t->f->wd, y, stats,
                                     s, NULL);
    if (st == TWELL_OK)
        st = twell_ffn_backward(t->plan, s, TF_M, t->f->x, t->f->wg, t->f->wu, t->f->wd, t->dy,
                                1e-3f, dx, dw, dw + TF_W, dw + 2 * TF_W, NULL);
    twell_train_state_destroy(s);
    return st;
}

static int tf_setup(void **state) {
    tf_fix *t = calloc(1, sizeof *t);
    assert_non_null(t);
    char parent[400];
    snprintf(parent, sizeof parent, "%s/test-cache", TWELL_TEST_BINARY_DIR);
    (void)mkdir(parent, 0700);
    snprintf(t->dir, sizeof t->dir, "%s/test_fault-XXXXXX", parent);
    assert_non_null(mkdtemp(t->dir));
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 2; /* worker threads allocate too */
    o.cache_dir = t->dir;
    assert_int_equal(twell_ctx_create(&o, &t->ctx), TWELL_OK);
    twell_shape s;
    twell_shape_init(&s, TF_K, TF_N);
    s.T = 64; /* C = 8: 7 slots per row-tile, so the heavy rows' tiles overflow */
    assert_int_equal(twell_plan_create(t->ctx, &s, &t->plan), TWELL_OK);
    tw_synth_params p = tw_synth_params_default();
    p.M = TF_M;
    p.K = TF_K;
    p.N = TF_N;
    p.nnz = 12;
    p.dist = TW_SYNTH_SKEWED;
    p.heavy_frac = 0.1;
    p.seq_len = 16;
    assert_int_equal(tw_synth_create(NULL, &p, &t->f), TWELL_OK);
    for (size_t i = 0; i < TF_X; i++)
        t->dy[i] = t->f->x[(i * 5 + 3) % TF_X];
    t->pbytes = twell_packed_bytes(&s, TF_M);
    t->packed = malloc(t->pbytes);
    t->packed_ref = malloc(t->pbytes);
    assert_non_null(t->packed);
    assert_non_null(t->packed_ref);
    /* references, unarmed */
    assert_int_equal(twell_gate_pack(t->plan, TF_M, t->f->x, t->f->wg, t->packed_ref, NULL),
                     TWELL_OK);
    tw_synth_stats ss;
    tw_synth_packed_stats(&s, TF_M, t->packed_ref, &ss);
    assert_true(ss.overflow_tiles > 0); /* the exact-recompute path is exercised */
    assert_int_equal(twell_ffn_infer(t->plan, TF_M, t->f->x, t->packed_ref, t->f->wg, t->f->wu,
                                     t->f->wd, t->y_ref, NULL),
                     TWELL_OK);
    assert_int_equal(tf_train_step(t, t->ty_ref, t->stats_ref, t->dx_ref, t->dw_ref), TWELL_OK);
    *state = t;
    return 0;
}

static int tf_teardown(void **state) {
    tf_fix *t = *state;
    twell_plan_destroy(t->plan);
    twell_ctx_destroy(t->ctx);
    tw_synth_destroy(t->f);
    free(t->packed);
    free(t->packed_ref);
    free(t);
    return 0;
}

/* ---- cases ---- */

/* Context with a disk cache and worker threads, created and destroyed. */
static twell_status tf_run_ctx(tf_case *c) {
    tf_fix *t = c->user;
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 2;
    o.cache_dir = t->dir;
    twell_ctx *ctx = (twell_ctx *)(uintptr_t)1;
    twell_status st = twell_ctx_create(&o, &ctx);
    if (st != TWELL_OK && ctx != NULL)
        return TWELL_ERR_INTERNAL; /* the contract: *out NULL on failure */
    twell_ctx_destroy(ctx);
    return st;
}

static void test_fault_ctx_create(void **state) {
    tf_case c = {.name = "twell_ctx_create", .run = tf_run_ctx, .user = *state};
    assert_true(tf_loop(&c) >= 2);
}

/* Plans (gated and non-gated) on a working context. */
static twell_status tf_run_plan(tf_case *c) {
    tf_fix *t = c->user;
    twell_shape s;
    twell_shape_init(&s, TF_K, TF_N);
    twell_status st = TWELL_OK;
    for (int gated = 1; gated >= 0 && st == TWELL_OK; gated--) {
        s.gated = gated;
        twell_plan *plan = (twell_plan *)(uintptr_t)1;
        st = twell_plan_create(t->ctx, &s, &plan);
        if (st != TWELL_OK && plan != NULL)
            return TWELL_ERR_INTERNAL;
        twell_plan_destroy(plan);
    }
    return st;
}

static void test_fault_plan_create(void **state) {
    tf_fix *t = *state;
    tf_case c = {.name = "twell_plan_create", .run = tf_run_plan, .user = t, .msg_ctx = t->ctx};
    tf_loop(&c); /* a CPU plan may allocate nothing beyond its handle: no minimum */
    twell_plan *plan = NULL;
    twell_shape s;
    twell_shape_init(&s, TF_K, TF_N);
    assert_int_equal(twell_plan_create(t->ctx, &s, &plan), TWELL_OK); /* the ctx still works */
    twell_plan_destroy(plan);
}

static twell_status tf_run_gate_pack(tf_case *c) {
    tf_fix *t = c->user;
    memset(t->packed, TF_POISON, t->pbytes);
    return twell_gate_pack(t->plan, TF_M, t->f->x, t->f->wg, t->packed, NULL);
}
static int tf_gate_pack_untouched(tf_case *c) {
    tf_fix *t = c->user;
    return tf_poisoned(t->packed, t->pbytes);
}
static int tf_gate_pack_correct(tf_case *c) {
    tf_fix *t = c->user;
    return memcmp(t->packed, t->packed_ref, t->pbytes) == 0;
}

static void test_fault_gate_pack(void **state) {
    tf_fix *t = *state;
    tf_case c = {.name = "twell_gate_pack",
                 .run = tf_run_gate_pack,
                 .untouched = tf_gate_pack_untouched,
                 .correct = tf_gate_pack_correct,
                 .user = t,
                 .msg_ctx = t->ctx};
    tf_loop(&c);
}

static twell_status tf_run_infer(tf_case *c) {
    tf_fix *t = c->user;
    memset(t->y, TF_POISON, sizeof t->y);
    return twell_ffn_infer(t->plan, TF_M, t->f->x, t->packed_ref, t->f->wg, t->f->wu, t->f->wd,
                           t->y, NULL);
}
static int tf_infer_untouched(tf_case *c) {
    tf_fix *t = c->user;
    return tf_poisoned(t->y, sizeof t->y);
}
static int tf_infer_correct(tf_case *c) {
    tf_fix *t = c->user;
    return memcmp(t->y, t->y_ref, sizeof t->y) == 0;
}

static void test_fault_ffn_infer(void **state) {
    tf_fix *t = *state;
    tf_case c = {.name = "twell_ffn_infer",
                 .run = tf_run_infer,
                 .untouched = tf_infer_untouched,
                 .correct = tf_infer_correct,
                 .user = t,
                 .msg_ctx = t->ctx};
    tf_loop(&c);
}

/* State create + forward + backward + destroy. A failure part-way may leave earlier outputs of
 * the step written (the forward's y before the backward fails), so "untouched" is checked per op
 * by the public contract only where the failing op is known: here the final outputs of the step
 * that never ran must still be poisoned. */
static twell_status tf_run_train(tf_case *c) {
    tf_fix *t = c->user;
    memset(t->ty, TF_POISON, sizeof t->ty);
    memset(t->dx, TF_POISON, sizeof t->dx);
    memset(t->dw, TF_POISON, sizeof t->dw);
    memset(t->stats, TF_POISON, sizeof t->stats);
    return tf_train_step(t, t->ty, t->stats, t->dx, t->dw);
}
static int tf_train_untouched(tf_case *c) {
    tf_fix *t = c->user;
    int fwd_done = !tf_poisoned(t->ty, sizeof t->ty);
    if (!fwd_done) /* failed in create or forward: nothing written at all */
        return tf_poisoned(t->stats, sizeof t->stats) && tf_poisoned(t->dx, sizeof t->dx) &&
               tf_poisoned(t->dw, sizeof t->dw);
    /* the forward completed: its outputs are right, the backward wrote nothing */
    return memcmp(t->ty, t->ty_ref, sizeof t->ty) == 0 &&
           memcmp(t->stats, t->stats_ref, sizeof t->stats) == 0 &&
           tf_poisoned(t->dx, sizeof t->dx) && tf_poisoned(t->dw, sizeof t->dw);
}
static int tf_train_correct(tf_case *c) {
    tf_fix *t = c->user;
    return memcmp(t->ty, t->ty_ref, sizeof t->ty) == 0 &&
           memcmp(t->stats, t->stats_ref, sizeof t->stats) == 0 &&
           memcmp(t->dx, t->dx_ref, sizeof t->dx) == 0 &&
           memcmp(t->dw, t->dw_ref, sizeof t->dw) == 0;
}

static void test_fault_train(void **state) {
    tf_fix *t = *state;
    tf_case c = {.name = "training step",
                 .run = tf_run_train,
                 .untouched = tf_train_untouched,
                 .correct = tf_train_correct,
                 .user = t,
                 .msg_ctx = t->ctx};
    assert_true(tf_loop(&c) >= 1);
}

/* Template rendering: a fresh sandboxed Lua state per render, with its own allocator. */
typedef struct {
    tf_fix *t;
    char *src;
    size_t len;
    char *ref;
    size_t ref_len;
} tf_render_case;

static twell_status tf_run_render(tf_case *c) {
    tf_render_case *r = c->user;
    static const tw_param params[] = {{"K", NULL, 2048},
                                      {"N", NULL, 5632},
                                      {"T", NULL, 256},
                                      {"C", NULL, 8},
                                      {"dtype", "bf16", 0}};
    r->src = NULL;
    twell_status st = tw_render(r->t->ctx, "gate_pack_simt", params,
                                sizeof params / sizeof params[0], &r->src, &r->len);
    if (st == TWELL_ERR_TEMPLATE && strstr(twell_ctx_errmsg(r->t->ctx), "memory"))
        st = TWELL_ERR_NO_MEMORY; /* Lua reports its allocation failures as "not enough memory" */
    if (st != TWELL_OK && r->src)
        return TWELL_ERR_INTERNAL;
    return st;
}
static int tf_render_correct(tf_case *c) {
    tf_render_case *r = c->user;
    int same = r->len == r->ref_len && memcmp(r->src, r->ref, r->len) == 0;
    free(r->src);
    r->src = NULL;
    return same;
}

static void test_fault_render(void **state) {
    tf_render_case r = {.t = *state};
    static const tw_param params[] = {{"K", NULL, 2048},
                                      {"N", NULL, 5632},
                                      {"T", NULL, 256},
                                      {"C", NULL, 8},
                                      {"dtype", "bf16", 0}};
    assert_int_equal(tw_render(r.t->ctx, "gate_pack_simt", params, 5, &r.ref, &r.ref_len),
                     TWELL_OK);
    tf_case c = {.name = "tw_render",
                 .run = tf_run_render,
                 .correct = tf_render_correct,
                 .user = &r,
                 .msg_ctx = r.t->ctx};
    assert_true(tf_loop(&c) >= 10);
    free(r.ref);
}

/* Disk cache: open, put, get back, close. */
static twell_status tf_run_cache(tf_case *c) {
    tf_fix *t = c->user;
    tw_cache *cache = NULL;
    twell_status st = tw_cache_open(t->dir, 0, NULL, NULL, &cache);
    if (st != TWELL_OK)
        return st;
    tw_key key;
    memset(&key, 0x3c, sizeof key);
    static const char payload[] = "a cubin stands here";
    st = tw_cache_put(cache, TW_CACHE_CUBIN, &key, payload, sizeof payload);
    void *got = NULL;
    size_t len = 0;
    if (st == TWELL_OK)
        st = tw_cache_get(cache, TW_CACHE_CUBIN, &key, &got, &len);
    if (st == TWELL_OK && (len != sizeof payload || memcmp(got, payload, len) != 0))
        st = TWELL_ERR_INTERNAL;
    free(got);
    tw_cache_close(cache);
    return st;
}

static void test_fault_cache(void **state) {
    tf_case c = {.name = "disk cache", .run = tf_run_cache, .user = *state};
    assert_true(tf_loop(&c) >= 2);
}

/* A model's config.json (the prewarm tool reads it): nested objects, arrays, strings. */
static twell_status tf_run_model_config(tf_case *c) {
    (void)c;
    static const char text[] =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
        "\"rope_scaling\": {\"factor\": 8.0, \"type\": \"llama3\"}, "
        "\"text_config\": {\"unused\": [1, 2, 3, {\"a\": null}]}, "
        "\"hidden_size\": 2048, \"intermediate_size\": 5632, \"num_hidden_layers\": 22, "
        "\"hidden_act\": \"silu\", \"torch_dtype\": \"bfloat16\"}";
    tw_model_config m;
    char err[256];
    twell_status st = tw_model_config_parse(text, sizeof text - 1, &m, err, sizeof err);
    if (st == TWELL_OK && (m.hidden_size != 2048 || m.intermediate_size != 5632 ||
                           m.num_layers != 22 || strcmp(m.torch_dtype, "bfloat16") != 0))
        return TWELL_ERR_INTERNAL;
    if (st != TWELL_OK && (m.hidden_size != 0 || m.intermediate_size != 0))
        return TWELL_ERR_INTERNAL; /* *out zeroed on failure */
    return st;
}

static void test_fault_model_config(void **state) {
    tf_case c = {.name = "tw_model_config_parse", .run = tf_run_model_config, .user = *state};
    assert_true(tf_loop(&c) >= 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fault_ctx_create), cmocka_unit_test(test_fault_plan_create),
        cmocka_unit_test(test_fault_gate_pack),  cmocka_unit_test(test_fault_ffn_infer),
        cmocka_unit_test(test_fault_train),      cmocka_unit_test(test_fault_render),
        cmocka_unit_test(test_fault_cache),      cmocka_unit_test(test_fault_model_config),
    };
    return cmocka_run_group_tests(tests, tf_setup, tf_teardown);
}
