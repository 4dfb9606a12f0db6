/*
 * tier.h - the storage seam: an ordered list of tiers that hold records, walked by
 * core/resolve.c below the context's in-memory map and the host index.
 *
 *   tier 0      disk tree (storage/store.c)         writable
 *   tier 1..    packs of pre-built records          read-only
 *   then        a directory several hosts share     writable (storage/shared_tier.c)
 *   last        a cluster store (Redis)             writable, coordinating
 *
 * A tier is a `struct kpc_tier` (embedded as the first member of the implementation's
 * own struct) whose ops table says what it can do. The walk (tier.c) asks each tier in
 * order for a record; a hit in tier i is back-filled into every writable tier above it
 * (j < i), so the next process on the host reads it from disk. Writes (a fresh build, a
 * compile-failure log) go to every writable tier from the top.
 *
 * Coordination. The host index (shm/index.h) elects one process per key and host;
 * only that process (it holds a kpc_claim, storage/claim.h) talks to a coordinating tier
 * about the key, through begin:
 *   HIT     the record (checked like any read): back-fill it, done.
 *   FAILED  a compile error shared across hosts: its LOG record. No lease is held.
 *   BUILD   this process now holds a cross-host lease for the key. While it compiles it
 *           must call renew at least every renew_ns (claim.c runs a keeper thread for
 *           that); then it calls finish exactly once: PUBLISH with the CODE record,
 *           PUBLISH_FAILED with the LOG record of a real compile error (the compiler's
 *           diagnostics, never a local fault), or ABANDON (anything else: it could not
 *           compile, its environment is broken, it is out of memory). finish frees the
 *           lease, even when the tier is sick.
 *   BUSY    (try_begin only) another host's live builder holds the lease: nothing held.
 * begin may block while another host builds, up to the tier's own timeout; past it, or
 * when the tier is unreachable, it returns a failure status and the caller goes on
 * without that tier (host-local build). A process without the claim (no host index, or
 * the index said "build for yourself") never calls begin: it may call read.
 *
 * Statuses, every op: KPC_OK; KPC_E_NOT_FOUND (no such record: a miss); KPC_E_CORRUPT
 * (a record failed its checks: refused, counted in `refused`, removed where the tier
 * can); KPC_E_IO / KPC_E_UNAVAILABLE (the tier is sick: logged once, counted in
 * `errors`; the walk skips it); KPC_E_NOMEM; KPC_E_INVALID (bad argument).
 * No op may exit, abort, print or block without a bound.
 *
 * Threads: every op may be called from any thread of the process at once; a lease is
 * used by one thread at a time (the one that got it, and claim.c's keeper for renew).
 * Fork: a tier is never used in a child (kpc.h).
 *
 * Adding a tier: one file with its ops and an open function, one row in the table in
 * storage/tier.c (its name, open function, what it can do, and where its counters go
 * in kpc_stats), and the file in CMakeLists.txt (docs/design.md, "Where things live").
 * Core uses only this header: no tier is known by name, position or type above it.
 */
#ifndef KPC_STORAGE_TIER_H
#define KPC_STORAGE_TIER_H

#include "storage/record.h" /* kpc_key, kpc_record, KPC_RECORD_CODE / _LOG */

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kpc_tier kpc_tier;
typedef struct kpc_tier_lease kpc_tier_lease; /* the tier's own; opaque to the caller */
typedef struct kpc_root kpc_root;             /* base/root.h */

/* What a tier can do: declared in its row of the table (tier.c), not by the tier. */
enum kpc_tier_flags {
    KPC_TIER_WRITABLE = 1u,    /* write and remove_same work; back-filled from below */
    KPC_TIER_COORDINATES = 2u, /* begin / renew / finish work (a cluster tier) */
    KPC_TIER_HOST_DISK = 4u,   /* the host's own disk tree: what the host index's READY
                                * means is there (kpc_tier_host_disk) */
};

enum kpc_tier_verdict {
    KPC_TIER_HIT = 1, /* res->rec holds the CODE record */
    KPC_TIER_BUILD,   /* res->lease is held: renew it, then finish it exactly once */
    KPC_TIER_FAILED,  /* res->rec holds the LOG record of a shared compile error */
    KPC_TIER_BUSY,    /* try_begin only: another host's live builder holds the lease; nothing
                       * is held (ask again with begin, which waits for it) */
};

enum kpc_tier_outcome {
    KPC_TIER_PUBLISH = 1,    /* rec: the CODE record just built */
    KPC_TIER_PUBLISH_FAILED, /* rec: the LOG record of a real compile error */
    KPC_TIER_ABANDON,        /* rec NULL: no outcome; another host may take the key */
};

/* What begin answers. The caller owns rec (kpc_record_free) on HIT and FAILED. */
typedef struct kpc_tier_begin {
    enum kpc_tier_verdict verdict;
    kpc_record rec;
    kpc_tier_lease *lease; /* BUILD only */
    uint64_t renew_ns;     /* BUILD only: renew at least this often (0: no renewal needed) */
    bool waited;           /* begin slept on another host's build */
} kpc_tier_begin;

/* Per-tier counters (relaxed atomics): the walk counts hits, misses and back-fills; the
 * implementation counts the rest. `kpc stats` prints them with the tier's name. */
typedef struct kpc_tier_counters {
    _Atomic uint64_t hits;      /* read or begin found the record */
    _Atomic uint64_t misses;    /* read or begin found nothing */
    _Atomic uint64_t writes;    /* records written (fresh builds and back-fills) */
    _Atomic uint64_t backfills; /* of those, records copied up from a lower tier */
    _Atomic uint64_t refused;   /* records that failed their checks */
    _Atomic uint64_t errors;    /* calls that failed (I/O, network, timeout) */
    _Atomic uint64_t builds;    /* coordinating: leases granted (BUILD) */
    _Atomic uint64_t waits;     /* coordinating: begins that slept on another host */
} kpc_tier_counters;

/* A tier's counters as kpc_stats reports them: the seam's (above), or, for a tier that
 * counts for itself (its counters op), its own, which may also know takeovers. */
typedef struct kpc_tier_count {
    uint64_t hits, misses, builds, waits, takeovers, errors, refused;
} kpc_tier_count;

/* Where a tier's counts go in kpc_stats: offsetof a uint64_t field of kpc_stats for each,
 * 0 for none (offset 0 is mem_hits, never a tier's). In the tier's row of the table. */
typedef struct kpc_tier_stats_map {
    size_t hits, misses, builds, waits, takeovers, errors, refused;
} kpc_tier_stats_map;

typedef struct kpc_tier_ops {
    /* Read the record of (key, target, kind) into *out (payload malloc'd: code then names
     * for CODE, the log text for LOG), fully checked. NULL op: the tier is never read
     * directly (a coordinating tier that only answers begin). */
    kpc_status (*read)(kpc_tier *t, const kpc_key *key, const char *target, uint32_t kind,
                       kpc_record *out);
    /* Write a record whole and atomically (a reader sees all of it or none). The payload
     * is given in two parts that follow each other: first (rec->code_size bytes: the code,
     * or the log text) and second (rec->names_size bytes; may be NULL when 0); rec->payload
     * is ignored. NULL op for read-only tiers. */
    kpc_status (*write)(kpc_tier *t, const kpc_record *rec, const void *first, const void *second);
    /* Remove the CODE record of key only while it still holds exactly code[0..size) (the
     * bytes a runtime refused): KPC_OK removed, KPC_E_NOT_FOUND gone or replaced already,
     * KPC_E_IO it holds them but could not be removed. NULL op for read-only tiers. */
    kpc_status (*remove_same)(kpc_tier *t, const kpc_key *key, const char *target, const void *code,
                              size_t size);
    /* Coordinating tiers only (NULL otherwise); see the top of this file. */
    kpc_status (*begin)(kpc_tier *t, const kpc_key *key, const char *target, kpc_tier_begin *res);
    /* As begin, but never sleeps on another host's build: where a live builder elsewhere
     * holds the lease it answers KPC_TIER_BUSY at once. For a caller with other keys to go
     * on to (a batch), which asks again with begin later. NULL: the tier cannot; callers
     * use begin. */
    kpc_status (*try_begin)(kpc_tier *t, const kpc_key *key, const char *target, kpc_tier_begin *res);
    /* KPC_OK, or KPC_E_NOT_FOUND when the lease was lost (expired and taken over): the
     * caller still finishes it (a PUBLISH then writes the same bytes twice, harmlessly). */
    kpc_status (*renew)(kpc_tier *t, kpc_tier_lease *lease);
    /* Coordinating tiers (NULL otherwise): read the CODE record without coordination, for
     * a process that waits on its host's builder of the key for longer than the tier's
     * watch_ns (the builder may be stopped while another host published the record).
     * Statuses as read. */
    kpc_status (*peek)(kpc_tier *t, const kpc_key *key, const char *target, kpc_record *out);
    /* Exactly once per BUILD lease; frees it. */
    void (*finish)(kpc_tier *t, kpc_tier_lease *lease, enum kpc_tier_outcome how,
                   const kpc_record *rec, const void *first, const void *second);
    /* Write a copy of a record a lower tier holds (a back-fill), as write, but it may
     * skip durability (no fsync): a copy lost or torn in a crash is a checked miss, and
     * the lower tier still has it. NULL: write is used. */
    kpc_status (*copy)(kpc_tier *t, const kpc_record *rec, const void *first, const void *second);
    /* Free the tier (its lease-less state); NULL when nothing to free. */
    void (*close)(kpc_tier *t);
    /* A tier that keeps its own counters (a cluster tier also adds them to a cluster-wide
     * total) reports them here, and the seam then counts none for it; NULL: the seam's n. */
    void (*counters)(kpc_tier *t, kpc_tier_count *out);
} kpc_tier_ops;

struct kpc_tier {
    const kpc_tier_ops *ops;
    const char *name; /* "disk", "pack", "shared", "redis": logs and stats (from its row) */
    unsigned flags;   /* enum kpc_tier_flags (set from its row) */
    const kpc_tier_stats_map *stats; /* from its row; NULL: not in kpc_stats */
    uint64_t watch_ns; /* peek: how long a host waiter waits before it looks, and between looks */
    kpc_tier_counters n;
};
/* Count one event of a tier on the seam (the walk, claim.c): nothing for a tier that
 * counts for itself (its counters op). */
void kpc_tier_count_add(kpc_tier *t, _Atomic uint64_t *counter);

/* What a tier's open function gets. cfg is the caller's (may be NULL: environment and
 * defaults only); a tier that is not configured answers KPC_E_NOT_FOUND and is skipped. */
typedef struct kpc_tier_env {
    kpc_root *root;          /* the cache directory (NULL: no disk level) */
    const kpc_config *cfg;
    uint64_t disk_max_bytes;
} kpc_tier_env;
typedef kpc_status (*kpc_tier_open_fn)(const kpc_tier_env *env, kpc_tier **out);

/* ---- the list and its walk (tier.c) ------------------------------------------------- */
#define KPC_TIERS_MAX 8
typedef struct kpc_tiers {
    kpc_tier *t[KPC_TIERS_MAX];
    size_t n;
} kpc_tiers;

/* Open every tier of the table in order; one that fails is logged and left out. Each
 * gets its name, flags and stats map from its row. */
void kpc_tier_open_all(const kpc_tier_env *env, kpc_tiers *out);
void kpc_tier_close_all(kpc_tiers *ts);
/* Read (key, target, kind) from the tiers in order (skipping coordinating tiers unless
 * they have a read op). KPC_OK with *out, KPC_E_NOT_FOUND when no tier has it (a damaged
 * record counts as a miss). With from, *from is the tier that had it and nothing is
 * counted or copied yet: the caller checks the record (core/hit.h) and accepts it, or
 * refuses it, which neither counts it as a hit nor copies it into the tiers above. With
 * from NULL, the record is accepted at once. */
kpc_status kpc_tier_read(kpc_tiers *ts, const kpc_key *key, const char *target, uint32_t kind,
                         kpc_record *out, kpc_tier **from);
/* A record read from tier `from` (its payload whole) that the caller's check passed: a
 * hit of that tier, back-filled into every writable tier above it. */
void kpc_tier_accept(kpc_tiers *ts, kpc_tier *from, const kpc_record *rec);
/* Write to every writable tier above `upto` (upto NULL: every writable tier, the
 * coordinating one included); KPC_OK if at least one stored it. A fresh build under a
 * lease passes the coordinator (finish(PUBLISH) carries the record there); a back-fill
 * of a record found in tier X passes X. */
kpc_status kpc_tier_write(kpc_tiers *ts, const kpc_tier *upto, const kpc_record *rec,
                          const void *first, const void *second);
/* Copy rec (as read or begun from tier `from`: payload whole) into every writable tier
 * above `from`. The status is the host's disk's (KPC_OK where it is not above `from`):
 * a host slot's READY means the record is on this host's disk, whatever another tier
 * (a read-only shared directory, say) did with it; their failures are counted. */
kpc_status kpc_tier_backfill(kpc_tiers *ts, const kpc_tier *from, const kpc_record *rec);
/* remove_same on every writable tier; the status of the first (the disk) decides. */
kpc_status kpc_tier_remove_same(kpc_tiers *ts, const kpc_key *key, const char *target,
                                const void *code, size_t size);
/* The coordinating tier, or NULL. */
kpc_tier *kpc_tier_coordinator(kpc_tiers *ts);
/* The host's disk tree (KPC_TIER_HOST_DISK), or NULL. */
kpc_tier *kpc_tier_host_disk(kpc_tiers *ts);
/* Every tier's counts into the kpc_stats fields its row names. */
struct kpc_stats;
void kpc_tier_stats(kpc_tiers *ts, struct kpc_stats *out);

#ifdef KPC_TEST_HOOKS
/* Open one more tier after the table's (a test's fake pack or cluster tier) in every
 * kpc_tier_open_all from now on; NULL removes it. */
void kpc_tier_test_add(kpc_tier_open_fn open);
#endif

#endif /* KPC_STORAGE_TIER_H */
