/*
 * test_index_storm.c - the host index (shm/index.c): storms of processes on one cold cache.
 *
 * 16 processes x 4 real sources; a failing source asked by 8 processes; a READY entry
 * whose file vanished (rebuilt once).
 */
#define _GNU_SOURCE
#include "support.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "index_support.h"

/* ---- storm ------------------------------------------------------------------------------ */
START_TEST(storm_16_processes_4_sources)
{
    enum { N = 16, S = 4 };
    const char *codes[S];
    for (int j = 0; j < S; j++)
        codes[j] = ts_kernel_source(40 + j);
    storm_arg a = {.nproc = N, .nsrc = S, .codes = codes, .rotate = true};
    double t0 = now_s();
    int ok = ts_run_children(N, storm_child, &a);
    double total = now_s() - t0;
    ck_assert_int_eq(ok, N);
    assert_same_objects(N, S, -1);

    double first = 1e30, last = 0;
    uint64_t builds = 0, disk_hits = 0;
    for (int i = 0; i < N; i++) {
        first = sh->t_begin[i] < first ? sh->t_begin[i] : first;
        last = sh->t_end[i] > last ? sh->t_end[i] : last;
        builds += sh->builds[i];
        disk_hits += sh->disk_hits[i];
    }
    bool check;
    kpc_stats st = host_stats(&check);
    fprintf(stderr, "index storm: %d processes x %d sources, cold cache: host builds %llu, "
            "waits %llu, hits %llu; requests %.2f s, fork to last exit %.2f s\n", N, S,
            (unsigned long long)st.host_builds, (unsigned long long)st.host_waits,
            (unsigned long long)st.hits, last - first, total);
    ck_assert_uint_eq(st.host_builds, S);
    ck_assert_uint_eq(builds, S); /* the processes' own counters agree */
    ck_assert_uint_eq(disk_hits, N * S - S);
    ck_assert_uint_eq(st.host_build_failures, 0);
    ck_assert_uint_eq(st.takeovers, 0);
    ck_assert_uint_eq(st.lookups, N * S); /* one index lookup per request */
    ck_assert_uint_eq(st.hits, N * S - S);
    ck_assert_uint_eq(st.entries, S);
    ck_assert(check);

    /* and the parent, a process of its own, reads the same bytes from the cache */
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    for (int j = 0; j < S; j++) {
        size_t size;
        ck_assert_uint_eq(hash_now(ctx, codes[j], &size), sh->hash[0][j]);
        ck_assert_uint_eq(size, sh->size[0][j]);
    }
    kpc_stats mine;
    kpc_stats_get(c, &mine);
    ck_assert_uint_eq(mine.builds, 0);
    ck_assert_uint_eq(mine.host_builds, S);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

static void assert_compile_failures(int from, int to, const char *ref_log)
{
    for (int i = from; i < to; i++) {
        ck_assert_msg(sh->status[i][0] == KPC_E_COMPILE, "child %d: %s", i,
                      kpc_status_str((kpc_status)sh->status[i][0]));
        ck_assert_msg(strstr(sh->log[i], "undeclared_thing") != NULL && strstr(sh->log[i], "error"),
                      "child %d: the log does not name the error: \"%s\"", i, sh->log[i]);
        ck_assert_str_eq(sh->log[i], ref_log);
    }
}

START_TEST(failure_shared_by_8_processes)
{
    enum { N = 8 };
    const char *codes[] = {ts_bad_source()};
    storm_arg a = {.nproc = N, .nsrc = 1, .codes = codes};
    ck_assert_int_eq(ts_run_children(N, storm_child, &a), N);
    uint64_t failures = 0;
    for (int i = 0; i < N; i++)
        failures += sh->failures[i];
    assert_compile_failures(0, N, sh->log[0]);
    ck_assert_uint_eq(failures, 1);
    kpc_stats st = host_stats(NULL);
    ck_assert_uint_eq(st.host_build_failures, 1);
    ck_assert_uint_eq(st.host_builds, 0);
    ck_assert_uint_eq(st.lookups, N);

    /* a process that comes later gets the same failure without compiling */
    storm_arg late = {.nproc = 0, .nsrc = 1, .codes = codes};
    ck_assert_int_eq(ts_run_children(1, storm_child, &late), 1);
    assert_compile_failures(0, 1, sh->log[1]);
    ck_assert_uint_eq(sh->failures[0], 0);
    st = host_stats(NULL);
    ck_assert_uint_eq(st.host_build_failures, 1);
    ck_assert_uint_eq(st.host_builds, 0);
}
END_TEST

/* The index says READY but the file is gone (kpc clear, a prune, a hand): 8 processes
 * that find so at once rebuild it once between them. */
START_TEST(stale_ready_rebuilt_once)
{
    enum { N = 8 };
    ts_fake_install();
    const char *codes[] = {"// sleep_ms=300\n__global__ void stale() {}\n"};
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    size_t size;
    uint64_t h = hash_now(ctx, codes[0], &size);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ck_assert_uint_eq(ts_fake_compiles(), 1);
    char tree[4200];
    snprintf(tree, sizeof tree, "%s/v1/%s", dir, ts_target());
    ts_rm_rf(tree);

    storm_arg a = {.nproc = N, .nsrc = 1, .codes = codes};
    ck_assert_int_eq(ts_run_children(N, storm_child, &a), N);
    assert_same_objects(N, 1, -1);
    ck_assert_uint_eq(sh->hash[0][0], h);
    ck_assert_uint_eq(ts_fake_compiles(), 2);
    bool check;
    kpc_stats st = host_stats(&check);
    ck_assert_uint_eq(st.host_builds, 2);
    ck_assert_uint_eq(st.entries, 1);
    ck_assert(check);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {storm_16_processes_4_sources, failure_shared_by_8_processes,
                            stale_ready_rebuilt_once, NULL};
    return index_main("storm", 120, tests);
}
