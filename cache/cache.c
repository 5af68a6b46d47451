/* cache.c — placeholder (memory-less, always misses) until the disk cache lands. */
#include "cache.h"

#include <stdlib.h>

struct tw_cache {
    int unused;
};

twell_status tw_cache_open(const char *dir, size_t max_bytes, twell_log_fn log, void *log_user,
                           tw_cache **out) {
    (void)dir, (void)max_bytes, (void)log, (void)log_user;
    *out = calloc(1, sizeof **out);
    return *out ? TWELL_OK : TWELL_ERR_NO_MEMORY;
}
void tw_cache_close(tw_cache *c) { free(c); }
twell_status tw_cache_get(tw_cache *c, tw_cache_kind kind, const tw_key *key, void **payload,
                          size_t *len) {
    (void)c, (void)kind, (void)key, (void)payload, (void)len;
    return TWELL_ERR_NOT_FOUND;
}
twell_status tw_cache_put(tw_cache *c, tw_cache_kind kind, const tw_key *key, const void *payload,
                          size_t len) {
    (void)c, (void)kind, (void)key, (void)payload, (void)len;
    return TWELL_OK;
}
const char *tw_cache_dir(const tw_cache *c) { (void)c; return NULL; }
