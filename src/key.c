/*
 * key.c - the cache key: XXH3-128 of a canonical, length-prefixed serialization of
 * everything that changes the code object (format tag, platform, compiler identity,
 * normalized target, options in order, source name, source, headers in order, name
 * expressions in order). Each field is preceded by a tag and its length, so no two
 * different requests serialize alike ("ab"+"c" is not "a"+"bc").
 */
#include "kpc_internal.h"

#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define KEY_FORMAT "kpc-key-1"

static void put(XXH3_state_t *st, uint8_t tag, const void *data, size_t len)
{
    uint8_t head[9];
    uint64_t n = len;
    head[0] = tag;
    for (int i = 0; i < 8; i++)
        head[1 + i] = (uint8_t)(n >> (8 * i)); /* little-endian, whatever the host */
    XXH3_128bits_update(st, head, sizeof head);
    if (len > 0)
        XXH3_128bits_update(st, data, len);
}

static void put_str(XXH3_state_t *st, uint8_t tag, const char *s)
{
    put(st, tag, s ? s : "", s ? strlen(s) : 0);
}

kpc_status kpc_key_compute(const uint8_t compiler_id[16], const char *platform, const char *target,
                           const kpc_source *src, kpc_key *out)
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    put_str(&st, 'F', KEY_FORMAT);
    put_str(&st, 'P', platform);
    put(&st, 'C', compiler_id, 16);
    put_str(&st, 'T', target);
    put(&st, 'o', NULL, src->num_options);
    for (size_t i = 0; i < src->num_options; i++)
        put_str(&st, 'O', src->options[i]);
    put_str(&st, 'N', src->name);
    put(&st, 'S', src->code, src->code_len ? src->code_len : strlen(src->code));
    put(&st, 'h', NULL, src->num_headers);
    for (size_t i = 0; i < src->num_headers; i++) {
        put_str(&st, 'H', src->header_names[i]);
        put_str(&st, 'B', src->header_sources[i]);
    }
    put(&st, 'e', NULL, src->num_name_expressions);
    for (size_t i = 0; i < src->num_name_expressions; i++)
        put_str(&st, 'E', src->name_expressions[i]);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
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
