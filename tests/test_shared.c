/*
 * test_shared.c - the shared directory tier (KPC_SHARED_DIR, storage/shared_tier.c)
 * through real hipRTC. Two "hosts" are two cache directories (each with its own host
 * index) and one directory both name as shared:
 *
 *   host A compiles (1 build each) and stores in the shared directory too; host B gets
 *     the same bytes with 0 builds, and its disk is back-filled (a new process of B reads
 *     its own disk, 0 shared hits)
 *   a damaged record in the shared directory is refused (shared_refused), rebuilt with
 *     the right bytes, never copied into B's disk, and replaced there by the rebuild
 *   a shared directory writable by others (0777, no sticky bit) is refused with a log
 *     line, never chmod'ed or written; the request still gets the right object
 *   a read-only shared directory (every directory 0555; for root, also a read-only bind
 *     mount, since root ignores modes) serves hits; a build's store there fails soft
 *   a missing shared directory is not created
 *   a staging file of another host's writer survives the open of the shared tree (its pid
 *     means nothing on this host), and goes once it is older than KPC_STALE_TMP_MS
 */
#define _GNU_SOURCE
#include "support.h"
#include "private_mounts.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define K 2

typedef struct hosts {
    char *a, *b, *shared; /* two cache directories and the shared one */
} hosts;

static void hosts_make(hosts *h)
{
    h->a = ts_tmpdir();
    h->b = ts_tmpdir();
    h->shared = ts_tmpdir();
    ck_assert_int_eq(mkdir(h->shared, 0700), 0);
    setenv("KPC_SHARED_DIR", h->shared, 1);
}

static void hosts_free(hosts *h)
{
    unsetenv("KPC_SHARED_DIR");
    ts_cleanup(h->a);
    ts_cleanup(h->b);
    ts_cleanup(h->shared);
}

static kpc_source source_k(int k, char names[][16])
{
    snprintf(names[k], 16, "s%d.hip", k);
    return ts_src(ts_kernel_source(k), names[k]);
}

static kpc_stats stats_of(kpc_cache *c)
{
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    return st;
}

/* The record of source k under cache directory dir (the key from a cache with no disk:
 * no directory is opened, and none is written). */
static void record_of(const char *dir, int k, char *path, size_t cap)
{
    char names[K + 4][16];
    kpc_cache *c = ts_open(dir, KPC_NO_DISK | KPC_NO_SHM, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source s = source_k(k, names);
    kpc_key key;
    ts_key(ctx, &s, &key);
    ts_record_path(dir, ts_target(), &key, "co", path, cap);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}

/* Sources 0..n-1 from one process of the host at dir: their code into code[] (may be
 * NULL), each compared with want[k] where want (and want[k]) is not NULL, and the
 * process's stats. */
static kpc_stats host_gets(const char *dir, int n, void **code, size_t *size, void *const *want,
                           const size_t *want_size)
{
    char names[K + 4][16];
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    for (int k = 0; k < n; k++) {
        kpc_source s = source_k(k, names);
        size_t got;
        void *bytes = ts_get_code(ctx, &s, &got);
        ck_assert(ts_is_code_object(bytes, got));
        if (want && want[k]) {
            ck_assert_uint_eq(got, want_size[k]);
            ck_assert_msg(memcmp(bytes, want[k], got) == 0, "source %d: not the bytes host A built", k);
        }
        if (code) {
            code[k] = bytes;
            size[k] = got;
        } else
            free(bytes);
    }
    kpc_stats st = stats_of(c);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return st;
}

static bool exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* The record at path holds code[0..size) (read back through a store of its own). */
static void assert_holds(const char *path, const void *code, size_t size)
{
    size_t n;
    uint8_t *b = ts_read_file(path, &n);
    ck_assert_msg(b != NULL, "%s is missing", path);
    ck_assert_msg(n >= size && memmem(b, n, code, size) != NULL, "%s does not hold the object", path);
    free(b);
}

START_TEST(host_b_gets_host_a_build)
{
    hosts h;
    hosts_make(&h);
    void *code[K];
    size_t size[K];
    kpc_stats st = host_gets(h.a, K, code, size, NULL, NULL);
    ck_assert_uint_eq(st.builds, K);
    ck_assert_uint_eq(st.shared_hits, 0);
    char path[4400];
    for (int k = 0; k < K; k++) {
        record_of(h.shared, k, path, sizeof path);
        assert_holds(path, code[k], size[k]);
    }
    /* host B: nothing on its disk; every object from the shared directory, 0 builds */
    st = host_gets(h.b, K, NULL, NULL, code, size);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_uint_eq(st.shared_hits, K);
    ck_assert_uint_eq(st.shared_refused, 0);
    ck_assert_uint_eq(st.disk_hits, K);
    for (int k = 0; k < K; k++) {
        record_of(h.b, k, path, sizeof path);
        assert_holds(path, code[k], size[k]); /* back-filled */
    }
    /* the next process of B reads its own disk */
    st = host_gets(h.b, K, NULL, NULL, code, size);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_uint_eq(st.shared_hits, 0);
    ck_assert_uint_eq(st.disk_hits, K);
    /* and B's disk alone serves it, with the shared directory gone from the setting */
    unsetenv("KPC_SHARED_DIR");
    st = host_gets(h.b, K, NULL, NULL, code, size);
    ck_assert_uint_eq(st.builds, 0);
    for (int k = 0; k < K; k++)
        free(code[k]);
    hosts_free(&h);
}
END_TEST

START_TEST(damaged_shared_record_is_rebuilt)
{
    hosts h;
    hosts_make(&h);
    void *code[1];
    size_t size[1];
    host_gets(h.a, 1, code, size, NULL, NULL);
    char shared_path[4400], b_path[4400];
    record_of(h.shared, 0, shared_path, sizeof shared_path);
    size_t n;
    uint8_t *bytes = ts_read_file(shared_path, &n);
    ck_assert_ptr_nonnull(bytes);
    bytes[256 + 100] ^= 0x01; /* inside the code object, past the header */
    ts_write_file(shared_path, bytes, n);
    free(bytes);

    ts_log_begin(KPC_LOG_WARN);
    kpc_stats st = host_gets(h.b, 1, NULL, NULL, code, size);
    char *log = ts_log_end();
    ck_assert_uint_eq(st.builds, 1);
    ck_assert_uint_eq(st.shared_hits, 0);
    ck_assert_uint_eq(st.shared_refused, 1);
    ck_assert_msg(strstr(log, "damaged cache file") && strstr(log, shared_path), "%s", log);
    free(log);
    /* B's disk and the shared directory hold the rebuild: the right bytes */
    record_of(h.b, 0, b_path, sizeof b_path);
    assert_holds(b_path, code[0], size[0]);
    assert_holds(shared_path, code[0], size[0]);
    /* and the shared record is whole again: a third host hits it */
    char *c3 = ts_tmpdir();
    st = host_gets(c3, 1, NULL, NULL, code, size);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_uint_eq(st.shared_hits, 1);
    ts_cleanup(c3);
    free(code[0]);
    hosts_free(&h);
}
END_TEST

START_TEST(shared_dir_writable_by_others_is_refused)
{
    hosts h;
    hosts_make(&h);
    void *a_code[K] = {NULL}, *b_code[K];
    size_t a_size[K], b_size[K];
    host_gets(h.a, 1, a_code, a_size, NULL, NULL); /* source 0 in the shared directory */
    ck_assert_int_eq(chmod(h.shared, 0777), 0);
    ts_log_begin(KPC_LOG_WARN);
    kpc_stats st = host_gets(h.b, 2, b_code, b_size, a_code, a_size);
    char *log = ts_log_end();
    ck_assert_uint_eq(st.builds, 2); /* never read from there: source 0 built again, the same bytes */
    ck_assert_uint_eq(st.shared_hits, 0);
    ck_assert_msg(strstr(log, h.shared) && strstr(log, "writable by every user") && strstr(log, "refused") &&
                      strstr(log, "the shared tier is off"),
                  "the refusal is not logged:\n%s", log);
    free(log);
    /* never chmod'ed nor written: host B's build of source 1 is on B's disk only */
    struct stat sb;
    ck_assert_int_eq(stat(h.shared, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 07777, 0777);
    char path[4400];
    record_of(h.b, 1, path, sizeof path);
    assert_holds(path, b_code[1], b_size[1]);
    record_of(h.shared, 1, path, sizeof path);
    ck_assert_msg(!exists(path), "%s was written into a refused directory", path);
    ck_assert_int_eq(chmod(h.shared, 0700), 0);
    free(a_code[0]);
    free(b_code[0]);
    free(b_code[1]);
    hosts_free(&h);
}
END_TEST

/* chmod every directory of the tree at path */
static void chmod_dirs(const char *path, mode_t mode)
{
    DIR *d = opendir(path);
    ck_assert_msg(d != NULL, "%s: %s", path, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || e->d_type != DT_DIR)
            continue;
        char sub[4400];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        chmod_dirs(sub, mode);
    }
    closedir(d);
    ck_assert_int_eq(chmod(path, mode), 0);
}

START_TEST(read_only_shared_dir_serves_hits)
{
    hosts h;
    hosts_make(&h);
    void *a_code[K] = {NULL}, *b_code[K];
    size_t a_size[K], b_size[K];
    host_gets(h.a, 1, a_code, a_size, NULL, NULL);
    chmod_dirs(h.shared, 0555);
    bool mounted = false;
    if (geteuid() == 0) { /* root writes through modes: make it a read-only mount as well */
        char why[512];
        if (tm_private_mounts(h.shared, why, sizeof why) != 0) {
            ts_skip("root ignores 0555 and %s", why);
            chmod_dirs(h.shared, 0700);
            free(a_code[0]);
            hosts_free(&h);
            return;
        }
        ck_assert_int_eq(mount(h.shared, h.shared, NULL, MS_BIND, NULL), 0);
        mounted = true;
        ck_assert_int_eq(mount(NULL, h.shared, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL), 0);
    }
    char probe[4400];
    snprintf(probe, sizeof probe, "%s/probe", h.shared);
    ck_assert_int_eq(open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600), -1);

    ts_log_begin(KPC_LOG_WARN);
    kpc_stats st = host_gets(h.b, 2, b_code, b_size, a_code, a_size); /* source 1: built */
    char *log = ts_log_end();
    ck_assert_uint_eq(st.shared_hits, 1);
    ck_assert_uint_eq(st.builds, 1);
    ck_assert_msg(strstr(log, "not stored in the shared directory") != NULL, "%s", log);
    ck_assert_msg(strstr(log, "error:") == NULL, "a read-only shared directory is not an error:\n%s", log);
    free(log);
    char path[4400];
    for (int k = 0; k < 2; k++) {
        record_of(h.b, k, path, sizeof path);
        assert_holds(path, b_code[k], b_size[k]); /* both on B's disk */
    }
    record_of(h.shared, 1, path, sizeof path);
    ck_assert(!exists(path));
    if (mounted)
        ck_assert_int_eq(umount2(h.shared, MNT_DETACH), 0);
    chmod_dirs(h.shared, 0700);
    free(a_code[0]);
    free(b_code[0]);
    free(b_code[1]);
    hosts_free(&h);
}
END_TEST

START_TEST(missing_shared_dir_is_not_created)
{
    hosts h;
    hosts_make(&h);
    ck_assert_int_eq(rmdir(h.shared), 0);
    ts_log_begin(KPC_LOG_WARN);
    kpc_stats st = host_gets(h.b, 1, NULL, NULL, NULL, NULL);
    char *log = ts_log_end();
    ck_assert_uint_eq(st.builds, 1);
    ck_assert_msg(strstr(log, "KPC_SHARED_DIR") && strstr(log, "not created"), "%s", log);
    free(log);
    ck_assert(!exists(h.shared));
    ck_assert_int_eq(mkdir(h.shared, 0700), 0);
    hosts_free(&h);
}
END_TEST

/* A staging file named as this node's writers name theirs, with a pid not alive here: in
 * the shared directory, the name another host's live writer may have. */
static void plant_tmp(const char *dir, time_t age, char *path, size_t cap)
{
    char real[4096], tmp[4200], domain[17];
    ck_assert(realpath(dir, real) != NULL);
    ts_tmp_domain(dir, domain);
    snprintf(tmp, sizeof tmp, "%s/v1/tmp", real);
    snprintf(path, cap, "%s/0123456789abcdef0123456789abcdef.%s.999999999.12345.0.tmp", tmp, domain);
    ts_write_file(path, "partial", 7);
    struct timespec t[2] = {{time(NULL) - age, 0}, {time(NULL) - age, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, t, 0), 0);
}

START_TEST(another_hosts_staging_file_survives)
{
    hosts h;
    hosts_make(&h);
    host_gets(h.a, 0, NULL, NULL, NULL, NULL); /* makes the trees */
    char shared_tmp[4400], local_tmp[4400];
    plant_tmp(h.shared, 10, shared_tmp, sizeof shared_tmp);
    plant_tmp(h.a, 10, local_tmp, sizeof local_tmp);
    host_gets(h.a, 0, NULL, NULL, NULL, NULL);
    ck_assert_msg(exists(shared_tmp), "a live writer's staging file in the shared directory was removed");
    ck_assert_msg(!exists(local_tmp), "the local disk keeps a dead writer's staging file");
    plant_tmp(h.shared, 7200, shared_tmp, sizeof shared_tmp); /* two hours: past the default */
    host_gets(h.a, 0, NULL, NULL, NULL, NULL);
    ck_assert(!exists(shared_tmp));
    hosts_free(&h);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shared");
    TCase *tc = tcase_create("shared");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, host_b_gets_host_a_build);
    tcase_add_test(tc, damaged_shared_record_is_rebuilt);
    tcase_add_test(tc, shared_dir_writable_by_others_is_refused);
    tcase_add_test(tc, read_only_shared_dir_serves_hits);
    tcase_add_test(tc, missing_shared_dir_is_not_created);
    tcase_add_test(tc, another_hosts_staging_file_survives);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
