/*
 * claim.h - the host index's rule "begin, then exactly one of publish / unstored /
 * abandon", and a coordinating tier's lease, wrapped once (storage/claim.c).
 *
 * A claim is on the caller's stack. kpc_claim_begin asks the host index about a key;
 * when the answer is KPC_INDEX_BUILD the claim holds the key's slot, and the caller must
 * call kpc_claim_finish exactly once, on every path. While it holds the slot it may ask
 * the coordinating tier (kpc_claim_tier_begin); a lease granted there joins the claim,
 * is renewed by a keeper thread, and is finished by the same kpc_claim_finish. finish
 * on a claim that holds nothing (no index, another verdict, finished already) does
 * nothing, so a caller may call it on every path without asking.
 */
#ifndef KPC_STORAGE_CLAIM_H
#define KPC_STORAGE_CLAIM_H

#include "shm/index.h"
#include "storage/record.h"
#include "storage/tier.h"

typedef enum kpc_claim_outcome {
    KPC_CLAIM_READY = 1, /* the CODE record is stored: waiters read it */
    KPC_CLAIM_FAILED,    /* a real compile error; its LOG record is stored */
    KPC_CLAIM_UNSTORED,  /* built (or failed) but not stored here: waiters build themselves */
    KPC_CLAIM_ABANDON,   /* no outcome (a local fault): a waiter takes the key over */
} kpc_claim_outcome;

typedef struct kpc_claim_keeper kpc_claim_keeper;
typedef struct kpc_claim {
    kpc_index *ix;          /* set while this process holds the key's host slot */
    kpc_key key;
    kpc_tier *tier;         /* the coordinating tier whose lease is held, or NULL */
    kpc_tier_lease *lease;
    kpc_claim_keeper *keeper; /* renews the lease; NULL when it needs no renewal */
} kpc_claim;

/* Ask the host index (ix may be NULL: no index, *verdict BUILD and nothing held).
 * *verdict and *waited as kpc_index_begin; a failure status means the index broke
 * (logged): *verdict is BUILD and nothing is held. */
kpc_status kpc_claim_begin(kpc_claim *c, kpc_index *ix, const kpc_key *key, unsigned flags,
                           enum kpc_index_verdict *verdict, bool *waited);
/* True while the claim holds the host slot (a BUILD verdict not yet finished). */
bool kpc_claim_held(const kpc_claim *c);
/* With the slot held, ask the coordinating tier t (tier.h, begin; try_begin when nowait
 * and the tier has it, which may answer KPC_TIER_BUSY: the slot is still held, and the
 * caller asks again later with nowait false, or finishes the claim). On KPC_TIER_BUILD
 * the lease joins the claim. A failure status: the tier is out of play for this key. */
kpc_status kpc_claim_tier_begin(kpc_claim *c, kpc_tier *t, const char *target, bool nowait,
                                kpc_tier_begin *res);
/* Finish the claim: the host slot and the lease, exactly once. rec (with its payload in
 * first and second, as tier.h's write) is the CODE record (READY, UNSTORED after a
 * build) or the LOG record (FAILED, UNSTORED after a compile error); NULL otherwise. The
 * lease is published with rec when there is one, else abandoned. */
void kpc_claim_finish(kpc_claim *c, kpc_claim_outcome how, const kpc_record *rec, const void *first,
                      const void *second);

#endif /* KPC_STORAGE_CLAIM_H */
