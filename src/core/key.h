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
/* The key of a source for a compiler identity and a normalized target. */
kpc_status kpc_key_compute(const uint8_t compiler_id[16], const char *platform, const char *target,
                           const kpc_source *src, kpc_key *out);
/* The same in two steps: what every source of a context shares, serialized once (the
 * strings are not copied: they must outlive the prefix), then a source's key. */
typedef struct kpc_key_prefix {
    uint8_t bytes[192];
    size_t len; /* SIZE_MAX: the names were too long for bytes */
    uint8_t compiler_id[16];
    const char *platform, *target;
    const kpc_option_table *options; /* the compiler's (platform/options.h) */
} kpc_key_prefix;
void kpc_key_prefix_init(kpc_key_prefix *pre, const uint8_t compiler_id[16], const char *platform,
                         const char *target);
kpc_status kpc_key_compute_prefixed(const kpc_key_prefix *pre, const kpc_source *src, kpc_key *out);
/* The key of src as if its outcome did not depend on the working directory: its key
 * exactly when kpc_manifest_needs_cwd is false, computed without that scan of the
 * options. False (out unset) when the prefix or the request is too large for the fast
 * path. The map's hit path uses it: a program is stored under such a key only by a
 * request that was found not to depend on it (the same options, so the same finding). */
bool kpc_key_compute_no_cwd(const kpc_key_prefix *pre, const kpc_source *src, kpc_key *out);
/* kpc_key_compute_prefixed for a request whose kpc_key_compute_no_cwd key is no_cwd: where
 * the working directory does not count, that is its key, and the source is not hashed
 * again (a miss of the map's hit path). */
void kpc_key_compute_after_no_cwd(const kpc_key_prefix *pre, const kpc_source *src, const kpc_key *no_cwd,
                                  kpc_key *out);
/* The 16 bytes keys hash for a compiler identity: it with the values of pf->key_env now. */
void kpc_key_identity(const kpc_platform *pf, const uint8_t compiler_id[16], uint8_t key_id[16]);

#ifdef KPC_TEST_HOOKS
/* Every request's key is key from now on (NULL: computed again): two requests made to
 * collide, as a chosen input could (tests/test_collision.c). */
void kpc_key_test_override(const kpc_key *key);
#endif

#endif /* KPC_CORE_KEY_H */
