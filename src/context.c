/*
 * context.c - a context and its in-memory program map (level 1).
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
#include "kpc_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

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

/* ---- contexts ----------------------------------------------------------------------- */

/*
 * The compiler's identity and the validated targets are remembered in the cache dir, so a
 * process normally creates a context without loading the compiler. On an empty cache the
 * first process must load it (~85 ms of CPU for comgr and LLVM here); without this lock,
 * every process of a storm that starts at once loads it too (tests/bench/bench_storm: 64
 * processes spent ~5 s of CPU on it on 2 cores). With it, the first computes and
 * remembers, and the others sleep, then recall. Returns the fd to unlock, or -1 (no
 * cache dir, or a read-only one: go on unlocked).
 */
static int identity_lock(const char *dir)
{
    if (dir == NULL)
        return -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/v1/identity.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) {
            close(fd);
            return -1;
        }
    return fd;
}

/*
 * The compiler's identity, once per process: recalling it from the cache dir re-stats a
 * dozen files, and without a cache dir it would hash the device libraries again for
 * every context. The compiler a process has loaded (or would load) does not change while
 * it runs. A test that installs another platform gets that platform's own.
 */
static kpc_status compiler_identity(const kpc_platform *pf, const char *dir, uint8_t id[16])
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static const kpc_platform *memo_pf;
    static uint8_t memo_id[16];
    kpc_status s = KPC_OK;
    pthread_mutex_lock(&lock);
    if (memo_pf != pf) {
        char desc[512];
        s = pf->identity(dir, id, desc, sizeof desc);
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
    kpc_context *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return KPC_E_NOMEM;
    ctx->cache = cache;
    ctx->device = device;
    const char *dir = cache->store ? kpc_store_root(cache->store) : NULL;
    int lock = identity_lock(dir);
    kpc_status s = compiler_identity(pf, dir, ctx->compiler_id);
    if (s == KPC_OK)
        s = pf->target_normalize(dir, ctx->compiler_id, target, ctx->target, sizeof ctx->target);
    if (lock >= 0)
        close(lock); /* releases the flock */
    if (s == KPC_OK)
        s = kpc_map_new(cache->settings.mem_max_programs, &ctx->map);
    if (s == KPC_OK) {
        kpc__key_identity(pf, ctx->compiler_id, ctx->key_id);
        kpc_key_prefix_init(&ctx->key_prefix, ctx->key_id, pf->name, ctx->target);
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

static bool sets_target(const char *opt)
{
    static const char *const prefixes[] = {"--gpu-architecture", "--offload-arch", "-arch",
                                           "--amdgpu-target", "-march", "-mcpu", NULL};
    for (const char *const *p = prefixes; *p; p++)
        if (strncmp(opt, *p, strlen(*p)) == 0)
            return true;
    return false;
}

kpc_status kpc_context_check_source(const kpc_source *src)
{
    if (src->code == NULL || (src->code_len == 0 && src->code[0] == '\0')) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: the source is NULL or empty");
        return KPC_E_INVALID;
    }
    if ((src->num_options && src->options == NULL) ||
        (src->num_headers && (src->header_names == NULL || src->header_sources == NULL)) ||
        (src->num_name_expressions && src->name_expressions == NULL)) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: a count is set but its array is NULL");
        return KPC_E_INVALID;
    }
    for (size_t i = 0; i < src->num_options; i++) {
        if (src->options[i] == NULL) {
            KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: option %zu is NULL", i);
            return KPC_E_INVALID;
        }
        if (sets_target(src->options[i])) {
            KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: option \"%s\" sets the target; the context "
                    "decides it", src->options[i]);
            return KPC_E_INVALID;
        }
    }
    for (size_t i = 0; i < src->num_headers; i++)
        if (src->header_names[i] == NULL || src->header_sources[i] == NULL) {
            KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: header %zu has a NULL name or text", i);
            return KPC_E_INVALID;
        }
    for (size_t i = 0; i < src->num_name_expressions; i++)
        if (src->name_expressions[i] == NULL || src->name_expressions[i][0] == '\0') {
            KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: name expression %zu is NULL or empty", i);
            return KPC_E_INVALID;
        }
    return KPC_OK;
}

/* This thread's counter among the cache's memory-hit counters (see struct kpc_cache). */
static unsigned hit_slot(void)
{
    static atomic_uint next;
    static _Thread_local unsigned slot; /* 1 + the slot; 0: not chosen yet */
    if (slot == 0)
        slot = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % KPC_HIT_SLOTS + 1;
    return slot - 1;
}

void kpc_context_key(const kpc_context *ctx, const kpc_source *src, kpc_key *key)
{
    if (ctx->key_prefix.len != SIZE_MAX)
        kpc_key_compute_prefixed(&ctx->key_prefix, src, key);
    else
        kpc_key_compute(ctx->key_id, ctx->cache->platform->name, ctx->target, src, key);
}

kpc_status kpc_program_get(kpc_context *ctx, const kpc_source *src, kpc_program **out)
{
    if (out)
        *out = NULL;
    if (ctx == NULL || src == NULL || out == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: NULL argument");
        return KPC_E_INVALID;
    }
    kpc_status s = kpc_context_check_source(src);
    if (s != KPC_OK)
        return s;
    kpc_cache *cache = ctx->cache;
    kpc_key key;
    kpc_context_key(ctx, src, &key);

    kpc_map_entry *entry;
    bool waited;
    s = kpc_map_acquire(ctx->map, &key, out, &entry, &waited);
    if (s != KPC_E_NOT_FOUND) {
        if (waited)
            atomic_fetch_add_explicit(&cache->waits, 1, memory_order_relaxed);
        else if (s == KPC_OK)
            atomic_fetch_add_explicit(&cache->mem_hits[hit_slot()].n, 1, memory_order_relaxed);
        return s;
    }
    atomic_fetch_add_explicit(&cache->mem_misses, 1, memory_order_relaxed);
    kpc_program *prog = NULL;
    char *log = NULL;
    s = kpc__resolve(ctx, &key, src, &prog, &log);
    if (s == KPC_OK) {
        kpc_program_retain(prog); /* one for the map, one for the caller */
        *out = prog;
    } else {
        kpc__last_log_set(log);
    }
    kpc_map_publish(ctx->map, entry, s, prog, log);
    free(log);
    return s;
}

kpc_status kpc_kernel_get(kpc_context *ctx, kpc_program *prog, const char *kernel_name, hipFunction_t *out)
{
    if (out)
        *out = NULL;
    if (ctx == NULL || prog == NULL || kernel_name == NULL || out == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_kernel_get: NULL argument");
        return KPC_E_INVALID;
    }
    if (ctx->device < 0 || prog->module == NULL || prog->ctx != ctx) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_kernel_get: %s", ctx->device < 0
                ? "a compile-only context has no kernels (create it with kpc_context_create)"
                : "the program belongs to another context");
        return KPC_E_INVALID;
    }
    kpc_status s = KPC_OK;
    pthread_mutex_lock(&prog->kernels_lock);
    for (size_t i = 0; i < prog->num_kernels; i++)
        if (strcmp(prog->kernels[i].name, kernel_name) == 0) {
            *out = (hipFunction_t)prog->kernels[i].fn;
            pthread_mutex_unlock(&prog->kernels_lock);
            return KPC_OK;
        }
    void *fn = NULL;
    s = ctx->cache->platform->module_function(prog->device, prog->module, kernel_name, &fn);
    if (s == KPC_OK && prog->num_kernels == prog->cap_kernels) {
        size_t cap = prog->cap_kernels ? prog->cap_kernels * 2 : 8;
        kpc_kernel_slot *k = realloc(prog->kernels, cap * sizeof *k);
        if (k == NULL)
            s = KPC_E_NOMEM;
        else
            prog->kernels = k, prog->cap_kernels = cap;
    }
    if (s == KPC_OK) {
        char *name = strdup(kernel_name);
        if (name == NULL)
            s = KPC_E_NOMEM;
        else {
            prog->kernels[prog->num_kernels].name = name;
            prog->kernels[prog->num_kernels++].fn = fn;
            *out = (hipFunction_t)fn;
        }
    }
    pthread_mutex_unlock(&prog->kernels_lock);
    if (s == KPC_E_NOT_FOUND)
        KPC_LOG(KPC_LOG_ERROR, "kpc_kernel_get: no kernel \"%s\" in the module", kernel_name);
    return s;
}
