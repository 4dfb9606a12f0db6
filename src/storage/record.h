/*
 * record.h - a record: one code object (or one compile-failure log) with the header
 * that lets any reader check it whole before trusting it (storage/record.c). The format
 * is the same wherever a record lives (disk tree, pack, cluster store):
 * docs/file-format.md.
 */
#ifndef KPC_STORAGE_RECORD_H
#define KPC_STORAGE_RECORD_H

#include "base/util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KPC_STORE_MAGIC "KPCOBJ\x00\x01"
#define KPC_STORE_VERSION 4u /* the newest version read and written: 2 adds the request
                              * section, 3 the flags, 4 the request digest; each record is written with the oldest
                              * version that can hold it (1: no request section, no flags), so
                              * older readers still take what they can read, and refuse a
                              * record whose flags they would not know to heed */
#define KPC_RECORD_HEADER 256u        /* bytes of header before the payload */
#define KPC_RECORD_MAX (1ull << 30)   /* the largest code, names or log part accepted */
/* A taken record's payload lies at this alignment (malloc's), so a code object handed
 * out by address is aligned as a copy of it would be, wherever it lay in what was read. */
#define KPC_RECORD_ALIGN _Alignof(max_align_t)
/* MANIFEST (core/manifest.h): under a request key, the entry lists of the files its
 * compiles read, each leading to the key of a CODE or LOG record */
enum kpc_record_kind { KPC_RECORD_CODE = 1, KPC_RECORD_LOG = 2, KPC_RECORD_MANIFEST = 3 };
/* Flags of a CODE record (version 3). BITCODE: the code is LLVM bitcode, what a
 * relocatable-device-code compile (hipRTC -fgpu-rdc, ROCm 5.3 and later) gives back, for
 * a link step: never a code object to load. */
#define KPC_RECORD_BITCODE 1u
#define KPC_RECORD_FLAGS_KNOWN KPC_RECORD_BITCODE

typedef struct kpc_record {
    kpc_key key;
    uint32_t kind;
    uint32_t flags; /* KPC_RECORD_BITCODE or 0 */
    uint64_t created_ns;
    char target[64];
    char source_name[80]; /* 48 bytes with its NUL from version 4 on */
    /* The BLAKE2b-256 of the request the record was built from (kpc_request_digest),
     * kept from version 4 on (has_digest); a hit from another process is served only
     * when it is the asking request's (kpc_record_serves) */
    bool has_digest;
    uint8_t request_digest[32];
    uint8_t compiler_id[16];
    /* code, names, then the request section (CODE), the log text (LOG), the manifest
     * (MANIFEST): inside block, the allocation the record was read in (taken where it
     * lies, moved only to reach KPC_RECORD_ALIGN: kpc_record_take_at) */
    void *payload;
    void *block; /* owned (kpc_record_free); NULL when payload is the caller's */
    uint64_t code_size;
    uint64_t names_size;
    /* The request section (storage/request_codec.h: what `kpc replay` rebuilds from), the
     * last part of the payload: request_size bytes at request (0: none). Writing: the
     * caller's bytes, not owned, written after first and second. Reading: points into
     * payload (after the names), valid while payload is. */
    uint64_t request_size;
    const void *request;
} kpc_record;
void kpc_record_free(kpc_record *r);

/* The header of r whose payload is first (r->code_size bytes) then second
 * (r->names_size bytes; may be NULL when 0) then r->request (r->request_size bytes): both
 * checksums computed here. A writer writes those three parts after the header. */
void kpc_record_header(uint8_t h[KPC_RECORD_HEADER], const kpc_record *r, const void *first,
                       const void *second);
/* The whole record (header, then first, second and r->request) in one buffer (*buf,
 * malloc'd, *size bytes): what a tier stores as one value. KPC_E_NOMEM. */
kpc_status kpc_record_encode(const kpc_record *r, const void *first, const void *second, void **buf,
                             size_t *size);
/* Decode and check a header alone (avail bytes at h); NULL when good, else why not. */
const char *kpc_record_decode_header(const uint8_t *h, size_t avail, kpc_record *r);
/* Check a whole record (header + payload, size bytes at buf, malloc'd) against what
 * the reader asked for (key and target may be NULL: not compared) and take it where it
 * lies: NULL and *out, out->block = buf and out->payload inside it, when good; else buf
 * is freed and the reason returned. */
const char *kpc_record_take(void *buf, size_t size, const kpc_key *key, const char *target,
                            uint32_t kind, kpc_record *out);
/* The same checks, for a record at buf that lies inside the allocation block (which may
 * hold more before and after it): taken as kpc_record_take takes it when good
 * (out->block = block), and left as it was, still the caller's, when not. The payload
 * moves only to reach KPC_RECORD_ALIGN, by less than that, into its own header's room. */
const char *kpc_record_take_at(void *block, void *buf, size_t size, const kpc_key *key, const char *target,
                               uint32_t kind, kpc_record *out);

/* Whether r may answer the request whose digest (kpc_request_digest) is want: the one
 * comparison every hit from outside the process passes, whatever tier it came from. A
 * record that keeps no digest (written before version 4, or without libsodium) is served
 * as before: docs/file-format.md. */
bool kpc_record_serves(const kpc_record *r, const uint8_t want[32]);

#endif /* KPC_STORAGE_RECORD_H */
