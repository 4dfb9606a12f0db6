/*
 * test_store_faults.c - the disk tree (level 3) survives its file
 * system: a full disk (through the fault seam and on a full tmpfs), a read-only tree, a
 * directory another user owns, missing parents, an object too large to store.
 */
#define _GNU_SOURCE
#include "support.h"
#include "private_mounts.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "store_support.h"

/* =====================================================================================
 * Faults: a full disk, a read-only tree, another owner, missing parents.
 * ===================================================================================== */
typedef struct fault_plan {
    enum kpc_sys_call call;
    unsigned skip;
    int err;
    const char *says;
} fault_plan;

/* Get src with a fault planned; the request must succeed, log `says` and leave no file. */
static void get_under_fault(kpc_context *ctx, int src_index, const fault_plan *f, const char *level)
{
    kpc_source src = real_src(src_index);
    kpc_key key;
    ts_key(ctx, &src, &key);
    char path[4400];
    ts_record_path(dir, ts_target(), &key, "co", path, sizeof path);
    uint64_t builds = stats_of(ctx->cache).builds;
    ts_log_begin(KPC_LOG_WARN);
    kpc__sys_fault_set(f->call, f->err, f->skip, 1);
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, &src, &p);
    kpc__sys_fault_set(f->call, 0, 0, 0);
    char *log = ts_log_end();
    ck_assert_msg(s == KPC_OK, "fault %d/%u: %s", f->call, f->skip, kpc_status_str(s));
    size_t size;
    const void *code = kpc_program_code(p, &size);
    ck_assert(ts_is_code_object(code, size));
    kpc_program_release(p);
    ck_assert_uint_eq(stats_of(ctx->cache).builds, builds + 1);
    ck_assert_msg(strstr(log, f->says) != NULL, "fault %d/%u: the log does not say \"%s\":\n%s", f->call,
                  f->skip, f->says, log);
    ck_assert_msg(strstr(log, level) != NULL, "fault %d/%u: not logged at level \"%s\":\n%s", f->call,
                  f->skip, level, log);
    ck_assert_msg(is_absent(path), "fault %d/%u: %s exists", f->call, f->skip, path);
    ck_assert_int_eq(ts_tmp_entries(dir), 0);
    free(log);
}

START_TEST(enospc_through_the_fault_seam)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    const char *nospace = strerror(ENOSPC);
    const fault_plan plans[] = {
        {KPC_SYS_WRITE, 0, ENOSPC, nospace},  /* the header */
        {KPC_SYS_WRITE, 1, ENOSPC, nospace},  /* the code, after the header is in the file */
        {KPC_SYS_WRITE, 2, ENOSPC, nospace},  /* the names table */
        {KPC_SYS_FSYNC, 0, ENOSPC, nospace},  /* delayed allocation fails at fsync */
        {KPC_SYS_RENAME, 0, ENOSPC, nospace}, /* a new directory block for the name */
        {KPC_SYS_MKDIR, 0, ENOSPC, nospace},
        {KPC_SYS_OPEN, 0, EDQUOT, strerror(EDQUOT)},
    };
    /* the first failure of a cache handle is an error, the later ones warnings */
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++)
        get_under_fault(ctx, 10 + (int)i, &plans[i], i == 0 ? ": error: " : ": warn: ");
    /* and the disk level works again at once */
    kpc_source src = real_src(20);
    kpc_key key;
    ts_key(ctx, &src, &key);
    size_t size;
    void *code = ts_get_code(ctx, &src, &size);
    assert_record_valid(dir, &key, code, size);
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* Processes that all need an object no one can store (every rename fails: a full disk)
 * each get it, built for themselves: one build per process, identical bytes, no file. */
typedef struct unstored_share {
    uint64_t hash[4];
    uint64_t self_builds[4];
} unstored_share;

static int unstored_child(int i, void *arg)
{
    unstored_share *sh = arg;
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc__sys_fault_set(KPC_SYS_RENAME, ENOSPC, 0, 1000);
    kpc_source src = real_src(21);
    size_t size;
    void *code = ts_get_code(ctx, &src, &size);
    sh->hash[i] = XXH3_64bits(code, size);
    sh->self_builds[i] = stats_of(c).builds;
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return 0;
}

START_TEST(unstorable_object_is_built_by_each_process)
{
    enum { P = 4 };
    unstored_share *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    ck_assert_int_eq(ts_run_children(P, unstored_child, sh), P);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = real_src(21);
    kpc_key key;
    ts_key(ctx, &src, &key);
    char path[4400];
    ts_record_path(dir, ts_target(), &key, "co", path, sizeof path);
    ck_assert_msg(access(path, F_OK) != 0, "%s was stored while every rename failed", path);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.host_builds, P); /* each built it once, none twice */
    for (int i = 0; i < P; i++) {
        ck_assert_uint_eq(sh->self_builds[i], 1);
        ck_assert_uint_eq(sh->hash[i], sh->hash[0]);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    munmap(sh, sizeof *sh);
}
END_TEST

/* A private mount namespace, so that the test's mounts (under parent(dir)) vanish with
 * its process. false (with the reason printed) where mounting is not permitted. */
static bool private_mounts(const char *what)
{
    char *base = strdup(dir), why[512];
    *strrchr(base, '/') = '\0';
    int rc = tm_private_mounts(base, why, sizeof why);
    free(base);
    if (rc != 0)
        ts_skip("%s: %s", what, why);
    return rc == 0;
}

/* Mount a tmpfs of size_kb at parent(dir)/mnt; dir then names mnt/cache. */
static bool mount_tmpfs(char **mnt, unsigned size_kb, const char *what)
{
    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    size_t n = strlen(base) + 8;
    *mnt = malloc(n);
    snprintf(*mnt, n, "%s/mnt", base);
    free(base);
    ck_assert_int_eq(mkdir(*mnt, 0700), 0);
    char opts[64];
    snprintf(opts, sizeof opts, "size=%uk,mode=0700", size_kb);
    if (mount("tmpfs", *mnt, "tmpfs", 0, opts) != 0) {
        ts_skip("%s: mount -t tmpfs: %s", what, strerror(errno));
        return false;
    }
    free(dir);
    n = strlen(*mnt) + 8;
    dir = malloc(n);
    snprintf(dir, n, "%s/cache", *mnt);
    return true;
}

static void unmount_tmpfs(char *mnt)
{
    char root[4096];
    if (realpath(dir, root))
        kpc_index_unlink(root); /* ts_cleanup cannot find it once the mount is gone */
    ck_assert_int_eq(umount2(mnt, MNT_DETACH), 0);
    /* dir named mnt/cache: name the mkdtemp dir's cache again, so that ts_cleanup removes
     * that dir (mnt in it), not just mnt */
    free(dir);
    size_t n = strlen(mnt) + 8;
    dir = malloc(n);
    snprintf(dir, n, "%.*s/cache", (int)(strrchr(mnt, '/') - mnt), mnt);
    free(mnt);
}

START_TEST(enospc_on_a_full_tmpfs)
{
    char *mnt;
    if (!private_mounts("ENOSPC on tmpfs") || !mount_tmpfs(&mnt, 512, "ENOSPC on tmpfs"))
        return;
    /* a warm cache: one object, the compiler identity and target files */
    kpc_source a = real_src(0), b = real_src(1);
    cached_obj o;
    cache_obj(dir, &a, &o);
    /* fill to the brim */
    char filler[4200];
    snprintf(filler, sizeof filler, "%s/filler", mnt);
    int fd = open(filler, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    static char chunk[65536];
    size_t sizes[] = {65536, 4096, 512, 64, 1};
    for (size_t i = 0; i < 5; i++)
        while (write(fd, chunk, sizes[i]) == (ssize_t)sizes[i])
            ;
    ck_assert_int_eq(write(fd, chunk, 1), -1);
    ck_assert_int_eq(errno, ENOSPC);
    close(fd);

    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_key kb;
    ts_key(ctx, &b, &kb);
    char bpath[4400];
    ts_record_path(dir, ts_target(), &kb, "co", bpath, sizeof bpath);
    ts_log_begin(KPC_LOG_WARN);
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, &b, &p);
    char *log = ts_log_end();
    ck_assert_int_eq(s, KPC_OK);
    size_t bsize;
    const void *bcode = kpc_program_code(p, &bsize);
    ck_assert(ts_is_code_object(bcode, bsize));
    void *bcopy = malloc(bsize);
    memcpy(bcopy, bcode, bsize);
    kpc_program_release(p);
    ck_assert_uint_eq(stats_of(c).builds, 1);
    ck_assert_msg(strstr(log, strerror(ENOSPC)) != NULL && strstr(log, "error") != NULL,
                  "no error logged for the full disk:\n%s", log);
    free(log);
    ck_assert(is_absent(bpath));
    ck_assert_int_eq(ts_tmp_entries(dir), 0);
    /* the full disk still serves what it holds */
    size_t size;
    void *code = ts_get_code(ctx, &a, &size);
    ck_assert(size == o.code_size && memcmp(code, o.code, size) == 0);
    free(code);
    ck_assert_uint_eq(stats_of(c).disk_hits, 1);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);

    /* space again: the next process caches b */
    ck_assert_int_eq(unlink(filler), 0);
    c = ts_open(dir, 0, 0);
    ctx = ts_context(c);
    code = ts_get_code(ctx, &b, &size);
    ck_assert_uint_eq(stats_of(c).builds, 1);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    assert_record_valid(dir, &kb, code, size);
    free(code);
    free(bcopy);
    free(o.code), free(o.file);
    unmount_tmpfs(mnt);
}
END_TEST

/* A read-only tree serves hits; a miss is compiled and not stored. */
static void check_read_only_cache(const cached_obj *o, const char *says)
{
    kpc_source a = real_src(0), b = real_src(1);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_key kb;
    ts_key(ctx, &b, &kb);
    char bpath[4400];
    ts_record_path(dir, ts_target(), &kb, "co", bpath, sizeof bpath);
    ts_log_begin(KPC_LOG_WARN);
    size_t size;
    void *code = ts_get_code(ctx, &a, &size);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.disk_hits, 1);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert(size == o->code_size && memcmp(code, o->code, size) == 0);
    free(code);
    code = ts_get_code(ctx, &b, &size);
    char *log = ts_log_end();
    ck_assert(ts_is_code_object(code, size));
    free(code);
    ck_assert_uint_eq(stats_of(c).builds, 1);
    ck_assert_msg(strstr(log, says) != NULL, "the log does not say \"%s\":\n%s", says, log);
    free(log);
    ck_assert(is_absent(bpath));
    ck_assert_int_eq(ts_tmp_entries(dir), 0);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}

START_TEST(read_only_mount_serves_hits)
{
    char *mnt;
    if (!private_mounts("read-only mount") || !mount_tmpfs(&mnt, 4096, "read-only mount"))
        return;
    kpc_source a = real_src(0);
    cached_obj o;
    cache_obj(dir, &a, &o);
    /* an old file: the hit tries to refresh its time, which a read-only tree refuses */
    struct timespec old[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, o.path, old, 0), 0);
    if (mount(NULL, mnt, NULL, MS_REMOUNT | MS_RDONLY, NULL) != 0) {
        ts_skip("read-only mount: remount ro: %s", strerror(errno));
        unmount_tmpfs(mnt);
        return;
    }
    ck_assert_int_eq(open(o.path, O_WRONLY | O_CLOEXEC), -1); /* read-only even for root */
    ck_assert_int_eq(errno, EROFS);
    check_read_only_cache(&o, strerror(EROFS));
    free(o.code), free(o.file);
    unmount_tmpfs(mnt);
}
END_TEST

START_TEST(read_only_through_the_fault_seam)
{
    kpc_source a = real_src(0);
    cached_obj o;
    cache_obj(dir, &a, &o);
    kpc__sys_fault_set(KPC_SYS_MKDIR, EROFS, 0, 1000000);
    kpc__sys_fault_set(KPC_SYS_OPEN, EROFS, 0, 1000000);
    check_read_only_cache(&o, strerror(EROFS));
    kpc__sys_fault_set(KPC_SYS_MKDIR, 0, 0, 0);
    kpc__sys_fault_set(KPC_SYS_OPEN, 0, 0, 0);
    free(o.code), free(o.file);
}
END_TEST

/* The cache dir at `d` must be refused with a log line saying `says`; requests still
 * succeed, compiled, with no disk level: a second cache handle compiles again. */
static void expect_refused(const char *d, const char *says)
{
    for (int round = 0; round < 2; round++) {
        ts_log_begin(KPC_LOG_WARN);
        kpc_cache *c = ts_open(d, 0, 0);
        char *log = ts_log_end();
        ck_assert_msg(strstr(log, says) != NULL && strstr(log, "refused") != NULL,
                      "round %d: the log does not refuse the directory (\"%s\"):\n%s", round, says, log);
        free(log);
        ck_assert_ptr_null(c->store);
        kpc_context *ctx = ts_context(c);
        kpc_source src = real_src(0);
        size_t size;
        void *code = ts_get_code(ctx, &src, &size);
        ck_assert(ts_is_code_object(code, size));
        free(code);
        kpc_stats st = stats_of(c);
        ck_assert_uint_eq(st.builds, 1);
        ck_assert_uint_eq(st.disk_hits, 0);
        ck_assert_uint_eq(st.disk_files, 0);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
    }
}

static int count_entries(const char *d)
{
    int n = ts_count_entries(d);
    ck_assert_int_ge(n, 0);
    return n;
}

START_TEST(directory_of_another_user_is_refused)
{
    if (geteuid() != 0) {
        ts_skip("another owner: chown needs root");
        return;
    }
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(chown(dir, 65534, 65534), 0);
    expect_refused(dir, "owned by uid 65534");
    ck_assert_int_eq(count_entries(dir), 0); /* nothing was written into it */
}
END_TEST

START_TEST(symlink_to_another_users_directory_is_refused)
{
    if (geteuid() != 0) {
        ts_skip("symlinked owner: chown needs root");
        return;
    }
    char other[4200], own[4200];
    snprintf(other, sizeof other, "%s.other", dir);
    snprintf(own, sizeof own, "%s.own", dir);
    ck_assert_int_eq(mkdir(other, 0700), 0);
    ck_assert_int_eq(chown(other, 65534, 65534), 0);
    ck_assert_int_eq(symlink(other, dir), 0);
    expect_refused(dir, "owned by uid 65534");
    ck_assert_int_eq(count_entries(other), 0);
    /* a link another user owns, even to a directory of ours: they can point it anywhere */
    ck_assert_int_eq(unlink(dir), 0);
    ck_assert_int_eq(mkdir(own, 0700), 0);
    ck_assert_int_eq(symlink(own, dir), 0);
    ck_assert_int_eq(lchown(dir, 65534, 65534), 0);
    expect_refused(dir, "a symbolic link owned by uid 65534");
    ck_assert_int_eq(count_entries(own), 0);
    unlink(dir);
    rmdir(own);
    rmdir(other);
}
END_TEST

static void assert_mode(const char *path, unsigned mode)
{
    struct stat sb;
    ck_assert_msg(lstat(path, &sb) == 0, "%s: %s", path, strerror(errno));
    ck_assert_msg((sb.st_mode & 07777) == mode, "%s has mode %04o, not %04o", path,
                  (unsigned)(sb.st_mode & 07777), mode);
}

START_TEST(missing_parents_are_created_0700)
{
    umask(0); /* the modes must not depend on the caller's umask */
    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    char deep[4200];
    snprintf(deep, sizeof deep, "%s/a/b/c/cache", base);
    kpc_cache *c = ts_open(deep, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = real_src(0);
    kpc_key key;
    ts_key(ctx, &src, &key);
    size_t size;
    void *code = ts_get_code(ctx, &src, &size);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    char path[4400], hex[KPC_KEY_HEX];
    kpc_key_hex(&key, hex);
    const char *subs[] = {"a", "a/b", "a/b/c", "a/b/c/cache", "a/b/c/cache/v1", "a/b/c/cache/v1/tmp"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", base, subs[i]);
        assert_mode(path, 0700);
    }
    snprintf(path, sizeof path, "%s/a/b/c/cache/v1/%s", base, ts_target());
    assert_mode(path, 0700);
    snprintf(path, sizeof path, "%s/a/b/c/cache/v1/%s/%.2s", base, ts_target(), hex);
    assert_mode(path, 0700);
    ts_record_path(deep, ts_target(), &key, "co", path, sizeof path);
    assert_mode(path, 0600);
    assert_record_valid(deep, &key, code, size);
    free(code);
    /* an existing cache dir kpc did not make keeps its mode: one others may read is used,
     * one its group may write is refused (docs/trust.md) */
    snprintf(path, sizeof path, "%s/a/b/c/cache", base);
    ck_assert_int_eq(chmod(path, 0755), 0);
    kpc_store *st;
    ck_assert_int_eq(kpc_store_open(path, 1u << 30, &st), KPC_OK);
    kpc_store_close(st);
    assert_mode(path, 0755);
    ck_assert_int_eq(chmod(path, 0775), 0);
    ts_log_begin(KPC_LOG_ERROR);
    ck_assert_int_eq(kpc_store_open(path, 1u << 30, &st), KPC_E_IO);
    free(ts_log_end());
    assert_mode(path, 0775);
    char root[4096];
    ck_assert_ptr_nonnull(realpath(deep, root));
    kpc_index_unlink(root);
    free(base);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {enospc_through_the_fault_seam, enospc_on_a_full_tmpfs,
                            read_only_mount_serves_hits, read_only_through_the_fault_seam,
                            directory_of_another_user_is_refused,
                            symlink_to_another_users_directory_is_refused,
                            missing_parents_are_created_0700,
                            unstorable_object_is_built_by_each_process, NULL};
    return ts_main_case("store", "faults", 120, setup, teardown, tests);
}
