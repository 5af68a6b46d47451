/*
 * dense_split_factor.c — the split-K factor rule of the hand-written Hopper GEMMs
 * (tw_ffn_dense_split, dense_split.h): slices that fill one wave of the device's clusters. Pure.
 */
#include "dense_split.h"

unsigned tw_ffn_dense_split(size_t units, unsigned kblocks, unsigned clusters) {
    if (units == 0 || clusters == 0 || units >= clusters)
        return 1u;
    size_t split = clusters / units;
    unsigned cap = kblocks / TW_POLICY_SPLIT_MIN_KB;
    if (cap > TW_POLICY_SPLIT_MAX)
        cap = TW_POLICY_SPLIT_MAX;
    if (split > cap)
        split = cap;
    return split < 2u ? 1u : (unsigned)split;
}
