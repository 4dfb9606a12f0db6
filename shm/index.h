/*
 * index.h - the host-wide index in POSIX shared memory: the one header of shm/, the
 * component that knows nothing of tiers, records or compilers (it uses only src/base;
 * scripts/check-includes.sh holds it to that). segment.c: the segment's life; lock.c: its
 * robust mutexes; index.c: the table; kpc_shm_reset.c: the kpc-shm-reset program.
 *
 * One segment per cache directory, user and layout. It says, for every key any process on the
 * host asked for lately, whether its code object is READY on disk, being BUILT (and by
 * which process), or FAILED to compile; it elects one builder per key and lets the
 * others sleep until the builder publishes. Layout and protocol: docs/design.md.
 */
#ifndef KPC_SHM_INDEX_H
#define KPC_SHM_INDEX_H

#include "base/log.h"
#include "base/util.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct kpc_index kpc_index;

/* What kpc_index_begin tells the caller to do. */
enum kpc_index_verdict {
    KPC_INDEX_READY = 1, /* the object is on disk: read it */
    KPC_INDEX_BUILD,     /* you are the builder: check the disk, else compile; then publish */
    KPC_INDEX_FAILED,    /* the build you waited for failed: its log is on disk */
    KPC_INDEX_SELF,      /* the object was built but could not be stored: build it yourself,
                          * without publishing */
    KPC_INDEX_BUSY,      /* KPC_INDEX_NOWAIT only: a live process is building it; ask again later */
};

enum kpc_index_flags {
    KPC_INDEX_STALE = 1,  /* READY is not enough (its file was missing or bad): claim it */
    KPC_INDEX_NOWAIT = 2, /* do not sleep on another's build: answer KPC_INDEX_BUSY */
    KPC_INDEX_SLICE = 4,  /* sleep at most one wait slice (200 ms), then answer KPC_INDEX_BUSY
                           * (a caller that also watches elsewhere between slices) */
    KPC_INDEX_AGAIN = 8,  /* this call goes on with a wait already counted in `waits` */
};

typedef struct kpc_index_counters {
    uint64_t lookups, hits, builds, build_failures, waits, takeovers, evictions, entries,
        capacity, attached;
    uint64_t wait_timeouts; /* requests that gave up on a live builder (KPC_BUILD_WAIT_MAX_MS) */
} kpc_index_counters;

/* Attach to (or create) the segment of cache_root. observer: do not register as an
 * attached process (the tools). KPC_E_SHM or KPC_E_CORRUPT (logged) when it cannot be
 * used; the caller goes on without it. */
kpc_status kpc_index_open(const char *cache_root, size_t entries, bool observer, kpc_index **out);
/* Attach only if it exists (KPC_E_NOT_FOUND otherwise); for the tools. */
kpc_status kpc_index_open_existing(const char *cache_root, kpc_index **out);
void kpc_index_close(kpc_index *ix);

/* Find or claim the slot of key; may sleep while another live process builds it, but not
 * past KPC_BUILD_WAIT_MAX_MS from its claim (then: KPC_INDEX_SELF, counted in
 * wait_timeouts). *waited is set if it slept. KPC_E_SHM if the index broke (go on without
 * it). */
kpc_status kpc_index_begin(kpc_index *ix, const kpc_key *key, unsigned flags,
                           enum kpc_index_verdict *verdict, bool *waited);
/* The builder's outcome: ok publishes READY, a compile failure FAILED; either wakes
 * every waiter. */
void kpc_index_publish(kpc_index *ix, const kpc_key *key, bool ok, uint64_t size);
/* Count a compile run on this host (the `builds` / `build_failures` counters). */
void kpc_index_note_compile(kpc_index *ix, bool ok);
/* The builder built the object but could not store it (a full or read-only disk): the
 * waiters, and whoever asks in the next 30 s, are told KPC_INDEX_SELF. */
void kpc_index_unstored(kpc_index *ix, const kpc_key *key);
/* The builder gives up without an outcome (the compiler could not run, say): the slot is
 * freed and a waiter claims it. */
void kpc_index_abandon(kpc_index *ix, const kpc_key *key);
/* Drop a key (its file was removed). */
void kpc_index_forget(kpc_index *ix, const kpc_key *key);
void kpc_index_counters_get(kpc_index *ix, kpc_index_counters *c);
/* The disk-usage estimate shared by every process of the host. */
void kpc_index_usage_words(kpc_index *ix, _Atomic uint64_t **bytes, _Atomic uint64_t **files,
                           _Atomic uint32_t **known);

/* The segment's name: the cache directory's (kpc_root_segment_name: user and real path)
 * and "-L" with 16 hex digits of this build's layout, so that a kpc of another layout
 * (an older or newer one on the same host) never opens it: each keeps its own.
 * KPC_INDEX_NAME_MAX bytes is always enough. */
#define KPC_INDEX_NAME_MAX 96
void kpc_index_segment_name(const char *cache_root, char *out, size_t cap);

/* Attached processes, for kpc-shm-reset: calls fn for each live one (dead ones are swept). */
typedef void (*kpc_index_proc_fn)(pid_t pid, void *arg);
kpc_status kpc_index_live_procs(kpc_index *ix, kpc_index_proc_fn fn, void *arg, size_t *live);
/* Remove the segment of cache_root (shm_unlink), and the temporary segments its dead
 * creators left. It takes none of the segment's locks and reads none of it: the way out
 * of a damaged one. */
kpc_status kpc_index_unlink(const char *cache_root);
/* Remove the temporary segments of cache_root's index that creators killed mid-creation
 * left (their pid and start time dead); fn, if not NULL, gets each name removed. Done at
 * every creation, and by kpc-shm-reset. Returns how many were removed. */
typedef void (*kpc_index_temp_fn)(const char *name, void *arg);
size_t kpc_index_sweep_temps(const char *cache_root, kpc_index_temp_fn fn, void *arg);
/* False once the index is off for this process (a lock past its deadline, a truncated or
 * overwritten segment, an unrecoverable mutex): then every operation is a no-op or
 * KPC_E_SHM, and the counters read 0. */
bool kpc_index_usable(kpc_index *ix);

#ifdef KPC_TEST_HOOKS
/* Test hooks (test builds only). hold_lock: the next insert of a new key stops holding the table mutex,
 * mid-insert (raise(SIGSTOP), then pause() for ever), so a test that sees the stop with
 * waitpid(WUNTRACED) can SIGKILL the holder there. builders: the pids of the BUILDING
 * slots (up to cap of them written); returns how many there are. wait_slice: below. check: a validation of
 * the whole table (every entry findable from its home, the count right). */
void kpc_index_test_hold_lock(kpc_index *ix);
size_t kpc_index_test_builders(kpc_index *ix, pid_t *pids, size_t cap);
/* Lengthen (or shorten) this handle's futex wait slice (200 ms): with a long one, only a
 * FUTEX_WAKE from the publisher ends a wait promptly. */
void kpc_index_test_wait_slice(kpc_index *ix, uint64_t ns);
bool kpc_index_check(kpc_index *ix);
#endif /* KPC_TEST_HOOKS */

#endif /* KPC_SHM_INDEX_H */
