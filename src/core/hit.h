/*
 * hit.h - the one check every hit from another process passes, whatever tier answered
 * (the disk tree, the shared directory, a pack, the cluster): the record must have been
 * built from the request asked (core/hit.c; docs/trust.md, "A hit is the request's").
 */
#ifndef KPC_CORE_HIT_H
#define KPC_CORE_HIT_H

#include "core/context.h"
#include "storage/record.h"

#include <stdbool.h>
#include <stdint.h>

/* The request asked, its digest computed on the first record that keeps one: an
 * in-memory hit, or a record of an older format, never pays for it. */
typedef struct kpc_hit_request {
    const kpc_key *key;
    const kpc_source *src;
    bool known;
    uint8_t digest[32];
} kpc_hit_request;

/* Whether rec, read from a tier, may answer the request: false when it was built from
 * another request under the same key (a collision, chosen or not): then counted
 * (request_mismatches), logged at info with the key, and rec freed. */
bool kpc_hit_serves(kpc_context *ctx, kpc_hit_request *a, kpc_record *rec);

#endif /* KPC_CORE_HIT_H */
