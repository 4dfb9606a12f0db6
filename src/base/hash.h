/*
 * hash.h - libxxhash as kpc includes it: the state types for the stack, and the run-time
 * dispatch where the library has it (xxh_x86dispatch.h), which hashes with the AVX2 or
 * AVX-512 loop where the CPU has one and gives the same values (XXH3 is defined apart
 * from the vector width). Debian's library is built for the baseline x86-64 (SSE2): a
 * hit's checksum of a 33 KB record took 2.5 times as long through it, and the source's
 * digest is most of an in-memory hit (SSE2 hashes ~10 bytes a ns on the device machine).
 */
#ifndef KPC_BASE_HASH_H
#define KPC_BASE_HASH_H

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(KPC_HAVE_XXH_DISPATCH)
#include <xxh_x86dispatch.h>
#endif

#endif /* KPC_BASE_HASH_H */
