/*
 * test_gpu.c - the device path on a real GPU: device contexts on GPU 0: a saxpy and a
 * templated kernel got through kpc, launched, every output element checked against the
 * host; 16 processes on a cold cache (the host builds each source once, every process
 * launches and checks); a cached object for another architecture refused by the runtime,
 * removed and rebuilt; and the figures (compile, cross-process hit, module load).
 * Exits 77 (CTest: skipped) where there is no GPU, unless KPC_TEST_GPU_REQUIRED=1 makes
 * that a failure (scripts/gpu-run.sh). The NVIDIA platform's compile-only specifics are
 * test_gpu_platform.c's.
 *
 * Check runs every case in a fresh fork of main(), and main() never touches the driver
 * (the GPU probe runs in a child of its own): CUDA must not be initialized before a fork.
 * Figures are printed as "figure: ..." lines; no timing is asserted.
 */
#define _GNU_SOURCE
#include "support.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_support.h"

#define SKIP_CODE 77

/* ---- launching and checking --------------------------------------------------------- */
#define N_ELEMS 1000003 /* not a multiple of the block: the last block is partial */
#define BLOCK 256

/* Inputs whose products and sums are exact in float, double and int, so every element
 * must equal the host's result bit for bit whether or not the GPU fuses multiply-add. */
static double x_of(int i) { return (double)(i % 1000); }
static double y_of(int i) { return (double)(i % 37); }

/* Run y = a*x + b*y (saxpy: b = 1, float) on n elements of `size` bytes each; returns the
 * number of elements that differ from the host, or -1 (why says which call failed). */
static long run_axpby(hipFunction_t f, bool is_saxpy, char type, char *why, size_t why_cap)
{
    int n = N_ELEMS;
    size_t esize = type == 'd' ? sizeof(double) : sizeof(float); /* int is 4 bytes too */
    unsigned char *hx = malloc((size_t)n * esize), *hy = malloc((size_t)n * esize),
                  *out = malloc((size_t)n * esize);
    for (int i = 0; i < n; i++) {
        if (type == 'f') {
            ((float *)hx)[i] = (float)x_of(i), ((float *)hy)[i] = (float)y_of(i);
        } else if (type == 'd') {
            ((double *)hx)[i] = x_of(i), ((double *)hy)[i] = y_of(i);
        } else {
            ((int *)hx)[i] = (int)x_of(i), ((int *)hy)[i] = (int)y_of(i);
        }
    }
    float af = 2.5f, bf = -0.5f;
    double ad = 2.5, bd = -0.5;
    int ai = 3, bi = -2;
    uint64_t dx = 0, dy = 0;
    long bad = -1;
    int r;
    const char *call = "alloc";
    if ((r = gpu.alloc(&dx, (size_t)n * esize)) == 0 && (r = gpu.alloc(&dy, (size_t)n * esize)) == 0 &&
        (call = "htod", (r = gpu.htod(dx, hx, (size_t)n * esize)) == 0) &&
        (r = gpu.htod(dy, hy, (size_t)n * esize)) == 0) {
        void *saxpy_args[] = {&n, &af, &dx, &dy};
        void *args[] = {&n, type == 'f' ? (void *)&af : type == 'd' ? (void *)&ad : (void *)&ai, &dx,
                        type == 'f' ? (void *)&bf : type == 'd' ? (void *)&bd : (void *)&bi, &dy};
        call = "launch";
        r = gpu.launch(f, (unsigned)((n + BLOCK - 1) / BLOCK), BLOCK, is_saxpy ? saxpy_args : args);
        if (r == 0)
            call = "sync", r = gpu.sync();
        if (r == 0)
            call = "dtoh", r = gpu.dtoh(out, dy, (size_t)n * esize);
    }
    if (r != 0)
        snprintf(why, why_cap, "%s failed: %d", call, r);
    else {
        bad = 0;
        for (int i = 0; i < n; i++) {
            bool ok;
            if (type == 'f') {
                float b = is_saxpy ? 1.0f : bf;
                ok = ((float *)out)[i] == af * ((float *)hx)[i] + b * ((float *)hy)[i];
            } else if (type == 'd') {
                ok = ((double *)out)[i] == ad * ((double *)hx)[i] + bd * ((double *)hy)[i];
            } else {
                ok = ((int *)out)[i] == ai * ((int *)hx)[i] + bi * ((int *)hy)[i];
            }
            if (!ok && bad++ == 0)
                snprintf(why, why_cap, "element %d differs from the host", i);
        }
    }
    if (dx)
        gpu.release(dx);
    if (dy)
        gpu.release(dy);
    free(hx);
    free(hy);
    free(out);
    return bad;
}

/* Get both programs on a device context and run all four kernels; 0, or a message. */
static const char *get_and_run(kpc_context *ctx, char *why, size_t cap)
{
    kpc_source s = saxpy_src(), t = axpby_src();
    kpc_program *ps = NULL, *pt = NULL;
    hipFunction_t f;
    const char *fail = NULL;
    if (kpc_program_get(ctx, &s, &ps) != KPC_OK || kpc_program_get(ctx, &t, &pt) != KPC_OK)
        fail = "kpc_program_get failed";
    else if (kpc_kernel_get(ctx, ps, "saxpy", &f) != KPC_OK)
        fail = "kpc_kernel_get(saxpy) failed";
    else if (run_axpby(f, true, 'f', why, cap) != 0)
        fail = why;
    for (int k = 0; fail == NULL && k < 3; k++) {
        const char *low = kpc_program_lowered_name(pt, axpby_exprs[k]);
        if (low == NULL || kpc_kernel_get(ctx, pt, low, &f) != KPC_OK)
            fail = "kpc_kernel_get(axpby<T>) failed";
        else if (run_axpby(f, false, "fdi"[k], why, cap) != 0)
            fail = why;
    }
    kpc_program_release(ps);
    kpc_program_release(pt);
    return fail;
}

static double ms_since(uint64_t t0)
{
    return (double)(kpc__now_ns() - t0) / 1e6;
}

/* ---- the GPU suite ------------------------------------------------------------------ */
START_TEST(kernels_run_and_match_the_host)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = NULL;
    ck_assert_int_eq(kpc_context_create(c, 0, &ctx), KPC_OK);
    const char *target = kpc_context_target(ctx);
    printf("device 0: target %s\n", target);
    gpu_ready();

    kpc_source s = saxpy_src(), t = axpby_src();
    kpc_program *ps, *pt, *again;
    uint64_t t0 = kpc__now_ns();
    ck_assert_int_eq(kpc_program_get(ctx, &s, &ps), KPC_OK);
    printf("figure: cold get of saxpy on %s (compile + store + module load): %.1f ms\n", target, ms_since(t0));
    t0 = kpc__now_ns();
    ck_assert_int_eq(kpc_program_get(ctx, &t, &pt), KPC_OK);
    printf("figure: cold get of axpby<float,double,int> on %s: %.1f ms\n", target, ms_since(t0));
    size_t size;
    /* two statements: an argument list's order is unspecified, and gcc 13 at -O2 read
     * size (not yet set) before the call that sets it */
    const void *code = kpc_program_code(ps, &size);
    ck_assert(ts_is_code_object(code, size));

    /* the kernel map: loaded once, then the same handle */
    hipFunction_t f1, f2;
    ck_assert_int_eq(kpc_kernel_get(ctx, ps, "saxpy", &f1), KPC_OK);
    ck_assert_ptr_nonnull(f1);
    ck_assert_int_eq(kpc_kernel_get(ctx, ps, "saxpy", &f2), KPC_OK);
    ck_assert_ptr_eq(f1, f2);
    ck_assert_int_eq(kpc_kernel_get(ctx, ps, "no_such_kernel", &f2), KPC_E_NOT_FOUND);
    ck_assert_ptr_null(f2);
    char why[128] = "";
    long bad = run_axpby(f1, true, 'f', why, sizeof why);
    ck_assert_msg(bad == 0, "saxpy: %ld bad elements: %s", bad, why);

    for (int k = 0; k < 3; k++) {
        const char *low = kpc_program_lowered_name(pt, axpby_exprs[k]);
        ck_assert_ptr_nonnull(low);
        hipFunction_t f;
        ck_assert_int_eq(kpc_kernel_get(ctx, pt, low, &f), KPC_OK);
        bad = run_axpby(f, false, "fdi"[k], why, sizeof why);
        ck_assert_msg(bad == 0, "%s (%s): %ld bad elements: %s", axpby_exprs[k], low, bad, why);
    }
    /* a memory hit is the same program, its module and kernels */
    ck_assert_int_eq(kpc_program_get(ctx, &s, &again), KPC_OK);
    ck_assert_ptr_eq(again, ps);
    kpc_program_release(again);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 2);
    ck_assert_uint_eq(st.mem_hits, 1);

    /* a program of a compile-only context has no module here */
    kpc_context *co = NULL;
    ck_assert_int_eq(kpc_context_create_for_target(c, target, &co), KPC_OK);
    kpc_program *pc;
    ck_assert_int_eq(kpc_program_get(co, &s, &pc), KPC_OK);
    ck_assert_int_eq(kpc_kernel_get(ctx, pc, "saxpy", &f2), KPC_E_INVALID);
    ck_assert_int_eq(kpc_kernel_get(co, pc, "saxpy", &f2), KPC_E_INVALID);
    kpc_program_release(pc);
    kpc_context_destroy(co);
    /* a device that is not there */
    kpc_context *none = (kpc_context *)1;
    ck_assert_int_eq(kpc_context_create(c, 4096, &none), KPC_E_NO_DEVICE);
    ck_assert_ptr_null(none);

    kpc_program_release(ps);
    kpc_program_release(pt);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* ---- 16 processes, one cold cache ---- */
#define PROCS 16

typedef struct proc_result {
    int ok;
    double ctx_ms, get_ms;
    uint64_t builds, waits, disk_hits;
    char why[160];
} proc_result;

typedef struct storm {
    pthread_barrier_t start; /* process-shared: every process asks at once */
    proc_result r[PROCS + 1];
} storm;

static int storm_child(int i, void *arg)
{
    storm *sh = arg;
    proc_result *r = &sh->r[i];
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir};
    kpc_cache *c = NULL;
    kpc_context *ctx = NULL;
    uint64_t t0 = kpc__now_ns();
    bool ready = kpc_cache_open(&cfg, &c) == KPC_OK && kpc_context_create(c, 0, &ctx) == KPC_OK &&
                 gpu_api_load() && gpu.bind(0) == 0;
    r->ctx_ms = ms_since(t0);
    pthread_barrier_wait(&sh->start); /* also when not ready: the others must not hang */
    if (!ready) {
        snprintf(r->why, sizeof r->why, "no context on device 0");
        return 1;
    }
    t0 = kpc__now_ns();
    kpc_source s = saxpy_src(), t = axpby_src();
    kpc_program *p1 = NULL, *p2 = NULL;
    bool got = kpc_program_get(ctx, &s, &p1) == KPC_OK && kpc_program_get(ctx, &t, &p2) == KPC_OK;
    r->get_ms = ms_since(t0);
    kpc_program_release(p1);
    kpc_program_release(p2);
    char why[128] = "";
    const char *fail = got ? get_and_run(ctx, why, sizeof why) : "kpc_program_get failed";
    kpc_stats st;
    kpc_stats_get(c, &st);
    r->builds = st.builds, r->waits = st.waits, r->disk_hits = st.disk_hits;
    if (fail)
        snprintf(r->why, sizeof r->why, "%s", fail);
    r->ok = fail == NULL;
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return fail ? 1 : 0;
}

/* A process that comes later: both objects are on disk and in the index. */
static int late_child(int i, void *arg)
{
    (void)i;
    storm *sh = arg;
    proc_result *r = &sh->r[PROCS];
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir};
    kpc_cache *c = NULL;
    kpc_context *co = NULL, *dev = NULL;
    uint64_t t0 = kpc__now_ns();
    if (kpc_cache_open(&cfg, &c) != KPC_OK || kpc_context_create(c, 0, &dev) != KPC_OK) {
        snprintf(r->why, sizeof r->why, "no device context");
        return 1;
    }
    double ctx_ms = ms_since(t0);
    if (kpc_context_create_for_target(c, kpc_context_target(dev), &co) != KPC_OK) {
        snprintf(r->why, sizeof r->why, "no compile-only context");
        return 1;
    }
    kpc_source src[2] = {saxpy_src(), axpby_src()};
    double hit_ms[2], load_ms[2];
    kpc_status st = KPC_OK;
    for (int k = 0; k < 2; k++) {
        kpc_program *p = NULL;
        t0 = kpc__now_ns();
        if (kpc_program_get(co, &src[k], &p) != KPC_OK) /* index + disk read, no module */
            st = KPC_E_INVALID;
        hit_ms[k] = ms_since(t0);
        kpc_program_release(p);
        t0 = kpc__now_ns();
        if (kpc_program_get(dev, &src[k], &p) != KPC_OK) /* index + disk read + module load */
            st = KPC_E_INVALID;
        load_ms[k] = ms_since(t0);
        kpc_program_release(p);
    }
    printf("figure: device context in a new process (cuInit, primary context, identity recalled): %.1f ms\n",
           ctx_ms);
    printf("figure: cross-process hit on %s (new process, index + disk read): saxpy %.3f ms, axpby %.3f ms\n",
           kpc_context_target(dev), hit_ms[0], hit_ms[1]);
    printf("figure: cross-process hit on a device context (index + disk read + module load): "
           "saxpy %.3f ms, axpby %.3f ms\n", load_ms[0], load_ms[1]);
    fflush(stdout);
    kpc_stats stats;
    kpc_stats_get(c, &stats);
    r->builds = stats.builds, r->disk_hits = stats.disk_hits;
    r->ok = st == KPC_OK;
    kpc_context_destroy(co);
    kpc_context_destroy(dev);
    kpc_cache_close(c);
    return r->ok ? 0 : 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

START_TEST(sixteen_processes_one_cold_cache)
{
    /* this process never touches the driver: the children do, each after its fork */
    storm *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    pthread_barrierattr_t ba;
    pthread_barrierattr_init(&ba);
    pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&sh->start, &ba, PROCS);
    fflush(stdout); /* a child must not print this process's buffer again */
    uint64_t t0 = kpc__now_ns();
    int ok = ts_run_children(PROCS, storm_child, sh);
    double wall = ms_since(t0);
    uint64_t builds = 0, waits = 0, disk = 0;
    double get[PROCS], ctx_ms[PROCS];
    for (int i = 0; i < PROCS; i++) {
        if (!sh->r[i].ok)
            printf("process %d: %s\n", i, sh->r[i].why);
        builds += sh->r[i].builds, waits += sh->r[i].waits, disk += sh->r[i].disk_hits;
        get[i] = sh->r[i].get_ms, ctx_ms[i] = sh->r[i].ctx_ms;
    }
    qsort(get, PROCS, sizeof get[0], cmp_double);
    qsort(ctx_ms, PROCS, sizeof ctx_ms[0], cmp_double);
    printf("figure: %d processes, cold cache: %.0f ms in all; context creation (CUDA/HIP init) "
           "median %.0f ms; getting both programs min %.1f / median %.1f / max %.1f ms; "
           "builds %llu, waits %llu, disk hits %llu\n", PROCS, wall, ctx_ms[PROCS / 2], get[0],
           get[PROCS / 2], get[PROCS - 1], (unsigned long long)builds, (unsigned long long)waits,
           (unsigned long long)disk);
    ck_assert_int_eq(ok, PROCS); /* every process launched and checked every element */
    ck_assert_uint_eq(builds, 2); /* one build per source on the whole host */

    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.host_builds, 2);
    ck_assert_uint_eq(st.host_build_failures, 0);
    ck_assert_uint_eq(st.disk_files, 2);
    kpc_cache_close(c);

    fflush(stdout);
    ck_assert_int_eq(ts_run_children(1, late_child, sh), 1);
    ck_assert_uint_eq(sh->r[PROCS].builds, 0);
    ck_assert_uint_eq(sh->r[PROCS].disk_hits, 4); /* 2 sources x (compile-only, device) */
    pthread_barrier_destroy(&sh->start);
    munmap(sh, sizeof *sh);
}
END_TEST

/* ---- the stale-object bulwark ---- */
START_TEST(refused_object_is_removed_and_rebuilt)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *dev = NULL, *other = NULL;
    ck_assert_int_eq(kpc_context_create(c, 0, &dev), KPC_OK);
    char target[64];
    snprintf(target, sizeof target, "%s", kpc_context_target(dev));
    const char *foreign = foreign_target(target);
    ck_assert_int_eq(kpc_context_create_for_target(c, foreign, &other), KPC_OK);
    kpc_source s = saxpy_src();
    size_t good_size, bad_size;
    void *good = ts_get_code(dev, &s, &good_size);
    void *bad = ts_get_code(other, &s, &bad_size);
    ck_assert(ts_is_code_object(bad, bad_size));
    ck_assert(good_size != bad_size || memcmp(good, bad, good_size) != 0);

    /* overwrite the cached object with a whole, valid record holding the other
     * architecture's object: every check of the disk tree passes, only the driver can
     * tell */
    kpc_key key;
    ts_key(dev, &s, &key);
    kpc_record rec;
    ck_assert_int_eq(kpc_store_read(c->store, &key, target, KPC_RECORD_CODE, &rec), KPC_OK);
    kpc_record forged = rec;
    forged.payload = NULL;
    forged.code_size = bad_size;
    ck_assert_int_eq(kpc_store_write(c->store, &forged, bad, (char *)rec.payload + rec.code_size,
                                     rec.names_size), KPC_OK);
    kpc_record_free(&rec);
    ck_assert_int_eq(kpc_store_read(c->store, &key, target, KPC_RECORD_CODE, &rec), KPC_OK);
    ck_assert_uint_eq(rec.code_size, bad_size);
    ck_assert_mem_eq(rec.payload, bad, bad_size);
    kpc_record_free(&rec);
    kpc_context_destroy(other);
    kpc_context_destroy(dev);
    kpc_cache_close(c);

    /* a new process's view: the index says READY, the file reads back valid, the driver
     * refuses it; kpc removes it, builds once more, and the kernel runs */
    c = ts_open(dir, 0, 0);
    ck_assert_int_eq(kpc_context_create(c, 0, &dev), KPC_OK);
    gpu_ready();
    ts_log_begin(KPC_LOG_WARN);
    kpc_program *p = NULL;
    kpc_status st = kpc_program_get(dev, &s, &p);
    char *log = ts_log_end();
    printf("bulwark log:\n%s", log);
    ck_assert_int_eq(st, KPC_OK);
    ck_assert_msg(strstr(log, "refused cached object") != NULL, "log: %s", log);
#ifdef KPC_PLATFORM_NVIDIA
    ck_assert_msg(strstr(log, "cuModuleLoadData refused the image: CUDA_ERROR_") != NULL, "log: %s", log);
#endif
    free(log);
    kpc_stats stats = stats_of(c);
    ck_assert_uint_eq(stats.disk_hits, 1); /* the refused one */
    ck_assert_uint_eq(stats.builds, 1);    /* and its replacement */
    size_t size;
    const void *code = kpc_program_code(p, &size);
    ck_assert(size != bad_size || memcmp(code, bad, size) != 0);
    printf("rebuilt object is %s the first build (%zu bytes)\n",
           size == good_size && memcmp(code, good, size) == 0 ? "identical to" : "not identical to", size);
    /* the disk holds the replacement now */
    ck_assert_int_eq(kpc_store_read(c->store, &key, target, KPC_RECORD_CODE, &rec), KPC_OK);
    ck_assert_uint_eq(rec.code_size, size);
    ck_assert_mem_eq(rec.payload, code, size);
    kpc_record_free(&rec);
    hipFunction_t f;
    ck_assert_int_eq(kpc_kernel_get(dev, p, "saxpy", &f), KPC_OK);
    char why[128] = "";
    long wrong = run_axpby(f, true, 'f', why, sizeof why);
    ck_assert_msg(wrong == 0, "saxpy after the rebuild: %ld bad elements: %s", wrong, why);
    kpc_program_release(p);
    /* a third process finds the good object and builds nothing */
    kpc_context_destroy(dev);
    kpc_cache_close(c);
    c = ts_open(dir, 0, 0);
    ck_assert_int_eq(kpc_context_create(c, 0, &dev), KPC_OK);
    ck_assert_int_eq(kpc_program_get(dev, &s, &p), KPC_OK);
    ck_assert_uint_eq(stats_of(c).builds, 0);
    kpc_program_release(p);
    kpc_context_destroy(dev);
    kpc_cache_close(c);
    free(good);
    free(bad);
}
END_TEST

/* ---- figures: module load of a cached object, and of PTX the driver must JIT ---- */
static double mean_load_us(const void *image, int rounds)
{
    double total = 0;
    for (int i = 0; i < rounds; i++) {
        void *m = NULL;
        uint64_t t0 = kpc__now_ns();
        ck_assert_int_eq(gpu.load(&m, image), 0);
        total += (double)(kpc__now_ns() - t0) / 1e3;
        ck_assert_int_eq(gpu.unload(m), 0);
    }
    return total / rounds;
}

START_TEST(module_load_figures)
{
    /* every PTX load JIT-compiles: the driver's own JIT cache would hide its cost */
    setenv("CUDA_CACHE_DISABLE", "1", 1);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *dev = NULL;
    ck_assert_int_eq(kpc_context_create(c, 0, &dev), KPC_OK);
    gpu_ready();
    const char *target = kpc_context_target(dev);
    kpc_context *co = NULL;
    ck_assert_int_eq(kpc_context_create_for_target(c, target, &co), KPC_OK);
    kpc_source s[2] = {saxpy_src(), axpby_src()};
    const char *names[2] = {"saxpy", "axpby<float,double,int>"};
    for (int i = 0; i < 2; i++) {
        /* compile time: five variants of the source (a -D each: five keys, five compiles) */
        enum { V = 5 };
        double compile_ms[V];
        uint64_t builds_before = stats_of(c).builds;
        for (int v = 0; v < V; v++) {
            char def[32];
            snprintf(def, sizeof def, "-DKPC_VARIANT=%d", v);
            const char *opts[] = {def};
            kpc_source sv = s[i];
            sv.options = opts, sv.num_options = 1;
            kpc_program *p;
            uint64_t t0 = kpc__now_ns();
            ck_assert_int_eq(kpc_program_get(co, &sv, &p), KPC_OK);
            compile_ms[v] = ms_since(t0);
            kpc_program_release(p);
        }
        ck_assert_uint_eq(stats_of(c).builds, builds_before + V);
        qsort(compile_ms, V, sizeof compile_ms[0], cmp_double);
        kpc_program *p;
        ck_assert_int_eq(kpc_program_get(co, &s[i], &p), KPC_OK);
        size_t size;
        const void *code = kpc_program_code(p, &size);
        double first = mean_load_us(code, 1);
        double mean = mean_load_us(code, 50);
        printf("figure: %s for %s: compile (+ store) min %.1f / median %.1f / max %.1f ms of %d; "
               "cubin %zu bytes; module load first %.0f us, mean of 50 %.1f us\n", names[i], target,
               compile_ms[0], compile_ms[V / 2], compile_ms[V - 1], V, size, first, mean);
        kpc_program_release(p);
    }
#ifdef KPC_PLATFORM_NVIDIA
    /* the same sources as PTX (compute_XY): what HIP's own NVIDIA mapping hands the driver */
    char ptx_target[64];
    snprintf(ptx_target, sizeof ptx_target, "compute_%s", target + 3);
    kpc_context *px = NULL;
    ck_assert_int_eq(kpc_context_create_for_target(c, ptx_target, &px), KPC_OK);
    for (int i = 0; i < 2; i++) {
        kpc_program *p;
        ck_assert_int_eq(kpc_program_get(px, &s[i], &p), KPC_OK);
        size_t size;
        const char *ptx = kpc_program_code(p, &size);
        ck_assert(ts_is_code_object(ptx, size));
        double first = mean_load_us(ptx, 1);
        double mean = mean_load_us(ptx, 10);
        printf("figure: %s as PTX (%s): module load (driver JIT) first %.1f ms, mean of 10 %.1f ms\n",
               names[i], ptx_target, first / 1e3, mean / 1e3);
        kpc_program_release(p);
    }
    kpc_context_destroy(px);
#endif
    kpc_context_destroy(co);
    kpc_context_destroy(dev);
    kpc_cache_close(c);
}
END_TEST

/* ---- main ----------------------------------------------------------------------------- */
/* In a child, so that this process never initializes the driver before Check forks. */
static int probe_gpu(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        kpc_config cfg = {.struct_size = sizeof cfg, .flags = KPC_NO_DISK};
        kpc_cache *c = NULL;
        kpc_context *ctx = NULL;
        kpc_status s = kpc_cache_open(&cfg, &c);
        if (s == KPC_OK)
            s = kpc_context_create(c, 0, &ctx);
        if (s == KPC_OK)
            printf("GPU 0: %s\n", kpc_context_target(ctx));
        else
            printf("no GPU for the device suite: %s\n", kpc_status_str(s));
        fflush(stdout);
        _exit(s == KPC_OK ? 0 : s == KPC_E_NO_DEVICE || s == KPC_E_UNAVAILABLE ? SKIP_CODE : 1);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(void)
{
    int probe = probe_gpu();
    if (probe == SKIP_CODE) {
        const char *req = getenv("KPC_TEST_GPU_REQUIRED");
        if (req && strcmp(req, "1") == 0) {
            printf("KPC_TEST_GPU_REQUIRED=1 but there is no GPU: failing\n");
            return 1;
        }
        printf("test_gpu: skipped: no GPU (KPC_TEST_GPU_REQUIRED=1 makes this a failure)\n");
        return SKIP_CODE;
    }
    if (probe != 0)
        return 1;
    const TTest *tests[] = {kernels_run_and_match_the_host, sixteen_processes_one_cold_cache,
                            refused_object_is_removed_and_rebuilt, module_load_figures, NULL};
    return ts_main_case("gpu", "device", 240, setup, teardown, tests);
}
