/*
 * bench_hit.c - figure 1: the in-memory hit.
 *
 * ns per kpc_program_get + kpc_program_release on a warm compile-only context, for
 * sources of 1, 4, 16 and 256 KB; then the aggregate rate of 1, 2, 4 ... nproc threads
 * on one context. The reference is the floor any cache keyed by the source text must
 * pay: XXH3-128 of the same bytes plus one uncontended mutex lock/unlock, timed the same
 * way (and, for threads, run by as many threads, each with its own mutex).
 *
 * Each value is the median of `rounds` timed batches of ~10 ms; one batch of warm-up is
 * run first and thrown away.
 *
 * usage: bench_hit [--fake] [--rounds N] [--seconds S (per thread measurement)]
 *                  [--only BYTES (one source size and no threads: for a profiler)]
 */
#define _GNU_SOURCE
#include "bench.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static int rounds = 21;
static double thread_seconds = 0.25;
static volatile uint64_t sink; /* keeps the floor's hashes from being optimized away */

typedef struct workload {
    kpc_context *ctx;
    kpc_source src;
    const char *code;
    size_t len;
} workload;

static void kpc_op(workload *w, pthread_mutex_t *m, uint64_t *acc)
{
    (void)m, (void)acc;
    kpc_program *p;
    if (kpc_program_get(w->ctx, &w->src, &p) != KPC_OK)
        bn_die("kpc_program_get failed on a warm context");
    kpc_program_release(p);
}

static void floor_op(workload *w, pthread_mutex_t *m, uint64_t *acc)
{
    pthread_mutex_lock(m);
    XXH128_hash_t h = XXH3_128bits(w->code, w->len);
    pthread_mutex_unlock(m);
    *acc += h.low64 ^ h.high64;
}

typedef void (*op_fn)(workload *, pthread_mutex_t *, uint64_t *);

/* Seconds per op: median over rounds of batches sized to ~10 ms. */
static double per_op(op_fn op, workload *w)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    uint64_t acc = 0;
    size_t n = 1;
    for (;;) { /* calibrate (doubles as the warm-up) */
        uint64_t t0 = bn_now_ns();
        for (size_t i = 0; i < n; i++)
            op(w, &m, &acc);
        if (bn_now_ns() - t0 > 10000000u || n > (1u << 26))
            break;
        n *= 2;
    }
    double *v = calloc((size_t)rounds, sizeof *v);
    for (int r = 0; r < rounds; r++) {
        uint64_t t0 = bn_now_ns();
        for (size_t i = 0; i < n; i++)
            op(w, &m, &acc);
        v[r] = (double)(bn_now_ns() - t0) / 1e9 / (double)n;
    }
    sink += acc;
    double med = bn_median(v, (size_t)rounds);
    free(v);
    return med;
}

/* ---- threads ------------------------------------------------------------------------- */
typedef struct worker {
    pthread_t tid;
    workload *w;
    op_fn op;
    pthread_barrier_t *start;
    atomic_int *stop;
    pthread_mutex_t m; /* this thread's own: the floor's lock is uncontended */
    uint64_t ops;
    char pad[64];
} worker;

static void *work(void *arg)
{
    worker *k = arg;
    uint64_t acc = 0, ops = 0;
    pthread_barrier_wait(k->start);
    while (!atomic_load_explicit(k->stop, memory_order_relaxed)) {
        for (int i = 0; i < 64; i++)
            k->op(k->w, &k->m, &acc);
        ops += 64;
    }
    k->ops = ops;
    sink += acc;
    return NULL;
}

/* Aggregate ops per second of t threads: the median of `rounds` runs of thread_seconds. */
static double rate(op_fn op, workload *w, int t, int runs)
{
    double *v = calloc((size_t)runs + 1, sizeof *v);
    worker *ks = calloc((size_t)t, sizeof *ks);
    for (int r = 0; r <= runs; r++) { /* run 0 is the warm-up */
        pthread_barrier_t start;
        atomic_int stop = 0;
        pthread_barrier_init(&start, NULL, (unsigned)t + 1);
        for (int i = 0; i < t; i++) {
            ks[i] = (worker){.w = w, .op = op, .start = &start, .stop = &stop};
            pthread_mutex_init(&ks[i].m, NULL);
            if (pthread_create(&ks[i].tid, NULL, work, &ks[i]) != 0)
                bn_die("pthread_create failed");
        }
        pthread_barrier_wait(&start);
        uint64_t t0 = bn_now_ns();
        struct timespec nap = {0, (long)(thread_seconds * (r ? 1 : 0.3) * 1e9)};
        nanosleep(&nap, NULL);
        atomic_store(&stop, 1);
        uint64_t total = 0;
        for (int i = 0; i < t; i++) {
            pthread_join(ks[i].tid, NULL);
            total += ks[i].ops;
            pthread_mutex_destroy(&ks[i].m);
        }
        v[r] = (double)total / ((double)(bn_now_ns() - t0) / 1e9);
        pthread_barrier_destroy(&start);
    }
    double med = bn_median(v + 1, (size_t)runs);
    free(v);
    free(ks);
    return med;
}

int main(int argc, char **argv)
{
    bool fake = false;
    size_t only = 0; /* --only BYTES: one size, no threads (for a profiler) */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fake") == 0)
            fake = true;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            thread_seconds = atof(argv[++i]);
        else
            bn_die("usage: bench_hit [--fake] [--rounds N] [--seconds S] [--only BYTES]");
    }
    if (rounds < 1)
        rounds = 1;
    if (fake)
        bn_fake_install(0, 4096);
    char *dir = bn_tmpdir();
    kpc_cache *cache = bn_open(dir, 0, 0);
    kpc_context *ctx = bn_context(cache);

    static const size_t sizes[] = {1024, 4096, 16384, 262144};
    static const char *const names[] = {"1 KB", "4 KB", "16 KB", "256 KB"};
    workload w4 = {0};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (only && sizes[i] != only)
            continue;
        char *code = bn_padded_source(sizes[i], (int)i);
        /* code_len given, as a caller that read the source from a file has it */
        workload w = {.ctx = ctx, .code = code, .len = sizes[i]};
        w.src = (kpc_source){.code = code, .code_len = sizes[i], .name = "hit.hip"};
        bn_get(ctx, &w.src); /* the miss that makes the context warm */
        double kpc = per_op(kpc_op, &w), flo = per_op(floor_op, &w);
        char id[32], fig[64], v[32], r[32], ratio[32];
        snprintf(id, sizeof id, "hit_%zu", sizes[i]);
        snprintf(fig, sizeof fig, "1 in-memory hit, %s source", names[i]);
        bn_fmt_time(v, sizeof v, kpc);
        bn_fmt_time(r, sizeof r, flo);
        snprintf(ratio, sizeof ratio, "%.2fx", kpc / flo);
        bool met = kpc <= 2 * flo && (sizes[i] != 4096 || kpc <= 0.5e-6);
        bn_row(id, fig, v, "XXH3-128 + mutex (floor)", r, ratio,
               sizes[i] == 4096 ? "<= 2x floor; <= 0.5 us" : "<= 2x floor", met, kpc * 1e9, "ns");
        if (sizes[i] == 4096)
            w4 = w;
        else
            free(code);
    }

    if (only || w4.code == NULL) {
        kpc_context_destroy(ctx);
        kpc_cache_close(cache);
        bn_cleanup(dir);
        return 0;
    }
    /* the same 4 KB source from several threads on the one context */
    int nproc = bn_nproc();
    int runs = rounds < 5 ? rounds : 5;
    for (int t = 1;; t = t * 2 > nproc && t < nproc ? nproc : t * 2) {
        double kpc = rate(kpc_op, &w4, t, runs), flo = rate(floor_op, &w4, t, runs);
        char id[32], fig[80], v[32], r[32], ratio[32];
        snprintf(id, sizeof id, "hit_threads_%d", t);
        snprintf(fig, sizeof fig, "1 in-memory hit, 4 KB, %d thread%s", t, t > 1 ? "s" : "");
        snprintf(v, sizeof v, "%.2f M/s", kpc / 1e6);
        snprintf(r, sizeof r, "%.2f M/s", flo / 1e6);
        snprintf(ratio, sizeof ratio, "%.2fx", flo / kpc);
        bn_row(id, fig, v, "floor, same threads", r, ratio, "<= 2x floor", flo <= 2 * kpc, kpc / 1e6,
               "Mops/s");
        if (t >= nproc)
            break;
    }
    free((void *)w4.code);
    kpc_context_destroy(ctx);
    kpc_cache_close(cache);
    bn_cleanup(dir);
    return 0;
}
