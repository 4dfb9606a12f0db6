/*
 * test_manifest_edges.c - the edges of the files a compile reads, through the real
 * compiler (hipRTC for gfx90a here, NVRTC on the NVIDIA build):
 *
 *   batch        kpc_program_get_many checks a held program's files as kpc_program_get
 *                does, and keeps no outcome that was stored nowhere
 *   identity     a -I directory that is a symlink switched to another tree whose header
 *                has the same size, mtime and ctime: another object (device and inode
 *                are part of a file's identity)
 *   shadowing    a header created in an earlier -I directory than the one the compile
 *                used: another object (the manifest recorded that lookup as missing)
 *   FIFOs        a header that is a FIFO fails the request at once, with its path, for
 *                the builder and its waiters; a FIFO where a record or a manifest should
 *                be is refused without blocking, and the request is built
 *   faults       each system call of a manifest hit fails in turn (the fault seam): the
 *                right object or a status, never the object of another entry
 *   carried      the outcome a manifest's record carries serves the hit without its own
 *                record, a cached compile error too; carried damaged, or not carried (as
 *                an older kpc wrote it), the own record serves it
 *
 * Every object is compared with a compile of the same request in an empty cache (the
 * bytes the compiler gives for the files as they are now). A file must be older than a
 * second for a compile's outcome to be cached (manifest.h): mf_settle() waits that long.
 */
#define _GNU_SOURCE
#include "manifest_support.h"
#include "support.h"
#include "core/manifest.h"
#include "storage/record.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void path_of(const char *rel, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", mf_work, rel);
}

#define KERNEL "extern \"C\" __global__ void k(real *x) { x[0] = x[1] * (real)3 + x[2]; }\n"

/* A request that includes h.h through the -I options given (absolute paths). */
static kpc_source request(const char **opts, size_t n)
{
    kpc_source src = ts_src("#include \"h.h\"\n" KERNEL, "edges.hip");
    src.options = opts;
    src.num_options = n;
    return src;
}

/* The object a compile of src in an empty cache gives now (malloc'd). */
static void *fresh(const kpc_source *src, size_t *size)
{
    char *tmp = strdup(getenv("TMPDIR")); /* ts_tmpdir moves it into the dir it makes */
    char *other = ts_tmpdir();
    kpc_cache *c = ts_open(other, 0, 0);
    kpc_context *ctx = ts_context(c);
    void *code = ts_get_code(ctx, src, size);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_cleanup(other);
    setenv("TMPDIR", tmp, 1);
    free(tmp);
    return code;
}

static bool same(const void *a, size_t na, const void *b, size_t nb)
{
    return na == nb && memcmp(a, b, na) == 0;
}

/* One get of src through a new handle on mf_dir: its code (malloc'd), and the handle's
 * counts in *st. */
static void *get_in_new_handle(const kpc_source *src, size_t *size, kpc_stats *st)
{
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    void *code = ts_get_code(ctx, src, size);
    kpc_stats_get(c, st);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return code;
}

/* One kpc_program_get_many of src alone; a malloc'd copy of its code. */
static void *get_many_code(kpc_context *ctx, const kpc_source *src, size_t *size)
{
    kpc_program *p = NULL;
    kpc_status st = KPC_E_INVALID;
    kpc_status r = kpc_program_get_many(ctx, src, 1, &p, &st);
    ck_assert_msg(r == KPC_OK && st == KPC_OK, "get_many: %s: %s", kpc_status_str(st), kpc_last_log());
    const void *code = kpc_program_code(p, size);
    void *copy = malloc(*size);
    memcpy(copy, code, *size);
    kpc_program_release(p);
    return copy;
}

/* ---- kpc_program_get_many: the same checks as kpc_program_get ------------------------ */
START_TEST(batch_sees_edited_header)
{
    char inc[4200], opt[4300];
    path_of("inc", inc, sizeof inc);
    snprintf(opt, sizeof opt, "-I%s", inc);
    const char *opts[] = {opt};
    kpc_source src = request(opts, 1);
    mf_put("inc/h.h", "typedef float real;\n");
    mf_settle();
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    size_t n1, n2, n3, nf;
    void *first = get_many_code(ctx, &src, &n1);

    /* edited: the program the map holds is checked, and the new bytes come back */
    mf_put("inc/h.h", "typedef double real;\n");
    void *second = get_many_code(ctx, &src, &n2);
    ck_assert_msg(!same(first, n1, second, n2), "get_many returned the object of the old header");
    void *want = fresh(&src, &nf);
    ck_assert(same(second, n2, want, nf));
    free(want);

    /* that outcome was stored nowhere (the header changed within the race window): the
     * map does not keep it either, so the next edit is seen too */
    mf_put("inc/h.h", "typedef int real;\n");
    void *third = get_many_code(ctx, &src, &n3);
    ck_assert_msg(!same(second, n2, third, n3), "get_many returned a remembered transient object");
    want = fresh(&src, &nf);
    ck_assert(same(third, n3, want, nf));
    free(want);
    free(first);
    free(second);
    free(third);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* ---- a switched symlink: same size and times, another inode ---------------------------- */
/* Make <tree>/h.h in two fresh trees with text a and b (same length) and one mtime; true
 * when the kernel gave both the same ctime (file times come from a coarse clock, so two
 * updates made back to back usually share it; the files are new, so nothing has asked
 * for a finer one). */
static bool twin_headers(const char *t1, const char *t2, const char *a, const char *b)
{
    char p1[4300], p2[4300];
    snprintf(p1, sizeof p1, "%s/h.h", t1);
    snprintf(p2, sizeof p2, "%s/h.h", t2);
    ck_assert_int_eq(kpc__mkdir_p(t1, 0700), 0);
    ck_assert_int_eq(kpc__mkdir_p(t2, 0700), 0);
    ts_write_file(p1, a, strlen(a));
    ts_write_file(p2, b, strlen(b));
    struct timespec times[2] = {{0, UTIME_OMIT}, {time(NULL) - 60, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, p1, times, 0), 0);
    ck_assert_int_eq(utimensat(AT_FDCWD, p2, times, 0), 0);
    struct stat s1, s2;
    ck_assert_int_eq(stat(p1, &s1), 0);
    ck_assert_int_eq(stat(p2, &s2), 0);
    return s1.st_size == s2.st_size && s1.st_mtim.tv_sec == s2.st_mtim.tv_sec &&
           s1.st_mtim.tv_nsec == s2.st_mtim.tv_nsec && s1.st_ctim.tv_sec == s2.st_ctim.tv_sec &&
           s1.st_ctim.tv_nsec == s2.st_ctim.tv_nsec;
}

START_TEST(switched_symlink_same_times)
{
    char t1[4200], t2[4200], link[4200], opt[4300];
    bool twins = false;
    for (int attempt = 0; attempt < 50 && !twins; attempt++) {
        snprintf(t1, sizeof t1, "%s/rocm-a%d/include", mf_work, attempt);
        snprintf(t2, sizeof t2, "%s/rocm-b%d/include", mf_work, attempt);
        twins = twin_headers(t1, t2, "typedef float  real;\n", "typedef double real;\n");
    }
    if (!twins) {
        printf("switched_symlink_same_times: skipped: this file system never gave two files the "
               "same ctime\n");
        return;
    }
    path_of("rocm", link, sizeof link);
    ck_assert_int_eq(symlink(t1, link), 0);
    snprintf(opt, sizeof opt, "-I%s", link);
    const char *opts[] = {opt};
    kpc_source src = request(opts, 1);
    mf_settle(); /* the ctimes are now; the outcome must be cached */
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    size_t n1, n2, nf;
    void *before = ts_get_code(ctx, &src, &n1);
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.builds, 1);

    /* the module switch: the link now names the other tree */
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.new", link);
    ck_assert_int_eq(symlink(t2, tmp), 0);
    ck_assert_int_eq(rename(tmp, link), 0);
    /* in the process that holds the program, and in a new cache handle (the manifest) */
    void *held = ts_get_code(ctx, &src, &n2);
    ck_assert_msg(!same(before, n1, held, n2), "a held program survived the switch");
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    c = ts_open(mf_dir, 0, 0);
    ctx = ts_context(c);
    size_t n3;
    void *after = ts_get_code(ctx, &src, &n3);
    ck_assert_msg(!same(before, n1, after, n3), "the manifest matched the other tree's header");
    void *want = fresh(&src, &nf);
    ck_assert(same(after, n3, want, nf));
    ck_assert(same(held, n2, want, nf));
    free(want);
    free(held);
    free(before);
    free(after);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* ---- a shadowing header in an earlier -I directory ---------------------------------- */
/* A request searching <work>/d1 then <work>/d2 (the options written into o1 and o2, which
 * the caller's opts point at), h.h in d2 only, old enough to be cached. */
static kpc_source two_dirs(const char *d1, const char *d2, char o1[4300], char o2[4300], const char *h)
{
    char p1[4200], p2[4200], rel[256];
    path_of(d1, p1, sizeof p1);
    path_of(d2, p2, sizeof p2);
    snprintf(o1, 4300, "-I%s", p1);
    snprintf(o2, 4300, "-I%s", p2);
    snprintf(rel, sizeof rel, "%s/other.h", d1);
    mf_put(rel, "\n");
    snprintf(rel, sizeof rel, "%s/h.h", d2);
    mf_put(rel, h);
    mf_settle();
    static const char *opts[2];
    opts[0] = o1;
    opts[1] = o2;
    return request(opts, 2);
}

START_TEST(shadowing_header)
{
    char o1[4300], o2[4300];
    kpc_source src = two_dirs("first", "second", o1, o2, "typedef float real;\n");
    size_t n1, n2, nf;
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    void *before = ts_get_code(ctx, &src, &n1);

    mf_put("first/h.h", "typedef double real;\n"); /* found first from now on */
    void *held = ts_get_code(ctx, &src, &n2);
    ck_assert_msg(!same(before, n1, held, n2), "a held program ignored the shadowing header");
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    mf_settle();
    c = ts_open(mf_dir, 0, 0);
    ctx = ts_context(c);
    size_t n3;
    void *after = ts_get_code(ctx, &src, &n3);
    ck_assert_msg(!same(before, n1, after, n3), "the manifest ignored the shadowing header");
    void *want = fresh(&src, &nf);
    ck_assert(same(after, n3, want, nf));
    free(want);
    /* and gone again: the first object, from the manifest, without a compile */
    char shadow[4200];
    path_of("first/h.h", shadow, sizeof shadow);
    ck_assert_int_eq(unlink(shadow), 0);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    size_t n4;
    kpc_stats st;
    void *again = get_in_new_handle(&src, &n4, &st);
    ck_assert(same(before, n1, again, n4));
    ck_assert_uint_eq(st.builds, 0);
    free(again);
    free(before);
    free(held);
    free(after);
}
END_TEST

/* ---- FIFOs --------------------------------------------------------------------------- */
typedef struct fifo_job {
    kpc_source src;
    int *status; /* shared: one per child */
} fifo_job;

static int fifo_child(int i, void *arg)
{
    fifo_job *j = arg;
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_program *p = NULL;
    j->status[i] = kpc_program_get(ctx, &j->src, &p);
    kpc_program_release(p);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return 0;
}

START_TEST(fifo_header_refused)
{
    char inc[4200], fifo[4300], opt[4300];
    path_of("inc", inc, sizeof inc);
    ck_assert_int_eq(kpc__mkdir_p(inc, 0700), 0);
    snprintf(fifo, sizeof fifo, "%s/h.h", inc);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    snprintf(opt, sizeof opt, "-I%s", inc);
    const char *opts[] = {opt};
    fifo_job j = {.src = request(opts, 1)};
    j.status = mmap(NULL, 2 * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(j.status, MAP_FAILED);
    /* two processes ask at once: the builder and its waiter both come back, refused (a
     * hang here ends in the test's timeout) */
    ts_log_begin(KPC_LOG_ERROR);
    ck_assert_int_eq(ts_run_children(2, fifo_child, &j), 2);
    char *log = ts_log_end();
    ck_assert_int_eq(j.status[0], KPC_E_INVALID);
    ck_assert_int_eq(j.status[1], KPC_E_INVALID);
    ck_assert_msg(strstr(log, fifo) != NULL && strstr(log, "not a regular file") != NULL, "log: %s", log);
    free(log);
    munmap(j.status, 2 * sizeof(int));
    /* a regular header there now: built */
    ck_assert_int_eq(unlink(fifo), 0);
    mf_put("inc/h.h", "typedef float real;\n");
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    size_t n;
    free(ts_get_code(ctx, &j.src, &n));
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

START_TEST(fifo_record_and_manifest)
{
    kpc_source src = ts_src(ts_kernel_source(5), "fifo_record.hip");
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_key key;
    ts_key(ctx, &src, &key);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    const char *exts[] = {"co", "mf"};
    for (size_t i = 0; i < 2; i++) {
        char path[4300], parent[4300];
        c = ts_open(mf_dir, 0, 0);
        ctx = ts_context(c);
        ts_record_path(mf_dir, ts_target(), &key, exts[i], path, sizeof path);
        snprintf(parent, sizeof parent, "%s", path);
        *strrchr(parent, '/') = '\0';
        ck_assert_int_eq(kpc__mkdir_p(parent, 0700), 0);
        unlink(path);
        ck_assert_int_eq(mkfifo(path, 0600), 0);
        /* the request is answered (built), never blocked on the FIFO */
        size_t n;
        void *code = ts_get_code(ctx, &src, &n);
        ck_assert(ts_is_code_object(code, n));
        free(code);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
    }
}
END_TEST

/* ---- every system call of a manifest hit, failing in turn ------------------------------ */
START_TEST(fail_every_call_of_a_manifest_hit)
{
    char oa[4300], ob[4300];
    kpc_source src = two_dirs("a", "b", oa, ob, "typedef double real;\n");
    size_t n;
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    free(ts_get_code(ctx, &src, &n)); /* the double entry */
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    mf_put("b/h.h", "typedef float  real;\n"); /* same size */
    mf_settle();
    size_t want_size;
    void *want = fresh(&src, &want_size);
    c = ts_open(mf_dir, 0, 0);
    ctx = ts_context(c);
    free(ts_get_code(ctx, &src, &n)); /* the float entry: now two, float first */
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    /* each call of a new handle's get fails once: the float object or a status, never the
     * double one (a check that cannot be made is a mismatch) */
    unsigned long total = 0, ok = 0;
    for (unsigned long nth = 1;; nth++) {
        c = ts_open(mf_dir, 0, 0);
        ctx = ts_context(c);
        ts_log_begin(KPC_LOG_ERROR);
        kpc__sys_fault_nth(nth, 0, false);
        kpc_program *p = NULL;
        kpc_status st = kpc_program_get(ctx, &src, &p);
        unsigned long at;
        enum kpc_sys_call kind = kpc__sys_failed_last(&at);
        total = kpc__sys_calls();
        kpc__sys_fault_nth(0, 0, false);
        free(ts_log_end());
        if (st == KPC_OK) {
            size_t size;
            const void *code = kpc_program_code(p, &size);
            ck_assert_msg(same(code, size, want, want_size), "%s call %lu failing: a wrong object",
                          kpc__sys_name(kind), nth);
            ok++;
        }
        kpc_program_release(p);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
        if (kind == KPC_SYS_COUNT)
            break; /* past the last call: nothing failed */
    }
    ck_assert_uint_gt(total, 3);
    printf("manifest hit fault sweep: %lu calls, each failing once: %lu right objects, the rest a "
           "status\n", total, ok);
    free(want);
}
END_TEST

/* ---- the outcome a manifest's record carries --------------------------------------- */
enum carried_form { CARRIED_AS_WRITTEN, CARRIED_DAMAGED, CARRIED_NONE };

/* The manifest's record (bytes whole, size of them) written back to path in form: as it
 * was, its carried record with its last byte flipped (the manifest's own checksum made
 * again, so only the carried record's check can see it), or without the carried part. */
static void put_manifest(const char *path, const uint8_t *bytes, size_t size, enum carried_form form)
{
    kpc_record r;
    ck_assert_ptr_null(kpc_record_decode_header(bytes, size, &r));
    ck_assert_uint_gt(r.names_size, 0);
    const uint8_t *first = bytes + KPC_RECORD_HEADER;
    uint8_t *carried = malloc(r.names_size);
    memcpy(carried, first + r.code_size, r.names_size);
    if (form == CARRIED_DAMAGED)
        carried[r.names_size - 1] ^= 0xff;
    if (form == CARRIED_NONE)
        r.names_size = 0;
    size_t n = KPC_RECORD_HEADER + r.code_size + r.names_size;
    uint8_t *out = malloc(n);
    kpc_record_header(out, &r, first, carried);
    memcpy(out + KPC_RECORD_HEADER, first, r.code_size);
    memcpy(out + KPC_RECORD_HEADER + r.code_size, carried, r.names_size);
    ts_write_file(path, out, n);
    free(out);
    free(carried);
}

/* The manifest's record of src in mf_dir (its bytes whole, malloc'd, *size of them; its
 * file in mf) and the file of its newest entry's own record (ext: "co" or "log") in own,
 * which must be there. */
static uint8_t *manifest_of(const kpc_source *src, char mf[4300], size_t *size, const char *ext,
                            char own[4300])
{
    kpc_cache *c = ts_open(mf_dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_key key;
    ts_key(ctx, src, &key);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_record_path(mf_dir, ts_target(), &key, "mf", mf, 4300);
    uint8_t *bytes = ts_read_file(mf, size);
    kpc_record r;
    ck_assert_ptr_null(kpc_record_decode_header(bytes, *size, &r));
    kpc_manifest m;
    ck_assert_int_eq(kpc_manifest_decode(bytes + KPC_RECORD_HEADER, r.code_size, &m), KPC_OK);
    ts_record_path(mf_dir, ts_target(), &m.entries[0].object, ext, own, 4300);
    kpc_manifest_free(&m);
    struct stat sb;
    ck_assert_int_eq(stat(own, &sb), 0);
    return bytes;
}

/* A request for h.h through -I<work>/<dir>. */
static kpc_source request_in(const char *dir, char inc[4300], const char *opts[1])
{
    snprintf(inc, 4300, "-I%s/%s", mf_work, dir);
    opts[0] = inc;
    return request(opts, 1);
}

START_TEST(carried_outcome)
{
    mf_put("c/h.h", "typedef float real;\n");
    mf_settle();
    char inc[4300];
    const char *opts[1];
    kpc_source src = request_in("c", inc, opts);
    size_t want_size;
    kpc_stats first;
    void *want = get_in_new_handle(&src, &want_size, &first);
    ck_assert_uint_eq(first.builds, 1);
    /* the manifest's record, and the object's own beside it */
    char mf[4300], co[4300];
    size_t mf_size;
    uint8_t *written = manifest_of(&src, mf, &mf_size, "co", co);
    /* each form in a new handle: the same object, from disk, nothing built; as written,
     * with the object's own record gone first */
    const enum carried_form forms[] = {CARRIED_DAMAGED, CARRIED_NONE, CARRIED_AS_WRITTEN};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        put_manifest(mf, written, mf_size, forms[i]);
        if (forms[i] == CARRIED_AS_WRITTEN)
            ck_assert_int_eq(unlink(co), 0);
        size_t n;
        kpc_stats st;
        void *code = get_in_new_handle(&src, &n, &st);
        ck_assert_msg(same(code, n, want, want_size), "form %zu: another object", i);
        ck_assert_uint_eq(st.builds, 0);
        ck_assert_uint_eq(st.disk_hits, 1);
        free(code);
    }
    /* neither the own record nor the carried one: built again (what the forms above
     * would have come to without the record each was served from) */
    put_manifest(mf, written, mf_size, CARRIED_NONE);
    size_t n;
    kpc_stats st;
    free(get_in_new_handle(&src, &n, &st));
    ck_assert_uint_eq(st.builds, 1);
    free(written);
    free(want);
}
END_TEST

/* A compile error the header gave, cached behind the manifest: served from the record
 * the manifest carries once the log's own record is gone, its log the same. */
START_TEST(carried_compile_error)
{
    mf_put("e/h.h", "typedef float real\n"); /* no ';': the compile fails after reading it */
    mf_settle();
    char inc[4300];
    const char *opts[1];
    kpc_source src = request_in("e", inc, opts);
    char *first_log = NULL;
    for (int round = 0; round < 2; round++) {
        if (round == 1) { /* the log's own record gone */
            char mf[4300], log[4300];
            size_t size;
            free(manifest_of(&src, mf, &size, "log", log));
            ck_assert_int_eq(unlink(log), 0);
        }
        kpc_cache *c = ts_open(mf_dir, 0, 0);
        kpc_context *ctx = ts_context(c);
        kpc_program *p = NULL;
        ck_assert_int_eq(kpc_program_get(ctx, &src, &p), KPC_E_COMPILE);
        ck_assert_ptr_null(p);
        if (round == 0)
            first_log = strdup(kpc_last_log());
        else
            ck_assert_str_eq(kpc_last_log(), first_log);
        kpc_stats st;
        kpc_stats_get(c, &st);
        ck_assert_uint_eq(st.builds + st.build_failures, round == 0 ? 1 : 0);
        ck_assert_uint_eq(st.cached_failures, round == 0 ? 0 : 1);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
    }
    /* hipRTC names the header, NVRTC the source's line the missing ';' reaches */
    ck_assert_msg(strstr(first_log, "error") != NULL, "log: %s", first_log);
    free(first_log);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("manifest_edges");
    TCase *tc = tcase_create("manifest_edges");
    tcase_add_checked_fixture(tc, mf_setup, mf_teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, batch_sees_edited_header);
    tcase_add_test(tc, switched_symlink_same_times);
    tcase_add_test(tc, shadowing_header);
    tcase_add_test(tc, fifo_header_refused);
    tcase_add_test(tc, fifo_record_and_manifest);
    tcase_add_test(tc, fail_every_call_of_a_manifest_hit);
    tcase_add_test(tc, carried_outcome);
    tcase_add_test(tc, carried_compile_error);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ts_run_suite(suite());
}
