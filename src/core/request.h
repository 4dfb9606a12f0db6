/*
 * request.h - a request read once (core/request.c): what kpc_program_get and
 * kpc_program_get_many (core/batch.c) make of a kpc_source before anything else, and the
 * map steps both take with it.
 */
#ifndef KPC_CORE_REQUEST_H
#define KPC_CORE_REQUEST_H

#include "core/context.h"
#include "core/map.h"

/*
 * A normalized request: the source's checks passed, its options classified once, its key
 * computed once. Every later step (the map, the host index, the tiers, the build, the
 * record, the publish) reads this and never goes back to the options; the source's bytes
 * are read again only by the compiler and by the record of a build.
 */
typedef struct kpc_normalized_request {
    const kpc_source *src; /* the caller's (not copied): valid for the call */
    kpc_key map_key;       /* the context's map's (core/map_key.h: hashed with its secret) */
    kpc_key key;           /* the request key: the index's, every tier's, and the identity
                              of its manifest (the manifest lies under it); computed once
                              the map has missed (core/miss.h), as a hit needs none */
    bool needs_cwd;        /* both keys hold the working directory (kpc_request_needs_cwd) */
    /* A relative source name whose directory the compiler searches (NVRTC): whether the
     * directory counts depends on the texts' including anything, which a hit does not
     * scan for. The map key leaves the directory out, and the program says whether it
     * was built for one (kpc_program.cwd_bound); a miss scans, and then needs_cwd and
     * cwd_bound are set */
    bool cwd_pending;
    bool cwd_bound;
    uint8_t cwd[16];       /* the working directory's digest, where needs_cwd */
    bool reads_files;      /* an option names a directory to search or a file to read: its
                              outcome is likely behind a manifest, looked for first */
    size_t search_dirs;    /* options naming a directory to search */
    size_t files_read;     /* options naming a file read whole */
    size_t keyed;          /* options keyed as they are written (neither a path nor a target) */
} kpc_normalized_request;

/* Read src on ctx into *req: KPC_OK, or KPC_E_INVALID (logged) for a request that cannot
 * be served (a NULL where a pointer is due, an empty source or name expression, an
 * option naming the target). */
kpc_status kpc_request_read(const kpc_context *ctx, const kpc_source *src, kpc_normalized_request *req);

/*
 * Whether the request's outcome may depend on the working directory: an option names
 * a relative path to search or to read (what the compiler's option table,
 * platform/options.h, calls a search directory, a file read or a path). A quoted
 * #include never resolves against the working directory under hipRTC (the source is
 * compiled from comgr's own directory); a compiler that searches the source's own
 * directory (NVRTC) makes a relative source name count too, unless an option stops it,
 * and only if the source or an in-memory header says "include" anywhere (texts that
 * include nothing read nothing from that directory). The same rule kpc_request_read
 * applies; this is for a source not read as a request (core/key.c's kpc_key_compute).
 */
bool kpc_request_needs_cwd(const kpc_source *src, const kpc_option_table *options);
/* The context's map for the request, as kpc_program_get's kpc_map_get asks it, taken
 * apart for kpc_program_get_many: a hit on a program whose files from disk changed, or
 * that was built for another working directory, is dropped and misses; counted (hit,
 * wait or miss). KPC_E_NOT_FOUND: req->key computed (core/miss.h, kpc_miss_prepare) and
 * *entry held, to be resolved and given to kpc_request_publish. */
kpc_status kpc_request_acquire(kpc_context *ctx, kpc_normalized_request *req, kpc_program **out,
                               kpc_map_entry **entry);
/* Publish a resolved miss to the map (which takes its own reference to prog); a
 * transient program (its outcome stored nowhere) goes to the waiters but is not kept. */
void kpc_request_publish(kpc_context *ctx, const kpc_normalized_request *req, kpc_map_entry *entry,
                         kpc_status s, kpc_program *prog, const char *log);

#endif /* KPC_CORE_REQUEST_H */
