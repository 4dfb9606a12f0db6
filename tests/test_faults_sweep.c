/*
 * test_faults_sweep.c - the system-call fault sweep (see the comment above
 * fail_every_call_of_a_request). The fake platform compiles: what matters here is the
 * disk tree.
 */
#define _GNU_SOURCE
#include "support.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "faults_support.h"

/* ---- the system-call fault sweep --------------------------------------------------------
 *
 * Fail the Nth system call of a whole request, for every N the request makes, as SQLite's
 * test_syscall.c does: open the cache, create a context, get a program, close. Cold (an
 * empty cache: index created, compile, record written) and warm (the record on disk and
 * in the index: a hit), each with one failed call and with every call failing from the
 * Nth on (a disk that stays broken). The request must return the right object, byte for
 * byte the fake platform's compile, or a clear status (the statuses kpc.h lists, never a
 * crash or a hang); and nothing may be left behind: no temp file in v1/tmp, and a request
 * after it, with no fault, in a new cache handle, gets the right object without waiting
 * for anyone (no slot left BUILDING, no lock left held).
 */
static const kpc_source sweep_src = {.code = "// the swept request\n", .name = "sweep.hip"};

static void *clean_compile(size_t *size)
{
    kpc_build b;
    memset(&b, 0, sizeof b);
    ck_assert_int_eq(kpc_platform_get()->compile(ts_target(), &sweep_src, &b), KPC_OK);
    void *code = b.code;
    *size = b.code_size;
    b.code = NULL;
    kpc_platform_build_free(&b);
    return code;
}

/* One request under whatever fault plan is set. KPC_OK with the object's bytes, or the
 * status it failed with. */
static kpc_status one_request(const char *d, void **code, size_t *size)
{
    *code = NULL;
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = d};
    kpc_cache *c = NULL;
    kpc_status s = kpc_cache_open(&cfg, &c);
    if (s != KPC_OK)
        return s;
    kpc_context *ctx = NULL;
    s = kpc_context_create_for_target(c, ts_target(), &ctx);
    if (s == KPC_OK) {
        kpc_program *p = NULL;
        s = kpc_program_get(ctx, &sweep_src, &p);
        if (s == KPC_OK) {
            const void *bytes = kpc_program_code(p, size);
            *code = malloc(*size);
            memcpy(*code, bytes, *size);
        }
        kpc_program_release(p);
        kpc_context_destroy(ctx);
    }
    kpc_cache_close(c);
    return s;
}

/* Does the request leave the tree and the index fit for the next one? */
static void assert_nothing_left(const char *d, const void *ref, size_t ref_size, const char *what)
{
    ck_assert_msg(ts_tmp_entries(d) == 0, "%s: a temp file was left in v1/tmp", what);
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = d};
    kpc_cache *c = NULL;
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_OK);
    kpc_context *ctx = ts_context(c);
    size_t n;
    void *code = ts_get_code(ctx, &sweep_src, &n);
    ck_assert_msg(n == ref_size && memcmp(code, ref, n) == 0, "%s: the next request got a wrong object", what);
    kpc_stats st;
    memset(&st, 0, sizeof st);
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    ck_assert_msg(st.waits == 0 && st.wait_timeouts == 0, "%s: the next request waited (a slot left BUILDING)",
                  what);
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}

static bool clear_status(kpc_status s)
{
    /* what kpc.h lets these calls return when the system says no */
    return s == KPC_E_IO || s == KPC_E_NOMEM || s == KPC_E_SHM || s == KPC_E_UNAVAILABLE;
}

typedef struct sweep_figures {
    unsigned long calls, runs, ok, failed_clearly;
    unsigned long per_kind[KPC_SYS_COUNT];
} sweep_figures;

static void sweep(bool warm, bool sticky, const void *ref, size_t ref_size, sweep_figures *fig)
{
    /* how many calls a clean request makes */
    char *d = ts_tmpdir();
    void *code;
    size_t n;
    if (warm) {
        ck_assert_int_eq(one_request(d, &code, &n), KPC_OK);
        free(code);
    }
    kpc__sys_fault_nth(0, 0, false);
    ck_assert_int_eq(one_request(d, &code, &n), KPC_OK);
    free(code);
    unsigned long total = kpc__sys_calls();
    ck_assert_uint_gt(total, 0);
    ts_cleanup(d);
    fig->calls += total;
    for (unsigned long nth = 1; nth <= total + 1; nth++) {
        d = ts_tmpdir();
        if (warm) {
            ck_assert_int_eq(one_request(d, &code, &n), KPC_OK);
            free(code);
        }
        if (getenv("KPC_SWEEP_TRACE"))
            fprintf(stderr, "sweep: %s %s %lu/%lu\n", warm ? "warm" : "cold", sticky ? "sticky" : "once", nth,
                    total);
        ts_log_begin(KPC_LOG_ERROR); /* each fault is logged: keep the output readable */
        kpc__sys_fault_nth(nth, 0, sticky);
        kpc_status s = one_request(d, &code, &n);
        unsigned long at;
        enum kpc_sys_call kind = kpc__sys_failed_last(&at);
        kpc__sys_fault_nth(0, 0, false);
        char *flog = ts_log_end();
        if (getenv("KPC_SWEEP_TRACE"))
            fprintf(stderr, "sweep:   failed %s (call %lu): %s\n%s", kpc__sys_name(kind), at, kpc_status_str(s), flog);
        free(flog);
        char what[160];
        snprintf(what, sizeof what, "%s request, %s %s call %lu of %lu", warm ? "warm" : "cold",
                 sticky ? "every call from the" : "the", kpc__sys_name(kind), nth, total);
        if (s == KPC_OK) {
            ck_assert_msg(n == ref_size && memcmp(code, ref, n) == 0, "%s failed: a wrong object", what);
            fig->ok++;
        } else {
            ck_assert_msg(clear_status(s), "%s failed: %s is not a clear status for it", what,
                          kpc_status_str(s));
            fig->failed_clearly++;
        }
        if (kind < KPC_SYS_COUNT)
            fig->per_kind[kind]++;
        free(code);
        assert_nothing_left(d, ref, ref_size, what);
        fig->runs++;
        ts_cleanup(d);
    }
}

START_TEST(fail_every_call_of_a_request)
{
    size_t ref_size;
    void *ref = clean_compile(&ref_size);
    sweep_figures fig;
    memset(&fig, 0, sizeof fig);
    for (int warm = 0; warm < 2; warm++)
        for (int sticky = 0; sticky < 2; sticky++)
            sweep(warm, sticky, ref, ref_size, &fig);
    printf("fault sweep: %lu requests, each with one of its %lu system calls failing (cold and warm, "
           "once and from then on): %lu right objects, %lu clear statuses; failed calls by kind:",
           fig.runs, fig.calls, fig.ok, fig.failed_clearly);
    for (int k = 0; k < KPC_SYS_COUNT; k++)
        if (fig.per_kind[k])
            printf(" %s %lu", kpc__sys_name((enum kpc_sys_call)k), fig.per_kind[k]);
    printf("\n");
    fflush(stdout);
    free(ref);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {fail_every_call_of_a_request, NULL};
    return ts_main_case("faults", "sweep", 240, setup, teardown, tests);
}
