/*
 * bench_disk.c - figure 5: the disk tree at scale, through the real tool.
 *
 * Fills a fresh cache directory with N records (default 100k) of an S-byte code object
 * (default 8 KB: what one small kernel compiles to for gfx90a) through the library's own
 * kpc_store_write, so every file is exactly what kpc writes; then times the tool, each
 * run a new process, with the page cache warm (the files were just written):
 *   kpc ls              (output to /dev/null)              median of --runs
 *   kpc verify          (every file read and checked)      median of --runs
 *   kpc prune           down to 90% of the size: ~N/10 of the oldest files removed;
 *                       the removed ones are written again between runs (untimed)
 *   kpc prune --max-size 0   every file removed; once, last
 * The goal is a prune of N files in under 2 s.
 *
 * Filling: kpc_store_write fsyncs every file, and an fsync costs ~4 ms on this machine's
 * disk, so 100k of them would take minutes. This program therefore defines fsync itself
 * (a static link prefers it to libc's): while filling it does nothing, and one syncfs
 * at the end puts the whole tree on disk before anything is timed. Outside the filling
 * it is the real system call.
 *
 * The cache directory is made under $KPC_BENCH_TMP (default /tmp); --tag names the run
 * (appended to the row ids and figures), e.g. "tmpfs" for a run with KPC_BENCH_TMP=/dev/shm.
 *
 * usage: bench_disk [--files N] [--object-kb S] [--runs R] [--kpc PATH] [--writers W]
 *                   [--tag TEXT]
 */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

static bool filling;

/* See the file comment: a no-op while filling, the system call otherwise. */
int fsync(int fd)
{
    if (filling)
        return 0;
    return (int)syscall(SYS_fsync, fd);
}

static uint8_t compiler_id[16] = {0xb3, 0x01};

/* Write records [first, last) with key seeds from `salt`: in W forked writers. */
static void fill(const char *dir, uint64_t first, uint64_t last, uint64_t salt, size_t object,
                 int writers)
{
    fflush(NULL);
    pid_t pids[64];
    for (int w = 0; w < writers; w++) {
        pids[w] = fork();
        if (pids[w] < 0)
            bn_die("fork: %s", strerror(errno));
        if (pids[w] > 0)
            continue;
        filling = true;
        kpc_store *st;
        if (kpc_store_open(dir, UINT64_MAX / 2, &st) != KPC_OK)
            _exit(1);
        uint8_t *code = calloc(1, object);
        void *names = NULL;
        size_t names_size = 0;
        if (code == NULL || kpc_names_encode(NULL, NULL, 0, &names, &names_size) != KPC_OK)
            _exit(1);
        memcpy(code, "\x7f" "ELF", 4);
        for (uint64_t i = first + (uint64_t)w; i < last; i += (uint64_t)writers) {
            kpc_record rec;
            memset(&rec, 0, sizeof rec);
            uint64_t seed[2] = {i, salt};
            XXH128_hash_t h = XXH3_128bits(seed, sizeof seed);
            memcpy(rec.key.bytes, &h.low64, 8);
            memcpy(rec.key.bytes + 8, &h.high64, 8);
            rec.kind = KPC_RECORD_CODE;
            rec.created_ns = kpc__wall_ns();
            snprintf(rec.target, sizeof rec.target, "gfx90a");
            snprintf(rec.source_name, sizeof rec.source_name, "bench%llu.hip", (unsigned long long)i);
            memcpy(rec.compiler_id, compiler_id, 16);
            memcpy(code + 64, &i, sizeof i); /* distinct payloads */
            rec.code_size = object;
            rec.names_size = names_size;
            if (kpc_store_write(st, &rec, code, names, names_size) != KPC_OK)
                _exit(1);
        }
        free(code);
        free(names);
        kpc_store_close(st);
        _exit(0);
    }
    for (int w = 0; w < writers; w++) {
        int s;
        while (waitpid(pids[w], &s, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(s) || WEXITSTATUS(s) != 0)
            bn_die("a writer failed");
    }
    /* everything on disk before anything is timed */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        syncfs(fd);
        close(fd);
    }
}

/* The file system's own cost of removing one such file: create `count` files of `size`
 * bytes beside the cache, put them on disk, and time their unlinks (the floor of a prune
 * that removes files: on a file system mounted with online discard every unlink waits
 * for the device to trim the freed blocks). */
static double unlink_cost(const char *cache_dir, size_t size, int count)
{
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s.unlink", cache_dir);
    if (mkdir(dir, 0700) != 0)
        bn_die("mkdir(%s): %s", dir, strerror(errno));
    char *buf = calloc(1, size);
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/%d", dir, i);
        bn_write_file(path, buf, size);
    }
    free(buf);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        syncfs(fd);
        close(fd);
    }
    uint64_t t0 = bn_now_ns();
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/%d", dir, i);
        unlink(path);
    }
    double per = (double)(bn_now_ns() - t0) / 1e9 / count;
    rmdir(dir);
    return per;
}

static void usage_of(const char *dir, uint64_t *bytes, uint64_t *files)
{
    kpc_store *st;
    if (kpc_store_open(dir, UINT64_MAX / 2, &st) != KPC_OK)
        bn_die("kpc_store_open(%s) failed", dir);
    kpc_store_usage(st, bytes, files);
    kpc_store_close(st);
}

/* One run of the tool: wall seconds; exits if its status is not `want`. */
static double tool(const char *kpc, const char *cmd, const char *dir, const char *extra, int want)
{
    char *argv[8];
    int n = 0;
    argv[n++] = (char *)kpc;
    argv[n++] = (char *)cmd;
    argv[n++] = "--cache-dir";
    argv[n++] = (char *)dir;
    if (extra) {
        argv[n++] = "--max-size";
        argv[n++] = (char *)extra;
    }
    argv[n] = NULL;
    int status;
    double s = bn_run(argv, NULL, false, &status);
    if (status != want)
        bn_die("kpc %s exited %d, not %d", cmd, status, want);
    return s;
}

int main(int argc, char **argv)
{
    uint64_t files = 100000;
    size_t object_kb = 8;
    int runs = 3, writers = bn_nproc();
    const char *tag = "";
    char kpc[4096];
    snprintf(kpc, sizeof kpc, "%s/../kpc", bn_self_dir());
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--files") == 0 && i + 1 < argc)
            files = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--object-kb") == 0 && i + 1 < argc)
            object_kb = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--writers") == 0 && i + 1 < argc)
            writers = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tag") == 0 && i + 1 < argc)
            tag = argv[++i];
        else if (strcmp(argv[i], "--kpc") == 0 && i + 1 < argc)
            snprintf(kpc, sizeof kpc, "%s", argv[++i]);
        else
            bn_die("usage: bench_disk [--files N] [--object-kb S] [--runs R] [--kpc PATH] [--writers W] "
                   "[--tag TEXT]");
    }
    if (files < 10 || object_kb < 1 || runs < 1)
        bn_die("bad --files, --object-kb or --runs");
    writers = writers < 1 ? 1 : writers > 64 ? 64 : writers;
    if (access(kpc, X_OK) != 0)
        bn_die("no kpc tool at %s (give --kpc PATH)", kpc);
    size_t object = object_kb * 1024;

    char *dir = bn_tmpdir();
    uint64_t t0 = bn_now_ns();
    fill(dir, 0, files, 1, object, writers);
    uint64_t bytes, n;
    usage_of(dir, &bytes, &n);
    if (n != files)
        bn_die("filled %llu files, not %llu", (unsigned long long)n, (unsigned long long)files);
    bn_say("disk: %llu files, %.0f MB, written in %.1f s", (unsigned long long)n, (double)bytes / 1e6,
           (double)(bn_now_ns() - t0) / 1e9);

    double *v = calloc((size_t)runs, sizeof *v);
    char what[64], fig[160], val[32];
    snprintf(what, sizeof what, "%lluk files of %zu KB%s%s", (unsigned long long)files / 1000, object_kb,
             tag[0] ? ", " : "", tag);
    char id[64];
#define ID(name) (snprintf(id, sizeof id, "%s%s%s", name, tag[0] ? "_" : "", tag), id)

    /* ls: one run first to warm the tool itself */
    tool(kpc, "ls", dir, NULL, 0);
    for (int r = 0; r < runs; r++)
        v[r] = tool(kpc, "ls", dir, NULL, 0);
    double ls = bn_median(v, (size_t)runs);
    for (int r = 0; r < runs; r++)
        v[r] = tool(kpc, "verify", dir, NULL, 0); /* 0: nothing damaged */
    double verify = bn_median(v, (size_t)runs);

    /* prune to 90%: ~files/10 removed; refill them between runs */
    uint64_t salt = 2;
    uint64_t removed = 0;
    for (int r = 0; r < runs; r++) {
        uint64_t b0, n0, b1, n1;
        usage_of(dir, &b0, &n0);
        char limit[32];
        snprintf(limit, sizeof limit, "%lluK", (unsigned long long)(b0 / 10 * 9 / 1024));
        v[r] = tool(kpc, "prune", dir, limit, 0);
        usage_of(dir, &b1, &n1);
        removed = n0 - n1;
        if (removed == 0)
            bn_die("prune removed nothing");
        if (r + 1 < runs)
            fill(dir, 0, removed, salt++, object, writers); /* newer than the rest */
    }
    double prune = bn_median(v, (size_t)runs);
    uint64_t b0, n0, b1, n1;
    usage_of(dir, &b0, &n0);
    double prune_all = tool(kpc, "prune", dir, "0", 0);
    usage_of(dir, &b1, &n1);
    if (n1 != 0)
        bn_die("prune --max-size 0 left %llu files", (unsigned long long)n1);

    snprintf(fig, sizeof fig, "5 kpc ls, %s", what);
    bn_fmt_time(val, sizeof val, ls);
    bn_row(ID("disk_ls"), fig, val, "", "", "", "(no goal)", -1, ls, "s");
    snprintf(fig, sizeof fig, "5 kpc verify, %s", what);
    bn_fmt_time(val, sizeof val, verify);
    bn_row(ID("disk_verify"), fig, val, "", "", "", "(no goal)", -1, verify, "s");
    /* the reference of a prune: the file system's unlinks of as many files */
    double per_unlink = unlink_cost(dir, object + 256 + 8, 500);
    char ref[96], rv[32], ratio[32];
    snprintf(fig, sizeof fig, "5 kpc prune to 90%%, %s (%llu removed)", what,
             (unsigned long long)removed);
    bn_fmt_time(val, sizeof val, prune);
    snprintf(ref, sizeof ref, "%llu unlinks on this file system (%.0f us each)",
             (unsigned long long)removed, per_unlink * 1e6);
    bn_fmt_time(rv, sizeof rv, per_unlink * (double)removed);
    snprintf(ratio, sizeof ratio, "%.2fx", prune / (per_unlink * (double)removed));
    bn_row(ID("disk_prune"), fig, val, ref, rv, ratio, "< 2 s", prune < 2, prune, "s");
    snprintf(fig, sizeof fig, "5 kpc prune --max-size 0, %llu files%s%s, 1 run", (unsigned long long)n0,
             tag[0] ? ", " : "", tag);
    bn_fmt_time(val, sizeof val, prune_all);
    snprintf(ref, sizeof ref, "%llu unlinks on this file system", (unsigned long long)n0);
    bn_fmt_time(rv, sizeof rv, per_unlink * (double)n0);
    snprintf(ratio, sizeof ratio, "%.2fx", prune_all / (per_unlink * (double)n0));
    bn_row(ID("disk_prune_all"), fig, val, ref, rv, ratio, "< 2 s", prune_all < 2, prune_all, "s");
    bn_say("disk: one unlink of a %zu KB file costs %.1f us on %s", object_kb, per_unlink * 1e6,
           getenv("KPC_BENCH_TMP") ? getenv("KPC_BENCH_TMP") : "/tmp");
    free(v);
    bn_cleanup(dir);
    return 0;
}
