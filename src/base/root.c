/*
 * root.c - the cache directory: opened once, held open, and the only place that knows
 * how paths inside it are spelled (layout: base/root.h).
 *
 * Invariant: a kpc_root names a directory that this user owns, with mode 0700 (made so
 * at open), and never changes after open. The ownership check refuses a cache another
 * user could plant code objects in; it runs here, once, for every user of the cache (the
 * library, kpc, kpc-shm-reset).
 */
#define _GNU_SOURCE
#include "base/root.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

struct kpc_root {
    char path[PATH_MAX]; /* realpath of the cache dir */
    char v1[PATH_MAX + 8]; /* path/v1 */
    char tmp[PATH_MAX + 16]; /* path/v1/tmp */
    size_t v1_len;
    int fd, v1_fd;         /* held open for the life of the root */
    atomic_uint tmp_seq;   /* staging names unique within the process */
};

static kpc_status check_owner(const char *dir)
{
    struct stat lst, st;
    if (lstat(dir, &lst) != 0 || stat(dir, &st) != 0) {
        KPC_LOG(KPC_LOG_ERROR, "stat(%s): %s", dir, strerror(errno));
        return KPC_E_IO;
    }
    if (!S_ISDIR(st.st_mode)) {
        KPC_LOG(KPC_LOG_ERROR, "cache directory %s is not a directory", dir);
        return KPC_E_IO;
    }
    uid_t me = geteuid();
    if (st.st_uid != me) {
        KPC_LOG(KPC_LOG_ERROR, "cache directory %s%s is owned by uid %u, not by this user (uid %u): "
                "refused, since that user could plant code objects", dir,
                S_ISLNK(lst.st_mode) ? " (a symbolic link to it)" : "", (unsigned)st.st_uid, (unsigned)me);
        return KPC_E_IO;
    }
    if (S_ISLNK(lst.st_mode) && lst.st_uid != me && lst.st_uid != 0) {
        /* name the link's owner: the directory it points to is ours, the link is not */
        KPC_LOG(KPC_LOG_ERROR, "cache directory %s is a symbolic link owned by uid %u, not by this "
                "user (uid %u) or root: refused, since that user could point it elsewhere", dir,
                (unsigned)lst.st_uid, (unsigned)me);
        return KPC_E_IO;
    }
    if ((st.st_mode & 0077) != 0) {
        KPC_LOG(KPC_LOG_WARN, "cache directory %s has mode %03o: setting 0700", dir,
                (unsigned)(st.st_mode & 0777));
        if (chmod(dir, 0700) != 0)
            KPC_LOG(KPC_LOG_WARN, "chmod(%s): %s", dir, strerror(errno));
    }
    return KPC_OK;
}

kpc_status kpc_root_open(const char *dir, kpc_root **out)
{
    *out = NULL;
    if (dir == NULL || dir[0] == '\0')
        return KPC_E_INVALID;
    struct stat st;
    if (stat(dir, &st) != 0 && kpc__mkdir_p(dir, 0700) != 0) {
        KPC_LOG(KPC_LOG_ERROR, "mkdir(%s): %s", dir, strerror(errno));
        return KPC_E_IO;
    }
    kpc_status s = check_owner(dir);
    if (s != KPC_OK)
        return s;
    kpc_root *r = calloc(1, sizeof *r);
    if (r == NULL)
        return KPC_E_NOMEM;
    r->fd = r->v1_fd = -1;
    if (realpath(dir, r->path) == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "realpath(%s): %s", dir, strerror(errno));
        free(r);
        return KPC_E_IO;
    }
    snprintf(r->v1, sizeof r->v1, "%s/v1", r->path);
    snprintf(r->tmp, sizeof r->tmp, "%s/tmp", r->v1);
    r->v1_len = strlen(r->v1);
    /* O_PATH: a handle to resolve names from (openat), whatever the directory's mode */
    r->fd = open(r->path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (r->fd < 0) {
        KPC_LOG(KPC_LOG_ERROR, "open(%s): %s", r->path, strerror(errno));
        free(r);
        return KPC_E_IO;
    }
    if (kpc__mkdir_p(r->tmp, 0700) != 0)
        /* a read-only tree still serves reads */
        KPC_LOG(KPC_LOG_WARN, "mkdir(%s): %s: the cache is read-only for this process", r->tmp,
                strerror(errno));
    r->v1_fd = openat(r->fd, "v1", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    *out = r;
    return KPC_OK;
}

void kpc_root_close(kpc_root *r)
{
    if (r == NULL)
        return;
    if (r->v1_fd >= 0)
        close(r->v1_fd);
    close(r->fd);
    free(r);
}

bool kpc_root_realpath(const char *dir, char *out, size_t cap)
{
    char buf[PATH_MAX];
    if (dir == NULL || realpath(dir, buf) == NULL)
        return false;
    int n = snprintf(out, cap, "%s", buf);
    return n > 0 && (size_t)n < cap;
}

const char *kpc_root_path(const kpc_root *r) { return r->path; }
const char *kpc_root_v1(const kpc_root *r) { return r->v1; }
const char *kpc_root_tmp_dir(const kpc_root *r) { return r->tmp; }
int kpc_root_fd(const kpc_root *r) { return r->fd; }
int kpc_root_v1_fd(const kpc_root *r) { return r->v1_fd; }

const char *kpc_root_rel(const kpc_root *r, const char *path)
{
    if (strncmp(path, r->v1, r->v1_len) == 0 && path[r->v1_len] == '/')
        return path + r->v1_len + 1;
    return path;
}

bool kpc_root_target_ok(const char *target)
{
    /* the target names a directory: no separators, no dot-names */
    return target[0] != '\0' && target[0] != '.' && strchr(target, '/') == NULL && strcmp(target, "tmp") != 0;
}

int kpc_root_record_path(const kpc_root *r, const kpc_key *key, const char *target, const char *ext,
                         char *out, size_t cap, char *dir, size_t dir_cap)
{
    if (!kpc_root_target_ok(target))
        return -1;
    char hex[KPC_KEY_HEX];
    kpc__hex(key->bytes, sizeof key->bytes, hex);
    if (dir)
        snprintf(dir, dir_cap, "%s/%s/%.2s", r->v1, target, hex);
    int n = snprintf(out, cap, "%s/%s/%.2s/%s.%s", r->v1, target, hex, hex, ext);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int kpc_root_target_dir(const kpc_root *r, const char *target, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", r->v1, target);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int kpc_root_tmp_path(kpc_root *r, const kpc_key *key, char *out, size_t cap)
{
    char hex[KPC_KEY_HEX];
    kpc__hex(key->bytes, sizeof key->bytes, hex);
    int n = snprintf(out, cap, "%s/%s.%d.%u.tmp", r->tmp, hex, (int)getpid(),
                     atomic_fetch_add(&r->tmp_seq, 1));
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int kpc_root_memo_path(const kpc_root *r, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", r->v1, name);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int kpc_root_lock(const kpc_root *r, const char *name, bool nowait, const char **call, char *path,
                  size_t path_cap)
{
    char buf[PATH_MAX + 64];
    if (path == NULL)
        path = buf, path_cap = sizeof buf;
    snprintf(path, path_cap, "%s/%s.lock", r->v1, name);
    *call = "open";
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    *call = "flock";
    int rc;
    while ((rc = flock(fd, nowait ? LOCK_EX | LOCK_NB : LOCK_EX)) != 0 && errno == EINTR)
        ;
    if (rc != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

void kpc_root_segment_name(const char *root_path, char *out, size_t cap)
{
    snprintf(out, cap, "/kpc-%u-%016llx", (unsigned)geteuid(),
             (unsigned long long)XXH3_64bits(root_path, strlen(root_path)));
}
