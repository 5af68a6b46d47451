/* test_train_auto.c — the AUTO rule of the training path choice (runtime/ops/train/train_auto.c): a
 * probe (the sparse path's counts decide) on the first forward from min_rows up, then by the latest
 * known density against the threshold with the stay band after a dense step; the sequence the GPU
 * switching test drives, replayed. labels: unit */
#include "cuda_train_dense.h"
#include "train_auto.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define D TWELL_PATH_DENSE
#define S TWELL_PATH_SPARSE
#define A TWELL_PATH_AUTO

static void test_train_auto_first_step(void **st) {
    (void)st;
    /* nothing known: a probe (the sparse path's counts decide) from min_rows up, sparse below */
    assert_int_equal(tw_train_auto_dense(-1.0, A, 1024, 1024, 33.8, 0.8), TW_AUTO_PROBE);
    assert_int_equal(tw_train_auto_dense(-1.0, A, 16384, 1024, 33.8, 0.8), TW_AUTO_PROBE);
    assert_int_equal(tw_train_auto_dense(-1.0, A, 1023, 1024, 33.8, 0.8), TW_AUTO_SPARSE);
    assert_int_equal(tw_train_auto_dense(-1.0, A, 1, 1024, 33.8, 0.8), TW_AUTO_SPARSE);
    /* a dense step whose count has not landed: stays dense */
    assert_int_equal(tw_train_auto_dense(-1.0, D, 4096, 1024, 33.8, 0.8), TW_AUTO_DENSE);
    /* the three outcomes are distinct and sparse is 0 (callers test `== TW_AUTO_DENSE`) */
    assert_int_equal(TW_AUTO_SPARSE, 0);
    assert_true(TW_AUTO_PROBE != TW_AUTO_DENSE && TW_AUTO_PROBE != TW_AUTO_SPARSE);
}

static void test_train_auto_threshold_and_stay(void **st) {
    (void)st;
    double thr = 0.006 * 5632.0; /* the default at N = 5632: 33.8 per row */
    /* after a sparse step: strictly above the threshold */
    assert_int_equal(tw_train_auto_dense(29.0, S, 16384, 1024, thr, 0.8), 0);
    assert_int_equal(tw_train_auto_dense(thr, S, 16384, 1024, thr, 0.8), 0);
    assert_int_equal(tw_train_auto_dense(34.0, S, 16384, 1024, thr, 0.8), 1);
    assert_int_equal(tw_train_auto_dense(1100.0, S, 16384, 1024, thr, 0.8), 1);
    /* after a dense step: stays dense down to `stay` of it */
    assert_int_equal(tw_train_auto_dense(29.0, D, 16384, 1024, thr, 0.8), 1);
    assert_int_equal(tw_train_auto_dense(27.0, D, 16384, 1024, thr, 0.8), 0);
    /* the library's threshold and band at N = 5632 (1.05% of N: 59.1 per row, stay 53.2, the
     * crossover measured with tiled U/dT): a sparse run at 29.3, 45 or 56 per row stays sparse
     * (the sparse step is faster there), at 70 goes dense; a dense run at 50 per row switches
     * back to sparse, at 56 stays dense */
    double lib = TW_TD_DENSITY * 5632.0;
    assert_int_equal(tw_train_auto_dense(29.3, S, 16384, 1024, lib, TW_TD_STAY), 0);
    assert_int_equal(tw_train_auto_dense(45.0, S, 16384, 1024, lib, TW_TD_STAY), 0);
    assert_int_equal(tw_train_auto_dense(56.0, S, 16384, 1024, lib, TW_TD_STAY), 0);
    assert_int_equal(tw_train_auto_dense(70.0, S, 16384, 1024, lib, TW_TD_STAY), 1);
    assert_int_equal(tw_train_auto_dense(50.0, D, 16384, 1024, lib, TW_TD_STAY), 0);
    assert_int_equal(tw_train_auto_dense(56.0, D, 16384, 1024, lib, TW_TD_STAY), 1);
    /* never dense below min_rows, whatever the density */
    assert_int_equal(tw_train_auto_dense(1100.0, D, 512, 1024, thr, 0.8), 0);
    /* the defaults the library uses are sane */
    assert_true(TW_TD_DENSITY > 0.0 && TW_TD_DENSITY < 0.05);
    assert_true(TW_TD_STAY > 0.0 && TW_TD_STAY <= 1.0);
    assert_true(TW_TD_MIN_ROWS >= 1);
}

/* The AUTO steps of test_gpu_train_dense_switching: threshold 20.5/row, data 4.2 or 192/row. */
static void test_train_auto_switching_sequence(void **st) {
    (void)st;
    double thr = 20.48, est = -1.0;
    twell_path last = A;
    struct {
        double data; /* this step's density (known to the host after it) */
        int want;    /* dense? */
    } steps[] = {{192.0, 1}, {4.2, 1}, {192.0, 0}, {192.0, 1}};
    /* step 0 a probe whose count (192) sends it dense; step 1 dense from that count; a forced
     * sparse step (4.2) in between the test's steps 1 and 3 is modelled by est = 4.2, last = S */
    for (size_t i = 0; i < 2; i++) {
        int pick = tw_train_auto_dense(est, last, 1024, 1024, thr, 0.8);
        assert_int_equal(pick, i == 0 ? TW_AUTO_PROBE : TW_AUTO_DENSE);
        int dense = pick == TW_AUTO_DENSE || (pick == TW_AUTO_PROBE && steps[i].data > thr);
        assert_int_equal(dense, steps[i].want);
        last = dense ? D : S;
        est = steps[i].data;
    }
    est = 4.2, last = S; /* the forced sparse step */
    for (size_t i = 2; i < 4; i++) {
        int dense = tw_train_auto_dense(est, last, 1024, 1024, thr, 0.8);
        assert_int_equal(dense, steps[i].want);
        last = dense ? D : S;
        est = steps[i].data;
    }
}

/* The dense workspace formula: M·N·10 bytes (dU | dP | Tm in dtype, (P, U) words) plus the
 * 256-byte alignment of each part and the forward's per-warp partials; 0 on overflow. */
static void test_train_auto_dense_bytes(void **st) {
    (void)st;
    twell_shape s;
    twell_shape_init(&s, 2048, 5632);
    size_t M = 16384, b = tw_ctd_bytes(&s, M);
    size_t units = (M / 256) * (5632 / 256); /* 256-row clusters x 256-column tiles */
    assert_int_equal(b, M * 5632 * 10 + units * 2 * 8 * 2 * 4);
    assert_true(tw_ctd_bytes(&s, 1) >= 5632u * 10u);
    assert_true(tw_ctd_bytes(&s, 1000) > tw_ctd_bytes(&s, 999));
    assert_int_equal(tw_ctd_bytes(&s, 0), 0);
    assert_int_equal(tw_ctd_bytes(&s, SIZE_MAX / 4), 0);
}

/* The block GEMMs' split-K slices: fill the clusters, never more than 8 or one per k-block, none
 * where the unsplit grid already fills half the clusters; slices x units within the clusters. */
static void test_train_auto_block_nsplit(void **st) {
    (void)st;
    /* 132 SMs (66 clusters of 2), K = 2048 output columns (8 tiles of 256), dx over 2N = 11264 */
    assert_int_equal(tw_ctd_nsplit(132, 336, 2048, 11264), 4); /* 2 x 8 units: 66 / 16 */
    assert_int_equal(tw_ctd_nsplit(132, 1, 2048, 11264), 8);   /* 8 units: capped at 8 */
    assert_int_equal(tw_ctd_nsplit(132, 16384, 2048, 11264), 1);
    assert_int_equal(tw_ctd_nsplit(132, 1024, 2048, 11264), 2); /* 32 units: 2 x 32 ≤ 66 */
    assert_int_equal(tw_ctd_nsplit(132, 1025, 2048, 11264), 1); /* 40 units: over half */
    assert_int_equal(tw_ctd_nsplit(132, 1, 2048, 128), 2);      /* two k-blocks */
    assert_int_equal(tw_ctd_nsplit(132, 1, 2048, 64), 1);
    assert_int_equal(tw_ctd_nsplit(132, 0, 2048, 11264), 1);
    assert_int_equal(tw_ctd_nsplit(1, 1, 2048, 11264), 1); /* no whole cluster */
    for (size_t M = 1; M <= 4096; M += 37) {
        size_t units = ((M + 255) / 256) * 8u;
        unsigned n = tw_ctd_nsplit(132, M, 2048, 5632);
        assert_true(n >= 1u && n <= 8u);
        if (n > 1u)
            assert_true(n * units <= 66u);
        else
            assert_true(2u * units > 66u || 66u / units < 2u);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_auto_first_step),
        cmocka_unit_test(test_train_auto_threshold_and_stay),
        cmocka_unit_test(test_train_auto_switching_sequence),
        cmocka_unit_test(test_train_auto_dense_bytes),
        cmocka_unit_test(test_train_auto_block_nsplit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
