/*
 * test_remote_cluster.c - the cluster tier (src/storage/remote.c) across simulated hosts
 * (each a mount namespace with its own /dev/shm and cache dir, several processes each,
 * one real redis-server started by the test: tests/cluster_support.c):
 *
 *   cluster   the H x P x K storm (builds == K cluster-wide, byte-identical objects) and
 *             a later fifth host (0 builds); a compile error shared across hosts; records
 *             damaged in Redis, written without the secret, or stored under another key;
 *             `kpc remote stats|ls|prune|clear|keygen`;
 *             one cache dir shared by the hosts without Redis
 *   real      the storm through real hipRTC
 *
 * Children report into an anonymous shared mapping; the parent compares. Simulated hosts
 * need root (unshare); elsewhere those tests say so and pass without running.
 */
#define _GNU_SOURCE
#include "remote_storm.h"

#include "storage/remote_private.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static storm *new_storm(int procs, int k, bool remote)
{
    return rs_new(procs, k, remote ? rs_redis.url : NULL, rs_base);
}

/* ---- cluster ----------------------------------------------------------------------------- */
START_TEST(storm_fake)
{
    NEED_HOSTS(rs_have_hosts);
    enum { H = 4, P = 8, K = 8 };
    storm *s = rs_fake_storm(P, K, 30);
    ck_assert_int_eq(tc_hosts_run(0, H, P, rs_base, false, rs_rank, s), 0);
    kpc_stats t = rs_sum(s, 0, H * P);
    ck_assert_uint_eq(ts_fake_compiles(), K); /* one compile per key in the cluster */
    ck_assert_uint_eq(t.builds, K);
    ck_assert_uint_eq(t.remote_builds, K);
    ck_assert_uint_eq(t.remote_errors, 0);
    ck_assert_uint_eq(t.remote_refused, 0);
    /* Redis saw about one request per key per host: H claimants per key */
    ck_assert_uint_eq(t.remote_misses, K);
    ck_assert_uint_eq(t.remote_hits + t.remote_misses, (uint64_t)H * K);
    rs_check_identical(s, 0, H * P);
    /* a fifth host joins later: 0 builds, everything from Redis and then its own disk */
    ck_assert_int_eq(tc_hosts_run(H, 1, P, rs_base, false, rs_rank, s), 0);
    kpc_stats late = rs_sum(s, H * P, P);
    ck_assert_uint_eq(late.builds, 0);
    ck_assert_uint_eq(late.remote_hits, K);
    ck_assert_uint_eq(ts_fake_compiles(), K);
    for (int r = H * P; r < H * P + P; r++)
        for (int i = 0; i < K; i++)
            ck_assert(s->out[r].digest[i] == s->out[0].digest[i]);
    /* `kpc stats --json` prints the cluster-wide counters the processes added in Redis */
    char env_remote[160], env_secret[4400];
    snprintf(env_remote, sizeof env_remote, "KPC_REMOTE=%s", rs_redis.url);
    snprintf(env_secret, sizeof env_secret, "KPC_REMOTE_SECRET_FILE=%s", s->secret);
    const char *env[] = {env_remote, env_secret, NULL};
    const char *argv[] = {getenv("KPC_TOOL"), "stats", "--json", "--cache-dir", rs_base, NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(ts_exec(argv, env, &out, &err), 0);
    cJSON *j = cJSON_Parse(out);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "remote")->valuestring, "ok");
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "remote_builds")->valuedouble, K);
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "remote_hits")->valuedouble, (H - 1) * K + K);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "remote_trust")->valuestring, "authenticated");
    cJSON_Delete(j);
    free(out);
    free(err);
    /* `kpc remote ls` lists the group's K records; `kpc remote clear` removes its keys */
    const char *ls[] = {getenv("KPC_TOOL"), "remote", "ls", "--json", NULL};
    ck_assert_int_eq(ts_exec(ls, env, &out, &err), 0);
    j = cJSON_Parse(out);
    ck_assert_int_eq(cJSON_GetArraySize(j), K);
    cJSON_Delete(j);
    free(out);
    free(err);
    /* `kpc remote stats` counts them; `prune` keeps what was read lately */
    const char *rstats[] = {getenv("KPC_TOOL"), "remote", "stats", "--json", NULL};
    ck_assert_int_eq(ts_exec(rstats, env, &out, &err), 0);
    j = cJSON_Parse(out);
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "records")->valuedouble, K);
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "builds")->valuedouble, K);
    cJSON_Delete(j);
    free(out);
    free(err);
    const char *prune[] = {getenv("KPC_TOOL"), "remote", "prune", "--max-idle", "3600", NULL};
    ck_assert_int_eq(ts_exec(prune, env, &out, &err), 0);
    ck_assert_msg(strstr(out, "removed 0 records") != NULL, "prune: %s", out);
    free(out);
    free(err);
    const char *clear[] = {getenv("KPC_TOOL"), "remote", "clear", NULL};
    ck_assert_int_eq(ts_exec(clear, env, &out, &err), 0);
    free(out);
    free(err);
    ck_assert_int_eq(tc_redis_int(&rs_redis, "DBSIZE"), 0);
    const char *keygen[] = {getenv("KPC_TOOL"), "remote", "keygen", NULL};
    ck_assert_int_eq(ts_exec(keygen, env, &out, &err), 0);
    ck_assert_uint_eq(strlen(out), 65);
    free(out);
    free(err);
    /* back-filled: the fifth host's disk holds the K records */
    char path[4300];
    snprintf(path, sizeof path, "%s/host%d", rs_base, H);
    kpc_cache *c = ts_open(path, KPC_NO_SHM, 0);
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.disk_files, K);
    kpc_cache_close(c);
}
END_TEST

START_TEST(failure_shared)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    storm *s = new_storm(2, 1, true);
    s->failing = true;
    ck_assert_int_eq(tc_hosts_run(0, 1, 2, rs_base, false, rs_rank, s), 0);
    ck_assert_uint_eq(ts_fake_compiles(), 1);
    ck_assert_int_eq(tc_hosts_run(1, 3, 2, rs_base, false, rs_rank, s), 0);
    ck_assert_uint_eq(ts_fake_compiles(), 1); /* the other hosts took the shared failure */
    for (int r = 0; r < 8; r++) {
        ck_assert_int_eq(s->out[r].status[0], KPC_E_COMPILE);
        ck_assert_msg(strstr(s->out[r].log, "#error") != NULL, "rank %d log: %s", r, s->out[r].log);
    }
}
END_TEST

/* The names of the two code records in Redis under prefix (there must be two). */
static void two_records(const char *prefix, char k0[KPC_REMOTE_NAME_MAX], char k1[KPC_REMOTE_NAME_MAX])
{
    redisContext *c = redisConnect("127.0.0.1", rs_redis.port);
    ck_assert_ptr_nonnull(c);
    redisReply *keys = redisCommand(c, "KEYS %s*:co", prefix);
    ck_assert_uint_eq(keys->elements, 2);
    snprintf(k0, KPC_REMOTE_NAME_MAX, "%s", keys->element[0]->str);
    snprintf(k1, KPC_REMOTE_NAME_MAX, "%s", keys->element[1]->str);
    freeReplyObject(keys);
    redisFree(c);
}

static void group_prefix(const char *secret, char *out, size_t cap)
{
    if (secret)
        setenv("KPC_REMOTE_SECRET_FILE", secret, 1);
    kpc_remote *r = NULL;
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &r), KPC_OK);
    snprintf(out, cap, "%s", kpc_remote_prefix(r));
    kpc_remote_close(r);
    unsetenv("KPC_REMOTE_SECRET_FILE");
}

START_TEST(records_refused)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    storm *s = new_storm(1, 2, true);
    char prefix[160], open_prefix[160];
    group_prefix(s->secret, prefix, sizeof prefix);
    group_prefix(NULL, open_prefix, sizeof open_prefix);
    /* host 0 publishes both keys */
    ck_assert_int_eq(tc_hosts_run(0, 1, 1, rs_base, false, rs_rank, s), 0);
    ck_assert_uint_eq(ts_fake_compiles(), 2);
    char k0[KPC_REMOTE_NAME_MAX], k1[KPC_REMOTE_NAME_MAX];
    two_records(prefix, k0, k1);
    size_t n0, n1;
    char *v0 = tc_redis_get(&rs_redis, k0, &n0), *v1 = tc_redis_get(&rs_redis, k1, &n1);
    /* 1: one byte flipped in the payload of k0; another key's record stored under k1 */
    v0[n0 - 70] ^= 0x40;
    ck_assert(tc_redis_set(&rs_redis, k0, v0, n0));
    v0[n0 - 70] ^= 0x40;
    ck_assert(tc_redis_set(&rs_redis, k1, v0, n0));
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(tc_hosts_run(1, 1, 1, rs_base, false, rs_rank, s), 0);
    char *log = ts_log_end();
    ck_assert_ptr_nonnull(strstr(log, "refused"));
    free(log);
    ck_assert_uint_eq(s->out[1].st.remote_refused, 2);
    ck_assert_uint_eq(s->out[1].st.builds, 2);
    ck_assert_uint_eq(ts_fake_compiles(), 4);
    rs_check_identical(s, 0, 2); /* rebuilt: the right bytes */
    /* the rebuilds replaced them in Redis */
    size_t m;
    char *fixed = tc_redis_get(&rs_redis, k1, &m);
    ck_assert_uint_eq(m, n1);
    ck_assert_mem_eq(fixed + 256, v1 + 256, n1 - 256 - 32); /* the payload after the header */
    free(fixed);
    /* 2: records written without the secret (by hosts that trust Redis unauthenticated:
     * their own group) and copied into the group's keys are refused and rebuilt, and the
     * authenticated ones that replace them are taken by the next host */
    s->trust = true;
    ck_assert_int_eq(tc_hosts_run(2, 1, 1, rs_base, false, rs_rank, s), 0);
    ck_assert_uint_eq(s->out[2].st.builds, 2); /* another group: nothing there for it */
    char o0[KPC_REMOTE_NAME_MAX], o1[KPC_REMOTE_NAME_MAX];
    two_records(open_prefix, o0, o1);
    size_t u0, u1;
    char *w0 = tc_redis_get(&rs_redis, o0, &u0), *w1 = tc_redis_get(&rs_redis, o1, &u1);
    ck_assert(tc_redis_set(&rs_redis, k0, w0, u0) && tc_redis_set(&rs_redis, k1, w1, u1));
    s->trust = false;
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(tc_hosts_run(3, 1, 1, rs_base, false, rs_rank, s), 0);
    free(ts_log_end());
    ck_assert_uint_eq(s->out[3].st.remote_refused, 2);
    ck_assert_uint_eq(s->out[3].st.builds, 2);
    ck_assert_int_eq(tc_hosts_run(4, 1, 1, rs_base, false, rs_rank, s), 0);
    ck_assert_uint_eq(s->out[4].st.remote_hits, 2);
    ck_assert_uint_eq(s->out[4].st.builds, 0);
    rs_check_identical(s, 0, 5);
    free(v0);
    free(v1);
    free(w0);
    free(w1);
}
END_TEST

/* One cache directory shared by every host, each with its own /dev/shm, no Redis. */
START_TEST(shared_dir)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    enum { H = 4, P = 4, K = 8 };
    storm *s = new_storm(P, K, false);
    s->slow_ms = 20;
    ck_assert_int_eq(tc_hosts_run(0, H, P, rs_base, true, rs_rank, s), 0);
    rs_check_identical(s, 0, H * P);
    kpc_stats t = rs_sum(s, 0, H * P);
    ck_assert_uint_le(t.builds, (uint64_t)H * K); /* at most once per key per host */
    ck_assert_uint_ge(t.builds, K);
    char dir[4300];
    snprintf(dir, sizeof dir, "%s/shared", rs_base);
    const char *argv[] = {getenv("KPC_TOOL"), "verify", "--cache-dir", dir, NULL};
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, NULL, &out, &err);
    ck_assert_msg(rc == 0, "kpc verify: %d\n%s%s", rc, out, err);
    free(out);
    free(err);
    kpc_cache *c = ts_open(dir, KPC_NO_SHM, 0);
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.disk_files, K); /* no torn or temp file left over */
    kpc_cache_close(c);
}
END_TEST

/* ---- real hipRTC -------------------------------------------------------------------------- */
START_TEST(storm_real)
{
    NEED_HOSTS(rs_have_hosts);
    enum { H = 3, P = 3, K = 3 };
    storm *s = new_storm(P, K, true);
    s->real = true;
    ck_assert_int_eq(tc_hosts_run(0, H, P, rs_base, false, rs_rank, s), 0);
    kpc_stats t = rs_sum(s, 0, H * P);
    ck_assert_uint_eq(t.builds, K);
    ck_assert_uint_eq(t.remote_builds, K);
    rs_check_identical(s, 0, H * P);
    ck_assert_int_eq(tc_hosts_run(H, 1, 2, rs_base, false, rs_rank, s), 0);
    ck_assert_uint_eq(rs_sum(s, H * P, 2).builds, 0);
    rs_check_identical(s, 0, H * P + 2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("remote");
    const TTest *cluster[] = {storm_fake, failure_shared, records_refused, shared_dir, NULL};
    ts_add_tests(ts_case(s, "cluster", 120, rs_setup, rs_teardown), cluster);
    tcase_add_test(ts_case(s, "real", 240, rs_setup, rs_teardown), storm_real);
    return ts_run_suite(s);
}
