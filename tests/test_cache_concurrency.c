/* test_cache_concurrency.c — the disk cache under concurrent use: a full disk, processes writing
 * the same key and different keys, and threads sharing one handle.
 * labels: unit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cache.h"
#include "tw_cache_test.h"
#include "tw_case_dir.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* A fresh, empty directory for one test case, under the test's own cache directory. */
static void tw_case_dir(const char *name, char *out, size_t n) {
    tw_test_case_dir("test_cache_concurrency", name, out, n);
}

typedef struct {
    tw_cache *c;
    int id;
    twell_status st;
} tw_put_arg;

static void *tw_big_put(void *p) {
    tw_put_arg *a = p;
    static uint8_t big[65536];
    tw_key k = tw_test_key(410 + a->id);
    a->st = tw_cache_put(a->c, TW_CACHE_CUBIN, &k, big, sizeof big - (size_t)a->id);
    return NULL;
}

/* Child body for the full-disk test; returns an exit code naming the first failed check. */
static int tw_full_disk_child(const char *dir) {
    signal(SIGXFSZ, SIG_IGN); /* so write() reports EFBIG instead of killing us */
    struct rlimit rl = {4096, 4096};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 10;
    tw_logbook log = {0};
    tw_cache *c = NULL;
    if (tw_cache_open(dir, 0, tw_test_log, &log, &c) != TWELL_OK || !tw_cache_dir(c))
        return 11;
    static uint8_t big[65536];
    tw_fill(big, sizeof big, 11);
    tw_key k1 = tw_test_key(400), k2 = tw_test_key(401), k3 = tw_test_key(402);
    if (tw_cache_put(c, TW_CACHE_CUBIN, &k1, "small", 5) != TWELL_OK || log.warns != 0)
        return 12; /* fits under the limit */
    if (tw_cache_put(c, TW_CACHE_CUBIN, &k2, big, sizeof big) != TWELL_OK)
        return 13;
    if (log.warns != 1 || !strstr(log.last, strerror(EFBIG)) || !strstr(log.last, dir))
        return 14;
    if (tw_cache_writable(c) || !tw_cache_dir(c)) /* read-only: no more writes, still reads */
        return 15;
    if (tw_cache_put(c, TW_CACHE_CUBIN, &k3, big, 1000) != TWELL_OK || log.warns != 1)
        return 16;
    void *p;
    size_t n;
    if (tw_cache_get(c, TW_CACHE_CUBIN, &k2, &p, &n) != TWELL_OK || n != sizeof big ||
        memcmp(p, big, n))
        return 17;
    free(p);
    if (tw_cache_get(c, TW_CACHE_CUBIN, &k3, &p, &n) != TWELL_OK || n != 1000)
        return 18;
    free(p);
    /* The entry published before the disk filled is still read from it. */
    tw_cache_set_memory_limit(c, 0);
    if (tw_cache_get(c, TW_CACHE_CUBIN, &k1, &p, &n) != TWELL_OK || n != 5 || memcmp(p, "small", 5))
        return 23;
    free(p);
    tw_cache_stats cs;
    tw_cache_get_stats(c, &cs);
    if (cs.disk_hits != 1 || cs.published != 1 || !cs.read_only || cs.memory_only)
        return 24;
    tw_cache_close(c);

    /* Several threads meeting the full disk at once still give one warning in all. */
    tw_logbook log2 = {0};
    if (tw_cache_open(dir, 0, tw_test_log, &log2, &c) != TWELL_OK || !tw_cache_dir(c))
        return 19;
    pthread_t th[4];
    tw_put_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (tw_put_arg){c, i, TWELL_ERR_INTERNAL};
        if (pthread_create(&th[i], NULL, tw_big_put, &args[i]) != 0)
            return 20;
    }
    for (int i = 0; i < 4; i++)
        if (pthread_join(th[i], NULL) != 0 || args[i].st != TWELL_OK)
            return 21;
    if (log2.warns != 1 || tw_cache_writable(c))
        return 22;
    tw_cache_close(c);
    return 0;
}

static void test_cache_full_disk_degrades(void **state) {
    (void)state;
    char dir[1024];
    tw_case_dir("full_disk", dir, sizeof dir);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(tw_full_disk_child(dir));
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    if (WEXITSTATUS(ws) != 0)
        fail_msg("full-disk child failed check %d", WEXITSTATUS(ws));
    /* The failed write left no temp file and no partial entry behind. */
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 1);
    assert_int_equal(temps, 0);
    tw_key k1 = tw_test_key(400);
    tw_cache *c = tw_open(dir, 0, NULL);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k1, "small", 5);
    tw_cache_close(c);
}

/* Forks nproc children that wait on a pipe, then all run body(dir, i) at once. */
static void tw_run_children(size_t nproc, const char *dir, int (*body)(const char *, int)) {
    int gate[2];
    assert_int_equal(pipe(gate), 0);
    pid_t pids[16];
    fflush(NULL);
    assert_true(nproc >= 1 && nproc <= 16);
    for (size_t i = 0; i < nproc; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(gate[1]);
            char ch;
            if (read(gate[0], &ch, 1) != 1)
                _exit(90);
            _exit(body(dir, (int)i));
        }
    }
    close(gate[0]);
    char go[16] = {0};
    assert_int_equal(write(gate[1], go, nproc), nproc);
    close(gate[1]);
    for (size_t i = 0; i < nproc; i++) {
        int ws;
        assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
            fail_msg("child %zu failed (status 0x%x)", i, ws);
    }
}

#define TW_SHARED_LEN (300 * 1024 + 17)

/* get → miss → "compile" → put → get from disk, a few times, all racing the others. */
static int tw_same_key_child(const char *dir, int i) {
    (void)i;
    static uint8_t want[TW_SHARED_LEN];
    tw_fill(want, sizeof want, 77);
    tw_key k = tw_test_key(500);
    for (int round = 0; round < 3; round++) {
        tw_logbook log = {0};
        tw_cache *c = NULL;
        if (tw_cache_open(dir, 0, tw_test_log, &log, &c) != TWELL_OK)
            return 1;
        tw_cache_set_memory_limit(c, 0);
        void *p = NULL;
        size_t n = 0;
        twell_status st = tw_cache_get(c, TW_CACHE_CUBIN, &k, &p, &n);
        if (st == TWELL_OK && (n != sizeof want || memcmp(p, want, n)))
            return 2;
        free(p);
        if (st != TWELL_OK && st != TWELL_ERR_NOT_FOUND)
            return 3;
        if (tw_cache_put(c, TW_CACHE_CUBIN, &k, want, sizeof want) != TWELL_OK)
            return 4;
        if (tw_cache_get(c, TW_CACHE_CUBIN, &k, &p, &n) != TWELL_OK)
            return 5;
        if (n != sizeof want || memcmp(p, want, n))
            return 6;
        free(p);
        tw_cache_stats cs;
        tw_cache_get_stats(c, &cs);
        if (log.warns != 0 || cs.corrupt_removed != 0 || !tw_cache_dir(c))
            return 7;
        tw_cache_close(c);
    }
    return 0;
}

static void test_cache_concurrent_same_key(void **state) {
    (void)state;
    char dir[1024];
    tw_case_dir("same_key", dir, sizeof dir);
    tw_run_children(8, dir, tw_same_key_child);
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 1);
    assert_int_equal(temps, 0);
    static uint8_t want[TW_SHARED_LEN];
    tw_fill(want, sizeof want, 77);
    tw_key k = tw_test_key(500);
    tw_cache *c = tw_open(dir, 0, NULL);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, want, sizeof want);
    tw_cache_verify_report r;
    assert_int_equal(tw_cache_verify(c, &r), TWELL_OK);
    assert_int_equal(r.ok, 1);
    assert_int_equal(r.removed, 0);
    assert_int_equal(r.kept, 0);
    tw_cache_close(c);
}

static int tw_many_keys_child(const char *dir, int i) {
    tw_cache *c = NULL;
    if (tw_cache_open(dir, 0, NULL, NULL, &c) != TWELL_OK)
        return 1;
    uint8_t buf[5000];
    for (int j = 0; j < 4; j++) {
        tw_key k = tw_test_key(600 + 4 * i + j);
        size_t n = 1000 + (size_t)(97 * (4 * i + j));
        tw_fill(buf, n, (uint32_t)(4 * i + j));
        if (tw_cache_put(c, j & 1 ? TW_CACHE_TUNING : TW_CACHE_CUBIN, &k, buf, n) != TWELL_OK)
            return 2;
    }
    int bad = tw_cache_dir(c) == NULL;
    tw_cache_close(c);
    return bad ? 3 : 0;
}

static void test_cache_concurrent_different_keys(void **state) {
    (void)state;
    char dir[1024];
    tw_case_dir("many_keys", dir, sizeof dir);
    tw_run_children(8, dir, tw_many_keys_child);
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 32);
    assert_int_equal(temps, 0);
    tw_cache *c = tw_open(dir, 0, NULL);
    uint8_t buf[5000];
    for (int x = 0; x < 32; x++) {
        tw_key k = tw_test_key(600 + x);
        size_t n = 1000 + (size_t)(97 * x);
        tw_fill(buf, n, (uint32_t)x);
        tw_expect_hit(c, x & 1 ? TW_CACHE_TUNING : TW_CACHE_CUBIN, &k, buf, n);
    }
    tw_cache_verify_report r;
    assert_int_equal(tw_cache_verify(c, &r), TWELL_OK);
    assert_int_equal(r.ok, 32);
    assert_int_equal(r.removed, 0);
    assert_int_equal(r.kept, 0);
    tw_cache_close(c);
}

typedef struct {
    tw_cache *c;
    int id, failures;
} tw_thread_arg;

static void *tw_thread_body(void *p) {
    tw_thread_arg *a = p;
    uint8_t buf[3000], want[3000];
    for (int it = 0; it < 2000; it++) {
        int x = (it * 7 + a->id) % 24;
        tw_key k = tw_test_key(700 + x);
        size_t n = 100 + (size_t)x * 100;
        tw_fill(want, n, (uint32_t)x);
        void *got;
        size_t len;
        twell_status st = tw_cache_get(a->c, TW_CACHE_TUNING, &k, &got, &len);
        if (st == TWELL_OK) {
            a->failures += len != n || memcmp(got, want, n);
            free(got);
        } else {
            a->failures += st != TWELL_ERR_NOT_FOUND;
            memcpy(buf, want, n);
            a->failures += tw_cache_put(a->c, TW_CACHE_TUNING, &k, buf, n) != TWELL_OK;
        }
    }
    return NULL;
}

static void test_cache_threads(void **state) {
    (void)state;
    char dir[1024];
    tw_case_dir("threads", dir, sizeof dir);
    tw_cache *c = tw_open(dir, 0, NULL);
    tw_cache_set_memory_limit(c, 8000); /* small: forces disk reads and memory churn */
    pthread_t th[4];
    tw_thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (tw_thread_arg){c, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, tw_thread_body, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        if (args[i].failures)
            fail_msg("thread %d saw %d wrong results", i, args[i].failures);
    }
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_true(st.disk_hits > 0);
    assert_true(st.mem_bytes <= 8000);
    tw_cache_close(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_full_disk_degrades),
        cmocka_unit_test(test_cache_concurrent_same_key),
        cmocka_unit_test(test_cache_concurrent_different_keys),
        cmocka_unit_test(test_cache_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
