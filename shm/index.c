/*
 * index.c - the host index's table: an open-addressed hash table (linear probing, no
 * tombstones) over the slots of the segment (segment.c), under its table lock (lock.c).
 * One slot per key: READY, BUILDING (by which process), FAILED or UNSTORED; the first
 * process to ask for a key claims it and builds, the others wait for its publication.
 *
 * Waiting: each slot position has a generation word; any change of what the position
 * holds bumps it and, if anyone sleeps there, FUTEX_WAKEs them. A waiter reads the
 * generation under the lock, unlocks, and futex-waits on it with a 200 ms timeout; the
 * timeout exists only to re-check that the builder is alive (pid and start time), so a
 * dead builder is taken over within about 200 ms while publication wakes waiters at once.
 * A live builder is waited for at most KPC_BUILD_WAIT_MAX_MS from its claim (10 minutes by
 * default): a stopped or hung builder then sends its waiters to build for themselves.
 */
#define _GNU_SOURCE
#include "shm/segment.h"

#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EVICT_SAMPLE 64
/* A compile failure is the answer for every request that arrives within this long of it
 * (the key fixes the source, options and compiler, so the compile would fail the same
 * way); a request after that tries again, which bounds how long a transient failure of
 * the compiler (out of memory, say) is served. An UNSTORED answer lasts as long: a full
 * or read-only disk is not mended in a moment either. */
#define ANSWER_TTL_NS (30ull * 1000000000ull)

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

/* The builder of a slot turned its index off (kpc_shm_off): it will never publish. Lock held. */
static bool builder_off(const kpc_index *ix, int32_t pid, uint64_t start)
{
    for (int i = 0; i < IX_PROCS; i++) {
        const ix_proc *p = &ix->h->ixh_procs[i];
        if (p->ixp_pid == pid && p->ixp_start == start && atomic_load(&p->ixp_off))
            return true;
    }
    return false;
}

void kpc_shm_wipe_table(kpc_index *ix)
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
        kpc_shm_wipe_table(ix);
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
    bool was_waiting = (flags & KPC_INDEX_AGAIN) != 0, slept = false;
    *waited = false;
    for (bool first = true;; first = false) {
        if (kpc_shm_lock(ix, &h->ixh_lock) != KPC_OK) /* it checks the segment's length too */
            return KPC_E_SHM;
        if (first)
            atomic_fetch_add_explicit(&h->ixh_lookups, 1, memory_order_relaxed);
        int64_t free_pos;
        int64_t pos = find(ix, key->bytes, &free_pos);
        if (pos < 0) {
            if (h->ixh_entries >= ix->capacity && evict_one(ix))
                pos = find(ix, key->bytes, &free_pos); /* the shift moved the free position */
            if (h->ixh_entries >= ix->capacity || free_pos < 0) {
                kpc_shm_unlock(&h->ixh_lock);
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
            kpc_shm_unlock(&h->ixh_lock);
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
            kpc_shm_unlock(&h->ixh_lock);
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
            kpc_shm_unlock(&h->ixh_lock);
            return KPC_OK;
        case SLOT_UNSTORED:
            if (was_waiting || kpc__now_ns() - s->ixs_done_ns < ANSWER_TTL_NS) {
                s->ixs_last_use = kpc__now_ns();
                *verdict = KPC_INDEX_SELF;
            } else { /* the disk may take objects again: one build to find out */
                claim(ix, s);
                *verdict = KPC_INDEX_BUILD;
            }
            kpc_shm_unlock(&h->ixh_lock);
            return KPC_OK;
        default: /* SLOT_BUILDING */
            if (!kpc__proc_alive(s->ixs_pid, s->ixs_start) || builder_off(ix, s->ixs_pid, s->ixs_start)) {
                KPC_LOG(KPC_LOG_WARN, "builder process %d died (or turned its host index off): taking "
                        "its build over", (int)s->ixs_pid);
                claim(ix, s);
                atomic_fetch_add_explicit(&h->ixh_takeovers, 1, memory_order_relaxed);
                kpc_shm_unlock(&h->ixh_lock);
                *verdict = KPC_INDEX_BUILD;
                return KPC_OK;
            }
            /* a live builder at it for longer than wait_max (stopped, or hung) is not
             * waited for: build without it, and without publishing (SELF) */
            uint64_t busy = kpc__now_ns() - s->ixs_last_use;
            if (busy >= ix->wait_max_ns) {
                int builder = (int)s->ixs_pid;
                kpc_shm_unlock(&h->ixh_lock);
                atomic_fetch_add_explicit(&h->ixh_wait_timeouts, 1, memory_order_relaxed);
                KPC_LOG(KPC_LOG_WARN, "builder process %d has been building this key for %.1f s "
                        "(KPC_BUILD_WAIT_MAX_MS is %llu): building it here without waiting",
                        builder, (double)busy / 1e9,
                        (unsigned long long)(ix->wait_max_ns / 1000000u));
                *verdict = KPC_INDEX_SELF;
                return KPC_OK;
            }
            if ((flags & KPC_INDEX_NOWAIT) || ((flags & KPC_INDEX_SLICE) && slept)) {
                /* a batch claims the others first; a watcher looks elsewhere */
                kpc_shm_unlock(&h->ixh_lock);
                *verdict = KPC_INDEX_BUSY;
                return KPC_OK;
            }
            uint64_t slice = ix->wait_slice_ns;
            if (slice > ix->wait_max_ns - busy)
                slice = ix->wait_max_ns - busy;
            uint32_t gen = atomic_load(&s->ixs_gen);
            atomic_fetch_add(&s->ixs_sleepers, 1);
            kpc_shm_unlock(&h->ixh_lock);
            if (!was_waiting)
                atomic_fetch_add_explicit(&h->ixh_waits, 1, memory_order_relaxed);
            was_waiting = *waited = slept = true;
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
    if (kpc_shm_lock(ix, &ix->h->ixh_lock) != KPC_OK)
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
    kpc_shm_unlock(&ix->h->ixh_lock);
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
    if (!kpc_shm_usable(ix))
        return;
    atomic_fetch_add_explicit(ok ? &ix->h->ixh_builds : &ix->h->ixh_build_failures, 1,
                              memory_order_relaxed);
}

void kpc_index_abandon(kpc_index *ix, const kpc_key *key)
{
    if (kpc_shm_lock(ix, &ix->h->ixh_lock) != KPC_OK)
        return;
    int64_t pos;
    if (own_slot(ix, key, &pos) != NULL)
        delete_at(ix, (uint32_t)pos);
    kpc_shm_unlock(&ix->h->ixh_lock);
}

void kpc_index_forget(kpc_index *ix, const kpc_key *key)
{
    if (kpc_shm_lock(ix, &ix->h->ixh_lock) != KPC_OK)
        return;
    int64_t pos = find(ix, key->bytes, NULL);
    if (pos >= 0 && ix->h->ixh_slots[pos].ixs_state != SLOT_BUILDING)
        delete_at(ix, (uint32_t)pos);
    kpc_shm_unlock(&ix->h->ixh_lock);
}

void kpc_index_counters_get(kpc_index *ix, kpc_index_counters *c)
{
    ix_header *h = ix->h;
    memset(c, 0, sizeof *c);
    if (!kpc_shm_usable(ix))
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
    if (kpc_shm_lock(ix, &h->ixh_lock) == KPC_OK) {
        c->entries = h->ixh_entries;
        kpc_shm_unlock(&h->ixh_lock);
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
    if (kpc_shm_lock(ix, &ix->h->ixh_lock) != KPC_OK)
        return 0;
    size_t n = 0;
    for (uint32_t i = 0; i <= ix->mask; i++)
        if (ix->h->ixh_slots[i].ixs_state == SLOT_BUILDING) {
            if (n < cap)
                pids[n] = ix->h->ixh_slots[i].ixs_pid;
            n++;
        }
    kpc_shm_unlock(&ix->h->ixh_lock);
    return n;
}

bool kpc_index_check(kpc_index *ix)
{
    if (kpc_shm_lock(ix, &ix->h->ixh_lock) != KPC_OK)
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
    kpc_shm_unlock(&h->ixh_lock);
    return ok;
}
#endif /* KPC_TEST_HOOKS */
