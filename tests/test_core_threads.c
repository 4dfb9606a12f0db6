/*
 * test_core_threads.c - the core library under threads, through real
 * compiles: eight threads asking three sources build each once, a failing source
 * compiles once, the last log is per thread, the LRU drops only the map's reference,
 * and the hits of more threads than there are hit counters are each counted once.
 */
#define _GNU_SOURCE
#include "support.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core_support.h"

/* ---- threads ---- */
typedef struct thread_arg {
    kpc_context *ctx;
    pthread_barrier_t *barrier;
    const kpc_source *srcs;
    int nsrc;
    kpc_status status[8];
    char log[256];
    const void *code[8];
    kpc_program *prog[8];
} thread_arg;

static void *ask_all(void *p)
{
    thread_arg *a = p;
    pthread_barrier_wait(a->barrier);
    for (int i = 0; i < a->nsrc; i++) {
        a->status[i] = kpc_program_get(a->ctx, &a->srcs[i], &a->prog[i]);
        a->code[i] = a->prog[i] ? kpc_program_code(a->prog[i], NULL) : NULL;
        if (a->status[i] == KPC_E_COMPILE)
            snprintf(a->log, sizeof a->log, "%s", kpc_last_log());
    }
    return NULL;
}

static void run_threads(kpc_context *ctx, const kpc_source *srcs, int nsrc, thread_arg *args, int n)
{
    pthread_t t[16];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        args[i] = (thread_arg){.ctx = ctx, .barrier = &barrier, .srcs = srcs, .nsrc = nsrc};
        pthread_create(&t[i], NULL, ask_all, &args[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&barrier);
}

START_TEST(eight_threads_three_sources_three_builds)
{
    kpc_cache *c = ts_open(dir, KPC_NO_DISK, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source srcs[3];
    for (int i = 0; i < 3; i++)
        srcs[i] = ts_src(ts_kernel_source(10 + i), "t.hip");
    thread_arg args[8];
    run_threads(ctx, srcs, 3, args, 8);
    for (int t = 0; t < 8; t++)
        for (int i = 0; i < 3; i++) {
            ck_assert_int_eq(args[t].status[i], KPC_OK);
            ck_assert_ptr_eq(args[t].prog[i], args[0].prog[i]); /* one program per source */
            kpc_program_release(args[t].prog[i]);
        }
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 3);
    ck_assert_uint_eq(st.mem_misses, 3);
    ck_assert_uint_eq(st.mem_hits + st.waits, 8 * 3 - 3);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(eight_threads_failing_source_one_compile)
{
    kpc_cache *c = ts_open(dir, KPC_NO_DISK, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source bad = ts_src(ts_bad_source(), "broken.hip");
    thread_arg args[8];
    run_threads(ctx, &bad, 1, args, 8);
    for (int t = 0; t < 8; t++) {
        ck_assert_int_eq(args[t].status[0], KPC_E_COMPILE);
        ck_assert_ptr_null(args[t].prog[0]);
        ck_assert_msg(strstr(args[t].log, "undeclared_thing") != NULL, "thread %d log: %s", t, args[t].log);
    }
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.build_failures, 1);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_uint_eq(st.waits, 7);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(last_log_is_per_thread)
{
    kpc_cache *c = ts_open(dir, KPC_NO_DISK, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source bad = ts_src(ts_bad_source(), "broken.hip");
    kpc_program *p;
    ck_assert_int_eq(kpc_program_get(ctx, &bad, &p), KPC_E_COMPILE);
    ck_assert_str_ne(kpc_last_log(), "");
    thread_arg other;
    kpc_source good = ts_src(ts_kernel_source(1), "k.hip");
    run_threads(ctx, &good, 1, &other, 1);
    ck_assert_int_eq(other.status[0], KPC_OK);
    ck_assert_str_eq(other.log, "");
    kpc_program_release(other.prog[0]);
    ck_assert_msg(strstr(kpc_last_log(), "undeclared_thing") != NULL, "the log of this thread is kept");
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* ---- LRU ---- */
/* A cache on dir whose contexts keep at most 2 programs in memory. */
static kpc_cache *open_two_in_memory(void)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .mem_max_programs = 2};
    kpc_cache *c;
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_OK);
    return c;
}

START_TEST(lru_drops_the_map_reference_only)
{
    kpc_cache *c = open_two_in_memory();
    kpc_context *ctx = ts_context(c);
    kpc_source s[3];
    kpc_program *p[3];
    for (int i = 0; i < 3; i++) {
        s[i] = ts_src(ts_kernel_source(20 + i), "lru.hip");
        ck_assert_int_eq(kpc_program_get(ctx, &s[i], &p[i]), KPC_OK);
    }
    ck_assert_uint_eq(kpc_map_count(ctx->map), 2);
    /* the evicted program (0) is still held by us: its bytes stay valid */
    size_t size;
    const unsigned char *code = kpc_program_code(p[0], &size);
    ck_assert(ts_is_code_object(code, size));
    /* 2 is a memory hit; 0 was evicted, so it comes from disk, not from a compile */
    kpc_program *q;
    ck_assert_int_eq(kpc_program_get(ctx, &s[2], &q), KPC_OK);
    ck_assert_ptr_eq(q, p[2]);
    kpc_program_release(q);
    ck_assert_int_eq(kpc_program_get(ctx, &s[0], &q), KPC_OK);
    ck_assert_ptr_ne(q, p[0]);
    size_t size2;
    const void *code2 = kpc_program_code(q, &size2);
    ck_assert_uint_eq(size, size2);
    ck_assert_mem_eq(code, code2, size);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 3);
    ck_assert_uint_eq(st.disk_hits, 1);
    ck_assert_uint_eq(st.mem_hits, 1);
    kpc_program_release(q);
    for (int i = 0; i < 3; i++)
        kpc_program_release(p[i]);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* ---- every hit counted, with more threads than the cache has hit counters ------------ */
#define COUNTED_THREADS (KPC_HIT_SLOTS + 16)
#define COUNTED_HITS 500

typedef struct hit_arg {
    kpc_context *ctx;
    const kpc_source *src;
    pthread_barrier_t *barrier;
    int failures;
} hit_arg;

static void *hit_many(void *p)
{
    hit_arg *a = p;
    pthread_barrier_wait(a->barrier);
    for (int i = 0; i < COUNTED_HITS; i++) {
        kpc_program *prog = NULL;
        a->failures += kpc_program_get(a->ctx, a->src, &prog) != KPC_OK;
        kpc_program_release(prog);
    }
    return NULL;
}

START_TEST(every_hit_counted_with_counters_shared)
{
    kpc_cache *c = ts_open(dir, KPC_NO_DISK, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src(ts_kernel_source(30), "counted.hip");
    kpc_program *built;
    ck_assert_int_eq(kpc_program_get(ctx, &src, &built), KPC_OK); /* the build: no hit */
    kpc_program_release(built);
    /* together, 16 threads more than there are counters (core/cache.h): some counters
     * are written by two threads at once */
    static pthread_t t[COUNTED_THREADS];
    static hit_arg args[COUNTED_THREADS];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, COUNTED_THREADS);
    for (int i = 0; i < COUNTED_THREADS; i++) {
        args[i] = (hit_arg){.ctx = ctx, .src = &src, .barrier = &barrier};
        ck_assert_int_eq(pthread_create(&t[i], NULL, hit_many, &args[i]), 0);
    }
    for (int i = 0; i < COUNTED_THREADS; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(args[i].failures, 0);
    }
    pthread_barrier_destroy(&barrier);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 1);
    ck_assert_uint_eq(st.mem_hits, (uint64_t)COUNTED_THREADS * COUNTED_HITS);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {eight_threads_three_sources_three_builds,
                            eight_threads_failing_source_one_compile, last_log_is_per_thread,
                            lru_drops_the_map_reference_only, every_hit_counted_with_counters_shared,
                            NULL};
    return ts_main_case("core", "compile", 120, setup, teardown, tests);
}
