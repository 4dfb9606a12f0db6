/*
 * bench.c - shared benchmark helpers (see bench.h).
 */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

uint64_t bn_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bn_median(double *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int bn_nproc(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void bn_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The directories bn_tmpdir made and bn_cleanup has not removed yet, and the process
 * that made them: a bench that dies removes them (and their host index) as a finished
 * one does, and a child that dies (a fork, with the parent's list) leaves them be. */
enum { MADE_MAX = 8 };
static char *made[MADE_MAX];
static pid_t made_by;

void bn_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    for (int i = 0; i < MADE_MAX && getpid() == made_by; i++)
        if (made[i])
            bn_cleanup(made[i]);
    exit(1);
}

void bn_fmt_time(char *out, size_t cap, double s)
{
    if (s < 1e-6)
        snprintf(out, cap, "%.0f ns", s * 1e9);
    else if (s < 1e-3)
        snprintf(out, cap, "%.*f us", s < 1e-5 ? 2 : 1, s * 1e6);
    else if (s < 1)
        snprintf(out, cap, "%.*f ms", s < 1e-2 ? 2 : 1, s * 1e3);
    else
        snprintf(out, cap, "%.2f s", s);
}

/* A field of a row: tabs and newlines would break the line format. */
static void put_field(FILE *f, const char *s)
{
    for (; s && *s; s++)
        fputc(*s == '\t' || *s == '\n' ? ' ' : *s, f);
    fputc('\t', f);
}

void bn_row(const char *id, const char *figure, const char *value_text, const char *reference,
            const char *ref_text, const char *ratio_text, const char *goal, int met, double value,
            const char *unit)
{
    const char *path = getenv("KPC_BENCH_ROWS");
    FILE *f = path && path[0] ? fopen(path, "ae") : stdout;
    if (f == NULL)
        bn_die("cannot append to %s: %s", path, strerror(errno));
    /* id, figure, value, reference, reference value, ratio, goal, met, raw value, unit */
    const char *fields[] = {id, figure, value_text, reference, ref_text, ratio_text, goal,
                            met > 0 ? "yes" : met == 0 ? "no" : "-"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        put_field(f, fields[i]);
    fprintf(f, "%.6g\t%s\n", value, unit);
    if (f != stdout)
        fclose(f);
    else
        fflush(f);
    bn_say("%-34s %-14s %-30s %-14s %-8s %s", figure, value_text, reference, ref_text, ratio_text,
           met > 0 ? "met" : met == 0 ? "MISSED" : "");
}

/* ---- directories ------------------------------------------------------------------- */
static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void bn_rm_rf(const char *path)
{
    nftw(path, rm_one, 64, FTW_DEPTH | FTW_PHYS);
}

char *bn_tmpdir(void)
{
    const char *base = getenv("KPC_BENCH_TMP");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/kpc-bench-XXXXXX", base && base[0] ? base : "/tmp");
    if (mkdtemp(tmpl) == NULL)
        bn_die("mkdtemp(%s): %s", tmpl, strerror(errno));
    char *out = malloc(strlen(tmpl) + 7);
    if (out == NULL)
        bn_die("out of memory");
    sprintf(out, "%s/cache", tmpl);
    made_by = getpid();
    for (int i = 0; i < MADE_MAX; i++)
        if (made[i] == NULL) {
            made[i] = out;
            break;
        }
    return out;
}

void bn_cleanup(char *dir)
{
    for (int i = 0; i < MADE_MAX; i++)
        if (made[i] == dir)
            made[i] = NULL;
    char root[4096];
    if (realpath(dir, root))
        kpc_index_unlink(root);
    char *slash = strrchr(dir, '/');
    *slash = '\0';
    bn_rm_rf(dir);
    free(dir);
}

kpc_cache *bn_open(const char *dir, unsigned flags, size_t shm_entries)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .flags = flags,
                      .shm_entries = shm_entries};
    kpc_cache *c = NULL;
    kpc_status s = kpc_cache_open(&cfg, &c);
    if (s != KPC_OK)
        bn_die("kpc_cache_open(%s): %s", dir, kpc_status_str(s));
    return c;
}

static bool nvidia_platform(void)
{
    return strcmp(kpc_platform_builtin.name, "nvidia") == 0;
}

const char *bn_target(void)
{
    const char *t = getenv("KPC_BENCH_TARGET");
    if (t && t[0])
        return t;
    return nvidia_platform() ? "sm_90" : "gfx90a";
}

/* What a source starts with: HIP's header, which NVRTC neither has nor needs. */
static const char *prelude(void)
{
    return nvidia_platform() ? "" : "#include <hip/hip_runtime.h>\n";
}

kpc_context *bn_context(kpc_cache *c)
{
    kpc_context *ctx = NULL;
    kpc_status s = kpc_context_create_for_target(c, bn_target(), &ctx);
    if (s != KPC_OK)
        bn_die("kpc_context_create_for_target(%s): %s", bn_target(), kpc_status_str(s));
    return ctx;
}

kpc_cache *bn_rank_open(const _Atomic int *go, const char *url, kpc_context **ctx)
{
    while (!atomic_load(go))
        usleep(100);
    kpc_config cfg = {.struct_size = sizeof cfg, .remote = url};
    kpc_cache *c = NULL;
    *ctx = NULL;
    if (kpc_cache_open(&cfg, &c) != KPC_OK)
        return NULL;
    if (kpc_context_create_for_target(c, bn_target(), ctx) != KPC_OK) {
        kpc_cache_close(c);
        return NULL;
    }
    return c;
}

uint64_t bn_rank_close(kpc_cache *c, kpc_context *ctx)
{
    kpc_stats st;
    kpc_stats_get(c, &st);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return st.builds;
}

size_t bn_get(kpc_context *ctx, const kpc_source *src)
{
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, src, &p);
    if (s != KPC_OK)
        bn_die("kpc_program_get(%s): %s\n%s", src->name ? src->name : "?", kpc_status_str(s),
               kpc_last_log());
    size_t size = 0;
    kpc_program_code(p, &size);
    kpc_program_release(p);
    return size;
}

/* ---- sources ----------------------------------------------------------------------- */
static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        bn_die("out of memory");
    va_end(ap);
    return s;
}

char *bn_padded_source(size_t bytes, int variant)
{
    char *head = xasprintf("%s"
                           "extern \"C\" __global__ void pad%d(float *a, int n)\n"
                           "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                           "  if (i < n) a[i] = a[i] * %d.0f + 1.0f;\n}\n/*", prelude(), variant,
                           variant + 2);
    size_t n = strlen(head);
    if (bytes < n + 4)
        bn_die("a padded source needs at least %zu bytes", n + 4);
    char *s = malloc(bytes + 1);
    if (s == NULL)
        bn_die("out of memory");
    memcpy(s, head, n);
    /* comment text, in lines of 64 like a real file's */
    for (size_t i = n; i < bytes - 3; i++)
        s[i] = (i - n) % 64 == 63 ? '\n' : (char)('a' + (i * 7 + (size_t)variant) % 26);
    memcpy(s + bytes - 3, "*/\n", 4);
    free(head);
    return s;
}

char *bn_slow_source(int variant, int depth)
{
    return xasprintf("%s"
                     "template<int N> struct F%d { __device__ static float f(float x)"
                     " { return F%d<N-1>::f(x) * 1.0001f + (x + N) * 0.5f; } };\n"
                     "template<> struct F%d<0> { __device__ static float f(float x) { return x; } };\n"
                     "extern \"C\" __global__ void slow%d(float *a)"
                     " { a[threadIdx.x] = F%d<%d>::f(a[threadIdx.x] + %d); }\n",
                     prelude(), variant, variant, variant, variant, variant, depth, variant);
}

char *bn_multi_source(int kernels, int variant)
{
    size_t cap = 64 + (size_t)kernels * 256, n = 0;
    char *s = malloc(cap);
    if (s == NULL)
        bn_die("out of memory");
    n += (size_t)snprintf(s, cap, "%s", prelude());
    for (int k = 0; k < kernels; k++)
        n += (size_t)snprintf(s + n, cap - n,
            "extern \"C\" __global__ void m%d_%d(float *a, const float *b, int n)"
            " { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { float x = a[i];"
            " for (int j = 0; j < %d; j++) x = x * b[(i + j) %% n] + %d.5f; a[i] = x; } }\n",
            variant, k, k + 4, k + variant);
    return s;
}

/* ---- burning CPU ------------------------------------------------------------------- */
/* where the spin's work goes: a store the compiler must keep, so the loop is not elided */
static volatile uint64_t spin_sink;

void bn_spin_cpu_ms(unsigned ms)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    uint64_t end = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec + ms * 1000000ull;
    for (;;) {
        for (int i = 0; i < 10000; i++)
            spin_sink += (uint64_t)i;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        if ((uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec >= end)
            return;
    }
}

/* ---- the fake platform --------------------------------------------------------------- */
/* The fake compiler goes in through the platform override, a test hook: the programs that
 * link the release library (KPC_BENCH_RELEASE, tests/bench/CMakeLists.txt) have none, and
 * a call of bn_fake_install there does not link. */
#ifndef KPC_BENCH_RELEASE
static _Atomic unsigned *fake_count;
static unsigned fake_ms;
static bool fake_sleeps; /* the compile sleeps instead of burning CPU */
static size_t fake_code_size;

static kpc_status fake_identity(const kpc_root *dir, uint8_t id[16], char *desc, size_t cap)
{
    (void)dir;
    memset(id, 0xb3, 16);
    snprintf(desc, cap, "bench fake compiler");
    return KPC_OK;
}

static kpc_status fake_normalize(const kpc_root *dir, const uint8_t id[16], const char *t, char *out,
                                 size_t cap)
{
    (void)dir, (void)id;
    snprintf(out, cap, "%s", t);
    return KPC_OK;
}

static kpc_status fake_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    memset(b, 0, sizeof *b);
    atomic_fetch_add(fake_count, 1);
    if (fake_sleeps) {
        struct timespec t = {fake_ms / 1000, (long)(fake_ms % 1000) * 1000000L};
        while (nanosleep(&t, &t) != 0 && errno == EINTR)
            ;
    } else
        bn_spin_cpu_ms(fake_ms);
    size_t len = src->code_len ? src->code_len : strlen(src->code);
    unsigned char *c = calloc(1, fake_code_size);
    if (c == NULL)
        return KPC_E_NOMEM;
    memcpy(c, "\x7f" "ELF", 4);
    c[18] = 224; /* EM_AMDGPU */
    uint64_t h = XXH3_64bits(src->code, len) ^ XXH3_64bits(target, strlen(target));
    memcpy(c + 64, &h, sizeof h);
    b->code = c;
    b->code_size = fake_code_size;
    return kpc_names_encode(NULL, NULL, 0, &b->names, &b->names_size);
}

static kpc_status fake_device_target(int device, char *out, size_t cap)
{
    (void)device, (void)out, (void)cap;
    return KPC_E_NO_DEVICE;
}

static const kpc_platform fake_platform = {
    .name = "fake",
    .identity = fake_identity,
    .target_normalize = fake_normalize,
    .compile = fake_compile,
    .device_target = fake_device_target,
};

void bn_fake_install(unsigned ms, size_t code_size)
{
    if (fake_count == NULL) {
        fake_count = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (fake_count == MAP_FAILED)
            bn_die("mmap: %s", strerror(errno));
    }
    atomic_store(fake_count, 0);
    fake_ms = ms;
    fake_sleeps = false;
    fake_code_size = code_size < 128 ? 128 : code_size;
    kpc_platform_set(&fake_platform);
}

void bn_fake_install_sleeping(unsigned ms, size_t code_size)
{
    bn_fake_install(ms, code_size);
    fake_sleeps = true;
}

bool bn_fake_on(void)
{
    return kpc_platform_get() == &fake_platform;
}

unsigned bn_fake_compiles(void)
{
    return fake_count ? atomic_load(fake_count) : 0;
}
#else
bool bn_fake_on(void)
{
    return false;
}

unsigned bn_fake_compiles(void)
{
    return 0;
}
#endif /* KPC_BENCH_RELEASE */

/* ---- child processes ------------------------------------------------------------------- */
extern char **environ;

double bn_run(char *const argv[], char *const env[], bool show, int *status)
{
    fflush(NULL);
    uint64_t t0 = bn_now_ns();
    pid_t pid = fork();
    if (pid < 0)
        bn_die("fork: %s", strerror(errno));
    if (pid == 0) {
        for (size_t i = 0; env && env[i]; i++)
            putenv(env[i]);
        if (!show) {
            int null = open("/dev/null", O_WRONLY);
            if (null >= 0) {
                dup2(null, 1);
                dup2(null, 2);
                close(null);
            }
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            bn_die("waitpid: %s", strerror(errno));
    double wall = (double)(bn_now_ns() - t0) / 1e9;
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return wall;
}

bn_helper bn_helper_start(char *const argv[], void (*setup)(const void *arg), const void *arg)
{
    int fds[2];
    if (pipe(fds) != 0)
        bn_die("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        bn_die("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        if (setup)
            setup(arg);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fds[1]);
    return (bn_helper){pid, fds[0]};
}

int bn_helper_finish(bn_helper h, char *line, size_t cap)
{
    line[0] = '\0';
    FILE *f = fdopen(h.fd, "r");
    if (f == NULL || fgets(line, (int)cap, f) == NULL)
        line[0] = '\0';
    if (f)
        fclose(f);
    int status;
    while (waitpid(h.pid, &status, 0) < 0 && errno == EINTR)
        ;
    return status;
}

bool bn_in_path(const char *name)
{
    const char *path = getenv("PATH");
    if (path == NULL)
        return false;
    char *copy = strdup(path), *save = NULL;
    bool found = false;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", d[0] ? d : ".", name);
        found = access(full, X_OK) == 0;
    }
    free(copy);
    return found;
}

const char *bn_self_dir(void)
{
    static char dir[4096];
    if (dir[0] == '\0') {
        ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
        if (n <= 0)
            bn_die("readlink(/proc/self/exe): %s", strerror(errno));
        dir[n] = '\0';
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
    }
    return dir;
}

void bn_write_file(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || kpc__write_all(fd, data, size) != 0)
        bn_die("cannot write %s: %s", path, strerror(errno));
    close(fd);
}

double bn_page_fault_cost(void)
{
    enum { PAGES = 64, BATCHES = 7 };
    long page = sysconf(_SC_PAGESIZE);
    double v[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        volatile char *p = mmap(NULL, (size_t)page * PAGES, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            bn_die("mmap: %s", strerror(errno));
        uint64_t t0 = bn_now_ns();
        for (int i = 0; i < PAGES; i++)
            p[(size_t)i * (size_t)page] = 1;
        v[b] = (double)(bn_now_ns() - t0) / 1e9 / PAGES;
        munmap((void *)p, (size_t)page * PAGES);
    }
    return bn_median(v, BATCHES);
}

double bn_syscall_cost(void)
{
    enum { CALLS = 2000, BATCHES = 7 };
    double v[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        uint64_t t0 = bn_now_ns();
        for (int i = 0; i < CALLS; i++)
            syscall(SYS_getppid);
        v[b] = (double)(bn_now_ns() - t0) / 1e9 / CALLS;
    }
    return bn_median(v, BATCHES);
}
