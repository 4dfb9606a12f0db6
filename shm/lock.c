/*
 * lock.c - the host index's two robust, process-shared mutexes: ixh_lock guards the
 * slots, ixh_entries and ixh_hand; ixh_procs_lock guards the attached-process table. Both
 * are taken only for a table operation, never across a compile or I/O, and always with a
 * deadline (a few seconds, KPC_SHM_LOCK_TIMEOUT_MS): a lock word overwritten by a stray
 * write, or a holder that is stopped, must not hang every process; past the deadline the
 * index is off for this process (disk only). A holder that dies leaves the next locker
 * EOWNERDEAD: the table may be half-updated, so it is wiped (the files stay on disk and
 * are found again) and the mutex marked consistent. The counters are atomics, no lock.
 */
#define _GNU_SOURCE
#include "shm/segment.h"
#include "base/fault.h"

#include <errno.h>
#include <string.h>
#include <time.h>

kpc_status kpc_shm_init_mutex(pthread_mutex_t *m)
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

/* The kind word of a mutex kpc_shm_init_mutex makes (glibc): a lock whose kind was overwritten
 * could take another path of glibc (priority inheritance) that asserts on a bad owner. */
static int expected_kind = -1;
static void find_expected_kind(void)
{
#ifdef __GLIBC__
    pthread_mutex_t m;
    if (kpc_shm_init_mutex(&m) == KPC_OK) {
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
kpc_status kpc_shm_lock(kpc_index *ix, pthread_mutex_t *m)
{
    if (!kpc_shm_usable(ix))
        return KPC_E_SHM;
    const char *which = m == &ix->h->ixh_lock ? "table lock" : "attach lock";
    if (!kind_intact(m)) {
        kpc_shm_off(ix, "the host index %s was overwritten (its kind word)", which);
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
        kpc_shm_off(ix, "the host index %s did not answer within %u ms (its word damaged, or its "
               "holder stopped)", which, ix->lock_timeout_ms);
        return KPC_E_SHM;
    }
    if (r == EOWNERDEAD) {
        if (m == &ix->h->ixh_lock) {
            KPC_LOG(KPC_LOG_WARN, "a process died holding the host index lock: wiping the table "
                    "(the code objects stay on disk)");
            kpc_shm_wipe_table(ix);
        } else {
            KPC_LOG(KPC_LOG_WARN, "a process died holding the attach lock: recovered");
        }
        pthread_mutex_consistent(m);
        r = 0;
    }
    if (r != 0) {
        kpc_shm_off(ix, "pthread_mutex_timedlock on the host index %s: %s", which, strerror(r));
        return KPC_E_SHM;
    }
    return KPC_OK;
}

void kpc_shm_unlock(pthread_mutex_t *m)
{
    pthread_mutex_unlock(m);
}
