/*
 * test_index_protocol.c - the host index (shm/index.c): the index API directly. STALE
 * after a wait, publication waking every waiter, shared failures, an unstored build, dead
 * builders.
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

#define LONG_SLICE_NS (300ull * 1000000000ull)

/* A STALE request that had to wait for another process's rebuild takes that rebuild. */
START_TEST(stale_request_after_wait_takes_the_new_object)
{
    kpc_index *ix = index_open(64);
    kpc_key k = key_of(1);
    enum kpc_index_verdict v;
    bool waited;
    ck_assert_int_eq(kpc_index_begin(ix, &k, 0, &v, &waited), KPC_OK);
    ck_assert_int_eq(v, KPC_INDEX_BUILD);
    kpc_index_publish(ix, &k, true, 1);
    ck_assert_int_eq(kpc_index_begin(ix, &k, KPC_INDEX_STALE, &v, &waited), KPC_OK);
    ck_assert_int_eq(v, KPC_INDEX_BUILD); /* this process rebuilds */

    begin_arg a = {k, KPC_INDEX_STALE, 0, false}; /* another found the file bad too */
    pid_t p = spawn(begin_child, 0, &a);
    wait_for_waits(ix, 1);
    kpc_index_publish(ix, &k, true, 1);
    assert_exited_0(reap(p), "the waiter");
    ck_assert(sh->waited[0]);
    ck_assert_int_eq(sh->verdict[0], KPC_INDEX_READY);
    kpc_index_counters cn;
    kpc_index_counters_get(ix, &cn);
    ck_assert_uint_eq(cn.entries, 1);
    ck_assert(kpc_index_check(ix));
    kpc_index_close(ix);
}
END_TEST

/* A fresh table in which this process claims k, and w children sleep on it (with the
 * long slice: only a wake ends their sleep before the test's time runs out). */
static kpc_index *claim_with_sleepers(const kpc_key *k, int w, pid_t *p)
{
    kpc_index *ix = index_open(64);
    enum kpc_index_verdict v;
    bool waited;
    ck_assert_int_eq(kpc_index_begin(ix, k, 0, &v, &waited), KPC_OK);
    ck_assert_int_eq(v, KPC_INDEX_BUILD);
    begin_arg a = {*k, 0, LONG_SLICE_NS, false};
    for (int i = 0; i < w; i++)
        p[i] = spawn(begin_child, i, &a);
    wait_for_waits(ix, w);
    sleep_ms(20); /* let the last one reach futex_wait */
    return ix;
}

/* Publication wakes every waiter at once: with a 300 s futex slice, only FUTEX_WAKE can
 * end their waits within the test's time. */
START_TEST(publication_wakes_every_waiter)
{
    enum { W = 4 };
    kpc_key k = key_of(5);
    pid_t p[W];
    kpc_index *ix = claim_with_sleepers(&k, W, p);
    double t = now_s();
    kpc_index_publish(ix, &k, true, 1);
    for (int i = 0; i < W; i++) {
        assert_exited_0(reap(p[i]), "a waiter");
        ck_assert(sh->waited[i]);
        ck_assert_int_eq(sh->verdict[i], KPC_INDEX_READY);
    }
    double dt = now_s() - t;
    fprintf(stderr, "index wake: %d waiters returned %.1f ms after the publication\n", W, dt * 1e3);
    ck_assert_msg(dt < 60, "the waiters were not woken: they slept out their slice");
    kpc_index_close(ix);
}
END_TEST

/* A build that could not be stored (full or read-only disk) tells its waiters, and the
 * requests that follow, to build for themselves (SELF) rather than claim the slot in turn. */
START_TEST(unstored_build_sends_everyone_to_build_alone)
{
    enum { W = 3 };
    kpc_key k = key_of(6);
    pid_t p[W];
    kpc_index *ix = claim_with_sleepers(&k, W, p);
    kpc_index_unstored(ix, &k);
    for (int i = 0; i < W; i++) {
        assert_exited_0(reap(p[i]), "a waiter");
        ck_assert(sh->waited[i]);
        ck_assert_int_eq(sh->verdict[i], KPC_INDEX_SELF);
    }
    begin_arg a = {k, 0, 0, false};
    ck_assert_int_eq(ts_run_children(1, begin_child, &a), 1);
    ck_assert_int_eq(sh->verdict[0], KPC_INDEX_SELF);
    ck_assert(!sh->waited[0]);
    enum kpc_index_verdict v;
    bool waited;
    ck_assert_int_eq(kpc_index_begin(ix, &k, KPC_INDEX_STALE, &v, &waited), KPC_OK);
    ck_assert_int_eq(v, KPC_INDEX_SELF);
    ck_assert(kpc_index_check(ix));
    kpc_index_close(ix);
}
END_TEST

/* A failure is the answer for later requests too; STALE (its log is gone) retries. */
START_TEST(failure_answers_later_requests)
{
    kpc_index *ix = index_open(64);
    kpc_key k = key_of(2);
    enum kpc_index_verdict v;
    bool waited;
    ck_assert_int_eq(kpc_index_begin(ix, &k, 0, &v, &waited), KPC_OK);
    ck_assert_int_eq(v, KPC_INDEX_BUILD);
    kpc_index_publish(ix, &k, false, 0);

    begin_arg a = {k, 0, 0, false};
    ck_assert_int_eq(ts_run_children(1, begin_child, &a), 1);
    ck_assert_int_eq(sh->verdict[0], KPC_INDEX_FAILED);
    ck_assert(!sh->waited[0]);
    ck_assert_int_eq(kpc_index_begin(ix, &k, 0, &v, &waited), KPC_OK);
    ck_assert_int_eq(v, KPC_INDEX_FAILED);
    ck_assert_int_eq(kpc_index_begin(ix, &k, KPC_INDEX_STALE, &v, &waited), KPC_OK);
    ck_assert_int_eq(v, KPC_INDEX_BUILD);
    kpc_index_publish(ix, &k, true, 1);
    ck_assert_int_eq(kpc_index_begin(ix, &k, 0, &v, &waited), KPC_OK);
    ck_assert_int_eq(v, KPC_INDEX_READY);
    ck_assert(kpc_index_check(ix));
    kpc_index_close(ix);
}
END_TEST

/* A slot whose builder is dead is taken over, whether found so at once or while waiting;
 * a reused pid with another start time is not taken for the builder. */
START_TEST(dead_builder_taken_over)
{
    kpc_index *ix = index_open(64);
    enum kpc_index_verdict v;
    bool waited;

    begin_arg a = {key_of(3), 0, 0, false};
    ck_assert_int_eq(ts_run_children(1, claim_and_die, &a), 1);
    ck_assert_int_eq(kpc_index_begin(ix, &a.key, 0, &v, &waited), KPC_OK);
    ck_assert_int_eq(v, KPC_INDEX_BUILD);
    ck_assert(!waited);
    kpc_index_publish(ix, &a.key, true, 1);

    begin_arg b = {key_of(4), 1, 0, false};
    pid_t builder = spawn(claim_and_die, 0, &b);
    while (!atomic_load(&sh->ready))
        sleep_ms(1);
    pid_t w = spawn(begin_child, 1, &(begin_arg){key_of(4), 0, 0, false});
    wait_for_waits(ix, 1);
    kill(builder, SIGKILL);
    reap(builder);
    assert_exited_0(reap(w), "the waiter");
    ck_assert_int_eq(sh->verdict[1], KPC_INDEX_BUILD);
    ck_assert(sh->waited[1]);

    kpc_index_counters cn;
    kpc_index_counters_get(ix, &cn);
    ck_assert_uint_eq(cn.takeovers, 2);
    ck_assert_uint_eq(cn.entries, 2);
    ck_assert(kpc_index_check(ix));
    kpc_index_close(ix);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {publication_wakes_every_waiter,
                            stale_request_after_wait_takes_the_new_object,
                            failure_answers_later_requests,
                            unstored_build_sends_everyone_to_build_alone, dead_builder_taken_over,
                            NULL};
    return index_main("protocol", 60, tests);
}
