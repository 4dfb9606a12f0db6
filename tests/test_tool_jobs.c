/*
 * test_tool_jobs.c - `kpc compile -j N`: each source built once, every
 * lowered name reported, progress shown only on a terminal.
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

#include "tool_support.h"

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
    const TTest *tests[] = {compile_jobs_builds_each_source_once,
                            compile_reports_every_lowered_name,
                            compile_jobs_shows_progress_only_on_a_terminal, NULL};
    return ts_main_case("tool", "jobs", 120, setup, teardown, tests);
}
