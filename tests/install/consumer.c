/* A program built against an installed kpc, by CMake (find_package) and by pkg-config:
 * it compiles one kernel through the cache and checks it got a code object. */
#include <kpc/kpc.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *target = argc > 1 ? argv[1] : "gfx90a";
    kpc_cache *cache;
    kpc_context *ctx;
    kpc_program *prog;
    kpc_source src = {.code = "extern \"C\" __global__ void consumer_k(float *a) { a[0] = 1.0f; }\n",
                      .name = "consumer.hip"};
    kpc_status s = kpc_cache_open(NULL, &cache);
    if (s == KPC_OK)
        s = kpc_context_create_for_target(cache, target, &ctx);
    if (s == KPC_OK)
        s = kpc_program_get(ctx, &src, &prog);
    if (s != KPC_OK) {
        fprintf(stderr, "consumer: %s\n%s", kpc_status_str(s), kpc_last_log());
        return 1;
    }
    size_t size;
    const unsigned char *code = kpc_program_code(prog, &size);
    int ok = size > 4 && (memcmp(code, "\x7f" "ELF", 4) == 0 || strstr((const char *)code, ".version"));
    printf("consumer: %zu bytes of code object for %s: %s\n", size, kpc_context_target(ctx), ok ? "ok" : "BAD");
    kpc_program_release(prog);
    kpc_context_destroy(ctx);
    kpc_cache_close(cache);
    return ok ? 0 : 1;
}
