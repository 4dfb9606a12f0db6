/*
 * test_redis_cluster.c - the cluster tier on a real Redis Cluster: 6 nodes (3 primaries,
 * 3 replicas) on loopback ports, made by redis-cli --cluster create once for the whole
 * binary (tests/cluster_support.c) and stopped after, pass or fail. Simulated hosts as in
 * test_remote_cluster.c. The cases run in order and change the cluster as they go:
 *
 *   storm_ops        H x P x K cold through a seed list whose first seed is down: K
 *                    builds, the same bytes everywhere, records on every primary; a late
 *                    host builds nothing; `kpc stats` (the counters) and `kpc remote
 *                    stats|ls|clear` across the primaries, a clear of another namespace
 *                    leaving ours
 *   primary_killed   a primary holding leases SIGKILLed mid-storm: its replica takes
 *                    over, no failed rank, at most one more build per key it served, no
 *                    rank waits past two compiles + the node timeout + 5 s
 *   reshard          redis-cli --cluster reshard moves slots of a primary, one of the
 *                    storm's keys among them, while its build runs: K builds, no error
 *   all_down         every node killed: host-local, said once
 *
 * Where redis-server has no cluster mode (or redis-cli cannot make one) every case says
 * so and why ("CASE: skipped: REASON").
 */
#define _GNU_SOURCE
#include "remote_storm.h"

#include "storage/remote_private.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static tc_cluster cl;
static bool cl_up;
static char cl_why[256];
static bool have_hosts;

static void cluster_setup(void)
{
    have_hosts = tc_hosts_possible();
    cl_up = tc_cluster_start(&cl, cl_why, sizeof cl_why);
}

static void cluster_teardown(void)
{
    if (cl_up)
        tc_cluster_stop(&cl);
}

#define NEED_CLUSTER()                                                                         \
    do {                                                                                       \
        if (!cl_up) {                                                                          \
            printf("%s: skipped: %s\n", __func__, cl_why);                                     \
            return;                                                                            \
        }                                                                                      \
        NEED_HOSTS(have_hosts);                                                                \
    } while (0)

/* The node serving source i of s. */
static int owner_of(const storm *s, int i)
{
    kpc_key key;
    rs_key(s, i, &key);
    char hex[KPC_KEY_HEX];
    kpc__hex(key.bytes, sizeof key.bytes, hex);
    return tc_cluster_owner(&cl, kpc_remote_slot(hex, strlen(hex)));
}

/* A storm of fake compiles of slow_ms whose K keys lie on every primary that serves
 * slots (a salt chosen so): the records' spread is then a fact to check, not luck. */
static storm *spread_storm(int procs, int k, int slow_ms, const char *url, const char *dir, int *owner)
{
    ts_fake_install();
    storm *s = rs_new(procs, k, url, dir);
    s->slow_ms = slow_ms;
    int serving = 0;
    for (int i = 0; i < TC_NODES; i++)
        serving += tc_cluster_slot_count(&cl, i) > 0;
    for (int tries = 0; tries < 50; tries++, s->salt += 1000) {
        bool seen[TC_NODES] = {false};
        int covered = 0;
        for (int i = 0; i < k; i++)
            if ((owner[i] = owner_of(s, i)) >= 0 && !seen[owner[i]])
                seen[owner[i]] = true, covered++;
        if (covered == serving)
            return s;
    }
    ck_abort_msg("no salt spreads the keys over the primaries");
    return s;
}

static char *tool_out(const char *const *argv, const char *const *env)
{
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, env, &out, &err);
    ck_assert_msg(rc == 0, "%s %s: exit %d: %s", argv[1], argv[2] ? argv[2] : "", rc, err ? err : "");
    free(err);
    return out;
}

/* ---- the cases ---------------------------------------------------------------------------- */
START_TEST(storm_ops)
{
    NEED_CLUSTER();
    enum { H = 4, P = 4, K = 8 };
    char *base = ts_tmpdir();
    /* the first seed is down (a port nothing listens on): the others serve */
    char url[160];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", tc_free_port(), cl.node[1].port,
             cl.node[2].port);
    int owner[K];
    storm *s = spread_storm(P, K, 30, url, base, owner);
    ck_assert_int_eq(tc_hosts_run(0, H, P, base, false, rs_rank, s), 0);
    kpc_stats t = rs_sum(s, 0, H * P);
    ck_assert_uint_eq(ts_fake_compiles(), K); /* one compile per key on the cluster */
    ck_assert_uint_eq(t.builds, K);
    ck_assert_uint_eq(t.remote_builds, K);
    ck_assert_uint_eq(t.remote_errors, 0);
    ck_assert_uint_eq(t.remote_hits + t.remote_misses, (uint64_t)H * K);
    rs_check_identical(s, 0, H * P);
    /* each record on the primary of its slot, and every primary holds some */
    int prim[TC_NODES], n = tc_cluster_primaries(&cl, prim);
    ck_assert_int_eq(n, 3);
    long long sum = 0;
    for (int p = 0; p < n; p++) {
        long long here = tc_cluster_count(&cl, prim[p], "*:co"), want = 0;
        for (int i = 0; i < K; i++)
            want += owner[i] == prim[p];
        ck_assert_int_eq(here, want);
        ck_assert_int_gt(here, 0);
        sum += here;
    }
    ck_assert_int_eq(sum, K);
    /* a fifth host joins later, KPC_REMOTE naming one node (a replica, may be): 0 builds,
     * every record fetched from the cluster */
    snprintf(s->remote, sizeof s->remote, "redis://127.0.0.1:%d", cl.node[TC_NODES - 1].port);
    ck_assert_int_eq(tc_hosts_run(H, 1, P, base, false, rs_rank, s), 0);
    kpc_stats late = rs_sum(s, H * P, P);
    ck_assert_uint_eq(late.builds, 0);
    ck_assert_uint_eq(late.remote_hits, K);
    /* the counters (one hash, on its own slot's primary) and `kpc remote` on every primary */
    char env_remote[200], env_secret[4400];
    snprintf(env_remote, sizeof env_remote, "KPC_REMOTE=%s", url);
    snprintf(env_secret, sizeof env_secret, "KPC_REMOTE_SECRET_FILE=%s", s->secret);
    const char *env[] = {env_remote, env_secret, NULL};
    const char *stats[] = {getenv("KPC_TOOL"), "stats", "--json", "--cache-dir", base, NULL};
    char *out = tool_out(stats, env);
    cJSON *j = cJSON_Parse(out);
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "remote_builds")->valuedouble, K);
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "remote_hits")->valuedouble, (H - 1) * K + K);
    cJSON_Delete(j);
    free(out);
    const char *rstats[] = {getenv("KPC_TOOL"), "remote", "stats", "--json", NULL};
    j = cJSON_Parse(out = tool_out(rstats, env));
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "records")->valuedouble, K);
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "builds")->valuedouble, K);
    cJSON *list = cJSON_GetObjectItem(j, "primaries");
    ck_assert_int_eq(cJSON_GetArraySize(list), 3);
    for (int p = 0; p < 3; p++) {
        cJSON *e = cJSON_GetArrayItem(list, p);
        int port = atoi(strrchr(cJSON_GetObjectItem(e, "node")->valuestring, ':') + 1);
        int at = -1;
        for (int i = 0; i < TC_NODES; i++)
            at = cl.node[i].port == port ? i : at;
        ck_assert_int_ge(at, 0);
        ck_assert_int_eq((int)cJSON_GetObjectItem(e, "records")->valuedouble, tc_cluster_count(&cl, at, "*:co"));
        ck_assert_int_gt((int)cJSON_GetObjectItem(e, "used_memory")->valuedouble, 0);
    }
    cJSON_Delete(j);
    free(out);
    const char *ls[] = {getenv("KPC_TOOL"), "remote", "ls", "--json", NULL};
    j = cJSON_Parse(out = tool_out(ls, env));
    ck_assert_int_eq(cJSON_GetArraySize(j), K);
    cJSON_Delete(j);
    free(out);
    /* a clear of another namespace leaves ours; ours removes every key of the group on
     * every primary */
    const char *env_other[] = {env_remote, env_secret, "KPC_REMOTE_NAMESPACE=other", NULL};
    const char *clear[] = {getenv("KPC_TOOL"), "remote", "clear", NULL};
    free(tool_out(clear, env_other));
    for (int p = 0; p < n; p++)
        ck_assert_int_gt(tc_cluster_count(&cl, prim[p], "*:co"), 0);
    free(tool_out(clear, env));
    for (int p = 0; p < n; p++)
        ck_assert_int_eq(tc_cluster_count(&cl, prim[p], "kpc:*"), 0);
    ts_cleanup(base);
}
END_TEST

START_TEST(reshard)
{
    NEED_CLUSTER();
    enum { H = 3, P = 3, K = 6, MOVE = 300 };
    char *base = ts_tmpdir();
    int owner[K];
    storm *s = spread_storm(P, K, 1000, cl.seeds, base, owner);
    /* from: a primary; the storm's salt such that one of its keys is in the first MOVE
     * slots of from, which redis-cli moves first (lowest first): that key's slot moves
     * while it is being built and waited on */
    int prim[TC_NODES], n = tc_cluster_primaries(&cl, prim);
    ck_assert_int_ge(n, 2);
    int from = tc_cluster_slot_count(&cl, prim[0]) > MOVE ? prim[0] : prim[1];
    int to = from == prim[0] ? prim[1] : prim[0];
    int first = tc_cluster_first_slot(&cl, from), moving = -1;
    for (int tries = 0; moving < 0 && tries < 300; tries++) {
        s->salt += 1000;
        for (int i = 0; i < K && moving < 0; i++) {
            kpc_key key;
            rs_key(s, i, &key);
            char hex[KPC_KEY_HEX];
            kpc__hex(key.bytes, sizeof key.bytes, hex);
            int slot = (int)kpc_remote_slot(hex, strlen(hex));
            moving = slot >= first && slot < first + MOVE && tc_cluster_owner(&cl, (unsigned)slot) == from ? slot : -1;
        }
    }
    ck_assert_int_ge(moving, 0);
    char ids[2][64], addr[32], slots[16];
    for (int i = 0; i < 2; i++) {
        redisContext *c = redisConnect("127.0.0.1", cl.node[i ? to : from].port);
        redisReply *rep = redisCommand(c, "CLUSTER MYID");
        snprintf(ids[i], sizeof ids[i], "%s", rep->str);
        freeReplyObject(rep);
        redisFree(c);
    }
    snprintf(addr, sizeof addr, "127.0.0.1:%d", cl.node[from].port);
    snprintf(slots, sizeof slots, "%d", MOVE);
    int before = tc_cluster_slot_count(&cl, from);
    pid_t storm_hosts = tc_hosts_start(0, H, P, base, false, rs_rank, s);
    /* once the builds' leases are there: the ranks know the map, and it changes under them */
    long long leases = 0;
    for (int i = 0; i < 2000 && (leases = tc_cluster_count(&cl, from, "*:lease")) < 1; i++)
        rs_sleep_ms(5);
    const char *args[] = {"--cluster", "reshard", addr, "--cluster-from", ids[0], "--cluster-to", ids[1],
                          "--cluster-slots", slots, "--cluster-yes", NULL};
    double t0 = rs_now();
    int rc = tc_redis_cli(args);
    double moved_s = rs_now() - t0;
    ck_assert_int_eq(tc_hosts_wait(storm_hosts), 0);
    ck_assert_int_eq(rc, 0);
    printf("reshard: %.1f s to move %d slots (slot %d among them)\n", moved_s, MOVE, moving);
    ck_assert(tc_cluster_await_ok(&cl, 20000));
    /* K builds, no rank went host-local (a redirect not followed would have been an
     * error: the tier off, a build on every host) */
    kpc_stats t = rs_sum(s, 0, H * P);
    ck_assert_uint_eq(ts_fake_compiles(), K);
    ck_assert_uint_eq(t.builds, K);
    ck_assert_uint_eq(t.remote_errors, 0);
    rs_check_identical(s, 0, H * P);
    ck_assert_int_eq(tc_cluster_slot_count(&cl, from), before - MOVE);
    ck_assert_int_eq(tc_cluster_owner(&cl, (unsigned)moving), to);
    ts_cleanup(base);
}
END_TEST

START_TEST(primary_killed)
{
    NEED_CLUSTER();
    enum { H = 3, P = 3, K = 6, SLOW_MS = 2000 };
    char *base = ts_tmpdir();
    int owner[K];
    storm *s = spread_storm(P, K, SLOW_MS, cl.seeds, base, owner);
    int victim = owner[0], on_victim = 0;
    for (int i = 0; i < K; i++)
        on_victim += owner[i] == victim;
    pid_t storm_hosts = tc_hosts_start(0, H, P, base, false, rs_rank, s);
    /* once a build's lease is on it: killed, mid-build */
    long long leases = 0;
    for (int i = 0; i < 2000 && (leases = tc_cluster_count(&cl, victim, "*:lease")) < 1; i++)
        rs_sleep_ms(5);
    ck_assert_int_ge(leases, 1);
    kill(cl.node[victim].pid, SIGKILL);
    waitpid(cl.node[victim].pid, NULL, 0);
    cl.node[victim].pid = 0;
    ck_assert_int_eq(tc_hosts_wait(storm_hosts), 0);
    kpc_stats t = rs_sum(s, 0, H * P);
    rs_check_identical(s, 0, H * P);
    /* one build per key, and at most one more for each key the dead primary served */
    ck_assert_uint_ge(t.builds, K);
    ck_assert_uint_le(t.builds, K + on_victim);
    ck_assert_uint_eq(ts_fake_compiles(), t.builds);
    double slowest = 0;
    for (int r = 0; r < H * P; r++)
        slowest = s->out[r].seconds > slowest ? s->out[r].seconds : slowest;
    printf("primary_killed: builds %llu (K %d, %d on the dead primary), slowest rank %.1f s\n",
           (unsigned long long)t.builds, K, on_victim, slowest);
    ck_assert_msg(slowest <= 2 * SLOW_MS / 1e3 + 1 + 5, "a rank took %.1f s", slowest);
    ck_assert(tc_cluster_await_ok(&cl, 20000)); /* the replica serves its slots */
    ts_cleanup(base);
}
END_TEST

/* Every node down: host-local, said once. */
START_TEST(all_down)
{
    NEED_CLUSTER();
    tc_cluster_stop(&cl);
    setenv("KPC_REMOTE_TRUST", "unauthenticated", 1);
    kpc_remote *r = NULL;
    ck_assert_int_eq(kpc_remote_open(cl.seeds, &r), KPC_OK);
    unsetenv("KPC_REMOTE_TRUST");
    kpc_record rec;
    kpc_remote_lease *lease = NULL;
    uint8_t cid[16] = {1};
    ts_log_begin(KPC_LOG_WARN);
    for (int i = 0; i < 3; i++) {
        kpc_key key = {{(uint8_t)i, 7}};
        ck_assert_int_eq(kpc_remote_begin(r, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_OFF);
    }
    char *log = ts_log_end();
    ck_assert_msg(strstr(log, "building host-local") != NULL, "log: %s", log);
    ck_assert_msg(strstr(strstr(log, "building host-local") + 1, "building host-local") == NULL, "log: %s", log);
    free(log);
    kpc_remote_close(r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("redis_cluster");
    TCase *tc = tcase_create("cluster");
    tcase_add_unchecked_fixture(tc, cluster_setup, cluster_teardown);
    tcase_add_test(tc, storm_ops);
    tcase_add_test(tc, primary_killed); /* before the reshard: it leaves a primary with no slot, */
    tcase_add_test(tc, reshard);        /* and then a failover lacks a majority of voters */
    tcase_add_test(tc, all_down);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
