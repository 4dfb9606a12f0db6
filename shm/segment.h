/*
 * segment.h - the host index's segment as the files of shm/ share it (private to shm/):
 * the layout in shared memory, the per-process handle, and the few functions one file
 * calls in another. segment.c makes, checks and maps the segment; lock.c takes its
 * robust mutexes; index.c is the hash table over its slots.
 */
#ifndef KPC_SHM_SEGMENT_H
#define KPC_SHM_SEGMENT_H

#include "shm/index.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define IX_MAGIC 0x315844495843504bull /* "KPCXIDX1" in memory (little-endian) */
#define IX_VERSION 2u /* 2: ixh_wait_timeouts */
#define IX_PROCS 256
#define WAIT_SLICE_NS (200 * 1000000L)
#define LOCK_TIMEOUT_MS 5000u         /* KPC_SHM_LOCK_TIMEOUT_MS: holders hold for microseconds */
#define BUILD_WAIT_MAX_MS 600000ull   /* KPC_BUILD_WAIT_MAX_MS: 10 minutes */

/* UNSTORED: the build succeeded but its object could not be written to disk (full, or
 * read-only), so no one can read it: whoever asks builds for itself, all at once, instead
 * of claiming the slot one after another for a store that fails each time. */
enum slot_state { SLOT_EMPTY = 0, SLOT_BUILDING, SLOT_READY, SLOT_FAILED, SLOT_UNSTORED };

typedef struct ix_slot {
    uint8_t ixs_key[16];
    uint32_t ixs_state;          /* enum slot_state */
    _Atomic uint32_t ixs_gen;    /* futex word of this position; bumped on every change */
    _Atomic uint32_t ixs_sleepers; /* processes futex-waiting on this position */
    int32_t ixs_pid;             /* BUILDING: the builder */
    uint64_t ixs_start;          /* BUILDING: the builder's start time */
    uint64_t ixs_size;           /* READY: code object size */
    uint64_t ixs_last_use;       /* CLOCK_MONOTONIC ns, for eviction; BUILDING: the claim */
    uint64_t ixs_done_ns;        /* READY/FAILED: CLOCK_MONOTONIC ns of the publication */
} ix_slot;
_Static_assert(sizeof(ix_slot) == 64, "a slot is one cache line");

typedef struct ix_proc {
    int32_t ixp_pid;
    _Atomic uint32_t ixp_off; /* 1: this process turned the index off: its BUILDING slots
                               * will never be published (written without a lock) */
    uint64_t ixp_start;
} ix_proc;

typedef struct ix_header {
    uint64_t ixh_magic;    /* written last at creation */
    uint64_t ixh_format;   /* IX_VERSION mixed with layout facts: see layout_format() */
    uint64_t ixh_size;     /* bytes of the segment */
    uint32_t ixh_capacity; /* live entries at most */
    uint32_t ixh_nslots;   /* power of two, >= 2 * capacity */
    uint32_t ixh_owner;    /* uid */
    uint32_t ixh_pad;
    uint64_t ixh_created_ns;
    pthread_mutex_t ixh_lock;       /* guards slots, ixh_entries, ixh_hand */
    pthread_mutex_t ixh_procs_lock; /* guards ixh_procs */
    _Atomic uint64_t ixh_lookups, ixh_hits, ixh_builds, ixh_build_failures, ixh_waits,
        ixh_takeovers, ixh_evictions;
    uint64_t ixh_entries;
    uint32_t ixh_hand;
    _Atomic uint32_t ixh_disk_known;
    _Atomic uint64_t ixh_disk_bytes, ixh_disk_files;
    ix_proc ixh_procs[IX_PROCS];
    _Atomic uint64_t ixh_wait_timeouts; /* waits given up on a live builder (format 2) */
    _Alignas(64) ix_slot ixh_slots[]; /* each slot on a cache line of its own */
} ix_header;

struct kpc_index {
    ix_header *h;
    int fd;         /* the segment, kept open to see it truncated (fstat) */
    size_t size;    /* these three were validated at attach; the segment's own copies */
    uint32_t mask;  /* are never used as sizes (a stray write may change them) */
    uint32_t capacity;
    pid_t pid;
    uint64_t start;
    bool observer;
    atomic_bool broken;   /* the index is off for this process (read by every thread) */
    atomic_bool unmapped; /* the mapping was replaced by private pages (truncated) */
    atomic_int row;       /* this handle's row in ixh_procs, -1: none */
    bool hold_lock;     /* test hook; set before any thread uses the index */
    uint64_t wait_slice_ns; /* WAIT_SLICE_NS; a test may lengthen it */
    unsigned lock_timeout_ms; /* KPC_SHM_LOCK_TIMEOUT_MS */
    uint64_t wait_max_ns;     /* KPC_BUILD_WAIT_MAX_MS */
};

/* Turn the index off for this process (segment.c); the first thread to do so logs why. */
void kpc_shm_off(kpc_index *ix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Not off, and the segment not truncated under us (segment.c). */
bool kpc_shm_usable(kpc_index *ix);
/* A process-shared robust mutex (lock.c). */
kpc_status kpc_shm_init_mutex(pthread_mutex_t *m);
/* Lock one of the segment's mutexes with a deadline, repairing after a dead holder
 * (lock.c); KPC_E_SHM: the index is off for this process. */
kpc_status kpc_shm_lock(kpc_index *ix, pthread_mutex_t *m);
void kpc_shm_unlock(pthread_mutex_t *m);
/* Empty every slot (index.c), waking whoever sleeps on one: after a holder died
 * mid-update. Table lock held. */
void kpc_shm_wipe_table(kpc_index *ix);

#endif /* KPC_SHM_SEGMENT_H */
