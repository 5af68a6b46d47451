/* pool.c — a small fixed pool of worker threads for the CPU backend's parallel loops. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct tw_pool {
    int threads; /* workers including the calling thread */
    pthread_t *tids;
    /* Held by the caller whose job the workers run: the job fields below describe one job at a
     * time, and a second caller overwriting them made workers skip or repeat a job and the
     * callers wait forever or return before their chunks ran. */
    pthread_mutex_t job;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long generation; /* bumped per job so workers run each job once */
    int pending;              /* workers still busy with the current job */
    int quit;
    void (*fn)(void *, size_t, size_t);
    void *arg;
    size_t n;
};

/* Chunk i of n items over t threads: worker i (1..t-1) takes chunk i, the caller chunk 0. */
static void tw_chunk(size_t n, size_t t, size_t i, size_t *b, size_t *e) {
    *b = n * i / t;
    *e = n * (i + 1) / t;
}

static void tw_pool_chunk(const tw_pool *p, int i, size_t *b, size_t *e) {
    tw_chunk(p->n, (size_t)p->threads, (size_t)i, b, e);
}

typedef struct {
    tw_pool *pool;
    int index;
} tw_worker_arg;

static void *tw_pool_worker(void *raw) {
    tw_worker_arg *wa = raw;
    tw_pool *p = wa->pool;
    int index = wa->index;
    free(wa);
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->quit)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        size_t b, e;
        tw_pool_chunk(p, index, &b, &e);
        if (b < e)
            p->fn(p->arg, b, e);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

twell_status tw_pool_create(int threads, tw_pool **out) {
    *out = NULL;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)(n > 256 ? 256 : n) : 1;
    }
    tw_pool *p = calloc(1, sizeof *p);
    if (!p)
        return TWELL_ERR_NO_MEMORY;
    p->threads = 1;
    pthread_mutex_init(&p->job, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    if (threads > 1) {
        p->tids = calloc((size_t)threads, sizeof *p->tids);
        if (!p->tids) {
            tw_pool_destroy(p);
            return TWELL_ERR_NO_MEMORY;
        }
        for (int i = 1; i < threads; i++) {
            tw_worker_arg *wa = malloc(sizeof *wa);
            if (!wa)
                break;
            wa->pool = p;
            wa->index = i;
            if (pthread_create(&p->tids[i], NULL, tw_pool_worker, wa) != 0) {
                free(wa);
                break; /* fewer threads is still correct */
            }
            p->threads = i + 1;
        }
    }
    *out = p;
    return TWELL_OK;
}

void tw_pool_destroy(tw_pool *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->threads; i++)
        pthread_join(p->tids[i], NULL);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->job);
    free(p->tids);
    free(p);
}

int tw_pool_threads(const tw_pool *p) { return p ? p->threads : 1; }

void tw_pool_for(tw_pool *p, size_t n, void (*fn)(void *, size_t, size_t), void *arg) {
    if (n == 0)
        return;
    if (!p || p->threads == 1 || n == 1) {
        fn(arg, 0, n);
        return;
    }
    /* Busy (another thread's job, or a loop nested in one of this pool's chunks): run the same
     * chunks here, one after another, so the result is the one the workers would give and a
     * nested loop cannot wait for itself. */
    if (pthread_mutex_trylock(&p->job) != 0) {
        for (size_t i = 0, t = (size_t)p->threads; i < t; i++) {
            size_t b, e;
            tw_chunk(n, t, i, &b, &e);
            if (b < e)
                fn(arg, b, e);
        }
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->pending = p->threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    size_t b, e;
    tw_pool_chunk(p, 0, &b, &e);
    if (b < e)
        fn(arg, b, e);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->job);
}
