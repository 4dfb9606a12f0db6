/*
 * test_remote.c - the cluster tier's module (src/storage/remote.c) against a real
 * redis-server started by the test (127.0.0.1, a free port, no persistence; stopped at
 * the end of each test, also when it fails: tests/cluster_support.c): URL parsing and
 * redaction; the module's lease, record and release calls; with secrets: MACs on records
 * and leases, a forged lease, each group's own keys, expiry refreshed by a hit, rotation,
 * nothing served without a secret, the connect's fault, a read-only replica named, a
 * Redis Cluster redirect (MOVED, ASK) named.
 * Simulated hosts: test_remote_cluster.c; stalls, trust across hosts, connections:
 * test_remote_stalls.c.
 */
#define _GNU_SOURCE
#include "remote_storm.h"

#include "storage/remote_private.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
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
    /* seeds: any of them serves (a server, or a node of a Redis Cluster) */
    ck_assert_int_eq(kpc_remote_url_parse("redis://u:pw@h1:7000,h2,[::1]:7002/0", &u), KPC_OK);
    ck_assert_int_eq(u.seeds, 3);
    ck_assert_str_eq(u.host, "h1");
    ck_assert_int_eq(u.port, 7000);
    ck_assert_str_eq(u.seed[1].host, "h2");
    ck_assert_int_eq(u.seed[1].port, 6379);
    ck_assert_str_eq(u.seed[2].host, "::1");
    ck_assert_int_eq(u.seed[2].port, 7002);
    kpc_remote_url_redacted(&u, shown, sizeof shown);
    ck_assert_str_eq(shown, "redis://u:***@h1:7000,h2:6379,[::1]:7002/0");
    ts_log_begin(KPC_LOG_ERROR);
    const char *bad[] = {"http://x", "redis://", "redis://h:0", "redis://h:70000", "redis://h/x",
                         "redis://user@h", "redis://u:@h", "redis+unix://rel", "redis://[::1", "redis://h1,",
                         "redis://h1,,h2", "redis://h1,h2:x", "redis://,h1",
                         "redis://a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a", NULL};
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
/* A code record of key whose code object is code_size bytes starting with text. */
static void make_record_of(const kpc_key *key, const uint8_t cid[16], const char *text, size_t code_size,
                           void **bytes, size_t *size)
{
    kpc_record rec = {0};
    rec.key = *key;
    rec.kind = KPC_RECORD_CODE;
    snprintf(rec.target, sizeof rec.target, "%s", ts_target());
    memcpy(rec.compiler_id, cid, 16);
    uint8_t *code = calloc(1, code_size);
    ck_assert_ptr_nonnull(code);
    memcpy(code, text, strlen(text));
    for (size_t i = 64; i < code_size; i++)
        code[i] = (uint8_t)(i * 7 + i / 4096);
    void *names;
    size_t names_size;
    ck_assert_int_eq(kpc_names_encode(NULL, NULL, 0, &names, &names_size), KPC_OK);
    rec.code_size = code_size;
    rec.names_size = names_size;
    *size = KPC_RECORD_HEADER + code_size + names_size;
    uint8_t *b = malloc(*size);
    kpc_record_header(b, &rec, code, names);
    memcpy(b + KPC_RECORD_HEADER, code, code_size);
    memcpy(b + KPC_RECORD_HEADER + code_size, names, names_size);
    *bytes = b;
    free(names);
    free(code);
}

static void make_record(const kpc_key *key, const uint8_t cid[16], void **bytes, size_t *size)
{
    make_record_of(key, cid, "\x7f" "ELF code object bytes", 64, bytes, size);
}

/* Deletes the lease named by arg after 150 ms: its holder released it while others waited. */
static void *release_later(void *arg)
{
    struct timespec t = {0, 150 * 1000000L};
    nanosleep(&t, NULL);
    tc_redis_int(&rs_redis, "DEL %s", (const char *)arg);
    return NULL;
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
    ck_assert_msg(strncmp(co, "kpc:3:open:{", 12) == 0, "key %s", co);
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
    ck_assert_int_eq(tc_redis_int(&rs_redis, "PEXPIRE %s 300", lname), 1); /* waited on, then expired */
    ts_log_begin(KPC_LOG_ERROR);
    ck_assert_int_eq(kpc_remote_begin(a, &key2, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    kpc_remote_counters_get(a, &c);
    ck_assert_uint_eq(c.takeovers, 1);
    ck_assert_uint_eq(c.waits, 1);
    kpc_remote_release(a, lease);
    kpc_remote_release(b, lost);
    free(ts_log_end());
    /* a lease released while waited on, 2.3 s before its expiry: a wait, no takeover */
    kpc_key key3 = {{10}};
    kpc_remote_key_name(a, &key3, "lease", lname, sizeof lname);
    ck_assert(tc_redis_set(&rs_redis, lname, "host=other pid=1 start=1 token=1", 32));
    ck_assert_int_eq(tc_redis_int(&rs_redis, "PEXPIRE %s 2500", lname), 1);
    pthread_t releaser;
    ck_assert_int_eq(pthread_create(&releaser, NULL, release_later, lname), 0);
    ck_assert_int_eq(kpc_remote_begin(a, &key3, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    pthread_join(releaser, NULL);
    kpc_remote_counters_get(a, &c);
    ck_assert_uint_eq(c.waits, 2);
    ck_assert_uint_eq(c.takeovers, 1);
    kpc_remote_release(a, lease);
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
    ck_assert_msg(strncmp(kpc_remote_prefix(other_ns), "site2:3:", 8) == 0, "%s", kpc_remote_prefix(other_ns));
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
    /* stored with a 16-byte nonce and a 16-byte tag, and an expiry that a hit refreshes */
    char *stored = tc_redis_get(&rs_redis, co, &n);
    ck_assert_uint_eq(n, size + 32);
    /* the nonce is covered: one bit of it changed and the record is refused */
    stored[size + 3] ^= 0x01;
    ck_assert(tc_redis_set(&rs_redis, co, stored, n));
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc_remote_read(a, &key, ts_target(), cid, KPC_RECORD_CODE, &rec), KPC_E_CORRUPT);
    char *refused = ts_log_end();
    ck_assert_ptr_nonnull(strstr(refused, "authentication tag does not match"));
    free(refused);
    stored[size + 3] ^= 0x01;
    /* a forgery that every check of the record accepts (its own checksum), with the
     * genuine record's nonce and tag: refused by the tag alone */
    void *forged;
    size_t forged_size;
    make_record_of(&key, cid, "\x7f" "ELF forged object bytes", 64, &forged, &forged_size);
    ck_assert_uint_eq(forged_size, size);
    char *fv = malloc(n);
    memcpy(fv, forged, size);
    memcpy(fv + size, stored + size, n - size);
    ck_assert(tc_redis_set(&rs_redis, co, fv, n));
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc_remote_read(a, &key, ts_target(), cid, KPC_RECORD_CODE, &rec), KPC_E_CORRUPT);
    refused = ts_log_end();
    ck_assert_ptr_nonnull(strstr(refused, "authentication tag does not match"));
    free(refused);
    free(fv);
    free(forged);
    ck_assert(tc_redis_set(&rs_redis, co, stored, n));
    ck_assert_int_eq(tc_redis_int(&rs_redis, "PEXPIRE %s %lld", co, 30ll * 86400 * 1000), 1);
    ck_assert_int_eq(kpc_remote_read(a, &key, ts_target(), cid, KPC_RECORD_CODE, &rec), KPC_OK);
    kpc_record_free(&rec);
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

/* Values are read by hand (remote_conn.c): a record larger than any socket buffer arrives
 * whole, an empty one is refused as a record, and a reply that is not a string (a key of
 * another type) goes through hiredis's reader and is said plainly. */
START_TEST(module_values)
{
    setenv("KPC_REMOTE_TRUST", "unauthenticated", 1);
    kpc_remote *a = NULL, *b = NULL;
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &a), KPC_OK);
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &b), KPC_OK);
    kpc_key key = {{3, 1, 4, 1, 5}};
    uint8_t cid[16];
    memset(cid, 0x5a, 16);
    void *bytes;
    size_t size;
    make_record_of(&key, cid, "\x7f" "ELF large object", 3u << 20, &bytes, &size);
    kpc_record rec;
    kpc_remote_lease *lease = NULL;
    ck_assert_int_eq(kpc_remote_begin(a, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    kpc_remote_publish(a, lease, &key, KPC_RECORD_CODE, bytes, size);
    ck_assert_int_eq(kpc_remote_begin(b, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_HIT);
    ck_assert_uint_eq(rec.code_size, 3u << 20);
    ck_assert_mem_eq(rec.payload, (uint8_t *)bytes + KPC_RECORD_HEADER, size - KPC_RECORD_HEADER);
    kpc_record_free(&rec);
    ck_assert_int_eq(kpc_remote_read(b, &key, ts_target(), cid, KPC_RECORD_CODE, &rec), KPC_OK);
    ck_assert_uint_eq(rec.code_size, 3u << 20);
    kpc_record_free(&rec);
    /* an empty value: a record refused, not a broken connection */
    char co[KPC_REMOTE_NAME_MAX];
    kpc_remote_key_name(a, &key, "co", co, sizeof co);
    ck_assert(tc_redis_set(&rs_redis, co, "", 0));
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc_remote_read(b, &key, ts_target(), cid, KPC_RECORD_CODE, &rec), KPC_E_CORRUPT);
    free(ts_log_end());
    kpc_remote_counters c;
    kpc_remote_counters_get(b, &c);
    ck_assert_uint_eq(c.errors, 0);
    /* another type under the record's key: Redis's error, said */
    ck_assert_int_eq(tc_redis_int(&rs_redis, "DEL %s", co), 1);
    ck_assert_int_eq(tc_redis_int(&rs_redis, "RPUSH %s x", co), 1);
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc_remote_read(b, &key, ts_target(), cid, KPC_RECORD_CODE, &rec), KPC_E_UNAVAILABLE);
    char *log = ts_log_end();
    ck_assert_msg(strstr(log, "WRONGTYPE") != NULL, "log: %s", log);
    free(log);
    kpc_remote_counters_get(b, &c);
    ck_assert_uint_eq(c.errors, 1);
    kpc_remote_close(a);
    kpc_remote_close(b);
    free(bytes);
    unsetenv("KPC_REMOTE_TRUST");
}
END_TEST

/* A Redis Cluster node answers a key it does not serve with MOVED (or ASK while a slot
 * migrates): kpc follows it (test_redis_cluster.c, on a real cluster); a redirect to a
 * node that cannot be reached, from a node that cannot give the slot map (it answers
 * every command, CLUSTER SLOTS too, with the redirect), is said, naming that node, and
 * the tier goes host-local instead of failing obscurely or looping. */
static int redirect_listener;
static const char *redirect_reply;

static void *redirect_serve(void *arg)
{
    (void)arg;
    for (int fd; (fd = accept(redirect_listener, NULL, NULL)) >= 0;) {
        char buf[4096];
        /* kpc sends one command and waits for its reply: one reply for each read */
        while (read(fd, buf, sizeof buf) > 0)
            if (write(fd, redirect_reply, strlen(redirect_reply)) < 0)
                break;
        close(fd);
    }
    return NULL;
}

START_TEST(cluster_redirect_named)
{
    static const char *const replies[] = {"-MOVED 3999 127.0.0.1:7001\r\n", "-ASK 3999 127.0.0.1:7001\r\n"};
    redirect_reply = replies[_i];
    redirect_listener = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(redirect_listener, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    ck_assert_int_eq(bind(redirect_listener, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(redirect_listener, 8), 0);
    ck_assert_int_eq(getsockname(redirect_listener, (struct sockaddr *)&a, &alen), 0);
    pthread_t server;
    ck_assert_int_eq(pthread_create(&server, NULL, redirect_serve, NULL), 0);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", ntohs(a.sin_port));
    setenv("KPC_REMOTE_TRUST", "unauthenticated", 1);
    kpc_remote *r = NULL;
    ck_assert_int_eq(kpc_remote_open(url, &r), KPC_OK);
    unsetenv("KPC_REMOTE_TRUST");
    kpc_key key = {{4, 2}};
    kpc_record rec;
    kpc_remote_lease *lease = NULL;
    uint8_t cid[16] = {1};
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc_remote_begin(r, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_OFF);
    char *log = ts_log_end();
    ck_assert_ptr_null(lease);
    ck_assert_msg(strstr(log, "127.0.0.1:7001") != NULL, "log: %s", log);
    ck_assert_msg(strstr(log, "building host-local") != NULL, "log: %s", log);
    free(log);
    kpc_remote_close(r);
    shutdown(redirect_listener, SHUT_RDWR); /* accept returns: the server thread ends */
    pthread_join(server, NULL);
    close(redirect_listener);
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
    tcase_add_test(unit, module_values);
    tcase_add_loop_test(unit, cluster_redirect_named, 0, 2);
    suite_add_tcase(s, unit);
    return ts_run_suite(s);
}
