/* test_gate_pack_cfg.c — the gate-pack launchers' configurations agree with the tuner's spaces
 * and with the templates, without a GPU: defaults equal, every kept candidate accepted by the
 * launcher's check and rendered by its template, the launcher's shared-memory formula equal to
 * the one the sm90 template prints, and configs the device cannot hold refused by both.
 * labels: unit */
#include "candidates.h"
#include "cuda_gate_pack_tiled.h"
#include "jit.h"
#include "tune_registry.h"
#include "twellrt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static twell_ctx *cf_ctx;

/* An H200 as the launcher sees it (runtime/cuda/cuda_driver.h), matching the "h200" preset. */
static tw_cuda cf_h200(void) {
    tw_cuda d;
    memset(&d, 0, sizeof d);
    d.cc_major = 9;
    d.sm_count = 132;
    d.smem_optin = 232448;
    d.l2_bytes = 60 << 20;
    snprintf(d.arch, sizeof d.arch, "sm_90a");
    snprintf(d.name, sizeof d.name, "NVIDIA H200");
    return d;
}

static void cf_canon(const tw_gp_cfg *c, char *buf, size_t n) {
    if (c->variant == TW_GP_SM90)
        snprintf(buf, n, "gate_pack_sm90:BK=%u,STAGES=%u,CLUSTER=%u", c->bk, c->stages, c->cluster);
    else
        snprintf(buf, n, "gate_pack_simt:BM=%u,THREADS=%u", c->bm, c->threads);
}

/* The plans' untuned configs are the spaces' defaults (so "tuned vs default" compares with what
 * a plan runs without a record). */
static void test_gate_pack_cfg_defaults_match_spaces(void **state) {
    (void)state;
    static const char *const kernels[] = {"gate_pack_sm90", "gate_pack_simt"};
    static const tw_gp_variant variants[] = {TW_GP_SM90, TW_GP_SIMT};
    for (size_t i = 0; i < 2; i++) {
        const tw_tune_space *sp = tw_tune_space_by_kernel(kernels[i]);
        assert_non_null(sp);
        tw_tune_config d;
        tw_tune_space_default(sp, &d);
        tw_gp_cfg c, want = tw_gp_cfg_default(variants[i]);
        assert_int_equal(tw_gp_cfg_from_tune(&d, &c), 0);
        char a[96], b[TW_TUNE_CANON_MAX];
        cf_canon(&c, a, sizeof a);
        tw_tune_config_canon(&d, b, sizeof b);
        assert_string_equal(a, b);
        cf_canon(&want, a, sizeof a);
        assert_string_equal(a, b);
        assert_string_equal(tw_gp_cfg_kernel(&c), kernels[i]);
    }
    tw_tune_config other;
    assert_int_equal(tw_tune_config_parse("ffn_fused:THREADS=256,ROWS=8,UNROLL=4", &other),
                     TWELL_OK);
    tw_gp_cfg c;
    assert_int_equal(tw_gp_cfg_from_tune(&other, &c), -1);
    assert_int_equal(tw_tune_config_parse("gate_pack_sm90:BK=0,STAGES=3,CLUSTER=2", &other),
                     TWELL_OK);
    assert_int_equal(tw_gp_cfg_from_tune(&other, &c), -1);
}

/* The "// twell_gate_pack_sm90 smem=<bytes>" line of the rendered source. */
static long cf_rendered_smem(const twell_shape *s, const tw_gp_cfg *c, twell_status *st) {
    tw_param prm[] = {
        {"K", NULL, s->K},           {"N", NULL, s->N},
        {"T", NULL, s->T},           {"C", NULL, s->C},
        {"dtype", "bf16", 0},        {"BK", NULL, c->bk},
        {"STAGES", NULL, c->stages}, {"CLUSTER", NULL, c->cluster},
    };
    char *src = NULL;
    size_t len = 0;
    *st = tw_render(cf_ctx, "gate_pack_sm90", prm, sizeof prm / sizeof prm[0], &src, &len);
    if (*st != TWELL_OK)
        return -1;
    const char *p = strstr(src, "// twell_gate_pack_sm90 smem=");
    long v = p ? strtol(p + strlen("// twell_gate_pack_sm90 smem="), NULL, 10) : -2;
    free(src);
    return v;
}

/* Over the whole parameter range the template accepts: the launcher's smem equals the
 * template's, and the launcher refuses exactly the configs the template or the device cannot
 * take. */
static void test_gate_pack_cfg_sm90_smem_matches_template(void **state) {
    (void)state;
    tw_cuda dev = cf_h200();
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    static const unsigned bks[] = {32, 64}, clusters[] = {1, 2, 4};
    size_t rendered = 0, refused = 0;
    for (size_t b = 0; b < 2; b++)
        for (unsigned stages = 2; stages <= 8; stages++)
            for (size_t cl = 0; cl < 3; cl++) {
                tw_gp_cfg c = tw_gp_cfg_default(TW_GP_SM90);
                c.bk = bks[b], c.stages = stages, c.cluster = clusters[cl];
                twell_status st;
                long smem = cf_rendered_smem(&s, &c, &st);
                char why[192] = "";
                int ok = tw_gp_cfg_check(&c, &s, &dev, why, sizeof why) == 0;
                if (st == TWELL_OK) {
                    rendered++;
                    if (smem != (long)tw_sm90_smem(&c))
                        fail_msg("BK=%u STAGES=%u: template smem %ld, launcher %u", c.bk, stages,
                                 smem, tw_sm90_smem(&c));
                    if (!ok)
                        fail_msg("BK=%u STAGES=%u CLUSTER=%u renders but is refused: %s", c.bk,
                                 stages, c.cluster, why);
                } else {
                    refused++;
                    if (ok)
                        fail_msg("BK=%u STAGES=%u CLUSTER=%u does not render (%s) but is accepted",
                                 c.bk, stages, c.cluster, twell_status_name(st));
                    assert_non_null(strstr(why, "shared memory"));
                }
            }
    printf("# sm90: %zu configs rendered and accepted, %zu refused by both\n", rendered, refused);
    assert_true(rendered > 0 && refused > 0);
    /* Not a configuration of the kernel at all, and the wrong device. */
    tw_gp_cfg c = tw_gp_cfg_default(TW_GP_SM90);
    c.cluster = 3;
    assert_int_equal(tw_gp_cfg_check(&c, &s, &dev, NULL, 0), -1);
    c = tw_gp_cfg_default(TW_GP_SM90);
    snprintf(dev.arch, sizeof dev.arch, "sm_80");
    assert_int_equal(tw_gp_cfg_check(&c, &s, &dev, NULL, 0), -1);
    assert_int_equal(tw_sm90_gate_pack_supports(&s, &dev), 0);
    dev = cf_h200();
    assert_int_equal(tw_sm90_gate_pack_supports(&s, &dev), 1);
}

/* The sm90 space supports exactly the shapes plans run the sm90 kernel on (T = 64 included),
 * so whatever a plan runs can be tuned, and a record is never made for a shape plans run on
 * SIMT. */
static void test_gate_pack_cfg_sm90_space_matches_plans(void **state) {
    (void)state;
    tw_tune_device d;
    assert_int_equal(tw_tune_device_preset("h200", &d), 0);
    tw_cuda dev = cf_h200();
    const tw_tune_space *sp = tw_tune_space_by_kernel("gate_pack_sm90");
    static const uint32_t Ks[] = {64, 576, 2048, 48, 100};
    static const uint32_t Ns[] = {256, 1280, 5632, 5760, 4160, 65536, 65600};
    static const uint32_t Ts[] = {32, 64, 128, 256};
    static const uint32_t Cs[] = {2, 4, 8};
    size_t both = 0, neither = 0;
    for (size_t k = 0; k < 5; k++)
        for (size_t n = 0; n < 7; n++)
            for (size_t t = 0; t < 4; t++)
                for (size_t c = 0; c < 3; c++) {
                    tw_tune_problem p;
                    memset(&p, 0, sizeof p);
                    snprintf(p.op, sizeof p.op, "gate_pack");
                    twell_shape_init(&p.shape, Ks[k], Ns[n]);
                    p.shape.T = Ts[t];
                    p.shape.C = Cs[c];
                    p.M = 4096;
                    int space = sp->supports(&p, &d),
                        plan = tw_sm90_gate_pack_supports(&p.shape, &dev);
                    if (space != plan)
                        fail_msg("K=%u N=%u T=%u C=%u: space %d, plans %d", Ks[k], Ns[n], Ts[t],
                                 Cs[c], space, plan);
                    both += space != 0, neither += space == 0;
                }
    printf("# sm90: %zu shapes supported by both, %zu by neither\n", both, neither);
    assert_true(both > 20 && neither > 20);
}

/* Every candidate the tuner keeps, for both spaces and a few shapes and M buckets, is accepted
 * by the launcher and renders; a space's pruned-for-smem configs are refused by the launcher. */
static void test_gate_pack_cfg_space_candidates_launchable(void **state) {
    (void)state;
    tw_tune_device d;
    assert_int_equal(tw_tune_device_preset("h200", &d), 0);
    tw_cuda dev = cf_h200();
    static const uint32_t shapes[][3] = {{2048, 5632, 256}, {1024, 4096, 128}, {576, 1280, 128}};
    static const size_t Ms[] = {1, 256, 4096};
    static const char *const kernels[] = {"gate_pack_sm90", "gate_pack_simt"};
    size_t checked = 0;
    for (size_t k = 0; k < 2; k++) {
        const tw_tune_space *sp = tw_tune_space_by_kernel(kernels[k]);
        for (size_t i = 0; i < 3; i++)
            for (size_t m = 0; m < 3; m++) {
                tw_tune_problem p;
                memset(&p, 0, sizeof p);
                snprintf(p.op, sizeof p.op, "gate_pack");
                twell_shape_init(&p.shape, shapes[i][0], shapes[i][1]);
                p.shape.T = shapes[i][2];
                p.shape.C = 4;
                p.M = Ms[m];
                if (sp->supports && !sp->supports(&p, &d))
                    continue;
                tw_tune_config *c = NULL;
                size_t n = 0;
                assert_int_equal(tw_tune_space_enumerate(sp, &p, &d, &c, &n, NULL, NULL), TWELL_OK);
                for (size_t j = 0; j < n; j++) {
                    tw_gp_cfg g;
                    char why[192] = "", canon[TW_TUNE_CANON_MAX];
                    tw_tune_config_canon(&c[j], canon, sizeof canon);
                    if (tw_gp_cfg_from_tune(&c[j], &g) != 0 ||
                        tw_gp_cfg_check(&g, &p.shape, &dev, why, sizeof why) != 0)
                        fail_msg("kept candidate %s refused by the launcher: %s", canon, why);
                    tw_param prm[5 + TW_TUNE_MAX_PARAMS];
                    size_t np = tw_tune_config_params(&c[j], &p.shape, prm, 5 + TW_TUNE_MAX_PARAMS);
                    char *src = NULL;
                    size_t len = 0;
                    twell_status st = tw_render(cf_ctx, c[j].kernel, prm, np, &src, &len);
                    if (st != TWELL_OK)
                        fail_msg("kept candidate %s does not render: %s", canon,
                                 twell_ctx_errmsg(cf_ctx));
                    free(src);
                    checked++;
                }
                free(c);
            }
    }
    printf("# %zu kept candidates accepted and rendered\n", checked);
    assert_true(checked > 40);
}

int main(void) {
    twell_ctx_options o;
    twell_ctx_options_init(&o);
    o.backend = TWELL_BACKEND_CPU;
    o.cpu_threads = 1;
    if (twell_ctx_create(&o, &cf_ctx) != TWELL_OK)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gate_pack_cfg_defaults_match_spaces),
        cmocka_unit_test(test_gate_pack_cfg_sm90_smem_matches_template),
        cmocka_unit_test(test_gate_pack_cfg_sm90_space_matches_plans),
        cmocka_unit_test(test_gate_pack_cfg_space_candidates_launchable),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    twell_ctx_destroy(cf_ctx);
    return rc;
}
