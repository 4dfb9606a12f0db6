/*
 * request.c - kpc_program_get, top to bottom: the request read once (kpc_request_read:
 * its pointers checked, its options classified in one pass, its map key computed in one),
 * then the context's map in one call (core/map.h, kpc_map_get): a hit, checked against
 * the files and the working directory it was built from (core/manifest.h,
 * kpc_manifest_current); a wait on another thread's build; or a miss, which the map
 * hands to core/miss.c (the request key, then core/resolve.c) and publishes. No step
 * goes back to the options or to a file it has left: docs/design.md draws the path.
 *
 * A program with no file from disk and no working directory (p->deps NULL, the usual
 * one) costs the map two loads more than before checks existed.
 * kpc_program_get_many (core/batch.c) reads its requests the same way and goes through
 * the same two map steps, taken apart (kpc_request_acquire, kpc_request_publish), so a
 * batch checks what a single request checks and keeps what it keeps.
 *
 * The options are classified on every request, hits included: the option table's rows
 * are refused on their second byte before any string compare (platform/options.c), so
 * an option that names no path and no target costs a few byte compares, not a strcmp
 * per row of the table.
 */
#include "core/cache.h"
#include "core/context.h"
#include "core/key.h" /* kpc_key_texts_include */
#include "core/manifest.h"
#include "core/map.h"
#include "core/map_key.h"
#include "core/miss.h"
#include "core/request.h"
#include "base/grace.h"
#include "base/log.h"
#include "platform/options.h"

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
           (source_dir_searched(src, kpc_options_source_dir_searched(t), no_source_dir) && kpc_key_texts_include(src));
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
    /* the texts are scanned for an include only on a miss (core/key.h,
     * kpc_key_compute_request): on the device machine the scan of a 4 KB source cost a
     * hit four times its floor */
    req->needs_cwd = relative;
    req->cwd_pending = !relative && source_dir_searched(src, ctx->key_prefix.source_dir_searched, no_source_dir);
    if (req->needs_cwd)
        kpc__cwd_digest(req->cwd);
    kpc_map_key_compute(&ctx->map_secret, src, req->needs_cwd ? req->cwd : NULL, &req->map_key);
    return KPC_OK;
}

kpc_status kpc_request_read(const kpc_context *ctx, const kpc_source *src, kpc_normalized_request *req)
{
    return read_request(ctx, src, req);
}

/* The map's answer counted: a hit in this thread's counter among the cache's
 * memory-hit counters (see struct kpc_cache), a wait; a miss is counted by core/miss.c. */
static void count(kpc_cache *cache, kpc_map_answer how, kpc_status s)
{
    if (how == KPC_MAP_WAITED)
        atomic_fetch_add_explicit(&cache->waits, 1, memory_order_relaxed);
    else if (how == KPC_MAP_HIT && s == KPC_OK)
        atomic_fetch_add_explicit(&cache->mem_hits[kpc_thread_slot() % KPC_HIT_SLOTS].n, 1,
                                  memory_order_relaxed);
}

kpc_status kpc_request_acquire(kpc_context *ctx, kpc_normalized_request *req, kpc_program **out,
                               kpc_map_entry **entry)
{
    kpc_map_answer how;
    kpc_status s = kpc_map_acquire(ctx->map, &req->map_key, kpc_manifest_current, out, entry, &how);
    count(ctx->cache, how, s);
    if (s == KPC_E_NOT_FOUND)
        kpc_miss_prepare(ctx, req);
    return s;
}

void kpc_request_publish(kpc_context *ctx, const kpc_normalized_request *req, kpc_map_entry *entry,
                         kpc_status s, kpc_program *prog, const char *log)
{
    kpc_miss_bind(req, s, prog);
    kpc_map_publish(ctx->map, entry, s, prog, log);
}

/* The map's resolver for kpc_program_get: the hit's check, and the miss (core/miss.c). */
static const kpc_map_resolver resolver = {kpc_manifest_current, kpc_miss_resolve};

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
    kpc_miss miss = {ctx, &req};
    kpc_map_answer how;
    s = kpc_map_get(ctx->map, &req.map_key, &resolver, &miss, out, &how);
    count(ctx->cache, how, s);
    return s;
}
