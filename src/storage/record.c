/*
 * record.c - the record codec: a 256-byte little-endian header (magic, version, key,
 * kind, sizes, payload and header checksums, target, source name, request digest (version
 * 4), compiler identity)
 * and the payload, read and written through base/bytes.h. The flags say what a CODE
 * record's bytes are (LLVM bitcode, never loaded as a module). Every reader, whatever the tier, checks a record whole here before
 * it is used: a record that fails is never trusted. Layout: docs/file-format.md.
 */
#define _GNU_SOURCE
#include "storage/record.h"
#include "base/hash.h"
#include "base/bytes.h"
#include "platform/names.h"

#include <bsd/string.h>
#include <stdlib.h>
#include <string.h>

enum {
    H_MAGIC = 0, H_VERSION = 8, H_HSIZE = 12, H_KEY = 16, H_KIND = 32, H_FLAGS = 36, H_PAYLOAD = 40,
    H_CODE = 48, H_NAMES = 56, H_SUM = 64, H_CREATED = 72, H_TARGET = 80, H_SOURCE = 144,
    H_DIGEST = 192, /* version 4: the source name takes 48 bytes, the request digest 32 */
    H_COMPILER = 224, H_REQUEST = 240, H_HSUM = 248
};
_Static_assert(H_HSUM + 8 == KPC_RECORD_HEADER, "the header layout must add up to KPC_RECORD_HEADER");

/* The fields in the order of the enum above; the cursor's position is checked against it
 * at the two checksums, so the enum and the code cannot drift apart. */
static void encode_header(uint8_t h[KPC_RECORD_HEADER], const kpc_record *r, uint64_t payload_sum)
{
    kpc__writer w;
    kpc__writer_fixed(&w, h, KPC_RECORD_HEADER);
    kpc__put_bytes(&w, KPC_STORE_MAGIC, 8);
    /* the oldest version that holds the record: older readers still take it, and one
     * with flags (3) is refused by readers that would not heed them */
    kpc__put_u32(&w, r->has_digest ? 4u : r->flags ? 3u : r->request_size ? 2u : 1u);
    kpc__put_u32(&w, KPC_RECORD_HEADER);
    kpc__put_bytes(&w, r->key.bytes, 16);
    kpc__put_u32(&w, r->kind);
    kpc__put_u32(&w, r->flags);
    kpc__put_u64(&w, r->code_size + r->names_size + r->request_size);
    kpc__put_u64(&w, r->code_size);
    kpc__put_u64(&w, r->names_size);
    kpc__put_u64(&w, payload_sum);
    kpc__put_u64(&w, r->created_ns);
    kpc__put_fixed_str(&w, r->target, 64);
    if (r->has_digest) {
        char name[H_DIGEST - H_SOURCE];
        strlcpy(name, r->source_name, sizeof name); /* the name is for people: cut short */
        kpc__put_fixed_str(&w, name, sizeof name);
        kpc__put_bytes(&w, r->request_digest, 32);
    } else {
        kpc__put_fixed_str(&w, r->source_name, H_COMPILER - H_SOURCE);
    }
    kpc__put_bytes(&w, r->compiler_id, 16);
    kpc__put_u64(&w, r->request_size);
    kpc__put_u64(&w, w.len == H_HSUM ? XXH3_64bits(h, H_HSUM) : 0);
    (void)kpc__writer_ok(&w); /* a fixed layout into its own size: cannot fail (checked above) */
}

const char *kpc_record_decode_header(const uint8_t *h, size_t avail, kpc_record *r)
{
    if (avail < KPC_RECORD_HEADER)
        return "shorter than a header";
    kpc__reader in;
    kpc__reader_init(&in, h, KPC_RECORD_HEADER);
    if (memcmp(kpc__get_bytes(&in, 8), KPC_STORE_MAGIC, 8) != 0)
        return "bad magic (not a kpc record)";
    uint32_t version = kpc__get_u32(&in);
    if (version < 1u || version > KPC_STORE_VERSION)
        return "unsupported format version";
    if (kpc__get_u32(&in) != KPC_RECORD_HEADER)
        return "bad header size";
    kpc__reader sum = in;
    kpc__get_skip(&sum, H_HSUM - sum.off);
    if (kpc__get_u64(&sum) != XXH3_64bits(h, H_HSUM))
        return "header checksum mismatch";
    memset(r, 0, sizeof *r);
    kpc__get_copy(&in, r->key.bytes, 16);
    r->kind = kpc__get_u32(&in);
    uint32_t flags = kpc__get_u32(&in);
    r->flags = version >= 3u ? flags : 0; /* reserved (not checked) before 3 */
    uint64_t payload = kpc__get_u64(&in);
    r->code_size = kpc__get_u64(&in);
    r->names_size = kpc__get_u64(&in);
    kpc__get_skip(&in, 8); /* the payload's checksum: kpc_record_take checks it */
    r->created_ns = kpc__get_u64(&in);
    kpc__get_fixed_str(&in, r->target, sizeof r->target);
    if (version >= 4u) {
        char name[H_DIGEST - H_SOURCE];
        kpc__get_fixed_str(&in, name, sizeof name);
        strlcpy(r->source_name, name, sizeof r->source_name);
    } else {
        kpc__get_fixed_str(&in, r->source_name, sizeof r->source_name);
    }
    bool strings_ok = !in.bad;
    if (version >= 4u) {
        kpc__get_copy(&in, r->request_digest, 32);
        r->has_digest = true;
    }
    kpc__get_copy(&in, r->compiler_id, 16);
    uint64_t request = kpc__get_u64(&in);
    r->request_size = version >= 2u ? request : 0; /* reserved (not checked) in 1 */
    if (r->code_size > KPC_RECORD_MAX || r->names_size > KPC_RECORD_MAX || r->request_size > KPC_RECORD_MAX ||
        r->code_size + r->names_size + r->request_size != payload)
        return "inconsistent sizes";
    if (!strings_ok)
        return "unterminated string field";
    if ((r->flags & ~KPC_RECORD_FLAGS_KNOWN) != 0 || (r->flags != 0 && r->kind != KPC_RECORD_CODE))
        return "unknown flags";
    return NULL;
}

/* The payload's checksum, as the header holds it. */
static uint64_t payload_sum_of(const uint8_t *h)
{
    kpc__reader in;
    kpc__reader_init(&in, h, KPC_RECORD_HEADER);
    kpc__get_skip(&in, H_SUM);
    return kpc__get_u64(&in);
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

kpc_status kpc_record_encode(const kpc_record *r, const void *first, const void *second, void **buf,
                             size_t *size)
{
    size_t n = KPC_RECORD_HEADER + r->code_size + r->names_size + r->request_size;
    uint8_t *b = malloc(n);
    if (b == NULL)
        return KPC_E_NOMEM;
    kpc_record_header(b, r, first, second);
    uint8_t *p = b + KPC_RECORD_HEADER;
    memcpy(p, first, r->code_size);
    if (r->names_size)
        memcpy(p + r->code_size, second, r->names_size);
    if (r->request_size)
        memcpy(p + r->code_size + r->names_size, r->request, r->request_size);
    *buf = b;
    *size = n;
    return KPC_OK;
}

const char *kpc_record_take_at(void *block, void *buf, size_t size, const kpc_key *key, const char *target,
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
    uint8_t *at = (uint8_t *)buf + KPC_RECORD_HEADER;
    if (why == NULL && XXH3_64bits(at, payload) != payload_sum_of(buf))
        why = "payload checksum mismatch";
    if (why == NULL && kind == KPC_RECORD_CODE && !kpc_names_valid(at + out->code_size, out->names_size))
        why = "bad lowered-name table";
    if (why == NULL && kind == KPC_RECORD_CODE && out->code_size == 0)
        why = "empty code object";
    out->payload = out->block = NULL;
    out->request = NULL;
    if (why != NULL)
        return why;
    /* the header, decoded, has room for the payload to reach malloc's alignment */
    size_t skew = (uintptr_t)at % KPC_RECORD_ALIGN;
    if (skew) {
        memmove(at - skew, at, payload);
        at -= skew;
    }
    out->block = block;
    out->payload = at;
    out->request = out->request_size ? at + out->code_size + out->names_size : NULL;
    return NULL;
}

const char *kpc_record_take(void *buf, size_t size, const kpc_key *key, const char *target,
                            uint32_t kind, kpc_record *out)
{
    const char *why = kpc_record_take_at(buf, buf, size, key, target, kind, out);
    if (why != NULL)
        free(buf);
    return why;
}

bool kpc_record_serves(const kpc_record *r, const uint8_t want[32])
{
    return !r->has_digest || want == NULL || memcmp(r->request_digest, want, 32) == 0;
}

void kpc_record_free(kpc_record *r)
{
    free(r->block);
    r->block = r->payload = NULL;
    r->request = NULL;
}
