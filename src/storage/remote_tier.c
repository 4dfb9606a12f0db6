/*
 * remote_tier.c - the cluster tier on the storage seam (storage/tier.h), over remote.c.
 *
 * Coordinating only: it has no read and no write op, so the walk never touches Redis and
 * no record reaches Redis but through finish under a lease: only the process holding a
 * key's host claim talks to Redis about it (claim.c calls begin only then). claim.c's
 * keeper thread renews the lease every lease/3 while the compile blocks the builder.
 * peek lets a host waiter whose builder takes longer than a lease look for the record
 * another host may have published meanwhile (a stopped builder must not hold its host
 * for KPC_BUILD_WAIT_MAX_MS).
 */
#include "storage/remote.h"

#include <stdlib.h>
#include <string.h>

typedef struct remote_tier {
    kpc_tier t; /* first: the seam's view */
    kpc_remote *r;
} remote_tier;

static kpc_remote *of(kpc_tier *t) { return ((remote_tier *)t)->r; }

/* The remote's verdict on the seam's terms. */
static kpc_status answer(kpc_tier *t, enum kpc_remote_verdict v, kpc_remote_lease *lease, kpc_tier_begin *res)
{
    switch (v) {
    case KPC_REMOTE_HIT:
        res->verdict = KPC_TIER_HIT;
        return KPC_OK;
    case KPC_REMOTE_FAILED:
        res->verdict = KPC_TIER_FAILED;
        return KPC_OK;
    case KPC_REMOTE_BUILD:
        res->verdict = KPC_TIER_BUILD;
        res->lease = (kpc_tier_lease *)lease;
        res->renew_ns = kpc_remote_renew_ns(of(t));
        return KPC_OK;
    case KPC_REMOTE_BUSY:
        res->verdict = KPC_TIER_BUSY;
        return KPC_OK;
    case KPC_REMOTE_OFF:
        break;
    }
    return KPC_E_UNAVAILABLE;
}

static kpc_status tier_begin(kpc_tier *t, const kpc_key *key, const char *target, kpc_tier_begin *res)
{
    memset(res, 0, sizeof *res);
    kpc_remote_lease *lease = NULL;
    enum kpc_remote_verdict v = kpc_remote_begin(of(t), key, target, NULL, &res->rec, &lease, &res->waited);
    return answer(t, v, lease, res);
}

static kpc_status tier_try_begin(kpc_tier *t, const kpc_key *key, const char *target, kpc_tier_begin *res)
{
    memset(res, 0, sizeof *res);
    kpc_remote_lease *lease = NULL;
    enum kpc_remote_verdict v = kpc_remote_try_begin(of(t), key, target, NULL, &res->rec, &lease);
    return answer(t, v, lease, res);
}

static kpc_status tier_renew(kpc_tier *t, kpc_tier_lease *lease)
{
    return kpc_remote_renew(of(t), (kpc_remote_lease *)lease);
}

static kpc_status tier_peek(kpc_tier *t, const kpc_key *key, const char *target, kpc_record *out)
{
    return kpc_remote_read(of(t), key, target, NULL, KPC_RECORD_CODE, out);
}

static void tier_finish(kpc_tier *t, kpc_tier_lease *tl, enum kpc_tier_outcome how, const kpc_record *rec,
                        const void *first, const void *second)
{
    kpc_remote_lease *lease = (kpc_remote_lease *)tl;
    void *buf = NULL;
    size_t size = 0;
    /* the disk record's bytes exactly (storage/record.h) */
    if (how == KPC_TIER_ABANDON || rec == NULL || kpc_record_encode(rec, first, second, &buf, &size) != KPC_OK) {
        kpc_remote_release(of(t), lease);
        return;
    }
    kpc_remote_publish(of(t), lease, &rec->key, rec->kind, buf, size);
    free(buf);
}

static void tier_close(kpc_tier *t)
{
    kpc_remote_close(of(t));
    free(t);
}

/* The remote counts for itself (it adds its counts to the cluster's when it closes). */
static void tier_counters(kpc_tier *t, kpc_tier_count *out)
{
    kpc_remote_counters c;
    kpc_remote_counters_get(of(t), &c);
    *out = (kpc_tier_count){.hits = c.hits, .misses = c.misses, .builds = c.builds, .waits = c.waits,
                            .takeovers = c.takeovers, .errors = c.errors, .refused = c.refused};
}

static const kpc_tier_ops remote_ops = {
    .begin = tier_begin,
    .try_begin = tier_try_begin,
    .renew = tier_renew,
    .peek = tier_peek,
    .finish = tier_finish,
    .close = tier_close,
    .counters = tier_counters,
};

kpc_status kpc_remote_tier_open(const kpc_tier_env *env, kpc_tier **out)
{
    *out = NULL;
    const char *url = kpc_remote_url_configured(env->cfg);
    if (url == NULL)
        return KPC_E_NOT_FOUND;
    remote_tier *rt = calloc(1, sizeof *rt);
    if (rt == NULL)
        return KPC_E_NOMEM;
    kpc_status s = kpc_remote_open(url, &rt->r);
    if (s != KPC_OK) {
        free(rt);
        return s;
    }
    rt->t.ops = &remote_ops;
    rt->t.watch_ns = kpc_remote_renew_ns(rt->r) * 3; /* a lease */
    kpc_remote_say_unserved(rt->r);
    *out = &rt->t;
    return KPC_OK;
}

kpc_remote *kpc_remote_tier_client(kpc_tier *t)
{
    return t && t->ops == &remote_ops ? of(t) : NULL;
}
