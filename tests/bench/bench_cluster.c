/*
 * bench_cluster.c - figure 8: the cluster tier.
 *
 * 8a, the cluster storm: H simulated hosts (each a mount namespace with its own /dev/shm
 * and cache dir: tests/cluster_support.c; root only) x P processes each need the same
 * K sources on a cold cluster; all are forked first and released together (a flag),
 * and the wall runs from the release to the last exit. Once with the remote tier (one
 * redis-server on loopback shared by every host, a secret shared by all) and once
 * without it. Builds are the sum of the processes' `builds` counters: the goal with the
 * remote tier is K exactly, without it H x K. While the storm runs the parent samples
 * Redis's connected clients every 2 ms: the peak, against the goal of about one per
 * host. Then the same storm with every process asking in the same order, for its
 * connections.
 *
 * 8d, the same-order storm: every rank of every host asks for the same K sources in the
 * same order, all released together. The compile is the fake one sleeping c ms
 * (--sleep-ms, 200), so the wall is a figure of scheduling alone: on this machine every
 * host shares the same few cores, which would otherwise decide it. The bound: a rank is
 * one process and compiles one source at a time (hipRTC serializes the compiles of a
 * process), the ranks of every host at once, so the K compiles take at least
 * ceil(K / (H x P)) rounds of c; on top of them, what the same storm costs with nothing
 * to compile (the ranks starting, opening their caches, fetching K records from Redis):
 * its wall run again on fresh hosts (empty disks and host indexes) with every record in
 * Redis, the warm storm. So
 *     bound = ceil(K / (H x P)) x c + warm wall
 * Run for H x P x K as given and with one rank a host (H x 1 x K: the hosts compile one
 * at a time, and the bound is ceil(K / H) x c + warm; only spreading the keys over the
 * hosts can meet it). One kpc_program_get_many per rank against the bound (goal: K
 * builds, <= 1.3x), with how many hosts built and Redis's connections at peak; one
 * kpc_program_get at a time beside it (about K x c: each key waits for the last).
 * Medians of --same-runs runs (3); each run's sources are new (a cold cluster).
 *
 * 8b, the takeover: a holder host's builder is killed mid-compile while another host
 * waits on its lease; the time from the kill to the lease's new holder, per lease length
 * (goal: within about twice the lease). Fake compiler (a compile of twice the lease).
 *
 * 8c, the remote hit: a published record of 16, 148 and 590 KB (fake objects of those
 * sizes), then kpc_program_get on a new cache (its own connection) over a cache dir in
 * use (another source built there first: the identity memo and the target directory
 * exist) that lacks the key, on ext4 (/tmp) and on tmpfs (/dev/shm): the host's
 * claimant asks Redis (one GETEX),
 * checks the record and answers; the cache's thread then back-fills the disk without
 * fsync (the figure beside it: kpc_cache_close right after, which waits for that copy).
 * Medians over --runs, beside the goal (16 KB <= 200 us, 590 KB <= 1 ms on ext4) and the
 * local disk hit. Also the fetch alone (kpc_remote_read) for 16 KB.
 *
 * --hits-only: 8c alone (the storms and takeovers need root and take minutes).
 *
 * usage: bench_cluster [--fake-ms N] [--hosts H] [--procs P] [--k K] [--runs N] [--hits-only]
 *                      [--sleep-ms N] [--same-runs N] [--same-order-only]
 */
#define _GNU_SOURCE
#include "bench_cluster.h"
#include "../../src/storage/remote.h"
#include "bench.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int H = 4, P = 8, K = 8, RUNS = 15, SAME_RUNS = 3;
static unsigned fake_ms, sleep_ms = 200;
static bool hits_only;
static char **sources;
static tc_redis redis;

typedef struct storm_shared {
    _Atomic int go; /* the release (a pipe's write end would be inherited by every host) */
    char remote[128];
    int procs;      /* ranks per host */
    bool same_order;
    bool batch;     /* one kpc_program_get_many for the K sources (else K kpc_program_get) */
    uint64_t builds[256];
    int failed;
} storm_shared;

/* A reply's integer, or the value of an INFO field; -1 when Redis does not say. */
static long long redis_ask(const char *cmd, const char *info_field)
{
    redisContext *c = redisConnect("127.0.0.1", redis.port);
    redisReply *rep = c && !c->err ? redisCommand(c, cmd) : NULL;
    long long v = -1;
    if (rep && rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer;
    else if (rep && rep->type == REDIS_REPLY_STRING && info_field) {
        const char *p = strstr(rep->str, info_field);
        v = p ? atoll(p + strlen(info_field)) : -1;
    } else if (rep && rep->type == REDIS_REPLY_STRING) /* GET of a lease value: its pid */
        v = strstr(rep->str, "pid=") ? atoll(strstr(rep->str, "pid=") + 4) : -1;
    if (rep)
        freeReplyObject(rep);
    if (c)
        redisFree(c);
    return v;
}

static int storm_rank(int host, int proc, void *arg)
{
    storm_shared *s = arg;
    kpc_context *ctx;
    kpc_cache *cache = bn_rank_open(&s->go, s->remote, &ctx);
    if (cache == NULL)
        return 1;
    int bad = 0;
    kpc_source *srcs = calloc((size_t)K, sizeof *srcs);
    kpc_program **progs = calloc((size_t)K, sizeof *progs);
    for (int j = 0; j < K; j++) {
        int i = s->same_order ? j : (proc * K / s->procs + host + j) % K;
        srcs[j] = (kpc_source){.code = sources[i], .name = "cluster.hip"};
    }
    if (s->batch)
        bad += kpc_program_get_many(ctx, srcs, (size_t)K, progs, NULL) != KPC_OK;
    for (int j = 0; j < K; j++) {
        if (!s->batch)
            bad += kpc_program_get(ctx, &srcs[j], &progs[j]) != KPC_OK;
        kpc_program_release(progs[j]);
    }
    free(srcs);
    free(progs);
    s->builds[host * s->procs + proc] = bn_rank_close(cache, ctx);
    return bad ? 1 : 0;
}

/* One storm of hosts x procs ranks; returns the wall in seconds, *builds the cluster's
 * compiles, *peak the most clients Redis had connected at once (less the sampler), and
 * *hosts_built (may be NULL) how many hosts compiled at least once. */
static double storm_of(int hosts, int procs, bool remote, bool same_order, bool batch, const char *base,
                       uint64_t *builds, int *peak, int *hosts_built)
{
    storm_shared *s = tc_shared(sizeof *s);
    if (s == NULL)
        bn_die("storm set-up failed");
    if (remote)
        snprintf(s->remote, sizeof s->remote, "%s", redis.url);
    s->procs = procs;
    s->same_order = same_order;
    s->batch = batch;
    pid_t leader = tc_hosts_start(0, hosts, procs, base, false, storm_rank, s);
    usleep(300000); /* every host's processes forked and waiting */
    uint64_t t0 = bn_now_ns();
    atomic_store(&s->go, 1);
    int st = 0;
    *peak = 0;
    while (waitpid(leader, &st, WNOHANG) == 0) {
        long long n = remote ? redis_ask("INFO clients", "connected_clients:") - 1 : 0;
        if (n > *peak)
            *peak = (int)n;
        usleep(2000);
    }
    double wall = (double)(bn_now_ns() - t0) / 1e9;
    int failed = WIFEXITED(st) ? WEXITSTATUS(st) : 255;
    if (failed)
        bn_die("storm: %d processes failed", failed);
    *builds = 0;
    if (hosts_built)
        *hosts_built = 0;
    for (int i = 0; i < hosts * procs; i++)
        *builds += s->builds[i];
    for (int h = 0; hosts_built && h < hosts; h++) {
        uint64_t b = 0;
        for (int p = 0; p < procs; p++)
            b += s->builds[h * procs + p];
        *hosts_built += b > 0;
    }
    munmap(s, sizeof *s);
    return wall;
}

static double storm(bool remote, bool same_order, const char *base, uint64_t *builds, int *peak)
{
    return storm_of(H, P, remote, same_order, false, base, builds, peak, NULL);
}

static void row_storms(void)
{
    char v[64], rv[64], ratio[32], fig[160], tag[32] = "";
    if (fake_ms)
        snprintf(tag, sizeof tag, " (fake %u ms)", fake_ms);
    uint64_t b_off, b_on, b_same;
    int peak_off, peak_on, peak_same;
    char *base = bn_tmpdir();
    bn_say("storm: %d hosts x %d processes x %d sources, without the remote tier", H, P, K);
    double w_off = storm(false, false, base, &b_off, &peak_off);
    bn_cleanup(base);
    base = bn_tmpdir();
    bn_say("storm: with the remote tier");
    double w_on = storm(true, false, base, &b_on, &peak_on);
    bn_cleanup(base);
    for (int i = 0; i < K; i++) { /* sources of its own: a cold cluster again */
        free(sources[i]);
        sources[i] = bn_multi_source(2, 2000 + i);
    }
    base = bn_tmpdir();
    bn_say("storm: with the remote tier, every process asking in the same order (its connections)");
    storm(true, true, base, &b_same, &peak_same);
    bn_cleanup(base);
    snprintf(fig, sizeof fig, "8 cluster storm %dx%dx%d: builds, remote tier%s", H, P, K, tag);
    snprintf(v, sizeof v, "%llu builds", (unsigned long long)b_on);
    snprintf(rv, sizeof rv, "%llu builds", (unsigned long long)b_off);
    snprintf(ratio, sizeof ratio, "%.1fx fewer", b_on ? (double)b_off / (double)b_on : 0.0);
    bn_row("cluster_storm_builds", fig, v, "the same without it", rv, ratio, "builds == K", b_on == (uint64_t)K,
           (double)b_on, "builds");
    snprintf(fig, sizeof fig, "8 cluster storm %dx%dx%d: wall, remote tier%s", H, P, K, tag);
    bn_fmt_time(v, sizeof v, w_on);
    bn_fmt_time(rv, sizeof rv, w_off);
    snprintf(ratio, sizeof ratio, "%.2fx", w_on / w_off);
    bn_row("cluster_storm_wall", fig, v, "the same without it", rv, ratio,
           "(context: one machine simulates every host)", -1, w_on, "s");
    /* no process holds a connection while it waits or compiles: the peak is the processes
     * in a Redis call at one moment; in the different-order storm every claimant of every
     * host asks at once when it starts */
    snprintf(fig, sizeof fig, "8 cluster storm %dx%dx%d, different orders: Redis connections at peak%s", H, P, K,
             tag);
    snprintf(v, sizeof v, "%d", peak_on);
    snprintf(rv, sizeof rv, "%d", H * (P < K ? P : K));
    snprintf(ratio, sizeof ratio, "%.1f per host", (double)peak_on / H);
    bn_row("cluster_storm_connections", fig, v, "hosts x keys in flight", rv, ratio,
           "<= hosts x keys in flight", peak_on <= H * (P < K ? P : K), (double)peak_on, "connections");
    snprintf(fig, sizeof fig, "8 cluster storm %dx%dx%d, same order: Redis connections at peak%s", H, P, K, tag);
    snprintf(v, sizeof v, "%d", peak_same);
    snprintf(rv, sizeof rv, "%d", H);
    snprintf(ratio, sizeof ratio, "%.1f per host", (double)peak_same / H);
    bn_row("cluster_same_order_connections", fig, v, "hosts", rv, ratio, "<= 2 per host", peak_same <= 2 * H,
           (double)peak_same, "connections");
}

/* New sources for the K keys: a cold cluster again. */
static void new_sources(void)
{
    static int variant = 3000;
    for (int i = 0; i < K; i++) {
        free(sources[i]);
        sources[i] = bn_multi_source(2, variant++);
    }
}

/* 8d: the same-order storm of hosts x procs x K, compiles sleeping c_ms (the header says
 * why and what the bound is): get_many against the bound, one at a time beside it. */
static void row_same_order(int hosts, int procs, unsigned c_ms, int runs)
{
    bn_fake_install_sleeping(c_ms, 16384);
    /* 32 ranks starting at once on 2 cores can keep a healthy Redis from answering within
     * the default 300 ms: the tier would turn itself off and the ranks build host-local */
    setenv("KPC_REMOTE_TIMEOUT_MS", "5000", 1);
    double *cold = calloc((size_t)runs, sizeof *cold), *warm = calloc((size_t)runs, sizeof *warm);
    double *one = calloc((size_t)runs, sizeof *one);
    uint64_t min_builds = UINT64_MAX, max_builds = 0, one_builds = 0;
    int min_hosts = hosts, max_hosts = 0, max_peak = 0;
    for (int r = 0; r < runs; r++) {
        uint64_t b;
        int peak, built;
        new_sources();
        char *base = bn_tmpdir();
        cold[r] = storm_of(hosts, procs, true, true, true, base, &b, &peak, &built);
        bn_cleanup(base);
        min_builds = b < min_builds ? b : min_builds;
        max_builds = b > max_builds ? b : max_builds;
        max_peak = peak > max_peak ? peak : max_peak;
        min_hosts = built < min_hosts ? built : min_hosts;
        max_hosts = built > max_hosts ? built : max_hosts;
        base = bn_tmpdir(); /* fresh hosts, every record in Redis: nothing to compile */
        warm[r] = storm_of(hosts, procs, true, true, true, base, &b, &peak, NULL);
        bn_cleanup(base);
        if (b != 0)
            bn_die("the warm storm compiled %llu sources", (unsigned long long)b);
        new_sources();
        base = bn_tmpdir();
        one[r] = storm_of(hosts, procs, true, true, false, base, &b, &peak, NULL);
        bn_cleanup(base);
        one_builds = b > one_builds ? b : one_builds;
        bn_say("same order %dx%dx%d, compile %u ms, run %d: get_many %.3f s (%d hosts built), warm %.3f s, "
               "one at a time %.3f s", hosts, procs, K, c_ms, r + 1, cold[r], built, warm[r], one[r]);
    }
    double w = bn_median(cold, (size_t)runs), w0 = bn_median(warm, (size_t)runs), w1 = bn_median(one, (size_t)runs);
    free(cold);
    free(warm);
    free(one);
    int rounds = (K + hosts * procs - 1) / (hosts * procs);
    double bound = rounds * (c_ms / 1e3) + w0;
    char v[128], rv[32], ref[128], ratio[32], fig[160], id[64], t[32], hosts_s[16];
    bn_fmt_time(rv, sizeof rv, bound);
    snprintf(ref, sizeof ref, "bound: ceil(%d/(%dx%d)) = %d x %u ms + the warm storm (%.0f ms)", K, hosts, procs,
             rounds, c_ms, w0 * 1e3);
    if (min_hosts == max_hosts)
        snprintf(hosts_s, sizeof hosts_s, "%d", min_hosts);
    else
        snprintf(hosts_s, sizeof hosts_s, "%d-%d", min_hosts, max_hosts);
    bn_fmt_time(t, sizeof t, w);
    snprintf(v, sizeof v, "%s, %llu builds on %s hosts, %d connections at peak", t, (unsigned long long)max_builds,
             hosts_s, max_peak);
    snprintf(fig, sizeof fig, "8 same-order storm %dx%dx%d, kpc_program_get_many, compile sleeps %u ms%s", hosts,
             procs, K, c_ms, runs > 1 ? "" : ", 1 run");
    snprintf(ratio, sizeof ratio, "%.2fx", w / bound);
    snprintf(id, sizeof id, "cluster_same_order_get_many_h%dp%d", hosts, procs);
    bn_row(id, fig, v, ref, rv, ratio, "builds == K; <= 1.3x the bound",
           min_builds == (uint64_t)K && max_builds == (uint64_t)K && w <= 1.3 * bound, w, "s");
    bn_fmt_time(t, sizeof t, w1);
    snprintf(v, sizeof v, "%s, %llu builds", t, (unsigned long long)one_builds);
    snprintf(fig, sizeof fig, "8 same-order storm %dx%dx%d, one kpc_program_get at a time, compile sleeps %u ms",
             hosts, procs, K, c_ms);
    snprintf(ratio, sizeof ratio, "%.2fx", w1 / bound);
    snprintf(id, sizeof id, "cluster_same_order_one_at_a_time_h%dp%d", hosts, procs);
    bn_row(id, fig, v, "the same bound", rv, ratio, "(context: about K x the compile, the sum)", -1, w1, "s");
    unsetenv("KPC_REMOTE_TIMEOUT_MS");
    bn_fake_install(fake_ms, 16384);
}

/* The holder of the key's lease is killed mid-compile while another host waits: the
 * time until the other host holds the lease. */
static double takeover_ms(unsigned lease_ms, const char *code)
{
    char ms[16];
    snprintf(ms, sizeof ms, "%u", lease_ms);
    setenv("KPC_REMOTE_LEASE_MS", ms, 1);
    bn_fake_install(2 * lease_ms, 16384);
    char *base = bn_tmpdir();
    storm_shared *s = tc_shared(sizeof *s);
    snprintf(s->remote, sizeof s->remote, "%s", redis.url);
    s->procs = 1;
    atomic_store(&s->go, 1);
    char *saved = sources[0];
    sources[0] = (char *)code;
    int saved_k = K;
    K = 1;
    pid_t first = tc_hosts_start(0, 1, 1, base, false, storm_rank, s);
    long long holder = -1;
    char get[96];
    snprintf(get, sizeof get, "KEYS *:lease");
    for (int i = 0; i < 5000 && holder <= 0; i++) {
        redisContext *c = redisConnect("127.0.0.1", redis.port);
        redisReply *keys = c && !c->err ? redisCommand(c, "KEYS *:lease") : NULL;
        if (keys && keys->type == REDIS_REPLY_ARRAY && keys->elements == 1)
            snprintf(get, sizeof get, "GET %s", keys->element[0]->str), holder = redis_ask(get, NULL);
        if (keys)
            freeReplyObject(keys);
        if (c)
            redisFree(c);
        usleep(2000);
    }
    if (holder <= 0)
        bn_die("takeover: no lease");
    pid_t second = tc_hosts_start(1, 1, 1, base, false, storm_rank, s);
    /* its claimant waits on the lease: it asked, then asked again (each ask misses the
     * record and the log; the holder's renewals read only the lease) */
    long long m0 = redis_ask("INFO stats", "keyspace_misses:");
    for (int i = 0; i < 5000 && redis_ask("INFO stats", "keyspace_misses:") < m0 + 5; i++)
        usleep(2000);
    uint64_t t0 = bn_now_ns();
    kill((pid_t)holder, SIGKILL);
    long long next = holder;
    while ((next = redis_ask(get, NULL)) == holder || next <= 0)
        usleep(1000);
    double t = (double)(bn_now_ns() - t0) / 1e6;
    tc_hosts_wait(first);
    tc_hosts_wait(second);
    sources[0] = saved;
    K = saved_k;
    munmap(s, sizeof *s);
    bn_cleanup(base);
    unsetenv("KPC_REMOTE_LEASE_MS");
    return t;
}

static void row_takeovers(void)
{
    static const unsigned leases[] = {1000, 3000, 6000};
    for (size_t i = 0; i < sizeof leases / sizeof leases[0]; i++) {
        char *code = bn_multi_source(1, 5000 + (int)i);
        double t = takeover_ms(leases[i], code);
        free(code);
        char v[32], rv[32], ratio[32], fig[128], id[64];
        snprintf(fig, sizeof fig, "8 takeover of a killed builder's key, lease %u ms%s", leases[i],
                 leases[i] == 3000 ? " (the default)" : "");
        snprintf(v, sizeof v, "%.0f ms", t);
        snprintf(rv, sizeof rv, "%u ms", leases[i]);
        snprintf(ratio, sizeof ratio, "%.2fx", t / leases[i]);
        snprintf(id, sizeof id, "cluster_takeover_%u", leases[i]);
        bn_row(id, fig, v, "the lease", rv, ratio, "<= 2x the lease", t <= 2.0 * leases[i], t, "ms");
    }
    bn_fake_install(fake_ms, 16384);
}

int main(int argc, char **argv)
{
    bool same_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fake-ms") == 0 && i + 1 < argc)
            fake_ms = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--hosts") == 0 && i + 1 < argc)
            H = atoi(argv[++i]);
        else if (strcmp(argv[i], "--procs") == 0 && i + 1 < argc)
            P = atoi(argv[++i]);
        else if (strcmp(argv[i], "--k") == 0 && i + 1 < argc)
            K = atoi(argv[++i]);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            RUNS = atoi(argv[++i]);
        else if (strcmp(argv[i], "--hits-only") == 0)
            hits_only = true;
        else if (strcmp(argv[i], "--sleep-ms") == 0 && i + 1 < argc)
            sleep_ms = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--same-runs") == 0 && i + 1 < argc)
            SAME_RUNS = atoi(argv[++i]);
        else if (strcmp(argv[i], "--same-order-only") == 0)
            same_only = true;
        else
            bn_die("usage: bench_cluster [--fake-ms N] [--hosts H] [--procs P] [--k K] [--runs N] [--hits-only] "
                   "[--sleep-ms N] [--same-runs N] [--same-order-only]");
    }
    if (H < 1 || P < 1 || H * P > 256 || K < 1 || RUNS < 1 || SAME_RUNS < 1)
        bn_die("bad sizes");
    if (!kpc_remote_built())
        bn_die("this kpc was built without the remote tier (hiredis, libsodium)");
    if (fake_ms)
        bn_fake_install(fake_ms, 16384);
    if (!tc_redis_start(&redis))
        bn_die("redis-server could not be started");
    /* the hosts share a secret, as a site runs the tier */
    char *secret_dir = bn_tmpdir();
    char secret[4200];
    if (!tc_secret_file(secret_dir, secret, sizeof secret))
        bn_die("writing %s failed", secret);
    setenv("KPC_REMOTE_SECRET_FILE", secret, 1);
    sources = calloc((size_t)K, sizeof *sources);
    for (int i = 0; i < K; i++)
        sources[i] = bn_multi_source(2, 1000 + i);

    if (hits_only)
        bn_say("storms and takeovers: skipped: --hits-only");
    else if (tc_hosts_possible()) {
        if (!same_only)
            row_storms();
        row_same_order(H, P, sleep_ms, SAME_RUNS);
        row_same_order(H, 1, sleep_ms, SAME_RUNS);
        if (!same_only)
            row_takeovers();
    } else
        bn_say("storms and takeovers: skipped: simulated hosts need root and unshare");
    if (same_only) {
        bn_cleanup(secret_dir);
        tc_redis_stop(&redis);
        return 0;
    }
    bench_cluster_hit_rows(&redis, RUNS);
    bn_cleanup(secret_dir);
    tc_redis_stop(&redis);
    return 0;
}
