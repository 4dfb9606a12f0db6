/*
 * key.c - the cache key: XXH3-128 of a canonical, length-prefixed serialization of
 * everything that changes the code object (format tag, platform, compiler identity,
 * normalized target, options in order, source name, source, headers in order, name
 * expressions in order). Each field is preceded by a tag and its length, so no two
 * different requests serialize alike ("ab"+"c" is not "a"+"bc").
 *
 * The key is computed by every request the in-memory map does not answer (a hit there
 * computes the map's key instead, core/map_key.h), so by every new process's first
 * request of a warm cache too. The large fields (the source and each header's text)
 * enter the serialization as their length and their own XXH3-128 digest, hashed in one
 * shot where they lie; the small fields are gathered in a stack buffer and hashed in one
 * shot too. Feeding the same bytes to a streaming XXH3 state instead costs ~120 ns more
 * per request and ~7% more per byte (libxxhash 0.8.1; tests/bench/bench_hit measured
 * 184 ns for a 1 KB source streamed against 67 ns for its one-shot hash). Only a request
 * whose small fields overflow the buffer (hundreds of options) falls back to the
 * streaming state.
 *
 * The fields every request of a context shares (format, platform, compiler identity,
 * target) are serialized once, when the context is made (kpc_key_prefix), and a request
 * whose fields fit the buffer is written without a bounds check per field: that halved
 * the serialization's cost (bench_hit --breakdown: kpc_key_compute of a 1 KB source
 * went from the hash of its bytes + ~80 ns to + ~35 ns). The bytes hashed are the same.
 *
 * The working directory (its path's XXH3-128) enters the key (field 'W') only where the
 * outcome may depend on it: reading the request decides that (core/request.h,
 * kpc_request_needs_cwd), but for a relative source name whose directory the compiler
 * searches, where it depends on the texts' saying "include" at all: a hit does not scan
 * for it, so the request key, which only a miss computes, decides it here
 * (kpc_key_compute_request). A request that does not depend on it pays no system call.
 * The files a compile reads are not in the key: a manifest under the key lists them
 * (core/manifest.h).
 */
#define _GNU_SOURCE /* memmem */
#include "core/key.h"
#include "core/request.h" /* a request read (kpc_key_compute_request); kpc_request_needs_cwd, for one not read */

#include "base/bytes.h"
#include "base/hash.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* -2: large fields by digest (-1 held them whole); -3: the hidden options out of the
 * compiler identity into a key identity of their own (kpc_key_identity); -4: files read
 * from disk in manifests under the key, the working directory where it matters (a record
 * of -3 under a key of a request with -I was built without a manifest: never reached) */
#define KEY_FORMAT "kpc-key-4"

#define KEY_BUF 1024 /* the small fields of a request that is hashed in one shot */
#define KEY_OPTS 32  /* options whose lengths the fast path remembers */

/* A hash's 16 bytes as the key holds them: canonical (big-endian), as every process and
 * every file name spells them. */
static void hash_bytes(uint8_t out[16], XXH128_hash_t h)
{
    XXH128_canonicalFromHash((XXH128_canonical_t *)out, h);
}

typedef struct serializer {
    uint8_t buf[KEY_BUF];
    size_t n;
    bool streaming; /* buf overflowed: everything goes to st */
    XXH3_state_t st;
} serializer;

static void emit(serializer *z, const void *data, size_t len)
{
    if (!z->streaming && z->n + len > sizeof z->buf) {
        XXH3_128bits_reset(&z->st);
        XXH3_128bits_update(&z->st, z->buf, z->n);
        z->streaming = true;
    }
    if (z->streaming)
        XXH3_128bits_update(&z->st, data, len);
    else if (len > 0) {
        memcpy(z->buf + z->n, data, len);
        z->n += len;
    }
}

/* A field's head at p: its tag, then its length (little-endian, whatever the host). */
static uint8_t *w_head(uint8_t *p, uint8_t tag, uint64_t len)
{
    p[0] = tag;
    kpc__store_le(p + 1, len, 8);
    return p + 9;
}

static void head(serializer *z, uint8_t tag, size_t len)
{
    uint8_t h[9];
    w_head(h, tag, len);
    emit(z, h, sizeof h);
}

static void put(serializer *z, uint8_t tag, const void *data, size_t len)
{
    head(z, tag, len);
    if (len > 0)
        emit(z, data, len);
}

static void put_str(serializer *z, uint8_t tag, const char *s)
{
    put(z, tag, s ? s : "", s ? strlen(s) : 0);
}

/* A large field: its length, then its XXH3-128 digest (canonical, big-endian bytes). */
static void put_digest(serializer *z, uint8_t tag, const void *data, size_t len)
{
    uint8_t c[16];
    hash_bytes(c, XXH3_128bits(data, len));
    head(z, tag, len);
    emit(z, c, sizeof c);
}

/* ---- the fast path: a buffer sized up front, no checks per field ------------------ */
static uint8_t *w_put(uint8_t *p, uint8_t tag, const void *data, size_t len)
{
    p = w_head(p, tag, len);
    memcpy(p, data, len);
    return p + len;
}

static uint8_t *w_str(uint8_t *p, uint8_t tag, const char *s)
{
    return w_put(p, tag, s ? s : "", s ? strlen(s) : 0);
}

static uint8_t *w_digest(uint8_t *p, uint8_t tag, const void *data, size_t len)
{
    p = w_head(p, tag, len);
    hash_bytes(p, XXH3_128bits(data, len));
    return p + 16;
}

void kpc_key_prefix_init(kpc_key_prefix *pre, const uint8_t compiler_id[16], const char *platform,
                         const char *target)
{
    pre->options = kpc_options_for(platform);
    pre->source_dir_searched = kpc_options_source_dir_searched(pre->options);
    memcpy(pre->compiler_id, compiler_id, 16);
    pre->platform = platform;
    pre->target = target;
    size_t need = 9 + strlen(KEY_FORMAT) + 9 + strlen(platform) + 9 + 16 + 9 + strlen(target);
    if (need > sizeof pre->bytes) {
        pre->len = SIZE_MAX; /* the serializer writes them: never for real names */
        return;
    }
    uint8_t *p = pre->bytes;
    p = w_str(p, 'F', KEY_FORMAT);
    p = w_str(p, 'P', platform);
    p = w_put(p, 'C', compiler_id, 16);
    p = w_str(p, 'T', target);
    pre->len = (size_t)(p - pre->bytes);
}

/* The whole serialization through the serializer, which streams when it overflows. */
static void compute_slow(const uint8_t compiler_id[16], const char *platform, const char *target,
                         const kpc_source *src, const uint8_t *cwd, kpc_key *out)
{
    serializer z;
    z.n = 0;
    z.streaming = false;
    put_str(&z, 'F', KEY_FORMAT);
    put_str(&z, 'P', platform);
    put(&z, 'C', compiler_id, 16);
    put_str(&z, 'T', target);
    head(&z, 'o', src->num_options); /* a count: the head alone */
    for (size_t i = 0; i < src->num_options; i++)
        put_str(&z, 'O', src->options[i]);
    put_str(&z, 'N', src->name);
    put_digest(&z, 'S', src->code, src->code_len ? src->code_len : strlen(src->code));
    head(&z, 'h', src->num_headers); /* a count: the head alone */
    for (size_t i = 0; i < src->num_headers; i++) {
        put_str(&z, 'H', src->header_names[i]);
        put_digest(&z, 'B', src->header_sources[i], strlen(src->header_sources[i]));
    }
    head(&z, 'e', src->num_name_expressions); /* a count: the head alone */
    for (size_t i = 0; i < src->num_name_expressions; i++)
        put_str(&z, 'E', src->name_expressions[i]);
    if (cwd)
        put(&z, 'W', cwd, 16);
    hash_bytes(out->bytes, z.streaming ? XXH3_128bits_digest(&z.st) : XXH3_128bits(z.buf, z.n));
}

static void compute_read(const kpc_key_prefix *pre, const kpc_source *src, const uint8_t *cwd, kpc_key *out)
{
    /* the size of what follows the prefix; a request that would not fit takes the
     * serializer (one strlen more per small field than the fast path: only there) */
    size_t prefix = pre->len;
    if (prefix > KEY_BUF) {
        compute_slow(pre->compiler_id, pre->platform, pre->target, src, cwd, out);
        return;
    }
    bool with_cwd = cwd != NULL;
    size_t name_len = src->name ? strlen(src->name) : 0;
    size_t need = prefix + 9 + 9 + name_len + 9 + 16 + 9 + 9 + (with_cwd ? 9 + 16 : 0);
    /* the options' lengths, measured once (a hit with 8 options spent a third of its
     * option cost measuring them twice) */
    size_t olen[KEY_OPTS];
    for (size_t i = 0; i < src->num_options && need <= KEY_BUF; i++) {
        size_t n = strlen(src->options[i]);
        if (i < KEY_OPTS)
            olen[i] = n;
        need += 9 + n;
    }
    for (size_t i = 0; i < src->num_headers && need <= KEY_BUF; i++)
        need += 9 + strlen(src->header_names[i]) + 9 + 16;
    for (size_t i = 0; i < src->num_name_expressions && need <= KEY_BUF; i++)
        need += 9 + strlen(src->name_expressions[i]);
    if (need > KEY_BUF) {
        compute_slow(pre->compiler_id, pre->platform, pre->target, src, cwd, out);
        return;
    }
    uint8_t buf[KEY_BUF], *p = buf;
    memcpy(p, pre->bytes, prefix);
    p += prefix;
    p = w_head(p, 'o', src->num_options); /* a count: the head alone */
    for (size_t i = 0; i < src->num_options; i++)
        p = i < KEY_OPTS ? w_put(p, 'O', src->options[i], olen[i]) : w_str(p, 'O', src->options[i]);
    p = w_put(p, 'N', src->name ? src->name : "", name_len);
    p = w_digest(p, 'S', src->code, src->code_len ? src->code_len : strlen(src->code));
    p = w_head(p, 'h', src->num_headers);
    for (size_t i = 0; i < src->num_headers; i++) {
        p = w_str(p, 'H', src->header_names[i]);
        p = w_digest(p, 'B', src->header_sources[i], strlen(src->header_sources[i]));
    }
    p = w_head(p, 'e', src->num_name_expressions);
    for (size_t i = 0; i < src->num_name_expressions; i++)
        p = w_str(p, 'E', src->name_expressions[i]);
    if (with_cwd)
        p = w_put(p, 'W', cwd, 16);
    hash_bytes(out->bytes, XXH3_128bits(buf, (size_t)(p - buf)));
}

#ifdef KPC_TEST_HOOKS
static kpc_key test_key;
static bool test_key_set;

void kpc_key_test_override(const kpc_key *key)
{
    test_key_set = key != NULL;
    if (key)
        test_key = *key;
}
#endif

/* the key of a request read once (request.c), the working directory's identity in it where
 * that counts (cwd) */
void kpc_key_compute_read(const kpc_key_prefix *pre, const kpc_source *src, const uint8_t *cwd, kpc_key *out)
{
    compute_read(pre, src, cwd, out);
#ifdef KPC_TEST_HOOKS
    if (test_key_set)
        *out = test_key;
#endif
}

bool kpc_key_texts_include(const kpc_source *src)
{
    static const char word[] = "include";
    size_t len = src->code_len ? src->code_len : strlen(src->code);
    if (memmem(src->code, len, word, sizeof word - 1) != NULL)
        return true;
    for (size_t i = 0; i < src->num_headers; i++)
        if (strstr(src->header_sources[i], word) != NULL)
            return true;
    return false;
}

void kpc_key_compute_request(const kpc_key_prefix *pre, struct kpc_normalized_request *req)
{
    if (req->cwd_pending && kpc_key_texts_include(req->src)) {
        req->needs_cwd = req->cwd_bound = true;
        kpc__cwd_digest(req->cwd);
    }
    kpc_key_compute_read(pre, req->src, req->needs_cwd ? req->cwd : NULL, &req->key);
}

kpc_status kpc_key_compute_prefixed(const kpc_key_prefix *pre, const kpc_source *src, kpc_key *out)
{
    uint8_t cwd[16];
    bool with_cwd = kpc_request_needs_cwd(src, pre->options);
    if (with_cwd)
        kpc__cwd_digest(cwd);
    kpc_key_compute_read(pre, src, with_cwd ? cwd : NULL, out);
    return KPC_OK;
}

kpc_status kpc_key_compute(const uint8_t compiler_id[16], const char *platform, const char *target,
                           const kpc_source *src, kpc_key *out)
{
    kpc_key_prefix pre;
    kpc_key_prefix_init(&pre, compiler_id, platform, target);
    return kpc_key_compute_prefixed(&pre, src, out);
}

void kpc_key_identity(const kpc_platform *pf, const uint8_t compiler_id[16], uint8_t key_id[16])
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, compiler_id, 16);
    for (const char *const *name = pf->key_env; name && *name; name++) {
        const char *value = getenv(*name);
        XXH3_128bits_update(&st, *name, strlen(*name) + 1);
        /* unset and empty differ: a marker byte, then the value with its NUL */
        XXH3_128bits_update(&st, value ? "=" : "-", 1);
        if (value)
            XXH3_128bits_update(&st, value, strlen(value) + 1);
    }
    XXH128_canonicalFromHash((XXH128_canonical_t *)key_id, XXH3_128bits_digest(&st));
}

void kpc_key_hex(const kpc_key *key, char out[KPC_KEY_HEX])
{
    kpc__hex(key->bytes, sizeof key->bytes, out);
}

bool kpc_key_parse(const char *hex, kpc_key *out)
{
    return kpc__unhex(hex, out->bytes, sizeof out->bytes);
}
