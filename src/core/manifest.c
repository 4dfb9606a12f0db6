/*
 * manifest.c - dependency lists (the files a compile read and the lookups that missed),
 * the check of them against the file system, and the look of a manifest: decoded
 * (core/manifest_decode.c), its first matching entry taken. The rules (what a match is,
 * the one-second race rule) are in manifest.h; a build's files are recorded and a
 * manifest written by the record step, core/manifest_record.c, which a request enters
 * after its build and which calls nothing here on its path.
 *
 * Invariants: a kpc_deps holds its files as bytes it owns (its own tail, or a manifest's
 * bytes it took) and where each file lies in them (kpc_deps.at, found by the codec when
 * the list was decoded or written), immutable once returned, so a program can carry it
 * and any thread can check it without a lock. Nothing parses a list's bytes again: a
 * check, and the object key of a list (core/manifest_record.c), read each file's fields
 * where at says they lie.
 * Every file is opened through kpc_open_regular (never blocking on a FIFO) and every
 * system call goes through the fault seam, where a failure is a mismatch: a miss, never
 * a stale hit.
 */
#define _GNU_SOURCE
#include "core/manifest.h"
#include "base/bytes.h"
#include "base/fault.h"
#include "base/file_time.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIR_SLOTS 8 /* directories held open during one check */

static int stat_at(int dirfd, const char *name, struct stat *st)
{
    return kpc__fstatat(dirfd, name, st, 0);
}

/* ---- dependency lists --------------------------------------------------------------- */
/* What a list owns besides itself: its bytes where they are not its tail, where its
 * files lie. */
static void deps_release(kpc_deps *d)
{
    free(d->block);
    free(d->at);
    d->block = NULL;
    d->at = NULL;
}

void kpc_manifest_deps_free(kpc_deps *deps)
{
    if (deps)
        deps_release(deps);
    free(deps);
}

void kpc_manifest_file_at(const kpc_deps *d, size_t i, kpc_manifest_file *f)
{
    const kpc_manifest_at *a = &d->at[i];
    f->path = (const char *)d->files + a->path;
    f->path_len = a->path_len;
    f->dir_len = a->dir_len;
    f->absent = a->fixed == 0;
    if (f->absent) {
        memset(&f->dev, 0, sizeof *f - offsetof(kpc_manifest_file, dev));
        return;
    }
    const kpc_manifest_fixed *x = (const kpc_manifest_fixed *)(d->files + a->fixed);
    f->dev = kpc__load_le(x->dev, 8);
    f->ino = kpc__load_le(x->ino, 8);
    f->size = kpc__load_le(x->size, 8);
    f->mtime_ns = (int64_t)kpc__load_le(x->mtime_ns, 8);
    f->ctime_ns = (int64_t)kpc__load_le(x->ctime_ns, 8);
    memcpy(f->digest, x->digest, 16);
}

/* *to as a copy of from whose bytes are at bytes (from->size of them, filled here), where
 * its files lie in an allocation of their own (the offsets hold: the bytes are the
 * same); false on ENOMEM (to->at NULL). */
static bool copy_into(kpc_deps *to, const kpc_deps *from, uint8_t *bytes)
{
    memcpy(bytes, from->files, from->size);
    *to = (kpc_deps){.count = from->count, .size = from->size, .files = bytes};
    to->at = malloc((from->count ? from->count : 1) * sizeof *to->at);
    if (to->at)
        memcpy(to->at, from->at, from->count * sizeof *to->at);
    return to->at != NULL;
}

/* A copy of from: the struct and the bytes in one allocation, where its files lie in another. */
static kpc_deps *deps_copy(const kpc_deps *from)
{
    kpc_deps *d = malloc(sizeof *d + from->size);
    if (d != NULL && !copy_into(d, from, (uint8_t *)(d + 1))) {
        free(d);
        return NULL;
    }
    return d;
}

kpc_deps *kpc_manifest_deps_copy(const kpc_deps *deps, bool *ok)
{
    *ok = true;
    if (deps == NULL)
        return NULL;
    kpc_deps *d = deps_copy(deps);
    *ok = d != NULL;
    return d;
}

/* The directories opened during one check: a file's is found by its path prefix, the
 * last one used first (a list names the files of one directory together). */
typedef struct dir_cache {
    int fd[DIR_SLOTS], err[DIR_SLOTS];
    const char *path[DIR_SLOTS];
    uint32_t len[DIR_SLOTS];
    unsigned next, last;
} dir_cache;

static bool dir_is(const dir_cache *c, unsigned i, const kpc_manifest_file *f)
{
    return c->path[i] && c->len[i] == f->dir_len && memcmp(c->path[i], f->path, f->dir_len) == 0;
}

/* The directory of f, opened once per check: its fd, or -1 with errno. */
static int dir_of(dir_cache *c, const kpc_manifest_file *f)
{
    unsigned i = c->last;
    if (!dir_is(c, i, f))
        for (i = 0; i < DIR_SLOTS && !dir_is(c, i, f); i++)
            ;
    if (i < DIR_SLOTS) {
        c->last = i;
        errno = c->err[i];
        return c->fd[i];
    }
    char dir[PATH_MAX]; /* the codec bounds a path below PATH_MAX */
    memcpy(dir, f->path, f->dir_len);
    dir[f->dir_len] = '\0';
    unsigned slot = c->next++ % DIR_SLOTS;
    if (c->path[slot] && c->fd[slot] >= 0)
        close(c->fd[slot]);
    int fd = kpc__open(f->dir_len ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    c->fd[slot] = fd;
    c->err[slot] = fd < 0 ? errno : 0;
    c->path[slot] = f->path;
    c->len[slot] = f->dir_len;
    c->last = slot;
    errno = c->err[slot];
    return fd;
}

static void dir_cache_close(dir_cache *c)
{
    for (unsigned i = 0; i < DIR_SLOTS; i++)
        if (c->path[i] && c->fd[i] >= 0)
            close(c->fd[i]);
}

/* The stat of f relative to its directory (*at, the descriptor the stat used): 0, or -1
 * with errno. */
static int stat_file(dir_cache *c, const kpc_manifest_file *f, char name[NAME_MAX + 1], int *at,
                     struct stat *st)
{
    size_t len = f->path_len - f->dir_len - 1;
    if (len > NAME_MAX) { /* no file system here holds such a name */
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(name, f->path + f->dir_len + 1, len);
    name[len] = '\0';
    *at = dir_of(c, f);
    return *at == -1 ? -1 : stat_at(*at, name, st);
}

static bool file_matches(dir_cache *c, const kpc_manifest_file *f, int64_t now_ns)
{
    char name[NAME_MAX + 1];
    struct stat st;
    int at = -1, r = stat_file(c, f, name, &at, &st);
    if (f->absent) /* a lookup that missed must miss still */
        return r != 0 && (errno == ENOENT || errno == ENOTDIR);
    if (r != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size)
        return false;
    if ((uint64_t)st.st_dev == f->dev && (uint64_t)st.st_ino == f->ino &&
        kpc__ts_ns(st.st_mtim) == f->mtime_ns && kpc__ts_ns(st.st_ctim) == f->ctime_ns &&
        !kpc__changed_within(&st, KPC_MANIFEST_RECENT_NS, now_ns))
        return true; /* the identity vouches for the content: no re-hash */
    uint8_t digest[16];
    if (kpc__stat_and_hash(at, name, &st, digest) != 0 || (uint64_t)st.st_size != f->size)
        return false;
    return memcmp(digest, f->digest, sizeof digest) == 0;
}

bool kpc_manifest_deps_match(const kpc_deps *deps)
{
    if (deps == NULL || deps->count == 0)
        return true;
    int64_t now = (int64_t)kpc__wall_ns();
    dir_cache c = {.next = 0};
    bool ok = true;
    for (size_t i = 0; ok && i < deps->count; i++) {
        kpc_manifest_file f;
        kpc_manifest_file_at(deps, i, &f);
        if (!file_matches(&c, &f, now)) {
            KPC_LOG(KPC_LOG_DEBUG, "dependency %.*s %s", (int)f.path_len, f.path,
                    f.absent ? "appeared" : "changed");
            ok = false;
        }
    }
    dir_cache_close(&c);
    return ok;
}

bool kpc_manifest_current(const kpc_deps *deps, const uint8_t *cwd)
{
    if (cwd) {
        uint8_t now[16];
        kpc__cwd_digest(now);
        if (memcmp(now, cwd, sizeof now) != 0)
            return false;
    }
    return kpc_manifest_deps_match(deps);
}

/* ---- manifests -------------------------------------------------------------------- */
void kpc_manifest_free(kpc_manifest *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->count; i++)
        deps_release(&m->entries[i].deps);
    m->count = 0;
    free(m->block);
    m->block = NULL;
}

const kpc_manifest_entry *kpc_manifest_match(const kpc_manifest *m)
{
    for (size_t i = 0; i < m->count; i++)
        if (kpc_manifest_deps_match(&m->entries[i].deps))
            return &m->entries[i];
    return NULL;
}

kpc_deps *kpc_manifest_take(kpc_manifest *m, const kpc_manifest_entry *e)
{
    const kpc_deps *from = &e->deps;
    /* a manifest of one entry (the usual one) is kept whole rather than copied: a new
     * process's hit then makes no allocation of the size of its files */
    if (e->deps.block == NULL && m->block && m->count == 1) {
        kpc_deps *d = malloc(sizeof *d);
        if (d == NULL)
            return NULL;
        *d = *from;
        d->block = m->block;
        m->block = NULL;
        m->entries[0].deps.at = NULL; /* d's now */
        return d;
    }
    return deps_copy(from);
}

/* A match's tail (kpc_manifest_lookup): the manifest gives up the allocation. Where
 * the list took the manifest's bytes whole, it borrows them where they lie, before the
 * tail; else the tail moves to the head, and the room the manifest took is given back. */
static void hand_back_tail(kpc_manifest *m, uint8_t *block, const uint8_t *bytes, size_t size, size_t tail,
                           kpc_manifest_match_out *match)
{
    kpc_deps *d = match->deps;
    m->block = NULL; /* where the list did not take it */
    match->borrowed = d->block == block;
    if (match->borrowed) {
        d->block = NULL;
        match->tail = (uint8_t *)bytes + size;
    } else {
        memmove(block, bytes + size, tail);
        uint8_t *fit = realloc(block, tail);
        match->tail = block = fit ? fit : block;
    }
    match->block = block;
}

kpc_status kpc_manifest_lookup(void *block, const void *bytes, size_t size, size_t tail, kpc_manifest *m,
                               kpc_manifest_match_out *match)
{
    if (match)
        *match = (kpc_manifest_match_out){.found = false};
    kpc_status s = kpc_manifest_decode(bytes, size, m);
    if (s != KPC_OK) {
        free(block);
        return s;
    }
    m->block = block; /* the entries point into it: the manifest keeps it */
    const kpc_manifest_entry *e = match ? kpc_manifest_match(m) : NULL;
    if (e == NULL) {
        /* for the record step, which writes the entries from their bytes and frees
         * m->block alone (core/manifest_record.c) */
        for (size_t i = 0; i < m->count; i++)
            deps_release(&m->entries[i].deps);
        return KPC_OK;
    }
    match->object = e->object;
    match->outcome = e->outcome;
    match->deps = kpc_manifest_take(m, e);
    match->found = match->deps != NULL;
    if (match->found && tail)
        hand_back_tail(m, block, bytes, size, tail, match);
    kpc_manifest_free(m); /* a match needs no more of it (see manifest.h) */
    return match->found ? KPC_OK : KPC_E_NOMEM;
}
