/*
 * test_chaos.c - N processes x K sources under kill -9, with `kpc clear` and `kpc prune`
 * churning, then every object checked byte for byte against a clean compile.
 *
 * Workers loop: a fresh context (now and then a fresh cache handle), a random source, the
 * object compared with the reference bytes the platform compiled without any cache. The
 * parent kills workers with SIGKILL at random moments and respawns them; workers also die
 * at chosen phases (targeted kills): inside the compile (the index slot claimed), holding
 * the index's table lock (kpc_index_test_hold_lock stops the holder mid-insert and the
 * parent kills it there), and at the library's system calls where the fault table lets a
 * test stop them (the syscall hook: a kill right before a chosen call, e.g. between the
 * temp file's writes, before the rename, after it, holding the prune lock). The kpc tool
 * clears and prunes the tree meanwhile, and is killed too now and then.
 *
 * After the storm: no worker returned a wrong object or a failure for a good source, none
 * stopped making progress (a hang), a fresh process gets every object right within a
 * bound (no stuck slot), `kpc verify` finds nothing damaged, and v1/tmp is empty after a
 * prune (dead writers' temp files are swept). The figures are printed.
 *
 *   KPC_CHAOS_SECONDS   the fake-platform storm's length (default 16; the hipRTC run
 *                       takes half of it); a release run sets minutes
 *   KPC_CHAOS_PROCS     workers (default 8 fake, 3 hipRTC)
 *   KPC_CHAOS_SOURCES   sources (default 24 fake, 4 hipRTC)
 */
#define _GNU_SOURCE
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "chaos_worker.h"

static const char *const phase_names[PH_COUNT] = {
    "random", "in compile", "holding the table lock", "mid-write", "before fsync", "before rename",
    "after rename", "holding a lock file"};

/* ---- sources and references -------------------------------------------------------- */
static void make_sources(void)
{
    sources = calloc((size_t)cfg->sources, sizeof *sources);
    for (int i = 0; i < cfg->sources; i++) {
        if (!cfg->fake) {
            sources[i] = strdup(ts_kernel_source(i));
            continue;
        }
        /* the fake compile sleeps as told: builds last long enough to be killed in; one
         * source in eight does not compile (its log is shared, under kills too) */
        char buf[256];
        snprintf(buf, sizeof buf, "// chaos source %d\n// sleep_ms=%d\n%s", i, 5 + (i * 7) % 30,
                 i % 8 == 7 ? "#error chaos\n" : "");
        sources[i] = strdup(buf);
    }
}

static void free_sources(void)
{
    for (int i = 0; i < cfg->sources; i++)
        free(sources[i]);
    free(sources);
}

/* The reference objects: compiled by the platform itself, no cache anywhere, in a child
 * (hipRTC must not be loaded in the parent that forks the workers). */
static void make_references(void)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const kpc_platform *pf = kpc_platform_get();
        for (int i = 0; i < cfg->sources; i++) {
            kpc_source src = source_of(i);
            kpc_build b;
            memset(&b, 0, sizeof b);
            kpc_status s = pf->compile(ts_target(), &src, &b);
            sh->ref_status[i] = s;
            if (s == KPC_OK) {
                if (b.code_size > REF_MAX)
                    _exit(2);
                memcpy(sh->ref[i], b.code, b.code_size);
                sh->ref_size[i] = b.code_size;
            }
            kpc_platform_build_free(&b);
        }
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the reference compiles failed");
    int good = 0;
    for (int i = 0; i < cfg->sources; i++)
        good += sh->ref_status[i] == KPC_OK;
    ck_assert_int_gt(good, 0);
}

/* ---- the worker ---------------------------------------------------------------------- */
static const kpc_platform *base_platform;
static kpc_platform chaos_platform;

/* The platform's compile, with a targeted kill inside it: the slot is claimed, nothing
 * is written yet. */
static kpc_status chaos_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    if (me && atomic_load(&me->armed) == PH_COMPILE)
        die_at(PH_COMPILE);
    return base_platform->compile(target, src, b);
}

/* ---- the parent ------------------------------------------------------------------------ */
typedef struct figures {
    uint64_t kills[PH_COUNT], respawns, hangs, clears, prunes, tool_kills, tool_failures, crashes;
} figures;

static pid_t spawn(int slot)
{
    atomic_store(&sh->w[slot].dying_at, PH_RANDOM);
    atomic_store(&sh->w[slot].armed, PH_RANDOM);
    atomic_store(&sh->w[slot].heartbeat_ns, kpc__now_ns());
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* a parent that fails an assertion mid-storm leaves no worker behind */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(0);
        rnd_state = 0; /* not the parent's sequence: every worker its own */
        worker(slot);
    }
    atomic_store(&sh->w[slot].pid, pid);
    return pid;
}

static int slot_of(pid_t pid)
{
    for (int i = 0; i < cfg->procs; i++)
        if (atomic_load(&sh->w[i].pid) == pid)
            return i;
    return -1;
}

static pid_t tool_pid;
static bool tool_is_clear;
static uint64_t tool_kill_at; /* a clear or prune killed mid-walk at this time (0: none) */

static void start_tool(void)
{
    static char max_size[32];
    const char *tool = getenv("KPC_TOOL");
    ck_assert_ptr_nonnull(tool);
    tool_is_clear = rnd() % 3 == 0;
    /* one in three is killed a few milliseconds in: mid-walk, holding the prune lock */
    tool_kill_at = rnd() % 3 == 0 ? kpc__now_ns() + (1 + rnd() % 30) * 1000000ull : 0;
    snprintf(max_size, sizeof max_size, "%uK", (unsigned)(1 + rnd() % 8));
    fflush(NULL);
    tool_pid = fork();
    ck_assert_int_ge(tool_pid, 0);
    if (tool_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        if (tool_is_clear)
            execl(tool, tool, "clear", "--cache-dir", dir, (char *)NULL);
        else
            execl(tool, tool, "prune", "--cache-dir", dir, "--max-size", max_size, (char *)NULL);
        _exit(127);
    }
}

/* How long ago a worker's request began; 0 when it began after now was read (the
 * worker stores its heartbeat concurrently with the parent's reading of the clock). */
static uint64_t age_of(const worker_slot *w, uint64_t now)
{
    uint64_t hb = atomic_load(&w->heartbeat_ns);
    return hb < now ? now - hb : 0;
}

/* The process is stopped (state T). */
static bool proc_stopped(pid_t pid)
{
    return kpc__proc_state(pid) == 'T';
}

/* Reap whatever ended; kill what stopped (a table-lock holder) or hangs. */
static void reap(figures *f, bool respawn)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG | WUNTRACED)) > 0) {
        if (pid == tool_pid) {
            if (WIFSTOPPED(st))
                continue;
            if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
                f->tool_failures++;
            tool_pid = 0;
            continue;
        }
        int slot = slot_of(pid);
        if (slot < 0)
            continue;
        if (WIFSTOPPED(st)) { /* kpc_index_test_hold_lock: it holds the table lock */
            kill(pid, SIGKILL);
            f->kills[PH_TABLE_LOCK]++;
            continue; /* reaped next round */
        }
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
            int at = atomic_load(&sh->w[slot].dying_at);
            if (at != PH_RANDOM)
                f->kills[at]++;
        } else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            fprintf(stderr, "chaos: worker %d ended with status 0x%x\n", (int)pid, st);
            f->crashes++;
        }
        atomic_store(&sh->w[slot].pid, 0);
        if (respawn) {
            spawn(slot);
            f->respawns++;
        }
    }
    uint64_t now = kpc__now_ns();
    for (int i = 0; i < cfg->procs; i++) {
        pid_t p = atomic_load(&sh->w[i].pid);
        if (p > 0 && age_of(&sh->w[i], now) > 100000000ull && proc_stopped(p)) {
            /* a stop waitpid did not report (seen): it holds the table lock all the same */
            kill(p, SIGKILL);
            f->kills[PH_TABLE_LOCK]++;
            atomic_store(&sh->w[i].heartbeat_ns, now);
            continue;
        }
        if (p > 0 && age_of(&sh->w[i], now) > cfg->hang_ns) {
            int src = atomic_load(&sh->w[i].source);
            fprintf(stderr, "chaos: worker %d made no progress for %llu s (source %d%s, armed for %s): "
                    "a hang\n", (int)p, (unsigned long long)(cfg->hang_ns / 1000000000ull), src,
                    sh->ref_status[src] == KPC_OK ? "" : ", which does not compile",
                    phase_names[atomic_load(&sh->w[i].armed)]);
            for (int j = 0; j < cfg->procs; j++) /* what every worker is doing */
                fprintf(stderr, "chaos:   worker %d: %s, last request began %.1f s ago\n",
                        (int)atomic_load(&sh->w[j].pid),
                        proc_stopped(atomic_load(&sh->w[j].pid)) ? "stopped" : "running",
                        (double)age_of(&sh->w[j], now) / 1e9);
            if (getenv("KPC_CHAOS_GDB")) { /* debugging: where it hangs, and every other worker */
                for (int j = 0; j < cfg->procs; j++) {
                    char cmd[256];
                    pid_t q = atomic_load(&sh->w[j].pid);
                    if (q <= 0)
                        continue;
                    snprintf(cmd, sizeof cmd, "echo '== %s %d'; gdb -batch -p %d -ex 'bt' 2>/dev/null | grep '^#'",
                             q == p ? "HUNG" : "worker", (int)q, (int)q);
                    if (system(cmd) != 0)
                        fprintf(stderr, "chaos: gdb failed\n");
                }
            }
            f->hangs++;
            atomic_store(&sh->w[i].heartbeat_ns, now);
            kill(p, SIGKILL);
        }
    }
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A fresh process asks for every source once, with a deadline: a stuck slot is a hang. */
static int final_pass(void)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        alarm(60);
        kpc_cache *cache = worker_open();
        if (cache == NULL)
            _exit(3);
        me = NULL;
        uint64_t wrong0 = atomic_load(&sh->wrong), err0 = atomic_load(&sh->errors);
        kpc_context *ctx;
        if (kpc_context_create_for_target(cache, ts_target(), &ctx) != KPC_OK)
            _exit(4);
        for (int i = 0; i < cfg->sources; i++) {
            kpc_source src = source_of(i);
            kpc_program *p = NULL;
            kpc_status s = kpc_program_get(ctx, &src, &p);
            size_t size = 0;
            const void *code = s == KPC_OK ? kpc_program_code(p, &size) : NULL;
            if (s != sh->ref_status[i] ||
                (s == KPC_OK && (size != sh->ref_size[i] || memcmp(code, sh->ref[i], size) != 0))) {
                fprintf(stderr, "chaos: final pass: source %d: %s\n", i, kpc_status_str(s));
                _exit(5);
            }
            kpc_program_release(p);
        }
        kpc_context_destroy(ctx);
        kpc_cache_close(cache);
        _exit(atomic_load(&sh->wrong) == wrong0 && atomic_load(&sh->errors) == err0 ? 0 : 6);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void run_chaos(const chaos_cfg *c)
{
    cfg = c;
    ck_assert_msg(getenv("KPC_TOOL") != NULL, "KPC_TOOL is not set (run through ctest)");
    dir = ts_tmpdir();
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
    if (cfg->fake)
        ts_fake_install();
    base_platform = kpc_platform_get();
    chaos_platform = *base_platform;
    chaos_platform.compile = chaos_compile;
    make_sources();
    make_references();
    kpc_platform_set(&chaos_platform);

    /* a waiter gives up on a live builder after 5 s and builds for itself (the library's
     * bound, generous by default): the hang bound above is larger */
    setenv("KPC_BUILD_WAIT_MAX_MS", "5000", 0);
    figures f;
    memset(&f, 0, sizeof f);
    uint64_t start = kpc__now_ns(), end = start + (uint64_t)cfg->seconds * 1000000000ull;
    uint64_t next_kill = start, next_churn = start + (uint64_t)cfg->churn_ms * 1000000ull;
    for (int i = 0; i < cfg->procs; i++)
        spawn(i);
    while (kpc__now_ns() < end) {
        sleep_ms(2);
        reap(&f, true);
        uint64_t now = kpc__now_ns();
        if (now >= next_kill) {
            int slot = (int)(rnd() % (uint64_t)cfg->procs);
            pid_t p = atomic_load(&sh->w[slot].pid);
            if (p > 0 && kill(p, SIGKILL) == 0)
                f.kills[PH_RANDOM]++;
            next_kill = now + (uint64_t)(cfg->kill_min_ms + (int)(rnd() % (uint64_t)(cfg->kill_max_ms -
                                                                                        cfg->kill_min_ms + 1))) *
                                  1000000ull;
        }
        if (tool_pid > 0 && tool_kill_at && now >= tool_kill_at) {
            kill(tool_pid, SIGKILL); /* reaped by reap() */
            tool_kill_at = 0;
            f.tool_kills++;
        }
        if (now >= next_churn) {
            if (tool_pid == 0) {
                start_tool();
                tool_is_clear ? f.clears++ : f.prunes++;
            }
            next_churn = now + (uint64_t)cfg->churn_ms * 1000000ull;
        }
    }
    /* stop: workers finish their request and exit; one that does not within the hang
     * bound is a hang */
    atomic_store(&sh->stop, 1);
    uint64_t stop_deadline = kpc__now_ns() + cfg->hang_ns;
    for (;;) {
        reap(&f, false);
        int live = tool_pid > 0;
        for (int i = 0; i < cfg->procs; i++)
            live += atomic_load(&sh->w[i].pid) > 0;
        if (live == 0)
            break;
        if (kpc__now_ns() > stop_deadline) {
            for (int i = 0; i < cfg->procs; i++) {
                pid_t p = atomic_load(&sh->w[i].pid);
                if (p > 0) {
                    fprintf(stderr, "chaos: worker %d did not stop: a hang\n", (int)p);
                    f.hangs++;
                    kill(p, SIGKILL);
                }
            }
            if (tool_pid > 0)
                kill(tool_pid, SIGKILL);
            stop_deadline = UINT64_MAX;
        }
        sleep_ms(5);
    }

    int final = final_pass();

    /* the tool: nothing damaged, and a prune leaves no temp file of a dead writer */
    const char *tool = getenv("KPC_TOOL");
    char *out = NULL, *err = NULL;
    const char *verify[] = {tool, "verify", "--cache-dir", dir, NULL};
    int verify_rc = ts_exec(verify, NULL, &out, &err);
    char verify_out[512];
    snprintf(verify_out, sizeof verify_out, "%s%s", out, err);
    free(out), free(err);
    const char *prune[] = {tool, "prune", "--cache-dir", dir, "--max-size", "1G", NULL};
    int prune_rc = ts_exec(prune, NULL, NULL, NULL);
    int tmp_left = ts_tmp_entries(dir);

    uint64_t kills = 0;
    for (int i = 0; i < PH_COUNT; i++)
        kills += f.kills[i];
    printf("chaos (%s): %d processes x %d sources, %d s: %llu requests, %llu kills (", cfg->name,
           cfg->procs, cfg->sources, cfg->seconds, (unsigned long long)atomic_load(&sh->requests),
           (unsigned long long)kills);
    for (int i = 0; i < PH_COUNT; i++)
        printf("%s%llu %s", i ? ", " : "", (unsigned long long)f.kills[i], phase_names[i]);
    printf("), %llu clears, %llu prunes, %llu tools killed, %llu tool failures; wrong objects %llu, "
           "failed requests %llu, hangs %llu, crashes %llu; final pass %s, verify %s, temp files left %d\n",
           (unsigned long long)f.clears, (unsigned long long)f.prunes, (unsigned long long)f.tool_kills,
           (unsigned long long)f.tool_failures, (unsigned long long)atomic_load(&sh->wrong),
           (unsigned long long)atomic_load(&sh->errors), (unsigned long long)f.hangs,
           (unsigned long long)f.crashes, final == 0 ? "ok" : "FAILED", verify_rc == 0 ? "clean" : "NOT clean",
           tmp_left);
    fflush(stdout);

    kpc_platform_set(NULL);
    if (cfg->fake)
        ts_fake_remove();
    free_sources();
    ts_cleanup(dir);
    uint64_t wrong = atomic_load(&sh->wrong), errors = atomic_load(&sh->errors), requests = atomic_load(&sh->requests);
    munmap(sh, sizeof *sh);
    ck_assert_uint_gt(requests, 0);
    ck_assert_uint_gt(kills, 0);
    ck_assert_uint_eq(wrong, 0);
    ck_assert_uint_eq(errors, 0);
    ck_assert_uint_eq(f.hangs, 0);
    ck_assert_uint_eq(f.crashes, 0);
    ck_assert_int_eq(final, 0);
    ck_assert_msg(verify_rc == 0, "kpc verify after the storm: exit %d\n%s", verify_rc, verify_out);
    ck_assert_int_eq(prune_rc, 0);
    ck_assert_int_eq(tmp_left, 0);
}

static int env_int(const char *name, int def, int lo, int hi)
{
    const char *v = getenv(name);
    int n = v && *v ? atoi(v) : def;
    return n < lo ? lo : n > hi ? hi : n;
}

START_TEST(chaos_fake)
{
    chaos_cfg c = {.name = "fake", .fake = true,
                   .seconds = env_int("KPC_CHAOS_SECONDS", 16, 1, 24 * 3600),
                   .procs = env_int("KPC_CHAOS_PROCS", 8, 1, MAX_PROCS),
                   .sources = env_int("KPC_CHAOS_SOURCES", 24, 1, MAX_SOURCES),
                   .shm_entries = 16, .kill_min_ms = 5, .kill_max_ms = 60, .churn_ms = 400,
                   .hang_ns = 20 * 1000000000ull, .disk_max_bytes = 6 * 1024};
    run_chaos(&c);
}
END_TEST

START_TEST(chaos_hiprtc)
{
    int seconds = env_int("KPC_CHAOS_SECONDS", 16, 1, 24 * 3600) / 2;
    chaos_cfg c = {.name = "hiprtc", .fake = false, .seconds = seconds < 1 ? 1 : seconds,
                   .procs = env_int("KPC_CHAOS_PROCS", 3, 1, MAX_PROCS),
                   .sources = env_int("KPC_CHAOS_SOURCES", 4, 1, MAX_SOURCES),
                   .shm_entries = 0, .kill_min_ms = 300, .kill_max_ms = 1500, .churn_ms = 1500,
                   .hang_ns = 60 * 1000000000ull};
    run_chaos(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chaos");
    /* the storm's length plus the checks after it */
    int timeout = env_int("KPC_CHAOS_SECONDS", 16, 1, 24 * 3600) * 2 + 120;
    tcase_add_test(ts_case(s, "fake", timeout, NULL, NULL), chaos_fake);
    tcase_add_test(ts_case(s, "hiprtc", timeout, NULL, NULL), chaos_hiprtc);
    return ts_run_suite(s);
}
