/*
 * test_store_damage.c - the disk tree (level 3): every kind of damage
 * to a cached file, and a record truncated at every length, is detected, removed, logged
 * and rebuilt.
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

#include "store_support.h"

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
    const size_t header_offsets[] = {0, 7, 8, 12, 16, 31, 32, 36, 40, 48, 56, 64, 72, 80, 144, 192, 224, 240, 248, 255};
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
    le32_put(buf + 8, 5); /* 1 to 4 are read */
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
    ck_assert_uint_eq(le32_at(file + 8), 4); /* version: flags (3) and the request digest (4) */
    ck_assert_uint_eq(le32_at(file + 36), 1); /* flags: bitcode */
    ck_assert_uint_eq(le32_at(pfile + 8), 4); /* a code object with the request digest */
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

/* ---- an object the device refuses ------------------------------------------------------ */
/* A cached object the runtime refuses to load (a stale object that passed every check of
 * the tiers) is removed and built again, once. A fresh object refused fails the call
 * with KPC_E_HIP and keeps nothing in the map. The refused programs are let go of, which
 * only LeakSanitizer sees (KPC_LEAK_CHECK=1, on a kernel where its tracer runs): neither
 * was loaded, so the fake device counts no unload for them. */
START_TEST(refused_object_is_built_again)
{
    ts_fake_install();
    ts_fake_has_device = true;
    kpc_source src = ts_src("extern \"C\" __global__ void k(int *x) { x[0] = 3; }", "refused.hip");
    kpc_cache *c = ts_open(dir, KPC_NO_SHM, 0);
    kpc_context *ctx;
    ck_assert_int_eq(kpc_context_create(c, 0, &ctx), KPC_OK);
    kpc_program *p = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &src, &p), KPC_OK);
    size_t size;
    unsigned char first[4096];
    const void *code = kpc_program_code(p, &size);
    ck_assert_uint_le(size, sizeof first);
    memcpy(first, code, size);
    kpc_program_release(p);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ck_assert_uint_eq(ts_fake_compiles(), 1);
    ck_assert_uint_eq(ts_fake_loads(), 1);
    ck_assert_uint_eq(ts_fake_unloads(), 1);

    /* a new process's view: the object on disk is refused once, removed, built again */
    c = ts_open(dir, KPC_NO_SHM, 0);
    ck_assert_int_eq(kpc_context_create(c, 0, &ctx), KPC_OK);
    ts_fake_refuse_loads = 1;
    ts_log_begin(KPC_LOG_WARN);
    ck_assert_int_eq(kpc_program_get(ctx, &src, &p), KPC_OK);
    char *log = ts_log_end();
    ck_assert_msg(strstr(log, "refused cached object") && strstr(log, "removed it, building it again"),
                  "log: %s", log);
    free(log);
    ck_assert_uint_eq(ts_fake_compiles(), 2);
    ck_assert_uint_eq(ts_fake_loads(), 2);
    code = kpc_program_code(p, &size);
    ck_assert_mem_eq(code, first, size);
    kpc_program_release(p);
    /* the rebuilt object is the one on disk now: a compile-only context reads it back */
    kpc_context *plain = ts_context(c);
    ck_assert_int_eq(kpc_program_get(plain, &src, &p), KPC_OK);
    ck_assert_uint_eq(ts_fake_compiles(), 2);
    kpc_program_release(p);
    kpc_context_destroy(plain);

    /* a fresh object refused: the call fails, nothing is kept, the next call loads it */
    kpc_source other = ts_src("extern \"C\" __global__ void k(int *x) { x[0] = 4; }", "fresh.hip");
    ts_fake_refuse_loads = 1;
    p = (kpc_program *)1;
    ck_assert_int_eq(kpc_program_get(ctx, &other, &p), KPC_E_HIP);
    ck_assert_ptr_null(p);
    ck_assert_uint_eq(ts_fake_compiles(), 3);
    ck_assert_int_eq(kpc_program_get(ctx, &other, &p), KPC_OK);
    ck_assert_uint_eq(ts_fake_compiles(), 3); /* its record was stored before the load */
    ck_assert_uint_eq(ts_fake_loads(), 3);
    kpc_program_release(p);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ck_assert_uint_eq(ts_fake_unloads(), 3);
    ts_fake_remove();
}
END_TEST

int main(void)
{
    const TTest *tests[] = {truncated_at_every_length_real_object,
                            truncated_at_every_length_whole_path, every_damage_kind_is_rebuilt,
                            bitcode_record_is_never_loaded, refused_object_is_built_again, NULL};
    return ts_main_case("store", "damage", 240, setup, teardown, tests);
}
