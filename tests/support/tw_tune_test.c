/* tw_tune_test.c — the autotuner tests' shared helpers (see tw_tune_test.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tw_tune_test.h"

#include <stdio.h>
#include <string.h>

tw_tune_problem tw_problem(const char *op, uint32_t K, uint32_t N, size_t M) {
    tw_tune_problem p;
    memset(&p, 0, sizeof p);
    snprintf(p.op, sizeof p.op, "%s", op);
    twell_shape_init(&p.shape, K, N);
    p.M = M;
    return p;
}

tw_tune_config tw_cfg2(const char *kernel, const char *a, int64_t va, const char *b, int64_t vb) {
    tw_tune_config c;
    assert_int_equal(tw_tune_config_init(&c, kernel), 0);
    assert_int_equal(tw_tune_config_set(&c, a, va), 0);
    if (b)
        assert_int_equal(tw_tune_config_set(&c, b, vb), 0);
    return c;
}

void tw_assert_canon(const tw_tune_config *c, const char *want) {
    char buf[TW_TUNE_CANON_MAX];
    size_t n = tw_tune_config_canon(c, buf, sizeof buf);
    assert_string_equal(buf, want);
    assert_int_equal(n, strlen(want));
}
