/*
 * bench_scale.c - figure 12: a cold start of many simulated hosts against one Redis server
 * and against a Redis Cluster of 3 primaries (and their replicas), in one run, for
 * docs/scale.md's model.
 *
 * H simulated hosts (tests/cluster_support.c: each a mount namespace with its own
 * /dev/shm and cache dir; root only) x P rank processes each need the same K sources on
 * a cold cache; each rank asks with one kpc_program_get_many; the compile is the fake one
 * sleeping C ms and making an object of S KB (so the wall is a figure of the tier, not of
 * hipRTC). All ranks are forked first and released together; the wall runs from the
 * release to the last exit. Then the same storm on fresh hosts (empty disks and host
 * indexes) with every record in Redis: the warm wall. The bound of the cold one: every
 * key compiled once in one round when there are more ranks than keys,
 *     bound = ceil(K / (H x P)) x C + warm wall.
 * Per node that serves keys (the server, or each primary): the commands it ran, the bytes
 * it read and wrote (INFO stats, less this bench's own probes), and the most clients it
 * had connected at once (sampled every 5 ms over one held connection each).
 *
 * usage: bench_scale [--hosts H] [--procs P] [--k K] [--compile-ms C] [--object-kb S]
 */
#define _GNU_SOURCE
#include "../cluster_support.h"
#include "../../src/storage/remote.h"
#include "bench.h"

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RANKS 2048
static int H = 64, P = 4, K = 32;
static unsigned compile_ms = 500, object_kb = 16;
static char **sources;

typedef struct shared {
    _Atomic int go;
    char remote[256];
    uint64_t builds[MAX_RANKS];
} shared;

static int rank(int host, int proc, void *arg)
{
    shared *s = arg;
    kpc_context *ctx;
    kpc_cache *cache = bn_rank_open(&s->go, s->remote, &ctx);
    if (cache == NULL)
        return 1;
    kpc_source *srcs = calloc((size_t)K, sizeof *srcs);
    kpc_program **progs = calloc((size_t)K, sizeof *progs);
    for (int j = 0; j < K; j++)
        srcs[j] = (kpc_source){.code = sources[j], .name = "scale.hip"};
    int bad = kpc_program_get_many(ctx, srcs, (size_t)K, progs, NULL) != KPC_OK;
    for (int j = 0; j < K; j++)
        kpc_program_release(progs[j]);
    s->builds[host * P + proc] = bn_rank_close(cache, ctx);
    free(srcs);
    free(progs);
    return bad;
}

/* A node that serves keys, and what this bench asked of it (its own share of the figures). */
typedef struct node {
    int port;
    redisContext *probe;
    long long cmds0, in0, out0, cmds, in, out; /* INFO stats before and after, less the probes */
    long long probe_cmds, probe_in, probe_out;
    int peak;
} node;

static long long field(const char *info, const char *name)
{
    const char *p = strstr(info, name);
    return p ? atoll(p + strlen(name)) : -1;
}

/* INFO section on n's probe connection, counted as the probe's own traffic. */
static redisReply *probe(node *n, const char *section)
{
    redisReply *rep = redisCommand(n->probe, "INFO %s", section);
    if (rep == NULL || rep->type != REDIS_REPLY_STRING)
        bn_die("INFO on port %d failed", n->port);
    n->probe_cmds++;
    n->probe_in += 20 + (long long)strlen(section);
    n->probe_out += (long long)rep->len + 12;
    return rep;
}

static void stats_of(node *n, long long *cmds, long long *in, long long *out)
{
    redisReply *rep = probe(n, "stats");
    *cmds = field(rep->str, "total_commands_processed:");
    *in = field(rep->str, "total_net_input_bytes:");
    *out = field(rep->str, "total_net_output_bytes:");
    freeReplyObject(rep);
}

/* One storm of H x P ranks on url; its wall in seconds, the builds in *builds. */
static double storm(const char *url, node *nodes, int n_nodes, const char *base, uint64_t *builds)
{
    shared *s = tc_shared(sizeof *s);
    if (s == NULL)
        bn_die("storm set-up failed");
    snprintf(s->remote, sizeof s->remote, "%s", url);
    pid_t leader = tc_hosts_start(0, H, P, base, false, rank, s);
    usleep(200000 + (useconds_t)H * P * 2000); /* every host's ranks forked and waiting */
    for (int i = 0; i < n_nodes; i++) {
        stats_of(&nodes[i], &nodes[i].cmds0, &nodes[i].in0, &nodes[i].out0);
        nodes[i].probe_cmds = nodes[i].probe_in = nodes[i].probe_out = 0;
        nodes[i].peak = 0;
    }
    uint64_t t0 = bn_now_ns();
    atomic_store(&s->go, 1);
    int st = 0;
    while (waitpid(leader, &st, WNOHANG) == 0) {
        for (int i = 0; i < n_nodes; i++) {
            redisReply *rep = probe(&nodes[i], "clients");
            int c = (int)field(rep->str, "connected_clients:") - 1; /* not the probe */
            nodes[i].peak = c > nodes[i].peak ? c : nodes[i].peak;
            freeReplyObject(rep);
        }
        usleep(5000);
    }
    double wall = (double)(bn_now_ns() - t0) / 1e9;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bn_die("storm: %d ranks failed", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    for (int i = 0; i < n_nodes; i++) {
        node *n = &nodes[i];
        long long pc = n->probe_cmds, pi = n->probe_in, po = n->probe_out, c, in, out;
        stats_of(n, &c, &in, &out);
        n->cmds = c - n->cmds0 - pc;
        n->in = in - n->in0 - pi;
        n->out = out - n->out0 - po;
    }
    *builds = 0;
    for (int i = 0; i < H * P; i++)
        *builds += s->builds[i];
    munmap(s, sizeof *s);
    return wall;
}

static void connect_nodes(node *nodes, int n)
{
    for (int i = 0; i < n; i++) {
        struct timeval tv = {5, 0};
        nodes[i].probe = redisConnectWithTimeout("127.0.0.1", nodes[i].port, tv);
        if (nodes[i].probe == NULL || nodes[i].probe->err)
            bn_die("connecting to port %d failed", nodes[i].port);
    }
}

/* Figure 12's rows for one target: the cold storm, the warm one, the nodes. */
static void rows_for(const char *what, const char *url, node *nodes, int n_nodes)
{
    char fig[200], v[64], rv[64], ratio[64];
    static int variant = 5000;
    for (int i = 0; i < K; i++) { /* sources of this target's own: a cold cache */
        free(sources[i]);
        sources[i] = bn_multi_source(2, variant++);
    }
    connect_nodes(nodes, n_nodes);
    char *base = bn_tmpdir();
    uint64_t builds, warm_builds;
    bn_say("scale: %s, %d hosts x %d ranks x %d keys, compiles of %u ms and %u KB: cold", what, H, P, K, compile_ms,
           object_kb);
    double cold = storm(url, nodes, n_nodes, base, &builds);
    node cold_nodes[16];
    memcpy(cold_nodes, nodes, (size_t)n_nodes * sizeof *nodes);
    bn_cleanup(base);
    base = bn_tmpdir();
    bn_say("scale: %s: warm (fresh hosts, every record in Redis)", what);
    double warm = storm(url, nodes, n_nodes, base, &warm_builds);
    bn_cleanup(base);
    int rounds = (K + H * P - 1) / (H * P);
    double bound = rounds * compile_ms / 1e3 + warm;

    snprintf(fig, sizeof fig, "12 scale %dx%dx%d (%u ms, %u KB), %s: builds", H, P, K, compile_ms, object_kb, what);
    snprintf(v, sizeof v, "%llu builds", (unsigned long long)builds);
    snprintf(rv, sizeof rv, "%d", K);
    bn_row("scale_builds", fig, v, "K", rv, builds == (uint64_t)K ? "1.0x" : "more", "builds == K",
           builds == (uint64_t)K, (double)builds, "builds");
    snprintf(fig, sizeof fig, "12 scale %dx%dx%d (%u ms, %u KB), %s: cold wall", H, P, K, compile_ms, object_kb, what);
    bn_fmt_time(v, sizeof v, cold);
    bn_fmt_time(rv, sizeof rv, bound);
    snprintf(ratio, sizeof ratio, "%.2fx (warm %.2f s)", cold / bound, warm);
    bn_row("scale_wall", fig, v, "bound: rounds x compile + warm wall", rv, ratio, "<= 1.5x bound", cold <= 1.5 * bound,
           cold, "s");
    long long most = 0, total = 0;
    int peak = 0;
    for (int i = 0; i < n_nodes; i++) {
        node *n = &cold_nodes[i];
        bn_say("scale: %s: node %d (port %d), cold: %lld commands (%.0f/s), %lld bytes in, %lld bytes out, "
               "peak %d clients; warm: %lld commands, %lld bytes out, peak %d clients",
               what, i, n->port, n->cmds, (double)n->cmds / cold, n->in, n->out, n->peak, nodes[i].cmds,
               nodes[i].out, nodes[i].peak);
        total += n->cmds;
        most = n->cmds > most ? n->cmds : most;
        peak = n->peak > peak ? n->peak : peak;
        redisFree(nodes[i].probe);
    }
    if (n_nodes > 1) {
        double even = (double)total / n_nodes;
        snprintf(fig, sizeof fig, "12 scale %dx%dx%d, %s: the busiest primary's commands (cold)", H, P, K, what);
        snprintf(v, sizeof v, "%lld", most);
        snprintf(rv, sizeof rv, "%.0f", even);
        snprintf(ratio, sizeof ratio, "%.2fx", most / even);
        bn_row("scale_busiest", fig, v, "an even share", rv, ratio, "<= 1.5x an even share", most <= 1.5 * even,
               (double)most, "commands");
    }
    snprintf(fig, sizeof fig, "12 scale %dx%dx%d, %s: clients at peak on the busiest node (cold)", H, P, K, what);
    snprintf(v, sizeof v, "%d", peak);
    snprintf(rv, sizeof rv, "%d", 2 * H);
    snprintf(ratio, sizeof ratio, "%.2f per host", (double)peak / H);
    bn_row("scale_peak_clients", fig, v, "two per host", rv, ratio, "<= 2 per host", peak <= 2 * H, (double)peak,
           "clients");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--hosts") == 0 && i + 1 < argc)
            H = atoi(argv[++i]);
        else if (strcmp(argv[i], "--procs") == 0 && i + 1 < argc)
            P = atoi(argv[++i]);
        else if (strcmp(argv[i], "--k") == 0 && i + 1 < argc)
            K = atoi(argv[++i]);
        else if (strcmp(argv[i], "--compile-ms") == 0 && i + 1 < argc)
            compile_ms = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--object-kb") == 0 && i + 1 < argc)
            object_kb = (unsigned)atoi(argv[++i]);
        else
            bn_die("usage: bench_scale [--hosts H] [--procs P] [--k K] [--compile-ms C] [--object-kb S]");
    }
    if (H < 1 || P < 1 || H * P > MAX_RANKS || K < 1 || object_kb < 1)
        bn_die("bad sizes");
    if (!kpc_remote_built())
        bn_die("this kpc was built without the remote tier (hiredis, libsodium)");
    if (!tc_hosts_possible()) {
        bn_say("scale: skipped: simulated hosts need root and unshare (%s)", tc_hosts_why_not());
        return 0;
    }
    bn_fake_install_sleeping(compile_ms, (size_t)object_kb * 1024);
    /* hundreds of ranks released at once on a few cores: a healthy Redis may answer late */
    setenv("KPC_REMOTE_TIMEOUT_MS", "5000", 1);
    char *secret_dir = bn_tmpdir();
    char secret[4200];
    if (!tc_secret_file(secret_dir, secret, sizeof secret))
        bn_die("writing %s failed", secret);
    setenv("KPC_REMOTE_SECRET_FILE", secret, 1);
    sources = calloc((size_t)K, sizeof *sources);

    tc_redis server;
    if (!tc_redis_start(&server))
        bn_die("redis-server could not be started");
    node one = {.port = server.port};
    rows_for("one server", server.url, &one, 1);
    tc_redis_stop(&server);

    tc_cluster cl;
    char why[256];
    if (!tc_cluster_start(&cl, why, sizeof why))
        bn_say("scale: the cluster: skipped: %s", why);
    else {
        int prim[TC_NODES], n = tc_cluster_primaries(&cl, prim);
        node nodes[TC_NODES];
        for (int i = 0; i < n; i++)
            nodes[i] = (node){.port = cl.node[prim[i]].port};
        rows_for("3 primaries", cl.seeds, nodes, n);
        tc_cluster_stop(&cl);
    }
    bn_cleanup(secret_dir);
    return 0;
}
