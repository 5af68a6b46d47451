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

/* The dense crossover by M (ffn_policy.h's measurements): from `rows` up to the next entry, dense
 * wins above `density`·N active values per row. Each range takes the value measured inside it
 * (M = 64, 256, 1000, 4096, 16384); the edges sit between the measured M. */
static const struct {
    size_t rows;
    double density;
} tw_policy_dense[] = {
    {TW_POLICY_DENSE_MIN_ROWS, 0.0200},
    {128, 0.0133},
    {512, 0.0090},
    {2048, 0.0166},
    {8192, 0.0145},
};

double tw_ffn_policy_dense_threshold(size_t M, uint32_t N) {
    double density = INFINITY;
    for (size_t i = 0; i < sizeof tw_policy_dense / sizeof tw_policy_dense[0]; i++)
        if (M >= tw_policy_dense[i].rows)
            density = tw_policy_dense[i].density;
    return density * (double)N;
}

tw_ffn_route tw_ffn_policy(const tw_ffn_policy_in *in) {
    if (in->small_ok && in->M <= TW_POLICY_SMALL_MAX_ROWS)
        return TW_ROUTE_SMALL;
    if (!in->dense_ok)
        return TW_ROUTE_TILED;
    size_t min_rows = in->dense_min_rows > 0 ? in->dense_min_rows : TW_POLICY_DENSE_MIN_ROWS;
    if (in->M < min_rows)
        return TW_ROUTE_TILED;
    /* below the smallest dense M (test control may lower it) the threshold of that M applies */
    size_t at = in->M < TW_POLICY_DENSE_MIN_ROWS ? TW_POLICY_DENSE_MIN_ROWS : in->M;
    double thr = in->dense_thr > 0.0 ? in->dense_thr : tw_ffn_policy_dense_threshold(at, in->N);
    if (thr == 0.0)
        return TW_ROUTE_DENSE; /* dense wins at every density here: no estimate needed */
    if (!(in->est >= 0.0))
        return TW_ROUTE_TILED; /* nothing known yet: the path that is fine at low density */
    return in->est > (in->was_dense ? TW_POLICY_STAY * thr : thr) ? TW_ROUTE_DENSE : TW_ROUTE_TILED;
}
