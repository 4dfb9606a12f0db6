/*
 * claim.c - a claim on a key: the host slot and a coordinating tier's lease, finished
 * together and exactly once (the rule: storage/claim.h).
 *
 * The keeper: a lease must be renewed while the compile runs (the compile blocks this
 * thread for up to seconds), so a small thread wakes every renew_ns and calls the tier's
 * renew, until finish stops and joins it. lock guards stop; the lease itself is used by
 * the keeper only between start and join, and by the claim's thread only after join.
 */
#define _GNU_SOURCE
#include "storage/claim.h"
#include "base/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct kpc_claim_keeper {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;         /* guarded by lock */
    uint64_t every_ns;
    kpc_tier *tier;
    kpc_tier_lease *lease;
};

static void *keep(void *arg)
{
    kpc_claim_keeper *k = arg;
    pthread_mutex_lock(&k->lock);
    while (!k->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        uint64_t ns = (uint64_t)until.tv_nsec + k->every_ns;
        until.tv_sec += (time_t)(ns / 1000000000u);
        until.tv_nsec = (long)(ns % 1000000000u);
        int rc = 0;
        while (!k->stop && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&k->wake, &k->lock, &until);
        if (k->stop)
            break;
        pthread_mutex_unlock(&k->lock);
        if (k->tier->ops->renew(k->tier, k->lease) != KPC_OK)
            KPC_LOG(KPC_LOG_WARN, "the %s tier's lease could not be renewed: another host may "
                    "build the same key", k->tier->name);
        pthread_mutex_lock(&k->lock);
    }
    pthread_mutex_unlock(&k->lock);
    return NULL;
}

static kpc_claim_keeper *keeper_start(kpc_tier *t, kpc_tier_lease *lease, uint64_t every_ns)
{
    if (every_ns == 0 || t->ops->renew == NULL)
        return NULL;
    kpc_claim_keeper *k = calloc(1, sizeof *k);
    if (k == NULL)
        return NULL;
    k->every_ns = every_ns;
    k->tier = t;
    k->lease = lease;
    pthread_mutex_init(&k->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&k->thread, NULL, keep, k) != 0) {
        KPC_LOG(KPC_LOG_WARN, "no thread to renew the %s tier's lease: it may expire during "
                "a long compile", t->name);
        pthread_cond_destroy(&k->wake);
        pthread_mutex_destroy(&k->lock);
        free(k);
        return NULL;
    }
    return k;
}

static void keeper_stop(kpc_claim_keeper *k)
{
    if (k == NULL)
        return;
    pthread_mutex_lock(&k->lock);
    k->stop = true;
    pthread_cond_signal(&k->wake);
    pthread_mutex_unlock(&k->lock);
    pthread_join(k->thread, NULL);
    pthread_cond_destroy(&k->wake);
    pthread_mutex_destroy(&k->lock);
    free(k);
}

kpc_status kpc_claim_begin(kpc_claim *c, kpc_index *ix, const kpc_key *key, unsigned flags,
                           enum kpc_index_verdict *verdict, bool *waited)
{
    memset(c, 0, sizeof *c);
    c->key = *key;
    *verdict = KPC_INDEX_BUILD;
    *waited = false;
    if (ix == NULL)
        return KPC_OK;
    kpc_status s = kpc_index_begin(ix, key, flags, verdict, waited);
    if (s != KPC_OK) {
        *verdict = KPC_INDEX_BUILD; /* the index broke: logged; go on without it */
        return s;
    }
    if (*verdict == KPC_INDEX_BUILD)
        c->ix = ix;
    return KPC_OK;
}

bool kpc_claim_held(const kpc_claim *c)
{
    return c->ix != NULL;
}

kpc_status kpc_claim_tier_begin(kpc_claim *c, kpc_tier *t, const char *target, bool nowait,
                                kpc_tier_begin *res)
{
    memset(res, 0, sizeof *res);
    if (c->ix == NULL || c->lease != NULL || t->ops->begin == NULL)
        return KPC_E_INVALID; /* only the holder of the host slot speaks for the host */
    kpc_status s = nowait && t->ops->try_begin ? t->ops->try_begin(t, &c->key, target, res)
                                               : t->ops->begin(t, &c->key, target, res);
    if (s != KPC_OK) {
        kpc_tier_count_add(t, &t->n.errors);
        return s;
    }
    if (res->waited)
        kpc_tier_count_add(t, &t->n.waits);
    if (res->verdict == KPC_TIER_BUILD) {
        kpc_tier_count_add(t, &t->n.builds);
        c->tier = t;
        c->lease = res->lease;
        c->keeper = keeper_start(t, res->lease, res->renew_ns);
    } else if (res->verdict != KPC_TIER_BUSY) { /* BUSY: asked again later, counted then */
        kpc_tier_count_add(t, res->verdict == KPC_TIER_HIT ? &t->n.hits : &t->n.misses);
    }
    return KPC_OK;
}

void kpc_claim_finish(kpc_claim *c, kpc_claim_outcome how, const kpc_record *rec, const void *first,
                      const void *second)
{
    if (c->lease) {
        keeper_stop(c->keeper);
        enum kpc_tier_outcome out = KPC_TIER_ABANDON;
        if (how != KPC_CLAIM_ABANDON && rec != NULL)
            out = rec->kind == KPC_RECORD_LOG ? KPC_TIER_PUBLISH_FAILED : KPC_TIER_PUBLISH;
        c->tier->ops->finish(c->tier, c->lease, out, out == KPC_TIER_ABANDON ? NULL : rec, first, second);
        c->lease = NULL;
        c->keeper = NULL;
        c->tier = NULL;
    }
    if (c->ix == NULL)
        return;
    switch (how) {
    case KPC_CLAIM_READY:
        kpc_index_publish(c->ix, &c->key, true, rec ? rec->code_size : 0);
        break;
    case KPC_CLAIM_FAILED:
        kpc_index_publish(c->ix, &c->key, false, 0);
        break;
    case KPC_CLAIM_UNSTORED:
        kpc_index_unstored(c->ix, &c->key);
        break;
    case KPC_CLAIM_ABANDON:
        kpc_index_abandon(c->ix, &c->key);
        break;
    }
    c->ix = NULL; /* finished: a second call does nothing */
}
