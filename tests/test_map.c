/*
 * test_map.c - the per-context map under threads, through real compiles: hits take no
 * lock (core/map.c), so an entry or a program must outlive every thread still holding it
 * while other threads evict and rebuild around it; and freed once, by its last holder
 * (the fake device's module unloads count the frees).
 */
#define _GNU_SOURCE
#include "support.h"
#include "core_support.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

/* Threads hitting the map while it evicts under them (4 sources, room for 2): hits take no
 * lock, so an entry or a program must outlive every thread still holding it, and a
 * program evicted while held stays whole. Every answer is byte-compared with the first. */
typedef struct churn_arg {
    kpc_context *ctx;
    kpc_source *srcs;
    const void **code;
    size_t *size;
    int bad;
} churn_arg;

static void *churn(void *arg)
{
    churn_arg *a = arg;
    for (int i = 0; i < 600; i++) {
        int k = (i * 7 + (int)(intptr_t)pthread_self()) & 3;
        kpc_program *p[2];
        if (kpc_program_get(a->ctx, &a->srcs[k], &p[0]) != KPC_OK ||
            kpc_program_get(a->ctx, &a->srcs[k], &p[1]) != KPC_OK) {
            a->bad++;
            continue;
        }
        for (int j = 0; j < 2; j++) {
            size_t size;
            const void *code = kpc_program_code(p[j], &size);
            if (size != a->size[k] || memcmp(code, a->code[k], size) != 0)
                a->bad++;
        }
        kpc_program_release(p[1]);
        kpc_program_release(p[0]);
    }
    return NULL;
}

/* Four sources (kernels base to base + 3) got into first[] (their sizes in size[]), then
 * `threads` threads churning over them on ctx, their answers compared with first's. */
static void churn_under_threads(kpc_context *ctx, int base, int threads, kpc_program *first[4], size_t size[4])
{
    kpc_source srcs[4];
    const void *code[4];
    for (int i = 0; i < 4; i++) {
        srcs[i] = ts_src(ts_kernel_source(base + i), "churn.hip");
        ck_assert_int_eq(kpc_program_get(ctx, &srcs[i], &first[i]), KPC_OK);
        code[i] = kpc_program_code(first[i], &size[i]);
    }
    pthread_t t[8];
    churn_arg args[8];
    ck_assert_int_le(threads, 8);
    for (int i = 0; i < threads; i++) {
        args[i] = (churn_arg){.ctx = ctx, .srcs = srcs, .code = code, .size = size};
        ck_assert_int_eq(pthread_create(&t[i], NULL, churn, &args[i]), 0);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(args[i].bad, 0);
    }
}

START_TEST(threads_hit_while_the_map_evicts)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .mem_max_programs = 2};
    kpc_cache *c;
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_OK);
    kpc_context *ctx = ts_context(c);
    kpc_program *first[4];
    size_t size[4];
    churn_under_threads(ctx, 40, 8, first, size);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 4); /* evicted programs came back from disk */
    ck_assert_uint_le(kpc_map_count(ctx->map), 2);
    kpc_context_destroy(ctx);
    /* held past the context: still whole */
    for (int i = 0; i < 4; i++) {
        size_t n;
        const void *bytes = kpc_program_code(first[i], &n);
        ck_assert_uint_eq(n, size[i]);
        ck_assert(ts_is_code_object(bytes, n));
        kpc_program_release(first[i]);
    }
    kpc_cache_close(c);
}
END_TEST

/* A program is freed once, by its last holder, whether its hits counted in per-thread
 * slots (made by its first hit) or it was never hit: each module the fake device loaded
 * is unloaded exactly once, and not while anything holds its program. */
typedef struct hit_arg {
    kpc_context *ctx;
    const kpc_source *src;
    int bad;
} hit_arg;

static void *hit_and_release(void *arg)
{
    hit_arg *a = arg;
    for (int i = 0; i < 300; i++) {
        kpc_program *p;
        if (kpc_program_get(a->ctx, a->src, &p) != KPC_OK)
            a->bad++;
        kpc_program_release(p);
    }
    return NULL;
}

START_TEST(a_program_is_freed_once_by_its_last_holder)
{
    ts_fake_install();
    ts_fake_has_device = true;
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .mem_max_programs = 2};
    kpc_cache *c;
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_OK);
    kpc_context *ctx;
    ck_assert_int_eq(kpc_context_create(c, 0, &ctx), KPC_OK);
    kpc_source once = ts_src(ts_kernel_source(50), "once.hip"), hot = ts_src(ts_kernel_source(51), "hot.hip");
    kpc_program *p, *held;
    ck_assert_int_eq(kpc_program_get(ctx, &once, &p), KPC_OK); /* never hit */
    kpc_program_release(p);
    ck_assert_int_eq(kpc_program_get(ctx, &hot, &held), KPC_OK); /* hit by 4 threads */
    pthread_t t[4];
    hit_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (hit_arg){.ctx = ctx, .src = &hot};
        ck_assert_int_eq(pthread_create(&t[i], NULL, hit_and_release, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(args[i].bad, 0);
    }
    ck_assert_uint_eq(ts_fake_loads(), 2);
    ck_assert_uint_eq(ts_fake_unloads(), 0); /* the map holds both */
    kpc_context_destroy(ctx);
    ck_assert_uint_eq(ts_fake_unloads(), 1); /* the one nothing else held */
    kpc_program_release(held);
    ck_assert_uint_eq(ts_fake_unloads(), 2);

    /* evicted under threads that hold and hit them: every program freed once at the end */
    ck_assert_int_eq(kpc_context_create(c, 0, &ctx), KPC_OK);
    kpc_program *first[4];
    size_t size[4];
    churn_under_threads(ctx, 60, 4, first, size);
    ck_assert_uint_gt(ts_fake_loads(), 2 + 4); /* evicted programs came back */
    kpc_context_destroy(ctx);
    for (int i = 0; i < 4; i++)
        kpc_program_release(first[i]);
    ck_assert_uint_eq(ts_fake_unloads(), ts_fake_loads());
    kpc_cache_close(c);
    ts_fake_remove();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("map");
    TCase *tc = tcase_create("threads");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, threads_hit_while_the_map_evicts);
    tcase_add_test(tc, a_program_is_freed_once_by_its_last_holder);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
