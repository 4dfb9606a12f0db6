/*
 * bench_cluster.c - figure 8: the cluster tier.
 *
 * 8a, the cluster storm: H simulated hosts (each a mount namespace with its own /dev/shm
 * and cache dir: tests/cluster_support.c; root only) x P processes each need the same
 * K sources on a cold cluster; all are forked first and released together (a flag),
 * and the wall runs from the release to the last exit. Once with the remote tier (one
 * redis-server on loopback shared by every host) and once without it (every host on its
 * own). Builds are the sum of the processes' `builds` counters: the goal with the
 * remote tier is K exactly, without it H x K.
 *
 * 8b, the remote warm hit: one process builds a ~16 KB code object (7 kernels) and
 * publishes it; then, in a process that is already warm, kpc_program_get on a new cache
 * over an empty cache dir (so the disk misses and the host's claimant asks Redis:
 * fetch, every check, back-fill to disk with fsync, host index publish), beside the
 * same get answered by the local disk (a new cache over the back-filled dir) and the
 * compile of the source (every level off). Also the fetch alone (GET and the checks,
 * kpc_remote_read). Medians over --runs.
 *
 * usage: bench_cluster [--fake-ms N] [--hosts H] [--procs P] [--k K] [--runs N]
 */
#define _GNU_SOURCE
#include "../cluster_support.h"
#include "../../src/storage/remote.h"
#include "bench.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int H = 4, P = 8, K = 8, RUNS = 15;
static unsigned fake_ms;
static char **sources;
static tc_redis redis;

typedef struct storm_shared {
    _Atomic int go; /* the release (a pipe's write end would be inherited by every host) */
    char remote[128];
    uint64_t builds[256];
    int failed;
} storm_shared;

static int storm_rank(int host, int proc, void *arg)
{
    storm_shared *s = arg;
    while (!atomic_load(&s->go))
        usleep(100);
    kpc_config cfg = {.struct_size = sizeof cfg, .remote = s->remote};
    kpc_cache *cache = NULL;
    kpc_context *ctx = NULL;
    if (kpc_cache_open(&cfg, &cache) != KPC_OK ||
        kpc_context_create_for_target(cache, bn_target(), &ctx) != KPC_OK)
        return 1;
    int bad = 0;
    for (int j = 0; j < K; j++) {
        int i = (proc * K / P + host + j) % K;
        kpc_source src = {.code = sources[i], .name = "cluster.hip"};
        kpc_program *p = NULL;
        bad += kpc_program_get(ctx, &src, &p) != KPC_OK;
        kpc_program_release(p);
    }
    kpc_stats st;
    kpc_stats_get(cache, &st);
    s->builds[host * P + proc] = st.builds;
    kpc_context_destroy(ctx);
    kpc_cache_close(cache);
    return bad ? 1 : 0;
}

/* One storm; returns the wall in seconds, *builds the cluster's compiles. */
static double storm(bool remote, const char *base, uint64_t *builds)
{
    storm_shared *s = tc_shared(sizeof *s);
    if (s == NULL)
        bn_die("storm set-up failed");
    if (remote)
        snprintf(s->remote, sizeof s->remote, "%s", redis.url);
    pid_t leader = tc_hosts_start(0, H, P, base, false, storm_rank, s);
    usleep(300000); /* every host's processes forked and waiting */
    uint64_t t0 = bn_now_ns();
    atomic_store(&s->go, 1);
    int failed = tc_hosts_wait(leader);
    double wall = (double)(bn_now_ns() - t0) / 1e9;
    if (failed)
        bn_die("storm: %d processes failed", failed);
    *builds = 0;
    for (int i = 0; i < H * P; i++)
        *builds += s->builds[i];
    return wall;
}

/* Median time of kpc_program_get for src on a new cache over dir (made fresh each run
 * when fresh), with the given remote URL ("" none) and flags. */
static double get_time(const char *remote, unsigned flags, const char *src_code, bool fresh, char **dir_io)
{
    double *v = calloc((size_t)RUNS, sizeof *v);
    for (int r = 0; r <= RUNS; r++) { /* run 0 is a warm-up */
        if (fresh) {
            if (*dir_io)
                bn_cleanup(*dir_io);
            *dir_io = bn_tmpdir();
        }
        kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = *dir_io, .flags = flags, .remote = remote};
        kpc_cache *cache = NULL;
        kpc_context *ctx = NULL;
        if (kpc_cache_open(&cfg, &cache) != KPC_OK || kpc_context_create_for_target(cache, bn_target(), &ctx) != KPC_OK)
            bn_die("open failed");
        kpc_source src = {.code = src_code, .name = "hit.hip"};
        kpc_program *p = NULL;
        uint64_t t0 = bn_now_ns();
        if (kpc_program_get(ctx, &src, &p) != KPC_OK)
            bn_die("get failed: %s", kpc_last_log());
        uint64_t t1 = bn_now_ns();
        kpc_stats st;
        kpc_stats_get(cache, &st);
        if (remote[0] && fresh && st.remote_hits != 1)
            bn_die("expected a remote hit (builds %llu)", (unsigned long long)st.builds);
        kpc_program_release(p);
        kpc_context_destroy(ctx);
        kpc_cache_close(cache);
        if (r > 0)
            v[r - 1] = (double)(t1 - t0) / 1e9;
    }
    double m = bn_median(v, (size_t)RUNS);
    free(v);
    return m;
}

int main(int argc, char **argv)
{
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
        else
            bn_die("usage: bench_cluster [--fake-ms N] [--hosts H] [--procs P] [--k K] [--runs N]");
    }
    if (H < 1 || P < 1 || H * P > 256 || K < 1 || RUNS < 1)
        bn_die("bad sizes");
    if (!kpc_remote_built())
        bn_die("this kpc was built without the remote tier (hiredis, libsodium)");
    if (fake_ms)
        bn_fake_install(fake_ms, 16384);
    if (!tc_redis_start(&redis))
        bn_die("redis-server could not be started");
    sources = calloc((size_t)K, sizeof *sources);
    for (int i = 0; i < K; i++)
        sources[i] = bn_multi_source(2, 1000 + i);
    char tag[32] = "";
    if (fake_ms)
        snprintf(tag, sizeof tag, " (fake %u ms)", fake_ms);

    /* 8a: the storm */
    if (tc_hosts_possible()) {
        char v[64], rv[64], ratio[32], fig[160], id[64];
        uint64_t b_off, b_on;
        char *base = bn_tmpdir();
        bn_say("storm: %d hosts x %d processes x %d sources, without the remote tier", H, P, K);
        double w_off = storm(false, base, &b_off);
        bn_cleanup(base);
        base = bn_tmpdir();
        bn_say("storm: with the remote tier");
        double w_on = storm(true, base, &b_on);
        bn_cleanup(base);
        snprintf(fig, sizeof fig, "8 cluster storm %dx%dx%d: builds, remote tier%s", H, P, K, tag);
        snprintf(v, sizeof v, "%llu builds", (unsigned long long)b_on);
        snprintf(rv, sizeof rv, "%llu builds", (unsigned long long)b_off);
        snprintf(ratio, sizeof ratio, "%.1fx fewer", b_on ? (double)b_off / (double)b_on : 0.0);
        snprintf(id, sizeof id, "cluster_storm_builds");
        bn_row(id, fig, v, "the same without it", rv, ratio, "builds == K", b_on == (uint64_t)K, (double)b_on,
               "builds");
        snprintf(fig, sizeof fig, "8 cluster storm %dx%dx%d: wall, remote tier%s", H, P, K, tag);
        bn_fmt_time(v, sizeof v, w_on);
        bn_fmt_time(rv, sizeof rv, w_off);
        snprintf(ratio, sizeof ratio, "%.2fx", w_on / w_off);
        bn_row("cluster_storm_wall", fig, v, "the same without it", rv, ratio, "(context: one machine "
               "simulates every host)", -1, w_on, "s");
    } else
        bn_say("storm: skipped: simulated hosts need root and unshare");

    /* 8b: the remote warm hit, beside the disk hit and the compile */
    char *code = bn_multi_source(7, 77);
    char *dir = bn_tmpdir();
    {
        kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .remote = redis.url};
        kpc_cache *cache = NULL;
        kpc_context *ctx = NULL;
        if (kpc_cache_open(&cfg, &cache) != KPC_OK || kpc_context_create_for_target(cache, bn_target(), &ctx) != KPC_OK)
            bn_die("open failed");
        size_t size = bn_get(ctx, &(kpc_source){.code = code, .name = "hit.hip"});
        bn_say("remote hit: a %zu-byte code object published", size);
        kpc_context_destroy(ctx);
        kpc_cache_close(cache);
    }
    char *hdir = NULL;
    double remote_hit = get_time(redis.url, 0, code, true, &hdir);
    double disk_hit = get_time("", 0, code, false, &hdir); /* the last back-filled dir */
    bn_cleanup(hdir);
    char *cdir = bn_tmpdir();
    double compile = get_time("", KPC_NO_DISK | KPC_NO_SHM, code, false, &cdir);
    bn_cleanup(cdir);
    /* the fetch alone: GET and the checks */
    kpc_remote *r = NULL;
    kpc_cache *probe = bn_open(dir, 0, 0);
    kpc_context *pctx = bn_context(probe);
    kpc_key key;
    kpc_key_compute_prefixed(&pctx->key_prefix, &(kpc_source){.code = code, .name = "hit.hip"}, &key);
    double fetch = 0;
    if (kpc_remote_open(redis.url, &r) == KPC_OK) {
        double *v = calloc((size_t)RUNS, sizeof *v);
        for (int i = 0; i < RUNS; i++) {
            kpc_record rec;
            uint64_t t0 = bn_now_ns();
            if (kpc_remote_read(r, &key, pctx->target, pctx->compiler_id, KPC_RECORD_CODE, &rec) != KPC_OK)
                bn_die("remote read failed");
            v[i] = (double)(bn_now_ns() - t0) / 1e9;
            kpc_record_free(&rec);
        }
        fetch = bn_median(v, (size_t)RUNS);
        free(v);
        kpc_remote_close(r);
    }
    kpc_context_destroy(pctx);
    kpc_cache_close(probe);
    bn_cleanup(dir);
    char v[32], rv[32], ratio[32], cv[32];
    bn_fmt_time(v, sizeof v, remote_hit);
    bn_fmt_time(rv, sizeof rv, disk_hit);
    bn_fmt_time(cv, sizeof cv, compile);
    snprintf(ratio, sizeof ratio, "%.0fx below", compile / remote_hit);
    bn_row("cluster_remote_hit", "8 remote warm hit, 16 KB, loopback (fetch+check+back-fill)", v, "compile", cv,
           ratio, ">= 10x below compile", compile / remote_hit >= 10, remote_hit * 1e6, "us");
    snprintf(ratio, sizeof ratio, "%.1fx", remote_hit / disk_hit);
    bn_row("cluster_disk_hit", "8 local disk hit, same object, new cache", rv, "remote warm hit", v, ratio,
           "(context)", -1, disk_hit * 1e6, "us");
    bn_fmt_time(rv, sizeof rv, fetch);
    snprintf(ratio, sizeof ratio, "%.3f", fetch / remote_hit);
    bn_row("cluster_remote_fetch", "8 remote fetch alone (GET + checks)", rv, "remote warm hit", v, ratio,
           "(context: the rest is the back-fill)", -1, fetch * 1e6, "us");
    tc_redis_stop(&redis);
    return 0;
}
