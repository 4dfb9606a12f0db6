/*
 * test_tool.c - the `kpc` tool as a user runs it ($KPC_TOOL, fork/exec): the exit codes
 * of every subcommand (0 success, 1 failure, 2 bad usage), and the JSON of `kpc stats`,
 * `kpc ls`, `kpc verify`, `kpc prune`, `kpc clear` and `kpc compile`, checked against
 * what the library and the disk say. Compiles are real hipRTC compiles.
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

static char *dir;
static const char *tool;
static void setup(void)
{
    dir = ts_tmpdir();
    tool = getenv("KPC_TOOL");
    ck_assert_msg(tool != NULL, "KPC_TOOL is not set (run through ctest)");
}
static void teardown(void) { ts_cleanup(dir); }

/* Run `kpc ARGS...` (NULL-terminated); stdout and stderr into *out / *err (may be NULL). */
static int kpc(char **out, char **err, ...)
{
    const char *argv[64] = {tool};
    int n = 1;
    va_list ap;
    va_start(ap, err);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        ck_assert_int_lt(n, 63);
        argv[n++] = a;
    }
    va_end(ap);
    argv[n] = NULL;
    return ts_exec(argv, NULL, out, err);
}

/* The same with an environment entry ("K=V"). */
static int kpc_env(const char *env, char **out, char **err, const char *a1, const char *a2, const char *a3)
{
    const char *argv[] = {tool, a1, a2, a3, NULL};
    const char *envs[] = {env, NULL};
    return ts_exec(argv, envs, out, err);
}

static cJSON *parse(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    ck_assert_msg(j != NULL, "not JSON:\n%s", text);
    return j;
}

static double num(const cJSON *o, const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    ck_assert_msg(cJSON_IsNumber(v), "field \"%s\" is missing or not a number", field);
    return v->valuedouble;
}

static const char *str(const cJSON *o, const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    ck_assert_msg(cJSON_IsString(v), "field \"%s\" is missing or not a string", field);
    return v->valuestring;
}

static bool boolean(const cJSON *o, const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    ck_assert_msg(cJSON_IsBool(v), "field \"%s\" is missing or not a boolean", field);
    return cJSON_IsTrue(v);
}

/* A file next to the cache dir holding text; returns its path (malloc'd). */
static char *side_file(const char *name, const char *text)
{
    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    size_t n = strlen(base) + strlen(name) + 2;
    char *path = malloc(n);
    snprintf(path, n, "%s/%s", base, name);
    free(base);
    ts_write_file(path, text, strlen(text));
    return path;
}

static bool is_absent(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) != 0 && errno == ENOENT;
}

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

/* ---- exit codes ------------------------------------------------------------------------ */
START_TEST(bad_usage_exits_2_and_help_exits_0)
{
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(kpc(NULL, &err, NULL), 2);
    ck_assert_ptr_nonnull(strstr(err, "usage"));
    free(err);
    ck_assert_int_eq(kpc(NULL, NULL, "frobnicate", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "--cache-dir", dir, "ls", NULL), 2); /* options follow the command */
    ck_assert_int_eq(kpc(&out, NULL, "--help", NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage"));
    free(out);
    const char *subs[] = {"ls", "stats", "verify", "prune", "clear", "compile"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        ck_assert_msg(kpc(NULL, NULL, subs[i], "--cache-dir", dir, "--bogus", NULL) == 2, "%s --bogus", subs[i]);
        ck_assert_msg(kpc(NULL, NULL, subs[i], "--cache-dir", NULL) == 2, "%s --cache-dir (no DIR)", subs[i]);
        out = NULL;
        ck_assert_msg(kpc(&out, NULL, subs[i], "-h", NULL) == 0, "%s -h", subs[i]);
        ck_assert_msg(strstr(out, "usage") != NULL, "%s -h printed no usage:\n%s", subs[i], out);
        free(out);
        ck_assert_msg(kpc(NULL, NULL, subs[i], "--help", NULL) == 0, "%s --help", subs[i]);
        if (i < 5)
            ck_assert_msg(kpc(NULL, NULL, subs[i], "--cache-dir", dir, "operand", NULL) == 2, "%s operand", subs[i]);
    }
    ck_assert_int_eq(kpc(NULL, NULL, "ls", "--cache-dir", dir, "--max-size", "1M", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "stats", "--cache-dir", dir, "--stale", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "prune", "--cache-dir", dir, "--max-size", "12Q", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "prune", "--cache-dir", dir, "--max-size", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "-j", "0", "x.hip", NULL), 2);
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "-o", "/nonexistent/dir", "a.hip", "b.hip",
                         NULL), 2);
    /* -o DIR writes DIR/NAME.co: two files of one name would overwrite each other */
    err = NULL;
    ck_assert_int_eq(kpc(NULL, &err, "compile", "--cache-dir", dir, "-o", "/tmp", "a/x.hip", "b/x.hip", NULL), 2);
    ck_assert_msg(strstr(err, "x.hip") != NULL, "%s", err);
    free(err);
    /* a malformed environment is bad usage too, named in the message */
    err = NULL;
    ck_assert_int_eq(kpc_env("KPC_CACHE_MAX_SIZE=lots", NULL, &err, "ls", "--cache-dir", dir), 2);
    ck_assert_ptr_nonnull(strstr(err, "KPC_CACHE_MAX_SIZE"));
    free(err);
    const char *compile_argv[] = {tool, "compile", "--cache-dir", dir, "--target", ts_target(), "x.hip", NULL};
    const char *bad_env[] = {"KPC_LOG=loud", NULL};
    err = NULL;
    ck_assert_int_eq(ts_exec(compile_argv, bad_env, NULL, &err), 2);
    ck_assert_ptr_nonnull(strstr(err, "KPC_LOG"));
    free(err);
    ck_assert(is_absent(dir)); /* nothing above created the cache dir */
}
END_TEST

START_TEST(every_subcommand_succeeds_and_fails_with_the_right_code)
{
    char *good = side_file("good.hip", ts_kernel_source(0));
    char *good2 = side_file("good2.hip", ts_kernel_source(1));
    char *bad = side_file("bad.hip", ts_bad_source());
    char *out = NULL, *err = NULL;
    /* an absent cache dir is an empty cache */
    ck_assert_int_eq(kpc(NULL, NULL, "ls", "--cache-dir", dir, NULL), 0);
    ck_assert_int_eq(kpc(NULL, NULL, "verify", "--cache-dir", dir, NULL), 0);
    ck_assert_int_eq(kpc(NULL, NULL, "stats", "--cache-dir", dir, NULL), 0);
    ck_assert_int_eq(kpc(NULL, NULL, "prune", "--cache-dir", dir, NULL), 0);
    ck_assert_int_eq(kpc(NULL, NULL, "clear", "--cache-dir", dir, NULL), 0);

    /* compile: built, then hit */
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), good, NULL), 0);
    ck_assert_msg(strncmp(out, "built", 5) == 0, "first compile said:\n%s", out);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), good, NULL), 0);
    ck_assert_msg(strncmp(out, "hit", 3) == 0, "second compile said:\n%s", out);
    free(out);
    /* --json, two files: one hit, one built */
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--json", "-j", "1", "--cache-dir", dir, "--target", ts_target(),
                         good, good2, NULL), 0);
    cJSON *j = parse(out);
    ck_assert(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 2);
    ck_assert_str_eq(str(cJSON_GetArrayItem(j, 0), "result"), "hit");
    ck_assert_str_eq(str(cJSON_GetArrayItem(j, 1), "result"), "built");
    ck_assert_str_eq(str(cJSON_GetArrayItem(j, 1), "status"), "KPC_OK");
    ck_assert_str_eq(str(cJSON_GetArrayItem(j, 0), "file"), good);
    ck_assert(num(cJSON_GetArrayItem(j, 1), "size") > 0 && num(cJSON_GetArrayItem(j, 1), "seconds") > 0);
    cJSON_Delete(j);
    free(out);
    /* -o writes the code object itself */
    char *obj = side_file("good.co", "");
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), "-o", obj, good, NULL), 0);
    size_t size;
    void *code = ts_read_file(obj, &size);
    ck_assert(ts_is_code_object(code, size));
    free(code);
    /* compile failures: a compile error (with the compiler's log), a missing file, an
     * unknown target */
    ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", dir, "--target", ts_target(), bad, NULL), 1);
    ck_assert_msg(strstr(err, "KPC_E_COMPILE") && strstr(err, "undeclared_thing"), "stderr:\n%s", err);
    ck_assert_msg(strncmp(out, "failed", 6) == 0, "stdout:\n%s", out);
    free(out), free(err);
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), "/nonexistent.hip",
                         NULL), 1);
    ck_assert_int_eq(kpc(NULL, NULL, "compile", "--cache-dir", dir, "--target", "gfx9999", good, NULL), 1);

    /* the data commands on a populated cache: 2 objects and 1 log */
    ck_assert_int_eq(kpc(&out, NULL, "ls", "--cache-dir", dir, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "good.hip"));
    ck_assert_ptr_nonnull(strstr(out, "bad.hip"));
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "verify", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(strstr(out, "checked 3 files, removed 0") != NULL, "verify said:\n%s", out);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "stats", "--cache-dir", dir, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "in 3 files"));
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "prune", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(strstr(out, "removed 0 of 3 files") != NULL, "prune said:\n%s", out);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "clear", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(strstr(out, "removed 3 files") != NULL, "clear said:\n%s", out);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "ls", "--json", "--cache-dir", dir, NULL), 0);
    j = parse(out);
    ck_assert(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 0);
    cJSON_Delete(j);
    free(out);

    /* a cache dir the library would refuse: a regular file */
    const char *data_cmds[] = {"ls", "stats", "verify", "prune", "clear"};
    for (size_t i = 0; i < 5; i++) {
        err = NULL;
        ck_assert_msg(kpc(NULL, &err, data_cmds[i], "--cache-dir", good, NULL) == 1, "%s on a file", data_cmds[i]);
        ck_assert_msg(strstr(err, "not a directory") != NULL, "%s said:\n%s", data_cmds[i], err);
        free(err);
    }
    if (geteuid() == 0) { /* and a directory another user owns */
        char *theirs = side_file("theirs", "");
        unlink(theirs);
        ck_assert_int_eq(mkdir(theirs, 0700), 0);
        ck_assert_int_eq(chown(theirs, 65534, 65534), 0);
        for (size_t i = 0; i < 5; i++)
            ck_assert_msg(kpc(NULL, NULL, data_cmds[i], "--cache-dir", theirs, NULL) == 1, "%s on uid 65534's dir",
                          data_cmds[i]);
        ck_assert_int_eq(rmdir(theirs), 0);
        free(theirs);
    }
    free(good), free(good2), free(bad), free(obj);
}
END_TEST

/* ---- stats --json ---------------------------------------------------------------------- */
static const char *const stats_fields[] = {"lookups", "hits", "builds", "build_failures", "waits", "takeovers",
                                           "evictions", "entries", "capacity", "disk_bytes", "disk_files"};

static cJSON *stats_json(void)
{
    char *out = NULL, *err = NULL;
    int rc = kpc(&out, &err, "stats", "--json", "--cache-dir", dir, NULL);
    ck_assert_msg(rc == 0, "kpc stats --json: exit %d\n%s", rc, err);
    cJSON *j = parse(out);
    free(out), free(err);
    for (size_t i = 0; i < sizeof stats_fields / sizeof stats_fields[0]; i++) {
        double v = num(j, stats_fields[i]);
        ck_assert_msg(v >= 0 && v == (double)(uint64_t)v, "%s is not a whole number: %g", stats_fields[i], v);
    }
    return j;
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

/* Two processes want one slow source (one builds, one waits); then a builder is killed
 * mid-compile and the next process takes its build over. */
static int get_slow(int kernels)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir};
    kpc_cache *c = NULL;
    if (kpc_cache_open(&cfg, &c) != KPC_OK)
        return 10;
    kpc_context *ctx = NULL;
    if (kpc_context_create_for_target(c, ts_target(), &ctx) != KPC_OK)
        return 11;
    char *code = ts_slow_source(kernels);
    kpc_source src = ts_src(code, "slow.hip");
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, &src, &p);
    kpc_program_release(p);
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return s == KPC_OK ? 0 : 12;
}

static pid_t spawn_slow(int kernels, unsigned delay_ms)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct timespec t = {0, (long)delay_ms * 1000000L};
        nanosleep(&t, NULL);
        _exit(get_slow(kernels));
    }
    return pid;
}

static int reap(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

START_TEST(stats_json_counts_waits_and_takeovers)
{
    /* this process never loads the compiler: every compile runs in a fresh child */
    pid_t a = spawn_slow(6, 0), b = spawn_slow(6, 100);
    ck_assert_int_eq(reap(a), 0);
    ck_assert_int_eq(reap(b), 0);
    /* the builder of a second source dies once it holds the slot */
    pid_t victim = spawn_slow(12, 0);
    char root[4096];
    kpc_index *ix = NULL;
    for (int i = 0; i < 500; i++) { /* until its lookup (the claim) is counted */
        if (ix == NULL && realpath(dir, root))
            kpc_index_open_existing(root, &ix);
        kpc_index_counters ic = {0};
        if (ix)
            kpc_index_counters_get(ix, &ic);
        if (ic.lookups == 3)
            break;
        usleep(10000);
    }
    ck_assert_ptr_nonnull(ix);
    usleep(200000); /* well into its compile */
    kill(victim, SIGKILL);
    ck_assert_int_eq(reap(victim), 128 + SIGKILL);
    pid_t heir = spawn_slow(12, 0);
    ck_assert_int_eq(reap(heir), 0);
    kpc_index_close(ix);

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

/* ---- errors the walk meets (issue 13, point 11) --------------------------------------- */
/* `kpc CMD --cache-dir DIR [--json]` as a user the tree's modes bind: as root (whom modes
 * do not bind) the tree is handed to uid 65534 and the tool runs as it (setpriv); the
 * exit status, stdout and stderr. */
static int kpc_bound_args(char **out, char **err, const char *const *args)
{
    bool root = geteuid() == 0;
    if (root) {
        char *base = strdup(dir), sh[4400];
        *strrchr(base, '/') = '\0';
        ck_assert_int_eq(chmod(base, 0755), 0); /* the mkdtemp parent: traversable */
        snprintf(sh, sizeof sh, "chown -R 65534:65534 '%s'", dir);
        ck_assert_int_eq(system(sh), 0);
        free(base);
    }
    const char *argv[24];
    int n = 0;
    if (root) {
        argv[n++] = "/usr/bin/setpriv";
        argv[n++] = "--reuid=65534";
        argv[n++] = "--regid=65534";
        argv[n++] = "--clear-groups";
    }
    argv[n++] = tool;
    for (; *args; args++) {
        ck_assert_int_lt(n, 23);
        argv[n++] = *args;
    }
    argv[n] = NULL;
    /* the compiler's own temporary files: where that user may write */
    const char *env[] = {root ? "TMPDIR=/tmp" : NULL, NULL};
    return ts_exec(argv, env, out, err);
}

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

/* ---- compile -j ----------------------------------------------------------------------- */
/* argv for `kpc compile [--json] -j 3 --cache-dir DIR --target T FILE...` (NULL-terminated) */
static void jobs_argv(const char **argv, bool json, char *const *files, int n)
{
    int argc = 0;
    argv[argc++] = tool;
    argv[argc++] = "compile";
    if (json)
        argv[argc++] = "--json";
    const char *rest[] = {"-j", "3", "--cache-dir", dir, "--target", ts_target()};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        argv[argc++] = rest[i];
    for (int i = 0; i < n; i++)
        argv[argc++] = files[i];
    argv[argc] = NULL;
}

/* `kpc compile -j 3` on a cold cache: three worker processes build six distinct real
 * sources, two each, each source once on the host; run again, nothing is compiled and
 * every file is a hit. */
START_TEST(compile_jobs_builds_each_source_once)
{
    enum { FILES = 6, JOBS = 3 };
    char *paths[FILES];
    for (int i = 0; i < FILES; i++) {
        char name[32];
        snprintf(name, sizeof name, "jobs%d.hip", i);
        paths[i] = side_file(name, ts_kernel_source(20 + i));
    }
    const char *argv[16 + FILES];
    jobs_argv(argv, true, paths, FILES);
    const char *info[] = {"KPC_LOG=info", NULL}; /* "kpc[PID]: info: built ..." per compile */
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, info, &out, &err);
    ck_assert_msg(rc == 0, "kpc compile -j 3: exit %d\n%s%s", rc, out, err);
    cJSON *j = parse(out);
    ck_assert(cJSON_IsArray(j) && cJSON_GetArraySize(j) == FILES);
    for (int i = 0; i < FILES; i++) {
        const cJSON *row = cJSON_GetArrayItem(j, i);
        ck_assert_str_eq(str(row, "file"), paths[i]); /* reported in the order given */
        ck_assert_str_eq(str(row, "status"), "KPC_OK");
        ck_assert_msg(strcmp(str(row, "result"), "built") == 0, "%s: %s", paths[i], str(row, "result"));
        ck_assert(!boolean(row, "waited"));
        ck_assert(num(row, "size") > 0);
    }
    cJSON_Delete(j);
    /* the compiles ran in three worker processes: the log names a pid per compile */
    int pids[FILES], npids = 0, compiles = 0;
    for (const char *p = err; (p = strstr(p, "kpc[")) != NULL; p++) {
        int pid;
        char what[16];
        if (sscanf(p, "kpc[%d]: info: %15s", &pid, what) != 2 || strcmp(what, "built") != 0)
            continue;
        compiles++;
        bool seen = false;
        for (int k = 0; k < npids; k++)
            seen = seen || pids[k] == pid;
        if (!seen && npids < FILES)
            pids[npids++] = pid;
    }
    ck_assert_msg(compiles == FILES && npids == JOBS, "%d compiles in %d processes:\n%s", compiles, npids, err);
    free(out), free(err);
    cJSON *st = stats_json();
    ck_assert_msg(num(st, "builds") == FILES, "builds %g", num(st, "builds"));
    ck_assert(num(st, "build_failures") == 0 && num(st, "takeovers") == 0);
    ck_assert(num(st, "lookups") == FILES && num(st, "entries") == FILES);
    ck_assert_msg(num(st, "disk_files") == FILES, "disk_files %g", num(st, "disk_files"));
    cJSON_Delete(st);

    /* again, in text: one "hit" line per file, and no compile */
    jobs_argv(argv, false, paths, FILES);
    rc = ts_exec(argv, NULL, &out, &err);
    ck_assert_msg(rc == 0, "second kpc compile -j 3: exit %d\n%s%s", rc, out, err);
    const char *line = out;
    for (int i = 0; i < FILES; i++) {
        const char *eol = strchr(line, '\n');
        ck_assert_msg(eol != NULL && strncmp(line, "hit ", 4) == 0, "line %d of the second run:\n%s", i, out);
        ck_assert_msg((size_t)(eol - line) > strlen(paths[i]) &&
                          strncmp(eol - strlen(paths[i]), paths[i], strlen(paths[i])) == 0,
                      "line %d is not for %s:\n%s", i, paths[i], out);
        line = eol + 1;
    }
    ck_assert_msg(*line == '\0', "more than %d lines:\n%s", FILES, out);
    free(out), free(err);
    st = stats_json();
    ck_assert_msg(num(st, "builds") == FILES, "the second run compiled: builds %g", num(st, "builds"));
    ck_assert(num(st, "lookups") == 2 * FILES && num(st, "hits") == FILES);
    ck_assert(num(st, "disk_files") == FILES);
    cJSON_Delete(st);
    for (int i = 0; i < FILES; i++)
        free(paths[i]);
}
END_TEST

/* Every name expression's lowered name is reported, however many there are. */
START_TEST(compile_reports_every_lowered_name)
{
    enum { EXPRS = 9 };
    char *path = side_file("many.hip", "template <int N> __global__ void fill(int *p) { p[0] = N; }\n");
    char exprs[EXPRS][16];
    const char *argv[16 + 2 * EXPRS];
    int n = 0;
    argv[n++] = tool, argv[n++] = "compile", argv[n++] = "--cache-dir", argv[n++] = dir;
    argv[n++] = "--target", argv[n++] = ts_target(), argv[n++] = "--json";
    for (int i = 0; i < EXPRS; i++) {
        snprintf(exprs[i], sizeof exprs[i], "fill<%d>", 100 + i);
        argv[n++] = "--name-expr", argv[n++] = exprs[i];
    }
    argv[n++] = path, argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, NULL, &out, &err);
    ck_assert_msg(rc == 0, "kpc compile: exit %d\n%s%s", rc, out, err);
    cJSON *j = parse(out);
    const cJSON *low = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(j, 0), "lowered_names");
    ck_assert_int_eq(cJSON_GetArraySize(low), EXPRS);
    for (int i = 0; i < EXPRS; i++) {
        const char *name = str(low, exprs[i]);
        char digits[8];
        snprintf(digits, sizeof digits, "%d", 100 + i);
        /* Itanium mangling of fill<N>: _Z4fillILi<N>EEvPi */
        ck_assert_msg(strncmp(name, "_Z4fill", 7) == 0 && strstr(name, digits) != NULL, "%s -> %s", exprs[i], name);
    }
    cJSON_Delete(j);
    free(out), free(err), free(path);
}
END_TEST


/* ---- messages: what a user reads ------------------------------------------------------- */

/* Does any line of text end in a space, or run over `width` characters? */
static bool has_trailing_space(const char *text)
{
    for (const char *p = text; (p = strchr(p, '\n')) != NULL; p++)
        if (p > text && p[-1] == ' ')
            return true;
    return false;
}

static size_t longest_line(const char *text)
{
    size_t best = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        best = n > best ? n : best;
        p += n + (p[n] == '\n');
    }
    return best;
}

START_TEST(a_usage_error_is_one_line_and_a_hint)
{
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(kpc(&out, &err, "stats", "--bogus", NULL), 2);
    ck_assert_str_eq(err, "kpc stats: unknown option '--bogus'\nsee 'kpc stats --help'\n");
    ck_assert_str_eq(out, "");
    free(out), free(err);
    ck_assert_int_eq(kpc(NULL, &err, "compile", "--cache-dir", dir, "--target", ts_target(), NULL), 2);
    ck_assert_str_eq(err, "kpc compile: compile needs at least one FILE\nsee 'kpc compile --help'\n");
    free(err);
    ck_assert_int_eq(kpc(NULL, &err, "compile", "-j", "lots", "x.hip", NULL), 2);
    ck_assert_str_eq(err, "kpc compile: -j takes a number from 1 to 1024, not \"lots\"\nsee 'kpc compile --help'\n");
    free(err);
    ck_assert_int_eq(kpc(NULL, &err, "ls", "--cache-dir", NULL), 2);
    ck_assert_str_eq(err, "kpc ls: option '--cache-dir' needs a value\nsee 'kpc ls --help'\n");
    free(err);
    ck_assert_int_eq(kpc(NULL, &err, "clear", "--cache-dir", dir, "extra", NULL), 2);
    ck_assert_str_eq(err, "kpc clear: clear takes no operands, not \"extra\"\nsee 'kpc clear --help'\n");
    free(err);
    ck_assert_int_eq(kpc(NULL, &err, "prune", "--cache-dir", dir, "--max-size", "12Q", NULL), 2);
    ck_assert_str_eq(err, "kpc prune: --max-size takes a size such as 512M or 2G, not \"12Q\"\n"
                          "see 'kpc prune --help'\n");
    free(err);
    ck_assert_int_eq(kpc(NULL, &err, "frobnicate", NULL), 2);
    ck_assert_str_eq(err, "kpc: unknown command \"frobnicate\"\nsee 'kpc --help'\n");
    free(err);
    ck_assert(is_absent(dir));
}
END_TEST

START_TEST(help_per_command_and_version)
{
    char *a = NULL, *b = NULL, *err = NULL;
    ck_assert_int_eq(kpc(&a, &err, "compile", "--help", NULL), 0);
    ck_assert_int_eq(kpc(&b, NULL, "help", "compile", NULL), 0);
    ck_assert_str_eq(a, b);
    ck_assert_str_eq(err, "");
    ck_assert_msg(strncmp(a, "usage: kpc compile ", 19) == 0 && strstr(a, "--target") && strstr(a, "--name-expr") &&
                      strstr(a, "-j, --jobs") && strstr(a, "kpc(1)") && !strstr(a, "--max-size"),
                  "kpc compile --help:\n%s", a);
    free(a), free(b), free(err);
    ck_assert_int_eq(kpc(&a, NULL, "prune", "-h", NULL), 0);
    ck_assert_msg(strstr(a, "--max-size") && strstr(a, "--stale") && !strstr(a, "--target"), "%s", a);
    free(a);
    ck_assert_int_eq(kpc(NULL, &err, "help", "frobnicate", NULL), 2);
    ck_assert_str_eq(err, "kpc: unknown command \"frobnicate\"\nsee 'kpc --help'\n");
    free(err);
    /* the whole help names every command, and no file that is not installed */
    ck_assert_int_eq(kpc(&a, NULL, "--help", NULL), 0);
    const char *subs[] = {"compile", "stats", "ls", "verify", "prune", "clear"};
    for (size_t i = 0; i < 6; i++) {
        ck_assert_msg(strstr(a, subs[i]) != NULL, "kpc --help lacks %s", subs[i]);
        ck_assert_int_eq(kpc(&b, NULL, "help", subs[i], NULL), 0);
        ck_assert_msg(!strstr(b, "docs/") && !has_trailing_space(b), "kpc help %s:\n%s", subs[i], b);
        free(b);
    }
    ck_assert_msg(!strstr(a, "docs/") && strstr(a, "kpc(1)"), "kpc --help:\n%s", a);
    free(a);
    char version[64];
    snprintf(version, sizeof version, "kpc %d.%d.%d\n", KPC_VERSION_MAJOR, KPC_VERSION_MINOR, KPC_VERSION_PATCH);
    ck_assert_int_eq(kpc(&a, NULL, "--version", NULL), 0);
    ck_assert_str_eq(a, version);
    free(a);
    const char *reset = getenv("KPC_SHM_RESET");
    ck_assert_ptr_nonnull(reset);
    const char *rv[] = {reset, "--version", NULL};
    ck_assert_int_eq(ts_exec(rv, NULL, &a, NULL), 0);
    char reset_version[80];
    snprintf(reset_version, sizeof reset_version, "kpc-shm-reset %s", version + 4);
    ck_assert_str_eq(a, reset_version);
    free(a);
}
END_TEST

START_TEST(shm_reset_says_what_was_wrong)
{
    const char *reset = getenv("KPC_SHM_RESET");
    ck_assert_ptr_nonnull(reset);
    char *out = NULL, *err = NULL;
    const char *help[] = {reset, "--help", NULL};
    ck_assert_int_eq(ts_exec(help, NULL, &out, NULL), 0);
    ck_assert_msg(strstr(out, "-d, --cache-dir DIR") && strstr(out, "-f, --force") && strstr(out, "kpc-shm-reset(1)"),
                  "kpc-shm-reset --help:\n%s", out);
    free(out);
    const char *extra[] = {reset, "extra", NULL};
    ck_assert_int_eq(ts_exec(extra, NULL, NULL, &err), 2);
    ck_assert_str_eq(err, "kpc-shm-reset: takes no operands (give the directory with -d DIR), not 'extra'\n"
                          "see 'kpc-shm-reset --help'\n");
    free(err);
    const char *bogus[] = {reset, "--bogus", NULL};
    ck_assert_int_eq(ts_exec(bogus, NULL, NULL, &err), 2);
    ck_assert_str_eq(err, "kpc-shm-reset: unknown option '--bogus'\nsee 'kpc-shm-reset --help'\n");
    free(err);
    const char *absent[] = {reset, "-d", dir, NULL};
    ck_assert_int_eq(ts_exec(absent, NULL, &out, NULL), 0);
    char want[4400];
    snprintf(want, sizeof want, "no cache directory %s: nothing to reset\n", dir);
    ck_assert_str_eq(out, want);
    free(out);
}
END_TEST

START_TEST(an_absent_cache_is_described_one_way)
{
    const char *cmds[] = {"prune", "verify", "clear"};
    for (size_t i = 0; i < 3; i++) {
        char *out = NULL, want[4400];
        ck_assert_int_eq(kpc(&out, NULL, cmds[i], "--cache-dir", dir, NULL), 0);
        snprintf(want, sizeof want, "no cache directory %s: nothing to %s\n", dir, cmds[i]);
        ck_assert_str_eq(out, want);
        free(out);
    }
    char *out = NULL;
    ck_assert_int_eq(kpc(&out, NULL, "stats", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(!has_trailing_space(out) && strstr(out, "host index     absent\n"), "kpc stats:\n%s", out);
    free(out);
    ck_assert(is_absent(dir));
}
END_TEST

START_TEST(compile_messages_name_the_real_problem)
{
    char *out = NULL, *err = NULL;
    /* a directory: errno kept */
    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", dir, "--target", ts_target(), base, NULL), 1);
    ck_assert_msg(strstr(err, "Is a directory") != NULL, "stderr:\n%s", err);
    free(out), free(err), free(base);
    /* a missing file without --target (no GPU here): the file, not the device */
    ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", dir, "/nonexistent/x.hip", NULL), 1);
    ck_assert_msg(strstr(err, "cannot read /nonexistent/x.hip: No such file or directory") &&
                      !strstr(err, "KPC_E_NO_DEVICE") && !strstr(err, "no GPU"),
                  "stderr:\n%s", err);
    free(out), free(err);
    /* an unknown target: the list of targets wrapped, no line over 100 characters */
    char *good = side_file("good.hip", ts_kernel_source(0));
#ifdef KPC_PLATFORM_NVIDIA
    const char *unknown = "sm_1";
#else
    const char *unknown = "gfx9999";
#endif
    ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", dir, "--target", unknown, good, NULL), 1);
    ck_assert_msg(strstr(err, unknown) && longest_line(err) <= 100, "stderr (%zu wide):\n%s", longest_line(err), err);
    free(out), free(err);
    free(good);
}
END_TEST

/* ---- exit statuses that tell the truth ---------------------------------------------- */
/* A cache dir the library refuses: nothing is compiled and nothing said "built"; the
 * status is 1 and the lines name the directory and the rule. */
START_TEST(compile_into_a_refused_cache_dir_fails)
{
    char *good = side_file("good.hip", ts_kernel_source(0));
    char *out = NULL, *err = NULL;
    /* a regular file where the directory should be */
    ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", good, "--target", ts_target(), good, NULL), 1);
    ck_assert_msg(strstr(out, "built") == NULL && strstr(out, "hit") == NULL, "stdout:\n%s", out);
    ck_assert_msg(strstr(err, good) && strstr(err, "not a directory") && strstr(err, "nothing compiled"),
                  "stderr:\n%s", err);
    free(out), free(err);
    if (geteuid() == 0) { /* a directory another user owns */
        ck_assert_int_eq(mkdir(dir, 0700), 0);
        ck_assert_int_eq(chown(dir, 65534, 65534), 0);
        ck_assert_int_eq(kpc(&out, &err, "compile", "--cache-dir", dir, "--target", ts_target(), good, NULL), 1);
        ck_assert_msg(strstr(out, "built") == NULL, "stdout:\n%s", out);
        ck_assert_msg(strstr(err, dir) && strstr(err, "owned by uid 65534") && strstr(err, "refused") &&
                          strstr(err, "nothing compiled"),
                      "stderr:\n%s", err);
        ck_assert_int_eq(ts_count_entries(dir), 0); /* nothing written into it */
        free(out), free(err);
    }
    free(good);
}
END_TEST

/* A cache dir of mode 0500 (for a user its modes bind): the object is built but cannot be
 * cached; said so with the real error (EACCES, not the ENOENT of the v1/ it could not
 * make), and the status is 1. */
START_TEST(compile_into_a_read_only_cache_dir_says_why_and_fails)
{
    char *good = side_file("good.hip", ts_kernel_source(0));
    ck_assert_int_eq(chmod(good, 0644), 0);
    ck_assert_int_eq(mkdir(dir, 0500), 0);
    const char *args[] = {"compile", "--cache-dir", dir, "--target", ts_target(), good, NULL};
    char *out = NULL, *err = NULL;
    int rc = kpc_bound_args(&out, &err, args);
    ck_assert_msg(rc == 1, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    ck_assert_msg(strncmp(out, "not cached", 10) == 0, "stdout:\n%s", out);
    ck_assert_msg(strstr(err, "ermission denied") && strstr(err, "read-only") &&
                      !strstr(err, "No such file or directory"),
                  "stderr:\n%s", err);
    free(out), free(err);
    const char *json[] = {"compile", "--json", "--cache-dir", dir, "--target", ts_target(), good, NULL};
    ck_assert_int_eq(kpc_bound_args(&out, &err, json), 1);
    cJSON *j = parse(out);
    ck_assert_str_eq(str(cJSON_GetArrayItem(j, 0), "result"), "built");
    ck_assert(!boolean(cJSON_GetArrayItem(j, 0), "cached"));
    cJSON_Delete(j);
    free(out), free(err);
    ck_assert_int_eq(ts_count_entries(dir), 0);
    /* the host index uid 65534 made (as root) is this test's to remove */
    char name[96], seg[128], root[4096];
    ck_assert_ptr_nonnull(realpath(dir, root));
    kpc_root_segment_name(root, name, sizeof name);
    snprintf(seg, sizeof seg, "/dev/shm/kpc-%u-%s", geteuid() == 0 ? 65534u : (unsigned)geteuid(),
             strrchr(name, '-') + 1);
    unlink(seg);
    chmod(dir, 0700);
    free(good);
}
END_TEST

/* Without --target and without a GPU: the message names the option to pass (with a target
 * of this build), not the library's C function. */
START_TEST(compile_without_a_gpu_names_the_target_option)
{
    char *good = side_file("good.hip", ts_kernel_source(0));
    char *out = NULL, *err = NULL;
    int rc = kpc(&out, &err, "compile", "--cache-dir", dir, good, NULL);
    if (rc == 0) {
        ts_skip("a GPU is present: the target comes from it");
    } else {
        ck_assert_int_eq(rc, 1);
        char want[64];
        snprintf(want, sizeof want, "--target %s", ts_target());
        ck_assert_msg(strstr(err, want) && !strstr(err, "kpc_context_create_for_target"), "stderr:\n%s", err);
    }
    free(out), free(err), free(good);
}
END_TEST

/* The help shows targets this build accepts, and no other platform's. */
START_TEST(help_examples_are_valid_for_this_build)
{
#ifdef KPC_PLATFORM_NVIDIA
    const char *other = "gfx";
#else
    const char *other = "sm_";
#endif
    char want[64];
    snprintf(want, sizeof want, "--target %s", ts_target());
    char *out = NULL;
    ck_assert_int_eq(kpc(&out, NULL, "--help", NULL), 0);
    ck_assert_msg(strstr(out, want) && !strstr(out, other), "kpc --help:\n%s", out);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "help", "compile", NULL), 0);
    ck_assert_msg(strstr(out, ts_target()) && !strstr(out, other), "kpc help compile:\n%s", out);
    free(out);
}
END_TEST

/* scripts/test.sh and scripts/demo.sh: --help prints the usage and runs nothing (no
 * set-up, no build); an unknown argument is bad usage. */
START_TEST(script_help_runs_nothing)
{
    const char *src = getenv("KPC_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    const char *const scripts[] = {"test.sh", "demo.sh"};
    for (size_t i = 0; i < 2; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/scripts/%s", src, scripts[i]);
        char *out = NULL, *err = NULL;
        const char *help[] = {path, "--help", NULL};
        ck_assert_int_eq(ts_exec(help, NULL, &out, &err), 0);
        ck_assert_msg(strstr(out, "usage: scripts/") && !strstr(out, "setup:") && !strstr(out, "==") && err[0] == '\0',
                      "%s --help:\nstdout: %s\nstderr: %s", scripts[i], out, err);
        free(out), free(err);
        const char *bad[] = {path, "--no-such-option", NULL};
        ck_assert_int_eq(ts_exec(bad, NULL, &out, &err), 2);
        ck_assert_msg(strstr(err, "unknown argument") && out[0] == '\0', "%s: %s", scripts[i], err);
        free(out), free(err);
    }
}
END_TEST

START_TEST(sizes_are_labelled_and_counts_agree)
{
    char *good = side_file("good.hip", ts_kernel_source(0));
    char *out = NULL;
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--json", "--cache-dir", dir, "--target", ts_target(), good, NULL), 0);
    cJSON *j = parse(out);
    double code = num(cJSON_GetArrayItem(j, 0), "size");
    cJSON_Delete(j);
    free(out);
    /* text: the code object's size, labelled as such */
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), good, NULL), 0);
    ck_assert_msg(strstr(out, " code  ") != NULL && !has_trailing_space(out), "kpc compile:\n%s", out);
    free(out);
    /* ls: the file, a header plus that code; the table has a heading */
    ck_assert_int_eq(kpc(&out, NULL, "ls", "--json", "--cache-dir", dir, NULL), 0);
    j = parse(out);
    ck_assert(num(cJSON_GetArrayItem(j, 0), "size") > code);
    cJSON_Delete(j);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "ls", "--cache-dir", dir, NULL), 0);
    ck_assert_msg(strncmp(out, "KEY ", 4) == 0 && strstr(out, "FILE SIZE") && strstr(out, "SOURCE"), "kpc ls:\n%s", out);
    free(out);
    /* sizes in the short form, the limit as given */
    ck_assert_int_eq(kpc(&out, NULL, "prune", "--cache-dir", dir, "--max-size", "5K", NULL), 0);
    ck_assert_msg(strstr(out, "limit 5.0K\n") != NULL, "kpc prune:\n%s", out);
    free(out);
    /* one of a kind is singular */
    ck_assert_int_eq(kpc(&out, NULL, "compile", "--cache-dir", dir, "--target", ts_target(), good, NULL), 0);
    free(out);
    ck_assert_int_eq(kpc(&out, NULL, "clear", "--cache-dir", dir, NULL), 0);
    ck_assert_str_eq(out, "removed 1 file\n");
    free(out);
    free(good);
}
END_TEST

/* Run `kpc ARGS` with stderr on a pseudo-terminal; returns what the terminal received. */
static char *kpc_on_terminal(const char *const *args, int *status)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    ck_assert_int_ge(master, 0);
    ck_assert_int_eq(grantpt(master), 0);
    ck_assert_int_eq(unlockpt(master), 0);
    char slave[128];
    ck_assert_int_eq(ptsname_r(master, slave, sizeof slave), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setsid();
        int fd = open(slave, O_RDWR);
        int null = open("/dev/null", O_WRONLY);
        if (fd < 0 || null < 0 || dup2(fd, 2) < 0 || dup2(null, 1) < 0)
            _exit(127);
        const char *argv[32] = {tool};
        for (int i = 0; args[i] && i < 30; i++)
            argv[i + 1] = args[i];
        execv(tool, (char **)argv);
        _exit(127);
    }
    size_t len = 0, cap = 4096;
    char *text = malloc(cap);
    for (;;) {
        if (len + 1024 > cap)
            text = realloc(text, cap *= 2);
        ssize_t n = read(master, text + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) /* EIO: the last holder of the terminal's other side is gone */
            break;
        len += (size_t)n;
    }
    text[len] = '\0';
    close(master);
    ck_assert_int_eq(waitpid(pid, status, 0), pid);
    return text;
}

START_TEST(compile_jobs_shows_progress_only_on_a_terminal)
{
    char *a = side_file("a.hip", ts_kernel_source(0));
    char *b = side_file("b.hip", ts_kernel_source(1));
    char *missing = side_file("c.hip", "");
    unlink(missing);
    const char *args[] = {"compile", "-j", "2", "--cache-dir", dir, "--target", ts_target(), a, b, missing, NULL};
    int status;
    char *term = kpc_on_terminal(args, &status);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d", status);
    ck_assert_msg(strstr(term, "\r[3/3] 0 hits, 2 builds, 1 failed") != NULL, "the terminal got:\n%s", term);
    free(term);
    /* again: two hits; with stderr on a pipe, no progress line, only the failure */
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(kpc(&out, &err, "compile", "-j", "2", "--cache-dir", dir, "--target", ts_target(), a, b, missing,
                         NULL), 1);
    ck_assert_msg(!strchr(err, '\r') && !strstr(err, "ETA") && !strstr(err, "[3/3]") && strstr(err, "c.hip"),
                  "stderr:\n%s", err);
    ck_assert_msg(strncmp(out, "hit", 3) == 0 && strchr(out, '\r') == NULL, "stdout:\n%s", out);
    free(out), free(err);
    term = kpc_on_terminal(args, &status);
    ck_assert_msg(strstr(term, "[3/3] 2 hits, 0 builds, 1 failed") != NULL, "the terminal got:\n%s", term);
    free(term);
    free(a), free(b), free(missing);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tool");
    TCase *tc = tcase_create("exit");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, bad_usage_exits_2_and_help_exits_0);
    tcase_add_test(tc, every_subcommand_succeeds_and_fails_with_the_right_code);
    suite_add_tcase(s, tc);
    tc = tcase_create("json");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, stats_json_has_the_right_numbers);
    tcase_add_test(tc, stats_json_counts_waits_and_takeovers);
    tcase_add_test(tc, ls_json_lists_every_record);
    tcase_add_test(tc, verify_json_reports_and_removes_damage);
    tcase_add_test(tc, prune_and_clear_json);
    tcase_add_test(tc, clear_on_a_read_only_tree_fails_and_says_so);
    tcase_add_test(tc, verify_with_an_unreadable_directory_fails_and_says_so);
    suite_add_tcase(s, tc);
    tc = tcase_create("jobs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, compile_jobs_builds_each_source_once);
    tcase_add_test(tc, compile_reports_every_lowered_name);
    tcase_add_test(tc, compile_jobs_shows_progress_only_on_a_terminal);
    suite_add_tcase(s, tc);
    tc = tcase_create("messages");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, a_usage_error_is_one_line_and_a_hint);
    tcase_add_test(tc, help_per_command_and_version);
    tcase_add_test(tc, shm_reset_says_what_was_wrong);
    tcase_add_test(tc, an_absent_cache_is_described_one_way);
    tcase_add_test(tc, compile_messages_name_the_real_problem);
    tcase_add_test(tc, sizes_are_labelled_and_counts_agree);
    tcase_add_test(tc, compile_into_a_refused_cache_dir_fails);
    tcase_add_test(tc, compile_into_a_read_only_cache_dir_says_why_and_fails);
    tcase_add_test(tc, compile_without_a_gpu_names_the_target_option);
    tcase_add_test(tc, help_examples_are_valid_for_this_build);
    tcase_add_test(tc, script_help_runs_nothing);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
