/*
 * test_core_api.c - the core library's API at its edges: target
 * validation and normalization, NULL and empty arguments, a device context without a
 * GPU, status names, a batch count that overflows, bad and good environment values.
 */
#define _GNU_SOURCE
#include "support.h"

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core_support.h"

/* ---- targets and bad input ---- */
START_TEST(targets_are_validated_and_normalized)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = NULL;
#ifndef KPC_PLATFORM_NVIDIA
    const char *bad[] = {"gfx9999", "bogus", "gfx90a:foo+", "gfx90a:xnack", "gfx90a:xnack+:xnack-",
                         "gfx1030:xnack+", "gfx90a/../x", "gfx 90a", "", "tmp"};
    ck_assert_int_eq(kpc_context_create_for_target(c, "gfx90a:xnack-:sramecc+", &ctx), KPC_OK);
    ck_assert_str_eq(kpc_context_target(ctx), "gfx90a:sramecc+:xnack-");
    kpc_context_destroy(ctx);
    ck_assert_int_eq(kpc_context_create_for_target(c, "amdgcn-amd-amdhsa--gfx906:xnack+", &ctx), KPC_OK);
    ck_assert_str_eq(kpc_context_target(ctx), "gfx906:xnack+");
    /* a feature variant compiles too: the remembered target list is no bypass */
    kpc_source s = ts_src(ts_kernel_source(5), "k.hip");
    size_t size;
    free(ts_get_code(ctx, &s, &size));
    kpc_context_destroy(ctx);
#else
    const char *bad[] = {"sm_1", "bogus", "compute_", "sm_90x", "", "tmp"};
#endif
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ctx = (kpc_context *)1;
        ck_assert_msg(kpc_context_create_for_target(c, bad[i], &ctx) == KPC_E_INVALID, "target \"%s\"", bad[i]);
        ck_assert_ptr_null(ctx);
    }
    /* a second process with a warm target list still refuses the unknown one */
    kpc_cache_close(c);
    c = ts_open(dir, 0, 0);
    ck_assert_int_eq(kpc_context_create_for_target(c, bad[0], &ctx), KPC_E_INVALID);
    kpc_cache_close(c);
}
END_TEST

#ifndef KPC_PLATFORM_NVIDIA
/* comgr's generic targets (ROCm 6 lists gfx9-4-generic, gfx10-3-generic, gfx11-generic...)
 * are processors whose names have dashes: accepted where the compiler's target list has
 * them. ROCm 5.2's comgr lists none, so the list is the memo of validated targets. */
START_TEST(generic_targets_from_the_target_list)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = NULL;
    ck_assert_int_eq(kpc_context_create_for_target(c, "gfx90a", &ctx), KPC_OK); /* writes the memo */
    kpc_context_destroy(ctx);
    /* a generic name comgr does not list, and malformed ones, are refused */
    const char *bad[] = {"gfx99-9-generic", "gfx10--generic", "-gfx9-generic", "gfx9-generic-",
                         "gfx9-Generic", "gfx9-4-generic:xnack"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ctx = (kpc_context *)1;
        ck_assert_msg(kpc_context_create_for_target(c, bad[i], &ctx) == KPC_E_INVALID, "target \"%s\"", bad[i]);
        ck_assert_ptr_null(ctx);
    }
    kpc_cache_close(c);
    /* the compiler's list, as the memo of validated targets holds it */
    char v1[4096], memo[4400] = "", prefix[64];
    snprintf(v1, sizeof v1, "%s/v1", dir);
    snprintf(prefix, sizeof prefix, "targets-%s-", kpc_platform_builtin.name); /* amd or comgr */
    DIR *d = opendir(v1);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            snprintf(memo, sizeof memo, "%s/%s", v1, e->d_name);
    closedir(d);
    ck_assert_msg(memo[0] != '\0', "no target memo in %s", v1);
    FILE *f = fopen(memo, "a");
    ck_assert_ptr_nonnull(f);
    fputs("gfx10-3-generic\ngfx9-4-generic:sramecc+:xnack-\n", f);
    fclose(f);
    c = ts_open(dir, 0, 0);
    ck_assert_int_eq(kpc_context_create_for_target(c, "gfx10-3-generic", &ctx), KPC_OK);
    ck_assert_str_eq(kpc_context_target(ctx), "gfx10-3-generic");
    kpc_context_destroy(ctx);
    ck_assert_int_eq(kpc_context_create_for_target(c, "amdgcn-amd-amdhsa--gfx9-4-generic:xnack-:sramecc+", &ctx),
                     KPC_OK);
    ck_assert_str_eq(kpc_context_target(ctx), "gfx9-4-generic:sramecc+:xnack-");
    kpc_context_destroy(ctx);
    ck_assert_int_eq(kpc_context_create_for_target(c, "gfx99-9-generic", &ctx), KPC_E_INVALID);
    kpc_cache_close(c);
}
END_TEST
#endif

START_TEST(null_and_empty_arguments)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_program *p = NULL;
    kpc_source empty = ts_src("", "e.hip");
    kpc_source nullcode = ts_src(NULL, "n.hip");
    kpc_source good = ts_src(ts_kernel_source(2), "k.hip");
    kpc_context *none = (kpc_context *)1;
    ck_assert_int_eq(kpc_cache_open(NULL, NULL), KPC_E_INVALID);
    ck_assert_int_eq(kpc_context_create_for_target(NULL, "gfx90a", &none), KPC_E_INVALID);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(kpc_context_create_for_target(c, NULL, &none), KPC_E_INVALID);
    ck_assert_int_eq(kpc_context_create_for_target(c, ts_target(), NULL), KPC_E_INVALID);
    ck_assert_int_eq(kpc_context_create(NULL, 0, &none), KPC_E_INVALID);
    ck_assert_int_eq(kpc_context_create(c, -1, &none), KPC_E_INVALID);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(kpc_program_get(NULL, &good, &p), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get(ctx, NULL, &p), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get(ctx, &good, NULL), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get(ctx, &empty, &p), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get(ctx, &nullcode, &p), KPC_E_INVALID);
    kpc_source counted = good;
    counted.num_options = 2; /* options NULL */
    ck_assert_int_eq(kpc_program_get(ctx, &counted, &p), KPC_E_INVALID);
    counted = good;
    const char *null_expr[] = {NULL};
    counted.name_expressions = null_expr, counted.num_name_expressions = 1;
    ck_assert_int_eq(kpc_program_get(ctx, &counted, &p), KPC_E_INVALID);
    const char *empty_expr[] = {"kpc_test_k2", ""};
    counted.name_expressions = empty_expr, counted.num_name_expressions = 2;
    ck_assert_int_eq(kpc_program_get(ctx, &counted, &p), KPC_E_INVALID);
    counted = good;
    const char *null_opt[] = {"-O2", NULL};
    counted.options = null_opt, counted.num_options = 2;
    ck_assert_int_eq(kpc_program_get(ctx, &counted, &p), KPC_E_INVALID);
    counted = good;
    const char *hn[] = {"a.h"}, *hs[] = {NULL};
    counted.header_names = hn, counted.header_sources = hs, counted.num_headers = 1;
    ck_assert_int_eq(kpc_program_get(ctx, &counted, &p), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get(ctx, &good, &p), KPC_OK);
    hipFunction_t fn;
    ck_assert_int_eq(kpc_kernel_get(ctx, p, "kpc_test_k2", &fn), KPC_E_INVALID); /* compile-only */
    ck_assert_int_eq(kpc_kernel_get(NULL, p, "x", &fn), KPC_E_INVALID);
    ck_assert_int_eq(kpc_kernel_get(ctx, NULL, "x", &fn), KPC_E_INVALID);
    ck_assert_int_eq(kpc_kernel_get(ctx, p, NULL, &fn), KPC_E_INVALID);
    ck_assert_int_eq(kpc_kernel_get(ctx, p, "x", NULL), KPC_E_INVALID);
    ck_assert_ptr_null(kpc_program_code(NULL, NULL));
    ck_assert_int_eq(kpc_program_retain(NULL), KPC_E_INVALID);
    ck_assert_int_eq(kpc_stats_get(NULL, &(kpc_stats){0}), KPC_E_INVALID);
    ck_assert_int_eq(kpc_stats_get(c, NULL), KPC_E_INVALID);
    ck_assert_ptr_null(kpc_context_target(NULL));
    kpc_program_release(p);
    kpc_program_release(NULL);
    kpc_context_destroy(NULL);
    kpc_cache_close(NULL);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    kpc_config small = {.struct_size = 1};
    ck_assert_int_eq(kpc_cache_open(&small, &c), KPC_E_INVALID);
}
END_TEST

START_TEST(device_context_without_gpu)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = NULL;
    ts_log_begin(KPC_LOG_ERROR);
    kpc_status s = kpc_context_create(c, 0, &ctx);
    char *log = ts_log_end();
    if (s == KPC_OK) { /* a machine with a GPU: the GPU suite covers it */
        ts_skip("a GPU is present (the GPU suite covers it)");
        kpc_context_destroy(ctx);
    } else {
        ck_assert_int_eq(s, KPC_E_NO_DEVICE);
        ck_assert_ptr_null(ctx);
        /* a clear line, pointing at what works without a GPU */
        ck_assert_msg(strstr(log, "no GPU") && strstr(log, "kpc_context_create_for_target"), "log: %s", log);
    }
    free(log);
    kpc_cache_close(c);
}
END_TEST

START_TEST(status_names)
{
    ck_assert_str_eq(kpc_status_str(KPC_OK), "KPC_OK");
    ck_assert_str_eq(kpc_status_str(KPC_E_INVALID), "KPC_E_INVALID");
    ck_assert_str_eq(kpc_status_str(KPC_E_NOMEM), "KPC_E_NOMEM");
    ck_assert_str_eq(kpc_status_str(KPC_E_COMPILE), "KPC_E_COMPILE");
    ck_assert_str_eq(kpc_status_str(KPC_E_NO_DEVICE), "KPC_E_NO_DEVICE");
    ck_assert_str_eq(kpc_status_str(KPC_E_HIP), "KPC_E_HIP");
    ck_assert_str_eq(kpc_status_str(KPC_E_NOT_FOUND), "KPC_E_NOT_FOUND");
    ck_assert_str_eq(kpc_status_str(KPC_E_IO), "KPC_E_IO");
    ck_assert_str_eq(kpc_status_str(KPC_E_SHM), "KPC_E_SHM");
    ck_assert_str_eq(kpc_status_str(KPC_E_CORRUPT), "KPC_E_CORRUPT");
    ck_assert_str_eq(kpc_status_str(KPC_E_UNAVAILABLE), "KPC_E_UNAVAILABLE");
    ck_assert_str_eq(kpc_status_str((kpc_status)99), "KPC_E_UNKNOWN");
    /* statuses are ABI */
    ck_assert_int_eq(KPC_OK, 0);
    ck_assert_int_eq(KPC_E_CORRUPT, 9);
}
END_TEST

/* A batch count whose allocations would overflow: refused, nothing written (before: the
 * memset of n pointers wrapped around and the calloc of n items was asked for a wrapped
 * size). */
START_TEST(batch_count_that_overflows_is_invalid)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src(ts_kernel_source(0), "a.hip");
    kpc_program *out[2] = {(kpc_program *)1, (kpc_program *)1};
    kpc_status st[2] = {KPC_OK, KPC_OK};
    const size_t counts[] = {SIZE_MAX, SIZE_MAX / 2 + 1, SIZE_MAX / 8 + 1};
    ts_log_begin(KPC_LOG_ERROR);
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        ck_assert_msg(kpc_program_get_many(ctx, &src, counts[i], out, st) == KPC_E_INVALID, "n = %zu", counts[i]);
    free(ts_log_end());
    ck_assert_ptr_eq(out[1], (kpc_program *)1); /* nothing written */
    ck_assert_int_eq(st[1], KPC_OK);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* ---- environment ---- */
START_TEST(bad_environment_values)
{
    static const char *const cases[][2] = {
        {"KPC_CACHE_MAX_SIZE", "abc"}, {"KPC_CACHE_MAX_SIZE", "-1"}, {"KPC_CACHE_MAX_SIZE", "0"},
        {"KPC_CACHE_MAX_SIZE", "12Q"}, {"KPC_CACHE_MAX_SIZE", ""},   {"KPC_MEM_MAX_PROGRAMS", "abc"},
        {"KPC_MEM_MAX_PROGRAMS", "0"}, {"KPC_MEM_MAX_PROGRAMS", "-3"}, {"KPC_MEM_MAX_PROGRAMS", "5x"},
        {"KPC_SHM_ENTRIES", "-5"},     {"KPC_SHM_ENTRIES", "99999999999"}, {"KPC_DISABLE", "yes"},
        {"KPC_LOG", "loud"},           {"KPC_CACHE_DIR", ""}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv(cases[i][0], cases[i][1], 1);
        kpc_cache *c = (kpc_cache *)1;
        ck_assert_msg(kpc_cache_open(NULL, &c) == KPC_E_INVALID, "%s=\"%s\"", cases[i][0], cases[i][1]);
        ck_assert_ptr_null(c);
        unsetenv(cases[i][0]);
    }
}
END_TEST

START_TEST(environment_values_are_used)
{
    setenv("KPC_CACHE_DIR", dir, 1);
    setenv("KPC_CACHE_MAX_SIZE", "512M", 1);
    setenv("KPC_MEM_MAX_PROGRAMS", "7", 1);
    setenv("KPC_SHM_ENTRIES", "1000", 1);
    setenv("KPC_LOG", "warn", 1);
    kpc_cache *c;
    ck_assert_int_eq(kpc_cache_open(NULL, &c), KPC_OK);
    ck_assert_uint_eq(c->settings.disk_max_bytes, 512ull << 20);
    ck_assert_uint_eq(c->settings.mem_max_programs, 7);
    ck_assert_uint_eq(c->settings.shm_entries, 1000);
    ck_assert_str_eq(c->settings.cache_dir, dir);
    ck_assert_uint_eq(stats_of(c).capacity, 1000);
    kpc_cache_close(c);
    /* a config field wins over the environment */
    kpc_config cfg = {.struct_size = sizeof cfg, .mem_max_programs = 3};
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_OK);
    ck_assert_uint_eq(c->settings.mem_max_programs, 3);
    kpc_cache_close(c);
    /* fields past struct_size are unset: an old caller's struct */
    kpc_config old = {.struct_size = offsetof(kpc_config, disk_max_bytes), .disk_max_bytes = 5};
    ck_assert_int_eq(kpc_cache_open(&old, &c), KPC_OK);
    ck_assert_uint_eq(c->settings.disk_max_bytes, 512ull << 20);
    kpc_cache_close(c);
    setenv("KPC_DISABLE", "1", 1);
    ck_assert_int_eq(kpc_cache_open(NULL, &c), KPC_OK);
    ck_assert_ptr_null(c->store);
    ck_assert_ptr_null(c->index);
    kpc_cache_close(c);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {targets_are_validated_and_normalized,
#ifndef KPC_PLATFORM_NVIDIA
                            generic_targets_from_the_target_list,
#endif
                            null_and_empty_arguments,
                            device_context_without_gpu, status_names, bad_environment_values,
                            batch_count_that_overflows_is_invalid, environment_values_are_used,
                            NULL};
    return ts_main_case("core", "compile", 120, setup, teardown, tests);
}
