/*
 * rtc_process.c - the drop-in engine's process-wide side: the kpc cache (opened on first
 * need), one compile-only context per target, KPC_DISABLE, the counters written at exit
 * (KPC_DROPIN_STATS) and the set of the program handles the engine made (rtc.c asks it
 * which handles are its own). A forked child opens its own cache; its handles stay.
 */
#define _GNU_SOURCE
#include "dropin/rtc.h"

#include "base/fault.h"
#include "base/log.h"
#include "base/settings.h"
#include "base/util.h"

#include <bsd/string.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CONTEXTS 16

/* Process state: guarded by lock; reset in a forked child (kpc handles do not cross fork). */
static struct {
    pthread_mutex_t lock;
    kpc_cache *cache;
    bool cache_failed;
    size_t num_contexts;
    struct {
        char target[128];
        kpc_context *ctx;
    } contexts[MAX_CONTEXTS];
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static atomic_int disabled = -1; /* KPC_DISABLE=1: every call goes to the real library */
rtc_counters kpc_rtc_counters;

/* Our program handles: an open-addressed set of pointers (linear probing, a removed one
 * leaves TOMBSTONE), guarded by handles_lock. An API call is told from a real library's
 * program by membership, never by reading through a pointer that may not be ours. */
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static void **handles;
static size_t handles_cap, handles_used; /* cap: a power of two; used counts tombstones */
static char tombstone_mark;
#define TOMBSTONE ((void *)&tombstone_mark)

static void atfork_prepare(void)
{
    pthread_mutex_lock(&g.lock);
    pthread_mutex_lock(&handles_lock);
}
static void atfork_parent(void)
{
    pthread_mutex_unlock(&handles_lock);
    pthread_mutex_unlock(&g.lock);
}
static void atfork_child(void)
{
    /* the parent's cache and contexts are not valid here: leak them, open anew; its
     * program handles are still this process's memory, and still ours */
    g.cache = NULL;
    g.cache_failed = false;
    g.num_contexts = 0;
    pthread_mutex_unlock(&handles_lock);
    pthread_mutex_unlock(&g.lock);
}
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void install_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

bool kpc_rtc_disabled(void)
{
    int d = atomic_load(&disabled);
    if (d < 0) { /* threads racing here all read the same environment */
        d = kpc__setting_number(KPC_SET_DISABLE) != 0;
        atomic_store(&disabled, d);
    }
    return d;
}

/* ---- kpc: the cache and one compile-only context per target ----------------------- */
static kpc_cache *cache_get(const rtc_vendor *v) /* g.lock held */
{
    pthread_once(&fork_once, install_atfork);
    if (g.cache == NULL && !g.cache_failed) {
        kpc_status s = kpc_cache_open(NULL, &g.cache);
        if (s != KPC_OK) {
            KPC_LOG(KPC_LOG_ERROR, "%s: kpc_cache_open: %s; forwarding every compile", v->name,
                    kpc_status_str(s));
            g.cache_failed = true;
        }
    }
    return g.cache;
}

/* The compile-only context for target, or (target NULL) for the vendor's default. */
kpc_context *kpc_rtc_context_for(const rtc_vendor *v, const char *target)
{
    kpc_context *ctx = NULL;
    char tbuf[128];
    pthread_mutex_lock(&g.lock);
    kpc_cache *cache = cache_get(v);
    if (cache && target == NULL) {
        kpc_status s = v->default_target(cache, tbuf, sizeof tbuf);
        if (s == KPC_OK)
            target = tbuf;
        else
            KPC_LOG(KPC_LOG_INFO, "%s: no option names the target and there is no default (%s): "
                    "forwarding", v->name, kpc_status_str(s));
    }
    for (size_t i = 0; cache && target && ctx == NULL && i < g.num_contexts; i++)
        if (strcmp(g.contexts[i].target, target) == 0)
            ctx = g.contexts[i].ctx;
    if (cache && target && ctx == NULL && g.num_contexts < MAX_CONTEXTS &&
        strlen(target) < sizeof g.contexts[0].target) {
        kpc_status s = kpc_context_create_for_target(cache, target, &ctx);
        if (s == KPC_OK) {
            strlcpy(g.contexts[g.num_contexts].target, target, sizeof g.contexts[0].target);
            g.contexts[g.num_contexts++].ctx = ctx;
        } else {
            KPC_LOG(KPC_LOG_INFO, "%s: no kpc context for target %s (%s): forwarding", v->name,
                    target, kpc_status_str(s));
            ctx = NULL;
        }
    }
    pthread_mutex_unlock(&g.lock);
    return ctx;
}

/* KPC_DROPIN_STATS=FILE: each process appends a line of its figures at exit. */
__attribute__((destructor)) static void write_stats(void)
{
    const char *path = kpc__setting_text(KPC_SET_DROPIN_STATS);
    const rtc_vendor *v = atomic_load(&kpc_rtc_counters.vendor);
    if (path == NULL || *path == '\0' || v == NULL)
        return;
    kpc_stats st = {0};
    pthread_mutex_lock(&g.lock);
    if (g.cache)
        kpc_stats_get(g.cache, &st);
    pthread_mutex_unlock(&g.lock);
    char line[512];
    int n = snprintf(line, sizeof line,
                     "%s pid=%d compiles=%llu kpc=%llu forwarded=%llu materialized=%llu builds=%llu "
                     "build_failures=%llu cached_failures=%llu disk_hits=%llu mem_hits=%llu waits=%llu\n",
                     v->name, (int)getpid(), (unsigned long long)kpc_rtc_counters.compiles,
                     (unsigned long long)kpc_rtc_counters.kpc, (unsigned long long)kpc_rtc_counters.forwarded,
                     (unsigned long long)kpc_rtc_counters.materialized, (unsigned long long)st.builds,
                     (unsigned long long)st.build_failures, (unsigned long long)st.cached_failures,
                     (unsigned long long)st.disk_hits,
                     (unsigned long long)st.mem_hits, (unsigned long long)st.waits);
    int fd = kpc__open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || n <= 0 || kpc__write_all(fd, line, (size_t)n) != 0)
        KPC_LOG(KPC_LOG_ERROR, "%s: cannot write KPC_DROPIN_STATS=%s", v->name, path);
    if (fd >= 0)
        close(fd);
}

/* ---- our handles ---------------------------------------------------------------------- */
static size_t slot_of(const void *p, size_t cap)
{
    uintptr_t h = (uintptr_t)p >> 4;
    h ^= h >> 17;
    return (size_t)(h * 0x9e3779b97f4a7c15ull) & (cap - 1);
}

/* handles_lock held: room for one more (at most half the slots used). */
static bool make_room(void)
{
    if ((handles_used + 1) * 2 <= handles_cap)
        return true;
    size_t cap = handles_cap ? handles_cap : 64;
    size_t live = 0;
    for (size_t i = 0; i < handles_cap; i++)
        live += handles[i] != NULL && handles[i] != TOMBSTONE;
    while ((live + 1) * 4 > cap)
        cap *= 2;
    void **n = calloc(cap, sizeof *n);
    if (n == NULL)
        return false;
    for (size_t i = 0; i < handles_cap; i++)
        if (handles[i] != NULL && handles[i] != TOMBSTONE) {
            size_t j = slot_of(handles[i], cap);
            while (n[j] != NULL)
                j = (j + 1) & (cap - 1);
            n[j] = handles[i];
        }
    free(handles);
    handles = n;
    handles_cap = cap;
    handles_used = live;
    return true;
}

/* handles_lock held: p's slot, or the empty one that ends its probe. */
static size_t probe(const void *p)
{
    size_t i = slot_of(p, handles_cap);
    while (handles[i] != NULL && handles[i] != p)
        i = (i + 1) & (handles_cap - 1);
    return i;
}

bool kpc_rtc_handle_add(void *p)
{
    pthread_mutex_lock(&handles_lock);
    bool ok = make_room();
    if (ok) {
        size_t i = slot_of(p, handles_cap);
        while (handles[i] != NULL && handles[i] != TOMBSTONE)
            i = (i + 1) & (handles_cap - 1);
        handles_used += handles[i] == NULL;
        handles[i] = p;
    }
    pthread_mutex_unlock(&handles_lock);
    return ok;
}

void kpc_rtc_handle_remove(void *p)
{
    pthread_mutex_lock(&handles_lock);
    if (handles_cap) {
        size_t i = probe(p);
        if (handles[i] == p)
            handles[i] = TOMBSTONE;
    }
    pthread_mutex_unlock(&handles_lock);
}

bool kpc_rtc_handle_known(const void *p)
{
    if (p == NULL)
        return false;
    pthread_mutex_lock(&handles_lock);
    bool known = handles_cap && handles[probe(p)] == p;
    pthread_mutex_unlock(&handles_lock);
    return known;
}
