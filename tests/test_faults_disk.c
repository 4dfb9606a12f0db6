/*
 * test_faults_disk.c - the file-system faults, each through the public API:
 *
 *  - cross-user poisoning through a writable parent directory: a cache dir whose
 *    ancestors others may write (no sticky bit) is refused at open, logged; and a
 *    long-running process whose cache dir is renamed away and replaced by a look-alike
 *    tree (holding another key's code under the victim's key) keeps reading its own
 *    tree, held open, never the look-alike (as a second uid where the test runs as root)
 *  - a damaged record that cannot be removed is never logged as "removed"
 *  - temp files of dead writers (pid and start time in the name) are swept at open
 *    and by prune; a live writer's are kept
 *
 * The fake platform compiles: what matters here is the disk tree.
 */
#define _GNU_SOURCE
#include "support.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "faults_support.h"

#define NOBODY 65534

static char *path_in(const char *base, const char *rel)
{
    size_t n = strlen(base) + strlen(rel) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", base, rel);
    return p;
}

static bool exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* Open a cache on d (disk and index on, default sizes), capturing the log. */
static kpc_cache *open_logged(const char *d, char **log)
{
    ts_log_begin(KPC_LOG_WARN);
    kpc_cache *c = ts_open(d, 0, 0);
    *log = ts_log_end();
    return c;
}

/* ---- 6: ancestors ------------------------------------------------------------------- */

/* One request on a cache at d; true if its record reached the disk under d. */
static bool request_stored(kpc_cache *c, const char *d)
{
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src("// ancestors\n", "a.hip");
    size_t size;
    free(ts_get_code(ctx, &src, &size)); /* the request itself always succeeds */
    kpc_key key;
    ts_key(ctx, &src, &key);
    kpc_context_destroy(ctx);
    char hex[KPC_KEY_HEX], rel[128];
    kpc_key_hex(&key, hex);
    snprintf(rel, sizeof rel, "v1/%s/%.2s/%s.co", ts_target(), hex, hex);
    char *p = path_in(d, rel);
    bool stored = exists(p);
    free(p);
    return stored;
}

START_TEST(a_cache_dir_under_a_directory_others_may_write_is_refused)
{
    /* others may write the parent: they could rename the cache away */
    ck_assert_int_eq(chmod(parent, 0777), 0);
    char *log;
    kpc_cache *c = open_logged(dir, &log);
    ck_assert_msg(!request_stored(c, dir), "a cache under a world-writable parent was used");
    ck_assert_msg(strstr(log, parent) && strstr(log, "writable"), "no clear log line:\n%s", log);
    kpc_cache_close(c);
    free(log);

    /* the group may write it: the same */
    ck_assert_int_eq(chmod(parent, 0775), 0);
    c = open_logged(dir, &log);
    ck_assert(!request_stored(c, dir));
    ck_assert_msg(strstr(log, "writable"), "no clear log line:\n%s", log);
    kpc_cache_close(c);
    free(log);

    /* a deeper ancestor counts as much as the parent */
    ck_assert_int_eq(chmod(parent, 0777), 0);
    char *deep = path_in(parent, "sub/cache");
    char *sub = path_in(parent, "sub");
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    c = open_logged(deep, &log);
    ck_assert(!request_stored(c, deep));
    ck_assert_msg(strstr(log, parent), "the log does not name the ancestor:\n%s", log);
    kpc_cache_close(c);
    free(log);
    char root[4096];
    if (realpath(deep, root))
        kpc_index_unlink(root);
    free(deep);
    free(sub);
}
END_TEST

START_TEST(a_sticky_or_private_ancestor_is_accepted)
{
    /* sticky, as /tmp: others may create, not rename or remove what is ours */
    ck_assert_int_eq(chmod(parent, 01777), 0);
    char *log;
    kpc_cache *c = open_logged(dir, &log);
    ck_assert_msg(request_stored(c, dir), "a cache under a sticky parent was refused:\n%s", log);
    kpc_cache_close(c);
    free(log);
    ck_assert_int_eq(chmod(parent, 0755), 0);
    c = open_logged(dir, &log);
    ck_assert_msg(request_stored(c, dir), "a cache under a 0755 parent was refused:\n%s", log);
    kpc_cache_close(c);
    free(log);
}
END_TEST

/* ---- 6: the rename-away attack --------------------------------------------------------- */

/* The record file at path with its key replaced by key and the header checksum made
 * right again (layout: docs/file-format.md): what an attacker computes, XXH3 being no
 * secret. Written to out (a look-alike tree), readable by everyone. */
static void plant(const char *from, const kpc_key *key, const char *out)
{
    size_t size;
    uint8_t *b = ts_read_file(from, &size);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_ge(size, 256);
    memcpy(b + 16, key->bytes, 16);
    uint64_t sum = XXH3_64bits(b, 248);
    for (int i = 0; i < 8; i++)
        b[248 + i] = (uint8_t)(sum >> (8 * i));
    int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ck_assert_msg(fd >= 0, "open(%s): %s", out, strerror(errno));
    ck_assert_int_eq(kpc__write_all(fd, b, size), 0);
    close(fd);
    free(b);
}

/* mkdir -p of rel under base, each 0755 */
static void mkdirs(const char *base, const char *rel)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", base, rel);
    for (char *p = buf + strlen(base) + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                _exit(10);
            if (c == '\0')
                break;
            *p = c;
        }
    }
}

START_TEST(a_renamed_away_cache_dir_never_serves_a_look_alike)
{
    /* the victim opens its cache while the parent is private: accepted */
    ck_assert_int_eq(chmod(parent, 0755), 0);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source s0 = ts_src("// the victim's kernel\n", "k0.hip");
    kpc_source s1 = ts_src("// another kernel\n", "k1.hip");
    size_t n0, n1;
    void *code0 = ts_get_code(ctx, &s0, &n0), *code1 = ts_get_code(ctx, &s1, &n1);
    ck_assert(n0 != n1 || memcmp(code0, code1, n0) != 0);
    kpc_key k0, k1;
    ts_key(ctx, &s0, &k0);
    ts_key(ctx, &s1, &k1);
    kpc_context_destroy(ctx);
    char rec1[4400], hex0[KPC_KEY_HEX], rel0[160], reldir[96];
    ts_record_path(dir, ts_target(), &k1, "co", rec1, sizeof rec1);
    kpc_key_hex(&k0, hex0);
    snprintf(reldir, sizeof reldir, "cache/v1/%s/%.2s", ts_target(), hex0);
    snprintf(rel0, sizeof rel0, "%s/%s.co", reldir, hex0);
    /* what the attacker will plant: k1's record, relabelled k0 (made here, before the
     * attacker lost the rights to read the victim's tree) */
    char *staged = path_in(parent, "staged.co");
    plant(rec1, &k0, staged);
    ck_assert_int_eq(chmod(staged, 0644), 0);

    /* later, the parent becomes writable by another user, who renames the cache away
     * and builds a look-alike; as root, the attacker is uid 65534 */
    ck_assert_int_eq(chmod(parent, 0777), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0))
            _exit(11);
        char *old = path_in(parent, "cache.old"), *now = path_in(parent, "cache");
        if (rename(now, old) != 0)
            _exit(12);
        mkdirs(parent, reldir);
        char *planted = path_in(parent, rel0);
        size_t size;
        void *bytes = ts_read_file(staged, &size);
        int fd = bytes ? open(planted, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
        if (fd < 0 || kpc__write_all(fd, bytes, size) != 0)
            _exit(13);
        close(fd);
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the attacker failed: 0x%x", st);

    /* the victim's long-running process asks for k0 again (a new context: no memory hit) */
    ctx = ts_context(c);
    size_t n;
    void *code = ts_get_code(ctx, &s0, &n);
    ck_assert_msg(!(n == n1 && memcmp(code, code1, n) == 0),
                  "the victim got another key's code from the look-alike tree");
    ck_assert_msg(n == n0 && memcmp(code, code0, n) == 0, "the victim got a wrong object");
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    free(code0);
    free(code1);
    free(staged);
    /* teardown removes the parent with both trees; the renamed tree's segment is the
     * original path's, which is dir's */
}
END_TEST

/* ---- 11: a removal that failed is not "removed" ------------------------------------------- */

/* Run fn as another user where the test runs as root (root ignores modes): the tree is
 * handed to uid 65534 first. Without root, fn runs here. Returns fn's result. */
static int as_other_user(const char *tree, int (*fn)(void *), void *arg)
{
    if (geteuid() != 0)
        return fn(arg);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "chown -R %d:%d '%s'", NOBODY, NOBODY, tree);
    ck_assert_int_eq(system(cmd), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
            _exit(99);
        _exit(fn(arg));
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    snprintf(cmd, sizeof cmd, "chown -R 0:0 '%s'", tree);
    ck_assert_int_eq(system(cmd), 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

struct damaged_arg {
    const char *record_dir; /* made read-only by the child */
    kpc_source src;
};

static int read_damaged_readonly(void *p)
{
    struct damaged_arg *a = p;
    if (chmod(a->record_dir, 0500) != 0)
        return 20;
    ts_log_begin(KPC_LOG_WARN);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_program *prog = NULL;
    kpc_status s = kpc_program_get(ctx, &a->src, &prog); /* rebuilt: the request succeeds */
    kpc_program_release(prog);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    char *log = ts_log_end();
    chmod(a->record_dir, 0700);
    char root[4096];
    if (realpath(dir, root))
        kpc_index_unlink(root); /* this user's segment: teardown removes only its own */
    int rc = 0;
    if (s != KPC_OK)
        rc = 21;
    else if (strstr(log, "damaged") == NULL)
        rc = 22; /* the damage was not reported at all */
    else if (strstr(log, ": removed") != NULL)
        rc = 23; /* claimed removed, though the directory is read-only */
    else if (strstr(log, "could not") == NULL)
        rc = 24;
    if (rc)
        fprintf(stderr, "log (rc %d):\n%s", rc, log);
    free(log);
    return rc;
}

START_TEST(a_damaged_record_that_cannot_be_removed_is_not_logged_removed)
{
    ck_assert_int_eq(chmod(parent, 0755), 0);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    struct damaged_arg a = {.src = ts_src("// damaged, read-only\n", "d.hip")};
    size_t n;
    free(ts_get_code(ctx, &a.src, &n));
    kpc_key key;
    ts_key(ctx, &a.src, &key);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    char path[4400];
    ts_record_path(dir, ts_target(), &key, "co", path, sizeof path);
    size_t size;
    uint8_t *b = ts_read_file(path, &size);
    b[size - 1] ^= 0xff; /* payload checksum mismatch */
    ts_write_file(path, b, size);
    free(b);
    char rdir[4400];
    snprintf(rdir, sizeof rdir, "%s", path);
    *strrchr(rdir, '/') = '\0';
    a.record_dir = rdir;
    char root[4096];
    ck_assert_ptr_nonnull(realpath(dir, root));
    kpc_index_unlink(root); /* no READY memory of it: the reader goes to the file */
    ck_assert_int_eq(as_other_user(dir, read_damaged_readonly, &a), 0);
}
END_TEST

/* ---- 12: dead writers' temp files -------------------------------------------------------- */

/* A temp name as the store makes them: <32 hex>.<domain>.<pid>.<start time>.<seq>.tmp */
static void temp_name(char *out, size_t cap, const char *domain, pid_t pid, uint64_t start, unsigned seq)
{
    snprintf(out, cap, "0123456789abcdef0123456789abcdef.%s.%d.%llu.%u.tmp", domain, (int)pid,
             (unsigned long long)start, seq);
}

/* A process that has ended: its pid and start time. */
static pid_t dead_writer(uint64_t *start)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char c;
        close(p[1]);
        if (read(p[0], &c, 1) < 0)
            _exit(1);
        _exit(0);
    }
    close(p[0]);
    *start = kpc__proc_start_time(pid);
    ck_assert_uint_ne(*start, 0);
    close(p[1]); /* it ends */
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return pid;
}

static void make_file(const char *d, const char *name, time_t age_s)
{
    char *p = path_in(d, name);
    ts_write_file(p, "partial", 7);
    if (age_s) {
        struct timespec t[2] = {{time(NULL) - age_s, 0}, {time(NULL) - age_s, 0}};
        ck_assert_int_eq(utimensat(AT_FDCWD, p, t, 0), 0);
    }
    free(p);
}

START_TEST(dead_writers_temp_files_are_swept_at_open_and_by_prune)
{
    kpc_cache *c = ts_open(dir, 0, 0); /* makes the tree */
    kpc_cache_close(c);
    char root[4096];
    ck_assert_ptr_nonnull(realpath(dir, root));
    char *tmp = path_in(root, "v1/tmp");
    uint64_t dstart, mystart = kpc__proc_start_time(getpid());
    pid_t dead = dead_writer(&dstart);
    char me[17], other[17] = "0000000000000000", dead1[128], dead2[128], live[128], reused[128];
    char elsewhere[128], elsewhere_old[128], older_kpc[128];
    ts_tmp_domain(dir, me);
    if (strcmp(me, other) == 0)
        other[0] = '1';
    temp_name(dead1, sizeof dead1, me, dead, dstart, 0);
    temp_name(dead2, sizeof dead2, me, dead, dstart, 7);
    temp_name(live, sizeof live, me, getpid(), mystart, 0);
    /* our pid with another start time: a process that had our pid before us */
    temp_name(reused, sizeof reused, me, getpid(), mystart - 1, 0);
    /* a dead pid of another domain: another node's writer, alive or not, by its age only */
    temp_name(elsewhere, sizeof elsewhere, other, dead, dstart, 0);
    temp_name(elsewhere_old, sizeof elsewhere_old, other, dead, dstart, 1);
    /* the kpc before domains: <32 hex>.<pid>.<start>.<seq>.tmp, by its age only */
    snprintf(older_kpc, sizeof older_kpc, "0123456789abcdef0123456789abcdef.%d.%llu.0.tmp", (int)dead,
             (unsigned long long)dstart);
    make_file(tmp, dead1, 0);
    make_file(tmp, dead2, 0);
    make_file(tmp, live, 0);
    make_file(tmp, reused, 0);
    make_file(tmp, elsewhere, 0);
    make_file(tmp, elsewhere_old, 2 * 3600);
    make_file(tmp, older_kpc, 0);
    make_file(tmp, "0123456789abcdef0123456789abcdef.1.2.tmp", 0);        /* another kpc's name, fresh */
    make_file(tmp, "0123456789abcdef0123456789abcdef.1.3.tmp", 2 * 3600); /* the same, 2 h old */
    ck_assert_int_eq(ts_tmp_entries(dir), 9);

    /* open sweeps the dead writers' files */
    c = ts_open(dir, 0, 0);
    char *p;
    ck_assert_msg(!exists(p = path_in(tmp, dead1)), "a dead writer's temp file survived open"), free(p);
    ck_assert(!exists(p = path_in(tmp, dead2))), free(p);
    ck_assert_msg(!exists(p = path_in(tmp, reused)), "a reused pid's temp file survived"), free(p);
    ck_assert_msg(exists(p = path_in(tmp, live)), "a live writer's temp file was removed"), free(p);
    ck_assert_msg(exists(p = path_in(tmp, elsewhere)), "another domain's temp file was judged by its pid"),
        free(p);
    /* past the age, another domain's goes at open too: no node has to prune for it */
    ck_assert_msg(!exists(p = path_in(tmp, elsewhere_old)), "another domain's 2 h old temp file survived open"),
        free(p);
    ck_assert(exists(p = path_in(tmp, older_kpc))), free(p);
    kpc_cache_close(c);

    /* and so does prune (the tool), with the old rule for names without a start time */
    temp_name(dead1, sizeof dead1, me, dead, dstart, 1);
    make_file(tmp, dead1, 0);
    make_file(tmp, "0123456789abcdef0123456789abcdef.1.4.tmp", 600); /* 10 minutes old */
    const char *argv[] = {getenv("KPC_TOOL"), "prune", "--cache-dir", dir, "--json", NULL};
    ck_assert_ptr_nonnull(argv[0]);
    char *out = NULL;
    ck_assert_int_eq(ts_exec(argv, NULL, &out, NULL), 0);
    ck_assert_msg(!exists(p = path_in(tmp, dead1)), "prune kept a dead writer's temp file"), free(p);
    ck_assert(!exists(p = path_in(tmp, "0123456789abcdef0123456789abcdef.1.3.tmp"))), free(p);
    ck_assert(exists(p = path_in(tmp, "0123456789abcdef0123456789abcdef.1.2.tmp"))), free(p);
    ck_assert(exists(p = path_in(tmp, live))), free(p);
    ck_assert_msg(exists(p = path_in(tmp, elsewhere)), "prune removed another domain's young temp file"),
        free(p);
    ck_assert_msg(exists(p = path_in(tmp, "0123456789abcdef0123456789abcdef.1.4.tmp")),
                  "a temp file younger than an hour was pruned"), free(p);
    /* KPC_STALE_TMP_MS shortens the age */
    const char *const five_minutes[] = {"KPC_STALE_TMP_MS=300000", NULL};
    ck_assert_int_eq(ts_exec(argv, five_minutes, NULL, NULL), 0);
    ck_assert_msg(!exists(p = path_in(tmp, "0123456789abcdef0123456789abcdef.1.4.tmp")),
                  "KPC_STALE_TMP_MS=300000 kept a temp file 10 minutes old"), free(p);
    ck_assert(exists(p = path_in(tmp, "0123456789abcdef0123456789abcdef.1.2.tmp"))), free(p);
    cJSON *j = cJSON_Parse(out);
    ck_assert_msg(j != NULL, "not JSON: %s", out);
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(j, "temp_removed");
    /* the tool's own open swept the dead writer's; prune the old one at least */
    ck_assert_msg(cJSON_IsNumber(tr) && tr->valuedouble >= 1, "prune's figures: %s", out);
    cJSON_Delete(j);
    free(out);
    free(tmp);
}
END_TEST

/* A process of another pid namespace on this node (a container sharing the cache
 * directory) opens the cache: this process's pid means nothing there (kill says no such
 * process), so its live writer's temp file must be left alone. */
START_TEST(a_sweep_in_another_pid_namespace_spares_this_ones_writers)
{
    if (geteuid() != 0) {
        ts_skip("a new pid namespace needs root");
        return;
    }
    kpc_cache *c = ts_open(dir, 0, 0); /* makes the tree */
    kpc_cache_close(c);
    char root[4096], me[17], live[128];
    ck_assert_ptr_nonnull(realpath(dir, root));
    char *tmp = path_in(root, "v1/tmp");
    ts_tmp_domain(dir, me);
    temp_name(live, sizeof live, me, getpid(), kpc__proc_start_time(getpid()), 0);
    make_file(tmp, live, 0);
    pid_t tester = getpid();
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        if (unshare(CLONE_NEWPID) != 0)
            _exit(3);
        pid_t first = fork(); /* pid 1 of the new namespace */
        if (first == 0) {
            kpc_store *st;
            bool alone = kill(tester, 0) != 0; /* the test's pid names no process here */
            _exit(kpc_store_open(dir, 1ull << 30, &st) == KPC_OK ? (alone ? 0 : 4) : 1);
        }
        int st;
        _exit(first > 0 && waitpid(first, &st, 0) == first && WIFEXITED(st) ? WEXITSTATUS(st) : 2);
    }
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert(WIFEXITED(st));
    if (WEXITSTATUS(st) == 3) {
        ts_skip("unshare(CLONE_NEWPID) refused here: %s", "no pid namespaces");
        free(tmp);
        return;
    }
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    char *p = path_in(tmp, live);
    ck_assert_msg(exists(p), "a cache opened in another pid namespace removed a live writer's temp file");
    free(p);
    free(tmp);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {a_cache_dir_under_a_directory_others_may_write_is_refused,
                            a_sticky_or_private_ancestor_is_accepted,
                            a_renamed_away_cache_dir_never_serves_a_look_alike,
                            a_damaged_record_that_cannot_be_removed_is_not_logged_removed,
                            dead_writers_temp_files_are_swept_at_open_and_by_prune,
                            a_sweep_in_another_pid_namespace_spares_this_ones_writers, NULL};
    return ts_main_case("faults", "disk", 0, setup, teardown, tests);
}
