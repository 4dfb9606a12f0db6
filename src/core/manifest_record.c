/*
 * manifest_record.c - the manifest's record step, one call after a build that read
 * files (kpc_seen_manifest_record): each file the compile read stat'ed and hashed, each
 * lookup that missed checked still missing (the race rule of manifest.h), the key the
 * outcome goes under (the object key), and the manifest as the request's look left it,
 * with the new entry first, encoded: the codec's writing half (the reading half is
 * core/manifest_decode.c; both spell docs/file-format.md).
 *
 * The look (core/manifest_seen.c, core/manifest.c, core/manifest_decode.c) comes before
 * the build and this after it, and neither calls into the other's files: the look
 * leaves the manifest owning one allocation, its bytes (kpc_manifest_lookup lets go of
 * where each entry's files lie, which only a check needs), so this step writes the old
 * entries from their bytes as they lie and frees that allocation itself. A request's
 * path then enters each file once (docs/design.md draws it).
 *
 * A list is written once: where each of its files lies is noted as it is written, as
 * the decoder would find it, so nothing is parsed back.
 */
#define _GNU_SOURCE /* memrchr */
#include "core/manifest_seen.h"
#include "base/bytes.h"
#include "base/fault.h"
#include "base/file_time.h"
#include "base/hash.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define OBJECT_KEY_TAG "kpc-object-1"

/* ---- the files as they are now ---------------------------------------------------- */
/* One file read: its identity and digest now. false: the outcome is not to be cached. */
static bool record_file(kpc_manifest_file *f, uint64_t compile_start_ns)
{
    struct stat st;
    if (kpc__stat_and_hash(AT_FDCWD, f->path, &st, f->digest) != 0) {
        KPC_LOG(errno == EINVAL ? KPC_LOG_WARN : KPC_LOG_DEBUG, "dependency %s: %s: the outcome is not "
                "cached", f->path, errno == EINVAL ? "not a regular file" : strerror(errno));
        return false;
    }
    f->absent = false;
    f->dev = (uint64_t)st.st_dev;
    f->ino = (uint64_t)st.st_ino;
    f->size = (uint64_t)st.st_size;
    f->mtime_ns = kpc__ts_ns(st.st_mtim);
    f->ctime_ns = kpc__ts_ns(st.st_ctim);
    if (kpc__changed_within(&st, KPC_MANIFEST_RECENT_NS, (int64_t)compile_start_ns)) {
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
    if (kpc__fstatat(AT_FDCWD, f->path, &st, 0) != 0)
        return errno == ENOENT || errno == ENOTDIR ? 1 : 0;
    if (S_ISREG(st.st_mode) && kpc__changed_within(&st, KPC_MANIFEST_RECENT_NS, (int64_t)compile_start_ns)) {
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

/* ---- the object key ------------------------------------------------------------- */
/* Its hash: started with the request key; each file read added (a missed lookup changes
 * no byte the compiler read); its digest the key. */
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

/* ---- the bytes (docs/file-format.md) ------------------------------------------------ */
/* The bytes of one file: what the decoder's get_file reads back. */
static void put_file(kpc__writer *w, const kpc_manifest_file *f)
{
    kpc__put_lstr(w, 4, f->path, f->path_len);
    kpc__put_u32(w, f->absent ? KPC_MANIFEST_FILE_ABSENT : KPC_MANIFEST_FILE_READ);
    if (f->absent)
        return;
    kpc_manifest_fixed x;
    kpc__store_le(x.dev, f->dev, 8);
    kpc__store_le(x.ino, f->ino, 8);
    kpc__store_le(x.size, f->size, 8);
    kpc__store_le(x.mtime_ns, (uint64_t)f->mtime_ns, 8);
    kpc__store_le(x.ctime_ns, (uint64_t)f->ctime_ns, 8);
    memcpy(x.digest, f->digest, 16);
    kpc__put_bytes(w, &x, sizeof x);
}

/* The list of files[0..n), at[i] where its i-th file lies from the list's first byte
 * (as the decoder finds it). KPC_E_INVALID for too many files or a path a manifest
 * cannot hold (empty, relative, too long). */
static kpc_status put_list(kpc__writer *w, const kpc_manifest_file *files, size_t n, kpc_manifest_at *at)
{
    if (n > KPC_MANIFEST_MAX_FILES)
        return KPC_E_INVALID;
    size_t start = w->len;
    for (size_t i = 0; i < n; i++) {
        const kpc_manifest_file *f = &files[i];
        if (f->path_len == 0 || f->path_len > KPC_MANIFEST_PATH_MAX || f->path[0] != '/')
            return KPC_E_INVALID;
        size_t path = w->len - start + 4; /* after its length */
        at[i] = (kpc_manifest_at){
            .path = (uint32_t)path,
            .path_len = (uint16_t)f->path_len,
            .dir_len = (uint16_t)((const char *)memrchr(f->path, '/', f->path_len) - f->path),
            .fixed = f->absent ? 0 : (uint32_t)(path + f->path_len + 4), /* after its kind */
        };
        put_file(w, f);
    }
    return KPC_OK;
}

/* A list of n files whose bytes are size at bytes, copied behind the struct (at: where
 * each lies, handed over). */
static kpc_status list_of(const void *bytes, size_t size, size_t n, kpc_manifest_at *at, kpc_deps **out)
{
    kpc_deps *d = malloc(sizeof *d + size);
    if (d == NULL)
        return KPC_E_NOMEM;
    memcpy(d + 1, bytes, size);
    *d = (kpc_deps){.count = n, .size = size, .files = (const uint8_t *)(d + 1), .at = at};
    *out = d;
    return KPC_OK;
}

/* The manifest: (object, outcome, the list of files[0..n)) first where files is not
 * NULL (where each file lies into at, the list's bytes' place in *buf into list[0] and
 * list[1]), then m's entries, written from their bytes as they lie. *buf malloc'd. */
static kpc_status encode(const kpc_manifest *m, const kpc_key *object, uint32_t outcome,
                         const kpc_manifest_file *files, size_t n, kpc_manifest_at *at, size_t list[2],
                         void **buf, size_t *size)
{
    kpc__writer w;
    kpc__writer_grow(&w, KPC_MANIFEST_MAX_BYTES);
    kpc__put_bytes(&w, KPC_MANIFEST_MAGIC, 8);
    kpc__put_u32(&w, KPC_MANIFEST_VERSION);
    kpc__put_u32(&w, (uint32_t)(m->count + (files != NULL)));
    if (files) {
        kpc__put_bytes(&w, object->bytes, 16);
        kpc__put_u32(&w, outcome);
        kpc__put_u32(&w, (uint32_t)n);
        list[0] = w.len;
        kpc_status s = put_list(&w, files, n, at);
        if (s != KPC_OK) {
            kpc__writer_discard(&w);
            return s;
        }
        list[1] = w.len - list[0];
    }
    for (size_t i = 0; i < m->count; i++) {
        const kpc_manifest_entry *e = &m->entries[i];
        kpc__put_bytes(&w, e->object.bytes, 16);
        kpc__put_u32(&w, e->outcome);
        kpc__put_u32(&w, (uint32_t)e->deps.count);
        kpc__put_bytes(&w, e->deps.files, e->deps.size); /* the files' bytes as they are */
    }
    return kpc__writer_finish(&w, buf, size); /* past KPC_MANIFEST_MAX_BYTES: invalid */
}

kpc_status kpc_manifest_encode(const kpc_manifest *m, void **buf, size_t *size)
{
    return encode(m, NULL, 0, NULL, 0, NULL, NULL, buf, size);
}

/* The manifest of (object, outcome, files[0..n)) then m's entries, into *buf (malloc'd;
 * buf NULL: not kept), and that list as one of its own out of its bytes, into *deps:
 * every list is written this one way. */
static kpc_status write_new(const kpc_manifest *m, const kpc_key *object, uint32_t outcome,
                            const kpc_manifest_file *files, size_t n, kpc_deps **deps, void **buf, size_t *size)
{
    kpc_manifest_at *at = malloc((n ? n : 1) * sizeof *at);
    if (at == NULL)
        return KPC_E_NOMEM;
    size_t list[2] = {0, 0}, bytes_size;
    void *bytes = NULL;
    kpc_status s = encode(m, object, outcome, files, n, at, list, &bytes, &bytes_size);
    if (s == KPC_OK)
        s = list_of((uint8_t *)bytes + list[0], list[1], n, at, deps);
    if (s != KPC_OK)
        free(at);
    if (s == KPC_OK && buf) {
        *buf = bytes;
        *size = bytes_size;
    } else
        free(bytes);
    return s;
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
    /* the list alone: written as a build's is, in a manifest of nothing else not kept */
    static const kpc_manifest none = {0};
    static const kpc_key no_object = {{0}};
    s = write_new(&none, &no_object, KPC_MANIFEST_CODE, files, kept, out, NULL, NULL);
    warn_invalid(s);
    free(files);
    return s;
}

/* ---- a build recorded into the manifest as looked at ----------------------------- */
/* Room for object's entry at the head of m: an entry for the same object goes, or the
 * oldest when m is full. The entries own nothing (see the top of this file). */
static void make_room(kpc_manifest *m, const kpc_key *object)
{
    size_t drop = m->count;
    for (size_t i = 0; i < m->count; i++)
        if (memcmp(m->entries[i].object.bytes, object->bytes, 16) == 0)
            drop = i;
    if (drop == m->count && m->count == KPC_MANIFEST_MAX_ENTRIES)
        drop = m->count - 1;
    if (drop < m->count) {
        memmove(&m->entries[drop], &m->entries[drop + 1], (m->count - drop - 1) * sizeof m->entries[0]);
        m->count--;
    }
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
        /* the manifest, then the new list out of its bytes: one pass of the writer */
        s = write_new(m, &obj, outcome, files, kept, deps, buf, size);
        warn_invalid(s);
        if (s == KPC_OK)
            *object = obj;
    }
    free(files);
    free(m->block); /* the old entries' bytes, all the manifest owns */
    m->block = NULL;
    m->count = 0;
    return s;
}

kpc_status kpc_seen_manifest_record(kpc_context *ctx, const kpc_key *key, kpc_seen_manifest *sm,
                                    const kpc_manifest_build *b, uint32_t outcome, kpc_deps **deps,
                                    kpc_key *object, void **buf, size_t *size)
{
    if (!sm->read)
        kpc_seen_manifest_look(ctx, key, sm);
    /* nothing held (no manifest, or one unreadable): the new one has this entry alone */
    kpc_status s = kpc_manifest_record_build(&sm->m, key, b, outcome, deps, object, buf, size);
    sm->read = false;
    return s;
}
