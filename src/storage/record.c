/*
 * record.c - the record codec: a 256-byte little-endian header (magic, version, key,
 * kind, sizes, payload and header checksums, target, source name, compiler identity)
 * and the payload. Every reader, whatever the tier, checks a record whole here before
 * it is used: a record that fails is never trusted. Layout: docs/file-format.md.
 */
#define _GNU_SOURCE
#include "storage/record.h"
#include "platform/names.h"

#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

static void le64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void le32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint64_t rd64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd64((const uint8_t[8]){p[0], p[1], p[2], p[3]}); }

enum {
    H_MAGIC = 0, H_VERSION = 8, H_HSIZE = 12, H_KEY = 16, H_KIND = 32, H_FLAGS = 36, H_PAYLOAD = 40,
    H_CODE = 48, H_NAMES = 56, H_SUM = 64, H_CREATED = 72, H_TARGET = 80, H_SOURCE = 144,
    H_COMPILER = 224, H_REQUEST = 240, H_HSUM = 248
};
_Static_assert(H_HSUM + 8 == KPC_RECORD_HEADER, "the header layout must add up to KPC_RECORD_HEADER");

static void encode_header(uint8_t h[KPC_RECORD_HEADER], const kpc_record *r, uint64_t payload_sum)
{
    memset(h, 0, KPC_RECORD_HEADER);
    memcpy(h + H_MAGIC, KPC_STORE_MAGIC, 8);
    /* version 1 where there is no request section: older readers still take it */
    le32(h + H_VERSION, r->request_size ? KPC_STORE_VERSION : 1u);
    le32(h + H_HSIZE, KPC_RECORD_HEADER);
    memcpy(h + H_KEY, r->key.bytes, 16);
    le32(h + H_KIND, r->kind);
    le64(h + H_PAYLOAD, r->code_size + r->names_size + r->request_size);
    le64(h + H_CODE, r->code_size);
    le64(h + H_NAMES, r->names_size);
    le64(h + H_SUM, payload_sum);
    le64(h + H_CREATED, r->created_ns);
    memcpy(h + H_TARGET, r->target, strnlen(r->target, 63));
    memcpy(h + H_SOURCE, r->source_name, strnlen(r->source_name, 79));
    memcpy(h + H_COMPILER, r->compiler_id, 16);
    le64(h + H_REQUEST, r->request_size);
    le64(h + H_HSUM, XXH3_64bits(h, H_HSUM));
}

const char *kpc_record_decode_header(const uint8_t *h, size_t avail, kpc_record *r)
{
    if (avail < KPC_RECORD_HEADER)
        return "shorter than a header";
    if (memcmp(h + H_MAGIC, KPC_STORE_MAGIC, 8) != 0)
        return "bad magic (not a kpc record)";
    uint32_t version = rd32(h + H_VERSION);
    if (version != 1u && version != KPC_STORE_VERSION)
        return "unsupported format version";
    if (rd32(h + H_HSIZE) != KPC_RECORD_HEADER)
        return "bad header size";
    if (rd64(h + H_HSUM) != XXH3_64bits(h, H_HSUM))
        return "header checksum mismatch";
    memset(r, 0, sizeof *r);
    memcpy(r->key.bytes, h + H_KEY, 16);
    r->kind = rd32(h + H_KIND);
    r->code_size = rd64(h + H_CODE);
    r->names_size = rd64(h + H_NAMES);
    r->created_ns = rd64(h + H_CREATED);
    r->request_size = version >= 2u ? rd64(h + H_REQUEST) : 0; /* reserved (not checked) in 1 */
    if (r->code_size > KPC_RECORD_MAX || r->names_size > KPC_RECORD_MAX || r->request_size > KPC_RECORD_MAX ||
        r->code_size + r->names_size + r->request_size != rd64(h + H_PAYLOAD))
        return "inconsistent sizes";
    if (h[H_TARGET + 63] != '\0' || h[H_SOURCE + 79] != '\0')
        return "unterminated string field";
    memcpy(r->target, h + H_TARGET, 64);
    memcpy(r->source_name, h + H_SOURCE, 80);
    memcpy(r->compiler_id, h + H_COMPILER, 16);
    return NULL;
}

void kpc_record_header(uint8_t h[KPC_RECORD_HEADER], const kpc_record *r, const void *first,
                       const void *second)
{
    XXH3_state_t sum;
    XXH3_64bits_reset(&sum);
    XXH3_64bits_update(&sum, first, r->code_size);
    if (r->names_size)
        XXH3_64bits_update(&sum, second, r->names_size);
    if (r->request_size)
        XXH3_64bits_update(&sum, r->request, r->request_size);
    encode_header(h, r, XXH3_64bits_digest(&sum));
}

const char *kpc_record_take(void *buf, size_t size, const kpc_key *key, const char *target,
                            uint32_t kind, kpc_record *out)
{
    const char *why = kpc_record_decode_header(buf, size, out);
    if (why == NULL && key && memcmp(out->key.bytes, key->bytes, 16) != 0)
        why = "the key does not match the file name";
    if (why == NULL && out->kind != kind)
        why = "wrong record kind";
    if (why == NULL && target && strcmp(out->target, target) != 0)
        why = "the target does not match";
    uint64_t payload = out->code_size + out->names_size + out->request_size;
    if (why == NULL && size != KPC_RECORD_HEADER + payload)
        why = size < KPC_RECORD_HEADER + payload ? "truncated" : "trailing bytes";
    if (why == NULL &&
        XXH3_64bits((uint8_t *)buf + KPC_RECORD_HEADER, size - KPC_RECORD_HEADER) !=
            rd64((uint8_t *)buf + H_SUM))
        why = "payload checksum mismatch";
    if (why == NULL && kind == KPC_RECORD_CODE &&
        !kpc_names_valid((uint8_t *)buf + KPC_RECORD_HEADER + out->code_size, out->names_size))
        why = "bad lowered-name table";
    if (why == NULL && kind == KPC_RECORD_CODE && out->code_size == 0)
        why = "empty code object";
    if (why != NULL) {
        free(buf);
        out->payload = NULL;
        return why;
    }
    memmove(buf, (uint8_t *)buf + KPC_RECORD_HEADER, size - KPC_RECORD_HEADER);
    out->payload = buf;
    out->request = out->request_size ? (uint8_t *)buf + out->code_size + out->names_size : NULL;
    return NULL;
}

void kpc_record_free(kpc_record *r)
{
    free(r->payload);
    r->payload = NULL;
    r->request = NULL;
}
