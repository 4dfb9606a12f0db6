/*
 * test_index_segment.c - the host index (shm/index.c): the segment itself. Damaged or
 * foreign segments (disk-only fallback), a segment of another layout (never mapped), a
 * 64-entry table under 200 and 450 keys (eviction).
 */
#define _GNU_SOURCE
#include "support.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "index_support.h"

/* Send this process's stderr to a file (and KPC_LOG to level); returns the saved fd. */
static int capture_begin(const char *file, int level)
{
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    kpc__log_level = level;
    return saved;
}

/* Restore stderr; returns the captured text (malloc'd). */
static char *capture_end(int saved, const char *file)
{
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    kpc__log_level = KPC_LOG_ERROR;
    FILE *f = fopen(file, "re");
    ck_assert_ptr_nonnull(f);
    char *text = calloc(1, 65536);
    size_t n = fread(text, 1, 65535, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* ---- segment ---------------------------------------------------------------------------- */
/* Header offsets, as docs/design.md ("The host index segment") lays them out. */
enum { OFF_MAGIC = 0, OFF_FORMAT = 8, OFF_SIZE = 16, OFF_CAPACITY = 24, OFF_OWNER = 32 };

static const struct damage {
    const char *what;
    const char *reason; /* in the log line */
} damages[] = {
    {"bad magic", "bad magic"},
    {"another format", "another format version or layout"},
    {"shorter than the header", "shorter than its header"},
    {"table cut short", "size does not match its table"},
    {"size field", "size does not match its table"},
    {"capacity 0", "bad capacity"},
    {"owner field", "another owner"},
    {"file of another user", "owned by another user"},
    {"mode 0644", "readable or writable by other users"},
    {"symlink", "Too many levels of symbolic links"},
};

static void damage_segment(int kind)
{
    char path[256];
    segment_path(dir, path, sizeof path);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    struct stat sb;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    uint64_t v64;
    uint32_t v32;
    int r = 0;
    switch (kind) {
    case 0: r = pwrite(fd, "NOTKPC!!", 8, OFF_MAGIC) == 8 ? 0 : -1; break;
    case 1:
        r = pread(fd, &v64, 8, OFF_FORMAT) == 8 ? 0 : -1;
        v64 ^= 1;
        r |= pwrite(fd, &v64, 8, OFF_FORMAT) == 8 ? 0 : -1;
        break;
    case 2: r = ftruncate(fd, 100); break;
    case 3: r = ftruncate(fd, sb.st_size - 4096); break;
    case 4:
        v64 = (uint64_t)sb.st_size * 2;
        r = pwrite(fd, &v64, 8, OFF_SIZE) == 8 ? 0 : -1;
        break;
    case 5:
        v32 = 0;
        r = pwrite(fd, &v32, 4, OFF_CAPACITY) == 4 ? 0 : -1;
        break;
    case 6:
        v32 = geteuid() + 4242;
        r = pwrite(fd, &v32, 4, OFF_OWNER) == 4 ? 0 : -1;
        break;
    case 7: r = fchown(fd, geteuid() + 4242, (gid_t)-1); break;
    case 8: r = fchmod(fd, 0644); break;
    case 9: {
        char moved[300];
        snprintf(moved, sizeof moved, "%s.real", path);
        r = rename(path, moved);
        r |= symlink(moved, path);
        break;
    }
    }
    ck_assert_msg(r == 0, "damaging the segment (%s): %s", damages[kind].what, strerror(errno));
    close(fd);
}

START_TEST(bad_segment_falls_back_to_disk)
{
    int kind = _i;
    if (kind == 7 && geteuid() != 0) {
        ts_skip("\"%s\" needs root to chown", damages[kind].what);
        return;
    }
    ts_fake_install();
    const char *code0 = "__global__ void seg0() {}\n", *code1 = "__global__ void seg1() {}\n";
    kpc_cache *c = ts_open(dir, 0, 64);
    kpc_context *ctx = ts_context(c);
    size_t size;
    uint64_t h0 = hash_now(ctx, code0, &size);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    damage_segment(kind);

    char *file = scratch_file("open.log");
    int saved = capture_begin(file, KPC_LOG_ERROR);
    c = ts_open(dir, 0, 64);
    char *log = capture_end(saved, file);
    ck_assert_msg(c->index == NULL, "a damaged segment (%s) was trusted", damages[kind].what);
    ck_assert_msg(strstr(log, damages[kind].reason) != NULL, "no log naming \"%s\": \"%s\"",
                  damages[kind].reason, log);
    free(log);
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.capacity, 0);
    ck_assert_uint_eq(st.lookups, 0);
    /* requests still succeed: one from disk, one compiled */
    ctx = ts_context(c);
    ck_assert_uint_eq(hash_now(ctx, code0, &size), h0);
    hash_now(ctx, code1, &size);
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.disk_hits, 1);
    ck_assert_uint_eq(st.builds, 1);
    ck_assert_uint_eq(ts_fake_compiles(), 2);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ck_assert_msg(segment_exists(), "the damaged segment was replaced without kpc-shm-reset");

    /* kpc-shm-reset removes it, and the next process creates a fresh one */
    char *out;
    int rc = run_reset(false, &out);
    ck_assert_msg(rc == 0, "kpc-shm-reset on a damaged segment: exit %d: %s", rc, out);
    free(out);
    ck_assert(!segment_exists());
    c = ts_open(dir, 0, 64);
    ck_assert_ptr_nonnull(c->index);
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.capacity, 64);
    ck_assert(kpc_index_check(c->index));
    kpc_cache_close(c);
    if (kind == 9) { /* the symlink's target */
        char path[256], moved[300];
        segment_path(dir, path, sizeof path);
        snprintf(moved, sizeof moved, "%s.real", path);
        unlink(moved);
    }
    free(file);
}
END_TEST

START_TEST(eviction_64_entries_200_keys)
{
    enum { K = 200, CAP = 64 };
    ts_fake_install();
    kpc_cache *c = ts_open(dir, 0, CAP);
    kpc_context *ctx = ts_context(c);
    uint64_t h[K];
    char buf[128];
    size_t size;
    for (int i = 0; i < K; i++)
        h[i] = hash_now(ctx, numbered(buf, sizeof buf, i), &size);
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.capacity, CAP);
    ck_assert_uint_eq(st.entries, CAP);
    ck_assert_uint_eq(st.evictions, K - CAP);
    ck_assert_uint_eq(st.host_builds, K);
    ck_assert(kpc_index_check(c->index));
    kpc_context_destroy(ctx);
    kpc_cache_close(c);

    /* a fresh cache (empty map): every key gives its code, from disk, none compiled */
    c = ts_open(dir, 0, CAP);
    ctx = ts_context(c);
    for (int i = 0; i < K; i++)
        ck_assert_uint_eq(hash_now(ctx, numbered(buf, sizeof buf, i), &size), h[i]);
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(ts_fake_compiles(), K);
    ck_assert_uint_eq(st.disk_hits, K);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_uint_eq(st.entries, CAP);
    ck_assert_uint_gt(st.evictions, K - CAP);
    ck_assert(kpc_index_check(c->index));
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

static int evict_child(int w, void *arg)
{
    (void)arg;
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .shm_entries = 64};
    kpc_cache *c = NULL;
    kpc_context *ctx = NULL;
    if (kpc_cache_open(&cfg, &c) != KPC_OK || kpc_context_create_for_target(c, ts_target(), &ctx) != KPC_OK)
        return 10;
    barrier(4);
    int r = evict_keys(ctx, w, sh->ev_hash[w]);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return r;
}

START_TEST(eviction_concurrent_processes)
{
    ts_fake_install();
    precreate(64);
    ck_assert_int_eq(ts_run_children(4, evict_child, NULL), 4);
    assert_eviction_outcome(4, sh->ev_hash, sizeof sh->ev_hash[0]);
}
END_TEST

/* a lock word overwritten with a thread that does not exist. Requests time out
 * on the lock (KPC_SHM_LOCK_TIMEOUT_MS), log it once per process and go on with the disk;
 * `kpc stats` ends; `kpc-shm-reset --force` removes the segment without its locks. */
/* The segment's name carries its layout: a kpc of another layout (an older one, whose
 * names had no layout at all, or one of another "-L" layout) left a segment for this
 * directory, and this kpc never maps it: its own index is created beside it and used,
 * and the other's bytes are untouched. (With one name for every layout the attach would
 * refuse the foreign format and turn the index off: disk only.) */
static void *file_bytes(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "open(%s)", path);
    void *buf = NULL;
    ck_assert_int_eq(kpc__read_fd(fd, 1u << 30, &buf, size), KPC_OK);
    close(fd);
    return buf;
}

START_TEST(other_layout_segment_never_mapped)
{
    precreate(64);
    char ours[256];
    segment_path(dir, ours, sizeof ours);
    size_t size;
    uint8_t *bytes = file_bytes(ours, &size); /* a sound segment of this layout */
    char *r = root_of(dir);
    ck_assert_int_eq(kpc_index_unlink(r), KPC_OK);
    ck_assert(!segment_exists());
    char older[256], other[256], base[96];
    kpc_root_segment_name(r, base, sizeof base);
    ck_assert_msg(strncmp(ours, "/dev/shm", 8) == 0 && strncmp(ours + 8, base, strlen(base)) == 0 &&
                      strncmp(ours + 8 + strlen(base), "-L", 2) == 0 && strlen(ours + 8 + strlen(base)) == 18,
                  "the segment name %s is not the directory's %s with -L and 16 hex digits", ours, base);
    snprintf(older, sizeof older, "/dev/shm%s", base);
    snprintf(other, sizeof other, "/dev/shm%s-L0123456789abcdef", base);
    uint64_t format;
    memcpy(&format, bytes + 8, 8); /* ixh_format: another layout's */
    format ^= 1;
    memcpy(bytes + 8, &format, 8);
    const char *foreign[] = {older, other};
    for (int i = 0; i < 2; i++) {
        int fd = open(foreign[i], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        ck_assert_msg(fd >= 0, "create %s", foreign[i]);
        ck_assert_int_eq(kpc__write_all(fd, bytes, size), 0);
        close(fd);
    }
    kpc_cache *c = ts_open(dir, 0, 64);
    bool used = c->index != NULL && kpc_index_usable(c->index);
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    kpc_cache_close(c);
    bool created = segment_exists();
    bool untouched = true;
    for (int i = 0; i < 2; i++) {
        size_t n;
        uint8_t *now = file_bytes(foreign[i], &n);
        untouched = untouched && n == size && memcmp(now, bytes, size) == 0;
        free(now);
        unlink(foreign[i]);
    }
    free(bytes);
    free(r);
    ck_assert_msg(used && st.capacity == 64, "the index of this layout was not used beside another's");
    ck_assert_msg(created, "no segment of this layout was created");
    ck_assert_msg(untouched, "a segment of another layout was written to");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("index");
    TCase *tc = tcase(s, "segment", 60);
    tcase_add_loop_test(tc, bad_segment_falls_back_to_disk, 0, (int)(sizeof damages / sizeof damages[0]));
    tcase_add_test(tc, eviction_64_entries_200_keys);
    tcase_add_test(tc, eviction_concurrent_processes);
    tcase_add_test(tc, other_layout_segment_never_mapped);
    return ts_run_suite(s);
}
