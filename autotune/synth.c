/* synth.c — deterministic synthetic sparse FFN data (counter-based: every element is a hash of
 * (seed, tensor, index), so any thread split gives the same bytes), nnz statistics of packed
 * buffers, and a dense fp64 FFN for error reports. */
#include "synth.h"

#include "half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

tw_synth_params tw_synth_params_default(void) {
    tw_synth_params p;
    memset(&p, 0, sizeof p);
    p.M = 256;
    p.K = 2048;
    p.N = 5632;
    p.dtype = TWELL_DTYPE_BF16;
    p.gated = 1;
    p.nnz = 29.0;
    p.dist = TW_SYNTH_UNIFORM;
    p.seed = 1;
    p.heavy_frac = 0.02;
    p.seq_len = 2048;
    return p;
}

const char *tw_synth_dist_name(tw_synth_dist d) {
    return d == TW_SYNTH_SKEWED ? "skewed" : d == TW_SYNTH_UNIFORM ? "uniform" : "unknown";
}

int tw_synth_dist_parse(const char *name, tw_synth_dist *out) {
    if (name && !strcmp(name, "uniform"))
        *out = TW_SYNTH_UNIFORM;
    else if (name && !strcmp(name, "skewed"))
        *out = TW_SYNTH_SKEWED;
    else
        return -1;
    return 0;
}

/* ---- counter-based random numbers ---- */

static uint64_t tw_splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Streams: one per tensor / per-row / per-neuron parameter, so they never share counters. */
enum { TW_S_X = 1, TW_S_WG, TW_S_WU, TW_S_WD, TW_S_NEURON, TW_S_ROW };

static uint64_t tw_stream_key(uint64_t seed, uint64_t stream) {
    return tw_splitmix64(seed ^ tw_splitmix64(stream * 0x632be59bd9b4e019ull));
}

/* Uniform in (0, 1) from 53 bits. */
static double tw_unif(uint64_t key, uint64_t i) {
    return ((double)(tw_splitmix64(key + i) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Approximately N(0, 1): four 16-bit uniforms summed (Irwin–Hall), one hash per element; cheap,
 * and the sums over K that set sparsity are Gaussian by the central limit theorem anyway. */
static float tw_gauss(uint64_t key, uint64_t i) {
    uint64_t r = tw_splitmix64(key + i);
    float s = 0.0f;
    for (int j = 0; j < 4; j++)
        s += ((float)((r >> (16 * j)) & 0xffffu) + 0.5f) * (1.0f / 65536.0f) - 0.5f;
    return s * 1.7320508f; /* sqrt(3): four U(-1/2, 1/2) have variance 1/3 */
}

/* b with P(Z > b) = p for Z ~ N(0, 1), by bisection on erfc (monotone, no tables needed). */
static double tw_norm_upper_quantile(double p) {
    if (p >= 1.0)
        return -8.0;
    if (p <= 0.0)
        return 30.0;
    double lo = -40.0, hi = 40.0;
    for (int it = 0; it < 100; it++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(mid / sqrt(2.0)) > p)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* ---- generation ---- */

typedef struct {
    const tw_synth_params *p;
    uint16_t *x, *wg, *wu, *wd, *wpack;
    const double *thresh; /* b_n per neuron */
    double scale_first, scale_heavy;
} tw_synth_job;

static double tw_row_scale(const tw_synth_job *job, size_t m) {
    const tw_synth_params *p = job->p;
    if (p->dist != TW_SYNTH_SKEWED)
        return 1.0;
    if (tw_unif(tw_stream_key(p->seed, TW_S_ROW), m) < p->heavy_frac)
        return job->scale_heavy;
    if (p->seq_len && m % p->seq_len == 0)
        return job->scale_first;
    return 1.0;
}

static void tw_synth_x_rows(void *arg, size_t begin, size_t end) {
    const tw_synth_job *job = arg;
    const tw_synth_params *p = job->p;
    uint64_t key = tw_stream_key(p->seed, TW_S_X);
    size_t K = p->K;
    for (size_t m = begin; m < end; m++) {
        float s = (float)tw_row_scale(job, m);
        uint16_t *row = job->x + m * K;
        row[0] = tw_f32_to_half(p->dtype, 1.0f); /* the constant feature the thresholds use */
        for (size_t k = 1; k < K; k++)
            row[k] = tw_f32_to_half(p->dtype, s * tw_gauss(key, m * K + k));
    }
}

static void tw_synth_w_rows(void *arg, size_t begin, size_t end) {
    const tw_synth_job *job = arg;
    const tw_synth_params *p = job->p;
    size_t K = p->K;
    float sd = (float)(1.0 / sqrt((double)K));
    uint16_t *ws[3] = {job->wg, job->wu, job->wd};
    int ids[3] = {TW_S_WG, TW_S_WU, TW_S_WD};
    for (int t = 0; t < 3; t++) {
        if (!ws[t])
            continue;
        uint64_t key = tw_stream_key(p->seed, (uint64_t)ids[t]);
        for (size_t n = begin; n < end; n++) {
            uint16_t *row = ws[t] + n * K;
            for (size_t k = 0; k < K; k++)
                row[k] = tw_f32_to_half(p->dtype, sd * tw_gauss(key, n * K + k));
            if (ws[t] == job->wpack)
                row[0] = tw_f32_to_half(p->dtype, (float)-job->thresh[n]);
        }
    }
}

/* Per-neuron firing probabilities (at row scale 1) turned into thresholds. */
static void tw_synth_thresholds(const tw_synth_params *p, double *b) {
    double p0 = p->nnz / (double)p->N;
    if (p->dist != TW_SYNTH_SKEWED) {
        double b0 = tw_norm_upper_quantile(p0);
        for (uint32_t n = 0; n < p->N; n++)
            b[n] = b0;
        return;
    }
    /* 30% dead neurons; the others get log-normal weights scaled so their rates sum to nnz. */
    uint64_t key = tw_stream_key(p->seed, TW_S_NEURON);
    double sum = 0.0;
    for (uint32_t n = 0; n < p->N; n++) {
        int dead = tw_unif(key, 2u * (uint64_t)n) < 0.3;
        b[n] = dead ? -1.0 : exp(1.0 * (double)tw_gauss(key, 2u * (uint64_t)n + 1u));
        if (!dead)
            sum += b[n];
    }
    if (sum <= 0.0) { /* every neuron drew dead (tiny N): keep neuron 0 alive */
        b[0] = 1.0;
        sum = 1.0;
    }
    for (uint32_t n = 0; n < p->N; n++) {
        if (b[n] < 0.0) {
            b[n] = 30.0; /* never fires: z has unit scale */
            continue;
        }
        double pn = p->nnz * b[n] / sum;
        b[n] = tw_norm_upper_quantile(pn > 0.5 ? 0.5 : pn);
    }
}

twell_status tw_synth_fill(tw_pool *pool, const tw_synth_params *p, uint16_t *x, uint16_t *wg,
                           uint16_t *wu, uint16_t *wd) {
    if (!p || !x || !wu || !wd || (p->gated && !wg) || p->K < 2 || p->N == 0 || p->M == 0 ||
        !(p->nnz > 0.0 && p->nnz <= (double)p->N) || !(p->heavy_frac >= 0.0) ||
        p->heavy_frac > 1.0 || (p->dtype != TWELL_DTYPE_BF16 && p->dtype != TWELL_DTYPE_FP16) ||
        (p->dist != TW_SYNTH_UNIFORM && p->dist != TW_SYNTH_SKEWED))
        return TWELL_ERR_INVALID_ARG;
    double *b = malloc((size_t)p->N * sizeof *b);
    if (!b)
        return TWELL_ERR_NO_MEMORY;
    tw_synth_thresholds(p, b);
    /* Row scales: a heavy row fires ~20% of a typical neuron, a first token ~8x the mean. */
    double p0 = p->nnz / (double)p->N, b0 = tw_norm_upper_quantile(p0);
    double q8 = tw_norm_upper_quantile(8.0 * p0 > 0.5 ? 0.5 : 8.0 * p0);
    tw_synth_job job = {p, x, p->gated ? wg : NULL, wu, wd, p->gated ? wg : wu, b, 1.0, 1.0};
    if (b0 > 0.8416)
        job.scale_heavy = b0 / 0.8416; /* 0.8416 = upper 20% quantile */
    if (b0 > q8 && q8 > 0.0)
        job.scale_first = b0 / q8;
    tw_pool_for(pool, p->M, tw_synth_x_rows, &job);
    tw_pool_for(pool, p->N, tw_synth_w_rows, &job);
    free(b);
    return TWELL_OK;
}

twell_status tw_synth_create(tw_pool *pool, const tw_synth_params *p, tw_synth_ffn **out) {
    *out = NULL;
    if (!p || p->K == 0 || p->N == 0 || p->M == 0 || p->M > SIZE_MAX / 2 / p->K)
        return TWELL_ERR_INVALID_ARG;
    tw_synth_ffn *f = calloc(1, sizeof *f);
    if (!f)
        return TWELL_ERR_NO_MEMORY;
    f->p = *p;
    size_t wn = (size_t)p->N * p->K;
    f->x = malloc(p->M * p->K * sizeof *f->x);
    f->wu = malloc(wn * sizeof *f->wu);
    f->wd = malloc(wn * sizeof *f->wd);
    if (p->gated)
        f->wg = malloc(wn * sizeof *f->wg);
    if (!f->x || !f->wu || !f->wd || (p->gated && !f->wg)) {
        tw_synth_destroy(f);
        return TWELL_ERR_NO_MEMORY;
    }
    twell_status st = tw_synth_fill(pool, p, f->x, f->wg, f->wu, f->wd);
    if (st != TWELL_OK) {
        tw_synth_destroy(f);
        return st;
    }
    *out = f;
    return TWELL_OK;
}

void tw_synth_destroy(tw_synth_ffn *f) {
    if (!f)
        return;
    free(f->x);
    free(f->wg);
    free(f->wu);
    free(f->wd);
    free(f);
}

const uint16_t *tw_synth_pack_weight(const tw_synth_ffn *f) { return f->p.gated ? f->wg : f->wu; }

/* ---- reports ---- */

void tw_synth_packed_stats(const twell_shape *s, size_t M, const uint32_t *packed,
                           tw_synth_stats *out) {
    memset(out, 0, sizeof *out);
    uint32_t words = s->T / s->C, slots = words - 1, tiles = s->N / s->T;
    out->rows = M;
    out->min_row = UINT32_MAX;
    for (size_t m = 0; m < M; m++) {
        const uint32_t *row = packed + m * (s->N / s->C);
        uint32_t row_nnz = 0;
        int over = 0;
        for (uint32_t t = 0; t < tiles; t++) {
            uint32_t c = row[(size_t)t * words];
            row_nnz += c;
            if (c > out->max_tile)
                out->max_tile = c;
            if (c > slots) {
                out->overflow_tiles++;
                over = 1;
            }
        }
        out->total += row_nnz;
        out->overflow_rows += (size_t)over;
        if (row_nnz > out->max_row)
            out->max_row = row_nnz;
        if (row_nnz < out->min_row)
            out->min_row = row_nnz;
    }
    if (M == 0)
        out->min_row = 0;
    out->mean_row = M ? (double)out->total / (double)M : 0.0;
}

typedef struct {
    const twell_shape *s;
    const uint16_t *x, *wg, *wu, *wd;
    const size_t *rows;
    size_t nrows, parts;
    double *y64;
    double **scratch;
} tw_ffn64_job;

/* Σ x[k]·w[k] in fp64 (products of 16-bit values are exact); four accumulators for speed. */
static double tw_dot64(twell_dtype dt, const double *x, const uint16_t *w, size_t K) {
    double a[4] = {0, 0, 0, 0};
    size_t k = 0;
    if (dt == TWELL_DTYPE_BF16)
        for (; k + 4 <= K; k += 4)
            for (int j = 0; j < 4; j++)
                a[j] += x[k + (size_t)j] * (double)tw_bf16_to_f32(w[k + (size_t)j]);
    for (; k < K; k++)
        a[k & 3] += x[k] * (double)tw_half_to_f32(dt, w[k]);
    return (a[0] + a[1]) + (a[2] + a[3]);
}

static void tw_ffn64_part(void *arg, size_t begin, size_t end) {
    const tw_ffn64_job *job = arg;
    const twell_shape *s = job->s;
    size_t K = s->K;
    for (size_t part = begin; part < end; part++) {
        double *xd = job->scratch[part];
        for (size_t i = job->nrows * part / job->parts; i < job->nrows * (part + 1) / job->parts;
             i++) {
            const uint16_t *xr = job->x + job->rows[i] * K;
            double *y = job->y64 + i * K;
            for (size_t k = 0; k < K; k++)
                xd[k] = (double)tw_half_to_f32(s->dtype, xr[k]);
            memset(y, 0, K * sizeof *y);
            const uint16_t *wpack = s->gated ? job->wg : job->wu;
            for (uint32_t n = 0; n < s->N; n++) {
                double g = tw_dot64(s->dtype, xd, wpack + (size_t)n * K, K);
                if (!(g > 0.0))
                    continue; /* relu: the neuron contributes exactly 0 */
                double h = s->gated ? g * tw_dot64(s->dtype, xd, job->wu + (size_t)n * K, K) : g;
                const uint16_t *wdn = job->wd + (size_t)n * K;
                for (size_t k = 0; k < K; k++)
                    y[k] += h * (double)tw_half_to_f32(s->dtype, wdn[k]);
            }
        }
    }
}

twell_status tw_synth_ffn64(tw_pool *pool, const twell_shape *s, const uint16_t *x,
                            const uint16_t *wg, const uint16_t *wu, const uint16_t *wd,
                            const size_t *rows, size_t nrows, double *y64) {
    if (nrows == 0)
        return TWELL_OK;
    size_t parts = (size_t)tw_pool_threads(pool);
    if (parts > nrows)
        parts = nrows;
    double **sc = calloc(parts, sizeof *sc);
    twell_status st = sc ? TWELL_OK : TWELL_ERR_NO_MEMORY;
    for (size_t i = 0; st == TWELL_OK && i < parts; i++)
        if (!(sc[i] = malloc((size_t)s->K * sizeof(double))))
            st = TWELL_ERR_NO_MEMORY;
    if (st == TWELL_OK) {
        tw_ffn64_job job = {s, x, wg, wu, wd, rows, nrows, parts, y64, sc};
        tw_pool_for(pool, parts, tw_ffn64_part, &job);
    }
    for (size_t i = 0; sc && i < parts; i++)
        free(sc[i]);
    free(sc);
    return st;
}

double tw_synth_rel_error(const twell_shape *s, const uint16_t *y, const size_t *rows, size_t nrows,
                          const double *y64) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < nrows; i++)
        for (size_t k = 0; k < s->K; k++) {
            double r = y64[i * s->K + k];
            double d = (double)tw_half_to_f32(s->dtype, y[rows[i] * s->K + k]) - r;
            num += d * d;
            den += r * r;
        }
    if (den == 0.0)
        return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}
