/*
 * file_time.h - a file's times as kpc compares them: in ns (every file kpc keeps or
 * checks a time of), and whether a file changed within a window. Inline: a manifest's
 * check asks both of every file it stats. Its
 * includer defines _GNU_SOURCE (or _POSIX_C_SOURCE 200809L) before any system header,
 * for struct stat's st_mtim and st_ctim.
 */
#ifndef KPC_BASE_FILE_TIME_H
#define KPC_BASE_FILE_TIME_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

static inline int64_t kpc__ts_ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + (int64_t)t.tv_nsec;
}

/* Whether st's content or inode changed (mtime or ctime) less than window_ns before
 * now_ns (CLOCK_REALTIME). */
static inline bool kpc__changed_within(const struct stat *st, int64_t window_ns, int64_t now_ns)
{
    int64_t m = kpc__ts_ns(st->st_mtim), c = kpc__ts_ns(st->st_ctim), changed = m > c ? m : c;
    return changed + window_ns > now_ns;
}

#endif /* KPC_BASE_FILE_TIME_H */
