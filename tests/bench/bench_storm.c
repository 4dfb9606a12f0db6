/*
 * bench_storm.c - figures 3 and 7: the cold storm.
 *
 * P processes each need the same K distinct sources, on an empty cache. Every process
 * opens the cache, creates a context and gets the K sources one after the other, process
 * i starting at source i*K/P and going round (as processes that need different kernels
 * first would); all of them are forked first and released together, and the wall time
 * runs from the release to the last exit. Host builds are the sum of the processes'
 * `builds` counters. Three configurations:
 *   kpc       as built (host index + disk): the goal is builds == K exactly
 *   no-shm    KPC_NO_SHM: disk only, what a file-only cache does; duplicate builds
 *   disabled  KPC_DISABLE (no disk, no index): P x K builds
 * The reference is the ideal: the K single compile times (each timed alone, in one
 * process, after a warm-up compile) summed and spread over min(cores, K) cores.
 *
 * The runs without the index cost up to P x K compiles, so they run only for P up to
 * --noindex-max (default 8) and say so; the kpc runs are repeated --repeats times
 * (median), the others run once. One more kpc run at the smallest P >= 8 has every
 * process ask in the same order (0, 1, ..., K-1): then nothing can build ahead of the
 * one process that needs a source first, and the wall is bounded by the sum of the
 * compiles, not the ideal.
 *
 * --fake-ms N runs the same storm on the fake platform, each compile burning N ms of
 * CPU, for a machine without ROCm.
 *
 * usage: bench_storm [--fake-ms N] [--procs 2,8,32,64] [--k 16] [--depth D]
 *                    [--noindex-max P] [--repeats R] [--tag TEXT]
 */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct child_result {
    uint64_t builds;
    int failed;
} child_result;

static char **sources;
static int K = 16;

static const char *mode_name(unsigned flags)
{
    return flags == 0 ? "kpc" : flags == KPC_NO_SHM ? "no-shm (disk only)" : "disabled (KPC_DISABLE)";
}

/* One process of the storm. */
static int storm_child(const char *dir, unsigned flags, int offset, int start_fd, child_result *r)
{
    char c;
    while (read(start_fd, &c, 1) < 0 && errno == EINTR) /* EOF: the parent released us */
        ;
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .flags = flags};
    kpc_cache *cache = NULL;
    kpc_context *ctx = NULL;
    if (kpc_cache_open(&cfg, &cache) != KPC_OK ||
        kpc_context_create_for_target(cache, bn_target(), &ctx) != KPC_OK) {
        r->failed = 1;
        return 1;
    }
    for (int j = 0; j < K; j++) {
        int i = (offset + j) % K;
        kpc_source src = {.code = sources[i], .name = "storm.hip"};
        kpc_program *p = NULL;
        if (kpc_program_get(ctx, &src, &p) != KPC_OK) {
            fprintf(stderr, "storm: source %d: %s\n", i, kpc_last_log());
            r->failed = 1;
        }
        kpc_program_release(p);
    }
    kpc_stats st;
    kpc_stats_get(cache, &st);
    r->builds = st.builds;
    kpc_context_destroy(ctx);
    kpc_cache_close(cache);
    return r->failed;
}

/* One storm on a fresh cache; returns the wall seconds and the host builds. */
static double storm(int P, unsigned flags, bool same_order, uint64_t *builds)
{
    char *dir = bn_tmpdir();
    child_result *res = mmap(NULL, sizeof *res * (size_t)P, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED)
        bn_die("mmap: %s", strerror(errno));
    memset(res, 0, sizeof *res * (size_t)P);
    int gate[2];
    if (pipe(gate) != 0)
        bn_die("pipe: %s", strerror(errno));
    pid_t *pids = calloc((size_t)P, sizeof *pids);
    fflush(NULL);
    for (int i = 0; i < P; i++) {
        pids[i] = fork();
        if (pids[i] < 0)
            bn_die("fork: %s", strerror(errno));
        if (pids[i] == 0) {
            close(gate[1]);
            _exit(storm_child(dir, flags, same_order ? 0 : (int)((long)i * K / P), gate[0], &res[i]));
        }
    }
    close(gate[0]);
    struct timespec settle = {0, 50 * 1000000L}; /* let every child reach its read() */
    nanosleep(&settle, NULL);
    uint64_t t0 = bn_now_ns();
    close(gate[1]);
    int failed = 0;
    for (int i = 0; i < P; i++) {
        int st;
        while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
    }
    double wall = (double)(bn_now_ns() - t0) / 1e9;
    if (failed)
        bn_die("%d of %d storm processes failed (%s)", failed, P, mode_name(flags));
    *builds = 0;
    for (int i = 0; i < P; i++)
        *builds += res[i].builds;
    munmap(res, sizeof *res * (size_t)P);
    free(pids);
    bn_cleanup(dir);
    return wall;
}

/* Each source compiled alone, in a child (the storm's parent must never load the
 * compiler: its children are forked from it). Returns the sum of the K times. */
static double single_compiles(double *each)
{
    double *shared = mmap(NULL, sizeof(double) * (size_t)(K + 1), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED)
        bn_die("mmap: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        kpc_config cfg = {.struct_size = sizeof cfg, .flags = KPC_NO_DISK | KPC_NO_SHM,
                          .cache_dir = "/nonexistent-kpc-bench"};
        kpc_cache *cache = NULL;
        if (kpc_cache_open(&cfg, &cache) != KPC_OK)
            _exit(1);
        kpc_context *ctx = bn_context(cache);
        char *warm = bn_slow_source(K + 100, 20); /* loads the compiler */
        kpc_source w = {.code = warm, .name = "warmup.hip"};
        bn_get(ctx, &w);
        for (int i = 0; i < K; i++) {
            kpc_source src = {.code = sources[i], .name = "storm.hip"};
            uint64_t t0 = bn_now_ns();
            bn_get(ctx, &src);
            shared[i] = (double)(bn_now_ns() - t0) / 1e9;
        }
        _exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bn_die("the single-compile run failed");
    double sum = 0;
    for (int i = 0; i < K; i++)
        sum += each[i] = shared[i];
    munmap(shared, sizeof(double) * (size_t)(K + 1));
    return sum;
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    for (char *end; *s && n < max; s = *end ? end + 1 : end)
        out[n++] = (int)strtol(s, &end, 10);
    return n;
}

int main(int argc, char **argv)
{
    int procs[16] = {2, 8, 32, 64}, nprocs = 4, depth = 100, noindex_max = 8, repeats = 3;
    unsigned fake_ms = 0;
    const char *tag = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fake-ms") == 0 && i + 1 < argc)
            fake_ms = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--procs") == 0 && i + 1 < argc)
            nprocs = parse_list(argv[++i], procs, 16);
        else if (strcmp(argv[i], "--k") == 0 && i + 1 < argc)
            K = atoi(argv[++i]);
        else if (strcmp(argv[i], "--depth") == 0 && i + 1 < argc)
            depth = atoi(argv[++i]);
        else if (strcmp(argv[i], "--noindex-max") == 0 && i + 1 < argc)
            noindex_max = atoi(argv[++i]);
        else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tag") == 0 && i + 1 < argc)
            tag = argv[++i];
        else
            bn_die("usage: bench_storm [--fake-ms N] [--procs 2,8,32,64] [--k 16] [--depth D] "
                   "[--noindex-max P] [--repeats R] [--tag TEXT]");
    }
    if (K < 1 || K > 4096 || nprocs < 1 || repeats < 1)
        bn_die("bad --k, --procs or --repeats");
    if (fake_ms)
        bn_fake_install(fake_ms, 16384);
    sources = calloc((size_t)K, sizeof *sources);
    for (int i = 0; i < K; i++)
        sources[i] = bn_slow_source(i, depth);

    int cores = bn_nproc();
    double *each = calloc((size_t)K, sizeof *each);
    double sum = single_compiles(each);
    double lo = each[0], hi = each[0];
    for (int i = 1; i < K; i++)
        lo = each[i] < lo ? each[i] : lo, hi = each[i] > hi ? each[i] : hi;
    int spread = cores < K ? cores : K;
    double ideal = sum / spread;
    bn_say("%s%d single compiles: %.3f s in all (%.3f to %.3f s each); ideal on %d cores %.3f s",
           fake_ms ? "fake: " : "", K, sum, lo, hi, cores, ideal);

    char ref[96], rv[32];
    snprintf(ref, sizeof ref, "ideal: %d compiles (%.2f s) / %d cores", K, sum, spread);
    bn_fmt_time(rv, sizeof rv, ideal);
    const unsigned modes[] = {0, KPC_NO_SHM, KPC_NO_DISK | KPC_NO_SHM};
    for (int m = 0; m < 3; m++) {
        for (int pi = 0; pi < nprocs; pi++) {
            int P = procs[pi];
            if (modes[m] != 0 && P > noindex_max)
                continue;
            int reps = modes[m] == 0 ? repeats : 1;
            double *walls = calloc((size_t)reps, sizeof *walls);
            uint64_t builds = 0, max_builds = 0;
            for (int r = 0; r < reps; r++) {
                walls[r] = storm(P, modes[m], false, &builds);
                max_builds = builds > max_builds ? builds : max_builds;
            }
            double wall = bn_median(walls, (size_t)reps);
            free(walls);
            char id[64], fig[128], v[64], t[32], ratio[32], goal[96];
            snprintf(id, sizeof id, "storm_%s%s_p%d", m == 0 ? "kpc" : m == 1 ? "noshm" : "disabled",
                     tag, P);
            snprintf(fig, sizeof fig, "%s storm P=%d x K=%d, %s%s", fake_ms ? "7" : "3", P, K,
                     mode_name(modes[m]), reps > 1 ? "" : ", 1 run");
            bn_fmt_time(t, sizeof t, wall);
            snprintf(v, sizeof v, "%s, %llu builds", t, (unsigned long long)max_builds);
            snprintf(ratio, sizeof ratio, "%.2fx", wall / ideal);
            int met = -1;
            if (modes[m] == 0) {
                snprintf(goal, sizeof goal, "builds == %d; <= 1.2x ideal", K);
                met = max_builds == (uint64_t)K && wall <= 1.2 * ideal;
            } else
                snprintf(goal, sizeof goal, "(P x K = %d builds without the index)", P * K);
            bn_row(id, fig, v, ref, rv, ratio, goal, met, wall, "s");
        }
        if (m == 0) {
            /* same order in every process: the wall is bounded by the sum, not the ideal */
            int P = procs[0];
            for (int pi = 0; pi < nprocs; pi++)
                if (procs[pi] >= 8) {
                    P = procs[pi];
                    break;
                }
            uint64_t builds;
            double wall = storm(P, 0, true, &builds);
            char id[64], fig[128], v[64], t[32], ratio[32], sref[96], srv[32];
            snprintf(id, sizeof id, "storm_kpc_same_order%s_p%d", tag, P);
            snprintf(fig, sizeof fig, "%s storm P=%d x K=%d, kpc, same order, 1 run", fake_ms ? "7" : "3",
                     P, K);
            bn_fmt_time(t, sizeof t, wall);
            snprintf(v, sizeof v, "%s, %llu builds", t, (unsigned long long)builds);
            snprintf(sref, sizeof sref, "bound: sum of the %d compiles", K);
            bn_fmt_time(srv, sizeof srv, sum);
            snprintf(ratio, sizeof ratio, "%.2fx", wall / sum);
            bn_row(id, fig, v, sref, srv, ratio, "builds == K; (bound: the sum)", builds == (uint64_t)K,
                   wall, "s");
        }
    }
    bn_say("runs without the index were capped at P <= %d (P x K compiles each)", noindex_max);
    return 0;
}
