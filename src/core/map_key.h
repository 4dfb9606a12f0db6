/*
 * map_key.h - the in-memory map's key (core/map_key.c): the request's fields under a
 * secret of the context's own, laid out in words for the hash that reads them.
 *
 * The request key (core/key.h) is made to be equal in every process, so anyone may
 * compute it and search for two inputs that share it; a record from another process is
 * checked against its request for that reason (core/hit.h). An in-memory hit is not
 * checked: its key is one no input can be chosen to share, because no one outside the
 * process knows the secret it is hashed with. The map's key never leaves its process,
 * so its layout is its own and changes with no format's version.
 */
#ifndef KPC_CORE_MAP_KEY_H
#define KPC_CORE_MAP_KEY_H

#include "base/util.h"

#include <stdint.h>

typedef struct kpc_map_secret {
    uint8_t bytes[192]; /* libxxhash's default secret's size */
} kpc_map_secret;

/* A fresh secret from getrandom(2), or where that fails from what no input can choose
 * either (the time, the pid, addresses; logged at debug). */
void kpc_map_key_secret_init(kpc_map_secret *secret);

/* The map's key of src: what changes the code object of a request of one context (its
 * options in order, name, source, headers in order, name expressions in order) and cwd,
 * the XXH3-128 of the working directory (core/request.h) where the request depends on it,
 * else NULL. Hashes the source once and then its words once. */
void kpc_map_key_compute(const kpc_map_secret *secret, const kpc_source *src, const uint8_t *cwd, kpc_key *out);

#ifdef KPC_TEST_HOOKS
/* The source's digest is the layout's words 1 and 2. */
#define KPC_MAP_KEY_DIGEST_WORD 1
/* The words whose XXH3-128 under secret is src's map key, into words (at most cap): their
 * count, or 0 where they are more (then they are hashed as they are written). bench_hit's
 * floor hashes them; tests read the layout. */
size_t kpc_map_key_words(const kpc_map_secret *secret, const kpc_source *src, const uint8_t *cwd,
                         uint64_t *words, size_t cap);
#endif

#endif /* KPC_CORE_MAP_KEY_H */
