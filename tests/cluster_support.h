/*
 * cluster_support.h - what the cluster-tier tests and benchmarks share: a private
 * redis-server (127.0.0.1, a free port, no persistence) that is always stopped, a silent
 * listener, and simulated hosts: each a process in a mount namespace of its own (unshare
 * as root; in a container or a chroot too) with a private tmpfs on /dev/shm (its own host index) and its own cache
 * directory and KPC_HOST_ID, running several rank processes. No Check assertions here.
 */
#ifndef KPC_CLUSTER_SUPPORT_H
#define KPC_CLUSTER_SUPPORT_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct tc_redis {
    pid_t pid;
    int port;
    char dir[256]; /* its working directory: it never writes there (no persistence) */
    char url[64];  /* redis://127.0.0.1:PORT */
} tc_redis;

/* Start redis-server; false (with a message on stderr) when it cannot. It dies with the
 * calling process (PR_SET_PDEATHSIG) and with tc_redis_stop, and at exit. */
bool tc_redis_start(tc_redis *r);
void tc_redis_stop(tc_redis *r);
/* Run one command through redis-cli-like hiredis: the reply's integer, or -1. */
long long tc_redis_int(const tc_redis *r, const char *fmt, ...);
/* GET name into a malloc'd buffer (NULL if absent); SET name to bytes. */
void *tc_redis_get(const tc_redis *r, const char *name, size_t *size);
bool tc_redis_set(const tc_redis *r, const char *name, const void *bytes, size_t size);

/* A TCP listener on 127.0.0.1 that accepts (in the kernel's backlog) and never answers. */
int tc_silent_listener(int *port);

/* True where simulated hosts can be made (root, a mount namespace allowed, the mount
 * holding /dev/shm can be made private in it: tests/private_mounts.h); else
 * tc_hosts_why_not() says why, for a skip line. */
bool tc_hosts_possible(void);
const char *tc_hosts_why_not(void);

/* Run `hosts` simulated hosts, numbered first.., each with `procs` rank processes that run
 * fn(host, proc, arg) (0: success) with KPC_HOST_ID=simhost<h> and KPC_CACHE_DIR=
 * <base>/host<h> (or <base>/shared when shared_dir). Returns the number of ranks that
 * failed (or did not exit 0). */
typedef int (*tc_rank_fn)(int host, int proc, void *arg);
int tc_hosts_run(int first, int hosts, int procs, const char *base, bool shared_dir, tc_rank_fn fn, void *arg);
/* The same, started in the background: returns the pid of the group leader to wait for
 * with tc_hosts_wait (the number of failed ranks). */
pid_t tc_hosts_start(int first, int hosts, int procs, const char *base, bool shared_dir, tc_rank_fn fn, void *arg);
int tc_hosts_wait(pid_t leader);

/* Shared memory every process forked after it sees (MAP_SHARED, anonymous). */
void *tc_shared(size_t size);

#endif
