/*
 * test_remote.c - the cluster tier (src/storage/remote.c) against a real redis-server
 * started by the test (127.0.0.1, a free port, no persistence; stopped at the end of
 * each test, also when it fails: tests/cluster_support.c).
 *
 *   unit      URL parsing and redaction; the module's lease, record and release calls;
 *             with secrets: MACs on records and leases, a forged lease, each group's own
 *             keys, expiry refreshed by a hit, rotation, nothing served without a secret,
 *             the connect's fault, a read-only replica named
 *   (stalls, trust across hosts, connections: test_remote_stalls.c)
 *   cluster   simulated hosts (each a mount namespace with its own /dev/shm and cache
 *             dir, several processes each, one Redis): the H x P x K storm (builds == K
 *             cluster-wide, byte-identical objects) and a later fifth host (0 builds); a
 *             compile error shared across hosts; records
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

/* ---- unit ------------------------------------------------------------------------------- */
START_TEST(url_parse)
{
    kpc_remote_url u;
    char shown[1600];
    ck_assert_int_eq(kpc_remote_url_parse("redis://cache.example:7000/3", &u), KPC_OK);
    ck_assert_str_eq(u.host, "cache.example");
    ck_assert_int_eq(u.port, 7000);
    ck_assert_int_eq(u.db, 3);
    ck_assert_int_eq(kpc_remote_url_parse("redis://kpc:s3cr3t@10.0.0.1", &u), KPC_OK);
    ck_assert_str_eq(u.user, "kpc");
    ck_assert_str_eq(u.password, "s3cr3t");
    ck_assert_int_eq(u.port, 6379);
    kpc_remote_url_redacted(&u, shown, sizeof shown);
    ck_assert_ptr_null(strstr(shown, "s3cr3t"));
    ck_assert_str_eq(shown, "redis://kpc:***@10.0.0.1:6379/0");
    ck_assert_int_eq(kpc_remote_url_parse("redis://:pw@[::1]:6380/1", &u), KPC_OK);
    ck_assert_str_eq(u.host, "::1");
    ck_assert_str_eq(u.user, "");
    ck_assert_int_eq(u.port, 6380);
    ck_assert_int_eq(kpc_remote_url_parse("redis+unix:///run/redis/rs_redis.sock", &u), KPC_OK);
    ck_assert_str_eq(u.unix_path, "/run/redis/rs_redis.sock");
    ck_assert_int_eq(kpc_remote_url_parse("redis+unix:///run/r.sock?db=2", &u), KPC_OK);
    ck_assert_int_eq(u.db, 2);
    ts_log_begin(KPC_LOG_ERROR);
    const char *bad[] = {"http://x", "redis://", "redis://h:0", "redis://h:70000", "redis://h/x",
                         "redis://user@h", "redis://u:@h", "redis+unix://rel", "redis://[::1", NULL};
    for (int i = 0; bad[i]; i++)
        ck_assert_msg(kpc_remote_url_parse(bad[i], &u) == KPC_E_INVALID, "%s accepted", bad[i]);
    ck_assert_int_eq(kpc_remote_url_parse("redis://u:hunter2@h:bad", &u), KPC_E_INVALID);
    char *log = ts_log_end();
    ck_assert_ptr_null(strstr(log, "hunter2")); /* never the password in the log */
    free(log);
    /* a malformed KPC_REMOTE: kpc_cache_open refuses it (kpc.h: a malformed environment
     * value is KPC_E_INVALID), logged without the password */
    setenv("KPC_REMOTE", "redis://u:hunter2@h:bad", 1);
    char *dir = ts_tmpdir();
    setenv("KPC_CACHE_DIR", dir, 1);
    ts_log_begin(KPC_LOG_WARN);
    kpc_cache *c = (kpc_cache *)1;
    ck_assert_int_eq(kpc_cache_open(NULL, &c), KPC_E_INVALID);
    ck_assert_ptr_null(c);
    log = ts_log_end();
    ck_assert_ptr_nonnull(strstr(log, "KPC_REMOTE"));
    ck_assert_ptr_nonnull(strstr(log, "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]"));
    ck_assert_ptr_null(strstr(log, "hunter2"));
    free(log);
    unsetenv("KPC_CACHE_DIR");
    ts_cleanup(dir);
    unsetenv("KPC_REMOTE");
}
END_TEST

/* A record for key: the disk record bytes of a fake code object. */
static void make_record(const kpc_key *key, const uint8_t cid[16], void **bytes, size_t *size)
{
    kpc_record rec = {0};
    rec.key = *key;
    rec.kind = KPC_RECORD_CODE;
    snprintf(rec.target, sizeof rec.target, "%s", ts_target());
    memcpy(rec.compiler_id, cid, 16);
    char code[64] = "\x7f" "ELF code object bytes";
    void *names;
    size_t names_size;
    ck_assert_int_eq(kpc_names_encode(NULL, NULL, 0, &names, &names_size), KPC_OK);
    rec.code_size = sizeof code;
    rec.names_size = names_size;
    *size = KPC_RECORD_HEADER + sizeof code + names_size;
    uint8_t *b = malloc(*size);
    kpc_record_header(b, &rec, code, names);
    memcpy(b + KPC_RECORD_HEADER, code, sizeof code);
    memcpy(b + KPC_RECORD_HEADER + sizeof code, names, names_size);
    *bytes = b;
    free(names);
}

START_TEST(module_protocol)
{
    kpc_remote *a = NULL, *b = NULL;
    /* the protocol itself, with records trusted unauthenticated (module_auth: a secret) */
    setenv("KPC_REMOTE_TRUST", "unauthenticated", 1);
    setenv("KPC_HOST_ID", "hostA", 1);
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &a), KPC_OK);
    setenv("KPC_HOST_ID", "hostB", 1);
    setenv("KPC_REMOTE_LEASE_MS", "200", 1);
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &b), KPC_OK);
    unsetenv("KPC_HOST_ID");
    unsetenv("KPC_REMOTE_LEASE_MS");
    ck_assert_str_eq(kpc_remote_host_id(a), "hostA");
    kpc_key key = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
    uint8_t cid[16];
    memset(cid, 0x5a, 16);
    kpc_record rec;
    kpc_remote_lease *lease = NULL;
    /* a miss: the lease is ours, and its value names host, pid, start time and token */
    ck_assert_int_eq(kpc_remote_begin(a, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    ck_assert_ptr_nonnull(lease);
    char lname[KPC_REMOTE_NAME_MAX], co[KPC_REMOTE_NAME_MAX];
    kpc_remote_key_name(a, &key, "lease", lname, sizeof lname);
    kpc_remote_key_name(a, &key, "co", co, sizeof co);
    ck_assert_msg(strncmp(co, "kpc:2:open:{", 12) == 0, "key %s", co);
    size_t n;
    char *v = tc_redis_get(&rs_redis, lname, &n);
    ck_assert_ptr_nonnull(v);
    char want[64];
    snprintf(want, sizeof want, "host=hostA pid=%d start=", (int)getpid());
    ck_assert_msg(strncmp(v, want, strlen(want)) == 0, "lease value %s", v);
    ck_assert_ptr_nonnull(strstr(v, " token="));
    free(v);
    ck_assert_int_gt(tc_redis_int(&rs_redis, "PTTL %s", lname), 0);
    /* released: compare-and-delete takes it away only while it is still ours */
    kpc_remote_release(a, lease);
    ck_assert_int_eq(tc_redis_int(&rs_redis, "EXISTS %s", lname), 0);
    ck_assert_int_eq(kpc_remote_begin(a, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    ck_assert(tc_redis_set(&rs_redis, lname, "someone else", 12));
    kpc_remote_release(a, lease);
    ck_assert_int_eq(tc_redis_int(&rs_redis, "EXISTS %s", lname), 1);
    ck_assert_int_eq(tc_redis_int(&rs_redis, "DEL %s", lname), 1);
    /* publish, then a hit on the other "host" with the same bytes */
    void *bytes;
    size_t size;
    make_record(&key, cid, &bytes, &size);
    ck_assert_int_eq(kpc_remote_begin(a, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    kpc_remote_publish(a, lease, &key, KPC_RECORD_CODE, bytes, size);
    ck_assert_int_eq(tc_redis_int(&rs_redis, "EXISTS %s", lname), 0);
    char *stored = tc_redis_get(&rs_redis, co, &n);
    ck_assert_uint_eq(n, size);
    ck_assert_mem_eq(stored, bytes, size); /* the disk record bytes, exactly */
    free(stored);
    ck_assert_int_eq(kpc_remote_begin(b, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_HIT);
    ck_assert_uint_eq(rec.code_size, 64);
    ck_assert_mem_eq(rec.payload, "\x7f" "ELF", 4);
    kpc_record_free(&rec);
    /* another compiler's identity, or another target: refused */
    uint8_t other[16];
    memset(other, 0x11, 16);
    ts_log_begin(KPC_LOG_ERROR);
    ck_assert_int_eq(kpc_remote_begin(b, &key, ts_target(), other, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    kpc_remote_release(b, lease);
    ck_assert_int_eq(kpc_remote_begin(b, &key, ts_target2(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    kpc_remote_release(b, lease);
    free(ts_log_end());
    kpc_remote_counters c;
    kpc_remote_counters_get(b, &c);
    ck_assert_uint_eq(c.hits, 1);
    ck_assert_uint_eq(c.refused, 2);
    /* a lease held by a dead holder expires and is taken over */
    kpc_key key2 = {{9}};
    ck_assert_int_eq(kpc_remote_begin(b, &key2, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    kpc_remote_lease *lost = lease;
    kpc_remote_key_name(b, &key2, "lease", lname, sizeof lname);
    ck_assert_int_eq(tc_redis_int(&rs_redis, "PEXPIRE %s 100", lname), 1);
    ck_assert(tc_redis_set(&rs_redis, lname, "host=dead pid=1 start=1 token=0", 31));
    ck_assert_int_eq(tc_redis_int(&rs_redis, "PEXPIRE %s 150", lname), 1);
    ts_log_begin(KPC_LOG_ERROR);
    ck_assert_int_eq(kpc_remote_begin(a, &key2, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    kpc_remote_counters_get(a, &c);
    ck_assert_uint_eq(c.takeovers, 1);
    ck_assert_uint_eq(c.waits, 1);
    kpc_remote_release(a, lease);
    kpc_remote_release(b, lost);
    free(ts_log_end());
    /* the cluster-wide counters: every process adds its own when it closes */
    kpc_remote_close(a);
    kpc_remote_close(b);
    kpc_remote *r = NULL;
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &r), KPC_OK);
    ck_assert_int_eq(kpc_remote_cluster_counters(r, &c), KPC_OK);
    ck_assert_uint_eq(c.hits, 1);
    ck_assert_uint_eq(c.takeovers, 1);
    ck_assert_uint_eq(c.refused, 2);
    kpc_remote_close(r);
    free(bytes);
    unsetenv("KPC_REMOTE_TRUST");
}
END_TEST

/* A group with a secret: records and leases authenticated, its keys apart from other
 * groups', records that expire unless read, a secret rotated, a forged lease ignored,
 * no secret and no trust: nothing served; the connect through the fault seam; a replica. */
START_TEST(module_auth)
{
    char s1[4200], s2[4200], both[8500];
    rs_secret_file(s1, sizeof s1, rs_base, "first secret");
    rs_secret_file(s2, sizeof s2, rs_base, "second secret");
    setenv("KPC_REMOTE_SECRET_FILE", s1, 1);
    setenv("KPC_HOST_ID", "hostA", 1);
    kpc_remote *a = NULL, *b = NULL, *open_group = NULL, *other_ns = NULL;
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &a), KPC_OK);
    setenv("KPC_REMOTE_SECRET_FILE", s2, 1);
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &b), KPC_OK);
    setenv("KPC_REMOTE_NAMESPACE", "site2", 1);
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &other_ns), KPC_OK);
    unsetenv("KPC_REMOTE_NAMESPACE");
    unsetenv("KPC_REMOTE_SECRET_FILE");
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &open_group), KPC_OK);
    free(ts_log_end());
    /* every group its own keys */
    ck_assert_str_ne(kpc_remote_prefix(a), kpc_remote_prefix(b));
    ck_assert_str_ne(kpc_remote_prefix(a), kpc_remote_prefix(open_group));
    ck_assert_msg(strncmp(kpc_remote_prefix(other_ns), "site2:2:", 8) == 0, "%s", kpc_remote_prefix(other_ns));
    ck_assert_ptr_nonnull(strstr(kpc_remote_trust(a), "authenticated"));
    ck_assert_ptr_nonnull(strstr(kpc_remote_trust(open_group), "not served"));
    kpc_key key = {{7, 7, 7}};
    uint8_t cid[16];
    memset(cid, 0x5a, 16);
    kpc_record rec;
    kpc_remote_lease *la = NULL, *lb = NULL, *lo = NULL;
    /* two groups build the same key at once: neither waits on the other */
    ck_assert_int_eq(kpc_remote_begin(a, &key, ts_target(), cid, &rec, &la, NULL), KPC_REMOTE_BUILD);
    ck_assert_int_eq(kpc_remote_begin(b, &key, ts_target(), cid, &rec, &lb, NULL), KPC_REMOTE_BUILD);
    /* the lease value carries a MAC */
    char lname[KPC_REMOTE_NAME_MAX], co[KPC_REMOTE_NAME_MAX];
    kpc_remote_key_name(a, &key, "lease", lname, sizeof lname);
    kpc_remote_key_name(a, &key, "co", co, sizeof co);
    size_t n;
    char *v = tc_redis_get(&rs_redis, lname, &n);
    ck_assert_ptr_nonnull(strstr(v, " mac="));
    free(v);
    void *bytes;
    size_t size;
    make_record(&key, cid, &bytes, &size);
    kpc_remote_publish(a, la, &key, KPC_RECORD_CODE, bytes, size);
    kpc_remote_release(b, lb);
    /* stored with a 32-byte tag, and an expiry that a hit refreshes */
    char *stored = tc_redis_get(&rs_redis, co, &n);
    ck_assert_uint_eq(n, size + 32);
    free(stored);
    long long ttl = tc_redis_int(&rs_redis, "PTTL %s", co);
    ck_assert_int_gt(ttl, 29ll * 86400 * 1000);
    ck_assert_int_eq(tc_redis_int(&rs_redis, "PEXPIRE %s 100000", co), 1);
    setenv("KPC_REMOTE_SECRET_FILE", s1, 1);
    kpc_remote *a2 = NULL;
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &a2), KPC_OK);
    ck_assert_int_eq(kpc_remote_begin(a2, &key, ts_target(), cid, &rec, &la, NULL), KPC_REMOTE_HIT);
    kpc_record_free(&rec);
    ck_assert_int_gt(tc_redis_int(&rs_redis, "PTTL %s", co), 29ll * 86400 * 1000);
    kpc_remote_close(a2);
    /* rotation: the second secret with the first as the old one reads the first's record */
    snprintf(both, sizeof both, "%s:%s", s2, s1);
    setenv("KPC_REMOTE_SECRET_FILE", both, 1);
    kpc_remote *rot = NULL;
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &rot), KPC_OK);
    ck_assert_str_eq(kpc_remote_prefix(rot), kpc_remote_prefix(b));
    ck_assert_int_eq(kpc_remote_read(rot, &key, ts_target(), cid, KPC_RECORD_CODE, &rec), KPC_OK);
    kpc_record_free(&rec);
    ck_assert_int_eq(kpc_remote_begin(rot, &key, ts_target(), cid, &rec, &la, NULL), KPC_REMOTE_HIT);
    kpc_record_free(&rec);
    kpc_remote_close(rot);
    unsetenv("KPC_REMOTE_SECRET_FILE");
    /* a forged lease (no MAC: written without the secret) is not waited on: taken at once */
    kpc_key key2 = {{8, 8, 8}};
    kpc_remote_key_name(a, &key2, "lease", lname, sizeof lname);
    ck_assert(tc_redis_set(&rs_redis, lname, "host=evil pid=1 start=1 token=0", 31)); /* no expiry */
    ts_log_begin(KPC_LOG_ERROR);
    ck_assert_int_eq(kpc_remote_begin(a, &key2, ts_target(), cid, &rec, &la, NULL), KPC_REMOTE_BUILD);
    char *log = ts_log_end();
    ck_assert_ptr_nonnull(strstr(log, "does not authenticate"));
    free(log);
    kpc_remote_release(a, la);
    ck_assert_int_eq(tc_redis_int(&rs_redis, "EXISTS %s", lname), 0);
    /* no secret, no trust: nothing is served (the record above is in another group anyway) */
    ck_assert_int_eq(kpc_remote_begin(open_group, &key, ts_target(), cid, &rec, &lo, NULL), KPC_REMOTE_OFF);
    ck_assert_int_eq(kpc_remote_read(open_group, &key, ts_target(), cid, KPC_RECORD_CODE, &rec), KPC_E_UNAVAILABLE);
    kpc_remote_counters c;
    kpc_remote_counters_get(open_group, &c);
    ck_assert_uint_eq(c.unserved, 1);
    /* the connect goes through the fault seam */
    kpc__sys_fault_set(KPC_SYS_CONNECT, ECONNREFUSED, 0, 1);
    ts_log_begin(KPC_LOG_ERROR);
    ck_assert_int_eq(kpc_remote_begin(other_ns, &key, ts_target(), cid, &rec, &lo, NULL), KPC_REMOTE_OFF);
    free(ts_log_end());
    kpc__sys_fault_set(KPC_SYS_CONNECT, 0, 0, 0);
    kpc_remote_counters_get(other_ns, &c);
    ck_assert_uint_eq(c.errors, 1);
    /* a read-only replica is named as such */
    tc_redis_int(&rs_redis, "REPLICAOF 127.0.0.1 %d", tc_free_port());
    kpc_remote *ro = NULL;
    setenv("KPC_REMOTE_SECRET_FILE", s1, 1);
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &ro), KPC_OK);
    unsetenv("KPC_REMOTE_SECRET_FILE");
    kpc_key key3 = {{9, 9, 9}};
    ts_log_begin(KPC_LOG_WARN); /* the process said its first failure at error level above */
    ck_assert_int_eq(kpc_remote_begin(ro, &key3, ts_target(), cid, &rec, &la, NULL), KPC_REMOTE_OFF);
    log = ts_log_end();
    tc_redis_int(&rs_redis, "REPLICAOF NO ONE");
    ck_assert_msg(strstr(log, "read-only replica: point KPC_REMOTE at the primary") != NULL, "log: %s", log);
    free(log);
    kpc_remote_close(ro);
    kpc_remote_close(a);
    kpc_remote_close(b);
    kpc_remote_close(other_ns);
    kpc_remote_close(open_group);
    unsetenv("KPC_HOST_ID");
    free(bytes);
}
END_TEST

/* ---- cluster ----------------------------------------------------------------------------- */
START_TEST(storm_fake)
{
    NEED_HOSTS(rs_have_hosts);
    ts_fake_install();
    enum { H = 4, P = 8, K = 8 };
    storm *s = new_storm(P, K, true);
    s->slow_ms = 30;
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
    TCase *unit = tcase_create("unit");
    tcase_add_test(unit, url_parse);
    tcase_add_checked_fixture(unit, rs_setup, rs_teardown);
    tcase_add_test(unit, module_protocol);
    tcase_add_test(unit, module_auth);
    suite_add_tcase(s, unit);
    TCase *cl = tcase_create("cluster");
    tcase_add_checked_fixture(cl, rs_setup, rs_teardown);
    tcase_set_timeout(cl, 120);
    tcase_add_test(cl, storm_fake);
    tcase_add_test(cl, failure_shared);
        tcase_add_test(cl, records_refused);
    tcase_add_test(cl, shared_dir);
    suite_add_tcase(s, cl);
    TCase *real = tcase_create("real");
    tcase_add_checked_fixture(real, rs_setup, rs_teardown);
    tcase_set_timeout(real, 240);
    tcase_add_test(real, storm_real);
    suite_add_tcase(s, real);
    return ts_run_suite(s);
}
