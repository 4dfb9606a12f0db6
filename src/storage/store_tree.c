/*
 * store_tree.c - the way down the disk tree to a record (storage/store.c's reads, writes
 * and removals): from the root's held v1/, one directory at a time, never through a
 * symbolic link, each checked as kpc's trust rule asks of every directory on the way
 * (base/root.h: kpc_root_open_tree_dir, docs/trust.md). v1/<target> is opened and
 * checked once per store and held (a hit pays for it once per process); a record's
 * <2 hex> directory is checked each time the record is reached through it.
 */
#define _GNU_SOURCE
#include "storage/store_private.h"
#include "base/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void kpc_store_tree_init(kpc_store *st)
{
    pthread_mutex_init(&st->held_lock, NULL);
}

void kpc_store_tree_close(kpc_store *st)
{
    for (int i = 0; i < st->n_held; i++)
        close(st->held[i].fd);
    for (int i = 0; i < st->n_retired; i++)
        close(st->retired[i]);
    pthread_mutex_destroy(&st->held_lock);
}

/* The held v1/<target> of name, or NULL (none held); under held_lock */
static kpc_held_dir *held_dir(kpc_store *st, const char *name)
{
    for (int i = 0; i < st->n_held; i++)
        if (strcmp(st->held[i].name, name) == 0)
            return &st->held[i];
    return NULL;
}

/* v1/<target> (dir: its path), checked as every directory of the tree: the held one,
 * else opened (made first where create) and held from now on; *owned when the caller
 * closes it (no room to hold it). fresh: the held one was found replaced (a cache
 * cleared by hand: rm -r v1/<target>): open the directory there now, and hold that one,
 * retiring the old (a thread may still be using it: closed with the store). */
static int target_dir(kpc_store *st, int v1, const char *target, const char *dir, bool create, bool fresh,
                      bool *owned)
{
    *owned = false;
    size_t len = strlen(target);
    pthread_mutex_lock(&st->held_lock);
    kpc_held_dir *h = len < sizeof st->held[0].name ? held_dir(st, target) : NULL;
    int fd = h && !fresh ? h->fd : -1;
    pthread_mutex_unlock(&st->held_lock);
    if (fd >= 0)
        return fd;
    struct stat sb;
    fd = kpc_root_open_tree_dir(st->root, v1, target, create, dir, &sb);
    if (fd < 0 || len >= sizeof st->held[0].name) {
        *owned = fd >= 0;
        return fd;
    }
    pthread_mutex_lock(&st->held_lock);
    h = held_dir(st, target);
    if (h && h->dev == sb.st_dev && h->ino == sb.st_ino) { /* another thread held it meanwhile */
        close(fd);
        fd = h->fd;
    } else if (h && st->n_retired < KPC_STORE_HELD) {
        st->retired[st->n_retired++] = h->fd;
        h->fd = fd, h->dev = sb.st_dev, h->ino = sb.st_ino;
    } else if (h == NULL && st->n_held < KPC_STORE_HELD) {
        h = &st->held[st->n_held++];
        memcpy(h->name, target, len + 1);
        h->fd = fd, h->dev = sb.st_dev, h->ino = sb.st_ino;
    } else
        *owned = true;
    pthread_mutex_unlock(&st->held_lock);
    return fd;
}

/* The held v1/<target> is no longer what v1/ holds under its name (or v1/ holds none:
 * a write makes it again) */
static bool target_replaced(kpc_store *st, int v1, const char *target)
{
    struct stat now;
    if (kpc__fstatat(v1, target, &now, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT;
    pthread_mutex_lock(&st->held_lock);
    kpc_held_dir *h = held_dir(st, target);
    bool replaced = h && (h->dev != now.st_dev || h->ino != now.st_ino);
    pthread_mutex_unlock(&st->held_lock);
    return replaced;
}

void kpc_store_record_at_done(kpc_record_at *a)
{
    if (a->owned)
        close(a->fd);
}

/* dst (cap bytes) as src's first n bytes, cut to fit: a copy without snprintf's format
 * machinery, which a new process's disk hit would otherwise run three times here */
static void copy_prefix(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Where the record of a path the root built (v1/<target>/<2 hex>/<name>) is reached
 * from, never through a symbolic link, each directory made first where create and
 * checked: v1/<target> opened (kpc_root_open_tree_dir) once and held, and its <2 hex>
 * checked where the record is opened (kpc_root_check_tree_dir: only this user, root and
 * the trusted group may write v1/<target>, so none other may put anything in its place
 * before the record's openat, which follows no link in it: O_NOFOLLOW names the last
 * component, and the one before it is the directory just checked). 0, or -1 with errno
 * (EPERM: refused, logged). */
int kpc_store_record_at(kpc_store *st, const char *path, bool create, kpc_record_at *out)
{
    int v1 = kpc_root_v1_fd(st->root);
    if (v1 < 0) { /* no v1/: say what kept it from being made, not ENOENT */
        int why = kpc_root_tree_errno(st->root);
        errno = create && why ? why : ENOENT;
        return -1;
    }
    const char *r = kpc_root_rel(st->root, path);
    const char *fan = strchr(r, '/');
    const char *file = fan ? strchr(fan + 1, '/') : NULL;
    if (file == NULL || (size_t)(fan - r) >= 256 || file - fan != 3 || strchr(file + 1, '/') != NULL) {
        errno = EINVAL;
        return -1;
    }
    char dir[4400], target[256], fan_name[3] = {fan[1], fan[2], '\0'};
    copy_prefix(target, sizeof target, r, (size_t)(fan - r));
    for (int fresh = 0; fresh <= 1; fresh++) {
        copy_prefix(dir, sizeof dir, path, (size_t)(fan - path));
        out->fd = target_dir(st, v1, target, dir, create, fresh, &out->owned);
        if (out->fd < 0)
            return -1;
        copy_prefix(dir, sizeof dir, path, (size_t)(file - path));
        if (kpc_root_check_tree_dir(st->root, out->fd, fan_name, create, dir) == 0) {
            out->name = fan + 1;
            return 0;
        }
        int err = errno;
        kpc_store_record_at_done(out);
        errno = err;
        if (errno != ENOENT || out->owned || fresh || !target_replaced(st, v1, target))
            break;
    }
    return -1;
}
