/*
 * kpc_example - the library as an application uses it: open the cache, make a context
 * for a target, get a program three times (built or from the host cache, then from the
 * in-memory map), and print where each came from and what it cost.
 * usage: kpc_example TARGET FILE.hip
 */
#define _POSIX_C_SOURCE 200809L
#include <kpc/kpc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    } else if (buf)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: kpc_example TARGET FILE.hip\n");
        return 2;
    }
    char *code = slurp(argv[2]);
    if (code == NULL) {
        perror(argv[2]);
        return 1;
    }
    kpc_cache *cache;
    kpc_context *ctx;
    kpc_status s = kpc_cache_open(NULL, &cache);
    if (s == KPC_OK)
        s = kpc_context_create_for_target(cache, argv[1], &ctx);
    if (s != KPC_OK) {
        fprintf(stderr, "kpc: %s\n", kpc_status_str(s));
        return 1;
    }
    /* the name is part of the key: use the same one `kpc compile` does, so the object it
     * cached is found */
    const char *slash = strrchr(argv[2], '/');
    kpc_source src = {.code = code, .name = slash ? slash + 1 : argv[2]};
    for (int i = 0; i < 3; i++) {
        kpc_stats before, after;
        kpc_stats_get(cache, &before);
        kpc_program *prog;
        double t0 = now_us();
        s = kpc_program_get(ctx, &src, &prog);
        double dt = now_us() - t0;
        if (s != KPC_OK) {
            fprintf(stderr, "kpc_program_get: %s\n%s", kpc_status_str(s), kpc_last_log());
            return 1;
        }
        kpc_stats_get(cache, &after);
        size_t size;
        kpc_program_code(prog, &size);
        const char *from = after.builds > before.builds       ? "built (compiled)"
                           : after.disk_hits > before.disk_hits ? "host cache (shm index + disk)"
                                                                : "in-memory map";
        printf("get %d: %-30s %10.1f us  %zu bytes\n", i + 1, from, dt, size);
        kpc_program_release(prog);
    }
    kpc_context_destroy(ctx);
    kpc_cache_close(cache);
    free(code);
    return 0;
}
