/*
 * test_batch.c - kpc_program_get_many.
 *
 * processes (default): through real hipRTC. P processes x the same K sources in the same
 *   order: every request succeeds, the host builds each source once (K compiles in all)
 *   and more than one process builds; a failing source gets its own KPC_E_COMPILE while
 *   the others succeed; a source repeated in the list is built once; NULL and n = 0.
 * threads: the fake platform, declared able to compile in parallel: KPC_BUILD_THREADS = 4
 *   runs compiles at once inside one process (the largest number of compiles in flight
 *   is counted), and each source is still built once.
 */
#define _GNU_SOURCE
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

START_TEST(null_and_empty)
{
    ck_assert_int_eq(kpc_program_get_many(NULL, NULL, 0, NULL, NULL), KPC_OK);
    char *dir = ts_tmpdir();
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_program *progs[2] = {(kpc_program *)1, (kpc_program *)1};
    kpc_status st[2] = {KPC_OK, KPC_OK};
    ck_assert_int_eq(kpc_program_get_many(ctx, NULL, 2, progs, st), KPC_E_INVALID);
    ck_assert_ptr_null(progs[0]);
    ck_assert_ptr_null(progs[1]);
    ck_assert_int_eq(st[0], KPC_E_INVALID);
    ck_assert_int_eq(st[1], KPC_E_INVALID);
    kpc_source srcs[2] = {ts_src(ts_kernel_source(0), "k0.hip"), ts_src(ts_kernel_source(1), "k1.hip")};
    ck_assert_int_eq(kpc_program_get_many(NULL, srcs, 2, progs, st), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get_many(ctx, srcs, 2, NULL, st), KPC_E_INVALID);
    ck_assert_int_eq(kpc_program_get_many(ctx, srcs, 0, progs, st), KPC_OK);
    /* an invalid request (empty source) fails alone */
    kpc_source mixed[2] = {ts_src("", "empty.hip"), srcs[0]};
    ck_assert_int_eq(kpc_program_get_many(ctx, mixed, 2, progs, st), KPC_E_INVALID);
    ck_assert_int_eq(st[0], KPC_E_INVALID);
    ck_assert_int_eq(st[1], KPC_OK);
    ck_assert_ptr_null(progs[0]);
    size_t size;
    const void *code = kpc_program_code(progs[1], &size);
    ck_assert(ts_is_code_object(code, size));
    kpc_program_release(progs[1]);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_cleanup(dir);
}
END_TEST

START_TEST(failing_source_alone)
{
    char *dir = ts_tmpdir();
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source srcs[4] = {ts_src(ts_kernel_source(0), "k0.hip"), ts_src(ts_bad_source(), "bad.hip"),
                          ts_src(ts_kernel_source(1), "k1.hip"), ts_src(ts_kernel_source(0), "k0.hip")};
    kpc_program *progs[4];
    kpc_status st[4];
    ck_assert_int_eq(kpc_program_get_many(ctx, srcs, 4, progs, st), KPC_E_COMPILE);
    ck_assert_int_eq(st[0], KPC_OK);
    ck_assert_int_eq(st[1], KPC_E_COMPILE);
    ck_assert_int_eq(st[2], KPC_OK);
    ck_assert_int_eq(st[3], KPC_OK);
    ck_assert_ptr_null(progs[1]);
    ck_assert_msg(strstr(kpc_last_log(), "error") != NULL, "the failing source's log: %s", kpc_last_log());
    ck_assert_ptr_eq(progs[0], progs[3]); /* a repeat shares the first occurrence's program */
    for (int i = 0; i < 4; i += 2) {
        size_t size;
        const void *code = kpc_program_code(progs[i], &size);
        ck_assert(ts_is_code_object(code, size));
    }
    /* the same bytes kpc_program_get gives */
    size_t size, size0;
    void *code = ts_get_code(ctx, &srcs[2], &size);
    const void *code0 = kpc_program_code(progs[2], &size0);
    ck_assert_uint_eq(size, size0);
    ck_assert_int_eq(memcmp(code, code0, size), 0);
    free(code);
    kpc_stats stats;
    kpc_stats_get(c, &stats);
    ck_assert_uint_eq(stats.builds, 2); /* k0 once (repeated), k1 */
    ck_assert_uint_eq(stats.build_failures, 1);
    for (int i = 0; i < 4; i++)
        kpc_program_release(progs[i]);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_cleanup(dir);
}
END_TEST

/* ---- P processes x K sources, same order ---- */
#define K 6
typedef struct storm {
    const char *dir;
    atomic_int ready, go;
    int nproc;
    uint64_t builds[16];
    int ok[16];
} storm;

static int storm_child(int i, void *arg)
{
    storm *s = arg;
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = s->dir};
    kpc_cache *c;
    kpc_context *ctx;
    if (kpc_cache_open(&cfg, &c) != KPC_OK || kpc_context_create_for_target(c, ts_target(), &ctx) != KPC_OK)
        return 1;
    /* start together: the test is about who takes which key, not about start-up skew */
    atomic_fetch_add(&s->ready, 1);
    while (atomic_load(&s->go) == 0)
        usleep(1000);
    kpc_source srcs[K];
    char names[K][16];
    for (int k = 0; k < K; k++) {
        snprintf(names[k], sizeof names[k], "k%d.hip", k);
        srcs[k] = ts_src(ts_kernel_source(k), names[k]);
    }
    kpc_program *progs[K];
    kpc_status st[K];
    kpc_status r = kpc_program_get_many(ctx, srcs, K, progs, st);
    int good = r == KPC_OK;
    for (int k = 0; k < K; k++) {
        size_t size = 0;
        const void *code = kpc_program_code(progs[k], &size);
        good &= st[k] == KPC_OK && ts_is_code_object(code, size);
        kpc_program_release(progs[k]);
    }
    kpc_stats stats;
    kpc_stats_get(c, &stats);
    s->builds[i] = stats.builds;
    s->ok[i] = good;
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return good ? 0 : 1;
}

static void storm_run(int nproc)
{
    char *dir = ts_tmpdir();
    /* warm the compiler's identity and target memo, so the children start alike */
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context_destroy(ts_context(c));
    kpc_cache_close(c);
    storm *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(s, MAP_FAILED);
    memset(s, 0, sizeof *s);
    s->dir = dir;
    s->nproc = nproc;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) { /* the releaser: lets the children go once all are ready */
        while (atomic_load(&s->ready) < nproc)
            usleep(1000);
        atomic_store(&s->go, 1);
        _exit(0);
    }
    int ok = ts_run_children(nproc, storm_child, s);
    int st;
    waitpid(pid, &st, 0);
    ck_assert_int_eq(ok, nproc);
    uint64_t total = 0;
    int builders = 0;
    for (int i = 0; i < nproc; i++) {
        total += s->builds[i];
        builders += s->builds[i] > 0;
    }
    ck_assert_uint_eq(total, K); /* each source once on the host */
    if (nproc > 1)
        ck_assert_msg(builders > 1, "one process built all %d sources: the others waited instead of building", K);
    c = ts_open(dir, 0, 0);
    kpc_stats hs;
    kpc_stats_get(c, &hs);
    ck_assert_uint_eq(hs.host_builds, K);
    kpc_cache_close(c);
    munmap(s, sizeof *s);
    ts_cleanup(dir);
}

START_TEST(processes_same_order_one) { storm_run(1); }
END_TEST
START_TEST(processes_same_order_three) { storm_run(3); }
END_TEST

/* ---- threads: a fake platform that compiles in parallel ---- */
static kpc_platform parallel_fake;
static atomic_int in_flight, most_in_flight;
static kpc_status (*fake_compile)(const char *, const kpc_source *, kpc_build *);

static kpc_status counting_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    int now = atomic_fetch_add(&in_flight, 1) + 1;
    int seen = atomic_load(&most_in_flight);
    while (now > seen && !atomic_compare_exchange_weak(&most_in_flight, &seen, now))
        ;
    kpc_status s = fake_compile(target, src, b);
    atomic_fetch_sub(&in_flight, 1);
    return s;
}

START_TEST(threads_build_in_parallel)
{
    ts_fake_install();
    parallel_fake = *kpc_platform_get();
    fake_compile = parallel_fake.compile;
    parallel_fake.compile = counting_compile;
    parallel_fake.parallel_compiles = true;
    kpc_platform_set(&parallel_fake);
    char *dir = ts_tmpdir();
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .build_threads = 4};
    kpc_cache *c;
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_OK);
    kpc_context *ctx;
    ck_assert_int_eq(kpc_context_create_for_target(c, ts_target(), &ctx), KPC_OK);
    enum { N = 8 };
    char codes[N][64];
    kpc_source srcs[N];
    for (int i = 0; i < N; i++) {
        snprintf(codes[i], sizeof codes[i], "// sleep_ms=100\nkernel %d\n%s", i, i == 5 ? "#error\n" : "");
        srcs[i] = ts_src(codes[i], "t.hip");
    }
    kpc_program *progs[N];
    kpc_status st[N];
    ck_assert_int_eq(kpc_program_get_many(ctx, srcs, N, progs, st), KPC_E_COMPILE);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(st[i], i == 5 ? KPC_E_COMPILE : KPC_OK);
        kpc_program_release(progs[i]);
    }
    ck_assert_uint_eq(ts_fake_compiles(), N);
    ck_assert_msg(atomic_load(&most_in_flight) > 1, "compiles never overlapped with 4 build threads");
    /* hipRTC-like platforms (no parallel compiles) keep one thread whatever is asked */
    parallel_fake.parallel_compiles = false;
    atomic_store(&most_in_flight, 0);
    for (int i = 0; i < N; i++)
        codes[i][16] = 'K'; /* new sources */
    ck_assert_int_eq(kpc_program_get_many(ctx, srcs, N, progs, st), KPC_E_COMPILE);
    for (int i = 0; i < N; i++)
        kpc_program_release(progs[i]);
    ck_assert_int_eq(atomic_load(&most_in_flight), 1);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_fake_remove();
    ts_cleanup(dir);
}
END_TEST

static Suite *process_suite(void)
{
    Suite *s = suite_create("batch");
    TCase *tc = tcase_create("hiprtc");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, null_and_empty);
    tcase_add_test(tc, failing_source_alone);
    tcase_add_test(tc, processes_same_order_one);
    tcase_add_test(tc, processes_same_order_three);
    suite_add_tcase(s, tc);
    return s;
}

static Suite *thread_suite(void)
{
    Suite *s = suite_create("batch_threads");
    TCase *tc = tcase_create("fake");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, threads_build_in_parallel);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    return ts_main_processes_threads(argc, argv, process_suite, thread_suite);
}
