/*
 * fault.h - the system-call fault table for failure-injection tests (base/fault.c), as
 * SQLite's aSyscall[] / test_syscall.c: the library calls kpc__sys_fault(KPC_SYS_x)
 * right before each system call it makes (file system, shared memory, locks), and a test
 * may make one of them fail: the Nth call of one kind (kpc__sys_fault_set), or the Nth
 * faultable call of any kind (kpc__sys_fault_nth: a sweep over every call of a request),
 * or stop the process there (kpc__sys_hook_set: the chaos test's kills at a phase).
 * Only test builds (KPC_TEST_HOOKS, set for the library the tests link) have a table; in
 * a release build the check is an inline 0 and nothing else exists.
 */
#ifndef KPC_BASE_FAULT_H
#define KPC_BASE_FAULT_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Append only: tests name them. OPEN: opening to create or write (a temp file, a lock
 * file, a segment); OPENR: opening to read; READ: read, pread, fstat of a file read;
 * MUTEX: taking a lock of the host index (its error comes back as the pthread return
 * value); FLOCK: taking a lock file; CONNECT: connecting to a server (the cluster tier's
 * Redis). */
enum kpc_sys_call { KPC_SYS_OPEN, KPC_SYS_WRITE, KPC_SYS_RENAME, KPC_SYS_MKDIR, KPC_SYS_FSYNC,
                    KPC_SYS_READ, KPC_SYS_UNLINK, KPC_SYS_FTRUNCATE, KPC_SYS_FALLOCATE, KPC_SYS_MMAP,
                    KPC_SYS_FLOCK, KPC_SYS_MUTEX, KPC_SYS_OPENR, KPC_SYS_CONNECT,
                    KPC_SYS_COUNT };

#ifdef KPC_TEST_HOOKS
/* 0 to proceed; -1 with errno set when a test asked this call to fail. */
int kpc__sys_fault(enum kpc_sys_call call);
/* Make calls of `call` fail with err after `skip` successful ones, `count` times
 * (count 0 stops). */
void kpc__sys_fault_set(enum kpc_sys_call call, int err, unsigned skip, unsigned count);
/* Make the nth faultable call from now (1-based, any kind) fail, with err or, when err
 * is 0, the errno that call meets most (kpc__sys_errno); sticky: every call after it
 * fails too (a disk that stays broken). n 0 stops. Also restarts the count. */
void kpc__sys_fault_nth(unsigned long n, int err, bool sticky);
/* Faultable calls since the last kpc__sys_fault_nth (or the start), all kinds and of one;
 * the kind and number of the call that failed last (KPC_SYS_COUNT / 0: none). */
unsigned long kpc__sys_calls(void);
unsigned long kpc__sys_calls_of(enum kpc_sys_call call);
enum kpc_sys_call kpc__sys_failed_last(unsigned long *nth);
/* A hook called before every faultable call, with its kind and its number since the last
 * kpc__sys_fault_nth: it may kill the process there. NULL removes it. */
typedef void (*kpc_sys_hook_fn)(enum kpc_sys_call call, unsigned long nth);
void kpc__sys_hook_set(kpc_sys_hook_fn fn);
/* The call's name ("open", "write", ...) and its usual errno. */
const char *kpc__sys_name(enum kpc_sys_call call);
int kpc__sys_errno(enum kpc_sys_call call);
#else
static inline int kpc__sys_fault(enum kpc_sys_call call)
{
    (void)call;
    return 0;
}
#endif

/* The library's file-system and shared-memory calls, each through the table
 * (base/fault.c): code below the API calls these, never the bare call, so that the fault
 * test can fail every one of them (in a release build each is the bare call). An open
 * (of a file or a segment) is KPC_SYS_OPEN when it may create or write, KPC_SYS_OPENR
 * otherwise; fstat, fstatat, read and pread are KPC_SYS_READ; opendir is KPC_SYS_OPENR.
 * The path calls take a directory (AT_FDCWD for a plain path). A call left bare on
 * purpose says why beside it: a clean-up after a failure (removing a temporary, an
 * unlock), which must not fail in turn, or a file that is not kpc's (/proc, stderr). */
struct stat;
int kpc__open(const char *path, int flags, mode_t mode);
int kpc__openat(int dir, const char *path, int flags, mode_t mode);
int kpc__fstat(int fd, struct stat *st);
int kpc__fstatat(int dir, const char *path, struct stat *st, int flags);
ssize_t kpc__read(int fd, void *buf, size_t n);
ssize_t kpc__pread(int fd, void *buf, size_t n, off_t off);
ssize_t kpc__write(int fd, const void *buf, size_t n);
int kpc__fsync(int fd);
int kpc__unlinkat(int dir, const char *path, int flags);
int kpc__renameat(int from_dir, const char *from, int to_dir, const char *to);
int kpc__mkdirat(int dir, const char *path, mode_t mode);
/* A link into place is a rename that never replaces: KPC_SYS_RENAME. */
int kpc__link(const char *from, const char *to);
DIR *kpc__opendir(const char *path);
int kpc__flock(int fd, int op);
int kpc__shm_open(const char *name, int flags, mode_t mode);
int kpc__shm_unlink(const char *name);
/* posix_fallocate's contract: 0 or the error number (errno is not set). */
int kpc__posix_fallocate(int fd, off_t off, off_t len);
void *kpc__mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);

#endif /* KPC_BASE_FAULT_H */
