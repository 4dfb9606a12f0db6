/*
 * test_remote_spread.c - a same-order storm spreads its builds over the hosts, against a
 * real redis-server started by the test (tests/cluster_support.c).
 *
 *   unit      kpc_remote_try_begin: a free key is leased; a key another host's live
 *             builder holds is answered BUSY at once, nothing held and no wait counted;
 *             a lease naming a dead process of this host is taken over, as begin does
 *   cluster   every rank of every simulated host (a mount namespace with its own
 *             /dev/shm and cache dir) asks for the same K sources in the same order with
 *             one kpc_program_get_many, all released at once: K builds in the cluster,
 *             the same bytes in every rank, and every host builds some (a host whose
 *             next key is leased by another goes on to one nobody holds; before, the
 *             first host built them all while the others waited on each key in turn)
 *   real      the same through real hipRTC, smaller
 *
 * Outcomes only (builds, bytes, which hosts built), no timing: bench_cluster measures
 * the wall against its bound.
 */
#define _GNU_SOURCE
#include "remote_storm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* How many hosts compiled at least one key. */
static int hosts_that_built(const storm *s, int hosts)
{
    int n = 0;
    for (int h = 0; h < hosts; h++)
        n += rs_sum(s, h * s->procs, s->procs).builds > 0;
    return n;
}

/* H hosts x P ranks x K sources, same order, one get_many each, released together:
 * checks K builds and identical bytes; returns how many hosts built. */
static int same_order_batch(storm *s, int H)
{
    s->same_order = true;
    s->batch = true;
    ck_assert_int_eq(rs_run_released(s, 0, H, rs_base), 0);
    kpc_stats t = rs_sum(s, 0, H * s->procs);
    int built = hosts_that_built(s, H);
    printf("same-order get_many storm %dx%dx%d: %llu builds on %d hosts (", H, s->procs, s->k,
           (unsigned long long)t.builds, built);
    for (int h = 0; h < H; h++)
        printf("%s%llu", h ? " " : "", (unsigned long long)rs_sum(s, h * s->procs, s->procs).builds);
    printf(")\n");
    ck_assert_uint_eq(t.builds, (uint64_t)s->k);
    ck_assert_uint_eq(t.remote_builds, (uint64_t)s->k);
    ck_assert_uint_eq(t.remote_errors, 0);
    rs_check_identical(s, 0, H * s->procs);
    return built;
}

/* ---- unit ------------------------------------------------------------------------------- */
START_TEST(try_begin)
{
    kpc_remote *a = NULL, *b = NULL;
    setenv("KPC_REMOTE_TRUST", "unauthenticated", 1);
    setenv("KPC_HOST_ID", "hostA", 1);
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &a), KPC_OK);
    setenv("KPC_HOST_ID", "hostB", 1);
    ck_assert_int_eq(kpc_remote_open(rs_redis.url, &b), KPC_OK);
    unsetenv("KPC_HOST_ID");
    unsetenv("KPC_REMOTE_TRUST");
    kpc_key key = {{7, 7, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}};
    uint8_t cid[16];
    memset(cid, 0x5a, 16);
    kpc_record rec;
    kpc_remote_lease *la = NULL, *lb = NULL;
    ck_assert_int_eq(kpc_remote_try_begin(a, &key, ts_target(), cid, &rec, &la), KPC_REMOTE_BUILD);
    ck_assert_ptr_nonnull(la);
    /* another host's live holder: BUSY at once, nothing held, no wait counted */
    ck_assert_int_eq(kpc_remote_try_begin(b, &key, ts_target(), cid, &rec, &lb), KPC_REMOTE_BUSY);
    ck_assert_ptr_null(lb);
    kpc_remote_counters c;
    kpc_remote_counters_get(b, &c);
    ck_assert_uint_eq(c.waits, 0);
    ck_assert_uint_eq(c.builds + c.misses + c.hits, 0);
    /* released: the next try gets it */
    kpc_remote_release(a, la);
    ck_assert_int_eq(kpc_remote_try_begin(b, &key, ts_target(), cid, &rec, &lb), KPC_REMOTE_BUILD);
    ck_assert_ptr_nonnull(lb);
    /* a lease naming a dead process of b's host is taken over, not answered BUSY */
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    char lname[KPC_REMOTE_NAME_MAX], value[128];
    kpc_remote_key_name(b, &key, "lease", lname, sizeof lname);
    snprintf(value, sizeof value, "host=hostB pid=%d start=1 token=gone", (int)dead);
    ck_assert(tc_redis_set(&rs_redis, lname, value, strlen(value)));
    kpc_remote_lease *lb2 = NULL;
    ck_assert_int_eq(kpc_remote_try_begin(b, &key, ts_target(), cid, &rec, &lb2), KPC_REMOTE_BUILD);
    ck_assert_ptr_nonnull(lb2);
    kpc_remote_counters_get(b, &c);
    ck_assert_uint_eq(c.takeovers, 1);
    kpc_remote_release(b, lb2);
    kpc_remote_release(b, lb); /* no longer its lease: nothing removed */
    ck_assert_int_eq(tc_redis_int(&rs_redis, "EXISTS %s", lname), 0);
    kpc_remote_close(a);
    kpc_remote_close(b);
}
END_TEST

/* ---- cluster ----------------------------------------------------------------------------- */
/* The fake compiler sleeping slow_ms: each key compiled once in the cluster; returns how
 * many hosts built. */
static int fake_storm(int H, int P, int K, int slow_ms)
{
    ts_fake_install();
    storm *s = rs_new(P, K, rs_redis.url, rs_base);
    s->slow_ms = slow_ms;
    int built = same_order_batch(s, H);
    ck_assert_uint_eq(ts_fake_compiles(), (unsigned)K);
    return built;
}

/* Fewer ranks than keys on each host: only spreading over the hosts builds in parallel.
 * A compile of 1 s: every rank, released together, asks within it. Before a host went on
 * past keys leased elsewhere, 1 to 3 hosts built all 8 (6 on one). */
START_TEST(spread_fake)
{
    NEED_HOSTS(rs_have_hosts);
    ck_assert_int_eq(fake_storm(4, 2, 8, 1000), 4);
}
END_TEST

/* 4 hosts x 8 ranks x 8 keys: each key once, the same bytes everywhere (the host claims
 * kept across the first pass finish exactly once). */
START_TEST(spread_fake_full)
{
    NEED_HOSTS(rs_have_hosts);
    fake_storm(4, 8, 8, 200);
}
END_TEST

/* ---- real hipRTC -------------------------------------------------------------------------- */
START_TEST(spread_real)
{
    NEED_HOSTS(rs_have_hosts);
    enum { H = 2, P = 2, K = 4 };
    storm *s = rs_new(P, K, rs_redis.url, rs_base);
    s->real = true;
    same_order_batch(s, H);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("remote_spread");
    TCase *unit = tcase_create("unit");
    tcase_add_checked_fixture(unit, rs_setup, rs_teardown);
    tcase_add_test(unit, try_begin);
    suite_add_tcase(s, unit);
    TCase *cl = tcase_create("cluster");
    tcase_add_checked_fixture(cl, rs_setup, rs_teardown);
    tcase_set_timeout(cl, 120);
    tcase_add_test(cl, spread_fake);
    tcase_add_test(cl, spread_fake_full);
    suite_add_tcase(s, cl);
    TCase *real = tcase_create("real");
    tcase_add_checked_fixture(real, rs_setup, rs_teardown);
    tcase_set_timeout(real, 240);
    tcase_add_test(real, spread_real);
    suite_add_tcase(s, real);
    return ts_run_suite(s);
}
