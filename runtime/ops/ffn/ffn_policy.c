/*
 * ffn_policy.c — TWELL_PATH_AUTO's choice between the small-batch, tiled and dense paths of
 * twell_ffn_infer (ffn_policy.h): a pure function of M, the density estimate and what can run.
 */
#include "ffn_policy.h"

#include <math.h>

const char *tw_ffn_route_name(tw_ffn_route r) {
    switch (r) {
    case TW_ROUTE_SMALL:
        return "small";
    case TW_ROUTE_TILED:
        return "tiled";
    case TW_ROUTE_DENSE:
        return "dense";
    }
    return NULL;
}

/* The crossover tables of TWELL_PATH_AUTO, kept here only: twellrt.h, ffn_policy.h and
 * docs/DESIGN.md §5 state the rule and point here, tests/test_ffn_policy.c pins the values.
 *
 * The dense crossover by M (the runs: BENCHMARKS.md "Gate-pack routes and AUTO's crossovers"):
 * from `rows` up to the next entry, dense wins above `density`·N active values per row (0: at
 * every density). Each range takes the value measured inside it; the edges sit between the
 * measured M. */
static const struct {
    size_t rows;
    double density;
} tw_policy_dense[] = {
    {TW_POLICY_DENSE_MIN_ROWS, 0.0300},
    {48, 0.0200},
    {96, 0.0},
    {1448, 0.0085},
    {2896, 0.0139},
    {8192, 0.0131},
};

/* The row kernel's crossover with the dense route by M (the same form as tw_policy_dense). */
static const struct {
    size_t rows;
    double density;
} tw_policy_row[] = {
    {TW_POLICY_ROW_MIN_ROWS, 0.0200},
    {512, 0.0180},
    {1024, 0.0140},
};

#define TW_POLICY_LOOKUP(table, M)                                                                 \
    do {                                                                                           \
        for (size_t i_ = 0; i_ < sizeof table / sizeof table[0]; i_++)                             \
            if ((M) >= table[i_].rows)                                                             \
                density = table[i_].density;                                                       \
    } while (0)

double tw_ffn_policy_dense_threshold(size_t M, uint32_t N) {
    double density = INFINITY;
    TW_POLICY_LOOKUP(tw_policy_dense, M);
    return density * (double)N;
}

double tw_ffn_policy_row_threshold(size_t M, uint32_t N) {
    double density = 0.0;
    TW_POLICY_LOOKUP(tw_policy_row, M);
    return density * (double)N;
}

int tw_ffn_policy_row(const tw_ffn_policy_in *in) {
    if (!in->small_ok || !in->row_ok || in->ovf_seen || in->M < TW_POLICY_ROW_MIN_ROWS ||
        in->M > TW_POLICY_ROW_MAX_ROWS)
        return 0;
    double thr = in->dense_thr > 0.0 ? in->dense_thr : tw_ffn_policy_row_threshold(in->M, in->N);
    if (!(in->est >= 0.0))
        return 1;
    return in->est <= (in->was_dense ? TW_POLICY_STAY * thr : thr);
}

/* Whether the dense path beats the tiled pipeline for `in` (ffn_policy.h, rule 1). */
static int tw_policy_wants_dense(const tw_ffn_policy_in *in) {
    if (!in->dense_ok)
        return 0;
    size_t min_rows = in->dense_min_rows > 0 ? in->dense_min_rows : TW_POLICY_DENSE_MIN_ROWS;
    if (in->M < min_rows)
        return 0;
    /* below the smallest dense M (test control may lower it) the threshold of that M applies */
    size_t at = in->M < TW_POLICY_DENSE_MIN_ROWS ? TW_POLICY_DENSE_MIN_ROWS : in->M;
    double thr = in->dense_thr > 0.0 ? in->dense_thr : tw_ffn_policy_dense_threshold(at, in->N);
    if (thr == 0.0)
        return 1; /* dense wins at every density here: no estimate needed */
    if (!(in->est >= 0.0))
        return 0; /* nothing known yet: the sparse paths are fine at low density */
    return in->est > (in->was_dense ? TW_POLICY_STAY * thr : thr);
}

tw_ffn_route tw_ffn_policy(const tw_ffn_policy_in *in) {
    if (tw_ffn_policy_row(in))
        return TW_ROUTE_SMALL;
    if (tw_policy_wants_dense(in))
        return TW_ROUTE_DENSE;
    if (in->small_ok && in->M <= TW_POLICY_SMALL_MAX_ROWS)
        return TW_ROUTE_SMALL;
    size_t min_rows = in->dense_min_rows > 0 ? in->dense_min_rows : TW_POLICY_DENSE_MIN_ROWS;
    /* a test's threshold (dense_thr) replaces the measured rules, this one included */
    if (in->dense_ok && !(in->dense_thr > 0.0) && (in->heavy_seen || in->ovf_seen) &&
        in->M >= min_rows && in->M <= TW_POLICY_HEAVY_DENSE_MAX_ROWS)
        return TW_ROUTE_DENSE; /* rule 3 */
    return TW_ROUTE_TILED;
}
