/*
 * support.c - shared test helpers (see support.h; the child processes are support_exec.c's).
 */
#define _GNU_SOURCE
#include "support.h"
#include "storage/request_codec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    chmod(path, 0700);
    remove(path);
    return 0;
}

void ts_rm_rf(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *ts_tmpdir(void)
{
    /* under $TMPDIR when set (scripts/test.sh gives each run its own and checks it is
     * empty afterwards) */
    /* the TMPDIR the process started with: a second temp dir of one process must not
     * land inside the first (set below, and removed by ts_cleanup) */
    static char base[400];
    if (base[0] == '\0') {
        const char *env = getenv("TMPDIR");
        snprintf(base, sizeof base, "%s", env && env[0] && strlen(env) < sizeof base ? env : "/tmp");
    }
    char tmpl[512];
    snprintf(tmpl, sizeof tmpl, "%s/kpc-test-XXXXXX", base);
    char *d = mkdtemp(tmpl);
    ck_assert_ptr_nonnull(d);
    /* the compiler's own temporary files (comgr-XXXXXX) of this test and its children go
     * inside it too: a test that kills a compiling process would leave them in /tmp */
    setenv("TMPDIR", d, 1);
    char *out = malloc(strlen(d) + 7);
    sprintf(out, "%s/cache", d);
    return out;
}

/* The host-index segments in /dev/shm (names without the slash), read once. */
static char (*sweep_shm)[256];
static size_t sweep_nshm;
static void load_shm_list(void);
static void free_shm_list(void);
static void sweep_dir(const char *path);
static int sweep_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw);

void ts_cleanup(char *dir)
{
    char root[4096];
    if (realpath(dir, root))
        kpc_index_unlink(root);
    /* and the segments of this dir that a case's other users made (a tool run as
     * another uid names its segment with that uid) */
    char *slash0 = strrchr(dir, '/');
    *slash0 = '\0';
    char parent[4096];
    load_shm_list();
    if (sweep_nshm > 0)
        nftw(realpath(dir, parent) ? parent : dir, sweep_one, 16, FTW_PHYS);
    free_shm_list();
    *slash0 = '/';
    char *slash = strrchr(dir, '/');
    *slash = '\0'; /* remove the mkdtemp parent too */
    ts_rm_rf(dir);
    free(dir);
}

kpc_cache *ts_open(const char *dir, unsigned flags, size_t shm_entries)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .flags = flags,
                      .shm_entries = shm_entries};
    kpc_cache *c = NULL;
    kpc_status s = kpc_cache_open(&cfg, &c);
    ck_assert_msg(s == KPC_OK, "kpc_cache_open: %s", kpc_status_str(s));
    return c;
}

const char *ts_target(void)
{
#ifdef KPC_PLATFORM_NVIDIA
    return "sm_90";
#else
    return "gfx90a";
#endif
}

const char *ts_target2(void)
{
#ifdef KPC_PLATFORM_NVIDIA
    return "sm_80";
#else
    return "gfx1030";
#endif
}

kpc_context *ts_context(kpc_cache *c)
{
    kpc_context *ctx = NULL;
    kpc_status s = kpc_context_create_for_target(c, ts_target(), &ctx);
    ck_assert_msg(s == KPC_OK, "kpc_context_create_for_target(%s): %s", ts_target(), kpc_status_str(s));
    return ctx;
}

bool ts_is_code_object(const void *code, size_t size)
{
    const unsigned char *p = code;
    if (code == NULL || size < 64 || memcmp(p, "\x7f" "ELF", 4) != 0) {
#ifdef KPC_PLATFORM_NVIDIA
        /* compute_XX targets give PTX text */
        return code != NULL && size > 16 && strstr((const char *)code, ".version") != NULL;
#else
        return false;
#endif
    }
    unsigned machine = p[18] | p[19] << 8;
#ifdef KPC_PLATFORM_NVIDIA
    return machine == 190; /* EM_CUDA */
#else
    return machine == 224; /* EM_AMDGPU */
#endif
}

const char *ts_kernel_source(int i)
{
    static char bufs[64][256];
    ck_assert_int_lt(i, 64);
    snprintf(bufs[i], sizeof bufs[i],
             "extern \"C\" __global__ void kpc_test_k%d(float *a, int n)\n"
             "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < n) a[i] = a[i] * %d.0f + %d.0f;\n}\n", i, i + 2, i);
    return bufs[i];
}

/* NVRTC stops template instantiation at depth 200 (an error, not a slow compile) */
#ifdef KPC_PLATFORM_NVIDIA
#define SLOW_DEPTH 190
#else
#define SLOW_DEPTH 400
#endif

char *ts_slow_source(int kernels)
{
    size_t cap = 512 + (size_t)kernels * 160;
    char *s = malloc(cap);
    size_t n = (size_t)snprintf(s, cap,
        "template<int N> struct F { __device__ static float f(float x)"
        " { return F<N-1>::f(x) * 1.0001f + (x + N) * 0.5f; } };\n"
        "template<> struct F<0> { __device__ static float f(float x) { return x; } };\n");
    for (int i = 0; i < kernels; i++)
        n += (size_t)snprintf(s + n, cap - n,
            "extern \"C\" __global__ void slow%d(float *a) { a[threadIdx.x] = F<%d>::f(a[threadIdx.x] + %d); }\n",
            i, SLOW_DEPTH, i);
    return s;
}

const char *ts_bad_source(void)
{
    return "extern \"C\" __global__ void broken(float *a) { a[0] = undeclared_thing; }\n";
}

kpc_source ts_src(const char *code, const char *name)
{
    kpc_source s = {0};
    s.code = code;
    s.name = name;
    return s;
}

void ts_request_variants(kpc_source v[TS_REQUEST_VARIANTS])
{
    static const char *o1[] = {"-O3", "-DA=1"}, *o2[] = {"-DA=1", "-O3"}, *hn[] = {"a.h"}, *hs[] = {"x"},
                      *hs2[] = {"y"}, *e1[] = {"f<int>"}, *e2[] = {"f<float>"};
    for (int i = 0; i < TS_REQUEST_VARIANTS; i++)
        v[i] = ts_src("code", "n.hip");
    v[1].code = "codf";
    v[2].name = "m.hip";
    v[3].options = o1, v[3].num_options = 2;
    v[4].options = o2, v[4].num_options = 2;
    v[5].header_names = hn, v[5].header_sources = hs, v[5].num_headers = 1;
    v[6].header_names = hn, v[6].header_sources = hs2, v[6].num_headers = 1;
    v[7].name_expressions = e1, v[7].num_name_expressions = 1;
    v[8].name_expressions = e2, v[8].num_name_expressions = 1;
}

void *ts_get_code(kpc_context *ctx, const kpc_source *src, size_t *size)
{
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, src, &p);
    ck_assert_msg(s == KPC_OK, "kpc_program_get: %s: %s", kpc_status_str(s), kpc_last_log());
    const void *code = kpc_program_code(p, size);
    /* wherever it came from (a build, a record, the record a manifest's carries) */
    ck_assert_msg((uintptr_t)code % _Alignof(max_align_t) == 0, "the code object at %p: not aligned", code);
    void *copy = malloc(*size);
    memcpy(copy, code, *size);
    kpc_program_release(p);
    return copy;
}

/* ---- keys and files ---- */
void ts_key(const kpc_context *ctx, const kpc_source *src, kpc_key *out)
{
    kpc_status s = kpc_key_compute(ctx->key_id, ctx->cache->platform->name, ctx->target, src, out);
    ck_assert_int_eq(s, KPC_OK);
}

void ts_record_path(const char *dir, const char *target, const kpc_key *key, const char *ext,
                    char *out, size_t cap)
{
    char root[4096], hex[KPC_KEY_HEX];
    ck_assert_ptr_nonnull(realpath(dir, root));
    kpc_key_hex(key, hex);
    int n = snprintf(out, cap, "%s/v1/%s/%.2s/%s.%s", root, target, hex, hex, ext);
    ck_assert(n > 0 && (size_t)n < cap);
}

int ts_count_entries(const char *path)
{
    DIR *dd = opendir(path);
    if (dd == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dd)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(dd);
    return n;
}

int ts_tmp_entries(const char *d)
{
    char root[4096], path[4200];
    if (realpath(d, root) == NULL)
        return 0;
    snprintf(path, sizeof path, "%s/v1/tmp", root);
    int n = ts_count_entries(path);
    return n < 0 ? 0 : n;
}

void ts_tmp_domain(const char *dir, char out[17])
{
    kpc_root *r;
    ck_assert_int_eq(kpc_root_open(dir, &r), KPC_OK);
    kpc_key k = {{0}};
    char path[4400];
    ck_assert_int_eq(kpc_root_tmp_path(r, &k, path, sizeof path), 0);
    const char *name = strrchr(path, '/') + 1;
    ck_assert_int_eq(name[49], '.');
    memcpy(out, name + 33, 16);
    out[16] = '\0';
    kpc_root_close(r);
}

void *ts_read_file(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        ck_assert_int_gt(n, 0);
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    *size = got;
    return buf;
}

void ts_include_dir(const char *dir, char *header, char *opt, size_t cap)
{
    snprintf(opt, cap, "%s/inc", dir);
    ck_assert_int_eq(kpc__mkdir_p(opt, 0700), 0);
    snprintf(header, cap, "%s/h.h", opt);
    ts_write_file(header, "#define H 1\n", 12);
    snprintf(opt, cap, "-I%s/inc", dir);
}

void ts_write_file(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_msg(fd >= 0, "open(%s): %s", path, strerror(errno));
    ck_assert_int_eq(kpc__write_all(fd, data, size), 0);
    close(fd);
}

/* ---- the suite's scratch root ---- */

/* Unlink the segments of cache directory `path` (the index of every layout, its
 * temporary and .real ones), whichever user made them: a case may act as another user. */
static void sweep_dir(const char *path)
{
    char name[96];
    kpc_root_segment_name(path, name, sizeof name); /* /kpc-<uid>-<hash of the path> */
    const char *hash = strrchr(name, '-') + 1;
    size_t len = strlen(hash);
    bool found = false;
    for (size_t i = 0; i < sweep_nshm; i++) {
        const char *e = strchr(sweep_shm[i] + 4, '-'); /* past "kpc-<uid>" */
        /* then the end, a temporary's ".tmp-..." or the layout's "-L<format>" */
        if (e == NULL || strncmp(e + 1, hash, len) != 0 ||
            (e[1 + len] != '\0' && e[1 + len] != '.' && e[1 + len] != '-'))
            continue;
        if (!found)
            kpc_index_unlink(path);
        found = true;
        char seg[300];
        snprintf(seg, sizeof seg, "/dev/shm/%s", sweep_shm[i]);
        unlink(seg);
    }
}

static int sweep_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)ftw;
    if (flag != FTW_D && flag != FTW_DNR && flag != FTW_DP)
        return 0;
    sweep_dir(path);
    /* and DIR/cache, ts_tmpdir's name, also where it is gone: on a tmpfs mounted in the
     * failed case's own mount namespace, say */
    char cache[4200];
    snprintf(cache, sizeof cache, "%s/cache", path);
    sweep_dir(cache);
    return 0;
}

/* Read the list of kpc segments in /dev/shm (sweep_shm), once per sweep. */
static void load_shm_list(void)
{
    DIR *d = opendir("/dev/shm");
    size_t cap = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "kpc-", 4) != 0 || strlen(e->d_name) >= sizeof sweep_shm[0])
            continue;
        if (sweep_nshm == cap) {
            cap = cap ? cap * 2 : 64;
            sweep_shm = realloc(sweep_shm, cap * sizeof sweep_shm[0]);
        }
        snprintf(sweep_shm[sweep_nshm++], sizeof sweep_shm[0], "%s", e->d_name);
    }
    if (d)
        closedir(d);
}

static void free_shm_list(void)
{
    free(sweep_shm);
    sweep_shm = NULL;
    sweep_nshm = 0;
}

static void sweep_root(const char *root)
{
    load_shm_list();
    if (sweep_nshm > 0)
        nftw(root, sweep_one, 16, FTW_PHYS);
    free_shm_list();
    ts_rm_rf(root);
}

/* A watcher outside the test's process tree: CTest ends a test past its timeout by
 * killing its whole tree with SIGKILL, which no clean-up in it survives. The watcher
 * waits for the end of the runner (EOF on a pipe only the runner's processes hold) and
 * then sweeps the root if the runner did not. Returns the pipe's write end (-1: none). */
static int start_watcher(const char *root)
{
    int alive[2];
    if (pipe2(alive, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        if (fork() != 0) /* the grandchild, reparented: out of the tree */
            _exit(0);
        setsid();
        close(alive[1]);
        char c;
        while (read(alive[0], &c, 1) < 0 && errno == EINTR)
            ;
        if (access(root, F_OK) == 0)
            sweep_root(root);
        _exit(0);
    }
    close(alive[0]);
    if (pid < 0) {
        close(alive[1]);
        return -1;
    }
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return alive[1];
}

int ts_run_suite(Suite *s)
{
    /* every case's temp dirs, logs and compiler files under one root of this run */
    const char *env = getenv("TMPDIR");
    char *saved = env ? strdup(env) : NULL;
    char tmpl[512], root[4096];
    snprintf(tmpl, sizeof tmpl, "%s/kpc-test-XXXXXX", env && env[0] && strlen(env) < 400 ? env : "/tmp");
    if (mkdtemp(tmpl) == NULL || realpath(tmpl, root) == NULL) {
        fprintf(stderr, "ts_run_suite: mkdtemp(%s): %s\n", tmpl, strerror(errno));
        free(saved);
        return 1;
    }
    /* traversable: cases that act as another user open their own dirs (0755) inside it */
    chmod(root, 0711);
    int watcher = start_watcher(root);
    setenv("TMPDIR", root, 1);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    sweep_root(root);
    if (watcher >= 0)
        close(watcher); /* it finds the root gone, and ends */
    if (saved)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    free(saved);
    return failed == 0 ? 0 : 1;
}

int ts_main_processes_threads(int argc, char **argv, Suite *(*processes)(void),
                              Suite *(*threads)(void))
{
    const char *which = argc > 1 ? argv[1] : "processes";
    int rc = 0;
    if (strcmp(which, "processes") == 0 || strcmp(which, "all") == 0)
        rc |= ts_run_suite(processes());
    if (strcmp(which, "threads") == 0 || strcmp(which, "all") == 0)
        rc |= ts_run_suite(threads());
    return rc;
}

TCase *ts_case(Suite *s, const char *name, int timeout, SFun setup, SFun teardown)
{
    TCase *tc = tcase_create(name);
    if (setup || teardown)
        tcase_add_checked_fixture(tc, setup, teardown);
    if (timeout > 0)
        tcase_set_timeout(tc, timeout);
    suite_add_tcase(s, tc);
    return tc;
}

void ts_add_tests(TCase *tc, const TTest *const *tests)
{
    for (size_t i = 0; tests[i]; i++)
        tcase_add_test(tc, tests[i]);
}

int ts_main_case(const char *suite, const char *tcase, int timeout, SFun setup, SFun teardown,
                 const TTest *const *tests)
{
    Suite *s = suite_create(suite);
    ts_add_tests(ts_case(s, tcase, timeout, setup, teardown), tests);
    return ts_run_suite(s);
}

bool ts_have_request_digest(void)
{
    kpc_key key = {{0}};
    kpc_source src = {.code = "k"};
    uint8_t digest[32];
    return kpc_request_digest(&key, &src, digest);
}
