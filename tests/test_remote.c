/*
 * test_remote.c - the cluster tier (src/storage/remote.c) against a real redis-server
 * started by the test (127.0.0.1, a free port, no persistence; stopped at the end of
 * each test, also when it fails: tests/cluster_support.c).
 *
 *   unit      URL parsing and redaction; the module's lease, record and release calls
 *   cluster   simulated hosts (each a mount namespace with its own /dev/shm and cache
 *             dir, several processes each, one Redis): the H x P x K storm (builds == K
 *             cluster-wide, byte-identical objects) and a later fifth host (0 builds); a
 *             compile error shared across hosts; kill -9 of the lease holder (takeover);
 *             redis-server killed mid-storm; a listener that never answers; records
 *             damaged in Redis, written without the secret, or stored under another key;
 *             one cache dir shared by the hosts without Redis
 *   real      the storm and the takeover through real hipRTC
 *
 * Children report into an anonymous shared mapping; the parent compares. Simulated hosts
 * need root (unshare); elsewhere those tests say so and pass without running.
 */
#define _GNU_SOURCE
#include "cluster_support.h"
#include "support.h"

#include "storage/remote.h"

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

#define MAXR 40 /* ranks */
#define MAXK 8  /* sources */

typedef struct rank_out {
    int done;
    int status[MAXK];
    uint64_t digest[MAXK];
    uint64_t size[MAXK];
    kpc_stats st;
    char log[256];
} rank_out;

typedef struct storm {
    int procs, k;
    int slow_ms;       /* fake compiles sleep this long */
    bool real;         /* real hipRTC sources */
    bool slow;         /* real: ts_slow_source(12), ~1 s or more to compile */
    bool failing;      /* sources that fail to compile */
    char remote[128];  /* "" : no remote tier */
    char secret[256];  /* KPC_REMOTE_SECRET_FILE for these ranks ("" none) */
    int salt;          /* makes this storm's sources (keys) its own */
    bool sick;         /* the Redis is killed or silent: keep the default (short) timeouts */
    rank_out out[MAXR];
} storm;

static tc_redis redis;
static char *base;
static bool have_hosts;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void setup_redis(void)
{
    base = ts_tmpdir();
    have_hosts = tc_hosts_possible();
    ck_assert_msg(tc_redis_start(&redis), "redis-server could not be started");
}

static void teardown_redis(void)
{
    tc_redis_stop(&redis);
    ts_cleanup(base);
}

/* Source i of a storm: real kernels, or fake ones that sleep. */
static char *source(const storm *s, int i)
{
    if (s->real && s->slow)
        return ts_slow_source(12);
    char *buf = malloc(640);
    if (s->real)
        snprintf(buf, 640,
                 "extern \"C\" __global__ void kpc_cluster_k%d_%d(float *a, int n)\n"
                 "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (i < n) a[i] = a[i] * %d.0f + %d.0f;\n}\n%s",
                 i, s->salt, i + 2, s->salt, s->failing ? "#error failing on purpose\n" : "");
    else
        snprintf(buf, 640, "// cluster source %d salt %d\n// sleep_ms=%d\n%s", i, s->salt, s->slow_ms,
                 s->failing ? "#error\n" : "");
    return buf;
}

static int storm_rank(int host, int proc, void *arg)
{
    storm *s = arg;
    rank_out *o = &s->out[host * s->procs + proc];
    if (s->secret[0])
        setenv("KPC_REMOTE_SECRET_FILE", s->secret, 1);
    /* A healthy Redis on a loaded 2-core machine under ASan can take longer than the
     * default 300 ms to answer: that is a sick Redis to the tier (it backs off and builds
     * host-locally, correctly), but these storms count builds exactly */
    if (!s->sick)
        setenv("KPC_REMOTE_TIMEOUT_MS", "5000", 1);
    kpc_config cfg = {.struct_size = sizeof cfg, .remote = s->remote};
    kpc_cache *c = NULL;
    kpc_context *ctx = NULL;
    if (kpc_cache_open(&cfg, &c) != KPC_OK || kpc_context_create_for_target(c, ts_target(), &ctx) != KPC_OK)
        return 2;
    int bad = 0;
    for (int i = 0; i < s->k; i++) {
        int j = (i + proc + host) % s->k; /* ranks ask in different orders */
        char *code = source(s, j);
        kpc_source src = {.code = code, .name = "cluster.hip"};
        kpc_program *p = NULL;
        o->status[j] = kpc_program_get(ctx, &src, &p);
        if (o->status[j] == KPC_OK) {
            size_t size;
            const void *bytes = kpc_program_code(p, &size);
            o->digest[j] = XXH3_64bits(bytes, size);
            o->size[j] = size;
            bad += !ts_is_code_object(bytes, size);
        } else {
            snprintf(o->log, sizeof o->log, "%s", kpc_last_log());
            bad += !s->failing;
        }
        kpc_program_release(p);
        free(code);
    }
    kpc_stats_get(c, &o->st);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    o->done = 1;
    return bad ? 1 : 0;
}

static storm *new_storm(int procs, int k, bool remote)
{
    storm *s = tc_shared(sizeof *s);
    ck_assert_ptr_nonnull(s);
    s->procs = procs;
    s->k = k;
    if (remote)
        snprintf(s->remote, sizeof s->remote, "%s", redis.url);
    static int salt;
    s->salt = (int)getpid() * 100 + ++salt;
    return s;
}

/* Sums over ranks [first, first + n). */
static kpc_stats sum_stats(const storm *s, int first, int n)
{
    kpc_stats t = {0};
    for (int r = first; r < first + n; r++) {
        const kpc_stats *x = &s->out[r].st;
        t.builds += x->builds;
        t.build_failures += x->build_failures;
        t.disk_hits += x->disk_hits;
        t.remote_hits += x->remote_hits;
        t.remote_misses += x->remote_misses;
        t.remote_builds += x->remote_builds;
        t.remote_waits += x->remote_waits;
        t.remote_takeovers += x->remote_takeovers;
        t.remote_errors += x->remote_errors;
        t.remote_refused += x->remote_refused;
    }
    return t;
}

/* Every rank in [first, first + n) that finished got KPC_OK and the same bytes as rank first. */
static void check_identical(const storm *s, int first, int n)
{
    for (int r = first; r < first + n; r++) {
        ck_assert_msg(s->out[r].done, "rank %d did not finish", r);
        for (int i = 0; i < s->k; i++) {
            ck_assert_msg(s->out[r].status[i] == KPC_OK, "rank %d source %d: %s", r, i,
                          kpc_status_str(s->out[r].status[i]));
            ck_assert_msg(s->out[r].digest[i] == s->out[first].digest[i], "rank %d source %d: other bytes", r, i);
        }
    }
}

#define NEED_HOSTS()                                                                           \
    do {                                                                                       \
        if (!have_hosts) {                                                                     \
            ts_skip("no simulated hosts: %s", tc_hosts_why_not());                        \
            return;                                                                            \
        }                                                                                      \
    } while (0)

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
    ck_assert_int_eq(kpc_remote_url_parse("redis+unix:///run/redis/redis.sock", &u), KPC_OK);
    ck_assert_str_eq(u.unix_path, "/run/redis/redis.sock");
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
    /* a malformed KPC_REMOTE: logged (without the password), the cache opens without
     * the tier, as with any tier that cannot be opened */
    setenv("KPC_REMOTE", "redis://u:hunter2@h:bad", 1);
    char *dir = ts_tmpdir();
    ts_log_begin(KPC_LOG_WARN);
    kpc_cache *c = ts_open(dir, 0, 0);
    log = ts_log_end();
    ck_assert_ptr_nonnull(strstr(log, "KPC_REMOTE"));
    ck_assert_ptr_null(strstr(log, "hunter2"));
    free(log);
    ck_assert_ptr_null(kpc_tier_coordinator(&c->tiers));
    kpc_cache_close(c);
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
    setenv("KPC_HOST_ID", "hostA", 1);
    ck_assert_int_eq(kpc_remote_open(redis.url, &a), KPC_OK);
    setenv("KPC_HOST_ID", "hostB", 1);
    setenv("KPC_REMOTE_LEASE_MS", "200", 1);
    ck_assert_int_eq(kpc_remote_open(redis.url, &b), KPC_OK);
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
    char lname[96], co[96];
    kpc_remote_key_name(&key, "lease", lname, sizeof lname);
    kpc_remote_key_name(&key, "co", co, sizeof co);
    size_t n;
    char *v = tc_redis_get(&redis, lname, &n);
    ck_assert_ptr_nonnull(v);
    char want[64];
    snprintf(want, sizeof want, "host=hostA pid=%d start=", (int)getpid());
    ck_assert_msg(strncmp(v, want, strlen(want)) == 0, "lease value %s", v);
    ck_assert_ptr_nonnull(strstr(v, " token="));
    free(v);
    ck_assert_int_gt(tc_redis_int(&redis, "PTTL %s", lname), 0);
    /* released: compare-and-delete takes it away only while it is still ours */
    kpc_remote_release(a, lease);
    ck_assert_int_eq(tc_redis_int(&redis, "EXISTS %s", lname), 0);
    ck_assert_int_eq(kpc_remote_begin(a, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    ck_assert(tc_redis_set(&redis, lname, "someone else", 12));
    kpc_remote_release(a, lease);
    ck_assert_int_eq(tc_redis_int(&redis, "EXISTS %s", lname), 1);
    ck_assert_int_eq(tc_redis_int(&redis, "DEL %s", lname), 1);
    /* publish, then a hit on the other "host" with the same bytes */
    void *bytes;
    size_t size;
    make_record(&key, cid, &bytes, &size);
    ck_assert_int_eq(kpc_remote_begin(a, &key, ts_target(), cid, &rec, &lease, NULL), KPC_REMOTE_BUILD);
    kpc_remote_publish(a, lease, &key, KPC_RECORD_CODE, bytes, size);
    ck_assert_int_eq(tc_redis_int(&redis, "EXISTS %s", lname), 0);
    char *stored = tc_redis_get(&redis, co, &n);
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
    kpc_remote_key_name(&key2, "lease", lname, sizeof lname);
    ck_assert_int_eq(tc_redis_int(&redis, "PEXPIRE %s 100", lname), 1);
    ck_assert(tc_redis_set(&redis, lname, "host=dead pid=1 start=1 token=0", 31));
    ck_assert_int_eq(tc_redis_int(&redis, "PEXPIRE %s 150", lname), 1);
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
    ck_assert_int_eq(kpc_remote_open(redis.url, &r), KPC_OK);
    ck_assert_int_eq(kpc_remote_cluster_counters(r, &c), KPC_OK);
    ck_assert_uint_eq(c.hits, 1);
    ck_assert_uint_eq(c.takeovers, 1);
    ck_assert_uint_eq(c.refused, 2);
    kpc_remote_close(r);
    free(bytes);
}
END_TEST

/* ---- cluster ----------------------------------------------------------------------------- */
START_TEST(storm_fake)
{
    NEED_HOSTS();
    ts_fake_install();
    enum { H = 4, P = 8, K = 8 };
    storm *s = new_storm(P, K, true);
    s->slow_ms = 30;
    ck_assert_int_eq(tc_hosts_run(0, H, P, base, false, storm_rank, s), 0);
    kpc_stats t = sum_stats(s, 0, H * P);
    ck_assert_uint_eq(ts_fake_compiles(), K); /* one compile per key in the cluster */
    ck_assert_uint_eq(t.builds, K);
    ck_assert_uint_eq(t.remote_builds, K);
    ck_assert_uint_eq(t.remote_errors, 0);
    ck_assert_uint_eq(t.remote_refused, 0);
    /* Redis saw about one request per key per host: H claimants per key */
    ck_assert_uint_eq(t.remote_misses, K);
    ck_assert_uint_eq(t.remote_hits + t.remote_misses, (uint64_t)H * K);
    check_identical(s, 0, H * P);
    /* a fifth host joins later: 0 builds, everything from Redis and then its own disk */
    ck_assert_int_eq(tc_hosts_run(H, 1, P, base, false, storm_rank, s), 0);
    kpc_stats late = sum_stats(s, H * P, P);
    ck_assert_uint_eq(late.builds, 0);
    ck_assert_uint_eq(late.remote_hits, K);
    ck_assert_uint_eq(ts_fake_compiles(), K);
    for (int r = H * P; r < H * P + P; r++)
        for (int i = 0; i < K; i++)
            ck_assert(s->out[r].digest[i] == s->out[0].digest[i]);
    /* `kpc stats --json` prints the cluster-wide counters the processes added in Redis */
    char env_remote[160];
    snprintf(env_remote, sizeof env_remote, "KPC_REMOTE=%s", redis.url);
    const char *env[] = {env_remote, NULL};
    const char *argv[] = {getenv("KPC_TOOL"), "stats", "--json", "--cache-dir", base, NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(ts_exec(argv, env, &out, &err), 0);
    cJSON *j = cJSON_Parse(out);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "remote")->valuestring, "ok");
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "remote_builds")->valuedouble, K);
    ck_assert_int_eq((int)cJSON_GetObjectItem(j, "remote_hits")->valuedouble, (H - 1) * K + K);
    cJSON_Delete(j);
    free(out);
    free(err);
    /* back-filled: the fifth host's disk holds the K records */
    char path[4300];
    snprintf(path, sizeof path, "%s/host%d", base, H);
    kpc_cache *c = ts_open(path, KPC_NO_SHM, 0);
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.disk_files, K);
    kpc_cache_close(c);
}
END_TEST

START_TEST(failure_shared)
{
    NEED_HOSTS();
    ts_fake_install();
    storm *s = new_storm(2, 1, true);
    s->failing = true;
    ck_assert_int_eq(tc_hosts_run(0, 1, 2, base, false, storm_rank, s), 0);
    ck_assert_uint_eq(ts_fake_compiles(), 1);
    ck_assert_int_eq(tc_hosts_run(1, 3, 2, base, false, storm_rank, s), 0);
    ck_assert_uint_eq(ts_fake_compiles(), 1); /* the other hosts took the shared failure */
    for (int r = 0; r < 8; r++) {
        ck_assert_int_eq(s->out[r].status[0], KPC_E_COMPILE);
        ck_assert_msg(strstr(s->out[r].log, "#error") != NULL, "rank %d log: %s", r, s->out[r].log);
    }
}
END_TEST

/* The pid in the lease value of the one lease in Redis; 0 while there is none. */
static pid_t lease_holder(void)
{
    redisContext *c = redisConnect("127.0.0.1", redis.port);
    pid_t pid = 0;
    redisReply *keys = c ? redisCommand(c, "KEYS kpc:1:*:lease") : NULL;
    if (keys && keys->type == REDIS_REPLY_ARRAY && keys->elements == 1) {
        redisReply *v = redisCommand(c, "GET %s", keys->element[0]->str);
        const char *p = v && v->type == REDIS_REPLY_STRING ? strstr(v->str, "pid=") : NULL;
        if (p)
            pid = (pid_t)atoi(p + 4);
        if (v)
            freeReplyObject(v);
    }
    if (keys)
        freeReplyObject(keys);
    if (c)
        redisFree(c);
    return pid;
}

/* Clients blocked on a done list now (CLIENT LIST: cmd=blpop). */
static int blocked_waiters(void)
{
    redisContext *c = redisConnect("127.0.0.1", redis.port);
    redisReply *rep = c ? redisCommand(c, "CLIENT LIST") : NULL;
    int n = 0;
    if (rep && rep->type == REDIS_REPLY_STRING)
        for (const char *p = rep->str; (p = strstr(p, "cmd=blpop")) != NULL; p++)
            n++;
    if (rep)
        freeReplyObject(rep);
    if (c)
        redisFree(c);
    return n;
}

/* Wait until a host's claimant blocks on the holder's lease (so that the kill is a
 * takeover, not a late start). */
static void await_waiter(void)
{
    for (int i = 0; i < 6000 && blocked_waiters() == 0; i++)
        sleep_ms(5);
    ck_assert_int_gt(blocked_waiters(), 0);
}

/* kill -9 the lease holder mid-compile: another host takes over once the lease expires
 * (others: hosts of 2 ranks that wait on it meanwhile). */
static void takeover(storm *s, int lease_ms, int others)
{
    char ms[16];
    snprintf(ms, sizeof ms, "%d", lease_ms);
    setenv("KPC_REMOTE_LEASE_MS", ms, 1);
    pid_t victim_host = tc_hosts_start(0, 1, 1, base, false, storm_rank, s);
    pid_t holder = 0;
    for (int i = 0; i < 6000 && (holder = lease_holder()) == 0; i++)
        sleep_ms(5);
    ck_assert_int_gt(holder, 0);
    /* the other hosts start while it compiles, and wait on its lease */
    pid_t rest = tc_hosts_start(1, others, 2, base, false, storm_rank, s);
    await_waiter();
    double t0 = now_s();
    ck_assert_int_eq(kill(holder, SIGKILL), 0);
    pid_t next = 0; /* the new holder (bounded: a fast build may come and go unseen) */
    for (int i = 0; i < 5000 && ((next = lease_holder()) == holder || next == 0); i++)
        sleep_ms(2);
    double t1 = now_s();
    ck_assert_int_eq(tc_hosts_wait(victim_host), 1); /* its one rank died */
    ck_assert_int_eq(tc_hosts_wait(rest), 0);
    double t2 = now_s();
    unsetenv("KPC_REMOTE_LEASE_MS");
    kpc_stats t = sum_stats(s, 2, others * 2);
    ck_assert_uint_ge(t.remote_takeovers, 1);
    ck_assert_uint_eq(t.builds, 1); /* one of the waiting hosts, once */
    check_identical(s, 2, others * 2);
    fprintf(stderr, "takeover%s: lease %d ms: the build taken over %.0f ms after the holder was "
            "killed; every host had the object after %.0f ms\n", s->real ? " (hipRTC)" : "", lease_ms,
            (t1 - t0) * 1e3, (t2 - t0) * 1e3);
}

START_TEST(takeover_fake)
{
    NEED_HOSTS();
    ts_fake_install();
    storm *s = new_storm(2, 1, true);
    s->slow_ms = 1500;
    takeover(s, 400, 3);
    ck_assert_uint_eq(ts_fake_compiles(), 2); /* the dead holder's and the takeover's */
}
END_TEST

START_TEST(redis_killed)
{
    NEED_HOSTS();
    ts_fake_install();
    enum { H = 3, P = 4, K = 6 };
    storm *s = new_storm(P, K, true);
    s->slow_ms = 400;
    s->sick = true;
    setenv("KPC_REMOTE_LEASE_MS", "1000", 1);
    pid_t all = tc_hosts_start(0, H, P, base, false, storm_rank, s);
    sleep_ms(300); /* mid-storm: the first builds are running */
    kill(redis.pid, SIGKILL);
    ck_assert_int_eq(tc_hosts_wait(all), 0); /* no hang, no crash, no failed request */
    unsetenv("KPC_REMOTE_LEASE_MS");
    check_identical(s, 0, H * P);
    kpc_stats t = sum_stats(s, 0, H * P);
    ck_assert_uint_ge(t.remote_errors, 1);
    ck_assert_uint_le(t.builds, (uint64_t)H * K); /* at most host-local duplicates */
}
END_TEST

START_TEST(redis_silent)
{
    NEED_HOSTS();
    ts_fake_install();
    int port;
    int fd = tc_silent_listener(&port);
    ck_assert_int_ge(fd, 0);
    enum { H = 2, P = 4, K = 4 };
    storm *s = new_storm(P, K, false);
    s->sick = true;
    snprintf(s->remote, sizeof s->remote, "redis://127.0.0.1:%d", port);
    ck_assert_int_eq(tc_hosts_run(0, H, P, base, false, storm_rank, s), 0);
    close(fd);
    check_identical(s, 0, H * P);
    kpc_stats t = sum_stats(s, 0, H * P);
    ck_assert_uint_ge(t.remote_errors, 1);
    ck_assert_uint_eq(t.builds, (uint64_t)H * K); /* host-local: once per host */
    ck_assert_uint_eq(t.remote_builds, 0);
}
END_TEST

static void secret_file(char *out, size_t cap, const char *text)
{
    snprintf(out, cap, "%s/secret-%d", base, (int)strlen(text));
    ts_write_file(out, text, strlen(text));
    chmod(out, 0600);
}

START_TEST(records_refused)
{
    NEED_HOSTS();
    ts_fake_install();
    storm *s = new_storm(1, 2, true);
    /* host 0 publishes both keys */
    ck_assert_int_eq(tc_hosts_run(0, 1, 1, base, false, storm_rank, s), 0);
    ck_assert_uint_eq(ts_fake_compiles(), 2);
    redisContext *c = redisConnect("127.0.0.1", redis.port);
    ck_assert_ptr_nonnull(c);
    redisReply *keys = redisCommand(c, "KEYS kpc:1:*:co");
    ck_assert_uint_eq(keys->elements, 2);
    char k0[96], k1[96];
    snprintf(k0, sizeof k0, "%s", keys->element[0]->str);
    snprintf(k1, sizeof k1, "%s", keys->element[1]->str);
    freeReplyObject(keys);
    size_t n0, n1;
    char *v0 = tc_redis_get(&redis, k0, &n0), *v1 = tc_redis_get(&redis, k1, &n1);
    /* 1: one byte flipped in the payload of k0; another key's record stored under k1 */
    v0[n0 - 70] ^= 0x40;
    ck_assert(tc_redis_set(&redis, k0, v0, n0));
    v0[n0 - 70] ^= 0x40;
    ck_assert(tc_redis_set(&redis, k1, v0, n0));
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(tc_hosts_run(1, 1, 1, base, false, storm_rank, s), 0);
    char *log = ts_log_end();
    ck_assert_ptr_nonnull(strstr(log, "refused"));
    free(log);
    ck_assert_uint_eq(s->out[1].st.remote_refused, 2);
    ck_assert_uint_eq(s->out[1].st.builds, 2);
    ck_assert_uint_eq(ts_fake_compiles(), 4);
    check_identical(s, 0, 2); /* rebuilt: the right bytes */
    /* the rebuilds replaced them in Redis */
    size_t m;
    char *fixed = tc_redis_get(&redis, k1, &m);
    ck_assert_uint_eq(m, n1);
    ck_assert_mem_eq(fixed + 256, v1 + 256, n1 - 256); /* the payload after the header */
    free(fixed);
    /* 2: with a secret, records written without it (all of them now) are refused and
     * replaced by authenticated ones, which a third host with the secret accepts */
    secret_file(s->secret, sizeof s->secret, "a cluster secret of any length");
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(tc_hosts_run(2, 1, 1, base, false, storm_rank, s), 0);
    free(ts_log_end());
    ck_assert_uint_eq(s->out[2].st.remote_refused, 2);
    ck_assert_uint_eq(s->out[2].st.builds, 2);
    ck_assert_int_eq(tc_hosts_run(3, 1, 1, base, false, storm_rank, s), 0);
    ck_assert_uint_eq(s->out[3].st.remote_hits, 2);
    ck_assert_uint_eq(s->out[3].st.builds, 0);
    check_identical(s, 0, 4);
    /* and one with another secret refuses them */
    secret_file(s->secret, sizeof s->secret, "another secret");
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(tc_hosts_run(4, 1, 1, base, false, storm_rank, s), 0);
    free(ts_log_end());
    ck_assert_uint_eq(s->out[4].st.remote_refused, 2);
    ck_assert_uint_eq(s->out[4].st.remote_hits, 0);
    check_identical(s, 0, 5);
    free(v0);
    free(v1);
    redisFree(c);
}
END_TEST

/* Item 9: one cache directory shared by every host, each with its own /dev/shm, no Redis. */
START_TEST(shared_dir)
{
    NEED_HOSTS();
    ts_fake_install();
    enum { H = 4, P = 4, K = 8 };
    storm *s = new_storm(P, K, false);
    s->slow_ms = 20;
    ck_assert_int_eq(tc_hosts_run(0, H, P, base, true, storm_rank, s), 0);
    check_identical(s, 0, H * P);
    kpc_stats t = sum_stats(s, 0, H * P);
    ck_assert_uint_le(t.builds, (uint64_t)H * K); /* at most once per key per host */
    ck_assert_uint_ge(t.builds, K);
    char dir[4300];
    snprintf(dir, sizeof dir, "%s/shared", base);
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
    NEED_HOSTS();
    enum { H = 3, P = 3, K = 3 };
    storm *s = new_storm(P, K, true);
    s->real = true;
    ck_assert_int_eq(tc_hosts_run(0, H, P, base, false, storm_rank, s), 0);
    kpc_stats t = sum_stats(s, 0, H * P);
    ck_assert_uint_eq(t.builds, K);
    ck_assert_uint_eq(t.remote_builds, K);
    check_identical(s, 0, H * P);
    ck_assert_int_eq(tc_hosts_run(H, 1, 2, base, false, storm_rank, s), 0);
    ck_assert_uint_eq(sum_stats(s, H * P, 2).builds, 0);
    check_identical(s, 0, H * P + 2);
}
END_TEST

START_TEST(takeover_real)
{
    NEED_HOSTS();
    storm *s = new_storm(2, 1, true);
    s->real = s->slow = true;
    takeover(s, 300, 2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("remote");
    TCase *unit = tcase_create("unit");
    tcase_add_test(unit, url_parse);
    tcase_add_checked_fixture(unit, setup_redis, teardown_redis);
    tcase_add_test(unit, module_protocol);
    suite_add_tcase(s, unit);
    TCase *cl = tcase_create("cluster");
    tcase_add_checked_fixture(cl, setup_redis, teardown_redis);
    tcase_set_timeout(cl, 120);
    tcase_add_test(cl, storm_fake);
    tcase_add_test(cl, failure_shared);
    tcase_add_test(cl, takeover_fake);
    tcase_add_test(cl, redis_killed);
    tcase_add_test(cl, redis_silent);
    tcase_add_test(cl, records_refused);
    tcase_add_test(cl, shared_dir);
    suite_add_tcase(s, cl);
    TCase *real = tcase_create("real");
    tcase_add_checked_fixture(real, setup_redis, teardown_redis);
    tcase_set_timeout(real, 240);
    tcase_add_test(real, storm_real);
    tcase_add_test(real, takeover_real);
    suite_add_tcase(s, real);
    return ts_run_suite(s);
}
