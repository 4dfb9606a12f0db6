/*
 * store.c - the disk tree: one file per record, read, written and removed here
 * (walks, usage, pruning: store_walk.c); and the disk tree as the first storage tier
 * (its ops serve the shared directory's tree too, at a second root: storage/shared_tier.c).
 * Paths come from the cache directory's owner (base/root.h):
 *
 *   <root>/v1/<target>/<first 2 hex of key>/<32 hex key>.co    code object record
 *   <root>/v1/<target>/<2 hex>/<32 hex key>.log                 failed-compile log record
 *   <root>/v1/<target>/<2 hex>/<32 hex key>.mf                  manifest (core/manifest.h)
 *   <root>/v1/tmp/                                              staging, same file system
 *   <root>/v1/prune.lock                                        one pruner at a time (flock)
 *
 * Invariants: a record file is never modified in place. It is written whole to an
 * O_EXCL temp file, fsync'ed and renamed into place, so a reader sees a whole file or
 * none, and a reader racing a pruner either has the file open (and reads it whole) or
 * misses cleanly. Files are read with pread, never mmap (a file truncated under an mmap
 * SIGBUSes). Every directory on the way to a record is reached from the held v1/ one
 * at a time, never through a symbolic link, and checked, and so is the record file as
 * opened (base/root.h: kpc_root_open_tree_dir): a directory or file another user could
 * write is a miss and never written. Every read checks magic, version, sizes, key,
 * kind, target and both checksums; a file that fails is removed (if it is still the one
 * we read) and logged.
 * The file's mtime is its last use: a hit refreshes it at most once a minute. The size
 * limit is kept after every write by pruning the least recently used files down to 90%.
 * Record format: docs/file-format.md.
 */
#define _GNU_SOURCE
#include "storage/store_private.h"
#include "base/hash.h"
#include "base/fault.h"
#include "base/file_time.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOUCH_INTERVAL_NS (60ull * 1000000000ull)

/* ---- paths ----------------------------------------------------------------------------- */
static const char *kind_ext(uint32_t kind)
{
    return kind == KPC_RECORD_LOG ? "log" : kind == KPC_RECORD_MANIFEST ? "mf" : "co";
}

static int record_path(const kpc_store *st, const kpc_key *key, const char *target, uint32_t kind,
                       char *out, size_t cap, char *dir, size_t dir_cap)
{
    return kpc_root_record_path(st->root, key, target, kind_ext(kind), out, cap, dir, dir_cap);
}

/* ---- usage estimate -------------------------------------------------------------------- */
void kpc_store_share_usage(kpc_store *st, _Atomic uint64_t *bytes, _Atomic uint64_t *files,
                           _Atomic uint32_t *known)
{
    st->bytes = bytes;
    st->files = files;
    st->known = known;
}

void kpc_store_usage_add(kpc_store *st, int64_t bytes, int64_t files)
{
    atomic_fetch_add(st->bytes, (uint64_t)bytes);
    atomic_fetch_add(st->files, (uint64_t)files);
}

/* ---- open ------------------------------------------------------------------------------ */
static kpc_status open_at(kpc_root *root, uint64_t max_bytes, bool shared, kpc_store **out)
{
    *out = NULL;
    kpc_store *store = calloc(1, sizeof *store);
    if (store == NULL)
        return KPC_E_NOMEM;
    store->root = root;
    store->max_bytes = max_bytes;
    store->shared = shared;
    kpc_store_tree_init(store);
    kpc_store_share_usage(store, &store->local_bytes, &store->local_files, &store->local_known);
    kpc_store_sweep_tmp(store, false); /* what killed writers left: nobody else removes it */
    *out = store;
    return KPC_OK;
}

kpc_status kpc_store_open_root(kpc_root *root, uint64_t max_bytes, kpc_store **out)
{
    return open_at(root, max_bytes, false, out);
}

static kpc_status open_dir(const char *dir, uint64_t max_bytes, bool shared, kpc_store **out)
{
    *out = NULL;
    kpc_root *root;
    kpc_status s = kpc_root_open(dir, &root);
    if (s == KPC_OK && (s = open_at(root, max_bytes, shared, out)) != KPC_OK)
        kpc_root_close(root);
    if (s == KPC_OK)
        (*out)->own_root = true;
    return s;
}

kpc_status kpc_store_open(const char *dir, uint64_t max_bytes, kpc_store **out)
{
    return open_dir(dir, max_bytes, false, out);
}

kpc_status kpc_store_open_shared(const char *dir, kpc_store **out)
{
    return open_dir(dir, UINT64_MAX, true, out);
}

void kpc_store_close(kpc_store *st)
{
    if (st == NULL)
        return;
    kpc_store_tree_close(st);
    if (st->own_root)
        kpc_root_close(st->root);
    free(st);
}

const kpc_root *kpc_store_root(const kpc_store *st)
{
    return st->root;
}

enum kpc_store_removal kpc_store_remove_if_same_at(int dirfd, const char *name, int fd)
{
    struct stat a, b;
    if (kpc__fstat(fd, &a) != 0 || kpc__fstatat(dirfd, name, &b, AT_SYMLINK_NOFOLLOW) != 0 || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino)
        return KPC_STORE_REPLACED;
    if (kpc__unlinkat(dirfd, name, S_ISDIR(b.st_mode) ? AT_REMOVEDIR : 0) != 0)
        return errno == ENOENT ? KPC_STORE_REPLACED : KPC_STORE_NOT_REMOVED;
    return KPC_STORE_REMOVED;
}

enum kpc_store_removal kpc_store_remove_if_same(kpc_store *st, const char *path, int fd)
{
    kpc_record_at a;
    if (kpc_store_record_at(st, path, false, &a) != 0)
        return KPC_STORE_REPLACED;
    enum kpc_store_removal r = kpc_store_remove_if_same_at(a.fd, a.name, fd);
    int err = errno;
    kpc_store_record_at_done(&a);
    errno = err;
    return r;
}

int kpc_store_unlink(kpc_store *st, const char *path)
{
    kpc_record_at a;
    int rc = -1;
    if (kpc_store_record_at(st, path, false, &a) == 0) {
        rc = kpc__unlinkat(a.fd, a.name, 0);
        int err = errno;
        kpc_store_record_at_done(&a);
        errno = err;
    }
    if (rc != 0 && errno != ENOENT && errno != EPERM) /* EPERM: a refused directory, logged */
        KPC_LOG(KPC_LOG_ERROR, "unlink(%s): %s", path, strerror(errno));
    return rc;
}

const char *kpc_store_read_fd(int fd, const kpc_key *key, const char *target, uint32_t kind,
                              kpc_record *out, kpc_status *status, struct stat *sb)
{
    void *buf;
    size_t size;
    *status = kpc__read_fd_stat(fd, KPC_RECORD_MAX + KPC_RECORD_HEADER, &buf, &size, sb);
    if (*status == KPC_E_CORRUPT)
        return "not a regular file, or too large";
    if (*status != KPC_OK)
        return *status == KPC_E_NOMEM ? "out of memory" : "read failed";
    const char *why = kpc_record_take(buf, size, key, target, kind, out);
    *status = why ? KPC_E_CORRUPT : KPC_OK;
    return why;
}

/* kpc_store_read of the record name in its directory at */
static kpc_status read_at(kpc_store *st, int at, const char *name, const char *path, const kpc_key *key,
                          const char *target, uint32_t kind, kpc_record *out)
{
    /* O_NONBLOCK: a FIFO planted where a record should be must not hang the open (it
     * is then refused as not a regular file); it changes nothing for a regular file */
    int fd = kpc__openat(at, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return KPC_E_NOT_FOUND;
        if (errno == ELOOP) { /* a symlink where a record should be: never followed */
            struct stat lsb;
            bool is_link = kpc__fstatat(at, name, &lsb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lsb.st_mode);
            if (is_link && kpc__unlinkat(at, name, 0) == 0) {
                KPC_LOG(KPC_LOG_WARN, "%s is a symbolic link: removed, it will be rebuilt", path);
                kpc_store_usage_add(st, -(int64_t)lsb.st_size, -1); /* the walk counted it */
            } else
                KPC_LOG(KPC_LOG_WARN, "%s is a symbolic link and could not be removed: %s", path,
                        strerror(errno));
            return KPC_E_CORRUPT;
        }
        KPC_LOG(KPC_LOG_WARN, "open(%s): %s", path, strerror(errno));
        return KPC_E_IO;
    }
    kpc_status s;
    struct stat sb;
    sb.st_mode = 0;
    const char *why = kpc_store_read_fd(fd, key, target, kind, out, &s, &sb);
    if (why != NULL) {
        if (s == KPC_E_CORRUPT) {
            /* logged after the removal, as it went (a failure is reported, not hidden) */
            struct stat cur;
            bool have = kpc__fstat(fd, &cur) == 0;
            enum kpc_store_removal r = kpc_store_remove_if_same_at(at, name, fd);
            if (r == KPC_STORE_REMOVED) {
                KPC_LOG(KPC_LOG_WARN, "damaged cache file %s (%s): removed, it will be rebuilt", path, why);
                if (have && S_ISREG(cur.st_mode))
                    kpc_store_usage_add(st, -(int64_t)cur.st_size, -1);
            } else if (r == KPC_STORE_NOT_REMOVED)
                KPC_LOG(KPC_LOG_WARN, "could not remove damaged cache file %s (%s): %s; it is not "
                        "used, and built again", path, why, strerror(errno));
            else
                KPC_LOG(KPC_LOG_WARN, "damaged cache file %s (%s): already replaced or removed", path, why);
        } else
            KPC_LOG(KPC_LOG_WARN, "%s: %s", path, why);
        close(fd);
        return s;
    }
    char refusal[128]; /* sb: the read's own fstat */
    if (kpc_root_entry_refusal(st->root, &sb, false, refusal, sizeof refusal) != NULL) {
        /* another user's file, or one others may write: a miss, never served; the
         * build's rename replaces it */
        kpc_root_refuse(st->root, path, &sb, refusal);
        kpc_record_free(out);
        memset(out, 0, sizeof *out);
        close(fd);
        return KPC_E_CORRUPT;
    }
    uint64_t now = kpc__wall_ns();
    if ((uint64_t)kpc__ts_ns(sb.st_mtim) + TOUCH_INTERVAL_NS < now &&
        futimens(fd, NULL) != 0)
        KPC_LOG(KPC_LOG_DEBUG, "futimens(%s): %s", path, strerror(errno));
    close(fd);
    return KPC_OK;
}

kpc_status kpc_store_read(kpc_store *st, const kpc_key *key, const char *target, uint32_t kind,
                          kpc_record *out)
{
    char path[4400];
    memset(out, 0, sizeof *out);
    if (!kpc_root_target_ok(target) || record_path(st, key, target, kind, path, sizeof path, NULL, 0) != 0)
        return KPC_E_INVALID;
    /* reached from the held v1/, one checked directory at a time: a cache dir renamed
     * away and replaced is never read, and no directory of the tree that another user
     * could write, nor a symbolic link in it, leads to a record */
    kpc_record_at a;
    if (kpc_store_record_at(st, path, false, &a) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return KPC_E_NOT_FOUND;
        if (errno == EPERM)
            return KPC_E_CORRUPT; /* refused, logged */
        KPC_LOG(KPC_LOG_WARN, "open(%s): %s", path, strerror(errno));
        return KPC_E_IO;
    }
    kpc_status s = read_at(st, a.fd, a.name, path, key, target, kind, out);
    kpc_store_record_at_done(&a);
    return s;
}

static void write_failed(kpc_store *st, const char *call, const char *path)
{
    bool first = atomic_fetch_add(&st->write_failures, 1) == 0;
    if (st->shared) /* a read-only shared directory is a choice: said once, not on every build */
        KPC_LOG(first ? KPC_LOG_WARN : KPC_LOG_DEBUG, "%s(%s): %s: the object is not stored in the "
                "shared directory", call, path, strerror(errno));
    else
        KPC_LOG(first ? KPC_LOG_ERROR : KPC_LOG_WARN, "%s(%s): %s: the object is not cached on disk", call,
                path, strerror(errno));
}

/* sync: fsync before the rename. A copy of a record another tier holds skips it: after
 * a crash the renamed file may be short or empty, which the reader's checks refuse as a
 * miss, and the other tier still has the record. */
static kpc_status write_record(kpc_store *st, const kpc_record *rec, const void *code,
                               const void *names_or_log, size_t second_size, bool sync)
{
    kpc_record r = *rec;
    const void *first = code;
    if (rec->kind == KPC_RECORD_LOG) {
        r.code_size = strlen(code); /* the log text is the "code" part */
        second_size = 0;
        r.request_size = 0; /* a failed compile is never replayed */
    }
    if (r.request_size && r.request == NULL)
        return KPC_E_INVALID;
    r.names_size = second_size; /* the header says what follows it */
    char path[4400], dir[4400], tmp[4400];
    if (!kpc_root_target_ok(r.target) || record_path(st, &r.key, r.target, r.kind, path, sizeof path, dir, sizeof dir) != 0)
        return KPC_E_INVALID;
    if (kpc_root_tmp_path(st->root, &r.key, tmp, sizeof tmp) != 0)
        return KPC_E_INVALID;
    kpc_record_at a;
    if (kpc_store_record_at(st, path, true, &a) != 0) {
        if (errno != EPERM) /* refused: logged, never written */
            write_failed(st, "mkdir", dir);
        return KPC_E_IO;
    }
    uint8_t header[KPC_RECORD_HEADER];
    kpc_record_header(header, &r, first, names_or_log);

    /* staged in the held v1/tmp, renamed into the record's checked directory */
    int tmp_at = kpc_root_tmp_fd(st->root);
    const char *tmp_name = strrchr(tmp, '/') + 1;
    int fd = tmp_at < 0 ? -1 : kpc__openat(tmp_at, tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        if (tmp_at < 0)
            errno = kpc_root_tree_errno(st->root) ? kpc_root_tree_errno(st->root) : ENOENT;
        write_failed(st, "open", tmp);
        kpc_store_record_at_done(&a);
        return KPC_E_IO;
    }
    gid_t group;
    if (kpc_root_group(st->root, &group) && (fchown(fd, (uid_t)-1, group) != 0 || fchmod(fd, 0640) != 0))
        KPC_LOG(KPC_LOG_DEBUG, "%s: %s: not readable by the group of KPC_TRUST_GROUP", tmp, strerror(errno));
    const char *failed = NULL;
    if (kpc__write_all(fd, header, KPC_RECORD_HEADER) != 0 || kpc__write_all(fd, first, r.code_size) != 0 ||
        (second_size && kpc__write_all(fd, names_or_log, second_size) != 0) ||
        (r.request_size && kpc__write_all(fd, r.request, r.request_size) != 0))
        failed = "write";
    else if (sync && kpc__fsync(fd) != 0)
        failed = "fsync";
    int saved = errno;
    close(fd);
    if (failed == NULL && (kpc__renameat(tmp_at, tmp_name, a.fd, a.name) != 0))
        failed = "rename", saved = errno;
    kpc_store_record_at_done(&a);
    if (failed != NULL) {
        unlinkat(tmp_at, tmp_name, 0); /* bare: a clean-up after a failure must not fail */
        errno = saved;
        write_failed(st, failed, failed[0] == 'r' ? path : tmp);
        return KPC_E_IO;
    }
    if (st->shared)
        return KPC_OK; /* no estimate, no limit: kpc_store_open_shared */
    kpc_store_usage_add(st, KPC_RECORD_HEADER + (int64_t)(r.code_size + second_size + r.request_size), 1);
    if (atomic_load(st->known) == 0) {
        uint64_t bytes, files;
        kpc_store_usage(st, &bytes, &files); /* sets the estimate */
    }
    if (atomic_load(st->bytes) > st->max_bytes)
        kpc_store_prune(st, st->max_bytes / 10 * 9, NULL, NULL);
    return KPC_OK;
}

kpc_status kpc_store_remove_refused(kpc_store *st, const kpc_key *key, const char *target,
                                   const void *code, size_t size)
{
    char path[4400];
    if (!kpc_root_target_ok(target) || record_path(st, key, target, KPC_RECORD_CODE, path, sizeof path, NULL, 0) != 0)
        return KPC_E_INVALID;
    kpc_record_at a;
    if (kpc_store_record_at(st, path, false, &a) != 0)
        return KPC_E_NOT_FOUND;
    int fd = kpc__openat(a.fd, a.name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);
    if (fd < 0) {
        kpc_store_record_at_done(&a);
        return KPC_E_NOT_FOUND;
    }
    kpc_record rec;
    kpc_status s;
    struct stat sb;
    memset(&rec, 0, sizeof rec);
    bool same = kpc_store_read_fd(fd, key, target, KPC_RECORD_CODE, &rec, &s, &sb) == NULL &&
                rec.code_size == size && memcmp(rec.payload, code, size) == 0;
    kpc_record_free(&rec);
    /* another process may have replaced the refused file with a fresh build already:
     * only the bytes the runtime refused go, and only if that file is still in place */
    enum kpc_store_removal r = same ? kpc_store_remove_if_same_at(a.fd, a.name, fd) : KPC_STORE_REPLACED;
    if (r == KPC_STORE_REMOVED)
        kpc_store_usage_add(st, -(int64_t)sb.st_size, -1);
    /* KPC_STORE_NOT_REMOVED: still there (a read-only directory): the caller must not read it */
    s = r == KPC_STORE_REMOVED ? KPC_OK : r == KPC_STORE_REPLACED ? KPC_E_NOT_FOUND : KPC_E_IO;
    close(fd);
    kpc_store_record_at_done(&a);
    return s;
}


/* ---- the disk tree as a tier ------------------------------------------------------------ */
kpc_status kpc_store_write(kpc_store *st, const kpc_record *rec, const void *code,
                           const void *names_or_log, size_t second_size)
{
    return write_record(st, rec, code, names_or_log, second_size, true);
}

typedef struct disk_tier {
    kpc_tier t; /* first: a kpc_tier * is a disk_tier * */
    kpc_store *store;
} disk_tier;

static kpc_status disk_read(kpc_tier *t, const kpc_key *key, const char *target, uint32_t kind,
                            kpc_record *out)
{
    return kpc_store_read(((disk_tier *)t)->store, key, target, kind, out);
}

static kpc_status disk_write(kpc_tier *t, const kpc_record *rec, const void *first, const void *second)
{
    if (rec->kind == KPC_RECORD_LOG) { /* the store takes the log as a C string */
        char *text = malloc(rec->code_size + 1);
        if (text == NULL)
            return KPC_E_NOMEM;
        memcpy(text, first, rec->code_size);
        text[rec->code_size] = '\0';
        kpc_status s = kpc_store_write(((disk_tier *)t)->store, rec, text, NULL, 0);
        free(text);
        return s;
    }
    return kpc_store_write(((disk_tier *)t)->store, rec, first, second, rec->names_size);
}

static kpc_status disk_copy(kpc_tier *t, const kpc_record *rec, const void *first, const void *second)
{
    if (rec->kind == KPC_RECORD_LOG)
        return disk_write(t, rec, first, second);
    return write_record(((disk_tier *)t)->store, rec, first, second, rec->names_size, false);
}

static kpc_status disk_remove_same(kpc_tier *t, const kpc_key *key, const char *target, const void *code,
                                   size_t size)
{
    return kpc_store_remove_refused(((disk_tier *)t)->store, key, target, code, size);
}

static void disk_close(kpc_tier *t)
{
    kpc_store_close(((disk_tier *)t)->store);
    free(t);
}

static const kpc_tier_ops disk_ops = {
    .read = disk_read,
    .write = disk_write,
    .remove_same = disk_remove_same,
    .copy = disk_copy,
    .close = disk_close,
};

kpc_status kpc_store_tier(kpc_store *st, kpc_tier **out)
{
    *out = NULL;
    disk_tier *d = calloc(1, sizeof *d);
    if (d == NULL) {
        kpc_store_close(st);
        return KPC_E_NOMEM;
    }
    d->store = st;
    d->t.ops = &disk_ops;
    *out = &d->t;
    return KPC_OK;
}

kpc_status kpc_store_tier_open(const kpc_tier_env *env, kpc_tier **out)
{
    *out = NULL;
    if (env->root == NULL)
        return KPC_E_NOT_FOUND;
    kpc_store *st;
    kpc_status s = kpc_store_open_root(env->root, env->disk_max_bytes, &st);
    return s == KPC_OK ? kpc_store_tier(st, out) : s;
}

kpc_store *kpc_store_of_tier(kpc_tier *t)
{
    return t && t->ops == &disk_ops ? ((disk_tier *)t)->store : NULL;
}
