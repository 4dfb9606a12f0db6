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
 *   cluster     -> the builder (the host's claimant; without an index, every process)
 *                  asks the remote tier before compiling: a fetched record is checked,
 *                  written to disk and published READY; a shared failure is published
 *                  FAILED; else it compiles under the cluster lease and publishes there too
 *   no index    -> the same without the coordination: read the file, else compile
 *   device      -> load the module; an image the runtime refuses is removed from disk
 *                  and the index and built once more (the stale-cache bulwark)
 *
 * Every level that fails is logged and skipped; only the request itself fails a call.
 */
#define _GNU_SOURCE
#include "../shm/index.h"
#include "kpc_internal.h"
#include "storage/remote.h"

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

/* Share a record with the cluster under lease (NULL: none held). */
static void publish_remote(kpc_cache *cache, kpc_remote_lease *lease, const kpc_record *rec,
                           const void *first, const void *second, size_t second_size)
{
    void *bytes;
    size_t size;
    if (kpc_store_record_encode(rec, first, second, second_size, &bytes, &size) != KPC_OK) {
        kpc_remote_release(cache->remote, lease);
        return;
    }
    kpc_remote_publish(cache->remote, lease, &rec->key, rec->kind, bytes, size);
    free(bytes);
}

/* Compile, store and publish. claimed: this process holds the index slot; lease: it
 * holds the cluster's lease too (NULL: none). */
static kpc_status build(kpc_context *ctx, const kpc_key *key, const kpc_source *src, bool claimed,
                        kpc_remote_lease *lease, kpc_program **out, char **log)
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
        fill_record(&rec, ctx, key, src, KPC_RECORD_LOG);
        if (cache->store)
            stored = kpc_store_write(cache->store, &rec, text, NULL, 0) == KPC_OK;
        if (lease)
            publish_remote(cache, lease, &rec, text, NULL, 0);
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
        if (lease)
            kpc_remote_release(cache->remote, lease);
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
    fill_record(&rec, ctx, key, src, KPC_RECORD_CODE);
    rec.code_size = b.code_size;
    rec.names_size = b.names_size;
    if (cache->store)
        stored = kpc_store_write(cache->store, &rec, b.code, b.names, b.names_size) == KPC_OK;
    if (lease)
        publish_remote(cache, lease, &rec, b.code, b.names, b.names_size);
    if (ix && stored)
        kpc_index_publish(ix, key, true, b.code_size);
    else if (ix)
        kpc_index_unstored(ix, key); /* no one can read it: the waiters build for themselves */
    free(b.log);
    b.log = NULL;
    return kpc_prog_new(key, &b, out) == KPC_OK ? KPC_OK : (kpc_build_free(&b), KPC_E_NOMEM);
}

/* Ask the cluster tier (the caller is the key's builder on this host). KPC_OK with *out
 * (fetched, back-filled to disk and published READY), KPC_E_COMPILE with *log (a build
 * that failed on some host lately: published FAILED), or KPC_E_NOT_FOUND: compile, under
 * *lease when the cluster's lease is ours (NULL: host-local). */
static kpc_status from_remote(kpc_context *ctx, const kpc_key *key, bool claimed, kpc_program **out,
                              char **log, kpc_remote_lease **lease)
{
    kpc_cache *cache = ctx->cache;
    kpc_record rec;
    enum kpc_remote_verdict v = kpc_remote_begin(cache->remote, key, ctx->target, ctx->compiler_id, &rec, lease, NULL);
    if (v == KPC_REMOTE_BUILD || v == KPC_REMOTE_OFF)
        return KPC_E_NOT_FOUND;
    bool stored = false;
    kpc_status s;
    if (v == KPC_REMOTE_FAILED) {
        char *text = malloc(rec.code_size + 1);
        if (text == NULL) {
            kpc_record_free(&rec);
            return KPC_E_NOT_FOUND;
        }
        memcpy(text, rec.payload, rec.code_size);
        text[rec.code_size] = '\0';
        if (cache->store)
            stored = kpc_store_write(cache->store, &rec, text, NULL, 0) == KPC_OK;
        kpc_record_free(&rec);
        if (claimed && stored)
            kpc_index_publish(cache->index, key, false, 0);
        else if (claimed)
            kpc_index_unstored(cache->index, key);
        *log = text;
        return KPC_E_COMPILE;
    }
    if (cache->store)
        stored = kpc_store_write(cache->store, &rec, rec.payload, (char *)rec.payload + rec.code_size,
                                 rec.names_size) == KPC_OK;
    uint64_t size = rec.code_size;
    s = prog_from_record(key, &rec, out);
    kpc_record_free(&rec);
    if (claimed && s == KPC_OK && stored)
        kpc_index_publish(cache->index, key, true, size);
    else if (claimed && s == KPC_OK)
        kpc_index_unstored(cache->index, key);
    else if (claimed)
        kpc_index_abandon(cache->index, key);
    return s;
}

/* Get the program without loading it: from disk, or built. from_disk tells which. */
static kpc_status obtain(kpc_context *ctx, const kpc_key *key, const kpc_source *src, bool skip_disk,
                         kpc_program **out, char **log, bool *from_disk)
{
    kpc_cache *cache = ctx->cache;
    kpc_store *st = cache->store;
    unsigned flags = skip_disk ? KPC_INDEX_STALE : 0;
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
        }
        if (verdict == KPC_INDEX_FAILED) {
            if ((*log = failed_log(ctx, key)) != NULL)
                return KPC_E_COMPILE;
            flags = KPC_INDEX_STALE; /* its log is gone (pruned): compile it again */
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
                flags = KPC_INDEX_STALE;
                continue;
            }
        }
        /* claimed only for BUILD: READY with no disk to read from, or SELF, builds for
         * ourselves; the builder asks the cluster first (never for an object the runtime
         * refused: the cluster may hold the same bytes) */
        kpc_remote_lease *lease = NULL;
        if (cache->remote && verdict == KPC_INDEX_BUILD && !skip_disk) {
            kpc_status r = from_remote(ctx, key, claimed, out, log, &lease);
            /* a fetched object is a cached one: if the runtime refuses it, it is removed
             * from disk and rebuilt like a file (the rebuild skips the cluster) */
            *from_disk = r == KPC_OK;
            if (r != KPC_E_NOT_FOUND)
                return r;
        }
        return build(ctx, key, src, claimed, lease, out, log);
    }
    KPC_LOG(KPC_LOG_WARN, "the host index kept answering READY (or FAILED) for a file that is not "
            "there: building without it");
    return build(ctx, key, src, false, NULL, out, log);
}

kpc_status kpc__resolve(kpc_context *ctx, const kpc_key *key, const kpc_source *src, kpc_program **out,
                        char **log)
{
    bool from_disk;
    kpc_status s = obtain(ctx, key, src, false, out, log, &from_disk);
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
        s = obtain(ctx, key, src, removed, out, log, &from_disk);
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
