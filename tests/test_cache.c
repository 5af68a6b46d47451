/* test_cache.c — the disk cache as a store: hit/miss, the memory layer, the default directory,
 * corrupt entries, memory-only fallback, a read-only directory, LRU eviction and stale temp
 * files. The entry format, concurrent use and the `twell cache` tool have their own files
 * (test_cache_entry.c, test_cache_concurrency.c, test_cache_cli.c).
 * unlink is wrapped (the "wrap:" line) so that a deletion can fail even for root, as it does in
 * a read-only directory.
 * labels: unit
 * wrap: unlink */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cache.h"
#include "tw_cache_test.h"
#include "tw_case_dir.h"
#include "tw_run.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* While tw_unlink_errno is nonzero, unlink of tw_unlink_path fails with it. */
static int tw_unlink_errno;
static const char *tw_unlink_path;

int __real_unlink(const char *path);
int __wrap_unlink(const char *path);
int __wrap_unlink(const char *path) {
    if (tw_unlink_errno && tw_unlink_path && !strcmp(path, tw_unlink_path)) {
        errno = tw_unlink_errno;
        return -1;
    }
    return __real_unlink(path);
}

/* A fresh, empty directory for one test case, under the test's own cache directory. */
static void tw_case_dir(const char *name, char *out, size_t n) {
    tw_test_case_dir("test_cache", name, out, n);
}

/* ---- the store ---- */

static void test_cache_hit_miss(void **state) {
    (void)state;
    char dir[1024], path[1200];
    tw_case_dir("hit_miss", dir, sizeof dir);
    tw_key k = tw_test_key(10);
    uint8_t a[3000], b[777];
    tw_fill(a, sizeof a, 1);
    tw_fill(b, sizeof b, 2);

    tw_cache *c = tw_open(dir, 0, NULL);
    assert_string_equal(tw_cache_dir(c), dir);
    assert_int_equal(tw_cache_max_bytes(c), (size_t)1 << 30);
    tw_expect_miss(c, TW_CACHE_CUBIN, &k);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, sizeof a), TWELL_OK);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, a, sizeof a);
    tw_expect_miss(c, TW_CACHE_TUNING, &k); /* kinds never collide */
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.mem_hits, 1);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.puts, 1);
    tw_cache_close(c);

    tw_entry_path(dir, TW_CACHE_CUBIN, &k, path, sizeof path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, TW_CACHE_HEADER_BYTES + sizeof a);

    /* A fresh cache (as another process would) hits from disk, then from memory. */
    c = tw_open(dir, 0, NULL);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, a, sizeof a);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, a, sizeof a);
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.disk_hits, 1);
    assert_int_equal(st.mem_hits, 1);
    /* Overwrite, tuning kind beside it, empty payload. */
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, b, sizeof b), TWELL_OK);
    assert_int_equal(tw_cache_put(c, TW_CACHE_TUNING, &k, a, 10), TWELL_OK);
    tw_key e = tw_test_key(11);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &e, NULL, 0), TWELL_OK);
    tw_cache_close(c);
    c = tw_open(dir, 0, NULL);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, b, sizeof b);
    tw_expect_hit(c, TW_CACHE_TUNING, &k, a, 10);
    tw_expect_hit(c, TW_CACHE_CUBIN, &e, NULL, 0);
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 3);
    assert_int_equal(temps, 0);
    /* Bad arguments are errors, not crashes. */
    void *p;
    size_t len;
    assert_int_equal(tw_cache_get(c, (tw_cache_kind)7, &k, &p, &len), TWELL_ERR_INVALID_ARG);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, NULL, a, 1), TWELL_ERR_INVALID_ARG);
    tw_cache_close(c);
    tw_cache_close(NULL);
}

static void test_cache_memory_layer(void **state) {
    (void)state;
    char dir[1024], path[1200];
    tw_case_dir("memory", dir, sizeof dir);
    uint8_t a[500];
    tw_fill(a, sizeof a, 3);
    tw_key k = tw_test_key(20);
    tw_cache *c = tw_open(dir, 0, NULL);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, sizeof a), TWELL_OK);
    tw_entry_path(dir, TW_CACHE_CUBIN, &k, path, sizeof path);
    assert_int_equal(unlink(path), 0);
    /* Repeated lookups in a process never go back to the disk... */
    tw_expect_hit(c, TW_CACHE_CUBIN, &k, a, sizeof a);
    /* ...unless the memory layer is off. */
    tw_cache_set_memory_limit(c, 0);
    tw_expect_miss(c, TW_CACHE_CUBIN, &k);
    /* Bounded: room for about three entries of 500 bytes. */
    tw_cache_set_memory_limit(c, 3 * (500 + 200));
    for (int i = 0; i < 6; i++) {
        tw_key ki = tw_test_key(30 + i);
        assert_int_equal(tw_cache_put(c, TW_CACHE_TUNING, &ki, a, sizeof a), TWELL_OK);
    }
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_in_range(st.mem_entries, 1, 3);
    assert_true(st.mem_bytes <= 3 * (500 + 200));
    tw_cache_close(c);
}

static void test_cache_default_dir(void **state) {
    (void)state;
    char dir[1024], deep[1200];
    tw_case_dir("default", dir, sizeof dir);
    char *saved[3];
    static const char *vars[3] = {"TWELL_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
    }
    char *d;
    setenv("TWELL_CACHE_DIR", "/x/y", 1);
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    setenv("HOME", "/home/u", 1);
    assert_string_equal(d = tw_cache_default_dir(), "/x/y");
    free(d);
    unsetenv("TWELL_CACHE_DIR");
    assert_string_equal(d = tw_cache_default_dir(), "/xdg/twellrt");
    free(d);
    setenv("XDG_CACHE_HOME", "relative", 1); /* invalid per the XDG spec: ignored */
    assert_string_equal(d = tw_cache_default_dir(), "/home/u/.cache/twellrt");
    free(d);
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    assert_null(tw_cache_default_dir());
    tw_logbook log = {0};
    tw_cache *c = tw_open(NULL, 0, &log); /* nowhere to go: memory-only, one warning */
    assert_null(tw_cache_dir(c));
    assert_int_equal(log.warns, 1);
    tw_cache_close(c);

    /* dir NULL picks up $TWELL_CACHE_DIR and creates missing parents with mode 0700. */
    snprintf(deep, sizeof deep, "%s/p/q/", dir);
    setenv("TWELL_CACHE_DIR", deep, 1);
    c = tw_open(NULL, 0, NULL);
    snprintf(deep, sizeof deep, "%s/p/q", dir);
    assert_string_equal(tw_cache_dir(c), deep); /* trailing slash dropped */
    tw_cache_close(c);
    struct stat sb;
    assert_int_equal(stat(deep, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    snprintf(deep, sizeof deep, "%s/p", dir);
    assert_int_equal(stat(deep, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);

    for (int i = 0; i < 3; i++) {
        if (saved[i])
            setenv(vars[i], saved[i], 1);
        else
            unsetenv(vars[i]);
        free(saved[i]);
    }
}

static void test_cache_corrupt_entries_are_misses(void **state) {
    (void)state;
    char dir[1024], path[1200];
    tw_case_dir("corrupt", dir, sizeof dir);
    uint8_t a[2049], fresh[1500];
    tw_fill(a, sizeof a, 5);
    tw_fill(fresh, sizeof fresh, 6);
    for (int mode = 0; mode < DMG_COUNT; mode++) {
        tw_key k = tw_test_key(100 + mode);
        tw_entry_path(dir, TW_CACHE_CUBIN, &k, path, sizeof path);
        tw_cache *c = tw_open(dir, 0, NULL);
        assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, sizeof a), TWELL_OK);
        tw_cache_close(c);
        tw_damage(path, mode, &k);

        tw_logbook log = {0};
        c = tw_open(dir, 0, &log);
        tw_expect_miss(c, TW_CACHE_CUBIN, &k);
        if (tw_exists(path))
            fail_msg("damage mode %d: corrupt entry was not removed", mode);
        tw_cache_stats st;
        tw_cache_get_stats(c, &st);
        assert_int_equal(st.corrupt_removed, 1);
        assert_int_equal(st.memory_only, 0);
        assert_int_equal(log.warns, 0); /* a miss, not a problem worth a warning */
        /* The caller recompiles and puts; that works and is served to the next process. */
        assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, fresh, sizeof fresh), TWELL_OK);
        tw_cache_close(c);
        c = tw_open(dir, 0, NULL);
        tw_expect_hit(c, TW_CACHE_CUBIN, &k, fresh, sizeof fresh);
        tw_cache_close(c);
    }
    /* Things that are not files under an entry name: a directory is left alone (a miss);
     * a symlink is removed. */
    tw_key kd = tw_test_key(200), ks = tw_test_key(201);
    tw_entry_path(dir, TW_CACHE_CUBIN, &kd, path, sizeof path);
    assert_int_equal(mkdir(path, 0700), 0);
    tw_cache *c = tw_open(dir, 0, NULL);
    tw_expect_miss(c, TW_CACHE_CUBIN, &kd);
    tw_entry_path(dir, TW_CACHE_CUBIN, &ks, path, sizeof path);
    assert_int_equal(symlink("/etc/hostname", path), 0);
    tw_expect_miss(c, TW_CACHE_CUBIN, &ks);
    assert_false(tw_exists(path));
    tw_cache_close(c);
}

/* A directory planted under an entry's name is a foreign entry: a put removes an empty one and
 * publishes; a full one is left, that entry alone stays in memory (one warning naming it), and
 * the cache stays writable for every other entry instead of turning read-only. */
static void test_cache_directory_at_entry_name(void **state) {
    (void)state;
    char dir[1024], path[1200], inner[1300];
    tw_case_dir("dir_entry", dir, sizeof dir);
    uint8_t a[700];
    tw_fill(a, sizeof a, 51);
    tw_key ke = tw_test_key(1400), kf = tw_test_key(1401), ko = tw_test_key(1402);
    tw_logbook log = {0};
    tw_cache *c = tw_open(dir, 0, &log);
    tw_entry_path(dir, TW_CACHE_CUBIN, &ke, path, sizeof path);
    assert_int_equal(mkdir(path, 0700), 0);
    tw_expect_miss(c, TW_CACHE_CUBIN, &ke);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &ke, a, sizeof a), TWELL_OK);
    struct stat sb;
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode)); /* the empty directory made way for the entry */
    assert_int_equal(log.warns, 0);

    tw_entry_path(dir, TW_CACHE_CUBIN, &kf, path, sizeof path);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(inner, sizeof inner, "%s/keep", path);
    tw_write_file(inner, "k", 1);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &kf, a, sizeof a), TWELL_OK);
    assert_true(tw_exists(inner)); /* not ours to delete */
    assert_int_equal(log.warns, 1);
    assert_non_null(strstr(log.last, path));
    tw_expect_hit(c, TW_CACHE_CUBIN, &kf, a, sizeof a); /* from memory */
    assert_int_equal(tw_cache_writable(c), 1);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &ko, a, sizeof a), TWELL_OK);
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.read_only, 0);
    assert_int_equal(st.memory_only, 0);
    assert_int_equal(st.published, 2); /* ke and ko */
    tw_cache_close(c);
    tw_entry_path(dir, TW_CACHE_CUBIN, &ko, path, sizeof path);
    assert_true(tw_exists(path));
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(temps, 0);
    /* Another process: the blocked name is a miss, the others hit. */
    c = tw_open(dir, 0, NULL);
    tw_expect_miss(c, TW_CACHE_CUBIN, &kf);
    tw_expect_hit(c, TW_CACHE_CUBIN, &ke, a, sizeof a);
    tw_expect_hit(c, TW_CACHE_CUBIN, &ko, a, sizeof a);
    tw_cache_close(c);
}

static void test_cache_unusable_dir_memory_only(void **state) {
    (void)state;
    /* Tests run as root, so permissions cannot make a directory unusable: a path below a
     * regular file can never be created. */
    char dir[1024], file[1100], bad[1200];
    tw_case_dir("unusable", dir, sizeof dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(file, sizeof file, "%s/plainfile", dir);
    tw_write_file(file, "x", 1);
    snprintf(bad, sizeof bad, "%s/sub/deeper", file);

    tw_logbook log = {0};
    tw_cache *c = tw_open(bad, 0, &log);
    assert_int_equal(log.warns, 1);
    assert_non_null(strstr(log.last, bad));
    assert_non_null(strstr(log.last, strerror(ENOTDIR)));
    assert_null(tw_cache_dir(c));
    uint8_t a[4000];
    tw_fill(a, sizeof a, 9);
    for (int i = 0; i < 5; i++) {
        tw_key k = tw_test_key(300 + i);
        assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, sizeof a - (size_t)i), TWELL_OK);
    }
    for (int i = 0; i < 5; i++) {
        tw_key k = tw_test_key(300 + i);
        tw_expect_hit(c, TW_CACHE_CUBIN, &k, a, sizeof a - (size_t)i);
    }
    tw_key missing = tw_test_key(399);
    tw_expect_miss(c, TW_CACHE_CUBIN, &missing);
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.memory_only, 1);
    /* Maintenance needs a directory. */
    assert_int_equal(tw_cache_verify(c, NULL), TWELL_ERR_UNSUPPORTED);
    tw_cache_close(c);
    assert_int_equal(log.warns, 1); /* exactly one, however many operations followed */

    /* The regular file itself as the directory. */
    tw_logbook log2 = {0};
    c = tw_open(file, 0, &log2);
    assert_null(tw_cache_dir(c));
    assert_int_equal(log2.warns, 1);
    tw_cache_close(c);
}

/* The directory tw_ro_access denies writing to: what a read-only mount or mode 0500 does to a
 * user that permissions bind (root is not one). */
static const char *tw_ro_dir;

static int tw_ro_access(const char *path, int mode) {
    if ((mode & W_OK) && tw_ro_dir && !strcmp(path, tw_ro_dir)) {
        errno = EACCES;
        return -1;
    }
    return access(path, mode);
}

/* A prewarmed cache shipped read-only (directory 0500, files 0400) serves its entries; puts
 * succeed but stay in memory; one warning says so. */
static void test_cache_read_only_dir_serves_hits(void **state) {
    (void)state;
    char dir[1024], path[1200];
    tw_case_dir("read_only", dir, sizeof dir);
    uint8_t a[3000], b[100];
    tw_fill(a, sizeof a, 21);
    tw_fill(b, sizeof b, 22);
    tw_key k1 = tw_test_key(600), k2 = tw_test_key(601), k3 = tw_test_key(602);
    tw_cache *c = tw_open(dir, 0, NULL);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k1, a, sizeof a), TWELL_OK);
    assert_int_equal(tw_cache_put(c, TW_CACHE_TUNING, &k2, b, sizeof b), TWELL_OK);
    tw_cache_close(c);
    tw_entry_path(dir, TW_CACHE_CUBIN, &k1, path, sizeof path);
    assert_int_equal(chmod(path, 0400), 0);
    tw_entry_path(dir, TW_CACHE_TUNING, &k2, path, sizeof path);
    assert_int_equal(chmod(path, 0400), 0);
    assert_int_equal(chmod(dir, 0500), 0);
    int faked = access(dir, W_OK) == 0;
    if (faked) {
        /* Permissions do not stop this user (root, as in CI): the directory check is told the
         * truth a read-only mount would tell it; everything after the check is the real code. */
        printf("# running as root: mode 0500 does not deny writes, the access check is faked\n");
        tw_ro_dir = dir;
        tw_cache_test_set_access(tw_ro_access);
    }
    tw_logbook log = {0};
    c = tw_open(dir, 0, &log);
    /* Hits from the directory, as a deployed process with a prewarmed cache needs. */
    assert_non_null(tw_cache_dir(c));
    assert_string_equal(tw_cache_dir(c), dir);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k1, a, sizeof a);
    tw_expect_hit(c, TW_CACHE_TUNING, &k2, b, sizeof b);
    assert_int_equal(tw_cache_writable(c), 0);
    assert_int_equal(log.warns, 1);
    assert_non_null(strstr(log.last, dir));
    assert_non_null(strstr(log.last, strerror(EACCES)));
    assert_non_null(strstr(log.last, "read-only"));
    /* A put succeeds and serves later gets, but nothing is written to the directory. */
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k3, b, sizeof b), TWELL_OK);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k1, b, 10), TWELL_OK);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k3, b, sizeof b);
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.disk_hits, 2);
    assert_int_equal(st.puts, 2);
    assert_int_equal(st.published, 0);
    assert_int_equal(st.read_only, 1);
    assert_int_equal(st.memory_only, 0);
    tw_cache_close(c);
    assert_int_equal(log.warns, 1); /* one warning, however many puts were skipped */
    tw_entry_path(dir, TW_CACHE_CUBIN, &k3, path, sizeof path);
    assert_false(tw_exists(path));
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 2);
    assert_int_equal(temps, 0);
    /* The shipped entry is unchanged: a fresh process still reads the prewarmed payload. */
    c = tw_open(dir, 0, NULL);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k1, a, sizeof a);
    tw_cache_close(c);
    tw_cache_test_set_access(NULL);
    tw_ro_dir = NULL;
    assert_int_equal(chmod(dir, 0700), 0);

    /* Writable again: puts are published. */
    c = tw_open(dir, 0, NULL);
    assert_int_equal(tw_cache_writable(c), 1);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k3, b, sizeof b), TWELL_OK);
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.published, 1);
    assert_int_equal(st.read_only, 0);
    tw_cache_close(c);
    assert_true(tw_exists(path));
}

static uint64_t tw_dir_bytes(const char *dir) {
    uint64_t total = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char p[1400];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (de->d_name[0] != '.' && stat(p, &sb) == 0)
            total += (uint64_t)sb.st_size;
    }
    closedir(d);
    return total;
}

static void test_cache_eviction_lru(void **state) {
    (void)state;
    char dir[1024], path[1200];
    tw_case_dir("eviction", dir, sizeof dir);
    enum { PLEN = 1000 };
    size_t esz = tw_cache_entry_size(PLEN), cap = 10 * esz;
    uint8_t a[PLEN];
    tw_fill(a, sizeof a, 13);
    tw_cache *c = tw_open(dir, cap, NULL);
    for (int i = 0; i < 8; i++) {
        tw_key k = tw_test_key(800 + i);
        assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, PLEN), TWELL_OK);
    }
    tw_cache_close(c);
    /* Ages: entry i was last used 1000 - 10 i seconds ago (0 is the oldest). */
    time_t now = time(NULL);
    for (int i = 0; i < 8; i++) {
        tw_key k = tw_test_key(800 + i);
        tw_entry_path(dir, TW_CACHE_CUBIN, &k, path, sizeof path);
        tw_set_mtime(path, now - 1000 + 10 * i);
    }
    /* Another process uses entry 0: the disk hit makes it the youngest. */
    c = tw_open(dir, cap, NULL);
    tw_key k0 = tw_test_key(800);
    tw_expect_hit(c, TW_CACHE_CUBIN, &k0, a, PLEN);
    tw_entry_path(dir, TW_CACHE_CUBIN, &k0, path, sizeof path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_mtime >= now - 5);
    /* Four more entries: 12 would exceed the cap of 10, so the two oldest (1 and 2) go. */
    for (int i = 8; i < 12; i++) {
        tw_key k = tw_test_key(800 + i);
        assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, a, PLEN), TWELL_OK);
    }
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.evicted, 2);
    tw_cache_close(c);
    for (int i = 0; i < 12; i++) {
        tw_key k = tw_test_key(800 + i);
        tw_entry_path(dir, TW_CACHE_CUBIN, &k, path, sizeof path);
        int want = !(i == 1 || i == 2);
        if (tw_exists(path) != want)
            fail_msg("entry %d: exists %d, want %d", i, tw_exists(path), want);
    }
    uint64_t total = tw_dir_bytes(dir);
    if (total > cap)
        fail_msg("directory holds %llu bytes, cap %zu", (unsigned long long)total, cap);

    /* An entry larger than the whole cap evicts everything else but stays itself. */
    c = tw_open(dir, esz / 2, NULL);
    tw_key kb = tw_test_key(850);
    assert_int_equal(tw_cache_put(c, TW_CACHE_TUNING, &kb, a, PLEN), TWELL_OK);
    tw_cache_close(c);
    int entries, temps;
    tw_count_files(dir, &entries, &temps);
    assert_int_equal(entries, 1);
    tw_entry_path(dir, TW_CACHE_TUNING, &kb, path, sizeof path);
    assert_true(tw_exists(path));
}

static void test_cache_stale_temp_cleanup(void **state) {
    (void)state;
    char dir[1024], stale[1200], young[1200];
    tw_case_dir("stale_tmp", dir, sizeof dir);
    tw_cache *c = tw_open(dir, 0, NULL);
    snprintf(stale, sizeof stale, "%s/.tw-tmp-AAAAAA", dir);
    snprintf(young, sizeof young, "%s/.tw-tmp-BBBBBB", dir);
    tw_write_file(stale, "partial", 7);
    tw_write_file(young, "in flight", 9);
    tw_set_mtime(stale, time(NULL) - 2 * 3600);
    tw_key k = tw_test_key(900);
    assert_int_equal(tw_cache_put(c, TW_CACHE_CUBIN, &k, "x", 1), TWELL_OK);
    assert_false(tw_exists(stale));
    assert_true(tw_exists(young)); /* may belong to another process's put */
    size_t removed;
    assert_int_equal(tw_cache_clear(c, &removed), TWELL_OK);
    assert_int_equal(removed, 1);
    assert_true(tw_exists(young));
    tw_expect_miss(c, TW_CACHE_CUBIN, &k); /* clear empties memory too */
    tw_cache_close(c);
}

/* A corrupt entry that cannot be deleted (a read-only directory) is still corrupt: verify counts
 * it as kept, with the errno, and warns naming the file, instead of calling the cache clean. */
static void test_cache_verify_unremovable(void **state) {
    (void)state;
    char dir[1024], path[1200];
    tw_case_dir("verify_kept", dir, sizeof dir);
    tw_key bad = tw_put_good_and_corrupt(dir, 1200, 31, 1100, path, sizeof path);

    tw_unlink_errno = EROFS;
    tw_unlink_path = path;
    tw_logbook log = {0};
    tw_cache *c = tw_open(dir, 0, &log);
    tw_cache_verify_report r;
    assert_int_equal(tw_cache_verify(c, &r), TWELL_OK);
    assert_int_equal(r.ok, 1);
    assert_int_equal(r.removed, 0);
    assert_int_equal(r.kept, 1);
    assert_int_equal(r.kept_errno, EROFS);
    assert_int_equal(log.warns, 1);
    assert_non_null(strstr(log.last, path));
    assert_non_null(strstr(log.last, strerror(EROFS)));
    assert_true(tw_exists(path));
    /* A get still treats it as a miss and does not count it as removed. */
    tw_expect_miss(c, TW_CACHE_CUBIN, &bad);
    tw_cache_stats st;
    tw_cache_get_stats(c, &st);
    assert_int_equal(st.corrupt_removed, 0);
    tw_cache_close(c);
    tw_unlink_errno = 0;
    tw_unlink_path = NULL;

    /* Deletable again: the next verify removes it. */
    c = tw_open(dir, 0, NULL);
    assert_int_equal(tw_cache_verify(c, &r), TWELL_OK);
    assert_int_equal(r.ok, 1);
    assert_int_equal(r.removed, 1);
    assert_int_equal(r.kept, 0);
    assert_int_equal(r.kept_errno, 0);
    assert_false(tw_exists(path));
    tw_cache_close(c);
}

/* An empty directory: list, verify and clear see nothing, cleanly. The scan hands back no
 * array at all then, which must never reach qsort (undefined behaviour that the sanitizer build
 * reports from `twell cache ls`, checked in test_cache_cli). */
static int tw_count_visit(void *user, const tw_cache_entry_info *e) {
    (void)e;
    ++*(int *)user;
    return 0;
}

static void test_cache_empty_dir(void **state) {
    (void)state;
    char dir[1024];
    tw_case_dir("empty", dir, sizeof dir);
    tw_cache *c = tw_open(dir, 0, NULL);
    int seen = 0;
    assert_int_equal(tw_cache_list(c, tw_count_visit, &seen), TWELL_OK);
    assert_int_equal(seen, 0);
    tw_cache_verify_report r;
    memset(&r, 0x5a, sizeof r);
    assert_int_equal(tw_cache_verify(c, &r), TWELL_OK);
    assert_int_equal(r.ok, 0);
    assert_int_equal(r.removed, 0);
    assert_int_equal(r.kept, 0);
    size_t removed = 99;
    assert_int_equal(tw_cache_clear(c, &removed), TWELL_OK);
    assert_int_equal(removed, 0);
    tw_cache_close(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_hit_miss),
        cmocka_unit_test(test_cache_memory_layer),
        cmocka_unit_test(test_cache_default_dir),
        cmocka_unit_test(test_cache_corrupt_entries_are_misses),
        cmocka_unit_test(test_cache_directory_at_entry_name),
        cmocka_unit_test(test_cache_unusable_dir_memory_only),
        cmocka_unit_test(test_cache_read_only_dir_serves_hits),
        cmocka_unit_test(test_cache_eviction_lru),
        cmocka_unit_test(test_cache_stale_temp_cleanup),
        cmocka_unit_test(test_cache_empty_dir),
        cmocka_unit_test(test_cache_verify_unremovable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
