/*
 * tier.c - the table of storage tiers and the walk over them (the seam: storage/tier.h).
 *
 * The table's order is the walk's order: nearest and cheapest first. A tier's open
 * function answers KPC_E_NOT_FOUND when it is not configured (no KPC_PACK_PATH, no
 * KPC_SHARED_DIR, no KPC_REMOTE): it is then simply absent. A tier that fails to open is logged and left
 * out; the cache goes on with the others.
 */
#include "storage/tier.h"
#include "base/log.h"
#include "storage/pack_tier.h"
#include "storage/remote.h"
#include "storage/store.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#define STAT(field) offsetof(kpc_stats, field)
static const kpc_tier_stats_map pack_stats = {.hits = STAT(pack_hits), .refused = STAT(pack_refused)};
static const kpc_tier_stats_map shared_stats = {.hits = STAT(shared_hits), .refused = STAT(shared_refused)};
static const kpc_tier_stats_map remote_stats = {
    .hits = STAT(remote_hits), .misses = STAT(remote_misses), .builds = STAT(remote_builds),
    .waits = STAT(remote_waits), .takeovers = STAT(remote_takeovers), .errors = STAT(remote_errors),
    .refused = STAT(remote_refused)};

/* Adding a tier: its row here, in walk order: what it can do, where its counts go. */
typedef struct tier_row {
    const char *name;
    kpc_tier_open_fn open;
    unsigned flags;
    const kpc_tier_stats_map *stats;
} tier_row;
static const tier_row tier_table[] = {
    {"disk", kpc_store_tier_open, KPC_TIER_WRITABLE | KPC_TIER_HOST_DISK, NULL},
    {"pack", kpc_pack_tier_open, 0, &pack_stats}, /* read-only: after the disk, before a compile */
    {"shared", kpc_shared_tier_open, KPC_TIER_WRITABLE, &shared_stats}, /* KPC_SHARED_DIR */
    {"redis", kpc_remote_tier_open, KPC_TIER_COORDINATES, &remote_stats}, /* last, coordinating */
};

#ifdef KPC_TEST_HOOKS
static _Atomic(kpc_tier_open_fn) test_tier;

void kpc_tier_test_add(kpc_tier_open_fn open)
{
    atomic_store(&test_tier, open);
}
#endif

/* row NULL: a test's tier, which declares its own name and flags */
static void open_one(const kpc_tier_env *env, const tier_row *row, kpc_tier_open_fn open, kpc_tiers *out)
{
    kpc_tier *t = NULL;
    kpc_status s = out->n < KPC_TIERS_MAX ? open(env, &t) : KPC_E_NOMEM;
    if (s == KPC_OK) {
        if (row) {
            t->name = row->name;
            t->flags = row->flags;
            t->stats = row->stats;
        }
        out->t[out->n++] = t;
    } else if (s != KPC_E_NOT_FOUND)
        KPC_LOG(KPC_LOG_WARN, "the %s tier is off for this process (%s)", row ? row->name : "test",
                kpc_status_str(s));
}

void kpc_tier_open_all(const kpc_tier_env *env, kpc_tiers *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof tier_table / sizeof tier_table[0]; i++)
        open_one(env, &tier_table[i], tier_table[i].open, out);
#ifdef KPC_TEST_HOOKS
    kpc_tier_open_fn extra = atomic_load(&test_tier);
    if (extra)
        open_one(env, NULL, extra, out);
#endif
}

void kpc_tier_close_all(kpc_tiers *ts)
{
    for (size_t i = ts->n; i-- > 0;)
        if (ts->t[i]->ops->close)
            ts->t[i]->ops->close(ts->t[i]);
    ts->n = 0;
}

void kpc_tier_count_add(kpc_tier *t, _Atomic uint64_t *counter)
{
    if (t->ops->counters == NULL)
        atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
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
            kpc_tier_count_add(t, &t->n.writes);
            result = KPC_OK;
        } else {
            kpc_tier_count_add(t, &t->n.errors);
            if (result != KPC_OK)
                result = s;
        }
    }
    return result;
}

kpc_status kpc_tier_backfill(kpc_tiers *ts, const kpc_tier *from, const kpc_record *rec)
{
    kpc_status result = KPC_OK; /* the host's disk's: what a host slot's READY promises */
    for (size_t i = 0; i < ts->n && ts->t[i] != from; i++) {
        kpc_tier *t = ts->t[i];
        if (!(t->flags & KPC_TIER_WRITABLE) || t->ops->write == NULL)
            continue;
        kpc_status (*put)(kpc_tier *, const kpc_record *, const void *, const void *) =
            t->ops->copy ? t->ops->copy : t->ops->write;
        kpc_status s = put(t, rec, rec->payload, (const char *)rec->payload + rec->code_size);
        if (s == KPC_OK) {
            kpc_tier_count_add(t, &t->n.writes);
            kpc_tier_count_add(t, &t->n.backfills);
        } else {
            kpc_tier_count_add(t, &t->n.errors);
            if (t->flags & KPC_TIER_HOST_DISK)
                result = s;
        }
    }
    return result;
}

kpc_status kpc_tier_read(kpc_tiers *ts, const kpc_key *key, const char *target, uint32_t kind,
                         kpc_record *out, kpc_tier **from)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < ts->n; i++) {
        kpc_tier *t = ts->t[i];
        if (t->ops->read == NULL)
            continue;
        kpc_status s = t->ops->read(t, key, target, kind, out);
        if (s == KPC_OK) {
            if (from)
                *from = t;
            else
                kpc_tier_accept(ts, t, out);
            return KPC_OK;
        }
        if (s == KPC_E_NOT_FOUND)
            kpc_tier_count_add(t, &t->n.misses);
        else if (s == KPC_E_CORRUPT)
            kpc_tier_count_add(t, &t->n.refused);
        else
            kpc_tier_count_add(t, &t->n.errors); /* logged by the tier; a miss for the walk */
    }
    return KPC_E_NOT_FOUND;
}

void kpc_tier_accept(kpc_tiers *ts, kpc_tier *from, const kpc_record *rec)
{
    kpc_tier_count_add(from, &from->n.hits);
    kpc_tier_backfill(ts, from, rec);
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

kpc_tier *kpc_tier_host_disk(kpc_tiers *ts)
{
    for (size_t i = 0; i < ts->n; i++)
        if (ts->t[i]->flags & KPC_TIER_HOST_DISK)
            return ts->t[i];
    return NULL;
}

static void put_stat(kpc_stats *out, size_t field, uint64_t v)
{
    if (field != 0)
        *(uint64_t *)((char *)out + field) += v;
}

void kpc_tier_stats(kpc_tiers *ts, kpc_stats *out)
{
    for (size_t i = 0; i < ts->n; i++) {
        kpc_tier *t = ts->t[i];
        const kpc_tier_stats_map *m = t->stats;
        if (m == NULL)
            continue;
        kpc_tier_count c = {0};
        if (t->ops->counters)
            t->ops->counters(t, &c);
        else
            c = (kpc_tier_count){.hits = atomic_load(&t->n.hits), .misses = atomic_load(&t->n.misses),
                                 .builds = atomic_load(&t->n.builds), .waits = atomic_load(&t->n.waits),
                                 .errors = atomic_load(&t->n.errors), .refused = atomic_load(&t->n.refused)};
        put_stat(out, m->hits, c.hits);
        put_stat(out, m->misses, c.misses);
        put_stat(out, m->builds, c.builds);
        put_stat(out, m->waits, c.waits);
        put_stat(out, m->takeovers, c.takeovers);
        put_stat(out, m->errors, c.errors);
        put_stat(out, m->refused, c.refused);
    }
}
