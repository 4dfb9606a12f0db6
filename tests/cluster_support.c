/*
 * cluster_support.c - redis-server, a silent listener and simulated hosts for the
 * cluster-tier tests and benchmarks (cluster_support.h).
 */
#define _GNU_SOURCE
#include "cluster_support.h"
#include "private_mounts.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static tc_redis *atexit_redis;
static pid_t atexit_owner; /* children forked later inherit the handler: only this pid acts */

void tc_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int tc_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

redisContext *tc_redis_connect(const tc_redis *r)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    if (c)
        redisSetTimeout(c, tv);
    return c;
}

static void stop_at_exit(void)
{
    if (atexit_redis && getpid() == atexit_owner)
        tc_redis_stop(atexit_redis);
}

bool tc_redis_spawn(tc_redis *r, const char *const *extra)
{
    char port[16];
    snprintf(port, sizeof port, "%d", r->port);
    const char *argv[40] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly",
                            "no", "--dir", r->dir, "--protected-mode", "no", "--daemonize", "no"};
    int n = 15;
    for (int i = 0; extra && extra[i] && n < 39; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        if (getppid() != parent)
            _exit(127);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execvp("redis-server", (char *const *)argv);
        _exit(127);
    }
    r->pid = pid;
    snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
    for (int i = 0; i < 250; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            r->pid = 0;
            return false;
        }
        redisContext *c = tc_redis_connect(r);
        redisReply *rep = c ? redisCommand(c, "PING") : NULL;
        bool ok = rep && rep->type == REDIS_REPLY_STATUS;
        if (rep)
            freeReplyObject(rep);
        if (c)
            redisFree(c);
        if (ok)
            return true;
        tc_sleep_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    r->pid = 0;
    return false;
}

bool tc_redis_start(tc_redis *r)
{
    memset(r, 0, sizeof *r);
    /* no persistence: the server never writes in its directory, so a failed test (whose
     * teardown does not run) leaves nothing behind; the server dies with the test */
    snprintf(r->dir, sizeof r->dir, "/tmp");
    for (int attempt = 0; attempt < 5; attempt++) {
        r->port = tc_free_port();
        if (tc_redis_spawn(r, NULL)) {
            atexit_redis = r;
            atexit_owner = getpid();
            static bool registered;
            if (!registered)
                atexit(stop_at_exit), registered = true;
            return true;
        }
    }
    fprintf(stderr, "redis-server did not start (is it installed?)\n");
    return false;
}

void tc_redis_stop(tc_redis *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        r->pid = 0;
    }
    if (atexit_redis == r)
        atexit_redis = NULL;
}

long long tc_redis_int(const tc_redis *r, const char *fmt, ...)
{
    redisContext *c = tc_redis_connect(r);
    if (c == NULL)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    long long v = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return v;
}

void *tc_redis_get(const tc_redis *r, const char *name, size_t *size)
{
    redisContext *c = tc_redis_connect(r);
    if (c == NULL)
        return NULL;
    redisReply *rep = redisCommand(c, "GET %s", name);
    void *out = NULL;
    if (rep && rep->type == REDIS_REPLY_STRING) {
        out = malloc(rep->len + 1);
        memcpy(out, rep->str, rep->len);
        ((char *)out)[rep->len] = '\0';
        *size = rep->len;
    }
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return out;
}

bool tc_redis_set(const tc_redis *r, const char *name, const void *bytes, size_t size)
{
    redisContext *c = tc_redis_connect(r);
    if (c == NULL)
        return false;
    redisReply *rep = redisCommand(c, "SET %s %b", name, bytes, size);
    bool ok = rep && rep->type == REDIS_REPLY_STATUS;
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return ok;
}

int tc_silent_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 512) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd; /* the kernel completes the handshakes; no one ever reads */
}

/* A host index of the default capacity (65536 entries) is 8392960 bytes: 9 MiB with room. */
#define SEGMENT_MIB 9

/* Give this process a host of its own: a mount namespace with a private tmpfs on
 * /dev/shm (its own host index) for `procs` ranks. Its size is what the index needs when
 * every rank opens the cache at once: each creator allocates the whole segment under a
 * temporary name before one of them links it (docs/design.md, "Creating, attaching,
 * validating"), so room for one segment per rank, and one more. A smaller /dev/shm turns
 * the index off in the ranks that find no room (disk only, uncoordinated: more builds),
 * which test_index_faults' full_dev_shm_costs_the_coordination asserts on its own.
 * 0, or -1 with the reason in why. */
static int enter_host(int procs, char *why, size_t cap)
{
    if (tm_private_mounts("/dev/shm", why, cap) != 0)
        return -1;
    char opts[64];
    snprintf(opts, sizeof opts, "mode=1777,size=%dm", (procs + 1) * SEGMENT_MIB);
    if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
        snprintf(why, cap, "mount -t tmpfs on /dev/shm: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static char hosts_why_not[512];

bool tc_hosts_possible(void)
{
    /* what a host does, tried in a child (its namespace goes with it); the reason back
     * through a pipe */
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(hosts_why_not, sizeof hosts_why_not, "pipe: %s", strerror(errno));
        return false;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        char why[512];
        if (enter_host(1, why, sizeof why) == 0)
            _exit(0);
        ssize_t n = write(fds[1], why, strlen(why));
        _exit(n < 0 ? 2 : 1);
    }
    close(fds[1]);
    ssize_t n = pid > 0 ? read(fds[0], hosts_why_not, sizeof hosts_why_not - 1) : -1;
    hosts_why_not[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    int st;
    bool ok = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok && hosts_why_not[0] == '\0')
        snprintf(hosts_why_not, sizeof hosts_why_not, "the probe for simulated hosts failed");
    return ok;
}

const char *tc_hosts_why_not(void)
{
    return hosts_why_not;
}

bool tc_secret_file(const char *dir, char *out, size_t cap)
{
    const char *slash = strrchr(dir, '/');
    snprintf(out, cap, "%.*s/secret", slash ? (int)(slash - dir) : 1, slash ? dir : ".");
    FILE *f = fopen(out, "we");
    bool ok = f != NULL && fputs("the cluster secret of this test's hosts\n", f) >= 0;
    if (f != NULL && fclose(f) != 0)
        ok = false;
    return ok && chmod(out, 0600) == 0;
}

void *tc_shared(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* One simulated host: its own mount namespace, /dev/shm and cache dir; procs ranks. */
static int host_main(int host, int procs, const char *base, bool shared_dir, tc_rank_fn fn, void *arg)
{
    char why[512];
    if (enter_host(procs, why, sizeof why) != 0) {
        fprintf(stderr, "simulated host %d: %s\n", host, why);
        return procs;
    }
    char id[32], dir[4096];
    snprintf(id, sizeof id, "simhost%d", host);
    if (shared_dir)
        snprintf(dir, sizeof dir, "%s/shared", base);
    else
        snprintf(dir, sizeof dir, "%s/host%d", base, host);
    setenv("KPC_HOST_ID", id, 1);
    setenv("KPC_CACHE_DIR", dir, 1);
    pid_t *pids = calloc((size_t)procs, sizeof *pids);
    for (int p = 0; p < procs; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            _exit(fn(host, p, arg));
        }
    }
    int failed = 0;
    for (int p = 0; p < procs; p++) {
        int st = 0;
        while (pids[p] > 0 && waitpid(pids[p], &st, 0) < 0 && errno == EINTR)
            ;
        if (pids[p] <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
    }
    free(pids);
    return failed; /* the namespace, and its /dev/shm, go with the last process */
}

pid_t tc_hosts_start(int first, int hosts, int procs, const char *base, bool shared_dir, tc_rank_fn fn, void *arg)
{
    pid_t leader = fork();
    if (leader != 0)
        return leader;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    pid_t *pids = calloc((size_t)hosts, sizeof *pids);
    for (int h = 0; h < hosts; h++) {
        pids[h] = fork();
        if (pids[h] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            _exit(host_main(first + h, procs, base, shared_dir, fn, arg));
        }
    }
    int failed = 0;
    for (int h = 0; h < hosts; h++) {
        int st = 0;
        while (pids[h] > 0 && waitpid(pids[h], &st, 0) < 0 && errno == EINTR)
            ;
        failed += pids[h] <= 0 ? procs : WIFEXITED(st) ? WEXITSTATUS(st) : procs;
    }
    _exit(failed > 250 ? 250 : failed);
}

int tc_hosts_wait(pid_t leader)
{
    int st = 0;
    if (leader < 0)
        return -1;
    while (waitpid(leader, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 255;
}

int tc_hosts_run(int first, int hosts, int procs, const char *base, bool shared_dir, tc_rank_fn fn, void *arg)
{
    return tc_hosts_wait(tc_hosts_start(first, hosts, procs, base, shared_dir, fn, arg));
}
