/*
 * manifest.c - dependency lists (the files a compile read and the lookups that missed),
 * the manifest that maps a request key to its outcomes, and the check against the file
 * system. The rules (what a match is, the one-second race rule) are in manifest.h; the
 * bytes of a manifest in manifest_codec.c.
 *
 * Invariants: a kpc_deps holds its files as bytes it owns (its own tail, or a manifest's
 * bytes it took) and where each file lies in them (kpc_deps.at, found by the codec when
 * the list was decoded or encoded), immutable once returned, so a program can carry it
 * and any thread can check it without a lock. Nothing here parses a list's bytes again:
 * a check and the object key read each file's fields where at says they lie.
 * Every file is opened through kpc_open_regular (never blocking on a FIFO) and every
 * system call goes through the fault seam, where a failure is a mismatch: a miss, never
 * a stale hit.
 */
#define _GNU_SOURCE
#include "core/manifest.h"
#include "base/bytes.h"
#include "base/hash.h"
#include "base/fault.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OBJECT_KEY_TAG "kpc-object-1"
#define DIR_SLOTS 8 /* directories held open during one check */

static int64_t ts_ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + (int64_t)t.tv_nsec;
}

static bool recent(const struct stat *st, int64_t now_ns)
{
    int64_t m = ts_ns(st->st_mtim), c = ts_ns(st->st_ctim), changed = m > c ? m : c;
    return changed + (int64_t)KPC_MANIFEST_RECENT_NS > now_ns;
}

static int stat_at(int dirfd, const char *name, struct stat *st)
{
    return kpc__fstatat(dirfd, name, st, 0);
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

/* Open (without blocking), fstat and hash a regular file; the stat is the one of the
 * bytes hashed (taken again after hashing: a file that changed meanwhile fails).
 * 0, or -1 with errno (EINVAL: not a regular file). */
static int stat_and_hash(int dirfd, const char *name, struct stat *st, uint8_t digest[16])
{
    int fd = kpc_open_regular(dirfd, name, O_RDONLY, 0, st);
    if (fd < 0)
        return -1;
    struct stat after;
    int r = hash_fd(fd, digest);
    if (r == 0 && kpc__fstat(fd, &after) != 0)
        r = -1;
    else if (r == 0 && (after.st_size != st->st_size || ts_ns(after.st_mtim) != ts_ns(st->st_mtim) ||
                        ts_ns(after.st_ctim) != ts_ns(st->st_ctim))) {
        errno = EAGAIN; /* written while hashed */
        r = -1;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return r;
}

/* ---- dependency lists --------------------------------------------------------------- */
/* What a list owns besides itself: its bytes where they are not its tail, where its
 * files lie. */
static void deps_release(kpc_deps *d)
{
    free(d->block);
    free(d->at);
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

/* One file read: its identity and digest now. false: the outcome is not to be cached. */
static bool record_file(kpc_manifest_file *f, uint64_t compile_start_ns)
{
    struct stat st;
    if (stat_and_hash(AT_FDCWD, f->path, &st, f->digest) != 0) {
        KPC_LOG(errno == EINVAL ? KPC_LOG_WARN : KPC_LOG_DEBUG, "dependency %s: %s: the outcome is not "
                "cached", f->path, errno == EINVAL ? "not a regular file" : strerror(errno));
        return false;
    }
    f->absent = false;
    f->dev = (uint64_t)st.st_dev;
    f->ino = (uint64_t)st.st_ino;
    f->size = (uint64_t)st.st_size;
    f->mtime_ns = ts_ns(st.st_mtim);
    f->ctime_ns = ts_ns(st.st_ctim);
    if (recent(&st, (int64_t)compile_start_ns)) {
        KPC_LOG(KPC_LOG_DEBUG, "dependency %s was modified too recently (within a second of the "
                "compile): the outcome is not cached", f->path);
        return false;
    }
    return true;
}

/* One lookup that missed: 1 to keep it, 0 to leave it out (something not missing that
 * did not appear now: not a lookup this compile made), -1 when it may have appeared
 * during the compile (the outcome is not to be cached). */
static int record_absent(kpc_manifest_file *f, uint64_t compile_start_ns)
{
    memset(&f->dev, 0, sizeof *f - offsetof(kpc_manifest_file, dev));
    f->absent = true;
    struct stat st;
    if (stat_at(AT_FDCWD, f->path, &st) != 0)
        return errno == ENOENT || errno == ENOTDIR ? 1 : 0;
    if (S_ISREG(st.st_mode) && recent(&st, (int64_t)compile_start_ns)) {
        KPC_LOG(KPC_LOG_DEBUG, "%s appeared within a second of the compile: the outcome is not cached",
                f->path);
        return -1;
    }
    return 0;
}

/* The files of b as they are now (*files malloc'd, with their absolute paths in its
 * tail; *kept of them: an absent one that is missing still is left out); statuses as
 * kpc_manifest_deps_record. b->n is not 0. */
static kpc_status record_files(const kpc_manifest_build *b, kpc_manifest_file **files_out, size_t *kept_out)
{
    const char *const *paths = b->paths, *const *absent = b->absent, *cwd = b->cwd;
    size_t n = b->n, n_absent = b->n_absent, total = n + n_absent;
    uint64_t compile_start_ns = b->started_ns;
    if (n > KPC_MANIFEST_MAX_FILES || total > KPC_MANIFEST_MAX_FILES) {
        KPC_LOG(KPC_LOG_WARN, "a compile read %zu files: more than a manifest holds (%u)", total,
                (unsigned)KPC_MANIFEST_MAX_FILES);
        return KPC_E_INVALID;
    }
    size_t cwd_len = cwd ? strlen(cwd) : 0, bytes = 0;
    for (size_t i = 0; i < total; i++) {
        const char *p = i < n ? paths[i] : absent[i - n];
        if (p[0] != '/' && cwd == NULL) {
            KPC_LOG(KPC_LOG_WARN, "dependency %s is relative and the working directory is unknown", p);
            return KPC_E_INVALID;
        }
        bytes += strlen(p) + 1 + (p[0] == '/' ? 0 : cwd_len + 1);
    }
    /* the files as the recorder fills them, with their absolute paths: only until encoded */
    kpc_manifest_file *files = malloc(total * sizeof *files + bytes);
    if (files == NULL)
        return KPC_E_NOMEM;
    char *s = (char *)&files[total];
    size_t kept = 0;
    for (size_t i = 0; i < total; i++) {
        const char *p = i < n ? paths[i] : absent[i - n];
        kpc_manifest_file *f = &files[kept];
        int len = p[0] == '/' ? sprintf(s, "%s", p) : sprintf(s, "%s/%s", cwd, p);
        f->path = s;
        f->path_len = (size_t)len;
        int keep = i < n ? (record_file(f, compile_start_ns) ? 1 : -1) : record_absent(f, compile_start_ns);
        if (keep < 0) {
            free(files);
            return KPC_E_NOT_FOUND;
        }
        if (keep > 0) {
            s += len + 1;
            kept++;
        }
    }
    *files_out = files;
    *kept_out = kept;
    return KPC_OK;
}

static void warn_invalid(kpc_status s)
{
    if (s == KPC_E_INVALID)
        KPC_LOG(KPC_LOG_WARN, "a dependency's path is longer than a manifest holds: the outcome is not "
                "cached");
}

kpc_status kpc_manifest_deps_record(const char *const *paths, size_t n, const char *const *absent,
                                    size_t n_absent, const char *cwd, uint64_t compile_start_ns,
                                    kpc_deps **out)
{
    *out = NULL;
    if (n == 0)
        return KPC_OK;
    kpc_manifest_build b = {paths, n, absent, n_absent, cwd, compile_start_ns};
    kpc_manifest_file *files;
    size_t kept;
    kpc_status s = record_files(&b, &files, &kept);
    if (s != KPC_OK)
        return s;
    s = kpc_manifest_deps_encode(files, kept, out);
    warn_invalid(s);
    free(files);
    return s;
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
        ts_ns(st.st_mtim) == f->mtime_ns && ts_ns(st.st_ctim) == f->ctime_ns && !recent(&st, now_ns))
        return true; /* the identity vouches for the content: no re-hash */
    uint8_t digest[16];
    if (stat_and_hash(at, name, &st, digest) != 0 || (uint64_t)st.st_size != f->size)
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

/* The object key's hash: started with the request key; each file read added (a missed
 * lookup changes no byte the compiler read); its digest the key (kpc_manifest_object_key). */
static void object_key_start(XXH3_state_t *st, const kpc_key *request)
{
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, OBJECT_KEY_TAG, sizeof OBJECT_KEY_TAG);
    XXH3_128bits_update(st, request->bytes, sizeof request->bytes);
}

static void object_key_add(XXH3_state_t *st, const kpc_manifest_file *f)
{
    if (f->absent)
        return;
    /* the path with its NUL: no two lists hash alike by shifting bytes between fields */
    XXH3_128bits_update(st, f->path, f->path_len);
    XXH3_128bits_update(st, "", 1);
    XXH3_128bits_update(st, f->digest, 16);
}

static void object_key_end(XXH3_state_t *st, kpc_key *out)
{
    XXH128_canonicalFromHash((XXH128_canonical_t *)out->bytes, XXH3_128bits_digest(st));
}

void kpc_manifest_object_key(const kpc_key *request, const kpc_deps *deps, kpc_key *out)
{
    if (deps == NULL || deps->count == 0) {
        *out = *request;
        return;
    }
    XXH3_state_t st;
    object_key_start(&st, request);
    for (size_t i = 0; i < deps->count; i++) {
        kpc_manifest_file f;
        kpc_manifest_file_at(deps, i, &f);
        object_key_add(&st, &f);
    }
    object_key_end(&st, out);
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
    if (e == NULL)
        return KPC_OK;
    match->object = e->object;
    match->outcome = e->outcome;
    match->deps = kpc_manifest_take(m, e);
    match->found = match->deps != NULL;
    if (match->found && tail)
        hand_back_tail(m, block, bytes, size, tail, match);
    kpc_manifest_free(m); /* a match needs no more of it (see manifest.h) */
    return match->found ? KPC_OK : KPC_E_NOMEM;
}

/* Room for object's entry at the head of m: an entry for the same object goes, or the
 * oldest when m is full. */
static void make_room(kpc_manifest *m, const kpc_key *object)
{
    size_t drop = m->count;
    for (size_t i = 0; i < m->count; i++)
        if (memcmp(m->entries[i].object.bytes, object->bytes, 16) == 0)
            drop = i;
    if (drop == m->count && m->count == KPC_MANIFEST_MAX_ENTRIES)
        drop = m->count - 1;
    if (drop < m->count) {
        deps_release(&m->entries[drop].deps);
        memmove(&m->entries[drop], &m->entries[drop + 1], (m->count - drop - 1) * sizeof m->entries[0]);
        m->count--;
    }
}

kpc_status kpc_manifest_add(kpc_manifest *m, const kpc_key *object, uint32_t outcome,
                            const kpc_deps *deps)
{
    kpc_deps copy = {0};
    if (deps && deps->size) {
        uint8_t *block = malloc(deps->size);
        if (block == NULL || !copy_into(&copy, deps, block)) {
            free(block);
            return KPC_E_NOMEM;
        }
        copy.block = block;
    }
    make_room(m, object);
    memmove(&m->entries[1], &m->entries[0], m->count * sizeof m->entries[0]);
    m->entries[0].object = *object;
    m->entries[0].outcome = outcome;
    m->entries[0].deps = copy;
    m->count++;
    return KPC_OK;
}

kpc_status kpc_manifest_record_build(kpc_manifest *m, const kpc_key *request, const kpc_manifest_build *b,
                                     uint32_t outcome, kpc_deps **deps, kpc_key *object, void **buf, size_t *size)
{
    *deps = NULL;
    *buf = NULL;
    *object = *request;
    kpc_manifest_file *files = NULL;
    size_t kept = 0;
    kpc_status s = b->n == 0 ? KPC_E_INVALID : record_files(b, &files, &kept);
    if (s == KPC_OK) {
        kpc_key obj;
        XXH3_state_t st;
        object_key_start(&st, request);
        for (size_t i = 0; i < kept; i++)
            object_key_add(&st, &files[i]);
        object_key_end(&st, &obj);
        make_room(m, &obj);
        /* the new list and the manifest that leads to it, in one pass of the codec */
        s = kpc_manifest_encode_new(m, &obj, outcome, files, kept, deps, buf, size);
        warn_invalid(s);
        if (s == KPC_OK)
            *object = obj;
        else {
            kpc_manifest_deps_free(*deps);
            *deps = NULL;
        }
    }
    free(files);
    kpc_manifest_free(m);
    return s;
}
