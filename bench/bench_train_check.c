/*
 * bench_train_check.c — the checks of `twell bench --op train` (bench_train.c): the first rows
 * against the CPU reference, the full-M run for poison, and the dense baseline against ours.
 *
 * Check: the first Mc = min(M, 8·check_rows) rows run forward + backward on the GPU (a fresh
 * state) and on the CPU reference; the comparison is support-aware (train_check.h): the sm_90a
 * gate-pack sums in another order than the CPU, so a few entries flip (pre-activation near zero:
 * their rows and neurons are left out, at most 1% of rows allowed) and some gate values sit one
 * 16-bit step apart (their neurons are left out of the fp32 weight-gradient comparison, their
 * rows stay within the 16-bit tolerance). Tolerances: y, dx row-relative 5e-3 (bf16) / 1e-3
 * (fp16); dWg, dWu, dWd by the library's stated rule (tests/verify/train_wcheck.h, the rule of
 * tests/test_ref_train.c and of the tiled route in tests/test_gpu_train.c): against an fp64
 * model on the CPU's support and gate values, |got − fp64| ≤ 2e-5 · Σ|terms| per element, Σ|terms|
 * from the same model on absolute values; the CPU reference's own worst on that scale is printed
 * beside it. The per-entry U/dT route (where the tiled one cannot run) sums in the CPU's order,
 * so its weight gradients must also be within 1e-5 row-relative of the CPU's; tiled U/dT (tensor
 * cores, 64-column slices) sums in another fp32 order, where a row-relative bound against the
 * CPU's sum measures cancellation (dWd = Σ_m Tm·dy), not error: only the scaled rule applies
 * there.
 * max_rel_err is the worst row-relative error of the five (y, dx, dWg, dWu, dWd) against the CPU,
 * for every route. The timed full-M run is checked for poison (every output written, finite).
 *
 * When the dense training path runs (--path dense, or the check state's first forward under AUTO
 * where its probe finds the data over AUTO's threshold) its contract applies: U, Tm, dU, dP
 * rounded to dtype, so the check allows 1.5e-2 (bf16) / 3e-3 (fp16) for y, 3e-2 / 4e-3 for dx
 * and 1e-2 / 2e-3 for the weight gradients; the support comes from its saved gate
 * (TW_TC_TD_DOWNLOAD_P), compared as above. dx gets more room: the synthetic data's constant
 * feature (x[:, 0] = 1, Wg[:, 0] = -threshold ≈ -2.6) makes dx[m, 0] = Σ dP·Wg[n, 0] dominate the
 * row, and with few active values per row that signed sum can cancel, amplifying dP's 16-bit
 * rounding (measured 1.7e-2 at 29 active per row, bf16, first 1024 rows; the cuBLAS dense step,
 * which rounds the same intermediates and more, is 2.6e-2 away from ours on those data).
 *
 * Where the sparse path's heavy-row route ran, the heavy rows carry the dense path's rounding, so
 * the check applies the dense tolerances above to every output, on a support that takes the
 * heavy rows' from the CPU (the sparse state holds them empty).
 */
#include "bench_train.h"
#include "train_check.h"
#include "train_wcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Row-major support lists of a CPU-format saved state (cpu_train.h). */
typedef struct {
    uint64_t *row_off;
    uint32_t *col;
    uint16_t *pbits;
    tw_train_support sup;
} bt_sup;

static int bt_sup_make(bt_sup *g, const twell_shape *s, const tw_train_saved *sv) {
    size_t M = sv->M, nnz = sv->row_off[M];
    memset(g, 0, sizeof *g);
    g->row_off = malloc((M + 1) * sizeof *g->row_off);
    g->col = malloc((nnz + 1) * sizeof *g->col);
    g->pbits = malloc((nnz + 1) * sizeof *g->pbits);
    float *p = malloc((nnz + 1) * sizeof *p);
    if (!g->row_off || !g->col || !g->pbits || !p) {
        free(p);
        return -1;
    }
    for (size_t m = 0; m <= M; m++)
        g->row_off[m] = sv->row_off[m];
    for (size_t m = 0; m < M; m++)
        (void)tw_train_row_support(s, sv, m, g->col + sv->row_off[m], p + sv->row_off[m], NULL);
    for (size_t e = 0; e < nnz; e++)
        g->pbits[e] = tw_f32_to_half(s->dtype, p[e]);
    free(p);
    g->sup.M = M, g->sup.row_off = g->row_off, g->sup.col = g->col, g->sup.pbits = g->pbits;
    return 0;
}

static void bt_sup_free(bt_sup *g) {
    free(g->row_off);
    free(g->col);
    free(g->pbits);
}

/* The support the sparse GPU state saved (h: its download, Mc rows) in g, through a CPU-format
 * view of it. 0, or -1 out of host memory. */
static int bt_sup_gpu(bt_sup *g, const twell_shape *s, size_t Mc, const tw_cuda_train_host *h) {
    memset(g, 0, sizeof *g);
    size_t tiles = Mc * (s->N / s->T);
    size_t *gso = malloc((tiles + 1) * sizeof *gso), *gro = malloc((Mc + 1) * sizeof *gro);
    int rc = -1;
    if (gso && gro) {
        for (size_t i = 0; i <= tiles; i++)
            gso[i] = (size_t)h->spill_off[i];
        for (size_t i = 0; i <= Mc; i++)
            gro[i] = (size_t)h->row_off[i];
        tw_train_saved gsv;
        memset(&gsv, 0, sizeof gsv);
        gsv.M = Mc, gsv.nnz = h->nnz, gsv.spill_total = h->spill_total, gsv.packed = h->packed;
        gsv.u_ell = h->u_ell, gsv.spill_off = gso, gsv.spill = h->spill, gsv.u_spill = h->u_spill;
        gsv.row_off = gro;
        rc = bt_sup_make(g, s, &gsv);
    }
    free(gso);
    free(gro);
    return rc;
}

/* The support the check compares when the heavy-row route ran: the GPU's rows, except the heavy
 * ones (empty in the sparse state: the dense block computed them from its own gate, not saved),
 * which take the CPU's row. Counts those rows into *heavy. 0, or -1 out of host memory. */
static int bt_sup_heavy(bt_sup *out, const tw_train_support *g, const tw_train_support *c,
                        uint32_t thr, size_t *heavy) {
    size_t M = g->M, nnz = 0;
    *heavy = 0;
    memset(out, 0, sizeof *out);
    for (size_t m = 0; m < M; m++) {
        uint64_t gn = g->row_off[m + 1] - g->row_off[m], cn = c->row_off[m + 1] - c->row_off[m];
        nnz += (size_t)(gn == 0 && cn > thr ? cn : gn);
    }
    out->row_off = malloc((M + 1) * sizeof *out->row_off);
    out->col = malloc((nnz + 1) * sizeof *out->col);
    out->pbits = malloc((nnz + 1) * sizeof *out->pbits);
    if (!out->row_off || !out->col || !out->pbits)
        return -1;
    size_t e = 0;
    for (size_t m = 0; m < M; m++) {
        uint64_t gn = g->row_off[m + 1] - g->row_off[m], cn = c->row_off[m + 1] - c->row_off[m];
        int h = gn == 0 && cn > thr;
        const tw_train_support *src = h ? c : g;
        uint64_t b = src->row_off[m], n = h ? cn : gn;
        out->row_off[m] = e;
        memcpy(out->col + e, src->col + b, (size_t)n * sizeof *out->col);
        memcpy(out->pbits + e, src->pbits + b, (size_t)n * sizeof *out->pbits);
        e += (size_t)n;
        *heavy += (size_t)h;
    }
    out->row_off[M] = e;
    out->sup.M = M, out->sup.row_off = out->row_off, out->sup.col = out->col;
    out->sup.pbits = out->pbits;
    return 0;
}

/* ---- the check of the first rows ---- */

/* One check: both backends' outputs on the first Mc rows, the masks of the rows and neurons
 * whose supports agree, and where the verdict goes. */
typedef struct {
    const twell_shape *s;
    size_t Mc;
    uint16_t *ry, *rdx, *gy, *gdx; /* y, dx [Mc, K]: the CPU reference (r) and the GPU (g) */
    float *rw, *gw;                /* dWg, dWu, dWd: three [N, K] blocks, likewise */
    unsigned char *row_same, *nrn_same;
    bt_check_res *res;
    char *note;
    size_t notelen;
} bt_chk;

static int bt_chk_alloc(bt_chk *c) {
    size_t xk = c->Mc * c->s->K, wk = (size_t)c->s->N * c->s->K;
    c->ry = malloc(xk * 2), c->rdx = malloc(xk * 2), c->gy = malloc(xk * 2);
    c->gdx = malloc(xk * 2);
    c->rw = malloc(wk * 3 * 4), c->gw = malloc(wk * 3 * 4);
    c->row_same = malloc(c->Mc), c->nrn_same = malloc(c->s->N);
    return c->ry && c->rdx && c->gy && c->gdx && c->rw && c->gw && c->row_same && c->nrn_same ? 0
                                                                                              : -1;
}

static void bt_chk_free(bt_chk *c) {
    free(c->ry), free(c->rdx), free(c->gy), free(c->gdx), free(c->rw), free(c->gw);
    free(c->row_same), free(c->nrn_same);
}

/* GPU against CPU on the check rows (gsup->M of them): the supports' differences, then y, dx
 * (row-relative, rows where the supports agree) and dWg, dWu, dWd (neurons where they agree)
 * into c->res. */
static void bt_compare(bt_chk *c, const tw_train_support *gsup, const tw_train_support *csup) {
    const twell_shape *s = c->s;
    bt_check_res *res = c->res;
    size_t Mc = gsup->M, N = s->N, wk = N * s->K;
    res->diff = tw_train_support_diff(s->N, gsup, csup, c->row_same, c->nrn_same, &res->values);
    for (size_t m = 0; m < Mc; m++)
        res->rows_out += !c->row_same[m];
    for (size_t n = 0; n < N; n++)
        res->nrn_out += !c->nrn_same[n];
    res->err[0] = tw_train_err_h(s->dtype, c->gy, c->ry, Mc, s->K, c->row_same, NULL, NULL, NULL);
    res->err[1] = tw_train_err_h(s->dtype, c->gdx, c->rdx, Mc, s->K, c->row_same, NULL, NULL, NULL);
    for (size_t t = 0; t < 3; t++)
        res->err[2 + t] =
            tw_train_err_f(c->gw + t * wk, c->rw + t * wk, N, s->K, c->nrn_same, NULL, NULL, NULL);
}

/* The CPU reference on the check rows into c's r buffers, through a CPU context, plan and state
 * that the caller destroys (*cst's saved support is read afterwards). */
static twell_status bt_cpu_run(bt_chk *c, const tw_synth_ffn *f, const uint16_t *hdy, float lambda,
                               twell_ctx **cpu, twell_plan **cplan, twell_train_state **cst) {
    size_t Mc = c->Mc, wk = (size_t)c->s->N * c->s->K;
    float stats[2];
    twell_ctx_options co;
    twell_ctx_options_init(&co);
    co.backend = TWELL_BACKEND_CPU;
    twell_status st = twell_ctx_create(&co, cpu);
    if (st == TWELL_OK && (st = twell_plan_create(*cpu, c->s, cplan)) == TWELL_OK &&
        (st = twell_train_state_create(*cplan, cst)) == TWELL_OK &&
        (st = twell_ffn_forward_train(*cplan, Mc, f->x, f->wg, f->wu, f->wd, c->ry, stats, *cst,
                                      NULL)) == TWELL_OK)
        st = twell_ffn_backward(*cplan, *cst, Mc, f->x, f->wg, f->wu, f->wd, hdy, lambda, c->rdx,
                                c->rw, c->rw + wk, c->rw + 2 * wk, NULL);
    return st;
}

/* The GPU on the same rows: a fresh state *gst, outputs in o's full-size buffers, downloaded into
 * c's g buffers; *gdense when the dense path ran, else the sparse state's saved support in h. */
static twell_status bt_gpu_run(bench_env *env, bt_chk *c, const bt_ours *o, float lambda,
                               twell_train_state **gst, int *gdense, tw_cuda_train_host *h) {
    twell_ctx *ctx = env->ctx;
    twell_plan *gplan = o->plan;
    size_t Mc = c->Mc, xk = Mc * c->s->K, wk = (size_t)c->s->N * c->s->K;
    twell_status st;
    if ((st = twell_train_state_create(gplan, gst)) != TWELL_OK ||
        (st = bt_heavy_set(*gst)) != TWELL_OK ||
        (st = twell_ffn_forward_train(gplan, Mc, o->x, o->wg, o->wu, o->wd, o->y, NULL, *gst,
                                      NULL)) != TWELL_OK ||
        (st = twell_ffn_backward(gplan, *gst, Mc, o->x, o->wg, o->wu, o->wd, o->dy, lambda, o->dx,
                                 o->dwg, o->dwu, o->dwd, NULL)) != TWELL_OK ||
        (!(*gdense = bench_state_path(*gst, TW_TC_TD_LAST_PATH) == TWELL_PATH_DENSE) &&
         (st = tw_test_control(TW_TC_TRAIN_DOWNLOAD, *gst, h)) != TWELL_OK) ||
        (st = tw_cuda_memcpy_dtoh(ctx, c->gy, o->y, xk * 2)) != TWELL_OK ||
        (st = tw_cuda_memcpy_dtoh(ctx, c->gdx, o->dx, xk * 2)) != TWELL_OK ||
        (st = tw_cuda_memcpy_dtoh(ctx, c->gw, o->dwg, wk * 4)) != TWELL_OK ||
        (st = tw_cuda_memcpy_dtoh(ctx, c->gw + wk, o->dwu, wk * 4)) != TWELL_OK ||
        (st = tw_cuda_memcpy_dtoh(ctx, c->gw + 2 * wk, o->dwd, wk * 4)) != TWELL_OK)
        return st;
    return TWELL_OK;
}

/* The dense path's tolerances (the file comment) in d16 (y), dxt (dx), d32 (weight gradients);
 * 1 when c->res is within them. */
static int bt_dense_tol(const bt_chk *c, double *d16, double *dxt, double *d32) {
    int bf16 = c->s->dtype == TWELL_DTYPE_BF16;
    *d16 = bf16 ? 1.5e-2 : 3e-3;
    *dxt = bf16 ? 3e-2 : 4e-3;
    *d32 = bf16 ? 1e-2 : 2e-3;
    const bt_check_res *r = c->res;
    return r->rows_out * 100 <= c->Mc && r->err[0] <= *d16 && r->err[1] <= *dxt &&
           r->err[2] <= *d32 && r->err[3] <= *d32 && r->err[4] <= *d32;
}

/* The dense path ran: its saved gate gives the GPU's support, compared with the CPU's (csv). */
static int bt_judge_dense(bt_chk *c, twell_train_state *gst, const tw_train_saved *csv) {
    const twell_shape *s = c->s;
    size_t Mc = c->Mc, N = s->N;
    bt_check_res *res = c->res;
    uint16_t *pg = malloc(Mc * N * 2u);
    uint64_t *ro = malloc((Mc + 1) * sizeof *ro);
    uint32_t *col = NULL;
    uint16_t *pb = NULL;
    size_t nnz = 0;
    bt_sup cs;
    memset(&cs, 0, sizeof cs);
    int ok = 0;
    if (pg && ro && tw_test_control(TW_TC_TD_DOWNLOAD_P, gst, Mc, pg) == TWELL_OK) {
        for (size_t i = 0; i < Mc * N; i++)
            nnz += tw_half_to_f32(s->dtype, pg[i]) > 0.0f;
        col = malloc((nnz + 1) * sizeof *col);
        pb = malloc((nnz + 1) * sizeof *pb);
    }
    if (!col || !pb || bt_sup_make(&cs, s, csv)) {
        snprintf(c->note, c->notelen, "dense check: out of host memory or download failed");
        goto done;
    }
    size_t e = 0;
    for (size_t m = 0; m < Mc; m++) {
        ro[m] = e;
        for (size_t n = 0; n < N; n++)
            if (tw_half_to_f32(s->dtype, pg[m * N + n]) > 0.0f)
                col[e] = (uint32_t)n, pb[e++] = pg[m * N + n];
    }
    ro[Mc] = e;
    tw_train_support gsup = {Mc, ro, col, pb};
    bt_compare(c, &gsup, &cs.sup);
    double d16, dxt, d32;
    ok = bt_dense_tol(c, &d16, &dxt, &d32);
    snprintf(c->note, c->notelen,
             "CPU check (dense path), first %zu rows: row-rel y %.1e (tol %.1e) dx %.1e (tol "
             "%.1e) dWg %.1e dWu %.1e dWd %.1e (tol %.1e); gate vs CPU: %zu flips, %zu values "
             "(%zu rows, %zu neurons out)",
             Mc, res->err[0], d16, res->err[1], dxt, res->err[2], res->err[3], res->err[4], d32,
             res->diff, res->values, res->rows_out, res->nrn_out);
done:
    free(pg), free(ro), free(col), free(pb);
    bt_sup_free(&cs);
    return ok;
}

/* Heavy rows ran dense by block (hrows of them, over hthr active values): the dense path's
 * tolerances, on the GPU's support with the heavy rows' taken from the CPU's. */
static int bt_judge_heavy(bt_chk *c, const bt_sup *gs, const bt_sup *cs, size_t hrows,
                          uint32_t hthr) {
    bt_check_res *res = c->res;
    bt_sup hs;
    size_t found = 0;
    if (bt_sup_heavy(&hs, &gs->sup, &cs->sup, hthr, &found)) {
        bt_sup_free(&hs);
        snprintf(c->note, c->notelen, "out of host memory for the check");
        return 0;
    }
    bt_compare(c, &hs.sup, &cs->sup);
    bt_sup_free(&hs);
    double d16, dxt, d32;
    int ok = bt_dense_tol(c, &d16, &dxt, &d32);
    snprintf(c->note, c->notelen,
             "CPU check (heavy rows dense by block: %zu of %zu rows over %u active, %zu "
             "found empty in the sparse state; their gate taken as the CPU's), first %zu "
             "rows: row-rel y %.1e (tol %.1e) dx %.1e (tol %.1e) dWg %.1e dWu %.1e dWd %.1e "
             "(tol %.1e); gate vs CPU: %zu flips, %zu values (%zu rows, %zu neurons out)",
             hrows, c->Mc, hthr, found, c->Mc, res->err[0], d16, res->err[1], dxt, res->err[2],
             res->err[3], res->err[4], d32, res->diff, res->values, res->rows_out, res->nrn_out);
    return ok;
}

/* The sparse path: y and dx row-relative, the weight gradients against the fp64 model on the
 * neurons whose support agrees (and row-relative against the CPU's unless U/dT ran tiled). */
static int bt_judge_sparse(bt_chk *c, const bt_sup *gs, const bt_sup *cs, twell_train_state *gst,
                           const tw_synth_ffn *f, const uint16_t *hdy, float lambda) {
    const twell_shape *s = c->s;
    bt_check_res *res = c->res;
    size_t Mc = c->Mc, wk = (size_t)s->N * s->K;
    bt_compare(c, &gs->sup, &cs->sup);
    double t16 = s->dtype == TWELL_DTYPE_BF16 ? 5e-3 : 1e-3;
    int tiled = 0; /* see the file comment */
    (void)tw_test_control(TW_TC_TRAIN_UDT_TILED, gst, &tiled);
    tw_train_wcheck wr[2]; /* [0] the GPU, [1] the CPU reference */
    const float *gw = c->gw, *rw = c->rw;
    const float *const wp[6] = {gw, gw + wk, gw + 2 * wk, rw, rw + wk, rw + 2 * wk};
    if (tw_train_wgrad_check(s->dtype, s->K, s->N, &cs->sup, f->x, f->wu, f->wd, hdy, lambda, wp, 2,
                             c->nrn_same, wr) != 0) {
        snprintf(c->note, c->notelen, "out of host memory for the fp64 weight-gradient check");
        return 0;
    }
    const tw_train_wcheck *wg = wr, *wc = wr + 1;
    double wsc = 0.0;
    for (int t = 0; t < 3; t++)
        wsc = wg->worst[t] > wsc ? wg->worst[t] : wsc;
    int ok = res->rows_out * 100 <= Mc && res->err[0] <= t16 && res->err[1] <= t16 &&
             wsc <= TW_WCHECK_TOL &&
             (tiled || (res->err[2] <= 1e-5 && res->err[3] <= 1e-5 && res->err[4] <= 1e-5));
    snprintf(c->note, c->notelen,
             "CPU check, first %zu rows: row-rel y %.1e dx %.1e (tol %.0e); weight gradients vs "
             "fp64, scaled by sum|terms| (tol %.0e): dWg %.1e dWu %.1e dWd %.1e (CPU reference "
             "%.1e %.1e %.1e; %zu neurons, %zu U signs within rounding); row-rel vs CPU dWg %.1e "
             "dWu %.1e dWd %.1e (%s); gate vs CPU: %zu flips, %zu values (%zu rows, %zu neurons "
             "out)",
             Mc, res->err[0], res->err[1], t16, TW_WCHECK_TOL, wg->worst[0], wg->worst[1],
             wg->worst[2], wc->worst[0], wc->worst[1], wc->worst[2], wg->neurons, wg->sign_amb,
             res->err[2], res->err[3], res->err[4], tiled ? "tiled U/dT: not applied" : "tol 1e-05",
             res->diff, res->values, res->rows_out, res->nrn_out);
    return ok;
}

int bt_check(bench_env *env, const twell_shape *s, const tw_synth_ffn *f, const uint16_t *hdy,
             float lambda, const bt_ours *o, bt_check_res *res, char *note, size_t notelen) {
    twell_ctx *ctx = env->ctx;
    size_t Mc = o->M < 8 * env->opts->check_rows ? o->M : 8 * env->opts->check_rows;
    if (Mc < 1)
        Mc = 1;
    memset(res, 0, sizeof *res);
    res->Mc = Mc;
    bt_chk c = {s, Mc, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, res, note, notelen};
    twell_ctx *cpu = NULL;
    twell_plan *cplan = NULL;
    twell_train_state *cst = NULL, *gst = NULL;
    tw_cuda_train_host h;
    memset(&h, 0, sizeof h);
    bt_sup cs, gs;
    memset(&cs, 0, sizeof cs);
    memset(&gs, 0, sizeof gs);
    int ok = 0, gdense = 0;
    twell_status st =
        bt_chk_alloc(&c) ? TWELL_ERR_NO_MEMORY : bt_cpu_run(&c, f, hdy, lambda, &cpu, &cplan, &cst);
    if (st != TWELL_OK) {
        snprintf(note, notelen, "CPU reference: %s: %s", twell_status_name(st),
                 cpu ? twell_ctx_errmsg(cpu) : "out of memory");
        goto done;
    }
    if ((st = bt_gpu_run(env, &c, o, lambda, &gst, &gdense, &h)) != TWELL_OK) {
        snprintf(note, notelen, "GPU run of the check rows: %s: %s", twell_status_name(st),
                 twell_ctx_errmsg(ctx));
        goto done;
    }
    if (gdense) { /* the dense path: its saved gate gives the support; its own tolerances */
        ok = bt_judge_dense(&c, gst, cst->backend_data);
        goto done;
    }
    if (bt_sup_gpu(&gs, s, Mc, &h) || bt_sup_make(&cs, s, cst->backend_data)) {
        snprintf(note, notelen, "out of host memory for the check");
        goto done;
    }
    size_t hrows = 0;
    uint64_t hnnz = 0;
    uint32_t hthr = 0;
    if (tw_test_control(TW_TC_TRAIN_HEAVY_ROWS, gst, &hrows, &hnnz, &hthr) == TWELL_OK && hrows > 0)
        ok = bt_judge_heavy(&c, &gs, &cs, hrows, hthr);
    else
        ok = bt_judge_sparse(&c, &gs, &cs, gst, f, hdy, lambda);
done:
    bt_chk_free(&c);
    bt_sup_free(&cs);
    bt_sup_free(&gs);
    (void)tw_test_control(TW_TC_TRAIN_HOST_FREE, &h);
    twell_train_state_destroy(gst);
    twell_train_state_destroy(cst);
    twell_plan_destroy(cplan);
    twell_ctx_destroy(cpu);
    return ok;
}

/* ---- the full-M run and the dense baseline ---- */

int bt_poison_check(bench_env *env, const twell_shape *s, const bt_ours *o, char *note,
                    size_t notelen) {
    twell_ctx *ctx = env->ctx;
    size_t n = o->M * s->K, wk = (size_t)s->N * s->K;
    uint16_t *h = malloc(n * 2);
    float *w = malloc(wk * 4);
    int ok = h && w;
    const void *d16[2] = {o->y, o->dx};
    const float *d32[3] = {o->dwg, o->dwu, o->dwd};
    for (int t = 0; ok && t < 2; t++) {
        ok = tw_cuda_memcpy_dtoh(ctx, h, d16[t], n * 2) == TWELL_OK;
        for (size_t i = 0; ok && i < n; i++)
            if (h[i] == 0xFFFFu || !isfinite(tw_half_to_f32(s->dtype, h[i]))) {
                snprintf(note, notelen, "%s[%zu] = %04x: never written or not finite",
                         t ? "dx" : "y", i, h[i]);
                ok = 0;
            }
    }
    for (int t = 0; ok && t < 3; t++) {
        ok = tw_cuda_memcpy_dtoh(ctx, w, d32[t], wk * 4) == TWELL_OK;
        for (size_t i = 0; ok && i < wk; i++)
            if (!isfinite(w[i])) {
                snprintf(note, notelen, "dW%d[%zu] never written or not finite", t, i);
                ok = 0;
            }
    }
    free(h);
    free(w);
    return ok;
}

/* The dense baseline's H, dH, dU, dG are rounded to dtype, ours keep U and the sums in fp32, so
 * they differ at the 1e-3 level; a transposed or misplaced GEMM would give O(1). */
double bt_dense_agree(bench_env *env, const twell_shape *s, const bt_ours *o, bt_dense *d) {
    twell_ctx *ctx = env->ctx;
    size_t n = o->M * s->K, wk = (size_t)s->N * s->K;
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    float *fa = malloc(wk * 4), *fb = malloc(wk * 4);
    double worst = -1.0;
    if (a && b && fa && fb && bt_dense_step(d) == TWELL_OK &&
        tw_cuda_synchronize(ctx) == TWELL_OK) {
        worst = 0.0;
        const void *ours16[2] = {o->y, o->dx}, *dense16[2] = {d->y, d->dx};
        const float *ours32[3] = {o->dwg, o->dwu, o->dwd}, *dense32[3] = {d->dwg, d->dwu, d->dwd};
        for (int t = 0; t < 2 && worst >= 0.0; t++) {
            if (tw_cuda_memcpy_dtoh(ctx, a, ours16[t], n * 2) != TWELL_OK ||
                tw_cuda_memcpy_dtoh(ctx, b, dense16[t], n * 2) != TWELL_OK) {
                worst = -1.0;
                break;
            }
            double e = tw_train_err_h(s->dtype, b, a, o->M, s->K, NULL, NULL, NULL, NULL);
            if (!(e <= worst))
                worst = e;
        }
        for (int t = 0; t < 3 && worst >= 0.0; t++) {
            if (tw_cuda_memcpy_dtoh(ctx, fa, ours32[t], wk * 4) != TWELL_OK ||
                tw_cuda_memcpy_dtoh(ctx, fb, dense32[t], wk * 4) != TWELL_OK) {
                worst = -1.0;
                break;
            }
            double e = tw_train_err_f(fb, fa, s->N, s->K, NULL, NULL, NULL, NULL);
            if (!(e <= worst))
                worst = e;
        }
    }
    free(a);
    free(b);
    free(fa);
    free(fb);
    return worst;
}
