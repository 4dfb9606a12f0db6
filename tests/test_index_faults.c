/*
 * test_index_faults.c - the host index (shm/index.c): faults in processes. A damaged lock
 * word, a table without an empty slot, sizes overwritten before a repair, a truncated
 * segment, a full table of dead builders, stale temporary segments, a fork child, a
 * stopped builder.
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
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "hold_support.h"
#include "index_support.h"
#include "private_mounts.h"

/* Reap p within secs seconds; past that, kill it and fail: a hang is a failure. */
static int reap_within(pid_t p, double secs, const char *who)
{
    double deadline = now_s() + secs;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(p, &st, WNOHANG);
        if (r == p)
            return st;
        ck_assert_msg(r == 0 || errno == EINTR, "waitpid(%s): %s", who, strerror(errno));
        if (now_s() > deadline) {
            kill(p, SIGKILL);
            reap(p);
            ck_abort_msg("%s did not finish within %.0f s: it hangs", who, secs);
        }
        sleep_ms(5);
    }
}

static char *read_text(const char *path)
{
    size_t size;
    char *t = ts_read_file(path, &size);
    ck_assert_msg(t != NULL, "no file %s", path);
    return t;
}

/* Run the tool named by the environment variable tool_var with args (a shell fragment)
 * under timeout(1), with env ("K=V ...", or "-u K") in front; its exit status (124: it
 * hung) and its output (malloc'd). */
static int run_bounded(const char *tool_var, const char *env, const char *args, char **out)
{
    const char *tool = getenv(tool_var);
    ck_assert_msg(tool != NULL, "%s is not set (run the test through ctest)", tool_var);
    char *file = scratch_file("tool.out");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "env %s timeout 30 '%s' %s >'%s' 2>&1", env, tool, args, file);
    int st = system(cmd);
    *out = read_text(file);
    free(file);
    ck_assert_msg(WIFEXITED(st), "%s did not exit: %d", tool_var, st);
    return WEXITSTATUS(st);
}

START_TEST(damaged_lock_word_falls_back_to_disk)
{
    enum { N = 3 };
    setenv("KPC_SHM_LOCK_TIMEOUT_MS", "300", 1);
    precreate(0);
    uint32_t tid = NO_SUCH_TID;
    segment_write(OFF_LOCK, &tid, 4);
    char *log_file = scratch_file("lock.log");
    const char *codes[] = {ts_kernel_source(60)};
    storm_arg a = {.nsrc = 1, .codes = codes, .log_file = log_file};
    pid_t p[N];
    for (int i = 0; i < N; i++)
        p[i] = spawn(storm_child, i, &a);
    for (int i = 0; i < N; i++)
        assert_exited_0(reap_within(p[i], 60, "a request on a damaged lock"), "a request");
    assert_same_objects(N, 1, -1);
    char *log = read_text(log_file);
    ck_assert_msg(count_of(log, LOCK_TIMEOUT_MSG) == N, "not logged once per process: \"%s\"", log);
    free(log);
    free(log_file);

    char args[4400], *out;
    snprintf(args, sizeof args, "stats --cache-dir '%s'", dir);
    int rc = run_bounded("KPC_TOOL", "KPC_SHM_LOCK_TIMEOUT_MS=300", args, &out);
    ck_assert_msg(rc == 0 && strstr(out, "unusable") != NULL, "kpc stats on a damaged lock: exit %d: %s",
                  rc, out);
    free(out);

    segment_write(OFF_PROCS_LOCK, &tid, 4);
    snprintf(args, sizeof args, "--cache-dir '%s'", dir);
    rc = run_bounded("KPC_SHM_RESET", "KPC_SHM_LOCK_TIMEOUT_MS=300", args, &out);
    ck_assert_msg(rc == 1 && strstr(out, "--force") != NULL,
                  "kpc-shm-reset on a damaged lock: exit %d: %s", rc, out);
    free(out);
    ck_assert(segment_exists());
    snprintf(args, sizeof args, "--cache-dir '%s' --force", dir);
    rc = run_bounded("KPC_SHM_RESET", "-u KPC_SHM_LOCK_TIMEOUT_MS", args, &out);
    ck_assert_msg(rc == 0, "kpc-shm-reset --force on a damaged lock: exit %d: %s", rc, out);
    free(out);
    ck_assert(!segment_exists());
}
END_TEST

/* Fill the 16 slots of a capacity-1 table with READY entries: no empty slot is left, and
 * entries says the table is full, so the next new key evicts. */
static void fill_every_slot(void)
{
    for (int i = 0; i < 16; i++) {
        uint8_t slot[SLOT_BYTES] = {0};
        kpc_key k = key_of(100 + i);
        uint32_t state = 2; /* READY */
        uint64_t last = 1 + (uint64_t)i;
        memcpy(slot, k.bytes, 16);
        memcpy(slot + OFF_SLOT_STATE, &state, 4);
        memcpy(slot + OFF_SLOT_LAST_USE, &last, 8);
        segment_write(OFF_SLOTS + SLOT_BYTES * i, slot, sizeof slot);
    }
    uint64_t entries = 1;
    segment_write(OFF_ENTRIES, &entries, 8);
}

/* mode 0: a new key (eviction's delete); 1: forget a key in the table. */
static int full_table_child(int i, void *arg)
{
    int mode = *(const int *)arg;
    kpc_index *ix = child_index(1);
    if (ix == NULL)
        return 10;
    kpc_key fresh = key_of(999), old = key_of(105);
    if (mode == 1)
        kpc_index_forget(ix, &old);
    enum kpc_index_verdict v = 0;
    bool waited;
    kpc_status s = kpc_index_begin(ix, &fresh, 0, &v, &waited);
    sh->verdict[i] = s == KPC_OK ? (int)v : -1;
    if (s == KPC_OK && v == KPC_INDEX_BUILD)
        kpc_index_publish(ix, &fresh, true, 1);
    kpc_index_close(ix);
    return 0;
}

/* the backward-shift delete on a table without an empty slot (damaged) ends. */
START_TEST(table_without_empty_slot_does_not_spin)
{
    precreate(1); /* capacity 1: 16 slots */
    for (int mode = 0; mode < 2; mode++) {
        fill_every_slot();
        memset(sh, 0, sizeof *sh);
        pid_t p = spawn(full_table_child, 0, &mode);
        assert_exited_0(reap_within(p, 30, mode ? "a forget" : "an eviction"), "the request");
        ck_assert_int_eq(sh->verdict[0], KPC_INDEX_BUILD);
        kpc_index *ix = observe();
        ck_assert(kpc_index_check(ix));
        kpc_index_close(ix);
    }
}
END_TEST

/* the slot count and capacity in the header are overwritten while processes are
 * attached, then the lock holder dies: the EOWNERDEAD wipe uses the sizes validated at
 * attach, so no repairer crashes (before: each one died in turn, 6 of 6). */
START_TEST(sizes_overwritten_repair_survives)
{
    enum { W = 3 };
    precreate(0);
    begin_arg a = {key_of(7), 0, 0, true};
    pid_t p[W];
    for (int i = 0; i < W; i++)
        p[i] = spawn(begin_child, i, &a);
    while (atomic_load(&sh->ready) < W)
        sleep_ms(1);
    begin_arg h = {key_of(8), HOLD_LOCK, 0, false};
    pid_t holder = spawn(claim_and_die, 0, &h);
    int st;
    ck_assert_int_eq(waitpid(holder, &st, WUNTRACED), holder);
    ck_assert_msg(WIFSTOPPED(st), "the holder did not stop at the hook (status %d)", st);
    uint32_t huge[2] = {1u << 29, 1u << 30}; /* capacity, nslots */
    segment_write(OFF_NSLOTS - 4, huge, sizeof huge);
    kill(holder, SIGKILL);
    reap(holder);
    atomic_store(&sh->go, 1);
    int builders = 0;
    for (int i = 0; i < W; i++) {
        assert_exited_0(reap_within(p[i], 30, "an attached process"), "a repairer");
        builders += sh->verdict[i] == KPC_INDEX_BUILD;
        ck_assert(sh->verdict[i] == KPC_INDEX_BUILD || sh->verdict[i] == KPC_INDEX_READY);
    }
    ck_assert_int_eq(builders, 1);
}
END_TEST

/* the segment is truncated under attached processes: they go on with the disk
 * (before: SIGBUS). */
START_TEST(truncated_segment_attached_processes_fall_back)
{
    enum { N = 2 };
    precreate(0);
    char *log_file = scratch_file("trunc.log");
    const char *codes[] = {ts_kernel_source(62)};
    storm_arg a = {.nsrc = 1, .codes = codes, .log_file = log_file, .wait_go = true};
    pid_t p[N];
    for (int i = 0; i < N; i++)
        p[i] = spawn(storm_child, i, &a);
    while (atomic_load(&sh->ready) < N)
        sleep_ms(1);
    char path[256];
    segment_path(dir, path, sizeof path);
    ck_assert_int_eq(truncate(path, 0), 0);
    atomic_store(&sh->go, 1);
    for (int i = 0; i < N; i++)
        assert_exited_0(reap_within(p[i], 60, "an attached process"), "a process on a truncated segment");
    assert_same_objects(N, 1, -1);
    char *log = read_text(log_file);
    ck_assert_msg(count_of(log, "truncated") == N, "not logged once per process: \"%s\"", log);
    free(log);
    free(log_file);
}
END_TEST

/* a full table of slots whose builders died is reclaimed by eviction: a new key
 * is coordinated again (before: "full of builds in progress", built without the index). */
START_TEST(dead_builders_evicted_from_full_table)
{
    enum { CAP = 4 };
    kpc_index *ix = index_open(CAP);
    for (int i = 0; i < CAP; i++) {
        begin_arg a = {key_of(200 + i), 0, 0, false};
        ck_assert_int_eq(ts_run_children(1, claim_and_die, &a), 1);
    }
    kpc_key k = key_of(300);
    enum kpc_index_verdict v = 0;
    bool waited;
    ck_assert_int_eq(kpc_index_begin(ix, &k, 0, &v, &waited), KPC_OK);
    ck_assert_int_eq(v, KPC_INDEX_BUILD);
    /* and it is coordinated: another process waits for this build and takes it */
    begin_arg b = {k, 0, 0, false};
    pid_t w = spawn(begin_child, 0, &b);
    wait_for_waits(ix, 1);
    kpc_index_publish(ix, &k, true, 1);
    assert_exited_0(reap_within(w, 30, "the waiter"), "the waiter");
    ck_assert(sh->waited[0]);
    ck_assert_int_eq(sh->verdict[0], KPC_INDEX_READY);
    kpc_index_counters cn;
    kpc_index_counters_get(ix, &cn);
    ck_assert_uint_eq(cn.evictions, 1);
    ck_assert_uint_eq(cn.entries, CAP);
    ck_assert(kpc_index_check(ix));
    kpc_index_close(ix);
}
END_TEST

/* A pid that is surely dead: a child that has exited and been reaped. */
static pid_t dead_pid(void)
{
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0)
        _exit(0);
    reap(p);
    return p;
}

/* Temporary segments (<name>.tmp-<pid>-<start>-<ns>) of the cache: one 0 bytes long and
 * one 8 KiB long left by a dead creator, one of a live creator (this process). */
static void plant_temps(char stale[2][256], char *live, size_t cap)
{
    char *r = root_of(dir), name[96];
    kpc_index_segment_name(r, name, sizeof name);
    free(r);
    pid_t dead = dead_pid();
    for (int i = 0; i < 2; i++) {
        snprintf(stale[i], 256, "/dev/shm%s.tmp-%d-%llu-%x", name, (int)dead, 12345ull + (unsigned)i, i);
        int fd = open(stale[i], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, i * 8192), 0);
        close(fd);
    }
    snprintf(live, cap, "/dev/shm%s.tmp-%d-%llu-1", name, (int)getpid(),
             (unsigned long long)kpc__proc_start_time(getpid()));
    int fd = open(live, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

/* creators killed mid-creation leave temporary segments; the next creation
 * sweeps those whose creator is dead, and kpc-shm-reset lists and removes them. */
START_TEST(stale_temp_segments_swept)
{
    ck_assert_int_eq(kpc__mkdir_p(dir, 0700), 0);
    char stale[2][256], live[256];
    plant_temps(stale, live, sizeof live);
    kpc_cache *c = ts_open(dir, 0, 64); /* creates the segment */
    ck_assert_ptr_nonnull(c->index);
    kpc_cache_close(c);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(access(stale[i], F_OK) != 0, "%s was left behind", stale[i]);
    ck_assert_msg(access(live, F_OK) == 0, "a live creator's temporary segment was removed");
    unlink(live);

    /* kpc-shm-reset: with the segment there, and with none */
    for (int round = 0; round < 2; round++) {
        plant_temps(stale, live, sizeof live);
        char args[4400], *out;
        snprintf(args, sizeof args, "--cache-dir '%s'", dir);
        int rc = run_bounded("KPC_SHM_RESET", "", args, &out);
        ck_assert_msg(rc == 0, "kpc-shm-reset: exit %d: %s", rc, out);
        for (int i = 0; i < 2; i++) {
            ck_assert_msg(access(stale[i], F_OK) != 0, "kpc-shm-reset left %s", stale[i]);
            ck_assert_msg(strstr(out, stale[i] + strlen("/dev/shm/")) != NULL,
                          "kpc-shm-reset did not name %s: %s", stale[i], out);
        }
        ck_assert_msg(access(live, F_OK) == 0, "kpc-shm-reset removed a live creator's segment");
        unlink(live);
        free(out);
        ck_assert(!segment_exists());
    }
}
END_TEST

/* a fork child using its parent's cache gets KPC_E_INVALID, logged; closing the
 * parent's cache in the child leaves the parent's registration alone. */
START_TEST(fork_child_using_parent_cache_refused)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src(ts_kernel_source(63), "fork.hip");
    size_t size;
    free(ts_get_code(ctx, &src, &size));
    char *log_file = scratch_file("fork.log");
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
        int fd = open(log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        dup2(fd, STDERR_FILENO);
        kpc_program *prog = NULL;
        kpc_context *c2 = NULL;
        sh->status[0][0] = (int)kpc_program_get(ctx, &src, &prog);
        sh->status[0][1] = (int)kpc_context_create_for_target(c, ts_target(), &c2);
        kpc_context_destroy(ctx); /* frees memory; touches nothing shared */
        kpc_cache_close(c);
        _exit(0);
    }
    assert_exited_0(reap_within(p, 30, "the fork child"), "the fork child");
    ck_assert_int_eq(sh->status[0][0], KPC_E_INVALID);
    ck_assert_int_eq(sh->status[0][1], KPC_E_INVALID);
    char *log = read_text(log_file);
    ck_assert_msg(strstr(log, "fork") != NULL, "the refusal was not logged: \"%s\"", log);
    free(log);
    free(log_file);
    kpc_index_counters cn;
    kpc_index_counters_get(c->index, &cn);
    ck_assert_uint_eq(cn.attached, 1); /* the parent is still listed */
    free(ts_get_code(ctx, &src, &size)); /* and the parent goes on */
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* a builder stopped (SIGSTOP) in the middle of a real compile is not waited for
 * past KPC_BUILD_WAIT_MAX_MS: the waiters build for themselves, counted. The compile is
 * held open (tests/hold_support.h), so the stop lands in it however fast the compiler. */
START_TEST(stopped_builder_waiters_give_up)
{
    enum { N = 2 };
    const char *codes[] = {ts_kernel_source(16)};
    precreate(0);
    kpc_index *ix = observe();
    storm_arg a = {.nsrc = 1, .codes = codes};
    ts_hold_arm();
    pid_t builder = spawn(storm_child, N, &a);
    pid_t b[4];
    ck_assert_int_eq(ts_hold_await(60), builder);
    ck_assert_msg(kpc_index_test_builders(ix, b, 4) == 1 && b[0] == builder, "the builder never claimed");
    ck_assert_int_eq(kill(builder, SIGSTOP), 0);
    setenv("KPC_BUILD_WAIT_MAX_MS", "300", 1);
    pid_t p[N];
    for (int i = 0; i < N; i++)
        p[i] = spawn(storm_child, i, &a);
    for (int i = 0; i < N; i++)
        assert_exited_0(reap_within(p[i], 90, "a waiter on a stopped builder"), "a waiter");
    assert_same_objects(N, 1, -1);
    kpc_index_counters cn;
    kpc_index_counters_get(ix, &cn);
    ck_assert_uint_eq(cn.wait_timeouts, N);
    kpc_index_close(ix);
    kpc_stats st = host_stats(NULL);
    ck_assert_uint_eq(st.wait_timeouts, N);
    char args[4400], *out;
    snprintf(args, sizeof args, "stats --json --cache-dir '%s'", dir);
    ck_assert_int_eq(run_bounded("KPC_TOOL", "", args, &out), 0);
    cJSON *j = cJSON_Parse(out);
    ck_assert_msg(j != NULL, "not JSON: %s", out);
    cJSON *f = cJSON_GetObjectItem(j, "wait_timeouts");
    ck_assert_msg(cJSON_IsNumber(f) && f->valuedouble == N, "kpc stats --json: %s", out);
    cJSON_Delete(j);
    free(out);
    kill(builder, SIGKILL);
    reap(builder);
    ts_hold_remove();
}
END_TEST

/* A /dev/shm without room for the host index (a tmpfs of 1 MiB; the segment is 8 MiB):
 * every process's index is off (disk only, logged) and its requests are coordinated with
 * no other process's, the documented fallback (docs/design.md, "Levels fail soft"), and
 * nothing worse. Exactly: a process asking while another's compile of the same source is
 * in flight (held open) compiles it too, without waiting; a process after them reads it
 * from the disk. */
START_TEST(full_dev_shm_costs_the_coordination)
{
    char why[512];
    if (tm_private_mounts("/dev/shm", why, sizeof why) != 0) {
        ts_skip("%s", why);
        return;
    }
    ck_assert_int_eq(mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=1m"), 0);
    ck_assert_int_eq(mkdir(dir, 0700), 0); /* the log file lies beside it */
    const char *codes[] = {ts_kernel_source(17)};
    char *log_file = scratch_file("full.log");
    storm_arg a = {.nsrc = 1, .codes = codes, .log_file = log_file};
    ts_hold_arm();
    pid_t first = spawn(storm_child, 0, &a);
    ck_assert_int_eq(ts_hold_await(120), first);
    /* with an index the second would wait for the first, held: it finishes on its own */
    assert_exited_0(reap(spawn(storm_child, 1, &a)), "a process beside a compile in flight");
    ts_hold_release();
    assert_exited_0(reap(first), "the first process");
    assert_exited_0(reap(spawn(storm_child, 2, &a)), "a process after them");
    ts_hold_remove();
    assert_same_objects(3, 1, -1);
    ck_assert_uint_eq(sh->builds[0] + sh->builds[1] + sh->builds[2], 2);
    ck_assert_uint_eq(sh->builds[2], 0);
    ck_assert_uint_eq(sh->disk_hits[2], 1);
    ck_assert_uint_eq(sh->waits[0] + sh->waits[1] + sh->waits[2], 0);
    char *text = read_text(log_file);
    ck_assert_msg(count_of(text, "No space left on device") == 3 &&
                  count_of(text, "the host index is off for this process: disk only") == 3,
                  "each process logs the full /dev/shm and its fallback once:\n%s", text);
    free(text);
    free(log_file);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {damaged_lock_word_falls_back_to_disk,
                            table_without_empty_slot_does_not_spin,
                            sizes_overwritten_repair_survives,
                            truncated_segment_attached_processes_fall_back,
                            dead_builders_evicted_from_full_table, stale_temp_segments_swept,
                            fork_child_using_parent_cache_refused, stopped_builder_waiters_give_up,
                            full_dev_shm_costs_the_coordination, NULL};
    return index_main("faults", 120, tests);
}
