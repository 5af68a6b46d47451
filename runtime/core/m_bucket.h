/*
 * m_bucket.h — the M bucket, computed here only: configurations are tuned, stored and chosen
 * per bucket of the row count M (the smallest power of two ≥ M), so M = 3000 and M = 4096 share
 * one tuning. The tuner keys its records by tw_m_bucket; plans index their per-bucket tables by
 * tw_m_bucket_log2.
 */
#ifndef TWELL_M_BUCKET_H
#define TWELL_M_BUCKET_H

#include <stddef.h>

/* Buckets are 2^0 .. 2^TW_M_BUCKET_LOG2_MAX (larger M saturates): a per-bucket table has
 * TW_M_BUCKETS entries. */
#define TW_M_BUCKET_LOG2_MAX 62u
#define TW_M_BUCKETS 64

/* log2 of M's bucket: 0 for M ≤ 1, else ceil(log2 M), at most TW_M_BUCKET_LOG2_MAX. */
static inline unsigned tw_m_bucket_log2(size_t M) {
    if (M <= 1)
        return 0;
    unsigned b = 64u - (unsigned)__builtin_clzll((unsigned long long)(M - 1));
    return b < TW_M_BUCKET_LOG2_MAX ? b : TW_M_BUCKET_LOG2_MAX;
}

/* M's bucket: the smallest power of two ≥ M (1 for M ≤ 1), saturating at 2^62. */
static inline size_t tw_m_bucket(size_t M) { return (size_t)1 << tw_m_bucket_log2(M); }

#endif /* TWELL_M_BUCKET_H */
