/*
 * manifest_codec.c - the bytes of a manifest (the payload of a KPC_RECORD_MANIFEST
 * record; docs/file-format.md): little-endian, every length bounded by the buffer
 * before it is trusted.
 *
 * Version 2 adds each file's device and inode and the absent entries (lookups that
 * missed). A version 1 manifest is read as no manifest (KPC_E_NOT_FOUND, not corrupt):
 * its entries would match by size and times alone and know nothing of shadowing
 * headers, the two holes version 2 closes; the next build of the request rewrites it,
 * one compile per request once.
 */
#include "core/manifest.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define MANIFEST_MAGIC "KPCMANI1" /* the magic stays; the version after it counts */
#define MANIFEST_VERSION 2u
#define FILE_READ 0u
#define FILE_ABSENT 1u

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

static void w_uint(wbuf *w, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    w_bytes(w, b, (size_t)bytes);
}

kpc_status kpc_manifest_encode(const kpc_manifest *m, void **buf, size_t *size)
{
    wbuf w = {0};
    w_bytes(&w, MANIFEST_MAGIC, 8);
    w_uint(&w, MANIFEST_VERSION, 4);
    w_uint(&w, m->count, 4);
    for (size_t i = 0; i < m->count; i++) {
        const kpc_manifest_entry *e = &m->entries[i];
        size_t nf = e->deps ? e->deps->count : 0;
        w_bytes(&w, e->object.bytes, 16);
        w_uint(&w, e->outcome, 4);
        w_uint(&w, nf, 4);
        for (size_t j = 0; j < nf; j++) {
            const kpc_manifest_file *f = &e->deps->files[j];
            size_t len = strlen(f->path);
            w_uint(&w, len, 4);
            w_bytes(&w, f->path, len);
            w_uint(&w, f->absent ? FILE_ABSENT : FILE_READ, 4);
            if (f->absent)
                continue;
            w_uint(&w, f->dev, 8);
            w_uint(&w, f->ino, 8);
            w_uint(&w, f->size, 8);
            w_uint(&w, (uint64_t)f->mtime_ns, 8);
            w_uint(&w, (uint64_t)f->ctime_ns, 8);
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

static uint64_t r_uint(rbuf *r, int bytes)
{
    const uint8_t *b = r_bytes(r, (size_t)bytes);
    uint64_t v = 0;
    for (int i = 0; b && i < bytes; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

/* One file's fields after its path; false when malformed. */
static bool read_file(rbuf *r, kpc_manifest_file *f)
{
    uint32_t kind = (uint32_t)r_uint(r, 4);
    if (r->bad || (kind != FILE_READ && kind != FILE_ABSENT))
        return false;
    memset(&f->dev, 0, sizeof *f - offsetof(kpc_manifest_file, dev));
    f->absent = kind == FILE_ABSENT;
    if (f->absent)
        return true;
    f->dev = r_uint(r, 8);
    f->ino = r_uint(r, 8);
    f->size = r_uint(r, 8);
    f->mtime_ns = (int64_t)r_uint(r, 8);
    f->ctime_ns = (int64_t)r_uint(r, 8);
    const uint8_t *d = r_bytes(r, 16);
    if (d)
        memcpy(f->digest, d, 16);
    return !r->bad;
}

/* One entry list: a first pass bounds every length, a second fills the block. */
static kpc_status decode_deps(rbuf *r, uint32_t nf, kpc_deps **out)
{
    *out = NULL;
    if (nf > KPC_MANIFEST_MAX_FILES)
        return KPC_E_CORRUPT;
    rbuf scan = *r;
    size_t bytes = 0, read = 0;
    for (uint32_t j = 0; j < nf; j++) {
        uint32_t len = (uint32_t)r_uint(&scan, 4);
        const uint8_t *path = r_bytes(&scan, len);
        kpc_manifest_file f;
        if (scan.bad || len == 0 || len > 4095 || path[0] != '/' || memchr(path, '\0', len) ||
            !read_file(&scan, &f))
            return KPC_E_CORRUPT;
        bytes += (size_t)len + 1;
        read += !f.absent;
    }
    if (read == 0) /* an entry is there for the files a compile read */
        return KPC_E_CORRUPT;
    kpc_deps *d = kpc_manifest_deps_alloc(nf, bytes);
    if (d == NULL)
        return KPC_E_NOMEM;
    char *s = kpc_manifest_deps_strings(d);
    for (uint32_t j = 0; j < nf; j++) {
        kpc_manifest_file *f = &d->files[j];
        uint32_t len = (uint32_t)r_uint(r, 4);
        memcpy(s, r_bytes(r, len), len);
        s[len] = '\0';
        f->path = s;
        s += len + 1;
        read_file(r, f);
    }
    kpc_manifest_deps_finish(d);
    *out = d;
    return KPC_OK;
}

kpc_status kpc_manifest_decode(const void *buf, size_t size, kpc_manifest *out)
{
    out->count = 0;
    rbuf r = {buf, size, 0, false};
    const uint8_t *magic = r_bytes(&r, 8);
    uint32_t version = (uint32_t)r_uint(&r, 4), count = (uint32_t)r_uint(&r, 4);
    if (r.bad || memcmp(magic, MANIFEST_MAGIC, 8) != 0)
        return KPC_E_CORRUPT;
    if (version < MANIFEST_VERSION)
        return KPC_E_NOT_FOUND; /* an older format: see the top of this file */
    if (version != MANIFEST_VERSION || count > KPC_MANIFEST_MAX_ENTRIES)
        return KPC_E_CORRUPT;
    for (uint32_t i = 0; i < count; i++) {
        kpc_manifest_entry *e = &out->entries[i];
        const uint8_t *key = r_bytes(&r, 16);
        uint32_t outcome = (uint32_t)r_uint(&r, 4), nf = (uint32_t)r_uint(&r, 4);
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
