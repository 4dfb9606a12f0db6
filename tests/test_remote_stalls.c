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
 *   stopped_builder     a builder stopped (SIGSTOP) with its host's other ranks waiting;
 *                       another host builds the key: the waiters take it from Redis
 *   secrets_apart       two groups with different secrets on one Redis: each builds K
 *   connections         a same-order storm holds about one connection per host
 *   unauthenticated     no secret, no trust: builds host-local, says so once, stats say so
 *   takeover_fake/_real kill -9 of the lease holder: another host takes over after the lease
 *   redis_killed        redis-server killed mid-storm: no hang, no wrong object
 *   redis_silent        a listener that never answers: host-local, bounded by the timeouts
 *
 * Times asserted are bounds that only a hang or the old behaviour (a 30 s lease, a
 * 10-minute host wait) exceeds, never speed; the speed is in bench_cluster.
 */
#define _GNU_SOURCE
#include "remote_storm.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    const char *orphan = "host=gone pid=4242 start=1 token=00";
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

START_TEST(connections)
{
    NEED_HOSTS(rs_have_hosts);
    enum { H = 4, P = 8, K = 8 };
    storm *s = rs_fake_storm(P, K, 50);
    s->same_order = true;
    pid_t all = tc_hosts_start(0, H, P, rs_base, false, rs_rank, s);
    int peak = 0, st;
    bool requests = true; /* until a rank closes: its counters go out on a short connection */
    while (waitpid(all, &st, WNOHANG) == 0) {
        for (int r = 0; r < H * P; r++)
            requests &= !s->out[r].closing;
        int n = requests ? rs_clients(rs_redis.port) : 0;
        if (n > peak)
            peak = n;
        rs_sleep_ms(2);
    }
    ck_assert_int_eq(WIFEXITED(st) ? WEXITSTATUS(st) : 255, 0);
    ck_assert_uint_eq(rs_sum(s, 0, H * P).builds, K);
    /* each host's claimant of the key at hand */
    ck_assert_msg(peak <= 2 * H, "%d connections at peak for %d hosts x %d ranks", peak, H, P);
    fprintf(stderr, "connections: %d at peak, %d hosts x %d ranks\n", peak, H, P);
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
    s->real = s->slow = true;
    takeover(s, 300, 2);
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
    tcase_add_test(tc, connections);
    tcase_add_test(tc, unauthenticated);
    tcase_add_test(tc, takeover_fake);
    tcase_add_test(tc, redis_killed);
    tcase_add_test(tc, redis_silent);
    suite_add_tcase(s, tc);
    TCase *real = tcase_create("real");
    tcase_add_checked_fixture(real, rs_setup, rs_teardown);
    tcase_set_timeout(real, 240);
    tcase_add_test(real, takeover_real);
    suite_add_tcase(s, real);
    return ts_run_suite(s);
}
