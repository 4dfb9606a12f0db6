/*
 * cache.c - the process's cache: settings, the cache directory, the storage tiers (the
 * disk tree first), the host index, the back-fill thread (with a cluster tier), and the
 * counters. Levels that cannot be used are logged and left off; opening still succeeds.
 */
#define _GNU_SOURCE
#include "core/cache.h"
#include "base/log.h"
#include "storage/remote.h"

#include <pthread.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

atomic_uint kpc__fork_gen;

static void count_fork(void)
{
    atomic_fetch_add_explicit(&kpc__fork_gen, 1, memory_order_relaxed);
}

static void watch_forks(void)
{
    pthread_atfork(NULL, NULL, count_fork);
}

kpc_status kpc_cache_refuse_fork_child(const kpc_cache *cache, const char *fn)
{
    KPC_LOG(KPC_LOG_ERROR, "%s: this cache was opened by process %d; process %d is a fork child "
            "and must open its own (kpc.h: Caveats)", fn, (int)cache->pid, (int)getpid());
    return KPC_E_INVALID;
}

kpc_status kpc_cache_open(const kpc_config *cfg, kpc_cache **out)
{
    if (out == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_cache_open: NULL out");
        return KPC_E_INVALID;
    }
    *out = NULL;
    kpc_cache *c = aligned_alloc(_Alignof(kpc_cache), sizeof *c); /* the hit counters' lines */
    if (c)
        memset(c, 0, sizeof *c);
    if (c == NULL)
        return KPC_E_NOMEM;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, watch_forks);
    c->pid = getpid();
    c->fork_gen = atomic_load(&kpc__fork_gen);
    kpc_status s = kpc_config_resolve(cfg, &c->settings);
    if (s != KPC_OK) {
        free(c);
        return s;
    }
    c->platform = kpc_platform_get();
    const kpc_settings *set = &c->settings;
    if (!(set->flags & KPC_NO_DISK)) {
        if (kpc_root_open(set->cache_dir, &c->root) == KPC_OK) {
            kpc_tier_env env = {.root = c->root, .cfg = cfg, .disk_max_bytes = set->disk_max_bytes};
            kpc_tier_open_all(&env, &c->tiers);
            c->store = kpc_store_of_tier(kpc_tier_host_disk(&c->tiers));
        }
        if (c->store == NULL) {
            KPC_LOG(KPC_LOG_WARN, "the disk cache at %s is off for this process", set->cache_dir);
            kpc_tier_close_all(&c->tiers);
            kpc_root_close(c->root);
            c->root = NULL;
        }
    }
    if (c->store && !(set->flags & KPC_NO_SHM)) {
        if (kpc_index_open(kpc_root_path(c->root), set->shm_entries, false, &c->index) == KPC_OK) {
            _Atomic uint64_t *bytes, *files;
            _Atomic uint32_t *known;
            kpc_index_usage_words(c->index, &bytes, &files, &known);
            kpc_store_share_usage(c->store, bytes, files, known);
        } else {
            KPC_LOG(KPC_LOG_WARN, "the host index is off for this process: disk only");
            c->index = NULL;
        }
    }
    /* records from a cluster tier are copied to disk by a thread of their own */
    if (c->store && kpc_tier_coordinator(&c->tiers))
        kpc_backfill_start(&c->fill, &c->tiers);
    KPC_LOG(KPC_LOG_DEBUG, "cache open: platform %s, disk %s, host index %s", c->platform->name,
            c->root ? kpc_root_path(c->root) : "off", c->index ? "on" : "off");
    *out = c;
    return KPC_OK;
}

void kpc_cache_close(kpc_cache *cache)
{
    if (cache == NULL)
        return;
    int live = atomic_load(&cache->contexts);
    if (live != 0)
        KPC_LOG(KPC_LOG_WARN, "kpc_cache_close: %d context(s) still open", live);
    /* the copies still queued first: each holds a host slot, published once on disk (a
     * fork child has no such thread, and its parent's copies are not its own) */
    if (kpc_cache_opened_here(cache))
        kpc_backfill_stop(&cache->fill);
    kpc_index_close(cache->index);
    kpc_tier_close_all(&cache->tiers); /* the disk tier closes the store */
    kpc_root_close(cache->root);
    free(cache);
}

/* Every counter into *out (the library's own, full size). */
static void stats_fill(kpc_cache *cache, kpc_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < KPC_HIT_SLOTS; i++)
        out->mem_hits += atomic_load_explicit(&cache->mem_hits[i].n, memory_order_relaxed);
    out->mem_misses = atomic_load(&cache->mem_misses);
    out->disk_hits = atomic_load(&cache->disk_hits);
    out->builds = atomic_load(&cache->builds);
    out->build_failures = atomic_load(&cache->build_failures);
    out->request_mismatches = atomic_load(&cache->request_mismatches);
    out->waits = atomic_load(&cache->waits);
    out->cached_failures = atomic_load(&cache->cached_failures);
    if (cache->index) {
        kpc_index_counters c;
        kpc_index_counters_get(cache->index, &c);
        out->lookups = c.lookups;
        out->hits = c.hits;
        out->host_builds = c.builds;
        out->host_build_failures = c.build_failures;
        out->host_waits = c.waits;
        out->takeovers = c.takeovers;
        out->evictions = c.evictions;
        out->entries = c.entries;
        out->capacity = c.capacity;
        out->wait_timeouts = c.wait_timeouts;
    }
    if (cache->store)
        kpc_store_usage_estimate(cache->store, &out->disk_bytes, &out->disk_files);
    kpc_tier_stats(&cache->tiers, out); /* each tier's counts where its row says */
}

/* The caller's struct may be older (smaller: a program built against an older kpc.h) or
 * newer (larger) than ours: write exactly size bytes, never more (the ABI rule, kpc.h). */
kpc_status kpc_stats_get_sized(kpc_cache *cache, kpc_stats *out, size_t size)
{
    if (cache == NULL || out == NULL || size == 0)
        return KPC_E_INVALID;
    kpc_stats all;
    stats_fill(cache, &all);
    size_t n = size < sizeof all ? size : sizeof all;
    memcpy(out, &all, n);
    if (size > n)
        memset((char *)out + n, 0, size - n);
    return KPC_OK;
}

_Static_assert(offsetof(kpc_stats, disk_files) + sizeof(uint64_t) == KPC_STATS_SIZE_1_0,
               "the 1.0.0 fields of kpc_stats never move");
#undef kpc_stats_get
kpc_status kpc_stats_get(kpc_cache *cache, kpc_stats *out)
{
    return kpc_stats_get_sized(cache, out, KPC_STATS_SIZE_1_0);
}
