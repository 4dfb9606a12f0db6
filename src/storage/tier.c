/*
 * tier.c - the table of storage tiers and the walk over them (the seam: storage/tier.h).
 *
 * The table's order is the walk's order: nearest and cheapest first. A tier's open
 * function answers KPC_E_NOT_FOUND when it is not configured (no KPC_PACK_PATH, no
 * KPC_REMOTE): it is then simply absent. A tier that fails to open is logged and left
 * out; the cache goes on with the others.
 */
#include "storage/tier.h"
#include "base/log.h"
#include "storage/pack_tier.h"
#include "storage/remote.h"
#include "storage/store.h"

#include <stdatomic.h>
#include <string.h>

/* Adding a tier: its open function here, in walk order. */
static const struct {
    const char *name;
    kpc_tier_open_fn open;
} tier_table[] = {
    {"disk", kpc_store_tier_open},
    {"pack", kpc_pack_tier_open}, /* read-only: after the disk, before a compile */
    {"redis", kpc_remote_tier_open}, /* the cluster tier: last, coordinating */
};

#ifdef KPC_TEST_HOOKS
static _Atomic(kpc_tier_open_fn) test_tier;

void kpc_tier_test_add(kpc_tier_open_fn open)
{
    atomic_store(&test_tier, open);
}
#endif

static void open_one(const kpc_tier_env *env, const char *name, kpc_tier_open_fn open, kpc_tiers *out)
{
    kpc_tier *t = NULL;
    kpc_status s = out->n < KPC_TIERS_MAX ? open(env, &t) : KPC_E_NOMEM;
    if (s == KPC_OK)
        out->t[out->n++] = t;
    else if (s != KPC_E_NOT_FOUND)
        KPC_LOG(KPC_LOG_WARN, "the %s tier is off for this process (%s)", name, kpc_status_str(s));
}

void kpc_tier_open_all(const kpc_tier_env *env, kpc_tiers *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof tier_table / sizeof tier_table[0]; i++)
        open_one(env, tier_table[i].name, tier_table[i].open, out);
#ifdef KPC_TEST_HOOKS
    kpc_tier_open_fn extra = atomic_load(&test_tier);
    if (extra)
        open_one(env, "test", extra, out);
#endif
}

void kpc_tier_close_all(kpc_tiers *ts)
{
    for (size_t i = ts->n; i-- > 0;)
        if (ts->t[i]->ops->close)
            ts->t[i]->ops->close(ts->t[i]);
    ts->n = 0;
}

static void count(_Atomic uint64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

kpc_status kpc_tier_write(kpc_tiers *ts, const kpc_tier *upto, const kpc_record *rec,
                          const void *first, const void *second)
{
    kpc_status result = KPC_E_IO;
    for (size_t i = 0; i < ts->n && ts->t[i] != upto; i++) {
        kpc_tier *t = ts->t[i];
        if (!(t->flags & KPC_TIER_WRITABLE) || t->ops->write == NULL)
            continue;
        kpc_status s = t->ops->write(t, rec, first, second);
        if (s == KPC_OK) {
            count(&t->n.writes);
            result = KPC_OK;
        } else {
            count(&t->n.errors);
            if (result != KPC_OK)
                result = s;
        }
    }
    return result;
}

void kpc_tier_backfill(kpc_tiers *ts, const kpc_tier *from, const kpc_record *rec)
{
    for (size_t i = 0; i < ts->n && ts->t[i] != from; i++) {
        kpc_tier *t = ts->t[i];
        if (!(t->flags & KPC_TIER_WRITABLE) || t->ops->write == NULL)
            continue;
        kpc_status (*put)(kpc_tier *, const kpc_record *, const void *, const void *) =
            t->ops->copy ? t->ops->copy : t->ops->write;
        if (put(t, rec, rec->payload, (const char *)rec->payload + rec->code_size) == KPC_OK) {
            count(&t->n.writes);
            count(&t->n.backfills);
        } else {
            count(&t->n.errors);
        }
    }
}

kpc_status kpc_tier_read(kpc_tiers *ts, const kpc_key *key, const char *target, uint32_t kind,
                         kpc_record *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < ts->n; i++) {
        kpc_tier *t = ts->t[i];
        if (t->ops->read == NULL)
            continue;
        kpc_status s = t->ops->read(t, key, target, kind, out);
        if (s == KPC_OK) {
            count(&t->n.hits);
            kpc_tier_backfill(ts, t, out);
            return KPC_OK;
        }
        if (s == KPC_E_NOT_FOUND)
            count(&t->n.misses);
        else if (s == KPC_E_CORRUPT)
            count(&t->n.refused);
        else
            count(&t->n.errors); /* logged by the tier; a miss for the walk */
    }
    return KPC_E_NOT_FOUND;
}

kpc_status kpc_tier_remove_same(kpc_tiers *ts, const kpc_key *key, const char *target,
                                const void *code, size_t size)
{
    kpc_status first = KPC_E_NOT_FOUND;
    bool any = false;
    for (size_t i = 0; i < ts->n; i++) {
        kpc_tier *t = ts->t[i];
        if (!(t->flags & KPC_TIER_WRITABLE) || t->ops->remove_same == NULL)
            continue;
        kpc_status s = t->ops->remove_same(t, key, target, code, size);
        if (!any)
            first = s, any = true;
    }
    return first;
}

kpc_tier *kpc_tier_coordinator(kpc_tiers *ts)
{
    for (size_t i = 0; i < ts->n; i++)
        if (ts->t[i]->flags & KPC_TIER_COORDINATES)
            return ts->t[i];
    return NULL;
}
