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
/*
 * The dispatched hashes, through kpc's (base/hash.c). libxxhash 0.8.1's AVX2 and AVX-512
 * code (Debian 12's) returns with the upper halves of the vector registers in use: no
 * VZEROUPPER, which the convention asks of the function that used them (0.8.3 runs it).
 * The next legacy SSE instruction, any 16-byte copy GCC writes in kpc's code, then costs
 * a state change: about 250 ns each on the device machine's Xeon (a hash of 4 KB alone
 * took 154 ns, with one SSE store after it 395 to 429 ns), nothing here. A 4 KB
 * in-memory hit of 200 ns took 450 there when one such copy landed in its path. kpc's
 * clear the upper halves after each call.
 */
#undef XXH3_64bits
#undef XXH3_64bits_withSeed
#undef XXH3_64bits_update
#undef XXH3_128bits
#undef XXH3_128bits_withSecret
#undef XXH3_128bits_update
#define XXH3_64bits kpc_xxh3_64bits
#define XXH3_64bits_withSeed kpc_xxh3_64bits_withSeed
#define XXH3_64bits_update kpc_xxh3_64bits_update
#define XXH3_128bits kpc_xxh3_128bits
#define XXH3_128bits_withSecret kpc_xxh3_128bits_withSecret
#define XXH3_128bits_update kpc_xxh3_128bits_update
XXH64_hash_t kpc_xxh3_64bits(const void *input, size_t len);
XXH64_hash_t kpc_xxh3_64bits_withSeed(const void *input, size_t len, XXH64_hash_t seed);
XXH_errorcode kpc_xxh3_64bits_update(XXH3_state_t *state, const void *input, size_t len);
XXH128_hash_t kpc_xxh3_128bits(const void *input, size_t len);
XXH128_hash_t kpc_xxh3_128bits_withSecret(const void *input, size_t len, const void *secret, size_t secret_len);
XXH_errorcode kpc_xxh3_128bits_update(XXH3_state_t *state, const void *input, size_t len);
#endif

#endif /* KPC_BASE_HASH_H */
