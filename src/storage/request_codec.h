/*
 * request_codec.h - the request a record keeps beside its code object, serialized
 * (storage/request_codec.c; prefix kpc_request_): what `kpc replay` rebuilds from, and
 * what a hit from another process is compared with. Format: docs/file-format.md ("The
 * request section").
 */
#ifndef KPC_STORAGE_REQUEST_CODEC_H
#define KPC_STORAGE_REQUEST_CODEC_H

#include "base/util.h"
#include "kpc/kpc.h"

#include <stdbool.h>
#include <stdint.h>

#include <stddef.h>

typedef struct kpc_request {
    kpc_source src;      /* every string malloc'd and NUL-terminated; a NULL name stays NULL */
    size_t num_env;      /* the hidden-option variables as the requester had them */
    char **env_names;
    char **env_values;   /* NULL: the variable was unset (distinct from "") */
    char *cwd;           /* the requester's working directory; NULL when unknown */
} kpc_request;

/* Serialize src and the values, now, of env_names (NULL-terminated; may be NULL) into a
 * malloc'd section. KPC_E_INVALID (no source), KPC_E_NOMEM. */
kpc_status kpc_request_encode(const kpc_source *src, const char *const *env_names, void **out,
                              size_t *size);
/* Decode a section; KPC_E_CORRUPT when it fails any check, KPC_E_NOMEM. */
kpc_status kpc_request_decode(const void *section, size_t size, kpc_request *out);
void kpc_request_free(kpc_request *rq);

/* Whether a section was written for src: the source, its name, options, headers and name
 * expressions compared byte for byte where they lie (what the digest below covers).
 * UNREAD: a section of version 1 (compressed) or a malformed one, left to the digest. */
enum kpc_request_match { KPC_REQUEST_UNREAD, KPC_REQUEST_SAME, KPC_REQUEST_OTHER };
enum kpc_request_match kpc_request_compare(const void *section, size_t size, const kpc_source *src);

/* The BLAKE2b-256 (libsodium) of what the request is for the key: key, then the source,
 * its name, options, headers (names and texts) and name expressions whole, each with its
 * length. Unlike the key (XXH3, made for speed, not against chosen inputs), no one can
 * make two requests share it. False without libsodium (a build without the cluster
 * tier): the request has no digest then. */
bool kpc_request_digest(const kpc_key *key, const kpc_source *src, uint8_t out[32]);

#endif /* KPC_STORAGE_REQUEST_CODEC_H */
