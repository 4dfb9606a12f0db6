/*
 * test_index_reset.c - the host index (shm/index.c): kpc-shm-reset against attached,
 * exited and killed processes, and a process of another pid namespace.
 */
#define _GNU_SOURCE
#include "support.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
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

/* ---- reset ------------------------------------------------------------------------------ */
typedef struct attach_arg {
    int caches;     /* how many caches to open on dir */
    int close_one;  /* then close one of them */
} attach_arg;

/* Stay attached until the parent says go. */
static int attach_child(int i, void *arg)
{
    (void)i;
    const attach_arg *a = arg;
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir};
    kpc_cache *c[2] = {NULL, NULL};
    for (int k = 0; k < a->caches; k++)
        if (kpc_cache_open(&cfg, &c[k]) != KPC_OK || c[k]->index == NULL)
            return 10;
    if (a->close_one) {
        kpc_cache_close(c[1]);
        c[1] = NULL;
    }
    atomic_store(&sh->ready, 1);
    while (!atomic_load(&sh->go))
        sleep_ms(5);
    kpc_cache_close(c[0]);
    kpc_cache_close(c[1]);
    return 0;
}

static pid_t start_attached(attach_arg *a)
{
    atomic_store(&sh->ready, 0);
    atomic_store(&sh->go, 0);
    pid_t p = spawn(attach_child, 0, a);
    while (!atomic_load(&sh->ready)) {
        int st;
        ck_assert_msg(waitpid(p, &st, WNOHANG) == 0, "the attached child died early");
        sleep_ms(2);
    }
    return p;
}

START_TEST(shm_reset_refuses_while_attached)
{
    ts_fake_install();
    attach_arg one = {.caches = 1};
    pid_t p = start_attached(&one);
    char *out, pidtext[32];
    snprintf(pidtext, sizeof pidtext, "pid %d", (int)p);

    int rc = run_reset(false, &out);
    ck_assert_msg(rc == 1, "kpc-shm-reset with a live process attached: exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, pidtext) != NULL, "the refusal does not name %s: %s", pidtext, out);
    ck_assert_msg(strstr(out, "test_index") != NULL, "the refusal does not name the command: %s", out);
    free(out);
    ck_assert(segment_exists());

    rc = run_reset(true, &out);
    ck_assert_msg(rc == 0, "kpc-shm-reset --force: exit %d: %s", rc, out);
    free(out);
    ck_assert(!segment_exists());
    atomic_store(&sh->go, 1);
    assert_exited_0(reap(p), "the attached child");

    /* the next process creates a fresh segment: counters from zero */
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.lookups, 0);
    ck_assert_uint_eq(st.entries, 0);
    ck_assert_uint_eq(st.capacity, 65536);
    size_t size;
    hash_now(ctx, "__global__ void fresh() {}\n", &size);
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.lookups, 1);
    ck_assert_uint_eq(st.host_builds, 1);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ck_assert(segment_exists());
}
END_TEST

START_TEST(shm_reset_after_exit_and_after_kill)
{
    char *out;
    /* a process that exited */
    attach_arg one = {.caches = 1};
    pid_t p = start_attached(&one);
    atomic_store(&sh->go, 1);
    assert_exited_0(reap(p), "the attached child");
    int rc = run_reset(false, &out);
    ck_assert_msg(rc == 0, "after the process exited: exit %d: %s", rc, out);
    free(out);
    ck_assert(!segment_exists());

    /* a process that was killed (never detached): swept as dead */
    p = start_attached(&one);
    kill(p, SIGKILL);
    reap(p);
    rc = run_reset(false, &out);
    ck_assert_msg(rc == 0, "after the process was killed: exit %d: %s", rc, out);
    free(out);
    ck_assert(!segment_exists());

    /* a process with two caches open that closed one is still attached */
    attach_arg two = {.caches = 2, .close_one = 1};
    p = start_attached(&two);
    rc = run_reset(false, &out);
    ck_assert_msg(rc == 1, "a process with a cache still open was not seen: exit %d: %s", rc, out);
    free(out);
    atomic_store(&sh->go, 1);
    assert_exited_0(reap(p), "the attached child");
    rc = run_reset(false, &out);
    ck_assert_msg(rc == 0, "after it exited: exit %d: %s", rc, out);
    free(out);

    /* nothing to reset */
    rc = run_reset(false, &out);
    ck_assert_msg(rc == 0 && strstr(out, "no host index"), "no segment: exit %d: %s", rc, out);
    free(out);
}
END_TEST

/* Pid 1 of a new pid namespace opens the cache, writes its segment's name into sh->log[0]
 * and removes that segment (this test's to remove: the parent cannot name it). */
static int open_in_new_pid_namespace(void)
{
    if (unshare(CLONE_NEWPID) != 0)
        return 3;
    pid_t first = fork();
    if (first == 0) {
        kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir};
        kpc_cache *c;
        if (kpc_cache_open(&cfg, &c) != KPC_OK || c->index == NULL)
            _exit(10);
        kpc_cache_close(c);
        char *root = root_of(dir);
        kpc_index_segment_name(root, sh->log[0], LOGCAP);
        kpc_index_unlink(root);
        free(root);
        _exit(0);
    }
    int st;
    return first > 0 && waitpid(first, &st, 0) == first && WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}

/* A process of another pid namespace that shares /dev/shm (a container of the same pod)
 * sees none of this namespace's pids: in the same segment it would take the attached
 * process for a dead one and sweep its row, and kpc-shm-reset would then remove the
 * segment under it. Each pid namespace keeps an index of its own. */
START_TEST(another_pid_namespace_keeps_its_own_index)
{
    if (geteuid() != 0) {
        ts_skip("a new pid namespace needs root");
        return;
    }
    attach_arg one = {.caches = 1};
    pid_t p = start_attached(&one);
    pid_t q = fork();
    ck_assert_int_ge(q, 0);
    if (q == 0)
        _exit(open_in_new_pid_namespace());
    int st;
    ck_assert_int_eq(waitpid(q, &st, 0), q);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
        atomic_store(&sh->go, 1);
        reap(p);
        ts_skip("unshare(CLONE_NEWPID) refused here: no pid namespaces");
        return;
    }
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the process in a new pid namespace: %d", st);
    char *root = root_of(dir), mine[KPC_INDEX_NAME_MAX];
    kpc_index_segment_name(root, mine, sizeof mine);
    free(root);
    ck_assert_msg(strcmp(sh->log[0], mine) != 0, "one segment for two pid namespaces: %s", mine);
    char *out, pidtext[32];
    snprintf(pidtext, sizeof pidtext, "pid %d", (int)p);
    int rc = run_reset(false, &out);
    ck_assert_msg(rc == 1 && strstr(out, pidtext) != NULL,
                  "the attached process was lost from the table: kpc-shm-reset exit %d: %s", rc, out);
    free(out);
    atomic_store(&sh->go, 1);
    assert_exited_0(reap(p), "the attached child");
}
END_TEST

int main(void)
{
    const TTest *tests[] = {shm_reset_refuses_while_attached, shm_reset_after_exit_and_after_kill,
                            another_pid_namespace_keeps_its_own_index, NULL};
    return index_main("reset", 60, tests);
}
