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
 * process, after a warm-up compile) summed and spread over min(cores, K, P) cores (P
 * processes, each compiling one source at a time, use at most P). Beside each kpc run
 * a context row gives the bound the ideal leaves out: every process that compiles pays
 * the compiler's start-up once (loading it, its first-use set-up; measured here), so with
 * B builder processes the wall is at least (sum + B x start-up) / min(cores, K, P).
 *
 * The runs without the index cost up to P x K compiles, so they run only for P up to
 * --noindex-max (default 8) and say so; the kpc runs are repeated --repeats times
 * (median), the others run once. One more kpc run at the smallest P >= 8 has every
 * process ask in the same order (0, 1, ..., K-1): then nothing can build ahead of the
 * one process that needs a source first, and the wall is bounded by the sum of the
 * compiles, not the ideal.
 *
 * --batch-procs 2,8,32 (figure 9) runs, for each P listed, the same-order storm twice:
 * every process getting the K sources one at a time with kpc_program_get (the builds
 * follow one another: bounded by the sum), then with one kpc_program_get_many call
 * (each process builds the next key nobody has claimed, so the builds spread over the
 * cores). Each row gives builds (K is the goal) and the wall beside the ideal (the K
 * compiles over min(P, cores)); a third row gives the bound with the builders' compiler
 * start-ups, (sum + B x start-up) / min(P, cores), and get_many's wall against it (goal:
 * within 1.3x).
 *
 * --fake-ms N runs the same storm on the fake platform, each compile burning N ms of
 * CPU, for a machine without ROCm.
 *
 * usage: bench_storm [--fake-ms N] [--procs 2,8,32,64] [--k 16] [--depth D]
 *                    [--noindex-max P] [--repeats R] [--tag TEXT] [--batch-procs 2,8,32]
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

/* One process of the storm; batch: one kpc_program_get_many for the K sources (in
 * order from offset) instead of K kpc_program_get. */
static int storm_child(const char *dir, unsigned flags, int offset, bool batch, int start_fd, child_result *r)
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
    kpc_source *srcs = calloc((size_t)K, sizeof *srcs);
    kpc_program **progs = calloc((size_t)K, sizeof *progs);
    for (int j = 0; j < K; j++)
        srcs[j] = (kpc_source){.code = sources[(offset + j) % K], .name = "storm.hip"};
    if (batch && kpc_program_get_many(ctx, srcs, (size_t)K, progs, NULL) != KPC_OK) {
        fprintf(stderr, "storm: get_many: %s\n", kpc_last_log());
        r->failed = 1;
    }
    for (int j = 0; j < K; j++) {
        if (!batch && kpc_program_get(ctx, &srcs[j], &progs[j]) != KPC_OK) {
            fprintf(stderr, "storm: source %d: %s\n", (offset + j) % K, kpc_last_log());
            r->failed = 1;
        }
        kpc_program_release(progs[j]);
    }
    free(srcs);
    free(progs);
    kpc_stats st;
    kpc_stats_get(cache, &st);
    r->builds = st.builds;
    kpc_context_destroy(ctx);
    kpc_cache_close(cache);
    return r->failed;
}

/* One storm on a fresh cache; returns the wall seconds and the host builds; *builders
 * gets how many processes compiled at least once (each paid the compiler's start-up). */
static double storm(int P, unsigned flags, bool same_order, bool batch, uint64_t *builds, int *builders)
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
            _exit(storm_child(dir, flags, same_order ? 0 : (int)((long)i * K / P), batch, gate[0], &res[i]));
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
    *builders = 0;
    for (int i = 0; i < P; i++) {
        *builds += res[i].builds;
        *builders += res[i].builds > 0;
    }
    munmap(res, sizeof *res * (size_t)P);
    free(pids);
    bn_cleanup(dir);
    return wall;
}

/* Wait for a child; exit if it failed. */
static void reap(pid_t pid, const char *what)
{
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bn_die("%s failed", what);
}

/* Each source compiled alone, in a child (the storm's parent must never load the
 * compiler: its children are forked from it). Returns the sum of the K times, each timed
 * with the compiler already loaded and warm. *startup gets what a storm process pays on
 * its first compile on top of that: the first compile in a process whose context
 * recalled the compiler's identity from the cache directory (as a storm process does, so
 * that compile loads the compiler), of one more source of the same kind, minus the
 * median of the K warm compiles. */
static double single_compiles(int depth, double *each, double *startup)
{
    double *shared = mmap(NULL, sizeof(double) * (size_t)(K + 1), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED)
        bn_die("mmap: %s", strerror(errno));
    char *dir = bn_tmpdir();
    fflush(NULL);
    /* remembers the identity and the target in dir, and compiles one throwaway source:
     * on a machine just started, the first process to compile pages the compiler's
     * libraries in from disk, and NVRTC then ran ten times slower for a whole process
     * (0.45 s against 0.045 s a compile on the 16-core machine), which no storm process
     * pays: they all start after this */
    pid_t pid = fork();
    if (pid == 0) {
        kpc_cache *cache = bn_open(dir, KPC_NO_SHM, 0);
        kpc_context *ctx = bn_context(cache);
        char *warm = bn_slow_source(K + 1, depth);
        kpc_source src = {.code = warm, .name = "warm-up.hip"};
        bn_get(ctx, &src);
        free(warm);
        kpc_context_destroy(ctx);
        kpc_cache_close(cache);
        _exit(0);
    }
    reap(pid, "the identity run");
    pid = fork();
    if (pid == 0) {
        kpc_cache *cache = bn_open(dir, KPC_NO_SHM, 0);
        kpc_context *ctx = bn_context(cache);
        kpc_source first = {.code = sources[K], .name = "storm.hip"};
        uint64_t t0 = bn_now_ns();
        bn_get(ctx, &first); /* loads the compiler */
        shared[K] = (double)(bn_now_ns() - t0) / 1e9;
        /* the same cache (each source is new to it) and context: a compile as a storm
         * process runs it, store included; no context made without the cache dir, which
         * would load the driver to compute the identity (NVRTC compiled ten times slower
         * on the 16-core machine in a process that had) */
        for (int i = 0; i < K; i++) {
            kpc_source src = {.code = sources[i], .name = "storm.hip"};
            t0 = bn_now_ns();
            bn_get(ctx, &src);
            shared[i] = (double)(bn_now_ns() - t0) / 1e9;
        }
        _exit(0);
    }
    reap(pid, "the single-compile run");
    bn_cleanup(dir);
    double sum = 0;
    for (int i = 0; i < K; i++)
        sum += each[i] = shared[i];
    double *sorted = calloc((size_t)K, sizeof *sorted);
    memcpy(sorted, each, sizeof *sorted * (size_t)K);
    *startup = shared[K] - bn_median(sorted, (size_t)K);
    free(sorted);
    munmap(shared, sizeof(double) * (size_t)(K + 1));
    return sum;
}

/* Figure 9: the same-order storm of P processes one at a time, then with get_many (the
 * median of `repeats` runs each), beside the ideal, and get_many against the bound with
 * its builders' start-ups. */
static void batch_rows(int P, int repeats, double sum, double startup, int spread, unsigned fake_ms,
                       const char *tag)
{
    int n = P < spread ? P : spread;
    double ideal = sum / n;
    char ref[96], rv[32];
    snprintf(ref, sizeof ref, "ideal: %d compiles (%.2f s) / %d cores", K, sum, n);
    bn_fmt_time(rv, sizeof rv, ideal);
    /* the two ways alternate, run by run, so that a load that comes and goes on a shared
     * machine falls on both alike */
    double *walls[2], *bps[2];
    uint64_t max_builds[2] = {0, 0}, min_builds[2] = {UINT64_MAX, UINT64_MAX};
    for (int batch = 0; batch < 2; batch++) {
        walls[batch] = calloc((size_t)repeats, sizeof *walls[batch]);
        bps[batch] = calloc((size_t)repeats, sizeof *bps[batch]);
    }
    for (int r = 0; r < repeats; r++)
        for (int batch = 0; batch < 2; batch++) {
            uint64_t builds;
            int builders;
            walls[batch][r] = storm(P, 0, true, batch, &builds, &builders);
            bps[batch][r] = builders;
            max_builds[batch] = builds > max_builds[batch] ? builds : max_builds[batch];
            min_builds[batch] = builds < min_builds[batch] ? builds : min_builds[batch];
            bn_say("same order P=%d, %s, run %d: %.2f s, %llu builds in %d procs", P,
                   batch ? "get_many" : "one at a time", r + 1, walls[batch][r], (unsigned long long)builds,
                   builders);
        }
    double many_wall = 0, many_builders = 0;
    for (int batch = 0; batch < 2; batch++) {
        double wall = bn_median(walls[batch], (size_t)repeats), bp = bn_median(bps[batch], (size_t)repeats);
        free(walls[batch]);
        free(bps[batch]);
        char id[64], fig[128], v[64], t[32], ratio[32];
        snprintf(id, sizeof id, "storm_same_order_%s%s_p%d", batch ? "get_many" : "one_at_a_time", tag, P);
        snprintf(fig, sizeof fig, "%s same order P=%d x K=%d, %s%s", fake_ms ? "9f" : "9", P, K,
                 batch ? "kpc_program_get_many" : "one kpc_program_get at a time",
                 repeats > 1 ? "" : ", 1 run");
        bn_fmt_time(t, sizeof t, wall);
        snprintf(v, sizeof v, "%s, %llu builds in %.0f procs", t, (unsigned long long)max_builds[batch], bp);
        snprintf(ratio, sizeof ratio, "%.2fx", wall / ideal);
        bool k_builds = max_builds[batch] == (uint64_t)K && min_builds[batch] == (uint64_t)K;
        bn_row(id, fig, v, ref, rv, ratio, batch ? "builds == K" : "builds == K (the wall: about the sum)",
               k_builds, wall, "s");
        if (batch)
            many_wall = wall, many_builders = bp;
    }
    double bound = (sum + many_builders * startup) / n;
    char id[64], fig[128], bv[32], t[32], ratio[32];
    snprintf(id, sizeof id, "storm_same_order_bound%s_p%d", tag, P);
    snprintf(fig, sizeof fig, "%s same order P=%d: bound with %.0f compiler start-ups", fake_ms ? "9f" : "9", P,
             many_builders);
    bn_fmt_time(bv, sizeof bv, bound);
    bn_fmt_time(t, sizeof t, many_wall);
    snprintf(ratio, sizeof ratio, "%.2fx", many_wall / bound);
    bn_row(id, fig, bv, "get_many's wall, as above", t, ratio, "get_many <= 1.3x (sum + B x start-up) / cores",
           many_wall <= 1.3 * bound, bound, "s");
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
    int batch_procs[16], nbatch = 0;
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
        else if (strcmp(argv[i], "--batch-procs") == 0 && i + 1 < argc)
            nbatch = parse_list(argv[++i], batch_procs, 16);
        else
            bn_die("usage: bench_storm [--fake-ms N] [--procs 2,8,32,64] [--k 16] [--depth D] "
                   "[--noindex-max P] [--repeats R] [--tag TEXT] [--batch-procs 2,8,32]");
    }
    if (K < 1 || K > 4096 || nprocs < 1 || repeats < 1)
        bn_die("bad --k, --procs or --repeats");
    if (fake_ms)
        bn_fake_install(fake_ms, 16384);
    sources = calloc((size_t)K + 1, sizeof *sources);
    for (int i = 0; i <= K; i++) /* sources[K]: the start-up measurement's */
        sources[i] = bn_slow_source(i, depth);

    int cores = bn_nproc();
    double *each = calloc((size_t)K, sizeof *each);
    double startup;
    double sum = single_compiles(depth, each, &startup);
    double lo = each[0], hi = each[0];
    for (int i = 1; i < K; i++)
        lo = each[i] < lo ? each[i] : lo, hi = each[i] > hi ? each[i] : hi;
    int spread = cores < K ? cores : K;
    double ideal = sum / spread; /* for P >= spread; fewer processes use fewer cores */
    char list[16 * 12] = "";
    for (int i = 0; i < K && i < 16; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), " %.3f", each[i]);
    bn_say("single compiles, s:%s%s", list, K > 16 ? " ..." : "");
    bn_say("%s%d single compiles: %.3f s in all (%.3f to %.3f s each); ideal on %d cores %.3f s; "
           "a new process's first compile costs %.3f s more", fake_ms ? "fake: " : "", K, sum, lo, hi,
           cores, ideal, startup);

    char ref[96], rv[32], ratio_buf[32];
    const unsigned modes[] = {0, KPC_NO_SHM, KPC_NO_DISK | KPC_NO_SHM};
    for (int m = 0; m < 3; m++) {
        for (int pi = 0; pi < nprocs; pi++) {
            int P = procs[pi];
            if (modes[m] != 0 && P > noindex_max)
                continue;
            int reps = modes[m] == 0 ? repeats : 1;
            double *walls = calloc((size_t)reps, sizeof *walls), *bps = calloc((size_t)reps, sizeof *bps);
            uint64_t builds = 0, max_builds = 0;
            for (int r = 0; r < reps; r++) {
                int builders;
                walls[r] = storm(P, modes[m], false, false, &builds, &builders);
                bps[r] = builders;
                max_builds = builds > max_builds ? builds : max_builds;
            }
            double wall = bn_median(walls, (size_t)reps), bp = bn_median(bps, (size_t)reps);
            free(walls);
            free(bps);
            /* P processes compile on at most P cores at once */
            int n = P < spread ? P : spread;
            double ideal_p = sum / n;
            snprintf(ref, sizeof ref, "ideal: %d compiles (%.2f s) / %d cores", K, sum, n);
            bn_fmt_time(rv, sizeof rv, ideal_p);
            char id[64], fig[128], v[64], t[32], ratio[32], goal[96];
            snprintf(id, sizeof id, "storm_%s%s_p%d", m == 0 ? "kpc" : m == 1 ? "noshm" : "disabled",
                     tag, P);
            snprintf(fig, sizeof fig, "%s storm P=%d x K=%d, %s%s", fake_ms ? "7" : "3", P, K,
                     mode_name(modes[m]), reps > 1 ? "" : ", 1 run");
            bn_fmt_time(t, sizeof t, wall);
            snprintf(v, sizeof v, "%s, %llu builds in %.0f procs", t, (unsigned long long)max_builds, bp);
            snprintf(ratio, sizeof ratio, "%.2fx", wall / ideal_p);
            int met = -1;
            if (modes[m] == 0) {
                snprintf(goal, sizeof goal, "builds == %d; <= 1.2x ideal", K);
                met = max_builds == (uint64_t)K && wall <= 1.2 * ideal_p;
            } else
                snprintf(goal, sizeof goal, "(P x K = %d builds without the index)", P * K);
            bn_row(id, fig, v, ref, rv, ratio, goal, met, wall, "s");
            if (modes[m] == 0) {
                /* what the ideal leaves out: every process that compiles pays the
                 * compiler's start-up once, bp of them, spread over the same cores */
                double bound = (sum + bp * startup) / n;
                char bv[32], bfig[128];
                snprintf(id, sizeof id, "storm_bound%s_p%d", tag, P);
                snprintf(bfig, sizeof bfig, "%s storm P=%d: bound with %.0f compiler start-ups",
                         fake_ms ? "7" : "3", P, bp);
                bn_fmt_time(bv, sizeof bv, bound);
                snprintf(ratio, sizeof ratio, "%.2fx", wall / bound);
                bn_row(id, bfig, bv, "kpc's wall, as above", t, ratio,
                       "(context: (sum + builders x start-up) / cores)", -1, bound, "s");
            }
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
            int builders;
            double wall = storm(P, 0, true, false, &builds, &builders);
            char id[64], fig[128], v[64], t[32], ratio[32], sref[96], srv[32];
            snprintf(id, sizeof id, "storm_kpc_same_order%s_p%d", tag, P);
            snprintf(fig, sizeof fig, "%s storm P=%d x K=%d, kpc, same order, 1 run", fake_ms ? "7" : "3",
                     P, K);
            bn_fmt_time(t, sizeof t, wall);
            snprintf(v, sizeof v, "%s, %llu builds in %d procs", t, (unsigned long long)builds, builders);
            snprintf(sref, sizeof sref, "bound: sum of the %d compiles", K);
            bn_fmt_time(srv, sizeof srv, sum);
            snprintf(ratio, sizeof ratio, "%.2fx", wall / sum);
            bn_row(id, fig, v, sref, srv, ratio, "builds == K; (bound: the sum)", builds == (uint64_t)K,
                   wall, "s");
        }
    }
    for (int bi = 0; bi < nbatch; bi++)
        batch_rows(batch_procs[bi], repeats, sum, startup, spread, fake_ms, tag);
    /* context: the start-up every process that compiles pays, which the ideal leaves out */
    char sv[32], bound[32], sref2[96];
    bn_fmt_time(sv, sizeof sv, startup);
    bn_fmt_time(bound, sizeof bound, ideal + startup);
    snprintf(sref2, sizeof sref2, "ideal (%d cores) + one start-up per core", spread);
    snprintf(ratio_buf, sizeof ratio_buf, "%.2fx ideal", (ideal + startup) / ideal);
    char sid[64], sfig[96];
    snprintf(sid, sizeof sid, "storm_startup%s", tag);
    snprintf(sfig, sizeof sfig, "%s compiler start-up in a new process", fake_ms ? "7" : "3");
    bn_row(sid, sfig, sv, sref2, bound, ratio_buf, "(context: first compile - warm compile)", -1,
           startup, "s");
    bn_say("runs without the index were capped at P <= %d (P x K compiles each)", noindex_max);
    return 0;
}
