/*
 * util.c - small system helpers: clocks, process identity, a file's identity and
 * digest, the working directory's digest, whole-file reads and writes, mkdir -p, hex.
 * Base: it includes nothing of ours but base/.
 */
#define _GNU_SOURCE
#include "base/util.h"
#include "base/fault.h"
#include "base/file_time.h"
#include "base/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t kpc__now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

uint64_t kpc__wall_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* /proc is the kernel's, not kpc's files: its reads stay bare (and a failure already
 * reads as "no such process"). */
uint64_t kpc__proc_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n;
    do
        n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* the command name (field 2) may hold spaces and ')': fields restart after the last ')' */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return 0;
    /* p+2 is field 3 (state); field 22 is 19 fields further */
    p += 2;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return 0;
        p++;
    }
    return strtoull(p, NULL, 10);
}

char kpc__proc_state(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* the command name may hold ") ": the state follows the last one */
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : 0;
}

size_t kpc__boot_id(char *out, size_t cap)
{
    ssize_t n = -1;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        do
            n = read(fd, out, cap - 1);
        while (n < 0 && errno == EINTR);
        close(fd);
    }
    out[n > 0 ? n : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    return strlen(out);
}

bool kpc__proc_alive(pid_t pid, uint64_t start_time)
{
    if (pid <= 0)
        return false;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    uint64_t now = kpc__proc_start_time(pid);
    if (now == 0 || now != start_time)
        return false;
    /* a zombie still has /proc/PID/stat; its state letter is Z, treat it as dead */
    char state = kpc__proc_state(pid);
    return state != 0 && state != 'Z' && state != 'X';
}

kpc_status kpc__read_fd(int fd, size_t max, void **buf, size_t *size)
{
    struct stat st;
    return kpc__read_fd_stat(fd, max, buf, size, &st);
}

kpc_status kpc__read_fd_stat(int fd, size_t max, void **buf, size_t *size, struct stat *stp)
{
    struct stat st;
    if (kpc__fstat(fd, &st) != 0)
        return KPC_E_IO;
    *stp = st;
    if (!S_ISREG(st.st_mode))
        return KPC_E_CORRUPT;
    if ((uint64_t)st.st_size > max)
        return KPC_E_CORRUPT;
    size_t want = (size_t)st.st_size;
    char *b = malloc(want + 1);
    if (b == NULL)
        return KPC_E_NOMEM;
    size_t got = 0;
    while (got < want) {
        ssize_t n = kpc__pread(fd, b + got, want - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            free(b);
            return KPC_E_IO;
        }
        if (n == 0)
            break; /* truncated under us: the caller's checks see the short size */
        got += (size_t)n;
    }
    b[got] = '\0';
    *buf = b;
    *size = got;
    return KPC_OK;
}

int kpc_open_regular(int dirfd, const char *path, int flags, mode_t mode, struct stat *stp)
{
    int fd;
    do
        fd = kpc__openat(dirfd, path, flags | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, mode);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -1;
    struct stat st;
    int failed = kpc__fstat(fd, &st) != 0;
    if (failed || !S_ISREG(st.st_mode)) {
        int err = failed ? errno : EINVAL;
        close(fd);
        errno = err;
        return -1;
    }
    if (stp)
        *stp = st;
    return fd;
}

int kpc__write_all(int fd, const void *buf, size_t size)
{
    const char *p = buf;
    while (size > 0) {
        ssize_t n = kpc__write(fd, p, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0) {
            errno = EIO;
            return -1;
        }
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

int kpc__mkdir_p(const char *path, mode_t mode)
{
    char tmp[4096];
    if (strlen(path) >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(tmp, path);
    for (char *p = tmp + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (kpc__mkdirat(AT_FDCWD, tmp, mode) != 0 && errno != EEXIST)
                return -1;
            if (c == '\0')
                break;
            *p = c;
        }
    }
    struct stat st;
    if (kpc__fstatat(AT_FDCWD, path, &st, 0) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* Hash the file open on fd to its end, streaming; 0 or -1 with errno. */
static int hash_fd(int fd, uint8_t digest[16])
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    char buf[65536];
    off_t off = 0;
    for (;;) {
        ssize_t n = kpc__pread(fd, buf, sizeof buf, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        XXH3_128bits_update(&st, buf, (size_t)n);
        off += n;
    }
    XXH128_canonicalFromHash((XXH128_canonical_t *)digest, XXH3_128bits_digest(&st));
    return 0;
}

int kpc__stat_and_hash(int dirfd, const char *name, struct stat *st, uint8_t digest[16])
{
    int fd = kpc_open_regular(dirfd, name, O_RDONLY, 0, st);
    if (fd < 0)
        return -1;
    struct stat after;
    int r = hash_fd(fd, digest);
    if (r == 0 && kpc__fstat(fd, &after) != 0)
        r = -1;
    else if (r == 0 && (after.st_size != st->st_size || kpc__ts_ns(after.st_mtim) != kpc__ts_ns(st->st_mtim) ||
                        kpc__ts_ns(after.st_ctim) != kpc__ts_ns(st->st_ctim))) {
        errno = EAGAIN; /* written while hashed */
        r = -1;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return r;
}

void kpc__cwd_digest(uint8_t digest[16])
{
    char buf[PATH_MAX];
    memset(digest, 0, 16);
    if (getcwd(buf, sizeof buf))
        XXH128_canonicalFromHash((XXH128_canonical_t *)digest, XXH3_128bits(buf, strlen(buf)));
}

char *kpc__strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

void kpc__hex(const uint8_t *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

bool kpc__unhex(const char *hex, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < 2 * n; i++) {
        int v = kpc__hex_digit(hex[i]);
        if (v < 0)
            return false; /* also the NUL of a short string */
        if (i % 2 == 0)
            out[i / 2] = (uint8_t)(v << 4);
        else
            out[i / 2] |= (uint8_t)v;
    }
    return hex[2 * n] == '\0';
}
