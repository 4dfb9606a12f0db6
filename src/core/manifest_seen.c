/*
 * manifest_seen.c - the manifest under a request's key as that request sees it
 * (core/manifest_seen.h): read and matched once by each look of core/resolve.c, and
 * recorded into by the request's build from what that look read, not read a second time.
 * Each call enters core/manifest.c once.
 */
#include "core/manifest_seen.h"
#include "core/cache.h"
#include "base/log.h"
#include "storage/tier.h"

#include <stdlib.h>

void kpc_seen_manifest_free(kpc_seen_manifest *sm)
{
    kpc_manifest_free(&sm->m);
    sm->read = false;
}

/* Read the manifest under key into sm (what it held before is freed first) and, with
 * match, find the entry whose files match now (manifest.h: kpc_manifest_lookup). */
static void look_up_manifest(kpc_context *ctx, const kpc_key *key, kpc_seen_manifest *sm,
                             kpc_manifest_match_out *match)
{
    if (sm->m.bytes) /* what an earlier look held (an empty one needs no call) */
        kpc_manifest_free(&sm->m);
    sm->read = true;
    if (match)
        match->found = false;
    kpc_record rec;
    /* accepted as read (a hit of its tier, copied above it): a manifest answers no
     * request by itself, and every outcome it leads to is checked against the request */
    if (kpc_tier_read(&ctx->cache->tiers, key, ctx->target, KPC_RECORD_MANIFEST, &rec, NULL) != KPC_OK)
        return;
    kpc_status s = kpc_manifest_lookup(rec.payload, rec.code_size, &sm->m, match);
    rec.payload = NULL; /* taken */
    /* a match freed the manifest: a build after it (its record refused) reads it again;
     * one unreadable or of an older format is replaced by what the build records */
    sm->read = !(s == KPC_OK && match && match->found);
    if (s == KPC_E_NOT_FOUND)
        KPC_LOG(KPC_LOG_DEBUG, "a manifest of an older format for %s: a miss, rewritten by the next "
                "build", ctx->target);
    else if (s == KPC_E_CORRUPT) {
        char hex[KPC_KEY_HEX];
        kpc_key_hex(key, hex);
        KPC_LOG(KPC_LOG_WARN, "manifest %s for %s is malformed: ignored (rewritten by the next build)",
                hex, ctx->target);
    }
}

kpc_status kpc_seen_manifest_read(kpc_context *ctx, const kpc_key *key, kpc_seen_manifest *sm,
                                  kpc_record *rec, kpc_deps **deps, kpc_tier **from)
{
    kpc_manifest_match_out e;
    look_up_manifest(ctx, key, sm, &e);
    if (!e.found)
        return KPC_E_NOT_FOUND;
    uint32_t kind = e.outcome == KPC_MANIFEST_LOG ? KPC_RECORD_LOG : KPC_RECORD_CODE;
    kpc_status s = kpc_tier_read(&ctx->cache->tiers, &e.object, ctx->target, kind, rec, from);
    if (s != KPC_OK)
        kpc_manifest_deps_free(e.deps);
    else
        *deps = e.deps;
    return s;
}

kpc_status kpc_seen_manifest_record(kpc_context *ctx, const kpc_key *key, kpc_seen_manifest *sm,
                                    const kpc_manifest_build *b, uint32_t outcome, kpc_deps **deps,
                                    kpc_key *object, void **buf, size_t *size)
{
    if (!sm->read)
        look_up_manifest(ctx, key, sm, NULL);
    /* nothing held (no manifest, or one unreadable): the new one has this entry alone */
    kpc_status s = kpc_manifest_record_build(&sm->m, key, b, outcome, deps, object, buf, size);
    sm->read = false;
    return s;
}
