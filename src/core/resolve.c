/*
 * resolve.c - a miss in the context's map, resolved through the host index, the storage
 * tiers (storage/tier.h) and the compiler.
 *
 *   host index  READY            -> read the record from the tiers
 *               BUILD (claimed)  -> a valid record in a tier? publish READY; else ask the
 *                                   coordinating tier (if any); else compile, write the
 *                                   record, publish READY (or FAILED + log record;
 *                                   UNSTORED when no tier stored it; ABANDON when the
 *                                   failure was this process's, not the source's)
 *               FAILED           -> the builder's log, from its log record (its log gone:
 *                                   claim the slot and compile again)
 *               SELF             -> built elsewhere but not storable (disk full or
 *                                   read-only): compile for ourselves, in parallel
 *   no index    -> the same without the coordination: read the record, else compile
 *   device      -> load the module; an image the runtime refuses is removed from the
 *                  tiers and the index and built once more (the stale-cache bulwark)
 *
 * Files read from disk (core/manifest.h). A compile that read none stores its record
 * under the request key, as before manifests. One that read some stores it under its
 * object key (the request key mixed with each file's path and digest) and adds an entry
 * list to the manifest under the request key; a reader takes the entry whose files all
 * match now, else misses (a stale object is never read). An outcome whose files could
 * not be vouched for (unknown, or modified within the race window) is stored nowhere:
 * the claim ends UNSTORED and the program is transient. For those outcomes the claim's
 * lease on a coordinating tier is abandoned, never published: that tier's begin answers
 * a key with its record unchecked, so only records the manifest checks reach it, by
 * kpc_tier_write to every writable tier.
 *
 * NOWAIT (kpc_program_get_many's first pass) sleeps on no builder: another process of the
 * host building the key answers busy with nothing held; a host claim whose cluster lease
 * another host's live builder holds (the coordinating tier's try_begin) answers busy with
 * the claim handed to the caller, which resumes it later (kpc_resolve_held) and waits on
 * the cluster then: the host still asks the cluster about the key through one process.
 *
 * The claim (storage/claim.h) is finished exactly once on every path of obtain(): each
 * branch below ends in one kpc_claim_finish, and finish on a claim that holds nothing
 * does nothing. Every level that fails is logged and skipped; only the request itself
 * fails a call.
 */
#define _GNU_SOURCE
#include "core/resolve.h"
#include "core/backfill.h"
#include "core/cache.h"
#include "core/context.h"
#include "core/hit.h"
#include "core/key.h"
#include "core/manifest.h"
#include "core/manifest_seen.h"
#include "core/program.h"
#include "base/log.h"
#include "platform/depfile.h"
#include "storage/claim.h"
#include "storage/request_codec.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ROUNDS 4 /* index rounds before building without it: bounds a pathological race */

static void fill_record(kpc_record *rec, const kpc_context *ctx, const kpc_key *key,
                        const kpc_source *src, uint32_t kind)
{
    memset(rec, 0, sizeof *rec);
    rec->key = *key;
    rec->kind = kind;
    rec->created_ns = kpc__wall_ns();
    snprintf(rec->target, sizeof rec->target, "%s", ctx->target);
    snprintf(rec->source_name, sizeof rec->source_name, "%s", src->name ? src->name : "");
    memcpy(rec->compiler_id, ctx->compiler_id, 16);
}

/* The text of a LOG record, terminated (malloc'd; NULL on OOM). */
static char *log_text(const kpc_record *rec)
{
    char *log = malloc(rec->code_size + 1);
    if (log) {
        memcpy(log, rec->payload, rec->code_size);
        log[rec->code_size] = '\0';
    }
    return log;
}

/* Whether rec, read from tier `from`, answers the request a (kpc_hit_serves); if so it is
 * accepted there (a hit of that tier, copied into the tiers above it), else neither. */
static bool accepted(kpc_context *ctx, kpc_hit_request *a, kpc_tier *from, kpc_record *rec)
{
    if (!kpc_hit_serves(ctx, a, rec))
        return false;
    kpc_tier_accept(&ctx->cache->tiers, from, rec);
    return true;
}

/* A manifest's bytes (kpc_seen_manifest_record), written once its build's record is. */
typedef struct kpc_manifest_bytes {
    void *buf;
    size_t size;
} kpc_manifest_bytes;

/* A fresh outcome: its record and its parts, and how the claim ends when it is stored. */
typedef struct outcome {
    kpc_record *rec;
    const void *first, *second;
    kpc_claim_outcome done;   /* READY (a CODE record) or FAILED (a LOG record) */
} outcome;

/* The manifest mf under key, in every writable tier, with o's record whole as its second
 * part (core/manifest_seen.h) when it is small enough: the hit through the manifest then
 * reads one record. A reader that predates that part reads the first alone. */
static kpc_status write_manifest(kpc_context *ctx, const kpc_key *key, const kpc_source *src,
                                 const kpc_manifest_bytes *mf, const outcome *o)
{
    kpc_record head;
    fill_record(&head, ctx, key, src, KPC_RECORD_MANIFEST);
    head.code_size = mf->size;
    void *carried = NULL;
    size_t size = 0;
    if (o->rec->code_size + o->rec->names_size + o->rec->request_size <= KPC_MANIFEST_CARRY_MAX &&
        kpc_record_encode(o->rec, o->first, o->second, &carried, &size) == KPC_OK)
        head.names_size = size;
    kpc_status s = kpc_tier_write(&ctx->cache->tiers, NULL, &head, mf->buf, carried);
    free(carried);
    return s;
}

/* The files the compile read, recorded now, the key its outcome goes under and the
 * manifest that leads there (core/manifest.h), in one call: true with *deps (NULL when
 * none: no manifest) if its outcome may be cached, false if they cannot be vouched for
 * (*object is the request key then). */
static bool record_deps(kpc_context *ctx, const kpc_build *b, const kpc_key *key, kpc_seen_manifest *sm,
                        uint64_t started_ns, uint32_t outcome, kpc_deps **deps, kpc_key *object,
                        kpc_manifest_bytes *mf)
{
    *deps = NULL;
    *object = *key;
    if (b->deps_unknown)
        return false;
    if (b->num_deps == 0)
        return true;
    char cwd[PATH_MAX];
    kpc_manifest_build mb = {(const char *const *)b->deps, b->num_deps, (const char *const *)b->absent,
                             b->num_absent, getcwd(cwd, sizeof cwd) ? cwd : NULL, started_ns};
    return kpc_seen_manifest_record(ctx, key, sm, &mb, outcome, deps, object, &mf->buf, &mf->size) == KPC_OK;
}

/* The log of a build another process ran and failed; NULL when its log record is gone
 * (or, behind a manifest, when the files changed since). */
static char *failed_log(kpc_context *ctx, const kpc_key *key, const kpc_source *src, kpc_seen_manifest *sm)
{
    kpc_hit_request a = {key, src, false, {0}};
    kpc_record rec;
    kpc_deps *deps = NULL;
    kpc_tier *from;
    if (kpc_tier_read(&ctx->cache->tiers, key, ctx->target, KPC_RECORD_LOG, &rec, &from) != KPC_OK &&
        kpc_seen_manifest_read(ctx, key, sm, &rec, &deps, &from) != KPC_OK)
        return NULL;
    if (!accepted(ctx, &a, from, &rec)) {
        kpc_manifest_deps_free(deps);
        return NULL;
    }
    char *log = rec.kind == KPC_RECORD_LOG ? log_text(&rec) : NULL;
    kpc_record_free(&rec);
    kpc_manifest_deps_free(deps);
    return log;
}

/* A fresh outcome stored and the claim finished: `done` (READY or FAILED) when stored,
 * UNSTORED when it is not kept (no one could read it: the waiters build for themselves)
 * or could not be stored. Under the request key (no deps) the record also reaches the
 * lease's tier through the claim's finish; under an object key it is written to every
 * writable tier and its manifest entry added (a lease never gets such a record). */
static void store_outcome(kpc_context *ctx, const kpc_key *key, const kpc_source *src, kpc_claim *claim,
                          bool keep, const kpc_deps *deps, const kpc_manifest_bytes *mf, const outcome *o)
{
    kpc_tiers *tiers = &ctx->cache->tiers;
    if (!keep) {
        kpc_claim_finish(claim, KPC_CLAIM_UNSTORED, NULL, NULL, NULL);
    } else if (deps == NULL) {
        bool stored = kpc_tier_write(tiers, claim->tier, o->rec, o->first, o->second) == KPC_OK;
        kpc_claim_finish(claim, stored ? o->done : KPC_CLAIM_UNSTORED, o->rec, o->first, o->second);
    } else {
        bool stored = kpc_tier_write(tiers, NULL, o->rec, o->first, o->second) == KPC_OK &&
                      write_manifest(ctx, key, src, mf, o) == KPC_OK;
        kpc_claim_finish(claim, stored ? o->done : KPC_CLAIM_UNSTORED, NULL, NULL, NULL);
    }
}

/* Compile, store and finish the claim (which may hold nothing). */
static kpc_status build(kpc_context *ctx, const kpc_key *key, const kpc_source *src, kpc_seen_manifest *sm,
                        kpc_claim *claim, kpc_program **out, char **log)
{
    kpc_cache *cache = ctx->cache;
    kpc_build b = {0};
    uint64_t t0 = kpc__now_ns(), started = kpc__wall_ns();
    kpc_status s = cache->platform->compile(ctx->target, src, &b);
    if (cache->index && (s == KPC_OK || s == KPC_E_COMPILE))
        kpc_index_note_compile(cache->index, s == KPC_OK);
    /* the files it read: where its record goes, or that it goes nowhere */
    kpc_deps *deps = NULL;
    kpc_key object = *key;
    kpc_manifest_bytes mf = {NULL, 0};
    bool keep = (s == KPC_OK || (s == KPC_E_COMPILE && !b.local)) &&
                record_deps(ctx, &b, key, sm, started, s == KPC_OK ? KPC_MANIFEST_CODE : KPC_MANIFEST_LOG,
                            &deps, &object, &mf);
    if ((s == KPC_OK || (s == KPC_E_COMPILE && !b.local)) && !keep)
        KPC_LOG(KPC_LOG_DEBUG, "the outcome of %s for %s is not cached: the files it read cannot be "
                "vouched for", src->name ? src->name : "(unnamed)", ctx->target);
    kpc_record rec;
    if (s == KPC_E_COMPILE && !b.local) {
        atomic_fetch_add_explicit(&cache->build_failures, 1, memory_order_relaxed);
        KPC_LOG(KPC_LOG_INFO, "compile of %s for %s failed", src->name ? src->name : "(unnamed)",
                ctx->target);
        const char *text = b.log ? b.log : "";
        fill_record(&rec, ctx, &object, src, KPC_RECORD_LOG);
        rec.has_digest = kpc_request_digest(key, src, rec.request_digest);
        rec.code_size = strlen(text);
        store_outcome(ctx, key, src, claim, keep, deps, &mf, &(outcome){&rec, text, NULL, KPC_CLAIM_FAILED});
        free(mf.buf);
        kpc_manifest_deps_free(deps);
        *log = b.log;
        b.log = NULL;
        kpc_platform_build_free(&b);
        return s;
    }
    if (s != KPC_OK) {
        if (s == KPC_E_COMPILE) {
            atomic_fetch_add_explicit(&cache->build_failures, 1, memory_order_relaxed);
            KPC_LOG(KPC_LOG_WARN, "compile of %s for %s failed without diagnostics (%s): not shared "
                    "with other processes", src->name ? src->name : "(unnamed)", ctx->target,
                    b.log ? b.log : "no log");
        }
        /* a local fault (the compiler could not run, no memory, refused the request, an
         * unusable environment): another process may do better */
        kpc_claim_finish(claim, KPC_CLAIM_ABANDON, NULL, NULL, NULL);
        *log = b.log;
        b.log = NULL;
        kpc_platform_build_free(&b);
        return s;
    }
    atomic_fetch_add_explicit(&cache->builds, 1, memory_order_relaxed);
    KPC_LOG(KPC_LOG_INFO, "built %s for %s in %.1f ms (%zu bytes, %zu files read from disk)",
            src->name ? src->name : "(unnamed)", ctx->target, (double)(kpc__now_ns() - t0) / 1e6,
            b.code_size, b.num_deps);
    fill_record(&rec, ctx, &object, src, KPC_RECORD_CODE);
    rec.has_digest = kpc_request_digest(key, src, rec.request_digest);
    rec.flags = b.bitcode ? KPC_RECORD_BITCODE : 0;
    rec.code_size = b.code_size;
    rec.names_size = b.names_size;
    /* the request beside the object, for `kpc replay`; failing to encode it costs only
     * the replay of this one */
    void *req = NULL;
    size_t req_size = 0;
    if (keep && !(cache->settings.flags & KPC_NO_SOURCES) &&
        kpc_request_encode(src, cache->platform->key_env, &req, &req_size) == KPC_OK)
        rec.request = req, rec.request_size = req_size;
    store_outcome(ctx, key, src, claim, keep, deps, &mf, &(outcome){&rec, b.code, b.names, KPC_CLAIM_READY});
    free(mf.buf);
    free(req);
    free(b.log);
    b.log = NULL;
    kpc_depfile_paths_free(b.deps, b.num_deps);
    kpc_depfile_paths_free(b.absent, b.num_absent);
    b.deps = b.absent = NULL;
    b.num_deps = b.num_absent = 0;
    if (kpc_program_new(key, &b, out) != KPC_OK) {
        kpc_platform_build_free(&b);
        kpc_manifest_deps_free(deps);
        return KPC_E_NOMEM;
    }
    (*out)->object = object;
    (*out)->deps = deps;
    (*out)->transient = !keep;
    return KPC_OK;
}

/* A record in hand (read from a tier, or the coordinating tier's answer): the program,
 * and the claim finished READY. deps (owned; NULL: a record under the request key): the
 * files of the manifest entry it was found through, which the map checks on every hit;
 * such a record is never published to a lease (see the top of this file). from: the
 * coordinating tier the record came from, still to be copied into the tiers above it (NULL:
 * nothing to copy). That copy and the claim's READY are handed to the cache's back-fill
 * thread (core/backfill.h) once the program holds the record, and made here only when
 * it cannot take them. */
static kpc_status take_record(kpc_context *ctx, const kpc_key *key, kpc_claim *claim, kpc_record *rec,
                              kpc_deps *deps, kpc_tier *from, kpc_program **out, bool *from_disk)
{
    kpc_record head = *rec; /* the claim publishes the size; the payload moves below */
    kpc_status r = kpc_program_from_record(key, rec, out);
    kpc_record_free(rec);
    if (r != KPC_OK) {
        kpc_manifest_deps_free(deps);
        kpc_claim_finish(claim, KPC_CLAIM_ABANDON, NULL, NULL, NULL);
        return r;
    }
    (*out)->object = head.key;
    (*out)->deps = deps;
    atomic_fetch_add_explicit(&ctx->cache->disk_hits, 1, memory_order_relaxed);
    *from_disk = true;
    if (from) { /* from the cluster: copied to this host's tiers, then the slot finished */
        head.payload = (*out)->code; /* code, names, request: the record's payload */
        if (kpc_backfill_defer(&ctx->cache->fill, from, claim, &head, *out) != KPC_OK)
            kpc_backfill_copy(&ctx->cache->tiers, from, claim, &head);
        return KPC_OK;
    }
    head.payload = NULL;
    head.request = NULL; /* it pointed into the payload */
    head.request_size = 0;
    kpc_claim_finish(claim, KPC_CLAIM_READY, !deps ? &head : NULL, NULL, NULL);
    return KPC_OK;
}

/* With the host slot held and no tier holding the record: ask the coordinating tier
 * (without waiting on another host's builder when nowait: then *busy, the slot still
 * held). KPC_E_NOT_FOUND: build (under its lease, if it granted one), unless *busy. */
static kpc_status coordinate(kpc_context *ctx, const kpc_key *key, const kpc_source *src, kpc_claim *claim,
                             bool nowait, kpc_program **out, char **log, bool *from_disk, bool *busy)
{
    kpc_hit_request a = {key, src, false, {0}};
    kpc_tiers *tiers = &ctx->cache->tiers;
    kpc_tier *coord = kpc_tier_coordinator(tiers);
    kpc_tier_begin res;
    if (coord == NULL || kpc_claim_tier_begin(claim, coord, ctx->target, nowait, &res) != KPC_OK)
        return KPC_E_NOT_FOUND; /* no cluster, or a sick one: build host-local */
    if (res.verdict == KPC_TIER_BUSY) {
        *busy = true;
        return KPC_E_NOT_FOUND;
    }
    if ((res.verdict == KPC_TIER_HIT || res.verdict == KPC_TIER_FAILED) && !kpc_hit_serves(ctx, &a, &res.rec))
        return KPC_E_NOT_FOUND; /* built here, under the claim */
    if (res.verdict == KPC_TIER_HIT && res.rec.kind != KPC_RECORD_CODE) {
        kpc_record_free(&res.rec); /* only a CODE record answers a key unchecked */
        return KPC_E_NOT_FOUND;
    }
    if (res.verdict == KPC_TIER_HIT)
        return take_record(ctx, key, claim, &res.rec, NULL, coord, out, from_disk);
    if (res.verdict == KPC_TIER_FAILED) {
        /* a compile error another host had: shared here as on that host */
        kpc_tier_backfill(tiers, coord, &res.rec);
        *log = log_text(&res.rec);
        kpc_claim_finish(claim, KPC_CLAIM_FAILED, NULL, NULL, NULL);
        kpc_record_free(&res.rec);
        /* answered from the cluster, compiled by nobody here: a cached failure */
        atomic_fetch_add_explicit(&ctx->cache->cached_failures, 1, memory_order_relaxed);
        return KPC_E_COMPILE;
    }
    return KPC_E_NOT_FOUND; /* BUILD: the lease is in the claim */
}

/* A host waiter also watches the cluster: its host's builder may be stopped or slow
 * while another host has published the record. After waiting a watch period (a lease)
 * it looks every period: the disk first (another waiter may have fetched it), then the
 * coordinating tier's peek; a record found is back-filled and taken, and the host's
 * builder is left to finish. Until then the wait goes on, one index slice at a time. */
typedef struct watch_state {
    unsigned flags;    /* KPC_INDEX_SLICE (and AGAIN once a slice was slept), or 0 */
    uint64_t next_ns;  /* the next look */
} watch_state;

static kpc_status watch_cluster(kpc_context *ctx, const kpc_key *key, const kpc_source *src, watch_state *w,
                                kpc_program **out, bool *from_disk)
{
    kpc_hit_request a = {key, src, false, {0}};
    kpc_tiers *tiers = &ctx->cache->tiers;
    kpc_tier *coord = kpc_tier_coordinator(tiers);
    uint64_t now = kpc__now_ns();
    if (!(w->flags & KPC_INDEX_AGAIN)) {
        w->flags |= KPC_INDEX_AGAIN;
        w->next_ns = now + coord->watch_ns;
    }
    if (now < w->next_ns)
        return KPC_E_NOT_FOUND;
    w->next_ns = now + coord->watch_ns;
    kpc_claim none;
    memset(&none, 0, sizeof none);
    kpc_record rec;
    kpc_tier *from;
    if (kpc_tier_read(tiers, key, ctx->target, KPC_RECORD_CODE, &rec, &from) == KPC_OK &&
        accepted(ctx, &a, from, &rec))
        return take_record(ctx, key, &none, &rec, NULL, NULL, out, from_disk);
    if (coord->ops->peek(coord, key, ctx->target, &rec) != KPC_OK || !kpc_hit_serves(ctx, &a, &rec))
        return KPC_E_NOT_FOUND;
    KPC_LOG(KPC_LOG_INFO, "this host's builder of the key is taking long; another host published it: "
            "taking that");
    return take_record(ctx, key, &none, &rec, NULL, coord, out, from_disk);
}

/* Get the program without loading it: from a tier, or built. from_disk tells which.
 * held (may be NULL): on entry, a host claim a NOWAIT call handed out, resumed here
 * (the index is not asked again); on a NOWAIT return with *busy because another host's
 * builder holds the cluster lease, the claim, still held, handed out (nothing held when
 * the busy builder is on this host). Without held, the cluster is waited on. */
static kpc_status obtain_seen(kpc_context *ctx, const kpc_normalized_request *req, bool skip_disk,
                              unsigned nowait, kpc_claim *held, kpc_seen_manifest *sm, kpc_program **out, char **log,
                              bool *from_disk, bool *busy)
{
    const kpc_key *key = &req->key;
    const kpc_source *src = req->src;
    kpc_cache *cache = ctx->cache;
    kpc_tiers *tiers = &cache->tiers;
    unsigned flags = (skip_disk ? KPC_INDEX_STALE : 0) | nowait;
    *from_disk = false;
    watch_state watch = {0};
    kpc_hit_request a = {key, src, false, {0}};
    kpc_tier *coord = kpc_tier_coordinator(tiers);
    /* a request whose options name a directory or file to read: its manifest first */
    bool manifest_first = req->reads_files;
    /* the tiers were read under a READY whose outcome was gone or did not match: a
     * claim that then became the builder without waiting has nothing new to read (no
     * builder ran on this host in between: a compile does not fit in that gap) */
    bool looked = false;
    if (!nowait && cache->index && coord && coord->ops->peek && coord->watch_ns)
        watch.flags = KPC_INDEX_SLICE;
    for (int round = 0; round < MAX_ROUNDS; round++) {
        enum kpc_index_verdict verdict = KPC_INDEX_BUILD;
        bool waited = false;
        kpc_claim claim;
        if (round == 0 && held && kpc_claim_held(held)) {
            claim = *held; /* resumed: the slot is ours already */
            memset(held, 0, sizeof *held);
        } else {
            kpc_claim_begin(&claim, cache->index, key, flags | watch.flags, &verdict, &waited);
        }
        if (waited && !(watch.flags & KPC_INDEX_AGAIN))
            atomic_fetch_add_explicit(&cache->waits, 1, memory_order_relaxed);
        if (verdict == KPC_INDEX_BUSY && !nowait) { /* a slice of a watched wait: nothing held */
            kpc_status s = watch_cluster(ctx, key, src, &watch, out, from_disk);
            if (s != KPC_E_NOT_FOUND)
                return s;
            round--;
            continue;
        }
        if (verdict == KPC_INDEX_BUSY) { /* NOWAIT: another process builds it; nothing held */
            *busy = true;
            return KPC_E_NOT_FOUND;
        }
        if (verdict == KPC_INDEX_FAILED) {
            if ((*log = failed_log(ctx, key, src, sm)) != NULL) {
                atomic_fetch_add_explicit(&cache->cached_failures, 1, memory_order_relaxed);
                return KPC_E_COMPILE;
            }
            flags = KPC_INDEX_STALE | nowait; /* its log is gone (pruned): compile it again */
            continue;
        }
        /* skip_disk: the record on disk was refused; but READY here means this call
         * waited for another process's fresh build (the index gives READY to a STALE
         * request only then), and that one is read */
        if (tiers->n && (!skip_disk || verdict == KPC_INDEX_READY) &&
            !(looked && !waited && verdict == KPC_INDEX_BUILD)) {
            kpc_record rec;
            kpc_deps *deps = NULL;
            kpc_tier *from;
            /* behind a manifest: the outcome of the entry whose files match now; looked
             * for first where one is expected (manifest_first). A record that another
             * request built is neither a hit of its tier nor copied above it */
            kpc_status via =
                manifest_first ? kpc_seen_manifest_read(ctx, key, sm, &rec, &deps, &from) : KPC_E_NOT_FOUND;
            if (via != KPC_OK) {
                if (kpc_tier_read(tiers, key, ctx->target, KPC_RECORD_CODE, &rec, &from) == KPC_OK) {
                    if (!accepted(ctx, &a, from, &rec)) /* built again, over the other request's */
                        return build(ctx, key, src, sm, &claim, out, log);
                    return take_record(ctx, key, &claim, &rec, NULL, NULL, out, from_disk);
                }
                if (!manifest_first)
                    via = kpc_seen_manifest_read(ctx, key, sm, &rec, &deps, &from);
            }
            if (via == KPC_OK && !accepted(ctx, &a, from, &rec)) {
                kpc_manifest_deps_free(deps);
                return build(ctx, key, src, sm, &claim, out, log);
            }
            if (via == KPC_OK) {
                if (rec.kind == KPC_RECORD_CODE)
                    return take_record(ctx, key, &claim, &rec, deps, NULL, out, from_disk);
                *log = log_text(&rec); /* a compile error these very files gave */
                kpc_record_free(&rec);
                kpc_manifest_deps_free(deps);
                kpc_claim_finish(&claim, KPC_CLAIM_FAILED, NULL, NULL, NULL);
                atomic_fetch_add_explicit(&cache->cached_failures, 1, memory_order_relaxed);
                return KPC_E_COMPILE;
            }
            if (verdict == KPC_INDEX_READY) {
                /* the index says READY but the record is gone or bad: claim the slot */
                flags = KPC_INDEX_STALE | nowait;
                looked = true;
                continue;
            }
        }
        if (kpc_claim_held(&claim)) {
            kpc_status s = coordinate(ctx, key, src, &claim, nowait && held, out, log, from_disk, busy);
            if (s != KPC_E_NOT_FOUND)
                return s;
            if (*busy) { /* another host builds it: the slot goes out with *busy */
                *held = claim;
                return KPC_E_NOT_FOUND;
            }
        }
        /* held only for BUILD: READY with no tier to read from, or SELF, builds for
         * ourselves (the claim holds nothing then) */
        return build(ctx, key, src, sm, &claim, out, log);
    }
    KPC_LOG(KPC_LOG_WARN, "the host index kept answering READY (or FAILED) for a file that is not "
            "there: building without it");
    kpc_claim none;
    memset(&none, 0, sizeof none);
    return build(ctx, key, src, sm, &none, out, log);
}

/* obtain_seen with the manifest this request sees, dropped when it is done */
static kpc_status obtain(kpc_context *ctx, const kpc_normalized_request *req, bool skip_disk, unsigned nowait,
                         kpc_claim *held, kpc_program **out, char **log, bool *from_disk, bool *busy)
{
    kpc_seen_manifest sm = {0};
    kpc_status s = obtain_seen(ctx, req, skip_disk, nowait, held, &sm, out, log, from_disk, busy);
    if (sm.m.block) /* looked, and no build followed */
        kpc_seen_manifest_free(&sm);
    return s;
}

static kpc_status resolve(kpc_context *ctx, const kpc_normalized_request *req, unsigned nowait,
                          kpc_claim *held, kpc_program **out, char **log, bool *busy)
{
    const kpc_key *key = &req->key;
    const kpc_source *src = req->src;
    bool from_disk;
    kpc_status s = obtain(ctx, req, false, nowait, held, out, log, &from_disk, busy);
    if (s != KPC_OK || ctx->device < 0)
        return s;
    const kpc_platform *pf = ctx->cache->platform;
    kpc_program *p = *out;
    if (p->bitcode) { /* for a link step, not a device: a compile-only context hands it out */
        KPC_LOG(KPC_LOG_ERROR, "%s gives LLVM bitcode for %s (relocatable device code), which no "
                "device loads: use a compile-only context", src->name ? src->name : "(unnamed)",
                ctx->target);
        kpc_program_discard(p); /* made, never published */
        *out = NULL;
        return KPC_E_INVALID;
    }
    s = pf->module_load(ctx->device, p->code, p->code_size, &p->module);
    if (s == KPC_E_CORRUPT && from_disk) {
        char hex[KPC_KEY_HEX];
        kpc_key_hex(key, hex);
        /* Several processes may load the same refused record at once: the first removes
         * it and rebuilds; a later one finds it gone or replaced and takes what is there
         * now (waiting on the index for the rebuild) instead of removing the fresh object. */
        kpc_tiers *tiers = &ctx->cache->tiers;
        bool removed = tiers->n == 0 ||
                       kpc_tier_remove_same(tiers, &p->object, ctx->target, p->code, p->code_size) != KPC_E_NOT_FOUND;
        KPC_LOG(KPC_LOG_WARN, "the runtime refused cached object %s for %s: %s", hex, ctx->target,
                removed ? "removed it, building it again" : "it was replaced already, taking the new one");
        kpc_program_discard(p); /* made, never published */
        *out = NULL;
        if (removed && ctx->cache->index)
            kpc_index_forget(ctx->cache->index, key);
        s = obtain(ctx, req, removed, 0, NULL, out, log, &from_disk, busy);
        if (s != KPC_OK)
            return s;
        p = *out;
        s = pf->module_load(ctx->device, p->code, p->code_size, &p->module);
    }
    if (s != KPC_OK) {
        if (s == KPC_E_CORRUPT)
            s = KPC_E_HIP; /* a fresh object refused: nothing stale to blame */
        kpc_program_discard(p); /* made, never published */
        *out = NULL;
        return s;
    }
    p->ctx = ctx;
    p->device = ctx->device;
    return KPC_OK;
}

kpc_status kpc_resolve_miss(kpc_context *ctx, const kpc_normalized_request *req, kpc_program **out,
                            char **log)
{
    bool busy = false;
    return resolve(ctx, req, 0, NULL, out, log, &busy);
}

kpc_status kpc_resolve_miss_nowait(kpc_context *ctx, const kpc_normalized_request *req, kpc_program **out,
                                   char **log, bool *busy, kpc_claim *held)
{
    *busy = false;
    memset(held, 0, sizeof *held);
    return resolve(ctx, req, KPC_INDEX_NOWAIT, held, out, log, busy);
}

kpc_status kpc_resolve_held(kpc_context *ctx, const kpc_normalized_request *req, kpc_claim *held,
                            kpc_program **out, char **log)
{
    bool busy = false;
    return resolve(ctx, req, 0, held, out, log, &busy);
}
