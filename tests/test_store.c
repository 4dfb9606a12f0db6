/*
 * test_store.c - the disk tree (level 3) through real hipRTC compiles: a second process
 * compiles nothing; every kind of damage to a cached file is detected, removed, logged
 * and rebuilt; a full disk, a read-only tree, a directory another user owns and missing
 * parents are survived; the size limit holds with LRU order; a pruner racing readers
 * never hands out a torn object; KPC_DISABLE and KPC_NO_DISK; `kpc prune --stale`.
 * The fake platform is used only where hundreds of objects are needed (size limit,
 * prune race, the every-length truncation loop through the whole API).
 * The tool's exit codes and JSON are in test_tool.c.
 */
#define _GNU_SOURCE
#include "support.h"
#include "private_mounts.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static char *dir;
static void setup(void) { dir = ts_tmpdir(); }
static void teardown(void) { ts_cleanup(dir); }

/* A check inside a forked child: report and exit nonzero (Check's asserts belong to the
 * test process). */
#define CHILD_REQUIRE(cond)                                                                    \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: child %d: check failed: %s\n", __FILE__, __LINE__,         \
                    (int)getpid(), #cond);                                                     \
            _exit(1);                                                                          \
        }                                                                                      \
    } while (0)

static pid_t spawn(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(fn(arg));
    return pid;
}

static int reap(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void *shared_mem(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    return p;
}

static kpc_stats stats_of(kpc_cache *c)
{
    kpc_stats s;
    ck_assert_int_eq(kpc_stats_get(c, &s), KPC_OK);
    return s;
}

static kpc_cache *open_limits(const char *d, uint64_t max_bytes, size_t mem_max)
{
    /* KPC_NO_SOURCES: records of an exact size (no request section) */
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = d, .disk_max_bytes = max_bytes,
                      .mem_max_programs = mem_max, .flags = KPC_NO_SOURCES};
    kpc_cache *c = NULL;
    ck_assert_int_eq(kpc_cache_open(&cfg, &c), KPC_OK);
    return c;
}

static double ms_since(uint64_t t0) { return (double)(kpc__now_ns() - t0) / 1e6; }

static bool is_absent(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) != 0 && errno == ENOENT;
}

/* The record at key must be a valid regular file holding exactly code. */
static void assert_record_valid(const char *d, const kpc_key *key, const void *code, size_t size)
{
    char path[4400];
    ts_record_path(d, ts_target(), key, "co", path, sizeof path);
    struct stat sb;
    ck_assert_msg(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode), "%s is not a regular file", path);
    kpc_store *st;
    ck_assert_int_eq(kpc_store_open(d, 1ull << 40, &st), KPC_OK);
    kpc_record rec;
    kpc_status s = kpc_store_read(st, key, ts_target(), KPC_RECORD_CODE, &rec);
    ck_assert_msg(s == KPC_OK, "the record %s does not read back: %s", path, kpc_status_str(s));
    ck_assert_uint_eq(rec.code_size, size);
    ck_assert(memcmp(rec.payload, code, size) == 0);
    kpc_record_free(&rec);
    kpc_store_close(st);
}

/* ---- real sources -------------------------------------------------------------------- */
static const char *const tmpl_code =
    "template<typename T> __global__ void scale(T *a, T f) { a[threadIdx.x] *= f; }\n";
static const char *const tmpl_exprs[] = {"scale<float>"};

static kpc_source real_src(int i)
{
    if (i == 2) {
        kpc_source s = ts_src(tmpl_code, "scale.hip");
        s.name_expressions = tmpl_exprs;
        s.num_name_expressions = 1;
        return s;
    }
    return ts_src(ts_kernel_source(i), "k.hip");
}

/* =====================================================================================
 * A second process asks for the same sources: zero compiles, identical bytes.
 * ===================================================================================== */
#define SHARE_N 3
typedef struct share_run {
    size_t size[SHARE_N];
    unsigned char code[SHARE_N][32768];
    char lowered[256];
    uint64_t builds, disk_hits, mem_misses;
    double open_ms, ctx_ms, get_ms[SHARE_N];
    int compiler_loaded;
} share_run;

static bool compiler_loaded(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[1024];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, "libamdhip64") != NULL || strstr(line, "libnvrtc") != NULL;
    if (f)
        fclose(f);
    return found;
}

static int share_child(void *arg)
{
    share_run *r = arg;
    uint64_t t0 = kpc__now_ns();
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir};
    kpc_cache *c = NULL;
    CHILD_REQUIRE(kpc_cache_open(&cfg, &c) == KPC_OK);
    r->open_ms = ms_since(t0);
    t0 = kpc__now_ns();
    kpc_context *ctx = NULL;
    CHILD_REQUIRE(kpc_context_create_for_target(c, ts_target(), &ctx) == KPC_OK);
    r->ctx_ms = ms_since(t0);
    for (int i = 0; i < SHARE_N; i++) {
        kpc_source src = real_src(i);
        kpc_program *p = NULL;
        t0 = kpc__now_ns();
        CHILD_REQUIRE(kpc_program_get(ctx, &src, &p) == KPC_OK);
        r->get_ms[i] = ms_since(t0);
        size_t size;
        const void *code = kpc_program_code(p, &size);
        CHILD_REQUIRE(size <= sizeof r->code[i]);
        memcpy(r->code[i], code, size);
        r->size[i] = size;
        if (i == 2) {
            const char *low = kpc_program_lowered_name(p, tmpl_exprs[0]);
            CHILD_REQUIRE(low != NULL);
            snprintf(r->lowered, sizeof r->lowered, "%s", low);
        }
        kpc_program_release(p);
    }
    kpc_stats st;
    kpc_stats_get(c, &st);
    r->builds = st.builds;
    r->disk_hits = st.disk_hits;
    r->mem_misses = st.mem_misses;
    r->compiler_loaded = compiler_loaded();
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return 0;
}

START_TEST(second_process_compiles_nothing)
{
    /* the test process itself never loads the compiler: both runs are fresh processes */
    share_run *runs = shared_mem(2 * sizeof(share_run));
    ck_assert_int_eq(reap(spawn(share_child, &runs[0])), 0);
    ck_assert_int_eq(reap(spawn(share_child, &runs[1])), 0);
    ck_assert_uint_eq(runs[0].builds, SHARE_N);
    ck_assert_uint_eq(runs[0].disk_hits, 0);
    ck_assert_uint_eq(runs[1].builds, 0);
    ck_assert_uint_eq(runs[1].disk_hits, SHARE_N);
    ck_assert_uint_eq(runs[1].mem_misses, SHARE_N);
    for (int i = 0; i < SHARE_N; i++) {
        ck_assert_msg(ts_is_code_object(runs[0].code[i], runs[0].size[i]), "source %d: no code object", i);
        ck_assert_uint_eq(runs[0].size[i], runs[1].size[i]);
        ck_assert_msg(memcmp(runs[0].code[i], runs[1].code[i], runs[0].size[i]) == 0,
                      "source %d: the second process got other bytes", i);
    }
    ck_assert_str_ne(runs[0].lowered, "");
    ck_assert_str_eq(runs[0].lowered, runs[1].lowered);
    /* the design promise behind the numbers: a warm process never loads the compiler */
    ck_assert_msg(!runs[1].compiler_loaded, "the warm process loaded the compiler library");
    double compile = 0, hit = 0;
    for (int i = 0; i < SHARE_N; i++)
        compile += runs[0].get_ms[i], hit += runs[1].get_ms[i];
    printf("disk hit in a new process: %.3f ms per object (open %.3f ms + context %.3f ms once), "
           "against %.1f ms per compile it saves (first process: open %.3f ms, context %.3f ms)\n",
           hit / SHARE_N, runs[1].open_ms, runs[1].ctx_ms, compile / SHARE_N, runs[0].open_ms,
           runs[0].ctx_ms);
    for (int i = 0; i < SHARE_N; i++)
        printf("  source %d: compile %.1f ms, disk hit %.3f ms, %zu bytes\n", i, runs[0].get_ms[i],
               runs[1].get_ms[i], runs[0].size[i]);
    munmap(runs, 2 * sizeof(share_run));
}
END_TEST

/* =====================================================================================
 * Damage.
 * ===================================================================================== */
typedef struct cached_obj {
    kpc_key key;
    char path[4400];
    void *code;
    size_t code_size;
    void *file; /* the pristine record file */
    size_t file_size;
} cached_obj;

/* Build src in a fresh cache handle and remember its record. */
static void cache_obj(const char *d, const kpc_source *src, cached_obj *o)
{
    kpc_cache *c = ts_open(d, 0, 0);
    kpc_context *ctx = ts_context(c);
    ts_key(ctx, src, &o->key);
    o->code = ts_get_code(ctx, src, &o->code_size);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_record_path(d, ts_target(), &o->key, "co", o->path, sizeof o->path);
    o->file = ts_read_file(o->path, &o->file_size);
    ck_assert_ptr_nonnull(o->file);
    ck_assert_uint_gt(o->file_size, 256 + o->code_size);
}

static void remove_any(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return;
    if (S_ISDIR(sb.st_mode))
        ts_rm_rf(path);
    else
        ck_assert_int_eq(unlink(path), 0);
}

/* After damage: a get in a fresh cache handle succeeds with the right bytes, compiles
 * exactly once, logs `expect`, and leaves a valid record behind. */
static void expect_rebuilt(const char *d, const kpc_source *src, const cached_obj *o, const char *expect)
{
    kpc_cache *c = ts_open(d, 0, 0);
    kpc_context *ctx = ts_context(c);
    ts_log_begin(KPC_LOG_WARN);
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, src, &p);
    char *log = ts_log_end();
    ck_assert_msg(s == KPC_OK, "%s: get failed: %s", expect, kpc_status_str(s));
    size_t size;
    const void *code = kpc_program_code(p, &size);
    ck_assert_uint_eq(size, o->code_size);
    ck_assert_msg(memcmp(code, o->code, size) == 0, "%s: wrong bytes", expect);
    kpc_program_release(p);
    kpc_stats st = stats_of(c);
    ck_assert_msg(st.builds == 1 && st.disk_hits == 0, "%s: builds %llu, disk hits %llu", expect,
                  (unsigned long long)st.builds, (unsigned long long)st.disk_hits);
    ck_assert_msg(strstr(log, expect) != NULL, "the log does not say \"%s\":\n%s", expect, log);
    ck_assert_msg(strstr(log, o->path) != NULL, "the log does not name %s:\n%s", o->path, log);
    free(log);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    assert_record_valid(d, &o->key, o->code, o->code_size);
}

START_TEST(truncated_at_every_length_real_object)
{
    kpc_source src = real_src(0);
    cached_obj o;
    cache_obj(dir, &src, &o);
    /* every length, at the store: the check must refuse and remove each one */
    kpc_store *st;
    ck_assert_int_eq(kpc_store_open(dir, 1ull << 40, &st), KPC_OK);
    ts_log_begin(KPC_LOG_WARN);
    for (size_t len = 0; len < o.file_size; len++) {
        ts_write_file(o.path, o.file, len);
        kpc_record rec;
        kpc_status s = kpc_store_read(st, &o.key, ts_target(), KPC_RECORD_CODE, &rec);
        if (s != KPC_E_CORRUPT || !is_absent(o.path)) {
            free(ts_log_end());
            ck_abort_msg("truncated to %zu of %zu bytes: %s, file %s", len, o.file_size,
                         kpc_status_str(s), is_absent(o.path) ? "removed" : "left in place");
        }
    }
    char *log = ts_log_end();
    size_t lines = 0;
    for (const char *p = log; (p = strstr(p, "damaged cache file")) != NULL; p++)
        lines++;
    ck_assert_uint_eq(lines, o.file_size); /* one log line per damaged file */
    free(log);
    ts_write_file(o.path, o.file, o.file_size); /* the whole file still reads */
    kpc_record rec;
    ck_assert_int_eq(kpc_store_read(st, &o.key, ts_target(), KPC_RECORD_CODE, &rec), KPC_OK);
    kpc_record_free(&rec);
    kpc_store_close(st);

    /* a handful of lengths through the whole request path, rebuilt by hipRTC */
    const size_t lens[] = {0, 1, 8, 255, 256, 257, 256 + o.code_size / 2, o.file_size - 1};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        ts_write_file(o.path, o.file, lens[i]);
        expect_rebuilt(dir, &src, &o, "damaged cache file");
    }
    free(o.code);
    free(o.file);
}
END_TEST

static char fake_code[320][48];
static kpc_source fake_src(int i)
{
    snprintf(fake_code[i], sizeof fake_code[i], "fake source %d\n", i);
    return ts_src(fake_code[i], "fake.hip");
}

START_TEST(truncated_at_every_length_whole_path)
{
    /* the every-length loop through cache, index, store and rebuild: fake compiles */
    ts_fake_install();
    kpc_source src = fake_src(0);
    cached_obj o;
    cache_obj(dir, &src, &o);
    ck_assert_uint_eq(ts_fake_compiles(), 1);
    kpc__log_level = 0; /* quiet: hundreds of expected warnings */
    for (size_t len = 0; len < o.file_size; len++) {
        ts_write_file(o.path, o.file, len);
        kpc_cache *c = ts_open(dir, 0, 0);
        kpc_context *ctx = ts_context(c);
        size_t size;
        void *code = ts_get_code(ctx, &src, &size);
        ck_assert_msg(size == o.code_size && memcmp(code, o.code, size) == 0, "length %zu: wrong bytes", len);
        free(code);
        kpc_stats s = stats_of(c);
        ck_assert_msg(s.builds == 1 && s.disk_hits == 0, "length %zu: builds %llu disk hits %llu", len,
                      (unsigned long long)s.builds, (unsigned long long)s.disk_hits);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
        ck_assert_uint_eq(ts_fake_compiles(), len + 2);
        size_t fsize;
        void *file = ts_read_file(o.path, &fsize);
        ck_assert_msg(file != NULL && fsize == o.file_size, "length %zu: not rebuilt whole", len);
        /* the same record but for its creation time (header bytes 72..79 and the header
         * checksum 248..255) */
        ck_assert(memcmp(file, o.file, 72) == 0);
        ck_assert(memcmp((char *)file + 80, (char *)o.file + 80, 248 - 80) == 0);
        ck_assert(memcmp((char *)file + 256, (char *)o.file + 256, fsize - 256) == 0);
        free(file);
    }
    free(o.code);
    free(o.file);
}
END_TEST

static void le32_put(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void reseal_header(unsigned char *h)
{
    uint64_t sum = XXH3_64bits(h, 248);
    for (int i = 0; i < 8; i++)
        h[248 + i] = (unsigned char)(sum >> (8 * i));
}

START_TEST(every_damage_kind_is_rebuilt)
{
    kpc_source src = real_src(1), other_src = real_src(3);
    cached_obj o, other;
    cache_obj(dir, &src, &o);
    cache_obj(dir, &other_src, &other);
    unsigned char *buf = malloc(o.file_size + 1);
    char copy_path[4500];
    snprintf(copy_path, sizeof copy_path, "%s.pristine-copy", o.path);

    /* one byte flipped: in every header field, and in the payload (code, names) */
    const size_t header_offsets[] = {0, 7, 8, 12, 16, 31, 32, 36, 40, 48, 56, 64, 72, 80, 144, 224, 240, 248, 255};
    const size_t payload_offsets[] = {256, 256 + o.code_size / 2, 256 + o.code_size - 1, 256 + o.code_size,
                                      o.file_size - 1};
    for (size_t i = 0; i < sizeof header_offsets / sizeof header_offsets[0]; i++) {
        memcpy(buf, o.file, o.file_size);
        buf[header_offsets[i]] ^= 0x20;
        ts_write_file(o.path, buf, o.file_size);
        expect_rebuilt(dir, &src, &o, "damaged cache file");
    }
    for (size_t i = 0; i < sizeof payload_offsets / sizeof payload_offsets[0]; i++) {
        memcpy(buf, o.file, o.file_size);
        buf[payload_offsets[i]] ^= 0x01;
        ts_write_file(o.path, buf, o.file_size);
        expect_rebuilt(dir, &src, &o, "payload checksum mismatch");
    }
    /* another format version, with a header that is otherwise sound */
    memcpy(buf, o.file, o.file_size);
    le32_put(buf + 8, 4); /* 1 to 3 are read */
    reseal_header(buf);
    ts_write_file(o.path, buf, o.file_size);
    expect_rebuilt(dir, &src, &o, "unsupported format version");
    /* a sound record of another target, and one of another key, under this name */
    memcpy(buf, o.file, o.file_size);
    memset(buf + 80, 0, 64);
    memcpy(buf + 80, ts_target2(), strlen(ts_target2()));
    reseal_header(buf);
    ts_write_file(o.path, buf, o.file_size);
    expect_rebuilt(dir, &src, &o, "the target does not match");
    ts_write_file(o.path, other.file, other.file_size);
    expect_rebuilt(dir, &src, &o, "the key does not match");
    /* trailing bytes */
    memcpy(buf, o.file, o.file_size);
    buf[o.file_size] = 0;
    ts_write_file(o.path, buf, o.file_size + 1);
    expect_rebuilt(dir, &src, &o, "trailing bytes");
    /* foreign files: random bytes of the same size, and a short text */
    srand(42);
    for (size_t i = 0; i < o.file_size; i++)
        buf[i] = (unsigned char)rand();
    ts_write_file(o.path, buf, o.file_size);
    expect_rebuilt(dir, &src, &o, "bad magic");
    /* a text file longer than a header */
    memset(buf, '.', 256 + 34);
    memcpy(buf, "#!/bin/sh\necho not a code object\n", 33);
    ts_write_file(o.path, buf, 256 + 34);
    expect_rebuilt(dir, &src, &o, "bad magic");
    /* zero length */
    ts_write_file(o.path, "", 0);
    expect_rebuilt(dir, &src, &o, "shorter than a header");
    /* an empty directory where the file should be */
    remove_any(o.path);
    ck_assert_int_eq(mkdir(o.path, 0700), 0);
    expect_rebuilt(dir, &src, &o, "not a regular file");
    /* a FIFO (would block a plain open) */
    remove_any(o.path);
    ck_assert_int_eq(mkfifo(o.path, 0600), 0);
    expect_rebuilt(dir, &src, &o, "not a regular file");
    /* a symlink, even to a perfectly valid copy of the record: never followed */
    ts_write_file(copy_path, o.file, o.file_size);
    remove_any(o.path);
    ck_assert_int_eq(symlink(copy_path, o.path), 0);
    expect_rebuilt(dir, &src, &o, "symbolic link");
    ck_assert_int_eq(unlink(copy_path), 0);
    /* a dangling symlink */
    remove_any(o.path);
    ck_assert_int_eq(symlink("/nonexistent/kpc-record", o.path), 0);
    expect_rebuilt(dir, &src, &o, "symbolic link");

    /* a directory with contents cannot be removed: the request still succeeds */
    remove_any(o.path);
    ck_assert_int_eq(mkdir(o.path, 0700), 0);
    char inner[4600];
    snprintf(inner, sizeof inner, "%s/inner", o.path);
    ts_write_file(inner, "x", 1);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    ts_log_begin(KPC_LOG_WARN);
    size_t size;
    void *code = ts_get_code(ctx, &src, &size);
    char *log = ts_log_end();
    ck_assert(size == o.code_size && memcmp(code, o.code, size) == 0);
    ck_assert_uint_eq(stats_of(c).builds, 1);
    ck_assert_ptr_nonnull(strstr(log, "could not remove damaged"));
    free(log);
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);

    free(buf);
    free(o.code), free(o.file), free(other.code), free(other.file);
}
END_TEST

/* =====================================================================================
 * Faults: a full disk, a read-only tree, another owner, missing parents.
 * ===================================================================================== */
typedef struct fault_plan {
    enum kpc_sys_call call;
    unsigned skip;
    int err;
    const char *says;
} fault_plan;

/* Get src with a fault planned; the request must succeed, log `says` and leave no file. */
static void get_under_fault(kpc_context *ctx, int src_index, const fault_plan *f, const char *level)
{
    kpc_source src = real_src(src_index);
    kpc_key key;
    ts_key(ctx, &src, &key);
    char path[4400];
    ts_record_path(dir, ts_target(), &key, "co", path, sizeof path);
    uint64_t builds = stats_of(ctx->cache).builds;
    ts_log_begin(KPC_LOG_WARN);
    kpc__sys_fault_set(f->call, f->err, f->skip, 1);
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, &src, &p);
    kpc__sys_fault_set(f->call, 0, 0, 0);
    char *log = ts_log_end();
    ck_assert_msg(s == KPC_OK, "fault %d/%u: %s", f->call, f->skip, kpc_status_str(s));
    size_t size;
    const void *code = kpc_program_code(p, &size);
    ck_assert(ts_is_code_object(code, size));
    kpc_program_release(p);
    ck_assert_uint_eq(stats_of(ctx->cache).builds, builds + 1);
    ck_assert_msg(strstr(log, f->says) != NULL, "fault %d/%u: the log does not say \"%s\":\n%s", f->call,
                  f->skip, f->says, log);
    ck_assert_msg(strstr(log, level) != NULL, "fault %d/%u: not logged at level \"%s\":\n%s", f->call,
                  f->skip, level, log);
    ck_assert_msg(is_absent(path), "fault %d/%u: %s exists", f->call, f->skip, path);
    ck_assert_int_eq(ts_tmp_entries(dir), 0);
    free(log);
}

START_TEST(enospc_through_the_fault_seam)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    const char *nospace = strerror(ENOSPC);
    const fault_plan plans[] = {
        {KPC_SYS_WRITE, 0, ENOSPC, nospace},  /* the header */
        {KPC_SYS_WRITE, 1, ENOSPC, nospace},  /* the code, after the header is in the file */
        {KPC_SYS_WRITE, 2, ENOSPC, nospace},  /* the names table */
        {KPC_SYS_FSYNC, 0, ENOSPC, nospace},  /* delayed allocation fails at fsync */
        {KPC_SYS_RENAME, 0, ENOSPC, nospace}, /* a new directory block for the name */
        {KPC_SYS_MKDIR, 0, ENOSPC, nospace},
        {KPC_SYS_OPEN, 0, EDQUOT, strerror(EDQUOT)},
    };
    /* the first failure of a cache handle is an error, the later ones warnings */
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++)
        get_under_fault(ctx, 10 + (int)i, &plans[i], i == 0 ? ": error: " : ": warn: ");
    /* and the disk level works again at once */
    kpc_source src = real_src(20);
    kpc_key key;
    ts_key(ctx, &src, &key);
    size_t size;
    void *code = ts_get_code(ctx, &src, &size);
    assert_record_valid(dir, &key, code, size);
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* Processes that all need an object no one can store (every rename fails: a full disk)
 * each get it, built for themselves: one build per process, identical bytes, no file. */
typedef struct unstored_share {
    uint64_t hash[4];
    uint64_t self_builds[4];
} unstored_share;

static int unstored_child(int i, void *arg)
{
    unstored_share *sh = arg;
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc__sys_fault_set(KPC_SYS_RENAME, ENOSPC, 0, 1000);
    kpc_source src = real_src(21);
    size_t size;
    void *code = ts_get_code(ctx, &src, &size);
    sh->hash[i] = XXH3_64bits(code, size);
    sh->self_builds[i] = stats_of(c).builds;
    free(code);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return 0;
}

START_TEST(unstorable_object_is_built_by_each_process)
{
    enum { P = 4 };
    unstored_share *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    ck_assert_int_eq(ts_run_children(P, unstored_child, sh), P);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = real_src(21);
    kpc_key key;
    ts_key(ctx, &src, &key);
    char path[4400];
    ts_record_path(dir, ts_target(), &key, "co", path, sizeof path);
    ck_assert_msg(access(path, F_OK) != 0, "%s was stored while every rename failed", path);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.host_builds, P); /* each built it once, none twice */
    for (int i = 0; i < P; i++) {
        ck_assert_uint_eq(sh->self_builds[i], 1);
        ck_assert_uint_eq(sh->hash[i], sh->hash[0]);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    munmap(sh, sizeof *sh);
}
END_TEST

/* A private mount namespace, so that the test's mounts (under parent(dir)) vanish with
 * its process. false (with the reason printed) where mounting is not permitted. */
static bool private_mounts(const char *what)
{
    char *base = strdup(dir), why[512];
    *strrchr(base, '/') = '\0';
    int rc = tm_private_mounts(base, why, sizeof why);
    free(base);
    if (rc != 0)
        ts_skip("%s: %s", what, why);
    return rc == 0;
}

/* Mount a tmpfs of size_kb at parent(dir)/mnt; dir then names mnt/cache. */
static bool mount_tmpfs(char **mnt, unsigned size_kb, const char *what)
{
    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    size_t n = strlen(base) + 8;
    *mnt = malloc(n);
    snprintf(*mnt, n, "%s/mnt", base);
    free(base);
    ck_assert_int_eq(mkdir(*mnt, 0700), 0);
    char opts[64];
    snprintf(opts, sizeof opts, "size=%uk,mode=0700", size_kb);
    if (mount("tmpfs", *mnt, "tmpfs", 0, opts) != 0) {
        ts_skip("%s: mount -t tmpfs: %s", what, strerror(errno));
        return false;
    }
    free(dir);
    n = strlen(*mnt) + 8;
    dir = malloc(n);
    snprintf(dir, n, "%s/cache", *mnt);
    return true;
}

static void unmount_tmpfs(char *mnt)
{
    char root[4096];
    if (realpath(dir, root))
        kpc_index_unlink(root); /* ts_cleanup cannot find it once the mount is gone */
    ck_assert_int_eq(umount2(mnt, MNT_DETACH), 0);
    /* dir named mnt/cache: name the mkdtemp dir's cache again, so that ts_cleanup removes
     * that dir (mnt in it), not just mnt */
    free(dir);
    size_t n = strlen(mnt) + 8;
    dir = malloc(n);
    snprintf(dir, n, "%.*s/cache", (int)(strrchr(mnt, '/') - mnt), mnt);
    free(mnt);
}

START_TEST(enospc_on_a_full_tmpfs)
{
    char *mnt;
    if (!private_mounts("ENOSPC on tmpfs") || !mount_tmpfs(&mnt, 512, "ENOSPC on tmpfs"))
        return;
    /* a warm cache: one object, the compiler identity and target files */
    kpc_source a = real_src(0), b = real_src(1);
    cached_obj o;
    cache_obj(dir, &a, &o);
    /* fill to the brim */
    char filler[4200];
    snprintf(filler, sizeof filler, "%s/filler", mnt);
    int fd = open(filler, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    static char chunk[65536];
    size_t sizes[] = {65536, 4096, 512, 64, 1};
    for (size_t i = 0; i < 5; i++)
        while (write(fd, chunk, sizes[i]) == (ssize_t)sizes[i])
            ;
    ck_assert_int_eq(write(fd, chunk, 1), -1);
    ck_assert_int_eq(errno, ENOSPC);
    close(fd);

    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_key kb;
    ts_key(ctx, &b, &kb);
    char bpath[4400];
    ts_record_path(dir, ts_target(), &kb, "co", bpath, sizeof bpath);
    ts_log_begin(KPC_LOG_WARN);
    kpc_program *p = NULL;
    kpc_status s = kpc_program_get(ctx, &b, &p);
    char *log = ts_log_end();
    ck_assert_int_eq(s, KPC_OK);
    size_t bsize;
    const void *bcode = kpc_program_code(p, &bsize);
    ck_assert(ts_is_code_object(bcode, bsize));
    void *bcopy = malloc(bsize);
    memcpy(bcopy, bcode, bsize);
    kpc_program_release(p);
    ck_assert_uint_eq(stats_of(c).builds, 1);
    ck_assert_msg(strstr(log, strerror(ENOSPC)) != NULL && strstr(log, "error") != NULL,
                  "no error logged for the full disk:\n%s", log);
    free(log);
    ck_assert(is_absent(bpath));
    ck_assert_int_eq(ts_tmp_entries(dir), 0);
    /* the full disk still serves what it holds */
    size_t size;
    void *code = ts_get_code(ctx, &a, &size);
    ck_assert(size == o.code_size && memcmp(code, o.code, size) == 0);
    free(code);
    ck_assert_uint_eq(stats_of(c).disk_hits, 1);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);

    /* space again: the next process caches b */
    ck_assert_int_eq(unlink(filler), 0);
    c = ts_open(dir, 0, 0);
    ctx = ts_context(c);
    code = ts_get_code(ctx, &b, &size);
    ck_assert_uint_eq(stats_of(c).builds, 1);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    assert_record_valid(dir, &kb, code, size);
    free(code);
    free(bcopy);
    free(o.code), free(o.file);
    unmount_tmpfs(mnt);
}
END_TEST

/* A read-only tree serves hits; a miss is compiled and not stored. */
static void check_read_only_cache(const cached_obj *o, const char *says)
{
    kpc_source a = real_src(0), b = real_src(1);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_key kb;
    ts_key(ctx, &b, &kb);
    char bpath[4400];
    ts_record_path(dir, ts_target(), &kb, "co", bpath, sizeof bpath);
    ts_log_begin(KPC_LOG_WARN);
    size_t size;
    void *code = ts_get_code(ctx, &a, &size);
    kpc_stats st = stats_of(c);
    ck_assert_uint_eq(st.disk_hits, 1);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert(size == o->code_size && memcmp(code, o->code, size) == 0);
    free(code);
    code = ts_get_code(ctx, &b, &size);
    char *log = ts_log_end();
    ck_assert(ts_is_code_object(code, size));
    free(code);
    ck_assert_uint_eq(stats_of(c).builds, 1);
    ck_assert_msg(strstr(log, says) != NULL, "the log does not say \"%s\":\n%s", says, log);
    free(log);
    ck_assert(is_absent(bpath));
    ck_assert_int_eq(ts_tmp_entries(dir), 0);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}

START_TEST(read_only_mount_serves_hits)
{
    char *mnt;
    if (!private_mounts("read-only mount") || !mount_tmpfs(&mnt, 4096, "read-only mount"))
        return;
    kpc_source a = real_src(0);
    cached_obj o;
    cache_obj(dir, &a, &o);
    /* an old file: the hit tries to refresh its time, which a read-only tree refuses */
    struct timespec old[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, o.path, old, 0), 0);
    if (mount(NULL, mnt, NULL, MS_REMOUNT | MS_RDONLY, NULL) != 0) {
        ts_skip("read-only mount: remount ro: %s", strerror(errno));
        unmount_tmpfs(mnt);
        return;
    }
    ck_assert_int_eq(open(o.path, O_WRONLY | O_CLOEXEC), -1); /* read-only even for root */
    ck_assert_int_eq(errno, EROFS);
    check_read_only_cache(&o, strerror(EROFS));
    free(o.code), free(o.file);
    unmount_tmpfs(mnt);
}
END_TEST

START_TEST(read_only_through_the_fault_seam)
{
    kpc_source a = real_src(0);
    cached_obj o;
    cache_obj(dir, &a, &o);
    kpc__sys_fault_set(KPC_SYS_MKDIR, EROFS, 0, 1000000);
    kpc__sys_fault_set(KPC_SYS_OPEN, EROFS, 0, 1000000);
    check_read_only_cache(&o, strerror(EROFS));
    kpc__sys_fault_set(KPC_SYS_MKDIR, 0, 0, 0);
    kpc__sys_fault_set(KPC_SYS_OPEN, 0, 0, 0);
    free(o.code), free(o.file);
}
END_TEST

/* The cache dir at `d` must be refused with a log line saying `says`; requests still
 * succeed, compiled, with no disk level: a second cache handle compiles again. */
static void expect_refused(const char *d, const char *says)
{
    for (int round = 0; round < 2; round++) {
        ts_log_begin(KPC_LOG_WARN);
        kpc_cache *c = ts_open(d, 0, 0);
        char *log = ts_log_end();
        ck_assert_msg(strstr(log, says) != NULL && strstr(log, "refused") != NULL,
                      "round %d: the log does not refuse the directory (\"%s\"):\n%s", round, says, log);
        free(log);
        ck_assert_ptr_null(c->store);
        kpc_context *ctx = ts_context(c);
        kpc_source src = real_src(0);
        size_t size;
        void *code = ts_get_code(ctx, &src, &size);
        ck_assert(ts_is_code_object(code, size));
        free(code);
        kpc_stats st = stats_of(c);
        ck_assert_uint_eq(st.builds, 1);
        ck_assert_uint_eq(st.disk_hits, 0);
        ck_assert_uint_eq(st.disk_files, 0);
        kpc_context_destroy(ctx);
        kpc_cache_close(c);
    }
}

static int count_entries(const char *d)
{
    int n = ts_count_entries(d);
    ck_assert_int_ge(n, 0);
    return n;
}

START_TEST(directory_of_another_user_is_refused)
{
    if (geteuid() != 0) {
        ts_skip("another owner: chown needs root");
        return;
    }
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(chown(dir, 65534, 65534), 0);
    expect_refused(dir, "owned by uid 65534");
    ck_assert_int_eq(count_entries(dir), 0); /* nothing was written into it */
}
END_TEST

START_TEST(symlink_to_another_users_directory_is_refused)
{
    if (geteuid() != 0) {
        ts_skip("symlinked owner: chown needs root");
        return;
    }
    char other[4200], own[4200];
    snprintf(other, sizeof other, "%s.other", dir);
    snprintf(own, sizeof own, "%s.own", dir);
    ck_assert_int_eq(mkdir(other, 0700), 0);
    ck_assert_int_eq(chown(other, 65534, 65534), 0);
    ck_assert_int_eq(symlink(other, dir), 0);
    expect_refused(dir, "owned by uid 65534");
    ck_assert_int_eq(count_entries(other), 0);
    /* a link another user owns, even to a directory of ours: they can point it anywhere */
    ck_assert_int_eq(unlink(dir), 0);
    ck_assert_int_eq(mkdir(own, 0700), 0);
    ck_assert_int_eq(symlink(own, dir), 0);
    ck_assert_int_eq(lchown(dir, 65534, 65534), 0);
    expect_refused(dir, "a symbolic link owned by uid 65534");
    ck_assert_int_eq(count_entries(own), 0);
    unlink(dir);
    rmdir(own);
    rmdir(other);
}
END_TEST

static void assert_mode(const char *path, unsigned mode)
{
    struct stat sb;
    ck_assert_msg(lstat(path, &sb) == 0, "%s: %s", path, strerror(errno));
    ck_assert_msg((sb.st_mode & 07777) == mode, "%s has mode %04o, not %04o", path,
                  (unsigned)(sb.st_mode & 07777), mode);
}

START_TEST(missing_parents_are_created_0700)
{
    umask(0); /* the modes must not depend on the caller's umask */
    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    char deep[4200];
    snprintf(deep, sizeof deep, "%s/a/b/c/cache", base);
    kpc_cache *c = ts_open(deep, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = real_src(0);
    kpc_key key;
    ts_key(ctx, &src, &key);
    size_t size;
    void *code = ts_get_code(ctx, &src, &size);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    char path[4400], hex[KPC_KEY_HEX];
    kpc_key_hex(&key, hex);
    const char *subs[] = {"a", "a/b", "a/b/c", "a/b/c/cache", "a/b/c/cache/v1", "a/b/c/cache/v1/tmp"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", base, subs[i]);
        assert_mode(path, 0700);
    }
    snprintf(path, sizeof path, "%s/a/b/c/cache/v1/%s", base, ts_target());
    assert_mode(path, 0700);
    snprintf(path, sizeof path, "%s/a/b/c/cache/v1/%s/%.2s", base, ts_target(), hex);
    assert_mode(path, 0700);
    ts_record_path(deep, ts_target(), &key, "co", path, sizeof path);
    assert_mode(path, 0600);
    assert_record_valid(deep, &key, code, size);
    free(code);
    /* an existing cache dir kpc did not make keeps its mode: one others may read is used,
     * one its group may write is refused (docs/trust.md) */
    snprintf(path, sizeof path, "%s/a/b/c/cache", base);
    ck_assert_int_eq(chmod(path, 0755), 0);
    kpc_store *st;
    ck_assert_int_eq(kpc_store_open(path, 1u << 30, &st), KPC_OK);
    kpc_store_close(st);
    assert_mode(path, 0755);
    ck_assert_int_eq(chmod(path, 0775), 0);
    ts_log_begin(KPC_LOG_ERROR);
    ck_assert_int_eq(kpc_store_open(path, 1u << 30, &st), KPC_E_IO);
    free(ts_log_end());
    assert_mode(path, 0775);
    char root[4096];
    ck_assert_ptr_nonnull(realpath(deep, root));
    kpc_index_unlink(root);
    free(base);
}
END_TEST

/* =====================================================================================
 * The size limit and LRU (fake platform: hundreds of objects).
 * ===================================================================================== */
#define LIMIT_N 300
static uint64_t file_mtime(const char *path, uint64_t *size)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return 0;
    if (size)
        *size = (uint64_t)sb.st_size;
    return (uint64_t)sb.st_mtim.tv_sec * 1000000000ull + (uint64_t)sb.st_mtim.tv_nsec;
}

static void set_age(const char *path, time_t when)
{
    struct timespec t[2] = {{when, 0}, {when, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

/* Every *.co file under dir/v1: count and bytes (no estimate: the real tree). */
static uint64_t tree_bytes, tree_files;
static int tree_add(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    size_t n = strlen(path);
    if (flag == FTW_F && n > 3 && strcmp(path + n - 3, ".co") == 0 && strstr(path, "/v1/tmp/") == NULL)
        tree_bytes += (uint64_t)sb->st_size, tree_files++;
    return 0;
}

static void tree_usage(const char *d, uint64_t *bytes, uint64_t *files)
{
    char root[4096], v1[4200];
    ck_assert_ptr_nonnull(realpath(d, root));
    snprintf(v1, sizeof v1, "%s/v1", root);
    tree_bytes = tree_files = 0;
    nftw(v1, tree_add, 16, FTW_PHYS);
    *bytes = tree_bytes;
    *files = tree_files;
}

START_TEST(size_limit_holds_and_recent_objects_survive)
{
    ts_fake_install();
    static char paths[LIMIT_N][4400];
    static uint64_t seen[LIMIT_N]; /* last mtime seen while the file was there; 0: gone */
    /* the record size first, to set a limit of 40 records */
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    for (int i = 0; i < LIMIT_N; i++) {
        kpc_source src = fake_src(i);
        kpc_key key;
        ts_key(ctx, &src, &key);
        ts_record_path(dir, ts_target(), &key, "co", paths[i], sizeof paths[i]);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    uint64_t rec = 256 + 128 + 4; /* fake code object + empty names table */
    uint64_t limit = 40 * rec;
    c = open_limits(dir, limit, 0);
    ctx = ts_context(c);

    /* phase A: 30 objects, then aged a day, one a minute apart; the last only 30 s old */
    time_t now = time(NULL);
    for (int i = 0; i < 30; i++) {
        kpc_source src = fake_src(i);
        free(ts_get_code(ctx, &src, &(size_t){0}));
        uint64_t size = 0;
        ck_assert_uint_ne(file_mtime(paths[i], &size), 0);
        ck_assert_uint_eq(size, rec);
    }
    for (int i = 0; i < 29; i++)
        set_age(paths[i], now - 86400 + 60 * i);
    set_age(paths[29], now - 30);

    /* phase B: use 0..4 (and 29) again from a new context: the hits refresh 0..4, while
     * 29's refresh is rate-limited (it was used less than a minute ago) */
    kpc_context *ctx2 = ts_context(c);
    uint64_t hits_before = stats_of(c).disk_hits;
    int used[] = {0, 1, 2, 3, 4, 29};
    for (size_t k = 0; k < 6; k++) {
        kpc_source src = fake_src(used[k]);
        free(ts_get_code(ctx2, &src, &(size_t){0}));
    }
    ck_assert_uint_eq(stats_of(c).disk_hits, hits_before + 6);
    kpc_context_destroy(ctx2);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(file_mtime(paths[i], NULL) >= (uint64_t)(now - 5) * 1000000000ull,
                      "a hit did not refresh object %d", i);
    ck_assert_uint_eq(file_mtime(paths[29], NULL), (uint64_t)(now - 30) * 1000000000ull);
    for (int i = 5; i < 29; i++)
        ck_assert_uint_eq(file_mtime(paths[i], NULL), (uint64_t)(now - 86400 + 60 * i) * 1000000000ull);

    /* phase C: 270 more; after every write the limit holds, and whatever a prune removed
     * was no newer than anything it kept */
    for (int i = 0; i < 30; i++)
        seen[i] = file_mtime(paths[i], NULL);
    unsigned prunes = 0;
    for (int i = 30; i < LIMIT_N; i++) {
        kpc_source src = fake_src(i);
        free(ts_get_code(ctx, &src, &(size_t){0}));
        uint64_t bytes, files;
        tree_usage(dir, &bytes, &files);
        ck_assert_msg(bytes <= limit, "after write %d: %llu bytes on disk, limit %llu", i,
                      (unsigned long long)bytes, (unsigned long long)limit);
        uint64_t oldest_kept = UINT64_MAX, newest_removed = 0, sum = 0, n = 0;
        for (int j = 0; j <= i; j++) {
            uint64_t size = 0, m = file_mtime(paths[j], &size);
            if (m) {
                if (m < oldest_kept)
                    oldest_kept = m;
                sum += size, n++;
                seen[j] = m;
            } else if (seen[j]) {
                if (seen[j] > newest_removed)
                    newest_removed = seen[j];
                seen[j] = 0;
            }
        }
        ck_assert_msg(file_mtime(paths[i], NULL) != 0, "object %d was pruned as it was written", i);
        ck_assert_uint_eq(sum, bytes); /* nothing else on disk */
        ck_assert_uint_eq(n, files);
        if (newest_removed) {
            prunes++;
            ck_assert_msg(newest_removed <= oldest_kept, "after write %d a prune removed a newer object "
                          "than one it kept", i);
            ck_assert_msg(bytes <= limit / 10 * 9, "a prune stopped above 90%% of the limit");
        }
        if (i == 59) { /* the used ones survive the old unused ones */
            for (int j = 0; j < 5; j++)
                ck_assert_msg(seen[j] != 0, "object %d, used recently, was pruned before old ones", j);
            for (int j = 25; j < 60; j++)
                ck_assert_msg(seen[j] != 0, "object %d was pruned too early", j);
            for (int j = 5; j < 25; j++)
                ck_assert_msg(seen[j] == 0, "object %d, the oldest, survived", j);
        }
    }
    ck_assert_uint_ge(prunes, (LIMIT_N - 40) / 5);
    /* at the end: exactly the most recent objects are left */
    for (int j = LIMIT_N - 30; j < LIMIT_N; j++)
        ck_assert_msg(seen[j] != 0, "recent object %d is gone", j);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* =====================================================================================
 * Pruning from one process while others read: no error, never a torn object.
 * ===================================================================================== */
#define RACE_N 40
typedef struct race {
    kpc_key keys[RACE_N];
    size_t code_size[RACE_N], names_size[RACE_N];
    unsigned char code[RACE_N][256], names[RACE_N][64];
    uint64_t deadline;
    _Atomic uint64_t reads_ok, reads_missed, gets_ok, prunes, pruned_files, tool_prunes;
} race;

static int race_pruner(void *arg)
{
    race *r = arg;
    kpc_store *st;
    CHILD_REQUIRE(kpc_store_open(dir, 1ull << 40, &st) == KPC_OK);
    while (kpc__now_ns() < r->deadline) {
        kpc_prune_result res;
        CHILD_REQUIRE(kpc_store_prune(st, 8 * 400, NULL, &res) == KPC_OK);
        atomic_fetch_add(&r->prunes, 1);
        atomic_fetch_add(&r->pruned_files, res.files_removed);
    }
    kpc_store_close(st);
    return 0;
}

static int race_tool_pruner(void *arg)
{
    race *r = arg;
    const char *tool = getenv("KPC_TOOL");
    CHILD_REQUIRE(tool != NULL);
    while (kpc__now_ns() < r->deadline) {
        const char *argv[] = {tool, "prune", "--cache-dir", dir, "--max-size", "2K", NULL};
        char *out = NULL, *err = NULL;
        int rc = ts_exec(argv, NULL, &out, &err);
        if (rc != 0)
            fprintf(stderr, "kpc prune: exit %d: %s%s", rc, out, err);
        CHILD_REQUIRE(rc == 0);
        free(out), free(err);
        atomic_fetch_add(&r->tool_prunes, 1);
    }
    return 0;
}

static int race_reader(void *arg)
{
    race *r = arg;
    kpc_store *st;
    CHILD_REQUIRE(kpc_store_open(dir, 1ull << 40, &st) == KPC_OK);
    for (unsigned n = 0; kpc__now_ns() < r->deadline; n++) {
        int i = (int)(n % RACE_N);
        kpc_record rec;
        kpc_status s = kpc_store_read(st, &r->keys[i], ts_target(), KPC_RECORD_CODE, &rec);
        if (s == KPC_E_NOT_FOUND) {
            atomic_fetch_add(&r->reads_missed, 1);
            continue;
        }
        if (s != KPC_OK)
            fprintf(stderr, "reader: object %d: %s\n", i, kpc_status_str(s));
        CHILD_REQUIRE(s == KPC_OK); /* KPC_E_CORRUPT would be a torn object */
        CHILD_REQUIRE(rec.code_size == r->code_size[i] && rec.names_size == r->names_size[i]);
        CHILD_REQUIRE(memcmp(rec.payload, r->code[i], rec.code_size) == 0);
        CHILD_REQUIRE(memcmp((char *)rec.payload + rec.code_size, r->names[i], rec.names_size) == 0);
        kpc_record_free(&rec);
        atomic_fetch_add(&r->reads_ok, 1);
    }
    kpc_store_close(st);
    return 0;
}

static int race_getter(void *arg)
{
    race *r = arg;
    /* one program per context map: every get goes to the index and the disk */
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir, .mem_max_programs = 1};
    kpc_cache *c = NULL;
    CHILD_REQUIRE(kpc_cache_open(&cfg, &c) == KPC_OK);
    kpc_context *ctx = NULL;
    CHILD_REQUIRE(kpc_context_create_for_target(c, ts_target(), &ctx) == KPC_OK);
    for (unsigned n = 0; kpc__now_ns() < r->deadline; n++) {
        int i = (int)(n % RACE_N);
        kpc_source src = fake_src(i);
        kpc_program *p = NULL;
        CHILD_REQUIRE(kpc_program_get(ctx, &src, &p) == KPC_OK);
        size_t size;
        const void *code = kpc_program_code(p, &size);
        CHILD_REQUIRE(size == r->code_size[i] && memcmp(code, r->code[i], size) == 0);
        kpc_program_release(p);
        atomic_fetch_add(&r->gets_ok, 1);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    return 0;
}

START_TEST(pruning_while_reading_never_tears)
{
    ts_fake_install();
    race *r = shared_mem(sizeof *r);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    for (int i = 0; i < RACE_N; i++) {
        kpc_source src = fake_src(i);
        ts_key(ctx, &src, &r->keys[i]);
        kpc_program *p = NULL;
        ck_assert_int_eq(kpc_program_get(ctx, &src, &p), KPC_OK);
        ck_assert_uint_le(p->code_size, sizeof r->code[i]);
        ck_assert_uint_le(p->names_size, sizeof r->names[i]);
        memcpy(r->code[i], p->code, p->code_size);
        memcpy(r->names[i], p->names, p->names_size);
        r->code_size[i] = p->code_size;
        r->names_size[i] = p->names_size;
        kpc_program_release(p);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    unsigned builds_before = ts_fake_compiles();
    r->deadline = kpc__now_ns() + 2000000000ull;
    kpc__log_level = 0; /* misses and prunes are expected here */
    pid_t pids[] = {spawn(race_pruner, r), spawn(race_tool_pruner, r), spawn(race_reader, r),
                    spawn(race_getter, r)};
    for (size_t i = 0; i < sizeof pids / sizeof pids[0]; i++)
        ck_assert_msg(reap(pids[i]) == 0, "child %zu failed", i);
    printf("prune race: %llu prunes (%llu files) + %llu tool prunes; %llu reads, %llu misses; "
           "%llu gets, %u rebuilt\n", (unsigned long long)r->prunes, (unsigned long long)r->pruned_files,
           (unsigned long long)r->tool_prunes, (unsigned long long)r->reads_ok,
           (unsigned long long)r->reads_missed, (unsigned long long)r->gets_ok,
           ts_fake_compiles() - builds_before);
    /* the race really ran: files were pruned under readers, reads both hit and missed,
     * and the getter rebuilt what was pruned */
    ck_assert_uint_gt(r->pruned_files, 0);
    ck_assert_uint_gt(r->tool_prunes, 0);
    ck_assert_uint_gt(r->reads_ok, 0);
    ck_assert_uint_gt(r->reads_missed, 0);
    ck_assert_uint_gt(r->gets_ok, RACE_N);
    ck_assert_uint_gt(ts_fake_compiles(), builds_before);
    ck_assert_int_eq(ts_tmp_entries(dir), 0);
    munmap(r, sizeof *r);
}
END_TEST

/* =====================================================================================
 * KPC_DISABLE=1 and KPC_NO_DISK.
 * ===================================================================================== */
static void check_no_disk_level(unsigned flags)
{
    /* a cache dir with an object already in it: it must be neither read nor written */
    kpc_source a = real_src(0), b = real_src(1);
    char *base = strdup(dir);
    *strrchr(base, '/') = '\0';
    char populated[4200], fresh[4200];
    snprintf(populated, sizeof populated, "%s", dir);
    snprintf(fresh, sizeof fresh, "%s/fresh", base);
    cached_obj o;
    if (flags == 0)
        unsetenv("KPC_DISABLE");
    cache_obj(populated, &a, &o);
    if (flags == 0)
        setenv("KPC_DISABLE", "1", 1);
    uint64_t mtime = file_mtime(o.path, NULL);
    for (int round = 0; round < 2; round++) {
        const char *d = round == 0 ? populated : fresh;
        for (int handle = 0; handle < 2; handle++) {
            kpc_cache *c = ts_open(d, flags, 0);
            ck_assert_ptr_null(c->store);
            ck_assert_ptr_null(c->index);
            kpc_context *ctx = ts_context(c);
            size_t size;
            void *code = ts_get_code(ctx, &a, &size);
            ck_assert(size == o.code_size && memcmp(code, o.code, size) == 0);
            free(code);
            code = ts_get_code(ctx, &a, &size); /* the in-memory map still works */
            free(code);
            code = ts_get_code(ctx, &b, &size);
            free(code);
            kpc_stats st = stats_of(c);
            ck_assert_uint_eq(st.builds, 2); /* every new cache handle compiles again */
            ck_assert_uint_eq(st.disk_hits, 0);
            ck_assert_uint_eq(st.mem_hits, 1);
            ck_assert_uint_eq(st.disk_files, 0);
            kpc_context_destroy(ctx);
            kpc_cache_close(c);
        }
    }
    ck_assert(is_absent(fresh)); /* not even created */
    uint64_t bytes, files;
    tree_usage(populated, &bytes, &files);
    ck_assert_uint_eq(files, 1); /* b was not written */
    ck_assert_uint_eq(file_mtime(o.path, NULL), mtime);
    free(base);
    free(o.code), free(o.file);
}

START_TEST(kpc_disable_turns_disk_and_shm_off)
{
    setenv("KPC_DISABLE", "1", 1);
    check_no_disk_level(0);
    unsetenv("KPC_DISABLE");
}
END_TEST

START_TEST(no_disk_flag_turns_disk_off)
{
    unsetenv("KPC_DISABLE");
    check_no_disk_level(KPC_NO_DISK);
}
END_TEST

/* =====================================================================================
 * `kpc prune --stale`.
 * ===================================================================================== */
START_TEST(prune_stale_removes_other_compilers_records)
{
    const char *tool = getenv("KPC_TOOL");
    ck_assert_msg(tool != NULL, "KPC_TOOL is not set (run through ctest)");
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source srcs[2] = {real_src(0), real_src(1)};
    kpc_key keys[2];
    void *codes[2];
    size_t sizes[2];
    for (int i = 0; i < 2; i++) {
        ts_key(ctx, &srcs[i], &keys[i]);
        codes[i] = ts_get_code(ctx, &srcs[i], &sizes[i]);
    }
    /* forge a code record and a log record built by "another compiler" */
    kpc_record rec;
    memset(&rec, 0, sizeof rec);
    memset(rec.key.bytes, 0xab, 16);
    rec.kind = KPC_RECORD_CODE;
    rec.created_ns = kpc__wall_ns();
    snprintf(rec.target, sizeof rec.target, "%s", ts_target());
    snprintf(rec.source_name, sizeof rec.source_name, "old.hip");
    memset(rec.compiler_id, 0x11, 16);
    void *names;
    size_t names_size;
    ck_assert_int_eq(kpc_names_encode(NULL, NULL, 0, &names, &names_size), KPC_OK);
    rec.code_size = sizes[0];
    rec.names_size = names_size;
    ck_assert_int_eq(kpc_store_write(c->store, &rec, codes[0], names, names_size), KPC_OK);
    kpc_record log_rec = rec;
    memset(log_rec.key.bytes, 0xcd, 16);
    log_rec.kind = KPC_RECORD_LOG;
    ck_assert_int_eq(kpc_store_write(c->store, &log_rec, "old compiler's log", NULL, 0), KPC_OK);
    free(names);
    char forged[2][4400];
    ts_record_path(dir, ts_target(), &rec.key, "co", forged[0], sizeof forged[0]);
    ts_record_path(dir, ts_target(), &log_rec.key, "log", forged[1], sizeof forged[1]);
    ck_assert(!is_absent(forged[0]) && !is_absent(forged[1]));
    /* a forged record is sound: it reads back */
    kpc_record back;
    ck_assert_int_eq(kpc_store_read(c->store, &rec.key, ts_target(), KPC_RECORD_CODE, &back), KPC_OK);
    kpc_record_free(&back);

    /* without --stale nothing goes (far under the limit) */
    const char *plain[] = {tool, "prune", "--cache-dir", dir, NULL};
    ck_assert_int_eq(ts_exec(plain, NULL, NULL, NULL), 0);
    ck_assert(!is_absent(forged[0]) && !is_absent(forged[1]));
    char *out = NULL;
    const char *argv[] = {tool, "prune", "--stale", "--json", "--cache-dir", dir, NULL};
    /* run where hipRTC's hidden options differ from the application's: they change keys,
     * not the compiler, so the current compiler's records must stay all the same */
    const char *env[] = {"GPU_ENABLE_WAVE32_MODE=1", NULL};
    int rc = ts_exec(argv, env, &out, NULL);
    ck_assert_msg(rc == 0, "kpc prune --stale: exit %d: %s", rc, out);
    cJSON *j = cJSON_Parse(out);
    ck_assert_msg(j != NULL, "kpc prune --stale --json printed no JSON:\n%s", out);
    const cJSON *removed = cJSON_GetObjectItemCaseSensitive(j, "files_removed");
    const cJSON *before = cJSON_GetObjectItemCaseSensitive(j, "files_before");
    ck_assert_msg(cJSON_IsNumber(removed) && removed->valuedouble == 2, "kpc prune --stale said:\n%s", out);
    ck_assert_msg(cJSON_IsNumber(before) && before->valuedouble == 4, "kpc prune --stale said:\n%s", out);
    cJSON_Delete(j);
    free(out);
    ck_assert(is_absent(forged[0]) && is_absent(forged[1]));
    for (int i = 0; i < 2; i++) { /* the current compiler's records stay */
        assert_record_valid(dir, &keys[i], codes[i], sizes[i]);
        free(codes[i]);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}
END_TEST

/* ---- a record of LLVM bitcode (-fgpu-rdc from hipRTC 5.3) ------------------------------ */
static uint32_t le32_at(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The record says its bytes are bitcode (flags 1, version 3, which readers of versions 1
 * and 2 refuse), so no reader takes it for a code object: a compile-only context hands it
 * out (warm too), a device context never loads it, and an unknown flag is refused. */
START_TEST(bitcode_record_is_never_loaded)
{
    ts_fake_install();
    ts_fake_has_device = true;
    const char *rdc[] = {"-fgpu-rdc"};
    kpc_source src = ts_src("extern \"C\" __global__ void k(int *x) { x[0] = 1; }", "rdc.hip");
    src.options = rdc;
    src.num_options = 1;
    kpc_source plain = ts_src("extern \"C\" __global__ void k(int *x) { x[0] = 2; }", "plain.hip");
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_program *p = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &src, &p), KPC_OK);
    ck_assert(kpc_program_is_bitcode(p));
    size_t size;
    const void *code = kpc_program_code(p, &size);
    ck_assert_uint_eq(size, 128);
    ck_assert_mem_eq(code, "BC\xc0\xde", 4);
    unsigned char first[128];
    memcpy(first, code, sizeof first);
    kpc_program_release(p);
    ck_assert_int_eq(kpc_program_get(ctx, &plain, &p), KPC_OK);
    ck_assert(!kpc_program_is_bitcode(p));
    kpc_program_release(p);
    kpc_key key, plain_key;
    ts_key(ctx, &src, &key);
    ts_key(ctx, &plain, &plain_key);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    char path[4400], plain_path[4400];
    ts_record_path(dir, ts_target(), &key, "co", path, sizeof path);
    ts_record_path(dir, ts_target(), &plain_key, "co", plain_path, sizeof plain_path);
    size_t fsize, psize;
    unsigned char *file = ts_read_file(path, &fsize), *pfile = ts_read_file(plain_path, &psize);
    ck_assert_ptr_nonnull(file);
    ck_assert_ptr_nonnull(pfile);
    ck_assert_uint_eq(le32_at(file + 8), 3); /* version */
    ck_assert_uint_eq(le32_at(file + 36), 1); /* flags: bitcode */
    ck_assert_uint_le(le32_at(pfile + 8), 2); /* a code object: what older readers take */
    ck_assert_uint_eq(le32_at(pfile + 36), 0);
    free(pfile);

    /* warm: a new cache (a new process's view) reads it back as bitcode, compiles nothing */
    c = ts_open(dir, KPC_NO_SHM, 0);
    ctx = ts_context(c);
    ck_assert_int_eq(kpc_program_get(ctx, &src, &p), KPC_OK);
    ck_assert(kpc_program_is_bitcode(p));
    code = kpc_program_code(p, &size);
    ck_assert_uint_eq(size, sizeof first);
    ck_assert_mem_eq(code, first, sizeof first);
    kpc_program_release(p);
    kpc_context_destroy(ctx);
    ck_assert_uint_eq(ts_fake_compiles(), 2);
    ck_assert_uint_eq(stats_of(c).disk_hits, 1);
    /* a device context: refused, nothing loaded; the code object beside it loads */
    ck_assert_int_eq(kpc_context_create(c, 0, &ctx), KPC_OK);
    p = (kpc_program *)1;
    ck_assert_int_eq(kpc_program_get(ctx, &src, &p), KPC_E_INVALID);
    ck_assert_ptr_null(p);
    ck_assert_uint_eq(ts_fake_loads(), 0);
    ck_assert_int_eq(kpc_program_get(ctx, &plain, &p), KPC_OK);
    ck_assert_uint_eq(ts_fake_loads(), 1);
    kpc_program_release(p);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ck_assert_uint_eq(ts_fake_compiles(), 2);

    /* a flag this reader does not know: refused whole, removed, built again */
    le32_put(file + 36, 3);
    reseal_header(file);
    ts_write_file(path, file, fsize);
    c = ts_open(dir, KPC_NO_SHM, 0);
    ctx = ts_context(c);
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc_program_get(ctx, &src, &p), KPC_OK);
    char *log = ts_log_end();
    ck_assert_msg(strstr(log, "unknown flags") != NULL, "log: %s", log);
    free(log);
    ck_assert(kpc_program_is_bitcode(p));
    kpc_program_release(p);
    ck_assert_uint_eq(ts_fake_compiles(), 3);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    free(file);
    ts_fake_remove();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("store");
    struct {
        const char *name;
        int timeout;
        const TTest *tests[8];
    } cases[] = {
        {"share", 120, {second_process_compiles_nothing}},
        {"damage", 240, {truncated_at_every_length_real_object, truncated_at_every_length_whole_path,
                         every_damage_kind_is_rebuilt}},
        {"faults", 120, {enospc_through_the_fault_seam, enospc_on_a_full_tmpfs, read_only_mount_serves_hits,
                         read_only_through_the_fault_seam, directory_of_another_user_is_refused,
                         symlink_to_another_users_directory_is_refused, missing_parents_are_created_0700,
                         unstorable_object_is_built_by_each_process}},
        {"limit", 120, {size_limit_holds_and_recent_objects_survive, pruning_while_reading_never_tears}},
        {"off", 120, {kpc_disable_turns_disk_and_shm_off, no_disk_flag_turns_disk_off,
                      prune_stale_removes_other_compilers_records}},
        {"bitcode", 60, {bitcode_record_is_never_loaded}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, cases[i].timeout);
        for (size_t t = 0; t < 8 && cases[i].tests[t]; t++)
            _tcase_add_test(tc, cases[i].tests[t], 0, 0, 0, 1);
        suite_add_tcase(s, tc);
    }
    return ts_run_suite(s);
}
