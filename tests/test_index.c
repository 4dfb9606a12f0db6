/*
 * test_index.c - the host index (shm/index.c) across processes and threads.
 *
 * Every scenario forks real processes (or starts threads) that share one cache directory
 * and so one segment, then checks exact counts: compiles on the host, takeovers,
 * evictions, entries; and that every process got the same bytes. Children write what
 * they saw into an anonymous shared mapping (`sh`); the parent compares.
 *
 *   storm     16 processes x 4 real sources on a cold cache; a failing source asked by
 *             8 processes; a READY entry whose file vanished
 *   crash     SIGKILL of a builder mid-compile (takeover); SIGKILL of a process holding
 *             the table mutex (EOWNERDEAD repair)
 *   segment   damaged or foreign segments (disk-only fallback); a 64-entry table under
 *             200 and 450 keys (eviction)
 *   reset     kpc-shm-reset against attached, exited and killed processes
 *   protocol  the index API directly: STALE after a wait, shared failures, dead builders
 *   faults    a damaged lock word, a table without an empty slot, sizes
 *             overwritten before a repair, a truncated segment, a full table of dead
 *             builders, stale temporary segments, a fork child, a stopped builder
 *   threads   the same scenarios (and the faults that involve concurrency) in threads of one process (run as its own CTest test,
 *             labelled "threads" so CI runs it under TSan too)
 *
 * Usage: test_index [processes|threads|all]  (no argument: processes)
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

#define MAXP 32 /* children per scenario */
#define MAXS 8  /* sources per scenario */
#define LOGCAP 2048

/* What the children of one scenario report; zeroed by setup(). */
typedef struct shared {
    _Atomic int arrived; /* children at the barrier */
    _Atomic int ready;   /* a child reached its waiting point */
    _Atomic int go;      /* the parent lets waiting children finish */
    int status[MAXP][MAXS];
    uint64_t hash[MAXP][MAXS];
    uint64_t size[MAXP][MAXS];
    int object_ok[MAXP][MAXS];
    uint64_t builds[MAXP], failures[MAXP], waits[MAXP], disk_hits[MAXP];
    double t_begin[MAXP], t_end[MAXP]; /* seconds, CLOCK_MONOTONIC */
    char log[MAXP][LOGCAP];
    int verdict[MAXP], waited[MAXP];
    uint64_t ev_hash[MAXP][64]; /* eviction workload: the bytes' hash of each shared key */
} shared;

static char *dir;  /* this test's cache directory: <base>/t-XXXXXX/cache */
static shared *sh;
static char base[64]; /* this test case's scratch root, made in the runner process */

/*
 * A failed check ends the test process with _exit: no teardown runs there. So the test
 * case's unchecked fixture (run by the runner) owns a scratch root; each test's cache
 * directory lives under it, and each child it spawns is listed in <base>/pids; the case's
 * teardown kills what is left of them, unlinks every segment and removes the root.
 */
static void case_setup(void)
{
    snprintf(base, sizeof base, "/tmp/kpc-index-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(base));
    /* the compiler's temporary files (comgr-XXXXXX) of a child killed while it compiles
     * stay inside the scratch root, which the teardown removes */
    setenv("TMPDIR", base, 1);
}

static void case_teardown(void)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/pids", base);
    FILE *f = fopen(path, "re");
    int pid;
    unsigned long long start;
    while (f && fscanf(f, "%d %llu", &pid, &start) == 2)
        if (kpc__proc_alive(pid, start))
            kill(pid, SIGKILL);
    if (f)
        fclose(f);
    DIR *d = opendir(base);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char root[4096], name[96];
        snprintf(path, sizeof path, "%s/%s/cache", base, e->d_name);
        if (e->d_name[0] == '.' || realpath(path, root) == NULL)
            continue;
        kpc_index_unlink(root);
        kpc_index_segment_name(root, name, sizeof name);
        snprintf(path, sizeof path, "/dev/shm%s.real", name); /* the symlink case */
        unlink(path);
        char prefix[128]; /* temporary segments the fault tests planted */
        snprintf(prefix, sizeof prefix, "%s.tmp-", name + 1);
        DIR *shm = opendir("/dev/shm");
        struct dirent *t;
        while (shm && (t = readdir(shm)) != NULL)
            if (strncmp(t->d_name, prefix, strlen(prefix)) == 0) {
                snprintf(path, sizeof path, "/dev/shm/%s", t->d_name);
                unlink(path);
            }
        if (shm)
            closedir(shm);
    }
    if (d)
        closedir(d);
    ts_rm_rf(base);
}

static void setup(void)
{
    char tmpl[128];
    snprintf(tmpl, sizeof tmpl, "%s/t-XXXXXX", base);
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    dir = malloc(strlen(tmpl) + 8);
    sprintf(dir, "%s/cache", tmpl);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
}

static void teardown(void)
{
    munmap(sh, sizeof *sh);
    ts_cleanup(dir);
    ts_fake_remove();
}

/* ---- helpers ------------------------------------------------------------------------ */
static double now_s(void)
{
    return (double)kpc__now_ns() / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Every child of the scenario arrives, then all go at once. */
static void barrier(int n)
{
    atomic_fetch_add(&sh->arrived, 1);
    while (atomic_load(&sh->arrived) < n)
        usleep(200);
}

static pid_t spawn(int (*fn)(int, void *), int i, void *arg)
{
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0)
        _exit(fn(i, arg));
    char path[128];
    snprintf(path, sizeof path, "%s/pids", base);
    FILE *f = fopen(path, "ae");
    if (f) { /* for case_teardown, should this test fail with the child still running */
        fprintf(f, "%d %llu\n", (int)p, (unsigned long long)kpc__proc_start_time(p));
        fclose(f);
    }
    return p;
}

static int reap(pid_t p)
{
    int st = 0;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR)
        ;
    return st;
}

static void assert_exited_0(int st, const char *who)
{
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s %d", who,
                  WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

static char *root_of(const char *d)
{
    char *r = realpath(d, NULL);
    ck_assert_msg(r != NULL, "realpath(%s)", d);
    return r;
}

static void segment_path(const char *d, char *out, size_t cap)
{
    char *r = root_of(d), name[96];
    kpc_index_segment_name(r, name, sizeof name);
    snprintf(out, cap, "/dev/shm%s", name);
    free(r);
}

/* Create the cache directory and its segment (capacity entries), so a parent can watch
 * the segment while its children work; no compile. */
static void precreate(size_t entries)
{
    kpc_cache *c = ts_open(dir, 0, entries);
    ck_assert_ptr_nonnull(c->index);
    kpc_cache_close(c);
}

/* The host counters (and, with a non-NULL check, whether kpc_index_check passed). */
static kpc_stats host_stats(bool *check)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    if (check)
        *check = c->index != NULL && kpc_index_check(c->index);
    kpc_cache_close(c);
    return st;
}

/* Send this process's stderr to a file (and KPC_LOG to level); returns the saved fd. */
static int capture_begin(const char *file, int level)
{
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    kpc__log_level = level;
    return saved;
}

/* Restore stderr; returns the captured text (malloc'd). */
static char *capture_end(int saved, const char *file)
{
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    kpc__log_level = KPC_LOG_ERROR;
    FILE *f = fopen(file, "re");
    ck_assert_ptr_nonnull(f);
    char *text = calloc(1, 65536);
    size_t n = fread(text, 1, 65535, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static char *scratch_file(const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 8);
    sprintf(p, "%s/../%s", dir, name); /* beside the cache dir: ts_cleanup removes it */
    return p;
}

/* Run kpc-shm-reset on dir; returns its exit status and its output in out (malloc'd). */
static int run_reset(bool force, char **out)
{
    const char *tool = getenv("KPC_SHM_RESET");
    ck_assert_msg(tool != NULL, "KPC_SHM_RESET is not set (run the test through ctest)");
    char *file = scratch_file("reset.out");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' --cache-dir '%s' %s >'%s' 2>&1", tool, dir,
             force ? "--force" : "", file);
    int st = system(cmd);
    FILE *f = fopen(file, "re");
    ck_assert_ptr_nonnull(f);
    *out = calloc(1, 8192);
    size_t n = fread(*out, 1, 8191, f);
    (*out)[n] = '\0';
    fclose(f);
    free(file);
    ck_assert_msg(WIFEXITED(st), "kpc-shm-reset did not exit: %d", st);
    return WEXITSTATUS(st);
}

static bool segment_exists(void)
{
    char path[256];
    segment_path(dir, path, sizeof path);
    return access(path, F_OK) == 0;
}

/* ---- the request child ------------------------------------------------------------------ */
typedef struct storm_arg {
    int nproc;               /* children at the barrier */
    int nsrc;
    const char *const *codes;
    bool rotate;             /* child i starts at source i % nsrc */
    size_t shm_entries;      /* 0: default */
    const char *log_file;    /* non-NULL: stderr there, KPC_LOG=warn */
    bool wait_go;            /* once open: count itself in sh->ready, wait for sh->go */
} storm_arg;

/* Open the cache, meet the others at the barrier, ask every source, report. */
static int storm_child(int i, void *arg)
{
    const storm_arg *a = arg;
    if (a->log_file) {
        int fd = open(a->log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        kpc__log_level = KPC_LOG_WARN;
    }
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .shm_entries = a->shm_entries};
    kpc_cache *c = NULL;
    kpc_context *ctx = NULL;
    bool ok = kpc_cache_open(&cfg, &c) == KPC_OK &&
              kpc_context_create_for_target(c, ts_target(), &ctx) == KPC_OK;
    if (a->nproc > 0)
        barrier(a->nproc);
    if (!ok)
        return 10;
    if (a->wait_go) {
        atomic_fetch_add(&sh->ready, 1);
        while (!atomic_load(&sh->go))
            usleep(200);
    }
    sh->t_begin[i] = now_s();
    for (int k = 0; k < a->nsrc; k++) {
        int j = a->rotate ? (i + k) % a->nsrc : k;
        kpc_source src = ts_src(a->codes[j], "storm.hip");
        kpc_program *p = NULL;
        kpc_status s = kpc_program_get(ctx, &src, &p);
        sh->status[i][j] = (int)s;
        if (s == KPC_OK) {
            size_t n = 0;
            const void *code = kpc_program_code(p, &n);
            sh->hash[i][j] = XXH3_64bits(code, n);
            sh->size[i][j] = n;
            sh->object_ok[i][j] = ts_is_code_object(code, n);
            kpc_program_release(p);
        } else {
            snprintf(sh->log[i], LOGCAP, "%s", kpc_last_log());
        }
    }
    sh->t_end[i] = now_s();
    kpc_stats st;
    kpc_stats_get(c, &st);
    sh->builds[i] = st.builds;
    sh->failures[i] = st.build_failures;
    sh->waits[i] = st.waits;
    sh->disk_hits[i] = st.disk_hits;
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return 0;
}

/* Children [0, n) (skipping `skip`) all got source j, with the same bytes as child ref. */
static void assert_same_objects(int n, int nsrc, int skip)
{
    int ref = skip == 0 ? 1 : 0;
    for (int i = 0; i < n; i++) {
        if (i == skip)
            continue;
        for (int j = 0; j < nsrc; j++) {
            ck_assert_msg(sh->status[i][j] == KPC_OK, "child %d source %d: %s: %s", i, j,
                          kpc_status_str((kpc_status)sh->status[i][j]), sh->log[i]);
            ck_assert_msg(sh->object_ok[i][j], "child %d source %d: not a code object", i, j);
            ck_assert_uint_gt(sh->size[i][j], 0);
            ck_assert_msg(sh->hash[i][j] == sh->hash[ref][j] && sh->size[i][j] == sh->size[ref][j],
                          "child %d got other bytes than child %d for source %d", i, ref, j);
        }
    }
}

/* The bytes of code as a fresh process sees them now (after the children). */
static uint64_t hash_now(kpc_context *ctx, const char *code, size_t *size)
{
    kpc_source src = ts_src(code, "storm.hip");
    void *bytes = ts_get_code(ctx, &src, size);
    uint64_t h = XXH3_64bits(bytes, *size);
    free(bytes);
    return h;
}

/* ---- storm ------------------------------------------------------------------------------ */
START_TEST(storm_16_processes_4_sources)
{
    enum { N = 16, S = 4 };
    const char *codes[S];
    for (int j = 0; j < S; j++)
        codes[j] = ts_kernel_source(40 + j);
    storm_arg a = {.nproc = N, .nsrc = S, .codes = codes, .rotate = true};
    double t0 = now_s();
    int ok = ts_run_children(N, storm_child, &a);
    double total = now_s() - t0;
    ck_assert_int_eq(ok, N);
    assert_same_objects(N, S, -1);

    double first = 1e30, last = 0;
    uint64_t builds = 0, disk_hits = 0;
    for (int i = 0; i < N; i++) {
        first = sh->t_begin[i] < first ? sh->t_begin[i] : first;
        last = sh->t_end[i] > last ? sh->t_end[i] : last;
        builds += sh->builds[i];
        disk_hits += sh->disk_hits[i];
    }
    bool check;
    kpc_stats st = host_stats(&check);
    fprintf(stderr, "index storm: %d processes x %d sources, cold cache: host builds %llu, "
            "waits %llu, hits %llu; requests %.2f s, fork to last exit %.2f s\n", N, S,
            (unsigned long long)st.host_builds, (unsigned long long)st.host_waits,
            (unsigned long long)st.hits, last - first, total);
    ck_assert_uint_eq(st.host_builds, S);
    ck_assert_uint_eq(builds, S); /* the processes' own counters agree */
    ck_assert_uint_eq(disk_hits, N * S - S);
    ck_assert_uint_eq(st.host_build_failures, 0);
    ck_assert_uint_eq(st.takeovers, 0);
    ck_assert_uint_eq(st.lookups, N * S); /* one index lookup per request */
    ck_assert_uint_eq(st.hits, N * S - S);
    ck_assert_uint_eq(st.entries, S);
    ck_assert(check);

    /* and the parent, a process of its own, reads the same bytes from the cache */
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    for (int j = 0; j < S; j++) {
        size_t size;
        ck_assert_uint_eq(hash_now(ctx, codes[j], &size), sh->hash[0][j]);
        ck_assert_uint_eq(size, sh->size[0][j]);
    }
    kpc_stats mine;
    kpc_stats_get(c, &mine);
    ck_assert_uint_eq(mine.builds, 0);
    ck_assert_uint_eq(mine.host_builds, S);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

static void assert_compile_failures(int from, int to, const char *ref_log)
{
    for (int i = from; i < to; i++) {
        ck_assert_msg(sh->status[i][0] == KPC_E_COMPILE, "child %d: %s", i,
                      kpc_status_str((kpc_status)sh->status[i][0]));
        ck_assert_msg(strstr(sh->log[i], "undeclared_thing") != NULL && strstr(sh->log[i], "error"),
                      "child %d: the log does not name the error: \"%s\"", i, sh->log[i]);
        ck_assert_str_eq(sh->log[i], ref_log);
    }
}

START_TEST(failure_shared_by_8_processes)
{
    enum { N = 8 };
    const char *codes[] = {ts_bad_source()};
    storm_arg a = {.nproc = N, .nsrc = 1, .codes = codes};
    ck_assert_int_eq(ts_run_children(N, storm_child, &a), N);
    uint64_t failures = 0;
    for (int i = 0; i < N; i++)
        failures += sh->failures[i];
    assert_compile_failures(0, N, sh->log[0]);
    ck_assert_uint_eq(failures, 1);
    kpc_stats st = host_stats(NULL);
    ck_assert_uint_eq(st.host_build_failures, 1);
    ck_assert_uint_eq(st.host_builds, 0);
    ck_assert_uint_eq(st.lookups, N);

    /* a process that comes later gets the same failure without compiling */
    storm_arg late = {.nproc = 0, .nsrc = 1, .codes = codes};
    ck_assert_int_eq(ts_run_children(1, storm_child, &late), 1);
    assert_compile_failures(0, 1, sh->log[1]);
    ck_assert_uint_eq(sh->failures[0], 0);
    st = host_stats(NULL);
    ck_assert_uint_eq(st.host_build_failures, 1);
    ck_assert_uint_eq(st.host_builds, 0);
}
END_TEST

/* The index says READY but the file is gone (kpc clear, a prune, a hand): 8 processes
 * that find so at once rebuild it once between them. */
START_TEST(stale_ready_rebuilt_once)
{
    enum { N = 8 };
    ts_fake_install();
    const char *codes[] = {"// sleep_ms=300\n__global__ void stale() {}\n"};
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    size_t size;
    uint64_t h = hash_now(ctx, codes[0], &size);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ck_assert_uint_eq(ts_fake_compiles(), 1);
    char tree[4200];
    snprintf(tree, sizeof tree, "%s/v1/%s", dir, ts_target());
    ts_rm_rf(tree);

    storm_arg a = {.nproc = N, .nsrc = 1, .codes = codes};
    ck_assert_int_eq(ts_run_children(N, storm_child, &a), N);
    assert_same_objects(N, 1, -1);
    ck_assert_uint_eq(sh->hash[0][0], h);
    ck_assert_uint_eq(ts_fake_compiles(), 2);
    bool check;
    kpc_stats st = host_stats(&check);
    ck_assert_uint_eq(st.host_builds, 2);
    ck_assert_uint_eq(st.entries, 1);
    ck_assert(check);
}
END_TEST

/* ---- crash ------------------------------------------------------------------------------ */
static kpc_index *observe(void)
{
    char *r = root_of(dir);
    kpc_index *ix = NULL;
    ck_assert_int_eq(kpc_index_open_existing(r, &ix), KPC_OK);
    free(r);
    return ix;
}

START_TEST(builder_killed_mid_compile_is_taken_over)
{
    enum { N = 6 };
    char *slow = ts_slow_source(16); /* about 1 s of hipRTC here */
    const char *codes[] = {slow};
    precreate(0);
    kpc_index *ix = observe();
    storm_arg a = {.nproc = N, .nsrc = 1, .codes = codes};
    pid_t pids[N];
    for (int i = 0; i < N; i++)
        pids[i] = spawn(storm_child, i, &a);

    /* wait for the one builder, let its compile get under way, kill it */
    pid_t builder[4], victim = 0;
    double deadline = now_s() + 120;
    while (victim == 0 && now_s() < deadline) {
        if (kpc_index_test_builders(ix, builder, 4) == 1)
            victim = builder[0];
        else
            sleep_ms(2);
    }
    ck_assert_msg(victim > 0, "no process ever claimed the build");
    sleep_ms(300);
    ck_assert_msg(kpc_index_test_builders(ix, builder, 4) == 1 && builder[0] == victim,
                  "the build ended (or changed hands) before the kill: the source is too fast");
    double t_kill = now_s();
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    /* a waiter must notice within a liveness slice (200 ms): see it claim the build. The
     * bound is loose on purpose (a loaded CI machine); what it rules out is a takeover
     * that waits for some long timeout, or for the next request */
    double t_claim = 0;
    while (t_claim == 0 && now_s() < t_kill + 60) {
        if (kpc_index_test_builders(ix, builder, 4) == 1 && builder[0] != victim)
            t_claim = now_s();
        else
            sleep_ms(2);
    }
    ck_assert_msg(t_claim > 0 && t_claim - t_kill < 5.0, "no waiter took the build over within 5 s (%.2f s)",
                  t_claim > 0 ? t_claim - t_kill : -1.0);

    int vi = -1;
    for (int i = 0; i < N; i++) {
        int st = reap(pids[i]);
        if (pids[i] == victim) {
            vi = i;
            ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        } else {
            assert_exited_0(st, "a waiter");
        }
    }
    double t_done = now_s();
    ck_assert_msg(vi >= 0, "the builder %d was none of the children", (int)victim);
    assert_same_objects(N, 1, vi);
    uint64_t builds = 0;
    for (int i = 0; i < N; i++)
        builds += i == vi ? 0 : sh->builds[i];
    ck_assert_uint_eq(builds, 1); /* exactly one waiter built it */
    kpc_index_close(ix);

    bool check;
    kpc_stats st = host_stats(&check);
    fprintf(stderr, "index takeover: builder %d killed; a waiter claimed the build %.3f s later; the "
            "others had the object %.2f s later\n", (int)victim, t_claim - t_kill, t_done - t_kill);
    ck_assert_uint_eq(st.takeovers, 1);
    ck_assert_uint_eq(st.host_builds, 1);
    ck_assert_uint_eq(st.entries, 1);
    ck_assert(check);
    free(slow);
}
END_TEST

typedef struct hold_arg {
    const char *code;
} hold_arg;

/* Stops (SIGSTOP) holding the table mutex in the middle of inserting its key. */
static int hold_child(int i, void *arg)
{
    (void)i;
    const hold_arg *a = arg;
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir};
    kpc_cache *c = NULL;
    kpc_context *ctx = NULL;
    if (kpc_cache_open(&cfg, &c) != KPC_OK || c->index == NULL ||
        kpc_context_create_for_target(c, ts_target(), &ctx) != KPC_OK)
        return 10;
    kpc_index_test_hold_lock(c->index);
    kpc_source src = ts_src(a->code, "held.hip");
    kpc_program *p = NULL;
    kpc_program_get(ctx, &src, &p);
    return 11; /* never reached: the hook stops for ever */
}

START_TEST(lock_holder_killed_table_recovered)
{
    enum { S = 4 };
    const char *codes[S];
    for (int j = 0; j < S; j++)
        codes[j] = ts_kernel_source(50 + j);

    /* B fills the table with sources 0 and 1 */
    storm_arg b = {.nsrc = 2, .codes = codes};
    ck_assert_int_eq(ts_run_children(1, storm_child, &b), 1);
    uint64_t h0 = sh->hash[0][0], h1 = sh->hash[0][1];

    /* A stops holding the mutex, mid-insert of source 2 */
    hold_arg ha = {codes[2]};
    pid_t holder = spawn(hold_child, 0, &ha);
    int st;
    ck_assert_int_eq(waitpid(holder, &st, WUNTRACED), holder);
    ck_assert_msg(WIFSTOPPED(st), "the holder did not stop at the hook (status %d)", st);

    /* C asks for sources 0 and 3: it must block on the mutex until A dies */
    memset(sh, 0, sizeof *sh);
    char *log_file = scratch_file("c.log");
    const char *c_codes[] = {codes[0], codes[3]};
    storm_arg c = {.nsrc = 2, .codes = c_codes, .log_file = log_file};
    pid_t cp = spawn(storm_child, 0, &c);
    sleep_ms(1500);
    ck_assert_msg(waitpid(cp, &st, WNOHANG) == 0,
                  "a request finished while another process held the index mutex");
    ck_assert_int_eq(kill(holder, SIGKILL), 0);
    st = reap(holder);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_exited_0(reap(cp), "the process after the dead holder");
    ck_assert_int_eq(sh->status[0][0], KPC_OK);
    ck_assert_int_eq(sh->status[0][1], KPC_OK);
    ck_assert_uint_eq(sh->hash[0][0], h0);
    ck_assert_uint_eq(sh->builds[0], 1);

    FILE *f = fopen(log_file, "re");
    ck_assert_ptr_nonnull(f);
    char text[8192] = "";
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    fclose(f);
    ck_assert_msg(strstr(text, "died holding the host index lock") != NULL,
                  "the EOWNERDEAD repair was not logged: \"%s\"", text);
    free(log_file);

    /* the table is consistent: wiped, then C's two entries */
    bool check;
    kpc_stats s1 = host_stats(&check);
    ck_assert(check);
    ck_assert_uint_eq(s1.entries, 2);
    ck_assert_uint_eq(s1.host_builds, 3);
    ck_assert_uint_eq(s1.capacity, 65536);

    /* and every request still succeeds: source 2 (A's) is built once, the rest read */
    storm_arg d = {.nsrc = S, .codes = codes};
    memset(sh, 0, sizeof *sh);
    ck_assert_int_eq(ts_run_children(1, storm_child, &d), 1);
    for (int j = 0; j < S; j++)
        ck_assert_int_eq(sh->status[0][j], KPC_OK);
    ck_assert_uint_eq(sh->hash[0][0], h0);
    ck_assert_uint_eq(sh->hash[0][1], h1);
    ck_assert_uint_eq(sh->builds[0], 1);
    kpc_stats s2 = host_stats(&check);
    ck_assert(check);
    ck_assert_uint_eq(s2.entries, S);
    ck_assert_uint_eq(s2.host_builds, S);
}
END_TEST

/* ---- segment ---------------------------------------------------------------------------- */
/* Header offsets, as docs/design.md ("The host index segment") lays them out. */
enum { OFF_MAGIC = 0, OFF_FORMAT = 8, OFF_SIZE = 16, OFF_CAPACITY = 24, OFF_OWNER = 32 };

static const struct damage {
    const char *what;
    const char *reason; /* in the log line */
} damages[] = {
    {"bad magic", "bad magic"},
    {"another format", "another format version or layout"},
    {"shorter than the header", "shorter than its header"},
    {"table cut short", "size does not match its table"},
    {"size field", "size does not match its table"},
    {"capacity 0", "bad capacity"},
    {"owner field", "another owner"},
    {"file of another user", "owned by another user"},
    {"mode 0644", "readable or writable by other users"},
    {"symlink", "Too many levels of symbolic links"},
};

static void damage_segment(int kind)
{
    char path[256];
    segment_path(dir, path, sizeof path);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    struct stat sb;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    uint64_t v64;
    uint32_t v32;
    int r = 0;
    switch (kind) {
    case 0: r = pwrite(fd, "NOTKPC!!", 8, OFF_MAGIC) == 8 ? 0 : -1; break;
    case 1:
        r = pread(fd, &v64, 8, OFF_FORMAT) == 8 ? 0 : -1;
        v64 ^= 1;
        r |= pwrite(fd, &v64, 8, OFF_FORMAT) == 8 ? 0 : -1;
        break;
    case 2: r = ftruncate(fd, 100); break;
    case 3: r = ftruncate(fd, sb.st_size - 4096); break;
    case 4:
        v64 = (uint64_t)sb.st_size * 2;
        r = pwrite(fd, &v64, 8, OFF_SIZE) == 8 ? 0 : -1;
        break;
    case 5:
        v32 = 0;
        r = pwrite(fd, &v32, 4, OFF_CAPACITY) == 4 ? 0 : -1;
        break;
    case 6:
        v32 = geteuid() + 4242;
        r = pwrite(fd, &v32, 4, OFF_OWNER) == 4 ? 0 : -1;
        break;
    case 7: r = fchown(fd, geteuid() + 4242, (gid_t)-1); break;
    case 8: r = fchmod(fd, 0644); break;
    case 9: {
        char moved[300];
        snprintf(moved, sizeof moved, "%s.real", path);
        r = rename(path, moved);
        r |= symlink(moved, path);
        break;
    }
    }
    ck_assert_msg(r == 0, "damaging the segment (%s): %s", damages[kind].what, strerror(errno));
    close(fd);
}

START_TEST(bad_segment_falls_back_to_disk)
{
    int kind = _i;
    if (kind == 7 && geteuid() != 0) {
        ts_skip("\"%s\" needs root to chown", damages[kind].what);
        return;
    }
    ts_fake_install();
    const char *code0 = "__global__ void seg0() {}\n", *code1 = "__global__ void seg1() {}\n";
    kpc_cache *c = ts_open(dir, 0, 64);
    kpc_context *ctx = ts_context(c);
    size_t size;
    uint64_t h0 = hash_now(ctx, code0, &size);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    damage_segment(kind);

    char *file = scratch_file("open.log");
    int saved = capture_begin(file, KPC_LOG_ERROR);
    c = ts_open(dir, 0, 64);
    char *log = capture_end(saved, file);
    ck_assert_msg(c->index == NULL, "a damaged segment (%s) was trusted", damages[kind].what);
    ck_assert_msg(strstr(log, damages[kind].reason) != NULL, "no log naming \"%s\": \"%s\"",
                  damages[kind].reason, log);
    free(log);
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.capacity, 0);
    ck_assert_uint_eq(st.lookups, 0);
    /* requests still succeed: one from disk, one compiled */
    ctx = ts_context(c);
    ck_assert_uint_eq(hash_now(ctx, code0, &size), h0);
    hash_now(ctx, code1, &size);
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.disk_hits, 1);
    ck_assert_uint_eq(st.builds, 1);
    ck_assert_uint_eq(ts_fake_compiles(), 2);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ck_assert_msg(segment_exists(), "the damaged segment was replaced without kpc-shm-reset");

    /* kpc-shm-reset removes it, and the next process creates a fresh one */
    char *out;
    int rc = run_reset(false, &out);
    ck_assert_msg(rc == 0, "kpc-shm-reset on a damaged segment: exit %d: %s", rc, out);
    free(out);
    ck_assert(!segment_exists());
    c = ts_open(dir, 0, 64);
    ck_assert_ptr_nonnull(c->index);
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.capacity, 64);
    ck_assert(kpc_index_check(c->index));
    kpc_cache_close(c);
    if (kind == 9) { /* the symlink's target */
        char path[256], moved[300];
        segment_path(dir, path, sizeof path);
        snprintf(moved, sizeof moved, "%s.real", path);
        unlink(moved);
    }
    free(file);
}
END_TEST

static const char *numbered(char *buf, size_t cap, int i)
{
    snprintf(buf, cap, "// key %d\n__global__ void k%d() {}\n", i, i);
    return buf;
}

START_TEST(eviction_64_entries_200_keys)
{
    enum { K = 200, CAP = 64 };
    ts_fake_install();
    kpc_cache *c = ts_open(dir, 0, CAP);
    kpc_context *ctx = ts_context(c);
    uint64_t h[K];
    char buf[128];
    size_t size;
    for (int i = 0; i < K; i++)
        h[i] = hash_now(ctx, numbered(buf, sizeof buf, i), &size);
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.capacity, CAP);
    ck_assert_uint_eq(st.entries, CAP);
    ck_assert_uint_eq(st.evictions, K - CAP);
    ck_assert_uint_eq(st.host_builds, K);
    ck_assert(kpc_index_check(c->index));
    kpc_context_destroy(ctx);
    kpc_cache_close(c);

    /* a fresh cache (empty map): every key gives its code, from disk, none compiled */
    c = ts_open(dir, 0, CAP);
    ctx = ts_context(c);
    for (int i = 0; i < K; i++)
        ck_assert_uint_eq(hash_now(ctx, numbered(buf, sizeof buf, i), &size), h[i]);
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(ts_fake_compiles(), K);
    ck_assert_uint_eq(st.disk_hits, K);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_uint_eq(st.entries, CAP);
    ck_assert_uint_gt(st.evictions, K - CAP);
    ck_assert(kpc_index_check(c->index));
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* n workers x (50 shared keys + 100 of their own) on a 64-entry table. */
enum { EV_SHARED = 50, EV_OWN = 100 };

static int evict_keys(kpc_context *ctx, int w, uint64_t *hashes)
{
    char buf[128];
    size_t size;
    for (int k = 0; k < EV_SHARED + EV_OWN; k++) {
        int key = k < EV_SHARED ? (k + w * 7) % EV_SHARED : EV_SHARED + w * EV_OWN + (k - EV_SHARED);
        kpc_source src = ts_src(numbered(buf, sizeof buf, key), "ev.hip");
        kpc_program *p = NULL;
        if (kpc_program_get(ctx, &src, &p) != KPC_OK)
            return 1;
        const void *code = kpc_program_code(p, &size);
        uint64_t h = XXH3_64bits(code, size);
        kpc_program_release(p);
        if (key < EV_SHARED) {
            if (hashes[key] == 0)
                hashes[key] = h;
            else if (hashes[key] != h)
                return 2;
        }
    }
    return 0;
}

static int evict_child(int w, void *arg)
{
    (void)arg;
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .shm_entries = 64};
    kpc_cache *c = NULL;
    kpc_context *ctx = NULL;
    if (kpc_cache_open(&cfg, &c) != KPC_OK || kpc_context_create_for_target(c, ts_target(), &ctx) != KPC_OK)
        return 10;
    barrier(4);
    int r = evict_keys(ctx, w, sh->ev_hash[w]);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return r;
}

static void assert_eviction_outcome(int workers, uint64_t (*hashes)[64], size_t stride)
{
    int distinct = EV_SHARED + workers * EV_OWN;
    for (int w = 0; w < workers; w++)
        for (int k = 0; k < EV_SHARED; k++) {
            const uint64_t *mine = (const uint64_t *)((const char *)hashes + w * stride);
            ck_assert_uint_ne(mine[k], 0);
            ck_assert_uint_eq(mine[k], hashes[0][k]);
        }
    ck_assert_uint_eq(ts_fake_compiles(), distinct); /* each key compiled once on the host */
    bool check;
    kpc_stats st = host_stats(&check);
    ck_assert(check);
    ck_assert_uint_eq(st.entries, 64);
    ck_assert_uint_ge(st.evictions, distinct - 64);
    ck_assert_uint_eq(st.host_builds, distinct);
}

START_TEST(eviction_concurrent_processes)
{
    ts_fake_install();
    precreate(64);
    ck_assert_int_eq(ts_run_children(4, evict_child, NULL), 4);
    assert_eviction_outcome(4, sh->ev_hash, sizeof sh->ev_hash[0]);
}
END_TEST

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

/* ---- protocol: the index API directly --------------------------------------------------- */
static kpc_index *index_open(size_t entries)
{
    ck_assert_int_eq(kpc__mkdir_p(dir, 0700), 0);
    char *r = root_of(dir);
    kpc_index *ix = NULL;
    ck_assert_int_eq(kpc_index_open(r, entries, false, &ix), KPC_OK);
    free(r);
    return ix;
}

static kpc_key key_of(int i)
{
    kpc_key k;
    uint8_t seed[4] = {(uint8_t)i, (uint8_t)(i >> 8), 0x4b, 0x50};
    XXH128_hash_t h = XXH3_128bits(seed, sizeof seed);
    memcpy(k.bytes, &h, 16);
    return k;
}

typedef struct begin_arg {
    kpc_key key;
    unsigned flags;
    uint64_t slice_ns; /* non-0: the waiter's futex slice (only a wake ends it sooner) */
    bool wait_go;      /* once attached: count itself in sh->ready, wait for sh->go */
} begin_arg;

#define LONG_SLICE_NS (300ull * 1000000000ull)

/* A child's own handle on the index of dir (entries if it creates it), or NULL. */
static kpc_index *child_index(size_t entries)
{
    char *r = realpath(dir, NULL);
    kpc_index *ix = NULL;
    if (r == NULL || kpc_index_open(r, entries, false, &ix) != KPC_OK)
        ix = NULL;
    free(r);
    return ix;
}

static int begin_child(int i, void *arg)
{
    const begin_arg *a = arg;
    kpc_index *ix = child_index(64);
    if (ix == NULL)
        return 10;
    if (a->slice_ns)
        kpc_index_test_wait_slice(ix, a->slice_ns);
    if (a->wait_go) {
        atomic_fetch_add(&sh->ready, 1);
        while (!atomic_load(&sh->go))
            sleep_ms(1);
    }
    enum kpc_index_verdict v = 0;
    bool waited = false;
    if (kpc_index_begin(ix, &a->key, a->flags, &v, &waited) != KPC_OK)
        return 11;
    sh->verdict[i] = (int)v;
    sh->waited[i] = waited;
    if (v == KPC_INDEX_BUILD)
        kpc_index_publish(ix, &a->key, true, 1);
    kpc_index_close(ix);
    return 0;
}

static void wait_for_waits(kpc_index *ix, uint64_t n)
{
    kpc_index_counters cn;
    double deadline = now_s() + 60;
    do {
        sleep_ms(2);
        kpc_index_counters_get(ix, &cn);
    } while (cn.waits < n && now_s() < deadline);
    ck_assert_uint_ge(cn.waits, n);
}

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

#define HOLD_LOCK 2u /* claim_and_die's flags: stop holding the table mutex, mid-insert */

/* Claim a->key and exit without publishing or closing (a crash); with flags 1, stay
 * building until killed; with HOLD_LOCK, stop (SIGSTOP) holding the table mutex in the
 * middle of inserting it. */
static int claim_and_die(int i, void *arg)
{
    (void)i;
    const begin_arg *a = arg;
    kpc_index *ix = child_index(64);
    if (ix == NULL)
        return 10;
    if (a->flags == HOLD_LOCK)
        kpc_index_test_hold_lock(ix); /* kpc_index_begin never returns */
    enum kpc_index_verdict v;
    bool waited;
    if (kpc_index_begin(ix, &a->key, 0, &v, &waited) != KPC_OK || v != KPC_INDEX_BUILD)
        return 11;
    if (a->flags) { /* stay building until killed */
        atomic_store(&sh->ready, 1);
        for (;;)
            pause();
    }
    return 0; /* exit without publishing or closing: a crash */
}

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

/* ---- threads ---------------------------------------------------------------------------- */
typedef struct thr {
    kpc_cache *cache;
    kpc_context *ctx; /* shared; NULL: the thread makes its own */
    int t, nsrc;
    const char *const *codes;
    pthread_barrier_t *bar;
    int status[MAXS];
    uint64_t hash[MAXS];
    char log[LOGCAP];
    int evict; /* run the eviction workload instead */
    uint64_t ev_hashes[64];
    int ev_result;
} thr;

static void *thr_main(void *p)
{
    thr *a = p;
    kpc_context *ctx = a->ctx;
    if (ctx == NULL && kpc_context_create_for_target(a->cache, ts_target(), &ctx) != KPC_OK)
        ctx = NULL;
    pthread_barrier_wait(a->bar);
    if (ctx == NULL) {
        a->status[0] = -1;
        return NULL;
    }
    if (a->evict) {
        a->ev_result = evict_keys(ctx, a->t, a->ev_hashes);
    } else {
        for (int k = 0; k < a->nsrc; k++) {
            int j = (a->t + k) % a->nsrc;
            kpc_source src = ts_src(a->codes[j], "thread.hip");
            kpc_program *prog = NULL;
            kpc_status s = kpc_program_get(ctx, &src, &prog);
            a->status[j] = (int)s;
            if (s == KPC_OK) {
                size_t n;
                const void *code = kpc_program_code(prog, &n);
                a->hash[j] = ts_is_code_object(code, n) ? XXH3_64bits(code, n) : 0;
                kpc_program_release(prog);
            } else {
                snprintf(a->log, LOGCAP, "%s", kpc_last_log());
            }
        }
    }
    if (a->ctx == NULL)
        kpc_context_destroy(ctx);
    return NULL;
}

/* n threads on one cache; shared_ctx: all on one context, else one context each. */
static void run_threads(kpc_cache *c, int n, bool shared_ctx, thr *t, int nsrc,
                        const char *const *codes, int evict)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    kpc_context *ctx = shared_ctx ? ts_context(c) : NULL;
    pthread_t th[MAXP];
    for (int i = 0; i < n; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i] = (thr){.cache = c, .ctx = ctx, .t = i, .nsrc = nsrc, .codes = codes, .bar = &bar,
                     .evict = evict};
        ck_assert_int_eq(pthread_create(&th[i], NULL, thr_main, &t[i]), 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    kpc_context_destroy(ctx);
    pthread_barrier_destroy(&bar);
}

static void threads_same_sources(bool shared_ctx)
{
    enum { N = 8, S = 4 };
    const char *codes[S];
    for (int j = 0; j < S; j++)
        codes[j] = ts_kernel_source(shared_ctx ? 30 + j : 34 + j);
    kpc_cache *c = ts_open(dir, 0, 0);
    thr t[N];
    run_threads(c, N, shared_ctx, t, S, codes, 0);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < S; j++) {
            ck_assert_msg(t[i].status[j] == KPC_OK, "thread %d source %d: %s: %s", i, j,
                          kpc_status_str((kpc_status)t[i].status[j]), t[i].log);
            ck_assert_msg(t[i].hash[j] != 0 && t[i].hash[j] == t[0].hash[j],
                          "thread %d got other bytes for source %d", i, j);
        }
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.builds, S);
    ck_assert_uint_eq(st.host_builds, S);
    ck_assert_uint_eq(st.entries, S);
    /* on one context the map answers repeats; on many, each context asks the index */
    ck_assert_uint_eq(st.lookups, shared_ctx ? S : N * S);
    ck_assert(kpc_index_check(c->index));
    kpc_cache_close(c);
}

START_TEST(threads_8_one_context_same_sources)
{
    threads_same_sources(true);
}
END_TEST

START_TEST(threads_8_contexts_same_sources)
{
    threads_same_sources(false);
}
END_TEST

START_TEST(threads_failure_shared)
{
    enum { N = 8 };
    const char *codes[] = {ts_bad_source()};
    kpc_cache *c = ts_open(dir, 0, 0);
    thr t[N];
    run_threads(c, N, false, t, 1, codes, 0);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(t[i].status[0], KPC_E_COMPILE);
        ck_assert_msg(strstr(t[i].log, "undeclared_thing") != NULL, "thread %d log: \"%s\"", i, t[i].log);
        ck_assert_str_eq(t[i].log, t[0].log);
    }
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.build_failures, 1);
    ck_assert_uint_eq(st.host_build_failures, 1);
    ck_assert_uint_eq(st.host_builds, 0);
    kpc_cache_close(c);
}
END_TEST

START_TEST(threads_eviction)
{
    enum { N = 4 };
    ts_fake_install();
    kpc_cache *c = ts_open(dir, 0, 64);
    thr t[N];
    run_threads(c, N, false, t, 0, NULL, 1);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(t[i].ev_result, 0);
    kpc_cache_close(c);
    assert_eviction_outcome(N, &t[0].ev_hashes, sizeof t[0]);
}
END_TEST

/* ---- faults: a damaged or truncated segment, dead and stopped builders ------- */
/* Offsets of docs/design.md ("The host index segment") that the fault tests write. */
enum {
    OFF_NSLOTS = 28, OFF_LOCK = 48, OFF_PROCS_LOCK = 88, OFF_ENTRIES = 184, OFF_SLOTS = 4352,
    SLOT_BYTES = 64, OFF_SLOT_STATE = 16, OFF_SLOT_LAST_USE = 48,
};
#define NO_SUCH_TID 0x3ffffff0u /* a lock word naming it looks held for ever */

static void segment_write(off_t off, const void *data, size_t len)
{
    char path[256];
    segment_path(dir, path, sizeof path);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, data, len, off), (ssize_t)len);
    close(fd);
}

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

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
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

#define LOCK_TIMEOUT_MSG "did not answer within"

/* a lock word overwritten with a thread that does not exist. Requests time out
 * on the lock (KPC_SHM_LOCK_TIMEOUT_MS), log it once per process and go on with the disk;
 * `kpc stats` ends; `kpc-shm-reset --force` removes the segment without its locks. */
/* The segment's name carries its layout: a kpc of another layout (an older one, whose
 * names had no layout at all, or one of another "-L" layout) left a segment for this
 * directory, and this kpc never maps it: its own index is created beside it and used,
 * and the other's bytes are untouched. (With one name for every layout the attach would
 * refuse the foreign format and turn the index off: disk only.) */
static void *file_bytes(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "open(%s)", path);
    void *buf = NULL;
    ck_assert_int_eq(kpc__read_fd(fd, 1u << 30, &buf, size), KPC_OK);
    close(fd);
    return buf;
}

START_TEST(other_layout_segment_never_mapped)
{
    precreate(64);
    char ours[256];
    segment_path(dir, ours, sizeof ours);
    size_t size;
    uint8_t *bytes = file_bytes(ours, &size); /* a sound segment of this layout */
    char *r = root_of(dir);
    ck_assert_int_eq(kpc_index_unlink(r), KPC_OK);
    ck_assert(!segment_exists());
    char older[256], other[256], base[96];
    kpc_root_segment_name(r, base, sizeof base);
    ck_assert_msg(strncmp(ours, "/dev/shm", 8) == 0 && strncmp(ours + 8, base, strlen(base)) == 0 &&
                      strncmp(ours + 8 + strlen(base), "-L", 2) == 0 && strlen(ours + 8 + strlen(base)) == 18,
                  "the segment name %s is not the directory's %s with -L and 16 hex digits", ours, base);
    snprintf(older, sizeof older, "/dev/shm%s", base);
    snprintf(other, sizeof other, "/dev/shm%s-L0123456789abcdef", base);
    uint64_t format;
    memcpy(&format, bytes + 8, 8); /* ixh_format: another layout's */
    format ^= 1;
    memcpy(bytes + 8, &format, 8);
    const char *foreign[] = {older, other};
    for (int i = 0; i < 2; i++) {
        int fd = open(foreign[i], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        ck_assert_msg(fd >= 0, "create %s", foreign[i]);
        ck_assert_int_eq(kpc__write_all(fd, bytes, size), 0);
        close(fd);
    }
    kpc_cache *c = ts_open(dir, 0, 64);
    bool used = c->index != NULL && kpc_index_usable(c->index);
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    kpc_cache_close(c);
    bool created = segment_exists();
    bool untouched = true;
    for (int i = 0; i < 2; i++) {
        size_t n;
        uint8_t *now = file_bytes(foreign[i], &n);
        untouched = untouched && n == size && memcmp(now, bytes, size) == 0;
        free(now);
        unlink(foreign[i]);
    }
    free(bytes);
    free(r);
    ck_assert_msg(used && st.capacity == 64, "the index of this layout was not used beside another's");
    ck_assert_msg(created, "no segment of this layout was created");
    ck_assert_msg(untouched, "a segment of another layout was written to");
}
END_TEST

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
 * past KPC_BUILD_WAIT_MAX_MS: the waiters build for themselves, counted. */
START_TEST(stopped_builder_waiters_give_up)
{
    enum { N = 2 };
    char *slow = ts_slow_source(16);
    const char *codes[] = {slow};
    precreate(0);
    kpc_index *ix = observe();
    storm_arg a = {.nsrc = 1, .codes = codes};
    pid_t builder = spawn(storm_child, N, &a);
    pid_t b[4];
    double deadline = now_s() + 60;
    while (kpc_index_test_builders(ix, b, 4) != 1 && now_s() < deadline)
        sleep_ms(2);
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
    free(slow);
}
END_TEST

/* ---- faults, in threads ----------------------------------------------------------------- */
/* 4 threads (a context each) of cache c, whose index is damaged, ask for one source: all
 * get the same object, and the damage (naming needle) is logged once. */
static void threads_past_damage(kpc_cache *c, const char *needle)
{
    enum { N = 4 };
    const char *codes[] = {ts_kernel_source(20)};
    thr t[N];
    ts_log_begin(KPC_LOG_WARN);
    run_threads(c, N, false, t, 1, codes, 0);
    char *log = ts_log_end();
    for (int i = 0; i < N; i++) {
        ck_assert_msg(t[i].status[0] == KPC_OK, "thread %d: %s", i, kpc_status_str((kpc_status)t[i].status[0]));
        ck_assert(t[i].hash[0] != 0 && t[i].hash[0] == t[0].hash[0]);
    }
    ck_assert_msg(count_of(log, needle) == 1, "not logged once: \"%s\"", log);
    free(log);
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    ck_assert_uint_eq(st.capacity, 0); /* the index is off */
    kpc_cache_close(c);
}

/* In threads: the table lock's word overwritten under an open cache. */
START_TEST(threads_damaged_lock_word)
{
    setenv("KPC_SHM_LOCK_TIMEOUT_MS", "300", 1);
    precreate(0);
    uint32_t tid = NO_SUCH_TID;
    segment_write(OFF_LOCK, &tid, 4);
    kpc_cache *c = ts_open(dir, 0, 0);
    ck_assert_ptr_nonnull(c->index);
    threads_past_damage(c, LOCK_TIMEOUT_MSG);
}
END_TEST

/* In threads: the segment truncated under an open cache. */
START_TEST(threads_truncated_segment)
{
    precreate(0);
    kpc_cache *c = ts_open(dir, 0, 0);
    ck_assert_ptr_nonnull(c->index);
    char path[256];
    segment_path(dir, path, sizeof path);
    ck_assert_int_eq(truncate(path, 0), 0);
    threads_past_damage(c, "truncated");
}
END_TEST

typedef struct begin_thr {
    kpc_index *ix;
    kpc_key key;
    int verdict;
    kpc_status rc;
} begin_thr;

static void *begin_thread(void *p)
{
    begin_thr *a = p;
    enum kpc_index_verdict v = 0;
    bool waited;
    a->rc = kpc_index_begin(a->ix, &a->key, 0, &v, &waited);
    a->verdict = (int)v;
    return NULL;
}

/* In threads: threads waiting on a stopped builder process give up. */
START_TEST(threads_stopped_builder)
{
    enum { N = 4 };
    setenv("KPC_BUILD_WAIT_MAX_MS", "300", 1);
    kpc_index *ix = index_open(64);
    begin_arg a = {key_of(400), 1, 0, false};
    pid_t builder = spawn(claim_and_die, 0, &a);
    while (!atomic_load(&sh->ready))
        sleep_ms(1);
    ck_assert_int_eq(kill(builder, SIGSTOP), 0);
    begin_thr t[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        t[i] = (begin_thr){.ix = ix, .key = a.key};
        ck_assert_int_eq(pthread_create(&th[i], NULL, begin_thread, &t[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(t[i].rc, KPC_OK);
        ck_assert_int_eq(t[i].verdict, KPC_INDEX_SELF);
    }
    kpc_index_counters cn;
    kpc_index_counters_get(ix, &cn);
    ck_assert_uint_eq(cn.wait_timeouts, N);
    kill(builder, SIGKILL);
    reap(builder);
    kpc_index_close(ix);
}
END_TEST

/* ---- suites ------------------------------------------------------------------------------ */
static TCase *tcase(Suite *s, const char *name, int timeout)
{
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, timeout);
    suite_add_tcase(s, tc);
    return tc;
}

static Suite *process_suite(void)
{
    Suite *s = suite_create("index");
    TCase *tc = tcase(s, "storm", 120);
    tcase_add_test(tc, storm_16_processes_4_sources);
    tcase_add_test(tc, failure_shared_by_8_processes);
    tcase_add_test(tc, stale_ready_rebuilt_once);
    tc = tcase(s, "crash", 120);
    tcase_add_test(tc, builder_killed_mid_compile_is_taken_over);
    tcase_add_test(tc, lock_holder_killed_table_recovered);
    tc = tcase(s, "segment", 60);
    tcase_add_loop_test(tc, bad_segment_falls_back_to_disk, 0, (int)(sizeof damages / sizeof damages[0]));
    tcase_add_test(tc, eviction_64_entries_200_keys);
    tcase_add_test(tc, eviction_concurrent_processes);
    tcase_add_test(tc, other_layout_segment_never_mapped);
    tc = tcase(s, "reset", 60);
    tcase_add_test(tc, shm_reset_refuses_while_attached);
    tcase_add_test(tc, shm_reset_after_exit_and_after_kill);
    tc = tcase(s, "protocol", 60);
    tcase_add_test(tc, publication_wakes_every_waiter);
    tcase_add_test(tc, stale_request_after_wait_takes_the_new_object);
    tcase_add_test(tc, failure_answers_later_requests);
    tcase_add_test(tc, unstored_build_sends_everyone_to_build_alone);
    tcase_add_test(tc, dead_builder_taken_over);
    tc = tcase(s, "faults", 120);
    tcase_add_test(tc, damaged_lock_word_falls_back_to_disk);
    tcase_add_test(tc, table_without_empty_slot_does_not_spin);
    tcase_add_test(tc, sizes_overwritten_repair_survives);
    tcase_add_test(tc, truncated_segment_attached_processes_fall_back);
    tcase_add_test(tc, dead_builders_evicted_from_full_table);
    tcase_add_test(tc, stale_temp_segments_swept);
    tcase_add_test(tc, fork_child_using_parent_cache_refused);
    tcase_add_test(tc, stopped_builder_waiters_give_up);
    return s;
}

static Suite *thread_suite(void)
{
    Suite *s = suite_create("index_threads");
    TCase *tc = tcase(s, "threads", 120);
    tcase_add_test(tc, threads_8_one_context_same_sources);
    tcase_add_test(tc, threads_8_contexts_same_sources);
    tcase_add_test(tc, threads_failure_shared);
    tcase_add_test(tc, threads_eviction);
    tc = tcase(s, "thread_faults", 60);
    tcase_add_test(tc, threads_damaged_lock_word);
    tcase_add_test(tc, threads_truncated_segment);
    tcase_add_test(tc, threads_stopped_builder);
    return s;
}

int main(int argc, char **argv)
{
    return ts_main_processes_threads(argc, argv, process_suite, thread_suite);
}
