/*
 * test_tool_json.c - the kpc tool's JSON: stats (with waits and
 * takeovers), ls, verify, prune and clear say the right numbers, and fail and say so on
 * a read-only tree or an unreadable directory.
 */
#define _GNU_SOURCE
#include "support.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hold_support.h"
#include "tool_support.h"

/* Build sources in this process (a fresh cache handle; shm_entries as given). */
typedef struct built {
    kpc_key key;
    char path[4400];
    size_t code_size;
    bool ok;
} built;

static void build_here(kpc_context *ctx, const kpc_source *src, built *b)
{
    ts_key(ctx, src, &b->key);
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, src, &p);
    b->ok = s == KPC_OK;
    ck_assert(s == KPC_OK || s == KPC_E_COMPILE);
    if (p)
        kpc_program_code(p, &b->code_size);
    kpc_program_release(p);
    ts_record_path(dir, ts_target(), &b->key, b->ok ? "co" : "log", b->path, sizeof b->path);
    ck_assert(!is_absent(b->path));
}

static uint64_t file_size(const char *path)
{
    struct stat sb;
    ck_assert_int_eq(lstat(path, &sb), 0);
    return (uint64_t)sb.st_size;
}

START_TEST(stats_json_has_the_right_numbers)
{
    /* a host index of 2 entries, so that the third key evicts the least recently used */
    kpc_cache *c = ts_open(dir, 0, 2);
    kpc_context *ctx = ts_context(c);
    kpc_source a = ts_src(ts_kernel_source(0), "a.hip"), b = ts_src(ts_kernel_source(1), "b.hip"),
               bad = ts_src(ts_bad_source(), "bad.hip");
    built ba, bb, bbad;
    build_here(ctx, &a, &ba);
    build_here(ctx, &b, &bb);
    build_here(ctx, &bad, &bbad); /* evicts a's slot, publishes FAILED */
    ck_assert(ba.ok && bb.ok && !bbad.ok);
    kpc_context *ctx2 = ts_context(c); /* an empty map: b comes from the index and the disk */
    size_t size;
    free(ts_get_code(ctx2, &b, &size));
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    ck_assert_uint_eq(st.disk_hits, 1);

    cJSON *j = stats_json();
    const struct {
        const char *field;
        uint64_t want, lib;
    } want[] = {
        {"lookups", 4, st.lookups},
        {"hits", 1, st.hits},
        {"builds", 2, st.host_builds},
        {"build_failures", 1, st.host_build_failures},
        {"waits", 0, st.host_waits},
        {"takeovers", 0, st.takeovers},
        {"evictions", 1, st.evictions},
        {"entries", 2, st.entries},
        {"capacity", 2, st.capacity},
        {"disk_files", 3, st.disk_files},
        {"disk_bytes", file_size(ba.path) + file_size(bb.path) + file_size(bbad.path), st.disk_bytes},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        double v = num(j, want[i].field);
        ck_assert_msg(v == (double)want[i].want, "kpc stats: %s is %g, not %llu", want[i].field, v,
                      (unsigned long long)want[i].want);
        ck_assert_msg(want[i].lib == want[i].want, "kpc_stats_get: %s is %llu, not %llu", want[i].field,
                      (unsigned long long)want[i].lib, (unsigned long long)want[i].want);
    }
    ck_assert_str_eq(str(j, "index"), "ok");
    cJSON_Delete(j);
    /* the text form says the same */
    char *out = NULL;
    ck_assert_int_eq(kpc(&out, NULL, "stats", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(strstr(out, "builds         2\n") && strstr(out, "build failures 1\n") &&
                  strstr(out, "entries        2 / 2\n") && strstr(out, "in 3 files"), "kpc stats said:\n%s", out);
    free(out);
    kpc_context_destroy(ctx2);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* Two processes want one source (one builds, one waits); then a builder is killed
 * mid-compile and the next process takes its build over. Each builder's compile is held
 * open (tests/hold_support.h) until the test has seen what it waits for: a waiter, a kill,
 * however fast the compiler is. */
static int get_source(int i)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir};
    kpc_cache *c = NULL;
    if (kpc_cache_open(&cfg, &c) != KPC_OK)
        return 10;
    kpc_context *ctx = NULL;
    if (kpc_context_create_for_target(c, ts_target(), &ctx) != KPC_OK)
        return 11;
    kpc_source src = ts_src(ts_kernel_source(i), "held.hip");
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, &src, &p);
    kpc_program_release(p);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return s == KPC_OK ? 0 : 12;
}

static pid_t spawn_get(int i)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(get_source(i));
    return pid;
}

static int reap(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The host index's counters once the cache's segment exists (a child made it). */
static kpc_index_counters counters(kpc_index **ix)
{
    char root[4096];
    if (*ix == NULL && realpath(dir, root))
        kpc_index_open_existing(root, ix);
    kpc_index_counters ic = {0};
    if (*ix)
        kpc_index_counters_get(*ix, &ic);
    return ic;
}

START_TEST(stats_json_counts_waits_and_takeovers)
{
    /* this process never loads the compiler: every compile runs in a fresh child */
    kpc_index *ix = NULL;
    ts_hold_arm();
    pid_t a = spawn_get(6);
    ck_assert_int_eq(ts_hold_await(120), a);
    pid_t b = spawn_get(6);
    for (int i = 0; i < 12000 && counters(&ix).waits < 1; i++) /* until b waits on a */
        usleep(10000);
    ck_assert_uint_eq(counters(&ix).waits, 1);
    ts_hold_release();
    ck_assert_int_eq(reap(a), 0);
    ck_assert_int_eq(reap(b), 0);
    /* the builder of a second source dies in its compile */
    ts_hold_arm();
    pid_t victim = spawn_get(12);
    ck_assert_int_eq(ts_hold_await(120), victim);
    ck_assert_uint_eq(counters(&ix).lookups, 3); /* its claim */
    kill(victim, SIGKILL);
    ck_assert_int_eq(reap(victim), 128 + SIGKILL);
    pid_t heir = spawn_get(12);
    ck_assert_int_eq(reap(heir), 0);
    kpc_index_close(ix);
    ts_hold_remove();

    cJSON *j = stats_json();
    const struct {
        const char *field;
        double want;
    } want[] = {{"lookups", 4}, {"hits", 1}, {"builds", 2}, {"build_failures", 0}, {"waits", 1},
                {"takeovers", 1}, {"evictions", 0}, {"entries", 2}, {"capacity", 65536}, {"disk_files", 2}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(num(j, want[i].field) == want[i].want, "kpc stats: %s is %g, not %g", want[i].field,
                      num(j, want[i].field), want[i].want);
    cJSON_Delete(j);
}
END_TEST

/* ---- ls --json, verify --json, prune, clear ---------------------------------------------- */
static const cJSON *row_of(const cJSON *arr, const kpc_key *key)
{
    char hex[KPC_KEY_HEX];
    kpc_key_hex(key, hex);
    const cJSON *row;
    cJSON_ArrayForEach(row, arr)
        if (strcmp(str(row, "key"), hex) == 0)
            return row;
    ck_abort_msg("no row for key %s", hex);
    return NULL;
}

/* Three records built here: a.hip, b.hip (code) and bad.hip (a log). */
static void populate(built b[3])
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source srcs[3] = {ts_src(ts_kernel_source(0), "a.hip"), ts_src(ts_kernel_source(1), "b.hip"),
                          ts_src(ts_bad_source(), "bad.hip")};
    for (int i = 0; i < 3; i++)
        build_here(ctx, &srcs[i], &b[i]);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}

static void flip_byte(const char *path, size_t offset)
{
    size_t size;
    unsigned char *f = ts_read_file(path, &size);
    ck_assert_uint_lt(offset, size);
    f[offset] ^= 0x40;
    ts_write_file(path, f, size);
    free(f);
}

START_TEST(ls_json_lists_every_record)
{
    built b[3];
    populate(b);
    const char *names[] = {"a.hip", "b.hip", "bad.hip"}, *kinds[] = {"co", "co", "log"};
    char *out = NULL;
    ck_assert_int_eq(kpc(&out, NULL, "ls", "--json", "--cache-dir", dir, NULL), 0);
    cJSON *j = parse(out);
    free(out);
    ck_assert(cJSON_IsArray(j));
    ck_assert_int_eq(cJSON_GetArraySize(j), 3);
    for (int i = 0; i < 3; i++) {
        const cJSON *row = row_of(j, &b[i].key);
        struct stat sb;
        ck_assert_int_eq(lstat(b[i].path, &sb), 0);
        ck_assert_str_eq(str(row, "kind"), kinds[i]);
        ck_assert_str_eq(str(row, "target"), ts_target());
        ck_assert_str_eq(str(row, "source"), names[i]);
        ck_assert(num(row, "size") == (double)sb.st_size);
        ck_assert(num(row, "last_use") == (double)sb.st_mtim.tv_sec);
        ck_assert(!boolean(row, "damaged"));
    }
    cJSON_Delete(j);
    /* most recently used first */
    struct timespec old[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, b[1].path, old, 0), 0);
    ck_assert_int_eq(kpc(&out, NULL, "ls", "--json", "--cache-dir", dir, NULL), 0);
    j = parse(out);
    free(out);
    ck_assert(row_of(j, &b[1].key) == cJSON_GetArrayItem(j, 2));
    cJSON_Delete(j);
    /* a damaged header shows as damaged, with no target */
    flip_byte(b[0].path, 100);
    ck_assert_int_eq(kpc(&out, NULL, "ls", "--json", "--cache-dir", dir, NULL), 0);
    j = parse(out);
    free(out);
    const cJSON *row = row_of(j, &b[0].key);
    ck_assert(boolean(row, "damaged"));
    ck_assert_str_eq(str(row, "target"), "");
    ck_assert(!boolean(row_of(j, &b[1].key), "damaged"));
    cJSON_Delete(j);
}
END_TEST

START_TEST(verify_json_reports_and_removes_damage)
{
    built b[3];
    populate(b);
    char *out = NULL;
    ck_assert_int_eq(kpc(&out, NULL, "verify", "--json", "--cache-dir", dir, NULL), 0);
    cJSON *j = parse(out);
    free(out);
    ck_assert(num(j, "checked") == 3 && num(j, "removed") == 0);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "damaged")), 0);
    cJSON_Delete(j);
    /* damage in the payload only: ls (headers) cannot see it, verify must */
    flip_byte(b[1].path, 256 + b[1].code_size / 2);
    ck_assert_int_eq(kpc(&out, NULL, "verify", "--json", "--cache-dir", dir, NULL), 1);
    j = parse(out);
    free(out);
    ck_assert(num(j, "checked") == 3 && num(j, "removed") == 1);
    const cJSON *damaged = cJSON_GetObjectItemCaseSensitive(j, "damaged");
    ck_assert(cJSON_IsArray(damaged) && cJSON_GetArraySize(damaged) == 1);
    ck_assert_str_eq(str(cJSON_GetArrayItem(damaged, 0), "path"), b[1].path);
    ck_assert(boolean(cJSON_GetArrayItem(damaged, 0), "removed"));
    cJSON_Delete(j);
    ck_assert(is_absent(b[1].path));
    ck_assert(!is_absent(b[0].path) && !is_absent(b[2].path));
    /* clean again: exit 0 */
    ck_assert_int_eq(kpc(&out, NULL, "verify", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(strstr(out, "checked 2 files, removed 0") != NULL, "verify said:\n%s", out);
    free(out);
    /* a directory and a symlink where records should be; the log record truncated */
    ck_assert_int_eq(mkdir(b[1].path, 0700), 0);
    char *target = side_file("verify-target", ""); /* beside the cache dir: this test's own */
    ck_assert_int_eq(rename(b[0].path, target), 0);
    ck_assert_int_eq(symlink(target, b[0].path), 0);
    ck_assert_int_eq(truncate(b[2].path, 100), 0);
    ck_assert_int_eq(kpc(&out, NULL, "verify", "--cache-dir", dir, NULL), 1);
    for (int i = 0; i < 3; i++) {
        char line[4500];
        snprintf(line, sizeof line, "removed %s\n", b[i].path);
        ck_assert_msg(strstr(out, line) != NULL, "verify did not report %s:\n%s", b[i].path, out);
        ck_assert(is_absent(b[i].path));
    }
    free(out);
    ck_assert(!is_absent(target)); /* the link was removed, not followed */
    unlink(target);
    free(target);
    ck_assert_int_eq(kpc(NULL, NULL, "verify", "--cache-dir", dir, NULL), 0);
}
END_TEST

START_TEST(prune_and_clear_json)
{
    /* an absent cache dir is an empty cache, in JSON too (and is not created) */
    char *out = NULL;
    ck_assert_int_eq(kpc(&out, NULL, "prune", "--json", "--cache-dir", dir, NULL), 0);
    cJSON *j = parse(out);
    free(out);
    ck_assert(num(j, "files_before") == 0 && num(j, "files_removed") == 0);
    cJSON_Delete(j);
    ck_assert(is_absent(dir));
    built b[3];
    populate(b);
    /* ages: a oldest, then the log, then b */
    time_t now = time(NULL);
    struct timespec t0[2] = {{now - 300, 0}, {now - 300, 0}}, t1[2] = {{now - 200, 0}, {now - 200, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, b[0].path, t0, 0), 0);
    ck_assert_int_eq(utimensat(AT_FDCWD, b[2].path, t1, 0), 0);
    uint64_t keep = file_size(b[1].path) + file_size(b[2].path), oldest = file_size(b[0].path);
    char limit[32];
    snprintf(limit, sizeof limit, "%llu", (unsigned long long)keep);
    ck_assert_int_eq(kpc(&out, NULL, "prune", "--json", "--max-size", limit, "--cache-dir", dir, NULL), 0);
    j = parse(out);
    free(out);
    ck_assert(num(j, "files_before") == 3 && num(j, "files_removed") == 1);
    ck_assert(num(j, "bytes_before") == (double)(keep + oldest) && num(j, "bytes_removed") == (double)oldest);
    ck_assert(num(j, "max_bytes") == (double)keep);
    cJSON_Delete(j);
    ck_assert(is_absent(b[0].path)); /* the least recently used went first */
    ck_assert(!is_absent(b[1].path) && !is_absent(b[2].path));
    /* --max-size 0 empties it; clear then has nothing to remove */
    ck_assert_int_eq(kpc(&out, NULL, "prune", "--json", "--max-size", "0", "--cache-dir", dir, NULL), 0);
    j = parse(out);
    free(out);
    ck_assert(num(j, "files_removed") == 2);
    cJSON_Delete(j);
    populate(b);
    ck_assert_int_eq(kpc(&out, NULL, "clear", "--json", "--cache-dir", dir, NULL), 0);
    j = parse(out);
    free(out);
    ck_assert(num(j, "removed") == 3);
    cJSON_Delete(j);
    for (int i = 0; i < 3; i++)
        ck_assert(is_absent(b[i].path));
    ck_assert_int_eq(kpc(&out, NULL, "clear", "--json", "--cache-dir", dir, NULL), 0);
    j = parse(out);
    free(out);
    ck_assert(num(j, "removed") == 0);
    cJSON_Delete(j);
}
END_TEST

static int kpc_bound(char **out, char **err, const char *cmd, bool json)
{
    const char *args[] = {cmd, "--cache-dir", dir, json ? "--json" : NULL, NULL};
    return kpc_bound_args(out, err, args);
}

static char *dir_of(const char *path)
{
    char *d = strdup(path);
    *strrchr(d, '/') = '\0';
    return d;
}

START_TEST(clear_on_a_read_only_tree_fails_and_says_so)
{
    built b[3];
    populate(b);
    /* every record's directory read-only: nothing can be removed */
    char *dirs[3];
    for (int i = 0; i < 3; i++) {
        dirs[i] = dir_of(b[i].path);
        ck_assert_int_eq(chmod(dirs[i], 0500), 0);
    }
    char *out = NULL, *err = NULL;
    int rc = kpc_bound(&out, &err, "clear", false);
    ck_assert_msg(rc == 1, "clear on a read-only tree exited %d\nstdout: %s\nstderr: %s", rc, out, err);
    ck_assert_msg(strstr(err, b[0].path) && strstr(err, "ermission denied"),
                  "the failed removal is not reported:\n%s", err);
    free(out), free(err);
    rc = kpc_bound(&out, &err, "clear", true);
    ck_assert_int_eq(rc, 1);
    cJSON *j = parse(out);
    ck_assert(num(j, "removed") == 0 && num(j, "failed") == 3);
    cJSON_Delete(j);
    free(out), free(err);
    for (int i = 0; i < 3; i++) {
        ck_assert(!is_absent(b[i].path)); /* still there, as reported */
        chmod(dirs[i], 0700);
        free(dirs[i]);
    }
}
END_TEST

/* prune with a directory it cannot read: it prunes every record it can see, names the
 * directory it skipped, and fails (before: a walk error stopped the whole prune) */
START_TEST(prune_with_an_unreadable_directory_prunes_the_rest)
{
    built b[3];
    populate(b);
    char *d = dir_of(b[0].path);
    ck_assert_int_eq(chmod(d, 0), 0);
    const char *const prune[] = {"prune", "--cache-dir", dir, "--max-size", "0", NULL};
    char *out = NULL, *err = NULL;
    int rc = kpc_bound_args(&out, &err, prune);
    ck_assert_msg(rc == 1, "prune with an unreadable directory exited %d\n%s%s", rc, out, err);
    ck_assert_msg(strstr(err, d) && strstr(err, "skipped"), "the skipped directory is not named:\n%s", err);
    int outside = 0;
    for (int i = 0; i < 3; i++) {
        char *di = dir_of(b[i].path);
        if (strcmp(di, d) != 0) {
            ck_assert_msg(is_absent(b[i].path), "%s was not pruned", b[i].path);
            outside++;
        }
        free(di);
    }
    ck_assert_int_ge(outside, 1);
    free(out), free(err);
    ck_assert_int_eq(chmod(d, 0700), 0);
    ck_assert_msg(!is_absent(b[0].path), "a record of the unreadable directory went");
    free(d);
}
END_TEST

/* prune and clear on a tree this user may not write: a line that says the cache is
 * read-only, not only one "Permission denied" per file */
START_TEST(prune_on_a_read_only_tree_says_so)
{
    built b[3];
    populate(b);
    char *dirs[3];
    for (int i = 0; i < 3; i++) {
        dirs[i] = dir_of(b[i].path);
        ck_assert_int_eq(chmod(dirs[i], 0500), 0);
    }
    const char *const prune[] = {"prune", "--cache-dir", dir, "--max-size", "0", NULL};
    char *out = NULL, *err = NULL;
    int rc = kpc_bound_args(&out, &err, prune);
    ck_assert_msg(rc == 1 && strstr(err, "read-only"), "prune on a read-only tree: exit %d\n%s%s", rc, out, err);
    free(out), free(err);
    rc = kpc_bound(&out, &err, "clear", false);
    ck_assert_msg(rc == 1 && strstr(err, "read-only"), "clear on a read-only tree: exit %d\n%s%s", rc, out, err);
    free(out), free(err);
    for (int i = 0; i < 3; i++) {
        ck_assert(!is_absent(b[i].path));
        chmod(dirs[i], 0700);
        free(dirs[i]);
    }
}
END_TEST

START_TEST(verify_with_an_unreadable_directory_fails_and_says_so)
{
    built b[3];
    populate(b);
    char *d = dir_of(b[0].path);
    ck_assert_int_eq(chmod(d, 0), 0);
    char *out = NULL, *err = NULL;
    int rc = kpc_bound(&out, &err, "verify", false);
    ck_assert_msg(rc == 1, "verify with an unreadable directory exited %d\nstdout: %s\nstderr: %s", rc,
                  out, err);
    ck_assert_msg(strstr(err, d) && strstr(err, "ermission denied"),
                  "the unreadable directory is not reported:\n%s", err);
    free(out), free(err);
    /* ls and stats walk too: the same error, the same status */
    rc = kpc_bound(&out, &err, "ls", false);
    ck_assert_msg(rc == 1 && strstr(err, d), "ls exited %d:\n%s", rc, err);
    free(out), free(err);
    ck_assert_int_eq(chmod(d, 0700), 0);
    ck_assert_int_eq(kpc_bound(&out, &err, "verify", false), 0);
    free(out), free(err);
    free(d);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {stats_json_has_the_right_numbers, stats_json_counts_waits_and_takeovers,
                            ls_json_lists_every_record, verify_json_reports_and_removes_damage,
                            prune_and_clear_json, clear_on_a_read_only_tree_fails_and_says_so,
                            verify_with_an_unreadable_directory_fails_and_says_so,
                            prune_with_an_unreadable_directory_prunes_the_rest,
                            prune_on_a_read_only_tree_says_so, NULL};
    return ts_main_case("tool", "json", 120, setup, teardown, tests);
}
