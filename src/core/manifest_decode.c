/*
 * manifest_decode.c - the bytes of a manifest (the payload of a KPC_RECORD_MANIFEST
 * record; docs/file-format.md) read: the codec's reading half, through base/bytes.h,
 * which bounds every length by the buffer before it is trusted. The writing half is
 * core/manifest_record.c: a manifest is read by a request's look before its build and
 * written by its record step after, and each step enters its own files.
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

/* One file read at r, where it lies in the list that starts at offset start; false when
 * malformed (a path that is empty, relative, too long or holds a NUL; an unknown kind;
 * fields past the end). */
static bool get_file(kpc__reader *r, size_t start, kpc_manifest_at *a)
{
    size_t len;
    const char *path = kpc__get_lstr(r, 4, KPC_MANIFEST_PATH_MAX, &len);
    uint32_t kind = kpc__get_u32(r);
    if (r->bad || len == 0 || path[0] != '/' || memchr(path, '\0', len) ||
        (kind != KPC_MANIFEST_FILE_READ && kind != KPC_MANIFEST_FILE_ABSENT))
        return false;
    a->path = (uint32_t)((const uint8_t *)path - r->p - start);
    a->path_len = (uint16_t)len;
    a->dir_len = (uint16_t)((const char *)memrchr(path, '/', len) - path); /* path[0] is a '/' */
    a->fixed = kind == KPC_MANIFEST_FILE_ABSENT ? 0 : (uint32_t)(r->off - start);
    if (kind == KPC_MANIFEST_FILE_READ)
        kpc__get_skip(r, sizeof(kpc_manifest_fixed));
    return !r->bad;
}

/* One list's nf files at r, checked, where each lies read into d->at (malloc'd) and
 * passed over: their bytes become d's. false when malformed or out of memory (then d
 * holds nothing). */
static bool get_files(kpc__reader *r, uint32_t nf, kpc_deps *d)
{
    size_t start = r->off;
    kpc_manifest_at *at = malloc((nf ? nf : 1) * sizeof *at);
    if (at == NULL)
        return false;
    for (uint32_t j = 0; j < nf; j++)
        if (!get_file(r, start, &at[j])) {
            free(at);
            return false;
        }
    *d = (kpc_deps){.count = nf, .size = r->off - start, .files = r->p + start, .at = at};
    return true;
}

/* Whether a list holds a file read: an entry is there for the files a compile read. */
static bool reads_a_file(const kpc_deps *d)
{
    for (size_t i = 0; i < d->count; i++)
        if (d->at[i].fixed != 0)
            return true;
    return false;
}

/* A decode that failed: the lists read so far are let go, and the manifest is empty. */
static kpc_status refuse(kpc_manifest *out, kpc_status s)
{
    for (size_t i = 0; i < out->count; i++)
        free(out->entries[i].deps.at);
    out->count = 0;
    return s;
}

kpc_status kpc_manifest_decode(const void *buf, size_t size, kpc_manifest *out)
{
    out->count = 0;
    out->block = NULL;
    if (size > KPC_MANIFEST_MAX_BYTES) /* more than a writer makes; and offsets fit 32 bits */
        return KPC_E_CORRUPT;
    kpc__reader r;
    kpc__reader_init(&r, buf, size);
    const uint8_t *magic = kpc__get_bytes(&r, 8);
    uint32_t version = kpc__get_u32(&r), count = kpc__get_u32(&r);
    if (r.bad || memcmp(magic, KPC_MANIFEST_MAGIC, 8) != 0)
        return KPC_E_CORRUPT;
    if (version < KPC_MANIFEST_VERSION)
        return KPC_E_NOT_FOUND; /* an older format: see the top of this file */
    if (version != KPC_MANIFEST_VERSION || count > KPC_MANIFEST_MAX_ENTRIES)
        return KPC_E_CORRUPT;
    for (uint32_t i = 0; i < count; i++) {
        kpc_manifest_entry *e = &out->entries[i];
        const uint8_t *key = kpc__get_bytes(&r, 16);
        uint32_t outcome = kpc__get_u32(&r), nf = kpc__get_u32(&r);
        if (r.bad || (outcome != KPC_MANIFEST_CODE && outcome != KPC_MANIFEST_LOG) || nf == 0 ||
            nf > KPC_MANIFEST_MAX_FILES || !get_files(&r, nf, &e->deps))
            return refuse(out, KPC_E_CORRUPT); /* (out of memory reads as a bad manifest: a miss) */
        out->count++;
        if (!reads_a_file(&e->deps))
            return refuse(out, KPC_E_CORRUPT);
        memcpy(e->object.bytes, key, 16);
        e->outcome = outcome;
    }
    if (!kpc__reader_done(&r)) /* trailing bytes: not a manifest this code wrote */
        return refuse(out, KPC_E_CORRUPT);
    return KPC_OK;
}
