/*
 * manifest_seen.c - the manifest under a request's key as that request sees it
 * (core/manifest_seen.h): read and matched once by each look of core/resolve.c; the
 * request's build records into what that look read (core/manifest_record.c), not read a
 * second time. Each look enters core/manifest.c once.
 *
 * A manifest's record carries, as its second part, the whole record of its newest
 * entry's outcome (written by core/resolve.c up to KPC_MANIFEST_CARRY_MAX): a hit on that
 * entry, the usual one, takes the outcome from there and opens no second record. It is
 * checked as a record read from a tier is (storage/record.h: its key, target, kind and
 * checksum); one that is not the matching entry's, or fails a check, leaves the hit to
 * read the outcome's own record, which every writable tier keeps as before. A reader
 * that predates the second part reads the manifest from the first and never sees it.
 * The carried record is taken where it was read. Under a manifest of one entry (the
 * usual one) neither part is copied nor moved: the manifest's part, kept with the
 * program as its files, stays before the record in the one allocation the program frees.
 * Under several, the entry's files are copied out and the record moves to the head of
 * that allocation, which shrinks to it (manifest.h, storage/record.h).
 */
#include "core/manifest_seen.h"
#include "core/cache.h"
#include "base/log.h"
#include "storage/tier.h"

#include <stdlib.h>
#include <string.h>

void kpc_seen_manifest_free(kpc_seen_manifest *sm)
{
    kpc_manifest_free(&sm->m);
    sm->read = false;
}

/* The outcome a manifest's record carries: its whole record's bytes in the allocation
 * they were read in, and the tier the manifest came from. */
typedef struct carried {
    void *block;
    void *bytes;
    size_t size;
    kpc_tier *from;
} carried;

/* Read the manifest under key into sm (what it held before is freed first) and, with
 * match, find the entry whose files match now (manifest.h: kpc_manifest_lookup); the
 * outcome its record carries into *c where c is not NULL. */
static void look_up_manifest(kpc_context *ctx, const kpc_key *key, kpc_seen_manifest *sm,
                             kpc_manifest_match_out *match, carried *c)
{
    if (sm->m.block) /* what an earlier look held (an empty one needs no call) */
        kpc_manifest_free(&sm->m);
    sm->read = true;
    if (match)
        match->found = false;
    kpc_record rec;
    kpc_tier *from;
    kpc_tiers *tiers = &ctx->cache->tiers;
    if (kpc_tier_read(tiers, key, ctx->target, KPC_RECORD_MANIFEST, &rec, &from) != KPC_OK)
        return;
    /* accepted as read (a hit of its tier, copied above it): a manifest answers no
     * request by itself, and every outcome it leads to is checked against the request */
    kpc_tier_accept(tiers, from, &rec);
    /* the two parts in the one allocation they were read in: the manifest's bytes, then
     * the carried record, which a match hands back */
    size_t tail = c ? rec.names_size : 0;
    kpc_status s = kpc_manifest_lookup(rec.block, rec.payload, rec.code_size, tail, &sm->m, match);
    rec.block = rec.payload = NULL; /* taken */
    if (c && match->block)
        *c = (carried){match->block, match->tail, tail, from};
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

void kpc_seen_manifest_look(kpc_context *ctx, const kpc_key *key, kpc_seen_manifest *sm)
{
    look_up_manifest(ctx, key, sm, NULL, NULL);
}

/* The carried outcome, refused: the list takes the allocation its bytes lie in, or it
 * goes. */
static void drop_carried(kpc_manifest_match_out *e, void *block)
{
    if (e->borrowed)
        e->deps->block = block;
    else
        free(block);
}

kpc_status kpc_seen_manifest_read(kpc_context *ctx, const kpc_key *key, kpc_seen_manifest *sm,
                                  kpc_record *rec, kpc_deps **deps, kpc_tier **from)
{
    kpc_manifest_match_out e;
    carried c = {NULL, NULL, 0, NULL};
    look_up_manifest(ctx, key, sm, &e, &c);
    if (!e.found)
        return KPC_E_NOT_FOUND;
    uint32_t kind = e.outcome == KPC_MANIFEST_LOG ? KPC_RECORD_LOG : KPC_RECORD_CODE;
    /* the carried outcome, where it is the matching entry's (not another entry's, not
     * damaged) */
    const char *why =
        c.block ? kpc_record_take_at(c.block, c.bytes, c.size, &e.object, ctx->target, kind, rec) : "";
    if (why == NULL) { /* where borrowed, the list's bytes stay in what becomes the
                        * program's allocation (core/program.h) */
        *deps = e.deps;
        *from = c.from;
        return KPC_OK;
    }
    if (c.block) {
        KPC_LOG(KPC_LOG_DEBUG, "the outcome a manifest carries for %s is not taken (%s): its own record "
                "is read", ctx->target, why);
        drop_carried(&e, c.block);
    }
    kpc_status s = kpc_tier_read(&ctx->cache->tiers, &e.object, ctx->target, kind, rec, from);
    if (s != KPC_OK)
        kpc_manifest_deps_free(e.deps);
    else
        *deps = e.deps;
    return s;
}
