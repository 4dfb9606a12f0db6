/*
 * map_key.c - the in-memory map's key: XXH3-128 under the context's secret of the
 * request's fields, each written as whole 8-byte words.
 *
 * Words, because of how the hash reads them. XXH3 reads a short input 8 bytes at a time,
 * from both ends, a few nanoseconds after the fields were written. A read that covers
 * bytes of two stores still in flight (a tag byte and the 8-byte length after it, as the
 * request key's serialization lays them out) cannot take its bytes from them and waits
 * until they reach the cache: on every hit, a 4 KB hit's largest cost after its two
 * hashes. Every word here is written by one 8-byte store at an 8-byte offset, and the
 * hash's reads of a whole number of words land on those offsets, so each read is served
 * by the store that wrote it.
 *
 * The layout, one word each unless said (the key is the XXH3-128 of them all):
 *   the source's length; its XXH3-128 under the secret (2 words); the name's length,
 *   bit 63 set where the working directory follows, bit 62 where the lists follow;
 *   the name's bytes, the last word padded with zeros;
 *   [the working directory's XXH3-128 (2 words)]
 *   [the number of options, then each option's length and bytes;
 *    the number of headers, then each header's name (length, bytes) and text (its length,
 *    its XXH3-128 under the secret: 2 words);
 *    the number of name expressions, then each one's length and bytes]
 * Every variable part is preceded by its length or count, so two different requests are
 * never the same words. A NULL name is the empty one, as in the request key.
 */
#define _GNU_SOURCE /* clock_gettime, getpid under -std=c11 */
#include "core/map_key.h"

#include "base/bytes.h"
#include "base/hash.h"
#include "base/log.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define LAYOUT_WORDS 64 /* a request whose words fit is hashed in one shot */

#define FOLLOWS_CWD (UINT64_C(1) << 63)
#define FOLLOWS_LISTS (UINT64_C(1) << 62)

typedef struct layout {
    uint64_t w[LAYOUT_WORDS];
    size_t n;
    bool streaming; /* w overflowed once: every full w went to st */
    const kpc_map_secret *secret;
    XXH3_state_t st;
} layout;

static XXH128_hash_t hash128(const void *data, size_t len, const kpc_map_secret *secret)
{
    return XXH3_128bits_withSecret(data, len, secret->bytes, sizeof secret->bytes);
}

/* w full: it goes to the streaming state, whose XXH3-128 of all the words is the one-shot
 * hash's of them. */
static void spill(layout *l)
{
    if (!l->streaming) {
        XXH3_128bits_reset_withSecret(&l->st, l->secret->bytes, sizeof l->secret->bytes);
        l->streaming = true;
    }
    XXH3_128bits_update(&l->st, l->w, l->n * sizeof l->w[0]);
    l->n = 0;
}

static inline void put_word(layout *l, uint64_t v)
{
    if (l->n == LAYOUT_WORDS)
        spill(l);
    l->w[l->n++] = v;
}

static inline void put_digest(layout *l, const char *data, size_t len)
{
    XXH128_hash_t h = hash128(data, len, l->secret);
    put_word(l, h.low64);
    put_word(l, h.high64);
}

/* The last r (1..7) of a string's len bytes as a word's low bytes, the rest zero, read
 * without passing the string's end (which may be a page's last byte). */
static uint64_t tail_word(const uint8_t *s, size_t len, size_t r)
{
    const uint8_t *t = s + len - r;
    if (len >= 8) /* the 8 bytes that end the string, less the ones already written */
        return kpc__load_le(s + len - 8, 8) >> (8 * (8 - r));
    if (r >= 4) /* two reads of 4 that overlap where r < 8 */
        return kpc__load_le(t, 4) | kpc__load_le(t + r - 4, 4) << (8 * (r - 4));
    return (uint64_t)t[0] | (uint64_t)t[r / 2] << (8 * (r / 2)) | (uint64_t)t[r - 1] << (8 * (r - 1));
}

/* A string's bytes in words: the length is the caller's to put first. */
static inline void put_bytes(layout *l, const char *str, size_t len)
{
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    for (; i + 8 <= len; i += 8)
        put_word(l, kpc__load_le(s + i, 8));
    if (i < len)
        put_word(l, tail_word(s, len, len - i));
}

static void put_string(layout *l, const char *s)
{
    size_t len = strlen(s);
    put_word(l, len);
    put_bytes(l, s, len);
}

/* The whole layout of src into l, under secret; the caller hashes what is left in it. */
static inline void lay_out(layout *l, const kpc_map_secret *secret, const kpc_source *src, const uint8_t *cwd)
{
    l->secret = secret;
    l->n = 0;
    l->streaming = false;
    size_t code_len = src->code_len ? src->code_len : strlen(src->code);
    size_t name_len = src->name ? strlen(src->name) : 0;
    bool lists = (src->num_options | src->num_headers | src->num_name_expressions) != 0;
    put_word(l, code_len);
    put_digest(l, src->code, code_len);
    put_word(l, name_len | (cwd ? FOLLOWS_CWD : 0) | (lists ? FOLLOWS_LISTS : 0));
    put_bytes(l, src->name, name_len);
    if (cwd) {
        put_word(l, kpc__load_le(cwd, 8));
        put_word(l, kpc__load_le(cwd + 8, 8));
    }
    if (!lists)
        return;
    put_word(l, src->num_options);
    for (size_t i = 0; i < src->num_options; i++)
        put_string(l, src->options[i]);
    put_word(l, src->num_headers);
    for (size_t i = 0; i < src->num_headers; i++) {
        put_string(l, src->header_names[i]);
        size_t text_len = strlen(src->header_sources[i]);
        put_word(l, text_len);
        put_digest(l, src->header_sources[i], text_len);
    }
    put_word(l, src->num_name_expressions);
    for (size_t i = 0; i < src->num_name_expressions; i++)
        put_string(l, src->name_expressions[i]);
}

void kpc_map_key_compute(const kpc_map_secret *secret, const kpc_source *src, const uint8_t *cwd, kpc_key *out)
{
    layout l;
    lay_out(&l, secret, src, cwd);
    XXH128_hash_t h;
    if (l.streaming) {
        XXH3_128bits_update(&l.st, l.w, l.n * sizeof l.w[0]);
        h = XXH3_128bits_digest(&l.st);
    } else
        h = hash128(l.w, l.n * sizeof l.w[0], secret);
    memcpy(out->bytes, &h, sizeof h); /* as it lies: a map's key never leaves its process */
}

#ifdef KPC_TEST_HOOKS
size_t kpc_map_key_words(const kpc_map_secret *secret, const kpc_source *src, const uint8_t *cwd,
                         uint64_t *words, size_t cap)
{
    layout l;
    lay_out(&l, secret, src, cwd);
    if (l.streaming || l.n > cap)
        return 0;
    memcpy(words, l.w, l.n * sizeof l.w[0]);
    return l.n;
}
#endif

void kpc_map_key_secret_init(kpc_map_secret *secret)
{
    /* getrandom(2) blocks only before the kernel's pool is first seeded (early boot);
     * where it fails (no such call: a kernel older than 3.17), the secret is made of
     * what an input cannot choose either: this process's start time, pid and addresses */
    if (getrandom(secret->bytes, sizeof secret->bytes, 0) == (ssize_t)sizeof secret->bytes)
        return;
    struct {
        struct timespec now;
        pid_t pid;
        const void *stack, *heap;
    } seed;
    memset(&seed, 0, sizeof seed);
    clock_gettime(CLOCK_MONOTONIC, &seed.now);
    seed.pid = getpid();
    seed.stack = &seed;
    seed.heap = secret;
    XXH3_generateSecret(secret->bytes, sizeof secret->bytes, &seed, sizeof seed);
    KPC_LOG(KPC_LOG_DEBUG, "getrandom: %s: the in-memory map's secret is made from the time, "
            "the pid and addresses", strerror(errno));
}
