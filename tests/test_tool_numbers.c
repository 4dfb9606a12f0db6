/*
 * test_tool_numbers.c - every numeric argument of every tool (compile -j, replay -j,
 * prune --max-size, remote prune --max-idle) goes through the one parser: an empty,
 * spaced, signed, overflowing or trailing-garbage value exits 2 with a line naming the
 * option and its form, and nothing is compiled or removed. kpc-shm-reset and pack take
 * no number. The remote rows need the cluster tier and a redis-server (KPC_TEST_REDIS).
 */
#define _GNU_SOURCE
#include "support.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_support.h"

#ifdef KPC_TEST_REDIS
#include "cluster_support.h"
#include "storage/remote.h"
#endif

/* What each numeric option is given: none is a number it takes. */
static const char *const bad_values[] = {"", " 5", "5 ", "-1", "+5", "99999999999999999999999", "5x", "5\n",
                                         "0x10"};
#define NUM_BAD (sizeof bad_values / sizeof bad_values[0])

/* Records of the fake compiler in dir (n of them); the number of files in the tree. */
static uint64_t disk_files(void)
{
    kpc_cache *c = ts_open(dir, KPC_NO_SHM, 0);
    kpc_stats st;
    kpc_stats_get(c, &st);
    kpc_cache_close(c);
    return st.disk_files;
}

static void fill(int n)
{
    ts_fake_install();
    kpc_cache *c = ts_open(dir, KPC_NO_SHM, 0);
    kpc_context *ctx = ts_context(c);
    for (int i = 0; i < n; i++) {
        kpc_source src = ts_src(ts_kernel_source(i), "k.hip");
        size_t size;
        free(ts_get_code(ctx, &src, &size));
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_fake_remove();
}

/* `kpc ARGV` with the bad value in place of the one "@" exits 2 and names the option. */
static void refused(const char *const *args, const char *option, const char *const *env)
{
    for (size_t v = 0; v < NUM_BAD; v++) {
        const char *argv[16] = {tool};
        size_t n = 1;
        for (const char *const *a = args; *a; a++)
            argv[n++] = strcmp(*a, "@") == 0 ? bad_values[v] : *a;
        argv[n] = NULL;
        char *out = NULL, *err = NULL;
        int rc = ts_exec(argv, env, &out, &err);
        ck_assert_msg(rc == 2, "kpc %s %s \"%s\": exit %d, not 2\n%s%s", args[0], option, bad_values[v], rc, out, err);
        ck_assert_msg(strstr(err, option) != NULL && strstr(err, " takes ") != NULL,
                      "kpc %s %s \"%s\" said:\n%s", args[0], option, bad_values[v], err);
        free(out);
        free(err);
    }
}

START_TEST(every_numeric_option_refuses_malformed_values)
{
    fill(3);
    ck_assert_uint_eq(disk_files(), 3);
    char *src = side_file("n.hip", ts_kernel_source(7));
    const char *compile[] = {"compile", "--cache-dir", dir, "--target", ts_target(), "-j", "@", src, NULL};
    refused(compile, "-j", NULL);
    const char *replay[] = {"replay", "--cache-dir", dir, "--target", ts_target(), "-j", "@", NULL};
    refused(replay, "-j", NULL);
    const char *prune[] = {"prune", "--cache-dir", dir, "--max-size", "@", NULL};
    refused(prune, "--max-size", NULL);
    /* nothing was compiled nor removed */
    ck_assert_uint_eq(disk_files(), 3);
    /* the same options take what they should */
    ck_assert_int_eq(kpc(NULL, NULL, "prune", "--cache-dir", dir, "--max-size", "1G", NULL), 0);
    ck_assert_uint_eq(disk_files(), 3);
    ck_assert_int_eq(kpc(NULL, NULL, "prune", "--cache-dir", dir, "--max-size", "0", NULL), 0);
    ck_assert_uint_eq(disk_files(), 0);
    free(src);
}
END_TEST

START_TEST(remote_prune_refuses_malformed_max_idle)
{
#ifndef KPC_TEST_REDIS
    ts_skip("this build has no cluster tier or no redis-server");
#else
    tc_redis redis;
    ck_assert_msg(tc_redis_start(&redis), "redis-server could not be started");
    unsetenv("KPC_REMOTE_SECRET_FILE");
    kpc_remote *r = NULL;
    ck_assert_int_eq(kpc_remote_open(redis.url, &r), KPC_OK);
    char names[3][256];
    for (int i = 0; i < 3; i++) {
        snprintf(names[i], sizeof names[i], "%srecord%d:co", kpc_remote_prefix(r), i);
        ck_assert(tc_redis_set(&redis, names[i], "x", 1));
    }
    kpc_remote_close(r);
    ck_assert_int_eq(tc_redis_int(&redis, "DBSIZE"), 3);
    char env_remote[160];
    snprintf(env_remote, sizeof env_remote, "KPC_REMOTE=%s", redis.url);
    const char *env[] = {env_remote, NULL};
    const char *prune[] = {"remote", "prune", "--max-idle", "@", NULL};
    refused(prune, "--max-idle", env);
    ck_assert_int_eq(tc_redis_int(&redis, "DBSIZE"), 3); /* the group's records are all there */
    /* a number is taken: an hour keeps them, 0 removes every one */
    const char *keep[] = {tool, "remote", "prune", "--max-idle", "3600", NULL};
    ck_assert_int_eq(ts_exec(keep, env, NULL, NULL), 0);
    ck_assert_int_eq(tc_redis_int(&redis, "DBSIZE"), 3);
    const char *all[] = {tool, "remote", "prune", "--max-idle", "0", NULL};
    ck_assert_int_eq(ts_exec(all, env, NULL, NULL), 0);
    ck_assert_int_eq(tc_redis_int(&redis, "DBSIZE"), 0);
    tc_redis_stop(&redis);
#endif
}
END_TEST

int main(void)
{
    const TTest *tests[] = {every_numeric_option_refuses_malformed_values, remote_prune_refuses_malformed_max_idle,
                            NULL};
    return ts_main_case("tool", "numbers", 120, setup, teardown, tests);
}
