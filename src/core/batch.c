/*
 * batch.c - kpc_program_get_many: n requests resolved so that processes asking for the
 * same list build side by side instead of one after another.
 *
 *   keys      every request checked and keyed; a key repeated in the list is resolved
 *             once and its result shared (a second map acquire of a key this call holds
 *             would wait for itself)
 *   pass 1    in list order: the context's map (a hit, or the map entry taken), then the
 *             host index with KPC_INDEX_NOWAIT: a key nobody builds is claimed and built
 *             (or read) now; a key another process is building is left pending, its map
 *             entry still held, so this process goes on to the next unclaimed key. A key
 *             this process claims on its host but whose cluster lease (the coordinating
 *             tier) another host's live builder holds is left pending too, its host claim
 *             kept: the host's other processes skip it (or wait for this one), and the
 *             host asks the cluster about it through this process alone
 *   pass 2a   every pending key whose host claim this call kept, waited for on the
 *             cluster (the other host's object; its lease taken over if it lapses)
 *   pass 2b   every other pending key, waited for as kpc_program_get waits (its builder's
 *             object, or its failure; a dead builder's key is taken over)
 *   repeats   share the first occurrence's program (a reference each) or status
 *
 * So P processes calling it with the same K sources in the same order take the keys in
 * turn: each builds what nobody else took, on its host and in the cluster, and all of
 * them have every key when the last build ends. No cycle of waits: a cluster lease is
 * held only by a process that is compiling (it waits on nothing), so pass 2a ends; pass
 * 2b runs when this call holds no index claim any more (each key it claimed was built
 * in pass 1, or finished in 2a), so it cannot wait on a process that waits on it. A
 * host process waiting on a key this call keeps claimed in pass 1 waits at most for this
 * call's own pass-1 builds, then pass 2a (it also looks at the cluster every lease).
 * A map entry held pending makes other threads of this process that
 * ask for that key wait until pass 2 publishes it: the same wait they would have had on
 * the other process's build. A map entry held by another thread of this process makes
 * pass 1 wait for it: that thread is compiling, and in-process compiles are serialized
 * (hipRTC 5.2), so no parallelism is lost by waiting.
 *
 * Threads: with KPC_BUILD_THREADS = T > 1, on a platform whose compiles run in parallel
 * inside a process (kpc_platform.parallel_compiles), each pass runs on T threads that
 * take the next request from an atomic cursor; every request is handled by exactly one
 * of them, and the item array is written by that one thread only.
 */
#define _GNU_SOURCE
#include "base/log.h"
#include "core/cache.h"
#include "core/context.h"
#include "core/map.h"
#include "core/request.h"
#include "core/resolve.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum item_state { ITEM_TODO, ITEM_DONE, ITEM_PENDING, ITEM_REPEAT };

typedef struct item {
    kpc_normalized_request req;      /* read once: its key is the map's and the index's */
    enum item_state state;
    size_t first;         /* ITEM_REPEAT: the index of the key's first occurrence */
    kpc_map_entry *entry; /* ITEM_PENDING: the map entry this call holds */
    kpc_claim held;       /* ITEM_PENDING: the host claim kept while another host builds it */
    kpc_status status;
    kpc_program *prog;
    char *log;
} item;

typedef struct batch {
    kpc_context *ctx;
    const kpc_source *srcs;
    item *items;
    size_t n;
    atomic_size_t cursor;
    int pass; /* 1, 2 (2a: the kept host claims) or 3 (2b: the others) */
} batch;

/* Publish a resolved item to the map (kpc_request_publish) and keep the caller's reference. */
static void settle(batch *b, item *it, kpc_map_entry *entry, kpc_status s, kpc_program *prog, char *log)
{
    kpc_request_publish(b->ctx, &it->req, entry, s, prog, log);
    it->state = ITEM_DONE;
    it->status = s;
    it->prog = s == KPC_OK ? prog : NULL;
    it->log = log;
}

static void pass1(batch *b, size_t i)
{
    item *it = &b->items[i];
    kpc_map_entry *entry;
    kpc_program *prog = NULL;
    kpc_status s = kpc_request_acquire(b->ctx, &it->req, &prog, &entry);
    if (s != KPC_E_NOT_FOUND) { /* a hit, or another thread's build that we waited for */
        it->state = ITEM_DONE;
        it->status = s;
        it->prog = prog;
        if (s != KPC_OK)
            it->log = kpc__strdup(kpc_last_log());
        return;
    }
    char *log = NULL;
    bool busy = false;
    s = kpc_resolve_miss_nowait(b->ctx, &it->req, &prog, &log, &busy, &it->held);
    if (busy) {
        it->state = ITEM_PENDING;
        it->entry = entry;
        return;
    }
    settle(b, it, entry, s, prog, log);
}

static void pass2(batch *b, size_t i)
{
    item *it = &b->items[i];
    kpc_program *prog = NULL;
    char *log = NULL;
    kpc_status s = kpc_claim_held(&it->held) ? kpc_resolve_held(b->ctx, &it->req, &it->held, &prog, &log)
                                             : kpc_resolve_miss(b->ctx, &it->req, &prog, &log);
    settle(b, it, it->entry, s, prog, log);
}

/* Whether item i has work in this pass: pass 1 the new requests, pass 2 those left
 * pending with a host claim kept, pass 3 those left pending without one. */
static bool due(const batch *b, size_t i)
{
    const item *it = &b->items[i];
    if (b->pass == 1)
        return it->state == ITEM_TODO;
    return it->state == ITEM_PENDING && kpc_claim_held(&it->held) == (b->pass == 2);
}

static void *worker(void *arg)
{
    batch *b = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&b->cursor, 1);
        if (i >= b->n)
            return NULL;
        /* one thread owns item i in this pass: the cursor hands each index out once */
        if (due(b, i))
            (b->pass == 1 ? pass1 : pass2)(b, i);
    }
}

/* Run one pass over the items on up to threads threads (this one included), no more
 * threads than items with work in it (none: no pass at all, as for every hit). */
static void run_pass(batch *b, int pass, size_t threads)
{
    b->pass = pass;
    size_t work = 0;
    for (size_t i = 0; i < b->n; i++)
        work += due(b, i);
    if (work == 0)
        return;
    if (threads > work)
        threads = work;
    atomic_store(&b->cursor, 0);
    pthread_t tid[64];
    size_t started = 0;
    for (size_t t = 1; t < threads && t < 64; t++)
        if (pthread_create(&tid[started], NULL, worker, b) == 0)
            started++;
    worker(b);
    for (size_t t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
}

static int key_order(const void *x, const void *y, void *arg)
{
    const item *items = arg;
    size_t a = *(const size_t *)x, c = *(const size_t *)y;
    int r = memcmp(items[a].req.map_key.bytes, items[c].req.map_key.bytes, 16);
    return r ? r : (a > c) - (a < c); /* the first occurrence sorts first */
}

/* Mark every repeated key ITEM_REPEAT, pointing at its first occurrence. */
static kpc_status mark_repeats(item *items, size_t n)
{
    size_t *order = malloc(n * sizeof *order);
    if (order == NULL)
        return KPC_E_NOMEM;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (items[i].state == ITEM_TODO)
            order[m++] = i;
    qsort_r(order, m, sizeof *order, key_order, items);
    for (size_t k = 1; k < m; k++) {
        item *prev = &items[order[k - 1]], *cur = &items[order[k]];
        if (memcmp(prev->req.map_key.bytes, cur->req.map_key.bytes, 16) == 0) {
            cur->state = ITEM_REPEAT;
            cur->first = prev->state == ITEM_REPEAT ? prev->first : order[k - 1];
        }
    }
    free(order);
    return KPC_OK;
}

kpc_status kpc_program_get_many(kpc_context *ctx, const kpc_source *srcs, size_t n,
                                kpc_program **out_programs, kpc_status *out_statuses)
{
    if (n == 0)
        return KPC_OK;
    if (n > SIZE_MAX / sizeof(item)) { /* its allocations would overflow: no caller has n slots */
        KPC_LOG(KPC_LOG_ERROR, "kpc_program_get_many: %zu requests is more than can be allocated", n);
        return KPC_E_INVALID;
    }
    if (out_programs)
        memset(out_programs, 0, n * sizeof *out_programs);
    if (ctx == NULL || srcs == NULL || out_programs == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "kpc_program_get_many: NULL argument");
        if (out_statuses)
            for (size_t i = 0; i < n; i++)
                out_statuses[i] = KPC_E_INVALID;
        return KPC_E_INVALID;
    }
    kpc_status fork_check = kpc_cache_check_process(ctx->cache, "kpc_program_get_many");
    if (fork_check != KPC_OK) {
        if (out_statuses)
            for (size_t i = 0; i < n; i++)
                out_statuses[i] = fork_check;
        return fork_check;
    }
    batch b = {.ctx = ctx, .srcs = srcs, .n = n, .items = calloc(n, sizeof(item))};
    if (b.items == NULL)
        return KPC_E_NOMEM;
    for (size_t i = 0; i < n; i++) {
        item *it = &b.items[i];
        it->status = kpc_request_read(ctx, &srcs[i], &it->req);
        if (it->status != KPC_OK)
            it->state = ITEM_DONE; /* only this request fails */
    }
    if (mark_repeats(b.items, n) != KPC_OK) {
        free(b.items);
        return KPC_E_NOMEM;
    }
    size_t threads = ctx->cache->platform->parallel_compiles ? ctx->cache->settings.build_threads : 1;
    if (threads > n)
        threads = n;
    run_pass(&b, 1, threads);
    run_pass(&b, 2, threads);
    run_pass(&b, 3, threads);

    kpc_status first_failure = KPC_OK;
    const char *first_log = NULL;
    for (size_t i = 0; i < n; i++) {
        item *it = &b.items[i];
        if (it->state == ITEM_REPEAT) {
            item *f = &b.items[it->first];
            it->status = f->status;
            if (f->status == KPC_OK && kpc_program_retain(f->prog) == KPC_OK)
                it->prog = f->prog;
            if (f->status == KPC_OK)
                atomic_fetch_add_explicit(&ctx->cache->mem_hits[0].n, 1, memory_order_relaxed);
        }
        out_programs[i] = it->prog;
        if (out_statuses)
            out_statuses[i] = it->status;
        if (it->status != KPC_OK && first_failure == KPC_OK) {
            first_failure = it->status;
            first_log = it->state == ITEM_REPEAT ? b.items[it->first].log : it->log;
        }
    }
    kpc__last_log_set(first_failure == KPC_OK ? NULL : first_log);
    for (size_t i = 0; i < n; i++)
        free(b.items[i].log);
    free(b.items);
    return first_failure;
}
