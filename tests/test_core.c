/*
 * test_core.c - the core library through real compiles: compile-only contexts and target
 * validation, the compile path (options, headers, name expressions, lowered names, logs),
 * the key, the per-context map with in-progress entries and LRU, statuses, bad input.
 */
#define _GNU_SOURCE
#include "support.h"

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *dir;
static void setup(void) { dir = ts_tmpdir(); }
static void teardown(void) { ts_cleanup(dir); }

static kpc_stats stats_of(kpc_cache *c)
{
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    return st;
}

START_TEST(compiles_real_code_objects)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    const char *targets[] = {ts_target(), ts_target2()};
    void *first[2];
    size_t first_size[2];
    for (int t = 0; t < 2; t++) {
        kpc_context *ctx = NULL;
        ck_assert_int_eq(kpc_context_create_for_target(c, targets[t], &ctx), KPC_OK);
        ck_assert_str_eq(kpc_context_target(ctx), targets[t]);
        for (int i = 0; i < 2; i++) {
            kpc_source src = ts_src(ts_kernel_source(i), "k.hip");
            size_t size;
            uint64_t t0 = kpc__now_ns();
            void *code = ts_get_code(ctx, &src, &size);
            if (t == 0 && i == 0)
                printf("one compile: %.1f ms (%zu bytes)\n", (double)(kpc__now_ns() - t0) / 1e6, size);
            ck_assert_msg(ts_is_code_object(code, size), "not a code object for %s", targets[t]);
            if (i == 0) {
                first[t] = code;
                first_size[t] = size;
            } else
                free(code);
        }
        kpc_context_destroy(ctx);
    }
    /* two targets, one source: two different objects */
    ck_assert(first_size[0] != first_size[1] || memcmp(first[0], first[1], first_size[0]) != 0);
    free(first[0]);
    free(first[1]);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 4);
    ck_assert_uint_eq(st.mem_misses, 4);
    kpc_cache_close(c);
}
END_TEST

START_TEST(memory_hit_returns_the_same_program)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src(ts_kernel_source(3), "k3.hip");
    kpc_program *a, *b;
    ck_assert_int_eq(kpc_program_get(ctx, &src, &a), KPC_OK);
    enum { N = 100000 };
    uint64_t t0 = kpc__now_ns();
    int failures = 0; /* no ck_assert in the loop: each one writes to Check's pipe */
    for (int i = 0; i < N; i++) {
        failures += kpc_program_get(ctx, &src, &b) != KPC_OK;
        kpc_program_release(b);
    }
    printf("in-memory hit: %.0f ns\n", (double)(kpc__now_ns() - t0) / N);
    ck_assert_int_eq(failures, 0);
    ck_assert_int_eq(kpc_program_get(ctx, &src, &b), KPC_OK);
    ck_assert_ptr_eq(a, b);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 1);
    ck_assert_uint_eq(st.mem_hits, N + 1);
    kpc_program_release(a);
    kpc_program_release(b);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(options_and_headers_change_the_object)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    const char *code = "#include \"scale.h\"\n"
                       "extern \"C\" __global__ void k(float *a) { a[threadIdx.x] *= SCALE * OFFSET; }\n";
    const char *hn[] = {"scale.h"}, *h1[] = {"#define SCALE 3.0f\n"}, *h2[] = {"#define SCALE 5.0f\n"};
    const char *o1[] = {"-DOFFSET=2.0f"}, *o2[] = {"-DOFFSET=7.0f"};
    kpc_source s = ts_src(code, "scaled.hip");
    s.header_names = hn;
    s.num_headers = 1;
    s.num_options = 1;
    void *obj[3];
    size_t size[3];
    s.header_sources = h1, s.options = o1;
    obj[0] = ts_get_code(ctx, &s, &size[0]);
    s.header_sources = h2, s.options = o1;
    obj[1] = ts_get_code(ctx, &s, &size[1]);
    s.header_sources = h1, s.options = o2;
    obj[2] = ts_get_code(ctx, &s, &size[2]);
    for (int i = 0; i < 3; i++)
        ck_assert(ts_is_code_object(obj[i], size[i]));
    ck_assert(size[0] != size[1] || memcmp(obj[0], obj[1], size[0]) != 0);
    ck_assert(size[0] != size[2] || memcmp(obj[0], obj[2], size[0]) != 0);
    ck_assert_uint_eq(stats_of(c).builds, 3);
    for (int i = 0; i < 3; i++)
        free(obj[i]);
    /* an option that sets the target is refused: the context decides it */
    const char *arch[] = {"--gpu-architecture=gfx906"};
    s.options = arch;
    kpc_program *p = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &s, &p), KPC_E_INVALID);
    ck_assert_ptr_null(p);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(lowered_names_of_templates)
{
    const char *code = "template<typename T> __global__ void scale(T *a, T s) { a[threadIdx.x] *= s; }\n"
                       "namespace ns { template<int N> __global__ void fill(int *a) { a[threadIdx.x] = N; } }\n";
    const char *exprs[] = {"scale<float>", "scale<int>", "ns::fill<7>"};
    kpc_source s = ts_src(code, "templates.hip");
    s.name_expressions = exprs;
    s.num_name_expressions = 3;
    char lowered[3][128];
    for (int round = 0; round < 2; round++) { /* round 1: a new cache handle reads the disk */
        kpc_cache *c = ts_open(dir, 0, 0);
        kpc_context *ctx = ts_context(c);
        kpc_program *p;
        ck_assert_int_eq(kpc_program_get(ctx, &s, &p), KPC_OK);
        for (int i = 0; i < 3; i++) {
            const char *low = kpc_program_lowered_name(p, exprs[i]);
            ck_assert_ptr_nonnull(low);
            ck_assert_msg(strncmp(low, "_Z", 2) == 0, "%s lowered to %s", exprs[i], low);
            if (round == 0)
                snprintf(lowered[i], sizeof lowered[i], "%s", low);
            else
                ck_assert_str_eq(low, lowered[i]);
        }
        ck_assert_str_eq(lowered[0], "_Z5scaleIfEvPT_S0_");
        ck_assert_str_eq(lowered[1], "_Z5scaleIiEvPT_S0_");
        ck_assert_str_eq(lowered[2], "_ZN2ns4fillILi7EEEvPi");
        ck_assert_ptr_null(kpc_program_lowered_name(p, "scale<double>"));
        ck_assert_ptr_null(kpc_program_lowered_name(p, NULL));
        ck_assert_ptr_null(kpc_program_lowered_name(NULL, "scale<float>"));
        kpc_stats st = stats_of(c);
        ck_assert_uint_eq(st.builds, round == 0 ? 1 : 0);
        ck_assert_uint_eq(st.disk_hits, round == 0 ? 0 : 1);
        kpc_program_release(p);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
    }
}
END_TEST

START_TEST(compile_error_gives_the_log)
{
    /* without the host index: the index shares a fresh failure host-wide (test_index) */
    kpc_cache *c = ts_open(dir, KPC_NO_SHM, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source s = ts_src(ts_bad_source(), "broken.hip");
    kpc_program *p = (kpc_program *)1;
    ck_assert_int_eq(kpc_program_get(ctx, &s, &p), KPC_E_COMPILE);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(kpc_last_log(), "undeclared_thing") != NULL, "log: %s", kpc_last_log());
    /* a later request tries again */
    ck_assert_int_eq(kpc_program_get(ctx, &s, &p), KPC_E_COMPILE);
    ck_assert_uint_eq(stats_of(c).build_failures, 2);
    /* a good request clears nothing it should not, and the log is per request */
    kpc_source good = ts_src(ts_kernel_source(0), "k0.hip");
    ck_assert_int_eq(kpc_program_get(ctx, &good, &p), KPC_OK);
    kpc_program_release(p);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* ---- threads ---- */
typedef struct thread_arg {
    kpc_context *ctx;
    pthread_barrier_t *barrier;
    const kpc_source *srcs;
    int nsrc;
    kpc_status status[8];
    char log[256];
    const void *code[8];
    kpc_program *prog[8];
} thread_arg;

static void *ask_all(void *p)
{
    thread_arg *a = p;
    pthread_barrier_wait(a->barrier);
    for (int i = 0; i < a->nsrc; i++) {
        a->status[i] = kpc_program_get(a->ctx, &a->srcs[i], &a->prog[i]);
        a->code[i] = a->prog[i] ? kpc_program_code(a->prog[i], NULL) : NULL;
        if (a->status[i] == KPC_E_COMPILE)
            snprintf(a->log, sizeof a->log, "%s", kpc_last_log());
    }
    return NULL;
}

static void run_threads(kpc_context *ctx, const kpc_source *srcs, int nsrc, thread_arg *args, int n)
{
    pthread_t t[16];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        args[i] = (thread_arg){.ctx = ctx, .barrier = &barrier, .srcs = srcs, .nsrc = nsrc};
        pthread_create(&t[i], NULL, ask_all, &args[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&barrier);
}

START_TEST(eight_threads_three_sources_three_builds)
{
    kpc_cache *c = ts_open(dir, KPC_NO_DISK, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source srcs[3];
    for (int i = 0; i < 3; i++)
        srcs[i] = ts_src(ts_kernel_source(10 + i), "t.hip");
    thread_arg args[8];
    run_threads(ctx, srcs, 3, args, 8);
    for (int t = 0; t < 8; t++)
        for (int i = 0; i < 3; i++) {
            ck_assert_int_eq(args[t].status[i], KPC_OK);
            ck_assert_ptr_eq(args[t].prog[i], args[0].prog[i]); /* one program per source */
            kpc_program_release(args[t].prog[i]);
        }
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 3);
    ck_assert_uint_eq(st.mem_misses, 3);
    ck_assert_uint_eq(st.mem_hits + st.waits, 8 * 3 - 3);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(eight_threads_failing_source_one_compile)
{
    kpc_cache *c = ts_open(dir, KPC_NO_DISK, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source bad = ts_src(ts_bad_source(), "broken.hip");
    thread_arg args[8];
    run_threads(ctx, &bad, 1, args, 8);
    for (int t = 0; t < 8; t++) {
        ck_assert_int_eq(args[t].status[0], KPC_E_COMPILE);
        ck_assert_ptr_null(args[t].prog[0]);
        ck_assert_msg(strstr(args[t].log, "undeclared_thing") != NULL, "thread %d log: %s", t, args[t].log);
    }
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.build_failures, 1);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_uint_eq(st.waits, 7);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(last_log_is_per_thread)
{
    kpc_cache *c = ts_open(dir, KPC_NO_DISK, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source bad = ts_src(ts_bad_source(), "broken.hip");
    kpc_program *p;
    ck_assert_int_eq(kpc_program_get(ctx, &bad, &p), KPC_E_COMPILE);
    ck_assert_str_ne(kpc_last_log(), "");
    thread_arg other;
    kpc_source good = ts_src(ts_kernel_source(1), "k.hip");
    run_threads(ctx, &good, 1, &other, 1);
    ck_assert_int_eq(other.status[0], KPC_OK);
    ck_assert_str_eq(other.log, "");
    kpc_program_release(other.prog[0]);
    ck_assert_msg(strstr(kpc_last_log(), "undeclared_thing") != NULL, "the log of this thread is kept");
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* ---- LRU ---- */
/* A cache on dir whose contexts keep at most 2 programs in memory. */
static kpc_cache *open_two_in_memory(void)
{
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .mem_max_programs = 2};
    kpc_cache *c;
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_OK);
    return c;
}

START_TEST(lru_drops_the_map_reference_only)
{
    kpc_cache *c = open_two_in_memory();
    kpc_context *ctx = ts_context(c);
    kpc_source s[3];
    kpc_program *p[3];
    for (int i = 0; i < 3; i++) {
        s[i] = ts_src(ts_kernel_source(20 + i), "lru.hip");
        ck_assert_int_eq(kpc_program_get(ctx, &s[i], &p[i]), KPC_OK);
    }
    ck_assert_uint_eq(kpc_map_count(ctx->map), 2);
    /* the evicted program (0) is still held by us: its bytes stay valid */
    size_t size;
    const unsigned char *code = kpc_program_code(p[0], &size);
    ck_assert(ts_is_code_object(code, size));
    /* 2 is a memory hit; 0 was evicted, so it comes from disk, not from a compile */
    kpc_program *q;
    ck_assert_int_eq(kpc_program_get(ctx, &s[2], &q), KPC_OK);
    ck_assert_ptr_eq(q, p[2]);
    kpc_program_release(q);
    ck_assert_int_eq(kpc_program_get(ctx, &s[0], &q), KPC_OK);
    ck_assert_ptr_ne(q, p[0]);
    size_t size2;
    const void *code2 = kpc_program_code(q, &size2);
    ck_assert_uint_eq(size, size2);
    ck_assert_mem_eq(code, code2, size);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.builds, 3);
    ck_assert_uint_eq(st.disk_hits, 1);
    ck_assert_uint_eq(st.mem_hits, 1);
    kpc_program_release(q);
    for (int i = 0; i < 3; i++)
        kpc_program_release(p[i]);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST


/* ---- targets and bad input ---- */
START_TEST(targets_are_validated_and_normalized)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = NULL;
#ifndef KPC_PLATFORM_NVIDIA
    const char *bad[] = {"gfx9999", "bogus", "gfx90a:foo+", "gfx90a:xnack", "gfx90a:xnack+:xnack-",
                         "gfx1030:xnack+", "gfx90a/../x", "gfx 90a", "", "tmp"};
    ck_assert_int_eq(kpc_context_create_for_target(c, "gfx90a:xnack-:sramecc+", &ctx), KPC_OK);
    ck_assert_str_eq(kpc_context_target(ctx), "gfx90a:sramecc+:xnack-");
    kpc_context_destroy(ctx);
    ck_assert_int_eq(kpc_context_create_for_target(c, "amdgcn-amd-amdhsa--gfx906:xnack+", &ctx), KPC_OK);
    ck_assert_str_eq(kpc_context_target(ctx), "gfx906:xnack+");
    /* a feature variant compiles too: the remembered target list is no bypass */
    kpc_source s = ts_src(ts_kernel_source(5), "k.hip");
    size_t size;
    free(ts_get_code(ctx, &s, &size));
    kpc_context_destroy(ctx);
#else
    const char *bad[] = {"sm_1", "bogus", "compute_", "sm_90x", "", "tmp"};
#endif
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ctx = (kpc_context *)1;
        ck_assert_msg(kpc_context_create_for_target(c, bad[i], &ctx) == KPC_E_INVALID, "target \"%s\"", bad[i]);
        ck_assert_ptr_null(ctx);
    }
    /* a second process with a warm target list still refuses the unknown one */
    kpc_cache_close(c);
    c = ts_open(dir, 0, 0);
    ck_assert_int_eq(kpc_context_create_for_target(c, bad[0], &ctx), KPC_E_INVALID);
    kpc_cache_close(c);
}
END_TEST

#ifndef KPC_PLATFORM_NVIDIA
/* comgr's generic targets (ROCm 6 lists gfx9-4-generic, gfx10-3-generic, gfx11-generic...)
 * are processors whose names have dashes: accepted where the compiler's target list has
 * them. ROCm 5.2's comgr lists none, so the list is the memo of validated targets. */
START_TEST(generic_targets_from_the_target_list)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = NULL;
    ck_assert_int_eq(kpc_context_create_for_target(c, "gfx90a", &ctx), KPC_OK); /* writes the memo */
    kpc_context_destroy(ctx);
    /* a generic name comgr does not list, and malformed ones, are refused */
    const char *bad[] = {"gfx99-9-generic", "gfx10--generic", "-gfx9-generic", "gfx9-generic-",
                         "gfx9-Generic", "gfx9-4-generic:xnack"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ctx = (kpc_context *)1;
        ck_assert_msg(kpc_context_create_for_target(c, bad[i], &ctx) == KPC_E_INVALID, "target \"%s\"", bad[i]);
        ck_assert_ptr_null(ctx);
    }
    kpc_cache_close(c);
    /* the compiler's list, as the memo of validated targets holds it */
    char v1[4096], memo[4400] = "";
    snprintf(v1, sizeof v1, "%s/v1", dir);
    DIR *d = opendir(v1);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, "targets-amd-", 12) == 0)
            snprintf(memo, sizeof memo, "%s/%s", v1, e->d_name);
    closedir(d);
    ck_assert_msg(memo[0] != '\0', "no target memo in %s", v1);
    FILE *f = fopen(memo, "a");
    ck_assert_ptr_nonnull(f);
    fputs("gfx10-3-generic\ngfx9-4-generic:sramecc+:xnack-\n", f);
    fclose(f);
    c = ts_open(dir, 0, 0);
    ck_assert_int_eq(kpc_context_create_for_target(c, "gfx10-3-generic", &ctx), KPC_OK);
    ck_assert_str_eq(kpc_context_target(ctx), "gfx10-3-generic");
    kpc_context_destroy(ctx);
    ck_assert_int_eq(kpc_context_create_for_target(c, "amdgcn-amd-amdhsa--gfx9-4-generic:xnack-:sramecc+", &ctx),
                     KPC_OK);
    ck_assert_str_eq(kpc_context_target(ctx), "gfx9-4-generic:sramecc+:xnack-");
    kpc_context_destroy(ctx);
    ck_assert_int_eq(kpc_context_create_for_target(c, "gfx99-9-generic", &ctx), KPC_E_INVALID);
    kpc_cache_close(c);
}
END_TEST
#endif

START_TEST(null_and_empty_arguments)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_program *p = NULL;
    kpc_source empty = ts_src("", "e.hip");
    kpc_source nullcode = ts_src(NULL, "n.hip");
    kpc_source good = ts_src(ts_kernel_source(2), "k.hip");
    kpc_context *none = (kpc_context *)1;
    ck_assert_int_eq(kpc_cache_open(NULL, NULL), KPC_E_INVALID);
    ck_assert_int_eq(kpc_context_create_for_target(NULL, "gfx90a", &none), KPC_E_INVALID);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(kpc_context_create_for_target(c, NULL, &none), KPC_E_INVALID);
    ck_assert_int_eq(kpc_context_create_for_target(c, ts_target(), NULL), KPC_E_INVALID);
    ck_assert_int_eq(kpc_context_create(NULL, 0, &none), KPC_E_INVALID);
    ck_assert_int_eq(kpc_context_create(c, -1, &none), KPC_E_INVALID);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(kpc_program_get(NULL, &good, &p), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get(ctx, NULL, &p), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get(ctx, &good, NULL), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get(ctx, &empty, &p), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get(ctx, &nullcode, &p), KPC_E_INVALID);
    kpc_source counted = good;
    counted.num_options = 2; /* options NULL */
    ck_assert_int_eq(kpc_program_get(ctx, &counted, &p), KPC_E_INVALID);
    counted = good;
    const char *null_expr[] = {NULL};
    counted.name_expressions = null_expr, counted.num_name_expressions = 1;
    ck_assert_int_eq(kpc_program_get(ctx, &counted, &p), KPC_E_INVALID);
    counted = good;
    const char *hn[] = {"a.h"}, *hs[] = {NULL};
    counted.header_names = hn, counted.header_sources = hs, counted.num_headers = 1;
    ck_assert_int_eq(kpc_program_get(ctx, &counted, &p), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get(ctx, &good, &p), KPC_OK);
    hipFunction_t fn;
    ck_assert_int_eq(kpc_kernel_get(ctx, p, "kpc_test_k2", &fn), KPC_E_INVALID); /* compile-only */
    ck_assert_int_eq(kpc_kernel_get(NULL, p, "x", &fn), KPC_E_INVALID);
    ck_assert_int_eq(kpc_kernel_get(ctx, NULL, "x", &fn), KPC_E_INVALID);
    ck_assert_int_eq(kpc_kernel_get(ctx, p, NULL, &fn), KPC_E_INVALID);
    ck_assert_int_eq(kpc_kernel_get(ctx, p, "x", NULL), KPC_E_INVALID);
    ck_assert_ptr_null(kpc_program_code(NULL, NULL));
    ck_assert_int_eq(kpc_program_retain(NULL), KPC_E_INVALID);
    ck_assert_int_eq(kpc_stats_get(NULL, &(kpc_stats){0}), KPC_E_INVALID);
    ck_assert_int_eq(kpc_stats_get(c, NULL), KPC_E_INVALID);
    ck_assert_ptr_null(kpc_context_target(NULL));
    kpc_program_release(p);
    kpc_program_release(NULL);
    kpc_context_destroy(NULL);
    kpc_cache_close(NULL);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    kpc_config small = {.struct_size = 1};
    ck_assert_int_eq(kpc_cache_open(&small, &c), KPC_E_INVALID);
}
END_TEST

START_TEST(device_context_without_gpu)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = NULL;
    ts_log_begin(KPC_LOG_ERROR);
    kpc_status s = kpc_context_create(c, 0, &ctx);
    char *log = ts_log_end();
    if (s == KPC_OK) { /* a machine with a GPU: the GPU suite covers it */
        ts_skip("a GPU is present (the GPU suite covers it)");
        kpc_context_destroy(ctx);
    } else {
        ck_assert_int_eq(s, KPC_E_NO_DEVICE);
        ck_assert_ptr_null(ctx);
        /* a clear line, pointing at what works without a GPU */
        ck_assert_msg(strstr(log, "no GPU") && strstr(log, "kpc_context_create_for_target"), "log: %s", log);
    }
    free(log);
    kpc_cache_close(c);
}
END_TEST

START_TEST(status_names)
{
    ck_assert_str_eq(kpc_status_str(KPC_OK), "KPC_OK");
    ck_assert_str_eq(kpc_status_str(KPC_E_INVALID), "KPC_E_INVALID");
    ck_assert_str_eq(kpc_status_str(KPC_E_NOMEM), "KPC_E_NOMEM");
    ck_assert_str_eq(kpc_status_str(KPC_E_COMPILE), "KPC_E_COMPILE");
    ck_assert_str_eq(kpc_status_str(KPC_E_NO_DEVICE), "KPC_E_NO_DEVICE");
    ck_assert_str_eq(kpc_status_str(KPC_E_HIP), "KPC_E_HIP");
    ck_assert_str_eq(kpc_status_str(KPC_E_NOT_FOUND), "KPC_E_NOT_FOUND");
    ck_assert_str_eq(kpc_status_str(KPC_E_IO), "KPC_E_IO");
    ck_assert_str_eq(kpc_status_str(KPC_E_SHM), "KPC_E_SHM");
    ck_assert_str_eq(kpc_status_str(KPC_E_CORRUPT), "KPC_E_CORRUPT");
    ck_assert_str_eq(kpc_status_str(KPC_E_UNAVAILABLE), "KPC_E_UNAVAILABLE");
    ck_assert_str_eq(kpc_status_str((kpc_status)99), "KPC_E_UNKNOWN");
    /* statuses are ABI */
    ck_assert_int_eq(KPC_OK, 0);
    ck_assert_int_eq(KPC_E_CORRUPT, 9);
}
END_TEST

/* A batch count whose allocations would overflow: refused, nothing written (before: the
 * memset of n pointers wrapped around and the calloc of n items was asked for a wrapped
 * size). */
START_TEST(batch_count_that_overflows_is_invalid)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = ts_src(ts_kernel_source(0), "a.hip");
    kpc_program *out[2] = {(kpc_program *)1, (kpc_program *)1};
    kpc_status st[2] = {KPC_OK, KPC_OK};
    const size_t counts[] = {SIZE_MAX, SIZE_MAX / 2 + 1, SIZE_MAX / 8 + 1};
    ts_log_begin(KPC_LOG_ERROR);
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        ck_assert_msg(kpc_program_get_many(ctx, &src, counts[i], out, st) == KPC_E_INVALID, "n = %zu", counts[i]);
    free(ts_log_end());
    ck_assert_ptr_eq(out[1], (kpc_program *)1); /* nothing written */
    ck_assert_int_eq(st[1], KPC_OK);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* ---- environment ---- */
START_TEST(bad_environment_values)
{
    static const char *const cases[][2] = {
        {"KPC_CACHE_MAX_SIZE", "abc"}, {"KPC_CACHE_MAX_SIZE", "-1"}, {"KPC_CACHE_MAX_SIZE", "0"},
        {"KPC_CACHE_MAX_SIZE", "12Q"}, {"KPC_CACHE_MAX_SIZE", ""},   {"KPC_MEM_MAX_PROGRAMS", "abc"},
        {"KPC_MEM_MAX_PROGRAMS", "0"}, {"KPC_MEM_MAX_PROGRAMS", "-3"}, {"KPC_MEM_MAX_PROGRAMS", "5x"},
        {"KPC_SHM_ENTRIES", "-5"},     {"KPC_SHM_ENTRIES", "99999999999"}, {"KPC_DISABLE", "yes"},
        {"KPC_LOG", "loud"},           {"KPC_CACHE_DIR", ""}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv(cases[i][0], cases[i][1], 1);
        kpc_cache *c = (kpc_cache *)1;
        ck_assert_msg(kpc_cache_open(NULL, &c) == KPC_E_INVALID, "%s=\"%s\"", cases[i][0], cases[i][1]);
        ck_assert_ptr_null(c);
        unsetenv(cases[i][0]);
    }
}
END_TEST

START_TEST(environment_values_are_used)
{
    setenv("KPC_CACHE_DIR", dir, 1);
    setenv("KPC_CACHE_MAX_SIZE", "512M", 1);
    setenv("KPC_MEM_MAX_PROGRAMS", "7", 1);
    setenv("KPC_SHM_ENTRIES", "1000", 1);
    setenv("KPC_LOG", "warn", 1);
    kpc_cache *c;
    ck_assert_int_eq(kpc_cache_open(NULL, &c), KPC_OK);
    ck_assert_uint_eq(c->settings.disk_max_bytes, 512ull << 20);
    ck_assert_uint_eq(c->settings.mem_max_programs, 7);
    ck_assert_uint_eq(c->settings.shm_entries, 1000);
    ck_assert_str_eq(c->settings.cache_dir, dir);
    ck_assert_uint_eq(stats_of(c).capacity, 1000);
    kpc_cache_close(c);
    /* a config field wins over the environment */
    kpc_config cfg = {.struct_size = sizeof cfg, .mem_max_programs = 3};
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_OK);
    ck_assert_uint_eq(c->settings.mem_max_programs, 3);
    kpc_cache_close(c);
    /* fields past struct_size are unset: an old caller's struct */
    kpc_config old = {.struct_size = offsetof(kpc_config, disk_max_bytes), .disk_max_bytes = 5};
    ck_assert_int_eq(kpc_cache_open(&old, &c), KPC_OK);
    ck_assert_uint_eq(c->settings.disk_max_bytes, 512ull << 20);
    kpc_cache_close(c);
    setenv("KPC_DISABLE", "1", 1);
    ck_assert_int_eq(kpc_cache_open(NULL, &c), KPC_OK);
    ck_assert_ptr_null(c->store);
    ck_assert_ptr_null(c->index);
    kpc_cache_close(c);
}
END_TEST

/* ---- the key ---- */
START_TEST(key_covers_every_input)
{
    uint8_t id[16] = {1}, id2[16] = {2};
    const char *o1[] = {"-O3", "-DA=1"}, *o2[] = {"-DA=1", "-O3"}, *hn[] = {"a.h"}, *hs[] = {"x"},
               *hs2[] = {"y"}, *e1[] = {"f<int>"}, *e2[] = {"f<float>"};
    kpc_source base = ts_src("code", "n.hip");
    kpc_source v[12];
    for (int i = 0; i < 12; i++)
        v[i] = base;
    v[1].code = "codf";
    v[2].name = "m.hip";
    v[3].options = o1, v[3].num_options = 2;
    v[4].options = o2, v[4].num_options = 2;
    v[5].header_names = hn, v[5].header_sources = hs, v[5].num_headers = 1;
    v[6].header_names = hn, v[6].header_sources = hs2, v[6].num_headers = 1;
    v[7].name_expressions = e1, v[7].num_name_expressions = 1;
    v[8].name_expressions = e2, v[8].num_name_expressions = 1;
    v[9].code = "codex", v[9].code_len = 4; /* only the first 4 bytes count */
    v[10].name = NULL;
    kpc_key k[16];
    for (int i = 0; i < 11; i++)
        kpc_key_compute(id, "amd", "gfx90a", &v[i], &k[i]);
    kpc_key_compute(id2, "amd", "gfx90a", &base, &k[11]);
    kpc_key_compute(id, "amd", "gfx906", &base, &k[12]);
    kpc_key_compute(id, "nvidia", "gfx90a", &base, &k[13]);
    kpc_key_compute(id, "amd", "gfx90a", &base, &k[14]);
    ck_assert_mem_eq(k[14].bytes, k[0].bytes, 16); /* deterministic */
    ck_assert_mem_eq(k[9].bytes, k[0].bytes, 16);  /* code_len honoured */
    for (int i = 0; i < 14; i++)
        for (int j = i + 1; j < 14; j++)
            if (i != 9 && j != 9 && !(i == 0 && j == 9))
                ck_assert_msg(memcmp(k[i].bytes, k[j].bytes, 16) != 0, "keys %d and %d collide", i, j);
    char hex[KPC_KEY_HEX];
    kpc_key_hex(&k[0], hex);
    kpc_key back;
    ck_assert(kpc_key_parse(hex, &back));
    ck_assert_mem_eq(back.bytes, k[0].bytes, 16);
    ck_assert(!kpc_key_parse("zz", &back));
}
END_TEST

#ifndef KPC_PLATFORM_NVIDIA
START_TEST(identity_is_real)
{
    /* no remembered identity (NULL dir): computed from the loaded libraries' build ids */
    uint8_t a[16], b[16], c[16];
    char desc[512];
    ck_assert_int_eq(kpc_platform_builtin.identity(NULL, a, desc, sizeof desc), KPC_OK);
    ck_assert_msg(strstr(desc, "libamdhip64:") && strstr(desc, "libamd_comgr:") &&
                  strstr(desc, "libLLVM") && strstr(desc, "libhiprtc-builtins:"), "identity: %s", desc);
    /* remembered in the cache dir, then recalled without loading anything new */
    mkdir(dir, 0700);
    kpc_root *root;
    ck_assert_int_eq(kpc_root_open(dir, &root), KPC_OK);
    ck_assert_int_eq(kpc_platform_builtin.identity(root, b, desc, sizeof desc), KPC_OK);
    ck_assert_mem_eq(a, b, 16);
    ck_assert_int_eq(kpc_platform_builtin.identity(root, b, desc, sizeof desc), KPC_OK);
    ck_assert_str_eq(desc, ""); /* recalled: nothing was hashed */
    ck_assert_mem_eq(a, b, 16);
    /* hipRTC's hidden options change every key, but not the identity records carry (so
     * `kpc prune --stale` run with another environment never calls objects stale) */
    setenv("GPU_ENABLE_WAVE32_MODE", "1", 1);
    ck_assert_int_eq(kpc_platform_builtin.identity(root, c, desc, sizeof desc), KPC_OK);
    ck_assert_mem_eq(a, c, 16);
    kpc_root_close(root);
    kpc_cache *cache = ts_open(dir, 0, 0);
    kpc_context *wave32, *plain, *empty;
    ck_assert_int_eq(kpc_context_create_for_target(cache, "gfx1030", &wave32), KPC_OK);
    unsetenv("GPU_ENABLE_WAVE32_MODE");
    ck_assert_int_eq(kpc_context_create_for_target(cache, "gfx1030", &plain), KPC_OK);
    setenv("GPU_ENABLE_WAVE32_MODE", "", 1);
    ck_assert_int_eq(kpc_context_create_for_target(cache, "gfx1030", &empty), KPC_OK);
    unsetenv("GPU_ENABLE_WAVE32_MODE");
    ck_assert_mem_eq(wave32->compiler_id, a, 16);
    ck_assert_mem_eq(plain->compiler_id, a, 16);
    ck_assert(memcmp(wave32->key_id, plain->key_id, 16) != 0);
    ck_assert(memcmp(empty->key_id, plain->key_id, 16) != 0); /* set but empty is not unset */
    kpc_source src = {.code = "extern \"C\" __global__ void k(int *p) { *p = 1; }", .name = "k.hip"};
    kpc_key kw, kp;
    ts_key(wave32, &src, &kw);
    ts_key(plain, &src, &kp);
    ck_assert(memcmp(kw.bytes, kp.bytes, 16) != 0);
    kpc_context_destroy(wave32);
    kpc_context_destroy(plain);
    kpc_context_destroy(empty);
    kpc_cache_close(cache);
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("compile");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, compiles_real_code_objects);
    tcase_add_test(tc, memory_hit_returns_the_same_program);
    tcase_add_test(tc, options_and_headers_change_the_object);
    tcase_add_test(tc, lowered_names_of_templates);
    tcase_add_test(tc, compile_error_gives_the_log);
    tcase_add_test(tc, eight_threads_three_sources_three_builds);
    tcase_add_test(tc, eight_threads_failing_source_one_compile);
    tcase_add_test(tc, last_log_is_per_thread);
    tcase_add_test(tc, lru_drops_the_map_reference_only);
    tcase_add_test(tc, targets_are_validated_and_normalized);
#ifndef KPC_PLATFORM_NVIDIA
    tcase_add_test(tc, generic_targets_from_the_target_list);
#endif
    tcase_add_test(tc, null_and_empty_arguments);
    tcase_add_test(tc, device_context_without_gpu);
    tcase_add_test(tc, status_names);
    tcase_add_test(tc, bad_environment_values);
    tcase_add_test(tc, batch_count_that_overflows_is_invalid);
    tcase_add_test(tc, environment_values_are_used);
    tcase_add_test(tc, key_covers_every_input);
#ifndef KPC_PLATFORM_NVIDIA
    tcase_add_test(tc, identity_is_real);
#endif
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
