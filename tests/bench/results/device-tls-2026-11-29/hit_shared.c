/* hit_shared.c - kpc_program_get + release of one warm 4 KB source through the public API,
 * linked against libkpc.so: the best of 7 batches of N, in ns per hit.
 * usage: hit_shared CACHE_DIR N TARGET */
#include <kpc/kpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: hit_shared CACHE_DIR N TARGET\n");
        return 2;
    }
    long n = atol(argv[2]);
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = argv[1]};
    kpc_cache *c;
    kpc_context *ctx;
    if (kpc_cache_open(&cfg, &c) != KPC_OK || kpc_context_create_for_target(c, argv[3], &ctx) != KPC_OK)
        return 1;
    char *code = malloc(4097);
    int k = snprintf(code, 4097, "extern \"C\" __global__ void k(float *a) { a[0] = 1; }\n");
    memset(code + k, ' ', 4096 - (size_t)k);
    code[4095] = '\n';
    code[4096] = '\0';
    kpc_source src = {.code = code, .code_len = 4096, .name = "hit.hip"};
    kpc_program *p;
    if (kpc_program_get(ctx, &src, &p) != KPC_OK) {
        fprintf(stderr, "%s\n", kpc_last_log());
        return 1;
    }
    kpc_program_release(p);
    double best = 1e9;
    for (int r = 0; r < 7; r++) {
        double t0 = now();
        for (long i = 0; i < n; i++) {
            kpc_program_get(ctx, &src, &p);
            kpc_program_release(p);
        }
        double t = (now() - t0) / (double)n * 1e9;
        if (t < best)
            best = t;
    }
    printf("%.1f ns per hit\n", best);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    free(code);
    return 0;
}
