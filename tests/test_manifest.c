/*
 * test_manifest.c - the manifest module alone: dependency lists recorded and checked
 * against the file system (edits, deletions, symlinks, the race rule), manifests
 * encoded, decoded (and refused when damaged), their entry lists, the object key, a
 * lookup that hands back what follows a manifest's bytes, a build recorded into a
 * manifest in one call (threads hitting a program whose header changes:
 * test_manifest_threads.c; which options make the working directory part of the key:
 * test_core_compile.c). How the platforms learn the files (dependency files, the include
 * scan): test_manifest_scan.c.
 */
#define _GNU_SOURCE
#include "core/manifest.h"
#include "support.h"

#include <fcntl.h>
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
    kpc_manifest_file f;
    kpc_manifest_file_at(d, i, &f);
    ck_assert((const uint8_t *)f.path >= d->files && (const uint8_t *)f.path + f.path_len <= d->files + d->size);
    return f;
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

/* Entry (object, outcome, d's files) put first in m, borrowing d's bytes: m owns nothing
 * of it, as a manifest a look leaves for the record step owns nothing but its block. */
static void borrow_entry(kpc_manifest *m, const kpc_key *object, uint32_t outcome, const kpc_deps *d)
{
    ck_assert_uint_lt(m->count, KPC_MANIFEST_MAX_ENTRIES);
    memmove(&m->entries[1], &m->entries[0], m->count * sizeof m->entries[0]);
    m->entries[0] = (kpc_manifest_entry){*object, outcome, {.count = d->count, .size = d->size, .files = d->files}};
    m->count++;
}

/* A build of the file at path recorded into *m, and *m the manifest that wrote, as the
 * next request's look reads it: *object, the key its outcome went under. */
static void record_into(kpc_manifest *m, const kpc_key *req, const char *path, uint32_t outcome, kpc_key *object)
{
    const char *paths[] = {path};
    kpc_manifest_build b = {paths, 1, NULL, 0, NULL, later()};
    kpc_deps *deps;
    void *buf;
    size_t size;
    ck_assert_int_eq(kpc_manifest_record_build(m, req, &b, outcome, &deps, object, &buf, &size), KPC_OK);
    kpc_manifest_deps_free(deps);
    ck_assert_int_eq(kpc_manifest_lookup(buf, buf, size, 0, m, NULL), KPC_OK);
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

/* A header in a directory of 650 bytes (a deep build tree) is checked as one in a short
 * one: matched, caught when edited, matched again, caught when gone. */
START_TEST(header_in_a_deep_directory)
{
    char deep[4200], shallow[4200], deep_h[4300];
    int n = snprintf(deep, sizeof deep, "%s", dir);
    for (int i = 0; n < 650; i++) {
        n += snprintf(deep + n, sizeof deep - (size_t)n, "/a-directory-name-of-forty-characters-%02d", i);
        ck_assert_int_eq(mkdir(deep, 0700), 0);
    }
    snprintf(deep_h, sizeof deep_h, "%s/d.h", deep);
    ts_write_file(deep_h, "#define D 1\n", strlen("#define D 1\n"));
    put("s.h", "#define S 1\n", shallow, sizeof shallow);
    const char *paths[] = {deep_h, shallow};
    kpc_deps *d = NULL;
    ck_assert_int_eq(kpc_manifest_deps_record(paths, 2, NULL, 0, NULL, later(), &d), KPC_OK);
    ck_assert_uint_eq(d->count, 2);
    ck_assert_path_is(file_at(d, 0), deep_h);
    ck_assert(kpc_manifest_deps_match(d));
    ts_write_file(deep_h, "#define D 2\n", strlen("#define D 2\n"));
    ck_assert(!kpc_manifest_deps_match(d));
    ts_write_file(deep_h, "#define D 1\n", strlen("#define D 1\n"));
    ck_assert(kpc_manifest_deps_match(d));
    ck_assert_int_eq(unlink(deep_h), 0);
    ck_assert(!kpc_manifest_deps_match(d));
    kpc_manifest_deps_free(d);
}
END_TEST

/* ---- manifests ---------------------------------------------------------------------- */
/* Two headers, a.h ("one") and b.h ("two"), each the one file of a list (da, db), and
 * the object keys those lists give a request key. */
typedef struct two_lists {
    char a[4200], b[4200];
    kpc_deps *da, *db;
    kpc_key req, oa, ob;
} two_lists;

static void make_two_lists(two_lists *t, uint8_t req)
{
    put("a.h", "one\n", t->a, sizeof t->a);
    put("b.h", "two\n", t->b, sizeof t->b);
    t->da = record1(t->a);
    t->db = record1(t->b);
    t->req = (kpc_key){{req, 2, 3}};
    kpc_manifest_object_key(&t->req, t->da, &t->oa);
    kpc_manifest_object_key(&t->req, t->db, &t->ob);
}

START_TEST(encode_decode)
{
    two_lists t;
    make_two_lists(&t, 1);
    char *a = t.a, *b = t.b;
    kpc_deps *da = t.da, *db = t.db;
    kpc_key req = t.req, oa = t.oa, ob = t.ob;
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
    borrow_entry(&m, &oa, KPC_MANIFEST_CODE, da);
    borrow_entry(&m, &ob, KPC_MANIFEST_LOG, db);
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
    borrow_entry(&one, &oa, KPC_MANIFEST_CODE, da);
    void *obuf;
    size_t osize;
    ck_assert_int_eq(kpc_manifest_encode(&one, &obuf, &osize), KPC_OK);
    kpc_manifest_free(&one);
    ck_assert_int_eq(kpc_manifest_decode(obuf, osize, &one), KPC_OK);
    one.block = obuf;
    taken = kpc_manifest_take(&one, &one.entries[0]);
    ck_assert_ptr_eq(taken->block, obuf);
    ck_assert_ptr_null(one.block);
    kpc_manifest_free(&one);
    kpc_manifest_object_key(&req, taken, &again);
    ck_assert_mem_eq(again.bytes, oa.bytes, 16);
    kpc_manifest_deps_free(taken);

    /* a size past what any writer makes is refused before a byte is read */
    ck_assert_int_eq(kpc_manifest_decode(buf, (size_t)KPC_MANIFEST_MAX_BYTES + 1, &back), KPC_E_CORRUPT);
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

/* A manifest read with bytes after it (the record a manifest's record carries), inside
 * an allocation that holds more before it (the record's header): a match hands the
 * allocation back; the list of a manifest of one entry keeps its bytes where they were
 * read, before the tail (borrowed, nothing moved or copied), of two a copy, and then the
 * tail moves to the head of the allocation. */
START_TEST(lookup_hands_back_the_tail)
{
    two_lists t;
    make_two_lists(&t, 4);
    static const char tail[] = "the record the manifest's record carries";
    for (int entries = 0; entries <= 2; entries++) { /* 0: one entry, its file gone */
        kpc_manifest m = {0};
        if (entries == 2)
            borrow_entry(&m, &t.ob, KPC_MANIFEST_CODE, t.db);
        borrow_entry(&m, &t.oa, KPC_MANIFEST_CODE, t.da);
        void *buf;
        size_t size;
        ck_assert_int_eq(kpc_manifest_encode(&m, &buf, &size), KPC_OK);
        kpc_manifest_free(&m);
        enum { BEFORE = 256 };
        uint8_t *all = malloc(BEFORE + size + sizeof tail);
        memset(all, 0xee, BEFORE);
        memcpy(all + BEFORE, buf, size);
        memcpy(all + BEFORE + size, tail, sizeof tail);
        if (entries == 0)
            ck_assert_int_eq(rename(t.a, t.b), 0);
        kpc_manifest back;
        kpc_manifest_match_out mo;
        ck_assert_int_eq(kpc_manifest_lookup(all, all + BEFORE, size, sizeof tail, &back, &mo), KPC_OK);
        if (entries == 0) { /* no match: the manifest keeps it all, the tail is no one's */
            ck_assert(!mo.found);
            ck_assert_ptr_null(mo.block);
            ck_assert_ptr_eq(back.block, all);
            ck_assert_uint_eq(back.count, 1);
            kpc_manifest_free(&back);
            ck_assert_int_eq(rename(t.b, t.a), 0);
            put("b.h", "two\n", t.b, sizeof t.b);
            free(buf);
            continue;
        }
        ck_assert(mo.found);
        ck_assert_mem_eq(mo.object.bytes, t.oa.bytes, 16);
        ck_assert_mem_eq(mo.tail, tail, sizeof tail);
        ck_assert(mo.borrowed == (entries == 1));
        if (mo.borrowed) { /* where they were read, and the tail where it was read */
            ck_assert_ptr_eq(mo.block, all);
            ck_assert_ptr_eq(mo.tail, all + BEFORE + size);
            ck_assert_ptr_null(mo.deps->block);
            ck_assert_ptr_eq(mo.deps->files, all + BEFORE + size - t.da->size);
            ck_assert_mem_eq(mo.deps->files, (uint8_t *)buf + size - t.da->size, t.da->size);
        } else { /* the tail at the head of what is left of the allocation */
            ck_assert_ptr_eq(mo.tail, mo.block);
        }
        ck_assert_uint_eq(mo.deps->count, 1);
        ck_assert_path_is(file_at(mo.deps, 0), t.a);
        ck_assert(kpc_manifest_deps_match(mo.deps));
        kpc_key again;
        kpc_manifest_object_key(&t.req, mo.deps, &again);
        ck_assert_mem_eq(again.bytes, t.oa.bytes, 16);
        if (mo.borrowed) /* given the allocation, the list frees it */
            mo.deps->block = mo.block;
        else
            free(mo.block);
        kpc_manifest_deps_free(mo.deps);
        free(buf);
    }
    kpc_manifest_deps_free(t.da);
    kpc_manifest_deps_free(t.db);
}
END_TEST

START_TEST(entries_replace_and_cap)
{
    /* builds of one request key recorded one after another, each into the manifest the
     * last one wrote, as the requests behind a manifest do */
    enum { N = KPC_MANIFEST_MAX_ENTRIES + 3 };
    static char path[N][4200];
    kpc_key req = {{5}}, object[N], again;
    kpc_manifest m = {0};
    for (size_t i = 0; i < N; i++) {
        char name[16], text[16];
        snprintf(name, sizeof name, "h%zu.h", i);
        snprintf(text, sizeof text, "%zu\n", i);
        put(name, text, path[i], sizeof path[i]);
        record_into(&m, &req, path[i], KPC_MANIFEST_CODE, &object[i]);
    }
    ck_assert_uint_eq(m.count, KPC_MANIFEST_MAX_ENTRIES);
    ck_assert_mem_eq(m.entries[0].object.bytes, object[N - 1].bytes, 16);
    ck_assert_mem_eq(m.entries[KPC_MANIFEST_MAX_ENTRIES - 1].object.bytes, object[3].bytes, 16); /* 0..2 dropped */
    /* a build of files already listed moves its entry first, no duplicate */
    record_into(&m, &req, path[5], KPC_MANIFEST_LOG, &again);
    ck_assert_mem_eq(again.bytes, object[5].bytes, 16);
    ck_assert_uint_eq(m.count, KPC_MANIFEST_MAX_ENTRIES);
    ck_assert_mem_eq(m.entries[0].object.bytes, object[5].bytes, 16);
    ck_assert_uint_eq(m.entries[0].outcome, KPC_MANIFEST_LOG);
    ck_assert_mem_eq(m.entries[1].object.bytes, object[N - 1].bytes, 16);
    size_t seen = 0;
    for (size_t i = 0; i < m.count; i++)
        seen += memcmp(m.entries[i].object.bytes, object[5].bytes, 16) == 0;
    ck_assert_uint_eq(seen, 1);
    kpc_manifest_free(&m);
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
        borrow_entry(&m, &k[i], KPC_MANIFEST_CODE, da);
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
    ck_assert_ptr_null(m.block);
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
    ck_assert_int_eq(kpc_manifest_lookup(buf, buf, size, 0, &m, NULL), KPC_OK); /* m owns buf now */
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
    borrow_entry(&one, &k[0], KPC_MANIFEST_CODE, da);
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

static Suite *suite(void)
{
    Suite *s = suite_create("manifest");
    TCase *tc = tcase_create("manifest");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, record_and_match);
    tcase_add_test(tc, record_refuses_recent);
    tcase_add_test(tc, symlinked_header);
    tcase_add_test(tc, header_in_a_deep_directory);
    tcase_add_test(tc, encode_decode);
    tcase_add_test(tc, lookup_hands_back_the_tail);
    tcase_add_test(tc, entries_replace_and_cap);
    tcase_add_test(tc, record_build_puts_the_build_first);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ts_run_suite(suite());
}
