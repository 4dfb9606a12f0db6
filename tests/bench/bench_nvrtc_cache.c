/*
 * bench_nvrtc_cache.c - figure 10: kpc beside NVRTC's own cache (CUDA 12.9 and later) and
 * beside no cache, on the same kernels, in one run. NVIDIA platform only (the device
 * machine: scripts/bench-device.sh --only nvrtc).
 *
 * Three ways to get K cubins of K distinct sources (bn_slow_source, template depth D):
 *   none:  NVRTC with --no-cache (its cache off; every compile is a compile)
 *   nvrtc: NVRTC as it comes (its cache on by default since 12.9)
 *   kpc:   kpc_program_get_many on a compile-only context (sm_90): the K at once, so that
 *          processes asking for the same K at the same time build them side by side
 * and for each, with that way's caches empty at the start:
 *   cold:             one new process gets the K cubins (process wall time, start included,
 *                     less its second pass)
 *   in-process warm:  the same process asks for the K again (time of that second pass)
 *   new-process warm: another new process gets the K (process wall time)
 *   P cold:           P new processes at once, each asking for the same K once (wall time)
 * The NVRTC cache's storage: each phase runs its processes with HOME and XDG_CACHE_HOME
 * pointing at a fresh directory (so a disk cache kept under either starts empty); what
 * NVRTC wrote there is listed on stderr, so the table says where that cache lives.
 *
 * usage: bench_nvrtc_cache [--k K] [--depth D] [--procs P]
 *        bench_nvrtc_cache --child WAY K D PASSES   (one process's part: prints "ns1 ns2")
 */
#define _GNU_SOURCE
#include "bench.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct nvrtc_api {
    int (*create)(void **, const char *, const char *, int, const char *const *, const char *const *);
    int (*compile)(void *, int, const char *const *);
    int (*cubin_size)(void *, size_t *);
    int (*destroy)(void **);
    int (*version)(int *, int *);
} nvrtc_api;

static void nvrtc_load(nvrtc_api *a)
{
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
    void *h = NULL;
    for (const char *const *n = names; h == NULL && *n; n++)
        h = dlopen(*n, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        bn_die("no libnvrtc: %s", dlerror());
    *(void **)&a->create = dlsym(h, "nvrtcCreateProgram");
    *(void **)&a->compile = dlsym(h, "nvrtcCompileProgram");
    *(void **)&a->cubin_size = dlsym(h, "nvrtcGetCUBINSize");
    *(void **)&a->destroy = dlsym(h, "nvrtcDestroyProgram");
    *(void **)&a->version = dlsym(h, "nvrtcVersion");
    if (!a->create || !a->compile || !a->cubin_size || !a->destroy || !a->version)
        bn_die("libnvrtc lacks part of its API");
}

/* One pass over the K sources by way; its time in ns. */
static uint64_t pass(const char *way, nvrtc_api *a, kpc_context *ctx, char **srcs, int k)
{
    uint64_t t0 = bn_now_ns();
    if (ctx) {
        kpc_source *s = calloc((size_t)k, sizeof *s);
        kpc_program **p = calloc((size_t)k, sizeof *p);
        for (int i = 0; i < k; i++)
            s[i] = (kpc_source){.code = srcs[i], .name = "k.cu"};
        if (kpc_program_get_many(ctx, s, (size_t)k, p, NULL) != KPC_OK)
            bn_die("kpc_program_get_many failed");
        for (int i = 0; i < k; i++)
            kpc_program_release(p[i]);
        free(s);
        free(p);
        return bn_now_ns() - t0;
    }
    for (int i = 0; i < k; i++) {
        const char *opts[] = {"-arch=sm_90", "--no-cache"};
        int nopts = strcmp(way, "none") == 0 ? 2 : 1;
        void *p = NULL;
        size_t size = 0;
        if (a->create(&p, srcs[i], "k.cu", 0, NULL, NULL) != 0 || a->compile(p, nopts, opts) != 0 ||
            a->cubin_size(p, &size) != 0 || size == 0)
            bn_die("NVRTC (%s) failed on source %d", way, i);
        a->destroy(&p);
    }
    return bn_now_ns() - t0;
}

static int child(const char *way, int k, int depth, int passes)
{
    char **srcs = calloc((size_t)k, sizeof *srcs);
    for (int i = 0; i < k; i++)
        srcs[i] = bn_slow_source(1000 + i, depth);
    nvrtc_api a = {0};
    kpc_cache *c = NULL;
    kpc_context *ctx = NULL;
    if (strcmp(way, "kpc") == 0) {
        c = bn_open(getenv("KPC_CACHE_DIR"), 0, 0);
        ctx = bn_context(c);
    } else {
        nvrtc_load(&a);
    }
    uint64_t t1 = pass(way, &a, ctx, srcs, k), t2 = passes > 1 ? pass(way, &a, ctx, srcs, k) : 0;
    printf("%llu %llu\n", (unsigned long long)t1, (unsigned long long)t2);
    if (ctx) {
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
    }
    return 0;
}

typedef struct run_result {
    double wall;           /* seconds, spawn to the last exit */
    double first, second;  /* of the first child: its two passes, seconds */
} run_result;

/* P children of way at once (each making `passes` passes), with home as HOME,
 * XDG_CACHE_HOME and (kpc) the cache. */
static run_result spawn(const char *way, int p, int k, int depth, int passes, const char *home)
{
    char self[4096], ks[16], ds[16], ps[16];
    snprintf(ps, sizeof ps, "%d", passes);
    snprintf(self, sizeof self, "%s/bench_nvrtc_cache", bn_self_dir());
    snprintf(ks, sizeof ks, "%d", k);
    snprintf(ds, sizeof ds, "%d", depth);
    int (*fds)[2] = calloc((size_t)p, sizeof *fds);
    pid_t *pids = calloc((size_t)p, sizeof *pids);
    uint64_t t0 = bn_now_ns();
    for (int i = 0; i < p; i++) {
        if (pipe(fds[i]) != 0 || (pids[i] = fork()) < 0)
            bn_die("pipe/fork failed");
        if (pids[i] == 0) {
            char cache[4200];
            snprintf(cache, sizeof cache, "%s/kpc", home);
            setenv("HOME", home, 1);
            setenv("XDG_CACHE_HOME", home, 1);
            setenv("KPC_CACHE_DIR", cache, 1);
            dup2(fds[i][1], 1);
            execl(self, self, "--child", way, ks, ds, ps, (char *)NULL);
            _exit(127);
        }
        close(fds[i][1]);
    }
    run_result r = {0};
    for (int i = 0; i < p; i++) {
        char buf[128] = "";
        ssize_t n = read(fds[i][0], buf, sizeof buf - 1);
        close(fds[i][0]);
        int st;
        waitpid(pids[i], &st, 0);
        unsigned long long a = 0, b = 0;
        if (n <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || sscanf(buf, "%llu %llu", &a, &b) != 2)
            bn_die("child %d of %s failed", i, way);
        if (i == 0)
            r.first = (double)a / 1e9, r.second = (double)b / 1e9;
    }
    r.wall = (double)(bn_now_ns() - t0) / 1e9;
    free(fds);
    free(pids);
    return r;
}

/* A fresh HOME for one phase's processes (kpc's cache is HOME/kpc). */
static char *fresh_home(void)
{
    char *home = bn_tmpdir(); /* ".../cache": not yet created */
    if (mkdir(home, 0700) != 0)
        bn_die("mkdir %s failed", home);
    return home;
}

static void drop_home(char *home)
{
    char cache[4200], root[4096];
    snprintf(cache, sizeof cache, "%s/kpc", home);
    if (realpath(cache, root))
        kpc_index_unlink(root);
    bn_cleanup(home);
}

static void row(const char *id, const char *fig, double v, double ref, const char *ref_name)
{
    char vt[32], rt[32], ratio[32];
    bn_fmt_time(vt, sizeof vt, v);
    bn_fmt_time(rt, sizeof rt, ref);
    snprintf(ratio, sizeof ratio, "%.2fx", ref / v);
    bn_row(id, fig, vt, ref_name, rt, ratio, "(context: speed-up over no cache)", -1, v * 1e3, "ms");
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "--child") == 0)
        return child(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    int k = 8, depth = 190, procs = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--k") == 0)
            k = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--depth") == 0)
            depth = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--procs") == 0)
            procs = atoi(argv[i + 1]);
        else
            bn_die("usage: bench_nvrtc_cache [--k K] [--depth D] [--procs P]");
    }
    nvrtc_api a;
    nvrtc_load(&a);
    int major = 0, minor = 0;
    a.version(&major, &minor);
    bn_say("NVRTC %d.%d; %d sources of template depth %d; %d processes for the cold storm", major, minor,
           k, depth, procs);
    static const char *const ways[] = {"none", "nvrtc", "kpc"};
    static const char *const what[] = {"no cache (NVRTC --no-cache)", "NVRTC's own cache", "kpc"};
    run_result cold[3], warm[3], storm[3];
    for (int w = 0; w < 3; w++) {
        char *home = fresh_home();
        cold[w] = spawn(ways[w], 1, k, depth, 2, home);
        cold[w].wall -= cold[w].second; /* the second pass is the in-process warm figure */
        warm[w] = spawn(ways[w], 1, k, depth, 1, home);
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "cd '%s' && find . -type f | sed 's|^|bench: %s cache file: |' | head -5 >&2; "
                 "echo \"bench: %s: $(find . -type f | wc -l) files, $(du -sk . | cut -f1) KB under HOME\" >&2",
                 home, ways[w], ways[w]);
        if (system(cmd) != 0)
            bn_say("could not list %s", home);
        drop_home(home);
        home = fresh_home();
        storm[w] = spawn(ways[w], procs, k, depth, 1, home);
        drop_home(home);
        bn_say("%s: cold %.3f s (passes %.3f, %.3f); new-process warm %.3f s (%.3f); %d cold at once %.3f s",
               ways[w], cold[w].wall, cold[w].first, cold[w].second, warm[w].wall, warm[w].first, procs,
               storm[w].wall);
    }
    for (int w = 0; w < 3; w++) {
        char id[64], fig[160];
        snprintf(id, sizeof id, "nvrtc_cache_cold_%s", ways[w]);
        snprintf(fig, sizeof fig, "10 cold process, %d kernels: %s", k, what[w]);
        row(id, fig, cold[w].wall, cold[0].wall, "no cache");
        snprintf(id, sizeof id, "nvrtc_cache_newproc_warm_%s", ways[w]);
        snprintf(fig, sizeof fig, "10 new-process warm, %d kernels: %s", k, what[w]);
        row(id, fig, warm[w].wall, warm[0].wall, "no cache");
        snprintf(id, sizeof id, "nvrtc_cache_inproc_warm_%s", ways[w]);
        snprintf(fig, sizeof fig, "10 in-process warm, %d kernels again: %s", k, what[w]);
        row(id, fig, cold[w].second, cold[0].second, "no cache");
        snprintf(id, sizeof id, "nvrtc_cache_storm_%s", ways[w]);
        snprintf(fig, sizeof fig, "10 %d cold processes at once, %d kernels each: %s", procs, k, what[w]);
        row(id, fig, storm[w].wall, storm[0].wall, "no cache");
    }
    return 0;
}
