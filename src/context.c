/*
 * context.c - a context and its in-memory program map (level 1).
 *
 * The map follows the in-progress-entry design of SYCL's KernelProgramCache: the map
 * lock is held only for a table operation. The first thread to miss a key inserts a
 * BUILDING entry and builds outside the lock; later threads find the entry and sleep on
 * the map's condition variable until the builder publishes. Success makes the entry
 * READY (and puts it at the head of the LRU list); failure unlinks it at once, hands
 * every waiter the same status and log, and lets the next request try again.
 *
 * Lifetime: an entry is freed when it is out of the table and no waiter points at it;
 * the entry owns one program reference, dropped when the entry is freed.
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

struct kpc_map_entry {
    kpc_key key;
    enum entry_state state;
    kpc_status status;        /* FAILED: the builder's status */
    char *log;                /* FAILED: the builder's log */
    kpc_program *prog;        /* READY: the map's reference */
    unsigned waiters;         /* threads sleeping on this entry */
    bool linked;              /* in the hash table */
    kpc_map_entry *next;      /* hash chain */
    kpc_map_entry *lru_prev, *lru_next; /* READY entries, most recent first */
};

struct kpc_map {
    pthread_mutex_t lock;     /* guards everything below and every entry's fields */
    pthread_cond_t published; /* broadcast whenever a build is published */
    kpc_map_entry **buckets;
    size_t nbuckets, count, ready, max_ready;
    kpc_map_entry *lru_head, *lru_tail;
};

static size_t bucket_of(const kpc_map *m, const kpc_key *k)
{
    uint64_t h;
    memcpy(&h, k->bytes, sizeof h); /* the key is already a good hash */
    return (size_t)(h & (m->nbuckets - 1));
}

kpc_status kpc_map_new(size_t max_programs, kpc_map **out)
{
    kpc_map *m = calloc(1, sizeof *m);
    if (m == NULL)
        return KPC_E_NOMEM;
    m->nbuckets = 64;
    m->buckets = calloc(m->nbuckets, sizeof *m->buckets);
    if (m->buckets == NULL) {
        free(m);
        return KPC_E_NOMEM;
    }
    m->max_ready = max_programs;
    pthread_mutex_init(&m->lock, NULL);
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

static void lru_unlink(kpc_map *m, kpc_map_entry *e)
{
    if (e->lru_prev)
        e->lru_prev->lru_next = e->lru_next;
    else
        m->lru_head = e->lru_next;
    if (e->lru_next)
        e->lru_next->lru_prev = e->lru_prev;
    else
        m->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lru_push_front(kpc_map *m, kpc_map_entry *e)
{
    e->lru_prev = NULL;
    e->lru_next = m->lru_head;
    if (m->lru_head)
        m->lru_head->lru_prev = e;
    m->lru_head = e;
    if (m->lru_tail == NULL)
        m->lru_tail = e;
}

static void table_unlink(kpc_map *m, kpc_map_entry *e)
{
    kpc_map_entry **pp = &m->buckets[bucket_of(m, &e->key)];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    e->next = NULL;
    e->linked = false;
    m->count--;
}

static void table_grow(kpc_map *m)
{
    size_t n = m->nbuckets * 2;
    kpc_map_entry **b = calloc(n, sizeof *b);
    if (b == NULL)
        return; /* longer chains, still correct */
    kpc_map_entry **old = m->buckets;
    size_t old_n = m->nbuckets;
    m->buckets = b;
    m->nbuckets = n;
    for (size_t i = 0; i < old_n; i++)
        for (kpc_map_entry *e = old[i], *next; e; e = next) {
            next = e->next;
            size_t j = bucket_of(m, &e->key);
            e->next = b[j];
            b[j] = e;
        }
    free(old);
}

kpc_status kpc_map_acquire(kpc_map *m, const kpc_key *key, kpc_program **prog, kpc_map_entry **entry,
                           bool *waited)
{
    *waited = false;
    pthread_mutex_lock(&m->lock);
    kpc_map_entry *e = m->buckets[bucket_of(m, key)];
    while (e && memcmp(e->key.bytes, key->bytes, sizeof key->bytes) != 0)
        e = e->next;
    if (e == NULL) {
        e = calloc(1, sizeof *e);
        if (e == NULL) {
            pthread_mutex_unlock(&m->lock);
            return KPC_E_NOMEM;
        }
        e->key = *key;
        e->state = ENTRY_BUILDING;
        size_t b = bucket_of(m, key);
        e->next = m->buckets[b];
        m->buckets[b] = e;
        e->linked = true;
        if (++m->count > m->nbuckets)
            table_grow(m);
        pthread_mutex_unlock(&m->lock);
        *entry = e;
        return KPC_E_NOT_FOUND; /* the caller builds */
    }
    if (e->state == ENTRY_BUILDING) {
        *waited = true;
        e->waiters++;
        while (e->state == ENTRY_BUILDING)
            pthread_cond_wait(&m->published, &m->lock);
        e->waiters--;
    } else if (e->lru_prev != NULL) { /* a hit: move to the front (already there: no-op) */
        lru_unlink(m, e);
        lru_push_front(m, e);
    }
    kpc_status st;
    if (e->state == ENTRY_READY) {
        kpc_program_retain(e->prog);
        *prog = e->prog;
        st = KPC_OK;
    } else {
        st = e->status;
        kpc__last_log_set(e->log);
    }
    bool free_it = !e->linked && e->waiters == 0;
    pthread_mutex_unlock(&m->lock);
    if (free_it)
        entry_free(e);
    return st;
}

void kpc_map_publish(kpc_map *m, kpc_map_entry *e, kpc_status st, kpc_program *prog, const char *log)
{
    char *log_copy = st == KPC_OK ? NULL : kpc__strdup(log ? log : "");
    kpc_map_entry *evicted = NULL;
    pthread_mutex_lock(&m->lock);
    if (st == KPC_OK) {
        e->state = ENTRY_READY;
        e->prog = prog;
        lru_push_front(m, e);
        if (++m->ready > m->max_ready) {
            /* drop the least recently used program; callers' references keep it alive */
            kpc_map_entry *victim = m->lru_tail;
            lru_unlink(m, victim);
            table_unlink(m, victim);
            m->ready--;
            if (victim->waiters == 0)
                evicted = victim;
        }
    } else {
        e->state = ENTRY_FAILED;
        e->status = st;
        e->log = log_copy;
        table_unlink(m, e); /* the next request tries again */
    }
    bool free_it = !e->linked && e->waiters == 0;
    pthread_cond_broadcast(&m->published);
    pthread_mutex_unlock(&m->lock);
    if (evicted)
        entry_free(evicted);
    if (free_it)
        entry_free(e);
}

size_t kpc_map_count(kpc_map *m)
{
    pthread_mutex_lock(&m->lock);
    size_t n = m->ready;
    pthread_mutex_unlock(&m->lock);
    return n;
}

void kpc_map_free(kpc_map *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nbuckets; i++)
        for (kpc_map_entry *e = m->buckets[i], *next; e; e = next) {
            next = e->next;
            entry_free(e);
        }
    free(m->buckets);
    pthread_cond_destroy(&m->published);
    pthread_mutex_destroy(&m->lock);
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

static kpc_status context_new(kpc_cache *cache, const char *target, int device, kpc_context **out)
{
    const kpc_platform *pf = cache->platform;
    kpc_context *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return KPC_E_NOMEM;
    ctx->cache = cache;
    ctx->device = device;
    const char *dir = cache->store ? kpc_store_root(cache->store) : NULL;
    char desc[512];
    int lock = identity_lock(dir);
    kpc_status s = pf->identity(dir, ctx->compiler_id, desc, sizeof desc);
    if (s == KPC_OK)
        s = pf->target_normalize(dir, ctx->compiler_id, target, ctx->target, sizeof ctx->target);
    if (lock >= 0)
        close(lock); /* releases the flock */
    if (s == KPC_OK)
        s = kpc_map_new(cache->settings.mem_max_programs, &ctx->map);
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

static kpc_status check_source(const kpc_source *src)
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

kpc_status kpc_program_get(kpc_context *ctx, const kpc_source *src, kpc_program **out)
{
    if (out)
        *out = NULL;
    if (ctx == NULL || src == NULL || out == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_program_get: NULL argument");
        return KPC_E_INVALID;
    }
    kpc_status s = check_source(src);
    if (s != KPC_OK)
        return s;
    kpc_cache *cache = ctx->cache;
    kpc_key key;
    kpc_key_compute(ctx->compiler_id, cache->platform->name, ctx->target, src, &key);

    kpc_map_entry *entry;
    bool waited;
    s = kpc_map_acquire(ctx->map, &key, out, &entry, &waited);
    if (s != KPC_E_NOT_FOUND) {
        if (waited)
            atomic_fetch_add_explicit(&cache->waits, 1, memory_order_relaxed);
        else if (s == KPC_OK)
            atomic_fetch_add_explicit(&cache->mem_hits, 1, memory_order_relaxed);
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
