/*
 * test_index_threads.c - the host index (shm/index.c): the same scenarios (and the faults
 * that involve concurrency) in threads of one process. CTest labels it "threads", so CI
 * runs it under TSan too.
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

/* ---- threads ---------------------------------------------------------------------------- */
typedef struct thr {
    kpc_cache *cache;
    kpc_context *ctx; /* shared; NULL: the thread makes its own */
    int t, nsrc;
    const char *const *codes;
    pthread_barrier_t *bar;
    int status[MAXS];
    uint64_t hash[MAXS];
    char log[LOGCAP];
    int evict; /* run the eviction workload instead */
    uint64_t ev_hashes[64];
    int ev_result;
} thr;

static void *thr_main(void *p)
{
    thr *a = p;
    kpc_context *ctx = a->ctx;
    if (ctx == NULL && kpc_context_create_for_target(a->cache, ts_target(), &ctx) != KPC_OK)
        ctx = NULL;
    pthread_barrier_wait(a->bar);
    if (ctx == NULL) {
        a->status[0] = -1;
        return NULL;
    }
    if (a->evict) {
        a->ev_result = evict_keys(ctx, a->t, a->ev_hashes);
    } else {
        for (int k = 0; k < a->nsrc; k++) {
            int j = (a->t + k) % a->nsrc;
            kpc_source src = ts_src(a->codes[j], "thread.hip");
            kpc_program *prog = NULL;
            kpc_status s = kpc_program_get(ctx, &src, &prog);
            a->status[j] = (int)s;
            if (s == KPC_OK) {
                size_t n;
                const void *code = kpc_program_code(prog, &n);
                a->hash[j] = ts_is_code_object(code, n) ? XXH3_64bits(code, n) : 0;
                kpc_program_release(prog);
            } else {
                snprintf(a->log, LOGCAP, "%s", kpc_last_log());
            }
        }
    }
    if (a->ctx == NULL)
        kpc_context_destroy(ctx);
    return NULL;
}

/* n threads on one cache; shared_ctx: all on one context, else one context each. */
static void run_threads(kpc_cache *c, int n, bool shared_ctx, thr *t, int nsrc,
                        const char *const *codes, int evict)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    kpc_context *ctx = shared_ctx ? ts_context(c) : NULL;
    pthread_t th[MAXP];
    for (int i = 0; i < n; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i] = (thr){.cache = c, .ctx = ctx, .t = i, .nsrc = nsrc, .codes = codes, .bar = &bar,
                     .evict = evict};
        ck_assert_int_eq(pthread_create(&th[i], NULL, thr_main, &t[i]), 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    kpc_context_destroy(ctx);
    pthread_barrier_destroy(&bar);
}

static void threads_same_sources(bool shared_ctx)
{
    enum { N = 8, S = 4 };
    const char *codes[S];
    for (int j = 0; j < S; j++)
        codes[j] = ts_kernel_source(shared_ctx ? 30 + j : 34 + j);
    kpc_cache *c = ts_open(dir, 0, 0);
    thr t[N];
    run_threads(c, N, shared_ctx, t, S, codes, 0);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < S; j++) {
            ck_assert_msg(t[i].status[j] == KPC_OK, "thread %d source %d: %s: %s", i, j,
                          kpc_status_str((kpc_status)t[i].status[j]), t[i].log);
            ck_assert_msg(t[i].hash[j] != 0 && t[i].hash[j] == t[0].hash[j],
                          "thread %d got other bytes for source %d", i, j);
        }
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.builds, S);
    ck_assert_uint_eq(st.host_builds, S);
    ck_assert_uint_eq(st.entries, S);
    /* on one context the map answers repeats; on many, each context asks the index */
    ck_assert_uint_eq(st.lookups, shared_ctx ? S : N * S);
    ck_assert(kpc_index_check(c->index));
    kpc_cache_close(c);
}

START_TEST(threads_8_one_context_same_sources)
{
    threads_same_sources(true);
}
END_TEST

START_TEST(threads_8_contexts_same_sources)
{
    threads_same_sources(false);
}
END_TEST

START_TEST(threads_failure_shared)
{
    enum { N = 8 };
    const char *codes[] = {ts_bad_source()};
    kpc_cache *c = ts_open(dir, 0, 0);
    thr t[N];
    run_threads(c, N, false, t, 1, codes, 0);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(t[i].status[0], KPC_E_COMPILE);
        ck_assert_msg(strstr(t[i].log, "undeclared_thing") != NULL, "thread %d log: \"%s\"", i, t[i].log);
        ck_assert_str_eq(t[i].log, t[0].log);
    }
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.build_failures, 1);
    ck_assert_uint_eq(st.host_build_failures, 1);
    ck_assert_uint_eq(st.host_builds, 0);
    kpc_cache_close(c);
}
END_TEST

START_TEST(threads_eviction)
{
    enum { N = 4 };
    ts_fake_install();
    kpc_cache *c = ts_open(dir, 0, 64);
    thr t[N];
    run_threads(c, N, false, t, 0, NULL, 1);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(t[i].ev_result, 0);
    kpc_cache_close(c);
    assert_eviction_outcome(N, &t[0].ev_hashes, sizeof t[0]);
}
END_TEST

/* ---- faults, in threads ----------------------------------------------------------------- */
/* 4 threads (a context each) of cache c, whose index is damaged, ask for one source: all
 * get the same object, and the damage (naming needle) is logged once. */
static void threads_past_damage(kpc_cache *c, const char *needle)
{
    enum { N = 4 };
    const char *codes[] = {ts_kernel_source(20)};
    thr t[N];
    ts_log_begin(KPC_LOG_WARN);
    run_threads(c, N, false, t, 1, codes, 0);
    char *log = ts_log_end();
    for (int i = 0; i < N; i++) {
        ck_assert_msg(t[i].status[0] == KPC_OK, "thread %d: %s", i, kpc_status_str((kpc_status)t[i].status[0]));
        ck_assert(t[i].hash[0] != 0 && t[i].hash[0] == t[0].hash[0]);
    }
    ck_assert_msg(count_of(log, needle) == 1, "not logged once: \"%s\"", log);
    free(log);
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    ck_assert_uint_eq(st.capacity, 0); /* the index is off */
    kpc_cache_close(c);
}

/* In threads: the table lock's word overwritten under an open cache. */
START_TEST(threads_damaged_lock_word)
{
    setenv("KPC_SHM_LOCK_TIMEOUT_MS", "300", 1);
    precreate(0);
    uint32_t tid = NO_SUCH_TID;
    segment_write(OFF_LOCK, &tid, 4);
    kpc_cache *c = ts_open(dir, 0, 0);
    ck_assert_ptr_nonnull(c->index);
    threads_past_damage(c, LOCK_TIMEOUT_MSG);
}
END_TEST

/* In threads: the segment truncated under an open cache. */
START_TEST(threads_truncated_segment)
{
    precreate(0);
    kpc_cache *c = ts_open(dir, 0, 0);
    ck_assert_ptr_nonnull(c->index);
    char path[256];
    segment_path(dir, path, sizeof path);
    ck_assert_int_eq(truncate(path, 0), 0);
    threads_past_damage(c, "truncated");
}
END_TEST

typedef struct begin_thr {
    kpc_index *ix;
    kpc_key key;
    int verdict;
    kpc_status rc;
} begin_thr;

static void *begin_thread(void *p)
{
    begin_thr *a = p;
    enum kpc_index_verdict v = 0;
    bool waited;
    a->rc = kpc_index_begin(a->ix, &a->key, 0, &v, &waited);
    a->verdict = (int)v;
    return NULL;
}

/* In threads: threads waiting on a stopped builder process give up. */
START_TEST(threads_stopped_builder)
{
    enum { N = 4 };
    setenv("KPC_BUILD_WAIT_MAX_MS", "300", 1);
    kpc_index *ix = index_open(64);
    begin_arg a = {key_of(400), 1, 0, false};
    pid_t builder = spawn(claim_and_die, 0, &a);
    while (!atomic_load(&sh->ready))
        sleep_ms(1);
    ck_assert_int_eq(kill(builder, SIGSTOP), 0);
    begin_thr t[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        t[i] = (begin_thr){.ix = ix, .key = a.key};
        ck_assert_int_eq(pthread_create(&th[i], NULL, begin_thread, &t[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(t[i].rc, KPC_OK);
        ck_assert_int_eq(t[i].verdict, KPC_INDEX_SELF);
    }
    kpc_index_counters cn;
    kpc_index_counters_get(ix, &cn);
    ck_assert_uint_eq(cn.wait_timeouts, N);
    kill(builder, SIGKILL);
    reap(builder);
    kpc_index_close(ix);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("index_threads");
    TCase *tc = tcase(s, "threads", 120);
    tcase_add_test(tc, threads_8_one_context_same_sources);
    tcase_add_test(tc, threads_8_contexts_same_sources);
    tcase_add_test(tc, threads_failure_shared);
    tcase_add_test(tc, threads_eviction);
    tc = tcase(s, "thread_faults", 60);
    tcase_add_test(tc, threads_damaged_lock_word);
    tcase_add_test(tc, threads_truncated_segment);
    tcase_add_test(tc, threads_stopped_builder);
    return ts_run_suite(s);
}
