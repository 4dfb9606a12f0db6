/*
 * manifest.c - dependency lists (the files a compile read and the lookups that missed),
 * the manifest that maps a request key to its outcomes, and the check against the file
 * system. The rules (what a match is, the one-second race rule) are in manifest.h; the
 * bytes of a manifest in manifest_codec.c.
 *
 * Invariants: a kpc_deps is one allocation whose paths point into itself, immutable
 * once returned, so a program can carry it and any thread can check it without a lock.
 * Every file is opened through kpc_open_regular (never blocking on a FIFO) and every
 * system call goes through the fault seam, where a failure is a mismatch: a miss, never
 * a stale hit.
 */
#define _GNU_SOURCE
#include "core/manifest.h"
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
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

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
kpc_deps *kpc_manifest_deps_alloc(size_t count, size_t path_bytes)
{
    if (count > KPC_MANIFEST_MAX_FILES)
        return NULL;
    kpc_deps *d = malloc(sizeof *d + count * sizeof d->files[0] + path_bytes);
    if (d)
        d->count = count;
    return d;
}

char *kpc_manifest_deps_strings(kpc_deps *d)
{
    return (char *)&d->files[d->count];
}

void kpc_manifest_deps_finish(kpc_deps *d)
{
    for (size_t i = 0; i < d->count; i++)
        d->files[i].dir_len = (uint32_t)(strrchr(d->files[i].path, '/') - d->files[i].path);
}

void kpc_manifest_deps_free(kpc_deps *deps)
{
    free(deps);
}

kpc_deps *kpc_manifest_deps_copy(const kpc_deps *deps, bool *ok)
{
    *ok = true;
    if (deps == NULL)
        return NULL;
    size_t bytes = 0;
    for (size_t i = 0; i < deps->count; i++)
        bytes += strlen(deps->files[i].path) + 1;
    kpc_deps *d = kpc_manifest_deps_alloc(deps->count, bytes);
    if (d == NULL) {
        *ok = false;
        return NULL;
    }
    char *s = kpc_manifest_deps_strings(d);
    for (size_t i = 0; i < deps->count; i++) {
        d->files[i] = deps->files[i];
        size_t len = strlen(deps->files[i].path) + 1;
        memcpy(s, deps->files[i].path, len);
        d->files[i].path = s;
        s += len;
    }
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

kpc_status kpc_manifest_deps_record(const char *const *paths, size_t n, const char *const *absent,
                                    size_t n_absent, const char *cwd, uint64_t compile_start_ns,
                                    kpc_deps **out)
{
    *out = NULL;
    if (n == 0)
        return KPC_OK;
    size_t total = n + n_absent;
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
    kpc_deps *d = kpc_manifest_deps_alloc(total, bytes);
    if (d == NULL)
        return KPC_E_NOMEM;
    char *s = kpc_manifest_deps_strings(d);
    size_t kept = 0;
    for (size_t i = 0; i < total; i++) {
        const char *p = i < n ? paths[i] : absent[i - n];
        kpc_manifest_file *f = &d->files[kept];
        int len = p[0] == '/' ? sprintf(s, "%s", p) : sprintf(s, "%s/%s", cwd, p);
        f->path = s;
        int keep = i < n ? (record_file(f, compile_start_ns) ? 1 : -1) : record_absent(f, compile_start_ns);
        if (keep < 0) {
            free(d);
            return KPC_E_NOT_FOUND;
        }
        if (keep > 0) {
            s += len + 1;
            kept++;
        }
    }
    d->count = kept; /* the strings stay where they are: only the tail of files[] is unused */
    kpc_manifest_deps_finish(d);
    *out = d;
    return KPC_OK;
}

/* The directories opened during one check: a file's is found by its path prefix. */
typedef struct dir_cache {
    int fd[DIR_SLOTS], err[DIR_SLOTS];
    const char *path[DIR_SLOTS];
    uint32_t len[DIR_SLOTS];
    unsigned next;
} dir_cache;

/* The directory of f, opened once per check: its fd (AT_FDCWD with *name the whole path
 * where the directory is too long to copy), or -1 with errno. */
static int dir_of(dir_cache *c, const kpc_manifest_file *f, const char **name)
{
    *name = f->path + f->dir_len + 1;
    for (unsigned i = 0; i < DIR_SLOTS; i++)
        if (c->path[i] && c->len[i] == f->dir_len && memcmp(c->path[i], f->path, f->dir_len) == 0) {
            errno = c->err[i];
            return c->fd[i];
        }
    char dir[PATH_MAX];
    if (f->dir_len >= sizeof dir) {
        *name = f->path;
        return AT_FDCWD;
    }
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
    errno = c->err[slot];
    return fd;
}

static void dir_cache_close(dir_cache *c)
{
    for (unsigned i = 0; i < DIR_SLOTS; i++)
        if (c->path[i] && c->fd[i] >= 0)
            close(c->fd[i]);
}

static bool file_matches(dir_cache *c, const kpc_manifest_file *f, int64_t now_ns)
{
    const char *name;
    int at = dir_of(c, f, &name);
    struct stat st;
    int r = at == -1 ? -1 : stat_at(at, name, &st);
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
    for (size_t i = 0; ok && i < deps->count; i++)
        if (!file_matches(&c, &deps->files[i], now)) {
            KPC_LOG(KPC_LOG_DEBUG, "dependency %s %s", deps->files[i].path,
                    deps->files[i].absent ? "appeared" : "changed");
            ok = false;
        }
    dir_cache_close(&c);
    return ok;
}

void kpc_manifest_object_key(const kpc_key *request, const kpc_deps *deps, kpc_key *out)
{
    if (deps == NULL || deps->count == 0) {
        *out = *request;
        return;
    }
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, OBJECT_KEY_TAG, sizeof OBJECT_KEY_TAG);
    XXH3_128bits_update(&st, request->bytes, sizeof request->bytes);
    for (size_t i = 0; i < deps->count; i++) {
        if (deps->files[i].absent)
            continue; /* a missed lookup changes no byte the compiler read */
        /* the path with its NUL: no two lists hash alike by shifting bytes between fields */
        XXH3_128bits_update(&st, deps->files[i].path, strlen(deps->files[i].path) + 1);
        XXH3_128bits_update(&st, deps->files[i].digest, 16);
    }
    XXH128_canonicalFromHash((XXH128_canonical_t *)out->bytes, XXH3_128bits_digest(&st));
}

/* ---- manifests -------------------------------------------------------------------- */
void kpc_manifest_free(kpc_manifest *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->count; i++)
        free(m->entries[i].deps);
    m->count = 0;
}

const kpc_manifest_entry *kpc_manifest_match(const kpc_manifest *m)
{
    for (size_t i = 0; i < m->count; i++)
        if (kpc_manifest_deps_match(m->entries[i].deps))
            return &m->entries[i];
    return NULL;
}

kpc_status kpc_manifest_add(kpc_manifest *m, const kpc_key *object, uint32_t outcome,
                            const kpc_deps *deps)
{
    bool ok;
    kpc_deps *copy = kpc_manifest_deps_copy(deps, &ok);
    if (!ok)
        return KPC_E_NOMEM;
    /* drop an entry for the same object, or the oldest when full */
    size_t drop = m->count;
    for (size_t i = 0; i < m->count; i++)
        if (memcmp(m->entries[i].object.bytes, object->bytes, 16) == 0)
            drop = i;
    if (drop == m->count && m->count == KPC_MANIFEST_MAX_ENTRIES)
        drop = m->count - 1;
    if (drop < m->count) {
        free(m->entries[drop].deps);
        memmove(&m->entries[drop], &m->entries[drop + 1], (m->count - drop - 1) * sizeof m->entries[0]);
        m->count--;
    }
    memmove(&m->entries[1], &m->entries[0], m->count * sizeof m->entries[0]);
    m->entries[0].object = *object;
    m->entries[0].outcome = outcome;
    m->entries[0].deps = copy;
    m->count++;
    return KPC_OK;
}

/* ---- the working directory -------------------------------------------------------- */
/* Whether the source or an in-memory header has the word "include" at all: a request
 * whose texts have none reads nothing from the source's directory (conservative: a
 * comment counts too). */
static bool mentions_include(const kpc_source *src)
{
    static const char word[] = "include";
    size_t len = src->code_len ? src->code_len : strlen(src->code);
    if (memmem(src->code, len, word, sizeof word - 1) != NULL)
        return true;
    for (size_t i = 0; i < src->num_headers; i++)
        if (strstr(src->header_sources[i], word) != NULL)
            return true;
    return false;
}

bool kpc_manifest_needs_cwd(const kpc_source *src, const kpc_option_table *options)
{
    bool source_dir = kpc_options_source_dir_searched(options);
    for (size_t i = 0; i < src->num_options; i++) {
        kpc_option o;
        kpc_option_classify_path(options, src->options, src->num_options, i, &o);
        if (o.cls == KPC_OPTION_NO_SOURCE_DIR)
            source_dir = false;
        else if ((o.cls == KPC_OPTION_SEARCH_DIR || o.cls == KPC_OPTION_READ_FILE ||
                  o.cls == KPC_OPTION_PATH) && (o.value == NULL || o.value[0] != '/'))
            return true;
        i += o.used - 1;
    }
    return source_dir && (src->name == NULL || src->name[0] != '/') && mentions_include(src);
}

bool kpc_manifest_expected(const kpc_source *src, const kpc_option_table *options)
{
    for (size_t i = 0; i < src->num_options; i++) {
        kpc_option o;
        kpc_option_classify_path(options, src->options, src->num_options, i, &o);
        if (o.cls == KPC_OPTION_SEARCH_DIR || o.cls == KPC_OPTION_READ_FILE)
            return true;
        i += o.used - 1;
    }
    return false;
}
