/*
 * hit.c - a record from another process answers only the request it was built from. The
 * key (XXH3-128) is made for speed, not against chosen inputs, and a service that
 * compiles its users' sources lets them choose. A code record that keeps its request
 * (the default) is compared with the asking request byte for byte where it lies in the
 * record, which costs a memcmp of the source; one that does not (KPC_KEEP_SOURCES=0, a
 * compile's log, a section of an older release) by the BLAKE2b-256 of its request that
 * every record keeps (kpc_request_digest), which costs about a nanosecond a byte of the
 * source here, so it is computed only where nothing else answers.
 */
#include "core/hit.h"
#include "core/cache.h"
#include "core/key.h"
#include "base/log.h"
#include "storage/request_codec.h"

/* A record that does not answer a's request: a miss, said with its key (its hex spelt
 * only here, never on a served hit), and the record freed. */
static bool refused(const kpc_context *ctx, const kpc_hit_request *a, kpc_record *rec, int level,
                    const char *why)
{
    char hex[KPC_KEY_HEX];
    kpc_key_hex(a->key, hex);
    KPC_LOG(level, "the record under key %s for %s %s", hex, ctx->target, why);
    kpc_record_free(rec);
    return false;
}

/* The request asked is another: counted, said at info, and a miss. */
static bool mismatch(kpc_context *ctx, const kpc_hit_request *a, kpc_record *rec)
{
    atomic_fetch_add_explicit(&ctx->cache->request_mismatches, 1, memory_order_relaxed);
    return refused(ctx, a, rec, KPC_LOG_INFO,
                   "was built from another request (a collision of the key): a miss, never served");
}

bool kpc_hit_serves(kpc_context *ctx, kpc_hit_request *a, kpc_record *rec)
{
    switch (rec->request_size ? kpc_request_compare(rec->request, rec->request_size, a->src)
                              : KPC_REQUEST_UNREAD) {
    case KPC_REQUEST_SAME: return true;
    case KPC_REQUEST_OTHER: return mismatch(ctx, a, rec);
    case KPC_REQUEST_UNREAD: break; /* its digest answers */
    }
    if (!a->known)
        a->known = kpc_request_digest(a->key, a->src, a->digest);
    if (!a->known)
        return true; /* a build without libsodium computes no digest: the key alone (docs/trust.md) */
    /* written before records kept their request's digest: nothing to compare, so it is
     * built once more, and the new record (with its digest) replaces it */
    if (!rec->has_digest)
        return refused(ctx, a, rec, KPC_LOG_DEBUG, "keeps no request digest (an older format): a miss, built again");
    return kpc_record_serves(rec, a->digest) ? true : mismatch(ctx, a, rec);
}
