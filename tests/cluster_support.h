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

/* For cluster_redis.c: start redis-server on r->port (its directory r->dir) with these
 * arguments besides the common ones (NULL-terminated, at most 24); true once it answers
 * PING (r->pid and r->url set), else false with it stopped. It dies with the calling
 * process (PR_SET_PDEATHSIG). connect: a connection with 1 s timeouts, or NULL. */
bool tc_redis_spawn(tc_redis *r, const char *const *extra);
struct redisContext *tc_redis_connect(const tc_redis *r);
void tc_sleep_ms(long ms);

/* A Redis Cluster of TC_NODES nodes on 127.0.0.1 (cluster_redis.c) (3 primaries, a replica each; node
 * timeout 1 s, no persistence), made by `redis-cli --cluster create`; its nodes' files
 * in a temp dir of its own, removed by tc_cluster_stop. */
#define TC_NODES 6
typedef struct tc_cluster {
    tc_redis node[TC_NODES]; /* pid 0: stopped (killed by a test) */
    char dir[256];
    char url[96];    /* redis://127.0.0.1:PORT of the first node */
    char seeds[192]; /* every node, as a seed list */
} tc_cluster;
/* Start it; false and why (a skip line: no cluster mode, no redis-cli) when it cannot be.
 * Its servers die with the calling process, with tc_cluster_stop, and at exit. */
bool tc_cluster_start(tc_cluster *c, char *why, size_t cap);
void tc_cluster_stop(tc_cluster *c);
/* Wait until every node that answers (at least half of them) says cluster_state:ok and they agree on who serves each
 * slot (false after timeout_ms). */
bool tc_cluster_await_ok(const tc_cluster *c, int timeout_ms);
/* The indexes of the primaries now (up to TC_NODES): their count. */
int tc_cluster_primaries(const tc_cluster *c, int *idx);
/* The index of the node that serves slot, as the first live node says (-1: none). */
int tc_cluster_owner(const tc_cluster *c, unsigned slot);
/* The lowest slot node i serves (-1: none). */
int tc_cluster_first_slot(const tc_cluster *c, int i);
/* How many slots node i serves. */
int tc_cluster_slot_count(const tc_cluster *c, int i);
/* The group's keys of a kind ("*:co") on node i: KEYS pattern's count, or -1. */
long long tc_cluster_count(const tc_cluster *c, int i, const char *pattern);
/* Run redis-cli with these arguments (NULL-terminated), its output to /dev/null; its
 * exit status. */
int tc_redis_cli(const char *const *args);

/* A TCP port on 127.0.0.1 that was free just now. */
int tc_free_port(void);
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

/* A secret file for the cluster tier (mode 0600) in dir's parent (a cache dir of
 * bn_tmpdir or ts_tmpdir), its path in out; false when it cannot be written. */
bool tc_secret_file(const char *dir, char *out, size_t cap);

/* Shared memory every process forked after it sees (MAP_SHARED, anonymous). */
void *tc_shared(size_t size);

#endif
