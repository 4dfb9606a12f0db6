/*
 * map.c - a context's in-memory program map (level 1).
 *
 * The map follows the in-progress-entry design of SYCL's KernelProgramCache: the first
 * thread to miss a key inserts a BUILDING entry and builds outside any lock; later
 * threads find the entry and sleep on the map's condition variable until the builder
 * publishes. Success makes the entry READY; failure unlinks it at once, hands every
 * waiter the same status and log, and lets the next request try again.
 *
 * Hits take no lock and write no line another thread writes (the design of SBCL's method
 * cache: many threads on one program cost 2.9-4.4x the one-thread hit at 8-16 threads
 * while a hit took a read lock and bumped a shared count). The table is an open-addressed
 * array of entry pointers (linear probing; a removed entry leaves a TOMBSTONE so probes
 * run on), published with a release store and read with seq_cst loads (plain loads on
 * x86). An entry's key never changes and its program is set before its state is stored
 * READY (release), so a reader that sees READY sees the program. Writers (an insert,
 * a publication, an eviction, a forget) take `lock`, one at a time; a table that fills
 * up is copied into a bigger one and the pointer swapped.
 *
 * A request asks in one call (kpc_map_get, the getOrBuild of the same cache): a hit,
 * checked by the caller's current() where its program read outside its request; a wait;
 * or, on a miss, the caller's resolve() called outside any lock and its outcome
 * published before the call returns, so a miss does not come back here to publish.
 * kpc_map_acquire and kpc_map_publish are the two halves, for a caller that resolves in
 * passes (kpc_program_get_many).
 *
 * Reclamation: what a writer unlinks (an entry, an old table) is freed only after a
 * grace period (base/grace.c): every reader that was inside its read section when it was
 * unlinked has left. A reader's section covers the probe and the program's reference
 * (core/program.c: a count in the thread's own slot), nothing else. Why grace periods and
 * not "never free while the context lives": evictions and changed files unlink entries
 * for the life of a long-running context, and the programs they hold must go with them
 * (mem_max_programs bounds the memory); why not hazard pointers: a hit would publish and
 * re-check one per entry it looks at. A writer pays one scan of the threads' records.
 *
 * Recency: a hit stores the map's epoch (a counter bumped by each publication) in the
 * entry only when it changed, so in a steady state a hit writes nothing shared. Past
 * mem_max_programs the entry with the oldest epoch among EVICT_SAMPLE READY entries from
 * a rotating position is dropped (exact below that many entries, up to entries used since
 * the same publication).
 *
 * Lifetime: an entry is freed when it is out of the table, no waiter points at it and a
 * grace period has passed; it owns the map's program reference, let go of then
 * (kpc_program_map_drop). `lock` guards the table's contents, waiters, linked, status and
 * log; state and last_use are atomics. wait_lock guards nothing but the sleep on
 * `published`, and is never held with `lock`.
 */
#define _GNU_SOURCE
#include "core/map.h"
#include "core/program.h"
#include "base/grace.h"
#include "base/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum entry_state { ENTRY_BUILDING, ENTRY_READY, ENTRY_FAILED };

#define EVICT_SAMPLE 64
#define MIN_SLOTS 16

struct kpc_map_entry {
    kpc_key key;               /* immutable */
    atomic_int state;          /* enum entry_state; written under lock */
    _Atomic uint64_t last_use; /* the map's epoch when last published or got */
    kpc_program *prog;         /* READY: the map's reference; set before state */
    kpc_status status;         /* FAILED: the builder's status */
    char *log;                 /* FAILED: the builder's log */
    unsigned waiters;          /* threads sleeping on this entry */
    bool linked;               /* in the table */
};

/* The removed entry's mark: probes go on past it. */
static kpc_map_entry tombstone;
#define TOMBSTONE (&tombstone)

typedef struct map_table {
    size_t mask;    /* slots - 1; slots is a power of two */
    size_t used;    /* entries and tombstones: kept at most half the slots */
    _Atomic(kpc_map_entry *) slot[];
} map_table;

struct kpc_map {
    _Atomic(map_table *) table;
    pthread_mutex_t lock;      /* writers; see the top comment */
    size_t live;               /* entries in the table */
    size_t hand;               /* where the next eviction's sample starts */
    size_t max_ready;
    atomic_size_t ready;       /* READY entries in the table */
    _Atomic uint64_t epoch;    /* bumped by every publication */
    pthread_mutex_t wait_lock; /* the sleep on `published` */
    pthread_cond_t published;  /* broadcast whenever a build is published */
};

static size_t home_of(const map_table *t, const kpc_key *k)
{
    uint64_t h;
    memcpy(&h, k->bytes, sizeof h); /* the key is already a good hash */
    return (size_t)h & t->mask;
}

/* The entry of key, or NULL: in a read section, or under lock. */
static kpc_map_entry *find(const map_table *t, const kpc_key *key)
{
    for (size_t i = home_of(t, key);; i = (i + 1) & t->mask) {
        kpc_map_entry *e = atomic_load_explicit(&((map_table *)t)->slot[i], memory_order_seq_cst);
        if (e == NULL)
            return NULL; /* a table is never more than half full: a probe ends */
        if (e != TOMBSTONE && memcmp(e->key.bytes, key->bytes, sizeof key->bytes) == 0)
            return e;
    }
}

static map_table *table_new(size_t slots)
{
    map_table *t = calloc(1, sizeof *t + slots * sizeof t->slot[0]);
    if (t)
        t->mask = slots - 1;
    return t;
}

kpc_status kpc_map_new(size_t max_programs, kpc_map **out)
{
    kpc_map *m = calloc(1, sizeof *m);
    map_table *t = table_new(MIN_SLOTS);
    if (m == NULL || t == NULL) {
        free(m);
        free(t);
        return KPC_E_NOMEM;
    }
    atomic_init(&m->table, t);
    m->max_ready = max_programs;
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->wait_lock, NULL);
    pthread_cond_init(&m->published, NULL);
    *out = m;
    return KPC_OK;
}

/* After a grace period: no reader can still see e. */
static void entry_free(kpc_map_entry *e)
{
    if (e->prog)
        kpc_program_map_drop(e->prog);
    free(e->log);
    free(e);
}

/* Unlinked entries (and old tables) wait here for one grace period, outside the lock. */
typedef struct retired {
    kpc_map_entry *entry;
    map_table *table;
} retired;

static void retire(retired *r)
{
    if (r->entry == NULL && r->table == NULL)
        return;
    kpc_grace_wait();
    if (r->entry)
        entry_free(r->entry);
    free(r->table);
}

/* lock held. */
static void table_unlink(kpc_map *m, kpc_map_entry *e)
{
    map_table *t = atomic_load_explicit(&m->table, memory_order_relaxed);
    for (size_t i = home_of(t, &e->key);; i = (i + 1) & t->mask)
        if (atomic_load_explicit(&t->slot[i], memory_order_relaxed) == e) {
            atomic_store_explicit(&t->slot[i], TOMBSTONE, memory_order_seq_cst);
            break;
        }
    e->linked = false;
    m->live--;
}

/* lock held: room for one more entry. The old table, if replaced, goes to r. */
static bool table_make_room(kpc_map *m, retired *r)
{
    map_table *t = atomic_load_explicit(&m->table, memory_order_relaxed);
    if ((t->used + 1) * 2 <= t->mask + 1)
        return true;
    size_t slots = MIN_SLOTS;
    while (slots < (m->live + 1) * 4)
        slots *= 2;
    map_table *n = table_new(slots);
    if (n == NULL)
        return false;
    for (size_t i = 0; i <= t->mask; i++) {
        kpc_map_entry *e = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
        if (e == NULL || e == TOMBSTONE)
            continue;
        size_t j = home_of(n, &e->key);
        while (atomic_load_explicit(&n->slot[j], memory_order_relaxed) != NULL)
            j = (j + 1) & n->mask;
        atomic_store_explicit(&n->slot[j], e, memory_order_relaxed);
        n->used++;
    }
    atomic_store_explicit(&m->table, n, memory_order_seq_cst); /* readers see it whole */
    r->table = t;
    return true;
}

/* lock held. */
static void table_insert(kpc_map *m, kpc_map_entry *e)
{
    map_table *t = atomic_load_explicit(&m->table, memory_order_relaxed);
    size_t i = home_of(t, &e->key);
    kpc_map_entry *s;
    while ((s = atomic_load_explicit(&t->slot[i], memory_order_relaxed)) != NULL && s != TOMBSTONE)
        i = (i + 1) & t->mask;
    if (s == NULL)
        t->used++;
    atomic_store_explicit(&t->slot[i], e, memory_order_seq_cst);
    e->linked = true;
    m->live++;
}

/* A READY entry's recency: stored only when it changed, so steady hits write nothing. */
static void touch(kpc_map *m, kpc_map_entry *e)
{
    uint64_t now = atomic_load_explicit(&m->epoch, memory_order_relaxed);
    if (atomic_load_explicit(&e->last_use, memory_order_relaxed) != now)
        atomic_store_explicit(&e->last_use, now, memory_order_relaxed);
}

/* The lookup of a hit: kpc_map_hit's, and kpc_map_acquire's first step, inlined there so
 * that a request's hit makes no call more than the lookup's own. */
static inline bool lookup_ready(kpc_map *m, const kpc_key *key, kpc_program **prog)
{
    /* no lock, nothing shared written */
    kpc_grace_rec *g = kpc_grace_enter();
    kpc_map_entry *e = find(atomic_load_explicit(&m->table, memory_order_seq_cst), key);
    bool hit = e && atomic_load_explicit(&e->state, memory_order_acquire) == ENTRY_READY;
    if (hit) {
        touch(m, e);
        kpc_program_hit(e->prog);
        *prog = e->prog;
    }
    kpc_grace_exit(g);
    return hit;
}

bool kpc_map_hit(kpc_map *m, const kpc_key *key, kpc_program **prog)
{
    return lookup_ready(m, key, prog);
}

/* After the probe missed, under the lock: the claim, or the wait, or a READY entry
 * published since the probe (unchecked). */
static kpc_status claim_or_wait(kpc_map *m, const kpc_key *key, kpc_program **prog, kpc_map_entry **entry,
                                bool *waited)
{
    *waited = false;
    retired r = {0};
    pthread_mutex_lock(&m->lock);
    kpc_map_entry *e = find(atomic_load_explicit(&m->table, memory_order_relaxed), key);
    if (e == NULL) {
        e = calloc(1, sizeof *e);
        if (e == NULL || !table_make_room(m, &r)) {
            pthread_mutex_unlock(&m->lock);
            free(e);
            retire(&r);
            return KPC_E_NOMEM;
        }
        e->key = *key;
        atomic_init(&e->state, ENTRY_BUILDING);
        table_insert(m, e);
        pthread_mutex_unlock(&m->lock);
        retire(&r);
        *entry = e;
        return KPC_E_NOT_FOUND; /* the caller builds */
    }
    if (atomic_load(&e->state) == ENTRY_READY) { /* published since the probe */
        touch(m, e);
        kpc_program_retain(e->prog);
        *prog = e->prog;
        pthread_mutex_unlock(&m->lock);
        return KPC_OK;
    }
    /* BUILDING (a FAILED entry is never in the table): wait for the builder */
    *waited = true;
    e->waiters++;
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_lock(&m->wait_lock);
    while (atomic_load(&e->state) == ENTRY_BUILDING)
        pthread_cond_wait(&m->published, &m->wait_lock);
    pthread_mutex_unlock(&m->wait_lock);

    pthread_mutex_lock(&m->lock);
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
    if (!e->linked && e->waiters == 0)
        r.entry = e;
    pthread_mutex_unlock(&m->lock);
    retire(&r);
    return st;
}

/* lock held: a READY entry out of the table; freed after a grace period (r) unless a
 * waiter still points at it (the last one frees it). */
static void unlink_ready(kpc_map *m, kpc_map_entry *e, retired *r)
{
    table_unlink(m, e);
    atomic_fetch_sub(&m->ready, 1);
    if (e->waiters == 0)
        r->entry = e;
}

/* Drop the least recently used READY entries while there are more than max_ready. */
static void evict(kpc_map *m)
{
    for (;;) {
        retired r = {0};
        pthread_mutex_lock(&m->lock);
        if (atomic_load(&m->ready) <= m->max_ready) {
            pthread_mutex_unlock(&m->lock);
            return;
        }
        map_table *t = atomic_load_explicit(&m->table, memory_order_relaxed);
        kpc_map_entry *victim = NULL;
        uint64_t oldest = UINT64_MAX;
        unsigned seen = 0;
        size_t i = m->hand & t->mask;
        for (size_t n = 0; n <= t->mask && seen < EVICT_SAMPLE; n++, i = (i + 1) & t->mask) {
            kpc_map_entry *e = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
            if (e == NULL || e == TOMBSTONE || atomic_load(&e->state) != ENTRY_READY)
                continue;
            seen++;
            uint64_t u = atomic_load_explicit(&e->last_use, memory_order_relaxed);
            if (u < oldest)
                oldest = u, victim = e;
        }
        m->hand = i;
        if (victim) /* a program still referenced by a caller stays alive: this drops the map's */
            unlink_ready(m, victim, &r);
        pthread_mutex_unlock(&m->lock);
        retire(&r);
        if (victim == NULL)
            return;
    }
}

void kpc_map_publish(kpc_map *m, kpc_map_entry *e, kpc_status st, kpc_program *prog, const char *log)
{
    char *log_copy = st == KPC_OK ? NULL : kpc__strdup(log ? log : "");
    uint64_t epoch = atomic_fetch_add(&m->epoch, 1) + 1;
    size_t ready = 0;
    retired r = {0};
    pthread_mutex_lock(&m->lock);
    if (st == KPC_OK) {
        e->prog = prog;
        atomic_store_explicit(&e->last_use, epoch, memory_order_relaxed);
        atomic_store_explicit(&e->state, ENTRY_READY, memory_order_release);
        if (prog->transient) /* its outcome is stored nowhere: shared with the waiters, not kept */
            table_unlink(m, e);
        else
            ready = atomic_fetch_add(&m->ready, 1) + 1;
    } else {
        e->status = st;
        e->log = log_copy;
        atomic_store_explicit(&e->state, ENTRY_FAILED, memory_order_release);
        table_unlink(m, e); /* the next request tries again */
    }
    if (!e->linked && e->waiters == 0)
        r.entry = e;
    pthread_mutex_unlock(&m->lock);
    /* waiters test the state under wait_lock: taking it here orders the wake-up after
     * any test that saw BUILDING */
    pthread_mutex_lock(&m->wait_lock);
    pthread_cond_broadcast(&m->published);
    pthread_mutex_unlock(&m->wait_lock);
    retire(&r);
    if (st == KPC_OK && ready > m->max_ready)
        evict(m);
}

void kpc_map_forget(kpc_map *m, const kpc_key *key, const kpc_program *prog)
{
    retired r = {0};
    pthread_mutex_lock(&m->lock);
    kpc_map_entry *e = find(atomic_load_explicit(&m->table, memory_order_relaxed), key);
    if (e && atomic_load(&e->state) == ENTRY_READY && e->prog == prog)
        unlink_ready(m, e, &r);
    pthread_mutex_unlock(&m->lock);
    retire(&r);
}

/* Whether a hit's program p still answers (kpc_map_current); one that does not is let go
 * of, its entry forgotten, so that the next claim misses. */
static bool answers(kpc_map *m, const kpc_key *key, kpc_map_current current, kpc_program *p)
{
    if ((p->deps == NULL && !p->cwd_bound) || current(p->deps, p->cwd_bound ? p->cwd : NULL))
        return true;
    kpc_map_forget(m, key, p);
    kpc_program_release(p);
    return false;
}

/* acquire's way past a probe that did not answer: the claim, or the wait, until what
 * it finds answers. */
static kpc_status claim(kpc_map *m, const kpc_key *key, kpc_map_current current, kpc_program **prog,
                        kpc_map_entry **entry, kpc_map_answer *how)
{
    bool waited;
    kpc_status s;
    /* a program handed over by a build just waited for is fresh; one found READY is checked */
    while ((s = claim_or_wait(m, key, prog, entry, &waited)) == KPC_OK && !waited &&
           !answers(m, key, current, *prog))
        *prog = NULL;
    *how = s == KPC_E_NOT_FOUND ? KPC_MAP_MISSED : waited ? KPC_MAP_WAITED : KPC_MAP_HIT;
    return s;
}

/* kpc_map_acquire, inlined into kpc_map_get: a hit is the probe (lookup_ready, inline
 * too) and the two loads of answers' first test; the rest is a call. */
static inline kpc_status acquire(kpc_map *m, const kpc_key *key, kpc_map_current current, kpc_program **prog,
                                 kpc_map_entry **entry, kpc_map_answer *how)
{
    if (lookup_ready(m, key, prog)) {
        if (answers(m, key, current, *prog)) {
            *how = KPC_MAP_HIT;
            return KPC_OK;
        }
        *prog = NULL;
    }
    return claim(m, key, current, prog, entry, how);
}

kpc_status kpc_map_acquire(kpc_map *m, const kpc_key *key, kpc_map_current current, kpc_program **prog,
                           kpc_map_entry **entry, kpc_map_answer *how)
{
    return acquire(m, key, current, prog, entry, how);
}

/* kpc_map_get's miss: e claimed, its outcome resolved and published. A function of its
 * own so that a hit pays none of its frame. */
static kpc_status resolve_and_publish(kpc_map *m, kpc_map_entry *e, const kpc_map_resolver *r, void *arg,
                                      kpc_program **prog)
{
    char *log = NULL;
    kpc_status s = r->resolve(arg, prog, &log);
    if (s != KPC_OK) {
        *prog = NULL;
        kpc__last_log_set(log);
    }
    kpc_map_publish(m, e, s, *prog, log);
    free(log);
    return s;
}

kpc_status kpc_map_get(kpc_map *m, const kpc_key *key, const kpc_map_resolver *r, void *arg, kpc_program **prog,
                       kpc_map_answer *how)
{
    kpc_map_entry *e;
    kpc_status s = acquire(m, key, r->current, prog, &e, how);
    return s == KPC_E_NOT_FOUND ? resolve_and_publish(m, e, r, arg, prog) : s;
}

size_t kpc_map_count(kpc_map *m)
{
    return atomic_load(&m->ready);
}

void kpc_map_free(kpc_map *m)
{
    if (m == NULL)
        return;
    /* no reader is left (kpc.h: a context is destroyed by its last user) */
    map_table *t = atomic_load(&m->table);
    for (size_t i = 0; i <= t->mask; i++) {
        kpc_map_entry *e = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
        if (e != NULL && e != TOMBSTONE)
            entry_free(e);
    }
    free(t);
    pthread_cond_destroy(&m->published);
    pthread_mutex_destroy(&m->wait_lock);
    pthread_mutex_destroy(&m->lock);
    free(m);
}
