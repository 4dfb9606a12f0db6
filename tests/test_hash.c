/*
 * test_hash.c - libxxhash as kpc calls it (base/hash.h): the same values as the library's
 * own dispatched calls (where it has them), and streamed as in one shot, at every length
 * class XXH3 treats apart; and the vector registers' upper halves in their initial state
 * after each of kpc's calls, where the library's own leave them in use (read with XGETBV
 * 1, which reports the state components in use; on a CPU without it or without AVX2,
 * or with a libxxhash that clears them itself, that case is skipped).
 */
#include "support.h"
#include "base/hash.h"

#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

static const size_t lengths[] = {0, 1, 3, 16, 17, 128, 129, 240, 241, 1023, 4096, 100003};

static uint8_t *bytes_of(size_t n)
{
    uint8_t *b = malloc(n + 1);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 131 + (i >> 7));
    return b;
}

START_TEST(same_values_as_the_library)
{
    uint8_t secret[192];
    for (size_t i = 0; i < sizeof secret; i++)
        secret[i] = (uint8_t)(i * 37 + 11);
    for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
        size_t n = lengths[k];
        uint8_t *b = bytes_of(n);
        XXH128_hash_t h128 = XXH3_128bits(b, n);
        XXH64_hash_t h64 = XXH3_64bits(b, n);
#if defined(KPC_HAVE_XXH_DISPATCH)
        ck_assert(XXH128_isEqual(h128, XXH3_128bits_dispatch(b, n)));
        ck_assert(XXH128_isEqual(XXH3_128bits_withSecret(b, n, secret, sizeof secret),
                                 XXH3_128bits_withSecret_dispatch(b, n, secret, sizeof secret)));
        ck_assert_uint_eq(h64, XXH3_64bits_dispatch(b, n));
        ck_assert_uint_eq(XXH3_64bits_withSeed(b, n, 77), XXH3_64bits_withSeed_dispatch(b, n, 77));
#endif
        /* streamed in uneven pieces: what the one-shot call gives */
        XXH3_state_t s128, s64;
        XXH3_128bits_reset(&s128);
        XXH3_64bits_reset(&s64);
        for (size_t at = 0, step = 1; at < n; at += step, step = step * 3 + 1) {
            size_t len = step < n - at ? step : n - at;
            ck_assert_int_eq(XXH3_128bits_update(&s128, b + at, len), XXH_OK);
            ck_assert_int_eq(XXH3_64bits_update(&s64, b + at, len), XXH_OK);
        }
        ck_assert(XXH128_isEqual(XXH3_128bits_digest(&s128), h128));
        ck_assert_uint_eq(XXH3_64bits_digest(&s64), h64);
        free(b);
    }
}
END_TEST

#if defined(KPC_HAVE_XXH_DISPATCH) && defined(__x86_64__)
/* XGETBV with ECX = 1: the state components in use; bit 2 is the upper halves of YMM0-15,
 * bit 6 those of ZMM0-15 (AVX-512) */
static uint64_t in_use(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    return (uint64_t)hi << 32 | lo;
}

static bool can_read_in_use(void)
{
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx2") && __get_cpuid_count(0xd, 1, &a, &b, &c, &d) && (a & (1u << 2));
}
#endif

START_TEST(upper_halves_clear_after_each_hash)
{
#if defined(KPC_HAVE_XXH_DISPATCH) && defined(__x86_64__)
    if (!can_read_in_use()) {
        ts_skip("no AVX2 or no XGETBV 1 on this CPU: the library runs no code that leaves them in use");
        return;
    }
    const uint64_t upper = 1u << 2 | 1u << 6;
    size_t n = 4096;
    uint8_t *b = bytes_of(n), secret[192];
    memset(secret, 7, sizeof secret);
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    /* the library's own call: in use after it, or it clears them itself (libxxhash
     * 0.8.3 of Debian 13 does: XINUSE 0xa2) and nothing here could tell kpc's clear from
     * none */
    XXH128_hash_t raw = XXH3_128bits_withSecret_dispatch(b, n, secret, sizeof secret);
    uint64_t after_raw = in_use();
    if (!(after_raw & upper)) {
        ts_skip("this libxxhash leaves the upper halves clear itself (XINUSE %#llx)",
                (unsigned long long)after_raw);
        free(b);
        return;
    }
    XXH128_hash_t h = XXH3_128bits_withSecret(b, n, secret, sizeof secret);
    ck_assert_uint_eq(in_use() & upper, 0);
    ck_assert(XXH128_isEqual(h, raw));
    (void)XXH3_128bits_withSecret_dispatch(b, n, secret, sizeof secret);
    (void)XXH3_128bits(b, n);
    ck_assert_uint_eq(in_use() & upper, 0);
    (void)XXH3_128bits_withSecret_dispatch(b, n, secret, sizeof secret);
    (void)XXH3_64bits(b, n);
    ck_assert_uint_eq(in_use() & upper, 0);
    (void)XXH3_128bits_withSecret_dispatch(b, n, secret, sizeof secret);
    (void)XXH3_64bits_withSeed(b, n, 1);
    ck_assert_uint_eq(in_use() & upper, 0);
    (void)XXH3_128bits_withSecret_dispatch(b, n, secret, sizeof secret);
    ck_assert_int_eq(XXH3_64bits_update(&st, b, n), XXH_OK);
    ck_assert_uint_eq(in_use() & upper, 0);
    XXH3_128bits_reset(&st);
    (void)XXH3_128bits_withSecret_dispatch(b, n, secret, sizeof secret);
    ck_assert_int_eq(XXH3_128bits_update(&st, b, n), XXH_OK);
    ck_assert_uint_eq(in_use() & upper, 0);
    free(b);
#else
    ts_skip("not x86-64 with libxxhash's dispatch: no vector state to clear");
#endif
}
END_TEST

int main(void)
{
    const TTest *tests[] = {same_values_as_the_library, upper_halves_clear_after_each_hash, NULL};
    return ts_main_case("hash", "xxh3", 0, NULL, NULL, tests);
}
