/*
 * manifest.c - dependency lists (the files a compile read), the manifest that maps a
 * request key to its outcomes, their serialization and the check against the file
 * system.
 * The rules (what a match is, the one-second race rule) are in manifest.h.
 *
 * Invariants: a kpc_deps is one allocation whose paths point into itself, immutable
 * once returned, so a program can carry it and any thread can check it without a lock.
 * A decoded manifest never trusts a length it has not bounded by the buffer.
 */
#define _GNU_SOURCE
#include "core/manifest.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define MANIFEST_MAGIC "KPCMANI1"
#define MANIFEST_VERSION 1u
#define OBJECT_KEY_TAG "kpc-object-1"

static int64_t ts_ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + (int64_t)t.tv_nsec;
}

/* Hash the file open on fd to its end, streaming; 0 or -1 with errno. */
static int hash_fd(int fd, uint8_t digest[16])
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    char buf[65536];
    off_t off = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf, off);
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

/* Open, fstat and hash a regular file; the stat is the one of the bytes hashed (taken
 * again after hashing: a file that changed meanwhile fails). 0, or -1 with errno. */
static int stat_and_hash(const char *path, struct stat *st, uint8_t digest[16])
{
    int fd;
    do
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -1;
    struct stat after;
    int r = fstat(fd, st);
    if (r == 0 && !S_ISREG(st->st_mode)) {
        errno = EINVAL;
        r = -1;
    }
    if (r == 0)
        r = hash_fd(fd, digest);
    if (r == 0 && fstat(fd, &after) == 0 &&
        (after.st_size != st->st_size || ts_ns(after.st_mtim) != ts_ns(st->st_mtim) ||
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
static kpc_deps *deps_alloc(size_t count, size_t path_bytes)
{
    if (count > KPC_MANIFEST_MAX_FILES)
        return NULL;
    kpc_deps *d = malloc(sizeof *d + count * sizeof d->files[0] + path_bytes);
    if (d)
        d->count = count;
    return d;
}

static char *deps_strings(kpc_deps *d)
{
    return (char *)&d->files[d->count];
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
    kpc_deps *d = deps_alloc(deps->count, bytes);
    if (d == NULL) {
        *ok = false;
        return NULL;
    }
    char *s = deps_strings(d);
    for (size_t i = 0; i < deps->count; i++) {
        d->files[i] = deps->files[i];
        size_t len = strlen(deps->files[i].path) + 1;
        memcpy(s, deps->files[i].path, len);
        d->files[i].path = s;
        s += len;
    }
    return d;
}

kpc_status kpc_manifest_deps_record(const char *const *paths, size_t n, const char *cwd,
                                    uint64_t compile_start_ns, kpc_deps **out)
{
    *out = NULL;
    if (n == 0)
        return KPC_OK;
    if (n > KPC_MANIFEST_MAX_FILES) {
        KPC_LOG(KPC_LOG_WARN, "a compile read %zu files: more than a manifest holds (%u)", n,
                (unsigned)KPC_MANIFEST_MAX_FILES);
        return KPC_E_INVALID;
    }
    size_t cwd_len = cwd ? strlen(cwd) : 0, bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (paths[i][0] != '/' && cwd == NULL) {
            KPC_LOG(KPC_LOG_WARN, "dependency %s is relative and the working directory is unknown",
                    paths[i]);
            return KPC_E_INVALID;
        }
        bytes += strlen(paths[i]) + 1 + (paths[i][0] == '/' ? 0 : cwd_len + 1);
    }
    kpc_deps *d = deps_alloc(n, bytes);
    if (d == NULL)
        return KPC_E_NOMEM;
    char *s = deps_strings(d);
    for (size_t i = 0; i < n; i++) {
        kpc_manifest_file *f = &d->files[i];
        int len = paths[i][0] == '/' ? sprintf(s, "%s", paths[i]) : sprintf(s, "%s/%s", cwd, paths[i]);
        f->path = s;
        s += len + 1;
        struct stat st;
        if (stat_and_hash(f->path, &st, f->digest) != 0) {
            KPC_LOG(KPC_LOG_DEBUG, "dependency %s: %s: the outcome is not cached", f->path,
                    strerror(errno));
            free(d);
            return KPC_E_NOT_FOUND;
        }
        f->size = (uint64_t)st.st_size;
        f->mtime_ns = ts_ns(st.st_mtim);
        f->ctime_ns = ts_ns(st.st_ctim);
        int64_t changed = f->mtime_ns > f->ctime_ns ? f->mtime_ns : f->ctime_ns;
        if (changed + (int64_t)KPC_MANIFEST_RECENT_NS > (int64_t)compile_start_ns) {
            KPC_LOG(KPC_LOG_DEBUG, "dependency %s was modified too recently (within a second of the "
                    "compile): the outcome is not cached", f->path);
            free(d);
            return KPC_E_NOT_FOUND;
        }
    }
    *out = d;
    return KPC_OK;
}

static bool file_matches(const kpc_manifest_file *f, int64_t now_ns)
{
    struct stat st;
    if (stat(f->path, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size)
        return false;
    int64_t m = ts_ns(st.st_mtim), c = ts_ns(st.st_ctim), changed = m > c ? m : c;
    if (m == f->mtime_ns && c == f->ctime_ns && changed + (int64_t)KPC_MANIFEST_RECENT_NS <= now_ns)
        return true; /* the stat vouches for the content: no re-hash */
    uint8_t digest[16];
    if (stat_and_hash(f->path, &st, digest) != 0 || (uint64_t)st.st_size != f->size)
        return false;
    return memcmp(digest, f->digest, sizeof digest) == 0;
}

bool kpc_manifest_deps_match(const kpc_deps *deps)
{
    if (deps == NULL || deps->count == 0)
        return true;
    int64_t now = (int64_t)kpc__wall_ns();
    for (size_t i = 0; i < deps->count; i++)
        if (!file_matches(&deps->files[i], now)) {
            KPC_LOG(KPC_LOG_DEBUG, "dependency %s changed", deps->files[i].path);
            return false;
        }
    return true;
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

/* Little-endian writer over a growing buffer. */
typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    bool failed;
} wbuf;

static void w_bytes(wbuf *w, const void *data, size_t len)
{
    if (w->failed)
        return;
    if (w->n + len > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->n + len)
            cap *= 2;
        uint8_t *p = realloc(w->p, cap);
        if (p == NULL) {
            w->failed = true;
            return;
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->n, data, len);
    w->n += len;
}

static void w_u64(wbuf *w, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    w_bytes(w, b, 8);
}

static void w_u32(wbuf *w, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    w_bytes(w, b, 4);
}

kpc_status kpc_manifest_encode(const kpc_manifest *m, void **buf, size_t *size)
{
    wbuf w = {0};
    w_bytes(&w, MANIFEST_MAGIC, 8);
    w_u32(&w, MANIFEST_VERSION);
    w_u32(&w, (uint32_t)m->count);
    for (size_t i = 0; i < m->count; i++) {
        const kpc_manifest_entry *e = &m->entries[i];
        size_t nf = e->deps ? e->deps->count : 0;
        w_bytes(&w, e->object.bytes, 16);
        w_u32(&w, e->outcome);
        w_u32(&w, (uint32_t)nf);
        for (size_t j = 0; j < nf; j++) {
            const kpc_manifest_file *f = &e->deps->files[j];
            size_t len = strlen(f->path);
            w_u32(&w, (uint32_t)len);
            w_bytes(&w, f->path, len);
            w_u64(&w, f->size);
            w_u64(&w, (uint64_t)f->mtime_ns);
            w_u64(&w, (uint64_t)f->ctime_ns);
            w_bytes(&w, f->digest, 16);
        }
    }
    if (w.failed || w.n > KPC_MANIFEST_MAX_BYTES) {
        free(w.p);
        return w.failed ? KPC_E_NOMEM : KPC_E_INVALID;
    }
    *buf = w.p;
    *size = w.n;
    return KPC_OK;
}

/* Little-endian reader; any read past the end sets bad and yields zeros. */
typedef struct rbuf {
    const uint8_t *p;
    size_t n, off;
    bool bad;
} rbuf;

static const uint8_t *r_bytes(rbuf *r, size_t len)
{
    if (r->bad || len > r->n - r->off) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += len;
    return p;
}

static uint64_t r_u64(rbuf *r)
{
    const uint8_t *b = r_bytes(r, 8);
    uint64_t v = 0;
    for (int i = 0; b && i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static uint32_t r_u32(rbuf *r)
{
    const uint8_t *b = r_bytes(r, 4);
    uint32_t v = 0;
    for (int i = 0; b && i < 4; i++)
        v |= (uint32_t)b[i] << (8 * i);
    return v;
}

/* One entry list: a first pass bounds every length, a second fills the block. */
static kpc_status decode_deps(rbuf *r, uint32_t nf, kpc_deps **out)
{
    *out = NULL;
    if (nf == 0)
        return KPC_OK;
    if (nf > KPC_MANIFEST_MAX_FILES)
        return KPC_E_CORRUPT;
    rbuf scan = *r;
    size_t bytes = 0;
    for (uint32_t j = 0; j < nf; j++) {
        uint32_t len = r_u32(&scan);
        const uint8_t *path = r_bytes(&scan, len);
        r_bytes(&scan, 8 + 8 + 8 + 16);
        if (scan.bad || len == 0 || len > 4095 || path[0] != '/' || memchr(path, '\0', len))
            return KPC_E_CORRUPT;
        bytes += (size_t)len + 1;
    }
    kpc_deps *d = deps_alloc(nf, bytes);
    if (d == NULL)
        return KPC_E_NOMEM;
    char *s = deps_strings(d);
    for (uint32_t j = 0; j < nf; j++) {
        kpc_manifest_file *f = &d->files[j];
        uint32_t len = r_u32(r);
        memcpy(s, r_bytes(r, len), len);
        s[len] = '\0';
        f->path = s;
        s += len + 1;
        f->size = r_u64(r);
        f->mtime_ns = (int64_t)r_u64(r);
        f->ctime_ns = (int64_t)r_u64(r);
        memcpy(f->digest, r_bytes(r, 16), 16);
    }
    *out = d;
    return KPC_OK;
}

kpc_status kpc_manifest_decode(const void *buf, size_t size, kpc_manifest *out)
{
    out->count = 0;
    rbuf r = {buf, size, 0, false};
    const uint8_t *magic = r_bytes(&r, 8);
    uint32_t version = r_u32(&r), count = r_u32(&r);
    if (r.bad || memcmp(magic, MANIFEST_MAGIC, 8) != 0 || version != MANIFEST_VERSION ||
        count > KPC_MANIFEST_MAX_ENTRIES)
        return KPC_E_CORRUPT;
    for (uint32_t i = 0; i < count; i++) {
        kpc_manifest_entry *e = &out->entries[i];
        const uint8_t *key = r_bytes(&r, 16);
        uint32_t outcome = r_u32(&r), nf = r_u32(&r);
        if (r.bad || (outcome != KPC_MANIFEST_CODE && outcome != KPC_MANIFEST_LOG) || nf == 0) {
            kpc_manifest_free(out);
            return KPC_E_CORRUPT;
        }
        memcpy(e->object.bytes, key, 16);
        e->outcome = outcome;
        kpc_status s = decode_deps(&r, nf, &e->deps);
        if (s != KPC_OK) {
            kpc_manifest_free(out);
            return s;
        }
        out->count++;
    }
    if (r.off != size) { /* trailing bytes: not a manifest this code wrote */
        kpc_manifest_free(out);
        return KPC_E_CORRUPT;
    }
    return KPC_OK;
}

/* ---- the working directory -------------------------------------------------------- */
/* Options that name a path to search or read; the path follows attached or as the next
 * option. Longer spellings first where one is a prefix of another. */
static const char *const path_options[] = {
    "--include-directory=", "--include-path=", "--pre-include=", "--system-include=",
    "--sysroot=", "-isystem", "-iquote", "-idirafter", "-iwithprefixbefore", "-iwithprefix",
    "-iprefix", "-isysroot", "-imacros", "-include", "-I", NULL};

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

bool kpc_manifest_needs_cwd(const kpc_source *src, bool source_dir_searched)
{
    bool no_source_include = false;
    for (size_t i = 0; i < src->num_options; i++) {
        const char *o = src->options[i];
        if (o[0] != '-')
            continue;
        if (strcmp(o, "-no-source-include") == 0 || strcmp(o, "--no-source-include") == 0) {
            no_source_include = true;
            continue;
        }
        for (const char *const *p = path_options; *p; p++) {
            size_t len = strlen(*p);
            if (strncmp(o, *p, len) != 0)
                continue;
            const char *path = o + len;
            if (*path == '\0' && (*p)[len - 1] != '=')
                path = i + 1 < src->num_options ? src->options[i + 1] : "/";
            if (path[0] != '/')
                return true;
            break;
        }
    }
    return source_dir_searched && !no_source_include && (src->name == NULL || src->name[0] != '/') &&
           mentions_include(src);
}
