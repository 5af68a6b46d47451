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
