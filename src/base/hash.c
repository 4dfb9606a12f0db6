/*
 * hash.c - libxxhash's dispatched hashes with the vector registers' upper halves cleared
 * after each call (base/hash.h says why). A CPU without AVX has no upper halves and runs
 * libxxhash's SSE2 code: the calls go straight through. With AVX, each goes through a
 * function compiled for AVX, so that nothing between the library's return and the clear
 * is a legacy SSE instruction (GCC writes its 16-byte moves in VEX there); the clear
 * itself (VZEROUPPER) costs about a cycle.
 */
#include "base/hash.h"

#if defined(KPC_HAVE_XXH_DISPATCH)
#include <immintrin.h>
#include <stdbool.h>

static bool has_avx(void)
{
    /* libgcc's CPU model, filled before main and before a library's constructors; it
     * also asks the OS whether it saves the YMM state (XGETBV), as VZEROUPPER needs */
    return __builtin_cpu_supports("avx");
}

#define KPC_AVX __attribute__((target("avx")))

KPC_AVX static XXH64_hash_t avx_64(const void *input, size_t len)
{
    XXH64_hash_t h = XXH3_64bits_dispatch(input, len);
    _mm256_zeroupper();
    return h;
}

KPC_AVX static XXH64_hash_t avx_64_seed(const void *input, size_t len, XXH64_hash_t seed)
{
    XXH64_hash_t h = XXH3_64bits_withSeed_dispatch(input, len, seed);
    _mm256_zeroupper();
    return h;
}

KPC_AVX static XXH_errorcode avx_64_update(XXH3_state_t *state, const void *input, size_t len)
{
    XXH_errorcode e = XXH3_64bits_update_dispatch(state, input, len);
    _mm256_zeroupper();
    return e;
}

KPC_AVX static XXH128_hash_t avx_128(const void *input, size_t len)
{
    XXH128_hash_t h = XXH3_128bits_dispatch(input, len);
    _mm256_zeroupper();
    return h;
}

KPC_AVX static XXH128_hash_t avx_128_secret(const void *input, size_t len, const void *secret, size_t secret_len)
{
    XXH128_hash_t h = XXH3_128bits_withSecret_dispatch(input, len, secret, secret_len);
    _mm256_zeroupper();
    return h;
}

KPC_AVX static XXH_errorcode avx_128_update(XXH3_state_t *state, const void *input, size_t len)
{
    XXH_errorcode e = XXH3_128bits_update_dispatch(state, input, len);
    _mm256_zeroupper();
    return e;
}

XXH64_hash_t kpc_xxh3_64bits(const void *input, size_t len)
{
    return has_avx() ? avx_64(input, len) : XXH3_64bits_dispatch(input, len);
}

XXH64_hash_t kpc_xxh3_64bits_withSeed(const void *input, size_t len, XXH64_hash_t seed)
{
    return has_avx() ? avx_64_seed(input, len, seed) : XXH3_64bits_withSeed_dispatch(input, len, seed);
}

XXH_errorcode kpc_xxh3_64bits_update(XXH3_state_t *state, const void *input, size_t len)
{
    return has_avx() ? avx_64_update(state, input, len) : XXH3_64bits_update_dispatch(state, input, len);
}

XXH128_hash_t kpc_xxh3_128bits(const void *input, size_t len)
{
    return has_avx() ? avx_128(input, len) : XXH3_128bits_dispatch(input, len);
}

XXH128_hash_t kpc_xxh3_128bits_withSecret(const void *input, size_t len, const void *secret, size_t secret_len)
{
    return has_avx() ? avx_128_secret(input, len, secret, secret_len)
                     : XXH3_128bits_withSecret_dispatch(input, len, secret, secret_len);
}

XXH_errorcode kpc_xxh3_128bits_update(XXH3_state_t *state, const void *input, size_t len)
{
    return has_avx() ? avx_128_update(state, input, len) : XXH3_128bits_update_dispatch(state, input, len);
}
#endif
