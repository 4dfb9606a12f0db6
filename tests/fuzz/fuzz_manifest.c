/*
 * fuzz_manifest.c - libFuzzer target for the manifest decoder (the payload of a .mf
 * record).
 *
 * A manifest's bytes are not copied into structures: a program keeps the matched entry's
 * bytes and every later check reads its files' fields in place (core/manifest.h). So the
 * decoder's checks are all that stands between a damaged file and those reads. Each input
 * is one payload. Oracle: nothing crashes, leaks or reads out of bounds (ASan/UBSan); a
 * manifest is either refused, or every entry's files read back one by one to exactly
 * the count and the bytes the decoder gave that entry, each path absolute with its
 * directory inside it, and encoding the decoded manifest gives back the input byte for
 * byte. A list taken out of it, and its copy, give the entry's object key computation
 * the same files.
 *
 * Seeds: a manifest the library itself writes (two entries, read files and a missed
 * lookup) is generated at start-up into $KPC_FUZZ_SEED_DIR when it is set;
 * tests/fuzz/corpus/manifest/ keeps a copy.
 */
#define _GNU_SOURCE
#include "fuzz_common.h"

#include "core/manifest.h"

#include <stdlib.h>
#include <string.h>

static char dir[4096];

static void write_seed(void)
{
    char a[4200], b[4200], gone[4200];
    snprintf(a, sizeof a, "%s/a.h", dir);
    snprintf(b, sizeof b, "%s/b.h", dir);
    snprintf(gone, sizeof gone, "%s/inc/a.h", dir);
    fuzz_write_file(a, "#define A 1\n", 12);
    fuzz_write_file(b, "#define B 2\n", 12);
    const char *one[] = {a}, *two[] = {a, b}, *absent[] = {gone};
    uint64_t later = kpc__wall_ns() + 2000000000ull; /* the files are "old" */
    /* two builds of one request recorded, the second into the manifest the first wrote */
    kpc_manifest_build b1 = {one, 1, absent, 1, NULL, later}, b2 = {two, 2, NULL, 0, NULL, later};
    kpc_manifest m = {0};
    kpc_key request = {{1}}, object;
    kpc_deps *d1, *d2;
    void *first, *buf;
    size_t first_size, size;
    if (kpc_manifest_record_build(&m, &request, &b1, KPC_MANIFEST_CODE, &d1, &object, &first, &first_size) != KPC_OK ||
        kpc_manifest_lookup(first, first, first_size, 0, &m, NULL) != KPC_OK ||
        kpc_manifest_record_build(&m, &request, &b2, KPC_MANIFEST_LOG, &d2, &object, &buf, &size) != KPC_OK)
        abort();
    char path[4200];
    snprintf(path, sizeof path, "%s/seed.mf", dir);
    fuzz_write_file(path, buf, size);
    fuzz_copy_seed(path, "manifest");
    free(buf);
    kpc_manifest_deps_free(d1);
    kpc_manifest_deps_free(d2);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    fuzz_tmpdir(dir, sizeof dir);
    if (kpc__mkdir_p(dir, 0700) != 0)
        abort();
    write_seed();
    return 0;
}

/* Every file of d as read: each well formed, its path within d's bytes. */
static void check_list(const kpc_deps *d)
{
    for (size_t i = 0; i < d->count; i++) {
        kpc_manifest_file file, *f = &file;
        kpc_manifest_file_at(d, i, f);
        if (f->path_len == 0 || f->path[0] != '/' || f->dir_len >= f->path_len || f->path[f->dir_len] != '/' ||
            memchr(f->path, '\0', f->path_len) || f->path < (const char *)d->files ||
            f->path + f->path_len > (const char *)d->files + d->size ||
            (!f->absent && (const uint8_t *)f->path + f->path_len + 4 + sizeof(kpc_manifest_fixed) >
                               d->files + d->size))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of its own, as the store hands a payload over: the manifest may keep it */
    uint8_t *bytes = malloc(size ? size : 1);
    if (bytes == NULL)
        return 0;
    memcpy(bytes, data, size);
    kpc_manifest m;
    if (kpc_manifest_decode(bytes, size, &m) != KPC_OK) {
        if (m.count != 0 || m.block != NULL)
            abort();
        free(bytes);
        return 0;
    }
    m.block = bytes;
    for (size_t i = 0; i < m.count; i++)
        check_list(&m.entries[i].deps);
    void *again;
    size_t again_size;
    if (kpc_manifest_encode(&m, &again, &again_size) != KPC_OK || again_size != size ||
        memcmp(again, data, size) != 0)
        abort();
    free(again);
    if (m.count) {
        kpc_key request = {{7}}, before, after;
        kpc_manifest_object_key(&request, &m.entries[0].deps, &before);
        kpc_deps *taken = kpc_manifest_take(&m, &m.entries[0]);
        bool ok;
        kpc_deps *copy = kpc_manifest_deps_copy(taken, &ok);
        if (taken == NULL || !ok)
            abort();
        kpc_manifest_free(&m); /* the taken list outlives the manifest */
        check_list(taken);
        check_list(copy);
        kpc_manifest_object_key(&request, copy, &after);
        if (memcmp(before.bytes, after.bytes, 16) != 0)
            abort();
        kpc_manifest_deps_free(taken);
        kpc_manifest_deps_free(copy);
        return 0;
    }
    kpc_manifest_free(&m);
    return 0;
}
