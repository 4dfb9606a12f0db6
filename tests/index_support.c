/*
 * index_support.c - the host-index tests' shared fixtures and helpers (index_support.h).
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

char *dir;  /* this test's cache directory: <base>/t-XXXXXX/cache */
shared *sh;
char base[64]; /* this test case's scratch root, made in the runner process */

/*
 * A failed check ends the test process with _exit: no teardown runs there. So the test
 * case's unchecked fixture (run by the runner) owns a scratch root; each test's cache
 * directory lives under it, and each child it spawns is listed in <base>/pids; the case's
 * teardown kills what is left of them, unlinks every segment and removes the root.
 */
void case_setup(void)
{
    snprintf(base, sizeof base, "/tmp/kpc-index-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(base));
    /* the compiler's temporary files (comgr-XXXXXX) of a child killed while it compiles
     * stay inside the scratch root, which the teardown removes */
    setenv("TMPDIR", base, 1);
}

void case_teardown(void)
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

void setup(void)
{
    char tmpl[128];
    snprintf(tmpl, sizeof tmpl, "%s/t-XXXXXX", base);
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    dir = malloc(strlen(tmpl) + 8);
    sprintf(dir, "%s/cache", tmpl);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
}

void teardown(void)
{
    munmap(sh, sizeof *sh);
    ts_cleanup(dir);
    ts_fake_remove();
}

/* ---- helpers ------------------------------------------------------------------------ */
double now_s(void)
{
    return (double)kpc__now_ns() / 1e9;
}

void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Every child of the scenario arrives, then all go at once. */
void barrier(int n)
{
    atomic_fetch_add(&sh->arrived, 1);
    while (atomic_load(&sh->arrived) < n)
        usleep(200);
}

pid_t spawn(int (*fn)(int, void *), int i, void *arg)
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

int reap(pid_t p)
{
    int st = 0;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR)
        ;
    return st;
}

void assert_exited_0(int st, const char *who)
{
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s %d", who,
                  WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

char *root_of(const char *d)
{
    char *r = realpath(d, NULL);
    ck_assert_msg(r != NULL, "realpath(%s)", d);
    return r;
}

void segment_path(const char *d, char *out, size_t cap)
{
    char *r = root_of(d), name[96];
    kpc_index_segment_name(r, name, sizeof name);
    snprintf(out, cap, "/dev/shm%s", name);
    free(r);
}

/* Create the cache directory and its segment (capacity entries), so a parent can watch
 * the segment while its children work; no compile. */
void precreate(size_t entries)
{
    kpc_cache *c = ts_open(dir, 0, entries);
    ck_assert_ptr_nonnull(c->index);
    kpc_cache_close(c);
}

/* The host counters (and, with a non-NULL check, whether kpc_index_check passed). */
kpc_stats host_stats(bool *check)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    if (check)
        *check = c->index != NULL && kpc_index_check(c->index);
    kpc_cache_close(c);
    return st;
}

char *scratch_file(const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 8);
    sprintf(p, "%s/../%s", dir, name); /* beside the cache dir: ts_cleanup removes it */
    return p;
}

/* Run kpc-shm-reset on dir; returns its exit status and its output in out (malloc'd). */
int run_reset(bool force, char **out)
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

bool segment_exists(void)
{
    char path[256];
    segment_path(dir, path, sizeof path);
    return access(path, F_OK) == 0;
}

/* Open the cache, meet the others at the barrier, ask every source, report. */
int storm_child(int i, void *arg)
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
void assert_same_objects(int n, int nsrc, int skip)
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
uint64_t hash_now(kpc_context *ctx, const char *code, size_t *size)
{
    kpc_source src = ts_src(code, "storm.hip");
    void *bytes = ts_get_code(ctx, &src, size);
    uint64_t h = XXH3_64bits(bytes, *size);
    free(bytes);
    return h;
}

/* ---- crash ------------------------------------------------------------------------------ */
kpc_index *observe(void)
{
    char *r = root_of(dir);
    kpc_index *ix = NULL;
    ck_assert_int_eq(kpc_index_open_existing(r, &ix), KPC_OK);
    free(r);
    return ix;
}

const char *numbered(char *buf, size_t cap, int i)
{
    snprintf(buf, cap, "// key %d\n__global__ void k%d() {}\n", i, i);
    return buf;
}

int evict_keys(kpc_context *ctx, int w, uint64_t *hashes)
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

void assert_eviction_outcome(int workers, uint64_t (*hashes)[64], size_t stride)
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

/* ---- protocol: the index API directly --------------------------------------------------- */
kpc_index *index_open(size_t entries)
{
    ck_assert_int_eq(kpc__mkdir_p(dir, 0700), 0);
    char *r = root_of(dir);
    kpc_index *ix = NULL;
    ck_assert_int_eq(kpc_index_open(r, entries, false, &ix), KPC_OK);
    free(r);
    return ix;
}

kpc_key key_of(int i)
{
    kpc_key k;
    uint8_t seed[4] = {(uint8_t)i, (uint8_t)(i >> 8), 0x4b, 0x50};
    XXH128_hash_t h = XXH3_128bits(seed, sizeof seed);
    memcpy(k.bytes, &h, 16);
    return k;
}

/* A child's own handle on the index of dir (entries if it creates it), or NULL. */
kpc_index *child_index(size_t entries)
{
    char *r = realpath(dir, NULL);
    kpc_index *ix = NULL;
    if (r == NULL || kpc_index_open(r, entries, false, &ix) != KPC_OK)
        ix = NULL;
    free(r);
    return ix;
}

int begin_child(int i, void *arg)
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

void wait_for_waits(kpc_index *ix, uint64_t n)
{
    kpc_index_counters cn;
    double deadline = now_s() + 60;
    do {
        sleep_ms(2);
        kpc_index_counters_get(ix, &cn);
    } while (cn.waits < n && now_s() < deadline);
    ck_assert_uint_ge(cn.waits, n);
}

/* Claim a->key and exit without publishing or closing (a crash); with flags 1, stay
 * building until killed; with HOLD_LOCK, stop (SIGSTOP) holding the table mutex in the
 * middle of inserting it. */
int claim_and_die(int i, void *arg)
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

void segment_write(off_t off, const void *data, size_t len)
{
    char path[256];
    segment_path(dir, path, sizeof path);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, data, len, off), (ssize_t)len);
    close(fd);
}

int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* ---- suites ------------------------------------------------------------------------------ */
TCase *tcase(Suite *s, const char *name, int timeout)
{
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, timeout);
    suite_add_tcase(s, tc);
    return tc;
}

int index_main(const char *name, int timeout, const TTest *const *tests)
{
    Suite *s = suite_create("index");
    ts_add_tests(tcase(s, name, timeout), tests);
    return ts_run_suite(s);
}
