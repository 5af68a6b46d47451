/* test_dense_templates.c — the dense path's templates against their launcher without a GPU: the
 * shared memory gemm_sm90 declares (first line of its source) equals what
 * runtime/ops/ffn/heavy/dense_gemm_sm90.c gives it, in every MODE and in the split-K (SPLIT = 1)
 * and MN-major Wd (TB = 1) variants the launcher renders; shapes the kernels cannot take are
 * rejected as unsupported, not as template errors; parameter combinations no launcher uses are
 * template errors; the expanding code exists only where it is used. labels: unit */
#include "jit.h"
#include "twellrt.h"
#include "twellrt_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static twell_ctx *td_ctx;

static int td_setup(void **state) {
    (void)state;
    setenv("TWELL_TEMPLATE_DIR", TWELL_TEST_SOURCE_DIR "/templates", 1);
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    return twell_ctx_create(&o, &td_ctx) == TWELL_OK ? 0 : -1;
}

static int td_teardown(void **state) {
    (void)state;
    twell_ctx_destroy(td_ctx);
    return 0;
}

/* Renders `name`; mode NULL: no MODE (dense_aux); tb, split, stages < 0: left at the default. */
static twell_status td_render_ex(const char *name, long long K, long long N, long long T,
                                 const char *mode, long long tb, long long split, long long stages,
                                 char **src) {
    tw_param p[9] = {
        {"K", NULL, K}, {"N", NULL, N},       {"T", NULL, T},
        {"C", NULL, 8}, {"dtype", "bf16", 0}, {"MODE", mode, 0},
    };
    size_t n = mode ? 6 : 5;
    if (tb >= 0)
        p[n++] = (tw_param){"TB", NULL, tb};
    if (split >= 0)
        p[n++] = (tw_param){"SPLIT", NULL, split};
    if (stages >= 0)
        p[n++] = (tw_param){"STAGES", NULL, stages};
    size_t len = 0;
    *src = NULL;
    return tw_render(td_ctx, name, p, n, src, &len);
}

/* td_render_ex with the defaults, but MODE plain with TB = 1 (the only B layout it takes). */
static twell_status td_render(const char *name, long long K, long long N, long long T,
                              const char *mode, char **src) {
    long long tb = mode && !strcmp(mode, "plain") ? 1 : -1;
    return td_render_ex(name, K, N, T, mode, tb, -1, -1, src);
}

/* The smem the first line of a gemm_sm90 source declares. */
static unsigned td_smem_of(const char *src) {
    unsigned smem = 0;
    const char *line = strstr(src, "// twell_gemm_sm90 smem=");
    assert_non_null(line);
    assert_int_equal(sscanf(line, "// twell_gemm_sm90 smem=%u", &smem), 1);
    return smem;
}

static void test_dense_templates_smem_matches_launcher(void **state) {
    (void)state;
    const char *modes[] = {"gated", "relu", "plain"};
    for (size_t i = 0; i < 3; i++) {
        char *src = NULL;
        twell_status st = td_render("gemm_sm90", 2048, 5632, 256, modes[i], &src);
        if (st != TWELL_OK)
            fail_msg("render gemm_sm90 MODE=%s: %s", modes[i], twell_ctx_errmsg(td_ctx));
        unsigned smem = 0;
        const char *line = strstr(src, "// twell_gemm_sm90 smem=");
        assert_non_null(line);
        assert_int_equal(sscanf(line, "// twell_gemm_sm90 smem=%u", &smem), 1);
        unsigned launcher = 0;
        assert_int_equal(tw_test_control(TW_TC_DENSE_GEMM_SMEM, &launcher), TWELL_OK);
        printf("# MODE=%s: template smem %u, launcher %u\n", modes[i], smem, launcher);
        assert_int_equal(smem, launcher);
        assert_true(smem <= 232448u);
        /* the gate expansion is compiled in MODE gated only */
        assert_int_equal(strstr(src, "void tw_expand_gate(") != NULL, i == 0);
        free(src);
    }
}

static void test_dense_templates_reject_unsupported_shapes(void **state) {
    (void)state;
    char *src = NULL;
    /* K not a multiple of 64: no 64-column k-blocks */
    assert_int_equal(td_render("gemm_sm90", 80, 512, 256, "plain", &src), TWELL_ERR_UNSUPPORTED);
    assert_int_equal(td_render("dense_aux", 80, 512, 256, NULL, &src), TWELL_ERR_UNSUPPORTED);
    /* output width not a multiple of 64 (the down GEMM's N is the model width) */
    assert_int_equal(td_render("gemm_sm90", 512, 96, 256, "plain", &src), TWELL_ERR_UNSUPPORTED);
    /* a bad MODE is a template error naming it */
    assert_int_equal(td_render("gemm_sm90", 512, 512, 256, "sideways", &src), TWELL_ERR_TEMPLATE);
    assert_non_null(strstr(twell_ctx_errmsg(td_ctx), "MODE"));
    /* the plain GEMM takes any output width that is a multiple of 64, below T as well */
    assert_int_equal(td_render("gemm_sm90", 5632, 64, 256, "plain", &src), TWELL_OK);
    free(src);
}

/* The variants dense_gemm_sm90.c renders besides the plain ones: the down GEMM with Wd MN-major
 * (TB = 1, staging buffer: the launcher's TW_DG_SMEM) and the split-K GEMMs (SPLIT = 1, STAGES 4,
 * no staging buffer: TW_TC_DENSE_SPLIT_GEMM_SMEM). */
static void test_dense_templates_split_and_tb_match_launcher(void **state) {
    (void)state;
    unsigned launcher = 0, launcher_split = 0;
    assert_int_equal(tw_test_control(TW_TC_DENSE_GEMM_SMEM, &launcher), TWELL_OK);
    assert_int_equal(tw_test_control(TW_TC_DENSE_SPLIT_GEMM_SMEM, &launcher_split), TWELL_OK);
    char *src = NULL;
    /* the down GEMM: K = hidden width, N = model width, Wd read MN-major */
    assert_int_equal(td_render_ex("gemm_sm90", 5632, 2048, 256, "plain", 1, 0, 3, &src), TWELL_OK);
    assert_int_equal(td_smem_of(src), launcher);
    assert_non_null(strstr(src, "#define TW_TB 1"));
    free(src);
    const struct {
        const char *mode;
        long long K, N, tb;
    } v[] = {{"gated", 2048, 5632, 0}, {"relu", 2048, 5632, 0}, {"plain", 5632, 2048, 1}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        twell_status st =
            td_render_ex("gemm_sm90", v[i].K, v[i].N, 256, v[i].mode, v[i].tb, 1, 4, &src);
        if (st != TWELL_OK)
            fail_msg("render gemm_sm90 MODE=%s SPLIT=1: %s", v[i].mode, twell_ctx_errmsg(td_ctx));
        unsigned smem = td_smem_of(src);
        printf("# MODE=%s SPLIT=1: template smem %u, launcher %u\n", v[i].mode, smem,
               launcher_split);
        assert_int_equal(smem, launcher_split);
        assert_true(smem <= 232448u);
        assert_non_null(strstr(src, "#define TW_SPLIT 1"));
        /* no epilogue: the expansion of the gate is not compiled in */
        assert_null(strstr(src, "void tw_expand_gate("));
        free(src);
    }
    /* combinations no launcher uses are template errors naming the parameter */
    assert_int_equal(td_render_ex("gemm_sm90", 2048, 5632, 256, "gated", 1, 0, -1, &src),
                     TWELL_ERR_TEMPLATE);
    assert_non_null(strstr(twell_ctx_errmsg(td_ctx), "TB"));
    assert_int_equal(td_render_ex("gemm_sm90", 2048, 5632, 256, "fwd", -1, 1, -1, &src),
                     TWELL_ERR_TEMPLATE);
    assert_non_null(strstr(twell_ctx_errmsg(td_ctx), "SPLIT"));
    assert_int_equal(td_render_ex("gemm_sm90", 2048, 5632, 256, "plain", 1, 2, -1, &src),
                     TWELL_ERR_TEMPLATE);
    /* the down GEMM over a transposed copy of Wd (plain, TB = 0) was removed */
    assert_int_equal(td_render_ex("gemm_sm90", 5632, 2048, 256, "plain", 0, 0, -1, &src),
                     TWELL_ERR_TEMPLATE);
    assert_non_null(strstr(twell_ctx_errmsg(td_ctx), "TB"));
    /* dense_aux keeps the plain reduction (training); the inference dense route's counting,
     * expansion and gated / relu reductions went with the hand-written route */
    assert_int_equal(td_render("dense_aux", 2048, 5632, 256, NULL, &src), TWELL_OK);
    assert_non_null(strstr(src, "twell_dense_reduce_plain("));
    assert_null(strstr(src, "twell_dense_reduce_gated("));
    assert_null(strstr(src, "twell_dense_reduce_relu("));
    assert_null(strstr(src, "twell_dense_count("));
    free(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_templates_smem_matches_launcher),
        cmocka_unit_test(test_dense_templates_split_and_tb_match_launcher),
        cmocka_unit_test(test_dense_templates_reject_unsupported_shapes),
    };
    return cmocka_run_group_tests(tests, td_setup, td_teardown);
}
