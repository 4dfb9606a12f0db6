/*
 * mpi_cluster.c - the cluster storm launched by mpirun (issue #14): the ranks are grouped
 * into simulated hosts by tests/mpi_host.sh (each rank in a mount namespace of its own, the
 * host's /dev/shm, cache dir and KPC_HOST_ID), and all share one redis-server (KPC_REMOTE).
 * Every rank asks for the same K sources at once, after a barrier.
 *
 * What must hold: every rank KPC_OK with byte-identical objects (XXH3 digests gathered
 * on rank 0), and builds == K summed over the whole job (one compile per key per
 * cluster), as many remote builds.
 *
 * Usage: mpiexec -n R mpi_host.sh DIR P mpi_cluster K real
 * Exit status 0 when every check held on every rank, 1 otherwise.
 */
#define _GNU_SOURCE
#include "support.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define MAX_K 32

int main(int argc, char **argv)
{
    int rank, ranks;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    int k = argc > 1 ? atoi(argv[1]) : 4;
    if (k < 1 || k > MAX_K) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_cluster K [real] (K from 1 to %d)\n", MAX_K);
        MPI_Finalize();
        return 2;
    }
    int failures = 0;
    kpc_cache *cache = NULL;
    kpc_context *ctx = NULL;
    kpc_status s = kpc_cache_open(NULL, &cache);
    if (s == KPC_OK)
        s = kpc_context_create_for_target(cache, ts_target(), &ctx);
    if (s != KPC_OK) {
        fprintf(stderr, "mpi_cluster: rank %d: open: %s\n", rank, kpc_status_str(s));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    uint64_t digests[MAX_K] = {0};
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int n = 0; n < k; n++) {
        int i = (n + rank) % k;
        char code[512];
        snprintf(code, sizeof code,
                 "extern \"C\" __global__ void kpc_mpi_cluster_k%d(float *a, int n)\n"
                 "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (i < n) a[i] = a[i] * %d.0f + 1.0f;\n}\n", i, i + 3);
        kpc_source src = {.code = code, .name = "mpi_cluster.hip"};
        kpc_program *p = NULL;
        if ((s = kpc_program_get(ctx, &src, &p)) != KPC_OK) {
            fprintf(stderr, "mpi_cluster: rank %d: source %d: %s\n%s", rank, i, kpc_status_str(s), kpc_last_log());
            failures++;
            continue;
        }
        size_t size;
        const void *b = kpc_program_code(p, &size);
        digests[i] = XXH3_64bits(b, size);
        failures += !ts_is_code_object(b, size);
        kpc_program_release(p);
    }
    double seconds = MPI_Wtime() - t0, slowest;
    kpc_stats st;
    kpc_stats_get(cache, &st);
    kpc_context_destroy(ctx);
    kpc_cache_close(cache);
    uint64_t mine[3] = {st.builds, st.remote_builds, st.remote_hits}, sum[3];
    MPI_Reduce(mine, sum, 3, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    uint64_t *all = rank == 0 ? calloc((size_t)ranks * MAX_K, sizeof *all) : NULL;
    MPI_Gather(digests, MAX_K, MPI_UINT64_T, all, MAX_K, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 1; r < ranks; r++)
            for (int i = 0; i < k; i++)
                if (all[(size_t)r * MAX_K + i] != all[i]) {
                    fprintf(stderr, "mpi_cluster: rank %d source %d: other bytes than rank 0's\n", r, i);
                    failures++;
                }
        if (sum[0] != (uint64_t)k || sum[1] != (uint64_t)k) {
            fprintf(stderr, "mpi_cluster: %llu builds and %llu remote builds in the job, expected %d each\n",
                    (unsigned long long)sum[0], (unsigned long long)sum[1], k);
            failures++;
        }
        printf("mpi_cluster: %d ranks x %d sources: %llu builds, %llu remote hits, slowest rank %.3f s\n",
               ranks, k, (unsigned long long)sum[0], (unsigned long long)sum[2], slowest);
        free(all);
    }
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return total ? 1 : 0;
}
