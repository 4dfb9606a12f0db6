/*
 * fault.c - the system-call fault table (test builds only, KPC_TEST_HOOKS): a test makes
 * a call fail with an errno, as SQLite's syscall table does, either the Nth of one kind
 * or the Nth of all (a sweep over a whole request), or runs a hook before each call. A
 * release build has no table: kpc__sys_fault is an inline 0 (base/fault.h).
 *
 * Tests set a plan from one thread before the calls they aim at; atomics keep TSan quiet
 * and the counts exact when the library's threads make calls meanwhile.
 */
#define _GNU_SOURCE
#include "base/fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the calls, through the table (both builds) -------------------------------------- */
static enum kpc_sys_call open_kind(int flags)
{
    return (flags & (O_WRONLY | O_RDWR | O_CREAT)) ? KPC_SYS_OPEN : KPC_SYS_OPENR;
}

int kpc__open(const char *path, int flags, mode_t mode)
{
    return kpc__sys_fault(open_kind(flags)) ? -1 : open(path, flags, mode);
}

int kpc__openat(int dir, const char *path, int flags, mode_t mode)
{
    return kpc__sys_fault(open_kind(flags)) ? -1 : openat(dir, path, flags, mode);
}

int kpc__fstat(int fd, struct stat *st) { return kpc__sys_fault(KPC_SYS_READ) ? -1 : fstat(fd, st); }

int kpc__fstatat(int dir, const char *path, struct stat *st, int flags)
{
    return kpc__sys_fault(KPC_SYS_READ) ? -1 : fstatat(dir, path, st, flags);
}

ssize_t kpc__read(int fd, void *buf, size_t n)
{
    return kpc__sys_fault(KPC_SYS_READ) ? -1 : read(fd, buf, n);
}

ssize_t kpc__pread(int fd, void *buf, size_t n, off_t off)
{
    return kpc__sys_fault(KPC_SYS_READ) ? -1 : pread(fd, buf, n, off);
}

ssize_t kpc__write(int fd, const void *buf, size_t n)
{
    return kpc__sys_fault(KPC_SYS_WRITE) ? -1 : write(fd, buf, n);
}

int kpc__fsync(int fd) { return kpc__sys_fault(KPC_SYS_FSYNC) ? -1 : fsync(fd); }

int kpc__unlinkat(int dir, const char *path, int flags)
{
    return kpc__sys_fault(KPC_SYS_UNLINK) ? -1 : unlinkat(dir, path, flags);
}

int kpc__renameat(int from_dir, const char *from, int to_dir, const char *to)
{
    return kpc__sys_fault(KPC_SYS_RENAME) ? -1 : renameat(from_dir, from, to_dir, to);
}

int kpc__mkdirat(int dir, const char *path, mode_t mode)
{
    return kpc__sys_fault(KPC_SYS_MKDIR) ? -1 : mkdirat(dir, path, mode);
}

int kpc__link(const char *from, const char *to)
{
    return kpc__sys_fault(KPC_SYS_RENAME) ? -1 : link(from, to);
}

DIR *kpc__opendir(const char *path) { return kpc__sys_fault(KPC_SYS_OPENR) ? NULL : opendir(path); }

int kpc__flock(int fd, int op) { return kpc__sys_fault(KPC_SYS_FLOCK) ? -1 : flock(fd, op); }

int kpc__shm_open(const char *name, int flags, mode_t mode)
{
    return kpc__sys_fault(open_kind(flags)) ? -1 : shm_open(name, flags, mode);
}

int kpc__shm_unlink(const char *name) { return kpc__sys_fault(KPC_SYS_UNLINK) ? -1 : shm_unlink(name); }

int kpc__posix_fallocate(int fd, off_t off, off_t len)
{
    return kpc__sys_fault(KPC_SYS_FALLOCATE) ? errno : posix_fallocate(fd, off, len);
}

void *kpc__mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return kpc__sys_fault(KPC_SYS_MMAP) ? MAP_FAILED : mmap(addr, len, prot, flags, fd, off);
}

#ifdef KPC_TEST_HOOKS
#include <stdatomic.h>

static const struct {
    const char *name;
    int err; /* what this call meets most when the system says no */
} table[KPC_SYS_COUNT] = {
    [KPC_SYS_OPEN] = {"open", EACCES},          [KPC_SYS_WRITE] = {"write", ENOSPC},
    [KPC_SYS_RENAME] = {"rename", EACCES},      [KPC_SYS_MKDIR] = {"mkdir", EROFS},
    [KPC_SYS_FSYNC] = {"fsync", EIO},           [KPC_SYS_READ] = {"read", EIO},
    [KPC_SYS_UNLINK] = {"unlink", EACCES},      [KPC_SYS_FTRUNCATE] = {"ftruncate", EFBIG},
    [KPC_SYS_FALLOCATE] = {"fallocate", ENOSPC}, [KPC_SYS_MMAP] = {"mmap", ENOMEM},
    [KPC_SYS_FLOCK] = {"flock", ENOLCK},        [KPC_SYS_MUTEX] = {"mutex", EINVAL},
    [KPC_SYS_OPENR] = {"open for reading", EACCES}, [KPC_SYS_CONNECT] = {"connect", ECONNREFUSED},
};

/* Per kind: fail with err after skip calls, count times. */
static struct {
    atomic_int err;
    atomic_uint skip, count;
    atomic_ulong calls;
} faults[KPC_SYS_COUNT];

/* All kinds: the nth call fails (0: none), and every later one if sticky. */
static atomic_ulong calls, nth;
static atomic_int nth_err;
static atomic_bool nth_sticky;
static atomic_int failed_kind = KPC_SYS_COUNT;
static atomic_ulong failed_at;
static _Atomic(kpc_sys_hook_fn) hook;

void kpc__sys_fault_set(enum kpc_sys_call call, int err, unsigned skip, unsigned count)
{
    atomic_store(&faults[call].err, err);
    atomic_store(&faults[call].skip, skip);
    atomic_store(&faults[call].count, count);
}

void kpc__sys_fault_nth(unsigned long n, int err, bool sticky)
{
    atomic_store(&nth, 0);
    atomic_store(&calls, 0);
    for (int i = 0; i < KPC_SYS_COUNT; i++)
        atomic_store(&faults[i].calls, 0);
    atomic_store(&failed_kind, KPC_SYS_COUNT);
    atomic_store(&failed_at, 0);
    atomic_store(&nth_err, err);
    atomic_store(&nth_sticky, sticky);
    atomic_store(&nth, n);
}

unsigned long kpc__sys_calls(void) { return atomic_load(&calls); }
unsigned long kpc__sys_calls_of(enum kpc_sys_call call) { return atomic_load(&faults[call].calls); }
void kpc__sys_hook_set(kpc_sys_hook_fn fn) { atomic_store(&hook, fn); }
const char *kpc__sys_name(enum kpc_sys_call call) { return call < KPC_SYS_COUNT ? table[call].name : "none"; }
int kpc__sys_errno(enum kpc_sys_call call) { return call < KPC_SYS_COUNT ? table[call].err : EIO; }

enum kpc_sys_call kpc__sys_failed_last(unsigned long *at)
{
    *at = atomic_load(&failed_at);
    return (enum kpc_sys_call)atomic_load(&failed_kind);
}

static int fail(enum kpc_sys_call call, unsigned long at, int err)
{
    atomic_store(&failed_kind, (int)call);
    atomic_store(&failed_at, at);
    errno = err ? err : table[call].err;
    return -1;
}

int kpc__sys_fault(enum kpc_sys_call call)
{
    unsigned long at = atomic_fetch_add(&calls, 1) + 1;
    atomic_fetch_add_explicit(&faults[call].calls, 1, memory_order_relaxed);
    kpc_sys_hook_fn fn = atomic_load(&hook);
    if (fn)
        fn(call, at);
    unsigned long n = atomic_load(&nth);
    if (n != 0 && (at == n || (at > n && atomic_load(&nth_sticky))))
        return fail(call, at, atomic_load(&nth_err));
    if (atomic_load_explicit(&faults[call].count, memory_order_relaxed) == 0)
        return 0;
    unsigned skip = atomic_load(&faults[call].skip);
    while (skip > 0)
        if (atomic_compare_exchange_weak(&faults[call].skip, &skip, skip - 1))
            return 0;
    unsigned count = atomic_load(&faults[call].count);
    while (count > 0)
        if (atomic_compare_exchange_weak(&faults[call].count, &count, count - 1))
            return fail(call, at, atomic_load(&faults[call].err));
    return 0;
}
#endif /* KPC_TEST_HOOKS */
