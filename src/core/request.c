/*
 * request.c - kpc_program_get, top to bottom: the request read once (kpc_request_read:
 * its pointers checked, its options classified in one pass, its map key computed in one;
 * the request key, which only a miss needs, after the map has missed),
 * then the context's map (a hit, or a wait on another thread's build) and, on a miss,
 * core/resolve.c with the read request; the outcome published to the map. No step goes
 * back to the options or to an earlier file: docs/design.md draws the path.
 *
 * A hit on a program whose compile read files from disk checks them first
 * (core/manifest.h): one changed or gone, the entry is dropped and the request misses.
 * A program with no such file (p->deps NULL) costs one pointer test more than before.
 * kpc_program_get_many (core/batch.c) reads its requests the same way and goes through
 * the same two map steps (kpc_request_acquire, kpc_request_publish), so a batch checks
 * what a single request checks and keeps what it keeps.
 *
 * The options are classified on every request, hits included: the option table's rows
 * are refused on their second byte before any string compare (platform/options.c), so
 * an option that names no path and no target costs a few byte compares, not a strcmp
 * per row of the table.
 */
#define _GNU_SOURCE
#include "core/cache.h"
#include "core/context.h"
#include "core/key.h"
#include "core/manifest.h"
#include "core/map.h"
#include "core/map_key.h"
#include "core/program.h"
#include "core/request.h"
#include "core/resolve.h"
#include "base/grace.h"
#include "base/hash.h"
#include "base/log.h"
#include "platform/options.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The checks without which the key cannot even be computed: no string compared, a
 * string's first byte read at most. */
static kpc_status check_pointers(const kpc_source *src)
{
    /* every compiler reads the source as a C string: a first byte of NUL is an empty
     * source whatever code_len says (hipRTC refused it, comgr failed it as a compile) */
    if (src->code == NULL || src->code[0] == '\0') {
        KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: the source is NULL or empty (its first byte is NUL)");
        return KPC_E_INVALID;
    }
    /* a request of a source alone (most of them) has nothing more to check: one test
     * instead of three counts' and four loops' (the empty name expressions' was a loop of
     * its own) took a 4 KB hit from 134 to 122 ns here */
    if ((src->num_options | src->num_headers | src->num_name_expressions) == 0)
        return KPC_OK;
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
        if (src->name_expressions[i] == NULL || src->name_expressions[i][0] == '\0') {
            KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: name expression %zu is NULL or empty", i);
            return KPC_E_INVALID;
        }
    return KPC_OK;
}

void kpc_request_cwd(uint8_t cwd[16])
{
    /* all zeros when it cannot be read: such a request's relative files are never
     * recorded, so its outcome is not cached (core/manifest.h) */
    char buf[PATH_MAX];
    memset(cwd, 0, 16);
    if (getcwd(buf, sizeof buf))
        XXH128_canonicalFromHash((XXH128_canonical_t *)cwd, XXH3_128bits(buf, strlen(buf)));
}

/* Whether the source or an in-memory header has the word "include" at all: a request
 * whose texts have none reads nothing from the source's directory (conservative: a
 * comment counts too). */
static bool mentions_include(const kpc_source *src)
{
    static const char word[] = "include";
    size_t len = src->code_len ? src->code_len : strlen(src->code);
    if (memmem(src->code, len, word, sizeof word - 1) != NULL)
        return true;
    for (size_t i = 0; i < src->num_headers; i++)
        if (strstr(src->header_sources[i], word) != NULL)
            return true;
    return false;
}

/* The one pass over the options: each classified once against the compiler's path rows,
 * and each string (a value too) asked whether it names the target. KPC_E_INVALID
 * (logged) for a target; else req's counts and *relative (an option names a relative
 * path) and *no_source_dir (an option stops the search of the source's directory). */
static kpc_status read_options(const kpc_option_table *t, const kpc_source *src, kpc_normalized_request *req,
                               bool *relative, bool *no_source_dir)
{
    *relative = *no_source_dir = false;
    size_t next = 0; /* the next option that is not the value of the one before */
    for (size_t i = 0; i < src->num_options; i++) {
        if (i >= next && !kpc_option_may_name_path_or_target(src->options[i])) {
            req->keyed++; /* -D..., -O3, -std=...: no row to walk */
            continue;
        }
        if (kpc_option_sets_target(src->options[i])) {
            KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: option \"%s\" sets the target; the context "
                    "decides it", src->options[i]);
            return KPC_E_INVALID;
        }
        if (i < next)
            continue;
        kpc_option o;
        kpc_option_classify_path(t, src->options, src->num_options, i, &o);
        next = i + o.used;
        switch (o.cls) {
        case KPC_OPTION_SEARCH_DIR: req->search_dirs++; break;
        case KPC_OPTION_READ_FILE: req->files_read++; break;
        case KPC_OPTION_NO_SOURCE_DIR: *no_source_dir = true; break;
        case KPC_OPTION_PATH: break;
        default: req->keyed++; break;
        }
        if ((o.cls == KPC_OPTION_SEARCH_DIR || o.cls == KPC_OPTION_READ_FILE || o.cls == KPC_OPTION_PATH) &&
            (o.value == NULL || o.value[0] != '/'))
            *relative = true;
    }
    return KPC_OK;
}

/* Whether the compiler searches the directory of src's relative name: then what it
 * includes may be read from there. */
static bool source_dir_searched(const kpc_source *src, bool compiler_searches, bool no_source_dir)
{
    return compiler_searches && !no_source_dir && (src->name == NULL || src->name[0] != '/');
}

/* The working-directory rule (request.h) on what read_options found. */
static bool needs_cwd(const kpc_source *src, const kpc_option_table *t, bool relative, bool no_source_dir)
{
    return relative ||
           (source_dir_searched(src, kpc_options_source_dir_searched(t), no_source_dir) && mentions_include(src));
}

bool kpc_request_needs_cwd(const kpc_source *src, const kpc_option_table *options)
{
    kpc_normalized_request r = {.src = src};
    bool relative, no_source_dir;
    /* a request with a target option has no key anyway: its rule's answer is moot */
    return read_options(options, src, &r, &relative, &no_source_dir) == KPC_OK &&
           needs_cwd(src, options, relative, no_source_dir);
}

/* kpc_request_read, inlined into kpc_program_get: a hit's reading costs no call of its own. */
static inline kpc_status read_request(const kpc_context *ctx, const kpc_source *src, kpc_normalized_request *req)
{
    /* each field set below (the keys are written by their computation): clearing the
     * whole struct first was a string store on every hit */
    req->src = src;
    req->cwd_bound = false;
    req->search_dirs = req->files_read = req->keyed = 0;
    const kpc_option_table *t = ctx->key_prefix.options;
    kpc_status s = check_pointers(src);
    bool relative = false, no_source_dir = false;
    if (s != KPC_OK || (src->num_options && (s = read_options(t, src, req, &relative, &no_source_dir)) != KPC_OK))
        return s;
    req->reads_files = req->search_dirs + req->files_read > 0;
    /* the texts are scanned for an include only on a miss (kpc_request_acquire): on the
     * device machine the scan of a 4 KB source cost a hit four times its floor */
    req->needs_cwd = relative;
    req->cwd_pending = !relative && source_dir_searched(src, ctx->key_prefix.source_dir_searched, no_source_dir);
    if (req->needs_cwd)
        kpc_request_cwd(req->cwd);
    kpc_map_key_compute(&ctx->map_secret, src, req->needs_cwd ? req->cwd : NULL, &req->map_key);
    return KPC_OK;
}

kpc_status kpc_request_read(const kpc_context *ctx, const kpc_source *src, kpc_normalized_request *req)
{
    return read_request(ctx, src, req);
}

/* This thread's counter among the cache's memory-hit counters (see struct kpc_cache). */
static void count_hit(kpc_cache *cache)
{
    atomic_fetch_add_explicit(&cache->mem_hits[kpc_thread_slot() % KPC_HIT_SLOTS].n, 1,
                              memory_order_relaxed);
}

/* Whether a program of the map may answer in the working directory of now. */
static bool same_cwd(const kpc_program *p)
{
    if (!p->cwd_bound)
        return true;
    uint8_t now[16];
    kpc_request_cwd(now);
    return memcmp(now, p->cwd, sizeof now) == 0;
}

/* kpc_request_acquire, inlined into kpc_program_get as read_request is. */
static inline kpc_status acquire(kpc_context *ctx, kpc_normalized_request *req, kpc_program **out,
                                 kpc_map_entry **entry)
{
    const kpc_key *key = &req->map_key;
    kpc_cache *cache = ctx->cache;
    bool waited;
    kpc_status s;
    for (;;) {
        s = kpc_map_acquire(ctx->map, key, out, entry, &waited);
        /* a program handed over by a build just waited for is fresh; a hit is checked */
        if (s != KPC_OK || waited ||
            (((*out)->deps == NULL || kpc_manifest_deps_match((*out)->deps)) && same_cwd(*out)))
            break;
        kpc_map_forget(ctx->map, key, *out); /* a file changed: the next acquire misses */
        kpc_program_release(*out);
        *out = NULL;
    }
    if (s == KPC_E_NOT_FOUND) {
        atomic_fetch_add_explicit(&cache->mem_misses, 1, memory_order_relaxed);
        if (req->cwd_pending && mentions_include(req->src)) {
            req->needs_cwd = req->cwd_bound = true;
            kpc_request_cwd(req->cwd);
        }
        kpc_key_compute_read(&ctx->key_prefix, req->src, req->needs_cwd ? req->cwd : NULL, &req->key);
    } else if (waited)
        atomic_fetch_add_explicit(&cache->waits, 1, memory_order_relaxed);
    else if (s == KPC_OK)
        count_hit(cache);
    return s;
}

kpc_status kpc_request_acquire(kpc_context *ctx, kpc_normalized_request *req, kpc_program **out,
                               kpc_map_entry **entry)
{
    return acquire(ctx, req, out, entry);
}

void kpc_request_publish(kpc_context *ctx, const kpc_normalized_request *req, kpc_map_entry *entry,
                         kpc_status s, kpc_program *prog, const char *log)
{
    if (s == KPC_OK && req->cwd_bound) {
        prog->cwd_bound = true;
        memcpy(prog->cwd, req->cwd, sizeof prog->cwd);
    }
    kpc_map_publish(ctx->map, entry, s, prog, log);
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
    kpc_normalized_request req;
    if ((s = read_request(ctx, src, &req)) != KPC_OK)
        return s;
    kpc_map_entry *entry;
    s = acquire(ctx, &req, out, &entry);
    if (s != KPC_E_NOT_FOUND)
        return s;
    kpc_program *prog = NULL;
    char *log = NULL;
    s = kpc_resolve_miss(ctx, &req, &prog, &log);
    if (s == KPC_OK)
        *out = prog;
    else
        kpc__last_log_set(log);
    kpc_request_publish(ctx, &req, entry, s, prog, log);
    free(log);
    return s;
}
