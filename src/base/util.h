/*
 * util.h - small system helpers (base/util.c), and the key type every level is
 * indexed by (computed in core/key.c; only its 16 bytes are needed below core).
 */
#ifndef KPC_BASE_UTIL_H
#define KPC_BASE_UTIL_H

#include "kpc/kpc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* The cache key: XXH3-128 of a request (core/key.c). */
typedef struct kpc_key {
    uint8_t bytes[16];
} kpc_key;
#define KPC_KEY_HEX 33 /* 32 hex digits and a NUL */

uint64_t kpc__now_ns(void);          /* CLOCK_MONOTONIC: host-wide, comparable across processes */
uint64_t kpc__wall_ns(void);         /* CLOCK_REALTIME */
/* Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat); 0 if gone. */
uint64_t kpc__proc_start_time(pid_t pid);
/* True if pid runs and started at start_time: a reused pid is never taken for the original. */
bool kpc__proc_alive(pid_t pid, uint64_t start_time);
/* The state letter of a process (field 3 of /proc/PID/stat: R, S, T, Z...); 0 if gone. */
char kpc__proc_state(pid_t pid);
/* The kernel's boot id (/proc/sys/kernel/random/boot_id, its newline dropped): this node,
 * this boot. Its length, 0 (out "") where there is none. */
size_t kpc__boot_id(char *out, size_t cap);
/* Read a whole file with pread into a malloc'd buffer (never mmap: a truncated file
 * would SIGBUS). KPC_E_NOT_FOUND, KPC_E_IO, KPC_E_NOMEM. max bounds the size. */
kpc_status kpc__read_fd(int fd, size_t max, void **buf, size_t *size);
/* The same, handing back the fstat it made (*st is set whenever that succeeded), so a
 * caller needs no second one: a system call is microseconds on a paravirtualized guest. */
struct stat;
kpc_status kpc__read_fd_stat(int fd, size_t max, void **buf, size_t *size, struct stat *st);
/* Open a file that is to be read (or written) as a regular file: openat(dirfd, path,
 * flags | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, mode) through the fault seam (OPENR for
 * O_RDONLY, OPEN otherwise), then fstat. A FIFO, a device, a socket or a directory is
 * refused (errno EINVAL) without ever blocking: a FIFO planted where a header, a record
 * or a manifest should be would otherwise hang the open, and every waiter behind it.
 * O_NONBLOCK stays set: it changes nothing for a regular file. dirfd: AT_FDCWD or a
 * directory; *st (may be NULL) gets the fstat. The fd, or -1 with errno. */
int kpc_open_regular(int dirfd, const char *path, int flags, mode_t mode, struct stat *st);
/* write() all of it, retrying EINTR and short writes; -1 with errno set on failure. */
int kpc__write_all(int fd, const void *buf, size_t size);
/* mkdir -p with mode; 0 or -1 with errno. */
int kpc__mkdir_p(const char *path, mode_t mode);
/* Open (without blocking: kpc_open_regular), fstat and hash (XXH3-128, canonical bytes)
 * the regular file name under dirfd, through the fault seam; *st is the stat of the
 * bytes hashed (taken again after hashing: a file that changed meanwhile fails, errno
 * EAGAIN). 0, or -1 with errno (EINVAL: not a regular file). */
int kpc__stat_and_hash(int dirfd, const char *name, struct stat *st, uint8_t digest[16]);
/* The XXH3-128 of the working directory's path, as the keys hold it; zeros when it
 * cannot be read (such a request's relative files are never recorded, so its outcome
 * is not cached: core/manifest.h). */
void kpc__cwd_digest(uint8_t digest[16]);
char *kpc__strdup(const char *s); /* NULL-safe */
/* n bytes as 2n lowercase hex digits and a NUL. */
void kpc__hex(const uint8_t *bytes, size_t n, char *out /* 2n+1 */);
/* Exactly 2n lowercase hex digits (then the NUL) into n bytes; false if malformed. */
bool kpc__unhex(const char *hex, uint8_t *out, size_t n);
/* The value of one lowercase hex digit, -1 for any other char (a NUL among them). */
static inline int kpc__hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

#endif /* KPC_BASE_UTIL_H */
