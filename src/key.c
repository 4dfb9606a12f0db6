/*
 * key.c - the cache key: XXH3-128 of a canonical, length-prefixed serialization of
 * everything that changes the code object (format tag, platform, compiler identity,
 * normalized target, options in order, source name, source, headers in order, name
 * expressions in order). Each field is preceded by a tag and its length, so no two
 * different requests serialize alike ("ab"+"c" is not "a"+"bc").
 *
 * The key is computed on every kpc_program_get, hits included, so its cost is most of
 * a hit's. The large fields (the source and each header's text) enter the serialization
 * as their length and their own XXH3-128 digest, hashed in one shot where they lie; the
 * small fields are gathered in a stack buffer and hashed in one shot too. Feeding the
 * same bytes to a streaming XXH3 state instead costs ~120 ns more per request and ~7%
 * more per byte (libxxhash 0.8.1; tests/bench/bench_hit measured 184 ns for a 1 KB
 * source streamed against 67 ns for its one-shot hash). Only a request whose small
 * fields overflow the buffer (hundreds of options) falls back to the streaming state.
 */
#include "kpc_internal.h"

#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

/* -2: large fields by digest (the serialization of -1 held them whole) */
#define KEY_FORMAT "kpc-key-2"

typedef struct serializer {
    uint8_t buf[1024];
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

static void head(serializer *z, uint8_t tag, size_t len)
{
    uint8_t h[9];
    uint64_t n = len;
    h[0] = tag;
    for (int i = 0; i < 8; i++)
        h[1 + i] = (uint8_t)(n >> (8 * i)); /* little-endian, whatever the host */
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
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
    head(z, tag, len);
    emit(z, c.digest, sizeof c.digest);
}

kpc_status kpc_key_compute(const uint8_t compiler_id[16], const char *platform, const char *target,
                           const kpc_source *src, kpc_key *out)
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
    XXH128_hash_t h = z.streaming ? XXH3_128bits_digest(&z.st) : XXH3_128bits(z.buf, z.n);
    XXH128_canonicalFromHash((XXH128_canonical_t *)out->bytes, h);
    return KPC_OK;
}

void kpc_key_hex(const kpc_key *key, char out[KPC_KEY_HEX])
{
    kpc__hex(key->bytes, sizeof key->bytes, out);
}

bool kpc_key_parse(const char *hex, kpc_key *out)
{
    for (int i = 0; i < 16; i++) {
        uint8_t b = 0;
        for (int j = 0; j < 2; j++) {
            char c = hex[2 * i + j];
            b <<= 4;
            if (c >= '0' && c <= '9')
                b |= (uint8_t)(c - '0');
            else if (c >= 'a' && c <= 'f')
                b |= (uint8_t)(c - 'a' + 10);
            else
                return false;
        }
        out->bytes[i] = b;
    }
    return hex[32] == '\0';
}
