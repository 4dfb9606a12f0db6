/*
 * manifest_codec.c - the bytes of a manifest (the payload of a KPC_RECORD_MANIFEST
 * record; docs/file-format.md), read and written through base/bytes.h, which bounds
 * every length by the buffer before it is trusted.
 *
 * Version 2 adds each file's device and inode and the absent entries (lookups that
 * missed). A version 1 manifest is read as no manifest (KPC_E_NOT_FOUND, not corrupt):
 * its entries would match by size and times alone and know nothing of shadowing
 * headers, the two holes version 2 closes; the next build of the request rewrites it,
 * one compile per request once.
 */
#define _GNU_SOURCE /* memrchr */
#include "core/manifest.h"

#include "base/bytes.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define MANIFEST_MAGIC "KPCMANI1" /* the magic stays; the version after it counts */
#define MANIFEST_VERSION 2u
#define FILE_READ 0u
#define FILE_ABSENT 1u
#define PATH_MAX_BYTES 4095u

kpc_status kpc_manifest_encode(const kpc_manifest *m, void **buf, size_t *size)
{
    kpc__writer w;
    kpc__writer_grow(&w, KPC_MANIFEST_MAX_BYTES);
    kpc__put_bytes(&w, MANIFEST_MAGIC, 8);
    kpc__put_u32(&w, MANIFEST_VERSION);
    kpc__put_u32(&w, (uint32_t)m->count);
    for (size_t i = 0; i < m->count; i++) {
        const kpc_manifest_entry *e = &m->entries[i];
        size_t nf = e->deps ? e->deps->count : 0;
        kpc__put_bytes(&w, e->object.bytes, 16);
        kpc__put_u32(&w, (uint32_t)e->outcome);
        kpc__put_u32(&w, (uint32_t)nf);
        for (size_t j = 0; j < nf; j++) {
            const kpc_manifest_file *f = &e->deps->files[j];
            kpc__put_lstr(&w, 4, f->path, strlen(f->path));
            kpc__put_u32(&w, f->absent ? FILE_ABSENT : FILE_READ);
            if (f->absent)
                continue;
            kpc__put_u64(&w, f->dev);
            kpc__put_u64(&w, f->ino);
            kpc__put_u64(&w, f->size);
            kpc__put_u64(&w, (uint64_t)f->mtime_ns);
            kpc__put_u64(&w, (uint64_t)f->ctime_ns);
            kpc__put_bytes(&w, f->digest, 16);
        }
    }
    return kpc__writer_finish(&w, buf, size); /* past KPC_MANIFEST_MAX_BYTES: invalid */
}

/* One file's fields after its path; false when malformed. */
static bool read_file(kpc__reader *r, kpc_manifest_file *f)
{
    uint32_t kind = kpc__get_u32(r);
    if (kind != FILE_READ && kind != FILE_ABSENT)
        kpc__reader_fail(r);
    memset(&f->dev, 0, sizeof *f - offsetof(kpc_manifest_file, dev));
    f->absent = kind == FILE_ABSENT;
    if (f->absent || r->bad)
        return !r->bad;
    f->dev = kpc__get_u64(r);
    f->ino = kpc__get_u64(r);
    f->size = kpc__get_u64(r);
    f->mtime_ns = (int64_t)kpc__get_u64(r);
    f->ctime_ns = (int64_t)kpc__get_u64(r);
    kpc__get_copy(r, f->digest, 16);
    return !r->bad;
}

/* One entry list: a first pass bounds every length, a second fills the block. */
static kpc_status decode_deps(kpc__reader *r, uint32_t nf, kpc_deps **out)
{
    *out = NULL;
    if (nf > KPC_MANIFEST_MAX_FILES)
        return KPC_E_CORRUPT;
    kpc__reader scan = *r;
    size_t bytes = 0, read = 0;
    for (uint32_t j = 0; j < nf; j++) {
        size_t len;
        const char *path = kpc__get_lstr(&scan, 4, PATH_MAX_BYTES, &len);
        kpc_manifest_file f;
        if (path == NULL || len == 0 || path[0] != '/' || memchr(path, '\0', len) ||
            !read_file(&scan, &f))
            return KPC_E_CORRUPT;
        bytes += len + 1;
        read += !f.absent;
    }
    if (read == 0) /* an entry is there for the files a compile read */
        return KPC_E_CORRUPT;
    kpc_deps *d = kpc_manifest_deps_alloc(nf, bytes);
    if (d == NULL)
        return KPC_E_NOMEM;
    char *s = kpc_manifest_deps_strings(d);
    for (uint32_t j = 0; j < nf; j++) { /* the scan proved every read below */
        kpc_manifest_file *f = &d->files[j];
        size_t len;
        const char *path = kpc__get_lstr(r, 4, PATH_MAX_BYTES, &len);
        memcpy(s, path, len);
        s[len] = '\0';
        f->path = s;
        /* its directory: the scan proved path[0] is a '/' */
        f->dir_len = (uint32_t)((const char *)memrchr(s, '/', len) - s);
        s += len + 1;
        read_file(r, f);
    }
    *out = d;
    return KPC_OK;
}

kpc_status kpc_manifest_decode(const void *buf, size_t size, kpc_manifest *out)
{
    out->count = 0;
    kpc__reader r;
    kpc__reader_init(&r, buf, size);
    const uint8_t *magic = kpc__get_bytes(&r, 8);
    uint32_t version = kpc__get_u32(&r), count = kpc__get_u32(&r);
    if (r.bad || memcmp(magic, MANIFEST_MAGIC, 8) != 0)
        return KPC_E_CORRUPT;
    if (version < MANIFEST_VERSION)
        return KPC_E_NOT_FOUND; /* an older format: see the top of this file */
    if (version != MANIFEST_VERSION || count > KPC_MANIFEST_MAX_ENTRIES)
        return KPC_E_CORRUPT;
    for (uint32_t i = 0; i < count; i++) {
        kpc_manifest_entry *e = &out->entries[i];
        const uint8_t *key = kpc__get_bytes(&r, 16);
        uint32_t outcome = kpc__get_u32(&r), nf = kpc__get_u32(&r);
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
    if (!kpc__reader_done(&r)) { /* trailing bytes: not a manifest this code wrote */
        kpc_manifest_free(out);
        return KPC_E_CORRUPT;
    }
    return KPC_OK;
}
