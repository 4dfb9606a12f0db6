/*
 * test_pack.c - the request a record keeps (request.c), record versions 1 and 2, and
 * pack files (storage/pack.c, storage/pack_tier.c, `kpc pack`), through real hipRTC.
 *
 *   request codec: every field round-trips (headers, name expressions, the hidden-option
 *     environment, set and unset); a damaged, truncated or extended section is refused
 *   records: a build keeps its request (version 2), KPC_KEEP_SOURCES=0 keeps none and
 *     writes version 1; both are read back as hits with the same bytes
 *   packs: created from a cache (`kpc pack create`), used from an empty cache through
 *     KPC_PACK_PATH: 0 builds, the same bytes, back-filled into the disk tree; a flipped
 *     byte in one entry: that entry is rebuilt, the others hit, `kpc pack verify` says 1
 *     damaged; a truncated pack and a file that is not a pack are refused with a clear
 *     log line, and everything is built
 */
#define _GNU_SOURCE
#include "support.h"
#include "storage/pack.h"
#include "storage/request_codec.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define K 3

static kpc_source source_k(int k, char names[][16])
{
    snprintf(names[k], 16, "k%d.hip", k);
    return ts_src(ts_kernel_source(k), names[k]);
}

/* ---- the request codec ---- */
/* The section's verdict for src. */
static void assert_compare(const void *sec, size_t size, const kpc_source *src, enum kpc_request_match want)
{
    ck_assert_int_eq(kpc_request_compare(sec, size, src), want);
}

START_TEST(request_round_trip)
{
    const char *opts[] = {"-O3", "-DN=4"};
    const char *hn[] = {"a.h", "b.h"}, *hs[] = {"#define A 1\n", ""};
    const char *ex[] = {"k<float>"};
    kpc_source src = {.code = "template<class T> __global__ void k(T *x) {}\n", .name = "t.hip",
                      .options = opts, .num_options = 2, .header_names = hn, .header_sources = hs,
                      .num_headers = 2, .name_expressions = ex, .num_name_expressions = 1};
    setenv("KPC_TEST_SET", "32", 1);
    unsetenv("KPC_TEST_UNSET");
    const char *env[] = {"KPC_TEST_SET", "KPC_TEST_UNSET", NULL};
    void *sec;
    size_t size;
    ck_assert_int_eq(kpc_request_encode(&src, env, &sec, &size), KPC_OK);
    kpc_request rq;
    ck_assert_int_eq(kpc_request_decode(sec, size, &rq), KPC_OK);
    ck_assert_str_eq(rq.src.code, src.code);
    ck_assert_uint_eq(rq.src.code_len, strlen(src.code));
    ck_assert_str_eq(rq.src.name, "t.hip");
    ck_assert_uint_eq(rq.src.num_options, 2);
    ck_assert_str_eq(rq.src.options[1], "-DN=4");
    ck_assert_uint_eq(rq.src.num_headers, 2);
    ck_assert_str_eq(rq.src.header_names[1], "b.h");
    ck_assert_str_eq(rq.src.header_sources[0], "#define A 1\n");
    ck_assert_str_eq(rq.src.header_sources[1], "");
    ck_assert_uint_eq(rq.src.num_name_expressions, 1);
    ck_assert_str_eq(rq.src.name_expressions[0], "k<float>");
    ck_assert_uint_eq(rq.num_env, 2);
    ck_assert_str_eq(rq.env_names[0], "KPC_TEST_SET");
    ck_assert_str_eq(rq.env_values[0], "32");
    ck_assert_ptr_null(rq.env_values[1]);
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_str_eq(rq.cwd, cwd);
    /* the same key as the original request */
    uint8_t id[16] = {1};
    kpc_key k1, k2;
    ck_assert_int_eq(kpc_key_compute(id, "amd", "gfx90a", &src, &k1), KPC_OK);
    ck_assert_int_eq(kpc_key_compute(id, "amd", "gfx90a", &rq.src, &k2), KPC_OK);
    ck_assert_int_eq(memcmp(k1.bytes, k2.bytes, 16), 0);
    kpc_request_free(&rq);

    /* compared in place: the same request, then each field changed (its text, its length,
     * a count) */
    assert_compare(sec, size, &src, KPC_REQUEST_SAME);
    kpc_source other = src;
    other.code = "template<class T> __global__ void k(T *y) {}\n";
    assert_compare(sec, size, &other, KPC_REQUEST_OTHER);
    other = src;
    other.name = NULL;
    assert_compare(sec, size, &other, KPC_REQUEST_OTHER);
    const char *opts2[] = {"-O3", "-DN=5"};
    other = src;
    other.options = opts2;
    assert_compare(sec, size, &other, KPC_REQUEST_OTHER);
    other.num_options = 1;
    assert_compare(sec, size, &other, KPC_REQUEST_OTHER);
    const char *hs2[] = {"#define A 1\n", " "};
    other = src;
    other.header_sources = hs2;
    assert_compare(sec, size, &other, KPC_REQUEST_OTHER);
    other = src;
    other.num_name_expressions = 0;
    assert_compare(sec, size, &other, KPC_REQUEST_OTHER);
    assert_compare(sec, size - 1, &src, KPC_REQUEST_UNREAD);
    assert_compare(sec, 10, &src, KPC_REQUEST_UNREAD);
    other = src;
    other.num_options = 3; /* a request longer than the one kept */
    const char *opts3[] = {"-O3", "-DN=4", "-g"};
    other.options = opts3;
    assert_compare(sec, size, &other, KPC_REQUEST_OTHER);

    /* damage of every kind is refused, never a crash */
    uint8_t *bad = malloc(size + 8);
    for (size_t i = 0; i < size; i += (size > 64 ? size / 64 : 1)) {
        memcpy(bad, sec, size);
        bad[i] ^= 0x5a;
        kpc_status s = kpc_request_decode(bad, size, &rq);
        if (s == KPC_OK) /* a flip in a string's bytes still parses (the record's checksum
                          * covers the section; the section has none of its own) */
            kpc_request_free(&rq);
        else
            ck_assert_int_eq(s, KPC_E_CORRUPT);
    }
    memcpy(bad, sec, size);
    ck_assert_int_eq(kpc_request_decode(bad, size - 1, &rq), KPC_E_CORRUPT);
    ck_assert_int_eq(kpc_request_decode(bad, 10, &rq), KPC_E_CORRUPT);
    memset(bad + size, 0, 8);
    ck_assert_int_eq(kpc_request_decode(bad, size + 8, &rq), KPC_E_CORRUPT);
    bad[0] = 'X';
    ck_assert_int_eq(kpc_request_decode(bad, size, &rq), KPC_E_CORRUPT);
    ck_assert_int_eq(kpc_request_decode(NULL, 0, &rq), KPC_E_CORRUPT);
    free(bad);
    free(sec);
}
END_TEST

/* ---- records keep their request, or none (KPC_NO_SOURCES), and its digest (version 4) ---- */
static uint32_t record_version(const char *dir, const kpc_context *ctx, const kpc_source *src, uint64_t *request)
{
    kpc_key key;
    ts_key(ctx, src, &key);
    char path[4400];
    ts_record_path(dir, kpc_context_target(ctx), &key, "co", path, sizeof path);
    size_t size;
    uint8_t *b = ts_read_file(path, &size);
    ck_assert_ptr_nonnull(b);
    uint32_t v = b[8] | b[9] << 8;
    *request = 0;
    for (int i = 7; i >= 0; i--)
        *request = *request << 8 | b[240 + i];
    free(b);
    return v;
}

START_TEST(records_keep_requests)
{
    char *dir = ts_tmpdir();
    char names[K][16];
    kpc_source a = source_k(0, names), b = source_k(1, names);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    size_t sa, sb;
    void *ca = ts_get_code(ctx, &a, &sa);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    setenv("KPC_KEEP_SOURCES", "0", 1);
    c = ts_open(dir, 0, 0);
    ctx = ts_context(c);
    void *cb = ts_get_code(ctx, &b, &sb);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    unsetenv("KPC_KEEP_SOURCES");

    c = ts_open(dir, 0, 0);
    ctx = ts_context(c);
    uint64_t req;
    /* the request digest: 4; a build without libsodium keeps none: 2 with the request, 1
     * without */
    bool digest = ts_have_request_digest();
    ck_assert_uint_eq(record_version(dir, ctx, &a, &req), digest ? 4 : 2);
    ck_assert_uint_gt(req, 16);
    ck_assert_uint_eq(record_version(dir, ctx, &b, &req), digest ? 4 : 1);
    ck_assert_uint_eq(req, 0);
    /* both read back as hits, with their bytes */
    size_t s2;
    void *c2 = ts_get_code(ctx, &a, &s2);
    ck_assert(s2 == sa && memcmp(c2, ca, sa) == 0);
    free(c2);
    c2 = ts_get_code(ctx, &b, &s2);
    ck_assert(s2 == sb && memcmp(c2, cb, sb) == 0);
    free(c2);
    kpc_stats st;
    kpc_stats_get(c, &st);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_uint_eq(st.disk_hits, 2);
    /* the request kept decodes to the source asked for */
    kpc_key key;
    ts_key(ctx, &a, &key);
    kpc_record rec;
    ck_assert_int_eq(kpc_store_read(c->store, &key, ts_target(), KPC_RECORD_CODE, &rec), KPC_OK);
    kpc_request rq;
    ck_assert_int_eq(kpc_request_decode((uint8_t *)rec.payload + rec.code_size + rec.names_size,
                                        rec.request_size, &rq), KPC_OK);
    ck_assert_str_eq(rq.src.code, a.code);
    ck_assert_str_eq(rq.src.name, a.name);
    kpc_request_free(&rq);
    kpc_record_free(&rec);
    free(ca);
    free(cb);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_cleanup(dir);
}
END_TEST

/* ---- packs ---- */
typedef struct packed {
    char *src_dir, *pack;
    void *code[K];
    size_t size[K];
} packed;

/* Build K sources in a cache, then `kpc pack create` it. */
static void make_pack(packed *p)
{
    p->src_dir = ts_tmpdir();
    char names[K][16];
    kpc_cache *c = ts_open(p->src_dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    for (int k = 0; k < K; k++) {
        kpc_source s = source_k(k, names);
        p->code[k] = ts_get_code(ctx, &s, &p->size[k]);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    p->pack = malloc(strlen(p->src_dir) + 16);
    sprintf(p->pack, "%s.kpack", p->src_dir);
    const char *argv[] = {getenv("KPC_TOOL"), "pack", "create", p->pack, "--cache-dir", p->src_dir, NULL};
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, NULL, &out, &err);
    ck_assert_msg(rc == 0, "kpc pack create: %d: %s%s", rc, out, err);
    ck_assert_msg(strstr(out, "3 records") != NULL, "%s", out);
    free(out);
    free(err);
}

static void free_pack(packed *p)
{
    unlink(p->pack);
    free(p->pack);
    for (int k = 0; k < K; k++)
        free(p->code[k]);
    ts_cleanup(p->src_dir);
}

/* From an empty cache with KPC_PACK_PATH=pack_path: get every source, compare the bytes,
 * and return the stats. */
static kpc_stats use_pack(const packed *p, const char *pack_path, char **log)
{
    char *dir = ts_tmpdir();
    setenv("KPC_PACK_PATH", pack_path, 1);
    ts_log_begin(KPC_LOG_WARN);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    char names[K][16];
    for (int k = 0; k < K; k++) {
        kpc_source s = source_k(k, names);
        size_t size;
        void *code = ts_get_code(ctx, &s, &size);
        ck_assert_uint_eq(size, p->size[k]);
        ck_assert_int_eq(memcmp(code, p->code[k], size), 0);
        free(code);
    }
    kpc_stats st;
    kpc_stats_get(c, &st);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    *log = ts_log_end();
    unsetenv("KPC_PACK_PATH");
    /* back-filled: a new process without the pack reads every object from disk */
    c = ts_open(dir, 0, 0);
    ctx = ts_context(c);
    for (int k = 0; k < K; k++) {
        kpc_source s = source_k(k, names);
        size_t size;
        free(ts_get_code(ctx, &s, &size));
    }
    kpc_stats st2;
    kpc_stats_get(c, &st2);
    ck_assert_uint_eq(st2.builds, 0);
    ck_assert_uint_eq(st2.disk_hits, K);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ts_cleanup(dir);
    return st;
}

START_TEST(pack_hits)
{
    packed p;
    make_pack(&p);
    char *log;
    kpc_stats st = use_pack(&p, p.pack, &log);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_uint_eq(st.pack_hits, K);
    ck_assert_uint_eq(st.pack_refused, 0);
    free(log);
    /* a directory in the path works too (its *.kpack files) */
    char *dir = strdup(p.pack);
    *strrchr(dir, '/') = '\0';
    char path[4200];
    snprintf(path, sizeof path, "/nonexistent:%s", dir);
    st = use_pack(&p, path, &log);
    ck_assert_uint_eq(st.builds, 0);
    ck_assert_uint_eq(st.pack_hits, K);
    free(log);
    free(dir);
    /* ls and verify */
    const char *argv[] = {getenv("KPC_TOOL"), "pack", "verify", p.pack, NULL};
    char *out = NULL;
    ck_assert_int_eq(ts_exec(argv, NULL, &out, NULL), 0);
    ck_assert_msg(strstr(out, "3 records, 0 damaged") != NULL, "%s", out);
    free(out);
    const char *ls[] = {getenv("KPC_TOOL"), "pack", "ls", p.pack, NULL};
    ck_assert_int_eq(ts_exec(ls, NULL, &out, NULL), 0);
    ck_assert_msg(strstr(out, "k0.hip") && strstr(out, "k2.hip"), "%s", out);
    free(out);
    free_pack(&p);
}
END_TEST

START_TEST(pack_flipped_byte)
{
    packed p;
    make_pack(&p);
    /* flip one byte inside the code object of entry 1 */
    kpc_pack *pk;
    ck_assert_int_eq(kpc_pack_open(p.pack, &pk), KPC_OK);
    kpc_pack_entry e;
    ck_assert_int_eq(kpc_pack_entry_get(pk, 1, &e), KPC_OK);
    kpc_pack_close(pk);
    size_t size;
    uint8_t *bytes = ts_read_file(p.pack, &size);
    bytes[e.offset + 256 + 100] ^= 0x01;
    ts_write_file(p.pack, bytes, size);
    free(bytes);
    char *log;
    kpc_stats st = use_pack(&p, p.pack, &log);
    ck_assert_uint_eq(st.builds, 1);
    ck_assert_uint_eq(st.pack_hits, K - 1);
    ck_assert_uint_eq(st.pack_refused, 1);
    ck_assert_msg(strstr(log, "damaged entry") && strstr(log, "checksum"), "%s", log);
    free(log);
    const char *argv[] = {getenv("KPC_TOOL"), "pack", "verify", p.pack, NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(ts_exec(argv, NULL, &out, &err), 1);
    ck_assert_msg(strstr(out, "3 records, 1 damaged") != NULL, "%s", out);
    free(out);
    free(err);
    free_pack(&p);
}
END_TEST

START_TEST(pack_truncated_or_foreign)
{
    packed p;
    make_pack(&p);
    size_t size;
    uint8_t *bytes = ts_read_file(p.pack, &size);
    ts_write_file(p.pack, bytes, size - 10);
    free(bytes);
    char *log;
    kpc_stats st = use_pack(&p, p.pack, &log);
    ck_assert_uint_eq(st.builds, K);
    ck_assert_uint_eq(st.pack_hits, 0);
    ck_assert_msg(strstr(log, "refused: truncated") != NULL, "%s", log);
    free(log);
    /* cut inside the header, and to nothing */
    ts_write_file(p.pack, "KPCPACK\x01", 8);
    st = use_pack(&p, p.pack, &log);
    ck_assert_uint_eq(st.builds, K);
    ck_assert_msg(strstr(log, "refused: not a kpc pack") != NULL, "%s", log);
    free(log);
    ts_write_file(p.pack, "", 0);
    st = use_pack(&p, p.pack, &log);
    ck_assert_uint_eq(st.builds, K);
    free(log);
    /* not a pack at all */
    const char text[] = "this is not a pack, but a long enough text file to hold a header........\n";
    ts_write_file(p.pack, text, sizeof text);
    st = use_pack(&p, p.pack, &log);
    ck_assert_uint_eq(st.builds, K);
    ck_assert_msg(strstr(log, "refused: not a kpc pack") != NULL, "%s", log);
    free(log);
    const char *argv[] = {getenv("KPC_TOOL"), "pack", "verify", p.pack, NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(ts_exec(argv, NULL, &out, &err), 1);
    ck_assert_msg(strstr(err, "not a kpc pack") != NULL, "%s", err);
    free(out);
    free(err);
    free_pack(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pack");
    TCase *tc = tcase_create("pack");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, request_round_trip);
    tcase_add_test(tc, records_keep_requests);
    tcase_add_test(tc, pack_hits);
    tcase_add_test(tc, pack_flipped_byte);
    tcase_add_test(tc, pack_truncated_or_foreign);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
