/*
 * test_collision.c - a record is served from another process only to the request it was
 * built from. Two different requests are made to share one key (the test hook
 * kpc_key_test_override, as a chosen input against XXH3 could); the record the first left
 * under it, in each tier that crosses a process (the disk tree, the shared directory of
 * KPC_SHARED_DIR, a pack of KPC_PACK_PATH, the cluster tier on a private redis-server
 * with a secret, so that its records are served), must answer the second with a miss: a build
 * of its own source, request_mismatches counted, an info line with the key, and never the
 * first one's bytes. Also a record that keeps no request (KPC_KEEP_SOURCES=0) and a
 * compile failure's log. The fake compiler for the tiers, one case through real hipRTC.
 */
#define _GNU_SOURCE
#include "support.h"
#include "core/key.h"
#include "storage/record.h"
#include "storage/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#ifdef KPC_TEST_REDIS
#include "cluster_support.h"
#endif

static const kpc_key forced = {{0x6b, 0x70, 0x63, 0x2d, 0x63, 0x6f, 0x6c, 0x6c, 0x69, 0x73, 0x69, 0x6f, 0x6e,
                                0x21, 0x21, 0x21}};

typedef struct got {
    void *code;
    size_t size;
    kpc_stats st;
    char *log;
} got;

/* A new cache handle (a new process, as far as the tiers go) on dir gets src. */
static got get_in(const char *dir, const kpc_source *src)
{
    got g;
    ts_log_begin(KPC_LOG_INFO);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    g.code = ts_get_code(ctx, src, &g.size);
    ck_assert_int_eq(kpc_stats_get(c, &g.st), KPC_OK);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    g.log = ts_log_end();
    return g;
}

static void got_free(got *g)
{
    free(g->code);
    free(g->log);
}

/* The n results freed and dir removed. */
static void free_all(got *all[], size_t n, char *dir)
{
    for (size_t i = 0; i < n; i++)
        got_free(all[i]);
    ts_cleanup(dir);
}

/* Two caches' results and the two references freed, and the directories (d3 may be
 * NULL) removed. */
static void two_hosts_done(got *all[4], char *d1, char *d2, char *d3)
{
    free_all(all, 4, d1);
    ts_cleanup(d2);
    if (d3)
        ts_cleanup(d3);
}

/* The object src builds to, from a cache of its own, its key not forced. */
static got reference(const kpc_source *src)
{
    char *dir = ts_tmpdir();
    got g = get_in(dir, src);
    ts_cleanup(dir);
    return g;
}

/* b got its own object, built, the mismatch counted and logged; not a's bytes. */
static void assert_mismatch_built(const got *b, const got *ref_a, const got *ref_b)
{
    ck_assert_msg(b->size == ref_b->size && memcmp(b->code, ref_b->code, b->size) == 0,
                  "the second request did not get its own object");
    ck_assert_msg(b->size != ref_a->size || memcmp(b->code, ref_a->code, b->size) != 0,
                  "the second request was served the first one's object");
    ck_assert_uint_eq(b->st.builds, 1);
    ck_assert_uint_eq(b->st.disk_hits, 0);
    ck_assert_uint_eq(b->st.request_mismatches, 1);
    char hex[KPC_KEY_HEX];
    kpc_key_hex(&forced, hex);
    ck_assert_msg(strstr(b->log, "was built from another request") != NULL && strstr(b->log, hex) != NULL,
                  "no info line with the key:\n%s", b->log);
}

static kpc_source src_a, src_b;

static void setup(void)
{
    ts_fake_install();
    src_a = ts_src(ts_kernel_source(0), "a.hip");
    src_b = ts_src(ts_kernel_source(1), "b.hip");
}

static void teardown(void)
{
    kpc_key_test_override(NULL);
    ts_fake_remove();
}

/* The disk tree: a's record under the shared key is a miss for b, rebuilt as b's; then
 * b's is a hit for b (and a is the miss now). */
static void disk_case(bool real)
{
    got ra = reference(&src_a), rb = reference(&src_b);
    if (real) /* hipRTC's own objects, not the fake compiler's */
        ck_assert(ts_is_code_object(ra.code, ra.size) && ts_is_code_object(rb.code, rb.size));
    char *dir = ts_tmpdir();
    kpc_key_test_override(&forced);
    got a = get_in(dir, &src_a);
    ck_assert_uint_eq(a.st.builds, 1);
    got b = get_in(dir, &src_b);
    assert_mismatch_built(&b, &ra, &rb);
    got again = get_in(dir, &src_b);
    ck_assert_uint_eq(again.st.builds, 0);
    ck_assert_uint_eq(again.st.disk_hits, 1);
    ck_assert_uint_eq(again.st.request_mismatches, 0);
    ck_assert(again.size == rb.size && memcmp(again.code, rb.code, rb.size) == 0);
    got a2 = get_in(dir, &src_a);
    ck_assert_uint_eq(a2.st.request_mismatches, 1);
    ck_assert(a2.size == ra.size && memcmp(a2.code, ra.code, ra.size) == 0);
    kpc_key_test_override(NULL);
    got *all[] = {&ra, &rb, &a, &b, &again, &a2};
    free_all(all, sizeof all / sizeof all[0], dir);
}

START_TEST(disk_collision_is_a_miss)
{
    disk_case(false);
}
END_TEST

/* The section of this release (version 2: the request's bytes as they are) made into
 * the one earlier releases wrote (version 1: the same bytes in a zstd frame), in place
 * of rec's; the new payload is *payload (malloc'd). */
static void compress_section(kpc_record *rec, void **payload)
{
    const uint8_t *sec = rec->request;
    ck_assert_uint_ge(rec->request_size, 16);
    ck_assert(memcmp(sec, "KPRQ\2\0\0\0", 8) == 0);
    size_t raw = rec->request_size - 16, bound = ZSTD_compressBound(raw);
    uint8_t *p = malloc(rec->code_size + rec->names_size + 16 + bound);
    ck_assert_ptr_nonnull(p);
    memcpy(p, rec->payload, rec->code_size + rec->names_size);
    uint8_t *old = p + rec->code_size + rec->names_size;
    memcpy(old, sec, 16);
    old[4] = 1;
    size_t z = ZSTD_compress(old + 16, bound, sec + 16, raw, 3);
    ck_assert(!ZSTD_isError(z));
    rec->request = old;
    rec->request_size = 16 + z;
    *payload = p;
}

/* a's record in dir rewritten as an earlier release wrote it: its request section
 * compressed, and with its digest or (keep_digest false) without. */
static void rewrite_as_older(const char *dir, bool keep_digest)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_key key;
    ts_key(ctx, &src_a, &key);
    kpc_store *st = NULL;
    ck_assert_int_eq(kpc_store_open_shared(dir, &st), KPC_OK);
    kpc_record rec;
    ck_assert_int_eq(kpc_store_read(st, &key, kpc_context_target(ctx), KPC_RECORD_CODE, &rec), KPC_OK);
    ck_assert(rec.has_digest);
    rec.has_digest = keep_digest;
    void *payload;
    compress_section(&rec, &payload);
    const uint8_t *p = payload;
    ck_assert_int_eq(kpc_store_write(st, &rec, p, p + rec.code_size, rec.names_size), KPC_OK);
    free(payload);
    kpc_record_free(&rec);
    ck_assert_int_eq(kpc_store_read(st, &key, kpc_context_target(ctx), KPC_RECORD_CODE, &rec), KPC_OK);
    ck_assert_msg(rec.has_digest == keep_digest && ((const uint8_t *)rec.request)[4] == 1,
                  "the record was not rewritten as an earlier release wrote it");
    kpc_record_free(&rec);
    kpc_store_close(st);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
}

/* Whether this build keeps request digests; a skip, with the reason, where it does not. */
static bool digest_kept(void)
{
    if (ts_have_request_digest())
        return true;
    ts_skip("this build keeps no request digest (no libsodium): such a record answers on its key");
    return false;
}

/* a's record built in dir, then rewritten as an earlier release wrote it */
static got built_then_aged(const char *dir, bool keep_digest)
{
    got first = get_in(dir, &src_a);
    ck_assert_uint_eq(first.st.builds, 1);
    rewrite_as_older(dir, keep_digest);
    return first;
}

/* A record of an earlier release keeps no request digest, and its request compressed:
 * nothing shows which request it was built from without decompressing, so another
 * process does not serve it; it builds once more, and its new record is a hit from
 * then on. */
START_TEST(record_without_digest_is_built_again)
{
    if (!digest_kept())
        return;
    got ra = reference(&src_a);
    char *dir = ts_tmpdir();
    got first = built_then_aged(dir, false);
    got old = get_in(dir, &src_a);
    ck_assert_uint_eq(old.st.builds, 1);
    ck_assert_uint_eq(old.st.disk_hits, 0);
    ck_assert_uint_eq(old.st.request_mismatches, 0);
    ck_assert(old.size == ra.size && memcmp(old.code, ra.code, ra.size) == 0);
    got again = get_in(dir, &src_a);
    ck_assert_uint_eq(again.st.builds, 0);
    ck_assert_uint_eq(again.st.disk_hits, 1);
    got *all[] = {&ra, &first, &old, &again};
    free_all(all, sizeof all / sizeof all[0], dir);
}
END_TEST

/* The release before this one kept the digest and its request compressed: its record is
 * served to its own request (by the digest) and refused to another under its key. */
START_TEST(compressed_request_is_checked_by_digest)
{
    if (!digest_kept())
        return;
    got ra = reference(&src_a), rb = reference(&src_b);
    char *dir = ts_tmpdir();
    kpc_key_test_override(&forced);
    got first = built_then_aged(dir, true);
    got a = get_in(dir, &src_a);
    ck_assert_uint_eq(a.st.builds, 0);
    ck_assert_uint_eq(a.st.disk_hits, 1);
    ck_assert(a.size == ra.size && memcmp(a.code, ra.code, ra.size) == 0);
    got b = get_in(dir, &src_b);
    assert_mismatch_built(&b, &ra, &rb);
    kpc_key_test_override(NULL);
    got *all[] = {&ra, &rb, &first, &a, &b};
    free_all(all, sizeof all / sizeof all[0], dir);
}
END_TEST

START_TEST(disk_collision_without_sources_is_a_miss)
{
    if (!digest_kept())
        return;
    setenv("KPC_KEEP_SOURCES", "0", 1);
    disk_case(false);
    unsetenv("KPC_KEEP_SOURCES");
}
END_TEST

/* A compile failure another process kept (its log) is not the answer of another request
 * under the key: b is built, not failed with a's log. */
START_TEST(failure_log_collision_is_a_miss)
{
    if (!digest_kept())
        return;
    got ra = reference(&src_a), rb = reference(&src_b);
    char *dir = ts_tmpdir();
    kpc_key_test_override(&forced);
    kpc_source bad = ts_src("#error the fake compiler fails this\n", "bad.hip");
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_program *p = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &bad, &p), KPC_E_COMPILE);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    got b = get_in(dir, &src_b);
    kpc_key_test_override(NULL);
    assert_mismatch_built(&b, &ra, &rb);
    ck_assert_uint_eq(b.st.cached_failures, 0);
    got_free(&ra);
    got_free(&rb);
    got_free(&b);
    ts_cleanup(dir);
}
END_TEST

START_TEST(shared_dir_collision_is_a_miss)
{
    got ra = reference(&src_a), rb = reference(&src_b);
    char *host_a = ts_tmpdir(), *host_b = ts_tmpdir(), *shared = ts_tmpdir();
    ck_assert_int_eq(mkdir(shared, 0700), 0);
    setenv("KPC_SHARED_DIR", shared, 1);
    kpc_key_test_override(&forced);
    got a = get_in(host_a, &src_a);
    got b = get_in(host_b, &src_b);
    unsetenv("KPC_SHARED_DIR");
    kpc_key_test_override(NULL);
    assert_mismatch_built(&b, &ra, &rb);
    /* refused by the request: not a hit of the tier (nor copied into the disk above it) */
    ck_assert_uint_eq(b.st.shared_hits, 0);
    two_hosts_done((got *[]){&ra, &rb, &a, &b}, host_a, host_b, shared);
}
END_TEST

/* a's record built under the forced key in the cache directory from, packed into pack
 * (cap bytes: from.kpack), and the pack put below the disk (KPC_PACK_PATH). */
static got a_in_a_pack(const char *from, char *pack, size_t cap)
{
    kpc_key_test_override(&forced);
    got a = get_in(from, &src_a);
    snprintf(pack, cap, "%s.kpack", from);
    const char *argv[] = {getenv("KPC_TOOL"), "pack", "create", pack, "--cache-dir", from, NULL};
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, NULL, &out, &err);
    ck_assert_msg(rc == 0, "kpc pack create: %d: %s%s", rc, out, err);
    free(out);
    free(err);
    setenv("KPC_PACK_PATH", pack, 1);
    return a;
}

START_TEST(pack_collision_is_a_miss)
{
    got ra = reference(&src_a), rb = reference(&src_b);
    char *from = ts_tmpdir(), *dir = ts_tmpdir(), pack[4200];
    got a = a_in_a_pack(from, pack, sizeof pack);
    got b = get_in(dir, &src_b);
    unsetenv("KPC_PACK_PATH");
    kpc_key_test_override(NULL);
    assert_mismatch_built(&b, &ra, &rb);
    /* refused by the request: not a hit of the tier (nor copied into the disk above it) */
    ck_assert_uint_eq(b.st.pack_hits, 0);
    unlink(pack);
    two_hosts_done((got *[]){&ra, &rb, &a, &b}, from, dir, NULL);
}
END_TEST

/* A record another request built, in a pack below the disk, refused by the request, is
 * not copied into the disk. The build after it fails (a local fault stores nothing), so
 * the disk shows what the read alone left there. */
START_TEST(refused_record_is_not_copied_into_the_disk)
{
    char *from = ts_tmpdir(), *dir = ts_tmpdir(), pack[4200];
    got a = a_in_a_pack(from, pack, sizeof pack);
    setenv("KPC_FAKE_LOCAL_FAULT", "1", 1);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_program *p = NULL;
    ck_assert_int_eq(kpc_program_get(ctx, &src_b, &p), KPC_E_COMPILE);
    unsetenv("KPC_FAKE_LOCAL_FAULT");
    unsetenv("KPC_PACK_PATH");
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    ck_assert_uint_eq(st.request_mismatches, 1);
    ck_assert_uint_eq(st.pack_hits, 0);
    kpc_store *store = NULL;
    ck_assert_int_eq(kpc_store_open_shared(dir, &store), KPC_OK);
    kpc_record rec;
    ck_assert_int_eq(kpc_store_read(store, &forced, kpc_context_target(ctx), KPC_RECORD_CODE, &rec),
                     KPC_E_NOT_FOUND);
    kpc_store_close(store);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    kpc_key_test_override(NULL);
    unlink(pack);
    got_free(&a);
    ts_cleanup(from);
    ts_cleanup(dir);
}
END_TEST

/* Two hosts (two cache directories) on one Redis: host A's record, authenticated with the
 * group's secret, is a miss for host B's other request under the same key. */
START_TEST(redis_collision_is_a_miss)
{
#ifndef KPC_TEST_REDIS
    ts_skip("this build has no cluster tier or no redis-server");
#else
    tc_redis redis;
    ck_assert_msg(tc_redis_start(&redis), "redis-server could not be started");
    got ra = reference(&src_a), rb = reference(&src_b);
    char *host_a = ts_tmpdir(), *host_b = ts_tmpdir(), *keys = ts_tmpdir();
    ck_assert_int_eq(mkdir(keys, 0700), 0);
    char secret[4200];
    snprintf(secret, sizeof secret, "%s/secret", keys);
    ts_write_file(secret, "the group's secret", 18);
    ck_assert_int_eq(chmod(secret, 0600), 0);
    setenv("KPC_REMOTE", redis.url, 1);
    setenv("KPC_REMOTE_SECRET_FILE", secret, 1);
    kpc_key_test_override(&forced);
    setenv("KPC_HOST_ID", "hostA", 1);
    got a = get_in(host_a, &src_a);
    setenv("KPC_HOST_ID", "hostB", 1);
    got b = get_in(host_b, &src_b);
    kpc_key_test_override(NULL);
    unsetenv("KPC_HOST_ID");
    unsetenv("KPC_REMOTE_SECRET_FILE");
    unsetenv("KPC_REMOTE");
    tc_redis_stop(&redis);
    ck_assert_uint_eq(a.st.builds, 1);
    /* the cluster handed A's record up (a hit of the tier); the request refused it */
    ck_assert_uint_eq(b.st.remote_hits, 1);
    assert_mismatch_built(&b, &ra, &rb);
    two_hosts_done((got *[]){&ra, &rb, &a, &b}, host_a, host_b, keys);
#endif
}
END_TEST

/* One context, both requests under the forced key: the in-memory map keys them with its
 * own secret, not by the request key, so b is not handed a's program; b's miss reaches
 * a's record on disk (refused) and builds; then each is an in-memory hit with its own
 * bytes. */
START_TEST(in_memory_collision_is_a_miss)
{
    got ra = reference(&src_a), rb = reference(&src_b);
    char *dir = ts_tmpdir();
    kpc_key_test_override(&forced);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    size_t size[4];
    void *code[4] = {ts_get_code(ctx, &src_a, &size[0]), ts_get_code(ctx, &src_b, &size[1]),
                     ts_get_code(ctx, &src_a, &size[2]), ts_get_code(ctx, &src_b, &size[3])};
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    for (size_t i = 0; i < 4; i++) {
        const got *want = i % 2 ? &rb : &ra;
        ck_assert_msg(size[i] == want->size && memcmp(code[i], want->code, want->size) == 0,
                      "request %zu (%s) did not get its own object", i, i % 2 ? "b" : "a");
        free(code[i]);
    }
    ck_assert_uint_eq(st.builds, 2);
    ck_assert_uint_eq(st.request_mismatches, 1);
    ck_assert_uint_eq(st.mem_hits, 2);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    kpc_key_test_override(NULL);
    got_free(&ra);
    got_free(&rb);
    ts_cleanup(dir);
}
END_TEST

/* The same as the disk case through real hipRTC (platform "amd", real compiles). */
START_TEST(real_hiprtc_collision_is_a_miss)
{
    ts_fake_remove();
    disk_case(true);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {disk_collision_is_a_miss, record_without_digest_is_built_again, compressed_request_is_checked_by_digest,
                            disk_collision_without_sources_is_a_miss, failure_log_collision_is_a_miss, shared_dir_collision_is_a_miss, pack_collision_is_a_miss,
                            refused_record_is_not_copied_into_the_disk,
                            redis_collision_is_a_miss, in_memory_collision_is_a_miss,
                            real_hiprtc_collision_is_a_miss, NULL};
    return ts_main_case("collision", "tiers", 300, setup, teardown, tests);
}
