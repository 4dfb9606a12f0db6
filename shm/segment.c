/*
 * segment.c - the host index's segment: its name, its creation, attach and checks, the
 * attached-process table, and its removal (kpc-shm-reset).
 *
 * One segment per cache directory, user and layout ("/kpc-<uid>-<hash of the real
 * path>-L<hash of the layout>", mode 0600): the layout's facts (format version, mutex,
 * slot and header sizes) are in the name, as LMDB hashes them into its lock file's
 * format, so a kpc of another layout never opens this one, and two versions of kpc on
 * one host each keep an index of their own instead of one turning the other's off. It
 * is built whole under a temporary name, posix_fallocate'd (a full /dev/shm is an error
 * here, never a SIGBUS later) and linked into place, so no process ever sees a
 * half-initialized segment. Every attach validates magic, format (version mixed with the
 * layout's sizes, again: a name is only a name), size against fstat, capacity and owner;
 * a segment that fails is never trusted: the caller goes on with the disk alone until
 * kpc-shm-reset replaces it.
 *
 * Nothing read from the segment after attach is trusted as a size: every loop over the
 * table is bounded by the slot count validated at attach (kept in the handle), and the
 * segment's length is checked (fstat) before every operation, so a segment truncated
 * under us turns the index off instead of raising SIGBUS.
 */
#define _GNU_SOURCE
#include "shm/segment.h"
#include "base/fault.h"
#include "base/hash.h"
#include "base/root.h"
#include "base/settings.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- layout --------------------------------------------------------------------------- */
static uint64_t layout_format(void)
{
    /* a build with another mutex size, slot layout or pid size must never attach */
    uint64_t facts[] = {IX_VERSION, sizeof(pthread_mutex_t), sizeof(ix_slot), sizeof(ix_header),
                        sizeof(pid_t), offsetof(ix_header, ixh_slots), IX_PROCS};
    return XXH3_64bits(facts, sizeof facts);
}

void kpc_index_segment_name(const char *cache_root, char *out, size_t cap)
{
    char base[40]; /* "/kpc-<uid>-<16 hex>": 32 bytes at most */
    kpc_root_segment_name(cache_root, base, sizeof base);
    snprintf(out, cap, "%s-L%016llx", base, (unsigned long long)layout_format());
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

/* ---- turning the index off ------------------------------------------------------------ */
/* Turn the index off for this process; the first thread to do so logs why (once). */
void kpc_shm_off(kpc_index *ix, const char *fmt, ...)
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
     * live builder up to wait_max (found by the system-call fault sweep, test_faults_sweep) */
    int row = atomic_load(&ix->row);
    if (row >= 0 && !atomic_load(&ix->unmapped))
        atomic_store(&ix->h->ixh_procs[row].ixp_off, 1);
}

/* False (and the index off) once the segment is shorter than it was at attach: a page
 * past its end would raise SIGBUS. The mapping is then replaced by private zero pages,
 * so that what still points into it (the disk-usage words the store holds, a thread in
 * the middle of an operation) touches memory, not a hole. A truncation between this
 * check and an access is not covered: that window is one table operation. */
static bool segment_intact(kpc_index *ix)
{
    struct stat st;
    /* an fstat that fails tells nothing of the size: go on, as in the window above (turning
     * the index off there would strand this process's building slots) */
    if (kpc__fstat(ix->fd, &st) != 0 || (uint64_t)st.st_size >= ix->size)
        return true;
    if (!atomic_exchange(&ix->unmapped, true)) {
        kpc_shm_off(ix, "the host index segment was truncated (%lld of %zu bytes)",
               (long long)st.st_size, ix->size);
        /* bare: the repair after a failure must not fail in turn */
        if (mmap(ix->h, ix->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0) == MAP_FAILED)
            KPC_LOG(KPC_LOG_ERROR, "mmap(MAP_FIXED) over the truncated host index: %s",
                    strerror(errno));
    }
    return false;
}

bool kpc_shm_usable(kpc_index *ix)
{
    return !atomic_load(&ix->broken) && segment_intact(ix);
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
    if (kpc_shm_lock(ix, &h->ixh_procs_lock) != KPC_OK)
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
    kpc_shm_unlock(&h->ixh_procs_lock);
}

kpc_status kpc_index_live_procs(kpc_index *ix, kpc_index_proc_fn fn, void *arg, size_t *live)
{
    ix_header *h = ix->h;
    *live = 0;
    if (kpc_shm_lock(ix, &h->ixh_procs_lock) != KPC_OK)
        return KPC_E_SHM;
    sweep_procs(h);
    pid_t pids[IX_PROCS];
    for (int i = 0; i < IX_PROCS; i++)
        if (h->ixh_procs[i].ixp_pid != 0)
            pids[(*live)++] = h->ixh_procs[i].ixp_pid;
    kpc_shm_unlock(&h->ixh_procs_lock);
    for (size_t i = 0; fn && i < *live; i++)
        fn(pids[i], arg);
    return KPC_OK;
}

/* ---- name, create, attach, validate -------------------------------------------------------- */
/* Temporary segments are named <name>.tmp-<pid>-<start time>-<hex ns>: a creator killed
 * before its link leaves one (0 bytes long if it died before posix_fallocate), which is
 * stale once that process (pid and start time) is dead. */
static size_t sweep_temps(const char *name, kpc_index_temp_fn fn, void *arg)
{
    char prefix[128];
    int plen = snprintf(prefix, sizeof prefix, "%s.tmp-", name + 1); /* no leading '/' */
    DIR *d = kpc__opendir("/dev/shm");
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
        if (kpc__shm_unlink(shm) != 0) {
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
    char name[KPC_INDEX_NAME_MAX];
    kpc_index_segment_name(cache_root, name, sizeof name);
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
    int fd = kpc__shm_open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        KPC_LOG(KPC_LOG_ERROR, "shm_open(%s): %s", tmp, strerror(errno));
        return KPC_E_SHM;
    }
    uint32_t nslots = slots_for(capacity);
    size_t size = segment_size(nslots);
    int r = kpc__posix_fallocate(fd, 0, (off_t)size);
    if (r != 0) {
        KPC_LOG(KPC_LOG_ERROR, "posix_fallocate(%s, %zu bytes): %s", tmp, size, strerror(r));
        close(fd);
        shm_unlink(tmp); /* bare, as every clean-up after a failure: it must not fail */
        return KPC_E_SHM;
    }
    ix_header *h = kpc__mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (h == MAP_FAILED) {
        KPC_LOG(KPC_LOG_ERROR, "mmap(%s): %s", tmp, strerror(errno));
        shm_unlink(tmp); /* bare: a clean-up */
        return KPC_E_SHM;
    }
    h->ixh_format = layout_format();
    h->ixh_size = size;
    h->ixh_capacity = (uint32_t)capacity;
    h->ixh_nslots = nslots;
    h->ixh_owner = (uint32_t)geteuid();
    h->ixh_created_ns = kpc__wall_ns();
    kpc_status s = kpc_shm_init_mutex(&h->ixh_lock);
    if (s == KPC_OK)
        s = kpc_shm_init_mutex(&h->ixh_procs_lock);
    atomic_thread_fence(memory_order_release);
    h->ixh_magic = IX_MAGIC;
    munmap(h, size);
    snprintf(tmp_path, sizeof tmp_path, "/dev/shm%s", tmp);
    snprintf(final_path, sizeof final_path, "/dev/shm%s", name);
    if (s == KPC_OK && kpc__link(tmp_path, final_path) != 0) {
        if (errno == EEXIST)
            *lost = true;
        else {
            KPC_LOG(KPC_LOG_ERROR, "link(%s, %s): %s", tmp_path, final_path, strerror(errno));
            s = KPC_E_SHM;
        }
    }
    shm_unlink(tmp); /* bare: the temporary name goes whatever happened */
    if (s == KPC_OK && !*lost)
        KPC_LOG(KPC_LOG_INFO, "created host index %s: %zu entries, %zu bytes", name, capacity, size);
    return s;
}

static kpc_status attach(const char *name, kpc_index *ix)
{
    int fd = kpc__shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd < 0) {
        if (errno == ENOENT)
            return KPC_E_NOT_FOUND;
        KPC_LOG(KPC_LOG_ERROR, "shm_open(%s): %s", name, strerror(errno));
        return KPC_E_SHM;
    }
    struct stat st;
    const char *why = NULL;
    if (kpc__fstat(fd, &st) != 0)
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
    ix_header *h = kpc__mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
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
    char name[KPC_INDEX_NAME_MAX];
    kpc_index_segment_name(cache_root, name, sizeof name);
    kpc_index *ix = calloc(1, sizeof *ix);
    if (ix == NULL)
        return KPC_E_NOMEM;
    ix->pid = getpid();
    ix->start = kpc__proc_start_time(ix->pid);
    ix->observer = observer;
    ix->wait_slice_ns = WAIT_SLICE_NS;
    atomic_store(&ix->row, -1);
    ix->fd = -1;
    ix->lock_timeout_ms = (unsigned)kpc__setting_number(KPC_SET_SHM_LOCK_TIMEOUT_MS);
    ix->wait_max_ns = kpc__setting_number(KPC_SET_BUILD_WAIT_MAX_MS) * 1000000u;
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
    char name[KPC_INDEX_NAME_MAX];
    kpc_index_segment_name(cache_root, name, sizeof name);
    /* with the segment go the temporary ones its dead creators left: no later create of
     * this root may come to sweep them */
    sweep_temps(name, NULL, NULL);
    if (kpc__shm_unlink(name) != 0)
        return errno == ENOENT ? KPC_E_NOT_FOUND : KPC_E_SHM;
    return KPC_OK;
}

bool kpc_index_usable(kpc_index *ix)
{
    return kpc_shm_usable(ix);
}
