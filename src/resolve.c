/*
 * resolve.c - a miss in the context's map, resolved through levels 2 and 3.
 *
 *   host index  READY            -> read the file
 *               BUILD (claimed)  -> a valid file on disk? publish READY; else compile,
 *                                   write the file, publish READY (or FAILED + log file;
 *                                   UNSTORED when the write failed)
 *               FAILED           -> the builder's log, from its log file (its log gone:
 *                                   claim the slot and compile again)
 *               SELF             -> built elsewhere but not storable (disk full or
 *                                   read-only): compile for ourselves, in parallel
 *   no index    -> the same without the coordination: read the file, else compile
 *   device      -> load the module; an image the runtime refuses is removed from disk
 *                  and the index and built once more (the stale-cache bulwark)
 *
 * Every level that fails is logged and skipped; only the request itself fails a call.
 */
#define _GNU_SOURCE
#include "../shm/index.h"
#include "kpc_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 4 /* index rounds before building without it: bounds a pathological race */

static kpc_status prog_from_record(const kpc_key *key, kpc_record *rec, kpc_program **out)
{
    kpc_build b = {0};
    b.names = malloc(rec->names_size ? rec->names_size : 1);
    if (b.names == NULL)
        return KPC_E_NOMEM;
    memcpy(b.names, (char *)rec->payload + rec->code_size, rec->names_size);
    b.names_size = rec->names_size;
    b.code = rec->payload; /* the code is the head of the payload: keep it */
    b.code_size = rec->code_size;
    rec->payload = NULL;
    kpc_status s = kpc_prog_new(key, &b, out);
    if (s != KPC_OK)
        kpc_build_free(&b);
    return s;
}

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

/* The log of a build another process ran and failed; NULL when its log file is gone. */
static char *failed_log(kpc_context *ctx, const kpc_key *key)
{
    kpc_record rec;
    kpc_store *st = ctx->cache->store;
    if (st && kpc_store_read(st, key, ctx->target, KPC_RECORD_LOG, &rec) == KPC_OK) {
        char *log = malloc(rec.code_size + 1);
        if (log) {
            memcpy(log, rec.payload, rec.code_size);
            log[rec.code_size] = '\0';
        }
        kpc_record_free(&rec);
        return log;
    }
    return NULL;
}

/* Compile, store and publish. claimed: this process holds the index slot. */
static kpc_status build(kpc_context *ctx, const kpc_key *key, const kpc_source *src, bool claimed,
                        kpc_program **out, char **log)
{
    kpc_cache *cache = ctx->cache;
    kpc_index *ix = claimed ? cache->index : NULL;
    kpc_build b = {0};
    uint64_t t0 = kpc__now_ns();
    kpc_status s = cache->platform->compile(ctx->target, src, &b);
    if (cache->index && (s == KPC_OK || s == KPC_E_COMPILE))
        kpc_index_note_compile(cache->index, s == KPC_OK);
    kpc_record rec;
    if (s == KPC_E_COMPILE) {
        atomic_fetch_add_explicit(&cache->build_failures, 1, memory_order_relaxed);
        KPC_LOG(KPC_LOG_INFO, "compile of %s for %s failed", src->name ? src->name : "(unnamed)",
                ctx->target);
        const char *text = b.log ? b.log : "";
        bool stored = false;
        if (cache->store) {
            fill_record(&rec, ctx, key, src, KPC_RECORD_LOG);
            stored = kpc_store_write(cache->store, &rec, text, NULL, 0) == KPC_OK;
        }
        if (ix && stored)
            kpc_index_publish(ix, key, false, 0);
        else if (ix)
            kpc_index_unstored(ix, key); /* the waiters compile it (and fail) themselves */
        *log = b.log;
        b.log = NULL;
        kpc_build_free(&b);
        return s;
    }
    if (s != KPC_OK) {
        if (ix)
            kpc_index_abandon(ix, key);
        *log = b.log;
        b.log = NULL;
        kpc_build_free(&b);
        return s;
    }
    atomic_fetch_add_explicit(&cache->builds, 1, memory_order_relaxed);
    KPC_LOG(KPC_LOG_INFO, "built %s for %s in %.1f ms (%zu bytes)", src->name ? src->name : "(unnamed)",
            ctx->target, (double)(kpc__now_ns() - t0) / 1e6, b.code_size);
    bool stored = false;
    if (cache->store) {
        fill_record(&rec, ctx, key, src, KPC_RECORD_CODE);
        rec.code_size = b.code_size;
        rec.names_size = b.names_size;
        /* the request, for `kpc replay`; a failure to encode only costs the replay */
        void *req = NULL;
        size_t req_size = 0;
        if (!(cache->settings.flags & KPC_NO_SOURCES) &&
            kpc_request_encode(src, cache->platform->key_env, &req, &req_size) == KPC_OK)
            rec.request = req, rec.request_size = req_size;
        stored = kpc_store_write(cache->store, &rec, b.code, b.names, b.names_size) == KPC_OK;
        free(req);
    }
    if (ix && stored)
        kpc_index_publish(ix, key, true, b.code_size);
    else if (ix)
        kpc_index_unstored(ix, key); /* no one can read it: the waiters build for themselves */
    free(b.log);
    b.log = NULL;
    return kpc_prog_new(key, &b, out) == KPC_OK ? KPC_OK : (kpc_build_free(&b), KPC_E_NOMEM);
}

/* A pack's record for key: back-filled into the disk tree (published READY in the index
 * when this process holds the claim), then the program. KPC_E_NOT_FOUND: build it. */
static kpc_status from_pack(kpc_context *ctx, const kpc_key *key, bool claimed, kpc_program **out)
{
    kpc_cache *cache = ctx->cache;
    kpc_record rec;
    if (kpc_pack_tier_read(cache->packs, key, ctx->target, KPC_RECORD_CODE, &rec) != KPC_OK)
        return KPC_E_NOT_FOUND;
    bool stored = false;
    if (cache->store) {
        const uint8_t *p = rec.payload;
        kpc_record copy = rec;
        copy.request = p + rec.code_size + rec.names_size;
        stored = kpc_store_write(cache->store, &copy, p, p + rec.code_size, rec.names_size) == KPC_OK;
    }
    kpc_status s = prog_from_record(key, &rec, out);
    kpc_record_free(&rec);
    if (claimed) {
        if (s == KPC_OK && stored)
            kpc_index_publish(cache->index, key, true, (*out)->code_size);
        else
            kpc_index_abandon(cache->index, key); /* a waiter reads the pack itself */
    }
    return s;
}

/* Get the program without loading it: from disk, or built. from_disk tells which. */
static kpc_status obtain(kpc_context *ctx, const kpc_key *key, const kpc_source *src, bool skip_disk,
                         unsigned nowait, kpc_program **out, char **log, bool *from_disk, bool *busy)
{
    kpc_cache *cache = ctx->cache;
    kpc_store *st = cache->store;
    unsigned flags = (skip_disk ? KPC_INDEX_STALE : 0) | nowait;
    *from_disk = false;
    for (int round = 0; round < MAX_ROUNDS; round++) {
        enum kpc_index_verdict verdict = KPC_INDEX_BUILD;
        bool claimed = false;
        if (cache->index) {
            bool waited = false;
            if (kpc_index_begin(cache->index, key, flags, &verdict, &waited) != KPC_OK)
                verdict = KPC_INDEX_BUILD; /* the index broke: logged; go on without it */
            else
                claimed = verdict == KPC_INDEX_BUILD;
            if (waited)
                atomic_fetch_add_explicit(&cache->waits, 1, memory_order_relaxed);
            if (verdict == KPC_INDEX_BUSY) { /* NOWAIT: another process builds it */
                *busy = true;
                return KPC_E_NOT_FOUND;
            }
        }
        if (verdict == KPC_INDEX_FAILED) {
            if ((*log = failed_log(ctx, key)) != NULL)
                return KPC_E_COMPILE;
            flags = KPC_INDEX_STALE | nowait; /* its log is gone (pruned): compile it again */
            continue;
        }
        /* skip_disk: the file on disk was refused; but READY here means this call waited
         * for another process's fresh build (the index gives READY to a STALE request only
         * then), and that one is read */
        if (st && (!skip_disk || verdict == KPC_INDEX_READY)) {
            kpc_record rec;
            kpc_status r = kpc_store_read(st, key, ctx->target, KPC_RECORD_CODE, &rec);
            if (r == KPC_OK) {
                r = prog_from_record(key, &rec, out);
                kpc_record_free(&rec);
                if (r != KPC_OK) {
                    if (claimed)
                        kpc_index_abandon(cache->index, key);
                    return r;
                }
                if (claimed)
                    kpc_index_publish(cache->index, key, true, (*out)->code_size);
                atomic_fetch_add_explicit(&cache->disk_hits, 1, memory_order_relaxed);
                *from_disk = true;
                return KPC_OK;
            }
            if (verdict == KPC_INDEX_READY) {
                /* the index says READY but the file is gone or bad: claim the slot */
                flags = KPC_INDEX_STALE | nowait;
                continue;
            }
        }
        /* a pack of KPC_PACK_PATH before a compile */
        if (cache->packs && from_pack(ctx, key, claimed, out) == KPC_OK) {
            *from_disk = true; /* a stale pack object is handled like a stale disk one */
            return KPC_OK;
        }
        /* claimed only for BUILD: READY with no disk to read from, or SELF, builds for
         * ourselves */
        return build(ctx, key, src, claimed, out, log);
    }
    KPC_LOG(KPC_LOG_WARN, "the host index kept answering READY (or FAILED) for a file that is not "
            "there: building without it");
    return build(ctx, key, src, false, out, log);
}

static kpc_status resolve(kpc_context *ctx, const kpc_key *key, const kpc_source *src, unsigned nowait,
                          kpc_program **out, char **log, bool *busy)
{
    bool from_disk;
    kpc_status s = obtain(ctx, key, src, false, nowait, out, log, &from_disk, busy);
    if (s != KPC_OK || ctx->device < 0)
        return s;
    const kpc_platform *pf = ctx->cache->platform;
    kpc_program *p = *out;
    s = pf->module_load(ctx->device, p->code, p->code_size, &p->module);
    if (s == KPC_E_CORRUPT && from_disk) {
        char hex[KPC_KEY_HEX];
        kpc_key_hex(key, hex);
        /* Several processes may load the same refused file at once: the first removes it
         * and rebuilds; a later one finds it gone or replaced and takes what is there now
         * (waiting on the index for the rebuild) instead of removing the fresh object. */
        kpc_store *store = ctx->cache->store;
        bool removed = store == NULL ||
                       kpc_store_remove_refused(store, key, ctx->target, p->code, p->code_size) != KPC_E_NOT_FOUND;
        KPC_LOG(KPC_LOG_WARN, "the runtime refused cached object %s for %s: %s", hex, ctx->target,
                removed ? "removed it, building it again" : "it was replaced already, taking the new one");
        kpc_program_release(p);
        *out = NULL;
        if (removed && ctx->cache->index)
            kpc_index_forget(ctx->cache->index, key);
        s = obtain(ctx, key, src, removed, 0, out, log, &from_disk, busy);
        if (s != KPC_OK)
            return s;
        p = *out;
        s = pf->module_load(ctx->device, p->code, p->code_size, &p->module);
    }
    if (s != KPC_OK) {
        if (s == KPC_E_CORRUPT)
            s = KPC_E_HIP; /* a fresh object refused: nothing stale to blame */
        kpc_program_release(p);
        *out = NULL;
        return s;
    }
    p->ctx = ctx;
    p->device = ctx->device;
    return KPC_OK;
}

kpc_status kpc__resolve(kpc_context *ctx, const kpc_key *key, const kpc_source *src, kpc_program **out,
                        char **log)
{
    bool busy = false;
    return resolve(ctx, key, src, 0, out, log, &busy);
}

kpc_status kpc__resolve_nowait(kpc_context *ctx, const kpc_key *key, const kpc_source *src,
                               kpc_program **out, char **log, bool *busy)
{
    *busy = false;
    return resolve(ctx, key, src, KPC_INDEX_NOWAIT, out, log, busy);
}
