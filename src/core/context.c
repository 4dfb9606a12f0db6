/*
 * context.c - a context's life: the compiler identity and the normalized target it
 * compiles for (taken under the cache dir's identity lock, so that a storm of cold
 * processes loads the compiler once), its key prefix and its program map.
 */
#define _GNU_SOURCE
#include "core/context.h"
#include "core/cache.h"
#include "core/key.h"
#include "core/map.h"
#include "base/log.h"
#include "base/root.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The compiler's identity and the validated targets are remembered in the cache dir, so a
 * process normally creates a context without loading the compiler. On an empty cache the
 * first process must load it (~85 ms of CPU for comgr and LLVM here); without this lock,
 * every process of a storm that starts at once loads it too (tests/bench/bench_storm: 64
 * processes spent ~5 s of CPU on it on 2 cores). With it, the first computes and
 * remembers, and the others sleep, then recall. Returns the fd to unlock, or -1 (no
 * cache dir, or a read-only one: go on unlocked).
 */
static int identity_lock(const kpc_root *root)
{
    const char *call;
    return root ? kpc_root_lock(root, "identity", false, &call, NULL, 0) : -1;
}

/*
 * The compiler's identity, once per process: recalling it from the cache dir re-stats a
 * dozen files, and without a cache dir it would hash the device libraries again for
 * every context. The compiler a process has loaded (or would load) does not change while
 * it runs. A test that installs another platform gets that platform's own.
 */
static kpc_status compiler_identity(const kpc_platform *pf, const kpc_root *root, uint8_t id[16])
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static const kpc_platform *memo_pf;
    static uint8_t memo_id[16];
    kpc_status s = KPC_OK;
    pthread_mutex_lock(&lock);
    if (memo_pf != pf) {
        char desc[512];
        s = pf->identity(root, id, desc, sizeof desc);
        if (s == KPC_OK) {
            memcpy(memo_id, id, 16);
            memo_pf = pf;
        }
    } else {
        memcpy(id, memo_id, 16);
    }
    pthread_mutex_unlock(&lock);
    return s;
}

static kpc_status context_new(kpc_cache *cache, const char *target, int device, kpc_context **out)
{
    const kpc_platform *pf = cache->platform;
    if (kpc_cache_check_process(cache, "kpc_context_create") != KPC_OK)
        return KPC_E_INVALID;
    kpc_context *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return KPC_E_NOMEM;
    ctx->cache = cache;
    ctx->device = device;
    const kpc_root *root = cache->root;
    int lock = identity_lock(root);
    kpc_status s = compiler_identity(pf, root, ctx->compiler_id);
    if (s == KPC_OK)
        s = pf->target_normalize(root, ctx->compiler_id, target, ctx->target, sizeof ctx->target);
    if (lock >= 0)
        close(lock); /* releases the flock */
    if (s == KPC_OK)
        s = kpc_map_new(cache->settings.mem_max_programs, &ctx->map);
    if (s == KPC_OK) {
        kpc_key_identity(pf, ctx->compiler_id, ctx->key_id);
        kpc_key_prefix_init(&ctx->key_prefix, ctx->key_id, pf->name, ctx->target);
        kpc_map_key_secret_init(&ctx->map_secret);
    }
    if (s != KPC_OK) {
        free(ctx);
        return s;
    }
    atomic_fetch_add(&cache->contexts, 1);
    KPC_LOG(KPC_LOG_DEBUG, "context for %s (device %d)", ctx->target, device);
    *out = ctx;
    return KPC_OK;
}

kpc_status kpc_context_create_for_target(kpc_cache *cache, const char *target, kpc_context **out)
{
    if (out)
        *out = NULL;
    if (cache == NULL || target == NULL || out == NULL || target[0] == '\0') {
        KPC_LOG(KPC_LOG_ERROR, "kpc_context_create_for_target: NULL or empty argument");
        return KPC_E_INVALID;
    }
    return context_new(cache, target, -1, out);
}

kpc_status kpc_context_create(kpc_cache *cache, int hip_device, kpc_context **out)
{
    if (out)
        *out = NULL;
    if (cache == NULL || out == NULL || hip_device < 0) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_context_create: NULL argument or negative device");
        return KPC_E_INVALID;
    }
    char target[64];
    kpc_status s = cache->platform->device_target(hip_device, target, sizeof target);
    if (s != KPC_OK)
        return s;
    return context_new(cache, target, hip_device, out);
}

const char *kpc_context_target(const kpc_context *ctx)
{
    return ctx ? ctx->target : NULL;
}

void kpc_context_destroy(kpc_context *ctx)
{
    if (ctx == NULL)
        return;
    kpc_map_free(ctx->map);
    atomic_fetch_sub(&ctx->cache->contexts, 1);
    free(ctx);
}

