/*
 * pool.c - the kpc tool's worker pool (see pool.h): fork W workers over shared memory,
 * tick while they run, and report the items of every worker that did not exit 0.
 *
 * Invariant: every started worker is reaped before kpc_pool_run returns (no zombie, no
 * orphan still compiling after the tool printed its report). Output buffers are flushed
 * before the fork so that nothing a worker inherits is printed twice.
 */
#define _GNU_SOURCE
#include "tools/pool.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAX_WORKERS 1024

void *kpc_pool_alloc(size_t n, size_t size)
{
    if (n == 0)
        n = 1;
    void *p = mmap(NULL, n * size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p; /* anonymous mappings are zeroed */
}

void kpc_pool_free(void *items, size_t n, size_t size)
{
    if (items != NULL)
        munmap(items, (n ? n : 1) * size);
}

/* Tell the owner about every item of worker w (of `step`). */
static void lose_share(const kpc_pool_ops *ops, void *arg, int num_items, int w, int step, const char *why)
{
    for (int i = w; i < num_items; i += step)
        ops->lost(arg, i, why);
}

int kpc_pool_run(int num_items, int workers, const kpc_pool_ops *ops, void *arg)
{
    if (workers > num_items)
        workers = num_items;
    if (workers > POOL_MAX_WORKERS)
        workers = POOL_MAX_WORKERS;
    if (!ops->always_fork && (num_items <= 1 || (workers <= 1 && ops->tick == NULL))) {
        ops->work(arg, 0, 1);
        return 0;
    }
    if (workers < 1)
        workers = 1;
    fflush(NULL);
    pid_t pids[POOL_MAX_WORKERS];
    bool running[POOL_MAX_WORKERS];
    int started = 0;
    for (; started < workers; started++) {
        pid_t pid = fork();
        if (pid == 0) {
            ops->work(arg, started, workers);
            fflush(NULL);
            _exit(0);
        }
        if (pid < 0) {
            char why[128];
            snprintf(why, sizeof why, "no worker process could be started for it (fork: %s)", strerror(errno));
            for (int w = started; w < workers; w++)
                lose_share(ops, arg, num_items, w, workers, why);
            break;
        }
        pids[started] = pid;
        running[started] = true;
    }
    int left = started;
    while (left > 0) {
        bool reaped = false;
        for (int w = 0; w < started; w++) {
            if (!running[w])
                continue;
            int st;
            pid_t r = waitpid(pids[w], &st, ops->tick ? WNOHANG : 0);
            if (r == 0 || (r < 0 && errno == EINTR))
                continue;
            running[w] = false;
            left--;
            reaped = true;
            char why[128] = "";
            if (r < 0)
                snprintf(why, sizeof why, "its worker process %d was lost (waitpid: %s)", (int)pids[w],
                         strerror(errno));
            else if (WIFSIGNALED(st))
                snprintf(why, sizeof why, "its worker process %d was killed by signal %d", (int)pids[w],
                         WTERMSIG(st));
            else if (WEXITSTATUS(st) != 0)
                snprintf(why, sizeof why, "its worker process %d exited with status %d", (int)pids[w],
                         WEXITSTATUS(st));
            if (why[0])
                lose_share(ops, arg, num_items, w, workers, why);
        }
        if (ops->tick) {
            ops->tick(arg);
            if (!reaped && left > 0)
                nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
        }
    }
    return started;
}
