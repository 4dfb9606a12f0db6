/*
 * test_trust.c - kpc takes code only from where no one but the user (or root) may write,
 * and harms nothing of the host's:
 *   - a cache directory that others may write is refused (disk tier and index off, the
 *     fix named: chmod go-w) and keeps its mode, through kpc_cache_open, a compile (real
 *     hipRTC) and `kpc stats` (which exits 1); a sticky 1777 directory (what /dev/shm is)
 *     too; one that others may only read is used, and keeps its mode as well;
 *   - a pack another user owns, or that its group or others may write, or under a
 *     directory others may write, is refused with its name and the rule, and its objects
 *     never reach the disk cache (a planted object: the real one with a byte changed);
 *   - `kpc pack create OUT` over a FIFO, a symbolic link, a character device or a
 *     directory refuses and leaves it as it was, and leaves no temp file beside it.
 * Tests run as root in CI: "another user" is uid 65534.
 */
#define _GNU_SOURCE
#include "support.h"
#include "storage/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static char *dir;
static void setup(void) { dir = ts_tmpdir(); }
static void teardown(void)
{
    unsetenv("KPC_CACHE_DIR");
    unsetenv("KPC_PACK_PATH");
    ts_cleanup(dir);
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    ck_assert_msg(lstat(path, &st) == 0, "lstat %s: %s", path, strerror(errno));
    return st.st_mode;
}

/* ---- the cache directory ---------------------------------------------------------------- */
START_TEST(an_unsafe_cache_dir_is_refused_and_keeps_its_mode)
{
    static const mode_t modes[] = {0777, 01777, 0770};
    const char *tool = getenv("KPC_TOOL");
    ck_assert_ptr_nonnull(tool);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s-%o", dir, (unsigned)modes[i]);
        ck_assert_int_eq(mkdir(path, 0700), 0);
        ck_assert_int_eq(chmod(path, modes[i]), 0);
        setenv("KPC_CACHE_DIR", path, 1);
        ts_log_begin(KPC_LOG_ERROR);
        kpc_cache *c = NULL;
        ck_assert_int_eq(kpc_cache_open(NULL, &c), KPC_OK); /* a level off, not an error */
        char *log = ts_log_end();
        ck_assert_msg(c->store == NULL && c->index == NULL, "mode %o: the disk tier is on", (unsigned)modes[i]);
        ck_assert_msg(strstr(log, path) && strstr(log, "chmod go-w"), "mode %o: the log says no fix:\n%s",
                      (unsigned)modes[i], log);
        free(log);
        /* a compile still answers, from the compiler */
        kpc_context *ctx = ts_context(c);
        kpc_source src = ts_src(ts_kernel_source(0), "a.hip");
        size_t size;
        void *code = ts_get_code(ctx, &src, &size);
        ck_assert(ts_is_code_object(code, size));
        free(code);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
        ck_assert_int_eq(ts_count_entries(path), 0); /* nothing written in it */
        /* kpc stats: an unusable cache, exit 1, the same reason */
        const char *argv[] = {tool, "stats", NULL};
        char *out = NULL, *err = NULL;
        int rc = ts_exec(argv, NULL, &out, &err);
        ck_assert_msg(rc == 1 && strstr(err, "chmod go-w"), "kpc stats on a %o cache dir: exit %d\n%s%s",
                      (unsigned)modes[i], rc, out, err);
        free(out);
        free(err);
        ck_assert_msg((mode_of(path) & 07777) == modes[i], "mode %o became %o", (unsigned)modes[i],
                      (unsigned)(mode_of(path) & 07777));
        rmdir(path);
    }
    /* readable by others, writable by no one else: used, and its mode kept */
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(chmod(dir, 0755), 0);
    setenv("KPC_CACHE_DIR", dir, 1);
    kpc_cache *c = NULL;
    ck_assert_int_eq(kpc_cache_open(NULL, &c), KPC_OK);
    ck_assert_ptr_nonnull(c->store);
    kpc_cache_close(c);
    ck_assert_uint_eq(mode_of(dir) & 07777, 0755);
}
END_TEST

/* ---- packs ------------------------------------------------------------------------------ */
/* A pack at path holding a planted record under the key of src: the real record of a
 * compile (same key, target, compiler) with the last byte of its code changed. Returns
 * the real code (malloc'd). */
static void *plant_pack(const char *path, const kpc_source *src, size_t *real_size)
{
    char *tmp = ts_tmpdir();
    kpc_cache *c = ts_open(tmp, 0, 0);
    kpc_context *ctx = ts_context(c);
    void *real = ts_get_code(ctx, src, real_size);
    kpc_key key;
    ts_key(ctx, src, &key);
    kpc_record rec;
    ck_assert_int_eq(kpc_store_read(c->store, &key, ts_target(), KPC_RECORD_CODE, &rec), KPC_OK);
    kpc_record forged = rec;
    forged.request_size = 0;
    forged.request = NULL;
    uint8_t *code = malloc(rec.code_size);
    memcpy(code, rec.payload, rec.code_size);
    code[rec.code_size - 1] ^= 0xff;
    const void *names = (const uint8_t *)rec.payload + rec.code_size;
    size_t size = KPC_RECORD_HEADER + rec.code_size + rec.names_size;
    uint8_t *bytes = malloc(size);
    kpc_record_header(bytes, &forged, code, names);
    memcpy(bytes + KPC_RECORD_HEADER, code, rec.code_size);
    memcpy(bytes + KPC_RECORD_HEADER + rec.code_size, names, rec.names_size);
    kpc_pack_writer *w;
    ck_assert_int_eq(kpc_pack_create(path, &w), KPC_OK);
    ck_assert_int_eq(kpc_pack_add(w, bytes, size), KPC_OK);
    ck_assert_int_eq(kpc_pack_finish(w, NULL), KPC_OK);
    ck_assert_int_eq(chmod(path, 0644), 0);
    free(bytes);
    free(code);
    kpc_record_free(&rec);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_cleanup(tmp);
    return real;
}

/* From a new cache with KPC_PACK_PATH=pack: the object src gets, then the one a process
 * without the pack reads from that cache's disk; the first process's stats and log. */
static void with_pack(const char *pack, const kpc_source *src, void **got, void **on_disk, size_t *size,
                      kpc_stats *st, char **log)
{
    char *cache = ts_tmpdir();
    setenv("KPC_PACK_PATH", pack, 1);
    ts_log_begin(KPC_LOG_ERROR);
    kpc_cache *c = ts_open(cache, 0, 0);
    kpc_context *ctx = ts_context(c);
    *got = ts_get_code(ctx, src, size);
    kpc_stats_get(c, st);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    *log = ts_log_end();
    unsetenv("KPC_PACK_PATH");
    c = ts_open(cache, 0, 0);
    ctx = ts_context(c);
    size_t disk_size;
    *on_disk = ts_get_code(ctx, src, &disk_size);
    kpc_stats st2;
    kpc_stats_get(c, &st2);
    ck_assert_uint_eq(st2.builds, 0); /* read from the disk tree */
    ck_assert_uint_eq(disk_size, *size);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_cleanup(cache);
}

/* The pack is refused: the object is the compiler's, on disk too, and the log names the
 * pack and the rule. */
static void expect_refused(const char *pack, const kpc_source *src, const void *real, size_t real_size,
                           const char *rule)
{
    void *got, *disk;
    size_t size;
    kpc_stats st;
    char *log;
    with_pack(pack, src, &got, &disk, &size, &st, &log);
    ck_assert_msg(st.pack_hits == 0 && st.builds == 1, "%s: the pack was used (%llu hits, %llu builds)", rule,
                  (unsigned long long)st.pack_hits, (unsigned long long)st.builds);
    ck_assert(size == real_size && memcmp(got, real, size) == 0);
    ck_assert_msg(memcmp(disk, real, size) == 0, "%s: the planted object reached the disk cache", rule);
    ck_assert_msg(strstr(log, pack) && strstr(log, rule), "the log does not name %s and \"%s\":\n%s", pack, rule,
                  log);
    free(got), free(disk), free(log);
}

START_TEST(packs_another_user_could_write_are_refused)
{
    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    char packs[4200], pack[4300];
    snprintf(packs, sizeof packs, "%s/packs", base);
    snprintf(pack, sizeof pack, "%s/planted.kpack", packs);
    ck_assert_int_eq(mkdir(packs, 0755), 0);
    ck_assert_int_eq(chmod(base, 0755), 0);
    kpc_source src = ts_src(ts_kernel_source(1), "b.hip");
    size_t real_size;
    void *real = plant_pack(pack, &src, &real_size);

    /* the control: a pack of ours, 0644, under directories only we write: it answers,
     * planted object and all (the pack format cannot tell; its owner can) */
    void *got, *disk;
    size_t size;
    kpc_stats st;
    char *log;
    with_pack(pack, &src, &got, &disk, &size, &st, &log);
    ck_assert_uint_eq(st.pack_hits, 1);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_msg(memcmp(got, real, size) != 0, "the control did not read the planted object");
    free(got), free(disk), free(log);

    if (geteuid() == 0) {
        ck_assert_int_eq(chown(pack, 65534, 65534), 0);
        expect_refused(pack, &src, real, real_size, "owned by uid 65534");
        ck_assert_int_eq(chown(pack, 0, 0), 0);
    } else
        printf("packs_another_user_could_write_are_refused: skipped: a pack of another uid needs root to make\n");
    ck_assert_int_eq(chmod(pack, 0664), 0);
    expect_refused(pack, &src, real, real_size, "writable by its group");
    ck_assert_int_eq(chmod(pack, 0646), 0);
    expect_refused(pack, &src, real, real_size, "chmod go-w");
    ck_assert_int_eq(chmod(pack, 0644), 0);
    /* a directory above it that others may write (no sticky bit): they could swap it;
     * named through KPC_PACK_PATH's directory form too */
    ck_assert_int_eq(chmod(packs, 0777), 0);
    expect_refused(pack, &src, real, real_size, "the directory above it");
    expect_refused(packs, &src, real, real_size, "the directory above it");
    ck_assert_int_eq(chmod(packs, 0755), 0);
    free(real);
    free(base);
}
END_TEST

/* ---- kpc pack create OUT ------------------------------------------------------------------ */
static int run_pack_create(const char *out_path, char **err)
{
    const char *argv[] = {getenv("KPC_TOOL"), "pack", "create", out_path, "--cache-dir", dir, NULL};
    char *out = NULL;
    int rc = ts_exec(argv, NULL, &out, err);
    free(out);
    return rc;
}

START_TEST(pack_create_replaces_only_a_regular_file)
{
    kpc_cache *c = ts_open(dir, 0, 0); /* one record to pack */
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src(ts_kernel_source(0), "a.hip");
    size_t size;
    free(ts_get_code(ctx, &src, &size));
    kpc_context_destroy(ctx);
    kpc_cache_close(c);

    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    char outs[4200];
    snprintf(outs, sizeof outs, "%s/outs", base);
    ck_assert_int_eq(mkdir(outs, 0700), 0);
    char fifo[4300], link[4300], target[4300], dev[4300], sub[4300];
    snprintf(fifo, sizeof fifo, "%s/fifo", outs);
    snprintf(link, sizeof link, "%s/link", outs);
    snprintf(target, sizeof target, "%s/target", outs);
    snprintf(dev, sizeof dev, "%s/full", outs);
    snprintf(sub, sizeof sub, "%s/dir", outs);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ts_write_file(target, "keep me", 7);
    ck_assert_int_eq(symlink(target, link), 0);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    bool root = geteuid() == 0;
    mode_t dev_mode = 0;
    if (root) { /* /dev/full's numbers: what a rename as root once replaced */
        ck_assert_int_eq(mknod(dev, S_IFCHR | 0666, makedev(1, 7)), 0);
        dev_mode = mode_of(dev);
    } else
        printf("pack_create_replaces_only_a_regular_file: skipped: a device needs root to make\n");
    const struct {
        const char *path, *kind;
        mode_t type;
    } cases[] = {{fifo, "a FIFO", S_IFIFO}, {link, "a symbolic link", S_IFLNK}, {sub, "a directory", S_IFDIR},
                 {dev, "a character device", S_IFCHR}};
    int n_entries = root ? 5 : 4;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].type == S_IFCHR && !root)
            continue;
        char *err = NULL;
        int rc = run_pack_create(cases[i].path, &err);
        ck_assert_msg(rc == 1, "pack create over %s: exit %d: %s", cases[i].kind, rc, err);
        ck_assert_msg(strstr(err, cases[i].path) && strstr(err, cases[i].kind), "%s: %s", cases[i].kind, err);
        free(err);
        ck_assert_msg((mode_of(cases[i].path) & S_IFMT) == cases[i].type, "%s was replaced", cases[i].kind);
        ck_assert_msg(ts_count_entries(outs) == n_entries, "a temp file was left beside %s", cases[i].kind);
    }
    size_t tsize;
    char *kept = ts_read_file(target, &tsize);
    ck_assert(tsize == 7 && memcmp(kept, "keep me", 7) == 0);
    free(kept);
    char got[4300];
    ssize_t n = readlink(link, got, sizeof got - 1);
    ck_assert_int_eq(n, (ssize_t)strlen(target));
    if (root)
        ck_assert_uint_eq(mode_of(dev), dev_mode);
    /* a regular file is replaced by the pack, and a new name is created */
    char *err = NULL;
    ck_assert_int_eq(run_pack_create(target, &err), 0);
    free(err);
    kpc_pack *p;
    ck_assert_int_eq(kpc_pack_open(target, &p), KPC_OK);
    ck_assert_uint_eq(kpc_pack_count(p), 1);
    kpc_pack_close(p);
    char fresh[4300];
    snprintf(fresh, sizeof fresh, "%s/new.kpack", outs);
    ck_assert_int_eq(run_pack_create(fresh, &err), 0);
    free(err);
    ck_assert_int_eq(ts_count_entries(outs), n_entries + 1);
    free(base);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trust");
    TCase *tc = tcase_create("trust");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, an_unsafe_cache_dir_is_refused_and_keeps_its_mode);
    tcase_add_test(tc, packs_another_user_could_write_are_refused);
    tcase_add_test(tc, pack_create_replaces_only_a_regular_file);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
