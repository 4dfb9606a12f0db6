/*
 * cache.h - struct kpc_cache (core/cache.c): the process's settings, the cache
 * directory, the storage tiers and the host index, the back-fill thread, and the counters.
 */
#ifndef KPC_CORE_CACHE_H
#define KPC_CORE_CACHE_H

#include "core/backfill.h"
#include "core/config.h"
#include "platform/platform.h"
#include "shm/index.h"
#include "storage/store.h"
#include "storage/tier.h"

#include <stdatomic.h>

/* Memory hits are counted on every hit, from every thread: one counter per thread slot,
 * each on a cache line of its own, summed by kpc_stats_get (a single counter was a line
 * that every hitting thread fought over). */
#define KPC_HIT_SLOTS 64
typedef struct kpc_hit_counter {
    _Alignas(64) _Atomic uint64_t n; /* aligned: no counter shares the line of the fields
                                      * every request reads (pid, fork_gen) */
    char pad[56];
} kpc_hit_counter;

struct kpc_cache {
    kpc_settings settings;
    const kpc_platform *platform;
    kpc_root *root;    /* NULL: disk level off */
    kpc_tiers tiers;   /* in walk order; empty with the disk level off */
    kpc_store *store;  /* the disk tier's tree (usage figures); NULL: disk level off */
    kpc_index *index;  /* NULL: host index off */
    kpc_backfill fill; /* copies of the cluster's records to disk (running: a cluster tier) */
    /* process counters */
    _Atomic uint64_t mem_misses, disk_hits, builds, build_failures, waits, cached_failures;
    _Atomic uint64_t request_mismatches; /* records of another request under the key (a collision) */
    atomic_int contexts;
    pid_t pid;          /* the process that opened it (kpc.h: a fork child must not use it) */
    unsigned fork_gen;  /* the process's fork generation then: see kpc_cache_check_process */
    kpc_hit_counter mem_hits[KPC_HIT_SLOTS];
};

/* The process's fork generation: bumped in every child fork() makes (pthread_atfork), so
 * that a request can tell a fork child using its parent's cache with one load instead of
 * a getpid() system call. */
extern atomic_uint kpc__fork_gen;
/* KPC_E_INVALID, logged (naming fn): cache was opened by the parent of this process. */
kpc_status kpc_cache_refuse_fork_child(const kpc_cache *cache, const char *fn);

/* Whether this process opened cache, not a fork child of the one that did. Inline:
 * every request asks, hits included, and the answer is one load and a compare. */
static inline bool kpc_cache_opened_here(const kpc_cache *cache)
{
    return atomic_load_explicit(&kpc__fork_gen, memory_order_relaxed) == cache->fork_gen;
}

/* KPC_OK in the process that opened cache; KPC_E_INVALID (logged, naming fn) in a fork
 * child using its parent's cache, which would claim index slots as its parent. */
static inline kpc_status kpc_cache_check_process(const kpc_cache *cache, const char *fn)
{
    return kpc_cache_opened_here(cache) ? KPC_OK : kpc_cache_refuse_fork_child(cache, fn);
}

#endif /* KPC_CORE_CACHE_H */
