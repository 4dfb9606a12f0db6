/*
 * test_map.c - the per-context map under threads, through real compiles: hits take no
 * lock (core/map.c), so an entry or a program must outlive every thread still holding it
 * while other threads evict and rebuild around it.
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

START_TEST(threads_hit_while_the_map_evicts)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .mem_max_programs = 2};
    kpc_cache *c;
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_OK);
    kpc_context *ctx = ts_context(c);
    kpc_source srcs[4];
    kpc_program *first[4];
    const void *code[4];
    size_t size[4];
    for (int i = 0; i < 4; i++) {
        srcs[i] = ts_src(ts_kernel_source(40 + i), "churn.hip");
        ck_assert_int_eq(kpc_program_get(ctx, &srcs[i], &first[i]), KPC_OK);
        code[i] = kpc_program_code(first[i], &size[i]);
    }
    pthread_t t[8];
    churn_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (churn_arg){.ctx = ctx, .srcs = srcs, .code = code, .size = size};
        ck_assert_int_eq(pthread_create(&t[i], NULL, churn, &args[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(args[i].bad, 0);
    }
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

int main(void)
{
    Suite *s = suite_create("map");
    TCase *tc = tcase_create("threads");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, threads_hit_while_the_map_evicts);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
