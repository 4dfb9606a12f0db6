/*
 * bench_ccache.c - figure 6: kpc against ccache.
 *
 * The same K HIP sources (the storm's kind: one kernel of template recursion) compiled
 * for gfx90a, per file, each run a new process timed from fork to exit:
 *   hipcc        hipcc --genco --offload-arch=gfx90a -c F -o F.co, no cache (the reference)
 *   ccache cold  ccache hipcc ... on an empty ccache directory (every file a miss)
 *   ccache warm  the same again (every file a direct-mode hit)
 *   kpc cold     kpc compile --target gfx90a F -o F.co on an empty kpc cache (hipRTC)
 *   kpc warm     the same again (host index + disk hit)
 * and, in this process, kpc_program_get on a warm context (the in-memory hit).
 * Cold figures are the median over the K files (each compiled once); warm ones the
 * median over --runs runs of every file.
 *
 * ccache (4.7, Debian 12) caches only a call that has -c: without it, it takes
 * `hipcc --genco` for a link and runs it uncached. hipcc --genco ignores -c (the code
 * object is byte-identical), so -c is given to every hipcc call, cached or not. ccache
 * sees hipcc (a Perl script) as a compiler of unknown type and hashes the output of
 * `hipcc -E` on a miss, the include files' contents on a direct-mode hit.
 *
 * The AMD platform only (hipcc is AMD's); with no ccache or hipcc in PATH it prints one
 * row saying so.
 *
 * usage: bench_ccache [--files K] [--runs R] [--depth D] [--kpc PATH]
 */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int K = 4, runs = 5, depth = 100;
static char work[4096], ccache_env[4200], tmpdir_env[4300], kpc_dir[4200], kpc_tool[4096];

static void src_path(int i, char *out, size_t cap)
{
    snprintf(out, cap, "%s/src%d.hip", work, i);
}

static double hipcc(int i, bool cached)
{
    char src[4200], out[4300];
    src_path(i, src, sizeof src);
    snprintf(out, sizeof out, "%s.%s.co", src, cached ? "ccache" : "hipcc");
    char *argv[] = {"ccache", "hipcc", "--genco", "--offload-arch=gfx90a", "-c", src, "-o", out, NULL};
    /* hipcc (ROCm 5.2) leaves two empty directories named after the source in $TMPDIR
     * on every call: they go into the work directory, removed with it */
    char *env[] = {ccache_env, tmpdir_env, NULL};
    int status;
    double s = bn_run(cached ? argv : argv + 1, env, false, &status);
    if (status != 0)
        bn_die("%shipcc failed on %s (status %d)", cached ? "ccache " : "", src, status);
    return s;
}

static double kpc_compile(int i)
{
    char src[4200], out[4300];
    src_path(i, src, sizeof src);
    snprintf(out, sizeof out, "%s.kpc.co", src);
    char *argv[] = {kpc_tool, "compile", "--target", "gfx90a", "--cache-dir", kpc_dir, "-o", out, src,
                    NULL};
    int status;
    double s = bn_run(argv, NULL, false, &status);
    if (status != 0)
        bn_die("kpc compile failed on %s (status %d)", src, status);
    return s;
}

/* ccache's own counter, from --print-stats. */
static long ccache_stat(const char *key)
{
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "%s ccache --print-stats", ccache_env);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, p))
        if (strncmp(line, key, n) == 0 && line[n] == '\t')
            v = atol(line + n + 1);
    pclose(p);
    return v;
}

/* In this process: a warm context on the kpc cache the tool filled; seconds per get. */
static double in_process_hit(void)
{
    char *code = NULL;
    size_t len = 0;
    char src[4200];
    src_path(0, src, sizeof src);
    FILE *f = fopen(src, "re");
    if (f == NULL || getdelim(&code, &len, '\0', f) < 0)
        bn_die("cannot read %s", src);
    fclose(f);
    kpc_cache *c = bn_open(kpc_dir, 0, 0);
    kpc_context *ctx = bn_context(c);
    /* the name the tool gave it: the file's base name */
    kpc_source s = {.code = code, .name = "src0.hip"};
    kpc_stats st0, st1;
    kpc_stats_get(c, &st0);
    bn_get(ctx, &s);
    kpc_stats_get(c, &st1);
    if (st1.builds != st0.builds)
        bn_die("the in-process get compiled: its key differs from the tool's");
    double v[11];
    for (int r = 0; r < 11; r++) {
        uint64_t t0 = bn_now_ns();
        for (int i = 0; i < 10000; i++)
            bn_get(ctx, &s);
        v[r] = (double)(bn_now_ns() - t0) / 1e9 / 10000;
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    free(code);
    return bn_median(v, 11);
}

static void row(const char *id, const char *fig, double val, const char *ref, double refval,
                const char *ratio_fmt, double ratio, const char *goal)
{
    char v[32], r[32], q[32];
    bn_fmt_time(v, sizeof v, val);
    r[0] = q[0] = '\0';
    if (refval > 0)
        bn_fmt_time(r, sizeof r, refval);
    if (ratio_fmt)
        snprintf(q, sizeof q, ratio_fmt, ratio);
    bn_row(id, fig, v, ref, r, q, goal, -1, val * 1e3, "ms");
}

int main(int argc, char **argv)
{
    snprintf(kpc_tool, sizeof kpc_tool, "%s/../kpc", bn_self_dir());
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--files") == 0 && i + 1 < argc)
            K = atoi(argv[++i]);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--depth") == 0 && i + 1 < argc)
            depth = atoi(argv[++i]);
        else if (strcmp(argv[i], "--kpc") == 0 && i + 1 < argc)
            snprintf(kpc_tool, sizeof kpc_tool, "%s", argv[++i]);
        else
            bn_die("usage: bench_ccache [--files K] [--runs R] [--depth D] [--kpc PATH]");
    }
    if (K < 1 || K > 64 || runs < 1)
        bn_die("bad --files or --runs");
    /* the array sizes, taken while the checked values are known (the calls below could,
     * as far as the compiler knows, change the globals) */
    const size_t nk = (size_t)K, nv = nk * (size_t)runs;
    const char *missing = strcmp(kpc_platform_builtin.name, "amd") != 0 ? "the AMD platform"
                          : !bn_in_path("ccache")                       ? "ccache"
                          : !bn_in_path("hipcc")                        ? "hipcc"
                          : access(kpc_tool, X_OK) != 0                 ? "the kpc tool"
                                                                        : NULL;
    if (missing) {
        char why[96];
        snprintf(why, sizeof why, "not run: needs %s", missing);
        bn_row("ccache_skipped", "6 against ccache", why, "", "", "", "", -1, 0, "");
        return 0;
    }

    char *cache = bn_tmpdir(); /* <tmp>/kpc-bench-XXXXXX/cache */
    snprintf(work, sizeof work, "%s", cache);
    *strrchr(work, '/') = '\0';
    snprintf(kpc_dir, sizeof kpc_dir, "%s", cache);
    snprintf(ccache_env, sizeof ccache_env, "CCACHE_DIR=%s/ccache", work);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/tmp", work);
    if (mkdir(tmp, 0700) != 0)
        bn_die("mkdir %s: %s", tmp, strerror(errno));
    snprintf(tmpdir_env, sizeof tmpdir_env, "TMPDIR=%s", tmp);
    for (int i = 0; i < K; i++) {
        char *s = bn_slow_source(2000 + i, depth), path[4200];
        src_path(i, path, sizeof path);
        bn_write_file(path, s, strlen(s));
        free(s);
    }
    double *hip = calloc(nk, sizeof(double)), *cc_cold = calloc(nk, sizeof(double)),
           *cc_warm = calloc(nv, sizeof(double)), *k_cold = calloc(nk, sizeof(double)),
           *k_warm = calloc(nv, sizeof(double));

    for (int i = 0; i < K; i++) {
        hip[i] = hipcc(i, false);
        cc_cold[i] = hipcc(i, true);
        k_cold[i] = kpc_compile(i);
        bn_say("ccache: file %d: hipcc %.2f s, ccache cold %.2f s, kpc cold %.2f s", i, hip[i],
               cc_cold[i], k_cold[i]);
    }
    long hits0 = ccache_stat("direct_cache_hit");
    for (int r = 0; r < runs; r++)
        for (int i = 0; i < K; i++) {
            cc_warm[r * K + i] = hipcc(i, true);
            k_warm[r * K + i] = kpc_compile(i);
        }
    long hits = ccache_stat("direct_cache_hit") - hits0, misses = ccache_stat("cache_miss");
    if (hits != (long)nv)
        bn_say("ccache: %ld direct hits of %zu warm calls (%ld misses in all)", hits, nv, misses);
    double h = bn_median(hip, nk), cc = bn_median(cc_cold, nk),
           cw = bn_median(cc_warm, nv), kc = bn_median(k_cold, nk), kw = bn_median(k_warm, nv);
    double kh = in_process_hit();
    /* context: what any new process costs here, fork + exec + exit of /bin/true */
    double *tv = calloc(nv, sizeof(double));
    for (size_t r = 0; r < nv; r++) {
        char *targv[] = {"true", NULL};
        int st;
        tv[r] = bn_run(targv, NULL, false, &st);
    }
    double tr = bn_median(tv, nv);
    free(tv);

    char fig[128];
    row("ccache_hipcc", "6 hipcc --genco, no cache (per file)", h, "", 0, NULL, 0, "(reference)");
    snprintf(fig, sizeof fig, "6 ccache + hipcc, cold (%ld misses)", misses);
    row("ccache_cold", fig, cc, "hipcc, no cache", h, "%.2fx hipcc", cc / h, "(context)");
    row("ccache_kpc_cold", "6 kpc compile, cold, new process", kc, "ccache + hipcc, cold", cc,
        "%.1fx faster", cc / kc, "(context)");
    snprintf(fig, sizeof fig, "6 ccache + hipcc, warm (%ld/%zu hits)", hits, nv);
    row("ccache_warm", fig, cw, "hipcc, no cache", h, "%.0fx faster", h / cw, "(context)");
    row("ccache_kpc_warm", "6 kpc compile, warm, new process", kw, "ccache + hipcc, warm", cw,
        "%.1fx faster", cw / kw, "(context)");
    row("ccache_true", "6 empty process (fork, exec true, exit)", tr, "kpc compile, warm", kw,
        "%.0f%% of it", 100 * tr / kw, "(context: process floor)");
    row("ccache_kpc_hit", "6 kpc in-process warm hit", kh, "ccache + hipcc, warm", cw, "%.0fx faster",
        cw / kh, "(context)");
    free(hip);
    free(cc_cold);
    free(cc_warm);
    free(k_cold);
    free(k_warm);
    bn_cleanup(cache);
    return 0;
}
