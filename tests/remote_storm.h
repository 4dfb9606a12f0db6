/*
 * remote_storm.h - what the cluster-tier tests share (test_remote.c, test_remote_stalls.c):
 * a storm of rank processes on simulated hosts (tests/cluster_support.h) that each get K
 * sources through kpc_program_get and report into shared memory, and what the parent
 * asks Redis about them. Check assertions only in the helpers that say so.
 */
#ifndef KPC_REMOTE_STORM_H
#define KPC_REMOTE_STORM_H

#include "cluster_support.h"
#include "support.h"

#include "storage/remote.h"

#define MAXR 40 /* ranks */
#define MAXK 8  /* sources */

typedef struct rank_out {
    int done;
    int status[MAXK];
    uint64_t digest[MAXK];
    uint64_t size[MAXK];
    kpc_stats st;
    kpc_remote_counters rc; /* the tier's own counters (wait timeouts, unserved) */
    double seconds;         /* from the rank's start to its last request's end */
    int closing;            /* its requests are done: it closes the cache (flushing counters) */
    char log[256];
} rank_out;

typedef struct storm {
    int procs, k;
    int slow_ms;       /* fake compiles sleep this long */
    bool real;         /* real hipRTC sources */
    bool failing;      /* sources that fail to compile */
    bool same_order;   /* every rank asks in the same order (else each from its own start) */
    bool batch;        /* one kpc_program_get_many for the K sources (else K kpc_program_get) */
    bool hold;         /* ranks wait for go before they start (rs_run_released) */
    _Atomic int ready; /* ranks waiting for go */
    _Atomic int go;
    char remote[128];  /* "" : no remote tier */
    char secret[256];  /* KPC_REMOTE_SECRET_FILE for these ranks ("" none) */
    bool trust;        /* no secret: KPC_REMOTE_TRUST=unauthenticated */
    int salt;          /* makes this storm's sources (keys) its own */
    bool sick;         /* the Redis is killed or silent: keep the default (short) timeouts */
    rank_out out[MAXR];
} storm;

/* The fixture of every case: a redis-server of its own, a temp dir, and whether
 * simulated hosts can be made here. */
extern tc_redis rs_redis;
extern char *rs_base;
extern bool rs_have_hosts;
void rs_setup(void);
void rs_teardown(void);
/* The pid of the lease's holder once there is one (checked). */
pid_t rs_await_holder(void);

double rs_now(void);
void rs_sleep_ms(long ms);
/* A new storm in shared memory, with the remote tier of url (NULL: none) and a secret
 * file of its own under dir (authenticated, as a site runs it). */
storm *rs_new(int procs, int k, const char *url, const char *dir);
/* The storm of most cases: the fake platform installed, procs x k ranks on the case's
 * Redis and temp dir (rs_new), each fake compile taking slow_ms. */
storm *rs_fake_storm(int procs, int k, int slow_ms);
/* Write a secret file (mode 0600) under dir into out. */
void rs_secret_file(char *out, size_t cap, const char *dir, const char *text);
/* Source i of a storm (malloc'd). */
char *rs_source(const storm *s, int i);
/* The kpc key of source i (a context for ts_target()). */
void rs_key(const storm *s, int i, kpc_key *out);
/* One rank (tc_rank_fn): arg is the storm. */
int rs_rank(int host, int proc, void *arg);
/* Run `hosts` hosts of s->procs ranks as tc_hosts_run, but release them all at once
 * (s->hold, s->go) once every rank waits for it; the failed ranks. */
int rs_run_released(storm *s, int first, int hosts, const char *base);
/* Sums over ranks [first, first + n). */
kpc_stats rs_sum(const storm *s, int first, int n);
uint64_t rs_sum_wait_timeouts(const storm *s, int first, int n);
/* Check: every rank in [first, first + n) finished with KPC_OK and rank first's bytes. */
void rs_check_identical(const storm *s, int first, int n);
/* The pid in the value of the one lease in Redis; 0 while there is none. */
pid_t rs_lease_holder(int port);
/* Leases in Redis now. */
int rs_leases(int port);
/* Clients connected now (less the probe). */
int rs_clients(int port);
/* Check: wait until some host's claimant waits on a lease (it asked again). */
void rs_await_waiter(int port);

#define NEED_HOSTS(have)                                                                       \
    do {                                                                                       \
        if (!(have)) {                                                                         \
            printf("%s: skipped: simulated hosts need root and unshare\n", __func__);          \
            return;                                                                            \
        }                                                                                      \
    } while (0)

#endif
