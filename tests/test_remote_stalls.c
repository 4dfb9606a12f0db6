/*
 * test_remote_stalls.c - the cluster tier under stalls and distrust, against a real
 * redis-server started by the test (tests/cluster_support.c) and simulated hosts (mount
 * namespaces; root). Each case is something a site would hit:
 *
 *   forged_lease        a lease written without the secret, with no expiry: ignored
 *   orphaned_lease      a lease that never expires and that no one can judge: the wait
 *                       ends at KPC_BUILD_WAIT_MAX_MS and the host builds, counted
 *   killed_here         kill -9 of the builder: its own host's next rank takes the lease
 *                       at once (pid and start time), not after the lease
 *   redis_stopped       Redis stopped (SIGSTOP) for 10 s while a builder holds a lease and
 *                       compiles: the next host takes the lease within a lease, not 30 s
 *   unseen_lease        Redis stopped with a claim in flight, resumed after the client gave
 *                       up: the lease it took in a reply no one read is short, the next
 *                       host takes it within the reply deadline and a margin, not a lease
 *   stopped_builder     a builder stopped (SIGSTOP) with its host's other ranks waiting;
 *                       another host builds the key: the waiters take it from Redis
 *   secrets_apart       two groups with different secrets on one Redis: each builds K
 *   connections         a same-order storm holds about one connection per host
 *   connections_any_order  so does a storm whose ranks each start at another key (the
 *                       host's connection slots), and none is held while waiting:
 *                       at most 3 per host (before: 32 for 4 hosts x 8 ranks)
 *   unauthenticated     no secret, no trust: builds host-local, says so once, stats say so
 *   takeover_fake/_real kill -9 of the lease holder: another host takes over after the lease
 *   redis_killed        redis-server killed mid-storm: no hang, no wrong object
 *   redis_silent        a listener that never answers: host-local, bounded by the timeouts
 *
 * Times asserted are bounds that only a hang or the old behaviour (a 30 s lease, a
 * 10-minute host wait) exceeds, never speed; the speed is in bench_cluster.
 */
#define _GNU_SOURCE
#include "hold_support.h"
#include "remote_storm.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static storm *new_storm(int procs, int k)
{
    return rs_new(procs, k, rs_redis.url, rs_base);
}

/* The Redis key name of source i's suffix for the storm's group. */
static void key_name(const storm *s, int i, const char *suffix, char *out, size_t cap)
{
    kpc_key key;
    rs_key(s, i, &key);
    if (s->secret[0] && !s->trust)
        setenv("KPC_REMOTE_SECRET_FILE", s->secret, 1);
    kpc_remote *r = NULL;
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &r), KPC_OK);
    kpc_remote_key_name(r, &key, suffix, out, cap);
    kpc_remote_close(r);
    unsetenv("KPC_REMOTE_SECRET_FILE");
}

START_TEST(forged_lease)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    storm *s = new_storm(1, 1);
    char lname[KPC_REMOTE_NAME_MAX];
    key_name(s, 0, "lease", lname, sizeof lname);
    /* a well-formed value without a MAC, never expiring: before, every host waited on it */
    const char *forged = "host=elsewhere pid=4242 start=1 token=00";
    ck_assert(tc_redis_set(&rs_redis, lname, forged, strlen(forged)));
    double t0 = rs_now();
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(tc_hosts_run(0, 1, 1, rs_base, false, rs_rank, s), 0);
    free(ts_log_end());
    double t = rs_now() - t0;
    ck_assert_msg(t < 60, "the host waited %.1f s on a forged lease", t);
    ck_assert_uint_eq(s->out[0].st.builds, 1);
    ck_assert_uint_ge(s->out[0].st.remote_refused, 1);
    ck_assert_uint_eq(s->out[0].st.remote_builds, 1); /* it took the key and published */
    ck_assert_uint_eq(s->out[0].rc.wait_timeouts, 0);
}
END_TEST

START_TEST(orphaned_lease)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    storm *s = new_storm(1, 1);
    s->trust = true; /* no secret: a lease cannot be judged, only waited on, boundedly */
    char lname[KPC_REMOTE_NAME_MAX];
    key_name(s, 0, "lease", lname, sizeof lname);
    /* fresh by its own word for ages (re-signed at a Redis time far ahead, which nothing
     * checks without a secret): only the cap ends the wait */
    const char *orphan = "host=gone pid=4242 start=1 token=00 at=99999999999999 lease=3000";
    ck_assert(tc_redis_set(&rs_redis, lname, orphan, strlen(orphan))); /* never expires */
    setenv("KPC_BUILD_WAIT_MAX_MS", "1500", 1);
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(tc_hosts_run(0, 1, 1, rs_base, false, rs_rank, s), 0);
    char *log = ts_log_end();
    ck_assert_ptr_nonnull(strstr(log, "KPC_BUILD_WAIT_MAX_MS"));
    free(log);
    kpc_stats t = rs_sum(s, 0, 1);
    ck_assert_uint_eq(t.builds, 1);
    ck_assert_uint_eq(rs_sum_wait_timeouts(s, 0, 1), 1);
    ck_assert_uint_eq(t.remote_builds, 0); /* built for itself: nothing published */
    rs_check_identical(s, 0, 1);
}
END_TEST

START_TEST(killed_here)
{
    NEED_HOSTS(rs_have_hosts);
    storm *s = rs_fake_storm(2, 1, 3000);
    setenv("KPC_REMOTE_LEASE_MS", "30000", 1); /* the old default: only the pid check is quick */
    pid_t host = tc_hosts_start(0, 1, 2, rs_base, false, rs_rank, s);
    pid_t holder = rs_await_holder();
    rs_sleep_ms(300); /* the other rank waits on the host index */
    double t0 = rs_now();
    ck_assert_int_eq(kill(holder, SIGKILL), 0);
    ck_assert_int_eq(tc_hosts_wait(host), 1); /* the killed rank */
    double t = rs_now() - t0;
    int other = s->out[0].done ? 0 : 1;
    ck_assert_int_eq(s->out[other].done, 1);
    ck_assert_uint_eq(s->out[other].st.builds, 1);
    ck_assert_uint_ge(s->out[other].st.remote_takeovers, 1);
    /* the compile (3 s) again, not the 30 s lease */
    ck_assert_msg(t < 20, "the host was held %.1f s after its builder died", t);
    fprintf(stderr, "killed_here: the host had the object %.1f s after its builder was killed\n", t);
}
END_TEST

START_TEST(redis_stopped)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    storm *s = rs_new(1, 1, rs_redis.url, rs_base);
    /* a compile longer than a third of the old 30 s lease, so that a renewal meets the
     * stop: the builder's tier goes off and its publish is skipped, leaving the lease */
    s->slow_ms = 12000;
    s->sick = true; /* the default 300 ms timeouts: the stop is a sick Redis */
    pid_t first = tc_hosts_start(0, 1, 1, rs_base, false, rs_rank, s);
    pid_t holder = rs_await_holder();
    rs_sleep_ms(8000);
    ck_assert_int_eq(kill(rs_redis.pid, SIGSTOP), 0);
    rs_sleep_ms(10000);
    ck_assert_int_eq(kill(rs_redis.pid, SIGCONT), 0);
    double t0 = rs_now();
    pid_t next = tc_hosts_start(1, 1, 1, rs_base, false, rs_rank, s);
    pid_t now = 0; /* the next host takes the lease over (or finds the record) */
    for (int i = 0; i < 6000 && ((now = rs_lease_holder(rs_redis.port)) == holder || now == 0) && !s->out[1].done; i++)
        rs_sleep_ms(10);
    double t = rs_now() - t0;
    ck_assert_int_eq(tc_hosts_wait(first), 0);
    ck_assert_int_eq(tc_hosts_wait(next), 0);
    rs_check_identical(s, 0, 2);
    /* the old 30 s lease, renewed once more when Redis came back, held it about 30 s */
    ck_assert_msg(t < 10, "the next host waited %.1f s for the lease", t);
    fprintf(stderr, "redis_stopped: the next host held the lease %.1f s after Redis came back\n", t);
}
END_TEST

/* A TCP relay to the test's Redis that stops the server (SIGSTOP) just before it passes
 * on the first bytes holding `trigger`: they wait in the stopped server's socket, as a
 * command sent before a stall does, and run when it resumes. One connection at a time. */
typedef struct stall_relay {
    int listen_fd, port, quit[2];
    const char *trigger;
    _Atomic bool stopped;
    pthread_t thread;
} stall_relay;

static void relay_one(stall_relay *x, int client)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)rs_redis.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (up < 0 || connect(up, (struct sockaddr *)&a, sizeof a) != 0) {
        if (up >= 0)
            close(up);
        return;
    }
    char buf[65536];
    for (;;) {
        struct pollfd p[3] = {{client, POLLIN, 0}, {up, POLLIN, 0}, {x->quit[0], POLLIN, 0}};
        if (poll(p, 3, -1) < 0 || p[2].revents)
            break;
        int from = p[0].revents ? client : up, to = from == client ? up : client;
        ssize_t n = read(from, buf, sizeof buf);
        if (n <= 0)
            break;
        if (from == client && !atomic_load(&x->stopped) && memmem(buf, (size_t)n, x->trigger, strlen(x->trigger))) {
            kill(rs_redis.pid, SIGSTOP);
            atomic_store(&x->stopped, true);
        }
        if (write(to, buf, (size_t)n) != n)
            break;
    }
    close(up); /* as the client's own socket would be: what it sent still runs */
}

static void *relay_run(void *arg)
{
    stall_relay *x = arg;
    for (;;) {
        struct pollfd p[2] = {{x->listen_fd, POLLIN, 0}, {x->quit[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0 || p[1].revents)
            return NULL;
        int c = accept4(x->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c >= 0) {
            relay_one(x, c);
            close(c);
        }
    }
}

static void relay_start(stall_relay *x, const char *trigger)
{
    memset(x, 0, sizeof *x);
    x->trigger = trigger;
    x->listen_fd = tc_silent_listener(&x->port);
    ck_assert_int_ge(x->listen_fd, 0);
    ck_assert_int_eq(pipe2(x->quit, O_CLOEXEC), 0);
    ck_assert_int_eq(pthread_create(&x->thread, NULL, relay_run, x), 0);
}

static void relay_stop(stall_relay *x)
{
    ck_assert_int_eq(write(x->quit[1], "q", 1), 1);
    pthread_join(x->thread, NULL);
    close(x->quit[0]);
    close(x->quit[1]);
    close(x->listen_fd);
}

START_TEST(unseen_lease)
{
    stall_relay x;
    relay_start(&x, "EVAL"); /* the claim: the first script after the record's GET */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", x.port);
    setenv("KPC_REMOTE_TRUST", "unauthenticated", 1);
    kpc_remote *a = NULL, *b = NULL;
    setenv("KPC_HOST_ID", "stalled", 1);
    ck_assert_int_eq(kpc_remote_open(url, &a), KPC_OK);
    setenv("KPC_HOST_ID", "next", 1);
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &b), KPC_OK);
    unsetenv("KPC_HOST_ID");
    kpc_key key = {{0x24, 0x02, 0x55}};
    uint8_t cid[16];
    memset(cid, 0x24, sizeof cid);
    kpc_record rec;
    kpc_remote_lease *lease = NULL;
    char lname[KPC_REMOTE_NAME_MAX];
    kpc_remote_key_name(a, &key, "lease", lname, sizeof lname);
    ts_log_begin(KPC_LOG_ERROR);
    /* the claim is sent, Redis stops before it runs, the client gives up at its deadline */
    ck_assert_int_eq(kpc_remote_begin(a, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_OFF);
    free(ts_log_end());
    ck_assert(atomic_load(&x.stopped));
    rs_sleep_ms(500);
    ck_assert_int_eq(kill(rs_redis.pid, SIGCONT), 0);
    double t0 = rs_now();
    /* the claim runs now: a lease taken in a reply its holder never read */
    long long pttl = -2;
    for (int i = 0; i < 500 && (pttl = tc_redis_int(&rs_redis, "PTTL %s", lname)) < 0; i++)
        rs_sleep_ms(1);
    ck_assert_msg(pttl > 0, "the stalled claim left no lease (PTTL %lld): the case tests nothing", pttl);
    /* the next host waits on it only briefly, then builds */
    ck_assert_int_eq(kpc_remote_begin(b, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    double t = rs_now() - t0;
    kpc_remote_release(b, lease);
    ck_assert_msg(t < 1.5, "the next host waited %.2f s on a lease no one knew of (PTTL %lld ms)", t, pttl);
    fprintf(stderr, "unseen_lease: the orphaned lease had a PTTL of %lld ms; the next host took it "
            "%.2f s after Redis resumed\n", pttl, t);
    kpc_remote_close(a);
    kpc_remote_close(b);
    relay_stop(&x);
    unsetenv("KPC_REMOTE_TRUST");
}
END_TEST

START_TEST(stopped_builder)
{
    NEED_HOSTS(rs_have_hosts);
    storm *s = rs_fake_storm(2, 1, 1500);
    setenv("KPC_REMOTE_LEASE_MS", "1000", 1);
    pid_t a = tc_hosts_start(0, 1, 2, rs_base, false, rs_rank, s);
    pid_t holder = rs_await_holder();
    ck_assert_int_eq(kill(holder, SIGSTOP), 0); /* its keeper stops too: the lease lapses */
    double t0 = rs_now();
    ck_assert_int_eq(tc_hosts_run(1, 1, 1, rs_base, false, rs_rank, s), 0); /* host 1 builds it */
    for (int i = 0; i < 3000 && !s->out[0].done && !s->out[1].done; i++)
        rs_sleep_ms(10);
    double t = rs_now() - t0;
    kill(holder, SIGKILL);
    tc_hosts_wait(a);
    int waiter = s->out[0].done ? 0 : 1;
    ck_assert_msg(s->out[waiter].done, "host 0's waiter still waits on its stopped builder");
    ck_assert_uint_eq(s->out[waiter].st.builds, 0);
    ck_assert_uint_eq(s->out[waiter].digest[0], s->out[2].digest[0]);
    ck_assert_uint_eq(s->out[2].st.builds, 1);
    fprintf(stderr, "stopped_builder: the waiter had the object %.1f s after its builder stopped\n", t);
}
END_TEST

START_TEST(secrets_apart)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    enum { H = 2, P = 2, K = 4 };
    storm *g1 = new_storm(P, K), *g2 = new_storm(P, K);
    g1->slow_ms = g2->slow_ms = 100;
    g2->salt = g1->salt; /* the same sources, keys */
    rs_secret_file(g2->secret, sizeof g2->secret, rs_base, "the other group's secret");
    pid_t p1 = tc_hosts_start(0, H, P, rs_base, false, rs_rank, g1);
    pid_t p2 = tc_hosts_start(H, H, P, rs_base, false, rs_rank, g2);
    ck_assert_int_eq(tc_hosts_wait(p1), 0);
    ck_assert_int_eq(tc_hosts_wait(p2), 0);
    kpc_stats t1 = rs_sum(g1, 0, H * P), t2 = rs_sum(g2, H * P, H * P);
    ck_assert_uint_eq(t1.builds, K); /* each group once per key: no fight */
    ck_assert_uint_eq(t2.builds, K);
    ck_assert_uint_eq(t1.remote_refused + t2.remote_refused, 0);
    ck_assert_uint_eq(ts_fake_compiles(), 2 * K);
}
END_TEST

/* A storm of 4 hosts x 8 ranks x 8 keys (compiles of slow_ms): the most clients Redis
 * had connected at once while requests ran (sampled every 2 ms), and the most while
 * every key's lease was held, from 300 ms after they all were (*building: the builds
 * under way, every other claimant waiting). Checks K builds and identical bytes. */
enum { CH = 4, CP = 8, CK = 8 };
static int connection_peak(bool same_order, int slow_ms, int *building)
{
    storm *s = new_storm(CP, CK);
    s->slow_ms = slow_ms;
    s->same_order = same_order;
    pid_t all = tc_hosts_start(0, CH, CP, rs_base, false, rs_rank, s);
    int peak = 0, st;
    double all_leased = 0;
    *building = -1;
    bool requests = true; /* until a rank closes: its counters go out on a short connection */
    while (waitpid(all, &st, WNOHANG) == 0) {
        for (int r = 0; r < CH * CP; r++)
            requests &= !s->out[r].closing;
        int n = requests ? rs_clients(rs_redis.port) : 0;
        if (n > peak)
            peak = n;
        if (rs_leases(rs_redis.port) != CK)
            all_leased = 0;
        else if (all_leased == 0)
            all_leased = rs_now();
        else if (rs_now() - all_leased > 0.3 && n > *building) /* every claimant has asked by now */
            *building = n;
        rs_sleep_ms(2);
    }
    ck_assert_int_eq(WIFEXITED(st) ? WEXITSTATUS(st) : 255, 0);
    ck_assert_uint_eq(rs_sum(s, 0, CH * CP).builds, CK);
    rs_check_identical(s, 0, CH * CP);
    fprintf(stderr, "connections (%s order): %d at peak, %d while every key was being built; %d hosts x %d ranks\n",
            same_order ? "same" : "different", peak, *building, CH, CP);
    return peak;
}

START_TEST(connections)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    int building;
    int peak = connection_peak(true, 50, &building);
    /* each host's claimant of the key at hand */
    ck_assert_msg(peak <= 2 * CH, "%d connections at peak for %d hosts x %d ranks", peak, CH, CP);
}
END_TEST

START_TEST(connections_any_order)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    /* every rank of a host claims another key: 32 claimants ask at once, then 8 build
     * and 24 wait on other hosts' leases for a second. A host's calls queue for its two
     * connection slots; none holds a connection while it compiles or waits (before: 32
     * at peak and all through the builds, one per claimant) */
    int building;
    int peak = connection_peak(false, 1000, &building);
    ck_assert_int_ge(building, 0); /* the window was seen */
    /* bounds with room for one machine running every host: a connection Redis has not
     * yet seen closed still counts */
    ck_assert_msg(peak <= 3 * CH, "%d connections at peak for %d hosts x %d ranks", peak, CH, CP);
    ck_assert_msg(building <= 3 * CH, "%d connections while %d hosts x %d ranks built or waited", building, CH, CP);
}
END_TEST

START_TEST(unauthenticated)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    enum { H = 2, P = 2, K = 2 };
    storm *s = new_storm(P, K);
    s->secret[0] = '\0';
    ck_assert_int_eq(tc_hosts_run(0, H, P, rs_base, false, rs_rank, s), 0);
    kpc_stats t = rs_sum(s, 0, H * P);
    ck_assert_uint_eq(t.builds, (uint64_t)H * K); /* host-local: nothing served */
    ck_assert_uint_eq(t.remote_hits, 0);
    redisContext *c = redisConnect("127.0.0.1", rs_redis.port);
    redisReply *keys = redisCommand(c, "KEYS *:co");
    ck_assert_uint_eq(keys->elements, 0); /* nor stored */
    freeReplyObject(keys);
    redisFree(c);
    /* said at the default log level, with the one line that makes a secret */
    char env_remote[160];
    snprintf(env_remote, sizeof env_remote, "KPC_REMOTE=%s", rs_redis.url);
    const char *env[] = {env_remote, NULL};
    /* a cache dir of the test's own: never the user's */
    char cache_dir[4300];
    snprintf(cache_dir, sizeof cache_dir, "%s/tool-cache", rs_base);
    const char *argv[] = {getenv("KPC_TOOL"), "compile", "--cache-dir", cache_dir, "--target", ts_target(), NULL, NULL};
    char src[4300];
    snprintf(src, sizeof src, "%s/k.hip", rs_base);
    char *code = rs_source(s, 0);
    ts_write_file(src, code, strlen(code));
    free(code);
    argv[6] = src;
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(ts_exec(argv, env, &out, &err), 0);
    ck_assert_msg(strstr(err, "kpc remote keygen") != NULL, "stderr: %s", err);
    ck_assert_ptr_null(strstr(strstr(err, "kpc remote keygen") + 1, "kpc remote keygen")); /* once */
    free(out);
    free(err);
    const char *stats[] = {getenv("KPC_TOOL"), "stats", "--cache-dir", cache_dir, NULL};
    ck_assert_int_eq(ts_exec(stats, env, &out, &err), 0);
    ck_assert_msg(strstr(out, "records not served") != NULL, "stats: %s", out);
    free(out);
    free(err);
}
END_TEST

/* kill -9 the lease holder mid-compile: another host takes over once the lease expires
 * (others: hosts of 2 ranks that wait on it meanwhile). */
static void takeover(storm *s, int lease_ms, int others)
{
    char ms[16];
    snprintf(ms, sizeof ms, "%d", lease_ms);
    setenv("KPC_REMOTE_LEASE_MS", ms, 1);
    pid_t victim_host = tc_hosts_start(0, 1, 1, rs_base, false, rs_rank, s);
    pid_t holder = rs_await_holder();
    /* the other hosts start while it compiles, and wait on its lease */
    pid_t rest = tc_hosts_start(1, others, 2, rs_base, false, rs_rank, s);
    rs_await_waiter(rs_redis.port);
    double t0 = rs_now();
    ck_assert_int_eq(kill(holder, SIGKILL), 0);
    pid_t next = 0; /* the new holder (bounded: a fast build may come and go unseen) */
    for (int i = 0; i < 5000 && ((next = rs_lease_holder(rs_redis.port)) == holder || next == 0); i++)
        rs_sleep_ms(2);
    double t1 = rs_now();
    ck_assert_int_eq(tc_hosts_wait(victim_host), 1); /* its one rank died */
    ck_assert_int_eq(tc_hosts_wait(rest), 0);
    double t2 = rs_now();
    unsetenv("KPC_REMOTE_LEASE_MS");
    kpc_stats t = rs_sum(s, 2, others * 2);
    ck_assert_uint_ge(t.remote_takeovers, 1);
    ck_assert_uint_eq(t.builds, 1); /* one of the waiting hosts, once */
    rs_check_identical(s, 2, others * 2);
    fprintf(stderr, "takeover%s: lease %d ms: the build taken over %.0f ms after the holder was "
            "killed; every host had the object after %.0f ms\n", s->real ? " (hipRTC)" : "", lease_ms,
            (t1 - t0) * 1e3, (t2 - t0) * 1e3);
}

START_TEST(takeover_fake)
{
    NEED_HOSTS(rs_have_hosts);
    storm *s = rs_fake_storm(2, 1, 1500);
    takeover(s, 400, 3);
    ck_assert_uint_eq(ts_fake_compiles(), 2); /* the dead holder's and the takeover's */
}
END_TEST

START_TEST(redis_killed)
{
    NEED_HOSTS(rs_have_hosts);
    enum { H = 3, P = 4, K = 6 };
    storm *s = rs_fake_storm(P, K, 400);
    s->sick = true;
    setenv("KPC_REMOTE_LEASE_MS", "1000", 1);
    pid_t all = tc_hosts_start(0, H, P, rs_base, false, rs_rank, s);
    rs_sleep_ms(300); /* mid-storm: the first builds are running */
    kill(rs_redis.pid, SIGKILL);
    ck_assert_int_eq(tc_hosts_wait(all), 0); /* no hang, no crash, no failed request */
    unsetenv("KPC_REMOTE_LEASE_MS");
    rs_check_identical(s, 0, H * P);
    kpc_stats t = rs_sum(s, 0, H * P);
    ck_assert_uint_ge(t.remote_errors, 1);
    ck_assert_uint_le(t.builds, (uint64_t)H * K); /* at most host-local duplicates */
}
END_TEST

START_TEST(redis_silent)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    int port;
    int fd = tc_silent_listener(&port);
    ck_assert_int_ge(fd, 0);
    enum { H = 2, P = 4, K = 4 };
    storm *s = rs_new(P, K, NULL, rs_base);
    s->sick = true;
    snprintf(s->remote, sizeof s->remote, "redis://127.0.0.1:%d", port);
    ck_assert_int_eq(tc_hosts_run(0, H, P, rs_base, false, rs_rank, s), 0);
    close(fd);
    rs_check_identical(s, 0, H * P);
    kpc_stats t = rs_sum(s, 0, H * P);
    ck_assert_uint_ge(t.remote_errors, 1);
    ck_assert_uint_eq(t.builds, (uint64_t)H * K); /* host-local: once per host */
    ck_assert_uint_eq(t.remote_builds, 0);
}
END_TEST

START_TEST(takeover_real)
{
    NEED_HOSTS(rs_have_hosts);
    storm *s = new_storm(2, 1);
    s->real = true;
    /* the holder's compile is held open until it is killed, however fast the compiler */
    ts_hold_arm();
    takeover(s, 300, 2);
    ts_hold_remove();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("remote_stalls");
    TCase *tc = tcase_create("stalls");
    tcase_add_checked_fixture(tc, rs_setup, rs_teardown);
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, forged_lease);
    tcase_add_test(tc, orphaned_lease);
    tcase_add_test(tc, killed_here);
    tcase_add_test(tc, redis_stopped);
    tcase_add_test(tc, stopped_builder);
    tcase_add_test(tc, secrets_apart);
    tcase_add_test(tc, unauthenticated);
    tcase_add_test(tc, takeover_fake);
    tcase_add_test(tc, redis_killed);
    tcase_add_test(tc, redis_silent);
    suite_add_tcase(s, tc);
    TCase *conns = tcase_create("connections");
    tcase_add_checked_fixture(conns, rs_setup, rs_teardown);
    tcase_set_timeout(conns, 180);
    tcase_add_test(conns, connections);
    tcase_add_test(conns, connections_any_order);
    suite_add_tcase(s, conns);
    TCase *unseen = tcase_create("unseen"); /* no simulated hosts: runs without root */
    tcase_add_checked_fixture(unseen, rs_setup, rs_teardown);
    tcase_set_timeout(unseen, 60);
    tcase_add_test(unseen, unseen_lease);
    suite_add_tcase(s, unseen);
    TCase *real = tcase_create("real");
    tcase_add_checked_fixture(real, rs_setup, rs_teardown);
    tcase_set_timeout(real, 240);
    tcase_add_test(real, takeover_real);
    suite_add_tcase(s, real);
    return ts_run_suite(s);
}
