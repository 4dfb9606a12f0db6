/*
 * grace.c - grace periods for readers that take no lock, by a sequence number per
 * thread (the quiescent-state scheme of read-copy-update, without a global epoch).
 *
 * Each thread that reads owns a record on a cache line of its own, holding a sequence
 * number: odd inside a read section, even outside. Entering is one atomic increment of
 * that number (a full barrier: the reader's later loads cannot pass it), leaving one
 * release store. kpc_grace_wait reads every record once; for each odd one it waits until
 * the number changes, i.e. until that section is over. Why that is enough: a writer
 * unlinks (a seq_cst store), then reads the records (seq_cst loads). A reader whose
 * increment the writer did not see made it after that read, so after the unlink, and
 * its loads (seq_cst) see the unlink: it cannot reach what was unlinked. A reader the
 * writer saw inside a section is waited for. No reader ever waits, and none writes a
 * line another thread writes.
 *
 * Why this rather than epochs or hazard pointers: an epoch counter is one more shared
 * line that every section would read and writers bump, and hazard pointers need a
 * re-check per pointer; here a section costs one increment and one store on the
 * thread's own line, and a writer (a build published, an entry evicted: rare) pays a
 * scan of the records and a wait of at most one section.
 *
 * Records are never freed: a thread that exits gives its record back (pthread key
 * destructor) and the next new thread takes it, so there are as many as the most
 * threads that ever read at once. A fork child keeps only its own thread: the others'
 * records are reset there, so that a section left open by a parent's thread cannot
 * hold a wait in the child for ever.
 */
#define _GNU_SOURCE
#include "base/grace.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>

struct kpc_grace_rec {
    _Atomic uint64_t seq;     /* odd: in a read section; written by its owner only */
    atomic_bool taken;        /* owned by a live thread */
    kpc_grace_rec *next;      /* the list of every record; set before it is pushed */
    char pad[64 - 2 * sizeof(uint64_t) - sizeof(void *)];
};

static _Atomic(kpc_grace_rec *) records;
static pthread_key_t rec_key;
static pthread_once_t rec_once = PTHREAD_ONCE_INIT;
static _Thread_local kpc_grace_rec *mine;

static void give_back(void *arg)
{
    kpc_grace_rec *r = arg;
    atomic_store_explicit(&r->taken, false, memory_order_release);
}

static void child_after_fork(void)
{
    for (kpc_grace_rec *r = atomic_load(&records); r; r = r->next)
        if (r != mine) {
            atomic_store(&r->seq, 0);
            atomic_store(&r->taken, false);
        }
}

static void init(void)
{
    pthread_key_create(&rec_key, give_back);
    pthread_atfork(NULL, NULL, child_after_fork);
}

/* The library unloaded (a dlclose'd drop-in): threads exiting later must not call into it. */
__attribute__((destructor)) static void fini(void)
{
    pthread_once(&rec_once, init);
    pthread_key_delete(rec_key);
}

static kpc_grace_rec *claim(void)
{
    pthread_once(&rec_once, init);
    kpc_grace_rec *r;
    for (r = atomic_load(&records); r; r = r->next) {
        bool free_one = false;
        if (atomic_compare_exchange_strong(&r->taken, &free_one, true))
            break;
    }
    if (r == NULL) {
        r = aligned_alloc(64, sizeof *r);
        if (r == NULL)
            return NULL;
        atomic_init(&r->seq, 0);
        atomic_init(&r->taken, true);
        r->next = atomic_load(&records);
        while (!atomic_compare_exchange_weak(&records, &r->next, r))
            ;
    }
    pthread_setspecific(rec_key, r);
    mine = r;
    return r;
}

/* For a thread that could get no record (out of memory): its sections are counted here
 * instead, and a writer waits until the count is seen at 0 (a busy sharer may delay that,
 * never make it wrong). */
static _Atomic uint64_t spare_sections;
#define SPARE ((kpc_grace_rec *)&spare_sections)

kpc_grace_rec *kpc_grace_enter(void)
{
    kpc_grace_rec *r = mine ? mine : claim();
    if (r == NULL) {
        atomic_fetch_add_explicit(&spare_sections, 1, memory_order_seq_cst);
        return SPARE;
    }
    atomic_fetch_add_explicit(&r->seq, 1, memory_order_seq_cst);
    return r;
}

void kpc_grace_exit(kpc_grace_rec *r)
{
    if (r == SPARE) {
        atomic_fetch_sub_explicit(&spare_sections, 1, memory_order_release);
        return;
    }
    uint64_t s = atomic_load_explicit(&r->seq, memory_order_relaxed);
    atomic_store_explicit(&r->seq, s + 1, memory_order_release);
}

static void wait_for(kpc_grace_rec *r)
{
    uint64_t s = atomic_load_explicit(&r->seq, memory_order_seq_cst);
    if (r == mine || (s & 1) == 0)
        return;
    while (atomic_load_explicit(&r->seq, memory_order_seq_cst) == s)
        sched_yield();
}

void kpc_grace_wait(void)
{
    /* no fence needed: the unlink is a seq_cst store and the reads below seq_cst loads */
    for (kpc_grace_rec *r = atomic_load(&records); r; r = r->next)
        wait_for(r);
    while (atomic_load_explicit(&spare_sections, memory_order_seq_cst) != 0)
        sched_yield();
}

unsigned kpc_thread_slot(void)
{
    static atomic_uint next;
    static _Thread_local unsigned slot; /* 1 + the slot; 0: not chosen yet */
    if (slot == 0)
        slot = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % KPC_THREAD_SLOTS + 1;
    return slot - 1;
}
