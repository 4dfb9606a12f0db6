/*
 * bench_comgr.c - figure 10: kpc beside comgr's own cache, on the same kernels in one run.
 *
 * comgr 3 (ROCm 7's comgr; Debian sid's ROCm 6.4 ships it) has a cache of its own, on by
 * default (AMD_COMGR_CACHE, AMD_COMGR_CACHE_DIR, AMD_COMGR_CACHE_POLICY; by default in
 * $XDG_CACHE_HOME/comgr): what every hipRTC user gets for free. Three arms, each with
 * caches of its own in this run's temporary directory:
 *   plain     hipRTC called directly (create, compile, code, destroy), comgr's cache on
 *   kpc       kpc_program_get with AMD_COMGR_CACHE=0 (how kpc's tools compile)
 *   kpc+comgr kpc_program_get with comgr's cache on too (the library in an application
 *             that leaves comgr's default alone)
 * and four figures:
 *   new-process warm request: a fresh process gets one kernel both caches hold, from
 *     before it loads anything (plain: dlopen of hipRTC; kpc: kpc_cache_open) to the
 *     code object in hand; median over --runs processes
 *   in-process warm request: the same process asks for the same kernel again (plain:
 *     compiles again, comgr's cache answering what it can; kpc: its map)
 *   P processes cold: --procs processes ask for the same K kernels at once on empty
 *     caches: wall from the first fork to the last exit, and the source compiles run
 *     (plain: counted from comgr's verbose log, an action answered from its cache is
 *     not one; kpc: each process's count of its own builds)
 *   disk: the bytes each cache directory holds after its storm (kpc+comgr: both)
 * Nothing is asserted about time; the arms' code objects must be equal in size (the same
 * compiler, the same options but kpc's dependency-file ones).
 *
 * usage: bench_comgr [--kernels K] [--procs P] [--runs R]
 *        bench_comgr --helper plain|kpc DIR FIRST COUNT REPEAT   (the processes it starts)
 */
#define _GNU_SOURCE
#include "bench.h"

#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define KERNEL_SIZE 7 /* kernels per source: a code object of ~16 KB */

/* ---- the helper: one process's requests ----------------------------------------------- */
/* hipRTC by dlopen, as amd.c finds it: libhiprtc of ROCm 7 or 6, else ROCm 5's runtime */
typedef struct plain_rtc {
    int (*create)(void **, const char *, const char *, int, const char **, const char **);
    int (*compile)(void *, int, const char **);
    int (*code_size)(void *, size_t *);
    int (*code)(void *, char *);
    int (*destroy)(void **);
} plain_rtc;

static void plain_open(plain_rtc *r)
{
    static const char *const libs[] = {"libhiprtc.so.7", "libhiprtc.so.6", "libamdhip64.so.5", NULL};
    void *h = NULL;
    for (const char *const *l = libs; h == NULL && *l; l++)
        h = dlopen(*l, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        bn_die("no hipRTC: %s", dlerror());
    *(void **)&r->create = dlsym(h, "hiprtcCreateProgram");
    *(void **)&r->compile = dlsym(h, "hiprtcCompileProgram");
    *(void **)&r->code_size = dlsym(h, "hiprtcGetCodeSize");
    *(void **)&r->code = dlsym(h, "hiprtcGetCode");
    *(void **)&r->destroy = dlsym(h, "hiprtcDestroyProgram");
    if (!r->create || !r->compile || !r->code_size || !r->code || !r->destroy)
        bn_die("hipRTC lacks part of the program API");
}

static size_t plain_get(const plain_rtc *r, const char *code)
{
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=%s", bn_target());
    const char *opts[] = {arch};
    void *prog = NULL;
    size_t size = 0;
    if (r->create(&prog, code, "comgr.hip", 0, NULL, NULL) != 0 || r->compile(prog, 1, opts) != 0 ||
        r->code_size(prog, &size) != 0 || size == 0)
        bn_die("plain hipRTC failed to compile");
    char *out = malloc(size);
    if (out == NULL || r->code(prog, out) != 0)
        bn_die("plain hipRTC: no code");
    free(out);
    r->destroy(&prog);
    return size;
}

/* Prints "total_ns again_ns builds size": the COUNT requests from the start, the median of
 * REPEAT more of the first one in this process, this process's builds (kpc; 0 for plain),
 * the first code object's size. */
static int helper(const char *mode, const char *dir, int first, int count, int repeat)
{
    bool plain = strcmp(mode, "plain") == 0;
    char **codes = calloc((size_t)count, sizeof *codes);
    for (int i = 0; i < count; i++)
        codes[i] = bn_multi_source(KERNEL_SIZE, first + i);
    size_t size = 0;
    uint64_t builds = 0;
    double again = 0, *v = calloc((size_t)repeat + 1, sizeof *v);
    uint64_t t0 = bn_now_ns(), t1;
    if (plain) {
        plain_rtc r;
        plain_open(&r);
        for (int i = 0; i < count; i++) {
            size_t s = plain_get(&r, codes[i]);
            size = i == 0 ? s : size;
        }
        t1 = bn_now_ns();
        for (int k = 0; k < repeat; k++) {
            uint64_t a = bn_now_ns();
            plain_get(&r, codes[0]);
            v[k] = (double)(bn_now_ns() - a);
        }
    } else {
        kpc_cache *cache = bn_open(dir, 0, 0);
        kpc_context *ctx = bn_context(cache);
        for (int i = 0; i < count; i++) {
            kpc_source src = {.code = codes[i], .name = "comgr.hip"};
            size_t s = bn_get(ctx, &src);
            size = i == 0 ? s : size;
        }
        t1 = bn_now_ns();
        kpc_source src = {.code = codes[0], .name = "comgr.hip"};
        for (int k = 0; k < repeat; k++) {
            uint64_t a = bn_now_ns();
            bn_get(ctx, &src);
            v[k] = (double)(bn_now_ns() - a);
        }
        kpc_stats st;
        kpc_stats_get(cache, &st);
        builds = st.builds;
        kpc_context_destroy(ctx);
        kpc_cache_close(cache);
    }
    if (repeat > 0)
        again = bn_median(v, (size_t)repeat);
    printf("%llu %.0f %llu %zu\n", (unsigned long long)(t1 - t0), again, (unsigned long long)builds, size);
    for (int i = 0; i < count; i++)
        free(codes[i]);
    free(codes);
    free(v);
    return 0;
}

/* ---- the parent ------------------------------------------------------------------------- */
typedef struct arm {
    const char *name, *mode; /* "plain", "kpc", "kpc+comgr"; the helper's mode */
    bool comgr_cache;        /* comgr's cache on (in comgr_dir) */
    char kpc_dir[4200], comgr_dir[4200], logs[4200];
} arm;

typedef struct result {
    double total_s, again_s;
    unsigned long long builds;
    size_t size;
} result;

/* The helper's environment for arm a (comgr's own cache on or off, its logs). */
typedef struct helper_env {
    const arm *a;
    const char *log;
} helper_env;

static void set_helper_env(const void *arg)
{
    const helper_env *e = arg;
    const arm *a = e->a;
    if (a->comgr_cache) {
        setenv("AMD_COMGR_CACHE", "1", 1);
        setenv("AMD_COMGR_CACHE_DIR", a->comgr_dir, 1);
    } else
        setenv("AMD_COMGR_CACHE", "0", 1);
    if (a->logs[0]) { /* comgr says which actions its cache answered */
        setenv("AMD_COMGR_EMIT_VERBOSE_LOGS", "1", 1);
        setenv("AMD_COMGR_REDIRECT_LOGS", e->log, 1);
    }
}

/* Start the helper for arm a (its environment set in the child), its stdout on a pipe. */
static bn_helper start(const arm *a, int first, int count, int repeat, int n)
{
    char f[16], c[16], r[16], log[4300];
    snprintf(f, sizeof f, "%d", first);
    snprintf(c, sizeof c, "%d", count);
    snprintf(r, sizeof r, "%d", repeat);
    snprintf(log, sizeof log, "%s/comgr-%d.log", a->logs, n);
    char *args[] = {"bench_comgr", "--helper", (char *)a->mode, (char *)a->kpc_dir, f, c, r, NULL};
    helper_env env = {a, log};
    return bn_helper_start(args, set_helper_env, &env);
}

static void finish(bn_helper h, const char *name, result *out)
{
    char line[256];
    int status = bn_helper_finish(h, line, sizeof line);
    unsigned long long total_ns;
    double again_ns;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        sscanf(line, "%llu %lf %llu %zu", &total_ns, &again_ns, &out->builds, &out->size) != 4)
        bn_die("the %s helper failed (status %d)", name, status);
    out->total_s = (double)total_ns / 1e9;
    out->again_s = again_ns / 1e9;
}

/* The source compiles comgr ran in a log: its compile actions not answered from its
 * cache (the answer is logged between an action's kind and the next action). */
static unsigned long long comgr_compiles(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    unsigned long long n = 0;
    bool in_compile = false, answered = false;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "ActionKind: ")) {
            n += in_compile && !answered;
            in_compile = strstr(line, "COMPILE_SOURCE") != NULL;
            answered = false;
        } else if (strstr(line, "found in cache"))
            answered = true;
    }
    n += in_compile && !answered;
    fclose(f);
    return n;
}

static unsigned long long dir_bytes_sum;
static int add_bytes(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)path, (void)ftw;
    if (type == FTW_F)
        dir_bytes_sum += (unsigned long long)st->st_size;
    return 0;
}

static unsigned long long dir_bytes(const char *dir)
{
    dir_bytes_sum = 0;
    nftw(dir, add_bytes, 16, FTW_PHYS);
    return dir_bytes_sum;
}

/* P processes ask for kernels 0..K-1 at once; wall from the first fork to the last exit. */
static double storm(arm *a, int procs, int kernels, unsigned long long *builds, size_t *size)
{
    bn_helper *helpers = calloc((size_t)procs, sizeof *helpers);
    uint64_t t0 = bn_now_ns();
    for (int i = 0; i < procs; i++)
        helpers[i] = start(a, 0, kernels, 0, i);
    *builds = 0;
    for (int i = 0; i < procs; i++) {
        result r;
        finish(helpers[i], a->name, &r);
        if (a->logs[0]) {
            char log[4300];
            snprintf(log, sizeof log, "%s/comgr-%d.log", a->logs, i);
            *builds += comgr_compiles(log);
        } else
            *builds += r.builds;
        *size = r.size;
    }
    double wall = (double)(bn_now_ns() - t0) / 1e9;
    free(helpers);
    return wall;
}

/* The median over runs of fresh processes each getting one kernel (kernel r % K). */
static double new_process(arm *a, int runs, int kernels)
{
    double *v = calloc((size_t)runs, sizeof *v);
    char saved[4200];
    snprintf(saved, sizeof saved, "%s", a->logs);
    a->logs[0] = '\0'; /* no verbose log while timing */
    for (int r = -1; r < runs; r++) { /* r == -1: a warm-up (page cache, the loader) */
        result res;
        finish(start(a, r < 0 ? 0 : r % kernels, 1, 0, 0), a->name, &res);
        if (r >= 0)
            v[r] = res.total_s;
    }
    snprintf(a->logs, sizeof a->logs, "%s", saved);
    double m = bn_median(v, (size_t)runs);
    free(v);
    return m;
}

static double in_process(arm *a, int repeat)
{
    char saved[4200];
    snprintf(saved, sizeof saved, "%s", a->logs);
    a->logs[0] = '\0';
    result res;
    finish(start(a, 0, 1, repeat, 0), a->name, &res);
    snprintf(a->logs, sizeof a->logs, "%s", saved);
    return res.again_s;
}

static void row_time(const char *id, const char *figure, double kpc, const char *ref, double plain)
{
    char v[32], rv[32], ratio[32];
    bn_fmt_time(v, sizeof v, kpc);
    bn_fmt_time(rv, sizeof rv, plain);
    snprintf(ratio, sizeof ratio, "%.3gx", plain / kpc);
    bn_row(id, figure, v, ref, rv, ratio, "(context: kpc beside what comes free)", -1, kpc * 1e6, "us");
}

int main(int argc, char **argv)
{
    if (argc == 7 && strcmp(argv[1], "--helper") == 0)
        return helper(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
    int kernels = 4, procs = 8, runs = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--kernels") == 0 && i + 1 < argc)
            kernels = atoi(argv[++i]);
        else if (strcmp(argv[i], "--procs") == 0 && i + 1 < argc)
            procs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else
            bn_die("usage: bench_comgr [--kernels K] [--procs P] [--runs R]");
    }
    if (kernels < 1 || procs < 1 || runs < 1)
        bn_die("bad --kernels, --procs or --runs");
    if (strcmp(kpc_platform_builtin.name, "amd") != 0) {
        bn_row("comgr_skipped", "10 beside comgr's cache", "not run: needs the AMD platform", "", "", "",
               "", -1, 0, "");
        return 0;
    }
    char *base = bn_tmpdir(); /* <tmp>/kpc-bench-XXXXXX/cache; the arms live beside it */
    char work[4096];
    if ((size_t)snprintf(work, sizeof work, "%s", base) >= sizeof work - 64)
        bn_die("the temporary directory's name is too long: %s", base);
    *strrchr(work, '/') = '\0';
    arm arms[3] = {{.name = "plain", .mode = "plain", .comgr_cache = true},
                   {.name = "kpc", .mode = "kpc", .comgr_cache = false},
                   {.name = "kpc+comgr", .mode = "kpc", .comgr_cache = true}};
    for (int i = 0; i < 3; i++) {
        snprintf(arms[i].kpc_dir, sizeof arms[i].kpc_dir, "%s/%d-kpc", work, i);
        snprintf(arms[i].comgr_dir, sizeof arms[i].comgr_dir, "%s/%d-comgr", work, i);
        if (i == 0) {
            snprintf(arms[i].logs, sizeof arms[i].logs, "%s/0-logs", work);
            if (mkdir(arms[i].logs, 0700) != 0)
                bn_die("mkdir %s: %s", arms[i].logs, strerror(errno));
        }
    }

    double wall[3];
    unsigned long long builds[3], kpc_bytes[3], comgr_bytes[3];
    size_t size[3];
    for (int i = 0; i < 3; i++) {
        bn_say("%s: %d processes x %d kernels, cold", arms[i].name, procs, kernels);
        wall[i] = storm(&arms[i], procs, kernels, &builds[i], &size[i]);
        kpc_bytes[i] = arms[i].mode[0] == 'k' ? dir_bytes(arms[i].kpc_dir) : 0;
        comgr_bytes[i] = arms[i].comgr_cache ? dir_bytes(arms[i].comgr_dir) : 0;
    }
    if (size[0] != size[1] || size[1] != size[2])
        bn_die("the arms' code objects differ in size: %zu, %zu, %zu", size[0], size[1], size[2]);
    bn_say("warm requests in new processes, then in one process");
    double fresh[3], again[3];
    for (int i = 0; i < 3; i++) {
        fresh[i] = new_process(&arms[i], runs, kernels);
        again[i] = in_process(&arms[i], arms[i].mode[0] == 'p' ? 3 : 101);
    }

    char ref[160], v[64], rv[64], ratio[32], fig[128];
    snprintf(ref, sizeof ref, "plain hipRTC, comgr's cache on (%.1f KB object)", (double)size[0] / 1024);
    row_time("comgr_new_process", "10 new-process warm request", fresh[1], ref, fresh[0]);
    row_time("comgr_in_process", "10 in-process warm request", again[1], ref, again[0]);
    snprintf(fig, sizeof fig, "10 %d processes x %d kernels cold: wall", procs, kernels);
    row_time("comgr_storm_wall", fig, wall[1], ref, wall[0]);
    snprintf(fig, sizeof fig, "10 %d processes x %d kernels cold: compiles", procs, kernels);
    snprintf(v, sizeof v, "%llu", builds[1]);
    snprintf(rv, sizeof rv, "%llu", builds[0]);
    snprintf(ratio, sizeof ratio, "%.3gx", (double)builds[0] / (double)(builds[1] ? builds[1] : 1));
    bn_row("comgr_storm_compiles", fig, v, ref, rv, ratio, "kpc: one per kernel", builds[1] == (unsigned)kernels,
           (double)builds[1], "compiles");
    snprintf(v, sizeof v, "%.1f KB kpc", (double)kpc_bytes[1] / 1024);
    snprintf(rv, sizeof rv, "%.1f KB comgr", (double)comgr_bytes[0] / 1024);
    snprintf(ratio, sizeof ratio, "%.2fx", (double)comgr_bytes[0] / (double)(kpc_bytes[1] ? kpc_bytes[1] : 1));
    bn_row("comgr_disk", "10 disk after the storm", v, ref, rv, ratio, "(context)", -1, (double)kpc_bytes[1],
           "bytes");
    /* the library beside comgr's default: the same figures with its cache on too */
    snprintf(ref, sizeof ref, "kpc, comgr's cache off (AMD_COMGR_CACHE=0)");
    snprintf(v, sizeof v, "%.1f KB kpc + %.1f KB comgr", (double)kpc_bytes[2] / 1024, (double)comgr_bytes[2] / 1024);
    snprintf(rv, sizeof rv, "%.1f KB kpc", (double)kpc_bytes[1] / 1024);
    snprintf(ratio, sizeof ratio, "%.2fx", (double)(kpc_bytes[2] + comgr_bytes[2]) / (double)(kpc_bytes[1] ? kpc_bytes[1] : 1));
    bn_row("comgr_kpc_disk", "10 kpc with comgr's cache on: disk", v, ref, rv, ratio, "(context: a second copy)", -1,
           (double)(kpc_bytes[2] + comgr_bytes[2]), "bytes");
    snprintf(fig, sizeof fig, "10 kpc with comgr's cache on: %d x %d cold wall", procs, kernels);
    bn_fmt_time(v, sizeof v, wall[2]);
    bn_fmt_time(rv, sizeof rv, wall[1]);
    snprintf(ratio, sizeof ratio, "%.2fx", wall[1] / wall[2]);
    bn_row("comgr_kpc_storm", fig, v, ref, rv, ratio, "(context)", -1, wall[2] * 1e6, "us");
    snprintf(v, sizeof v, "%llu", builds[2]);
    snprintf(rv, sizeof rv, "%llu", builds[1]);
    bn_row("comgr_kpc_builds", "10 kpc with comgr's cache on: builds", v, ref, rv, "", "the same count",
           builds[2] == builds[1], (double)builds[2], "builds");
    for (int i = 1; i < 3; i++) { /* the kpc arms' host indexes, then the whole directory */
        char real[4200];
        if (realpath(arms[i].kpc_dir, real))
            kpc_index_unlink(real);
    }
    bn_cleanup(base);
    return 0;
}
