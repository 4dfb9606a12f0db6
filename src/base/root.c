/*
 * root.c - the cache directory: opened once, held open, and with root_writer.c (the
 * staging files' names) the only place that knows how paths inside it are spelled
 * (layout: base/root.h).
 *
 * Invariant: a kpc_root names a directory that this user owns and no one else may write
 * (nor any directory above it, but sticky ones), and never changes after open. The trust
 * check refuses a cache another user could plant code objects in; it runs here, once,
 * for every user of the cache (the library, kpc, kpc-shm-reset), and the pack tier
 * applies the same rule to its packs (kpc_root_check_trust). Inside the tree the rule
 * goes on to every directory on the way to a record and every record file
 * (kpc_root_open_tree_dir, kpc_root_entry_refusal): none is followed through a symbolic
 * link, and each is checked on what was opened. kpc never changes the mode of a
 * directory it did not create: an unsafe one is refused with the fix to apply.
 */
#define _GNU_SOURCE
#include "base/root.h"
#include "base/root_private.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/settings.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The directories above real (a realpath): each owned by us or root, and writable by no
 * one else unless sticky. Else another user could rename the object away and put a
 * look-alike in its place (or make it so); as ssh checks the directories above its keys.
 * /tmp (sticky) is fine. A held directory or file protects a process that already opened
 * it; this check protects the processes that open it next. */
/* The group named by KPC_TRUST_GROUP, whose members are trusted with the tree as this
 * user is (false: none set, or a name that is no group: then none, logged). */
static bool trust_group(gid_t *out)
{
    const char *name = kpc__setting_text(KPC_SET_TRUST_GROUP);
    if (name == NULL)
        return false;
    struct group gr, *found = NULL;
    char buf[4096];
    if (getgrnam_r(name, &gr, buf, sizeof buf, &found) != 0 || found == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "KPC_TRUST_GROUP=%s: no such group: no group is trusted", name);
        return false;
    }
    *out = gr.gr_gid;
    return true;
}

/* st's group is the trusted one (its members may own and write what kpc takes code from) */
static bool of_group(const struct stat *st, bool has_group, gid_t group)
{
    return has_group && st->st_gid == group;
}

static kpc_status check_ancestors(const char *what, const char *real, bool has_group, gid_t group)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", real);
    uid_t me = geteuid();
    for (char *slash = strrchr(buf, '/'); slash != NULL; slash = strrchr(buf, '/')) {
        if (slash == buf)
            slash[1] = '\0'; /* "/" itself */
        else
            *slash = '\0';
        struct stat st;
        if (kpc__fstatat(AT_FDCWD, buf, &st, 0) != 0) {
            KPC_LOG(KPC_LOG_ERROR, "stat(%s): %s: cannot check the directories above %s %s", buf,
                    strerror(errno), what, real);
            return KPC_E_IO;
        }
        const char *why = NULL;
        char owner[64];
        bool group_ok = of_group(&st, has_group, group);
        mode_t others = S_IWOTH | (group_ok ? 0 : S_IWGRP);
        if ((st.st_mode & others) != 0 && (st.st_mode & S_ISVTX) == 0)
            why = (st.st_mode & S_IWOTH) ? "writable by every user" : "writable by its group";
        else if (st.st_uid != me && st.st_uid != 0 && !group_ok) {
            snprintf(owner, sizeof owner, "owned by uid %u", (unsigned)st.st_uid);
            why = owner;
        }
        if (why) {
            KPC_LOG(KPC_LOG_ERROR, "%s %s: the directory above it %s is %s (mode %04o, no sticky bit): "
                    "refused, since another user could rename it away and put a look-alike in its "
                    "place; kpc takes code only from where no one but you or root may write", what, real,
                    buf, why, (unsigned)(st.st_mode & 07777));
            return KPC_E_IO;
        }
        if (slash == buf)
            break;
    }
    return KPC_OK;
}

static kpc_status check_trust(const char *what, const char *path, const struct stat *st, bool root_may_own,
                              bool has_group, gid_t group)
{
    uid_t me = geteuid();
    bool group_ok = of_group(st, has_group, group);
    if (st->st_uid != me && !(root_may_own && st->st_uid == 0) && !group_ok) {
        KPC_LOG(KPC_LOG_ERROR, "%s %s is owned by uid %u, not by this user (uid %u)%s: refused, since "
                "that user could plant code objects in it", what, path, (unsigned)st->st_uid, (unsigned)me,
                root_may_own ? " or root" : "");
        return KPC_E_IO;
    }
    if ((st->st_mode & (S_IWOTH | (group_ok ? 0 : S_IWGRP))) != 0) {
        /* never chmod'ed: kpc changes the mode only of what it created (a cache dir of
         * /dev/shm made 0700 breaks the host) */
        KPC_LOG(KPC_LOG_ERROR, "%s %s is writable by %s (mode %04o): refused, since another user could "
                "plant code objects in it; if it is yours to change: chmod go-w %s", what, path,
                (st->st_mode & S_IWOTH) ? "every user" : "its group", (unsigned)(st->st_mode & 07777), path);
        return KPC_E_IO;
    }
    char real[PATH_MAX];
    if (realpath(path, real) == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "realpath(%s): %s", path, strerror(errno));
        return KPC_E_IO;
    }
    return check_ancestors(what, real, has_group, group);
}

kpc_status kpc_root_check_trust(const char *what, const char *path, const struct stat *st, bool root_may_own)
{
    return check_trust(what, path, st, root_may_own, false, 0);
}

/* The cache dir: a directory, trusted (kpc_root_check_trust), reached through no link
 * another user owns. */
static kpc_status check_owner(const char *dir, bool has_group, gid_t group)
{
    struct stat lst, st;
    if (kpc__fstatat(AT_FDCWD, dir, &lst, AT_SYMLINK_NOFOLLOW) != 0 ||
        kpc__fstatat(AT_FDCWD, dir, &st, 0) != 0) {
        KPC_LOG(KPC_LOG_ERROR, "stat(%s): %s", dir, strerror(errno));
        return KPC_E_IO;
    }
    if (!S_ISDIR(st.st_mode)) {
        KPC_LOG(KPC_LOG_ERROR, "cache directory %s is not a directory", dir);
        return KPC_E_IO;
    }
    uid_t me = geteuid();
    if (S_ISLNK(lst.st_mode) && lst.st_uid != me && lst.st_uid != 0 && !of_group(&lst, has_group, group)) {
        /* name the link's owner: the directory it points to is ours, the link is not */
        KPC_LOG(KPC_LOG_ERROR, "cache directory %s is a symbolic link owned by uid %u, not by this "
                "user (uid %u) or root: refused, since that user could point it elsewhere", dir,
                (unsigned)lst.st_uid, (unsigned)me);
        return KPC_E_IO;
    }
    kpc_status s = check_trust(S_ISLNK(lst.st_mode) ? "cache directory (through a symbolic link)" : "cache directory",
                               dir, &st, false, has_group, group);
    if (s == KPC_OK && (st.st_mode & (of_group(&st, has_group, group) ? 0007 : 0077)) != 0)
        KPC_LOG(KPC_LOG_WARN, "cache directory %s may be read by others (mode %04o): the records keep "
                "sources; chmod 700 %s to keep them private", dir, (unsigned)(st.st_mode & 07777), dir);
    return s;
}

const char *kpc_root_entry_refusal(const kpc_root *r, const struct stat *st, bool dir, char *why, size_t cap)
{
    bool group_ok = of_group(st, r->has_group, r->group);
    if (dir ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode))
        snprintf(why, cap, "%s", S_ISLNK(st->st_mode) ? "a symbolic link" : dir ? "not a directory"
                                                                               : "not a regular file");
    else if ((st->st_mode & (S_IWOTH | (group_ok ? 0 : S_IWGRP))) != 0)
        snprintf(why, cap, "writable by %s (mode %04o)", (st->st_mode & S_IWOTH) ? "every user" : "its group",
                 (unsigned)(st->st_mode & 07777));
    else if (st->st_uid != r->uid && st->st_uid != 0 && !group_ok)
        snprintf(why, cap, "owned by uid %u, not by this user (uid %u) or root", (unsigned)st->st_uid,
                 (unsigned)r->uid);
    else
        return NULL;
    return why;
}

void kpc_root_refuse(kpc_root *r, const char *path, const struct stat *st, const char *why)
{
    /* a directory of ours is mended by its mode (what is in it is checked on its own);
     * anything else goes, and kpc makes it again: a file others could write may hold
     * anything, and a link or another user's entry is not ours to change */
    const char *fix = S_ISDIR(st->st_mode) && st->st_uid == r->uid ? "chmod go-w"
                      : S_ISDIR(st->st_mode) ? "remove it (kpc makes it again): rm -r"
                                             : "remove it (kpc makes it again): rm";
    bool first = !atomic_exchange(&r->refusal_said, true);
    KPC_LOG(first ? KPC_LOG_ERROR : KPC_LOG_DEBUG, "%s in cache directory %s is %s: refused (nothing is read "
            "from it, written to it or followed), since another user could plant code objects through it; "
            "kpc takes code only from where no one but you or root may write; the fix: %s %s", path, r->path,
            why, fix, path);
}

/* A directory of the tree made by this process: what KPC_TRUST_GROUP's members need to
 * share it (the group's, setgid, writable by the group); left as made where no group is
 * trusted (0700). */
static void share_with_group(const kpc_root *r, int at, const char *name)
{
    if (!r->has_group)
        return;
    int fd = kpc__openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
    struct stat st;
    if (fd >= 0 && kpc__fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
        (fchown(fd, (uid_t)-1, r->group) != 0 || fchmod(fd, 02770) != 0))
        KPC_LOG(KPC_LOG_WARN, "%s/%s: %s: not shared with the group of KPC_TRUST_GROUP", r->path, name,
                strerror(errno));
    if (fd >= 0)
        close(fd);
}

/* kpc_root_open_tree_dir (opened: its fd), or kpc_root_check_tree_dir (only its
 * fstatat: 0) */
static int tree_dir(kpc_root *r, int at, const char *name, bool create, const char *path, struct stat *out,
                    bool open_it)
{
    struct stat st;
    int fd = 0;
    if (create) {
        if (kpc__mkdirat(at, name, 0700) == 0)
            share_with_group(r, at, name);
        else if (errno != EEXIST)
            goto failed;
    }
    if (!open_it) {
        if (kpc__fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            goto failed;
    } else if ((fd = kpc__openat(at, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0)) < 0) {
        /* O_NOFOLLOW with O_DIRECTORY: a symbolic link is ENOTDIR, never followed; st: what
         * stands there instead, refused below */
        if (errno != ENOTDIR || kpc__fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            goto failed;
    } else if (kpc__fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        goto failed;
    }
    char why[128];
    if (kpc_root_entry_refusal(r, &st, true, why, sizeof why) != NULL) {
        kpc_root_refuse(r, path, &st, why);
        if (open_it && fd >= 0)
            close(fd);
        errno = EPERM;
        return -1;
    }
    if (out)
        *out = st;
    return fd;
failed:
    if (errno == EPERM) /* EPERM says "refused" to the callers: a call's own is EACCES */
        errno = EACCES;
    return -1;
}

int kpc_root_open_tree_dir(kpc_root *r, int at, const char *name, bool create, const char *path,
                           struct stat *out)
{
    return tree_dir(r, at, name, create, path, out, true);
}

int kpc_root_check_tree_dir(kpc_root *r, int at, const char *name, bool create, const char *path)
{
    return tree_dir(r, at, name, create, path, NULL, false);
}

kpc_status kpc_root_open(const char *dir, kpc_root **out)
{
    *out = NULL;
    if (dir == NULL || dir[0] == '\0')
        return KPC_E_INVALID;
    struct stat st;
    if (kpc__fstatat(AT_FDCWD, dir, &st, 0) != 0 && kpc__mkdir_p(dir, 0700) != 0) {
        KPC_LOG(KPC_LOG_ERROR, "mkdir(%s): %s", dir, strerror(errno));
        return KPC_E_IO;
    }
    gid_t group = 0;
    bool has_group = trust_group(&group);
    kpc_status s = check_owner(dir, has_group, group);
    if (s != KPC_OK)
        return s;
    kpc_root *r = calloc(1, sizeof *r);
    if (r == NULL)
        return KPC_E_NOMEM;
    r->fd = r->v1_fd = r->tmp_fd = -1;
    r->has_group = has_group;
    r->group = group;
    r->uid = geteuid();
    if (realpath(dir, r->path) == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "realpath(%s): %s", dir, strerror(errno));
        free(r);
        return KPC_E_IO;
    }
    snprintf(r->v1, sizeof r->v1, "%s/v1", r->path);
    snprintf(r->tmp, sizeof r->tmp, "%s/tmp", r->v1);
    r->v1_len = strlen(r->v1);
    /* O_PATH: a handle to resolve names from (openat), whatever the directory's mode */
    r->fd = kpc__open(r->path, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    if (r->fd < 0) {
        KPC_LOG(KPC_LOG_ERROR, "open(%s): %s", r->path, strerror(errno));
        free(r);
        return KPC_E_IO;
    }
    /* the directory held is the one checked: a swap between the checks and the open is
     * caught here (a look-alike tree must never be read as ours) */
    struct stat held;
    if (kpc__fstat(r->fd, &held) != 0 || (held.st_uid != geteuid() && !of_group(&held, has_group, group)) ||
        !S_ISDIR(held.st_mode)) {
        KPC_LOG(KPC_LOG_ERROR, "cache directory %s changed while it was opened: refused", r->path);
        close(r->fd);
        free(r);
        return KPC_E_IO;
    }
    /* v1/ and v1/tmp made from the held directory, never by path again, and held: each
     * a directory (never a symbolic link followed) no one else may write, as every
     * directory on the way to a record (kpc_root_open_tree_dir) */
    r->v1_fd = kpc_root_open_tree_dir(r, r->fd, "v1", true, r->v1, NULL);
    if (r->v1_fd >= 0)
        r->tmp_fd = kpc_root_open_tree_dir(r, r->v1_fd, "tmp", true, r->tmp, NULL);
    if (r->v1_fd < 0 || r->tmp_fd < 0) {
        if (errno == EPERM) { /* refused, logged: the tree as the directory itself */
            kpc_root_close(r);
            return KPC_E_IO;
        }
        /* a read-only tree still serves reads */
        r->tree_errno = errno;
        KPC_LOG(KPC_LOG_WARN, "mkdir(%s): %s: the cache is read-only for this process", r->tmp,
                strerror(errno));
    }
    if (r->v1_fd < 0)
        r->v1_fd = kpc_root_open_tree_dir(r, r->fd, "v1", false, r->v1, NULL);
    *out = r;
    return KPC_OK;
}

void kpc_root_close(kpc_root *r)
{
    if (r == NULL)
        return;
    if (r->v1_fd >= 0)
        close(r->v1_fd);
    if (r->tmp_fd >= 0)
        close(r->tmp_fd);
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
int kpc_root_tmp_fd(const kpc_root *r) { return r->tmp_fd; }
bool kpc_root_group(const kpc_root *r, gid_t *group)
{
    *group = r->group;
    return r->has_group;
}
int kpc_root_tree_errno(const kpc_root *r) { return r->tree_errno; }

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

/* s's n bytes at p, then the byte after; where the next piece goes */
static char *put(char *p, const char *s, size_t n, char after)
{
    memcpy(p, s, n);
    p[n] = after;
    return p + n + 1;
}

int kpc_root_record_path(const kpc_root *r, const kpc_key *key, const char *target, const char *ext,
                         char *out, size_t cap, char *dir, size_t dir_cap)
{
    if (!kpc_root_target_ok(target))
        return -1;
    /* v1/<target>/<2 hex>/<32 hex>.<ext>, laid down piece by piece: snprintf's format
     * machinery was a third of the instructions of a new process's disk hit */
    char hex[KPC_KEY_HEX];
    kpc__hex(key->bytes, sizeof key->bytes, hex);
    size_t t = strlen(target), e = strlen(ext);
    size_t fan = r->v1_len + 1 + t + 1 + 2;              /* v1/<target>/<2 hex> */
    size_t need = fan + 1 + (KPC_KEY_HEX - 1) + 1 + e + 1; /* /<32 hex>.<ext> and a NUL */
    if (need > cap || (dir && fan >= dir_cap))
        return -1;
    char *p = put(out, r->v1, r->v1_len, '/');
    p = put(p, target, t, '/');
    p = put(p, hex, 2, '/');
    if (dir) {
        memcpy(dir, out, fan);
        dir[fan] = '\0';
    }
    p = put(p, hex, KPC_KEY_HEX - 1, '.');
    memcpy(p, ext, e + 1);
    return 0;
}

int kpc_root_target_dir(const kpc_root *r, const char *target, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", r->v1, target);
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
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s.lock", name);
    if (r->v1_fd < 0) {
        errno = ENOENT;
        return -1;
    }
    int fd = kpc__openat(r->v1_fd, rel, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    *call = "flock";
    int rc;
    while ((rc = kpc__flock(fd, nowait ? LOCK_EX | LOCK_NB : LOCK_EX)) != 0 &&
           errno == EINTR)
        ;
    if (rc != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

int kpc_root_open_memo(const kpc_root *r, const char *name, int flags, mode_t mode)
{
    if (r->v1_fd < 0 || strchr(name, '/') != NULL) {
        errno = ENOENT;
        return -1;
    }
    /* a memo that is a FIFO must not hang the process opening it */
    return kpc_open_regular(r->v1_fd, name, flags | O_NOFOLLOW, mode, NULL);
}

FILE *kpc_root_read_memo(const kpc_root *r, const char *name)
{
    int fd = kpc_root_open_memo(r, name, O_RDONLY, 0);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
    if (f == NULL && fd >= 0)
        close(fd);
    return f;
}

int kpc_root_rename_memo(const kpc_root *r, const char *from, const char *to)
{
    if (r->v1_fd < 0) {
        errno = ENOENT;
        return -1;
    }
    return kpc__renameat(r->v1_fd, from, r->v1_fd, to);
}

int kpc_root_unlink_memo(const kpc_root *r, const char *name)
{
    return r->v1_fd < 0 ? -1 : kpc__unlinkat(r->v1_fd, name, 0);
}
