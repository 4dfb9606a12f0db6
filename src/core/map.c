/*
 * map.c - a context's in-memory program map (level 1).
 *
 * The map follows the in-progress-entry design of SYCL's KernelProgramCache: a lock is
 * held only for a table operation. The first thread to miss a key inserts a BUILDING
 * entry and builds outside any lock; later threads find the entry and sleep on the map's
 * condition variable until the builder publishes. Success makes the entry READY;
 * failure unlinks it at once, hands every waiter the same status and log, and lets the
 * next request try again.
 *
 * Hits from many threads: the table is split into MAP_SHARDS shards by key, each with its
 * own reader-writer lock, and a hit takes only its shard's read lock: threads that get
 * different programs touch different locks, and threads that get the same one share a
 * read lock, never sleeping on each other (a mutex here made 16 threads on 16 cores slower
 * together than one alone: tests/bench/bench_hit, docs/benchmarks.md). A hit writes
 * nothing shared but the program's reference count: its recency is the map's epoch (a
 * counter bumped by each publication), stored in the entry only when it changed. Past
 * mem_max_programs the entry with the oldest epoch is dropped (the oldest of the first
 * EVICT_SAMPLE READY entries from a rotating shard, so a very large map costs a bounded
 * scan; below that many entries the choice is exact up to entries used since the same
 * publication).
 *
 * Locks: a shard's lock guards its buckets, count and every field of its entries except
 * state and last_use (atomics, read under the read lock); wait_lock guards nothing but the
 * sleep on `published`; evict_lock makes evictions one at a time. Order: evict_lock, then
 * one shard lock at a time; wait_lock is never held with a shard lock.
 *
 * Lifetime: an entry is freed when it is out of the table and no waiter points at it;
 * the entry owns one program reference, dropped when the entry is freed. Only
 * publication (FAILED) and eviction (READY) unlink an entry.
 */
#define _GNU_SOURCE
#include "core/map.h"
#include "core/program.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum entry_state { ENTRY_BUILDING, ENTRY_READY, ENTRY_FAILED };

#define MAP_SHARDS 64     /* a power of two */
#define EVICT_SAMPLE 64

struct kpc_map_entry {
    kpc_key key;
    atomic_int state;         /* enum entry_state; written under the write lock */
    _Atomic uint64_t last_use; /* the map's epoch when last published or got */
    kpc_status status;        /* FAILED: the builder's status */
    char *log;                /* FAILED: the builder's log */
    kpc_program *prog;        /* READY: the map's reference */
    unsigned waiters;         /* threads sleeping on this entry */
    bool linked;              /* in the hash table */
    kpc_map_entry *next;      /* hash chain */
};

typedef struct map_shard {
    pthread_rwlock_t lock;    /* guards the fields below and its entries (see above) */
    kpc_map_entry **buckets;
    size_t nbuckets, count;
    char pad[64];             /* keep the next shard's lock off this one's cache line */
} map_shard;

struct kpc_map {
    map_shard shards[MAP_SHARDS];
    size_t max_ready;
    atomic_size_t ready;       /* READY entries in the table */
    _Atomic uint64_t epoch;    /* bumped by every publication */
    pthread_mutex_t evict_lock; /* one evictor at a time; guards evict_hand */
    unsigned evict_hand;
    pthread_mutex_t wait_lock; /* the sleep on `published` */
    pthread_cond_t published;  /* broadcast whenever a build is published */
};

static map_shard *shard_of(kpc_map *m, const kpc_key *k)
{
    return &m->shards[k->bytes[15] & (MAP_SHARDS - 1)];
}

static size_t bucket_of(const map_shard *sh, const kpc_key *k)
{
    uint64_t h;
    memcpy(&h, k->bytes, sizeof h); /* the key is already a good hash */
    return (size_t)(h & (sh->nbuckets - 1));
}

static kpc_map_entry *find(const map_shard *sh, const kpc_key *key)
{
    kpc_map_entry *e = sh->buckets[bucket_of(sh, key)];
    while (e && memcmp(e->key.bytes, key->bytes, sizeof key->bytes) != 0)
        e = e->next;
    return e;
}

kpc_status kpc_map_new(size_t max_programs, kpc_map **out)
{
    kpc_map *m = calloc(1, sizeof *m);
    if (m == NULL)
        return KPC_E_NOMEM;
    for (int i = 0; i < MAP_SHARDS; i++) {
        map_shard *sh = &m->shards[i];
        sh->nbuckets = 4;
        sh->buckets = calloc(sh->nbuckets, sizeof *sh->buckets);
        if (sh->buckets == NULL) {
            while (i-- > 0)
                free(m->shards[i].buckets);
            free(m);
            return KPC_E_NOMEM;
        }
    }
    for (int i = 0; i < MAP_SHARDS; i++)
        pthread_rwlock_init(&m->shards[i].lock, NULL);
    m->max_ready = max_programs;
    pthread_mutex_init(&m->evict_lock, NULL);
    pthread_mutex_init(&m->wait_lock, NULL);
    pthread_cond_init(&m->published, NULL);
    *out = m;
    return KPC_OK;
}

static void entry_free(kpc_map_entry *e)
{
    kpc_program_release(e->prog);
    free(e->log);
    free(e);
}

/* Write lock held. */
static void table_unlink(map_shard *sh, kpc_map_entry *e)
{
    kpc_map_entry **pp = &sh->buckets[bucket_of(sh, &e->key)];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    e->next = NULL;
    e->linked = false;
    sh->count--;
}

/* Write lock held. */
static void table_grow(map_shard *sh)
{
    size_t n = sh->nbuckets * 2;
    kpc_map_entry **b = calloc(n, sizeof *b);
    if (b == NULL)
        return; /* longer chains, still correct */
    kpc_map_entry **old = sh->buckets;
    size_t old_n = sh->nbuckets;
    sh->buckets = b;
    sh->nbuckets = n;
    for (size_t i = 0; i < old_n; i++)
        for (kpc_map_entry *e = old[i], *next; e; e = next) {
            next = e->next;
            size_t j = bucket_of(sh, &e->key);
            e->next = b[j];
            b[j] = e;
        }
    free(old);
}

/* A READY entry found under either lock: the caller's reference. */
static kpc_program *take(kpc_map *m, kpc_map_entry *e)
{
    uint64_t now = atomic_load_explicit(&m->epoch, memory_order_relaxed);
    if (atomic_load_explicit(&e->last_use, memory_order_relaxed) != now)
        atomic_store_explicit(&e->last_use, now, memory_order_relaxed);
    kpc_program_retain(e->prog);
    return e->prog;
}

kpc_status kpc_map_acquire(kpc_map *m, const kpc_key *key, kpc_program **prog, kpc_map_entry **entry,
                           bool *waited)
{
    *waited = false;
    map_shard *sh = shard_of(m, key);
    /* the hit: the read lock only */
    pthread_rwlock_rdlock(&sh->lock);
    kpc_map_entry *e = find(sh, key);
    if (e && atomic_load_explicit(&e->state, memory_order_acquire) == ENTRY_READY) {
        *prog = take(m, e);
        pthread_rwlock_unlock(&sh->lock);
        return KPC_OK;
    }
    pthread_rwlock_unlock(&sh->lock);

    pthread_rwlock_wrlock(&sh->lock);
    e = find(sh, key);
    if (e == NULL) {
        e = calloc(1, sizeof *e);
        if (e == NULL) {
            pthread_rwlock_unlock(&sh->lock);
            return KPC_E_NOMEM;
        }
        e->key = *key;
        atomic_init(&e->state, ENTRY_BUILDING);
        size_t b = bucket_of(sh, key);
        e->next = sh->buckets[b];
        sh->buckets[b] = e;
        e->linked = true;
        if (++sh->count > sh->nbuckets)
            table_grow(sh);
        pthread_rwlock_unlock(&sh->lock);
        *entry = e;
        return KPC_E_NOT_FOUND; /* the caller builds */
    }
    if (atomic_load(&e->state) == ENTRY_READY) { /* published since the read lock */
        *prog = take(m, e);
        pthread_rwlock_unlock(&sh->lock);
        return KPC_OK;
    }
    /* BUILDING (a FAILED entry is never in the table): wait for the builder */
    *waited = true;
    e->waiters++;
    pthread_rwlock_unlock(&sh->lock);
    pthread_mutex_lock(&m->wait_lock);
    while (atomic_load(&e->state) == ENTRY_BUILDING)
        pthread_cond_wait(&m->published, &m->wait_lock);
    pthread_mutex_unlock(&m->wait_lock);

    pthread_rwlock_wrlock(&sh->lock);
    e->waiters--;
    kpc_status st;
    if (atomic_load(&e->state) == ENTRY_READY) {
        kpc_program_retain(e->prog);
        *prog = e->prog;
        st = KPC_OK;
    } else {
        st = e->status;
        kpc__last_log_set(e->log);
    }
    bool free_it = !e->linked && e->waiters == 0;
    pthread_rwlock_unlock(&sh->lock);
    if (free_it)
        entry_free(e);
    return st;
}

/* Drop the least recently used READY entries while there are more than max_ready. */
static void evict(kpc_map *m)
{
    pthread_mutex_lock(&m->evict_lock);
    while (atomic_load(&m->ready) > m->max_ready) {
        kpc_map_entry *victim = NULL;
        map_shard *vsh = NULL;
        uint64_t oldest = UINT64_MAX;
        unsigned seen = 0, start = m->evict_hand;
        for (unsigned n = 0; n < MAP_SHARDS && seen < EVICT_SAMPLE; n++) {
            map_shard *sh = &m->shards[(start + n) & (MAP_SHARDS - 1)];
            pthread_rwlock_rdlock(&sh->lock);
            for (size_t b = 0; b < sh->nbuckets; b++)
                for (kpc_map_entry *e = sh->buckets[b]; e; e = e->next) {
                    if (atomic_load(&e->state) != ENTRY_READY)
                        continue;
                    seen++;
                    uint64_t t = atomic_load_explicit(&e->last_use, memory_order_relaxed);
                    if (t < oldest)
                        oldest = t, victim = e, vsh = sh;
                }
            pthread_rwlock_unlock(&sh->lock);
            m->evict_hand = (start + n + 1) & (MAP_SHARDS - 1);
        }
        if (victim == NULL)
            break;
        /* still linked and READY: only an eviction unlinks a READY entry, and this is
         * the only evictor */
        pthread_rwlock_wrlock(&vsh->lock);
        table_unlink(vsh, victim);
        bool free_it = victim->waiters == 0;
        pthread_rwlock_unlock(&vsh->lock);
        atomic_fetch_sub(&m->ready, 1);
        /* a program still referenced by a caller stays alive: this drops the map's */
        if (free_it)
            entry_free(victim);
    }
    pthread_mutex_unlock(&m->evict_lock);
}

void kpc_map_publish(kpc_map *m, kpc_map_entry *e, kpc_status st, kpc_program *prog, const char *log)
{
    char *log_copy = st == KPC_OK ? NULL : kpc__strdup(log ? log : "");
    map_shard *sh = shard_of(m, &e->key);
    uint64_t epoch = atomic_fetch_add(&m->epoch, 1) + 1;
    pthread_rwlock_wrlock(&sh->lock);
    if (st == KPC_OK) {
        e->prog = prog;
        atomic_store_explicit(&e->last_use, epoch, memory_order_relaxed);
        atomic_store_explicit(&e->state, ENTRY_READY, memory_order_release);
    } else {
        e->status = st;
        e->log = log_copy;
        atomic_store_explicit(&e->state, ENTRY_FAILED, memory_order_release);
        table_unlink(sh, e); /* the next request tries again */
    }
    bool free_it = !e->linked && e->waiters == 0;
    pthread_rwlock_unlock(&sh->lock);
    /* waiters test the state under wait_lock: taking it here orders the wake-up after
     * any test that saw BUILDING */
    pthread_mutex_lock(&m->wait_lock);
    pthread_cond_broadcast(&m->published);
    pthread_mutex_unlock(&m->wait_lock);
    if (free_it)
        entry_free(e);
    if (st == KPC_OK && atomic_fetch_add(&m->ready, 1) + 1 > m->max_ready)
        evict(m);
}

size_t kpc_map_count(kpc_map *m)
{
    return atomic_load(&m->ready);
}

void kpc_map_free(kpc_map *m)
{
    if (m == NULL)
        return;
    for (int i = 0; i < MAP_SHARDS; i++) {
        map_shard *sh = &m->shards[i];
        for (size_t b = 0; b < sh->nbuckets; b++)
            for (kpc_map_entry *e = sh->buckets[b], *next; e; e = next) {
                next = e->next;
                entry_free(e);
            }
        free(sh->buckets);
        pthread_rwlock_destroy(&sh->lock);
    }
    pthread_cond_destroy(&m->published);
    pthread_mutex_destroy(&m->wait_lock);
    pthread_mutex_destroy(&m->evict_lock);
    free(m);
}

