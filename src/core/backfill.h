/*
 * backfill.h - a record the coordinating (cluster) tier answered, copied into the host's
 * writable tiers by a thread of the cache, off the request's path (core/backfill.c).
 */
#ifndef KPC_CORE_BACKFILL_H
#define KPC_CORE_BACKFILL_H

#include "core/program.h"
#include "storage/claim.h"
#include "storage/tier.h"

#include <pthread.h>
#include <stdbool.h>

typedef struct kpc_backfill_job kpc_backfill_job;

typedef struct kpc_backfill {
    kpc_tiers *tiers;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work; /* a job queued, or stop */
    pthread_cond_t idle; /* the queue emptied */
    kpc_backfill_job *head, *tail; /* guarded by lock */
    unsigned busy;                 /* jobs queued or being copied; guarded by lock */
    bool stop;                     /* guarded by lock */
    bool running;                  /* the thread was started (set before any job) */
} kpc_backfill;

/* Start the thread that copies into tiers (the cache's; they outlive it). A failure is
 * logged, and every copy is then made on the request's path. */
void kpc_backfill_start(kpc_backfill *bf, kpc_tiers *tiers);
/* Hand over the copy of head (a record from tier `from`; its payload is prog's code
 * buffer: code, names, request) with the claim (moved: *claim is left holding nothing).
 * The thread makes the copy (kpc_backfill_copy), then releases the reference to prog it
 * was given here. KPC_OK handed over; anything else: nothing taken, the caller copies. */
kpc_status kpc_backfill_defer(kpc_backfill *bf, kpc_tier *from, kpc_claim *claim, const kpc_record *head,
                              kpc_program *prog);
/* The copy itself, on the caller's thread: head (from tier `from`) into every writable tier
 * above it, then the claim finished READY with the record once it is on this host's disk
 * (ABANDON when the disk could not store it). head's payload and request are the
 * program's: they are cleared, never freed. */
void kpc_backfill_copy(kpc_tiers *tiers, kpc_tier *from, kpc_claim *claim, kpc_record *head);
/* Until every copy handed over so far is made (the tests'). */
void kpc_backfill_wait(kpc_backfill *bf);
/* Make every copy handed over, then end the thread. Not in a fork child (no thread there):
 * the caller checks. */
void kpc_backfill_stop(kpc_backfill *bf);

#endif /* KPC_CORE_BACKFILL_H */
