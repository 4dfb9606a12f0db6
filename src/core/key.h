/*
 * key.h - the cache key of a request (core/key.c); the kpc_key type is base/util.h's.
 */
#ifndef KPC_CORE_KEY_H
#define KPC_CORE_KEY_H

#include "base/util.h"
#include "platform/options.h"
#include "platform/platform.h"

void kpc_key_hex(const kpc_key *key, char out[KPC_KEY_HEX]);
bool kpc_key_parse(const char *hex, kpc_key *out);
/* The prefix: what every source of a context shares, serialized once (the strings are
 * not copied: they must outlive the prefix). */
typedef struct kpc_key_prefix {
    uint8_t bytes[192];
    size_t len; /* SIZE_MAX: the names were too long for bytes */
    uint8_t compiler_id[16];
    const char *platform, *target;
    const kpc_option_table *options; /* the compiler's (platform/options.h) */
    bool source_dir_searched;        /* kpc_options_source_dir_searched(options), read by
                                        every request: asked once */
} kpc_key_prefix;
void kpc_key_prefix_init(kpc_key_prefix *pre, const uint8_t compiler_id[16], const char *platform,
                         const char *target);
/* The key of a request already read (core/request.h): cwd, the XXH3-128 of the working
 * directory (kpc__cwd_digest) where the request depends on it, else NULL. Hashes the source
 * once; a request computes it once the in-memory map has missed (the map's own key:
 * core/map_key.h). */
void kpc_key_compute_read(const kpc_key_prefix *pre, const kpc_source *src, const uint8_t *cwd, kpc_key *out);
struct kpc_normalized_request;
/* req->key of a request read whose map missed: first, where the working directory's part
 * was left pending (req->cwd_pending), the texts are scanned for an include, and one
 * found sets needs_cwd, cwd_bound and cwd. */
void kpc_key_compute_request(const kpc_key_prefix *pre, struct kpc_normalized_request *req);
/* Whether the source or an in-memory header says "include" anywhere (conservative: a
 * comment counts too): texts that say it nowhere read nothing from the source's
 * directory. */
bool kpc_key_texts_include(const kpc_source *src);
/* The key of a source not read as a request (tools, tests): the same bytes, the
 * working directory decided by kpc_request_needs_cwd. */
kpc_status kpc_key_compute_prefixed(const kpc_key_prefix *pre, const kpc_source *src, kpc_key *out);
kpc_status kpc_key_compute(const uint8_t compiler_id[16], const char *platform, const char *target,
                           const kpc_source *src, kpc_key *out);
/* The 16 bytes keys hash for a compiler identity: it with the values of pf->key_env now. */
void kpc_key_identity(const kpc_platform *pf, const uint8_t compiler_id[16], uint8_t key_id[16]);

#ifdef KPC_TEST_HOOKS
/* Every request's key is key from now on (NULL: computed again): two requests made to
 * collide, as a chosen input could (tests/test_collision.c). */
void kpc_key_test_override(const kpc_key *key);
#endif

#endif /* KPC_CORE_KEY_H */
