/*
 * mpi_storm.c - the start-up storm of an MPI job (issue #5): every rank of one host opens
 * the same fresh cache directory, creates a compile-only context for the test target,
 * waits at a barrier, and then asks for the same N real kernels at once.
 *
 * What must hold afterwards:
 *   - every rank got KPC_OK and a real code object for every source;
 *   - every rank got byte-identical objects (their XXH3-128 digests, gathered, match
 *     rank 0's);
 *   - the host ran exactly N compiles: the host index's `builds` counter is N, no build
 *     failed and none was taken over, the ranks' own `builds` counters add up to N, and
 *     the disk holds N records.
 *
 * Usage: mpiexec -n R mpi_storm [N]   (N: 1 to 64 sources, default 4)
 * Rank 0 makes the cache directory with mkdtemp and broadcasts it; it removes the
 * directory and the host index segment at the end. Exit status 0 when every check held
 * on every rank, 1 otherwise (every rank exits with the same status).
 */
#define _GNU_SOURCE
#include "support.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define MAX_SOURCES 64
#define DIR_CAP 4096

static int rank, ranks;

/* Report a failed check on this rank; the caller counts it. */
static int report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mpi_storm: rank %d: ", rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* Real source i: a distinct small kernel. (Not ts_kernel_source: Check's assertions in it
 * work only inside a Check test.) */
static const char *storm_source(int i)
{
    static char bufs[MAX_SOURCES][320];
    snprintf(bufs[i], sizeof bufs[i],
             "extern \"C\" __global__ void kpc_storm_k%d(float *a, const float *b, int n)\n"
             "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < n) a[i] = a[i] * %d.0f + b[i] * %d.5f;\n}\n", i, i + 3, i);
    return bufs[i];
}

/* Sum of every rank's count of failures: every rank takes the same decision after it. */
static int all_failures(int mine)
{
    int sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    return sum;
}

static int finish(int failures, const char *base)
{
    if (rank == 0 && base[0] != '\0') {
        char cache[DIR_CAP + 8], root[DIR_CAP];
        snprintf(cache, sizeof cache, "%s/cache", base);
        if (realpath(cache, root) != NULL)
            kpc_index_unlink(root);
        ts_rm_rf(base);
    }
    if (rank == 0)
        printf("mpi_storm: %s\n", failures ? "FAILED" : "ok");
    MPI_Finalize();
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (n < 1 || n > MAX_SOURCES) {
        if (rank == 0)
            fprintf(stderr, "usage: mpiexec -n R mpi_storm [N]  (N from 1 to %d)\n", MAX_SOURCES);
        MPI_Finalize();
        return 2;
    }

    /* one fresh cache directory for the whole job, made by rank 0 */
    char base[DIR_CAP] = "";
    int failures = 0;
    if (rank == 0) {
        char tmpl[] = "/tmp/kpc-mpi-storm-XXXXXX";
        if (mkdtemp(tmpl) == NULL)
            failures += report("mkdtemp: %m");
        else
            snprintf(base, sizeof base, "%s", tmpl);
    }
    MPI_Bcast(base, DIR_CAP, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (all_failures(failures))
        return finish(1, base);
    char dir[DIR_CAP + 8];
    snprintf(dir, sizeof dir, "%s/cache", base);

    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir};
    kpc_cache *cache = NULL;
    kpc_context *ctx = NULL;
    kpc_status s = kpc_cache_open(&cfg, &cache);
    if (s != KPC_OK)
        failures += report("kpc_cache_open(%s): %s", dir, kpc_status_str(s));
    else if ((s = kpc_context_create_for_target(cache, ts_target(), &ctx)) != KPC_OK)
        failures += report("kpc_context_create_for_target(%s): %s", ts_target(), kpc_status_str(s));
    if (all_failures(failures)) {
        kpc_context_destroy(ctx);
        kpc_cache_close(cache);
        return finish(1, base);
    }

    /* the storm: every rank asks for the same n sources at once. Each rank starts at its
     * own source, so that distinct sources are built at the same time by different ranks
     * while the other ranks wait for them. */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    uint8_t (*digests)[16] = calloc((size_t)n, 16);
    if (digests == NULL)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int j = 0; j < n; j++) {
        int i = (j + rank) % n;
        char name[32];
        snprintf(name, sizeof name, "storm%d.hip", i);
        kpc_source src = ts_src(storm_source(i), name);
        kpc_program *p = NULL;
        s = kpc_program_get(ctx, &src, &p);
        if (s != KPC_OK) {
            failures += report("kpc_program_get(%s): %s\n%s", name, kpc_status_str(s), kpc_last_log());
            continue;
        }
        size_t size = 0;
        const void *code = kpc_program_code(p, &size);
        if (!ts_is_code_object(code, size))
            failures += report("%s: %zu bytes that are not a code object for %s", name, size, ts_target());
        XXH128_canonicalFromHash((XXH128_canonical_t *)digests[i], XXH3_128bits(code, size));
        kpc_program_release(p);
    }
    double seconds = MPI_Wtime() - t0;

    /* byte-identical objects on every rank: compare each rank's digests with rank 0's */
    uint8_t (*all)[16] = rank == 0 ? calloc((size_t)n * (size_t)ranks, 16) : NULL;
    if (rank == 0 && all == NULL)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Gather(digests, n * 16, MPI_BYTE, all, n * 16, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int r = 1; r < ranks; r++)
            for (int i = 0; i < n; i++)
                if (memcmp(all[(size_t)r * (size_t)n + (size_t)i], all[i], 16) != 0)
                    failures += report("rank %d got another code object for source %d than rank 0", r, i);

    /* the ranks' own counters: n compiles in all */
    kpc_stats mine;
    kpc_stats_get(cache, &mine);
    unsigned long long local[3] = {mine.builds, mine.build_failures, mine.waits}, sum[3] = {0, 0, 0};
    MPI_Reduce(local, sum, 3, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

    /* every rank is done asking: the host counters are final */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        kpc_stats st;
        kpc_stats_get(cache, &st);
        printf("mpi_storm: %d ranks x %d sources for %s in %.2f s: host builds %llu, build failures "
               "%llu, waits %llu, takeovers %llu, lookups %llu, hits %llu; ranks' builds %llu, "
               "waits %llu; disk %llu files\n",
               ranks, n, ts_target(), seconds, (unsigned long long)st.host_builds,
               (unsigned long long)st.host_build_failures, (unsigned long long)st.host_waits,
               (unsigned long long)st.takeovers, (unsigned long long)st.lookups,
               (unsigned long long)st.hits, sum[0], sum[2], (unsigned long long)st.disk_files);
        if (st.capacity == 0)
            failures += report("the host index is off: nothing coordinated the ranks");
        if (st.host_builds != (uint64_t)n)
            failures += report("host builds %llu, expected exactly %d", (unsigned long long)st.host_builds, n);
        if (st.host_build_failures != 0 || sum[1] != 0)
            failures += report("%llu compiles failed", (unsigned long long)st.host_build_failures + sum[1]);
        if (st.takeovers != 0)
            failures += report("%llu takeovers, but no builder died", (unsigned long long)st.takeovers);
        if (sum[0] != (unsigned long long)n)
            failures += report("the ranks' builds add up to %llu, expected %d", sum[0], n);
        if (st.disk_files != (uint64_t)n)
            failures += report("%llu files on disk, expected %d", (unsigned long long)st.disk_files, n);
        if (st.lookups < (uint64_t)n * (uint64_t)ranks)
            failures += report("only %llu index lookups for %d requests that missed their map",
                             (unsigned long long)st.lookups, n * ranks);
    }
    free(all);
    free(digests);
    kpc_context_destroy(ctx);
    kpc_cache_close(cache);
    failures = all_failures(failures);
    return finish(failures, base);
}
