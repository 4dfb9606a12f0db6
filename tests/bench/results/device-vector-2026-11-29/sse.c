/*
 * sse.c - does one legacy SSE instruction after libxxhash's dispatched hash cost much?
 * A scratch measurement, not part of the build. On the device machine:
 *   gcc -O2 -I$X/include -o /tmp/sse sse.c -L$X/lib/x86_64-linux-gnu -lxxhash
 *   LD_LIBRARY_PATH=$X/lib/x86_64-linux-gnu /tmp/sse [BYTES]
 * with X=/tmp/kpc-deps/xxhash/usr (scripts/bench-device.sh unpacks it there). Each line:
 * ns per XXH3-128 of BYTES (default 4096) followed by nothing, by one SSE store (pxor and
 * movups), by one VEX store, or by VZEROUPPER; three rounds.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <xxhash.h>
#include <xxh_x86dispatch.h>

static unsigned char secret[192];
static unsigned char sink[64] __attribute__((aligned(64)));

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

__attribute__((noinline)) static void sse_store(void)
{
    __asm__ volatile("pxor %%xmm0,%%xmm0\n\tmovups %%xmm0,%0" : "=m"(*(char(*)[16])sink)::"xmm0");
}

__attribute__((noinline)) static void vex_store(void)
{
    __asm__ volatile("vpxor %%xmm0,%%xmm0,%%xmm0\n\tvmovups %%xmm0,%0" : "=m"(*(char(*)[16])sink)::"xmm0");
}

__attribute__((noinline)) static void clear_upper(void)
{
    __asm__ volatile("vzeroupper");
}

__attribute__((noinline)) static void nothing(void)
{
    __asm__ volatile("");
}

int main(int argc, char **argv)
{
    size_t len = argc > 1 ? (size_t)atol(argv[1]) : 4096;
    char *src = malloc(len);
    if (src == NULL)
        return 1;
    for (size_t i = 0; i < len; i++)
        src[i] = (char)i;
    for (int i = 0; i < 192; i++)
        secret[i] = (unsigned char)(i * 31 + 7);
    static const struct {
        const char *name;
        void (*after)(void);
    } v[] = {{"hash only", nothing}, {"hash + legacy SSE store", sse_store},
             {"hash + VEX store", vex_store}, {"hash + vzeroupper", clear_upper}};
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 4; k++) {
            uint64_t acc = 0;
            int n = 200000;
            for (int i = 0; i < n / 10; i++) { /* warm-up */
                acc += XXH3_128bits_withSecret(src, len, secret, sizeof secret).low64;
                v[k].after();
            }
            uint64_t t0 = now_ns();
            for (int i = 0; i < n; i++) {
                acc += XXH3_128bits_withSecret(src, len, secret, sizeof secret).low64;
                v[k].after();
            }
            printf("%-26s %7.1f ns  (%llu)\n", v[k].name, (double)(now_ns() - t0) / n, (unsigned long long)(acc & 1));
        }
    free(src);
    return 0;
}
