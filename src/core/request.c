/*
 * request.c - kpc_program_get: a request checked, its key computed, then the context's
 * map (a hit, or a wait on another thread's build) and, on a miss, core/resolve.c.
 *
 * A hit on a program whose compile read files from disk checks them first
 * (core/manifest.h): one changed or gone, the entry is dropped and the request misses.
 * A program with no such file (p->deps NULL) costs one pointer test more than before.
 * kpc_program_get_many (core/batch.c) goes through the same two steps
 * (kpc_request_acquire, kpc_request_publish), so a batch checks what a single request
 * checks and keeps what it keeps.
 *
 * What a request's options decide is decided once per program, not on every hit: the
 * string compares that refuse an option naming the target and find the options that make
 * the working directory part of the key (kpc_manifest_needs_cwd) cost as much as the rest
 * of a hit for a handful of options. So a request first checks only its pointers, computes
 * its key as if it did not depend on the working directory and asks the map: a program
 * is stored under such a key only by a request with the same options that passed those
 * checks and did not depend on it. Only a miss there runs the checks and, where the
 * working directory counts, computes the key with it (those requests pay the scan on
 * every hit, as before: they also pay a getcwd).
 */
#define _GNU_SOURCE
#include "core/cache.h"
#include "core/context.h"
#include "core/key.h"
#include "core/manifest.h"
#include "core/map.h"
#include "core/program.h"
#include "core/request.h"
#include "core/resolve.h"
#include "base/grace.h"
#include "base/log.h"
#include "platform/options.h"

#include <stdlib.h>
#include <string.h>

/* The checks without which the key cannot even be computed: no string compared. */
static kpc_status check_pointers(const kpc_source *src)
{
    /* every compiler reads the source as a C string: a first byte of NUL is an empty
     * source whatever code_len says (hipRTC refused it, comgr failed it as a compile) */
    if (src->code == NULL || src->code[0] == '\0') {
        KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: the source is NULL or empty (its first byte is NUL)");
        return KPC_E_INVALID;
    }
    if ((src->num_options && src->options == NULL) ||
        (src->num_headers && (src->header_names == NULL || src->header_sources == NULL)) ||
        (src->num_name_expressions && src->name_expressions == NULL)) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: a count is set but its array is NULL");
        return KPC_E_INVALID;
    }
    for (size_t i = 0; i < src->num_options; i++)
        if (src->options[i] == NULL) {
            KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: option %zu is NULL", i);
            return KPC_E_INVALID;
        }
    for (size_t i = 0; i < src->num_headers; i++)
        if (src->header_names[i] == NULL || src->header_sources[i] == NULL) {
            KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: header %zu has a NULL name or text", i);
            return KPC_E_INVALID;
        }
    for (size_t i = 0; i < src->num_name_expressions; i++)
        if (src->name_expressions[i] == NULL) {
            KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: name expression %zu is NULL or empty", i);
            return KPC_E_INVALID;
        }
    return KPC_OK;
}

kpc_status kpc_request_check_source(const kpc_source *src)
{
    kpc_status s = check_pointers(src);
    if (s != KPC_OK)
        return s;
    for (size_t i = 0; i < src->num_options; i++) {
        if (kpc_option_sets_target(src->options[i])) {
            KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: option \"%s\" sets the target; the context "
                    "decides it", src->options[i]);
            return KPC_E_INVALID;
        }
    }
    for (size_t i = 0; i < src->num_name_expressions; i++)
        if (src->name_expressions[i][0] == '\0') {
            KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: name expression %zu is NULL or empty", i);
            return KPC_E_INVALID;
        }
    return KPC_OK;
}

/* This thread's counter among the cache's memory-hit counters (see struct kpc_cache). */
static void count_hit(kpc_cache *cache)
{
    atomic_fetch_add_explicit(&cache->mem_hits[kpc_thread_slot() % KPC_HIT_SLOTS].n, 1,
                              memory_order_relaxed);
}

/* The hit path: KPC_OK with *out, or KPC_E_NOT_FOUND to take the whole path (with
 * *no_cwd the key it computed, if any: kpc_key_compute_no_cwd's). */
static kpc_status quick_hit(kpc_context *ctx, const kpc_source *src, kpc_program **out, kpc_key *key,
                            bool *no_cwd)
{
    *no_cwd = kpc_key_compute_no_cwd(&ctx->key_prefix, src, key);
    if (!*no_cwd || !kpc_map_hit(ctx->map, key, out))
        return KPC_E_NOT_FOUND;
    if ((*out)->deps == NULL || kpc_manifest_deps_match((*out)->deps)) {
        count_hit(ctx->cache);
        return KPC_OK;
    }
    kpc_map_forget(ctx->map, key, *out); /* a file changed: the whole path misses */
    kpc_program_release(*out);
    *out = NULL;
    return KPC_E_NOT_FOUND;
}

kpc_status kpc_request_acquire(kpc_context *ctx, const kpc_key *key, kpc_program **out,
                               kpc_map_entry **entry)
{
    kpc_cache *cache = ctx->cache;
    bool waited;
    kpc_status s;
    for (;;) {
        s = kpc_map_acquire(ctx->map, key, out, entry, &waited);
        /* a program handed over by a build just waited for is fresh; a hit is checked */
        if (s != KPC_OK || waited || (*out)->deps == NULL || kpc_manifest_deps_match((*out)->deps))
            break;
        kpc_map_forget(ctx->map, key, *out); /* a file changed: the next acquire misses */
        kpc_program_release(*out);
        *out = NULL;
    }
    if (s == KPC_E_NOT_FOUND)
        atomic_fetch_add_explicit(&cache->mem_misses, 1, memory_order_relaxed);
    else if (waited)
        atomic_fetch_add_explicit(&cache->waits, 1, memory_order_relaxed);
    else if (s == KPC_OK)
        count_hit(cache);
    return s;
}

void kpc_request_publish(kpc_context *ctx, const kpc_key *key, kpc_map_entry *entry, kpc_status s,
                         kpc_program *prog, const char *log)
{
    if (s == KPC_OK)
        kpc_program_retain(prog); /* the map's; the caller keeps its own */
    kpc_map_publish(ctx->map, entry, s, prog, log);
    if (s == KPC_OK && prog->transient)
        kpc_map_forget(ctx->map, key, prog); /* shared with the waiters, kept by no one */
}

void kpc_request_key(const kpc_context *ctx, const kpc_source *src, const kpc_key *no_cwd, kpc_key *key)
{
    if (ctx->key_prefix.len != SIZE_MAX)
        kpc_key_compute_after_no_cwd(&ctx->key_prefix, src, no_cwd, key);
    else
        kpc_key_compute(ctx->key_id, ctx->cache->platform->name, ctx->target, src, key);
}

kpc_status kpc_program_get(kpc_context *ctx, const kpc_source *src, kpc_program **out)
{
    if (out)
        *out = NULL;
    if (ctx == NULL || src == NULL || out == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: NULL argument");
        return KPC_E_INVALID;
    }
    kpc_status s = kpc_cache_check_process(ctx->cache, "kpc_program_get");
    if (s != KPC_OK)
        return s;
    kpc_key key, no_cwd;
    bool have_no_cwd = false;
    if ((s = check_pointers(src)) != KPC_OK ||
        (s = quick_hit(ctx, src, out, &no_cwd, &have_no_cwd)) != KPC_E_NOT_FOUND)
        return s;
    s = kpc_request_check_source(src);
    if (s != KPC_OK)
        return s;
    kpc_request_key(ctx, src, have_no_cwd ? &no_cwd : NULL, &key);

    kpc_map_entry *entry;
    s = kpc_request_acquire(ctx, &key, out, &entry);
    if (s != KPC_E_NOT_FOUND)
        return s;
    kpc_program *prog = NULL;
    char *log = NULL;
    s = kpc_resolve_miss(ctx, &key, src, &prog, &log);
    if (s == KPC_OK)
        *out = prog;
    else
        kpc__last_log_set(log);
    kpc_request_publish(ctx, &key, entry, s, prog, log);
    free(log);
    return s;
}
