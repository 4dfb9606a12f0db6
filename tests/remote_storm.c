/*
 * remote_storm.c - the storm and the Redis probes the cluster-tier tests share
 * (remote_storm.h).
 */
#define _GNU_SOURCE
#include "remote_storm.h"

#include <errno.h>
#include <stdatomic.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/context.h"

tc_redis rs_redis;
char *rs_base;
bool rs_have_hosts;

void rs_setup(void)
{
    rs_base = ts_tmpdir();
    rs_have_hosts = tc_hosts_possible();
    ck_assert_msg(tc_redis_start(&rs_redis), "redis-server could not be started");
}

void rs_teardown(void)
{
    unsetenv("KPC_REMOTE_LEASE_MS");
    unsetenv("KPC_BUILD_WAIT_MAX_MS");
    tc_redis_stop(&rs_redis);
    ts_cleanup(rs_base);
}

pid_t rs_await_holder(void)
{
    pid_t holder = 0;
    for (int i = 0; i < 6000 && (holder = rs_lease_holder(rs_redis.port)) == 0; i++)
        rs_sleep_ms(5);
    ck_assert_int_gt(holder, 0);
    return holder;
}

double rs_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void rs_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void rs_secret_file(char *out, size_t cap, const char *dir, const char *text)
{
    static int n;
    /* beside the cache dir (ts_tmpdir's, which need not exist yet) */
    snprintf(out, cap, "%.*s/secret-%d-%d", (int)(strrchr(dir, '/') - dir), dir, (int)getpid(), ++n);
    ts_write_file(out, text, strlen(text));
    chmod(out, 0600);
}

storm *rs_new(int procs, int k, const char *url, const char *dir)
{
    storm *s = tc_shared(sizeof *s);
    ck_assert_ptr_nonnull(s);
    s->procs = procs;
    s->k = k;
    if (url)
        snprintf(s->remote, sizeof s->remote, "%s", url);
    rs_secret_file(s->secret, sizeof s->secret, dir, "the secret of the hosts of this test");
    static int salt;
    s->salt = (int)getpid() * 100 + ++salt;
    return s;
}

storm *rs_fake_storm(int procs, int k, int slow_ms)
{
    ts_fake_install();
    storm *s = rs_new(procs, k, rs_redis.url, rs_base);
    s->slow_ms = slow_ms;
    return s;
}

char *rs_source(const storm *s, int i)
{
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

void rs_key(const storm *s, int i, kpc_key *out)
{
    char *dir = ts_tmpdir();
    kpc_cache *c = ts_open(dir, KPC_NO_SHM, 0);
    kpc_context *ctx = ts_context(c);
    char *code = rs_source(s, i);
    kpc_source src = {.code = code, .name = "cluster.hip"};
    ts_key(ctx, &src, out);
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_cleanup(dir);
}

int rs_rank(int host, int proc, void *arg)
{
    storm *s = arg;
    rank_out *o = &s->out[host * s->procs + proc];
    if (s->hold)
        atomic_fetch_add(&s->ready, 1);
    while (s->hold && !atomic_load(&s->go))
        usleep(100);
    double t0 = rs_now();
    if (s->secret[0] && !s->trust)
        setenv("KPC_REMOTE_SECRET_FILE", s->secret, 1);
    else if (s->trust)
        setenv("KPC_REMOTE_TRUST", "unauthenticated", 1);
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
    char *codes[MAXK];
    kpc_source srcs[MAXK];
    kpc_program *progs[MAXK] = {0};
    kpc_status sts[MAXK];
    int order[MAXK];
    for (int i = 0; i < s->k; i++) {
        order[i] = s->same_order ? i : (i + proc + host) % s->k; /* ranks ask in different orders */
        codes[i] = rs_source(s, order[i]);
        srcs[i] = (kpc_source){.code = codes[i], .name = "cluster.hip"};
    }
    if (s->batch)
        kpc_program_get_many(ctx, srcs, (size_t)s->k, progs, sts);
    for (int i = 0; i < s->k; i++) {
        int j = order[i];
        if (!s->batch)
            sts[i] = kpc_program_get(ctx, &srcs[i], &progs[i]);
        o->status[j] = sts[i];
        if (o->status[j] == KPC_OK) {
            size_t size;
            const void *bytes = kpc_program_code(progs[i], &size);
            o->digest[j] = XXH3_64bits(bytes, size);
            o->size[j] = size;
            bad += !ts_is_code_object(bytes, size);
        } else {
            snprintf(o->log, sizeof o->log, "%s", kpc_last_log());
            bad += !s->failing;
        }
        kpc_program_release(progs[i]);
        free(codes[i]);
    }
    o->seconds = rs_now() - t0;
    o->closing = 1;
    kpc_stats_get(c, &o->st);
    kpc_remote_counters_get(kpc_remote_tier_client(kpc_tier_coordinator(&c->tiers)), &o->rc);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    o->done = 1;
    return bad ? 1 : 0;
}

int rs_run_released(storm *s, int first, int hosts, const char *base)
{
    s->hold = true;
    atomic_store(&s->ready, 0);
    atomic_store(&s->go, 0);
    pid_t leader = tc_hosts_start(first, hosts, s->procs, base, false, rs_rank, s);
    /* every rank forked and waiting (a host that failed to start is seen in the result) */
    for (int i = 0; i < 6000 && atomic_load(&s->ready) < hosts * s->procs; i++)
        rs_sleep_ms(5);
    atomic_store(&s->go, 1);
    return tc_hosts_wait(leader);
}

kpc_stats rs_sum(const storm *s, int first, int n)
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

uint64_t rs_sum_wait_timeouts(const storm *s, int first, int n)
{
    uint64_t t = 0;
    for (int r = first; r < first + n; r++)
        t += s->out[r].rc.wait_timeouts;
    return t;
}

void rs_check_identical(const storm *s, int first, int n)
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

static redisReply *ask(int port, const char *cmd)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    redisReply *rep = c && !c->err ? redisCommand(c, cmd) : NULL;
    if (c)
        redisFree(c);
    return rep;
}

int rs_leases(int port)
{
    redisReply *rep = ask(port, "KEYS *:lease");
    int n = rep && rep->type == REDIS_REPLY_ARRAY ? (int)rep->elements : -1;
    if (rep)
        freeReplyObject(rep);
    return n;
}

pid_t rs_lease_holder(int port)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    pid_t pid = 0;
    redisReply *keys = c && !c->err ? redisCommand(c, "KEYS *:lease") : NULL;
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

/* A field of INFO section's reply; -1 when Redis does not say. */
static long long info_field(int port, const char *section, const char *field)
{
    char cmd[64];
    snprintf(cmd, sizeof cmd, "INFO %s", section);
    redisReply *rep = ask(port, cmd);
    const char *p = rep && rep->type == REDIS_REPLY_STRING ? strstr(rep->str, field) : NULL;
    long long v = p ? atoll(p + strlen(field)) : -1;
    if (rep)
        freeReplyObject(rep);
    return v;
}

int rs_clients(int port)
{
    long long n = info_field(port, "clients", "connected_clients:");
    return n < 0 ? -1 : (int)n - 1; /* not this probe */
}

void rs_await_waiter(int port)
{
    /* each ask misses the record and the log: a claimant that asked once and then once
     * more is waiting (the holder's renewals read only its lease) */
    long long m0 = info_field(port, "stats", "keyspace_misses:"), m = m0;
    for (int i = 0; i < 6000 && (m = info_field(port, "stats", "keyspace_misses:")) < m0 + 5; i++)
        rs_sleep_ms(5);
    ck_assert_int_ge(m, m0 + 5);
}
