/*
 * store_walk.c - the disk tree as a whole: walking every record (kpc ls, verify), the
 * usage figures, pruning to a size (least recently used first, one pruner at a time,
 * under v1/prune.lock) and clearing. A walk meets files that other processes create,
 * replace and remove meanwhile: a vanished file is skipped, a damaged one is removed
 * only while it still holds the bytes the walk checked.
 */
#define _GNU_SOURCE
#include "storage/store_private.h"
#include "base/fault.h"
#include "base/file_time.h"
#include "base/log.h"
#include "base/settings.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>


/* ---- walking the tree ---------------------------------------------------------------- */
enum walk_mode { WALK_STAT, WALK_HEADER, WALK_VERIFY };

static bool record_name(const char *name, uint32_t *kind)
{
    size_t n = strlen(name);
    if (n == 35 && strcmp(name + 32, ".co") == 0)
        *kind = KPC_RECORD_CODE;
    else if (n == 36 && strcmp(name + 32, ".log") == 0)
        *kind = KPC_RECORD_LOG;
    else if (n == 35 && strcmp(name + 32, ".mf") == 0)
        *kind = KPC_RECORD_MANIFEST;
    else
        return false;
    kpc_key k;
    char hex[33];
    memcpy(hex, name, 32);
    hex[32] = '\0';
    return kpc__unhex(hex, k.bytes, 16);
}

/* A directory opened for reading from its fd (an O_PATH one of the tree). */
static DIR *read_dir(int at)
{
    int fd = kpc__openat(at, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return d;
}

/* A directory of the tree below at, opened for reading from held fds only (no path is
 * walked again from the root: a directory swapped for a link mid-walk must not lead
 * elsewhere), never through a symbolic link, and checked as every directory on the way
 * to a record is (kpc_root_open_tree_dir: errno EPERM when refused, logged). */
static DIR *open_dir_at(kpc_store *st, int at, const char *name, const char *path)
{
    int fd = kpc_root_open_tree_dir(st->root, at, name, false, path, NULL);
    if (fd < 0)
        return NULL;
    DIR *d = read_dir(fd);
    int err = errno;
    close(fd);
    errno = err;
    return d;
}

/* An error the walk met (not a file that vanished meanwhile): logged with the call and
 * the path it skips, counted; the walk goes on with the rest and then fails (one
 * unreadable entry must neither hide the others nor pass unreported). */
static void walk_error(unsigned *errors, const char *call, const char *dir, const char *name)
{
    KPC_LOG(KPC_LOG_ERROR, "%s(%s%s%s): %s: skipped", call, dir, name ? "/" : "", name ? name : "",
            strerror(errno));
    (*errors)++;
}

/* Removals that failed because this process may not write the tree (a read-only mount,
 * directories it may not write): counted, then said once in words (each file's own line
 * is logged by kpc_store_unlink). */
typedef struct read_only {
    uint64_t n;
    int err;
} read_only;
static void note_failed_removal(read_only *ro)
{
    if (errno == EROFS || errno == EACCES || errno == EPERM)
        ro->n++, ro->err = errno;
}
static void say_read_only(const kpc_store *st, const char *what, const read_only *ro)
{
    if (ro->n)
        KPC_LOG(KPC_LOG_ERROR, "%s %s: %llu %s could not be removed: the cache is read-only for this "
                "process (%s)", what, kpc_root_path(st->root), (unsigned long long)ro->n,
                ro->n == 1 ? "record" : "records", strerror(ro->err));
}

static kpc_status walk(kpc_store *st, enum walk_mode mode, kpc_store_walk_fn fn, void *arg)
{
    int v1 = kpc_root_v1_fd(st->root);
    if (v1 < 0)
        return KPC_OK; /* no tree yet */
    unsigned errors = 0;
    DIR *top = read_dir(v1);
    if (top == NULL) {
        walk_error(&errors, "opendir", kpc_root_v1(st->root), NULL);
        return KPC_E_IO;
    }
    struct dirent *t;
    int stop = 0;
    while (!stop && (t = readdir(top)) != NULL) {
        if (t->d_name[0] == '.' || strcmp(t->d_name, "tmp") == 0 || t->d_type == DT_REG)
            continue;
        char tdir[4500];
        kpc_root_target_dir(st->root, t->d_name, tdir, sizeof tdir);
        DIR *td = open_dir_at(st, dirfd(top), t->d_name, tdir);
        if (td == NULL) {
            if (errno == EPERM) /* refused, logged; the walk fails */
                errors++;
            else if (errno != ENOENT)
                walk_error(&errors, "opendir", tdir, NULL);
            continue;
        }
        struct dirent *f;
        while (!stop && (f = readdir(td)) != NULL) {
            if (f->d_name[0] == '.' || strlen(f->d_name) != 2)
                continue;
            char fdir[4800];
            snprintf(fdir, sizeof fdir, "%s/%s", tdir, f->d_name);
            DIR *fd_dir = open_dir_at(st, dirfd(td), f->d_name, fdir);
            if (fd_dir == NULL) {
                if (errno == EPERM)
                    errors++;
                else if (errno != ENOENT)
                    walk_error(&errors, "opendir", fdir, NULL);
                continue;
            }
            struct dirent *e;
            while (!stop && (e = readdir(fd_dir)) != NULL) {
                uint32_t kind;
                if (!record_name(e->d_name, &kind))
                    continue;
                char path[5100];
                snprintf(path, sizeof path, "%s/%s", fdir, e->d_name);
                struct stat sb;
                char refusal[128];
                if (kpc__fstatat(dirfd(fd_dir), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
                    if (errno != ENOENT) /* else removed meanwhile */
                        walk_error(&errors, "stat", fdir, e->d_name);
                    continue;
                }
                kpc_record rec;
                memset(&rec, 0, sizeof rec);
                kpc_store_entry ent = {path, (uint64_t)sb.st_size,
                                       (uint64_t)kpc__ts_ns(sb.st_mtim),
                                       KPC_OK, false, NULL};
                if (mode != WALK_STAT) {
                    int fd = kpc__openat(dirfd(fd_dir), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);
                    if (fd < 0) {
                        if (errno == ENOENT)
                            continue;
                        if (errno != ELOOP && errno != ENXIO) { /* not damage: the walk failed */
                            walk_error(&errors, "open", fdir, e->d_name);
                            continue;
                        }
                        ent.status = KPC_E_CORRUPT;
                        /* a symbolic link where a record should be is never followed */
                        if (mode == WALK_VERIFY && errno == ELOOP && S_ISLNK(sb.st_mode))
                            ent.removed = kpc__unlinkat(dirfd(fd_dir), e->d_name, 0) == 0;
                    } else if (S_ISREG(sb.st_mode) &&
                               kpc_root_entry_refusal(st->root, &sb, false, refusal, sizeof refusal)) {
                        /* another user's record, or one others may write: never read */
                        kpc_root_refuse(st->root, path, &sb, refusal);
                        errors++;
                        close(fd);
                        continue;
                    } else if (mode == WALK_HEADER) {
                        uint8_t h[KPC_RECORD_HEADER];
                        ssize_t n = kpc__pread(fd, h, sizeof h, 0);
                        if (n < 0) {
                            walk_error(&errors, "read", fdir, e->d_name);
                            close(fd);
                            continue;
                        }
                        if (kpc_record_decode_header(h, (size_t)n, &rec) != NULL || rec.kind != kind)
                            ent.status = KPC_E_CORRUPT;
                        close(fd);
                    } else {
                        kpc_key key;
                        char hex[33];
                        memcpy(hex, e->d_name, 32);
                        hex[32] = '\0';
                        kpc__unhex(hex, key.bytes, 16);
                        kpc_status s;
                        struct stat rsb;
                        if (kpc_store_read_fd(fd, &key, t->d_name, kind, &rec, &s, &rsb) != NULL) {
                            if (s == KPC_E_IO) {
                                walk_error(&errors, "read", fdir, e->d_name);
                                close(fd);
                                continue;
                            }
                            ent.status = s == KPC_E_NOMEM ? KPC_E_NOMEM : KPC_E_CORRUPT;
                        }
                        kpc_record_free(&rec);
                        if (ent.status == KPC_E_CORRUPT) {
                            enum kpc_store_removal r = kpc_store_remove_if_same_at(dirfd(fd_dir), e->d_name, fd);
                            if (r == KPC_STORE_REPLACED)
                                ent.status = KPC_E_NOT_FOUND; /* replaced or removed meanwhile */
                            else if ((ent.removed = r == KPC_STORE_REMOVED) && S_ISREG(sb.st_mode))
                                kpc_store_usage_add(st, -(int64_t)sb.st_size, -1);
                            else if (r == KPC_STORE_NOT_REMOVED)
                                KPC_LOG(KPC_LOG_WARN, "could not remove damaged %s: %s", path, strerror(errno));
                        }
                        close(fd);
                    }
                    if (ent.status == KPC_E_NOT_FOUND)
                        continue;
                    ent.rec = ent.status == KPC_OK ? &rec : NULL;
                }
                stop = fn(&ent, arg);
            }
            closedir(fd_dir);
        }
        closedir(td);
    }
    closedir(top);
    return errors ? KPC_E_IO : KPC_OK;
}

kpc_status kpc_store_walk(kpc_store *st, bool verify, kpc_store_walk_fn fn, void *arg)
{
    return walk(st, verify ? WALK_VERIFY : WALK_HEADER, fn, arg);
}

struct usage_acc {
    uint64_t bytes, files;
};

static int count_usage(const kpc_store_entry *e, void *arg)
{
    struct usage_acc *u = arg;
    u->bytes += e->size;
    u->files++;
    return 0;
}

kpc_status kpc_store_usage_estimate(kpc_store *st, uint64_t *bytes, uint64_t *files)
{
    if (atomic_load(st->known) == 0)
        return kpc_store_usage(st, bytes, files);
    *bytes = atomic_load(st->bytes);
    *files = atomic_load(st->files);
    return KPC_OK;
}

kpc_status kpc_store_usage(kpc_store *st, uint64_t *bytes, uint64_t *files)
{
    struct usage_acc u = {0, 0};
    kpc_status s = walk(st, WALK_STAT, count_usage, &u);
    if (s == KPC_OK) {
        atomic_store(st->bytes, u.bytes);
        atomic_store(st->files, u.files);
        atomic_store(st->known, 1);
    }
    *bytes = u.bytes;
    *files = u.files;
    return s;
}

/* ---- pruning ------------------------------------------------------------------------- */
typedef struct prune_item {
    char *path;
    uint64_t size, mtime;
} prune_item;

struct prune_acc {
    prune_item *items;
    size_t n, cap;
    uint64_t bytes;
    const uint8_t *keep_id;
    kpc_prune_result *res;
    bool oom;
    kpc_store *st;
    uint64_t failed; /* removals that failed (logged) */
    read_only ro;
};

static int collect(const kpc_store_entry *e, void *arg)
{
    struct prune_acc *a = arg;
    if (a->keep_id && (e->rec == NULL || memcmp(e->rec->compiler_id, a->keep_id, 16) != 0)) {
        /* another compiler built it (or it is unreadable): never served again */
        if (kpc_store_unlink(a->st, e->path) == 0) {
            a->res->files_removed++;
            a->res->bytes_removed += e->size;
        } else if (errno != ENOENT) {
            note_failed_removal(&a->ro);
            a->failed++;
        }
        a->res->files_before++;
        a->res->bytes_before += e->size;
        return 0;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 1024;
        prune_item *items = realloc(a->items, cap * sizeof *items);
        if (items == NULL) {
            a->oom = true;
            return 1;
        }
        a->items = items;
        a->cap = cap;
    }
    char *path = strdup(e->path);
    if (path == NULL) {
        a->oom = true;
        return 1;
    }
    a->items[a->n++] = (prune_item){path, e->size, e->mtime_ns};
    a->bytes += e->size;
    a->res->files_before++;
    a->res->bytes_before += e->size;
    return 0;
}

static int by_mtime(const void *x, const void *y)
{
    const prune_item *a = x, *b = y;
    return a->mtime < b->mtime ? -1 : a->mtime > b->mtime;
}

uint64_t kpc_store_sweep_tmp(kpc_store *st, bool by_age)
{
    int tmp = kpc_root_tmp_fd(st->root); /* held, checked at open */
    DIR *d = tmp < 0 ? NULL : read_dir(tmp);
    if (d == NULL)
        return 0;
    uint64_t now = kpc__wall_ns(), removed = 0;
    uint64_t stale_ns = kpc__setting_number(KPC_SET_STALE_TMP_MS) * 1000000ull;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int pid;
        uint64_t start;
        bool stale;
        enum kpc_tmp_writer whose = kpc_root_tmp_writer(st->root, e->d_name, &pid, &start);
        if (!st->shared && whose == KPC_TMP_OURS)
            /* the writer renames its file within seconds, or dies: a dead writer's (pid
             * and start time: a reused pid is not the writer) is never renamed */
            stale = !kpc__proc_alive(pid, start);
        else {
            /* another node's or pid namespace's, a tree other hosts write (their pids
             * mean nothing here), or another kpc's name: by its age alone; the last
             * only where asked (prune), as the files of an older kpc were before */
            struct stat sb;
            stale = (by_age || st->shared || whose == KPC_TMP_FOREIGN) &&
                    kpc__fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                    (uint64_t)sb.st_mtim.tv_sec * 1000000000ull + stale_ns < now;
        }
        if (!stale)
            continue;
        if (kpc__unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
        else if (errno != ENOENT)
            KPC_LOG(KPC_LOG_WARN, "unlink(%s/%s): %s: a dead writer's temp file stays",
                    kpc_root_tmp_dir(st->root), e->d_name, strerror(errno));
    }
    closedir(d);
    if (removed)
        KPC_LOG(KPC_LOG_INFO, "removed %llu temp files of dead writers from %s", (unsigned long long)removed,
                kpc_root_tmp_dir(st->root));
    return removed;
}

static kpc_status prune(kpc_store *st, uint64_t target_bytes, const uint8_t *keep_compiler_id,
                        bool wait, kpc_prune_result *res)
{
    kpc_prune_result local;
    if (res == NULL)
        res = &local;
    memset(res, 0, sizeof *res);
    char lock_path[4300];
    const char *call;
    int lock = kpc_root_lock(st->root, "prune", !wait, &call, lock_path, sizeof lock_path);
    if (lock < 0) {
        int err = errno;
        if (err == EWOULDBLOCK && call[0] == 'f') {
            KPC_LOG(KPC_LOG_DEBUG, "another process is pruning %s", kpc_root_path(st->root));
            return KPC_OK; /* one pruner at a time; it brings the size down for everyone */
        }
        KPC_LOG(KPC_LOG_WARN, "%s(%s): %s: not pruning", call, lock_path, strerror(err));
        return KPC_E_IO;
    }
    struct prune_acc a = {.keep_id = keep_compiler_id, .res = res, .st = st};
    kpc_status s = walk(st, keep_compiler_id ? WALK_HEADER : WALK_STAT, collect, &a);
    if (s == KPC_OK && a.oom)
        s = KPC_E_NOMEM;
    /* a walk that skipped a directory it could not read (logged) prunes what it saw, and
     * fails after */
    if ((s == KPC_OK || s == KPC_E_IO) && !a.oom && a.bytes > target_bytes) {
        qsort(a.items, a.n, sizeof *a.items, by_mtime);
        for (size_t i = 0; i < a.n && a.bytes > target_bytes; i++)
            if (kpc_store_unlink(st, a.items[i].path) == 0 || errno == ENOENT) {
                a.bytes -= a.items[i].size;
                res->files_removed++;
                res->bytes_removed += a.items[i].size;
            } else {
                note_failed_removal(&a.ro);
                a.failed++;
            }
    }
    say_read_only(st, "prune of", &a.ro);
    res->temp_removed = kpc_store_sweep_tmp(st, true);
    if (s == KPC_OK && a.failed)
        s = KPC_E_IO; /* each one logged by kpc_store_unlink */
    if (s == KPC_OK) {
        atomic_store(st->bytes, a.bytes);
        atomic_store(st->files, res->files_before - res->files_removed);
        atomic_store(st->known, 1);
    }
    for (size_t i = 0; i < a.n; i++)
        free(a.items[i].path);
    free(a.items);
    flock(lock, LOCK_UN); /* bare: an unlock must not fail (close drops the lock anyway) */
    close(lock);
    if (res->files_removed)
        KPC_LOG(KPC_LOG_INFO, "pruned %llu files (%llu bytes) from %s",
                (unsigned long long)res->files_removed, (unsigned long long)res->bytes_removed,
                kpc_root_path(st->root));
    return s;
}

kpc_status kpc_store_prune(kpc_store *st, uint64_t target_bytes, const uint8_t *keep_compiler_id,
                           kpc_prune_result *res)
{
    return prune(st, target_bytes, keep_compiler_id, false, res);
}

kpc_status kpc_store_prune_wait(kpc_store *st, uint64_t target_bytes, const uint8_t *keep_compiler_id,
                                kpc_prune_result *res)
{
    return prune(st, target_bytes, keep_compiler_id, true, res);
}

struct clear_acc {
    kpc_store *st;
    uint64_t removed, failed;
    read_only ro;
};

static int remove_entry(const kpc_store_entry *e, void *arg)
{
    struct clear_acc *a = arg;
    if (kpc_store_unlink(a->st, e->path) == 0)
        a->removed++;
    else if (errno != ENOENT) { /* logged */
        note_failed_removal(&a->ro);
        a->failed++;
    }
    return 0;
}

kpc_status kpc_store_clear(kpc_store *st, uint64_t *files_removed, uint64_t *files_failed)
{
    struct clear_acc a = {.st = st};
    kpc_status s = walk(st, WALK_STAT, remove_entry, &a);
    say_read_only(st, "clear of", &a.ro);
    *files_removed = a.removed;
    *files_failed = a.failed;
    atomic_store(st->bytes, 0);
    atomic_store(st->files, 0);
    if (a.failed || s != KPC_OK)
        atomic_store(st->known, 0); /* what is left is counted again by the next writer */
    return s == KPC_OK && a.failed ? KPC_E_IO : s;
}
