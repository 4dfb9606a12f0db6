/*
 * test_map_key.c - the in-memory map's key (core/map_key.c): every input of a request
 * changes it, every byte of every string counts whatever its length, no string is read
 * past its end, a request too long for the one-shot buffer is streamed to a key of its
 * own, and the layout has the source's digest where bench_hit's floor puts it.
 */
#define _GNU_SOURCE
#include "support.h"
#include "base/hash.h"
#include "core/map_key.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static kpc_map_secret secret;

static void setup_secret(void)
{
    kpc_map_key_secret_init(&secret);
}

static kpc_key key_of(const kpc_source *s, const uint8_t *cwd)
{
    kpc_key k;
    kpc_map_key_compute(&secret, s, cwd, &k);
    return k;
}

static bool same(kpc_key a, kpc_key b)
{
    return memcmp(a.bytes, b.bytes, sizeof a.bytes) == 0;
}

START_TEST(every_input_changes_the_key)
{
    const char *o3[] = {"ab", "c"}, *o4[] = {"a", "bc"}, *hn[] = {"a.h"};
    uint8_t cwd1[16] = {1}, cwd2[16] = {2};
    enum { N = 16 };
    kpc_source v[N];
    ts_request_variants(v); /* the first TS_REQUEST_VARIANTS; the rest below */
    kpc_source base = v[0];
    for (int i = TS_REQUEST_VARIANTS; i < N; i++)
        v[i] = base;
    v[9].options = o3, v[9].num_options = 2;
    v[10].options = o4, v[10].num_options = 2;
    v[11].name = "n.hipx";
    v[12].code = "code ";
    v[13].options = v[3].options, v[13].num_options = 1; /* "-O3" alone */
    v[14].name_expressions = hn, v[14].num_name_expressions = 1; /* "a.h" as an expression */
    v[15].options = hn, v[15].num_options = 1;                   /* and as an option */
    kpc_key k[N + 2];
    for (int i = 0; i < N; i++)
        k[i] = key_of(&v[i], NULL);
    k[N] = key_of(&base, cwd1);
    k[N + 1] = key_of(&base, cwd2);
    for (int i = 0; i < N + 2; i++)
        for (int j = i + 1; j < N + 2; j++)
            ck_assert_msg(!same(k[i], k[j]), "requests %d and %d share a map key", i, j);

    ck_assert(same(key_of(&base, NULL), k[0])); /* deterministic */
    kpc_source prefix = base;
    prefix.code = "codex", prefix.code_len = 4; /* only the first 4 bytes count */
    ck_assert(same(key_of(&prefix, NULL), k[0]));
    kpc_source unnamed = base, empty_name = base;
    unnamed.name = NULL, empty_name.name = "";
    ck_assert(same(key_of(&unnamed, NULL), key_of(&empty_name, NULL))); /* as in the request key */

    kpc_map_secret saved = secret; /* another process's secret: another key */
    kpc_map_key_secret_init(&secret);
    ck_assert(!same(key_of(&base, NULL), k[0]));
    secret = saved;
}
END_TEST

/* Names of every length from 1 to 40, each byte changed in turn: each change is a
 * different key (the words' tails are read in three ways by length). */
START_TEST(every_byte_of_a_name_counts)
{
    char name[41], other[41];
    for (size_t len = 1; len <= 40; len++) {
        for (size_t i = 0; i < len; i++)
            name[i] = (char)('a' + (i * 7) % 26);
        name[len] = '\0';
        kpc_source s = ts_src("code", name);
        kpc_key k = key_of(&s, NULL);
        for (size_t i = 0; i < len; i++) {
            memcpy(other, name, len + 1);
            other[i] = (char)(other[i] == 'z' ? 'y' : other[i] + 1);
            s.name = other;
            ck_assert_msg(!same(key_of(&s, NULL), k), "name of %zu bytes, byte %zu changed: same key", len, i);
        }
        name[len - 1] = '\0'; /* one byte shorter: another key */
        s.name = name;
        ck_assert_msg(!same(key_of(&s, NULL), k), "name of %zu bytes and its prefix share a key", len);
    }
}
END_TEST

/* Strings that end on the last byte of a page before one that cannot be read: the key
 * reads none of that page (a read there would kill the test with SIGSEGV). */
START_TEST(no_string_is_read_past_its_end)
{
    long page = sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(map, MAP_FAILED);
    ck_assert_int_eq(mprotect(map + page, (size_t)page, PROT_NONE), 0);
    for (size_t len = 1; len <= 40; len++) {
        char *s = map + page - (len + 1); /* its NUL on the page's last byte */
        memset(s, 'q', len);
        s[len] = '\0';
        const char *opts[] = {s};
        kpc_source src = ts_src(s, s);
        src.options = opts, src.num_options = 1;
        src.name_expressions = opts, src.num_name_expressions = 1;
        kpc_key a = key_of(&src, NULL), b = key_of(&src, NULL);
        ck_assert(same(a, b));
    }
    munmap(map, (size_t)page * 2);
}
END_TEST

/* A request whose words overflow the one-shot buffer is hashed as it is laid out: its
 * key is its own (the last option counts, as does the first) and the same every time. */
START_TEST(a_long_request_is_streamed_to_a_key_of_its_own)
{
    enum { N = 200 };
    static char text[N][48];
    const char *opts[N];
    for (int i = 0; i < N; i++) {
        snprintf(text[i], sizeof text[i], "-DSETTING_NUMBER_%d=%d", i, i * 3);
        opts[i] = text[i];
    }
    kpc_source s = ts_src("code", "long.hip");
    s.options = opts, s.num_options = N;
    uint64_t words[64];
    ck_assert_uint_eq(kpc_map_key_words(&secret, &s, NULL, words, 64), 0); /* streamed */
    kpc_key k = key_of(&s, NULL);
    ck_assert(same(key_of(&s, NULL), k));
    text[N - 1][3] = 'X';
    ck_assert(!same(key_of(&s, NULL), k));
    text[N - 1][3] = 'E';
    ck_assert(same(key_of(&s, NULL), k));
    text[0][3] = 'X';
    ck_assert(!same(key_of(&s, NULL), k));
    text[0][3] = 'E';
    s.num_options = N - 1;
    ck_assert(!same(key_of(&s, NULL), k));
}
END_TEST

/* The words of a source alone: its length, its digest at KPC_MAP_KEY_DIGEST_WORD (where
 * bench_hit's floor writes it), the name's length and bytes; the key is their hash. */
START_TEST(a_source_alone_is_five_words)
{
    const char *code = "extern \"C\" __global__ void k(int *p) { *p = 1; }";
    kpc_source s = ts_src(code, "hit.hip");
    uint64_t w[64];
    ck_assert_uint_eq(kpc_map_key_words(&secret, &s, NULL, w, 64), 5);
    ck_assert_uint_eq(w[0], strlen(code));
    XXH128_hash_t d = XXH3_128bits_withSecret(code, strlen(code), secret.bytes, sizeof secret.bytes);
    ck_assert_uint_eq(w[KPC_MAP_KEY_DIGEST_WORD], d.low64);
    ck_assert_uint_eq(w[KPC_MAP_KEY_DIGEST_WORD + 1], d.high64);
    ck_assert_uint_eq(w[3], strlen("hit.hip"));
    XXH128_hash_t h = XXH3_128bits_withSecret(w, 5 * sizeof w[0], secret.bytes, sizeof secret.bytes);
    kpc_key k = key_of(&s, NULL);
    ck_assert_mem_eq(k.bytes, &h, sizeof h);
    uint8_t cwd[16] = {7};
    ck_assert_uint_eq(kpc_map_key_words(&secret, &s, cwd, w, 64), 7); /* the directory's two words */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("map_key");
    TCase *tc = tcase_create("map_key");
    tcase_add_unchecked_fixture(tc, setup_secret, NULL);
    tcase_add_test(tc, every_input_changes_the_key);
    tcase_add_test(tc, every_byte_of_a_name_counts);
    tcase_add_test(tc, no_string_is_read_past_its_end);
    tcase_add_test(tc, a_long_request_is_streamed_to_a_key_of_its_own);
    tcase_add_test(tc, a_source_alone_is_five_words);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
