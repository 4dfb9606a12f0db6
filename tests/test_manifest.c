/*
 * test_manifest.c - the manifest module alone: dependency lists recorded and checked
 * against the file system (edits, deletions, symlinks, the race rule), manifests
 * encoded, decoded (and refused when damaged), their entry lists, the object key, a
 * build recorded into a manifest in one call, and threads hitting a program whose header
 * changes (which options make the working directory part of the key:
 * test_core_compile.c). How the platforms learn the files (dependency files, the include
 * scan): test_manifest_scan.c.
 */
#define _GNU_SOURCE
#include "core/manifest.h"
#include "support.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define SEC 1000000000ull

static char *dir;

static void setup(void)
{
    dir = ts_tmpdir(); /* the cache directory's path, not made yet: the files go there */
    ck_assert_int_eq(kpc__mkdir_p(dir, 0700), 0);
}

static void teardown(void)
{
    ts_cleanup(dir);
}

static void put(const char *name, const char *text, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    ts_write_file(path, text, strlen(text));
}

/* A start time two seconds from now: the files were written "long before" the compile. */
static uint64_t later(void)
{
    return kpc__wall_ns() + 2 * SEC;
}

/* ---- recording and checking ------------------------------------------------------- */
/* File i of d, as its bytes were read when the list was made. */
static kpc_manifest_file file_at(const kpc_deps *d, size_t i)
{
    ck_assert_uint_lt(i, d->count);
    ck_assert((const uint8_t *)d->file[i].path >= d->files &&
              (const uint8_t *)d->file[i].path + d->file[i].path_len <= d->files + d->size);
    return d->file[i];
}

/* f's path (not NUL-terminated) is s. */
#define ck_assert_path_is(f, s)                                                                     \
    do {                                                                                           \
        ck_assert_uint_eq((f).path_len, strlen(s));                                                \
        ck_assert_mem_eq((f).path, (s), strlen(s));                                                \
    } while (0)

static kpc_deps *record1(const char *path)
{
    kpc_deps *d = NULL;
    const char *paths[] = {path};
    ck_assert_int_eq(kpc_manifest_deps_record(paths, 1, NULL, 0, NULL, later(), &d), KPC_OK);
    ck_assert_ptr_nonnull(d);
    return d;
}

START_TEST(record_and_match)
{
    char a[4200], b[4200];
    put("a.h", "typedef float real;\n", a, sizeof a);
    put("b.h", "#define N 1\n", b, sizeof b);
    /* relative paths are taken against the working directory given */
    const char *paths[] = {"a.h", b};
    kpc_deps *d = NULL;
    ck_assert_int_eq(kpc_manifest_deps_record(paths, 2, NULL, 0, dir, later(), &d), KPC_OK);
    ck_assert_uint_eq(d->count, 2);
    ck_assert_path_is(file_at(d, 0), a);
    ck_assert_uint_eq(file_at(d, 0).size, strlen("typedef float real;\n"));
    ck_assert_path_is(file_at(d, 1), b);
    ck_assert(kpc_manifest_deps_match(d));

    /* same size, other bytes: caught (the ctime moved, so it is re-hashed) */
    ts_write_file(a, "typedef doubl real;\n", strlen("typedef doubl real;\n"));
    ck_assert(!kpc_manifest_deps_match(d));
    /* the old bytes back: matches again (by content) */
    ts_write_file(a, "typedef float real;\n", strlen("typedef float real;\n"));
    ck_assert(kpc_manifest_deps_match(d));
    /* other bytes with the old mtime put back: the ctime still tells */
    ts_write_file(a, "typedef doubl real;\n", strlen("typedef doubl real;\n"));
    struct timespec times[2] = {{0, UTIME_OMIT}, {file_at(d, 0).mtime_ns / SEC, file_at(d, 0).mtime_ns % SEC}};
    ck_assert_int_eq(utimensat(AT_FDCWD, a, times, 0), 0);
    ck_assert(!kpc_manifest_deps_match(d));
    ts_write_file(a, "typedef float real;\n", strlen("typedef float real;\n"));
    /* touched, same bytes: still a match */
    ck_assert_int_eq(utimensat(AT_FDCWD, a, NULL, 0), 0);
    ck_assert(kpc_manifest_deps_match(d));
    /* gone: a mismatch, never a stale hit */
    ck_assert_int_eq(unlink(b), 0);
    ck_assert(!kpc_manifest_deps_match(d));
    /* a directory where the file was */
    ck_assert_int_eq(mkdir(b, 0700), 0);
    ck_assert(!kpc_manifest_deps_match(d));
    kpc_manifest_deps_free(d);

    /* a relative path without a working directory is refused */
    ck_assert_int_eq(kpc_manifest_deps_record(paths, 2, NULL, 0, NULL, later(), &d), KPC_E_INVALID);
    /* a missing file cannot be recorded */
    const char *missing[] = {"/nonexistent/kpc/x.h"};
    ck_assert_int_eq(kpc_manifest_deps_record(missing, 1, NULL, 0, NULL, later(), &d), KPC_E_NOT_FOUND);
    /* none: no list */
    ck_assert_int_eq(kpc_manifest_deps_record(NULL, 0, NULL, 0, NULL, later(), &d), KPC_OK);
    ck_assert_ptr_null(d);
    ck_assert(kpc_manifest_deps_match(NULL));
}
END_TEST

START_TEST(record_refuses_recent)
{
    /* written now and compiled now: the compiler may have read other bytes than the ones
     * hashed afterwards, so the outcome must not be recorded */
    char a[4200];
    put("a.h", "x", a, sizeof a);
    const char *paths[] = {a};
    kpc_deps *d = NULL;
    ck_assert_int_eq(kpc_manifest_deps_record(paths, 1, NULL, 0, NULL, kpc__wall_ns(), &d), KPC_E_NOT_FOUND);
    ck_assert_ptr_null(d);
    /* a compile that began more than a second after the write is fine */
    ck_assert_int_eq(kpc_manifest_deps_record(paths, 1, NULL, 0, NULL, kpc__wall_ns() + SEC + SEC / 10, &d),
                     KPC_OK);
    kpc_manifest_deps_free(d);
}
END_TEST

START_TEST(symlinked_header)
{
    char a[4200], b[4200], c[4200], link[4200];
    put("a.h", "#define V 1\n", a, sizeof a);
    put("b.h", "#define V 2\n", b, sizeof b);
    put("c.h", "#define V 1\n", c, sizeof c);
    snprintf(link, sizeof link, "%s/v.h", dir);
    ck_assert_int_eq(symlink(a, link), 0);
    kpc_deps *d = record1(link);
    ck_assert_path_is(file_at(d, 0), link); /* the link's path, not its target's */
    ck_assert(kpc_manifest_deps_match(d));
    /* re-pointed at other bytes: a mismatch */
    ck_assert_int_eq(unlink(link), 0);
    ck_assert_int_eq(symlink(b, link), 0);
    ck_assert(!kpc_manifest_deps_match(d));
    /* re-pointed at the same bytes elsewhere: a match (content decides) */
    ck_assert_int_eq(unlink(link), 0);
    ck_assert_int_eq(symlink(c, link), 0);
    ck_assert(kpc_manifest_deps_match(d));
    /* the target edited through the link */
    ts_write_file(c, "#define V 3\n", strlen("#define V 3\n"));
    ck_assert(!kpc_manifest_deps_match(d));
    /* dangling */
    ck_assert_int_eq(unlink(c), 0);
    ck_assert(!kpc_manifest_deps_match(d));
    kpc_manifest_deps_free(d);
}
END_TEST

/* ---- manifests ---------------------------------------------------------------------- */
START_TEST(encode_decode)
{
    char a[4200], b[4200];
    put("a.h", "one\n", a, sizeof a);
    put("b.h", "two\n", b, sizeof b);
    kpc_deps *da = record1(a), *db = record1(b);
    kpc_key req = {{1, 2, 3}}, oa, ob;
    kpc_manifest_object_key(&req, da, &oa);
    kpc_manifest_object_key(&req, db, &ob);
    ck_assert_mem_ne(oa.bytes, ob.bytes, 16);
    ck_assert_mem_ne(oa.bytes, req.bytes, 16);
    /* the object key's bytes, as docs/file-format.md spells them (caches written before
     * stay readable): the tag with its NUL, the request key, each path with its NUL and
     * the XXH3-128 of the file's content */
    uint8_t spelled[4400], digest[16];
    size_t n = 0;
    memcpy(spelled, "kpc-object-1", 13);
    n += 13;
    memcpy(spelled + n, req.bytes, 16);
    n += 16;
    memcpy(spelled + n, a, strlen(a) + 1);
    n += strlen(a) + 1;
    XXH128_canonicalFromHash((XXH128_canonical_t *)digest, XXH3_128bits("one\n", 4));
    memcpy(spelled + n, digest, 16);
    n += 16;
    kpc_key expect;
    XXH128_canonicalFromHash((XXH128_canonical_t *)expect.bytes, XXH3_128bits(spelled, n));
    ck_assert_mem_eq(oa.bytes, expect.bytes, 16);
    kpc_key same;
    kpc_manifest_object_key(&req, NULL, &same);
    ck_assert_mem_eq(same.bytes, req.bytes, 16);

    kpc_manifest m = {0};
    ck_assert_int_eq(kpc_manifest_add(&m, &oa, KPC_MANIFEST_CODE, da), KPC_OK);
    ck_assert_int_eq(kpc_manifest_add(&m, &ob, KPC_MANIFEST_LOG, db), KPC_OK);
    void *buf;
    size_t size;
    ck_assert_int_eq(kpc_manifest_encode(&m, &buf, &size), KPC_OK);
    kpc_manifest back;
    ck_assert_int_eq(kpc_manifest_decode(buf, size, &back), KPC_OK);
    ck_assert_uint_eq(back.count, 2);
    ck_assert_mem_eq(back.entries[0].object.bytes, ob.bytes, 16); /* newest first */
    ck_assert_uint_eq(back.entries[0].outcome, KPC_MANIFEST_LOG);
    ck_assert_path_is(file_at(&back.entries[1].deps, 0), a);
    ck_assert_mem_eq(file_at(&back.entries[1].deps, 0).digest, file_at(da, 0).digest, 16);
    ck_assert_int_eq(file_at(&back.entries[1].deps, 0).mtime_ns, file_at(da, 0).mtime_ns);
    /* the entries' files read in place give the same object keys */
    kpc_key again;
    kpc_manifest_object_key(&req, &back.entries[1].deps, &again);
    ck_assert_mem_eq(again.bytes, oa.bytes, 16);
    /* and encode to the very same bytes */
    void *buf2;
    size_t size2;
    ck_assert_int_eq(kpc_manifest_encode(&back, &buf2, &size2), KPC_OK);
    ck_assert_uint_eq(size2, size);
    ck_assert_mem_eq(buf2, buf, size);
    free(buf2);
    /* an entry taken out of a manifest of two is a copy that outlives it */
    kpc_deps *taken = kpc_manifest_take(&back, &back.entries[1]);
    ck_assert_ptr_nonnull(taken);
    ck_assert_ptr_null(taken->block);
    ck_assert_uint_eq(taken->count, da->count);
    ck_assert_mem_eq(taken->files, da->files, da->size);
    /* both match: the newest wins */
    ck_assert_ptr_eq(kpc_manifest_match(&back), &back.entries[0]);
    /* b changes: a's entry answers */
    ts_write_file(b, "TWO\n", 4);
    ck_assert_ptr_eq(kpc_manifest_match(&back), &back.entries[1]);
    ts_write_file(a, "ONE\n", 4);
    ck_assert_ptr_null(kpc_manifest_match(&back));
    kpc_manifest_free(&back);
    ck_assert(!kpc_manifest_deps_match(taken)); /* a's bytes changed; the copy still reads */
    kpc_manifest_deps_free(taken);

    /* a manifest of one entry hands its own bytes over whole: nothing copied */
    kpc_manifest one = {0};
    ck_assert_int_eq(kpc_manifest_add(&one, &oa, KPC_MANIFEST_CODE, da), KPC_OK);
    void *obuf;
    size_t osize;
    ck_assert_int_eq(kpc_manifest_encode(&one, &obuf, &osize), KPC_OK);
    kpc_manifest_free(&one);
    ck_assert_int_eq(kpc_manifest_decode(obuf, osize, &one), KPC_OK);
    one.bytes = obuf;
    taken = kpc_manifest_take(&one, &one.entries[0]);
    ck_assert_ptr_eq(taken->block, obuf);
    ck_assert_ptr_null(one.bytes);
    kpc_manifest_free(&one);
    kpc_manifest_object_key(&req, taken, &again);
    ck_assert_mem_eq(again.bytes, oa.bytes, 16);
    kpc_manifest_deps_free(taken);

    /* every truncation and a flipped byte in the header are refused, never misread */
    for (size_t cut = 0; cut < size; cut++)
        ck_assert_int_eq(kpc_manifest_decode(buf, cut, &back), KPC_E_CORRUPT);
    uint8_t *bytes = buf;
    bytes[3] ^= 1;
    ck_assert_int_eq(kpc_manifest_decode(buf, size, &back), KPC_E_CORRUPT);
    bytes[3] ^= 1;
    bytes[12] = 200; /* entry count past the maximum */
    ck_assert_int_eq(kpc_manifest_decode(buf, size, &back), KPC_E_CORRUPT);
    free(buf);
    kpc_manifest_free(&m);
    kpc_manifest_deps_free(da);
    kpc_manifest_deps_free(db);
}
END_TEST

START_TEST(entries_replace_and_cap)
{
    char a[4200];
    put("a.h", "x\n", a, sizeof a);
    kpc_deps *d = record1(a);
    kpc_manifest m = {0};
    kpc_key k[KPC_MANIFEST_MAX_ENTRIES + 3];
    for (size_t i = 0; i < KPC_MANIFEST_MAX_ENTRIES + 3; i++) {
        memset(&k[i], 0, sizeof k[i]);
        k[i].bytes[0] = (uint8_t)(i + 1);
        ck_assert_int_eq(kpc_manifest_add(&m, &k[i], KPC_MANIFEST_CODE, d), KPC_OK);
    }
    ck_assert_uint_eq(m.count, KPC_MANIFEST_MAX_ENTRIES);
    ck_assert_uint_eq(m.entries[0].object.bytes[0], KPC_MANIFEST_MAX_ENTRIES + 3);
    ck_assert_uint_eq(m.entries[KPC_MANIFEST_MAX_ENTRIES - 1].object.bytes[0], 4); /* 1..3 dropped */
    /* adding an object already listed moves it first, no duplicate */
    ck_assert_int_eq(kpc_manifest_add(&m, &k[5], KPC_MANIFEST_LOG, d), KPC_OK);
    ck_assert_uint_eq(m.count, KPC_MANIFEST_MAX_ENTRIES);
    ck_assert_uint_eq(m.entries[0].object.bytes[0], 6);
    ck_assert_uint_eq(m.entries[0].outcome, KPC_MANIFEST_LOG);
    size_t seen = 0;
    for (size_t i = 0; i < m.count; i++)
        seen += m.entries[i].object.bytes[0] == 6;
    ck_assert_uint_eq(seen, 1);
    kpc_manifest_free(&m);
    kpc_manifest_deps_free(d);
}
END_TEST

/* A build recorded into a manifest in one call (what a miss behind a manifest makes):
 * its files recorded, the object key kpc_manifest_object_key gives for them, the new
 * entry first with an entry of the same object replaced and the oldest dropped past
 * the cap, the bytes decoding to exactly that, and the manifest given in freed. */
START_TEST(record_build_puts_the_build_first)
{
    char a[4200], b[4200];
    put("a.h", "x\n", a, sizeof a);
    put("b.h", "y\n", b, sizeof b);
    kpc_key req = {{9}};
    kpc_deps *da = record1(a);
    kpc_manifest m = {0};
    kpc_key k[KPC_MANIFEST_MAX_ENTRIES];
    for (size_t i = 0; i < KPC_MANIFEST_MAX_ENTRIES; i++) {
        memset(&k[i], 0, sizeof k[i]);
        k[i].bytes[0] = (uint8_t)(i + 1);
        ck_assert_int_eq(kpc_manifest_add(&m, &k[i], KPC_MANIFEST_CODE, da), KPC_OK);
    }
    const char *paths[] = {b};
    kpc_manifest_build build = {paths, 1, NULL, 0, NULL, later()};
    kpc_deps *deps;
    kpc_key object;
    void *buf;
    size_t size;
    ck_assert_int_eq(kpc_manifest_record_build(&m, &req, &build, KPC_MANIFEST_LOG, &deps, &object, &buf, &size),
                     KPC_OK);
    ck_assert_uint_eq(m.count, 0); /* freed */
    ck_assert_ptr_null(m.bytes);
    ck_assert_uint_eq(deps->count, 1);
    ck_assert_path_is(file_at(deps, 0), b);
    kpc_key want;
    kpc_manifest_object_key(&req, deps, &want);
    ck_assert_mem_eq(object.bytes, want.bytes, 16);
    ck_assert_mem_ne(object.bytes, req.bytes, 16);
    kpc_manifest back;
    ck_assert_int_eq(kpc_manifest_decode(buf, size, &back), KPC_OK);
    ck_assert_uint_eq(back.count, KPC_MANIFEST_MAX_ENTRIES); /* the oldest (k[0]) dropped */
    ck_assert_mem_eq(back.entries[0].object.bytes, object.bytes, 16);
    ck_assert_uint_eq(back.entries[0].outcome, KPC_MANIFEST_LOG);
    ck_assert_uint_eq(back.entries[0].deps.size, deps->size);
    ck_assert_mem_eq(back.entries[0].deps.files, deps->files, deps->size);
    ck_assert_uint_eq(back.entries[1].object.bytes[0], KPC_MANIFEST_MAX_ENTRIES);
    ck_assert_uint_eq(back.entries[KPC_MANIFEST_MAX_ENTRIES - 1].object.bytes[0], 2);
    kpc_manifest_free(&back);

    /* the same build again, into that manifest: its entry replaced, not doubled */
    ck_assert_int_eq(kpc_manifest_decode(buf, size, &m), KPC_OK);
    m.bytes = buf; /* the manifest owns them now */
    kpc_deps *again;
    kpc_key object2;
    void *buf2;
    size_t size2;
    ck_assert_int_eq(kpc_manifest_record_build(&m, &req, &build, KPC_MANIFEST_CODE, &again, &object2, &buf2, &size2),
                     KPC_OK);
    ck_assert_mem_eq(object2.bytes, object.bytes, 16);
    ck_assert_int_eq(kpc_manifest_decode(buf2, size2, &back), KPC_OK);
    ck_assert_uint_eq(back.count, KPC_MANIFEST_MAX_ENTRIES);
    ck_assert_uint_eq(back.entries[0].outcome, KPC_MANIFEST_CODE);
    size_t seen = 0;
    for (size_t i = 0; i < back.count; i++)
        seen += memcmp(back.entries[i].object.bytes, object.bytes, 16) == 0;
    ck_assert_uint_eq(seen, 1);
    kpc_manifest_free(&back);
    free(buf2);
    kpc_manifest_deps_free(again);

    /* a file that cannot be vouched for: nothing to write, the manifest freed all the same */
    kpc_manifest one = {0};
    ck_assert_int_eq(kpc_manifest_add(&one, &k[0], KPC_MANIFEST_CODE, da), KPC_OK);
    char missing[4300];
    snprintf(missing, sizeof missing, "%s/gone.h", dir);
    const char *gone[] = {missing};
    kpc_manifest_build none = {gone, 1, NULL, 0, NULL, later()};
    void *nobuf = (void *)1;
    ck_assert_int_eq(kpc_manifest_record_build(&one, &req, &none, KPC_MANIFEST_CODE, &again, &object2, &nobuf, &size2),
                     KPC_E_NOT_FOUND);
    ck_assert_ptr_null(again);
    ck_assert_ptr_null(nobuf);
    ck_assert_mem_eq(object2.bytes, req.bytes, 16);
    ck_assert_uint_eq(one.count, 0);
    kpc_manifest_deps_free(deps);
    kpc_manifest_deps_free(da);
}
END_TEST

/* ---- threads hitting a program whose header changes (the map's check, under TSan) ----- */
/* A platform whose compile reads the file named after "// dep=" in the source: the code
 * object embeds that file's bytes' hash, and the file is the build's one dependency. */
static _Atomic unsigned dep_compiles;

static kpc_status dep_identity(const kpc_root *root, uint8_t id[16], char *desc, size_t cap)
{
    (void)root;
    memset(id, 0x6b, 16);
    snprintf(desc, cap, "dep");
    return KPC_OK;
}

static kpc_status dep_normalize(const kpc_root *root, const uint8_t id[16], const char *t, char *out,
                                size_t cap)
{
    (void)root, (void)id;
    snprintf(out, cap, "%s", t);
    return KPC_OK;
}

static kpc_status dep_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    (void)target;
    memset(b, 0, sizeof *b);
    atomic_fetch_add(&dep_compiles, 1);
    const char *at = strstr(src->code, "// dep=");
    char path[4096];
    snprintf(path, sizeof path, "%.*s", (int)strcspn(at + 7, "\n"), at + 7);
    size_t size;
    void *text = ts_read_file(path, &size);
    b->code_size = 128;
    unsigned char *c = calloc(1, b->code_size);
    memcpy(c, "\x7f" "ELF", 4);
    uint64_t h = text ? XXH3_64bits(text, size) : 0;
    memcpy(c + 64, &h, sizeof h);
    free(text);
    b->code = c;
    kpc_names_encode(NULL, NULL, 0, &b->names, &b->names_size);
    b->deps = calloc(1, sizeof *b->deps);
    b->deps[0] = strdup(path);
    b->num_deps = 1;
    return KPC_OK;
}

static const kpc_platform dep_platform = {
    .name = "dep",
    .identity = dep_identity,
    .target_normalize = dep_normalize,
    .compile = dep_compile,
};

#define VERSIONS 4
static uint64_t version_hash[VERSIONS]; /* of "version V\n", set before the threads start */

typedef struct hitter {
    kpc_context *ctx;
    kpc_source src;
    _Atomic int *version; /* stored after the file holds that version */
    _Atomic bool *stop;
    unsigned gets, stale;
} hitter;

static void *hit_loop(void *arg)
{
    hitter *h = arg;
    while (!atomic_load(h->stop)) {
        int before = atomic_load(h->version); /* the file is at least this new during the get */
        kpc_program *p = NULL;
        if (kpc_program_get(h->ctx, &h->src, &p) != KPC_OK) {
            h->stale++;
            continue;
        }
        size_t size;
        const unsigned char *code = kpc_program_code(p, &size);
        uint64_t got;
        memcpy(&got, code + 64, sizeof got);
        /* a get that began after a version was written never returns an older one */
        bool fresh = false;
        for (int v = before; v < VERSIONS; v++)
            fresh |= got == version_hash[v];
        h->stale += !fresh;
        h->gets++;
        kpc_program_release(p);
    }
    return NULL;
}

START_TEST(threads_see_a_header_change)
{
    kpc_platform_set(&dep_platform);
    char header[4200], code[4400];
    put("dep.h", "version 0\n", header, sizeof header);
    snprintf(code, sizeof code, "kernel\n// dep=%s\n", header);
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = NULL;
    ck_assert_int_eq(kpc_context_create_for_target(c, "fake", &ctx), KPC_OK);
    for (int v = 0; v < VERSIONS; v++) {
        char text[32];
        snprintf(text, sizeof text, "version %d\n", v);
        version_hash[v] = XXH3_64bits(text, strlen(text));
    }
    _Atomic int version = 0;
    _Atomic bool stop = false;
    usleep(1100 * 1000); /* old enough to be cached */
    hitter h[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        h[i] = (hitter){.ctx = ctx, .src = ts_src(code, "dep.hip"), .version = &version, .stop = &stop};
        ck_assert_int_eq(pthread_create(&t[i], NULL, hit_loop, &h[i]), 0);
    }
    for (int v = 1; v < VERSIONS; v++) {
        usleep(300 * 1000);
        char text[32], tmp[4300];
        snprintf(text, sizeof text, "version %d\n", v);
        /* whole, by rename: a compile never reads it half written (that is a torn read,
         * not a stale cache) */
        snprintf(tmp, sizeof tmp, "%s.tmp", header);
        ts_write_file(tmp, text, strlen(text));
        ck_assert_int_eq(rename(tmp, header), 0);
        atomic_store(&version, v);
        usleep(1100 * 1000); /* this version gets cached, and hit */
    }
    usleep(300 * 1000);
    atomic_store(&stop, true);
    unsigned gets = 0, stale = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        gets += h[i].gets;
        stale += h[i].stale;
    }
    ck_assert_uint_eq(stale, 0);
    ck_assert_uint_gt(gets, 100);
    /* each version was compiled, and hits were served in between: far fewer compiles than gets */
    unsigned compiles = atomic_load(&dep_compiles);
    ck_assert_uint_ge(compiles, 4);
    ck_assert_uint_lt(compiles, gets / 4);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    kpc_platform_set(NULL);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("manifest");
    TCase *tc = tcase_create("manifest");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, record_and_match);
    tcase_add_test(tc, record_refuses_recent);
    tcase_add_test(tc, symlinked_header);
    tcase_add_test(tc, encode_decode);
    tcase_add_test(tc, entries_replace_and_cap);
    tcase_add_test(tc, record_build_puts_the_build_first);
    tcase_add_test(tc, threads_see_a_header_change);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ts_run_suite(suite());
}
