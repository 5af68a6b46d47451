/* test_gpu_train.c — twell_ffn_forward_train / twell_ffn_backward on the GPU against the CPU
 * reference (itself checked by finite differences in test_grad), over uniform and skewed data
 * (heavy rows: every 8th token ~90% active, every 8th from token 3 ~50%; heavy neurons: every
 * 16th ~90% active), densities 0.5%, 1%, 2%, 5% and 20% of N, M ∈ {1, 7, 33, 333, 1000},
 * K ∈ {64, 512}, N ∈ {256, 1024}, T/C ∈ {256/8, 128/4, 64/2, 64/8}, both dtypes, aligned and
 * unaligned tensors (the element-load kernels), forced short chunks that split rows and neurons.
 *
 * Data: x and Wg are small integers times powers of two ("exact gate") except in one case, so
 * every gate pre-activation is exact in any summation order: the GPU support and gate values
 * must equal the CPU's bit for bit, and so must the saved layout (packed words, row and spill
 * offsets, spill words), the transpose (col_off, col_row, col_ent) and its host mirror
 * tw_tl_transpose_blocked. The generic-data case allows what fp32 summation order can move in the
 * plan's gate-pack (sm_90a: wgmma): entries flipped at a pre-activation near zero (their rows and
 * neurons left out, at most 1% of rows) and gate values one 16-bit step apart (their neurons left
 * out of the fp32 weight-gradient comparison; their rows stay within the 16-bit tolerance).
 *
 * Tolerances (per output tensor, largest row-relative L2 error ‖got − ref‖₂/‖ref‖₂ over rows of
 * y and dx, over neuron rows of dWg, dWu, dWd; the worst is printed): y, dx 5e-3 (bf16) or 1e-3
 * (fp16), the level of their final rounding; dWg, dWu, dWd 1e-5 (fp32: only split neurons add
 * their chunk partials in another association); L0 exact, L1 relative 1e-6. The kernels use the
 * CPU's exact sequence of roundings per dot product and per sum, so unsplit rows and neurons are
 * expected bit-identical: their share is printed. Also: determinism (two runs bitwise identical
 * in y, stats, dx, dWg, dWu, dWd), poisoned outputs fully overwritten, state reuse across M and
 * error paths (the kernel routes against each other: test_gpu_train_routes.c; shared fixture:
 * support/tw_gpu_train.c). Exits 77 without a device. `test_gpu_train small`: the first three
 * cases and the error paths only (sanitizer).
 * labels: gpu slow */
#include "cpu_train.h"
#include "cuda_driver.h"
#include "cuda_train.h"
#include "half.h"
#include "internal.h"
#include "ref64_train.h"
#include "train_check.h"
#include "train_layout.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tw_gpu_train.h"
#include "tw_tc.h"

/* The first three are small (the sanitizer runs them). */
static const gt_case gt_cases[] = {
    {33, 64, 256, 256, 8, BF, 0.05, 0, 1, 0.5f, 0, 0, 0},
    {33, 64, 256, 256, 8, FP, 0.02, 1, 1, 1.0f, 16, 4, 0},
    {7, 64, 256, 64, 8, BF, 0.20, 1, 1, 0.3f, 0, 0, 1},
    {1, 64, 256, 256, 8, BF, 0.20, 1, 1, 0.5f, 0, 0, 0},
    {1, 512, 1024, 256, 8, FP, 0.01, 0, 1, 0.5f, 0, 0, 0},
    {1000, 512, 1024, 256, 8, BF, 0.005, 0, 1, 1.0f, 0, 0, 0},
    {1000, 512, 1024, 256, 8, FP, 0.01, 1, 1, 1.0f, 0, 0, 0},
    {1000, 512, 1024, 256, 8, BF, 0.02, 1, 1, 2.0f, 0, 0, 0},
    {1000, 64, 1024, 256, 8, FP, 0.05, 0, 1, 1.0f, 0, 0, 0},
    {1000, 512, 256, 256, 8, BF, 0.20, 0, 1, 1.0f, 0, 0, 0},
    {1000, 512, 1024, 256, 8, FP, 0.20, 1, 1, 1.0f, 0, 0, 0},
    {1000, 64, 256, 256, 8, BF, 0.05, 1, 1, 1.0f, 8, 64, 0},
    {333, 512, 1024, 128, 4, FP, 0.05, 1, 1, 0.5f, 0, 0, 0},
    {1000, 64, 1024, 64, 2, BF, 0.02, 1, 1, 0.5f, 0, 0, 0},
    {33, 512, 1024, 256, 8, BF, 0.01, 1, 1, 0.5f, 0, 0, 1},
    {1000, 512, 1024, 256, 8, BF, 0.02, 1, 0, 1.0f, 0, 0, 0},
};

/* ---- supports ---- */

/* Row-major support lists of a saved forward (the CPU's tw_train_saved layout). */
typedef struct {
    uint64_t *row_off;
    uint32_t *col;
    uint16_t *pbits;
    float *u;
    tw_train_support sup;
} gt_sup;

static void gt_sup_make(gt_sup *g, const twell_shape *s, const tw_train_saved *sv) {
    size_t M = sv->M, nnz = sv->row_off[M];
    g->row_off = malloc((M + 1) * sizeof *g->row_off);
    g->col = malloc((nnz + 1) * sizeof *g->col);
    g->pbits = malloc((nnz + 1) * sizeof *g->pbits);
    g->u = malloc((nnz + 1) * sizeof *g->u);
    float *p = malloc((nnz + 1) * sizeof *p);
    assert_true(g->row_off && g->col && g->pbits && g->u && p);
    for (size_t m = 0; m <= M; m++)
        g->row_off[m] = sv->row_off[m];
    for (size_t m = 0; m < M; m++) {
        size_t e0 = sv->row_off[m];
        size_t n = tw_train_row_support(s, sv, m, g->col + e0, p + e0, g->u + e0);
        assert_int_equal(n, sv->row_off[m + 1] - e0);
    }
    for (size_t e = 0; e < nnz; e++)
        g->pbits[e] = tw_f32_to_half(s->dtype, p[e]);
    free(p);
    g->sup.M = M, g->sup.row_off = g->row_off, g->sup.col = g->col, g->sup.pbits = g->pbits;
}

static void gt_sup_free(gt_sup *g) {
    free(g->row_off);
    free(g->col);
    free(g->pbits);
    free(g->u);
}

/* The downloaded GPU state as a tw_train_saved (the CPU's walk then reads it). */
static void gt_saved_of(const tw_cuda_train_host *h, const twell_shape *s, tw_train_saved *sv,
                        size_t **spill_off, size_t **row_off) {
    size_t tiles = h->M * (s->N / s->T);
    memset(sv, 0, sizeof *sv);
    *spill_off = malloc((tiles + 1) * sizeof **spill_off);
    *row_off = malloc((h->M + 1) * sizeof **row_off);
    assert_true(*spill_off && *row_off);
    for (size_t i = 0; i <= tiles; i++)
        (*spill_off)[i] = (size_t)h->spill_off[i];
    for (size_t i = 0; i <= h->M; i++)
        (*row_off)[i] = (size_t)h->row_off[i];
    sv->M = h->M, sv->nnz = h->nnz, sv->spill_total = h->spill_total;
    sv->packed = h->packed, sv->u_ell = h->u_ell, sv->spill_off = *spill_off;
    sv->spill = h->spill, sv->u_spill = h->u_spill, sv->row_off = *row_off;
}

/* The GPU's saved layout and transpose: against its own host mirrors always, and against the
 * CPU's arrays when the supports agree. Returns the number of entries whose U differs from the
 * CPU's bit pattern (for the report), or SIZE_MAX when supports differ. */
static size_t gt_check_layout(const twell_shape *s, const tw_cuda_train_host *h,
                              const tw_train_saved *cpu, const gt_sup *gs, const gt_sup *cs,
                              int same_support) {
    size_t M = h->M, NT = s->N / s->T, tiles = M * NT, nnz = h->nnz;
    /* the row-tile scan of the GPU's own packed words */
    uint64_t *to = malloc((tiles + 1) * 8), *so = malloc((tiles + 1) * 8);
    uint64_t *ro = malloc((M + 1) * 8), tn, ts;
    assert_true(to && so && ro);
    tw_tl_tile_scan(s, M, h->packed, to, so, ro, &tn, &ts);
    assert_int_equal(tn, nnz);
    assert_int_equal(ts, h->spill_total);
    assert_memory_equal(to, h->tile_off, (tiles + 1) * 8);
    assert_memory_equal(so, h->spill_off, (tiles + 1) * 8);
    assert_memory_equal(ro, h->row_off, (M + 1) * 8);
    free(to), free(so), free(ro);
    /* entry arrays: columns, Tm = U·P of the walk */
    for (size_t e = 0; e < nnz; e++) {
        if (h->e_col[e] != gs->col[e])
            fail_msg("e_col[%zu] = %u, the saved support says %u", e, h->e_col[e], gs->col[e]);
        float tm = gs->u[e] * tw_half_to_f32(s->dtype, gs->pbits[e]);
        if (memcmp(&tm, &h->e_tm[e], 4) != 0)
            fail_msg("e_tm[%zu] = %g, U·P = %g", e, (double)h->e_tm[e], (double)tm);
    }
    /* row chunks */
    uint64_t *co = malloc((M + 1) * 8), *po = malloc((M + 1) * 8), ps;
    assert_true(co && po);
    uint64_t nch = tw_tl_row_chunks(M, h->row_off, h->E, co, po, &ps);
    assert_int_equal(nch, h->nchunks);
    assert_int_equal(ps, h->pslots);
    assert_memory_equal(co, h->chunk_off, (M + 1) * 8);
    free(co), free(po);
    /* the transpose, against the host mirror of the device algorithm */
    assert_true(h->have_bwd);
    uint32_t *hist = malloc((size_t)s->N * h->B * 4 + 4), *cr = malloc(nnz * 4 + 4);
    uint32_t *ce = malloc(nnz * 4 + 4);
    uint64_t *cof = malloc(((size_t)s->N + 1) * 8);
    assert_true(hist && cr && ce && cof);
    tw_tl_transpose_blocked(M, s->N, h->row_off, h->e_col, h->R, h->B, hist, cof, cr, ce);
    assert_memory_equal(cof, h->col_off, ((size_t)s->N + 1) * 8);
    assert_memory_equal(cr, h->col_row, nnz * 4 + (nnz == 0));
    assert_memory_equal(ce, h->col_ent, nnz * 4 + (nnz == 0));
    free(hist), free(cr), free(ce), free(cof);
    if (!same_support)
        return SIZE_MAX;
    /* the CPU's own arrays */
    assert_int_equal(h->nnz, cpu->nnz);
    assert_int_equal(h->spill_total, cpu->spill_total);
    assert_memory_equal(h->packed, cpu->packed, M * (s->N / s->C) * 4);
    for (size_t i = 0; i <= tiles; i++)
        assert_int_equal(h->spill_off[i], cpu->spill_off[i]);
    if (h->spill_total)
        assert_memory_equal(h->spill, cpu->spill, h->spill_total * 4);
    for (uint32_t n = 0; n <= s->N; n++)
        assert_int_equal(h->col_off[n], cpu->col_off[n]);
    for (size_t i = 0; i < nnz; i++) {
        assert_int_equal(h->col_row[i], cpu->col_row[i]);
        assert_int_equal(h->col_ent[i], cpu->col_ent[i]);
    }
    size_t udiff = 0;
    for (size_t e = 0; e < nnz; e++)
        udiff += memcmp(&gs->u[e], &cs->u[e], 4) != 0;
    return udiff;
}

/* ---- one case ---- */

/* Tiled U/dT sum in another fp32 order than the CPU reference, so the weight gradients' 1e-5
 * row-relative bound (which presumes the reference's order) does not apply; they are judged
 * against the fp64 model (ref64_train.h) on the CPU's gate values instead, with the library's
 * stated tolerance (tests/test_ref_train.c): |got - fp64| <= 2e-5 · (Σ |terms|) per element,
 * over the neurons whose support agrees (nrn_same; all when NULL). The CPU reference's own error
 * on the same scale is printed beside it. */
static void gt_expect_fp64(const twell_shape *s, const tw_t_data *d, const tw_t_lib *L,
                           float lambda, const gt_out *g, const gt_out *cpu,
                           const unsigned char *nrn_same) {
    size_t M = d->M, K = d->K, N = d->N, xk = M * K, wk = N * K;
    twell_dtype dt = s->dtype;
    double *x = tw_t_to_f64(dt, d->x, xk), *wg = tw_t_to_f64(dt, d->wg, wk);
    double *wu = tw_t_to_f64(dt, d->wu, wk), *wd = tw_t_to_f64(dt, d->wd, wk);
    double *dy = tw_t_to_f64(dt, d->dy, xk), *plib = tw_t_lib_dense_p(L);
    double *dx = malloc(xk * 8), *sy = malloc(xk * 8), *sdx = malloc(xk * 8);
    double *b[3], *sc[3];
    for (int t = 0; t < 3; t++)
        b[t] = malloc(wk * 8), sc[t] = malloc(wk * 8);
    assert_true(x && wg && wu && wd && dy && plib && dx && sy && sdx && b[0] && b[1] && b[2] &&
                sc[0] && sc[1] && sc[2]);
    tw_t_ref r;
    assert_int_equal(
        tw_t_ref_forward(&r, M, (uint32_t)K, (uint32_t)N, x, wg, wu, wd, TW_T_P_ROUND, dt, plib),
        0);
    tw_t_ref_backward(&r, x, wg, wu, wd, dy, (double)lambda, dx, b[0], b[1], b[2]);
    assert_int_equal(
        tw_t_ref_scales(&r, x, wg, wu, wd, dy, (double)lambda, sy, sdx, sc[0], sc[1], sc[2]), 0);
    const float *gw[3] = {g->dwg, g->dwu, g->dwd}, *cw[3] = {cpu->dwg, cpu->dwu, cpu->dwd};
    for (int t = 0; t < 3; t++) {
        double *lg = tw_t_f32_to_f64(gw[t], wk), *lc = tw_t_f32_to_f64(cw[t], wk);
        assert_true(lg && lc);
        double eg = 0, ec = 0;
        size_t at = 0;
        for (size_t n = 0; n < N; n++) {
            if (nrn_same && !nrn_same[n])
                continue;
            double a = tw_t_err_scaled(lg + n * K, b[t] + n * K, sc[t] + n * K, K, 0, 0, NULL);
            double c = tw_t_err_scaled(lc + n * K, b[t] + n * K, sc[t] + n * K, K, 0, 0, NULL);
            if (a > eg)
                eg = a, at = n;
            ec = c > ec ? c : ec;
        }
        printf("#   %-3s vs fp64: worst scaled error %.2e (neuron %zu; CPU reference %.2e), tol "
               "2e-05\n",
               gt_names[2 + t], eg, at, ec);
        char what[64];
        snprintf(what, sizeof what, "%s vs fp64, neuron %zu", gt_names[2 + t], at);
        GT_LE(eg, 2e-5, what);
        free(lg), free(lc);
    }
    tw_t_ref_free(&r);
    free(x), free(wg), free(wu), free(wd), free(dy), free(plib), free(dx), free(sy), free(sdx);
    for (int t = 0; t < 3; t++)
        free(b[t]), free(sc[t]);
}

/* The GPU's outputs o against the CPU's r on the rows and neurons whose supports agree (the fp64
 * model too where U/dT ran tiled), and L0, L1 (exactly and to 1e-6 when the supports are the
 * same). */
static void gt_expect_results(const twell_shape *s, const tw_t_data *d, const tw_t_lib *L,
                              float lambda, int tiled, const gt_out *o, const gt_out *r,
                              const unsigned char *row_same, const unsigned char *nrn_same,
                              int same_support) {
    gt_errs e;
    gt_compare(s, d->M, o, r, row_same, nrn_same, &e);
    gt_expect_w(s, &e, tiled);
    if (tiled)
        gt_expect_fp64(s, d, L, lambda, o, r, nrn_same);
    double l1rel = fabs((double)o->stats[1] - (double)r->stats[1]) /
                   (fabs((double)r->stats[1]) > 0 ? fabs((double)r->stats[1]) : 1.0);
    printf("#   L0 %.6g (CPU %.6g), L1 %.9g (CPU %.9g, rel %.1e, tol 1e-6)\n", (double)o->stats[0],
           (double)r->stats[0], (double)o->stats[1], (double)r->stats[1], l1rel);
    if (same_support) {
        if (o->stats[0] != r->stats[0])
            fail_msg("L0 = %.9g, CPU %.9g", (double)o->stats[0], (double)r->stats[0]);
        GT_LE(l1rel, 1e-6, "L1");
    }
}

/* udt: -1 the state's default (tiled where it can run), 0 per-entry U/dT, 1 tiled (the route
 * must run when the tensors are aligned). */
static void gt_case_run(const gt_case *c, uint64_t seed, int udt) {
    twell_shape s = gt_shape(c);
    tw_t_gen gen = {c->density, c->skew, c->exact, seed};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, c->dt, c->M, c->K, c->N, &gen), 0);

    /* CPU reference */
    tw_t_lib L;
    assert_int_equal(tw_t_lib_open(&L, &s, 0), 0);
    gt_out r;
    gt_out_alloc(&r, c->M, c->K, c->N);
    assert_int_equal(tw_t_lib_forward(&L, &d, r.y, r.stats), TWELL_OK);
    assert_int_equal(tw_t_lib_backward(&L, &d, c->lambda, r.dx, r.dwg, r.dwu, r.dwd), TWELL_OK);
    const tw_train_saved *cpu = L.state->backend_data;

    /* GPU, twice, with different poison */
    gt_gpu g;
    gt_gpu_open(&g, &s, c);
    gt_gpu_data(&g, &d, c->unaligned);
    gt_out o1, o2;
    gt_out_alloc(&o1, c->M, c->K, c->N);
    gt_out_alloc(&o2, c->M, c->K, c->N);
    if (udt >= 0)
        GT_OK(tw_test_control(TW_TC_TRAIN_SET_UDT, g.state, udt));
    gt_gpu_run(&g, c->lambda, 0xFFFFFFFFu, &o1);
    assert_int_equal(tw_tc_state_int(g.state, TW_TC_TRAIN_LAST_VEC), c->unaligned ? 1 : 8);
    if (udt == 1 && !c->unaligned)
        assert_int_equal(tw_tc_state_int(g.state, TW_TC_TRAIN_UDT_TILED), 1);
    if (udt == 0)
        assert_int_equal(tw_tc_state_int(g.state, TW_TC_TRAIN_UDT_TILED), 0);
    tw_cuda_train_host h;
    GT_OK(tw_test_control(TW_TC_TRAIN_DOWNLOAD, g.state, &h));
    gt_gpu_run(&g, c->lambda, 0x7FC17FC1u, &o2);

    gt_expect_same(&o1, &o2, c->M, c->K, c->N);

    /* supports: the CPU's and the GPU's */
    gt_sup cs, gs;
    gt_sup_make(&cs, &s, cpu);
    tw_train_saved gsv;
    size_t *gso, *gro;
    gt_saved_of(&h, &s, &gsv, &gso, &gro);
    gt_sup_make(&gs, &s, &gsv);
    unsigned char *row_same = malloc(c->M), *nrn_same = malloc(c->N);
    assert_true(row_same && nrn_same);
    size_t values = 0,
           diff = tw_train_support_diff(c->N, &gs.sup, &cs.sup, row_same, nrn_same, &values);
    size_t rows_out = 0, nrn_out = 0;
    for (size_t m = 0; m < c->M; m++)
        rows_out += !row_same[m];
    for (uint32_t n = 0; n < c->N; n++)
        nrn_out += !nrn_same[n];
    size_t udiff = gt_check_layout(&s, &h, cpu, &gs, &cs, diff == 0 && values == 0);
    printf("# M=%zu K=%u N=%u T=%u C=%u %s %s%s density %.3f: nnz %zu (%.1f/row), spill %zu, "
           "chunks %zu (E %llu, %zu partial rows), E2 %llu, state %.2f MB, %s loads, U/dT %s\n",
           c->M, c->K, c->N, c->T, c->C, c->dt == BF ? "bf16" : "fp16",
           c->skew ? "skewed" : "uniform", c->exact ? "" : " generic", c->density, h.nnz,
           (double)h.nnz / (double)c->M, h.spill_total, h.nchunks, (unsigned long long)h.E,
           h.pslots, (unsigned long long)h.E2, (double)twell_train_state_bytes(g.state) / 1e6,
           c->unaligned ? "element" : "vector",
           tw_tc_state_int(g.state, TW_TC_TRAIN_UDT_TILED) ? "tiled" : "per entry");
    printf("#   support vs CPU: %zu flipped entries, %zu with another gate value (%zu rows, %zu "
           "neurons left out); U bitwise differing %s\n",
           diff, values, rows_out, nrn_out,
           udiff == SIZE_MAX ? "n/a" : (udiff == 0 ? "none" : "SOME (see below)"));
    if (udiff != SIZE_MAX && udiff)
        printf("#   %zu of %zu entries have U differing from the CPU's bits\n", udiff, h.nnz);
    if (c->exact) {
        assert_int_equal(diff, 0);
        assert_int_equal(values, 0);
    } else {
        GT_LE((double)rows_out / (double)c->M, 0.01, "rows with flipped entries");
    }

    gt_expect_results(&s, &d, &L, c->lambda, tw_tc_state_int(g.state, TW_TC_TRAIN_UDT_TILED), &o1,
                      &r, row_same, nrn_same, diff == 0 && values == 0);

    free(row_same);
    free(nrn_same);
    gt_sup_free(&cs);
    gt_sup_free(&gs);
    free(gso);
    free(gro);
    (void)tw_test_control(TW_TC_TRAIN_HOST_FREE, &h);
    gt_out_free(&o1);
    gt_out_free(&o2);
    gt_out_free(&r);
    gt_gpu_close(&g);
    tw_t_lib_close(&L);
    tw_t_data_free(&d);
}

static void test_gpu_train_case(void **state) {
    const gt_case *c = *state;
    gt_case_run(c, 1000 + (uint64_t)(c - gt_cases), -1);
}

/* The cases again with U and dT forced per entry (the default is tiled where it can run, so
 * both routes meet the CPU reference in every run). */
static void test_gpu_train_case_entry(void **state) {
    const gt_case *c = *state;
    gt_case_run(c, 1000 + (uint64_t)(c - gt_cases), 0);
}

/* One state reused across M (1000, 33, 1000): results right each time, capacity reused (the
 * third call allocates nothing new). */
static void test_gpu_train_state_reuse(void **unused) {
    (void)unused;
    gt_case c = {1000, 64, 256, 256, 8, BF, 0.05, 1, 1, 1.0f, 0, 0, 0};
    twell_shape s = gt_shape(&c);
    gt_gpu g;
    gt_gpu_open(&g, &s, &c);
    size_t Ms[3] = {1000, 33, 1000}, bytes[3];
    for (int i = 0; i < 3; i++) {
        c.M = Ms[i];
        tw_t_gen gen = {c.density, c.skew, 1, i == 1 ? 78u : 77u};
        tw_t_data d;
        assert_int_equal(tw_t_data_make(&d, c.dt, c.M, c.K, c.N, &gen), 0);
        tw_t_lib L;
        assert_int_equal(tw_t_lib_open(&L, &s, 0), 0);
        gt_out r, o;
        gt_out_alloc(&r, c.M, c.K, c.N);
        gt_out_alloc(&o, c.M, c.K, c.N);
        assert_int_equal(tw_t_lib_forward(&L, &d, r.y, r.stats), TWELL_OK);
        assert_int_equal(tw_t_lib_backward(&L, &d, c.lambda, r.dx, r.dwg, r.dwu, r.dwd), TWELL_OK);
        gt_gpu_data(&g, &d, 0);
        gt_gpu_run(&g, c.lambda, 0xFFFFFFFFu, &o);
        bytes[i] = twell_train_state_bytes(g.state);
        printf("# reuse M=%zu: state %zu bytes\n", c.M, bytes[i]);
        gt_errs e;
        gt_compare(&s, c.M, &o, &r, NULL, NULL, &e);
        gt_expect(&s, &e);
        gt_gpu_free_data(&g);
        gt_out_free(&r);
        gt_out_free(&o);
        tw_t_lib_close(&L);
        tw_t_data_free(&d);
    }
    assert_true(bytes[0] > 0);
    assert_int_equal(bytes[1], bytes[0]);
    assert_int_equal(bytes[2], bytes[0]);
    gt_gpu_close(&g);
}

/* Many steps on one state, the same bytes every step: the four one-pass scans of a step (tiles,
 * rows, neuron histogram, neurons; different block counts) share one look-back buffer and tag
 * their flags with a new epoch each, so a flag word must never hold another scan's sums (it did
 * once: totals read garbage after ~30 steps at M 16384). Also across the epoch's wrap. */
static void test_gpu_train_scan_steps(void **unused) {
    (void)unused;
    gt_case c = {16384, 128, 5632, 256, 8, BF, 29.0 / 5632.0, 1, 0, 1.0f, 0, 0, 0};
    twell_shape s = gt_shape(&c);
    tw_t_gen gen = {c.density, c.skew, c.exact, 91u};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, c.dt, c.M, c.K, c.N, &gen), 0);
    gt_gpu g;
    gt_gpu_open(&g, &s, &c);
    gt_gpu_data(&g, &d, 0);
    gt_out r, o;
    gt_out_alloc(&r, c.M, c.K, c.N);
    gt_out_alloc(&o, c.M, c.K, c.N);
    gt_gpu_run(&g, c.lambda, 0xFFFFFFFFu, &r);
    const size_t b16 = c.M * c.K * 2u, b32 = (size_t)c.N * c.K * 4u;
    const int steps = 72, wrap_at = 64;
    for (int i = 0; i < steps; i++) {
        if (i == wrap_at) /* 4 scans a step: the wrap falls inside the next step */
            GT_OK(tw_test_control(TW_TC_TRAIN_SET_SCAN_EPOCH, g.state, 0x7ffffffeu - 2u));
        gt_gpu_run(&g, c.lambda, (i & 1) ? 0x7FC17FC1u : 0xFFFFFFFFu, &o);
        if (memcmp(o.y, r.y, b16) || memcmp(o.dx, r.dx, b16) || memcmp(o.dwg, r.dwg, b32) ||
            memcmp(o.dwu, r.dwu, b32) || memcmp(o.dwd, r.dwd, b32) ||
            memcmp(o.stats, r.stats, sizeof o.stats))
            fail_msg("step %d of %d: outputs differ from the first step's", i + 2, steps + 1);
    }
    printf("# %d steps on one state (M %zu, skewed), bitwise equal, epoch wrap included\n",
           steps + 1, c.M);
    gt_out_free(&r);
    gt_out_free(&o);
    gt_gpu_close(&g);
    tw_t_data_free(&d);
}

/* Error paths: backward before any forward, with another M, with a state of another plan; the
 * outputs stay untouched. */
static void test_gpu_train_errors(void **unused) {
    (void)unused;
    gt_case c = {33, 64, 256, 256, 8, BF, 0.05, 0, 1, 1.0f, 0, 0, 0};
    twell_shape s = gt_shape(&c);
    tw_t_gen gen = {c.density, 0, 1, 5};
    tw_t_data d;
    assert_int_equal(tw_t_data_make(&d, c.dt, c.M, c.K, c.N, &gen), 0);
    gt_gpu g;
    gt_gpu_open(&g, &s, &c);
    gt_gpu_data(&g, &d, 0);
    twell_status st = twell_ffn_backward(g.plan, g.state, c.M, g.x.p, g.wg.p, g.wu.p, g.wd.p,
                                         g.dy.p, 1.0f, g.dx.p, g.dwg.p, g.dwu.p, g.dwd.p, NULL);
    assert_int_equal(st, TWELL_ERR_INVALID_ARG);
    GT_OK(twell_ffn_forward_train(g.plan, c.M, g.x.p, g.wg.p, g.wu.p, g.wd.p, g.y.p, NULL, g.state,
                                  NULL));
    GT_OK(tw_cuda_memset_d32(gt_ctx, g.dx.p, 0xABCDABCDu, c.M * c.K / 2, NULL));
    st = twell_ffn_backward(g.plan, g.state, c.M - 1, g.x.p, g.wg.p, g.wu.p, g.wd.p, g.dy.p, 1.0f,
                            g.dx.p, g.dwg.p, g.dwu.p, g.dwd.p, NULL);
    assert_int_equal(st, TWELL_ERR_INVALID_ARG);
    uint16_t *dx = malloc(c.M * c.K * 2);
    assert_non_null(dx);
    GT_OK(tw_cuda_synchronize(gt_ctx));
    GT_OK(tw_cuda_memcpy_dtoh(gt_ctx, dx, g.dx.p, c.M * c.K * 2));
    for (size_t i = 0; i < c.M * c.K; i++)
        if (dx[i] != 0xABCDu)
            fail_msg("dx[%zu] = %04x written by a failed backward", i, dx[i]);
    free(dx);
    twell_plan *other = NULL;
    twell_train_state *ostate = NULL;
    GT_OK(twell_plan_create(gt_ctx, &s, &other));
    GT_OK(twell_train_state_create(other, &ostate));
    st = twell_ffn_backward(g.plan, ostate, c.M, g.x.p, g.wg.p, g.wu.p, g.wd.p, g.dy.p, 1.0f,
                            g.dx.p, g.dwg.p, g.dwu.p, g.dwd.p, NULL);
    assert_int_equal(st, TWELL_ERR_INVALID_ARG);
    twell_train_state_destroy(ostate);
    twell_plan_destroy(other);
    gt_gpu_close(&g);
    tw_t_data_free(&d);
}

int main(int argc, char **argv) {
    gt_open_or_skip("test_gpu_train");
    size_t ncases = sizeof gt_cases / sizeof gt_cases[0];
    int small = argc > 1 && !strcmp(argv[1], "small");
    if (small)
        ncases = 3;
    struct CMUnitTest tests[2 * (sizeof gt_cases / sizeof gt_cases[0]) + 3];
    static char names[2 * (sizeof gt_cases / sizeof gt_cases[0])][140];
    for (size_t i = 0; i < ncases; i++) {
        const gt_case *c = &gt_cases[i];
        snprintf(names[i], sizeof names[i], "test_gpu_train_M%zu_K%u_N%u_T%u_C%u_%s_%s_d%.3f%s%s%s",
                 c->M, c->K, c->N, c->T, c->C, c->dt == BF ? "bf16" : "fp16",
                 c->skew ? "skewed" : "uniform", c->density, c->exact ? "" : "_generic",
                 c->row_len ? "_split" : "", c->unaligned ? "_unaligned" : "");
        struct CMUnitTest t = {names[i], test_gpu_train_case, NULL, NULL, (void *)c};
        tests[i] = t;
    }
    size_t n = ncases;
    for (size_t i = 0; i < ncases; i++) { /* the other U/dT route, where it differs */
        const gt_case *c = &gt_cases[i];
        if (c->unaligned || c->K % 64u != 0)
            continue;
        char base[sizeof names[0]]; /* a copy: gcc's -Wrestrict (Debug + ASan) cannot tell that
                                     * names[i] and names[n] never overlap */
        memcpy(base, names[i], sizeof base);
        snprintf(names[n], sizeof names[n], "%.110s_udt_entry", base);
        struct CMUnitTest t = {names[n], test_gpu_train_case_entry, NULL, NULL, (void *)c};
        tests[n++] = t;
    }
    struct CMUnitTest t1 = cmocka_unit_test(test_gpu_train_errors);
    tests[n++] = t1;
    if (!small) {
        struct CMUnitTest t2 = cmocka_unit_test(test_gpu_train_state_reuse);
        tests[n++] = t2;
        struct CMUnitTest t3 = cmocka_unit_test(test_gpu_train_scan_steps);
        tests[n++] = t3;
    }
    int rc = _cmocka_run_group_tests("test_gpu_train", tests, n, NULL, NULL);
    twell_ctx_destroy(gt_ctx);
    return rc;
}
