/*
 * index.c - the host index: an open-addressed hash table in POSIX shared memory.
 *
 * One segment per cache directory and user ("/kpc-<uid>-<hash of the real path>", mode
 * 0600). It is built whole under a temporary name, posix_fallocate'd (a full /dev/shm is
 * an error here, never a SIGBUS later) and linked into place, so no process ever sees a
 * half-initialized segment. Every attach validates magic, format (version mixed with the
 * layout's sizes), size against fstat, capacity and owner; a segment that fails is never
 * trusted: the caller goes on with the disk alone until kpc-shm-reset replaces it.
 *
 * Locking: ixh_lock (robust, process-shared) guards the slots, ixh_entries and ixh_hand;
 * ixh_procs_lock guards the attached-process table. Both are taken only for a table
 * operation, never across a compile or I/O, and always with a deadline (a few seconds,
 * KPC_SHM_LOCK_TIMEOUT_MS): a lock word overwritten by a stray write, or a holder that is
 * stopped, must not hang every process; past the deadline the index is off for this
 * process (disk only). A holder that dies leaves the next locker EOWNERDEAD: the table
 * may be half-updated, so it is wiped (the files stay on disk and are found again) and
 * the mutex marked consistent. The counters are atomics, no lock.
 *
 * Nothing read from the segment after attach is trusted as a size: every loop over the
 * table is bounded by the slot count validated at attach (kept in the handle), and the
 * segment's length is checked (fstat) before every operation, so a segment truncated
 * under us turns the index off instead of raising SIGBUS.
 *
 * Waiting: each slot position has a generation word; any change of what the position
 * holds bumps it and, if anyone sleeps there, FUTEX_WAKEs them. A waiter reads the
 * generation under the lock, unlocks, and futex-waits on it with a 200 ms timeout; the
 * timeout exists only to re-check that the builder is alive (pid and start time), so a
 * dead builder is taken over within about 200 ms while publication wakes waiters at once.
 * A live builder is waited for at most KPC_BUILD_WAIT_MAX_MS from its claim (10 minutes by
 * default): a stopped or hung builder then sends its waiters to build for themselves.
 *
 * Over 500 lines for one responsibility: the shared-memory table with its locking and
 * repair (attach checks, deadlines, EOWNERDEAD wipes, futex waits) is read together.
 */
#define _GNU_SOURCE
#include "shm/index.h"
#include "base/fault.h"
#include "base/root.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <linux/futex.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define IX_MAGIC 0x315844495843504bull /* "KPCXIDX1" in memory (little-endian) */
#define IX_VERSION 2u /* 2: ixh_wait_timeouts */
#define IX_PROCS 256
#define WAIT_SLICE_NS (200 * 1000000L)
#define EVICT_SAMPLE 64
#define LOCK_TIMEOUT_MS 5000u         /* KPC_SHM_LOCK_TIMEOUT_MS: holders hold for microseconds */
#define BUILD_WAIT_MAX_MS 600000ull   /* KPC_BUILD_WAIT_MAX_MS: 10 minutes */
/* A compile failure is the answer for every request that arrives within this long of it
 * (the key fixes the source, options and compiler, so the compile would fail the same
 * way); a request after that tries again, which bounds how long a transient failure of
 * the compiler (out of memory, say) is served. An UNSTORED answer lasts as long: a full
 * or read-only disk is not mended in a moment either. */
#define ANSWER_TTL_NS (30ull * 1000000000ull)

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

/* ---- layout --------------------------------------------------------------------------- */
static uint64_t layout_format(void)
{
    /* a build with another mutex size, slot layout or pid size must never attach */
    uint64_t facts[] = {IX_VERSION, sizeof(pthread_mutex_t), sizeof(ix_slot), sizeof(ix_header),
                        sizeof(pid_t), offsetof(ix_header, ixh_slots), IX_PROCS};
    return XXH3_64bits(facts, sizeof facts);
}

static uint32_t slots_for(size_t capacity)
{
    uint32_t n = 16;
    while (n < 2 * capacity)
        n <<= 1;
    return n;
}

static size_t segment_size(uint32_t nslots)
{
    return sizeof(ix_header) + (size_t)nslots * sizeof(ix_slot);
}

/* ---- futex ------------------------------------------------------------------------------ */
static void futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* A position changed: bump its generation and wake whoever sleeps on it. */
static void slot_changed(ix_slot *s)
{
    atomic_fetch_add(&s->ixs_gen, 1);
    if (atomic_load(&s->ixs_sleepers) > 0)
        futex_wake(&s->ixs_gen);
}

/* ---- turning the index off ------------------------------------------------------------ */
/* Turn the index off for this process; the first thread to do so logs why (once). */
static void ix_off(kpc_index *ix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ix_off(kpc_index *ix, const char *fmt, ...)
{
    if (atomic_exchange(&ix->broken, true))
        return;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    KPC_LOG(KPC_LOG_ERROR, "%s: host index off for this process (disk only); kpc-shm-reset "
            "--force removes it", why);
    /* the slots this process claimed can no longer be published (that takes the lock):
     * say so in its row, so that their waiters take them over now instead of waiting for a
     * live builder up to wait_max (found by the system-call fault sweep, test_faults) */
    int row = atomic_load(&ix->row);
    if (row >= 0 && !atomic_load(&ix->unmapped))
        atomic_store(&ix->h->ixh_procs[row].ixp_off, 1);
}

/* The builder of a slot turned its index off (ix_off): it will never publish. Lock held. */
static bool builder_off(const kpc_index *ix, int32_t pid, uint64_t start)
{
    for (int i = 0; i < IX_PROCS; i++) {
        const ix_proc *p = &ix->h->ixh_procs[i];
        if (p->ixp_pid == pid && p->ixp_start == start && atomic_load(&p->ixp_off))
            return true;
    }
    return false;
}

/* False (and the index off) once the segment is shorter than it was at attach: a page
 * past its end would raise SIGBUS. The mapping is then replaced by private zero pages,
 * so that what still points into it (the disk-usage words the store holds, a thread in
 * the middle of an operation) touches memory, not a hole. A truncation between this
 * check and an access is not covered: that window is one table operation. */
static bool segment_intact(kpc_index *ix)
{
    struct stat st;
    if (fstat(ix->fd, &st) == 0 && (uint64_t)st.st_size >= ix->size)
        return true;
    if (!atomic_exchange(&ix->unmapped, true)) {
        ix_off(ix, "the host index segment was truncated (%lld of %zu bytes)",
               (long long)st.st_size, ix->size);
        if (mmap(ix->h, ix->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0) == MAP_FAILED)
            KPC_LOG(KPC_LOG_ERROR, "mmap(MAP_FIXED) over the truncated host index: %s",
                    strerror(errno));
    }
    return false;
}

static bool ix_usable(kpc_index *ix)
{
    return !atomic_load(&ix->broken) && segment_intact(ix);
}

/* A positive count of milliseconds from the environment, else def (a bad value is logged). */
static uint64_t env_ms(const char *var, uint64_t def)
{
    const char *v = getenv(var);
    if (v == NULL || *v == '\0')
        return def;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || n == 0 || v[0] == '-' || n > UINT32_MAX) {
        KPC_LOG(KPC_LOG_WARN, "%s=\"%s\" is not a count of milliseconds (1 to %u): using %llu",
                var, v, UINT32_MAX, (unsigned long long)def);
        return def;
    }
    return n;
}

/* ---- locking ----------------------------------------------------------------------------- */
static void wipe_table(kpc_index *ix)
{
    ix_header *h = ix->h;
    for (uint32_t i = 0; i <= ix->mask; i++) {
        ix_slot *s = &h->ixh_slots[i];
        if (s->ixs_state != SLOT_EMPTY || memcmp(s->ixs_key, (uint8_t[16]){0}, 16) != 0) {
            memset(s->ixs_key, 0, 16);
            s->ixs_state = SLOT_EMPTY;
            s->ixs_pid = 0;
            slot_changed(s);
        }
    }
    h->ixh_entries = 0;
    h->ixh_hand = 0;
}

/* The kind word of a mutex init_mutex makes (glibc): a lock whose kind was overwritten
 * could take another path of glibc (priority inheritance) that asserts on a bad owner. */
static int expected_kind = -1;
static kpc_status init_mutex(pthread_mutex_t *m);
static void find_expected_kind(void)
{
#ifdef __GLIBC__
    pthread_mutex_t m;
    if (init_mutex(&m) == KPC_OK) {
        expected_kind = m.__data.__kind;
        pthread_mutex_destroy(&m);
    }
#endif
}

static bool kind_intact(pthread_mutex_t *m)
{
#ifdef __GLIBC__
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, find_expected_kind);
    return expected_kind < 0 || m->__data.__kind == expected_kind;
#else
    (void)m;
    return true;
#endif
}

/* The one place a robust mutex is locked; the one place its failures are handled. The
 * wait is bounded (lock_timeout_ms): a lock word overwritten with a thread that will never
 * unlock it, or a holder that is stopped, turns the index off instead of hanging. */
static kpc_status ix_lock(kpc_index *ix, pthread_mutex_t *m)
{
    if (!ix_usable(ix))
        return KPC_E_SHM;
    const char *which = m == &ix->h->ixh_lock ? "table lock" : "attach lock";
    if (!kind_intact(m)) {
        ix_off(ix, "the host index %s was overwritten (its kind word)", which);
        return KPC_E_SHM;
    }
    struct timespec deadline; /* pthread_mutex_timedlock takes CLOCK_REALTIME */
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += ix->lock_timeout_ms / 1000;
    deadline.tv_nsec += (long)(ix->lock_timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    int r = kpc__sys_fault(KPC_SYS_MUTEX) ? errno : pthread_mutex_timedlock(m, &deadline);
    if (r == ETIMEDOUT) {
        ix_off(ix, "the host index %s did not answer within %u ms (its word damaged, or its "
               "holder stopped)", which, ix->lock_timeout_ms);
        return KPC_E_SHM;
    }
    if (r == EOWNERDEAD) {
        if (m == &ix->h->ixh_lock) {
            KPC_LOG(KPC_LOG_WARN, "a process died holding the host index lock: wiping the table "
                    "(the code objects stay on disk)");
            wipe_table(ix);
        } else {
            KPC_LOG(KPC_LOG_WARN, "a process died holding the attach lock: recovered");
        }
        pthread_mutex_consistent(m);
        r = 0;
    }
    if (r != 0) {
        ix_off(ix, "pthread_mutex_timedlock on the host index %s: %s", which, strerror(r));
        return KPC_E_SHM;
    }
    return KPC_OK;
}

static void ix_unlock(pthread_mutex_t *m)
{
    pthread_mutex_unlock(m);
}

/* ---- table ------------------------------------------------------------------------------- */
static uint32_t home_of(const kpc_index *ix, const uint8_t key[16])
{
    uint64_t v;
    memcpy(&v, key + 8, sizeof v);
    return (uint32_t)(v & ix->mask);
}

/* Position of key, or -1; *free_pos gets the first empty position of its run. */
static int64_t find(kpc_index *ix, const uint8_t key[16], int64_t *free_pos)
{
    ix_slot *slots = ix->h->ixh_slots;
    uint32_t i = home_of(ix, key);
    for (uint32_t n = 0; n <= ix->mask; n++, i = (i + 1) & ix->mask) {
        if (slots[i].ixs_state == SLOT_EMPTY) {
            if (free_pos)
                *free_pos = i;
            return -1;
        }
        if (memcmp(slots[i].ixs_key, key, 16) == 0)
            return i;
    }
    if (free_pos)
        *free_pos = -1;
    return -1;
}

/* Delete position i by shifting later members of its run back (no tombstones). */
static void delete_at(kpc_index *ix, uint32_t i)
{
    ix_slot *slots = ix->h->ixh_slots;
    uint32_t j = i, n;
    /* a sound table always has an empty slot (capacity <= nslots / 2); a damaged one may
     * have none, so the walk stops after every other position, not only at an empty one */
    for (n = 0; n < ix->mask; n++) {
        j = (j + 1) & ix->mask;
        if (slots[j].ixs_state == SLOT_EMPTY)
            break;
        uint32_t home = home_of(ix, slots[j].ixs_key);
        /* may the entry at j move to i? only if its home is not cyclically in (i, j] */
        bool in_between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (in_between)
            continue;
        ix_slot *dst = &slots[i], *src = &slots[j];
        memcpy(dst->ixs_key, src->ixs_key, 16);
        dst->ixs_state = src->ixs_state;
        dst->ixs_pid = src->ixs_pid;
        dst->ixs_start = src->ixs_start;
        dst->ixs_size = src->ixs_size;
        dst->ixs_last_use = src->ixs_last_use;
        dst->ixs_done_ns = src->ixs_done_ns;
        slot_changed(dst);
        i = j;
    }
    if (n == ix->mask) {
        KPC_LOG(KPC_LOG_WARN, "the host index table has no empty slot (damaged): wiping it (the "
                "code objects stay on disk)");
        wipe_table(ix);
        return;
    }
    memset(slots[i].ixs_key, 0, 16);
    slots[i].ixs_state = SLOT_EMPTY;
    slots[i].ixs_pid = 0;
    slot_changed(&slots[i]);
    if (ix->h->ixh_entries > 0) /* a damaged count must not wrap around */
        ix->h->ixh_entries--;
}

/* Evict the least recently used finished entry among a sample (Redis-style approximate
 * LRU: bounded work whatever the table size). A BUILDING slot whose builder is dead (pid
 * and start time) is reclaimed first: no one will ever publish it, and a table full of
 * them would send every new key past the index. At most EVICT_SAMPLE liveness checks (a
 * /proc read each). false if every sampled entry is building, its builder alive. */
static bool evict_one(kpc_index *ix)
{
    ix_header *h = ix->h;
    int64_t victim = -1;
    uint64_t oldest = UINT64_MAX;
    uint32_t seen = 0, checked = 0;
    uint32_t i = h->ixh_hand & ix->mask;
    for (uint32_t n = 0; n <= ix->mask && seen < EVICT_SAMPLE; n++, i = (i + 1) & ix->mask) {
        ix_slot *s = &h->ixh_slots[i];
        if (s->ixs_state == SLOT_EMPTY)
            continue;
        if (s->ixs_state == SLOT_BUILDING) {
            if (checked++ >= EVICT_SAMPLE || kpc__proc_alive(s->ixs_pid, s->ixs_start))
                continue;
            KPC_LOG(KPC_LOG_INFO, "reclaiming the slot of dead builder process %d", (int)s->ixs_pid);
            victim = i;
            i = (i + 1) & ix->mask;
            break;
        }
        seen++;
        if (s->ixs_last_use < oldest)
            oldest = s->ixs_last_use, victim = i;
    }
    h->ixh_hand = i;
    if (victim < 0)
        return false;
    delete_at(ix, (uint32_t)victim);
    atomic_fetch_add_explicit(&h->ixh_evictions, 1, memory_order_relaxed);
    return true;
}

static void claim(kpc_index *ix, ix_slot *s)
{
    s->ixs_state = SLOT_BUILDING;
    s->ixs_pid = (int32_t)ix->pid;
    s->ixs_start = ix->start;
    s->ixs_last_use = kpc__now_ns();
    slot_changed(s);
}

kpc_status kpc_index_begin(kpc_index *ix, const kpc_key *key, unsigned flags,
                           enum kpc_index_verdict *verdict, bool *waited)
{
    ix_header *h = ix->h;
    bool was_waiting = false;
    *waited = false;
    for (bool first = true;; first = false) {
        if (ix_lock(ix, &h->ixh_lock) != KPC_OK) /* it checks the segment's length too */
            return KPC_E_SHM;
        if (first)
            atomic_fetch_add_explicit(&h->ixh_lookups, 1, memory_order_relaxed);
        int64_t free_pos;
        int64_t pos = find(ix, key->bytes, &free_pos);
        if (pos < 0) {
            if (h->ixh_entries >= ix->capacity && evict_one(ix))
                pos = find(ix, key->bytes, &free_pos); /* the shift moved the free position */
            if (h->ixh_entries >= ix->capacity || free_pos < 0) {
                ix_unlock(&h->ixh_lock);
                KPC_LOG(KPC_LOG_WARN, "the host index is full of builds in progress: building "
                        "without it");
                return KPC_E_SHM;
            }
            ix_slot *s = &h->ixh_slots[free_pos];
            memcpy(s->ixs_key, key->bytes, 16);
#ifdef KPC_TEST_HOOKS
            if (ix->hold_lock) { /* test hook: die here, mid-insert, holding the lock */
                raise(SIGSTOP); /* the parent's waitpid(WUNTRACED) learns we are here */
                for (;;)
                    pause();
            }
#endif
            claim(ix, s);
            h->ixh_entries++;
            ix_unlock(&h->ixh_lock);
            *verdict = KPC_INDEX_BUILD;
            return KPC_OK;
        }
        ix_slot *s = &h->ixh_slots[pos];
        switch (s->ixs_state) {
        case SLOT_READY:
            /* STALE asks to replace the object the caller found missing or bad; a build
             * this call waited for is a new object, so it is taken as it is */
            if ((flags & KPC_INDEX_STALE) && !was_waiting) {
                claim(ix, s);
                *verdict = KPC_INDEX_BUILD;
            } else {
                s->ixs_last_use = kpc__now_ns();
                atomic_fetch_add_explicit(&h->ixh_hits, 1, memory_order_relaxed);
                *verdict = KPC_INDEX_READY;
            }
            ix_unlock(&h->ixh_lock);
            return KPC_OK;
        case SLOT_FAILED:
            /* the failure is the answer for whoever waited for it or comes soon after; an
             * old one (or one whose log is gone: STALE) is tried again */
            if (was_waiting ||
                (!(flags & KPC_INDEX_STALE) && kpc__now_ns() - s->ixs_done_ns < ANSWER_TTL_NS)) {
                s->ixs_last_use = kpc__now_ns();
                *verdict = KPC_INDEX_FAILED;
            } else {
                claim(ix, s);
                *verdict = KPC_INDEX_BUILD;
            }
            ix_unlock(&h->ixh_lock);
            return KPC_OK;
        case SLOT_UNSTORED:
            if (was_waiting || kpc__now_ns() - s->ixs_done_ns < ANSWER_TTL_NS) {
                s->ixs_last_use = kpc__now_ns();
                *verdict = KPC_INDEX_SELF;
            } else { /* the disk may take objects again: one build to find out */
                claim(ix, s);
                *verdict = KPC_INDEX_BUILD;
            }
            ix_unlock(&h->ixh_lock);
            return KPC_OK;
        default: /* SLOT_BUILDING */
            if (!kpc__proc_alive(s->ixs_pid, s->ixs_start) || builder_off(ix, s->ixs_pid, s->ixs_start)) {
                KPC_LOG(KPC_LOG_WARN, "builder process %d died (or turned its host index off): taking "
                        "its build over", (int)s->ixs_pid);
                claim(ix, s);
                atomic_fetch_add_explicit(&h->ixh_takeovers, 1, memory_order_relaxed);
                ix_unlock(&h->ixh_lock);
                *verdict = KPC_INDEX_BUILD;
                return KPC_OK;
            }
            /* a live builder at it for longer than wait_max (stopped, or hung) is not
             * waited for: build without it, and without publishing (SELF) */
            uint64_t busy = kpc__now_ns() - s->ixs_last_use;
            if (busy >= ix->wait_max_ns) {
                int builder = (int)s->ixs_pid;
                ix_unlock(&h->ixh_lock);
                atomic_fetch_add_explicit(&h->ixh_wait_timeouts, 1, memory_order_relaxed);
                KPC_LOG(KPC_LOG_WARN, "builder process %d has been building this key for %.1f s "
                        "(KPC_BUILD_WAIT_MAX_MS is %llu): building it here without waiting",
                        builder, (double)busy / 1e9,
                        (unsigned long long)(ix->wait_max_ns / 1000000u));
                *verdict = KPC_INDEX_SELF;
                return KPC_OK;
            }
            if (flags & KPC_INDEX_NOWAIT) { /* a batch claims the others first */
                ix_unlock(&h->ixh_lock);
                *verdict = KPC_INDEX_BUSY;
                return KPC_OK;
            }
            uint64_t slice = ix->wait_slice_ns;
            if (slice > ix->wait_max_ns - busy)
                slice = ix->wait_max_ns - busy;
            uint32_t gen = atomic_load(&s->ixs_gen);
            atomic_fetch_add(&s->ixs_sleepers, 1);
            ix_unlock(&h->ixh_lock);
            if (!was_waiting)
                atomic_fetch_add_explicit(&h->ixh_waits, 1, memory_order_relaxed);
            was_waiting = *waited = true;
            futex_wait(&s->ixs_gen, gen, slice);
            atomic_fetch_sub(&s->ixs_sleepers, 1);
        }
    }
}

/* The slot this process is building for key, or NULL. Lock held. */
static ix_slot *own_slot(kpc_index *ix, const kpc_key *key, int64_t *pos)
{
    *pos = find(ix, key->bytes, NULL);
    if (*pos < 0)
        return NULL;
    ix_slot *s = &ix->h->ixh_slots[*pos];
    return s->ixs_state == SLOT_BUILDING && s->ixs_pid == (int32_t)ix->pid && s->ixs_start == ix->start
               ? s
               : NULL;
}

/* End this process's build of key in state `state`, waking every waiter. */
static void finish(kpc_index *ix, const kpc_key *key, enum slot_state state, uint64_t size)
{
    if (ix_lock(ix, &ix->h->ixh_lock) != KPC_OK)
        return;
    int64_t pos;
    ix_slot *s = own_slot(ix, key, &pos);
    if (s != NULL) { /* NULL: the table was wiped meanwhile; the file speaks for itself */
        s->ixs_state = state;
        s->ixs_size = size;
        s->ixs_pid = 0;
        s->ixs_last_use = s->ixs_done_ns = kpc__now_ns();
        slot_changed(s);
    }
    ix_unlock(&ix->h->ixh_lock);
}

void kpc_index_publish(kpc_index *ix, const kpc_key *key, bool ok, uint64_t size)
{
    finish(ix, key, ok ? SLOT_READY : SLOT_FAILED, size);
}

void kpc_index_unstored(kpc_index *ix, const kpc_key *key)
{
    finish(ix, key, SLOT_UNSTORED, 0);
}

void kpc_index_note_compile(kpc_index *ix, bool ok)
{
    if (!ix_usable(ix))
        return;
    atomic_fetch_add_explicit(ok ? &ix->h->ixh_builds : &ix->h->ixh_build_failures, 1,
                              memory_order_relaxed);
}

void kpc_index_abandon(kpc_index *ix, const kpc_key *key)
{
    if (ix_lock(ix, &ix->h->ixh_lock) != KPC_OK)
        return;
    int64_t pos;
    if (own_slot(ix, key, &pos) != NULL)
        delete_at(ix, (uint32_t)pos);
    ix_unlock(&ix->h->ixh_lock);
}

void kpc_index_forget(kpc_index *ix, const kpc_key *key)
{
    if (ix_lock(ix, &ix->h->ixh_lock) != KPC_OK)
        return;
    int64_t pos = find(ix, key->bytes, NULL);
    if (pos >= 0 && ix->h->ixh_slots[pos].ixs_state != SLOT_BUILDING)
        delete_at(ix, (uint32_t)pos);
    ix_unlock(&ix->h->ixh_lock);
}

void kpc_index_counters_get(kpc_index *ix, kpc_index_counters *c)
{
    ix_header *h = ix->h;
    memset(c, 0, sizeof *c);
    if (!ix_usable(ix))
        return;
    c->lookups = atomic_load(&h->ixh_lookups);
    c->hits = atomic_load(&h->ixh_hits);
    c->builds = atomic_load(&h->ixh_builds);
    c->build_failures = atomic_load(&h->ixh_build_failures);
    c->waits = atomic_load(&h->ixh_waits);
    c->takeovers = atomic_load(&h->ixh_takeovers);
    c->evictions = atomic_load(&h->ixh_evictions);
    c->wait_timeouts = atomic_load(&h->ixh_wait_timeouts);
    c->capacity = ix->capacity;
    if (ix_lock(ix, &h->ixh_lock) == KPC_OK) {
        c->entries = h->ixh_entries;
        ix_unlock(&h->ixh_lock);
    }
    size_t live = 0;
    kpc_index_live_procs(ix, NULL, NULL, &live);
    c->attached = live;
}

void kpc_index_usage_words(kpc_index *ix, _Atomic uint64_t **bytes, _Atomic uint64_t **files,
                           _Atomic uint32_t **known)
{
    *bytes = &ix->h->ixh_disk_bytes;
    *files = &ix->h->ixh_disk_files;
    *known = &ix->h->ixh_disk_known;
}

/* ---- attached processes ------------------------------------------------------------------ */
static void sweep_procs(ix_header *h)
{
    for (int i = 0; i < IX_PROCS; i++)
        if (h->ixh_procs[i].ixp_pid != 0 &&
            !kpc__proc_alive(h->ixh_procs[i].ixp_pid, h->ixh_procs[i].ixp_start))
            h->ixh_procs[i].ixp_pid = 0;
}

static void register_proc(kpc_index *ix, bool add)
{
    ix_header *h = ix->h;
    if (ix_lock(ix, &h->ixh_procs_lock) != KPC_OK)
        return;
    sweep_procs(h);
    int i;
    for (i = 0; i < IX_PROCS; i++) {
        ix_proc *p = &h->ixh_procs[i];
        if (add && p->ixp_pid == 0) {
            p->ixp_pid = (int32_t)ix->pid;
            p->ixp_start = ix->start;
            atomic_store(&p->ixp_off, 0);
            atomic_store(&ix->row, i);
            break;
        }
        if (!add && i == atomic_load(&ix->row) && p->ixp_pid == (int32_t)ix->pid && p->ixp_start == ix->start) {
            p->ixp_pid = 0; /* its own row: a process with two caches open has two */
            atomic_store(&ix->row, -1);
            break;
        }
    }
    if (add && i == IX_PROCS)
        KPC_LOG(KPC_LOG_INFO, "the attached-process table is full: this process is not listed");
    ix_unlock(&h->ixh_procs_lock);
}

kpc_status kpc_index_live_procs(kpc_index *ix, kpc_index_proc_fn fn, void *arg, size_t *live)
{
    ix_header *h = ix->h;
    *live = 0;
    if (ix_lock(ix, &h->ixh_procs_lock) != KPC_OK)
        return KPC_E_SHM;
    sweep_procs(h);
    pid_t pids[IX_PROCS];
    for (int i = 0; i < IX_PROCS; i++)
        if (h->ixh_procs[i].ixp_pid != 0)
            pids[(*live)++] = h->ixh_procs[i].ixp_pid;
    ix_unlock(&h->ixh_procs_lock);
    for (size_t i = 0; fn && i < *live; i++)
        fn(pids[i], arg);
    return KPC_OK;
}

/* ---- create, attach, validate -------------------------------------------------------------- */
static kpc_status init_mutex(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    int r = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (r == 0)
        r = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (r == 0)
        r = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return r == 0 ? KPC_OK : KPC_E_SHM;
}

/* Temporary segments are named <name>.tmp-<pid>-<start time>-<hex ns>: a creator killed
 * before its link leaves one (0 bytes long if it died before posix_fallocate), which is
 * stale once that process (pid and start time) is dead. */
static size_t sweep_temps(const char *name, kpc_index_temp_fn fn, void *arg)
{
    char prefix[128];
    int plen = snprintf(prefix, sizeof prefix, "%s.tmp-", name + 1); /* no leading '/' */
    DIR *d = opendir("/dev/shm");
    if (d == NULL)
        return 0;
    size_t removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
            continue;
        int pid = 0, end = 0;
        unsigned long long start = 0, ns;
        const char *tail = e->d_name + plen;
        bool full = sscanf(tail, "%d-%llu-%llx%n", &pid, &start, &ns, &end) == 3 &&
                    tail[end] == '\0';
        /* another shape (an older kpc's <pid>-<ns>): its pid alone must be gone */
        if (!full && sscanf(tail, "%d-", &pid) != 1)
            continue;
        bool alive = full ? kpc__proc_alive(pid, start) : kpc__proc_start_time(pid) != 0;
        if (alive)
            continue;
        char shm[300];
        snprintf(shm, sizeof shm, "/%s", e->d_name);
        if (shm_unlink(shm) != 0) {
            if (errno != ENOENT)
                KPC_LOG(KPC_LOG_WARN, "shm_unlink(%s): %s", shm, strerror(errno));
            continue;
        }
        KPC_LOG(KPC_LOG_INFO, "removed %s, left by a process that died creating the host index", shm);
        removed++;
        if (fn)
            fn(shm, arg);
    }
    closedir(d);
    return removed;
}

size_t kpc_index_sweep_temps(const char *cache_root, kpc_index_temp_fn fn, void *arg)
{
    char name[96];
    kpc_root_segment_name(cache_root, name, sizeof name);
    return sweep_temps(name, fn, arg);
}

/* Build a fresh segment under a temporary name and link it into place. KPC_E_NOT_FOUND
 * never; KPC_OK with fd/map, or an error, or *lost when another process won the race. */
static kpc_status create_segment(const char *name, size_t capacity, bool *lost)
{
    char tmp[160], tmp_path[192], final_path[160];
    *lost = false;
    sweep_temps(name, NULL, NULL);
    snprintf(tmp, sizeof tmp, "%s.tmp-%d-%llu-%llx", name, (int)getpid(),
             (unsigned long long)kpc__proc_start_time(getpid()), (unsigned long long)kpc__now_ns());
    int fd = kpc__sys_fault(KPC_SYS_OPEN) ? -1 : shm_open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        KPC_LOG(KPC_LOG_ERROR, "shm_open(%s): %s", tmp, strerror(errno));
        return KPC_E_SHM;
    }
    uint32_t nslots = slots_for(capacity);
    size_t size = segment_size(nslots);
    int r = kpc__sys_fault(KPC_SYS_FALLOCATE) ? errno : posix_fallocate(fd, 0, (off_t)size);
    if (r != 0) {
        KPC_LOG(KPC_LOG_ERROR, "posix_fallocate(%s, %zu bytes): %s", tmp, size, strerror(r));
        close(fd);
        shm_unlink(tmp);
        return KPC_E_SHM;
    }
    ix_header *h = kpc__sys_fault(KPC_SYS_MMAP) ? MAP_FAILED : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (h == MAP_FAILED) {
        KPC_LOG(KPC_LOG_ERROR, "mmap(%s): %s", tmp, strerror(errno));
        shm_unlink(tmp);
        return KPC_E_SHM;
    }
    h->ixh_format = layout_format();
    h->ixh_size = size;
    h->ixh_capacity = (uint32_t)capacity;
    h->ixh_nslots = nslots;
    h->ixh_owner = (uint32_t)geteuid();
    h->ixh_created_ns = kpc__wall_ns();
    kpc_status s = init_mutex(&h->ixh_lock);
    if (s == KPC_OK)
        s = init_mutex(&h->ixh_procs_lock);
    atomic_thread_fence(memory_order_release);
    h->ixh_magic = IX_MAGIC;
    munmap(h, size);
    snprintf(tmp_path, sizeof tmp_path, "/dev/shm%s", tmp);
    snprintf(final_path, sizeof final_path, "/dev/shm%s", name);
    if (s == KPC_OK && link(tmp_path, final_path) != 0) {
        if (errno == EEXIST)
            *lost = true;
        else {
            KPC_LOG(KPC_LOG_ERROR, "link(%s, %s): %s", tmp_path, final_path, strerror(errno));
            s = KPC_E_SHM;
        }
    }
    shm_unlink(tmp);
    if (s == KPC_OK && !*lost)
        KPC_LOG(KPC_LOG_INFO, "created host index %s: %zu entries, %zu bytes", name, capacity, size);
    return s;
}

static kpc_status attach(const char *name, kpc_index *ix)
{
    int fd = kpc__sys_fault(KPC_SYS_OPENR) ? -1 : shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd < 0) {
        if (errno == ENOENT)
            return KPC_E_NOT_FOUND;
        KPC_LOG(KPC_LOG_ERROR, "shm_open(%s): %s", name, strerror(errno));
        return KPC_E_SHM;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0)
        why = "fstat failed";
    else if (st.st_uid != geteuid())
        why = "owned by another user";
    else if ((st.st_mode & 0077) != 0)
        why = "readable or writable by other users";
    else if ((size_t)st.st_size < sizeof(ix_header))
        why = "shorter than its header";
    if (why) {
        close(fd);
        KPC_LOG(KPC_LOG_ERROR, "host index %s is not trusted (%s): disk only; kpc-shm-reset "
                "replaces it", name, why);
        return KPC_E_CORRUPT;
    }
    ix_header *h = kpc__sys_fault(KPC_SYS_MMAP) ? MAP_FAILED
                   : mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        KPC_LOG(KPC_LOG_ERROR, "mmap(%s): %s", name, strerror(errno));
        close(fd);
        return KPC_E_SHM;
    }
    if (h->ixh_magic != IX_MAGIC)
        why = "bad magic";
    else if (h->ixh_format != layout_format())
        why = "another format version or layout";
    else if (h->ixh_size != (uint64_t)st.st_size || h->ixh_nslots < 16 ||
             (h->ixh_nslots & (h->ixh_nslots - 1)) != 0 || h->ixh_nslots > (1u << 26) ||
             segment_size(h->ixh_nslots) != h->ixh_size)
        why = "size does not match its table";
    else if (h->ixh_capacity == 0 || (uint64_t)h->ixh_capacity * 2 > h->ixh_nslots)
        why = "bad capacity";
    else if (h->ixh_owner != geteuid())
        why = "another owner";
    if (why) {
        munmap(h, (size_t)st.st_size);
        close(fd);
        KPC_LOG(KPC_LOG_ERROR, "host index %s is not trusted (%s): disk only; kpc-shm-reset "
                "replaces it", name, why);
        return KPC_E_CORRUPT;
    }
    /* from here on the sizes are this copy: the segment's fields may be overwritten */
    ix->h = h;
    ix->fd = fd;
    ix->size = (size_t)st.st_size;
    ix->mask = h->ixh_nslots - 1;
    ix->capacity = h->ixh_capacity;
    return KPC_OK;
}

static kpc_status open_index(const char *cache_root, size_t entries, bool create, bool observer,
                             kpc_index **out)
{
    *out = NULL;
    char name[96];
    kpc_root_segment_name(cache_root, name, sizeof name);
    kpc_index *ix = calloc(1, sizeof *ix);
    if (ix == NULL)
        return KPC_E_NOMEM;
    ix->pid = getpid();
    ix->start = kpc__proc_start_time(ix->pid);
    ix->observer = observer;
    ix->wait_slice_ns = WAIT_SLICE_NS;
    atomic_store(&ix->row, -1);
    ix->fd = -1;
    ix->lock_timeout_ms = (unsigned)env_ms("KPC_SHM_LOCK_TIMEOUT_MS", LOCK_TIMEOUT_MS);
    ix->wait_max_ns = env_ms("KPC_BUILD_WAIT_MAX_MS", BUILD_WAIT_MAX_MS) * 1000000u;
    kpc_status s = attach(name, ix);
    for (int tries = 0; s == KPC_E_NOT_FOUND && create && tries < 3; tries++) {
        bool lost;
        s = create_segment(name, entries, &lost);
        if (s == KPC_OK)
            s = attach(name, ix);
    }
    if (s != KPC_OK) {
        free(ix);
        return s;
    }
    if (!observer)
        register_proc(ix, true);
    *out = ix;
    return KPC_OK;
}

kpc_status kpc_index_open(const char *cache_root, size_t entries, bool observer, kpc_index **out)
{
    return open_index(cache_root, entries, true, observer, out);
}

kpc_status kpc_index_open_existing(const char *cache_root, kpc_index **out)
{
    return open_index(cache_root, 0, false, true, out);
}

void kpc_index_close(kpc_index *ix)
{
    if (ix == NULL)
        return;
    /* a fork child closing its parent's handle must not remove the parent's row */
    if (!ix->observer && !atomic_load(&ix->broken) && getpid() == ix->pid)
        register_proc(ix, false);
    munmap(ix->h, ix->size);
    close(ix->fd);
    free(ix);
}

kpc_status kpc_index_unlink(const char *cache_root)
{
    char name[96];
    kpc_root_segment_name(cache_root, name, sizeof name);
    /* with the segment go the temporary ones its dead creators left: no later create of
     * this root may come to sweep them */
    sweep_temps(name, NULL, NULL);
    if (shm_unlink(name) != 0)
        return errno == ENOENT ? KPC_E_NOT_FOUND : KPC_E_SHM;
    return KPC_OK;
}

bool kpc_index_usable(kpc_index *ix)
{
    return ix_usable(ix);
}

/* ---- test hooks ---------------------------------------------------------------------------- */
#ifdef KPC_TEST_HOOKS
void kpc_index_test_hold_lock(kpc_index *ix)
{
    ix->hold_lock = true;
}

void kpc_index_test_wait_slice(kpc_index *ix, uint64_t ns)
{
    ix->wait_slice_ns = ns;
}

size_t kpc_index_test_builders(kpc_index *ix, pid_t *pids, size_t cap)
{
    if (ix_lock(ix, &ix->h->ixh_lock) != KPC_OK)
        return 0;
    size_t n = 0;
    for (uint32_t i = 0; i <= ix->mask; i++)
        if (ix->h->ixh_slots[i].ixs_state == SLOT_BUILDING) {
            if (n < cap)
                pids[n] = ix->h->ixh_slots[i].ixs_pid;
            n++;
        }
    ix_unlock(&ix->h->ixh_lock);
    return n;
}

bool kpc_index_check(kpc_index *ix)
{
    if (ix_lock(ix, &ix->h->ixh_lock) != KPC_OK)
        return false;
    ix_header *h = ix->h;
    uint64_t n = 0;
    bool ok = true;
    for (uint32_t i = 0; i <= ix->mask && ok; i++) {
        ix_slot *s = &h->ixh_slots[i];
        if (s->ixs_state == SLOT_EMPTY)
            continue;
        n++;
        ok = s->ixs_state <= SLOT_UNSTORED && find(ix, s->ixs_key, NULL) == (int64_t)i;
    }
    ok = ok && n == h->ixh_entries && n <= ix->capacity;
    ix_unlock(&h->ixh_lock);
    return ok;
}
#endif /* KPC_TEST_HOOKS */
