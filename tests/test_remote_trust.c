/*
 * test_remote_trust.c - what the cluster tier trusts in Redis beyond a record's tag,
 * against a real redis-server started by the test (tests/cluster_support.c): a lease is
 * honoured only while fresh, so an honest lease value written back later (a replay)
 * holds a waiter for about two lease periods, not KPC_BUILD_WAIT_MAX_MS; and what
 * `kpc remote` says when its secret file cannot be used, when Redis cannot be reached,
 * when a cluster-wide counter in Redis is not a number, and which eviction policy it
 * advises (the one docs/cluster.md's redis.conf sets).
 * The rules: docs/trust.md ("Redis: the cluster tier"), docs/cluster.md (the lease).
 */
#define _GNU_SOURCE
#include "remote_storm.h"

#include "storage/remote_private.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LEASE_MS 400 /* small, so that two lease periods are short */

static kpc_remote *open_host(const char *host)
{
    setenv("KPC_HOST_ID", host, 1);
    kpc_remote *r = NULL;
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &r), KPC_OK);
    unsetenv("KPC_HOST_ID");
    return r;
}

/* Another host asks for key while the lease holds `value` written back with an hour's
 * expiry (a replay): it must take the build over within the freshness bound, never wait
 * out KPC_BUILD_WAIT_MAX_MS. Returns the seconds it took. */
static double replay_then_ask(const char *lname, const char *value, const kpc_key *key, const uint8_t cid[16])
{
    ck_assert(tc_redis_set(&rs_redis, lname, value, strlen(value)));
    ck_assert_int_eq(tc_redis_int(&rs_redis, "PEXPIRE %s 3600000", lname), 1);
    kpc_remote *b = open_host("hostB");
    kpc_record rec;
    kpc_remote_lease *lease = NULL;
    ts_log_begin(KPC_LOG_WARN);
    double t0 = rs_now();
    enum kpc_remote_verdict v = kpc_remote_begin(b, key, ts_target(), cid, &rec, &lease, NULL);
    double took = rs_now() - t0;
    char *log = ts_log_end();
    kpc_remote_counters c;
    kpc_remote_counters_get(b, &c);
    ck_assert_msg(v == KPC_REMOTE_BUILD, "verdict %d after %.1f s: %s", (int)v, took, log);
    ck_assert_uint_eq(c.wait_timeouts, 0); /* the protocol let go of it, not the cap */
    ck_assert_uint_eq(c.refused, 1);
    ck_assert_msg(strstr(log, "is stale") != NULL, "%s", log);
    free(log);
    kpc_remote_release(b, lease);
    kpc_remote_close(b);
    return took;
}

/* A lease value captured during a build and written back after it, with a long expiry:
 * the next host builds within about two lease periods (before: it waited the whole
 * KPC_BUILD_WAIT_MAX_MS, 600 s by default, 20 s here). A holder that keeps renewing is
 * waited on all along, however long past two leases. */
START_TEST(replayed_lease_holds_no_one_past_two_leases)
{
    char secret[4200];
    rs_secret_file(secret, sizeof secret, rs_base, "the group's secret");
    setenv("KPC_REMOTE_SECRET_FILE", secret, 1);
    char lease_ms[16];
    snprintf(lease_ms, sizeof lease_ms, "%d", LEASE_MS);
    setenv("KPC_REMOTE_LEASE_MS", lease_ms, 1);
    setenv("KPC_BUILD_WAIT_MAX_MS", "20000", 1);
    kpc_remote *a = open_host("hostA"), *b = open_host("hostB");
    kpc_key key = {{0x7e, 1, 2}};
    uint8_t cid[16];
    memset(cid, 0x5a, 16);
    kpc_record rec;
    kpc_remote_lease *held = NULL, *other = NULL;
    char lname[KPC_REMOTE_NAME_MAX];
    kpc_remote_key_name(a, &key, "lease", lname, sizeof lname);
    ck_assert_int_eq(kpc_remote_begin(a, &key, ts_target(), cid, &rec, &held, NULL), KPC_REMOTE_BUILD);
    size_t n;
    char *claimed = tc_redis_get(&rs_redis, lname, &n); /* the claim's value, before any renewal */
    ck_assert_ptr_nonnull(claimed);
    /* the holder renews as claim.c's keeper does, every third of a lease, for three
     * leases: each renewal re-signs the value, and the other host waits all along */
    double until = rs_now() + 3.0 * LEASE_MS / 1e3;
    while (rs_now() < until) {
        ck_assert_int_eq(kpc_remote_renew(a, held), KPC_OK);
        ck_assert_int_eq(kpc_remote_try_begin(b, &key, ts_target(), cid, &rec, &other), KPC_REMOTE_BUSY);
        rs_sleep_ms(LEASE_MS / 3);
    }
    char *renewed = tc_redis_get(&rs_redis, lname, &n);
    ck_assert_ptr_nonnull(renewed);
    /* the build ends (its compiler could not run: released, no record) */
    kpc_remote_release(a, held);
    ck_assert_int_eq(tc_redis_int(&rs_redis, "EXISTS %s", lname), 0);
    /* the renewed value written back: honoured for at most two leases after its time */
    double took = replay_then_ask(lname, renewed, &key, cid);
    ck_assert_msg(took < 2.0 * LEASE_MS / 1e3 + 3.0, "waited %.1f s on a replayed lease", took);
    /* the claim's value (no time of its own) written back with an hour's expiry: no
     * honest claim lives longer than a lease, so it is not waited on */
    took = replay_then_ask(lname, claimed, &key, cid);
    ck_assert_msg(took < 2.0 * LEASE_MS / 1e3 + 3.0, "waited %.1f s on a replayed claim", took);
    /* what made the renewed value judgeable: Redis's time and the lease, under the MAC */
    ck_assert_msg(strstr(renewed, " at=") && strstr(renewed, " lease=") && strstr(renewed, " mac="), "%s", renewed);
    free(claimed);
    free(renewed);
    kpc_remote_close(a);
    kpc_remote_close(b);
    unsetenv("KPC_REMOTE_SECRET_FILE");
}
END_TEST

/* ---- `kpc remote`'s messages ------------------------------------------------------------ */
static int remote_tool(const char *verb, const char *secret, const char *url, char **out, char **err)
{
    char env_remote[160], env_secret[4400];
    snprintf(env_remote, sizeof env_remote, "KPC_REMOTE=%s", url);
    snprintf(env_secret, sizeof env_secret, "KPC_REMOTE_SECRET_FILE=%s", secret);
    const char *env[] = {env_remote, env_secret, NULL};
    const char *argv[] = {getenv("KPC_TOOL"), "remote", verb, "--json", NULL};
    if (strcmp(verb, "stats-text") == 0) {
        argv[2] = "stats";
        argv[3] = NULL;
    }
    return ts_exec(argv, env, out, err);
}

/* A secret file that is missing or that every user may read: `kpc remote` exits 2 with
 * the reason above its "see the message above" (before: nothing above it for a missing
 * one, below the default log level; a 0644 one was used). */
START_TEST(remote_tool_says_why_the_secret_is_refused)
{
    ck_assert_ptr_nonnull(getenv("KPC_TOOL"));
    char secret[4200], absent[4300];
    rs_secret_file(secret, sizeof secret, rs_base, "the group's secret");
    snprintf(absent, sizeof absent, "%s-absent", secret);
    char *out = NULL, *err = NULL;
    int rc = remote_tool("ls", absent, rs_redis.url, &out, &err);
    ck_assert_msg(rc == 2, "exit %d: %s", rc, err);
    char *above = strstr(err, absent), *see = strstr(err, "see the message above");
    ck_assert_msg(above && see && above < see && strstr(err, "No such file"), "%s", err);
    free(out), free(err);
    ck_assert_int_eq(chmod(secret, 0644), 0);
    rc = remote_tool("ls", secret, rs_redis.url, &out, &err);
    ck_assert_msg(rc == 2, "exit %d: %s", rc, err);
    ck_assert_msg(strstr(err, secret) && strstr(err, "may be read by every user (mode 644)"), "%s", err);
    free(out), free(err);
    /* the same file 0600: listed (empty) */
    ck_assert_int_eq(chmod(secret, 0600), 0);
    rc = remote_tool("ls", secret, rs_redis.url, &out, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    free(out), free(err);
    /* a Redis that does not answer is named as such, not as invalid settings */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", tc_free_port());
    rc = remote_tool("ls", secret, url, &out, &err);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, err);
    ck_assert_msg(strstr(err, "connect") && !strstr(err, "not valid"), "%s", err);
    free(out), free(err);
}
END_TEST

/* A cluster-wide counter that is not a whole number (HSET by hand: -5) is said and shown
 * as 0 (before: 18446744073709551611); `kpc remote stats` on a server without maxmemory
 * advises the policy docs/cluster.md's redis.conf sets, and that is allkeys-lru (before:
 * the tool said allkeys-lru, the docs volatile-lru). */
START_TEST(remote_stats_counters_and_advice)
{
    ck_assert_ptr_nonnull(getenv("KPC_TOOL"));
    char secret[4200];
    rs_secret_file(secret, sizeof secret, rs_base, "the group's secret");
    setenv("KPC_REMOTE_SECRET_FILE", secret, 1);
    kpc_remote *r = open_host("hostA");
    unsetenv("KPC_REMOTE_SECRET_FILE");
    ck_assert_int_eq(tc_redis_int(&rs_redis, "HSET %sstats hits -5", kpc_remote_prefix(r)), 1);
    ck_assert_int_eq(tc_redis_int(&rs_redis, "HSET %sstats builds 7", kpc_remote_prefix(r)), 1);
    kpc_remote_close(r);
    char *out = NULL, *err = NULL;
    int rc = remote_tool("stats", secret, rs_redis.url, &out, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    cJSON *j = cJSON_Parse(out);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "hits")->valuedouble, 0);
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "builds")->valuedouble, 7);
    cJSON_Delete(j);
    ck_assert_msg(strstr(err, "counter hits") && strstr(err, "\"-5\", not a whole number"), "%s", err);
    free(out), free(err);
    rc = remote_tool("stats-text", secret, rs_redis.url, &out, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    ck_assert_msg(strstr(out, "18446744073709551611") == NULL, "%s", out);
    ck_assert_msg(strstr(out, "maxmemory-policy allkeys-lru"), "%s", out);
    free(out), free(err);
    char doc[4200];
    snprintf(doc, sizeof doc, "%s/docs/cluster.md", getenv("KPC_SOURCE_DIR") ? getenv("KPC_SOURCE_DIR") : ".");
    size_t size;
    char *text = ts_read_file(doc, &size);
    ck_assert_msg(text != NULL, "%s cannot be read", doc);
    ck_assert_msg(strstr(text, "\nmaxmemory-policy allkeys-lru") && !strstr(text, "\nmaxmemory-policy volatile"),
                  "%s's redis.conf advises another policy than `kpc remote stats`", doc);
    free(text);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("remote_trust");
    TCase *t = tcase_create("trust");
    tcase_add_checked_fixture(t, rs_setup, rs_teardown);
    tcase_add_test(t, replayed_lease_holds_no_one_past_two_leases);
    tcase_add_test(t, remote_tool_says_why_the_secret_is_refused);
    tcase_add_test(t, remote_stats_counters_and_advice);
    suite_add_tcase(s, t);
    return ts_run_suite(s);
}
