/*
 * support_exec.c - the tests' child processes (support.h): forked children, the
 * library's log captured from a test and its children, commands run with their output
 * collected, and the skip line scripts/test.sh counts.
 */
#define _GNU_SOURCE
#include "support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <stdarg.h>
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

int ts_run_children(int n, int (*fn)(int, void *), void *arg)
{
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0)
            _exit(fn(i, arg));
    }
    int ok = 0;
    for (int i = 0; i < n; i++) {
        int st;
        while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR)
            ;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            ok++;
    }
    free(pids);
    return ok;
}

/* ---- logs ---- */
static int saved_stderr = -1, saved_level;
static char log_path[4200];

void ts_log_begin(int level)
{
    /* in the case's temp dir (or the suite's scratch root), which goes even if the case
     * fails before ts_log_end */
    const char *tmp = getenv("TMPDIR");
    snprintf(log_path, sizeof log_path, "%s/kpc-test-log-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    int fd = mkstemp(log_path);
    if (fd < 0) { /* a case acting as another user, who may not write there */
        snprintf(log_path, sizeof log_path, "/tmp/kpc-test-log-XXXXXX");
        fd = mkstemp(log_path);
    }
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    saved_stderr = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
    saved_level = kpc__log_level;
    kpc__log_level = level;
}

char *ts_log_end(void)
{
    ck_assert_int_ge(saved_stderr, 0);
    fflush(stderr);
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    saved_stderr = -1;
    kpc__log_level = saved_level;
    size_t size;
    char *text = ts_read_file(log_path, &size);
    unlink(log_path);
    ck_assert_ptr_nonnull(text);
    return text;
}

/* ---- child commands ---- */
static void drain(int fds[2], char **bufs)
{
    size_t len[2] = {0, 0}, cap[2] = {4096, 4096};
    char *b[2] = {malloc(cap[0]), malloc(cap[1])};
    struct pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || p[i].revents == 0)
                continue;
            if (len[i] + 4096 > cap[i])
                b[i] = realloc(b[i], cap[i] *= 2);
            ssize_t n = read(p[i].fd, b[i] + len[i], cap[i] - len[i] - 1);
            if (n > 0)
                len[i] += (size_t)n;
            else if (n == 0 || errno != EINTR) {
                close(p[i].fd);
                p[i].fd = -1;
                open_fds--;
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        b[i][len[i]] = '\0';
        if (bufs[i])
            free(bufs[i]);
        bufs[i] = b[i];
    }
}

int ts_exec(const char *const *argv, const char *const *env, char **out, char **err)
{
    int po[2], pe[2];
    ck_assert_int_eq(pipe2(po, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(pe, O_CLOEXEC), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(po[1], STDOUT_FILENO);
        dup2(pe[1], STDERR_FILENO);
        for (const char *const *e = env; e && *e; e++)
            putenv((char *)*e);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    char *bufs[2] = {NULL, NULL};
    int fds[2] = {po[0], pe[0]};
    drain(fds, bufs);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (out)
        *out = bufs[0];
    else
        free(bufs[0]);
    if (err)
        *err = bufs[1];
    else
        free(bufs[1]);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void ts_skip(const char *why_fmt, ...)
{
    const char *name = tcase_name();
    printf("%s: skipped: ", name && name[0] ? name : "test");
    va_list ap;
    va_start(ap, why_fmt);
    vprintf(why_fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

